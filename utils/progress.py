"""Progress bars for the long phases (AIOB timing, big generations, whole-job simulations).

One rule everywhere: a tqdm bar on stderr, shown only when stderr is a terminal and only once the phase has
run for :data:`DELAY_S` seconds, so that short runs, pipes, files and CI logs stay as they were.  The bar is
removed when the phase ends.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

DELAY_S = 2.0
"""Seconds a phase runs before its bar appears."""


def on_terminal() -> bool:
    """Whether stderr is a terminal (bars are drawn only there)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def progress(iterable: Iterable | None = None, *, total: int | None = None, desc: str | None = None,
             unit: str = "it", **kwargs: Any):
    """A tqdm bar over ``iterable`` (or updated by hand up to ``total``), quiet off a terminal."""
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, unit=unit, file=sys.stderr, disable=not on_terminal(),
                delay=DELAY_S, leave=False, dynamic_ncols=True, **kwargs)


def say(log: Callable[[str], None] | None, message: str) -> None:
    """``log(message)`` without garbling a bar on the terminal (the bars are cleared, then redrawn)."""
    if log is None:
        return
    from tqdm import tqdm

    with tqdm.external_write_mode(file=sys.stderr):
        log(message)

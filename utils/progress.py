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


class _NoBar:
    """What :func:`progress` returns off a terminal: tqdm's interface, doing nothing.  tqdm is not
    imported then (about 60 ms of a whole SimAI-model run: its version lookup reads package metadata)."""

    disable = True

    def __init__(self, iterable: Iterable | None) -> None:
        self._iterable = iterable

    def __iter__(self):
        return iter(self._iterable if self._iterable is not None else ())

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: float = 1) -> None:
        return None

    def close(self) -> None:
        return None

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        return None

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        return None

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        return None


def progress(iterable: Iterable | None = None, *, total: int | None = None, desc: str | None = None,
             unit: str = "it", **kwargs: Any):
    """A tqdm bar over ``iterable`` (or updated by hand up to ``total``), quiet off a terminal."""
    if not on_terminal():
        return _NoBar(iterable)
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, unit=unit, file=sys.stderr, disable=not on_terminal(),
                delay=DELAY_S, leave=False, dynamic_ncols=True, **kwargs)


def say(log: Callable[[str], None] | None, message: str) -> None:
    """``log(message)`` without garbling a bar on the terminal (the bars are cleared, then redrawn)."""
    if log is None:
        return
    if not on_terminal():
        log(message)
        return
    from tqdm import tqdm

    with tqdm.external_write_mode(file=sys.stderr):
        log(message)

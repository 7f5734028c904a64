"""Progress bars of the replay's phases (process groups, init, warm-up, the measured iterations).

A bar appears on stderr once a phase has run ``DELAY_S`` seconds (tqdm's ``delay``), on rank 0 only,
and only when stderr is a terminal: logs and pipes stay clean.  Console lines printed while a bar is
shown go through :meth:`Progress.write`, which clears the bar first and draws it again after, so the
two never interleave on one line.  A disabled :class:`Progress` costs one attribute test per step.
"""

from __future__ import annotations

import sys
from typing import Any

DELAY_S = 2.0
"""A phase shorter than this shows no bar."""


class Progress:
    """``start(desc, total)`` opens a phase (closing the previous one), ``step()`` counts one unit of
    it, ``close()`` ends it.  ``enabled`` False: every call does nothing."""

    def __init__(self, enabled: bool, unit: str = "op") -> None:
        self.enabled = enabled
        self.unit = unit
        self._bar: Any = None

    @classmethod
    def for_rank(cls, rank: int, stream: Any = None, unit: str = "op") -> Progress:
        """Enabled on rank 0 when ``stream`` (stderr by default) is a terminal."""
        stream = sys.stderr if stream is None else stream
        isatty = getattr(stream, "isatty", None)
        return cls(rank == 0 and bool(isatty and isatty()), unit)

    def start(self, desc: str, total: int) -> None:
        self.close()
        if not self.enabled or total <= 0:
            return
        from tqdm import tqdm

        self._bar = tqdm(total=total, desc=desc, unit=self.unit, file=sys.stderr, delay=DELAY_S, leave=False,
                         mininterval=0.5, dynamic_ncols=True)

    def step(self, n: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def note(self, text: str) -> None:
        """Text after the bar (``iteration 2/5``)."""
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def write(self, print_fn: Any, text: str) -> None:
        """``print_fn(text, flush=True)`` with the bar out of the way."""
        if self._bar is None:
            print_fn(text, flush=True)
            return
        from tqdm import tqdm

        with tqdm.external_write_mode(file=sys.stdout):
            print_fn(text, flush=True)

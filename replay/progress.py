"""Progress of the replay's phases (process groups, init, warm-up, the measured iterations).

On a terminal, a bar appears on stderr once a phase has run ``DELAY_S`` seconds (tqdm's ``delay``), on rank 0
only.  Console lines printed while a bar is shown go through :meth:`Progress.write`, which clears the bar
first and draws it again after, so the two never interleave on one line.

Off a terminal (a log file, a pipe, ``pssh`` collecting a multi-node run) a bar would be noise, but silence
for the minutes a big job's process groups or warm-up take reads as a hang: rank 0 then prints plain lines
instead, flushed, on stdout beside its other lines: one as each phase starts (``[RANK 0] warm-up: 2,400
operations``) and one every ``LINE_EVERY_S`` seconds within a phase (``[RANK 0] warm-up: 1,200/2,400
operations (50%), 30 s``).  A disabled :class:`Progress` costs two attribute tests per step.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

DELAY_S = 2.0
"""A phase shorter than this shows no bar."""
LINE_EVERY_S = 30.0
"""Off a terminal, the seconds between two progress lines of one phase."""


class Progress:
    """``start(desc, total)`` opens a phase (closing the previous one), ``step()`` counts one unit of
    it, ``close()`` ends it.  ``enabled``: a bar on stderr; ``lines``: plain lines through ``print_fn``
    (``prefix`` before each) instead; neither: every call does nothing."""

    def __init__(self, enabled: bool, unit: str = "op", lines: bool = False, print_fn: Callable[..., Any] = print,
                 prefix: str = "", every_s: float = LINE_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.enabled = enabled
        self.lines = lines and not enabled
        self.unit = unit
        self._bar: Any = None
        self._print = print_fn
        self._prefix = prefix
        self._every_s = every_s
        self._clock = clock
        self._phase: list[Any] | None = None
        """Lines mode, within a phase: [desc, total, done, started, next line due, note, unit]."""

    @classmethod
    def for_rank(cls, rank: int, stream: Any = None, unit: str = "op", print_fn: Callable[..., Any] = print) -> Progress:
        """Rank 0: a bar when ``stream`` (stderr by default) is a terminal, else lines through ``print_fn``
        (stdout); other ranks: nothing."""
        stream = sys.stderr if stream is None else stream
        isatty = getattr(stream, "isatty", None)
        tty = bool(isatty and isatty())
        return cls(rank == 0 and tty, unit, lines=rank == 0 and not tty, print_fn=print_fn, prefix=f"[RANK {rank}] ")

    def _units(self, count: int, unit: str) -> str:
        name = {"op": "operation"}.get(unit, unit)
        return f"{count:,} {name}{'' if count == 1 else 's'}"

    def start(self, desc: str, total: int, unit: str | None = None) -> None:
        """Open phase ``desc`` of ``total`` units (``unit``: the Progress's own unless given)."""
        self.close()
        if total <= 0:
            return
        unit = unit or self.unit
        if self.lines:
            now = self._clock()
            self._phase = [desc, total, 0, now, now + self._every_s, "", unit]
            self._print(f"{self._prefix}{desc}: {self._units(total, unit)}", flush=True)
            return
        if not self.enabled:
            return
        from tqdm import tqdm

        self._bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, delay=DELAY_S, leave=False,
                         mininterval=0.5, dynamic_ncols=True)

    def step(self, n: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(n)
        elif self._phase is not None:
            phase = self._phase
            phase[2] += n
            now = self._clock()
            if now >= phase[4]:
                phase[4] = now + self._every_s
                desc, total, done, started, _, note, unit = phase
                self._print(f"{self._prefix}{desc}: {done:,}/{self._units(total, unit)} ({100 * done / total:.0f}%)"
                            f"{', ' + note if note else ''}, {now - started:.0f} s", flush=True)

    def note(self, text: str) -> None:
        """Text after the bar, or in the next line (``iteration 2/5``)."""
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)
        elif self._phase is not None:
            self._phase[5] = text

    def close(self) -> None:
        self._phase = None
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

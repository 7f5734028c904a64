"""A watchdog thread that turns hangs and interrupts of a distributed run into one message and an exit.

Two things can leave a rank blocked forever inside a collective: a peer that died or never arrives
(NCCL without async error handling waits forever; gloo waits its timeout), and a signal (Ctrl-C, or
torchrun's SIGTERM after another worker failed), whose Python handler cannot run while the main
thread sits in C++.  The thread here handles both: it bounds each watched operation by
``timeout_s`` (plus a grace period, so that the backend's own timeout error, which names the cause,
normally wins), and it wakes on signals through ``signal.set_wakeup_fd`` (Python docs, ``signal``:
the C-level handler writes the signal number to that file descriptor from any thread).  Either way
it calls ``on_fatal`` (flush the log; it may return a note to append), prints one line naming what was
running, and ends the process
with ``os._exit`` (exit status 1 for a timeout, 128 + the signal number for a signal).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Watchdog:
    """``watch(what, bounded)`` before each step, ``idle()`` after; ``what`` is formatted by
    ``describe(what)`` only when a message is printed (the hot path stores a reference)."""

    def __init__(self, timeout_s: float, prefix: str, describe: Callable[[Any], str] = str,
                 on_fatal: Callable[[], str | None] | None = None, grace_s: float | None = None) -> None:
        self.timeout_s = float(timeout_s)
        self.grace_s = max(2.0, 0.1 * self.timeout_s) if grace_s is None else grace_s
        self.prefix = prefix
        self.describe = describe
        self.on_fatal = on_fatal or (lambda: None)
        self._what: Any = None
        self._bounded = False
        self._since = 0.0
        self._last: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pipe: tuple[int, int] | None = None
        self._old_handlers: dict[int, Any] = {}
        self._old_fd = -1

    # ---- the hot path ---------------------------------------------------------------------------

    def watch(self, what: Any, bounded: bool = True) -> None:
        """``what`` starts now; when ``bounded``, it must end within the timeout."""
        self._since = time.monotonic()
        self._bounded = bounded
        self._what = what

    def idle(self) -> None:
        self._last = self._what
        self._what = None

    @property
    def current(self) -> Any:
        """What is running (or ran last; None before anything)."""
        return self._what if self._what is not None else self._last

    # ---- lifecycle ------------------------------------------------------------------------------

    def start(self) -> Watchdog:
        """Start the thread; in the main thread also route SIGINT/SIGTERM to it."""
        if threading.current_thread() is threading.main_thread():
            read, write = os.pipe()
            os.set_blocking(write, False)
            self._pipe = (read, write)
            for signum in _SIGNALS:
                # a Python-level handler must exist for the wakeup fd to be written; the thread acts
                self._old_handlers[signum] = signal.signal(signum, lambda s, f: None)
            self._old_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._loop, name="replay-watchdog", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._pipe is not None:
            signal.set_wakeup_fd(self._old_fd)
            for signum, handler in self._old_handlers.items():
                signal.signal(signum, handler)
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None

    def __enter__(self) -> Watchdog:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- the thread -----------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self._pipe is not None:
                ready, _, _ = select.select([self._pipe[0]], [], [], 0.25)
                if ready:
                    data = os.read(self._pipe[0], 64)
                    for signum in data:
                        if signum in _SIGNALS:
                            self._fatal(f"stopped by {signal.Signals(signum).name} {self._where()}", 128 + signum)
            else:
                self._stop.wait(0.25)
            what, since = self._what, self._since
            if what is not None and self._bounded and time.monotonic() - since > self.timeout_s + self.grace_s:
                self._fatal(f"{self.describe(what)} did not complete within --timeout {self.timeout_s:g} s "
                            "(a rank died, hangs, or never arrived)", 1)

    def _where(self) -> str:
        if self._what is not None:
            return f"during {self.describe(self._what)}"
        if self._last is not None:
            return f"after {self.describe(self._last)}"
        return "before the first operation"

    def _fatal(self, message: str, status: int) -> None:
        try:
            note = self.on_fatal()
            print(f"{self.prefix}{message}{note or ''}", file=sys.stderr, flush=True)
        finally:
            os._exit(status)

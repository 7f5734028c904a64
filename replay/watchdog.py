"""A watchdog thread that turns hangs and interrupts of a distributed run into one message and an exit.

Three things can leave a rank blocked forever inside a collective: a peer that died or never arrives
(NCCL without async error handling waits forever; gloo waits its timeout), a signal (Ctrl-C, or
torchrun's SIGTERM after another worker failed), whose Python handler cannot run while the main
thread sits in C++, and a launcher that was killed outright (SIGKILL leaves torchrun no chance to
stop its workers, which would run on to the end).  The thread here handles all three: it bounds each
watched operation by ``timeout_s`` (or the limit given with it, plus a grace period, so that the
backend's own timeout error, which names the cause, normally wins), it wakes on signals through
``signal.set_wakeup_fd`` (Python docs, ``signal``: the C-level handler writes the signal number to
that file descriptor from any thread), and, given the launcher's process id, it polls ``os.getppid()``:
a new parent means the launcher is gone (and so does :data:`PARENT_DEATH_SIGNAL`, which Linux sends
then).  Each way it calls ``on_fatal`` (flush the log; it may return a note to append), prints one line
naming what was running, and ends the process with ``os._exit`` (exit status 1 for a timeout or a lost
launcher, 128 + the signal number for a signal).
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
PARENT_DEATH_SIGNAL = signal.SIGHUP
"""The signal the kernel sends when the launcher dies (:func:`replay.env.bind_to_parent`); a worker runs
in its own session (torchrun starts each in a new one), so no terminal's hangup reaches it."""
_TICK_S = 0.25
"""How often the thread looks at the clock and the parent process."""


class Watchdog:
    """``watch(what, bounded)`` before each step, ``idle()`` after; ``what`` is formatted by
    ``describe(what)`` only when a message is printed (the hot path stores a reference).  ``parent``:
    the launcher's process id (see :func:`replay.env.bind_to_parent`), or None not to watch it."""

    def __init__(self, timeout_s: float, prefix: str, describe: Callable[[Any], str] = str,
                 on_fatal: Callable[[], str | None] | None = None, grace_s: float | None = None,
                 parent: int | None = None) -> None:
        self.timeout_s = float(timeout_s)
        self._grace_given = grace_s
        self.grace_s = self._grace(self.timeout_s)
        self.prefix = prefix
        self.describe = describe
        self.on_fatal = on_fatal or (lambda: None)
        self.parent = parent
        self._what: Any = None
        self._bounded = False
        self._limit: tuple[float, str] | None = None
        self._since = 0.0
        self._last: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pipe: tuple[int, int] | None = None
        self._old_handlers: dict[int, Any] = {}
        self._old_fd = -1

    # ---- the hot path ---------------------------------------------------------------------------

    def watch(self, what: Any, bounded: bool = True, limit: tuple[float, str] | None = None) -> None:
        """``what`` starts now; when ``bounded``, it must end within the timeout, or within ``limit``
        (seconds, and the flag that set them) when given."""
        self._since = time.monotonic()
        self._bounded = bounded
        self._limit = limit
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
        """Start the thread; in the main thread also route SIGINT/SIGTERM (and, watching a launcher,
        :data:`PARENT_DEATH_SIGNAL`) to it."""
        if threading.current_thread() is threading.main_thread():
            read, write = os.pipe()
            os.set_blocking(write, False)
            self._pipe = (read, write)
            for signum in self._signals():
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

    def _signals(self) -> tuple[int, ...]:
        return _SIGNALS + ((PARENT_DEATH_SIGNAL,) if self.parent is not None else ())

    def _grace(self, limit_s: float) -> float:
        return max(2.0, 0.1 * limit_s) if self._grace_given is None else self._grace_given

    def parent_gone(self) -> bool:
        """Whether the launcher this process was started by has died (the process has a new parent)."""
        return self.parent is not None and os.getppid() != self.parent

    def end_if_launcher_gone(self) -> None:
        """End this rank with the launcher's line when the launcher is gone: an operation that failed because a peer
        ended for that reason (its connection closed) is named by the cause, as the peer names it."""
        if self.parent_gone():
            self._launcher_gone()

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self._pipe is not None:
                ready, _, _ = select.select([self._pipe[0]], [], [], _TICK_S)
                if ready:
                    data = os.read(self._pipe[0], 64)
                    for signum in data:
                        # the parent-death signal comes as the launcher dies: maybe before the new parent
                        if signum == PARENT_DEATH_SIGNAL and self.parent is not None:
                            self._launcher_gone()
                        if signum in _SIGNALS:
                            if self.parent_gone():
                                self._launcher_gone()
                            self._fatal(f"stopped by {signal.Signals(signum).name} {self._where()}", 128 + signum)
            else:
                self._stop.wait(_TICK_S)
            if self.parent_gone():
                self._launcher_gone()
            what, since, limit = self._what, self._since, self._limit
            if what is None or not self._bounded:
                continue
            seconds, flag = limit if limit is not None else (self.timeout_s, "--timeout")
            if time.monotonic() - since > seconds + self._grace(seconds):
                self._fatal(f"{self.describe(what)} did not complete within {flag} {seconds:g} s "
                            "(a rank died, hangs, or never arrived)", 1)

    def _launcher_gone(self) -> None:
        self._fatal(f"the launcher (process {self.parent}) is gone; stopping {self._where()}", 1)

    def _where(self) -> str:
        if self._what is not None:
            return f"during {self.describe(self._what)}"
        if self._last is not None:
            return f"after {self.describe(self._last)}"
        return "before the first operation"

    def _fatal(self, message: str, status: int) -> None:
        try:
            note = self.on_fatal()
            # one write: ranks share the launcher's stderr, unbuffered (python -u), so a line written in
            # two parts (text, newline) can be cut by another rank's
            sys.stderr.write(f"{self.prefix}{message}{note or ''}\n")
            sys.stderr.flush()
        finally:
            os._exit(status)

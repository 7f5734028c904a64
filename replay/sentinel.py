"""A sentinel process that ends a replay rank whose launcher died while the rank was stopped.

A killed launcher reaches its workers two ways (:func:`replay.env.bind_to_parent`): the kernel's parent-death
signal and the watchdog thread's poll of the parent.  Neither reaches a *stopped* rank (SIGSTOP, a debugger,
Ctrl-Z): the signal stays pending and no thread runs, so the rank stayed behind forever, holding its GPU and
its ports.  Only a signal sent from outside can wake it, so each rank under a launcher starts this small
process: it polls the rank's parent in ``/proc`` (no pid-reuse race: it reads the rank's own ``ppid``) and,
once the launcher is gone, sends SIGCONT (the pending SIGHUP is then delivered and the watchdog ends the rank
with its one line, the log flushed) and, should the rank still run ``grace_s`` later, SIGKILL.  The sentinel
asks the kernel for SIGKILL at the rank's own death (``PR_SET_PDEATHSIG``), so it never outlives it; it runs
in its own session (terminal signals are not its business), holds no file of the rank's (a pipe reader such
as ``pssh`` or ``subprocess.run`` is not kept waiting by it), and costs one small Python process per rank.
Linux only (``prctl`` and ``/proc``): elsewhere nothing is started and the watchdog's poll remains.
"""

from __future__ import annotations

import os
import subprocess
import sys

GRACE_S = 10.0
"""How long a continued rank has to end by itself (its watchdog flushes the log and exits at once) before the
sentinel kills it."""
POLL_S = 0.5
"""How often the sentinel reads the rank's parent."""

_CODE = r"""
import ctypes, os, signal, sys, time
worker, launcher, grace, poll = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, ctypes.c_ulong(int(signal.SIGKILL)), ctypes.c_ulong(0),
                                             ctypes.c_ulong(0), ctypes.c_ulong(0))   # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass
if os.getppid() != worker:   # the rank ended before the line above
    sys.exit(0)


def stat():
    try:
        with open(f"/proc/{worker}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1])
    except (OSError, IndexError, ValueError):
        return None


while True:
    now = stat()
    if now is None or now[0] in ("Z", "X"):
        sys.exit(0)
    if now[1] != launcher:
        break
    time.sleep(poll)
try:
    os.kill(worker, signal.SIGCONT)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        now = stat()
        if now is None or now[0] in ("Z", "X"):
            sys.exit(0)
        time.sleep(0.1)
    os.kill(worker, signal.SIGKILL)
except ProcessLookupError:
    pass
"""


def start_sentinel(launcher: int, grace_s: float = GRACE_S, poll_s: float = POLL_S) -> subprocess.Popen | None:
    """Start the sentinel of this process, whose launcher is process ``launcher``; None where it cannot run
    (not Linux, or the process could not start: the watchdog's poll remains)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return subprocess.Popen([sys.executable, "-I", "-S", "-c", _CODE, str(os.getpid()), str(launcher),
                                 repr(float(grace_s)), repr(float(poll_s))],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                close_fds=True, start_new_session=True)
    except OSError:
        return None

"""Timing one operation: CUDA events on a GPU, the monotonic host clock on CPU; a precise sleep.

On a GPU, events recorded on the current stream before and after the call measure the operation
on the device (with ``async_op=False`` torch makes the current stream wait for NCCL's stream, so
the end event follows the collective).  On CPU, gloo's calls return when the operation has
completed, so ``time.perf_counter_ns`` around the call measures it.
"""

from __future__ import annotations

import time

import torch


class OpTimer:
    """``start()``, run the operation, ``stop()`` -> elapsed milliseconds."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        if self.cuda:
            self._begin = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
        self._t0 = 0

    def start(self) -> None:
        if self.cuda:
            self._begin.record()
        else:
            self._t0 = time.perf_counter_ns()

    def stop(self) -> float:
        """Milliseconds since :meth:`start` (waits for the device on a GPU)."""
        if self.cuda:
            self._end.record()
            self._end.synchronize()
            return float(self._begin.elapsed_time(self._end))
        return (time.perf_counter_ns() - self._t0) / 1e6


_SPIN_NS = 1_000_000
"""The last millisecond of a sleep is spun: ``time.sleep`` overshoots by tens of microseconds."""


def precise_sleep(duration_ns: float) -> None:
    """Wait ``duration_ns`` nanoseconds: sleep, then spin the last millisecond."""
    deadline = time.perf_counter_ns() + int(duration_ns)
    coarse = duration_ns - _SPIN_NS
    if coarse > 0:
        time.sleep(coarse / 1e9)
    while time.perf_counter_ns() < deadline:
        pass

"""The AIOB measurement loop: time an operation's forward and backward separately, after warm-up.

Clocks: on a GPU, CUDA events recorded around the call on the current stream, read after the end
event completes (kernel time, without the host's launch latency before the first kernel); on a CPU,
``time.perf_counter_ns`` around the call (CPU kernels run synchronously, so the call's return is its
completion).  The device is synchronised before each sample so that no earlier work overlaps it.

Outliers follow AICB (``utils/utils.py:process_all_keys``): samples above three times the minimum are
dropped (a page fault, a clock ramp, another process); ``time_gpu_max`` and ``time_gpu_avg`` are the
maximum and mean of the samples kept, ``time_gpu_min`` the minimum.  Times are nanoseconds here and
microseconds in the compute file.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from mocked_model.aiob.compute_file import SectionTimes

OUTLIER_FACTOR = 3.0
"""Samples above this multiple of the minimum are dropped (AICB's rule)."""
MAX_FALLBACKS = 4
"""Most fallbacks one operation's first run may take before its error is raised."""


class Clock:
    """Times one call in nanoseconds."""

    name = "clock"

    def time(self, fn: Callable[[], Any]) -> tuple[Any, float]:
        raise NotImplementedError


class HostClock(Clock):
    """``perf_counter_ns`` around the call (CPU: kernels run synchronously)."""

    name = "time.perf_counter_ns (CPU, synchronous kernels)"

    def time(self, fn: Callable[[], Any]) -> tuple[Any, float]:
        start = time.perf_counter_ns()
        result = fn()
        return result, float(time.perf_counter_ns() - start)


class CudaClock(Clock):
    """CUDA events on the current stream around the call, after a device synchronisation."""

    name = "CUDA events (torch.cuda.Event, elapsed_time)"

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def time(self, fn: Callable[[], Any]) -> tuple[Any, float]:
        torch.cuda.synchronize(self.device)
        self.start.record()
        result = fn()
        self.end.record()
        self.end.synchronize()
        return result, self.start.elapsed_time(self.end) * 1e6  # ms -> ns


def clock_for(device: torch.device) -> Clock:
    return CudaClock(device) if device.type == "cuda" else HostClock()


def summarize(samples_ns: list[float], implementation: str | None = None) -> SectionTimes:
    """Max, min and average in microseconds after dropping samples above 3x the minimum."""
    if not samples_ns:
        raise ValueError("no samples to summarize")
    low = min(samples_ns)
    kept = [s for s in samples_ns if s <= OUTLIER_FACTOR * low] or [low]
    return SectionTimes(max(kept) / 1000, low / 1000, sum(kept) / len(kept) / 1000, implementation)


@dataclass
class OpSamples:
    """Forward and backward samples of one operation (ns) and its implementation."""

    forward_ns: list[float] = field(default_factory=list)
    backward_ns: list[float] = field(default_factory=list)
    implementation: str = ""


def sample_op(op, clock: Clock, warmup: int, samples: int, tick: Callable[[], Any] | None = None) -> OpSamples:
    """Run ``op`` (a :class:`~mocked_model.aiob.modules.TimedOp`) ``warmup + samples`` times, timing
    forward and backward separately on the last ``samples``; ``tick()`` after each run (a progress bar).  An
    optional kernel that fails on the first run is replaced by its fallback and the run retried, up to
    :data:`MAX_FALLBACKS` times (the implementation records why)."""
    out = OpSamples()
    fallbacks = 0
    index = 0
    while index < max(warmup, 1) + samples:
        op.reset()
        try:
            result, forward_ns = clock.time(op.forward)
            backward_ns = clock.time(partial(op.backward, result))[1] if op.has_backward else 0.0
        except Exception as exc:  # an optional kernel (TE, apex, flash-attn, grouped_gemm, torch.compile) may fail
            # the first run tries each fallback in turn (TE's FP8, then TE in bf16, then torch, ...)
            if index == 0 and fallbacks < MAX_FALLBACKS and op.use_fallback(_one_line(exc)):
                fallbacks += 1
                continue
            raise
        del result
        if tick is not None:
            tick()
        if index >= max(warmup, 1):
            out.forward_ns.append(forward_ns)
            out.backward_ns.append(backward_ns)
        index += 1
    out.implementation = op.implementation
    return out


def _one_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:80]}" if text else type(exc).__name__

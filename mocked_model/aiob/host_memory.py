"""The memory AIOB's timing takes, estimated from the operations it would build (no torch here), and the memory
this machine has available.

AIOB builds one operation at a time (:func:`mocked_model.aiob.measure.measure_job` drops each before the next),
so its peak is the largest operation's tensors.  Counted are the tensors an operation cannot do without: its
inputs, weights and outputs, each again as a gradient in the backward, the fp32 ``main_grad`` of a weight,
the attention scores of unfused attention, the optimizer's capped parameters and states.  Workspaces,
allocator slack and the framework itself are not: the estimate is a lower bound, so that a job refused for it
could not have fitted (``aicb.py --check`` refuses it in one line rather than let every rank fail after
minutes of timing).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from mocked_model.aiob.layout import OPTIMIZER_CAP, OpSpec, op_specs
from utils.config import JobConfig

OPTIMIZER_BYTES_PER_PARAM = 16
"""The optimizer op's fp32 parameter, gradient and two Adam moments (its model copy is not counted)."""


@dataclass(frozen=True)
class OpMemory:
    """The bytes one operation's tensors take, and the operation (``section``, ``kind``, ``shape``)."""

    bytes: int
    section: str
    kind: str
    shape: tuple[int, ...]

    def describe(self) -> str:
        return f"{self.section} ({self.kind} {'x'.join(map(str, self.shape)) or 'step'})"


def op_bytes(spec: OpSpec, element: int, device: str = "cpu") -> int:
    """A lower bound of the bytes the operation of ``spec`` allocates with ``element``-byte values (the
    timing dtype: float32, 4, on a CPU)."""
    d, shape = spec.dims, spec.shape
    n = math.prod(shape) if shape else 0
    backward = 2 if spec.backward else 1  # each tensor again as its gradient
    if spec.kind in ("linear", "experts"):
        count = len(d["tokens"]) if spec.kind == "experts" else 1
        rows = sum(d["tokens"]) if spec.kind == "experts" else n // max(shape[-1], 1)
        weights = count * d["in"] * d["out"]
        tensors = rows * d["in"] + weights + rows * d["out"]
        return backward * tensors * element + (weights * 4 if spec.kind == "linear" else 0)
    if spec.kind == "attention":
        b, h, g, s = d["micro"], d["heads"], d["groups"], d["seq"]
        tensors = b * s * (h * d["head_dim"] + g * d["head_dim"] + g * d["v_dim"] + h * d["v_dim"])
        if d.get("impl") == "unfused":
            tensors += b * h * s * s  # the scores (Megatron's buffer), and the probabilities below
            tensors += b * h * s * s
        return backward * tensors * element
    if spec.kind == "embedding":
        table = d["vocab"] * d["hidden"] + (d.get("positions") or 0) * d["hidden"]
        return (2 * table + n * d["hidden"]) * element  # the table, its gradient, the output
    if spec.kind == "loss":
        return backward * n * max(element, 4)  # the logits and their fp32 softmax
    if spec.kind == "router":
        tokens = n // max(shape[-1], 1)
        return backward * (n + d["in"] * d["experts"]) * element + tokens * d["experts"] * 4
    if spec.kind == "optimizer":
        held = max(min(d.get("params", 0), OPTIMIZER_CAP["cuda" if device == "cuda" else "cpu"]), 1)
        return held * OPTIMIZER_BYTES_PER_PARAM
    # norm, act, bda, rotary: an input and an output of the shape
    return backward * 2 * n * element


def aiob_peak(job: JobConfig, element: int = 4, device: str = "cpu") -> OpMemory:
    """The operation whose tensors take the most memory among those AIOB times for ``job`` (its peak, as it
    builds one at a time)."""
    best = OpMemory(0, "", "", ())
    for spec in op_specs(job):
        size = op_bytes(spec, element, device)
        if size > best.bytes:
            best = OpMemory(size, spec.section, spec.kind, tuple(spec.shape))
    return best


def available_memory() -> int | None:
    """Bytes this machine can give a new process without swapping: ``MemAvailable`` of ``/proc/meminfo``
    (Linux), else free pages times the page size (``os.sysconf``), else None (unknown: nothing is refused)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None

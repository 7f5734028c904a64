"""The grouped GEMM law: one launch of E experts' GEMMs of their own sizes (Transformer Engine's ``GroupedLinear``
and the ``grouped_gemm`` package that Megatron-core's ``TEGroupedMLP`` / ``GroupedMLP`` call), times in ns.

A grouped kernel (CUTLASS's grouped GEMM, cuBLAS's grouped batched GEMM) schedules every expert's output tiles on
one persistent grid: the SMs walk the concatenated tile list, so the waves are counted over the *sum* of the
experts' tiles, not per expert (NVIDIA CUTLASS ``examples/24_gemm_grouped``: "a single kernel launch computes a
group of GEMMs of different sizes, each thread block iterating over the problems").  With the tile law of
:mod:`mocked_model.compute.kernels` (tile time ``2 tm tn (k + K_FILL) / (per-SM rate x tile factor)``)::

    t = T0 + ceil(sum_e tiles_e / SMs) * 2 tm tn (k_bar + K_FILL) / (per-SM rate x tile factor)
    tiles_e = ceil(m_e / tm) * ceil(n_e / tn),   k_bar = sum_e tiles_e k_e / sum_e tiles_e

minimised over the tile shapes, joined to the time of moving every expert's operands through HBM once by the smooth
maximum of :func:`~mocked_model.compute.kernels.gemm_ns` (:func:`~mocked_model.compute.kernels.roofline`).  An expert
of few tokens still costs whole tiles (a 64-row tile for 10 tokens), which is how small per-expert counts lose
efficiency; experts of no tokens cost nothing.  Grouped kernels do not split ``k``.  The weight gradient's
GEMMs vary in ``k`` (the expert's tokens) rather than ``m``: their tiles are alike and ``k_bar`` carries the
difference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from mocked_model.compute.gpu_table import GPUSpec
from mocked_model.compute.kernels import GEMM_T0_NS, K_FILL, KIND_BYTES, TILES, GemmShape, roofline


def grouped_gemm_ns(shape: GemmShape, group: Sequence[tuple[int, int, int]], gpu: GPUSpec) -> float:
    """One grouped launch of the GEMMs ``group`` (``(m, n, k)`` each) with ``shape``'s operand kind, output bytes
    and accumulation (its sizes are the aggregate, for FLOPs only); ns, by the module's law."""
    per_sm = gpu.tensor_flops(shape.kind) * gpu.gemm_efficiency(shape.kind) / gpu.sms
    problems = [(m, n, k) for m, n, k in group if m > 0 and n > 0 and k > 0]
    if not problems:
        return 0.0
    best = math.inf
    for tm, tn, factor in TILES:
        tiles = [math.ceil(m / tm) * math.ceil(n / tn) for m, n, _ in problems]
        total = sum(tiles)
        k_bar = sum(t * k for t, (_, _, k) in zip(tiles, problems)) / total
        waves = math.ceil(total / gpu.sms)
        best = min(best, waves * 2.0 * tm * tn * (k_bar + K_FILL) / (per_sm * factor))
    size = KIND_BYTES[shape.kind]
    out = shape.out_bytes * (2 if shape.accumulate else 1)
    hbm = gpu.hbm_bytes_per_s * gpu.memory_efficiency("stream")
    traffic = sum((m * k + k * n) * size + m * n * out for m, n, k in problems)
    epilogue = 0.0 if gpu.epilogue_overlap else sum(m * n * out for m, n, _ in problems) / hbm
    operands = gpu.hbm_bytes_per_s * gpu.memory_efficiency("gemm_operands")  # as kernels.gemm_ns's floor
    return GEMM_T0_NS + roofline(best + epilogue, traffic / operands) * 1e9

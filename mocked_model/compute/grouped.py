"""The grouped GEMM law: E experts' GEMMs of their own sizes issued together (Transformer Engine's ``GroupedLinear``
and the ``grouped_gemm`` package that Megatron-core's ``TEGroupedMLP`` / ``GroupedMLP`` call), times in ns.

The experts' output tiles share the SMs: a grouped kernel (CUTLASS's grouped GEMM, cuBLAS's grouped batched GEMM)
schedules them on one persistent grid (NVIDIA CUTLASS ``examples/24_gemm_grouped``: "a single kernel launch computes
a group of GEMMs of different sizes, each thread block iterating over the problems"), and per-expert kernels on
several streams (what Transformer Engine runs, below) fill the SMs one kernel's last wave leaves idle with the next
one's tiles; either way the waves are counted over the *sum* of the experts' tiles, not per expert.  With the tile
law of
:mod:`mocked_model.compute.kernels` (tile time ``2 tm tn (k + K_FILL) / (per-SM rate x tile factor)``)::

    t = T0 + ceil(sum_e tiles_e / SMs) * 2 tm tn (k_bar + K_FILL) / (per-SM rate x tile factor)
    tiles_e = ceil(m_e / tm) * ceil(n_e / tn),   k_bar = sum_e tiles_e k_e / sum_e tiles_e

minimised over the tile shapes, joined to the time of moving every expert's operands through HBM once by the smooth
maximum of :func:`~mocked_model.compute.kernels.gemm_ns` (:func:`~mocked_model.compute.kernels.roofline`).  An expert
of few tokens still costs whole tiles (a 64-row tile for 10 tokens), which is how small per-expert counts lose
efficiency; experts of no tokens cost nothing.  Grouped kernels do not split ``k``.  The weight gradient's
GEMMs vary in ``k`` (the expert's tokens) rather than ``m``: their tiles are alike and ``k_bar`` carries the
difference.

Each expert's GEMM is its own kernel and pays its own fixed cost :data:`~mocked_model.compute.kernels.GEMM_T0_NS`
(launch, ramp, tail).  Transformer Engine's ``GroupedLinear`` (Megatron-core's ``TEGroupedMLP``) does not launch one
grouped kernel: ``nvte_multi_tensor_gemm`` calls ``multi_stream_cublas_gemm``, one cuBLASLt GEMM per expert
round-robin on 4 compute streams (TE ``transformer_engine/common/gemm/cublaslt_gemm.cu``; ``get_num_compute_streams``
returns 4 in ``common/util/multi_stream.cpp``; the CUTLASS grouped kernel only on Hopper with
``NVTE_USE_CUTLASS_GROUPED_GEMM``, which the Megatron-Bridge recipes do not set), and the ``grouped_gemm`` package
of Megatron's legacy ``GroupedMLP`` loops cuBLAS per expert.  The streams let one expert's tiles fill the SMs another
leaves idle, so the waves stay counted over the sum of the tiles, but every kernel's fixed cost remains::

    t = E_nonempty x T0 + roofline(grouped waves, HBM traffic)

Measured on one H100 (profiling/measurements/h100/grouped_gemms.json: each expert's cuBLASLt GEMM on 4 streams,
captured in a CUDA graph, normalised to the same run's 8192^3 GEMM against the law's): the six GEMMs of an
expert layer (forward, input gradient, weight gradient of fc1 and fc2) take, against this law (against the law
without the per-expert T0), Qwen3-30B-A3B at EP 16 (8 experts x 4096 tokens) FP8 0.97 (1.25), BF16 0.92 (1.07);
Qwen3-235B-A22B at EP 32 (4 x 4096) FP8 0.99 (1.05), BF16 1.00 (1.04); GPT-OSS 120B at EP 8 (16 x 1024) FP8 0.96
(1.18), BF16 0.93 (1.06); one GEMM of all the rows follows the dense law within 0.97-1.10.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from mocked_model.compute.gpu_table import GPUSpec
from mocked_model.compute.kernels import GEMM_T0_NS, K_FILL, KIND_BYTES, TILES, GemmShape, main_loop_flops_per_sm, roofline


def grouped_gemm_ns(shape: GemmShape, group: Sequence[tuple[int, int, int]], gpu: GPUSpec) -> float:
    """One grouped launch of the GEMMs ``group`` (``(m, n, k)`` each) with ``shape``'s operand kind, output bytes
    and accumulation (its sizes are the aggregate, for FLOPs only); ns, by the module's law (a fixed cost per
    non-empty expert's kernel)."""
    per_sm = main_loop_flops_per_sm(shape, gpu)
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
    return GEMM_T0_NS * len(problems) + roofline(best + epilogue, traffic / operands) * 1e9

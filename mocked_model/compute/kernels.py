"""What one kernel costs on one GPU: the laws of the compute model (times in ns).

GEMM (``gemm_ns``), after NVIDIA's "Matrix Multiplication Background" guide (DU-09799-001, sections 2.3
and 3): cuBLAS cuts the ``m x n`` output into tiles (256x128 down to 64x64), one thread block per tile,
and runs the blocks in waves of one per SM.  So::

    t = T0 + waves * tile_time + exposed epilogue            (compute side)
    tile_time = 2 * tm * tn * (k + K_FILL) / (peak / SMs * gemm_eff * tile_factor)
    waves = ceil(tiles * split / SMs)

- tile quantisation: a partial tile costs a whole one; wave quantisation: a partial wave costs a whole
  one; cuBLAS picks the tile (and a split of ``k`` when there are fewer tiles than SMs, with the
  partial sums reduced in fp32) that finishes first, which we emulate by taking the minimum;
- ``K_FILL`` k-steps of software-pipeline fill and drain per tile (4 stages of 32 in CUTLASS's
  Ampere/Hopper kernels, about half of it exposed): short ``k`` runs at a lower rate;
- ``tile_factor``: smaller tiles reuse each operand byte less (arithmetic intensity per tile is
  ``tm*tn/(tm+tn)``) and reach less of the main-loop rate (the guide's figure 5);
- the epilogue writes the ``m x n`` result (and reads it first when accumulating into fp32 main
  gradients, Megatron's ``gradient_accumulation_fusion``); on Ampere each wave's epilogue is exposed,
  Hopper's persistent kernels hide it behind other tiles' main loops (``GPUSpec.epilogue_overlap``);
- the whole kernel is never faster than moving its operands and result through HBM once.

``T0`` (5.5 us) is the fixed cost of a cuBLAS GEMM launch, its ramp and tail: the floor of OpenXLA's
measured H100 table (256 x 512 x 256 and other tiny shapes take 5.9 us, see bench/check_gemm_law.py).

Memory-bound kernels (``memory_ns``): ``KERNEL_NS + bytes / (HBM * mem_eff)`` per launch group.
``KERNEL_NS`` is the cost of one small kernel in a stream: launch gap plus ramp (2-4 us between
back-to-back kernels in Nsight Systems timelines of PyTorch eager on A100/H100); 3 us.

Flash attention (``flash_attention_ns``): its FLOPs at ``attn_*_eff`` of the bf16 peak, never faster
than its Q, K, V, O traffic through HBM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mocked_model.compute.gpus import GPUSpec, gpu_spec
from utils.errors import ConfigError

GEMM_T0_NS = 5500.0
"""Fixed cost of one GEMM kernel (launch, ramp, tail): OpenXLA's H100 table bottoms out at 5.9 us."""
K_FILL = 64
"""k-steps of software-pipeline fill per tile (half of 4 stages x 32)."""
KERNEL_NS = 3000.0
"""Cost of one small memory-bound kernel in a stream (launch gap and ramp; 2-4 us in eager timelines)."""
TILES: tuple[tuple[int, int, float], ...] = (
    # (rows, columns, share of the main-loop rate): operand reuse tm*tn/(tm+tn) of 85 (256x128),
    # 64 (128x128), 43 (128x64), 32 (64x64); the guide's figure 5 shows the smaller tiles' rates falling
    # roughly in that order
    (256, 128, 1.0), (128, 256, 1.0), (128, 128, 0.95), (128, 64, 0.85), (64, 128, 0.85), (64, 64, 0.75),
)
MIN_SPLIT_K = 256
"""Smallest k-slice cuBLAS's split-k gives one thread block."""

DTYPE_KIND = {"float8": "fp8", "fp8": "fp8", "bfloat16": "bf16", "bf16": "bf16", "float16": "bf16", "fp16": "bf16",
              "half": "bf16", "float32": "fp32", "fp32": "fp32", "float": "fp32"}
KIND_BYTES = {"fp8": 1, "bf16": 2, "fp32": 4}


def dtype_kind(dtype: str) -> str:
    """``fp8``, ``bf16`` (also fp16) or ``fp32`` for a ``--dtype`` value."""
    kind = DTYPE_KIND.get(dtype.lower())
    if kind is None:
        raise ConfigError(f"--dtype {dtype!r} is not one of bfloat16, float16, float32, float8")
    return kind


@dataclass(frozen=True, slots=True)
class GemmShape:
    """``batch`` GEMMs of ``(m, k) x (k, n)``; inputs of ``kind`` (fp8/bf16/fp32); the result written in
    ``out_bytes`` per element, read first when ``accumulate``."""

    m: int
    n: int
    k: int
    batch: int = 1
    kind: str = "bf16"
    out_bytes: int = 2
    accumulate: bool = False

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k

    @property
    def out_traffic(self) -> float:
        return self.batch * self.m * self.n * self.out_bytes * (2 if self.accumulate else 1)

    @property
    def bytes(self) -> float:
        """HBM traffic if every operand is read once and the result written (and read) once."""
        size = KIND_BYTES[self.kind]
        return self.batch * (self.m * self.k + self.k * self.n) * size + self.out_traffic


def gemm_ns(shape: GemmShape, gpu: GPUSpec | str) -> float:
    """Time of one GEMM kernel (ns) by the tile and wave law of the module docstring."""
    gpu = gpu_spec(gpu)
    m, n, k = max(shape.m, 1), max(shape.n, 1), max(shape.k, 1)
    per_sm = gpu.peak_flops(shape.kind) * gpu.gemm_efficiency(shape.kind) / gpu.sms
    hbm = gpu.hbm_bytes_per_s * gpu.mem_eff
    best = math.inf
    for tm, tn, factor in TILES:
        tiles = shape.batch * math.ceil(m / tm) * math.ceil(n / tn)
        split = 1
        if tiles < gpu.sms:
            split = max(1, min(gpu.sms // tiles, k // MIN_SPLIT_K))
        waves = math.ceil(tiles * split / gpu.sms)
        t = waves * 2.0 * tm * tn * (k / split + K_FILL) / (per_sm * factor)
        if split > 1:  # fp32 partial sums written and reduced
            t += shape.batch * m * n * 4 * split * 2 / hbm
        best = min(best, t)
    epilogue = 0.0 if gpu.epilogue_overlap else shape.out_traffic / hbm
    memory = shape.bytes / hbm
    return GEMM_T0_NS + max(best + epilogue, memory) * 1e9


def memory_ns(nbytes: float, gpu: GPUSpec | str, kernels: int = 1) -> float:
    """``kernels`` memory-bound kernels moving ``nbytes`` bytes through HBM in all (ns)."""
    gpu = gpu_spec(gpu)
    if kernels <= 0:
        return 0.0
    return kernels * KERNEL_NS + nbytes / (gpu.hbm_bytes_per_s * gpu.mem_eff) * 1e9


def flash_attention_ns(flops: float, io_bytes: float, gpu: GPUSpec | str, backward: bool = False) -> float:
    """One flash-attention kernel doing ``flops`` (the causal work actually computed) over ``io_bytes``
    of HBM traffic, at the GPU's flash efficiency of the bf16 peak (FP8 recipes keep attention in bf16)."""
    gpu = gpu_spec(gpu)
    eff = gpu.attn_bwd_eff if backward else gpu.attn_fwd_eff
    compute = flops / (gpu.peak_flops("bf16") * eff)
    memory = io_bytes / (gpu.hbm_bytes_per_s * gpu.mem_eff)
    return GEMM_T0_NS + max(compute, memory) * 1e9


def gemm_tflops(m: int, n: int, k: int, gpu: GPUSpec | str, dtype: str = "bfloat16") -> float:
    """The throughput (TFLOP/s) the law predicts for one ``m x n x k`` GEMM."""
    kind = dtype_kind(dtype)
    shape = GemmShape(m, n, k, kind=kind, out_bytes=max(KIND_BYTES[kind], 2))
    return shape.flops / gemm_ns(shape, gpu) / 1e3

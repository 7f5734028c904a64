"""What one kernel costs on one GPU: the laws of the compute model (times in ns).

GEMM (``gemm_ns``), after NVIDIA's "Matrix Multiplication Background" guide (DU-09799-001, sections 2.3
and 3): cuBLAS cuts the ``m x n`` output into tiles (256x128 down to 64x64), one thread block per tile,
and runs the blocks in waves of one per SM.  So::

    t = T0 + waves * tile_time + exposed epilogue            (compute side)
    tile_time = 2 * tm * tn * (k + K_FILL) / (tensor peak / SMs * gemm_eff * tile_factor)
    waves = ceil(tiles * split / SMs)

- the tensor peak is the datasheet's at the *sustained* SM clock (:meth:`GPUSpec.tensor_flops`): a GPU
  under a long GEMM-heavy load is power-bound (the H200 held 1485 MHz of its 1830);
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
- the whole kernel is never faster than moving its operands and result through HBM once, at the share of
  the HBM rate a GEMM's operand loads reach (``mem_eff['gemm_operands']``); near the ridge, where both
  bounds are close, neither is reached: the two join as a smooth maximum ``(c^4 + m^4)^(1/4)``
  (:data:`ROOFLINE_P`), which lifts a GEMM exactly at the ridge by 2^(1/4) = 1.19 and one at half the other
  bound by 1.6%.  The exponent is the one that puts Vidur's 4,144 H100 GEMMs of Llama-2-70B's linear layers
  (1-4096 tokens, TP 1-8; bench/check_vidur_gemms.py) at a median predicted/measured of 0.99-1.04 in every
  token band: with a hard maximum (``p`` infinite) the 65-255-token band, where decode batches sit, is 7%
  too fast, with ``p`` 2 every band is 5-13% too slow.

``T0`` (5.5 us) is the fixed cost of a cuBLAS GEMM launch, its ramp and tail: the floor of OpenXLA's
measured H100 table (256 x 512 x 256 and other tiny shapes take 5.9 us, see bench/check_gemm_law.py).

Memory-bound kernels (``memory_ns``): ``kernels * kernel_us + bytes / (HBM * mem_eff[kind])``: each kind of
kernel (a copy, a norm, an fp32 softmax, ...) reaches its own measured share of the HBM rate
(:data:`mocked_model.compute.gpus.MEMORY_KINDS`), plus a fixed cost per launch (the gaps between kernels).

Flash attention (``flash_attention_ns``): ``T0 + (FLOPs + attn_cta * thread blocks * block FLOPs) / (attn_eff *
tensor peak)``: each thread block (a 128-row query tile) costs, beside its work, the work of ``attn_cta`` key/value
blocks (loading its queries, the softmax's rescaling, writing its output).  NVIDIA's cuDNN SDPA benchmark on H200
(causal, head 128, 64 heads, sequence 2k-32k, cudnn-frontend ``benchmark/sdpa_benchmark_training``) follows it within
3% forward (efficiency 0.711 of the datasheet peak, ``attn_cta`` 2.84) and FlashAttention-2's A100 curve (batch x
sequence 16k, 512-16k) within 1%.  Published kernel figures are taken to run at the datasheet clock; inside a
training step attention runs at the sustained clock like the GEMMs (the H200's in-step cuDNN kernels took 1006 /
3079 us forward / backward where the benchmark's law at the sustained clock gives 1050 / 3040).
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
TILES: tuple[tuple[int, int, float], ...] = (
    # (rows, columns, share of the main-loop rate): operand reuse tm*tn/(tm+tn) of 85 (256x128),
    # 64 (128x128), 43 (128x64), 32 (64x64); the guide's figure 5 shows the smaller tiles' rates falling
    # roughly in that order
    (256, 128, 1.0), (128, 256, 1.0), (128, 128, 0.95), (128, 64, 0.85), (64, 128, 0.85), (64, 64, 0.75),
)
ROOFLINE_P = 4.0
"""Exponent of the smooth maximum joining a GEMM's compute and memory times (module docstring; kernel-level
measurements: [VIDUR_H100] in mocked_model/compute/gpu_table.py)."""
HOST_US_PER_LAUNCH = 5.0
"""Host time to launch one kernel from eager PyTorch (Python, autograd, the dispatcher, ``cudaLaunchKernel``): walk-
throughs of PyTorch's dispatch tabulate 5-25 us of CPU work per operator (jiahuanglin.xyz, 'From PyTorch op to kernel
launch'); the low end, as Megatron's hot paths are C++-heavy (Transformer Engine, fused kernels).  It shows only where
kernels are shorter than their launch (the H200's single-GPU steps kept the GPU 99% busy); CUDA graphs remove it."""
MIN_SPLIT_K = 256
"""Smallest k-slice cuBLAS's split-k gives one thread block."""
ATTENTION_TILE = 128
"""Query rows of one flash-attention thread block, and keys of one key/value block (FlashAttention-2/3 and cuDNN's
Hopper kernels: 128 x 128)."""

DTYPE_KIND = {"float8": "fp8", "fp8": "fp8", "bfloat16": "bf16", "bf16": "bf16", "float16": "bf16", "fp16": "bf16",
              "half": "bf16", "float32": "fp32", "fp32": "fp32", "float": "fp32"}
KIND_BYTES: dict[str, float] = {"fp4": 0.5, "fp8": 1, "bf16": 2, "fp32": 4}


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
    block_scaled: bool = False

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


def _stream_rate(gpu: GPUSpec) -> float:
    return gpu.hbm_bytes_per_s * gpu.memory_efficiency("stream")


HOPPER_BLOCK_SCALED_GEMM = 0.85
"""The share of plain FP8's main-loop rate a block-scaled FP8 GEMM reaches on Hopper (cuBLASLt's
``CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F`` / ``BLK128x128_32F`` scales, cuBLAS 12.9+, Hopper only).  Derived from
NVIDIA's own GEMM benchmark in Transformer Engine's documentation (``docs/examples/gemm_profiling/gemm_profiling.rst``,
"Worked Example: 5B Model on H200": H200 NVL, hidden 4096, FFN 16384, 15,872 tokens, the twelve GEMMs of a layer with
their quantization, Transformer Engine's autocast): FP8 block scaling 22.882 ms per layer against FP8 current
scaling's 20.285 ms (1.128x; BF16 32.014 ms).  With this model's casts for each recipe
(:func:`~mocked_model.compute.kernel_list.fp8_quantize`) the same twelve GEMMs take 1.128x current scaling's at 0.85
(``python bench/check_fp8_recipes.py`` solves it and prints the three recipes' speedups against the page's); a
kernel-level figure, not fitted to any training run.  Cross-check: FBGEMM's CUTLASS block-scaled kernels on an H100
(pytorch/FBGEMM PR #2546) reach 0.73-0.77 of its row-scaled ones on three large shapes."""


def main_loop_flops_per_sm(shape: GemmShape, gpu: GPUSpec) -> float:
    """FLOP/s one SM's tiles reach in a GEMM's main loop: the sustained tensor peak of ``shape.kind`` times the GPU's
    GEMM efficiency, and, for block-scaled FP8 (``shape.block_scaled``: Transformer Engine's ``blockwise`` recipe) on
    a GPU without MX tensor cores (Hopper, where cuBLAS applies the 1x128 / 128x128 scales inside the main loop), times
    :data:`HOPPER_BLOCK_SCALED_GEMM`.  On Blackwell Transformer Engine runs the recipe's GEMMs as MXFP8 (its PR #2157),
    whose scales the tensor cores apply: the plain FP8 rate."""
    per_sm = gpu.tensor_flops(shape.kind) * gpu.gemm_efficiency(shape.kind) / gpu.sms
    if shape.block_scaled and not gpu.mx_formats:
        per_sm *= HOPPER_BLOCK_SCALED_GEMM
    return per_sm


def gemm_ns(shape: GemmShape, gpu: GPUSpec | str) -> float:
    """Time of one GEMM kernel (ns) by the tile and wave law of the module docstring."""
    gpu = gpu_spec(gpu)
    m, n, k = max(shape.m, 1), max(shape.n, 1), max(shape.k, 1)
    per_sm = main_loop_flops_per_sm(shape, gpu)
    hbm = _stream_rate(gpu)
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
    memory = shape.bytes / (gpu.hbm_bytes_per_s * gpu.memory_efficiency("gemm_operands"))
    return GEMM_T0_NS + roofline(best + epilogue, memory) * 1e9


def roofline(compute_s: float, memory_s: float) -> float:
    """The time of a kernel bound by ``compute_s`` and ``memory_s``: their smooth maximum of exponent
    :data:`ROOFLINE_P` (the module docstring says why not a hard maximum)."""
    top = max(compute_s, memory_s)
    if top <= 0:
        return 0.0
    return top * ((compute_s / top) ** ROOFLINE_P + (memory_s / top) ** ROOFLINE_P) ** (1.0 / ROOFLINE_P)


def memory_ns(nbytes: float, gpu: GPUSpec | str, kernels: int = 1, kind: str = "stream") -> float:
    """``kernels`` memory-bound kernels of ``kind`` moving ``nbytes`` bytes through HBM in all (ns)."""
    gpu = gpu_spec(gpu)
    if kernels <= 0:
        return 0.0
    return kernels * gpu.kernel_ns + nbytes / (gpu.hbm_bytes_per_s * gpu.memory_efficiency(kind)) * 1e9


def flash_attention_ns(flops: float, io_bytes: float, gpu: GPUSpec | str, backward: bool = False,
                       cta_flops: float = 0.0) -> float:
    """One flash-attention kernel doing ``flops`` (the causal work actually computed) over ``io_bytes`` of HBM
    traffic, at the GPU's flash efficiency of the bf16 tensor peak at the sustained clock (FP8 recipes keep
    attention in bf16), plus ``attn_*_cta`` key/value blocks of overhead per thread block (``cta_flops``: thread
    blocks x the FLOPs of one block; 0 for a decode kernel, priced by its traffic)."""
    gpu = gpu_spec(gpu)
    eff = gpu.attn_bwd_eff if backward else gpu.attn_fwd_eff
    compute = (flops + (gpu.attn_bwd_cta if backward else gpu.attn_fwd_cta) * cta_flops) / (gpu.tensor_flops("bf16") * eff)
    memory = io_bytes / _stream_rate(gpu)
    return GEMM_T0_NS + max(compute, memory) * 1e9


def attention_work(batch: int, heads: int, seq: int, head_dim: int, v_dim: int, causal: bool = True,
                   backward: bool = False, kv_seq: int | None = None) -> tuple[float, float]:
    """FLOPs of one flash-attention kernel and its ``cta_flops`` (thread blocks x one key/value block's FLOPs):
    forward ``2 b h s_q s_kv (d + dv)`` (half when causal over a square), backward 2.5x (FlashAttention-2, section
    3.1: it recomputes the scores)."""
    kv = seq if kv_seq is None else kv_seq
    scale = 2.5 if backward else 1.0
    flops = 2.0 * batch * heads * seq * kv * (head_dim + v_dim) * (0.5 if causal and kv == seq else 1.0) * scale
    blocks = batch * heads * math.ceil(seq / ATTENTION_TILE)
    return flops, blocks * 2.0 * ATTENTION_TILE * ATTENTION_TILE * (head_dim + v_dim) * scale


def gemm_tflops(m: int, n: int, k: int, gpu: GPUSpec | str, dtype: str = "bfloat16") -> float:
    """The throughput (TFLOP/s) the law predicts for one ``m x n x k`` GEMM."""
    kind = dtype_kind(dtype)
    shape = GemmShape(m, n, k, kind=kind, out_bytes=max(KIND_BYTES[kind], 2))
    return shape.flops / gemm_ns(shape, gpu) / 1e3

"""Analytical compute times for GPUs nobody profiled: a roofline per operation, from its FLOPs and the
bytes it moves, with efficiency factors calibrated against published measurements.  No torch here:
generation and the simulator use it.

Model (times in ns; every constant below is documented with its source):

- GEMM (forward, input-gradient and weight-gradient passes alike):
  ``t = overhead + (t_c**Q + t_m**Q) ** (1/Q)`` with ``t_c = flops / (peak * gemm_eff)`` and
  ``t_m = bytes / (hbm * mem_eff)``, ``bytes = (M*K + K*N + M*N) * dtype`` (operands read once, result
  written once).  ``Q = 3`` smooths the roofline's corner: a pure ``max`` overestimates mid-sized
  GEMMs, a pure sum underestimates them.  ``gemm_eff`` is the best measured matmul throughput over
  the datasheet peak ([MAMF] below: 0.803 on the H100); ``Q``, the 0.8 memory efficiency and the
  6 us overhead were fitted on 24 bf16 shapes of OpenXLA's measured H100 table ([XLA], 256..4096 per
  dimension, batch 1..4): root-mean-square log error 0.08, every shape within -13%..+26%, shapes of
  4096 within 3%.  The H100 8192^3 GEMM comes out at 791 TFLOP/s ([MAMF] measured 794.5).
- Attention (flash kernels): causal, so the kernel does half the full-square FLOPs the mocked model
  counts (Megatron's convention); backward does 2.5x the forward's matmul FLOPs (recomputed scores,
  FlashAttention-2 paper section 3.1), the mocked backward item counts 2x.  Efficiencies per
  architecture, from the FlashAttention-2 (Dao 2023: 50-73% of A100 peak forward) and -3 papers
  (Shah et al. 2024: FlashAttention-2 reaches 35% of H100 peak, FlashAttention-3 75% forward).
- Memory-bound operations (norms, activations, embedding, loss, optimizer): ``bytes / (hbm * mem_eff)``
  plus a launch overhead, with the bytes each pass reads and writes listed in :data:`PASS_BYTES`.

The GPU table cites each vendor figure (dense, i.e. without structured sparsity: NVIDIA's datasheets
print the sparse figure, twice the dense one, with an asterisk).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import prod

from utils.errors import ConfigError
from utils.units import DTYPE_BYTES

Q = 3.0
"""Exponent of the smooth roofline ``(t_c**Q + t_m**Q)**(1/Q)`` (fitted, see the module docstring)."""
GEMM_OVERHEAD_NS = 6000.0
"""Fixed cost of a GEMM launch and its tail (fitted on OpenXLA's H100 table; dominates below ~1 GFLOP)."""
ELEMENTWISE_OVERHEAD_NS = 3000.0
"""Launch cost of one memory-bound pass (a few kernels: norms launch a statistics and an apply kernel)."""
MEM_EFF = 0.8
"""Fraction of HBM bandwidth kernels reach.  For GEMM operand traffic it is fitted ([XLA]); for norms,
activations, embedding, loss and optimizer it is assumed (NVIDIA's A100 datasheet claims 95% DRAM
utilisation for ideal streams; framework kernels are not ideal) and not yet calibrated on a device:
no GPU was lent when this was written."""
CAUSAL_FRACTION = 0.5
"""Share of the full ``s x s`` score matrix a causal flash kernel computes (GPT training is causal)."""
FLASH_BWD_MATMULS = 2.5 / 2.0
"""Flash backward matmul FLOPs (2.5x forward) over what the mocked backward item carries (2x forward)."""
ADAM_BYTES_PER_PARAM = 30
"""Megatron's Adam step per parameter: reads fp32 param, main grad, exp_avg, exp_avg_sq (16 bytes),
writes fp32 param, exp_avg, exp_avg_sq (12) and the bf16 model copy (2)."""


@dataclass(frozen=True)
class GPUSpec:
    """One GPU: dense peak throughput per dtype (TFLOP/s), HBM bandwidth (TB/s = 10^12 B/s) and the
    efficiency factors of this model, each with its source."""

    name: str
    bf16_tflops: float
    fp8_tflops: float | None
    fp32_tflops: float
    hbm_tbps: float
    gemm_eff: float
    fp8_gemm_eff: float
    attn_fwd_eff: float
    attn_bwd_eff: float
    source: str
    calibration: str

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype`` (fp16 runs at the bf16 rate on every GPU here)."""
        kind = _dtype_kind(dtype)
        if kind == "fp8":
            if self.fp8_tflops is None:
                raise ConfigError(f"--dtype {dtype}: the {self.name} has no FP8 tensor cores")
            return self.fp8_tflops * 1e12
        if kind == "fp32":
            return self.fp32_tflops * 1e12
        return self.bf16_tflops * 1e12

    def gemm_efficiency(self, dtype: str) -> float:
        kind = _dtype_kind(dtype)
        return self.fp8_gemm_eff if kind == "fp8" else self.gemm_eff

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_tbps * 1e12


# Calibration sources (see the README's "Compute times" section):
# [MAMF] S. Bekman, ml-engineering, compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS
#        comparison table" (best BF16 / FP8 matmul over a shape sweep, mean of 100 iterations):
#        A100 SXM 271.2 of 312 (86.9%); H100 SXM 794.5 of 989 (80.3%, "H200 is the same");
#        B200 1745 of 2250 (77.6%); GB200 1822 of 2500 (72.9%); FP8: H100 1402.6 of 1979 (70.9%),
#        H200 1453.4 (73.4%), B200 3432.5 of 4500 (76.3%), GB200 3615.6 of 5000 (72.3%).
# [XLA]  OpenXLA, xla/service/gpu/model/matmul_interpolator_data.h: measured bf16 FLOP/s of 1..4 x
#        256..4096 cubed-ish GEMMs on sm_90 (H100), e.g. 4096^3 783 TFLOP/s, 2048^3 632 TFLOP/s.
# [HE]   H. He, "Strangely, Matrix Multiplications on GPUs Run Faster When Given Predictable Data"
#        (thonking.ai, 2024): A100 8192^3 bf16 cuBLAS 258 TFLOP/s with randn inputs (83% of peak).
# [FA2]  T. Dao, "FlashAttention-2" (2023): 50-73% of A100 peak in the forward pass.
# [FA3]  J. Shah et al., "FlashAttention-3" (2024): FlashAttention-2 reaches 35% of H100 peak,
#        FlashAttention-3 up to 740 TFLOP/s (75%) forward in FP16.
_AMPERE_ATTN = (0.60, 0.45)   # [FA2]: mid-range of 50-73% forward; backward assumed lower (not calibrated)
_HOPPER_ATTN = (0.55, 0.40)   # between FA2 (35%) and FA3/cuDNN (75%) [FA3]; backward assumed lower

GPUS: dict[str, GPUSpec] = {g.name: g for g in (
    GPUSpec("A100", 312, None, 19.5, 2.039, 0.869, 0.869, *_AMPERE_ATTN,
            source="NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4): BF16 tensor 312 TFLOPS "
                   "(624 with sparsity), FP32 19.5 TFLOPS, 80GB SXM HBM2e 2,039 GB/s",
            calibration="[MAMF] 271.2/312; [HE] 8192^3 258 TFLOP/s"),
    GPUSpec("A800", 312, None, 19.5, 2.039, 0.869, 0.869, *_AMPERE_ATTN,
            source="NVIDIA A800 80GB SXM: the A100's GA100 with NVLink cut to 400 GB/s; BF16 tensor 311.9 TFLOPS "
                   "(TechPowerUp-style listings); HBM2e bandwidth taken equal to the A100 80GB SXM (not verified)",
            calibration="assumed equal to A100"),
    GPUSpec("H100", 989.4, 1978.9, 66.9, 3.35, 0.803, 0.709, *_HOPPER_ATTN,
            source="NVIDIA H100 datasheet (H100 SXM): BF16 tensor 1,979 TFLOPS with sparsity (989.4 dense), "
                   "FP8 3,958 (1,978.9 dense), FP32 67 TFLOPS, HBM3 3.35 TB/s",
            calibration="[MAMF] 794.5/989; [XLA] sm_90 table; [FA3]"),
    GPUSpec("H100_PCIE", 756, 1513, 51, 2.0, 0.803, 0.709, *_HOPPER_ATTN,
            source="NVIDIA H100 datasheet (H100 PCIe): BF16 1,513 TFLOPS with sparsity (756 dense), FP8 3,026 "
                   "(1,513 dense), FP32 51 TFLOPS, HBM2e 2.0 TB/s",
            calibration="assumed equal to H100 SXM"),
    GPUSpec("H800", 989.4, 1978.9, 66.9, 3.35, 0.803, 0.709, *_HOPPER_ATTN,
            source="NVIDIA H800 SXM5: the H100 SXM's GH100 with NVLink cut to 400 GB/s and FP64 to 1 TFLOPS; "
                   "BF16/FP8 tensor and HBM3 3.35 TB/s as the H100 SXM",
            calibration="assumed equal to H100 SXM (same silicon)"),
    GPUSpec("H20", 148, 296, 44, 4.0, 0.803, 0.709, *_HOPPER_ATTN,
            source="NVIDIA H20 (China export part; no public datasheet): FP16/BF16 dense 148 TFLOPS, FP8 296, "
                   "FP32 44 TFLOPS, 96 GB HBM3 at 4.0 TB/s, as published by resellers and press",
            calibration="assumed equal to H100 SXM (not measured)"),
    GPUSpec("H200", 989.4, 1978.9, 66.9, 4.8, 0.803, 0.734, *_HOPPER_ATTN,
            source="NVIDIA H200 datasheet (H200 SXM): BF16 1,979 TFLOPS with sparsity (989.4 dense), FP8 3,958 "
                   "(1,978.9 dense), 141 GB HBM3e at 4.8 TB/s",
            calibration="[MAMF] BF16 as H100, FP8 1453.4/1979"),
    GPUSpec("B200", 2250, 4500, 80, 8.0, 0.776, 0.763, *_HOPPER_ATTN,
            source="NVIDIA HGX B200 / DGX B200 datasheet (1000 W): FP16/BF16 dense 2.25 PFLOPS (4.5 sparse), FP8 "
                   "4.5 PFLOPS dense, HBM3e 8 TB/s per GPU (64 TB/s per 8 GPUs)",
            calibration="[MAMF] 1745/2250, FP8 3432.5/4500; attention as Hopper (assumed)"),
    GPUSpec("GB200", 2500, 5000, 90, 8.0, 0.729, 0.723, *_HOPPER_ATTN,
            source="NVIDIA GB200 NVL72 datasheet, per Blackwell GPU (1200 W): FP16/BF16 dense 2.5 PFLOPS, FP8 5 "
                   "PFLOPS dense, HBM3e 8 TB/s",
            calibration="[MAMF] 1822/2500, FP8 3615.6/5000; attention as Hopper (assumed)"),
)}
_ALIASES = {"A100SXM": "A100", "A10080G": "A100", "A100SXM480GB": "A100", "A800SXM": "A800", "H100SXM": "H100",
            "H100SXM5": "H100", "H10080G": "H100", "H100PCIE": "H100_PCIE", "H800SXM": "H800", "H200SXM": "H200",
            "B200SXM": "B200", "HGXB200": "B200"}


def _key(name: str) -> str:
    return "".join(c for c in name.upper() if c.isalnum())


def gpu_spec(name: str | GPUSpec | None) -> GPUSpec:
    """The table entry for ``--gpu_type`` (case and punctuation ignored: ``h100``, ``H100-SXM``)."""
    if isinstance(name, GPUSpec):
        return name
    if not name:
        raise ConfigError("--compute_source roofline needs --gpu_type (one of " + ", ".join(GPUS) + ")")
    key = _key(name)
    for gpu in GPUS:
        if _key(gpu) == key:
            return GPUS[gpu]
    if key in _ALIASES:
        return GPUS[_ALIASES[key]]
    raise ConfigError(f"--gpu_type {name!r} is not in the roofline GPU table (known: {', '.join(GPUS)})")


def known_gpu(name: str | None) -> bool:
    """Whether ``--gpu_type`` names a GPU of the table."""
    try:
        gpu_spec(name)
    except ConfigError:
        return False
    return True


def _dtype_kind(dtype: str) -> str:
    size = DTYPE_BYTES.get(dtype.lower())
    if size is None:
        raise ConfigError(f"--dtype {dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
    return {1: "fp8", 2: "bf16", 4: "fp32"}[size]


# ---- operation models (ns) -------------------------------------------------------------------

def _smooth(compute_ns: float, memory_ns: float) -> float:
    return (compute_ns ** Q + memory_ns ** Q) ** (1.0 / Q)


def memory_ns(nbytes: float, gpu: GPUSpec, passes: int = 1) -> float:
    """A memory-bound operation moving ``nbytes`` in ``passes`` kernel launches."""
    return passes * ELEMENTWISE_OVERHEAD_NS + nbytes / (gpu.hbm_bytes_per_s * MEM_EFF) * 1e9


def gemm_ns(m: int, n: int, k: int, gpu: GPUSpec | str, dtype: str = "bfloat16", groups: int = 1) -> float:
    """``groups`` GEMMs of ``(m, k) x (k, n)`` each, in one launch (batched or grouped)."""
    gpu = gpu_spec(gpu)
    size = DTYPE_BYTES[dtype.lower()]
    flops = 2.0 * m * n * k * groups
    nbytes = (m * k + k * n + m * n) * groups * size
    compute = flops / (gpu.peak_flops(dtype) * gpu.gemm_efficiency(dtype)) * 1e9
    memory = nbytes / (gpu.hbm_bytes_per_s * MEM_EFF) * 1e9
    return GEMM_OVERHEAD_NS + _smooth(compute, memory)


def attention_ns(full_flops: float, io_bytes: float, gpu: GPUSpec | str, dtype: str = "bfloat16",
                 backward: bool = False) -> float:
    """A causal flash-attention pass whose full-square FLOPs (Megatron's count: forward
    ``4 b h s^2 d``, backward twice that) are ``full_flops``; ``io_bytes`` its Q, K, V, O traffic."""
    gpu = gpu_spec(gpu)
    flops = full_flops * CAUSAL_FRACTION * (FLASH_BWD_MATMULS if backward else 1.0)
    eff = gpu.attn_bwd_eff if backward else gpu.attn_fwd_eff
    # fp8 attention kernels are rare in training; flash attention runs in bf16 even in FP8 recipes
    peak = gpu.peak_flops("bf16" if _dtype_kind(dtype) == "fp8" else dtype)
    compute = flops / (peak * eff) * 1e9
    memory = io_bytes / (gpu.hbm_bytes_per_s * MEM_EFF) * 1e9
    return GEMM_OVERHEAD_NS + _smooth(compute, memory)


def optimizer_ns(params: int, gpu: GPUSpec | str) -> float:
    """Megatron's fused Adam step over ``params`` parameters (memory bound, one multi-tensor launch)."""
    return memory_ns(params * ADAM_BYTES_PER_PARAM, gpu_spec(gpu))


PASS_BYTES: dict[tuple[str, str], tuple[float, int]] = {
    # (op, phase): (bytes moved per element in units of the activation dtype, kernel launches)
    ("norm", "forward"): (2.0, 1),       # read x, write y (fp32 statistics per row are negligible)
    ("norm", "backward"): (3.0, 2),      # read x and dy, write dx; a second kernel reduces dgamma/dbeta
    ("gelu", "forward"): (2.0, 1),       # read x, write y
    ("gelu", "backward"): (3.0, 1),      # read x and dy, write dx
    ("swiglu", "forward"): (1.5, 1),     # read both halves (the element count is the fc1 output), write half
    ("swiglu", "backward"): (2.5, 1),    # read both halves and dy (half), write both halves of dx
    ("embedding", "forward"): (3.0, 1),  # gather a word row and a position row, write the sum
    ("embedding", "backward"): (3.0, 2),  # zero the gradient table's touched rows, scatter-add dy
}


def _elements(shape: tuple[int, ...]) -> int:
    return prod(shape)


def estimate_ns(item, gpu: GPUSpec | str, dtype: str = "bfloat16") -> float | None:
    """Estimated time in ns of one computation :class:`~utils.workload.WorkItem` (its
    ``meta['op']`` says what it is; ``None`` for items this model does not cover)."""
    gpu = gpu_spec(gpu)
    meta = item.meta or {}
    op = meta.get("op")
    shapes = item.shapes or ()
    phase = "backward" if item.stage.startswith("backward") else "forward"
    size = DTYPE_BYTES[dtype.lower()]
    if op in ("gemm", "dgrad", "wgrad") and len(shapes) >= 2:
        a, b = shapes[0], shapes[1]
        m, k = prod(a[:-1]), a[-1]
        if len(b) == 3:  # grouped experts: (tokens, k) x (experts, k, n)
            groups, n = b[0], b[2]
            return gemm_ns(max(m // groups, 1), n, k, gpu, dtype, groups)
        return gemm_ns(m, b[-1], k, gpu, dtype)
    if op == "attention" and item.flops:
        # Megatron's shapes: queries (b, heads, s, d) and keys (b, groups, s, d): Q and O, K and V move once
        io = _elements(shapes[0]) * 2 * size + (_elements(shapes[1]) * 2 * size if len(shapes) > 1 else 0) if shapes else 0
        return attention_ns(item.flops, io * (2 if phase == "backward" else 1), gpu, dtype, phase == "backward")
    if op in ("norm", "gelu", "swiglu") and shapes:
        per_element, passes = PASS_BYTES[(op, phase)]
        return memory_ns(_elements(shapes[0]) * per_element * size, gpu, passes)
    if op == "embedding" and len(shapes) >= 2:
        tokens, hidden = _elements(shapes[0]), shapes[1][-1]
        per_element, passes = PASS_BYTES[("embedding", phase)]
        return memory_ns(tokens * hidden * per_element * size, gpu, passes)
    if op == "loss" and shapes:
        # Megatron's vocab-parallel cross entropy works in fp32: forward reads the logits, writes an
        # fp32 copy, reads it for the max and again for exp/sum, writes exp (kept for backward);
        # backward reads exp, writes the fp32 gradient and its cast to the activation dtype.
        n = _elements(shapes[0])
        forward, backward = n * (size + 4 * 4), n * (4 + 4 + size)
        return memory_ns(backward if phase == "backward" else forward, gpu, 3 if phase == "forward" else 2)
    return None


def estimator(gpu: GPUSpec | str, dtype: str = "bfloat16") -> Callable:
    """``item -> ns or None`` for :func:`workload_generator.compute_times.fill_compute_times`."""
    spec = gpu_spec(gpu)
    _dtype_kind(dtype)
    return lambda item: estimate_ns(item, spec, dtype)


def gemm_tflops(m: int, n: int, k: int, gpu: GPUSpec | str, dtype: str = "bfloat16") -> float:
    """The throughput (TFLOP/s) the model predicts for an ``m x n x k`` GEMM."""
    return 2.0 * m * n * k / gemm_ns(m, n, k, gpu, dtype) / 1e3

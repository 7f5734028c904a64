"""The GPU table of the compute model (looked up through :mod:`mocked_model.compute.gpus`): what each GPU does under
a long training load, each figure with its source.

Peaks are NVIDIA's dense datasheet figures (the datasheets print the sparse figure, twice the dense one, with an
asterisk), which are stated at a clock (``spec_mhz``); under the sustained load of training a GPU is power-bound
and its SM clock settles lower (``sustained_mhz``), so tensor-core kernels run at ``peak * sustained / spec``
(:meth:`GPUSpec.tensor_flops`).  HBM-bound kernels do not follow the SM clock (HBM has its own).

Efficiencies are shares of those rates that one kind of kernel reaches, from kernel-level measurements named in
:data:`SOURCES` (the H200 entry from our own, ``profiling/measurements/h200/``); nothing here was fitted to an
end-to-end training time.  :data:`GPUSpec.measured` names the fields measured on that GPU type; the others are
derived (same die, same power limit, or carried over from a measured GPU) as ``calibration`` says.

Units: TFLOP/s = 10^12 FLOP/s, TB/s = 10^12 B/s, GB/s = 10^9 B/s per direction, MHz.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from utils.errors import ConfigError

SOURCES = {
    "H200": "profiling/measurements/h200/kernels.json (kernels.py on one H200 SXM, torch 2.11 + CUDA 13.0): bf16 GEMMs "
            "GPU-bound at training shapes 580-783 TFLOP/s; 8192^3 sustained for 20 s: median 718 TFLOP/s at a median "
            "SM clock of 1485 MHz (1455-1575) and about 650 W; FP8 GEMMs (torch._scaled_mm) 1.49-1.96x bf16 at the "
            "same shapes, median 1.74; memory-bound kernels per kind (copy 0.81 ... cross entropy 0.19 of 4.8 TB/s)",
    "H200_AIOB": "profiling/measurements/h200/profiles (python -m profiling compute on the same H200): flash attention "
                 "(cuDNN through torch SDPA), torch's fused Adam, eager rotary, per operation with CUDA events",
    "H200_TRACE": "profiling/measurements/h200/megatron_core_steps/*.kernels.json: every kernel of three Megatron-core "
                  "steps under torch.profiler (the fp32 main-gradient add, torch AdamW's foreach kernels, the gaps "
                  "between kernels)",
    "VIDUR_H100": "microsoft/vidur data/profiling/compute/h100/meta-llama/Llama-2-70b-hf/mlp.csv: Llama-2-70B's four "
                  "linear layers timed on an H100 at 1-4096 tokens and TP 1-8 (medians in "
                  "bench/data/vidur_h100_llama2_70b_linear.csv; bench/check_vidur_gemms.py compares the GEMM law)",
    "HE": "H. He, 'Strangely, Matrix Multiplications on GPUs Run Faster When Given \"Predictable\" Data!' "
          "(thonking.ai, 2024): A100 SXM bf16 cuBLAS 8192^3 258 TFLOP/s with randn inputs and 295 with zeros: the "
          "same kernel, so the gap is the power-bound clock",
    "XLA": "OpenXLA xla/service/gpu/model/matmul_interpolator_data.h, sm_90 (H100 SXM) measured bf16 GEMMs "
           "(bench/data/xla_sm90_bf16_gemm.csv holds the 72 shapes we check against)",
    "MAMF": "S. Bekman, ml-engineering, compute/accelerator: 'Maximum Achievable Matmul FLOPS' (best of a shape "
            "sweep, short bursts, randn inputs): A100 271.2 of 312, H100 794.5 of 989, B200 1745 of 2250, GB200 1822 "
            "of 2500; FP8 H100 1402.6 of 1979, B200 3432.5 of 4500, GB200 3615.6 of 5000",
    "FA2": "T. Dao, 'FlashAttention-2' (2023), figs. 4-6: 50-73% of A100 peak forward, lower backward",
    "FA3": "J. Shah et al., 'FlashAttention-3' (2024): FlashAttention-2 reaches 35% of H100 peak, "
           "FlashAttention-3 up to 75% forward (bf16)",
    "CUDNN_H200": "NVIDIA cudnn-frontend benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn (cuDNN 9.19.1, "
                  "Llama-3.1 shape: 64 query and 8 key/value heads of 128, batch 1, bf16, causal): forward 484/591/644/"
                  "673/688 and backward 370/474/541/579/581 TFLOP/s at sequence 2k/4k/8k/16k/32k",
    "CUDNN_GB200": "NVIDIA cudnn-frontend benchmark/sdpa_benchmark_training/results/llama3.1/gb200 (cuDNN 9.22.0, batch 2, "
                   "the same shape): forward 1097/1408/1574/1708/1622, backward 885/1148/1332/1328/1226 TFLOP/s",
    "CUDNN_NORM": "NVIDIA cudnn-frontend benchmark/norms/results: cuDNN RMSNorm bf16 on H200 3708-3845 GB/s forward, "
                  "3420-3801 backward (16384x4096 .. 4096x16384)",
    "FLASHINFER": "flashinfer-ai/flashinfer PR #2899 (2026): back-to-back FlashAttention-4 on B200 (batch 4, sequence 8192, "
                  "16 heads of 128) drops the SM clock from 1965 to about 1580 MHz at about 1000 W, -15% throughput",
    "TILEOPS": "tile-ai/TileOPs issue #1587 (2026): an H200 SXM at 700 W cannot hold a locked 1830 MHz under load; the CI "
               "settled on 1500 MHz",
    "MLE": "S. Bekman, ml-engineering, compute/accelerator (its README): clock table (A100 SXM 1410, H100/H200 SXM 1830 MHz "
           "for the tensor figures; B200 1965, GB200 2062 maximum SM clocks) and power table",
    "FP4": "NVIDIA DGX B200 datasheet: 72 PFLOPS FP4 training and 144 PFLOPS FP4 inference per 8 GPUs (sparse), 9 "
           "PFLOPS dense FP4 per GPU; GB200 NVL72 datasheet: 1,440 PFLOPS FP4 (sparse) per 72 GPUs, 10 PFLOPS dense per "
           "GPU (Blackwell's NVFP4/MXFP4 tensor cores)",
    "BLACKWELL_ULTRA": "NVIDIA GB300 NVL72 and DGX B300 specifications as tabulated per GPU by Verda ('NVIDIA GB300 "
                       "NVL72: GPU Architecture & Performance', 2026, dense figures): GB300 FP4 15, FP8 5, FP16/BF16 "
                       "2.5 PFLOPS, FP32 80 TFLOPS, 8 TB/s, 1.4 kW; B300 FP8 4.5, FP16/BF16 2.25 PFLOPS, FP32 75 "
                       "TFLOPS, 1.1 kW; the GB300 NVL72 rack: FP4 1,440 PFLOPS sparse / 1,080 dense, 20.7 TB HBM3e at "
                       "576 TB/s over 72 GPUs; DGX B300: 144 PFLOPS sparse FP4 and 72 PFLOPS FP8 over 8 GPUs, 2.3 TB "
                       "HBM3e; Blackwell Ultra: 160 SMs, 640 tensor cores (NVIDIA's Blackwell Ultra announcement, "
                       "GTC 2025), NVLink5 1.8 TB/s bidirectional",
    "NCCL": "NVIDIA/nccl src/graph/topo.h: the per-link NVLink bandwidth NCCL's tuner assumes: SM80_NVLINK_BW 20.0, "
            "SM90_NVLINK_BW 20.6, SM100_NVLINK_BW 40.1 GB/s, of 25 / 25 / 50 GB/s nominal per direction",
}

MEMORY_KINDS = (
    "stream", "copy", "add", "mixed_add", "activation", "fused_activation", "eager_swiglu", "norm", "rms_norm",
    "te_norm", "dropout_add", "softmax", "fused_softmax", "masked_fill", "cross_entropy", "fused_cross_entropy",
    "rotary", "fused_rotary", "fp8_cast", "adam", "foreach", "gemm_operands",
)
"""Kinds of memory-bound kernel, each with its own share of the HBM rate (:attr:`GPUSpec.mem_eff`):

- ``stream``: any other streaming kernel (a same-dtype copy's rate);
- ``copy``: a copy or dtype cast (``x.clone()``, ``x.float()``); ``add``: a vectorised binary op (``x + y``);
- ``mixed_add``: ``fp32 += bf16`` (the main-gradient accumulation without the fusion: a non-vectorised kernel);
- ``activation``: an eager GeLU; ``fused_activation``: a jit/compiled bias-GeLU or bias-SwiGLU;
  ``eager_swiglu``: ``silu(a) * b`` in eager torch (several kernels, counted by its minimal traffic);
- ``norm`` / ``rms_norm``: torch's LayerNorm / RMSNorm; ``te_norm``: Transformer Engine's or apex's fused norm;
- ``dropout_add``: eager dropout plus the residual add;
- ``softmax``: ``softmax(x.float())`` (cast and fp32 softmax);
  ``fused_softmax``: Megatron's fused scale-mask-softmax kernel; ``masked_fill``: filling masked scores through a
  broadcast mask;
- ``cross_entropy``: an fp32 cross entropy in eager torch; ``fused_cross_entropy``: one fused kernel;
- ``rotary``: RoPE as eager torch (``x * cos + rotate_half(x) * sin``: five broadcast kernels);
  ``fused_rotary``: Transformer Engine's fused RoPE;
- ``fp8_cast``: Transformer Engine's cast (and transpose) of a bf16 tensor to FP8;
- ``adam``: a fused Adam step over fp32 parameters, gradients and moments; ``foreach``: torch's ``_foreach_*``
  kernels (AdamW, copies, norms of many tensors);
- ``gemm_operands``: a GEMM kernel streaming its operands (the weights of a decode-shaped GEMM): the floor of
  :func:`~mocked_model.compute.kernels.gemm_ns` when it is memory-bound.
"""


def _kinds(values: dict[str, float]) -> tuple[tuple[str, float], ...]:
    unknown = set(values) - set(MEMORY_KINDS)
    if unknown:  # a typo here would silently fall back to 'stream'
        raise ValueError(f"unknown memory kinds {sorted(unknown)}")
    return tuple(sorted(values.items()))


@dataclass(frozen=True)
class GPUSpec:
    """One GPU type.

    - ``bf16_tflops`` / ``fp8_tflops``: dense tensor-core peaks at ``spec_mhz`` (fp16 runs at the bf16 rate);
      ``fp32_tflops`` the CUDA-core FP32 rate (fp32 GEMMs);
    - ``spec_mhz``: the SM clock those peaks are stated at; ``sustained_mhz``: the SM clock a long GEMM-heavy load
      settles at (power-bound), which tensor-core kernels run at;
    - ``hbm_tbps`` HBM bandwidth, ``memory_gib`` HBM capacity, ``sms`` streaming multiprocessors;
    - ``nvlink_gbps``: NVLink bandwidth per GPU per direction (GB/s); ``nvlink_efficiency`` the share of it NCCL's
      tuner models, used by the topo simulator;
    - ``gemm_eff`` / ``fp8_gemm_eff``: the share of the clock-scaled peak a GEMM's main loop reaches on a large,
      wave-aligned shape (the anchor the shape law in :mod:`mocked_model.compute.kernels` scales down from);
    - ``attn_fwd_eff`` / ``attn_bwd_eff``: the share of the clock-scaled bf16 peak a flash-attention kernel's main
      loop reaches; ``attn_fwd_cta`` / ``attn_bwd_cta``: the overhead of each of its thread blocks, in key/value
      blocks of work (:func:`~mocked_model.compute.kernels.flash_attention_ns`);
    - ``mem_eff``: the share of the HBM rate each kind of memory-bound kernel reaches (:data:`MEMORY_KINDS`);
    - ``kernel_us``: the cost of one small kernel in a stream (launch gap, ramp and tail);
    - ``epilogue_overlap``: whether cuBLAS hides a GEMM's output write behind other tiles' main loops (Hopper and
      newer); ``mx_formats``: MXFP8 block-scaled tensor cores (Blackwell);
    - ``measured``: the fields measured on this GPU type (the others derived, as ``calibration`` says);
    - ``fp4_tflops``: the dense FP4 tensor peak ([FP4]; None before Blackwell); FP4 GEMMs are taken to reach FP8's
      share of their peak (not measured).
    """

    name: str
    bf16_tflops: float
    fp8_tflops: float | None
    fp32_tflops: float
    hbm_tbps: float
    memory_gib: float
    sms: int
    nvlink_gbps: float
    nvlink_efficiency: float
    spec_mhz: float
    sustained_mhz: float
    gemm_eff: float
    fp8_gemm_eff: float
    attn_fwd_eff: float
    attn_bwd_eff: float
    attn_fwd_cta: float
    attn_bwd_cta: float
    mem_eff: tuple[tuple[str, float], ...]
    kernel_us: float
    epilogue_overlap: bool
    mx_formats: bool
    source: str
    calibration: str
    measured: tuple[str, ...] = field(default=())
    fp4_tflops: float | None = None

    @property
    def clock_ratio(self) -> float:
        """The sustained SM clock over the datasheet's (tensor-core rates scale with it)."""
        return self.sustained_mhz / self.spec_mhz

    def peak_flops(self, kind: str) -> float:
        """Dense datasheet peak FLOP/s of a GEMM whose inputs are ``kind`` (``bf16``, ``fp8`` or ``fp32``): the
        denominator of published MFU figures."""
        if kind == "fp8":
            if self.fp8_tflops is None:
                raise ConfigError(f"--dtype float8: the {self.name} has no FP8 tensor cores")
            return self.fp8_tflops * 1e12
        if kind == "fp4":
            if self.fp4_tflops is None:
                raise ConfigError(f"--dtype float4: the {self.name} has no FP4 tensor cores (NVFP4/MXFP4 need Blackwell: "
                                  "B200, GB200)")
            return self.fp4_tflops * 1e12
        if kind == "fp32":
            return self.fp32_tflops * 1e12
        return self.bf16_tflops * 1e12

    def tensor_flops(self, kind: str) -> float:
        """The peak a kernel of ``kind`` inputs can reach under a sustained load: the datasheet peak at the
        sustained clock (FP32 CUDA cores run at the same clock)."""
        return self.peak_flops(kind) * self.clock_ratio

    def gemm_efficiency(self, kind: str) -> float:
        return self.fp8_gemm_eff if kind in ("fp8", "fp4") else self.gemm_eff

    def memory_efficiency(self, kind: str) -> float:
        """The share of the HBM rate a memory-bound kernel of ``kind`` reaches (``stream`` for an unknown kind)."""
        table = dict(self.mem_eff)
        return table.get(kind, table["stream"])

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_tbps * 1e12

    @property
    def kernel_ns(self) -> float:
        return self.kernel_us * 1e3


# ---- the measured GPU: H200 ------------------------------------------------------------------------------

HOPPER_SPEC_MHZ = 1830.0
"""H100/H200 SXM: 989.4 TFLOP/s = 132 SMs x 4096 dense FP16 FLOP per clock x 1.83 GHz, the clock of the
datasheets' tensor figures ([MLE]; nvidia-smi's maximum is 1980 MHz)."""
H200_SUSTAINED_MHZ = 1485.0
"""[H200] median SM clock of the 168 nvidia-smi samples of the 20 s sustained 8192^3 bf16 GEMM (1455-1575 MHz, about
650 W).  [TILEOPS] found the same part could not hold 1830 MHz under load and settled on 1500."""
H200_GEMM_EFF = 0.9329
"""[H200] the sustained 8192^3 GEMM, 718.0 TFLOP/s (median), at 1485 MHz: the shape law at that clock reaches it with
a main-loop efficiency of 0.9329 (:func:`mocked_model.compute.calibrate.gemm_efficiency_for`; the law loses 3% of
it to wave quantisation, 15.5 of 16 waves of 256x128 tiles on 132 SMs; the operands' 92 us, joined by the smooth
maximum, add 3e-6 of the 1.53 ms: 0.93285 either way)."""
H200_FP8_SPEEDUP = 1.7444
"""[H200] median over 12 training shapes of the FP8 (e4m3, per-tensor scales) over bf16 GEMM rate, the GEMM
alone: FP8's main loop reaches 1.744 / 2 of bf16's efficiency at twice the peak."""
HOPPER_ATTENTION = (0.7165, 3.19, 0.6253, 5.06)
"""[CUDNN_H200] forward efficiency, forward thread-block overhead, backward efficiency and overhead: the log least
squares of :func:`mocked_model.compute.calibrate.attention_fit` over the five causal bf16 rows (sequence 2k-32k),
within 1.2% forward and 2.4% backward, taken at the datasheet clock.  At the sustained clock it gives the H200's
in-step cuDNN kernels of profiling/measurements/h200 (Llama-3-8B shape) 1051 / 3169 us for 1006 / 3079 measured."""
H200_MEMORY = _kinds({
    # [H200] kernels.json, GPU-bound, share of 4.8 TB/s on an 8192x4096 bf16 tensor, on the bytes the kernel lists
    # count: its GB/s as measured where it counted alike (copy, add, GeLU, norms, dropout plus add with its mask byte,
    # compiled SwiGLU), else converted: cast plus fp32 softmax moves 14 bytes per score, not the 12 it counted
    # (1965 GB/s x 14 / 12); eager SwiGLU 2.5 passes of the fc1 output, not 1.5 (1145 GB/s x 2.5 / 1.5); fp32 cross
    # entropy 14 bytes per logit (cast, log-softmax), not 6 (924 GB/s x 14 / 6)
    "stream": 0.81, "copy": 0.81, "add": 0.86, "activation": 0.69, "fused_activation": 0.90, "eager_swiglu": 0.40,
    "norm": 0.48, "rms_norm": 0.63, "dropout_add": 0.45, "softmax": 0.48, "cross_entropy": 0.45,
    # [H200_AIOB] torch fused Adam over 8.03e9 fp32 parameters: 28 bytes each in 76.9 ms = 0.61; eager rotary
    # x*cos + rotate_half(x)*sin on 8192x5120: 20 bytes per element in 550 us = 0.32
    "adam": 0.61, "rotary": 0.32,
    # [H200_TRACE] llama3_8b_8l_sdpa: 204 fp32 += bf16 main-gradient adds over 2.80e9 parameters x 4 micro-batches,
    # 10 bytes each, in 46.0 ms = 0.51; torch AdamW's 945 foreach launches, 84 bytes per parameter, in 60.3 ms = 0.81;
    # gpt18p4b_4l: 64 masked_fill launches (the causal mask on fp32 scores, forward and backward, 8 x 48 x 2048^2
    # per layer and micro-batch, 8 bytes each, split in 4 launches by 32-bit indexing) in 86.1 ms = 0.50
    "mixed_add": 0.51, "foreach": 0.81, "masked_fill": 0.50,
    # [CUDNN_NORM] cuDNN's RMSNorm (which Transformer Engine's norms route to) on H200: 3.7-3.8 TB/s = 0.78
    "te_norm": 0.78,
    # not measured: Megatron's and Transformer Engine's other fused kernels stream their minimal traffic at the rate
    # of a vectorised add ([H200] 0.86)
    "fused_softmax": 0.86, "fused_cross_entropy": 0.86, "fused_rotary": 0.86, "fp8_cast": 0.86,
    # [VIDUR_H100] cuBLAS GEMMs of 1-64 tokens (weight-bound) streamed their operands at a median 0.91 of the HBM
    # rate (176 GEMMs, the 5.5 us fixed cost taken off; quartiles 0.88-0.94): more than a copy kernel's 0.81, as
    # TMA loads keep more bytes in flight.  Measured on an H100 (same Hopper memory system), carried to the others
    "gemm_operands": 0.91,
})
KERNEL_US = 3.0
"""[H200_TRACE] llama3_8b_8l_sdpa: 4,636 kernels in a 1052.2 ms span with the GPU busy 1042.5 ms, 2.1 us idle per
kernel, plus about 1 us for the shortest kernels (617 small copies took 0.66 ms): 3 us per small kernel."""

# ---- the other GPUs (derived; see each entry's calibration) -------------------------------------------------

_NV80, _NV90, _NV100 = 20.0 / 25.0, 20.6 / 25.0, 40.1 / 50.0
"""[NCCL]: NCCL's modelled NVLink rate over the nominal one, per generation."""
A100_SPEC_MHZ = 1410.0
"""A100 SXM boost clock, the clock of its 312 TFLOP/s (108 SMs x 2048 dense FP16 FLOP per clock x 1.41 GHz) [MLE]."""
A100_SUSTAINED_MHZ = 1233.0
"""[HE]: cuBLAS 8192^3 reaches 295 TFLOP/s on zeros (not power-bound, at 1410 MHz) and 258 on randn inputs: the same
kernel, so the power-bound clock is 1410 x 258 / 295 = 1233 MHz (NVIDIA's HPL convention sustains 1305 MHz on the
lighter FP64 load [MLE])."""
A100_GEMM_EFF = 0.9775
"""[HE] 295 TFLOP/s at 8192^3 at 1410 MHz: the shape law reaches it with a main-loop efficiency of 0.9775 (Ampere
exposes each wave's epilogue)."""
A100_ATTENTION = (0.6850, 1.86, 0.6850 * HOPPER_ATTENTION[2] / HOPPER_ATTENTION[0], 1.86)
"""[FA2] FlashAttention-2's forward-plus-backward curve on A100 (causal, head 128, 16 heads, batch x sequence 16k,
512-16k): the law with the backward at the H200 benchmark's share of the forward (0.873) fits it within 1% at a
forward efficiency of 0.685 and 1.86 blocks of overhead per thread block."""
BLACKWELL_ATTENTION = (0.7323, 4.72, 0.5954, 5.04)
"""[CUDNN_GB200] the four causal bf16 rows of sequence 2k-16k (batch 2, 64 heads; the 32k row drops): within 1%
forward and 4% backward, at the datasheet clock; the B200 taken alike (the same die and kernels)."""
B200_SPEC_MHZ = 1856.0
"""B200: 2.25 PFLOP/s over 148 SMs at 8192 dense FLOP per clock (twice Hopper's) is 1856 MHz; NVIDIA publishes
neither figure ([MLE] derives the same), nvidia-smi's maximum is 1965."""
B200_SUSTAINED_MHZ = 1580.0
"""[FLASHINFER]: back-to-back FlashAttention-4 on a B200 at about 1000 W pulls the SM clock from 1965 to about 1580
MHz (throttling after some 5 ms of sustained compute)."""
GB200_SPEC_MHZ = 2062.0
"""GB200: 2.5 PFLOP/s over 148 SMs at 8192 FLOP per clock is 2062 MHz, its nvidia-smi maximum."""
GB200_SUSTAINED_MHZ = 1679.0
"""Not measured: the B200's 1580 MHz at 1000 W scaled to the GB200's 1200 W by the cube root of the power (dynamic
power ~ f V^2 with V ~ f): 1580 x 1.2^(1/3) = 1679 MHz."""

B300_SPEC_MHZ = 1717.0
"""B300: 2.25 PFLOP/s dense BF16 over 160 SMs at 8192 FLOP per clock is 1717 MHz ([BLACKWELL_ULTRA])."""
GB300_SPEC_MHZ = 1907.0
"""GB300: 2.5 PFLOP/s dense BF16 over 160 SMs at 8192 FLOP per clock is 1907 MHz ([BLACKWELL_ULTRA])."""
B300_SUSTAINED_MHZ = 1589.0
"""Not measured: the B200's 1580 MHz at 1000 W over 148 SMs, scaled by the cube root of the power per SM (as the GB200's):
1580 x (1100 / 1000 x 148 / 160)^(1/3) = 1589 MHz."""
B300_FACTOR = 0.883
"""The B300's GEMM main-loop efficiencies as a share of the B200's (BF16 and FP8 alike), from NVIDIA's own B300 GEMM
benchmark in Transformer Engine's documentation (``docs/examples/gemm_profiling/gemm_profiling.rst``, "NVIDIA B300
SXM6 AC": the twelve GEMMs of a layer of hidden 4096 and FFN 16384 at 15,872 tokens take 12.758 / 13.102 ms in BF16,
autocast / pre-quantized): ``python bench/check_fp8_recipes.py`` solves it (0.8833) from their mean.  A kernel-level
figure, fitted to no training run; with it the same page's pre-quantized FP8 GEMMs come within 2% (current scaling)
and 7% (MXFP8).  The B200-derived efficiencies were 12% fast for the B300 here, a hint that the B200's and GB200's
(best-of-sweep bursts, [MAMF]) may be optimistic too; no such figure exists for them, so they stay."""
GB300_SUSTAINED_MHZ = 1722.0
"""Not measured: 1580 x (1400 / 1000 x 148 / 160)^(1/3) = 1722 MHz (the B300's rule at the GB300's 1.4 kW)."""

_HOPPER = dict(nvlink_efficiency=_NV90, spec_mhz=HOPPER_SPEC_MHZ, sustained_mhz=H200_SUSTAINED_MHZ,
               gemm_eff=H200_GEMM_EFF, fp8_gemm_eff=round(H200_GEMM_EFF * H200_FP8_SPEEDUP / 2, 4),
               attn_fwd_eff=HOPPER_ATTENTION[0], attn_fwd_cta=HOPPER_ATTENTION[1], attn_bwd_eff=HOPPER_ATTENTION[2],
               attn_bwd_cta=HOPPER_ATTENTION[3], mem_eff=H200_MEMORY, kernel_us=KERNEL_US, epilogue_overlap=True,
               mx_formats=False)
_HOPPER_NOTE = ("derived from the H200 measurement: the same GH100 die and 700 W limit, so the same sustained clock "
                "(1485 MHz), GEMM efficiencies per clock and memory-kernel shares; attention from [CUDNN_H200]")
_A100 = dict(bf16_tflops=312, fp8_tflops=None, fp32_tflops=19.5, sms=108, nvlink_efficiency=_NV80,
             spec_mhz=A100_SPEC_MHZ, sustained_mhz=A100_SUSTAINED_MHZ, gemm_eff=A100_GEMM_EFF, fp8_gemm_eff=A100_GEMM_EFF,
             attn_fwd_eff=A100_ATTENTION[0], attn_fwd_cta=A100_ATTENTION[1], attn_bwd_eff=round(A100_ATTENTION[2], 4),
             attn_bwd_cta=A100_ATTENTION[3], mem_eff=H200_MEMORY, kernel_us=KERNEL_US, epilogue_overlap=False,
             mx_formats=False)
_A100_NOTE = ("[HE] for the sustained clock and the GEMM efficiency; [FA2] for attention; memory-kernel shares "
              "carried over from the H200 measurement (not measured)")
_BLACKWELL = dict(_HOPPER, nvlink_efficiency=_NV100, attn_fwd_eff=BLACKWELL_ATTENTION[0],
                  attn_fwd_cta=BLACKWELL_ATTENTION[1], attn_bwd_eff=BLACKWELL_ATTENTION[2],
                  attn_bwd_cta=BLACKWELL_ATTENTION[3], mx_formats=True)

GPUS: dict[str, GPUSpec] = {g.name: g for g in (
    GPUSpec("A100", hbm_tbps=2.039, memory_gib=80, nvlink_gbps=300, **_A100,
            source="NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4): A100 80GB SXM, BF16/FP16 "
                   "tensor 312 TFLOPS dense (624 sparse), FP32 19.5, HBM2e 2,039 GB/s, 108 SMs (A100 whitepaper), "
                   "NVLink3 600 GB/s bidirectional, 400 W",
            calibration=_A100_NOTE, measured=()),
    GPUSpec("A100_40G", hbm_tbps=1.555, memory_gib=40, nvlink_gbps=300, **_A100,
            source="NVIDIA A100 datasheet: A100 40GB SXM, as the 80GB part with HBM2 at 1,555 GB/s",
            calibration="as A100"),
    GPUSpec("A800", hbm_tbps=2.039, memory_gib=80, nvlink_gbps=200, **_A100,
            source="NVIDIA A800 80GB SXM: the A100's GA100 with NVLink cut to 400 GB/s bidirectional; compute and "
                   "HBM2e as the A100 80GB SXM",
            calibration="as A100 (same silicon)"),
    GPUSpec("H100", bf16_tflops=989.4, fp8_tflops=1978.9, fp32_tflops=66.9, sms=132, hbm_tbps=3.35, memory_gib=80,
            nvlink_gbps=450, **_HOPPER,
            source="NVIDIA H100 datasheet (H100 SXM): BF16 1,979 TFLOPS sparse (989.4 dense), FP8 3,958 (1,978.9 "
                   "dense), FP32 67, HBM3 3.35 TB/s, 80 GB, 132 SMs (H100 whitepaper), NVLink4 900 GB/s "
                   "bidirectional, 700 W",
            calibration=_HOPPER_NOTE),
    GPUSpec("H100_PCIE", bf16_tflops=756, fp8_tflops=1513, fp32_tflops=51, sms=114, hbm_tbps=2.0, memory_gib=80,
            nvlink_gbps=300, **dict(_HOPPER, spec_mhz=1620.0, sustained_mhz=1620.0 * H200_SUSTAINED_MHZ / HOPPER_SPEC_MHZ),
            source="NVIDIA H100 datasheet (H100 PCIe): BF16 1,513 TFLOPS sparse (756 dense = 114 SMs x 4096 x 1.62 "
                   "GHz), FP8 3,026 (1,513 dense), FP32 51, HBM2e 2.0 TB/s, NVLink bridge 600 GB/s bidirectional, 350 W",
            calibration="efficiencies as the H200 measurement; the sustained clock at the SXM parts' share of the "
                        "datasheet clock (not measured)"),
    GPUSpec("H800", bf16_tflops=989.4, fp8_tflops=1978.9, fp32_tflops=66.9, sms=132, hbm_tbps=3.35, memory_gib=80,
            nvlink_gbps=200, **_HOPPER,
            source="NVIDIA H800 SXM5: the H100 SXM's GH100 with NVLink cut to 400 GB/s bidirectional; tensor cores "
                   "and HBM3 as the H100 SXM",
            calibration="as H100 SXM (same silicon)"),
    GPUSpec("H20", bf16_tflops=148, fp8_tflops=296, fp32_tflops=44, sms=78, hbm_tbps=4.0, memory_gib=96,
            nvlink_gbps=450, **dict(_HOPPER, sustained_mhz=HOPPER_SPEC_MHZ),
            source="NVIDIA H20 (export part without a public datasheet; figures as published by OEM listings and "
                   "press): FP16/BF16 148 TFLOPS dense, FP8 296, FP32 44, 96 GB HBM3 at 4.0 TB/s, 78 SMs, "
                   "NVLink 900 GB/s bidirectional",
            calibration="efficiencies as the H200 measurement; its tensor rate is capped far below what 400 W "
                        "sustains, so no power-bound clock is applied (not measured)"),
    GPUSpec("H200", bf16_tflops=989.4, fp8_tflops=1978.9, fp32_tflops=66.9, sms=132, hbm_tbps=4.8, memory_gib=141,
            nvlink_gbps=450, **_HOPPER,
            source="NVIDIA H200 datasheet (H200 SXM): BF16 1,979 TFLOPS sparse (989.4 dense), FP8 3,958 (1,978.9 "
                   "dense), 141 GB HBM3e at 4.8 TB/s, 132 SMs, NVLink 900 GB/s bidirectional, 700 W",
            calibration="measured on one H200: [H200] sustained clock, GEMM (bf16 and FP8) and memory-kernel "
                        "efficiencies; [H200_AIOB] Adam and eager rotary; [H200_TRACE] the main-gradient add, foreach "
                        "kernels and the per-kernel cost; attention from [CUDNN_H200] (published, the same part)",
            measured=("sustained_mhz", "gemm_eff", "fp8_gemm_eff", "mem_eff", "kernel_us")),
    GPUSpec("B200", bf16_tflops=2250, fp8_tflops=4500, fp32_tflops=80, sms=148, hbm_tbps=8.0, memory_gib=180,
            nvlink_gbps=900, **dict(_BLACKWELL, spec_mhz=B200_SPEC_MHZ, sustained_mhz=B200_SUSTAINED_MHZ, gemm_eff=0.8433,
                                    fp8_gemm_eff=0.8210),
            source="NVIDIA DGX B200 datasheet, per GPU: FP16/BF16 2.25 PFLOPS dense, FP8 4.5 PFLOPS dense, "
                   "1,440 GB HBM3e per 8 GPUs (180 GB) at 8 TB/s each, NVLink5 1.8 TB/s bidirectional; "
                   "148 SMs (Blackwell architecture brief), 1,000 W",
            fp4_tflops=9000,
            calibration="[MAMF] 1745 TFLOP/s (1792x16128x3072) and FP8 3432.5 (15360x4096x3072), best of a sweep, "
                        "taken at the datasheet clock: main-loop efficiencies 0.8433 and 0.8210; [FLASHINFER] the "
                        "sustained clock; attention [CUDNN_GB200]; memory-kernel shares as the H200 (not measured)"),
    GPUSpec("GB200", bf16_tflops=2500, fp8_tflops=5000, fp32_tflops=90, sms=148, hbm_tbps=8.0, memory_gib=186,
            nvlink_gbps=900, **dict(_BLACKWELL, spec_mhz=GB200_SPEC_MHZ, sustained_mhz=GB200_SUSTAINED_MHZ, gemm_eff=0.8725,
                                    fp8_gemm_eff=0.8296),
            source="NVIDIA GB200 NVL72 datasheet, per Blackwell GPU: FP16/BF16 2.5 PFLOPS dense, FP8 5 PFLOPS "
                   "dense, 13.4 TB HBM3e per 72 GPUs (186 GB) at 8 TB/s each, NVLink5 1.8 TB/s bidirectional, 1,200 W",
            fp4_tflops=10000,
            calibration="[MAMF] 1822 TFLOP/s (4096x9728x2048) and FP8 3615.6 (19456x5120x1536), best of a sweep, "
                        "at the datasheet clock: main-loop efficiencies 0.8725 and 0.8296; the sustained clock derived "
                        "from the B200's; attention [CUDNN_GB200]; memory-kernel shares as the H200 (not measured)"),
    GPUSpec("B300", bf16_tflops=2250, fp8_tflops=4500, fp32_tflops=75, sms=160, hbm_tbps=8.0, memory_gib=288,
            nvlink_gbps=900, **dict(_BLACKWELL, spec_mhz=B300_SPEC_MHZ, sustained_mhz=B300_SUSTAINED_MHZ,
                                    gemm_eff=round(0.8433 * B300_FACTOR, 4), fp8_gemm_eff=round(0.8210 * B300_FACTOR, 4)),
            source="[BLACKWELL_ULTRA] HGX/DGX B300 (Blackwell Ultra), per GPU: FP16/BF16 2.25 PFLOPS dense, FP8 4.5, "
                   "FP4 13.5 (DGX B300's 144 PFLOPS sparse over 8 GPUs at the GB300's dense-to-sparse 0.75), FP32 75 "
                   "TFLOPS, 288 GB HBM3e (2.3 TB over 8) at 8 TB/s, 160 SMs, NVLink5 1.8 TB/s bidirectional, 1,100 W",
            fp4_tflops=13500,
            calibration="GEMMs from NVIDIA's B300 GEMM benchmark (Transformer Engine's gemm_profiling page): the B200's "
                        "main-loop efficiencies ([MAMF]) times B300_FACTOR 0.883, solved from its BF16 layer; the "
                        "sustained clock from the B200's by power per SM (derived); attention [CUDNN_GB200] (Blackwell "
                        "Ultra's doubled exponential rate not credited); memory-kernel shares as the H200"),
    GPUSpec("GB300", bf16_tflops=2500, fp8_tflops=5000, fp32_tflops=80, sms=160, hbm_tbps=8.0, memory_gib=288,
            nvlink_gbps=900, **dict(_BLACKWELL, spec_mhz=GB300_SPEC_MHZ, sustained_mhz=GB300_SUSTAINED_MHZ, gemm_eff=0.8725,
                                    fp8_gemm_eff=0.8296),
            source="[BLACKWELL_ULTRA] GB300 NVL72, per Blackwell Ultra GPU: FP16/BF16 2.5 PFLOPS dense, FP8 5, FP4 15 "
                   "(1,080 PFLOPS dense over 72), FP32 80 TFLOPS, 288 GB HBM3e (20.7 TB over 72) at 8 TB/s, 160 SMs, "
                   "NVLink5 1.8 TB/s bidirectional, 1,400 W",
            fp4_tflops=15000,
            calibration="derived, nothing measured: the GB200's main-loop efficiencies ([MAMF]), the sustained clock "
                        "from the B200's by power per SM; attention [CUDNN_GB200] (Blackwell Ultra's doubled "
                        "exponential rate not credited); memory-kernel shares as the H200"),
)}
ALIASES = {"A100SXM": "A100", "A10080G": "A100", "A10080GB": "A100", "A100SXM480GB": "A100", "A10040GB": "A100_40G",
           "A100SXM440GB": "A100_40G", "A800SXM": "A800", "H100SXM": "H100", "H100SXM5": "H100", "H10080G": "H100",
           "H100PCIE": "H100_PCIE", "H800SXM": "H800", "H200SXM": "H200", "B200SXM": "B200", "HGXB200": "B200",
           "DGXB200": "B200", "GB200NVL72": "GB200", "B300SXM": "B300", "HGXB300": "B300", "DGXB300": "B300",
           "GB300NVL72": "GB300"}


def table_key(name: str) -> str:
    """``name`` without case and punctuation, aliases resolved (``h100-sxm`` -> ``H100``)."""
    key = "".join(c for c in name.upper() if c.isalnum())
    return "".join(c for c in ALIASES.get(key, key).upper() if c.isalnum())


def table_entry(name: str) -> GPUSpec | None:
    """The table's entry for ``name`` (case, punctuation and aliases ignored), or None."""
    key = table_key(name)
    for gpu, spec in GPUS.items():
        if table_key(gpu) == key:
            return spec
    return None

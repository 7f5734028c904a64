"""The GPU table of the compute model: what each GPU can do, each figure with its source.

Peak figures are dense (NVIDIA's datasheets print the sparse figure, twice the dense one, with an
asterisk) at the boost clock.  Units: TFLOP/s = 10^12 FLOP/s, TB/s = 10^12 B/s, GB/s = 10^9 B/s per
direction.  Efficiencies are the share of a peak a kernel class reaches, from the kernel-level
measurements named in :data:`SOURCES`; nothing here was fitted to an end-to-end training time.
"""

from __future__ import annotations

from dataclasses import dataclass

from utils.errors import ConfigError

SOURCES = {
    "HE": "H. He, 'Strangely, Matrix Multiplications on GPUs Run Faster When Given \"Predictable\" Data!' "
          "(thonking.ai, 2024): A100 SXM bf16 cuBLAS 8192^3 with randn inputs 258 TFLOP/s",
    "XLA": "OpenXLA xla/service/gpu/model/matmul_interpolator_data.h, sm_90 (H100 SXM) measured bf16 GEMMs: "
           "4096^3 at 783.3 TFLOP/s (bench/data/xla_sm90_bf16_gemm.csv holds the 72 shapes we check against)",
    "MAMF": "S. Bekman, ml-engineering, compute/accelerator: 'Maximum Achievable Matmul FLOPS' (best of a shape "
            "sweep, randn inputs): A100 271.2 of 312, H100 794.5 of 989 ('H200 is the same'), B200 1745 of 2250, "
            "GB200 1822 of 2500; FP8 H100 1402.6 of 1979, H200 1453.4, B200 3432.5 of 4500, GB200 3615.6 of 5000",
    "FA2": "T. Dao, 'FlashAttention-2' (2023), figs. 4-6: 50-73% of A100 peak forward, lower backward",
    "FA3": "J. Shah et al., 'FlashAttention-3' (2024): FlashAttention-2 reaches 35% of H100 peak, "
           "FlashAttention-3 up to 75% forward (bf16)",
    "NCCL": "NVIDIA/nccl src/graph/topo.h: the per-link NVLink bandwidth NCCL's tuner assumes: SM80_NVLINK_BW 20.0, "
            "SM90_NVLINK_BW 20.6, SM100_NVLINK_BW 40.1 GB/s, of 25 / 25 / 50 GB/s nominal per direction",
    "STREAM": "Jia et al., 'Dissecting the NVIDIA Volta/Ampere GPU architecture via microbenchmarking' (2018, 2021) "
              "and NVIDIA's A100 whitepaper (95% DRAM utilisation claimed for ideal streams): framework "
              "elementwise kernels stream at 80-90% of the HBM datasheet rate",
}


@dataclass(frozen=True)
class GPUSpec:
    """One GPU type.

    - ``bf16_tflops`` / ``fp8_tflops`` / ``fp32_tflops``: dense tensor-core peaks (fp16 runs at the bf16
      rate; ``fp32_tflops`` is the CUDA-core FP32 rate used for fp32 GEMMs);
    - ``hbm_tbps`` HBM bandwidth, ``memory_gib`` HBM capacity, ``sms`` streaming multiprocessors;
    - ``nvlink_gbps``: NVLink bandwidth per GPU per direction (GB/s); ``nvlink_efficiency`` the share
      of it NCCL's tuner models (:data:`SOURCES` NCCL), used by the topo simulator;
    - ``gemm_eff`` / ``fp8_gemm_eff``: the share of the dense peak a GEMM's main loop reaches on a large,
      wave-aligned shape (the anchor the shape law in :mod:`mocked_model.compute.kernels` scales down
      from); ``attn_fwd_eff`` / ``attn_bwd_eff``: the same for flash-attention kernels;
    - ``mem_eff``: the share of HBM bandwidth a streaming kernel reaches;
    - ``epilogue_overlap``: whether cuBLAS's kernels hide a GEMM's output write behind other tiles' main
      loops (Hopper and newer: persistent warp-specialised kernels, CUTLASS 3 'ping-pong'); on Ampere the
      epilogue of each wave is exposed.
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
    gemm_eff: float
    fp8_gemm_eff: float
    attn_fwd_eff: float
    attn_bwd_eff: float
    mem_eff: float
    epilogue_overlap: bool
    source: str
    calibration: str

    def peak_flops(self, kind: str) -> float:
        """Dense peak FLOP/s of a GEMM whose inputs are ``kind`` (``bf16``, ``fp8`` or ``fp32``)."""
        if kind == "fp8":
            if self.fp8_tflops is None:
                raise ConfigError(f"--dtype float8: the {self.name} has no FP8 tensor cores")
            return self.fp8_tflops * 1e12
        if kind == "fp32":
            return self.fp32_tflops * 1e12
        return self.bf16_tflops * 1e12

    def gemm_efficiency(self, kind: str) -> float:
        return self.fp8_gemm_eff if kind == "fp8" else self.gemm_eff

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_tbps * 1e12


# Shared efficiency figures (see SOURCES):
_A100_GEMM = 0.851
"""[HE] 258 TFLOP/s at 8192^3: 4.262 ms, of which the shape law puts 5.5 us in the fixed cost and 77 us in
the exposed epilogue (the 134 MB bf16 result at 85% of 2.039 TB/s); the remaining 4.179 ms are 19 waves of
256x128 tiles on 108 SMs over 8192 + 64 k-steps, so the main loop runs at 0.851 of peak (MAMF's
best-of-sweep 271.2 / 312 agrees within 2%)."""
_H100_GEMM = 0.83
"""[MAMF] 794.5 / 989.4 = 0.803 at its best (large) shape; the shape law loses 3% to wave quantisation at
8192^3 (15.5 of 16 waves on 132 SMs), so the main loop runs at 0.803 / 0.97 = 0.83.  Checked against [XLA]:
4096^3 comes out 3% slower than measured, and the 72 shapes of bench/data/xla_sm90_bf16_gemm.csv within
8% root-mean-square (bench/check_gemm_law.py)."""
_BEST_SHAPE = 0.97
"""Wave quantisation the shape law gives the large shapes a best-of-sweep measurement ([MAMF]) picks
(0.97-0.99 on 132-148 SMs): main-loop efficiency = measured best / 0.97."""
_AMPERE_ATTN = (0.60, 0.45)
"""[FA2]: the middle of FlashAttention-2's 50-73% forward on A100; backward lower (its figures: 45-60%)."""
_HOPPER_ATTN = (0.55, 0.40)
"""Between FlashAttention-2 (35%) and FlashAttention-3 / cuDNN (up to 75%) on H100 [FA3]; backward lower."""
_MEM_EFF = 0.85
"""[STREAM]: 85% of the HBM datasheet rate for elementwise kernels (not calibrated on a device here)."""
_NV80, _NV90, _NV100 = 20.0 / 25.0, 20.6 / 25.0, 40.1 / 50.0
"""[NCCL]: NCCL's modelled NVLink rate over the nominal one, per generation."""

_AMPERE = dict(nvlink_efficiency=_NV80, attn_fwd_eff=_AMPERE_ATTN[0], attn_bwd_eff=_AMPERE_ATTN[1], mem_eff=_MEM_EFF,
               epilogue_overlap=False)
_HOPPER = dict(nvlink_efficiency=_NV90, attn_fwd_eff=_HOPPER_ATTN[0], attn_bwd_eff=_HOPPER_ATTN[1], mem_eff=_MEM_EFF,
               epilogue_overlap=True)
_BLACKWELL = dict(_HOPPER, nvlink_efficiency=_NV100)
_A100 = dict(bf16_tflops=312, fp8_tflops=None, fp32_tflops=19.5, sms=108, gemm_eff=_A100_GEMM, fp8_gemm_eff=_A100_GEMM,
             **_AMPERE)
_H100 = dict(bf16_tflops=989.4, fp8_tflops=1978.9, fp32_tflops=66.9, sms=132, gemm_eff=_H100_GEMM,
             fp8_gemm_eff=0.709 / _BEST_SHAPE, **_HOPPER)

GPUS: dict[str, GPUSpec] = {g.name: g for g in (
    GPUSpec("A100", hbm_tbps=2.039, memory_gib=80, nvlink_gbps=300, **_A100,
            source="NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4): A100 80GB SXM, BF16/FP16 "
                   "tensor 312 TFLOPS dense (624 sparse), FP32 19.5, HBM2e 2,039 GB/s, 108 SMs (A100 whitepaper), "
                   "NVLink3 600 GB/s bidirectional",
            calibration="[HE] for GEMMs, [FA2] for attention"),
    GPUSpec("A100_40G", hbm_tbps=1.555, memory_gib=40, nvlink_gbps=300, **_A100,
            source="NVIDIA A100 datasheet: A100 40GB SXM, as the 80GB part with HBM2 at 1,555 GB/s",
            calibration="as A100"),
    GPUSpec("A800", hbm_tbps=2.039, memory_gib=80, nvlink_gbps=200, **_A100,
            source="NVIDIA A800 80GB SXM: the A100's GA100 with NVLink cut to 400 GB/s bidirectional; compute and "
                   "HBM2e as the A100 80GB SXM",
            calibration="as A100 (same silicon)"),
    GPUSpec("H100", hbm_tbps=3.35, memory_gib=80, nvlink_gbps=450, **_H100,
            source="NVIDIA H100 datasheet (H100 SXM): BF16 1,979 TFLOPS sparse (989.4 dense), FP8 3,958 (1,978.9 "
                   "dense), FP32 67, HBM3 3.35 TB/s, 80 GB, 132 SMs (H100 whitepaper), NVLink4 900 GB/s "
                   "bidirectional",
            calibration="[MAMF] bf16 794.5 / 989.4 and FP8 1402.6 / 1979, checked against [XLA]; [FA3] for attention"),
    GPUSpec("H100_PCIE", **dict(_H100, bf16_tflops=756, fp8_tflops=1513, fp32_tflops=51, sms=114), hbm_tbps=2.0,
            memory_gib=80, nvlink_gbps=300,
            source="NVIDIA H100 datasheet (H100 PCIe): BF16 1,513 TFLOPS sparse (756 dense), FP8 3,026 (1,513 "
                   "dense), FP32 51, HBM2e 2.0 TB/s, 114 SMs, NVLink bridge 600 GB/s bidirectional",
            calibration="efficiencies as H100 SXM (not measured)"),
    GPUSpec("H800", hbm_tbps=3.35, memory_gib=80, nvlink_gbps=200, **_H100,
            source="NVIDIA H800 SXM5: the H100 SXM's GH100 with NVLink cut to 400 GB/s bidirectional; tensor cores "
                   "and HBM3 as the H100 SXM",
            calibration="as H100 SXM (same silicon)"),
    GPUSpec("H20", **dict(_H100, bf16_tflops=148, fp8_tflops=296, fp32_tflops=44, sms=78), hbm_tbps=4.0,
            memory_gib=96, nvlink_gbps=450,
            source="NVIDIA H20 (export part without a public datasheet; figures as published by OEM listings and "
                   "press): FP16/BF16 148 TFLOPS dense, FP8 296, FP32 44, 96 GB HBM3 at 4.0 TB/s, 78 SMs, "
                   "NVLink 900 GB/s bidirectional",
            calibration="efficiencies as H100 SXM (not measured)"),
    GPUSpec("H200", **dict(_H100, fp8_gemm_eff=0.734 / _BEST_SHAPE), hbm_tbps=4.8, memory_gib=141, nvlink_gbps=450,
            source="NVIDIA H200 datasheet (H200 SXM): BF16 1,979 TFLOPS sparse (989.4 dense), FP8 3,958 (1,978.9 "
                   "dense), 141 GB HBM3e at 4.8 TB/s, 132 SMs, NVLink 900 GB/s bidirectional",
            calibration="bf16 as H100 ([MAMF]: 'H200 is the same'), [MAMF] FP8 1453.4 / 1979"),
    GPUSpec("B200", bf16_tflops=2250, fp8_tflops=4500, fp32_tflops=80, sms=148, gemm_eff=0.776 / _BEST_SHAPE,
            fp8_gemm_eff=0.763 / _BEST_SHAPE, hbm_tbps=8.0, memory_gib=180, nvlink_gbps=900, **_BLACKWELL,
            source="NVIDIA DGX B200 datasheet, per GPU: FP16/BF16 2.25 PFLOPS dense, FP8 4.5 PFLOPS dense, "
                   "1,440 GB HBM3e per 8 GPUs (180 GB) at 8 TB/s each, NVLink5 1.8 TB/s bidirectional; "
                   "148 SMs (Blackwell architecture brief)",
            calibration="[MAMF] 1745 / 2250 and FP8 3432.5 / 4500 (best of a sweep); attention as Hopper (assumed)"),
    GPUSpec("GB200", bf16_tflops=2500, fp8_tflops=5000, fp32_tflops=90, sms=148, gemm_eff=0.729 / _BEST_SHAPE,
            fp8_gemm_eff=0.723 / _BEST_SHAPE, hbm_tbps=8.0, memory_gib=186, nvlink_gbps=900, **_BLACKWELL,
            source="NVIDIA GB200 NVL72 datasheet, per Blackwell GPU: FP16/BF16 2.5 PFLOPS dense, FP8 5 PFLOPS "
                   "dense, 13.4 TB HBM3e per 72 GPUs (186 GB) at 8 TB/s each, NVLink5 1.8 TB/s bidirectional",
            calibration="[MAMF] 1822 / 2500 and FP8 3615.6 / 5000 (best of a sweep); attention as Hopper (assumed)"),
)}
ALIASES = {"A100SXM": "A100", "A10080G": "A100", "A10080GB": "A100", "A100SXM480GB": "A100", "A10040GB": "A100_40G",
           "A100SXM440GB": "A100_40G", "A800SXM": "A800", "H100SXM": "H100", "H100SXM5": "H100", "H10080G": "H100",
           "H100PCIE": "H100_PCIE", "H800SXM": "H800", "H200SXM": "H200", "B200SXM": "B200", "HGXB200": "B200",
           "DGXB200": "B200", "GB200NVL72": "GB200"}


def _key(name: str) -> str:
    return "".join(c for c in name.upper() if c.isalnum())


def gpu_spec(name: str | GPUSpec | None) -> GPUSpec:
    """The table entry for ``--gpu_type`` (case and punctuation ignored: ``h100``, ``H100-SXM``)."""
    if isinstance(name, GPUSpec):
        return name
    if not name:
        raise ConfigError("the compute model needs --gpu_type (one of " + ", ".join(GPUS) + ")")
    key = _key(name)
    for gpu in GPUS:
        if _key(gpu) == key:
            return GPUS[gpu]
    if key in ALIASES:
        return GPUS[ALIASES[key]]
    raise ConfigError(f"--gpu_type {name!r} is not in the GPU table (known: {', '.join(GPUS)})")


def known_gpu(name: str | None) -> bool:
    """Whether ``--gpu_type`` names a GPU of the table."""
    try:
        gpu_spec(name)
    except ConfigError:
        return False
    return True


NCCL_CHANNELS = 16
"""Thread blocks (one SM each) an NCCL ring collective keeps busy on an NVSwitch server: NCCL runs one
block per channel, and Calculon's A100 system description charges an overlapped NVLink collective 15% of
the GPU (``processor_usage`` 0.15 of 108 SMs = 16 SMs; calculon-ai/calculon systems/a100_80g.json)."""


def nccl_sm_share(gpu: GPUSpec | str) -> float:
    """Share of the GPU's SMs a collective running beside a compute kernel takes from it."""
    spec = gpu_spec(gpu)
    return min(NCCL_CHANNELS / spec.sms, 0.5)

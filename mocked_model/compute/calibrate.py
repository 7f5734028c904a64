"""From kernel measurements to a GPU's figures: the fits behind the GPU table's measured entry and behind
``python -m profiling fit-gpu`` (no torch here; the measuring side is :mod:`profiling.kernels`).

Input: the JSON the kernel sweep writes (``profiling/measurements/h200/kernels.json`` is the first):

- ``gemm``: rows ``{m, n, k, bf16_us, bf16_tflops, fp8_tflops?, ...}``, GPU-bound (back-to-back launches);
- ``memory_kernels``: rows ``{op, us, bytes, gbps}`` (``op`` a key of :data:`MEMORY_OPS`);
- ``sustained``: rows ``{t, tflops, smi: "clock MHz, power W, temperature C"}`` of a long 8192^3 bf16 GEMM;
- ``attention`` (optional): rows ``{batch, heads, seq, head_dim, v_dim, causal, fwd_us, bwd_us}``.

Each figure is one kernel-level measurement or a least-squares fit over several, never an end-to-end time:

- the sustained clock: the median SM clock of the ``sustained`` samples;
- ``gemm_eff``: the main-loop efficiency at which the shape law (:func:`~mocked_model.compute.kernels.gemm_ns`)
  at that clock gives the median sustained 8192^3 rate;
- ``fp8_gemm_eff``: ``gemm_eff`` times the median FP8 over bf16 speedup of the GEMM rows, over 2 (FP8's peak);
- ``mem_eff``: each memory kernel's GB/s over the HBM rate;
- attention: ``T0 + (FLOPs + cta * block FLOPs) / rate`` fitted by least squares of the log error, forward and
  backward, at the sustained clock (the sweep times attention after its sustained GEMM).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import replace

from mocked_model.compute.gpu_table import GPUSpec
from mocked_model.compute.kernels import GEMM_T0_NS, GemmShape, attention_work, gemm_ns

MEMORY_OPS = {"copy": ("copy", "stream"), "add": ("add",), "layer_norm": ("norm",), "rms_norm": ("rms_norm",),
              "gelu": ("activation",), "dropout_add": ("dropout_add",), "swiglu_eager": ("eager_swiglu",),
              "softmax_fp32": ("softmax",), "cross_entropy_fp32": ("cross_entropy",),
              "swiglu_compiled": ("fused_activation",), "te_norm": ("te_norm",), "fp8_cast": ("fp8_cast",),
              "fused_rotary": ("fused_rotary",), "fused_softmax": ("fused_softmax",), "adam": ("adam",),
              "foreach": ("foreach",), "rotary_eager": ("rotary",), "mixed_add": ("mixed_add",),
              "masked_fill": ("masked_fill",)}
"""A kernel sweep's memory-kernel name -> the :data:`~mocked_model.compute.gpus.MEMORY_KINDS` it measures."""
BYTE_CONVERSION = {"softmax_fp32": 14 / 12, "swiglu_eager": 2.5 / 1.5, "cross_entropy_fp32": 14 / 6}
"""Kernels the sweep of profiling/measurements/h200 counted fewer bytes for than the kernel lists move (its GB/s times
this is the share on the lists' bytes): cast plus fp32 softmax moves 14 bytes per score (it counted 12), eager SwiGLU
2.5 passes of the fc1 output (it counted 1.5), fp32 cross entropy 14 bytes per logit (it counted 6)."""
SUSTAINED_SHAPE = (8192, 8192, 8192)


def sustained_clock(samples: Sequence[dict]) -> float:
    """Median SM clock (MHz) of the sustained GEMM's nvidia-smi samples (``smi``: ``"clock, power, temp"``)."""
    clocks = [float(str(s["smi"]).split(",")[0]) for s in samples if s.get("smi")]
    if not clocks:
        raise ValueError("the sustained samples carry no SM clock")
    return statistics.median(clocks)


def gemm_efficiency_for(base: GPUSpec, shape: tuple[int, int, int], tflops: float, mhz: float,
                        kind: str = "bf16") -> float:
    """The main-loop efficiency at which the shape law, at SM clock ``mhz``, runs ``shape`` at ``tflops``."""
    m, n, k = shape
    gemm = GemmShape(m, n, k, kind=kind, out_bytes=2)
    target_ns = gemm.flops / (tflops * 1e12) * 1e9
    lo, hi = 0.05, 2.0
    for _ in range(80):  # bisection: the law's time falls as the efficiency rises
        mid = (lo + hi) / 2
        spec = replace(base, sustained_mhz=mhz, gemm_eff=mid, fp8_gemm_eff=mid)
        if gemm_ns(gemm, spec) > target_ns:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def fp8_speedup(rows: Iterable[dict]) -> float | None:
    """Median FP8 over bf16 GEMM rate of the rows that measured both (None when none did)."""
    ratios = [r["fp8_tflops"] / r["bf16_tflops"] for r in rows if r.get("fp8_tflops") and r.get("bf16_tflops")]
    return statistics.median(ratios) if ratios else None


def memory_efficiencies(rows: Iterable[dict], hbm_tbps: float) -> dict[str, float]:
    """Each measured memory kernel's share of the HBM rate, keyed by the memory kinds it stands for."""
    out: dict[str, float] = {}
    for r in rows:
        for kind in MEMORY_OPS.get(r["op"], ()):
            out[kind] = round(r["gbps"] * BYTE_CONVERSION.get(r["op"], 1.0) / (hbm_tbps * 1e3), 2)
    return out


def attention_fit(rows: Sequence[tuple[float, float, float]], tensor_flops: float) -> tuple[float, float]:
    """``(efficiency, cta)`` from ``(flops, cta_flops, us)`` rows: the least squares of the log error of
    ``T0 + (flops + cta * cta_flops) / (efficiency * tensor_flops)`` (:func:`~mocked_model.compute.kernels.
    flash_attention_ns`), ``cta`` searched over 0-40 key/value blocks, the efficiency then in closed form."""
    points = [(f, c, us * 1e-6 - GEMM_T0_NS * 1e-9) for f, c, us in rows if us * 1e3 > GEMM_T0_NS]
    if len(points) < 2:
        raise ValueError("an attention fit needs at least two shapes")

    def solve(cta: float) -> tuple[float, float]:
        logs = [math.log((f + cta * c) / (tensor_flops * t)) for f, c, t in points]
        log_eff = sum(logs) / len(logs)
        return math.exp(log_eff), sum((x - log_eff) ** 2 for x in logs)

    cta = min((i / 100 for i in range(0, 4001)), key=lambda c: solve(c)[1])
    return solve(cta)[0], cta


def attention_rows(rows: Iterable[dict], backward: bool) -> list[tuple[float, float, float]]:
    """``(flops, cta_flops, us)`` of a sweep's or a profile's attention rows (``fwd_us`` / ``bwd_us``)."""
    out = []
    for r in rows:
        us = r.get("bwd_us" if backward else "fwd_us")
        if us is None or not us > 0:
            continue
        flops, cta = attention_work(int(r["batch"]), int(r["heads"]), int(r["seq"]), int(r["head_dim"]),
                                    int(r["v_dim"]), bool(r.get("causal", True)), backward)
        out.append((flops, cta, float(us)))
    return out


def fit_gpu(base: GPUSpec, kernels: dict, attention: Sequence[dict] = (), name: str | None = None) -> GPUSpec:
    """``base`` with the figures a kernel sweep (``kernels``, the sweep's JSON) and attention rows measured: the
    sustained clock, GEMM and FP8 efficiencies, memory-kernel shares and attention, each only where measured."""
    measured: list[str] = []
    spec = base
    if kernels.get("sustained"):
        mhz = sustained_clock(kernels["sustained"])
        rate = statistics.median(float(s["tflops"]) for s in kernels["sustained"])
        eff = gemm_efficiency_for(base, SUSTAINED_SHAPE, rate, mhz)
        spec = replace(spec, sustained_mhz=mhz, gemm_eff=round(eff, 4))
        measured += ["sustained_mhz", "gemm_eff"]
        speedup = fp8_speedup(kernels.get("gemm", ()))
        if speedup is not None and spec.fp8_tflops:
            spec = replace(spec, fp8_gemm_eff=round(spec.gemm_eff * speedup / 2, 4))
            measured.append("fp8_gemm_eff")
    if kernels.get("memory_kernels"):
        shares = memory_efficiencies(kernels["memory_kernels"], spec.hbm_tbps)
        spec = replace(spec, mem_eff=tuple(sorted({**dict(spec.mem_eff), **shares}.items())))
        measured.append("mem_eff")
    if len(attention) >= 2:  # timed at the sweep's sustained clock (it runs after the sustained GEMM)
        rate = spec.tensor_flops("bf16")
        fwd = attention_fit(attention_rows(attention, False), rate)
        bwd = attention_fit(attention_rows(attention, True), rate)
        spec = replace(spec, attn_fwd_eff=round(fwd[0], 4), attn_fwd_cta=fwd[1], attn_bwd_eff=round(bwd[0], 4),
                       attn_bwd_cta=bwd[1])
        measured += ["attn_fwd_eff", "attn_fwd_cta", "attn_bwd_eff", "attn_bwd_cta"]
    return replace(spec, name=name or spec.name, measured=tuple(dict.fromkeys((*base.measured, *measured))))


def relative_errors(spec: GPUSpec, kernels: dict) -> list[tuple[tuple[int, int, int], float, float]]:
    """``(shape, measured TFLOP/s, law / measured - 1)`` for each bf16 GEMM row of a sweep (a check of the law)."""
    out = []
    for r in kernels.get("gemm", ()):
        shape = GemmShape(r["m"], r["n"], r["k"])
        law = shape.flops / gemm_ns(shape, spec) / 1e3
        out.append(((r["m"], r["n"], r["k"]), r["bf16_tflops"], law / r["bf16_tflops"] - 1))
    return out


def rms_log_error(errors: Iterable[float]) -> float:
    values = [math.log1p(e) ** 2 for e in errors]
    return math.sqrt(sum(values) / len(values)) if values else 0.0

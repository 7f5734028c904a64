"""The FP8 recipes' GEMM speedups against the page NVIDIA publishes with Transformer Engine, and the block-scaled
factor solved from it (mocked_model/compute/kernels.py ``HOPPER_BLOCK_SCALED_GEMM``).

Transformer Engine's ``docs/examples/gemm_profiling/gemm_profiling.rst`` ("Worked Example: 5B Model on H200") times
the twelve GEMMs of one layer (hidden 4096, FFN 16384, 32 heads, micro-batch 31 x 512 tokens) on an H200 NVL with
their quantization (autocast): BF16 32.014 ms, FP8 current scaling 20.285, delayed 18.978, block scaling 22.882.
This prices the same layer's four linear layers forward and backward (one-layer job, one H200) under each recipe,
prints the speedups over BF16 beside the page's, and bisects the block-scaled factor that puts block scaling at the
page's 1.128x of current scaling (the constant is that value, rounded).  Nothing else is fitted.

    python bench/check_fp8_recipes.py
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import mocked_model.compute.kernels as kernels  # noqa: E402
from mocked_model.compute.gpu_table import B300_FACTOR  # noqa: E402
from simulator.cli import build_parser, simulate_args  # noqa: E402

PAGE_MS = {"bfloat16": 32.014, "tensorwise": 20.285, "delayed": 18.978, "blockwise": 22.882}
"""Per-layer GEMM time (ms) on the page, by our recipe name (tensorwise = Transformer Engine's current scaling)."""
B300_PAGE_MS = {"bfloat16": (12.758 + 13.102) / 2, "tensorwise": 9.147, "mxfp8": 8.984}
"""The page's B300 (``NVIDIA B300 SXM6 AC``) per-layer GEMM times, same layer, with quantization; BF16 is the mean of
its autocast and pre-quantized runs (12.758 and 13.102 ms: no quantization either way).  Pre-quantized (GEMMs
alone): current scaling 6.812 ms, MXFP8 7.161."""
B300_PREQUANT_MS = {"tensorwise": 6.812, "mxfp8": 7.161}
JOB = ("--model", "topo", "-g_p_s", "1", "--gpu_type", "H200", "--frame", "Megatron", "--world_size", "1",
       "--num_layers", "1", "--hidden_size", "4096", "--ffn_hidden_size", "16384", "--num_attention_heads", "32",
       "--seq_length", "512", "--micro_batch", "31", "--global_batch", "31", "--vocab_size", "32000", "-q")
LINEARS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")


def linear_ms(recipe: str, gpu: str = "H200", gemms_only: bool = False) -> float:
    """Milliseconds of the layer's four linear layers, forward and backward, under ``recipe`` on ``gpu`` (with
    ``gemms_only``, their GEMM kernels alone: the page's pre-quantized runs)."""
    from mocked_model.compute import item_kernels
    from mocked_model.compute.gpus import gpu_spec

    precision = ["--dtype", "bfloat16"] if recipe == "bfloat16" else ["--dtype", "float8", "--fp8_recipe", recipe]
    job = [gpu if flag == "H200" else flag for flag in JOB]
    args = build_parser().parse_args([*job, *precision])
    if not gemms_only:
        result, _, _ = simulate_args(args)
        return sum(iv.duration_s for iv in result.details.intervals()
                   if iv.stream == "compute" and iv.name.split(" ")[-1].split(".")[-1] in LINEARS) * 1e3
    from dataclasses import replace

    from simulator.cli import job_of
    from workload_generator.megatron import MegatronWorkload

    job_config, _ = job_of(args)
    job_config = replace(job_config, training=replace(job_config.training, computation_enable=True))
    spec = gpu_spec(gpu)
    dtype = "float8" if recipe != "bfloat16" else "bfloat16"
    total = 0.0
    for item in MegatronWorkload(job_config)():
        if item.is_computation and (item.stage or "").split(".")[-1] in LINEARS:
            total += sum(k.ns(spec) for k in item_kernels(item, dtype, spec) or () if k.gemm is not None)
    return total / 1e6


def solve_block_factor() -> float:
    """The block-scaled main-loop factor at which block scaling costs the page's ratio to current scaling."""
    target = PAGE_MS["blockwise"] / PAGE_MS["tensorwise"]
    current = linear_ms("tensorwise")
    saved, (lo, hi) = kernels.HOPPER_BLOCK_SCALED_GEMM, (0.3, 1.0)
    try:
        for _ in range(25):
            kernels.HOPPER_BLOCK_SCALED_GEMM = (lo + hi) / 2
            if linear_ms("blockwise") / current > target:
                lo = kernels.HOPPER_BLOCK_SCALED_GEMM
            else:
                hi = kernels.HOPPER_BLOCK_SCALED_GEMM
    finally:
        kernels.HOPPER_BLOCK_SCALED_GEMM = saved
    return (lo + hi) / 2


def solve_b300_factor() -> float:
    """The share of the B200's main-loop efficiencies (BF16 and FP8 alike) at which the B300's twelve BF16 GEMMs take
    the page's time."""
    from dataclasses import replace

    import mocked_model.compute.gpu_table as table

    saved = table.GPUS["B300"]
    lo, hi = 0.5, 1.5
    try:
        for _ in range(25):
            mid = (lo + hi) / 2
            table.GPUS["B300"] = replace(saved, gemm_eff=saved.gemm_eff * mid / B300_FACTOR,
                                         fp8_gemm_eff=saved.fp8_gemm_eff * mid / B300_FACTOR)
            lo, hi = (mid, hi) if linear_ms("bfloat16", "B300") > B300_PAGE_MS["bfloat16"] else (lo, mid)
    finally:
        table.GPUS["B300"] = saved
    return (lo + hi) / 2


def main() -> None:
    ours = {recipe: linear_ms(recipe) for recipe in PAGE_MS}
    print(f"{'recipe':<12} {'ours ms':>8} {'speedup':>8}   {'page ms':>8} {'speedup':>8}")
    for recipe, page in PAGE_MS.items():
        print(f"{recipe:<12} {ours[recipe]:8.3f} {ours['bfloat16'] / ours[recipe]:8.3f}x  {page:8.3f} "
              f"{PAGE_MS['bfloat16'] / page:8.3f}x")
    print(f"block-scaled factor solved from the page: {solve_block_factor():.4f} "
          f"(HOPPER_BLOCK_SCALED_GEMM = {kernels.HOPPER_BLOCK_SCALED_GEMM})")
    print(f"\nB300 (the page's B300 SXM6 AC): {'recipe':<12} {'ours ms':>8} {'page ms':>8}   GEMMs alone: ours / page")
    for recipe, page in B300_PAGE_MS.items():
        alone = B300_PREQUANT_MS.get(recipe)
        extra = (f"   {linear_ms(recipe, 'B300', gemms_only=True):6.3f} / {alone:6.3f}" if alone else "")
        print(f"{'':32}{recipe:<12} {linear_ms(recipe, 'B300'):8.3f} {page:8.3f}{extra}")
    print(f"B300's share of the B200's GEMM efficiencies solved from its BF16 row: {solve_b300_factor():.4f} "
          f"(B300_FACTOR = {B300_FACTOR})")


if __name__ == "__main__":
    main()

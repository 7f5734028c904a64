#!/usr/bin/env python3
"""The compute model's GEMM law against Vidur's H100 measurements of Llama-2-70B's linear layers.

    .venv/bin/python bench/check_vidur_gemms.py [--gpu H100]

Data: bench/data/vidur_h100_llama2_70b_linear.csv, the medians of microsoft/vidur's
data/profiling/compute/h100/meta-llama/Llama-2-70b-hf/mlp.csv (attn_pre_proj = QKV 8192 -> 10240/tp,
attn_post_proj = 8192/tp -> 8192, mlp_up_proj = 8192 -> 2 x 28672/tp (gate and up), mlp_down_proj = 28672/tp
-> 8192; bf16, 1-4096 tokens, TP 1-8), timed by Vidur with CUDA events around each PyTorch linear.  Printed:
the predicted / measured ratio per token range (decode-shaped GEMMs below 256 tokens are weight-bound, the
ones above compute-bound), its median and spread.  The law's ``gemm_operands`` memory share comes from the
weight-bound rows (mocked_model/compute/gpu_table.py, [VIDUR_H100]); the compute-bound rows check the rest.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path

from mocked_model.compute import gpu_spec
from mocked_model.compute.kernels import GemmShape, gemm_ns

DATA = Path(__file__).resolve().parent / "data" / "vidur_h100_llama2_70b_linear.csv"
HIDDEN, FFN, HEADS, KV_HEADS, HEAD_DIM = 8192, 28672, 64, 8, 128
BANDS = ((1, 64), (65, 255), (256, 1023), (1024, 4096))


def shapes(tp: int) -> dict[str, tuple[int, int]]:
    """(k, n) of each measured linear layer at tensor parallelism ``tp``."""
    return {"qkv_ms": (HIDDEN, (HEADS + 2 * KV_HEADS) * HEAD_DIM // tp), "proj_ms": (HEADS * HEAD_DIM // tp, HIDDEN),
            "fc1_ms": (HIDDEN, 2 * FFN // tp), "fc2_ms": (FFN // tp, HIDDEN)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", default="H100")
    args = parser.parse_args()
    gpu = gpu_spec(args.gpu)
    ratios: dict[tuple[int, int], list[float]] = {band: [] for band in BANDS}
    with open(DATA, newline="") as handle:
        for row in csv.DictReader(handle):
            m, tp = int(row["num_tokens"]), int(row["tp"])
            band = next(b for b in BANDS if b[0] <= m <= b[1])
            for column, (k, n) in shapes(tp).items():
                ratios[band].append(gemm_ns(GemmShape(m, n, k), gpu) / (float(row[column]) * 1e6))
    print(f"{gpu.name}: predicted / measured time of {sum(map(len, ratios.values()))} GEMMs (Vidur, Llama-2-70B)")
    for (lo, hi), values in ratios.items():
        q = statistics.quantiles(values, n=10)
        print(f"  tokens {lo:>4}-{hi:<4} {len(values):4d} GEMMs: median {statistics.median(values):.3f}, "
              f"10-90% {q[0]:.3f}-{q[-1]:.3f}")


if __name__ == "__main__":
    main()

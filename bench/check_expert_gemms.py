"""The compute model's expert GEMMs against the H200's measured AIOB rows (profiling/measurements/h200/profiles/
compute/h200/{mixtral_8x7B_ep8,deepseek_v3_ep8}/mlp.csv): per row the measured time, the GEMM law's (a loop of
``batch`` GEMMs, as the row's ``implementation`` says AIOB ran them) and its error, and what one grouped launch of
the same experts would take by :mod:`mocked_model.compute.grouped`.

    python bench/check_expert_gemms.py

Mixtral 8x7B at EP 8 holds one expert per rank (8192 tokens: 4096 x top-2 x 8 ranks / 8 experts), timed as one
``F.linear``; DeepSeek-V3 at EP 8 holds 32 (1024 tokens each), timed as a loop of 32 matmuls.
"""

from __future__ import annotations

import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mocked_model.compute.gpus import gpu_spec  # noqa: E402
from mocked_model.compute.grouped import grouped_gemm_ns  # noqa: E402
from mocked_model.compute.kernels import GemmShape, gemm_ns  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "profiling", "measurements", "h200",
                    "profiles", "compute", "h200")
EXPERT_ROWS = {
    "mixtral_8x7B_ep8": lambda row: int(row["m"]) == 8192 and {int(row["n"]), int(row["k"])} & {14336, 28672},
    "deepseek_v3_ep8": lambda row: "loop of" in row["implementation"] or "grouped" in row["implementation"],
}


def rows() -> list[dict]:
    """Every expert GEMM row with the law's times (us) and error (%)."""
    gpu = gpu_spec("H200")
    out = []
    for model, wanted in EXPERT_ROWS.items():
        with open(os.path.join(ROOT, model, "mlp.csv"), newline="") as f:
            for row in csv.DictReader(f):
                if row["op"] != "gemm" or not wanted(row):
                    continue
                m, n, k, batch = int(row["m"]), int(row["n"]), int(row["k"]), int(row["batch"] or 1)
                shape = GemmShape(m, n, k, 1, "bf16", 2)
                law = gemm_ns(shape, gpu) * batch / 1e3
                grouped = grouped_gemm_ns(GemmShape(m * batch, n, k, 1, "bf16", 2), ((m, n, k),) * batch, gpu) / 1e3
                measured = float(row["time_us"])
                out.append({"model": model, "shape": f"{batch} x {m}x{n}x{k}", "implementation": row["implementation"],
                            "measured_us": measured, "law_us": law, "error_pct": (law / measured - 1) * 100,
                            "grouped_us": grouped})
    return out


def main() -> int:
    print(f"{'model':<18} {'experts x m x n x k':<24} {'measured us':>12} {'law us':>10} {'error':>8} {'grouped us':>11}")
    for r in rows():
        print(f"{r['model']:<18} {r['shape']:<24} {r['measured_us']:>12.1f} {r['law_us']:>10.1f} "
              f"{r['error_pct']:>+7.1f}% {r['grouped_us']:>11.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

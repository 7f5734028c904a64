"""The grouped GEMM law (mocked_model/compute/grouped.py) against Transformer Engine's way of running an expert layer's
GEMMs on an H100: one cuBLASLt GEMM per expert, round-robin on 4 streams (profiling/measurements/h100/
grouped_gemms.json, GPU times of CUDA-graph replays; FP8 through ``torch._scaled_mm``).

The measurement ran at a burst clock (1290-1410 MHz, the law prices the sustained one), so each measured time is
divided by the same run's 8192^3 GEMM over the law's (per dtype) before the comparison.  Per case and per model's six
GEMMs (fc1 and fc2: forward, input gradient, weight gradient) it prints the measured time, the law, the law without
the per-expert fixed cost (one grouped kernel, as the law stood before) and a loop of the dense law.  Nothing is
fitted here: the per-expert cost is the dense law's T0.

    python bench/check_grouped_gemms.py
"""

from __future__ import annotations

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from mocked_model.compute.gpus import gpu_spec  # noqa: E402
from mocked_model.compute.grouped import grouped_gemm_ns  # noqa: E402
from mocked_model.compute.kernels import GEMM_T0_NS, GemmShape, gemm_ns  # noqa: E402

DATA = os.path.join(ROOT, "profiling", "measurements", "h100", "grouped_gemms.json")


def rows() -> list[dict]:
    """Each measured group with the law's times (us), clock-normalised."""
    gpu = gpu_spec("H100")
    with open(DATA) as f:
        cases = json.load(f)["cases"]
    ref: dict[bool, list[float]] = {}
    for c in cases:
        if c["name"].startswith("ref"):
            ref.setdefault(c["fp8"], []).append(c["serial_us"])
    norm = {fp8: sum(v) / len(v) / (gemm_ns(GemmShape(8192, 8192, 8192, 1, "fp8" if fp8 else "bf16", 2), gpu) / 1e3)
            for fp8, v in ref.items()}
    out = []
    for c in cases:
        if c["name"].startswith("ref"):
            continue
        kind = "fp8" if c["fp8"] else "bf16"
        m, n, k, e = c["m"], c["n"], c["k"], c["experts"]
        out_bytes = 4 if c["name"].endswith("wgrad") else 2
        law = grouped_gemm_ns(GemmShape(m * e, n, k, 1, kind, out_bytes), ((m, n, k),) * e, gpu) / 1e3
        out.append({"case": c["name"], "kind": kind, "experts": e, "measured_us": c["multistream4_us"] / norm[c["fp8"]],
                    "law_us": law, "one_kernel_us": law - (e - 1) * GEMM_T0_NS / 1e3,
                    "loop_us": e * gemm_ns(GemmShape(m, n, k, 1, kind, out_bytes), gpu) / 1e3})
    return out


def main() -> int:
    table = rows()
    print(f"{'case':<16} {'kind':<5} {'E':>3} {'measured':>9} {'law':>9} {'one kernel':>11} {'loop':>9}   (us)")
    for r in table:
        print(f"{r['case']:<16} {r['kind']:<5} {r['experts']:>3} {r['measured_us']:>9.1f} {r['law_us']:>9.1f} "
              f"{r['one_kernel_us']:>11.1f} {r['loop_us']:>9.1f}")
    print("\nper model's six GEMMs, measured / law (measured / one grouped kernel, measured / loop):")
    for model in ("q30", "q235", "oss", "mix"):
        for kind in ("fp8", "bf16"):
            group = [r for r in table if r["case"].startswith(model + "_") and r["kind"] == kind]
            if not group:
                continue
            meas = sum(r["measured_us"] for r in group)
            ratio = [meas / sum(r[key] for r in group) for key in ("law_us", "one_kernel_us", "loop_us")]
            print(f"  {model:<5} {kind:<5} {ratio[0]:.2f} ({ratio[1]:.2f}, {ratio[2]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

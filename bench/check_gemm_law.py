"""Check the compute model's GEMM law against kernel-level measurements.

- OpenXLA ships measured bf16 GEMM throughputs of an H100 SXM (bench/data/xla_sm90_bf16_gemm.csv, 72 shapes of
  batch 1-4 and 256-4096 per dimension);
- our H200 sweep (profiling/measurements/h200/kernels.json): 12 training shapes, bf16 and FP8, GPU-bound.

Both are short bursts, which run at a higher clock than a long training load sustains; the law prices the
sustained clock (the H200 held 1485 of 1830 MHz over 20 s of 8192^3 GEMMs, which is where its efficiency
comes from), so it should come out slower than the bursts by up to the clock ratio.  This prints the law's time
against each measurement and the root-mean-square of the log error, plus the anchor shapes the GPU table
cites.  Nothing is fitted here: the law's constants come from mocked_model/compute/{gpu_table,kernels}.py.

    python bench/check_gemm_law.py
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mocked_model.compute import GemmShape, gemm_ns, gemm_tflops  # noqa: E402


def main() -> None:
    rows = []
    with open(ROOT / "bench" / "data" / "xla_sm90_bf16_gemm.csv") as f:
        lines = [line for line in f if not line.startswith("#")]
    for r in csv.DictReader(lines):
        b, m, n, k = (int(r[c]) for c in ("batch", "m", "n", "k"))
        measured_us = 2 * b * m * n * k / float(r["flops_per_s"]) * 1e6
        model_us = gemm_ns(GemmShape(m, n, k, b), "H100") / 1e3
        rows.append((b, m, n, k, measured_us, model_us, math.log(model_us / measured_us)))
    rows.sort(key=lambda r: r[4])
    print(f"{'batch':>5} {'m':>5} {'n':>5} {'k':>5} {'measured us':>12} {'model us':>9} {'error':>7}")
    for b, m, n, k, meas, model, err in rows:
        print(f"{b:>5} {m:>5} {n:>5} {k:>5} {meas:>12.1f} {model:>9.1f} {math.expm1(err):>+7.1%}")
    rms = math.sqrt(sum(r[6] ** 2 for r in rows) / len(rows))
    worst = max(rows, key=lambda r: abs(r[6]))
    print(f"\n{len(rows)} shapes: root-mean-square log error {rms:.3f}; worst {math.expm1(worst[6]):+.1%} "
          f"at {worst[0]}x{worst[1]}x{worst[2]}x{worst[3]}")
    import json

    sweep = json.loads((ROOT / "profiling" / "measurements" / "h200" / "kernels.json").read_text())
    print("\nH200 sweep (bf16 and FP8 TFLOP/s, measured burst / law at the sustained clock):")
    errors = []
    for r in sweep["gemm"]:
        m, n, k = r["m"], r["n"], r["k"]
        law, law8 = gemm_tflops(m, n, k, "H200"), gemm_tflops(m, n, k, "H200", "float8")
        errors += [math.log(law / r["bf16_tflops"]), math.log(law8 / r["fp8_tflops"])]
        print(f"{m:>6} {n:>6} {k:>6}  bf16 {r['bf16_tflops']:7.1f} / {law:7.1f} {law / r['bf16_tflops'] - 1:+7.1%}"
              f"   fp8 {r['fp8_tflops']:7.1f} / {law8:7.1f} {law8 / r['fp8_tflops'] - 1:+7.1%}")
    rms = math.sqrt(sum(e * e for e in errors) / len(errors))
    mean = math.expm1(sum(errors) / len(errors))
    print(f"{len(errors)} rates: root-mean-square log error {rms:.3f}; geometric-mean law / burst {mean:+.1%} "
          f"(sustained 8192^3: 718 TFLOP/s measured)")
    a100, h100, h100_small = (gemm_tflops(n, n, n, gpu) for n, gpu in ((8192, "A100"), (8192, "H100"), (4096, "H100")))
    print(f"anchors: A100 8192^3 {a100:.0f} TFLOP/s (He 2024: 258 with randn inputs); H100 8192^3 {h100:.0f} TFLOP/s "
          f"(Bekman's best of sweep: 794.5); H100 4096^3 {h100_small:.0f} (XLA: 783.3)")


if __name__ == "__main__":
    main()

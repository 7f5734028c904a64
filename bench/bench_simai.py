"""Benchmark: SimAI workload generation is linear in the number of records.

GPT-3 175B, tp 8, pp 8, SP, world 1024, on pipeline stage 0; the global batch sets the record count
(8192 -> about 37,000 records, 32768 -> about 150,000, over 10^5).  Whole-process medians; the
per-record time of the two sizes should agree (linear generation).
Run:  python bench/bench_simai.py [runs]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE = ["--model_name", "gpt3_175B", "--world_size", "1024", "--tensor_model_parallel_size", "8",
        "--pipeline_model_parallel", "8", "--enable_sequence_parallel"]


def run(global_batch: int, out: str) -> float:
    cmd = [sys.executable, "-m", "workload_generator.SimAI_training_workload_generator", *BASE, "--global_batch",
           str(global_batch), "--output", out]
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for gbs in (8192, 32768):
            out = str(Path(tmp) / f"w{gbs}.txt")
            times = [run(gbs, out) for _ in range(runs)]
            records = int(Path(out).read_text().split("\n", 2)[1])
            rows.append((gbs, records, statistics.median(times), min(times), max(times)))
        (_, small, small_s, _, _) = rows[0]
        for gbs, records, med, lo, hi in rows:
            line = f"global batch {gbs}: {records} records, median {med:.3f} s (min {lo:.3f}, max {hi:.3f})"
            if records != small:
                line += f"; {(med - small_s) / (records - small) * 1e6:.1f} us per additional record"
            print(line)


if __name__ == "__main__":
    main()

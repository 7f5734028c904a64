#!/usr/bin/env python3
"""Time the serving simulator's whole command (run by hand).

    .venv/bin/python bench/bench_serve.py [--runs 5]

Issue 27's bar: ``python -m simulator serve`` on Llama 3 70B, TP 4, 8 replicas on H100 (a derived fabric of 8-GPU
servers), 10,000 Poisson requests (40 per second; vLLM's random-dataset lengths, 1024 prompt and 128 output
tokens), SLOs on TTFT and TPOT, every output file written (requests, steps, summary, Perfetto trace, HTML report):
the whole process from start to exit under 30 s on a 2-core machine, its peak memory under 500 MB.  Printed with
``python -c "import numpy"`` timed in the same run as the baseline (the interpreter and the one dependency the
command cannot avoid), as a ratio, and the run's p50/p99 TTFT and TPOT and goodput.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = ["-g_p_s", "8", "--gpu_type", "H100", "--model_name", "llama3_70B", "--tensor_model_parallel_size", "4",
       "--replicas", "8", "--qps", "40", "--num_requests", "10000", "--slo_ttft", "2", "--slo_tpot", "0.05", "--json"]


def timed(command: list[str], env: dict, cwd: str) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(command, env=env, check=True, cwd=cwd, stdout=subprocess.PIPE, text=True)
    return time.perf_counter() - start, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "simulator", "serve", *JOB, "-o", os.path.join(folder, "run")]
        baseline = [sys.executable, "-c", "import numpy"]
        _, out = timed(command, env, folder)  # warm caches and .pyc
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        ours, base = [], []
        for _ in range(args.runs):  # interleaved, so that machine load hits both alike
            ours.append(timed(command, env, folder)[0])
            base.append(timed(baseline, env, folder)[0])
        sizes = {name: os.path.getsize(os.path.join(folder, "run", name)) for name in os.listdir(os.path.join(folder, "run"))}
    figures = json.loads(out.strip().splitlines()[-1])
    median, base_median = statistics.median(ours), statistics.median(base)
    print(f"serve, Llama 3 70B TP 4 x 8 replicas on H100, 10,000 Poisson requests at 40/s: median {median:.2f} s "
          f"(min {min(ours):.2f}, max {max(ours):.2f}; {args.runs} runs), peak memory {peak_kib / 1024:.0f} MiB; "
          f"python -c 'import numpy' {base_median:.3f} s; ratio {median / base_median:.1f}x")
    print(f"  TTFT p50 {figures['ttft_p50_s'] * 1e3:.1f} ms, p99 {figures['ttft_p99_s'] * 1e3:.1f} ms; TPOT p50 "
          f"{figures['tpot_p50_s'] * 1e3:.1f} ms, p99 {figures['tpot_p99_s'] * 1e3:.1f} ms; "
          f"{figures['requests_per_s']:.2f} requests/s, goodput {figures['goodput_requests_per_s']:.2f} requests/s; "
          f"files: " + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sorted(sizes.items())))


if __name__ == "__main__":
    main()

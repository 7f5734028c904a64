#!/usr/bin/env python3
"""Time the SimAI-compatible simulator and the SimAI workload file writer/reader (run by hand).

    .venv/bin/python bench/bench_simulator.py [--runs 7] [--workload FILE]

Prints, for the example workload (1789 records, SimAI's 9216-GPU MoE model):
- the whole ``python -m simulator`` process, wall time (the README's figure; target < 0.5 s);
- ``simulator.api.simulate`` in process;
- ``SimAIWorkload.dumps`` / ``loads`` of 10^5 records (the generator's large files; target < 1 s).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DEFAULT_WORKLOAD = ROOT / "tests" / "data" / "examples" / "simai_workload_analytical.txt"
FLAGS = ["-g", "9216", "-g_p_s", "8", "-n_p_s", "8", "-nv", "360", "-nic", "48.5"]


def timed(function, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return times


def report(label: str, times: list[float]) -> None:
    print(f"{label:<52} min {min(times) * 1000:8.1f} ms   median {statistics.median(times) * 1000:8.1f} ms"
          f"   ({len(times)} runs)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--workload", default=str(DEFAULT_WORKLOAD))
    args = parser.parse_args()

    from simulator.api import simulate
    from simulator.options import SimAIOptions
    from workload_generator.simai import SimAIWorkload

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "simulator", "-w", args.workload, *FLAGS, "-q", "-r_f", folder]
        subprocess.run(command, env=env, check=True, cwd=folder)  # warm the file cache and .pyc files
        report("python -m simulator (whole process)",
               timed(lambda: subprocess.run(command, env=env, check=True, cwd=folder), args.runs))

    workload = SimAIWorkload.read(args.workload, strict=False)
    options = SimAIOptions(gpus=9216, gpus_per_server=8, nics_per_server=8, nvlink_bw=360, nic_busbw=48.5)
    report(f"simulate() in process ({len(workload)} records)", timed(lambda: simulate(workload, options), args.runs))
    report(f"SimAIWorkload.read ({len(workload)} records, lenient)",
           timed(lambda: SimAIWorkload.read(args.workload, strict=False), args.runs))

    repeat = -(-100_000 // len(workload))
    big = SimAIWorkload(workload.header, workload.records * repeat)
    text = big.dumps()
    report(f"SimAIWorkload.dumps ({len(big)} records)", timed(big.dumps, args.runs))
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "big.txt"
        report(f"SimAIWorkload.write ({len(big)} records, atomic)", timed(lambda: big.write(target), args.runs))
    report(f"SimAIWorkload.loads ({len(big)} records, strict)", timed(lambda: SimAIWorkload.loads(text), args.runs))


if __name__ == "__main__":
    main()

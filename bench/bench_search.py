#!/usr/bin/env python3
"""Time the layout search (run by hand).

    .venv/bin/python bench/bench_search.py [--runs 3] [--jobs 2] [--no_prune]

Llama 3 405B (sequence 8192, global batch 2048, flash attention) on 16,384 H100 of a Spectrum-X fabric
(``python -m topo.gen -topo Spectrum-X -g 16384 --pods 4``): the whole ``python -m simulator search``
process over every layout (TP up to 8, PP with Megatron's uneven splits, DP, chunks, micro-batch,
recomputation, SP, distributed optimizer, rank order, TP-communication overlap).  Issue's bar: at least
2,000 layouts in under 5 minutes on 2 cores.

Printed with the baseline measured in the same run, interleaved with the search so that machine load
hits both alike: one whole-job simulation of the same model (``python -m simulator -t ... <job flags>``,
Llama 3's published layout), so that the ratio says how many single simulations the search costs.  The
rate is layouts simulated per second of the search's wall time per worker process.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ["--gpu_type", "H100", "--model_name", "llama3_405B", "--global_batch", "2048", "--seq_length", "8192",
         "--use_flash_attn"]
ONE_LAYOUT = ["--world_size", "16384", "--tensor_model_parallel_size", "8", "--pipeline_model_parallel", "16",
              "--decoder_first_pipeline_num_layers", "7", "--decoder_last_pipeline_num_layers", "7",
              "--enable_sequence_parallel", "--use-distributed-optimizer"]


def run(command: list[str], env: dict, cwd: str) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, check=True, cwd=cwd, capture_output=True, text=True)
    return time.perf_counter() - start, done.stdout + done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2, help="search worker processes (default 2)")
    parser.add_argument("--no_prune", action="store_true", help="simulate every layout that fits")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.TemporaryDirectory() as folder:
        topology = os.path.join(folder, "spx16k.txt")
        subprocess.run([sys.executable, "-m", "topo.gen", "-topo", "Spectrum-X", "-g", "16384", "--pods", "4", "-o",
                        topology], env=env, check=True, cwd=folder, stdout=subprocess.DEVNULL)
        search = [sys.executable, "-m", "simulator", "search", "-t", topology, *MODEL, "--world_size", "16384",
                  "-o", os.path.join(folder, "search.csv"), "--jobs", str(args.jobs),
                  *(["--no_prune"] if args.no_prune else [])]
        single = [sys.executable, "-m", "simulator", "-t", topology, *MODEL, *ONE_LAYOUT, "-q", "-r_f", folder]
        run(single, env, folder)  # warm caches and .pyc
        ours, base, text = [], [], ""
        for _ in range(args.runs):
            seconds, text = run(search, env, folder)
            ours.append(seconds)
            base.append(run(single, env, folder)[0])
    enumerated = int(re.search(r"(\d+) layouts on", text).group(1))
    simulated = int(re.search(r"simulated (\d+) layouts", text).group(1))
    median, base_median = statistics.median(ours), statistics.median(base)
    print(f"search, Llama 3 405B on 16,384 H100: {enumerated} layouts enumerated, {simulated} simulated; median "
          f"{median:.1f} s (min {min(ours):.1f}, max {max(ours):.1f}; {args.runs} runs, {args.jobs} workers); "
          f"{simulated / median / args.jobs:.2f} layouts per second per worker; one whole-job simulation "
          f"{base_median:.2f} s in the same run, ratio {median / base_median:.0f}x; load average "
          f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

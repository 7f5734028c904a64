#!/usr/bin/env python3
"""Time the whole-job simulator command (run by hand).

    .venv/bin/python bench/bench_whole_job.py [--runs 7]

Llama 3 405B (126 layers, first and last stage 7, tp 8, pp 16, dp 128, sequence 8192, global batch 2048,
sequence parallelism, distributed optimizer, overlapped gradient reduction, flash attention) on a 16,384-GPU
Spectrum-X fabric (``python -m topo.gen -topo Spectrum-X -g 16384 --pods 4``): the whole
``python -m simulator -t ... <job flags>`` process, from start to exit (generation of all 16 stages,
compute model, topology read, schedule played, result files written).  Issue's bar: under 3 s on a 2-core
machine.  Printed with ``python -c "import numpy"`` timed in the same run as the baseline (the interpreter
and the one dependency the command cannot avoid), as a ratio.
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
JOB = ["--gpu_type", "H100", "--model_name", "llama3_405B", "--world_size", "16384", "--tensor_model_parallel_size", "8",
       "--pipeline_model_parallel", "16", "--decoder_first_pipeline_num_layers", "7",
       "--decoder_last_pipeline_num_layers", "7", "--global_batch", "2048", "--seq_length", "8192",
       "--enable_sequence_parallel", "--use-distributed-optimizer", "--overlap_grad_reduce", "--use_flash_attn"]


def timed(command: list[str], runs: int, env: dict, cwd: str) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, env=env, check=True, cwd=cwd, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.TemporaryDirectory() as folder:
        topology = os.path.join(folder, "spx16k.txt")
        subprocess.run([sys.executable, "-m", "topo.gen", "-topo", "Spectrum-X", "-g", "16384", "--pods", "4", "-o",
                        topology], env=env, check=True, cwd=folder, stdout=subprocess.DEVNULL)
        command = [sys.executable, "-m", "simulator", "-t", topology, *JOB, "-q", "-r_f", folder]
        baseline = [sys.executable, "-c", "import numpy"]
        subprocess.run(command, env=env, check=True, cwd=folder, stdout=subprocess.DEVNULL)  # warm caches and .pyc
        ours, base = [], []
        for _ in range(args.runs):  # interleaved, so that machine load hits both alike
            ours += timed(command, 1, env, folder)
            base += timed(baseline, 1, env, folder)
    median, base_median = statistics.median(ours), statistics.median(base)
    print(f"whole-job simulator, Llama 3 405B on 16,384 GPUs: median {median:.2f} s (min {min(ours):.2f}, max "
          f"{max(ours):.2f}; {args.runs} runs); python -c 'import numpy' {base_median:.3f} s; ratio "
          f"{median / base_median:.1f}x")


if __name__ == "__main__":
    main()

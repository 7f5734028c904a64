#!/usr/bin/env python3
"""Time the layout search and check its answers (run by hand).

    .venv/bin/python bench/bench_search.py [--runs 5] [--jobs 1] [--check 20] [--space default|wide]

Llama 3 405B (sequence 8192, global batch 2048, flash attention) on 16,384 H100 of a 4-pod Spectrum-X fabric
(``python -m topo.gen -topo Spectrum-X -g 16384 --pods 4``): the whole ``python -m simulator search`` process,
``--jobs 1``.  Issue 29's bar: at least 400 layouts per second per worker, the top 20 identical to a full
``python -m simulator`` run of each, to the microsecond.

Printed per run and as medians, with what was measured in the same run beside it (interleaved, so that machine
load hits both alike): one whole-job simulation (``python -m simulator -t ... <job flags>``, Llama 3's published
layout) and the interpreter with numpy (``python -c "import numpy"``).  The rates, per worker process:

- searched: every layout the search decided on (rejected by Megatron's rules, too big for the GPU, bounded out, or
  simulated) per second of the whole process;
- fitting: the layouts that fit the GPU (each either simulated or proved unable to enter the top ``--top`` by its
  lower bound) per second;
- simulated: full simulations per second.

``--check K`` then runs ``python -m simulator`` on each of the K best rows and compares its ``iteration_s`` with the
CSV's, to the microsecond.  ``--space wide`` adds context parallelism (``--cp 1,2,4``) and both settings of
``--overlap_param_gather``: a space issue 29 calls one to two orders of magnitude larger.
"""

from __future__ import annotations

import argparse
import csv
import json
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
SPACES = {"default": [], "wide": ["--cp", "1,2,4", "--overlap_param_gather", "both"]}


def run(command: list[str], env: dict, cwd: str) -> tuple[float, float, str]:
    """(wall, CPU) seconds and the output of one whole process (CPU: user + system of the child)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stdout}{done.stderr}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu, done.stdout + done.stderr


def flags_of(row: dict[str, str]) -> list[str]:
    from simulator.search.files import layout_of

    return layout_of(row).flags()


def check_rows(rows: list[dict[str, str]], topology: str, env: dict, folder: str) -> list[str]:
    """Run ``python -m simulator`` on each row's layout; the rows whose time differs (to the microsecond)."""
    bad = []
    for row in rows:
        command = [sys.executable, "-m", "simulator", "-t", topology, *MODEL, *flags_of(row), "--json", "-q",
                   "-r_f", folder]
        out = subprocess.run(command, env=env, cwd=folder, capture_output=True, text=True, check=True).stdout
        full = json.loads(out.strip().splitlines()[-1])["iteration_s"]
        if f"{full:.6f}" != row["iteration_s"]:
            bad.append(f"{' '.join(flags_of(row))}: search {row['iteration_s']} s, full simulation {full:.6f} s")
    return bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=1, help="search worker processes (default 1)")
    parser.add_argument("--no_prune", action="store_true", help="simulate every layout that fits")
    parser.add_argument("--check", type=int, default=20, metavar="K", help="check the K best rows (default 20; 0: none)")
    parser.add_argument("--space", choices=tuple(SPACES), default="default")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.TemporaryDirectory() as folder:
        topology = os.path.join(folder, "spx16k.txt")
        subprocess.run([sys.executable, "-m", "topo.gen", "-topo", "Spectrum-X", "-g", "16384", "--pods", "4", "-o",
                        topology], env=env, check=True, cwd=folder, stdout=subprocess.DEVNULL)
        output = os.path.join(folder, "search.csv")
        search = [sys.executable, "-m", "simulator", "search", "-t", topology, *MODEL, "--world_size", "16384",
                  "-o", output, "--jobs", str(args.jobs), *SPACES[args.space], *(["--no_prune"] if args.no_prune else [])]
        single = [sys.executable, "-m", "simulator", "-t", topology, *MODEL, *ONE_LAYOUT, "-q", "-r_f", folder]
        numpy = [sys.executable, "-c", "import numpy"]
        run(single, env, folder)  # warm the page cache
        ours, cpu, base, floor, text = [], [], [], [], ""
        for _ in range(args.runs):
            wall, used, text = run(search, env, folder)
            ours.append(wall)
            cpu.append(used)
            base.append(run(single, env, folder)[0])
            floor.append(run(numpy, env, folder)[0])
        with open(output, newline="") as handle:
            rows = list(csv.DictReader(handle))
        bad = check_rows(rows[:args.check], topology, env, folder) if args.check else []
    enumerated = int(re.search(r"(\d+) layouts on", text).group(1))
    fitting = int(re.search(r"(\d+) to simulate", text).group(1))
    simulated = int(re.search(r"simulated (\d+) layouts", text).group(1))
    median, jobs = statistics.median(ours), args.jobs
    print(f"search, Llama 3 405B on 16,384 H100 ({args.space} space, {jobs} worker{'s' if jobs > 1 else ''}, "
          f"{args.runs} runs, load average {os.getloadavg()[0]:.1f}): {enumerated:,} layouts, {fitting:,} fit the "
          f"H100, {simulated:,} simulated in full")
    print(f"  whole process: median {median:.2f} s wall (min {min(ours):.2f}, max {max(ours):.2f}), "
          f"{statistics.median(cpu):.2f} s CPU")
    print(f"  per worker: {enumerated / median / jobs:,.0f} layouts searched per second, {fitting / median / jobs:,.0f} "
          f"fitting layouts per second, {simulated / median / jobs:,.1f} full simulations per second")
    print(f"  in the same runs: one whole-job simulation {statistics.median(base):.2f} s (the search costs "
          f"{median / statistics.median(base):.1f} of them), python -c 'import numpy' {statistics.median(floor):.2f} s")
    if args.check:
        print(f"  the {min(args.check, len(rows))} best rows against python -m simulator, to the microsecond: "
              + ("all identical" if not bad else f"{len(bad)} differ"))
        for line in bad:
            print("    " + line)
        if bad:
            raise SystemExit(1)


if __name__ == "__main__":
    main()

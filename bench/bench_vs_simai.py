#!/usr/bin/env python3
"""Whole-process time of ``python -m simulator --model simai`` beside SimAI 1.7's analytical binary (run by hand).

    .venv/bin/python bench/bench_vs_simai.py [--simai PATH_TO_SimAI_analytical] [--runs 7]

Cases (the files are written to a temporary folder; SimAI reads the same ones):

1. SimAI's own 1,789-record example (tests/data/examples/simai_workload_analytical.txt) on 9,216 GPUs,
   ``-g 9216 -g_p_s 8 -n_p_s 8 -nv 360 -nic 48.5``;
2. GPT-7B (AICB's ``-m 7``) on 64 GPUs, tp 2, global batch 256 (ga 8), computation times from AICB's AIOB
   example file (our ``SimAI_training_workload_generator --comp_filepath``);
3. SimAI's example with its 24 micro-batch blocks unrolled to ga 160 and to ga 1,600 (12,447 and
   118,408 records).

Each case runs, in turn and repeatedly (interleaved, so that machine load hits them alike), SimAI (with
``--simai``), ours, and ``python -c pass`` (the interpreter alone, the floor of any Python tool), and
prints medians of wall time and of CPU time (user + system of the child process), and the ratios.
Without ``--simai`` it times ours and quotes issue 19's SimAI -O3 figures, which were not measured here.
How to build SimAI both ways: bench/SIMAI.md.
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
EXAMPLE = ROOT / "tests" / "data" / "examples" / "simai_workload_analytical.txt"
AIOB = ROOT / "tests" / "data" / "examples" / "aiob_Example.txt"
FLAGS_9216 = ["-g", "9216", "-g_p_s", "8", "-n_p_s", "8", "-nv", "360", "-nic", "48.5"]
FLAGS_64 = ["-g", "64", "-g_p_s", "8", "-n_p_s", "8", "-nv", "360", "-nic", "48.5"]
ISSUE_SIMAI_O3 = ("issue 19 (measured elsewhere, 2-core machine, not here): SimAI -O3 took 0.04-0.16 s CPU per run "
                  "on single runs of these kinds of files, and grew 92x from ga 16 to ga 1,600")


def unrolled(folder: Path, ga: int) -> Path:
    """SimAI's example with its micro-batch blocks repeated ``ga`` times (the 23 alike ones copied)."""
    from workload_generator.simai import SimAIWorkload

    w = SimAIWorkload.read(EXAMPLE, strict=False)
    head, first, block, tail = w.records[:6], w.records[6:80], w.records[80:154], w.records[1782:]
    w.header.ga = ga
    path = folder / f"example_ga{ga}.txt"
    SimAIWorkload(w.header, head + first + block * (ga - 1) + tail).write(path)
    return path


def gpt7b(folder: Path, env: dict) -> Path:
    path = folder / "gpt7b_64.txt"
    subprocess.run([sys.executable, "-m", "workload_generator.SimAI_training_workload_generator", "-m", "7",
                    "--world_size", "64", "--tensor_model_parallel_size", "2", "--global_batch", "256",
                    "--micro_batch", "1", "--seq_length", "2048", "--comp_filepath", str(AIOB), "--output", str(path)],
                   env=env, check=True, cwd=folder, stdout=subprocess.DEVNULL)
    return path


def run_once(command: list[str], env: dict, cwd: str) -> tuple[float, float]:
    """(wall, CPU) seconds of one whole process."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(command)}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simai", metavar="PATH", help="SimAI's analytical binary (see bench/SIMAI.md)")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # time with .pyc files, as users run
    env["PYTHONPATH"] = str(ROOT)
    print(f"machine: {os.cpu_count()} CPUs; {sys.version.split()[0]}; load average {os.getloadavg()[0]:.2f} at start")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cases = [("SimAI example, 1,789 records, 9,216 GPUs", EXAMPLE, FLAGS_9216),
                 ("GPT-7B, 64 GPUs, AIOB times (ga 8)", gpt7b(folder, env), FLAGS_64),
                 ("SimAI example unrolled to ga 160", unrolled(folder, 160), FLAGS_9216),
                 ("SimAI example unrolled to ga 1,600", unrolled(folder, 1600), FLAGS_9216)]
        baseline = [sys.executable, "-c", "pass"]
        for name, workload, flags in cases:
            ours = [sys.executable, "-m", "simulator", "-w", str(workload), *flags, "-q", "-r", str(folder / "ours-")]
            commands = {"ours": ours, "python -c pass": baseline}
            if args.simai:
                commands["SimAI"] = [args.simai, "-w", str(workload), *flags, "-r", str(folder / "simai-")]
            for command in commands.values():  # warm the file cache and the .pyc files
                run_once(command, env, tmp)
            times: dict[str, list[tuple[float, float]]] = {label: [] for label in commands}
            for _ in range(args.runs):
                for label, command in commands.items():
                    times[label].append(run_once(command, env, tmp))
            wall = {label: statistics.median(t[0] for t in runs) for label, runs in times.items()}
            cpu = {label: statistics.median(t[1] for t in runs) for label, runs in times.items()}
            print(f"\n{name}  (median of {args.runs})")
            for label in commands:
                print(f"  {label:<16} wall {wall[label] * 1000:8.1f} ms   cpu {cpu[label] * 1000:8.1f} ms")
            print(f"  ours / python -c pass: wall {wall['ours'] / wall['python -c pass']:.2f}x, "
                  f"cpu {cpu['ours'] / cpu['python -c pass']:.2f}x")
            if args.simai:
                print(f"  ours / SimAI: wall {wall['ours'] / wall['SimAI']:.2f}x, cpu {cpu['ours'] / cpu['SimAI']:.2f}x")
    if not args.simai:
        print(f"\nno --simai binary given: {ISSUE_SIMAI_O3}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Whole-process time of ``python -m simulator --model simai`` beside SimAI 1.7's analytical binary (run by hand).

    .venv/bin/python bench/bench_vs_simai.py --simai /path/to/simai-O3 [--runs 11] [--cases example,gpt7b]

``--simai`` is SimAI's ``SimAI_analytical`` or the folder holding it, with SimAI's ratio tables beside it in
``astra-sim-alibabacloud/inputs/ratio/`` (what ``../shared/tools/build_simai.sh`` stages; bench/SIMAI.md).  SimAI
opens those tables relative to its working directory and writes ``./results/<-r>EndToEnd.csv``, so it runs from
that folder with a relative ``-r``; the workload is given by absolute path.

Cases (the files are written to a temporary folder; SimAI reads the same ones):

1. ``example``: SimAI's own 1,789-record example (tests/data/examples/simai_workload_analytical.txt) on 9,216 GPUs,
   ``-g 9216 -g_p_s 8 -n_p_s 8 -nv 360 -nic 48.5``;
2. ``gpt7b``: GPT-7B (AICB's ``-m 7``) on 64 GPUs, tp 2, global batch 256 (ga 8), computation times from AICB's AIOB
   example file (our ``SimAI_training_workload_generator --comp_filepath``);
3. ``ga160``, ``ga1600``: SimAI's example with its 24 micro-batch blocks unrolled to ga 160 and to ga 1,600 (12,447
   and 118,408 records).

Ours runs twice per round: from a copy of the sources without ``.pyc`` files (``PYTHONDONTWRITEBYTECODE``: a fresh
checkout, or a machine that writes none) and from a copy compiled beforehand (``compileall``: an installed package).
Each round runs SimAI, both of ours and ``python -c pass`` once each, in an order that rotates from round to round
(paired and interleaved, so that machine load hits all alike), and the medians of wall time and of CPU time (user +
system of the child) are printed with the ratios.  The outputs are compared too: ours and SimAI's ``EndToEnd.csv``
must be byte-identical (both are written under the same ``-r`` name).
"""

from __future__ import annotations

import argparse
import compileall
import filecmp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "tests" / "data" / "examples" / "simai_workload_analytical.txt"
AIOB = ROOT / "tests" / "data" / "examples" / "aiob_Example.txt"
FLAGS_9216 = ["-g", "9216", "-g_p_s", "8", "-n_p_s", "8", "-nv", "360", "-nic", "48.5"]
FLAGS_64 = ["-g", "64", "-g_p_s", "8", "-n_p_s", "8", "-nv", "360", "-nic", "48.5"]
PACKAGES = ("utils", "mocked_model", "workload_generator", "topo", "simulator")
NAME = "bench-"
"""The ``-r`` name of every run: SimAI writes it as the first cell of its rows, so ours must use the same one."""


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


def run_once(command: list[str], env: dict, cwd: str | Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one whole process."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(command)} (in {cwd})")
    return wall, usage.ru_utime + usage.ru_stime


def simai_binary(path: str) -> tuple[Path, Path]:
    """(binary, the folder it runs from) of ``--simai``; exits with one line when SimAI's ratio tables are missing."""
    given = Path(path).resolve()
    binary = given / "SimAI_analytical" if given.is_dir() else given
    folder = binary.parent
    if not binary.is_file():
        raise SystemExit(f"--simai {path}: no SimAI_analytical there")
    if not list((folder / "astra-sim-alibabacloud" / "inputs" / "ratio").glob("*.csv")):
        raise SystemExit(f"--simai {path}: {folder}/astra-sim-alibabacloud/inputs/ratio/*.csv is missing; SimAI 1.7 "
                         "opens its ratio tables there (relative to where it runs): stage the binary as "
                         "../shared/tools/build_simai.sh does")
    (folder / "results").mkdir(exist_ok=True)
    return binary, folder


def source_copies(folder: Path) -> tuple[Path, Path]:
    """Two copies of the packages: one without ``.pyc`` files, one compiled (``compileall``)."""
    plain, compiled = folder / "src-nopyc", folder / "src-pyc"
    for target in (plain, compiled):
        for package in PACKAGES:
            shutil.copytree(ROOT / package, target / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    compileall.compile_dir(str(compiled), quiet=1)
    return plain, compiled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simai", metavar="PATH", help="SimAI_analytical, or its staged folder (bench/SIMAI.md)")
    parser.add_argument("--runs", type=int, default=11, help="rounds (default 11)")
    parser.add_argument("--cases", default="example,gpt7b,ga160,ga1600", help="comma list of cases (default all)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    simai = simai_binary(args.simai) if args.simai else None
    base_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    print(f"machine: {os.cpu_count()} CPUs; Python {sys.version.split()[0]}; load average {os.getloadavg()[0]:.2f} at "
          f"start" + (f"; SimAI: {simai[0]}" if simai else ""))
    wanted = args.cases.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        plain, compiled = source_copies(folder)
        env_plain = dict(base_env, PYTHONPATH=str(plain), PYTHONDONTWRITEBYTECODE="1")
        env_pyc = dict(base_env, PYTHONPATH=str(compiled), PYTHONDONTWRITEBYTECODE="1")
        builders = {"example": lambda: ("SimAI example, 1,789 records, 9,216 GPUs", EXAMPLE, FLAGS_9216),
                    "gpt7b": lambda: ("GPT-7B, 64 GPUs, AIOB times (ga 8)", gpt7b(folder, env_pyc), FLAGS_64),
                    "ga160": lambda: ("SimAI example unrolled to ga 160", unrolled(folder, 160), FLAGS_9216),
                    "ga1600": lambda: ("SimAI example unrolled to ga 1,600", unrolled(folder, 1600), FLAGS_9216)}
        out = folder / "ours"
        out.mkdir()
        for case in wanted:
            name, workload, flags = builders[case]()
            ours = [sys.executable, "-m", "simulator", "-w", str(workload), *flags, "-q", "-r", str(out / NAME)]
            commands: dict[str, tuple[list[str], dict, Path]] = {
                "ours, no .pyc": (ours, env_plain, folder), "ours, .pyc": (ours, env_pyc, folder),
                "python -c pass": ([sys.executable, "-c", "pass"], env_plain, folder)}
            if simai:
                commands["SimAI"] = ([str(simai[0]), "-w", str(workload), *flags, "-r", NAME], base_env, simai[1])
            for command, env, cwd in commands.values():  # warm the file cache
                run_once(command, env, cwd)
            same = None
            if simai:
                same = filecmp.cmp(out / f"{NAME}EndToEnd.csv", simai[1] / "results" / f"{NAME}EndToEnd.csv", shallow=False)
            times: dict[str, list[tuple[float, float]]] = {label: [] for label in commands}
            labels = list(commands)
            for r in range(args.runs):
                for label in labels[r % len(labels):] + labels[:r % len(labels)]:
                    command, env, cwd = commands[label]
                    times[label].append(run_once(command, env, cwd))
            wall = {label: statistics.median(t[0] for t in runs) for label, runs in times.items()}
            cpu = {label: statistics.median(t[1] for t in runs) for label, runs in times.items()}
            print(f"\n{name}  (medians of {args.runs} rounds)")
            for label in commands:
                print(f"  {label:<16} wall {wall[label] * 1000:8.1f} ms   cpu {cpu[label] * 1000:8.1f} ms")
            if simai:
                for label in ("ours, no .pyc", "ours, .pyc"):
                    print(f"  {label} / SimAI: wall {wall[label] / wall['SimAI']:.2f}x, cpu {cpu[label] / cpu['SimAI']:.2f}x")
                print(f"  EndToEnd.csv: {'byte-identical' if same else 'DIFFERS'} (ours against SimAI's)")
            else:
                print(f"  ours / python -c pass: wall {wall['ours, .pyc'] / wall['python -c pass']:.2f}x (.pyc), "
                      f"{wall['ours, no .pyc'] / wall['python -c pass']:.2f}x (no .pyc)")
    if not simai:
        print("\nno --simai given: build SimAI as bench/SIMAI.md says and pass its folder to compare")


if __name__ == "__main__":
    main()

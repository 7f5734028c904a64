#!/usr/bin/env python3
"""Issue 19's bars for ``--model topo`` (run by hand):

    .venv/bin/python bench/bench_speed.py [--runs 9] [--skip-131k]

1. In process: ``TopoSession(topology).simulate(job)`` for Llama 3 405B (126 layers, tp 8, pp 16 with 7-layer
   first and last stages, dp 128, sequence 8192, global batch 2048: 16 micro-batches, SP, distributed
   optimizer, overlapped gradient reduction, flash attention, H100 compute model) on a 16,384-GPU
   Spectrum-X fabric (``python -m topo.gen -topo Spectrum-X -g 16384 --pods 4``) already loaded; beside it
   ``simulate(job, path)``, which reads and models the topology on every call.  Bar: under 50 ms.
2. The same job with 16, 160 and 1,600 micro-batches through the session (the steady 1F1B state is
   extrapolated): the cost of gradient accumulation.
3. Whole process: ``python -m simulator -t <topology> <job flags>`` on 16,384 GPUs and on 131,072 GPUs
   (``-g 131072 --pods 32``, global batch 16,384, 17.6 MB topology file): wall and CPU time (user +
   system) and peak resident memory of the process, beside ``python -c "import numpy"`` in the same run.
   Bars: under 1.5 s and 250 MB on 131,072 GPUs.

Medians (and minima) of ``--runs``; runs alternate with the baseline so that machine load hits both alike.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
JOB = ["--gpu_type", "H100", "--model_name", "llama3_405B", "--tensor_model_parallel_size", "8",
       "--pipeline_model_parallel", "16", "--decoder_first_pipeline_num_layers", "7",
       "--decoder_last_pipeline_num_layers", "7", "--seq_length", "8192", "--enable_sequence_parallel",
       "--use-distributed-optimizer", "--overlap_grad_reduce", "--use_flash_attn"]


def job(world: int = 16384, ga: int = 16):
    from utils.cli import parse_job

    dp = world // (8 * 16)
    the_job, _ = parse_job([*JOB, "--world_size", str(world), "--global_batch", str(dp * ga)], "bench", "")
    return the_job


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def in_process(function, runs: int) -> tuple[float, float, float]:
    """(median wall, min wall, median CPU) seconds of ``function()`` (after one warm-up call)."""
    function()
    walls, cpus = [], []
    for _ in range(runs):
        c, t = cpu_s(), time.perf_counter()
        function()
        walls.append(time.perf_counter() - t)
        cpus.append(cpu_s() - c)
    return statistics.median(walls), min(walls), statistics.median(cpus)


def process(command: list[str], env: dict, cwd: str) -> tuple[float, float, int]:
    """(wall s, CPU s, peak RSS bytes) of one whole process."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(command)}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def topology(folder: Path, gpus: int, pods: int, env: dict) -> Path:
    path = folder / f"spectrum-x_{gpus}.txt"
    subprocess.run([sys.executable, "-m", "topo.gen", "-topo", "Spectrum-X", "-g", str(gpus), "--pods", str(pods),
                    "-o", str(path)], env=env, check=True, cwd=folder, stdout=subprocess.DEVNULL)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--skip-131k", action="store_true", help="leave out the 131,072-GPU whole process")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT)
    print(f"machine: {os.cpu_count()} CPUs; Python {sys.version.split()[0]}; load average "
          f"{os.getloadavg()[0]:.2f} at start")
    from simulator.api import TopoSession, simulate

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        topo16k = topology(folder, 16384, 4, env)
        the_job = job()
        session = TopoSession(topo16k)
        wall, best, cpu = in_process(lambda: session.simulate(the_job), args.runs)
        print(f"\n1. TopoSession.simulate, Llama 3 405B tp 8 pp 16 dp 128, 16,384 GPUs loaded: median {wall * 1000:.1f} ms "
              f"(min {best * 1000:.1f}), CPU {cpu * 1000:.1f} ms   (bar: 50 ms)")
        wall, best, cpu = in_process(lambda: simulate(the_job, str(topo16k)), max(3, args.runs // 3))
        print(f"   simulate(job, topology path), reading and modelling the topology each call: median {wall * 1000:.1f} ms")
        print("\n2. gradient accumulation through the session (steady state extrapolated):")
        for ga in (16, 160, 1600):
            big = job(ga=ga)
            wall, best, cpu = in_process(lambda big=big: session.simulate(big), max(3, args.runs // 3))
            print(f"   ga {ga:>5}: median {wall * 1000:8.1f} ms, CPU {cpu * 1000:8.1f} ms")
        print("\n3. whole process (python -m simulator -t TOPOLOGY <job flags>), beside python -c 'import numpy':")
        cases = [(16384, topo16k)]
        if not args.skip_131k:
            cases.append((131072, topology(folder, 131072, 32, env)))
        baseline = [sys.executable, "-c", "import numpy"]
        for gpus, path in cases:
            dp = gpus // 128
            command = [sys.executable, "-m", "simulator", "-t", str(path), *JOB, "--world_size", str(gpus),
                       "--global_batch", str(dp * 16), "-q", "-r_f", str(folder)]
            process(command, env, tmp)  # warm the file cache and .pyc files
            ours, base = [], []
            for _ in range(max(3, args.runs // 2)):
                ours.append(process(command, env, tmp))
                base.append(process(baseline, env, tmp))
            wall = statistics.median(r[0] for r in ours)
            cpu = statistics.median(r[1] for r in ours)
            rss = max(r[2] for r in ours)
            base_wall = statistics.median(r[0] for r in base)
            base_cpu = statistics.median(r[1] for r in base)
            print(f"   {gpus:>7,} GPUs: wall {wall:.2f} s (min {min(r[0] for r in ours):.2f}), CPU {cpu:.2f} s, peak "
                  f"{rss / 2**20:.0f} MiB; import numpy: wall {base_wall:.3f} s, CPU {base_cpu:.3f} s; ratio "
                  f"{wall / base_wall:.1f}x wall, {cpu / base_cpu:.1f}x CPU"
                  + ("   (bars: 1.5 s, 250 MB)" if gpus == 131072 else ""))


if __name__ == "__main__":
    main()

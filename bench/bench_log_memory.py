"""Benchmark: peak memory of analysing a 10^6-row replay log (and a 10^6-item workload CSV).

Makes a synthetic replay log of a Megatron GPT-13B job (tp 8, pp 4, SP, world 64, with computation rows:
about 22,000 rows per iteration, iterations repeated until ``--rows`` rows), its detail CSV (slowest rank,
straggler, p2p batches) and the workload CSV of the same job, then measures each phase in a fresh
process: the peak resident set (``VmHWM`` of ``/proc/self/status``; ``ru_maxrss`` elsewhere) and the wall
time.

    import     python, pandas, matplotlib and log_analyzer imported (the floor of every phase)
    load       Log.load(log) with the detail file joined
    summarise  load + iteration_stats, comm_summary, time_share, logged_time
    report     build_report(log) (every plot and table of the HTML page) and the page written
    workload   build_report(workload CSV): the workload's page

Run:  python bench/bench_log_memory.py [--rows 1000000] [--keep DIR]
Times come from synthetic numbers (20 us + bytes / bandwidth, 50 us per computation), not a replay.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

JOB = ["--frame", "Megatron", "--model_name", "gpt_13B", "--world_size", "64", "--tensor_model_parallel_size", "8",
       "--pipeline_model_parallel", "4", "--enable_sequence_parallel", "--global_batch", "128", "--micro_batch", "1",
       "--computation_enable"]

PHASES = {
    "import": "import pandas, matplotlib.figure, log_analyzer.report, log_analyzer.log",
    "load": "from log_analyzer import Log; log = Log.load(LOG)",
    "summarise": ("from log_analyzer import Log\n"
                  "from log_analyzer.summary import comm_summary, iteration_stats, logged_time, time_share\n"
                  "log = Log.load(LOG); iteration_stats(log); comm_summary(log.measured)\n"
                  "time_share(log.measured, 'comm_type'); time_share(log.measured, 'comm_group'); logged_time(log.items)"),
    "report": ("from log_analyzer.report import build_report, write_report\n"
               "write_report(build_report(LOG), OUT)"),
    "workload": ("from log_analyzer.report import build_report, write_report\n"
                 "write_report(build_report(WORKLOAD), OUT)"),
}
MEASURE = """
import resource, sys, time
LOG, WORKLOAD, OUT = sys.argv[1:4]
start = time.perf_counter()
{code}
elapsed = time.perf_counter() - start
try:  # this process's own peak (ru_maxrss would count the parent's pages shared at fork)
    with open("/proc/self/status") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
except OSError:
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(kib, elapsed)
"""


def make_inputs(folder: Path, rows: int) -> tuple[str, str, int]:
    """The log, its detail CSV and the workload CSV of the benchmark job; returns (log, workload, log rows)."""
    from log_analyzer.log import LogWriter, detail_path, write_detail
    from utils.cli import parse_job
    from utils.units import busbw_factor
    from utils.workload import CommType
    from workload_generator.entry import build_workload

    job, _ = parse_job(JOB + ["--epoch_num", "1"], "bench", "")
    per_iteration = len(build_workload(job).items) - 2  # init block and its marker excluded, roughly
    epochs = max(1, math.ceil(rows / per_iteration))
    job, _ = parse_job(JOB + ["--epoch_num", str(epochs)], "bench", "")
    workload = build_workload(job)
    workload_csv = folder / "bench_workload.csv"
    workload.dump(workload_csv)
    log_path = folder / "bench_log.csv"
    rng = random.Random(0)
    details = []
    p2p = (CommType.isend, CommType.irecv)
    batch, batch_stage, batch_dirs, batch_ms = 0, None, set(), 0.0
    with LogWriter(log_path) as log:
        iteration, iteration_ms = 0, 0.0
        for row, item in enumerate(workload.items):
            if item.is_epoch_end:
                log.write_epoch_end(iteration_ms * 1.05)
                details.append({"row": row, "iteration": iteration, "comm_type": "epoch_end",
                                "elapsed_ms": iteration_ms * 1.05, "max_elapsed_ms": iteration_ms * 1.1, "slowest_rank": 3})
                iteration, iteration_ms = iteration + 1, 0.0
                continue
            peer = None
            if item.comm_type in p2p:
                # the replay's batching: consecutive p2p items of one stage until a direction repeats
                if batch_stage != item.stage or item.additional in batch_dirs:
                    batch, batch_stage, batch_dirs = batch + 1, item.stage, set()
                    batch_ms = (0.02 + item.msg_size / 20e9 * 1e3) * rng.uniform(0.8, 1.2)
                    iteration_ms += batch_ms
                batch_dirs.add(item.additional)
                elapsed, peer = batch_ms, 1
            else:
                batch_stage = None
                if item.is_computation:
                    elapsed = 0.05 * rng.uniform(0.9, 1.1)
                else:
                    gbps = 150.0 if item.comm_group is not None and item.comm_group.value == "tp_group" else 20.0
                    factor = busbw_factor(item.comm_type, item.comm_group_size or 1) or 1.0
                    elapsed = (0.02 + item.msg_size * factor / (gbps * 1e9) * 1e3) * rng.uniform(0.8, 1.2)
                iteration_ms += elapsed
            if item.is_computation:
                log.write(item, elapsed)
            else:
                algbw = item.msg_size / (elapsed * 1e-3) / 1e9
                log.write(item, elapsed, algbw, algbw * busbw_factor(item.comm_type, item.comm_group_size or 1))
            details.append({"row": row, "iteration": iteration, "item_index": row, "comm_type": item.comm_type.value,
                            "elapsed_ms": elapsed, "max_elapsed_ms": elapsed * 1.1, "slowest_rank": 3,
                            "min_elapsed_ms": elapsed, "last_arrival_rank": 5, "ranks_timed": 8, "emulated": False,
                            "batch": batch if item.comm_type in p2p else None, "peer_rank": peer})
    write_detail(detail_path(log_path), details)
    return str(log_path), str(workload_csv), len(workload.items)


def measure(phase: str, log: str, workload: str, out: str) -> tuple[float, float]:
    """(peak resident set in MB of 10^6 bytes, wall seconds) of one phase in a fresh process."""
    code = MEASURE.format(code=PHASES[phase])
    proc = subprocess.run([sys.executable, "-c", code, log, workload, out], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{phase} failed:\n{proc.stderr}")
    kib, seconds = proc.stdout.split()
    return int(kib) * 1024 / 1e6, float(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the log (default 10^6)")
    parser.add_argument("--keep", metavar="DIR", help="write the inputs to DIR and keep them (default: a temporary folder)")
    parser.add_argument("--phases", nargs="+", choices=list(PHASES), default=list(PHASES))
    parser.add_argument("--make", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.make:
        print(*make_inputs(Path(args.make), args.rows))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        # made in a child process, so that this one stays small while it starts the measured ones
        made = subprocess.run([sys.executable, __file__, "--make", str(folder), "--rows", str(args.rows)], cwd=ROOT,
                              check=True, capture_output=True, text=True).stdout.split()
        log, workload, rows = made[0], made[1], int(made[2])
        size = os.path.getsize(log) / 1e6
        print(f"inputs: {rows:,} rows, log {size:.0f} MB, detail {os.path.getsize(log[:-8] + '_detail.csv') / 1e6:.0f} MB, "
              f"workload {os.path.getsize(workload) / 1e6:.0f} MB (made in {time.perf_counter() - start:.0f} s)")
        print(f"{'phase':<10} {'peak RSS (MB)':>14} {'per 10^6 rows':>14} {'wall (s)':>9}")
        for phase in args.phases:
            peak, seconds = measure(phase, log, workload, str(folder / f"{phase}.html"))
            print(f"{phase:<10} {peak:>14.0f} {peak / rows * 1e6:>14.0f} {seconds:>9.1f}", flush=True)


if __name__ == "__main__":
    main()

"""AICB-compatible entry: write the collective sweep workload CSV.

    python -m workload_generator.generate_collective_test --test_comm all_gather --begin_size 1M \\
        --end_size 64M --iter_num 20 --world_size 8 --output sweep.csv

The replay of a sweep is ``torchrun --nproc_per_node N aicb.py --frame collective_test ...``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from utils.cli import parse_job, run_main
from utils.config import JobConfig
from workload_generator.collective_test import collective_test_name, collective_test_workload
from workload_generator.entry import prepare_output, refuse_visual

PROG = "generate_collective_test"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not any(a.split("=", 1)[0] == "--frame" for a in argv):
        argv += ["--frame", "collective_test"]
    job, values = parse_job(argv, PROG, "Write the AICB workload CSV of a collective sweep.")
    refuse_visual(values, PROG)
    write_sweep(job, values)
    return 0


def write_sweep(job: JobConfig, values: dict[str, Any], prog: str = PROG) -> str:
    """Write the sweep's workload CSV where AICB puts it (or ``--output``); returns the path."""
    base = values.get("output_dir") or "results"
    path = values.get("output") or os.path.join(base, "mocked_workload", collective_test_name(job) + "_workload.csv")
    prepare_output(path, values, prog, bool(values.get("output")))
    workload = collective_test_workload(job)
    workload.dump(path)
    print(f"Workload file generated: {path} ({len(workload)} items)")
    return path


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]), PROG)

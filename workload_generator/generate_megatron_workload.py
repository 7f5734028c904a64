"""AICB-compatible entry: write the Megatron workload CSV of one pipeline rank.

    python -m workload_generator.generate_megatron_workload --model_name gpt_13B --world_size 64 \\
        --tensor_model_parallel_size 8 --global_batch 64 --micro_batch 1 --seq_length 2048 --output w.csv

Flags are AICB's (see ``python -m workload_generator.generate_megatron_workload --help``).
"""

from __future__ import annotations

import sys

from utils.cli import parse_job, run_main
from workload_generator.entry import (
    build_timed_workload,
    memory_estimate,
    prepare_output,
    refuse_visual,
    report_memory,
    training_workload_path,
)

PROG = "generate_megatron_workload"


def main(argv: list[str] | None = None) -> int:
    job, values = parse_job(argv, PROG, "Write the AICB workload CSV of a Megatron training iteration.")
    refuse_visual(values, PROG)
    path, given = training_workload_path(job, values)
    prepare_output(path, values, PROG, given)  # before any work: a symbolic link or an input is refused at once
    memory = memory_estimate(job, values)  # (before the file: a job it refuses writes nothing)
    workload = build_timed_workload(job, values)  # --aiob_enable / --comp_filepath / --compute_source fill the times
    workload.dump(path)
    print(f"Workload file generated: {path} ({len(workload)} items, pipeline rank {job.parallel.pp_rank})")
    report_memory(job, values, estimate=memory)
    return 0


def cli() -> None:
    """The console entry point (pyproject.toml's [project.scripts])."""
    run_main(lambda: main(sys.argv[1:]), PROG)


if __name__ == "__main__":
    cli()

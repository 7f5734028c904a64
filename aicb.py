"""AICB's entry point: build the workload of a training job, optionally time its computation
(AIOB), and replay it over torch.distributed.

    python aicb.py --frame Megatron --model_name gpt_13B ... --workload_only   # write the workload CSV
    torchrun --nproc_per_node 8 aicb.py --frame Megatron --model_name gpt_13B ...   # replay it

Flags are AICB's (``python aicb.py --help``); ``--output`` names the workload CSV.
"""

from __future__ import annotations

import sys

from utils.cli import parse_job, run_main
from workload_generator.entry import build_workload, default_workload_path

PROG = "aicb.py"


def main(argv: list[str] | None = None) -> int:
    job, values = parse_job(argv, PROG, "Generate, time and replay the communication of a training iteration.")
    if values["workload_only"]:
        workload = build_workload(job)
        path = values.get("output") or default_workload_path(job, values, job.training.frame.lower())
        workload.dump(path)
        print(f"Workload file generated: {path} ({len(workload)} items, pipeline rank {job.parallel.pp_rank})")
        return 0
    from workload_applyer import replay_main

    return replay_main(job, values)


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]), PROG)

"""AICB-compatible entry: write the workload CSV of a DeepSpeed ZeRO-1 or ZeRO-2 training job.

    python -m workload_generator.generate_deepspeed_stage1_2_workload --stage 2 -m 13 --world_size 64 \\
        --global_batch 64 --reduce_bucket_size 26214400 --contiguous_gradients --output w.csv

``--frame`` defaults to DeepSpeed and ``--stage`` to 2 (what AICB's entry generates when ``--stage``
is omitted); ``-m`` takes AICB's DeepSpeed sizes 7/13/30/65 (LLaMA).  Flags are AICB's (``--help``).
"""

from __future__ import annotations

import sys

from utils.cli import run_main
from workload_generator.deepspeed_entry import entry_main

PROG = "generate_deepspeed_stage1_2_workload"


def main(argv: list[str] | None = None) -> int:
    return entry_main(sys.argv[1:] if argv is None else argv, PROG, stages=(1, 2), default_stage=2)


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]), PROG)

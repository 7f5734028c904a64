"""AICB-compatible entry: write the workload CSV of a DeepSpeed ZeRO-3 training job.

    python -m workload_generator.generate_deepspeed_stage3_workload --model_name llama_7B --world_size 16 \\
        --global_batch 16 --prefetch_bucket_size 50000000 --output w.csv

``--frame`` defaults to DeepSpeed and ``--stage`` to 3; ``-m`` takes AICB's DeepSpeed sizes
7/13/30/65 (LLaMA).  Flags are AICB's (``--help``).
"""

from __future__ import annotations

import sys

from utils.cli import run_main
from workload_generator.deepspeed_entry import entry_main

PROG = "generate_deepspeed_stage3_workload"


def main(argv: list[str] | None = None) -> int:
    return entry_main(sys.argv[1:] if argv is None else argv, PROG, stages=(3,), default_stage=3)


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]), PROG)

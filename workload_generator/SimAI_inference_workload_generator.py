"""AICB 2.1's entry: write the SimAI inference workload (.txt) of a prefill or decode step.

    python -m workload_generator.SimAI_inference_workload_generator DeepSeek-671B \\
        scripts/inference_configs/deepseek_default.json --phase decode --seq_length 1024 --micro_batch 32 \\
        --world_size 8 --expert_model_parallel_size 8 --gpu_type H200

Writes ``results/workload/<MODEL>-world_size<W>-tp<T>-pp<P>-ep<E>-bs<B>-seq<S>-<phase>.txt`` (AICB's
name; ``--result_dir``, ``--output``).  Computation times: see ``--help`` (``--compute_source``).
"""

from __future__ import annotations

import sys

from utils.cli import run_main
from workload_generator.inference_entry import simai_main

PROG = "SimAI_inference_workload_generator"


def main(argv: list[str] | None = None) -> int:
    return simai_main(argv, PROG)


def cli() -> None:
    """The console entry point (pyproject.toml's [project.scripts])."""
    run_main(lambda: main(sys.argv[1:]), PROG)


if __name__ == "__main__":
    cli()

"""AICB 2.1's entry: write Vidur's per-layer workload CSV of a prefill or decode step.

    python -m workload_generator.Vidur_workload_generator Qwen3-Moe-235B --phase decode --micro_batch 16 \\
        --world_size 8 --expert_model_parallel_size 8 --gpu_type H100

Writes ``results/workload/vidur-<MODEL>-world_size<W>-tp<T>-pp<P>-ep<E>-bs<B>-seq<S>-<phase>.csv``
(tab-separated ``layer_id layer_name comp_time comm_size``, one row per layer and attention / mlp / moe).
"""

from __future__ import annotations

import sys

from utils.cli import run_main
from workload_generator.inference_entry import vidur_main

PROG = "Vidur_workload_generator"


def main(argv: list[str] | None = None) -> int:
    return vidur_main(argv, PROG)


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]), PROG)

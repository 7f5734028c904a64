"""AICB's older name of the SimAI training workload entry (its ``megatron_workload_with_aiob.sh`` and tutorial
call it): the same command as ``python -m workload_generator.SimAI_training_workload_generator``.

    python -m workload_generator.AIOB_simAI_workload_generator --model_name GPT-13B --frame=Megatron \\
        --world_size=16 --tensor_model_parallel_size=2 --global_batch=16 --num_layers=40 --hidden_size=5120 \\
        --num_attention_heads=40 --use-distributed-optimizer --swiglu
"""

from __future__ import annotations

import sys

from utils.cli import run_main
from workload_generator.SimAI_training_workload_generator import main

PROG = "AIOB_simAI_workload_generator"

if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:], prog=PROG), PROG)

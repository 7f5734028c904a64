"""Check the topology-aware simulator against a published Megatron-LM run.

Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", Table 1: GPT-3 175B (96 layers, hidden 12288, seq 2048), tp 8, pp 16, 1536 A100-80GB
GPUs (DGX A100: 8 GPUs on NVLink 600 GB/s, 8 x 200 Gb/s HDR per node), batch 1536, micro-batch 1,
full activation recomputation: 163 TFLOP/s per GPU achieved.  With the paper's FLOP count
(96 B s l h^2 (1 + s/6h + V/16lh), recomputation included) that is 4.511e18 / (163e12 x 1536) =
18.0 s per iteration.  We simulate the same job on a rail-optimised 200 Gb/s fabric with roofline
A100 compute times and report the error.  Run:  python bench/validate_megatron_paper.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PUBLISHED_S = 96 * 1536 * 2048 * 96 * 12288**2 * (1 + 2048 / (6 * 12288) + 51200 / (16 * 96 * 12288)) / (163e12 * 1536)
FLAGS = ("--model_name gpt3_175B --world_size 1536 --tensor_model_parallel_size 8 --pipeline_model_parallel 16 "
         "--global_batch 1536 --micro_batch 1 --seq_length 2048 --recompute_granularity full --computation_enable")


def main() -> None:
    from mocked_model.aiob.roofline import estimator
    from simulator.api import simulate
    from simulator.options import TopoOptions
    from utils.cli import parse_job

    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "topo.gen", "--ro", "-g", "1536", "-gps", "8", "-gt", "A100", "-nvbw",
                        "2400Gbps", "-bw", "200Gbps", "-o", tmp + "/"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        topology = next(Path(tmp).iterdir())
        for label, extra in (("1F1B", []), ("interleaved, 3 layers per virtual stage",
                                            ["--num_layers_per_virtual_pipeline_stage", "3"])):
            job, _ = parse_job(FLAGS.split() + extra, "validate", "")
            result = simulate(job, str(topology), TopoOptions(compute_time_ns=estimator("A100")))
            seconds = result.iteration_us / 1e6
            print(f"GPT-3 175B on 1536 A100 ({label}): simulated {seconds:.2f} s per iteration, published "
                  f"{PUBLISHED_S:.2f} s: error {(seconds / PUBLISHED_S - 1) * 100:+.1f}%")


if __name__ == "__main__":
    main()

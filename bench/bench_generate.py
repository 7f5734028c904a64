"""Benchmark: Megatron workload generation, whole process, against a same-run baseline.

The two cases of the Megatron issue:
  GPT-3 175B, tp 8, pp 8, world 1024, global batch 8192, micro-batch 1 (512 micro-batches through a
  1F1B stage, about 28,000 items), and Llama 3 405B, tp 8, pp 16, world 16384, sequence 8192.
The baseline is `python -c "import torch"`: AICB's generator imports torch before doing anything
(2.3 s of its 4.4 s on these machines), so the ratio says how many torch imports one of our whole
generations costs.  Run:  python bench/bench_generate.py [runs]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    "gpt3_175B tp8 pp8 world1024 gbs8192": [
        "--model_name", "gpt3_175B", "--world_size", "1024", "--tensor_model_parallel_size", "8",
        "--pipeline_model_parallel", "8", "--global_batch", "8192", "--micro_batch", "1"],
    "llama3_405B tp8 pp16 world16384 seq8192": [
        "--model_name", "llama3_405B", "--world_size", "16384", "--tensor_model_parallel_size", "8",
        "--pipeline_model_parallel", "16", "--decoder_first_pipeline_num_layers", "7",
        "--decoder_last_pipeline_num_layers", "7", "--seq_length", "8192", "--global_batch", "2048"],
}


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    baseline = [sys.executable, "-c", "import torch"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags in CASES.items():
            out = str(Path(tmp) / "w.csv")
            cmd = [sys.executable, "-m", "workload_generator.generate_megatron_workload", *flags, "--output", out]
            ours, base = [], []
            for _ in range(runs):      # alternate so that drift hits both alike
                ours.append(wall(cmd))
                base.append(wall(baseline))
            items = sum(1 for _ in open(out)) - 1
            print(f"{name}: {items} items, median {statistics.median(ours):.3f} s "
                  f"(min {min(ours):.3f}, max {max(ours):.3f}); import torch alone {statistics.median(base):.3f} s; "
                  f"ratio {statistics.median(base) / statistics.median(ours):.1f}x")


if __name__ == "__main__":
    main()

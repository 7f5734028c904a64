"""Benchmark: inference workload generation, whole process, against same-run baselines.

The bar (issue 16): generating any of the three models' inference workloads takes < 0.5 s, whole
process.  Cases: AICB 2.1's script defaults for each model (decode, 1024 context, batch 32, 8 GPUs, EP 8)
plus Qwen3-235B prefill from AICB's README (1024 x 4 tokens, 32 GPUs, EP 32), each with the compute
model's estimates for an H200 (``--gpu_type H200``, the slower path: every operation is priced) and
with AICB's placeholders.  Baselines, measured alternately in the same run: ``python -c pass`` and
``python -c "import numpy"``.  Bytecode caches are allowed (an installed package has them; these
machines set PYTHONDONTWRITEBYTECODE, which makes every process compile every module: ``--no-pyc``
measures that too), after one untimed run per case.  Run:  python bench/bench_inference.py [runs] [--no-pyc]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DECODE = ["--phase", "decode", "--seq_length", "1024", "--micro_batch", "32", "--world_size", "8",
          "--expert_model_parallel_size", "8"]
CASES = {
    "DeepSeek-671B decode bs32 ep8": ["DeepSeek-671B", *DECODE],
    "Qwen3-Moe-235B decode bs32 ep8": ["Qwen3-Moe-235B", *DECODE],
    "Qwen3-Next-80B decode bs32 ep8": ["Qwen3-Next-80B", *DECODE],
    "Qwen3-Moe-235B prefill 1024x4 ep32": ["Qwen3-Moe-235B", "--phase", "prefill", "--seq_length", "1024",
                                           "--micro_batch", "4", "--world_size", "32", "--expert_model_parallel_size",
                                           "32"],
}


ENV = dict(os.environ)


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, env=ENV)
    return time.perf_counter() - start


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--no-pyc"]
    if "--no-pyc" not in sys.argv:
        ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    runs = int(args[0]) if args else 7
    baselines = {"python -c pass": [sys.executable, "-c", "pass"],
                 "python -c 'import numpy'": [sys.executable, "-c", "import numpy"]}
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in CASES.items():
            for label, extra in (("H200 estimates", ["--gpu_type", "H200"]), ("placeholders", [])):
                cmd = [sys.executable, "-m", "workload_generator.SimAI_inference_workload_generator", *args, *extra,
                       "--output", str(Path(tmp) / "w.txt")]
                wall(cmd)                      # bytecode caches, file system
                ours: list[float] = []
                base: dict[str, list[float]] = {k: [] for k in baselines}
                for _ in range(runs):      # alternate so that drift hits all alike
                    ours.append(wall(cmd))
                    for key, bcmd in baselines.items():
                        base[key].append(wall(bcmd))
                med = statistics.median(ours)
                ratios = ", ".join(f"{k} {statistics.median(v):.3f} s (x{med / statistics.median(v):.1f})"
                                   for k, v in base.items())
                records = int((Path(tmp) / "w.txt").read_text().splitlines()[1])
                print(f"{name}, {label}: {records} records, median {med:.3f} s (min {min(ours):.3f}, max "
                      f"{max(ours):.3f}) {'< 0.5 s' if med < 0.5 else '>= 0.5 s (over the bar)'}; {ratios}", flush=True)


if __name__ == "__main__":
    main()

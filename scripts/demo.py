"""The CPU demo of the README's quick start: generate a Megatron workload, its SimAI file and a
topology, simulate the iteration with both models, and replay it over gloo on 4 processes.

Everything runs on this machine's CPU in a few seconds; outputs go to results/demo/.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "results" / "demo"
sys.path.insert(0, str(ROOT))


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def step(title: str, *cmd: str) -> None:
    print(f"\n== {title}\n$ {' '.join(cmd)}", flush=True)
    subprocess.run([sys.executable, *cmd], cwd=ROOT, check=True)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    workload_csv = OUT / "gpt_tiny_tp2_pp2_workload.csv"
    step("1. Generate the Megatron workload of one pipeline stage (tp 2, pp 2, dp 2, sequence parallel)",
         "-m", "workload_generator.generate_megatron_workload", "--model_name", "gpt_tiny", "--world_size", "8",
         "--tensor_model_parallel_size", "2", "--pipeline_model_parallel", "2", "--enable_sequence_parallel",
         "--use-distributed-optimizer", "--global_batch", "8", "--seq_length", "256", "--output", str(workload_csv))

    from utils.units import format_size
    from utils.workload import Workload

    workload = Workload.load(workload_csv)
    counts: Counter = Counter()
    volume: Counter = Counter()
    for item in workload.iterations()[1]:
        if item.is_comm:
            key = (item.comm_type.value, item.comm_group.value if item.comm_group else "-")
            counts[key] += 1
            volume[key] += item.msg_size
    print("\nOne iteration of pipeline stage 0, by collective and group:")
    print(f"  {'collective':<16}{'group':<16}{'count':>7}{'bytes':>14}")
    for key in sorted(counts):
        print(f"  {key[0]:<16}{key[1]:<16}{counts[key]:>7}{format_size(volume[key]):>14}")
    simai_txt = OUT / "gpt_tiny_tp2_pp2_simai.txt"
    step("2. Derive the SimAI workload from the same items (AICB's compute file for the times)",
         "-m", "workload_generator.SimAI_training_workload_generator", "--model_name", "gpt_tiny", "--world_size", "8",
         "--tensor_model_parallel_size", "2", "--pipeline_model_parallel", "2", "--enable_sequence_parallel",
         "--use-distributed-optimizer", "--global_batch", "8", "--seq_length", "256",
         "--comp_filepath", "tests/data/examples/aiob_Example.txt", "--output", str(simai_txt))
    step("3. Write a Spectrum-X topology of 16 H100s (SimAI's format)",
         "-m", "topo.gen", "-topo", "Spectrum-X", "-g", "16", "-o", str(OUT) + "/")
    step("4. Simulate one iteration with SimAI's analytical model",
         "-m", "simulator", "-w", str(simai_txt), "-g", "8", "-g_p_s", "8", "-n_p_s", "8", "-g_type", "H100",
         "-r", str(OUT) + "/")
    step("5. Simulate it again with our topology-aware model on that Spectrum-X file (trace and plot too)",
         "-m", "simulator", "-w", str(simai_txt), "-t", str(OUT / "Spectrum-X_16g_8gps_400Gbps_H100"),
         "--trace", str(OUT / "iteration_trace.json"), "--plot", str(OUT / "iteration_breakdown.png"),
         "-r", str(OUT) + "/topo-")
    step("6. Replay the iteration on 4 CPU processes over gloo (tp 2, pp 2, sequence parallel)",
         "-m", "torch.distributed.run", "--nproc_per_node", "4", "--master_port", str(_free_port()), "aicb.py",
         "--frame", "Megatron", "--model_name", "gpt_tiny", "--num_layers", "2", "--seq_length", "64",
         "--tensor_model_parallel_size", "2", "--pipeline_model_parallel", "2", "--enable_sequence_parallel",
         "--global_batch", "4", "--epoch_num", "2", "--output_dir", str(OUT))
    print(f"\nDemo outputs are in {OUT.relative_to(ROOT)}/")


if __name__ == "__main__":
    main()

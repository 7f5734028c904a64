"""The CPU demo of the README's quick start (``python3 make.py demo``): one small training job followed from its
workload to a report.

The job, the same in every step: the 4-layer ``gpt_tiny`` preset on 4 GPUs, tensor parallel 2 x pipeline 2,
sequence parallelism, global batch 4 (4 micro-batches per iteration), sequence 256.  Its computation is
priced for an H100 by the compute model.  4 GPUs because the replay starts one process per GPU and four
stay quick on a 2-core CPU; with --world_size 8 the same job gets data parallel 2 and its gradient
reductions.  Steps:

  1. generate its Megatron workload (the AICB CSV of pipeline stage 0) and count its collectives;
  2. derive the SimAI workload from the same items, with the compute model's H100 times;
  3. write SimAI's topology of one 8-GPU H100 server with Spectrum-X networking (the job uses 4 of its GPUs);
  4. simulate one iteration with SimAI's analytical model;
  5. simulate the job with our topology-aware model on that topology, every pipeline stage as Megatron builds
     it (trace and breakdown plot too);
  6. replay it on 4 CPU processes over gloo (two iterations; the collectives only: a CPU cannot stand in
     for the H100's computation);
  7. write the HTML report of the replay log beside the simulation.

Every command is printed as it runs, from the repository root, and can be pasted; outputs go to
results/demo/.  About 20 s on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "results" / "demo"
sys.path.insert(0, str(ROOT))

JOB = ["--model_name", "gpt_tiny", "--world_size", "4", "--tensor_model_parallel_size", "2", "--pipeline_model_parallel",
       "2", "--enable_sequence_parallel", "--global_batch", "4", "--seq_length", "256"]
"""The one job of every step (4 GPUs: the replay starts one process per GPU, and 4 stay quick on 2 cores)."""


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def shown(arg: str | Path) -> str:
    """How a command line shows an argument: paths under the repository relative to it (the commands run there)."""
    text = str(arg)
    if os.path.isabs(text):
        try:
            relative = str(Path(text).relative_to(ROOT))
        except ValueError:
            return text
        return relative + "/" if text.endswith("/") else relative  # a trailing '/' means a folder to -r
    return text


def python() -> str:
    """The interpreter as the printed commands name it: ``python`` when it is the one on PATH (an activated
    environment), else its path (relative to the repository when it is .venv's)."""
    import shutil

    on_path = shutil.which("python")
    if on_path and Path(on_path).resolve() == Path(sys.executable).resolve():
        return "python"
    return shown(sys.executable)


def step(title: str, *cmd: str | Path) -> None:
    print(f"\n== {title}\n$ {shlex.join([python(), *(shown(c) for c in cmd)])}", flush=True)
    subprocess.run([sys.executable, *(str(c) for c in cmd)], cwd=ROOT, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/demo.py", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    print("The job of every step: " + shlex.join(JOB))
    workload_csv = OUT / "gpt_tiny_tp2_pp2_workload.csv"
    step("1. Generate the Megatron workload of pipeline stage 0",
         "-m", "workload_generator.generate_megatron_workload", *JOB, "--output", workload_csv)

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
    step("2. Derive the SimAI workload from the same items, the computation priced for an H100 by the compute model",
         "-m", "workload_generator.SimAI_training_workload_generator", *JOB, "--gpu_type", "H100", "--output", simai_txt)
    topology = OUT / "Spectrum-X_8g_8gps_400Gbps_H100"
    step("3. Write SimAI's topology of one 8-GPU H100 server with Spectrum-X networking (the job uses 4 of its GPUs)",
         "-m", "topo.gen", "-topo", "Spectrum-X", "-g", "8", "-o", topology)
    step("4. Simulate one iteration with SimAI's analytical model",
         "-m", "simulator", "-w", simai_txt, "-g", "4", "-g_p_s", "8", "-n_p_s", "8", "-g_type", "H100",
         "-r", str(OUT) + "/")
    step("5. Simulate the job with our topology-aware model on that topology: every pipeline stage as Megatron builds "
         "it (trace and breakdown plot too)",
         "-m", "simulator", "-t", topology, "--gpu_type", "H100", *JOB, "--trace", OUT / "iteration_trace.json",
         "--plot", OUT / "iteration_breakdown.png", "-r", str(OUT) + "/topo-")
    step("6. Replay the job's collectives on 4 CPU processes over gloo (2 iterations after a warm-up)",
         "-m", "torch.distributed.run", "--nproc_per_node", "4", "--master_port", str(_free_port()), "aicb.py", *JOB,
         "--epoch_num", "2", "--compute_mode", "skip", "--output_dir", OUT)
    logs = sorted((OUT / "comm_logs").glob("megatron_gpt_tiny_*_4n_log.csv"), key=lambda p: p.stat().st_mtime)
    report = OUT / "report.html"
    step("7. Write the HTML report: the replay's log beside the simulated iteration",
         "-m", "log_analyzer", "report", logs[-1], "--sim", OUT / "topo-EndToEnd.csv", "--topology", topology,
         "-o", report)
    print(f"\nDemo outputs are in {shown(OUT)}/; open the report: {shown(report)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

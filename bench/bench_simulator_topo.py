#!/usr/bin/env python3
"""Benchmark ``--model topo``: Llama 3 405B, tp 8, pp 16, dp 128 on a 16,384-GPU Spectrum-X fabric.

    .venv/bin/python bench/bench_simulator_topo.py [--runs 5] [--trace]

The layout of the Llama 3 paper (Table 4: 16,384 H100, TP 8, CP 1, PP 16, DP 128, sequence 8192,
16M tokens per batch = global batch 2048, micro-batch 1, so 16 micro-batches): 126 layers as 7 + 14 x 8
+ 7 (the first and last stage lighter, as Meta did), sequence parallel, distributed optimizer,
--overlap_grad_reduce.  The topology is ``python -m topo.gen -topo Spectrum-X -g 16384 --pods 4``
(4 pods of 4,096 GPUs under a non-blocking core tier; SimAI's one-pod Spectrum-X stops at 4,096 GPUs).
Compute times come from the compute model (``mocked_model.compute``) when it is
importable, else from FLOPs at 40% of the H100's 989.4 TFLOP/s (a placeholder, labelled as such).

Prints (median of --runs, wall clock, in-process unless said):
- reading the topology file (16,384 GPUs, 65,536 links);
- generating the 16 stage workloads (``megatron_pipeline``);
- ``simulate()`` on those workloads and a freshly read topology (stage programs, placement and path
  queries, NCCL costs, the played schedule, the result tables): the target is under 2 s; and again on
  a topology object whose path caches are warm (a sweep over options);
- the same from a JobConfig and a topology path (generation and reading included);
- ``python -m simulator -w <SimAI file of the same layout> -t <topology>`` as a whole process;
- with --trace, building the trace of every interval.
Then the simulated iteration time, MFU and per-stage breakdown of the last run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def timed(function, runs: int) -> tuple[float, object]:
    times, value = [], None
    for _ in range(runs):
        start = time.perf_counter()
        value = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), value


def job():
    from utils.config import JobConfig, TrainingConfig
    from utils.parallel import ParallelConfig
    from utils.presets import get_preset

    parallel = ParallelConfig(world_size=16384, tp=8, pp=16, sequence_parallel=True, micro_batch=1, global_batch=2048,
                              first_stage_layers=7, last_stage_layers=7)
    training = TrainingConfig(seq_length=8192, computation_enable=True, use_distributed_optimizer=True,
                              overlap_grad_reduce=True)
    return JobConfig(get_preset("llama3_405B"), parallel, training)


def compute_hook():
    try:
        from mocked_model.compute import estimator

        return estimator("H100"), "compute model (mocked_model.compute, H100)"
    except Exception:  # noqa: BLE001 - the estimator is optional
        return (lambda item: item.flops / (989.4e12 * 0.4) * 1e9 if item.flops else 0.0), \
            "placeholder: FLOPs at 40% of 989.4 TFLOP/s"


def simai_file(path: Path) -> None:
    """A SimAI file of the same layout (AICB's record layout, one rank of a middle stage): per
    micro-batch an embedding record and 8 layers of attention and MLP records, TP collectives of
    seq/tp x hidden x 2 bytes gathered (256 MiB), compute from the roofline-like placeholder."""
    from workload_generator.simai import SimAIHeader, SimAILayer, SimAIWorkload

    act = 8192 * 16384 * 2
    layer_flops = 2 * 8192 * 16384 * (2 * 16384 + 2 * 1024 + 3 * 53248) / 8 + 4 * 8192 * 8192 * 16384 / 8
    fwd_ns = int(layer_flops / (989.4e12 * 0.4) * 1e9 / 2)
    records = [SimAILayer("grad_param_comm", -1, 0, "NONE", 0, 0, "NONE", 0, 0, "REDUCESCATTER", 12_751_732_736, 100),
               SimAILayer("grad_gather", -1, 0, "NONE", 0, 0, "NONE", 0, 0, "ALLGATHER", 6_375_866_368, 100)]
    block = [SimAILayer("embedding_layer", -1, 1, "NONE", 0, 1, "NONE", 0, 1, "NONE", 0, 100)]
    for _ in range(8):
        block.append(SimAILayer("attention_column", -1, fwd_ns // 2, "ALLGATHER", act, fwd_ns, "REDUCESCATTER", act,
                                fwd_ns // 2, "NONE", 0, 100))
        block.append(SimAILayer("mlp_row", -1, fwd_ns // 2, "REDUCESCATTER", act, fwd_ns, "ALLGATHER", act,
                                fwd_ns // 2, "NONE", 0, 100))
    records += block * 16
    header = SimAIHeader.transformer(tp=8, ep=1, pp=16, vpp=8, ga=16, all_gpus=16384, pp_comm=8192 // 8 * 16384 * 2)
    SimAIWorkload(header, records).write(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--trace", action="store_true", help="also time building the trace of every interval")
    args = parser.parse_args()

    from simulator.api import simulate
    from simulator.options import TopoOptions
    from topo import read_topology
    from topo.gen import main as topo_gen
    from workload_generator.megatron import megatron_pipeline

    hook, hook_name = compute_hook()
    the_job = job()
    options = TopoOptions(compute_time_ns=hook)
    with tempfile.TemporaryDirectory() as folder:
        topo_path = Path(folder) / "Spectrum-X_16384g_4pods"
        with open(os.devnull, "w") as quiet:
            stdout, sys.stdout = sys.stdout, quiet
            try:
                topo_gen(["-topo", "Spectrum-X", "-g", "16384", "--pods", "4", "-o", str(topo_path)])
            finally:
                sys.stdout = stdout
        t_read, topology = timed(lambda: read_topology(topo_path), args.runs)
        t_gen, workloads = timed(lambda: megatron_pipeline(the_job), args.runs)
        t_cold, _ = timed(lambda: simulate(workloads, read_topology(topo_path), options), args.runs)
        t_sim, result = timed(lambda: simulate(workloads, topology, options), args.runs)
        t_all, _ = timed(lambda: simulate(the_job, topo_path, options), args.runs)
        print(f"Llama 3 405B, tp 8 pp 16 dp 128, 16 micro-batches, 16,384 GPUs ({hook_name})")
        print(f"  read the topology (16,384 GPUs, {topology.link_count:,} links)  {t_read * 1000:8.1f} ms")
        print(f"  generate 16 stage workloads (megatron_pipeline)            {t_gen * 1000:8.1f} ms")
        print(f"  simulate(workloads, new topology object), cold path caches {(t_cold - t_read) * 1000:8.1f} ms   "
              "(target < 2000 ms)")
        print(f"  simulate(workloads, same topology object), warm path caches {t_sim * 1000:7.1f} ms")
        print(f"  simulate(job, topology path): generate + read + simulate   {t_all * 1000:8.1f} ms")
        if args.trace:
            t_trace, intervals = timed(lambda: result.details.intervals(), args.runs)
            print(f"  trace intervals ({len(intervals):,})                         {t_trace * 1000:8.1f} ms")
        workload_file = Path(folder) / "llama405b_simai.txt"
        simai_file(workload_file)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        command = [sys.executable, "-m", "simulator", "-w", str(workload_file), "-t", str(topo_path), "-q", "-r_f", folder]
        subprocess.run(command, env=env, check=True, cwd=folder)
        t_cli, _ = timed(lambda: subprocess.run(command, env=env, check=True, cwd=folder), args.runs)
        print(f"  python -m simulator -w <SimAI file, same layout> -t <topology>: whole process {t_cli * 1000:8.1f} ms")
    d = result.details
    mfu = f"{d.mfu * 100:.1f}%" if d.mfu is not None else "n/a"
    print(f"iteration {d.iteration_us / 1e6:.3f} s, MFU {mfu}; EndToEnd stage {d.reported_stage}")
    print(result.stage_table()[["stage", "compute_us", "tp_exposed_us", "dp_exposed_us", "pp_exposed_us", "bubble_us"]]
          .round(0).to_string(index=False))


if __name__ == "__main__":
    main()

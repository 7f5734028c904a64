"""AICB-compatible entry: write the SimAI training workload (.txt) of a Megatron or DeepSeek job.

    python -m workload_generator.SimAI_training_workload_generator -m 7 --world_size 64 \\
        --tensor_model_parallel_size 4 --global_batch 128 --micro_batch 1 --seq_length 4096 --swiglu

The records come from the same work items as the replay CSV (``workload_generator.simai_training``).
Computation times: ``--compute_source`` (see ``--help``): ``--aiob_enable`` measures them here and
writes the compute file to ``results/aiob_outputs/``, ``--comp_filepath`` reads one, and a
``--gpu_type`` of the compute model's GPU table (A100, H100, H800, H20, H200, B200, ...) estimates them
when no other source is given (:mod:`mocked_model.compute`).  Default output path, as AICB names it:
``results/workload/<gpu_type>-<model>-world_size<W>-tp<T>-pp<P>-ep<E>-gbs<B>-mbs<b>-seq<S>-MOE-<moe>-GEMM-<gemm>-flash_attn-<fa>.txt``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from typing import Any

from utils.cli import parse_job, run_main
from utils.config import JobConfig
from utils.errors import ConfigError
from workload_generator.compute_times import default_source, fill_job_times, print_report
from workload_generator.entry import (
    memory_estimate,
    note_ignored_simai_env,
    prepare_output,
    refuse_visual,
    report_memory,
)
from workload_generator.megatron import MegatronWorkload
from workload_generator.simai_training import derive_simai

PROG = "SimAI_training_workload_generator"


def default_simai_path(job: JobConfig, values: dict[str, Any]) -> str:
    from mocked_model.compute.gpus import gpu_label

    p, t = job.parallel, job.training
    name = (f"{gpu_label(t.gpu_type)}-{values.get('model_name') or job.model.name}-world_size{p.world_size}-tp{p.tp}-pp{p.pp}"
            f"-ep{p.ep}-gbs{p.global_batch}-mbs{p.micro_batch}-seq{t.seq_length}-MOE-{job.model.is_moe}"
            f"-GEMM-{t.moe_grouped_gemm}-flash_attn-{t.use_flash_attn}.txt")
    return os.path.join(values.get("output_dir") or "results", "workload", name.replace("/", "_").replace("*", "x"))


def compute_source(job: JobConfig, values: dict[str, Any]) -> str:
    """``--compute_source``, or the best source the flags make available (the compute model's estimate
    when ``--gpu_type`` is a GPU of its table)."""
    return default_source(job, values.get("compute_source"), model_default=True)


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    job, values = parse_job(argv, prog, "Write the SimAI workload (.txt) of a Megatron training iteration.")
    refuse_visual(values, prog)
    if job.training.frame not in ("Megatron", "DeepSeek"):
        raise ConfigError(f"--frame {job.training.frame}: SimAI workloads are generated for Megatron and DeepSeek jobs")
    # records carry computation times, so the computation items must exist
    job = replace(job, training=replace(job.training, computation_enable=True))
    path = values.get("output") or default_simai_path(job, values)
    prepare_output(path, values, prog, bool(values.get("output")))
    note_ignored_simai_env(prog)
    memory = memory_estimate(job, values)  # (before the file: a job it refuses writes nothing)
    gen = MegatronWorkload(job)
    source = compute_source(job, values)
    items = [i for chunk in gen.chunks for m, seg in chunk.backward_segments() for i in seg]
    items += [i for chunk in gen.chunks for i in chunk.forward_items()]
    report = fill_job_times(items, job, source, values, log=print)
    derived = derive_simai(gen)
    derived.workload.write(path)
    print_report(report)
    if derived.dropped:
        print("not in SimAI's format (left out): " + ", ".join(f"{k} x{v}" for k, v in sorted(derived.dropped.items())))
    print(f"workload save in : {path} ({len(derived.workload.records)} records, pipeline rank {job.parallel.pp_rank})")
    report_memory(job, values, estimate=memory)
    return 0


def cli() -> None:
    """The console entry point (pyproject.toml's [project.scripts])."""
    run_main(lambda: main(sys.argv[1:]), PROG)


if __name__ == "__main__":
    cli()

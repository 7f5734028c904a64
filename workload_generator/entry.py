"""What the command-line entries share: pick the generator for a frame, name and write the output."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from utils.config import JobConfig
from utils.errors import ConfigError
from utils.workload import Workload


def generator_for(job: JobConfig, pp_rank: int | None = None):
    """The :class:`WorkloadGenerator` of the job's ``--frame``."""
    frame = job.training.frame
    if frame in ("Megatron", "DeepSeek"):
        from workload_generator.megatron import MegatronWorkload

        return MegatronWorkload(job, pp_rank=pp_rank)
    if frame == "DeepSpeed":
        from workload_generator.deepspeed import deepspeed_workload

        return deepspeed_workload(job)
    raise ConfigError(f"--frame {frame} generates no training workload; use Megatron, DeepSeek or DeepSpeed "
                      "(collective_test runs its sweep under torchrun)")


def generator_class(job: JobConfig) -> type:
    """The :class:`WorkloadGenerator` class :func:`generator_for` builds for the job's ``--frame``."""
    frame = job.training.frame
    if frame in ("Megatron", "DeepSeek"):
        from workload_generator.megatron import MegatronWorkload

        return MegatronWorkload
    from workload_generator.generator import WorkloadGenerator

    return WorkloadGenerator


def build_workload(job: JobConfig, pp_rank: int | None = None) -> Workload:
    """Generate the workload of the selected pipeline rank (``--pp_rank``)."""
    return generator_for(job, pp_rank)()


def build_timed_workload(job: JobConfig, values: dict[str, Any], pp_rank: int | None = None,
                         log: Callable[[str], None] | None = print) -> Workload:
    """The workload with its computation times from ``--compute_source`` (default: measured with
    ``--aiob_enable``, read from ``--comp_filepath``, else none).  A time source implies
    ``--computation_enable``; ``--aiob_enable`` measures in this one process (no torchrun needed)
    and writes the compute file to ``results/aiob_outputs/`` (under ``--output_dir`` when given)."""
    from workload_generator.compute_times import default_source, fill_job_times, print_report

    source = default_source(job, values.get("compute_source"))
    if source != "placeholder" and not job.training.computation_enable:
        job = replace(job, training=replace(job.training, computation_enable=True))
    workload = build_workload(job, pp_rank)
    if source != "placeholder":
        report = fill_job_times(workload.items, job, source, values, log)
        print_report(report, log)
    workload.compute_source = source
    return workload


def report_memory(job: JobConfig, values: dict[str, Any], log: Callable[[str], None] = print) -> None:
    """``--memory``: print the job's memory per GPU (:mod:`mocked_model.memory`) and a warning when the
    most loaded GPU does not fit ``--gpu_type``."""
    if not values.get("memory"):
        return
    from mocked_model.memory import estimate_memory

    estimate = estimate_memory(job, job.training.gpu_type)
    log(estimate.table())
    if estimate.warning():
        log(f"warning: {estimate.warning()}")


def default_workload_path(job: JobConfig, values: dict[str, Any], generator_name: str) -> str:
    """AICB's file name: ``results/mocked_workload/<gen>_<model>_sp_<sp>_iteration_<n>_computationEnable_<c>_<W>n_workload.csv``
    (under ``--output_dir`` instead of ``results`` when given)."""
    base = values.get("output_dir") or "results"
    t, p = job.training, job.parallel
    name = (f"{generator_name}_{values.get('model_name') or job.model.name}_sp_{p.sequence_parallel}_iteration_{t.epoch_num}"
            f"_computationEnable_{t.computation_enable}_{p.world_size}n_workload.csv")
    return os.path.join(base, "mocked_workload", name.replace("*", "x").replace("/", "_"))


def write_workload(workload: Workload, path: str) -> str:
    """Dump the workload CSV atomically and return the path."""
    workload.dump(path)
    return path


def refuse_visual(values: dict[str, Any], prog: str) -> None:
    """``--enable_visual`` draws with the analysis layer, above the generators: these entries write the file
    only, so the flag is refused with the commands that draw it rather than silently ignored."""
    if values.get("enable_visual"):
        raise ConfigError(f"--enable_visual: {prog} writes the workload only; use aicb.py --workload_only "
                          "--enable_visual, or python -m visualize.generate FILE only_workload afterwards")

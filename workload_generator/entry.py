"""What the command-line entries share: pick the generator for a frame, name and write the output."""

from __future__ import annotations

import os
from typing import Any

from utils.config import JobConfig
from utils.errors import ConfigError
from workload_generator.workload import Workload


def generator_for(job: JobConfig, pp_rank: int | None = None):
    """The :class:`WorkloadGenerator` of the job's ``--frame``."""
    frame = job.training.frame
    if frame in ("Megatron", "DeepSeek"):
        from workload_generator.megatron import MegatronWorkload

        return MegatronWorkload(job, pp_rank=pp_rank)
    raise ConfigError(f"--frame {frame} cannot generate a training workload here; use --frame Megatron")


def build_workload(job: JobConfig, pp_rank: int | None = None) -> Workload:
    """Generate the workload of the selected pipeline rank (``--pp_rank``)."""
    return generator_for(job, pp_rank)()


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

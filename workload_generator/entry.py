"""What the command-line entries share: pick the generator for a frame, name and write the output."""

from __future__ import annotations

import os
import sys
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


def memory_estimate(job: JobConfig, values: dict[str, Any]) -> Any:
    """``--memory``'s estimate (:mod:`mocked_model.memory`), or None without the flag: the entries take it before they
    write, so that a job it refuses (``--mtp_num_layers 1e9``: :func:`workload_generator.limits.check_megatron`)
    leaves no file behind."""
    if not values.get("memory"):
        return None
    from mocked_model.memory import estimate_memory
    from workload_generator.limits import check_mtp

    check_mtp(job)
    return estimate_memory(job, job.training.gpu_type)


def report_memory(job: JobConfig, values: dict[str, Any], log: Callable[[str], None] = print,
                  estimate: Any = None) -> None:
    """``--memory``: print the job's memory per GPU (``estimate``, else :func:`memory_estimate`) and a warning when
    the most loaded GPU does not fit ``--gpu_type``."""
    if not values.get("memory"):
        return
    estimate = estimate or memory_estimate(job, values)
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


def training_workload_path(job: JobConfig, values: dict[str, Any]) -> tuple[str, bool]:
    """(where a training entry writes its workload CSV, whether ``-o/--output`` gave it): AICB's name of the
    job's generator (``megatron`` for Megatron and DeepSeek, ``deepspeed_stage<N>``) unless ``--output`` names one.
    Known before the workload is built, so that the output is checked before any work."""
    given = values.get("output")
    if given:
        return given, True
    name = "megatron"
    if job.training.frame == "DeepSpeed":
        from workload_generator.deepspeed import DeepSpeedConfig

        name = f"deepspeed_stage{DeepSpeedConfig.from_values(job.training.extra).stage}"
    return default_workload_path(job, values, name), False


def input_paths(values: dict[str, Any]) -> dict[str, Any]:
    """The files a job reads, by flag: an output may be none of them (:func:`utils.io.guard_output`)."""
    return {flag: values.get(key) for flag, key in (("--comp_filepath", "comp_filepath"), ("--gpu_spec", "gpu_spec"),
                                                    ("--workload", "workload"),
                                                    ("the model's JSON config", "config_file"))}


def prepare_output(path: str, values: dict[str, Any], prog: str, given: bool, what: str = "the output file") -> str:
    """Check an output before any work (:func:`utils.io.guard_output`: not an input, not a symbolic link, not a
    folder; a killed writer's temporaries beside it removed) and, for a name AICB's scheme made (``given``
    False: no ``-o``), say on stderr when it replaces an earlier run's file (:func:`warn_replacing`).
    Raises :class:`~utils.io.OutputError` (one line).  Returns ``path``."""
    from utils.io import guard_output

    guard_output(path, input_paths(values), "-o/--output" if given else what)
    if not given:
        warn_replacing(path, prog)
    return path


def warn_replacing(path: str, prog: str, also: str = "") -> bool:
    """One line on stderr when ``path`` exists: AICB's file names hold only some of a job's flags (not tp, pp or
    the batch), so two different jobs can map to one name, and the later would replace the earlier's results
    without a word.  AICB users rerun the same commands and expect the newest result under the usual name, so
    the file is replaced, not refused; the line names it, and how to keep both.  ``also``: what else goes
    with it (``and its detail CSV``).  Returns whether it warned."""
    if not os.path.lexists(path):
        return False
    print(f"{prog}: warning: replacing {path}{' ' + also if also else ''}, written by an earlier run (of this job, or "
          "of another whose AICB-style name is the same: the name does not hold every flag); give --output_dir DIR "
          "(or -o FILE) to keep both", file=sys.stderr, flush=True)
    return True


SIMAI_ENV = {
    "AS_SEND_LAT": "the send latency of every flow",
    "AS_NVLS_ENABLE": "NVLink SHARP for all-reduce",
    "AS_NVLSTREE_ENABLE": "the NVLS tree algorithm",
    "AS_PXN_ENABLE": "PXN, the inter-node proxy through NVLink",
    "AS_LOG_LEVEL": "SimAI's log level",
}
"""SimAI's environment variables (its simulators read them: ``AS_SEND_LAT=3 AS_NVLS_ENABLE=1 ./bin/SimAI_simulator
...`` in SimAI's README; ``MockNcclGroup.cc``, ``SimAiFlowModelRdma.cc``), and what each sets."""


def ignored_simai_env(environ: dict[str, str] | None = None) -> list[str]:
    """The :data:`SIMAI_ENV` variables set (to anything but an empty string) in ``environ`` (default: this
    process's environment), in the table's order."""
    env = os.environ if environ is None else environ
    return [name for name in SIMAI_ENV if env.get(name, "") != ""]


def note_ignored_simai_env(prog: str, why: str = "SimAI reads it when it simulates; the workload file does not "
                           "depend on it", environ: dict[str, str] | None = None) -> list[str]:
    """One note on stderr per SimAI variable set in the environment that ``prog`` does not use (a user moving
    from SimAI's scripts would otherwise believe it applied); ``why`` says why it changes nothing here.
    Returns the names noted.  The simulator, which does not model them either, calls it with its own ``why``."""
    env = os.environ if environ is None else environ
    names = ignored_simai_env(env)
    for name in names:
        print(f"{prog}: note: {name}={env[name]} ({SIMAI_ENV[name]}) is ignored: {why}", file=sys.stderr, flush=True)
    return names


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

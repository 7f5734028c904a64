"""The AICB-named DeepSpeed entries' shared main (``generate_deepspeed_stage1_2_workload``,
``generate_deepspeed_stage3_workload``): parse the flags, check the stage, write the workload CSV."""

from __future__ import annotations

from collections.abc import Sequence

from utils.cli import parse_job
from utils.errors import ConfigError
from workload_generator.deepspeed import DeepSpeedConfig, deepspeed_workload
from workload_generator.entry import prepare_output, refuse_visual, report_memory, training_workload_path


def entry_main(argv: Sequence[str], prog: str, stages: tuple[int, ...], default_stage: int) -> int:
    """The AICB-named CLI entries: ``--frame`` defaults to DeepSpeed and ``--stage`` to
    ``default_stage``; a stage the entry does not generate is refused."""
    args = list(argv)
    for flag, value in (("--stage", str(default_stage)), ("--frame", "DeepSpeed")):
        if not any(a == flag or a.startswith(flag + "=") for a in args):
            args = [flag, value, *args]
    job, values = parse_job(args, prog, f"Write the AICB workload CSV of a DeepSpeed ZeRO-{'/'.join(map(str, stages))} "
                                        "training iteration.")
    if job.training.frame != "DeepSpeed":
        raise ConfigError(f"--frame {job.training.frame}: {prog} generates DeepSpeed workloads (omit --frame or give "
                          "--frame DeepSpeed)")
    refuse_visual(values, prog)
    config = DeepSpeedConfig.from_values(values)
    if config.stage not in stages:
        other = "generate_deepspeed_stage3_workload" if config.stage == 3 else "generate_deepspeed_stage1_2_workload"
        raise ConfigError(f"--stage {config.stage}: {prog} generates ZeRO stage {' and '.join(map(str, stages))}; "
                          f"use {other}")
    path, given = training_workload_path(job, values)
    prepare_output(path, values, prog, given)
    workload = deepspeed_workload(job, config)()
    workload.dump(path)
    print(f"Workload file generated: {path} ({len(workload)} items, ZeRO stage {config.stage}, "
          f"{job.parallel.dp} data-parallel ranks)")
    report_memory(job, values)
    return 0

"""AICB's entry point: build the workload of a training job (or of inference steps), optionally time its
computation (AIOB), and replay it over torch.distributed.

    python aicb.py --frame Megatron --model_name gpt_13B ... --workload_only   # write the workload CSV
    torchrun --nproc_per_node 8 aicb.py --frame Megatron --model_name gpt_13B ...   # replay it
    torchrun --nproc_per_node 8 aicb.py --frame Inference -m DeepSeek-671B --phase decode --seq_length 1024 \\
        --micro_batch 32 --expert_model_parallel_size 8 --gpu_type H200       # replay decode steps

Flags are AICB's (``python aicb.py --help``); ``--output`` names the workload CSV; ``--check`` checks
a replay's flags and workloads without starting it.  Under torchrun every rank parses the same flags:
an error in them (or one the ranks agree on) is reported by each node's local rank 0 only, and the
others end silently with the same exit status 2 (torchrun still adds its own failure summary).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from collections.abc import Iterator

from replay.env import SharedError, reports_errors
from utils.cli import parse_job, run_main
from utils.errors import UserError
from workload_generator.entry import (
    build_timed_workload,
    memory_estimate,
    prepare_output,
    report_memory,
    training_workload_path,
)

PROG = "aicb.py"
LINGER_S = 30.0
"""How long a silent rank under torchrun waits for torchrun to stop it (see :func:`main`)."""


def _torchrun_world(argv: list[str]) -> list[str]:
    """Under torchrun the world size is the number of processes it started (AICB takes it from
    torch.distributed): pass WORLD_SIZE on as --world_size unless that flag was given.  Outside
    torchrun (no LOCAL_RANK) WORLD_SIZE is left alone: AICB's scripts use it for the node count."""
    world = os.environ.get("WORLD_SIZE")
    if world is None or "LOCAL_RANK" not in os.environ:
        return argv
    if any(a.split("=", 1)[0] in ("--world_size", "--world-size") for a in argv):
        return argv
    return [*argv, "--world_size", world]


def _inference(argv: list[str]) -> bool:
    return any(a == "--frame=Inference" or (a == "--frame" and argv[i + 1:i + 2] == ["Inference"])
               for i, a in enumerate(argv))


@contextlib.contextmanager
def _quiet_unless(reporting: bool) -> Iterator[None]:
    """On a rank that does not report (see :func:`replay.env.reports_errors`), swallow what parsing
    prints (argparse's error line, ``--help``): every rank would print the same."""
    if reporting:
        yield
        return
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


def _require_torch() -> None:
    """The replay runs on torch.distributed: without torch, one line that says what to install (every
    rank meets it alike, so local rank 0 alone reports it)."""
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise SharedError(f"the replay needs torch ({exc}): install the torch extra, pip install '.[torch]', or use "
                          "the toolkit's environment (. .venv/bin/activate, made by python3 make.py setup); "
                          "--workload_only needs no torch") from None


def main(argv: list[str] | None = None) -> int:
    reporting = reports_errors()
    try:
        return _main(argv, reporting)
    except SharedError:
        if reporting:
            raise
        # The same error on every rank, which local rank 0 reports.  torchrun stops every worker as soon
        # as one fails, so a silent rank that ended first could have local rank 0 stopped before it
        # printed: under torchrun (TORCHELASTIC_RUN_ID) it waits to be stopped instead, for a while.
        if "TORCHELASTIC_RUN_ID" in os.environ:
            time.sleep(LINGER_S)
        sys.exit(2)


def _main(argv: list[str] | None, reporting: bool) -> int:
    argv = _torchrun_world(list(sys.argv[1:] if argv is None else argv))
    inference = _inference(argv)
    try:
        with _quiet_unless(reporting):
            if inference:  # inference steps: workload_generator.inference_entry's flags
                from workload_generator.inference_entry import aicb_parse

                job, values = aicb_parse(argv, PROG)
            else:
                job, values = parse_job(argv, PROG, "Generate, time and replay the communication of a training "
                                        "iteration.")
    except UserError as exc:
        raise SharedError(str(exc)) from None  # parsed alike on every rank
    except SystemExit as exc:  # argparse: an error line (swallowed here if this rank is silent), or --help
        if reporting or exc.code in (0, None):
            raise
        raise SharedError("bad flags") from None
    if inference:
        if values["workload_only"]:
            from replay.env import memory_line
            from workload_generator.inference_entry import aicb_workload_only, log_names

            prepare_output(log_names(job, values)[1], values, PROG, bool(values.get("output")))  # before any work
            status = aicb_workload_only(job, values)
            print(memory_line(job, {}))  # every inference entry prints the memory per GPU
            return status
        _require_torch()
        from workload_applyer import replay_main

        return replay_main(job, values)
    if values["workload_only"]:
        if job.training.frame == "collective_test":
            from workload_generator.generate_collective_test import write_sweep

            path = write_sweep(job, values, PROG)
        else:
            path, given = training_workload_path(job, values)
            prepare_output(path, values, PROG, given)  # before any work
            memory = memory_estimate(job, values)  # (before the file: a job it refuses writes nothing)
            workload = build_timed_workload(job, values)  # --aiob_enable / --comp_filepath / --compute_source
            workload.dump(path)
            print(f"Workload file generated: {path} ({len(workload)} items, pipeline rank {job.parallel.pp_rank})")
            report_memory(job, values, estimate=memory)
        if values["enable_visual"]:
            from visualize.generate import write_visual

            print(f"visual output: {write_visual(path, output_dir=values.get('output_dir'))}")
        return 0
    _require_torch()
    from workload_applyer import replay_main

    return replay_main(job, values)


def cli() -> None:
    """The console entry point (pyproject.toml's [project.scripts])."""
    run_main(lambda: main(sys.argv[1:]), PROG)


if __name__ == "__main__":
    cli()

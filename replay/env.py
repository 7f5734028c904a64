"""Where and how a replay runs, worked out without torch: the flags, this process's place in the
launch (torchrun's environment), this rank's workload and the names of the files it writes.

Everything here raises :class:`~utils.errors.ConfigError` (a user error: one line, exit 2) before any
process starts talking, so a bad flag or file costs a moment, not a timeout.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, replace
from typing import Any

from replay.plan import parse_emulate
from utils.config import JobConfig
from utils.errors import ConfigError
from utils.workload import CommType, Workload


@dataclass(frozen=True)
class ReplayOptions:
    """Replay settings: ``backend`` nccl or gloo; ``compute_mode`` auto, sleep, gemm or skip;
    ``warmup`` unlogged iterations; ``timeout_s`` the bound of one operation in seconds;
    ``emulate`` operations forced onto their gloo emulation; ``dtype`` the element type."""

    backend: str = "gloo"
    compute_mode: str = "auto"
    warmup: int = 1
    timeout_s: float = 300.0
    emulate: frozenset[str] = frozenset()
    dtype: str = "bfloat16"
    verbose: bool = True


def options_from(job: JobConfig, values: dict[str, Any]) -> ReplayOptions:
    """Replay options from the resolved flags (``backend`` may still be ``auto``: see
    :func:`resolve_backend`).  Raises :class:`ConfigError`.  Needs no torch."""
    backend = values.get("backend") or "auto"
    warmup = int(values.get("warmup", 1))
    if warmup < 0:
        raise ConfigError(f"--warmup must not be negative, got {warmup}")
    timeout = float(values.get("timeout", 300.0))
    if not timeout > 0:
        raise ConfigError(f"--timeout must be a positive number of seconds, got {timeout}")
    try:
        emulate = parse_emulate(values.get("emulate"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return ReplayOptions(backend=backend, compute_mode=values.get("compute_mode") or "auto", warmup=warmup,
                         timeout_s=timeout, emulate=emulate, dtype=job.training.dtype)


def resolve_backend(backend: str, cuda: bool) -> str:
    """``auto`` -> nccl with CUDA, gloo without.  Raises :class:`ConfigError` for nccl without CUDA."""
    if backend == "auto":
        return "nccl" if cuda else "gloo"
    if backend == "nccl" and not cuda:
        raise ConfigError("--backend nccl needs a CUDA device, and torch sees none (use --backend gloo)")
    return backend


def launch_env(job: JobConfig) -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's environment; a lone process for world 1."""
    world = job.parallel.world_size
    if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
        if world != 1:
            raise ConfigError(f"--world_size {world} needs {world} processes: run under torchrun --nproc_per_node "
                              f"{world} (or add --workload_only to only write the workload)")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    env_world = int(os.environ["WORLD_SIZE"])
    if env_world != world:
        raise ConfigError(f"--world_size {world} does not match the {env_world} processes torchrun started "
                          "(WORLD_SIZE); drop --world_size or make them equal")
    return int(os.environ["RANK"]), env_world, int(os.environ.get("LOCAL_RANK", "0"))


def log_names(job: JobConfig, values: dict[str, Any]) -> tuple[str, str | None]:
    """(base name of the log files, path to write rank 0's workload to or None)."""
    from workload_generator.entry import default_workload_path

    if values.get("workload"):
        base = os.path.basename(values["workload"]).replace("{", "").replace("}", "")
        for suffix in ("_workload.csv", ".csv"):
            if base.endswith(suffix):
                base = base[: -len(suffix)]
                break
        return base, None
    if job.training.frame == "Inference":
        from workload_generator.inference_entry import log_names as inference_log_names

        return inference_log_names(job, values)
    if job.training.frame == "collective_test":
        from workload_generator.collective_test import collective_test_name

        base = collective_test_name(job)
        root = values.get("output_dir") or "results"
        return base, values.get("output") or os.path.join(root, "mocked_workload", base + "_workload.csv")
    path = default_workload_path(job, values, job.training.frame.lower())
    base = os.path.basename(path)[: -len("_workload.csv")]
    return base, values.get("output") or path


def needs_shared_aiob(job: JobConfig, values: dict[str, Any]) -> bool:
    """Whether the replay's compute times are measured now (``--aiob_enable`` or ``--compute_source
    aiob``): then rank 0 measures once on its device and shares the result (:func:`rank_workload`'s
    ``compute``), as AICB's local rank 0 does, instead of every rank measuring at once."""
    if values.get("workload") or job.training.frame in ("collective_test", "Inference"):
        return False
    from workload_generator.compute_times import default_source

    return default_source(job, values.get("compute_source")) == "aiob"


def measure_aiob(job: JobConfig, values: dict[str, Any]) -> Any:
    """Rank 0's AIOB measurement (a ComputeFile; also written where AICB writes it)."""
    from workload_generator.compute_times import measure_compute_file

    compute, path = measure_compute_file(job, values, print)
    print(f"compute times: aiob, measured once on rank 0 and shared with every rank; compute file {path}", flush=True)
    return compute


def rank_workload(job: JobConfig, values: dict[str, Any], rank: int, compute: Any = None) -> tuple[Workload, str]:
    """This rank's workload (its pipeline stage's) and a name for it in messages.  Compute times come
    from ``compute`` (rank 0's AIOB measurement) when given, else from the flags (``--comp_filepath``,
    ``--compute_source``; see ``workload_generator.entry.build_timed_workload``)."""
    stage = job.parallel.rank_generator().coordinates(rank)["pp"]
    path = values.get("workload")
    if path:
        resolved = path.replace("{pp_rank}", str(stage)).replace("{rank}", str(rank))
        workload = Workload.load(resolved)
        if resolved == path and job.parallel.pp > 1 and any(i.comm_type in (CommType.isend, CommType.irecv)
                                                            for i in workload.items):
            raise ConfigError(f"--workload {path} holds one pipeline stage's p2p items, but --pipeline_model_parallel "
                              f"is {job.parallel.pp}: give one file per stage with {{pp_rank}} in the path")
        return workload, resolved
    if job.training.frame == "Inference":
        from workload_generator.inference_entry import stage_workload

        return stage_workload(job, values, stage, log=print if rank == 0 else None), f"inference stage {stage}"
    if job.training.frame == "collective_test":
        from workload_generator.collective_test import collective_test_workload

        return collective_test_workload(job), "the collective_test workload"
    from workload_generator.entry import build_timed_workload, build_workload

    name = f"the generated workload of pipeline stage {stage}"
    if compute is None:
        return build_timed_workload(job, values, pp_rank=stage, log=print if rank == 0 else None), name
    from workload_generator.compute_times import fill_compute_times

    job = replace(job, training=replace(job.training, computation_enable=True))
    workload = build_workload(job, pp_rank=stage)
    fill_compute_times(workload.items, "aiob", compute=compute)
    workload.compute_source = "aiob"
    return workload, name


_SOURCE_LOCATION = re.compile(r"^\[[^\]]*\.(?:cc|cpp|h|hpp):\d+\]\s*")


def first_line(exc: BaseException) -> str:
    """The cause in one line: the first line of the message without gloo's C++ source location and
    boilerplate advice."""
    text = str(exc).strip().splitlines()
    line = _SOURCE_LOCATION.sub("", text[0] if text else type(exc).__name__)
    line = line.split(" This is typically caused", 1)[0].rstrip(". ")
    return line if len(line) <= 300 else line[:297] + "..."

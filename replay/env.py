"""Where and how a replay runs, worked out without torch: the flags, this process's place in the
launch (torchrun's environment), this rank's workload and the names of the files it writes.

Everything here raises :class:`~utils.errors.ConfigError` (a user error: one line, exit 2) before any
process starts talking, so a bad flag or file costs a moment, not a timeout.
"""

from __future__ import annotations

import math
import os
import re
import signal
import socket
import sys
from dataclasses import dataclass, replace
from typing import Any

from replay.plan import parse_emulate
from utils.config import JobConfig
from utils.errors import ConfigError
from utils.workload import CommType, Workload


class SharedError(ConfigError):
    """A user error every rank of the run meets alike: its flags, the launch, or an error the ranks
    agreed on.  Under a launcher only each node's local rank 0 reports it (:func:`reports_errors`);
    the other ranks end silently with the same exit status 2."""


@dataclass(frozen=True)
class ReplayOptions:
    """Replay settings: ``backend`` nccl or gloo; ``compute_mode`` auto, sleep, gemm or skip;
    ``warmup`` unlogged iterations; ``timeout_s`` the bound of one operation in seconds;
    ``join_timeout_s`` the bound of the start (every rank joining the process group, rank 0's AIOB
    measurement); ``emulate`` operations forced onto their gloo emulation; ``dtype`` the element type;
    ``verbose`` a console line per operation; ``sweep`` a console line per message size instead
    (``--frame collective_test``)."""

    backend: str = "gloo"
    compute_mode: str = "auto"
    warmup: int = 1
    timeout_s: float = 300.0
    emulate: frozenset[str] = frozenset()
    dtype: str = "bfloat16"
    verbose: bool = True
    join_timeout_s: float = 1800.0
    sweep: bool = False
    iterations: int | None = None
    """``--epoch_num`` given with a ``--workload`` file: the measured iterations to run, the file's cycled (None:
    the file's own, once each)."""


def options_from(job: JobConfig, values: dict[str, Any]) -> ReplayOptions:
    """Replay options from the resolved flags (``backend`` may still be ``auto``: see
    :func:`resolve_backend`).  Raises :class:`ConfigError`.  Needs no torch."""
    backend = values.get("backend") or "auto"
    warmup = int(values.get("warmup", 1))
    if warmup < 0:
        raise ConfigError(f"--warmup must not be negative, got {warmup}")
    timeout = _seconds(values.get("timeout", 300.0), "--timeout")
    join_timeout = _seconds(values.get("join_timeout", 1800.0), "--join_timeout")
    try:
        emulate = parse_emulate(values.get("emulate"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    sweep = job.training.frame == "collective_test"
    return ReplayOptions(backend=backend, compute_mode=values.get("compute_mode") or "auto", warmup=warmup,
                         timeout_s=timeout, emulate=emulate, dtype=job.training.dtype, verbose=not sweep,
                         join_timeout_s=join_timeout, sweep=sweep, iterations=file_iterations(values))


def file_iterations(values: dict[str, Any]) -> int | None:
    """``--epoch_num`` when given with a ``--workload`` file, else None.  A generated workload holds
    ``--epoch_num`` iterations; a file holds the iterations it was written with, and the flag used to be
    ignored without a word: given, it now says how many iterations to measure, the file's cycled (a file of one
    iteration, ``--epoch_num 5``: that iteration five times).  Whether the user gave it: the parser's record of
    the flags given, or, for a parser without one (``--frame Inference``), a value other than the default 1."""
    if not values.get("workload") or values.get("epoch_num") is None:
        return None
    given = values.get("_given")
    epochs = int(values["epoch_num"])
    if given is not None:
        return epochs if "epoch_num" in given else None
    return epochs if epochs != 1 else None


_MAX_SECONDS = 365 * 86400.0
"""The longest timeout accepted (a year): torch's timedelta arithmetic overflows long before inf."""


def _seconds(value: Any, flag: str) -> float:
    seconds = float(value)
    if not (math.isfinite(seconds) and 0 < seconds <= _MAX_SECONDS):
        raise ConfigError(f"{flag} must be a positive number of seconds up to {_MAX_SECONDS:.0f} (a year), got {value}")
    return seconds


def resolve_backend(backend: str, cuda: bool) -> str:
    """``auto`` -> nccl with CUDA, gloo without.  Raises :class:`ConfigError` for nccl without CUDA."""
    if backend == "auto":
        return "nccl" if cuda else "gloo"
    if backend == "nccl" and not cuda:
        raise ConfigError("--backend nccl needs a CUDA device, and torch sees none (use --backend gloo)")
    return backend


def under_launcher() -> bool:
    """Whether a per-node launcher (torchrun, or one like it) started this process: it sets LOCAL_RANK."""
    return "LOCAL_RANK" in os.environ


def reports_errors() -> bool:
    """Whether this process reports the errors every rank meets alike: each node's local rank 0, or a
    process no launcher started.  The others stay silent, so that a bad flag under ``torchrun
    --nproc_per_node 8`` prints one line, not eight."""
    return os.environ.get("LOCAL_RANK", "0").strip() in ("0", "")


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_SENTINEL: Any = None
"""This rank's sentinel process (kept referenced for the life of the rank)."""


def bind_to_parent() -> int | None:
    """Under a launcher, the launcher's process id (the parent's), for the watchdog to poll: a worker
    whose launcher was killed (SIGKILL gives torchrun no chance to stop its workers) must not run on
    alone.  On Linux the kernel is also asked to send SIGHUP at the parent's death (``prctl``'s
    ``PR_SET_PDEATHSIG``; SIGHUP's default action ends the worker even before the watchdog handles it,
    so a SIGHUP ignored since ``nohup torchrun ...`` is restored to it).  ``None`` outside a launcher:
    a lone process outlives its shell on purpose (``nohup``), and its signals are left alone.

    A stopped worker (SIGSTOP, a debugger) can act on neither the signal nor the poll: a sentinel process
    (:mod:`replay.sentinel`) continues it once the launcher is gone, and kills it if it does not end."""
    if not under_launcher():
        return None
    parent = os.getppid()
    from replay.sentinel import start_sentinel

    global _SENTINEL
    _SENTINEL = start_sentinel(parent)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(int(signal.SIGHUP)), ctypes.c_ulong(0), ctypes.c_ulong(0),
                          ctypes.c_ulong(0)) == 0:
                signal.signal(signal.SIGHUP, signal.SIG_DFL)
        except (OSError, AttributeError, ValueError):
            pass  # the watchdog's poll remains (ValueError: signal.signal outside the main thread)
    return parent


def launch_env(job: JobConfig, check: bool = False) -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's environment; a lone process for world 1.  With
    ``check`` (``--check``: nothing starts) a process no launcher started stands for rank 0 of
    ``--world_size`` ranks, and the environment is left alone."""
    world = job.parallel.world_size
    if check and not under_launcher():
        return 0, world, 0
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


def log_path(base: str, values: dict[str, Any]) -> str:
    """Where rank 0 writes the replay's log CSV: ``results/comm_logs/<base>_log.csv`` (under ``--output_dir``)."""
    return os.path.join(values.get("output_dir") or "results", "comm_logs", base + "_log.csv")


def prepare_outputs(base: str, workload_path: str | None, values: dict[str, Any], prog: str,
                    warn: bool = True) -> str:
    """Rank 0's outputs (the log, its detail CSV, the workload CSV), checked before any process talks: none may be
    an input or a symbolic link (:func:`utils.io.guard_output`: the log is opened for streaming and would write
    through a link into its target), and a killed writer's temporaries beside them are removed.  With ``warn``,
    one line on stderr for each earlier run's file an AICB-style name makes this run replace
    (:func:`workload_generator.entry.warn_replacing`).  Raises :class:`~utils.io.OutputError`.  Returns the
    log's path."""
    from log_analyzer.log import detail_path
    from utils.io import guard_output
    from workload_generator.entry import input_paths, warn_replacing

    inputs = input_paths(values)
    template = values.get("workload")
    if template:
        inputs["--workload"] = [template, template.replace("{pp_rank}", "0").replace("{rank}", "0")]
    log = guard_output(log_path(base, values), inputs, "the log")
    detail = guard_output(detail_path(log), inputs, "the detail CSV")
    given = bool(values.get("output"))
    if workload_path:
        guard_output(workload_path, inputs, "-o/--output" if given else "the workload file")
    if warn:
        if not warn_replacing(log, prog, "and its detail CSV" if os.path.lexists(detail) else ""):
            warn_replacing(detail, prog)
        if workload_path and not given:
            warn_replacing(workload_path, prog)
    return log


def memory_line(job: JobConfig, values: dict[str, Any]) -> str | None:
    """The memory per GPU of an inference job the replay generates (``aicb.py --frame Inference``), as every
    inference entry prints it (:func:`mocked_model.inference_memory.memory_per_gpu`: the busiest stage's rank);
    None for training (``--memory`` prints its table) and for a ``--workload`` file (the flags do not describe it)."""
    if job.training.frame != "Inference" or values.get("workload"):
        return None
    from mocked_model.inference_memory import memory_per_gpu

    return memory_per_gpu(job.training.extra["inference_job"]).summary()


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

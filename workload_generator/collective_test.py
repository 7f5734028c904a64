"""The collective sweep workload (``--frame collective_test``), as AICB's ``Collective_Test`` builds it.

One collective (``--test_comm``) over the data-parallel group (the pipeline group with
``--multi_all_reduce_enable 1``, as AICB), for message sizes from ``--begin_size`` to ``--end_size``
multiplied by ``--step_factor`` each step (nccl-tests' ``-b -e -f``), ``--iter_num`` times per size.
Each size is its own block (an ``epoch_end`` follows it), so the replay's per-iteration times are
per-size times and ``--warmup`` warms the smallest size.  Unlike AICB, the init block holds one barrier
(so that NCCL communicators exist before anything is timed) instead of ``iter_num`` untimed calls.
"""

from __future__ import annotations

from typing import Any

from utils.config import JobConfig
from utils.errors import ConfigError
from utils.workload import CommGroup, CommType, WorkItem, Workload
from workload_generator.limits import check_sweep, limit_of

SWEEPABLE = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce")
"""Collectives ``--test_comm`` accepts (AICB's ``*_into_tensor`` / ``*_tensor`` spellings too)."""


def sweep_sizes(begin: int, end: int, factor: int) -> list[int]:
    """Message sizes in bytes: ``begin, begin*factor, ...`` up to and including ``end``."""
    if begin < 1:
        raise ConfigError(f"--begin_size must be at least 1 byte, got {begin}")
    if end < begin:
        raise ConfigError(f"--end_size {end} is smaller than --begin_size {begin}")
    if factor < 2:
        raise ConfigError(f"--step_factor must be at least 2, got {factor}")
    sizes, size = [], begin
    while size <= end:
        sizes.append(size)
        size *= factor
    return sizes


def collective_test_workload(job: JobConfig, options: dict[str, Any] | None = None) -> Workload:
    """The sweep of ``--test_comm``; flags come from ``options`` or the job's ``training.extra``."""
    opts = dict(job.training.extra)
    opts.update(options or {})
    try:
        ctype = CommType.parse(str(opts.get("test_comm", "all_reduce")))
    except ValueError:
        ctype = None
    if ctype is None or ctype.value not in SWEEPABLE:
        raise ConfigError(f"--test_comm {opts.get('test_comm')!r} is not a collective the sweep runs; use one of "
                          f"{', '.join(SWEEPABLE)}")
    iters = int(opts.get("iter_num", 500))
    if iters < 1:
        raise ConfigError(f"--iter_num must be a positive integer, got {iters}")
    sizes = sweep_sizes(int(opts.get("begin_size", 1 << 20)), int(opts.get("end_size", 1 << 20)),
                        int(opts.get("step_factor", 2)))
    check_sweep(iters, len(sizes), limit_of(opts))
    p = job.parallel
    if int(opts.get("multi_all_reduce_enable", 0) or 0):
        group, group_size = CommGroup.pp_group, p.pp
    else:
        group, group_size = CommGroup.dp_group, p.dp
    items: list[WorkItem] = []
    if p.world_size > 1:
        items.append(WorkItem(CommType.barrier, CommGroup.all_nodes, p.world_size, 0, "init.barrier"))
    items.append(WorkItem(CommType.epoch_end))
    root = 0 if ctype in (CommType.broadcast, CommType.reduce) else None
    for size in sizes:
        item = WorkItem(ctype, group, group_size, size, "test_step", dst=root if ctype is CommType.reduce else None,
                        src=root if ctype is CommType.broadcast else None)
        items.extend([item] * iters)
        items.append(WorkItem(CommType.epoch_end))
    return Workload(items=items, config=job, rank=0)


def collective_test_name(job: JobConfig) -> str:
    """Base name of the sweep's files: ``collective_test_<comm>_<world>n``."""
    comm = str(job.training.extra.get("test_comm", "all_reduce"))
    return f"collective_test_{comm}_{job.parallel.world_size}n"

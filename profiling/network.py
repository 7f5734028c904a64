"""``torchrun ... -m profiling network``: sweep every collective over message sizes and group shapes and
write the network profile (NCCL on GPUs, gloo on CPUs).

Group shapes: for every group size ``n`` (powers of two up to the world, and the world itself; or
``--group_sizes``) and every number of ranks per node ``r`` (powers of two up to the ranks per node,
dividing ``n``, with ``n / r`` nodes available), the group of the first ``r`` ranks of each of the
first ``n / r`` nodes.  Nodes come from torchrun (``LOCAL_WORLD_SIZE`` ranks each) or
``--ranks_per_node`` (several "nodes" on one machine, as the CPU tests emulate).  send_recv: rank 0
to rank 1 (inside a node) and rank 0 to the first rank of the second node.

Each point follows nccl-tests: ``--warmup`` untimed calls, then ``--iters`` calls back to back, timed
on each member (CUDA events on a GPU, ``perf_counter_ns`` on a CPU: :class:`replay.timer.OpTimer`),
the time per call the slowest member's average.  Sizes are nccl-tests' (the whole buffer; rounded down
to a multiple of ``n`` elements where the buffer is split).  The operations are the replay's
(:class:`replay.ops.Collectives`: gloo's missing ones emulated and said so in the ``emulated`` column).
Every rank runs every point in the same order and meets the others after each, so no group waits on
another; rank 0 writes the files (merged with what the database holds for the same device).
"""

from __future__ import annotations

import os
import platform
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from profiling.guards import check_device_name, database_lock, gpu_of_device, guard_files
from simulator.profiles import db as profile_db
from utils.errors import ConfigError
from utils.units import format_size

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")
PROG = "profiling network"


@dataclass(frozen=True)
class GroupPlan:
    """One group of the sweep: its members (global ranks), size and ranks per node."""

    ranks: tuple[int, ...]
    ranks_per_node: int

    @property
    def n(self) -> int:
        return len(self.ranks)


def powers_of_two(limit: int) -> list[int]:
    out, v = [], 1
    while v <= limit:
        out.append(v)
        v *= 2
    return out


def plan_groups(world: int, per_node: int, group_sizes: list[int] | None = None) -> list[GroupPlan]:
    """The collective groups of the sweep (see the module docstring), smallest first."""
    if world % per_node:
        raise ConfigError(f"--ranks_per_node {per_node} does not divide the {world} ranks")
    nodes = world // per_node
    sizes = sorted(set(group_sizes or [*powers_of_two(world), world]))
    out = []
    for n in sizes:
        if n < 2 or n > world:
            continue
        for r in sorted(set(powers_of_two(min(n, per_node)) + ([n] if n <= per_node else []))):
            if n % r or n // r > nodes:
                continue
            members = tuple(node * per_node + j for node in range(n // r) for j in range(r))
            out.append(GroupPlan(members, r))
    return out


def plan_pairs(world: int, per_node: int) -> list[GroupPlan]:
    """send_recv pairs: inside a node, and across two nodes."""
    out = []
    if per_node >= 2:
        out.append(GroupPlan((0, 1), 2))
    if world // per_node >= 2:
        out.append(GroupPlan((0, per_node), 1))
    return out


def sweep_sizes(begin: int, end: int, factor: int) -> list[int]:
    from workload_generator.collective_test import sweep_sizes as sizes

    return sizes(begin, end, factor)


def parse_kinds(text: str) -> list[str]:
    if text in ("all", ""):
        return list(KINDS)
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    for kind in kinds:
        if kind not in KINDS:
            raise ConfigError(f"--ops {kind!r} is not one of {', '.join(KINDS)} (or 'all')")
    return kinds


def _env_int(name: str, default: int | None = None) -> int:
    """torchrun's environment variable ``name`` as a whole number >= 0 (one line naming it otherwise)."""
    text = os.environ.get(name)
    if text is None and default is not None:
        return default
    try:
        value = int(str(text).strip())
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(f"environment variable {name}={text!r}: expected a whole number >= 0 (torchrun sets it)")
    return value


def run(args: Any) -> int:
    """The sweep (``args`` from ``python -m profiling network``'s parser)."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise ConfigError("profiling network measures collectives between processes: run it under torchrun, e.g. "
                          "torchrun --nproc_per_node 8 -m profiling network --network_device NAME -o DIR")
    rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
    local_rank = _env_int("LOCAL_RANK", 0)
    per_node = args.ranks_per_node or _env_int("LOCAL_WORLD_SIZE", world)
    if world < 2:
        raise ConfigError("profiling network needs at least 2 processes (torchrun --nproc_per_node N)")
    if per_node < 1 or world % per_node:
        raise ConfigError(f"{per_node} ranks per node do not divide the {world} ranks (--ranks_per_node)")
    kinds = parse_kinds(args.ops)
    sizes = sweep_sizes(args.begin_size, args.end_size, args.step_factor)
    groups = plan_groups(world, per_node, args.group_sizes)
    pairs = plan_pairs(world, per_node) if "send_recv" in kinds else []
    if not groups and not pairs:
        raise ConfigError(f"no group to measure with {world} ranks, {per_node} per node and --group_sizes "
                          f"{args.group_sizes}")
    if args.iters < 1 or args.warmup < 0:
        raise ConfigError("--iters must be at least 1 and --warmup at least 0")
    if not args.network_device.replace("_", "").replace("-", "").replace(".", "").isalnum() or \
            set(args.network_device) == {"."}:
        raise ConfigError(f"--network_device {args.network_device!r}: use letters, digits, '_' and '-' (a folder name)")

    import torch
    import torch.distributed as dist

    from replay.env import resolve_backend
    from replay.ops import P2P, Collectives
    from replay.timer import OpTimer

    backend = resolve_backend(args.backend, torch.cuda.is_available())
    if backend == "nccl":
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    # checked on every rank before any rank joins the group: all refuse alike, nothing is measured or written
    check_device_name(args.network_device, "--network_device", gpu_of_device(device),
                      getattr(args, "allow_name_mismatch", False), "network profile")
    folder = profile_db.network_dir(args.output, args.network_device)
    outputs = [os.path.join(folder, profile_db.NETWORK_FILES[kind]) for kind in kinds]
    outputs.append(os.path.join(folder, profile_db.META_FILE))
    if rank == 0:
        guard_files(outputs)
    dtype = getattr(torch, args.dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise ConfigError(f"--dtype {args.dtype!r} is not a torch dtype (float32, bfloat16, float16)")
    element = torch.tensor([], dtype=dtype).element_size()
    timeout = timedelta(seconds=args.timeout)
    try:
        dist.init_process_group(backend, timeout=timeout, rank=rank, world_size=world)
    except (RuntimeError, ValueError, TimeoutError) as exc:
        print(f"{PROG}: error: rank {rank}: could not join the {world}-rank process group: {exc}", file=sys.stderr)
        os._exit(1)
    try:
        handles = [dist.new_group(list(g.ranks), timeout=timeout) for g in groups]
        pair_handles = [dist.new_group(list(p.ranks), timeout=timeout) for p in pairs]
        col = Collectives(backend, args.emulate.split(",") if args.emulate else (),
                          barrier_device=device.index if device.type == "cuda" else None)
        largest = max(sizes)
        inp = torch.ones(largest // element + 1, dtype=dtype, device=device)
        out = torch.zeros(largest // element + 1, dtype=dtype, device=device)
        timer = OpTimer(device)
        done = torch.zeros(1, dtype=torch.float64, device=device)
        rows: dict[str, list[dict]] = {k: [] for k in kinds}
        start = time.monotonic()
        if rank == 0:
            print(f"{PROG}: {world} ranks, {per_node} per node, {backend} on {_device_label(device)}; {len(groups)} groups, "
                  f"{len(pairs)} send/recv pairs, {len(sizes)} sizes {format_size(sizes[0])}..{format_size(largest)}; "
                  f"warmup {args.warmup}, iters {args.iters}", flush=True)
            print(f"  {'collective':<15}{'ranks':>6}{'/node':>6}{'size_bytes':>14}{'time_us':>13}{'algbw_gbps':>12}"
                  f"{'busbw_gbps':>12}", flush=True)

        def measure(kind: str, plan: GroupPlan, pg: Any, size: int) -> tuple[int, float, bool]:
            """(bytes moved as nccl-tests counts them, this rank's us per call or 0, emulated)."""
            n = plan.n
            count = size // element
            if kind in ("all_gather", "reduce_scatter", "all_to_all"):
                count -= count % n
            if count <= 0:
                return 0, 0.0, False
            if rank not in plan.ranks:
                return count * element, 0.0, False
            me = plan.ranks.index(rank)
            emulated = [False]

            def call() -> None:
                if kind == "all_reduce":
                    emulated[0] = col.all_reduce(inp[:count], pg)
                elif kind == "all_gather":
                    emulated[0] = col.all_gather(out[:count], inp[:count // n], pg, n)
                elif kind == "reduce_scatter":
                    emulated[0] = col.reduce_scatter(out[:count // n], inp[:count], pg, n, me)
                elif kind == "all_to_all":
                    emulated[0] = col.all_to_all(out[:count], inp[:count], pg, list(plan.ranks), me)
                elif kind == "broadcast":
                    emulated[0] = col.broadcast(inp[:count], plan.ranks[0], pg)
                else:  # send_recv: the first member sends, the second receives
                    peer = plan.ranks[1 - me]
                    emulated[0] = col.p2p([P2P(me == 0, inp[:count] if me == 0 else out[:count], peer)], pg)

            for _ in range(args.warmup):
                call()
            col.barrier(pg)
            timer.start()
            for _ in range(args.iters):
                call()
            elapsed_ms = timer.stop()
            return count * element, elapsed_ms * 1000.0 / args.iters, emulated[0]

        for kind in kinds:
            plans = list(zip(pairs, pair_handles)) if kind == "send_recv" else list(zip(groups, handles))
            for plan, pg in plans:
                for size in sizes:
                    nbytes, mine, emulated = measure(kind, plan, pg, size)
                    done[0] = mine
                    dist.all_reduce(done, op=dist.ReduceOp.MAX)  # the slowest member; everyone meets here
                    if nbytes == 0 or rank != 0:
                        continue
                    row = profile_db.network_row(kind, plan.n, plan.ranks_per_node, nbytes, float(done[0]),
                                                 iters=args.iters, dtype=args.dtype, backend=backend,
                                                 emulated=emulated)
                    rows[kind].append(row)
                    print(f"  {kind:<15}{plan.n:>6}{plan.ranks_per_node:>6}{nbytes:>14}{row['time_us']:>13.2f}"
                          f"{row['algbw_gbps']:>12.4f}{row['busbw_gbps']:>12.4f}", flush=True)
        if rank == 0:
            with database_lock(args.output, PROG):
                guard_files(outputs)
                written = [profile_db.write_network(args.output, args.network_device, kind, rows[kind])
                           for kind in kinds if rows[kind]]
                written.append(profile_db.write_meta(folder, {
                    "network_device": args.network_device, "backend": backend, "device": _device_label(device),
                    "world_size": world, "ranks_per_node": per_node, "nodes": world // per_node, "dtype": args.dtype,
                    "torch": torch.__version__.split("+")[0], "warmup": args.warmup, "iters": args.iters,
                    "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "host": platform.node(),
                    "timing": "nccl-tests' rule: iters calls back to back after warmup, the slowest member's mean per call",
                    "command": " ".join(sys.argv),
                }))
            print(f"{PROG}: {sum(len(r) for r in rows.values())} points in {time.monotonic() - start:.1f} s; wrote "
                  f"{', '.join(written)}", flush=True)
        dist.barrier()
    except (RuntimeError, TimeoutError, ConnectionError) as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"{PROG}: error: rank {rank}: {text}", file=sys.stderr, flush=True)
        os._exit(1)
    dist.destroy_process_group()
    return 0


def _device_label(device: Any) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.machine()})"

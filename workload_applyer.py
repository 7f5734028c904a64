"""WorkloadApplyer: replay a workload's collectives over torch.distributed and measure them.

    torchrun --nproc_per_node 8 aicb.py --frame Megatron --model_name gpt_13B --tensor_model_parallel_size 8 ...
    torchrun --nproc_per_node 8 aicb.py --frame collective_test --test_comm all_reduce --begin_size 1M --end_size 1G

Each rank generates its own pipeline stage's workload (or loads ``--workload``), the process groups
come from the layout's RankGenerator, and every item runs with the torch.distributed call that
matches it (``replay/ops.py``; gloo's gaps emulated and marked).  Buffers are allocated once and
sliced.  Times: CUDA events on a GPU, the monotonic clock on CPU (``replay/timer.py``); bandwidths per
docs/formats.md section 1 (``utils/units.py``, GB/s = 10^9 B/s, nccl-tests' bus factors).  Rank 0 prints a
line per operation (a line per message size in a sweep), shows progress bars on a terminal and plain
progress lines off one (``replay/progress.py``) and writes the log and detail CSVs row by row (``log_analyzer/log.py``); at
the end every rank's times are gathered and the detail CSV is rewritten with each operation's
slowest rank.  A watchdog (``replay/watchdog.py``) bounds the start by ``--join_timeout`` and every
operation by ``--timeout``, and turns a dead peer, an interrupt or a killed launcher into one message
per rank, never a silent hang (a rank stopped when its launcher died too: ``replay/sentinel.py``).  Rank 0's
outputs are checked before anything starts (not an input, not a symbolic link; an earlier run's file that an
AICB-style name replaces is named on stderr), and ``--check`` refuses a CPU replay that cannot fit the host's
memory (``replay/memory.py``).

Under a launcher a user error every rank meets alike is reported by each node's local rank 0 only
(:class:`replay.env.SharedError`); ``--check`` runs the checks once, before any process starts
(:func:`check_main`; the AICB scripts do so before they start torchrun).

Differences from AICB's applyer: broadcast and reduce use the item's root translated to a global
rank (AICB broadcasts from group rank 0 and passes the group rank to reduce as if it were global),
p2p goes to the item's peer and Megatron's batched calls are batched, all-to-all moves ``msg_size``
bytes per rank, element counts follow the dtype, and warm-up iterations are not logged.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from log_analyzer.log import DetailWriter, LogWriter, detail_path, write_detail
from replay.env import (
    ReplayOptions,
    SharedError,
    bind_to_parent,
    first_line,
    launch_env,
    log_names,
    log_path,
    measure_aiob,
    memory_line,
    needs_shared_aiob,
    options_from,
    prepare_outputs,
    rank_workload,
    reports_errors,
    resolve_backend,
)
from replay.plan import ALIGN, Plan, Resolved, Step, describe, plan_workload
from replay.progress import Progress
from utils.config import JobConfig
from utils.errors import ConfigError, FormatError, UserError
from utils.units import algbw, busbw, format_size
from utils.workload import CommGroup, CommType, Workload

__all__ = ["ReplayFault", "ReplayOptions", "ReplayResult", "WorkloadApplyer", "check_main", "options_from",
           "replay_main", "resolve_backend"]

PROG = "aicb.py"
_TORCH_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16", "half": "float16",
                 "float32": "float32", "fp32": "float32", "float": "float32", "float8": "uint8", "fp8": "uint8",
                 "uint8": "uint8"}


class ReplayFault(Exception):
    """An operation failed or a peer vanished: the run ends on this rank with one message (exit 1)."""


@dataclass
class _Row:
    """One logged operation on this rank (``key`` names the same operation on every rank)."""

    row: int
    iteration: int
    index: int
    elapsed_ms: float
    key: tuple | None
    emulated: bool = False
    batch: int | None = None


@dataclass
class ReplayResult:
    """What a rank measured: logged rows and each block's wall time in ms (block 0 is init)."""

    rows: list[_Row] = field(default_factory=list)
    block_ms: list[float] = field(default_factory=list)


class WorkloadApplyer:
    """Replays one rank's workload.

    Construction plans the replay (checks every item against the layout; no torch needed, so a bad
    workload fails before any process starts talking); :meth:`setup` then needs
    ``torch.distributed`` initialised.  ``log`` and ``detail`` (rank 0) receive every logged
    operation as it completes; ``watchdog`` (optional) is told what runs so that it can bound it and
    name it; ``progress`` shows the phases.
    """

    def __init__(self, workload: Workload, job: JobConfig, options: ReplayOptions, rank: int,
                 log: LogWriter | None = None, watchdog: Any = None, source: str = "workload",
                 print_fn=print, detail: DetailWriter | None = None, progress: Progress | None = None) -> None:
        self.workload = workload
        self.job = job
        self.options = options
        self.rank = rank
        self.device: Any = None
        self.log = log
        self.detail = detail
        self.watchdog = watchdog
        self.print = print_fn
        self.progress = progress or Progress(False)
        self.generator = job.parallel.rank_generator()
        # the groups from the job's layout, as the generator wrote the workload (expert groups from its expert layout)
        self.layout = job.parallel
        self.plan: Plan = plan_workload(workload, self.layout, rank, options.dtype, source)
        self._check_rows(job, source)
        if options.iterations is not None and len(self.plan.blocks) < 2:
            raise ConfigError(f"--epoch_num {options.iterations}: {source} holds no iteration after its init block "
                              "(no epoch_end marker ends one) to repeat; drop --epoch_num")
        self._seq: Counter = Counter()
        self._batches = 0
        self._gemm: dict[tuple, tuple[Any, Any, bool]] = {}
        self._unrun_compute: set[int] = set()
        self._console: list[str] = []

    # ---- setup ----------------------------------------------------------------------------------

    def setup(self, device: Any, kinds: set | None = None) -> None:
        """On ``device`` (a torch.device): create the process groups (``kinds``: the union over all
        ranks, collectively agreed), warm each with a one-element all-reduce (communicators exist
        before anything is timed), and allocate the buffers.  ``options.backend`` must be resolved
        (nccl or gloo)."""
        import torch

        from replay.groups import ProcessGroups, group_count
        from replay.ops import Collectives
        from replay.timer import OpTimer

        self.device = device
        self._watch("creating the process groups")
        kinds = kinds if kinds is not None else self.plan.kinds
        self.progress.start("process groups", group_count(self.layout, kinds), unit="group")
        self.groups = ProcessGroups(self.layout, self.rank, kinds, self.options.timeout_s, self.progress.step)
        self.progress.close()
        cuda = self.device.type == "cuda"
        self.ops = Collectives(self.options.backend, self.options.emulate, self.device.index if cuda else None)
        one = torch.zeros(1, device=self.device)
        for handle in self.groups.handles():
            self._watch(f"warming the {handle.kind.value} of ranks {handle.ranks[:8]}")
            self.ops.all_reduce(one, handle.pg)
        # zeros, not garbage: reducing NaNs or denormals is slower on CPUs than reducing zeros
        self.main = torch.zeros(max(self.plan.main_bytes, 1), dtype=torch.uint8, device=self.device)
        self.aux = torch.zeros(max(self.plan.aux_bytes, 1), dtype=torch.uint8, device=self.device)
        self.timer = OpTimer(self.device)
        self._prepare_compute()
        self._idle()

    def _prepare_compute(self) -> None:
        import torch

        mode = self.options.compute_mode
        gemm = mode == "gemm" or (mode == "auto" and self.device.type == "cuda")
        dtype = getattr(torch, _TORCH_DTYPES.get(self.options.dtype.lower(), "float32"))
        if self.device.type == "cpu":
            dtype = torch.float32  # half-precision matmuls are slow or missing on CPUs
        for item in {id(i): i for i in self.workload.items if i.is_computation}.values():
            shapes = item.shapes
            if mode == "auto" and item.time_ns is not None:
                continue  # auto sleeps a recorded time
            if not gemm or shapes is None or len(shapes) != 2 or shapes in self._gemm:
                continue
            a, b = shapes
            if len(a) < 2 or len(b) < 2:
                continue
            if a[-1] == b[-2]:
                transpose = False
            elif a[-1] == b[-1]:
                transpose = True  # attention scores: q @ k^T, both recorded as (.., seq, head_dim)
            else:
                continue  # not a matmul (embedding lookup, ...)
            self._gemm[shapes] = (torch.randn(a, dtype=dtype, device=self.device),
                                  torch.randn(b, dtype=dtype, device=self.device), transpose)

    # ---- running --------------------------------------------------------------------------------

    def run(self) -> ReplayResult:
        """Init (logged as iteration 0), ``warmup`` unlogged runs of the first iteration, then every
        iteration of the workload, logged as 1, 2, ..."""
        result = ReplayResult()
        blocks = self.plan.blocks
        progress = self.progress
        progress.start("init", len(blocks[0]))
        self._run_block(blocks[0], 0, result)
        if len(blocks) > 1 and self.options.warmup:
            progress.start("warm-up", self.options.warmup * len(blocks[1]))
            for number in range(self.options.warmup):
                progress.note(f"{number + 1}/{self.options.warmup}")
                self._run_block(blocks[1], -1, result)
        measured = self.measured_blocks()
        progress.start("sizes" if self.options.sweep else "iterations", sum(len(b) for b in measured))
        for number, block in enumerate(measured, start=1):
            progress.note(f"{number}/{len(measured)}")
            self._run_block(block, number, result)
        progress.close()
        self._idle()
        return result

    def _check_rows(self, job: JobConfig, source: str) -> None:
        """Hold the rows ``--epoch_num`` makes a workload file's cycled iterations log to ``--max_items``, as a
        generated workload's items are: ``--epoch_num 1e11`` built a list of 1e11 iterations (a MemoryError) and
        would log without end.  Raises :class:`ConfigError`."""
        count, blocks = self.options.iterations, self.plan.blocks[1:]
        if count is None or not blocks:
            return
        from workload_generator.limits import check_items, limit_of

        sizes = [sum(len(step.indexes) for step in block) + 1 for block in blocks]  # + its epoch_end row
        rows = sum(len(step.indexes) for step in self.plan.blocks[0]) + (count // len(blocks)) * sum(sizes) \
            + sum(sizes[: count % len(blocks)])
        check_items(rows, limit_of(job), f"--epoch_num {count} over {source}'s {len(blocks)} iteration(s): the "
                    "replay's log", "--epoch_num")

    def measured_blocks(self) -> list[list[Step]]:
        """The blocks logged as iterations 1, 2, ...: the workload's after init, or ``options.iterations`` of
        them, cycled (``--epoch_num`` with a ``--workload`` file)."""
        blocks = self.plan.blocks[1:]
        count = self.options.iterations
        if count is None or not blocks:
            return blocks
        return [blocks[i % len(blocks)] for i in range(count)]

    def iterations_note(self) -> str:
        """How ``--epoch_num`` changed the iterations (empty when it did not)."""
        count, held = self.options.iterations, len(self.plan.blocks) - 1
        if count is None:
            return ""
        if count == held:
            return f"; --epoch_num {count}: the file's {held} iteration{'s' if held != 1 else ''}"
        return (f"; --epoch_num {count}: {count} iteration{'s' if count != 1 else ''} from the file's {held}"
                f"{', cycled' if count > held else ' (the first ones)'}")

    def _run_block(self, steps: list[Step], iteration: int, result: ReplayResult) -> None:
        step_done = self.progress.step
        first_row = len(result.rows)
        start = time.perf_counter_ns()
        for step in steps:
            self._watch((iteration, step.indexes[0]), bounded=step.kind != "compute")
            try:
                if step.kind == "compute":
                    done = self._compute(step.indexes[0])
                elif step.kind == "p2p":
                    done = self._p2p(step.indexes)
                else:
                    done = [self._collective(step.indexes[0])]
            except (RuntimeError, ValueError, TimeoutError, ConnectionError) as exc:
                raise ReplayFault(f"{self.describe((iteration, step.indexes[0]))} failed: {first_line(exc)}") from None
            self._idle()
            if iteration >= 0:
                for index, elapsed_ms, key, emulated, batch in done:
                    self._record(result, iteration, index, elapsed_ms, key, emulated, batch)
            step_done()
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)
        elapsed_ms = (time.perf_counter_ns() - start) / 1e6
        if iteration < 0:
            return
        result.block_ms.append(elapsed_ms)
        if self.log is not None:
            if self.options.sweep and iteration >= 1:
                self._size_line(result.rows[first_row:])
            row = self.log.rows
            result.rows.append(_Row(row, iteration, -1, elapsed_ms, None))
            self.log.write_epoch_end(elapsed_ms)
            if self.detail is not None:
                self.detail.write_epoch_end(row, iteration, elapsed_ms)
            if self.options.verbose:
                name = "init" if iteration == 0 else f"iteration {iteration}"
                self._console.append(f"[RANK {self.rank}] -------- {name} | time (ms): {elapsed_ms:.3f} --------")
        self.flush_console()

    def _size_line(self, rows: list[_Row]) -> None:
        """A sweep's console line for one message size: rank 0's mean time and its bandwidths."""
        timed = [r for r in rows if r.index >= 0 and not self.workload.items[r.index].is_computation]
        if not timed:
            return
        item = self.workload.items[timed[0].index]
        mean_s = sum(r.elapsed_ms for r in timed) / len(timed) / 1e3
        size = item.comm_group_size or self.plan.of(item).size
        alg, bus = algbw(item.msg_size, mean_s), busbw(item.comm_type, item.msg_size, mean_s, size)
        self._console.append(f"[RANK {self.rank}] {item.comm_type.value} {item.msg_size} B ({format_size(item.msg_size)}) "
                             f"x {len(timed)} over {size} ranks: {mean_s * 1e6:.2f} us mean, algbw {alg:.3f} GB/s, "
                             f"busbw {bus:.3f} GB/s")

    def flush_console(self) -> None:
        """Print the operation lines gathered since the last call.  They are printed per iteration,
        not per operation: a write to a (possibly slow) terminal between two operations would delay
        rank 0 and make it everybody's straggler.  The log and detail CSVs are still written row by row."""
        lines, self._console = self._console, []
        if lines:
            self.progress.write(self.print, "\n".join(lines))

    def _record(self, result: ReplayResult, iteration: int, index: int, elapsed_ms: float, key: tuple | None,
                emulated: bool, batch: int | None) -> None:
        item = self.workload.items[index]
        row = self.log.rows if self.log is not None else len(result.rows)
        result.rows.append(_Row(row, iteration, index, elapsed_ms, key, emulated, batch))
        if self.log is None:
            return
        detail = self.detail
        if item.is_computation:
            self.log.write(item, elapsed_ms)
            if detail is not None:
                detail.write(row, iteration, index, item, elapsed_ms, emulated=emulated, batch=batch)
            if self.options.verbose:
                self._console.append(f"[RANK {self.rank}] #{index} comp op: {item.stage} | time (ms): {elapsed_ms:.3f}")
            return
        r = self.plan.of(item)
        size = item.comm_group_size or r.size
        alg, bus = algbw(item.msg_size, elapsed_ms / 1e3), busbw(item.comm_type, item.msg_size, elapsed_ms / 1e3, size)
        self.log.write(item, elapsed_ms, alg, bus)
        if detail is not None:
            detail.write(row, iteration, index, item, elapsed_ms, alg, bus, emulated, batch, r.group.value, size,
                         r.peer if r.peer is not None else r.root)
        if self.options.verbose:
            tag = " | emulated" if emulated else ""
            self._console.append(
                f"[RANK {self.rank}] #{index} comm op: {item.comm_type} | comm group: {item.comm_group} ({size}) | "
                f"time (ms): {elapsed_ms:.3f} | msg size: {format_size(item.msg_size)} | algbw (GB/s): {alg:.3f} | "
                f"busbw (GB/s): {bus:.3f}{tag}")

    def _view(self, buffer: Any, nbytes: int, element: str, offset: int = 0) -> Any:
        import torch

        return buffer[offset:offset + nbytes].view(getattr(torch, _TORCH_DTYPES.get(element, "uint8")))

    def _key(self, r: Resolved) -> tuple:
        name = (r.group.value, r.group_index)
        seq = self._seq[name]
        self._seq[name] = seq + 1
        return (*name, seq)

    def _collective(self, index: int) -> tuple:
        item = self.workload.items[index]
        r = self.plan.of(item)
        pg = self.groups[r.group].pg
        ctype = item.comm_type
        ops, timer = self.ops, self.timer
        if ctype in (CommType.all_gather, CommType.reduce_scatter, CommType.all_to_all):
            whole = self._view(self.main, r.nbytes, r.element)
            part = self._view(self.aux, r.nbytes if ctype is CommType.all_to_all else r.nbytes // r.size, r.element)
        else:
            whole = self._view(self.main, r.nbytes, r.element)
        timer.start()
        if ctype is CommType.all_reduce:
            emulated = ops.all_reduce(whole, pg)
        elif ctype is CommType.all_gather:
            emulated = ops.all_gather(whole, part, pg, r.size)
        elif ctype is CommType.reduce_scatter:
            emulated = ops.reduce_scatter(part, whole, pg, r.size, r.me)
        elif ctype is CommType.all_to_all:
            emulated = ops.all_to_all(part, whole, pg, r.ranks, r.me)
        elif ctype is CommType.broadcast:
            emulated = ops.broadcast(whole, r.root, pg)
        elif ctype is CommType.reduce:
            emulated = ops.reduce(whole, r.root, pg)
        elif ctype is CommType.barrier:
            emulated = ops.barrier(pg)
        else:
            raise ConfigError(f"item {index}: {ctype} cannot be replayed")
        elapsed_ms = timer.stop()
        return index, elapsed_ms, self._key(r), emulated, None

    def _p2p(self, indexes: tuple[int, ...]) -> list[tuple]:
        from replay.ops import P2P

        ops, keys, offset = [], [], 0
        resolved = [self.plan.of(self.workload.items[i]) for i in indexes]
        for r in resolved:
            send = r.item.comm_type is CommType.isend
            if send:
                tensor = self._view(self.main, r.nbytes, r.element)
            else:
                tensor = self._view(self.aux, r.nbytes, r.element, offset)
                offset += -(-r.nbytes // ALIGN) * ALIGN  # the plan sized aux with these aligned slices
            ops.append(P2P(send, tensor, r.peer))
            link = (self.rank, r.peer) if send else (r.peer, self.rank)
            seq = self._seq[("p2p", *link)]
            self._seq[("p2p", *link)] = seq + 1
            keys.append(("p2p", *link, seq))
        pg = self.groups[resolved[0].group].pg
        self.timer.start()
        emulated = self.ops.p2p(ops, pg)
        elapsed_ms = self.timer.stop()
        self._batches += 1
        return [(i, elapsed_ms, key, emulated, self._batches) for i, key in zip(indexes, keys)]

    def _compute(self, index: int) -> list[tuple]:
        from replay.timer import precise_sleep

        item = self.workload.items[index]
        mode = self.options.compute_mode
        gemm = self._gemm.get(item.shapes) if item.shapes is not None else None
        timer = self.timer
        if mode in ("sleep", "auto") and item.time_ns is not None:
            timer.start()
            precise_sleep(item.time_ns)
        elif mode in ("gemm", "auto") and gemm is not None:
            a, b, transpose = gemm
            timer.start()
            _ = (a @ b.transpose(-1, -2)) if transpose else (a @ b)
        else:
            if mode != "skip":
                self._unrun_compute.add(id(item))
            return []
        return [(index, timer.stop(), None, False, None)]

    # ---- the watchdog ---------------------------------------------------------------------------

    def _watch(self, what: Any, bounded: bool = True) -> None:
        if self.watchdog is not None:
            self.watchdog.watch(what, bounded)

    def _idle(self) -> None:
        if self.watchdog is not None:
            self.watchdog.idle()

    def describe(self, what: Any) -> str:
        """``(iteration, item index)`` -> ``operation 57 of iteration 1 (all_gather, tp_group ...)``."""
        if not isinstance(what, tuple):
            return str(what)
        iteration, index = what
        item = self.workload.items[index]
        resolved = self.plan.resolved.get(id(item))
        when = "init" if iteration == 0 else ("a warm-up iteration" if iteration < 0 else f"iteration {iteration}")
        return f"operation {index} of {when} ({describe(item, resolved)})"

    # ---- after the run --------------------------------------------------------------------------

    def gather(self, result: ReplayResult) -> tuple[dict[tuple, list[tuple[int, float]]], list[list[float]]] | None:
        """Every rank's time of each operation rank 0 logged, and every rank's block times; rank 0
        gets ``({key: [(rank, ms), ...]}, [block_ms of rank r, ...])``, the others None."""
        import torch.distributed as dist

        self._watch("gathering every rank's times")
        keys = [[row.key for row in result.rows if row.key is not None] if self.rank == 0 else None]
        dist.broadcast_object_list(keys, src=0)
        wanted = set(keys[0])
        mine = [(row.key, row.elapsed_ms) for row in result.rows if row.key in wanted]
        gathered: list[Any] | None = [None] * dist.get_world_size() if self.rank == 0 else None
        dist.gather_object((mine, result.block_ms), gathered, dst=0)
        self._idle()
        if gathered is None:
            return None
        times: dict[tuple, list[tuple[int, float]]] = {}
        for rank, (pairs, _) in enumerate(gathered):
            for key, ms in pairs:
                times.setdefault(key, []).append((rank, ms))
        return times, [blocks for _, blocks in gathered]

    def detail_rows(self, result: ReplayResult, times: dict, blocks: list[list[float]]) -> list[dict[str, Any]]:
        """The detail CSV's rows (rank 0), one per log row."""
        out = []
        block_number = 0
        for row in result.rows:
            if row.index < 0:  # epoch_end
                per_rank = [(r, b[block_number]) for r, b in enumerate(blocks) if block_number < len(b)]
                slow_rank, slow_ms = max(per_rank, key=lambda p: p[1]) if per_rank else (None, None)
                out.append({"row": row.row, "iteration": row.iteration, "comm_type": "epoch_end",
                            "elapsed_ms": row.elapsed_ms, "max_elapsed_ms": slow_ms, "slowest_rank": slow_rank,
                            "ranks_timed": len(per_rank)})
                block_number += 1
                continue
            item = self.workload.items[row.index]
            entry: dict[str, Any] = {"row": row.row, "iteration": row.iteration, "item_index": row.index,
                                     "comm_type": item.comm_type.value, "stage": item.stage,
                                     "elapsed_ms": row.elapsed_ms, "emulated": row.emulated, "batch": row.batch}
            if not item.is_computation:
                r = self.plan.of(item)
                n = item.comm_group_size or r.size
                seconds = row.elapsed_ms / 1e3
                per_rank = times.get(row.key, [(self.rank, row.elapsed_ms)])
                slow_rank, slow_ms = max(per_rank, key=lambda p: p[1])
                # the shortest time is the rank that arrived last: the others waited for it
                last_rank, last_ms = min(per_rank, key=lambda p: p[1])
                entry.update(comm_group=r.group.value, comm_group_size=n, msg_size=item.msg_size,
                             min_elapsed_ms=last_ms, last_arrival_rank=last_rank,
                             algbw_gbps=_finite(algbw(item.msg_size, seconds)),
                             busbw_gbps=_finite(busbw(item.comm_type, item.msg_size, seconds, n)),
                             max_elapsed_ms=slow_ms, slowest_rank=slow_rank, ranks_timed=len(per_rank),
                             slowest_busbw_gbps=_finite(busbw(item.comm_type, item.msg_size, slow_ms / 1e3, n)),
                             peer_rank=r.peer if r.peer is not None else r.root)
            out.append(entry)
        return out

    def gemm_bytes(self) -> int:
        """Host bytes of the matmul operands :meth:`setup` would allocate on a CPU (``--compute_mode gemm``)."""
        if self.options.compute_mode != "gemm":
            return 0
        from replay.memory import gemm_operand_bytes

        return gemm_operand_bytes(i.shapes for i in self.workload.items if i.is_computation)

    def compute_notice(self) -> str | None:
        """A note on computation items that were not run (no time to sleep, no matmul shapes)."""
        if not self._unrun_compute:
            return None
        count = len(self._unrun_compute)
        return (f"computation items not run: {count} distinct (--compute_mode {self.options.compute_mode}: no recorded "
                "time to sleep, or shapes that are not a matmul); they are not in the log")


def _finite(value: float) -> float | None:
    return value if value == value and value not in (float("inf"), float("-inf")) else None


def _agree(error: str | None) -> None:
    """Every rank learns whether any rank failed to prepare; all raise the first rank's message."""
    import torch.distributed as dist

    errors: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(errors, error)
    for rank, message in enumerate(errors):
        if message is not None:
            raise SharedError(message if rank == dist.get_rank() else f"rank {rank}: {message}")


def _shared(make: Any, rank: int) -> Any:
    """``make()`` on rank 0, its result broadcast to every rank; a user error there is everyone's."""
    import torch.distributed as dist

    box: list[Any] = [None, None]
    if rank == 0:
        try:
            box[0] = make()
        except UserError as exc:
            box[1] = str(exc)
    dist.broadcast_object_list(box, src=0)
    if box[1] is not None:
        raise SharedError(box[1] if rank == 0 else f"rank 0: {box[1]}")
    return box[0]


def _host_memory_error(applyer: WorkloadApplyer, world: int, frame: str) -> str | None:
    """A CPU run's own host-memory check, before any rank allocates its buffers: without it only ``--check`` sized
    them, and ``torchrun aicb.py`` run directly (the sweep's default --end_size is 8 GiB) met an allocator error or
    the OOM killer.  Every rank's buffer and matmul bytes are gathered; the first rank of each host compares its
    host's sum with ``MemAvailable`` (read now: the ranks have started, so torch itself is already counted) and
    returns the refusal, else None.  Collective: every rank calls it."""
    import socket

    import torch.distributed as dist

    from mocked_model.aiob.host_memory import available_memory
    from replay.memory import MESSAGES_SMALLER, check_host_memory
    from utils.units import format_size

    host = socket.gethostname()
    mine = (host, applyer.plan.main_bytes + applyer.plan.aux_bytes, applyer.gemm_bytes())
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, mine)
    here = [entry for entry in everyone if entry[0] == host]
    if everyone.index(here[0]) != dist.get_rank():
        return None   # another rank of this host speaks for it
    smaller = ("a smaller --end_size makes the largest message smaller" if frame == "collective_test"
               else MESSAGES_SMALLER)
    largest = max(buffers for _, buffers, _ in here)
    terms = [(f"the replay buffers of {len(here)} rank(s) on this host (up to {format_size(largest)} each)",
              sum(buffers for _, buffers, _ in here), smaller),
             (f"the matmul operands of --compute_mode gemm in {len(here)} rank(s)", sum(g for _, _, g in here),
              "--compute_mode sleep replays recorded times without them")]
    try:
        check_host_memory(terms, available_memory(), 1)
    except UserError as exc:
        return str(exc)
    return None


def _on_cpu(options: ReplayOptions) -> bool:
    """Whether the replay's buffers (and AIOB's tensors) would live in host memory: gloo, or auto without CUDA."""
    if options.backend == "nccl":
        return False
    from workload_generator.compute_times import cuda_available

    return options.backend == "gloo" or not cuda_available()


def _check_host_memory(job: JobConfig, per_stage: list[tuple[int, int]], world: int, aiob: bool) -> None:
    """``--check``'s host-memory check of a CPU replay (:mod:`replay.memory`): one line when it cannot fit."""
    from mocked_model.aiob.host_memory import aiob_peak, available_memory
    from mocked_model.compute import known_gpu
    from replay.memory import MESSAGES_SMALLER, check_host_memory, host_terms
    from workload_generator.compute_times import cuda_available

    aiob_bytes, aiob_what = 0, ""
    # AIOB times on the CPU only without a GPU and without a --gpu_type the compute model prices instead
    if aiob and not cuda_available() and not known_gpu(job.training.gpu_type):
        peak = aiob_peak(job)
        aiob_bytes, aiob_what = peak.bytes, peak.describe()
    # a sweep has no layout or sequence to change: its largest message is --end_size
    smaller = ("a smaller --end_size makes the largest message smaller" if job.training.frame == "collective_test"
               else MESSAGES_SMALLER)
    check_host_memory(host_terms(per_stage, world, job.parallel.pp, aiob_bytes, aiob_what, smaller),
                      available_memory(), world)


def check_main(job: JobConfig, values: dict[str, Any]) -> int:
    """``aicb.py --check``: what every rank checks before it talks (the flags, the launch, the
    workload of each pipeline stage's first rank and, with a ``{rank}`` template, that every rank's file
    is there, the backend),
    done once; nothing starts and nothing is written.  Raises :class:`UserError`; prints one line when all is well."""
    rank, world, _ = launch_env(job, check=True)
    options = options_from(job, values)
    if options.backend == "nccl":
        import torch

        resolve_backend(options.backend, torch.cuda.is_available())
    base, workload_path = log_names(job, values)
    prepare_outputs(base, workload_path, values, PROG, warn=False)   # a log that is a symbolic link: refused now
    generator = job.parallel.rank_generator()
    stages = sorted({generator.coordinates(r)["pp"]: r for r in range(world - 1, -1, -1)}.items())
    items = 0
    cpu = _on_cpu(options)
    per_stage: list[tuple[int, int]] = []
    aiob = needs_shared_aiob(job, values)
    for _, first in stages:
        if aiob:
            # rank 0 measures the compute times at the start, but the messages (and so the replay buffers this
            # checks against host memory) do not depend on them: plan each stage's workload untimed
            from workload_generator.entry import build_workload

            timed = replace(job, training=replace(job.training, computation_enable=True))
            workload, source = build_workload(timed, pp_rank=generator.coordinates(first)["pp"]), "AIOB's workload"
        else:
            workload, source = rank_workload(job, values, first)
        checked = WorkloadApplyer(workload, job, options, first, source=source)
        items += len(workload)
        if cpu:
            per_stage.append((checked.plan.main_bytes + checked.plan.aux_bytes, checked.gemm_bytes()))
    what = f"{items} items in {len(stages)} pipeline stage(s) planned{checked.iterations_note()}"
    template = values.get("workload") or ""
    if "{rank}" in template:
        # a file per rank: each stage's first rank's says nothing of the others' being there.  Opened, not planned
        # (planning a thousand ranks' files would take minutes here, while the ranks each plan their own at once)
        firsts = {first for _, first in stages}
        for other in (r for r in range(world) if r not in firsts):
            stage = generator.coordinates(other)["pp"]
            path = template.replace("{pp_rank}", str(stage)).replace("{rank}", str(other))
            try:
                with open(path, "rb") as handle:
                    handle.read(1)
            except OSError as exc:
                raise FormatError(path, f"cannot read: {exc.strerror}") from None
        what += f"; the files of all {world} ranks found"
    if aiob:
        what = f"compute times measured by rank 0 at the start (AIOB); {what}"
    if cpu:
        _check_host_memory(job, per_stage, world, aiob)
    if reports_errors():
        print(f"{PROG}: check passed: {world} ranks, {what}; the log would be {log_path(base, values)}", flush=True)
    return 0


def replay_main(job: JobConfig, values: dict[str, Any]) -> int:
    """``aicb.py`` without ``--workload_only``: replay this rank's workload and report.

    User errors raise :class:`UserError` on every rank (exit 2, nothing written; one every rank
    meets alike is a :class:`SharedError`, which under a launcher only local rank 0 reports); a failed
    operation, a vanished peer, a timeout, an interrupt or a killed launcher ends every rank with one
    line naming the operation (exit 1, or 128 + the signal), the log and the detail CSV keeping every
    row that completed.
    """
    if values.get("check"):
        return check_main(job, values)
    parent = bind_to_parent()  # before launch_env, which gives a lone process a launcher's variables
    try:
        rank, world, local_rank = launch_env(job)
        options = options_from(job, values)
    except UserError as exc:
        raise SharedError(str(exc)) from None
    # Plan before torch starts: a bad workload fails in a moment; with more than one rank every rank
    # must learn of any rank's error (below), or the others would wait for it until the timeout.
    error: str | None = None
    log_file = ""   # rank 0's log, checked with its other outputs before anything starts
    applyer: WorkloadApplyer | None = None
    log: LogWriter | None = None
    detail: DetailWriter | None = None
    aiob = needs_shared_aiob(job, values)   # measured below, on rank 0's device, once torch is up
    prefix = f"{PROG}: error: rank {rank}: "
    from replay.watchdog import Watchdog

    def describe(what: Any) -> str:
        return applyer.describe(what) if applyer is not None else str(what)

    def on_fatal() -> str | None:
        if applyer is not None:
            applyer.progress.close()
            applyer.flush_console()
        sys.stdout.flush()
        if detail is not None:
            detail.flush()
        if log is None:
            return None
        log.flush()
        return f"; the log keeps the {log.rows} rows that completed: {log.path}"

    join = (options.join_timeout_s, "--join_timeout")
    # started now, so that a killed launcher or an interrupt ends this rank during the start too
    watchdog = Watchdog(options.timeout_s, prefix, describe, on_fatal, parent=parent).start()
    try:
        watchdog.watch("preparing this rank's workload", bounded=False)  # local work: the join bounds the wait for it
        try:
            if not aiob:
                workload, source = rank_workload(job, values, rank)
                applyer = WorkloadApplyer(workload, job, options, rank, source=source)
            base, workload_path = log_names(job, values)
            if rank == 0:
                log_file = prepare_outputs(base, workload_path, values, PROG)
        except UserError as exc:
            if world == 1:
                raise
            error = str(exc)
        import torch
        import torch.distributed as dist

        try:
            options = replace(options, backend=resolve_backend(options.backend, torch.cuda.is_available()))
        except UserError as exc:
            raise SharedError(str(exc)) from None
        if applyer is not None:
            applyer.options = options
        if options.backend == "nccl":
            os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")  # a failed peer aborts instead of hanging
            torch.cuda.set_device(local_rank % torch.cuda.device_count())
            device = torch.device("cuda", torch.cuda.current_device())
        else:
            device = torch.device("cpu")
        # the join waits for the slowest rank's start: --join_timeout, not --timeout, bounds it (and the
        # default group, which only carries the ranks' agreements; operations run on their own groups)
        watchdog.watch(f"joining the {world}-rank process group", limit=join)
    except BaseException:
        watchdog.stop()
        raise
    try:
        dist.init_process_group(options.backend, timeout=timedelta(seconds=options.join_timeout_s), rank=rank,
                                world_size=world)
    except (RuntimeError, ValueError, TimeoutError) as exc:
        sys.stderr.write(f"{prefix}could not join the {world}-rank process group within --join_timeout "
                         f"{options.join_timeout_s:g} s: {first_line(exc)}\n")
        sys.stderr.flush()
        os._exit(1)
    try:
        watchdog.watch("agreeing that every rank is ready")
        _agree(error)
        if aiob:
            watchdog.watch("measuring the compute times on rank 0 (AIOB; it must end within --join_timeout)",
                           limit=join)
            compute = _shared(lambda: measure_aiob(job, values), rank)
            try:
                workload, source = rank_workload(job, values, rank, compute)
                applyer = WorkloadApplyer(workload, job, options, rank, source=source)
            except UserError as exc:
                error = str(exc)
            watchdog.watch("agreeing that every rank is ready")
            _agree(error)
        applyer.watchdog = watchdog
        applyer.progress = Progress.for_rank(rank)
        if device.type == "cpu":
            watchdog.watch("checking the host memory of the replay buffers")
            _agree(_host_memory_error(applyer, world, job.training.frame))
        watchdog.watch("agreeing on the process groups")
        kinds_all: list[Any] = [None] * world
        dist.all_gather_object(kinds_all, sorted(k.value for k in applyer.plan.kinds))
        kinds = {CommGroup(k) for ks in kinds_all for k in ks}
        applyer.setup(device, kinds)
        if rank == 0:
            if workload_path:
                workload.dump(workload_path)
            log = applyer.log = LogWriter(log_file)
            detail = applyer.detail = DetailWriter(detail_path(log.path))
            print(f"[RANK 0] replaying {source}: {len(workload)} items on {world} ranks over {options.backend} "
                  f"({device}){applyer.iterations_note()}; log: {log.path}", flush=True)
            memory = memory_line(job, values)
            if memory:
                print(f"[RANK 0] {memory}", flush=True)
        result = applyer.run()
        gathered = applyer.gather(result)
        if rank == 0:
            times, blocks = gathered
            detail.close()
            write_detail(detail.path, applyer.detail_rows(result, times, blocks))
            log.close()
            from log_analyzer.log import report_text

            print(report_text(log.path, sweep=job.training.frame == "collective_test"), flush=True)
            if values.get("enable_visual"):
                from visualize.generate import write_visual

                print(f"visual output: {write_visual(log.path, output_dir=values.get('output_dir'))}", flush=True)
            notice = applyer.compute_notice()
            if notice:
                print(f"\nnote: {notice}", flush=True)
        watchdog.watch("finishing", bounded=True)
        dist.barrier()
    except (ReplayFault, RuntimeError, TimeoutError, ConnectionError) as fault:
        watchdog.end_if_launcher_gone()  # a peer that ended with its launcher closed the connection: say why
        # ReplayFault names the operation; a failure outside one (group setup, the final gather) is
        # named by what the watchdog was told was running
        text = str(fault) if isinstance(fault, ReplayFault) else f"{describe(watchdog.current)} failed: {first_line(fault)}"
        note = on_fatal()
        sys.stderr.write(f"{prefix}{text}{note or ''}\n")  # one write: see replay/watchdog.py
        sys.stderr.flush()
        os._exit(1)  # not sys.exit: tearing down a broken process group can hang
    except UserError:
        watchdog.stop()
        dist.destroy_process_group()
        raise
    watchdog.stop()
    dist.destroy_process_group()
    return 0

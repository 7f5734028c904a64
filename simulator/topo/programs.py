"""Stage programs: the one internal form ``--model topo`` plays (docs/sim_model.md, "Time of one iteration").

A :class:`StageScript` is what one pipeline stage runs in one iteration: the steps of Megatron's
schedule for that stage (:func:`workload_generator.schedules.pipeline_schedule`: forward and
backward of one micro-batch on one model chunk, and p2p calls with their sizes), a
:class:`Program` for every forward and backward step, and the step program that follows the last
backward.  A program is a sequence of :class:`Op`:

- ``COMPUTE``: a kernel on the compute stream (its time comes from the compute-time hook);
- ``COMM``: a collective on the critical path (TP/EP collectives, the loss all-reduce, ...);
- ``ASYNC``: a collective the workload marks overlappable (``meta["overlappable"]``, or every TP
  collective with ``tp_comm_overlap``): it runs on a communication stream beside the compute and
  the step waits for it at its end; with ``wait_next`` (``meta["overlap"] == "next"``: Megatron's
  asynchronous TP collectives of a linear layer's backward) the compute stream waits for it right
  after the next compute op, which it slows by the SMs NCCL occupies meanwhile (context parallelism's ring
  exchanges, an isend and an irecv item in a CP group, are one such op on a stream of their own, carried by the
  send: each overlaps its round's attention);
- ``GRAD``: a gradient bucket's reduction, issued on the gradient-sync stream when backward reaches
  the point where the bucket is complete (Megatron's ``--overlap_grad_reduce``);
- ``GRAD_WAIT``: ``finish_grad_sync``: the step program waits for the gradient-sync stream;
- ``SYNC``: a collective whose group spans pipeline stages (the tied-embedding all-reduce, the
  gradient-norm all-reduce): every stage of the group must arrive before it starts.

Two builders make scripts: :func:`scripts_from_simai` (a SimAI workload file: one rank's records,
all stages alike as SimAI assumes) and :func:`scripts_from_workloads` (our per-stage Megatron
workloads, unbalanced stages included).  Both give the same structures to the one engine
(:mod:`simulator.topo.engine`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from simulator.repeat import find_blocks, repeat_segments
from utils.errors import ConfigError, FormatError
from workload_generator.schedules import Step, pipeline_schedule
from workload_generator.simai_tokens import classify

_LAYER_IN_NAME = re.compile(r"(layers\.\d+)(?![\d])")

COMPUTE, COMM, ASYNC, GRAD, GRAD_WAIT, SYNC = range(6)
KIND_NAMES = ("compute", "comm", "async", "grad", "grad_wait", "sync")

GROUP_CATEGORY = {
    "tp_group": "TP", "ep_tp_group": "TP", "etp_group": "TP", "ep_group": "EP", "dp_group": "DP", "ep_dp_group": "DP_EP",
    "pp_group": "PP", "embedding_group": "other", "mp_group": "other", "all_nodes": "other",
    "cp_group": "CP", "cp_a2a_group": "CP", "cp_p2p_group": "CP", "tp_cp_group": "TP", "dp_cp_group": "DP",
}
"""Which exposed-comm term a group's time is booked to (``other``: step synchronisation across stages)."""
CROSS_STAGE_GROUPS = frozenset({"pp_group", "mp_group", "embedding_group", "all_nodes"})
"""Groups whose members sit in several pipeline stages."""
SIMAI_GROUPS = {"TP": "tp_group", "EP": "ep_group", "DP": "dp_group", "DP_EP": "ep_dp_group"}
"""SimAI token groups (docs/simai_analytical.md) -> our CommGroup values."""


@dataclass(slots=True)
class Op:
    """One operation of a program.  ``compute_ns`` for COMPUTE; ``comm_type`` (CommType value),
    ``group`` (CommGroup value) and ``size`` (bytes) for collectives; ``layer`` the per-layer
    table's key; ``phase`` ``fwd``/``ig``/``wg`` (SimAI columns) or ``fwd``/``bwd``/``step``;
    ``record`` the SimAI record index (-1 otherwise); ``scale`` multiplies the time."""

    kind: int
    name: str
    layer: str
    phase: str
    compute_ns: float = 0.0
    comm_type: str = ""
    group: str = ""
    size: int = 0
    record: int = -1
    scale: float = 1.0
    wait_next: bool = False
    chunk: int = -1
    need: str = ""
    """An overlapped parameter all-gather (``--overlap_param_gather``): the layer key of the first forward ops of
    model chunk ``chunk`` that wait for it (:mod:`simulator.topo.param_gather`)."""
    deepep: tuple = ()
    """DeepEP's fused dispatch or combine (:mod:`simulator.topo.moe_comm`): (``dispatch``/``combine``, tokens, bytes per
    token, experts, top-k, imbalance) of the busiest rank; empty for every other op."""
    host_us: float = 0.0
    """CPU microseconds to issue the op (:mod:`mocked_model.compute.host`; 0: no host model, or inside a graph)."""
    host_sync: int = 0
    """Its host-device synchronisation (``mocked_model.compute.host.SYNC_*``; 0: none)."""
    graph: str = ""
    """The CUDA graph that captures it (consecutive ops of one graph share one replay); empty: issued eagerly."""

    @property
    def category(self) -> str:
        return "compute" if self.kind == COMPUTE else GROUP_CATEGORY.get(self.group, "other")


@dataclass
class Program:
    """The ops of one forward (``F``) or backward (``B``) step, or of the step after the schedule;
    ``work`` its model FLOPs (recomputation excluded), ``hw_work`` every computation's (recomputation included)."""

    kind: str
    ops: list[Op] = field(default_factory=list)
    work: float = 0.0
    hw_work: float = 0.0


@dataclass
class StageScript:
    """One stage's iteration: schedule steps, the program of each F/B step (``None`` for P2P
    steps), the p2p sizes in bytes of each P2P step's operations, and the step program."""

    stage: int
    steps: list[Step]
    programs: list[Program | None]
    p2p_sizes: list[tuple[int, ...] | None]
    step_program: Program
    flops: float | None = None
    hw_flops: float | None = None
    layer_names: dict[str, str] | None = None
    """For a stage that runs another stage's programs (same workload up to layer numbering): that
    stage's layer keys -> this stage's (keys not listed are the same); None for a stage's own programs."""
    record_shift: list[int] | None = None
    """SimAI files: per step, what to add to its ops' record numbers (micro-batch blocks alike record
    for record share the first one's programs); None when every op carries its own record."""

    def layer(self, key: str) -> str:
        """This stage's name of a layer key of its programs."""
        return key if self.layer_names is None else self.layer_names.get(key, key)

    def rename(self, name: str) -> str:
        """An op name with this stage's layer numbers (``forward.layers.3.mlp`` -> ``forward.layers.11.mlp``)."""
        if self.layer_names is None or "layers." not in name:
            return name
        names = self.layer_names
        return _LAYER_IN_NAME.sub(lambda m: names.get(m.group(1), m.group(1)), name)


@dataclass
class Scripts:
    """All stages' scripts and what the builder learnt: ``source`` (``simai`` or ``workload``),
    the layout (tp, pp, dp, ep, ga, chunks, world) and warnings."""

    stages: list[StageScript]
    source: str
    layout: dict[str, int]
    warnings: list[str] = field(default_factory=list)
    insert: int = 0
    """Steady 1F1B cycles the schedules leave out for the engine to insert (a job's middle micro-batches)."""


# ---- SimAI workload files --------------------------------------------------------------------------



def _step_program(overlapped: bool, deferred: list[Op]) -> Program:
    """The step: wait for the overlapped gradient buckets (when any), then the reductions that were
    not overlapped (``finish_grad_sync``)."""
    step = Program("STEP")
    if overlapped:
        step.ops.append(Op(GRAD_WAIT, "finish_grad_sync", "grad_sync", "step"))
    step.ops.extend(deferred)
    return step


@lru_cache(maxsize=4096)
def _classify(token: str, column: str) -> tuple[str | None, str]:
    """:func:`classify`, remembered: a file spells a few tokens, and 10^6 records ask 3 x 10^6 times."""
    return classify(token, column)


def _simai_comm(token: str, column: str, size: int) -> tuple[str, str] | None:
    comm_type, group = _classify(token, column)
    if comm_type is None or size <= 0:
        return None
    if group not in SIMAI_GROUPS:
        return None
    return comm_type, SIMAI_GROUPS[group]


def scripts_from_simai(workload, gpus: int, overlap_grad_reduce: bool) -> Scripts:
    """Scripts of every stage from a SimAI workload file (docs/formats.md section 2).

    Records inside the ``ga`` micro-batch blocks (:func:`find_blocks`) make the forward (fwd compute,
    fwd comm, in file order) and backward (ig compute, ig comm, wg compute, wg comm, in reverse
    order) of their micro-batch, as SimAI's system layer plays them.  A wg comm in the DP or DP_EP
    group is a gradient bucket ready after its wg compute (or, without overlap, reduced blocking at
    the step).  Records outside the blocks (AICB's gradient reduce-scatter and all-gather, optimizer,
    loss) run once in the step program, in file order, every column blocking.  When the records do
    not repeat ``ga`` times, every micro-batch runs the whole file at 1/ga of its times (a warning
    says so).  Every stage runs the same records (SimAI's assumption); p2p sends carry ``pp_comm``.
    Blocks alike record for record share one program pair; a block no other micro-batch runs is a
    :class:`BlockProgram` pair, which holds no ops (a file of 10^6 records that all differ holds none).
    """
    header = workload.header
    path = workload.path
    if not header.is_transformer:
        raise FormatError(path, f"the topo model runs HYBRID_TRANSFORMER and HYBRID_TRANSFORMER_FWD_IN_BCKWD "
                          f"workloads, not {header.policy}", line=1, field="policy")
    tp, pp, ga = workload.require("tp", "pp", "ga")
    ep = header.ep or 1
    if gpus % (tp * pp):
        raise ConfigError(f"-g {gpus} GPUs is not a multiple of tp*pp = {tp}*{pp} = {tp * pp} from {path}, so the "
                          "DP size g/(tp*pp) is not an integer")
    dp = gpus // (tp * pp)
    if dp % ep:
        raise ConfigError(f"ep {ep} from {path} does not divide the DP size {dp} (= {gpus} GPUs / (tp {tp} * pp {pp}))")
    pp_comm = header.pp_comm or 0
    warnings: list[str] = []
    if pp > 1 and not pp_comm:
        warnings.append(f"{path} gives no pp_comm with pp {pp}: pipeline sends cost 0")
    records = workload.records
    names = record_names(records)
    blocks = find_blocks(names, ga)
    scale = 1.0
    if blocks is None:
        warnings.append(f"{path}: the records do not repeat ga = {ga} times (no micro-batch blocks found); every "
                        f"micro-batch runs the whole file at 1/{ga} of its times")
        block_ranges = [range(len(records))] * ga
        outside: list[int] = []
        scale = 1.0 / ga
    else:
        first, length = blocks
        block_ranges = [range(first + b * length, first + (b + 1) * length) for b in range(ga)]
        outside = [*range(first), *range(first + ga * length, len(records))]
    # identical micro-batch blocks (record for record) share one program pair; the ops carry the first
    # block's record numbers, and each step the shift to its own block's (record_shift)
    template = list(range(ga))
    if blocks is None:
        template = [0] * ga
    else:
        for start, _length, times in repeat_segments(records, ga, names):
            b = (start - blocks[0]) // blocks[1] if start >= blocks[0] and _length == blocks[1] else -1
            if 0 <= b < ga:
                template[b:b + times] = [b] * times
    shift = [(b - template[b]) * (blocks[1] if blocks is not None else 0) for b in range(ga)]
    unknown: set[str] = set()
    deferred: list[Op] = []
    forwards: list[Program] = []
    backwards: list[Program] = []
    any_grad = False
    uses = Counter(template)
    recent = _Recent()
    for b, rng in enumerate(block_ranges):
        if uses[b] == 1:  # a block no other micro-batch runs: its ops are rebuilt from the records when asked for
            fwd_ops = _forward_ops(records, rng, scale, unknown)
            bwd_ops, grads = _backward_ops(records, rng, scale, overlap_grad_reduce, unknown, deferred)
            any_grad = any_grad or grads
            forwards.append(BlockProgram("F", records, rng, scale, overlap_grad_reduce, fwd_ops, recent))
            backwards.append(BlockProgram("B", records, rng, scale, overlap_grad_reduce, bwd_ops, recent))
            continue
        if template[b] != b:
            forwards.append(forwards[template[b]])
            backwards.append(backwards[template[b]])
            if not overlap_grad_reduce:  # every micro-batch's gradient reductions still run at the step
                for i in reversed(rng):
                    comm = _simai_comm(records[i].wg_comm, "wg", records[i].wg_size_bytes)
                    if comm is not None and comm[1] in ("dp_group", "ep_dp_group"):
                        r = records[i]
                        deferred.append(Op(COMM, f"{r.name} {comm[0]}", r.name, "wg", 0.0, comm[0], comm[1],
                                           r.wg_size_bytes, i, scale))
            continue
        bwd_ops, grads = _backward_ops(records, rng, scale, overlap_grad_reduce, unknown, deferred)
        any_grad = any_grad or grads
        forwards.append(Program("F", _forward_ops(records, rng, scale, unknown)))
        backwards.append(Program("B", bwd_ops))
    step = _step_program(any_grad, deferred)
    for i in outside:
        r = records[i]
        for column, compute_ns in (("fwd", r.fwd_compute_ns), ("ig", r.ig_compute_ns), ("wg", r.wg_compute_ns)):
            if compute_ns:
                step.ops.append(Op(COMPUTE, r.name, r.name, column, compute_ns, record=i))
            _append_comm(step.ops, r, i, column, 1.0, unknown)
    for token in sorted(unknown):
        warnings.append(f"{path}: comm token {token!r} names no group the topo model knows; it costs 0")
    stages = []
    p2p_sizes: dict[int, tuple[int, ...]] = {}  # one tuple per number of batched operations (10^4 p2p steps per stage)
    for s in range(pp):
        steps = pipeline_schedule(pp, s, ga, 1)
        programs: list[Program | None] = []
        sizes: list[tuple[int, ...] | None] = []
        shifts = [shift[st.microbatch] if st.kind != "P2P" else 0 for st in steps]
        for st in steps:
            if st.kind == "F":
                programs.append(forwards[st.microbatch])
                sizes.append(None)
            elif st.kind == "B":
                programs.append(backwards[st.microbatch])
                sizes.append(None)
            else:
                programs.append(None)
                n = len(st.ops)
                sizes.append(p2p_sizes.get(n) or p2p_sizes.setdefault(n, (pp_comm,) * n))
        stages.append(StageScript(s, steps, programs, sizes, step, record_shift=shifts if any(shift) else None))
    layout = dict(tp=tp, pp=pp, dp=dp, ep=ep, ga=ga, chunks=1, world=gpus, vpp=header.vpp or 0, pp_comm=pp_comm)
    return Scripts(stages, "simai", layout, warnings)


def _note_unknown(token: str, column: str, unknown: set[str]) -> None:
    comm_type, group = _classify(token, column)
    if comm_type is not None and group not in SIMAI_GROUPS:
        unknown.add(token)


def _append_comm(ops: list[Op], record, index: int, column: str, scale: float, unknown: set[str]) -> None:
    token = getattr(record, f"{column}_comm")
    size = getattr(record, f"{column}_size_bytes")
    comm = _simai_comm(token, column, size)
    if comm is None:
        _note_unknown(token, column, unknown)
        return
    ops.append(Op(COMM, f"{record.name} {comm[0]}", record.name, column, 0.0, comm[0], comm[1], size, index, scale))


def record_names(records: Sequence) -> list[str]:
    """Every record's name in order (a :class:`workload_generator.simai_records.RecordColumns` gives them without
    building its records)."""
    names = getattr(records, "names", None)
    return names() if names is not None else [r.name for r in records]


def _forward_ops(records: Sequence, rng: range, scale: float, unknown: set[str]) -> list[Op]:
    """A micro-batch block's forward: each record's fwd compute, then its fwd comm, in file order."""
    ops: list[Op] = []
    append = ops.append
    for i in rng:
        r = records[i]
        name = r.name
        if r.fwd_compute_ns:
            append(Op(COMPUTE, name, name, "fwd", r.fwd_compute_ns, record=i, scale=scale))
        comm = _simai_comm(r.fwd_comm, "fwd", r.fwd_size_bytes)
        if comm is None:
            _note_unknown(r.fwd_comm, "fwd", unknown)
        else:
            append(Op(COMM, f"{name} {comm[0]}", name, "fwd", 0.0, comm[0], comm[1], r.fwd_size_bytes, i, scale))
    return ops


def _backward_ops(records: Sequence, rng: range, scale: float, overlap_grad_reduce: bool, unknown: set[str],
                  deferred: list[Op]) -> tuple[list[Op], bool]:
    """A micro-batch block's backward in reverse file order (ig compute, ig comm, wg compute, wg comm) and whether it
    has a gradient bucket; without ``overlap_grad_reduce`` the DP and DP_EP wg comms go to ``deferred`` (the step)."""
    ops: list[Op] = []
    append = ops.append
    grads = False
    for i in reversed(rng):
        r = records[i]
        name = r.name
        if r.ig_compute_ns:
            append(Op(COMPUTE, name, name, "ig", r.ig_compute_ns, record=i, scale=scale))
        comm = _simai_comm(r.ig_comm, "ig", r.ig_size_bytes)
        if comm is None:
            _note_unknown(r.ig_comm, "ig", unknown)
        else:
            append(Op(COMM, f"{name} {comm[0]}", name, "ig", 0.0, comm[0], comm[1], r.ig_size_bytes, i, scale))
        if r.wg_compute_ns:
            append(Op(COMPUTE, name, name, "wg", r.wg_compute_ns, record=i, scale=scale))
        comm = _simai_comm(r.wg_comm, "wg", r.wg_size_bytes)
        if comm is None:
            _note_unknown(r.wg_comm, "wg", unknown)
        elif comm[1] in ("dp_group", "ep_dp_group"):
            op = Op(GRAD, f"{name} {comm[0]}", name, "wg", 0.0, comm[0], comm[1], r.wg_size_bytes, i, scale)
            if overlap_grad_reduce:
                append(op)
                grads = True
            else:
                op.kind = COMM
                deferred.append(op)
        else:
            append(Op(COMM, f"{name} {comm[0]}", name, "wg", 0.0, comm[0], comm[1], r.wg_size_bytes, i, scale))
    return ops, grads


class _Recent:
    """The block program whose ops were built last, and those ops (shared by the block programs of one file)."""

    __slots__ = ("program", "ops")

    def __init__(self) -> None:
        self.program: BlockProgram | None = None
        self.ops: list[Op] = []


class BlockProgram(Program):
    """The forward (``F``) or backward (``B``) program of a SimAI micro-batch block that one micro-batch runs: it
    holds no ops (a file of 10^6 records that all differ would hold 10^6 records' ops, about 1 KB each), and
    :attr:`ops` builds them from the records when asked (the same list while no other block program of the file
    was asked since; new objects, equal to the last, after).  Do not change them.  ``groups``: the groups its
    collectives run in."""

    def __init__(self, kind: str, records: Sequence, rng: range, scale: float, overlap_grad_reduce: bool,
                 ops: Sequence[Op] = (), recent: _Recent | None = None) -> None:
        self.kind = kind
        self.work = 0.0
        self.hw_work = 0.0
        self._records = records
        self._range = rng
        self._scale = scale
        self._overlap = overlap_grad_reduce
        self._recent = recent if recent is not None else _Recent()
        self.groups = frozenset(op.group for op in ops if op.group)

    @property
    def span(self) -> range:
        """The indices of its block's records."""
        return self._range

    @property  # type: ignore[override]
    def ops(self) -> list[Op]:  # type: ignore[override]
        recent = self._recent
        if recent.program is self:
            return recent.ops
        if self.kind == "F":
            ops = _forward_ops(self._records, self._range, self._scale, set())
        else:
            ops = _backward_ops(self._records, self._range, self._scale, self._overlap, set(), [])[0]
        recent.program, recent.ops = self, ops
        return ops


# ---- our Megatron workloads ------------------------------------------------------------------------

ComputeHook = Callable[[Any], "float | None"]
"""``compute_time_ns(item) -> ns or None``: the compute time of a computation item (None: unknown)."""


def item_time_ns(item) -> float | None:
    """The default compute-time hook: the item's own ``time_ns`` (AIOB, a compute file, or an estimate
    filled in by the generator); None when the item has none."""
    return item.time_ns


def _layer_key(item) -> str:
    meta = item.meta or {}
    layer = meta.get("layer")
    if layer is not None:
        return f"layers.{layer}"
    if meta.get("sub"):
        return str(meta["sub"])
    if "bucket" in meta or item.stage.endswith("overlap_grad_reduce") or "grad_sync" in item.stage:
        return "grad_sync"
    stage = item.stage
    return stage.split(".", 1)[1] if "." in stage else stage


def _is_p2p(item) -> bool:
    """A pipeline p2p item (a ring exchange of context parallelism is another group's, inside a step)."""
    return item.comm_type.value in ("isend", "irecv") and (item.comm_group is None or item.comm_group._value_ == "pp_group")


def _phase_of(item) -> str:
    stage = item.stage
    if stage.startswith("forward"):
        return "F"
    if stage.startswith(("backward", "recompute")):
        return "B"
    return "S"


@dataclass
class _Counters:
    missing_compute: int = 0
    items: int = 0
    grad_items: int = 0
    finish_items: int = 0


HostHook = Callable[[Any], "tuple[float, int, str]"]
"""``host(item) -> (CPU microseconds to issue it, its synchronisation, its CUDA graph)`` (:mod:`simulator.topo.host_model`)."""


def _item_op(item, phase: str, hook: ComputeHook, counters: _Counters, tp_comm_overlap: bool,
             host: HostHook | None = None) -> Op | None:
    op = _item_op_plain(item, phase, hook, counters, tp_comm_overlap)
    if op is not None and host is not None:
        op.host_us, op.host_sync, op.graph = host(item)
    return op


def _item_op_plain(item, phase: str, hook: ComputeHook, counters: _Counters, tp_comm_overlap: bool) -> Op | None:
    ctype = item.comm_type._value_  # .value, without the enum property's lookup (a hot path)
    layer = _layer_key(item)
    meta = item.meta or {}
    name = item.stage + (f" {meta['name']}" if meta.get("name") else "")
    if ctype == "computation":
        counters.items += 1
        time_ns = hook(item)
        if time_ns is None:
            counters.missing_compute += 1
            time_ns = 0.0
        if phase == "bwd":  # the EndToEnd columns split backward into input and weight gradients
            phase = "wg" if meta.get("op") == "wgrad" else "ig"
        return Op(COMPUTE, name, layer, phase, float(time_ns))
    group = item.comm_group._value_ if item.comm_group is not None else "all_nodes"
    if ctype in ("epoch_end", "barrier", "irecv") or (ctype == "isend" and (item.comm_group is None or group == "pp_group")):
        # pipeline p2p items are the schedule's P2P steps; of a ring exchange (context parallelism's isend + irecv)
        # the send is the op and carries the pair's time, as every rank sends and receives at once (full duplex)
        return None
    op = Op(COMM, f"{ctype} {group} {name}", layer, phase, 0.0, ctype, group, int(item.msg_size or 0))
    if meta.get("deepep"):
        op.deepep = tuple(meta["deepep"])
    if item.stage.startswith("backward.overlap_grad_reduce"):
        op.kind = GRAD
        counters.grad_items += 1
    elif item.stage.endswith("finish_grad_sync"):
        counters.finish_items += 1
    elif phase == "step" and group in CROSS_STAGE_GROUPS:
        op.kind = SYNC
    elif meta.get("overlap") == "param_gather":  # counted in the step, waited for by the next forward
        op.kind = ASYNC
        op.chunk, op.need = int(meta.get("chunk", 0)), str(meta.get("need", ""))
    elif meta.get("overlappable") or (tp_comm_overlap and group in ("tp_group", "ep_tp_group")):
        op.kind = ASYNC
    elif meta.get("overlap") == "next":
        op.kind = ASYNC
        op.wait_next = True
    return op


def _split_iteration(items: list, steps: list[Step], stage: int) -> tuple[list[list], list]:
    """Cut one iteration's items into the schedule's steps (P2P steps consume exactly their batched
    operations; F and B steps the following items of their phase) and the step items after them."""
    out: list[list] = []
    pos, n = 0, len(items)
    for st in steps:
        if st.kind == "P2P":
            chunk = items[pos:pos + len(st.ops)]
            if len(chunk) != len(st.ops) or any(not _is_p2p(i) or i.additional != op for i, op in zip(chunk, st.ops)):
                raise ConfigError(f"the workload of pipeline stage {stage} does not follow Megatron's schedule: "
                                  f"expected p2p {', '.join(st.ops)} ({st.name}) at item {pos}")
            out.append(chunk)
            pos += len(chunk)
            continue
        start = pos
        while pos < n and not _is_p2p(items[pos]) and _phase_of(items[pos]) == st.kind:
            pos += 1
        out.append(items[start:pos])
    rest = items[pos:]
    stray = [i for i in rest if _is_p2p(i) or _phase_of(i) != "S"]
    if stray:
        raise ConfigError(f"the workload of pipeline stage {stage} does not follow Megatron's schedule: "
                          f"{stray[0].comm_type.value} {stray[0].stage!r} after the last scheduled step")
    return out, rest


@dataclass
class _Build:
    """What building the stage scripts learns along the way."""

    hook: ComputeHook
    overlap_grad_reduce: bool | None
    tp_comm_overlap: bool
    host: HostHook | None = None
    counters: _Counters = field(default_factory=_Counters)
    any_grad: bool = False
    any_finish: bool = False


@dataclass
class _Built:
    """One step key's program (or p2p sizes) and what building it found: FLOPs, the gradient reductions
    it moves to the step (without ``--overlap_grad_reduce``) and its counts of items."""

    program: Program | None
    sizes: tuple[int, ...] | None
    work: float
    deferred: list[Op] = field(default_factory=list)
    grad: bool = False
    counters: _Counters = field(default_factory=_Counters)


def _build_step(kind: str, items: list, build: _Build) -> _Built:
    if kind == "P2P":
        return _Built(None, tuple(int(i.msg_size or 0) for i in items), 0.0)
    phase = "fwd" if kind == "F" else "bwd"
    program = Program(kind)
    built = _Built(program, None, 0.0)
    for item in items:
        op = _item_op(item, phase, build.hook, built.counters, build.tp_comm_overlap, build.host)
        if op is None:
            continue
        if op.kind == GRAD and build.overlap_grad_reduce is False:
            op.kind = COMM
            op.phase = "step"
            built.deferred.append(op)
            continue
        built.grad = built.grad or op.kind == GRAD
        program.ops.append(op)
    built.work = program.work = sum(i.flops for i in items if i.flops and i.comm_type._value_ == "computation"
                                    and not i.stage.startswith("recompute"))
    program.hw_work = sum(i.flops for i in items if i.flops and i.comm_type._value_ == "computation")
    return built


def _stage_script(stage: int, steps: list[Step], pieces, rest: list, build: _Build,
                  cache: dict[object, _Built] | None = None) -> StageScript:
    """One stage's script from its schedule and, per step, ``(key, items)`` (``pieces``: an iterator
    in step order; ``key`` identifies steps whose items are the same objects, so that each distinct
    program is built and costed once; ``items`` None for a key built before) and the step items that
    follow the schedule.  ``cache`` (key -> built program) is shared by stages that run the same
    programs; each stage counts what each distinct key it runs holds, as if it had built it."""
    cache = {} if cache is None else cache
    deferred: list[Op] = []
    any_grad = False
    keys = []
    for st, (key, items) in zip(steps, pieces):
        keys.append(key)
        if key not in cache:
            cache[key] = _build_step(st.kind, items, build)
    for key in dict.fromkeys(keys):  # each distinct key once, in order of first use
        hit = cache[key]
        deferred += hit.deferred
        any_grad = any_grad or hit.grad
        c = build.counters
        c.missing_compute += hit.counters.missing_compute
        c.items += hit.counters.items
        c.grad_items += hit.counters.grad_items
        c.finish_items += hit.counters.finish_items
    hits = list(map(cache.__getitem__, keys))
    programs: list[Program | None] = [hit.program for hit in hits]
    sizes: list[tuple[int, ...] | None] = [hit.sizes for hit in hits]
    flops = hw_flops = 0.0
    for hit in hits:
        flops += hit.work
        hw_flops += hit.program.hw_work if hit.program is not None else 0.0
    step = _step_program(any_grad, deferred)
    for item in rest:
        op = _item_op(item, "step", build.hook, build.counters, build.tp_comm_overlap, build.host)
        if op is not None:
            step.ops.append(op)
        if item.flops and item.comm_type.value == "computation":
            flops += item.flops
            hw_flops += item.flops
    build.any_finish = build.any_finish or build.counters.finish_items > 0
    build.any_grad = build.any_grad or any_grad
    return StageScript(stage, steps, programs, sizes, step, flops or None, hw_flops or None)


def _finish(stages: list[StageScript], job, build: _Build) -> Scripts:
    from mocked_model.megatron import chunk_layout

    p = job.parallel
    warnings: list[str] = []
    if build.counters.missing_compute:
        warnings.append(f"{build.counters.missing_compute} computation items have no time (generate with compute times, "
                        "or pass a compute_time_ns hook): they cost 0")
    if build.overlap_grad_reduce and not build.any_grad and build.any_finish:
        warnings.append("--overlap_grad_reduce: the workload was generated without it, so its gradient buckets have no "
                        "ready points; they are reduced after the last backward")
    layout = dict(tp=p.tp, pp=p.pp, dp=p.dp, ep=p.ep, ga=p.ga, chunks=len(chunk_layout(job, 0)), world=p.world_size,
                  order=p.order, etp=p.expert_tp, cp=p.cp, hierarchical_cp=p.hierarchical_cp,
                  embedding_stages=p.embedding_stages)
    return Scripts(stages, "workload", layout, warnings)


def scripts_from_workloads(workloads: Sequence, job, hook: ComputeHook | None = None,
                           overlap_grad_reduce: bool | None = None, tp_comm_overlap: bool = False,
                           host: HostHook | None = None) -> Scripts:
    """Scripts from our per-stage workloads (``megatron_pipeline(job)``: one Workload per stage).

    The first iteration of each workload is cut into the schedule's steps; computation items take
    ``hook(item)`` ns (default: their ``time_ns``; None costs 0, with one warning); bucket reductions
    issued during backward (``backward.overlap_grad_reduce``) become GRAD ops, unless
    ``overlap_grad_reduce`` is False, which moves them to the start of the step program.  ``host``: each item's
    CPU cost, synchronisation and graph (:mod:`simulator.topo.host_model`; None: the host never holds the GPU back).
    """
    from mocked_model.megatron import chunk_layout

    p = job.parallel
    if len(workloads) != p.pp:
        raise ConfigError(f"expected one workload per pipeline stage ({p.pp}), got {len(workloads)}")
    build = _Build(hook or item_time_ns, overlap_grad_reduce, tp_comm_overlap, host)
    stages = []
    for s, workload in enumerate(workloads):
        blocks = workload.iterations()
        if len(blocks) < 2:
            raise ConfigError(f"the workload of pipeline stage {s} holds no iteration (only its init block)")
        steps = pipeline_schedule(p.pp, s, p.ga, len(chunk_layout(job, s)))
        pieces, rest = _split_iteration(blocks[1], steps, s)
        keyed = ((tuple(map(id, piece)), piece) for piece in pieces)
        stages.append(_stage_script(s, steps, keyed, rest, build))
    return _finish(stages, job, build)


def scripts_from_generators(generators: Sequence, job, hook: ComputeHook | None = None,
                            overlap_grad_reduce: bool | None = None, tp_comm_overlap: bool = False,
                            host: HostHook | None = None) -> Scripts:
    """Scripts straight from the per-stage generators (``MegatronWorkload(job, pp_rank=s)``), without
    unrolling their iterations: each distinct step (:meth:`WorkloadGenerator.step_key`) is built once.
    Same programs as :func:`scripts_from_workloads` on the generators' workloads.

    One generator may serve several stages (``generators[s]`` built for another stage with the same
    :meth:`WorkloadGenerator.stage_signature`): stage ``s`` then runs its own schedule on that
    generator's programs (built once for all of them), with its own layer numbers in
    :attr:`StageScript.layer_names`."""
    p = job.parallel
    if len(generators) != p.pp:
        raise ConfigError(f"expected one generator per pipeline stage ({p.pp}), got {len(generators)}")
    build = _Build(hook or item_time_ns, overlap_grad_reduce, tp_comm_overlap, host)
    stages = []
    caches: dict[int, dict] = {}
    rests: dict[int, list] = {}
    built_keys: dict[int, set] = {}
    for s, gen in enumerate(generators):
        own = getattr(gen, "pp_rank", s) == s
        steps = gen.schedule() if own else pipeline_schedule(p.pp, s, p.ga, len(gen.layer_ranges()) or 1)
        rest = rests.get(id(gen))
        if rest is None:
            rest = rests[id(gen)] = []
            gen.step(rest)
        built = built_keys.setdefault(id(gen), set())

        def keyed(gen=gen, steps=steps, built=built):
            step_key = gen.step_key
            for st in steps:
                key = step_key(st)
                if key is None:
                    items = gen.step_items(st)
                    yield tuple(map(id, items)), items
                elif key in built:
                    yield key, None
                else:
                    built.add(key)
                    yield key, gen.step_items(st)

        script = _stage_script(s, steps, keyed(), rest, build, caches.setdefault(id(gen), {}))
        if not own:
            script.layer_names = _renumbering(gen.layer_ranges(), _own_ranges(job, s))
        stages.append(script)
    return _finish(stages, job, build)


def _own_ranges(job, stage: int) -> list[tuple[int, int]]:
    from mocked_model.megatron import chunk_layout

    return [(first, count) for first, count, _, _ in chunk_layout(job, stage)]


def _renumbering(theirs: list[tuple[int, int]], ours: list[tuple[int, int]]) -> dict[str, str]:
    """Layer keys of another stage's chunks -> this stage's, chunk by chunk (``(first layer, count)``
    each; equal counts, as equal stage signatures promise)."""
    out: dict[str, str] = {}
    for (a, count), (b, _) in zip(theirs, ours):
        if a != b:
            out.update({f"layers.{a + k}": f"layers.{b + k}" for k in range(count)})
    return out

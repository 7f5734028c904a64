"""SimAI layer records of a Megatron training workload, derived from the same work items the
replay CSV is made of (one generator path; AICB has two that disagree).

SimAI plays a file's records forward in order (compute, then the blocking fwd collective) and then
backward in reverse (ig compute, blocking ig collective, wg compute, non-blocking wg collective).
Each mocked module becomes as many records as it has collectives in either direction: its forward
collectives fill the fwd column of its records from the first, its backward collectives the ig
column from the last, so that both passes keep the module's own order; computation before a
collective is the compute of its record, computation after a module's last backward collective is
the wg compute.  Records that carry no collective are folded into their neighbours (their forward
compute into the next record, their backward compute into the previous one), which keeps every
time in its place and the file short.

One micro-batch's records repeat ``ga`` times (the record objects of repeated micro-batches are
shared; treat them as read-only).  Gradient synchronisation goes where SimAI runs it:
the step's reductions (DP buckets, expert-DP buckets with ``_DP_EP``, the distributed optimizer's
parameter all-gathers) in the wg column of records placed first in the file, so that they run after
every backward; with ``--overlap_grad_reduce`` each bucket's reduction instead sits in the wg column
of the record whose backward completes the bucket.  The sequence-parallel LayerNorm gradient
all-reduce is a TP collective (ig column).

SimAI's format has no place for broadcasts, the embedding group, the model-parallel group or a DP
collective inside a layer: the get_batch broadcasts, the tied-embedding gradient all-reduce, the
loss report and the gradient-norm all-reduce are left out and listed in ``dropped``.  The all-gather
MoE dispatcher's TP x EP collectives cannot be expressed at all (an error).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from mocked_model.base import MockedModule
from utils.errors import ConfigError
from utils.workload import CommGroup, CommType, WorkItem
from workload_generator.megatron import MegatronWorkload
from workload_generator.simai import SimAIHeader, SimAILayer, SimAIWorkload
from workload_generator.simai_cp import SimAIContextView
from workload_generator.simai_tokens import Column, simai_token

UPDATE_NS = 100
"""AICB's value for the update column (SimAI's analytical mode ignores it)."""
RECORD_NAMES = {"embedding": "embedding_layer", "attention": "attention_layer", "mlp": "mlp_layer",
                "moe": "mlp_moelayer", "output": "output_layer", "loss": "output_layer"}


@dataclass
class _Record:
    name: str
    fwd: list[WorkItem] = field(default_factory=list)
    fwd_comm: WorkItem | None = None
    ig: list[WorkItem] = field(default_factory=list)
    ig_comm: WorkItem | None = None
    wg: list[WorkItem] = field(default_factory=list)
    wg_comm: WorkItem | None = None

    @property
    def has_comm(self) -> bool:
        return self.fwd_comm is not None or self.ig_comm is not None or self.wg_comm is not None

    def copy(self) -> _Record:
        return _Record(self.name, list(self.fwd), self.fwd_comm, list(self.ig), self.ig_comm, list(self.wg), self.wg_comm)


@dataclass
class SimAIDerivation:
    """The derived file and what it could not carry (``dropped``: stage -> count per iteration)."""

    workload: SimAIWorkload
    dropped: Counter


def _expressible(item: WorkItem, column: Column) -> bool:
    if item.comm_group == CommGroup.ep_tp_group:
        raise ConfigError("the all-gather MoE dispatcher communicates in the TP x EP group, which SimAI's workload "
                          "format cannot express; use --moe_token_dispatcher_type alltoall")
    try:
        simai_token(item.comm_type, item.comm_group, column)
    except ValueError:
        return False
    return item.comm_group_size is not None and item.comm_group_size > 1


def _leaves(module: MockedModule) -> list[MockedModule]:
    """Leaf modules in forward order; a fully recomputed layer adds itself after its leaves."""
    if not module.children:
        return [module]
    out = [leaf for child in module.children for leaf in _leaves(child)]
    if getattr(module, "full_recompute", False):
        out.append(module)
    return out


def _record_name(items: list[WorkItem], fallback: str) -> str:
    for item in items:
        if item.meta and item.meta.get("sub") in RECORD_NAMES:
            return RECORD_NAMES[item.meta["sub"]]
    return fallback


class _Builder:
    def __init__(self) -> None:
        self.dropped: Counter = Counter()

    def _comm_ok(self, item: WorkItem, column: Column) -> bool:
        if _expressible(item, column):
            return True
        self.dropped[item.stage] += 1
        return False

    def module_records(self, module: MockedModule, forward: list[WorkItem], backward: list[WorkItem]) -> list[_Record]:
        name = _record_name(forward + backward, "layer")
        fwd: list[tuple[list[WorkItem], WorkItem | None]] = []
        computes: list[WorkItem] = []
        for item in forward:
            if item.is_computation:
                computes.append(item)
            elif self._comm_ok(item, "fwd"):
                fwd.append((computes, item))
                computes = []
        if computes:
            fwd.append((computes, None))
        bwd: list[list] = []   # [ig computes, ig comm, wg computes]
        computes = []
        for item in backward:
            if item.is_computation:
                computes.append(item)
            elif self._comm_ok(item, "ig"):
                bwd.append([computes, item, []])
                computes = []
        if computes:
            if bwd:
                bwd[-1][2].extend(computes)
            else:
                bwd.append([[c for c in computes if (c.meta or {}).get("op") != "wgrad"], None,
                            [c for c in computes if (c.meta or {}).get("op") == "wgrad"]])
        count = max(len(fwd), len(bwd))
        records = [_Record(name) for _ in range(count)]
        for record, (comps, comm) in zip(records, fwd):
            record.fwd, record.fwd_comm = comps, comm
        for record, (ig, comm, wg) in zip(reversed(records), bwd):
            record.ig, record.ig_comm, record.wg = ig, comm, wg
        return records


def _fold(records: list[_Record]) -> list[_Record]:
    """Fold records without collectives into their neighbours (forward compute into the next
    record, backward compute into the previous one), keeping the first and last as they are."""
    out: list[_Record] = []
    pending_fwd: list[WorkItem] = []
    for index, record in enumerate(records):
        if pending_fwd:
            record.fwd = pending_fwd + record.fwd
            pending_fwd = []
        last = index == len(records) - 1
        if not record.has_comm and out and not last:
            pending_fwd = record.fwd
            out[-1].ig = out[-1].ig + record.ig + record.wg
            continue
        out.append(record)
    return out


def _ns(items: list[WorkItem]) -> int:
    """Compute field: the items' total time, AICB's placeholder 1 when none is known, 0 for none."""
    if not items:
        return 0
    known = [i.time_ns for i in items if i.time_ns is not None]
    return round(sum(known)) if known else 1


def _layer(record: _Record, tokens: dict[tuple, str]) -> SimAILayer:
    """The record as SimAI fields; ``tokens`` caches each item's token per column."""

    def column(comm: WorkItem | None, col: Column) -> tuple[str, int]:
        if comm is None:
            return "NONE", 0
        key = (id(comm), col)
        token = tokens.get(key)
        if token is None:
            token = tokens[key] = simai_token(comm.comm_type, comm.comm_group, col)
        return token, comm.msg_size

    fwd_tok, fwd_size = column(record.fwd_comm, "fwd")
    ig_tok, ig_size = column(record.ig_comm, "ig")
    wg_tok, wg_size = column(record.wg_comm, "wg")
    return SimAILayer(record.name, -1, _ns(record.fwd), fwd_tok, fwd_size, _ns(record.ig), ig_tok, ig_size,
                      _ns(record.wg), wg_tok, wg_size, UPDATE_NS)


def derive_simai(gen: MegatronWorkload) -> SimAIDerivation:
    """The SimAI workload of the generator's pipeline rank (``--pp_rank``)."""
    job, builder = gen.job, _Builder()
    p, t = job.parallel, job.training
    cp = SimAIContextView(job)  # context parallelism's groups as SimAI's (workload_generator.simai_cp)
    one_mb: list[_Record] = []
    overlap_at: list[tuple[int, int, list]] = []   # (index of the leaf's first record, chunk, its closing buckets)
    for index, chunk in enumerate(gen.chunks):
        closing = gen.closing_buckets(index) if t.overlap_grad_reduce else {}
        segments = {id(m): items for m, items in chunk.backward_segments()}
        for leaf in _leaves(chunk):
            is_layer = bool(leaf.children)
            forward = [] if is_layer else cp.items(leaf.forward_items())
            backward = cp.items(segments.get(id(leaf), []))
            records = builder.module_records(leaf, forward, backward)
            if not records and any(q.name in closing for q in leaf.params):
                records = [_Record(_record_name(forward + backward, "layer"))]
            if records and not is_layer:
                buckets = [pair for q in leaf.params for pair in closing.get(q.name, ())]
                if buckets:
                    overlap_at.append((len(one_mb), index, buckets))
            one_mb.extend(records)
    # The last micro-batch's backward issues the overlapped bucket reductions; in the file that is the
    # first copy (SimAI plays backward from the end).  Other copies are the same records.
    first = [r.copy() for r in one_mb]
    for position, index, buckets in reversed(overlap_at):
        items = [i for buffer, bucket in buckets for i in cp.items(gen.bucket_collectives(index, buffer, bucket))
                 if builder._comm_ok(i, "wg")]
        if items:
            first[position].wg_comm = items[0]
            first[position:position] = list(reversed([_Record(first[position].name, wg_comm=i) for i in items[1:]]))
    cache: dict[tuple, str] = {}
    first_layers = [_layer(r, cache) for r in _fold(first)]
    other_layers = [_layer(r, cache) for r in _fold(one_mb)] if p.ga > 1 else []
    step_items: list[WorkItem] = []
    gen.step(step_items)
    head: list[_Record] = []
    for item in cp.items(step_items):
        if item.comm_group == CommGroup.tp_group and builder._comm_ok(item, "ig"):
            head.append(_Record("layernorm_grads", ig_comm=item))
        elif item.comm_type is CommType.all_gather and builder._comm_ok(item, "wg"):
            head.append(_Record("param_all_gather", wg_comm=item))
        elif item.comm_type in (CommType.all_reduce, CommType.reduce_scatter) and builder._comm_ok(item, "wg"):
            head.append(_Record("grad_sync", wg_comm=item))
    layers = [_layer(r, cache) for r in reversed(head)] + first_layers + other_layers * (p.ga - 1)
    header = SimAIHeader.transformer(tp=p.tp, ep=cp.ep, pp=p.pp, vpp=sum(c.num_layers for c in gen.chunks), ga=p.ga,
                                     all_gpus=p.world_size, pp_comm=gen.p2p_bytes if p.pp > 1 else 0)
    simai = SimAIWorkload(header=header, records=layers)
    return SimAIDerivation(simai, builder.dropped)

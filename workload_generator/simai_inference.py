"""The SimAI inference workload (docs/formats.md section 8, AICB 2.1) and Vidur's per-layer CSV, derived from
the same work items as the replay CSV (:mod:`workload_generator.inference`).

SimAI file: AICB's header (``HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: T ep: E pp: P
all_gpus: W mode: 1 vpp: 1 ga: 1 checkpoints: 0 checkpoint_initiates: 0 pp_comm: B``; ``mode: 1`` marks
inference) and one record per (layer, record kind) in order, each carrying its items' computation in
the forward column (integer ns; AICB's placeholder of 1 ns without times) and its own collective: the
TP all-reduce (``ALLREDUCE``) of an attention or dense-MLP record, the dispatch or combine
(``ALLTOALL_EP``) of ``moe_route`` / ``moe_expert``.  Backward columns are empty except AICB's 1 ns in
the two MoE records; the update time is AICB's 100.  The embedding's items join the stage's first record
and the final norm, LM head and sampling its last; their collectives (the vocab-parallel embedding's
all-reduce and the logits' all-gather with tp > 1) have no column and are reported as left out, as are
the pipeline sends, which the header's ``pp_comm`` stands for.

Vidur CSV (``vidur-<name>.csv``, tab-separated ``layer_id layer_name comp_time comm_size``): one row per
layer and kind (``attention``, ``mlp``, ``moe``, AICB's ``_extract_layer_type``: a record is attention if
its name holds ``attention``, mlp if ``mlp``, else moe), computation summed in ns; communication the
TP all-reduce for attention and mlp (0 with tp 1), dispatch plus combine for moe.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

from utils.inference_job import InferenceJob
from utils.io import atomic_write
from utils.workload import CommType, WorkItem
from workload_generator.simai import SimAIHeader, SimAILayer, SimAIWorkload

UPDATE_NS = 100
"""AICB's update time of every record."""
MOE_RECORDS = frozenset({"moe_route", "moe_expert"})
"""Records whose backward and dp compute columns AICB sets to its 1 ns placeholder."""
OWN_COMM = {"attention_layer": CommType.all_reduce, "attention_gdn": CommType.all_reduce,
            "dense_mlp": CommType.all_reduce, "moe_route": CommType.all_to_all, "moe_expert": CommType.all_to_all}
"""The collective each record kind carries in its forward column."""
TOKENS = {CommType.all_reduce: "ALLREDUCE", CommType.all_to_all: "ALLTOALL_EP"}
HEADER_ORDER = ("model_parallel_NPU_group", "ep", "pp", "all_gpus", "mode", "vpp", "ga", "checkpoints",
                "checkpoint_initiates", "pp_comm")
"""Header keys in the order AICB 2.1 writes them."""


@dataclass
class Record:
    """Items of one (layer, record kind), in order."""

    layer: int | None
    name: str
    items: list[WorkItem] = field(default_factory=list)


def group_records(items: list[WorkItem]) -> list[Record]:
    """Consecutive items of one (layer, record) form a record; items without a record join the next
    record (the embedding, before the first layer) or the last one (the model's head); p2p items and
    markers are left out."""
    records: list[Record] = []
    pending: list[WorkItem] = []
    for item in items:
        if item.comm_type in (CommType.isend, CommType.irecv, CommType.epoch_end):
            continue
        meta = item.meta or {}
        name = meta.get("record")
        if name is None:
            (records[-1].items if records else pending).append(item)
            continue
        if not records or (records[-1].layer, records[-1].name) != (meta.get("layer"), name):
            records.append(Record(meta.get("layer"), name, pending))
            pending = []
        records[-1].items.append(item)
    return records


def simai_records(items: list[WorkItem], timed: bool) -> tuple[list[SimAILayer], list[int | None], Counter]:
    """The SimAI records of one step's items, the layer of each, and what the format left out
    (``kind (group)`` -> count)."""
    out: list[SimAILayer] = []
    layers: list[int | None] = []
    dropped: Counter = Counter()
    for record in group_records(items):
        ns = sum(i.time_ns or 0.0 for i in record.items if i.is_computation)
        fwd_ns = int(round(ns)) if timed else 1
        token, size = "NONE", 0
        own = OWN_COMM.get(record.name)
        for item in record.items:
            if item.is_computation:
                continue
            if token == "NONE" and item.comm_type is own:
                token, size = TOKENS[own], item.msg_size
            else:
                dropped[f"{item.comm_type.value} ({item.comm_group.value if item.comm_group else '-'})"] += 1
        moe = 1 if record.name in MOE_RECORDS else 0
        out.append(SimAILayer(record.name, -1, fwd_ns, token, size, moe, "NONE", 0, moe, "NONE", 0, UPDATE_NS))
        layers.append(record.layer)
    return out, layers, dropped


MODEL_CONFIG_KEY = "model_config"
"""Header key naming the JSON config a file's model was read from (percent-encoded path), written only when it is
not AICB's default for the model's kind, so that ``python -m simulator -w FILE`` takes that model, not the one the
file name's model name resolves to.  SimAI matches its own keys and ignores this one (as it ignores ``mode``)."""


JOB_NAME_KEY = "aicb_name"
"""Header key holding AICB's name of the file's job (``{model}-world_size{W}-tp{T}-pp{P}-ep{E}-bs{B}-seq{S}-{phase}``,
percent-encoded), written only when the file is saved under a name of the user's own (``-o FILE``, see
:func:`name_job`), so that ``python -m simulator -w FILE`` still knows its phase, batch and context; files under
AICB's names stay byte-identical to AICB's.  SimAI ignores the key as it ignores ``mode``."""


def simai_header(job: InferenceJob) -> SimAIHeader:
    """AICB 2.1's inference header (``pp_comm``: one activation between stages, 0 with pp 1), plus
    :data:`MODEL_CONFIG_KEY` for a model read from a config of its own."""
    from urllib.parse import quote

    extra = {"mode": "1"}
    config = job.model.extra.get("config_path")
    if config:
        extra[MODEL_CONFIG_KEY] = quote(config)
    return SimAIHeader(tp=job.tp, ep=job.ep, pp=job.pp, vpp=1, ga=1, all_gpus=job.world_size, checkpoints=(),
                       checkpoint_initiates=(), pp_comm=job.pp_bytes(), extra=extra, order=HEADER_ORDER)


def name_job(workload: SimAIWorkload, job: InferenceJob, path: str) -> None:
    """Add :data:`JOB_NAME_KEY` to ``workload``'s header when ``path``'s name is not AICB's name of ``job``."""
    from urllib.parse import quote

    stem = os.path.splitext(os.path.basename(path))[0]
    if stem.removeprefix("aicb_infer_") != job.file_stem():
        workload.header.extra[JOB_NAME_KEY] = quote(job.file_stem())


def simai_inference_workload(job: InferenceJob, items: list[WorkItem],
                             timed: bool) -> tuple[SimAIWorkload, list[int | None], Counter]:
    """The SimAI workload of one step's items, the layer of each record, and what was left out."""
    records, layers, dropped = simai_records(items, timed)
    return SimAIWorkload(header=simai_header(job), records=records), layers, dropped


def layer_type(record: str) -> str:
    """AICB's Vidur ``_extract_layer_type``."""
    if "attention" in record:
        return "attention"
    if "mlp" in record:
        return "mlp"
    return "moe"


def vidur_rows(job: InferenceJob, records: list[SimAILayer], layers: list[int | None]) -> list[tuple]:
    """``(layer_id, layer_name, comp_time, comm_size)`` per layer and kind, in first-appearance order."""
    totals: dict[tuple, list[int]] = {}
    for record, layer in zip(records, layers):
        key = (layer, layer_type(record.name))
        entry = totals.setdefault(key, [0, 0])
        entry[0] += record.fwd_compute_ns
        if record.fwd_comm != "NONE":
            entry[1] += record.fwd_size_bytes
    return [(layer, kind, comp, comm) for (layer, kind), (comp, comm) in totals.items()]


def write_vidur(path: str | os.PathLike, rows: list[tuple]) -> None:
    with atomic_write(path) as handle:
        handle.write("layer_id\tlayer_name\tcomp_time\tcomm_size\n")
        handle.write("".join(f"{layer}\t{kind}\t{comp}\t{comm}\n" for layer, kind, comp, comm in rows))


def default_paths(job: InferenceJob, result_dir: str) -> tuple[str, str]:
    """AICB's file names: ``<stem>.txt`` (SimAI) and ``vidur-<stem>.csv`` under ``--result_dir``."""
    stem = job.file_stem()
    return os.path.join(result_dir, stem + ".txt"), os.path.join(result_dir, "vidur-" + stem + ".csv")

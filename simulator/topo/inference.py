"""Inference on a topology (``--model topo``): the prefill latency of a batch (TTFT) or the decode step
time (TPOT), the throughput in tokens/s per GPU, the breakdown (compute, TP, EP, PP) and the memory per
GPU, from an inference job or a SimAI inference workload (``mode: 1``, AICB 2.1's files and ours).

The step runs stage after stage; within a stage every item in order, each collective blocking (the
forward of an inference server: SGLang's and vLLM's TP all-reduce and DeepEP's dispatch and combine sit
on the critical path; SGLang's two-batch overlap is priced by the serving cost model,
:mod:`simulator.serve.cost`).  The dispatch and combine cost NCCL's all-to-all, or with ``a2a="deepep"``
DeepEP's kernels from their published figures (:func:`deepep_a2a_s`).  With the job's ``host`` mode the step
adds its host time (:mod:`mocked_model.inference_host`), and a speculative decode step its draft passes.  Compute times are the
items' (the compute model's estimate for the GPU when the job has none) or the SimAI records'; each
collective is NCCL's cost over the group's placement (:mod:`simulator.topo.collectives`, as for training):
rank ``r`` on GPU ``r``, a stage's ``tp x dp`` ranks consecutive, its TP groups ``tp`` consecutive ranks
and its EP groups ``ep`` consecutive ranks; stage ``s`` sends to stage ``s + 1`` from rank ``s x tp x dp``.

- TTFT (prefill) and TPOT (decode) = the sum of the stages' times and the sends between them;
- throughput = tokens of one step over all replicas / the slowest stage's time (with pp > 1, pp batches
  are in flight at once) / the GPUs: decode ``micro_batch x dp / t / world``, prefill the prompt tokens.

A SimAI file holds one stage: with pp > 1 the other stages are taken to be like it.  Its name, when it
is AICB's (``<model>-world_size..-bs<B>-seq<S>-<phase>.txt``), gives the phase, batch and context (and,
for AICB's model names, the memory); otherwise the result is the step time alone.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from simulator.inference_header import SIMAI_NOTE, is_inference_workload, wants_topo  # noqa: F401 (re-exported)
from simulator.options import TopoOptions
from simulator.topo.moe_comm import by_ep
from utils.errors import ConfigError
from utils.inference_job import InferenceJob
from utils.workload import CommType

CATEGORY = {"tp_group": "TP", "ep_group": "EP", "ep_tp_group": "EP", "pp_group": "PP"}
_AICB_NAME = re.compile(r"(?P<model>.+)-world_size(?P<world>\d+)-tp(?P<tp>\d+)-pp(?P<pp>\d+)-ep(?P<ep>\d+)"
                        r"-bs(?P<bs>\d+)-seq(?P<seq>\d+)-(?P<phase>prefill|decode)$")


@dataclass
class Row:
    """One record (SimAI) or item group (layer, record) of a stage: compute and its collectives."""

    stage: int
    layer: int | None
    record: str
    compute_s: float = 0.0
    comm_s: float = 0.0
    comms: list[tuple[str, str, int, int, float, str]] = field(default_factory=list)
    """(type, group, group size, bytes, seconds, algorithm/protocol) of each collective."""


@dataclass
class InferenceResult:
    """What :func:`simulate_inference` found; times in seconds, memory in bytes."""

    phase: str | None
    model: str
    layout: dict[str, int]
    stage_s: list[dict[str, float]]
    step_s: float
    tokens_per_step: int | None
    world: int
    rows: list[Row]
    memory: Any = None
    fabric: str = ""
    compute_source: str = ""
    warnings: list[str] = field(default_factory=list)

    @property
    def slowest_stage_s(self) -> float:
        return max(s["total"] for s in self.stage_s)

    @property
    def tokens_per_s_per_gpu(self) -> float | None:
        if self.tokens_per_step is None or self.slowest_stage_s <= 0:
            return None
        return self.tokens_per_step / self.slowest_stage_s / self.world

    def breakdown_s(self) -> dict[str, float]:
        """Compute, TP, EP and PP seconds of the step (summed over stages) and the other collectives."""
        out: dict[str, float] = defaultdict(float)
        for stage in self.stage_s:
            for key, value in stage.items():
                if key != "total":
                    out[key] += value
        return dict(out)

    def summary_text(self) -> str:
        what = {"prefill": "TTFT (prefill of the batch)", "decode": "TPOT (decode step)"}.get(self.phase or "", "step time")
        lay = self.layout
        lines = [f"inference, topo model: {self.model} {self.phase or '(phase unknown)'}; tp {lay['tp']} pp {lay['pp']} "
                 f"ep {lay['ep']} dp {lay['dp']}, {self.world} GPUs; {self.fabric}",
                 f"  {what:<32} {self.step_s * 1e3:12.3f} ms"]
        for key, label in (("compute", "compute"), ("TP", "TP collectives"), ("EP", "EP dispatch + combine"),
                           ("PP", "PP sends"), ("host", "host (launches, copies)"), ("other", "other collectives")):
            value = self.breakdown_s().get(key, 0.0)
            if value or key in ("compute", "TP", "EP", "PP"):
                share = value / self.step_s * 100 if self.step_s else 0.0
                lines.append(f"    {label:<30} {value * 1e3:12.3f} ms {share:6.1f}%")
        rate = self.tokens_per_s_per_gpu
        if rate is not None:
            kind = "output tokens" if self.phase == "decode" else "prompt tokens"
            lines.append(f"  {kind + '/s per GPU':<32} {rate:12.1f}   ({self.tokens_per_step} tokens per step)")
        if self.memory is not None:
            lines.append("  " + self.memory.summary())
        lines.append(f"  compute times: {self.compute_source}")
        return "\n".join(lines)

    def summary_csv(self) -> str:
        b = self.breakdown_s()
        rate = self.tokens_per_s_per_gpu
        head = ["model", "phase", "tp", "pp", "ep", "dp", "gpus", "step_us", "compute_us", "tp_us", "ep_us", "pp_us",
                "other_us", "tokens_per_step", "tokens_per_s_per_gpu", "weights_gib", "kv_cache_gib", "activations_gib"]
        mem = self.memory
        gib = 1 << 30
        values = [self.model, self.phase or "", self.layout["tp"], self.layout["pp"], self.layout["ep"], self.layout["dp"],
                  self.world, f"{self.step_s * 1e6:.3f}"] + [f"{b.get(k, 0.0) * 1e6:.3f}" for k in
                                                             ("compute", "TP", "EP", "PP", "other")]
        values += [self.tokens_per_step if self.tokens_per_step is not None else "",
                   f"{rate:.3f}" if rate is not None else ""]
        values += [f"{x / gib:.3f}" for x in (mem.weights_bytes, mem.kv_bytes, mem.activation_bytes)] if mem else ["", "", ""]
        return ",".join(head) + "\n" + ",".join(str(v) for v in values) + "\n"

    def rows_csv(self) -> str:
        lines = ["stage,layer,record,compute_us,comm_us,collectives"]
        for r in self.rows:
            comms = " ".join(f"{t}:{g}:{n}:{size}B:{s * 1e6:.3f}us:{alg}" for t, g, n, size, s, alg in r.comms)
            lines.append(f"{r.stage},{'' if r.layer is None else r.layer},{r.record},{r.compute_s * 1e6:.3f},"
                         f"{r.comm_s * 1e6:.3f},{comms}")
        return "\n".join(lines) + "\n"


DEEPEP_SOURCE = ("deepseek-ai/DeepEP docs/legacy.md (V1, commit dd758ca), 'Performance': H800 with ~160 GB/s NVLink "
                 "and a CX7 400 Gb/s NIC (~50 GB/s) per GPU, 7168 hidden, top-8, FP8 dispatch and BF16 combine")
DEEPEP_NORMAL_NVLINK = {"dispatch": 153.0 / 160.0, "combine": 158.0 / 160.0}
"""Normal kernels, intranode EP 8: 153 / 158 GB/s NVLink bottleneck bandwidth of the ~160 GB/s the H800 reaches: the
share of the GPU's achievable NVLink rate (nominal x the fabric's NVLink efficiency) the kernels move."""
DEEPEP_NORMAL_RDMA_GBPS = {"dispatch": ((16, 43.0), (32, 58.0), (64, 51.0)),
                           "combine": ((16, 43.0), (32, 57.0), (64, 50.0))}
"""Normal kernels, internode: RDMA bottleneck bandwidth (GB/s) per EP size, over a 50 GB/s NIC (NVLink forwarding
makes the logical figure exceed the NIC at EP 32)."""
DEEPEP_LL_GBPS = {"dispatch": ((8, 98.0), (16, 63.0), (32, 48.0), (64, 43.0), (128, 39.0), (256, 39.0)),
                  "combine": ((8, 127.0), (16, 74.0), (32, 53.0), (64, 46.0), (128, 39.0), (256, 40.0))}
"""Low-latency kernels (pure RDMA, 128 tokens per rank): RDMA bandwidth (GB/s) per EP size; e.g. EP 8 dispatch
128 x 8 x 7,392 B (FP8 with its scales) in 77 us = 98 GB/s, combine 128 x 8 x 7,168 x 2 B in 114 us = 127 GB/s."""
DEEPEP_NIC_BPS = 50e9
"""The CX7 400 Gb/s NIC per GPU the figures were measured with: they scale with the fabric's NIC rate per GPU."""


def deepep_a2a_s(op: str, size: float, shape: Any, links: Any, low_latency: bool) -> float:
    """Seconds of DeepEP's ``dispatch`` or ``combine`` of ``size`` bytes per rank (all top-k copies, AICB's bytes)
    over a group of ``shape`` (:class:`simulator.topo.collectives.GroupShape`), from :data:`DEEPEP_SOURCE`'s tables.

    Low-latency kernels (decode; SGLang's ``--deepep-mode auto`` uses them for decode batches): every copy goes over
    RDMA, ``size / (BW_LL(EP) x NIC / 50 GB/s)``.  Normal kernels (prefill): the intra-server copies over NVLink at
    the intranode share of the achievable NVLink rate, the rest over RDMA at the internode figure, both at once:
    ``max(intra / BW_nv, inter / BW_rdma)``.  Either is never faster than NCCL's latency terms for the same exchange
    (the tables hold no small-size figure: they were taken at 128 and 4096 tokens per rank)."""
    from simulator.topo.collectives import collective_cost

    if shape.n <= 1 or size <= 0:
        return 0.0
    floor = collective_cost("all_to_all", 1.0, shape, links).time_s
    nic = shape.nic_Bps * links.nic_efficiency / shape.a2a_congestion
    if low_latency:
        bw = by_ep(DEEPEP_LL_GBPS[op], shape.n) * 1e9 / DEEPEP_NIC_BPS * nic
        return max(size / bw, floor)
    k = min(shape.per_server, shape.n)
    intra, inter = size * (k - 1) / shape.n, size * (shape.n - k) / shape.n
    t = intra / (DEEPEP_NORMAL_NVLINK[op] * shape.nvlink_Bps * links.nvlink_efficiency) if intra else 0.0
    if inter:
        t = max(t, inter / (by_ep(DEEPEP_NORMAL_RDMA_GBPS[op], shape.n) * 1e9 / DEEPEP_NIC_BPS * nic))
    return max(t, floor)


class CollectiveCosts:
    """The cost of a job's collectives on a fabric (each distinct one costed once): NCCL's model
    (:mod:`simulator.topo.collectives`), or DeepEP's for the MoE dispatch and combine (``a2a="deepep"``; low-latency
    kernels in decode, normal ones in prefill)."""

    def __init__(self, fabric: Any, links: Any, stage_ranks: int, tp: int, ep: int, a2a: str = "nccl") -> None:
        if a2a not in ("nccl", "deepep"):
            raise ConfigError(f"--moe_a2a_backend {a2a!r} is not one of nccl, deepep")
        self.fabric, self.links, self.stage_ranks, self.tp, self.ep = fabric, links, stage_ranks, tp, ep
        self.a2a = a2a
        self._cache: dict[tuple, tuple[float, str]] = {}

    def members(self, group: str, stage: int, size: int) -> list[int]:
        first = stage * self.stage_ranks
        return list(range(first, first + size))

    def collective(self, kind: str, group: str, size: int, nbytes: int, stage: int) -> tuple[float, str]:
        from simulator.topo.collectives import collective_cost

        key = (kind, group, size, nbytes, stage)
        hit = self._cache.get(key)
        if hit is None:
            cost = collective_cost(kind, nbytes, self.fabric.group_shape(self.members(group, stage, size)), self.links)
            hit = self._cache[key] = (cost.time_s, f"{cost.algorithm}/{cost.protocol}")
        return hit

    def moe_a2a(self, op: str, nbytes: int, size: int, stage: int, decode: bool) -> tuple[float, str]:
        """The dispatch (``op`` ``dispatch``) or combine of the EP group of ``size`` ranks."""
        if self.a2a == "nccl":
            return self.collective("all_to_all", "ep_group", size, nbytes, stage)
        key = ("deepep", op, size, nbytes, stage, decode)
        hit = self._cache.get(key)
        if hit is None:
            shape = self.fabric.group_shape(self.members("ep_group", stage, size))
            hit = self._cache[key] = (deepep_a2a_s(op, nbytes, shape, self.links, decode),
                                      "deepep/" + ("low_latency" if decode else "normal"))
        return hit

    def item(self, item: Any, stage: int, decode: bool | None = None) -> tuple[float, str]:
        """The cost of one communication item of a step (its phase, or ``decode`` when given, decides DeepEP's
        kernels: low-latency for a decode step, normal otherwise)."""
        if item.comm_type in (CommType.isend, CommType.irecv):
            return self.p2p(item.msg_size, stage) if item.comm_type is CommType.isend else (0.0, "p2p")
        group = item.comm_group.value if item.comm_group else "none"
        op = (item.meta or {}).get("name")
        if item.comm_type is CommType.all_to_all and op in ("dispatch", "combine"):
            low_latency = item.stage.startswith("decode") if decode is None else decode
            return self.moe_a2a(op, item.msg_size, item.comm_group_size or 1, stage, low_latency)
        return self.collective(item.comm_type.value, group, item.comm_group_size or 1, item.msg_size, stage)

    def p2p(self, nbytes: int, stage: int) -> tuple[float, str]:
        from simulator.topo.collectives import p2p_cost

        route = self.fabric.p2p_shape(stage * self.stage_ranks, (stage + 1) * self.stage_ranks)
        cost = p2p_cost(nbytes, route.same_server, route.bottleneck_Bps, route.latency_s, self.links, route.congestion)
        return cost.time_s, "p2p"


_Costs = CollectiveCosts   # the name notebooks and older callers use


def fabric_for(topology: Any, options: TopoOptions, world: int, fabrics: dict | None = None):
    """``(fabric, link model, notes)`` of ``world`` ranks on ``topology`` (a path, a :class:`topo.Topology`, or
    None for the fabric the options derive); ``fabrics`` a cache kept across calls."""
    from simulator.topo.model import build_fabric

    return build_fabric(topology, options, world, fabrics)


_fabric = fabric_for


def _stage_from_items(items: list, stage: int, costs: _Costs) -> tuple[dict[str, float], list[Row]]:
    from workload_generator.simai_inference import group_records

    totals: dict[str, float] = defaultdict(float)
    rows: list[Row] = []
    for item in items:
        if item.comm_type in (CommType.isend, CommType.irecv):
            if item.comm_type is CommType.isend:
                seconds, how = costs.p2p(item.msg_size, stage)
                totals["PP"] += seconds
                rows.append(Row(stage, None, "pp_send", 0.0, seconds, [("isend", "pp_group", 2, item.msg_size, seconds, how)]))
    for record in group_records(items):
        row = Row(stage, record.layer, record.name)
        for item in record.items:
            if item.is_computation:
                row.compute_s += (item.time_ns or 0.0) * 1e-9
                continue
            group = item.comm_group.value if item.comm_group else "none"
            seconds, how = costs.item(item, stage)
            row.comm_s += seconds
            row.comms.append((item.comm_type.value, group, item.comm_group_size or 1, item.msg_size, seconds, how))
            totals[CATEGORY.get(group, "other")] += seconds
        totals["compute"] += row.compute_s
        rows.append(row)
    totals["total"] = sum(v for k, v in totals.items() if k != "total")
    return dict(totals), rows


def _timed_stages(job: InferenceJob, options: TopoOptions, gpu: str | None) -> tuple[list[list], str, list[str]]:
    """Every stage's items with computation times (``options.compute_time_ns``, else the compute model)."""
    from mocked_model.compute import known_gpu
    from mocked_model.inference import stage_items
    from workload_generator.inference import fill_inference_times

    stages = [stage_items(job, s) for s in range(job.pp)]
    if job.decode and job.speculative_tokens:   # the draft's passes run on the last stage, after its step
        from mocked_model.inference import draft_items

        stages[-1] = stages[-1] + [_as_draft(i) for i in draft_items(job)] * job.speculative_tokens
    notes: list[str] = []
    if options.compute_time_ns is not None:
        for items in stages:
            for item in items:
                if item.is_computation:
                    item.time_ns = options.compute_time_ns(item)
        return stages, "options.compute_time_ns", notes
    name = job.gpu_type or gpu
    if not known_gpu(name):
        raise ConfigError("simulating an inference job needs computation times: give --gpu_type (the compute "
                          "model's GPUs: H100, H200, ...) or a topology of a known GPU type")
    timed = replace(job, gpu_type=name)
    source = ""
    for items in stages:
        report = fill_inference_times(items, timed, "model")
        source = report.detail or "model"
        if report.missing:
            notes.append(f"no compute-model law for {', '.join(sorted(report.missing))} (counted as 0)")
    return stages, source, notes


def _as_draft(item: Any) -> Any:
    """A copy of a draft item filed under the record ``mtp_draft`` (its own row in the layer table)."""
    from copy import copy

    out = copy(item)
    out.meta = {**(item.meta or {}), "record": "mtp_draft", "layer": None}
    return out


def simulate_job(job: InferenceJob, topology: Any = None, options: TopoOptions | None = None,
                 a2a: str = "nccl") -> InferenceResult:
    """Simulate one step of ``job`` on ``topology`` (a path, a :class:`topo.Topology`, or None for the
    fabric ``options`` derive); ``a2a``: ``nccl`` or ``deepep`` prices the MoE dispatch and combine."""
    from mocked_model.inference_host import fixed_host_s, step_mode
    from mocked_model.inference_memory import check_fits

    options = options or TopoOptions()
    fabric, links, notes = _fabric(topology, options, job.world_size)
    gpu = job.gpu_type or getattr(fabric, "gpu_type", None) or options.gpu_type
    memory = check_fits(job, gpu if _known(gpu) else None)
    stages, source, more = _timed_stages(job, options, gpu)
    costs = CollectiveCosts(fabric, links, job.stage_ranks, job.tp, job.ep, a2a)
    stage_s, rows = [], []
    for s, items in enumerate(stages):
        totals, stage_rows = _stage_from_items(items, s, costs)
        stage_s.append(totals)
        rows += stage_rows
    host = fixed_host_s(step_mode(job.host, job.decode, job.micro_batch), job.micro_batch)
    if host:   # input copies, the graph's launch, the sampled tokens' copy: in series with the GPU, once per step
        stage_s[-1]["host"] = host
        stage_s[-1]["total"] += host
        rows.append(Row(job.pp - 1, None, "host", host, 0.0))
    step = sum(t["total"] for t in stage_s)
    layout = dict(tp=job.tp, pp=job.pp, ep=job.ep, dp=job.dp)
    return InferenceResult(job.phase, job.name, layout, stage_s, step, job.tokens_per_step, job.world_size, rows,
                           memory, fabric.description, source, notes + more)


def _known(gpu: str | None) -> bool:
    from mocked_model.compute import known_gpu

    return known_gpu(gpu)


def job_from_name(path: str, config: str | None = None,
                  header: Any = None) -> tuple[dict[str, Any] | None, InferenceJob | None, str | None]:
    """AICB's file name's fields (or those of the name our generator's header keeps, ``aicb_name``), and the job they
    describe when the model is one we know (else None and why).
    The model is read from ``config`` (``--inference_config``) when given, else from the config the file's header
    names (``model_config``, written by our generator for a model of its own config), else resolved from the name."""
    from urllib.parse import unquote

    stem = os.path.splitext(os.path.basename(path))[0]
    for prefix in ("aicb_infer_", "vidur-"):
        stem = stem[len(prefix):] if stem.startswith(prefix) else stem
    if header is not None and header.extra.get("aicb_name"):
        # our generator's header names the job: it holds for the records even under a name of the user's own (-o)
        stem = unquote(header.extra["aicb_name"])
    match = _AICB_NAME.fullmatch(stem)
    if not match:
        return None, None, None
    fields = {k: (v if k in ("model", "phase") else int(v)) for k, v in match.groupdict().items()}
    zero = [k for k in ("world", "tp", "pp", "ep", "bs", "seq") if k in fields and fields[k] < 1]
    if zero:  # AICB's name carries the batch and context: 'bs0' would report a step of nothing (issue 28, item 8)
        raise ConfigError(f"{path}: the file name gives {', '.join(f'{k} {fields[k]}' for k in zero)}; each must be at "
                          "least 1 (AICB names its files <model>-world_size<W>-tp<T>-pp<P>-ep<E>-bs<B>-seq<S>-<phase>)")
    if config is None and header is not None and header.extra.get("model_config"):
        config = unquote(header.extra["model_config"])
        if not os.path.isfile(config):
            raise ConfigError(f"{path}: its header names the model config {config}, which does not exist: give "
                              "--inference_config FILE (the JSON the workload was generated from)")
    try:
        from utils.inference_config import resolve_model

        job = InferenceJob(resolve_model(fields["model"], config), fields["phase"], fields["seq"], fields["bs"],
                           fields["world"], fields["tp"], fields["pp"], fields["ep"], model_name=fields["model"])
    except ConfigError as exc:
        return fields, None, str(exc)
    return fields, job, None


def simulate_file(path: str, topology: Any = None, options: TopoOptions | None = None,
                  gpu: str | None = None, config: str | None = None) -> InferenceResult:
    """Simulate the SimAI inference workload at ``path`` (one stage's records); ``gpu`` names the GPU of
    the memory check when the topology and the options do not (any GPU of the compute model's table);
    ``config``: the JSON config the file was made from (default: the one its header names, else the name's)."""
    from mocked_model.inference_memory import check_fits
    from workload_generator.simai import SimAIWorkload
    from workload_generator.simai_tokens import classify

    options = options or TopoOptions()
    workload = SimAIWorkload.read(path, strict=False)
    tp, pp, world = workload.require("tp", "pp", "all_gpus")
    ep = workload.header.ep or 1
    world = options.gpus or world
    if world % (tp * pp):
        raise ConfigError(f"{path}: all_gpus {world} is not divisible by tp {tp} x pp {pp}")
    if ep > world // pp:
        # the experts of one stage spread over at most its GPUs (issue 28, item 8: 'ep 16' on 8 GPUs ran)
        raise ConfigError(f"{path}: ep {ep} is more than the {world // pp} GPUs of a pipeline stage (all_gpus {world} / pp {pp})")
    fabric, links, notes = _fabric(topology, options, world)
    stage_ranks = world // pp
    costs = _Costs(fabric, links, stage_ranks, tp, ep)
    warnings = list(workload.warnings) + notes
    rows: list[Row] = []
    totals: dict[str, float] = defaultdict(float)
    placeholder = all(r.fwd_compute_ns <= 1 for r in workload.records)
    for record in workload.records:
        row = Row(0, None, record.name, record.fwd_compute_ns * 1e-9)
        kind, group = classify(record.fwd_comm, "fwd")
        if kind is not None and record.fwd_size_bytes:
            name, size = ("ep_group", ep) if group == "EP" else ("tp_group", tp)
            seconds, how = costs.collective(kind, name, size, record.fwd_size_bytes, 0)
            row.comm_s = seconds
            row.comms.append((kind, name, size, record.fwd_size_bytes, seconds, how))
            totals["EP" if group == "EP" else "TP"] += seconds
        totals["compute"] += row.compute_s
        rows.append(row)
    totals["total"] = sum(totals.values())
    stage_s = [dict(totals) for _ in range(pp)]
    step = totals["total"] * pp
    if pp > 1:
        warnings.append(f"{path} holds one pipeline stage: the other {pp - 1} are taken to be like it")
        seconds, _ = costs.p2p(workload.header.pp_comm or 0, 0)
        for s in range(pp - 1):
            stage_s[s]["PP"] = seconds
            stage_s[s]["total"] += seconds
        step += seconds * (pp - 1)
    if placeholder:
        warnings.append(f"{path} carries AICB's 1 ns placeholder compute times: the step is communication only "
                        "(generate it with --gpu_type, --comp_filepath or --aiob_enable)")
    fields, job, why = job_from_name(path, config, workload.header)
    memory, tokens, phase, model = None, None, None, os.path.basename(path)
    if fields is not None:
        phase, model = fields["phase"], fields["model"]
        dp = world // (tp * pp)
        tokens = fields["bs"] * dp * (1 if phase == "decode" else fields["seq"])
        if job is not None:
            gpu = gpu or getattr(fabric, "gpu_type", None) or options.gpu_type
            memory = check_fits(job, gpu if _known(gpu) else None)
        elif why:
            warnings.append(f"no memory figure: {why}")
    else:
        warnings.append(f"{os.path.basename(path)} does not follow AICB's name (<model>-world_size<W>-tp<T>-pp<P>-ep<E>"
                        "-bs<B>-seq<S>-<phase>.txt): phase and batch unknown, no throughput")
    layout = dict(tp=tp, pp=pp, ep=ep, dp=world // (tp * pp))
    source = "the file's records (placeholders)" if placeholder else "the file's records"
    return InferenceResult(phase, model, layout, stage_s, step, tokens, world, rows, memory, fabric.description,
                           source, warnings)


GENERATOR_ONLY = (("output", "--output"), ("result_dir", "--result_dir"), ("aiob_enable", "--aiob_enable"),
                  ("comp_filepath", "--comp_filepath"), ("pp_rank", "--pp_rank"))
"""The inference generators' flags that mean nothing to a simulation of the whole job (it writes no workload, plays
every stage and times the computation with the compute model)."""


def _job_flags(parser: Any) -> None:
    from utils.cli_types import fraction, non_negative, number, positive_int

    parser.add_argument("--frame", "--comm_frame", "--comm-frame", choices=("Inference",), required=True,
                        help="Inference: the job below, one prefill or decode step")
    parser.add_argument("-m", "--model_name", "--model-name", "--model_size", "--model-size", dest="model_name",
                        required=True, metavar="MODEL", help="DeepSeek-671B, Qwen3-Moe-235B, Qwen3-Next-80B, "
                        "deepseek-671B, qwen3-235B, qwen3-next-80B or a preset (llama3_70B, mixtral_8x7B, ...)")
    parser.add_argument("--inference_config", "--inference-config", dest="config_file", metavar="JSON",
                        help="AICB's JSON config of the model (default: AICB's default of its kind)")
    sim = parser.add_argument_group("simulation (--model topo)")
    sim.add_argument("--model", choices=("topo",), default="topo", help="topo (the only model of an inference job)")
    sim.add_argument("-t", "--topology", metavar="FILE", help="SimAI topology file (python -m topo.gen)")
    sim.add_argument("-g_p_s", "--gpus_per_server", "--gpus-per-server", type=positive_int, metavar="N",
                     help="GPUs per server of the derived two-tier fabric (without -t)")
    sim.add_argument("-n_p_s", "--nics_per_server", "--nics-per-server", type=positive_int, metavar="N",
                     help="NICs per server")
    sim.add_argument("-nv", "--nvlink_bw", "--nvlink-bw", type=number, metavar="GIBPS", help="NVLink busbw in GiB/s")
    sim.add_argument("-nic", "--nic_busbw", "--nic-busbw", type=number, metavar="GIBPS", help="busbw of one NIC in GiB/s")
    sim.add_argument("--nvlink_efficiency", "--nvlink-efficiency", type=fraction, metavar="F",
                     help="busbw / nominal NVLink rate")
    sim.add_argument("--nic_efficiency", "--nic-efficiency", type=fraction, metavar="F", help="busbw / nominal NIC rate")
    sim.add_argument("--latency_scale", "--latency-scale", type=non_negative, metavar="X", default=1.0,
                     help="multiply every latency term of NCCL's model (default 1)")
    sim.add_argument("-r", "--result", metavar="PREFIX",
                     help="result path prefix (ending in '/': a folder; the name is then AICB's name of the job)")
    sim.add_argument("-r_f", "--result_folder", "--result-folder", metavar="DIR",
                     help="folder for the result files (default results/ for a prefix without a folder)")
    sim.add_argument("-q", "--quiet", action="store_true", help="do not print the summary")


def job_main(argv: Any, prog: str) -> int:
    """``python -m simulator --frame Inference -m MODEL --phase decode ...``: one step of the inference job the
    generators' flags describe (``SimAI_inference_workload_generator``'s, with ``-m`` as ``aicb.py --frame
    Inference`` takes it), simulated as ``-w`` simulates that job's file, without writing the file."""
    import sys

    from simulator.report import output_prefix
    from workload_generator.inference_entry import build_parser, job_from

    parser = build_parser(prog, "Simulate one prefill or decode step of an inference job on a topology (times in "
                          "milliseconds): python -m simulator --frame Inference -m MODEL --phase decode ...",
                          positional=False, extra=_job_flags)
    values = vars(parser.parse_args(list(argv)))
    given = [flag for dest, flag in GENERATOR_ONLY if values.get(dest) != parser.get_default(dest)]
    if values.get("compute_source") not in (None, "model"):
        given.append(f"--compute_source {values['compute_source']}")
    if given:
        raise ConfigError(f"{given[0]} writes or times a workload file: generate it with python -m "
                          "workload_generator.SimAI_inference_workload_generator, then simulate it with python -m "
                          "simulator --model topo -w FILE (the job's simulation here times with the compute model)")
    job = job_from(values)
    from simulator.options import derived_fabric_gpu

    simai_gpu, nvlink_bw = derived_fabric_gpu(job.gpu_type, values["nvlink_bw"])
    options = TopoOptions(gpus_per_server=values["gpus_per_server"], nics_per_server=values["nics_per_server"],
                          nvlink_bw=nvlink_bw, nic_busbw=values["nic_busbw"], gpu_type=simai_gpu,
                          nvlink_efficiency=values["nvlink_efficiency"], nic_efficiency=values["nic_efficiency"],
                          latency_scale=values["latency_scale"])
    if values["topology"] is None and values["gpus_per_server"] is None:
        raise ConfigError("--frame Inference needs -t/--topology FILE, or -g_p_s/--gpus_per_server (with -n_p_s, -nv, "
                          "-nic) to derive a two-tier fabric")
    result = simulate_job(job, values["topology"], options)
    prefix = output_prefix(values["result"], values["result_folder"], job.file_stem() + ".txt")
    from utils.io import guard_output

    inputs = {"-t/--topology": values["topology"], "--inference_config": values["config_file"]}
    for name in ("inference.csv", "inference_layers.csv"):
        guard_output(prefix + name, inputs, "-r/--result")
    paths = write_results(result, prefix)
    for message in result.warnings:
        print(f"{prog}: warning: {message}", file=sys.stderr)
    if not values["quiet"]:
        print(result.summary_text())
        print(f"wrote {', '.join(paths)}")
    return 0


def simulate_inference(workload: Any, topology: Any = None, options: TopoOptions | None = None) -> InferenceResult:
    """An :class:`InferenceJob` or the path of a SimAI inference workload, on a topology."""
    if isinstance(workload, InferenceJob):
        return simulate_job(workload, topology, options)
    return simulate_file(os.fspath(workload), topology, options)


def write_results(result: InferenceResult, prefix: str) -> list[str]:
    """``<prefix>inference.csv`` (the step, its breakdown, throughput, memory) and
    ``<prefix>inference_layers.csv`` (every record's compute and collectives), atomically."""
    from simulator.report import write_files

    return write_files({prefix + "inference.csv": result.summary_csv(), prefix + "inference_layers.csv": result.rows_csv()})


def cli_main(args: Any, prog: str, simai_only: tuple = ()) -> int:
    """``python -m simulator --model topo -w <inference .txt>``: simulate, write, print.  ``simai_only``:
    ``(dest, flag, default)`` of the flags only SimAI's model reads (warned about when given)."""
    import sys

    from simulator.report import output_prefix

    stray = sorted(d for d in getattr(args, "job_flags", ()) if hasattr(args, d))
    if stray:
        raise ConfigError(f"--{stray[0]} describes a job: give the job's flags without -w, or -w FILE without them")
    from simulator.options import derived_fabric_gpu

    gpu = args.gpu_type
    simai_gpu, nvlink_bw = derived_fabric_gpu(gpu, args.nvlink_bw)  # an unknown name: the options' one-line error
    options = TopoOptions(
        gpus=args.gpus, gpus_per_server=args.gpus_per_server, nics_per_server=args.nics_per_server,
        nvlink_bw=nvlink_bw, nic_busbw=args.nic_busbw, gpu_type=simai_gpu, nic_type=args.nic_type,
        nvlink_efficiency=args.nvlink_efficiency, nic_efficiency=args.nic_efficiency, latency_scale=args.latency_scale,
        peak_tflops=args.peak_tflops)
    result = simulate_file(args.workload, args.topology, options, gpu, getattr(args, "inference_config", None))
    result.warnings += [f"{flag} is SimAI's knob and is ignored by --model topo" for name, flag, default in simai_only
                        if getattr(args, name) != default]
    result.warnings += [f"{flag} is not produced for inference workloads" for flag, value in
                        (("--trace", args.trace), ("--plot", args.plot), ("--json", getattr(args, "json", False)))
                        if value]
    prefix = output_prefix(args.result, args.result_folder, args.workload)
    from simulator.inputs import input_files
    from utils.io import guard_output

    for name in ("inference.csv", "inference_layers.csv"):
        guard_output(prefix + name, input_files(args), "-r/--result")
    paths = write_results(result, prefix)
    for message in result.warnings:
        print(f"{prog}: warning: {message}", file=sys.stderr)
    if not args.quiet:
        print(result.summary_text())
        print(f"wrote {', '.join(paths)}")
    return 0



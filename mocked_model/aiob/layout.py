"""Which operations a compute file times, for a job: one representative of each kind of layer (a
dense and an MoE layer where the model has both), plus the embedding, final norm, output layer and
loss, as the mocked model sizes them for one rank (tp, sp, ep, micro-batch, sequence).  No torch here:
the measurement (:mod:`mocked_model.aiob.measure`) and the compute model's estimate
(:func:`estimated_compute_file`) both start from these modules, so their sections always match what
:func:`workload_generator.compute_times.file_times` looks up.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from mocked_model.aiob.compute_file import ComputeFile, SectionTimes, sections_of
from mocked_model.base import MockedModule
from mocked_model.compute import GPUSpec, estimate_ns, gpu_spec
from mocked_model.megatron import (
    MegatronChunk,
    TransformerLayer,
    VocabEmbedding,
    VocabParallelLoss,
    chunk_layout,
    optimizer_item,
)
from mocked_model.megatron_layers import ColumnParallelLinear, CoreAttention, Elementwise, MegatronContext, RowParallelLinear
from utils.config import JobConfig
from utils.workload import WorkItem

OPTIMIZER_SECTION = "param_time"
"""AICB's section for the per-iteration parameter work; ours holds the optimizer step."""
OPTIMIZER_CAP = {"cuda": 1 << 26, "cpu": 1 << 22}
"""Most parameters the optimizer op allocates (fp32 master, grad and two moments: 16 bytes each);
bigger ranks are timed on this many and scaled linearly (Adam is memory bound, linear in size)."""


@dataclass(frozen=True)
class Leaf:
    """A leaf module of the representative chunk and how often it runs per micro-batch on this
    rank's pipeline stage (the number of layers of its kind; 1 for embedding and output)."""

    module: MockedModule
    repeats: int


@dataclass(frozen=True)
class OpSpec:
    """One operation to time: its forward and backward sections, what it is (``kind``: linear, norm,
    act, attention, embedding, loss, router, experts, optimizer), its input ``shape`` and sizes
    (``dims``), and how many samples one round takes (``repeats``: layers of its kind on the stage).

    ``dims`` also carry the software stack's choices for the operation, copied from the computation items the
    compute model prices (:mod:`mocked_model.compute.training_ops`), so that what AIOB times is what the model
    prices: ``stack`` (``te``, ``local`` or ``local-torch``: :attr:`utils.config.KernelStack.name`) on every
    operation, and per kind (see :data:`STACK_KEYS`): linear and experts ``te``, ``fp8_recipe`` (``--dtype
    float8``), ``fp8_input`` (Transformer Engine's ``LayerNormLinear``: the norm before it is fused into it),
    ``bf16`` (kept out of FP8), ``accumulate`` and ``grad_bytes`` (the weight gradient's accumulation into the main
    gradient, from the wgrad item); norm ``fused``, ``fp8_out`` and ``into_linear`` (the section of the linear a
    Transformer Engine stack fuses it into); attention ``impl`` and ``softmax``; rotary, act and bda ``fused``
    (act also ``bias``); loss ``fused``; optimizer ``impl``, ``tensors``, ``distributed``, ``fp8_recipe``.  Specs
    without ``stack`` (built by hand, or by :mod:`profiling.compute`) time AIOB's earlier fixed implementations."""

    section: str
    backward: str | None
    kind: str
    shape: tuple[int, ...]
    dims: dict[str, Any] = field(default_factory=dict)
    repeats: int = 1


def aiob_filename(job: JobConfig, values: dict[str, Any] | None = None) -> str:
    """AICB's name: ``<model>-world_size<W>-tp<T>-pp<P>-ep<E>-gbs<B>-mbs<b>-seq<S>-flash_attn-<fa>.txt``."""
    p, t = job.parallel, job.training
    model = (values or {}).get("model_name") or job.model.name
    name = (f"{model}-world_size{p.world_size}-tp{p.tp}-pp{p.pp}-ep{p.ep}-gbs{p.global_batch}-mbs{p.micro_batch}"
            f"-seq{t.seq_length}-flash_attn-{t.use_flash_attn}.txt")
    return name.replace("/", "_").replace("*", "x")


def default_aiob_path(job: JobConfig, values: dict[str, Any] | None = None) -> str:
    """``results/aiob_outputs/<name>`` (``<output_dir>/aiob_outputs/<name>`` with ``--output_dir``)."""
    base = (values or {}).get("output_dir") or "results"
    return os.path.join(base, "aiob_outputs", aiob_filename(job, values))


def stage_layers(job: JobConfig) -> list[int]:
    """Global indices of the transformer layers on ``--pp_rank``'s stage (every model chunk)."""
    out: list[int] = []
    for first, count, _pre, _post in chunk_layout(job, job.parallel.pp_rank):
        out.extend(range(first, first + count))
    return out


def representative_chunk(job: JobConfig) -> tuple[MegatronChunk, list[int]]:
    """A chunk holding the embedding, one layer of each kind (dense first, then MoE), the final norm,
    the output layer and the loss, with computation items on; and how many layers of each kind the
    stage holds (in the chunk's layer order; at least 1, so that a file always covers both kinds)."""
    job = replace(job, training=replace(job.training, computation_enable=True))
    model = job.model
    kinds: list[int] = []
    if not model.is_moe or model.n_dense_layers > 0:
        kinds.append(0)  # a dense layer
    if model.is_moe:
        kinds.append(model.n_dense_layers)  # the first MoE layer
    layers = stage_layers(job)
    counts = [max(sum(1 for i in layers if model.is_moe_layer(i) == model.is_moe_layer(k)), 1) for k in kinds]
    ctx = replace(MegatronContext.of(job), compute=True)

    def factory(c: MegatronContext, j: JobConfig, index: int) -> TransformerLayer:
        return TransformerLayer(c, j, kinds[index])

    return MegatronChunk(job, 0, len(kinds), True, True, ctx, layer_factory=factory, mtp_layers=0), counts


def leaves(job: JobConfig) -> list[Leaf]:
    """The representative chunk's leaf modules that computation items come from, in forward order."""
    chunk, counts = representative_chunk(job)
    out: list[Leaf] = []

    def walk(module: MockedModule, repeats: int) -> Iterator[Leaf]:
        if not module.children:
            yield Leaf(module, repeats)
            return
        for child in module.children:
            yield from walk(child, repeats)

    for child in chunk.children:
        repeats = counts[chunk.layers.index(child)] if child in chunk.layers else 1
        out.extend(walk(child, repeats))
    return out


STACK_KEYS: dict[str, tuple[tuple[str, Any], ...]] = {
    "linear": (("te", False), ("fp8_recipe", None), ("fp8_input", None), ("bf16", None)),
    "experts": (("te", False), ("fp8_recipe", None)),
    "norm": (("fused", True), ("fp8_out", None)),
    "attention": (("impl", "flash"), ("softmax", None)),
    "rotary": (("fused", True),),
    "act": (("fused", True), ("bias", None)),
    "bda": (("fused", True),),
    "loss": (("fused", False),),
}
"""Keys of a computation item's meta that an operation's ``dims`` carry, with the compute model's default for an
item without the key (``None``: left out when absent)."""


def _computation_metas(module: MockedModule) -> list[tuple[str, dict]]:
    """``(phase, meta)`` of a leaf's forward and backward computation items."""
    out = []
    for phase, items in (("forward", module.forward_items("forward")), ("backward", module.backward_items())):
        out += [(phase, item.meta or {}) for item in items if item.is_computation]
    return out


def _stack_dims(job: JobConfig, kind: str, metas: list[tuple[str, dict]], name: str | None = None) -> dict[str, Any]:
    """The stack's choices for one operation: ``stack`` and the :data:`STACK_KEYS` of its forward item (the item
    named ``name`` when the leaf has several), plus for GEMMs (and the router's) the wgrad item's ``accumulate`` and
    ``grad_bytes``."""
    own = [(phase, meta) for phase, meta in metas if name is None or meta.get("name") == name]
    forward = next((meta for phase, meta in own if phase == "forward"), {})
    out: dict[str, Any] = {"stack": job.training.stack.name}
    for key, default in STACK_KEYS.get(kind, ()):
        value = forward.get(key, default)
        if value is not None:
            out[key] = value
    if kind in ("linear", "experts", "router"):
        wgrad = next((meta for phase, meta in own if meta.get("op") == "wgrad"), None)
        if wgrad is not None:
            out["accumulate"] = bool(wgrad.get("accumulate", True))
            out["grad_bytes"] = wgrad.get("grad_bytes", 4)
    return out


def _has_bias(module: MockedModule) -> bool:
    return any(p.name.endswith(".bias") for p in module.params)


def _leaf_specs(job: JobConfig, module: MockedModule, repeats: int) -> list[OpSpec]:
    """The operations a leaf's computation items stand for (an MoE experts module stands for three)."""
    from mocked_model.moe import Experts

    ctx: MegatronContext | None = getattr(module, "ctx", None)  # every Megatron leaf holds its context
    if ctx is None:
        return []
    if isinstance(module, Experts):
        s, tokens = module.shape, sum(module.shape.expert_tokens)
        fc1, act, fc2 = (sections_of(f"{module.name}.fc1"), sections_of(module.name), sections_of(f"{module.name}.fc2"))
        assert fc1 and act and fc2
        metas = _computation_metas(module)
        return [
            OpSpec(*fc1, "experts", (tokens, s.hidden), {"tokens": s.expert_tokens, "in": s.hidden, "out": module.fc1_out,
                                                         **_stack_dims(job, "experts", metas, f"{module.name}.fc1")},
                   repeats),
            OpSpec(*act, "act", (tokens, module.fc1_out), {"kind": "swiglu" if s.swiglu else "gelu",
                                                           **_stack_dims(job, "act", metas, module.name)}, repeats),
            OpSpec(*fc2, "experts", (tokens, module.fc2_in), {"tokens": s.expert_tokens, "in": module.fc2_in, "out": s.hidden,
                                                              **_stack_dims(job, "experts", metas, f"{module.name}.fc2")},
                   repeats),
        ]
    sections = sections_of(module.name)
    if sections is None:
        return []
    fwd, bwd = sections
    specs = _leaf_ops(job, module, ctx, fwd, bwd, repeats)
    metas = _computation_metas(module)
    return [replace(spec, dims={**spec.dims, **_stack_dims(job, spec.kind, metas)}) for spec in specs]


def _leaf_ops(job: JobConfig, module: MockedModule, ctx: MegatronContext, fwd: str, bwd: str, repeats: int) -> list[OpSpec]:
    """The operation of a leaf with one section, sized (the stack's choices are added by :func:`_leaf_specs`)."""
    from mocked_model.mla import DuplicatedLinear
    from mocked_model.moe import Router

    if isinstance(module, ColumnParallelLinear):
        dims = {"in": module.in_size, "out": module.out_part, "bias": _has_bias(module)}
        return [OpSpec(fwd, bwd, "linear", (ctx.seq, ctx.micro, module.in_size), dims, repeats)]
    if isinstance(module, RowParallelLinear):
        dims = {"in": module.in_part, "out": module.out_size, "bias": _has_bias(module)}
        return [OpSpec(fwd, bwd, "linear", (ctx.seq, ctx.micro, module.in_part), dims, repeats)]
    if isinstance(module, DuplicatedLinear):
        dims = {"in": module.in_size, "out": module.out_size, "bias": False}
        return [OpSpec(fwd, bwd, "linear", (ctx.seq_local, ctx.micro, module.in_size), dims, repeats)]
    if isinstance(module, Router):
        s = module.shape
        dims = {"in": s.hidden, "experts": s.experts, "topk": s.topk}
        return [OpSpec(fwd, bwd, "router", (s.tokens, s.hidden), dims, repeats)]
    if isinstance(module, Elementwise):
        if module.op == "norm":
            # the label names the norm kind (MegatronLayerNorm / MegatronRMSNorm); QK-norm normalises
            # each head (kv_channels) with the model's norm
            qk = module.label == "MegatronQKLayerNorm"
            kind = "RMSNorm" if "RMSNorm" in module.label else job.model.normalization
            width = job.model.kv_channels if qk else module.shape[-1]
            return [OpSpec(fwd, bwd, "norm", module.shape, {"width": width, "kind": kind}, repeats)]
        if module.op == "bda":
            return [OpSpec(fwd, bwd, "bda", module.shape, dict(module.options), repeats)]
        if module.op == "rotary":
            # queries and keys side by side: this rank's query heads first, then its key heads
            dims = {"head_dim": job.model.kv_channels, "q_heads": job.model.num_attention_heads // ctx.tp}
            return [OpSpec(fwd, bwd, "rotary", module.shape, dims, repeats)]
        return [OpSpec(fwd, bwd, "act", module.shape, {"kind": module.op}, repeats)]
    if isinstance(module, CoreAttention):
        dims = dict(micro=ctx.micro, heads=module.heads, groups=module.groups, seq=ctx.seq, head_dim=module.head_dim,
                    v_dim=module.v_dim, impl="flash" if ctx.flash else "unfused", p=ctx.attention_dropout)
        return [OpSpec(fwd, bwd, "attention", (ctx.micro, module.heads, ctx.seq, module.head_dim), dims, repeats)]
    if isinstance(module, VocabEmbedding):
        dims = {"vocab": module.word.shape[0], "hidden": module.word.shape[1],
                "positions": job.model.max_position_embeddings if module.positions else 0}
        return [OpSpec(fwd, bwd, "embedding", (ctx.seq, ctx.micro), dims, repeats)]
    if isinstance(module, VocabParallelLoss):
        return [OpSpec(fwd, bwd, "loss", (ctx.seq, ctx.micro, module.vocab_part), {}, repeats)]
    return []


def op_specs(job: JobConfig) -> list[OpSpec]:
    """Every operation the measurement times for ``job``, once per section, in forward order, and
    the optimizer step (``param_time``)."""
    specs = [spec for leaf in leaves(job) for spec in _leaf_specs(job, leaf.module, leaf.repeats)]
    # Transformer Engine's LayerNormLinear: a norm followed by a linear that takes its output (``fp8_input``)
    for index, spec in enumerate(specs[:-1]):
        after = specs[index + 1]
        if spec.kind == "norm" and after.kind == "linear" and after.dims.get("fp8_input"):
            specs[index] = replace(spec, dims={**spec.dims, "into_linear": after.section})
    out: list[OpSpec] = []
    seen: set[str] = set()
    for spec in specs:
        if spec.section not in seen:
            seen.add(spec.section)
            out.append(spec)
    item = optimizer_item(job, stage_chunks(job))
    meta = item.meta or {}
    dims = {"params": item.shapes[1][0], "stack": job.training.stack.name, "impl": meta.get("impl", "fused"),
            "tensors": meta.get("tensors", 1), "distributed": bool(meta.get("distributed"))}
    if meta.get("fp8_recipe"):
        dims["fp8_recipe"] = meta["fp8_recipe"]
    out.append(OpSpec(OPTIMIZER_SECTION, None, "optimizer", (), dims, 1))
    return out


def rank_params(job: JobConfig) -> int:
    """Parameters whose optimizer step this rank runs: its stage's parameters (its shard of them with
    the distributed optimizer, which splits every buffer over DP)."""
    return optimizer_item(job, stage_chunks(job)).shapes[1][0]


def stage_chunks(job: JobConfig) -> list[MegatronChunk]:
    """The model chunks of ``--pp_rank``'s stage."""
    from mocked_model.mtp import chunk_mtp_layers

    mtp = chunk_mtp_layers(job, job.parallel.pp_rank)
    return [MegatronChunk(job, first, count, pre, post, mtp_layers=mtp[c])
            for c, (first, count, pre, post) in enumerate(chunk_layout(job, job.parallel.pp_rank))]


def section_items(job: JobConfig) -> dict[tuple[str, str], dict[str, list[WorkItem]]]:
    """Computation items of the representative chunk keyed by ``(forward, backward)`` section, then
    by phase (``forward`` / ``backward``).  A section takes its items from the first layer that has
    it (a dense and an MoE layer both have ``layernorm``); recomputation is left out (it repeats
    the forward)."""
    out: dict[tuple[str, str], dict[str, list[WorkItem]]] = defaultdict(lambda: defaultdict(list))
    owner: dict[tuple[str, str], object] = {}
    for leaf in leaves(job):
        module = leaf.module
        for phase, items in (("forward", module.forward_items("forward")), ("backward", module.backward_items())):
            for item in items:
                if not item.is_computation or not item.stage.startswith(phase):
                    continue
                meta = item.meta or {}
                sections = sections_of(meta.get("name", ""))
                if sections is None or owner.setdefault(sections, meta.get("layer")) != meta.get("layer"):
                    continue
                out[sections][phase].append(item)
    return out


def estimated_compute_file(job: JobConfig, gpu: str | GPUSpec) -> ComputeFile:
    """A compute file for ``job`` estimated by the compute model (:mod:`mocked_model.compute`) for ``gpu``
    (a name or :class:`~mocked_model.compute.GPUSpec`): every section the measurement would write, in
    microseconds, labelled ``compute_source: model <GPU>`` so that readers know it is an estimate."""
    spec = gpu_spec(gpu)
    dtype = job.training.dtype
    out = ComputeFile(iterations=1, labels={
        "compute_source": f"model {spec.name}",
        "device": f"{spec.name} (analytical estimate, not a measurement)",
        "dtype": dtype,
    })
    backward: dict[str, float] = {}
    for (fwd, bwd), phases in section_items(job).items():
        for phase, items in phases.items():
            total_ns = sum(estimate_ns(item, spec, dtype) or 0.0 for item in items)
            us = total_ns / 1000
            if phase == "forward":
                out.sections.setdefault(fwd, SectionTimes(us, us, us, "model"))
            else:
                backward.setdefault(bwd, us)
    for name, us in backward.items():
        out.sections[name] = SectionTimes(us, us, us, "model")
    us = (estimate_ns(optimizer_item(job, stage_chunks(job)), spec, dtype) or 0.0) / 1000
    out.sections[OPTIMIZER_SECTION] = SectionTimes(us, us, us, "model (optimizer step)")
    return out

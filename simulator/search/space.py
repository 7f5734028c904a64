"""The layouts a search tries: every parallel layout of a model on a GPU count, the ones Megatron-LM
would reject dropped (with the reason), and a lower bound on each one's iteration time.

A layout is tensor, pipeline, data and expert parallel sizes, model chunks per pipeline stage
(interleaving), micro-batch size, recomputation, sequence parallelism, the distributed optimizer, the
rank order (:data:`utils.parallel.ORDERS`) and Megatron's ``--tp-comm-overlap`` (Transformer Engine's
TP collectives overlapped with the GEMMs, which Megatron allows only with sequence parallelism).
Pipeline sizes that do not divide the layers get Megatron's uneven first and last stages (the middle
stages hold ``ceil(L / p)`` layers, the first and last share the rest), as Llama 3 405B's 126 layers on
16 stages.

The bound (:func:`compute_bound_s`) is what compute alone allows: the busiest stage's kernels, priced by
the compute model, plus the pipeline's fill.  No simulation of the layout can come out faster, so one
whose bound exceeds the times already found for the best layouts cannot enter them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

from utils.errors import ConfigError
from utils.parallel import ORDERS

RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True, order=True)
class Layout:
    """One parallel layout (the CSV's first columns)."""

    tp: int
    pp: int
    dp: int
    ep: int
    vpp: int
    micro_batch: int
    recompute: str
    sequence_parallel: bool
    distributed_optimizer: bool
    order: str
    first_stage_layers: int = 0
    last_stage_layers: int = 0
    tp_comm_overlap: bool = False
    cp: int = 1
    """Context-parallel size (``--context-parallel-size``): ``dp`` is then ``world / (tp x pp x cp)``."""
    overlap_param_gather: bool = False
    """Megatron's ``--overlap-param-gather`` (with the distributed optimizer; it brings ``--overlap-grad-reduce``,
    which Megatron requires beside it and the NeMo / Megatron-Bridge recipes turn on)."""
    etp: int = 0
    """Expert tensor-parallel size (``--expert_tensor_parallel_size``; 0: the TP size, Megatron's default)."""

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    def key(self) -> tuple:
        """What identifies the layout in a CSV (for ``--resume``)."""
        return tuple(str(getattr(self, name)) for name in LAYOUT_FIELDS)

    def given(self) -> dict[str, Any]:
        """The generator flag values (:func:`utils.cli.resolve`'s ``given``) this layout sets."""
        out: dict[str, Any] = {
            "world_size": self.world_size, "tensor_model_parallel_size": self.tp, "pipeline_model_parallel": self.pp,
            "expert_model_parallel_size": self.ep, "micro_batch": self.micro_batch,
            "enable_sequence_parallel": self.sequence_parallel, "use_distributed_optimizer": self.distributed_optimizer,
            "use_tp_pp_dp_mapping": self.order != ORDERS[0],
            "recompute_granularity": None if self.recompute == "none" else self.recompute,
            "tp_comm_overlap": self.tp_comm_overlap, "context_parallel_size": self.cp,
        }
        if self.etp:
            out["expert_tensor_parallel_size"] = self.etp
        if self.vpp > 1:
            out["num_virtual_stages_per_pipeline_rank"] = self.vpp
        if self.first_stage_layers:
            out["decoder_first_pipeline_num_layers"] = self.first_stage_layers
            out["decoder_last_pipeline_num_layers"] = self.last_stage_layers
        out["overlap_param_gather"] = self.overlap_param_gather
        if self.overlap_param_gather:
            out["overlap_grad_reduce"] = True
        return out

    def flags(self) -> list[str]:
        """The layout as command-line flags (to reproduce a row with ``python -m simulator``)."""
        out = ["--world_size", str(self.world_size), "--tensor_model_parallel_size", str(self.tp),
               "--pipeline_model_parallel", str(self.pp), "--micro_batch", str(self.micro_batch)]
        if self.ep > 1:
            out += ["--expert_model_parallel_size", str(self.ep)]
        if self.etp:
            out += ["--expert_tensor_parallel_size", str(self.etp)]
        if self.cp > 1:
            out += ["--context-parallel-size", str(self.cp)]
        if self.vpp > 1:
            out += ["--num_virtual_stages_per_pipeline_rank", str(self.vpp)]
        if self.first_stage_layers:
            out += ["--decoder_first_pipeline_num_layers", str(self.first_stage_layers),
                    "--decoder_last_pipeline_num_layers", str(self.last_stage_layers)]
        if self.recompute != "none":
            out += ["--recompute_granularity", self.recompute]
        if self.sequence_parallel:
            out.append("--enable_sequence_parallel")
        if self.distributed_optimizer:
            out.append("--use-distributed-optimizer")
        if self.order != ORDERS[0]:
            out.append("--use-tp-pp-dp-mapping")
        if self.tp_comm_overlap:
            out.append("--tp_comm_overlap")
        if self.overlap_param_gather:
            out += ["--overlap_grad_reduce", "--overlap_param_gather"]
        return out


LAYOUT_FIELDS = tuple(f.name for f in fields(Layout))


@dataclass(frozen=True)
class Space:
    """What to enumerate: ``None`` means every value that divides (tp up to the GPUs per server)."""

    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    ep: tuple[int, ...] | None = None
    vpp: tuple[int, ...] | None = None
    micro_batch: tuple[int, ...] | None = None
    recompute: tuple[str, ...] = RECOMPUTE
    sequence_parallel: tuple[bool, ...] = (True, False)
    distributed_optimizer: tuple[bool, ...] = (True, False)
    order: tuple[str, ...] = ORDERS
    tp_comm_overlap: tuple[bool, ...] = (False, True)
    max_tp: int = 8
    cp: tuple[int, ...] = (1,)
    overlap_param_gather: tuple[bool, ...] = (False,)
    """Tried where the distributed optimizer is on (off otherwise)."""
    etp: tuple[int, ...] | None = None
    """Expert tensor-parallel sizes (None: the TP size only)."""
    layout_stages: int = 0
    """The virtual stages of a fixed ``--pipeline_model_parallel_layout`` (0: none): only pipeline sizes that divide
    them, each with the chunks the layout gives, no uneven first / last stage of the search's own."""


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order, found up to its square root (``--global_batch 1000000000``: a
    billion trial divisions took the planning minutes; issue 28, item 6)."""
    if n < 1:
        return []
    low, high = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            low.append(d)
            if d * d != n:
                high.append(n // d)
        d += 1
    return low + high[::-1]


def uneven_split(layers: int, pp: int) -> tuple[int, int] | None:
    """Megatron's uneven first/last stages for ``pp`` stages that do not divide ``layers``: the middle
    stages hold ``ceil(layers / pp)``, the first and last the rest (the first the smaller half); None when
    that leaves either without a layer."""
    middle = -(-layers // pp)
    rest = layers - (pp - 2) * middle
    first, last = rest // 2, rest - rest // 2
    return (first, last) if pp > 2 and first >= 1 else None


def layouts(model: Any, world: int, global_batch: int, space: Space) -> Iterator[Layout]:
    """Every layout of ``model`` on ``world`` GPUs whose sizes multiply out and divide the batch (the
    finer rules are :func:`utils.parallel.ParallelConfig`'s, applied when the job is built)."""
    layers = model.num_layers
    moe = model.num_experts is not None and model.num_experts > 1
    for tp in space.tp or [d for d in divisors(world) if d <= space.max_tp]:
        if world % tp:
            continue
        for pp, cp in ((pp, cp) for pp in space.pp or divisors(world // tp) for cp in space.cp):
            if world % (tp * pp * cp) or pp > layers:
                continue
            dp = world // (tp * pp * cp)
            split = (0, 0)
            fixed = space.layout_stages
            if fixed and (fixed % pp or (pp == 1 and fixed > 1)):
                continue  # the layout's stages are pipeline ranks x chunks
            if layers % pp and not fixed:
                found = uneven_split(layers, pp)
                if found is None:
                    continue
                split = found
            middle = layers // pp if not split[0] else -(-layers // pp)
            chunk_choices = [fixed // pp] if fixed else space.vpp or ([1] if pp == 1 else divisors(middle))
            if fixed:
                middle = fixed // pp  # the layout places the layers; the chunk count divides nothing here
            # expert layouts: etp x ep divides the stage's tp x cp x dp ranks (Megatron's expert rank generator); with
            # etp = tp (the default) ep divides dp
            pool = tp * cp * dp
            expert = [(e, ep) for e in (space.etp or (0,)) if pool % (e or tp) == 0
                      for ep in space.ep or ([d for d in divisors(pool // (e or tp)) if model.num_experts % d == 0]
                                             if moe else [1])
                      if (pool % ((e or tp) * ep) == 0 if e and e != tp else dp % ep == 0)]
            for etp, ep in expert:
                if etp and not moe:
                    continue
                for micro in space.micro_batch or divisors(global_batch // dp if global_batch % dp == 0 else 0):
                    if global_batch % (micro * dp):
                        continue
                    m = global_batch // (micro * dp)
                    for vpp in chunk_choices:
                        if vpp > 1 and (pp == 1 or m % pp or middle % vpp or split[0] % vpp or split[1] % vpp):
                            continue
                        for recompute in space.recompute:
                            for sp in space.sequence_parallel:
                                if sp and tp == 1:
                                    continue
                                for dist in space.distributed_optimizer:
                                    if dist and dp == 1:
                                        continue
                                    for order in space.order:
                                        if order != ORDERS[0] and (pp == 1 or dp == 1):
                                            continue  # the orders differ only with both dimensions
                                        for overlap in space.tp_comm_overlap:
                                            if overlap and not sp:
                                                continue  # Megatron: --tp-comm-overlap needs sequence parallelism
                                            # --overlap-param-gather needs the distributed optimizer (Megatron's rule)
                                            for gather in (space.overlap_param_gather if dist else (False,)):
                                                yield Layout(tp, pp, dp, ep, vpp, micro, recompute, sp, dist, order,
                                                             *split, overlap, cp, gather, etp)


def build_job(base: dict[str, Any], layout: Layout) -> Any:
    """The validated job of ``base`` (the user's flags, :func:`utils.cli.resolve`'s ``given``) with the
    layout's; raises :class:`ConfigError` with Megatron's reason when the layout is not allowed."""
    from utils.cli import job_from, resolve

    given = {k: v for k, v in base.items() if k not in LAYOUT_OWNED}
    given.update(layout.given())
    if base.get("pipeline_model_parallel_layout"):  # the layout gives the chunks (Megatron refuses both)
        given.pop("num_virtual_stages_per_pipeline_rank", None)
    given["computation_enable"] = True
    return job_from(resolve(given))


LAYOUT_OWNED = frozenset(("world_size", "tensor_model_parallel_size", "pipeline_model_parallel",
                          "expert_model_parallel_size", "micro_batch", "enable_sequence_parallel",
                          "use_distributed_optimizer", "use_tp_pp_dp_mapping", "recompute_granularity",
                          "recompute_activations", "num_virtual_stages_per_pipeline_rank",
                          "num_layers_per_virtual_pipeline_stage", "decoder_first_pipeline_num_layers",
                          "decoder_last_pipeline_num_layers", "tp_comm_overlap", "context_parallel_size",
                          "overlap_param_gather"))
"""Flags the search sets itself (a user's value for them is replaced by each layout's)."""


def compute_bound_s(job: Any, gpu: str, cache: dict | None = None) -> float:
    """A tighter bound from the compute model: the busiest stage's computation (its layers' forward and
    backward kernels, recomputation included, for every micro-batch) plus the pipeline's fill, during
    which the last stage waits for ``p - 1`` chunk forwards upstream.  Every collective, p2p transfer and
    other idle time only adds to it, so no simulation of the layout can come out faster.  ``cache``
    keeps each distinct layer's times between calls (layers of one kind and shape cost the same)."""
    from mocked_model.compute import estimator, host_us
    from mocked_model.megatron import MegatronContext, TransformerLayer, chunk_layout

    cache = {} if cache is None else cache
    p, t, m = job.parallel, job.training, job.model
    estimate = estimator(gpu, t.dtype, host=host_us(t))
    ctx = MegatronContext.of(job)

    def layer_times(layer: int) -> tuple[float, float]:
        key = (ctx, m.is_moe_layer(layer), t.recompute, t.dtype, gpu, id(m))
        hit = cache.get(key)
        if hit is None:
            module = TransformerLayer(ctx, job, layer)
            fwd = sum(estimate(i) or 0.0 for i in module.forward_items() if i.is_computation)
            bwd = sum(estimate(i) or 0.0 for _, items in module.backward_segments() for i in items if i.is_computation)
            hit = cache[key] = (fwd * 1e-9, bwd * 1e-9)
        return hit

    stage_total, stage_forward = [], []
    for stage in range(p.pp):
        fwd = bwd = 0.0
        for first, count, _pre, _post in chunk_layout(job, stage):
            for layer in range(first, first + count):
                f, b = layer_times(layer)
                fwd, bwd = fwd + f, bwd + b
        stage_total.append(p.ga * (fwd + bwd))
        stage_forward.append(fwd / p.chunks(m.num_layers))
    return max(stage_total) + (p.pp - 1) * min(stage_forward)


def check_space(values: dict[str, Any]) -> Space:
    """A :class:`Space` from the search's list flags (``--tp 4,8`` ...); raises :class:`ConfigError`."""
    def ints(name: str) -> tuple[int, ...] | None:
        text = values.get(name)
        if text is None:
            return None
        if str(text).strip() and not all(v.strip() for v in str(text).split(",")):  # (as --gpu_type: '2,,4' was 2,4)
            raise ConfigError(f"--{name} {text!r}: an empty item in the list")
        try:
            out = tuple(int(v) for v in str(text).split(",") if v.strip())
        except ValueError:
            raise ConfigError(f"--{name} {text!r}: expected comma-separated positive integers") from None
        if not out or min(out) < 1:
            raise ConfigError(f"--{name} {text!r}: expected comma-separated positive integers")
        return out

    recompute = tuple((values.get("recompute") or ",".join(RECOMPUTE)).split(","))
    bad = [r for r in recompute if r not in RECOMPUTE]
    if bad:
        raise ConfigError(f"--recompute {bad[0]!r} is not one of {', '.join(RECOMPUTE)}")
    orders = tuple((values.get("orders") or ",".join(ORDERS)).split(","))
    bad = [o for o in orders if o not in ORDERS]
    if bad:
        raise ConfigError(f"--orders {bad[0]!r} is not one of {', '.join(ORDERS)}")
    def switch(name: str) -> tuple[bool, ...]:
        text = values.get(name) or "both"
        if text not in ("both", "on", "off"):
            raise ConfigError(f"--{name} {text!r} is not one of both, on, off")
        return {"both": (False, True), "on": (True,), "off": (False,)}[text]

    return Space(tp=ints("tp"), pp=ints("pp"), ep=ints("ep"), etp=ints("etp"), cp=ints("cp") or (1,), vpp=ints("vpp"),
                 micro_batch=ints("micro_batches"),
                 recompute=recompute, sequence_parallel=switch("sequence_parallel"),
                 distributed_optimizer=switch("distributed_optimizer"), order=orders,
                 tp_comm_overlap=switch("tp_comm_overlap"), max_tp=values.get("max_tp") or 8,
                 overlap_param_gather=switch("overlap_param_gather") if values.get("overlap_param_gather") else (False,),
                 layout_stages=_layout_stages(values.get("pipeline_model_parallel_layout")))


def _layout_stages(text: str | None) -> int:
    """The virtual stages of a fixed ``--pipeline_model_parallel_layout`` (0 without one)."""
    if not text:
        return 0
    from utils.pipeline_layout import stage_count

    return stage_count(text)

"""The mocked MoE MLP of Megatron-LM core (``megatron/core/transformer/moe``): shared experts, router, token
dispatch, the local experts and combine, in ``MoELayer.forward``'s order.

Per micro-batch and MoE layer, forward (backward mirrors it in reverse order):

- shared experts (``SharedExpertMLP``, a dense TP MLP) first, unless ``--moe_shared_expert_overlap`` runs their
  fc1 beside the dispatch all-to-all and their fc2 beside the combine's (``token_dispatch`` / ``token_combine``);
- router (``TopKRouter``): the gating GEMM, then score, top-k and losses (one ``moe_route`` item); with the aux
  loss (``--moe_aux_loss_coeff`` > 0) the per-expert counts are all-reduced over TP (``get_tokens_per_expert_and_
  token_count``, int64 per expert);
- dispatch and combine as each dispatcher runs them (:mod:`mocked_model.moe_dispatch` holds the sizes): metadata
  (``moe_dispatch_meta``), permutations (``moe_permute``, ``moe_sort_chunks``, ``moe_unpermute``) and the
  collectives; DeepEP's fused dispatch and combine (``flex``) are all-to-all items over the ETP x EP ranks whose
  rows are deduplicated per destination rank, their meta saying so (``deepep``);
- local experts: grouped GEMMs per expert token count (``TEGroupedMLP``) or a loop of GEMMs (``SequentialMLP``),
  the probabilities applied in the weighted activation.

Token counts follow :mod:`mocked_model.routing` (balanced, Zipf-skewed, or ``--moe_imbalance``): the workload is EP
rank 0's view, the busiest, whose experts and all-to-all sizes set the pace.  An all-to-all item carries the
busiest rank's traffic (the larger of what it sends and receives) and the per-expert counts in ``meta``.
"""

from __future__ import annotations

from math import ceil

from mocked_model.base import MockedModule, MockedParam, comm, compute
from mocked_model.megatron_layers import (
    ColumnParallelLinear,
    Elementwise,
    MegatronContext,
    RowParallelLinear,
    _meta,
    wgrad_meta,
)
from mocked_model.moe_dispatch import COUNT_BYTES, deepep_traffic
from mocked_model.routing import Routing, route
from utils.config import JobConfig
from utils.workload import CommGroup, CommType, WorkItem

AG, RS, AR, A2A = CommType.all_gather, CommType.reduce_scatter, CommType.all_reduce, CommType.all_to_all


def fp8_token_bytes(hidden: int) -> int:
    """Bytes of one token dispatched in FP8: one byte per value plus an fp32 scale per 128 values."""
    return hidden + ceil(hidden / 128) * 4


class MoEShape:
    """Sizes one MoE layer needs, computed once per job."""

    def __init__(self, ctx: MegatronContext, job: JobConfig) -> None:
        model, p, t = job.model, job.parallel, job.training
        self.ctx, self.experts, self.topk = ctx, model.num_experts, model.moe_router_topk
        self.ep, self.etp, self.tp = p.ep, p.expert_tp, p.tp
        self.local_experts = self.experts // self.ep
        self.hidden, self.ffn, self.swiglu = model.hidden_size, model.moe_ffn_hidden_size, model.swiglu
        self.dispatcher = t.moe_token_dispatcher_type
        self.deepep = self.dispatcher == "flex"
        self.tokens = ctx.seq_local * ctx.micro
        self.routing: Routing = route(self.tokens, self.experts, self.topk, self.ep, t.moe_routing_skew,
                                      t.moe_expert_capacity_factor, t.moe_pad_expert_input_to_capacity, t.moe_imbalance)
        self.token_bytes = model.hidden_size * ctx.dtype_bytes
        self.dispatch_token_bytes = fp8_token_bytes(model.hidden_size) if t.moe_fp8_dispatch else self.token_bytes
        self.grouped = t.moe_grouped_gemm
        self.fused_permute = t.moe_permute_fusion
        self.router_dtype = t.moe_router_dtype
        # the router's logits and probabilities: the activations' dtype unless --moe_router_dtype (router.py
        # gating: router_dtype = input.dtype); DeepEP takes fp32 probabilities (_DeepepManager.dispatch)
        self.probs_bytes = {"fp32": 4, "fp64": 8}.get(self.router_dtype or "", ctx.dtype_bytes)
        self.a2a_probs_bytes = 4 if self.deepep else self.probs_bytes
        self.score = model.moe_router_score_function
        self.router_fusion = t.moe_router_fusion
        coeff = t.moe_aux_loss_coeff
        self.aux = t.moe_router_load_balancing_type if coeff > 0 and t.moe_router_load_balancing_type in (
            "aux_loss", "seq_aux_loss") else None
        self.z_loss = t.moe_z_loss_coeff is not None
        self.groups = model.moe_router_group_topk is not None and model.moe_router_num_groups is not None
        self.expert_bias = model.moe_router_enable_expert_bias
        self.capacity = t.moe_expert_capacity_factor is not None
        self.pad = t.moe_pad_expert_input_to_capacity
        self.shared_overlap = t.moe_shared_expert_overlap and bool(model.n_shared_experts) and \
            self.dispatcher in ("alltoall", "flex")
        # expert-TP collectives: Megatron's expert-TP group, the attention TP group's ranks when etp == tp
        self.etp_group = CommGroup.tp_group if self.etp == self.tp else CommGroup.etp_group
        self.ep_group = CommGroup.ep_group if self.etp == 1 else CommGroup.ep_tp_group
        # tokens each local expert of EP rank 0 (the busiest) processes: from every EP rank, and from every TP rank
        # as well when the tokens are gathered over (expert) TP
        gather = self.tp * self.ep if self.dispatcher == "allgather" else self.etp * self.ep
        self.expert_tokens = tuple(gather * n for n in self.routing.local_experts(0, self.ep))
        self.rows = sum(self.expert_tokens)
        """Rows the busiest rank's experts process (after the dispatch and the expert-TP gather)."""
        if self.deepep:
            self.deepep_rows = deepep_traffic(self.tokens, self.routing, self.experts, self.topk, self.ep, self.etp)
        # rows permutation 1 gathers (alltoall: this rank's routed copies; allgather: the gathered tokens' copies for
        # the local experts; flex: the received tokens' copies for the local experts)
        self.permuted = self.routing.send_tokens if self.dispatcher == "alltoall" else self.rows

    @property
    def gathered_tokens(self) -> int:
        """Tokens the allgather dispatcher holds after its gather over TP x EP."""
        return self.tokens * self.tp * self.ep

    def meta(self, layer: int, name: str) -> dict:
        r = self.routing
        return {**_meta(layer, "moe", "comm", name), "tokens_per_expert": r.per_expert, "recv_tokens": r.recv_tokens,
                "send_tokens": r.send_tokens, "capacity": r.capacity, "dropped": r.dropped}


class Router(MockedModule):
    """Top-k router: a replicated ``(experts, hidden)`` gate on the local tokens, then score, top-k and losses."""

    def __init__(self, ctx: MegatronContext, shape: MoEShape, layer: int) -> None:
        super().__init__(f"layers.{layer}.mlp.router")
        self.ctx, self.shape, self.layer = ctx, shape, layer
        self.params.append(MockedParam(f"{self.name}.weight", (shape.experts, shape.hidden), tp_sharded=False,
                                       sequence_parallel=ctx.sp))

    def _gemm(self, phase: str, kind: str) -> WorkItem:
        s = self.shape
        meta = {**_meta(self.layer, "moe", kind, self.name), "bf16": True, "routed": True}
        if s.router_dtype:
            meta["router_dtype"] = s.router_dtype
        if kind == "wgrad":
            meta.update(accumulate=self.ctx.wgrad_accumulate, grad_bytes=self.ctx.grad_bytes)
        return compute(f"{phase}.MoERouter.{self.name}", ((s.tokens, s.hidden), (s.hidden, s.experts)),
                       2.0 * s.tokens * s.hidden * s.experts, meta)

    def _route(self, phase: str) -> WorkItem:
        s = self.shape
        meta = {**_meta(self.layer, "moe", "moe_route", f"{self.name}.route"), "score": s.score, "topk": s.topk,
                "fused": s.router_fusion, "logits_bytes": s.probs_bytes, "probs_bytes": s.probs_bytes}
        for key, on in (("aux", s.aux), ("z_loss", s.z_loss), ("groups", s.groups), ("expert_bias", s.expert_bias),
                        ("capacity", s.capacity)):
            if on:
                meta[key] = on
        return compute(f"{phase}.MoERouter.{self.name}", ((s.tokens, s.experts),), None, meta)

    def build_forward(self, phase: str) -> list[WorkItem]:
        c, s, out = self.ctx, self.shape, []
        if c.compute:
            out += [self._gemm(phase, "gemm"), self._route(phase)]
        if c.tp > 1 and s.aux:  # the aux loss's per-expert counts over TP (x CP)
            out.append(comm(AR, CommGroup.tp_group, c.tp, s.experts * COUNT_BYTES, f"{phase}.MoERouter",
                            _meta(self.layer, "moe", "comm", self.name)))
        return out

    def build_backward(self) -> list[WorkItem]:
        if not self.ctx.compute:
            return []
        return [self._route("backward"), self._gemm("backward", "dgrad"), self._gemm("backward", "wgrad")]


class TokenDispatch(MockedModule):
    """One piece of the dispatch (``combine=False``) or the combine (``combine=True``): ``part`` ``head`` (up to the
    token all-to-all), ``tail`` (after it) or ``all``; the shared experts' overlap splits the dispatch and the
    combine at their all-to-alls so that the shared GEMMs can run beside them."""

    def __init__(self, ctx: MegatronContext, shape: MoEShape, layer: int, combine: bool, part: str = "all") -> None:
        suffix = "" if part == "all" else f".{part}"
        super().__init__(f"layers.{layer}.mlp.{'combine' if combine else 'dispatch'}{suffix}")
        self.ctx, self.shape, self.layer, self.combine, self.part = ctx, shape, layer, combine, part
        self.label = {"allgather": "MoEAllGatherTokenDispatcher", "flex": "MoEFlexTokenDispatcher"}.get(
            shape.dispatcher, "MoEAlltoAllTokenDispatcher")

    # ---- computation items ----------------------------------------------------------------------------

    def _op(self, phase: str, op: str, shapes, **extra) -> WorkItem:
        return compute(f"{phase}.{self.label}.{self.name}", shapes, None,
                       {**_meta(self.layer, "moe", op, self.name), **extra})

    def _permute(self, phase: str, rows_in: int, rows_out: int, probs: bool = True) -> WorkItem:
        s = self.shape
        return self._op(phase, "moe_permute", ((rows_in, s.hidden), (rows_out, s.hidden)), fused=s.fused_permute,
                        experts=s.experts if s.dispatcher == "alltoall" else s.local_experts, probs=probs,
                        probs_bytes=s.probs_bytes if s.dispatcher != "flex" else 4)

    def _unpermute(self, phase: str, rows: int, tokens: int) -> WorkItem:
        s = self.shape
        return self._op(phase, "moe_unpermute", ((rows, s.hidden), (tokens, s.hidden)), fused=s.fused_permute)

    def _sort(self, phase: str, probs: bool) -> WorkItem | None:
        s = self.shape
        if s.local_experts < 2 or s.dispatcher != "alltoall":
            return None
        return self._op(phase, "moe_sort_chunks", ((s.rows, s.hidden),), fused=s.fused_permute,
                        probs_bytes=s.probs_bytes if probs else 0)

    def _meta_item(self, phase: str) -> WorkItem:
        s = self.shape
        syncs = 2 if s.dispatcher == "flex" else 1
        copies = s.tokens * s.experts * s.etp * (1 + 4) if s.dispatcher == "flex" else 0
        return self._op(phase, "moe_dispatch_meta", ((s.tokens, s.experts),), dispatcher=s.dispatcher, syncs=syncs,
                        copies=copies)

    def _compute(self, phase: str, backward: bool) -> list[WorkItem]:
        """The computation items of this piece in execution order (forward; backward reverses the pieces and
        prices each item's backward)."""
        s = self.shape
        c = self.ctx
        if not c.compute:
            return []
        ph = "backward" if backward else phase
        if s.dispatcher == "allgather":
            n = s.gathered_tokens
            if not self.combine:  # after the gathers: the local map's slices and counts, then the permutation
                return ([] if backward else [self._meta_item(ph)]) + [self._permute(ph, n, s.rows)]
            return [self._unpermute(ph, s.rows, n)]
        if s.dispatcher == "flex":
            recv = s.deepep_rows.recv
            if not self.combine:
                head = [] if backward else [self._meta_item(ph)]
                tail = [self._permute(ph, recv, s.rows)]
                return {"head": head, "tail": tail}.get(self.part, head + tail)
            return [self._unpermute(ph, s.rows, recv)] if self.part != "tail" else []
        # alltoall
        if not self.combine:
            head = ([] if backward else [self._meta_item(ph)]) + [self._permute(ph, s.tokens, s.permuted)]
            tail = [x for x in (self._sort(ph, True),) if x is not None]
            return {"head": head, "tail": tail}.get(self.part, head + tail)
        head = [x for x in (self._sort(ph, False),) if x is not None]
        tail = [self._unpermute(ph, s.permuted, s.tokens)]
        return {"head": head, "tail": tail}.get(self.part, head + tail)

    # ---- communication items ---------------------------------------------------------------------------

    def _comms(self, phase: str, backward: bool) -> list[WorkItem]:
        """The collectives of this piece in forward order of the piece (backward: the mirror collectives in the
        order backward runs them)."""
        s = self.shape
        meta = s.meta(self.layer, self.name)
        stage = f"{phase}.{self.label}"
        if s.dispatcher == "allgather":
            group, n = CommGroup.ep_tp_group, s.tp * s.ep
            if n == 1 or self.part == ("tail" if not self.combine else "head"):
                return []
            hidden = s.gathered_tokens * s.token_bytes
            probs = s.gathered_tokens * s.experts * s.probs_bytes
            gather_side = self.combine == backward  # dispatch forward / combine backward gather
            if gather_side:
                out = [comm(AG, group, n, hidden, stage, meta)]
                if not self.combine:  # the routing map (bool) and probabilities
                    out = [comm(AG, group, n, s.gathered_tokens * s.experts, stage, meta),
                           comm(AG, group, n, probs, stage, meta)] + out
                return out
            # the outputs reduce-scattered in the probabilities' dtype (token_combine)
            out = [comm(RS, group, n, s.gathered_tokens * s.hidden * s.probs_bytes if self.combine else hidden, stage,
                        meta)]
            if not self.combine:
                out.append(comm(RS, group, n, probs, stage, meta))  # gradient of the gathered probabilities
            return out
        if s.dispatcher == "flex":
            n = s.ep * s.etp
            if n == 1 or self.part == "tail":
                return []
            rows = s.deepep_rows.busiest
            fp8 = not self.combine and not backward
            row_bytes = s.dispatch_token_bytes if fp8 else s.token_bytes
            if not self.combine:  # the top-k indices (int64) and fp32 probabilities ride with the tokens (their
                row_bytes += s.topk * (8 + 4) if not backward else s.topk * 4  # gradient: the probabilities')
            recv = s.routing.recv_tokens
            imbalance = recv[0] * len(recv) / sum(recv) if sum(recv) else 1.0
            # DeepEP's manager sees E x etp experts and top-k x etp (the routing map expanded over the ETP ranks)
            kind = "dispatch" if self.combine == backward else "combine"
            dmeta = {**meta, "deepep": (kind, s.tokens, row_bytes, s.experts * s.etp, s.topk * s.etp, imbalance),
                     "distinct_ranks": s.deepep_rows.distinct}
            return [comm(A2A, s.ep_group, n, rows * row_bytes, stage, dmeta)]
        # alltoall
        fp8 = not self.combine and not backward
        tokens_a2a = s.routing.busiest_tokens * (s.dispatch_token_bytes if fp8 else s.token_bytes)
        probs_a2a = s.routing.busiest_tokens * s.probs_bytes
        tp_rows = s.etp * max(s.routing.recv_tokens)
        etp_gather = self.combine == backward  # dispatch forward / combine backward gather over expert TP
        out: list[WorkItem] = []
        if s.ep > 1:
            a2a = [comm(A2A, CommGroup.ep_group, s.ep, tokens_a2a, stage, meta)]
            if not self.combine:
                a2a.append(comm(A2A, CommGroup.ep_group, s.ep, probs_a2a, stage, meta))
        else:
            a2a = []
        if s.etp > 1:
            etp = [comm(AG if etp_gather else RS, s.etp_group, s.etp, tp_rows * s.token_bytes, stage, meta)]
            if not self.combine:
                etp.append(comm(AG if etp_gather else RS, s.etp_group, s.etp, tp_rows * s.probs_bytes, stage, meta))
        else:
            etp = []
        if not self.combine and not backward and s.ep * s.etp > 1:
            n = s.ep * s.etp
            out.append(comm(AG, s.ep_group, n, n * s.experts * COUNT_BYTES, stage, {**meta, "counts": True}))
        if self.combine == backward:    # dispatch forward, combine backward: all-to-all, then gather
            return out + a2a + etp
        return out + etp + a2a          # combine forward, dispatch backward: scatter, then all-to-all

    def _overlapped(self, items: list[WorkItem]) -> list[WorkItem]:
        """Mark the token all-to-all as running beside the next computation (the shared expert's GEMM)."""
        out = []
        for item in items:
            if item.comm_type == A2A and item.comm_group in (CommGroup.ep_group, CommGroup.ep_tp_group):
                item = comm(item.comm_type, item.comm_group, item.comm_group_size, item.msg_size, item.stage,
                            {**(item.meta or {}), "overlap": "next"})
            out.append(item)
        return out

    def _items(self, phase: str, backward: bool) -> list[WorkItem]:
        comms = self._comms(phase, backward)
        compute_items = self._compute(phase, backward)
        s = self.shape
        if s.dispatcher == "allgather":
            gathering = self.combine == backward
            return comms + compute_items if gathering else compute_items + comms
        if not self.combine:
            # dispatch: metadata, count gather, permute, then all-to-all (and expert-TP gather), then sort
            if backward:
                # backward of the sort, the collectives, then the permute's backward
                sort = [i for i in compute_items if (i.meta or {}).get("op") == "moe_sort_chunks"]
                rest = [i for i in compute_items if i not in sort]
                return sort + comms + rest
            meta_items = [i for i in compute_items if (i.meta or {}).get("op") == "moe_dispatch_meta"]
            permute = [i for i in compute_items if (i.meta or {}).get("op") == "moe_permute"]
            sort = [i for i in compute_items if (i.meta or {}).get("op") == "moe_sort_chunks"]
            counts = [i for i in comms if (i.meta or {}).get("counts")]
            rest = [i for i in comms if i not in counts]
            if s.dispatcher == "flex":  # DeepEP: the fused dispatch, then the local permutation
                return meta_items + rest + permute
            if self.part == "head" and s.shared_overlap:
                rest = self._overlapped(rest)
            return meta_items + counts + permute + rest + sort
        # combine: sort back, (expert-TP scatter), all-to-all, unpermute
        if backward:
            unpermute = [i for i in compute_items if (i.meta or {}).get("op") == "moe_unpermute"]
            sort = [i for i in compute_items if i not in unpermute]
            return unpermute + comms + sort
        unpermute = [i for i in compute_items if (i.meta or {}).get("op") == "moe_unpermute"]
        sort = [i for i in compute_items if i not in unpermute]
        if self.part == "head" and s.shared_overlap:
            comms = self._overlapped(comms)
        return sort + comms + unpermute

    def build_forward(self, phase: str) -> list[WorkItem]:
        return self._items(phase, backward=False)

    def build_backward(self) -> list[WorkItem]:
        return self._items("backward", backward=True)


class Experts(MockedModule):
    """The ``experts / ep`` local experts: fc1 ``(ffn * (2 if SwiGLU) / etp, hidden)`` and fc2
    ``(hidden, ffn / etp)`` each, in the expert gradient buffer."""

    def __init__(self, ctx: MegatronContext, shape: MoEShape, layer: int) -> None:
        super().__init__(f"layers.{layer}.mlp.experts")
        self.ctx, self.shape, self.layer = ctx, shape, layer
        self.recompute_act = False
        self.fc1_out = (2 if shape.swiglu else 1) * shape.ffn // shape.etp
        self.fc2_in = shape.ffn // shape.etp
        for e in range(shape.local_experts):
            self.params.append(MockedParam(f"{self.name}.{e}.linear_fc1.weight", (self.fc1_out, shape.hidden), is_expert=True))
            self.params.append(MockedParam(f"{self.name}.{e}.linear_fc2.weight", (shape.hidden, self.fc2_in), is_expert=True))

    def _gemms(self, phase: str, fc: str, kinds: tuple[str, ...]) -> list[WorkItem]:
        s, h = self.shape, self.shape.hidden
        k, n = (h, self.fc1_out) if fc == "fc1" else (self.fc2_in, h)
        stage = f"{phase}.MoEExperts.{self.name}.{fc}"
        meta = self.ctx.linear_meta({**_meta(self.layer, "moe", "gemm", f"{self.name}.{fc}"),
                                     "tokens_per_expert": s.expert_tokens})
        out = []
        for kind in kinds:
            meta_k = {**meta, "op": kind}
            if kind == "wgrad":
                meta_k = wgrad_meta(self.ctx, meta_k)
            if s.grouped:
                total = sum(s.expert_tokens)
                out.append(compute(stage, ((total, k), (s.local_experts, k, n)), 2.0 * total * k * n, meta_k))
                continue
            meta_k = {key: v for key, v in meta_k.items() if key != "tokens_per_expert"}
            for t in s.expert_tokens:  # SequentialMLP: one GEMM per expert, in the training ops' shape conventions
                shapes = {"gemm": ((t, k), (k, n)), "dgrad": ((t, n), (n, k)), "wgrad": ((n, t), (t, k))}[kind]
                out.append(compute(stage, shapes, 2.0 * t * k * n, meta_k))
        return out

    def _act(self, phase: str) -> WorkItem:
        """The experts' activation weighted by each row's routing probability (Megatron-core's ``TEGroupedMLP.
        bias_act_func`` and, for SequentialMLP, ``MLP.forward`` with ``per_token_scale``): fused only for gated
        activations (``weighted_bias_swiglu_impl`` / ``weighted_bias_quick_geglu_impl`` under bias-activation fusion;
        Megatron refuses the fusion for a plain GeLU expert), otherwise the activation, the product with the
        probabilities and the cast back (:func:`mocked_model.compute.training_ops._activation_kernels`)."""
        s = self.shape
        return compute(f"{phase}.MoEExperts.{self.name}.activation", ((sum(s.expert_tokens), self.fc1_out),), None,
                       {**_meta(self.layer, "moe", "swiglu" if s.swiglu else "gelu", self.name),
                        "fused": self.ctx.stack.bias_act_fused and s.swiglu, "weighted": True,
                        "probs_bytes": s.probs_bytes})

    def _bias(self, phase: str) -> list[WorkItem]:
        """fc2's bias, added per expert after Transformer Engine's grouped GEMM (``TEGroupedMLP._apply_bias``; fc1's is
        fused into the activation); none without biases or without grouped GEMMs (a TE linear adds it in the GEMM)."""
        s = self.shape
        if not (self.ctx.bias and s.grouped):
            return []
        return [compute(f"{phase}.MoEExperts.{self.name}.fc2_bias", ((sum(s.expert_tokens), s.hidden),), None,
                        {**_meta(self.layer, "moe", "moe_expert_bias", f"{self.name}.fc2_bias"),
                         "experts": s.local_experts})]

    def build_forward(self, phase: str) -> list[WorkItem]:
        if not self.ctx.compute:
            return []
        return (self._gemms(phase, "fc1", ("gemm",)) + [self._act(phase)] + self._gemms(phase, "fc2", ("gemm",))
                + self._bias(phase))

    def build_backward(self) -> list[WorkItem]:
        if not self.ctx.compute:
            return []
        # --recompute_modules moe_act: the activation's forward again before fc2's backward needs its output
        # (TEGroupedMLP.activation_checkpoint, megatron/core/transformer/moe/experts.py)
        again = [self._act("recompute")] if self.recompute_act else []
        return (self._bias("backward") + again + self._gemms("backward", "fc2", ("dgrad", "wgrad")) + [self._act("backward")]
                + self._gemms("backward", "fc1", ("dgrad", "wgrad")))


class _SharedFc1(ColumnParallelLinear):
    """The shared experts' fc1 when it runs beside the dispatch all-to-all: its input's TP all-gather happens
    before the dispatch (``SharedExpertMLP.pre_forward_comm``), so it is left to :func:`moe_mlp`'s order."""

    def build_forward(self, phase: str) -> list[WorkItem]:
        return [i for i in super().build_forward(phase) if i.is_computation]


def _shared_experts(ctx: MegatronContext, job: JobConfig, layer: int, overlap: bool) -> list[MockedModule]:
    model = job.model
    h, ffn = model.hidden_size, model.n_shared_experts * model.moe_ffn_hidden_size
    fc1_out = 2 * ffn if model.swiglu else ffn
    p = f"layers.{layer}.mlp.shared_experts"
    fc1 = (_SharedFc1 if overlap else ColumnParallelLinear)(ctx, f"{p}.linear_fc1", h, fc1_out, False, layer, "moe")
    return [fc1,
            Elementwise(ctx, f"{p}.activation", "swiglu" if model.swiglu else "gelu", (ctx.seq, ctx.micro, fc1_out // ctx.tp),
                        layer, "moe", "MegatronActivation", fused=ctx.stack.bias_act_fused),
            RowParallelLinear(ctx, f"{p}.linear_fc2", ffn, h, False, layer, "moe")]


class _Items(MockedModule):
    """A leaf of fixed items (the shared experts' input all-gather moved ahead of the dispatch)."""

    def __init__(self, name: str, forward: list[WorkItem], backward: list[WorkItem]) -> None:
        super().__init__(name)
        self._forward, self._backward = forward, backward

    def build_forward(self, phase: str) -> list[WorkItem]:
        return list(self._forward) if phase == "forward" else [
            comm(i.comm_type, i.comm_group, i.comm_group_size, i.msg_size, i.stage.replace("forward", phase, 1), i.meta)
            for i in self._forward]

    def build_backward(self) -> list[WorkItem]:
        return list(self._backward)


def moe_mlp(ctx: MegatronContext, job: JobConfig, layer: int) -> list[MockedModule]:
    """The modules of an MoE MLP in ``MoELayer.forward``'s order: shared experts (unless overlapped), router,
    dispatch, experts, combine; with ``--moe_shared_expert_overlap`` the shared fc1 sits after the dispatch's
    all-to-all and the shared fc2 after the combine's."""
    shape = MoEShape(ctx, job)
    router = Router(ctx, shape, layer)
    experts = Experts(ctx, shape, layer)
    experts.recompute_act = job.training.recompute == "selective" and "moe_act" in job.training.recompute_modules
    if not job.model.n_shared_experts:
        return [router, TokenDispatch(ctx, shape, layer, combine=False), experts,
                TokenDispatch(ctx, shape, layer, combine=True)]
    shared = _shared_experts(ctx, job, layer, shape.shared_overlap)
    if not shape.shared_overlap:
        return [*shared, router, TokenDispatch(ctx, shape, layer, combine=False), experts,
                TokenDispatch(ctx, shape, layer, combine=True)]
    fc1, act, fc2 = shared
    gather: list[MockedModule] = []
    if ctx.tp > 1 and ctx.sp:
        item = comm(AG, CommGroup.tp_group, ctx.tp, ctx.act_bytes(job.model.hidden_size), "forward.MegatronColumnLinear",
                    _meta(layer, "moe", "comm", fc1.name))
        gather = [_Items(f"{fc1.name}.pre_forward_comm", [item], [])]
    return [router, *gather, TokenDispatch(ctx, shape, layer, False, "head"), fc1, act,
            TokenDispatch(ctx, shape, layer, False, "tail"), experts, TokenDispatch(ctx, shape, layer, True, "head"), fc2,
            TokenDispatch(ctx, shape, layer, True, "tail")]

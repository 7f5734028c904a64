"""The mocked MoE MLP of Megatron-LM core (``megatron/core/transformer/moe``): router, token
dispatch and combine, the local experts, and shared experts.

Communication per micro-batch and MoE layer, forward (backward mirrors it in reverse order):

- router: with tensor parallelism (hence sequence parallelism) the load-balancing loss all-reduces the
  per-expert token counts over TP (``switch_load_balancing_loss_func``; int64 per expert);
- all-to-all dispatcher (``MoEAlltoAllTokenDispatcher``): all-gather of the per-expert counts over EP
  (int64, no backward), all-to-all of the routed tokens over EP, all-gather of the received tokens over
  the expert-TP group; combine: reduce-scatter over expert TP, all-to-all back over EP;
- all-gather dispatcher (``MoEAllGatherTokenDispatcher``): all-gather of the hidden states, routing
  map (bool) and probabilities (fp32) over the TP x EP group; combine: reduce-scatter of the outputs;
- shared experts: a dense MLP with its own TP collectives.

Sizes: a rank dispatches ``T * topk`` token copies, ``T = seq * micro_batch / tp`` with SP, each
``hidden * dtype_bytes`` bytes (FP8 dispatch: ``hidden`` bytes plus fp32 scales per 128 values, as
DeepSeek-V3's 1x128 quantisation tiles).  An all-to-all item carries the busiest rank's traffic
(see :mod:`mocked_model.routing`) and records the per-expert token counts in ``meta``.
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
from mocked_model.routing import Routing, route
from utils.config import JobConfig
from utils.workload import CommGroup, CommType, WorkItem

AG, RS, AR, A2A = CommType.all_gather, CommType.reduce_scatter, CommType.all_reduce, CommType.all_to_all
COUNT_BYTES = 8  # per-expert token counts are int64


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
        self.tokens = ctx.seq_local * ctx.micro
        self.routing: Routing = route(self.tokens, self.experts, self.topk, self.ep, t.moe_routing_skew,
                                      t.moe_expert_capacity_factor, t.moe_pad_expert_input_to_capacity)
        self.token_bytes = model.hidden_size * ctx.dtype_bytes
        self.dispatch_token_bytes = fp8_token_bytes(model.hidden_size) if t.moe_fp8_dispatch else self.token_bytes
        self.grouped = t.moe_grouped_gemm
        # tokens each local expert of EP rank 0 (the busiest) processes: from every EP rank, and from
        # every TP rank as well when the tokens are gathered over (expert) TP
        gather = self.tp * self.ep if self.dispatcher == "allgather" else self.etp * self.ep
        self.expert_tokens = tuple(gather * n for n in self.routing.local_experts(0, self.ep))

    def meta(self, layer: int, name: str) -> dict:
        r = self.routing
        return {**_meta(layer, "moe", "comm", name), "tokens_per_expert": r.per_expert, "recv_tokens": r.recv_tokens,
                "send_tokens": r.send_tokens, "capacity": r.capacity, "dropped": r.dropped}


class Router(MockedModule):
    """Top-k router: a replicated ``(experts, hidden)`` gate on the local tokens."""

    def __init__(self, ctx: MegatronContext, shape: MoEShape, layer: int) -> None:
        super().__init__(f"layers.{layer}.mlp.router")
        self.ctx, self.shape, self.layer = ctx, shape, layer
        self.params.append(MockedParam(f"{self.name}.weight", (shape.experts, shape.hidden), tp_sharded=False,
                                       sequence_parallel=ctx.sp))

    def _gemm(self, phase: str, kind: str) -> WorkItem:
        s = self.shape
        return compute(f"{phase}.MoERouter.{self.name}", ((s.tokens, s.hidden), (s.hidden, s.experts)),
                       2.0 * s.tokens * s.hidden * s.experts,
                       {**_meta(self.layer, "moe", kind, self.name), "bf16": True, "accumulate": self.ctx.wgrad_accumulate,
                        "grad_bytes": self.ctx.grad_bytes} if kind == "wgrad" else
                       {**_meta(self.layer, "moe", kind, self.name), "bf16": True})

    def build_forward(self, phase: str) -> list[WorkItem]:
        c, s, out = self.ctx, self.shape, []
        if c.compute:
            out.append(self._gemm(phase, "gemm"))
        if c.tp > 1:
            out.append(comm(AR, CommGroup.tp_group, c.tp, s.experts * COUNT_BYTES, f"{phase}.MoERouter",
                            _meta(self.layer, "moe", "comm", self.name)))
        return out

    def build_backward(self) -> list[WorkItem]:
        return [self._gemm("backward", "dgrad"), self._gemm("backward", "wgrad")] if self.ctx.compute else []


class TokenDispatch(MockedModule):
    """Dispatch (``combine=False``) or combine (``combine=True``) of the routed tokens."""

    def __init__(self, ctx: MegatronContext, shape: MoEShape, layer: int, combine: bool) -> None:
        super().__init__(f"layers.{layer}.mlp.{'combine' if combine else 'dispatch'}")
        self.ctx, self.shape, self.layer, self.combine = ctx, shape, layer, combine
        self.label = "MoEAllGatherTokenDispatcher" if shape.dispatcher == "allgather" else "MoEAlltoAllTokenDispatcher"

    def _items(self, phase: str, backward: bool) -> list[WorkItem]:
        s = self.shape
        meta = s.meta(self.layer, self.name)
        stage = f"{phase}.{self.label}"
        if s.dispatcher == "allgather":
            group, n = CommGroup.ep_tp_group, s.tp * s.ep
            if n == 1:
                return []
            hidden = s.tokens * n * s.token_bytes
            probs = s.tokens * n * s.experts * 4
            gather_side = self.combine == backward  # dispatch forward / combine backward gather
            if gather_side:
                out = [comm(AG, group, n, hidden, stage, meta)]
                if not self.combine:  # the routing map (bool) and probabilities (fp32)
                    out += [comm(AG, group, n, s.tokens * n * s.experts, stage, meta), comm(AG, group, n, probs, stage, meta)]
                return out
            out = [comm(RS, group, n, hidden, stage, meta)]
            if not self.combine:
                out.append(comm(RS, group, n, probs, stage, meta))  # gradient of the gathered probabilities
            return out
        out: list[WorkItem] = []
        fp8 = not self.combine and not backward
        a2a_bytes = s.routing.busiest_tokens * (s.dispatch_token_bytes if fp8 else s.token_bytes)
        tp_bytes = s.etp * max(s.routing.recv_tokens) * s.token_bytes
        expert_tp = [comm(RS if self.combine != backward else AG, CommGroup.tp_group, s.etp, tp_bytes, stage, meta)] \
            if s.etp > 1 else []
        a2a = [comm(A2A, CommGroup.ep_group, s.ep, a2a_bytes, stage, meta)] if s.ep > 1 else []
        if not self.combine and not backward and s.ep > 1:
            out.append(comm(AG, CommGroup.ep_group, s.ep, s.ep * s.experts * COUNT_BYTES, stage, meta))
        if self.combine == backward:    # dispatch forward, combine backward: all-to-all, then gather
            return out + a2a + expert_tp
        return out + expert_tp + a2a    # combine forward, dispatch backward: scatter, then all-to-all

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
            else:
                out += [compute(stage, ((t, k), (k, n)), 2.0 * t * k * n, meta_k) for t in s.expert_tokens]
        return out

    def _act(self, phase: str) -> WorkItem:
        s = self.shape
        return compute(f"{phase}.MoEExperts.{self.name}.activation", ((sum(s.expert_tokens), self.fc1_out),), None,
                       {**_meta(self.layer, "moe", "swiglu" if s.swiglu else "gelu", self.name),
                        "fused": self.ctx.stack.bias_act_fused})

    def build_forward(self, phase: str) -> list[WorkItem]:
        if not self.ctx.compute:
            return []
        return self._gemms(phase, "fc1", ("gemm",)) + [self._act(phase)] + self._gemms(phase, "fc2", ("gemm",))

    def build_backward(self) -> list[WorkItem]:
        if not self.ctx.compute:
            return []
        return (self._gemms("backward", "fc2", ("dgrad", "wgrad")) + [self._act("backward")]
                + self._gemms("backward", "fc1", ("dgrad", "wgrad")))


def moe_mlp(ctx: MegatronContext, job: JobConfig, layer: int) -> list[MockedModule]:
    """The modules of an MoE MLP in forward order: router, dispatch, experts, combine, shared experts."""
    shape = MoEShape(ctx, job)
    modules: list[MockedModule] = [Router(ctx, shape, layer), TokenDispatch(ctx, shape, layer, combine=False),
                                   Experts(ctx, shape, layer), TokenDispatch(ctx, shape, layer, combine=True)]
    model = job.model
    if model.n_shared_experts:
        h, ffn = model.hidden_size, model.n_shared_experts * model.moe_ffn_hidden_size
        fc1_out = 2 * ffn if model.swiglu else ffn
        p = f"layers.{layer}.mlp.shared_experts"
        modules += [
            ColumnParallelLinear(ctx, f"{p}.linear_fc1", h, fc1_out, False, layer, "moe"),
            Elementwise(ctx, f"{p}.activation", "swiglu" if model.swiglu else "gelu", (ctx.seq, ctx.micro, fc1_out // ctx.tp),
                        layer, "moe", "MegatronActivation", fused=ctx.stack.bias_act_fused),
            RowParallelLinear(ctx, f"{p}.linear_fc2", ffn, h, False, layer, "moe"),
        ]
    return modules

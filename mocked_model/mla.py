"""Multi-head latent attention (DeepSeek-V2/V3) as Megatron-LM core builds it
(``megatron/core/transformer/multi_latent_attention.py`` with the TE layer spec).

The query and key/value down projections are duplicated linears (whole on every TP rank, run on the
local tokens; under SP their gradients join the TP all-reduce of replicated parameters), followed by
norms over the compressed widths and column-parallel up projections, whose forward all-gathers the
compressed input under SP (backward: reduce-scatter; without SP backward all-reduces it).  The rotary
part of the key (``qk_pos_emb_head_dim`` per token) is all-gathered over TP under SP.  Heads see
queries and keys of ``qk_head_dim + qk_pos_emb_head_dim`` and values of ``v_head_dim``; the output
projection is row parallel.  Without ``q_lora_rank`` (V2-Lite) the query is one column-parallel
projection of the hidden state.
"""

from __future__ import annotations

from mocked_model.base import MockedModule, MockedParam, comm, compute
from mocked_model.context_parallel import core_attention
from mocked_model.megatron_layers import (
    ColumnParallelLinear,
    MegatronContext,
    RecomputeForward,
    RowParallelLinear,
    _meta,
    norm,
    wgrad_meta,
)
from utils.config import JobConfig
from utils.workload import CommGroup, CommType, WorkItem


class DuplicatedLinear(MockedModule):
    """A linear layer held whole by every TP rank, applied to the rank's own tokens."""

    def __init__(self, ctx: MegatronContext, name: str, in_size: int, out_size: int, layer: int) -> None:
        super().__init__(name)
        self.ctx, self.in_size, self.out_size, self.layer = ctx, in_size, out_size, layer
        self.params.append(MockedParam(f"{name}.weight", (out_size, in_size), tp_sharded=False, sequence_parallel=ctx.sp))

    def _gemm(self, phase: str, shapes, kind: str) -> WorkItem:
        c = self.ctx
        flops = 2.0 * c.seq_local * c.micro * self.in_size * self.out_size
        meta = c.linear_meta(_meta(self.layer, "attention", kind, self.name))
        return compute(f"{phase}.MegatronLinear.{self.name}", shapes, flops,
                       wgrad_meta(c, meta) if kind == "wgrad" else meta)

    def build_forward(self, phase: str) -> list[WorkItem]:
        c = self.ctx
        if not c.compute:
            return []
        return [self._gemm(phase, ((c.seq_local, c.micro, self.in_size), (self.in_size, self.out_size)), "gemm")]

    def build_backward(self) -> list[WorkItem]:
        c = self.ctx
        if not c.compute:
            return []
        tokens = c.seq_local * c.micro
        return [self._gemm("backward", ((c.seq_local, c.micro, self.out_size), (self.out_size, self.in_size)), "dgrad"),
                self._gemm("backward", ((self.out_size, tokens), (tokens, self.in_size)), "wgrad")]


class RotaryKeyGather(MockedModule):
    """All-gather over TP of the rotary key part under SP (backward: reduce-scatter)."""

    def __init__(self, ctx: MegatronContext, name: str, width: int, layer: int) -> None:
        super().__init__(name)
        self.ctx, self.width, self.layer = ctx, width, layer

    def _items(self, ctype: CommType, phase: str) -> list[WorkItem]:
        c = self.ctx
        if c.tp == 1 or not c.sp:
            return []
        return [comm(ctype, CommGroup.tp_group, c.tp, c.act_bytes(self.width), f"{phase}.MLASelfAttention",
                     _meta(self.layer, "attention", "comm", self.name))]

    def build_forward(self, phase: str) -> list[WorkItem]:
        return self._items(CommType.all_gather, phase)

    def build_backward(self) -> list[WorkItem]:
        return self._items(CommType.reduce_scatter, "backward")


def mla_attention(ctx: MegatronContext, job: JobConfig, layer: int, selective_recompute: bool,
                  recompute_up_proj: bool = False) -> list[MockedModule]:
    """The attention modules of one MLA layer, in forward order (after the input norm).  ``recompute_up_proj``
    (``--recompute_modules mla_up_proj``): ``qkv_up_proj_and_rope_apply`` runs under ``CheckpointWithoutOutput``, whose
    outputs are discarded after core attention and recomputed when the gradient of core attention's output arrives
    (the hook on ``core_attn_out``): after ``linear_proj``'s backward, before core attention's."""
    m = job.model
    h, heads, p = m.hidden_size, m.num_attention_heads, f"layers.{layer}.self_attention"
    q_head = m.qk_head_dim + m.qk_pos_emb_head_dim
    modules: list[MockedModule] = []
    up: list[MockedModule] = []  # the norms and up projections of qkv_up_proj_and_rope_apply
    if m.q_lora_rank:
        q_up = [norm(ctx, f"{p}.q_layernorm", "RMSNorm", m.q_lora_rank, layer, "attention"),
                ColumnParallelLinear(ctx, f"{p}.linear_q_up_proj", m.q_lora_rank, heads * q_head, False, layer,
                                     "attention")]
        modules += [DuplicatedLinear(ctx, f"{p}.linear_q_down_proj", h, m.q_lora_rank, layer), *q_up]
        up += q_up
    else:
        q_proj = ColumnParallelLinear(ctx, f"{p}.linear_q_proj", h, heads * q_head, False, layer, "attention")
        modules.append(q_proj)
        up.append(q_proj)
    kv_up = [norm(ctx, f"{p}.kv_layernorm", "RMSNorm", m.kv_lora_rank, layer, "attention"),
             ColumnParallelLinear(ctx, f"{p}.linear_kv_up_proj", m.kv_lora_rank, heads * (m.qk_head_dim + m.v_head_dim),
                                  False, layer, "attention")]
    up += kv_up
    modules += [
        DuplicatedLinear(ctx, f"{p}.linear_kv_down_proj", h, m.kv_lora_rank + m.qk_pos_emb_head_dim, layer),
        RotaryKeyGather(ctx, f"{p}.k_pos_emb", m.qk_pos_emb_head_dim, layer),
        *kv_up,
        core_attention(ctx, f"{p}.core_attention", heads, heads, q_head, layer, selective_recompute, v_head_dim=m.v_head_dim,
                       window=m.attention_window(layer)),
    ]
    if recompute_up_proj:
        modules.append(RecomputeForward(f"{p}.qkv_up_checkpoint", up))
    modules.append(RowParallelLinear(ctx, f"{p}.linear_proj", heads * m.v_head_dim, h, False, layer, "attention"))
    return modules

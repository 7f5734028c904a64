"""The mocked Megatron-LM GPT/LLaMA model: one rank's share of one pipeline (virtual) stage.

Communication follows Megatron-LM core (``megatron/core/tensor_parallel/layers.py`` and
``mappings.py``, ``megatron/core/models/gpt``):

- Column-parallel linear: forward all-gathers its input over TP under sequence parallelism (SP);
  backward re-gathers the input for the weight gradient (SP), computes the input gradient, then
  reduce-scatters it (SP) or all-reduces it (no SP), then computes the weight gradient.
- Row-parallel linear: forward reduce-scatters (SP) or all-reduces (no SP) its output; backward
  all-gathers the output gradient under SP.
- Vocab-parallel embedding: all-reduce of the output, or reduce-scatter under SP when there is no
  learned position embedding (Megatron's ``reduce_scatter_embeddings``); with learned positions and
  SP it all-reduces and scatters (backward: all-gather).
- Vocab-parallel cross entropy: three all-reduces of ``seq * micro_batch`` fp32 values (max logit,
  target logit, sum of exponentials).

A TP collective moves the whole activation: ``seq * micro_batch * width * dtype_bytes`` bytes (for
an all-gather the gathered buffer, for a reduce-scatter the buffer before scattering).
"""

from __future__ import annotations

from dataclasses import dataclass

from mocked_model.base import MockedModule, MockedParam, comm, compute
from utils.config import JobConfig
from utils.workload import CommGroup, CommType, WorkItem

AG, RS, AR, BC = CommType.all_gather, CommType.reduce_scatter, CommType.all_reduce, CommType.broadcast
TP = CommGroup.tp_group


@dataclass(frozen=True)
class MegatronContext:
    """Per-rank sizes every mocked Megatron module needs."""

    tp: int
    sp: bool
    seq: int
    micro: int
    hidden: int
    dtype_bytes: int
    compute: bool
    dp: int = 1

    @property
    def tokens(self) -> int:
        """Tokens of one micro-batch on this rank after gathering (``seq * micro_batch``)."""
        return self.seq * self.micro

    @property
    def seq_local(self) -> int:
        """Sequence length held between layers: ``seq / tp`` under SP."""
        return self.seq // self.tp if self.sp else self.seq

    def act_bytes(self, width: int) -> int:
        """Bytes of a full ``(seq, micro_batch, width)`` activation."""
        return self.seq * self.micro * width * self.dtype_bytes

    @classmethod
    def of(cls, job: JobConfig) -> MegatronContext:
        p, t = job.parallel, job.training
        return cls(tp=p.tp, sp=p.sequence_parallel, seq=t.seq_length, micro=p.micro_batch,
                   hidden=job.model.hidden_size, dtype_bytes=t.dtype_bytes, compute=t.computation_enable, dp=p.dp)


def _meta(layer: int | None, sub: str, op: str, name: str) -> dict:
    return {"layer": layer, "sub": sub, "op": op, "name": name}


class ColumnParallelLinear(MockedModule):
    """Megatron ``ColumnParallelLinear``: weight ``(out / tp, in)``."""

    def __init__(self, ctx: MegatronContext, name: str, in_size: int, out_size: int, bias: bool, layer: int | None,
                 sub: str, label: str = "MegatronColumnLinear", weight: MockedParam | None | bool = True) -> None:
        super().__init__(name)
        self.ctx, self.in_size, self.layer, self.sub, self.label = ctx, in_size, layer, sub, label
        self.out_part = out_size // ctx.tp
        if weight is True:
            self.params.append(MockedParam(f"{name}.weight", (self.out_part, in_size)))
        elif isinstance(weight, MockedParam):
            self.params.append(weight)
        if bias:
            self.params.append(MockedParam(f"{name}.bias", (self.out_part,)))

    def _gemm(self, phase: str, shapes, kind: str) -> WorkItem:
        flops = 2.0 * self.ctx.tokens * self.in_size * self.out_part
        return compute(f"{phase}.{self.label}.{self.name}", shapes, flops, _meta(self.layer, self.sub, kind, self.name))

    def _tp_comm(self, ctype: CommType, phase: str) -> WorkItem:
        return comm(ctype, TP, self.ctx.tp, self.ctx.act_bytes(self.in_size), f"{phase}.{self.label}",
                    _meta(self.layer, self.sub, "comm", self.name))

    def build_forward(self, phase: str) -> list[WorkItem]:
        c, out = self.ctx, []
        if c.tp > 1 and c.sp:
            out.append(self._tp_comm(AG, phase))
        if c.compute:
            out.append(self._gemm(phase, ((c.seq, c.micro, self.in_size), (self.in_size, self.out_part)), "gemm"))
        return out

    def build_backward(self) -> list[WorkItem]:
        c, out = self.ctx, []
        if c.tp > 1 and c.sp:
            out.append(self._tp_comm(AG, "backward"))  # re-gather the input for the weight gradient
        if c.compute:
            out.append(self._gemm("backward", ((c.seq, c.micro, self.out_part), (self.out_part, self.in_size)), "dgrad"))
        if c.tp > 1:
            out.append(self._tp_comm(RS if c.sp else AR, "backward"))
        if c.compute:
            out.append(self._gemm("backward", ((self.out_part, c.tokens), (c.tokens, self.in_size)), "wgrad"))
        return out


class RowParallelLinear(MockedModule):
    """Megatron ``RowParallelLinear``: weight ``(out, in / tp)``; its bias is whole on every rank."""

    def __init__(self, ctx: MegatronContext, name: str, in_size: int, out_size: int, bias: bool, layer: int | None,
                 sub: str, label: str = "MegatronRowLinear") -> None:
        super().__init__(name)
        self.ctx, self.out_size, self.layer, self.sub, self.label = ctx, out_size, layer, sub, label
        self.in_part = in_size // ctx.tp
        self.params.append(MockedParam(f"{name}.weight", (out_size, self.in_part)))
        if bias:
            self.params.append(MockedParam(f"{name}.bias", (out_size,), tp_sharded=False, sequence_parallel=ctx.sp))

    def _gemm(self, phase: str, shapes, kind: str) -> WorkItem:
        flops = 2.0 * self.ctx.tokens * self.in_part * self.out_size
        return compute(f"{phase}.{self.label}.{self.name}", shapes, flops, _meta(self.layer, self.sub, kind, self.name))

    def _tp_comm(self, ctype: CommType, phase: str) -> WorkItem:
        return comm(ctype, TP, self.ctx.tp, self.ctx.act_bytes(self.out_size), f"{phase}.{self.label}",
                    _meta(self.layer, self.sub, "comm", self.name))

    def build_forward(self, phase: str) -> list[WorkItem]:
        c, out = self.ctx, []
        if c.compute:
            out.append(self._gemm(phase, ((c.seq, c.micro, self.in_part), (self.in_part, self.out_size)), "gemm"))
        if c.tp > 1:
            out.append(self._tp_comm(RS if c.sp else AR, phase))
        return out

    def build_backward(self) -> list[WorkItem]:
        c, out = self.ctx, []
        if c.tp > 1 and c.sp:
            out.append(self._tp_comm(AG, "backward"))
        if c.compute:
            out.append(self._gemm("backward", ((c.seq, c.micro, self.out_size), (self.out_size, self.in_part)), "dgrad"))
            out.append(self._gemm("backward", ((self.out_size, c.tokens), (c.tokens, self.in_part)), "wgrad"))
        return out


class Elementwise(MockedModule):
    """A memory-bound operation (norm, activation) that only contributes computation items.

    ``params`` (norm weights) are whole on every TP rank and, under SP, reduced over TP.
    """

    def __init__(self, ctx: MegatronContext, name: str, op: str, shape: tuple[int, ...], layer: int | None, sub: str,
                 label: str, params: list[MockedParam] | None = None) -> None:
        super().__init__(name)
        self.ctx, self.op, self.shape, self.layer, self.sub, self.label = ctx, op, shape, layer, sub, label
        self.params.extend(params or [])

    def _item(self, phase: str) -> WorkItem:
        return compute(f"{phase}.{self.label}.{self.name}", (self.shape,), None, _meta(self.layer, self.sub, self.op, self.name))

    def build_forward(self, phase: str) -> list[WorkItem]:
        return [self._item(phase)] if self.ctx.compute else []

    def build_backward(self) -> list[WorkItem]:
        return [self._item("backward")] if self.ctx.compute else []


def norm(ctx: MegatronContext, name: str, kind: str, width: int, layer: int | None, sub: str) -> Elementwise:
    """LayerNorm (weight and bias) or RMSNorm (weight) over ``width``, on the local sequence."""
    params = [MockedParam(f"{name}.weight", (width,), tp_sharded=False, sequence_parallel=ctx.sp)]
    if kind == "LayerNorm":
        params.append(MockedParam(f"{name}.bias", (width,), tp_sharded=False, sequence_parallel=ctx.sp))
    return Elementwise(ctx, name, "norm", (ctx.seq_local, ctx.micro, width), layer, sub, f"Megatron{kind}", params)


class CoreAttention(MockedModule):
    """Softmax(QK^T)V over this rank's heads: ``4 * b * heads * s^2 * head_dim`` FLOPs forward (the
    full square, as Megatron's FLOP count states it), twice that backward."""

    def __init__(self, ctx: MegatronContext, name: str, heads: int, groups: int, head_dim: int, layer: int | None,
                 recompute: bool, v_head_dim: int | None = None) -> None:
        super().__init__(name)
        self.ctx, self.layer, self.recompute = ctx, layer, recompute
        self.heads, self.groups, self.head_dim = heads // ctx.tp, max(groups // ctx.tp, 1), head_dim
        self.v_dim = v_head_dim or head_dim
        self.flops = 2.0 * ctx.micro * self.heads * ctx.seq * ctx.seq * (head_dim + self.v_dim)

    def _item(self, phase: str, flops: float) -> WorkItem:
        c = self.ctx
        shapes = ((c.micro, self.heads, c.seq, self.head_dim), (c.micro, self.groups, c.seq, self.head_dim))
        return compute(f"{phase}.MegatronCoreAttention.{self.name}", shapes, flops,
                       _meta(self.layer, "attention", "attention", self.name))

    def build_forward(self, phase: str) -> list[WorkItem]:
        return [self._item(phase, self.flops)] if self.ctx.compute else []

    def build_backward(self) -> list[WorkItem]:
        if not self.ctx.compute:
            return []
        out = [self._item("recompute", self.flops)] if self.recompute else []
        out.append(self._item("backward", 2 * self.flops))
        return out


class VocabEmbedding(MockedModule):
    """Word embedding ``(vocab / tp, hidden)`` plus learned positions ``(max_positions, hidden)``."""

    def __init__(self, ctx: MegatronContext, job: JobConfig) -> None:
        super().__init__("embedding")
        model = job.model
        self.ctx = ctx
        self.word = MockedParam("embedding.word_embeddings.weight", (job.padded_vocab_size // ctx.tp, model.hidden_size))
        self.params.append(self.word)
        self.positions = model.position_embedding_type == "learned_absolute"
        if self.positions:
            self.params.append(MockedParam("embedding.position_embeddings.weight",
                                           (model.max_position_embeddings, model.hidden_size), tp_sharded=False))

    def _comm(self, ctype: CommType, phase: str) -> WorkItem:
        return comm(ctype, TP, self.ctx.tp, self.ctx.act_bytes(self.ctx.hidden), f"{phase}.MegatronEmbedding",
                    _meta(None, "embedding", "comm", self.name))

    def _lookup(self, phase: str) -> WorkItem:
        c = self.ctx
        return compute(f"{phase}.MegatronEmbedding.embedding", ((c.seq, c.micro), self.word.shape), None,
                       _meta(None, "embedding", "embedding", self.name))

    def build_forward(self, phase: str) -> list[WorkItem]:
        c = self.ctx
        out = [self._lookup(phase)] if c.compute else []
        if c.tp > 1:
            # reduce_scatter_embeddings only without learned positions; otherwise all-reduce, then a
            # local scatter to the sequence-parallel region.
            out.append(self._comm(RS if c.sp and not self.positions else AR, phase))
        return out

    def build_backward(self) -> list[WorkItem]:
        c = self.ctx
        out = [self._comm(AG, "backward")] if c.tp > 1 and c.sp else []
        if c.compute:
            out.append(self._lookup("backward"))
        return out


class VocabParallelLoss(MockedModule):
    """Vocab-parallel cross entropy and the data-parallel loss report of Megatron's ``loss_func``."""

    def __init__(self, ctx: MegatronContext, vocab_part: int) -> None:
        super().__init__("loss")
        self.ctx, self.vocab_part = ctx, vocab_part

    def build_forward(self, phase: str) -> list[WorkItem]:
        c, out = self.ctx, []
        if c.compute:
            out.append(compute(f"{phase}.VocabParallelCrossEntropy.loss", ((c.seq, c.micro, self.vocab_part),), None,
                               _meta(None, "loss", "loss", "loss")))
        if c.tp > 1:
            for _ in range(3):  # max logit, target logit, sum of exp: fp32 per token
                out.append(comm(AR, TP, c.tp, c.tokens * 4, f"{phase}_step._VocabParallelCrossEntropy",
                                _meta(None, "loss", "comm", "loss")))
        if c.dp > 1 and phase == "forward":
            # loss_func: all_reduce([sum of losses, token count]) in fp32 over data parallel
            out.append(comm(AR, CommGroup.dp_group, c.dp, 8, "forward_step.loss_func", _meta(None, "loss", "comm", "loss")))
        return out

    def build_backward(self) -> list[WorkItem]:
        c = self.ctx
        if not c.compute:
            return []
        return [compute("backward.VocabParallelCrossEntropy.loss", ((c.seq, c.micro, self.vocab_part),), None,
                        _meta(None, "loss", "loss", "loss"))]


class TransformerLayer(MockedModule):
    """Pre-norm transformer layer: norm, QKV, core attention, projection, norm, MLP."""

    def __init__(self, ctx: MegatronContext, job: JobConfig, layer: int) -> None:
        super().__init__(f"layers.{layer}")
        model, recompute = job.model, job.training.recompute
        self.layer, self.full_recompute = layer, recompute == "full"
        h, p = model.hidden_size, f"layers.{layer}"
        self.attention_part = [
            norm(ctx, f"{p}.input_layernorm", model.normalization, h, layer, "attention"),
            *self._attention(ctx, job, layer, recompute == "selective"),
        ]
        self.mlp_part = [
            norm(ctx, f"{p}.pre_mlp_layernorm", model.normalization, h, layer,
                 "moe" if model.is_moe_layer(layer) else "mlp"),
            *self._mlp(ctx, job, layer),
        ]
        self.children = self.attention_part + self.mlp_part

    def _attention(self, ctx: MegatronContext, job: JobConfig, layer: int, selective: bool) -> list[MockedModule]:
        model = job.model
        if model.multi_latent_attention:
            from mocked_model.mla import mla_attention

            return mla_attention(ctx, job, layer, selective)
        h, kv, bias, p = model.hidden_size, model.kv_channels, model.add_bias_linear, f"layers.{layer}.self_attention"
        q_size = model.num_attention_heads * kv
        qkv_size = q_size + 2 * model.query_groups * kv
        modules: list[MockedModule] = [
            ColumnParallelLinear(ctx, f"{p}.linear_qkv", h, qkv_size, bias or model.add_qkv_bias, layer, "attention"),
        ]
        if model.qk_layernorm:
            modules.append(Elementwise(ctx, f"{p}.qk_layernorm", "norm", (ctx.seq, ctx.micro, qkv_size // ctx.tp), layer,
                                       "attention", "MegatronQKLayerNorm", params=[
                MockedParam(f"{p}.q_layernorm.weight", (kv,), tp_sharded=False, sequence_parallel=True),
                MockedParam(f"{p}.k_layernorm.weight", (kv,), tp_sharded=False, sequence_parallel=True)]))
        modules.append(CoreAttention(ctx, f"{p}.core_attention", model.num_attention_heads, model.query_groups, kv, layer,
                                     selective))
        modules.append(RowParallelLinear(ctx, f"{p}.linear_proj", q_size, h, bias, layer, "attention"))
        return modules

    def _mlp(self, ctx: MegatronContext, job: JobConfig, layer: int) -> list[MockedModule]:
        model = job.model
        if model.is_moe_layer(layer):
            from mocked_model.moe import moe_mlp

            return moe_mlp(ctx, job, layer)
        h, ffn, p = model.hidden_size, model.ffn_hidden_size, f"layers.{layer}.mlp"
        fc1_out = 2 * ffn if model.swiglu else ffn
        act = "swiglu" if model.swiglu else "gelu"
        return [
            ColumnParallelLinear(ctx, f"{p}.linear_fc1", h, fc1_out, model.add_bias_linear, layer, "mlp"),
            Elementwise(ctx, f"{p}.activation", act, (ctx.seq, ctx.micro, fc1_out // ctx.tp), layer, "mlp",
                        "MegatronActivation"),
            RowParallelLinear(ctx, f"{p}.linear_fc2", ffn, h, model.add_bias_linear, layer, "mlp"),
        ]

    def backward_segments(self) -> list[tuple[MockedModule, list[WorkItem]]]:
        # full recomputation replays the layer's forward (with its TP collectives) before backward
        segments = super().backward_segments()
        if self.full_recompute:
            segments.insert(0, (self, self.forward_items("recompute")))
        return segments


class MegatronChunk(MockedModule):
    """The modules of one (virtual) pipeline stage: embedding on the first, transformer layers, and
    final norm, output layer and loss on the last.

    ``first_layer`` is the global index of the first transformer layer (0-based).  With tied
    embeddings the last stage of a pipeline holds its own copy of the word embedding as the output
    weight (Megatron allocates it there and keeps it in sync through the embedding group).
    """

    def __init__(self, job: JobConfig, first_layer: int, num_layers: int, pre_process: bool, post_process: bool,
                 ctx: MegatronContext | None = None, layer_factory=None) -> None:
        super().__init__("chunk")
        ctx = ctx or MegatronContext.of(job)
        model = job.model
        self.ctx, self.pre_process, self.post_process = ctx, pre_process, post_process
        self.first_layer, self.num_layers = first_layer, num_layers
        factory = layer_factory or TransformerLayer
        self.embedding = VocabEmbedding(ctx, job) if pre_process else None
        self.layers = [factory(ctx, job, first_layer + i) for i in range(num_layers)]
        children: list[MockedModule] = ([self.embedding] if self.embedding else []) + list(self.layers)
        if post_process:
            tied = not model.untie_embeddings_and_output_weights
            if not tied:
                weight: MockedParam | bool = True
            elif pre_process:
                weight = False  # the embedding's own weight
            else:
                weight = MockedParam("output_layer.weight", (job.padded_vocab_size // ctx.tp, model.hidden_size),
                                     shared_copy=True)
            children.append(norm(ctx, "final_layernorm", model.normalization, model.hidden_size, None, "output"))
            children.append(ColumnParallelLinear(ctx, "output_layer", model.hidden_size, job.padded_vocab_size, False,
                                                 None, "output", label="MegatronOutputLayer", weight=weight))
            children.append(VocabParallelLoss(ctx, job.padded_vocab_size // ctx.tp))
        self.children = children

    @property
    def shares_embedding(self) -> bool:
        """Whether this chunk holds a tied word-embedding weight (first or last stage, tied)."""
        return any(p.name.endswith("word_embeddings.weight") or p.shared_copy for p in self.parameters())


def chunk_layout(job: JobConfig, pp_rank: int) -> list[tuple[int, int, bool, bool]]:
    """``(first_layer, num_layers, pre_process, post_process)`` of each model chunk of a pipeline rank.

    Without interleaving a rank has one chunk holding its stage's layers.  With
    ``--num_layers_per_virtual_pipeline_stage L`` it has ``v = layers_per_stage / L`` chunks; chunk
    ``c`` of rank ``r`` is virtual stage ``c * pp + r`` and holds layers ``(c * pp + r) * L ..``
    (Megatron's interleaved layer assignment).
    """
    p = job.parallel
    if not p.interleaved:
        layers = job.stage_layers
        first = sum(layers[:pp_rank])
        return [(first, layers[pp_rank], pp_rank == 0, pp_rank == p.pp - 1)]
    per_chunk = p.vpp_layers
    chunks = job.stage_layers[0] // per_chunk
    out = []
    for c in range(chunks):
        virtual = c * p.pp + pp_rank
        out.append((virtual * per_chunk, per_chunk, virtual == 0, virtual == chunks * p.pp - 1))
    return out

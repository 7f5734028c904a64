"""The mocked Megatron-LM GPT/LLaMA model: one rank's share of one pipeline (virtual) stage.

Communication follows Megatron-LM core (``megatron/core/tensor_parallel/layers.py`` and
``mappings.py``, ``megatron/core/models/gpt``); the column- and row-parallel linears' rules are in
:mod:`mocked_model.megatron_layers`, with the other building blocks this model, MLA and MoE share:

- Vocab-parallel embedding: all-reduce of the output, or reduce-scatter under SP when there is no
  learned position embedding (Megatron's ``reduce_scatter_embeddings``); with learned positions and
  SP it all-reduces and scatters (backward: all-gather).
- Vocab-parallel cross entropy: three all-reduces of ``seq * micro_batch`` fp32 values (max logit,
  target logit, sum of exponentials).

A TP collective moves the whole activation: ``seq * micro_batch * width * dtype_bytes`` bytes (for
an all-gather the gathered buffer, for a reduce-scatter the buffer before scattering).
"""

from __future__ import annotations

from mocked_model.base import MockedModule, MockedParam, comm, compute
from mocked_model.context_parallel import core_attention
from mocked_model.megatron_layers import (
    AG,
    AR,
    RS,
    TP,
    ColumnParallelLinear,
    Elementwise,
    MegatronContext,
    RecomputeForward,
    RowParallelLinear,
    _meta,
    bias_dropout_add,
    norm,
)
from utils.config import JobConfig
from utils.workload import CommGroup, CommType, WorkItem


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
        meta = {**_meta(None, "embedding", "embedding", self.name), "positions": self.positions, "p": c.hidden_dropout,
                "max_positions": self.params[1].shape[0] if self.positions else 0}
        return compute(f"{phase}.MegatronEmbedding.embedding", ((c.seq, c.micro), self.word.shape), None, meta)

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
                               self._meta()))
        if c.tp > 1:
            for _ in range(3):  # max logit, target logit, sum of exp: fp32 per token
                out.append(comm(AR, TP, c.tp, c.tokens * 4, f"{phase}_step._VocabParallelCrossEntropy",
                                _meta(None, "loss", "comm", "loss")))
        if c.cp > 1 and phase == "forward":
            # loss_func with context parallelism: [sum of losses, token count] summed over the CP ranks (fp32)
            out.append(comm(AR, CommGroup.cp_group, c.cp, 8, "forward_step.loss_func", _meta(None, "loss", "comm", "loss")))
        if c.dp > 1 and phase == "forward":
            # loss_func: all_reduce([sum of losses, token count]) in fp32 over data parallel
            out.append(comm(AR, CommGroup.dp_group, c.dp, 8, "forward_step.loss_func", _meta(None, "loss", "comm", "loss")))
        return out

    def build_backward(self) -> list[WorkItem]:
        c = self.ctx
        if not c.compute:
            return []
        return [compute("backward.VocabParallelCrossEntropy.loss", ((c.seq, c.micro, self.vocab_part),), None,
                        self._meta())]

    def _meta(self) -> dict:
        meta = _meta(None, "loss", "loss", "loss")
        if self.ctx.stack.ce_fused:
            meta["fused"] = True
        return meta


class TransformerLayer(MockedModule):
    """Pre-norm transformer layer (Megatron core's ``TransformerLayer``): norm, QKV, rotary embedding,
    core attention, projection, bias-dropout-add, norm, MLP, bias-dropout-add."""

    def __init__(self, ctx: MegatronContext, job: JobConfig, layer: int) -> None:
        super().__init__(f"layers.{layer}")
        model, recompute = job.model, job.training.recompute
        self.layer, self.full_recompute = layer, recompute == "full"
        h, p = model.hidden_size, f"layers.{layer}"
        mlp_sub = "moe" if model.is_moe_layer(layer) else "mlp"
        # selective recomputation by Megatron's --recompute-modules: core_attn, layernorm (the norms Transformer Engine
        # does not fuse into the next linear: TransformerLayer.recompute_input_layernorm / _pre_mlp_layernorm)
        modules = job.training.recompute_modules if recompute == "selective" else ()
        self.attention_part = [
            norm(ctx, f"{p}.input_layernorm", model.normalization, h, layer, "attention",
                 feeds_linear=not model.multi_latent_attention, recompute="layernorm" in modules),
            *self._attention(ctx, job, layer, "core_attn" in modules, "mla_up_proj" in modules),
            bias_dropout_add(ctx, f"{p}.self_attn_bda", layer, "attention"),
        ]
        pre_mlp = norm(ctx, f"{p}.pre_mlp_layernorm", model.normalization, h, layer, mlp_sub,
                       feeds_linear=mlp_sub == "mlp", recompute="layernorm" in modules)
        mlp = self._mlp(ctx, job, layer)
        if "mlp" in modules and mlp_sub == "mlp":
            # --recompute_modules mlp: the dense MLP under te_checkpoint (Megatron-core's recompute_mlp, never an MoE
            # layer), replayed at the start of its backward; a norm Transformer Engine fuses into fc1 is inside it
            group = ([pre_mlp] if pre_mlp.options.get("in_linear") else []) + mlp
            mlp = [*mlp, RecomputeForward(f"{p}.mlp.checkpoint", group)]
        self.mlp_part = [pre_mlp, *mlp, bias_dropout_add(ctx, f"{p}.mlp_bda", layer, mlp_sub)]
        self.children = self.attention_part + self.mlp_part

    def _attention(self, ctx: MegatronContext, job: JobConfig, layer: int, selective: bool,
                   recompute_up_proj: bool = False) -> list[MockedModule]:
        model = job.model
        if model.multi_latent_attention:
            from mocked_model.mla import mla_attention

            return mla_attention(ctx, job, layer, selective, recompute_up_proj)
        h, kv, bias, p = model.hidden_size, model.kv_channels, model.add_bias_linear, f"layers.{layer}.self_attention"
        q_size = model.num_attention_heads * kv
        qkv_size = q_size + 2 * model.query_groups * kv
        modules: list[MockedModule] = [
            ColumnParallelLinear(ctx, f"{p}.linear_qkv", h, qkv_size, bias or model.add_qkv_bias, layer, "attention",
                                 norm_fused=True),
        ]
        if model.qk_layernorm:
            modules.append(Elementwise(ctx, f"{p}.qk_layernorm", "norm", (ctx.seq, ctx.micro, qkv_size // ctx.tp), layer,
                                       "attention", "MegatronQKLayerNorm", norm=model.normalization,
                                       fused=ctx.stack.fused_extensions, params=[
                MockedParam(f"{p}.q_layernorm.weight", (kv,), tp_sharded=False, sequence_parallel=True),
                MockedParam(f"{p}.k_layernorm.weight", (kv,), tp_sharded=False, sequence_parallel=True)]))
        if model.position_embedding_type == "rope":  # queries and keys, Megatron's fused RoPE
            width = (model.num_attention_heads + model.query_groups) * kv // ctx.tp
            modules.append(Elementwise(ctx, f"{p}.rotary_pos_emb", "rotary", (ctx.seq, ctx.micro, width), layer,
                                       "attention", "MegatronRotaryEmbedding", fused=ctx.stack.rope_fused))
        modules.append(core_attention(ctx, f"{p}.core_attention", model.num_attention_heads, model.query_groups, kv, layer,
                                      selective, window=model.attention_window(layer)))
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
            ColumnParallelLinear(ctx, f"{p}.linear_fc1", h, fc1_out, model.add_bias_linear, layer, "mlp", norm_fused=True),
            Elementwise(ctx, f"{p}.activation", act, (ctx.seq, ctx.micro, fc1_out // ctx.tp), layer, "mlp",
                        "MegatronActivation", bias=model.add_bias_linear, fused=ctx.stack.bias_act_fused),
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

    ``mtp_layers``: the multi-token-prediction layers this chunk holds (:mod:`mocked_model.mtp`; default: all of
    ``--mtp_num_layers`` on the post-process chunk without a layout); ``mtp_losses``: the MTP losses a post-process
    chunk builds (default ``--mtp_num_layers``; :func:`workload_generator.limits.megatron_items` counts one and
    multiplies).  With MTP the final norm sits with the last
    decoder layer (Megatron-core's ``has_final_layernorm_in_this_stage``), an MTP chunk that is not the first keeps
    a copy of the word embedding for its lookups, and the post-process chunk runs the output layer and a cross
    entropy per MTP layer before the main ones (``process_mtp_loss``).
    """

    def __init__(self, job: JobConfig, first_layer: int, num_layers: int, pre_process: bool, post_process: bool,
                 ctx: MegatronContext | None = None, layer_factory=None, mtp_layers: int | None = None,
                 mtp_losses: int | None = None) -> None:
        super().__init__("chunk")
        ctx = ctx or MegatronContext.of(job)
        model = job.model
        self.ctx, self.pre_process, self.post_process = ctx, pre_process, post_process
        self.first_layer, self.num_layers = first_layer, num_layers
        factory = layer_factory or TransformerLayer
        self.embedding = VocabEmbedding(ctx, job) if pre_process else None
        self.layers = [factory(ctx, job, first_layer + i) for i in range(num_layers)]
        children: list[MockedModule] = ([self.embedding] if self.embedding else []) + list(self.layers)
        if mtp_layers is None:
            mtp_layers = model.mtp_num_layers if post_process and job.parallel.layout is None else 0
        self.mtp_layers: list[MockedModule] = []
        embedding_copy = False
        if mtp_layers:
            from mocked_model.mtp import EmbeddingCopy, MTPLayer

            lookup = self.embedding or VocabEmbedding(ctx, job)  # the lookups' items; the weight is the embedding's
            if not pre_process:
                children.insert(0, EmbeddingCopy(ctx, job))
                embedding_copy = True
            self.mtp_layers = [MTPLayer(ctx, job, k, lookup, factory) for k in range(mtp_layers)]
        last_decoder = num_layers > 0 and first_layer + num_layers == model.num_layers
        if (post_process and not model.mtp_num_layers) or (model.mtp_num_layers and last_decoder):
            children.append(norm(ctx, "final_layernorm", model.normalization, model.hidden_size, None, "output"))
        children.extend(self.mtp_layers)
        if post_process:
            tied = not model.untie_embeddings_and_output_weights
            if not tied:
                weight: MockedParam | bool = True
            elif pre_process or embedding_copy:
                weight = False  # the embedding's own weight (or this stage's copy of it)
            else:
                weight = MockedParam("output_layer.weight", (job.padded_vocab_size // ctx.tp, model.hidden_size),
                                     shared_copy=True)
            if model.mtp_num_layers:
                from mocked_model.mtp import MTPLoss

                children.extend(MTPLoss(ctx, job, k, VocabParallelLoss(ctx, job.padded_vocab_size // ctx.tp))
                                for k in range(model.mtp_num_layers if mtp_losses is None else mtp_losses))
            children.append(ColumnParallelLinear(ctx, "output_layer", model.hidden_size, job.padded_vocab_size, False,
                                                 None, "output", label="MegatronOutputLayer", weight=weight, bf16=True))
            children.append(VocabParallelLoss(ctx, job.padded_vocab_size // ctx.tp))
        self.children = children

    @property
    def shares_embedding(self) -> bool:
        """Whether this chunk holds a tied word-embedding weight (first or last stage, tied)."""
        return any(p.name.endswith("word_embeddings.weight") or p.shared_copy for p in self.parameters())


def chunk_layout(job: JobConfig, pp_rank: int) -> list[tuple[int, int, bool, bool]]:
    """``(first_layer, num_layers, pre_process, post_process)`` of each model chunk of a pipeline rank.

    Chunk ``c`` of rank ``r`` is virtual stage ``c * pp + r``; its layers follow those of the virtual
    stages before it (:meth:`utils.parallel.ParallelConfig.virtual_stage_layers`: Megatron core's
    interleaved assignment, uneven first and last stages, embedding and loss counted in the split).
    The first virtual stage holds the embedding, the last the output layer and the loss.
    """
    p = job.parallel
    counts = p.virtual_stage_layers(job.model.num_layers)
    offsets = [0]
    for n in counts[:-1]:
        offsets.append(offsets[-1] + n)
    last = len(counts) - 1
    return [(offsets[u], counts[u], u == 0, u == last) for u in range(pp_rank, len(counts), p.pp)]


def optimizer_item(job: JobConfig, chunks: list[MockedModule]) -> WorkItem:
    """The optimizer step's computation on one rank (:mod:`mocked_model.compute.ops` prices it): shapes are
    the parameters of its ``chunks`` and those whose optimizer state it owns (``1/dp`` of them, expert
    parameters ``1/expert-dp``, with the distributed optimizer, whose buffers are split per bucket)."""
    p, t = job.parallel, job.training
    local = owned = tensors = 0
    for chunk in chunks:
        for q in chunk.parameters():
            local += q.numel
            tensors += 1
            # the distributed optimizer shards dense parameters over dp x cp (Megatron's data-parallel group with context)
            owned += -(-q.numel // (p.expert_dp if q.is_expert else p.dp * p.cp)) if t.use_distributed_optimizer else q.numel
    meta = {"layer": None, "sub": "optimizer", "op": "optimizer", "name": "optimizer", "loss_scaling": t.loss_scaling,
            "grad_bytes": t.grad_bytes, "impl": "fused" if t.stack.fused_extensions else "torch", "tensors": tensors,
            "distributed": t.use_distributed_optimizer}
    if t.fp8:
        meta["fp8_recipe"] = t.fp8_recipe
    return WorkItem(CommType.computation, stage="step.optimizer", shapes=((local,), (owned,)), meta=meta)

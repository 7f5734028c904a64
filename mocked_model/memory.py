"""Memory per GPU of a training job: a view of the mocked model's per-rank parameters plus the
activation formulas, one term per line with its source.  Bytes throughout (GiB = 2^30 bytes where
reported).

Weights (parameters, gradients, optimizer states; Megatron-LM's
``megatron/training/theoretical_memory_usage.py`` counts 18 bytes per parameter, or 6 + 12/dp with the
distributed optimizer):

- parameters in the training dtype (2 bytes; 4 for fp32);
- gradients in the main-gradient dtype (fp32, fp16 for fp16 training: ``TrainingConfig.grad_bytes``);
- Adam's fp32 master copy, first and second moments (12 bytes; 8 for fp32 training, which has no
  master copy), sharded over data parallelism by the distributed optimizer (expert parameters over
  expert-data parallelism);
- DeepSpeed ZeRO (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
  Parameter Models", section 5): with ``N`` data-parallel ranks, stage 1 keeps 2 + 2 bytes of
  parameters and gradients and 12/N of optimizer state per parameter, stage 2 2 + (2 + 12)/N, stage
  3 (2 + 2 + 12)/N.

Activations of one transformer layer for one micro-batch, per TP rank (Korthikanti et al. 2022,
"Reducing Activation Recomputation in Large Transformer Models", section 4.1 and Table 2, whose terms
we keep separate so that other widths follow: for a GPT layer (FFN 4h, heads a, dropout) they sum to
``sbh(10 + 24/t + 5as/(ht))`` with tensor parallelism, ``sbh(34 + 5as/h)/t`` with sequence
parallelism, without the ``5as/h`` attention-score terms under selective recomputation, and to the
layer input ``2sbh`` (``/t`` with SP) under full recomputation):

- attention: its LayerNorm's input and the QKV GEMM's input (2 bytes per element each, split over TP
  only with SP), Q and K, the softmax output (2 bytes per score), its dropout mask (1 byte per score),
  the dropout output and V, the output projection's input, the output dropout mask (1 byte per element,
  split with SP); flash attention keeps its output and an fp32 log-sum-exp per head instead of the
  scores; grouped-query attention stores keys and values of ``groups / heads`` the width;
- MLP: its LayerNorm's input, fc1's input, the activation's input (fc1's output, twice the width with
  SwiGLU), fc2's input and the dropout mask; an MoE layer stores the router's input and probabilities and,
  for the tokens routed to this rank's experts, the experts' fc1, activation and fc2 inputs (the permutations
  and all-to-alls keep only row maps: Megatron-core applies the routing probabilities in the experts, so the
  unpermutation merges none);
- FP8 training (Transformer Engine): a GEMM input kept for the weight gradient is its FP8 copy, one byte per
  element (QKV's, the output projection's, fc1's and fc2's, the experts'); norms' inputs, attention's tensors
  and the activations' inputs stay bf16;
- without dropout (Llama-style recipes) there are no masks.

In flight on stage ``s`` of ``p``: ``min(m, p - s)`` micro-batches with 1F1B (Korthikanti section 4.2.3:
the first stage holds ``p``), ``(p - s - 1) * 2 + (v - 1) * p + 1`` model-chunk micro-batches with the
interleaved schedule (which for the first stage is Megatron's ``1 + (p - 1)/(p v)`` penalty), one
without pipelining.  Full recomputation adds the working set of the one layer being recomputed.
Context parallelism (``--context-parallel-size``): every term above is of the rank's ``s / cp`` tokens (the
sequence split, Megatron's ``get_batch_on_this_cp_rank``), the distributed optimizer shards over ``dp x cp``, and
one layer's ring / all-to-all / all-gather buffers are added (:func:`mocked_model.context_parallel.cp_buffer_bytes`).
The first stage adds the token ids (int64) and the embedding's dropout mask per micro-batch in flight;
the last stage the output layer's inputs and the fp32 logits of the loss, ``4sbh(1 + v/h)/t``
(Korthikanti section 4.3).

Allowance: 2 GiB fixed (the CUDA context, cuBLAS and cuDNN workspaces, NCCL's communicator buffers:
assumed, not measured here) plus 5% of everything else for the caching allocator's fragmentation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from utils.config import JobConfig

GIB = 2**30
FIXED_ALLOWANCE = 2 * GIB
"""CUDA context, library workspaces and NCCL buffers (an assumption, stated in the module docstring)."""
FRAGMENTATION = 0.05
"""Share of the rest kept for the caching allocator's fragmentation (an assumption)."""


@dataclass(frozen=True)
class Term:
    """One line of the estimate: a name, bytes, and where the formula comes from."""

    name: str
    bytes: float
    source: str

    @property
    def gib(self) -> float:
        return self.bytes / GIB


@dataclass
class StageMemory:
    """The memory of one GPU of pipeline stage ``stage`` (TP rank 0, DP rank 0)."""

    stage: int
    params: int
    terms: list[Term] = field(default_factory=list)

    def _sum(self, names: tuple[str, ...]) -> float:
        return sum(t.bytes for t in self.terms if t.name in names)

    @property
    def weights_bytes(self) -> float:
        """Parameters, gradients and optimizer states."""
        return self._sum(("parameters", "gradients", "optimizer states"))

    @property
    def activations_bytes(self) -> float:
        return self._sum(("activations", "embedding activations", "output-layer activations", "recompute working set",
                          "context-parallel buffers"))

    @property
    def total_bytes(self) -> float:
        return sum(t.bytes for t in self.terms)

    @property
    def largest(self) -> Term:
        return max(self.terms, key=lambda t: t.bytes)


@dataclass
class MemoryEstimate:
    """Every stage's memory, the most loaded one, and the GPU's capacity when known (GiB)."""

    stages: list[StageMemory]
    capacity_gib: float | None = None
    gpu: str | None = None

    @property
    def most_loaded(self) -> StageMemory:
        return max(self.stages, key=lambda s: (s.total_bytes, -s.stage))

    @property
    def fits(self) -> bool | None:
        if self.capacity_gib is None:
            return None
        return self.most_loaded.total_bytes <= self.capacity_gib * GIB

    def warning(self) -> str | None:
        """A one-line warning when the most loaded GPU does not fit, naming its largest term."""
        if self.fits is not False:
            return None
        s = self.most_loaded
        big = s.largest
        return (f"the job needs {s.total_bytes / GIB:.1f} GiB on a GPU of pipeline stage {s.stage}, more than the "
                f"{self.gpu}'s {self.capacity_gib:g} GiB; its largest term is {big.name} ({big.gib:.1f} GiB)")

    def summary(self) -> dict[str, float]:
        """The ``--json`` keys: total, weights and activations of the most loaded GPU, in GiB."""
        s = self.most_loaded
        return {"memory_gib": s.total_bytes / GIB, "memory_weights_gib": s.weights_bytes / GIB,
                "memory_activations_gib": s.activations_bytes / GIB}

    def table(self) -> str:
        """The terms of the most loaded GPU, one per line (GiB), and the capacity."""
        s = self.most_loaded
        width = max(len(t.name) for t in s.terms)
        lines = [f"memory per GPU (most loaded: pipeline stage {s.stage}, {s.params:,} parameters):"]
        lines += [f"  {t.name:<{width}}  {t.gib:9.2f} GiB   {t.source}" for t in s.terms]
        total = f"  {'total':<{width}}  {s.total_bytes / GIB:9.2f} GiB"
        if self.capacity_gib is not None:
            total += f" of {self.capacity_gib:g} GiB ({self.gpu})" + ("" if self.fits else ": DOES NOT FIT")
        lines.append(total)
        return "\n".join(lines)


# ---- activations ---------------------------------------------------------------------------------

def layer_activation_bytes(job: JobConfig, layer: int, recompute: str | None = None) -> float:
    """Activation bytes one transformer layer keeps for backward, per micro-batch and TP rank
    (module docstring: Korthikanti et al. 2022, section 4.1, term by term)."""
    m, p, t = job.model, job.parallel, job.training
    recompute = t.recompute if recompute is None else recompute
    # context parallelism: every rank holds s / cp tokens of each sequence (and attends to the whole one)
    s, b, h, tp, a = t.seq_length // p.cp, p.micro_batch, m.hidden_size, p.tp, t.dtype_bytes
    tokens = s * b
    sp = p.sequence_parallel
    unsplit = tokens * h / (tp if sp else 1)  # elements of a tensor between the TP regions
    if recompute == "full":
        return a * unsplit  # the layer's input: Megatron checkpoints it and reruns the layer
    attn_mask = 1 if m.attention_dropout > 0 else 0
    hidden_mask = 1 if m.hidden_dropout > 0 else 0
    heads = m.num_attention_heads
    if m.multi_latent_attention:
        q_width = heads * (m.qk_head_dim + m.qk_pos_emb_head_dim)
        kv_width = heads * (m.qk_head_dim + m.qk_pos_emb_head_dim + m.v_head_dim)
        v_width = heads * m.v_head_dim
        latents = tokens * ((m.q_lora_rank or 0) + m.kv_lora_rank + m.qk_pos_emb_head_dim) / (tp if sp else 1)
    else:
        q_width = heads * m.kv_channels
        kv_width = 2 * m.query_groups * m.kv_channels
        v_width = q_width
        latents = 0.0
    # a GEMM input Transformer Engine saves for the weight gradient: its FP8 copy under FP8 training (columnwise only,
    # 1 byte; transformer_engine/pytorch/module/linear.py: "Discard row-wise data since it is not needed in backward
    # pass"), else the activation itself
    g = 1 if t.fp8 else a
    out = a * unsplit + g * unsplit                          # input LayerNorm's input, QKV GEMM's input
    out += a * latents                                       # MLA's compressed query and key/value
    modules = t.recompute_modules if recompute == "selective" else ()
    if not (m.multi_latent_attention and "mla_up_proj" in modules):  # mla_up_proj: discarded, recomputed in backward
        out += a * tokens * (q_width + kv_width) / tp        # Q, K and V
    if t.flash_attention:
        out += a * tokens * v_width / tp + 4 * b * heads * s / tp  # output and fp32 log-sum-exp per row
    elif recompute != "selective":
        scores = b * heads * s * s / tp
        out += scores * (a + attn_mask + (a if attn_mask else 0))  # softmax output, dropout mask and output
    out += g * tokens * v_width / tp                         # output projection's input
    out += hidden_mask * unsplit                             # attention output dropout mask
    out += a * unsplit + hidden_mask * unsplit               # MLP LayerNorm's input, dropout mask
    gate = 2 if m.swiglu else 1
    if m.is_moe_layer(layer):
        from mocked_model.moe_dispatch import moe_activation_rows

        # the router's gating GEMM keeps its (bf16) input, the MLP norm's output, unless the norm is recomputed
        # (--recompute_modules layernorm: Megatron-core checkpoints pre_mlp_layernorm, a module of its own in an MoE
        # layer, and discards its output); the permutations keep only their row maps (Megatron-core applies the
        # probabilities in the experts, so the unpermute merges none and saves no rows: moe_utils.py unpermute,
        # Transformer Engine's moe_permute / moe_unpermute); the all-to-alls keep nothing
        if "layernorm" not in modules:
            out += a * unsplit
        # the busiest EP rank's rows (routing skew, --moe_imbalance, capacity padding, the expert-TP gather)
        _sent, rows, probs = moe_activation_rows(job)
        ffn = m.moe_ffn_hidden_size // p.expert_tp
        # experts' fc1, activation and fc2 inputs; moe_act: the activation's output (fc2's input) is discarded and
        # recomputed from its input in backward (TEGroupedMLP's CheckpointWithoutOutput)
        out += rows * (g * h + a * ffn * gate + (0 if "moe_act" in modules else g * ffn))
        out += probs * tokens * m.num_experts / (tp if sp else 1) + 4 * rows  # router probabilities, permuted fp32
        if m.n_shared_experts:
            shared = m.moe_ffn_hidden_size * m.n_shared_experts // tp
            out += tokens * (a * shared * gate + g * shared)
    elif "mlp" in modules:  # the dense MLP under a checkpoint: only the checkpoint's input (the norm's, above) is kept
        if not t.stack.te:  # ... and fc1's input where the norm is a module of its own (no Transformer Engine)
            out += g * unsplit
    else:
        ffn = m.ffn_hidden_size // tp
        out += g * unsplit                                   # fc1's input
        out += tokens * (a * ffn * gate + g * ffn)           # activation's input, fc2's input
    return out


def _in_flight(job: JobConfig, stage: int) -> float:
    """Model-chunk micro-batches whose activations stage ``stage`` holds at its peak, in units of the
    stage's layers (so 1F1B's ``p`` micro-batches count ``p``, interleaving's chunk micro-batches ``1/v``
    each)."""
    p = job.parallel
    m = p.ga
    if p.pp == 1:
        return 1.0
    chunks = p.chunks(job.model.num_layers)
    if chunks == 1:
        return float(min(m, p.pp - stage))
    total = m * chunks
    warmup = min((p.pp - stage - 1) * 2 + (chunks - 1) * p.pp, total)
    return min(warmup + 1, total) / chunks


@dataclass(frozen=True)
class StageShape:
    """What a stage's memory depends on: its parameters (all, and those of experts), its layers' kinds
    as ``(layer index of the kind, count)``, and whether it holds the embedding and the loss."""

    params: int
    expert_params: int
    layers: tuple[tuple[int, int], ...]
    pre_process: bool
    post_process: bool
    mtp: int = 0
    """Multi-token-prediction layers (their transformer layers are in ``layers``, numbered from ``num_layers``)."""


def stage_shape(chunks: list) -> StageShape:
    """The shape of a stage from its model chunks (mocked modules)."""
    params = [q for chunk in chunks for q in chunk.parameters()]
    kinds: dict[int, int] = {}
    for chunk in chunks:
        for i, layer in enumerate(getattr(chunk, "layers", [])):
            index = getattr(layer, "layer", i)
            kinds[index] = kinds.get(index, 0) + 1
        for mtp in getattr(chunk, "mtp_layers", []):  # an MTP layer's transformer layer keeps a layer's activations
            kinds[mtp.layer] = kinds.get(mtp.layer, 0) + 1
    return StageShape(sum(q.numel for q in params), sum(q.numel for q in params if q.is_expert), tuple(kinds.items()),
                      any(getattr(c, "pre_process", False) for c in chunks),
                      any(getattr(c, "post_process", False) for c in chunks),
                      sum(len(getattr(c, "mtp_layers", [])) for c in chunks))


def stage_memory(job: JobConfig, stage: int, shape: StageShape) -> StageMemory:
    """The memory of one GPU of ``stage`` of the given shape."""
    p, t, m = job.parallel, job.training, job.model
    local, expert = shape.params, shape.expert_params
    dense = local - expert
    out = StageMemory(stage, local)
    param_bytes = 4 if t.dtype.lower() in ("float32", "fp32", "float") else 2
    optimizer_bytes = 8 if param_bytes == 4 else 12
    if t.frame == "DeepSpeed":
        zero = int(t.extra.get("stage", 3))
        n = p.dp
        grad = 2 * local / n if zero >= 2 else 2 * local
        weights = param_bytes * local / n if zero == 3 else param_bytes * local
        out.terms += [Term("parameters", weights, f"ZeRO-{zero}: {param_bytes} B" + (" / N" if zero == 3 else "")),
                      Term("gradients", grad, f"ZeRO-{zero}: 2 B" + (" / N" if zero >= 2 else "")),
                      Term("optimizer states", optimizer_bytes * local / n, f"ZeRO: {optimizer_bytes} B / N (Adam)")]
    else:
        shard = 1 if not t.use_distributed_optimizer else None
        owned = local if shard else dense / (p.dp * p.cp) + expert / p.expert_dp
        over = "DP x CP" if p.cp > 1 else "DP"
        how = f"sharded over {over} by the distributed optimizer" if not shard else "Megatron's 18 B per parameter"
        out.terms += [Term("parameters", param_bytes * local, f"{param_bytes} B per parameter"),
                      Term("gradients", t.grad_bytes * local, f"{t.grad_bytes} B main gradient per parameter"),
                      Term("optimizer states", optimizer_bytes * owned,
                           f"{optimizer_bytes} B (fp32 master, Adam moments) per owned parameter; {how}")]
    if shape.layers:
        per_layer = sum(layer_activation_bytes(job, layer) * count for layer, count in shape.layers)
        if shape.mtp and t.recompute != "full":
            from mocked_model.mtp import mtp_activation_bytes

            per_layer += shape.mtp * mtp_activation_bytes(job)  # the MTP layers' norms, concatenation, projection
        in_flight = _in_flight(job, stage)
        out.terms.append(Term("activations", per_layer * in_flight,
                              f"Korthikanti et al. 2022 Table 2 per layer x {in_flight:g} micro-batches in flight"))
        if t.recompute == "full":
            worst = max(layer_activation_bytes(job, layer, "none") for layer, _ in shape.layers)
            out.terms.append(Term("recompute working set", worst, "one layer recomputed in full"))
        if p.cp > 1:
            from mocked_model.context_parallel import cp_buffer_bytes

            out.terms.append(Term("context-parallel buffers", cp_buffer_bytes(job),
                                  f"one layer's {t.cp_comm_type} K/V and output buffers (Transformer Engine)"))
    tokens = t.seq_length // p.cp * p.micro_batch
    if shape.pre_process:
        in_flight = _in_flight(job, stage) if p.pp > 1 else 1.0
        mask = tokens * m.hidden_size / (p.tp if p.sequence_parallel else 1) if m.hidden_dropout > 0 else 0.0
        out.terms.append(Term("embedding activations", (8 * tokens + mask) * in_flight,
                              "token ids (int64) and the embedding dropout mask per micro-batch in flight"))
    if shape.post_process:
        hidden = t.dtype_bytes * tokens * m.hidden_size * 2 / (p.tp if p.sequence_parallel else 1)
        logits = 4 * tokens * job.padded_vocab_size / p.tp
        heads = 1 + m.mtp_num_layers  # process_mtp_loss: one more output layer and cross entropy per MTP layer
        out.terms.append(Term("output-layer activations", (hidden + logits) * heads,
                              "final norm and output-layer inputs, fp32 logits (Korthikanti section 4.3)"
                              + (f", x {heads} with the MTP losses" if heads > 1 else "")))
    rest = sum(term.bytes for term in out.terms)
    out.terms.append(Term("workspace and fragmentation", FIXED_ALLOWANCE + FRAGMENTATION * rest,
                          "2 GiB (CUDA context, workspaces, NCCL buffers) + 5% (allocator), assumed"))
    return out


def estimate_memory(job: JobConfig, gpu: str | None = None) -> MemoryEstimate:
    """Every pipeline stage's memory per GPU for ``job`` (Megatron, DeepSeek or DeepSpeed); with ``gpu``
    (a type of the compute model's table), its capacity to compare against."""
    capacity = name = None
    if gpu:
        from mocked_model.compute import gpu_spec, known_gpu

        if known_gpu(gpu):
            spec = gpu_spec(gpu)
            capacity, name = spec.memory_gib, spec.name
    if job.training.frame == "DeepSpeed":
        from mocked_model.deepspeed import DeepSpeedContext, DeepSpeedLlama

        model = DeepSpeedLlama(DeepSpeedContext.of(job), job.model)
        model.pre_process = model.post_process = True  # one stage: embedding and loss alike
        stages = [stage_memory(job, 0, stage_shape([model]))]
    else:
        stages = [stage_memory(job, s, shape) for s, shape in enumerate(megatron_stage_shapes(job))]
    return MemoryEstimate(stages, capacity, name)


def megatron_stage_shapes(job: JobConfig) -> list[StageShape]:
    """Each pipeline stage's shape, building one layer of each kind and one stage of each distinct
    composition (the middle stages of a pipeline are alike)."""
    from mocked_model.megatron import MegatronChunk, MegatronContext, TransformerLayer

    p = job.parallel
    ctx = MegatronContext.of(job)
    kinds: dict[bool, TransformerLayer] = {}

    def layer(c: MegatronContext, j: JobConfig, index: int) -> TransformerLayer:
        # layers of one kind (dense or MoE) hold the same parameters: build one of each and share it
        kind = j.model.is_moe_layer(index)
        if kind not in kinds:
            kinds[kind] = TransformerLayer(c, j, index)
        return kinds[kind]

    counts = p.virtual_stage_layers(job.model.num_layers)
    offsets = [0]
    for n in counts[:-1]:
        offsets.append(offsets[-1] + n)
    last = len(counts) - 1
    shapes: dict[tuple, StageShape] = {}
    out = []
    from mocked_model.mtp import chunk_mtp_layers

    for stage in range(p.pp):
        chunks = [(offsets[u], counts[u], u == 0, u == last) for u in range(stage, len(counts), p.pp)]
        mtp = chunk_mtp_layers(job, stage)
        kind_counts = tuple((first, count, pre, post, tuple(job.model.is_moe_layer(i) for i in range(first, first + count)))
                            for first, count, pre, post in chunks)
        key = tuple((count, pre, post, moe, first + count == job.model.num_layers)
                    for first, count, pre, post, moe in kind_counts) + tuple(mtp)
        shape = shapes.get(key)
        if shape is None:
            modules = [MegatronChunk(job, first, count, pre, post, ctx, layer_factory=layer, mtp_layers=mtp[c])
                       for c, (first, count, pre, post) in enumerate(chunks)]
            shape = shapes[key] = stage_shape(modules)
        out.append(shape)
    return out

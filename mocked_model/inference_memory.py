"""Memory per GPU of an inference job: the weights a rank holds, its KV cache (and Qwen3-Next's recurrent
state), and the step's activations; and the check that they fit the GPU.

Weights, per layer and rank (the shards :mod:`mocked_model.inference` computes with): MLA's down
projections whole on every TP rank, its up and output projections split over TP; GQA's and gated
DeltaNet's projections split over TP; a dense MLP split over TP; the router whole; the rank's
``experts / ep`` experts whole (expert TP 1) and every shared expert whole, or with ``moe_tp`` every expert
and shared expert split over TP; the embedding and the LM head split over the vocabulary on the first and
last stage.  Linear weights in the job's weight dtype (FP8 adds an fp32 scale per 128 x 128 block, NVFP4 an
e4m3 scale per 16 values), everything else bf16.

KV cache per rank and sequence position: MLA's latent (``kv_lora_rank + rope`` values, the same on every
TP rank), GQA's ``2 x heads / tp`` key and value heads (at least one), in ``--kv_dtype``; gated DeltaNet
keeps a ``dk x dv`` state per value head and the convolution's last ``kernel - 1`` inputs per sequence,
whatever the context.  A replica's rank holds ``micro_batch`` sequences of ``seq_length`` positions (plus
the new token in decode).

Activations are an estimate of the step's live buffers: the residual stream and a few hidden-sized
temporaries (6 x hidden per token), the widest projection output, the MoE receive buffer with its
expert intermediates, and the fp32 logits.  Usable memory is :data:`MEMORY_FRACTION` of the GPU's
(vLLM's default ``gpu_memory_utilization``; the rest is the CUDA context, NCCL and allocator slack).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from utils.errors import ConfigError
from utils.inference_config import InferenceModel
from utils.inference_job import NVFP4_GROUP, InferenceJob

MEMORY_FRACTION = 0.9
"""Share of a GPU's memory an inference server plans for (vLLM's ``gpu_memory_utilization`` default)."""
GIB = 1 << 30


def layer_params(model: InferenceModel, layer: int, tp: int = 1, experts: int | None = None,
                 moe_tp: bool = False) -> tuple[int, int]:
    """``(linear weights, other weights)`` of one layer on one rank holding ``experts`` experts (default:
    the routed experts, i.e. the whole model's layer with ``tp = 1``); ``moe_tp``: each expert (and shared
    expert) split over the ``tp`` ranks."""
    m = model
    h = m.hidden_size
    linear = 0
    other = 2 * h                                          # input and post-attention norms
    kind = m.attention_kind(layer)
    if kind == "mla":
        heads = m.num_heads // tp
        q_head = m.qk_nope_dim + m.qk_rope_dim
        if m.q_lora_rank:
            linear += h * (m.q_lora_rank + m.kv_width) + m.q_lora_rank * heads * q_head
            other += m.q_lora_rank
        else:
            linear += h * heads * q_head + h * m.kv_width
        linear += m.kv_lora_rank * heads * (m.qk_nope_dim + m.v_head_dim) + heads * m.v_head_dim * h
        other += m.kv_lora_rank
    elif kind == "gqa":
        heads, kv, d = m.num_heads // tp, max(m.num_kv_heads // tp, 1), m.head_dim
        linear += h * (heads * d * (2 if m.output_gate else 1) + 2 * kv * d) + heads * d * h
        other += 2 * d if m.qk_norm else 0
    else:
        hk, hv = m.linear_key_heads // tp, m.linear_value_heads // tp
        key, value = hk * m.linear_key_dim, hv * m.linear_value_dim
        linear += h * (2 * key + 2 * value) + h * 2 * hv + value * h
        other += (2 * key + value) * m.conv_kernel + 2 * hv + m.linear_value_dim
    if not m.is_moe_layer(layer):
        return linear + (3 if m.gated_mlp else 2) * h * (m.dense_ffn // tp), other
    local = m.routed_experts if experts is None else experts
    split = tp if moe_tp else 1
    other += m.routed_experts * h                          # router (bf16)
    linear += local * 3 * h * (m.expert_ffn // split) + m.shared_experts * 3 * h * (m.shared_expert_ffn // split)
    if m.kind == "qwen3_next" and m.shared_experts:
        other += h                                         # shared expert gate
    return linear, other


def model_params(model: InferenceModel) -> int:
    """Parameters of the whole model (routed experts only; embedding and LM head once each unless tied)."""
    total = sum(sum(layer_params(model, i)) for i in range(model.num_layers))
    vocab = model.vocab_size * model.hidden_size
    return total + vocab * (1 if model.tied_embeddings else 2) + model.hidden_size


@dataclass(frozen=True)
class MemoryUse:
    """Bytes per GPU of one stage's rank; ``capacity_bytes`` is the usable memory of the GPU (None when
    no GPU type is known)."""

    weights_bytes: int
    kv_bytes: int
    activation_bytes: int
    capacity_bytes: int | None = None
    gpu: str | None = None

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.activation_bytes

    @property
    def fits(self) -> bool:
        return self.capacity_bytes is None or self.total_bytes <= self.capacity_bytes

    def summary(self) -> str:
        text = (f"memory per GPU: weights {self.weights_bytes / GIB:.2f} GiB, KV cache {self.kv_bytes / GIB:.2f} GiB, "
                f"activations {self.activation_bytes / GIB:.2f} GiB, total {self.total_bytes / GIB:.2f} GiB")
        if self.capacity_bytes is not None:
            text += f" of {self.capacity_bytes / GIB:.1f} GiB usable on the {self.gpu}"
        return text


KV_BLOCK_TOKENS = 16
"""Tokens per paged KV block: vLLM's default ``--block-size`` on CUDA (vllm/config.py, CacheConfig)."""


def _layer_kv_bytes(job: InferenceJob, layer: int) -> int:
    """KV-cache bytes of one position in layer ``layer`` on one GPU: MLA's latent (``kv_lora_rank + rope`` values, the
    same on every TP rank), GQA's ``2 x kv heads / tp`` heads of ``head_dim`` (at least one head), in ``--kv_dtype``;
    none for gated DeltaNet."""
    m = job.model
    kind = m.attention_kind(layer)
    if kind == "mla":
        return m.kv_width * job.kv_bytes
    if kind == "gqa":
        return 2 * max(m.num_kv_heads // job.tp, 1) * m.head_dim * job.kv_bytes
    return 0


def kv_bytes_per_token(job: InferenceJob, stage: int = 0) -> int:
    """KV-cache bytes one sequence position takes on one GPU of pipeline stage ``stage``, summed over its layers that
    attend to the whole past (a sliding-window layer's bounded KV is per sequence: :func:`state_bytes_per_sequence`)."""
    first, count = job.stage_layers()[stage]
    return sum(_layer_kv_bytes(job, layer) for layer in range(first, first + count)
               if job.model.attention_window(layer) is None)


def state_bytes_per_sequence(job: InferenceJob, stage: int = 0, positions: int | None = None) -> int:
    """Bytes one sequence keeps on one GPU of ``stage`` that do not grow with its length: gated DeltaNet's ``dk x dv``
    state per value head in ``--kv_dtype`` and the convolution's last ``kernel - 1`` inputs in bf16, and a
    sliding-window layer's KV of its last ``window`` positions, in whole blocks (vLLM's sliding-window manager frees
    the blocks that fall out of the window, so a sequence holds at most ``window + block`` positions; fewer when
    ``positions`` is given and shorter)."""
    m, tp = job.model, job.tp
    first, count = job.stage_layers()[stage]
    total = 0
    for layer in range(first, first + count):
        if m.attention_kind(layer) == "gdn":
            hk, hv = m.linear_key_heads // tp, m.linear_value_heads // tp
            conv = (2 * hk * m.linear_key_dim + hv * m.linear_value_dim) * (m.conv_kernel - 1) * 2
            total += hv * m.linear_key_dim * m.linear_value_dim * job.kv_bytes + conv
        window = m.attention_window(layer)
        if window is not None:
            held = window + KV_BLOCK_TOKENS if positions is None else min(positions, window + KV_BLOCK_TOKENS)
            total += held * _layer_kv_bytes(job, layer)
    return total


def _kv_per_sequence(job: InferenceJob, first: int, count: int) -> int:
    """KV-cache (and recurrent-state) bytes of one sequence on one rank of the stage's layers."""
    stage = next(s for s, (f, _) in enumerate(job.stage_layers()) if f == first)
    positions = job.seq_length + (1 if job.decode else 0)
    return positions * kv_bytes_per_token(job, stage) + state_bytes_per_sequence(job, stage, positions)


def activation_bytes(job: InferenceJob, tokens: int | None = None, rows: int | None = None) -> int:
    """The live activation buffers on one GPU of a step of ``tokens`` tokens with logits for ``rows`` of them
    (default: the job's step; see the module docstring)."""
    return _activations(job, tokens, rows)


def _activations(job: InferenceJob, tokens: int | None = None, rows: int | None = None) -> int:
    m, tp = job.model, job.tp
    t = job.tokens if tokens is None else tokens
    widest = max(m.num_heads // tp * (m.qk_nope_dim + m.qk_rope_dim + m.v_head_dim + m.head_dim) * 2,
                 2 * m.dense_ffn // tp if m.dense_layer_ids else 0,
                 2 * (m.linear_key_heads * m.linear_key_dim + m.linear_value_heads * m.linear_value_dim) // tp)
    received = ceil((t if job.moe_tp else t / tp) * m.topk) if m.is_moe else 0
    moe = received * (m.hidden_size + 3 * m.expert_ffn // (tp if job.moe_tp else 1)) * 2
    logits = (job.lm_tokens() if rows is None else rows) * job.padded_vocab() * 4
    return t * (6 * m.hidden_size + widest) * 2 + moe + logits


def memory_per_gpu(job: InferenceJob, stage: int | None = None, gpu: str | None = None) -> MemoryUse:
    """Memory of a rank of pipeline stage ``stage`` (default: the stage that needs the most)."""
    stages = range(job.pp) if stage is None else [stage]
    uses = [_stage_use(job, s) for s in stages]
    weights, kv, act = max(uses, key=sum)
    capacity = None
    name = gpu or job.gpu_type
    if name:
        from mocked_model.compute import gpu_spec

        spec = gpu_spec(name)
        capacity, name = int(spec.memory_gib * GIB * MEMORY_FRACTION), spec.name
    return MemoryUse(weights, kv, act, capacity, name)


def _stage_use(job: InferenceJob, stage: int) -> tuple[int, int, int]:
    m = job.model
    first, count = job.stage_layers()[stage]
    linear = other = 0
    for layer in range(first, first + count):
        lin, oth = layer_params(m, layer, job.tp, job.local_experts, job.moe_tp)
        linear += lin
        other += oth
    vocab_rows = job.padded_vocab() // job.tp * m.hidden_size
    if stage == 0:
        other += vocab_rows
    if stage == job.pp - 1:
        other += m.hidden_size + (0 if m.tied_embeddings and job.pp == 1 else vocab_rows)
    weights = ceil(linear * job.weight_bytes) + other * 2
    if job.weight_kind == "fp8":
        weights += ceil(linear / (128 * 128)) * 4
    elif job.weight_kind == "fp4":
        weights += ceil(linear / NVFP4_GROUP)
    kv = job.micro_batch * _kv_per_sequence(job, first, count)
    return weights, kv, _activations(job)


def check_fits(job: InferenceJob, gpu: str | None = None) -> MemoryUse:
    """The memory use of the busiest stage; a :class:`ConfigError` when it exceeds the GPU's usable memory."""
    use = memory_per_gpu(job, gpu=gpu)
    if not use.fits:
        raise ConfigError(
            f"{job.name} {job.phase} with {job.micro_batch} sequences of {job.seq_length} tokens per replica needs "
            f"{use.total_bytes / GIB:.1f} GiB per GPU (weights {use.weights_bytes / GIB:.1f}, KV cache "
            f"{use.kv_bytes / GIB:.1f}, activations {use.activation_bytes / GIB:.1f}) but the {use.gpu} has "
            f"{use.capacity_bytes / GIB:.1f} GiB usable ({MEMORY_FRACTION:.0%} of its memory): spread the model over "
            "more GPUs (--world_size with more EP, TP or PP), or lower --micro_batch or --seq_length")
    return use


@dataclass(frozen=True)
class KVCapacity:
    """The KV cache one replica can hold.  Bytes are per GPU of the busiest stage (the stage that holds the
    fewest tokens); ``tokens`` is the replica's (every attention replica keeps its own sequences' cache)."""

    tokens: int
    bytes_per_token: int
    usable_bytes: int
    weights_bytes: int
    activation_bytes: int
    state_bytes: int
    gpu: str

    def summary(self) -> str:
        return (f"KV cache: {self.tokens:,} tokens per replica ({self.bytes_per_token:,} B per token per GPU); "
                f"of {self.usable_bytes / GIB:.1f} GiB usable on the {self.gpu}: weights {self.weights_bytes / GIB:.2f}, "
                f"activations {self.activation_bytes / GIB:.2f}, recurrent state {self.state_bytes / GIB:.2f} GiB")


def kv_capacity(job: InferenceJob, gpu: str, max_tokens: int, max_seqs: int,
                utilization: float = MEMORY_FRACTION) -> KVCapacity:
    """Tokens of KV cache a replica of ``job``'s layout holds, as vLLM sizes it (``determine_num_available_blocks``):
    ``utilization`` (``--gpu_memory_utilization``, 0.9) of the GPU's memory, less the weights and the activations of
    the profiling step (a forward of ``max_tokens`` tokens, ``--max_num_batched_tokens``, with logits for
    ``max_seqs`` sequences), less the recurrent state of ``max_seqs`` sequences (gated DeltaNet), over the KV bytes
    per token; the stage that holds the fewest decides, times the attention replicas.  A :class:`ConfigError` when
    nothing is left for the cache (the model does not fit)."""
    from mocked_model.compute import gpu_spec

    spec = gpu_spec(gpu)
    usable = int(spec.memory_gib * GIB * utilization)
    best: tuple[int, int, int, int, int] | None = None
    for stage in range(job.pp):
        weights = _stage_use(job, stage)[0]
        act = _activations(job, max_tokens, max_seqs)
        state = max_seqs * state_bytes_per_sequence(job, stage) // job.dp
        per_token = kv_bytes_per_token(job, stage)
        free = usable - weights - act - state
        if free <= 0:
            raise ConfigError(
                f"{job.name} does not fit: a GPU of stage {stage} needs {(weights + act + state) / GIB:.1f} GiB (weights "
                f"{weights / GIB:.1f}, activations of a {max_tokens}-token step {act / GIB:.1f}) of the {spec.name}'s "
                f"{usable / GIB:.1f} GiB usable ({utilization:.0%}): use more GPUs per replica (tensor or pipeline "
                "parallelism), a lower --dtype, or fewer tokens per step")
        tokens = free // per_token if per_token else 1 << 62
        if best is None or tokens < best[0]:
            best = (tokens, per_token, weights, act, state)
    tokens, per_token, weights, act, state = best
    return KVCapacity(int(tokens) * job.dp, per_token, usable, weights, act, state, spec.name)

"""Memory per GPU of an inference job: the weights a rank holds, its KV cache (and Qwen3-Next's recurrent
state), and the step's activations; and the check that they fit the GPU.

Weights, per layer and rank (the shards :mod:`mocked_model.inference` computes with): MLA's down
projections whole on every TP rank, its up and output projections split over TP; GQA's and gated
DeltaNet's projections split over TP; a dense MLP split over TP; the router whole; the rank's
``experts / ep`` experts whole (expert TP 1) and every shared expert whole; the embedding and the LM head
split over the vocabulary on the first and last stage.  Linear weights in the job's weight dtype (FP8
adds an fp32 scale per 128 x 128 block), everything else bf16.

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
from utils.inference_job import InferenceJob

MEMORY_FRACTION = 0.9
"""Share of a GPU's memory an inference server plans for (vLLM's ``gpu_memory_utilization`` default)."""
GIB = 1 << 30


def layer_params(model: InferenceModel, layer: int, tp: int = 1, experts: int | None = None) -> tuple[int, int]:
    """``(linear weights, other weights)`` of one layer on one rank holding ``experts`` experts (default:
    the routed experts, i.e. the whole model's layer with ``tp = 1``)."""
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
        return linear + 3 * h * (m.dense_ffn // tp), other
    local = m.routed_experts if experts is None else experts
    other += m.routed_experts * h                          # router (bf16)
    linear += local * 3 * h * m.expert_ffn + m.shared_experts * 3 * h * m.shared_expert_ffn
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


def _kv_per_sequence(job: InferenceJob, first: int, count: int) -> int:
    """KV-cache (and recurrent-state) bytes of one sequence on one rank of the stage's layers."""
    m, tp = job.model, job.tp
    positions = job.seq_length + (1 if job.decode else 0)
    total = 0
    for layer in range(first, first + count):
        kind = m.attention_kind(layer)
        if kind == "mla":
            total += positions * m.kv_width * job.kv_bytes
        elif kind == "gqa":
            total += positions * 2 * max(m.num_kv_heads // tp, 1) * m.head_dim * job.kv_bytes
        else:
            hk, hv = m.linear_key_heads // tp, m.linear_value_heads // tp
            conv = (2 * hk * m.linear_key_dim + hv * m.linear_value_dim) * (m.conv_kernel - 1) * 2
            total += hv * m.linear_key_dim * m.linear_value_dim * job.kv_bytes + conv
    return total


def _activations(job: InferenceJob) -> int:
    m, t, tp = job.model, job.tokens, job.tp
    widest = max(m.num_heads // tp * (m.qk_nope_dim + m.qk_rope_dim + m.v_head_dim + m.head_dim) * 2,
                 2 * m.dense_ffn // tp if m.dense_layer_ids else 0,
                 2 * (m.linear_key_heads * m.linear_key_dim + m.linear_value_heads * m.linear_value_dim) // tp)
    received = ceil(job.rank_tokens * m.topk)
    moe = received * (m.hidden_size + 3 * m.expert_ffn) * 2
    logits = job.lm_tokens() * job.padded_vocab() * 4
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
        lin, oth = layer_params(m, layer, job.tp, job.local_experts)
        linear += lin
        other += oth
    vocab_rows = job.padded_vocab() // job.tp * m.hidden_size
    if stage == 0:
        other += vocab_rows
    if stage == job.pp - 1:
        other += m.hidden_size + (0 if m.tied_embeddings and job.pp == 1 else vocab_rows)
    weights = linear * job.weight_bytes + other * 2
    if job.weight_bytes == 1:
        weights += ceil(linear / (128 * 128)) * 4
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

"""Model FLOPs of one training iteration: the count published MFU figures divide by.

Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", appendix) count, for a GPT of ``L`` layers, hidden ``h``, sequence ``s``, vocabulary ``V``
and batch ``B`` (forward plus backward, recomputation excluded)::

    F = 72 B s L h^2 (1 + s / (6 h) + V / (12 L h))

which is Megatron-LM's ``num_floating_point_operations`` (``megatron/training/training.py``): 3 passes
(forward, and backward at twice the forward) x 2 FLOPs per multiply-add x, per layer, the QKV and
output projections, the full ``s x s`` score and context products (the published convention counts the
whole square, causal or not), the MLP, and the logits once.  The same terms generalise to grouped-query
attention (K and V projections of ``groups / heads`` the width), gated MLPs (fc1 doubled), MoE (the
MLP of each of the ``top-k`` routed experts plus shared experts, on the MoE layers only) and DeepSeek's
multi-latent attention (its down and up projections), as Megatron's later versions of the function do.
"""

from __future__ import annotations

from utils.config import JobConfig


def layer_forward_flops_per_token(job: JobConfig, layer: int) -> float:
    """FLOPs of one layer's forward per token (multiply-adds x 2), at sequence length ``s``."""
    m, s = job.model, job.training.seq_length
    h = m.hidden_size
    if m.multi_latent_attention:
        heads = m.num_attention_heads
        qk = m.qk_head_dim + m.qk_pos_emb_head_dim
        q = h * heads * qk if not m.q_lora_rank else m.q_lora_rank * (h + heads * qk)
        kv = h * (m.kv_lora_rank + m.qk_pos_emb_head_dim) + m.kv_lora_rank * heads * (m.qk_head_dim + m.v_head_dim)
        proj = heads * m.v_head_dim * h
        core = s * heads * (qk + m.v_head_dim)
        attention = 2.0 * (q + kv + proj + core)
    else:
        q_width = m.num_attention_heads * m.kv_channels
        kv_width = 2 * m.query_groups * m.kv_channels
        attention = 2.0 * (h * (q_width + kv_width) + q_width * h + 2 * s * q_width)
    gate = 2 if m.swiglu else 1
    if m.is_moe_layer(layer):
        ffn = m.moe_ffn_hidden_size * (m.moe_router_topk + m.n_shared_experts)
        mlp = 2.0 * (h * ffn * gate + ffn * h) + 2.0 * h * m.num_experts
    else:
        ffn = m.ffn_hidden_size
        mlp = 2.0 * (h * ffn * gate + ffn * h)
    return attention + mlp


def mtp_forward_flops_per_token(job: JobConfig) -> float:
    """FLOPs of the multi-token-prediction layers' forward per token, as Megatron-LM's
    ``num_floating_point_operations`` counts them (its ``mtp_num_layers`` terms): per MTP layer one more transformer
    layer of the last decoder layer's kind (MoE for DeepSeek-V3), its norms (``3h``) and the ``2h x h`` projection
    ``eh_proj``; the extra logit GEMMs are :func:`model_flops`'."""
    m = job.model
    if not m.mtp_num_layers:
        return 0.0
    h = m.hidden_size
    return m.mtp_num_layers * (layer_forward_flops_per_token(job, m.num_layers - 1) + 2.0 * (3 * h + 2 * h * h))


def model_flops(job: JobConfig) -> float:
    """Model FLOPs of one iteration of the whole job (every replica), recomputation excluded: 3 x the
    forward of every layer (multi-token prediction's included) and of the logits (once per MTP layer more)
    over ``global_batch * seq_length`` tokens."""
    tokens = job.parallel.global_batch * job.training.seq_length
    layers = sum(layer_forward_flops_per_token(job, i) for i in range(job.model.num_layers))
    layers += mtp_forward_flops_per_token(job)
    logits = 2.0 * job.model.hidden_size * job.padded_vocab_size * (1 + job.model.mtp_num_layers)
    return 3.0 * tokens * (layers + logits)

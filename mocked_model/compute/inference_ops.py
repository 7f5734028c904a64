"""The kernels an inference server (SGLang, vLLM) launches for one prefill or decode step, with the FLOPs and HBM
bytes of each (:mod:`mocked_model.compute.ops` dispatches to them by ``meta['op']``).

Items of workload_generator.inference (built by mocked_model.inference); their stage starts with ``prefill`` or
``decode``.  Inference runs without autograd: weights are read once per step (at decode sizes every GEMM is bound by
that read), activations are bf16 (``p.a``), and the linear layers' weights are ``meta['w_kind']`` (``fp8``:
DeepSeek's block-scaled FP8 checkpoint served with DeepGEMM-style FP8 GEMMs, or ``bf16``).
"""

from __future__ import annotations

from collections.abc import Callable
from math import ceil, prod

from mocked_model.compute.kernel_list import Kernel, Precision, elements, mem
from mocked_model.compute.kernels import GemmShape

FP8_GROUP = 128
"""Values per fp32 scale of FP8 activations and dispatched tokens (DeepSeek-V3's 1x128 tiles)."""
FP4_GROUP = 16
"""Values per e4m3 scale of NVFP4 activations (NVIDIA's Blackwell FP4 format: e2m1 values, one FP8 scale per 16)."""
GDN_CHUNK = 64
"""Chunk length of FLA's chunked gated-delta-rule kernel (``chunk_gated_delta_rule``, the prefill path)."""


def infer_gemm_kernels(item, p: Precision) -> list[Kernel]:
    """A linear layer at inference: one GEMM, weights read once.  Shapes ``((m, k), (k, n))``; batched
    (MLA's absorbed per-head products) or grouped (the MoE experts of a rank) ``((rows, k), (batch, k, n))``
    with ``rows / batch`` rows per member (a grouped GEMM pads every expert to the busiest one's tokens:
    meta ``rows_per_member`` when given).  FP8 weights take FP8 activations: each GEMM's input is first
    quantized per 1x128 group (read ``a``, write 1 byte and an fp32 scale per group; SGLang and vLLM's
    ``per_token_group_quant_fp8`` kernel).  FP4 weights (NVFP4, Blackwell) take FP4 activations: each input is
    quantized per 16 values (read ``a``, write half a byte and an e4m3 scale per group: vLLM's and TensorRT-LLM's
    ``scaled_fp4_quant``), and the GEMM runs at the FP4 tensor rate."""
    meta = item.meta or {}
    shapes = item.shapes or ()
    if len(shapes) < 2:
        return []
    kind = meta.get("w_kind", p.kind)
    a_shape, b_shape = shapes[0], shapes[1]
    rows = prod(a_shape[:-1])
    if len(b_shape) == 3:
        batch, k, n = b_shape
        m = meta.get("rows_per_member") or ceil(rows / max(batch, 1))
    else:
        batch, k, n, m = 1, a_shape[-1], b_shape[-1], rows
    out = [Kernel(f"{meta.get('name', 'linear')} gemm", GemmShape(max(m, 1), n, k, max(batch, 1), kind, p.a))]
    if kind == "fp8":
        out.append(mem("fp8 activation quantization", rows * k * (p.a + 1) + rows * ceil(k / FP8_GROUP) * 4))
    elif kind == "fp4":
        out.append(mem("fp4 activation quantization", rows * k * (p.a + 0.5) + rows * ceil(k / FP4_GROUP)))
    return out


def _decode_attention_kernels(item, p: Precision) -> list[Kernel]:
    """Attention of ``q_len`` new tokens per sequence over a KV cache of ``ctx`` positions (FlashAttention
    / FlashInfer decode kernels; FlashMLA for MLA's absorbed form, where every head attends to one shared
    latent of ``d_qk = kv_lora_rank + rope`` and reads values of ``d_v = kv_lora_rank``).  Meta: ``batch``,
    ``heads`` (this rank's), ``q_len``, ``ctx``, ``d_qk``, ``d_v``, ``kv_token_bytes`` (cache bytes per
    sequence position on this rank).  FLOPs ``2 batch heads q_len ctx (d_qk + d_v)``; HBM: the batch's
    whole cache read once, queries read and outputs written; at the GPU's flash-attention efficiency,
    never faster than its bytes."""
    m = item.meta or {}
    b, h, q, ctx = m["batch"], m["heads"], m.get("q_len", 1), m["ctx"]
    flops = 2.0 * b * h * q * ctx * (m["d_qk"] + m["d_v"])
    io = b * ctx * m["kv_token_bytes"] + b * h * q * (m["d_qk"] + m["d_v"]) * p.a
    return [Kernel("decode attention", nbytes=io, flash_flops=flops)]


def _gdn_kernels(item, p: Precision) -> list[Kernel]:
    """Gated DeltaNet, Qwen3-Next's linear attention, as vLLM runs FLA's kernels.  Meta: ``tokens``,
    ``batch``, ``hk``/``hv`` (this rank's key and value heads), ``dk``/``dv``, ``state_bytes``.

    Decode (``fused_recurrent_gated_delta_rule``): per sequence and value head the ``dk x dv`` state is
    read, decayed, corrected by the delta rule and read out by the query, then written back: memory-bound,
    about 8 FLOPs per state element.  Prefill (``chunk_gated_delta_rule``, chunks of :data:`GDN_CHUNK`):
    per token and value head about ``2 (C (dk + dv) + 3 dk dv)`` FLOPs (the chunk's masked products and
    the state's updates and reads), the chunk states written and read in fp32; at the flash-attention
    efficiency (an assumption: FLA's kernels have not been measured here)."""
    m = item.meta or {}
    t, b, hk, hv, dk, dv = m["tokens"], m["batch"], m["hk"], m["hv"], m["dk"], m["dv"]
    qkv = t * (2 * hk * dk + 2 * hv * dv) * p.a          # q, k, v read; output written
    if m.get("mode") == "decode":
        state = b * hv * dk * dv
        return [Kernel("gated delta rule (recurrent)", nbytes=qkv + 2 * state * m["state_bytes"],
                       flash_flops=8.0 * state)]
    flops = 2.0 * t * hv * (GDN_CHUNK * (dk + dv) + 3 * dk * dv)
    states = ceil(t / GDN_CHUNK) * hv * dk * dv * 4 * 2
    return [Kernel("gated delta rule (chunked)", nbytes=qkv + states, flash_flops=flops)]


def _conv1d_kernels(item, p: Precision) -> list[Kernel]:
    """The causal depthwise convolution before gated DeltaNet (``causal_conv1d_fn`` / ``_update``): read
    and write ``tokens x channels``, the weights, and in decode the ``kernel - 1`` cached inputs per
    sequence and channel (read and written back)."""
    m = item.meta or {}
    c, k = m["channels"], m["kernel"]
    nbytes = m["tokens"] * c * 2 * p.a + c * k * p.a
    if m.get("mode") == "decode":
        nbytes += m["batch"] * c * (k - 1) * p.a * 2
    return [mem("causal conv1d", nbytes)]


def _add_norm_kernels(item, p: Precision) -> list[Kernel]:
    """vLLM's and SGLang's fused residual add and RMSNorm: read the input and the residual, write the sum
    (the next residual) and the normalized output, one kernel."""
    return [mem("fused add rmsnorm", elements(item) * 4 * p.a)]


def _elementwise_kernels(item, p: Precision) -> list[Kernel]:
    """One elementwise kernel touching each element ``meta['passes']`` times (reads plus writes):
    Qwen3-Next's output gate, its gating of the delta rule, a gated norm."""
    return [mem((item.meta or {}).get("name", "elementwise"), elements(item) * (item.meta or {}).get("passes", 2) * p.a)]


def _moe_router_kernels(item, p: Precision) -> list[Kernel]:
    """The MoE gate: a bf16 GEMM ``(tokens, hidden) x (hidden, experts)`` and the scoring, (grouped)
    top-k and weight normalisation over the fp32 scores (two kernels, a few passes)."""
    shapes = item.shapes or ()
    out = infer_gemm_kernels(item, p)
    if len(shapes) > 1:
        out.append(mem("router scores, top-k", prod(shapes[0][:-1]) * shapes[1][-1] * 4 * 3, 2))
    return out


def _sampling_kernels(item, p: Precision) -> list[Kernel]:
    """Sampling from ``(tokens, vocab)`` logits: fp32 softmax with temperature, then top-k/top-p and the
    draw (two kernels, three fp32 passes)."""
    return [mem("sampling", elements(item) * 4 * 3, 2)]


OPS: dict[str, Callable[[object, Precision], list[Kernel]]] = {
    "infer_gemm": infer_gemm_kernels, "decode_attention": _decode_attention_kernels, "gdn": _gdn_kernels,
    "conv1d": _conv1d_kernels, "add_norm": _add_norm_kernels, "elementwise": _elementwise_kernels,
    "moe_router": _moe_router_kernels, "sampling": _sampling_kernels,
}
"""Inference operation name (``meta['op']``) -> its kernel list."""

"""The kernels of each mocked operation: what Megatron-LM (core 0.8-0.12, with Transformer Engine or
apex) launches for one computation item, forward, backward and recomputed forward, and what an
inference server (SGLang, vLLM) launches for one prefill or decode step, with the FLOPs and HBM bytes
of each.  One function per operation; the costs come from :mod:`mocked_model.compute.kernels`.

An item says what it is in ``meta['op']`` and how big in ``shapes`` (the mocked modules' conventions,
:mod:`mocked_model.megatron`); options that change the kernels ride in its meta (``impl``, ``p`` for
dropout, ``bias``, ``accumulate``, ...).  ``a`` below is the activation's bytes per element (2 for
bf16 and fp16, also under FP8 training, where Transformer Engine keeps activations in bf16; 4 for fp32).

Sources (cited per function): Megatron-LM ``megatron/core/fusions`` (``fused_bias_gelu``,
``fused_bias_swiglu``, ``fused_bias_dropout``, ``fused_softmax``), ``megatron/core/transformer/
dot_product_attention.py`` (the unfused attention path), ``megatron/core/tensor_parallel/
cross_entropy.py``, ``megatron/core/optimizer`` (the Adam step of the distributed optimizer),
apex's ``fused_layer_norm_cuda`` and ``multi_tensor_adam``, Transformer Engine's ``cast_transpose``,
FlashAttention-2 (Dao 2023, section 3.1: the backward pass does 2.5x the forward's matmul FLOPs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import ceil, prod

from mocked_model.compute.gpus import GPUSpec
from mocked_model.compute.kernels import GemmShape, flash_attention_ns, gemm_ns, memory_ns


@dataclass(frozen=True, slots=True)
class Kernel:
    """One kernel (or a group of ``count`` small kernels moving ``nbytes`` in all): a GEMM (``gemm``),
    a flash-attention pass (``flash_flops`` > 0), or memory-bound work."""

    name: str
    gemm: GemmShape | None = None
    nbytes: float = 0.0
    count: int = 1
    flash_flops: float = 0.0
    backward: bool = False

    def ns(self, gpu: GPUSpec) -> float:
        if self.gemm is not None:
            return gemm_ns(self.gemm, gpu) * self.count
        if self.flash_flops:
            return flash_attention_ns(self.flash_flops, self.nbytes, gpu, self.backward)
        return memory_ns(self.nbytes, gpu, self.count)

    @property
    def flops(self) -> float:
        if self.gemm is not None:
            return self.gemm.flops * self.count
        return self.flash_flops


@dataclass(frozen=True, slots=True)
class Precision:
    """``kind``: the GEMM inputs (``fp8``, ``bf16``, ``fp32``); ``a``: activation bytes per element."""

    kind: str
    a: int

    @property
    def attention_kind(self) -> str:
        """The unfused attention's batched GEMMs stay in bf16 under FP8 (TE casts only the linears)."""
        return "bf16" if self.kind == "fp8" else self.kind


def _phase(item) -> str:
    return item.stage.split(".", 1)[0]


def _mem(name: str, nbytes: float, count: int = 1) -> Kernel:
    return Kernel(name, nbytes=nbytes, count=count)


# ---- GEMMs ------------------------------------------------------------------------------------------

def _gemm_kernels(item, p: Precision) -> list[Kernel]:
    """A linear layer's GEMM.  Shapes: forward ``((s, b, k), (k, n))``; ``dgrad`` ``((s, b, out), (out,
    in))``; ``wgrad`` ``((out, tokens), (tokens, in))``; grouped experts ``((tokens, k), (E, k, n))``.

    The weight gradient accumulates into the main gradient in its epilogue (Megatron's
    ``gradient_accumulation_fusion``, on by default): the result read and written in the main gradient's
    dtype (``meta['grad_bytes']``: fp32, fp16 for fp16 training).  Under FP8
    (Transformer Engine), each GEMM's bf16 input is first cast to FP8 with its transpose for the later
    weight-gradient GEMM (``cast_transpose``: read ``a``, write 2 bytes per element): the forward casts
    its input, dgrad casts the incoming gradient; the weights' casts are done once per iteration (the
    optimizer item).  A column-parallel linear whose bias is not left to a fused kernel downstream
    (``meta['bias']``) adds it after the GEMM (``output + bias``: read and write the output) and sums
    the output gradient over the tokens for its gradient in backward (read it once), as Megatron's
    ``LinearWithGradAccumulationAndAsyncCommunication`` does."""
    meta = item.meta or {}
    op = meta.get("op")
    shapes = item.shapes or ()
    if len(shapes) < 2:
        return []
    a_shape, b_shape = shapes[0], shapes[1]
    if len(b_shape) == 3:  # grouped experts: one launch over E experts of tokens/E rows each
        experts, k, n = b_shape
        m = max(prod(a_shape[:-1]) // max(experts, 1), 1)
        batch = experts
    else:
        m, k, n, batch = prod(a_shape[:-1]), a_shape[-1], b_shape[-1], 1
    accumulate = op == "wgrad" and meta.get("accumulate", True)
    out_bytes = meta.get("grad_bytes", 4) if accumulate else p.a
    out = [Kernel(f"{op} gemm", GemmShape(m, n, k, batch, p.kind, out_bytes, accumulate))]
    if p.kind == "fp8" and op in ("gemm", "dgrad"):
        out.append(_mem("fp8 cast_transpose", batch * m * k * (p.a + 2)))
    if meta.get("bias") and op == "gemm":
        out.append(_mem("bias add", batch * m * n * 2 * p.a))
    elif meta.get("bias") and op == "dgrad":
        out.append(_mem("bias gradient", batch * m * k * p.a))  # dgrad's k is the output width
    return out


# ---- attention ----------------------------------------------------------------------------------------

def _attention_kernels(item, p: Precision) -> list[Kernel]:
    """The attention core.  Shapes ``((b, heads, s, d), (b, groups, s, d))`` per TP rank; meta ``impl``
    (``flash`` or ``unfused``), ``p`` (attention dropout), ``v_dim`` (value head size), ``causal``.

    Flash (FlashAttention-2/3, cuDNN): the causal kernel computes half the square; backward recomputes
    the scores and does 2.5x the forward's matmul FLOPs (FA2 section 3.1); HBM traffic is Q, K, V, O
    (and dO, dQ, dK, dV, dQ's fp32 accumulator backward).

    Unfused (Megatron's ``DotProductAttention`` without flash): keys and values repeated to every head
    under GQA (``repeat_interleave``), ``baddbmm`` Q K^T into an ``s x s`` buffer with the 1/sqrt(d)
    scale, the fused scale-mask-softmax (``ScaledUpperTriangMaskedSoftmax`` for the causal mask when
    16 < s <= 16384, else masked_fill then softmax: two passes), dropout writing its byte mask, then
    ``bmm`` with V.  Backward: dP = dO V^T, dV = P^T dO, dropout's backward, softmax's backward, dQ =
    dS K, dK = dS^T Q, and the GQA sums."""
    meta = item.meta or {}
    shapes = item.shapes or ()
    if not shapes:
        return []
    b, h, s, d = shapes[0]
    g = shapes[1][1] if len(shapes) > 1 else h
    dv = meta.get("v_dim") or d
    drop = meta.get("p", 0.0) > 0
    a = p.a
    backward = _phase(item) == "backward"
    if meta.get("impl", "flash") == "flash":
        causal = 0.5 if meta.get("causal", True) else 1.0
        forward_flops = 2.0 * b * h * s * s * (d + dv) * causal
        io = (b * h * s * (d + dv) + b * g * s * (d + dv)) * a + b * h * s * 4
        if backward:
            io = io * 2 + b * h * s * d * 4 * 2  # read Q K V O dO, write dQ dK dV, dQ accumulated in fp32
            return [Kernel("flash attention backward", nbytes=io, flash_flops=2.5 * forward_flops, backward=True)]
        return [Kernel("flash attention forward", nbytes=io, flash_flops=forward_flops)]
    bh, square = b * h, b * h * s * s
    fused_softmax = 16 < s <= 16384
    out: list[Kernel] = []
    if not backward:
        if g < h:
            out.append(_mem("repeat_interleave k, v", b * s * (g + h) * (d + dv) * a, 2))
        out.append(Kernel("baddbmm q k^T", GemmShape(s, s, d, bh, p.attention_kind, a)))
        if fused_softmax:
            out.append(_mem("scaled masked softmax", square * 2 * a))
        else:
            out.append(_mem("masked_fill, softmax", square * (4 * a + 1), 2))
        if drop:
            out.append(_mem("attention dropout", square * (2 * a + 1)))
        out.append(Kernel("bmm p v", GemmShape(s, dv, s, bh, p.attention_kind, a)))
        return out
    out.append(Kernel("bmm dO v^T", GemmShape(s, s, dv, bh, p.attention_kind, a)))
    out.append(Kernel("bmm p^T dO", GemmShape(s, dv, s, bh, p.attention_kind, a)))
    if drop:
        out.append(_mem("attention dropout backward", square * (2 * a + 1)))
    out.append(_mem("softmax backward", square * 3 * a))
    out.append(Kernel("bmm dS k", GemmShape(s, d, s, bh, p.attention_kind, a)))
    out.append(Kernel("bmm dS^T q", GemmShape(s, d, s, bh, p.attention_kind, a)))
    if g < h:
        out.append(_mem("sum repeated k, v gradients", b * s * (g + h) * (d + dv) * a, 2))
    return out


# ---- memory-bound operations --------------------------------------------------------------------------

def _elements(item) -> int:
    shapes = item.shapes or ()
    return prod(shapes[0]) if shapes else 0


def _norm_kernels(item, p: Precision) -> list[Kernel]:
    """LayerNorm / RMSNorm (apex ``fused_layer_norm_cuda``, TE alike): forward reads x and writes y (fp32
    statistics per row are negligible); backward computes the weight-gradient partials (reads x and dy),
    reduces them, then dx (reads x and dy, writes dx): 5 passes, 3 kernels."""
    n = _elements(item)
    if _phase(item) == "backward":
        return [_mem("norm backward", n * 5 * p.a, 3)]
    return [_mem("norm forward", n * 2 * p.a)]


def _activation_kernels(item, p: Precision) -> list[Kernel]:
    """GeLU or SwiGLU on the fc1 output (``(s, b, width)``, width doubled for SwiGLU), Megatron's fused
    ``bias_gelu`` / ``bias_swiglu``: forward reads the input (and bias) and writes the output (half the
    width for SwiGLU); backward reads the input and dy and writes dx; with a bias, autograd sums dx over
    the tokens for the bias gradient (one more read)."""
    meta = item.meta or {}
    n = _elements(item)
    swiglu = meta.get("op") == "swiglu"
    backward = _phase(item) == "backward"
    if swiglu:
        per = 2.5 if backward else 1.5
    else:
        per = 3.0 if backward else 2.0
    out = [_mem(f"{meta.get('op')} {'backward' if backward else 'forward'}", n * per * p.a)]
    if backward and meta.get("bias"):
        out.append(_mem("bias gradient", n * p.a))
    return out


def _bda_kernels(item, p: Precision) -> list[Kernel]:
    """Megatron's bias-dropout-add after the attention projection and after fc2 (``fused_bias_dropout``),
    on ``(s / tp under SP, b, hidden)``: forward reads x, the residual (and the bias) and writes the sum
    (and the dropout's byte mask); with no dropout and no bias it is a plain add.  Backward: dropout's
    backward (dy times the mask) when p > 0, the bias gradient's sum when there is a bias; the residual's
    gradient is dy itself (no kernel)."""
    meta = item.meta or {}
    n = _elements(item)
    drop = meta.get("p", 0.0) > 0
    if _phase(item) != "backward":
        return [_mem("bias dropout add", n * (3 * p.a + (1 if drop else 0)))]
    out = []
    if drop:
        out.append(_mem("dropout backward", n * (2 * p.a + 1)))
    if meta.get("bias"):
        out.append(_mem("bias gradient", n * p.a))
    return out


def _rotary_kernels(item, p: Precision) -> list[Kernel]:
    """Rotary position embedding applied to the queries and keys (fused RoPE, Megatron's
    ``--apply-rope-fusion``): read and write each element once, forward and backward alike."""
    return [_mem("rotary", _elements(item) * 2 * p.a)]


def _embedding_kernels(item, p: Precision) -> list[Kernel]:
    """``VocabParallelEmbedding`` (shapes ``((s, b), (vocab / tp, hidden))``, meta ``positions``, ``p``):
    forward masks out-of-range tokens, gathers the word rows (read and write), zeroes the masked rows,
    adds the learned positions (gather and add) and applies the embedding dropout.  Backward: the dense
    embedding gradient (zero the table, scatter-add dy) and its accumulation into the fp32 main gradient
    (read the bf16 gradient, read and write fp32: the table's hook, not fused)."""
    meta = item.meta or {}
    shapes = item.shapes or ()
    if len(shapes) < 2:
        return []
    tokens, (rows, hidden) = prod(shapes[0]), shapes[1][-2:]
    act = tokens * hidden
    positions = meta.get("positions", False)
    if _phase(item) == "backward":
        tables = [rows * hidden] + ([meta.get("max_positions", 0) * hidden] if positions else [])
        return [Kernel("embedding dense backward", nbytes=sum(t * p.a for t in tables) + act * 3 * p.a * len(tables),
                       count=3 * len(tables)),
                Kernel("main-grad accumulate", nbytes=sum(tables) * (p.a + 8), count=len(tables))]
    nbytes = act * 2 * p.a + act * 2 * p.a  # gather, zero the masked rows
    count = 2
    if positions:
        nbytes += act * 2 * p.a + act * 3 * p.a
        count += 2
    if meta.get("p", 0.0) > 0:
        nbytes += act * (2 * p.a + 1)
        count += 1
    return [_mem("embedding forward", nbytes, count)]


def _loss_kernels(item, p: Precision) -> list[Kernel]:
    """Megatron's vocab-parallel cross entropy on ``(s, b, vocab / tp)`` logits, in fp32: forward casts
    the logits to fp32, takes the max, subtracts it, exponentiates, sums, and normalises in place for
    backward (7 kernels, ``a + 36`` bytes per logit); backward scales the saved softmax (less one at
    the target) by the loss gradient and casts it back (``12 + a`` bytes, 2 kernels)."""
    n = _elements(item)
    if _phase(item) == "backward":
        return [_mem("cross entropy backward", n * (12 + p.a), 2)]
    return [_mem("cross entropy forward", n * (36 + p.a), 7)]


def _optimizer_kernels(item, p: Precision) -> list[Kernel]:
    """The optimizer step of one rank (shapes ``((local params,), (owned params,))``: with the distributed
    optimizer a rank owns ``1/dp`` of its stage's parameters).  Megatron's ``zero_grad_buffer`` clears
    the gradient buffer (``meta['grad_bytes']`` per local parameter: fp32, or fp16 for fp16 training,
    whose optimizer first copies the owned fp16 gradients to fp32 main gradients: read 2, write 4);
    fp16 unscales them and checks them for inf/NaN (read and write 4); the gradient norm reads them
    (``multi_tensor_l2norm``, 4);
    clipping scales them only when the norm exceeds the threshold, which steady training rarely does
    (not counted); apex's fused Adam reads the fp32 parameter, gradient and both moments and writes the
    parameter and moments (28); the updated fp32 parameters are copied to the model's bf16 ones
    (read 4, write ``a``).  FP8 (Transformer Engine): every weight is cast to FP8 with its transpose once
    per iteration (read ``a``, write 2)."""
    meta = item.meta or {}
    shapes = item.shapes or ()
    local = prod(shapes[0]) if shapes else 0
    owned = prod(shapes[1]) if len(shapes) > 1 else local
    grad_bytes = meta.get("grad_bytes", 4)
    out = [_mem("zero grad buffer", local * grad_bytes)]
    if grad_bytes < 4:
        out.append(_mem("copy gradients to fp32 main gradients", owned * (grad_bytes + 4)))
    if meta.get("loss_scaling"):
        out.append(_mem("unscale and check for inf", owned * 8))
    out += [_mem("gradient norm", owned * 4), _mem("adam", owned * 28), _mem("copy main params", owned * (4 + p.a))]
    if p.kind == "fp8":
        out.append(_mem("fp8 weight casts", local * (p.a + 2)))
    return out


def _router_kernels(item, p: Precision) -> list[Kernel]:
    """The MoE router: its GEMM plus softmax and top-k over the expert scores (fp32, a few passes)."""
    out = _gemm_kernels(item, p)
    shapes = item.shapes or ()
    if shapes and len(shapes) > 1:
        scores = prod(shapes[0][:-1]) * shapes[1][-1]
        out.append(_mem("router softmax, top-k", scores * 4 * 4, 3))
    return out


# ---- inference (one forward step: a prefill of the batch or one decode step) ---------------------------
#
# Items of workload_generator.inference (built by mocked_model.inference); their stage starts with
# ``prefill`` or ``decode``.  Inference runs without autograd: weights are read once per step (at decode
# sizes every GEMM is bound by that read), activations are bf16 (``p.a``), and the linear layers' weights
# are ``meta['w_kind']`` (``fp8``: DeepSeek's block-scaled FP8 checkpoint served with DeepGEMM-style FP8
# GEMMs, or ``bf16``).

FP8_GROUP = 128
"""Values per fp32 scale of FP8 activations and dispatched tokens (DeepSeek-V3's 1x128 tiles)."""
GDN_CHUNK = 64
"""Chunk length of FLA's chunked gated-delta-rule kernel (``chunk_gated_delta_rule``, the prefill path)."""


def _infer_gemm_kernels(item, p: Precision) -> list[Kernel]:
    """A linear layer at inference: one GEMM, weights read once.  Shapes ``((m, k), (k, n))``; batched
    (MLA's absorbed per-head products) or grouped (the MoE experts of a rank) ``((rows, k), (batch, k, n))``
    with ``rows / batch`` rows per member (a grouped GEMM pads every expert to the busiest one's tokens:
    meta ``rows_per_member`` when given).  FP8 weights take FP8 activations: each GEMM's input is first
    quantized per 1x128 group (read ``a``, write 1 byte and an fp32 scale per group; SGLang and vLLM's
    ``per_token_group_quant_fp8`` kernel)."""
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
        out.append(_mem("fp8 activation quantization", rows * k * (p.a + 1) + rows * ceil(k / FP8_GROUP) * 4))
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
    return [_mem("causal conv1d", nbytes)]


def _add_norm_kernels(item, p: Precision) -> list[Kernel]:
    """vLLM's and SGLang's fused residual add and RMSNorm: read the input and the residual, write the sum
    (the next residual) and the normalized output, one kernel."""
    return [_mem("fused add rmsnorm", _elements(item) * 4 * p.a)]


def _elementwise_kernels(item, p: Precision) -> list[Kernel]:
    """One elementwise kernel touching each element ``meta['passes']`` times (reads plus writes):
    Qwen3-Next's output gate, its gating of the delta rule, a gated norm."""
    return [_mem((item.meta or {}).get("name", "elementwise"), _elements(item) * (item.meta or {}).get("passes", 2) * p.a)]


def _moe_router_kernels(item, p: Precision) -> list[Kernel]:
    """The MoE gate: a bf16 GEMM ``(tokens, hidden) x (hidden, experts)`` and the scoring, (grouped)
    top-k and weight normalisation over the fp32 scores (two kernels, a few passes)."""
    shapes = item.shapes or ()
    out = _infer_gemm_kernels(item, p)
    if len(shapes) > 1:
        out.append(_mem("router scores, top-k", prod(shapes[0][:-1]) * shapes[1][-1] * 4 * 3, 2))
    return out


def _sampling_kernels(item, p: Precision) -> list[Kernel]:
    """Sampling from ``(tokens, vocab)`` logits: fp32 softmax with temperature, then top-k/top-p and the
    draw (two kernels, three fp32 passes)."""
    return [_mem("sampling", _elements(item) * 4 * 3, 2)]


def kernels_of(item, p: Precision) -> list[Kernel] | None:
    """The kernels of one computation item, or None when its operation has no law here."""
    meta = item.meta or {}
    op = meta.get("op")
    if op == "gemm" and str(meta.get("name", "")).endswith("router"):
        return _router_kernels(item, p)
    law = OPS.get(op)
    return law(item, p) if law is not None else None


def price_key(item) -> tuple | None:
    """Everything :func:`kernels_of` reads of an item, as a hashable key (None when a value is not
    hashable): the phase of its stage, its shapes, its meta without the layer index and the module
    name (only whether the name ends in ``router`` matters).  Items of identical layers share a key,
    so a consumer prices each distinct operation once."""
    meta = item.meta or {}
    name = meta.get("name")
    key = (item.stage.split(".", 1)[0], item.shapes, name is not None and str(name).endswith("router"),
           *[(k, v) for k, v in meta.items() if k != "layer" and k != "name"])
    try:
        hash(key)  # meta in insertion order: the same code builds identical layers' meta alike
    except TypeError:
        try:
            key = (*key[:3], *[(k, _frozen(v)) for k, v in key[3:]])
            hash(key)
        except TypeError:
            return None
    return key


def _frozen(value):
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value


OPS: dict[str, Callable[[object, Precision], list[Kernel]]] = {
    "gemm": _gemm_kernels, "dgrad": _gemm_kernels, "wgrad": _gemm_kernels, "attention": _attention_kernels,
    "norm": _norm_kernels, "gelu": _activation_kernels, "swiglu": _activation_kernels, "bda": _bda_kernels,
    "rotary": _rotary_kernels, "embedding": _embedding_kernels, "loss": _loss_kernels,
    "optimizer": _optimizer_kernels,
    "infer_gemm": _infer_gemm_kernels, "decode_attention": _decode_attention_kernels, "gdn": _gdn_kernels,
    "conv1d": _conv1d_kernels, "add_norm": _add_norm_kernels, "elementwise": _elementwise_kernels,
    "moe_router": _moe_router_kernels, "sampling": _sampling_kernels,
}
"""Operation name (``meta['op']``) -> its kernel list."""

"""The kernels of each mocked training operation: what Megatron-LM launches for one computation item, forward,
backward and recomputed forward, with the FLOPs and HBM bytes of each, per software stack.

An item says what it is in ``meta['op']`` and how big in ``shapes`` (the mocked modules' conventions,
:mod:`mocked_model.megatron`); the stack rides in its meta (:class:`utils.config.KernelStack`, set by
:class:`mocked_model.megatron_layers.MegatronContext`):

- ``te`` (``--transformer_impl transformer_engine``, Megatron-LM's default): LayerNorm fused into the following
  linear (``TELayerNormColumnParallelLinear``: under FP8 the norm writes the GEMM's FP8 input itself), biases in the
  GEMMs' epilogues, cuDNN's fused attention, fused RoPE, fused Adam and multi-tensor norms;
- ``local`` with apex: apex's fused norms, Megatron's fused scale-mask-softmax kernel, gradient-accumulation fusion,
  apex's fused Adam; biases added after the GEMMs (``LinearWithGradAccumulationAndAsyncCommunication``);
- ``local`` without apex (``--no_apex``, Megatron-core's fallbacks): torch norms, the softmax in fp32 with an explicit
  causal mask (cast, ``masked_fill_``, softmax, cast back), eager rotary, the weight gradient written in bf16 and
  added to the fp32 main gradient by DDP's hook, torch's ``AdamW`` (foreach) and a gradient norm that synchronises
  with the host once per tensor (``local_multi_tensor_l2_norm``).

Items without these keys (DeepSpeed's, older workloads) price as the fused local path.  ``a`` below is the
activation's bytes per element (2 for bf16 and fp16, also under FP8 training, where Transformer Engine keeps
activations in bf16; 4 for fp32).  Memory-bound kernels are priced at their kind's measured share of the HBM rate
(:data:`mocked_model.compute.gpus.MEMORY_KINDS`), on the bytes they move as counted here.

Sources (cited per function): Megatron-LM ``megatron/core/fusions`` (``fused_bias_gelu``, ``fused_bias_swiglu``,
``fused_bias_dropout``, ``fused_softmax``), ``megatron/core/transformer/dot_product_attention.py``,
``megatron/core/tensor_parallel/cross_entropy.py``, ``megatron/core/optimizer`` and ``megatron/core/utils.py`` (the
fallbacks), ``megatron/core/extensions/transformer_engine.py``; Transformer Engine ``pytorch/module/linear.py``,
``layernorm_linear.py`` and its low-precision docs (``docs/features/low_precision_training``); FlashAttention-2
(Dao 2023, section 3.1: the backward pass does 2.5x the forward's matmul FLOPs).
"""

from __future__ import annotations

from collections.abc import Callable
from math import ceil, prod

from mocked_model.compute.attention_band import context_parallel_kernels as _context_parallel_kernels
from mocked_model.compute.attention_band import piece_work
from mocked_model.compute.kernel_list import (
    FP8_BLOCK,
    Kernel,
    Precision,
    block_scaled,
    elements,
    fp8_quantize,
    mem,
    phase,
)
from mocked_model.compute.kernels import GemmShape, attention_work
from mocked_model.compute.moe_ops import (
    dispatch_meta_kernels,
    expert_bias_kernels,
    grouped_gemm_kernels,
    permute_kernels,
    router_kernels,
    sort_chunks_kernels,
    unpermute_kernels,
)

HOST_SYNC_US = 10.0
"""A device-to-host copy of one scalar and its synchronisation (``float(tensor)``, ``torch.tensor(list of CUDA
scalars)``): the CUDA copy's launch and completion latency, a few microseconds each way (NVIDIA's Nsight Systems guide
puts a PyTorch elementwise launch's round trip near 20 us on V100); taken as 10 us."""
FOREACH_ELEMENTS = 2.07e7
"""Elements one torch ``_foreach_*`` launch covers: torch AdamW's foreach ops launched 135 kernels each over the
2.80e9 parameters of profiling/measurements/h200 llama3_8b_8l_sdpa (its kernel trace)."""


# ---- GEMMs ------------------------------------------------------------------------------------------

def _gemm_kernels(item, p: Precision) -> list[Kernel]:
    """A linear layer's GEMM.  Shapes: forward ``((s, b, k), (k, n))``; ``dgrad`` ``((s, b, out), (out, in))``;
    ``wgrad`` ``((out, tokens), (tokens, in))``; grouped experts ``((tokens, k), (E, k, n))``.

    - The weight gradient accumulates into the main gradient in its epilogue (Megatron's
      ``gradient_accumulation_fusion``, ``meta['accumulate']``): the result read and written in the main gradient's
      dtype (``meta['grad_bytes']``).  Without it the GEMM writes the gradient in ``a`` and DDP's hook adds it to
      the main gradient (``main_grad.add_(grad)``: fp32 += bf16 is a mixed-dtype add, 4 + a + 4 bytes per weight;
      fp16 += fp16 a plain one).
    - A bias (``meta['bias']``): Transformer Engine adds it in the GEMM's epilogue and reduces its gradient in the
      wgrad GEMM or the FP8 cast; the local path adds it after the GEMM and sums the output gradient for it.
    - FP8 (``p.kind``): forward quantizes the input (unless a fused norm wrote it in FP8: ``meta['fp8_input']``, which
      on Hopper still needs its transpose for wgrad), dgrad quantizes the output gradient; wgrad reuses both; the
      weights are quantized once per iteration (the optimizer item: Megatron caches them across micro-batches).
      ``meta['bf16']``: a GEMM Megatron keeps out of FP8 (the output layer, the router).
    - ``meta['chunks']``: Transformer Engine's comm-GEMM overlap (``--tp_comm_overlap``) runs the GEMM as that many
      GEMMs of ``m / chunks`` rows (a ring exchange: one per TP rank's share; a pipelined reduce-scatter: 4), each
      paying its own waves and fixed cost."""
    meta = item.meta or {}
    op = meta.get("op")
    shapes = item.shapes or ()
    if len(shapes) < 2:
        return []
    a_shape, b_shape = shapes[0], shapes[1]
    if len(b_shape) == 3 and meta.get("tokens_per_expert"):  # grouped experts of their own token counts
        grouped = grouped_gemm_kernels(item, p)
        if grouped is not None:
            return grouped
    if len(b_shape) == 3:  # grouped experts: one launch over E experts of tokens/E rows each
        experts, k, n = b_shape
        m = max(prod(a_shape[:-1]) // max(experts, 1), 1)
        batch = experts
    else:
        m, k, n, batch = prod(a_shape[:-1]), a_shape[-1], b_shape[-1], 1
    kind = "bf16" if p.kind == "fp8" and meta.get("bf16") else p.kind
    accumulate = op == "wgrad" and meta.get("accumulate", True)
    out_bytes = meta.get("grad_bytes", 4) if accumulate else p.a
    chunks = max(int(meta.get("chunks", 1)), 1)
    block = block_scaled(kind, meta)
    if chunks > 1 and m >= chunks:  # TE's comm-GEMM overlap: the rows in chunks, each its own GEMM
        out = [Kernel(f"{op} gemm ({chunks} chunks)",
                      GemmShape(m // chunks, n, k, batch, kind, out_bytes, accumulate, block), count=chunks)]
    else:
        out = [Kernel(f"{op} gemm", GemmShape(m, n, k, batch, kind, out_bytes, accumulate, block))]
    if op == "wgrad" and not accumulate and meta.get("main_grad", True):
        g = meta.get("grad_bytes", 4)
        out.append(mem("main-grad accumulate", batch * m * n * (g + p.a + g), kind="add" if g == p.a else "mixed_add"))
    if kind == "fp8" and op == "gemm":
        if meta.get("fp8_input"):
            if meta.get("fp8_recipe", "delayed") not in FP8_BLOCK and p.fp8_transpose:
                out.append(mem("fp8 transpose of the norm's output", batch * m * k * 2, kind="fp8_cast"))
        else:
            out += fp8_quantize("fp8 cast of the input", batch * m * k, p, meta)
    elif kind == "fp8" and op == "dgrad":
        out += fp8_quantize("fp8 cast of the output gradient", batch * m * k, p, meta)
    if meta.get("bias") and not meta.get("te"):
        if op == "gemm":
            out.append(mem("bias add", batch * m * n * 2 * p.a, kind="add"))
        elif op == "dgrad":
            out.append(mem("bias gradient", batch * m * k * p.a))  # dgrad's k is the output width
    return out


# ---- attention ----------------------------------------------------------------------------------------

def _attention_kernels(item, p: Precision) -> list[Kernel]:
    """The attention core.  Shapes ``((b, heads, s, d), (b, groups, s, d))`` per TP rank; meta ``impl`` (``flash`` or
    ``unfused``), ``softmax`` (``fused`` or ``torch``), ``p`` (attention dropout), ``v_dim``, ``causal``.

    Flash (cuDNN's fused attention under Transformer Engine, FlashAttention-2/3): the causal kernel computes half the
    square; backward recomputes the scores and does 2.5x the forward's matmul FLOPs (FA2 section 3.1); each thread
    block adds its overhead (:func:`~mocked_model.compute.kernels.flash_attention_ns`); HBM traffic is Q, K, V, O (and
    dO, dQ, dK, dV, dQ's fp32 accumulator backward).  A piece of the score matrix (context parallelism: the second
    shape's sequence is the keys', ``(b, groups, s_kv, d)``, and ``causal`` False for a ring round off the diagonal)
    or a sliding window (``meta['window']``) is priced by :mod:`mocked_model.compute.attention_band`, with the
    correction, accumulation and reordering kernels context parallelism adds (``cp_round``, ``cp_a2a``).

    Unfused (Megatron's ``DotProductAttention``): keys and values repeated to every head under GQA, ``baddbmm`` Q K^T
    into an ``s x s`` buffer with the 1/sqrt(d) scale, then the softmax and dropout, then ``bmm`` with V.  With the
    fused softmax (``FusedScaleMaskSoftmax``'s CUDA kernels, apex or Transformer Engine; ``ScaledUpperTriangMasked
    Softmax`` for the causal mask when 16 < s <= 16384, else masked_fill then softmax) one kernel reads and writes
    each score; without it (``forward_torch_softmax``) the scores are cast to fp32, masked in place through the
    broadcast causal mask, soft-maxed and cast back.  Backward: dP = dO V^T, dV = P^T dO, dropout's backward,
    softmax's backward (the torch path in fp32 with its casts and the masked_fill's backward), dQ = dS K,
    dK = dS^T Q, and the GQA sums."""
    meta = item.meta or {}
    shapes = item.shapes or ()
    if not shapes:
        return []
    b, h, s, d = shapes[0]
    g = shapes[1][1] if len(shapes) > 1 else h
    dv = meta.get("v_dim") or d
    drop = meta.get("p", 0.0) > 0
    a = p.a
    backward = phase(item) == "backward"
    if meta.get("impl", "flash") == "flash":
        causal = meta.get("causal", True)
        kv = shapes[1][2] if len(shapes) > 1 and len(shapes[1]) > 3 else s
        window = meta.get("window")
        if kv != s or window is not None:  # a context-parallel piece or a sliding window (attention_band)
            flops, cta = piece_work(b, h, s, kv, d, dv, causal, window, backward)
        else:
            flops, cta = attention_work(b, h, s, d, dv, causal, backward)
        io = (b * h * s * (d + dv) + b * g * kv * (d + dv)) * a + b * h * s * 4
        extra = _context_parallel_kernels(meta, b, h, g, s, kv, d, dv, a, backward)
        if backward:
            io = io * 2 + b * h * s * d * 4 * 2  # read Q K V O dO, write dQ dK dV, dQ accumulated in fp32
            return [Kernel("flash attention backward", nbytes=io, flash_flops=flops, backward=True, cta_flops=cta), *extra]
        return [Kernel("flash attention forward", nbytes=io, flash_flops=flops, cta_flops=cta), *extra]
    bh, square = b * h, b * h * s * s
    torch_softmax = meta.get("softmax", "fused") == "torch"
    fused_softmax = not torch_softmax and 16 < s <= 16384
    out: list[Kernel] = []
    if not backward:
        if g < h:
            out.append(mem("repeat_interleave k, v", b * s * (g + h) * (d + dv) * a, 2))
        out.append(Kernel("baddbmm q k^T", GemmShape(s, s, d, bh, p.attention_kind, a)))
        if torch_softmax:
            out += [mem("cast to fp32, softmax", square * (a + 4 + 8), 2, kind="softmax"),
                    mem("masked_fill_ (causal mask)", square * 8, kind="masked_fill"),
                    mem("cast to bf16", square * (4 + a), kind="copy")]
        elif fused_softmax:
            out.append(mem("scaled masked softmax", square * 2 * a, kind="fused_softmax"))
        else:
            out.append(mem("masked_fill, softmax", square * (4 * a + 1), 2, kind="softmax"))
        if drop:
            out.append(mem("attention dropout", square * (2 * a + 1), kind="dropout_add"))
        out.append(Kernel("bmm p v", GemmShape(s, dv, s, bh, p.attention_kind, a)))
        return out
    out.append(Kernel("bmm dO v^T", GemmShape(s, s, dv, bh, p.attention_kind, a)))
    out.append(Kernel("bmm p^T dO", GemmShape(s, dv, s, bh, p.attention_kind, a)))
    if drop:
        out.append(mem("attention dropout backward", square * (2 * a + 1), kind="dropout_add"))
    if torch_softmax:
        out += [mem("cast to fp32, softmax backward", square * (a + 4 + 12), 2, kind="softmax"),
                mem("masked_fill backward", square * 8, kind="masked_fill"),
                mem("cast to bf16", square * (4 + a), kind="copy")]
    else:
        out.append(mem("softmax backward", square * 3 * a, kind="fused_softmax"))
    out.append(Kernel("bmm dS k", GemmShape(s, d, s, bh, p.attention_kind, a)))
    out.append(Kernel("bmm dS^T q", GemmShape(s, d, s, bh, p.attention_kind, a)))
    if g < h:
        out.append(mem("sum repeated k, v gradients", b * s * (g + h) * (d + dv) * a, 2))
    return out


# ---- memory-bound operations --------------------------------------------------------------------------

def _norm_kernels(item, p: Precision) -> list[Kernel]:
    """LayerNorm / RMSNorm (``meta['norm']``).  Fused (``meta['fused']``: Transformer Engine's, routed to cuDNN's, or
    apex's ``fused_layer_norm_cuda``): forward reads x and writes y (fp32 statistics per row are negligible), in FP8
    when it feeds an FP8 GEMM (``meta['fp8_out']``); backward reads x and dy, writes dx and per-block weight-gradient
    partials, then reduces them: 3 passes, 2 kernels.  Torch's (the path without apex): the same forward, and a
    backward whose weight-gradient kernel reads x and dy again (``GammaBetaBackward``): 5 passes, 2 kernels."""
    meta = item.meta or {}
    n = elements(item)
    fused = meta.get("fused", True)
    kind = "te_norm" if fused else ("rms_norm" if meta.get("norm") == "RMSNorm" else "norm")
    if phase(item) == "backward":
        return [mem("norm backward", n * (3 if fused else 5) * p.a, 2, kind=kind)]
    out_bytes = 1 if meta.get("fp8_out") and p.kind == "fp8" else p.a
    return [mem("norm forward", n * (p.a + out_bytes), kind=kind)]


def _activation_kernels(item, p: Precision) -> list[Kernel]:
    """GeLU or SwiGLU on the fc1 output (``(s, b, width)``, width doubled for SwiGLU).  Megatron's jit-fused
    ``bias_gelu`` / ``bias_swiglu`` (``meta['fused']``, the default): forward reads the input (and bias) and writes the
    output (half the width for SwiGLU), backward reads the input and dy and writes dx.  Eager (``--no_bias_gelu_fusion``):
    GeLU as one kernel after the bias add; SwiGLU as ``silu(a) * b`` (a silu and a multiply: 2.5 passes of the width
    forward, about twice that backward).  With a bias, autograd sums dx over the tokens for the bias gradient."""
    meta = item.meta or {}
    n = elements(item)
    swiglu = meta.get("op") == "swiglu"
    backward = phase(item) == "backward"
    fused = meta.get("fused", True)
    tag = f"{meta.get('op')} {'backward' if backward else 'forward'}"
    if fused:
        per = (2.5 if backward else 1.5) if swiglu else (3.0 if backward else 2.0)
        out = [mem(tag, n * per * p.a, kind="fused_activation")]
    elif swiglu:
        out = [mem(tag, n * (5.0 if backward else 2.5) * p.a, 4 if backward else 2, kind="eager_swiglu")]
    else:
        out = [mem(tag, n * (3.0 if backward else 2.0) * p.a, kind="activation")]
        if meta.get("bias") and not backward:
            out.append(mem("bias add", n * 3 * p.a, kind="add"))
    if backward and meta.get("bias"):
        out.append(mem("bias gradient", n * p.a))
    if meta.get("weighted") and not fused:
        out += _weighting_kernels(n // 2 if swiglu else n, p.a, meta.get("probs_bytes", p.a), backward)
    return out


def _weighting_kernels(m: int, a: int, pb: int, backward: bool) -> list[Kernel]:
    """An MoE expert's activation output (``m`` values of ``a`` bytes) times its row's routing probability (``pb``
    bytes), unfused: ``x * probs.unsqueeze(-1)`` then ``.to(x.dtype)`` (Megatron-core ``TEGroupedMLP.bias_act_func``'s
    and ``MLP.forward``'s unfused branch).  fp32 probabilities (``--moe_router_dtype fp32``) widen the product to fp32,
    so forward writes it in fp32 and casts it back.  Backward, as autograd runs it eagerly: the cast's backward (the
    gradient up to fp32), ``g * p`` and its cast to the input's dtype (the input's gradient), ``g * x`` at full size
    and its sum over each row (the broadcast probabilities' gradient).  With probabilities of the activations' width
    the product stays in it and neither cast runs."""
    if pb > a:
        if backward:  # cast's backward, g * p, cast down, g * x, its row sums
            return [mem("weighting backward", m * ((a + pb) + 2 * pb + (pb + a) + (2 * pb + a) + pb), 5, kind="add")]
        return [mem("weighting by the probabilities, cast back", m * ((a + pb) + (pb + a)), 2, kind="add")]
    if backward:  # g * p, g * x, its row sums
        return [mem("weighting backward", m * (2 * a + 3 * a + a), 3, kind="add")]
    return [mem("weighting by the probabilities", m * 2 * a, kind="add")]


def _bda_kernels(item, p: Precision) -> list[Kernel]:
    """Megatron's bias-dropout-add after the attention projection and after fc2 (``fused_bias_dropout``, jit-fused
    unless ``--no_bias_dropout_fusion``), on ``(s / tp under SP, b, hidden)``: forward reads x, the residual (and the
    bias) and writes the sum (and the dropout's byte mask); with no dropout and no bias it is a plain add.  Backward:
    dropout's backward (dy times the mask) when p > 0, the bias gradient's sum when there is a bias, and the residual
    stream's gradient: the layer's input feeds both the norm and this add, so autograd adds the two gradients
    (read both, write the sum).  The eager path runs the bias add, the dropout and the residual add separately."""
    meta = item.meta or {}
    n = elements(item)
    drop = meta.get("p", 0.0) > 0
    bias = meta.get("bias")
    fused = meta.get("fused", True)
    if phase(item) != "backward":
        if drop:
            out = [mem("bias dropout add", n * (3 * p.a + 1), kind="dropout_add")]
        else:
            out = [mem("residual add", n * 3 * p.a, kind="add")]
        if bias and not fused:
            out.append(mem("bias add", n * 3 * p.a, kind="add"))
        return out
    out = [mem("residual gradient add", n * 3 * p.a, kind="add")]
    if drop:
        out.append(mem("dropout backward", n * (2 * p.a + 1), kind="dropout_add"))
    if bias:
        out.append(mem("bias gradient", n * p.a))
    return out


def _rotary_kernels(item, p: Precision) -> list[Kernel]:
    """Rotary position embedding of the queries and keys.  Fused (Transformer Engine's ``fused_rope``, Megatron's
    ``--apply-rope-fusion``, the default with TE): read and write each element once, forward and backward alike.
    Eager (``apply_rotary_pos_emb`` without fusion, the local path): ``t * cos + rotate_half(t) * sin`` for the queries
    and the keys, five broadcast kernels each (neg, cat, two multiplies, add): about 10 passes of the elements, forward
    and backward (the H200's eager rotary took 550 / 600 us forward / backward on 8192x5120)."""
    meta = item.meta or {}
    n = elements(item)
    if meta.get("fused", True):
        return [mem("rotary", n * 2 * p.a, kind="fused_rotary")]
    return [mem("rotary (eager)", n * 10 * p.a, 10, kind="rotary")]


def _embedding_kernels(item, p: Precision) -> list[Kernel]:
    """``VocabParallelEmbedding`` (shapes ``((s, b), (vocab / tp, hidden))``, meta ``positions``, ``p``): forward masks
    out-of-range tokens, gathers the word rows (read and write), zeroes the masked rows, adds the learned positions
    (gather and add) and applies the embedding dropout.  Backward: the dense embedding gradient (zero the table,
    scatter-add dy) and its accumulation into the fp32 main gradient (read the bf16 gradient, read and write fp32:
    the table's hook, not fused)."""
    meta = item.meta or {}
    shapes = item.shapes or ()
    if len(shapes) < 2:
        return []
    tokens, (rows, hidden) = prod(shapes[0]), shapes[1][-2:]
    act = tokens * hidden
    positions = meta.get("positions", False)
    if phase(item) == "backward":
        tables = [rows * hidden] + ([meta.get("max_positions", 0) * hidden] if positions else [])
        return [Kernel("embedding dense backward", nbytes=sum(t * p.a for t in tables) + act * 3 * p.a * len(tables),
                       count=3 * len(tables)),
                mem("main-grad accumulate", sum(tables) * (p.a + 8), len(tables), kind="mixed_add")]
    nbytes = act * 2 * p.a + act * 2 * p.a  # gather, zero the masked rows
    count = 2
    if positions:
        nbytes += act * 2 * p.a + act * 3 * p.a
        count += 2
    if meta.get("p", 0.0) > 0:
        nbytes += act * (2 * p.a + 1)
        count += 1
    return [mem("embedding forward", nbytes, count)]


def _loss_kernels(item, p: Precision) -> list[Kernel]:
    """The vocab-parallel cross entropy on ``(s, b, vocab / tp)`` logits.  Megatron's (``cross_entropy.py``, in fp32):
    forward casts the logits to fp32, takes the max, subtracts it in place, exponentiates in place, sums, and
    normalises in place for backward (``a + 36`` bytes per logit, 6 kernels); backward scales the saved softmax (less
    one at the target) by the loss gradient and casts it back (``12 + a`` bytes, 2 kernels).  Fused
    (``--cross_entropy_loss_fusion``): forward reads the logits once and writes their gradient in place, backward
    scales it by the loss gradient."""
    meta = item.meta or {}
    n = elements(item)
    backward = phase(item) == "backward"
    if meta.get("fused"):
        return [mem(f"fused cross entropy {'backward' if backward else 'forward'}", n * 2 * p.a,
                    kind="fused_cross_entropy")]
    if backward:
        return [mem("cross entropy backward", n * (12 + p.a), 2, kind="copy")]
    return [mem("cross entropy forward", n * (36 + p.a), 6, kind="copy")]


def _optimizer_kernels(item, p: Precision) -> list[Kernel]:
    """The optimizer step of one rank (shapes ``((local params,), (owned params,))``: with the distributed optimizer a
    rank owns ``1/dp`` of its stage's parameters; ``meta['tensors']``: its parameter tensors).

    Every stack: DDP's NaN check reads the gradient buffer (``check_for_nan_in_grad``: a norm, synchronised with the
    host); fp16 training copies the owned fp16 gradients to fp32 (read 2, write 4) and unscales and checks them for
    inf (read and write 4); clipping scales only when the norm exceeds the threshold, which steady training rarely
    does (not counted); ``zero_grad_buffer`` clears the gradient buffer (``meta['grad_bytes']`` per local parameter)
    for the next iteration.  FP8 (Transformer Engine): every weight is quantized once per iteration (read ``a``,
    write its FP8 copies).

    Fused (``meta['impl']`` ``fused``: Transformer Engine's or apex's ``FusedAdam`` with ``multi_tensor_l2norm`` and
    ``multi_tensor_scale``): the gradient norm reads the owned fp32 gradients (4); Adam reads the fp32 parameter,
    gradient and both moments and writes the parameter and moments (28); the updated parameters are copied to the
    model's (read 4, write ``a``; per tensor with the distributed optimizer).

    Torch (``--no_apex``): ``local_multi_tensor_l2_norm`` runs one ``torch.norm`` per tensor and then
    ``torch.tensor`` of the list, one device-to-host synchronisation per tensor; torch's ``AdamW`` (foreach): weight
    decay, ``lerp`` of the first moment, ``mul`` and ``addcmul`` of the second, ``sqrt``, ``div`` and ``add`` of eps into
    a temporary, ``addcdiv`` of the parameter: 84 bytes per parameter over 8 foreach kernels; the copy to the model's
    parameters as ``dst.copy_(src * 1.0)`` per tensor (two kernels: 8 + 4 + ``a`` bytes)."""
    meta = item.meta or {}
    shapes = item.shapes or ()
    local = prod(shapes[0]) if shapes else 0
    owned = prod(shapes[1]) if len(shapes) > 1 else local
    tensors = max(int(meta.get("tensors", 1)), 1)
    grad_bytes = meta.get("grad_bytes", 4)
    torch = meta.get("impl", "fused") == "torch"
    out = [mem("DDP NaN check of the gradient buffer", local * grad_bytes, kind="foreach", host_us=HOST_SYNC_US)]
    if grad_bytes < 4:
        out.append(mem("copy gradients to fp32 main gradients", owned * (grad_bytes + 4), kind="copy"))
    if meta.get("loss_scaling"):
        out.append(mem("unscale and check for inf", owned * 8, kind="foreach", host_us=HOST_SYNC_US))
    if torch:
        launches = ceil(owned / FOREACH_ELEMENTS)
        out += [mem("gradient norm (per tensor, host-synchronised)", owned * 4, tensors, kind="foreach",
                    host_us=tensors * HOST_SYNC_US),
                mem("AdamW (foreach)", owned * 84, 8 * launches, kind="foreach"),
                mem("copy main params (per tensor)", owned * (8 + 4 + p.a), 2 * tensors, kind="foreach")]
    else:
        copies = tensors if meta.get("distributed") else 1
        out += [mem("gradient norm", owned * 4, kind="foreach", host_us=HOST_SYNC_US),
                mem("adam", owned * 28, kind="adam"),
                mem("copy main params", owned * (4 + p.a), copies, kind="foreach")]
    if p.kind == "fp8":
        out += fp8_quantize("fp8 weight casts", local, p, meta)
    out.append(mem("zero grad buffer", local * grad_bytes))
    return out


def _router_kernels(item, p: Precision) -> list[Kernel]:
    """The MoE router's gating GEMM (Megatron-core ``router_gating_linear``): bf16 inputs under FP8 and bf16; with
    ``--moe_router_dtype fp32`` (``meta['router_dtype']``) Transformer Engine's ``general_gemm`` writes the logits in
    fp32, and backward casts the weight and the input to fp32 and runs both gradient GEMMs in fp32 (the input's
    cast: read ``a``, write 4 bytes per value).  The score, top-k and losses are the ``moe_route`` item
    (:func:`mocked_model.compute.moe_ops.router_kernels`); items without it (older workloads) carry them here
    (fp32, a few passes)."""
    meta = item.meta or {}
    fp32 = meta.get("router_dtype") in ("fp32", "fp64")
    backward = meta.get("op") in ("dgrad", "wgrad")
    kind = "fp32" if fp32 and backward else ("bf16" if p.kind == "fp8" else p.kind)
    out = _gemm_kernels(item, Precision(kind, p.a))
    shapes = item.shapes or ()
    if fp32 and meta.get("op") == "gemm" and out and out[0].gemm is not None:
        g = out[0].gemm  # the logits written in fp32
        out[0] = Kernel(out[0].name, GemmShape(g.m, g.n, g.k, g.batch, g.kind, 4, g.accumulate))
    if fp32 and meta.get("op") == "wgrad" and shapes:
        out.append(mem("router input cast to fp32", prod(shapes[0]) * (p.a + 4), kind="copy"))
    if not meta.get("routed") and shapes and len(shapes) > 1 and meta.get("op") == "gemm":
        scores = prod(shapes[0][:-1]) * shapes[1][-1]
        out.append(mem("router softmax, top-k", scores * 4 * 4, 3))
    return out


def _copy_kernels(item, p: Precision) -> list[Kernel]:
    """A concatenation into a new tensor (``torch.cat``, e.g. the MTP layer's embedding and hidden states,
    :mod:`mocked_model.mtp`): read and write every element of the output once."""
    return [mem("concatenate", elements(item) * 2 * p.a, kind="copy")]


OPS: dict[str, Callable[[object, Precision], list[Kernel]]] = {
    "copy": _copy_kernels,
    "gemm": _gemm_kernels, "dgrad": _gemm_kernels, "wgrad": _gemm_kernels, "attention": _attention_kernels,
    "norm": _norm_kernels, "gelu": _activation_kernels, "swiglu": _activation_kernels, "bda": _bda_kernels,
    "rotary": _rotary_kernels, "embedding": _embedding_kernels, "loss": _loss_kernels,
    "optimizer": _optimizer_kernels, "moe_route": router_kernels, "moe_dispatch_meta": dispatch_meta_kernels,
    "moe_expert_bias": expert_bias_kernels,
    "moe_permute": permute_kernels, "moe_unpermute": unpermute_kernels, "moe_sort_chunks": sort_chunks_kernels,
}
"""Training operation name (``meta['op']``) -> its kernel list."""
ROUTER = _router_kernels

"""Real torch operations of one rank's share of a Megatron layer and model, built from the
torch-free :class:`~mocked_model.aiob.layout.OpSpec` list, for AIOB to time forward and backward.

Each :class:`TimedOp` owns its inputs and weights (created once, on the device, in the timing dtype),
runs its forward through autograd and its backward from a fixed output gradient, so that the
backward time covers every gradient Megatron computes there (input gradient and weight gradient).

What runs follows the job's software stack, which the spec's ``dims`` carry (``stack``: ``te``, ``local`` or
``local-torch``, and the per-operation choices of :mod:`mocked_model.compute.training_ops`, whose docstrings list
the kernels each stack launches).  Every op records what actually ran in ``implementation``, including a fallback
and why:

- ``te`` (``--transformer_impl transformer_engine``): Transformer Engine's modules when ``transformer_engine`` is
  importable on a GPU: ``te.Linear`` for every linear (the QKV and fc1 GEMMs are those of ``te.LayerNormLinear``:
  the compute model prices the norm and the GEMM as separate items, so the norm is timed alone with
  ``te.LayerNorm`` / ``te.RMSNorm`` in its own section and the GEMM with ``te.Linear`` in the linear's; under FP8
  ``te.Linear`` quantizes its bf16 input itself, a cast ``LayerNormLinear``'s norm would have written, so that cast
  lands in the linear's section), ``fuse_wgrad_accumulation`` into an fp32 ``main_grad``, FP8 through TE's
  autocast with the ``--fp8_recipe`` recipe (``DelayedScaling``, ``Float8CurrentScaling``, ``MXFP8BlockScaling``,
  ``Float8BlockScaling``) where the GPU supports it, ``te.DotProductAttention`` (TE picks cuDNN's fused or the
  flash kernel), TE's fused RoPE; FusedAdam with multi-tensor norms.  Without Transformer Engine (a CPU, or not
  installed) each falls back to its torch implementation, recorded as ``transformer_engine not importable: torch
  ... (why)``;
- ``local`` (apex): apex's fused norms, Megatron's fused scale-mask-softmax kernel (apex's or TE's
  ``scaled_upper_triang_masked_softmax``; without them ``torch.softmax`` on the bf16 scores with the causal mask
  applied by one ``masked_fill``), Megatron's local linear (GEMM then bias add) with apex's gradient-accumulation
  fusion, apex's FusedAdam;
- ``local-torch`` (``--no_apex``): torch norms, Megatron's ``forward_torch_softmax`` (scores cast to fp32,
  ``masked_fill_`` through a [1, 1, s, s] causal bool mask with -10000, softmax, cast back, dropout), eager rotary
  on the queries and the keys, the weight gradient written in the activation dtype and added to an fp32
  ``main_grad`` (DDP's hook) inside the linear's backward, torch's ``AdamW(foreach=True)`` with a per-tensor
  ``torch.norm`` synchronised with the host.

On every stack Megatron's jit-fused bias-GeLU / bias-SwiGLU, bias-dropout-add and (``--cross_entropy_loss_fusion``)
cross entropy run through ``torch.compile`` (Megatron's ``jit_fuser`` on torch >= 2.2), their eager versions when not
fused or when ``torch.compile`` fails (recorded).  Specs without ``stack`` (built by hand, or by
:mod:`profiling.compute`) time AIOB's earlier fixed implementations: apex norms when importable, flash-attn or SDPA
(or the unfused attention with ``impl`` ``unfused``), eager activations, ``F.cross_entropy``, torch's Adam.

Other optional kernels: MoE experts run grouped_gemm's ``gmm`` (one launch for all local experts) when importable,
else one matmul per local expert with its routed token count, on every stack (Transformer Engine's ``GroupedLinear``
is not timed; without gradient-accumulation fusion their backward adds the weight gradient to the main gradient);
the router and the embedding are the same torch operations on every stack.  On a CPU the operations run in float32 (AICB's CPU
behaviour) and none of the CUDA packages apply, but which operations run follows the stack.
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from mocked_model.aiob.layout import OPTIMIZER_CAP, OpSpec

TE_MISSING = "transformer_engine not importable"
"""How an op of the Transformer Engine stack that runs its torch fallback starts its ``implementation``."""
FP8_RECIPES = {"delayed": "DelayedScaling", "tensorwise": "Float8CurrentScaling", "mxfp8": "MXFP8BlockScaling",
               "blockwise": "Float8BlockScaling"}
"""Transformer Engine's recipe class (``transformer_engine.common.recipe``) of each ``--fp8_recipe``."""
FP8_CHECKS = {"mxfp8": "check_mxfp8_support", "blockwise": "check_fp8_block_scaling_support"}
"""Transformer Engine's support check of a recipe (``check_fp8_support`` for the others)."""
MASK_VALUE = -10000.0
"""Megatron's ``attention_mask_func``: masked scores are filled with this before the torch softmax."""


def torch_dtype(name: str, device: torch.device) -> torch.dtype:
    """The timing dtype: the job's on a GPU (FP8 GEMMs are timed in bf16 unless Transformer Engine runs them
    in FP8), float32 on a CPU (CPU kernels for half types are slow paths that say nothing about the GPU)."""
    if device.type != "cuda":
        return torch.float32
    return {"float16": torch.float16, "fp16": torch.float16, "half": torch.float16, "float32": torch.float32,
            "fp32": torch.float32, "float": torch.float32}.get(name.lower(), torch.bfloat16)


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:100]}" if text else type(exc).__name__


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


# ---- optional kernels ------------------------------------------------------------------------

def _apex_norms() -> tuple[Callable | None, Callable | None]:
    try:
        from apex.normalization.fused_layer_norm import fused_layer_norm_affine, fused_rms_norm_affine
    except Exception:  # ImportError, or a broken build raising at import: fall back to torch
        return None, None
    return fused_layer_norm_affine, fused_rms_norm_affine


def _flash_attn() -> tuple[Callable | None, str]:
    try:
        import flash_attn
        from flash_attn import flash_attn_func
    except Exception:
        return None, ""
    return flash_attn_func, getattr(flash_attn, "__version__", "?")


def _grouped_gemm() -> Callable | None:
    try:
        from grouped_gemm import ops
    except Exception:
        return None
    return ops.gmm


@functools.cache
def _te_import() -> tuple[Any, str]:
    try:
        import transformer_engine
        import transformer_engine.pytorch as te
    except Exception as exc:  # not installed, or a build that does not match this torch / CUDA
        return None, _why(exc)
    return te, str(getattr(transformer_engine, "__version__", "?"))


def _transformer_engine(device: torch.device) -> tuple[Any, str]:
    """``(transformer_engine.pytorch, version)``, or ``(None, why not)`` (its kernels need CUDA)."""
    if device.type != "cuda":
        return None, "a CPU run: Transformer Engine's kernels need CUDA"
    return _te_import()


def _te_rope() -> Callable | None:
    """Transformer Engine's ``apply_rotary_pos_emb`` (its module moved in TE 2.x)."""
    for path in ("transformer_engine.pytorch.attention.rope", "transformer_engine.pytorch.attention"):
        try:
            return importlib.import_module(path).apply_rotary_pos_emb
        except Exception:
            continue
    return None


def _fp8_recipe(name: str) -> tuple[Any, str]:
    """Transformer Engine's recipe of ``--fp8_recipe`` ``name`` when this GPU runs it, else ``(None, why not)``."""
    try:
        from transformer_engine.common import recipe as recipes
    except Exception as exc:
        return None, _why(exc)
    cls = getattr(recipes, FP8_RECIPES.get(name, ""), None)
    if cls is None:
        return None, f"this Transformer Engine has no {FP8_RECIPES.get(name, name)}"
    check = FP8_CHECKS.get(name, "check_fp8_support")
    for path in ("transformer_engine.pytorch.quantization", "transformer_engine.pytorch.fp8"):
        try:
            fn = getattr(importlib.import_module(path), check)
        except Exception:
            continue
        try:
            ok, why = fn()
        except Exception as exc:
            return None, _why(exc)
        if not ok:
            return None, str(why) or f"{check}() is False"
        break
    try:
        return cls(), ""
    except Exception as exc:
        return None, _why(exc)


def _fp8_autocast(te: Any, recipe: Any) -> Callable[[], Any]:
    """A factory of Transformer Engine's FP8 autocast context with ``recipe`` (``te.autocast`` in newer TE)."""
    if hasattr(te, "autocast"):
        return lambda: te.autocast(enabled=True, recipe=recipe)
    return lambda: te.fp8_autocast(enabled=True, fp8_recipe=recipe)


def _fused_causal_softmax() -> tuple[tuple[Callable, Callable] | None, str]:
    """Megatron's fused causal scale-mask-softmax kernels (``ScaledUpperTriangMaskedSoftmax``): apex's
    ``scaled_upper_triang_masked_softmax_cuda`` or Transformer Engine's; ``(None, why not)`` without them."""
    try:
        import scaled_upper_triang_masked_softmax_cuda as kernel

        return (kernel.forward, kernel.backward), "apex scaled_upper_triang_masked_softmax_cuda"
    except Exception as exc:
        why = _why(exc)
    try:
        import transformer_engine_torch as tex

        return ((tex.scaled_upper_triang_masked_softmax_forward, tex.scaled_upper_triang_masked_softmax_backward),
                "transformer_engine scaled_upper_triang_masked_softmax")
    except Exception:
        return None, why


def _wgrad_accumulator(device: torch.device, dtype: torch.dtype,
                       main: torch.dtype) -> tuple[Callable | None, str]:
    """The weight gradient's accumulation into the main gradient in the GEMM (Megatron's
    ``gradient_accumulation_fusion``): apex's ``fused_weight_gradient_mlp_cuda`` for a bf16/fp16 GEMM into an fp32
    buffer, ``addmm_`` where both have one dtype; ``(None, why not)``."""
    if dtype == main:
        return (lambda x2, g2, main_grad: main_grad.addmm_(g2.t(), x2)), "torch addmm_"
    if device.type != "cuda":
        return None, f"no {_dtype_name(dtype)} x {_dtype_name(dtype)} -> {_dtype_name(main)} GEMM on a CPU"
    try:
        import fused_weight_gradient_mlp_cuda as kernel
    except Exception as exc:
        return None, f"apex's fused_weight_gradient_mlp_cuda not importable ({_why(exc)})"
    fn = kernel.wgrad_gemm_accum_fp32 if main == torch.float32 else kernel.wgrad_gemm_accum_fp16
    return fn, "apex fused_weight_gradient_mlp_cuda"


_COMPILED: dict[Callable, Callable] = {}


CPU_EAGER = " (eager on a CPU: torch.compile fuses for the GPU, and a CPU's times describe no GPU)"
"""What a fused op notes when it runs on a CPU: compiling there costs seconds per process and would time nothing a
GPU runs."""


def _compiled(fn: Callable, device: torch.device) -> Callable:
    """``torch.compile(fn)``, one per function for the process (Megatron's ``jit_fuser``); ``fn`` itself on a CPU."""
    if device.type != "cuda":
        return fn
    if fn not in _COMPILED:
        _COMPILED[fn] = torch.compile(fn)
    return _COMPILED[fn]


def _jit_note(device: torch.device) -> str:
    return "torch.compile" if device.type == "cuda" else "its functions" + CPU_EAGER


# ---- Megatron's fused functions (megatron/core/fusions), compiled or eager ---------------------

def _bias_gelu(y: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``fused_bias_gelu.bias_gelu``: the tanh approximation of GeLU on ``y + bias``."""
    x = y if bias is None else y + bias
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


def _bias_gelu_back(g: torch.Tensor, y: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    x = y if bias is None else y + bias
    tanh_out = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
    ff = 0.5 * x * ((1 - tanh_out * tanh_out) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (1 + tanh_out)
    return ff * g


def _bias_swiglu(y: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``fused_bias_swiglu.bias_swiglu``: ``silu(a) * b`` over the two halves of ``y + bias``."""
    y = y if bias is None else y + bias
    y_1, y_2 = torch.chunk(y, 2, -1)
    return F.silu(y_1) * y_2


def _bias_swiglu_back(g: torch.Tensor, y: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    y = y if bias is None else y + bias
    y_1, y_2 = torch.chunk(y, 2, -1)
    return torch.cat((g * torch.sigmoid(y_1) * (1 + y_1 * (1 - torch.sigmoid(y_1))) * y_2, g * F.silu(y_1)), -1)


class _FusedActivation(torch.autograd.Function):
    """Megatron's ``GeLUFunction`` / ``BiasSwiGLUFunction``: the forward and backward functions, jit-fused."""

    @staticmethod
    def forward(ctx, y, bias, fwd, bwd):
        ctx.save_for_backward(y, bias)
        ctx.bwd, ctx.has_bias = bwd, bias is not None
        return fwd(y, bias)

    @staticmethod
    def backward(ctx, g):
        y, bias = ctx.saved_tensors
        tmp = ctx.bwd(g, y, bias)
        return tmp, (tmp if ctx.has_bias else None), None, None


def _bias_dropout_add(x: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor, prob: float,
                      training: bool) -> torch.Tensor:
    """``fused_bias_dropout._bias_dropout_add_func``: ``residual + dropout(x + bias)``."""
    if bias is not None:
        x = x + bias
    out = F.dropout(x, p=prob, training=training)
    return residual + out


def _ce_logits_max(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``VocabParallelCrossEntropy.calculate_logits_max``: fp32 logits and their maximum per token."""
    logits = logits.float()
    return logits, torch.max(logits, dim=-1)[0]


def _ce_predicted_logits(logits: torch.Tensor, target: torch.Tensor, logits_max: torch.Tensor):
    """``calculate_predicted_logits`` for this rank's vocabulary range (all of it: the shard is local here)."""
    logits -= logits_max.unsqueeze(dim=-1)
    vocab = logits.size(-1)
    target_mask = (target < 0) | (target >= vocab)
    masked_target = target.clone()
    masked_target[target_mask] = 0
    logits_2d = logits.view(-1, vocab)
    masked_target_1d = masked_target.view(-1)
    arange_1d = torch.arange(start=0, end=logits_2d.size(0), device=logits_2d.device)
    predicted = logits_2d[arange_1d, masked_target_1d].clone().contiguous().view_as(target)
    predicted[target_mask] = 0.0
    exp_logits = logits
    torch.exp(logits, out=exp_logits)
    return target_mask, masked_target_1d, predicted, exp_logits.sum(dim=-1), exp_logits


def _ce_loss(exp_logits: torch.Tensor, predicted: torch.Tensor,
             sum_exp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``calculate_cross_entropy_loss``: the loss per token, and the softmax kept for backward."""
    loss = torch.log(sum_exp) - predicted
    exp_logits.div_(sum_exp.unsqueeze(dim=-1))
    return exp_logits, loss


def _ce_gradients(softmax: torch.Tensor, grad_output: torch.Tensor, target_mask: torch.Tensor,
                  masked_target_1d: torch.Tensor) -> torch.Tensor:
    """``prepare_gradient_calculation_operands`` + ``calculate_gradients``: softmax less one at the target,
    times the loss gradient (in place on the saved softmax)."""
    grad_2d = softmax.view(-1, softmax.size(-1))
    arange_1d = torch.arange(start=0, end=grad_2d.size(0), device=grad_2d.device)
    softmax_update = 1.0 - target_mask.view(-1).float()
    grad_2d[arange_1d, masked_target_1d] -= softmax_update
    softmax.mul_(grad_output.unsqueeze(dim=-1))
    return softmax


CE_FUNCTIONS = (_ce_logits_max, _ce_predicted_logits, _ce_loss, _ce_gradients)


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Megatron's ``_VocabParallelCrossEntropy`` on one rank (its all-reduces are communication, not timed);
    ``fns``: the four functions of :data:`CE_FUNCTIONS`, eager or compiled."""

    @staticmethod
    def forward(ctx, logits, target, fns):
        logits_max_fn, predicted_fn, loss_fn, grad_fn = fns
        logits, logits_max = logits_max_fn(logits)
        target_mask, masked_target_1d, predicted, sum_exp, exp_logits = predicted_fn(logits, target, logits_max)
        softmax, loss = loss_fn(exp_logits, predicted, sum_exp)
        ctx.grad_fn = grad_fn
        ctx.save_for_backward(softmax, target_mask, masked_target_1d)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        softmax, target_mask, masked_target_1d = ctx.saved_tensors
        return ctx.grad_fn(softmax, grad_output, target_mask, masked_target_1d), None, None


class _CausalSoftmax(torch.autograd.Function):
    """Megatron's ``ScaledUpperTriangMaskedSoftmax`` (scale 1: the 1/sqrt(d) is in the ``baddbmm``)."""

    @staticmethod
    def forward(ctx, scores, kernels):
        forward, backward = kernels
        probs = forward(scores, 1.0)
        ctx.backward_kernel = backward
        ctx.save_for_backward(probs)
        return probs

    @staticmethod
    def backward(ctx, g):
        (probs,) = ctx.saved_tensors
        return ctx.backward_kernel(g.contiguous(), probs, 1.0), None


class _LocalLinear(torch.autograd.Function):
    """Megatron's ``LinearWithGradAccumulationAndAsyncCommunication`` on one rank: ``x W^T`` then the bias
    (``bias_in_gemm``: in the GEMM, as Transformer Engine does); backward: the input gradient, the weight gradient
    accumulated into ``main_grad`` by ``accumulate(x2d, dy2d, main_grad)`` (gradient-accumulation fusion) or
    returned (written in the activation dtype; DDP's hook adds it to the main gradient), the bias gradient."""

    @staticmethod
    def forward(ctx, x, weight, bias, main_grad, accumulate, bias_in_gemm):
        ctx.save_for_backward(x, weight)
        ctx.main_grad, ctx.accumulate, ctx.has_bias = main_grad, accumulate, bias is not None
        if bias_in_gemm:
            return F.linear(x, weight, bias)
        out = torch.matmul(x, weight.t())
        return out + bias if bias is not None else out

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved_tensors
        g = g.contiguous()
        grad_input = g.matmul(weight)
        g2, x2 = g.reshape(-1, g.shape[-1]), x.reshape(-1, x.shape[-1])
        if ctx.accumulate is not None:
            ctx.accumulate(x2, g2, ctx.main_grad)
            grad_weight = None
        else:
            grad_weight = g2.t().matmul(x2)
        grad_bias = g2.sum(dim=0) if ctx.has_bias else None
        return grad_input, grad_weight, grad_bias, None, None, None


def _megatron_rotary(t: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Megatron's ``_apply_rotary_pos_emb_bshd`` (not interleaved): ``t * cos + rotate_half(t) * sin`` over the
    rotary width, the rest passed through and concatenated back."""
    rot_dim = freqs.shape[-1]
    t, t_pass = t[..., :rot_dim], t[..., rot_dim:]
    cos_ = torch.cos(freqs).to(t.dtype)
    sin_ = torch.sin(freqs).to(t.dtype)
    x1, x2 = torch.chunk(t, 2, dim=-1)
    t = (t * cos_) + (torch.cat((-x2, x1), dim=-1) * sin_)
    return torch.cat((t, t_pass), dim=-1)


# ---- timed operations ------------------------------------------------------------------------

class TimedOp:
    """One operation with its tensors.  ``forward()`` returns the output (or a tuple of outputs), ``backward(out)``
    runs autograd from fixed gradients; ``reset()`` drops gradients between samples (outside timing)."""

    implementation = "torch"
    has_backward = True

    def __init__(self, spec: OpSpec, device: torch.device, dtype: torch.dtype) -> None:
        self.spec, self.device, self.dtype = spec, device, dtype
        self.stack: str | None = spec.dims.get("stack")
        self.leaves: list[torch.Tensor] = []
        self._grad: list[torch.Tensor] | None = None

    def tensor(self, *shape: int, grad: bool = True, dtype: torch.dtype | None = None, scale: float = 1.0) -> torch.Tensor:
        t = (torch.randn(*shape, device=self.device, dtype=dtype or self.dtype) * scale).requires_grad_(grad)
        if grad:
            self.leaves.append(t)
        return t

    def forward(self) -> torch.Tensor | tuple[torch.Tensor, ...]:
        raise NotImplementedError

    def backward(self, out: torch.Tensor | tuple[torch.Tensor, ...]) -> None:
        outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        if self._grad is None or [g.shape for g in self._grad] != [o.shape for o in outs]:
            self._grad = [torch.randn_like(o) for o in outs]
        torch.autograd.backward(outs, self._grad)

    def reset(self) -> None:
        for t in self.leaves:
            t.grad = None

    def use_fallback(self, reason: str) -> bool:
        """Switch an optional kernel that failed to its fallback; False when there is none."""
        return False

    def te(self, wanted: bool = True) -> tuple[Any, str]:
        """Transformer Engine when the stack uses it here (``wanted``) and it is usable, else ``(None, why not)``."""
        if self.stack != "te" or not wanted:
            return None, ""
        return _transformer_engine(self.device)


def _te_fallback(impl: str, why: str, te_failed: bool = False) -> str:
    if te_failed:
        return f"transformer_engine failed: {impl} ({why})"
    return f"{TE_MISSING}: {impl} ({why})"


class Linear(TimedOp):
    """``y = x W^T (+ b)`` with ``x`` of shape ``spec.shape`` and ``W`` of ``(out, in)``.

    With a stack: ``te.Linear`` (Transformer Engine; FP8 per ``fp8_recipe`` unless ``bf16``;
    ``fuse_wgrad_accumulation`` into an fp32 ``main_grad`` with ``accumulate``), else Megatron's local linear
    (:class:`_LocalLinear`).  Without ``accumulate`` the weight gradient is written in the activation dtype and the
    backward adds it to the ``main_grad`` (DDP's hook, ``main_grad.add_(grad)``), timed in the backward section."""

    def __init__(self, spec: OpSpec, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(spec, device, dtype)
        d = spec.dims
        self.x = self.tensor(*spec.shape)
        self.module: Any = None
        self.fp8: Callable[[], Any] | None = None
        self.main_grad: torch.Tensor | None = None
        self.accumulator: Callable | None = None
        self.ddp_add = False  # the weight gradient is written, then added to main_grad by the backward
        self.te_stack = self.stack == "te"
        self.accumulate = bool(d.get("accumulate", True))
        self.main_dtype = torch.float32 if d.get("grad_bytes", 4) == 4 else dtype
        if self.stack is None:  # AIOB's earlier op: one F.linear
            self._torch_weights()
            self.implementation = "torch F.linear (cuBLAS)" if device.type == "cuda" else "torch F.linear"
            return
        te, why = self.te(bool(d.get("te")))
        if te is not None:
            try:
                self._build_te(te, why)
                return
            except Exception as exc:
                self.leaves, self.module, self.fp8 = [self.x], None, None
                self._build_torch(_why(exc), te_failed=True)
                return
        self._build_torch(why)

    def _torch_weights(self) -> None:
        d = self.spec.dims
        self.w = self.tensor(d["out"], d["in"], scale=1 / math.sqrt(d["in"]))
        self.b = self.tensor(d["out"]) if d.get("bias") else None

    def _build_te(self, te: Any, version: str) -> None:
        d = self.spec.dims
        kwargs: dict[str, Any] = {"bias": bool(d.get("bias")), "params_dtype": self.dtype, "device": self.device}
        if self.accumulate:
            kwargs["fuse_wgrad_accumulation"] = True
        self.module = te.Linear(d["in"], d["out"], **kwargs)
        self.leaves += list(self.module.parameters())
        weight = self.module.weight
        self.main_grad = torch.zeros(weight.shape, device=self.device, dtype=self.main_dtype)
        if self.accumulate:
            weight.main_grad = self.main_grad
        self.ddp_add = not self.accumulate
        self.words = [f"transformer_engine {version} te.Linear"
                      + (" (the GEMM of te.LayerNormLinear; its norm is timed in the norm's section)"
                         if d.get("fp8_input") else ""), "", self._wgrad_words(te=True)]
        recipe = d.get("fp8_recipe")
        if recipe and d.get("bf16"):
            self.words[1] = f", {_dtype_name(self.dtype)} (Megatron keeps this GEMM out of FP8)"
        elif recipe:
            found, why = _fp8_recipe(recipe)
            if found is not None:
                self.fp8 = _fp8_autocast(te, found)
                self.words[1] = f", FP8 {recipe} ({type(found).__name__})"
            else:
                self.words[1] = f", {_dtype_name(self.dtype)} (FP8 {recipe} unavailable: {why})"
        self.implementation = "".join(self.words)

    def _build_torch(self, why: str, te_failed: bool = False) -> None:
        d = self.spec.dims
        self._torch_weights()
        self.main_grad = torch.zeros(self.w.shape, device=self.device, dtype=self.main_dtype)
        how = ""
        if self.accumulate:
            self.accumulator, how = _wgrad_accumulator(self.device, self.dtype, self.main_dtype)
        self.ddp_add = self.accumulator is None
        if self.te_stack:
            impl = "torch F.linear (cuBLAS)" if self.device.type == "cuda" else "torch F.linear"
        else:
            impl = "torch matmul" + (" + bias add" if d.get("bias") else "") + " (Megatron's local linear)"
        if d.get("fp8_recipe") and not d.get("bf16"):
            impl += f" in {_dtype_name(self.dtype)} (no FP8 without Transformer Engine)"
        impl += self._wgrad_words(how=how)
        self.implementation = _te_fallback(impl, why, te_failed) if self.te_stack and d.get("te") else impl

    def _wgrad_words(self, te: bool = False, how: str = "") -> str:
        main, act = _dtype_name(self.main_dtype), _dtype_name(self.dtype)
        if self.accumulate and te:
            return f", wgrad accumulated into the {main} main_grad (fuse_wgrad_accumulation)"
        if self.accumulate and self.accumulator is not None:
            return f", wgrad accumulated into the {main} main_grad ({how})"
        if self.accumulate:
            return f", wgrad written in {act} + {main} main_grad.add_ (gradient-accumulation fusion unavailable: {how})"
        return f", wgrad written in {act} + {main} main_grad.add_ (DDP hook)"

    def forward(self) -> torch.Tensor:
        if self.module is not None:
            if self.fp8 is not None:
                with self.fp8():
                    return self.module(self.x)
            return self.module(self.x)
        if self.stack is None:
            return F.linear(self.x, self.w, self.b)
        return _LocalLinear.apply(self.x, self.w, self.b, self.main_grad, self.accumulator, self.te_stack)

    def backward(self, out: torch.Tensor) -> None:
        super().backward(out)
        weight = self.module.weight if self.module is not None else getattr(self, "w", None)
        if self.ddp_add and weight is not None and weight.grad is not None:
            self.main_grad.add_(weight.grad)  # DDP's hook: main_grad += grad (fp32 += bf16)

    def use_fallback(self, reason: str) -> bool:
        if self.module is None:
            return False
        if self.fp8 is not None:  # FP8 rejected this shape or GPU: Transformer Engine in bf16
            self.fp8 = None
            recipe = self.spec.dims.get("fp8_recipe")
            self.words[1] = f", {_dtype_name(self.dtype)} (FP8 {recipe} failed: {reason})"
            self.implementation = "".join(self.words)
            return True
        self.leaves, self.module = [self.x], None
        self._build_torch(reason, te_failed=True)
        return True


class Norm(TimedOp):
    """LayerNorm or RMSNorm over the last ``width`` elements (Megatron's eps 1e-5): Transformer Engine's
    ``te.LayerNorm`` / ``te.RMSNorm`` on its stack, apex's fused kernels where the stack has them (``fused``), else
    torch's ``F.layer_norm`` / ``F.rms_norm``."""

    def __init__(self, spec: OpSpec, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(spec, device, dtype)
        d = spec.dims
        self.width, self.rms = d["width"], d["kind"] == "RMSNorm"
        shape = spec.shape if spec.shape[-1] == self.width else (*spec.shape[:-1], spec.shape[-1] // self.width, self.width)
        self.x = self.tensor(*shape)  # QK-norm normalises each head: split the width into heads
        self.module: Any = None
        self.apex: Callable | None = None
        self.name = "RMSNorm" if self.rms else "LayerNorm"
        self.torch_name = f"torch F.{'rms_norm' if self.rms else 'layer_norm'}"
        te, why = self.te()
        if te is not None:
            try:
                cls = te.RMSNorm if self.rms else te.LayerNorm
                self.module = cls(self.width, eps=1e-5, params_dtype=dtype, device=device)
                self.leaves += list(self.module.parameters())
                self.implementation = f"transformer_engine {why} te.{self.name}" + self._te_words()
                return
            except Exception as exc:
                self._torch_params()
                self.implementation = _te_fallback(self.torch_name, _why(exc), te_failed=True)
                return
        self._torch_params()
        if self.stack == "te":
            self.implementation = _te_fallback(self.torch_name, why)
            return
        if self.stack is not None and not d.get("fused", True):
            self.implementation = self.torch_name  # --no_apex: Megatron-core's torch norms
            return
        layer_norm, rms_norm = _apex_norms() if device.type == "cuda" else (None, None)
        self.apex = rms_norm if self.rms else layer_norm
        if self.apex is not None:
            self.implementation = f"apex fused {self.name}"
        elif self.stack is None:
            self.implementation = self.torch_name
        else:
            self.implementation = (f"{self.torch_name} (apex's fused {self.name} not importable"
                                   + (": a CPU run)" if device.type != "cuda" else ")"))

    def _torch_params(self) -> None:
        self.weight = self.tensor(self.width)
        self.bias = None if self.rms else self.tensor(self.width)

    def _te_words(self) -> str:
        d = self.spec.dims
        words = ""
        if d.get("into_linear"):
            words += f" (te.LayerNormLinear's norm, timed alone; its GEMM is timed in {d['into_linear']})"
        if d.get("fp8_out"):
            words += (f", output in {_dtype_name(self.dtype)} (te.LayerNormLinear's norm writes it in FP8; te.Linear's "
                      "cast of it is timed in the linear's section)")
        return words

    def forward(self) -> torch.Tensor:
        if self.module is not None:
            return self.module(self.x)
        shape = (self.width,)
        if self.apex is not None:
            if self.rms:
                return self.apex(self.x, self.weight, shape, 1e-5)
            return self.apex(self.x, self.weight, self.bias, shape, 1e-5)
        if self.rms:
            return F.rms_norm(self.x, shape, self.weight, 1e-5)
        return F.layer_norm(self.x, shape, self.weight, self.bias, 1e-5)

    def use_fallback(self, reason: str) -> bool:
        if self.module is not None:
            self.leaves, self.module = [self.x], None
            self._torch_params()
            self.implementation = _te_fallback(self.torch_name, reason, te_failed=True)
            return True
        if self.apex is None:
            return False
        self.apex = None
        self.implementation = f"{self.torch_name} (apex failed: {reason})"
        return True


class Activation(TimedOp):
    """GeLU or SwiGLU (``silu(a) * b`` over the two halves) on the fc1 output (plus its bias, ``dims['bias']``).
    Megatron's jit-fused ``bias_gelu`` (tanh approximation) / ``bias_swiglu`` through ``torch.compile`` when the
    stack fuses them (``fused``), else eager: the bias add, then ``F.gelu`` (erf) or ``F.silu(a) * b``."""

    def __init__(self, spec: OpSpec, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(spec, device, dtype)
        d = spec.dims
        self.swiglu = d["kind"] == "swiglu"
        self.x = self.tensor(*spec.shape)
        self.bias = self.tensor(spec.shape[-1]) if self.stack is not None and d.get("bias") else None
        self.fns: tuple[Callable, Callable] | None = None
        self.eager = ("torch" + (" bias add +" if self.bias is not None else "")
                      + (" silu(a) * b" if self.swiglu else " F.gelu"))
        if self.stack is not None and d.get("fused", True):
            fwd, bwd = (_bias_swiglu, _bias_swiglu_back) if self.swiglu else (_bias_gelu, _bias_gelu_back)
            self.fns = (_compiled(fwd, device), _compiled(bwd, device))
            name = "bias_swiglu" if self.swiglu else "bias_gelu"
            self.implementation = f"Megatron's fused {name} ({_jit_note(device)}, forward and backward functions)"
        else:
            self.implementation = self.eager

    def forward(self) -> torch.Tensor:
        if self.fns is not None:
            return _FusedActivation.apply(self.x, self.bias, *self.fns)
        x = self.x if self.bias is None else self.x + self.bias
        if self.swiglu:
            a, b = torch.chunk(x, 2, dim=-1)
            return F.silu(a) * b
        return F.gelu(x)

    def use_fallback(self, reason: str) -> bool:
        if self.fns is None:
            return False
        self.fns = None
        self.implementation = f"{self.eager} (eager: torch.compile failed: {reason})"
        return True


class Attention(TimedOp):
    """Causal attention over this rank's heads: ``(micro, heads, seq, head_dim)`` queries against
    ``groups`` key/value heads (values of ``v_dim``).

    ``impl`` ``flash``: Transformer Engine's ``DotProductAttention`` on its stack, else flash-attn's
    ``flash_attn_func``, else ``scaled_dot_product_attention``.  ``impl`` ``unfused``: Megatron's
    ``DotProductAttention``: keys and values repeated to every head, ``baddbmm`` of Q K^T with alpha 1/sqrt(d), the
    softmax (``softmax`` ``fused``: Megatron's fused causal scale-mask-softmax kernel, or ``torch.softmax`` on the
    scores with the causal mask by one ``masked_fill`` without it; ``torch``: ``forward_torch_softmax``: fp32 cast,
    ``masked_fill_`` of a [1, 1, s, s] bool mask with -10000, softmax, cast back), dropout, ``bmm`` with V."""

    def __init__(self, spec: OpSpec, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(spec, device, dtype)
        d = spec.dims
        b, h, g, s, dim, v_dim = d["micro"], d["heads"], d["groups"], d["seq"], d["head_dim"], d["v_dim"]
        self.gqa = g != h
        self.unfused = d.get("impl") == "unfused"
        self.p = d.get("p", 0.0)
        self.module: Any = None
        self.flash: Callable | None = None
        self.kernels: tuple[Callable, Callable] | None = None
        if self.unfused:
            self.q, self.k, self.v = self.tensor(b * h, s, dim), self.tensor(b * g, s, dim), self.tensor(b * g, s, v_dim)
            self.repeat, self.scale = h // g, 1 / math.sqrt(dim)
            self.mask = torch.ones(s, s, device=device, dtype=torch.bool).triu(1)
            if self.stack is None:
                self.implementation = "torch baddbmm, masked softmax, dropout, bmm (Megatron's unfused attention)"
                return
            self.softmax = d.get("softmax", "fused")
            self.buffer = torch.empty(b * h, s, s, device=device, dtype=dtype)  # Megatron's global memory buffer
            if self.softmax == "torch":
                self.mask = self.mask[None, None]  # [1, 1, s, s], broadcast over (b, heads)
                self.implementation = ("torch baddbmm (alpha 1/sqrt(d)), .float(), masked_fill_ causal mask "
                                       f"[1, 1, s, s] with {MASK_VALUE:g}, softmax in float32, .to({_dtype_name(dtype)}), "
                                       "dropout, bmm (Megatron's forward_torch_softmax, --no_apex)")
                return
            found, why = (_fused_causal_softmax() if device.type == "cuda" and dtype != torch.float32
                          else (None, "a CPU run: the kernels need CUDA" if device.type != "cuda" else "float32 scores"))
            if found is not None and 16 < s <= 16384 and s % 4 == 0 and (b * h) % 4 == 0:
                self.kernels = found[0]
                self.implementation = f"torch baddbmm, {found[1]} (Megatron's fused causal softmax), dropout, bmm"
            else:
                why = why if found is None else (f"sequence {s} x {b * h} heads outside Megatron's gate of the kernel "
                                                 "(16 < s <= 16384, s % 4 == 0, batch x heads % 4 == 0)")
                self.implementation = (f"torch baddbmm, masked_fill + torch.softmax in {_dtype_name(dtype)}, dropout, bmm "
                                       f"(Megatron's fused scale-mask-softmax kernel not used: {why})")
            return
        te, why = self.te()
        if te is not None:
            try:
                kv = dim if dim == v_dim else (dim, v_dim)
                self.module = te.DotProductAttention(h, kv, num_gqa_groups=g, attention_dropout=self.p,
                                                     qkv_format="sbhd", attn_mask_type="causal")
                self.q, self.k, self.v = self.tensor(s, b, h, dim), self.tensor(s, b, g, dim), self.tensor(s, b, g, v_dim)
                self.implementation = (f"transformer_engine {why} DotProductAttention (causal, sbhd; TE picks cuDNN's "
                                       "fused attention or flash)")
                self.backend_known = False
                return
            except Exception as exc:
                self.leaves, self.module = [], None
                self._flash_or_sdpa(b, h, g, s, dim, v_dim)
                self.implementation = _te_fallback(self.implementation, _why(exc), te_failed=True)
                return
        self._flash_or_sdpa(b, h, g, s, dim, v_dim)
        if self.stack == "te":
            self.implementation = _te_fallback(self.implementation, why)

    def _flash_or_sdpa(self, b: int, h: int, g: int, s: int, dim: int, v_dim: int) -> None:
        func, version = _flash_attn() if self.device.type == "cuda" and self.dtype != torch.float32 else (None, "")
        # flash-attn 2 needs equal query and value head sizes of at most 256
        self.flash = func if func is not None and dim == v_dim and dim <= 256 else None
        if self.flash is not None:
            self.q, self.k, self.v = self.tensor(b, s, h, dim), self.tensor(b, s, g, dim), self.tensor(b, s, g, v_dim)
            self.implementation = f"flash-attn {version} flash_attn_func (causal)"
        else:
            self._sdpa_tensors(b, h, g, s, dim, v_dim)

    def _sdpa_tensors(self, b: int, h: int, g: int, s: int, dim: int, v_dim: int) -> None:
        self.leaves.clear()
        self.q, self.k, self.v = self.tensor(b, h, s, dim), self.tensor(b, g, s, dim), self.tensor(b, g, s, v_dim)
        self.implementation = "torch scaled_dot_product_attention (causal)"

    def forward(self) -> torch.Tensor:
        if self.unfused:
            k, v = self.k, self.v
            if self.repeat > 1:
                k, v = k.repeat_interleave(self.repeat, dim=0), v.repeat_interleave(self.repeat, dim=0)
            if self.stack is None:
                scores = torch.bmm(self.q, k.transpose(1, 2)) * self.scale
                probs = torch.softmax(scores.masked_fill(self.mask, float("-inf")), dim=-1)
                return torch.bmm(F.dropout(probs, self.p, training=True), v)
            scores = torch.baddbmm(self.buffer, self.q, k.transpose(1, 2), beta=0.0, alpha=self.scale)
            if self.softmax == "torch":
                bh, s = scores.shape[0], scores.shape[-1]
                scores = scores.view(bh // self.spec.dims["heads"], self.spec.dims["heads"], s, s).float()
                scores.masked_fill_(self.mask, MASK_VALUE)
                probs = torch.softmax(scores, dim=-1).to(self.dtype).view(bh, s, s)
            elif self.kernels is not None:
                probs = _CausalSoftmax.apply(scores, self.kernels)
            else:
                probs = torch.softmax(scores.masked_fill(self.mask, float("-inf")), dim=-1)
            return torch.bmm(F.dropout(probs, self.p, training=True), v)
        if self.module is not None:
            out = self.module(self.q, self.k, self.v)
            if not self.backend_known:
                self.backend_known = True
                self.implementation += _te_attention_backend()
            return out
        if self.flash is not None:
            return self.flash(self.q, self.k, self.v, causal=True)
        return F.scaled_dot_product_attention(self.q, self.k, self.v, is_causal=True, enable_gqa=self.gqa)

    def use_fallback(self, reason: str) -> bool:
        d = self.spec.dims
        if self.kernels is not None:
            self.kernels = None
            self.implementation = (f"torch baddbmm, masked_fill + torch.softmax in {_dtype_name(self.dtype)}, dropout, "
                                   f"bmm (Megatron's fused causal softmax failed: {reason})")
            return True
        if self.module is not None:
            self.leaves, self.module = [], None
            self._flash_or_sdpa(d["micro"], d["heads"], d["groups"], d["seq"], d["head_dim"], d["v_dim"])
            self.implementation = _te_fallback(self.implementation, reason, te_failed=True)
            return True
        if self.flash is None:
            return False
        self.flash = None
        self._sdpa_tensors(d["micro"], d["heads"], d["groups"], d["seq"], d["head_dim"], d["v_dim"])
        self.implementation += f" (flash-attn failed: {reason})"
        return True


def _te_attention_backend() -> str:
    """Which backend Transformer Engine's last DotProductAttention call chose (best effort: TE's module state)."""
    for path in ("transformer_engine.pytorch.attention.dot_product_attention.dot_product_attention",
                 "transformer_engine.pytorch.attention"):
        try:
            backends = importlib.import_module(path)._attention_backends
        except Exception:
            continue
        if not isinstance(backends, dict):
            return ""
        if backends.get("use_flash_attention"):
            return f": ran flash ({backends.get('flash_attention_backend') or 'flash-attn'})"
        if backends.get("use_fused_attention"):
            return f": ran cuDNN fused attention ({backends.get('fused_attention_backend')})"
        if backends.get("use_unfused_attention"):
            return ": ran TE's unfused attention"
    return ""


class BiasDropoutAdd(TimedOp):
    """Megatron's residual connection: ``residual + dropout(x + bias)`` on ``spec.shape``: its
    ``_bias_dropout_add_func`` through ``torch.compile`` when the stack fuses it (``fused``), else eager."""

    def __init__(self, spec: OpSpec, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(spec, device, dtype)
        d = spec.dims
        self.x, self.residual = self.tensor(*spec.shape), self.tensor(*spec.shape)
        self.bias = self.tensor(spec.shape[-1]) if d.get("bias") else None
        self.p = d.get("p", 0.0)
        self.fn: Callable | None = None
        if self.stack is None:
            self.implementation = "torch dropout(x + bias) + residual"
        elif d.get("fused", True):
            self.fn = _compiled(_bias_dropout_add, device)
            self.implementation = f"Megatron's fused bias_dropout_add ({_jit_note(device)})"
        else:
            self.implementation = "torch x + bias, dropout, + residual (Megatron's unfused bias-dropout-add)"

    def forward(self) -> torch.Tensor:
        if self.fn is not None:
            return self.fn(self.x, self.bias, self.residual, self.p, True)
        if self.stack is not None:
            return _bias_dropout_add(self.x, self.bias, self.residual, self.p, True)
        x = self.x + self.bias if self.bias is not None else self.x
        return self.residual + (F.dropout(x, self.p, training=True) if self.p > 0 else x)

    def use_fallback(self, reason: str) -> bool:
        if self.fn is None:
            return False
        self.fn = None
        self.implementation = f"torch x + bias, dropout, + residual (eager: torch.compile failed: {reason})"
        return True


class Rotary(TimedOp):
    """Rotary position embedding over the queries and keys (``spec.shape``: ``(s, b, width)``, heads of
    ``dims['head_dim']``, the first ``dims['q_heads']`` of them queries).  Transformer Engine's fused RoPE
    (``apply_rotary_pos_emb(..., fused=True)``) when the stack fuses it (``fused``: TE with ``--apply_rope_fusion``),
    else Megatron's eager ``_apply_rotary_pos_emb_bshd``; queries and keys separately, as Megatron applies it."""

    def __init__(self, spec: OpSpec, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(spec, device, dtype)
        s, b, width = spec.shape
        dim = spec.dims["head_dim"]
        self.rope: Callable | None = None
        if self.stack is None:
            self.x = self.tensor(s, b, width // dim, dim)
            angle = torch.arange(s, device=device, dtype=torch.float32)[:, None] * torch.arange(dim, device=device)[None] / dim
            self.cos, self.sin = angle.cos().to(dtype)[:, None, None], angle.sin().to(dtype)[:, None, None]
            self.implementation = "torch x * cos + rotate_half(x) * sin"
            return
        heads = width // dim
        q_heads = min(spec.dims.get("q_heads", heads), heads)
        self.parts = [self.tensor(s, b, n, dim) for n in (q_heads, heads - q_heads) if n]
        # RotaryEmbedding's frequencies: (s, 1, 1, dim) in fp32, the inverse frequencies repeated for both halves
        inv = 1.0 / (10000 ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim))
        freqs = torch.outer(torch.arange(s, device=device, dtype=torch.float32), inv)
        self.freqs = torch.cat((freqs, freqs), dim=-1)[:, None, None, :]
        self.eager = ("torch eager rotary on queries and keys separately (Megatron's _apply_rotary_pos_emb_bshd: "
                      "cos/sin of the frequencies, t * cos + rotate_half(t) * sin, cat)")
        if not spec.dims.get("fused", True) or self.stack != "te":
            self.implementation = self.eager
            return
        te, why = self.te()
        rope = _te_rope() if te is not None else None
        if rope is None:
            self.implementation = _te_fallback(self.eager, why or "no apply_rotary_pos_emb in this Transformer Engine",
                                               te_failed=te is not None)
            return
        self.rope = rope
        self.implementation = f"transformer_engine {why} fused RoPE (apply_rotary_pos_emb fused=True, sbhd) on queries and keys"

    def forward(self) -> torch.Tensor | tuple[torch.Tensor, ...]:
        if self.stack is None:
            a, b = torch.chunk(self.x, 2, dim=-1)
            return self.x * self.cos + torch.cat((-b, a), dim=-1) * self.sin
        if self.rope is not None:
            return tuple(self.rope(t, self.freqs, tensor_format="sbhd", fused=True) for t in self.parts)
        return tuple(_megatron_rotary(t, self.freqs) for t in self.parts)

    def use_fallback(self, reason: str) -> bool:
        if self.rope is None:
            return False
        self.rope = None
        self.implementation = _te_fallback(self.eager, reason, te_failed=True)
        return True


class Embedding(TimedOp):
    """Word lookup in this rank's vocabulary shard (plus learned positions); backward produces the
    dense table gradients (no input gradient: the inputs are token ids)."""

    def __init__(self, spec: OpSpec, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(spec, device, dtype)
        d = spec.dims
        seq, micro = spec.shape
        self.ids = torch.randint(0, d["vocab"], (seq, micro), device=device)
        self.word = self.tensor(d["vocab"], d["hidden"])
        self.positions = d.get("positions") or 0
        if self.positions:
            self.pos_ids = torch.arange(seq, device=device).remainder(self.positions).unsqueeze(1).expand(seq, micro)
            self.pos = self.tensor(self.positions, d["hidden"])
        self.implementation = "torch F.embedding"

    def forward(self) -> torch.Tensor:
        out = F.embedding(self.ids, self.word)
        return out + F.embedding(self.pos_ids, self.pos) if self.positions else out


class CrossEntropy(TimedOp):
    """Cross entropy over this rank's vocabulary shard, as Megatron's vocab-parallel loss computes it locally
    (the max / sum all-reduces are communication, not timed here): its ``_VocabParallelCrossEntropy`` in fp32 (cast,
    max, subtract, exp, sum, divide; backward: the softmax less one at the target, times the loss gradient, cast
    back), through ``torch.compile`` with ``--cross_entropy_loss_fusion`` (``fused``: Megatron's
    ``fused_vocab_parallel_cross_entropy``, the same functions jit-fused)."""

    def __init__(self, spec: OpSpec, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(spec, device, dtype)
        tokens, vocab = math.prod(spec.shape[:-1]), spec.shape[-1]
        self.fns: tuple[Callable, ...] | None = None
        if self.stack is None:
            self.logits = self.tensor(tokens, vocab)
            self.target = torch.randint(0, vocab, (tokens,), device=device)
            self.implementation = "torch F.cross_entropy (fp32)"
            return
        self.logits = self.tensor(*spec.shape)
        self.target = torch.randint(0, vocab, spec.shape[:-1], device=device)
        self.eager = "Megatron's vocab-parallel cross entropy in float32 (eager: cast, max, subtract, exp, sum, divide)"
        if spec.dims.get("fused"):
            self.fns = tuple(_compiled(fn, device) for fn in CE_FUNCTIONS)
            self.implementation = f"Megatron's fused vocab-parallel cross entropy in float32 ({_jit_note(device)})"
        else:
            self.implementation = self.eager

    def forward(self) -> torch.Tensor:
        if self.stack is None:
            return F.cross_entropy(self.logits.float(), self.target)
        return _VocabParallelCrossEntropy.apply(self.logits, self.target, self.fns or CE_FUNCTIONS)

    def backward(self, out: torch.Tensor) -> None:
        if self.stack is None:
            out.backward()
        else:
            super().backward(out)

    def use_fallback(self, reason: str) -> bool:
        if self.fns is None:
            return False
        self.fns = None
        self.implementation = f"{self.eager[:-1]}; torch.compile failed: {reason})"
        return True


class Router(TimedOp):
    """MoE router: gate GEMM, fp32 softmax and top-k over the local tokens (without gradient-accumulation fusion,
    ``accumulate`` false, the gate's weight gradient is then added to an fp32 ``main_grad``: DDP's hook)."""

    def __init__(self, spec: OpSpec, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(spec, device, dtype)
        d = spec.dims
        self.x = self.tensor(*spec.shape)
        self.w = self.tensor(d["experts"], d["in"], scale=1 / math.sqrt(d["in"]))
        self.topk = d["topk"]
        self.implementation = "torch linear + softmax + topk"
        self.main_grad: torch.Tensor | None = None
        if self.stack is not None and not d.get("accumulate", True):
            main = torch.float32 if d.get("grad_bytes", 4) == 4 else dtype
            self.main_grad = torch.zeros(self.w.shape, device=device, dtype=main)
            self.implementation += f", wgrad written in {_dtype_name(dtype)} + {_dtype_name(main)} main_grad.add_ (DDP hook)"

    def forward(self) -> torch.Tensor:
        probs = torch.softmax(F.linear(self.x, self.w).float(), dim=-1)
        return torch.topk(probs, self.topk, dim=-1).values

    def backward(self, out: torch.Tensor) -> None:
        super().backward(out)
        if self.main_grad is not None:
            self.main_grad.add_(self.w.grad)


class ExpertGemm(TimedOp):
    """One GEMM per local expert over its routed tokens (``dims['tokens']``), or one grouped GEMM.  Without
    gradient-accumulation fusion (``accumulate`` false) the backward adds the weight gradient to an fp32
    ``main_grad`` (DDP's hook)."""

    def __init__(self, spec: OpSpec, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(spec, device, dtype)
        d = spec.dims
        self.tokens: list[int] = list(d["tokens"])
        k, n = d["in"], d["out"]
        self.x = self.tensor(sum(self.tokens), k)
        self.gmm = _grouped_gemm() if device.type == "cuda" and dtype == torch.bfloat16 else None
        self.w = self.tensor(len(self.tokens), k, n, scale=1 / math.sqrt(k))
        self.batch_sizes = torch.tensor(self.tokens, dtype=torch.int64)  # gmm wants them on the host
        self.implementation = ("grouped_gemm gmm" if self.gmm else
                               f"torch loop of {len(self.tokens)} matmuls (routed tokens per expert)")
        self.main_grad: torch.Tensor | None = None
        self.words = ""
        if self.stack is not None and not d.get("accumulate", True):
            main = torch.float32 if d.get("grad_bytes", 4) == 4 else dtype
            self.main_grad = torch.zeros(self.w.shape, device=device, dtype=main)
            self.words += f", wgrad written in {_dtype_name(dtype)} + {_dtype_name(main)} main_grad.add_ (DDP hook)"
        self.implementation += self.words

    def forward(self) -> torch.Tensor:
        if self.gmm is not None:
            return self.gmm(self.x, self.w, self.batch_sizes, trans_b=False)
        parts = torch.split(self.x, self.tokens)
        return torch.cat([part @ self.w[e] for e, part in enumerate(parts)])

    def backward(self, out: torch.Tensor) -> None:
        super().backward(out)
        if self.main_grad is not None:
            self.main_grad.add_(self.w.grad)

    def use_fallback(self, reason: str) -> bool:
        if self.gmm is None:
            return False
        self.gmm = None
        self.implementation = (f"torch loop of {len(self.tokens)} matmuls (grouped_gemm failed: {reason})"
                               + self.words)
        return True


def _fused_optimizer(device: torch.device) -> tuple[Any, Callable | None, Callable | None, Callable | None, str]:
    """Megatron's fused optimizer kernels, Transformer Engine's first, then apex's (``megatron/core/optimizer``):
    ``(FusedAdam, multi_tensor_applier, l2norm, scale, label)``, or ``(None, ..., why not)``."""
    if device.type != "cuda":
        return None, None, None, None, "a CPU run: FusedAdam needs CUDA"
    try:
        from transformer_engine.pytorch.optimizers import (
            FusedAdam,
            multi_tensor_applier,
            multi_tensor_l2norm,
            multi_tensor_scale,
        )

        return FusedAdam, multi_tensor_applier, multi_tensor_l2norm, multi_tensor_scale, "transformer_engine"
    except Exception as exc:
        why = _why(exc)
    try:
        import amp_C
        from apex.multi_tensor_apply import multi_tensor_applier
        from apex.optimizers import FusedAdam

        return FusedAdam, multi_tensor_applier, amp_C.multi_tensor_l2norm, amp_C.multi_tensor_scale, "apex"
    except Exception as exc:
        return None, None, None, None, f"neither transformer_engine's ({why}) nor apex's ({_why(exc)})"


class OptimizerStep(TimedOp):
    """The optimizer step over the rank's parameters in fp32 (Megatron keeps fp32 main params and grads);
    timed on at most :data:`OPTIMIZER_CAP` parameters in a few tensors and scaled by ``scale``.

    With a stack (``impl``): ``fused``: the gradient norm by ``multi_tensor_l2norm`` read on the host, FusedAdam
    (Transformer Engine's or apex's; torch's fused AdamW without them) and the copy of the main parameters to the
    model's by ``multi_tensor_scale``; ``torch`` (``--no_apex``): Megatron-core's ``local_multi_tensor_l2_norm`` (a
    ``torch.norm`` per tensor gathered by ``torch.tensor``, a host synchronisation per tensor on a GPU), torch's
    ``AdamW(foreach=True)`` and a ``dst.copy_(src * 1.0)`` per tensor.  Without a stack: torch's Adam step alone."""

    has_backward = False

    def __init__(self, spec: OpSpec, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(spec, device, dtype)
        numel = spec.dims["params"]
        held = max(min(numel, OPTIMIZER_CAP["cuda" if device.type == "cuda" else "cpu"]), 1)
        self.scale = numel / held
        # a few tensors, as the optimizer sees many; fused (one launch) on a GPU, foreach on a CPU
        chunks = [held // 4] * 3 + [held - 3 * (held // 4)]
        self.params = [torch.zeros(c, device=device, dtype=torch.float32, requires_grad=True) for c in chunks if c]
        self.grads = []
        for p in self.params:
            p.grad = torch.randn_like(p)
            self.grads.append(p.grad)
        scaling = f", scaled x{self.scale:.3g}" if self.scale != 1 else ""
        scaled = f" on {held} of {numel} parameters" + scaling
        fused = device.type == "cuda"
        self.impl = spec.dims.get("impl") if self.stack is not None else None
        if self.impl is None:
            self.opt = torch.optim.Adam(self.params, lr=1e-4, fused=fused, foreach=not fused)
            self.implementation = f"torch Adam ({'fused' if fused else 'foreach'})" + scaled
            return
        tensors = spec.dims.get("tensors")
        scaled = (f" on {held} of {numel} parameters in {len(self.params)} tensors"
                  + (f" (the rank has {tensors})" if tensors else "") + scaling)
        self.model = [torch.zeros(c, device=device, dtype=dtype) for c in chunks if c]
        model = _dtype_name(dtype)
        if self.impl == "torch":
            self.opt = torch.optim.AdamW(self.params, lr=1e-4, weight_decay=0.01, foreach=True)
            self.implementation = ("torch per-tensor torch.norm gathered by torch.tensor (host sync per tensor), "
                                   f"AdamW (foreach), per-tensor copy_(src * 1.0) to the {model} model params "
                                   "(Megatron-core without apex)" + scaled)
            return
        adam, self.applier, self.l2norm, self.copy_scale, label = _fused_optimizer(device)
        if adam is not None:
            self.opt = adam(self.params, lr=1e-4, weight_decay=0.01, adam_w_mode=True)
            self.overflow = torch.zeros(1, dtype=torch.int, device=device)
            self.implementation = (f"{label} multi_tensor_l2norm (+ host read), FusedAdam, multi_tensor_scale copy to "
                                   f"the {model} model params" + scaled)
        else:
            self.opt = torch.optim.AdamW(self.params, lr=1e-4, weight_decay=0.01, fused=fused, foreach=not fused)
            self.implementation = (f"torch _foreach_norm (+ host read), AdamW ({'fused' if fused else 'foreach'}), "
                                   f"_foreach_copy_ to the {model} model params (FusedAdam not importable: {label})"
                                   + scaled)

    def forward(self) -> torch.Tensor:
        if self.impl is None:
            self.opt.step()
            return self.params[0]
        if self.impl == "torch":  # megatron.core.utils.local_multi_tensor_l2_norm, then clip_grad_norm's .item()
            l2 = [[torch.norm(g) for g in self.grads]]
            total = torch.norm(torch.tensor(l2))
            norm = torch.tensor([float(total)], dtype=torch.float, device=self.device)
            float(norm)
            self.opt.step()
            for src, dst in zip(self.params, self.model):  # local_multi_tensor_scale
                dst.copy_(src.detach() * 1.0)
            return self.params[0]
        if getattr(self, "applier", None) is not None:
            norm, _ = self.applier(self.l2norm, self.overflow, [self.grads], False)
            float(norm)
            self.opt.step()
            self.applier(self.copy_scale, self.overflow, [[p.detach() for p in self.params], self.model], 1.0)
            return self.params[0]
        float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(self.grads))))
        self.opt.step()
        torch._foreach_copy_(self.model, [p.detach() for p in self.params])
        return self.params[0]

    def reset(self) -> None:
        pass


OPS: dict[str, type[TimedOp]] = {
    "linear": Linear, "norm": Norm, "act": Activation, "attention": Attention, "embedding": Embedding,
    "loss": CrossEntropy, "router": Router, "experts": ExpertGemm, "optimizer": OptimizerStep, "bda": BiasDropoutAdd,
    "rotary": Rotary,
}


def build_op(spec: OpSpec, device: torch.device, dtype: torch.dtype) -> TimedOp:
    """The torch operation of one spec."""
    return OPS[spec.kind](spec, device, dtype)

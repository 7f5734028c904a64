"""Real torch operations of one rank's share of a Megatron layer and model, built from the
torch-free :class:`~mocked_model.aiob.layout.OpSpec` list, for AIOB to time forward and backward.

Each :class:`TimedOp` owns its inputs and weights (created once, on the device, in the timing dtype),
runs its forward through autograd and its backward from a fixed output gradient, so that the
backward time covers every gradient Megatron computes there (input gradient and weight gradient).

Optional GPU kernels are used when importable and working, with plain torch fallbacks, and the op
records which ran (``implementation``):

- norms: apex's fused layer norm / RMSNorm (``apex.normalization.fused_layer_norm``), else
  ``torch.nn.functional.layer_norm`` / ``rms_norm``;
- attention: flash-attn's ``flash_attn_func`` (causal), else ``scaled_dot_product_attention`` (causal,
  grouped-query heads through ``enable_gqa``);
- MoE experts: grouped_gemm's ``gmm`` (one launch for all local experts), else one matmul per local
  expert with its routed token count.

On a CPU none of the optional packages apply (they are CUDA kernels).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from mocked_model.aiob.layout import OpSpec

OPTIMIZER_CAP = {"cuda": 1 << 26, "cpu": 1 << 22}
"""Most parameters the optimizer op allocates (fp32 master, grad and two moments: 16 bytes each);
bigger ranks are timed on this many and scaled linearly (Adam is memory bound, linear in size)."""


def torch_dtype(name: str, device: torch.device) -> torch.dtype:
    """The timing dtype: the job's on a GPU (FP8 GEMMs are timed in bf16), float32 on a CPU (CPU
    kernels for half types are slow paths that say nothing about the GPU)."""
    if device.type != "cuda":
        return torch.float32
    return {"float16": torch.float16, "fp16": torch.float16, "half": torch.float16, "float32": torch.float32,
            "fp32": torch.float32, "float": torch.float32}.get(name.lower(), torch.bfloat16)


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


# ---- timed operations ------------------------------------------------------------------------

class TimedOp:
    """One operation with its tensors.  ``forward()`` returns the output, ``backward(out)`` runs
    autograd from a fixed gradient; ``reset()`` drops gradients between samples (outside timing)."""

    implementation = "torch"
    has_backward = True

    def __init__(self, spec: OpSpec, device: torch.device, dtype: torch.dtype) -> None:
        self.spec, self.device, self.dtype = spec, device, dtype
        self.leaves: list[torch.Tensor] = []
        self._grad: torch.Tensor | None = None

    def tensor(self, *shape: int, grad: bool = True, dtype: torch.dtype | None = None, scale: float = 1.0) -> torch.Tensor:
        t = (torch.randn(*shape, device=self.device, dtype=dtype or self.dtype) * scale).requires_grad_(grad)
        if grad:
            self.leaves.append(t)
        return t

    def forward(self) -> torch.Tensor:
        raise NotImplementedError

    def backward(self, out: torch.Tensor) -> None:
        if self._grad is None or self._grad.shape != out.shape:
            self._grad = torch.randn_like(out)
        out.backward(self._grad)

    def reset(self) -> None:
        for t in self.leaves:
            t.grad = None

    def use_fallback(self, reason: str) -> bool:
        """Switch an optional kernel that failed to its torch fallback; False when there is none."""
        return False


class Linear(TimedOp):
    """``y = x W^T (+ b)`` with ``x`` of shape ``spec.shape`` and ``W`` of ``(out, in)``."""

    def __init__(self, spec: OpSpec, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(spec, device, dtype)
        d = spec.dims
        self.x = self.tensor(*spec.shape)
        self.w = self.tensor(d["out"], d["in"], scale=1 / math.sqrt(d["in"]))
        self.b = self.tensor(d["out"]) if d.get("bias") else None
        self.implementation = "torch F.linear (cuBLAS)" if device.type == "cuda" else "torch F.linear"

    def forward(self) -> torch.Tensor:
        return F.linear(self.x, self.w, self.b)


class Norm(TimedOp):
    """LayerNorm or RMSNorm over the last ``width`` elements (Megatron's eps 1e-5)."""

    def __init__(self, spec: OpSpec, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(spec, device, dtype)
        d = spec.dims
        self.width, self.rms = d["width"], d["kind"] == "RMSNorm"
        shape = spec.shape if spec.shape[-1] == self.width else (*spec.shape[:-1], spec.shape[-1] // self.width, self.width)
        self.x = self.tensor(*shape)  # QK-norm normalises each head: split the width into heads
        self.weight = self.tensor(self.width)
        self.bias = None if self.rms else self.tensor(self.width)
        layer_norm, rms_norm = _apex_norms() if device.type == "cuda" else (None, None)
        self.apex = rms_norm if self.rms else layer_norm
        name = "RMSNorm" if self.rms else "LayerNorm"
        self.implementation = f"apex fused {name}" if self.apex else f"torch F.{'rms_norm' if self.rms else 'layer_norm'}"

    def forward(self) -> torch.Tensor:
        shape = (self.width,)
        if self.apex is not None:
            if self.rms:
                return self.apex(self.x, self.weight, shape, 1e-5)
            return self.apex(self.x, self.weight, self.bias, shape, 1e-5)
        if self.rms:
            return F.rms_norm(self.x, shape, self.weight, 1e-5)
        return F.layer_norm(self.x, shape, self.weight, self.bias, 1e-5)

    def use_fallback(self, reason: str) -> bool:
        if self.apex is None:
            return False
        self.apex = None
        self.implementation = f"torch F.{'rms_norm' if self.rms else 'layer_norm'} (apex failed: {reason})"
        return True


class Activation(TimedOp):
    """GeLU (Megatron's default, erf form) or SwiGLU (``silu(a) * b`` over the two halves)."""

    def __init__(self, spec: OpSpec, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(spec, device, dtype)
        self.swiglu = spec.dims["kind"] == "swiglu"
        self.x = self.tensor(*spec.shape)
        self.implementation = "torch silu(a) * b" if self.swiglu else "torch F.gelu"

    def forward(self) -> torch.Tensor:
        if self.swiglu:
            a, b = torch.chunk(self.x, 2, dim=-1)
            return F.silu(a) * b
        return F.gelu(self.x)


class Attention(TimedOp):
    """Causal attention over this rank's heads: ``(micro, heads, seq, head_dim)`` queries against
    ``groups`` key/value heads (values of ``v_dim``).  Without ``--use_flash_attn`` (``dims['impl']``
    ``unfused``) it runs Megatron's unfused path: scaled Q K^T, causal mask, softmax, dropout, times V."""

    def __init__(self, spec: OpSpec, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(spec, device, dtype)
        d = spec.dims
        b, h, g, s, dim, v_dim = d["micro"], d["heads"], d["groups"], d["seq"], d["head_dim"], d["v_dim"]
        self.gqa = g != h
        self.unfused = d.get("impl") == "unfused"
        self.p = d.get("p", 0.0)
        if self.unfused:
            self.q, self.k, self.v = self.tensor(b * h, s, dim), self.tensor(b * g, s, dim), self.tensor(b * g, s, v_dim)
            self.repeat, self.scale = h // g, 1 / math.sqrt(dim)
            self.mask = torch.ones(s, s, device=device, dtype=torch.bool).triu(1)
            self.flash = None
            self.implementation = "torch baddbmm, masked softmax, dropout, bmm (Megatron's unfused attention)"
            return
        func, version = _flash_attn() if device.type == "cuda" and dtype != torch.float32 else (None, "")
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
            scores = torch.bmm(self.q, k.transpose(1, 2)) * self.scale
            probs = torch.softmax(scores.masked_fill(self.mask, float("-inf")), dim=-1)
            return torch.bmm(F.dropout(probs, self.p, training=True), v)
        if self.flash is not None:
            return self.flash(self.q, self.k, self.v, causal=True)
        return F.scaled_dot_product_attention(self.q, self.k, self.v, is_causal=True, enable_gqa=self.gqa)

    def use_fallback(self, reason: str) -> bool:
        if self.flash is None:
            return False
        self.flash = None
        d = self.spec.dims
        self._sdpa_tensors(d["micro"], d["heads"], d["groups"], d["seq"], d["head_dim"], d["v_dim"])
        self.implementation += f" (flash-attn failed: {reason})"
        return True


class BiasDropoutAdd(TimedOp):
    """Megatron's residual connection: ``residual + dropout(x + bias)`` on ``spec.shape``."""

    def __init__(self, spec: OpSpec, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(spec, device, dtype)
        d = spec.dims
        self.x, self.residual = self.tensor(*spec.shape), self.tensor(*spec.shape)
        self.bias = self.tensor(spec.shape[-1]) if d.get("bias") else None
        self.p = d.get("p", 0.0)
        self.implementation = "torch dropout(x + bias) + residual"

    def forward(self) -> torch.Tensor:
        x = self.x + self.bias if self.bias is not None else self.x
        return self.residual + (F.dropout(x, self.p, training=True) if self.p > 0 else x)


class Rotary(TimedOp):
    """Rotary position embedding over the queries and keys (``spec.shape``: ``(s, b, width)``, heads of
    ``dims['head_dim']``): ``x * cos + rotate_half(x) * sin``."""

    def __init__(self, spec: OpSpec, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(spec, device, dtype)
        s, b, width = spec.shape
        dim = spec.dims["head_dim"]
        self.x = self.tensor(s, b, width // dim, dim)
        angle = torch.arange(s, device=device, dtype=torch.float32)[:, None] * torch.arange(dim, device=device)[None] / dim
        self.cos, self.sin = angle.cos().to(dtype)[:, None, None], angle.sin().to(dtype)[:, None, None]
        self.implementation = "torch x * cos + rotate_half(x) * sin"

    def forward(self) -> torch.Tensor:
        a, b = torch.chunk(self.x, 2, dim=-1)
        return self.x * self.cos + torch.cat((-b, a), dim=-1) * self.sin


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
    """Cross entropy over this rank's vocabulary shard in fp32, as Megatron's vocab-parallel loss
    computes it locally (the max / sum all-reduces are communication, not timed here)."""

    def __init__(self, spec: OpSpec, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(spec, device, dtype)
        tokens, vocab = math.prod(spec.shape[:-1]), spec.shape[-1]
        self.logits = self.tensor(tokens, vocab)
        self.target = torch.randint(0, vocab, (tokens,), device=device)
        self.implementation = "torch F.cross_entropy (fp32)"

    def forward(self) -> torch.Tensor:
        return F.cross_entropy(self.logits.float(), self.target)

    def backward(self, out: torch.Tensor) -> None:
        out.backward()


class Router(TimedOp):
    """MoE router: gate GEMM, fp32 softmax and top-k over the local tokens."""

    def __init__(self, spec: OpSpec, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(spec, device, dtype)
        d = spec.dims
        self.x = self.tensor(*spec.shape)
        self.w = self.tensor(d["experts"], d["in"], scale=1 / math.sqrt(d["in"]))
        self.topk = d["topk"]
        self.implementation = "torch linear + softmax + topk"

    def forward(self) -> torch.Tensor:
        probs = torch.softmax(F.linear(self.x, self.w).float(), dim=-1)
        return torch.topk(probs, self.topk, dim=-1).values


class ExpertGemm(TimedOp):
    """One GEMM per local expert over its routed tokens (``dims['tokens']``), or one grouped GEMM."""

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

    def forward(self) -> torch.Tensor:
        if self.gmm is not None:
            return self.gmm(self.x, self.w, self.batch_sizes, trans_b=False)
        parts = torch.split(self.x, self.tokens)
        return torch.cat([part @ self.w[e] for e, part in enumerate(parts)])

    def use_fallback(self, reason: str) -> bool:
        if self.gmm is None:
            return False
        self.gmm = None
        self.implementation = f"torch loop of {len(self.tokens)} matmuls (grouped_gemm failed: {reason})"
        return True


class OptimizerStep(TimedOp):
    """Adam step over the rank's parameters in fp32 (Megatron keeps fp32 main params and grads);
    timed on at most :data:`OPTIMIZER_CAP` parameters and scaled by ``scale``."""

    has_backward = False

    def __init__(self, spec: OpSpec, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(spec, device, dtype)
        numel = spec.dims["params"]
        held = max(min(numel, OPTIMIZER_CAP["cuda" if device.type == "cuda" else "cpu"]), 1)
        self.scale = numel / held
        # a few tensors, as the optimizer sees many; fused (one launch) on a GPU, foreach on a CPU
        chunks = [held // 4] * 3 + [held - 3 * (held // 4)]
        self.params = [torch.zeros(c, device=device, dtype=torch.float32, requires_grad=True) for c in chunks if c]
        for p in self.params:
            p.grad = torch.randn_like(p)
        fused = device.type == "cuda"
        self.opt = torch.optim.Adam(self.params, lr=1e-4, fused=fused, foreach=not fused)
        self.implementation = f"torch Adam ({'fused' if fused else 'foreach'}) on {held} of {numel} parameters"
        if self.scale != 1:
            self.implementation += f", scaled x{self.scale:.3g}"

    def forward(self) -> torch.Tensor:
        self.opt.step()
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

"""One kernel of an operation's list, and the precision it runs in: the common ground of the training and inference
kernel lists (:mod:`mocked_model.compute.training_ops`, :mod:`mocked_model.compute.inference_ops`)."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from mocked_model.compute.gpu_table import GPUSpec
from mocked_model.compute.grouped import grouped_gemm_ns
from mocked_model.compute.kernels import GemmShape, flash_attention_ns, gemm_ns, memory_ns


@dataclass(frozen=True, slots=True)
class Kernel:
    """One kernel (or a group of ``count`` kernels moving ``nbytes`` in all): a GEMM (``gemm``), a flash-attention
    pass (``flash_flops`` > 0, with ``cta_flops`` of thread-block overhead), or memory-bound work of ``kind``
    (:data:`mocked_model.compute.gpus.MEMORY_KINDS`); ``host_us`` of host time beyond the launches (a
    device-to-host synchronisation); ``group``: a grouped GEMM's problems ``(m, n, k)`` (``gemm`` then holds their
    aggregate for the FLOPs; :mod:`mocked_model.compute.grouped` prices them)."""

    name: str
    gemm: GemmShape | None = None
    nbytes: float = 0.0
    count: int = 1
    flash_flops: float = 0.0
    backward: bool = False
    kind: str = "stream"
    cta_flops: float = 0.0
    host_us: float = 0.0
    group: tuple[tuple[int, int, int], ...] = ()

    def ns(self, gpu: GPUSpec) -> float:
        if self.gemm is not None:
            t = (grouped_gemm_ns(self.gemm, self.group, gpu) if self.group else gemm_ns(self.gemm, gpu)) * self.count
        elif self.flash_flops:
            t = flash_attention_ns(self.flash_flops, self.nbytes, gpu, self.backward, self.cta_flops)
        else:
            t = memory_ns(self.nbytes, gpu, self.count, self.kind)
        return t + self.host_us * 1e3

    @property
    def flops(self) -> float:
        if self.gemm is not None:
            return self.gemm.flops * self.count
        return self.flash_flops


@dataclass(frozen=True, slots=True)
class Precision:
    """``kind``: the GEMM inputs (``fp8``, ``bf16``, ``fp32``); ``a``: activation bytes per element;
    ``fp8_transpose``: FP8 GEMMs need physically transposed copies of their operands for the backward GEMMs
    (Hopper; Blackwell reads FP8 operands column-wise, Transformer Engine's low-precision docs)."""

    kind: str
    a: int
    fp8_transpose: bool = True

    @property
    def attention_kind(self) -> str:
        """The unfused attention's batched GEMMs stay in bf16 under FP8 (TE casts only the linears)."""
        return "bf16" if self.kind == "fp8" else self.kind


def phase(item) -> str:
    """``forward``, ``backward``, ``recompute``, ``step``, ``prefill`` or ``decode``: the item's stage's head."""
    return item.stage.split(".", 1)[0]


def mem(name: str, nbytes: float, count: int = 1, kind: str = "stream", host_us: float = 0.0) -> Kernel:
    """``count`` memory-bound kernels of ``kind`` moving ``nbytes`` in all."""
    return Kernel(name, nbytes=nbytes, count=count, kind=kind, host_us=host_us)


FP8_BLOCK = {"mxfp8": 32, "blockwise": 128}
"""Values per scale of the block-scaled FP8 recipes (MXFP8: 32 with an E8M0 scale byte; DeepSeek's 1x128 with fp32)."""
AMAX_KERNELS = 3
"""Kernels of one tensor's current-scaling amax and scale before its cast: ``zero_amax_kernel``, the amax reduction
and ``compute_scale_from_amax_kernel`` (Transformer Engine ``common/recipe/current_scaling.cu``, launched one after
the other by ``Float8CurrentScalingQuantizer::quantize_impl`` in ``pytorch/csrc/quantizer.cpp``)."""


def block_scaled(kind: str, meta: dict) -> bool:
    """Whether a GEMM of operand ``kind`` under ``meta``'s recipe multiplies block-scaled FP8 (``--fp8_recipe
    blockwise``: :data:`~mocked_model.compute.kernels.HOPPER_BLOCK_SCALED_GEMM` prices its main loop)."""
    return kind == "fp8" and meta.get("fp8_recipe") == "blockwise"


def fp8_quantize(name: str, n: float, p: Precision, meta: dict, tensors: int = 1) -> list[Kernel]:
    """Transformer Engine's quantization of ``n`` bf16 values in ``tensors`` tensors to FP8 (``--fp8_recipe``), as its
    low-precision docs describe: delayed scaling casts in one pass with last step's scale, writing the rowwise copy and
    (Hopper) the transposed one a backward GEMM needs (``cast_transpose``; several tensors in one fused
    ``nvte_multi_cast_transpose``); current scaling (``tensorwise``) first reads each tensor for its amax
    (:data:`AMAX_KERNELS` kernels a tensor) and then casts it, one cast kernel a tensor; MXFP8 (Blackwell) quantizes
    rows and columns independently, 1x32 blocks with a byte scale, no transpose; blockwise: 1x128 blocks with fp32
    scales, both directions; the block recipes one kernel a tensor.  Several tensors are the experts' splits of
    ``GroupedLinear``'s input, which Transformer Engine's ``split_quantize`` quantizes one expert at a time for every
    recipe but delayed scaling (``multi_tensor_quantize_impl`` in ``pytorch/csrc/extensions/cast.cpp``: "Currently
    only have fused kernel for FP8 delayed scaling"; ``GroupedLinear`` called ``split_quantize`` through May 2026, and
    grouped current-scaling kernels came with Transformer Engine PR #3114, 2026-06-23, after the validated runs)."""
    recipe = meta.get("fp8_recipe", "delayed")
    copies = 2 if p.fp8_transpose else 1
    tensors = max(int(tensors), 1)
    if recipe in FP8_BLOCK:
        scale = (1 if recipe == "mxfp8" else 4) / FP8_BLOCK[recipe]
        return [mem(name, n * (p.a + 2 * (1 + scale)), tensors, kind="fp8_cast")]
    if recipe == "tensorwise":
        return [mem(f"{name} amax", n * p.a, AMAX_KERNELS * tensors, kind="fp8_cast"),
                mem(name, n * (p.a + copies), tensors, kind="fp8_cast")]
    return [mem(name, n * (p.a + copies), kind="fp8_cast")]


def elements(item) -> int:
    """Elements of the item's first shape."""
    shapes = item.shapes or ()
    return prod(shapes[0]) if shapes else 0

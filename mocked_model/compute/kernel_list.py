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


def elements(item) -> int:
    """Elements of the item's first shape."""
    shapes = item.shapes or ()
    return prod(shapes[0]) if shapes else 0

"""The compute model: what each computation of a training step costs on a GPU we may not have.

- :mod:`~mocked_model.compute.gpus`: the GPU table (peaks, HBM, SMs, NVLink; each figure cited);
- :mod:`~mocked_model.compute.kernels`: the cost laws (GEMM tiles and waves at the sustained clock, memory-bound
  kernels per kind, flash attention, launch costs);
- :mod:`~mocked_model.compute.ops`: the kernels each mocked operation launches (training per software stack in
  :mod:`~mocked_model.compute.training_ops`, inference in :mod:`~mocked_model.compute.inference_ops`);
- :mod:`~mocked_model.compute.calibrate` and :mod:`~mocked_model.compute.spec_file`: a GPU's figures fitted from a
  kernel sweep, and the ``--gpu_spec`` files that carry them.

One model serves every consumer: the SimAI generator's ``--gpu_type`` times, the AIOB file estimates
(``python -m mocked_model.aiob.estimate``) and the topo simulator.  No torch here.
"""

from __future__ import annotations

from collections.abc import Callable

from mocked_model.compute.gpus import GPUS, GPUSpec, gpu_spec, known_gpu
from mocked_model.compute.kernels import (
    HOST_US_PER_LAUNCH,
    KIND_BYTES,
    GemmShape,
    dtype_kind,
    gemm_ns,
    gemm_tflops,
    memory_ns,
)
from mocked_model.compute.ops import Kernel, Precision, kernels_of, price_key


def precision(dtype: str, gpu: GPUSpec | str | None = None) -> Precision:
    """GEMM input kind and activation bytes of ``--dtype``: FP8 trains as Transformer Engine does, with
    FP8 GEMM inputs and bf16 activations (and, before Blackwell, transposed FP8 copies for backward)."""
    kind = dtype_kind(dtype)
    transpose = gpu is None or not gpu_spec(gpu).mx_formats
    return Precision(kind, 2 if kind == "fp8" else KIND_BYTES[kind], transpose)


def item_kernels(item, dtype: str = "bfloat16", gpu: GPUSpec | str | None = None) -> list[Kernel] | None:
    """The kernels of one computation item (None: no law for its operation); ``gpu`` decides FP8's transposes."""
    return kernels_of(item, precision(dtype, gpu))


def estimate_ns(item, gpu: GPUSpec | str, dtype: str = "bfloat16") -> float | None:
    """Estimated time in ns of one computation item on ``gpu`` (None when the model has no law for it)."""
    spec = gpu_spec(gpu)
    kernels = kernels_of(item, precision(dtype, spec))
    if kernels is None:
        return None
    return sum(k.ns(spec) for k in kernels)


def host_us(training) -> float:
    """The host time per kernel launch of a training job's stack (:data:`~mocked_model.compute.kernels.
    HOST_US_PER_LAUNCH` in eager PyTorch, 0 under CUDA graphs: ``--cuda_graph_impl``)."""
    return 0.0 if getattr(training, "cuda_graph_impl", "none") != "none" else HOST_US_PER_LAUNCH


def job_estimator(job, prices: dict | None = None) -> Callable[[object], float | None]:
    """The estimator of a training job: its GPU (``--gpu_type`` or ``--gpu_spec``), dtype and launch cost."""
    t = job.training
    return estimator(t.gpu_type, t.dtype, prices, host_us(t))


def estimator(gpu: GPUSpec | str, dtype: str = "bfloat16", prices: dict | None = None,
              host: float = 0.0) -> Callable[[object], float | None]:
    """``item -> ns or None`` for :func:`workload_generator.compute_times.fill_compute_times`.

    Each distinct operation is priced once (:func:`~mocked_model.compute.ops.price_key`: identical
    layers' items differ only in their layer index and names); ``prices`` (a dict the caller keeps, e.g.
    a simulation session) holds the prices across estimators of the same GPU, dtype and launch cost.
    ``host``: microseconds the host spends launching each kernel; an item of small kernels is never faster
    than its launches (the GPU waits for the host), an item of large ones hides them (the host runs ahead)."""
    spec = gpu_spec(gpu)
    p = precision(dtype, spec)
    if p.kind == "fp8":
        spec.peak_flops("fp8")  # a GPU without FP8 tensor cores is a one-line error here, not per item
    cache: dict = {} if prices is None else prices.setdefault((spec, p, host), {})

    def price(item) -> float | None:
        kernels = kernels_of(item, p)
        if kernels is None:
            return None
        gpu_ns = sum(k.ns(spec) for k in kernels)
        return max(gpu_ns, host * 1e3 * sum(k.count for k in kernels)) if host else gpu_ns

    def estimate(item) -> float | None:
        key = price_key(item)
        if key is None:
            return price(item)
        found = cache.get(key, cache)
        if found is cache:
            found = cache[key] = price(item)
        return found

    return estimate


__all__ = ["GPUS", "HOST_US_PER_LAUNCH", "GPUSpec", "GemmShape", "Kernel", "Precision", "dtype_kind", "estimate_ns",
           "estimator", "gemm_ns", "gemm_tflops", "gpu_spec", "host_us", "item_kernels", "job_estimator", "known_gpu",
           "memory_ns", "precision", "price_key"]

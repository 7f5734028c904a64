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
    """The host time per kernel launch of a training job's stack outside CUDA graphs (:data:`~mocked_model.compute.
    kernels.HOST_US_PER_LAUNCH`); 0 when ``--cuda_graph_impl`` captures everything (whole layers or the iteration).
    Partial ``--cuda_graph_scope`` graphs are per item: :func:`job_estimator` with :class:`~mocked_model.compute.host.
    HostSetup`."""
    if getattr(training, "cuda_graph_impl", "none") == "none":
        return HOST_US_PER_LAUNCH
    return 0.0 if not getattr(training, "cuda_graph_scope", ()) else HOST_US_PER_LAUNCH


def job_estimator(job, prices: dict | None = None, engine_host: bool = False) -> Callable[[object], float | None]:
    """The estimator of a training job: its GPU (``--gpu_type`` or ``--gpu_spec``), dtype and launch cost, per item
    as its ``--cuda_graph_scope`` captures it.  ``engine_host``: GPU times only (the topo engine plays the host,
    :mod:`simulator.topo.host_model`), the dispatchers' host waits left to it too."""
    from mocked_model.compute.host import HostSetup

    t = job.training
    if engine_host:
        return estimator(t.gpu_type, t.dtype, prices, 0.0, gpu_only=True)
    return estimator(t.gpu_type, t.dtype, prices, HostSetup.of(job) if t.cuda_graph_impl != "none" else host_us(t))


def estimator(gpu: GPUSpec | str, dtype: str = "bfloat16", prices: dict | None = None,
              host: float | object = 0.0, gpu_only: bool = False) -> Callable[[object], float | None]:
    """``item -> ns or None`` for :func:`workload_generator.compute_times.fill_compute_times`.

    Each distinct operation is priced once (:func:`~mocked_model.compute.ops.price_key`: identical
    layers' items differ only in their layer index and names); ``prices`` (a dict the caller keeps, e.g.
    a simulation session) holds the prices across estimators of the same GPU, dtype and launch cost.
    ``host``: microseconds the host spends launching each kernel (or a :class:`~mocked_model.compute.host.HostSetup`:
    per item, none inside a captured CUDA graph); an item of small kernels is never faster than its launches (the GPU
    waits for the host), an item of large ones hides them (the host runs ahead).  ``gpu_only``: the kernels' GPU time
    alone, the dispatchers' device-to-host waits (:data:`~mocked_model.compute.kernel_list.Kernel.host_us` of a
    ``moe_dispatch_meta`` item) left to the caller's host model."""
    from mocked_model.compute.host import HostSetup, launches_host_us

    spec = gpu_spec(gpu)
    p = precision(dtype, spec)
    if p.kind == "fp8":
        spec.peak_flops("fp8")  # a GPU without FP8 tensor cores is a one-line error here, not per item
    cache: dict = {} if prices is None else prices.setdefault((spec, p, host, gpu_only), {})
    setup = host if isinstance(host, HostSetup) else None

    def price(item) -> float | None:
        kernels = kernels_of(item, p)
        if kernels is None:
            return None
        gpu_ns = sum(k.ns(spec) for k in kernels)
        if gpu_only and (item.meta or {}).get("op") == "moe_dispatch_meta":
            gpu_ns -= sum(k.host_us for k in kernels) * 1e3
        per_launch = launches_host_us(item, setup) if setup is not None else host
        return max(gpu_ns, per_launch * 1e3 * sum(k.count for k in kernels)) if per_launch else gpu_ns

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

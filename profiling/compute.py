"""``python -m profiling compute``: time every distinct computation of a job (or a grid of GEMM shapes)
on this device with AIOB's torch operations and timer, and write the compute profile.

A job's items (every pipeline stage, one of each distinct key of :func:`simulator.profiles.db.item_key`)
become AIOB operations (:mod:`mocked_model.aiob.modules`): a GEMM item (forward, input gradient or
weight gradient alike) is one ``F.linear`` (a grouped experts' GEMM, AIOB's expert loop or grouped_gemm)
of its ``(m, n, k)``; attention, norms, activations, bias-dropout-add, rotary, embedding and loss run
AIOB's module forward and backward (a backward item takes the backward time); the optimizer item is
AIOB's Adam over the parameters the rank updates (the compute model adds the rest of Megatron's step:
zeroing, norm, copies).  Timing is AIOB's (:func:`mocked_model.aiob.timing.sample_op`): warm-up calls,
then ``--samples`` samples, CUDA events on a GPU and ``perf_counter_ns`` on a CPU, AICB's rule of
dropping samples above three times the minimum; ``time_us`` is the mean kept, with min, max and the
implementation that ran.  bf16 (the job's dtype) on a GPU, float32 on a CPU (AIOB's choice: CPU
half-precision kernels say nothing about a GPU); the ``dtype`` column says which.
"""

from __future__ import annotations

import platform
import re
import sys
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from simulator.profiles import db as profile_db
from utils.errors import ConfigError

PROG = "profiling compute"


def job_items(job: Any) -> list[Any]:
    """Every computation item of every pipeline stage of ``job`` (each object once)."""
    from workload_generator.entry import generator_for

    job = replace(job, training=replace(job.training, computation_enable=True))
    seen: dict[int, Any] = {}
    stages = job.parallel.pp if job.training.frame in ("Megatron", "DeepSeek") else 1
    for stage in range(stages):
        for item in generator_for(job, stage)().items:
            if item.is_computation:
                seen.setdefault(id(item), item)
    return list(seen.values())


def op_spec(item: Any, job: Any) -> Any | None:
    """The AIOB operation that times ``item`` (None: AIOB has none; the compute model prices it)."""
    from mocked_model.aiob.layout import OpSpec

    meta = item.meta or {}
    op = meta.get("op")
    shapes = item.shapes or ()
    if op in profile_db.GEMM_OPS:
        dims = profile_db.gemm_dims(item)
        if dims is None:
            return None
        m, n, k, batch = dims
        if batch > 1:
            return OpSpec("gemm", None, "experts", (m * batch, k), {"tokens": [m] * batch, "in": k, "out": n})
        return OpSpec("gemm", None, "linear", (m, 1, k), {"in": k, "out": n, "bias": False})
    if op == "attention":
        d = profile_db.attention_dims(item)
        if d is None:
            return None
        return OpSpec("attention", "bwd", "attention", (d["batch"], d["heads"], d["seq"], d["head_dim"]),
                      dict(micro=d["batch"], heads=d["heads"], groups=d["kv_heads"], seq=d["seq"], head_dim=d["head_dim"],
                           v_dim=d["v_dim"], impl=d["impl"], p=d["dropout"]))
    if not shapes:
        return None
    shape = tuple(shapes[0])
    if op == "norm":
        kind = "RMSNorm" if "rms" in job.model.normalization.lower() else "LayerNorm"
        return OpSpec(op, "bwd", "norm", shape, {"width": shape[-1], "kind": kind})
    if op in ("gelu", "swiglu"):
        return OpSpec(op, "bwd", "act", shape, {"kind": op})
    if op == "bda":
        return OpSpec(op, "bwd", "bda", shape, {"p": meta.get("p", 0.0), "bias": bool(meta.get("bias"))})
    if op == "rotary" and len(shape) == 3 and shape[-1] % job.model.kv_channels == 0:
        return OpSpec(op, "bwd", "rotary", shape, {"head_dim": job.model.kv_channels})
    if op == "embedding" and len(shapes) > 1:
        vocab, hidden = shapes[1][-2:]
        positions = meta.get("max_positions", 0) if meta.get("positions") else 0
        return OpSpec(op, "bwd", "embedding", shape, {"vocab": vocab, "hidden": hidden, "positions": positions})
    if op == "loss":
        return OpSpec(op, "bwd", "loss", shape, {})
    if op == "optimizer":
        return OpSpec(op, None, "optimizer", (), {"params": profile_db.elements(item)})
    return None


MAX_GEMM_DIM = 2**31 - 1
"""The largest ``--gemm_m/n/k`` taken (a tensor dimension a kernel indexes with 32 bits)."""
MAX_GRID = 10_000
"""The most GEMMs one ``--gemm_m/n/k`` grid times."""


def gemm_grid(text_m: str, text_n: str, text_k: str) -> list[Any]:
    """Plain GEMM items for every ``m x n x k`` of three comma-separated lists."""
    from utils.workload import CommType, WorkItem

    def values(text: str, flag: str) -> list[int]:
        try:
            out = [int(v) for v in re.split(r"[,\s]+", text.strip()) if v]
        except ValueError:
            raise ConfigError(f"{flag} {text!r}: expected whole numbers separated by commas") from None
        if not out or min(out) < 1:
            raise ConfigError(f"{flag} {text!r}: expected positive whole numbers")
        if max(out) > MAX_GEMM_DIM:
            raise ConfigError(f"{flag} {max(out)}: more than {MAX_GEMM_DIM} (2^31 - 1), beyond any GEMM a device runs")
        return out

    grid = [values(text_m, "--gemm_m"), values(text_n, "--gemm_n"), values(text_k, "--gemm_k")]
    if len(grid[0]) * len(grid[1]) * len(grid[2]) > MAX_GRID:
        raise ConfigError(f"--gemm_m/n/k: a grid of {len(grid[0]) * len(grid[1]) * len(grid[2])} GEMMs, more than "
                          f"{MAX_GRID} (bounded work: split it into several runs)")
    items = []
    for m in grid[0]:
        for n in grid[1]:
            for k in grid[2]:
                items.append(WorkItem(CommType.computation, stage="forward.gemm_grid", shapes=((m, 1, k), (k, n)),
                                      flops=2.0 * m * n * k, meta={"op": "gemm", "name": "gemm_grid"}))
    return items


def _out_of_memory(exc: BaseException) -> bool:
    """Whether a torch RuntimeError says an allocation failed (a CPU's ``DefaultCPUAllocator: can't allocate
    memory`` is a plain RuntimeError, not ``torch.OutOfMemoryError``)."""
    text = str(exc).lower()
    return "allocate" in text or "out of memory" in text or "overflow" in text


def measure(items: list[Any], job: Any, dtype: str = "bfloat16", device: Any = None, samples: int = 5,
            warmup: int | None = None, log: Any = print) -> tuple[list[dict], list[dict], str, dict[str, Any]]:
    """Time the distinct keys of ``items`` (``job``: their job, None for a GEMM grid) in ``dtype`` on a
    GPU (float32 on a CPU): ``(mlp rows, attention rows, the dtype timed, labels)``."""
    import torch

    from mocked_model.aiob.measure import WARMUP, default_device, device_label
    from mocked_model.aiob.modules import build_op, torch_dtype
    from mocked_model.aiob.timing import clock_for, sample_op, summarize

    device = torch.device(device) if device is not None else default_device()
    timing_dtype = torch_dtype(dtype, device)
    dtype_name = str(timing_dtype).replace("torch.", "")
    clock = clock_for(device)
    warm = WARMUP["cuda" if device.type == "cuda" else "cpu"] if warmup is None else warmup
    wanted: dict[tuple, tuple[str, dict[str, Any], Any, set[str]]] = {}
    skipped: set[str] = set()
    for item in items:
        found = profile_db.item_key(item, dtype_name)
        spec = op_spec(item, job) if found is not None else None
        if found is None or spec is None:
            skipped.add(str((item.meta or {}).get("op")))
            continue
        name, key = found
        phase = key.get("phase", "forward")
        common = tuple((k, v) for k, v in key.items() if k != "phase")
        entry = wanted.setdefault((name, common), (name, key, spec, set()))
        entry[3].add("forward" if key.get("op") == "gemm" else phase)
    mlp: list[dict] = []
    attention: list[dict] = []
    for (name, _), (_, key, spec, phases) in wanted.items():
        try:
            op = build_op(spec, device, timing_dtype)
            if spec.kind in ("linear", "experts"):
                op.has_backward = False
            result = sample_op(op, clock, warm, samples)
        except (torch.OutOfMemoryError, MemoryError, RuntimeError) as exc:
            if not isinstance(exc, (torch.OutOfMemoryError, MemoryError)) and not _out_of_memory(exc):
                raise
            raise ConfigError(f"{spec.kind} {spec.shape} does not fit in {device_label(device)}'s memory "
                              f"({type(exc).__name__})") from None
        scale = getattr(op, "scale", 1.0)
        for phase in sorted(phases):
            if phase == "step" or phase == "forward":
                times = summarize([s * scale for s in result.forward_ns], result.implementation)
            else:
                times = summarize(result.backward_ns, result.implementation)
            row = dict(key, phase=phase, time_us=times.avg_us, time_min_us=times.min_us, time_max_us=times.max_us,
                       samples=samples, implementation=times.implementation or "")
            (attention if name == "attention.csv" else mlp).append(row)
            if log is not None:
                what = (f"gemm {key['m']}x{key['n']}x{key['k']}" + (f" x{key['batch']}" if key["batch"] != 1 else "")
                        if key.get("op") == "gemm" else
                        f"attention {key['impl']} b{key['batch']} h{key['heads']}/{key['kv_heads']} s{key['seq']} "
                        f"d{key['head_dim']}"
                        if name == "attention.csv" else f"{key['op']} {key['shapes']}")
                log(f"  {phase:<9} {what:<48} {times.avg_us:12.2f} us  [{times.implementation}]")
        del op
        if device.type == "cuda":
            torch.cuda.empty_cache()
    labels = {"device": device_label(device), "dtype": dtype_name, "torch": torch.__version__.split("+")[0],
              "clock": clock.name, "warmup": warm, "samples": samples,
              "timing": "AIOB's: warm-up calls, then samples; samples above 3x the minimum dropped (AICB)",
              "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "host": platform.node(),
              "command": " ".join(sys.argv)}
    if skipped:
        labels["not_measured"] = ", ".join(sorted(skipped)) + " (priced by the compute model)"
    return mlp, attention, dtype_name, labels


def default_sku(device: Any = None) -> str:
    """``cpu``, or the compute model's name of this GPU in lower case (``h100``), else the GPU's own name."""
    import torch

    from mocked_model.compute import GPUS

    if not torch.cuda.is_available() or (device is not None and str(device).startswith("cpu")):
        return "cpu"
    name = torch.cuda.get_device_name().upper()
    for gpu in sorted(GPUS, key=len, reverse=True):
        if gpu.replace("_", " ") in name or gpu in name.replace(" ", "_"):
            return gpu.lower()
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")

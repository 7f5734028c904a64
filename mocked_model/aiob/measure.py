"""AIOB: measure a job's computation on this device and write it as a compute file.

    compute = measure_job(job)              # one process, one rank's share (no torch.distributed)
    compute.write(default_aiob_path(job, values))

Every operation of :func:`mocked_model.aiob.layout.op_specs` (one per compute-file section) is built
as a real torch operation (:mod:`mocked_model.aiob.modules`) and timed forward and backward with
:func:`mocked_model.aiob.timing.sample_op`.  Samples per operation: on a GPU ``--epoch_num`` rounds times
the number of layers of its kind on the stage (AICB times every layer of every iteration), at least
:data:`MIN_SAMPLES`; on a CPU :data:`MIN_SAMPLES`; warm-up: :data:`WARMUP` calls first.  bf16 (the job's dtype) on a GPU, float32
on a CPU.

The file carries AICB's forward sections (AICB's readers sum them as before) and ours: a ``bwd_*``
section per operation with its measured backward (input and weight gradients together), MoE and MLA
sections, the optimizer step in ``param_time``, an ``implementation:`` line per section and top-level
labels (``compute_source: aiob``, device, dtype, software stack, clock, sample rule).

What is timed follows the job's software stack (``--transformer_impl``, ``--no_apex``, Megatron's fusion flags,
``--fp8_recipe``): the op specs carry its choices and :mod:`mocked_model.aiob.modules` builds the kernels that stack
launches, each section's ``implementation`` saying what ran (and which fallback, and why).
"""

from __future__ import annotations

import platform
from collections.abc import Callable

import torch

from mocked_model.aiob.compute_file import ComputeFile
from mocked_model.aiob.layout import aiob_filename, default_aiob_path, op_specs
from mocked_model.aiob.modules import build_op, torch_dtype
from mocked_model.aiob.timing import OUTLIER_FACTOR, clock_for, sample_op, summarize
from utils.config import JobConfig
from utils.errors import ConfigError
from utils.progress import progress, say

__all__ = ["aiob_filename", "default_aiob_path", "measure_job"]

MIN_SAMPLES = 3
"""Fewest samples per operation, so that the outlier rule has something to compare."""
WARMUP = {"cuda": 5, "cpu": 1}
"""Untimed calls before sampling: cuBLAS heuristics, allocator and clocks settle on a GPU."""


def stack_label(job: JobConfig) -> str:
    """The software stack the file times (``te``, ``local`` or ``local-torch``) and the flags that chose it."""
    t = job.training
    flags = f"--transformer_impl {t.transformer_impl}" + ("" if t.apex else " --no_apex")
    if t.fp8:
        flags += f" --dtype {t.dtype} --fp8_recipe {t.fp8_recipe}"
    return f"{t.stack.name} ({flags})"


def default_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def device_label(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)"


def measure_job(job: JobConfig, device: torch.device | str | None = None, warmup: int | None = None,
                min_samples: int = MIN_SAMPLES, log: Callable[[str], None] | None = None) -> ComputeFile:
    """Time every operation of one rank's share of ``job`` on ``device`` (default: the GPU when
    there is one).  Returns the compute file (microseconds); nothing is written."""
    device = torch.device(device) if device is not None else default_device()
    dtype = torch_dtype(job.training.dtype, device)
    clock = clock_for(device)
    warm = WARMUP["cuda" if device.type == "cuda" else "cpu"] if warmup is None else warmup
    out = ComputeFile(iterations=job.training.epoch_num, labels={
        "compute_source": "aiob",
        "device": device_label(device),
        "dtype": str(dtype).replace("torch.", ""),
        "stack": stack_label(job),
        "torch": torch.__version__.split("+")[0],
        "clock": clock.name,
        "samples": (f"epoch_num x layers of the op's kind (at least {min_samples})" if device.type == "cuda"
                    else f"{min_samples} per op on a CPU") + f" after {warm} warm-up calls; "
                   f"samples above {OUTLIER_FACTOR:g}x the minimum dropped (AICB)",
    })
    if log is not None and device.type != "cuda":
        log(f"aiob: no CUDA device; timing on the CPU in {out.labels['dtype']} (the times describe this CPU)")
    backward = {}
    specs = op_specs(job)
    # AICB's rule (every layer of every iteration) averages a GPU's noise; on a CPU an operation of a
    # billion-parameter layer takes seconds and varies little, so the fewest samples do
    counts = [max(job.training.epoch_num * spec.repeats, min_samples) if device.type == "cuda" else min_samples
              for spec in specs]
    bar = progress(total=sum(max(warm, 1) + n for n in counts), desc="AIOB", unit="run")
    for spec, samples in zip(specs, counts):
        bar.set_postfix_str(spec.section, refresh=False)
        try:
            op = build_op(spec, device, dtype)
            result = sample_op(op, clock, warm, samples, tick=bar.update)
        except (torch.OutOfMemoryError, MemoryError, RuntimeError) as exc:
            bar.close()
            if isinstance(exc, RuntimeError) and not _out_of_memory(exc):
                raise
            raise ConfigError(f"--aiob_enable: {spec.section} {spec.shape} does not fit in {device_label(device)}'s "
                              f"memory ({type(exc).__name__}); use more parallelism (tp, ep) or a smaller --seq_length") from None
        scale = getattr(op, "scale", 1.0)
        out.sections[spec.section] = summarize([s * scale for s in result.forward_ns], result.implementation)
        if spec.backward and op.has_backward:
            backward[spec.backward] = summarize(result.backward_ns, result.implementation)
        say(log, f"aiob: {spec.section:<16} fwd {out.sections[spec.section].avg_us:10.1f} us"
            + (f"  bwd {backward[spec.backward].avg_us:10.1f} us" if spec.backward in backward else "")
            + f"  [{result.implementation}]")
        del op
        if device.type == "cuda":
            torch.cuda.empty_cache()  # one operation's tensors at a time: big logits and experts fit
    bar.close()
    # backward sections after the forward ones, so that AICB's readers meet their sections first
    out.sections.update(backward)
    return out


def _out_of_memory(exc: BaseException) -> bool:
    """Whether an error is an allocation failure (the CPU allocator raises a plain RuntimeError)."""
    return isinstance(exc, torch.OutOfMemoryError) or "can't allocate memory" in str(exc) or "out of memory" in str(exc)

"""Inference workloads: the work items of prefill or decode steps of one pipeline stage
(:mod:`mocked_model.inference`) as a :class:`~utils.workload.Workload`, with their computation times.

    workload = InferenceWorkload(job)()                     # init block, then --epoch_num steps
    report = fill_inference_times(workload.items, job, "model")

Computation times (``source``), in docs/compute.md's order of preference:

- ``aiob``: measured here on torch modules of each record (:mod:`mocked_model.aiob.inference`), written
  as AICB's inference compute file (``results/aiob_outputs/<model>-world_size<W>-tp<T>-pp1-ep<E>-bpg<B>-seq<S>-<phase>.txt``);
- ``file``: such a file (``--comp_filepath``; AICB's or ours): one time per record kind, read as AICB's
  ``extract_inference_averages`` does (sections summed by kind), split evenly over the record's operations;
- ``model``: the compute model's estimate for ``--gpu_type`` (:mod:`mocked_model.compute`, inference
  operations in :mod:`mocked_model.compute.ops`), weights in the job's dtype; with the job's ``host`` mode
  eager, each operation is never faster than its kernels' launches (:mod:`mocked_model.inference_host`);
- ``placeholder``: none (a SimAI file gets AICB's 1 ns per record).
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from mocked_model.inference import SECTION_OF_RECORD, stage_items
from utils.errors import ConfigError
from utils.inference_job import InferenceJob
from utils.workload import CommType, WorkItem, Workload
from workload_generator.compute_times import FillReport, distinct_computations

SOURCES = ("aiob", "file", "model", "placeholder")

AICB_KINDS = (("atten_norm", "attention_norm"), ("gdn", "attention_gdn"), ("atten", "attention_layer"),
              ("mlp", "mlp"), ("moe_norm", "moe_norm"), ("moe_route", "moe_route"), ("moe", "moe_expert"))
"""AICB's ``extract_inference_averages``: a section's kind is the first of these found in its name."""


class InferenceWorkload:
    """The :class:`Workload` of one pipeline stage of an inference job: an empty init block, then
    ``epoch_num`` steps, each followed by an ``epoch_end`` marker (the steps share their item objects)."""

    name = "inference"

    def __init__(self, job: InferenceJob, pp_rank: int | None = None) -> None:
        self.job = job
        self.pp_rank = job.pp_rank if pp_rank is None else pp_rank
        self.step = stage_items(job, self.pp_rank)

    def __call__(self) -> Workload:
        items: list[WorkItem] = [WorkItem(CommType.epoch_end)]
        for _ in range(self.job.epoch_num):
            items += self.step
            items.append(WorkItem(CommType.epoch_end))
        rank = self.pp_rank * self.job.stage_ranks
        return Workload(items=items, config=self.job, rank=rank, generator=self.name)


def record_of(item: WorkItem) -> str:
    """The record kind an item's time is filed under (the embedding and the model's head have their own)."""
    meta = item.meta or {}
    if meta.get("record"):
        return meta["record"]
    return "embedding" if "embed" in str(meta.get("name", "")) else "lm_head"


def default_source(job: InferenceJob, given: str | None, aiob: bool, comp_filepath: str | None,
                   aiob_path: str | None = None) -> str:
    """``--compute_source``, else ``aiob`` with ``--aiob_enable``, ``file`` with ``--comp_filepath`` or when
    AICB's AIOB output for this job exists (AICB reuses it too), ``model`` with a ``--gpu_type`` of the
    compute model's table, else ``placeholder``."""
    from mocked_model.compute import known_gpu

    if given:
        return given
    if aiob:
        return "aiob"
    if comp_filepath:
        return "file"
    if aiob_path and os.path.isfile(aiob_path):
        # an earlier AIOB run's file is reused only when it was measured on the GPU asked for: a CPU-timed file
        # left behind by an earlier command must not answer for --gpu_type H100 (issue 28, item 13)
        from mocked_model.aiob.compute_file import ComputeFile, device_mismatch

        why = device_mismatch(ComputeFile.read(aiob_path), job.gpu_type)
        if why is None:
            return "file"
        fallback = "model" if known_gpu(job.gpu_type) else "placeholder"
        print(f"note: {aiob_path} is not used ({why}); --compute_source {fallback} answers instead "
              "(--compute_source file uses it anyway)", file=sys.stderr)
        return fallback
    return "model" if known_gpu(job.gpu_type) else "placeholder"


def weight_dtype(job: InferenceJob) -> str:
    return "float8" if job.weight_kind == "fp8" else "bfloat16"


def record_times_us(compute: Any) -> dict[str, float]:
    """Microseconds per record kind from a compute file: our sections by name, the rest by AICB's kinds."""
    exact = {section: record for record, section in SECTION_OF_RECORD.items()}
    out: dict[str, float] = defaultdict(float)
    for name, times in compute.sections.items():
        if name in exact:
            out[exact[name]] += times.avg_us
            continue
        for marker, kind in AICB_KINDS:
            if marker in name:
                out[kind] += times.avg_us
                break
    if "mlp" in out:  # AICB's one MLP time serves dense layers and shared experts alike
        for record in ("dense_mlp", "shared_experts"):
            out.setdefault(record, out["mlp"])
    return dict(out)


def file_filler(compute: Any) -> Callable[[list[WorkItem], FillReport], None]:
    """Set each record's time from ``compute``, split evenly over the record's computation items."""
    per_record = record_times_us(compute)

    def fill(items: list[WorkItem], report: FillReport) -> None:
        groups: dict[tuple, list[WorkItem]] = defaultdict(list)
        for item in items:
            groups[((item.meta or {}).get("layer"), record_of(item))].append(item)
        for (_layer, record), members in groups.items():
            us = per_record.get(record)
            if us is None:
                report.missing.add(SECTION_OF_RECORD.get(record, record))
                us = 0.0
            for member in members:
                member.time_ns = us * 1000 / len(members)
                report.filled += 1

    return fill


def fill_inference_times(items: Iterable[WorkItem], job: InferenceJob, source: str,
                         comp_filepath: str | None = None, compute: Any = None, explicit: bool = False) -> FillReport:
    """Set ``time_ns`` on every distinct computation item from ``source`` (see the module docstring).
    ``compute`` is a measured or loaded compute file for ``aiob`` / ``file``; a file measured on another device
    than ``--gpu_type`` is refused unless ``explicit`` (``--compute_source file`` given), then named."""
    if source not in SOURCES:
        raise ConfigError(f"--compute_source {source!r} is not one of {', '.join(SOURCES)}")
    computations = distinct_computations(items)
    report = FillReport(source)
    if source == "placeholder":
        for item in computations:
            item.time_ns = None
        return report
    if source == "model":
        from mocked_model.compute import estimator, gpu_spec

        if not job.gpu_type:
            raise ConfigError("--compute_source model needs --gpu_type (one of the compute model's GPUs, e.g. H100, H200)")
        gpu = gpu_spec(job.gpu_type)
        if job.weight_kind == "fp4" and gpu.fp4_tflops is None:
            raise ConfigError(f"--dtype float4 needs FP4 tensor cores (NVFP4/MXFP4: Blackwell, B200 or GB200); the "
                              f"{gpu.name} has none: give --dtype float8 or bfloat16")
        if job.weight_kind == "fp8" and gpu.fp8_tflops is None:
            raise ConfigError(f"{job.name}'s weights are FP8 ({'--dtype' if job.weight_dtype else 'the model default'}) "
                              f"but the {gpu.name} has no FP8 tensor cores: give --dtype bfloat16")
        from mocked_model.inference_host import launch_us, step_mode

        estimate = estimator(gpu, weight_dtype(job), host=launch_us(step_mode(job.host, job.decode, job.micro_batch)))
        known: dict[tuple, float | None] = {}   # the layers of a kind repeat the same operations
        for item in computations:
            meta = item.meta or {}
            key = (item.stage.split(".", 1)[0], item.shapes,
                   tuple(sorted((k, v) for k, v in meta.items() if k not in ("layer", "record", "name"))))
            if key not in known:
                known[key] = estimate(item)
            item.time_ns = known[key]
            if item.time_ns is None:
                report.missing.add(str((item.meta or {}).get("op")))
            else:
                report.filled += 1
        report.detail = f"compute-model estimate for {gpu.name} ({job.weight_kind} weights)"
        return report
    if compute is None:
        if not comp_filepath:
            raise ConfigError("--compute_source file needs --comp_filepath FILE")
        from utils.io import not_a_file

        if not os.path.isfile(comp_filepath):
            raise ConfigError(f"--comp_filepath {comp_filepath}: {not_a_file(comp_filepath)}")
        from mocked_model.aiob.compute_file import ComputeFile

        compute = ComputeFile.read(comp_filepath)
        report.compute_file = comp_filepath
    from mocked_model.aiob.compute_file import device_mismatch, device_words

    why = device_mismatch(compute, job.gpu_type)
    if why is not None:
        if not explicit:
            raise ConfigError(f"--comp_filepath {comp_filepath or report.compute_file}: {why}; give --compute_source model "
                              "for the compute model's estimate, or --compute_source file to use these times anyway")
        report.device_warning = f"{comp_filepath or report.compute_file}: {why}; used as asked (--compute_source file)"
    report.detail = device_words(compute)
    file_filler(compute)(computations, report)
    return report


def aiob_filename(job: InferenceJob) -> str:
    """AICB's AIOB output name (``pp1`` and ``bpg`` as AICB writes them)."""
    return (f"{job.name}-world_size{job.world_size}-tp{job.tp}-pp1-ep{job.ep}-bpg{job.micro_batch}"
            f"-seq{job.seq_length}-{job.phase}.txt").replace("/", "_")


def default_aiob_path(job: InferenceJob, root: str | None = None) -> str:
    return os.path.join(root or "results", "aiob_outputs", aiob_filename(job))


def measure_inference(job: InferenceJob, loops: int, path: str, log: Callable[[str], None] | None = None) -> Any:
    """AIOB: time each record kind's torch modules here and write the compute file to ``path``."""
    try:
        from mocked_model.aiob.inference import measure_inference_job
    except ImportError as exc:
        raise ConfigError(f"--aiob_enable needs torch (pip install '.[torch]'): {exc}") from None
    compute = measure_inference_job(job, loops=loops, log=log)
    compute.write(path)
    return compute


def timed_step(job: InferenceJob, source: str, comp_filepath: str | None = None, loops: int = 1,
               aiob_path: str | None = None, log: Callable[[str], None] | None = None,
               explicit: bool = False) -> tuple[Workload, FillReport]:
    """The workload of ``job``'s stage with computation times from ``source``; ``explicit``: the user gave
    ``--compute_source`` (a file from another device is then used and named instead of refused)."""
    workload = InferenceWorkload(job)()
    compute = None
    if source == "aiob":
        path = aiob_path or default_aiob_path(job)
        compute = measure_inference(job, loops, path, log)
        # timed here because asked: a device other than --gpu_type is named, not refused
        report = fill_inference_times(workload.items, job, "aiob", compute=compute, explicit=True)
        report.compute_file = path
        report.detail = f"measured on {compute.labels.get('device', 'this device')}"
    else:
        path = comp_filepath or (aiob_path if source == "file" else None)
        report = fill_inference_times(workload.items, job, source, path, explicit=explicit)
    workload.compute_source = source
    return workload, report

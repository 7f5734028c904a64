"""Fill the computation items of a workload with times, from one of the compute-time sources.

Sources, in docs/compute.md's order of preference: ``aiob`` (measured on this device), ``file`` (an AIOB
compute-time file, ``--comp_filepath``), ``model`` (the compute model's estimate for ``--gpu_type``,
:mod:`mocked_model.compute`; ``roofline`` is its old name and still accepted) and
``placeholder`` (no times: consumers write AICB's placeholder of 1 ns).  The workload records which
source its times came from (``Workload.compute_source``).

Generators reuse item objects across micro-batches, so filling the distinct items fills every
occurrence.  :func:`fill_job_times` is what the command-line entries call: it measures (``aiob``,
writing the compute file), reads (``file``) or estimates (``model``) and fills the items.
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from mocked_model.aiob.compute_file import (
    AICB_SECTIONS,
    CORE_PARTS,
    ComputeFile,
    device_mismatch,
    device_words,
    sections_of,
)
from utils.config import JobConfig
from utils.errors import ConfigError, FormatError
from utils.workload import WorkItem

SOURCES = ("placeholder", "file", "aiob", "model")
ALIASES = {"roofline": "model"}
"""Older names of a source (``--compute_source roofline`` named the compute model before it was one)."""
_GEMM_BACKWARD = {"dgrad", "wgrad"}


@dataclass
class FillReport:
    """What a fill did: the source, how many items got a time, and the sections a file lacked."""

    source: str
    filled: int = 0
    missing: set[str] = field(default_factory=set)
    compute_file: str | None = None
    detail: str | None = None
    device_warning: str | None = None
    """Times measured on another device than ``--gpu_type`` names (used because the source was chosen)."""

    def summary(self) -> str:
        text = f"compute times: {self.source} ({self.filled} operations)"
        if self.detail:
            text += f", {self.detail}"
        if self.compute_file:
            text += f"; compute file {self.compute_file}"
        if self.source == "placeholder":
            text += "; AICB's placeholder of 1 ns per computation (give --comp_filepath, --aiob_enable or --gpu_type)"
        return text

    def warning(self) -> str | None:
        """What the times lack, for stderr: the operations no section (or law) times, which count 0 ns."""
        if not self.missing:
            return None
        names = ", ".join(sorted(self.missing))
        if self.source in ("file", "aiob"):
            where = f" in {self.compute_file}" if self.compute_file else ""
            return (f"no time for {names}{where}: those operations count 0 ns (a file from --aiob_enable, or "
                    "--compute_source model --gpu_type GPU, times them)")
        return f"no time for {names} (counted as 0 ns)"


def print_report(report: FillReport, log: Callable[[str], None] | None = print) -> None:
    """The entries' account of a fill: the summary to ``log`` (stdout), what it lacks and times of another device
    than ``--gpu_type`` as warnings on stderr."""
    if log is not None:
        log(report.summary())
    if report.warning():
        print(f"warning: {report.warning()}", file=sys.stderr)
    if report.device_warning:
        print(f"warning: {report.device_warning}", file=sys.stderr)


def phase_of(item: WorkItem) -> str:
    """``forward``, ``backward`` or ``recompute`` from the item's stage."""
    return item.stage.split(".", 1)[0]


MOE_DISPATCH_OPS = frozenset({"moe_route", "moe_dispatch_meta", "moe_permute", "moe_unpermute", "moe_sort_chunks"})
"""Megatron-core's router and token-dispatcher kernels (:mod:`mocked_model.compute.moe_ops`): an AIOB compute file
(AICB's sections) has no section for them."""


def file_times(compute: ComputeFile) -> Callable[[list[WorkItem], FillReport], None]:
    """A filler that times items from an AIOB file (microseconds -> ns), splitting a section's time
    over the items it covers (e.g. per-expert GEMMs) in proportion to their FLOPs."""

    def fill(items: list[WorkItem], report: FillReport) -> None:
        groups: dict[tuple, list[WorkItem]] = defaultdict(list)
        for item in items:
            meta = item.meta or {}
            sections = sections_of(meta.get("name", ""))
            if sections is None:
                if meta.get("op") in MOE_DISPATCH_OPS:  # no AICB section times them: they cost 0, as in AICB
                    item.time_ns = 0.0
                    report.filled += 1
                continue
            phase = phase_of(item)
            kind = meta.get("op") if phase == "backward" else "forward"
            groups[(sections, phase, kind, meta.get("layer"))].append(item)
        check_sections(compute, groups)
        for ((fwd, bwd), phase, kind, _layer), members in groups.items():
            forward_us = compute.avg_us(fwd)
            if forward_us is None:
                report.missing.add(fwd)
                for member in members:
                    member.time_ns = 0.0
                continue
            if phase == "backward":
                backward_us = compute.avg_us(bwd)
                if backward_us is not None:
                    total_us = backward_us / 2 if kind in _GEMM_BACKWARD else backward_us
                else:
                    total_us = forward_us * (2 if kind == "attention" else 1)
            else:
                total_us = forward_us
            flops = [m.flops or 0.0 for m in members]
            weight = sum(flops)
            for member, f in zip(members, flops):
                share = f / weight if weight else 1 / len(members)
                member.time_ns = total_us * 1000 * share
                report.filled += 1

    return fill


def check_sections(compute: ComputeFile, groups: dict[tuple, list[WorkItem]]) -> None:
    """Refuse a file that lacks a section AICB's AIOB always writes (:data:`AICB_SECTIONS`) for an operation
    of the job: one line naming the file, the section and the operations it would time."""
    needed: dict[str, set[str]] = defaultdict(set)
    for ((fwd, _bwd), _phase, _kind, _layer), members in groups.items():
        if fwd in AICB_SECTIONS and compute.avg_us(fwd) is None:
            for member in members:
                name = str((member.meta or {}).get("name", ""))
                needed[fwd].add(name.split(".", 2)[-1] if name.startswith("layers.") else name)
    if not needed:
        return
    section = sorted(needed)[0]
    others = sorted(needed)[1:]
    path = compute.path or "the compute file"
    line = compute.without_average.get(section)
    if section == "atten_flash" and any(p in compute.sections for p in CORE_PARTS):
        lacking = ", ".join(p for p in CORE_PARTS if p not in compute.sections)
        what = f"no {lacking} (AICB's unfused attention is the sum of {', '.join(CORE_PARTS)})"
    elif line is not None:
        what = f"section {section!r} has no time_gpu_avg"
    else:
        what = f"no {section!r} section"
    also = f"; also missing: {', '.join(others)}" if others else ""
    raise FormatError(path, f"{what}, which times {', '.join(sorted(needed[section]))} (AICB's AIOB writes it for every "
                      f"model){also}; regenerate the file, or give --compute_source model --gpu_type GPU", line=line)


def distinct_computations(items: Iterable[WorkItem]) -> list[WorkItem]:
    """The computation items of ``items``, each distinct object once, in order (generators repeat the same
    item objects for the layers and micro-batches alike, and a time set on one is set on all of them)."""
    unique: dict[int, WorkItem] = {}
    for item in items:
        if item.is_computation:
            unique.setdefault(id(item), item)
    return list(unique.values())


def fill_compute_times(items: Iterable[WorkItem], source: str, comp_filepath: str | None = None,
                       estimator: Callable[[WorkItem], float | None] | None = None,
                       compute: ComputeFile | None = None) -> FillReport:
    """Set ``time_ns`` on every computation item (each distinct object once) from ``source``.
    ``compute`` (a measured or loaded file) serves the ``aiob`` and ``file`` sources."""
    source = ALIASES.get(source, source)
    if source not in SOURCES:
        raise ConfigError(f"--compute_source {source!r} is not one of {', '.join(SOURCES)}")
    computations = distinct_computations(items)
    report = FillReport(source)
    if source == "placeholder":
        for item in computations:
            item.time_ns = None
        return report
    if compute is not None and source in ("file", "aiob"):
        file_times(compute)(computations, report)
        return report
    if source == "file":
        if not comp_filepath:
            raise ConfigError("--compute_source file needs --comp_filepath FILE")
        file_times(ComputeFile.read(comp_filepath))(computations, report)
        return report
    if estimator is None:
        raise ConfigError(f"--compute_source {source} is not available here")
    for item in computations:
        item.time_ns = estimator(item)
        report.filled += item.time_ns is not None
    return report


def default_source(job: JobConfig, given: str | None, model_default: bool = False) -> str:
    """``--compute_source``, or the best source the flags make available: ``file`` with ``--comp_filepath``
    (with or without ``--aiob_enable``: as in AICB, the file is read and nothing is timed), ``aiob`` with
    ``--aiob_enable`` alone, ``model`` when ``model_default`` (the SimAI generator, the simulator) and
    ``--gpu_type`` names a GPU of the compute model's table, else ``placeholder``."""
    from mocked_model.compute import known_gpu

    t = job.training
    if given:
        return ALIASES.get(given, given)
    if t.comp_filepath:
        return "file"
    if t.aiob_enable:
        return "aiob"
    if model_default and known_gpu(t.gpu_type):
        return "model"
    return "placeholder"


def cuda_available() -> bool:
    """Whether torch sees a CUDA device (False without torch)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def measure_compute_file(job: JobConfig, values: dict[str, Any] | None = None,
                         log: Callable[[str], None] | None = None) -> tuple[ComputeFile, str]:
    """Measure ``job`` on this device (AIOB) and write the compute file to AICB's place
    (``results/aiob_outputs/<name>``, under ``--output_dir`` when given); returns it and its path."""
    try:
        from mocked_model.aiob.measure import default_aiob_path, measure_job
    except ImportError as exc:
        raise ConfigError(f"--aiob_enable needs torch (pip install '.[torch]'): {exc}") from None
    from utils.io import guard_output

    path = default_aiob_path(job, values)
    given = values or {}
    guard_output(path, {"--comp_filepath": given.get("comp_filepath"), "--gpu_spec": given.get("gpu_spec")},
                 "the AIOB compute file")  # before the minutes of timing
    compute = measure_job(job, log=log)
    compute.write(path)
    return compute, path


def _gpu_name(gpu_type: str | None) -> str | None:
    """How messages name ``--gpu_type`` (a spec file by its GPU's name)."""
    if not gpu_type:
        return None
    from mocked_model.compute.gpus import gpu_label

    return gpu_label(gpu_type)


def fill_job_times(items: Iterable[WorkItem], job: JobConfig, source: str, values: dict[str, Any] | None = None,
                   log: Callable[[str], None] | None = None, prices: dict | None = None,
                   engine_host: bool = False) -> FillReport:
    """Fill the computation items of ``job`` from ``source``: ``aiob`` measures here and writes the
    compute file, ``file`` reads ``--comp_filepath``, ``model`` estimates for ``--gpu_type`` (each
    distinct operation priced once; ``prices`` keeps the prices across calls, see
    :func:`mocked_model.compute.estimator`; ``engine_host``: GPU times only, the simulator's host model issues
    the kernels, :mod:`simulator.topo.host_model`)."""
    t = job.training
    source = ALIASES.get(source, source)
    if source in ("aiob", "file") and t.frame == "DeepSpeed":
        flag = "--aiob_enable" if source == "aiob" else "--comp_filepath"
        raise ConfigError(f"{flag} times Megatron's modules (AICB's sections), which --frame DeepSpeed's items do not "
                          "name; use --compute_source model --gpu_type GPU")
    if source == "aiob" and not cuda_available():
        from mocked_model.compute import known_gpu

        if known_gpu(t.gpu_type):
            # no GPU to time: the GPU the job names is priced by the compute model instead of timing this CPU
            report = fill_job_times(items, job, "model", values, log)
            report.detail += (f"; --aiob_enable has no CUDA device here, so --gpu_type {t.gpu_type} is priced by the "
                              "compute model instead of timing this CPU")
            return report
    if source == "aiob":
        compute, path = measure_compute_file(job, values, log)
        report = fill_compute_times(items, source, compute=compute)
        report.compute_file = path
        report.detail = f"measured on {compute.labels.get('device', 'this device')}"
        why = device_mismatch(compute, t.gpu_type, _gpu_name(t.gpu_type))
        if why:  # timing here was asked for (--aiob_enable): done, and said
            report.device_warning = f"--aiob_enable timed this machine: {why}; the times are this device's"
        return report
    if source == "file":
        path = t.comp_filepath or (values or {}).get("comp_filepath")
        if not path:
            raise ConfigError("--compute_source file needs --comp_filepath FILE")
        from utils.io import not_a_file

        if not os.path.isfile(path):
            raise ConfigError(f"--comp_filepath {path}: {not_a_file(path)}")
        compute = ComputeFile.read(path)
        report = fill_compute_times(items, source, compute=compute)
        report.compute_file = path
        report.detail = device_words(compute)
        why = device_mismatch(compute, t.gpu_type, _gpu_name(t.gpu_type))
        if why:
            if (values or {}).get("compute_source") != "file":
                raise ConfigError(f"--comp_filepath {path}: {why}, and its times are that device's; give "
                                  f"--compute_source model to estimate {_gpu_name(t.gpu_type)} with the compute model, or "
                                  "--compute_source file to use the file's times anyway")
            report.device_warning = f"--comp_filepath {path}: {why}; its times are that device's (--compute_source file)"
        return report
    if source == "model":
        from mocked_model.compute import gpu_spec, job_estimator

        gpu = gpu_spec(t.gpu_type)
        report = fill_compute_times(items, source, estimator=job_estimator(job, prices, engine_host))
        report.detail = f"compute-model estimate for {gpu.name} ({t.dtype})"
        return report
    return fill_compute_times(items, source)

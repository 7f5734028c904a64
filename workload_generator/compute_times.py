"""Fill the computation items of a workload with times, from one of the compute-time sources.

Sources, in DESIGN.md's order of preference: ``aiob`` (measured on this device), ``file`` (an AIOB
compute-time file, ``--comp_filepath``), ``roofline`` (the analytical estimate for ``--gpu_type``) and
``placeholder`` (no times: consumers write AICB's placeholder of 1 ns).  The workload records which
source its times came from (``Workload.compute_source``).

Generators reuse item objects across micro-batches, so filling the distinct items fills every
occurrence.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from mocked_model.aiob.compute_file import ComputeFile, sections_of
from utils.errors import ConfigError
from workload_generator.workload import WorkItem

SOURCES = ("placeholder", "file", "aiob", "roofline")
_GEMM_BACKWARD = {"dgrad", "wgrad"}


@dataclass
class FillReport:
    """What a fill did: the source, how many items got a time, and the sections a file lacked."""

    source: str
    filled: int = 0
    missing: set[str] = field(default_factory=set)

    def summary(self) -> str:
        text = f"compute times: {self.source} ({self.filled} operations)"
        if self.source == "placeholder":
            text += "; AICB's placeholder of 1 ns per computation (give --comp_filepath, --aiob_enable or --gpu_type)"
        if self.missing:
            text += f"; no time for {', '.join(sorted(self.missing))} (counted as 0)"
        return text


def phase_of(item: WorkItem) -> str:
    """``forward``, ``backward`` or ``recompute`` from the item's stage."""
    return item.stage.split(".", 1)[0]


def file_times(compute: ComputeFile) -> Callable[[list[WorkItem], FillReport], None]:
    """A filler that times items from an AIOB file (microseconds -> ns), splitting a section's time
    over the items it covers (e.g. per-expert GEMMs) in proportion to their FLOPs."""

    def fill(items: list[WorkItem], report: FillReport) -> None:
        groups: dict[tuple, list[WorkItem]] = defaultdict(list)
        for item in items:
            meta = item.meta or {}
            sections = sections_of(meta.get("name", ""))
            if sections is None:
                continue
            phase = phase_of(item)
            kind = meta.get("op") if phase == "backward" else "forward"
            groups[(sections, phase, kind, meta.get("layer"))].append(item)
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


def fill_compute_times(items: Iterable[WorkItem], source: str, comp_filepath: str | None = None,
                       estimator: Callable[[WorkItem], float | None] | None = None) -> FillReport:
    """Set ``time_ns`` on every computation item (each distinct object once) from ``source``."""
    if source not in SOURCES:
        raise ConfigError(f"--compute_source {source!r} is not one of {', '.join(SOURCES)}")
    unique: dict[int, WorkItem] = {}
    for item in items:
        if item.is_computation:
            unique.setdefault(id(item), item)
    computations = list(unique.values())
    report = FillReport(source)
    if source == "placeholder":
        for item in computations:
            item.time_ns = None
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

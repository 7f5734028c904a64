"""The layout search's CSV: its columns, one row per simulated layout, the job fingerprint every row carries, and
the strict reader ``--resume`` trusts (issue 28, item 4).

Every row ends with ``job``: a fingerprint (16 hex digits of a SHA-256) of what its time depends on besides the
layout: the job's flags, the GPU type, the topology (the file's bytes, or the ``topo.gen`` flags and GPU count it
was generated from) and this file format.  ``--resume`` keeps only a file whose rows all carry a fingerprint of the
search being resumed, and refuses with one line, naming the file and line, a row of another job, a row cut short, a
time that is not a positive finite number (NaN, 0, -1) and a layout listed twice.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
from typing import Any

from simulator.search.space import LAYOUT_FIELDS, RECOMPUTE, Layout
from utils.errors import FormatError
from utils.parallel import ORDERS

FORMAT = "simulator-search-3"
"""The CSV layout's version, part of every fingerprint: rows of an older layout are another job's."""

RESULT_FIELDS = ("iteration_s", "tokens_per_s_per_gpu", "mfu", "memory_gib")
BREAKDOWN_FIELDS = ("gpu_type", "topology", "gpu_hours_per_million_tokens", "tp_comm_overlap", "overlap_param_gather",
                    "cp", "etp", "world_size", "first_stage_layers", "last_stage_layers", "compute_s", "exposed_comm_s",
                    "bubble_s", "tp_exposed_s", "ep_exposed_s", "dp_exposed_s", "pp_exposed_s", "cp_exposed_s",
                    "memory_weights_gib", "memory_activations_gib", "lower_bound_s", "job")
HEADER = tuple(f for f in LAYOUT_FIELDS if f not in BREAKDOWN_FIELDS) + RESULT_FIELDS + BREAKDOWN_FIELDS
POSITIVE = ("iteration_s", "tokens_per_s_per_gpu", "memory_gib", "world_size")
"""Columns a row must hold a positive finite number in."""
INTEGER = ("tp", "pp", "dp", "ep", "vpp", "micro_batch", "cp", "etp", "world_size", "first_stage_layers",
           "last_stage_layers")
AT_LEAST_ONE = ("tp", "pp", "dp", "ep", "vpp", "micro_batch", "cp", "world_size")
"""Integer columns of sizes (>= 1); the others (``etp``, the uneven stages' layers) may be 0."""
BOOLEAN = ("sequence_parallel", "distributed_optimizer", "tp_comm_overlap", "overlap_param_gather")
NON_NEGATIVE = tuple(f for f in HEADER if f not in (*INTEGER, *BOOLEAN, "recompute", "order", "gpu_type", "topology",
                                                    "job", *POSITIVE))
"""Number columns that may be 0 (a time, a ratio) or empty, never negative, NaN or infinite."""


def fingerprint(flags: dict[str, Any], gpu: str, topology: str) -> str:
    """16 hex digits naming a job: its flags (the search's job flags, as given), GPU type and topology identity
    (:func:`topology_identity`)."""
    text = json.dumps([FORMAT, sorted((k, repr(v)) for k, v in flags.items()), gpu, topology], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def topology_identity(path: str | None, generated: str | None = None) -> str:
    """What a topology is for a fingerprint: a file's SHA-256 (its content, wherever it lies), or the ``topo.gen``
    flags a generated one came from."""
    if generated is not None:
        return "gen:" + generated
    from utils.io import refuse_device

    refuse_device(path or "", "a SimAI topology")  # /dev/zero would be hashed forever
    digest = hashlib.sha256()
    with open(path or "", "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return "file:" + digest.hexdigest()


def result_row(layout: Layout, job: Any, result: Any, bound_s: float, point: dict[str, Any] | None = None
               ) -> dict[str, Any]:
    """A CSV row from a simulation result (:class:`simulator.result.SimulationResult`)."""
    t = result.totals
    iteration = result.iteration_us / 1e6
    st = result.details.stages[result.details.reported_stage]
    memory = result.memory.summary() if result.memory is not None else {}
    tokens = job.parallel.global_batch * job.training.seq_length
    row: dict[str, Any] = {f: getattr(layout, f) for f in LAYOUT_FIELDS}
    row.update(iteration_s=iteration, tokens_per_s_per_gpu=tokens / iteration / layout.world_size, mfu=result.details.mfu,
               memory_gib=memory.get("memory_gib"), world_size=layout.world_size, compute_s=t.compute_us / 1e6,
               gpu_type=job.training.gpu_type,
               # GPU-hours per million trained tokens: what the iteration costs in GPU time per token it trains
               gpu_hours_per_million_tokens=layout.world_size * iteration / 3600 / tokens * 1e6,
               exposed_comm_s=max(t.total_us - t.compute_us - t.bubble_us, 0.0) / 1e6, bubble_s=t.bubble_us / 1e6,
               tp_exposed_s=st.tp_exposed_us / 1e6, ep_exposed_s=st.ep_exposed_us / 1e6,
               dp_exposed_s=(st.dp_exposed_us + st.dp_ep_exposed_us) / 1e6, pp_exposed_s=st.pp_exposed_us / 1e6,
               cp_exposed_s=st.cp_exposed_us / 1e6,
               memory_weights_gib=memory.get("memory_weights_gib"),
               memory_activations_gib=memory.get("memory_activations_gib"), lower_bound_s=bound_s)
    if point:
        row.update(topology=point.get("topology"), job=point.get("job"))
    return row


def cell(value: Any, name: str = "") -> str:
    """A CSV cell: seconds to the microsecond (``*_s`` columns: the search's times are the full simulation's, and
    ``bench/bench_search.py`` compares them with ``python -m simulator`` at that resolution), other numbers to 6
    significant digits."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6f}" if name.endswith("_s") and math.isfinite(value) else f"{value:.6g}"
    return str(value)


def line_of(row: dict[str, Any]) -> str:
    return ",".join(cell(row.get(f), f) for f in HEADER) + "\n"


def layout_key(row: dict[str, Any]) -> tuple:
    """What identifies a row: its layout and sweep point (GPU type, topology, job)."""
    return tuple(str(row.get(f, "")) for f in LAYOUT_FIELDS) + (str(row.get("gpu_type", "")), str(row.get("topology", "")))


def read_rows(path: str, jobs: set[str] | dict[str, set[tuple[str, str]]]) -> list[dict[str, Any]]:
    """Rows of an earlier search's CSV for ``--resume``; ``jobs``: the fingerprints of this search's points (or each
    fingerprint -> the (GPU type, topology) pairs its points name in the CSV, which a row must then name too; a GPU
    type None: any, the point's GPU being a ``--gpu_spec`` file).
    Raises :class:`FormatError` (file and line) on anything it cannot trust: besides what the module docstring
    lists, a number column that is NaN, infinite or negative, a size below 1, a world size that is not tp x pp x dp x
    cp, a recomputation, rank order or yes/no cell the search never writes."""
    from utils.io import read_text

    text = read_text(path, "a search CSV (python -m simulator search -o)")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines or tuple(next(csv.reader([lines[0]]), [])) != HEADER:
        raise FormatError(path, "not a search CSV of this version (its header differs); --resume needs one", line=1)
    if not text.endswith("\n"):
        raise FormatError(path, "the last row is cut short (no line end): the search that wrote it was stopped mid-row; "
                          "delete that line to resume", line=len(lines))
    rows: list[dict[str, Any]] = []
    seen: dict[tuple, int] = {}
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        values = next(csv.reader([line]), [])
        if len(values) != len(HEADER):
            raise FormatError(path, f"the row has {len(values)} of the {len(HEADER)} columns (cut short or edited); "
                              "delete it to resume", line=number)
        row = dict(zip(HEADER, values))
        if row["job"] not in jobs:
            mine = ", ".join(sorted(jobs)) if len(jobs) <= 2 else f"{len(jobs)} fingerprints"
            raise FormatError(path, f"a row of another job (fingerprint {row['job'] or 'none'}; this search's: {mine}): "
                              "the model, flags, GPU or topology differ; write to a new -o or drop --resume", line=number)
        for name in POSITIVE:
            try:
                value = float(row[name])
            except ValueError:
                value = math.nan
            if not (math.isfinite(value) and value > 0):
                raise FormatError(path, f"{name} {row[name]!r} is not a positive number", line=number)
        named = jobs.get(row["job"]) if isinstance(jobs, dict) else None
        if named is not None and not {(row["gpu_type"], row["topology"]), (None, row["topology"])} & named:
            points = ", ".join(f"{g or 'the --gpu_spec GPU'} on {t}" for g, t in sorted(named, key=str))
            raise FormatError(path, f"gpu_type {row['gpu_type']!r} on topology {row['topology']!r} is not what its "
                              f"fingerprint {row['job']} names ({points}): an edited row; delete it to resume", line=number)
        for name in NON_NEGATIVE:
            try:
                value = float(row[name]) if row[name] != "" else 0.0
            except ValueError:
                value = math.nan
            if not (math.isfinite(value) and value >= 0):
                raise FormatError(path, f"{name} {row[name]!r} is not a number >= 0", line=number)
        for name in INTEGER:
            if not (row[name].isascii() and row[name].isdigit()):
                raise FormatError(path, f"{name} {row[name]!r} is not an integer >= 0", line=number)
            if name in AT_LEAST_ONE and int(row[name]) < 1:
                raise FormatError(path, f"{name} {row[name]!r} is not a size (1 or more)", line=number)
        sizes = [int(row[name]) for name in ("tp", "pp", "dp", "cp")]
        if sizes[0] * sizes[1] * sizes[2] * sizes[3] != int(row["world_size"]):
            raise FormatError(path, f"world_size {row['world_size']} is not tp x pp x dp x cp = "
                              f"{' x '.join(map(str, sizes))}", line=number)
        for name, allowed in ((n, ("True", "False")) for n in BOOLEAN):
            if row[name] not in allowed:
                raise FormatError(path, f"{name} {row[name]!r} is not True or False", line=number)
        if row["recompute"] not in RECOMPUTE:
            raise FormatError(path, f"recompute {row['recompute']!r} is not one of {', '.join(RECOMPUTE)}", line=number)
        if row["order"] not in ORDERS:
            raise FormatError(path, f"order {row['order']!r} is not one of {', '.join(ORDERS)}", line=number)
        key = layout_key(row)
        if key in seen:
            raise FormatError(path, f"the layout of line {seen[key]} again (a row listed twice)", line=number)
        seen[key] = number
        rows.append(row)
    return rows


def layout_of(row: dict[str, Any]) -> Layout:
    """The :class:`Layout` of a CSV row (read back by ``--resume``)."""
    values: dict[str, Any] = {}
    for name in LAYOUT_FIELDS:
        text = str(row[name])
        if name in INTEGER:
            values[name] = int(text)
        elif text in ("True", "False"):
            values[name] = text == "True"
        else:
            values[name] = text
    return Layout(**values)


def write_ranked(path: str, rows: list[dict[str, Any]]) -> None:
    """The final CSV, fastest first (written to a temporary file and renamed over ``path``)."""
    from utils.io import atomic_write

    ranked = sorted(rows, key=lambda r: float(r["iteration_s"]))
    with atomic_write(path) as handle:
        handle.write(",".join(HEADER) + "\n" + "".join(line_of(r) for r in ranked))


def open_rows(path: str, append: bool) -> Any:
    """The CSV opened for the rows as they arrive (``append``: after the kept rows of ``--resume``); refuses to
    follow a symbolic link (``O_NOFOLLOW``: :func:`utils.io.guard_output` has checked the path, this closes the race)."""
    from utils.io import OutputError

    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
    return os.fdopen(fd, "a" if append else "w", newline="", encoding="utf-8")

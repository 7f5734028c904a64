"""Result files and the printed summary.

- ``<prefix>EndToEnd.csv``: SimAI's layout exactly (docs/formats.md section 7): the terms header, their
  values as ``v (p%)`` in whole microseconds, then the per-layer table with times in whole
  microseconds and algbw/busbw in GiB/s with two decimals (``-nan`` / ``inf`` as SimAI prints them).
- ``<prefix>simai_layers.csv``: ours, one row per layer record with every phase's compute, comm
  and exposed time in microseconds (three decimals: exact for integer ns), the comm token, type,
  group, group size, size in bytes, the rule that priced it and the bandwidths in GiB/s.
- ``--model topo`` writes EndToEnd.csv for its busiest stage (the EndToEnd layer rows are that stage's
  records or layers, comm ``how`` = NCCL's algorithm/protocol) and, instead of the simai layers file:
  ``<prefix>topo_stages.csv`` (one row per stage, us), ``<prefix>topo_layers.csv`` (per stage and
  layer, us) and ``<prefix>topo_collectives.csv`` (every distinct collective: group shape, NCCL's
  algorithm and protocol, time in us, algbw/busbw in GB/s, count per iteration).

All are written atomically, the long tables streamed in pieces to temporary files that are renamed
only when every file is complete: nothing is written when anything fails.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from simulator.cfloat import c_fixed
from simulator.repeat import blocks
from simulator.result import (
    TERMS,
    SimulationResult,
    collective_rows,
    layer_row,
    layer_rows,
    stage_rows,
    topo_layer_rows,
)
from utils.io import atomic_write

RUN_NAME = "Analytical_test"
"""The run name SimAI-analytical writes in the second column of its per-layer table."""
LAYER_HEADER = ("layer_name,{run},fwd compute,wg compute,ig compute,fwd exposed comm,wg exposed comm,"
                "ig exposed comm,fwd total comm,algbw,busbw,wg total comm,algbw,busbw,ig total comm,algbw,busbw")
END_TO_END_SUFFIX = "EndToEnd.csv"
LAYERS_SUFFIX = "simai_layers.csv"


def _us0(value_us: float) -> str:
    return c_fixed(value_us, 0)


def end_to_end_text(result: SimulationResult, file_name: str) -> str:
    """The text of SimAI's ``EndToEnd.csv`` (docs/formats.md section 7); ``file_name`` fills the first cell."""
    return "".join(end_to_end_chunks(result, file_name))


CHUNK_ROWS = 4096
"""Rows per piece of text the result writers hand to the file: a result of 10^6 records is written
without its 90 MB (EndToEnd) and 265 MB (simai_layers) texts ever being held whole."""


def end_to_end_chunks(result: SimulationResult, file_name: str) -> Iterator[str]:
    """:func:`end_to_end_text` in pieces of at most :data:`CHUNK_ROWS` rows (or one repeated block)."""
    totals = result.totals
    lines = [", ".join(["File name"] + [label for _, label in TERMS])]
    cells = [file_name]
    for name, _ in TERMS[:-1]:
        share = c_fixed(totals.share_pct(name), 2)
        cells.append(f"{_us0(getattr(totals, name))} ({share}%)")
    cells.append(_us0(totals.total_us))
    lines.append(", ".join(cells))
    lines.append(LAYER_HEADER.format(run=RUN_NAME))
    yield "\n".join(lines) + "\n"
    rows: dict[int, tuple[Any, str]] = {}  # a row shared by several records, or a repeated block's rows, is formatted once

    def row(layer: Any) -> str:
        hit = rows.get(id(layer))
        if hit is not None and hit[0] is layer:
            return hit[1]
        if len(rows) >= _ROW_CACHE:
            rows.clear()
        text = _end_to_end_row(layer)
        rows[id(layer)] = (layer, text)
        return text

    for templates, times, _ in blocks(result.layers):
        if not templates:  # a list of no records: the file ends in an empty line
            yield "\n" * times
        elif len(templates) <= CHUNK_ROWS:
            text = "\n".join(map(row, templates)) + "\n"
            for _ in range(times):
                yield text
        else:
            for _ in range(times):
                for lo in range(0, len(templates), CHUNK_ROWS):
                    yield "\n".join(map(row, templates[lo:lo + CHUNK_ROWS])) + "\n"


_ROW_CACHE = 1 << 12
"""Formatted rows the writers keep (keyed by the result object, which the cache holds so that its id is not reused by
a row computed later, as :class:`simulator.topo.stream.StreamedLayers` computes them: rows alike share one; a file
repeats a few hundred); past that they start again, so that a result of 10^6 distinct rows does not hold every row."""


def _end_to_end_row(layer) -> str:
    fwd, ig, wg = layer.fwd, layer.ig, layer.wg
    return ",".join((
        layer.name, RUN_NAME,
        _us0(layer.fwd_compute_ns / 1000.0), _us0(layer.wg_compute_ns / 1000.0), _us0(layer.ig_compute_ns / 1000.0),
        _us0(layer.fwd_exposed_ns / 1000.0), _us0(layer.wg_exposed_ns / 1000.0), _us0(layer.ig_exposed_ns / 1000.0),
        _us0(fwd.time_ns / 1000.0), c_fixed(fwd.algbw_gibps, 2), c_fixed(fwd.busbw_gibps, 2),
        _us0(wg.time_ns / 1000.0), c_fixed(wg.algbw_gibps, 2), c_fixed(wg.busbw_gibps, 2),
        _us0(ig.time_ns / 1000.0), c_fixed(ig.algbw_gibps, 2), c_fixed(ig.busbw_gibps, 2),
    ))


def _csv_cell(value: Any) -> str:
    # Shortest text that reads back to the same double (times are ns / 1000, bandwidths float32).
    if isinstance(value, float):
        if math.isfinite(value) and value == int(value):
            return str(int(value))
        return repr(value)
    return str(value)


def layers_csv_text(result: SimulationResult) -> str:
    """Our per-layer CSV (see :func:`layer_rows`).  Layer names are single tokens, so no quoting; a
    repeated record's row is formatted once and only its index written again."""
    return "".join(layers_csv_chunks(result))


def layers_csv_chunks(result: SimulationResult) -> Iterator[str]:
    """:func:`layers_csv_text` in pieces of about :data:`CHUNK_ROWS` rows."""
    header, *_ = layer_rows(result, header_only=True)
    yield ",".join(header) + "\n"
    cache: dict[int, tuple[Any, str]] = {}

    def rest(layer: Any) -> str:  # the row after its index
        hit = cache.get(id(layer))
        if hit is not None and hit[0] is layer:
            return hit[1]
        if len(cache) >= _ROW_CACHE:
            cache.clear()
        text = "".join("," + _csv_cell(v) for v in layer_row(layer)[1:]) + "\n"
        cache[id(layer)] = (layer, text)
        return text

    for templates, times, first in blocks(result.layers):
        if first is None:
            for lo in range(0, len(templates), CHUNK_ROWS):
                yield "".join(f"{layer.index}{rest(layer)}" for layer in templates[lo:lo + CHUNK_ROWS])
        elif len(templates) <= CHUNK_ROWS:
            rests = list(map(rest, templates))
            per = max(1, CHUNK_ROWS // len(rests))  # repetitions of a small block per piece
            index = first
            for done in range(0, times, per):
                piece = rests * min(per, times - done)
                yield "".join(map("{}{}".format, range(index, index + len(piece)), piece))
                index += len(piece)
        else:
            index = first
            for _ in range(times):
                for lo in range(0, len(templates), CHUNK_ROWS):
                    piece = list(map(rest, templates[lo:lo + CHUNK_ROWS]))
                    yield "".join(map("{}{}".format, range(index, index + len(piece)), piece))
                    index += len(piece)


TOPO_FILES = ("topo_stages.csv", "topo_layers.csv", "topo_collectives.csv")


def _csv_text(rows: list[list[Any]]) -> str:
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for row in rows:
        # 4 decimals of a microsecond (0.1 ns) hide float noise without losing a modelled digit
        writer.writerow(["" if v is None else _csv_cell(round(v, 4) if isinstance(v, float) else v) for v in row])
    return buffer.getvalue()


def summary_text(result: SimulationResult) -> str:
    """The printed summary: the resolved layout and every end-to-end term in us and percent."""
    if result.details is not None:
        return _topo_summary(result)
    s = result.setup
    lines = [
        f"{result.model} model: {result.workload_path}: {len(result.layers)} records; tp {s.get('tp')} "
        f"ep {s.get('ep')} pp {s.get('pp')} dp {s.get('dp')} ga {s.get('ga')} vpp {s.get('vpp')}; {s.get('gpus')} GPUs, "
        f"{s.get('gpus_per_server')} GPUs per server; " + (
            f"busbw from {s['busbw_file']} (SimAI's -busbw)" if s.get("busbw_file") else
            f"{s.get('nics_per_server')} NICs per server; NVLink {_gbps(s.get('nvlink_gibps'))} (-nv "
            f"{s.get('nvlink_gibps'):g} GiB/s), NIC {_gbps(s.get('nic_gibps'))} (-nic {s.get('nic_gibps'):g} GiB/s)"),
    ]
    width = max(len(label) for _, label in TERMS)
    for name, label in TERMS:
        value = getattr(result.totals, name)
        lines.append(f"  {label:<{width}}  {value:>16,.3f} us  {c_fixed(result.totals.share_pct(name), 2):>6}%")
    return "\n".join(lines)


def _gbps(gibps: float | None) -> str:
    """A SimAI bandwidth (GiB/s, its flags' unit) in the toolkit's unit: GB/s = 1e9 B/s (docs/formats.md section 1)."""
    return "?" if gibps is None else f"{gibps * 2**30 / 1e9:.1f} GB/s"


def _topo_summary(result: SimulationResult) -> str:
    s, d = result.setup, result.details
    assert d is not None
    mfu = f"; MFU {d.mfu * 100:.1f}% of the bf16 dense peak {d.peak_tflops:g} TFLOP/s" if d.mfu is not None else ""
    if d.hfu is not None and d.hfu_peak_tflops:
        mfu += (f"; hardware {d.hfu * d.hfu_peak_tflops:,.0f} TFLOP/s per GPU (recomputation included), "
                f"{d.hfu * 100:.1f}% of {d.hfu_peak_tflops:g}")
    cp_text = f" cp {s['cp']}" if (s.get("cp") or 1) > 1 else ""
    lines = [
        f"topo model: {result.workload_path}: tp {s.get('tp')}{cp_text} ep {s.get('ep')} pp {s.get('pp')} dp {s.get('dp')} "
        f"ga {s.get('ga')} chunks {s.get('chunks')}; {s.get('fabric')}; efficiency NVLink {s.get('nvlink_efficiency'):g} "
        f"NIC {s.get('nic_efficiency'):g}",
        f"  iteration {d.iteration_us:,.3f} us{mfu}",
        f"  {'stage':>5} {'compute':>14} {'TP':>12} {'EP':>12} {'DP':>12} {'DP_EP':>12} {'PP':>12} {'other':>10} "
        f"{'bubble':>14}  (us)",
    ]
    cp = any(st.cp_comm_us for st in d.stages)  # context parallelism: its own column (EndToEnd books it to TP)
    if cp:
        lines[-1] = lines[-1].replace(f"{'TP':>12}", f"{'TP':>12} {'CP':>12}")
    host = any(st.host_us for st in d.stages)  # the GPU waiting for the CPU (simulator/topo/host_model.py; not in EndToEnd)
    if host:
        lines[-1] = lines[-1].replace(f"{'other':>10}", f"{'other':>10} {'host':>12}")
    for st in d.stages:
        mark = "*" if st.stage == d.reported_stage else " "
        cp_cell = f" {st.cp_exposed_us:>12,.1f}" if cp else ""
        lines.append(f" {mark}{st.stage:>5} {st.compute_us:>14,.1f} {st.tp_exposed_us:>12,.1f}{cp_cell} "
                     f"{st.ep_exposed_us:>12,.1f} {st.dp_exposed_us:>12,.1f} {st.dp_ep_exposed_us:>12,.1f} "
                     f"{st.pp_exposed_us:>12,.1f} {st.other_exposed_us:>10,.1f}"
                     + (f" {st.host_us:>12,.1f}" if host else "") + f" {st.bubble_us:>14,.1f}")
    lines.append(f"  EndToEnd terms (stage {d.reported_stage}, the busiest):")
    width = max(len(label) for _, label in TERMS)
    for name, label in TERMS:
        value = getattr(result.totals, name)
        lines.append(f"  {label:<{width}}  {value:>16,.3f} us  {c_fixed(result.totals.share_pct(name), 2):>6}%")
    return "\n".join(lines)


def output_prefix(result: str | None, folder: str | None, workload_path: str) -> str:
    """Where the result files go: ``<prefix>EndToEnd.csv``.

    ``result`` is SimAI's ``-r`` (a path prefix; ending in ``/`` it is a folder and the name is the
    workload's stem plus ``-``); ``folder`` (``-r_f``, default ``results/``) holds a prefix given
    without a folder, or any prefix when given explicitly.
    """
    stem = os.path.splitext(os.path.basename(workload_path))[0] + "-"
    if result is None:
        return os.path.join(folder or "results", stem)
    if result.endswith("/"):
        result += stem
    if folder is not None or "/" not in result:
        return os.path.join(folder or "results", result)
    return result


def result_texts(result: SimulationResult, prefix: str) -> dict[str, str]:
    """Every result file's path and text: EndToEnd.csv, then the simai layers file or the topo tables."""
    return {path: "".join(chunks) for path, chunks in result_chunks(result, prefix).items()}


def result_chunks(result: SimulationResult, prefix: str) -> dict[str, Iterable[str]]:
    """:func:`result_texts` with each text as an iterable of pieces (what :func:`write_files` streams)."""
    chunks: dict[str, Iterable[str]] = {prefix + END_TO_END_SUFFIX: end_to_end_chunks(result, os.path.basename(prefix))}
    if result.details is None:
        chunks[prefix + LAYERS_SUFFIX] = layers_csv_chunks(result)
    else:
        for suffix, rows in zip(TOPO_FILES, (stage_rows(result), topo_layer_rows(result), collective_rows(result))):
            chunks[prefix + suffix] = [_csv_text(rows)]
    return chunks


def write_files(contents: Mapping[str, str | bytes | Iterable[str]]) -> list[str]:
    """Write every file atomically (text, bytes, or text as an iterable of pieces, written as they come);
    returns the paths.  A failure while any piece is made or written leaves none of the files."""
    from contextlib import ExitStack

    with ExitStack() as stack:
        handles = [(stack.enter_context(atomic_write(path, "wb" if isinstance(data, bytes) else "w")), data)
                   for path, data in contents.items()]
        for handle, data in handles:
            if isinstance(data, (str, bytes)):
                handle.write(data)
            else:
                handle.writelines(data)
    return list(contents)


def write_results(result: SimulationResult, prefix: str) -> list[str]:
    """Write ``<prefix>EndToEnd.csv`` and ``<prefix>simai_layers.csv`` (simai) or the topo tables
    atomically; return their paths.  A failure leaves no file behind (each is written to a temporary
    file, renamed when every file is complete)."""
    return write_files(result_chunks(result, prefix))

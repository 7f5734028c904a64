"""One self-contained HTML report of a replay log, a workload CSV or a simulation result.

Everything is inside the file: CSS inline, plots as base64 ``data:`` images (PNG, or SVG with
``image_format="svg"``), no script, and a Content-Security-Policy that forbids loading anything, so the
report opens the same offline, attached to a ticket or years later.  Tables are escaped; every column
name carries its unit (ms, us, GB/s = 1e9 B/s, bytes).  The page is built in memory and written
atomically (:func:`write_report`), so a failure leaves no partial file.

    from log_analyzer.report import build_report, write_report
    write_report(build_report("x_log.csv", sim="run1-EndToEnd.csv", nominal={"NVLink": 360}), "report.html")
"""

from __future__ import annotations

import base64
import html
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from log_analyzer.timeline_html import TIMELINE_CSS
from utils.units import format_size

# ---- building blocks ---------------------------------------------------------------------------------

CSS = """
:root { --ink: #1f2328; --muted: #59636e; --line: #d1d9e0; --band: #f6f8fa; --accent: #4c72b0; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--ink); background: #fff;
       font: 15px/1.5 -apple-system, "Segoe UI", "Noto Sans", Helvetica, Arial, sans-serif; }
main, header, footer { max-width: 1200px; margin: 0 auto; padding: 0 28px; }
header { padding-top: 28px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 20px; margin: 36px 0 10px; padding-bottom: 6px; border-bottom: 2px solid var(--line); }
h3 { font-size: 16px; margin: 22px 0 8px; }
p.meta, p.note, figcaption, footer { color: var(--muted); font-size: 13px; }
p.note { margin: 6px 0; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; background: var(--band);
       padding: 1px 4px; border-radius: 4px; word-break: break-all; }
nav { margin: 14px 0 6px; font-size: 14px; display: flex; flex-wrap: wrap; gap: 4px 18px; }
nav a { color: var(--accent); text-decoration: none; white-space: nowrap; }
nav a:hover { text-decoration: underline; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(190px, 1fr)); gap: 12px; margin: 14px 0; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; background: var(--band); }
.card .label { font-size: 12px; color: var(--muted); text-transform: uppercase; letter-spacing: .03em; }
.card .value { font-size: 22px; font-weight: 600; font-variant-numeric: tabular-nums; }
.card .sub { font-size: 12px; color: var(--muted); }
.scroll { overflow-x: auto; max-height: 640px; overflow-y: auto; border: 1px solid var(--line); border-radius: 6px;
          margin: 8px 0 4px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { padding: 5px 10px; border-bottom: 1px solid var(--line); white-space: nowrap; }
thead th { position: sticky; top: 0; background: #eaeef2; text-align: right; font-weight: 600; z-index: 1;
           white-space: normal; vertical-align: bottom; min-width: 56px; }
thead th.text { text-align: left; }
td { text-align: right; }
td.text { text-align: left; }
tbody tr:nth-child(even) { background: var(--band); }
tbody tr:hover { background: #fff8c5; }
.pair { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: 18px; }
figure { margin: 14px 0 6px; }
figure img { max-width: 100%; height: auto; display: block; border: 1px solid var(--line); border-radius: 6px; }
footer { margin: 40px auto 30px; border-top: 1px solid var(--line); padding-top: 10px; }
"""

CSS += TIMELINE_CSS

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
"""Nothing but the page's own style and data: images may load (no network, no script)."""


@dataclass(frozen=True)
class Col:
    """A table column: the frame's column, the header shown (with its unit) and how to format it:
    ``text``, ``int``, ``num`` (significant digits), ``fixed`` (3 decimals), ``pct`` (1 decimal),
    ``size`` (binary units)."""

    source: str
    header: str
    kind: str = "num"


def fmt_value(value: Any, kind: str, decimals: int | None = None) -> str:
    """A cell as text; missing values (None, NaN, NA) as an en dash.  ``num`` cells take ``decimals``
    (the column's choice, :func:`column_decimals`), else their own: 1 from 100, 3 from 1, else 3
    significant digits."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return "–"
    if kind == "text":
        return str(value)
    if kind == "size":
        return format_size(float(value))
    number = float(value)
    if math.isinf(number):
        return "∞" if number > 0 else "-∞"
    if kind == "int":
        return f"{number:,.0f}" if number == int(number) else f"{number:,.2f}"
    if kind == "pct":
        return f"{number:.1f}"
    if kind == "fixed":
        return f"{number:,.3f}"
    if number == 0:
        return "0"
    if decimals is None:
        decimals = column_decimals([number])
    if decimals < 0 or abs(number) < 10.0 ** -decimals:
        return f"{number:#.3g}"
    return f"{number:,.{decimals}f}"


def column_decimals(values: Any) -> int:
    """Decimals shared by a column of numbers, so that they line up: 1 when the largest is 100 or more,
    3 when it is 1 or more, else -1 (each value with 3 significant digits: small bandwidths of a
    latency-bound sweep keep their digits)."""
    finite = [abs(float(v)) for v in values if v is not None and not pd.isna(v) and math.isfinite(float(v))]
    largest = max(finite, default=0.0)
    return 1 if largest >= 100 else 3 if largest >= 1 else -1


def html_table(frame: pd.DataFrame, columns: Sequence[Col], max_rows: int | None = None) -> str:
    """An escaped HTML table of ``frame``'s ``columns`` (text left, numbers right), scrolled when long."""
    shown = frame if max_rows is None else frame.head(max_rows)
    decimals = {c.source: column_decimals(shown[c.source]) for c in columns if c.kind == "num"}
    head = "".join(f'<th class="{"text" if c.kind == "text" else "num"}" scope="col">{html.escape(c.header)}</th>'
                   for c in columns)
    body = []
    for row in shown.itertuples(index=False):
        values = row._asdict()
        cells = "".join(f'<td class="{"text" if c.kind == "text" else "num"}">'
                        f"{html.escape(fmt_value(values.get(c.source), c.kind, decimals.get(c.source)))}</td>"
                        for c in columns)
        body.append(f"<tr>{cells}</tr>")
    more = ""
    if max_rows is not None and len(frame) > max_rows:
        more = f'<p class="note">First {max_rows} of {len(frame):,} rows.</p>'
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>{more}'


def _columns_ok(frame: pd.DataFrame, columns: Sequence[Col]) -> list[Col]:
    """The columns whose source is in the frame (itertuples renames nothing for identifier names)."""
    return [c for c in columns if c.source in frame.columns]


def figure_html(fig: Any, caption: str, image_format: str = "png") -> str:
    """A plot as an embedded ``data:`` image with its caption."""
    from log_analyzer.plots import render

    data = base64.b64encode(render(fig, image_format)).decode("ascii")
    mime = "image/svg+xml" if image_format == "svg" else "image/png"
    alt = html.escape(caption, quote=True)
    return (f'<figure><img src="data:{mime};base64,{data}" alt="{alt}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def cards_html(cards: Sequence[tuple[str, str, str]]) -> str:
    """Key numbers as cards: (label, value, small print)."""
    parts = [f'<div class="card"><div class="label">{html.escape(label)}</div><div class="value">{html.escape(value)}'
             f'</div><div class="sub">{html.escape(sub)}</div></div>' for label, value, sub in cards]
    return f'<div class="cards">{"".join(parts)}</div>'


def notes_html(notes: Sequence[str]) -> str:
    return "".join(f'<p class="note">{html.escape(n)}</p>' for n in notes)


@dataclass
class Section:
    """One titled part of the page (``anchor`` for the table of contents); ``body`` is HTML."""

    anchor: str
    title: str
    body: str


@dataclass
class Page:
    """The page: title, the inputs (shown under the title), sections, and the footer's notes."""

    title: str
    inputs: list[tuple[str, str]] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)

    def html(self) -> str:
        inputs = "<br>".join(f"{html.escape(label)}: <code>{html.escape(value)}</code>" for label, value in self.inputs)
        nav = "".join(f'<a href="#{html.escape(s.anchor)}">{html.escape(s.title)}</a>' for s in self.sections)
        sections = "".join(f'<section id="{html.escape(s.anchor)}"><h2>{html.escape(s.title)}</h2>{s.body}</section>'
                           for s in self.sections)
        return (
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(self.title)}</title><style>{CSS}</style></head>\n<body>"
            f'<header><h1>{html.escape(self.title)}</h1><p class="meta">{inputs}</p><nav>{nav}</nav></header>\n'
            f"<main>{sections}</main>\n"
            "<footer>Made by <code>python -m log_analyzer</code> (aicb-toolkit). Bandwidths in GB/s = 10<sup>9</sup> "
            "bytes/s with nccl-tests' bus-bandwidth factors; sizes in binary units (1 KiB = 1024 B); times in ms "
            "(replay) or us (simulation).</footer>\n</body></html>\n"
        )


# ---- replay logs -------------------------------------------------------------------------------------

ITERATION_STATS_COLS = [
    Col("init_ms", "init (ms)"), Col("count", "measured iterations", "int"), Col("mean_ms", "mean (ms)"),
    Col("min_ms", "min (ms)"), Col("max_ms", "max (ms)"), Col("p90_ms", "p90 (ms)"), Col("std_ms", "std (ms)"),
    Col("std_pct", "std / mean (%)", "pct"), Col("slowest_rank_max_ms", "slowest rank's max (ms)"),
]
ITERATION_COLS = [
    Col("iteration", "iteration", "int"), Col("time_ms", "wall time, rank 0 (ms)"),
    Col("max_time_ms", "wall time, slowest rank (ms)"), Col("slowest_rank", "slowest rank", "int"),
    Col("comm_logged_ms", "comm logged (ms)"), Col("compute_logged_ms", "compute logged (ms)"),
    Col("not_logged_ms", "not logged (ms)"), Col("ops", "operations", "int"),
]
COMM_COLS = [
    Col("comm_type", "type", "text"), Col("comm_group", "group", "text"), Col("msg_size", "size", "size"),
    Col("msg_size_b", "size (B)", "int"), Col("count", "count", "int"), Col("time_mean_ms", "time mean (ms)"),
    Col("time_std_ms", "time std (ms)"), Col("busbw_mean_gbps", "busbw mean (GB/s)"),
    Col("busbw_std_gbps", "busbw std (GB/s)"), Col("busbw_pct_nominal", "busbw / nominal (%)", "pct"),
    Col("max_time_ms", "max time, any rank (ms)"), Col("slowest_rank", "slowest rank", "int"),
    Col("straggler_rank", "straggler rank", "int"),
]
SHARE_TYPE_COLS = [Col("comm_type", "type", "text"), Col("count", "operations", "int"), Col("bytes", "bytes", "size"),
                   Col("time_ms", "time (ms)"), Col("share_pct", "share of logged time (%)", "pct")]
SHARE_GROUP_COLS = [Col("comm_group", "group", "text"), *SHARE_TYPE_COLS[1:]]


SWEEP_COLS = [
    Col("msg_size", "size", "size"), Col("msg_size_b", "size (B)", "int"), Col("count", "count", "int"),
    Col("time_mean_us", "time mean (us)"), Col("algbw_gbps", "algbw (GB/s)"), Col("busbw_gbps", "busbw (GB/s)"),
    Col("max_time_us", "max time, any rank (us)"), Col("slowest_rank", "slowest rank", "int"),
]


def iteration_rows(log: Any) -> pd.DataFrame:
    """The per-iteration table of the report: wall times (ms), the logged comm and compute time (a p2p
    batch counted once, as :attr:`Log.iterations` has them) and what the log does not account for."""
    table = log.iterations.rename(columns={"comm_ms": "comm_logged_ms", "compute_ms": "compute_logged_ms"})
    table["not_logged_ms"] = table["time_ms"] - table["comm_logged_ms"] - table["compute_logged_ms"]
    return table


def comm_rows(log: Any, nominal_gbps: float | None = None) -> pd.DataFrame:
    """The report's per (type, group, size) table: :func:`~log_analyzer.summary.comm_summary` of the
    measured iterations (every iteration when none after init), ``msg_size_b`` and, with a single
    nominal bandwidth, ``busbw_pct_nominal`` = busbw mean / nominal * 100."""
    from log_analyzer.summary import comm_summary

    items = log.measured if len(log.measured) else log.items
    table = comm_summary(items)
    table["msg_size_b"] = table["msg_size"]
    table["comm_type"] = [t + ("*" if e else "") for t, e in zip(table["comm_type"], table["emulated"])]
    if nominal_gbps:
        table["busbw_pct_nominal"] = table["busbw_mean_gbps"] / nominal_gbps * 100
    return table


def _pct(part: float, whole: float) -> str:
    return f"{fmt_value(part / whole * 100 if whole else math.nan, 'pct')} %"


def _overview_cards(log: Any, stats: Any, measured: pd.DataFrame, comm: pd.DataFrame) -> list[tuple[str, str, str]]:
    """The key numbers of a training log, each once: iterations, their time, where the wall time went
    (communication, computation when the log has it, the rest), operations, the slowest rank and the
    group that took the most communication time (a p2p batch's time once)."""
    wall = float(measured["time_ms"].sum()) if len(measured) else math.nan
    comm_ms = float(measured["comm_logged_ms"].sum()) if len(measured) else math.nan
    compute_ms = float(measured["compute_logged_ms"].sum()) if len(measured) else math.nan
    cards = [
        ("iterations", f"{stats.count}", f"init {fmt_value(stats.init_ms, 'num')} ms" if stats.init_ms is not None
         else "init block not logged"),
        ("iteration time", f"{fmt_value(stats.mean_ms, 'num')} ms", f"mean; std {fmt_value(stats.std_ms, 'num')} ms, "
                                                                    f"p90 {fmt_value(stats.p90_ms, 'num')} ms"),
        ("communication", _pct(comm_ms, wall), f"of the wall time ({fmt_value(comm_ms, 'num')} of "
                                               f"{fmt_value(wall, 'num')} ms, logged)"),
    ]
    if compute_ms > 0:
        cards.append(("computation", _pct(compute_ms, wall), f"of the wall time ({fmt_value(compute_ms, 'num')} ms, "
                                                             "logged)"))
    cards.append(("not logged", _pct(wall - comm_ms - compute_ms, wall), "of the wall time: launch gaps, Python, "
                                                                           "waiting"))
    cards.append(("operations", f"{len(log.items):,}", f"{int(comm['count'].sum()):,} collectives/p2p in measured "
                                                       "iterations"))
    if stats.slowest_rank_max_ms is not None:
        cards.append(("slowest rank", f"{fmt_value(stats.slowest_rank_max_ms, 'num')} ms", "longest iteration, any rank"))
    busiest = comm.nlargest(1, "time_total_ms")
    if len(busiest) and busiest["time_total_ms"].iloc[0] > 0:
        row = busiest.iloc[0]
        cards.append(("most comm time", f"{row.comm_type}", f"{row.comm_group or '-'}, {format_size(row.msg_size)}: "
                                                            f"{fmt_value(row.time_total_ms, 'num')} ms"))
    return cards


def log_sections(log: Any, nominal: Mapping[str, float] | None, image_format: str = "png",
                 iteration: int | None = None) -> list[Section]:
    """The sections of a replay log: overview, iteration times, the zoomable timeline, time shares, message
    sizes, bandwidth; a collective sweep's: overview, the sweep table, bandwidth."""
    from log_analyzer.summary import is_sweep, iteration_stats

    stats = iteration_stats(log)
    table = iteration_rows(log)
    measured = table[table["iteration"] >= 1]
    sweep = is_sweep(log.items)
    notes: list[str] = list(log.warnings)
    if not len(log.measured):
        notes.append("No measured iteration after init: the tables and plots show the init block.")
    if table["time_ms"].isna().any():
        cut = ", ".join(str(int(i)) for i in table.loc[table["time_ms"].isna(), "iteration"])
        what = "Size step" if sweep else "Iteration"
        notes.append(f"{what} {cut} has no epoch_end row (the run stopped in it): its wall time is unknown.")
    if log.detail_path is None and not log.warnings:
        notes.append("No detail CSV beside the log: slowest and straggler ranks, p2p batches and emulation are unknown.")
    if "emulated" in log.items.columns and log.items["emulated"].fillna(False).any():
        notes.append("* emulated: the backend lacks this collective; it ran as an equivalent built from supported ones.")
    single = next(iter(nominal.values())) if nominal and len(nominal) == 1 else None
    comm = comm_rows(log, single)
    bandwidth = _bandwidth_section(log, nominal, comm, image_format)
    if sweep:
        return [Section("overview", "Overview", cards_html(_sweep_cards(log)) + notes_html(notes)),
                _sweep_section(log, image_format), bandwidth]
    it = _default_iteration(log) if iteration is None else iteration
    stats_frame = pd.DataFrame([{**stats.__dict__, "std_pct": stats.std_ms / stats.mean_ms * 100
                                 if stats.mean_ms else math.nan}])
    return [
        Section("overview", "Overview", cards_html(_overview_cards(log, stats, measured, comm)) + notes_html(notes)),
        Section("iterations", "Iteration time",
                html_table(stats_frame, _columns_ok(stats_frame, ITERATION_STATS_COLS))
                + _figure(log, "iteration_times", "Wall time per iteration (rank 0 and the slowest rank) with mean ± std, "
                          "and the logged communication and computation of each.", image_format)
                + "<h3>Per iteration</h3>" + html_table(table, _columns_ok(table, ITERATION_COLS))
                + '<p class="note">Iteration 0 is init. Logged times sum the operations rank 0 timed (a p2p batch '
                  'counted once); "not logged" is the rest of the wall time (launch gaps, Python, waiting).</p>'),
        Section("timeline", f"Timeline of iteration {it}", _timeline(log, it)),
        _share_section(log, image_format),
        Section("sizes", "Message sizes",
                _figure(log, "size_cdf", "Cumulative share of the operations (top) and of the bytes (bottom) at or below "
                        "each message size, per type (measured iterations).", image_format)),
        bandwidth,
    ]


def _default_iteration(log: Any) -> int:
    from log_analyzer.plots import default_iteration

    return default_iteration(log)


def _timeline(log: Any, iteration: int) -> str:
    from log_analyzer.timeline_html import timeline_html

    return timeline_html(log, iteration)


def _figure(source: Any, name: str, caption: str, image_format: str, *args: Any) -> str:
    """``log_analyzer.plots.<name>(source, *args)`` embedded with its caption."""
    from log_analyzer import plots

    return figure_html(getattr(plots, name)(source, *args), caption, image_format)


def _share_section(log: Any, image_format: str) -> Section:
    from log_analyzer.summary import time_share

    items = log.measured if len(log.measured) else log.items
    by_type, by_group = time_share(items, "comm_type"), time_share(items, "comm_group")
    return Section("share", "Where the time goes",
                   _figure(log, "type_share", "Share of each operation type: of the communication operations, of the "
                           "message bytes and of the logged time (measured iterations).", image_format)
                   + '<div class="pair"><div><h3>By operation type</h3>'
                   + html_table(by_type, SHARE_TYPE_COLS) + "</div><div><h3>By group</h3>"
                   + html_table(by_group, SHARE_GROUP_COLS) + "</div></div>"
                   + _figure(log, "time_share", "Logged time of the measured iterations by type and by group.",
                             image_format))


def _bandwidth_section(log: Any, nominal: Mapping[str, float] | None, comm: pd.DataFrame, image_format: str) -> Section:
    nominal_text = ", ".join(f"{k} {v:,.4g} GB/s" for k, v in (nominal or {}).items())
    return Section("bandwidth", "Bus bandwidth by message size",
                   _figure(log, "busbw_vs_size", "Bus bandwidth of every operation (points) and the mean per size (lines)"
                           + (f"; reference lines: {nominal_text}" if nominal_text else "") + ".", image_format, nominal)
                   + "<h3>Per type, group and size (measured iterations)</h3>"
                   + html_table(comm, _columns_ok(comm, COMM_COLS))
                   + '<p class="note">Slowest rank: the longest time, usually the rank that arrived first and waited; '
                     "straggler: the shortest time, the rank the others waited for (most often over the rows). "
                     "Standard deviations are of the population (ddof 0).</p>")


def _sweep_cards(log: Any) -> list[tuple[str, str, str]]:
    """A collective sweep's key numbers: what it swept, over which sizes, and its best bus bandwidth."""
    from log_analyzer.summary import sweep_summary

    sweep = sweep_summary(log.items)
    measured = log.measured
    ctype = str(measured["comm_type"].iloc[0]) if len(measured) else "-"
    group = measured["comm_group"].iloc[0] if len(measured) else None
    ranks = measured["comm_group_size"].iloc[0] if len(measured) else None
    over = f"{group if isinstance(group, str) else '-'}, {int(ranks) if pd.notna(ranks) else '?'} ranks"
    cards = [("collective sweep", ctype, over),
             ("sizes", f"{len(sweep)}", f"{format_size(float(sweep['msg_size'].min()))} to "
                                        f"{format_size(float(sweep['msg_size'].max()))}" if len(sweep) else "none"),
             ("operations", f"{int(sweep['count'].sum()):,}", "timed, init excluded")]
    if len(sweep) and sweep["busbw_gbps"].notna().any():
        best = sweep.loc[sweep["busbw_gbps"].idxmax()]
        cards.append(("peak busbw", f"{fmt_value(best['busbw_gbps'], 'num')} GB/s", f"at {format_size(float(best['msg_size']))}"))
    return cards


def _sweep_section(log: Any, image_format: str) -> Section:
    from log_analyzer.summary import sweep_summary

    sweep = sweep_summary(log.items)
    sweep["msg_size_b"] = sweep["msg_size"]
    return Section("sweep", "Collective sweep: time and bandwidth per message size",
                   html_table(sweep, SWEEP_COLS)
                   + '<p class="note">One step per message size (a sweep has no training iterations: the steps differ '
                     "by their size, so their times are not jitter). Bandwidths are those of the mean time, as "
                     "nccl-tests reports them.</p>"
                   + _figure(log, "iteration_times", "Time of each size step (rank 0 and the slowest rank) and the logged "
                             "communication of each.", image_format))


# ---- workloads ---------------------------------------------------------------------------------------

WORKLOAD_COLS = [
    Col("comm_type", "type", "text"), Col("comm_group", "group", "text"), Col("comm_group_size", "group size (ranks)", "int"),
    Col("msg_size", "size", "size"), Col("msg_size_b", "size (B)", "int"), Col("count_init", "count in init", "int"),
    Col("count_per_iteration", "count per iteration", "int"), Col("bytes_per_iteration", "bytes per iteration", "size"),
]
WORKLOAD_SHARE_COLS = [Col("comm_type", "type", "text"), Col("count_per_iteration", "operations per iteration", "int"),
                       Col("bytes_per_iteration", "bytes per iteration", "size"),
                       Col("bytes_share_pct", "share of bytes (%)", "pct")]
WORKLOAD_GROUP_COLS = [Col("comm_group", "group", "text"), *WORKLOAD_SHARE_COLS[1:]]


def workload_sections(workload: Any, image_format: str = "png") -> list[Section]:
    """The sections of a workload CSV: what it would send, by type, group and size."""
    from log_analyzer import plots
    from log_analyzer.summary import workload_frame, workload_iterations, workload_share, workload_table

    frame = workload_frame(workload)
    table = workload_table(frame)
    table["msg_size_b"] = table["msg_size"]
    iterations = workload_iterations(frame)
    is_comp = (frame["comm_type"] == "computation").to_numpy()
    timed = frame["time_ns"].notna().to_numpy()[is_comp].sum()
    cards = [
        ("items", f"{len(frame):,}", f"{int(is_comp.sum()):,} computation ({int(timed):,} with a time)"),
        ("iterations", f"{iterations}", "after init" if (frame["iteration"] == 0).any() else "no init block"),
        ("operations", fmt_value(table["count_per_iteration"].sum(), "int"), "collectives and p2p per iteration"),
        ("bytes", format_size(float(table["bytes_per_iteration"].sum())), "message bytes per iteration"),
        ("init", fmt_value(table["count_init"].sum(), "int"), "operations before the first iteration"),
    ]
    by_type, by_group = workload_share(table, "comm_type"), workload_share(table, "comm_group")
    return [
        Section("overview", "Overview", cards_html(cards) + '<p class="note">Bytes are message sizes as the workload '
                "states them (the whole buffer of a collective); counts per iteration are means over its iterations.</p>"),
        Section("share", "By type and group",
                figure_html(plots.type_share(frame), "Share of each operation type: of the operations and of the "
                            "message bytes per iteration.", image_format)
                + '<div class="pair"><div><h3>By operation type</h3>' + html_table(by_type, WORKLOAD_SHARE_COLS)
                + "</div><div><h3>By group</h3>" + html_table(by_group, WORKLOAD_GROUP_COLS) + "</div></div>"
                + figure_html(plots.workload_sizes(frame), "Bytes per iteration by group and type, and operations "
                              "per iteration by message size.", image_format)),
        Section("sizes", "By type, group and size",
                figure_html(plots.size_cdf(frame), "Cumulative share of the operations (top) and of the bytes (bottom) "
                            "at or below each message size, per type (per iteration).", image_format)
                + html_table(table, WORKLOAD_COLS)),
    ]


# ---- simulation results ------------------------------------------------------------------------------

TERM_COLS = [Col("term", "term", "text"), Col("time_us", "time (us)"), Col("time_ms", "time (ms)"),
             Col("share_pct", "share of total (%)", "pct")]
STAGE_COLS = [Col("stage", "stage", "int"), Col("compute_us", "compute (us)"), Col("tp_exposed_us", "exposed TP (us)"),
              Col("ep_exposed_us", "exposed EP (us)"), Col("dp_exposed_us", "exposed DP (us)"),
              Col("dp_ep_exposed_us", "exposed DP_EP (us)"), Col("pp_exposed_us", "exposed PP (us)"),
              Col("other_exposed_us", "exposed other (us)"), Col("bubble_us", "bubble (us)"), Col("end_us", "end (us)"),
              Col("memory_gib", "memory per GPU (GiB)"), Col("memory_weights_gib", "weights (GiB)"),
              Col("memory_activations_gib", "activations (GiB)")]
LAYER_COLS = [Col("stage", "stage", "int"), Col("layer", "layer", "text"), Col("records", "records", "int"),
              Col("fwd_compute_us", "fwd compute (us)"), Col("bwd_compute_us", "bwd compute (us)"),
              Col("comm_us", "comm (us)"), Col("exposed_comm_us", "exposed comm (us)"),
              Col("overlapped_comm_us", "overlapped comm (us)"), Col("total_us", "compute + exposed (us)")]
COLLECTIVE_COLS = [Col("group", "group", "text"), Col("comm_type", "type", "text"), Col("size_bytes", "size", "size"),
                   Col("group_size", "group size (ranks)", "int"), Col("tier", "tier", "text"),
                   Col("algorithm", "algorithm", "text"), Col("protocol", "protocol", "text"), Col("time_us", "time (us)"),
                   Col("busbw_gbps", "busbw (GB/s)"), Col("count", "count per iteration", "int"),
                   Col("total_us", "total (us)")]


def sim_sections(sim: Any, image_format: str = "png", prefix: str = "sim", heading: str = "Simulation") -> list[Section]:
    """The sections of a simulation result: end-to-end terms, stages, layers and collectives."""
    from log_analyzer import plots

    sim = plots.as_sim(sim)
    terms = sim.summary_table()
    terms["time_ms"] = terms["time_us"] / 1000
    t = sim.terms

    def share(name: str) -> str:
        total = t.get("total_us", math.nan)
        return fmt_value(t.get(name, math.nan) / total * 100 if total else math.nan, "pct") + " %"

    cards = [("iteration", f"{fmt_value(sim.iteration_us / 1000, 'num')} ms", f"{sim.model} model"),
             ("compute", share("compute_us"), "of the total"), ("exposed comm", share("exposed_comm_us"), "of the total"),
             ("bubble", share("bubble_us"), "of the total")]
    if sim.stages is not None and "memory_gib" in sim.stages.columns and len(sim.stages):
        busiest = sim.stages.loc[sim.stages["memory_gib"].idxmax()]
        cards.append(("memory per GPU", f"{fmt_value(busiest['memory_gib'], 'num')} GiB",
                      f"most loaded: stage {int(busiest['stage'])}"))
    notes = list(sim.notes)
    if sim.stages is not None and len(sim.stages) > 1:
        notes.append("EndToEnd's terms describe one stage (the busiest: least bubble); every stage is in the table below.")
    files = ", ".join(os.path.basename(f) for f in sim.files)
    if files:
        notes.append(f"Read: {files}.")
    body = (cards_html(cards) + notes_html(notes) + html_table(terms, TERM_COLS)
            + figure_html(plots.sim_breakdown(sim), "Iteration time split into compute, exposed communication per group "
                          "and pipeline bubble.", image_format))
    sections = [Section(f"{prefix}-terms", f"{heading}: where the iteration goes", body)]
    if sim.stages is not None and len(sim.stages):
        sections.append(Section(f"{prefix}-stages", f"{heading}: per pipeline stage",
                                html_table(sim.stages, _columns_ok(sim.stages, STAGE_COLS))))
    layers = sim.layer_summary()
    if len(layers):
        show = layers if not layers["stage"].isna().all() else layers.drop(columns=["stage"])
        sections.append(Section(f"{prefix}-layers", f"{heading}: per layer",
                                figure_html(plots.sim_layers(sim), "Per layer, summed over its records: forward and "
                                            "backward compute, exposed comm and comm overlapped with compute.",
                                            image_format)
                                + html_table(show, _columns_ok(show, LAYER_COLS), max_rows=200)))
    if sim.collectives is not None and len(sim.collectives):
        sections.append(Section(f"{prefix}-collectives", f"{heading}: collectives",
                                html_table(sim.collectives, _columns_ok(sim.collectives, COLLECTIVE_COLS), max_rows=200)))
    return sections


# ---- the page ----------------------------------------------------------------------------------------

KIND_TITLES = {"log": "Replay log", "workload": "Workload", "sim": "Simulation"}


def build_report(path: Any, sim: Any = None, nominal: Mapping[str, float] | None = None,
                 image_format: str = "png", iteration: int | None = None, title: str | None = None) -> str:
    """The HTML page of ``path`` (a replay log, a workload CSV or a simulator result; the kind is read
    from the header; or a loaded :class:`~log_analyzer.log.Log`) and, with ``sim`` (a result file, a
    SimResult or a SimulationResult), the simulation beside it.  ``nominal``: link bandwidths in GB/s
    drawn as reference lines (one value also gives each size's busbw as a percentage of it);
    ``iteration``: the timeline's iteration.
    Raises :class:`~utils.errors.UserError` subclasses for bad inputs."""
    from log_analyzer.inputs import load_input

    loaded = load_input(path)
    page = Page(title or f"{KIND_TITLES[loaded.kind]} report: {os.path.basename(loaded.path)}")
    page.inputs.append((KIND_TITLES[loaded.kind], loaded.path))
    if loaded.kind == "log":
        if loaded.data.detail_path:
            page.inputs.append(("Detail", loaded.data.detail_path))
        if iteration is not None and not (loaded.data.items["iteration"] == iteration).any():
            from utils.errors import ConfigError

            last = int(loaded.data.iterations["iteration"].max()) if len(loaded.data.iterations) else 0
            raise ConfigError(f"--iteration {iteration}: the log has iterations 0 to {last}")
        page.sections += log_sections(loaded.data, nominal, image_format, iteration)
    elif loaded.kind == "workload":
        page.sections += workload_sections(loaded.data, image_format)
    else:
        page.sections += sim_sections(loaded.data, image_format)
    if nominal:
        page.inputs.append(("Nominal bandwidth", ", ".join(f"{k} {v:,.4g} GB/s" for k, v in nominal.items())))
    if sim is not None:
        from log_analyzer.plots import as_sim

        sim_result = as_sim(sim)
        page.inputs.append(("Simulation", sim_result.files[0] if sim_result.files else sim_result.source))
        page.sections += sim_sections(sim_result, image_format)
    return page.html()


def write_report(text: str, path: str | os.PathLike, inputs: Mapping[str, Any] | None = None) -> str:
    """Write the page atomically (no partial file on failure); returns the path.  The path is checked by
    :func:`utils.io.guard_output` first: not a symbolic link, not a folder, none of ``inputs`` (flag ->
    path(s) read)."""
    from utils.io import atomic_write, guard_output

    guard_output(path, inputs)
    with atomic_write(path) as handle:
        handle.write(text)
    return os.fspath(path)

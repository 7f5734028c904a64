"""Two replay logs side by side: what changed after a network or configuration change.

:func:`compare_logs` joins the per (type, group, size) summaries of the measured iterations of two
logs (:func:`~log_analyzer.summary.comm_summary`) and gives each side's count, mean time (ms) and mean
bus bandwidth (GB/s = 1e9 B/s) with the change from A to B in percent (``(B - A) / A * 100``: a
negative time change and a positive busbw change are improvements).  Rows present in one log only
say so in ``status``.  :func:`compare_iterations` does the same for the iteration-time statistics.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from log_analyzer.summary import comm_summary, iteration_stats
from utils.units import format_size
from utils.workload import CommType

KEY = ["comm_type", "comm_group", "msg_size"]
COMPARE_COLUMNS = [
    *KEY, "count_a", "count_b", "time_mean_ms_a", "time_mean_ms_b", "time_change_pct", "busbw_mean_gbps_a",
    "busbw_mean_gbps_b", "busbw_change_pct", "status",
]
"""Columns of :func:`compare_logs` (times ms, bandwidths GB/s, changes percent of A)."""
ITERATION_STATS = ("mean_ms", "min_ms", "max_ms", "p90_ms", "std_ms")


def change_pct(a: float, b: float) -> float:
    """``(b - a) / a * 100``; NaN when either side is missing or ``a`` is 0."""
    if a is None or b is None or pd.isna(a) or pd.isna(b) or a == 0:
        return math.nan
    return (float(b) - float(a)) / float(a) * 100.0


def _summary(log: Any) -> pd.DataFrame:
    items = log.measured if len(log.measured) else log.items
    table = comm_summary(items)
    table["comm_group"] = table["comm_group"].fillna("none")
    return table[[*KEY, "count", "time_mean_ms", "busbw_mean_gbps"]]


def compare_logs(a: Any, b: Any) -> pd.DataFrame:
    """Per (comm_type, comm_group, msg_size) of either log (measured iterations; every iteration when a
    log has none after init): :data:`COMPARE_COLUMNS`.  ``a`` and ``b`` are Logs or paths."""
    from log_analyzer.plots import as_log

    left, right = _summary(as_log(a)), _summary(as_log(b))
    table = left.merge(right, on=KEY, how="outer", suffixes=("_a", "_b"), indicator=True)
    table["status"] = table.pop("_merge").map({"both": "both", "left_only": "only in A", "right_only": "only in B"})
    table["status"] = table["status"].astype(str)
    for column in ("count_a", "count_b"):
        table[column] = table[column].astype("Int64")
    table["time_change_pct"] = [change_pct(x, y) for x, y in zip(table["time_mean_ms_a"], table["time_mean_ms_b"])]
    table["busbw_change_pct"] = [change_pct(x, y) for x, y in zip(table["busbw_mean_gbps_a"], table["busbw_mean_gbps_b"])]
    order = {t.value: i for i, t in enumerate(CommType)}  # the summaries' order: all_reduce, all_gather, ...
    table = table.sort_values(KEY, kind="stable", key=lambda c: c.map(order) if c.name == "comm_type" else c)
    return table.reset_index(drop=True)[COMPARE_COLUMNS]


def compare_iterations(a: Any, b: Any) -> pd.DataFrame:
    """The measured iterations' time statistics of both logs (ms) and the change in percent: one row
    per statistic (``mean_ms``, ``min_ms``, ``max_ms``, ``p90_ms``, ``std_ms``) and ``count``."""
    from log_analyzer.plots import as_log

    sa, sb = iteration_stats(as_log(a)), iteration_stats(as_log(b))
    rows = [{"statistic": "count", "a": float(sa.count), "b": float(sb.count), "change_pct": change_pct(sa.count, sb.count)}]
    for name in ITERATION_STATS:
        va, vb = getattr(sa, name), getattr(sb, name)
        rows.append({"statistic": name, "a": va, "b": vb, "change_pct": change_pct(va, vb)})
    return pd.DataFrame(rows, columns=["statistic", "a", "b", "change_pct"])


def _n(value: Any, digits: int = 3) -> str:
    return "-" if value is None or pd.isna(value) else f"{float(value):,.{digits}f}"


def _pct(value: Any) -> str:
    return "-" if value is None or pd.isna(value) else f"{float(value):+.1f}%"


def format_compare(table: pd.DataFrame, iterations: pd.DataFrame | None = None,
                   labels: tuple[str, str] = ("A", "B")) -> str:
    """The comparison as console text: the iteration statistics, then one line per (type, group, size)."""
    a, b = labels
    out = []
    if iterations is not None:
        out.append(f"Iteration time (ms), measured iterations: {a} -> {b}")
        for row in iterations.itertuples(index=False):
            digits = 0 if row.statistic == "count" else 3
            out.append(f"  {row.statistic:<8} {_n(row.a, digits):>12} {_n(row.b, digits):>12} {_pct(row.change_pct):>9}")
        out.append("")
    header = (f"{'comm_type':<15} {'comm_group':<16} {'msg_size':>10} {'count ' + a:>9} {'count ' + b:>9} "
              f"{'time ms ' + a:>12} {'time ms ' + b:>12} {'change':>8} {'busbw ' + a:>11} {'busbw ' + b:>11} "
              f"{'change':>8}  status")
    out += [header, "-" * len(header)]
    for row in table.itertuples(index=False):
        count_a = "-" if pd.isna(row.count_a) else str(int(row.count_a))
        count_b = "-" if pd.isna(row.count_b) else str(int(row.count_b))
        out.append(f"{row.comm_type:<15} {row.comm_group:<16} {format_size(row.msg_size):>10} {count_a:>9} {count_b:>9} "
                   f"{_n(row.time_mean_ms_a):>12} {_n(row.time_mean_ms_b):>12} {_pct(row.time_change_pct):>8} "
                   f"{_n(row.busbw_mean_gbps_a):>11} {_n(row.busbw_mean_gbps_b):>11} {_pct(row.busbw_change_pct):>8}  "
                   f"{row.status}")
    out.append(f"busbw in GB/s (1e9 B/s); change = ({b} - {a}) / {a}")
    return "\n".join(out)


def compare_csv_text(table: pd.DataFrame) -> str:
    """The comparison table as CSV text (every column of :data:`COMPARE_COLUMNS`)."""
    return table.to_csv(index=False, lineterminator="\n")


def compare_html(a: Any, b: Any, labels: tuple[str, str] = ("A", "B"), nominal: dict[str, float] | None = None,
                 image_format: str = "png") -> str:
    """A self-contained HTML page of the comparison of two logs (Logs or paths): iteration statistics,
    the A/B bandwidth plot and the per (type, group, size) table."""
    from log_analyzer import plots
    from log_analyzer.report import Col, Page, Section, figure_html, html_table

    log_a, log_b = plots.as_log(a), plots.as_log(b)
    table = compare_logs(log_a, log_b)
    table["msg_size_b"] = table["msg_size"]
    iterations = compare_iterations(log_a, log_b)
    a, b = labels
    page = Page(f"Comparison: {a} vs {b}", inputs=[(a, log_a.path), (b, log_b.path)])
    iteration_cols = [Col("statistic", "statistic (ms)", "text"), Col("a", a), Col("b", b),
                      Col("change_pct", f"change {a} → {b} (%)", "pct")]
    cols = [Col("comm_type", "type", "text"), Col("comm_group", "group", "text"), Col("msg_size", "size", "size"),
            Col("msg_size_b", "size (B)", "int"), Col("count_a", f"count {a}", "int"), Col("count_b", f"count {b}", "int"),
            Col("time_mean_ms_a", f"time mean {a} (ms)"), Col("time_mean_ms_b", f"time mean {b} (ms)"),
            Col("time_change_pct", "time change (%)", "pct"), Col("busbw_mean_gbps_a", f"busbw mean {a} (GB/s)"),
            Col("busbw_mean_gbps_b", f"busbw mean {b} (GB/s)"), Col("busbw_change_pct", "busbw change (%)", "pct"),
            Col("status", "in", "text")]
    page.sections = [
        Section("iterations", "Iteration time", html_table(iterations, iteration_cols)
                + f'<p class="note">Measured iterations (init excluded); change = ({b} - {a}) / {a}.</p>'),
        Section("bandwidth", "Bus bandwidth by message size",
                figure_html(plots.compare_busbw(log_a, log_b, labels, nominal),
                            f"Mean bus bandwidth per size: {a} dashed, {b} solid.", image_format)
                + html_table(table, cols)
                + '<p class="note">A negative time change and a positive busbw change are improvements.</p>'),
    ]
    return page.html()

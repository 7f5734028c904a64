"""Plots of replay logs, workloads and simulation results (matplotlib, rendered off-screen).

Every function returns a :class:`matplotlib.figure.Figure` built without pyplot (no display, no global
figure list to leak into; a notebook shows it when it is a cell's value) and takes a path or the
loaded object (:class:`~log_analyzer.log.Log`, :class:`~utils.workload.Workload`,
:class:`~log_analyzer.sim_files.SimResult` or ``simulator``'s ``SimulationResult``).
:func:`render` gives PNG or SVG bytes (Agg draws the PNG) and :func:`save` writes a file atomically.

- :func:`busbw_vs_size`: bus bandwidth (GB/s = 1e9 B/s) against message size per collective type and
  group, log-scale size axis, nominal link bandwidths as reference lines;
- :func:`iteration_times`: wall time per iteration with its mean, spread and the slowest rank's,
  and the logged communication and compute time of each;
- :func:`timeline`: one iteration as rank 0 ran it, operation after operation, per group;
- :func:`time_share`: logged time by collective type and by group;
- :func:`workload_sizes`: what a workload sends, by type and group and by message size;
- :func:`sim_breakdown`, :func:`sim_layers`: where a simulated iteration's time goes, per stage and
  per layer;
- :func:`compare_busbw`: two logs' bus bandwidth against size, on one plot.

matplotlib is imported when a plot is drawn, so ``import log_analyzer`` stays light.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from simulator.plot import COLORS as SIMULATOR_COLORS
from simulator.plot import LABELS as SIMULATOR_LABELS
from simulator.plot import breakdown_chart
from utils.figures import WIDTH_IN, render
from utils.figures import new_figure as _figure
from utils.units import format_size

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from log_analyzer.log import Log
    from log_analyzer.sim_files import SimResult

TYPE_COLORS = {
    "all_reduce": "#4c72b0", "all_gather": "#dd8452", "reduce_scatter": "#55a868", "all_to_all": "#c44e52",
    "broadcast": "#8172b3", "reduce": "#937860", "isend": "#da8bc3", "irecv": "#8c8c8c", "barrier": "#ccb974",
    "computation": "#64b5cd",
}
"""One color per operation type, the same in every plot."""
GROUP_COLORS = {
    "tp_group": "#dd8452", "dp_group": "#55a868", "pp_group": "#8172b3", "ep_group": "#c44e52", "ep_dp_group": "#64b5cd",
    "ep_tp_group": "#da8bc3", "embedding_group": "#937860", "all_nodes": "#ccb974", "mp_group": "#4c72b0",
    "computation": TYPE_COLORS["computation"],
}
"""One color per communication group (the group share plot)."""
SIM_COLORS, SIM_LABELS = SIMULATOR_COLORS, SIMULATOR_LABELS
"""The simulator's breakdown colors and labels (one definition, in ``simulator/plot.py``)."""
_MARKERS = "osD^vP*Xh<>"


def save(fig: Figure, path: str | os.PathLike, dpi: int = 110) -> str:
    """Write the figure to ``path`` (``.png`` or ``.svg``) atomically, refused (:func:`utils.io.guard_output`)
    where a symbolic link or a folder is; returns the path."""
    from utils.io import atomic_write, guard_output

    path = guard_output(path)
    fmt = os.path.splitext(path)[1].lstrip(".").lower()
    data = render(fig, fmt, dpi)
    with atomic_write(path, "wb") as handle:
        handle.write(data)
    return path


# ---- inputs ----------------------------------------------------------------------------------------

def as_log(log: Log | str | os.PathLike) -> Log:
    """A :class:`Log` from a path or a Log."""
    if isinstance(log, (str, os.PathLike)):
        from log_analyzer.log import Log

        return Log.load(log)
    return log


def as_sim(sim: Any) -> SimResult:
    """A :class:`SimResult` from a path, a SimResult or a ``SimulationResult``."""
    from log_analyzer.sim_files import SimResult

    if isinstance(sim, SimResult):
        return sim
    if isinstance(sim, (str, os.PathLike)):
        return SimResult.load(sim)
    return SimResult.from_result(sim)


def comm_items(log: Log) -> pd.DataFrame:
    """The communication rows of the measured iterations (every iteration when none after init)."""
    items = log.measured if len(log.measured) else log.items
    return items[items["comm_type"] != "computation"]


# ---- axes helpers ------------------------------------------------------------------------------------

def _size_axis(ax: Axes, sizes: np.ndarray) -> None:
    """Log2 message-size axis with ticks at powers of two labelled 4 KiB, 1 MiB, ..."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_xscale("log", base=2)
    positive = sizes[sizes > 0]
    if positive.size:
        low, high = math.floor(math.log2(positive.min())), math.ceil(math.log2(positive.max()))
        if high == low:
            low, high = low - 1, high + 1
        step = max(1, math.ceil((high - low) / 12))
        ax.xaxis.set_major_locator(FixedLocator([2.0 ** e for e in range(low, high + 1, step)]))
        ax.set_xlim(2.0 ** (low - 0.3), 2.0 ** (high + 0.3))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: format_size(value)))
    ax.tick_params(axis="x", labelrotation=30)


def _binary_unit(max_bytes: float) -> tuple[float, str]:
    """The largest binary unit not above ``max_bytes``: (bytes per unit, name)."""
    for power, name in ((4, "TiB"), (3, "GiB"), (2, "MiB"), (1, "KiB")):
        if max_bytes >= 1024 ** power:
            return float(1024 ** power), name
    return 1.0, "B"


def _note(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666666")
    ax.set_xticks([])
    ax.set_yticks([])


def _series_label(ctype: str, group: Any, gsize: Any) -> str:
    group = "-" if group is None or pd.isna(group) else str(group)
    size = "" if gsize is None or pd.isna(gsize) else f" (n={int(gsize)})"
    return f"{ctype} · {group}{size}"


def _busbw_series(items: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame, pd.DataFrame]]:
    """Per (type, group, group size): label, type, the operations (size > 0, busbw known) and the mean
    busbw per size."""
    bw = items["busbw_gbps"].to_numpy(dtype=float)
    # operations without a finite, non-negative bandwidth (AICB writes inf for 0 ms) cannot be drawn
    keep = (items["msg_size"].fillna(0) > 0).to_numpy() & np.isfinite(bw) & (bw >= 0)
    usable = items[["comm_type", "comm_group", "comm_group_size", "msg_size", "busbw_gbps"]][keep]
    out = []
    for (ctype, group, gsize), part in usable.groupby(["comm_type", "comm_group", "comm_group_size"], observed=True,
                                                      dropna=False, sort=True):
        means = part.groupby("msg_size", sort=True)["busbw_gbps"].mean().reset_index()
        out.append((_series_label(str(ctype), group, gsize), str(ctype), part, means))
    return out


MAX_POINTS = 20_000
"""Operations drawn as points on the bandwidth plot at most (an even sample beyond; the means use them all)."""


def _sample(part: pd.DataFrame, share: float) -> pd.DataFrame:
    """Every k-th row of ``part`` so that about ``share`` of :data:`MAX_POINTS` remain (all when fewer)."""
    limit = max(200, int(MAX_POINTS * share))
    return part if len(part) <= limit else part.iloc[:: math.ceil(len(part) / limit)]


def _nominal_lines(ax: Axes, nominal: Mapping[str, float] | float | None) -> list[float]:
    if nominal is None:
        return []
    lines = {"nominal": float(nominal)} if isinstance(nominal, (int, float)) else dict(nominal)
    for i, (label, gbps) in enumerate(sorted(lines.items(), key=lambda kv: -kv[1])):
        ax.axhline(gbps, color="#333333", linestyle=("--", ":", "-.")[i % 3], linewidth=1.2,
                   label=f"{label}: {gbps:,.4g} GB/s")
    return list(lines.values())


def _log_y(values: list[float] | np.ndarray) -> bool:
    """Whether the values (data and reference lines) span more than two decades: a log y axis."""
    values = np.asarray(values, dtype=float)
    positive = values[np.isfinite(values) & (values > 0)]
    return bool(positive.size and positive.max() / positive.min() > 100)


def _y_limits(ax: Axes, values: list[float] | np.ndarray, log: bool) -> None:
    """A log axis spanning every positive value with a margin (nothing drawn falls off it), else 0 to the top."""
    values = np.asarray(values, dtype=float)
    if log:
        positive = values[np.isfinite(values) & (values > 0)]
        ax.set_yscale("log")
        ax.set_ylim(positive.min() / 1.6, positive.max() * 1.6)
    else:
        finite = values[np.isfinite(values)]
        ax.set_ylim(0, max(float(finite.max()) * 1.08, 1e-12) if finite.size else 1)


def _on_axis(values: pd.Series | np.ndarray, log: bool) -> np.ndarray:
    """Values as drawn: on a log axis a bandwidth of 0 has no place (NaN: not drawn, the line breaks)."""
    values = np.asarray(values, dtype=float)
    return np.where(values > 0, values, np.nan) if log else values


# ---- logs --------------------------------------------------------------------------------------------

def busbw_vs_size(log: Log | str | os.PathLike, nominal: Mapping[str, float] | float | None = None,
                  title: str | None = None) -> Figure:
    """Bus bandwidth (GB/s) of every operation (faint points) and its mean per message size (lines),
    one series per (collective type, group); log2 size axis; ``nominal`` link bandwidths in GB/s
    (a number, or ``{"NVLink": 360, "NIC": 50}``) as horizontal reference lines.  Operations of
    size 0 (barriers) have no bandwidth and are left out."""
    log = as_log(log)
    series = _busbw_series(comm_items(log))
    fig, ax = _figure(5.2)
    if not series:
        _note(ax, "no timed communication with a size > 0 in this log")
        return fig
    total = sum(len(ops) for _, _, ops, _ in series)
    values = np.concatenate([ops["busbw_gbps"].to_numpy(dtype=float) for _, _, ops, _ in series]
                            + [np.asarray(list(_nominal_values(nominal)), dtype=float)])
    log_axis = _log_y(values)
    zero = int((values[: total] <= 0).sum()) if log_axis else 0
    sampled = False
    for i, (label, ctype, ops, means) in enumerate(series):
        color = TYPE_COLORS.get(ctype, f"C{i % 10}")
        marker = _MARKERS[i % len(_MARKERS)]
        shown = _sample(ops, len(ops) / total)
        sampled |= len(shown) < len(ops)
        ax.scatter(shown["msg_size"].astype(float), _on_axis(shown["busbw_gbps"], log_axis), s=10, alpha=0.25,
                   color=color, marker=marker, linewidths=0)
        ax.plot(means["msg_size"].astype(float), _on_axis(means["busbw_gbps"], log_axis), color=color, marker=marker,
                linewidth=1.6, markersize=6, label=label)
    _nominal_lines(ax, nominal)
    sizes = np.concatenate([s[2]["msg_size"].to_numpy(dtype=float) for s in series])
    _size_axis(ax, sizes)
    _y_limits(ax, values, log_axis)
    ax.set_xlabel("message size")
    ax.set_ylabel("bus bandwidth (GB/s)" + (f"; {zero:,} operations at 0 not drawn (log axis)" if zero else ""))
    ax.grid(True, which="major", alpha=0.3)
    points = f"a sample of {MAX_POINTS:,} of {total:,} operations" if sampled else "operations"
    ax.set_title(title or f"Bus bandwidth by message size (points: {points}; lines: mean per size)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return fig


def _nominal_values(nominal: Mapping[str, float] | float | None) -> list[float]:
    if nominal is None:
        return []
    return [float(nominal)] if isinstance(nominal, (int, float)) else [float(v) for v in nominal.values()]


def iteration_times(log: Log | str | os.PathLike, title: str | None = None) -> Figure:
    """Top: each measured iteration's wall time (rank 0) in ms, the slowest rank's when the detail file
    is there, the mean and a band of one standard deviation (the jitter).  Bottom: the logged
    communication and compute time of each iteration (a p2p batch counted once) and the rest of the
    wall time (not logged: launch gaps, Python).  A collective sweep's blocks are size steps, not
    iterations: they are labelled with their message size, without a mean or jitter band."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator

    from log_analyzer.summary import is_sweep, logged_time

    log = as_log(log)
    table = log.iterations
    measured = table[table["iteration"] >= 1] if (table["iteration"] >= 1).any() else table
    sweep = is_sweep(log.items)
    fig, (top, bottom) = _figure(6.4, rows=2, sharex=True)
    x = measured["iteration"].to_numpy(dtype=float)
    wall = measured["time_ms"].to_numpy(dtype=float)
    wall = np.where(np.isfinite(wall), wall, np.nan)  # an unreadable wall time counts as missing
    done = ~np.isnan(wall)
    drawn = [0.0]
    if done.any() and not sweep:
        mean, std = float(np.mean(wall[done])), float(np.std(wall[done]))
        top.axhspan(mean - std, mean + std, color="#4c72b0", alpha=0.12, label=f"mean ± std ({std:,.3g} ms, "
                                                                               f"{std / mean * 100 if mean else 0:.1f}%)")
        top.axhline(mean, color="#4c72b0", linestyle="--", linewidth=1, label=f"mean {mean:,.4g} ms")
        drawn.append(mean + std)
    if done.any():
        top.plot(x[done], wall[done], marker="o", color="#4c72b0", label="wall time, rank 0")
        drawn += wall[done].tolist()
    if "max_time_ms" in measured.columns and measured["max_time_ms"].notna().any():
        slowest = measured["max_time_ms"].to_numpy(dtype=float)
        top.plot(x, slowest, marker="^", color="#c44e52", linewidth=1, label="slowest rank")
        drawn += slowest[np.isfinite(slowest)].tolist()
    if not done.any():
        _note(top, "no iteration completed (no epoch_end row)")
    else:
        top.set_ylim(0, max(drawn) * 1.15 or 1.0)  # room above the highest point (one iteration included)
        top.legend(fontsize=8, loc="lower right", frameon=True)
    top.set_ylabel("time per size step (ms)" if sweep else "iteration time (ms)")
    top.grid(True, alpha=0.3)
    top.set_title(title or ("Time per size step of the collective sweep (one step per message size)" if sweep
                            else "Iteration time"))
    sums = measured[["iteration"]].merge(logged_time(log.items), on="iteration", how="left").fillna(0.0)
    comm = sums["comm_ms"].to_numpy(dtype=float)
    compute = sums["compute_ms"].to_numpy(dtype=float)
    rest = np.clip(np.nan_to_num(wall, nan=0.0) - comm - compute, 0.0, None)
    width = 0.6
    base = np.zeros(len(x))
    for values, color, label in ((comm, "#dd8452", "communication (logged)"),
                                 (compute, TYPE_COLORS["computation"], "computation (logged)"),
                                 (rest, "#d9d9d9", "not logged (gaps)")):
        if values.any():  # a log without computation rows gets no empty legend entry
            bottom.bar(x, values, width, bottom=base, color=color, label=label)
            base = base + values
    bottom.set_ylabel("time (ms)")
    bottom.grid(True, axis="y", alpha=0.3)
    if base.any():
        bottom.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    if len(x):  # whole iterations with room around the first and last (a single one too)
        bottom.set_xlim(x.min() - 0.6, x.max() + 0.6)
    if sweep:
        sizes = log.measured.groupby("iteration", sort=False)["msg_size"].first().to_dict()
        step = max(1, math.ceil(len(x) / 16))
        bottom.xaxis.set_major_locator(FixedLocator(x[::step]))
        bottom.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_size(float(sizes.get(int(round(v)), 0)))))
        bottom.tick_params(axis="x", labelrotation=30)
        bottom.set_xlabel("size step (message size)")
    else:
        bottom.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))  # one iteration: one tick, "1"
        bottom.set_xlabel("iteration")
    return fig


def default_iteration(log: Log) -> int:
    """The iteration :func:`timeline` draws by default: the last completed measured one (else the last)."""
    table = log.iterations
    done = table.dropna(subset=["time_ms"])
    measured = done[done["iteration"] >= 1]
    pick = measured if len(measured) else (done if len(done) else table)
    return int(pick["iteration"].iloc[-1]) if len(pick) else 0


def _timeline_slots(rows: pd.DataFrame, elapsed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start (ms), vertical offset and bar height of each row: back to back in log order, except that
    the rows of one p2p batch (detail CSV's ``batch``) start together and share their lane's height."""
    from log_analyzer.summary import p2p_batches

    batches = [None if np.isnan(b) else b for b in p2p_batches(rows)]  # the detail CSV's, or found in the log
    start = np.zeros(len(rows))
    member = np.zeros(len(rows))
    size = np.ones(len(rows))
    batch_start: dict[Any, float] = {}
    members: dict[Any, list[int]] = {}
    clock = 0.0
    for i, (batch, ms) in enumerate(zip(batches, elapsed)):
        if batch is not None and not pd.isna(batch):
            if batch in batch_start:
                start[i] = batch_start[batch]
                members[batch].append(i)
                continue
            batch_start[batch], members[batch] = clock, [i]
        start[i] = clock
        clock += ms
    for indexes in members.values():
        for j, i in enumerate(indexes):
            member[i], size[i] = j, len(indexes)
    height = 0.7 / size
    offset = -0.35 + (member + 0.5) * height
    return start, offset, height


def timeline(log: Log | str | os.PathLike, iteration: int | None = None, title: str | None = None) -> Figure:
    """One iteration as rank 0 logged it: its operations back to back in log order (rank 0 ran them
    one after another; the gaps between them are not logged; the rows of one p2p batch side by side),
    one lane for computation and one per communication group, colored by type; time in ms from the
    iteration's start.  ``iteration`` defaults to :func:`default_iteration`."""
    log = as_log(log)
    it = default_iteration(log) if iteration is None else int(iteration)
    rows = log.items[log.items["iteration"] == it]
    fig, ax = _figure(3.0)
    if not len(rows):
        _note(ax, f"iteration {it} has no operations in this log")
        return fig
    elapsed = rows["elapsed_ms"].fillna(0.0).to_numpy(dtype=float)
    start, offset, height = _timeline_slots(rows, elapsed)
    is_comp = (rows["comm_type"].astype(str) == "computation").to_numpy()
    groups = rows["comm_group"].astype("string").fillna("none").to_numpy()
    lane_names = (["computation"] if is_comp.any() else []) + sorted({g for g, c in zip(groups, is_comp) if not c})
    lane = {name: i for i, name in enumerate(lane_names)}
    fig.set_size_inches(WIDTH_IN, 1.4 + 0.45 * len(lane_names))
    types = rows["comm_type"].astype(str).to_numpy()
    lanes = np.array([lane["computation" if c else g] for g, c in zip(groups, is_comp)], dtype=float)
    for ctype in dict.fromkeys(types):
        mask = types == ctype
        ax.barh(lanes[mask] + offset[mask], elapsed[mask], left=start[mask], height=height[mask],
                color=TYPE_COLORS.get(ctype, "#999999"), label=ctype, linewidth=0)
    end = float((start + elapsed).max())
    ax.set_yticks(range(len(lane_names)), lane_names)
    ax.invert_yaxis()
    ax.set_xlabel("time from the iteration's start (ms; operations back to back, gaps not logged)")
    ax.set_xlim(0, max(end, 1e-9))
    ax.grid(True, axis="x", alpha=0.3)
    wall = log.iterations.loc[log.iterations["iteration"] == it, "time_ms"]
    wall_text = f"{float(wall.iloc[0]):,.4g} ms wall" if len(wall) and pd.notna(wall.iloc[0]) else "incomplete"
    ax.set_title(title or f"Iteration {it} on rank 0: {end:,.4g} ms logged, {wall_text}, {len(rows)} operations")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def _share_bars(ax: Axes, table: pd.DataFrame, key: str, value: str, unit: str, colors: Mapping[str, str] | None,
                title: str, scale: float = 1.0) -> None:
    if not len(table):
        _note(ax, "nothing to show")
        return
    labels = table[key].astype(str).tolist()
    values = table[value].to_numpy(dtype=float) * scale
    share = values / values.sum() * 100 if values.sum() > 0 else np.zeros_like(values)
    color = [(colors or {}).get(label, "#8c8c8c") for label in labels]
    ax.barh(labels, values, color=color)
    ax.invert_yaxis()
    for y, (v, s) in enumerate(zip(values, share)):
        ax.text(v, y, f"  {v:,.4g} ({s:.1f}%)", va="center", fontsize=8)
    ax.set_xlim(0, values.max() * 1.3 if values.max() > 0 else 1)
    ax.set_xlabel(unit)
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)


def time_share(log: Log | str | os.PathLike, title: str | None = None) -> Figure:
    """Logged time (ms, measured iterations) by operation type and by communication group, with each
    one's share of the logged total."""
    from log_analyzer.summary import time_share as share

    log = as_log(log)
    items = log.measured if len(log.measured) else log.items
    by_type, by_group = share(items, "comm_type"), share(items, "comm_group")
    height = 1.6 + 0.28 * (len(by_type) + len(by_group))
    fig, (top, bottom) = _figure(max(4.0, height), rows=2)
    _share_bars(top, by_type, "comm_type", "time_ms", "logged time (ms)", TYPE_COLORS, "by operation type")
    _share_bars(bottom, by_group, "comm_group", "time_ms", "logged time (ms)", GROUP_COLORS, "by communication group")
    fig.suptitle(title or "Where the logged time goes (measured iterations)")
    return fig


def compare_busbw(a: Log | str | os.PathLike, b: Log | str | os.PathLike, labels: tuple[str, str] = ("A", "B"),
                  nominal: Mapping[str, float] | float | None = None, title: str | None = None) -> Figure:
    """Mean bus bandwidth (GB/s) per message size of two logs: ``a`` dashed with hollow markers, ``b``
    solid, the same color per (type, group)."""
    series_a, series_b = _busbw_series(comm_items(as_log(a))), _busbw_series(comm_items(as_log(b)))
    fig, ax = _figure(5.2)
    names = list(dict.fromkeys([s[0] for s in series_a] + [s[0] for s in series_b]))
    if not names:
        _note(ax, "no timed communication with a size > 0 in either log")
        return fig
    values: list[float] = []
    sizes: list[np.ndarray] = []
    drawn: list[tuple] = []
    for i, name in enumerate(names):
        for series, label, style in ((series_a, labels[0], "--"), (series_b, labels[1], "-")):
            for sname, ctype, _, means in series:
                if sname != name:
                    continue
                color = TYPE_COLORS.get(ctype, f"C{i % 10}")
                drawn.append((style, color, i, label, name, means))
                values += [float(v) for v in means["busbw_gbps"]]
                sizes.append(means["msg_size"].to_numpy(dtype=float))
    values += _nominal_lines(ax, nominal)
    log_axis = _log_y(values)
    for style, color, i, label, name, means in drawn:
        ax.plot(means["msg_size"].astype(float), _on_axis(means["busbw_gbps"], log_axis), style, color=color,
                marker=_MARKERS[i % len(_MARKERS)], markerfacecolor="white" if style == "--" else color,
                label=f"{label}: {name}")
    _size_axis(ax, np.concatenate(sizes))
    _y_limits(ax, values, log_axis)
    ax.set_xlabel("message size")
    ax.set_ylabel("mean bus bandwidth (GB/s)")
    ax.grid(True, alpha=0.3)
    ax.set_title(title or f"Bus bandwidth: {labels[0]} (dashed) vs {labels[1]} (solid)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return fig


# ---- message sizes and shares by type (logs and workloads) -----------------------------------------

def _operations(source: Any) -> tuple[pd.DataFrame, str]:
    """The operations of a log (measured iterations) or a workload (per training iteration) per
    (``comm_type``, ``msg_size``): ``count`` and, for a log, ``time_ms`` (logged; a p2p batch's time once),
    computation rows included as type ``computation``; and what the counts are.  ``source``: a
    :class:`Log`, a workload (frame, Workload or WorkItems) or the path of either."""
    from log_analyzer.log import Log
    from log_analyzer.summary import batch_weights, workload_frame, workload_table

    if isinstance(source, (str, os.PathLike)):
        from log_analyzer.inputs import load_input

        source = load_input(source, ("log", "workload")).data
    if isinstance(source, Log):
        from log_analyzer.summary import ROWS_AT_ONCE

        items = source.measured if len(source.measured) else source.items
        codes, names = pd.factorize(items["comm_type"])
        weights = batch_weights(items)
        parts = []
        for start in range(0, len(items), ROWS_AT_ONCE):  # summed a slice at a time: no full-length frame
            part = slice(start, start + ROWS_AT_ONCE)
            frame = pd.DataFrame({"comm_type": codes[part],
                                  "msg_size": items["msg_size"].iloc[part].to_numpy(dtype=float, na_value=0.0),
                                  "time_ms": items["elapsed_ms"].iloc[part].to_numpy(dtype=float, na_value=np.nan)
                                  * weights[part], "count": 1.0})
            parts.append(frame.groupby(["comm_type", "msg_size"], sort=True).sum(min_count=0))
        if parts:
            table = pd.concat(parts).groupby(level=[0, 1], sort=True).sum().reset_index()
        else:
            table = pd.DataFrame({"comm_type": codes, "msg_size": np.zeros(0), "time_ms": np.zeros(0), "count": np.zeros(0)})
        table["comm_type"] = [str(names[c]) for c in table["comm_type"]]
        return table, "operations in the measured iterations"
    table = workload_table(workload_frame(source))
    table = table.groupby(["comm_type", "msg_size"], sort=True)["count_per_iteration"].sum().reset_index()
    return table.rename(columns={"count_per_iteration": "count"}), "operations per iteration"


def size_cdf(source: Any, title: str | None = None) -> Figure:
    """Message sizes as cumulative distributions, one line per collective type: the share of the
    operations (top) and of the bytes (bottom) at or below each size, log2 size axis.  ``source``: a
    log (measured iterations) or a workload (per iteration), loaded or as a path."""
    table, what = _operations(source)
    comm = table[(table["comm_type"] != "computation") & (table["msg_size"] > 0) & (table["count"] > 0)]
    fig, (top, bottom) = _figure(6.4, rows=2, sharex=True)
    fig.suptitle(title or "Message sizes: cumulative share of operations and of bytes, per type")
    if not len(comm):
        _note(top, "no communication with a size > 0")
        _note(bottom, "no communication with a size > 0")
        return fig
    order = {name: k for k, name in enumerate(TYPE_COLORS)}  # CommType's order, as in every plot
    types = sorted(comm["comm_type"].unique(), key=lambda t: order.get(str(t), len(order)))
    for i, ctype in enumerate(types):
        part = comm[comm["comm_type"] == ctype].sort_values("msg_size")
        sizes = part["msg_size"].to_numpy(dtype=float)
        counts = part["count"].to_numpy(dtype=float)
        color = TYPE_COLORS.get(str(ctype), f"C{i % 10}")
        for ax, weights in ((top, counts), (bottom, counts * sizes)):
            share = np.cumsum(weights) / weights.sum() * 100
            # a step at each size: from the share below it to the share at or below it
            ax.step(np.r_[sizes[0], sizes], np.r_[0.0, share], where="post", color=color, linewidth=1.6,
                    label=f"{ctype} ({counts.sum():,.4g})", marker=_MARKERS[i % len(_MARKERS)], markevery=list(
                        range(1, len(sizes) + 1)), markersize=4)
    _size_axis(bottom, comm["msg_size"].to_numpy(dtype=float))
    for ax, label in ((top, f"share of {what} (%)"), (bottom, "share of bytes (%)")):
        ax.set_ylim(0, 102)
        ax.set_ylabel(label, fontsize=9)
        ax.grid(True, alpha=0.3)
    bottom.set_xlabel("message size (at or below)")
    top.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title="type (operations)",
               title_fontsize=8)
    return fig


def type_share(source: Any, title: str | None = None) -> Figure:
    """The share of each operation type, as 100% bars: communication operations, message bytes and, for
    a log, logged time (computation included).  ``source``: a log or a workload, loaded or as a path."""
    table, what = _operations(source)
    comm = table[table["comm_type"] != "computation"]
    rows = [("operations", comm.groupby("comm_type", sort=False)["count"].sum()),
            ("bytes", (comm["count"] * comm["msg_size"]).groupby(comm["comm_type"], sort=False).sum())]
    if "time_ms" in table.columns:
        rows.append(("logged time", table.groupby("comm_type", sort=False)["time_ms"].sum()))
    fig, ax = _figure(1.3 + 0.55 * len(rows))
    order = [t for t in TYPE_COLORS if any(t in values.index for _, values in rows)]
    labels = []
    for y, (name, values) in enumerate(rows):
        total = float(values.sum())
        left = 0.0
        labels.append(f"{name}\n({_amount(name, total)})")
        if total <= 0:
            continue
        for ctype in order:
            share = float(values.get(ctype, 0.0)) / total * 100
            if share <= 0:
                continue
            ax.barh(y, share, left=left, color=TYPE_COLORS[ctype], edgecolor="white", linewidth=0.6,
                    label=ctype if y == 0 or ctype not in rows[0][1].index else None)
            if share >= 6:
                ax.text(left + share / 2, y, f"{share:.0f}%", ha="center", va="center", fontsize=8, color="white")
            left += share
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel(f"share (%); {what}")
    ax.set_title(title or "Share by operation type", fontsize=11)
    handles, names = ax.get_legend_handles_labels()
    unique = dict(zip(names, handles))
    ax.legend(unique.values(), unique.keys(), loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return fig


def _amount(name: str, total: float) -> str:
    if name == "bytes":
        return format_size(total)
    if name == "logged time":
        return f"{total:,.4g} ms"
    return f"{total:,.4g}"


# ---- workloads ---------------------------------------------------------------------------------------

def workload_sizes(workload: Any, title: str | None = None) -> Figure:
    """What a workload sends per training iteration: bytes by group, split by type (top), and the
    number of operations of each message size per type (bottom, log2 size axis)."""
    from log_analyzer.summary import workload_frame, workload_table

    table = workload_table(workload_frame(workload))
    fig, (top, bottom) = _figure(7.0, rows=2)
    fig.suptitle(title or "What the workload sends per iteration")
    if not len(table):
        _note(top, "no communication in this workload")
        _note(bottom, "no communication in this workload")
        return fig
    table = table.assign(comm_group=table["comm_group"].fillna("none"))
    pivot = table.pivot_table(index="comm_group", columns="comm_type", values="bytes_per_iteration", aggfunc="sum",
                              fill_value=0.0, observed=True)
    pivot = pivot.loc[pivot.sum(axis=1).sort_values(ascending=False).index]
    scale, unit = _binary_unit(float(pivot.to_numpy().sum(axis=1).max()))
    left = np.zeros(len(pivot))
    for ctype in pivot.columns:
        values = pivot[ctype].to_numpy(dtype=float) / scale
        top.barh(pivot.index.tolist(), values, left=left, color=TYPE_COLORS.get(str(ctype), "#999999"), label=str(ctype))
        left += values
    top.invert_yaxis()
    for y, total in enumerate(left):
        top.text(total, y, f"  {format_size(total * scale)}", va="center", fontsize=8)
    top.set_xlim(0, left.max() * 1.25 if left.max() > 0 else 1)
    top.set_xlabel(f"message bytes per iteration ({unit})")
    top.set_title("bytes by communication group and type", fontsize=10)
    top.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    top.grid(True, axis="x", alpha=0.3)
    counts = table[table["msg_size"] > 0].groupby(["comm_type", "msg_size"], observed=True)["count_per_iteration"].sum()
    for i, ctype in enumerate(dict.fromkeys(counts.index.get_level_values(0))):
        part = counts.loc[ctype]
        bottom.scatter(part.index.to_numpy(dtype=float), part.to_numpy(dtype=float), s=40,
                       color=TYPE_COLORS.get(str(ctype), f"C{i}"), marker=_MARKERS[i % len(_MARKERS)], label=str(ctype))
    sizes = table.loc[table["msg_size"] > 0, "msg_size"].to_numpy(dtype=float)
    if sizes.size:
        _size_axis(bottom, sizes)
        bottom.set_yscale("log")
    bottom.set_xlabel("message size")
    bottom.set_ylabel("operations per iteration")
    bottom.set_title("operations by message size", fontsize=10)
    bottom.grid(True, alpha=0.3)
    bottom.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


# ---- simulation results -----------------------------------------------------------------------------

def sim_breakdown(sim: Any, title: str | None = None) -> Figure:
    """Where a simulated iteration goes: one stacked bar per pipeline stage (topo) or one for the
    simulated rank (simai), compute + exposed TP / EP / DP / DP_EP / PP / other comm + bubble, in ms:
    :func:`simulator.plot.breakdown_chart`, the one drawing that ``python -m simulator --plot`` makes too."""
    return breakdown_chart(as_sim(sim), title)


def sim_layers(sim: Any, top: int = 20, title: str | None = None) -> Figure:
    """Per layer (summed over its records; per stage and layer for topo), stacked bars in ms: forward
    compute, backward compute, exposed comm and comm overlapped with compute; the ``top`` largest by
    compute + exposed comm, the rest summed in one bar."""
    sim = as_sim(sim)
    table = sim.layer_summary()
    fig, ax = _figure(2.0)
    if not len(table) or not (table[["fwd_compute_us", "bwd_compute_us", "comm_us"]].to_numpy().sum() > 0):
        _note(ax, "no per-layer times in these result files")
        return fig
    parts = ["fwd_compute_us", "bwd_compute_us", "exposed_comm_us", "overlapped_comm_us"]
    empty = int((table[parts].sum(axis=1) <= 0).sum())
    table = table[table[parts].sum(axis=1) > 0]
    labels = [(f"s{int(s)} · {name}" if pd.notna(s) else str(name)) + (f" ×{n}" if n > 1 else "")
              for s, name, n in zip(table["stage"], table["layer"], table["records"])]
    values = table[parts].to_numpy(dtype=float) / 1000.0
    if len(table) > top:
        rest = values[top:].sum(axis=0)
        values = np.vstack([values[:top], rest])
        labels = labels[:top] + [f"{len(table) - top} other layers"]
    fig.set_size_inches(WIDTH_IN, 1.5 + 0.3 * len(labels))
    colors = ("#4c72b0", "#8fa9d6", "#dd8452", "#f2c9a8")
    names = ("forward compute", "backward compute", "exposed comm", "overlapped comm")
    left = np.zeros(len(labels))
    for j in range(4):
        ax.barh(labels, values[:, j], left=left, color=colors[j], label=names[j], edgecolor="white", linewidth=0.3)
        left += values[:, j]
    for y, total in enumerate(left):
        ax.text(total, y, f"  {total:,.4g}", va="center", fontsize=7)
    ax.set_xlim(0, left.max() * 1.12 if len(left) and left.max() > 0 else 1)
    ax.invert_yaxis()
    ax.set_xlabel("time per iteration (ms; overlapped comm runs beside compute)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.tick_params(axis="y", labelsize=8)
    left_out = f" ({empty} layers without time left out)" if empty else ""
    ax.set_title(title or f"Per layer: compute and communication{left_out}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return fig

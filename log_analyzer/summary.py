"""Summaries of a replay log: per iteration, per (type, group, size), and the collective sweep table.

The replay prints these at the end of a run (computed from the files it has just written, so a
notebook that loads the same files gets the same numbers).  Conventions: times in ms (the sweep
table in us, as nccl-tests prints), bandwidths in GB/s = 10^9 B/s (docs/formats.md section 1); ``std`` is
the population standard deviation (ddof=0, as AICB's numpy.std); ``p90`` numpy's linear-interpolated
90th percentile.  No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd

from utils.units import format_size


class HasIterations(Protocol):
    """What :func:`iteration_stats` reads of a :class:`~log_analyzer.log.Log` (which uses this module, so
    the class is not imported here): its per-iteration table."""

    iterations: pd.DataFrame


@dataclass(frozen=True)
class IterationStats:
    """Wall time of the measured iterations (ms) and of the init block (``init_ms``, None if unknown)."""

    count: int
    mean_ms: float
    max_ms: float
    min_ms: float
    p90_ms: float
    std_ms: float
    init_ms: float | None = None
    slowest_rank_max_ms: float | None = None


def iteration_stats(log_or_times: HasIterations | pd.Series | list[float], init_ms: float | None = None) -> IterationStats:
    """Statistics of the measured iteration times: a :class:`Log` (iterations >= 1; init from
    iteration 0), or a plain sequence of times in ms."""
    slowest = None
    if hasattr(log_or_times, "iterations"):
        table = log_or_times.iterations
        done = table.dropna(subset=["time_ms"])
        init = done[done["iteration"] == 0]["time_ms"]
        init_ms = float(init.iloc[0]) if len(init) else None
        measured = done[done["iteration"] >= 1]
        times = measured["time_ms"].to_numpy(dtype=float)
        if "max_time_ms" in measured.columns and measured["max_time_ms"].notna().any():
            slowest = float(measured["max_time_ms"].max())
    else:
        times = np.asarray(list(log_or_times), dtype=float)
    if times.size == 0:
        nan = float("nan")
        return IterationStats(0, nan, nan, nan, nan, nan, init_ms, slowest)
    return IterationStats(
        count=int(times.size), mean_ms=float(times.mean()), max_ms=float(times.max()), min_ms=float(times.min()),
        p90_ms=float(np.percentile(times, 90)), std_ms=float(times.std()), init_ms=init_ms,
        slowest_rank_max_ms=slowest,
    )


SUMMARY_COLUMNS = ["comm_type", "comm_group", "msg_size", "count", "time_mean_ms", "time_std_ms", "busbw_mean_gbps",
                   "busbw_std_gbps", "max_time_ms", "slowest_rank", "straggler_rank", "emulated", "time_total_ms"]


def comm_summary(items: pd.DataFrame) -> pd.DataFrame:
    """Per (comm_type, comm_group, msg_size): count, time mean and std (ms), busbw mean and std (GB/s),
    the longest time any rank took (``max_time_ms``, from the detail CSV, else rank 0's), the rank
    that was slowest most often (``slowest_rank``) and the rank the others waited for most often
    (``straggler_rank``: the shortest time, it arrived last); the ranks are NA without the detail
    CSV; ``time_total_ms``: the logged time of the rows, a p2p batch's time shared by its rows
    (:func:`batch_weights`, so that the totals add up to the logged time).  Computation rows are left out."""
    needed = [c for c in ("comm_type", "comm_group", "msg_size", "elapsed_ms", "busbw_gbps", "slowest_rank",
                          "max_elapsed_ms", "last_arrival_rank", "emulated") if c in items.columns]
    is_comm = (items["comm_type"] != "computation").to_numpy()
    comm = items[needed][is_comm]  # the columns used, then the rows: one small copy
    comm = comm.assign(own_ms=comm["elapsed_ms"].to_numpy(dtype=float) * batch_weights(items)[is_comm])
    rows = []
    for (ctype, group, size), part in comm.groupby(["comm_type", "comm_group", "msg_size"], observed=True, dropna=False,
                                                   sort=True):
        times = part["elapsed_ms"].to_numpy(dtype=float)
        busbw = part["busbw_gbps"].to_numpy(dtype=float)
        slowest = straggler = pd.NA
        # (a workload read as a log has no times: nanmax of them all NaN warns)
        max_time = float(np.nanmax(times)) if np.isfinite(times).any() else float("nan")
        if "slowest_rank" in part.columns and part["slowest_rank"].notna().any():
            slowest = int(part["slowest_rank"].dropna().mode().iloc[0])
            max_time = float(part["max_elapsed_ms"].max())
        if "last_arrival_rank" in part.columns and part["last_arrival_rank"].notna().any():
            straggler = int(part["last_arrival_rank"].dropna().mode().iloc[0])
        emulated = bool(part["emulated"].fillna(False).any()) if "emulated" in part.columns else False
        rows.append({
            "comm_type": str(ctype), "comm_group": None if pd.isna(group) else str(group), "msg_size": int(size),
            "count": int(len(part)), "time_mean_ms": float(np.mean(times)), "time_std_ms": float(np.std(times)),
            "busbw_mean_gbps": float(np.nanmean(busbw)) if np.isfinite(busbw).any() else float("nan"),
            "busbw_std_gbps": float(np.nanstd(busbw)) if np.isfinite(busbw).any() else float("nan"),
            "max_time_ms": max_time, "slowest_rank": slowest, "straggler_rank": straggler, "emulated": emulated,
            "time_total_ms": float(np.nansum(part["own_ms"].to_numpy(dtype=float))),
        })
    frame = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    for column in ("slowest_rank", "straggler_rank"):
        frame[column] = frame[column].astype("Int64")
    for column in ("count", "msg_size"):
        frame[column] = frame[column].astype("int64")
    for column in ("time_mean_ms", "time_std_ms", "busbw_mean_gbps", "busbw_std_gbps", "max_time_ms", "time_total_ms"):
        frame[column] = frame[column].astype("float64")  # also when there is no row
    return frame


def is_sweep(items: pd.DataFrame) -> bool:
    """Whether a log is a collective sweep (``--frame collective_test``): its measured blocks are one
    collective of one message size each, sizes differing between blocks (or its stage is the sweep's
    ``test_step``), and no computation.  A sweep's blocks are size steps, not training iterations: their
    times differ because the sizes do (no jitter to speak of)."""
    iteration = items["iteration"].to_numpy()
    measured = iteration >= 1
    if not measured.any() or (items["comm_type"] == "computation").any():
        return False
    # three numbers per row, not a copy of the table
    blocks = pd.DataFrame({"iteration": iteration[measured], "type": pd.factorize(items["comm_type"])[0][measured],
                           "size": items["msg_size"].to_numpy(dtype=float, na_value=-1.0)[measured]})
    per_block = blocks.groupby("iteration", sort=False).agg(types=("type", "nunique"), sizes=("size", "nunique"),
                                                           size=("size", "first"))
    if not ((per_block["types"] == 1) & (per_block["sizes"] == 1)).all():
        return False
    stages = set(pd.unique(items["stage"].to_numpy()[measured]).astype(str))
    return per_block["size"].nunique() > 1 or stages == {"test_step"}


SWEEP_COLUMNS = ["msg_size", "count", "time_mean_us", "algbw_gbps", "busbw_gbps", "max_time_us", "slowest_rank"]


def sweep_summary(items: pd.DataFrame) -> pd.DataFrame:
    """The collective sweep table (``--frame collective_test``), one row per message size: mean time
    (us, rank 0), algbw and busbw of the mean time (GB/s, as nccl-tests reports them), and the
    slowest rank's longest time (us) when the detail CSV is there."""
    comm = items[(items["comm_type"] != "computation") & (items["iteration"] >= 1)]
    rows = []
    for size, part in comm.groupby("msg_size", sort=True):
        mean_ms = float(part["elapsed_ms"].mean())
        # bandwidth of the mean time, not the mean of bandwidths (nccl-tests' definition)
        ratio = float((part["busbw_gbps"] / part["algbw_gbps"]).dropna().iloc[0]) if part["algbw_gbps"].gt(0).any() else 0.0
        algbw = int(size) / (mean_ms * 1e-3) / 1e9 if mean_ms > 0 else float("nan")
        slowest = pd.NA
        max_us = float(part["elapsed_ms"].max()) * 1e3
        if "slowest_rank" in part.columns and part["slowest_rank"].notna().any():
            slowest = int(part["slowest_rank"].dropna().mode().iloc[0])
            max_us = float(part["max_elapsed_ms"].max()) * 1e3
        rows.append({"msg_size": int(size), "count": int(len(part)), "time_mean_us": mean_ms * 1e3, "algbw_gbps": algbw,
                     "busbw_gbps": algbw * ratio, "max_time_us": max_us, "slowest_rank": slowest})
    frame = pd.DataFrame(rows, columns=SWEEP_COLUMNS)
    frame["slowest_rank"] = frame["slowest_rank"].astype("Int64")
    return frame


# ---- text tables for the console ------------------------------------------------------------

def _num(value: float, digits: int = 3) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.{digits}f}"


def format_iteration_stats(stats: IterationStats) -> str:
    """AICB's iteration-time table (ms)."""
    header = f"{'init (ms)':>12} {'iterations':>10} {'mean (ms)':>12} {'max (ms)':>12} {'min (ms)':>12} {'p90 (ms)':>12} " \
             f"{'std (ms)':>12} {'slowest rank max (ms)':>22}"
    line = "-" * len(header)
    values = f"{_num(stats.init_ms):>12} {stats.count:>10} {_num(stats.mean_ms):>12} {_num(stats.max_ms):>12} " \
             f"{_num(stats.min_ms):>12} {_num(stats.p90_ms):>12} {_num(stats.std_ms):>12} " \
             f"{_num(stats.slowest_rank_max_ms):>22}"
    return "\n".join([line, header, line, values])


def format_comm_summary(summary: pd.DataFrame) -> str:
    """One line per (type, group, size): count, time mean ± std (ms), busbw mean ± std (GB/s), the
    longest time of any rank and the slowest and straggling ranks."""
    header = (f"{'comm_type':<15} {'comm_group':<16} {'msg_size':>10} {'count':>6} {'time ms (mean ± std)':>22} "
              f"{'busbw GB/s (mean ± std)':>24} {'max ms':>9} {'slowest rank':>12} {'straggler':>9}")
    line = "-" * len(header)
    out = [line, header, line]
    for row in summary.itertuples(index=False):
        tag = "*" if row.emulated else ""
        slow = "-" if pd.isna(row.slowest_rank) else str(int(row.slowest_rank))
        late = "-" if pd.isna(row.straggler_rank) else str(int(row.straggler_rank))
        out.append(f"{row.comm_type + tag:<15} {row.comm_group or '-':<16} {format_size(row.msg_size):>10} "
                   f"{row.count:>6} {_num(row.time_mean_ms) + ' ± ' + _num(row.time_std_ms):>22} "
                   f"{_num(row.busbw_mean_gbps) + ' ± ' + _num(row.busbw_std_gbps):>24} {_num(row.max_time_ms):>9} "
                   f"{slow:>12} {late:>9}")
    out.append("slowest rank: the longest time, usually the rank that arrived first and waited; straggler: the "
               "shortest time, the rank the others waited for (most often over the rows)")
    if summary["emulated"].any():
        out.append("* emulated: the backend lacks this collective; it ran as an equivalent built from supported ones")
    return "\n".join(out)


def format_sweep(sweep: pd.DataFrame, comm_type: str, group_size: int) -> str:
    """The nccl-tests style table of a collective sweep."""
    header = (f"{'size (B)':>12} {'size':>10} {'count':>6} {'time (us)':>12} {'algbw (GB/s)':>13} "
              f"{'busbw (GB/s)':>13} {'max (us)':>12} {'slowest':>8}")
    out = [f"# {comm_type} over {group_size} ranks; bandwidths in GB/s = 1e9 B/s (nccl-tests' definition)", header]
    for row in sweep.itertuples(index=False):
        slow = "-" if pd.isna(row.slowest_rank) else str(int(row.slowest_rank))
        out.append(f"{row.msg_size:>12} {format_size(row.msg_size):>10} {row.count:>6} {_num(row.time_mean_us, 2):>12} "
                   f"{_num(row.algbw_gbps, 2):>13} {_num(row.busbw_gbps, 2):>13} {_num(row.max_time_us, 2):>12} {slow:>8}")
    return "\n".join(out)


# ---- shares and workloads (the report's tables) ---------------------------------------------------

SHARE_COLUMNS = ["count", "bytes", "time_ms", "share_pct"]


def p2p_batches(items: pd.DataFrame) -> np.ndarray:
    """The p2p batch of each row (NaN outside one): the detail CSV's ``batch`` when the log has it;
    without the detail file, the batches as the replay forms them (``replay/plan.py``), seen in the
    log: consecutive isend/irecv rows of one iteration and stage, no direction (``additional``)
    twice, with the same logged time (the replay logs the batch's time on each of its rows)."""
    if "batch" in items.columns and items["batch"].notna().any():
        return items["batch"].to_numpy(dtype=float, na_value=np.nan)
    batches = np.full(len(items), np.nan)
    p2p = np.flatnonzero(items["comm_type"].isin(["isend", "irecv"]).to_numpy())
    if not p2p.size:
        return batches
    rows = items.iloc[p2p]
    iteration = rows["iteration"].to_numpy()
    stage = rows["stage"].astype(str).to_numpy()
    direction = rows["additional"].astype(str).to_numpy()
    elapsed = rows["elapsed_ms"].to_numpy(dtype=float)
    batch, seen = 0, set()
    for k in range(len(p2p)):
        follows = (k > 0 and p2p[k] == p2p[k - 1] + 1 and iteration[k] == iteration[k - 1] and stage[k] == stage[k - 1]
                   and elapsed[k] == elapsed[k - 1] and direction[k] not in seen)
        if not follows:
            batch, seen = batch + 1, set()
        seen.add(direction[k])
        batches[p2p[k]] = batch
    return batches


def batch_weights(items: pd.DataFrame) -> np.ndarray:
    """Per row, the share of its ``elapsed_ms`` that is its own: ``1/k`` for the k rows of one p2p
    batch (the replay runs a batch's isend/irecv together and logs the batch's time on each; the detail
    CSV's ``batch`` says which rows, else :func:`p2p_batches` finds them), 1 otherwise.
    ``sum(elapsed_ms * weight)`` counts a batch once."""
    weights = np.ones(len(items))
    batch = p2p_batches(items)
    known = ~np.isnan(batch)
    if known.any():
        values, inverse, counts = np.unique(batch[known], return_inverse=True, return_counts=True)
        weights[known] = 1.0 / counts[inverse]
    return weights


def logged_time(items: pd.DataFrame) -> pd.DataFrame:
    """Per iteration, the logged communication and computation time in ms with each p2p batch counted
    once (:func:`batch_weights`): ``iteration``, ``comm_ms``, ``compute_ms``.  Summed :data:`ROWS_AT_ONCE`
    rows at a time (a 10^6-row log makes no full-length temporaries beside its table)."""
    iteration = items["iteration"].to_numpy()
    if not len(iteration):
        return pd.DataFrame({"iteration": iteration.astype(np.int64), "comm_ms": np.zeros(0), "compute_ms": np.zeros(0)})
    if iteration.min() < 0:  # a table put together by hand: pandas' grouping
        return _logged_time_grouped(items)
    k = int(iteration.max()) + 1
    weights = batch_weights(items)
    is_comp = (items["comm_type"] == "computation").to_numpy()
    elapsed = items["elapsed_ms"]
    comm, compute, present = np.zeros(k), np.zeros(k), np.zeros(k, dtype=bool)
    for start in range(0, len(iteration), ROWS_AT_ONCE):
        part = slice(start, start + ROWS_AT_ONCE)
        it = iteration[part]
        own = elapsed.iloc[part].fillna(0.0).to_numpy(dtype=float) * weights[part]
        comp = is_comp[part]
        comm += np.bincount(it, weights=np.where(comp, 0.0, own), minlength=k)
        compute += np.bincount(it, weights=np.where(comp, own, 0.0), minlength=k)
        present[it] = True
    at = np.flatnonzero(present)
    return pd.DataFrame({"iteration": at.astype(iteration.dtype), "comm_ms": comm[at], "compute_ms": compute[at]})


def _logged_time_grouped(items: pd.DataFrame) -> pd.DataFrame:
    is_comp = (items["comm_type"] == "computation").to_numpy()
    own = items["elapsed_ms"].fillna(0.0).to_numpy(dtype=float) * batch_weights(items)
    frame = pd.DataFrame({"iteration": items["iteration"].to_numpy(), "comm_ms": np.where(is_comp, 0.0, own),
                          "compute_ms": np.where(is_comp, own, 0.0)})
    return frame.groupby("iteration", sort=True).sum().reset_index()


ROWS_AT_ONCE = 1 << 17
"""Rows the per-row sums (:func:`logged_time`, :func:`time_share`) take at a time: their temporaries are a
few MB whatever the log's length."""


def _share_key(items: pd.DataFrame, by: str) -> tuple[np.ndarray, list[str]]:
    """(code of every row, names) of ``by``, computation rows named ``computation`` and missing groups
    ``none``; codes number the names in order of first appearance."""
    codes, uniques = pd.factorize(items[by])  # a categorical's codes: no string per row
    names = [str(u) for u in uniques] + ["none", "computation"]
    codes = np.where(codes < 0, len(names) - 2, codes)
    codes[(items["comm_type"] == "computation").to_numpy()] = len(names) - 1
    return codes, names


def time_share(items: pd.DataFrame, by: str = "comm_type") -> pd.DataFrame:
    """Logged time per ``comm_type`` or ``comm_group`` (computation rows as ``computation``): ``count``,
    ``bytes`` (message bytes; NaN for computation), ``time_ms`` (sum of the rows' times, a p2p batch's
    time shared evenly by its rows: :func:`batch_weights`) and ``share_pct`` of the logged total;
    most time first (ties in order of first appearance).  Summed :data:`ROWS_AT_ONCE` rows at a time."""
    if by not in ("comm_type", "comm_group"):
        raise ValueError(f"by must be comm_type or comm_group, got {by!r}")
    column = items[by]
    if not isinstance(column.dtype, pd.CategoricalDtype):
        column = column.astype("category")
    names = [str(c) for c in column.cat.categories] + ["none", "computation"]
    k = len(names)
    codes_all = column.cat.codes.to_numpy()  # small integers, no string per row
    is_comp = (items["comm_type"] == "computation").to_numpy()
    weights = batch_weights(items)
    count, size_sum, time_sum = np.zeros(k, dtype=np.int64), np.zeros(k), np.zeros(k)
    first = np.full(k, len(items))
    for start in range(0, len(items), ROWS_AT_ONCE):
        part = slice(start, start + ROWS_AT_ONCE)
        codes = codes_all[part].astype(np.int64)
        codes[codes < 0] = k - 2
        codes[is_comp[part]] = k - 1
        sizes = items["msg_size"].iloc[part].to_numpy(dtype=float, na_value=0.0)
        times = items["elapsed_ms"].iloc[part].to_numpy(dtype=float, na_value=np.nan) * weights[part]
        count += np.bincount(codes, minlength=k)
        size_sum += np.bincount(codes, weights=sizes, minlength=k)
        time_sum += _sums(codes, times, k)
        np.minimum.at(first, codes, np.arange(start, start + len(codes)))
    table = pd.DataFrame({by: names, "count": count, "bytes": size_sum, "time_ms": time_sum, "first": first})
    table = table[table["count"] > 0]
    total = float(table["time_ms"].sum())
    table["share_pct"] = table["time_ms"] / total * 100 if total > 0 else float("nan")
    table["bytes"] = table["bytes"].mask(table[by] == "computation")  # computation moves no message
    table = table.sort_values(["time_ms", "first"], ascending=[False, True], kind="stable")
    return table.reset_index(drop=True)[[by, *SHARE_COLUMNS]]


def _sums(codes: np.ndarray, values: np.ndarray, k: int) -> np.ndarray:
    """Per code, the sum of ``values`` with NaN left out (0 for a code whose values are all NaN), as
    pandas' groupby ``sum`` gives it."""
    known = ~np.isnan(values)
    return np.bincount(codes[known], weights=values[known], minlength=k)


WORKLOAD_COLUMNS = ["comm_type", "comm_group", "comm_group_size", "msg_size", "count_init", "count_per_iteration",
                    "bytes_per_iteration"]


def workload_frame(items) -> pd.DataFrame:
    """A workload as a table like :attr:`Log.items`, with ``iteration`` (0 is init when the workload has
    ``epoch_end`` markers; a workload without them is one iteration, numbered 1) and ``time_ns``
    (computation times where known) instead of the log's ``elapsed_ms``.  ``items``: a workload CSV's
    path (read in chunks, :func:`log_analyzer.frames.read_items`), a Workload or WorkItems, or a frame
    this function made (returned as it is)."""
    import os

    from log_analyzer.frames import _items_frame, read_items

    if isinstance(items, pd.DataFrame):
        return items
    if isinstance(items, (str, os.PathLike)):
        frame, epochs = read_items(items, "an AICB workload CSV")
    else:
        frame, epochs = _items_frame(list(items))
    frame = frame.rename(columns={"elapsed_ms": "time_ns"}).drop(columns=["algbw_gbps", "busbw_gbps"])
    if not len(epochs):
        frame["iteration"] = frame["iteration"] + 1  # no markers: the whole file is one iteration, no init
    return frame


def workload_iterations(frame: pd.DataFrame) -> int:
    """Iterations after init in a :func:`workload_frame` (at least 1)."""
    return max(1, int(frame["iteration"].max()) if len(frame) else 1)


def workload_table(frame: pd.DataFrame) -> pd.DataFrame:
    """What a workload would send, per (comm_type, comm_group, comm_group_size, msg_size): operations in
    init (``count_init``) and per training iteration (``count_per_iteration``, the mean over its
    iterations), and bytes per iteration (message bytes, as the CSV counts them).  Computation and
    epoch markers are left out."""
    columns = ["comm_type", "comm_group", "comm_group_size", "msg_size", "iteration"]
    comm = frame[columns][(frame["comm_type"] != "computation").to_numpy()]  # the columns used, then the rows
    iterations = workload_iterations(frame)
    rows = []
    for (ctype, group, gsize, size), part in comm.groupby(["comm_type", "comm_group", "comm_group_size", "msg_size"],
                                                          observed=True, dropna=False, sort=True):
        init = int((part["iteration"] == 0).sum())
        per_iteration = (len(part) - init) / iterations
        rows.append({"comm_type": str(ctype), "comm_group": None if pd.isna(group) else str(group),
                     "comm_group_size": pd.NA if pd.isna(gsize) else int(gsize), "msg_size": int(size),
                     "count_init": init, "count_per_iteration": per_iteration,
                     "bytes_per_iteration": per_iteration * int(size)})
    table = pd.DataFrame(rows, columns=WORKLOAD_COLUMNS)
    table["comm_group_size"] = table["comm_group_size"].astype("Int64")
    return table


def workload_share(table: pd.DataFrame, by: str = "comm_type") -> pd.DataFrame:
    """A :func:`workload_table` summed per ``comm_type`` or ``comm_group``: ``count_per_iteration``,
    ``bytes_per_iteration`` and ``bytes_share_pct``; most bytes first."""
    key = table[by].astype("string").fillna("none")
    out = table.assign(**{by: key}).groupby(by, sort=False).agg(
        count_per_iteration=("count_per_iteration", "sum"), bytes_per_iteration=("bytes_per_iteration", "sum")).reset_index()
    total = float(out["bytes_per_iteration"].sum())
    out["bytes_share_pct"] = out["bytes_per_iteration"] / total * 100 if total > 0 else float("nan")
    out[by] = out[by].astype(str)
    return out.sort_values("bytes_per_iteration", ascending=False, kind="stable").reset_index(drop=True)

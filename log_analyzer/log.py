"""Replay logs: the AICB log CSV writer and reader, and the typed tables notebooks work with.

Two files per replay, both under ``results/comm_logs/`` by default:

``<name>_log.csv``
    docs/formats.md section 5, the file AICB's tools read: the 12 workload columns, one row per executed
    and timed item in execution order as rank 0 saw it; ``_elapsed_time`` in milliseconds, ``algbw``
    and ``busbw`` in GB/s (10^9 B/s, nccl-tests' factors, docs/formats.md section 1); ``epoch_end`` rows carry
    the iteration's wall time in ms (the first block is init).  Written and flushed row by row
    (:class:`LogWriter`), so a crashed or killed run keeps every operation that completed.

``<name>_detail.csv``
    Ours: one row per row of the log (``row`` joins them) with the iteration index, the workload item
    index, rank 0's time and bandwidths, whether the operation was ``emulated`` (gloo lacks it; see
    ``replay/ops.py``), its p2p ``batch`` and the global rank of its peer or root, written as
    operations complete (:class:`DetailWriter`: a stopped run keeps a row for every row of its log),
    then, at the end of a run that completed, rewritten with the operation's time on every rank that
    took part, gathered after the run (``ranks_timed`` of them; empty in a stopped run's file): the
    longest (``max_elapsed_ms``, on ``slowest_rank``, usually the rank that arrived first and waited)
    and the shortest (``min_elapsed_ms``, on ``last_arrival_rank``: the rank the others waited for,
    the straggler) and the bus bandwidth the slowest rank saw.

:meth:`Log.load` reads the log (ours or AICB's), joins the detail file when it is there, and returns
typed pandas tables; :func:`report_text` is what the replay prints at the end of a run, from the
files it has just written (:mod:`log_analyzer.summary`).  This module never imports torch, and
imports pandas only to read (the ranks of a replay write without it).
"""

from __future__ import annotations

import csv
import math
import os
import sys
import time
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from log_analyzer.detail import DETAIL_COLUMNS
from utils.errors import FormatError
from utils.io import atomic_write
from utils.workload import CSV_COLUMNS, CommType, WorkItem, format_shapes

if TYPE_CHECKING:
    import pandas as pd

LOG_SUFFIX = "_log.csv"
DETAIL_SUFFIX = "_detail.csv"

def detail_path(log_path: str | os.PathLike) -> str:
    """``x_log.csv`` -> ``x_detail.csv`` (the detail file beside a log)."""
    path = os.fspath(log_path)
    stem = path[: -len(LOG_SUFFIX)] if path.endswith(LOG_SUFFIX) else os.path.splitext(path)[0]
    return stem + DETAIL_SUFFIX


# ---- writing ---------------------------------------------------------------------------------

def _cell(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else "None"
    return str(value)


def _quote(text: str) -> str:
    """CSV quoting as the csv module's minimal dialect does it."""
    if any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def _row_parts(item: WorkItem) -> tuple[str, str]:
    """The cells before ``_elapsed_time`` and after ``busbw`` of an item's log row, in the workload
    CSV's spelling (``CommType.x``, ``None``, shapes written ``((4096 1 5120) (5120 7680))``) so that
    ``Workload.load`` and AICB's tools read the log too."""
    size = format_shapes(item.shapes) if item.shapes is not None else str(item.msg_size)
    head = [str(item.comm_type), str(item.comm_group) if item.comm_group is not None else "None",
            _cell(item.comm_group_size), _quote(size), _quote(item.stage), _cell(item.dst), _cell(item.src),
            _quote(item.additional or "")]
    return ",".join(head) + ",", f",{item.count}\n"


def _open_stream(path: str, columns: list[str] | tuple[str, ...]) -> TextIO:
    """A CSV opened for streaming rows (parents created), its header written and flushed; a path that
    cannot be written is an :class:`~utils.io.OutputError` naming it."""
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        # O_NOFOLLOW: a symbolic link placed at the path after the start-up check is refused, not written
        # through (issue 28, item 7)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o666)
        handle = open(fd, "w", newline="", encoding="utf-8")  # noqa: SIM115 (the writer closes it)
    except OSError as exc:
        from utils.io import OutputError

        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
    handle.write(",".join(columns) + "\n")
    handle.flush()
    return handle


class LogWriter:
    """Writes the log CSV of docs/formats.md section 5 as operations complete.

    Every row is flushed at once (a killed rank loses at most the operation in flight); this is the
    one output of the toolkit that is deliberately not written atomically.  The constant part of
    each item's row is formatted once (generators repeat the same item objects), so that writing a
    row costs rank 0 a few microseconds between two operations.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        self._file = _open_stream(self.path, CSV_COLUMNS)
        self._parts: dict[int, tuple[WorkItem, str, str]] = {}
        self.rows = 0

    def write(self, item: WorkItem, elapsed_ms: float | None, algbw_gbps: float | None = None,
              busbw_gbps: float | None = None) -> None:
        """One executed item: its time in ms and bandwidths in GB/s (None for computation)."""
        cached = self._parts.get(id(item))
        if cached is None or cached[0] is not item:
            cached = self._parts[id(item)] = (item, *_row_parts(item))  # the item is kept: its id stays its own
        self._file.write(f"{cached[1]}{_cell(elapsed_ms)},{_cell(algbw_gbps)},{_cell(busbw_gbps)}{cached[2]}")
        self._file.flush()
        self.rows += 1

    def write_epoch_end(self, elapsed_ms: float) -> None:
        """The ``epoch_end`` row closing an iteration, carrying its wall time in ms."""
        self.write(WorkItem(CommType.epoch_end), elapsed_ms)

    def flush(self) -> None:
        if not self._file.closed:
            self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _detail_cell(value: Any) -> str:
    """A detail CSV cell as :func:`write_detail`'s csv writer spells it (None and non-finite: empty)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    return str(value)


class DetailWriter:
    """Streams the detail CSV (:data:`DETAIL_COLUMNS`) as operations complete, with what rank 0 knows
    alone; the columns that need every rank's times (``max_elapsed_ms`` ... ``slowest_busbw_gbps``)
    stay empty until :func:`write_detail` replaces the file at the end of the run.  As in
    :class:`LogWriter`, the constant part of each item's row is formatted once.

    Unlike the log, rows are flushed every ``FLUSH_S`` seconds (and at each iteration's end, and by
    :meth:`flush`, which the replay calls when it stops on a fault or a signal), not one by one: a
    flush is a system call, and rank 0 writes between two operations.  A rank killed outright
    (SIGKILL) loses at most the last ``FLUSH_S`` seconds of detail rows; its log keeps them."""

    FLUSH_S = 0.5

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        self._file = _open_stream(self.path, DETAIL_COLUMNS)
        self._flushed = time.monotonic()
        self._parts: dict[int, tuple[WorkItem, str, str]] = {}
        # the columns between busbw_gbps and emulated: every rank's times, known at the end only
        self._gathered = "," * (DETAIL_COLUMNS.index("emulated") - DETAIL_COLUMNS.index("busbw_gbps"))

    def write(self, row: int, iteration: int, index: int, item: WorkItem, elapsed_ms: float,
              algbw_gbps: float | None = None, busbw_gbps: float | None = None, emulated: bool = False,
              batch: int | None = None, group: str | None = None, group_size: int | None = None,
              peer: int | None = None) -> None:
        """One logged operation: its log ``row``, ``iteration``, workload ``index``, rank 0's time (ms)
        and bandwidths (GB/s); ``group``, ``group_size`` and ``peer`` (a global rank) for communication."""
        cached = self._parts.get(id(item))
        if cached is None or cached[0] is not item:
            size = "" if item.is_computation else str(item.msg_size)
            head = f"{item.comm_type.value},{_detail_cell(group)},{_detail_cell(group_size)},{size},{_quote(item.stage)}"
            cached = self._parts[id(item)] = (item, head, _detail_cell(peer))
        self._file.write(f"{row},{iteration},{index},{cached[1]},{_detail_cell(elapsed_ms)},{_detail_cell(algbw_gbps)},"
                         f"{_detail_cell(busbw_gbps)}{self._gathered}{emulated},{_detail_cell(batch)},{cached[2]}\n")
        now = time.monotonic()
        if now - self._flushed > self.FLUSH_S:
            self._file.flush()
            self._flushed = now

    def write_epoch_end(self, row: int, iteration: int, elapsed_ms: float) -> None:
        """The ``epoch_end`` row of an iteration: rank 0's wall time of it (ms)."""
        cells = {"row": row, "iteration": iteration, "comm_type": "epoch_end", "elapsed_ms": elapsed_ms}
        self._file.write(",".join(_detail_cell(cells.get(c)) for c in DETAIL_COLUMNS) + "\n")
        self.flush()

    def flush(self) -> None:
        if not self._file.closed:
            self._file.flush()
            self._flushed = time.monotonic()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


def write_detail(path: str | os.PathLike, rows: Iterable[dict[str, Any]]) -> None:
    """Write the detail CSV (:data:`DETAIL_COLUMNS`) atomically; missing values are left empty."""
    with atomic_write(path) as handle:
        writer = csv.DictWriter(handle, DETAIL_COLUMNS, lineterminator="\n", extrasaction="raise")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})


# ---- reading ---------------------------------------------------------------------------------

class DetailWarning(UserWarning):
    """A detail CSV beside a log that could not be used (the log is read without it)."""


@contextmanager
def warning_lines(prog: str) -> Iterator[None]:
    """Within the block, each :class:`DetailWarning` is one line ``PROG: warning: ...`` on stderr (every
    time, not once per place); other warnings print as Python prints them."""
    with warnings.catch_warnings():
        shown = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
            if issubclass(category, DetailWarning):
                print(f"{prog}: warning: {message}", file=sys.stderr)
            else:
                shown(message, category, *args, **kwargs)

        warnings.simplefilter("always", DetailWarning)
        warnings.showwarning = show
        yield


@dataclass
class Log:
    """A replay log loaded for analysis.

    ``items``: one row per logged operation (``epoch_end`` rows excluded) with ``iteration`` (0 is
    init), ``comm_type`` (without the ``CommType.`` prefix), ``comm_group``, ``msg_size`` (bytes; 0 for
    computation, whose operand shapes are in ``shapes``), ``elapsed_ms``, ``algbw_gbps``,
    ``busbw_gbps``, and, when the detail CSV is beside the log, ``max_elapsed_ms``, ``slowest_rank``,
    ``min_elapsed_ms``, ``last_arrival_rank``, ``ranks_timed``, ``slowest_busbw_gbps``, ``emulated``,
    ``batch``, ``peer_rank``, ``item_index``.  Text columns (type, group, stage, shapes, additional)
    are categoricals, so that a 10^6-row log takes about 100 MB (150 MB with its detail file).
    ``iterations``: one row per iteration: ``time_ms`` (the epoch_end row's wall time; NaN for a
    block a crash cut short), ``comm_ms`` and ``compute_ms`` (sums of the rows, each p2p batch counted
    once: :func:`~log_analyzer.summary.batch_weights`), ``ops``, and with the detail file
    ``max_time_ms`` / ``slowest_rank`` (the slowest rank's wall time of that iteration).
    ``warnings``: what could not be used (a detail file that is empty, malformed or another log's).
    """

    path: str
    items: pd.DataFrame
    iterations: pd.DataFrame
    detail_path: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def epoch_times(self) -> pd.Series:
        """Wall time of each completed block in ms, indexed by iteration (0 is init): AICB's name."""
        import pandas as pd

        done = self.iterations.dropna(subset=["time_ms"])
        return pd.Series(done["time_ms"].to_numpy(), index=done["iteration"].to_numpy(), name="time_ms")

    @property
    def measured(self) -> pd.DataFrame:
        """Items of the measured iterations (init excluded): a slice of ``items``, not a copy (the rows
        are in log order, so init's come first)."""
        import numpy as np

        iteration = self.items["iteration"].to_numpy()
        if len(iteration) and not (np.diff(iteration) >= 0).all():  # a table put together by hand
            return self.items[self.items["iteration"] >= 1]
        return self.items.iloc[int(np.searchsorted(iteration, 1)):]

    @classmethod
    def load(cls, path: str | os.PathLike, detail: str | os.PathLike | None = None) -> Log:
        """Read a ``*_log.csv`` (ours or AICB's) and, when present, the ``*_detail.csv`` beside it
        (or ``detail``).  Raises :class:`~utils.errors.FormatError` naming the file, line and column
        of a bad cell (NaN, a negative time, an integer beyond 2^63 - 1, ...).

        A detail file found beside the log that is empty, malformed or another log's is left out with
        a :class:`DetailWarning` (also in ``warnings``), not an error: it is the run's secondary
        output, written after the measurements; every measurement is in the log, and an analysis
        should not be refused because its by-product was cut short or copied from another run.  The
        warning names the file and what is missing without it.  A ``detail`` named by the caller is an
        input that was asked for: its errors are raised."""
        from log_analyzer.detail import join_detail
        from log_analyzer.frames import read_items

        path = os.fspath(path)
        items, epochs = read_items(path, "a replay log CSV")
        dpath = os.fspath(detail) if detail is not None else detail_path(path)
        used: str | None = None
        notes: list[str] = []
        if detail is not None or os.path.exists(dpath):
            try:
                items, epochs = join_detail(items, epochs, dpath)
                used = dpath
            except FormatError as exc:
                if detail is not None:
                    raise
                notes.append(f"{exc} (the log is read without it: no slowest ranks, stragglers or p2p batches)")
        for note in notes:
            warnings.warn(note, DetailWarning, stacklevel=2)
        return cls(path=path, items=items, iterations=_iteration_table(items, epochs), detail_path=used, warnings=notes)

    # ---- AICB's names (its tutorial's ``Log.load(f).comm_logs`` / ``comm_log_each_epoch``) ----------------

    @property
    def comm_logs(self) -> list[LogItem]:
        """Every logged operation as a :class:`LogItem` (AICB's ``Log.comm_logs``), in order."""
        return [LogItem.from_row(row) for row in self.items.to_dict("records")]

    @property
    def comm_log_each_epoch(self) -> list[list[LogItem]]:
        """The operations of each block, init first (AICB's ``Log.comm_log_each_epoch``)."""
        blocks: dict[int, list[LogItem]] = {}
        for row in self.items.to_dict("records"):
            blocks.setdefault(int(row["iteration"]), []).append(LogItem.from_row(row))
        return [blocks.get(i, []) for i in range(max(blocks, default=-1) + 1)]

    def iteration_stats(self):
        """:func:`log_analyzer.summary.iteration_stats` of the measured iterations."""
        from log_analyzer.summary import iteration_stats

        return iteration_stats(self)

    def comm_summary(self, include_init: bool = False) -> pd.DataFrame:
        """:func:`log_analyzer.summary.comm_summary` of the measured iterations (init too if asked)."""
        from log_analyzer.summary import comm_summary

        return comm_summary(self.items if include_init else self.measured)


@dataclass
class LogItem:
    """One logged operation under AICB's attribute names (``log_analyzer.log.LogItem``): ``_elapsed_time`` in
    ms, ``algbw`` / ``busbw`` in GB/s, ``msg_size`` in bytes (``None`` for a computation)."""

    comm_type: str
    comm_group: str | None
    comm_group_size: int | None
    msg_size: int | None
    stage: str | None
    dst: int | None
    src: int | None
    additional: str | None
    _elapsed_time: float | None
    algbw: float | None
    busbw: float | None
    count: int | None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> LogItem:
        import pandas as pd

        def value(key: str) -> Any:
            item = row.get(key)
            return None if item is None or pd.isna(item) else item

        return cls(str(row["comm_type"]), value("comm_group"), value("comm_group_size"), value("msg_size"),
                   value("stage"), value("dst"), value("src"), value("additional"), value("elapsed_ms"),
                   value("algbw_gbps"), value("busbw_gbps"), value("count"))


class Workload:
    """AICB's ``log_analyzer.log.Workload``: ``Workload.load(path)`` returns ``(workload, args)``, here the
    :class:`utils.workload.Workload` read from the CSV itself (AICB needs a pickle beside it) and the job
    configuration it carries (``None`` for a CSV from elsewhere).  New code: ``log_analyzer.Workload.load``."""

    @staticmethod
    def load(path: str | os.PathLike) -> tuple[Any, Any]:
        from utils.workload import Workload as _Workload

        workload = _Workload.load(path)
        return workload, workload.config


def _iteration_table(items: pd.DataFrame, epochs: pd.DataFrame) -> pd.DataFrame:
    from log_analyzer.summary import logged_time

    # a p2p batch's time is logged on each of its rows: counted once (logged_time)
    sums = logged_time(items)
    ops = items.groupby("iteration", sort=True).size().rename("ops").reset_index()
    columns = ["iteration", "time_ms"] + [c for c in ("max_time_ms", "slowest_rank") if c in epochs.columns]
    table = (epochs[columns].astype({"iteration": "int64"}).merge(sums, on="iteration", how="outer")
             .merge(ops, on="iteration", how="left").sort_values("iteration"))
    table["ops"] = table["ops"].fillna(0).astype("Int64")
    table["iteration"] = table["iteration"].astype("Int64")
    for column in ("comm_ms", "compute_ms"):
        table[column] = table[column].fillna(0.0)
    order = ["iteration", "time_ms", "comm_ms", "compute_ms", "ops"] + columns[2:]
    return table.reset_index(drop=True)[order]


# ---- the replay's end-of-run report ---------------------------------------------------------------

def report_text(log_path: str, sweep: bool = False) -> str:
    """The replay's end-of-run report from its files: the sweep table (``sweep``), or the iteration
    times and the per (type, group, size) table of the measured iterations; then the file names."""
    from log_analyzer.summary import (
        comm_summary,
        format_comm_summary,
        format_iteration_stats,
        format_sweep,
        iteration_stats,
        sweep_summary,
    )

    log = Log.load(log_path)
    if sweep:
        measured = log.measured
        comm = measured[measured["comm_type"] != "computation"]
        size = int(comm["comm_group_size"].iloc[0]) if len(comm) else 1
        ctype = str(comm["comm_type"].iloc[0]) if len(comm) else "-"
        parts = [format_sweep(sweep_summary(log.items), ctype, size)]
    else:
        parts = ["\tIteration time (rank 0's wall time; slowest rank's from every rank's)\n"
                 + format_iteration_stats(iteration_stats(log)),
                 "\tCommunication per (type, group, size), measured iterations\n"
                 + format_comm_summary(comm_summary(log.measured))]
    parts.append(f"log: {log_path}\ndetail: {detail_path(log_path)}")
    return "\n" + "\n\n".join(parts)

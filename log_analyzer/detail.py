"""The replay's ``*_detail.csv`` read back strictly and joined to its log by ``row``.

:func:`join_detail` reads the file in chunks (:func:`log_analyzer.frames.column_chunks`), only the
columns the analysis joins, and writes each chunk's values straight into the log's table (no table of
the detail file is kept).  The workload reader's rules apply: counts and ranks are non-negative integers
up to 2^63 - 1, times and bandwidths non-negative finite numbers, an empty cell is absent; anything else
is a :class:`FormatError` naming the file, line and column.  A detail file that does not belong to the
log (a row the log lacks, a row twice, another operation on a row) is refused the same way.  What
:meth:`Log.load` does with such an error (a warning, and the log read without the detail) is
explained there.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from utils.errors import FormatError
from utils.workload import _int_or_none

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

# numpy, pandas and the chunked reader load when a file is read: the replay's ranks import this module
# (through log_analyzer.log) for DETAIL_COLUMNS only

DETAIL_COLUMNS = (
    "row", "iteration", "item_index", "comm_type", "comm_group", "comm_group_size", "msg_size", "stage",
    "elapsed_ms", "algbw_gbps", "busbw_gbps", "max_elapsed_ms", "slowest_rank", "min_elapsed_ms", "last_arrival_rank",
    "ranks_timed", "slowest_busbw_gbps", "emulated", "batch", "peer_rank",
)
"""Columns of the detail CSV (times in ms, bandwidths in GB/s, ranks global)."""

REQUIRED = ("row", "comm_type", "max_elapsed_ms", "slowest_rank")
INT_COLUMNS = ("slowest_rank", "last_arrival_rank", "ranks_timed", "batch", "peer_rank", "item_index")
FLOAT_COLUMNS = ("max_elapsed_ms", "min_elapsed_ms", "slowest_busbw_gbps")
JOINED = ("max_elapsed_ms", "slowest_rank", "min_elapsed_ms", "last_arrival_rank", "ranks_timed", "slowest_busbw_gbps",
          "emulated", "batch", "peer_rank", "item_index")
"""Detail columns joined to the log's items (those the file has)."""
_TRUE, _FALSE = frozenset({"true", "1"}), frozenset({"false", "0"})
_INT32_MAX = 2**31 - 1


class _CellError(Exception):
    def __init__(self, index: int, message: str):
        super().__init__(message)
        self.index = index
        self.message = message


def join_detail(items: pd.DataFrame, epochs: pd.DataFrame, path: str | os.PathLike) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``items`` with the detail file's :data:`JOINED` columns (those it has) added by ``row``, absent
    where the file has no row (a run stopped while writing it): ranks ``Int32`` (``Int64`` when one is
    larger), ``item_index`` ``Int64``, times ``float64``, ``emulated`` ``boolean``; and ``epochs`` with
    ``max_time_ms`` and ``slowest_rank``.  Raises :class:`FormatError` (file, line, column) for an empty
    file, a missing column, a bad cell, a row the log lacks, a row twice, or another operation than the
    log's on a row."""
    import numpy as np

    from log_analyzer.frames import TYPES, column_chunks, open_text, read_header

    path = os.fspath(path)
    expected = f"the replay's detail CSV ({','.join(DETAIL_COLUMNS)})"
    total = len(items) + len(epochs)
    # where each log row is: in items (k >= 0) or among the epochs (-1 - k)
    place = np.zeros(total, dtype=np.int64 if total > 2**31 - 2 else np.int32)
    item_rows, epoch_rows = items["row"].to_numpy(dtype=np.int64), epochs["row"].to_numpy(dtype=np.int64)
    place[item_rows] = np.arange(len(item_rows))
    place[epoch_rows] = -1 - np.arange(len(epoch_rows))
    log_types = np.full(total, -1, dtype=np.int8)
    log_types[item_rows] = items["comm_type"].cat.codes.to_numpy()
    log_types[epoch_rows] = TYPES.index("epoch_end")
    seen = np.zeros(total, dtype=bool)
    with open_text(path, expected) as handle:
        header, line = read_header(handle, path)
        if header is None:
            raise FormatError(path, f"empty file (expected {expected})")
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise FormatError(path, f"header lacks column(s) {', '.join(missing)} (expected {','.join(DETAIL_COLUMNS)})",
                              line=line)
        position = {name: i for i, name in enumerate(header)}
        joined = [c for c in JOINED if c in position]
        out = {name: _Column(name, len(items)) for name in joined}
        epoch_max = _Column("max_elapsed_ms", len(epochs))
        epoch_slowest = _Column("slowest_rank", len(epochs))
        for columns, lines in column_chunks(handle, path, header, line):
            def parse(name: str) -> Any:
                try:
                    return _parse_column(name, columns[position[name]])  # noqa: B023 (used in this iteration)
                except _CellError as exc:
                    raise FormatError(path, exc.message, line=int(lines[exc.index]), field=name) from None  # noqa: B023

            rows, row_missing = parse("row")
            types = parse("comm_type")
            if row_missing.any() or (rows >= total).any():
                k = int(np.flatnonzero(row_missing | (rows >= total))[0])
                what = "no row number" if row_missing[k] else f"row {int(rows[k])} but the log has {total} rows"
                raise FormatError(path, f"holds {what}: it is not this log's detail file", line=int(lines[k]), field="row")
            again = np.ones(len(rows), dtype=bool)
            again[np.unique(rows, return_index=True)[1]] = False  # a row's second occurrence in this chunk
            repeated = np.flatnonzero(seen[rows] | again)
            if repeated.size:
                k = int(repeated[0])
                raise FormatError(path, f"row {int(rows[k])} appears twice: it is not this log's detail file",
                                  line=int(lines[k]), field="row")
            seen[rows] = True
            differ = np.flatnonzero(types != log_types[rows])
            if differ.size:
                k = int(differ[0])
                raise FormatError(path, f"row {int(rows[k])} is {TYPES[types[k]]} here but {TYPES[log_types[rows[k]]]} in "
                                        "the log: it is not this log's detail file", line=int(lines[k]), field="comm_type")
            at = place[rows]
            in_items, in_epochs = at >= 0, at < 0
            for name in joined:
                parsed = parse(name)
                out[name].put(at[in_items], parsed, in_items)
                if name == "max_elapsed_ms":
                    epoch_max.put(-1 - at[in_epochs], parsed, in_epochs)
                elif name == "slowest_rank":
                    epoch_slowest.put(-1 - at[in_epochs], parsed, in_epochs)
    for name in joined:
        items[name] = out.pop(name).array()
    epochs = epochs.assign(max_time_ms=epoch_max.array(), slowest_rank=epoch_slowest.array())
    return items, epochs


class _Column:
    """One joined column being filled, all missing at first: times as float64 (NaN: missing, no mask),
    ranks as int32 (widened to int64 the first time a value does not fit), ``item_index`` as int64,
    ``emulated`` as bool, each integer column with a missing mask.  Filled in place and handed to pandas
    without a copy, so a 10^6-row detail file adds its columns once (no int64 table converted afterwards)."""

    def __init__(self, name: str, size: int) -> None:
        import numpy as np

        self.name = name
        self.missing = None
        if name in FLOAT_COLUMNS:
            self.values = np.full(size, np.nan)
            return
        dtype = bool if name == "emulated" else np.int64 if name == "item_index" else np.int32
        self.values = np.zeros(size, dtype=dtype)
        self.missing = np.ones(size, dtype=bool)

    def put(self, at: np.ndarray, parsed: Any, select: np.ndarray) -> None:
        import numpy as np

        if self.missing is None:
            self.values[at] = parsed[select]  # NaN: an empty cell
            return
        values = parsed[0][select]
        if self.values.dtype == np.int32 and values.size and values.max() > _INT32_MAX:
            self.values = self.values.astype(np.int64)  # a rank beyond int32: this column is int64 from now on
        self.values[at] = values
        self.missing[at] = parsed[1][select]

    def array(self) -> Any:
        import pandas as pd

        if self.missing is None:
            return self.values
        if self.name == "emulated":
            return pd.arrays.BooleanArray(self.values, self.missing)
        return pd.arrays.IntegerArray(self.values, self.missing)


def _parse_column(name: str, cells: Any) -> Any:
    """One chunk of one column: (values, missing mask) for ``row``, integers and ``emulated``; type codes
    (of :data:`log_analyzer.frames.TYPES`) for ``comm_type``; values (NaN: empty) for times.  Raises
    :class:`_CellError` at the first bad cell."""
    import numpy as np
    import pandas as pd

    from log_analyzer.frames import TYPES, _floats

    if name in FLOAT_COLUMNS:
        values, odd = _floats(cells)
        if odd.any():
            index = int(np.flatnonzero(odd)[0])
            raise _CellError(index, f"expected a non-negative number or nothing; got {cells[index]!r}")
        return values
    raw = np.asarray(cells, dtype=object)
    if name != "comm_type" and name != "emulated":
        try:  # every cell a plain integer (int() on each, as the workload reader's parser does)
            values = raw.astype(np.int64)
        except (ValueError, OverflowError, TypeError):
            values = None
        if values is not None and (values >= 0).all():
            return values, np.zeros(len(values), dtype=bool)
    codes, uniques = pd.factorize(raw)  # each distinct cell parsed once
    if name == "comm_type":
        known = {t: i for i, t in enumerate(TYPES)}
        mapped = [known.get(str(text).strip().removeprefix("CommType."), -1) for text in uniques]
        if -1 in mapped:
            index = int(np.flatnonzero(codes == mapped.index(-1))[0])
            raise _CellError(index, f"expected an operation type ({', '.join(TYPES)}); got {cells[index]!r}")
        return np.array(mapped, dtype=np.int8)[codes]
    parsed, missing = [], []
    for k, text in enumerate(uniques):
        value = _cell(name, str(text).strip())
        if value is _BAD:
            index = int(np.flatnonzero(codes == k)[0])
            what = ("True, False or nothing" if name == "emulated" else
                    "a row number (a non-negative integer)" if name == "row" else "a non-negative integer or nothing")
            raise _CellError(index, f"expected {what}; got {cells[index]!r}")
        parsed.append(0 if value is None else value)
        missing.append(value is None)
    dtype = bool if name == "emulated" else np.int64
    return np.array(parsed, dtype=dtype)[codes], np.array(missing, dtype=bool)[codes]


_BAD = object()


def _cell(name: str, text: str) -> Any:
    """One integer or ``emulated`` cell: its value, None when empty, or :data:`_BAD`."""
    if name == "emulated":
        lower = text.lower()
        return True if lower in _TRUE else False if lower in _FALSE else None if text == "" else _BAD
    if text == "":
        return _BAD if name == "row" else None
    try:
        value = _int_or_none(text, minimum=0, minus_one=False)
    except (ValueError, OverflowError):
        return _BAD
    return _BAD if value is None else value

"""Work items as the typed pandas table a :class:`~log_analyzer.log.Log` holds: one row per item with its
iteration, the ``epoch_end`` markers apart.  The log reader and the workload summaries build on it.

:func:`read_items` reads a replay log or a workload CSV straight into that table, in chunks of
:data:`CHUNK_ROWS` rows, without a :class:`~utils.workload.WorkItem` per row: a 10^6-row log takes
about 100 MB as a table (most of it the numbers; text columns are categoricals).  It is exactly as strict as the
workload reader (``utils.workload.read_csv``): the same csv tokenizer, the same row parser applied to each
distinct combination of the non-time cells (a log repeats a few thousand of them), and the three time and
bandwidth columns converted with numpy, every cell that is not a plain non-negative finite number handed
to that parser too.  So the same file is accepted or refused with the same one line (file, line, column).

:func:`_items_frame` makes the same table from WorkItems in memory (a generated workload).
"""

from __future__ import annotations

import csv
import io
import itertools
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from utils.errors import FormatError
from utils.workload import (
    _HEADER_LINE,
    _NONE_CELLS,
    _REQUIRED,
    CSV_COLUMNS,
    DETAIL_HEADER,
    CommGroup,
    CommType,
    WorkItem,
    _parse_row,
    _RowError,
    format_shapes,
    is_detail_header,
)

if TYPE_CHECKING:
    import pandas as pd

CHUNK_ROWS = 8192
"""Lines parsed at a time (their cells as Python strings are the reader's transient memory, ~7 MB)."""

COLUMNS = ["row", "iteration", "comm_type", "comm_group", "comm_group_size", "msg_size", "shapes", "stage", "dst",
           "src", "additional", "elapsed_ms", "algbw_gbps", "busbw_gbps", "count"]
"""Columns of the item table (the log's ``_elapsed_time`` is ``elapsed_ms``; a workload frame renames it)."""
TYPES = [t.value for t in CommType]
GROUPS = [g.value for g in CommGroup]
_TYPE_CODE = {name: i for i, name in enumerate(TYPES)}
_GROUP_CODE = {name: i for i, name in enumerate(GROUPS)}
_EPOCH = _TYPE_CODE[CommType.epoch_end.value]
_INT_COLUMNS = ("comm_group_size", "msg_size", "dst", "src", "count")
_TEXT_COLUMNS = ("shapes", "stage", "additional")
_FLOATS = (("_elapsed_time", "elapsed_ms"), ("algbw", "algbw_gbps"), ("busbw", "busbw_gbps"))
_FLOAT_NAMES = frozenset(name for name, _ in _FLOATS)
_ABSENT = frozenset(_NONE_CELLS | {"-1", "-1.0"})
"""Float cells the workload reader takes as absent (AICB writes -1 for a missing value)."""
_BIG = float(2**63)
_PATTERN_CACHE_MAX = 200_000


def _blank(row: list[str]) -> bool:
    return not row or (len(row) == 1 and not row[0].strip())


# ---- from WorkItems --------------------------------------------------------------------------------

def _items_frame(items: Sequence[WorkItem]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows of WorkItems in memory as (items without epoch_end, epoch_end rows) with iteration numbers."""
    builder = _Builder(len(items))
    values = [_item_values(item) for item in items]
    n = len(values)
    columns = list(zip(*values)) if n else [()] * 15
    builder.add_chunk(
        types=np.array(columns[0], dtype=np.int8), groups=np.array(columns[1], dtype=np.int8),
        ints={name: _ints(columns[2 + k]) for k, name in enumerate(_INT_COLUMNS)},
        texts={name: builder.codes(name, columns[7 + k]) for k, name in enumerate(_TEXT_COLUMNS)},
        floats={name: np.array([np.nan if v is None else float(v) for v in columns[10 + k]], dtype=np.float64)
                for k, (_, name) in enumerate(_FLOATS)})
    return builder.frames()


def _item_values(item: WorkItem) -> tuple:
    """One item's cells in the builder's order: type code, group code (-1: none), the five integer
    columns, the three text columns, the three float columns."""
    return (_TYPE_CODE[item.comm_type.value], -1 if item.comm_group is None else _GROUP_CODE[item.comm_group.value],
            item.comm_group_size, item.msg_size, item.dst, item.src, item.count,
            format_shapes(item.shapes) if item.shapes is not None else None, item.stage, item.additional,
            item.time_ns, item.algbw, item.busbw)


def _ints(values: Sequence[int | None]) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values, mask of the missing ones) of a sequence of ints and Nones."""
    mask = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
    data = np.fromiter((0 if v is None else v for v in values), dtype=np.int64, count=len(values))
    return data, mask


class _Builder:
    """The parsed columns, written chunk by chunk into arrays allocated for the expected row count (grown
    by half when a file holds more), so that the table never exists twice; :meth:`frames` makes the two
    tables at the end."""

    def __init__(self, capacity: int = 0) -> None:
        self.size = 0
        self.capacity = 0
        self.arrays: dict[str, np.ndarray] = {}
        self.categories: dict[str, dict[str, int]] = {name: {} for name in _TEXT_COLUMNS}
        self.reserve(capacity)

    def reserve(self, capacity: int) -> None:
        """Room for ``capacity`` rows in every column (never less than the rows already kept)."""
        capacity = max(capacity, self.size)
        if capacity <= self.capacity and self.arrays:
            return
        shapes = {"types": np.int8, "groups": np.int8, **{name: np.int64 for name in _INT_COLUMNS},
                  **{name + "_missing": bool for name in _INT_COLUMNS}, **{name: np.int32 for name in _TEXT_COLUMNS},
                  **{name: np.float64 for _, name in _FLOATS}}
        for key, dtype in shapes.items():
            grown = np.empty(capacity, dtype=dtype)
            if key in self.arrays:
                grown[: self.size] = self.arrays.pop(key)[: self.size]
            self.arrays[key] = grown
        self.capacity = capacity

    def codes(self, column: str, values: Sequence[str | None]) -> np.ndarray:
        """Category codes of text values (-1 for None), categories in order of first appearance."""
        index = self.categories[column]
        return np.fromiter((-1 if v is None else index.setdefault(v, len(index)) for v in values), dtype=np.int32,
                           count=len(values))

    def add_chunk(self, types: np.ndarray, groups: np.ndarray, ints: dict[str, tuple[np.ndarray, np.ndarray]],
                  texts: dict[str, np.ndarray], floats: dict[str, np.ndarray]) -> None:
        n = len(types)
        if self.size + n > self.capacity:
            self.reserve(max(self.size + n, int(self.capacity * 1.5)))
        part = slice(self.size, self.size + n)
        self.arrays["types"][part] = types
        self.arrays["groups"][part] = groups
        for name in _INT_COLUMNS:
            self.arrays[name][part], self.arrays[name + "_missing"][part] = ints[name]
        for name in _TEXT_COLUMNS:
            self.arrays[name][part] = texts[name]
        for _, name in _FLOATS:
            self.arrays[name][part] = floats[name]
        self.size += n

    def frames(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(items without epoch_end, epoch_end rows), built column by column (each array freed once copied)."""
        import pandas as pd

        arrays, n = self.arrays, self.size

        def take(key: str) -> np.ndarray:
            return arrays.pop(key)[:n][keep]

        types = arrays["types"][:n]
        is_epoch = types == _EPOCH
        keep = ~is_epoch
        epoch_rows = np.flatnonzero(is_epoch)
        kept_rows = np.flatnonzero(keep)
        # a row's iteration is the number of epoch_end rows before it (epoch_end rows close their iteration);
        # counted for the kept rows only, so no full-length temporaries sit beside the builder's columns
        data: dict[str, Any] = {"row": kept_rows, "iteration": np.searchsorted(epoch_rows, kept_rows)}
        data["comm_type"] = pd.Categorical.from_codes(take("types"), categories=TYPES)
        data["comm_group"] = pd.Categorical.from_codes(take("groups"), categories=GROUPS)
        for name in ("comm_group_size", "msg_size", "shapes", "stage", "dst", "src", "additional"):
            if name in _INT_COLUMNS:
                data[name] = pd.arrays.IntegerArray(take(name), take(name + "_missing"))
            else:
                data[name] = pd.Categorical.from_codes(take(name), categories=list(self.categories[name]))
        epoch_time = arrays["elapsed_ms"][:n][is_epoch]
        for _, name in _FLOATS:
            data[name] = take(name)
        data["count"] = pd.arrays.IntegerArray(take("count"), take("count_missing"))
        frame = pd.DataFrame(data, columns=COLUMNS, copy=False)
        epochs = pd.DataFrame({"row": pd.array(epoch_rows, dtype="Int64"),
                               "iteration": pd.array(np.arange(len(epoch_rows), dtype=np.int64), dtype="Int64"),
                               "time_ms": epoch_time})
        self.arrays, self.size, self.capacity = {}, 0, 0
        return frame, epochs


# ---- from a CSV file ------------------------------------------------------------------------------------

def read_items(path: str | os.PathLike, expected: str = "an AICB workload CSV") -> tuple[pd.DataFrame, pd.DataFrame]:
    """A replay log or workload CSV as (items without epoch_end, epoch_end rows), read in chunks.
    Raises :class:`FormatError` naming the file, line and column, as ``Workload.load`` does."""
    path = os.fspath(path)
    state = _Reader(path)
    state.builder.reserve(_expected_rows(path))
    with open_text(path, expected) as handle:
        header, line = read_header(handle, path, legacy=True)
        state.header(header, line)
        for columns, lines in column_chunks(handle, path, header, line):
            state.chunk(columns, lines)
    return state.builder.frames()


def _expected_rows(path: str) -> int:
    """About how many rows a CSV holds: its size over the line length of its first 256 KiB (0 if unreadable)."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            sample = handle.read(1 << 18)
    except OSError:
        return 0
    lines = sample.count(b"\n")
    return int(size / len(sample) * lines * 1.02) + 16 if lines and sample else 0


@contextmanager
def open_text(path: str, expected: str) -> Iterator[Any]:
    """``path`` opened as UTF-8 text; reading errors become one :class:`FormatError` naming the file."""
    from utils.io import TEXT_ENCODING, refuse_device

    try:
        with open(path, newline="", encoding=TEXT_ENCODING) as handle:  # a byte-order mark skipped
            refuse_device(path, expected, handle)
            yield handle
    except OSError as exc:
        raise FormatError(path, f"cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise FormatError(path, f"not a text file (expected {expected})") from None


def read_header(handle: Any, path: str, legacy: bool = False) -> tuple[list[str] | None, int]:
    """The first non-blank row of a CSV, its cells stripped, and its line number (``None``, 0 for an
    empty file).  ``legacy``: AICB's ``[rank0 ~ rank127]`` line before a workload's header is skipped."""
    number = 0
    for line in handle:
        number += 1
        try:
            row = next(csv.reader([line]), [])
        except csv.Error as exc:
            raise FormatError(path, f"not a CSV file ({exc})", line=number) from None
        if _blank(row) or (legacy and len(row) == 1 and row[0].strip().startswith("[")):
            continue
        return [c.strip() for c in row], number
    return None, 0


def column_chunks(handle: Any, path: str, header: list[str], line: int) -> Iterator[tuple[list[np.ndarray], np.ndarray]]:
    """The rows after the header (line ``line``) as columns of strings (object arrays), :data:`CHUNK_ROWS`
    lines at a time, with each row's line number; blank lines are skipped and a row with another number
    of fields than the header is a :class:`FormatError` naming its line.  Plain lines (no quote, no lone
    carriage return) are split by pandas' C parser; from the first quoted cell on (one may hold commas or
    span lines) the csv module reads the rest, as the workload reader does."""
    import pandas as pd

    width = len(header)
    while True:
        lines = list(itertools.islice(handle, CHUNK_ROWS))
        if not lines:
            return
        text = "".join(lines)
        if '"' in text or "\x00" in text or text.count("\r") != text.count("\r\n"):
            yield from _csv_chunks(itertools.chain(lines, handle), path, header, line)
            return
        numbers = np.arange(line + 1, line + 1 + len(lines))
        line += len(lines)
        if _BLANK_LINE.search(text) or not lines[-1].strip():
            keep = [i for i, row in enumerate(lines) if row.strip()]
            lines, numbers = [lines[i] for i in keep], numbers[keep]
            if not lines:
                continue
            text = "".join(lines)
        frame = None
        if text.count(",") == (width - 1) * len(lines):
            try:  # no line with more fields (pandas refuses those) and the total right: every line is right
                frame = pd.read_csv(io.StringIO(text), header=None, names=list(range(width)), dtype=object,
                                    keep_default_na=False, na_filter=False, skip_blank_lines=False, engine="c")
            except pd.errors.ParserError:
                frame = None
        if frame is None or len(frame) != len(lines):
            commas = [row.count(",") for row in lines]
            bad = next((i for i, n in enumerate(commas) if n != width - 1), None)
            if bad is None:  # pandas and the csv module disagree on these lines: the csv module decides
                yield _split(lines, numbers, path, header)
                continue
            if bad:  # the rows before it first: a bad cell there is the file's first error
                yield _split(lines[:bad], numbers[:bad], path, header)
            _width_error(path, header, commas[bad] + 1, int(numbers[bad]))
        del text
        yield [frame[i].to_numpy(dtype=object) for i in range(width)], numbers


_BLANK_LINE = re.compile(r"(?:^|\n)[^\S\n]*\n")
"""A line of nothing but whitespace (skipped, as the csv reader's blank rows are)."""


def _split(lines: list[str], numbers: np.ndarray, path: str, header: list[str]) -> tuple[list[np.ndarray], np.ndarray]:
    """Plain lines (no quote: one row each) split by the csv module, as columns."""
    rows = [next(csv.reader([line])) for line in lines]
    for row, number in zip(rows, numbers):
        if len(row) != len(header):
            _width_error(path, header, len(row), int(number))
    return [np.array(cells, dtype=object) for cells in zip(*rows)], numbers


def _csv_chunks(lines: Iterator[str], path: str, header: list[str], line: int) -> Iterator[tuple[list[np.ndarray], np.ndarray]]:
    reader = csv.reader(lines)
    width = len(header)
    try:
        while True:
            rows, numbers = [], []
            for row in reader:
                if _blank(row):
                    continue
                if len(row) != width:
                    if rows:  # the rows before it first: a bad cell there is the file's first error
                        yield [np.array(cells, dtype=object) for cells in zip(*rows)], np.array(numbers)
                    _width_error(path, header, len(row), line + reader.line_num)
                rows.append(row)
                numbers.append(line + reader.line_num)
                if len(rows) == CHUNK_ROWS:
                    break
            if not rows:
                return
            yield [np.array(cells, dtype=object) for cells in zip(*rows)], np.array(numbers)
    except csv.Error as exc:
        raise FormatError(path, f"not a CSV file ({exc})", line=line + reader.line_num) from None


def _width_error(path: str, header: list[str], got: int, line: int) -> None:
    raise FormatError(path, f"expected {len(header)} comma-separated fields ({','.join(header)}), got {got}", line=line)


class _Reader:
    """The state of one :func:`read_items`: the header and the parsed patterns of non-time cells."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.builder = _Builder()
        self.patterns: dict[tuple[str, ...], tuple | _RowError] = {}

    def header(self, header: list[str] | None, line: int) -> None:
        if header is None:
            raise FormatError(self.path, f"empty file (expected the header {_HEADER_LINE})")
        if is_detail_header(header):
            raise FormatError(self.path, DETAIL_HEADER, line=line)
        missing = [c for c in _REQUIRED if c not in header]
        if missing:
            raise FormatError(self.path, f"header lacks column(s) {', '.join(missing)} (expected {_HEADER_LINE})",
                              line=line)
        self.columns = header
        position = {name: i for i, name in enumerate(header)}  # a repeated name: the last one, as dict(zip()) has it
        self.pattern_names = [c for c in CSV_COLUMNS if c not in _FLOAT_NAMES and c in position]
        self.pattern_at = [position[c] for c in self.pattern_names]
        self.float_at = {name: position.get(column) for column, name in _FLOATS}

    def chunk(self, columns: list[np.ndarray], lines: np.ndarray) -> None:
        import pandas as pd

        n = len(lines)
        # each distinct combination of the non-time cells, parsed once with the workload reader's parser
        ids = np.zeros(n, dtype=np.int64)
        for at in self.pattern_at:
            codes, uniques = pd.factorize(columns[at])
            ids = pd.factorize(ids * len(uniques) + codes)[0]
        first = np.unique(ids, return_index=True)[1]  # ids number the patterns in order of first appearance
        parsed = [self.pattern(tuple(columns[at][f] for at in self.pattern_at)) for f in first]
        suspects = set()
        bad = [k for k, p in enumerate(parsed) if isinstance(p, _RowError)]
        if bad:
            suspects.add(int(first[bad[0]]))
            parsed = [_EMPTY if isinstance(p, _RowError) else p for p in parsed]
        floats = {}
        for _, name in _FLOATS:
            at = self.float_at[name]
            values, odd = _floats(columns[at]) if at is not None else (np.full(n, np.nan), np.zeros(n, dtype=bool))
            floats[name] = values
            suspects.update(np.flatnonzero(odd).tolist())
        table = list(zip(*parsed))
        types, groups = np.array(table[0], dtype=np.int8)[ids], np.array(table[1], dtype=np.int8)[ids]
        ints = {}
        for k, name in enumerate(_INT_COLUMNS):
            values = table[2 + k]
            ints[name] = (np.array([0 if v is None else v for v in values], dtype=np.int64)[ids],
                          np.array([v is None for v in values], dtype=bool)[ids])
        texts = {name: self.builder.codes(name, table[7 + k])[ids] for k, name in enumerate(_TEXT_COLUMNS)}
        for index in sorted(suspects):
            # a cell the fast path did not take: the workload reader's own parser decides (and words the error)
            try:
                item = _parse_row(dict(zip(self.columns, (column[index] for column in columns))))
            except _RowError as exc:
                raise FormatError(self.path, str(exc), line=int(lines[index]), field=exc.column) from None
            values = _item_values(item)
            types[index], groups[index] = values[0], values[1]
            for k, name in enumerate(_INT_COLUMNS):
                ints[name][0][index] = 0 if values[2 + k] is None else values[2 + k]
                ints[name][1][index] = values[2 + k] is None
            for k, name in enumerate(_TEXT_COLUMNS):
                texts[name][index] = self.builder.codes(name, [values[7 + k]])[0]
            for k, (_, name) in enumerate(_FLOATS):
                floats[name][index] = np.nan if values[10 + k] is None else float(values[10 + k])
        self.builder.add_chunk(types, groups, ints, texts, floats)

    def pattern(self, key: tuple[str, ...]) -> tuple | _RowError:
        """The parsed non-time cells of ``key`` (the time cells absent), or the parser's error."""
        found = self.patterns.get(key)
        if found is None:
            if len(self.patterns) >= _PATTERN_CACHE_MAX:
                self.patterns.clear()  # a file of all-different rows: keep the cache bounded
            try:
                found = _item_values(_parse_row(dict(zip(self.pattern_names, key))))[:10]
            except _RowError as exc:
                found = exc
            self.patterns[key] = found
        return found


_EMPTY = (_EPOCH, -1, None, 0, None, None, 1, None, "", None)
"""Placeholder values of a row about to be refused (its error is raised before the chunk is kept)."""


def _floats(cells: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(values, odd) of one time or bandwidth column: NaN for an absent cell; ``odd`` marks every cell
    that is not absent and not a plain non-negative finite number below 2^63 (or that numpy cannot
    read), for the row parser to decide."""
    import pandas as pd

    raw = np.array(cells, dtype=object)
    absent = pd.Series(raw, copy=False).isin(list(_ABSENT)).to_numpy()
    values = np.full(len(raw), np.nan)
    present = np.flatnonzero(~absent)
    odd = np.zeros(len(raw), dtype=bool)
    if present.size:
        try:
            values[present] = raw[present].astype(np.float64)
        except (ValueError, TypeError):
            for i in present:
                try:
                    values[i] = float(raw[i])
                except ValueError:
                    odd[i] = True
        with np.errstate(invalid="ignore"):
            good = np.isfinite(values) & (values >= 0) & (values < _BIG)
        odd[present] |= ~good[present]
    return values, odd

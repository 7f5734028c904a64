"""The one workload model: an ordered list of work items plus the configuration that produced it.

A :class:`WorkItem` is a communication (type, group, group size, bytes, stage, root, p2p direction),
a computation (operand shapes, FLOPs, a time in ns) or an iteration marker (``epoch_end``).  Every
other representation (AICB workload CSV, SimAI records, replay, simulation) is a view of it.

The AICB workload CSV (docs/formats.md section 4) is read and written here.  Files we write round-trip
byte for byte (dump, load, dump); AICB's own files load too, with or without the legacy
``[rank0 ~ rank127]`` first line, ``None`` or ``-1`` cells, and computation shapes written as
``((4096 1 5120) (5120 7680))`` or ``"((4096, 1, 5120), (5120, 7680))"``.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from utils.errors import FormatError
from utils.io import atomic_write, read_text


class CommType(str, Enum):
    """Kinds of work item.  Written in CSVs as ``CommType.<value>``."""

    all_reduce = "all_reduce"
    all_gather = "all_gather"
    reduce_scatter = "reduce_scatter"
    all_to_all = "all_to_all"
    broadcast = "broadcast"
    reduce = "reduce"
    isend = "isend"
    irecv = "irecv"
    barrier = "barrier"
    computation = "computation"
    epoch_end = "epoch_end"

    def __str__(self) -> str:
        return f"CommType.{self.value}"

    @classmethod
    def parse(cls, text: str) -> CommType:
        """From ``CommType.all_reduce`` or ``all_reduce`` (AICB's ``*_into_tensor`` / ``*_tensor``
        spellings map to all_gather / reduce_scatter).  Raises ``ValueError``."""
        name = text.strip()
        if name.startswith("CommType."):
            name = name[len("CommType."):]
        name = _COMM_TYPE_ALIASES.get(name, name)
        try:
            return cls(name)
        except ValueError:
            known = ", ".join(m.value for m in cls)
            raise ValueError(f"expected CommType.<name> with name one of {known}; got {text!r}") from None

    @property
    def is_collective(self) -> bool:
        return self in _COLLECTIVES


_COMM_TYPE_ALIASES = {"all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter"}
_COLLECTIVES = frozenset({
    CommType.all_reduce, CommType.all_gather, CommType.reduce_scatter, CommType.all_to_all,
    CommType.broadcast, CommType.reduce, CommType.barrier,
})


class CommGroup(str, Enum):
    """Process groups a communication runs in.  Written in CSVs as ``CommGroup.<value>``.

    ``mp_group`` (ours, not AICB's) is Megatron's model-parallel group (the tp x pp ranks of a
    data-parallel replica), where the optimizer reduces its gradient norm; ``all_nodes`` every rank.
    Context parallelism (Megatron-core's ``parallel_state``): ``cp_group`` (``get_context_parallel_group``),
    ``tp_cp_group`` (``get_tensor_and_context_parallel_group``), ``dp_cp_group`` (``get_data_parallel_group(
    with_context_parallel=True)``: gradients and the distributed optimizer), and the two levels of
    ``--hierarchical_context_parallel_sizes`` (``get_hierarchical_context_parallel_groups``): ``cp_a2a_group``
    (the first level, consecutive CP ranks) and ``cp_p2p_group`` (the second, across them).
    ``etp_group``: the expert tensor-parallel group (``get_expert_tensor_parallel_group``) when
    ``--expert_tensor_parallel_size`` differs from the TP size (equal sizes use ``tp_group``: the same ranks).
    """

    dp_group = "dp_group"
    tp_group = "tp_group"
    pp_group = "pp_group"
    ep_group = "ep_group"
    ep_dp_group = "ep_dp_group"
    ep_tp_group = "ep_tp_group"
    embedding_group = "embedding_group"
    mp_group = "mp_group"
    all_nodes = "all_nodes"
    cp_group = "cp_group"
    tp_cp_group = "tp_cp_group"
    dp_cp_group = "dp_cp_group"
    cp_a2a_group = "cp_a2a_group"
    cp_p2p_group = "cp_p2p_group"
    etp_group = "etp_group"

    def __str__(self) -> str:
        return f"CommGroup.{self.value}"

    @classmethod
    def parse(cls, text: str) -> CommGroup:
        """From ``CommGroup.tp_group`` or ``tp_group`` (AICB's ``CommGroup.all`` is ``all_nodes``)."""
        name = text.strip()
        if name.startswith("CommGroup."):
            name = name[len("CommGroup."):]
        if name == "all":
            name = "all_nodes"
        try:
            return cls(name)
        except ValueError:
            known = ", ".join(m.value for m in cls)
            raise ValueError(f"expected CommGroup.<name> with name one of {known}, or None; got {text!r}") from None


Shapes = tuple[tuple[int, ...], ...]


@dataclass(slots=True)
class WorkItem:
    """One step of a rank's iteration.

    Sizes are bytes.  ``time_ns`` is the computation time in nanoseconds (the CSV's
    ``_elapsed_time`` column); ``shapes`` the operand shapes of a computation (the CSV writes them
    in ``msg_size``); ``flops`` its floating-point operations.  ``src``/``dst`` are roots as ranks
    inside the group; ``additional`` the p2p direction (``send_next``, ``recv_prev``, ...).
    ``meta`` carries producer details that the CSV does not (per-expert token counts, ...).
    """

    comm_type: CommType
    comm_group: CommGroup | None = None
    comm_group_size: int | None = None
    msg_size: int = 0
    stage: str = ""
    dst: int | None = None
    src: int | None = None
    additional: str | None = None
    time_ns: float | None = None
    algbw: float | None = None
    busbw: float | None = None
    count: int = 1
    shapes: Shapes | None = None
    flops: float | None = None
    meta: dict[str, Any] | None = None

    @property
    def is_computation(self) -> bool:
        return self.comm_type is CommType.computation

    @property
    def is_epoch_end(self) -> bool:
        return self.comm_type is CommType.epoch_end

    @property
    def is_comm(self) -> bool:
        return self.comm_type is not CommType.computation and self.comm_type is not CommType.epoch_end


CSV_COLUMNS = (
    "comm_type", "comm_group", "comm_group_size", "msg_size", "stage", "dst", "src", "additional",
    "_elapsed_time", "algbw", "busbw", "count",
)
"""The AICB workload CSV header, in order."""
_HEADER_LINE = ",".join(CSV_COLUMNS)
_REQUIRED = ("comm_type", "comm_group", "comm_group_size", "msg_size", "stage")
DETAIL_HEADER = "this is a replay's detail CSV: give the *_log.csv beside it (or a workload CSV)"
"""The refusal of a ``*_detail.csv`` where a workload or log is read: its header has every :data:`_REQUIRED`
column, so it used to load, with no times (a log) or no p2p peers (a replayed workload)."""


def is_detail_header(header: list[str]) -> bool:
    """Whether ``header`` is a replay's detail CSV's (log_analyzer.log.DETAIL_COLUMNS: ``row``, ``max_elapsed_ms``)."""
    return "row" in header and "max_elapsed_ms" in header


@dataclass
class Workload:
    """An ordered list of :class:`WorkItem` and the configuration that produced it.

    ``config`` is the producing configuration (a ``JobConfig`` for generated workloads, ``None``
    for loaded files); ``rank`` the global rank whose view this is; ``compute_source`` where the
    computation times came from (``aiob``, ``file``, ``roofline``, ``placeholder`` or ``None``);
    ``generator`` the producing generator's name (``megatron``, ``deepspeed_stage3``, ...).
    """

    items: list[WorkItem] = field(default_factory=list)
    config: Any = None
    rank: int = 0
    compute_source: str | None = None
    generator: str | None = None

    def __iter__(self) -> Iterator[WorkItem]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> WorkItem:
        return self.items[index]

    @property
    def workload(self) -> list[WorkItem]:
        """AICB's spelling of :attr:`items`, for code written against AICB."""
        return self.items

    def append(self, item: WorkItem) -> None:
        self.items.append(item)

    def extend(self, items: Iterable[WorkItem]) -> None:
        self.items.extend(items)

    def iterations(self) -> list[list[WorkItem]]:
        """Items split at ``epoch_end`` markers (markers excluded); the first block is init."""
        blocks: list[list[WorkItem]] = [[]]
        for item in self.items:
            if item.comm_type is CommType.epoch_end:
                blocks.append([])
            else:
                blocks[-1].append(item)
        if len(blocks) > 1 and not blocks[-1]:
            blocks.pop()
        return blocks

    def comm_items(self) -> list[WorkItem]:
        return [item for item in self.items if item.is_comm]

    # ---- AICB workload CSV -------------------------------------------------------------------

    def dump(self, path: str | os.PathLike) -> None:
        """Write the AICB workload CSV to ``path`` (atomically: no partial file on error)."""
        with atomic_write(path) as handle:
            write_csv(self.items, handle)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Workload:
        """Read an AICB workload CSV (ours or AICB's).  Raises :class:`FormatError` naming the
        file, the line and what was expected."""
        path = os.fspath(path)
        return cls(items=read_csv(io.StringIO(read_text(path, "an AICB workload CSV")), path))


# ---- CSV cells --------------------------------------------------------------------------------

def _cell(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def format_shapes(shapes: Shapes) -> str:
    """``((4096, 1, 5120), (5120, 7680))`` -> ``((4096 1 5120) (5120 7680))`` (no commas, CSV-safe)."""
    return "(" + " ".join("(" + " ".join(str(d) for d in shape) + ")" for shape in shapes) + ")"


def _quote(text: str) -> str:
    """CSV quoting as the csv module's minimal dialect does it."""
    if any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def _line(item: WorkItem) -> str:
    size = format_shapes(item.shapes) if item.shapes is not None else str(item.msg_size)
    cells = (
        str(item.comm_type),
        str(item.comm_group) if item.comm_group is not None else "None",
        _cell(item.comm_group_size),
        size,
        _quote(item.stage),
        _cell(item.dst),
        _cell(item.src),
        _quote(item.additional or ""),
        _cell(item.time_ns),
        _cell(item.algbw),
        _cell(item.busbw),
        str(item.count),
    )
    return ",".join(cells) + "\n"


def write_csv(items: Iterable[WorkItem], handle) -> None:
    """Write the header and one row per item to an open text file.

    Generators repeat the same item objects for every micro-batch, so each distinct item is
    formatted once.
    """
    lines: dict[int, str] = {}
    out = [_HEADER_LINE + "\n"]
    for item in items:
        line = lines.get(id(item))
        if line is None:
            line = lines[id(item)] = _line(item)
        out.append(line)
    handle.write("".join(out))


_NONE_CELLS = frozenset({"", "None", "none", "null"})
"""Cells that mean "absent" (AICB writes Python's ``None``; its pandas writer fills absent cells with -1,
accepted as absent where a value may be absent).  NaN and other negative numbers are bad values,
refused with the row's line and column."""
_MAX_INT = 2**63 - 1
_SIMAI_POLICY = re.compile(r"^[A-Z][A-Z_]*(\s|$)")
"""The first line of a SimAI workload file: its parallelism policy (HYBRID_TRANSFORMER_FWD_IN_BCKWD, DATA, ...)."""
"""Largest count the formats and pandas' int64 columns hold."""
_SHAPE_RE = re.compile(r"\(([^()]*)\)")
_SHAPES_EXPECTED = ("expected a byte count (a non-negative integer) or computation shapes such as "
                    "((4096 1 5120) (5120 7680))")


def parse_shapes(text: str) -> Shapes:
    """Inverse of :func:`format_shapes`; also accepts Python's comma form.  Raises ``ValueError``."""
    body = text.strip()
    if not (body.startswith("(") and body.endswith(")")):
        raise ValueError(text)
    inner = body[1:-1]
    groups = _SHAPE_RE.findall(inner)
    if not groups or _SHAPE_RE.sub("", inner).replace(",", "").strip():
        raise ValueError(text)
    shapes = []
    for group in groups:
        dims = [d for d in re.split(r"[\s,]+", group.strip()) if d]
        if not dims:
            raise ValueError(text)
        shapes.append(tuple(int(d) for d in dims))
    return tuple(shapes)


def _int_or_none(text: str, minimum: int = 0, minus_one: bool = True) -> int | None:
    """An integer cell of at least ``minimum`` (written as ``5e8`` too), None for an absent one (and for
    AICB's -1 with ``minus_one``); ``ValueError`` for NaN, fractions, other values below the minimum
    or beyond int64."""
    if text in _NONE_CELLS or (minus_one and text in ("-1", "-1.0")):
        return None
    value = float(text) if ("." in text or "e" in text.lower()) else int(text)
    if value != value or value in (float("inf"), float("-inf")) or value != int(value):
        raise ValueError(text)
    if not minimum <= int(value) <= _MAX_INT:
        raise ValueError(text)
    return int(value)


def _number_or_none(text: str) -> float | int | None:
    """A non-negative finite number, None for an absent cell (or AICB's -1); ``ValueError`` otherwise."""
    if text in _NONE_CELLS or text in ("-1", "-1.0"):
        return None
    try:
        value: float | int = int(text)
    except ValueError:
        value = float(text)
    if not (0 <= value < float("inf")) or (isinstance(value, int) and value > _MAX_INT):
        raise ValueError(text)
    return value


class _RowError(Exception):
    def __init__(self, column: str, message: str):
        super().__init__(message)
        self.column = column


def _parse_row(cells: dict[str, str]) -> WorkItem:
    try:
        ctype = CommType.parse(cells["comm_type"])
    except ValueError as exc:
        raise _RowError("comm_type", str(exc)) from None
    group_text = cells["comm_group"].strip()
    try:
        group = None if group_text in _NONE_CELLS else CommGroup.parse(group_text)
    except ValueError as exc:
        raise _RowError("comm_group", str(exc)) from None
    try:
        group_size = _int_or_none(cells["comm_group_size"].strip(), minimum=1)
    except ValueError:
        raise _RowError("comm_group_size", f"expected a positive integer or None; got {cells['comm_group_size']!r}") from None

    size_text = cells["msg_size"].strip()
    shapes = None
    msg_size = 0
    if size_text.startswith("("):
        try:
            shapes = parse_shapes(size_text)
        except ValueError:
            raise _RowError("msg_size", f"{_SHAPES_EXPECTED}; got {size_text!r}") from None
    elif size_text not in _NONE_CELLS:
        try:
            value = _int_or_none(size_text, minus_one=False)
        except ValueError:
            raise _RowError("msg_size", f"{_SHAPES_EXPECTED}; got {size_text!r}") from None
        msg_size = value or 0

    values: dict[str, Any] = {}
    for column in ("dst", "src"):
        text = cells.get(column, "None").strip()
        try:
            values[column] = _int_or_none(text)
        except ValueError:
            raise _RowError(column, f"expected a rank inside the group (a non-negative integer) or None; got {text!r}") from None
    for column, key in (("_elapsed_time", "time_ns"), ("algbw", "algbw"), ("busbw", "busbw")):
        text = cells.get(column, "None").strip()
        try:
            values[key] = _number_or_none(text)
        except ValueError:
            raise _RowError(column, f"expected a non-negative number or None; got {text!r}") from None
        if key == "time_ns" and values[key] is not None and values[key] > _MAX_INT:
            # (ns in a workload, ms in a log) past any clock: the replay's sleep of it raised OverflowError
            raise _RowError(column, f"{text!r} is beyond the largest time the formats hold ({_MAX_INT})")
    count_text = cells.get("count", "1").strip()
    try:
        count = 1 if count_text in _NONE_CELLS else _int_or_none(count_text, minimum=1, minus_one=False)
    except ValueError:
        raise _RowError("count", f"expected a positive integer; got {count_text!r}") from None
    additional = cells.get("additional", "").strip()
    if group_size is None and ctype not in (CommType.computation, CommType.epoch_end, CommType.barrier):
        raise _RowError("comm_group_size", f"{ctype.value} needs its group size; got {cells['comm_group_size']!r}")
    return WorkItem(
        comm_type=ctype, comm_group=group, comm_group_size=group_size, msg_size=msg_size,
        stage=cells["stage"].strip(), dst=values["dst"], src=values["src"],
        additional=None if additional in _NONE_CELLS else additional,
        time_ns=values["time_ns"], algbw=values["algbw"], busbw=values["busbw"],
        count=1 if count is None else count, shapes=shapes,
    )


def read_csv(handle, path: str = "<workload>") -> list[WorkItem]:
    """Parse an AICB workload CSV from an open text file.  ``path`` is used in error messages."""
    reader = csv.reader(handle)
    header: list[str] | None = None
    items: list[WorkItem] = []
    for row in reader:
        line = reader.line_num
        if header is None:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            first = row[0].strip()
            if first.startswith("[") and len(row) == 1:
                continue  # AICB's legacy "[rank0 ~ rank127]" line
            header = [c.strip() for c in row]
            if is_detail_header(header):
                raise FormatError(path, DETAIL_HEADER, line=line)
            missing = [c for c in _REQUIRED if c not in header]
            if missing and len(row) == 1 and _SIMAI_POLICY.match(first):
                # SimAI's first line (a parallelism policy, then key: value pairs): say what the file is
                raise FormatError(path, f"a SimAI workload file (python -m simulator -w reads it), not an AICB workload "
                                        f"CSV (header {_HEADER_LINE})", line=line)
            if missing:
                raise FormatError(path, f"header lacks column(s) {', '.join(missing)} "
                                        f"(expected {_HEADER_LINE})", line=line)
            continue
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) != len(header):
            raise FormatError(path, f"expected {len(header)} comma-separated fields ({','.join(header)}), "
                                    f"got {len(row)}", line=line)
        try:
            items.append(_parse_row(dict(zip(header, row))))
        except _RowError as exc:
            raise FormatError(path, str(exc), line=line, field=exc.column) from None
    if header is None:
        raise FormatError(path, f"empty file (expected the header {_HEADER_LINE})")
    return items

"""What a file is, from its header: a replay log, an AICB workload CSV, or a simulator result.

The replay log (docs/formats.md section 5) and the workload CSV (section 4) share their 12 columns: a log
times its operations (``_elapsed_time`` of its communication and ``epoch_end`` rows), a workload does
not (at most its computation rows carry nanoseconds).  The first such row decides.  Anything else ends
with one line naming the file and what was expected (:data:`EXPECTED`).
"""

from __future__ import annotations

import csv
import os

from utils.errors import FormatError
from utils.io import TEXT_ENCODING

EXPECTED = ("a replay log (*_log.csv), an AICB workload CSV (comm_type,comm_group,...,count) or a simulator result "
            "(*EndToEnd.csv, *simai_layers.csv, *topo_stages.csv, *topo_layers.csv, *topo_collectives.csv)")
"""What the analysis commands read, for error messages."""

KINDS = ("log", "workload", "end_to_end", "simai_layers", "topo_stages", "topo_layers", "topo_collectives")
SIM_KINDS = KINDS[2:]

_LOG_REQUIRED = ("comm_type", "comm_group", "comm_group_size", "msg_size", "stage")
_HEADERS = (
    # (kind, columns the header starts with or holds)
    ("simai_layers", ("index", "layer_name", "fwd_compute_us", "ig_compute_us", "wg_compute_us")),
    ("topo_stages", ("stage", "compute_us", "tp_exposed_us")),
    ("topo_layers", ("stage", "layer", "fwd_compute_us", "bwd_compute_us")),
    ("topo_collectives", ("group", "comm_type", "size_bytes", "group_size")),
)
_NONE = frozenset({"", "none", "nan", "null"})


def _is_number(text: str) -> bool:
    if text.strip().lower() in _NONE:
        return False
    try:
        float(text)
    except ValueError:
        return False
    return True


def detect_kind(path: str | os.PathLike) -> str:
    """One of :data:`KINDS`.  Raises :class:`FormatError` for an unreadable, empty or unknown file,
    for a replay's ``*_detail.csv`` (the log beside it is the input) and for a log or workload
    with no rows after its header."""
    path = os.fspath(path)
    try:
        with open(path, newline="", encoding=TEXT_ENCODING) as handle:  # a byte-order mark skipped
            reader = csv.reader(handle)
            header: list[str] | None = None
            for row in reader:
                if not row or not "".join(row).strip():
                    continue
                if header is None and len(row) == 1 and row[0].strip().startswith("["):
                    continue  # AICB's legacy "[rank0 ~ rank127]" line before a workload's header
                if header is None:
                    header = [c.strip() for c in row]
                    kind = _header_kind(path, header, reader.line_num)
                    if kind != "log_or_workload":
                        return kind
                    continue
                if len(row) != len(header):
                    raise FormatError(path, f"expected {len(header)} comma-separated fields ({','.join(header)}), "
                                            f"got {len(row)}", line=reader.line_num)
                cells = dict(zip(header, row))
                ctype = cells.get("comm_type", "").strip()
                if ctype.endswith("computation"):
                    if os.path.basename(path).endswith("_log.csv"):
                        return "log"
                    continue
                # the first communication or epoch_end row: a log has timed it, a workload has not
                return "log" if _is_number(cells.get("_elapsed_time", "")) else "workload"
    except OSError as exc:
        raise FormatError(path, f"cannot read: {exc.strerror} (expected {EXPECTED})") from None
    except UnicodeDecodeError:
        raise FormatError(path, f"not a text file (expected {EXPECTED})") from None
    except csv.Error as exc:
        raise FormatError(path, f"not a CSV file ({exc}; expected {EXPECTED})") from None
    if header is None:
        raise FormatError(path, f"empty file (expected {EXPECTED})")
    rows = "no rows after the header"
    raise FormatError(path, f"{rows}: an empty replay log or workload (did the run stop before its first operation?)")


def _header_kind(path: str, header: list[str], line: int) -> str:
    if header[0] == "File name":
        return "end_to_end"
    for kind, columns in _HEADERS:
        if tuple(header[: len(columns)]) == columns:
            return kind
    if "row" in header and "max_elapsed_ms" in header:
        raise FormatError(path, "this is a replay's detail CSV: give the *_log.csv beside it (the detail file is "
                                "joined automatically)")
    if all(c in header for c in _LOG_REQUIRED):
        return "log_or_workload"
    shown = ",".join(header[:6]) + (",..." if len(header) > 6 else "")
    raise FormatError(path, f"unrecognised header {shown!r} (expected {EXPECTED})", line=line)

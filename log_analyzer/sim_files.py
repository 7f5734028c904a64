"""Simulation results for analysis: the simulator's result files read back, or a :class:`SimulationResult`.

``python -m simulator`` writes, under one prefix (``simulator/report.py``, docs/formats.md section 7):
``<prefix>EndToEnd.csv`` (SimAI's layout: the end-to-end terms in whole microseconds, then one row per
layer record), and ours: ``<prefix>simai_layers.csv`` (``--model simai``) or ``<prefix>topo_stages.csv``,
``topo_layers.csv`` and ``topo_collectives.csv`` (``--model topo``).  :meth:`SimResult.load` takes any
one of them and reads every file of the same prefix that is there, preferring our richer tables (real
numbers) over EndToEnd.csv's rounded ones.  SimAI's own EndToEnd.csv loads too.

Units: times in microseconds (``*_us``), shares in percent; the topo collectives' bandwidths in GB/s.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.plot import TERMS as BREAKDOWN
from simulator.result import TERMS
from utils.errors import FormatError
from utils.io import read_text

if TYPE_CHECKING:
    import pandas as pd

    from simulator.result import SimulationResult

END_TO_END = "EndToEnd.csv"
SIMAI_LAYERS = "simai_layers.csv"
TOPO_STAGES = "topo_stages.csv"
TOPO_LAYERS = "topo_layers.csv"
TOPO_COLLECTIVES = "topo_collectives.csv"
SUFFIXES = (END_TO_END, SIMAI_LAYERS, TOPO_STAGES, TOPO_LAYERS, TOPO_COLLECTIVES)
"""The file-name endings of one simulation's result files."""

# One definition of the terms and their order: the simulator's (its result and plot modules import
# nothing heavy, so reading a result file stays light).
TERM_LABELS = TERMS
"""EndToEnd.csv's terms in SimAI's order: ``(Totals attribute, EndToEnd header)``."""

LAYER_COLUMNS = ["stage", "layer", "fwd_compute_us", "bwd_compute_us", "comm_us", "exposed_comm_us"]
"""The uniform per-layer table: one row per layer record (simai) or per stage and layer (topo);
``bwd_compute_us`` = input-gradient + weight-gradient compute; ``comm_us`` every collective of the
layer, ``exposed_comm_us`` the part not overlapped with compute."""

BREAKDOWN_TERMS = BREAKDOWN
"""Terms of :meth:`SimResult.breakdown`, as ``SimulationResult.breakdown`` names them."""

_VALUE_RE = re.compile(r"^\s*(\S+?)\s*(?:\(\s*(\S+?)\s*%\s*\))?\s*$")


def _float(text: str) -> float:
    """A number as SimAI prints it (``-nan``, ``inf`` included); ValueError otherwise."""
    value = text.strip()
    if value.lower() in ("-nan", "nan", "+nan"):
        return math.nan
    return float(value)


def _time(text: str) -> float:
    """A time (or any amount that cannot be negative): a non-negative finite number; ValueError otherwise."""
    value = _float(text)
    if not 0.0 <= value < math.inf:
        raise ValueError(text)
    return value


def _rate(text: str) -> float:
    """A bandwidth: non-negative, or ``-nan`` / ``inf`` as SimAI prints them for a zero time; ValueError otherwise."""
    value = _float(text)
    if value < 0:
        raise ValueError(text)
    return value


_TIMES_EXPECTED = "a non-negative finite number"
_LAYER_FIELDS = ("fwd compute", "wg compute", "ig compute", "fwd exposed comm", "wg exposed comm", "ig exposed comm",
                 "fwd total comm", "fwd algbw", "fwd busbw", "wg total comm", "wg algbw", "wg busbw", "ig total comm",
                 "ig algbw", "ig busbw")
"""EndToEnd.csv's layer values after the name and the run (SimAI repeats ``algbw,busbw`` after each phase)."""
_MAX_INT = 2**63 - 1


def result_prefix(path: str | os.PathLike) -> tuple[str, str] | None:
    """``(prefix, suffix)`` of a simulator result file name, or None for another name."""
    name = os.fspath(path)
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)], suffix
    return None


def _read_text(path: str) -> str:
    return read_text(path, "a simulator result CSV")


def read_end_to_end(path: str) -> tuple[dict[str, float], pd.DataFrame]:
    """EndToEnd.csv: the terms (attribute name -> microseconds) and its per-layer rows as the uniform
    layer table (whole microseconds, as the file holds them)."""
    import pandas as pd

    lines = _read_text(path).splitlines()
    if not lines or not lines[0].strip():
        raise FormatError(path, "empty file (expected SimAI's EndToEnd.csv: 'File name, Expose DP comm, ...')")
    labels = [c.strip() for c in lines[0].split(",")]
    if labels[0] != "File name":
        raise FormatError(path, "first line is not 'File name, Expose DP comm, ...' (SimAI's EndToEnd.csv)", line=1)
    if len(lines) < 2:
        raise FormatError(path, "no values line after the header", line=2)
    cells = [c.strip() for c in lines[1].split(",")]
    known = dict((label, name) for name, label in TERM_LABELS)
    terms: dict[str, float] = {}
    # the file name (first cell) may itself hold commas: take the values from the right
    for label, cell in zip(reversed(labels[1:]), reversed(cells)):
        name = known.get(label)
        if name is None:
            continue
        match = _VALUE_RE.match(cell)
        try:
            terms[name] = _time(match.group(1)) if match else _time(cell)
        except ValueError:
            raise FormatError(path, f"expected 'microseconds (share%)' with {_TIMES_EXPECTED} of microseconds, got "
                                    f"{cell!r}", line=2, field=label) from None
    missing = [label for name, label in TERM_LABELS if name not in terms]
    if missing:
        raise FormatError(path, f"header lacks term(s) {', '.join(missing)}", line=1)
    rows = []
    for number, line in enumerate(lines[2:], start=3):
        parts = [c.strip() for c in next(csv.reader([line]))] if line.strip() else []
        if not parts or parts[0] == "layer_name":
            continue
        while parts and parts[-1] == "":
            parts.pop()  # SimAI ends some rows with a comma
        if len(parts) < 17:
            raise FormatError(path, f"expected 17 comma-separated layer fields, got {len(parts)}", line=number)
        # columns: fwd/wg/ig compute, fwd/wg/ig exposed, then fwd/wg/ig total comm with algbw, busbw after each
        v = []
        for k, cell in enumerate(parts[2:17]):
            rate = k in (7, 8, 10, 11, 13, 14)
            try:
                v.append(_rate(cell) if rate else _time(cell))
            except ValueError:
                what = "a non-negative bandwidth (or -nan / inf)" if rate else f"{_TIMES_EXPECTED} of microseconds"
                raise FormatError(path, f"expected {what}, got {cell!r}", line=number, field=_LAYER_FIELDS[k]) from None
        rows.append({"stage": pd.NA, "layer": parts[0], "fwd_compute_us": v[0], "bwd_compute_us": v[1] + v[2],
                     "comm_us": v[6] + v[9] + v[12], "exposed_comm_us": v[3] + v[4] + v[5]})
    return terms, _layer_frame(rows)


def _layer_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    frame = pd.DataFrame(rows, columns=LAYER_COLUMNS)
    frame["stage"] = frame["stage"].astype("Int64")
    frame["layer"] = frame["layer"].astype("string")
    return frame


def _read_table(path: str, required: tuple[str, ...], what: str) -> pd.DataFrame:
    import pandas as pd

    text = _read_text(path)
    if not text.strip():
        raise FormatError(path, f"empty file (expected {what} with the header {','.join(required)},...)")
    try:
        frame = pd.read_csv(io.StringIO(text), na_values=["-nan", "nan"])
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise FormatError(path, f"cannot parse as CSV: {str(exc).strip()}") from None
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise FormatError(path, f"header lacks column(s) {', '.join(missing)} (expected {what})", line=1)
    # every numeric column is parsed strictly, the optional ones too (an empty optional cell is absent):
    # a hexadecimal or other non-number left as text broke the first sum over it with a traceback
    for column in [*required, *(c for c in frame.columns if c not in required)]:
        kind = _numeric_kind(str(column))
        if kind is None:
            continue
        optional = column not in required
        converted = pd.to_numeric(frame[column], errors="coerce")
        values = converted.to_numpy(dtype=float)
        with np.errstate(invalid="ignore"):
            if kind == "rate":  # a zero time gives an infinite or undefined bandwidth
                bad = values < 0
            elif kind in ("time", "number"):
                bad = ~(np.isfinite(values) & (values >= 0))
            else:  # counts, stages, sizes: whole numbers that an int64 holds
                bad = ~(np.isfinite(values) & (values >= 0) & (values <= _MAX_INT) & (values == np.floor(values)))
        bad |= converted.isna().to_numpy() & frame[column].notna().to_numpy()
        if kind != "rate" and not optional:
            bad |= frame[column].isna().to_numpy()
        elif optional:
            bad &= frame[column].notna().to_numpy()
        if bad.any():
            index = int(np.flatnonzero(bad)[0])
            what = {"int": "a non-negative integer", "rate": "a non-negative bandwidth", "time": _TIMES_EXPECTED,
                    "number": _TIMES_EXPECTED}[kind]
            raise FormatError(path, f"expected {what}, got {frame[column].iloc[index]!r}", line=index + 2, field=column)
        frame[column] = converted
    return frame


_INT_NAMES = frozenset({"stage", "count", "group_size", "servers", "per_server", "records", "layer_index"})
_NUMBER_NAMES = frozenset({"congestion", "flops"})


def _numeric_kind(column: str) -> str | None:
    """How a result column is parsed: ``int`` (counts, stages, sizes), ``rate`` (bandwidths, -nan / inf
    allowed), ``time`` (microseconds), ``number`` (other non-negative amounts), or None (text)."""
    if column in _INT_NAMES or column.endswith("_bytes"):
        return "int"
    if column.endswith(("_gibps", "_gbps")):
        return "rate"
    if column.endswith("_us"):
        return "time"
    if column in _NUMBER_NAMES or column.endswith(("_gib", "_pct", "_ms", "_share")):
        return "number"
    return None


_SIMAI_LAYER_REQUIRED = ("layer_name", "fwd_compute_us", "ig_compute_us", "wg_compute_us", "fwd_comm_us", "ig_comm_us",
                         "wg_comm_us", "fwd_exposed_us", "ig_exposed_us", "wg_exposed_us")
_TOPO_STAGE_REQUIRED = ("stage", "compute_us", "tp_exposed_us", "ep_exposed_us", "dp_exposed_us", "dp_ep_exposed_us",
                        "pp_exposed_us", "other_exposed_us", "bubble_us", "end_us")
_TOPO_LAYER_REQUIRED = ("stage", "layer", "fwd_compute_us", "bwd_compute_us", "comm_us", "exposed_comm_us")
_TOPO_COLLECTIVE_REQUIRED = ("group", "comm_type", "size_bytes", "group_size", "time_us", "algbw_gbps", "busbw_gbps",
                             "count")


def _simai_layers(frame: pd.DataFrame) -> pd.DataFrame:
    """Our simai_layers.csv (or ``layer_table()`` of a simai result) as the uniform layer table."""
    import pandas as pd

    out = pd.DataFrame({
        "stage": pd.array([pd.NA] * len(frame), dtype="Int64"), "layer": frame["layer_name"].astype("string"),
        "fwd_compute_us": frame["fwd_compute_us"], "bwd_compute_us": frame["ig_compute_us"] + frame["wg_compute_us"],
        "comm_us": frame["fwd_comm_us"] + frame["ig_comm_us"] + frame["wg_comm_us"],
        "exposed_comm_us": frame["fwd_exposed_us"] + frame["ig_exposed_us"] + frame["wg_exposed_us"],
    }, columns=LAYER_COLUMNS)
    return out.reset_index(drop=True)


def _simai_terms_from_layers(frame: pd.DataFrame) -> dict[str, float]:
    """What simai_layers.csv alone tells of the terms: compute and the exposed comm per booked group.
    The bubble and PP terms are not in the file (EndToEnd.csv has them)."""
    compute = float((frame["fwd_compute_us"] + frame["ig_compute_us"] + frame["wg_compute_us"]).sum())
    groups = {"TP": 0.0, "EP": 0.0, "DP": 0.0, "DP_EP": 0.0}
    for booked, columns in (("fwd_ig_booked_to", ("fwd_exposed_us", "ig_exposed_us")), ("wg_booked_to", ("wg_exposed_us",))):
        if booked not in frame.columns:
            continue
        for group, part in frame.groupby(frame[booked].astype(str)):
            if group in groups:
                groups[group] += float(part[list(columns)].to_numpy().sum())
    exposed = sum(groups.values())
    return {"dp_exposed_us": groups["DP"], "dp_ep_exposed_us": groups["DP_EP"], "tp_exposed_us": groups["TP"],
            "ep_exposed_us": groups["EP"], "pp_exposed_us": math.nan, "bubble_us": math.nan, "compute_us": compute,
            "exposed_comm_us": exposed, "total_us": math.nan}


@dataclass
class SimResult:
    """One simulation's results, from files or from a :class:`~simulator.result.SimulationResult`.

    ``terms``: EndToEnd's terms in microseconds (attribute names of ``simulator.result.Totals``; NaN
    where the files given do not hold a term); ``layers``: :data:`LAYER_COLUMNS`; ``stages`` (topo):
    one row per pipeline stage as ``topo_stages.csv``; ``collectives`` (topo): one row per distinct
    collective as ``topo_collectives.csv``; ``files``: the files read; ``notes``: what is missing.
    """

    source: str
    model: str
    terms: dict[str, float]
    layers: pd.DataFrame
    stages: pd.DataFrame | None = None
    collectives: pd.DataFrame | None = None
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def iteration_us(self) -> float:
        """The iteration time in microseconds: the latest stage's end (topo), else EndToEnd's total."""
        if self.stages is not None and len(self.stages):
            return float(self.stages["end_us"].max())
        return float(self.terms.get("total_us", math.nan))

    @classmethod
    def load(cls, path: str | os.PathLike) -> SimResult:
        """Read a result file and every result file of the same prefix beside it.  Raises
        :class:`FormatError` naming the file (and line) when a file is malformed."""
        path = os.fspath(path)
        split = result_prefix(path)
        found: dict[str, str] = {}
        if split is not None:
            prefix, _ = split
            found = {suffix: prefix + suffix for suffix in SUFFIXES if os.path.isfile(prefix + suffix)}
        if path not in found.values():
            from log_analyzer.file_kinds import detect_kind

            kind = detect_kind(path)
            suffix = {"end_to_end": END_TO_END, "simai_layers": SIMAI_LAYERS, "topo_stages": TOPO_STAGES,
                      "topo_layers": TOPO_LAYERS, "topo_collectives": TOPO_COLLECTIVES}.get(kind)
            if suffix is None:
                raise FormatError(path, "not a simulator result (expected <prefix>EndToEnd.csv, simai_layers.csv or "
                                        "topo_stages.csv / topo_layers.csv / topo_collectives.csv)")
            found = {suffix: path}
        return cls._from_files(path, found)

    @classmethod
    def _from_files(cls, source: str, found: dict[str, str]) -> SimResult:
        notes: list[str] = []
        terms: dict[str, float] = {name: math.nan for name, _ in TERM_LABELS}
        layers = None
        stages = collectives = None
        model = "unknown"
        if END_TO_END in found:
            end_terms, layers = read_end_to_end(found[END_TO_END])
            terms.update(end_terms)
        if SIMAI_LAYERS in found:
            frame = _read_table(found[SIMAI_LAYERS], _SIMAI_LAYER_REQUIRED, "our simai_layers.csv")
            layers, model = _simai_layers(frame), "simai"
            if END_TO_END not in found:
                terms.update(_simai_terms_from_layers(frame))
                notes.append("bubble, exposed PP and the total are in EndToEnd.csv, which is not beside "
                             f"{os.path.basename(found[SIMAI_LAYERS])}")
        if TOPO_STAGES in found:
            stages, model = _read_table(found[TOPO_STAGES], _TOPO_STAGE_REQUIRED, "our topo_stages.csv"), "topo"
            if END_TO_END not in found and len(stages):
                # EndToEnd reports the busiest stage (the least bubble); its terms come from that row
                row = stages.loc[stages["bubble_us"].idxmin()]
                exposed = float(row[["tp_exposed_us", "ep_exposed_us", "dp_exposed_us", "dp_ep_exposed_us",
                                     "other_exposed_us"]].sum())
                terms.update({"dp_exposed_us": row["dp_exposed_us"], "dp_ep_exposed_us": row["dp_ep_exposed_us"],
                              "tp_exposed_us": row["tp_exposed_us"], "ep_exposed_us": row["ep_exposed_us"],
                              "pp_exposed_us": row["pp_exposed_us"], "bubble_us": row["bubble_us"],
                              "compute_us": row["compute_us"], "exposed_comm_us": exposed,
                              "total_us": float(stages["end_us"].max())})
        if TOPO_LAYERS in found:
            frame = _read_table(found[TOPO_LAYERS], _TOPO_LAYER_REQUIRED, "our topo_layers.csv")
            layers, model = _layer_frame(frame[LAYER_COLUMNS].to_dict("records")), "topo"
        if TOPO_COLLECTIVES in found:
            collectives = _read_table(found[TOPO_COLLECTIVES], _TOPO_COLLECTIVE_REQUIRED, "our topo_collectives.csv")
            model = "topo"
        if layers is None:
            layers = _layer_frame([])
        return cls(source=source, model=model, terms={k: float(v) for k, v in terms.items()}, layers=layers,
                   stages=stages, collectives=collectives, files=list(found.values()), notes=notes)

    @classmethod
    def from_result(cls, result: SimulationResult) -> SimResult:
        """The same view of an in-memory result (``simulator.api.simulate``'s return)."""
        terms = {name: float(getattr(result.totals, name)) for name, _ in TERM_LABELS}
        if result.details is not None:
            table = result.layer_table()
            layers = _layer_frame(table[LAYER_COLUMNS].to_dict("records"))
            stages, collectives = result.stage_table(), result.collective_table()
            if "total_us" not in collectives.columns and len(collectives):
                collectives["total_us"] = collectives["time_us"] * collectives["count"]
            model = "topo"
        else:
            layers, model = _simai_layers(result.layer_table()), "simai"
            stages = collectives = None
        return cls(source=str(result.workload_path), model=result.model or model, terms=terms, layers=layers,
                   stages=stages, collectives=collectives, files=[], notes=list(result.warnings))

    def breakdown(self) -> list[tuple[str, dict[str, float]]]:
        """Time per term in microseconds, one entry per stage (topo) or one for the rank (EndToEnd),
        as ``SimulationResult.breakdown``: compute, TP, EP, DP, DP_EP, PP, other, bubble."""
        if self.stages is not None and len(self.stages):
            return [(f"stage {int(row.stage)}", {
                "compute": float(row.compute_us), "TP": float(row.tp_exposed_us), "EP": float(row.ep_exposed_us),
                "DP": float(row.dp_exposed_us), "DP_EP": float(row.dp_ep_exposed_us), "PP": float(row.pp_exposed_us),
                "other": float(row.other_exposed_us), "bubble": float(row.bubble_us)})
                for row in self.stages.itertuples(index=False)]
        t = self.terms

        def term(name: str) -> float:
            value = t.get(name, math.nan)
            return 0.0 if math.isnan(value) else float(value)

        return [("rank", {"compute": term("compute_us"), "TP": term("tp_exposed_us"), "EP": term("ep_exposed_us"),
                          "DP": term("dp_exposed_us"), "DP_EP": term("dp_ep_exposed_us"), "PP": term("pp_exposed_us"),
                          "other": 0.0, "bubble": term("bubble_us")})]

    def summary_table(self) -> pd.DataFrame:
        """One row per EndToEnd term: ``term`` (SimAI's label), ``time_us``, ``share_pct`` of the total."""
        import pandas as pd

        total = self.terms.get("total_us", math.nan)
        rows = [(label, self.terms.get(name, math.nan),
                 self.terms.get(name, math.nan) / total * 100 if total and not math.isnan(total) else math.nan)
                for name, label in TERM_LABELS]
        return pd.DataFrame(rows, columns=["term", "time_us", "share_pct"])

    def layer_summary(self) -> pd.DataFrame:
        """Per layer (per layer name for simai, whose records repeat once per micro-batch; per stage and
        layer for topo): ``records``, the four times of :data:`LAYER_COLUMNS` summed (us),
        ``overlapped_comm_us`` (comm hidden behind compute) and ``total_us`` (compute + exposed comm),
        largest first."""
        frame = self.layers
        keys = ["layer"] if frame["stage"].isna().all() else ["stage", "layer"]
        grouped = frame.groupby(keys, sort=False, dropna=False).agg(
            records=("layer", "size"), fwd_compute_us=("fwd_compute_us", "sum"), bwd_compute_us=("bwd_compute_us", "sum"),
            comm_us=("comm_us", "sum"), exposed_comm_us=("exposed_comm_us", "sum")).reset_index()
        if "stage" not in grouped.columns:
            grouped.insert(0, "stage", None)
            grouped["stage"] = grouped["stage"].astype("Int64")
        grouped["overlapped_comm_us"] = (grouped["comm_us"] - grouped["exposed_comm_us"]).clip(lower=0.0)
        grouped["total_us"] = grouped["fwd_compute_us"] + grouped["bwd_compute_us"] + grouped["exposed_comm_us"]
        return grouped.sort_values("total_us", ascending=False, kind="stable").reset_index(drop=True)

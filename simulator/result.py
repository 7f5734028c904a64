"""What a simulation returns: per-layer costs, the end-to-end terms, the trace intervals, and the
tables of them (as rows, which ``simulator/report.py`` writes, and as pandas views).

Times are integer nanoseconds per collective (``*_ns``) and microseconds as real numbers for the
end-to-end terms (``*_us``); sizes are bytes; bandwidths GiB/s (``*_gibps``), as SimAI reports them.
pandas is imported only when a table is asked for, so that the command line stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from simulator.repeat import with_index

if TYPE_CHECKING:  # pragma: no cover
    import pandas

    from simulator.topo.result import TopoDetails

_TOPO = ("StageResult", "CollectiveRecord", "LayerTimes", "Interval", "TopoDetails")
"""What ``--model topo`` adds lives in :mod:`simulator.topo.result` (imported on use: a SimAI run needs none)."""


def __getattr__(name: str) -> Any:
    if name in _TOPO:  # the old path of the topo model's types (simulator/ was split into folders)
        import warnings

        from simulator.topo import result as topo_result

        warnings.warn(f"simulator.result.{name} moved to simulator.topo.result.{name}; the old path goes in the next "
                      "release", DeprecationWarning, stacklevel=2)
        return getattr(topo_result, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

PHASES = ("fwd", "ig", "wg")
"""Record columns: forward, input gradient (backward), weight gradient."""

TERMS = (
    ("dp_exposed_us", "Expose DP comm"), ("dp_ep_exposed_us", "Expose DP_EP comm"),
    ("tp_exposed_us", "Expose TP comm"), ("ep_exposed_us", "Expose_EP_comm"), ("pp_exposed_us", "Expose_PP_comm"),
    ("bubble_us", "bubble time"), ("compute_us", "total comp"), ("exposed_comm_us", "total exposed comm"),
    ("total_us", "Total time"),
)
"""End-to-end terms: attribute of :class:`Totals` and SimAI's EndToEnd.csv header, in SimAI's order."""


@dataclass(frozen=True, slots=True)
class CollectiveCost:
    """One comm column of one layer record, as costed.

    ``comm_type`` is a CommType value (``all_reduce``, ``all_gather``, ``reduce_scatter``,
    ``all_to_all``) or ``None``; ``group`` is ``TP``, ``EP``, ``DP``, ``DP_EP``, ``OTHER`` (a
    suffix SimAI does not know) or ``""`` (no communication); ``group_size`` the n of the busbw
    factor; ``size_bytes`` the size costed (after the forward 4 KiB floor); ``time_ns`` the
    whole-ns time; ``how`` the rule that priced it (``bandwidth``, ``latency``, ``none``,
    ``group-size-1``, ``unknown-group``); ``ratio`` the efficiency ratio and ``model_busbw_gibps``
    the ratio * busbw the bandwidth rule divided by (``None`` for the other rules);
    ``algbw_gibps`` / ``busbw_gibps`` the report's bandwidth columns (NaN / inf where SimAI prints
    ``-nan`` / ``inf``).  Costs are shared between records with the same column, token and size.
    """

    token: str
    comm_type: str | None
    group: str
    group_size: int
    size_bytes: int
    time_ns: int
    how: str
    ratio: float
    model_busbw_gibps: float | None
    algbw_gibps: float
    busbw_gibps: float


@dataclass(frozen=True, slots=True)
class LayerResult:
    """One layer record: compute times in ns (as SimAI holds them), its three comm columns, and
    the exposed (not overlapped) part of each in ns with the group it is booked to (``TP`` or
    ``EP`` for fwd and ig, ``DP`` or ``DP_EP`` for wg)."""

    index: int
    name: str
    fwd_compute_ns: int
    ig_compute_ns: int
    wg_compute_ns: int
    fwd: CollectiveCost
    ig: CollectiveCost
    wg: CollectiveCost
    fwd_exposed_ns: int
    ig_exposed_ns: int
    wg_exposed_ns: int
    booked_fwd_ig: str
    booked_wg: str

    @property
    def compute_ns(self) -> int:
        return self.fwd_compute_ns + self.ig_compute_ns + self.wg_compute_ns


@dataclass(frozen=True)
class Totals:
    """The end-to-end terms in microseconds (docs/simai_analytical.md, "Exposure, bubble, totals")."""

    dp_exposed_us: float
    dp_ep_exposed_us: float
    tp_exposed_us: float
    ep_exposed_us: float
    pp_exposed_us: float
    bubble_us: float
    compute_us: float
    exposed_comm_us: float
    total_us: float

    def share_pct(self, name: str) -> float:
        """A term's share of the total, in percent (NaN for an empty workload)."""
        value = getattr(self, name)
        return value / self.total_us * 100 if self.total_us else float("nan")


@dataclass
class SimulationResult:
    """The outcome of :func:`simulator.api.simulate`.

    ``setup`` holds the resolved numbers the model used (group sizes, bandwidths in GiB/s, ...);
    ``warnings`` what the user should know (clamped ratio lookups, SimAI crashes avoided, ...).
    """

    model: str
    workload_path: str
    layers: list[LayerResult]
    totals: Totals
    setup: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    details: TopoDetails | None = None
    """Only ``--model topo`` fills this (stages, collectives, per-layer times, trace)."""
    memory: Any = None
    """A job's memory per GPU (:class:`mocked_model.memory.MemoryEstimate`); None for SimAI files."""

    @property
    def iteration_us(self) -> float:
        """The iteration time in microseconds (the EndToEnd total)."""
        return self.details.iteration_us if self.details is not None else self.totals.total_us

    def layer_table(self) -> pandas.DataFrame:
        """One row per layer record (simai model) or per stage and layer (topo model); every time in
        microseconds, units in the column names."""
        import pandas

        header, *rows = topo_layer_rows(self) if self.details is not None else layer_rows(self)
        return pandas.DataFrame(rows, columns=header)

    def stage_table(self) -> pandas.DataFrame:
        """Topo model: one row per pipeline stage (:class:`StageResult`, microseconds)."""
        import pandas

        header, *rows = stage_rows(self)
        return pandas.DataFrame(rows, columns=header)

    def collective_table(self) -> pandas.DataFrame:
        """Topo model: one row per distinct collective with NCCL's algorithm and protocol."""
        import pandas

        header, *rows = collective_rows(self)
        return pandas.DataFrame(rows, columns=header)

    def trace_table(self) -> pandas.DataFrame:
        """Topo model: every interval of the iteration (stage, stream, start_us, duration_us, ...)."""
        import pandas

        rows = [(i.stage, i.stream, i.start_s * 1e6, i.duration_s * 1e6, i.category, i.name, i.layer, i.microbatch)
                for i in (self.details.intervals() if self.details is not None else [])]
        return pandas.DataFrame(rows, columns=["stage", "stream", "start_us", "duration_us", "category", "name",
                                               "layer", "microbatch"])

    def breakdown(self) -> list[tuple[str, dict[str, float]]]:
        """Time per term in us for plotting: one entry per stage (topo) or one for the rank (simai).
        Terms: compute, TP, EP, DP, DP_EP, PP, other, bubble (and CP, topo stages with context parallelism)."""
        if self.details is not None:
            return [(f"stage {st.stage}", {"compute": st.compute_us, "TP": st.tp_exposed_us, "EP": st.ep_exposed_us,
                                           "DP": st.dp_exposed_us, "DP_EP": st.dp_ep_exposed_us, "PP": st.pp_exposed_us,
                                           "other": st.other_exposed_us, "bubble": st.bubble_us,
                                           **({"CP": st.cp_exposed_us} if st.cp_comm_us else {}),
                                           **({"host": st.host_us} if st.host_us else {})})
                    for st in self.details.stages]
        t = self.totals
        return [("rank", {"compute": t.compute_us, "TP": t.tp_exposed_us, "EP": t.ep_exposed_us, "DP": t.dp_exposed_us,
                          "DP_EP": t.dp_ep_exposed_us, "PP": t.pp_exposed_us, "other": 0.0, "bubble": t.bubble_us})]

    def summary_table(self) -> pandas.DataFrame:
        """One row per end-to-end term: ``term``, ``time_us``, ``share_pct``."""
        import pandas

        return pandas.DataFrame(
            [(label, getattr(self.totals, name), self.totals.share_pct(name)) for name, label in TERMS],
            columns=["term", "time_us", "share_pct"])


# ---- tables as rows (a header row first): the pandas views above and the report's CSV files --------

LAYER_HEADER: list[Any] = ["index", "layer_name", "fwd_compute_us", "ig_compute_us", "wg_compute_us"]
for _phase in PHASES:
    LAYER_HEADER += [f"{_phase}_comm_token", f"{_phase}_comm_type", f"{_phase}_group", f"{_phase}_group_size",
                     f"{_phase}_size_bytes", f"{_phase}_comm_us", f"{_phase}_exposed_us", f"{_phase}_algbw_gibps",
                     f"{_phase}_busbw_gibps", f"{_phase}_cost_rule"]
LAYER_HEADER += ["fwd_ig_booked_to", "wg_booked_to"]


def layer_row(layer: LayerResult, index: int | None = None) -> list[Any]:
    """One record's row of :func:`layer_rows` (``index`` overrides the layer's own)."""
    row: list[Any] = [layer.index if index is None else index, layer.name, layer.fwd_compute_ns / 1000,
                      layer.ig_compute_ns / 1000, layer.wg_compute_ns / 1000]
    for cost, exposed_ns in ((layer.fwd, layer.fwd_exposed_ns), (layer.ig, layer.ig_exposed_ns),
                             (layer.wg, layer.wg_exposed_ns)):
        row += [cost.token, cost.comm_type or "", cost.group, cost.group_size, cost.size_bytes,
                cost.time_ns / 1000, exposed_ns / 1000, cost.algbw_gibps, cost.busbw_gibps, cost.how]
    row += [layer.booked_fwd_ig, layer.booked_wg]
    return row


def layer_rows(result: SimulationResult, header_only: bool = False) -> list[list[Any]]:
    """Our per-layer table: a header row, then one row per record (times in us, sizes in bytes,
    bandwidths in GiB/s)."""
    rows: list[list[Any]] = [list(LAYER_HEADER)]
    if not header_only:
        rows += [layer_row(layer, index) for layer, index in with_index(result.layers)]
    return rows


STAGE_HEADER = ("stage", "compute_us", "tp_exposed_us", "ep_exposed_us", "dp_exposed_us", "dp_ep_exposed_us",
                "pp_exposed_us", "other_exposed_us", "bubble_us", "end_us", "tp_comm_us", "ep_comm_us", "dp_comm_us",
                "dp_ep_comm_us", "pp_comm_us", "flops", "cp_exposed_us", "cp_comm_us", "host_us")
COLLECTIVE_HEADER = ("group", "comm_type", "size_bytes", "group_size", "servers", "per_server", "tier", "algorithm",
                     "protocol", "time_us", "algbw_gbps", "busbw_gbps", "congestion", "count", "total_us", "stages")
TOPO_LAYER_HEADER = ("stage", "layer", "fwd_compute_us", "bwd_compute_us", "comm_us", "exposed_comm_us")


def _need_details(result: SimulationResult):
    if result.details is None:
        raise ValueError("this table needs a --model topo result")
    return result.details


MEMORY_HEADER = ("memory_gib", "memory_weights_gib", "memory_activations_gib")
"""Per-stage memory columns of ``topo_stages.csv`` when the input was a job (GiB = 2^30 bytes)."""


def stage_rows(result: SimulationResult) -> list[list[Any]]:
    """Topo model: a header row, then one row per pipeline stage (microseconds; with a job's memory per
    GPU in GiB after them)."""
    details = _need_details(result)
    rows = [list(STAGE_HEADER)] + [[getattr(st, name) for name in STAGE_HEADER] for st in details.stages]
    memory = result.memory
    if memory is not None and len(memory.stages) == len(details.stages):
        rows[0] += MEMORY_HEADER
        for row, stage in zip(rows[1:], memory.stages):
            row += [stage.total_bytes / 2**30, stage.weights_bytes / 2**30, stage.activations_bytes / 2**30]
    return rows


def collective_rows(result: SimulationResult) -> list[list[Any]]:
    """Topo model: a header row, then one row per distinct collective (most total time first)."""
    details = _need_details(result)
    return [list(COLLECTIVE_HEADER)] + [[getattr(c, name) for name in COLLECTIVE_HEADER] for c in details.collectives]


def topo_layer_rows(result: SimulationResult) -> list[list[Any]]:
    """Topo model: a header row, then one row per stage and layer (microseconds per iteration)."""
    details = _need_details(result)
    return [list(TOPO_LAYER_HEADER)] + [[getattr(lt, name) for name in TOPO_LAYER_HEADER] for lt in details.layer_times]

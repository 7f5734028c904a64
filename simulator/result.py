"""What a simulation returns: per-layer costs, the end-to-end terms, and pandas views of them.

Times are integer nanoseconds per collective (``*_ns``) and microseconds as real numbers for the
end-to-end terms (``*_us``); sizes are bytes; bandwidths GiB/s (``*_gibps``), as SimAI reports them.
pandas is imported only when a table is asked for, so that the command line stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import pandas

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
    """The end-to-end terms in microseconds (SIMAI_ANALYTICAL.md, "Exposure, bubble, totals")."""

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

    def layer_table(self) -> pandas.DataFrame:
        """One row per layer record; every time in microseconds, units in the column names."""
        import pandas

        from simulator.report import layer_rows
        header, *rows = layer_rows(self)
        return pandas.DataFrame(rows, columns=header)

    def summary_table(self) -> pandas.DataFrame:
        """One row per end-to-end term: ``term``, ``time_us``, ``share_pct``."""
        import pandas

        return pandas.DataFrame(
            [(label, getattr(self.totals, name), self.totals.share_pct(name)) for name, label in TERMS],
            columns=["term", "time_us", "share_pct"])

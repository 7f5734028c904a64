"""Fit the topo model's link terms to a network profile (``python -m profiling calibrate``).

Two fits of the same measured points (:mod:`simulator.profiles.db`):

1. Per series (one collective, one group shape): nccl-tests' alpha-beta line
   ``time = alpha + size x factor(n) / busbw`` by least squares on relative errors, so that small and
   large messages count alike.  ``alpha`` is the latency, ``busbw`` the asymptotic bus bandwidth.
2. One link model for the whole profile: the effective intra-node bus bandwidth ``B_nv`` (NVLink on a
   GPU node), the effective inter-node bandwidth of one GPU's NIC share ``B_nic``, and the scale ``s``
   of NCCL's latency terms, that make :func:`simulator.topo.collectives.collective_cost` (NCCL's tuning model:
   ring and tree, LL/LL128/Simple, the cheapest chosen) and :func:`~simulator.topo.collectives.p2p_cost`
   reproduce every measured time.  Each group is placed as the derived two-tier fabric places it
   (``ranks / ranks_per_node`` servers, ``ranks_per_node`` GPUs on each; SimAI's link latencies).  The
   model is piecewise linear in ``(s, 1/B_nv, 1/B_nic)`` (the protocol and algorithm choice and the
   slower of two link classes pick the piece), so Gauss-Newton on the active piece, repeated until the
   choice settles, finds the least-squares fit of relative errors; a term that no point depends on
   (``B_nic`` of a one-node profile) is left unfitted and reported so.

Efficiency = fitted bandwidth / nominal rate (``--nvlink_efficiency`` / ``--nic_efficiency`` of the topo
model) when the nominal rates are known; the latency scale is ``--latency_scale``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from simulator.topo.collectives import GroupShape, LinkModel, busbw_factor, collective_cost, p2p_cost
from simulator.topo.fabric import NIC_LINK_LATENCY_S, NVLINK_LINK_LATENCY_S

UNIT_BPS = 1e9
"""The nominal rate the fit places every link at: its 'efficiency' is then its bandwidth in GB/s."""
MAX_ITERATIONS = 100


@dataclass(frozen=True)
class Point:
    """One measured point: collective (``send_recv`` for p2p), bytes, ranks, ranks per node, seconds."""

    kind: str
    size: int
    ranks: int
    ranks_per_node: int
    time_s: float

    @property
    def servers(self) -> int:
        return self.ranks // self.ranks_per_node


def points_of(tables: dict) -> list[Point]:
    """Every row of a network profile (``{kind: NetworkTable}``) as a :class:`Point`."""
    out = []
    for kind, table in tables.items():
        for n, r, s, t in zip(table.ranks, table.ranks_per_node, table.size_bytes, table.time_us):
            out.append(Point(kind, s, n, r, t * 1e-6))
    return out


def fit_shape(ranks: int, ranks_per_node: int, nvlink_Bps: float = UNIT_BPS, nic_Bps: float = UNIT_BPS) -> GroupShape:
    """A group of ``ranks`` with ``ranks_per_node`` on each server, on the derived two-tier fabric."""
    servers = max(ranks // max(ranks_per_node, 1), 1)
    return GroupShape(ranks, servers, ranks_per_node, "NVSwitch" if servers == 1 else "ASW", nvlink_Bps, nic_Bps,
                      2 * NVLINK_LINK_LATENCY_S, 0.0 if servers == 1 else 2 * NIC_LINK_LATENCY_S)


def model_time(kind: str, size: float, shape: GroupShape, links: LinkModel) -> float:
    """Seconds of one collective (``send_recv``: one p2p transfer) by the topo model's formulas."""
    if kind == "send_recv":
        same = shape.servers <= 1
        latency = 2 * (NVLINK_LINK_LATENCY_S if same else NIC_LINK_LATENCY_S)
        bottleneck = shape.nvlink_Bps if same else shape.nic_Bps
        return p2p_cost(size, same, bottleneck, latency, links, shape.congestion).time_s
    return collective_cost(kind, size, shape, links).time_s


@dataclass(frozen=True)
class SeriesFit:
    """nccl-tests' line for one series: ``alpha_us`` and ``busbw_gbps`` (None: the sizes do not pin it)."""

    kind: str
    ranks: int
    ranks_per_node: int
    alpha_us: float | None
    busbw_gbps: float | None
    sizes: tuple[int, ...]
    measured_us: tuple[float, ...]
    fitted_us: tuple[float, ...]

    def residuals_pct(self) -> list[float]:
        return [(f - m) / m * 100 for f, m in zip(self.fitted_us, self.measured_us)]


def alpha_beta(kind: str, ranks: int, ranks_per_node: int, sizes: tuple[int, ...], times_us: tuple[float, ...]) -> SeriesFit:
    """Least squares of ``t = alpha + size x factor / busbw`` on relative errors."""
    factor = busbw_factor(kind, ranks) if kind != "send_recv" else 1.0
    t = np.asarray(times_us, dtype=float)
    x = np.asarray(sizes, dtype=float) * factor
    alpha = busbw = None
    fitted = t.copy()
    if len(t) >= 2 and factor > 0 and np.ptp(x) > 0:
        a = np.stack([np.ones_like(x), x], axis=1) / t[:, None]
        (alpha_fit, slope), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
        if slope > 0:
            alpha, busbw = float(alpha_fit), float(1.0 / slope / 1e-6 / 1e9)  # us per byte -> GB/s
            fitted = alpha_fit + slope * x
    return SeriesFit(kind, ranks, ranks_per_node, alpha, busbw, tuple(sizes), tuple(times_us), tuple(float(v) for v in fitted))


@dataclass
class Calibration:
    """The fitted link model of a profile.  ``nvlink_gbps`` / ``nic_gbps``: effective bus bandwidths
    (GB/s) inside a node and of one GPU's NIC share across nodes (None: not measured);
    ``latency_scale``: multiplies NCCL's latencies; ``points`` and ``fitted_s`` the data and the model's
    times; ``rms_pct`` the root-mean-square relative error."""

    nvlink_gbps: float | None
    nic_gbps: float | None
    latency_scale: float
    points: list[Point] = field(default_factory=list)
    fitted_s: list[float] = field(default_factory=list)
    iterations: int = 0

    @property
    def rms_pct(self) -> float:
        if not self.points:
            return 0.0
        errors = [(f - p.time_s) / p.time_s for p, f in zip(self.points, self.fitted_s)]
        return math.sqrt(sum(e * e for e in errors) / len(errors)) * 100

    def links(self, fallback: LinkModel | None = None, shape: GroupShape | None = None) -> tuple[GroupShape | None, LinkModel]:
        """``(shape with the fitted bandwidths, link model)`` for pricing ``shape`` (its placement,
        latencies and congestion kept); a term the profile did not measure keeps ``shape``'s nominal rate
        times ``fallback``'s efficiency."""
        fb = fallback or LinkModel()
        if shape is None:
            shape = fit_shape(2, 2)
        nv = self.nvlink_gbps * 1e9 if self.nvlink_gbps else shape.nvlink_Bps * fb.nvlink_efficiency
        nic = self.nic_gbps * 1e9 if self.nic_gbps else shape.nic_Bps * fb.nic_efficiency
        return replace(shape, nvlink_Bps=nv, nic_Bps=nic), LinkModel(1.0, 1.0, self.latency_scale)

    def efficiencies(self, nvlink_nominal_gbps: float | None,
                     nic_nominal_gbps: float | None) -> tuple[float | None, float | None]:
        nv = self.nvlink_gbps / nvlink_nominal_gbps if self.nvlink_gbps and nvlink_nominal_gbps else None
        nic = self.nic_gbps / nic_nominal_gbps if self.nic_gbps and nic_nominal_gbps else None
        return nv, nic


def _evaluate(points: list[Point], x: np.ndarray) -> np.ndarray:
    links = LinkModel(1.0 / x[1], 1.0 / x[2], x[0])
    return np.array([model_time(p.kind, p.size, fit_shape(p.ranks, p.ranks_per_node), links) for p in points])


def _initial(points: list[Point]) -> np.ndarray:
    def busbw(p: Point) -> float:
        factor = busbw_factor(p.kind, p.ranks) if p.kind != "send_recv" else 1.0
        return p.size / p.time_s * (factor or 1.0) / 1e9

    intra = [busbw(p) for p in points if p.servers == 1]
    inter = [busbw(p) for p in points if p.servers > 1]
    b_nv = max(intra) if intra else 100.0
    b_nic = max(inter) if inter else 10.0
    return np.array([1.0, 1.0 / b_nv, 1.0 / b_nic])


def calibrate(points: list[Point]) -> Calibration:
    """Fit ``(latency scale, B_nv, B_nic)`` to ``points`` (see the module docstring)."""
    if not points:
        return Calibration(None, None, 1.0)
    t = np.array([p.time_s for p in points])
    x = _initial(points)
    free = np.ones(3, dtype=bool)
    cost = math.inf
    iterations = 0
    for iterations in range(1, MAX_ITERATIONS + 1):  # noqa: B007
        f0 = _evaluate(points, x)
        grad = np.zeros((len(points), 3))
        for j in range(3):
            step = x[j] * 1e-6 if x[j] > 0 else 1e-6
            xj = x.copy()
            xj[j] += step
            grad[:, j] = (_evaluate(points, xj) - f0) / step
        scale = np.abs(grad).max(axis=0)
        free = scale * np.abs(x) > 1e-9 * t.min()
        intercept = f0 - grad @ x
        a = grad[:, free] / t[:, None]
        b = (t - intercept) / t
        solution, *_ = np.linalg.lstsq(a, b, rcond=None)
        target = x.copy()
        target[free] = solution
        cost0 = float(np.sum(((f0 - t) / t) ** 2))
        step_size = 1.0
        while True:
            trial = x + step_size * (target - x)
            if np.all(trial[1:] > 0) and trial[0] >= 0:
                new_cost = float(np.sum(((_evaluate(points, trial) - t) / t) ** 2))
                if new_cost <= cost0 * (1 + 1e-12):
                    break
            step_size /= 2
            if step_size < 1e-6:
                trial, new_cost = x, cost0
                break
        change = float(np.max(np.abs(trial - x) / np.maximum(np.abs(x), 1e-30)))
        x, cost = trial, new_cost
        if change < 1e-9:
            break
    del cost
    fitted = _evaluate(points, x)
    intra = any(p.servers == 1 for p in points) and free[1]
    inter = any(p.servers > 1 for p in points) and free[2]
    return Calibration(float(1.0 / x[1]) if intra else None, float(1.0 / x[2]) if inter else None, float(x[0]), list(points),
                       [float(v) for v in fitted], iterations)


def series_fits(tables: dict) -> list[SeriesFit]:
    """nccl-tests' alpha-beta line of every (collective, ranks, ranks per node) series of a profile."""
    out = []
    for kind, table in tables.items():
        for (n, r), (sizes, times) in table.series().items():
            out.append(alpha_beta(kind, n, r, sizes, times))
    return out

"""What ``--model topo`` adds to a :class:`simulator.result.SimulationResult`: per stage, per distinct
collective and per layer times, the trace intervals, MFU (``details``).  Times are microseconds unless a
name says seconds; bandwidths GB/s (10^9 B/s)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class StageResult:
    """One pipeline stage of a ``--model topo`` iteration, in microseconds.  The terms add up to
    the iteration time: compute + exposed TP/EP/DP/DP_EP/PP/other comm + host + bubble.  ``other`` is
    step synchronisation across stages (tied-embedding and gradient-norm all-reduces), ``cp`` context parallelism's
    attention traffic (ring exchanges, all-to-alls, all-gathers; 0 without it); ``end_us``
    when the stage finished; ``*_comm_us`` every collective's time in that group, exposed or not."""

    stage: int
    compute_us: float
    tp_exposed_us: float
    ep_exposed_us: float
    dp_exposed_us: float
    dp_ep_exposed_us: float
    pp_exposed_us: float
    other_exposed_us: float
    bubble_us: float
    end_us: float
    tp_comm_us: float
    ep_comm_us: float
    dp_comm_us: float
    dp_ep_comm_us: float
    pp_comm_us: float
    flops: float | None = None
    cp_exposed_us: float = 0.0
    """Context parallelism's collectives and ring exchanges (its own term; SimAI's EndToEnd books it to TP)."""
    cp_comm_us: float = 0.0
    host_us: float = 0.0
    """The GPU waiting for the host (CPU) to issue its next kernel (:mod:`simulator.topo.host_model`): eager launches
    slower than the kernels, and the drains after host-device synchronisations."""

    @property
    def exposed_comm_us(self) -> float:
        return (self.tp_exposed_us + self.ep_exposed_us + self.dp_exposed_us + self.dp_ep_exposed_us
                + self.other_exposed_us + self.cp_exposed_us)


@dataclass(frozen=True)
class CollectiveRecord:
    """One distinct collective of a ``--model topo`` run (same group shape, type and size): how it
    was costed and how often it runs per iteration over all stages.  Times in microseconds,
    bandwidths in GB/s (10^9 B/s); ``algorithm``/``protocol`` NCCL's choice (``ring``, ``tree``,
    ``pairwise``, ``p2p``; ``LL``, ``LL128``, ``Simple``); ``congestion`` the inter-server bandwidth
    divisor of oversubscribed tiers (1 = none)."""

    group: str
    comm_type: str
    size_bytes: int
    group_size: int
    servers: int
    per_server: int
    tier: str
    algorithm: str
    protocol: str
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    congestion: float
    count: int
    stages: str

    @property
    def total_us(self) -> float:
        return self.time_us * self.count


@dataclass(frozen=True)
class LayerTimes:
    """Per stage and layer (``layers.3``, ``embedding``, ``output``, ``loss``, ``grad_sync``, a SimAI
    record name, ...): its compute, its collectives' time and the exposed part, per iteration, us."""

    stage: int
    layer: str
    fwd_compute_us: float
    bwd_compute_us: float
    comm_us: float
    exposed_comm_us: float


@dataclass(slots=True)
class Interval:
    """A stretch of one stream of one stage: start and duration in seconds from the iteration start."""

    stage: int
    stream: str
    start_s: float
    duration_s: float
    category: str
    name: str
    layer: str
    microbatch: int = -1


@dataclass
class TopoDetails:
    """What ``--model topo`` adds to a result: the iteration time, every stage, every distinct
    collective, per-layer times, MFU (model FLOPs, Megatron's count without recomputation, against the dense bf16
    peak, the published convention; None when FLOPs or compute times are unknown), the hardware FLOPs (every
    computation item's, recomputation included) and their utilisation of the dense peak of the GEMMs' precision
    (``hfu``, at most 1), the stage the EndToEnd terms describe (the busiest: least bubble), and the trace
    intervals (built on demand)."""

    iteration_us: float
    reported_stage: int
    stages: list[StageResult]
    collectives: list[CollectiveRecord]
    layer_times: list[LayerTimes]
    mfu: float | None
    model_flops: float | None
    peak_tflops: float | None
    intervals: Callable[[], list[Interval]] = field(repr=False, default=list)
    hardware_flops: float | None = None
    hfu: float | None = None
    hfu_peak_tflops: float | None = None
    bubble_fill: tuple[float, list] | None = None
    """``--fill_bubbles``: (the iteration without filling in microseconds, one
    :class:`simulator.topo.bubble_fill.FillRow` per stage); None without it."""

"""Alpha-beta costs of NCCL's collective algorithms over one group's placement (``--model topo``).

Every formula here is NCCL's own performance model (``ncclTopoTuneModel`` / ``ncclTopoGetAlgoTime``
in NVIDIA/nccl ``src/graph/tuning.cc``, the 2.19-2.21 releases) applied to bandwidths taken from the
topology instead of NCCL's topology search, with the simplifications listed under "Differences".
NCCL's tuner computes, per collective, algorithm (ring, tree) and protocol (LL, LL128, Simple)::

    time = latency(algorithm, protocol) + size / algbw(algorithm, protocol)

and runs the cheapest; we do the same and report the choice.  Units: sizes in bytes, bandwidths in
bytes per second (``*_Bps``; GB/s = 1e9 B/s as ``utils.units`` defines), latencies and times in
seconds unless a name says ``_us``.

Bus bandwidth of a group (:class:`GroupShape`: n ranks on m servers, k per server):

- one server: ``B = B_nv``, the GPU's NVLink bandwidth (sum of its GPU-NVSwitch links) times the
  NVLink efficiency;
- several servers, one member per server: ``B = B_nic / c``, the member's NIC share (server NIC
  bandwidth / GPUs per server: its own NIC on rail-optimised fabrics) times the NIC efficiency,
  divided by the congestion factor ``c >= 1`` of the tiers its traffic climbs (:func:`congestion`);
- several servers, k > 1 members each: NCCL's ring enters and leaves every server once per channel
  and spreads its channels over the k members' NICs, so every NIC carries 1/k of the traffic that
  each NVLink carries: ``B = min(B_nv, k * B_nic / c)``.  This is the pipelined equivalent of the
  hierarchical view (reduce-scatter inside the server, all-reduce of S/k across servers on k rails,
  all-gather inside): the slower link class sets the pace of the pipelined ring.

Ring (all-reduce, all-gather, reduce-scatter; broadcast and reduce as a pipelined chain)::

    steps      = 2(n-1) all-reduce, n-1 otherwise;  inter = 2(m-1) resp. m-1 of them cross servers
    latency    = baseLat[ring][p] + (steps - inter) * intraLat[p] + inter * interLat[p]
    intraLat   = hwLat[NVLink][ring][p] + NVLink path latency   (multi-server: >= NET_OVERHEAD, x3 Simple)
    interLat   = hwLat[NET][ring][p] + network path latency    (Simple: path latency twice, NCCL's flush)
    all-reduce, Simple, m > 1: latency * 1.4                  (NCCL's "plateau effect of ring", sm80+)
    algbw      = B * proto(p) / F,  F = 2(n-1)/n all-reduce, (n-1)/n all-gather/reduce-scatter, 1 chain
    proto      = LL: 1/4 (1/3 for one-server all-gather/reduce-scatter), capped at LL_MAX_BW;
                 LL128: 0.92 (0.7 when one rank per server); Simple: 1

Tree (all-reduce across servers only; NCCL's double binary tree over servers, a chain inside)::

    latency    = baseLat[tree][p] + 2 * ((k-1) * intraLat_tree[p] + log2i(m) * interLat_tree[p])
    algbw      = 0.5 * B * 0.92 * proto_tree(p) * correction(p, size)
    proto_tree = LL: 1/3.8 (capped at LL_MAX_BW); LL128: 120/128; Simple: 1

All-to-all (pairwise exchanges, as NCCL runs ``ncclSend``/``ncclRecv`` in a group)::

    time = base + (k-1) * a_nv + (n-k) * a_net + max(S (k-1)/n / B_nv, S (n-k)/n / (B_nic / c))

with S the whole buffer a rank exchanges (nccl-tests' convention), ``a_nv = hwLat[NVLink][ring][LL]
+ NVLink path latency``, ``a_net = NET_OVERHEAD + network path latency``, ``base =
baseLat[ring][LL]``: each rank's inter-server part goes through its own NIC share, its intra-server
part over NVLink, both at once.  Point-to-point: ``time = hwLat[hw][ring][Simple] + path latency
(x2 across servers) + S / B_path``.

Differences from NCCL's model, all deliberate: no channel counts (so no per-channel caps on LL128 and
tree bandwidth, and the ring plateau factor applies at every size); no NVLS/CollNet (NVLink SHARP
would raise one-server all-reduce bandwidth on H100); one CPU vendor (Intel's 1 us network overhead
and LL caps).  ``latency_scale`` multiplies every latency term (0 gives a pure bandwidth model,
which is how the topo and simai models agree exactly on one server).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# ---- NCCL's constants (NVIDIA/nccl src/graph/tuning.cc, 2.19-2.21; latencies in microseconds) --------

PROTOCOLS = ("LL", "LL128", "Simple")
BASE_LAT_US = {"tree": (6.8, 14.0, 0.0), "ring": (6.6, 14.0, 8.4)}
"""``baseLat[algorithm][protocol]``: fixed latency of one collective call, per protocol (LL, LL128, Simple)."""
HW_LAT_US = {
    "nvlink": {"tree": (0.6, 1.25, 28.0), "ring": (0.6, 1.9, 3.4)},
    "net": {"tree": (5.0, 8.5, 28.0), "ring": (2.7, 4.0, 14.0)},
}
"""``hwLat[NVLINK|NET][algorithm][protocol]``: latency of one step over that hardware."""
NET_OVERHEAD_US = 1.0
"""``getNetOverhead``: network post overhead per step on Intel x86 hosts (2 us on AMD); tripled for Simple."""
RING_PLATEAU = 1.4
"""Latency factor of multi-node ring all-reduce with the Simple protocol on sm80 and newer ("plateau effect")."""
LL_MAX_BW_BPS = {1: 87.7e9, 2: 39.0e9, 3: 20.4e9}
"""``llMaxBws``: LL bandwidth caps in B/s for 1 node (Hopper), 2 nodes and more (Intel hosts)."""
TREE_BW_FACTOR = 0.92
"""Tree bus bandwidth is 92% of the ring's (``busBw * .92``)."""
LL128_RING_FACTOR = (0.7, 0.92)
"""LL128 ring bandwidth factor with fewer than 2 ranks per node, and otherwise."""
LL128_TREE_FACTOR = (7.0 / 9.0, 120.0 / 128.0)
"""LL128 tree bandwidth factor on one node, and across nodes."""
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}
"""``treeCorrectionFactor[protocol][log2(size / 64)]``, sizes 64 B .. 256 MiB (1.0 beyond)."""

# ---- link efficiencies (the share of a link's nominal rate a collective's busbw reaches) -----------

NVLINK_EFFICIENCY = 20.6 / 25.0
"""0.824: NCCL models an H100 NVLink4 link at 20.6 GB/s (``SM90_NVLINK_BW``, src/graph/topo.h) of its
25 GB/s per direction (NVIDIA H100 datasheet: 18 links, 900 GB/s bidirectional = 450 GB/s per direction);
18 x 20.6 = 370.8 GB/s is the busbw nccl-tests all_reduce reaches on 8 H100 (about 360-370 GB/s)."""
NIC_EFFICIENCY = 48.5 / 50.0
"""0.97: a 400 Gb/s (50 GB/s) ConnectX-7 NIC gives about 48.5 GB/s busbw (SimAI's calbusbw.h ``CX7_BW 48.5 // 50``;
nccl-tests over InfiniBand NDR reports 48-49 GB/s)."""


@dataclass(frozen=True, slots=True)
class GroupShape:
    """How one communication group sits on the fabric.

    ``n`` ranks on ``servers`` servers with at most ``per_server`` on one; ``tier`` the highest tier
    its cross-server traffic climbs (``NVSwitch`` for one server, ``ASW``, ``PSW``, ``core``);
    latencies in seconds of the NVLink path and of the network path between two of its servers;
    ``congestion`` >= 1 divides the inter-server bandwidth (:func:`congestion`); bandwidths are the
    nominal rates in bytes per second of one GPU's NVLink and of one GPU's share of its server's NICs.
    """

    n: int
    servers: int
    per_server: int
    tier: str
    nvlink_Bps: float
    nic_Bps: float
    nvlink_latency_s: float
    net_latency_s: float
    congestion: float = 1.0
    a2a_congestion: float = 1.0


@dataclass(frozen=True, slots=True)
class LinkModel:
    """The efficiencies applied to nominal link rates and the scale of every latency term."""

    nvlink_efficiency: float = NVLINK_EFFICIENCY
    nic_efficiency: float = NIC_EFFICIENCY
    latency_scale: float = 1.0


@dataclass(frozen=True, slots=True)
class Cost:
    """The cost of one collective: time in seconds, the algorithm and protocol NCCL's tuner picks
    (``ring``/``tree``/``pairwise``/``p2p``, ``LL``/``LL128``/``Simple``), and the busbw in B/s
    that the time implies (nccl-tests' factor over the time, 0 when nothing moves)."""

    time_s: float
    algorithm: str
    protocol: str
    busbw_Bps: float


NO_COST = Cost(0.0, "none", "", 0.0)

RING_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
"""Collectives NCCL runs on its ring (all-reduce also on the tree)."""


def bus_bandwidth(shape: GroupShape, links: LinkModel) -> float:
    """The group's per-rank bus bandwidth in B/s (the module docstring's B)."""
    nv = shape.nvlink_Bps * links.nvlink_efficiency
    if shape.servers <= 1:
        return nv
    nic = shape.nic_Bps * links.nic_efficiency / shape.congestion
    if shape.per_server <= 1:
        return nic
    return min(nv, shape.per_server * nic)


def _ll_cap(servers: int) -> float:
    return LL_MAX_BW_BPS[min(servers, 3)]


def _lat_terms(shape: GroupShape, algorithm: str, p: int) -> tuple[float, float]:
    """(intraLat, interLat) in seconds for algorithm and protocol index p."""
    intra = HW_LAT_US["nvlink"][algorithm][p] * 1e-6 + shape.nvlink_latency_s
    inter = HW_LAT_US["net"][algorithm][p] * 1e-6 + shape.net_latency_s * (2 if PROTOCOLS[p] == "Simple" else 1)
    if shape.servers > 1:
        intra = max(intra, NET_OVERHEAD_US * 1e-6 * (3 if PROTOCOLS[p] == "Simple" else 1))
    return intra, inter


def ring_time(kind: str, size: float, shape: GroupShape, links: LinkModel, protocol: str) -> float:
    """Time in seconds of ``kind`` over NCCL's ring with one protocol (see the module docstring)."""
    n, m = shape.n, shape.servers
    p = PROTOCOLS.index(protocol)
    if kind == "all_reduce":
        steps, inter_steps, factor = 2 * (n - 1), 2 * (m - 1), 2.0 * (n - 1) / n
    elif kind in ("all_gather", "reduce_scatter"):
        steps, inter_steps, factor = n - 1, m - 1, (n - 1) / n
    else:  # broadcast, reduce: a pipelined chain through the ring
        steps, inter_steps, factor = n - 1, m - 1, 1.0
    bw = bus_bandwidth(shape, links)
    if protocol == "LL":
        bw = min(_ll_cap(m), bw * (0.25 if (m > 1 or kind in ("all_reduce", "reduce")) else 1.0 / 3.0))
    elif protocol == "LL128":
        bw *= LL128_RING_FACTOR[1 if n / m >= 2 else 0]
    intra, inter = _lat_terms(shape, "ring", p)
    latency = BASE_LAT_US["ring"][p] * 1e-6 + (steps - inter_steps) * intra + inter_steps * inter
    if kind == "all_reduce" and protocol == "Simple" and m > 1:
        latency *= RING_PLATEAU
    return latency * links.latency_scale + factor * size / bw


def tree_time(size: float, shape: GroupShape, links: LinkModel, protocol: str) -> float:
    """Time in seconds of an all-reduce over NCCL's tree with one protocol (several servers)."""
    m, k = shape.servers, shape.per_server
    p = PROTOCOLS.index(protocol)
    bw = bus_bandwidth(shape, links) * TREE_BW_FACTOR
    if protocol == "LL":
        bw = min(bw / 3.8, _ll_cap(m))
    elif protocol == "LL128":
        bw *= LL128_TREE_FACTOR[1 if m > 1 else 0]
    log_size = int(size) >> 6
    index = log_size.bit_length() - 1 if log_size > 0 else 0
    if index < len(TREE_CORRECTION[protocol]):
        bw *= TREE_CORRECTION[protocol][index]
    algbw = 0.5 * bw
    intra, inter = _lat_terms(shape, "tree", p)
    log2m = max(m, 1).bit_length() - 1
    latency = BASE_LAT_US["tree"][p] * 1e-6 + 2 * ((k - 1) * intra + log2m * inter)
    return latency * links.latency_scale + size / algbw


def busbw_factor(kind: str, n: int) -> float:
    """nccl-tests' factor (utils.units.busbw_factor, repeated here to keep this module import-light)."""
    if kind == "all_reduce":
        return 2.0 * (n - 1) / n
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def collective_cost(kind: str, size: float, shape: GroupShape, links: LinkModel) -> Cost:
    """The cheapest algorithm and protocol for a collective of ``size`` bytes over ``shape``.

    ``kind`` is a CommType value; barrier and anything of size 0 or over one rank cost nothing.
    """
    n = shape.n
    if n <= 1 or size <= 0:
        return NO_COST
    if kind == "all_to_all":
        return _all_to_all(size, shape, links)
    if kind == "isend":
        return ring_exchange_cost(size, shape, links)
    if kind not in RING_KINDS:
        return NO_COST
    best = (math.inf, "ring", "Simple")
    for protocol in PROTOCOLS:
        t = ring_time(kind, size, shape, links, protocol)
        if t < best[0]:
            best = (t, "ring", protocol)
    if kind == "all_reduce" and shape.servers > 1:
        for protocol in PROTOCOLS:
            t = tree_time(size, shape, links, protocol)
            if t < best[0]:
                best = (t, "tree", protocol)
    time_s, algorithm, protocol = best
    return Cost(time_s, algorithm, protocol, size / time_s * busbw_factor(kind, n))


def _all_to_all(size: float, shape: GroupShape, links: LinkModel) -> Cost:
    n, k = shape.n, min(shape.per_server, shape.n)
    nv = shape.nvlink_Bps * links.nvlink_efficiency
    nic = shape.nic_Bps * links.nic_efficiency / shape.a2a_congestion
    intra_bytes = size * (k - 1) / n
    inter_bytes = size * (n - k) / n
    t_bw = max(intra_bytes / nv if intra_bytes else 0.0, inter_bytes / nic if inter_bytes else 0.0)
    a_nv = HW_LAT_US["nvlink"]["ring"][0] * 1e-6 + shape.nvlink_latency_s
    a_net = NET_OVERHEAD_US * 1e-6 + shape.net_latency_s
    latency = BASE_LAT_US["ring"][0] * 1e-6 + (k - 1) * a_nv + (n - k) * a_net
    time_s = latency * links.latency_scale + t_bw
    return Cost(time_s, "pairwise", "Simple", size / time_s * (n - 1) / n)


def ring_exchange_cost(size: float, shape: GroupShape, links: LinkModel) -> Cost:
    """Every member of a group sends ``size`` bytes to its ring successor and receives as much from its predecessor
    at once (context parallelism's ring attention, one round): one point-to-point transfer over the ring's slowest hop.
    Inside a server that is NVLink; across servers a hop leaves its server through the sender's NIC share (ranks
    ``k`` apart on ``k`` rails, so no NIC carries two hops), slowed by the tiers' congestion: :func:`p2p_cost` of that
    path."""
    if shape.servers <= 1:
        return p2p_cost(size, True, shape.nvlink_Bps, shape.nvlink_latency_s, links)
    return p2p_cost(size, False, shape.nic_Bps, shape.net_latency_s, links, shape.congestion)


def p2p_cost(size: float, same_server: bool, bottleneck_Bps: float, path_latency_s: float, links: LinkModel,
             congestion: float = 1.0) -> Cost:
    """One pipeline send/recv of ``size`` bytes over a path: ``hwLat[hw][ring][Simple] + path latency
    (twice across servers, NCCL's flush) + size / (bottleneck * efficiency / congestion)``."""
    if size <= 0:
        return NO_COST
    if same_server:
        bw = bottleneck_Bps * links.nvlink_efficiency
        latency = HW_LAT_US["nvlink"]["ring"][2] * 1e-6 + path_latency_s
    else:
        bw = bottleneck_Bps * links.nic_efficiency / congestion
        latency = HW_LAT_US["net"]["ring"][2] * 1e-6 + 2 * path_latency_s
    time_s = latency * links.latency_scale + size / bw
    return Cost(time_s, "p2p", "Simple", size / time_s)


def congestion(oversubscription: float, fraction_leaving: float) -> float:
    """Bandwidth divisor >= 1 for traffic through an oversubscribed tier.

    Every GPU under a switch runs the same collective at once (all groups of a kind do), so a
    fraction ``f`` of the switch's downlink traffic wants its uplinks, whose capacity is ``1 / o``
    of the downlinks (``o`` = :attr:`topo.Topology.oversubscription` of the tier).  When
    ``f * o > 1`` the uplinks are the bottleneck and every flow through them slows by that ratio.
    """
    return max(1.0, oversubscription * fraction_leaving)

"""Fabrics for a placement (rank -> GPU other than rank r on GPU r) and for servers with a PCIe hierarchy inside
(``--model topo``; docs written for issue 30: GPUs sharing NICs and PCIe switches).

:func:`bind_fabric` gives :class:`simulator.topo.model.TopoModel` the fabric it asks group shapes and p2p routes of:

* a topology without a server hierarchy and no placement (or the identity): :class:`simulator.topo.fabric.TopologyFabric`
  itself, so that every existing result stays what it was;
* a topology without a hierarchy and a placement: :class:`MappedFabric`, which asks the same fabric about the GPUs the
  ranks sit on; a pipeline transfer is priced as the slowest of all the transfers of its stage boundary (each pair of
  ranks of one pipeline group), since the ranks of a stage move together;
* a topology with PCIe switches and CPU sockets (:mod:`topo.server`), or with NICs of several rates
  (:func:`topo.hierarchy.needs_hierarchy`): :class:`PlacedHierarchy`, which routes every transfer over NVLink, PCIe or
  a NIC (:mod:`topo.hierarchy`, NCCL's rules) and shares each link among the transfers that cross it at once.

Sharing a link (ours): the transfers that run at once are those of every group of the same kind (all TP groups run
their collective together, as do all DP groups) or of one stage boundary (every pipeline group sends its activation at
once).  Each transfer's rate is the slowest of its links' ``efficiency x nominal rate / transfers on the link`` (each
direction of a link counted apart: links are full duplex).  The slowest transfer's rate is then exactly what max-min
fair sharing gives it (the first water level of the water-filling); the others' rates are lower bounds.

Link efficiencies: NVLink and NIC as the link model says (``--nvlink_efficiency``, ``--nic_efficiency``); PCIe
:data:`PCIE_EFFICIENCY`; the socket link 1 (its default rate, 176Gbps, is NCCL's own modelled figure).

A group's shape (:class:`simulator.topo.collectives.GroupShape`) then carries: as its NVLink rate the slowest of its
intra-server ring hops (NVLink, or PCIe when the two GPUs have no NVLink between them), and as its NIC rate the sum over
a server's members of their inter-server transfer rates divided by the members per server, each divided by the
efficiency NCCL's cost applies to that field, so that :func:`simulator.topo.collectives.bus_bandwidth` gives back the
shared rates.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from simulator.topo.collectives import GroupShape, LinkModel, congestion
from simulator.topo.fabric import P2PShape, TopologyFabric
from utils.errors import ConfigError

PCIE_EFFICIENCY = 48.0 / 64.0
"""0.75: NCCL models a PCIe link at ``width x speed / 80`` GB/s (NVIDIA/nccl src/graph/topo.cc, ``kvDictPciGen``):
Gen5 x16 (32 GT/s) 48 GB/s of its 64 GB/s per direction, Gen4 24 of 32, Gen3 12 of 16."""
SOCKET_EFFICIENCY = 1.0
"""The CPU socket link's rate in our files (default 176Gbps) is NCCL's own modelled figure (``SRP_QPI_BW``)."""


def _placement(placement: Sequence[int] | None, world: int, gpu_count: int) -> tuple[int, ...] | None:
    """The GPU of each rank, checked: one per rank, each GPU once, inside the topology (None: rank r on GPU r)."""
    if placement is None:
        return None
    gpus = tuple(int(g) for g in placement)
    if len(gpus) != world:
        raise ConfigError(f"--placement names {len(gpus)} ranks, the job has {world}")
    bad = [g for g in gpus if not 0 <= g < gpu_count]
    if bad:
        raise ConfigError(f"--placement names GPU {bad[0]}, outside the topology's GPUs 0..{gpu_count - 1}")
    if len(set(gpus)) != len(gpus):
        twice = Counter(gpus).most_common(1)[0][0]
        raise ConfigError(f"--placement names GPU {twice} twice")
    return None if gpus == tuple(range(world)) else gpus


def bind_fabric(fabric: Any, pconf: Any, options: Any, links: LinkModel) -> Any:
    """The fabric a model of layout ``pconf`` asks (see the module docstring); ``options.placement`` (GPU of each rank,
    or None) and ``options.pxn`` come from :class:`simulator.options.TopoOptions`."""
    placement = getattr(options, "placement", None)
    if isinstance(fabric, HierarchyFabric):
        return fabric.bind(pconf, placement, links, getattr(options, "pxn", True))
    if placement is None:
        return fabric
    if not isinstance(fabric, TopologyFabric):
        raise ConfigError("--placement places ranks on a topology's GPUs: give -t/--topology FILE")
    gpus = _placement(placement, pconf.world_size, fabric.topology.gpu_count)
    return fabric if gpus is None else MappedFabric(fabric, pconf, gpus)


def _boundary(pconf: Any, a: int, b: int) -> list[tuple[int, int]]:
    """Every (sender, receiver) rank pair of the stage boundary that rank ``a`` -> rank ``b`` belongs to: the members
    at ``a``'s and ``b``'s stages of every pipeline group."""
    if pconf is None:
        return [(a, b)]
    rg = pconf.rank_generator()
    sa, sb = rg.coordinates(a)["pp"], rg.coordinates(b)["pp"]
    return [(group[sa], group[sb]) for group in pconf.group_ranks("pp_group")]


class MappedFabric:
    """A :class:`TopologyFabric` asked about the GPUs the ranks sit on (``gpu_of[r]``)."""

    def __init__(self, base: TopologyFabric, pconf: Any, gpu_of: tuple[int, ...]) -> None:
        self.base, self.pconf, self.gpu_of = base, pconf, gpu_of
        self.gpus, self.gpus_per_server, self.gpu_type = base.gpus, base.gpus_per_server, base.gpu_type
        self.topology = base.topology
        self.description = base.description + "; ranks placed by --placement"
        self._p2p: dict[tuple[int, int], P2PShape] = {}

    def group_shape(self, ranks: Sequence[int]) -> GroupShape:
        return self.base.group_shape(tuple(self.gpu_of[r] for r in ranks))

    def p2p_shape(self, a: int, b: int) -> P2PShape:
        """The slowest transfer of the stage boundary (lowest bandwidth after congestion, then longest latency)."""
        key = (a, b)
        found = self._p2p.get(key)
        if found is None:
            shapes = [self.base.p2p_shape(self.gpu_of[x], self.gpu_of[y]) for x, y in _boundary(self.pconf, a, b)]
            found = self._p2p[key] = min(shapes, key=lambda s: (s.bottleneck_Bps / s.congestion, -s.latency_s,
                                                               s.same_server))
        return found


class HierarchyFabric:
    """A topology whose servers hold PCIe switches and CPU sockets, before ranks are placed on it (a session keeps it
    per topology).  :meth:`bind` places a layout's ranks; used unbound (an inference step's TP groups), every rank r
    sits on GPU r and a group runs alone."""

    def __init__(self, topology: Any, gpus: int) -> None:
        self.topology = topology
        self.gpus = gpus
        self.gpus_per_server = topology.gpus_per_server
        self.gpu_type = topology.gpu_type
        ratios = topology.oversubscription
        asw = ratios.get("ASW", 1.0)
        self.oversubscription = {"ASW": asw, "PSW": asw * ratios.get("PSW", 1.0)}
        inside = "servers with PCIe switches and shared NICs" if topology.server_roles else "NICs of several rates"
        self.description = f"{topology.source or 'topology'}: {topology.gpu_count} GPUs ({gpus} used), {inside}"
        self._bound: PlacedHierarchy | None = None

    def bind(self, pconf: Any, placement: Sequence[int] | None, links: LinkModel, pxn: bool = True) -> PlacedHierarchy:
        world = pconf.world_size if pconf is not None else self.gpus
        return PlacedHierarchy(self, pconf, _placement(placement, world, self.topology.gpu_count), links, pxn)

    def _default(self) -> PlacedHierarchy:
        if self._bound is None:
            self._bound = self.bind(None, None, LinkModel())
        return self._bound

    def group_shape(self, ranks: Sequence[int]) -> GroupShape:
        return self._default().group_shape(ranks)

    def p2p_shape(self, a: int, b: int) -> P2PShape:
        return self._default().p2p_shape(a, b)


class PlacedHierarchy:
    """Ranks placed on a :class:`HierarchyFabric` (``gpu_of``: None for rank r on GPU r); see the module docstring."""

    def __init__(self, base: HierarchyFabric, pconf: Any, gpu_of: tuple[int, ...] | None, links: LinkModel,
                 pxn: bool) -> None:
        from topo.hierarchy import hierarchy_of

        self.base, self.pconf, self.links, self.pxn = base, pconf, links, pxn
        self.topology = base.topology
        self.h = hierarchy_of(base.topology, pxn)
        self.gpu_of = gpu_of
        self.gpus, self.gpus_per_server, self.gpu_type = base.gpus, base.gpus_per_server, base.gpu_type
        self.description = base.description + f"; NCCL PXN {'on' if pxn else 'off'}" + \
            ("; ranks placed by --placement" if gpu_of is not None else "")
        self._efficiency = {"nvlink": links.nvlink_efficiency, "nic": links.nic_efficiency, "pcie": PCIE_EFFICIENCY,
                            "socket": SOCKET_EFFICIENCY}
        self._shapes: dict[tuple, GroupShape] = {}
        self._p2p: dict[tuple[int, int], P2PShape] = {}
        self._by_server: dict[str, dict[int, list[tuple[int, ...]]]] = {}
        self._asw, self._pod = self.h.domains

    # ---- helpers ----------------------------------------------------------------------------------
    def gpu(self, rank: int) -> int:
        return rank if self.gpu_of is None else self.gpu_of[rank]

    def _capacity_Bps(self, key: tuple) -> float:
        """Effective bytes per second of a directed link key: nominal rate x its class's efficiency."""
        return self.h.capacity_bps(key) / 8.0 * self._efficiency[self.h.link_class(key)]

    def _rates(self, flows: list[tuple]) -> list[float]:
        """Each flow's rate (B/s): its slowest link's effective rate over the flows that share it (see the module
        docstring)."""
        load = Counter(k for flow in flows for k in set(flow))
        return [min((self._capacity_Bps(k) / load[k] for k in flow), default=float("inf")) for flow in flows]

    def _congestion(self, firsts: list[int]) -> tuple[float, float]:
        """Ring and all-to-all congestion of a group over the tiers it crosses (as :class:`TopologyFabric`)."""
        m = len(firsts)
        ring_c = a2a_c = 1.0
        for name, domain in (("ASW", self._asw), ("PSW", self._pod)):
            d = len({domain[g] for g in firsts})
            if d > 1:
                o = self.base.oversubscription.get(name, 1.0)
                ring_c = max(ring_c, congestion(o, d / m))
                a2a_c = max(a2a_c, congestion(o, 1.0 - 1.0 / d))
        return ring_c, a2a_c

    def _concurrent(self, members: tuple[int, ...], kind: str | None) -> list[tuple[int, ...]]:
        """The groups (as ranks) that run this collective at once and share a server with it (no other can share a
        link with it: PCIe and NIC links belong to one server): the groups of ``kind``, else this one alone."""
        if kind is None or self.pconf is None:
            return [members]
        index = self._by_server.get(kind)
        if index is None:
            try:
                groups = self.pconf.group_ranks(kind)
            except ConfigError:
                groups = []
            index = self._by_server[kind] = {}
            for group in map(tuple, groups):
                for server in {self.gpu(r) // self.gpus_per_server for r in group}:
                    index.setdefault(server, []).append(group)
        servers = {self.gpu(r) // self.gpus_per_server for r in members}
        found = list(dict.fromkeys(g for s in sorted(servers) for g in index.get(s, ())))
        return found if members in found else [members]

    # ---- the Fabric protocol ----------------------------------------------------------------------
    def group_shape(self, ranks: Sequence[int]) -> GroupShape:
        return self.group_shape_kind(ranks, None)

    def group_shape_kind(self, ranks: Sequence[int], kind: str | None) -> GroupShape:
        """The shape of the group of ``ranks`` when every group of ``kind`` (a CommGroup value) runs at once."""
        members = tuple(ranks)
        key = (members, kind)
        found = self._shapes.get(key)
        if found is None:
            found = self._shapes[key] = self._group_shape(members, kind)
        return found

    def _group_shape(self, members: tuple[int, ...], kind: str | None) -> GroupShape:
        gps = self.gpus_per_server
        h = self.h
        gpus = [self.gpu(r) for r in members]
        by_server: dict[int, list[int]] = {}
        for g in gpus:
            by_server.setdefault(g // gps, []).append(g)
        m, k, n = len(by_server), max(len(v) for v in by_server.values()), len(gpus)
        groups = [[self.gpu(r) for r in group] for group in self._concurrent(members, kind)]
        nv_eff, nic_eff = self.links.nvlink_efficiency, self.links.nic_efficiency
        # inside servers: each group's ring visits its members of a server in turn (a cycle when the group is inside
        # one server, a chain that leaves the server otherwise)
        intra_flows: list[tuple] = []
        own: list[bool] = []
        for group in groups:
            for a, b in _ring_hops(group, gps):
                intra_flows.append(h.route(a, b)[0])
                own.append(group == gpus)
        intra = float("inf")
        if intra_flows:
            rates = self._rates(intra_flows)
            intra = min((r for r, o in zip(rates, own) if o), default=min(rates))
        nv_latency = 0.0
        first_local = next(iter(by_server.values()))
        if len(first_local) > 1:
            nv_latency = h.latency_s(h.route(first_local[0], first_local[1])[0])
        nvlink_Bps = intra / nv_eff if intra < float("inf") else h.nvlink_bps.get(gpus[0], 0.0) / 8.0
        if m == 1:
            return GroupShape(n, 1, k, "NVSwitch", nvlink_Bps, 0.0, nv_latency, 0.0)
        # across servers: every member of every group that spans servers sends and receives through its NIC
        spanning = [group for group in groups if len({g // gps for g in group}) > 1]
        sends = [h.send_path(g).up for group in spanning for g in group]
        recvs = [h.recv_path(g).down for group in spanning for g in group]
        rates = self._rates(sends + recvs)
        per_gpu: dict[int, float] = {}
        for g, r_send, r_recv in zip([g for group in spanning for g in group], rates[:len(sends)], rates[len(sends):]):
            per_gpu[g] = min(r_send, r_recv)
        inter = min(sum(per_gpu[g] for g in local) for local in by_server.values())
        nic_Bps = inter / k / nic_eff
        partner = self._partner(gpus)
        _, tier, latency = h.transfer(h.send_path(gpus[0]), h.recv_path(partner))
        firsts = [local[0] for local in by_server.values()]
        ring_c, a2a_c = self._congestion(firsts)
        return GroupShape(n, m, k, tier, nvlink_Bps, nic_Bps, nv_latency, latency, ring_c, a2a_c)

    def _partner(self, gpus: list[int]) -> int:
        """A member on another server than the first, on the first's rail when one is (as :class:`TopologyFabric`)."""
        gps = self.gpus_per_server
        g0 = gpus[0]
        others = [g for g in gpus if g // gps != g0 // gps]
        same_rail = [g for g in others if g % gps == g0 % gps]
        return (same_rail or others)[-1]

    def p2p_shape(self, a: int, b: int) -> P2PShape:
        """The slowest transfer of the stage boundary ``a -> b`` belongs to, every transfer of it sharing links."""
        key = (a, b)
        found = self._p2p.get(key)
        if found is None:
            found = self._p2p[key] = self._p2p_shape(a, b)
        return found

    def _p2p_shape(self, a: int, b: int) -> P2PShape:
        gps, h = self.gpus_per_server, self.h
        pairs = [(self.gpu(x), self.gpu(y)) for x, y in _boundary(self.pconf, a, b)]
        flows: list[tuple] = []
        kinds: list[str] = []
        where: list[tuple[str, float]] = []
        for x, y in pairs:
            if x // gps == y // gps:
                route, how = h.route(x, y)
                flows.append(route)
                kinds.append(how)
                where.append(("NVSwitch" if how == "nvlink" else "PCIe", h.latency_s(route)))
            else:
                route, tier, latency = h.transfer(h.send_path(x, y), h.recv_path(y))
                flows.append(route)
                kinds.append("net")
                where.append((tier, latency))
        rates = self._rates(flows)
        # the slowest transfer: the lowest rate, then the longest latency, then one that leaves its server (NCCL's
        # network step latency)
        worst = min(range(len(flows)), key=lambda i: (rates[i], -where[i][1], kinds[i] != "net"))
        x, y = pairs[worst]
        tier, latency = where[worst]
        if kinds[worst] != "net":
            return P2PShape(True, rates[worst] / self.links.nvlink_efficiency, latency, tier)
        c = 1.0
        if self._asw[x] != self._asw[y]:
            c = max(c, congestion(self.base.oversubscription.get("ASW", 1.0), 1.0))
        if self._pod[x] != self._pod[y]:
            c = max(c, congestion(self.base.oversubscription.get("PSW", 1.0), 1.0))
        return P2PShape(False, rates[worst] / self.links.nic_efficiency, latency, tier, c)


def _ring_hops(gpus: list[int], gps: int) -> list[tuple[int, int]]:
    """The hops inside servers of a ring over ``gpus`` in order: per server its members one after another, closed into
    a cycle when the whole group is in one server (of more than two GPUs: two GPUs exchange over one link each way)."""
    local: dict[int, list[int]] = {}
    for g in gpus:
        local.setdefault(g // gps, []).append(g)
    hops: list[tuple[int, int]] = []
    for chain in local.values():
        hops += list(zip(chain, chain[1:]))
        if len(local) == 1 and len(chain) > 2:
            hops.append((chain[-1], chain[0]))
    return hops

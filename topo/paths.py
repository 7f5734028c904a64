"""Routes between two GPUs of a :class:`~topo.topology.Topology`: hops, bottleneck bandwidth, latency.

Rules (ours, stated so the simulator can cite them):

* Two GPUs that share an NVSwitch talk over NVLink (NCCL's topology search, src/graph/paths.cc,
  ranks an NVLink path above any path through a NIC); the route is GPU -> NVSwitch -> GPU, 2 hops,
  and its bottleneck is the sum over shared NVSwitches of the slower of the two GPUs' links.
* Otherwise traffic takes the network: up from the source's NIC ports through packet switches and
  down to the destination's.  GPUs and NVSwitches never forward (in SimAI's ns-3 hosts do not
  route and NVSwitches have no network links), so only shortest paths through packet switches count.
* ``bottleneck_bps`` is the maximum flow from source to destination over all shortest paths (link
  capacities summed over parallel links): what the pair can reach alone when it spreads its traffic
  over every port and equal-cost path, as NCCL does with several channels and both ports of a
  dual-ToR NIC.  ``single_path_bps`` is the slowest link of the one path in ``nodes``: what one
  ECMP-hashed flow gets.
* ``nodes`` is the shortest path that picks the lowest id at each step; between two nodes it uses
  the first link listed in the file.  ``latency_s`` is the sum of those links' latencies.

Results depend only on how the two GPUs are attached (which switches, which link rates), so they
are cached per pair of attachments: asking about all pairs of a 15360-GPU fabric costs the distinct
attachment pairs, not 15360^2 searches.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from topo.node_kinds import GPU, NVSWITCH, PACKET_SWITCH
from topo.units import bytes_per_s


@dataclass(frozen=True)
class Path:
    """The route between GPUs ``src`` and ``dst``.  Bandwidths in bits per second, latency in seconds."""

    src: int
    dst: int
    nodes: tuple[int, ...]
    """One shortest path, ``src`` first and ``dst`` last (lowest ids at each step)."""
    tier: str
    """The highest tier the route climbs: ``NVSwitch`` (same server), ``ASW``, ``PSW`` or ``core``."""
    bottleneck_bps: float
    """Maximum flow over all shortest paths."""
    single_path_bps: float
    """Slowest link on ``nodes``."""
    latency_s: float
    """Sum of the link latencies along ``nodes``."""

    @property
    def hops(self) -> int:
        """Links on the route (2 over NVLink, 2 through one ASW, 4 through a PSW, 6 through a core)."""
        return len(self.nodes) - 1

    @property
    def bottleneck_bytes_per_s(self) -> float:
        return bytes_per_s(self.bottleneck_bps)

    @property
    def single_path_bytes_per_s(self) -> float:
        return bytes_per_s(self.single_path_bps)


_Attachment = tuple[tuple[int, float, float], ...]
"""(switch, bandwidth bps, latency s) of each of a GPU's links of one kind, in file order."""


class Router:
    """Path queries over one :class:`~topo.topology.Topology` (built lazily by its :meth:`path`; it
    imports this module, so the type is not imported here).

    Per-GPU links are kept as sorted arrays and turned into attachments only for the GPUs asked
    about; the network between two attachments is searched from both ends at once (so a query on a
    fabric of 131,072 GPUs visits the switches near the two GPUs, not the whole fabric); and the
    maximum flow is solved only when the lowest-id path alone does not already reach the bound every
    flow has (the smaller of the two GPUs' total link bandwidths into the shortest paths)."""

    def __init__(self, topo: Any):
        self.topo = topo
        kind, s, d = topo.node_kind, topo.src, topo.dst
        self._bw, self._lat = topo.bandwidth_bps, topo.latency_s
        self._links = {k: self._gpu_csr(k) for k in (NVSWITCH, PACKET_SWITCH)}
        self._attach: dict[tuple[int, int], _Attachment] = {}
        # switch-to-switch adjacency (CSR, both directions), the only links that forward traffic
        packet = np.flatnonzero((kind[s] == PACKET_SWITCH) & (kind[d] == PACKET_SWITCH))
        u = np.concatenate([s[packet], d[packet]])
        v = np.concatenate([d[packet], s[packet]])
        e = np.concatenate([packet, packet])
        order = np.argsort(u * len(s) + e)  # by switch, then by link
        self._nbr, self._edge = v[order], e[order]
        self._ptr = np.concatenate([[0], np.cumsum(np.bincount(u, minlength=topo.node_count))])
        self._cache: dict[tuple[_Attachment, _Attachment], tuple | None] = {}

    def _gpu_csr(self, other_kind: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(other end, link index, per-GPU offsets) of the GPU links to ``other_kind``, by GPU then file order."""
        gpu, other, idx = self.topo._gpu_links(other_kind)
        if len(gpu) > 1 and (gpu[1:] >= gpu[:-1]).all():  # generated files list each GPU's links together
            order = np.arange(len(gpu))
        else:
            order = np.argsort(gpu, kind="stable")
        ptr = np.concatenate([[0], np.cumsum(np.bincount(gpu, minlength=self.topo.gpu_count))])
        return other[order], idx[order], ptr

    def _attachment(self, gpu: int, other_kind: int) -> _Attachment:
        key = (gpu, other_kind)
        found = self._attach.get(key)
        if found is None:
            other, idx, ptr = self._links[other_kind]
            lo, hi = int(ptr[gpu]), int(ptr[gpu + 1])
            links = idx[lo:hi].tolist()
            found = self._attach[key] = tuple(zip(other[lo:hi].tolist(), self._bw[links].tolist(),
                                                  self._lat[links].tolist()))
        return found

    def attachments(self, gpu: int, network: bool) -> tuple[int, ...]:
        """Switches GPU ``gpu`` links to: packet switches (``network``) or NVSwitches, file order."""
        return tuple(sw for sw, _, _ in self._attachment(gpu, PACKET_SWITCH if network else NVSWITCH))

    def path(self, a: int, b: int) -> Path:
        topo = self.topo
        for g in (a, b):
            if not (0 <= g < topo.gpu_count) or topo.node_kind[g] != GPU:
                raise ValueError(f"{g} is not a GPU id (GPUs are 0..{topo.gpu_count - 1})")
        if a == b:
            raise ValueError(f"path from GPU {a} to itself")
        nv_a, nv_b = self._attachment(a, NVSWITCH), self._attachment(b, NVSWITCH)
        shared = {sw for sw, _, _ in nv_a} & {sw for sw, _, _ in nv_b}
        if shared:
            return _nvlink_path(a, b, nv_a, nv_b, shared)
        key = (self._attachment(a, PACKET_SWITCH), self._attachment(b, PACKET_SWITCH))
        if key not in self._cache:
            self._cache[key] = self._network(*key)
        result = self._cache[key]
        if result is None:
            raise ValueError(f"no network path from GPU {a} to GPU {b} in {topo.source or 'this topology'}")
        middle, tier, flow, single, latency = result
        return Path(a, b, (a, *middle, b), tier, flow, single, latency)

    def _neighbours(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(owner, neighbour, link) of every switch-to-switch link of ``nodes``."""
        start, stop = self._ptr[nodes], self._ptr[nodes + 1]
        counts = stop - start
        pos = np.repeat(start - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
        return np.repeat(nodes, counts), self._nbr[pos], self._edge[pos]

    def _network(self, att_a: _Attachment, att_b: _Attachment) -> tuple | None:
        """The shortest-path DAG between two attachments, searched from both ends: each step grows the
        smaller frontier by one hop until the two searches meet (at hop ``ra`` from a's switches and
        ``rb`` from b's, so the shortest switch path has ``ra + rb`` hops); the DAG's layers are then
        the frontier nodes that reach the meeting layer one hop at a time on either side."""
        if not att_a or not att_b:
            return None
        n = self.topo.node_count
        dist = [np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)]
        rings = [[np.unique([sw for sw, _, _ in att_a])], [np.unique([sw for sw, _, _ in att_b])]]
        dist[0][rings[0][0]] = 0
        dist[1][rings[1][0]] = 0
        meet = rings[0][0][dist[1][rings[0][0]] == 0]
        while not len(meet):
            # grow the smaller frontier; its new nodes that the other search has seen lie at the other
            # search's radius (nothing nearer met before), so they are the meeting layer
            side = 0 if len(rings[0][-1]) <= len(rings[1][-1]) else 1
            _, nbr, _ = self._neighbours(rings[side][-1])
            new = np.unique(nbr[dist[side][nbr] < 0])
            if not len(new):
                return None
            dist[side][new] = len(rings[side])
            rings[side].append(new)
            meet = new[dist[1 - side][new] >= 0]
        # layers from a's switches to b's: back from the meeting layer through each side's rings
        a_side = [meet]
        for ring in reversed(rings[0][:-1] if dist[0][meet[0]] == len(rings[0]) - 1 else rings[0]):
            a_side.insert(0, self._toward(ring, a_side[0]))
        b_side: list[np.ndarray] = []
        previous = meet
        for ring in reversed(rings[1][:-1] if dist[1][meet[0]] == len(rings[1]) - 1 else rings[1]):
            previous = self._toward(ring, previous)
            b_side.append(previous)
        return self._solve(att_a, att_b, a_side + b_side)

    def _toward(self, ring: np.ndarray, layer: np.ndarray) -> np.ndarray:
        """The nodes of ``ring`` (one search's nodes at one distance) with a link into ``layer``, sorted."""
        owner, nbr, _ = self._neighbours(ring)
        return np.unique(owner[np.isin(nbr, layer)])

    def _links_between(self, u: int, layer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(neighbour, link) of the links from switch ``u`` into ``layer`` (sorted ids), link order."""
        lo, hi = int(self._ptr[u]), int(self._ptr[u + 1])
        nbr, edge = self._nbr[lo:hi], self._edge[lo:hi]
        keep = np.isin(nbr, layer, assume_unique=False)
        return nbr[keep], edge[keep]

    def _solve(self, att_a: _Attachment, att_b: _Attachment, layers: list[np.ndarray]) -> tuple:
        first, last = set(layers[0].tolist()), set(layers[-1].tolist())
        src_edges = [(sw, bw, lat) for sw, bw, lat in att_a if sw in first]
        dst_edges = [(sw, bw, lat) for sw, bw, lat in att_b if sw in last]
        # the lowest-id path, greedily (every DAG node has a successor in the next layer), on the
        # first-listed link between two switches
        u = min(first)
        nodes = [u]
        a_link = next(x for x in att_a if x[0] == u)
        single, latency = a_link[1], a_link[2]
        for layer in layers[1:]:
            nbr, edge = self._links_between(u, layer)
            v = int(nbr.min())
            e = int(edge[nbr == v].min())
            single, latency = min(single, float(self._bw[e])), latency + float(self._lat[e])
            nodes.append(v)
            u = v
        b_link = next(x for x in att_b if x[0] == u)
        single, latency = min(single, b_link[1]), latency + b_link[2]
        bound = min(sum(bw for _, bw, _ in src_edges), sum(bw for _, bw, _ in dst_edges))
        # no flow exceeds what a's links into the DAG (or b's out of it) carry; when one path already
        # carries that much, it is the maximum
        flow = bound if single >= bound else _max_flow(src_edges, dst_edges, self._capacities(layers))
        tier = self.topo.tier_of(max(nodes, key=lambda n: self.topo.level[n]))
        return tuple(nodes), tier, flow, single, latency

    def _capacities(self, layers: list[np.ndarray]) -> dict[tuple[int, int], float]:
        """Capacity of each switch pair of consecutive layers (parallel links summed)."""
        cap: dict[tuple[int, int], float] = {}
        for here, there in zip(layers, layers[1:]):
            owner, nbr, link = self._neighbours(here)
            keep = np.isin(nbr, there)
            for u, v, e in zip(owner[keep].tolist(), nbr[keep].tolist(), link[keep].tolist()):
                cap[(u, v)] = cap.get((u, v), 0.0) + float(self._bw[e])
        return cap


def _nvlink_path(a: int, b: int, nv_a: _Attachment, nv_b: _Attachment, shared: set[int]) -> Path:
    def capacity(att: _Attachment, sw: int) -> float:
        return sum(bw for s, bw, _ in att if s == sw)

    flow = sum(min(capacity(nv_a, sw), capacity(nv_b, sw)) for sw in shared)
    sw = min(shared)
    la = next(x for x in nv_a if x[0] == sw)
    lb = next(x for x in nv_b if x[0] == sw)
    return Path(a, b, (a, sw, b), "NVSwitch", flow, min(la[1], lb[1]), la[2] + lb[2])


def _max_flow(src_edges: list[tuple[int, float, float]], dst_edges: list[tuple[int, float, float]],
              cap: dict[tuple[int, int], float]) -> float:
    """Dinic's maximum flow from a source (linked by ``src_edges``) to a sink (``dst_edges``)."""
    index: dict[int, int] = {}
    for u, v in cap:
        index.setdefault(u, len(index) + 2)
        index.setdefault(v, len(index) + 2)
    for sw, _, _ in (*src_edges, *dst_edges):
        index.setdefault(sw, len(index) + 2)
    n = len(index) + 2
    head: list[list[int]] = [[] for _ in range(n)]
    to: list[int] = []
    residual: list[float] = []

    def add(u: int, v: int, c: float) -> None:
        head[u].append(len(to))
        to.append(v)
        residual.append(c)
        head[v].append(len(to))
        to.append(u)
        residual.append(0.0)

    for sw, bw, _ in src_edges:
        add(0, index[sw], bw)
    for (u, v), c in cap.items():
        add(index[u], index[v], c)
    for sw, bw, _ in dst_edges:
        add(index[sw], 1, bw)
    def push(u: int, limit: float, level: list[int], cursor: list[int]) -> float:
        if u == 1:
            return limit
        while cursor[u] < len(head[u]):
            e = head[u][cursor[u]]
            v = to[e]
            if residual[e] > 0 and level[v] == level[u] + 1:
                got = push(v, min(limit, residual[e]), level, cursor)
                if got > 0:
                    residual[e] -= got
                    residual[e ^ 1] += got
                    return got
            cursor[u] += 1
        return 0.0

    total = 0.0
    while True:
        level = [-1] * n
        level[0] = 0
        queue = deque([0])
        while queue:
            u = queue.popleft()
            for e in head[u]:
                if residual[e] > 0 and level[to[e]] < 0:
                    level[to[e]] = level[u] + 1
                    queue.append(to[e])
        if level[1] < 0:
            return total
        cursor = [0] * n
        while (got := push(0, float("inf"), level, cursor)) > 0:
            total += got

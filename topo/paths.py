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
    imports this module, so the type is not imported here)."""

    def __init__(self, topo: Any):
        self.topo = topo
        kind, s, d = topo.node_kind, topo.src, topo.dst
        self._bw, self._lat = topo.bandwidth_bps, topo.latency_s
        self._attach = {k: self._by_gpu(k) for k in (NVSWITCH, PACKET_SWITCH)}
        # switch-to-switch adjacency (CSR, both directions), the only links that forward traffic
        packet = np.flatnonzero((kind[s] == PACKET_SWITCH) & (kind[d] == PACKET_SWITCH))
        u = np.concatenate([s[packet], d[packet]])
        v = np.concatenate([d[packet], s[packet]])
        e = np.concatenate([packet, packet])
        order = np.lexsort((e, u))
        self._nbr, self._edge = v[order], e[order]
        self._ptr = np.concatenate([[0], np.cumsum(np.bincount(u, minlength=topo.node_count))])
        self._cache: dict[tuple[_Attachment, _Attachment], tuple] = {}

    def _by_gpu(self, other_kind: int) -> list[_Attachment]:
        gpu, other, idx = self.topo._gpu_links(other_kind)
        out: list[list[tuple[int, float, float]]] = [[] for _ in range(self.topo.gpu_count)]
        for g, o, i in zip(gpu.tolist(), other.tolist(), idx.tolist()):
            out[g].append((o, float(self._bw[i]), float(self._lat[i])))
        return [tuple(a) for a in out]

    def attachments(self, gpu: int, network: bool) -> tuple[int, ...]:
        """Switches GPU ``gpu`` links to: packet switches (``network``) or NVSwitches, file order."""
        return tuple(sw for sw, _, _ in self._attach[PACKET_SWITCH if network else NVSWITCH][gpu])

    def path(self, a: int, b: int) -> Path:
        topo = self.topo
        for g in (a, b):
            if not (0 <= g < topo.gpu_count) or topo.node_kind[g] != GPU:
                raise ValueError(f"{g} is not a GPU id (GPUs are 0..{topo.gpu_count - 1})")
        if a == b:
            raise ValueError(f"path from GPU {a} to itself")
        nv_a, nv_b = self._attach[NVSWITCH][a], self._attach[NVSWITCH][b]
        shared = {sw for sw, _, _ in nv_a} & {sw for sw, _, _ in nv_b}
        if shared:
            return _nvlink_path(a, b, nv_a, nv_b, shared)
        key = (self._attach[PACKET_SWITCH][a], self._attach[PACKET_SWITCH][b])
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
        topo = self.topo
        if not att_a or not att_b:
            return None
        dist = np.full(topo.node_count, -1, dtype=np.int64)
        frontier = np.unique([sw for sw, _, _ in att_a])
        targets = np.unique([sw for sw, _, _ in att_b])
        dist[frontier] = 1
        depth = 1
        while not (dist[targets] == depth).any():
            _, nbr, _ = self._neighbours(frontier)
            frontier = np.unique(nbr[dist[nbr] < 0])
            if not len(frontier):
                return None
            depth += 1
            dist[frontier] = depth
        # layers[k] = switches at distance k+1 from a that lie on a shortest path to b
        layers = [targets[dist[targets] == depth]]
        pairs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for k in range(depth - 1, 0, -1):
            nxt, prev, link = self._neighbours(layers[0])
            keep = dist[prev] == k
            nxt, prev, link = nxt[keep], prev[keep], link[keep]
            pairs.insert(0, (prev, nxt, link))
            layers.insert(0, np.unique(prev))
        return self._solve(att_a, att_b, layers, pairs)

    def _solve(self, att_a: _Attachment, att_b: _Attachment, layers: list[np.ndarray],
               pairs: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> tuple:
        first, last = set(layers[0].tolist()), set(layers[-1].tolist())
        src_edges = [(sw, bw, lat) for sw, bw, lat in att_a if sw in first]
        dst_edges = [(sw, bw, lat) for sw, bw, lat in att_b if sw in last]
        # capacities and first-listed link of each switch pair on the shortest-path DAG
        cap: dict[tuple[int, int], float] = {}
        first_link: dict[tuple[int, int], int] = {}
        for prev, nxt, link in pairs:
            for u, v, e in zip(prev.tolist(), nxt.tolist(), link.tolist()):
                cap[(u, v)] = cap.get((u, v), 0.0) + float(self._bw[e])
                if e < first_link.get((u, v), e + 1):
                    first_link[(u, v)] = e
        flow = _max_flow(src_edges, dst_edges, cap)
        # the lowest-id path, greedily: every DAG node has a successor in the next layer
        u = min(first)
        nodes = [u]
        a_link = next(x for x in att_a if x[0] == u)
        single, latency = a_link[1], a_link[2]
        succ: dict[int, list[int]] = {}
        for a, b in first_link:
            succ.setdefault(a, []).append(b)
        for _ in range(len(layers) - 1):
            v = min(succ[u])
            e = first_link[(u, v)]
            single, latency = min(single, float(self._bw[e])), latency + float(self._lat[e])
            nodes.append(v)
            u = v
        b_link = next(x for x in att_b if x[0] == u)
        single, latency = min(single, b_link[1]), latency + b_link[2]
        tier = self.topo.tier_of(max(nodes, key=lambda n: self.topo.level[n]))
        return tuple(nodes), tier, flow, single, latency


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

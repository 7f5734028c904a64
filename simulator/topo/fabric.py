"""Where ranks sit and what links their groups use (``--model topo``; docs/sim_model.md, "Placement").

Rank r runs on GPU r: server ``r // gpus_per_server``, local GPU ``r % gpus_per_server`` (SimAI's
placement, and Megatron's when consecutive ranks fill a node).  A group's shape
(:class:`simulator.topo.collectives.GroupShape`) is its size, the servers it spans, its members per
server, the highest tier its cross-server traffic climbs, the latencies of its NVLink and network
paths, and the congestion of the oversubscribed tiers it crosses.

Two fabrics:

- :class:`TopologyFabric` reads a :class:`topo.Topology`: per-GPU NVLink rate (sum of its
  GPU-NVSwitch links), per-GPU NIC share (server NIC rate / GPUs per server: each GPU its own NIC
  on SimAI's rail-optimised shapes), link latencies along :meth:`topo.Topology.path`, and
  :attr:`topo.Topology.oversubscription` per tier.
- :class:`DerivedFabric` is the two-tier fabric ``--model topo`` assumes without ``-t``: servers of
  ``-g_p_s`` GPUs on NVLink, every NIC on one non-blocking switch, with SimAI-analytical's busbw
  inputs (``-nv``, ``-nic`` in GiB/s, ``-n_p_s`` NICs per server) as the link rates and the link
  latencies of SimAI's topology generator (NVLink 0.025 us, NIC 0.5 us per link).

Congestion (ours, from the tier ratios the topology states): a ring over m servers ordered by
rank crosses the boundary of each of its D tier-X domains (an ASW's segment, a pod) once per
channel, so a fraction ``f = D / m`` of its inter-server traffic leaves a domain; an all-to-all
sends a fraction ``f = 1 - 1/D`` of it outside; a pipeline send between stages in different
domains sends all of it (``f = 1``).  Every GPU runs the same kind of collective at once, so the
traffic leaving tier-X domains is ``f`` times the NIC traffic, against an uplink capacity of
``NIC total / O_X`` with ``O_X`` the product of the down/up ratios (:attr:`topo.Topology.oversubscription`)
of the tiers up to X (the ASWs' uplinks are the PSWs' downlinks, so the product is the exact
aggregate ratio).  The divisor is ``max(1, f * O_X)`` for the worst tier crossed
(:func:`simulator.topo.collectives.congestion`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from simulator.topo.collectives import GroupShape, congestion
from topo.topology import connected_labels
from utils.errors import ConfigError

NVLINK_LINK_LATENCY_S = 0.025e-6
"""SimAI's topology generator default ``-nl 0.000025ms`` per GPU-NVSwitch link (docs/topology.md section 1)."""
NIC_LINK_LATENCY_S = 0.5e-6
"""SimAI's topology generator default ``-l 0.0005ms`` per NIC-ASW link."""


@dataclass(frozen=True, slots=True)
class P2PShape:
    """The route of a pipeline send: same server or not, bottleneck (B/s), latency (s), congestion."""

    same_server: bool
    bottleneck_Bps: float
    latency_s: float
    tier: str
    congestion: float = 1.0


class Fabric(Protocol):
    """What the topo model asks of a fabric."""

    gpus: int
    gpus_per_server: int
    gpu_type: str | None
    description: str

    def group_shape(self, ranks: Sequence[int]) -> GroupShape: ...

    def p2p_shape(self, a: int, b: int) -> P2PShape: ...


def _servers(ranks: np.ndarray, gps: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(distinct servers, first member on each, max members per server)."""
    servers = ranks // gps
    unique, first, counts = np.unique(servers, return_index=True, return_counts=True)
    return unique, ranks[first], int(counts.max())


class DerivedFabric:
    """Servers of ``gpus_per_server`` GPUs on NVLink; NICs on one non-blocking switch.

    ``nvlink_Bps`` is one GPU's NVLink rate, ``nic_Bps`` one NIC's, both bytes per second;
    ``nics_per_server`` NICs are shared by the server's GPUs.
    """

    def __init__(self, gpus: int, gpus_per_server: int, nics_per_server: int, nvlink_Bps: float, nic_Bps: float,
                 gpu_type: str | None = None) -> None:
        self.gpus, self.gpus_per_server, self.gpu_type = gpus, gpus_per_server, gpu_type
        self.nvlink_Bps = nvlink_Bps
        self.nic_share_Bps = nic_Bps * nics_per_server / gpus_per_server
        self.description = (f"derived two-tier fabric: {gpus} GPUs, {gpus_per_server} per server, NVLink "
                            f"{nvlink_Bps / 1e9:.1f} GB/s, {nics_per_server} NICs of {nic_Bps / 1e9:.1f} GB/s per server")

    def group_shape(self, ranks: Sequence[int]) -> GroupShape:
        members = np.asarray(ranks, dtype=np.int64)
        unique, _, per_server = _servers(members, self.gpus_per_server)
        m = len(unique)
        return GroupShape(len(members), m, per_server, "NVSwitch" if m == 1 else "ASW", self.nvlink_Bps,
                          self.nic_share_Bps, 2 * NVLINK_LINK_LATENCY_S, 0.0 if m == 1 else 2 * NIC_LINK_LATENCY_S)

    def p2p_shape(self, a: int, b: int) -> P2PShape:
        if a // self.gpus_per_server == b // self.gpus_per_server:
            return P2PShape(True, self.nvlink_Bps, 2 * NVLINK_LINK_LATENCY_S, "NVSwitch")
        return P2PShape(False, self.nic_share_Bps, 2 * NIC_LINK_LATENCY_S, "ASW")


class TopologyFabric:
    """Ranks placed on the GPUs of a :class:`topo.Topology` (rank r on GPU r)."""

    def __init__(self, topology, gpus: int) -> None:
        self.topology = topology
        self.gpus = gpus
        self.gpus_per_server = topology.gpus_per_server
        self.gpu_type = topology.gpu_type
        gps = self.gpus_per_server
        self.nvlink_Bps = topology.nvlink_bytes_per_s
        self.nic_share_Bps = topology.nic_bytes_per_s_per_server / gps
        ratios = topology.oversubscription
        asw = ratios.get("ASW", 1.0)
        self.oversubscription: dict[str, float] = {"ASW": asw, "PSW": asw * ratios.get("PSW", 1.0)}
        """Aggregate NIC-to-uplink ratio of traffic leaving an ASW's domain and a pod."""
        self.nvlink_latency_s = topology.path(0, 1).latency_s if gps > 1 else 0.0
        self._asw, self._pod = self._domains()
        self._path_cache: dict[tuple[int, int], tuple[str, float, float]] = {}
        self._shapes: dict[object, GroupShape] = {}
        self.description = (f"{topology.source or 'topology'}: {topology.gpu_count} GPUs ({gpus} used), {gps} per "
                            f"server, {topology.shape}, NVLink {self.nvlink_Bps / 1e9:g} GB/s and NIC share "
                            f"{self.nic_share_Bps / 1e9:g} GB/s per GPU (nominal)")

    def _domains(self) -> tuple[np.ndarray, np.ndarray]:
        """Per GPU: the lowest ASW its NIC reaches, and the pod of that ASW (components of the
        ASW-PSW links: every ASW of a pod links to the pod's PSWs)."""
        topo = self.topology
        kind, level, src, dst = topo.node_kind, topo.level, topo.src, topo.dst
        gpu_side = (kind[src] == 0) & (level[dst] == 1)
        other = (kind[dst] == 0) & (level[src] == 1)
        gpu = np.concatenate([src[gpu_side], dst[other]])
        sw = np.concatenate([dst[gpu_side], src[other]])
        asw = np.full(topo.gpu_count, -1, dtype=np.int64)
        order = np.argsort(-sw, kind="stable")  # assign in descending order so the lowest id wins
        asw[gpu[order]] = sw[order]
        up = (level[src] >= 1) & (level[src] <= 2) & (level[dst] >= 1) & (level[dst] <= 2)
        label = connected_labels(topo.node_count, src[up], dst[up])
        pod = np.where(asw >= 0, label[np.maximum(asw, 0)], -1)
        return asw, pod

    def _path(self, a: int, b: int) -> tuple[str, float, float]:
        key = (a, b)
        hit = self._path_cache.get(key)
        if hit is None:
            try:
                path = self.topology.path(a, b)
            except ValueError as exc:  # e.g. servers without a network between them
                raise ConfigError(f"{self.topology.source or 'the topology'}: {exc}") from None
            hit = self._path_cache[key] = (path.tier, path.latency_s, path.bottleneck_bytes_per_s)
        return hit

    def _partner(self, members: np.ndarray, gps: int) -> int:
        """A member on another server with the first member's local index when one exists (NCCL
        keeps rings on one rail, PXN moves the data onto it over NVLink), as far from the first
        member as the group reaches: another pod, else another ASW."""
        r0 = int(members[0])
        others = members[members // gps != r0 // gps]
        same_rail = others[others % gps == r0 % gps]
        if len(same_rail):
            others = same_rail
        for domain in (self._pod, self._asw):
            far = others[domain[others] != domain[r0]]
            if len(far):
                return int(far[-1])
        return int(others[-1])

    def group_shape(self, ranks: Sequence[int]) -> GroupShape:
        """The shape of the group of ``ranks`` (cached per member list: sweeps on one fabric ask again)."""
        key = ranks if isinstance(ranks, range) else tuple(ranks)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = self._group_shape(ranks)
        return shape

    def _group_shape(self, ranks: Sequence[int]) -> GroupShape:
        gps = self.gpus_per_server
        members = np.asarray(ranks, dtype=np.int64)
        unique, firsts, per_server = _servers(members, gps)
        m = len(unique)
        n = len(members)
        if m == 1:
            return GroupShape(n, 1, per_server, "NVSwitch", self.nvlink_Bps, self.nic_share_Bps, self.nvlink_latency_s, 0.0)
        tier, latency, _ = self._path(int(members[0]), self._partner(members, gps))
        ring_c = a2a_c = 1.0
        for name, domain in (("ASW", self._asw), ("PSW", self._pod)):
            d = len(np.unique(domain[firsts]))
            if d > 1:
                o = self.oversubscription.get(name, 1.0)
                ring_c = max(ring_c, congestion(o, d / m))
                a2a_c = max(a2a_c, congestion(o, 1.0 - 1.0 / d))
        return GroupShape(n, m, per_server, tier, self.nvlink_Bps, self.nic_share_Bps, self.nvlink_latency_s,
                          latency, ring_c, a2a_c)

    def p2p_shape(self, a: int, b: int) -> P2PShape:
        gps = self.gpus_per_server
        if a // gps == b // gps:
            return P2PShape(True, self.nvlink_Bps, self.nvlink_latency_s, "NVSwitch")
        tier, latency, bottleneck = self._path(a, b)
        c = 1.0
        if self._asw[a] != self._asw[b]:
            c = max(c, congestion(self.oversubscription.get("ASW", 1.0), 1.0))
        if self._pod[a] != self._pod[b]:
            c = max(c, congestion(self.oversubscription.get("PSW", 1.0), 1.0))
        return P2PShape(False, min(bottleneck, self.nic_share_Bps), latency, tier, c)

"""Routes inside the servers of a topology with PCIe switches and CPU sockets (:mod:`topo.server`): which NIC a GPU
uses and over which links, when NVLink joins two GPUs, and NCCL's path type of each GPU-NIC path.

Rules, each NCCL's (NVIDIA/nccl, ``src/graph``), applied to the links of the file:

* A GPU's path to a NIC is the shortest chain of PCIe links from the GPU to the PCIe switch that holds the NIC,
  then the NIC link; GPUs and NVSwitches do not forward PCIe traffic.  Its type is NCCL's: ``PIX`` through one PCIe
  switch, ``PXB`` through several, ``PHB`` through a CPU socket (root complex), ``SYS`` across sockets
  (``src/graph/paths.cc``); its bandwidth the slowest link's nominal rate.
* PXN (``ncclTopoComputePaths``, "Update paths for NICs"): with PXN enabled (NCCL's default, ``NCCL_PXN_DISABLE=0``)
  GPU ``g`` reaches NIC ``n`` through the NIC's local GPU ``p`` (the GPU with the best path to ``n``, lowest id) when
  ``p`` is PXB or better to ``n``, NVLink-connected to ``g``, and either faster to ``n`` than ``g`` or ``g``'s own
  path goes through the CPU (``PHB``/``SYS``): ``g`` -> NVLink -> ``p`` -> ``p``'s PCIe path -> NIC, type ``PXN``.
* A GPU's NIC (``ncclTopoGetLocalNet``, channel 0): among the NICs of best (bandwidth, type), the one at index
  ``dev % localGpuCount`` (bit-mirrored when the count of such NICs is a power of two), ``dev`` the GPU's index in its
  server and ``localGpuCount`` the GPUs local to the first such NIC (``src/graph/topo.cc``).
* Point-to-point with PXN (``ncclTopoGetNetDev``, ``NCCL_P2P_PXN_LEVEL`` 2, the default): the sender uses the NIC that
  the GPU of its own server with the receiver's device index uses (the receiver's rail), through that NIC's local GPU
  when it is NVLink-connected to the sender and PXB or better to the NIC; otherwise its own NIC.  Receives use the
  receiver's own NIC and PCIe path ("We don't support PXN on receive yet", ``src/transport/net.cc``).
* Two GPUs of a server talk over NVLink when they share an NVSwitch or a direct GPU-GPU link (``--nvlink pairs``),
  else over their PCIe path (through the CPU when their switches differ).

A route is a tuple of directed link keys: ``(link index, 0)`` along the file's src -> dst, ``(link index, 1)`` back;
``("nv+", g)`` / ``("nv-", g)`` stand for GPU ``g``'s NVSwitch ports out and in (the sum of its GPU-NVSwitch links).
:meth:`ServerHierarchy.capacity_bps` gives each key's nominal rate, :meth:`ServerHierarchy.link_class` its class
(``nvlink``, ``pcie``, ``socket``, ``nic``), so that a simulator can share each link among the flows that cross it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from topo.node_kinds import GPU, NVSWITCH, PACKET_SWITCH
from topo.topology import ROLE_CPU, ROLE_PCIE, connected_labels
from utils.errors import FormatError

PATH_TYPES = ("PIX", "PXB", "PXN", "PHB", "SYS")
"""NCCL's GPU-NIC path types that can occur here, best first (src/graph/topo.h orders PIX < PXB < PXN < PHB < SYS)."""

Key = tuple[Any, int]
"""A directed link key: ``(link index, 0 or 1)``, or ``("nv+", gpu)`` / ``("nv-", gpu)``."""


@dataclass(frozen=True)
class NicPath:
    """GPU ``gpu``'s path to NIC ``nic`` (the NIC's link index): ``up`` the directed keys from the GPU to the network
    switch (NIC link last), ``down`` from the network switch to the GPU over PCIe (receives never use PXN); ``kind``
    NCCL's path type, ``bps`` the slowest nominal rate on ``up`` (bits per second), ``relay`` the PXN GPU or None."""

    gpu: int
    nic: int
    up: tuple[Key, ...]
    down: tuple[Key, ...]
    kind: str
    bps: float
    relay: int | None = None


class ServerHierarchy:
    """The inside of every server of a :class:`topo.topology.Topology` that has :attr:`~topo.topology.Topology.server_roles`.

    ``pxn`` says whether NCCL's PXN may route a GPU's sends through an NVLink peer's NIC (NCCL's default: yes)."""

    def __init__(self, topology: Any, pxn: bool = True) -> None:
        self.topo = topology
        self.pxn = pxn
        t = topology
        kind, role = t.node_kind, t.role_of
        self.gps = t.gpus_per_server
        self._bps = t.bandwidth_bps
        self._lat = t.latency_s
        host = kind == GPU
        inside = np.zeros(t.node_count, dtype=bool)
        inside[t.role_nodes] = True
        # per node: (neighbour, link index) over the links inside servers (PCIe, socket, NVLink pair)
        self._adj: dict[int, list[tuple[int, int]]] = {}
        self._pair: dict[int, tuple[int, int]] = {}
        self._nvswitch: dict[int, list[tuple[int, int]]] = {}
        self._class: dict[int, str] = {}
        nics: dict[int, list[int]] = {}
        for e, (a, b) in enumerate(zip(t.src.tolist(), t.dst.tolist())):
            ka, kb = int(kind[a]), int(kind[b])
            if ka == GPU and kb == GPU:
                self._pair[a], self._pair[b] = (b, e), (a, e)
                self._class[e] = "nvlink"
            elif NVSWITCH in (ka, kb) and GPU in (ka, kb):
                g, sw = (a, b) if ka == GPU else (b, a)
                self._nvswitch.setdefault(g, []).append((sw, e))
                self._class[e] = "nvlink"
            elif (host[a] or inside[a]) and (host[b] or inside[b]):
                self._adj.setdefault(a, []).append((b, e))
                self._adj.setdefault(b, []).append((a, e))
                self._class[e] = "socket" if role.get(a) == ROLE_CPU and role.get(b) == ROLE_CPU else "pcie"
            elif (host[a] or inside[a]) != (host[b] or inside[b]) and PACKET_SWITCH in (ka, kb):
                holder = a if (host[a] or inside[a]) else b
                nics.setdefault(holder, []).append(e)
                self._class[e] = "nic"
        self._nic_holder = {e: h for h, es in nics.items() for e in es}
        self._holder_nics = nics
        self._server_nics: dict[int, list[int]] = {}
        for h, es in nics.items():
            s = self._server_of_node(h)
            self._server_nics.setdefault(s, []).extend(es)
        for es in self._server_nics.values():
            es.sort()
        self._paths: dict[tuple[int, int], NicPath] = {}
        self._own: dict[tuple[int, int], NicPath] = {}
        self._local: dict[int, int] = {}
        self._local_gpu: dict[int, int] = {}
        self._net: dict[tuple[int, int], tuple[str, float]] = {}
        self._pcie: dict[tuple[int, int], tuple[tuple[Key, ...], int, int, int] | None] = {}

    def _bad(self, what: str) -> FormatError:
        """A server the file describes that cannot be routed (a hand-edited ``#server`` line, a link left out): one line
        naming the file, not a traceback."""
        return FormatError(self.topo.source or "the topology", f"{what}: check its #server lines and the links inside "
                           "its servers (python -m topo.gen --gpus_per_nic writes them)")

    # ---- nodes and links --------------------------------------------------------------------------
    def _server_of_node(self, node: int) -> int:
        """The server of a GPU or of a switch inside a server (the server of a GPU it reaches)."""
        if node < self.topo.gpu_count:
            return node // self.gps
        seen, queue = {node}, deque([node])
        while queue:
            u = queue.popleft()
            for v, _ in self._adj.get(u, ()):
                if v < self.topo.gpu_count:
                    return v // self.gps
                if v not in seen:
                    seen.add(v)
                    queue.append(v)
        raise self._bad(f"{self.topo.role_of.get(node, 'node')} {node} reaches no GPU inside its server")

    def link_class(self, key: Key) -> str:
        """``nvlink``, ``pcie``, ``socket`` or ``nic`` of a directed key."""
        if key[0] in ("nv+", "nv-"):
            return "nvlink"
        return self._class[key[0]]

    def capacity_bps(self, key: Key) -> float:
        """Nominal rate of a directed key, bits per second (a GPU's NVSwitch port: the sum of its NVSwitch links)."""
        if key[0] in ("nv+", "nv-"):
            return float(sum(self._bps[e] for _, e in self._nvswitch[key[1]]))
        return float(self._bps[key[0]])

    def latency_s(self, route: tuple[Key, ...]) -> float:
        """Sum of the link latencies along ``route`` (a GPU's NVSwitch port: its first NVSwitch link's)."""
        total = 0.0
        for key in route:
            e = self._nvswitch[key[1]][0][1] if key[0] in ("nv+", "nv-") else key[0]
            total += float(self._lat[e])
        return total

    def switch_of(self, gpu: int) -> int:
        """The PCIe switch (or other node inside the server) GPU ``gpu`` attaches to, lowest id first; the GPU itself
        when it holds its NIC (SimAI's wiring)."""
        return min((v for v, _ in self._adj.get(gpu, ())), default=gpu)

    def nics(self, server: int) -> list[int]:
        """Link indices of the NICs of ``server``, ascending."""
        return self._server_nics.get(server, [])

    def nic_switch(self, nic: int) -> int:
        """The network switch (ASW) a NIC link reaches."""
        a, b = int(self.topo.src[nic]), int(self.topo.dst[nic])
        return b if a == self._nic_holder[nic] else a

    @cached_property
    def nvlink_bps(self) -> dict[int, float]:
        """Per GPU with NVLink: its NVLink rate per direction (NVSwitch links summed, or its pair link), bits per second."""
        out = {g: float(sum(self._bps[e] for _, e in links)) for g, links in self._nvswitch.items()}
        for g, (_, e) in self._pair.items():
            out[g] = out.get(g, 0.0) + float(self._bps[e])
        return out

    # ---- NVLink and PCIe between two GPUs --------------------------------------------------------------
    def nvlink_route(self, a: int, b: int) -> tuple[Key, ...] | None:
        """The NVLink route from GPU ``a`` to GPU ``b`` of one server (shared NVSwitch, or their pair link), else None."""
        shared = {sw for sw, _ in self._nvswitch.get(a, ())} & {sw for sw, _ in self._nvswitch.get(b, ())}
        if shared:
            return (("nv+", a), ("nv-", b))
        pair = self._pair.get(a)
        if pair is not None and pair[0] == b:
            e = pair[1]
            return ((e, 0 if int(self.topo.src[e]) == a else 1),)
        return None

    def _walk(self, start: int, goal: int) -> tuple[list[int], list[int]] | None:
        """The shortest chain of PCIe/socket links from ``start`` to ``goal`` (lowest ids first), as (nodes, links);
        only switches forward."""
        ngpu = self.topo.gpu_count
        prev: dict[int, tuple[int, int] | None] = {start: None}
        queue = deque([start])
        while queue:
            u = queue.popleft()
            if u == goal:
                break
            if u != start and u < ngpu:
                continue  # a GPU is an end, never a hop
            for v, e in sorted(self._adj.get(u, ())):
                if v not in prev:
                    prev[v] = (u, e)
                    queue.append(v)
        if goal not in prev:
            return None
        nodes, links = [goal], []
        while prev[nodes[-1]] is not None:
            u, e = prev[nodes[-1]]  # type: ignore[misc]
            links.append(e)
            nodes.append(u)
        return nodes[::-1], links[::-1]

    def _directed(self, nodes: list[int], links: list[int]) -> tuple[Key, ...]:
        src = self.topo.src
        return tuple((e, 0 if int(src[e]) == u else 1) for u, e in zip(nodes, links))

    def pcie_route(self, a: int, b: int) -> tuple[Key, ...] | None:
        """The PCIe route from GPU ``a`` to GPU ``b`` of one server (through the CPU when their switches differ)."""
        walk = self._walk(a, b)
        return None if walk is None else self._directed(*walk)

    def route(self, a: int, b: int) -> tuple[tuple[Key, ...], str]:
        """The route between two GPUs of one server and its class: NVLink when they have it, else PCIe."""
        nv = self.nvlink_route(a, b)
        if nv is not None:
            return nv, "nvlink"
        pcie = self.pcie_route(a, b)
        if pcie is None:
            raise self._bad(f"GPUs {a} and {b} share neither NVLink nor a PCIe tree")
        return pcie, "pcie"

    # ---- GPU-NIC paths ------------------------------------------------------------------------------
    def _pcie_path(self, gpu: int, nic: int) -> NicPath | None:
        """GPU ``gpu``'s own PCIe path to NIC ``nic``; None when it has none (SimAI's wiring: another GPU's NIC)."""
        key = (gpu, nic)
        if key not in self._own:
            self._own[key] = self._pcie_path_of(gpu, nic)
        return self._own[key]

    def _pcie_path_of(self, gpu: int, nic: int) -> NicPath | None:
        holder = self._nic_holder[nic]
        walk = self._walk(gpu, holder) if holder != gpu else ([gpu], [])
        if walk is None:
            return None
        nodes, links = walk
        role = self.topo.role_of
        switches = sum(1 for n in nodes if role.get(n) == ROLE_PCIE)
        through_cpu = any(role.get(n) == ROLE_CPU for n in nodes)
        across = any(self._class[e] == "socket" for e in links)
        kind = "SYS" if across else "PHB" if through_cpu else "PIX" if switches <= 1 else "PXB"
        up = self._directed(nodes, links) + ((nic, 0 if int(self.topo.src[nic]) == holder else 1),)
        down = tuple((e, 1 - d) for e, d in reversed(up))
        bps = min(self.capacity_bps(k) for k in up)
        return NicPath(gpu, nic, up, down, kind, bps)

    def path(self, gpu: int, nic: int) -> NicPath | None:
        """GPU ``gpu``'s path to NIC ``nic`` (PXN applied when enabled and allowed: see the module docstring); None
        when it has none."""
        key = (gpu, nic)
        if key not in self._paths:
            found = own = self._pcie_path(gpu, nic)
            if self.pxn:
                relay = self.local_gpu(nic)
                via = self._pcie_path(relay, nic) if relay != gpu else None
                nv = self.nvlink_route(gpu, relay) if via is not None else None
                if (nv is not None and PATH_TYPES.index(via.kind) <= PATH_TYPES.index("PXB")
                        and (own is None or via.bps > own.bps or PATH_TYPES.index(own.kind) > PATH_TYPES.index("PXN"))):
                    bps = min(via.bps, *(self.capacity_bps(k) for k in nv))
                    found = NicPath(gpu, nic, nv + via.up, own.down if own is not None else (), "PXN", bps, relay)
            self._paths[key] = found
        return self._paths[key]

    def _rank(self, p: NicPath) -> tuple[float, int]:
        return (-p.bps, PATH_TYPES.index(p.kind))

    def local_gpu(self, nic: int) -> int:
        """The NIC's local GPU: best (bandwidth, type) PCIe path to it, lowest id (``ncclTopoGetLocalGpu``)."""
        found = self._local_gpu.get(nic)
        if found is None:
            server = self._server_of_node(self._nic_holder[nic])
            gpus = range(server * self.gps, (server + 1) * self.gps)
            reach = [g for g in gpus if self._pcie_path(g, nic) is not None]
            found = self._local_gpu[nic] = min(reach, key=lambda g: (self._rank(self._pcie_path(g, nic)), g))
        return found

    def local_nic(self, gpu: int) -> int:
        """The NIC GPU ``gpu`` uses (``ncclTopoGetLocalNet``, channel 0; see the module docstring)."""
        found = self._local.get(gpu)
        if found is None:
            found = self._local[gpu] = self._local_nic(gpu)
        return found

    def _local_nic(self, gpu: int) -> int:
        server = gpu // self.gps
        nics = self.nics(server)
        if not nics:
            raise self._bad(f"server {server} has no NIC (no link from its GPUs, PCIe switches or CPU sockets to a "
                            "network switch)")
        paths = {n: self.path(gpu, n) for n in nics}
        ranked = {n: self._rank(p) for n, p in paths.items() if p is not None}
        if not ranked:
            raise self._bad(f"GPU {gpu} reaches none of its server's NICs")
        best = min(ranked.values())
        local = [n for n in nics if ranked.get(n) == best]
        first = local[0]
        gpus = range(server * self.gps, (server + 1) * self.gps)
        # the GPUs local to the first such NIC, from the NIC's side (no PXN towards a GPU)
        from_nic = {g: self._rank(p) for g in gpus if (p := self._pcie_path(g, first)) is not None}
        local_gpus = sum(1 for rank in from_nic.values() if rank == min(from_nic.values()))
        index = (gpu % self.gps) % local_gpus
        if len(local) & (len(local) - 1) == 0:
            index = _mirror(index, len(local))
        return local[index % len(local)]

    def send_path(self, gpu: int, peer: int | None = None) -> NicPath:
        """The path GPU ``gpu``'s data leaves its server by: with PXN and a ``peer`` (a p2p receiver on another
        server), the NIC of the receiver's rail through its local GPU when NCCL allows it; else its own NIC."""
        own = self.local_nic(gpu)
        if self.pxn and peer is not None:
            server = gpu // self.gps
            rail_gpu = server * self.gps + peer % self.gps
            nic = self.local_nic(rail_gpu)
            relay = self.local_gpu(nic)
            via = self._pcie_path(relay, nic)
            if via is not None and PATH_TYPES.index(via.kind) <= PATH_TYPES.index("PXB"):
                if relay == gpu:
                    return via
                nv = self.nvlink_route(gpu, relay)
                if nv is not None:
                    mine = self._pcie_path(gpu, nic)
                    return NicPath(gpu, nic, nv + via.up, mine.down if mine is not None else (), "PXN",
                                   min(via.bps, *(self.capacity_bps(k) for k in nv)), relay)
        return self.path(gpu, own)  # type: ignore[return-value]

    def recv_path(self, gpu: int) -> NicPath:
        """The path data reaches GPU ``gpu`` by: its own NIC, then its PCIe path (no PXN on receive)."""
        found = self._pcie_path(gpu, self.local_nic(gpu))
        if found is None:  # its NIC is reached through a PXN peer only: receive there and over NVLink (never here)
            raise self._bad(f"GPU {gpu} has no PCIe path to its NIC")
        return found

    def network(self, switch_a: int, switch_b: int) -> tuple[str, float]:
        """The highest tier and the latency (seconds) of the network between two network switches (the ASWs two NIC
        links reach): the switch's own tier and 0 when they are one switch, else the shortest switch path's."""
        key = (switch_a, switch_b)
        found = self._net.get(key)
        if found is None:
            if switch_a == switch_b:
                found = (self.topo.tier_of(switch_a), 0.0)
            else:
                route = self.topo._router._network(((switch_a, 0.0, 0.0),), ((switch_b, 0.0, 0.0),))
                if route is None:
                    raise self._bad(f"no network path between switches {switch_a} and {switch_b}")
                found = (route[1], route[4])
            self._net[key] = found
        return found

    def transfer(self, send: NicPath, recv: NicPath) -> tuple[tuple[Key, ...], str, float]:
        """A transfer between servers leaving by ``send`` and arriving by ``recv``: its route (directed keys), the
        highest network tier it climbs and its latency (seconds: the route's links and the network between)."""
        tier, between = self.network(self.nic_switch(send.nic), self.nic_switch(recv.nic))
        return send.up + recv.down, tier, self.latency_s(send.up) + between + self.latency_s(recv.down)

    @cached_property
    def domains(self) -> tuple[dict[int, int], dict[int, int]]:
        """Per GPU the ASW its NIC reaches and that ASW's pod (the components of the ASW-PSW links)."""
        topo = self.topo
        asw = {g: self.nic_switch(self.local_nic(g)) for g in range(topo.gpu_count)}
        level, src, dst = topo.level, topo.src, topo.dst
        up = (level[src] >= 1) & (level[src] <= 2) & (level[dst] >= 1) & (level[dst] <= 2)
        label = connected_labels(topo.node_count, src[up], dst[up])
        return asw, {g: int(label[s]) for g, s in asw.items()}

    def describe(self, server: int = 0) -> list[str]:
        """One line per GPU slot of ``server``: its NIC (in the server's order), NCCL's path type and PXN relay GPU,
        and the path's slowest nominal rate (for reports)."""
        out = []
        for g in range(server * self.gps, (server + 1) * self.gps):
            p = self.path(g, self.local_nic(g))
            via = f" via GPU {p.relay}" if p.relay is not None else ""
            out.append(f"slot {g - server * self.gps}: NIC {self.nics(server).index(p.nic)} ({p.kind}{via}, "
                       f"{p.bps / 1e9:g} Gbps)")
        return out


def _mirror(value: int, pow2: int) -> int:
    """NCCL's ``mirrorBits``: ``value``'s low log2(``pow2``) bits reversed."""
    out, b, mb = 0, 1, pow2 >> 1
    while b < pow2:
        if value & b:
            out |= mb
        b <<= 1
        mb >>= 1
    return out


def needs_hierarchy(topology: Any) -> bool:
    """Whether routing a topology needs :class:`ServerHierarchy`: its servers hold PCIe switches and CPU sockets
    (``#server`` lines), or its GPUs' NICs differ in rate (``topo.gen --server_nic_bw``), which the uniform NIC share
    of :class:`simulator.topo.fabric.TopologyFabric` cannot tell apart."""
    if getattr(topology, "server_roles", ()):
        return True
    rates = topology.nic_bps_per_gpu
    return bool(len(rates)) and bool((rates != rates[0]).any())


def hierarchy_of(topology: Any, pxn: bool = True) -> ServerHierarchy | None:
    """The :class:`ServerHierarchy` of a topology that :func:`needs_hierarchy` (cached on it per ``pxn``), else None."""
    if not needs_hierarchy(topology):
        return None
    cache = topology.__dict__.setdefault("_hierarchies", {})
    found = cache.get(pxn)
    if found is None:
        found = cache[pxn] = ServerHierarchy(topology, pxn)
    return found

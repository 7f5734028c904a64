"""Read SimAI topology files and model what a simulator needs from them.

The file format (``docs/formats.md`` section 3, ``docs/topology.md`` section 2)::

    line 1: <total nodes> <gpus per server> <nvswitch count> <other switch count> <link count> <gpu type>
    line 2: <switch id> ... (the first <nvswitch count> are NVSwitches, the rest packet switches)
    then exactly <link count> lines: <src> <dst> <bandwidth> <latency> <error rate>

SimAI's ns-3 reader takes whitespace-separated tokens, so line 2 may or may not end with a space and
the last line may or may not end with a newline; both are accepted.  We are stricter than that reader
where it would misread silently: every link sits on its own line of 5 fields, the header's link count
equals the number of link lines, ids lie in ``0 .. total-1``, GPUs are ``0 .. G-1`` (G = total minus
switches; SimAI maps rank r to node r) and G is a multiple of the GPUs per server (GPU g is on server
``g // gps``).  Errors are :class:`~utils.errors.FormatError` naming the file, line and field.

Units: bandwidths are bits per second (``*_bps``) with byte versions (``*_bytes_per_s`` = bps / 8);
latencies are seconds (``*_s``).  The link strings are kept as written, so :meth:`Topology.to_text`
gives back the generator's bytes.

Tiers are read from the wiring, not from id order: NVSwitches are the header's; a packet switch
linked to a GPU is an ``ASW``, one linked to an ASW (and no GPU) a ``PSW``, the next level ``core``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from typing import NamedTuple

import numpy as np

from topo.node_kinds import GPU, NVSWITCH, PACKET_SWITCH
from topo.paths import Path, Router
from topo.units import bytes_per_s, parse_bandwidth, parse_error_rate, parse_latency
from utils.errors import FormatError
from utils.io import atomic_write, read_text, refuse_device

HEADER_FIELDS = ("total_nodes", "gpus_per_server", "nvswitch_count", "other_switch_count", "link_count", "gpu_type")
LINK_FIELDS = ("src", "dst", "bandwidth", "latency", "error_rate")
MAX_NODES = 2**32 - 1
"""The most nodes a file may declare: ns-3 (SimAI's packet simulator) numbers nodes with 32 bits."""
TIER_NAMES = {1: "ASW", 2: "PSW", 3: "core"}
"""Packet-switch tier by distance (in switch hops) from the GPUs; deeper tiers are ``tier4`` ..."""
ROLE_PCIE, ROLE_CPU = "pcie_switch", "cpu_socket"
"""Roles of packet switches inside a server (:mod:`topo.server`): PCIe switches and CPU sockets (root complexes)."""
ROLES = (ROLE_PCIE, ROLE_CPU)
ROLE_MARK = "#server"
"""Our lines after the link lines (``#server <role> <id> ...``; SimAI's reader stops after the links)."""

class Link(NamedTuple):
    """One link line as written (bandwidth bits per second, latency as an ns-3 time string)."""

    src: int
    dst: int
    bandwidth: str
    latency: str
    error_rate: str


@dataclass(frozen=True, eq=False, repr=False)
class Topology:
    """A SimAI topology: nodes, links (as numpy columns) and the quantities derived from the wiring.

    Links are columns: ``src``, ``dst`` (node ids) and, for bandwidth, latency and error rate, a code
    per link into a tuple of the distinct strings (``bandwidth_strings[bandwidth_codes[i]]``).
    """

    node_count: int
    gpus_per_server: int
    nvswitch_count: int
    gpu_type: str
    switch_ids: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    bandwidth_codes: np.ndarray
    bandwidth_strings: tuple[str, ...]
    latency_codes: np.ndarray
    latency_strings: tuple[str, ...]
    error_codes: np.ndarray
    error_strings: tuple[str, ...]
    source: str | None = None
    """The file it was read from (None when built in memory)."""
    server_roles: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """Packet switches that sit inside a server, per role (:data:`ROLE_PCIE`, :data:`ROLE_CPU`; ``#server`` lines
    after the links, :mod:`topo.server`); empty for SimAI's files, whose packet switches are all network switches."""

    @classmethod
    def from_arrays(cls, *, gpus_per_server: int, nvswitch_count: int, gpu_type: str, switch_ids: np.ndarray,
                    src: np.ndarray, dst: np.ndarray, bandwidth_codes: np.ndarray, bandwidth_strings: tuple[str, ...],
                    latency_codes: np.ndarray, latency_strings: tuple[str, ...], error_codes: np.ndarray,
                    error_strings: tuple[str, ...], node_count: int | None = None, source: str | None = None,
                    server_roles: tuple[tuple[str, tuple[int, ...]], ...] = ()) -> Topology:
        """A topology from columns (the generator's path: no validation).  ``node_count`` defaults to
        the highest switch id + 1 (SimAI numbers switches after the GPUs)."""
        if node_count is None:
            node_count = int(switch_ids.max()) + 1 if len(switch_ids) else 0
        return cls(node_count, gpus_per_server, nvswitch_count, gpu_type, np.asarray(switch_ids), np.asarray(src),
                   np.asarray(dst), np.asarray(bandwidth_codes), tuple(bandwidth_strings), np.asarray(latency_codes),
                   tuple(latency_strings), np.asarray(error_codes), tuple(error_strings), source, tuple(server_roles))

    def __repr__(self) -> str:
        return (f"Topology(source={self.source!r}, gpus={self.gpu_count}, gpus_per_server={self.gpus_per_server}, "
                f"nvswitches={self.nvswitch_count}, other_switches={self.other_switch_count}, links={self.link_count}, "
                f"gpu_type={self.gpu_type!r})")

    # ---- counts ---------------------------------------------------------------------------------
    @property
    def gpu_count(self) -> int:
        return self.node_count - len(self.switch_ids)

    @property
    def other_switch_count(self) -> int:
        """Packet switches (ASW, PSW, core): the header's fourth field."""
        return len(self.switch_ids) - self.nvswitch_count

    @property
    def link_count(self) -> int:
        return len(self.src)

    @property
    def server_count(self) -> int:
        return self.gpu_count // self.gpus_per_server

    def server_of(self, gpu: int) -> int:
        """The server of GPU ``gpu`` (``gpu // gpus_per_server``, SimAI's placement)."""
        return gpu // self.gpus_per_server

    def gpus_of_server(self, server: int) -> range:
        """GPU ids of ``server``."""
        return range(server * self.gpus_per_server, (server + 1) * self.gpus_per_server)

    def link(self, i: int) -> Link:
        """Link ``i`` (0-based, file order) as written."""
        return Link(int(self.src[i]), int(self.dst[i]), self.bandwidth_strings[self.bandwidth_codes[i]],
                    self.latency_strings[self.latency_codes[i]], self.error_strings[self.error_codes[i]])

    # ---- per-link numbers -----------------------------------------------------------------------
    @cached_property
    def bandwidth_bps(self) -> np.ndarray:
        """Bandwidth of each link, bits per second (float64)."""
        return np.array([parse_bandwidth(s) for s in self.bandwidth_strings], dtype=np.float64)[self.bandwidth_codes]

    @property
    def bandwidth_bytes_per_s(self) -> np.ndarray:
        """Bandwidth of each link, bytes per second."""
        return bytes_per_s(self.bandwidth_bps)

    @cached_property
    def latency_s(self) -> np.ndarray:
        """Latency of each link, seconds (float64)."""
        return np.array([parse_latency(s) for s in self.latency_strings], dtype=np.float64)[self.latency_codes]

    @cached_property
    def error_rate(self) -> np.ndarray:
        """Packet error rate of each link (0 = ns-3's global model applies)."""
        return np.array([parse_error_rate(s) for s in self.error_strings], dtype=np.float64)[self.error_codes]

    # ---- nodes and tiers ------------------------------------------------------------------------
    @cached_property
    def node_kind(self) -> np.ndarray:
        """Per node: :data:`GPU`, :data:`NVSWITCH` or :data:`PACKET_SWITCH` (the header's roles)."""
        kind = np.full(self.node_count, GPU, dtype=np.int8)
        kind[self.switch_ids[: self.nvswitch_count]] = NVSWITCH
        kind[self.switch_ids[self.nvswitch_count:]] = PACKET_SWITCH
        return kind

    @cached_property
    def level(self) -> np.ndarray:
        """Per node: 0 for GPUs, k >= 1 for a packet switch k switch hops above the GPUs (1 = ASW,
        2 = PSW, 3 = core), -1 for NVSwitches and packet switches no GPU reaches.  The switches inside a
        server (:attr:`server_roles`: PCIe switches, CPU sockets) count as the GPUs' side, level 0, so that the
        switch a NIC link reaches is the ASW."""
        kind = self.node_kind
        host = kind == GPU
        if self.server_roles:
            host = host.copy()
            host[self.role_nodes] = True
        level = np.where(host, 0, -1).astype(np.int64)
        s, d = self.src, self.dst
        packet = (kind[s] == PACKET_SWITCH) & (kind[d] == PACKET_SWITCH) & ~host[s] & ~host[d]
        ends = np.concatenate([d[host[s] & (kind[d] == PACKET_SWITCH) & ~host[d]],
                               s[host[d] & (kind[s] == PACKET_SWITCH) & ~host[s]]])
        level[ends] = 1
        u, v = np.concatenate([s[packet], d[packet]]), np.concatenate([d[packet], s[packet]])
        k = 1
        while True:
            grow = (level[u] == k) & (level[v] == -1)
            if not grow.any():
                return level
            level[v[grow]] = k + 1
            k += 1

    def tier_of(self, node: int) -> str:
        """``GPU``, ``NVSwitch``, ``ASW``, ``PSW``, ``core`` (``tierN`` deeper), ``unreached``, or a server's
        ``pcie_switch`` / ``cpu_socket`` (:attr:`server_roles`)."""
        kind = self.node_kind[node]
        if self.server_roles and node in self.role_of:
            return self.role_of[node]
        if kind == GPU:
            return "GPU"
        if kind == NVSWITCH:
            return "NVSwitch"
        lev = int(self.level[node])
        return TIER_NAMES.get(lev, f"tier{lev}") if lev > 0 else "unreached"

    @cached_property
    def tiers(self) -> dict[str, np.ndarray]:
        """Switch ids per tier, ascending: always ``NVSwitch``, ``ASW``, ``PSW``, ``core`` (maybe
        empty), then any deeper tier and ``unreached`` switches when present."""
        packet = self.switch_ids[self.nvswitch_count:]
        if self.server_roles:  # a server's PCIe switches and sockets are no tier of the network
            packet = np.setdiff1d(packet, self.role_nodes)
        out = {"NVSwitch": np.sort(self.switch_ids[: self.nvswitch_count])}
        levels = self.level[packet]
        for lev in [1, 2, 3, *sorted(set(levels.tolist()) - {1, 2, 3, -1})]:
            out[TIER_NAMES.get(lev, f"tier{lev}")] = np.sort(packet[levels == lev])
        if (levels == -1).any():
            out["unreached"] = np.sort(packet[levels == -1])
        return out

    @cached_property
    def role_of(self) -> dict[int, str]:
        """Node id -> its role inside a server (:attr:`server_roles`); empty for SimAI's files."""
        return {node: role for role, ids in self.server_roles for node in ids}

    @cached_property
    def role_nodes(self) -> np.ndarray:
        """Ids of the switches inside servers (PCIe switches and CPU sockets), ascending."""
        return np.array(sorted(self.role_of), dtype=np.int64)

    # ---- per-GPU links --------------------------------------------------------------------------
    def _gpu_links(self, other_kind: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(gpu, other end, link index) of every GPU link whose other end is of ``other_kind``,
        ordered by link index."""
        if other_kind not in self._gpu_link_cache:
            kind, s, d = self.node_kind, self.src, self.dst
            idx = np.flatnonzero(((kind[s] == GPU) & (kind[d] == other_kind)) | ((kind[d] == GPU) & (kind[s] == other_kind)))
            forward = kind[s[idx]] == GPU
            self._gpu_link_cache[other_kind] = (np.where(forward, s[idx], d[idx]), np.where(forward, d[idx], s[idx]), idx)
        return self._gpu_link_cache[other_kind]

    @cached_property
    def _gpu_link_cache(self) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        return {}

    def _per_gpu(self, other_kind: int) -> np.ndarray:
        gpu, _, idx = self._gpu_links(other_kind)
        return np.bincount(gpu, weights=self.bandwidth_bps[idx], minlength=self.gpu_count)[: self.gpu_count]

    @cached_property
    def nvlink_bps_per_gpu(self) -> np.ndarray:
        """Per GPU: the sum of its GPU-NVSwitch link bandwidths, bits per second (docs/sim_model.md)."""
        return self._per_gpu(NVSWITCH)

    @cached_property
    def nic_bps_per_gpu(self) -> np.ndarray:
        """Per GPU: the sum of its network (GPU-packet switch) link bandwidths, bits per second."""
        return self._per_gpu(PACKET_SWITCH)

    @cached_property
    def nic_ports_per_gpu(self) -> np.ndarray:
        """Per GPU: its network links (1 single ToR, 2 dual ToR)."""
        gpu, _, _ = self._gpu_links(PACKET_SWITCH)
        return np.bincount(gpu, minlength=self.gpu_count)[: self.gpu_count]

    @property
    def nvlink_bps(self) -> float:
        """NVLink bandwidth per GPU, bits per second (the slowest GPU's; all alike in generated files)."""
        return float(self.nvlink_bps_per_gpu.min()) if self.gpu_count else 0.0

    @property
    def nic_bps(self) -> float:
        """Network bandwidth per GPU (all its NIC ports), bits per second (the slowest GPU's)."""
        return float(self.nic_bps_per_gpu.min()) if self.gpu_count else 0.0

    @property
    def nic_bps_per_server(self) -> float:
        """Network bandwidth of one server (all its GPUs' NIC ports), bits per second (the slowest server's)."""
        per_server = self.nic_bps_per_gpu.reshape(self.server_count, self.gpus_per_server).sum(axis=1)
        return float(per_server.min()) if self.server_count else 0.0

    @property
    def nics_per_server(self) -> int:
        """GPUs with a network link in one server (the fewest over servers): one NIC per GPU in SimAI's shapes."""
        has_nic = (self.nic_ports_per_gpu > 0).reshape(self.server_count, self.gpus_per_server).sum(axis=1)
        return int(has_nic.min()) if self.server_count else 0

    @property
    def nvlink_bytes_per_s(self) -> float:
        return bytes_per_s(self.nvlink_bps)

    @property
    def nic_bytes_per_s(self) -> float:
        return bytes_per_s(self.nic_bps)

    @property
    def nic_bytes_per_s_per_server(self) -> float:
        return bytes_per_s(self.nic_bps_per_server)

    def nic_switches(self, gpu: int) -> tuple[int, ...]:
        """The packet switches (ASWs) GPU ``gpu``'s NIC ports reach, in file order."""
        return self._router.attachments(gpu, network=True)

    # ---- structure read from the wiring ---------------------------------------------------------
    @cached_property
    def rail_optimized(self) -> bool:
        """True when every ASW serves one local GPU index (``g % gps``) only: rail k of every server
        meets on its own ASWs (docs/formats.md section 3).  A one-GPU-per-server file is never "rail"."""
        gpu, sw, _ = self._gpu_links(PACKET_SWITCH)
        if self.gpus_per_server < 2 or not len(gpu):
            return False
        local = gpu % self.gpus_per_server
        lo = np.full(self.node_count, self.gpus_per_server, dtype=np.int64)
        hi = np.full(self.node_count, -1, dtype=np.int64)
        np.minimum.at(lo, sw, local)
        np.maximum.at(hi, sw, local)
        used = hi >= 0
        return bool((lo[used] == hi[used]).all())

    @cached_property
    def dual_tor(self) -> bool:
        """True when every GPU's NIC ports reach two or more distinct ASWs (SimAI's dual ToR)."""
        gpu, sw, _ = self._gpu_links(PACKET_SWITCH)
        if not self.gpu_count or not len(gpu):
            return False
        # two distinct switches per GPU: its lowest and highest switch differ
        lo = np.full(self.gpu_count, self.node_count, dtype=np.int64)
        hi = np.full(self.gpu_count, -1, dtype=np.int64)
        np.minimum.at(lo, gpu, sw)
        np.maximum.at(hi, gpu, sw)
        return bool((hi > lo).all())

    @cached_property
    def planes(self) -> int:
        """Disjoint packet networks (connected components of the switch-to-switch links): 2 for
        SimAI's dual plane, 1 otherwise."""
        return _components(self, max_level=None)

    @cached_property
    def pods(self) -> int:
        """Pods: components of the ASW+PSW links, per plane (1 unless a core tier joins several)."""
        return max(1, _components(self, max_level=2) // max(1, self.planes))

    @property
    def shape(self) -> str:
        """SimAI's builder name that matches the wiring (e.g. ``Rail_Opti_DualToR_DualPlane``)."""
        if self.rail_optimized:
            if self.dual_tor:
                return "Rail_Opti_DualToR_DualPlane" if self.planes == 2 else "Rail_Opti_DualToR_SinglePlane"
            return "Rail_Opti_SingleToR"
        return "No_Rail_Opti_DualToR" if self.dual_tor else "No_Rail_Opti_SingleToR"

    @cached_property
    def _up_down(self) -> tuple[np.ndarray, np.ndarray]:
        level, s, d, bw = self.level, self.src, self.dst, self.bandwidth_bps
        counted = (level[s] >= 0) & (level[d] >= 0) & (level[s] != level[d])
        low = np.where(level[s] < level[d], s, d)[counted]
        high = np.where(level[s] < level[d], d, s)[counted]
        up = np.bincount(low, weights=bw[counted], minlength=self.node_count)
        down = np.bincount(high, weights=bw[counted], minlength=self.node_count)
        return up, down

    @property
    def uplink_bps(self) -> np.ndarray:
        """Per node: bandwidth of its links to the tier above, bits per second (GPUs: NIC ports)."""
        return self._up_down[0]

    @property
    def downlink_bps(self) -> np.ndarray:
        """Per node: bandwidth of its links to the tier below, bits per second."""
        return self._up_down[1]

    @cached_property
    def oversubscription(self) -> dict[str, float]:
        """Per packet-switch tier with uplinks: sum of downlink / sum of uplink bandwidth over the
        tier's switches (1.0 = non-blocking; 2.0 = half the traffic from below can climb).  The top
        tier (no uplinks) is absent; per-switch figures are :attr:`downlink_bps` / :attr:`uplink_bps`."""
        up, down = self._up_down
        out = {}
        for name, ids in self.tiers.items():
            if name in ("NVSwitch", "unreached") or not len(ids) or up[ids].sum() <= 0:
                continue
            out[name] = float(down[ids].sum() / up[ids].sum())
        return out

    def summary(self) -> dict[str, object]:
        """The main numbers in one dict (for printing or a notebook): counts, tiers, per-GPU rates
        in bits per second, oversubscription per tier and the detected shape."""
        return dict(
            gpus=self.gpu_count, servers=self.server_count, gpus_per_server=self.gpus_per_server, gpu_type=self.gpu_type,
            links=self.link_count, tiers={name: len(ids) for name, ids in self.tiers.items()}, shape=self.shape,
            rail_optimized=self.rail_optimized, dual_tor=self.dual_tor, planes=self.planes, pods=self.pods,
            nvlink_bps=self.nvlink_bps, nic_bps=self.nic_bps, nic_bps_per_server=self.nic_bps_per_server,
            nics_per_server=self.nics_per_server, oversubscription=self.oversubscription,
        )

    # ---- paths ----------------------------------------------------------------------------------
    @cached_property
    def _router(self) -> Router:
        return Router(self)

    def path(self, a: int, b: int) -> Path:
        """The route from GPU ``a`` to GPU ``b`` as a :class:`topo.paths.Path`: hops, nodes, bottleneck
        bandwidth (bits per second) and latency (seconds).  Same NVSwitch: over NVLink; else the network."""
        return self._router.path(a, b)

    # ---- writing --------------------------------------------------------------------------------
    def header(self) -> str:
        """Line 1 of the file (without newline)."""
        return (f"{self.node_count} {self.gpus_per_server} {self.nvswitch_count} {self.other_switch_count} "
                f"{self.link_count} {self.gpu_type}")

    def to_text(self) -> str:
        """The file, as SimAI's generator writes it: line 2 ends with a space, every line with ``\\n``."""
        n_lat, n_err = len(self.latency_strings), len(self.error_strings)
        combo = (self.bandwidth_codes.astype(np.int64) * n_lat + self.latency_codes) * n_err + self.error_codes
        kinds, which = np.unique(combo, return_inverse=True)
        tails = []
        for c in kinds.tolist():
            rest, e = divmod(c, n_err)
            b, lat = divmod(rest, n_lat)
            tails.append(f" {self.bandwidth_strings[b]} {self.latency_strings[lat]} {self.error_strings[e]}\n")
        body = "".join([f"{s} {d}{tails[w]}" for s, d, w in zip(self.src.tolist(), self.dst.tolist(), which.tolist())])
        switches = " ".join(map(str, self.switch_ids.tolist()))
        roles = "".join(f"{ROLE_MARK} {role} {' '.join(map(str, ids))}\n" for role, ids in self.server_roles if ids)
        return f"{self.header()}\n{switches} \n{body}{roles}"

    def write(self, path: str | os.PathLike) -> None:
        """Write :meth:`to_text` to ``path`` atomically (a temporary file renamed into place)."""
        with atomic_write(path) as handle:
            handle.write(self.to_text())


def connected_labels(node_count: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Component label (the smallest node id) of every node over the undirected links ``u``-``v``.

    Min-label propagation with pointer jumping; converges in O(diameter) rounds.
    """
    label = np.arange(node_count, dtype=np.int64)
    while len(u):
        low = np.minimum(label[u], label[v])
        new = label.copy()
        np.minimum.at(new, u, low)
        np.minimum.at(new, v, low)
        new = new[new]
        if np.array_equal(new, label):
            break
        label = new
    return label


def _components(topo: Topology, max_level: int | None) -> int:
    """Connected components of the packet switches (levels >= 1, <= ``max_level``) over their links."""
    level, s, d = topo.level, topo.src, topo.dst
    ok = level >= 1 if max_level is None else (level >= 1) & (level <= max_level)
    nodes = np.flatnonzero(ok)
    if not len(nodes):
        return 0
    keep = ok[s] & ok[d]
    return len(np.unique(connected_labels(topo.node_count, s[keep], d[keep])[nodes]))


# ---- reading ------------------------------------------------------------------------------------
def read_topology(path: str | os.PathLike) -> Topology:
    """Read a SimAI topology file.  Raises :class:`FormatError` (file, line, field) on bad content."""
    name = os.fspath(path)
    refuse_device(name, "a SimAI topology")
    try:
        with open(name, "rb") as handle:
            data = handle.read()
    except OSError:
        read_text(name, "a SimAI topology", what="the topology file")  # raises the one-line error
        raise
    if not data.isascii():
        return parse_topology(read_text(name, "a SimAI topology", what="the topology file"), name)
    return parse_topology(data, name)


def parse_topology(text: str | bytes, source: str = "<text>") -> Topology:
    """Parse the text of a SimAI topology file (see the module docstring for what is checked).

    The link lines are read column-wise over the file's bytes (:func:`_links_fast`) when they are
    plain ASCII with decimal node ids; anything else, and every error, goes through the line-by-line
    reader, which names the line and field."""
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    cut = data.find(b"\n" + ROLE_MARK.encode() + b" ")  # our lines after the links (topo.server)
    tail = b""
    if cut >= 0:
        data, tail = data[:cut + 1], data[cut + 1:]
        text = data
    first = data.find(b"\n")
    second = data.find(b"\n", first + 1) if first >= 0 else -1
    topo = None
    if second >= 0 and data.isascii():
        topo = _parse_fast(data[:second].decode("ascii").split("\n"), data, second + 1, source)
    if topo is None:
        topo = _parse_lines(text if isinstance(text, str) else text.decode("utf-8"), source)
    if tail:
        object.__setattr__(topo, "server_roles", _parse_roles(tail, topo, source, data.count(b"\n") + 1))
    _check_gpu_links(topo, source)
    return topo


def _parse_roles(tail: bytes, topo: Topology, source: str, line: int) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The ``#server <role> <id> ...`` lines after the links (``line``: the first one's number): known roles, each
    once, ids of packet switches, no id in two roles."""
    seen: dict[int, str] = {}
    out: dict[str, tuple[int, ...]] = {}
    kind = topo.node_kind
    for k, raw in enumerate(tail.decode("utf-8", "replace").split("\n")):
        words = raw.split()
        if not words:
            continue
        where = line + k
        if words[0] != ROLE_MARK or len(words) < 2:
            raise FormatError(source, f"after the {topo.link_count} link lines only '{ROLE_MARK} <role> <id> ...' lines "
                              f"may follow, got {raw.strip()[:40]!r}", line=where)
        role = words[1]
        if role not in ROLES or role in out:
            raise FormatError(source, f"{role!r} is {'listed twice' if role in out else 'not a role'} (roles: "
                              f"{', '.join(ROLES)})", line=where, field="role")
        ids = [_int(source, where, role, token) for token in words[2:]]
        for node in ids:
            if not 0 <= node < topo.node_count or kind[node] != PACKET_SWITCH:
                raise FormatError(source, f"node {node} is not a packet switch of line 2 (a {role} is one)", line=where,
                                  field=role)
            if node in seen:  # (a switch listing one node twice read "both a pcie_switch and a pcie_switch")
                what = f"listed twice as a {role}" if seen[node] == role else f"both a {seen[node]} and a {role}"
                raise FormatError(source, f"node {node} is {what}", line=where, field=role)
            seen[node] = role
        out[role] = tuple(ids)
    return tuple((role, out[role]) for role in ROLES if role in out)


def _check_gpu_links(topo: Topology, source: str) -> None:
    """Every GPU links to an NVSwitch when the file has NVSwitches, and to a packet switch when it has
    packet switches: the models take a GPU's NVLink and NIC rates from its links, and a GPU without
    one (a link line naming another node, e.g. ``-0`` for ``3``) would have a rate of 0."""
    for kind, count, what in ((NVSWITCH, topo.nvswitch_count, "an NVSwitch (NVLink)"),
                              (PACKET_SWITCH, topo.other_switch_count, "a network switch (NIC)")):
        if not count:
            continue
        gpu, _, _ = topo._gpu_links(kind)
        linked = np.zeros(topo.gpu_count, dtype=bool)
        linked[gpu] = True
        if not linked.all():
            lonely = int(np.argmin(linked))
            raise FormatError(source, f"GPU {lonely} has no link to {what}, though the file has "
                              f"{count} such switches; every GPU needs one", field="src/dst")


def _header(source: str, lines: list[str]) -> tuple[int, int, int, str, np.ndarray, int]:
    """(total, gpus per server, NVSwitches, GPU type, switch ids, link count) of lines 1 and 2."""
    header = lines[0].split()
    if len(header) != 6:
        raise FormatError(source, f"the header has {len(header)} fields, expected 6: " + " ".join(HEADER_FIELDS), line=1)
    total, gps, nv, other, n_links = (_int(source, 1, name, tok) for name, tok in zip(HEADER_FIELDS[:5], header))
    gpu_type = header[5]
    if total > MAX_NODES:
        raise FormatError(source, f"{total} nodes is more than the {MAX_NODES} ids a SimAI topology can number "
                          "(ns-3's 32-bit node ids)", line=1, field="total_nodes")
    if gps < 1:
        raise FormatError(source, f"must be at least 1, got {gps}", line=1, field="gpus_per_server")
    gpus = total - nv - other
    if gpus < 1:
        raise FormatError(source, f"{total} nodes leave no GPUs after {nv} NVSwitches and {other} other switches",
                          line=1, field="total_nodes")
    if gpus % gps:
        raise FormatError(source, f"{gpus} GPUs ({total} - {nv} - {other}) is not a multiple of {gps} GPUs per server",
                          line=1, field="gpus_per_server")
    if gpus > max(1, 2 * n_links):  # a link joins at most two GPUs; this also bounds what a header can allocate
        raise FormatError(source, f"{gpus} GPUs ({total} - {nv} - {other}) cannot each have a link among "
                          f"{n_links} links", line=1, field="total_nodes")
    switch_ids = _switch_ids(source, lines[1].split() if len(lines) > 1 else [], gpus, total, nv + other)
    return total, gps, nv, gpu_type, switch_ids, n_links


_WHITESPACE = np.zeros(256, dtype=bool)
_WHITESPACE[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True
"""The ASCII bytes ``str.split()`` splits on."""


def _parse_fast(head: list[str], data: bytes, offset: int, source: str) -> Topology | None:
    """The topology from lines 1-2 and the link lines (``data[offset:]``), or None when the links need
    the line-by-line reader (an irregular line, a non-decimal id, an id out of range, a bad string)."""
    try:
        total, gps, nv, gpu_type, switch_ids, n_links = _header(source, head)
    except FormatError:
        return None
    links = _links_fast(np.frombuffer(data[offset:] + bytes(32), dtype=np.uint8), n_links, total)
    if links is None:
        return None
    src, dst, coded = links
    (bw_codes, bw_strings), (lat_codes, lat_strings), (err_codes, err_strings) = coded
    return Topology(total, gps, nv, gpu_type, switch_ids, src, dst, bw_codes, bw_strings, lat_codes, lat_strings,
                    err_codes, err_strings, source)


def _links_fast(data: np.ndarray, n_links: int, total: int) -> tuple | None:
    """``(src, dst, [(codes, strings)] for bandwidth, latency, error rate)`` of ``n_links`` link lines
    (the bytes ``data``), read with array operations: every line exactly 5 whitespace-separated
    fields, decimal ids in ``0 .. total-1``, no self-link, every distinct string parsed; else None.
    ``data`` ends with 32 padding zero bytes (read past a field's end by :func:`_words`)."""
    padded = data
    end = len(data) - 32
    while end and data[end - 1] <= 32:  # trailing blank lines do not count
        end -= 1
    data = data[:end]
    bounds = _single_spaced(data, n_links) if n_links else None
    if bounds is None:
        ws = _WHITESPACE[data]
        # token boundaries: where whitespace turns into text (a start) and back (an end), in one pass
        change = np.empty(len(data) + 1, dtype=bool)
        if len(data):
            change[0] = not ws[0]
            np.not_equal(ws[1:], ws[:-1], out=change[1:-1])
            change[-1] = not ws[-1]
        else:
            change[0] = False
        edges = np.flatnonzero(change)
        del change, ws
        if len(edges) != 10 * n_links:
            return None  # not 5 fields per link line
        edges = edges.reshape(n_links, 10)
        bounds = edges[:, 0::2], edges[:, 1::2]
    starts, ends = bounds
    # exactly one line break between two links' fields, none inside a link's
    gaps = starts[:, 1:] - ends[:, :-1]
    between = starts[1:, 0] - ends[:-1, 4]
    if (gaps == 1).all() and (between == 1).all():
        if (data[ends[:, :-1]] == 10).any() or not (data[ends[:-1, 4]] == 10).all():
            return None
    else:
        newlines = np.flatnonzero(data[: ends[-1, 4]] == 10)
        if len(newlines) != n_links - 1 or not np.array_equal(np.searchsorted(newlines, starts[:, 0]), np.arange(n_links)) \
                or not np.array_equal(np.searchsorted(newlines, ends[:, 4]), np.arange(n_links)):
            return None
    ids = []
    for column in (0, 1):
        value = _decimal(padded, starts[:, column], ends[:, column])
        if value is None or (len(value) and int(value.max()) >= total):
            return None
        ids.append(value)
    src, dst = ids
    if (src == dst).any():
        return None
    coded = []
    for column, parse in ((2, parse_bandwidth), (3, parse_latency), (4, parse_error_rate)):
        found = _distinct(padded, starts[:, column], ends[:, column])
        if found is None:
            return None
        codes, strings = found
        try:
            for text in strings:
                parse(text)
        except ValueError:
            return None
        coded.append((codes, strings))
    return src, dst, coded


_LOW_BYTES = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
"""``_LOW_BYTES[k]``: a mask of the k lowest bytes of a little-endian 64-bit word."""


def _words(data: np.ndarray, start: np.ndarray, length: np.ndarray, count: int) -> list[np.ndarray]:
    """The bytes ``data[start:start+length]`` as ``count`` little-endian 64-bit words each (8 bytes per
    word, bytes past ``length`` zeroed); ``data`` ends with at least ``8 * count`` padding bytes."""
    window = np.ndarray(shape=(len(data) - 7,), dtype="<u8", buffer=data, strides=(1,))  # 8 bytes at each offset
    out = []
    for j in range(count):
        left = np.clip(length - 8 * j, 0, 8)
        out.append(window[start + 8 * j] & _LOW_BYTES[left])
    return out


def _single_spaced(data: np.ndarray, n_links: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Field starts and ends (``n_links x 5`` each) when the fields are separated by single spaces and
    single line breaks, as the generators write them; None otherwise (the general reader takes over)."""
    sep = np.flatnonzero(data <= 32)
    if len(sep) != 5 * n_links - 1 or (len(sep) and (sep[0] == 0 or (np.diff(sep) < 2).any())):
        return None
    found = data[sep]
    breaks = found == 10
    if not ((found == 32) | breaks).all():
        return None  # tabs, carriage returns or other whitespace: the general path
    pattern = np.zeros(5 * n_links, dtype=bool)
    pattern[4::5] = True
    if not np.array_equal(breaks, pattern[:-1]):
        return None
    starts = np.empty(5 * n_links, dtype=np.int64)
    ends = np.empty(5 * n_links, dtype=np.int64)
    starts[0] = 0
    starts[1:] = sep + 1
    ends[:-1] = sep
    ends[-1] = len(data)
    return starts.reshape(n_links, 5), ends.reshape(n_links, 5)


_U = np.uint64


def _decimal(data: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray | None:
    """The non-negative decimal integers ``data[start:end]`` (1 to 8 digits, digits only), or None.

    Eight ASCII digits are read at once from a 64-bit little-endian word ("SWAR"): the digits are moved
    to the word's top bytes, the free low bytes filled with '0', every byte checked to be a digit, then
    pairs, quads and the eight combined by three multiply-and-shift steps."""
    length = end - start
    if not len(length):
        return np.zeros(0, np.int64)
    if int(length.min()) < 1 or int(length.max()) > 8:
        return None
    (word,) = _words(data, start, length, 1)
    shift = ((8 - length) * 8).astype(np.uint64)  # 0 .. 56 bits
    word = (word << shift) | (((_U(1) << shift) - _U(1)) & _U(0x3030303030303030))
    if ((((word + _U(0x4646464646464646)) | (word - _U(0x3030303030303030))) & _U(0x8080808080808080)) != 0).any():
        return None  # a byte outside '0'..'9'
    word = word - _U(0x3030303030303030)
    word = ((word * _U(10)) + (word >> _U(8))) & _U(0x00FF00FF00FF00FF)
    word = ((word * _U(100)) + (word >> _U(16))) & _U(0x0000FFFF0000FFFF)
    word = (word * _U(10000)) + (word >> _U(32))
    return (word & _U(0xFFFFFFFF)).astype(np.int64)


def _distinct(data: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, tuple[str, ...]] | None:
    """Codes into the distinct strings ``data[start:end]`` in first-seen order (as :func:`_coded`), or None
    for strings longer than 32 bytes."""
    length = end - start
    n = len(start)
    longest = int(length.max()) if n else 0
    if longest > 32:
        return None
    count = max(1, -(-longest // 8))
    parts = _words(data, start, length, count)
    codes = np.full(n, -1, dtype=np.int32)
    firsts: list[int] = []
    first = 0
    while first < n and len(firsts) < 16:  # files hold a handful of distinct rates and latencies
        same = parts[0] == parts[0][first]
        for word in parts[1:]:
            same &= word == word[first]
        codes[same] = len(firsts)
        firsts.append(first)
        first = int(np.argmax(codes < 0)) if (codes < 0).any() else n
    if first >= n:
        parts = []
    if parts:  # many distinct strings: sort them
        words = np.stack(parts, axis=1)
        _, index, inverse = np.unique(words, axis=0, return_index=True, return_inverse=True)
        order = np.argsort(index, kind="stable")
        rank = np.empty(len(order), dtype=np.int32)
        rank[order] = np.arange(len(order), dtype=np.int32)
        codes, firsts = rank[inverse.ravel()], index[order].tolist()
    strings = tuple(bytes(data[start[i]:end[i]]).decode("ascii") for i in firsts)
    return codes, strings


def _parse_lines(text: str, source: str) -> Topology:
    """The line-by-line reader: every check, errors naming the line and field."""
    lines = text.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise FormatError(source, "empty file; expected the header line " + " ".join(f"<{f}>" for f in HEADER_FIELDS),
                          line=1)
    total, gps, nv, gpu_type, switch_ids, n_links = _header(source, lines)
    rows = list(map(str.split, lines[2:]))
    if len(rows) != n_links:
        raise FormatError(source, f"the header says {n_links} links but the file has {len(rows)} link lines",
                          line=1, field="link_count")
    if n_links and set(map(len, rows)) != {5}:
        k = next(i for i, row in enumerate(rows) if len(row) != 5)
        raise FormatError(source, f"{len(rows[k])} fields, expected 5: " + " ".join(LINK_FIELDS), line=3 + k)
    flat = list(chain.from_iterable(rows))
    cols = [flat[k::5] for k in range(5)]
    src = _ids(source, cols[0], "src", total)
    dst = _ids(source, cols[1], "dst", total)
    loops = np.flatnonzero(src == dst)
    if len(loops):
        raise FormatError(source, f"links node {src[loops[0]]} to itself", line=3 + int(loops[0]), field="dst")
    bw_codes, bw_strings = _coded(source, cols[2], "bandwidth", parse_bandwidth)
    lat_codes, lat_strings = _coded(source, cols[3], "latency", parse_latency)
    err_codes, err_strings = _coded(source, cols[4], "error_rate", parse_error_rate)
    return Topology(total, gps, nv, gpu_type, switch_ids, src, dst, bw_codes, bw_strings, lat_codes, lat_strings,
                    err_codes, err_strings, source)


def _int(source: str, line: int, field: str, token: str) -> int:
    """A count or node id: plain decimal digits (``-0``, ``+3``, ``1_000`` and non-ASCII digits, which
    Python's ``int`` takes, are refused), at most int64."""
    if not _is_decimal(token):
        if _is_negative(token):
            raise FormatError(source, f"must not be negative, got {token}", line=line, field=field)
        raise FormatError(source, f"not an integer: {token!r} (plain decimal digits)", line=line, field=field)
    if len(token) > 18:
        raise FormatError(source, f"{token} is too large (at most {MAX_NODES})", line=line, field=field)
    return int(token)


def _is_decimal(token: str) -> bool:
    return token.isascii() and token.isdigit()


def _is_negative(token: str) -> bool:
    """``-N`` with N plain digits, not all zeros (``-0`` is a spelling of 0 SimAI's files never use)."""
    return token.startswith("-") and _is_decimal(token[1:]) and token.strip("-0") != ""


def _switch_ids(source: str, tokens: list[str], gpus: int, total: int, expected: int) -> np.ndarray:
    if len(tokens) != expected:
        raise FormatError(source, f"lists {len(tokens)} switch ids, the header says {expected} "
                          "(nvswitch_count + other_switch_count)", line=2, field="switch_ids")
    ids = np.array([_int(source, 2, "switch_ids", t) for t in tokens], dtype=np.int64)
    bad = np.flatnonzero((ids < gpus) | (ids >= total))
    if len(bad):
        raise FormatError(source, f"switch id {ids[bad[0]]} is outside {gpus}..{total - 1} (GPUs are 0..{gpus - 1}, "
                          "switches follow)", line=2, field="switch_ids")
    if len(np.unique(ids)) != len(ids):
        values, counts = np.unique(ids, return_counts=True)
        raise FormatError(source, f"switch id {values[counts > 1][0]} is listed twice", line=2, field="switch_ids")
    return ids


def _ids(source: str, column: list[str], field: str, total: int) -> np.ndarray:
    plain = np.fromiter(map(_is_decimal, column), dtype=bool, count=len(column))
    if not plain.all():  # "-0", "+3", "1_0", "3.0": Python's int takes some, SimAI's files never have them
        k = int(np.argmin(plain))
        if _is_negative(column[k]):
            raise FormatError(source, f"node {column[k]} does not exist (the header declares nodes 0..{total - 1})",
                              line=3 + k, field=field)
        raise FormatError(source, f"not a node id: {column[k]!r} (plain decimal digits)", line=3 + k, field=field)
    long = np.fromiter(map(len, column), dtype=np.int64, count=len(column)) > 18
    if long.any():
        k = int(np.argmax(long))
        raise FormatError(source, f"node {column[k]} does not exist (the header declares nodes 0..{total - 1})",
                          line=3 + k, field=field)
    ids = np.fromiter(map(int, column), dtype=np.int64, count=len(column))
    bad = np.flatnonzero((ids < 0) | (ids >= total))
    if len(bad):
        k = int(bad[0])
        raise FormatError(source, f"node {ids[k]} does not exist (the header declares nodes 0..{total - 1})",
                          line=3 + k, field=field)
    return ids


def _coded(source: str, column: list[str], field: str, parse: Callable[[str], float],
           ) -> tuple[np.ndarray, tuple[str, ...]]:
    """Codes into the distinct strings of ``column`` (first-seen order), each string checked once."""
    strings = tuple(dict.fromkeys(column))
    index = {text: code for code, text in enumerate(strings)}
    codes = np.fromiter(map(index.__getitem__, column), dtype=np.int32, count=len(column))
    for code, text in enumerate(strings):
        try:
            parse(text)
        except ValueError as exc:
            k = int(np.flatnonzero(codes == code)[0])
            raise FormatError(source, str(exc), line=3 + k, field=field) from None
    return codes, strings

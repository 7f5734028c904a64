"""The hierarchy inside a server: GPUs sharing NICs behind PCIe switches, CPU sockets, NVLink full, in pairs or absent,
and a NIC speed per server (``python -m topo.gen --gpus_per_nic N ...``; the model that routes over it is
:mod:`topo.hierarchy`).

What SimAI's file format can say, and how we say it (SimAI 1.7's ns-3 reader, ``SetupNetwork`` in
``astra-sim/network_frontend/ns3/common.h``, reads the header, ``nvswitch_count + other_switch_count`` switch ids and
exactly ``link_count`` link lines, then stops; its router, ``CalculateRoute``, forwards through switches and NVSwitches
only and routes a direct GPU-GPU link between its two ends):

* a PCIe switch and a CPU socket (root complex) are packet switches of the file: GPU -- PCIe switch links, PCIe
  switch -- CPU socket uplinks, CPU -- CPU socket links, and the NIC as the link from the PCIe switch that holds it to
  its ASW, at the NIC's rate.  A NIC shared by N GPUs is therefore one link that N GPUs reach through their switch;
* NVLink in pairs is a GPU -- GPU link (SimAI routes it between the pair); NVLink absent is no NVLink link at all
  (then GPUs of one server talk over PCIe); full NVLink is SimAI's NVSwitch per server;
* a NIC speed per server is each NIC link's own rate string.

What it cannot say: which packet switches are PCIe switches or CPU sockets rather than Ethernet switches.  We add
that after the link lines, where SimAI's reader never looks (one line per role, the ids ascending)::

    #server pcie_switch <id> <id> ...
    #server cpu_socket <id> <id> ...

so SimAI reads the file as a network in which those nodes are switches (its ns-3 then models them with an Ethernet
switch's buffers and PFC, and asks SimAI.conf's KMAX_MAP/KMIN_MAP/PMAX_MAP for an entry at each of their link rates),
while :func:`topo.topology.read_topology` reads the roles and our model routes over them as a server's PCIe tree.

Node ids (SimAI's order, extended): GPUs ``0 .. G-1``; NVSwitches (full NVLink only, ``-nsps`` per server); then per
server its PCIe switches and then its CPU sockets; then the network's switches (ASWs, PSWs, core) as :mod:`topo.shapes`
builds them for one NIC endpoint per NIC (so ``-npa`` counts NICs, as SimAI's flag says: NICs per ASW).

Inside a server of ``gps`` GPUs: ``gps / gpus_per_pcie_switch`` PCIe switches, GPU ``i`` on switch
``i // gpus_per_pcie_switch``; ``gps / gpus_per_nic`` NICs, NIC ``j`` on switch ``j * switches // nics`` (spread
evenly: 2 NICs over 4 switches sit on switches 0 and 2); switch ``k`` on CPU socket ``k * sockets // switches``;
the sockets joined pairwise.  Defaults (bandwidths per direction, as ns-3 link rates are):

* ``--pcie_bw`` 512Gbps: PCIe Gen5 x16, 64 GB/s per direction (NVIDIA's H100 PCIe datasheet: 128 GB/s both ways);
  ``--pcie_uplink_bw`` the same (a switch's x16 uplink to its root complex);
* ``--socket_bw`` 176Gbps: 22 GB/s, the inter-socket rate NCCL's topology search assumes for Intel Sapphire Rapids
  (``SRP_QPI_BW`` in NVIDIA/nccl ``src/graph/topo.h``), the path NCCL calls SYS;
* ``--pcie_latency`` 0.0001ms per PCIe hop (an assumption: the order of a PCIe switch's port-to-port latency).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from topo.shapes import Layout, build, plan
from topo.templates import FabricSpec
from topo.topology import ROLE_CPU, ROLE_PCIE, Topology
from topo.units import parse_bandwidth, parse_latency
from utils.errors import ConfigError

NVLINK_MODES = ("full", "pairs", "none")
"""``--nvlink``: NVSwitch per server (SimAI's), GPU pairs joined by an NVLink bridge, or no NVLink (PCIe only)."""
PCIE_BW = "512Gbps"
"""PCIe Gen5 x16 per direction (64 GB/s; NVIDIA H100 PCIe datasheet, 128 GB/s bidirectional)."""
SOCKET_BW = "176Gbps"
"""22 GB/s between CPU sockets: NCCL's ``SRP_QPI_BW`` (NVIDIA/nccl src/graph/topo.h, Sapphire Rapids)."""
PCIE_LATENCY = "0.0001ms"
"""100 ns per PCIe hop (an assumption of the order of a PCIe switch's port-to-port latency)."""

SERVER_FLAGS = {
    "gpus_per_nic": "--gpus_per_nic", "gpus_per_pcie_switch": "--gpus_per_pcie_switch", "sockets": "--sockets",
    "pcie_bw": "--pcie_bw", "pcie_uplink_bw": "--pcie_uplink_bw", "socket_bw": "--socket_bw",
    "pcie_latency": "--pcie_latency", "nvlink": "--nvlink", "server_nic_bw": "--server_nic_bw",
}
"""The generator's flags for the inside of a server (argparse dest -> spelling)."""


@dataclass(frozen=True)
class ServerSpec:
    """The inside of every server (counts per server; bandwidths and latencies as ns-3 strings, written verbatim).

    ``gpus_per_nic`` None keeps SimAI's wiring (each GPU's own NIC link to its ASW); ``server_nic_bw`` (one rate per
    server, repeated in turn when shorter) then only sets each server's NIC rate."""

    gpus_per_nic: int | None = None
    gpus_per_pcie_switch: int | None = None
    sockets: int | None = None
    pcie_bw: str = PCIE_BW
    pcie_uplink_bw: str | None = None
    socket_bw: str = SOCKET_BW
    pcie_latency: str = PCIE_LATENCY
    nvlink: str = "full"
    server_nic_bw: tuple[str, ...] = ()

    @property
    def hierarchy(self) -> bool:
        """Whether the file carries PCIe switches and CPU sockets (``--gpus_per_nic`` given)."""
        return self.gpus_per_nic is not None


def resolve_server(given: dict[str, Any], spec: FabricSpec) -> ServerSpec | None:
    """The :class:`ServerSpec` of the flags given (argparse dests, popped from ``given``), or None when none was given.
    Raises :class:`ConfigError` naming the flag: more GPUs per NIC than per server, counts that do not divide, a PCIe
    flag without ``--gpus_per_nic``, NVLink pairs on an odd server, an unparsable rate."""
    values = {k: given.pop(k) for k in list(given) if k in SERVER_FLAGS}
    if not values:
        return None
    gps = spec.gpus_per_server
    gpn = values.get("gpus_per_nic")
    if gpn is None:
        needs = [k for k in values if k not in ("server_nic_bw", "nvlink")] + \
            (["nvlink"] if values.get("nvlink", "full") != "full" else [])
        if needs:
            raise ConfigError(f"{SERVER_FLAGS[needs[0]]} describes the PCIe tree inside a server: give --gpus_per_nic N "
                              "as well (--gpus_per_nic 1 for one NIC per GPU behind PCIe switches)")
    else:
        if gpn < 1:
            raise ConfigError(f"--gpus_per_nic must be at least 1, got {gpn}")
        if gpn > gps:
            raise ConfigError(f"--gpus_per_nic {gpn} is more than the {gps} GPUs per server (-gps {gps}): a NIC serves "
                              "GPUs of its own server")
        if gps % gpn:
            raise ConfigError(f"--gpus_per_nic {gpn} does not divide the {gps} GPUs per server (-gps {gps})")
    per_switch = values.get("gpus_per_pcie_switch")
    if per_switch is not None and (per_switch < 1 or gps % per_switch):
        raise ConfigError(f"--gpus_per_pcie_switch {per_switch} must divide the {gps} GPUs per server (-gps {gps})")
    switches = gps // (per_switch or gpn or 1)
    sockets = values.get("sockets")
    if sockets is not None and (sockets < 1 or sockets > switches or switches % sockets):
        raise ConfigError(f"--sockets {sockets} must divide the {switches} PCIe switches per server "
                          f"({gps} GPUs / {per_switch or gpn} per switch)")
    nvlink = values.get("nvlink", "full")
    if nvlink not in NVLINK_MODES:
        raise ConfigError(f"--nvlink {nvlink!r}: choose {', '.join(NVLINK_MODES)}")
    if nvlink == "pairs" and gps % 2:
        raise ConfigError(f"--nvlink pairs joins GPUs two by two: -gps {gps} is odd")
    for name in ("pcie_bw", "pcie_uplink_bw", "socket_bw"):
        if name in values:
            _rate(name, values[name])
    if "pcie_latency" in values:
        try:
            parse_latency(values["pcie_latency"], require_unit=True)
        except ValueError as exc:
            raise ConfigError(f"--pcie_latency: {exc}") from None
    rates: tuple[str, ...] = ()
    if "server_nic_bw" in values:
        rates = tuple(r.strip() for r in str(values["server_nic_bw"]).split(","))
        for rate in rates:
            _rate("server_nic_bw", rate)
        servers = spec.gpus // gps
        if len(rates) > servers:
            raise ConfigError(f"--server_nic_bw gives {len(rates)} rates for {servers} servers")
    return ServerSpec(gpus_per_nic=gpn, gpus_per_pcie_switch=per_switch, sockets=sockets,
                      pcie_bw=values.get("pcie_bw", PCIE_BW), pcie_uplink_bw=values.get("pcie_uplink_bw"),
                      socket_bw=values.get("socket_bw", SOCKET_BW), pcie_latency=values.get("pcie_latency", PCIE_LATENCY),
                      nvlink=nvlink, server_nic_bw=rates)


def _rate(name: str, text: str) -> None:
    try:
        parse_bandwidth(text, require_unit=True)
    except ValueError as exc:
        raise ConfigError(f"{SERVER_FLAGS[name]}: {exc}") from None


@dataclass(frozen=True)
class ServerLayout:
    """Counts of one server's inside (per server) and of the whole file."""

    nics: int
    pcie_switches: int
    sockets: int
    nvswitches: int
    nodes: int
    links: int


def server_layout(spec: FabricSpec, server: ServerSpec, net: Layout) -> ServerLayout:
    """The counts of ``server`` on ``spec``'s fabric, ``net`` being the network's layout for one endpoint per NIC."""
    gps = spec.gpus_per_server
    gpn = server.gpus_per_nic or 1
    nics = gps // gpn
    switches = gps // (server.gpus_per_pcie_switch or gpn)
    sockets = server.sockets or min(2, switches)
    servers = spec.gpus // gps
    nvswitches = servers * spec.nvswitch_per_server if server.nvlink == "full" else 0
    nv_links = {"full": spec.gpus * spec.nvswitch_per_server, "pairs": spec.gpus // 2, "none": 0}[server.nvlink]
    socket_links = sockets * (sockets - 1) // 2
    # one GPU-switch link per GPU, per server its switch uplinks and socket links, then the network's links
    links = nv_links + spec.gpus + servers * (switches + socket_links) + net.links
    nodes = spec.gpus + nvswitches + servers * (switches + sockets) + net.asws + net.psws + net.cores
    return ServerLayout(nics, switches, sockets, nvswitches, nodes, links)


def network_spec(spec: FabricSpec, server: ServerSpec) -> FabricSpec:
    """The network of ``spec`` for one endpoint per NIC (what :mod:`topo.shapes` sizes and wires): NICs take the GPUs'
    place, ``gps / gpus_per_nic`` per server, no NVSwitch."""
    gpn = server.gpus_per_nic or 1
    return replace(spec, gpus=spec.gpus // gpn, gpus_per_server=spec.gpus_per_server // gpn, nvswitch_per_server=0)


def file_suffix(server: ServerSpec) -> str:
    """What the file name adds for the inside of a server (before the NIC rate): ``_4gpn`` (4 GPUs per NIC),
    ``_nvpairs``/``_nvnone``, ``_mixnic`` (a NIC rate per server)."""
    out = f"_{server.gpus_per_nic}gpn" if server.hierarchy else ""
    if server.nvlink != "full":
        out += f"_nv{server.nvlink}"
    if server.server_nic_bw:
        out += "_mixnic"
    return out


def with_suffix(name: str, spec: FabricSpec, server: ServerSpec) -> str:
    """SimAI's file name of ``spec`` with :func:`file_suffix` before its ``_{bw}_{gt}`` tail."""
    tail = f"_{spec.nic_bw}_{spec.gpu_type}"
    return name[: len(name) - len(tail)] + file_suffix(server) + tail if name.endswith(tail) else name + file_suffix(server)


def plan_servers(spec: FabricSpec, server: ServerSpec) -> tuple[Layout, ServerLayout]:
    """The network's layout (one endpoint per NIC) and the counts of the whole file."""
    net = plan(network_spec(spec, server))
    return net, server_layout(spec, server, net)


def build_servers(spec: FabricSpec, server: ServerSpec) -> Topology:
    """The topology of ``spec`` with ``server`` inside every server (see the module docstring for ids and links)."""
    if not server.hierarchy:
        return with_nic_rates(build(spec), spec, server.server_nic_bw)
    net_spec = network_spec(spec, server)
    net_layout, lay = plan_servers(spec, server)
    net = build(net_spec, net_layout)
    g, gps, servers = spec.gpus, spec.gpus_per_server, spec.gpus // spec.gpus_per_server
    nsps = spec.nvswitch_per_server if server.nvlink == "full" else 0
    per_switch = gps // lay.pcie_switches
    inside = lay.pcie_switches + lay.sockets
    nv0 = g
    in0 = nv0 + lay.nvswitches
    net0 = in0 + servers * inside
    virtual = net_spec.gpus  # the network build's endpoint ids 0 .. virtual-1, its switches after

    def switch_of(s: int, k: int) -> int:
        return in0 + s * inside + k

    def socket_of(s: int, c: int) -> int:
        return in0 + s * inside + lay.pcie_switches + c

    bw_names = [spec.nvlink_bw, server.pcie_bw, server.pcie_uplink_bw or server.pcie_bw, server.socket_bw]
    lat_names = [spec.nvlink_latency, server.pcie_latency, spec.nic_latency, spec.ap_latency, spec.pc_latency]
    src: list[int] = []
    dst: list[int] = []
    bw: list[int] = []
    lat: list[int] = []

    def add(a: int, b: int, bw_code: int, lat_code: int) -> None:
        src.append(a)
        dst.append(b)
        bw.append(bw_code)
        lat.append(lat_code)

    for gpu in range(g):
        s, i = divmod(gpu, gps)
        for k in range(nsps):
            add(gpu, nv0 + s * nsps + k, 0, 0)
        if server.nvlink == "pairs" and i % 2 == 0:
            add(gpu, gpu + 1, 0, 0)
        add(gpu, switch_of(s, i // per_switch), 1, 1)
    for s in range(servers):
        for k in range(lay.pcie_switches):
            add(switch_of(s, k), socket_of(s, k * lay.sockets // lay.pcie_switches), 2, 1)
        for a in range(lay.sockets):
            for b in range(a + 1, lay.sockets):
                add(socket_of(s, a), socket_of(s, b), 3, 1)
    # the network: its NIC links leave the PCIe switch that holds each NIC, at the server's NIC rate
    nic_codes = _nic_codes(spec, server, servers, bw_names)
    kinds = net.bandwidth_codes  # shapes' link classes: 1 NIC, 2 ASW-PSW, 3 PSW-core
    for e in range(net.link_count):
        a, b = int(net.src[e]), int(net.dst[e])
        kind = int(kinds[e])
        if kind == 1:
            v = a
            s, j = divmod(v, lay.nics)
            holder = switch_of(s, j * lay.pcie_switches // lay.nics)
            add(holder, b - virtual + net0, nic_codes[s], 2)
        else:
            code = _code(bw_names, net.bandwidth_strings[kind])
            add(a - virtual + net0, b - virtual + net0, code, 3 if kind == 2 else 4)
    total = net0 + net.node_count - virtual
    roles = ((ROLE_PCIE, tuple(switch_of(s, k) for s in range(servers) for k in range(lay.pcie_switches))),
             (ROLE_CPU, tuple(socket_of(s, c) for s in range(servers) for c in range(lay.sockets))))
    topo = Topology.from_arrays(
        gpus_per_server=gps, nvswitch_count=lay.nvswitches, gpu_type=spec.gpu_type,
        switch_ids=np.arange(g, total, dtype=np.int64), src=np.array(src, np.int64), dst=np.array(dst, np.int64),
        bandwidth_codes=np.array(bw, np.int32), bandwidth_strings=tuple(bw_names),
        latency_codes=np.array(lat, np.int32), latency_strings=tuple(lat_names),
        error_codes=np.zeros(len(src), np.int8), error_strings=(spec.error_rate,), node_count=total, server_roles=roles,
    )
    assert topo.link_count == lay.links and topo.node_count == lay.nodes, (topo.link_count, lay.links, total, lay.nodes)
    return topo


def _code(names: list[str], text: str) -> int:
    """The index of ``text`` in ``names``, appended when new."""
    if text not in names:
        names.append(text)
    return names.index(text)


def _nic_codes(spec: FabricSpec, server: ServerSpec, servers: int, names: list[str]) -> list[int]:
    """Per server: the code of its NIC rate (``--server_nic_bw`` in turn, else ``-bw``)."""
    rates = server.server_nic_bw or (spec.nic_bw,)
    return [_code(names, rates[s % len(rates)]) for s in range(servers)]


def with_nic_rates(topo: Topology, spec: FabricSpec, rates: tuple[str, ...]) -> Topology:
    """SimAI's wiring with each server's NIC links at its own rate (``rates`` repeated in turn); ``topo`` unchanged
    when ``rates`` is empty."""
    if not rates:
        return topo
    names = list(topo.bandwidth_strings)
    codes = topo.bandwidth_codes.astype(np.int32).copy()
    gps = spec.gpus_per_server
    nic = np.flatnonzero(codes == 1)  # shapes.build: code 1 is the NIC class, its source the GPU
    per_server = _nic_codes(spec, ServerSpec(server_nic_bw=rates), spec.gpus // gps, names)
    codes[nic] = np.array(per_server, np.int32)[topo.src[nic] // gps]
    return Topology.from_arrays(
        gpus_per_server=gps, nvswitch_count=topo.nvswitch_count, gpu_type=topo.gpu_type, switch_ids=topo.switch_ids,
        src=topo.src, dst=topo.dst, bandwidth_codes=codes, bandwidth_strings=tuple(names),
        latency_codes=topo.latency_codes, latency_strings=topo.latency_strings, error_codes=topo.error_codes,
        error_strings=topo.error_strings, node_count=topo.node_count)


def describe(server: ServerSpec, spec: FabricSpec) -> str:
    """One line for the generator's output: NICs, PCIe switches, sockets and NVLink per server."""
    if not server.hierarchy:
        return f"server NIC rates: {', '.join(server.server_nic_bw)} (in turn)"
    gps = spec.gpus_per_server
    gpn = server.gpus_per_nic or 1
    switches = gps // (server.gpus_per_pcie_switch or gpn)
    sockets = server.sockets or min(2, switches)
    return (f"per server: {gps} GPUs, {gps // gpn} NIC(s) ({gpn} GPUs per NIC), {switches} PCIe switch(es) of "
            f"{gps // switches} GPUs, {sockets} CPU socket(s), NVLink {server.nvlink}")


def nic_count(spec: FabricSpec, server: ServerSpec) -> int:
    """NICs per server."""
    return spec.gpus_per_server // (server.gpus_per_nic or 1)


__all__ = ["NVLINK_MODES", "ServerSpec", "resolve_server", "build_servers", "plan_servers", "with_suffix", "describe",
           "nic_count"]

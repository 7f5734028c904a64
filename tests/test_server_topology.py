"""python -m topo.gen with the inside of a server (issue 30): GPUs sharing NICs behind PCIe switches, CPU sockets,
NVLink full / pairs / none, a NIC rate per server; the reader's ``#server`` roles; NCCL's GPU-NIC paths and PXN.

Ids (topo/server.py): GPUs, then NVSwitches (full NVLink), then per server its PCIe switches and its CPU sockets, then
the network's ASWs and PSWs sized for one endpoint per NIC.  Rates: PCIe 512Gbps, socket 176Gbps, NIC 400Gbps.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import run_cli
from topo import parse_topology, read_topology
from topo.gen import main
from topo.hierarchy import ServerHierarchy
from utils.errors import FormatError


def generate(tmp_path: Path, capsys: pytest.CaptureFixture, *argv: str) -> Path:
    assert main([*argv, "-o", f"{tmp_path}{os.sep}"]) == 0
    return Path(capsys.readouterr().out.splitlines()[-1])


def test_two_nics_per_server_header_links_and_roles(tmp_path, capsys):
    # 16 GPUs, 8 per server, 4 GPUs per NIC (2 NICs), 2 GPUs per PCIe switch (4 switches), 2 sockets.
    # nodes: 16 GPUs + 2 NVSwitches + 2 x (4 switches + 2 sockets) = 12 + the network for 4 NICs (2 per server, rail-
    # optimised: 2 ASWs) and SimAI's 64 PSWs = 16 + 2 + 12 + 2 + 64 = 96; other switches 12 + 2 + 64 = 78.
    # links: 16 NVLink + 16 GPU-PCIe + 2 x (4 uplinks + 1 socket link) + 4 NIC links + 2 x 64 ASW-PSW = 174.
    path = generate(tmp_path, capsys, "-topo", "Spectrum-X", "-g", "16", "--gpus_per_nic", "4",
                    "--gpus_per_pcie_switch", "2")
    assert path.name == "Spectrum-X_16g_8gps_4gpn_400Gbps_H100"
    lines = path.read_text().split("\n")[:-1]
    assert lines[0] == "96 8 2 78 174 H100"
    links = lines[2:2 + 174]
    assert links[0] == "0 16 3600Gbps 0.000025ms 0" and links[1] == "0 18 512Gbps 0.0001ms 0"  # GPU 0: NVSwitch, switch 18
    assert links[5] == "2 19 512Gbps 0.0001ms 0"                                           # GPU 2 on the second switch
    assert links[32] == "18 22 512Gbps 0.0001ms 0"                                         # switch 18 up to socket 22
    assert links[36] == "22 23 176Gbps 0.0001ms 0"                                         # the socket link
    # the NICs: server 0's on switches 18 and 20 (2 NICs over 4 switches: switches 0 and 2), rails to ASWs 30 and 31
    assert "18 30 400Gbps 0.0005ms 0" in links and "20 31 400Gbps 0.0005ms 0" in links
    # after exactly 174 link lines (where SimAI's reader stops) our roles
    assert lines[2 + 174:] == ["#server pcie_switch 18 19 20 21 24 25 26 27", "#server cpu_socket 22 23 28 29"]
    topo = read_topology(path)
    assert topo.tier_of(18) == "pcie_switch" and topo.tier_of(22) == "cpu_socket" and topo.tier_of(30) == "ASW"
    assert {k: len(v) for k, v in topo.tiers.items()} == {"NVSwitch": 2, "ASW": 2, "PSW": 64, "core": 0}
    assert topo.to_text() == path.read_text()  # round trip, roles included


def test_hierarchy_paths_and_pxn(tmp_path, capsys):
    # Server 0: GPUs 0,1 on switch 18 (NIC 0), 2,3 on 19 (no NIC), 4,5 on 20 (NIC 1), 6,7 on 21; switches 18, 19 on
    # socket 22, 20, 21 on socket 23.  Without PXN GPU 2 reaches NIC 0 through its socket: PHB.  With PXN (NCCL's
    # paths.cc) GPU 2 goes over NVLink to NIC 0's local GPU 0, then GPU 0's PCIe link: PXN.
    topo = read_topology(generate(tmp_path, capsys, "-topo", "Spectrum-X", "-g", "16", "--gpus_per_nic", "4",
                                  "--gpus_per_pcie_switch", "2"))
    plain, pxn = ServerHierarchy(topo, pxn=False), ServerHierarchy(topo, pxn=True)
    nic0, nic1 = plain.nics(0)
    assert [plain.local_nic(g) for g in range(8)] == [nic0] * 4 + [nic1] * 4
    assert [plain.path(g, plain.local_nic(g)).kind for g in range(8)] == ["PIX", "PIX", "PHB", "PHB"] * 2
    p = plain.path(2, nic0)
    assert [plain.link_class(k) for k in p.up] == ["pcie", "pcie", "pcie", "nic"]  # GPU->19->22->18->ASW
    q = pxn.path(2, nic0)
    assert q.kind == "PXN" and q.relay == 0
    assert q.up[:2] == (("nv+", 2), ("nv-", 0)) and q.up[2:] == pxn.path(0, nic0).up
    # NCCL's choice among the two PXN NICs of GPUs 2, 3, 6, 7: dev % 2 GPUs local to NIC 0 -> even GPUs NIC 0, odd NIC 1
    assert [pxn.local_nic(g) for g in range(8)] == [nic0, nic0, nic0, nic1, nic1, nic1, nic0, nic1]


def test_nvlink_pairs_and_none(tmp_path, capsys):
    pairs = read_topology(generate(tmp_path, capsys, "-g", "8", "-gps", "4", "--gpus_per_nic", "4", "--nvlink", "pairs",
                                   "--gpus_per_pcie_switch", "2", "-nvbw", "2400Gbps"))
    assert pairs.nvswitch_count == 0
    h = ServerHierarchy(pairs)
    assert h.nvlink_route(0, 1) is not None and h.nvlink_route(1, 2) is None
    assert h.route(1, 2)[1] == "pcie" and h.nvlink_bps[0] == 2400e9
    none = read_topology(generate(tmp_path, capsys, "-g", "8", "-gps", "4", "--gpus_per_nic", "2", "--nvlink", "none"))
    assert ServerHierarchy(none).route(0, 1)[1] == "pcie"


def test_server_nic_rates(tmp_path, capsys):
    # SimAI's wiring, each server's NIC links at its own rate (two servers, 400 then 200 Gbps)
    topo = read_topology(generate(tmp_path, capsys, "-topo", "Spectrum-X", "-g", "16", "--server_nic_bw",
                                  "400Gbps,200Gbps"))
    assert topo.nic_bps_per_gpu.tolist() == [400e9] * 8 + [200e9] * 8


@pytest.mark.parametrize("argv, message", [
    (["--gpus_per_nic", "16"], "--gpus_per_nic 16 is more than the 8 GPUs per server (-gps 8)"),
    (["--gpus_per_nic", "3"], "--gpus_per_nic 3 does not divide"),
    (["--gpus_per_pcie_switch", "2"], "--gpus_per_pcie_switch describes the PCIe tree"),
    (["--gpus_per_nic", "2", "--sockets", "3"], "--sockets 3 must divide"),
    (["--gpus_per_nic", "2", "--pcie_bw", "fast"], "--pcie_bw: not a bandwidth"),
])
def test_bad_server_flags_one_line_exit_2_no_file(tmp_path, argv, message):
    result = run_cli("-m", "topo.gen", "-g", "16", *argv, "-o", f"{tmp_path}{os.sep}")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_roles_are_checked():
    text = ("5 2 0 3 4 H100\n2 3 4 \n0 2 512Gbps 0.0001ms 0\n1 2 512Gbps 0.0001ms 0\n2 3 400Gbps 0.0005ms 0\n"
            "3 4 400Gbps 0.0005ms 0\n")
    topo = parse_topology(text + "#server pcie_switch 2\n")
    assert topo.tier_of(2) == "pcie_switch" and topo.tier_of(3) == "ASW" and topo.tier_of(4) == "PSW"
    with pytest.raises(FormatError, match=":7: pcie_switch: node 0 is not a packet switch"):
        parse_topology(text + "#server pcie_switch 0\n")
    with pytest.raises(FormatError, match="'gpu' is not a role"):
        parse_topology(text + "#server gpu 2\n")

"""topo.topology: reading SimAI topology files, errors that name file/line/field, and the model's numbers
(derived by hand from the wiring rules of docs/topology.md)."""

from __future__ import annotations

import re

import pytest

from topo.shapes import build
from topo.templates import resolve
from topo.topology import Topology, parse_topology, read_topology
from topo.units import parse_bandwidth, parse_error_rate, parse_latency
from utils.errors import FormatError

SPECTRUM = "topo_Spectrum-X_16g_8gps_400Gbps_H100"
DCN = "topo_DCN+SingleToR_16g_8gps_400Gbps_H100"


def made(**flags: object) -> Topology:
    """A topology from generator flags (argparse dests), read back from its text."""
    return parse_topology(build(resolve(flags)).to_text(), "<generated>")


# ---- units ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, bps", [
    ("400Gbps", 400e9), ("2880Gbps", 2.88e12), ("1.8Tbps", 1.8e12), ("100Mbps", 1e8), ("10Kbps", 1e4),
    ("25Gb/s", 25e9), ("50GBps", 400e9),  # bytes x 8
    ("1Gibps", 2.0**30), ("300", 300.0),  # a bare number is bits per second, as in ns-3
])
def test_bandwidth_strings(text, bps):
    assert parse_bandwidth(text) == pytest.approx(bps, rel=1e-12)


@pytest.mark.parametrize("text, seconds", [
    ("0.0005ms", 5e-7), ("500ns", 5e-7), ("1us", 1e-6), ("0.000025ms", 2.5e-8), ("2s", 2.0), ("1e-6", 1e-6),
])
def test_latency_strings(text, seconds):
    assert parse_latency(text) == pytest.approx(seconds, rel=1e-12)


@pytest.mark.parametrize("text", ["", "Gbps", "400Gbsp", "400G", "-1Gbps", "0Gbps", "fast", "4 00Gbps"])
def test_bad_bandwidth(text):
    with pytest.raises(ValueError):
        parse_bandwidth(text)


@pytest.mark.parametrize("text", ["", "ms", "1 ms", "1mss", "-1ms", "nan"])
def test_bad_latency(text):
    with pytest.raises(ValueError):
        parse_latency(text)


def test_units_demanded_by_generator():
    with pytest.raises(ValueError, match="no unit"):
        parse_bandwidth("400", require_unit=True)
    with pytest.raises(ValueError, match="no unit"):
        parse_latency("0.5", require_unit=True)
    assert parse_error_rate("0") == 0.0 and parse_error_rate("0.01") == 0.01
    with pytest.raises(ValueError):
        parse_error_rate("1.5")


# ---- the SimAI examples ----------------------------------------------------------------------------
def test_spectrum_example_counts_and_rates(examples):
    t = read_topology(examples / SPECTRUM)
    assert (t.node_count, t.gpu_count, t.gpus_per_server, t.nvswitch_count, t.other_switch_count, t.link_count) == \
        (90, 16, 8, 2, 72, 544)
    assert t.gpu_type == "H100" and t.server_count == 2
    assert t.source == str(examples / SPECTRUM)
    assert t.tiers["NVSwitch"].tolist() == [16, 17]
    assert t.tiers["ASW"].tolist() == list(range(18, 26))
    assert t.tiers["PSW"].tolist() == list(range(26, 90))
    assert t.tiers["core"].tolist() == []
    assert [t.tier_of(n) for n in (0, 16, 18, 26)] == ["GPU", "NVSwitch", "ASW", "PSW"]
    # one 2880Gbps NVLink per GPU = 2.88e12 bit/s = 3.6e11 byte/s; one 400Gbps NIC = 5e10 byte/s
    assert t.nvlink_bps == 2.88e12 and t.nvlink_bytes_per_s == 3.6e11
    assert t.nic_bps == 4e11 and t.nic_bytes_per_s == 5e10
    assert t.nic_bps_per_server == 8 * 4e11 and t.nic_bytes_per_s_per_server == 4e11
    assert t.nics_per_server == 8 and t.nic_ports_per_gpu.tolist() == [1] * 16
    assert t.link(0) == (0, 16, "2880Gbps", "0.000025ms", "0")
    assert t.link(543) == (25, 89, "400Gbps", "0.0005ms", "0")
    assert t.bandwidth_bps[1] == 4e11 and t.latency_s[1] == pytest.approx(5e-7) and t.error_rate[1] == 0.0
    assert t.nic_switches(9) == (19,)  # rail 9 % 8 = 1 -> ASW 18 + 1
    assert list(t.gpus_of_server(1)) == list(range(8, 16)) and t.server_of(9) == 1


def test_spectrum_example_structure(examples):
    t = read_topology(examples / SPECTRUM)
    assert t.rail_optimized and not t.dual_tor
    assert (t.planes, t.pods, t.shape) == (1, 1, "Rail_Opti_SingleToR")
    # ASW 18: down = GPUs 0 and 8 at 400G = 8e11; up = 64 PSWs at 400G = 2.56e13
    assert t.downlink_bps[18] == 8e11 and t.uplink_bps[18] == 2.56e13
    # PSW 26: down = 8 ASWs at 400G; no uplinks
    assert t.downlink_bps[26] == 3.2e12 and t.uplink_bps[26] == 0
    assert t.uplink_bps[0] == 4e11
    # tier ASW: 8 * 8e11 / (8 * 2.56e13) = 1/32; PSWs have no uplinks, so no ratio
    assert t.oversubscription == {"ASW": pytest.approx(1 / 32)}


def test_spectrum_example_paths(examples):
    t = read_topology(examples / SPECTRUM)
    p = t.path(0, 1)  # same server: NVSwitch 16
    assert (p.nodes, p.hops, p.tier) == ((0, 16, 1), 2, "NVSwitch")
    assert p.bottleneck_bps == 2.88e12 and p.latency_s == pytest.approx(2 * 2.5e-8)
    p = t.path(0, 8)  # rail 0 of servers 0 and 1 meet on ASW 18
    assert (p.nodes, p.hops, p.tier) == ((0, 18, 8), 2, "ASW")
    assert p.bottleneck_bps == 4e11 and p.bottleneck_bytes_per_s == 5e10 and p.latency_s == pytest.approx(1e-6)
    p = t.path(0, 9)  # rail 0 -> rail 1: up to the lowest PSW 26 and down to ASW 19
    assert (p.nodes, p.hops, p.tier) == ((0, 18, 26, 19, 9), 4, "PSW")
    assert p.bottleneck_bps == 4e11 and p.single_path_bps == 4e11 and p.latency_s == pytest.approx(4 * 5e-7)
    with pytest.raises(ValueError):
        t.path(0, 0)
    with pytest.raises(ValueError):
        t.path(0, 16)  # an NVSwitch is no GPU


def test_dcn_example(examples):
    t = read_topology(examples / DCN)
    assert (t.node_count, t.gpu_count, t.link_count) == (27, 16, 40)
    assert not t.rail_optimized and t.shape == "No_Rail_Opti_SingleToR"
    # ASW 18 serves all 16 GPUs at 400G = 6.4e12 against 8 PSWs at 400G = 3.2e12: 2:1
    assert t.oversubscription == {"ASW": 2.0}
    p = t.path(0, 9)  # different servers, one ASW
    assert (p.nodes, p.tier, p.latency_s) == ((0, 18, 9), "ASW", pytest.approx(1e-6))


@pytest.mark.parametrize("name", [SPECTRUM, DCN])
def test_examples_write_back_same_bytes(examples, tmp_path, name):
    t = read_topology(examples / name)
    assert t.to_text().encode() == (examples / name).read_bytes()
    t.write(tmp_path / "copy")
    assert (tmp_path / "copy").read_bytes() == (examples / name).read_bytes()


def test_whitespace_variants_read_the_same(examples):
    text = (examples / DCN).read_text()
    canonical = parse_topology(text)
    lines = text.split("\n")
    variants = [
        text.rstrip("\n"),                                      # no trailing newline
        "\n".join([lines[0], lines[1].rstrip(), *lines[2:]]),   # no trailing space on line 2
        text.replace(" ", "\t") + "\n\n",                       # tabs, blank lines at the end
        text.replace("\n", "\r\n"),                             # Windows line ends
    ]
    for variant in variants:
        t = parse_topology(variant)
        assert t.to_text() == text
        assert t.src.tolist() == canonical.src.tolist() and t.dst.tolist() == canonical.dst.tolist()


# ---- generated shapes: structure read back from the wiring ------------------------------------------
def test_dual_tor_single_plane_model():
    t = made(topology="AlibabaHPN", gpu=16)
    assert t.rail_optimized and t.dual_tor and t.planes == 1 and t.shape == "Rail_Opti_DualToR_SinglePlane"
    assert t.nic_ports_per_gpu.tolist() == [2] * 16 and t.nic_switches(13) == (23, 31)
    assert t.nic_bps == 2 * 200e9  # two 200Gbps ports
    # ASWs: 16 * (2 GPUs * 200G) down / (16 * 120 PSWs * 400G) up = 6.4e12 / 7.68e14 = 1/120
    assert t.oversubscription == {"ASW": pytest.approx(1 / 120)}
    p = t.path(0, 8)  # both on ASWs 18 and 26: two parallel 200G paths
    assert p.nodes == (0, 18, 8) and p.bottleneck_bps == 4e11 and p.single_path_bps == 2e11
    p = t.path(0, 9)
    assert p.nodes == (0, 18, 34, 19, 9) and p.bottleneck_bps == 4e11 and p.latency_s == pytest.approx(2e-6)


def test_dual_plane_model():
    t = made(topology="AlibabaHPN", dp=True, gpu=16)
    assert t.planes == 2 and t.pods == 1 and t.shape == "Rail_Opti_DualToR_DualPlane"
    assert len(t.tiers["PSW"]) == 120
    p = t.path(0, 9)  # plane 1 via ASW 18 -> PSW 34 -> ASW 19, plane 2 via 26 -> 94.. -> 27
    assert p.nodes == (0, 18, 34, 19, 9) and p.bottleneck_bps == 4e11


def test_no_rail_dual_tor_model():
    t = made(topology="DCN+", dt=True, gpu=16)
    assert not t.rail_optimized and t.dual_tor and t.shape == "No_Rail_Opti_DualToR"


def test_pods_model():
    t = made(topology="Spectrum-X", gpu=32, pods=2, psw_switch_num=4)
    assert {k: len(v) for k, v in t.tiers.items()} == {"NVSwitch": 4, "ASW": 16, "PSW": 8, "core": 8}
    assert (t.pods, t.planes) == (2, 1)
    # ASW: 2 GPUs * 400G down, 4 PSWs * 400G up -> 0.5; PSW: 8 ASWs * 400G down, 8 cores * 400G up -> 1
    assert t.oversubscription == {"ASW": 0.5, "PSW": 1.0}
    p = t.path(0, 16)  # pod 0 rail 0 (ASW 36) to pod 1 rail 0 (ASW 44) through PSW 52 and core 60
    assert (p.nodes, p.hops, p.tier) == ((0, 36, 52, 60, 56, 44, 16), 6, "core")
    assert p.latency_s == pytest.approx(6 * 5e-7) and p.bottleneck_bps == 4e11
    t2 = made(topology="Spectrum-X", gpu=32, pods=2, psw_switch_num=4, oversubscription=2.0)
    assert t2.oversubscription["PSW"] == 2.0  # ceil(3.2T / (2 * 400G)) = 4 cores: 3.2T / 1.6T


def test_nvl72_model():
    t = made(topology="NVL72", gpu=144)
    # 7200Gbps NVLink per direction = 9e11 byte/s; 800Gbps NIC = 1e11 byte/s; 72 NICs per domain
    assert t.nvlink_bytes_per_s == 9e11 and t.nic_bytes_per_s == 1e11 and t.nics_per_server == 72
    assert t.rail_optimized and t.path(0, 71).tier == "NVSwitch" and t.path(0, 72).tier == "ASW"


def test_summary(examples):
    s = read_topology(examples / DCN).summary()
    assert s["tiers"] == {"NVSwitch": 2, "ASW": 1, "PSW": 8, "core": 0} and s["shape"] == "No_Rail_Opti_SingleToR"
    assert s["nic_bps_per_server"] == 3.2e12


# ---- errors name file, line and field -------------------------------------------------------------
def _mutate(text: str, line: int, new: str | None) -> str:
    lines = text.split("\n")
    if new is None:
        del lines[line - 1]
    else:
        lines[line - 1] = new
    return "\n".join(lines)


@pytest.mark.parametrize("line, new, at_line, field, message", [
    (1, "27 8 2 9 40", 1, None, "the header has 5 fields, expected 6"),
    (1, "27 8 2 x 40 H100", 1, "other_switch_count", "not an integer: 'x'"),
    (1, "27 8 2 9 41 H100", 1, "link_count", "the header says 41 links but the file has 40 link lines"),
    (1, "27 7 2 9 40 H100", 1, "gpus_per_server", "16 GPUs (27 - 2 - 9) is not a multiple of 7"),
    (1, "11 8 2 9 40 H100", 1, "total_nodes", "11 nodes leave no GPUs"),
    (1, "28 8 2 10 40 H100", 2, "switch_ids", "lists 11 switch ids, the header says 12"),
    (2, "16 17 18 19 20 21 22 23 24 25 27 ", 2, "switch_ids", "switch id 27 is outside 16..26"),
    (2, "15 17 18 19 20 21 22 23 24 25 26 ", 2, "switch_ids", "switch id 15 is outside 16..26"),
    (2, "16 17 18 19 20 21 22 23 24 25 25 ", 2, "switch_ids", "switch id 25 is listed twice"),
    (7, "2 16 2880Gbps 0.000025ms", 7, None, "4 fields, expected 5"),
    (7, "2 16 2880Gbps 0.000025ms 0 0", 7, None, "6 fields, expected 5"),
    (8, "2 27 400Gbps 0.0005ms 0", 8, "dst", "node 27 does not exist (the header declares nodes 0..26)"),
    (8, "-1 18 400Gbps 0.0005ms 0", 8, "src", "node -1 does not exist"),
    (8, "two 18 400Gbps 0.0005ms 0", 8, "src", "not a node id: 'two'"),
    (8, "2 2 400Gbps 0.0005ms 0", 8, "dst", "links node 2 to itself"),
    (9, "3 16 2880Gbsp 0.000025ms 0", 9, "bandwidth", "not a bandwidth: '2880Gbsp'"),
    (10, "3 18 400Gbps 0.5mss 0", 10, "latency", "not a latency: '0.5mss'"),
    (42, "18 26 400Gbps 0.0005ms x", 42, "error_rate", "not an error rate: 'x'"),
    (42, None, 1, "link_count", "the header says 40 links but the file has 39 link lines"),
    (20, "", 20, None, "0 fields, expected 5"),
    # odd spellings and sizes (issue 21, item 7): Python's int reads "-0" as 0, which moved GPU 3's NVLink
    # to GPU 0 and ended in a ZeroDivisionError; ids past int64 gave an OverflowError
    (9, "-0 16 2880Gbps 0.000025ms 0", 9, "src", "not a node id: '-0' (plain decimal digits)"),
    (9, "+3 16 2880Gbps 0.000025ms 0", 9, "src", "not a node id: '+3'"),
    (9, "3 1_6 2880Gbps 0.000025ms 0", 9, "dst", "not a node id: '1_6'"),
    (8, "99999999999999999999999 18 400Gbps 0.0005ms 0", 8, "src",
     "node 99999999999999999999999 does not exist (the header declares nodes 0..26)"),
    (2, "16 17 18 19 20 21 22 23 24 25 99999999999999999999999 ", 2, "switch_ids", "is too large"),
    (1, "99999999999999999999999 8 2 9 40 H100", 1, "total_nodes", "is too large"),
    (1, "27 8 -0 9 40 H100", 1, "nvswitch_count", "not an integer: '-0'"),
    (1, "27 8 2 9 -3 H100", 1, "link_count", "must not be negative, got -3"),
])
def test_format_errors(examples, tmp_path, line, new, at_line, field, message):
    path = tmp_path / "bad.topo"
    path.write_text(_mutate((examples / DCN).read_text(), line, new))
    with pytest.raises(FormatError) as exc:
        read_topology(path)
    err = exc.value
    assert (err.path, err.line, err.field) == (str(path), at_line, field)
    assert str(err).startswith(f"{path}:{at_line}: " + (f"{field}: " if field else ""))
    assert message in str(err)


@pytest.mark.parametrize("line, new, message", [
    (9, "0 16 2880Gbps 0.000025ms 0", "GPU 3 has no link to an NVSwitch (NVLink)"),  # line 9: GPU 3's NVLink
    (10, "0 18 400Gbps 0.0005ms 0", "GPU 3 has no link to a network switch (NIC)"),  # line 10: GPU 3's NIC
])
def test_gpu_without_nvlink_or_nic(examples, tmp_path, line, new, message):
    """A link line naming another GPU leaves one GPU without NVLink (or NIC): its rate would be 0 and the
    simulator divided by it."""
    path = tmp_path / "bad.topo"
    path.write_text(_mutate((examples / DCN).read_text(), line, new))
    with pytest.raises(FormatError, match=re.escape(message)) as exc:
        read_topology(path)
    assert str(exc.value).startswith(f"{path}: src/dst: ")


def test_header_cannot_declare_more_gpus_than_its_links_reach(examples, tmp_path):
    """10^9 GPUs with 40 links: refused at the header, before arrays of a billion nodes are made.
    1000000011 nodes - 2 NVSwitches - 9 switches = 10^9 GPUs (a multiple of 8); the switch ids follow them."""
    text = (examples / DCN).read_text().split("\n")
    text[0] = "1000000011 8 2 9 40 H100"
    text[1] = " ".join(str(10**9 + k) for k in range(11)) + " "
    path = tmp_path / "big.topo"
    path.write_text("\n".join(text))
    with pytest.raises(FormatError, match="1000000000 GPUs .* cannot each have a link among 40 links") as exc:
        read_topology(path)
    assert (exc.value.line, exc.value.field) == (1, "total_nodes")


def test_simulator_refuses_a_gpu_without_nvlink(examples, tmp_path, capsys):
    """The issue's case end to end: one line, exit 2, no traceback, no result files."""
    from simulator.cli import main
    from utils.cli import run_main

    path = tmp_path / "neg0.topo"
    path.write_text(_mutate((examples / DCN).read_text(), 9, "-0 16 2880Gbps 0.000025ms 0"))
    argv = ["-t", str(path), "--gpu_type", "H100", "--model_name", "gpt_tiny", "--world_size", "16",
            "--global_batch", "16", "-r", str(tmp_path / "r-")]
    with pytest.raises(SystemExit) as exc:
        run_main(lambda: main(argv), "simulator")
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{path}:9: src: not a node id: '-0'" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["neg0.topo"]


def test_extra_link_line(examples):
    text = (examples / DCN).read_text() + "18 19 400Gbps 0.0005ms 0\n"
    with pytest.raises(FormatError, match="the header says 40 links but the file has 41 link lines"):
        parse_topology(text, "x.topo")


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(FormatError, match="cannot read the topology file"):
        read_topology(tmp_path / "absent")
    (tmp_path / "empty").write_text("\n \n")
    with pytest.raises(FormatError, match="empty file") as exc:
        read_topology(tmp_path / "empty")
    assert exc.value.line == 1
    (tmp_path / "binary").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(FormatError, match="not a text file"):
        read_topology(tmp_path / "binary")

"""Property tests: every file the generator writes reads back to the same model and the same bytes;
no corruption of a file gets past the reader as anything but a FormatError."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topo.shapes import build, plan
from topo.templates import resolve
from topo.topology import parse_topology
from utils.errors import FormatError

SHAPES = {  # SimAI's five shapes as custom flag sets
    "Rail_Opti_SingleToR": dict(ro=True),
    "Rail_Opti_DualToR_SinglePlane": dict(ro=True, dt=True),
    "Rail_Opti_DualToR_DualPlane": dict(ro=True, dt=True, dp=True),
    "No_Rail_Opti_SingleToR": {},
    "No_Rail_Opti_DualToR": dict(dt=True),
}


@st.composite
def flag_sets(draw: st.DrawFn) -> tuple[str, dict]:
    shape = draw(st.sampled_from(sorted(SHAPES)))
    gps = draw(st.sampled_from([1, 2, 4, 8]))
    pods = draw(st.integers(1, 3))
    gpus = gps * pods * draw(st.integers(1, 4))
    flags = dict(SHAPES[shape], gpu=gpus, gpu_per_server=gps, pods=pods,
                 nv_switch_per_server=draw(st.integers(1, 2)), nics_per_aswitch=draw(st.integers(1, 6)),
                 psw_switch_num=draw(st.integers(1, 3)) * (2 if "DualPlane" in shape else 1),
                 asw_per_psw=4096,  # room for every segment: capacity is tested by hand elsewhere
                 bandwidth=draw(st.sampled_from(["400Gbps", "200Gbps", "1.6Tbps"])),
                 nvlink_bw=draw(st.sampled_from(["2880Gbps", "7200Gbps"])),
                 error_rate=draw(st.sampled_from(["0", "0.001"])),
                 gpu_type=draw(st.sampled_from(["H100", "A100", "GB200"])))
    if draw(st.booleans()):
        flags["ap_latency"] = draw(st.sampled_from(["1us", "0.0005ms"]))
    if pods > 1 and draw(st.booleans()):
        flags["oversubscription"] = draw(st.sampled_from([1.0, 1.5, 3.0]))
    return shape, flags


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flag_sets())
def test_generated_files_read_back(case):
    shape, flags = case
    spec = resolve(flags)
    layout = plan(spec)
    written = build(spec, layout)
    text = written.to_text()
    t = parse_topology(text, "<generated>")
    # header and counts
    assert layout.shape == shape
    assert (t.node_count, t.gpu_count, t.nvswitch_count, t.link_count) == \
        (layout.total_nodes, spec.gpus, layout.nvswitches, layout.links)
    assert t.other_switch_count == layout.asws + layout.psws + layout.cores
    assert t.switch_ids.tolist() == list(range(spec.gpus, layout.total_nodes))
    # links, id for id and string for string
    assert t.src.tolist() == written.src.tolist() and t.dst.tolist() == written.dst.tolist()
    for i in range(0, t.link_count, max(1, t.link_count // 50)):
        assert t.link(i) == written.link(i)
    # writing the read model gives the generator's bytes
    assert t.to_text() == text
    # the structure read from the wiring is the one asked for
    assert {k: len(t.tiers[k]) for k in ("ASW", "PSW", "core")} == \
        {"ASW": layout.asws, "PSW": layout.psws, "core": layout.cores}
    assert t.nic_ports_per_gpu.tolist() == [2 if spec.dual_tor else 1] * spec.gpus
    assert t.dual_tor == spec.dual_tor
    assert t.planes == (2 if spec.dual_plane else 1)
    assert t.pods == spec.pods
    if spec.gpus_per_server > 1 and (spec.rail_optimized or spec.nics_per_asw > 1):
        # not rail-optimised with one NIC per ASW is wired like a rail fabric: not decidable
        assert t.rail_optimized == spec.rail_optimized
    sets = 2 if spec.dual_tor else 1
    assert math.isclose(t.nic_bps, sets * t.bandwidth_bps[spec.nvswitch_per_server])


@settings(max_examples=25, deadline=None)
@given(flag_sets(), st.data())
def test_paths_are_consistent(case, data):
    _, flags = case
    t = build(resolve(flags))
    a = data.draw(st.integers(0, t.gpu_count - 1))
    b = data.draw(st.integers(0, t.gpu_count - 1))
    if a == b:
        return
    p = t.path(a, b)
    # hops by tier: NVSwitch or one ASW 2, through a PSW 4, through a core 6
    assert p.hops == {"NVSwitch": 2, "ASW": 2, "PSW": 4, "core": 6}[p.tier]
    assert p.nodes[0] == a and p.nodes[-1] == b
    if p.tier == "NVSwitch":
        assert t.server_of(a) == t.server_of(b)
    else:
        # the network never beats the slower endpoint's NIC ports, and a path is one of the flows
        assert p.single_path_bps <= p.bottleneck_bps <= min(t.nic_bps_per_gpu[a], t.nic_bps_per_gpu[b])
    q = t.path(b, a)
    assert (q.hops, q.tier, q.bottleneck_bps) == (p.hops, p.tier, p.bottleneck_bps)


_SMALL = build(resolve(dict(ro=True, dt=True, gpu=8, gpu_per_server=4, nics_per_aswitch=1, psw_switch_num=2))).to_text()
_JUNK = st.sampled_from(["", "x", "-1", "999", "3.5", "400Gbps", "0.1ms", "1 2", "0", "H100", "1e3", "\t"])


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_corrupted_files_fail_cleanly(data):
    lines = _SMALL.split("\n")[:-1]
    k = data.draw(st.integers(0, len(lines) - 1))
    action = data.draw(st.sampled_from(["replace-token", "delete-line", "duplicate-line", "replace-line"]))
    if action == "replace-token":
        tokens = lines[k].split()
        tokens[data.draw(st.integers(0, len(tokens) - 1))] = data.draw(_JUNK)
        lines[k] = " ".join(tokens)
    elif action == "delete-line":
        del lines[k]
    elif action == "duplicate-line":
        lines.insert(k, lines[k])
    else:
        lines[k] = data.draw(_JUNK)
    text = "\n".join(lines) + "\n"
    try:
        t = parse_topology(text, "fuzz.topo")
    except FormatError as exc:
        assert exc.path == "fuzz.topo"
        assert exc.line is None or 1 <= exc.line <= len(lines) + 1
        return
    # what reads must still be a consistent model that writes itself back and can be described
    assert t.summary()["gpus"] == t.gpu_count
    assert t.link_count == int(lines[0].split()[4])
    assert parse_topology(t.to_text()).to_text() == t.to_text()

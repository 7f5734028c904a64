"""``--model topo``: collective costs on Spectrum-X topologies, derived by hand from the formulas of
``simulator/topo/collectives.py`` (NCCL's tuning model) and ``simulator/topo/fabric.py``.

Constants (NVIDIA/nccl src/graph/tuning.cc), latencies in us, per protocol (LL, LL128, Simple):
  baseLat ring 6.6 14.0 8.4          tree 6.8 14.0 0
  hwLat NVLink ring .6 1.9 3.4       tree .6 1.25 28
  hwLat NET    ring 2.7 4.0 14.0     tree 5.0 8.5 28
  network overhead 1 us (x3 Simple) bounds the intra-server step latency of multi-server groups;
  ring all-reduce Simple across servers: latency x 1.4; LL128 ring bandwidth x0.92 (x0.7 with one
  rank per server); tree bandwidth x0.92 (LL128 x120/128, LL /3.8) x correction(size), algbw = half.
Spectrum-X files (SimAI's generator defaults): NVLink 2880 Gbps = 360e9 B/s per GPU, latency
0.025 us per link (0.05 us GPU-NVSwitch-GPU); NIC 400 Gbps = 50e9 B/s, 0.5 us per link, so two
servers on one ASW are 1.0 us apart.  Default efficiencies: NVLink 20.6/25 = 0.824 -> B_nv =
296.64e9 B/s; NIC 0.97 -> B_nic = 48.5e9 B/s.
"""

from __future__ import annotations

import pytest

from simulator.topo.collectives import LinkModel, collective_cost, congestion, p2p_cost
from simulator.topo.fabric import TopologyFabric
from tests.conftest import EXAMPLES
from topo import read_topology

US = 1e-6
GIB = 2**30
B_NV = 360e9 * 20.6 / 25.0   # 296.64e9 B/s
B_NIC = 50e9 * 0.97          # 48.5e9 B/s
LINKS = LinkModel()


@pytest.fixture(scope="module")
def sx16():
    return TopologyFabric(read_topology(EXAMPLES / "topo_Spectrum-X_16g_8gps_400Gbps_H100"), 16)


@pytest.fixture(scope="module")
def sx128(tmp_path_factory):
    from topo.gen import main

    path = tmp_path_factory.mktemp("topo") / "sx128"
    main(["-topo", "Spectrum-X", "-g", "128", "-o", str(path)])
    return TopologyFabric(read_topology(path), 128)


def cost(fabric, kind, size, ranks):
    return collective_cost(kind, size, fabric.group_shape(ranks), LINKS)


def test_ring_all_reduce_inside_one_server(sx16):
    # TP group 0..7: n = 8, one server.  Ring Simple: steps 2(n-1) = 14 over NVLink, each
    # hwLat 3.4 + path 0.05 us: latency = 8.4 + 14 * 3.45 = 56.7 us; bandwidth term
    # 2(n-1)/n * S / B_nv = 1.75 * 2^30 / 296.64e9 = 6334.44 us.  Total 6391.14 us.
    # (LL128: 14 + 14 * 1.95 = 41.3 us + 1.75 * 2^30 / (0.92 * B_nv) = 6885 us: slower; LL slower still.)
    c = cost(sx16, "all_reduce", GIB, range(8))
    assert (c.algorithm, c.protocol) == ("ring", "Simple")
    assert c.time_s == pytest.approx((8.4 + 14 * 3.45) * US + 1.75 * GIB / B_NV, rel=1e-12)
    assert c.time_s * 1e6 == pytest.approx(6391.14, abs=0.01)


def test_medium_all_reduce_inside_one_server_picks_ll128(sx16):
    # 16 MiB: LL128 = 14 + 14 * (1.9 + 0.05) = 41.3 us + 1.75 * 2^24 / (0.92 * 296.64e9) = 107.58 us -> 148.88 us;
    # Simple = 56.7 + 98.98 = 155.68 us; LL = 6.6 + 14 * 0.65 = 15.7 us + 1.75 * 2^24 / min(87.7e9, B_nv / 4) = 411.6 us.
    c = cost(sx16, "all_reduce", 2**24, range(8))
    assert (c.algorithm, c.protocol) == ("ring", "LL128")
    assert c.time_s == pytest.approx(41.3 * US + 1.75 * 2**24 / (0.92 * B_NV), rel=1e-12)


def test_ring_all_reduce_across_two_servers_one_gpu_each(sx16):
    # DP group {0, 8} (tp 8): n = m = 2, one member per server, its own NIC: B = 48.5e9.
    # Ring Simple: 2 steps, both across servers: interLat = 14 + 2 * 1.0 (path latency twice,
    # NCCL's flush) = 16 us; latency = (8.4 + 2 * 16) * 1.4 = 56.56 us; bandwidth 2(n-1)/n = 1:
    # 2^30 / 48.5e9 = 22139.0 us.  Tree Simple: 2^30 / (0.5 * 0.92 * 48.5e9) = 48128 us: ring wins.
    c = cost(sx16, "all_reduce", GIB, [0, 8])
    assert (c.algorithm, c.protocol) == ("ring", "Simple")
    assert c.time_s == pytest.approx((8.4 + 2 * 16.0) * 1.4 * US + GIB / B_NIC, rel=1e-12)
    assert c.busbw_Bps / 1e9 == pytest.approx(GIB / c.time_s / 1e9, rel=1e-12)  # factor 2(n-1)/n = 1


def test_ring_all_reduce_across_two_servers_eight_gpus_each(sx16):
    # All 16 GPUs: n = 16, m = 2, k = 8 per server.  The ring spreads its channels over the 8 NICs:
    # B = min(B_nv, 8 * B_nic) = min(296.64e9, 388e9) = 296.64e9.  Steps 30, of which 2(m-1) = 2 cross
    # servers; intraLat = max(3.4 + 0.05, 3 * 1 us overhead) = 3.45; interLat = 16.
    # latency = (8.4 + 28 * 3.45 + 2 * 16) * 1.4 = 191.8 us; bandwidth 2 * 15/16 * 2^30 / B_nv = 6786.9 us.
    c = cost(sx16, "all_reduce", GIB, range(16))
    assert (c.algorithm, c.protocol) == ("ring", "Simple")
    assert c.time_s == pytest.approx(191.8 * US + 1.875 * GIB / B_NV, rel=1e-12)


def test_all_reduce_across_sixteen_servers_ring_for_large_tree_for_medium(sx128):
    ranks = range(0, 128, 8)  # a DP group of tp 8: one GPU (rail 0) on each of 16 servers of one segment
    shape = sx128.group_shape(ranks)
    assert (shape.n, shape.servers, shape.per_server, shape.tier) == (16, 16, 1, "ASW")
    # 1 GiB: ring Simple latency (8.4 + 30 * 16) * 1.4 = 683.76 us, bandwidth 2 * 15/16 * 2^30 / 48.5e9 = 41510.6 us.
    big = cost(sx128, "all_reduce", GIB, ranks)
    assert (big.algorithm, big.protocol) == ("ring", "Simple")
    assert big.time_s == pytest.approx(683.76 * US + 1.875 * GIB / B_NIC, rel=1e-12)
    # 1 MiB: tree LL128: latency 14 + 2 * log2(16) * (8.5 + 1.0) = 90 us; bandwidth 48.5e9 * 0.92 *
    # 120/128 * correction 0.6 (log2(2^20 / 64) = 14) = 25.09875e9, algbw half: 2^20 / 12.549375e9 = 83.56 us.
    # Total 173.56 us.  The others: ring LL128 14 + 30 * (4.0 + 1.0) = 164 us + 1.875 * 2^20 / (0.7 * 48.5e9)
    # = 221.9 us; ring LL 117.6 + 162.2 = 279.7 us; ring Simple 724.3 us; tree Simple 240 + 94.0 = 334 us;
    # tree LL 54.8 + 357.2 = 412 us.
    medium = cost(sx128, "all_reduce", 2**20, ranks)
    assert (medium.algorithm, medium.protocol) == ("tree", "LL128")
    assert medium.time_s == pytest.approx(90 * US + 2**20 / (0.5 * B_NIC * 0.92 * 120 / 128 * 0.6), rel=1e-12)
    assert medium.time_s * 1e6 == pytest.approx(173.56, abs=0.01)


def test_all_gather_across_sixteen_servers(sx128):
    # All-gather has no tree: ring Simple, steps n-1 = 15, all across servers: latency 8.4 + 15 * 16 =
    # 248.4 us (no plateau factor outside all-reduce); bandwidth 15/16 * 2^30 / 48.5e9.
    c = cost(sx128, "all_gather", GIB, range(0, 128, 8))
    assert (c.algorithm, c.protocol) == ("ring", "Simple")
    assert c.time_s == pytest.approx(248.4 * US + 15 / 16 * GIB / B_NIC, rel=1e-12)


def test_all_to_all_over_nvlink_and_nic_at_once(sx16):
    # 16 ranks on 2 servers, k = 8, 256 MiB exchanged per rank: 7/16 of it to peers on NVLink,
    # 8/16 through the rank's own NIC, both at once: max(7/16 * 2^28 / 296.64e9, 8/16 * 2^28 / 48.5e9)
    # = max(395.9, 2767.2) us.  Latency 6.6 + 7 * (0.6 + 0.05) + 8 * (1 + 1.0) = 27.15 us.
    c = cost(sx16, "all_to_all", 2**28, range(16))
    assert c.algorithm == "pairwise"
    assert c.time_s == pytest.approx(27.15 * US + 0.5 * 2**28 / B_NIC, rel=1e-12)


def test_pipeline_send_between_servers(sx16):
    # GPU 0 -> GPU 8 through one ASW: hwLat NET ring Simple 14 us + path 1.0 us twice = 16 us; 64 MiB / 48.5e9.
    route = sx16.p2p_shape(0, 8)
    c = p2p_cost(2**26, route.same_server, route.bottleneck_Bps, route.latency_s, LINKS, route.congestion)
    assert c.time_s == pytest.approx(16 * US + 2**26 / B_NIC, rel=1e-12)
    # inside a server: 3.4 + 0.05 us, NVLink.
    route = sx16.p2p_shape(0, 1)
    c = p2p_cost(2**26, route.same_server, route.bottleneck_Bps, route.latency_s, LINKS)
    assert c.time_s == pytest.approx(3.45 * US + 2**26 / B_NV, rel=1e-12)


def test_efficiency_and_latency_knobs(sx16):
    # latency_scale 0 and efficiency 1: the pure bandwidth term 1.75 * 2^30 / 360e9.
    c = collective_cost("all_reduce", GIB, sx16.group_shape(range(8)), LinkModel(1.0, 1.0, 0.0))
    assert c.time_s == pytest.approx(1.75 * GIB / 360e9, rel=1e-12)


def test_nothing_moves_for_one_rank_or_zero_bytes(sx16):
    assert cost(sx16, "all_reduce", GIB, [3]).time_s == 0.0
    assert cost(sx16, "all_gather", 0, range(8)).time_s == 0.0


@pytest.fixture(scope="module")
def pods(tmp_path_factory):
    # 8 servers, 2 servers per segment (-npa 2), 2 PSWs per pod, 2 pods under a core tier with
    # PSW uplinks at 1/4 of their downlinks: ASW down/up = 2 x 400G / 2 x 400G = 1, PSW 4.
    from topo.gen import main

    path = tmp_path_factory.mktemp("topo") / "pods"
    main(["-topo", "Spectrum-X", "-g", "64", "-npa", "2", "-psn", "2", "--pods", "2", "--oversub", "4", "-o", str(path)])
    topology = read_topology(path)
    assert topology.oversubscription == {"ASW": 1.0, "PSW": 4.0}
    return TopologyFabric(topology, 64)


def test_congestion_through_an_oversubscribed_tier(pods):
    # Leaving a pod, the NIC traffic meets uplinks of 1 / (1 * 4) of its rate (O_pod = 4).
    assert congestion(4.0, 0.25) == 1.0 and congestion(4.0, 1.0) == 4.0
    # A ring over {0, 32}: 2 servers in 2 pods, so every ring edge leaves its pod: f = D/m = 2/2 = 1 ->
    # congestion 4.  Path 0 -> 32 climbs ASW, PSW, core and back: 6 links x 0.5 us = 3 us.
    # Ring Simple: latency (8.4 + 2 * (14 + 2 * 3)) * 1.4 = 67.76 us; bandwidth 2^30 / (48.5e9 / 4).
    shape = pods.group_shape([0, 32])
    assert (shape.tier, shape.congestion, shape.net_latency_s) == ("core", 4.0, pytest.approx(3e-6))
    c = collective_cost("all_reduce", GIB, shape, LINKS)
    assert c.time_s == pytest.approx(67.76 * US + GIB / (B_NIC / 4), rel=1e-12)
    # A DP ring over all 8 servers crosses the pod boundary at 2 of its 8 edges: f = 2/8, 2/8 * 4 = 1:
    # no congestion.  An all-to-all over the same ranks sends half its traffic to the other pod:
    # f = 1 - 1/2, 0.5 * 4 = 2.
    ring = pods.group_shape(range(0, 64, 8))
    assert (ring.congestion, ring.a2a_congestion) == (1.0, 2.0)
    # A pipeline send between pods: all of it leaves: 4.
    assert pods.p2p_shape(0, 32).congestion == 4.0
    assert pods.p2p_shape(0, 16).congestion == 1.0

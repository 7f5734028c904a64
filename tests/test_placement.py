"""Placement and servers with shared NICs (issue 30): link sharing checked by hand, the rank file, the search.

Rates (topo.server defaults): PCIe 512Gbps = 64 GB/s per direction, counted at NCCL's 0.75 (48 GB/s); NIC 400Gbps =
50 GB/s at 0.97 (48.5 GB/s); NVLink at the link model's efficiency.  Latencies: PCIe hop 0.1 us, NIC link 0.5 us.
A transfer's rate is its slowest link's effective rate over the transfers that cross that link at once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from simulator.options import TopoOptions
from simulator.topo.collectives import LinkModel, bus_bandwidth, p2p_cost
from simulator.topo.placed_fabric import HierarchyFabric
from simulator.topo.placement import Placement, parse_rank_file, rank_file_text, search_placement
from tests.conftest import run_cli
from topo import read_topology
from topo.gen import main as topo_gen
from utils.errors import FormatError
from utils.parallel import ParallelConfig

LINKS = LinkModel(nvlink_efficiency=0.824, nic_efficiency=0.97)
PCIE = 64e9 * 0.75   # 48 GB/s
NIC = 50e9 * 0.97    # 48.5 GB/s


def topology(tmp_path: Path, capsys: pytest.CaptureFixture, *argv: str):
    assert topo_gen([*argv, "-o", f"{tmp_path}{os.sep}"]) == 0
    return read_topology(capsys.readouterr().out.splitlines()[-1])


def test_p2p_through_a_shared_nic_with_two_senders(tmp_path, capsys):
    # Two servers of 4 GPUs, 2 GPUs per NIC, each NIC on the PCIe switch of its 2 GPUs.  tp 2, pp 2, dp 2 (tp-dp-pp):
    # stage 0 on GPUs 0-3, stage 1 on GPUs 4-7; the boundary sends 0->4, 1->5, 2->6, 3->7 at once.  Without PXN GPUs 0
    # and 1 both leave by NIC 0: 48.5 / 2 = 24.25 GB/s each (their own PCIe links, 48 GB/s, carry one each).
    topo = topology(tmp_path, capsys, "-g", "8", "-gps", "4", "--gpus_per_nic", "2")
    pconf = ParallelConfig(world_size=8, tp=2, pp=2)
    fabric = HierarchyFabric(topo, 8).bind(pconf, None, LINKS, pxn=False)
    shape = fabric.p2p_shape(0, 4)
    assert not shape.same_server and shape.bottleneck_Bps * 0.97 == pytest.approx(NIC / 2)
    # latency: PCIe 0.1 + NIC 0.5 + NIC 0.5 + PCIe 0.1 = 1.2 us; NCCL's p2p: 14 us + 2 x 1.2 us + 48.5 MB / 24.25 GB/s
    assert shape.latency_s == pytest.approx(1.2e-6)
    cost = p2p_cost(48.5e6, False, shape.bottleneck_Bps, shape.latency_s, LINKS)
    assert cost.time_s == pytest.approx(14e-6 + 2.4e-6 + 2000e-6)
    # one sender alone is held by its own PCIe link instead: 48 GB/s < 48.5 GB/s
    alone = HierarchyFabric(topo, 8).bind(None, None, LINKS, pxn=False).p2p_shape(0, 4)
    assert alone.bottleneck_Bps * 0.97 == pytest.approx(PCIE)


def test_pxn_route_shares_the_relay_gpus_pcie_link(tmp_path, capsys):
    # The same boundary with NCCL's PXN (p2p level 2): GPU 1 sends by the NIC of its receiver's rail (GPU 5 is local
    # GPU 1, whose NIC is NIC 0) through that NIC's local GPU 0: NVLink 1 -> 0, then GPU 0's PCIe link, which now
    # carries GPU 0's and GPU 1's activations: 48 / 2 = 24 GB/s, below the NIC's 24.25.
    topo = topology(tmp_path, capsys, "-g", "8", "-gps", "4", "--gpus_per_nic", "2")
    fabric = HierarchyFabric(topo, 8).bind(ParallelConfig(world_size=8, tp=2, pp=2), None, LINKS, pxn=True)
    route = fabric.h.send_path(1, 5)
    assert route.kind == "PXN" and route.relay == 0
    assert route.up[:2] == (("nv+", 1), ("nv-", 0)) and route.up[2] == fabric.h.send_path(0, 4).up[0]
    assert fabric.p2p_shape(0, 4).bottleneck_Bps * 0.97 == pytest.approx(PCIE / 2)


def test_nvlink_pair_server(tmp_path, capsys):
    # One server of 4 GPUs: NVLink pairs (0,1) and (2,3) at 2400Gbps = 300 GB/s, GPUs 0,1 on PCIe switch 0 and 2,3 on
    # switch 1 under one socket.  A TP-4 ring 0->1->2->3->0: the pair hops at 300 x 0.824 = 247.2 GB/s, the hops 1->2
    # and 3->0 over PCIe through the socket (opposite directions of each uplink, so unshared): 48 GB/s sets the ring.
    topo = topology(tmp_path, capsys, "-g", "8", "-gps", "4", "--gpus_per_nic", "4", "--gpus_per_pcie_switch", "2",
                    "--nvlink", "pairs", "-nvbw", "2400Gbps", "--sockets", "1")
    tp4 = HierarchyFabric(topo, 8).bind(ParallelConfig(world_size=8, tp=4), None, LINKS)
    shape = tp4.group_shape_kind([0, 1, 2, 3], "tp_group")
    assert shape.servers == 1 and bus_bandwidth(shape, LINKS) == pytest.approx(PCIE)
    tp2 = HierarchyFabric(topo, 8).bind(ParallelConfig(world_size=8, tp=2), None, LINKS)
    assert bus_bandwidth(tp2.group_shape_kind([0, 1], "tp_group"), LINKS) == pytest.approx(300e9 * 0.824)
    # TP-2 groups across the pairs (ranks 0,1 on GPUs 1,2; ranks 2,3 on GPUs 0,3) have only PCIe, and both rings send
    # up switch 0's uplink to the socket at once (1 -> 2 and 0 -> 3): 48 / 2 = 24 GB/s
    placed = HierarchyFabric(topo, 8).bind(ParallelConfig(world_size=8, tp=2), (1, 2, 0, 3, 4, 5, 6, 7), LINKS)
    assert bus_bandwidth(placed.group_shape_kind([0, 1], "tp_group"), LINKS) == pytest.approx(PCIE / 2)


def test_rank_file_round_trip_and_errors():
    placement = Placement(server_of=(1, 0), slot_of=(0, 2, 1, 3))
    text = rank_file_text(placement)
    assert "server1: --node_rank 0 CUDA_VISIBLE_DEVICES=0,2,1,3" in text
    # rank 0 on server 1 slot 0 = GPU 4; rank 1 on GPU 6; rank 4 on server 0 slot 0 = GPU 0
    assert parse_rank_file(text, "f", 4, 2, 8) == (4, 6, 5, 7, 0, 2, 1, 3) == placement.gpu_of()
    with pytest.raises(FormatError, match=r"f:3: server0:1 \(GPU 1\) is named twice, on lines 2 and 3"):
        parse_rank_file("server0:0\nserver0:1\nserver0:1\nserver0:3\n", "f", 4, 1, 4)
    with pytest.raises(FormatError, match="slot 4: the topology's servers have slots 0..3"):
        parse_rank_file("node-0:4\n", "f", 4, 1, 1)
    with pytest.raises(FormatError, match="names 1 ranks; the job has 4"):
        parse_rank_file("0:0\n", "f", 4, 1, 4)


JOB = ["--gpu_type", "H100", "--model_name", "llama3_8B", "--num_layers", "8", "--world_size", "16",
       "--tensor_model_parallel_size", "4", "--pipeline_model_parallel", "4", "--global_batch", "8",
       "--seq_length", "2048", "--enable_sequence_parallel", "--use-tp-pp-dp-mapping"]


def test_placement_file_naming_a_gpu_twice_is_one_line_exit_2(tmp_path, capsys):
    topo_gen(["-topo", "Spectrum-X", "-g", "16", "-o", f"{tmp_path}{os.sep}"])
    path = capsys.readouterr().out.splitlines()[-1]
    ranks = tmp_path / "ranks.txt"
    ranks.write_text("".join(f"server{r // 8}:{r % 8}\n" for r in range(15)) + "server0:3\n")
    result = run_cli("-m", "simulator", "-t", path, *JOB, "--placement", str(ranks), "-r", f"{tmp_path}/out/")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"simulator: error: {ranks}:16: server0:3 (GPU 3) is named twice, on lines 4 and 16"]
    assert not (tmp_path / "out").exists()


def test_place_on_one_nic_per_gpu_equals_default(tmp_path, capsys):
    # every GPU has its own NIC on its rail: no slot or server order beats rank r on GPU r
    topo_gen(["-topo", "Spectrum-X", "-g", "16", "-o", f"{tmp_path}{os.sep}"])
    path = capsys.readouterr().out.splitlines()[-1]
    result = run_cli("-m", "simulator", "place", "-t", path, *JOB, "-o", str(tmp_path / "place"), "--json", "-q")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["best_s"] == out["default_s"] and out["slot_of_local_rank"] == list(range(8))
    assert Path(out["placement"]).read_text().splitlines()[-1] == "server1:7"


def test_place_on_two_nics_per_server_spreads_the_boundary_over_both(tmp_path, capsys):
    # 2 NICs per 8 GPUs: NIC 0 on PCIe switch 0 (GPUs 0,1) under socket 0 with switch 1 (GPUs 2,3), NIC 1 on switch 2
    # (GPUs 4,5) under socket 1 with switch 3 (GPUs 6,7).  tp 4 pp 4 (tp-pp-dp): server 0 holds stages 0 (slots 0-3)
    # and 1 (slots 4-7), server 1 stages 2 and 3; the boundary 1 -> 2 crosses servers.  Default, without PXN: stage
    # 1's 4 senders all leave by NIC 1 (4,5 through switch 2, 6,7 through socket 1 then switch 2): 48.5 / 4 GB/s each;
    # stage 2's receivers (slots 0-3) all arrive by NIC 0.  The best slot order puts 2 senders and 2 receivers on each
    # NIC and at most one on each switch without a NIC (whose x16 uplink, 48 GB/s, then carries one): 48.5 / 2 GB/s.
    topo = topology(tmp_path, capsys, "-topo", "Spectrum-X", "-g", "16", "--gpus_per_nic", "4",
                    "--gpus_per_pcie_switch", "2")
    from utils.cli import parse_job

    job, _ = parse_job(JOB, "test", "")
    result = search_placement(job, topo, TopoOptions(pxn=False))
    assert result.best_s < result.default_s
    pconf = ParallelConfig(world_size=16, tp=4, pp=4, order="tp-cp-ep-pp-dp")
    default = HierarchyFabric(topo, 16).bind(pconf, None, LINKS, pxn=False)
    best = HierarchyFabric(topo, 16).bind(pconf, result.best.gpu_of(), LINKS, pxn=False)
    sender, receiver = pconf.rank_generator().rank_at(pp=1), pconf.rank_generator().rank_at(pp=2)
    assert default.p2p_shape(sender, receiver).bottleneck_Bps * 0.97 == pytest.approx(NIC / 4)
    assert best.p2p_shape(sender, receiver).bottleneck_Bps * 0.97 == pytest.approx(NIC / 2)
    # the critical path crosses the boundary twice (the first micro-batch's forward, the last one's backward): the
    # iteration gains twice the difference of one transfer (8 MiB of activation per rank: 2048 x 4096 x 2 B / 4)
    size = 2048 * 4096 * 2 // 4
    t4 = p2p_cost(size, False, NIC / 4 / 0.97, default.p2p_shape(sender, receiver).latency_s, LINKS).time_s
    t2 = p2p_cost(size, False, NIC / 2 / 0.97, best.p2p_shape(sender, receiver).latency_s, LINKS).time_s
    assert result.default_s - result.best_s == pytest.approx(2 * (t4 - t2), rel=0.02)


def test_fill_bubbles_reported_in_the_json(tmp_path, capsys):
    topo_gen(["-topo", "Spectrum-X", "-g", "16", "-o", f"{tmp_path}{os.sep}"])
    path = capsys.readouterr().out.splitlines()[-1]
    result = run_cli("-m", "simulator", "-t", path, *JOB, "--use-distributed-optimizer", "--fill_bubbles", "--json",
                     "-r", f"{tmp_path}/out/")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    rows = out["fill_stages"]
    assert [row["stage"] for row in rows] == [0, 1, 2, 3]
    # the first stage ends its backward last: nothing of its step fits before the drain; the others' steps move in
    assert rows[0]["filled_us"] == 0.0 and all(row["filled_us"] > 0 for row in rows[1:])
    for row in rows:
        assert row["bubble_before_us"] - row["bubble_after_us"] == pytest.approx(row["filled_us"], abs=1e-3)
    assert out["iteration_s"] <= out["fill_before_s"]
    assert "bubble filling (--fill_bubbles)" in result.stdout


def test_place_refuses_a_job_that_does_not_fill_whole_servers(tmp_path, capsys):
    topo_gen(["-topo", "Spectrum-X", "-g", "16", "-o", f"{tmp_path}{os.sep}"])
    path = capsys.readouterr().out.splitlines()[-1]
    job = [a if a != "16" else "12" for a in JOB]
    job[job.index("--pipeline_model_parallel") + 1] = "3"
    job[job.index("--num_layers") + 1] = "6"
    result = run_cli("-m", "simulator", "place", "-t", path, *job, "-o", str(tmp_path / "place"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "simulator place: error: --world_size 12 does not fill whole servers of 8 GPUs: a placement moves whole servers "
        "and the slots inside them"]
    assert not (tmp_path / "place").exists()


def test_stage_to_server_mapping_avoids_the_slow_nics(tmp_path, capsys):
    # 4 servers, NICs of 400, 200, 400, 200 Gbps (SimAI's wiring, one NIC per GPU).  tp 8 pp 2 on 16 GPUs: stage 1 on
    # server 1 receives at 25 x 0.97 = 24.25 GB/s per GPU; the search moves node rank 1 to server 2 (48.5 GB/s).
    topo = topology(tmp_path, capsys, "-topo", "Spectrum-X", "-g", "32", "--server_nic_bw", "400Gbps,200Gbps")
    from utils.cli import parse_job

    job, _ = parse_job(["--gpu_type", "H100", "--model_name", "llama3_8B", "--num_layers", "8", "--world_size", "16",
                        "--tensor_model_parallel_size", "8", "--pipeline_model_parallel", "2", "--global_batch", "8",
                        "--seq_length", "2048", "--enable_sequence_parallel"], "test", "")
    result = search_placement(job, topo, TopoOptions())
    assert result.best.server_of == (0, 2) and result.best.slot_of == tuple(range(8))
    pconf = ParallelConfig(world_size=16, tp=8, pp=2)
    slow = HierarchyFabric(topo, 16).bind(pconf, None, LINKS).p2p_shape(0, 8)
    fast = HierarchyFabric(topo, 16).bind(pconf, result.best.gpu_of(), LINKS).p2p_shape(0, 8)
    assert slow.bottleneck_Bps * 0.97 == pytest.approx(25e9 * 0.97) and fast.bottleneck_Bps * 0.97 == pytest.approx(NIC)
    assert result.best_s < result.default_s


def test_place_output_that_is_a_file_is_one_line_and_the_file_kept(tmp_path, capsys):
    # -o names a folder: a file there (here the topology itself, or a link to it) made os.makedirs raise
    # FileExistsError with a traceback after the whole search
    topo_gen(["-topo", "Spectrum-X", "-g", "16", "-o", f"{tmp_path}{os.sep}"])
    path = capsys.readouterr().out.splitlines()[-1]
    before = open(path, "rb").read()
    link = tmp_path / "link.txt"
    link.symlink_to(path)
    for out in (path, str(link), os.path.join(path, "sub")):
        result = run_cli("-m", "simulator", "place", "-t", path, *JOB, "-o", out, "-q")
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-800:]
        assert "is a file, not a folder" in lines[0]
        assert open(path, "rb").read() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([os.path.basename(path), "link.txt"])


def test_hand_edited_server_lines_that_cannot_be_routed_are_one_line(tmp_path, capsys):
    # the #server lines of a --gpus_per_nic file cut to the CPU sockets (the PCIe switches then read as network
    # switches), or a network switch listed as a PCIe switch: the routing raised ValueError (no PCIe path to a GPU's
    # NIC, a server without a NIC)
    topo_gen(["-topo", "Spectrum-X", "-g", "16", "--gpus_per_nic", "2", "-o", f"{tmp_path}{os.sep}"])
    path = capsys.readouterr().out.splitlines()[-1]
    text = open(path).read()
    body, _, tail = text.partition("#server ")
    roles = dict(line.split(" ", 1) for line in ("#server " + tail).replace("#server ", "").strip().splitlines())
    pcie, cpu = roles["pcie_switch"].split(), roles["cpu_socket"].split()
    sockets = tmp_path / "sockets.txt"
    sockets.write_text(body + f"#server cpu_socket {cpu[0]}\n")
    asw = tmp_path / "asw.txt"
    asw.write_text(body + f"#server pcie_switch {' '.join(pcie[1:])} {int(max(pcie + cpu, key=int)) + 1}\n"
                   f"#server cpu_socket {' '.join(cpu)}\n")
    for edited in (sockets, asw):
        result = run_cli("-m", "simulator", "-t", str(edited), *JOB, "-q")
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-800:]
        assert lines[0].startswith(f"simulator: error: {edited}: ") and "#server lines" in lines[0]

"""``python -m simulator search --placement search`` (issue 30, item 2): the best layouts placed on servers with shared
NICs, checked by hand and against ``python -m simulator place``; nothing to do on one NIC per GPU; bad input.

Rates (topo.server defaults, as tests/test_placement.py): PCIe 512Gbps = 64 GB/s per direction, counted at NCCL's
0.75 (48 GB/s); NIC 400Gbps = 50 GB/s at 0.97 (48.5 GB/s); the link between the two CPU sockets 176Gbps = 22 GB/s.
A transfer's rate is its slowest link's effective rate over the transfers that cross that link at once.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from simulator.topo.collectives import LinkModel, p2p_cost
from simulator.topo.placed_fabric import HierarchyFabric
from simulator.topo.placement import parse_rank_file
from tests.conftest import EXAMPLES, run_cli
from topo import read_topology
from topo.gen import main as topo_gen
from utils.parallel import ParallelConfig

LINKS = LinkModel(nvlink_efficiency=0.824, nic_efficiency=0.97)
MODEL = ["--gpu_type", "H100", "--model_name", "llama3_8B", "--num_layers", "8", "--global_batch", "8",
         "--seq_length", "2048"]
SPACE = ["--world_size", "16", "--tp", "4", "--pp", "4", "--vpp", "1", "--micro_batches", "1", "--recompute", "none",
         "--sequence_parallel", "on", "--distributed_optimizer", "off", "--tp_comm_overlap", "off"]
"""One layout: tp 4, pp 4, dp 1 (both rank orders are the same with dp 1: the search keeps one)."""


def rows_of(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def two_nic_topology(tmp_path: Path, capsys: pytest.CaptureFixture) -> str:
    # 2 servers of 8 GPUs, 2 NICs each (4 GPUs per NIC): NIC 0 on PCIe switch 0 (GPUs 0,1) under socket 0 with switch 1
    # (GPUs 2,3); NIC 1 on switch 2 (GPUs 4,5) under socket 1 with switch 3 (GPUs 6,7); NVLink full (NVSwitch)
    assert topo_gen(["-topo", "Spectrum-X", "-g", "16", "--gpus_per_nic", "4", "--gpus_per_pcie_switch", "2",
                     "-o", f"{tmp_path}{os.sep}"]) == 0
    return capsys.readouterr().out.splitlines()[-1]


def search(tmp_path: Path, topology: str, *extra: str) -> tuple[object, Path]:
    out = tmp_path / "s" / "layouts.csv"
    out.parent.mkdir(exist_ok=True)
    done = run_cli("-m", "simulator", "search", "-t", topology, *MODEL, *SPACE, "--jobs", "1", "-o", str(out), *extra,
                   timeout=600)
    return done, out


def test_search_places_the_best_layout_as_place_does_by_hand(tmp_path, capsys):
    topology = two_nic_topology(tmp_path, capsys)
    done, out = search(tmp_path, topology, "--placement", "search", "--html", str(tmp_path / "s" / "page.html"))
    assert done.returncode == 0, done.stderr
    (row,) = rows_of(out)
    (placed,) = rows_of(tmp_path / "s" / "layouts.placement.csv")
    # the main CSV keeps the default placement's time; the placement CSV starts from it, to the microsecond
    assert placed["default_s"] == row["iteration_s"] and placed["csv_rank"] == "1" and placed["rank"] == "1"
    assert placed["job"] == row["job"] and placed["rank_file"] == "layouts.placement1.txt"
    rank_file = tmp_path / "s" / "layouts.placement1.txt"
    gpus = parse_rank_file(rank_file.read_text(), str(rank_file), 8, 2, 16)

    # python -m simulator place on the same layout: the same default, the same best, the same rank file
    flags = ["--world_size", "16", "--tensor_model_parallel_size", "4", "--pipeline_model_parallel", "4",
             "--micro_batch", "1", "--enable_sequence_parallel"]
    place = run_cli("-m", "simulator", "place", "-t", topology, *MODEL, *flags, "-o", str(tmp_path / "place"), "--json",
                    "-q")
    assert place.returncode == 0, place.stderr
    ref = json.loads(place.stdout.strip().splitlines()[-1])
    assert f"{ref['default_s']:.6f}" == placed["default_s"] and f"{ref['best_s']:.6f}" == placed["placed_s"]
    assert placed["cuda_visible_devices"] == " ".join(map(str, ref["slot_of_local_rank"]))
    assert parse_rank_file(Path(ref["placement"]).read_text(), "place", 8, 2, 16) == gpus

    # By hand.  tp 4 pp 4: stage s on ranks 4s..4s+3; stage 1 on server 0 (local ranks 4-7), stage 2 on server 1
    # (local ranks 0-3); the boundary 1 <-> 2 is the one pipeline transfer between servers, 4 ranks at once.
    # NCCL's p2p with PXN sends by the NIC of the receiver's rail (the NIC its device index uses: slots 0,1 NIC 0 by
    # PIX, slot 2 NIC 0 and slot 3 NIC 1 by PXN, mirrored), through that NIC's first GPU (GPU 0 for NIC 0, 4 for
    # NIC 1) over NVLink; the receiver takes it from its own NIC.
    # Default (rank r on GPU r): forward, slots 4,5,6 -> slots 0,1,2 all go by NIC 0 through GPU 0's PCIe link:
    # 48 / 3 = 16 GB/s; backward, slots 0,1,3 -> slots 4,5,7 by NIC 1 through GPU 4's: 16 GB/s.
    # Placed (local rank i on slot 1,4,0,5,2,3,6,7): forward, slots 2,3,6,7 -> slots 1,4,0,5 (NICs 0,1,0,1): two
    # through GPU 0's link, two through GPU 4's: 48 / 2 = 24 GB/s (the NICs 48.5 / 2); backward, slots 1,4,0,5 -> 2,3,6,7
    # each from its own NIC (one per PCIe link), but slots 3 and 6 receive from their own NIC on the other socket: the
    # socket link, one transfer each way, 22 GB/s.
    assert placed["cuda_visible_devices"] == "1 4 0 5 2 3 6 7" and placed["server_of_node_rank"] == "0 1"
    pconf = ParallelConfig(world_size=16, tp=4, pp=4)
    fabrics = [HierarchyFabric(read_topology(topology), 16).bind(pconf, g, LINKS, pxn=True) for g in (None, gpus)]
    hand = {(None, 4, 8): 16e9, (None, 8, 4): 16e9, ("placed", 4, 8): 24e9, ("placed", 8, 4): 22e9}
    times = {}
    for (which, src, dst), rate in hand.items():
        shape = fabrics[which is not None].p2p_shape(src, dst)
        assert shape.bottleneck_Bps * 0.97 == pytest.approx(rate)
        # one activation (or its gradient) per rank: 2048 tokens x 4096 hidden x 2 B / tp 4 = 4 MiB
        times[(which, src, dst)] = p2p_cost(2048 * 4096 * 2 // 4, False, rate / 0.97, shape.latency_s, LINKS).time_s
    # the critical path crosses the boundary once forward (the first micro-batch) and once backward (the last one):
    # (279.0 - 191.3) + (279.0 - 207.7) = 159.2 us
    gain = sum(times[(None, s, d)] - times[("placed", s, d)] for s, d in ((4, 8), (8, 4)))
    assert gain == pytest.approx(159.175e-6, abs=0.01e-6)
    assert float(placed["gain_s"]) == pytest.approx(gain, abs=1.5e-6)  # the CSV's microseconds
    assert float(placed["default_s"]) - float(placed["placed_s"]) == pytest.approx(gain, abs=2e-6)

    assert "best placed on 16 H100" in done.stdout and "layouts.placement1.txt" in done.stdout
    page = (tmp_path / "s" / "page.html").read_text()
    assert "Placement (--placement search)" in page and "href='layouts.placement1.txt'" in page
    assert f"<td>{placed['placed_s']}</td>" in page and "server0:1\nserver0:4" in page  # the rank file, folded


def test_one_nic_per_gpu_changes_nothing_and_says_so(tmp_path):
    topology = str(EXAMPLES / "topo_Spectrum-X_16g_8gps_400Gbps_H100")
    plain, plain_csv = search(tmp_path, topology)
    assert plain.returncode == 0, plain.stderr
    kept = plain_csv.read_bytes()
    done, out = search(tmp_path, topology, "--placement", "search", "-q")
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == kept  # the CSV is the same, to the byte
    (note,) = [line for line in done.stdout.splitlines() if line.startswith("placement:")]
    assert "every GPU has its own NIC" in note and "placement cannot change an iteration" in note
    assert note.endswith("--placement search skipped")
    assert sorted(os.listdir(out.parent)) == ["layouts.csv"]  # no placement CSV, no rank file
    # and python -m simulator place agrees: its best is the default, to the microsecond
    place = run_cli("-m", "simulator", "place", "-t", topology, *MODEL, "--world_size", "16",
                    "--tensor_model_parallel_size", "4", "--pipeline_model_parallel", "4", "--enable_sequence_parallel",
                    "-o", str(tmp_path / "place"), "--json", "-q")
    ref = json.loads(place.stdout.strip().splitlines()[-1])
    assert ref["best_s"] == ref["default_s"] and f"{ref['default_s']:.6f}" == rows_of(out)[0]["iteration_s"]


@pytest.mark.parametrize("extra, message", [
    (("--placement", "best"), "argument --placement: invalid choice: 'best' (choose from 'default', 'search')"),
    (("--placement_top", "2"), "--placement_top 2: only with --placement search"),
    (("--placement", "search", "--placement_max_evals", "0"), "--placement_max_evals"),
])
def test_bad_placement_flags_are_one_line_exit_2(tmp_path, extra, message):
    topology = str(EXAMPLES / "topo_Spectrum-X_16g_8gps_400Gbps_H100")
    done, out = search(tmp_path, topology, *extra)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("simulator search: error: ") and message in lines[0], done.stderr
    assert not out.exists()


def test_a_rank_file_path_that_is_a_link_is_refused_before_anything_is_written(tmp_path, capsys):
    topology = two_nic_topology(tmp_path, capsys)
    folder = tmp_path / "s"
    folder.mkdir()
    (tmp_path / "elsewhere.txt").write_text("keep me\n")
    os.symlink(tmp_path / "elsewhere.txt", folder / "layouts.placement2.txt")
    done, out = search(tmp_path, topology, "--placement", "search")
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("simulator search: error: --placement search's rank file") and "symbolic link" in line
    assert not out.exists() and (tmp_path / "elsewhere.txt").read_text() == "keep me\n"


def test_rerank_puts_the_fastest_placed_first():
    from simulator.search.placed import Placed, rerank

    # CSV order 1, 2, 3 at 10.0, 10.1, 10.2 s; placed 10.0 (nothing better), 9.8 and 10.0 s: 2 first, then 1 and 3
    # tied at 10.0 s in the CSV's order; a layout that could not be placed goes last
    rows = [Placed({}, 1, 10.0, 10.0), Placed({}, 2, 10.1, 9.8), Placed({}, 3, 10.2, 10.0),
            Placed({}, 4, 10.3, 0.0, skipped="does not fill whole servers")]
    assert [p.csv_rank for p in rerank(rows)] == [2, 1, 3, 4]

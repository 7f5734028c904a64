"""``python -m simulator search``: enumeration, pruning bound, ranked CSV, resume, pictures, bad inputs."""

from __future__ import annotations

import csv

import pytest

from simulator.search.report import pareto_front
from simulator.search.run import HEADER
from simulator.search.space import Layout, Space, build_job, check_space, compute_bound_s, layouts, uneven_split
from tests.conftest import EXAMPLES, run_cli
from utils.cli import model_from, resolve
from utils.errors import ConfigError

TOPO16 = str(EXAMPLES / "topo_Spectrum-X_16g_8gps_400Gbps_H100")
TINY = ("--model_name", "gpt_tiny", "--global_batch", "32", "--seq_length", "128", "--gpu_type", "H100")
SMALL_SPACE = ("--tp", "1,2", "--pp", "1,2", "--micro_batches", "1,2", "--recompute", "none,full")


def rows_of(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_enumeration_by_hand():
    # gpt_tiny (4 layers, 8 heads) on 16 GPUs, global batch 32, with tp in {1, 2}, pp in {1, 2}, micro 1 or 2,
    # one recomputation mode, SP on/off, the distributed optimizer on/off, one rank order:
    # (tp, pp) -> dp: (1,1) 16, (1,2) 8, (2,1) 8, (2,2) 4; every dp divides 32 with micro 1 and 2.
    # chunks: pp 2 stages hold 2 layers: 1 or 2 chunks (m = 32 / (micro dp) must divide by pp: always).
    # SP only with tp 2; the distributed optimizer needs dp > 1 (always here).
    model = model_from(resolve({"model_name": "gpt_tiny"}))
    space = Space(tp=(1, 2), pp=(1, 2), micro_batch=(1, 2), recompute=("none",), order=("tp-cp-ep-dp-pp",))
    found = list(layouts(model, 16, 32, space))
    # per (tp, pp): chunks x micro x SP-choices x dist-opt, where SP on comes with --tp-comm-overlap off or on
    # (Megatron allows the overlap only with SP), so SP-choices = 1 for tp 1 and 1 + 2 = 3 for tp 2:
    # (1,1): 1*2*1*2 = 4, (1,2): 2*2*1*2 = 8, (2,1): 1*2*3*2 = 12, (2,2): 2*2*3*2 = 24 -> 48
    assert len(found) == 48 and len(set(found)) == 48
    assert all(layout.world_size == 16 for layout in found)
    assert all(layout.sequence_parallel for layout in found if layout.tp_comm_overlap)
    off = list(layouts(model, 16, 32, Space(tp=(1, 2), pp=(1, 2), micro_batch=(1, 2), recompute=("none",),
                                            order=("tp-cp-ep-dp-pp",), tp_comm_overlap=(False,))))
    assert len(off) == 36 and not any(layout.tp_comm_overlap for layout in off)


def test_uneven_split_and_layout_flags():
    # Llama 3 405B: 126 layers on 16 stages -> middle stages 8, first and last 7 (its paper's split)
    assert uneven_split(126, 16) == (7, 7)
    assert uneven_split(10, 4) == (2, 2) and uneven_split(5, 2) is None
    layout = Layout(8, 16, 128, 1, 1, 1, "selective", True, True, "tp-cp-ep-pp-dp", 7, 7)
    flags = layout.flags()
    assert "--decoder_first_pipeline_num_layers" in flags and "--use-tp-pp-dp-mapping" in flags
    base = {"model_name": "llama3_405B", "global_batch": 2048, "seq_length": 8192, "gpu_type": "H100"}
    job = build_job(base, layout)
    assert job.parallel.stage_layers(126) == [7] + [8] * 14 + [7] and job.parallel.order == "tp-cp-ep-pp-dp"
    with pytest.raises(ConfigError):  # 7 heads do not split over tp 2
        build_job({"hidden_size": 70, "num_attention_heads": 7, "num_layers": 2, "global_batch": 2},
                  Layout(2, 1, 1, 1, 1, 1, "none", True, False, "tp-cp-ep-dp-pp"))


def test_compute_bound_never_exceeds_the_simulation():
    from simulator.api import simulate
    from simulator.options import TopoOptions

    base = {"model_name": "gpt_tiny", "global_batch": 32, "seq_length": 128, "gpu_type": "H100"}
    for layout in (Layout(2, 2, 4, 1, 1, 1, "none", True, True, "tp-cp-ep-dp-pp"),
                   Layout(1, 2, 8, 1, 2, 2, "full", False, False, "tp-cp-ep-pp-dp")):
        job = build_job(base, layout)
        assert compute_bound_s(job, "H100") <= simulate(job, TOPO16, TopoOptions()).iteration_us / 1e6


def test_pareto_front_by_hand():
    # (gpus, seconds): (8, 4) and (16, 2) and (32, 1.5) are on the front; (16, 3) is beaten by (16, 2), and
    # (32, 2.5) by (16, 2)
    points = [(16, 3.0), (8, 4.0), (32, 2.5), (16, 2.0), (32, 1.5)]
    assert sorted(pareto_front(points)) == [1, 3, 4]


def test_search_writes_a_ranked_csv_and_resumes(tmp_path):
    out = tmp_path / "layouts.csv"
    args = ("-m", "simulator", "search", "-t", TOPO16, "--world_size", "16", *TINY, *SMALL_SPACE, "--jobs", "1",
            "--no_prune", "-o", str(out), "--plot", str(tmp_path / "p.png"), "--html", str(tmp_path / "p.html"))
    done = run_cli(*args, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = rows_of(out)
    assert tuple(rows[0]) == HEADER
    assert list(HEADER[:14]) == ["tp", "pp", "dp", "ep", "vpp", "micro_batch", "recompute", "sequence_parallel",
                                 "distributed_optimizer", "order", "iteration_s", "tokens_per_s_per_gpu", "mfu", "memory_gib"]
    times = [float(r["iteration_s"]) for r in rows]
    assert times == sorted(times) and len(rows) > 20
    # tokens per second per GPU: 32 sequences x 128 tokens / iteration / 16 GPUs
    for r in rows[:3]:
        assert float(r["tokens_per_s_per_gpu"]) == pytest.approx(32 * 128 / float(r["iteration_s"]) / 16, rel=1e-4)
        assert float(r["lower_bound_s"]) <= float(r["iteration_s"])
    assert f"best: tp {rows[0]['tp']} pp {rows[0]['pp']}" in done.stdout
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    assert "<table>" in (tmp_path / "p.html").read_text()
    # an interrupted search keeps its rows: drop half, resume, and the same layouts come back
    kept = len(rows) // 2
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=HEADER)
        writer.writeheader()
        writer.writerows(rows[:kept])
    again = run_cli(*args, "--resume", timeout=600)
    assert again.returncode == 0, again.stderr
    assert f"simulated {len(rows) - kept} layouts ({kept} kept" in again.stdout
    assert sorted(float(r["iteration_s"]) for r in rows_of(out)) == pytest.approx(times)


def test_pruning_skips_layouts_that_cannot_win(tmp_path):
    out = tmp_path / "pruned.csv"
    done = run_cli("-m", "simulator", "search", "-t", TOPO16, "--world_size", "16", *TINY, *SMALL_SPACE, "--jobs", "1",
                   "--top", "3", "-o", str(out), timeout=600)
    assert done.returncode == 0, done.stderr
    line = next(text for text in done.stdout.splitlines() if text.startswith("simulated"))
    simulated, pruned = int(line.split()[1]), int(line.split("pruned ")[1].split()[0])
    assert pruned > 0 and simulated + pruned > 20 and len(rows_of(out)) == simulated


@pytest.mark.parametrize("args, message", [
    (("--world_size", "7", *TINY), "--world_size 7: no layout of the model divides it"),
    (("--world_size", "8", "--model_name", "llama3_405B", "--global_batch", "8", "--gpu_type", "H100"),
     "the model fits no layout on --world_size 8"),
    (("--world_size", "16", *TINY, "--ray", "ray://127.0.0.1:1"), "--ray"),
    (("--world_size", "16", "--model_name", "gpt_tiny"), "the search needs --gpu_type"),
    (("--world_size", "x", *TINY), "--world_size 'x'"),
])
def test_bad_inputs(tmp_path, args, message):
    out = tmp_path / "o.csv"
    done = run_cli("-m", "simulator", "search", "-t", TOPO16, *args, "--jobs", "1", "-q", "-o", str(out), timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("simulator search: error: ") and message in lines[0], done.stderr
    assert not out.exists()  # found before anything is simulated: no CSV, not even its header


def test_topo_gen_takes_its_flags_as_one_argument_with_leading_dash(tmp_path):
    # --topo_gen "-topo Spectrum-X -gps 8" as two argv words: argparse alone would stop at the dash
    out = tmp_path / "gen.csv"
    done = run_cli("-m", "simulator", "search", "--topo_gen", "-topo Spectrum-X -gps 8", "--world_size", "8", *TINY,
                   "--tp", "2", "--pp", "1", "--micro_batches", "1", "--recompute", "none", "--jobs", "1", "-q",
                   "-o", str(out), timeout=600)
    assert done.returncode == 0, done.stderr
    rows = rows_of(out)
    # tp 2 pp 1 dp 4, micro 1, no recomputation: SP off; SP on with the overlap off or on; each with and
    # without the distributed optimizer -> 3 x 2 = 6 layouts, all on 8 GPUs of the generated fabric
    assert len(rows) == 6 and {r["world_size"] for r in rows} == {"8"}
    assert {(r["sequence_parallel"], r["tp_comm_overlap"]) for r in rows} == {("False", "False"), ("True", "False"),
                                                                              ("True", "True")}


def test_switch_flags_narrow_the_space():
    space = check_space({"sequence_parallel": "on", "distributed_optimizer": "off", "tp_comm_overlap": "off"})
    assert (space.sequence_parallel, space.distributed_optimizer, space.tp_comm_overlap) == ((True,), (False,), (False,))
    model = model_from(resolve({"model_name": "gpt_tiny"}))
    found = list(layouts(model, 16, 32, Space(tp=(2,), pp=(1,), micro_batch=(1,), recompute=("none",),
                                              sequence_parallel=(True,), distributed_optimizer=(False,),
                                              tp_comm_overlap=(False,))))
    # tp 2 pp 1 dp 8 micro 1, one of everything else: one layout
    assert len(found) == 1 and found[0].sequence_parallel and not found[0].distributed_optimizer
    with pytest.raises(ConfigError, match="--distributed_optimizer 'maybe' is not one of both, on, off"):
        check_space({"distributed_optimizer": "maybe"})

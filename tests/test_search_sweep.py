"""Hardware sweeps in the search (issue 29): GPU types x GPU counts x topologies, each point pruned on its own
(issue 28, item 14), GPU-hours per trained token, the Pareto front, the page with its job summary, ties within the
model's error and the memory headroom (issue 28, item 16)."""

from __future__ import annotations

import csv

import pytest

from simulator.search.report import html_page, pareto_front, ties
from simulator.search.sweep import Point, gpu_types, pareto_rows
from tests.conftest import EXAMPLES, run_cli
from utils.errors import ConfigError

TOPO16 = str(EXAMPLES / "topo_Spectrum-X_16g_8gps_400Gbps_H100")
TINY = ("--model_name", "gpt_tiny", "--global_batch", "32", "--seq_length", "128")
SMALL = ("--tp", "1,2", "--pp", "1", "--micro_batches", "1", "--recompute", "none", "--sequence_parallel", "off",
         "--orders", "tp-cp-ep-dp-pp")
"""tp 1 or 2, pp 1, micro 1, no recomputation, SP off, one order: 2 x 2 (distributed optimizer) = 4 layouts a point."""


def rows_of(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_gpu_list_names_each_type_once_and_refuses_an_unknown_one():
    assert gpu_types("h100,H200,b200,H100") == ["H100", "H200", "B200"]
    with pytest.raises(ConfigError, match="'X9' is not in the GPU table"):
        gpu_types("H100,X9")


def test_each_world_size_keeps_its_own_best(tmp_path):
    # Llama 3 8B (computation dominates its time) on 8 and 16 GPUs with --top 1: pruning compares layouts of one size
    # only, so both sizes keep rows; before, the 16-GPU layouts' faster times pruned every 8-GPU one
    out = tmp_path / "o.csv"
    done = run_cli("-m", "simulator", "search", "-t", TOPO16, "--world_size", "8,16", "--model_name", "llama3_8B",
                   "--global_batch", "64", "--seq_length", "4096", "--gpu_type", "H100", "--tp", "4,8", "--pp", "1,2",
                   "--micro_batches", "1,2", "--recompute", "none,full", "--sequence_parallel", "on",
                   "--tp_comm_overlap", "off", "--orders", "tp-cp-ep-dp-pp", "--top", "1", "--jobs", "1", "-q",
                   "-o", str(out), "--plot", str(tmp_path / "p.png"), timeout=600)
    assert done.returncode == 0, done.stderr
    rows = rows_of(out)
    assert {r["world_size"] for r in rows} == {"8", "16"}
    best = {size: min(float(r["iteration_s"]) for r in rows if r["world_size"] == size) for size in ("8", "16")}
    assert best["16"] < best["8"]  # the larger size is faster: what pruned the smaller one before
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_a_sweep_of_gpu_types_and_sizes(tmp_path):
    out, page = tmp_path / "sweep.csv", tmp_path / "sweep.html"
    done = run_cli("-m", "simulator", "search", "--topo_gen", "-topo Spectrum-X", "--world_size", "8,16", *TINY,
                   "--gpu_type", "H100,B200", *SMALL, "--no_prune", "--jobs", "1", "-o", str(out), "--html", str(page),
                   timeout=600)
    assert done.returncode == 0, done.stderr
    rows = rows_of(out)
    # 2 GPU types x 2 sizes, 4 layouts each (tp 1 and 2, each with and without the distributed optimizer)
    assert len(rows) == 16
    assert {(r["gpu_type"], r["world_size"]) for r in rows} == {(g, w) for g in ("H100", "B200") for w in ("8", "16")}
    assert {r["topology"] for r in rows} == {"-topo Spectrum-X"}
    for r in rows:
        # GPU-hours per million tokens: GPUs x seconds / 3600 / (32 sequences x 128 tokens) x 10^6 (the CSV's seconds
        # are rounded to the microsecond: a few milliseconds here, so 1e-3 relative)
        expected = int(r["world_size"]) * float(r["iteration_s"]) / 3600 / (32 * 128) * 1e6
        assert float(r["gpu_hours_per_million_tokens"]) == pytest.approx(expected, rel=1e-3)
    # the B200 trains a token in fewer GPU-hours than the H100 at the same size and layout
    best = {(r["gpu_type"], r["world_size"]): min(float(x["gpu_hours_per_million_tokens"]) for x in rows
                                                  if (x["gpu_type"], x["world_size"]) == (r["gpu_type"], r["world_size"]))
            for r in rows}
    assert best[("B200", "8")] < best[("H100", "8")]
    assert "best per sweep point" in done.stdout and "Pareto front" in done.stdout
    text = page.read_text()
    assert "GPU types</dt><dd>H100, B200" in text and text.count("<table>") == 4 and "overflow-x:auto" in text


@pytest.mark.parametrize("args, message", [
    (("--gpu_type", "H100,Z80", "--world_size", "16"), "--gpu_type 'Z80' is not in the GPU table"),
    (("--gpu_type", "H100,H200", "--world_size", "7"), "--world_size 7: no layout of the model divides it"),
])
def test_bad_sweeps_are_one_line(tmp_path, args, message):
    out = tmp_path / "o.csv"
    done = run_cli("-m", "simulator", "search", "-t", TOPO16, *TINY, *args, "--jobs", "1", "-q", "-o", str(out),
                   timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in done.stderr


def test_pareto_front_of_time_against_cost_by_hand():
    # (GPU-h per Mtok, seconds): a (1.0, 9) and c (2.0, 5) and d (4.0, 3) are on the front; b (1.5, 10) is beaten by a
    # on both, e (4.0, 6) by d
    rows = [dict(gpu_hours_per_million_tokens=g, iteration_s=s, name=n)
            for n, g, s in (("a", 1.0, 9), ("b", 1.5, 10), ("c", 2.0, 5), ("d", 4.0, 3), ("e", 4.0, 6))]
    assert [r["name"] for r in pareto_rows(rows)] == ["a", "c", "d"]
    assert sorted(pareto_front([(16, 3.0), (8, 4.0), (32, 2.5), (16, 2.0), (32, 1.5)])) == [1, 3, 4]


def test_ties_within_the_models_error_by_hand():
    # best 10.0 s; 3.6% of it is 0.36 s: 10.3 s is a tie, 10.5 s and 11 s are not
    rows = [dict(iteration_s=t, gpu_type="H100", topology="t", world_size=8) for t in (10.0, 10.3, 10.5, 11.0)]
    note = ties(rows, 0.036)
    assert note is not None and note.startswith("1 other layout is within 3.6% of the best")
    assert ties(rows[:1] + rows[2:], 0.036) is None


def test_the_page_summarises_the_job_and_escapes_what_it_shows():
    from collections import Counter

    from simulator.search.run import Plan

    rows = [dict(tp=2, pp=1, dp=8, ep=1, vpp=1, micro_batch=1, recompute="none", sequence_parallel="False",
                 distributed_optimizer="True", order="tp-cp-ep-dp-pp", tp_comm_overlap="False", iteration_s="1.5",
                 tokens_per_s_per_gpu="1000", mfu="0.41", memory_gib="40.25", gpu_hours_per_million_tokens="0.5",
                 gpu_type="H100", topology="<b>t</b>", world_size="16")]
    plan = Plan([], 10, Counter({"tp does not divide": 3}), 2, None, 4.0)
    page = html_page(rows, b"\x89PNG", plan, [16], ["H100"], {"model_name": "gpt_tiny"}, {"topology": "<b>t</b>"})
    assert "model_name gpt_tiny" in page and "10 enumerated: 3 rejected" in page and "less 4 GiB of headroom" in page
    assert "41.0%" in page and "<b>t</b>" not in page and "&lt;b&gt;t&lt;/b&gt;" in page
    assert "position:sticky" in page and "<div class='wrap'>" in page


def test_memory_headroom_drops_the_layouts_that_would_not_keep_it():
    from simulator.search.run import plan
    from simulator.search.space import check_space

    base = {"model_name": "llama3_8B", "global_batch": 64, "seq_length": 4096}
    space = check_space({"tp": "1,2,4,8", "pp": "1", "micro_batches": "1", "recompute": "none",
                         "sequence_parallel": "off", "orders": "tp-cp-ep-dp-pp", "overlap_param_gather": "off"})
    point = Point("H100", 8, "t", TOPO16, flags={"gpu_type": "H100"})
    free = plan(base, [point], space)
    assert free.candidates
    heaviest = max(c.memory_gib for c in free.candidates)
    # keep enough free that the heaviest layout no longer fits an 80 GiB H100: it and nothing lighter is dropped
    room = 80.0 - heaviest + 0.01
    kept = plan(base, [point], space, headroom_gib=room)
    assert kept.too_big == free.too_big + sum(c.memory_gib > 80.0 - room for c in free.candidates) >= free.too_big + 1
    assert all(c.memory_gib <= 80.0 - room for c in kept.candidates)


def test_points_planned_on_workers_give_the_plan_of_one_process():
    from simulator.search.pool import LocalPool
    from simulator.search.run import plan, plan_points
    from simulator.search.space import check_space

    base = {"model_name": "gpt_tiny", "global_batch": 32, "seq_length": 128}
    space = check_space({"tp": "1,2", "pp": "1,2", "micro_batches": "1,2", "recompute": "none,full"})
    points = [Point(g, w, "t", TOPO16, flags={"gpu_type": g}) for g in ("H100", "B200") for w in (8, 16)]
    alone = plan(base, points, space)
    pool = LocalPool(2)
    try:
        shared = plan_points(base, points, space, 0.0, None, pool)
    finally:
        pool.close()
    assert (shared.enumerated, shared.too_big, shared.rejected) == (alone.enumerated, alone.too_big, alone.rejected)
    assert [(c.layout, c.bound_s, c.memory_gib, c.point.key) for c in shared.candidates] == \
        [(c.layout, c.bound_s, c.memory_gib, c.point.key) for c in alone.candidates]

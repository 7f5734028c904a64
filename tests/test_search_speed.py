"""What makes the search fast must not change its answers (issue 29): the shared memory estimate equals
``estimate_memory``'s, the critical-chain bound never exceeds the simulation, and a pruned search reports the same best
layouts, to the microsecond, as one that simulates every layout.  (Speed itself is measured in bench/bench_search.py.)"""

from __future__ import annotations

import csv

import pytest

from simulator.search.cache import SearchCache
from simulator.search.space import Layout, build_job
from tests.conftest import EXAMPLES, run_cli

TOPO16 = str(EXAMPLES / "topo_Spectrum-X_16g_8gps_400Gbps_H100")
TINY = {"model_name": "gpt_tiny", "global_batch": 32, "seq_length": 128, "gpu_type": "H100"}

LAYOUTS = [  # tp, pp, dp, ep, vpp, micro, recompute, sp, dist-opt, order, first, last, tp overlap, cp, param gather
    Layout(2, 2, 4, 1, 1, 1, "none", True, True, "tp-cp-ep-dp-pp"),
    Layout(1, 2, 8, 1, 2, 2, "full", False, False, "tp-cp-ep-pp-dp"),
    Layout(2, 4, 2, 1, 1, 1, "selective", True, True, "tp-cp-ep-pp-dp", 0, 0, True, 1, True),
    Layout(1, 4, 4, 1, 1, 1, "none", False, True, "tp-cp-ep-dp-pp", 0, 0, False, 1, True),
    Layout(2, 1, 8, 1, 1, 2, "none", True, False, "tp-cp-ep-dp-pp", 0, 0, True),
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: "-".join(map(str, layout.key()[:10])))
def test_bound_and_memory_against_the_simulation(layout):
    from mocked_model.memory import estimate_memory
    from simulator.api import simulate
    from simulator.options import TopoOptions
    from simulator.search.cache import p2p_bytes
    from simulator.search.comm import CommFloor
    from simulator.topo.session import TopoSession
    from workload_generator.megatron import MegatronWorkload

    job = build_job(TINY, layout)
    cache = SearchCache("H100")
    assert cache.memory_estimate(job).summary() == estimate_memory(job, "H100").summary()
    assert cache.memory_estimate(job).fits == estimate_memory(job, "H100").fits
    assert p2p_bytes(job) == MegatronWorkload(job, 0).p2p_bytes
    compute_only = cache.bound_s(job)
    with_comm = cache.bound_s(job, CommFloor(TopoSession(TOPO16), 16))
    simulated = simulate(job, TOPO16, TopoOptions()).iteration_us / 1e6
    assert 0 < compute_only <= with_comm <= simulated
    assert cache.bound_s(job) == compute_only  # priced once, the same answer from the cache


def test_uneven_stages_and_llama_sized_bound_by_hand():
    # Llama 3 405B, tp 8, pp 16 with Megatron's 7-layer first and last stages: the busiest stage is a middle one (8
    # layers), the chain before it is made of the 7-layer first stage and middle stages; the bound is at least the
    # busiest stage's own work (ga x (F + B) of 8 layers) and below the sum over all stages' work
    base = {"model_name": "llama3_405B", "global_batch": 2048, "seq_length": 8192, "gpu_type": "H100",
            "use_flash_attn": True}
    job = build_job(base, Layout(8, 16, 128, 1, 1, 1, "none", True, True, "tp-cp-ep-dp-pp", 7, 7))
    cache = SearchCache("H100")
    from mocked_model.megatron_layers import MegatronContext

    ctx = MegatronContext.of(job)
    f8, b8, *_ = cache.chunk_times(job, ctx, 7, 8, False, False, 0)
    f1, b1, *_ = cache.chunk_times(job, ctx, 7, 1, False, False, 0)
    assert f8 == pytest.approx(8 * f1) and b8 == pytest.approx(8 * b1)  # one layer kind, priced once, 8 times
    ga = job.parallel.ga  # 2048 / (1 x 128) = 16
    assert ga == 16
    bound = cache.bound_s(job)
    assert ga * (f8 + b8) < bound < 16 * ga * (f8 + b8)


def test_a_pruned_search_reports_the_best_layouts_of_a_full_one(tmp_path):
    space = ("--tp", "1,2", "--pp", "1,2,4", "--micro_batches", "1,2", "--recompute", "none,full")
    found = {}
    for name, extra in (("pruned", ()), ("full", ("--no_prune",))):
        out = tmp_path / f"{name}.csv"
        done = run_cli("-m", "simulator", "search", "-t", TOPO16, "--world_size", "16",
                       "--model_name", "gpt_tiny", "--global_batch", "32", "--seq_length", "128", "--gpu_type", "H100",
                       *space, "--top", "5", "--jobs", "1", "-q", "-o", str(out), *extra, timeout=900)
        assert done.returncode == 0, done.stderr
        with open(out, newline="") as f:
            found[name] = list(csv.DictReader(f))
    assert len(found["pruned"]) < len(found["full"])
    key = ("tp", "pp", "dp", "vpp", "micro_batch", "recompute", "sequence_parallel", "distributed_optimizer", "order",
           "tp_comm_overlap", "overlap_param_gather", "iteration_s")
    def best(rows: list[dict]) -> list[tuple]:  # (ties broken by the layout, as both runs may list them either way)
        return sorted((float(r["iteration_s"]), tuple(r[k] for k in key)) for r in rows)[:5]

    assert best(found["pruned"]) == best(found["full"])
    for r in found["full"]:
        assert float(r["lower_bound_s"]) <= float(r["iteration_s"])


def test_reused_scripts_give_the_simulation_of_each_rank_order():
    # the two rank orders of a layout share stage scripts in a search's process: each must still give exactly what
    # simulate() gives it (the order moves the groups and the pipeline's neighbours onto other GPUs)
    from simulator.api import simulate
    from simulator.options import TopoOptions
    from simulator.search.pool import simulate_job
    from simulator.topo.session import TopoSession

    session = TopoSession(TOPO16)
    for layout in (LAYOUTS[1], LAYOUTS[2]):
        orders = ("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp")
        key = ("test", layout.key()[:9] + layout.key()[10:])
        for order in orders + orders:  # the first of each builds the scripts, the others reuse them
            job = build_job(TINY, Layout(**{**layout.__dict__, "order": order}))
            reused = simulate_job(session, job, key)
            alone = simulate(job, TOPO16, TopoOptions())
            assert reused.iteration_us == alone.iteration_us
            assert reused.details.stages == alone.details.stages
            assert reused.memory.summary() == alone.memory.summary()

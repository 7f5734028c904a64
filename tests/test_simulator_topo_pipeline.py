"""``--model topo``: the played pipeline schedule, overlap of gradient buckets, and both inputs
(SimAI files and our Megatron workloads), checked against timelines derived by hand.

Notation: f and b are a stage's forward and backward time per micro-batch, p stages, m
micro-batches, v model chunks per stage.  Megatron's 1F1B with balanced stages and free p2p takes
(m + p - 1)(f + b) and leaves every stage idle (p - 1)(f + b): a bubble of (p - 1)/(m + p - 1) of
the iteration.  The interleaved schedule divides the idle time by v: m(f + b) + (p - 1)(f + b)/v.
"""

from __future__ import annotations

import pytest

from simulator.api import simulate
from simulator.options import TopoOptions
from simulator.topo import engine
from simulator.topo.programs import COMPUTE, Op, Program, StageScript, find_blocks
from utils.config import JobConfig, TrainingConfig
from utils.model_config import ModelConfig
from utils.parallel import ParallelConfig
from workload_generator.megatron import megatron_pipeline
from workload_generator.schedules import pipeline_schedule
from workload_generator.simai import SimAIHeader, SimAILayer, SimAIWorkload

US = 1e-6


def compute_scripts(pp: int, m: int, chunks: int, times: dict[tuple[int, str], float]) -> list[StageScript]:
    """Scripts whose F/B programs are one compute op of ``times[(stage, kind)] / chunks`` seconds."""
    out = []
    for s in range(pp):
        steps = pipeline_schedule(pp, s, m, chunks)
        made: dict[tuple[str, int], Program] = {}
        programs, sizes = [], []
        for st in steps:
            if st.kind == "P2P":
                programs.append(None)
                sizes.append(tuple(0 for _ in st.ops))
                continue
            key = (st.kind, st.chunk)
            if key not in made:
                made[key] = Program(st.kind, [Op(COMPUTE, st.kind, "x", "fwd", times[(s, st.kind)] / chunks * 1e9)])
            programs.append(made[key])
            sizes.append(None)
        out.append(StageScript(s, steps, programs, sizes, Program("STEP")))
    return out


def play(scripts: list[StageScript]) -> engine.EngineResult:
    compiled = [{id(p): engine.compile_program(p, [op.compute_ns * 1e-9 for op in p.ops]) for p in sc.programs if p}
                for sc in scripts]
    return engine.run(scripts, compiled, lambda s, op, size: 0.0, lambda s, op: 0.0, lambda g: range(len(scripts)))


def balanced(pp: int, f: float = 1.0, b: float = 2.0) -> dict[tuple[int, str], float]:
    return {(s, k): (f if k == "F" else b) for s in range(pp) for k in "FB"}


def test_1f1b_four_stages_eight_microbatches_bubble_is_3_of_11():
    # p = 4, m = 8, f = 1, b = 2: iteration (8 + 3) * 3 = 33; each stage computes 8 * 3 = 24 and idles
    # 3 * 3 = 9 = 3/11 of 33.
    result = play(compute_scripts(4, 8, 1, balanced(4)))
    assert result.iteration_s == pytest.approx(33.0)
    for stage in result.stages:
        assert stage.compute_s == pytest.approx(24.0)
        assert engine.bubble_s(stage, result.iteration_s) / result.iteration_s == pytest.approx(3 / 11)


@pytest.mark.parametrize("pp, m, v, expected", [
    (4, 8, 2, 8 * 3 + 3 * 3 / 2),     # 28.5
    (4, 4, 2, 4 * 3 + 3 * 3 / 2),     # 16.5: m == p, every forward in warm-up
    (4, 16, 4, 16 * 3 + 3 * 3 / 4),   # 50.25
])
def test_interleaved_schedule_divides_the_bubble_by_the_chunks(pp, m, v, expected):
    result = play(compute_scripts(pp, m, v, balanced(pp)))
    assert result.iteration_s == pytest.approx(expected)


def test_unbalanced_two_stages_played_step_by_step():
    # Stage 0: F = 3, B = 6; stage 1: F = 4, B = 8; m = 2, free p2p.  Megatron's steps:
    #   stage 0: F0 | send | F1 | send, recv grad | B0 | recv grad | B1
    #   stage 1: recv | F0 | B0 | send grad, recv | F1 | B1 | send grad
    # stage 1: F0 [3, 7], B0 [7, 15] (grad 0 at 15), act 1 arrived at 6 -> F1 [15, 19], B1 [19, 27];
    # stage 0: F0 [0, 3], F1 [3, 6], B0 waits for grad 0: [15, 21], B1 waits for grad 1: [27, 33].
    # Iteration 33; stage 0 computes 18 (bubble 15), stage 1 computes 24 (bubble 9: 6 idle before
    # finishing at 27, and 33 - 27 after).
    times = {(0, "F"): 3.0, (0, "B"): 6.0, (1, "F"): 4.0, (1, "B"): 8.0}
    result = play(compute_scripts(2, 2, 1, times))
    assert result.iteration_s == pytest.approx(33.0)
    assert [t.end_s for t in result.stages] == pytest.approx([33.0, 27.0])
    assert [engine.bubble_s(t, 33.0) for t in result.stages] == pytest.approx([15.0, 9.0])


def simai_file(records: list[SimAILayer], tp=1, pp=1, ga=1, gpus=None, pp_comm=0, ep=1) -> SimAIWorkload:
    gpus = gpus or tp * pp
    header = SimAIHeader.transformer(tp=tp, ep=ep, pp=pp, vpp=1, ga=ga, all_gpus=gpus, pp_comm=pp_comm)
    return SimAIWorkload(header, records, path="synthetic.txt")


def rec(name, fwd_ns=0, ig_ns=0, wg_ns=0, fwd=("NONE", 0), ig=("NONE", 0), wg=("NONE", 0)) -> SimAILayer:
    return SimAILayer(name, -1, fwd_ns, fwd[0], fwd[1], ig_ns, ig[0], ig[1], wg_ns, wg[0], wg[1], 100)


def test_simai_file_1f1b_bubble_is_3_of_11():
    # A SimAI file with pp 4, ga 8 (one record per micro-batch: fwd 1 us, ig 2 us), pp_comm 0: the
    # played 1F1B gives 33 us with 9 us of bubble on every stage, and EndToEnd reports the same.
    workload = simai_file([rec("embedding_layer", 1000, 2000)] * 8, pp=4, ga=8)
    result = simulate(workload, None, TopoOptions(gpus_per_server=4))
    assert result.iteration_us == pytest.approx(33.0)
    assert result.totals.bubble_us == pytest.approx(9.0)
    assert result.totals.bubble_us / result.totals.total_us == pytest.approx(3 / 11)
    assert [st.bubble_us for st in result.details.stages] == pytest.approx([9.0] * 4)


def test_simai_gradient_buckets_overlap_with_the_remaining_backward():
    # One stage, two GPUs on one server (dp 2), NVLink 100 GiB/s busbw, no latency: an all-reduce of
    # 2^21 bytes over 2 ranks takes 2(n-1)/n * 2^21 / (100 * 2^30) = 19.53125 us.
    # Records: L0 and L1, each fwd 5 us, ig 10 us, wg ALLREDUCE 2^21 (a DP bucket).  Forward [0, 10];
    # backward in reverse: L1 ig [10, 20] -> its bucket ready at 20, runs [20, 39.53125]; L0 ig [20, 30]
    # -> bucket ready at 30, queued behind the first: [39.53125, 59.0625].  The step waits for it:
    # iteration 59.0625 us, DP exposed 29.0625 us.  Without overlap both run after the backward:
    # 30 + 2 * 19.53125 = 69.0625 us, DP exposed 39.0625 us.
    records = [rec(f"L{i}", 5000, 10000, wg=("ALLREDUCE", 2**21)) for i in range(2)]
    workload = simai_file(records, gpus=2)
    options = dict(gpus_per_server=2, nvlink_bw=100.0, latency_scale=0.0)
    on = simulate(workload, None, TopoOptions(overlap_grad_reduce=True, **options))
    off = simulate(workload, None, TopoOptions(overlap_grad_reduce=False, **options))
    assert on.iteration_us == pytest.approx(59.0625)
    assert on.totals.dp_exposed_us == pytest.approx(29.0625)
    assert off.iteration_us == pytest.approx(69.0625)
    assert off.totals.dp_exposed_us == pytest.approx(39.0625)
    # EndToEnd rows: the backward ends at 30 us, so L1's bucket [20, 39.53125] is exposed for its last
    # 9.53125 us and L0's [39.53125, 59.0625] for all 19.53125 us (whole ns).
    assert [layer.wg_exposed_ns for layer in on.layers] == [19531, 9531]
    assert [layer.wg.time_ns for layer in on.layers] == [19531, 19531]


def test_find_blocks():
    names = ["grad", "embedding_layer", "a", "b", "embedding_layer", "a", "b", "loss"]
    assert find_blocks(names, 2) == (1, 3)
    assert find_blocks(["x", "y", "x", "y"], 2) == (0, 2)
    assert find_blocks(["x", "y", "z"], 2) is None
    assert find_blocks(["grad", "embedding_layer", "a"], 1) == (1, 2)


def test_simai_file_without_blocks_runs_each_microbatch_at_1_over_ga():
    # Records that do not repeat ga = 2 times: each micro-batch runs the whole file at half its times:
    # f = (4 + 2) / 2 = 3 us, b = 6 / 2 = 3 us; pp 1: iteration 2 * 6 = 12 us, as the file's total.
    workload = simai_file([rec("a", 4000, 6000), rec("b", 2000)], ga=2)
    result = simulate(workload, None, TopoOptions(gpus_per_server=1))
    assert result.iteration_us == pytest.approx(12.0)
    assert any("do not repeat" in w for w in result.warnings)


# ---- our Megatron workloads --------------------------------------------------------------------

TINY = ModelConfig(name="tiny", hidden_size=64, num_layers=2, num_attention_heads=4, ffn_hidden_size=256,
                   vocab_size=256, max_position_embeddings=32)


def tiny_job(world=2, tp=1, pp=2, global_batch=2, **training) -> JobConfig:
    parallel = ParallelConfig(world_size=world, tp=tp, pp=pp, micro_batch=1, global_batch=global_batch)
    return JobConfig(TINY, parallel, TrainingConfig(seq_length=32, computation_enable=True, **training))


def one_us(item) -> float:
    return 1000.0  # every computation item takes 1 us


def test_megatron_workload_unbalanced_stages():
    # tp 1, pp 2, 2 micro-batches, each computation item 1 us, p2p of 32*64*2 = 4096 bytes over a
    # 1e6 GiB/s NVLink with no latency (free).  Stage programs from megatron_pipeline: count the items.
    job = tiny_job()
    workloads = megatron_pipeline(job)
    counts = []
    for w in workloads:
        items = w.iterations()[1]
        fwd = sum(1 for i in items if i.is_computation and i.stage.startswith("forward")) // 2
        bwd = sum(1 for i in items if i.is_computation and i.stage.startswith(("backward", "recompute"))) // 2
        counts.append((fwd, bwd))
    (f0, b0), (f1, b1) = counts
    # The first stage has the embedding, the last the final norm, output layer and loss.
    assert (f0, b0) != (f1, b1)
    # The two-stage timeline of test_unbalanced_two_stages_played_step_by_step, symbolically:
    g0 = f0 + f1 + b1                      # stage 1's first gradient leaves
    start_f1 = max(g0, 2 * f0)             # stage 1's second forward
    g1 = start_f1 + f1 + b1
    b0_start = max(2 * f0, g0)
    # after the schedule, both stages meet at the gradient-norm all-reduce (free here) and run their
    # optimizer step, one more computation item: 1 us
    expected_us = max(b0_start + b0, g1) + b0 + 1
    options = TopoOptions(gpus_per_server=2, nvlink_bw=1e6, latency_scale=0.0, compute_time_ns=one_us)
    result = simulate(workloads, None, options)
    assert result.iteration_us == pytest.approx(expected_us, abs=1e-3)
    # Every stage's terms add up to the iteration.
    for st in result.details.stages:
        total = st.compute_us + st.exposed_comm_us + st.pp_exposed_us + st.bubble_us
        assert total == pytest.approx(result.iteration_us)
    assert result.details.stages[0].compute_us == pytest.approx(2 * (f0 + b0) + 1)  # + the optimizer step
    # The same job given as a JobConfig generates the same workloads.
    assert simulate(job, None, options).iteration_us == pytest.approx(result.iteration_us)


def test_megatron_overlap_grad_reduce_hides_bucket_time():
    # dp 2 on one server, one stage: with --overlap_grad_reduce the buckets of the last backward run
    # beside the rest of it; without, they run after it.  The time hidden is the DP comm time minus
    # what stays exposed, and the iteration shrinks by exactly that much.
    job = tiny_job(world=2, pp=1, global_batch=4, ddp_bucket_size=4096)
    options = dict(gpus_per_server=2, latency_scale=0.0, compute_time_ns=one_us)
    off = simulate(job, None, TopoOptions(overlap_grad_reduce=False, **options))
    on = simulate(job, None, TopoOptions(overlap_grad_reduce=True, **options))
    dp_off, dp_on = off.details.stages[0], on.details.stages[0]
    assert dp_off.dp_exposed_us == pytest.approx(dp_off.dp_comm_us)
    assert dp_on.dp_comm_us == pytest.approx(dp_off.dp_comm_us)
    assert dp_on.dp_exposed_us < dp_off.dp_exposed_us
    hidden = dp_off.dp_exposed_us - dp_on.dp_exposed_us
    assert off.iteration_us - on.iteration_us == pytest.approx(hidden)


def test_missing_compute_times_cost_zero_with_a_warning():
    # workloads generated without times: their computation costs 0, with a warning
    result = simulate(megatron_pipeline(tiny_job()), None, TopoOptions(gpus_per_server=2))
    assert result.details.stages[0].compute_us == 0.0
    assert any("computation items have no time" in w for w in result.warnings)
    assert result.details.mfu is None
    # a job with no source of times at all (no --gpu_type, file or AIOB) is refused
    from utils.errors import ConfigError

    with pytest.raises(ConfigError, match="simulating a job needs computation times: give --gpu_type"):
        simulate(tiny_job(), None, TopoOptions(gpus_per_server=2))


def test_cross_stage_step_collectives_wait_for_every_stage():
    # The gradient-norm all-reduce spans both stages (mp_group): both stages finish together, however
    # unbalanced, and the faster one books the wait as bubble.
    result = simulate(tiny_job(), None, TopoOptions(gpus_per_server=2, compute_time_ns=one_us))
    ends = [st.end_us for st in result.details.stages]
    assert ends[0] == pytest.approx(ends[1])
    assert result.details.mfu is None  # no peak without a GPU type
    with_peak = simulate(tiny_job(), None, TopoOptions(gpus_per_server=2, compute_time_ns=one_us, peak_tflops=1.0))
    # MFU = model FLOPs of both stages (per rank, one rank per stage) / (iteration * 2 GPUs * 1e12).
    flops = sum(st.flops for st in with_peak.details.stages)
    assert with_peak.details.mfu == pytest.approx(flops / (with_peak.iteration_us * 1e-6 * 2 * 1e12))


def test_tp_comm_overlap_and_overlappable_items():
    # tp 2, dp 2 on one server, distributed optimizer, every computation item 1 us: with --tp_comm_overlap the TP collectives run
    # beside the compute, so less of their time is exposed, and the iteration shrinks by exactly the
    # exposed time saved (nothing else changes).
    parallel = ParallelConfig(world_size=4, tp=2, pp=1, micro_batch=1, global_batch=2)
    job = JobConfig(TINY, parallel, TrainingConfig(seq_length=32, computation_enable=True, use_distributed_optimizer=True))
    options = dict(gpus_per_server=4, compute_time_ns=one_us)
    off = simulate(job, None, TopoOptions(**options))
    on = simulate(job, None, TopoOptions(tp_comm_overlap=True, **options))
    s_off, s_on = off.details.stages[0], on.details.stages[0]
    assert s_on.tp_comm_us == pytest.approx(s_off.tp_comm_us)
    assert s_on.tp_exposed_us < s_off.tp_exposed_us
    assert off.iteration_us - on.iteration_us == pytest.approx(s_off.tp_exposed_us - s_on.tp_exposed_us)
    # A step collective marked overlappable (the distributed optimizer's parameter all-gather with
    # --overlap_param_gather) is counted but not waited for: DP exposed drops by its time.
    workloads = megatron_pipeline(job)
    gathers = [i for i in workloads[0].iterations()[1] if i.stage == "step.param_all_gather"]
    assert gathers
    base = simulate(workloads, None, TopoOptions(**options))
    for item in gathers:
        item.meta = {**(item.meta or {}), "overlappable": True}
    hidden = simulate(workloads, None, TopoOptions(**options))
    ag_us = sum(c.total_us for c in base.details.collectives if c.comm_type == "all_gather" and c.group == "dp_group")
    assert base.details.stages[0].dp_exposed_us - hidden.details.stages[0].dp_exposed_us == pytest.approx(ag_us)
    assert base.iteration_us - hidden.iteration_us == pytest.approx(ag_us)

"""``--model topo`` simulates repeated work once: stages with the same workload share one generator and
its programs, SimAI micro-batch blocks alike record for record share one program pair, the 1F1B steady
state is played until a cycle repeats and then extrapolated, and a session keeps the per-topology work.
Every test compares with the run that does none of it (to the microsecond, or exactly where nothing is
extrapolated), on cases checked by hand and on real jobs.
"""

from __future__ import annotations

import functools
import re
from dataclasses import replace

import pytest

import simulator.topo.model as topo_model
import simulator.topo.programs as programs
from simulator.api import TopoSession, simulate
from simulator.options import TopoOptions
from simulator.result import layer_rows
from simulator.topo import engine
from tests.conftest import EXAMPLES
from tests.test_simulator_topo_pipeline import balanced, compute_scripts, play
from utils.config import JobConfig, TrainingConfig
from utils.parallel import ParallelConfig
from utils.presets import get_preset
from workload_generator.entry import generator_for
from workload_generator.megatron import MegatronWorkload
from workload_generator.simai import SimAIWorkload

TOPO16 = str(EXAMPLES / "topo_Spectrum-X_16g_8gps_400Gbps_H100")
US = 1e-3  # "identical to the microsecond": every compared time within a nanosecond, in us


def job(model="gpt_tiny", world=16, tp=2, pp=4, gbs=32, seq=128, first=None, last=None, vpp=None, **training) -> JobConfig:
    parallel = ParallelConfig(world_size=world, tp=tp, pp=pp, sequence_parallel=tp > 1, micro_batch=1, global_batch=gbs,
                              first_stage_layers=first, last_stage_layers=last, virtual_stages=vpp)
    defaults = dict(seq_length=seq, computation_enable=True, use_distributed_optimizer=True, gpu_type="H100")
    return JobConfig(get_preset(model), parallel, TrainingConfig(**{**defaults, **training}))


def assert_same(a, b, tol=US):
    """Two topo results equal to ``tol`` us in every time (counts, names and shapes exactly)."""
    assert a.iteration_us == pytest.approx(b.iteration_us, abs=tol)
    for x, y in zip(a.details.stages, b.details.stages):
        for name, value in vars(x).items():
            assert value == pytest.approx(getattr(y, name), abs=tol), name
    assert len(a.details.layer_times) == len(b.details.layer_times)
    for x, y in zip(a.details.layer_times, b.details.layer_times):
        assert (x.stage, x.layer) == (y.stage, y.layer)
        assert [x.fwd_compute_us, x.bwd_compute_us, x.comm_us, x.exposed_comm_us] == pytest.approx(
            [y.fwd_compute_us, y.bwd_compute_us, y.comm_us, y.exposed_comm_us], abs=tol)
    key = lambda c: (c.group, c.comm_type, c.size_bytes, c.tier, c.count, c.stages)  # noqa: E731
    assert sorted(map(key, a.details.collectives)) == sorted(map(key, b.details.collectives))
    rows_a, rows_b = layer_rows(a), layer_rows(b)
    assert len(rows_a) == len(rows_b)
    for x, y in zip(rows_a, rows_b):
        assert [v for v in x if not isinstance(v, float)] == [v for v in y if not isinstance(v, float)]
        assert [v for v in x if isinstance(v, float)] == pytest.approx([v for v in y if isinstance(v, float)],
                                                                        abs=tol, nan_ok=True)


@pytest.fixture
def unrolled(monkeypatch):
    """Simulate with every repetition played out: a generator per stage, a program pair per SimAI
    micro-batch, every schedule step played."""
    def run(*args, **kwargs):
        with monkeypatch.context() as patch:
            patch.setattr(topo_model, "stage_generators", lambda job, make: [make(job, s) for s in range(job.parallel.pp)])
            patch.setattr(programs, "repeat_segments", lambda seq, times, names=None: [(0, len(seq), 1)])
            patch.setattr(engine, "run", functools.partial(engine.run, extrapolate=False))
            patch.setattr(topo_model, "SHORT_CYCLES", 10**9)  # build every micro-batch of a job
            return simulate(*args, **kwargs)
    return run


# ---- stages that share a generator ------------------------------------------------------------

def _normal(item, offsets):
    """An item with its layer numbers made chunk-relative and its p2p peers dropped."""
    def renumber(text):
        return re.sub(r"layers\.(\d+)", lambda m: f"layers.{_relative(int(m.group(1)), offsets)}", text or "")

    meta = dict(item.meta or {})
    if meta.get("layer") is not None:
        meta["layer"] = _relative(meta["layer"], offsets)
    if "name" in meta:
        meta["name"] = renumber(meta["name"])
    return (item.comm_type, item.comm_group, item.comm_group_size, item.msg_size, renumber(item.stage),
            item.additional, item.shapes, item.flops, tuple(sorted((k, repr(v)) for k, v in meta.items())))


def _relative(layer, offsets):
    chunk = max(c for c, (first, _) in enumerate(offsets) if layer >= first)
    return (chunk, layer - offsets[chunk][0])


@pytest.mark.parametrize("the_job", [
    job(pp=4),
    job(model="llama3_8B", world=16, tp=2, pp=4, gbs=16, vpp=2, overlap_grad_reduce=True),
    job(model="llama3_8B", world=64, tp=4, pp=8, gbs=64, first=1, last=1, overlap_grad_reduce=True, use_flash_attn=True),
    job(model="gpt_tiny", world=16, tp=2, pp=4, recompute="full"),
    job(model="mixtral_8x7B", world=64, tp=2, pp=4, gbs=32, seq=256),
    job(model="deepseek_v2_lite", world=64, tp=1, pp=4, gbs=32, seq=256, first=6, frame="DeepSeek"),
])
def test_stages_with_one_signature_generate_the_same_items(the_job):
    # the promise stage_signature makes: equal signatures, equal items up to layer numbers and p2p peers
    p = the_job.parallel
    gens = [MegatronWorkload(the_job, pp_rank=s) for s in range(p.pp)]
    signatures = [MegatronWorkload.stage_signature(the_job, s) for s in range(p.pp)]
    for s in range(p.pp):
        for r in range(s + 1, p.pp):
            if signatures[s] != signatures[r]:
                continue
            a, b = gens[s], gens[r]
            steps = {a.step_key(st): st for st in a.schedule() + b.schedule()}
            for st in steps.values():
                assert [_normal(i, a.layer_ranges()) for i in a.step_items(st)] == \
                       [_normal(i, b.layer_ranges()) for i in b.step_items(st)], (s, r, st)
            rest_a, rest_b = [], []
            a.step(rest_a)
            b.step(rest_b)
            assert [_normal(i, a.layer_ranges()) for i in rest_a] == [_normal(i, b.layer_ranges()) for i in rest_b]
    assert len(set(signatures)) < p.pp  # some stages share (the middle ones)


def test_middle_stages_share_one_generator():
    the_job = job(model="llama3_8B", world=64, tp=4, pp=8, gbs=64, first=1, last=1)
    gens = topo_model.stage_generators(the_job, generator_for)
    assert len({id(g) for g in gens}) == 3  # first, middle (6 stages), last
    assert all(g is gens[1] for g in gens[1:7])


@pytest.mark.parametrize("the_job", [
    job(model="llama3_8B", world=64, tp=4, pp=8, gbs=64, first=1, last=1, overlap_grad_reduce=True, use_flash_attn=True),
    job(model="gpt_tiny", world=16, tp=2, pp=2, gbs=16, vpp=2, overlap_grad_reduce=True),
    job(model="mixtral_8x7B", world=64, tp=2, pp=4, gbs=32, seq=256),
])
def test_shared_stages_give_the_unrolled_results(the_job, unrolled):
    topology = TOPO16 if the_job.parallel.world_size <= 16 else None
    options = TopoOptions() if topology else TopoOptions(gpus_per_server=8)
    shared, alone = simulate(the_job, topology, options), unrolled(the_job, topology, options)
    assert_same(shared, alone)
    # the trace names every stage's own layers
    names = {(i.stage, i.layer) for i in shared.details.intervals()}
    assert names == {(i.stage, i.layer) for i in alone.details.intervals()}


# ---- the steady state extrapolated -------------------------------------------------------------

def test_steady_state_by_hand():
    # 4 stages, 40 micro-batches, f = 1, b = 2, free p2p: (m + p - 1)(f + b) = 43 * 3 = 129, each stage
    # computes 40 * 3 = 120 and idles 9.  Stage 0 has 40 - 4 = 36 steady cycles (F, p2p, B: 3 time
    # units); the engine plays to the start of cycle 0, plays cycle 0, sees it move every stage by 3,
    # adds cycles 1 .. 34 (34 of them) and plays cycle 35 and the cool-down.
    scripts = compute_scripts(4, 40, 1, balanced(4))
    fast, slow = play(scripts), _play_unrolled(scripts)
    assert fast.iteration_s == slow.iteration_s == pytest.approx(129.0)
    for x, y in zip(fast.stages, slow.stages):
        assert x.repeat is not None and x.repeat.period_s == pytest.approx(3.0) and x.repeat.times == 34
        assert (x.compute_s, x.end_s, engine.bubble_s(x, 129.0)) == pytest.approx((120.0, y.end_s, 9.0))
        # every step where the unrolled play has it: start, step index, micro-batch, chunk
        assert [v for run in x.all_runs() for v in run] == pytest.approx([v for run in y.runs for v in run])
        assert len(x.runs) < len(y.runs) // 5


def test_unbalanced_steady_state_and_interleaving():
    # unbalanced stages: the slowest stage sets the period (F 1 + B 3 on stage 2: 4)
    times = {(s, k): (1.0 if k == "F" else 2.0) for s in range(4) for k in "FB"}
    times[(2, "B")] = 3.0
    scripts = compute_scripts(4, 64, 1, times)
    fast, slow = play(scripts), _play_unrolled(scripts)
    assert fast.stages[0].repeat.period_s == pytest.approx(4.0)
    assert fast.iteration_s == pytest.approx(slow.iteration_s, abs=1e-9)
    assert [t.end_s for t in fast.stages] == pytest.approx([t.end_s for t in slow.stages], abs=1e-9)
    # interleaved schedules are played step by step
    interleaved = play(compute_scripts(4, 16, 2, balanced(4)))
    assert all(t.repeat is None for t in interleaved.stages)


def _play_unrolled(scripts):
    compiled = [{id(p): engine.compile_program(p, [op.compute_ns * 1e-9 for op in p.ops]) for p in sc.programs if p}
                for sc in scripts]
    return engine.run(scripts, compiled, lambda s, op, size: 0.0, lambda s, op: 0.0, lambda g: range(len(scripts)),
                      extrapolate=False)


def test_a_real_job_at_ga_128_extrapolated_and_unrolled(unrolled, monkeypatch):
    # Llama 3 8B, tp 4 pp 8, 128 micro-batches, gradient buckets overlapped, on the derived fabric: the
    # schedules are built with 8 + 6 micro-batches and the engine inserts the other 114 cycles
    the_job = job(model="llama3_8B", world=64, tp=4, pp=8, gbs=256, first=1, last=1, overlap_grad_reduce=True,
                  use_flash_attn=True, seq=2048)
    options = TopoOptions(gpus_per_server=8)
    played = []
    monkeypatch.setattr(engine, "run", lambda *a, run=engine.run, **k: played.append(run(*a, **k)) or played[-1])
    fast = simulate(the_job, None, options)
    assert played[-1].inserted and all(t.repeat.times == 128 - 14 for t in played[-1].stages)
    assert len(fast.details.intervals()) == len(unrolled(the_job, None, options).details.intervals())
    monkeypatch.undo()
    slow = unrolled(the_job, None, options)
    assert_same(fast, slow)
    assert fast.setup["ga"] == slow.setup["ga"] == 128
    assert [s.flops for s in fast.details.stages] == pytest.approx([s.flops for s in slow.details.stages])
    # without shortening (trace-like full schedules), skipping inside the schedule gives the same
    monkeypatch.setattr(topo_model, "SHORT_CYCLES", 10**9)
    assert_same(simulate(the_job, None, options), slow)


def test_simai_file_blocks_and_steady_state(unrolled):
    # SimAI's example (24 micro-batch blocks, 23 of them alike) on a two-tier fabric, and the same file
    # unrolled to 96 micro-batches: shared block programs, per-micro-batch gradient buckets, extrapolation
    workload = SimAIWorkload.read(EXAMPLES / "simai_workload_analytical.txt", strict=False)
    options = TopoOptions(gpus=9216, gpus_per_server=8)
    assert_same(simulate(workload, None, options), unrolled(workload, None, options))
    head, first, block, tail = (workload.records[:6], workload.records[6:80], workload.records[80:154],
                                workload.records[1782:])
    workload.header.ga = 96
    big = SimAIWorkload(workload.header, head + first + block * 95 + tail, path="ga96.txt")
    fast, slow = simulate(big, None, options), unrolled(big, None, options)
    assert_same(fast, slow)
    assert [layer.index for layer in fast.layers] == list(range(len(big.records)))


# ---- sessions -----------------------------------------------------------------------------------

def test_a_session_gives_what_simulate_gives():
    session = TopoSession(TOPO16)
    jobs = [job(pp=4), job(pp=2, gbs=16), replace(job(pp=4), training=replace(job(pp=4).training, overlap_grad_reduce=True)),
            job(tp=4, pp=2, gbs=16)]
    for the_job in jobs * 2:  # twice: the second round runs on warm caches
        options = TopoOptions(tp_comm_overlap=the_job.parallel.tp == 4)
        assert_same(session.simulate(the_job, options), simulate(the_job, TOPO16, options), tol=0.0)
    assert "fabric" in repr(session)
    session.clear()
    assert session.simulate(jobs[0]).iteration_us == simulate(jobs[0], TOPO16).iteration_us
    with pytest.raises(TypeError):
        session.simulate(jobs[0], object())

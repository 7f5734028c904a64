"""Bubble filling (``--fill_bubbles``, simulator/topo/bubble_fill.py): a bubble filled by an optimizer step, by hand.

Two stages, two micro-batches, forward 1 s and backward 2 s on each stage, free p2p (Megatron's 1F1B):
stage 1 runs F1 [1,2] B1 [2,4] F2 [4,5] B2 [5,7]; stage 0 runs F1 [0,1] F2 [1,2] B1 [4,6] B2 [7,9].  The last backward
ends at 9 (the drain).  The step: the gradient-norm all-reduce over both stages (0.5 s), then the optimizer step
(stage 0: 1 s, stage 1: 1.5 s).

Without filling both stages meet at the all-reduce at 9 (stage 1 idles [7,9]), run it [9,9.5] and step: stage 0 ends at
10.5, stage 1 at 11, the iteration.  With filling stage 1 steps at once [7,8.5], inside its wait, and the all-reduce
validates the step beside what follows; stage 0 steps [9,10]: the iteration is 10.
"""

from __future__ import annotations

import pytest

from simulator.topo import engine
from simulator.topo.bubble_fill import fill_report, fill_scripts, is_validation
from simulator.topo.programs import ASYNC, COMPUTE, SYNC, Op, Program, StageScript
from workload_generator.schedules import pipeline_schedule

F, B, NORM = 1.0, 2.0, 0.5
OPTIMIZER = {0: 1.0, 1: 1.5}


def scripts() -> list[StageScript]:
    out = []
    for s in range(2):
        steps = pipeline_schedule(2, s, 2, 1)
        programs, sizes = [], []
        made: dict[str, Program] = {}
        for st in steps:
            if st.kind == "P2P":
                programs.append(None)
                sizes.append(tuple(0 for _ in st.ops))
                continue
            made.setdefault(st.kind, Program(st.kind, [Op(COMPUTE, st.kind, "x", "fwd", (F if st.kind == "F" else B) * 1e9)]))
            programs.append(made[st.kind])
            sizes.append(None)
        step = Program("STEP", [Op(SYNC, "all_reduce all_nodes step.clip_grad_norm", "step", "step", 0.0, "all_reduce",
                                   "all_nodes", 4),
                                Op(COMPUTE, "step.optimizer", "optimizer", "step", OPTIMIZER[s] * 1e9)])
        out.append(StageScript(s, steps, programs, sizes, step))
    return out


def play(script_list: list[StageScript]) -> engine.EngineResult:
    compiled = [{id(p): engine.compile_program(p, [op.compute_ns * 1e-9 for op in p.ops]) for p in sc.programs if p}
                for sc in script_list]

    def step_time(stage: int, op: Op) -> float:
        return op.compute_ns * 1e-9 if op.kind == COMPUTE else NORM

    return engine.run(script_list, compiled, lambda s, op, size: 0.0, step_time, lambda group: range(2))


def test_a_bubble_filled_by_an_optimizer_step():
    plain = scripts()
    filled = fill_scripts(plain)
    assert [op.kind for op in filled[1].step_program.ops] == [COMPUTE, ASYNC] and is_validation(plain[1].step_program.ops[0])
    before, after = play(plain), play(filled)
    assert before.iteration_s == pytest.approx(11.0) and after.iteration_s == pytest.approx(10.0)
    rows = fill_report(before, after)
    # stage 1: idle [0,1] and [7,9] before the drain = 3 s; the 1.5 s optimizer step moves into [7,8.5]: 1.5 s left;
    # after the drain it idled 0 s before (the all-reduce and its step ran [9,11]) and 1 s after ([9,10])
    one = rows[1]
    assert (one.bubble_before_us, one.bubble_after_us, one.filled_us) == pytest.approx((3e6, 1.5e6, 1.5e6))
    assert (one.tail_before_us, one.tail_after_us) == pytest.approx((0.0, 1e6))
    assert (one.step_start_before_us, one.step_start_after_us) == pytest.approx((9.5e6, 7e6))
    assert (one.done_before_us, one.done_after_us) == pytest.approx((11e6, 8.5e6))
    # stage 0: idle [2,4] and [6,7] = 3 s before the drain either way; after it 0.5 s idle at the end before ([10.5, 11])
    zero = rows[0]
    assert (zero.bubble_before_us, zero.bubble_after_us, zero.filled_us) == pytest.approx((3e6, 3e6, 0.0))
    assert (zero.tail_before_us, zero.tail_after_us) == pytest.approx((0.5e6, 0.0))

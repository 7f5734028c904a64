"""Bubble filling (``--fill_bubbles``): each pipeline stage runs the step work that needs no other stage as soon as its
own backward and gradient reduction are done, inside the time it would otherwise wait for the last stage.

Megatron's step (:meth:`workload_generator.megatron.MegatronWorkload.step`) is, on every stage: wait for the gradient
buckets, the sequence-parallel layer-norm all-reduce (TP, inside the stage), the tied-embedding all-reduce (first and
last stage), the gradient-norm all-reduce over every stage (and fp16's overflow check), the optimizer step, the
distributed optimizer's parameter all-gather (DP, inside the stage).  The all-reduce over every stage makes each stage
wait for the slowest, the first, whose last backward ends ``pp - 1`` backward passes after the last stage's: every
other stage idles there with its optimizer step and parameter all-gather still to do.

With filling, as Zero Bubble Pipeline Parallelism does (Qi et al., ICLR 2024, arXiv:2401.10241, section 4,
"Bypassing optimizer synchronizations"), a stage steps with its own gradients at once and the gradient-norm (and
overflow) all-reduce validates the step afterwards, off the critical path (a step whose global norm would have been
clipped, or that overflowed, is rolled back and redone: rare, and not modelled).  So:

* the ops of the step keep their order, except the all-reduces over every stage that only check the gradients
  (``clip_grad_norm``, ``_unscale_main_grads_and_check_for_nan``): they move to the end and no longer hold the stage
  (they run beside what follows, as an overlapped collective);
* what a step needs from another stage stays where it is: the tied-embedding all-reduce still waits for both ends;
* the next iteration's parameter all-gather (the distributed optimizer's, without ``--overlap_param_gather``) thus runs
  right after the stage's own step, inside its bubble;
* gradient compression: our workloads carry none, so there is none to move.

:func:`fill_report` compares the played iterations without and with filling, per stage (see :class:`FillRow`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from simulator.topo.programs import ASYNC, SYNC, Op, Program, StageScript

VALIDATION_STEPS = ("clip_grad_norm", "_unscale_main_grads_and_check_for_nan")
"""Step items (``stage`` names) that only check the gradients across every stage: post-validated with filling."""


def is_validation(op: Op) -> bool:
    """Whether ``op`` is one of the gradient checks over every stage (:data:`VALIDATION_STEPS`)."""
    return op.kind == SYNC and any(f"step.{name}" in op.name for name in VALIDATION_STEPS)


def fill_program(program: Program) -> Program:
    """The step program with the validation all-reduces moved to the end, as overlapped collectives."""
    checks = [op for op in program.ops if is_validation(op)]
    if not checks:
        return program
    rest = [op for op in program.ops if not is_validation(op)]
    moved = [replace(op, kind=ASYNC) for op in checks]
    return Program(program.kind, rest + moved, program.work, program.hw_work)


def fill_scripts(scripts: list[StageScript]) -> list[StageScript]:
    """Every stage's script with :func:`fill_program` applied to its step program (the F/B programs are the same
    objects, so their compiled forms are reused)."""
    return [replace(script, step_program=fill_program(script.step_program)) for script in scripts]


@dataclass(frozen=True)
class FillRow:
    """One stage without and with filling (microseconds).  The engine's bubble of a stage (the iteration less its
    compute and exposed communication) is split at the drain, the moment the iteration's last backward ends (filling
    leaves the schedule, hence the drain, where it was): ``bubble`` is the stage's idle time before the drain (the
    pipeline bubble: warm-up, cool-down, waits for transfers), ``tail`` its idle time after it, until the iteration
    ends.  ``filled`` is the step work (optimizer step, parameter all-gather, the rest of the step) that with filling
    runs before the drain, in what was bubble; ``step_start`` when the optimizer step starts; ``done`` when the stage's
    own last op ends (overlapped checks aside)."""

    stage: int
    bubble_before_us: float
    bubble_after_us: float
    tail_before_us: float
    tail_after_us: float
    filled_us: float
    step_start_before_us: float | None
    step_start_after_us: float | None
    done_before_us: float
    done_after_us: float


WORK_STREAMS = ("compute", "comm", "host")
"""Streams of a stage's step-program entries that hold its GPU (``overlap comm`` runs beside, ``p2p`` is the schedule)."""


def _step_start(stage: Any) -> float | None:
    """When the stage's optimizer step (the step program's computation) started, seconds; None without one."""
    for stream, start, _d, cat, _name, _layer in stage.all_extra():
        if stream == "compute" and cat == "compute":
            return start
    return None


def _done(stage: Any) -> float:
    """When the stage's own last op ended (overlapped collectives aside), seconds."""
    ends = [start + d for stream, start, d, *_ in stage.all_extra() if stream in WORK_STREAMS]
    return max([stage.backward_end_s, *ends])


def _busy_after(stage: Any, drain: float) -> float:
    """Seconds of the stage's step entries that hold its GPU after ``drain``."""
    return sum(max(0.0, start + d - max(start, drain)) for stream, start, d, *_ in stage.all_extra()
               if stream in WORK_STREAMS and d > 0)


def _step_work_before(stage: Any, drain: float) -> float:
    """Seconds of the stage's step work (not the wait for its gradient buckets) before ``drain``."""
    return sum(max(0.0, min(start + d, drain) - start) for stream, start, d, _cat, name, _layer in stage.all_extra()
               if stream in WORK_STREAMS and name != "finish_grad_sync" and start >= stage.backward_end_s and d > 0)


def fill_report(before: Any, after: Any) -> list[FillRow]:
    """Per stage, :class:`FillRow` from the engine's results without (``before``) and with (``after``) filling."""
    from simulator.topo.engine import bubble_s

    drain = max(t.backward_end_s for t in after.stages)
    rows = []
    for b, a in zip(before.stages, after.stages):
        filled = _step_work_before(a, drain) - _step_work_before(b, drain)
        tails = []
        for t, played in ((b, before), (a, after)):
            tail = max(0.0, (played.iteration_s - drain) - _busy_after(t, drain))
            tails.append((bubble_s(t, played.iteration_s) - tail, tail))
        (bubble_b, tail_b), (bubble_a, tail_a) = tails
        sb, sa = _step_start(b), _step_start(a)
        rows.append(FillRow(b.stage, bubble_b * 1e6, bubble_a * 1e6, tail_b * 1e6, tail_a * 1e6, filled * 1e6,
                            None if sb is None else sb * 1e6, None if sa is None else sa * 1e6, _done(b) * 1e6,
                            _done(a) * 1e6))
    return rows


def fill_table(rows: list[FillRow], before_us: float, after_us: float) -> str:
    """The report as text: one line per stage (microseconds)."""
    lines = [f"  bubble filling (--fill_bubbles): iteration {before_us:,.1f} -> {after_us:,.1f} us; bubble = idle before the "
             "last backward ends, tail = idle after it",
             "  stage     bubble before      bubble after   filled (moved in)    tail before     tail after"]
    for r in rows:
        lines.append(f"  {r.stage:5d} {r.bubble_before_us:17,.1f} {r.bubble_after_us:17,.1f} {r.filled_us:19,.1f} "
                     f"{r.tail_before_us:14,.1f} {r.tail_after_us:14,.1f}")
    return "\n".join(lines)


__all__ = ["fill_scripts", "fill_program", "fill_report", "fill_table", "FillRow", "is_validation"]

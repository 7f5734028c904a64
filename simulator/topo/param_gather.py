"""``--overlap_param_gather`` in the topo engine: the distributed optimizer's parameter all-gathers under the forward.

Reference: Megatron-LM ``megatron/core/distributed/distributed_data_parallel.py`` (``_make_forward_pre_hook``,
``start_param_sync``), ``param_and_grad_buffer.py`` (``_ParamAndGradBucketGroup.start_param_sync`` /
``finish_param_sync``: each bucket group's all-gather is asynchronous; waiting for one dispatches the next,
``next_param_gather_bucket_group``) and ``core/pipeline_parallel/schedules.py`` (``param_sync_func`` with
``--align-param-gather``, on by default with the interleaved schedule).

With ``--overlap_param_gather`` the optimizer step does not gather the updated parameters; the next iteration's
forward does, bucket by bucket, before the first module that uses each bucket runs.  Since every iteration is
alike, the engine plays the gathers of this iteration's step (counted, not waited for, in the step program) as if
they had been issued at this iteration's start:

- ``chain`` (the non-interleaved schedule, or ``--no-align-param-gather``): the forward pre-hook of the first
  module of a model chunk dispatches its bucket's all-gather and waits for it: the first bucket of each chain (the
  dense buffer's over DP, the experts' over expert-DP) is exposed; waiting for bucket ``j`` dispatches bucket
  ``j + 1``, which runs while the layers of bucket ``j`` compute, and the forward waits again only where bucket
  ``j + 1`` takes longer than those layers;
- ``aligned`` (the interleaved schedule): every bucket of chunks 0 and 1 is dispatched at the iteration's start on
  every stage, chunk ``c >= 2``'s when the stage starts the forward whose virtual micro-batch id plus its pipeline
  rank is chunk ``c - 1``'s first; the gathers of one group run one after another.

The forward waits only at the first micro-batch of each chunk (the parameters stay gathered afterwards).  While a
gather runs beside the forward, NCCL's thread blocks take ``contention`` of the SMs (``simulator.contention``): the
overlapped part of each gather slows the stage by ``contention`` times its length.  Both the waits and the slowdown
are booked to the gather's exposed time (DP, or DP_EP for expert buckets).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Gather:
    """One bucket's all-gather: its model chunk, group, exposed-time category, the index of the op of the
    chunk's forward program that first uses its parameters, its time (seconds) and name."""

    chunk: int
    group: str
    category: str
    need: int
    duration_s: float
    name: str
    start_s: float | None = None
    end_s: float | None = None


@dataclass
class StagePlan:
    """One stage's gathers (per chunk, in forward order) and where it stands in the iteration."""

    rank: int
    pp: int
    aligned: bool
    contention: float
    gathers: dict[int, list[Gather]] = field(default_factory=dict)
    forwards: int = 0
    first_forward_s: float | None = None
    free: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def _dispatch(self, chunk: int, at: float) -> None:
        for g in self.gathers.get(chunk, ()):
            if g.start_s is None:
                g.start_s = max(at, self.free[g.group])
                g.end_s = self.free[g.group] = g.start_s + g.duration_s

    def forward(self, step: Any, t: float, starts: Sequence[float], times: Any) -> float:
        """The delay the forward step ``step`` starting at ``t`` takes from the gathers (0 after each chunk's
        first micro-batch); books the waits and the slowdown in ``times`` (:class:`simulator.topo.engine.StageTimes`).
        ``starts``: the start offset of each op of the step's compiled program."""
        k = self.forwards
        self.forwards += 1
        if self.first_forward_s is None:
            self.first_forward_s = t
        if self.aligned:
            if k == 0:
                self._dispatch(0, 0.0)
                self._dispatch(1, 0.0)
            for c in self.gathers:
                if c >= 2 and k + self.rank == (c - 1) * self.pp:
                    self._dispatch(c, t)
        if step.microbatch != 0 or step.chunk not in self.gathers:
            return 0.0
        delay = 0.0
        chain_next: dict[str, int] = {}
        ordered = sorted(self.gathers[step.chunk], key=lambda g: g.need)
        chains: dict[str, list[Gather]] = defaultdict(list)
        for g in self.gathers[step.chunk]:
            chains[g.group].append(g)
        for g in ordered:
            now = t + (starts[g.need] if 0 <= g.need < len(starts) else 0.0) + delay
            if g.start_s is None:  # chain: the pre-hook dispatches a bucket not dispatched yet
                g.start_s = max(now, self.free[g.group])
                g.end_s = self.free[g.group] = g.start_s + g.duration_s
            wait = max(0.0, g.end_s - now)
            busy_from = max(g.start_s, t if not self.aligned else self.first_forward_s)
            overlapped = max(0.0, min(g.end_s, now) - busy_from)
            slow = self.contention * overlapped
            if wait > 0.0:
                times.exposed_s[g.category] += wait
                times.extra.append(("comm", now, wait, g.category, f"wait for {g.name}", "param_gather"))
            if slow > 0.0:
                times.exposed_s[g.category] += slow
            delay += wait + slow
            if not self.aligned:  # waiting for bucket j dispatches bucket j + 1 of the same chain
                chain = chains[g.group]
                j = chain_next.get(g.group, chain.index(g)) + 1
                chain_next[g.group] = j
                if j < len(chain) and chain[j].start_s is None:
                    chain[j].start_s = max(now + wait, self.free[g.group])
                    chain[j].end_s = self.free[g.group] = chain[j].start_s + chain[j].duration_s
        return delay


def stage_plans(scripts: Sequence[Any], durations: Any, contention: float, aligned: bool) -> list[StagePlan | None] | None:
    """Per stage, the plan of its overlapped parameter gathers (None for a stage without any; None overall when no
    stage has one).  ``durations(stage, op) -> seconds`` prices a step-program op; the ops are those the builder
    marked (``Op.need`` set: ``meta['overlap'] == 'param_gather'``)."""
    from simulator.topo.programs import GROUP_CATEGORY

    plans: list[StagePlan | None] = []
    any_plan = False
    pp = len(scripts)
    for s, script in enumerate(scripts):
        ops = [op for op in script.step_program.ops if getattr(op, "need", "")]
        if not ops:
            plans.append(None)
            continue
        first: dict[int, Any] = {}
        for step, program in zip(script.steps, script.programs):
            if step.kind == "F" and step.microbatch == 0 and step.chunk not in first:
                first[step.chunk] = program
        plan = StagePlan(s, pp, aligned, contention)
        for op in ops:
            program = first.get(op.chunk)
            need = 0
            if program is not None:
                # the step program and the forward programs come from one generator: one layer numbering
                need = next((i for i, o in enumerate(program.ops) if o.layer == op.need), 0)
            plan.gathers.setdefault(op.chunk, []).append(
                Gather(op.chunk, op.group, GROUP_CATEGORY.get(op.group, "other"), need, durations(s, op), op.name))
        plans.append(plan)
        any_plan = True
    return plans if any_plan else None


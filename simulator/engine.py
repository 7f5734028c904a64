"""The pipeline engine: plays every stage's script against the others (SIM_MODEL.md, "Time of one iteration").

Each stage is a sequence of steps run in order on its compute stream; what couples stages is data:

- a P2P step posts its sends at once (``send_next`` carries an activation to the next stage,
  ``send_prev`` a gradient to the previous one, wrapping around for the interleaved schedule) and
  completes when its own sends have been transferred and every receive it batches has arrived.
  Transfers are eager: data sent at t arrives at ``t + p2p time`` whether or not the receiver has
  reached its receive yet; matching is first-in first-out per stage pair and direction, as NCCL's
  p2p operations are ordered;
- a forward or backward step runs its compiled program (:func:`compile_program`) from the end of
  the previous step; its gradient buckets are queued on the stage's gradient-sync stream at their
  ready points and run one after another;
- the step program runs after the last scheduled step: ``finish_grad_sync`` waits for the
  gradient-sync stream, collectives inside the stage run in turn, a collective whose group spans
  stages starts when the last of its stages arrives, and a collective the workload marks
  overlappable (the distributed optimizer's parameter all-gather with ``--overlap_param_gather``)
  is counted but left to overlap the next iteration's forward.

The iteration time is the latest stage finish.  Per stage, time is booked to compute, exposed
comm per group (blocking collectives, waits for overlapped ones, waits for gradient sync), exposed
PP (the transfer time of each p2p call) and bubble: everything else (waiting for other stages, and
finishing before the last stage), so that the terms add up to the iteration time on every stage.

All state is plain floats in seconds and small lists: stages x steps, never per rank.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from simulator.programs import ASYNC, COMM, COMPUTE, GRAD, GRAD_WAIT, GROUP_CATEGORY, SYNC, Program, StageScript
from simulator.result import Interval

CATEGORIES = ("TP", "EP", "DP", "DP_EP", "PP", "other")
"""Exposed-comm terms a stage's time is booked to (besides compute and bubble)."""


@dataclass
class CompiledProgram:
    """A program with its op times resolved, relative to the start of its step (seconds).

    ``duration_s`` is the step's time on the compute stream (compute, blocking comm, and the wait
    for overlapped comm at the end); ``exposed_s`` the comm part of it per category;
    ``comm_s`` every collective's time per category (exposed or not); ``grads`` the gradient
    buckets as (ready offset, duration, category, name, layer, op index); ``intervals`` every op
    as (offset, duration, stream, category, name, layer); ``layers`` per layer key
    [compute, comm, exposed comm] seconds.
    """

    program: Program
    durations: list[float]
    duration_s: float
    compute_s: float
    exposed_s: dict[str, float]
    comm_s: dict[str, float]
    grads: list[tuple[float, float, str, str, str, int]]
    intervals: list[tuple[float, float, str, str, str, str]]
    layers: dict[str, list[float]]


def compile_program(program: Program, durations: Sequence[float], contention: float = 0.0) -> CompiledProgram:
    """Lay out one F/B program: COMPUTE and COMM ops back to back on the compute stream, ASYNC ops
    on the overlap stream from the moment they are issued, GRAD ops recorded with their ready
    offsets; the step ends when its last op and its overlapped comm are done.

    An ASYNC op with ``wait_next`` overlaps the next compute op only, as Megatron's linear layers wait
    for their asynchronous TP collective right after the GEMM it hides behind.  While it runs, that
    compute op runs at ``1 - contention`` of its speed (NCCL's thread blocks occupy that share of the
    SMs): a compute op of ``d`` seconds started with ``x`` seconds of collective left ends after
    ``d + contention * x`` (``d / (1 - contention)`` when the collective outlasts it); the slowdown is
    booked to the collective's exposed time, and so is any wait for it past the compute op's end.
    """
    t = 0.0
    overlap_free = 0.0
    overlap_cat = ""
    compute = 0.0
    exposed: dict[str, float] = defaultdict(float)
    comm: dict[str, float] = defaultdict(float)
    grads = []
    intervals = []
    layers: dict[str, list[float]] = {}
    pending: tuple[float, str, list[float]] | None = None  # (end, category, layer accumulator) of a wait_next op

    def settle() -> None:
        nonlocal t, pending
        if pending is None:
            return
        end, cat, acc = pending
        pending = None
        if end > t:
            exposed[cat] += end - t
            acc[2] += end - t
            intervals.append((t, end - t, "comm", cat, "wait for overlapped comm", ""))
            t = end

    for index, (op, d) in enumerate(zip(program.ops, durations)):
        acc = layers.get(op.layer)
        if acc is None:
            acc = layers[op.layer] = [0.0, 0.0, 0.0]
        kind = op.kind
        if kind == COMPUTE:
            intervals.append((t, d, "compute", "compute", op.name, op.layer))
            compute += d
            acc[0] += d
            if pending is not None and pending[0] > t and contention > 0.0:
                left = pending[0] - t
                slow = d * contention / (1.0 - contention) if left * (1.0 - contention) >= d else contention * left
                exposed[pending[1]] += slow
                pending[2][2] += slow
                t += slow
            t += d
            settle()
            continue
        cat = GROUP_CATEGORY.get(op.group, "other")
        comm[cat] += d
        acc[1] += d
        if kind in (COMM, SYNC, ASYNC):
            settle()
        if kind == COMM or kind == SYNC:
            intervals.append((t, d, "comm", cat, op.name, op.layer))
            t += d
            exposed[cat] += d
            acc[2] += d
        elif kind == ASYNC and op.wait_next:
            start = max(overlap_free, t)
            overlap_free = start + d
            pending = (overlap_free, cat, acc)
            intervals.append((start, d, "overlap comm", cat, op.name, op.layer))
        elif kind == ASYNC:
            start = max(overlap_free, t)
            overlap_free = start + d
            overlap_cat = cat
            intervals.append((start, d, "overlap comm", cat, op.name, op.layer))
        elif kind == GRAD:
            grads.append((t, d, cat, op.name, op.layer, index))
    settle()
    if overlap_free > t:
        exposed[overlap_cat] += overlap_free - t
        intervals.append((t, overlap_free - t, "comm", overlap_cat, "wait for overlapped comm", ""))
        t = overlap_free
    return CompiledProgram(program, list(durations), t, compute, dict(exposed), dict(comm), grads, intervals, layers)


@dataclass
class StageTimes:
    """What one stage did (seconds): compute, exposed comm per category, PP transfer time on its
    critical path, when it finished, its gradient buckets' exposed time per category."""

    stage: int
    compute_s: float = 0.0
    exposed_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))
    comm_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))
    end_s: float = 0.0
    backward_end_s: float = 0.0
    grad_wait_s: float | None = None
    """When the step program started waiting for the gradient-sync stream (None: it did not)."""
    runs: list[tuple[float, int, int, int]] = field(default_factory=list)
    """(start, step index, micro-batch, chunk) of every F/B step."""
    extra: list[Interval] = field(default_factory=list)
    """P2P calls, gradient buckets and step-program ops."""
    grad_instances: list[tuple[float, float, str, int, int]] = field(default_factory=list)
    """(start, end, category, step index, op index) of every gradient bucket reduction."""


@dataclass
class EngineResult:
    iteration_s: float
    stages: list[StageTimes]


class Deadlock(RuntimeError):
    """The scripts wait on each other forever (a bug in a builder, not a user error)."""


P2PCost = Callable[[int, str, int], float]
"""``p2p_time(stage, op, size) -> seconds`` of one p2p operation of a stage."""
StepCost = Callable[[int, object], float]
"""``step_time(stage, op) -> seconds`` of one step-program op."""


def run(scripts: Sequence[StageScript], compiled: Sequence[dict[int, CompiledProgram]], p2p_time: P2PCost,
        step_time: StepCost, sync_members: Callable[[str], Sequence[int]]) -> EngineResult:
    """Play the scripts.  ``compiled[s][id(program)]`` is stage s's compiled program; ``sync_members``
    gives the stages of a cross-stage group.  Raises :class:`Deadlock` if no stage can move."""
    pp = len(scripts)
    times = [StageTimes(s) for s in range(pp)]
    clock = [0.0] * pp
    grad_free = [0.0] * pp
    pos = [0] * pp
    sent = [-1] * pp          # index of the P2P step whose sends are posted
    step_pos = [0] * pp       # position inside the step program
    channels: dict[tuple[int, int, str], deque[float]] = defaultdict(deque)
    waiting: dict[tuple[int, int, str], int] = {}
    syncs: dict[tuple[str, int], dict[int, float]] = defaultdict(dict)
    sync_seen: list[dict[str, int]] = [defaultdict(int) for _ in range(pp)]
    sync_done: dict[tuple[str, int], float] = {}
    done = [False] * pp
    todo = deque(range(pp))
    queued = set(range(pp))

    def wake(stage: int) -> None:
        if stage not in queued and not done[stage]:
            queued.add(stage)
            todo.append(stage)

    def advance(s: int) -> None:
        script = scripts[s]
        st_times = times[s]
        steps = script.steps
        comp = compiled[s]
        while pos[s] < len(steps):
            i = pos[s]
            step = steps[i]
            t = clock[s]
            if step.kind == "P2P":
                sizes = script.p2p_sizes[i] or ()
                if sent[s] != i:
                    sent[s] = i
                    for op, size in zip(step.ops, sizes):
                        if op.startswith("send"):
                            peer = (s + 1) % pp if op == "send_next" else (s - 1) % pp
                            key = (s, peer, "act" if op == "send_next" else "grad")
                            channels[key].append(t + p2p_time(s, op, size))
                            if waiting.get(key) is not None:
                                wake(waiting.pop(key))
                end = t
                longest = 0.0
                for op, size in zip(step.ops, sizes):
                    d = p2p_time(s, op, size)
                    longest = max(longest, d)
                    if op.startswith("send"):
                        end = max(end, t + d)
                recvs = [op for op in step.ops if op.startswith("recv")]
                keys = [((s - 1) % pp if op == "recv_prev" else (s + 1) % pp, s, "act" if op == "recv_prev" else "grad")
                        for op in recvs]
                missing = [k for k in keys if not channels[k]]
                if missing:
                    waiting[missing[0]] = s
                    return
                for k in keys:
                    end = max(end, channels[k].popleft())
                exposed = min(end - t, longest)
                st_times.exposed_s["PP"] += exposed
                st_times.comm_s["PP"] += longest
                st_times.extra.append(Interval(s, "p2p", t, end - t, "PP", f"{step.phase}.{step.name}", "p2p"))
                clock[s] = end
                pos[s] += 1
                continue
            program = script.programs[i]
            cp = comp[id(program)]
            st_times.runs.append((t, i, step.microbatch, step.chunk))
            st_times.compute_s += cp.compute_s
            for cat, d in cp.exposed_s.items():
                st_times.exposed_s[cat] += d
            for cat, d in cp.comm_s.items():
                st_times.comm_s[cat] += d
            for offset, d, cat, _name, _layer, op_index in cp.grads:
                start = max(grad_free[s], t + offset)
                grad_free[s] = start + d
                st_times.grad_instances.append((start, start + d, cat, i, op_index))
            clock[s] = t + cp.duration_s
            if step.kind == "B":
                st_times.backward_end_s = clock[s]
            pos[s] += 1
        # the step program
        ops = script.step_program.ops
        while step_pos[s] < len(ops):
            op = ops[step_pos[s]]
            t = clock[s]
            if op.kind == GRAD_WAIT:
                st_times.grad_wait_s = t
                end = max(t, grad_free[s])
                for g_start, g_end, cat, _i, _j in st_times.grad_instances:
                    if g_end > t:
                        part = g_end - max(g_start, t)
                        st_times.exposed_s[cat] += part
                if end > t:
                    st_times.extra.append(Interval(s, "comm", t, end - t, "DP", op.name, op.layer))
                clock[s] = end
            elif op.kind == SYNC:
                n = sync_seen[s][op.group]
                key = (op.group, n)
                if key not in sync_done:
                    arrivals = syncs[key]
                    arrivals[s] = t
                    members = sync_members(op.group)
                    if not all(m in arrivals for m in members):
                        return
                    sync_done[key] = max(arrivals.values())
                    for m in members:
                        if m != s:
                            wake(m)
                sync_seen[s][op.group] = n + 1
                d = step_time(s, op)
                start = sync_done[key]
                cat = GROUP_CATEGORY.get(op.group, "other")
                st_times.exposed_s[cat] += d
                st_times.comm_s[cat] += d
                st_times.extra.append(Interval(s, "comm", start, d, cat, op.name, op.layer))
                clock[s] = start + d
            elif op.kind == ASYNC:
                # marked overlappable in the step (e.g. Megatron's --overlap_param_gather): it runs
                # under the next iteration's forward, so it is counted but not waited for
                d = step_time(s, op)
                cat = GROUP_CATEGORY.get(op.group, "other")
                st_times.comm_s[cat] += d
                st_times.extra.append(Interval(s, "overlap comm", t, d, cat, op.name, op.layer))
            else:
                d = step_time(s, op)
                if op.kind == COMPUTE:
                    st_times.compute_s += d
                    st_times.extra.append(Interval(s, "compute", t, d, "compute", op.name, op.layer))
                else:
                    cat = GROUP_CATEGORY.get(op.group, "other")
                    st_times.exposed_s[cat] += d
                    st_times.comm_s[cat] += d
                    st_times.extra.append(Interval(s, "comm", t, d, cat, op.name, op.layer))
                clock[s] = t + d
            step_pos[s] += 1
        done[s] = True
        st_times.end_s = max(clock[s], grad_free[s])

    while todo:
        s = todo.popleft()
        queued.discard(s)
        if not done[s]:
            advance(s)
    if not all(done):
        stuck = [s for s in range(pp) if not done[s]]
        raise Deadlock(f"pipeline stages {stuck} wait on each other (steps {[pos[s] for s in stuck]})")
    iteration = max(t.end_s for t in times) if times else 0.0
    return EngineResult(iteration, times)


def bubble_s(stage: StageTimes, iteration_s: float) -> float:
    """Time the stage spends neither computing nor in exposed comm: waiting for other stages,
    and idle after it finishes until the last stage does."""
    idle = iteration_s - stage.compute_s - sum(stage.exposed_s.values())
    return 0.0 if abs(idle) < 1e-12 else idle  # float residue of the sums (under a picosecond) is no bubble

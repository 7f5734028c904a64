"""The pipeline engine: plays every stage's script against the others (docs/sim_model.md, "Time of one iteration").

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
  overlappable is counted but not waited for: the distributed optimizer's parameter all-gathers
  with ``--overlap_param_gather`` are waited for by the first forward of each model chunk instead,
  bucket by bucket (:mod:`simulator.topo.param_gather`).

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
from typing import Any

from simulator.topo.host_model import HostClock, uses_host
from simulator.topo.programs import ASYNC, COMM, COMPUTE, GRAD, GRAD_WAIT, GROUP_CATEGORY, SYNC, Program, StageScript

CATEGORIES = ("TP", "EP", "DP", "DP_EP", "PP", "other", "CP", "host")
"""Exposed terms a stage's time is booked to (besides compute and bubble): comm per category, and ``host``, the GPU
waiting for the CPU to issue its next op (:mod:`simulator.topo.host_model`)."""


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
    starts: list[float] = field(default_factory=list)
    """Each op's start offset (seconds; where the compute stream reaches it)."""


def compile_program(program: Program, durations: Sequence[float], contention: float = 0.0) -> CompiledProgram:
    """Lay out one F/B program: COMPUTE and COMM ops back to back on the compute stream, ASYNC ops
    on the overlap stream from the moment they are issued, GRAD ops recorded with their ready
    offsets; the step ends when its last op and its overlapped comm are done.

    An ASYNC op with ``wait_next`` overlaps the next compute op only, as Megatron's linear layers wait
    for their asynchronous TP collective right after the GEMM it hides behind; other ASYNC ops (every TP
    collective with ``--tp_comm_overlap``) run beside the compute ops that follow until they end.  While a
    collective runs, a compute op beside it runs at ``1 - contention`` of its speed (the collective's thread
    blocks occupy that share of the SMs): a compute op of ``d`` seconds started with ``x`` seconds of
    collective left ends after ``d + contention * x`` (``d / (1 - contention)`` when the collective outlasts
    it); the slowdown is booked to the collective's exposed time, and so is any wait for it past the end.

    Ops with host costs (:mod:`simulator.topo.host_model`) start no earlier than the CPU issues them; the compute stream's
    wait for the CPU is booked to ``exposed_s['host']``.
    """
    host = HostClock() if uses_host(program.ops) else None
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
    starts: list[float] = []

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
        kind = op.kind
        issued = 0.0
        if host is not None:
            if kind == COMM or kind == SYNC:
                settle()  # a blocking collective waits for the overlapped one on the stream first
            issued = host.issue(op, t, kind != COMPUTE)
            if issued > t and (kind == COMPUTE or kind == COMM or kind == SYNC):
                exposed["host"] += issued - t
                intervals.append((t, issued - t, "host", "host", "waiting for the host", op.layer))
                t = issued
        starts.append(t)
        acc = layers.get(op.layer)
        if acc is None:
            acc = layers[op.layer] = [0.0, 0.0, 0.0]
        if kind == COMPUTE:
            intervals.append((t, d, "compute", "compute", op.name, op.layer))
            compute += d
            acc[0] += d
            if contention > 0.0:
                # a collective in flight beside this kernel (a wait_next op, or any overlapped one) holds its share
                # of the SMs: the kernel runs slower while it lasts
                if pending is not None and pending[0] > t:
                    left, cat_, acc_ = pending[0] - t, pending[1], pending[2]
                elif overlap_free > t:
                    left, cat_, acc_ = overlap_free - t, overlap_cat, acc
                else:
                    left = 0.0
                if left > 0.0:
                    slow = d * contention / (1.0 - contention) if left * (1.0 - contention) >= d else contention * left
                    exposed[cat_] += slow
                    acc_[2] += slow
                    t += slow
            t += d
            if host is not None:
                host.done(op, t)
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
            if host is not None:
                host.done(op, t)
            continue
        ready = max(t, issued)  # an overlapped collective or a bucket starts once the CPU has issued it
        if kind == ASYNC and op.wait_next and cat == "CP":
            # context parallelism's ring exchange runs on its own stream and communicator (Transformer Engine's
            # cp_stream and CP group), not behind the TP collectives overlapped on the other stream
            pending = (ready + d, cat, acc)
            intervals.append((ready, d, "overlap comm", cat, op.name, op.layer))
        elif kind == ASYNC and op.wait_next:
            start = max(overlap_free, ready)
            overlap_free = start + d
            pending = (overlap_free, cat, acc)
            intervals.append((start, d, "overlap comm", cat, op.name, op.layer))
        elif kind == ASYNC:
            start = max(overlap_free, ready)
            overlap_free = start + d
            overlap_cat = cat
            intervals.append((start, d, "overlap comm", cat, op.name, op.layer))
        elif kind == GRAD:
            grads.append((ready, d, cat, op.name, op.layer, index))
    settle()
    if overlap_free > t:
        exposed[overlap_cat] += overlap_free - t
        intervals.append((t, overlap_free - t, "comm", overlap_cat, "wait for overlapped comm", ""))
        t = overlap_free
    return CompiledProgram(program, list(durations), t, compute, dict(exposed), dict(comm), grads, intervals, layers,
                           starts)


@dataclass
class Repeat:
    """``times`` more copies of one steady 1F1B cycle that the engine did not play (see :func:`run`):
    the cycle's entries are ``runs[runs_span[0]:runs_span[1]]`` (and likewise ``extra`` and
    ``grad_instances``), each copy ``period_s`` later and one micro-batch further.

    Skipped (the schedule holds the copies): each copy is ``steps`` schedule steps further, and every
    entry after the span is already where the unrolled run has it.  Inserted (``inserted``: the schedule
    was shortened by ``times`` cycles, :func:`run`'s ``insert``): the copies run the span's steps again
    (``steps`` is then the cycle's length, ``first_step`` its first step), and the entries after the span
    are ``times`` micro-batches further than their steps say."""

    times: int
    period_s: float
    steps: int
    runs_span: tuple[int, int]
    extra_span: tuple[int, int]
    grads_span: tuple[int, int]
    inserted: bool = False
    first_step: int = 0

    @property
    def step_shift(self) -> int:
        """Schedule steps between two copies' entries (0 when inserted: they share the span's steps)."""
        return 0 if self.inserted else self.steps


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
    """(start, step index, micro-batch, chunk) of every F/B step the engine played (see ``repeat``)."""
    extra: list[tuple] = field(default_factory=list)
    """(stream, start, duration, category, name, layer) of P2P calls and step-program ops."""
    grad_instances: list[tuple[float, float, str, int, int]] = field(default_factory=list)
    """(start, end, category, step index, op index) of every gradient bucket reduction played."""
    repeat: Repeat | None = None
    """Steady cycles extrapolated instead of played: :meth:`all_runs` and the others include them."""

    def all_runs(self) -> list[tuple[float, int, int, int]]:
        """Every F/B step of the iteration, the extrapolated cycles included: (start, step index,
        micro-batch, chunk); inserted cycles' steps are the span's (see :class:`Repeat`)."""
        after = self.repeat.times if self.repeat is not None and self.repeat.inserted else 0
        return self._expand(self.runs, "runs_span",
                            lambda e, k, r: (e[0] + k * r.period_s, e[1] + k * r.step_shift, e[2] + k, e[3]),
                            lambda e: (e[0], e[1], e[2] + after, e[3]) if after else e)

    def all_extra(self) -> list[tuple]:
        return self._expand(self.extra, "extra_span", lambda e, k, r: (e[0], e[1] + k * r.period_s, *e[2:]))

    def all_grad_instances(self) -> list[tuple[float, float, str, int, int]]:
        return self._expand(self.grad_instances, "grads_span",
                            lambda e, k, r: (e[0] + k * r.period_s, e[1] + k * r.period_s, e[2], e[3] + k * r.step_shift,
                                             e[4]))

    def _expand(self, entries: list, span: str, shift: Callable[[Any, int, Repeat], Any],
                after: Callable[[Any], Any] | None = None) -> list:
        r = self.repeat
        if r is None:
            return list(entries)
        lo, hi = getattr(r, span)
        out = entries[:hi]
        if lo < hi:
            for k in range(1, r.times + 1):
                out += [shift(e, k, r) for e in entries[lo:hi]]
        return out + (list(map(after, entries[hi:])) if after is not None else entries[hi:])


@dataclass
class EngineResult:
    iteration_s: float
    stages: list[StageTimes]
    inserted: bool = False
    """Whether the ``insert`` cycles :func:`run` was asked for were added."""


class Deadlock(RuntimeError):
    """The scripts wait on each other forever (a bug in a builder, not a user error)."""


P2PCost = Callable[[int, str, int], float]
"""``p2p_time(stage, op, size) -> seconds`` of one p2p operation of a stage."""
StepCost = Callable[[int, object], float]
"""``step_time(stage, op) -> seconds`` of one step-program op."""

PERIOD_TOLERANCE_S = 1e-12
"""Two steady cycles repeat when every stage's clock (and gradient stream) moves by the same period
in both, to within this (float rounding of sums of seconds; 1 ps)."""


def _p2p_plan(script: StageScript, stage: int, pp: int, p2p_time: P2PCost) -> list:
    """Per step of a stage: None for F/B; for P2P (sends as (channel, seconds), receive channels,
    the longest transfer, the label)."""
    plans: dict[tuple[int, tuple], tuple] = {}
    out: list = []
    for step, sizes in zip(script.steps, script.p2p_sizes):
        if sizes is None and step.kind != "P2P":
            out.append(None)
            continue
        sizes = sizes or ()
        key = (id(step), sizes)
        plan = plans.get(key)
        if plan is None:
            sends, longest = [], 0.0
            for op, size in zip(step.ops, sizes):
                d = p2p_time(stage, op, size)
                longest = max(longest, d)
                if op.startswith("send"):
                    peer = (stage + 1) % pp if op == "send_next" else (stage - 1) % pp
                    sends.append(((stage, peer, "act" if op == "send_next" else "grad"), d))
            recvs = tuple(((stage - 1) % pp if op == "recv_prev" else (stage + 1) % pp, stage,
                           "act" if op == "recv_prev" else "grad") for op in step.ops if op.startswith("recv"))
            send_end = max((d for _, d in sends), default=0.0)
            plan = plans[key] = (tuple(sends), recvs, longest, send_end, f"{step.phase}.{step.name}")
        out.append(plan)
    return out


def _steady_cycles(scripts: Sequence[StageScript]) -> list[tuple[list[int], int]] | None:
    """Per stage, the step index where each steady 1F1B cycle starts (the forward of cycle ``c`` is that
    of micro-batch ``warm-up + c``) and the cycle's length in steps, counted from the cycle index every
    stage shares; only cycles made of the same programs and p2p sizes as the cycle before count.  None
    when no extrapolation applies (interleaved schedules, too few micro-batches)."""
    out = []
    for script in scripts:
        steps = script.steps
        forwards = [i for i, st in enumerate(steps) if st.kind == "F"]
        if not forwards or any(st.chunk for st in steps if st.kind in "FB"):
            return None
        first_b = next((i for i, st in enumerate(steps) if st.kind == "B"), len(steps))
        warmup = sum(1 for i in forwards if i < first_b)
        starts = forwards[warmup:]
        if len(starts) < 2:
            return None
        length = starts[1] - starts[0]
        if any(b - a != length for a, b in zip(starts, starts[1:])):
            return None
        out.append((starts, length))
    return out


def _marks(script: StageScript) -> list[tuple]:
    """Per step what makes two cycles alike: the program (by identity), the p2p sizes and, for a p2p
    step, the call (by identity: schedules share one object per distinct call)."""
    return list(zip(map(id, script.programs), script.p2p_sizes,
                    [id(st) if st.kind == "P2P" else st.kind for st in script.steps]))


def run(scripts: Sequence[StageScript], compiled: Sequence[dict[int, CompiledProgram]], p2p_time: P2PCost,
        step_time: StepCost, sync_members: Callable[[str], Sequence[int]], extrapolate: bool = True,
        insert: int = 0, param_gathers: Sequence[Any] | None = None) -> EngineResult:
    """Play the scripts.  ``compiled[s][id(program)]`` is stage s's compiled program; ``sync_members``
    gives the stages of a cross-stage group.  Raises :class:`Deadlock` if no stage can move.

    Steady state (``extrapolate``): with the non-interleaved 1F1B schedule the engine plays up to each
    stage's start of a steady cycle ``c`` (every stage stops there; no transfer is then in flight), then
    cycle by cycle; once two consecutive cycles move every stage's clock, and its gradient stream where it
    runs, by the same period, and the cycles left before the cool-down run the same programs, the state
    after ``k`` more cycles is this one shifted by ``k`` periods (the schedule's times are maxima and sums
    of the same durations), so the engine adds ``k`` periods and ``k`` cycles' compute and exposed time
    instead of playing them (:class:`Repeat` records them).  Results equal the unrolled play's to float
    rounding (well under a microsecond); ``extrapolate=False`` plays every step.

    ``insert`` (> 0): the scripts' schedules are ``insert`` steady cycles shorter than the iteration (a
    job's middle micro-batches all run the same programs, so the builder made only a few of them); the
    engine adds those cycles at the first repeating cycle, without a step of the schedule for them, and
    :attr:`EngineResult.inserted` says whether it could (when no cycle repeated, the caller plays the
    whole schedule instead).

    ``param_gathers`` (per stage, a :class:`simulator.topo.param_gather.StagePlan` or None): the parameter all-gathers
    ``--overlap_param_gather`` leaves to the forward; the first forward of each chunk waits for its buckets."""
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
    plans = [_p2p_plan(script, s, pp, p2p_time) for s, script in enumerate(scripts)]
    stop = [-1] * pp          # a breakpoint: the step index a stage waits at (-1: none)

    def wake(stage: int) -> None:
        if stage not in queued and not done[stage]:
            queued.add(stage)
            todo.append(stage)

    def advance(s: int) -> None:
        script = scripts[s]
        st_times = times[s]
        steps = script.steps
        comp = compiled[s]
        plan = plans[s]
        programs = script.programs
        exposed_s, comm_s = st_times.exposed_s, st_times.comm_s
        n = len(steps)
        while pos[s] < n:
            i = pos[s]
            if i == stop[s]:
                return
            t = clock[s]
            p2p = plan[i]
            if p2p is not None:
                sends, recvs, longest, send_end, label = p2p
                if sent[s] != i:
                    sent[s] = i
                    for key, d in sends:
                        channels[key].append(t + d)
                        if key in waiting:
                            wake(waiting.pop(key))
                for key in recvs:
                    if not channels[key]:
                        waiting[key] = s
                        return
                end = t + send_end
                for key in recvs:
                    end = max(end, channels[key].popleft())
                exposed_s["PP"] += min(end - t, longest)
                comm_s["PP"] += longest
                st_times.extra.append(("p2p", t, end - t, "PP", label, "p2p"))
                clock[s] = end
                pos[s] += 1
                continue
            step = steps[i]
            cp = comp[id(programs[i])]
            st_times.runs.append((t, i, step.microbatch, step.chunk))
            st_times.compute_s += cp.compute_s
            for cat, d in cp.exposed_s.items():
                exposed_s[cat] += d
            for cat, d in cp.comm_s.items():
                comm_s[cat] += d
            gather_delay = 0.0
            if param_gathers is not None and step.kind == "F" and param_gathers[s] is not None:
                gather_delay = param_gathers[s].forward(step, t, cp.starts, st_times)
            for offset, d, cat, _name, _layer, op_index in cp.grads:
                start = max(grad_free[s], t + offset)
                grad_free[s] = start + d
                st_times.grad_instances.append((start, start + d, cat, i, op_index))
            clock[s] = t + cp.duration_s + gather_delay
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
                for g_start, g_end, cat, _i, _j in st_times.all_grad_instances():
                    if g_end > t:
                        part = g_end - max(g_start, t)
                        exposed_s[cat] += part
                if end > t:
                    st_times.extra.append(("comm", t, end - t, "DP", op.name, op.layer))
                clock[s] = end
            elif op.kind == SYNC:
                k = sync_seen[s][op.group]
                key = (op.group, k)
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
                sync_seen[s][op.group] = k + 1
                d = step_time(s, op)
                start = sync_done[key]
                cat = GROUP_CATEGORY.get(op.group, "other")
                exposed_s[cat] += d
                comm_s[cat] += d
                st_times.extra.append(("comm", start, d, cat, op.name, op.layer))
                clock[s] = start + d
            elif op.kind == ASYNC:
                # marked overlappable in the step (e.g. Megatron's --overlap_param_gather): it runs
                # under the next iteration's forward, so it is counted but not waited for
                d = step_time(s, op)
                cat = GROUP_CATEGORY.get(op.group, "other")
                comm_s[cat] += d
                st_times.extra.append(("overlap comm", t, d, cat, op.name, op.layer))
            else:
                d = step_time(s, op)
                if op.kind == COMPUTE:
                    st_times.compute_s += d
                    st_times.extra.append(("compute", t, d, "compute", op.name, op.layer))
                    waited = op.host_us * 1e-6 - d  # the step's ops run in series: one of many small kernels waits
                    if waited > 0.0 and not op.graph:  # for its launches (host_model)
                        exposed_s["host"] += waited
                        st_times.extra.append(("host", t + d, waited, "host", op.name, op.layer))
                        d += waited
                else:
                    cat = GROUP_CATEGORY.get(op.group, "other")
                    exposed_s[cat] += d
                    comm_s[cat] += d
                    st_times.extra.append(("comm", t, d, cat, op.name, op.layer))
                clock[s] = t + d
            step_pos[s] += 1
        done[s] = True
        st_times.end_s = max(clock[s], grad_free[s])

    def play() -> None:
        while todo:
            s = todo.popleft()
            queued.discard(s)
            if not done[s]:
                advance(s)

    def play_to(targets: list[int]) -> bool:
        """Play until every stage stands at its target step; False if one cannot get there."""
        stop[:] = targets
        todo.clear()
        queued.clear()
        for s in range(pp):
            wake(s)
        play()
        return all(pos[s] == targets[s] for s in range(pp)) and not any(channels.values())

    cycles = _steady_cycles(scripts) if extrapolate or insert else None
    if cycles is not None and param_gathers is not None:  # the first forwards (their gathers) are played, not repeated
        cycles = [(starts[1:], length) for starts, length in cycles]
    inserted = False
    if cycles is not None:
        inserted = _extrapolate(scripts, cycles, times, clock, grad_free, pos, play_to, insert)
        stop[:] = [-1] * pp
        todo.clear()
        queued.clear()
        for s in range(pp):
            wake(s)
    play()
    if not all(done):
        stuck = [s for s in range(pp) if not done[s]]
        raise Deadlock(f"pipeline stages {stuck} wait on each other (steps {[pos[s] for s in stuck]})")
    iteration = max(t.end_s for t in times) if times else 0.0
    return EngineResult(iteration, times, inserted)


def _extrapolate(scripts: Sequence[StageScript], cycles: list[tuple[list[int], int]], times: list[StageTimes],
                 clock: list[float], grad_free: list[float], pos: list[int], play_to: Callable[[list[int]], bool],
                 insert: int = 0) -> bool:
    """Play from one steady cycle's start to the next on every stage until a cycle moves every stage by
    the same period (see :func:`run`), then jump over the following cycles that run its programs,
    stopping at a cycle start the engine then plays on from; or, with ``insert``, add that many copies of
    the cycle there.  Returns whether the copies were inserted."""
    shared = min(len(starts) for starts, _ in cycles)  # cycle starts every stage has (stage 0's)
    marks = [_marks(script) for script in scripts]

    def same(c: int) -> bool:
        """Whether cycle c runs, on every stage, the programs and p2p calls of cycle c - 1."""
        return c > 0 and all(m[starts[c - 1]:starts[c]] == m[starts[c]:starts[c] + length]
                             for m, (starts, length) in zip(marks, cycles))

    def snapshot() -> tuple:
        return (list(clock), list(grad_free), [(t.compute_s, dict(t.exposed_s), dict(t.comm_s), len(t.runs), len(t.extra),
                                                len(t.grad_instances)) for t in times])

    if shared < 3 or not play_to([starts[0] for starts, _ in cycles]):
        return False
    previous = snapshot()
    for c in range(1, shared - 1):
        if not play_to([starts[c] for starts, _ in cycles]):
            return False
        state = snapshot()
        period = _period(previous, state)
        if period is not None and same(c):
            if insert:
                if any(len(t.grad_instances) != stats[5] for t, stats in zip(times, previous[2])):
                    return False  # gradient buckets in the cycle: their instances would share steps
                _jump(times, clock, grad_free, pos, cycles, previous, period, insert, inserted=True,
                      first=[starts[c - 1] for starts, _ in cycles])
                return True
            skip = 0
            while c + skip < shared - 1 and same(c + skip):
                skip += 1
            _jump(times, clock, grad_free, pos, cycles, previous, period, skip)
            return False
        previous = state
    return False


def _period(before: tuple, after: tuple) -> float | None:
    """The period every stage's clock moved by between two snapshots (None if they differ), provided the
    gradient streams moved alike or stayed idle behind the clocks."""
    clocks0, grads0, _ = before
    clocks1, grads1, _ = after
    period = clocks1[0] - clocks0[0]
    if not period > 0:
        return None
    for a, b, ga, gb in zip(clocks0, clocks1, grads0, grads1):
        if abs((b - a) - period) > PERIOD_TOLERANCE_S:
            return None
        if not (ga <= a and gb <= b and ga == gb) and abs((gb - ga) - period) > PERIOD_TOLERANCE_S:
            return None
    return period


def _jump(times: list[StageTimes], clock: list[float], grad_free: list[float], pos: list[int],
          cycles: list[tuple[list[int], int]], before: tuple, period: float, skip: int, inserted: bool = False,
          first: list[int] | None = None) -> None:
    """Add ``skip`` more of the cycle played since the snapshot ``before`` to every stage: its period to
    the clocks (and to the gradient streams that ran), its steps to the positions (not when ``inserted``:
    the schedule has no steps for them), its sums to the sums."""
    _, grads0, stats0 = before
    for s, t in enumerate(times):
        compute0, exposed0, comm0, runs0, extra0, grads_seen0 = stats0[s]
        t.compute_s += skip * (t.compute_s - compute0)
        for cat in t.exposed_s:
            t.exposed_s[cat] += skip * (t.exposed_s[cat] - exposed0[cat])
        for cat in t.comm_s:
            t.comm_s[cat] += skip * (t.comm_s[cat] - comm0[cat])
        if grad_free[s] != grads0[s]:
            grad_free[s] += skip * period
        clock[s] += skip * period
        t.backward_end_s += skip * period
        length = cycles[s][1]
        if not inserted:
            pos[s] += skip * length
        t.repeat = Repeat(skip, period, length, (runs0, len(t.runs)), (extra0, len(t.extra)),
                          (grads_seen0, len(t.grad_instances)), inserted, first[s] if first else 0)


def bubble_s(stage: StageTimes, iteration_s: float) -> float:
    """Time the stage spends neither computing nor in exposed comm: waiting for other stages,
    and idle after it finishes until the last stage does."""
    idle = iteration_s - stage.compute_s - sum(stage.exposed_s.values())
    return 0.0 if abs(idle) < 1e-12 else idle  # float residue of the sums (under a picosecond) is no bubble

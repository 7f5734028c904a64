"""One model replica and its scheduler: the requests it holds, its paged KV cache and the step it runs next.

Requests are small slotted objects; the running batch is kept as aggregates, so that a step costs O(1) plus
O(log n) per request that joins or leaves it, never O(batch) (a serving run has 10^5-10^6 steps):

- the **decode group**: every request generating tokens in the replica's decode steps.  A member is described
  by the tick it joined (``t0``; a tick is one token of every member: a decode step advances the ticks by the
  tokens it emits per sequence, 1, or more with speculative decoding), its KV length and output count then (``l0``,
  ``g0``); at tick ``T`` its KV holds ``l0 + T - t0`` tokens.  The group keeps the sum of their KV lengths
  (``BatchStep.decode_context``), a heap of finish ticks (``t0 + output - g0``) and, for paged KV, how many members
  start a new block at each tick modulo 16: a member needs a block before the step that writes position ``k`` when
  ``k % 16 == 0``, i.e. at ticks ``T`` with ``(l0 - t0 + T) % 16 == 0``.
- **speculative decoding** (the cost model's ``tokens_per_decode_step`` ``tau`` > 1: K draft tokens verified per
  step, each accepted with probability a, ``tau = (1 - a^(K+1)) / (1 - a)``, Leviathan et al. 2023): every decode
  step emits a whole number of tokens per sequence, ``m_s = round((s + 1) tau) - round(s tau)`` for the replica's
  ``s``-th decode step, so that ``s`` steps emit ``round(s tau)`` tokens (the average is exact; every member of a
  step emits the same number, the acceptance's spread between sequences is left out).  The step's KV blocks cover
  the tokens it emits (a member crossing a block boundary inside them gets its block before the step); a request
  whose last step emits more tokens than it has left finishes at that step (the surplus is discarded, as vLLM
  truncates at ``max_tokens``).  Each step that gives a request tokens is one streamed chunk: vLLM's ITL is the
  gap between chunks, its TPOT ``(e2e - TTFT) / (output - 1)``.
- prefills in progress (``target`` tokens to compute, ``done`` so far; a recomputed request's target is its
  prompt plus the tokens it had generated, vLLM's recompute preemption).

Token accounting, as vLLM's engine: the prefill of ``p`` tokens fills ``p`` KV slots and samples the first output
token at its end; each decode step writes the KV of the previous token and samples the next one, so a request
of ``o`` output tokens takes ``o - 1`` decode steps and ends with ``p + o - 1`` tokens of KV.

The schedulers, one subclass each, are in :mod:`simulator.serve.schedulers`.
"""

from __future__ import annotations

import heapq
from array import array
from collections import deque
from dataclasses import dataclass
from typing import Any

from simulator.serve.requests import MAX_SPAN_S
from simulator.serve.step import BLOCK_TOKENS
from utils.errors import ConfigError


def blocks(tokens: int) -> int:
    """KV blocks holding ``tokens`` tokens (16 per block)."""
    return -(-tokens // BLOCK_TOKENS)


class Request:
    """One request and what happened to it (times in seconds from the run's start)."""

    __slots__ = ("rid", "arrival", "prompt", "output", "gen", "target", "done", "order", "first_token", "finish",
                 "preemptions", "scheduled", "marks", "t0", "l0", "g0", "version", "held", "where", "replica",
                 "swap_kv", "prefill_replica")

    def __init__(self, rid: int, arrival: float, prompt: int, output: int) -> None:
        self.rid = rid
        self.arrival = arrival
        self.prompt = prompt
        self.output = output
        self.gen = 0                 # output tokens sampled so far
        self.target = prompt         # tokens the (re)prefill computes
        self.done = 0                # of them computed so far
        self.order = 0               # admission order on its replica (preemption takes the largest)
        self.first_token = -1.0
        self.finish = -1.0
        self.preemptions = 0
        self.scheduled = -1.0        # start of the first step that ran it (queueing delay = scheduled - arrival)
        self.marks: list = []        # token times: a float per prefill's token, (replica, t0, t1) per decode span
        self.t0 = self.l0 = self.g0 = 0
        self.version = 0             # bumped when it leaves a decode group (stale heap entries are skipped)
        self.held = 0                # KV blocks held outside the decode group's implicit count
        self.where = "new"
        self.replica = -1
        self.swap_kv = 0
        self.prefill_replica = -1


@dataclass(frozen=True)
class SchedulerConfig:
    """What a replica's scheduler is allowed (vLLM's names in parentheses).

    ``max_batch``: running requests at most (``max_num_seqs``, vLLM's default 256); ``max_batched_tokens``: tokens
    one step may process (``max_num_batched_tokens``; without chunking vLLM V0 defaults it to ``max(max_model_len,
    2048)``, our engine to the workload's longest request or 2048); ``chunk_tokens``: Sarathi's token budget per
    step; ``watermark``: the share of KV blocks kept free when admitting (vLLM V0's 0.01); ``preemption``:
    ``recompute`` (vLLM's default) or ``swap``; ``max_model_len``: the length Orca and static batching reserve KV
    for; ``swap_bytes_per_s``: host link bytes/s per direction per GPU (swap preemption)."""

    max_batch: int = 256
    max_batched_tokens: int = 2048
    chunk_tokens: int = 2048
    watermark: float = 0.01
    preemption: str = "recompute"
    max_model_len: int = 2048
    swap_bytes_per_s: float = 64e9


class Replica:
    """A replica's state and the mechanics every scheduler shares; subclasses decide what a step runs
    (:meth:`schedule`).  ``role``: ``both``, or ``prefill`` / ``decode`` in a disaggregated deployment (a prefill
    replica hands requests over after their first token; a decode replica takes requests whose KV arrived)."""

    paged = True

    def __init__(self, index: int, cost: Any, config: SchedulerConfig, step_class: type, role: str = "both") -> None:
        self.index = index
        self.physical = index         # the replica (of GPUs) this scheduler runs on: a virtual engine's replica
        self.cost = cost
        self.config = config
        self.step_class = step_class
        self.role = role
        self.total_blocks = int(cost.kv_capacity_tokens) // BLOCK_TOKENS
        self.watermark = int(config.watermark * self.total_blocks)  # vLLM: int(watermark * num_gpu_blocks)
        self.free = self.total_blocks
        self.waiting: deque[Request] = deque()
        self.swapped: deque[Request] = deque()
        self.prefilling: list[Request] = []
        self.dec: dict[int, Request] = {}
        self.dec_ctx = 0
        self.res = [0] * BLOCK_TOKENS
        self.fin: list[tuple[int, int, int, Request]] = []
        self.tick = 0
        self.tick_times = array("d")  # the end of the step that emitted each tick (one entry per tick)
        self.tau = float(getattr(cost, "tokens_per_decode_step", 1.0) or 1.0)
        """Tokens a decode step emits per sequence on average (the cost model's; 1 without speculative decoding)."""
        self.spec_k = int(getattr(cost, "speculative_tokens", 0) or 0)
        """Draft tokens verified per sequence per decode step (each decode takes ``1 + spec_k`` tokens of a budget)."""
        self.decode_steps = 0
        self.m = 1                    # tokens per sequence the step being run emits
        self.busy = False
        self.outstanding = 0          # requests routed here and not finished or handed over (the router's count)
        self.link_free = 0.0          # when this replica's KV sender is free (disaggregation)
        self._order = 0
        # the step being run
        self.chunks: list[tuple[Request, int]] = []
        self.decoding = False
        self.grown = False            # this step's decodes already hold the blocks of their next tokens
        self.extra_s = 0.0
        # per-step log
        self.log_start = array("d")
        self.log_dur = array("d")
        self.log_prefill = array("q")
        self.log_prefill_seqs = array("q")
        self.log_decode = array("q")
        self.log_context = array("q")
        self.log_kv = array("q")
        self.log_swap = array("q")

    # ---- what the router and the engine see -------------------------------------------------------

    @property
    def running(self) -> int:
        return len(self.dec) + len(self.prefilling)

    def has_work(self) -> bool:
        return bool(self.waiting or self.swapped or self.prefilling or self.dec)

    def enqueue(self, req: Request) -> None:
        req.replica = self.index
        req.where = "waiting"
        self.waiting.append(req)

    def kv_tokens_used(self) -> int:
        return (self.total_blocks - self.free) * BLOCK_TOKENS

    # ---- the decode group ---------------------------------------------------------------------------

    def _join_decode(self, req: Request, kv: int) -> None:
        req.l0, req.g0, req.t0 = kv, req.gen, self.tick
        req.where = "decode"
        self.dec[req.rid] = req
        self.dec_ctx += kv
        self.res[(kv - self.tick) % BLOCK_TOKENS] += 1
        heapq.heappush(self.fin, (self.tick + req.output - req.gen, req.order, req.version, req))

    def _leave_decode(self, req: Request) -> int:
        """Take ``req`` out of the decode group at the current tick; its KV length then (with speculative decoding
        a finished request's last step may have emitted past its output: those slots were allocated and are freed
        with it, and its token count stops at its output)."""
        steps = self.tick - req.t0
        kv = req.l0 + steps
        req.gen = min(req.g0 + steps, req.output)
        del self.dec[req.rid]
        self.dec_ctx -= kv
        self.res[(req.l0 - req.t0) % BLOCK_TOKENS] -= 1
        req.version += 1
        if steps:
            req.marks.append((self.index, req.t0, self.tick))
        return kv

    def _release(self, req: Request, kv: int) -> None:
        """Free the blocks ``req`` holds with ``kv`` tokens of KV."""
        self.free += blocks(kv) if self.paged else req.held
        req.held = 0

    def _admit(self, req: Request, now: float) -> None:
        self._order += 1
        req.order = self._order
        if req.scheduled < 0:
            req.scheduled = now

    # ---- preemption ---------------------------------------------------------------------------------

    def _youngest(self) -> Request | None:
        """The running request admitted last (vLLM preempts from the end of its running queue)."""
        best = None
        for req in self.dec.values():
            if best is None or req.order > best.order:
                best = req
        for req in self.prefilling:
            if best is None or req.order > best.order:
                best = req
        return best

    def _preempt(self, victim: Request, swapped_out: list[int]) -> None:
        victim.preemptions += 1
        if victim.where == "decode":
            if self.grown and self.paged:
                # the blocks given this step for its next tokens (Sarathi preempts after the decodes grew)
                self.free += self._step_blocks(victim)
            kv = self._leave_decode(victim)
            self._release(victim, kv)
            if self.config.preemption == "swap":
                victim.swap_kv = kv
                victim.where = "swapped"
                self.swapped.append(victim)
                swapped_out.append(kv)
                return
        else:  # a prefill in progress: its chunks are recomputed
            self.prefilling.remove(victim)
            self._release(victim, victim.done)
        victim.target = victim.prompt + victim.gen
        victim.done = 0
        victim.where = "waiting"
        self.waiting.appendleft(victim)

    def _grow_decodes(self, swapped_out: list[int]) -> bool:
        """Give every decoding request the block its next token needs, preempting the youngest running request
        until they fit (vLLM's ``_schedule_running``); whether anything was preempted."""
        if not self.paged:
            return False
        preempted = False
        if self.m == 1:
            need = self.res[(-self.tick) % BLOCK_TOKENS]
        elif self.m <= BLOCK_TOKENS:  # members whose boundary falls on one of the step's m ticks
            need = sum(self.res[(-(self.tick + j)) % BLOCK_TOKENS] for j in range(self.m))
        else:  # more than a block per step (K > 15): count each member's boundaries
            need = sum(self._step_blocks(req) for req in self.dec.values())
        while need > self.free:
            victim = self._youngest()
            if victim is None:
                break
            if victim.where == "decode":
                need -= self._step_blocks(victim)
            self._preempt(victim, swapped_out)
            preempted = True
        self.free -= need
        self.grown = True
        return preempted

    def _step_blocks(self, req: Request) -> int:
        """New KV blocks decode member ``req`` needs for the ``m`` tokens of this step (positions ``k .. k + m - 1``
        with ``k = l0 - t0 + tick``: one per multiple of 16 among them)."""
        first = (-(req.l0 - req.t0 + self.tick)) % BLOCK_TOKENS  # offset of the first block boundary in the step
        return 0 if first >= self.m else 1 + (self.m - 1 - first) // BLOCK_TOKENS

    def _tokens_this_step(self) -> int:
        """Tokens per sequence the next decode step emits: ``round((s + 1) tau) - round(s tau)`` (1 without
        speculative decoding)."""
        if self.tau == 1.0:
            return 1
        s = self.decode_steps
        return max(int((s + 1) * self.tau + 0.5) - int(s * self.tau + 0.5), 1)

    def _advance_decodes(self, now: float) -> None:
        """The decode step ended at ``now``: every member gained ``m`` tokens."""
        m = self.m
        self.tick += m
        if m == 1:
            self.tick_times.append(now)
        else:
            self.tick_times.extend([now] * m)
        self.dec_ctx += len(self.dec) * m
        self.decode_steps += 1

    def _take_transferred(self, now: float) -> None:
        """A decode replica admits requests whose KV arrived, while blocks (above the watermark) and
        ``max_batch`` allow, in arrival order."""
        while self.waiting and self.running < self.config.max_batch:
            req = self.waiting[0]
            kv = req.prompt + req.gen - 1
            need = blocks(kv)
            if self.free - need < self.watermark and self.running:
                break
            self.waiting.popleft()
            self._admit(req, now)
            self.free -= need
            self._join_decode(req, kv)

    # ---- a step -------------------------------------------------------------------------------------

    def schedule(self, now: float) -> tuple[Any, list[int], list[int]] | None:
        """Decide the next step (fills :attr:`chunks`, :attr:`decoding`); None when there is nothing to run.
        Returns the step and the tokens swapped out and in."""
        raise NotImplementedError

    def start(self, now: float) -> float | None:
        """Schedule and price the next step; its duration (s), or None when the replica has nothing to run."""
        self.chunks = []
        self.decoding = False
        self.grown = False
        self.m = self._tokens_this_step()
        planned = self.schedule(now)
        if planned is None:
            return None
        step, out, into = planned
        duration = self.cost.step_s(step)
        swap_tokens = sum(out) + sum(into)
        if swap_tokens:
            # every GPU of the replica moves its share of the KV over its own host link, out and in in turn
            # (vLLM swaps before the model runs, blocking the step)
            duration += swap_tokens * self.cost.kv_bytes_per_token / self.config.swap_bytes_per_s
        if not duration >= 0:
            raise ValueError(f"the step cost model returned {duration!r} s for {step}")
        if duration > MAX_SPAN_S:  # a plausible step takes seconds: this one would swallow the run's clock
            raise ConfigError(f"a step of replica {self.index} at {now:.6g} s would take {duration:.3g} s"
                              + (f" ({swap_tokens:,} tokens swapped at --swap_gbps "
                                 f"{self.config.swap_bytes_per_s / 1e9:g})" if swap_tokens else "")
                              + f", more than {MAX_SPAN_S:.0e} s: check --swap_gbps and the step costs")
        self.log_start.append(now)
        self.log_dur.append(duration)
        self.log_prefill.append(step.prefill_tokens)
        self.log_prefill_seqs.append(step.prefill_seqs)
        self.log_decode.append(step.decode_seqs)
        self.log_context.append(step.decode_context)
        self.log_kv.append(self.total_blocks - self.free)
        self.log_swap.append(swap_tokens)
        self.busy = True
        return duration

    def _step(self) -> Any:
        prefill_tokens = 0
        attention = 0.0
        for req, q in self.chunks:
            prefill_tokens += q
            attention += q * (req.done + (q + 1) / 2)
        decodes = len(self.dec) if self.decoding else 0
        return self.step_class(prefill_tokens, attention, decodes, self.dec_ctx if self.decoding else 0,
                               len(self.chunks))

    def complete(self, now: float) -> tuple[list[Request], list[Request]]:
        """End the step at ``now``: the requests that finished, and those whose prefill ended on a prefill
        replica (to hand over)."""
        self.busy = False
        finished: list[Request] = []
        handover: list[Request] = []
        if self.decoding and self.dec:
            self._advance_decodes(now)
            fin = self.fin
            while fin and fin[0][0] <= self.tick:
                _, _, version, req = heapq.heappop(fin)
                if version != req.version or req.rid not in self.dec:
                    continue
                self._finish_decode(req, now, finished)
        for req, q in self.chunks:
            req.done += q
            if req.done < req.target:
                continue
            self.prefilling.remove(req)
            req.gen += 1
            req.marks.append(now)
            if req.first_token < 0:
                req.first_token = now
            if req.gen >= req.output:
                self._release(req, req.target)
                self._done(req, now, finished)
            elif self.role == "prefill":
                req.where = "transfer"
                req.held = blocks(req.target) if self.paged else req.held
                handover.append(req)
            else:
                self._join_decode(req, req.target)
        self.chunks = []
        return finished, handover

    def _finish_decode(self, req: Request, now: float, finished: list[Request]) -> None:
        kv = self._leave_decode(req)
        self._release(req, kv)
        self._done(req, now, finished)

    def _done(self, req: Request, now: float, finished: list[Request]) -> None:
        req.finish = now
        req.where = "done"
        self.outstanding -= 1
        finished.append(req)

    def _start_prefill(self, req: Request, q: int, now: float) -> None:
        self._admit(req, now)
        req.where = "prefill"
        self.prefilling.append(req)
        self.chunks.append((req, q))

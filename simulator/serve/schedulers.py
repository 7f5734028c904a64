"""The schedulers of a replica, one :class:`~simulator.serve.replica.Replica` subclass each (see their docstrings
for what they copy):

- :class:`VllmReplica`: vLLM's V0 default scheduler (prefill-first, no chunking);
- :class:`SarathiReplica`: Sarathi-Serve's chunked prefill with a token budget (vLLM V1's default scheduler);
- :class:`OrcaReplica`: Orca's iteration-level scheduling with KV reserved for the longest request;
- :class:`TrtllmReplica`: TensorRT-LLM's in-flight batching with its default ``GUARANTEED_NO_EVICT`` capacity
  policy (each request reserves the KV of its prompt and whole output; nothing is preempted);
- :class:`StaticReplica`: static batching (a batch runs to its longest request), the baseline.
"""

from __future__ import annotations

import heapq
from typing import Any

from simulator.serve.replica import Replica, Request, blocks
from simulator.serve.step import BLOCK_TOKENS


class VllmReplica(Replica):
    """vLLM's V0 scheduler without chunked prefill (``vllm/core/scheduler.py``, ``_schedule_default``): when no
    request is swapped out, a step admits waiting requests first come first served while their whole prompts fit
    the token budget, ``max_batch`` and the free blocks minus the watermark; a step that admitted any runs those
    prefills alone.  Otherwise it decodes every running request, preempting the youngest when a new token finds
    no block, and swaps requests back in when nothing was preempted."""

    def schedule(self, now: float) -> tuple[Any, list[int], list[int]] | None:
        if self.role == "decode":
            self._take_transferred(now)
        elif not self.swapped:
            budget = self.config.max_batched_tokens
            while self.waiting and self.running < self.config.max_batch:
                req = self.waiting[0]
                need = blocks(req.target)
                # a prompt longer than the budget runs alone (vLLM refuses it; the engine checks that up front)
                if req.target > budget and self.chunks:
                    break
                if self.free - need < self.watermark:
                    break
                self.waiting.popleft()
                self.free -= need
                budget -= req.target
                self._start_prefill(req, req.target, now)
            if self.chunks:
                return self._step(), [], []
        out: list[int] = []
        into: list[int] = []
        preempted = self._grow_decodes(out)
        if not preempted:
            self._swap_in(into, now)
        if not self.dec:
            return None
        self.decoding = True
        return self._step(), out, into

    def _swap_in(self, into: list[int], now: float) -> None:
        """Bring swapped-out requests back (first out, first in) while ``max_batch`` and the blocks above the
        watermark allow; each also gets the block its token of this step writes (the decodes' blocks were
        given before)."""
        while self.swapped and self.running < self.config.max_batch:
            req = self.swapped[0]
            need = blocks(req.swap_kv + self.m)
            if self.free - need < self.watermark:
                break
            self.swapped.popleft()
            self.free -= need
            into.append(req.swap_kv)
            self._join_decode(req, req.swap_kv)


class SarathiReplica(VllmReplica):
    """Sarathi-Serve's stall-free batching (Agrawal et al., OSDI 2024): every step first decodes every running
    request (preempting the youngest when blocks run out), then spends the rest of the token budget
    (``chunk_tokens``) on prefill chunks: the prefills in progress first, then waiting requests first come first
    served while ``max_batch`` and the free blocks above the watermark allow.  This is vLLM V1's default scheduler
    (``vllm/v1/core/sched/scheduler.py``: decodes and chunked prefills share a step under
    ``max_num_batched_tokens``), and vLLM V0's with ``--enable-chunked-prefill``."""

    def schedule(self, now: float) -> tuple[Any, list[int], list[int]] | None:
        if self.role == "decode":
            return super().schedule(now)
        out: list[int] = []
        into: list[int] = []
        preempted = self._grow_decodes(out)
        if not preempted:
            self._swap_in(into, now)
        # every decode takes its verified tokens of the budget (1, or 1 + K with speculative decoding: vLLM V1
        # counts the draft tokens against max_num_batched_tokens)
        budget = self.config.chunk_tokens - len(self.dec) * (1 + self.spec_k)
        # prefills in progress keep their blocks; each chunk allocates what it adds
        for req in list(self.prefilling):
            if budget <= 0:
                break
            q = min(req.target - req.done, budget)
            need = blocks(req.done + q) - blocks(req.done)
            while need > self.free:
                victim = self._youngest()
                if victim is None or victim is req or any(victim is other for other, _ in self.chunks):
                    break  # never a request this step already runs
                self._preempt(victim, out)
            if need > self.free or req not in self.prefilling:
                break
            self.free -= need
            self.chunks.append((req, q))
            budget -= q
        while budget > 0 and self.waiting and self.running < self.config.max_batch and not self.swapped:
            req = self.waiting[0]
            q = min(req.target, budget)
            need = blocks(q)
            if self.free - need < self.watermark:
                break
            self.waiting.popleft()
            self.free -= need
            budget -= q
            self._start_prefill(req, q, now)
        self.decoding = bool(self.dec)
        if not self.chunks and not self.decoding:
            return None
        return self._step(), out, into


class OrcaReplica(Replica):
    """Orca's iteration-level scheduling (Yu et al., OSDI 2022), as Vidur models it: requests join the batch at
    any iteration, a new request's whole prompt runs in the iteration it joins beside the others' decodes, and
    without paged KV each admitted request reserves the KV of ``max_model_len`` tokens (so nothing is ever
    preempted, and ``max_batch`` is also bounded by ``capacity / max_model_len``)."""

    paged = False
    reserves_max_model_len = True
    """Each request reserves ``max_model_len`` tokens of KV (else its own prompt and output)."""

    def _reservation(self, req: Request) -> int:
        """KV blocks ``req`` reserves when it is admitted."""
        return blocks(self.config.max_model_len)

    def schedule(self, now: float) -> tuple[Any, list[int], list[int]] | None:
        budget = self.config.max_batched_tokens - len(self.dec) * (1 + self.spec_k)
        while self.waiting and self.running < self.config.max_batch:
            req = self.waiting[0]
            reserve = self._reservation(req)
            if self.free < reserve:
                break
            if req.target > budget and (self.chunks or not self.reserves_max_model_len):
                break  # Orca runs an oversized prompt alone; TensorRT-LLM without context chunking never does
            self.waiting.popleft()
            self.free -= reserve
            req.held = reserve
            budget -= req.target
            if self.role == "decode":
                self._admit(req, now)
                self._join_decode(req, req.prompt + req.gen - 1)
                continue
            self._start_prefill(req, req.target, now)
        self.decoding = bool(self.dec)
        if not self.chunks and not self.decoding:
            return None
        return self._step(), [], []


class TrtllmReplica(OrcaReplica):
    """TensorRT-LLM's in-flight batching with its default scheduler (PyTorch backend; NVIDIA's "Useful Runtime
    Options": ``GUARANTEED_NO_EVICT`` is the default capacity policy, "to guarantee that a started request is never
    paused"; ``SchedulerConfig.capacity_scheduler_policy``): a request is admitted, first come first served, only
    when the KV blocks of its prompt and of its whole output (``max_tokens``) can be reserved for it, so nothing is
    ever evicted and the batch is bounded by ``capacity / (prompt + output)``; the micro-batch scheduler fills a
    step of ``max_num_tokens`` (``--max_batched_tokens``) with every running request's decode (``1 + K`` tokens
    each with speculative decoding), then whole prompts (context chunking is off by default: a prompt that does not
    fit the rest of the budget waits for the next step), up to ``max_batch_size`` (``--max_batch``) requests.
    ``trtllm-bench``'s own choice of the two limits: :func:`simulator.serve.trtllm.bench_settings`."""

    reserves_max_model_len = False

    def _reservation(self, req: Request) -> int:
        return blocks(req.prompt + req.output)


class StaticReplica(Replica):
    """Static batching, the baseline (FasterTransformer's and Hugging Face ``generate``'s): when the replica is
    idle it takes up to ``max_batch`` waiting requests (first come first served, while the batch's reserved KV,
    ``size x`` its longest prompt + output, fits), prefills them in one step and decodes the whole batch until
    its longest request is done.  A finished request keeps its slot and its compute (padding) until then; nobody
    joins a batch in flight."""

    paged = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.live = 0

    def schedule(self, now: float) -> tuple[Any, list[int], list[int]] | None:
        if self.dec:  # a batch in flight decodes to its end
            self.decoding = True
            return self._step(), [], []
        batch: list[Request] = []
        longest = 0
        while self.waiting and len(batch) < self.config.max_batch:
            req = self.waiting[0]
            length = max(longest, req.prompt + req.output)
            if (len(batch) + 1) * blocks(length) > self.free and batch:
                break
            batch.append(self.waiting.popleft())
            longest = length
        if not batch:
            return None
        reserve = blocks(longest)
        for req in batch:
            self.free -= reserve
            req.held = reserve
            if self.role == "decode":
                self._admit(req, now)
                self._join_decode(req, req.prompt + req.gen - 1)
            else:
                self._start_prefill(req, req.target, now)
        self.live = len(batch)
        self.decoding = bool(self.dec)
        return self._step(), [], []

    def complete(self, now: float) -> tuple[list[Request], list[Request]]:
        self.busy = False
        finished: list[Request] = []
        if self.decoding and self.dec:
            self._advance_decodes(now)
            while self.fin and self.fin[0][0] <= self.tick:
                _, _, version, req = heapq.heappop(self.fin)
                if version == req.version and req.where == "decode":
                    self._ghost(req, now, finished)
        handover: list[Request] = []
        for req, q in self.chunks:
            req.done += q
            self.prefilling.remove(req)
            req.gen += 1
            req.marks.append(now)
            if req.first_token < 0:
                req.first_token = now
            if self.role == "prefill":
                req.where = "transfer"
                handover.append(req)
                continue
            # every member joins the decode group, finished ones as padding
            self._join_decode(req, req.target)
            if req.gen >= req.output:
                self._ghost(req, now, finished)
        self.chunks = []
        if self.role == "prefill" and handover:
            self.live = 0
        if self.live == 0 and not self.prefilling:
            self._end_batch()
        return finished, handover

    def _ghost(self, req: Request, now: float, finished: list[Request]) -> None:
        """``req`` is done but keeps computing as padding until the batch ends."""
        steps = self.tick - req.t0
        if steps:
            req.marks.append((self.index, req.t0, self.tick))
        req.gen = min(req.g0 + steps, req.output)
        req.where = "padding"
        self.live -= 1
        self._done(req, now, finished)

    def _end_batch(self) -> None:
        self.dec.clear()
        self.dec_ctx = 0
        self.res = [0] * BLOCK_TOKENS
        self.fin.clear()
        if self.role != "prefill":
            self.free = self.total_blocks


SCHEDULERS = {"vllm": VllmReplica, "sarathi": SarathiReplica, "orca": OrcaReplica, "static": StaticReplica,
              "trtllm": TrtllmReplica}
"""``--scheduler`` values."""

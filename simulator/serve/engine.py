"""The discrete-event engine of a serving run: arrivals, a global router, replicas stepping independently, and
the KV handover of a disaggregated deployment.

Events sit in one heap ordered by time; at one instant, arrivals and KV handovers are taken before the steps
that end then, and every replica with work and no step in flight starts its next step once all of the
instant's events are in (so a request arriving when a step ends joins the next step).  A step's duration is the
replica's :class:`~simulator.serve.step.StepCost` of its :class:`~simulator.serve.step.BatchStep`.

Router (``--router``), deciding at arrival: ``round_robin``; ``least_outstanding`` (fewest requests routed to the
replica and not finished, ties to the lowest index); ``kv_aware`` (most free KV blocks, ties by the fewest
outstanding).  A disaggregated deployment (``--disaggregate P:D``) routes arrivals over the prefill pool and, when
a request's prefill ends, over the decode pool with the same policy (vLLM's disaggregated proxy picks both ends of
a request); a prefill replica sends one request's KV at a time (``StepCost.kv_transfer_s`` between the two
replicas, its KV blocks held until the transfer ends), and the decode replica admits the request when its KV has
arrived and its blocks are free (the KV waits in the decode replica's queue meanwhile).

Pipeline parallelism (``Deployment.engines`` = pp): each replica runs ``pp`` schedulers (vLLM's virtual engines),
each with ``1/pp`` of the KV cache; the router spreads requests over all of them.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator.serve.replica import Replica, Request, SchedulerConfig, blocks
from simulator.serve.requests import MAX_SPAN_S, Workload, limit_of
from simulator.serve.schedulers import SCHEDULERS
from simulator.serve.step import batch_step_class
from utils.errors import ConfigError

ROUTERS = ("round_robin", "least_outstanding", "kv_aware")
_ARRIVE, _KV_READY, _STEP_END = 0, 1, 2


@dataclass(frozen=True)
class Deployment:
    """Replicas and their scheduler: ``replicas`` in all; ``prefill_replicas`` of them a prefill pool (0: no
    disaggregation); ``scheduler`` one of :data:`~simulator.serve.replica.SCHEDULERS`."""

    replicas: int = 1
    scheduler: str = "vllm"
    router: str = "round_robin"
    prefill_replicas: int = 0
    config: SchedulerConfig = SchedulerConfig()
    engines: int = 1
    """Schedulers per replica: vLLM runs one virtual engine per pipeline stage (``pipeline_parallel_size``
    schedulers, each with its share of the KV cache, their steps in flight through the stages at once)."""

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ConfigError(f"--replicas must be at least 1, got {self.replicas}")
        if self.scheduler not in SCHEDULERS:
            raise ConfigError(f"--scheduler {self.scheduler!r} is not one of {', '.join(SCHEDULERS)}")
        if self.router not in ROUTERS:
            raise ConfigError(f"--router {self.router!r} is not one of {', '.join(ROUTERS)}")
        if self.engines < 1:
            raise ConfigError(f"a replica needs at least one scheduler, got {self.engines}")
        if self.prefill_replicas and not 0 < self.prefill_replicas < self.replicas:
            raise ConfigError(f"--disaggregate needs prefill and decode replicas: {self.prefill_replicas} of "
                              f"{self.replicas} for prefill")


@dataclass
class RunResult:
    """What a run produced: the requests (in id order), the replicas (their step logs), the workload and the
    deployment."""

    requests: list[Request]
    replicas: list[Replica]
    workload: Workload
    deployment: Deployment
    cost: Any
    decode_cost: Any = None


class Router:
    """Chooses a replica of ``pool`` for each request (see the module's docstring)."""

    def __init__(self, policy: str, pool: list[Replica]) -> None:
        self.policy = policy
        self.pool = pool
        self.next = 0

    def choose(self) -> Replica:
        if self.policy == "round_robin" or len(self.pool) == 1:
            replica = self.pool[self.next % len(self.pool)]
            self.next += 1
            return replica
        if self.policy == "least_outstanding":
            return min(self.pool, key=lambda r: (r.outstanding, r.index))
        return min(self.pool, key=lambda r: (-r.free, r.outstanding, r.index))


def check_fits(workload: Workload, replicas: list[Replica], deployment: Deployment) -> None:
    """Refuse a workload a replica could never serve (vLLM refuses to start when ``max_model_len`` exceeds the KV
    cache, and refuses a prompt longer than the token budget without chunked prefill)."""
    if not len(workload):
        return
    longest = int(np.max(workload.prompt + workload.output))
    longest_at = int(np.argmax(workload.prompt + workload.output))
    for replica in replicas:
        capacity = replica.total_blocks * 16
        whole_length = not replica.paged and getattr(replica, "reserves_max_model_len", True)
        what = "Orca's and static batching's reservation" if whole_length else "the request"
        need = max(longest, deployment.config.max_model_len) if whole_length else longest
        if need > capacity:
            raise ConfigError(f"request {longest_at} needs {longest} tokens of KV cache ({what}: {need}), more than a "
                              f"replica holds ({capacity} tokens = {replica.total_blocks} blocks of 16): give more GPUs "
                              "per replica (--tensor_model_parallel_size), a smaller --kv_dtype or shorter requests")
        if not replica.paged:
            continue
        step_tokens = math.ceil(replica.tau)  # the most tokens one decode step writes per sequence (speculative)
        if step_tokens > 1 and longest - 2 + step_tokens > capacity:
            raise ConfigError(f"request {longest_at} needs up to {longest - 2 + step_tokens} tokens of KV cache (its "
                              f"{longest} tokens and the {step_tokens} a speculative decode step writes), more than a "
                              f"replica holds ({capacity} tokens = {replica.total_blocks} blocks of 16): lower "
                              "--speculative_tokens or --acceptance_rate, or give the replica more KV cache")
        if replica.role != "decode":
            # vLLM admits a waiting request (its prompt, Sarathi its first chunk) only while the free blocks stay
            # above the watermark: a prompt larger than the rest would wait forever (vLLM ignores it as too long)
            first = workload.prompt if deployment.scheduler != "sarathi" else np.minimum(
                workload.prompt, deployment.config.chunk_tokens)
            usable = replica.total_blocks - replica.watermark
            at = int(np.argmax(first))
            if blocks(int(first[at])) > usable:
                raise ConfigError(f"request {at}'s prompt needs {blocks(int(first[at]))} KV blocks of 16 tokens to be "
                                  f"admitted, more than the {usable} of a replica's {replica.total_blocks} above the "
                                  f"--watermark {deployment.config.watermark:g} ({replica.watermark} blocks): lower "
                                  "--watermark, give the replica more KV cache or shorten the prompt")
    if deployment.scheduler in ("vllm", "trtllm") and replicas[0].role != "decode":
        long_prompt = int(np.max(workload.prompt))
        if long_prompt > deployment.config.max_batched_tokens:
            who = "vLLM" if deployment.scheduler == "vllm" else "TensorRT-LLM"
            raise ConfigError(f"a prompt of {long_prompt} tokens exceeds --max_batched_tokens "
                              f"{deployment.config.max_batched_tokens}: {who} refuses it without chunked prefill "
                              "(--scheduler sarathi, or a larger --max_batched_tokens)")


def _too_big(what: str, limit: int) -> ConfigError:
    return ConfigError(f"{what}, above the limit of {limit:,} requests + schedulers + replica steps a run may take "
                       "(--max_items): lower --num_requests, the replicas (--replicas; serve-search: --gpus) or "
                       "--output_tokens, or raise --max_items if the machine has the time and memory for it")


def check_size(workload: Workload, cost: Any, deployment: Deployment, limit: int) -> int:
    """Refuse a run whose requests, schedulers and fewest possible replica steps (its longest answer's decode steps,
    and every answer's tokens over the schedulers' batches) already exceed ``limit``, before any replica is built;
    returns the steps the run may take."""
    n = len(workload)
    schedulers = deployment.replicas * deployment.engines
    tau = float(getattr(cost, "tokens_per_decode_step", 1.0) or 1.0)
    tau = tau if 1.0 <= tau < float("inf") else 1.0
    longest = int(np.max(workload.output)) if n else 0
    total = float(np.sum(workload.output, dtype=np.float64)) if n else 0.0
    steps = max(math.ceil(longest / tau), math.ceil(total / (tau * schedulers * deployment.config.max_batch)))
    items = n + schedulers + steps
    if items > limit:
        raise _too_big(f"the run would take at least {items:,} items ({n:,} requests, {schedulers:,} scheduler(s) and "
                       f"at least {steps:,} replica steps)", limit)
    return limit - n - schedulers


class _Share:
    """A replica's cost model seen by one of its ``engines`` virtual engines: the same steps, its share of the KV
    cache."""

    def __init__(self, cost: Any, engines: int) -> None:
        self.cost = cost
        self.kv_capacity_tokens = int(cost.kv_capacity_tokens) // engines
        self.kv_bytes_per_token = cost.kv_bytes_per_token
        self.replica_gpus = cost.replica_gpus
        self.step_s = cost.step_s
        self.kv_transfer_s = cost.kv_transfer_s
        self.tokens_per_decode_step = getattr(cost, "tokens_per_decode_step", 1.0)
        self.speculative_tokens = getattr(cost, "speculative_tokens", 0)


def _share(cost: Any, engines: int) -> Any:
    return cost if engines == 1 else _Share(cost, engines)


def _transfer(cost: Any) -> Callable[[int, int, int], float]:
    """``(tokens, source replica, destination replica) -> s``: the cost model's ``kv_transfer_s`` with the replicas
    when it takes them (placed on consecutive GPUs, the fabric decides the path), else with the tokens alone."""
    import inspect

    try:
        params = inspect.signature(cost.kv_transfer_s).parameters
    except (TypeError, ValueError):
        params = {}
    if len(params) >= 3:
        return lambda tokens, src, dst: cost.kv_transfer_s(tokens, src, dst)
    return lambda tokens, src, dst: cost.kv_transfer_s(tokens)


def simulate(workload: Workload, cost: Any, deployment: Deployment, decode_cost: Any = None,
             on_progress: Callable[[int], None] | None = None, max_items: int | None = None) -> RunResult:
    """Serve ``workload`` on ``deployment``'s replicas, each priced by ``cost`` (the decode pool's by
    ``decode_cost`` when given); returns every request with its times and every replica's step log.  A run
    larger than ``max_items`` (:data:`simulator.serve.requests.MAX_ITEMS`) requests + schedulers + steps is
    refused (:func:`check_size`) or stopped when its steps pass it, with a :class:`~utils.errors.ConfigError`."""
    limit = limit_of(max_items)
    step_budget = check_size(workload, cost, deployment, limit)
    steps = 0
    step_class = batch_step_class()
    kind = SCHEDULERS[deployment.scheduler]
    engines = deployment.engines
    n_prefill = deployment.prefill_replicas * engines
    replicas: list[Replica] = []
    for i in range(deployment.replicas * engines):
        role = "both" if not n_prefill else ("prefill" if i < n_prefill else "decode")
        priced = decode_cost if role == "decode" and decode_cost is not None else cost
        replica = kind(i, _share(priced, engines), deployment.config, step_class, role)
        replica.physical = i // engines
        replicas.append(replica)
    check_fits(workload, replicas, deployment)
    front = Router(deployment.router, replicas[:n_prefill] if n_prefill else replicas)
    back = Router(deployment.router, replicas[n_prefill:]) if n_prefill else None
    transfer = _transfer(cost)
    n = len(workload)
    prompt = workload.prompt.tolist()
    output = workload.output.tolist()
    requests: list[Request] = []
    heap: list[tuple[float, int, int, Any]] = []
    open_loop = workload.arrival_s is not None
    if open_loop:
        times = workload.arrival_s.tolist()
        requests = [Request(i, times[i], prompt[i], output[i]) for i in range(n)]
        # arrivals are fed in order, one pending at a time: the heap stays as small as the replicas' steps
        heap.append((requests[0].arrival, _ARRIVE, 0, requests[0]))
        issued = 1
    else:
        issued = min(workload.concurrency or 1, n)
        requests = [Request(i, 0.0, prompt[i], output[i]) for i in range(issued)]
        heap = [(0.0, _ARRIVE, i, req) for i, req in enumerate(requests)]
    seq = len(heap)
    dirty: dict[Replica, None] = {}  # insertion-ordered: replicas start in a reproducible order
    completed = 0
    push = heapq.heappush
    pop = heapq.heappop
    while heap:
        now = heap[0][0]
        while heap and heap[0][0] == now:
            _, kind_of, _, obj = pop(heap)
            if kind_of == _ARRIVE:
                req = obj
                if open_loop and issued < n:  # the next arrival of an open loop
                    nxt = requests[issued]
                    push(heap, (nxt.arrival, _ARRIVE, seq, nxt))
                    seq += 1
                    issued += 1
                replica = front.choose()
                replica.outstanding += 1
                replica.enqueue(req)
                dirty.setdefault(replica)
            elif kind_of == _STEP_END:
                replica = obj
                finished, handover = replica.complete(now)
                dirty.setdefault(replica)
                for req in handover:  # the decode replica is chosen now; the KV goes to it on the sender's turn
                    assert back is not None
                    target = back.choose()
                    target.outstanding += 1
                    req.prefill_replica = replica.index
                    req.replica = target.index
                    start = max(now, replica.link_free)
                    moved = transfer(req.target, replica.physical, target.physical)
                    if not 0 <= moved <= MAX_SPAN_S:  # as a step (replica.py): a plausible transfer takes seconds
                        raise ConfigError(f"moving request {req.rid}'s KV ({req.target:,} tokens) from replica "
                                          f"{replica.index} to {target.index} would take {moved:.3g} s: check the KV "
                                          "transfer costs (--step_cost's transfer_s, transfer_token_s)")
                    end = start + moved
                    replica.link_free = end
                    push(heap, (end, _KV_READY, seq, req))
                    seq += 1
                if finished:
                    completed += len(finished)
                    if on_progress is not None:
                        on_progress(len(finished))
                    if not open_loop:
                        for _ in finished:
                            if issued < n:
                                req = Request(issued, now, prompt[issued], output[issued])
                                requests.append(req)
                                issued += 1
                                push(heap, (now, _ARRIVE, seq, req))
                                seq += 1
            else:  # _KV_READY: the request's KV is on the decode side
                req = obj
                source = replicas[req.prefill_replica]
                source.free += req.held
                req.held = 0
                source.outstanding -= 1
                dirty.setdefault(source)
                target = replicas[req.replica]
                target.enqueue(req)
                dirty.setdefault(target)
        for replica in dirty:
            if not replica.busy and replica.has_work():
                duration = replica.start(now)
                if duration is not None:
                    push(heap, (now + duration, _STEP_END, seq, replica))
                    seq += 1
                    steps += 1
                    if steps > step_budget:
                        raise _too_big(f"the run passed {limit:,} items ({n:,} requests, {len(replicas):,} "
                                       f"scheduler(s) and {steps:,} replica steps, {completed:,} requests done at {now:.6g} s "
                                       "simulated)", limit)
        dirty.clear()
    stuck = [r for r in requests if r.finish < 0]
    if stuck:  # a bug, not a user error: every request fits a replica (check_fits)
        raise RuntimeError(f"{len(stuck)} requests never finished (first: {stuck[0].rid}, {stuck[0].where})")
    return RunResult(requests, replicas, workload, deployment, cost, decode_cost)

"""Megatron-LM's pipeline schedules as sequences of steps, for one pipeline rank.

Reference: Megatron-LM core ``megatron/core/pipeline_parallel/schedules.py``
(``forward_backward_pipelining_without_interleaving`` and ``..._with_interleaving``) and
``p2p_communication.py``.  Each step is a forward or backward of one micro-batch on one model chunk,
or one call of the p2p layer with the operations it batches (``batch_isend_irecv``).  The operations
of a call are listed in Megatron's batching order: send_prev, recv_prev, send_next, recv_next.

The same steps drive the workload generator (items of one rank) and the simulator (the schedule of
every stage, played against the others).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

P2P_ORDER = ("send_prev", "recv_prev", "send_next", "recv_next")


@dataclass(frozen=True, slots=True)
class Step:
    """``kind`` is ``"F"``, ``"B"`` or ``"P2P"``.  F/B carry the micro-batch and model chunk; P2P the
    operations it batches, the Megatron function that issues them and its phase
    (``forward_step`` or ``backward_step``)."""

    kind: str
    microbatch: int = -1
    chunk: int = 0
    ops: tuple[str, ...] = ()
    name: str = ""
    phase: str = ""


_P2P_STEPS: dict[tuple[str, str, tuple[str, ...]], Step] = {}
"""One object per distinct p2p call (steps are immutable; a long schedule repeats a few calls)."""


def _p2p(name: str, phase: str, wanted: dict[str, bool]) -> list[Step]:
    ops = tuple(op for op in P2P_ORDER if wanted.get(op))
    if not ops:
        return []
    key = (name, phase, ops)
    step = _P2P_STEPS.get(key)
    if step is None:
        step = _P2P_STEPS[key] = Step("P2P", ops=ops, name=name, phase=phase)
    return [step]


def one_f_one_b(pp: int, rank: int, microbatches: int) -> list[Step]:
    """The non-interleaved 1F1B schedule of pipeline rank ``rank``: ``min(pp - rank - 1, m)``
    warm-up forwards, steady 1F1B, then the cool-down backwards."""
    first, last = rank == 0, rank == pp - 1
    warmup = min(pp - rank - 1, microbatches)
    remaining = microbatches - warmup
    steps: list[Step] = []
    fwd = bwd = 0
    for _ in range(warmup):
        steps += _p2p("recv_forward", "forward_step", {"recv_prev": not first})
        steps.append(Step("F", fwd))
        fwd += 1
        steps += _p2p("send_forward", "forward_step", {"send_next": not last})
    if remaining:
        steps += _p2p("recv_forward", "forward_step", {"recv_prev": not first})
    for i in range(remaining):
        steps.append(Step("F", fwd))
        fwd += 1
        steps += _p2p("send_forward_recv_backward", "forward_step", {"send_next": not last, "recv_next": not last})
        steps.append(Step("B", bwd))
        bwd += 1
        if i == remaining - 1:
            steps += _p2p("send_backward", "backward_step", {"send_prev": not first})
        else:
            steps += _p2p("send_backward_recv_forward", "backward_step", {"send_prev": not first, "recv_prev": not first})
    for _ in range(warmup):
        steps += _p2p("recv_backward", "backward_step", {"recv_next": not last})
        steps.append(Step("B", bwd))
        bwd += 1
        steps += _p2p("send_backward", "backward_step", {"send_prev": not first})
    return steps


def interleaved(pp: int, rank: int, microbatches: int, chunks: int) -> list[Step]:
    """Megatron's interleaved 1F1B schedule with ``chunks`` model chunks per rank.

    Needs ``microbatches % pp == 0`` (checked by ParallelConfig).  Virtual micro-batch ``k`` runs on
    chunk ``(k mod pp*v) div pp`` forward and on the mirrored chunk backward; p2p wraps around the
    pipeline (the last rank's chunk c feeds the first rank's chunk c + 1).
    """
    v, first, last = chunks, rank == 0, rank == pp - 1
    total = microbatches * v

    def chunk_of(k: int, forward: bool) -> int:
        c = (k % (pp * v)) // pp
        return c if forward else v - 1 - c

    def microbatch_of(k: int) -> int:
        return (k // (pp * v)) * pp + k % pp

    if microbatches == pp:
        warmup, all_warmup = total, True
    else:
        warmup, all_warmup = min((pp - rank - 1) * 2 + (v - 1) * pp, total), False
    remaining = total - warmup
    steps: list[Step] = []

    def forward(k: int) -> None:
        steps.append(Step("F", microbatch_of(k), chunk_of(k, True)))

    def backward(k: int) -> None:
        steps.append(Step("B", microbatch_of(k), chunk_of(k, False)))

    steps += _p2p("recv_forward", "forward_step", {"recv_prev": not first})
    for k in range(warmup):
        forward(k)
        recv_prev = not (first and chunk_of(k + 1, True) == 0) and k != total - 1
        send_next = not (last and chunk_of(k, True) == v - 1)
        if k == warmup - 1 and not all_warmup:
            steps += _p2p("send_forward_backward_recv_forward_backward", "forward_step",
                          {"send_next": send_next, "recv_prev": recv_prev, "recv_next": not last})
        else:
            steps += _p2p("send_forward_recv_forward", "forward_step", {"send_next": send_next, "recv_prev": recv_prev})
    for k in range(remaining):
        fk = k + warmup
        forward(fk)
        backward(k)
        send_next = not (last and chunk_of(fk, True) == v - 1)
        send_prev = not (first and chunk_of(k, False) == 0)
        # the first stage runs pp - 1 micro-batches ahead of the last, and vice versa
        recv_prev = not (first and chunk_of(fk - (pp - 1), True) == v - 1)
        recv_next = not (last and chunk_of(k - (pp - 1), False) == 0)
        if k == remaining - 1:
            recv_prev = False
        steps += _p2p("send_forward_backward_recv_forward_backward", "backward_step",
                      {"send_prev": send_prev, "recv_prev": recv_prev, "send_next": send_next, "recv_next": recv_next})
    if all_warmup:
        steps += _p2p("recv_backward", "backward_step", {"recv_next": not last})
    for k in range(remaining, total):
        backward(k)
        recv_next = not (last and chunk_of(k + 1, False) == v - 1) and k != total - 1
        send_prev = not (first and chunk_of(k, False) == 0)
        steps += _p2p("send_backward_recv_backward", "backward_step", {"send_prev": send_prev, "recv_next": recv_next})
    return steps


def pipeline_schedule(pp: int, rank: int, microbatches: int, chunks: int = 1) -> list[Step]:
    """The schedule Megatron runs on ``rank``: no pipelining (all forwards and backwards in turn per
    micro-batch) when ``pp == 1``, 1F1B, or interleaved 1F1B with ``chunks > 1``.  (A new list each
    call; the steps, immutable, are built once per distinct arguments: a simulation asks for every
    stage's schedule several times.)"""
    return list(_schedule(pp, rank, microbatches, chunks))


@lru_cache(maxsize=512)
def _schedule(pp: int, rank: int, microbatches: int, chunks: int) -> tuple[Step, ...]:
    return tuple(_build_schedule(pp, rank, microbatches, chunks))


def _build_schedule(pp: int, rank: int, microbatches: int, chunks: int) -> list[Step]:
    if pp == 1:
        steps: list[Step] = []
        for m in range(microbatches):
            steps += [Step("F", m), Step("B", m)]
        return steps
    if chunks > 1:
        return interleaved(pp, rank, microbatches, chunks)
    return one_f_one_b(pp, rank, microbatches)

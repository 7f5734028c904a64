"""Host memory a replay needs on one machine, checked by ``aicb.py --check`` before anything starts.

A job that cannot fit the machine's memory used to pass the check and fail after minutes (AIOB timing on rank 0,
then every rank allocating its buffers).  On a CPU (gloo) every rank's buffers live in host memory: the two
buffers the plan sizes (:attr:`replay.plan.Plan.main_bytes`, ``aux_bytes``), the matmul operands of
``--compute_mode gemm`` (one pair per distinct shape, all kept), and each process's torch; AIOB timing without a
GPU builds its largest operation in host memory too (:func:`mocked_model.aiob.host_memory.aiob_peak`).  Each term
is a lower bound, so a refusal means the job could not have fitted; the refusal names the terms, the largest
first, and the memory available (``MemAvailable``).

Ranks on this machine: ``LOCAL_WORLD_SIZE`` (set by torchrun), else every rank of ``--world_size``: a replay on
CPUs runs on one machine unless told otherwise (``LOCAL_WORLD_SIZE=N aicb.py ... --check`` checks N per host).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from typing import Any

from utils.errors import ConfigError
from utils.units import format_size

TORCH_PROCESS_BYTES = 150 << 20
"""A process that has imported torch and joined a gloo group holds at least this much (about 220 MB measured
with torch 2 on Linux; the bound stays below)."""


def ranks_on_host(world: int) -> int:
    """How many ranks run on this machine: ``LOCAL_WORLD_SIZE`` when a launcher set it (or the user), else all."""
    try:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", ""))
    except ValueError:
        return world
    return max(1, min(local, world))


def gemm_operand_bytes(shapes: Iterable[Any], element: int = 4) -> int:
    """Bytes of ``--compute_mode gemm``'s operands: each distinct matmul shape pair once (as the replay keeps
    them, float32 on a CPU)."""
    total = 0
    for pair in {tuple(map(tuple, s)) for s in shapes if s is not None and len(s) == 2}:
        a, b = pair
        if len(a) >= 2 and len(b) >= 2 and (a[-1] == b[-2] or a[-1] == b[-1]):
            total += (math.prod(a) + math.prod(b)) * element
    return total


MESSAGES_SMALLER = "more tp, pp or ep, or a shorter --seq_length or --micro_batch, makes the messages smaller"
"""How to make a training job's replay buffers smaller (a collective sweep's: a smaller --end_size)."""


def host_terms(per_stage: Sequence[tuple[int, int]], world: int, pp: int, aiob_bytes: int = 0,
               aiob_what: str = "", smaller: str = MESSAGES_SMALLER) -> list[tuple[str, int, str]]:
    """The terms of a CPU replay's host memory: ``per_stage`` (buffer bytes, gemm operand bytes) of each pipeline
    stage's rank (with AIOB, of the stage's untimed workload: the messages do not depend on the times), ``aiob_bytes`` of rank 0's
    timing (0: none on this host's CPU); ``smaller``: how to make the buffers smaller.  Each term: (what, bytes,
    how to make it smaller)."""
    local = ranks_on_host(world)
    terms: list[tuple[str, int, str]] = []
    if per_stage:
        def spread(values: list[int]) -> int:
            # all ranks here: each stage's ranks; some: the fewest bytes any stage's rank takes (a lower bound)
            return sum(v * (world // pp) for v in values) if local == world else local * min(values)

        buffers = spread([b for b, _ in per_stage])
        gemm = spread([g for _, g in per_stage])
        largest = max(b for b, _ in per_stage)
        if buffers:
            terms.append((f"the replay buffers of {local} rank(s) (up to {format_size(largest)} each: the largest "
                          "message's buffers)", buffers, smaller))
        if gemm:
            terms.append((f"the matmul operands of --compute_mode gemm in {local} rank(s)", gemm,
                          "--compute_mode sleep replays recorded times without them"))
    if aiob_bytes:
        terms.append((f"AIOB timing on this CPU (rank 0; its largest operation, {aiob_what})", aiob_bytes,
                      "--gpu_type GPU prices the computation with the compute model instead of timing this CPU; "
                      "more tp, or a shorter --seq_length or --micro_batch, makes the operations smaller"))
    terms.append((f"torch in {local} process(es)", local * TORCH_PROCESS_BYTES, "fewer ranks per host"))
    return terms


def check_host_memory(terms: list[tuple[str, int, str]], available: int | None, world: int) -> None:
    """Refuse (one line, :class:`ConfigError`) when the terms exceed ``available`` bytes; nothing when unknown.
    The line names every term, the largest first, and how to make the largest smaller."""
    if available is None:
        return
    total = sum(size for _, size, _ in terms)
    if total <= available:
        return
    ordered = sorted(terms, key=lambda t: -t[1])
    parts = "; ".join(f"{name}: {format_size(size)}" for name, size, _ in ordered if size)
    hint = f" ({ordered[0][2]})"
    if ranks_on_host(world) == world and world > 1:
        hint += "; LOCAL_WORLD_SIZE=N checks N ranks per host"
    raise ConfigError(f"the replay needs at least {format_size(total)} of host memory on this machine but "
                      f"{format_size(available)} is available (MemAvailable): {parts}{hint}")

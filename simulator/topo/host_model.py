"""The host (CPU) in ``--model topo``: it issues every op of a step after that op's CPU cost, and the GPU starts an op
only once it is issued (docs/sim_model.md, "Time of one iteration"; costs in :mod:`mocked_model.compute.host`).

:func:`compile_program <simulator.topo.engine.compile_program>` plays one F/B program on two clocks:

- the CPU's, from the step's start: each op adds its ``host_us``; the ops of one CUDA graph (``Op.graph``) add one
  replay (:data:`~mocked_model.compute.host.GRAPH_REPLAY_US`) for all of them;
- the GPU's compute stream: an op starts at the latest of the stream's end, its dependencies and its issue time; the
  gap is the GPU waiting for the host, booked to the ``host`` term;
- a host-device synchronisation: ``SYNC_WAIT`` (DeepEP's and HybridEP's dispatch) makes the CPU wait until the GPU has
  finished everything issued before, then issue the op; ``SYNC_EVENT_COMM`` / ``SYNC_EVENT_NEXT`` (the alltoall and
  allgather dispatchers' copies) record the op's end and make the CPU wait for it before the next collective / the
  next op; each wait adds :data:`~mocked_model.compute.host.SYNC_US`.  The queue is then empty: the GPU idles while the
  CPU issues what follows.

Every step starts with the CPU and the GPU together (the CPU's lead over the previous step is not carried: at most one
op's cost per step, and Megatron's MoE layers drain it at every dispatch anyway).  Ops without host costs (SimAI
files, compute hooks) leave the engine exactly as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mocked_model.compute.host import GRAPH_REPLAY_US, SYNC_EVENT_COMM, SYNC_EVENT_NEXT, SYNC_US, SYNC_WAIT

SYNC_S = SYNC_US * 1e-6
REPLAY_S = GRAPH_REPLAY_US * 1e-6


def uses_host(ops) -> bool:
    """Whether any op of a program carries a host cost, a synchronisation or a graph."""
    return any(op.host_us or op.host_sync or op.graph for op in ops)


class HostClock:
    """The CPU's clock through one program (seconds from the step's start), its current graph and the device-to-host
    copy it will wait for (``pending``: ``SYNC_EVENT_*``, at GPU time ``event``)."""

    __slots__ = ("cpu", "graph", "event", "pending")

    def __init__(self) -> None:
        self.cpu = 0.0
        self.graph = ""
        self.event = 0.0
        self.pending = 0

    def issue(self, op, gpu_done: float, collective: bool) -> float:
        """When the CPU has issued ``op`` (seconds); ``gpu_done``: when the GPU finishes what was issued before it
        (the compute stream's clock); ``collective``: the op is a communication (an alltoall copy's wait point)."""
        if self.pending == SYNC_EVENT_NEXT or (self.pending == SYNC_EVENT_COMM and collective):
            self.cpu = max(self.cpu, self.event) + SYNC_S
            self.pending = 0
        if op.host_sync == SYNC_WAIT:
            self.cpu = max(self.cpu, gpu_done) + SYNC_S
        if op.graph:
            if op.graph != self.graph:
                self.cpu += REPLAY_S
        else:
            self.cpu += op.host_us * 1e-6
        self.graph = op.graph
        return self.cpu

    def done(self, op, gpu_end: float) -> None:
        """``op`` ends on the GPU at ``gpu_end``: a device-to-host copy after it is ready then."""
        if op.host_sync == SYNC_EVENT_COMM or op.host_sync == SYNC_EVENT_NEXT:
            self.event = gpu_end
            self.pending = op.host_sync


def job_host_hook(job: Any) -> Callable[[Any], tuple[float, int, str]]:
    """``item -> (CPU microseconds, synchronisation, graph)`` for a Megatron job (:func:`mocked_model.compute.host.
    host_cost`, each item's kernels counted by the compute model once per distinct operation)."""
    from mocked_model.compute import precision
    from mocked_model.compute.host import HostSetup, host_cost
    from mocked_model.compute.ops import kernels_of, price_key

    setup = HostSetup.of(job)
    p = precision(job.training.dtype)  # kernel counts do not depend on the GPU
    counts: dict = {}

    def kernels(item) -> int:
        key = price_key(item)
        found = counts.get(key) if key is not None else None
        if found is None:
            ks = kernels_of(item, p)
            found = sum(k.count for k in ks) if ks else 1
            if key is not None:
                counts[key] = found
        return found

    def host(item) -> tuple[float, int, str]:
        n = kernels(item) if item.comm_type._value_ == "computation" else 1
        cost = host_cost(item, setup, n)
        return cost.us, cost.sync, cost.graph

    return host

"""The workload generator driver: init, then per iteration the pipeline schedule's forwards,
backwards and p2p calls, then the step; ``epoch_end`` markers separate the blocks.

Subclasses (Megatron, DeepSpeed, ...) say what each part communicates; the driver owns the order.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from utils.config import JobConfig
from utils.progress import progress
from utils.workload import CommGroup, CommType, WorkItem, Workload
from workload_generator.schedules import Step, pipeline_schedule

_P2P_PEER = {"send_next": 1, "recv_next": 1, "send_prev": -1, "recv_prev": -1}


class WorkloadGenerator:
    """Produce the :class:`Workload` of one rank of a job.

    ``generator()`` returns the workload: init items, an ``epoch_end`` marker, then for each of
    ``--epoch_num`` iterations the schedule's items and the step's, each followed by ``epoch_end``.
    """

    name = "workload_generator"

    def __init__(self, job: JobConfig, rank: int = 0) -> None:
        self.job = job
        self.rank = rank

    def __call__(self) -> Workload:
        items: list[WorkItem] = []
        self.init(items)
        items.append(WorkItem(CommType.epoch_end))
        epochs = self.job.training.epoch_num
        bar = progress(total=epochs * (len(self.schedule()) + 1), desc=f"generating ({self.name})", unit="step")
        for _ in range(epochs):
            self.iteration(items, bar.update)
            items.append(WorkItem(CommType.epoch_end))
        bar.close()
        return Workload(items=items, config=self.job, rank=self.rank, generator=self.name)

    # ---- parts a subclass fills in --------------------------------------------------------------

    def init(self, out: list[WorkItem]) -> None:
        """Items before the first iteration (model setup)."""

    def schedule(self) -> list[Step]:
        """The steps of one iteration on this rank (default: every micro-batch forward then backward)."""
        return pipeline_schedule(1, 0, self.job.parallel.ga)

    def forward(self, out: list[WorkItem], step: Step) -> None:
        """Items of one micro-batch's forward on one model chunk."""

    def backward(self, out: list[WorkItem], step: Step) -> None:
        """Items of one micro-batch's backward on one model chunk."""

    def p2p(self, out: list[WorkItem], step: Step) -> None:
        """Items of one pipeline p2p call (one item per batched operation)."""

    def step(self, out: list[WorkItem]) -> None:
        """Items after the last backward of an iteration (gradient sync, optimizer)."""

    def step_key(self, step: Step) -> Hashable | None:
        """A key shared by the schedule steps whose items are the same objects (the simulator builds one
        program per key); None when a generator makes no such promise."""
        return None

    @classmethod
    def stage_signature(cls, job: JobConfig, pp_rank: int) -> Hashable | None:
        """A key shared by the pipeline stages whose workloads are the same apart from the global
        layer indices in their items' names and the peers of their p2p items (the simulator builds one
        such stage and renumbers its layers for the others); None when a generator makes no such
        promise."""
        return None

    def layer_ranges(self) -> list[tuple[int, int]]:
        """``(first global transformer layer, layer count)`` of each model chunk (the layer numbers
        :meth:`stage_signature` leaves out); empty when the generator has no chunks."""
        return []

    def step_items(self, step: Step) -> list[WorkItem]:
        """The items of one schedule step (what :meth:`iteration` appends for it)."""
        out: list[WorkItem] = []
        if step.kind == "F":
            self.forward(out, step)
        elif step.kind == "B":
            self.backward(out, step)
        else:
            self.p2p(out, step)
        return out

    # ---- the driver -----------------------------------------------------------------------------

    def iteration(self, out: list[WorkItem], tick: Callable[[], Any] | None = None) -> None:
        """One iteration's items; ``tick()`` after each schedule step and the optimizer step (a progress bar)."""
        for step in self.schedule():
            if step.kind == "F":
                self.forward(out, step)
            elif step.kind == "B":
                self.backward(out, step)
            else:
                self.p2p(out, step)
            if tick is not None:
                tick()
        self.step(out)
        if tick is not None:
            tick()


def p2p_items(step: Step, nbytes: int, pp: int, pp_rank: int) -> list[WorkItem]:
    """One isend/irecv item per operation of a p2p call, in Megatron's batching order.

    ``additional`` is the direction (``send_next``, ...), the stage ``<phase>.<megatron function>``
    (the replay batches consecutive items of one call), and ``dst``/``src`` the peer's index in the
    pipeline group (wrapping around, as the interleaved schedule does).
    """
    stage = f"{step.phase}.{step.name}"
    out = []
    for op in step.ops:
        peer = (pp_rank + _P2P_PEER[op]) % pp
        send = op.startswith("send")
        out.append(WorkItem(
            comm_type=CommType.isend if send else CommType.irecv, comm_group=CommGroup.pp_group, comm_group_size=pp,
            msg_size=nbytes, stage=stage, dst=peer if send else None, src=None if send else peer, additional=op,
        ))
    return out

"""Mocked modules: trees of named modules with per-rank parameter shapes whose forward and
backward return work items instead of computing.

Subclasses build their items once (:meth:`MockedModule.forward_items`) and the generators reuse
the same lists for every micro-batch; items are therefore shared between micro-batches and must
be treated as read-only by consumers that keep per-occurrence data (replay logs keep their own
records).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from math import prod

from utils.workload import CommGroup, CommType, WorkItem


@dataclass(slots=True)
class MockedParam:
    """One parameter as one rank holds it.

    ``shape`` is the per-rank shape (Megatron's layout: column-parallel weights are
    ``(out / tp, in)``, row-parallel ``(out, in / tp)``).  ``tp_sharded`` says whether the tensor is
    split across tensor-parallel ranks (False for norms and row-parallel biases, which every TP rank
    holds whole).  ``sequence_parallel`` marks the parameters whose gradients Megatron all-reduces
    over the TP group under sequence parallelism.  ``shared_copy`` marks the last pipeline stage's
    copy of tied word embeddings: it holds memory and a gradient but is not a parameter of its own.
    ``is_expert`` puts the parameter in the expert gradient buffer (reduced over expert-DP).
    ``shared_embedding`` is Megatron's mark on a tied embedding weight of a multi-stage pipeline
    (synchronised over the embedding group; its own DP bucket with the distributed optimizer).
    """

    name: str
    shape: tuple[int, ...]
    tp_sharded: bool = True
    sequence_parallel: bool = False
    shared_copy: bool = False
    is_expert: bool = False
    shared_embedding: bool = False

    @property
    def numel(self) -> int:
        return prod(self.shape)


class MockedModule:
    """A named node of the mocked model tree.

    Subclasses set ``self.params`` (their own :class:`MockedParam` list, in registration order)
    and ``self.children``, and implement :meth:`build_forward` / :meth:`build_backward`.
    """

    name: str = "module"

    def __init__(self, name: str) -> None:
        self.name = name
        self.params: list[MockedParam] = []
        self.children: list[MockedModule] = []
        self._fwd: dict[str, list[WorkItem]] = {}
        self._bwd: list[WorkItem] | None = None

    def parameters(self) -> Iterator[MockedParam]:
        """Own parameters, then the children's, depth first (PyTorch's registration order)."""
        yield from self.params
        for child in self.children:
            yield from child.parameters()

    def num_params(self) -> int:
        return sum(p.numel for p in self.parameters())

    def forward_items(self, phase: str = "forward") -> list[WorkItem]:
        """Items of one forward pass (cached).  ``phase`` prefixes the stage names; recomputation
        in backward uses ``phase="recompute"``."""
        cached = self._fwd.get(phase)
        if cached is None:
            cached = self._fwd[phase] = self.build_forward(phase)
        return cached

    def backward_items(self) -> list[WorkItem]:
        """Items of one backward pass (cached)."""
        if self._bwd is None:
            self._bwd = self.build_backward()
        return self._bwd

    def build_forward(self, phase: str) -> list[WorkItem]:
        out: list[WorkItem] = []
        for child in self.children:
            out.extend(child.forward_items(phase))
        return out

    def build_backward(self) -> list[WorkItem]:
        if not self.children:  # no items of its own (an empty pipeline stage, ``E||t|L``): else it recursed forever
            return []
        return [item for _, items in self.backward_segments() for item in items]

    def backward_segments(self) -> list[tuple[MockedModule, list[WorkItem]]]:
        """Backward as ``(module, items)`` pieces in execution order, down to the leaves, so that a
        generator can act when a leaf's parameter gradients are ready (bucketed DP reduction)."""
        if not self.children:
            return [(self, self.backward_items())]
        segments: list[tuple[MockedModule, list[WorkItem]]] = []
        for child in reversed(self.children):
            segments.extend(child.backward_segments())
        return segments


def comm(ctype: CommType, group: CommGroup, size: int, nbytes: int, stage: str, meta: dict | None = None,
         **kw) -> WorkItem:
    """A communication item (``nbytes`` bytes over a group of ``size`` ranks)."""
    return WorkItem(comm_type=ctype, comm_group=group, comm_group_size=size, msg_size=int(nbytes), stage=stage,
                    meta=meta, **kw)


def compute(stage: str, shapes: tuple[tuple[int, ...], ...], flops: float | None, meta: dict | None = None) -> WorkItem:
    """A computation item with operand shapes and floating-point operations."""
    return WorkItem(comm_type=CommType.computation, stage=stage, shapes=shapes, flops=flops, meta=meta)

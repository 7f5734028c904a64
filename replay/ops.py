"""The torch.distributed call of each communication kind, with equivalents where a backend lacks one.

Reference: PyTorch's "Distributed communication package" (``torch.distributed``), whose backend
table lists what gloo runs on CPU tensors.  Earlier releases lack some collectives on gloo (the table
long marked ``reduce_scatter`` and ``all_to_all`` unsupported there, and ``all_gather_into_tensor``
came late).  The torch this project pins (2.13) runs every one of them on gloo, bf16 included (we
probed each with two processes); the emulations stay for other builds and for comparison:

- all_gather (into one tensor): ``all_gather`` into a list of views of the output (same bytes moved);
- reduce_scatter: ``all_reduce`` of the whole input, then this rank's chunk copied out (moves about
  twice the bytes of a reduce-scatter: its time is an upper bound);
- all_to_all (single tensor): one ``batch_isend_irecv`` exchanging a chunk with every other member
  (same bytes moved);
- reduce: ``all_reduce`` (the root gets the same result; the others receive it too);
- batched p2p: single ``isend`` / ``irecv`` calls waited together.

An emulation is used when ``--emulate`` names the operation, or when the backend raises "not
supported" for it (checked locally before anything is sent, so every rank switches together); the
replay marks those rows ``emulated``.  Every call blocks until the operation has completed
(``async_op=False`` or ``wait()``), so a host clock around it measures the operation.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

_UNSUPPORTED = re.compile(r"not support|no support|unsupported|not implemented", re.IGNORECASE)
# torch >= 2.13 renamed the tensor forms (the old names warn); fall back for older releases
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


@dataclass(frozen=True, slots=True)
class P2P:
    """One operation of a batched p2p call: send (or receive) ``tensor`` to (from) global rank ``peer``."""

    send: bool
    tensor: torch.Tensor
    peer: int


class Collectives:
    """Runs communications on given tensors; each method returns True when it ran an emulation."""

    def __init__(self, backend: str, emulate: Iterable[str] = (), barrier_device: int | None = None) -> None:
        self.backend = backend
        self.emulated = set(emulate)
        # NCCL's barrier wants the device it runs on (else it guesses and warns)
        self._barrier_kw: dict[str, Any] = {"device_ids": [barrier_device]} if barrier_device is not None else {}

    def _run(self, name: str, native: Callable[[], Any], emulation: Callable[[], Any]) -> bool:
        if name not in self.emulated:
            try:
                native()
                return False
            except (RuntimeError, NotImplementedError) as exc:
                if self.backend != "gloo" or not _UNSUPPORTED.search(str(exc)):
                    raise
            self.emulated.add(name)
        emulation()
        return True

    def all_reduce(self, tensor: torch.Tensor, pg: Any) -> bool:
        dist.all_reduce(tensor, group=pg)
        return False

    def broadcast(self, tensor: torch.Tensor, root: int, pg: Any) -> bool:
        """``root`` is a global rank."""
        dist.broadcast(tensor, src=root, group=pg)
        return False

    def reduce(self, tensor: torch.Tensor, root: int, pg: Any) -> bool:
        """``root`` is a global rank."""
        return self._run("reduce", lambda: dist.reduce(tensor, dst=root, group=pg),
                         lambda: dist.all_reduce(tensor, group=pg))

    def barrier(self, pg: Any) -> bool:
        dist.barrier(group=pg, **self._barrier_kw)
        return False

    def all_gather(self, output: torch.Tensor, input: torch.Tensor, pg: Any, size: int) -> bool:
        """``output`` holds ``size`` times ``input``'s elements."""
        return self._run("all_gather", lambda: _ALL_GATHER(output, input, group=pg),
                         lambda: dist.all_gather(list(output.chunk(size)), input, group=pg))

    def reduce_scatter(self, output: torch.Tensor, input: torch.Tensor, pg: Any, size: int, group_rank: int) -> bool:
        """``input`` holds ``size`` times ``output``'s elements.  The emulation overwrites ``input``."""
        def emulation() -> None:
            dist.all_reduce(input, group=pg)
            output.copy_(input.chunk(size)[group_rank])

        return self._run("reduce_scatter", lambda: _REDUCE_SCATTER(output, input, group=pg), emulation)

    def all_to_all(self, output: torch.Tensor, input: torch.Tensor, pg: Any, ranks: Sequence[int], me: int) -> bool:
        """Equal splits: chunk j of ``input`` goes to member j (global rank ``ranks[j]``); ``me`` is
        this rank's index in the group."""
        def emulation() -> None:
            sends, recvs = input.chunk(len(ranks)), output.chunk(len(ranks))
            ops = []
            for j, peer in enumerate(ranks):
                if j != me:
                    ops += [P2P(True, sends[j], peer), P2P(False, recvs[j], peer)]
            recvs[me].copy_(sends[me])
            self._p2p_batch(ops, pg)

        return self._run("all_to_all", lambda: dist.all_to_all_single(output, input, group=pg), emulation)

    def p2p(self, ops: Sequence[P2P], pg: Any) -> bool:
        """One batched p2p call (Megatron's ``batch_isend_irecv``), waited to completion."""
        return self._run("p2p", lambda: self._p2p_batch(ops, pg), lambda: self._p2p_single(ops, pg))

    @staticmethod
    def _p2p_batch(ops: Sequence[P2P], pg: Any) -> None:
        if not ops:
            return
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend if op.send else dist.irecv, op.tensor, op.peer, pg)
                                        for op in ops])
        for work in works:
            work.wait()

    @staticmethod
    def _p2p_single(ops: Sequence[P2P], pg: Any) -> None:
        works = [(dist.isend if op.send else dist.irecv)(op.tensor, op.peer, group=pg) for op in ops]
        for work in works:
            if work is not None:
                work.wait()

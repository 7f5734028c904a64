"""Megatron's data-parallel gradient buckets, sized as a real run sends them.

Reference: Megatron-LM core ``megatron/core/distributed/distributed_data_parallel.py`` and
``param_and_grad_buffer.py`` (core_r0.8):

- parameters fill the buffer in reverse registration order (the order backward produces grads);
- the bucket size is ``--ddp_bucket_size`` or ``max(40M, 1M * dp)`` elements, but there is a single
  bucket per buffer without ``--overlap_grad_reduce`` and on every pipeline rank but the first;
  a bucket closes once it holds at least that many elements (parameters are never split);
- with the distributed optimizer each parameter starts at a multiple of 64 elements, each bucket
  ends at a multiple of ``lcm(dp, 128)`` elements, and a tied (shared) embedding weight on a
  pipeline with more than one stage gets a bucket of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, lcm

from mocked_model.base import MockedParam


@dataclass(frozen=True)
class Bucket:
    """``numel`` elements (padded); ``params`` the names of its parameters in buffer order;
    ``last_param`` the parameter whose gradient completes the bucket in backward."""

    index: int
    numel: int
    params: tuple[str, ...]

    @property
    def last_param(self) -> str:
        return self.params[-1]


def default_bucket_size(dp: int) -> int:
    """Megatron's default bucket size in elements: ``max(40_000_000, 1_000_000 * dp)``."""
    return max(40_000_000, 1_000_000 * dp)


def _pad(value: int, divisor: int) -> int:
    return ceil(value / divisor) * divisor


def grad_buckets(params: list[MockedParam], dp: int, bucket_size: int | None, distributed_optimizer: bool,
                 shared_embedding: frozenset[str] = frozenset()) -> list[Bucket]:
    """Buckets of one gradient buffer.

    ``params`` in registration order; ``bucket_size`` in elements or ``None`` for one bucket;
    ``shared_embedding`` the names of parameters Megatron marks ``shared_embedding``.
    """
    buckets: list[Bucket] = []
    members: list[str] = []
    bucket_start = param_start = 0
    param_end = 0

    def pad_end(index: int) -> int:
        return _pad(index, lcm(dp, 128)) if distributed_optimizer else index

    def close(end: int) -> int:
        nonlocal bucket_start, members
        padded = pad_end(end)
        buckets.append(Bucket(len(buckets), padded - bucket_start, tuple(members)))
        bucket_start, members = padded, []
        return padded

    for param in reversed(params):
        if distributed_optimizer:
            param_start = _pad(param_start, 64)
        own_bucket = distributed_optimizer and param.name in shared_embedding
        if own_bucket and members:
            if param_start % dp:
                param_start = pad_end(param_start)
            param_start = close(param_start)
        param_end = param_start + param.numel
        members.append(param.name)
        if (bucket_size is not None and param_end - bucket_start >= bucket_size) or own_bucket:
            param_start = close(param_end)
        else:
            param_start = param_end
    if members:
        close(param_end)
    return buckets


def forward_key(param: str, num_layers: int) -> str:
    """The simulator's layer key (:func:`simulator.topo.programs` ``_layer_key``) of the forward items that first use
    parameter ``param``: ``layers.N`` for a transformer layer's, ``layers.<num_layers + k>`` for MTP layer ``k``'s
    own (:mod:`mocked_model.mtp`), ``embedding`` and ``output`` for the embedding's and the output layer's and
    final norm's."""
    parts = param.split(".")
    if parts[0] == "layers" and len(parts) > 1:
        return f"layers.{parts[1]}"
    if parts[0] == "mtp" and len(parts) > 2:
        return f"layers.{num_layers + int(parts[2])}"
    if parts[0] == "embedding":
        return "embedding"
    return "output"

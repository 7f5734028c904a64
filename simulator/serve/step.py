"""What the serving engine asks of a step-cost model: :class:`BatchStep` (what one scheduler step runs on one
replica) and :class:`StepCost` (its price, the replica's KV capacity and the KV transfer between replicas).

This is the interface of issue 27 between the engine (this package) and the step-cost model
(:mod:`simulator.serve.cost`, the compute model and the topology).  The engine keeps the aggregates below
incrementally, so that a step is priced in O(1) whatever the batch holds; it never hands a cost model a list of
requests.  :class:`LinearStepCost` is a cost given by coefficients: the tests derive timelines from it by hand,
and it prices what-if studies of a measured profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from mocked_model.inference_memory import KV_BLOCK_TOKENS

BLOCK_TOKENS = KV_BLOCK_TOKENS
"""Tokens per paged KV block (:data:`mocked_model.inference_memory.KV_BLOCK_TOKENS`, vLLM's default)."""


def _batch_step_class() -> type:
    """The step-cost model's own :class:`BatchStep` when :mod:`simulator.serve.cost` defines one (engineer STEP's
    module), else ours: the same fields, so that either prices the other."""
    try:
        from simulator.serve import cost
    except ImportError:
        return _BatchStep
    return getattr(cost, "BatchStep", _BatchStep)


@dataclass(frozen=True)
class _BatchStep:
    """What one scheduler step runs on one replica.

    ``prefill_tokens``: new prompt tokens processed in the step (all chunks); ``prefill_attention``: the causal
    attention work of those chunks, the sum over prefilling requests of ``q x (ctx_before + (q + 1) / 2)`` for a
    chunk of ``q`` tokens after ``ctx_before`` cached ones (token-pairs, so FLOPs = 4 x heads x head_dim x this per
    layer); ``decode_seqs``: requests generating one token; ``decode_context``: the sum of their context lengths
    (tokens already in their KV cache, read once by the decode attention); ``prefill_seqs``: requests with a
    prefill chunk in the step."""

    prefill_tokens: int
    prefill_attention: float
    decode_seqs: int
    decode_context: int
    prefill_seqs: int = 0


@runtime_checkable
class StepCost(Protocol):
    """A replica's step-cost model (seconds, bytes, tokens)."""

    kv_bytes_per_token: float
    """KV-cache bytes per token on one GPU of the replica."""
    kv_capacity_tokens: int
    """Tokens of KV the replica can hold (its memory minus weights and activations, at vLLM's
    ``gpu_memory_utilization`` 0.9)."""
    replica_gpus: int
    """GPUs of one replica."""

    def step_s(self, step: _BatchStep) -> float:
        """Seconds of one step on one replica (compute, its TP/EP/PP communication and the host's share)."""
        ...

    def kv_transfer_s(self, tokens: int) -> float:
        """Seconds to move ``tokens`` tokens of KV cache from a prefill replica to a decode replica."""
        ...


@dataclass(frozen=True)
class LinearStepCost:
    """A step cost given by coefficients: ``step_s = base_s + prefill_token_s x prefill_tokens + attention_s x
    prefill_attention + decode_seq_s x decode_seqs + decode_context_s x decode_context`` (seconds), ``transfer_s +
    tokens x transfer_token_s`` to move KV; ``kv_capacity_tokens`` tokens of KV.  Exact arithmetic for
    hand-derived timelines; also a measured profile's linear fit for what-if runs.  ``tokens_per_decode_step``
    (speculative decoding: the tokens a decode step emits per sequence on average) and ``speculative_tokens`` (the
    draft tokens each decode verifies, taking ``1 + K`` tokens of a step's budget) tell the engine what a decode
    step emits; the coefficients price the step as given."""

    base_s: float = 0.0
    prefill_token_s: float = 0.0
    attention_s: float = 0.0
    decode_seq_s: float = 0.0
    decode_context_s: float = 0.0
    kv_capacity_tokens: int = 1 << 20
    kv_bytes_per_token: float = 0.0
    transfer_s: float = 0.0
    transfer_token_s: float = 0.0
    replica_gpus: int = 1
    tokens_per_decode_step: float = 1.0
    speculative_tokens: int = 0

    def step_s(self, step: _BatchStep) -> float:
        return (self.base_s + self.prefill_token_s * step.prefill_tokens + self.attention_s * step.prefill_attention
                + self.decode_seq_s * step.decode_seqs + self.decode_context_s * step.decode_context)

    def kv_transfer_s(self, tokens: int) -> float:
        return self.transfer_s + self.transfer_token_s * tokens


BatchStep = _BatchStep
"""The step record this package builds (see :func:`batch_step_class` for the cost model's own)."""


def batch_step_class() -> type:
    """The class the engine builds its steps with: the cost model's :class:`BatchStep` when it has one."""
    return _batch_step_class()

"""Sizes of Megatron-core's token dispatch for one MoE layer and micro-batch: how many routed token copies each
permutation moves, what each collective of each dispatcher carries (``megatron/core/transformer/moe/
token_dispatcher.py``), and DeepEP's deduplicated traffic.

Notation: ``T`` tokens on a rank (``seq / tp * micro`` under sequence parallelism), ``k`` = top-k, ``E`` experts
over ``ep`` ranks (``L = E / ep`` local experts), ``etp`` the expert tensor-parallel size, ``H`` the hidden size.

- ``alltoall`` (``MoEAlltoAllTokenDispatcher``): the routing map's per-expert counts all-gathered over the ETP x EP
  group (int64); permutation 1 gathers ``T k`` copies (dropless; fewer after capacity); the all-to-all-v of the
  tokens and of their probabilities over EP, sized per rank by the counts; an all-gather of both over ETP;
  permutation 2 (``sort_chunks_by_idxs``) reorders the ``R`` received rows by local expert when ``L > 1``; combine
  mirrors it (reduce-scatter over ETP, all-to-all back, unpermute summing the ``k`` copies).
- ``allgather`` (``MoEAllGatherTokenDispatcher``): the routing map (bool), the probabilities and the hidden states
  all-gathered over TP x EP; each rank permutes the ``T tp ep`` gathered tokens' copies for its local experts and
  reduce-scatters the unpermuted outputs back, in the probabilities' dtype (``hidden_states.to(local_probs.dtype)``).
- ``flex`` with DeepEP (``MoEFlexTokenDispatcher``, ``_DeepepManager``): one fused dispatch kernel sends each token
  once to every rank that holds at least one of its experts (not once per expert), with its top-k indices and
  fp32 probabilities; the receiver permutes the received tokens into its experts' rows; combine sums a token's
  local experts first and sends one row back per rank.  With ``D`` the expected number of distinct destination
  ranks of a token, a rank sends ``T D`` rows instead of ``T k``.

A token's ``k`` experts are distinct; with routing shares ``q_r`` per rank (the experts' shares summed), the chance
that a rank holds none of them is the hypergeometric ``prod_{i<k} (E - E q_r - i) / (E - i)`` (exact for balanced
routing, ``q_r = L / E``), so ``D = sum_r (1 - that)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mocked_model.routing import Routing

COUNT_BYTES = 8
"""Per-expert token counts are int64."""


def miss_probability(experts: int, topk: int, share: float) -> float:
    """The chance that a token's ``topk`` distinct experts all lie outside a set holding ``share`` of the routing
    (``share * experts`` experts under balanced routing): ``prod_{i<topk} (E - E share - i) / (E - i)``."""
    held = share * experts
    p = 1.0
    for i in range(topk):
        p *= max(experts - held - i, 0.0) / (experts - i)
    return p


def rank_shares(routing: Routing, ep: int) -> list[float]:
    """Share of a source rank's routed copies that each EP rank's experts receive."""
    total = sum(routing.per_expert) or 1
    per = len(routing.per_expert) // ep
    return [sum(routing.per_expert[r * per:(r + 1) * per]) / total for r in range(ep)]


@dataclass(frozen=True)
class DeepEPTraffic:
    """DeepEP's rows per micro-batch and layer for the busiest rank: ``send`` rows it dispatches (tokens x distinct
    destination ranks), ``recv`` rows it receives, ``distinct`` the expected destination ranks of one token."""

    send: int
    recv: int
    distinct: float

    @property
    def busiest(self) -> int:
        return max(self.send, self.recv)


def deepep_traffic(tokens: int, routing: Routing, experts: int, topk: int, ep: int, etp: int = 1) -> DeepEPTraffic:
    """DeepEP's deduplicated rows (``_DeepepManager``: Megatron's flex dispatcher hands it the routing map expanded
    to the ETP x EP ranks, so each of a chosen rank's ETP peers receives the token too)."""
    shares = rank_shares(routing, ep)
    hit = [1.0 - miss_probability(experts, topk, q) for q in shares]
    distinct = sum(hit) * etp
    return DeepEPTraffic(send=round(tokens * distinct), recv=round(ep * etp * tokens * hit[0]), distinct=distinct)


def local_rows(expert_tokens: Sequence[int]) -> int:
    """Rows the busiest rank's experts process (the sum of its local experts' tokens)."""
    return sum(expert_tokens)


def moe_activation_rows(job) -> tuple[int, int, int]:
    """(routed copies this rank permutes, rows its experts process, bytes per router probability) of one
    micro-batch on the busiest EP rank, for the memory estimate: the routing with its skew, ``--moe_imbalance``,
    capacity and padding (:mod:`mocked_model.routing`), the expert-TP gather, the router's dtype."""
    from mocked_model.megatron_layers import MegatronContext
    from mocked_model.routing import route

    m, p, t = job.model, job.parallel, job.training
    ctx = MegatronContext.of(job)
    tokens = ctx.seq_local * ctx.micro
    r = route(tokens, m.num_experts, m.moe_router_topk, p.ep, t.moe_routing_skew, t.moe_expert_capacity_factor,
              t.moe_pad_expert_input_to_capacity, t.moe_imbalance)
    gather = p.tp * p.ep if t.moe_token_dispatcher_type == "allgather" else p.expert_tp * p.ep
    rows = gather * sum(r.local_experts(0, p.ep))
    probs = {"fp32": 4, "fp64": 8}.get(t.moe_router_dtype or "", t.dtype_bytes)
    return r.send_tokens, rows, probs

"""Token routing of an MoE layer: how many tokens each expert receives, balanced or skewed.

Balanced routing (every expert gets ``tokens * topk / experts``) is what AICB and SimAI assume.
Real routers are not balanced, so a skew ``s`` gives expert ``e`` (0-based) a share of the routed
tokens proportional to ``(e + 1) ** -s`` (a Zipf law; ``s = 0`` is balanced), with no expert taking
more than ``1 / topk`` of them (a token picks ``topk`` distinct experts).  Every rank of the
expert-parallel group routes its tokens with the same shares, so EP rank 0, which holds experts
``0 .. E/ep - 1``, is the busiest; the generated workload is its view.

A load-imbalance factor ``f`` (``--moe_imbalance``, >= 1) sets the busiest expert's share to ``f`` times the
mean, ``f / E`` of the routed tokens (capped at ``1 / topk``); the other experts share the rest, equally when
``s = 0``, else in their Zipf proportions.  The factor is the imbalance published measurements quote (the
busiest expert's load over the mean, MaxVio + 1); the skew shapes the rest of the distribution.

With ``--moe_expert_capacity_factor f`` each expert accepts at most ``ceil(tokens * topk / E * f)``
tokens from a rank (Megatron's ``get_capacity``) and drops the rest; with
``--moe_pad_expert_input_to_capacity`` every expert receives exactly its capacity.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil


def expert_shares(num_experts: int, topk: int, skew: float, imbalance: float = 1.0) -> list[float]:
    """Fraction of the routed tokens each expert receives (sums to 1; none above ``1 / topk``); with
    ``imbalance`` > 1 expert 0 takes ``imbalance / num_experts`` of them and the others the rest."""
    weights = [(e + 1) ** -skew for e in range(num_experts)]
    cap = 1.0 / topk
    if imbalance > 1.0 and num_experts > 1:
        hot = min(imbalance / num_experts, cap)
        others = sum(weights[1:])
        # the others keep their Zipf weights' proportions in the mass the hot expert leaves (re-capped at 1 / topk)
        return _capped([hot] + [(1.0 - hot) * w / others for w in weights[1:]], cap)
    return _capped(weights, cap)


def _capped(weights: list[float], cap: float) -> list[float]:
    """``weights`` normalised to sum 1, no share above ``cap`` (the excess spread over the others in proportion)."""
    num_experts = len(weights)
    shares = [0.0] * num_experts
    free = list(range(num_experts))
    mass = 1.0
    while True:
        total = sum(weights[e] for e in free)
        over = [e for e in free if weights[e] / total * mass > cap + 1e-12]
        if not over:
            for e in free:
                shares[e] = weights[e] / total * mass
            return shares
        for e in over:
            shares[e] = cap
            mass -= cap
            free.remove(e)


def _integer_split(total: int, shares: list[float]) -> list[int]:
    """Whole token counts summing to ``total`` (largest remainders, ties to the lower index)."""
    exact = [total * s for s in shares]
    counts = [int(x) for x in exact]
    order = sorted(range(len(shares)), key=lambda e: (-(exact[e] - counts[e]), e))
    for e in order[: total - sum(counts)]:
        counts[e] += 1
    return counts


@dataclass(frozen=True)
class Routing:
    """Routing of one micro-batch through one MoE layer.

    ``per_expert`` are the tokens ONE source rank sends to each expert (after capacity);
    ``send_tokens`` what each rank sends in total; ``recv_tokens`` what each EP rank receives from the
    ``ep`` ranks of its group; ``capacity`` the per-expert limit, if any.
    """

    per_expert: tuple[int, ...]
    send_tokens: int
    recv_tokens: tuple[int, ...]
    capacity: int | None
    dropped: int

    @property
    def busiest_tokens(self) -> int:
        """Tokens through the busiest rank's all-to-all: the larger of what it sends and receives."""
        return max(self.send_tokens, max(self.recv_tokens))

    def local_experts(self, ep_rank: int, ep: int) -> tuple[int, ...]:
        """Tokens per local expert of ``ep_rank`` from one source rank."""
        per_rank = len(self.per_expert) // ep
        return self.per_expert[ep_rank * per_rank:(ep_rank + 1) * per_rank]


def route(tokens: int, num_experts: int, topk: int, ep: int, skew: float = 0.0,
          capacity_factor: float | None = None, pad_to_capacity: bool = False, imbalance: float = 1.0) -> Routing:
    """Route ``tokens`` tokens of one rank to ``num_experts`` experts spread over ``ep`` ranks."""
    counts = _integer_split(tokens * topk, expert_shares(num_experts, topk, skew, imbalance))
    capacity = None
    dropped = 0
    if capacity_factor is not None:
        capacity = ceil(tokens * topk / num_experts * capacity_factor)
        kept = [capacity if pad_to_capacity else min(c, capacity) for c in counts]
        dropped = sum(max(c - capacity, 0) for c in counts)
        counts = kept
    per_rank = num_experts // ep
    recv = tuple(ep * sum(counts[r * per_rank:(r + 1) * per_rank]) for r in range(ep))
    return Routing(tuple(counts), sum(counts), recv, capacity, dropped)

"""DeepEP's fused dispatch and combine in a training step (``--moe_token_dispatcher_type flex --moe_enable_deepep``;
Megatron-core's ``_DeepepManager``), priced on the fabric by ``--model topo``.

DeepEP's normal kernels (deepseek-ai/DeepEP, README "Normal kernels with NVLink and RDMA forwarding") send a token
once to every *node* that holds one of its experts, over RDMA to the GPU of the same NVLink-domain index there,
which forwards it over NVLink to the GPUs whose experts it needs; inside a node a token goes once to each GPU that
needs it.  Combine runs the same paths backwards, summing on the way.  So, for a group of ``n`` ranks on ``m``
servers of ``g`` each, a token of ``B`` bytes and the chance ``p(q)`` that a set holding a share ``q`` of the
experts receives it (:func:`mocked_model.moe_dispatch.miss_probability`)::

    RDMA bytes per GPU   = T B (m - 1) p(g / n)             (one copy per remote node)
    NVLink bytes per GPU = T B p(1 / n) ((g - 1) + (m - 1) g)  (local peers, and forwarding what arrived)
    time = max(NVLink bytes / (s_nv x NVLink rate), RDMA bytes / BW_rdma(n) x 50 GB/s / NIC rate) x imbalance

with the README's figures on H800 (about 160 GB/s NVLink, a 400 Gb/s CX7 NIC per GPU): intranode EP 8 reaches
``s_nv`` = 153 / 160 (dispatch) and 158 / 160 (combine) of the NVLink rate; internode RDMA bottleneck bandwidths
of 43, 58, 51 GB/s (dispatch) and 43, 57, 50 GB/s (combine) at EP 16, 32, 64, in DeepEP's own convention (bytes
deduplicated per node, as above), scaled by the fabric's NIC share over the 50 GB/s they were measured on.  The
busiest rank's imbalance (its received rows over the mean) stretches the time.  Never faster than NCCL's
all-to-all latency terms over the same group.  The kernels hold ``DEEPEP_SMS`` SMs while they run (Megatron's
``moe_flex_dispatcher_num_sms`` default, ``set_deepep_num_sms(20)``).
"""

from __future__ import annotations

import math
from typing import Any

from mocked_model.moe_dispatch import miss_probability

DEEPEP_SMS = 20
"""SMs DeepEP's normal kernels occupy in Megatron-core (``_DeepepManager``: ``moe_flex_dispatcher_num_sms`` or 20)."""
NVLINK_SHARE = {"dispatch": 153.0 / 160.0, "combine": 158.0 / 160.0}
"""Intranode EP 8 on H800: 153 / 158 GB/s of the ~160 GB/s NVLink (DeepEP README, normal kernels)."""
RDMA_GBPS = {"dispatch": ((16, 43.0), (32, 58.0), (64, 51.0)), "combine": ((16, 43.0), (32, 57.0), (64, 50.0))}
"""Internode RDMA bottleneck bandwidth (GB/s) per EP size over a 50 GB/s NIC (DeepEP README, normal kernels)."""
MEASURED_NIC_BPS = 50e9
"""The CX7 400 Gb/s NIC per GPU of DeepEP's figures."""


def by_ep(table: tuple[tuple[int, float], ...], n: int) -> float:
    """A per-EP-size figure at ``n``: linear in log2(EP) between the sizes given, clamped outside them."""
    if n <= table[0][0]:
        return table[0][1]
    for (n0, v0), (n1, v1) in zip(table, table[1:]):
        if n <= n1:
            w = (math.log2(n) - math.log2(n0)) / (math.log2(n1) - math.log2(n0))
            return v0 + w * (v1 - v0)
    return table[-1][1]


def deepep_bytes(tokens: int, token_bytes: float, experts: int, topk: int, n: int, servers: int,
                 per_server: int) -> tuple[float, float]:
    """(NVLink bytes, RDMA bytes) one GPU moves in one DeepEP dispatch or combine (the module's formulas)."""
    p_rank = 1.0 - miss_probability(experts, topk, 1.0 / n)
    p_node = 1.0 - miss_probability(experts, topk, per_server / n)
    rdma = tokens * token_bytes * (servers - 1) * p_node
    nvlink = tokens * token_bytes * p_rank * ((per_server - 1) + (servers - 1) * per_server)
    return nvlink, rdma


def deepep_time_s(op: str, spec: tuple, shape: Any, links: Any) -> float:
    """Seconds of one DeepEP ``dispatch`` or ``combine``: ``spec`` = (tokens, bytes per token, experts, top-k,
    imbalance) of the busiest rank; ``shape`` the group's :class:`simulator.topo.collectives.GroupShape`."""
    from simulator.topo.collectives import collective_cost

    tokens, token_bytes, experts, topk, imbalance = spec
    n = shape.n
    if n <= 1 or tokens <= 0:
        return 0.0
    k = min(shape.per_server, n)
    nvlink, rdma = deepep_bytes(tokens, token_bytes, experts, topk, n, shape.servers, k)
    t = nvlink / (NVLINK_SHARE[op] * shape.nvlink_Bps * links.nvlink_efficiency) if nvlink else 0.0
    if rdma:
        nic = shape.nic_Bps * links.nic_efficiency / shape.a2a_congestion
        t = max(t, rdma / (by_ep(RDMA_GBPS[op], n) * 1e9 * nic / MEASURED_NIC_BPS))
    floor = collective_cost("all_to_all", 1.0, shape, links).time_s
    return max(t * imbalance, floor)

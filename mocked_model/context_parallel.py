"""Core attention under context parallelism, as Transformer Engine runs it for Megatron-core's ``TEDotProductAttention``
(``--context-parallel-size`` > 1; Transformer Engine ``pytorch/attention/dot_product_attention/context_parallel.py``).

Every rank holds ``s / cp`` tokens of each sequence: chunks ``r`` and ``2 cp - 1 - r`` of ``2 cp`` (Megatron's
``get_batch_on_this_cp_rank``: causal load balancing, every rank gets as much of the triangle as the others).  Sizes
below are one TP rank's: ``b`` the micro-batch, ``h``/``g`` its query heads and key/value groups, ``d``/``dv`` the head
sizes, ``a`` bytes per activation element, ``c = s / (2 P)`` one chunk of the ring's sequence.

- ``p2p`` (``AttnFuncWithCPAndKVP2P``, ring attention over the ``P`` = cp ranks): K and V (``kv = 2 c b g (d + dv) a``
  bytes) travel the ring.  Forward: ``P`` rounds; round ``i < P - 1`` posts the send of the K/V it holds to the next
  rank and the receive from the previous one, then computes its own piece, then waits for the transfer (the transfer
  overlaps the round's attention: ``meta['overlap'] = 'next'``); round 0 is the diagonal (both local chunks against
  themselves, causal: ``(2c)^2 / 2`` scores), the others are full tiles (``2c x c`` on the ranks whose earlier chunk
  the K/V is, ``c x 2c`` on the others; the same scores, the former with twice the thread blocks: the ring's last rank,
  whose every round is of that kind, paces the ring and is the one priced); then the output correction.  Backward:
  ``P`` rounds in the other direction (send to the previous rank); round 0 sends K/V, rounds 1 .. P-2 K/V and the dK/dV
  accumulated so far (``2 kv``), round P-1 dK/dV alone; each overlaps its round's attention backward.
- ``a2a`` (``AttnFuncWithCPAndQKVOA2A``, DeepSpeed-Ulysses): an all-to-all of Q, of K and of V over the CP group (each
  rank's whole tensor: ``b (s/cp) h d a`` bytes for Q) turns the sequence split into a head split (``h / cp`` heads over
  the whole sequence), the attention runs causal over ``s``, an all-to-all of O turns it back.  Backward: all-to-all
  of dO, attention backward, all-to-all of dQ, dK, dV.  The all-to-alls block (each is waited before its tensor's
  reorder).
- ``allgather`` (``AttnFuncWithCPAndKVAllGather``): K and V all-gathered over CP (``b s g d a`` bytes gathered),
  then each local chunk's queries (``c`` rows) attend to the keys up to their own position (bottom-right causal);
  backward gathers K and V again and reduce-scatters dK and dV.  The rank priced is CP rank 0 (chunks 0 and
  ``2 cp - 1``: the two chunks' work sums to the same on every rank).
- ``a2a+p2p`` (hierarchical, ``--hierarchical_context_parallel_sizes A,P``): the all-to-alls over the first level's
  ``A`` ranks (``cp_a2a_group``), then the ring over the second level's ``P`` (``cp_p2p_group``) with ``h / A`` heads on
  ``s / P`` tokens.

Each piece's ``flops`` is its share of Megatron's count for the rank (:class:`~mocked_model.megatron_layers.
CoreAttention`'s full square over ``cp``); its kernels are priced from its shapes and mask
(:mod:`mocked_model.compute.attention_band`).
"""

from __future__ import annotations

from mocked_model.base import MockedModule, comm, compute
from mocked_model.megatron_layers import CoreAttention, MegatronContext, _meta
from utils.config import JobConfig
from utils.context_parallel import cp_levels
from utils.workload import CommGroup, CommType, WorkItem

AG, RS, A2A = CommType.all_gather, CommType.reduce_scatter, CommType.all_to_all


def core_attention(ctx: MegatronContext, name: str, heads: int, groups: int, head_dim: int, layer: int | None,
                   recompute: bool, v_head_dim: int | None = None, window: int | None = None) -> MockedModule:
    """The core attention of a layer: Megatron's (:class:`CoreAttention`), or under context parallelism
    :class:`ContextParallelAttention`."""
    if ctx.cp == 1:
        return CoreAttention(ctx, name, heads, groups, head_dim, layer, recompute, v_head_dim, window)
    return ContextParallelAttention(ctx, name, heads, groups, head_dim, layer, recompute, v_head_dim, window)


class ContextParallelAttention(MockedModule):
    """Core attention of one CP rank: the module docstring's pieces and collectives.  ``heads`` and ``groups`` are the
    model's (this TP rank holds ``1/tp`` of them), ``window`` a sliding window's left size in tokens."""

    def __init__(self, ctx: MegatronContext, name: str, heads: int, groups: int, head_dim: int, layer: int | None,
                 recompute: bool, v_head_dim: int | None = None, window: int | None = None) -> None:
        super().__init__(name)
        self.ctx, self.layer, self.recompute, self.window = ctx, layer, recompute, window
        self.heads, self.groups, self.head_dim = heads // ctx.tp, max(groups // ctx.tp, 1), head_dim
        self.v_dim = v_head_dim or head_dim
        # Megatron's count for this rank (CoreAttention's full square of the whole sequence) over cp
        self.flops = 2.0 * ctx.micro * self.heads * ctx.seq_full * ctx.seq_full * (head_dim + self.v_dim) / ctx.cp
        self.a2a, self.ring = ctx.cp_levels
        hierarchical = self.a2a > 1 and self.ring > 1
        self.a2a_group = CommGroup.cp_a2a_group if hierarchical else CommGroup.cp_group
        self.ring_group = CommGroup.cp_p2p_group if hierarchical else CommGroup.cp_group

    # ---- sizes ------------------------------------------------------------------------------------

    def kv_bytes(self) -> int:
        """K and V of the ring's sequence on one rank (one ring transfer): ``(s / P) b (g / A) (d + dv) a``; the same
        as ``(s / cp) b g (d + dv) a``."""
        c = self.ctx
        return c.seq * c.micro * self.groups * (self.head_dim + self.v_dim) * c.dtype_bytes

    def _piece(self, phase: str, sq: int, skv: int, heads: int, groups: int, causal: bool, flops: float,
               **extra) -> WorkItem:
        c = self.ctx
        shapes = ((c.micro, heads, sq, self.head_dim), (c.micro, groups, skv, self.head_dim))
        meta = {**_meta(self.layer, "attention", "attention", self.name), "impl": "flash", "p": c.attention_dropout,
                "v_dim": self.v_dim, "causal": causal, **extra}
        if self.window is not None:
            meta["window"] = self.window
        return compute(f"{phase}.MegatronCoreAttention.{self.name}", shapes, flops, meta)

    def _comm(self, ctype: CommType, group: CommGroup, size: int, nbytes: int, phase: str, label: str,
              **meta) -> WorkItem:
        return comm(ctype, group, size, nbytes, f"{phase}.{label}", {**_meta(self.layer, "attention", "comm", self.name),
                                                                       **meta})

    def _ring_transfer(self, phase: str, nbytes: int, backward: bool, round_: int) -> list[WorkItem]:
        """One round's exchange with the ring neighbours: the send (which carries the pair's time, overlapped with
        the round's attention) and the receive.  Forward sends to the next rank, backward to the previous one."""
        send, recv = ("send_prev", "recv_next") if backward else ("send_next", "recv_prev")
        meta = {**_meta(self.layer, "attention", "comm", self.name), "round": round_}
        stage = f"{phase}.AttnFuncWithCPAndKVP2P"
        size = self.ring
        overlap = {"overlap": "next"} if self.ctx.compute else {}
        return [WorkItem(CommType.isend, self.ring_group, size, nbytes, stage, additional=send, meta={**meta, **overlap}),
                WorkItem(CommType.irecv, self.ring_group, size, nbytes, stage, additional=recv, meta=meta)]

    def _a2a(self, phase: str, names: tuple[str, ...]) -> list[WorkItem]:
        """All-to-alls of the named tensors over the a2a level: each rank's whole local tensor."""
        c = self.ctx
        width = {"q": self.heads * self.head_dim, "k": self.groups * self.head_dim, "v": self.groups * self.v_dim,
                 "o": self.heads * self.v_dim}
        # a rank's tensor before the a2a: its s/cp tokens (s / P tokens and h / A heads after it: the same bytes)
        return [self._comm(A2A, self.a2a_group, self.a2a, c.seq * c.micro * width[n] * c.dtype_bytes, phase,
                           "AttnFuncWithCPAndQKVOA2A", tensor=n) for n in names]

    # ---- forward and backward ---------------------------------------------------------------------

    def build_forward(self, phase: str) -> list[WorkItem]:
        return self._pass(phase, backward=False)

    def build_backward(self) -> list[WorkItem]:
        out = self.forward_items("recompute") if self.recompute else []
        return out + self._pass("backward", backward=True)

    def _pass(self, phase: str, backward: bool) -> list[WorkItem]:
        c = self.ctx
        share = self.flops * (2.0 if backward else 1.0)
        out: list[WorkItem] = []
        if self.ctx.cp_comm == "allgather":
            return self._allgather(phase, backward, share)
        heads, groups = self.heads // self.a2a, max(self.groups // self.a2a, 1)
        s_ring = c.seq * self.a2a  # the ring's local sequence: gathered over the a2a level
        if self.a2a > 1:
            out += self._a2a(phase, ("o",) if backward else ("q", "k", "v"))
        a2a_meta = {"cp_a2a": self.a2a} if self.a2a > 1 else {}
        if self.ring == 1:
            if c.compute:
                out.append(self._piece(phase, s_ring, s_ring, heads, groups, True, share, **a2a_meta))
        else:
            kv = self.kv_bytes()
            for i in range(self.ring):
                if backward:
                    nbytes = kv if i in (0, self.ring - 1) else 2 * kv  # K/V, K/V and dK/dV, dK/dV
                    out += self._ring_transfer(phase, nbytes, True, i)
                elif i < self.ring - 1:
                    out += self._ring_transfer(phase, kv, False, i)
                if c.compute:
                    diagonal = i == 0
                    extra = {"cp_round": i, **(a2a_meta if diagonal else {})}
                    out.append(self._piece(phase, s_ring, s_ring if diagonal else s_ring // 2, heads, groups, diagonal,
                                           share / self.ring, **extra))
        if self.a2a > 1:
            out += self._a2a(phase, ("q", "k", "v") if backward else ("o",))
        return out

    def _allgather(self, phase: str, backward: bool, share: float) -> list[WorkItem]:
        c = self.ctx
        chunk, full = c.seq // 2, c.seq_full
        out = [self._comm(AG, CommGroup.cp_group, c.cp, full * c.micro * self.groups * dim * c.dtype_bytes, phase,
                          "AttnFuncWithCPAndKVAllGather", tensor=name)
               for name, dim in (("k", self.head_dim), ("v", self.v_dim))]
        if c.compute:
            # CP rank 0's chunks 0 and 2cp - 1: its queries against the keys up to them (bottom-right causal)
            out += [self._piece(phase, chunk, kv, self.heads, self.groups, True, share / 2, cp_chunk=index)
                    for index, kv in ((0, chunk), (2 * c.cp - 1, full))]
        if backward:
            out += [self._comm(RS, CommGroup.cp_group, c.cp, full * c.micro * self.groups * dim * c.dtype_bytes, phase,
                               "AttnFuncWithCPAndKVAllGather", tensor=f"d{name}")
                    for name, dim in (("k", self.head_dim), ("v", self.v_dim))]
        return out


def cp_buffer_bytes(job: JobConfig) -> float:
    """Bytes of the transient buffers context parallelism adds while one layer's attention runs (one TP rank, one
    micro-batch; 0 without CP).  Transformer Engine keeps, until the attention returns:

    - ``p2p``: every round's received K/V (``p2p_comm_buffers``, one per round, the list held to the end) and every
      round's partial output (``out_per_step``, corrected at the end): ``P x (kv + o)``;
    - ``a2a``: Q, K, V and O before and after their all-to-alls: ``2 x (q + k + v + o)``;
    - ``allgather``: the gathered K and V, and backward the gathered dK and dV: ``2 x cp x kv``.

    ``kv`` is the rank's K and V (``s / cp`` tokens), ``q``/``o`` its queries and output; the saved activations
    themselves are those of a layer without CP on ``s / cp`` tokens (ring attention saves the last K/V it received
    in place of its own)."""
    p, t, m = job.parallel, job.training, job.model
    if p.cp == 1:
        return 0.0
    tokens = t.seq_length // p.cp * p.micro_batch
    if m.multi_latent_attention:
        q_width = m.num_attention_heads * (m.qk_head_dim + m.qk_pos_emb_head_dim)
        o_width = m.num_attention_heads * m.v_head_dim
        kv_width = m.num_attention_heads * (m.qk_head_dim + m.qk_pos_emb_head_dim + m.v_head_dim)
    else:
        q_width = o_width = m.num_attention_heads * m.kv_channels
        kv_width = 2 * m.query_groups * m.kv_channels
    a = t.dtype_bytes
    q, o, kv = (tokens * w / p.tp * a for w in (q_width, o_width, kv_width))
    a2a, ring = cp_levels(job)
    if t.cp_comm_type == "allgather":
        return 2.0 * p.cp * kv
    out = 2.0 * (q + kv + o) if a2a > 1 else 0.0
    return out + (ring * (kv + o) if ring > 1 else 0.0)

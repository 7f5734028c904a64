"""The mocked inference model: the work items of one step (a prefill of the batch, or one decode step) on
one pipeline stage, as one rank sees them (TP rank 0 of attention replica 0; EP rank 0, the busiest under
skewed routing).

Per layer, in execution order (SGLang's and vLLM's DeepSeek-V3 / Qwen3-MoE / Qwen3-Next modules):

- attention: the fused residual add and norm, the projections, the attention core (MLA's absorbed form
  reading the latent KV cache in decode, MLA with decompressed keys and values in prefill; GQA with
  QK-norm; gated DeltaNet with its causal convolution on Qwen3-Next's linear layers), the output
  projection, then the **TP all-reduce** of ``2 x tokens x hidden`` bytes (tp > 1);
- a dense MLP (DeepSeek's first layers): norm, gate-up, SwiGLU, down projection, the TP all-reduce;
- an MoE MLP: norm, shared experts (DeepSeek computes them before routing), the gate and top-k, the
  **dispatch** all-to-all over the EP group (FP8 by default), the rank's experts as grouped GEMMs at
  their token counts, the **combine** all-to-all (bf16), Qwen3-Next's shared expert with its gate.

Dense models (kind ``dense``: Llama, Qwen3 dense, GPT) have the attention and a dense MLP on every layer (GPT's
plain ``fc1 -> GeLU -> fc2`` where ``gated_mlp`` is off); Mixtral (kind ``moe``) is laid out as Qwen3-MoE without
QK-norm.  With ``moe_tp`` (experts split over TP ranks, SGLang's default MoE) each rank runs ``1/tp`` of every
expert's FFN on all of its replica's tokens and the layer ends with a TP all-reduce instead of the combine.  A
speculative decode step (``speculative_tokens`` K) runs ``1 + K`` tokens per sequence through the model, its
attention with ``q_len = 1 + K`` and logits for every position; :func:`draft_items` are one pass of the draft
(DeepSeek's MTP module, or a one-layer EAGLE-style head of the target's shape).

Every item's meta names its ``layer`` and its SimAI ``record`` (AICB 2.1's names: ``attention_layer``,
``attention_gdn``, ``attention_norm``, ``dense_mlp``, ``shared_experts``, ``moe_norm``, ``moe_route``,
``moe_expert``); the embedding (first stage) and the final norm, LM head and sampling (last stage) have
record ``None`` and join the neighbouring record in a SimAI file.  Pipeline stages exchange one bf16
activation (``2 x tokens x hidden`` bytes) by isend/irecv.  Computation items say what they are in
``meta['op']``; :mod:`mocked_model.compute.ops` prices them.

Routing (:class:`MoERouting`): ``RoundRobin`` spreads the token copies evenly over the EP ranks and each
rank's experts (every rank receives what it sends: AICB's sizes); ``UniformRandom`` draws each rank's
copies uniformly over the experts (seeded); ``--moe_routing_skew s`` gives expert ``e`` a share
proportional to ``(e + 1) ** -s`` (:mod:`mocked_model.routing`).  The all-to-all items carry the
busiest rank's traffic (AICB's balanced bytes scaled by ``max(sent, received) / sent``).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from mocked_model.base import comm, compute
from mocked_model.routing import route
from utils.inference_job import InferenceJob
from utils.workload import CommGroup, CommType, WorkItem

A = 2
"""Activation bytes (bf16)."""
AR, AG, A2A = CommType.all_reduce, CommType.all_gather, CommType.all_to_all


SECTION_OF_RECORD = {
    "attention_norm": "atten_norm", "attention_layer": "atten_layer", "attention_gdn": "gdn_layer",
    "dense_mlp": "mlp_dense", "shared_experts": "mlp_shared", "moe_norm": "moe_norm", "moe_route": "moe_route",
    "moe_expert": "moe_expert", "embedding": "embed_tokens", "lm_head": "lm_head",
}
"""Our compute-file section of each record kind.  AICB's reader files them by substring under the same
records, except that it sums ``mlp_dense`` and ``mlp_shared`` into one ``mlp`` time for both (as AICB's
own generator uses one MLP time for dense layers and shared experts) and ignores the last two."""


@dataclass(frozen=True)
class MoERouting:
    """One MoE layer's routing as the busiest EP rank sees it: the token copies it sends and receives,
    its local experts' token counts, and ``ratio`` = max(sent, received) / balanced sent."""

    send: float
    recv: float
    expert_tokens: tuple[int, ...]
    ratio: float

    @property
    def active_experts(self) -> int:
        return sum(1 for t in self.expert_tokens if t)


def moe_routing(job: InferenceJob) -> MoERouting:
    """The routing of one MoE layer (see the module docstring for the strategies)."""
    m = job.model
    experts, ep, topk = m.num_experts, job.ep, m.topk
    local = experts // ep
    if job.moe_tp:   # every rank runs every expert's slice on all of the replica's tokens: nothing is sent
        load = job.tokens * topk
        counts = tuple(load // experts + (1 if i < load % experts else 0) for i in range(experts))
        return MoERouting(0.0, 0.0, counts, 1.0)
    send = job.rank_tokens * topk
    if job.routing_skew > 0:
        r = route(max(round(job.rank_tokens), 1), experts, topk, ep, job.routing_skew)
        scale = send / r.send_tokens
        recv = ep * sum(r.local_experts(0, ep)) * scale
        counts = tuple(ceil(ep * t * scale) for t in r.local_experts(0, ep))
        return MoERouting(send, recv, counts, max(send, recv) / send)
    if job.routing == "UniformRandom" and ep > 1:
        import numpy as np

        rng = np.random.default_rng(job.seed)
        copies = max(round(send), 1)
        drawn = rng.multinomial(copies, [1.0 / experts] * experts, size=ep).sum(axis=0)
        per_rank = drawn.reshape(ep, local).sum(axis=1)
        busiest = int(per_rank.argmax())
        recv = float(per_rank[busiest]) * send / copies
        counts = tuple(int(c) for c in drawn[busiest * local:(busiest + 1) * local])
        return MoERouting(send, recv, counts, max(send, recv) / send)
    load = ceil(send)
    counts = tuple(load // local + (1 if i < load % local else 0) for i in range(local))
    return MoERouting(send, send, counts, 1.0)


class _Builder:
    """Items of one stage of one job (the sizes shared by every layer, computed once)."""

    def __init__(self, job: InferenceJob) -> None:
        self.job, self.m = job, job.model
        self.phase = job.phase
        self.t = job.tokens                      # tokens of the attention replica
        self.tr = max(ceil(job.rank_tokens), 1)  # tokens each TP rank routes
        self.b = job.micro_batch
        self.tp = job.tp
        self.w = job.weight_kind
        self.routing = moe_routing(job) if self.m.is_moe else None
        self.moe_tp = job.moe_tp
        self.ep_group = CommGroup.ep_group if job.tp == 1 else CommGroup.ep_tp_group
        dispatch, combine = job.balanced_a2a_bytes()
        ratio = self.routing.ratio if self.routing else 1.0
        self.dispatch_bytes, self.combine_bytes = int(dispatch * ratio), int(combine * ratio)
        self.layer: int | None = None
        self.record: str | None = None

    # ---- item helpers -------------------------------------------------------------------------------

    def _meta(self, op: str, name: str, **extra) -> dict:
        return {"layer": self.layer, "record": self.record, "op": op, "name": name, **extra}

    def _stage(self, label: str, name: str) -> str:
        return f"{self.phase}.{label}.{name}"

    def gemm(self, name: str, rows: int, k: int, n: int, label: str = "Linear", w_kind: str | None = None,
             batch: int = 0, **extra) -> WorkItem:
        """A linear layer (``batch`` > 0: ``batch`` GEMMs of ``rows / batch`` rows each)."""
        b_shape = (batch, k, n) if batch else (k, n)
        meta = self._meta("infer_gemm", name, w_kind=w_kind or self.w, **extra)
        return compute(self._stage(label, name), ((rows, k), b_shape), 2.0 * rows * k * n, meta)

    def mem(self, op: str, name: str, shape: tuple[int, ...], label: str, **extra) -> WorkItem:
        return compute(self._stage(label, name), (shape,), None, self._meta(op, name, **extra))

    def tp_allreduce(self, label: str) -> list[WorkItem]:
        if self.tp == 1:
            return []
        return [comm(AR, CommGroup.tp_group, self.tp, self.job.tp_allreduce_bytes(), f"{self.phase}.{label}",
                     self._meta("comm", "tp_allreduce"))]

    # ---- attention ----------------------------------------------------------------------------------

    def mla(self, p: str) -> list[WorkItem]:
        """DeepSeek's multi-head latent attention on this TP rank's ``heads / tp`` heads."""
        m, t, job = self.m, self.t, self.job
        heads = m.num_heads // self.tp
        q_head = m.qk_nope_dim + m.qk_rope_dim
        out = []
        if m.q_lora_rank:
            out += [self.gemm(f"{p}.fused_qkv_a_proj", t, m.hidden_size, m.q_lora_rank + m.kv_width, "MLA"),
                    self.mem("norm", f"{p}.q_a_layernorm", (t, m.q_lora_rank), "MLA"),
                    self.mem("norm", f"{p}.kv_a_layernorm", (t, m.kv_lora_rank), "MLA"),
                    self.gemm(f"{p}.q_b_proj", t, m.q_lora_rank, heads * q_head, "MLA")]
        else:
            out += [self.gemm(f"{p}.q_proj", t, m.hidden_size, heads * q_head, "MLA"),
                    self.gemm(f"{p}.kv_a_proj_with_mqa", t, m.hidden_size, m.kv_width, "MLA"),
                    self.mem("norm", f"{p}.kv_a_layernorm", (t, m.kv_lora_rank), "MLA")]
        out.append(self.mem("rotary", f"{p}.rotary_emb", (t, (heads + 1) * m.qk_rope_dim), "MLA"))
        if job.decode:   # absorbed: queries into the latent space, attention over the cached latent, values out
            out += [self.gemm(f"{p}.q_absorb_bmm", heads * t, m.qk_nope_dim, m.kv_lora_rank, "MLA", "bf16", heads),
                    self.mem("decode_attention", f"{p}.flash_mla", (self.b, heads, 1, m.kv_width), "MLA",
                             batch=self.b, heads=heads, q_len=t // self.b, ctx=job.context, d_qk=m.kv_width,
                             d_v=m.kv_lora_rank, kv_token_bytes=m.kv_width * job.kv_bytes),
                    self.gemm(f"{p}.v_absorb_bmm", heads * t, m.kv_lora_rank, m.v_head_dim, "MLA", "bf16", heads)]
        else:            # keys and values decompressed, then causal flash attention over the prompt
            out += [self.gemm(f"{p}.kv_b_proj", t, m.kv_lora_rank, heads * (m.qk_nope_dim + m.v_head_dim), "MLA"),
                    compute(self._stage("MLA", f"{p}.flash_attention"),
                            ((self.b, heads, job.seq_length, q_head), (self.b, heads, job.seq_length, q_head)),
                            2.0 * self.b * heads * job.seq_length ** 2 * (q_head + m.v_head_dim) / 2,
                            self._meta("attention", f"{p}.flash_attention", impl="flash", v_dim=m.v_head_dim,
                                       causal=True, p=0.0))]
        out.append(self.gemm(f"{p}.o_proj", t, heads * m.v_head_dim, m.hidden_size, "MLA"))
        return out

    def gqa(self, p: str) -> list[WorkItem]:
        """Grouped-query attention (Qwen3: QK-norm; Qwen3-Next: an output gate and partial rotary)."""
        m, t, job = self.m, self.t, self.job
        heads, kv = m.num_heads // self.tp, max(m.num_kv_heads // self.tp, 1)
        d = m.head_dim
        q_width = heads * d * (2 if m.output_gate else 1)
        out = [self.gemm(f"{p}.qkv_proj", t, m.hidden_size, q_width + 2 * kv * d, "Attention")]
        if m.qk_norm:
            out.append(self.mem("norm", f"{p}.qk_norm", (t, (heads + kv) * d), "Attention"))
        if m.rope:
            out.append(self.mem("rotary", f"{p}.rotary_emb", (t, (heads + kv) * int(d * m.partial_rotary_factor)),
                                "Attention"))
        window = m.attention_window(self.layer)
        if job.decode:  # a sliding-window layer reads the KV of its last ``window`` positions only
            ctx = job.context if window is None else min(job.context, window)
            out.append(self.mem("decode_attention", f"{p}.attn", (self.b, heads, 1, d), "Attention", batch=self.b,
                                heads=heads, q_len=t // self.b, ctx=ctx, d_qk=d, d_v=d,
                                kv_token_bytes=2 * kv * d * job.kv_bytes))
        else:
            s = job.seq_length
            pairs = s * s / 2 if window is None or window >= s else s * window - window * window / 2
            extra = {} if window is None else {"window": window}
            out.append(compute(self._stage("Attention", f"{p}.attn"), ((self.b, heads, s, d), (self.b, kv, s, d)),
                               2.0 * self.b * heads * pairs * 2 * d,
                               self._meta("attention", f"{p}.attn", impl="flash", v_dim=d, causal=True, p=0.0,
                                          **extra)))
        if m.output_gate:
            out.append(self.mem("elementwise", f"{p}.output_gate", (t, heads * d), "Attention", passes=3))
        out.append(self.gemm(f"{p}.o_proj", t, heads * d, m.hidden_size, "Attention"))
        return out

    def gdn(self, p: str) -> list[WorkItem]:
        """Qwen3-Next's gated DeltaNet on this rank's ``1/tp`` of the linear-attention heads."""
        m, t, job = self.m, self.t, self.job
        hk, hv = m.linear_key_heads // self.tp, m.linear_value_heads // self.tp
        key, value = hk * m.linear_key_dim, hv * m.linear_value_dim
        mode = "decode" if job.decode else "prefill"
        return [
            self.gemm(f"{p}.in_proj_qkvz", t, m.hidden_size, 2 * key + 2 * value, "GatedDeltaNet"),
            self.gemm(f"{p}.in_proj_ba", t, m.hidden_size, 2 * hv, "GatedDeltaNet"),
            self.mem("conv1d", f"{p}.conv1d", (t, 2 * key + value), "GatedDeltaNet", channels=2 * key + value,
                     kernel=m.conv_kernel, tokens=t, batch=self.b, mode=mode),
            self.mem("elementwise", f"{p}.gdn_gating", (t, 2 * hv), "GatedDeltaNet", passes=2),
            self.mem("gdn", f"{p}.gated_delta_rule", (t, hv, m.linear_value_dim), "GatedDeltaNet", tokens=t,
                     batch=self.b, hk=hk, hv=hv, dk=m.linear_key_dim, dv=m.linear_value_dim,
                     state_bytes=job.kv_bytes, mode=mode),
            self.mem("elementwise", f"{p}.norm_gated", (t, value), "GatedDeltaNet", passes=3),
            self.gemm(f"{p}.out_proj", t, value, m.hidden_size, "GatedDeltaNet"),
        ]

    # ---- MLPs ---------------------------------------------------------------------------------------

    def swiglu_mlp(self, p: str, rows: int, ffn: int, label: str, w_kind: str | None = None,
                   gated: bool = True) -> list[WorkItem]:
        h = self.m.hidden_size
        if not gated:   # GPT: fc1, GeLU, fc2
            return [self.gemm(f"{p}.fc1", rows, h, ffn, label, w_kind),
                    self.mem("gelu", f"{p}.act_fn", (rows, ffn), label),
                    self.gemm(f"{p}.fc2", rows, ffn, h, label, w_kind)]
        return [self.gemm(f"{p}.gate_up_proj", rows, h, 2 * ffn, label, w_kind),
                self.mem("swiglu", f"{p}.act_fn", (rows, 2 * ffn), label),
                self.gemm(f"{p}.down_proj", rows, ffn, h, label, w_kind)]

    def experts(self, p: str) -> list[WorkItem]:
        """The rank's local experts as grouped GEMMs over its active experts (tokens from :class:`MoERouting`)."""
        m, r = self.m, self.routing
        total = sum(r.expert_tokens)
        active = max(r.active_experts, 1)
        busiest = max(r.expert_tokens) if total else 1
        extra = dict(tokens_per_expert=r.expert_tokens, rows_per_member=busiest)
        h, f = m.hidden_size, m.expert_ffn // (self.tp if self.moe_tp else 1)
        return [self.gemm(f"{p}.experts.w13", max(total, 1), h, 2 * f, "MoE", batch=active, **extra),
                self.mem("swiglu", f"{p}.experts.act_fn", (max(total, 1), 2 * f), "MoE"),
                self.gemm(f"{p}.experts.w2", max(total, 1), f, h, "MoE", batch=active, **extra)]

    def a2a(self, name: str, nbytes: int) -> list[WorkItem]:
        if self.job.ep == 1:
            return self.tp_allreduce("MoE") if self.moe_tp and name == "combine" else []
        r = self.routing
        meta = self._meta("comm", name, tokens_per_expert=r.expert_tokens, send_tokens=r.send, recv_tokens=r.recv)
        return [comm(A2A, self.ep_group, self.job.ep, nbytes, f"{self.phase}.MoE{name.capitalize()}", meta)]

    # ---- layers -------------------------------------------------------------------------------------

    def layer_items(self, layer: int) -> list[WorkItem]:
        m = self.m
        self.layer = layer
        p = f"layers.{layer}"
        h, t = m.hidden_size, self.t
        kind = m.attention_kind(layer)
        attention_record = "attention_gdn" if kind == "gdn" else "attention_layer"
        # DeepSeek's attention record holds its norm; the Qwen3 models have a norm record of their own
        self.record = attention_record if m.kind == "deepseek" else "attention_norm"
        out: list[WorkItem] = [self.mem("add_norm", f"{p}.input_layernorm", (t, h), "Norm")]
        self.record = attention_record
        out += {"mla": self.mla, "gqa": self.gqa, "gdn": self.gdn}[kind](f"{p}.self_attn")
        out += self.tp_allreduce("Attention")
        if not m.is_moe_layer(layer):
            self.record = "dense_mlp"
            out.append(self.mem("add_norm", f"{p}.post_attention_layernorm", (t, h), "Norm"))
            out += self.swiglu_mlp(f"{p}.mlp", t, m.dense_ffn // self.tp, "MLP", gated=m.gated_mlp)
            out += self.tp_allreduce("MLP")
            return out
        # expert parallelism: each TP rank routes its 1/tp of the tokens; experts over TP: every rank all of them
        tr = t if self.moe_tp else self.tr
        shared_ffn = m.shared_experts * m.shared_expert_ffn // (self.tp if self.moe_tp else 1)
        if m.kind == "deepseek":
            self.record = "shared_experts"
            out.append(self.mem("add_norm", f"{p}.post_attention_layernorm", (t, h), "Norm"))
            if m.shared_experts:
                out += self.swiglu_mlp(f"{p}.mlp.shared_experts", tr, shared_ffn, "MoE")
        else:
            self.record = "moe_norm"
            out.append(self.mem("add_norm", f"{p}.post_attention_layernorm", (t, h), "Norm"))
        self.record = "moe_route"
        out.append(compute(self._stage("MoE", f"{p}.mlp.gate"), ((tr, h), (h, m.routed_experts)),
                           2.0 * tr * h * m.routed_experts, self._meta("moe_router", f"{p}.mlp.gate", w_kind="bf16")))
        out += self.a2a("dispatch", self.dispatch_bytes)
        self.record = "moe_expert"
        out += self.experts(f"{p}.mlp")
        if m.kind != "deepseek" and m.shared_experts:
            out += self.swiglu_mlp(f"{p}.mlp.shared_expert", tr, shared_ffn, "MoE")
            out += [self.gemm(f"{p}.mlp.shared_expert_gate", tr, h, 1, "MoE", "bf16"),
                    self.mem("elementwise", f"{p}.mlp.shared_expert_scale", (tr, h), "MoE", passes=3)]
        out += self.a2a("combine", self.combine_bytes)
        return out

    # ---- the ends of the model ----------------------------------------------------------------------

    def embedding(self) -> list[WorkItem]:
        self.layer, self.record = None, None
        job, h = self.job, self.m.hidden_size
        out = [compute(f"{self.phase}.Embedding.embed_tokens", ((self.t, 1), (job.padded_vocab() // self.tp, h)), None,
                       self._meta("embedding", "embed_tokens", positions=not self.m.rope, p=0.0))]
        if self.tp > 1:  # vocab-parallel embedding: each rank holds vocab/tp rows; the lookups are summed
            out.append(comm(AR, CommGroup.tp_group, self.tp, job.tp_allreduce_bytes(), f"{self.phase}.Embedding",
                            self._meta("comm", "embed_tokens")))
        return out

    def head(self) -> list[WorkItem]:
        self.layer, self.record = None, None
        job, h = self.job, self.m.hidden_size
        rows = job.lm_tokens()
        vocab = job.padded_vocab()
        out = [self.mem("add_norm", "norm", (self.t, h), "Norm"),
               self.gemm("lm_head", rows, h, vocab // self.tp, "LMHead", "bf16")]
        if self.tp > 1:  # vocab-parallel logits gathered on every rank (bf16)
            out.append(comm(AG, CommGroup.tp_group, self.tp, rows * vocab * A, f"{self.phase}.LMHead",
                            self._meta("comm", "logits")))
        out.append(self.mem("sampling", "sampler", (rows, self.m.vocab_size), "Sampler"))
        return out

    def p2p(self, stage: int, send: bool) -> WorkItem:
        job = self.job
        peer = stage + 1 if send else stage - 1
        return WorkItem(CommType.isend if send else CommType.irecv, CommGroup.pp_group, job.pp, job.pp_bytes(),
                        f"{self.phase}.{'send_forward' if send else 'recv_forward'}", dst=peer if send else None,
                        src=None if send else peer, additional="send_next" if send else "recv_prev",
                        meta={"layer": None, "record": None, "op": "comm", "name": "pp"})


def stage_items(job: InferenceJob, stage: int | None = None) -> list[WorkItem]:
    """The items of one step on pipeline stage ``stage`` (default ``job.pp_rank``)."""
    stage = job.pp_rank if stage is None else stage
    first, count = job.stage_layers()[stage]
    b = _Builder(job)
    out: list[WorkItem] = []
    if stage > 0:
        out.append(b.p2p(stage, send=False))
    if stage == 0:
        out += b.embedding()
    for layer in range(first, first + count):
        out += b.layer_items(layer)
    if stage == job.pp - 1:
        out += b.head()
    else:
        out.append(b.p2p(stage, send=True))
    return out


def layer_signature(job: InferenceJob, layer: int) -> tuple[str, bool, int | None]:
    """What makes two layers' items alike (up to names): the attention kind, whether the MLP is MoE and the
    attention's sliding window."""
    return job.model.attention_kind(layer), job.model.is_moe_layer(layer), job.model.attention_window(layer)


def stage_groups(job: InferenceJob, stage: int | None = None) -> list[tuple[int, list[WorkItem]]]:
    """The items of one step on pipeline stage ``stage`` as ``(count, items)`` groups: each kind of layer
    (:func:`layer_signature`) built once with the number of the stage's layers of that kind, the ends of the
    stage (receive, embedding, head, send) once.  ``sum(count x cost(items))`` is the cost of
    :func:`stage_items` (its items differ only in layer indices and names), built in a fraction of the time."""
    stage = job.pp_rank if stage is None else stage
    first, count = job.stage_layers()[stage]
    b = _Builder(job)
    out: list[tuple[int, list[WorkItem]]] = []
    if stage > 0:
        out.append((1, [b.p2p(stage, send=False)]))
    if stage == 0:
        out.append((1, b.embedding()))
    groups: dict[tuple[str, bool, int | None], list[int]] = {}
    for layer in range(first, first + count):
        groups.setdefault(layer_signature(job, layer), [layer, 0])[1] += 1
    for representative, n in groups.values():
        out.append((n, b.layer_items(representative)))
    if stage == job.pp - 1:
        out.append((1, b.head()))
    else:
        out.append((1, [b.p2p(stage, send=True)]))
    return out


def draft_items(job: InferenceJob) -> list[WorkItem]:
    """One pass of the speculative draft over a decode step's ``micro_batch`` sequences (one token each), on the
    last stage.  DeepSeek's MTP module where the model has one (DeepSeek-V3 Technical Report, section 2.2: the
    previous hidden state and the next token's embedding, each RMS-normed, concatenated and projected ``2h -> h``,
    one transformer layer, the shared output head); otherwise an EAGLE-style head of the same shape (Li et al.
    2024, 'EAGLE: Speculative Sampling Requires Rethinking Feature Uncertainty', section 4: one decoder layer of the
    target's shape over the fused feature and token embedding).  A step of K speculative tokens runs K passes."""
    from dataclasses import replace

    j = replace(job, phase="decode", speculative_tokens=0, pp_rank=job.pp - 1)
    b = _Builder(j)
    h, t = j.model.hidden_size, j.tokens
    out = b.embedding()
    b.layer, b.record = None, None
    out += [b.mem("add_norm", "mtp.enorm_hnorm", (t, 2 * h), "MTP"), b.gemm("mtp.eh_proj", t, 2 * h, h, "MTP")]
    out += b.layer_items(j.model.num_layers - 1)
    out += b.head()
    for item in out:   # the draft's items, priced like the layer they copy
        item.stage = "decode.MTP." + item.stage.split(".", 1)[1] if item.stage.startswith("decode.") else item.stage
    return out

"""The fast step-cost model of a serving replica: what one scheduler step costs, as a function of the aggregates the
engine keeps (:class:`BatchStep`), built from the same step items and prices as the per-step simulation
(:mod:`simulator.topo.inference`) and turned into memoized pieces so that a serving run can call it 10^5-10^6 times.

    cost = cost_model("llama3_70B", "H100", None, tp=4, options=TopoOptions(gpus_per_server=8))
    cost.step_s(BatchStep(prefill_tokens=512, prefill_attention=512 * 513 / 2, decode_seqs=31, decode_context=31_000,
                          prefill_seqs=1))

A step of ``t`` tokens (prefill chunks and decodes together) costs, per pipeline stage, summed over the stages as
:func:`simulator.topo.inference.simulate_job` sums them:

- **linear work** ``S(t)``: every item whose cost depends only on the step's token count (projections, norms,
  rotary, the router, the MoE experts at the routing's token counts, the embedding, and the TP all-reduces, EP
  dispatch/combine and PP sends of those tokens on the topology); items only a decode step has (MLA's absorbed
  products, gated DeltaNet's recurrent update) ``D(decode tokens)``; items only a prefill has (MLA's key/value
  decompression, gated DeltaNet's chunked kernel) ``P(prefill tokens)``; the LM head, the logits' all-gather and
  sampling ``H(rows)`` over the rows that need logits (every decoding sequence's verified positions and every
  prefilling request's last token, as vLLM computes them).  Each is priced by building the stage's items for that
  many tokens (:func:`mocked_model.inference.stage_groups`: each kind of layer once, times its count) and pricing
  them with the compute model and the topology's collective costs, memoized by token count: **exactly** up to
  :data:`EXACT_TOKENS` tokens and, above it, at both ends of every :data:`GRID_TOKENS`-token segment with linear
  interpolation inside once the segment's midpoint agrees with the chord, halving it until it does (``memo="exact"``
  prices every count).  The largest error over every count of 1025-8192 tokens against ``memo="exact"``: Llama 3 8B
  2.5e-7 of a step (the GEMMs' smooth maximum of compute and operand time is convex in the tokens: the chord lies
  above it), DeepSeek-V3 2.0e-5, Mixtral 3.1e-5, Qwen3-Next 3.7e-6 (its experts' GEMMs gain a tile row inside
  segments: 3.5% with plain chords);
- **decode attention** from ``decode_context`` (the KV bytes every decoding sequence's cache holds, read once at the
  decode kernel's rate, and its FLOPs, :func:`mocked_model.compute.inference_ops._decode_attention_kernels`' law);
- **prefill attention** from ``prefill_attention``: ``2 x heads x (d_qk + d_v) x (prefill_attention -
  prefill_tokens / 2)`` FLOPs at the flash-attention rate (the compute model counts a causal square of ``s`` as
  ``s^2 / 2`` score pairs, so ``q (ctx + (q + 1) / 2) - q / 2`` per chunk), plus its thread blocks' overhead;
- **host time** (:mod:`mocked_model.inference_host`): a decode-only step within the captured batch sizes replays a
  CUDA graph padded to the next captured size (a fixed host cost per step); any other step, or every step with
  ``cuda_graphs=False``, runs eagerly (each operation never faster than its launches, plus the fixed input copies);
- **speculative decoding** (``speculative_tokens`` K, ``acceptance_rate`` a): a decode step verifies ``1 + K`` tokens
  per sequence and runs K draft passes (:func:`mocked_model.inference.draft_items`, one layer's decode attention
  each); it emits on average ``(1 - a^(K+1)) / (1 - a)`` tokens per sequence (:attr:`ModelStepCost.tokens_per_decode_step`;
  Leviathan et al. 2023, 'Fast Inference from Transformers via Speculative Decoding', equation 1 with the draft's
  acceptance rate alpha and gamma = K);
- **two-batch overlap** (``two_batch_overlap``, SGLang's ``--enable-two-batch-overlap``): the step's tokens split in
  two micro-batches whose MoE dispatch and combine run while the other's computation does: each MoE layer costs
  ``max(2 x compute(t / 2) + its attention, 2 x dispatch and combine(t / 2))`` instead of their sum;
- **DeepEP** (``a2a="deepep"``): the dispatch and combine priced from DeepEP's published figures
  (:func:`simulator.topo.inference.deepep_a2a_s`: low-latency kernels for decode-only steps, normal kernels otherwise).

Attention data parallelism (``dp`` > 1): the step's aggregates split evenly over the ``dp`` attention replicas,
which step together (their MoE all-to-alls meet every step).

``kv_capacity_tokens`` is vLLM's sizing (:func:`mocked_model.inference_memory.kv_capacity`); ``kv_transfer_s`` moves
the KV of every layer, TP-sharded as it sits (each GPU of the prefill replica to its peer of the decode replica, all
at once), over the fabric's point-to-point path between the two replicas (:func:`simulator.topo.collectives.p2p_cost`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from utils.errors import ConfigError
from utils.inference_job import InferenceJob
from utils.workload import CommType

EXACT_TOKENS = 1024
"""Token counts priced exactly (every decode batch and most mixed steps); above it, :data:`GRID_TOKENS` grid points."""
GRID_TOKENS = 64
"""Segment of the token grid above :data:`EXACT_TOKENS`: counts ``64 k + 1`` and ``64 (k + 1)`` priced, linear between
(the smallest GEMM tile has 64 rows, so tile and wave counts change only at a segment's start)."""
MAX_NUM_BATCHED_TOKENS = 8192
"""vLLM's default ``--max-num-batched-tokens`` with chunked prefill (V1 engine, online serving): the profiling step
that sizes the KV cache runs this many tokens."""
MAX_NUM_SEQS = 256
"""vLLM's default ``--max-num-seqs``."""
GPU_MEMORY_UTILIZATION = 0.9
"""vLLM's default ``--gpu-memory-utilization``."""
_ATTENTION_OPS = frozenset({"decode_attention", "attention"})
_ROW_NAMES = frozenset({"lm_head", "sampler", "logits"})
_LAYER = re.compile(r"^layers\.\d+\.")


@dataclass(frozen=True)
class BatchStep:
    """What one scheduler step runs on one replica (aggregates the engine keeps incrementally)."""

    prefill_tokens: int
    """New prompt tokens processed this step (all chunks)."""
    prefill_attention: float
    """Sum over prefilling requests of ``q_len x (ctx_before + (q_len + 1) / 2)``: causal work."""
    decode_seqs: int
    """Requests generating one token this step."""
    decode_context: int
    """Sum of their context lengths (tokens already in their KV cache)."""
    prefill_seqs: int = 0
    """Requests with a prefill chunk this step."""


@runtime_checkable
class StepCost(Protocol):
    """A replica's step-cost model (seconds, bytes, tokens)."""

    kv_bytes_per_token: float
    kv_capacity_tokens: int
    replica_gpus: int

    def step_s(self, step: BatchStep) -> float: ...

    def kv_transfer_s(self, tokens: int) -> float: ...


def accepted_tokens(k: int, a: float) -> float:
    """Expected tokens a speculative step emits per sequence with ``k`` draft tokens accepted each with probability
    ``a``: ``(1 - a^(k+1)) / (1 - a)`` (Leviathan et al. 2023, equation 1), ``k + 1`` when ``a`` is 1."""
    if k == 0:
        return 1.0
    return float(k + 1) if a >= 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)


class _Memo:
    """A function of a token count, memoized exactly up to ``exact`` and, above it, interpolated linearly between priced
    points of each segment ``(grid k, grid (k + 1)]``: a segment (or a part of one) is interpolated only once its
    midpoint agrees with the chord within :data:`LINEAR_TOLERANCE`, and halved until it does (a GEMM whose tiles gain a
    row inside the segment, as Qwen3-Next's 512 experts do at 128 tokens each, puts a step there that a chord over the
    whole segment would smear)."""

    def __init__(self, price: Callable[[int], Any], exact: int | None, grid: int) -> None:
        self.price, self.exact, self.grid = price, exact, grid
        self.cache: dict[int, Any] = {}
        self.linear: set[tuple[int, int]] = set()

    def _at(self, n: int) -> Any:
        value = self.cache.get(n)
        if value is None:
            value = self.cache[n] = self.price(n)
        return value

    def __call__(self, n: int) -> Any:
        if self.exact is None or n <= self.exact:
            return self._at(n)
        lo = n - (n - 1) % self.grid
        hi = lo + self.grid - 1
        while True:  # the result depends on the priced values only, never on the order of the calls
            if n in (lo, hi) or hi - lo <= 2:
                return self._at(n)
            if (lo, hi) not in self.linear:
                mid = (lo + hi) // 2
                if _close(_lerp(self._at(lo), self._at(hi), (mid - lo) / (hi - lo)), self._at(mid)):
                    self.linear.add((lo, hi))
                else:
                    lo, hi = (lo, mid) if n <= mid else (mid, hi)
                    continue
            return _lerp(self._at(lo), self._at(hi), (n - lo) / (hi - lo))


LINEAR_TOLERANCE = 1e-5
"""Largest relative gap between a segment's midpoint and its chord for the segment to be interpolated."""


def _lerp(a: Any, b: Any, w: float) -> Any:
    if isinstance(a, tuple):
        return tuple(x + w * (y - x) for x, y in zip(a, b))
    return a + w * (b - a)


def _close(guess: Any, exact: Any) -> bool:
    pairs = zip(guess, exact) if isinstance(exact, tuple) else ((guess, exact),)
    return all(abs(g - e) <= LINEAR_TOLERANCE * max(abs(e), 1e-12) for g, e in pairs)


@dataclass(frozen=True)
class _AttentionLayer:
    """One kind of attention layer of a stage, as the step's kernels see it on one GPU."""

    count: int
    moe_count: int
    heads: int
    kv_heads: int
    d_qk: int
    d_v: int
    kv_token_bytes: int
    prefill_d: int
    prefill_dv: int
    window: int | None = None


class ModelStepCost:
    """The step cost of one replica of ``job``'s layout (see the module docstring).  Build it with :func:`cost_model`."""

    def __init__(self, job: InferenceJob, gpu: Any, fabric: Any, links: Any, *, a2a: str = "nccl",
                 cuda_graphs: bool = True, host: bool = True, two_batch_overlap: bool = False,
                 acceptance_rate: float = 0.0, max_num_batched_tokens: int = MAX_NUM_BATCHED_TOKENS,
                 max_num_seqs: int = MAX_NUM_SEQS, gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
                 memo: str = "grid", transfer_fabric: Any = None) -> None:
        from mocked_model.compute import gpu_spec
        from mocked_model.inference_host import GRAPH_CAPTURE_SIZES
        from mocked_model.inference_memory import kv_bytes_per_token, kv_capacity
        from simulator.topo.inference import CollectiveCosts

        if memo not in ("grid", "exact"):
            raise ConfigError(f"memo {memo!r} is not grid or exact")
        if not 0.0 <= acceptance_rate <= 1.0:
            raise ConfigError(f"--acceptance_rate must be in [0, 1], got {acceptance_rate}")
        self.job, self.gpu = job, gpu_spec(gpu)
        self.fabric, self.links = fabric, links
        self.costs = CollectiveCosts(fabric, links, job.stage_ranks, job.tp, job.ep, a2a)
        self.graphs, self.host = cuda_graphs, host
        self.tbo = two_batch_overlap and job.model.is_moe and job.ep > 1
        self.k = job.speculative_tokens
        self.speculative_tokens = self.k
        """Draft tokens each decoding sequence verifies per step (the engine charges ``1 + K`` budget tokens)."""
        self.acceptance_rate = acceptance_rate
        self.tokens_per_decode_step = accepted_tokens(self.k, acceptance_rate)
        """Tokens each decoding sequence emits per step on average (1 without speculative decoding)."""
        self.replica_gpus = job.world_size
        self.dp = job.dp
        self.capture_sizes = GRAPH_CAPTURE_SIZES
        self.kv_bytes_per_token = float(max(kv_bytes_per_token(job, s) for s in range(job.pp)))
        capacity = kv_capacity(job, gpu, max_num_batched_tokens, max_num_seqs, gpu_memory_utilization)
        self.capacity = capacity
        self.kv_capacity_tokens = capacity.tokens
        self._transfer_fabric = transfer_fabric
        self._exact = None if memo == "exact" else EXACT_TOKENS
        self._classes = self._classify()
        self._attention = [self._attention_layers(s) for s in range(job.pp)]
        self._memos: dict[tuple, _Memo] = {}
        self._estimators: dict[float, Callable] = {}

    # ---- building and pricing items ------------------------------------------------------------------------

    def _job(self, phase: str, batch: int, seq: int = 1, k: int = 0) -> InferenceJob:
        return replace(self.job, phase=phase, micro_batch=max(batch, 1), seq_length=max(seq, 1), speculative_tokens=k)

    @staticmethod
    def _keys(job: InferenceJob) -> list[list[tuple[tuple, Any, int]]]:
        """Per stage: ``(key, item, count)`` of every item; the key names it across builds (group, name, occurrence)."""
        from mocked_model.inference import stage_groups

        out = []
        for stage in range(job.pp):
            rows, seen = [], {}
            for g, (count, items) in enumerate(stage_groups(job, stage)):
                for item in items:
                    if item.comm_type is CommType.epoch_end:
                        continue
                    name = _LAYER.sub("", str((item.meta or {}).get("name", "")))
                    base = (g, name, item.comm_type.value if item.comm_type else "compute")
                    seen[base] = seen.get(base, -1) + 1
                    rows.append(((*base, seen[base]), item, count))
            out.append(rows)
        return out

    @staticmethod
    def _signature(item: Any) -> tuple:
        from mocked_model.compute import price_key

        if item.is_computation:   # the phase (decode / prefill) left out: only the meta and shapes price an item
            key = price_key(item)
            return ("compute", key[1:] if key is not None else id(item))
        return ("comm", item.comm_type, item.comm_group, item.comm_group_size, item.msg_size)

    def _classify(self) -> dict[tuple, str]:
        """Each item key's class: ``common`` (a function of the step's tokens), ``decode`` / ``prefill`` (only that
        mode has it, or it differs between them), ``rows`` (the LM head, logits, sampling) or ``attention``."""
        probe = 24
        dec, pre = self._keys(self._job("decode", probe)), self._keys(self._job("prefill", 1, probe))
        classes: dict[tuple, str] = {}
        for stage, (d_rows, p_rows) in enumerate(zip(dec, pre)):
            p_sig = {key: self._signature(item) for key, item, _ in p_rows}
            for key, item, _ in d_rows:
                op = (item.meta or {}).get("op")
                if op in _ATTENTION_OPS:
                    cls = "attention"
                elif key[1] in _ROW_NAMES:
                    cls = "rows"
                elif p_sig.get(key) == self._signature(item):
                    cls = "common"
                else:
                    cls = "decode"
                classes[(stage, *key, "decode")] = cls
            d_keys = {key for key, _, _ in d_rows}
            for key, item, _ in p_rows:
                if (item.meta or {}).get("op") in _ATTENTION_OPS:
                    cls = "attention"
                elif key[1] in _ROW_NAMES:
                    cls = "rows"
                elif key in d_keys and classes[(stage, *key, "decode")] == "common":
                    cls = "common"
                else:
                    cls = "prefill"
                classes[(stage, *key, "prefill")] = cls
        return classes

    def _estimate(self, launch_us: float) -> Callable:
        from mocked_model.compute import estimator
        from workload_generator.inference import weight_dtype

        est = self._estimators.get(launch_us)
        if est is None:
            est = self._estimators[launch_us] = estimator(self.gpu, weight_dtype(self.job), host=launch_us)
        return est

    def _price(self, job: InferenceJob, mode_key: str, wanted: str, launch_us: float,
               decode_step: bool = True) -> tuple[float, float, float]:
        """``(rest, MoE-layer compute, MoE-layer dispatch + combine)`` seconds of ``job``'s items of class ``wanted``
        (the last two only with two-batch overlap; otherwise everything is in the first); ``decode_step``: the step
        decodes only (DeepEP's low-latency kernels), else it holds a prefill (normal kernels)."""
        from mocked_model.inference import layer_signature

        estimate = self._estimate(launch_us)
        rest = moe_compute = moe_comm = 0.0
        for stage, rows in enumerate(self._keys(job)):
            for key, item, count in rows:
                if self._classes.get((stage, *key, mode_key)) != wanted:
                    continue
                if item.is_computation:
                    seconds = (estimate(item) or 0.0) * 1e-9
                else:
                    seconds = self.costs.item(item, stage, decode_step)[0]
                layer = (item.meta or {}).get("layer")
                moe = self.tbo and layer is not None and layer_signature(job, layer)[1]
                if moe and item.is_computation:
                    moe_compute += count * seconds
                elif moe and (item.meta or {}).get("name") in ("dispatch", "combine"):
                    moe_comm += count * seconds
                else:
                    rest += count * seconds
        return rest, moe_compute, moe_comm

    def _memo(self, part: str, mode: str | None, decode_step: bool = True) -> _Memo:
        key = (part, mode, decode_step)
        memo = self._memos.get(key)
        if memo is None:
            from mocked_model.inference_host import launch_us

            host = launch_us(mode)
            k = self.k
            if part == "common":
                def price(t: int) -> Any:
                    return self._price(self._job("decode", t), "decode", "common", host, decode_step)
            elif part == "decode":
                def price(n: int) -> Any:
                    return self._price(self._job("decode", n, 1, k), "decode", "decode", host)[0]
            elif part == "prefill":
                def price(t: int) -> Any:
                    return self._price(self._job("prefill", 1, t), "prefill", "prefill", host)[0]
            elif part == "rows":
                def price(n: int) -> Any:
                    return self._price(self._job("decode", n), "decode", "rows", host)[0]
            else:   # draft: one pass over n sequences
                def price(n: int) -> Any:
                    return self._draft_s(n, host)
            memo = self._memos[key] = _Memo(price, self._exact, GRID_TOKENS)
        return memo

    def _draft_s(self, n: int, launch_us: float) -> float:
        from mocked_model.inference import draft_items

        estimate = self._estimate(launch_us)
        stage = self.job.pp - 1
        total = 0.0
        for item in draft_items(self._job("decode", n)):
            if item.comm_type is CommType.epoch_end or (item.meta or {}).get("op") in _ATTENTION_OPS:
                continue
            total += (estimate(item) or 0.0) * 1e-9 if item.is_computation else self.costs.item(item, stage, True)[0]
        return total

    # ---- attention from the aggregates ---------------------------------------------------------------------

    def _attention_layers(self, stage: int) -> list[_AttentionLayer]:
        m, job = self.job.model, self.job
        first, count = job.stage_layers()[stage]
        kinds: dict[tuple[str, int | None], list[int]] = {}
        for layer in range(first, first + count):
            kind = m.attention_kind(layer)
            if kind != "gdn":
                entry = kinds.setdefault((kind, m.attention_window(layer)), [0, 0])
                entry[0] += 1
                entry[1] += 1 if m.is_moe_layer(layer) else 0
        out = []
        heads = m.num_heads // job.tp
        for (kind, window), (n, n_moe) in kinds.items():
            if kind == "mla":
                out.append(_AttentionLayer(n, n_moe, heads, heads, m.kv_width, m.kv_lora_rank, m.kv_width * job.kv_bytes,
                                           m.qk_nope_dim + m.qk_rope_dim, m.v_head_dim, window))
            else:
                kv = max(m.num_kv_heads // job.tp, 1)
                out.append(_AttentionLayer(n, n_moe, heads, kv, m.head_dim, m.head_dim, 2 * kv * m.head_dim * job.kv_bytes,
                                           m.head_dim, m.head_dim, window))
        return out

    def _attention_s(self, a: _AttentionLayer, n_dec: int, ctx: float, q: int, tokens: int, pairs: float,
                     blocks: float, launch_ns: float) -> float:
        """Seconds of one layer's attention kernels: decode over ``ctx`` cached positions of ``n_dec`` sequences
        (``q`` new tokens each), prefill of ``tokens`` tokens with ``pairs`` causal score pairs in ``blocks``
        query tiles.  A sliding-window layer reads at most ``window`` positions of each decoding sequence and scores
        each prefilling token against at most ``window`` keys (every sequence taken past its window: exact once it
        is, an overestimate before)."""
        from mocked_model.compute.kernels import ATTENTION_TILE, flash_attention_ns

        if a.window is not None:
            ctx, pairs = min(ctx, n_dec * a.window), min(pairs, tokens * float(a.window))
        act = 2   # bf16 activations
        ns = 0.0
        if n_dec:
            flops = 2.0 * a.heads * q * ctx * (a.d_qk + a.d_v)
            io = ctx * a.kv_token_bytes + n_dec * a.heads * q * (a.d_qk + a.d_v) * act
            ns += max(flash_attention_ns(flops, io, self.gpu), launch_ns)
        if tokens:
            d, dv = a.prefill_d, a.prefill_dv
            flops = 2.0 * a.heads * pairs * (d + dv)
            cta = a.heads * blocks * 2.0 * ATTENTION_TILE * ATTENTION_TILE * (d + dv)
            io = (a.heads * tokens * (d + dv) + a.kv_heads * tokens * (d + dv)) * act + a.heads * tokens * 4
            ns += max(flash_attention_ns(flops, io, self.gpu, cta_flops=cta), launch_ns)
        return ns * 1e-9

    # ---- the interface ------------------------------------------------------------------------------------

    def mode(self, step: BatchStep) -> str | None:
        """``graphs``, ``eager`` or None (host time not modelled) for ``step``."""
        from mocked_model.inference_host import step_mode

        if not self.host:
            return None
        seqs = -(-step.decode_seqs // self.dp)
        return step_mode("graphs" if self.graphs else "eager", step.prefill_tokens == 0, seqs, self.capture_sizes)

    def step_s(self, step: BatchStep) -> float:
        """Seconds of one step of ``step`` on the replica (see the module docstring)."""
        from mocked_model.compute.kernels import ATTENTION_TILE
        from mocked_model.inference_host import fixed_host_s, graph_batch, launch_us

        dp = self.dp
        n_dec = -(-step.decode_seqs // dp)
        tokens = -(-step.prefill_tokens // dp)
        if n_dec == 0 and tokens == 0:
            return 0.0
        n_pre = -(-step.prefill_seqs // dp) if step.prefill_seqs else (1 if tokens else 0)
        ctx = step.decode_context / dp
        pairs = max(step.prefill_attention / dp - tokens / 2.0, 0.0)
        mode = self.mode(step)
        seqs = graph_batch(n_dec, self.capture_sizes) if mode == "graphs" else n_dec
        q = 1 + self.k
        t = seqs * q + tokens
        total = 0.0
        # DeepEP's kernels follow the step (SGLang's --deepep-mode auto): low-latency when it only decodes
        common = self._memo("common", mode, tokens == 0 or self.costs.a2a == "nccl")
        if self.tbo and t >= 2:   # two micro-batches of half the tokens each
            rest = common(t)[0]
            half = common(-(-t // 2))
            moe_compute, moe_comm = 2 * half[1], 2 * half[2]
        else:
            rest, moe_compute, moe_comm = common(t)
            if self.tbo:   # one token cannot be split: the plain sum
                rest, moe_compute, moe_comm = rest + moe_compute + moe_comm, 0.0, 0.0
        total += rest
        if seqs:
            total += self._memo("decode", mode)(seqs)
        if tokens:
            total += self._memo("prefill", mode)(tokens)
        total += self._memo("rows", mode)(seqs * q + n_pre)
        launch_ns = launch_us(mode) * 1e3
        blocks = (math.ceil(tokens / ATTENTION_TILE) if n_pre <= 1 else tokens / ATTENTION_TILE + n_pre / 2.0) \
            if tokens else 0.0
        attention_moe = 0.0
        for layers in self._attention:
            for a in layers:
                per_layer = self._attention_s(a, n_dec, ctx, q, tokens, pairs, blocks, launch_ns)
                total += (a.count - a.moe_count) * per_layer if self.tbo else a.count * per_layer
                attention_moe += a.moe_count * per_layer
        if self.tbo:
            total += max(moe_compute + attention_moe, moe_comm)
        if self.k and n_dec:
            last = self._attention[-1][-1] if self._attention[-1] else None
            draft_attention = self._attention_s(last, n_dec, ctx, 1, 0, 0.0, 0.0, launch_ns) if last else 0.0
            total += self.k * (self._memo("draft", mode)(seqs) + draft_attention)
        return total + fixed_host_s(mode, n_dec + n_pre)

    def kv_transfer_s(self, tokens: int, src_replica: int = 0, dst_replica: int = 1) -> float:
        """Seconds to move ``tokens`` tokens of KV (every layer's, TP-sharded as it sits) from replica ``src_replica``
        to ``dst_replica`` (replicas placed on consecutive GPUs): each GPU sends its shard to its peer at once, so the
        slowest stage's shard over the fabric's path between the replicas' first GPUs decides."""
        from mocked_model.inference_memory import kv_bytes_per_token
        from simulator.topo.collectives import p2p_cost

        if tokens <= 0:
            return 0.0
        fabric = self._transfer_fabric or self.fabric
        r = self.replica_gpus
        a, b = src_replica * r, dst_replica * r
        if max(a, b) + r > fabric.gpus:
            raise ConfigError(f"moving KV between replicas {src_replica} and {dst_replica} needs {max(a, b) + r} GPUs; "
                              f"the fabric has {fabric.gpus}")
        worst = 0.0
        for stage in range(self.job.pp):
            offset = stage * self.job.stage_ranks
            route = fabric.p2p_shape(a + offset, b + offset)
            size = tokens * kv_bytes_per_token(self.job, stage)
            cost = p2p_cost(size, route.same_server, route.bottleneck_Bps, route.latency_s, self.links, route.congestion)
            worst = max(worst, cost.time_s)
        return worst

    def describe(self) -> str:
        j = self.job
        return (f"{j.name}: tp {j.tp} pp {j.pp} ep {j.ep} dp {j.dp}{' (experts over TP)' if j.moe_tp else ''}, "
                f"{j.weight_kind} weights, {j.kv_dtype} KV, {self.replica_gpus} GPUs per replica on {self.gpu.name}; "
                f"{self.capacity.summary()}")


def cost_model(model: Any, gpu: str, topology: Any = None, tp: int = 1, pp: int = 1, ep: int = 1, dp: int = 1,
               dtype: str | None = None, kv_dtype: str = "bfloat16", cuda_graphs: bool = True, *,
               options: Any = None, gpus: int | None = None, moe_tp: bool | None = None, speculative_tokens: int = 0,
               acceptance_rate: float = 0.0, a2a: str = "nccl", two_batch_overlap: bool = False, host: bool = True,
               max_num_batched_tokens: int = MAX_NUM_BATCHED_TOKENS, max_num_seqs: int = MAX_NUM_SEQS,
               gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION, memo: str = "grid",
               fabrics: dict | None = None) -> ModelStepCost:
    """The step cost of one replica of ``model`` (a name :func:`utils.inference_config.resolve_model` knows, or an
    :class:`~utils.inference_config.InferenceModel`) on ``gpu`` (the compute model's table or a spec file), placed
    on ``topology`` (a path, a :class:`topo.Topology`, or None for the fabric ``options`` derive; ``gpus`` GPUs in
    all, default two replicas' worth so that KV can move between them).

    Layout: ``tp x pp x dp`` GPUs per replica (``dp`` attention replicas, DeepSeek's DP attention), experts over
    ``ep`` ranks; ``moe_tp`` splits every expert over the TP ranks instead (None: on for an MoE model with ``ep`` 1
    and ``tp`` > 1, SGLang's and vLLM's default).  ``dtype`` the weights (None: the model's), ``kv_dtype`` the KV
    cache.  A Vidur-layout profile prices the step from measured operations instead:
    :func:`simulator.serve.vidur.vidur_cost_model` (same arguments plus the profile's folder)."""
    from simulator.options import TopoOptions
    from simulator.topo.inference import fabric_for
    from utils.inference_config import InferenceModel, resolve_model

    m = model if isinstance(model, InferenceModel) else resolve_model(str(model))
    name = m.name if isinstance(model, InferenceModel) else str(model)
    if moe_tp is None:
        moe_tp = m.is_moe and ep == 1 and tp > 1
    world = tp * pp * dp
    job = InferenceJob(m, "decode", 1, 1, world_size=world, tp=tp, pp=pp, ep=ep if m.is_moe else 1,
                       weight_dtype=dtype, kv_dtype=kv_dtype, moe_tp=moe_tp, speculative_tokens=speculative_tokens,
                       gpu_type=gpu, model_name=name)
    options = options if options is not None else TopoOptions()
    if topology is None:
        if options.gpus_per_server is None:   # an 8-GPU server (DGX/HGX) unless told otherwise
            options = replace(options, gpus_per_server=8)
        per = options.gpus_per_server
        total = max(gpus or 2 * world, world)
        gpus = -(-total // per) * per   # whole servers, two replicas' worth by default (a KV transfer's peer)
    _check_precision(job, gpu)
    fabric, links, _notes = fabric_for(topology, options, gpus or world, fabrics)
    return ModelStepCost(job, gpu, fabric, links, a2a=a2a, cuda_graphs=cuda_graphs, host=host,
                         two_batch_overlap=two_batch_overlap, acceptance_rate=acceptance_rate,
                         max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                         gpu_memory_utilization=gpu_memory_utilization, memo=memo)


def _check_precision(job: InferenceJob, gpu: str) -> None:
    """One line when the GPU lacks the weights' tensor cores (FP4 needs Blackwell, FP8 Hopper or newer)."""
    from mocked_model.compute import gpu_spec

    spec = gpu_spec(gpu)
    if job.weight_kind == "fp4" and spec.fp4_tflops is None:
        raise ConfigError(f"--dtype float4 needs FP4 tensor cores (NVFP4/MXFP4: Blackwell, B200 or GB200); the "
                          f"{spec.name} has none: give --dtype float8 or bfloat16")
    if job.weight_kind == "fp8" and spec.fp8_tflops is None:
        raise ConfigError(f"{job.name}'s weights are FP8 ({'--dtype' if job.weight_dtype else 'the model default'}) "
                          f"but the {spec.name} has no FP8 tensor cores: give --dtype bfloat16")

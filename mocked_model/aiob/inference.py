"""AIOB for inference: time each SimAI record kind of a prefill or decode step with real torch operations
on this device, and write AICB 2.1's inference compute file.

    compute = measure_inference_job(job, loops=10)     # one process, one rank's share
    compute.write(path)

One layer of each record kind on the job's stage is built (:data:`mocked_model.inference.SECTION_OF_RECORD`
names its section) with the shapes the mocked model gives its items (heads, experts and tokens of one
rank), and its forward is timed ``loops`` times after warm-up (AICB's outlier rule, microseconds).  The
file is our compute file (``train_iter:1`` first, which AICB's reader skips) with AICB's
``inference_term: <phase>`` label, the device and the sections AICB's ``extract_inference_averages`` files
under the same records.

Plain torch, so that every device works (a CPU too, slowly):

- linear layers: ``torch.matmul`` in bf16 on a GPU (FP8 weights are timed as bf16: torch has no block-scaled
  FP8 GEMM; DeepGEMM is AICB's Hopper-only choice), float32 on a CPU;
- MLA: the absorbed decode form as batched matmuls and a softmax over the cached latent (FlashMLA's
  computation), the prefill form through ``scaled_dot_product_attention`` (causal);
- GQA: ``scaled_dot_product_attention`` over the KV cache (decode) or the prompt (prefill, causal);
- gated DeltaNet: the recurrent delta rule step by step (decode: one step; prefill: one step per token,
  no chunked kernel), the causal convolution as ``conv1d``;
- MoE experts: one matmul pair per active expert with its token count.

On a CPU, weights above :data:`CPU_WEIGHT_CAP` elements are multiplied by a column slice and the rest of
their columns added at the slice's rate (a matmul's time is linear in its output columns), and the
experts cycle through at most :data:`CPU_DISTINCT_EXPERTS` weight sets; the section's ``implementation:``
line says so.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mocked_model.aiob.compute_file import ComputeFile
from mocked_model.aiob.timing import OUTLIER_FACTOR, clock_for, summarize
from mocked_model.inference import SECTION_OF_RECORD, moe_routing
from utils.inference_job import InferenceJob
from utils.progress import progress, say

CPU_WEIGHT_CAP = 1 << 25
"""Most elements of one weight allocated on a CPU (128 MiB in float32); bigger ones are timed on a slice."""
CPU_DISTINCT_EXPERTS = 4
"""Expert weight sets allocated on a CPU; the experts cycle through them."""
WARMUP = {"cuda": 3, "cpu": 1}


@dataclass
class _Op:
    """A record's forward (``run``), and how it was done."""

    run: Callable[[], object]
    implementation: str


class _Linear:
    """``x @ W`` for a ``(k, n)`` weight.  On a CPU a weight above :data:`CPU_WEIGHT_CAP` elements is a column
    slice: the call multiplies by the slice and returns a full-width buffer, and :meth:`missing_ns` times
    what the slice left out (the rest of the columns, at the slice's rate) so that it can be added."""

    def __init__(self, f: _Factory, k: int, n: int) -> None:
        self.n = n
        self.cols = n if not f.cpu or k * n <= CPU_WEIGHT_CAP else max(1, CPU_WEIGHT_CAP // k)
        self.w = f.randn(k, self.cols)
        self.rows: int | None = None
        self.out: torch.Tensor | None = None

    @property
    def sliced(self) -> bool:
        return self.cols < self.n

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ self.w
        if not self.sliced:
            return y
        self.rows = x.shape[0]
        if self.out is None or self.out.shape[0] != x.shape[0]:
            self.out = torch.zeros(x.shape[0], self.n, dtype=y.dtype, device=y.device)
        return self.out

    def missing_ns(self, clock) -> float:
        """Time of the columns the slice left out: (n / cols - 1) x the slice's own time (best of 3)."""
        if not self.sliced or self.rows is None:
            return 0.0
        x = torch.zeros(self.rows, self.w.shape[0], dtype=self.w.dtype, device=self.w.device)
        best = min(clock.time(lambda: x @ self.w)[1] for _ in range(3))
        return best * (self.n / self.cols - 1)


class _Factory:
    """Tensors of the job's shapes on one device, in the timing dtype."""

    def __init__(self, job: InferenceJob, device: torch.device) -> None:
        self.job, self.m, self.device = job, job.model, device
        self.cpu = device.type != "cuda"
        self.dtype = torch.float32 if self.cpu else torch.bfloat16
        self.gen = torch.Generator(device="cpu").manual_seed(0)
        self.linears: list[_Linear] = []

    def randn(self, *shape: int, scale: float = 0.02) -> torch.Tensor:
        return (torch.randn(*shape, generator=self.gen) * scale).to(device=self.device, dtype=self.dtype)

    def linear(self, k: int, n: int) -> _Linear:
        layer = _Linear(self, k, n)
        self.linears.append(layer)
        return layer

    def norm(self, width: int) -> Callable[[torch.Tensor], torch.Tensor]:
        weight = torch.ones(width, device=self.device, dtype=self.dtype)
        return lambda x: F.rms_norm(x, (width,), weight, 1e-6)


def _mla(f: _Factory) -> _Op:
    m, job = f.m, f.job
    t, b, heads = job.tokens, job.micro_batch, m.num_heads // job.tp
    q_head = m.qk_nope_dim + m.qk_rope_dim
    x = f.randn(t, m.hidden_size)
    norm = f.norm(m.hidden_size)
    qkv_a = f.linear(m.hidden_size, (m.q_lora_rank or 0) + m.kv_width)
    q_b = f.linear(m.q_lora_rank or m.hidden_size, heads * q_head)
    o_proj = f.linear(heads * m.v_head_dim, m.hidden_size)
    q_in = f.randn(t, m.q_lora_rank or m.hidden_size)
    if job.decode:
        w_uk = f.randn(heads, m.qk_nope_dim, m.kv_lora_rank)
        w_uv = f.randn(heads, m.kv_lora_rank, m.v_head_dim)
        cache = f.randn(b, job.context, m.kv_width, scale=1.0)

        def attention() -> torch.Tensor:
            q = q_b(q_in).view(t, heads, q_head)
            q_lat = torch.bmm(q[..., :m.qk_nope_dim].transpose(0, 1), w_uk).transpose(0, 1)     # (t, h, kv_lora)
            query = torch.cat([q_lat, q[..., m.qk_nope_dim:]], dim=-1).view(b, -1, m.kv_width)
            scores = torch.softmax(query @ cache.transpose(1, 2) / math.sqrt(q_head), dim=-1)
            latent = (scores @ cache[..., :m.kv_lora_rank]).view(t, heads, m.kv_lora_rank)
            out = torch.bmm(latent.transpose(0, 1), w_uv).transpose(0, 1).reshape(t, heads * m.v_head_dim)
            return o_proj(out)

        how = "absorbed MLA: torch bmm + softmax over the cached latent"
    else:
        kv_b = f.linear(m.kv_lora_rank, heads * (m.qk_nope_dim + m.v_head_dim))
        latent = f.randn(t, m.kv_lora_rank)
        s = job.seq_length

        def attention() -> torch.Tensor:
            q = q_b(q_in).view(b, s, heads, q_head).transpose(1, 2)
            kv = kv_b(latent).view(b, s, heads, m.qk_nope_dim + m.v_head_dim)
            k = torch.cat([kv[..., :m.qk_nope_dim], q[..., m.qk_nope_dim:].transpose(1, 2)], dim=-1).transpose(1, 2)
            v = kv[..., m.qk_nope_dim:].transpose(1, 2)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return o_proj(out.transpose(1, 2).reshape(t, heads * m.v_head_dim))

        how = "MLA prefill: kv_b decompression + scaled_dot_product_attention (causal)"

    def run() -> object:
        qkv_a(norm(x))
        return attention()

    return _Op(run, f"{how}; {f.dtype}".replace("torch.", ""))


def _gqa(f: _Factory) -> _Op:
    m, job = f.m, f.job
    t, b, d = job.tokens, job.micro_batch, m.head_dim
    heads, kv = m.num_heads // job.tp, max(m.num_kv_heads // job.tp, 1)
    q_width = heads * d * (2 if m.output_gate else 1)
    x = f.randn(t, m.hidden_size)
    qkv = f.linear(m.hidden_size, q_width + 2 * kv * d)
    o_proj = f.linear(heads * d, m.hidden_size)
    qk_norm = f.norm(d)
    q_len = t // b
    ctx = job.context if job.decode else q_len
    cache_k, cache_v = f.randn(b, kv, ctx, d, scale=1.0), f.randn(b, kv, ctx, d, scale=1.0)

    def run() -> object:
        y = qkv(x)
        q = qk_norm(y[:, :heads * d].reshape(t, heads, d)).view(b, q_len, heads, d).transpose(1, 2)
        k = cache_k.repeat_interleave(heads // kv, dim=1)
        v = cache_v.repeat_interleave(heads // kv, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=not job.decode)
        out = out.transpose(1, 2).reshape(t, heads * d)
        if m.output_gate:
            out = out * torch.sigmoid(y[:, heads * d:2 * heads * d])
        return o_proj(out)

    return _Op(run, f"GQA: scaled_dot_product_attention over {'the KV cache' if job.decode else 'the prompt'}; "
                    f"{f.dtype}".replace("torch.", ""))


def _gdn(f: _Factory) -> _Op:
    m, job = f.m, f.job
    t, b = job.tokens, job.micro_batch
    hk, hv = m.linear_key_heads // job.tp, m.linear_value_heads // job.tp
    dk, dv = m.linear_key_dim, m.linear_value_dim
    key, value = hk * dk, hv * dv
    x = f.randn(t, m.hidden_size)
    qkvz = f.linear(m.hidden_size, 2 * key + 2 * value)
    ba = f.linear(m.hidden_size, 2 * hv)
    out_proj = f.linear(value, m.hidden_size)
    conv_w = f.randn(2 * key + value, 1, m.conv_kernel)
    norm = f.norm(dv)
    state = f.randn(b, hv, dk, dv)
    steps = t // b

    def run() -> object:
        y = qkvz(x)
        gates = torch.sigmoid(ba(x))
        mixed = y[:, :2 * key + value].reshape(b, steps, -1).transpose(1, 2)
        mixed = F.conv1d(F.pad(mixed, (m.conv_kernel - 1, 0)), conv_w, groups=2 * key + value)[..., :steps]
        mixed = F.silu(mixed).transpose(1, 2)
        q = mixed[..., :key].reshape(b, steps, hk, dk).repeat_interleave(hv // hk, dim=2)
        k = mixed[..., key:2 * key].reshape(b, steps, hk, dk).repeat_interleave(hv // hk, dim=2)
        v = mixed[..., 2 * key:].reshape(b, steps, hv, dv)
        g = gates[:, :hv].reshape(b, steps, hv)
        beta = gates[:, hv:].reshape(b, steps, hv)
        s = state.clone()
        outs = []
        for i in range(steps):   # the delta rule, one token at a time (FLA's recurrent form)
            s = s * g[:, i, :, None, None]
            memory = (s * k[:, i, :, :, None]).sum(-2)
            delta = (v[:, i] - memory) * beta[:, i, :, None]
            s = s + k[:, i, :, :, None] * delta[:, :, None, :]
            outs.append((s * q[:, i, :, :, None]).sum(-2))
        o = norm(torch.stack(outs, 1)) * F.silu(y[:, 2 * key + value:].reshape(b, steps, hv, dv))
        return out_proj(o.reshape(t, value))

    return _Op(run, f"gated DeltaNet: torch recurrent delta rule ({steps} step(s)), conv1d; {f.dtype}".replace("torch.", ""))


def _mlp(f: _Factory, rows: int, ffn: int, norm: bool = True) -> _Op:
    h = f.m.hidden_size
    x = f.randn(rows, h)
    gate_up = f.linear(h, 2 * ffn)
    down = f.linear(ffn, h)
    n = f.norm(h)

    def run() -> object:
        y = gate_up(n(x) if norm else x)
        return down(F.silu(y[:, :y.shape[1] // 2]) * y[:, y.shape[1] // 2:])

    return _Op(run, f"SwiGLU MLP: torch matmul; {f.dtype}".replace("torch.", ""))


def _experts(f: _Factory) -> _Op:
    m, job = f.m, f.job
    routing = moe_routing(job)
    counts = [c for c in routing.expert_tokens if c]
    h, ffn = m.hidden_size, m.expert_ffn
    sets = len(counts) if not f.cpu else min(len(counts), CPU_DISTINCT_EXPERTS)
    weights = [(f.randn(h, 2 * ffn), f.randn(ffn, h)) for _ in range(max(sets, 1))]
    inputs = [f.randn(c, h) for c in counts]
    shared = _mlp(f, max(math.ceil(job.rank_tokens), 1), m.shared_experts * m.shared_expert_ffn, norm=False) \
        if m.kind != "deepseek" and m.shared_experts else None

    def run() -> object:
        out = None
        for i, x in enumerate(inputs):
            w13, w2 = weights[i % len(weights)]
            y = x @ w13
            out = (F.silu(y[:, :ffn]) * y[:, ffn:]) @ w2
        if shared is not None:
            shared.run()
        return out

    how = f"{len(counts)} active experts, one torch matmul pair each"
    if f.cpu and sets < len(counts):
        how += f" (cycling {sets} weight sets on the CPU)"
    return _Op(run, f"{how}; {f.dtype}".replace("torch.", ""))


def _router(f: _Factory) -> _Op:
    m, rows = f.m, max(math.ceil(f.job.rank_tokens), 1)
    x = f.randn(rows, m.hidden_size)
    gate = f.linear(m.hidden_size, m.routed_experts)
    return _Op(lambda: torch.topk(torch.softmax(gate(x).float(), dim=-1), m.topk, dim=-1),
               f"gate matmul + softmax + top-k; {f.dtype}".replace("torch.", ""))


def _norm_op(f: _Factory) -> _Op:
    x = f.randn(f.job.tokens, f.m.hidden_size)
    n = f.norm(f.m.hidden_size)
    return _Op(lambda: n(x), f"rms_norm; {f.dtype}".replace("torch.", ""))


def _embedding(f: _Factory) -> _Op:
    rows = min(f.job.padded_vocab() // f.job.tp, 4096 if f.cpu else 1 << 30)
    table = f.randn(rows, f.m.hidden_size)
    ids = torch.randint(0, rows, (f.job.tokens,), generator=f.gen).to(f.device)
    return _Op(lambda: F.embedding(ids, table), f"embedding gather over {rows} rows; {f.dtype}".replace("torch.", ""))


def _head(f: _Factory) -> _Op:
    job, m = f.job, f.m
    x = f.randn(job.lm_tokens(), m.hidden_size)
    head = f.linear(m.hidden_size, job.padded_vocab() // job.tp)
    n = f.norm(m.hidden_size)

    def run() -> object:
        logits = head(n(x)).float()
        return torch.multinomial(torch.softmax(logits, dim=-1), 1)

    return _Op(run, f"final norm, LM head matmul, softmax, multinomial; {f.dtype}".replace("torch.", ""))


def _record_ops(f: _Factory) -> dict[str, Callable[[], _Op]]:
    """Builders of the records of the job's stage (one representative layer of each kind)."""
    m, job = f.m, f.job
    first, count = job.stage_layers()[job.pp_rank]
    layers = range(first, first + count)
    ops: dict[str, Callable[[], _Op]] = {}
    kinds = {m.attention_kind(i) for i in layers}
    if "mla" in kinds:
        ops["attention_layer"] = lambda: _mla(f)
    if "gqa" in kinds:
        ops["attention_layer"] = lambda: _gqa(f)
    if "gdn" in kinds:
        ops["attention_gdn"] = lambda: _gdn(f)
    if m.kind != "deepseek":
        ops["attention_norm"] = lambda: _norm_op(f)
    if any(not m.is_moe_layer(i) for i in layers):
        ops["dense_mlp"] = lambda: _mlp(f, job.tokens, m.dense_ffn // job.tp)
    if any(m.is_moe_layer(i) for i in layers):
        tr = max(math.ceil(job.rank_tokens), 1)
        if m.kind == "deepseek":
            ops["shared_experts"] = lambda: _mlp(f, tr, m.shared_experts * m.shared_expert_ffn)
        else:
            ops["moe_norm"] = lambda: _norm_op(f)
        ops["moe_route"] = lambda: _router(f)
        ops["moe_expert"] = lambda: _experts(f)
    if job.pp_rank == 0:
        ops["embedding"] = lambda: _embedding(f)
    if job.pp_rank == job.pp - 1:
        ops["lm_head"] = lambda: _head(f)
    return ops


def measure_inference_job(job: InferenceJob, loops: int = 1, device: torch.device | str | None = None,
                          log: Callable[[str], None] | None = None) -> ComputeFile:
    """Time one layer of each record kind of the job's stage; returns the compute file (microseconds)."""
    device = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    clock = clock_for(device)
    f = _Factory(job, device)
    label = torch.cuda.get_device_name(device) if device.type == "cuda" else \
        f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)"
    out = ComputeFile(iterations=1, labels={
        "inference_term": job.phase, "compute_source": "aiob", "device": label, "clock": clock.name,
        "samples": f"{max(loops, 1)} per record after {WARMUP[device.type if device.type == 'cuda' else 'cpu']} "
                   f"warm-up; above {OUTLIER_FACTOR:g}x the minimum dropped"})
    warmup = WARMUP["cuda" if device.type == "cuda" else "cpu"]
    records = _record_ops(f)
    bar = progress(total=len(records) * (warmup + max(loops, 1)), desc="AIOB", unit="run")
    with torch.inference_mode():
        for record, build in records.items():
            say(log, f"AIOB: timing {record} on {label}")
            bar.set_postfix_str(record, refresh=False)
            start = len(f.linears)
            op = build()
            samples = []
            for index in range(warmup + max(loops, 1)):
                _, ns = clock.time(op.run)
                bar.update()
                if index >= warmup:
                    samples.append(ns)
            sliced = [layer for layer in f.linears[start:] if layer.sliced]
            extra = sum(layer.missing_ns(clock) for layer in sliced)
            implementation = op.implementation + (f"; {len(sliced)} weight(s) multiplied by a column slice, the rest "
                                                  "added at its rate" if sliced else "")
            out.sections[SECTION_OF_RECORD[record]] = summarize([s + extra for s in samples], implementation)
            del op
    bar.close()
    return out

"""AIOB times what the job's software stack launches (``--transformer_impl``, ``--no_apex``, Megatron's fusion
flags, ``--fp8_recipe``): the op specs carry the stack's choices from the computation items the compute model
prices, and the timed operations follow them, each recording what ran.  The layout tests need no torch; the CPU
tests run for real on gpt_tiny at sequence 64 with one intra-op thread; the GPU test runs only where CUDA and
Transformer Engine are.
"""

from __future__ import annotations

import pytest

from mocked_model.aiob.layout import STACK_KEYS, OpSpec, op_specs, section_items
from utils.cli import parse_job

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the layout tests run without torch
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")
gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(torch is None or not torch.cuda.is_available(), reason="needs a CUDA device")

LOCAL_TORCH = ("--transformer_impl", "local", "--no_apex")
ROPE_SWIGLU = ("--position_embedding_type", "rope", "--swiglu", "--num_query_groups", "2")


def tiny(*flags: str, seq: int = 64):
    return parse_job(["--model_name", "gpt_tiny", "--seq_length", str(seq), *flags], "test", "test")[0]


@pytest.fixture(autouse=True)
def one_thread():
    if torch is None:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---- layout: the specs carry the stack (no torch) ----------------------------------------------------------

def specs_of(*flags: str) -> dict[str, OpSpec]:
    return {spec.section: spec for spec in op_specs(tiny(*flags))}


def test_default_specs_carry_the_transformer_engine_stack():
    specs = specs_of(*ROPE_SWIGLU)
    assert {spec.dims["stack"] for spec in specs.values()} == {"te"}
    # TE's LayerNormLinear: the norm before QKV and fc1 is fused into them (timed alone, in its own section)
    assert specs["layernorm"].dims["into_linear"] == "atten_qkv" and specs["layernorm2"].dims["into_linear"] == "mlp_linear_1"
    assert "into_linear" not in specs["layernorm_post"].dims
    assert specs["atten_qkv"].dims["te"] and specs["atten_qkv"].dims["fp8_input"] and specs["atten_qkv"].dims["accumulate"]
    assert specs["atten_flash"].dims["impl"] == "flash" and "softmax" not in specs["atten_flash"].dims
    assert specs["atten_rope"].dims["fused"] and specs["atten_rope"].dims["q_heads"] == 8
    assert specs["mlp_gelu"].dims["fused"] and specs["residual_mlp"].dims["fused"] and not specs["loss"].dims["fused"]
    assert specs["param_time"].dims["impl"] == "fused" and specs["param_time"].dims["tensors"] > 4


def test_local_torch_specs_carry_the_torch_paths():
    specs = specs_of(*LOCAL_TORCH, *ROPE_SWIGLU)
    assert {spec.dims["stack"] for spec in specs.values()} == {"local-torch"}
    assert not specs["layernorm"].dims["fused"] and "into_linear" not in specs["layernorm"].dims
    assert specs["atten_flash"].dims["impl"] == "unfused" and specs["atten_flash"].dims["softmax"] == "torch"
    assert not specs["atten_rope"].dims["fused"]
    assert not specs["atten_qkv"].dims["te"] and not specs["atten_qkv"].dims["accumulate"]
    assert specs["param_time"].dims["impl"] == "torch"
    # with apex: Megatron's fused masked softmax, gradient-accumulation fusion
    local = specs_of("--transformer_impl", "local")
    assert local["atten_flash"].dims["softmax"] == "fused" and local["mlp_linear_1"].dims["accumulate"]
    # the fusion flags reach the ops
    flags = specs_of(*LOCAL_TORCH, "--no_bias_gelu_fusion", "--no_bias_dropout_fusion", "--cross_entropy_loss_fusion")
    assert not flags["mlp_gelu"].dims["fused"] and not flags["residual_attn"].dims["fused"] and flags["loss"].dims["fused"]


def test_fp8_specs_carry_the_recipe():
    specs = specs_of("--dtype", "float8", "--fp8_recipe", "tensorwise", "--normalization", "RMSNorm")
    assert specs["atten_qkv"].dims["fp8_recipe"] == "tensorwise" and specs["mlp_linear_2"].dims["fp8_recipe"] == "tensorwise"
    assert specs["logit_time"].dims["bf16"]  # Megatron keeps the output layer out of FP8
    assert specs["layernorm"].dims["fp8_out"] and specs["layernorm"].dims["kind"] == "RMSNorm"
    assert specs["param_time"].dims["fp8_recipe"] == "tensorwise"


@pytest.mark.parametrize("flags", [(), LOCAL_TORCH + ROPE_SWIGLU, ("--transformer_impl", "local", "--use_flash_attn"),
                                   ("--dtype", "float8", "--moe_enable", "--num_experts", "4", "--moe_router_topk", "2",
                                    "--swiglu", "--world_size", "2", "--expert_model_parallel_size", "2",
                                    "--global_batch", "2", "--no_gradient_accumulation_fusion")])
def test_spec_dims_match_the_items_the_compute_model_prices(flags):
    # every stack key of a section's forward item (the compute model's default where the item lacks it) is the
    # timed op's, and every GEMM's accumulation is its wgrad item's
    job = tiny(*flags)
    specs = {spec.section: spec for spec in op_specs(job)}
    checked = 0
    for (forward, _), phases in section_items(job).items():
        spec = specs[forward]
        for item in phases["forward"]:
            meta = item.meta
            for key, default in STACK_KEYS.get(spec.kind, ()):
                if default is not None or key in meta:
                    assert spec.dims.get(key) == meta.get(key, default), (forward, key)
                    checked += 1
        for item in phases.get("backward", []):
            if item.meta.get("op") == "wgrad":
                assert spec.dims["accumulate"] == item.meta["accumulate"], forward
                checked += 1
    assert checked > 10


# ---- CPU: the structure follows the stack ------------------------------------------------------------------

@pytest.fixture(scope="module")
def local_torch_file():
    from mocked_model.aiob.measure import measure_job

    return measure_job(tiny(*LOCAL_TORCH, *ROPE_SWIGLU), device="cpu", min_samples=1)


@needs_torch
def test_local_torch_times_megatrons_torch_paths(local_torch_file):
    impl = {name: t.implementation for name, t in local_torch_file.sections.items()}
    assert local_torch_file.labels["stack"] == "local-torch (--transformer_impl local --no_apex)"
    assert impl["layernorm"] == "torch F.layer_norm"
    # forward_torch_softmax: fp32 cast, masked_fill_ through an explicit [1, 1, s, s] mask with -10000, cast back
    assert impl["atten_flash"].startswith("torch baddbmm (alpha 1/sqrt(d)), .float(), masked_fill_ causal mask "
                                          "[1, 1, s, s] with -10000, softmax in float32")
    assert impl["atten_rope"].startswith("torch eager rotary on queries and keys separately")
    assert impl["param_time"].startswith("torch per-tensor torch.norm gathered by torch.tensor (host sync per tensor), "
                                         "AdamW (foreach)")
    # no gradient-accumulation fusion: the wgrad written, then DDP's main_grad.add_, in the backward section
    for section in ("atten_qkv", "atten_linear", "mlp_linear_1", "mlp_linear_2", "logit_time"):
        assert impl[section].startswith("torch matmul") and impl[section].endswith("main_grad.add_ (DDP hook)"), section
    # the fusion flag's default; on a CPU its functions run eagerly (compiling would time nothing a GPU runs)
    assert impl["mlp_gelu"].startswith("Megatron's fused bias_swiglu (its functions (eager on a CPU")
    assert impl["loss"].startswith("Megatron's vocab-parallel cross entropy in float32 (eager")
    assert all(t.avg_us > 0 for t in local_torch_file.sections.values())


@needs_torch
def test_transformer_engine_default_on_a_cpu_records_the_fallback():
    from mocked_model.aiob.measure import measure_job

    compute = measure_job(tiny(*ROPE_SWIGLU), device="cpu", min_samples=1)
    impl = {name: t.implementation for name, t in compute.sections.items()}
    assert compute.labels["stack"].startswith("te (--transformer_impl transformer_engine")
    for section in ("layernorm", "atten_qkv", "atten_rope", "atten_flash", "atten_linear", "mlp_linear_1", "bwd_fc2"):
        assert impl[section].startswith("transformer_engine not importable: torch "), section
        assert impl[section].endswith("(a CPU run: Transformer Engine's kernels need CUDA)"), section
    assert "scaled_dot_product_attention" in impl["atten_flash"]  # TE's default attention is a flash/fused kernel
    assert "wgrad accumulated into the float32 main_grad" in impl["atten_qkv"]
    assert "FusedAdam not importable" in impl["param_time"]


@needs_torch
def test_torch_softmax_attention_is_causal_attention():
    from mocked_model.aiob import modules

    b, h, g, s, d = 2, 4, 2, 32, 16
    dims = dict(micro=b, heads=h, groups=g, seq=s, head_dim=d, v_dim=d, impl="unfused", p=0.0, stack="local-torch",
                softmax="torch")
    op = modules.build_op(OpSpec("atten_flash", "bwd_core", "attention", (b, h, s, d), dims), torch.device("cpu"),
                          torch.float32)
    assert op.mask.shape == (1, 1, s, s) and op.mask.dtype == torch.bool
    out = op.forward()
    op.backward(out)
    k = op.k.repeat_interleave(h // g, dim=0)
    v = op.v.repeat_interleave(h // g, dim=0)
    want = F.scaled_dot_product_attention(op.q, k, v, is_causal=True)
    assert torch.allclose(out, want, atol=1e-5) and op.q.grad.shape == op.q.shape and op.k.grad.shape == (b * g, s, d)


@needs_torch
def test_eager_rotary_rotates_queries_and_keys_separately():
    from mocked_model.aiob import modules

    spec = OpSpec("atten_rope", "bwd_rope", "rotary", (8, 1, 6 * 16), {"head_dim": 16, "q_heads": 4,
                                                                       "stack": "local-torch", "fused": False})
    op = modules.build_op(spec, torch.device("cpu"), torch.float32)
    q, k = op.forward()
    assert q.shape == (8, 1, 4, 16) and k.shape == (8, 1, 2, 16)
    t, freqs = op.parts[0], op.freqs
    x1, x2 = t.chunk(2, dim=-1)
    assert torch.allclose(q, t * freqs.cos() + torch.cat((-x2, x1), dim=-1) * freqs.sin())
    op.backward((q, k))
    assert all(p.grad is not None for p in op.parts)


@needs_torch
@pytest.mark.parametrize("accumulate", [True, False])
def test_linear_weight_gradient_reaches_the_main_grad(accumulate):
    from mocked_model.aiob import modules

    dims = {"in": 16, "out": 8, "bias": True, "stack": "local", "te": False, "accumulate": accumulate, "grad_bytes": 4}
    op = modules.build_op(OpSpec("atten_qkv", "bwd_qkv", "linear", (4, 2, 16), dims), torch.device("cpu"), torch.float32)
    out = op.forward()
    op.backward(out)
    grad = op._grad[0].reshape(-1, 8)
    want = grad.t() @ op.x.detach().reshape(-1, 16)
    assert torch.allclose(op.main_grad, want, atol=1e-5)
    assert torch.allclose(op.b.grad, grad.sum(0), atol=1e-5)
    if accumulate:  # in the GEMM (gradient-accumulation fusion): no weight gradient is written
        assert op.w.grad is None and op.implementation.endswith("main_grad (torch addmm_)")
    else:  # written, then added by DDP's hook
        assert torch.allclose(op.w.grad, want, atol=1e-5) and op.implementation.endswith("(DDP hook)")


@needs_torch
def test_megatrons_cross_entropy_matches_torchs():
    from mocked_model.aiob import modules

    spec = OpSpec("loss", "bwd_loss", "loss", (6, 2, 32), {"stack": "local-torch", "fused": False})
    op = modules.build_op(spec, torch.device("cpu"), torch.float32)
    logits = op.logits.detach().clone().requires_grad_(True)
    loss = op.forward()
    op.backward(loss)
    want = F.cross_entropy(logits.reshape(-1, 32), op.target.reshape(-1), reduction="none").reshape(6, 2)
    want.backward(op._grad[0])
    assert torch.allclose(loss, want, atol=1e-5) and torch.allclose(op.logits.grad, logits.grad, atol=1e-5)


@needs_torch
def test_fused_activation_is_megatrons_and_falls_back_when_compile_fails(monkeypatch):
    from mocked_model.aiob import modules, timing

    spec = OpSpec("mlp_gelu", "bwd_act", "act", (4, 1, 32), {"kind": "gelu", "bias": True, "stack": "local-torch",
                                                             "fused": True})
    monkeypatch.setattr(modules, "_compiled", lambda fn, device: fn)  # the same functions, uncompiled: quick
    op = modules.build_op(spec, torch.device("cpu"), torch.float32)
    out = op.forward()
    x = op.x + op.bias
    assert torch.allclose(out, F.gelu(x, approximate="tanh"), atol=1e-5)

    def broken(fn, device):
        def run(*args):
            raise RuntimeError("inductor: no C++ compiler")
        return run

    monkeypatch.setattr(modules, "_compiled", broken)
    op = modules.build_op(spec, torch.device("cpu"), torch.float32)
    samples = timing.sample_op(op, timing.HostClock(), warmup=1, samples=1)
    assert samples.implementation == ("torch bias add + F.gelu (eager: torch.compile failed: RuntimeError: inductor: "
                                      "no C++ compiler)")


@needs_torch
def test_first_run_tries_each_fallback_in_turn():
    from mocked_model.aiob import modules, timing

    class Twice(modules.TimedOp):
        def __init__(self):
            super().__init__(OpSpec("x", "bwd_x", "act", (4,)), torch.device("cpu"), torch.float32)
            self.x, self.left, self.implementation = self.tensor(4), 2, "fp8"

        def forward(self):
            if self.left:
                raise RuntimeError(f"fails {self.left}")
            return self.x * 2

        def use_fallback(self, reason):
            self.left -= 1
            self.implementation += f" -> fallback ({reason})"
            return True

    samples = timing.sample_op(Twice(), timing.HostClock(), warmup=1, samples=2)
    assert samples.implementation == "fp8 -> fallback (RuntimeError: fails 2) -> fallback (RuntimeError: fails 1)"
    assert len(samples.forward_ns) == 2


@needs_torch
def test_torch_optimizer_keeps_the_cap_and_runs_adamw_foreach():
    from mocked_model.aiob import modules

    spec = OpSpec("param_time", None, "optimizer", (), {"params": 3 * modules.OPTIMIZER_CAP["cpu"], "stack": "local-torch",
                                                       "impl": "torch", "tensors": 100})
    op = modules.build_op(spec, torch.device("cpu"), torch.float32)
    assert isinstance(op.opt, torch.optim.AdamW) and op.opt.defaults["foreach"] and op.scale == 3
    assert len(op.params) == 4 and "(the rank has 100), scaled x3" in op.implementation
    before = op.model[0].clone()
    op.forward()
    assert not torch.equal(before, op.model[0])  # the step's result is copied to the model's parameters


def _stand_in_transformer_engine():
    """A stand-in for ``transformer_engine.pytorch`` on a CPU: torch modules with TE's constructor arguments, which
    record how AIOB builds them."""
    import contextlib
    import types

    built = []

    class Linear(torch.nn.Linear):
        def __init__(self, i, o, bias=True, params_dtype=None, device=None, fuse_wgrad_accumulation=False):
            super().__init__(i, o, bias=bias, device=device, dtype=params_dtype)
            self.fuse_wgrad_accumulation = fuse_wgrad_accumulation
            built.append(self)

    class LayerNorm(torch.nn.LayerNorm):
        def __init__(self, width, eps=1e-5, params_dtype=None, device=None):
            super().__init__(width, eps=eps, device=device, dtype=params_dtype)
            built.append(self)

    class DotProductAttention(torch.nn.Module):
        def __init__(self, heads, kv, num_gqa_groups=None, attention_dropout=0.0, qkv_format="bshd",
                     attn_mask_type="padding"):
            super().__init__()
            self.qkv_format, self.attn_mask_type, self.groups = qkv_format, attn_mask_type, num_gqa_groups
            built.append(self)

        def forward(self, q, k, v):  # sbhd in, (s, b, heads * d) out
            out = F.scaled_dot_product_attention(*(t.permute(1, 2, 0, 3) for t in (q, k, v)), is_causal=True,
                                                 enable_gqa=True)
            return out.permute(2, 0, 1, 3).flatten(2)

    autocasts = []

    @contextlib.contextmanager
    def autocast(enabled=True, recipe=None):
        autocasts.append(recipe)
        yield

    return types.SimpleNamespace(Linear=Linear, LayerNorm=LayerNorm, RMSNorm=LayerNorm,
                                 DotProductAttention=DotProductAttention, autocast=autocast), built, autocasts


@needs_torch
def test_transformer_engine_stack_builds_tes_modules(monkeypatch):
    # the Transformer Engine path, on a CPU with a stand-in: what AIOB builds and how it calls it
    from mocked_model.aiob import modules
    from mocked_model.aiob.measure import measure_job

    te, built, autocasts = _stand_in_transformer_engine()
    ropes = []

    def rope(t, freqs, tensor_format="bshd", fused=False):
        ropes.append((t.shape, tensor_format, fused))
        return t * 1.0

    class Recipe:
        pass

    monkeypatch.setattr(modules, "_transformer_engine", lambda device: (te, "9.9"))
    monkeypatch.setattr(modules, "_te_rope", lambda: rope)
    monkeypatch.setattr(modules, "_fp8_recipe", lambda name: (Recipe(), ""))
    compute = measure_job(tiny(*ROPE_SWIGLU, "--dtype", "float8"), device="cpu", min_samples=1, warmup=1)
    impl = {name: t.implementation for name, t in compute.sections.items()}
    assert impl["layernorm"].startswith("transformer_engine 9.9 te.LayerNorm (te.LayerNormLinear's norm, timed alone; "
                                        "its GEMM is timed in atten_qkv)")
    assert impl["atten_qkv"] == ("transformer_engine 9.9 te.Linear (the GEMM of te.LayerNormLinear; its norm is timed "
                                 "in the norm's section), FP8 delayed (Recipe), wgrad accumulated into the float32 "
                                 "main_grad (fuse_wgrad_accumulation)")
    assert "float32 (Megatron keeps this GEMM out of FP8)" in impl["logit_time"]
    assert impl["atten_flash"].startswith("transformer_engine 9.9 DotProductAttention (causal, sbhd")
    assert impl["atten_rope"].startswith("transformer_engine 9.9 fused RoPE")
    linears = [m for m in built if isinstance(m, te.Linear)]
    assert linears and all(m.fuse_wgrad_accumulation and m.weight.main_grad.dtype == torch.float32 for m in linears)
    attention = next(m for m in built if isinstance(m, te.DotProductAttention))
    assert (attention.qkv_format, attention.attn_mask_type, attention.groups) == ("sbhd", "causal", 2)
    # queries (8 heads) and keys (2 groups) rotated separately, by the fused kernel, in sbhd
    assert {(shape[2], fmt, fused) for shape, fmt, fused in ropes} == {(8, "sbhd", True), (2, "sbhd", True)}
    assert autocasts and all(isinstance(r, Recipe) for r in autocasts)  # the FP8 GEMMs ran under TE's autocast


@needs_torch
def test_transformer_engine_failure_falls_back_to_torch_and_says_so(monkeypatch):
    from mocked_model.aiob import modules, timing

    te, _, _ = _stand_in_transformer_engine()

    class Broken(te.Linear):
        def forward(self, x):
            raise RuntimeError("no kernel image is available")

    te.Linear = Broken
    monkeypatch.setattr(modules, "_transformer_engine", lambda device: (te, "9.9"))
    dims = {"in": 16, "out": 8, "bias": False, "stack": "te", "te": True, "accumulate": False, "grad_bytes": 4}
    op = modules.build_op(OpSpec("atten_linear", "bwd_proj", "linear", (4, 1, 16), dims), torch.device("cpu"),
                          torch.float32)
    samples = timing.sample_op(op, timing.HostClock(), warmup=1, samples=1)
    assert samples.implementation == ("transformer_engine failed: torch F.linear, wgrad written in float32 + float32 "
                                      "main_grad.add_ (DDP hook) (RuntimeError: no kernel image is available)")


# ---- GPU: Transformer Engine (skipped without CUDA and transformer_engine) ------------------------------------

@gpu
@needs_cuda
@pytest.mark.parametrize("flags", [ROPE_SWIGLU, ("--dtype", "float8", "--normalization", "RMSNorm")])
def test_gpu_times_the_transformer_engine_stack(flags):
    from mocked_model.aiob import modules
    from mocked_model.aiob.measure import measure_job

    if modules._transformer_engine(torch.device("cuda"))[0] is None:
        pytest.skip("transformer_engine is not importable")
    compute = measure_job(tiny(*flags, seq=256), device="cuda")
    impl = {name: t.implementation for name, t in compute.sections.items()}
    assert compute.labels["dtype"] == "bfloat16" and all(t.avg_us > 0 for t in compute.sections.values())
    assert "te.LayerNorm" in impl["layernorm"] or "te.RMSNorm" in impl["layernorm"], impl["layernorm"]
    assert impl["atten_qkv"].startswith("transformer_engine ") and "te.Linear" in impl["atten_qkv"], impl["atten_qkv"]
    assert "DotProductAttention" in impl["atten_flash"] and "fuse_wgrad_accumulation" in impl["mlp_linear_2"]
    if "--dtype" in flags:  # FP8 where the GPU runs it, else bf16 with the reason
        assert "FP8 delayed" in impl["atten_qkv"] and "out of FP8" in impl["logit_time"], impl["atten_qkv"]
    else:
        assert impl["atten_rope"].startswith("transformer_engine ") and "fused RoPE" in impl["atten_rope"]
    assert not any(text.startswith(("transformer_engine failed", modules.TE_MISSING)) for text in impl.values()), impl

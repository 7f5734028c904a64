"""AIOB measurement: real torch operations of one rank's share, timed forward and backward on this
device.  CPU tests run for real on tiny shapes (gpt_tiny, sequences 64..256, a few samples, one
intra-op thread so that a busy machine does not stall a thread pool); the GPU tests run only where
CUDA is available.
"""

import os

import pytest

torch = pytest.importorskip("torch")

from mocked_model.aiob import modules, timing  # noqa: E402
from mocked_model.aiob.compute_file import ComputeFile  # noqa: E402
from mocked_model.aiob.layout import OpSpec, aiob_filename, op_specs  # noqa: E402
from mocked_model.aiob.measure import measure_job  # noqa: E402
from mocked_model.compute import gemm_tflops  # noqa: E402
from tests.conftest import ROOT, run_cli  # noqa: E402
from utils.cli import parse_job  # noqa: E402
from utils.workload import Workload  # noqa: E402
from workload_generator.compute_times import fill_compute_times  # noqa: E402
from workload_generator.megatron import MegatronWorkload  # noqa: E402

gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny(*flags: str, seq: int = 64):
    return parse_job(["--model_name", "gpt_tiny", "--seq_length", str(seq), *flags], "test", "test")[0]


LOCAL = ("--transformer_impl", "local")
"""Megatron-core's local layers: without --use_flash_attn its materialised attention (Transformer Engine, the
default, runs a flash/fused kernel; tests/test_aiob_stack.py covers the stacks)."""


@pytest.fixture(scope="module")
def tiny_files():
    """Measured files of gpt_tiny (local layers) at sequence 64 and 256 (measured once for the module)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {seq: measure_job(tiny(*LOCAL, seq=seq), device="cpu") for seq in (64, 256)}
    finally:
        torch.set_num_threads(threads)


def test_measured_file_round_trips_with_positive_times(tiny_files, tmp_path):
    compute = tiny_files[64]
    path = tmp_path / "aiob.txt"
    compute.write(path)
    back = ComputeFile.read(path)
    assert back.dumps() == compute.dumps() and back.labels["compute_source"] == "aiob"
    assert back.labels["dtype"] == "float32" and back.labels["device"].startswith("cpu")
    specs = op_specs(tiny(*LOCAL))
    # AICB's forward sections, our backward sections and the optimizer step, every one timed
    assert [s.section for s in specs] == [n for n in back.sections if not n.startswith("bwd_")]
    assert {s.backward for s in specs if s.backward} == {n for n in back.sections if n.startswith("bwd_")}
    for name, t in back.sections.items():
        assert 0 < t.min_us <= t.avg_us <= t.max_us, name
        assert t.implementation, name
    # the local path with apex: apex's norms and Megatron's fused masked softmax are CUDA kernels; on a CPU their
    # torch fallbacks run, and say so
    assert back.sections["layernorm"].implementation.startswith("torch F.layer_norm (apex's fused LayerNorm not importable")
    # without --use_flash_attn, Megatron's unfused attention is what runs (and is timed)
    assert back.sections["atten_flash"].implementation.startswith("torch baddbmm, masked_fill + torch.softmax")


def test_timed_shapes_follow_the_sequence_length(tiny_files):
    # What is timed is the job's own shapes: 4x the sequence gives 4x the GEMM rows and an s x s score
    # matrix of 256 instead of 64.  (Measured times are not compared: on a loaded machine noise can beat
    # any ratio; speed lives in bench/.)
    short = {o.section: o for o in op_specs(tiny(*LOCAL, seq=64))}
    long = {o.section: o for o in op_specs(tiny(*LOCAL, seq=256))}
    for section in ("atten_qkv", "mlp_linear_1"):
        assert short[section].shape[0] == 64 and long[section].shape[0] == 256, section
        assert long[section].shape[1:] == short[section].shape[1:], section
    assert short["atten_flash"].dims["seq"] == 64 and long["atten_flash"].dims["seq"] == 256
    for seq, compute in tiny_files.items():
        assert set(compute.sections) == set(tiny_files[64].sections), seq
        assert all(t.min_us > 0 for t in compute.sections.values()), seq


def test_measured_file_fills_every_computation_item(tiny_files):
    gen = MegatronWorkload(tiny("--computation_enable", *LOCAL))
    items = [i for i in gen() if i.is_computation]
    report = fill_compute_times(items, "aiob", compute=tiny_files[64])
    assert items and not report.missing and all(i.time_ns > 0 for i in items)
    # backward GEMMs take half their section each (dgrad, wgrad), attention backward its own section
    dgrad = next(i for i in items if i.meta["op"] == "dgrad" and i.meta["name"].endswith("linear_fc1"))
    assert dgrad.time_ns == pytest.approx(tiny_files[64].sections["bwd_fc1"].avg_us * 1000 / 2)


def test_moe_gqa_swiglu_and_mla_shapes_run_on_cpu():
    moe = tiny("--swiglu", "--normalization", "RMSNorm", "--moe_enable", "--num_experts", "4", "--moe_router_topk", "2",
               "--num_query_groups", "2", "--world_size", "2", "--expert_model_parallel_size", "2", "--global_batch", "2")
    compute = measure_job(moe, device="cpu", min_samples=1)
    assert compute.sections["moe_expert_fc1"].implementation == "torch loop of 2 matmuls (routed tokens per expert)"
    assert {"moe_router", "bwd_moe_expert_fc2", "moe_expert_act"} <= set(compute.sections)
    mla = parse_job(["--frame", "DeepSeek", "--hidden_size", "128", "--num_layers", "2", "--num_attention_heads", "4",
                     "--num_experts", "4", "--n_dense_layers", "1", "--moe_router_topk", "2", "--seq_length", "64",
                     "--q_lora_rank", "32", "--kv_lora_rank", "32", "--qk_nope_dim", "16", "--qk_rope_dim", "8",
                     "--v_head_dim", "16", "--vocab_size", "256", "--ffn_hidden_size", "256", "--moe_ffn_hidden_size", "64"],
                    "test", "test")[0]
    compute = measure_job(mla, device="cpu", min_samples=1)
    for section in ("mla_q_down", "mla_q_norm", "mla_kv_up", "atten_flash", "bwd_core", "moe_shared_fc1"):
        assert compute.sections[section].avg_us > 0


def test_outlier_rule_is_aicbs():
    # samples above 3x the minimum are dropped; max and mean over the kept ones; ns in, us out
    t = timing.summarize([10_000, 11_000, 29_000, 100_000])
    assert (t.min_us, t.max_us, t.avg_us) == (10.0, 29.0, pytest.approx(50 / 3))


class _Failing(modules.TimedOp):
    """An op whose optional kernel fails on first use, as flash-attn does on an unsupported shape."""

    def __init__(self):
        super().__init__(OpSpec("x", "bwd_x", "act", (4,)), torch.device("cpu"), torch.float32)
        self.x = self.tensor(4)
        self.optional = True
        self.implementation = "optional kernel"

    def forward(self):
        if self.optional:
            raise RuntimeError("unsupported head dimension\ndetails")
        return self.x * 2

    def use_fallback(self, reason):
        self.optional, self.implementation = False, f"torch (optional failed: {reason})"
        return True


def test_failing_optional_kernel_falls_back_and_says_so():
    samples = timing.sample_op(_Failing(), timing.HostClock(), warmup=1, samples=2)
    assert samples.implementation == "torch (optional failed: RuntimeError: unsupported head dimension)"
    assert len(samples.forward_ns) == 2 and all(s > 0 for s in samples.backward_ns)


def test_missing_optional_packages_change_the_implementation_only(monkeypatch):
    # as on a GPU machine without apex, flash-attn and grouped_gemm: the torch fallbacks are built
    monkeypatch.setattr(modules, "_apex_norms", lambda: (None, None))
    monkeypatch.setattr(modules, "_flash_attn", lambda: (None, ""))
    monkeypatch.setattr(modules, "_grouped_gemm", lambda: None)
    spec = OpSpec("atten_flash", "bwd_core", "attention", (1, 4, 32, 16),
                  dict(micro=1, heads=4, groups=2, seq=32, head_dim=16, v_dim=16))
    op = modules.build_op(spec, torch.device("cpu"), torch.float32)
    assert op.implementation == "torch scaled_dot_product_attention (causal)"
    out = op.forward()
    op.backward(out)
    assert out.shape == (1, 4, 32, 16) and op.k.grad.shape == (1, 2, 32, 16)


def test_unfused_attention_times_megatrons_path():
    # without --use_flash_attn: scores materialised, masked softmax, dropout, times V; keys and values
    # repeated to every head under GQA; the output has the queries' shape per (batch x head)
    spec = OpSpec("atten_flash", "bwd_core", "attention", (1, 4, 32, 16),
                  dict(micro=1, heads=4, groups=2, seq=32, head_dim=16, v_dim=16, impl="unfused", p=0.1))
    op = modules.build_op(spec, torch.device("cpu"), torch.float32)
    assert op.implementation.startswith("torch baddbmm, masked softmax, dropout, bmm")
    out = op.forward()
    op.backward(out)
    assert out.shape == (4, 32, 16) and op.k.grad.shape == (2, 32, 16)


def test_aicb_workload_only_measures_without_torchrun(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "w.csv"
    proc = run_cli(str(ROOT / "aicb.py"), "--frame", "Megatron", "--model_name", "gpt_tiny", "--world_size", "1",
                   "--seq_length", "128", "--aiob_enable", "--workload_only", "--output", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    job = tiny(seq=128)
    compute_path = tmp_path / "results" / "aiob_outputs" / aiob_filename(job, {"model_name": "gpt_tiny"})
    assert compute_path.name == "gpt_tiny-world_size1-tp1-pp1-ep1-gbs4-mbs1-seq128-flash_attn-False.txt"
    assert out.exists() and compute_path.exists() and "compute times: aiob" in proc.stdout
    compute = ComputeFile.read(compute_path)
    items = [i for i in Workload.load(out) if i.is_computation]
    assert items and all(i.time_ns and i.time_ns > 0 for i in items)
    assert compute.iterations == 1 and compute.sections["atten_qkv"].avg_us > 0


def test_aiob_file_goes_under_output_dir_and_errors_leave_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    proc = run_cli(str(ROOT / "aicb.py"), "--model_name", "gpt_tiny", "--seq_length", "64", "--aiob_enable",
                   "--workload_only", "--output_dir", str(tmp_path / "res"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(os.listdir(tmp_path / "res" / "aiob_outputs")) == 1
    assert len(os.listdir(tmp_path / "res" / "mocked_workload")) == 1
    bad = run_cli(str(ROOT / "aicb.py"), "--model_name", "gpt_tiny", "--compute_source", "roofline", "--gpu_type", "V42",
                  "--workload_only", "--output", str(tmp_path / "bad.csv"), cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--gpu_type 'V42'" in bad.stderr
    assert not (tmp_path / "bad.csv").exists()


# ---- GPU (skipped without CUDA) ----------------------------------------------------------------

@gpu
@needs_cuda
def test_gpu_measurement_uses_events_bf16_and_records_implementations():
    # the local layers with --use_flash_attn: flash-attn when importable, apex's norms when importable
    compute = measure_job(tiny(*LOCAL, "--use_flash_attn", seq=256), device="cuda")
    assert compute.labels["dtype"] == "bfloat16" and compute.labels["clock"].startswith("CUDA events")
    assert all(t.avg_us > 0 for t in compute.sections.values())
    flash = modules._flash_attn()[0] is not None
    assert ("flash-attn" in compute.sections["atten_flash"].implementation) == flash
    apex = modules._apex_norms()[0] is not None
    assert compute.sections["layernorm"].implementation.startswith("apex") == apex


@gpu
@needs_cuda
def test_gpu_grouped_gemm_or_loop():
    job = tiny("--swiglu", "--moe_enable", "--num_experts", "4", "--moe_router_topk", "2", "--moe_grouped_gemm", seq=256)
    compute = measure_job(job, device="cuda")
    grouped = modules._grouped_gemm() is not None
    assert compute.sections["moe_expert_fc1"].implementation.startswith("grouped_gemm") == grouped


@gpu
@needs_cuda
def test_h100_gemm_matches_the_roofline():
    if "H100" not in torch.cuda.get_device_name():
        pytest.skip("calibration point is an H100")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    clock = timing.CudaClock(torch.device("cuda"))
    for _ in range(5):
        a @ b
    ns = min(clock.time(lambda: a @ b)[1] for _ in range(20))
    measured = 2 * 8192**3 / ns / 1e3
    assert gemm_tflops(8192, 8192, 8192, "H100") == pytest.approx(measured, rel=0.15)


def test_out_of_memory_is_a_one_line_user_error(monkeypatch):
    from mocked_model.aiob import measure
    from utils.errors import ConfigError

    def no_memory(*_):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")

    monkeypatch.setattr(measure, "build_op", no_memory)
    with pytest.raises(ConfigError, match="--aiob_enable: Emb .* does not fit"):
        measure_job(tiny(), device="cpu")

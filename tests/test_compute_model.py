"""The compute model (no torch): GEMM tile and wave law, kernel lists of each operation, the optimizer
step, recomputation, FP8, the estimate compute file and its wiring into generation.

Expected values are derived by hand in the comments from the constants in mocked_model/compute:
A100: 312 TFLOP/s dense, 108 SMs, main-loop efficiency 0.851, so 312e12 * 0.851 / 108 =
2.458444e12 FLOP/s per SM; HBM 2.039 TB/s at 0.85 = 1.73315e12 B/s; GEMM fixed cost 5.5 us,
64 k-steps of pipeline fill, 3 us per memory-bound kernel.
"""

import subprocess
import sys
from dataclasses import replace

import pytest

from mocked_model.aiob.compute_file import FORWARD_SECTIONS, ComputeFile
from mocked_model.aiob.layout import estimated_compute_file, op_specs
from mocked_model.compute import GPUS, GemmShape, estimator, gemm_ns, gemm_tflops, gpu_spec, item_kernels, precision
from mocked_model.compute.gpus import nccl_sm_share
from mocked_model.megatron import optimizer_item
from tests.conftest import ROOT, run_cli
from utils.config import JobConfig, TrainingConfig
from utils.errors import ConfigError
from utils.model_config import ModelConfig
from utils.parallel import ParallelConfig
from utils.workload import CommType, WorkItem
from workload_generator.compute_times import default_source, fill_compute_times
from workload_generator.megatron import MegatronWorkload
from workload_generator.simai import SimAIWorkload

PER_SM = 312e12 * 0.851 / 108
HBM = 2.039e12 * 0.85

MOE_MLA = ModelConfig(name="tiny_ds", hidden_size=128, num_layers=3, num_attention_heads=4, ffn_hidden_size=256,
                      vocab_size=256, num_experts=4, moe_router_topk=2, moe_ffn_hidden_size=64, n_shared_experts=1,
                      n_dense_layers=1, normalization="RMSNorm", swiglu=True, position_embedding_type="rope",
                      multi_latent_attention=True, q_lora_rank=64, kv_lora_rank=32, qk_head_dim=16,
                      qk_pos_emb_head_dim=8, v_head_dim=16)
DENSE = ModelConfig(name="tiny", hidden_size=64, num_layers=2, num_attention_heads=4, ffn_hidden_size=256,
                    vocab_size=256, max_position_embeddings=64)


def job(model=DENSE, seq=32, dtype="bfloat16", **layout):
    p = dict(world_size=4, tp=2, micro_batch=1, global_batch=4)
    p.update(layout)
    return JobConfig(model, ParallelConfig(**p), TrainingConfig(seq_length=seq, computation_enable=True, gpu_type="H100",
                                                                dtype=dtype))


# ---- GEMMs ------------------------------------------------------------------------------------------

def test_large_gemm_by_hand():
    # A100, 8192^3 bf16: 256x128 tiles -> 32 x 64 = 2048 tiles, ceil(2048 / 108) = 19 waves, each
    # 2 * 256 * 128 * (8192 + 64) / 2.458444e12 s = 220.08 us -> 4181.60 us; the exposed epilogue
    # writes 8192^2 * 2 B at 1.73315e12 B/s = 77.44 us; plus 5.5 us: 4264.54 us = 257.8 TFLOP/s,
    # 82.6% of peak (He 2024 measured 258 with random inputs).
    main = 19 * 2 * 256 * 128 * (8192 + 64) / PER_SM
    epilogue = 8192**2 * 2 / HBM
    assert gemm_ns(GemmShape(8192, 8192, 8192), "A100") == pytest.approx(5500 + (main + epilogue) * 1e9)
    assert gemm_ns(GemmShape(8192, 8192, 8192), "A100") == pytest.approx(4264.54e3, rel=1e-5)
    assert gemm_tflops(8192, 8192, 8192, "A100") == pytest.approx(257.8, abs=0.1)


def test_small_gemm_by_hand_shows_the_efficiency_loss():
    # A100, 1024^3: the candidate tiles take (main loop only, us):
    #   256x128: 32 tiles < 108 SMs -> split k by min(108 // 32, 1024 // 256) = 3: one wave of
    #            2*256*128*(1024/3 + 64)/2.458444e12 = 10.80 us, plus fp32 partials 1024^2*4*3*2 B = 14.52 us
    #   128x128 (0.95 of the rate): 64 tiles, one wave of 2*128*128*1088 / (0.95 * 2.458444e12) = 15.26 us
    #   128x64 / 64x128 (0.85): 128 tiles, 2 waves = 17.06 us
    #   64x64 (0.75): 256 tiles, 3 waves of 2*64*64*1088 / (0.75 * 2.458444e12) = 14.50 us  <- fastest
    # plus the epilogue 1024^2 * 2 / 1.73315e12 = 1.21 us and 5.5 us: 21.21 us = 101 TFLOP/s, 32% of
    # peak against 82.6% at 8192^3.
    expected_us = 5.5 + 3 * 2 * 64 * 64 * 1088 / (0.75 * PER_SM) * 1e6 + 1024**2 * 2 / HBM * 1e6
    assert expected_us == pytest.approx(21.21, abs=0.01)
    assert gemm_ns(GemmShape(1024, 1024, 1024), "A100") / 1e3 == pytest.approx(expected_us)
    small, large = gemm_tflops(1024, 1024, 1024, "A100"), gemm_tflops(8192, 8192, 8192, "A100")
    assert small / 312 == pytest.approx(0.3245, abs=1e-3) and large / 312 == pytest.approx(0.826, abs=1e-3)


def test_wave_quantisation_and_hopper_epilogue():
    # One extra tile row beyond a full wave costs a whole wave: on A100, m = 108 * 256 = 27648 rows
    # of 256 against n = 128 is exactly one wave; one more row needs a second wave of 256x128 tiles,
    # so the law picks smaller tiles, and the time jumps (not proportionally to the FLOPs).
    full = gemm_ns(GemmShape(27648, 128, 4096), "A100")
    over = gemm_ns(GemmShape(27648 + 1, 128, 4096), "A100")
    assert over > full * 1.05
    # Hopper hides the epilogue: a weight-gradient GEMM accumulating into fp32 costs more on A100 than
    # its plain version, by the exposed 8-byte read-modify-write, and nothing on H100.
    plain, acc = GemmShape(4096, 4096, 2048), GemmShape(4096, 4096, 2048, out_bytes=4, accumulate=True)
    assert gemm_ns(acc, "A100") - gemm_ns(plain, "A100") == pytest.approx((4096**2 * 8 - 4096**2 * 2) / HBM * 1e9)
    assert gemm_ns(acc, "H100") == pytest.approx(gemm_ns(plain, "H100"))


@pytest.mark.parametrize("shape, measured", [
    ((1, 4096, 4096, 4096), 783.3), ((4, 4096, 4096, 4096), 793.1), ((1, 2048, 2048, 2048), 632.0),
    ((1, 1024, 2048, 2048), 524.3), ((1, 4096, 4096, 2048), 738.7), ((1, 4096, 1024, 1024), 488.1),
    ((1, 4096, 4096, 256), 392.2), ((1, 256, 2048, 256), 41.8), ((1, 2048, 4096, 1024), 594.2),
])
def test_xla_h100_table(shape, measured):
    # OpenXLA's measured H100 bf16 GEMMs (bench/check_gemm_law.py prints all 72; RMS log error 0.08)
    b, m, n, k = shape
    tflops = 2.0 * b * m * n * k / gemm_ns(GemmShape(m, n, k, b), "H100") / 1e3
    assert tflops == pytest.approx(measured, rel=0.2)


def test_gpu_table():
    for gpu in GPUS.values():
        assert gpu.bf16_tflops > 0 and gpu.hbm_tbps > 0 and 0.5 < gpu.gemm_eff < 1 and gpu.source and gpu.calibration
        assert gpu.sms > 0 and gpu.memory_gib > 0 and 0.5 < gpu.nvlink_efficiency < 1
    # datasheet figures (dense): A100 312 / 2.039 TB/s / 80 GB, A100 40GB 1.555 TB/s, H100 SXM 989.4 / 3.35,
    # H200 989.4 / 4.8 / 141 GB, B200 2250 / 8, GB200 2500
    assert (GPUS["A100"].bf16_tflops, GPUS["A100"].hbm_tbps, GPUS["A100"].memory_gib) == (312, 2.039, 80)
    assert GPUS["A100_40G"].hbm_tbps == 1.555
    assert (GPUS["H100"].bf16_tflops, GPUS["H100"].hbm_tbps, GPUS["H100"].sms) == (989.4, 3.35, 132)
    assert (GPUS["H200"].hbm_tbps, GPUS["H200"].memory_gib) == (4.8, 141)
    assert (GPUS["B200"].bf16_tflops, GPUS["GB200"].bf16_tflops) == (2250, 2500)
    assert gpu_spec("h100-sxm").name == "H100" and gpu_spec("H100 PCIe").name == "H100_PCIE"
    assert gpu_spec("a100-40gb").name == "A100_40G"
    # NCCL's NVLink models: 20 of 25 GB/s per link on A100, 20.6 on H100
    assert GPUS["A100"].nvlink_efficiency == 0.8 and GPUS["H100"].nvlink_efficiency == pytest.approx(0.824)
    # an overlapped collective takes 16 of the SMs
    assert nccl_sm_share("A100") == pytest.approx(16 / 108)
    with pytest.raises(ConfigError, match="--gpu_type 'V42' is not in the GPU table"):
        gpu_spec("V42")
    with pytest.raises(ConfigError, match="A100 has no FP8"):
        estimator("A100", "float8")


# ---- operations -------------------------------------------------------------------------------------

def attention_item(impl: str, phase: str = "forward", p: float = 0.1) -> WorkItem:
    meta = {"op": "attention", "impl": impl, "p": p, "v_dim": 128, "causal": True, "name": "core_attention"}
    return WorkItem(CommType.computation, stage=f"{phase}.core", shapes=((1, 16, 2048, 128), (1, 16, 2048, 128)),
                    flops=2.0 * 16 * 2048 * 2048 * 256, meta=meta)


def test_materialised_attention_against_flash_at_2048():
    # b = 1, 16 heads, s = 2048, d = 128, bf16, dropout 0.1, on A100.
    # Flash forward: causal half of 2 * 16 * 2048^2 * (128 + 128) = 17.18 GFLOP at 60% of 312 TFLOP/s
    # = 91.77 us, plus 5.5 us (its Q, K, V, O traffic, 33.7 MB, takes 19 us: compute bound) = 97.27 us.
    flash_us = 5.5 + 0.5 * 2 * 16 * 2048**2 * 256 / (312e12 * 0.6) * 1e6
    assert estimator("A100")(attention_item("flash")) / 1e3 == pytest.approx(flash_us)
    # Unfused (Megatron without --use_flash_attn): the 16 x 2048 x 2048 scores (134 MB in bf16) are
    # written by Q K^T, read and written by the fused softmax (268 MB: 154.9 us + 3 us), read and written
    # again by dropout with its byte mask (335.5 MB: 193.6 us + 3 us), and read by P V.
    kernels = {k.name: k for k in item_kernels(attention_item("unfused"), "bfloat16")}
    square = 16 * 2048 * 2048
    assert kernels["scaled masked softmax"].nbytes == square * 4
    assert kernels["attention dropout"].nbytes == square * 5
    softmax_us = 3 + square * 4 / HBM * 1e6
    dropout_us = 3 + square * 5 / HBM * 1e6
    assert (softmax_us, dropout_us) == pytest.approx((157.9, 196.6), abs=0.1)
    gemms = gemm_ns(GemmShape(2048, 2048, 128, 16), "A100") + gemm_ns(GemmShape(2048, 128, 2048, 16), "A100")
    unfused_us = estimator("A100")(attention_item("unfused")) / 1e3
    assert unfused_us == pytest.approx(softmax_us + dropout_us + gemms / 1e3)
    assert unfused_us > 3 * flash_us
    # without dropout the dropout kernel disappears; backward adds dropout's and softmax's backward
    assert estimator("A100")(attention_item("unfused", p=0.0)) / 1e3 == pytest.approx(unfused_us - dropout_us)
    backward = {k.name for k in item_kernels(attention_item("unfused", "backward"), "bfloat16")}
    assert {"attention dropout backward", "softmax backward", "bmm dO v^T", "bmm p^T dO"} <= backward


def test_adam_step_bytes():
    # 1e9 local parameters, distributed optimizer over dp 8: the rank owns 125e6.
    # bf16 (fp32 main gradients): zero the gradient buffer 4 * 1e9; gradient norm 4, Adam 28 (read
    # param, grad, m, v; write param, m, v), copy to the bf16 model 4 + 2 per owned parameter:
    # 4e9 + 125e6 * 38 = 8.75e9 bytes.
    bf16 = WorkItem(CommType.computation, stage="step.optimizer", shapes=((10**9,), (125 * 10**6,)),
                    meta={"op": "optimizer", "grad_bytes": 4})
    assert sum(k.nbytes for k in item_kernels(bf16, "bfloat16")) == 8.75e9
    # fp16 (fp16 gradients, loss scaling): zero 2 * 1e9; copy to fp32 main grads 2 + 4, unscale and check
    # 8, norm 4, Adam 28, copy back 4 + 2 = 52 per owned: 2e9 + 6.5e9 = 8.5e9 bytes.
    fp16 = WorkItem(CommType.computation, stage="step.optimizer", shapes=((10**9,), (125 * 10**6,)),
                    meta={"op": "optimizer", "grad_bytes": 2, "loss_scaling": True})
    assert sum(k.nbytes for k in item_kernels(fp16, "float16")) == 8.5e9
    # on an H100 (3.35 TB/s at 85%) the bf16 step takes 8.75e9 / 2.8475e12 = 3.073 ms plus 4 kernels of 3 us
    assert estimator("H100")(bf16) == pytest.approx(8.75e9 / (3.35e12 * 0.85) * 1e9 + 4 * 3000)


def test_optimizer_item_of_a_job():
    j = JobConfig(DENSE, ParallelConfig(world_size=4, tp=2, micro_batch=1, global_batch=4),
                  TrainingConfig(seq_length=32, computation_enable=True, use_distributed_optimizer=True))
    gen = MegatronWorkload(j)
    item = optimizer_item(j, gen.chunks)
    local = sum(q.numel for c in gen.chunks for q in c.parameters())
    assert item.shapes[0] == (local,)
    # dp = 4 / 2 = 2: each parameter's shard rounded up
    assert item.shapes[1][0] == sum(-(-q.numel // 2) for c in gen.chunks for q in c.parameters())
    steps = [i for i in gen().items if i.stage == "step.optimizer"]
    assert len(steps) == 1 and steps[0] is gen._optimizer  # the step runs it, once


def layer_time(j: JobConfig, phases: tuple[str, ...]) -> float:
    """Sum of the estimated times of layer 0's items whose stage starts with one of ``phases``."""
    est = estimator("H100", j.training.dtype)
    gen = MegatronWorkload(j)
    items = {id(i): i for i in gen() if i.is_computation and (i.meta or {}).get("layer") == 0
             and i.stage.startswith(phases)}
    return sum(est(i) for i in items.values())


def test_full_recompute_layer_reruns_the_forward():
    base = job()
    full = replace(base, training=replace(base.training, recompute="full"))
    selective = replace(base, training=replace(base.training, recompute="selective"))
    forward = layer_time(base, ("forward",))
    backward = layer_time(base, ("backward",))
    # full recomputation: one more forward of the whole layer before its backward
    assert layer_time(full, ("recompute",)) == pytest.approx(forward)
    assert layer_time(full, ("backward", "recompute")) == pytest.approx(backward + forward)
    # selective recomputation reruns the attention core only
    attention = estimator("H100")(next(i for i in MegatronWorkload(base)() if (i.meta or {}).get("op") == "attention"))
    assert layer_time(selective, ("recompute",)) == pytest.approx(attention)
    # and full recomputation replays the layer's TP collectives too
    gen = MegatronWorkload(full)
    recomputed = [i for i in gen() if i.stage.startswith("recompute") and not i.is_computation]
    assert recomputed and {i.comm_type for i in recomputed} == {CommType.all_reduce}


def test_fp8_layer_gemms_at_fp8_peak_communication_in_bf16():
    model = DENSE.with_changes(max_position_embeddings=2048)  # learned positions must cover the sequence
    bf16, fp8 = job(model, seq=2048), job(model, seq=2048, dtype="float8")
    a, b = MegatronWorkload(bf16)(), MegatronWorkload(fp8)()
    # every collective and p2p keeps its bf16 size (Transformer Engine casts only GEMM inputs)
    comm_a = [(i.comm_type, i.msg_size) for i in a if not i.is_computation]
    comm_b = [(i.comm_type, i.msg_size) for i in b if not i.is_computation]
    assert comm_a == comm_b and any(size > 0 for _, size in comm_a)
    assert fp8.training.dtype_bytes == 2 and fp8.training.grad_bytes == 4
    # GEMMs run on FP8 inputs (the FP8 peak) with a cast_transpose of their input; nothing else changes
    gemm = next(i for i in b if (i.meta or {}).get("op") == "gemm")
    kernels = item_kernels(gemm, "float8")
    assert kernels[0].gemm.kind == "fp8" and kernels[1].name == "fp8 cast_transpose"
    m, k = 2048, 64
    assert kernels[1].nbytes == m * k * (2 + 2)
    norm = next(i for i in b if (i.meta or {}).get("op") == "norm")
    assert estimator("H100", "float8")(norm) == estimator("H100", "bfloat16")(norm)
    big = GemmShape(8192, 8192, 8192, kind="fp8", out_bytes=2)
    assert gemm_ns(big, "H100") < 0.6 * gemm_ns(GemmShape(8192, 8192, 8192), "H100")
    assert precision("float8").a == 2 and precision("float8").kind == "fp8"


@pytest.mark.parametrize("model, layout", [(DENSE, {}), (DENSE, dict(sequence_parallel=True)),
                                           (MOE_MLA, dict(ep=2, sequence_parallel=True))])
def test_estimator_covers_every_computation_item(model, layout):
    gen = MegatronWorkload(job(model, **layout))
    items = [i for i in gen() if i.is_computation]
    report = fill_compute_times(items, "model", estimator=estimator("H100"))
    assert report.filled == len({id(i) for i in items})
    assert all(i.time_ns > 0 or (i.meta or {}).get("op") == "bda" for i in items)


# ---- compute files and wiring -----------------------------------------------------------------------

def test_estimate_file_round_trips_and_fills_like_a_measurement():
    j = job(MOE_MLA, ep=2, sequence_parallel=True)
    compute = estimated_compute_file(j, "H100")
    assert compute.labels["compute_source"] == "model H100" and "not a measurement" in compute.labels["device"]
    again = ComputeFile.loads(compute.dumps())
    assert again.dumps() == compute.dumps() and again.labels == compute.labels
    specs = op_specs(j)
    assert {s.section for s in specs} <= set(compute.sections)
    assert {s.backward for s in specs if s.backward} <= set(compute.sections)
    items = [i for i in MegatronWorkload(j)() if i.is_computation]
    report = fill_compute_times(items, "file", compute=again)
    assert not report.missing and all(i.time_ns is not None for i in items)
    known = {f for _, f, _ in FORWARD_SECTIONS} | {b for _, _, b in FORWARD_SECTIONS}
    assert set(compute.sections) <= known


def test_compute_model_does_not_import_torch():
    code = ("import sys; import mocked_model.compute, mocked_model.aiob.layout, mocked_model.aiob.estimate, "
            "workload_generator.compute_times; assert 'torch' not in sys.modules, 'torch imported'")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_simai_defaults_to_the_compute_model_for_a_known_gpu(tmp_path):
    out = tmp_path / "s.txt"
    args = ["-m", "workload_generator.SimAI_training_workload_generator", "--model_name", "gpt_tiny", "--world_size", "2",
            "--tensor_model_parallel_size", "2", "--seq_length", "128", "--output", str(out)]
    proc = run_cli(*args, "--gpu_type", "H100")
    assert proc.returncode == 0, proc.stderr
    assert "compute times: model" in proc.stdout
    records = SimAIWorkload.read(out).records
    assert any(r.fwd_compute_ns > 1000 for r in records if r.name == "mlp_layer")
    assert "placeholder" in run_cli(*args, "--gpu_type", "V42").stdout
    bad = run_cli(*args, "--gpu_type", "V42", "--compute_source", "roofline")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "V42" in bad.stderr


def test_default_source():
    j = job()
    assert default_source(j, None) == "placeholder"
    assert default_source(j, None, model_default=True) == "model"
    assert default_source(j, "roofline") == "model"
    assert default_source(j, "file", model_default=True) == "file"


def test_estimate_cli(tmp_path):
    out = tmp_path / "e.txt"
    proc = run_cli("-m", "mocked_model.aiob.estimate", "--gpu_type", "B200", "--model_name", "gpt_tiny", "--seq_length", "64",
                   "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert ComputeFile.read(out).labels["compute_source"] == "model B200"
    bad = run_cli("-m", "mocked_model.aiob.estimate", "--model_name", "gpt_tiny", "-o", str(tmp_path / "x.txt"))
    assert bad.returncode == 2 and "--gpu_type" in bad.stderr and not (tmp_path / "x.txt").exists()


def test_aicb_times_deepspeed_items_with_the_model_and_refuses_aiob_there(tmp_path):
    out = tmp_path / "ds.csv"
    args = [str(ROOT / "aicb.py"), "--frame", "DeepSpeed", "-m", "7", "--world_size", "8", "--global_batch", "8",
            "--seq_length", "512", "--workload_only"]
    proc = run_cli(*args, "--compute_source", "model", "--gpu_type", "H800", "--output", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    from utils.workload import Workload

    items = [i for i in Workload.load(out) if i.is_computation]
    assert items and all(i.time_ns and i.time_ns > 0 for i in items)
    bad = run_cli(*args, "--aiob_enable", "--output", str(tmp_path / "no.csv"), cwd=tmp_path)
    assert bad.returncode == 2 and "--frame DeepSpeed" in bad.stderr and not (tmp_path / "no.csv").exists()

"""The compute model (no torch): GEMM tile and wave law at the sustained clock, kernel lists of each operation and
software stack, the optimizer step, recomputation, FP8, the estimate compute file and its wiring into generation.

Expected values are derived by hand in the comments from the constants in mocked_model/compute:
A100: 312 TFLOP/s dense at 1410 MHz, sustained at 1233 MHz (He 2024: 258 TFLOP/s on randn inputs, 295 on zeros),
so a tensor peak of 312e12 x 1233 / 1410 = 272.834e12 FLOP/s under load; main-loop efficiency 0.9775 over 108 SMs:
2.469401e12 FLOP/s per SM; HBM 2.039 TB/s at the stream share 0.81 = 1.65159e12 B/s; GEMM fixed cost 5.5 us,
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

PER_SM = 312e12 * 1233 / 1410 * 0.9775 / 108
HBM = 2.039e12 * 0.81
H200_PER_SM = 989.4e12 * 1485 / 1830 * 0.9329 / 132  # 5.674250e12 FLOP/s per SM under a sustained load

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
    # 2 * 256 * 128 * (8192 + 64) / 2.469401e12 s = 219.11 us -> 4163.05 us; the exposed epilogue
    # writes 8192^2 * 2 B at 1.65159e12 B/s = 81.27 us; plus 5.5 us: 4249.82 us = 258.7 TFLOP/s,
    # He 2024's 258 with random inputs (the power-bound clock; 295 with zeros at 1410 MHz).  The operands
    # (3 x 8192^2 x 2 B at 2.039e12 x 0.91 B/s = 217 us) are 0.051 of that: the smooth maximum (c^4 + m^4)^(1/4)
    # adds c x 0.051^4 / 4 = 7 ns.
    main = 19 * 2 * 256 * 128 * (8192 + 64) / PER_SM
    epilogue = 8192**2 * 2 / HBM
    memory = 3 * 8192**2 * 2 / (2.039e12 * 0.91)
    compute = main + epilogue
    assert gemm_ns(GemmShape(8192, 8192, 8192), "A100") == pytest.approx(5500 + (compute**4 + memory**4) ** 0.25 * 1e9)
    assert gemm_ns(GemmShape(8192, 8192, 8192), "A100") == pytest.approx(4249.82e3, rel=1e-5)
    assert gemm_tflops(8192, 8192, 8192, "A100") == pytest.approx(258.7, abs=0.1)


def test_the_power_bound_clock():
    # Under a long GEMM load the H200 held 1485 MHz of its 1830 (profiling/measurements/h200/kernels.json): its
    # tensor cores run at 989.4 x 1485 / 1830 = 802.87 TFLOP/s, and the datasheet peak stays the MFU's denominator.
    h200 = GPUS["H200"]
    assert h200.tensor_flops("bf16") == pytest.approx(989.4e12 * 1485 / 1830)
    assert h200.tensor_flops("fp8") == pytest.approx(1978.9e12 * 1485 / 1830) and h200.peak_flops("bf16") == 989.4e12
    # the sustained 8192^3 measurement (718.0 TFLOP/s at 1485 MHz) is what the H200's efficiency was solved from:
    # 15.5 waves of 256x128 tiles (2048 tiles / 132 SMs -> 16), 16 * 2 * 256 * 128 * 8256 / 5.674250e12 = 1525.672 us;
    # the operands, 3 x 8192^2 x 2 B at 4.8e12 x 0.91 B/s = 92.18 us, are 0.0604 of it: the smooth maximum
    # (c^4 + m^4)^(1/4) adds c x 0.0604^4 / 4 = 5.1 ns; + 5.5 us = 1531.177 us -> 718.08 TFLOP/s
    compute = 16 * 2 * 256 * 128 * (8192 + 64) / H200_PER_SM
    memory = 3 * 8192**2 * 2 / (4.8e12 * 0.91)
    t = (compute**4 + memory**4) ** 0.25 + 5.5e-6
    assert (compute * 1e6, memory * 1e6, t * 1e6) == pytest.approx((1525.672, 92.183, 1531.177), abs=1e-3)
    assert gemm_ns(GemmShape(8192, 8192, 8192), "H200") == pytest.approx(t * 1e9)
    assert gemm_tflops(8192, 8192, 8192, "H200") == pytest.approx(718.0, abs=0.2)
    # the same die at the same 700 W: the H100 sustains the same clock; a GPU whose tensor rate is capped far below
    # its power limit (H20) runs at its datasheet clock
    assert GPUS["H100"].sustained_mhz == 1485 and GPUS["H20"].clock_ratio == 1.0
    # the clock does not touch memory-bound kernels (HBM has its own clock): a fused RoPE over 250e6 bf16 values on
    # A100 reads and writes 1 GB at its kind's share of HBM, 1e9 / (2.039e12 x 0.86) s + 3 us, whatever the SM clock
    rope = WorkItem(CommType.computation, stage="forward.x", shapes=((250_000_000,),), meta={"op": "rotary"})
    assert estimator("A100")(rope) == pytest.approx(3000 + 250e6 * 2 * 2 / (2.039e12 * 0.86) * 1e9)


def test_a_gemm_at_a_measured_shape():
    # H200, 2048 x 12288 x 4096 (a QKV GEMM of Llama 3 8B at micro-batch 2048 tokens): 256x128 tiles, 8 x 96 = 768
    # tiles, ceil(768 / 132) = 6 waves of 2 * 256 * 128 * (4096 + 64) / 5.674250e12 s = 48.05 us: 288.28 us.  The
    # operands, (2048 x 4096 + 4096 x 12288 + 2048 x 12288) x 2 = 167,772,160 B at 4.8e12 x 0.91 B/s = 38.41 us, are
    # 0.1332 of it: the smooth maximum adds 288.28 us x 0.1332^4 / 4 = 22.7 ns; + 5.5 us = 293.80 us -> 701.7
    # TFLOP/s.  The sweep measured 773.6 in a short burst (a higher clock than a training load sustains): the law, at
    # the sustained clock, is 9.3% slower, as a long load is (8192^3: 783 burst vs 718 held).
    compute = 6 * 2 * 256 * 128 * 4160 / H200_PER_SM
    memory = 167_772_160 / (4.8e12 * 0.91)
    t = (compute**4 + memory**4) ** 0.25 + 5.5e-6
    assert ((t - 5.5e-6 - compute) * 1e9, t * 1e6) == pytest.approx((22.7, 293.80), abs=0.01)
    assert gemm_ns(GemmShape(2048, 12288, 4096), "H200") == pytest.approx(t * 1e9)
    assert gemm_tflops(2048, 12288, 4096, "H200") == pytest.approx(701.7, abs=0.1)
    assert gemm_tflops(2048, 12288, 4096, "H200") / 773.6 - 1 == pytest.approx(-0.093, abs=0.001)


def test_small_gemm_by_hand_shows_the_efficiency_loss():
    # A100, 1024^3: the candidate tiles take (main loop only, us):
    #   256x128: 32 tiles < 108 SMs -> split k by min(108 // 32, 1024 // 256) = 3: one wave of
    #            2*256*128*(1024/3 + 64)/2.469401e12 = 10.75 us, plus fp32 partials 1024^2*4*3*2 B = 15.24 us
    #   128x128 (0.95 of the rate): 64 tiles, one wave of 2*128*128*1088 / (0.95 * 2.469401e12) = 15.20 us
    #   128x64 / 64x128 (0.85): 128 tiles, 2 waves = 16.99 us
    #   64x64 (0.75): 256 tiles, 3 waves of 2*64*64*1088 / (0.75 * 2.469401e12) = 14.44 us  <- fastest
    # plus the epilogue 1024^2 * 2 / 1.65159e12 = 1.27 us: 15.707 us.  The operands and result, 3 x 1024^2 x 2 B at
    # 2.039e12 x 0.91 B/s = 3.391 us, are 0.216 of it: the smooth maximum (c^4 + m^4)^(1/4) adds 15.707 us x
    # 0.216^4 / 4 = 8.5 ns; and 5.5 us: 21.216 us = 101 TFLOP/s, 32% of peak against 82.9% at 8192^3.
    compute = 3 * 2 * 64 * 64 * 1088 / (0.75 * PER_SM) + 1024**2 * 2 / HBM
    memory = 3 * 1024**2 * 2 / (2.039e12 * 0.91)
    expected_us = 5.5 + (compute**4 + memory**4) ** 0.25 * 1e6
    assert (compute * 1e6, memory * 1e6, expected_us) == pytest.approx((15.707, 3.391, 21.216), abs=1e-3)
    assert gemm_ns(GemmShape(1024, 1024, 1024), "A100") / 1e3 == pytest.approx(expected_us)
    small, large = gemm_tflops(1024, 1024, 1024, "A100"), gemm_tflops(8192, 8192, 8192, "A100")
    assert small / 312 == pytest.approx(0.3244, abs=1e-3) and large / 312 == pytest.approx(0.829, abs=1e-3)


def test_wave_quantisation_and_hopper_epilogue():
    # One extra tile row beyond a full wave costs a whole wave: on A100, m = 108 * 256 = 27648 rows
    # of 256 against n = 128 is exactly one wave; one more row needs a second wave of 256x128 tiles,
    # so the law picks smaller tiles, and the time jumps (not proportionally to the FLOPs).
    full = gemm_ns(GemmShape(27648, 128, 4096), "A100")
    over = gemm_ns(GemmShape(27648 + 1, 128, 4096), "A100")
    assert over > full * 1.05
    # Hopper hides the epilogue: a weight-gradient GEMM accumulating into fp32 costs more on A100 than its plain
    # version, by the exposed 8-byte read-modify-write, and on H100 only through the memory side of the smooth
    # maximum.  4096 x 4096 x 2048: 256x128 tiles, 16 x 32 = 512.  A100: 5 waves of 2 * 256 * 128 * 2112 /
    # 2.469401e12 s = 280.25 us, plus the epilogue 4096^2 x 2 (plain) or x 8 (fp32 read and write) B at 1.65159e12
    # B/s = 20.32 / 81.27 us; operands (2 x 4096 x 2048 x 2 B) and result at 2.039e12 x 0.91 B/s: 36.17 / 90.42 us;
    # (c^4 + m^4)^(1/4): 300.59 / 361.87 us, 61.29 us apart (the exposed epilogue alone: 60.95).
    plain, acc = GemmShape(4096, 4096, 2048), GemmShape(4096, 4096, 2048, out_bytes=4, accumulate=True)
    main = 5 * 2 * 256 * 128 * 2112 / PER_SM
    operands = 2 * 4096 * 2048 * 2
    a100 = [((main + 4096**2 * out / HBM) ** 4 + ((operands + 4096**2 * out) / (2.039e12 * 0.91)) ** 4) ** 0.25
            for out in (2, 8)]
    assert [t * 1e6 for t in a100] == pytest.approx([300.59, 361.87], abs=0.01)
    assert gemm_ns(acc, "A100") - gemm_ns(plain, "A100") == pytest.approx((a100[1] - a100[0]) * 1e9)
    # H100 (the H200's per-SM rate): 4 waves of 2 * 256 * 128 * 2112 / 5.674250e12 s = 97.57 us either way (no
    # exposed epilogue); the operands and result at 3.35e12 x 0.91 B/s: 22.01 / 55.03 us (0.226 / 0.564 of the
    # compute), so 97.64 / 99.95 us: the accumulation costs 2.3 us (2.4%), where the hard maximum had it free
    main = 4 * 2 * 256 * 128 * 2112 / H200_PER_SM
    h100 = [(main**4 + ((operands + 4096**2 * out) / (3.35e12 * 0.91)) ** 4) ** 0.25 for out in (2, 8)]
    assert [t * 1e6 for t in h100] == pytest.approx([97.64, 99.95], abs=0.01)
    assert gemm_ns(acc, "H100") - gemm_ns(plain, "H100") == pytest.approx((h100[1] - h100[0]) * 1e9)


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

def attention_item(impl: str, phase: str = "forward", p: float = 0.1, softmax: str | None = None) -> WorkItem:
    meta = {"op": "attention", "impl": impl, "p": p, "v_dim": 128, "causal": True, "name": "core_attention"}
    if softmax:
        meta["softmax"] = softmax
    return WorkItem(CommType.computation, stage=f"{phase}.core", shapes=((1, 16, 2048, 128), (1, 16, 2048, 128)),
                    flops=2.0 * 16 * 2048 * 2048 * 256, meta=meta)


def test_materialised_attention_against_flash_at_2048():
    # b = 1, 16 heads, s = 2048, d = 128, bf16, dropout 0.1, on A100.
    # Flash forward: the causal half of 2 * 16 * 2048^2 * (128 + 128) = 17.18 GFLOP, plus 1.86 key/value blocks of
    # overhead for each of its 16 * 2048 / 128 = 256 thread blocks (2 * 128 * 128 * 256 = 8.39 MFLOP a block:
    # 2.147 GFLOP in all, x 1.86), at 0.685 of the sustained tensor peak 272.834 TFLOP/s = 186.89 TFLOP/s:
    # 113.30 us, plus 5.5 us = 118.80 us (its Q, K, V, O traffic, 33.7 MB, takes 20 us: compute bound).
    flash_us = 5.5 + (0.5 * 2 * 16 * 2048**2 * 256 + 1.86 * 256 * 2 * 128 * 128 * 256) / (312e12 * 1233 / 1410 * 0.685) * 1e6
    assert flash_us == pytest.approx(118.80, abs=0.01)
    assert estimator("A100")(attention_item("flash")) / 1e3 == pytest.approx(flash_us)
    # Unfused (Megatron's DotProductAttention with its fused softmax, the local path with apex): the 16 x 2048 x 2048
    # scores (134 MB in bf16) are written by Q K^T, read and written by the fused softmax (268 MB at 0.86 of
    # 2.039 TB/s: 153.1 us + 3 us), read and written again by dropout with its byte mask (335.5 MB at the dropout's
    # 0.45: 365.7 us + 3 us), and read by P V.
    kernels = {k.name: k for k in item_kernels(attention_item("unfused"), "bfloat16")}
    square = 16 * 2048 * 2048
    assert kernels["scaled masked softmax"].nbytes == square * 4
    assert kernels["attention dropout"].nbytes == square * 5
    softmax_us = 3 + square * 4 / (2.039e12 * 0.86) * 1e6
    dropout_us = 3 + square * 5 / (2.039e12 * 0.45) * 1e6
    assert (softmax_us, dropout_us) == pytest.approx((156.1, 368.7), abs=0.1)
    gemms = gemm_ns(GemmShape(2048, 2048, 128, 16), "A100") + gemm_ns(GemmShape(2048, 128, 2048, 16), "A100")
    unfused_us = estimator("A100")(attention_item("unfused")) / 1e3
    assert unfused_us == pytest.approx(softmax_us + dropout_us + gemms / 1e3)
    assert unfused_us > 3 * flash_us
    # without dropout the dropout kernel disappears; backward adds dropout's and softmax's backward
    assert estimator("A100")(attention_item("unfused", p=0.0)) / 1e3 == pytest.approx(unfused_us - dropout_us)
    backward = {k.name for k in item_kernels(attention_item("unfused", "backward"), "bfloat16")}
    assert {"attention dropout backward", "softmax backward", "bmm dO v^T", "bmm p^T dO"} <= backward
    # Megatron's torch softmax (no apex: --no_apex): the scores cast to fp32 and soft-maxed (14 bytes each at the
    # measured 0.48: 959.0 us + 2 x 3 us), masked in place through the broadcast causal mask (8 bytes at 0.50:
    # 526.6 us + 3 us), cast back (6 bytes at 0.81: 243.8 us + 3 us): 1.74 ms where the fused kernel takes 156 us
    torch = {k.name: k for k in item_kernels(attention_item("unfused", softmax="torch"), "bfloat16")}
    assert "scaled masked softmax" not in torch
    spec = gpu_spec("A100")
    times = [torch[n].ns(spec) / 1e3 for n in ("cast to fp32, softmax", "masked_fill_ (causal mask)", "cast to bf16")]
    assert times == pytest.approx([966.0, 529.6, 246.8], abs=0.1)


def test_adam_step_bytes():
    # 1e9 local parameters, distributed optimizer over dp 8: the rank owns 125e6.
    # bf16 (fp32 main gradients): DDP's NaN check reads the gradient buffer 4 * 1e9; the gradient norm 4, Adam 28
    # (read param, grad, m, v; write param, m, v), the copy to the bf16 model 4 + 2 per owned parameter; the
    # gradient buffer zeroed for the next iteration 4 * 1e9: 8e9 + 125e6 * 38 = 12.75e9 bytes.
    bf16 = WorkItem(CommType.computation, stage="step.optimizer", shapes=((10**9,), (125 * 10**6,)),
                    meta={"op": "optimizer", "grad_bytes": 4})
    assert sum(k.nbytes for k in item_kernels(bf16, "bfloat16")) == 12.75e9
    # fp16 (fp16 gradients, loss scaling): NaN check and zeroing 2 * 1e9 each; copy to fp32 main grads 2 + 4, unscale
    # and check 8, norm 4, Adam 28, copy back 4 + 2 = 52 per owned: 4e9 + 6.5e9 = 10.5e9 bytes.
    fp16 = WorkItem(CommType.computation, stage="step.optimizer", shapes=((10**9,), (125 * 10**6,)),
                    meta={"op": "optimizer", "grad_bytes": 2, "loss_scaling": True})
    assert sum(k.nbytes for k in item_kernels(fp16, "float16")) == 10.5e9
    # on an H100 (3.35 TB/s): Adam at the fused Adam's measured 0.61, the rest at the streaming kinds' 0.81, 5 kernels
    # of 3 us and two host synchronisations (the NaN check's and the norm's) of 10 us: 5.157 ms
    h = 3.35e12
    expected = (8e9 + 125e6 * 10) / (h * 0.81) + 125e6 * 28 / (h * 0.61) + 5 * 3e-6 + 2 * 10e-6
    assert estimator("H100")(bf16) == pytest.approx(expected * 1e9) and expected == pytest.approx(5.157e-3, abs=1e-6)
    # torch's AdamW without apex (--no_apex): 84 bytes per parameter over 8 foreach kernels per 2.07e7 parameters,
    # a norm per tensor synchronised with the host, per-tensor copies of 14 bytes (dst.copy_(src * 1.0))
    torch = WorkItem(CommType.computation, stage="step.optimizer", shapes=((10**9,), (125 * 10**6,)),
                     meta={"op": "optimizer", "grad_bytes": 4, "impl": "torch", "tensors": 100})
    kernels = {k.name: k for k in item_kernels(torch, "bfloat16")}
    assert kernels["AdamW (foreach)"].nbytes == 125e6 * 84 and kernels["AdamW (foreach)"].count == 8 * 7
    assert kernels["gradient norm (per tensor, host-synchronised)"].host_us == 100 * 10.0
    assert kernels["copy main params (per tensor)"].nbytes == 125e6 * 14


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
    # GEMMs run on FP8 inputs (the FP8 peak); the QKV GEMM's input comes from its fused norm in FP8, so it only
    # needs the transposed copy backward reads (Hopper): read and write 1 byte each per input element
    qkv = next(i for i in b if (i.meta or {}).get("op") == "gemm" and "qkv" in i.meta["name"])
    kernels = item_kernels(qkv, "float8")
    assert kernels[0].gemm.kind == "fp8" and kernels[1].name == "fp8 transpose of the norm's output"
    m, k = 2048, 64
    assert kernels[1].nbytes == m * k * 2
    # the projection's input (the attention output) is cast with its transpose: read 2, write 1 + 1
    proj = next(i for i in b if (i.meta or {}).get("op") == "gemm" and "proj" in i.meta["name"])
    assert [(x.name, x.nbytes) for x in item_kernels(proj, "float8")[1:]] == [("fp8 cast of the input", 2048 * 32 * 4)]
    # the norm feeding QKV writes FP8 (1 byte) instead of bf16; the final norm (feeding the bf16 output layer) does not
    norms = [i for i in b if (i.meta or {}).get("op") == "norm" and i.stage.startswith("forward")]
    fused = next(i for i in norms if "input_layernorm" in i.meta["name"])
    assert item_kernels(fused, "float8")[0].nbytes == 2048 * 64 * (2 + 1)
    final = next(i for i in norms if i.meta["name"] == "final_layernorm")
    assert estimator("H100", "float8")(final) == estimator("H100", "bfloat16")(final)
    # Megatron's output layer stays in bf16
    output = next(i for i in b if (i.meta or {}).get("op") == "gemm" and i.meta["name"] == "output_layer")
    assert item_kernels(output, "float8")[0].gemm.kind == "bf16"
    big = GemmShape(8192, 8192, 8192, kind="fp8", out_bytes=2)
    assert gemm_ns(big, "H100") < 0.6 * gemm_ns(GemmShape(8192, 8192, 8192), "H100")
    assert precision("float8").a == 2 and precision("float8").kind == "fp8"


def test_an_fp8_gemm_with_its_casts():
    # H200, FP8 (delayed scaling), the fc2 forward of Llama 3 8B: 8192 tokens x 14336 -> 4096.  The GEMM: 256x128
    # tiles, 32 x 32 = 1024 tiles, ceil(1024 / 132) = 8 waves of 2 * 256 * 128 * (14336 + 64) / (1978.9e12 x 1485 /
    # 1830 x 0.8137 / 132 = 9.898961e12) s = 95.34 us: 762.68 us; its operands (8192 x 14336 + 14336 x 4096 in one
    # byte, the bf16 result 8192 x 4096 x 2: 243,269,632 B) at 4.8e12 x 0.91 B/s = 55.69 us are 0.073 of that: the
    # smooth maximum adds 762.68 us x 0.073^4 / 4 = 5.4 ns; + 5.5 us = 768.19 us.  Its input (the activation's
    # bf16 output, 8192 x 14336) is cast with its transpose: read 2 bytes, write 1 + 1: 470 MB at 0.86 of 4.8 TB/s =
    # 113.8 us + 3 us.  Current scaling ("tensorwise") reads the input once more for its amax (235 MB: 56.9 us) in 3
    # kernels (zero the amax, reduce it, compute the scale: + 3 x 3 us).
    fp8_per_sm = 1978.9e12 * 1485 / 1830 * 0.8137 / 132
    compute = 8 * 2 * 256 * 128 * (14336 + 64) / fp8_per_sm
    memory = 243_269_632 / (4.8e12 * 0.91)
    gemm_us = (compute**4 + memory**4) ** 0.25 * 1e6 + 5.5
    assert (gemm_us - 5.5 - compute * 1e6) * 1e3 == pytest.approx(5.4, abs=0.05)
    cast_us = 8192 * 14336 * 4 / (4.8e12 * 0.86) * 1e6 + 3
    assert (gemm_us, cast_us) == pytest.approx((768.2, 116.8), abs=0.1)
    item = WorkItem(CommType.computation, stage="forward.fc2", shapes=((8192, 1, 14336), (14336, 4096)),
                    meta={"op": "gemm", "name": "linear_fc2", "te": True, "fp8_recipe": "delayed"})
    assert estimator("H200", "float8")(item) / 1e3 == pytest.approx(gemm_us + cast_us)
    current = WorkItem(CommType.computation, stage="forward.fc2", shapes=((8192, 1, 14336), (14336, 4096)),
                       meta={"op": "gemm", "name": "linear_fc2", "te": True, "fp8_recipe": "tensorwise"})
    amax_us = 8192 * 14336 * 2 / (4.8e12 * 0.86) * 1e6 + 9
    assert estimator("H200", "float8")(current) / 1e3 == pytest.approx(gemm_us + cast_us + amax_us)
    # on Blackwell (no transposes for FP8) the cast writes one copy: read 2, write 1
    b200 = [k for k in item_kernels(item, "float8") if k.gemm is None]
    blackwell = [k for k in item_kernels(item, "float8", "B200") if k.gemm is None]
    assert b200[0].nbytes == 8192 * 14336 * 4 and blackwell[0].nbytes == 8192 * 14336 * 3
    # the bf16 GEMM of the same shape takes 1.744 / 2 x 2 = 1.74x as long in its main loop (the measured speedup)
    bf16_us = gemm_ns(GemmShape(8192, 4096, 14336), "H200") / 1e3
    assert (bf16_us - 5.5) / (gemm_us - 5.5) == pytest.approx(1.7444, rel=1e-3)


def test_a_norm_at_its_kernel_efficiency():
    # torch's RMSNorm (no apex) on 8192 x 4096 bf16 on H200: read and write 2 bytes per element, 134.2 MB, at the
    # share the sweep measured for torch's rms_norm (3032 GB/s of 4800: 0.63): 44.4 us + 3 us = 47.4 us (the sweep
    # timed 44.3 us per kernel back to back).  TE's (cuDNN's) RMSNorm streams at 0.78: 35.8 us + 3 us; torch's
    # LayerNorm at 0.48: 58.3 us + 3 us.
    def norm(kind: str, fused: bool, phase: str = "forward") -> WorkItem:
        return WorkItem(CommType.computation, stage=f"{phase}.norm", shapes=((8192, 1, 4096),),
                        meta={"op": "norm", "norm": kind, "fused": fused})
    n = 8192 * 4096 * 4
    assert estimator("H200")(norm("RMSNorm", False)) / 1e3 == pytest.approx(3 + n / (4.8e12 * 0.63) * 1e6)
    assert estimator("H200")(norm("RMSNorm", False)) / 1e3 == pytest.approx(47.4, abs=0.1)
    assert estimator("H200")(norm("RMSNorm", True)) / 1e3 == pytest.approx(3 + n / (4.8e12 * 0.78) * 1e6)
    assert estimator("H200")(norm("LayerNorm", False)) / 1e3 == pytest.approx(3 + n / (4.8e12 * 0.48) * 1e6)
    # backward: the fused kernel reads x and dy and writes dx (3 passes, 2 kernels with the weight-gradient reduce);
    # torch's weight-gradient kernel reads x and dy again (5 passes)
    assert estimator("H200")(norm("RMSNorm", True, "backward")) / 1e3 == pytest.approx(
        6 + n * 1.5 / (4.8e12 * 0.78) * 1e6)
    assert estimator("H200")(norm("RMSNorm", False, "backward")) / 1e3 == pytest.approx(
        6 + n * 2.5 / (4.8e12 * 0.63) * 1e6)


def stack_layer(impl: str, apex: bool = True, **training) -> tuple[dict[str, float], list[str]]:
    """Layer 0 of a Llama-like job on H100 per stack: its estimated forward and backward microseconds and the names of
    the kernels it launches."""
    model = ModelConfig(name="llama_tiny", hidden_size=1024, num_layers=2, num_attention_heads=8, num_query_groups=2,
                        ffn_hidden_size=2816, vocab_size=1024, swiglu=True, normalization="RMSNorm",
                        position_embedding_type="rope", attention_dropout=0.0, hidden_dropout=0.0)
    j = JobConfig(model, ParallelConfig(world_size=1, micro_batch=1, global_batch=1),
                  TrainingConfig(seq_length=2048, computation_enable=True, gpu_type="H100", transformer_impl=impl,
                                 apex=apex, **training))
    est = estimator("H100")
    items = {id(i): i for i in MegatronWorkload(j)() if i.is_computation and (i.meta or {}).get("layer") == 0}
    times = {"forward": 0.0, "backward": 0.0}
    names: list[str] = []
    for i in items.values():
        times[i.stage.split(".")[0]] += est(i) / 1e3
        names += [k.name for k in item_kernels(i, "bfloat16")]
    return times, names


def test_a_transformer_engine_layer_against_local_layers():
    te, te_kernels = stack_layer("transformer_engine")
    local, local_kernels = stack_layer("local")
    torch, torch_kernels = stack_layer("local", apex=False)
    # Transformer Engine: flash attention, fused RoPE, norms fused (cuDNN's), weight gradients into fp32 main grads
    assert "flash attention forward" in te_kernels and "rotary" in te_kernels and "main-grad accumulate" not in te_kernels
    # Megatron's local path with apex: materialised attention through the fused softmax, eager rotary (RoPE fusion
    # needs Transformer Engine), still fused norms and the gradient-accumulation fusion
    assert "scaled masked softmax" in local_kernels and "rotary (eager)" in local_kernels
    assert "main-grad accumulate" not in local_kernels
    # without apex: the fp32 softmax with its mask and casts, and DDP's fp32 += bf16 add after each wgrad GEMM
    assert {"cast to fp32, softmax", "masked_fill_ (causal mask)", "cast to bf16"} <= set(torch_kernels)
    assert torch_kernels.count("main-grad accumulate") == 4  # QKV, proj, fc1, fc2 (norm weights: no GEMM)
    # each step away from the fused kernels costs time, forward and backward
    for phase in ("forward", "backward"):
        assert te[phase] < local[phase] < torch[phase]
    # CUDA graphs do not change a layer this large (its kernels outlast their launches)
    graphed, _ = stack_layer("transformer_engine", cuda_graph_impl="transformer_engine")
    assert graphed == pytest.approx(te)


def test_host_launches_bound_small_kernels():
    # 10 kernels of a few microseconds each cost their host launches (5 us each in eager PyTorch) unless graphed
    item = WorkItem(CommType.computation, stage="forward.rotary", shapes=((1024,),), meta={"op": "rotary", "fused": False})
    gpu_us = estimator("H100")(item) / 1e3
    assert gpu_us == pytest.approx(10 * 3 + 1024 * 10 * 2 / (3.35e12 * 0.32) * 1e6)
    assert estimator("H100", host=5.0)(item) / 1e3 == pytest.approx(max(gpu_us, 10 * 5.0))


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


def test_tp_comm_overlap_splits_the_layer_gemms():
    # Transformer Engine's userbuffers (--tp_comm_overlap, with SP): GPT-3 175B's QKV forward at TP 4 on H200,
    # 2048 tokens x 12288 -> 9216, runs as 4 GEMMs of 512 rows as each rank's share of the input arrives.  Whole:
    # 128x128 tiles (0.95 of the rate), 16 x 72 = 1152, 9 waves of 2 * 128 * 128 * (12288 + 64) / (0.95 x
    # 5.674250e12) s = 75.085 us: 675.77 us; operands and result (2048 x 12288 + 12288 x 9216 + 2048 x 9216) x 2 B =
    # 314.6 MB at 4.8e12 x 0.91 B/s = 72.02 us, 0.107 of it: the smooth maximum adds 21.8 ns; + 5.5 us = 681.29 us.
    # A chunk of 512 rows: 128x64 tiles (0.85) fill 5 waves of 576: 5 * 2 * 128 * 64 * 12352 / (0.85 * 5.674250e12)
    # = 209.80 us; its operands, (512 x 12288 + 12288 x 9216 + 512 x 9216) x 2 B = 248.5 MB: 56.89 us, 0.271 of it
    # (each chunk reads all the weights): + 283 ns; + 5.5 us = 215.58 us, x 4 = 862.32 us: 26.6% more for the
    # overlap's chunking.
    def roofline_us(compute: float, nbytes: float) -> float:
        return (compute**4 + (nbytes / (4.8e12 * 0.91)) ** 4) ** 0.25 * 1e6 + 5.5
    whole = roofline_us(9 * 2 * 128 * 128 * 12352 / (0.95 * H200_PER_SM), (2048 * 12288 + 12288 * 9216 + 2048 * 9216) * 2)
    chunk = roofline_us(5 * 2 * 128 * 64 * 12352 / (0.85 * H200_PER_SM), (512 * 12288 + 12288 * 9216 + 512 * 9216) * 2)
    assert (whole, chunk) == pytest.approx((681.29, 215.58), abs=0.01)
    model = ModelConfig(name="gpt3_175B_slice", hidden_size=12288, num_layers=1, num_attention_heads=96,
                        vocab_size=1024, max_position_embeddings=2048)

    def qkv(overlap: bool, impl: str = "transformer_engine") -> WorkItem:
        j = JobConfig(model, ParallelConfig(world_size=4, tp=4, micro_batch=1, global_batch=1, sequence_parallel=True),
                      TrainingConfig(seq_length=2048, computation_enable=True, tp_comm_overlap=overlap,
                                     transformer_impl=impl))
        return next(i for i in MegatronWorkload(j)() if (i.meta or {}).get("op") == "gemm"
                    and "linear_qkv" in i.meta["name"] and i.stage.startswith("forward"))
    # the QKV GEMM of GPT-3 has a bias, added in the GEMM's epilogue under Transformer Engine
    assert estimator("H200")(qkv(False)) / 1e3 == pytest.approx(whole)
    assert estimator("H200")(qkv(True)) / 1e3 == pytest.approx(4 * chunk)
    # the row-parallel projection's reduce-scatter is pipelined in 4 chunks; its dgrad (the output gradient's
    # all-gather by a ring exchange) in TP chunks; wgrad is not split; Megatron's local layers have no userbuffers
    assert qkv(True).meta["chunks"] == 4 and "chunks" not in qkv(True, "local").meta


def test_block_scaled_fp8_gemm_main_loop_on_hopper_only() -> None:
    """``--fp8_recipe blockwise`` GEMMs run their main loop at 0.85 of plain FP8's on Hopper (Transformer Engine's
    published H200 GEMM benchmark: block scaling 22.882 ms against current scaling's 20.285 per layer,
    bench/check_fp8_recipes.py); on Blackwell the recipe runs as MXFP8 at the plain FP8 rate."""
    from mocked_model.compute.gpus import gpu_spec
    from mocked_model.compute.kernel_list import block_scaled
    from mocked_model.compute.kernels import GEMM_T0_NS, GemmShape, gemm_ns, main_loop_flops_per_sm

    plain, block = GemmShape(8192, 8192, 8192, 1, "fp8"), GemmShape(8192, 8192, 8192, 1, "fp8", block_scaled=True)
    h100, b200 = gpu_spec("H100"), gpu_spec("B200")
    # H100: 989.4 x 2 TFLOP/s FP8 at 1830 MHz, held at the sustained clock, times the FP8 GEMM efficiency, per SM
    per_sm = 1978.9e12 * h100.clock_ratio * h100.fp8_gemm_eff / h100.sms
    assert main_loop_flops_per_sm(plain, h100) == pytest.approx(per_sm, rel=1e-3)
    assert main_loop_flops_per_sm(block, h100) == pytest.approx(0.85 * per_sm, rel=1e-3)
    assert main_loop_flops_per_sm(block, b200) == main_loop_flops_per_sm(plain, b200)
    # a compute-bound square GEMM: its time past the fixed cost grows by 1 / 0.85
    grow = (gemm_ns(block, h100) - GEMM_T0_NS) / (gemm_ns(plain, h100) - GEMM_T0_NS)
    assert grow == pytest.approx(1 / 0.85, rel=0.01)
    assert block_scaled("fp8", {"fp8_recipe": "blockwise"}) and not block_scaled("fp8", {"fp8_recipe": "tensorwise"})
    assert not block_scaled("bf16", {"fp8_recipe": "blockwise"})


def test_blackwell_ultra_entries_derive_as_their_docstrings_say():
    """B300 and GB300 (derived, nothing measured): the datasheet clock is the dense BF16 peak over 160 SMs at 8192 FLOP
    per clock; the sustained clock is the B200's 1580 MHz at 1000 W over 148 SMs scaled by the cube root of the power
    per SM; FP4 is 13.5 / 15 PFLOPS dense; the main-loop efficiencies are the GB200's for the GB300 and, for the B300,
    the B200's times 0.883 (NVIDIA's B300 GEMM benchmark, bench/check_fp8_recipes.py)."""
    from mocked_model.compute.gpus import gpu_spec

    b300, gb300, b200, gb200 = (gpu_spec(g) for g in ("B300", "GB300", "B200", "GB200"))
    assert b300.spec_mhz == pytest.approx(2250e12 / (160 * 8192) / 1e6, abs=0.5)
    assert gb300.spec_mhz == pytest.approx(2500e12 / (160 * 8192) / 1e6, abs=0.5)
    assert b300.sustained_mhz == pytest.approx(1580 * (1100 / 1000 * 148 / 160) ** (1 / 3), abs=0.5)
    assert gb300.sustained_mhz == pytest.approx(1580 * (1400 / 1000 * 148 / 160) ** (1 / 3), abs=0.5)
    assert (b300.fp4_tflops, gb300.fp4_tflops) == (13500, 15000)
    assert (b300.gemm_eff, b300.fp8_gemm_eff) == (round(b200.gemm_eff * 0.883, 4), round(b200.fp8_gemm_eff * 0.883, 4))
    assert (gb300.gemm_eff, gb300.fp8_gemm_eff) == (gb200.gemm_eff, gb200.fp8_gemm_eff)
    assert gpu_spec("dgx-b300").name == "B300" and gpu_spec("GB300 NVL72").name == "GB300"

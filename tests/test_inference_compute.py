"""The compute model's inference operations and the memory per GPU, against arithmetic done by hand
(H200: 989.4 TFLOP/s bf16 dense at 1830 MHz, 802.87 under a sustained load at 1485 MHz; 4.8 TB/s HBM at a streaming
kernel's measured 81%; flash efficiency 0.7165 of the sustained peak; GEMM fixed cost 5.5 us, memory-bound kernel
3 us + bytes / HBM)."""

from __future__ import annotations

import pytest

from mocked_model.compute import gpu_spec, item_kernels
from mocked_model.inference import moe_routing, stage_items
from mocked_model.inference_memory import check_fits, memory_per_gpu, model_params
from utils.errors import ConfigError
from utils.inference_config import resolve_model
from utils.inference_job import InferenceJob

H200 = gpu_spec("H200")
HBM = 4.8e12 * 0.81          # bytes/s a streaming kernel reaches
TENSOR = 989.4e12 * 1485 / 1830  # the bf16 tensor peak at the sustained clock


def deepseek(**kw) -> InferenceJob:
    args = dict(phase="decode", seq_length=1024, micro_batch=32, world_size=8, ep=8)
    args.update(kw)
    return InferenceJob(resolve_model("DeepSeek-671B"), **args)


def item(items, name):
    return next(i for i in items if i.meta and i.meta.get("name") == name)


def test_mla_absorbed_decode_attention_reads_the_latent_cache():
    kernels = item_kernels(item(stage_items(deepseek()), "layers.3.self_attn.flash_mla"), "float8")
    (k,) = kernels
    # FLOPs: 2 x 32 sequences x 128 heads x 1 query x 1024 positions x (576 + 512) = 9,126,805,504
    assert k.flops == 2 * 32 * 128 * 1024 * (576 + 512) == 9_126_805_504
    # bytes: the latent cache 32 x 1024 x 576 x 2 = 37,748,736 + queries/outputs 32 x 128 x 1088 x 2 = 8,912,896
    assert k.nbytes == 46_661_632
    # compute-bound: 9.1268e9 / (802.87e12 x 0.7165) = 15,865.6 ns > 46,661,632 / 3.888e12 = 12,001.4 ns; + 5.5 us
    assert k.ns(H200) == pytest.approx(5500 + 9_126_805_504 / (TENSOR * 0.7165) * 1e9, rel=1e-9)
    assert k.ns(H200) == pytest.approx(21_365.6, abs=0.1)


def test_decode_gemm_reads_its_fp8_weights_once():
    gemm, quant = item_kernels(item(stage_items(deepseek()), "layers.3.self_attn.o_proj"), "float8")
    # o_proj: (32 tokens, 128 x 128) x (16384, 7168) in FP8: weights 117,440,512 B + input 524,288 B + bf16 output
    # 458,752 B = 118,423,552 B at the rate a GEMM streams its operands, 4.8e12 x 0.91 = 4.368 TB/s: 27,111.6 ns.
    # The fastest tiling's compute (FP8 per SM 1978.9e12 x 1485 / 1830 x 0.8137 / 132 = 9.898961e12 FLOP/s): 64x128
    # tiles (0.85), 56, split k in 2 (132 // 56) to one wave of 2 x 64 x 128 x (8192 + 64) / (0.85 x 9.898961e12) s
    # = 16,076.1 ns, plus the fp32 partial sums 32 x 7168 x 4 x 2 x 2 B at 3.888 TB/s = 943.9 ns: 17,020.0 ns (64x64:
    # 112 tiles, 18,149 ns; 128x256 split in 4: 29,429 ns).  The weights still bound it, but at 0.628 of them the
    # compute shows through the smooth maximum: (27,111.6^4 + 17,020.0^4)^(1/4) = 28,108.1 ns (3.7% over the
    # weights alone); + 5.5 us
    compute = 2 * 64 * 128 * (8192 + 64) / (0.85 * 1978.9e12 * 1485 / 1830 * 0.8137 / 132) + 32 * 7168 * 4 * 2 * 2 / HBM
    weights = 118_423_552 / (4.8e12 * 0.91)
    assert (compute * 1e9, weights * 1e9) == pytest.approx((17_020.0, 27_111.6), abs=0.1)
    assert gemm.ns(H200) == pytest.approx(5500 + (compute**4 + weights**4) ** 0.25 * 1e9, rel=1e-9)
    assert gemm.ns(H200) == pytest.approx(33_608.1, abs=0.1)
    # activation quantization: read 32 x 16384 x 2, write x 1, fp32 scales 32 x 128 x 4 = 1,589,248 B; + 3 us
    assert quant.nbytes == 1_589_248 and quant.ns(H200) == pytest.approx(3000 + 1_589_248 / HBM * 1e9)


def test_gated_deltanet_decode_is_bound_by_its_state():
    model = resolve_model("Qwen3-Next-80B")
    items = stage_items(InferenceJob(model, "decode", 1024, 8, world_size=8, ep=8))
    (k,) = item_kernels(next(i for i in items if i.meta and i.meta.get("op") == "gdn"), "bfloat16")
    # state: 8 sequences x 32 value heads x 128 x 128 = 4,194,304 values in bf16, read and written: 16,777,216 B;
    # q, k, v in and the output: 8 x (2 x 16 x 128 + 2 x 32 x 128) x 2 = 196,608 B
    assert k.nbytes == 16_973_824 and k.flops == 8 * 4_194_304
    assert k.ns(H200) == pytest.approx(5500 + 16_973_824 / HBM * 1e9, rel=1e-9)


def test_expert_gemms_cover_the_active_experts():
    job = deepseek()
    r = moe_routing(job)
    # RoundRobin: each rank receives what it sends, 32 tokens x 8 = 256 copies over its 288 / 8 = 36 experts
    assert r.ratio == 1 and sum(r.expert_tokens) == 256 and len(r.expert_tokens) == 36
    assert r.expert_tokens[:4] == (8, 8, 8, 8) and r.expert_tokens[-1] == 7     # 256 = 4 x 8 + 32 x 7
    w13 = item(stage_items(job), "layers.3.mlp.experts.w13")
    gemm, _quant = item_kernels(w13, "float8")
    # 36 experts of (8 rows) x (7168, 4096) in FP8: the weights (36 x 29,360,128 B) dominate
    assert gemm.gemm.batch == 36 and gemm.gemm.m == 8 and (gemm.gemm.k, gemm.gemm.n) == (7168, 4096)
    small = deepseek(micro_batch=1)
    # one token per replica: 8 copies, 8 of the 36 experts are read
    assert moe_routing(small).active_experts == 8


def test_published_parameter_totals():
    # DeepSeek-V3 671B, Qwen3-235B-A22B 235B, Qwen3-Next-80B-A3B 80B (their model cards)
    for name, published in (("DeepSeek-671B", 671e9), ("Qwen3-Moe-235B", 235e9), ("Qwen3-Next-80B", 80e9)):
        assert model_params(resolve_model(name)) == pytest.approx(published, rel=0.01)


def test_kv_cache_and_weights_per_gpu():
    use = memory_per_gpu(deepseek())
    # MLA latent: 61 layers x (512 + 64) values x 2 bytes x 32 sequences x (1024 + 1) positions = 2,304,921,600 B
    assert use.kv_bytes == 2_304_921_600
    # experts alone: 58 MoE layers x 36 experts x 3 x 7168 x 2048 FP8 bytes = 92,064,940,032 B
    assert use.weights_bytes > 92_064_940_032
    qwen = InferenceJob(resolve_model("Qwen3-Moe-235B"), "decode", 2048, 16, world_size=8, tp=8, ep=8)
    # GQA: 4 KV heads over tp 8: one (replicated) head per rank, K and V of 128 in bf16: 512 B per layer and
    # position; 94 layers x 16 sequences x 2049 positions x 512 = 1,577,828,352 B
    assert memory_per_gpu(qwen).kv_bytes == 1_577_828_352


def test_deepseek_fits_h200_not_h100():
    assert check_fits(deepseek(gpu_type="H200")).fits
    with pytest.raises(ConfigError, match="needs 105.6 GiB per GPU .* H100 has 72.0 GiB usable"):
        check_fits(deepseek(gpu_type="H100"))

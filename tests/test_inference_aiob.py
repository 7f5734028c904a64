"""AIOB for inference on this CPU (plain torch), and compute files read as AICB 2.1 reads them."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli
from utils.inference_config import load_config
from utils.inference_job import InferenceJob

torch = pytest.importorskip("torch")

TINY_DEEPSEEK = {"num_layers": 4, "dense_layer": 1, "hidden_size": 256, "num_attention_heads": 8, "vocab_size": 1024,
                 "d_kv_c": 64, "d_q_c": 96, "d_r": 16, "head_num": 8, "d_q": 32, "d_kv": 32, "router_expert": 16,
                 "duped_expert": 0, "shared_experts": 1, "moe_router_topk": 2, "expert_dim": 64}
TINY_NEXT = {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
             "head_dim": 64, "vocab_size": 1024, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
             "full_attention_interval": 4, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
             "linear_key_head_dim": 32, "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4,
             "shared_expert_intermediate_size": 64}


def _model(tmp_path, data, kind):
    path = tmp_path / f"{kind}.json"
    path.write_text(json.dumps(data))
    return load_config(path, kind, f"{kind}-tiny"), path


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_measures_every_record_kind(tmp_path, phase):
    from mocked_model.aiob.inference import measure_inference_job

    ds, _ = _model(tmp_path, TINY_DEEPSEEK, "deepseek")
    nxt, _ = _model(tmp_path, TINY_NEXT, "qwen3_next")
    jobs = [InferenceJob(ds, phase, 32, 2, world_size=2, ep=2), InferenceJob(nxt, phase, 16, 2, world_size=2, tp=2, ep=2)]
    expected = [{"atten_layer", "mlp_dense", "mlp_shared", "moe_route", "moe_expert", "embed_tokens", "lm_head"},
                {"atten_norm", "atten_layer", "gdn_layer", "moe_norm", "moe_route", "moe_expert", "embed_tokens", "lm_head"}]
    for job, sections in zip(jobs, expected):
        compute = measure_inference_job(job, loops=1, device="cpu")
        assert set(compute.sections) == sections
        assert all(s.avg_us > 0 and s.implementation for s in compute.sections.values())
        assert compute.labels["inference_term"] == phase


def test_aicb_compute_file_times_the_records(tmp_path):
    _, config = _model(tmp_path, TINY_DEEPSEEK, "deepseek")
    # AICB's own section names; its reader sums them by kind (us -> ns): attention 10 + 2, mlp 5 + 3 (dense MLP
    # and shared experts alike), moe_route 2, moe (experts) 7
    aiob = tmp_path / "aiob.txt"
    aiob.write_text("inference_term:decode\n" + "".join(
        f"{name}:\n    time_gpu_max: {t}\n    time_gpu_min: {t}\n    time_gpu_avg: {t}\n"
        for name, t in (("atten_mla", 10), ("atten_qkv_quant", 2), ("mlp_1", 5), ("mlp_2", 3), ("moe_route", 2),
                        ("moe_gemm", 7))))
    out = tmp_path / "w.txt"
    proc = run_cli("-m", "workload_generator.SimAI_inference_workload_generator", "DeepSeek-tiny", str(config),
                   "--world_size", "2", "--expert_model_parallel_size", "2", "--micro_batch", "2",
                   "--comp_filepath", str(aiob), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "warning: no time for embed_tokens, lm_head" in proc.stderr
    records = [line.split("\t") for line in out.read_text().splitlines()[2:]]
    assert [(r[0], int(r[2])) for r in records[:6]] == [
        ("attention_layer", 12_000), ("dense_mlp", 8_000), ("attention_layer", 12_000), ("shared_experts", 8_000),
        ("moe_route", 2_000), ("moe_expert", 7_000)]


def test_cpu_slices_big_weights_and_keeps_shapes(tmp_path, monkeypatch):
    import mocked_model.aiob.inference as aiob

    # every weight above 4,096 elements is multiplied by a column slice on the CPU; the records still run
    # with their real shapes and say what was done
    monkeypatch.setattr(aiob, "CPU_WEIGHT_CAP", 4096)
    ds, _ = _model(tmp_path, TINY_DEEPSEEK, "deepseek")
    compute = aiob.measure_inference_job(InferenceJob(ds, "decode", 32, 2, world_size=2, ep=2), device="cpu")
    assert "column slice" in compute.sections["atten_layer"].implementation
    assert all(s.avg_us > 0 for s in compute.sections.values())

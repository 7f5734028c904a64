"""Every preset as an inference model (issue 27, item 4): the right attention, MLP and norms per architecture, the
precisions, experts over TP, speculative decode steps, and ``-w`` taking the model a file was made from."""

from __future__ import annotations

import json

import pytest

from mocked_model.inference import draft_items, stage_items
from mocked_model.inference_memory import memory_per_gpu, model_params
from tests.conftest import ROOT, run_cli
from utils.errors import ConfigError
from utils.inference_config import HF_MODELS, resolve_model
from utils.inference_job import InferenceJob
from utils.presets import get_preset, known_names
from utils.workload import CommType


def names(items, op=None):
    return [str((i.meta or {}).get("name")) for i in items if op is None or (i.meta or {}).get("op") == op]


@pytest.mark.parametrize("name", known_names() + list(HF_MODELS))
def test_every_preset_is_an_inference_model(name):
    m = resolve_model(name)
    tp = 8 if m.num_heads % 8 == 0 else 1
    ep = 8 if m.is_moe and m.num_experts % 8 == 0 and tp == 8 else 1
    job = InferenceJob(m, "decode", 128, 4, world_size=tp, tp=tp, ep=ep)
    items = stage_items(job)
    assert items and all(i.is_computation or i.comm_type is not None for i in items)
    if name in known_names() and get_preset(name).published_params:
        # the model's parameters are the preset's published total (within 1%: tied/untied heads and rounding)
        assert model_params(m) == pytest.approx(get_preset(name).published_params, rel=0.01)


def test_llama3_70b_is_dense_gqa_without_qk_norm():
    m = resolve_model("llama3_70B")
    assert (m.kind, m.attention, m.num_kv_heads, m.head_dim, m.qk_norm, m.is_moe) == ("dense", "gqa", 8, 128, False, False)
    job = InferenceJob(m, "decode", 1024, 8, world_size=4, tp=4, ep=8)   # EP means nothing to a dense model
    assert job.ep == 1
    items = stage_items(job)
    assert not names(items, "moe_router") and "layers.0.self_attn.qk_norm" not in names(items)
    # qkv projection per TP rank: 64 / 4 query heads + 2 x 8 / 4 key/value heads of 128 -> 8192 x 2560
    qkv = next(i for i in items if (i.meta or {}).get("name") == "layers.0.self_attn.qkv_proj")
    assert qkv.shapes == ((8, 8192), (8192, 16 * 128 + 2 * 2 * 128))
    # two TP all-reduces per layer (attention, MLP) of 2 x 8 tokens x 8192 bytes, and the embedding's
    ar = [i for i in items if i.comm_type is CommType.all_reduce]
    assert len(ar) == 2 * 80 + 1 and {i.msg_size for i in ar} == {131_072}


def test_qwen3_dense_keeps_its_qk_norm_and_gpt_its_gelu():
    q = stage_items(InferenceJob(resolve_model("qwen3_8B"), "decode", 64, 2, world_size=1, tp=1, ep=1))
    assert "layers.0.self_attn.qk_norm" in names(q)
    g = stage_items(InferenceJob(resolve_model("gpt3_175B"), "decode", 64, 2, world_size=8, tp=8, ep=1))
    assert "layers.0.mlp.fc1" in names(g) and "layers.0.mlp.gate_up_proj" not in names(g)
    assert not names(g, "rotary")   # learned positions, added at the embedding
    assert next(i for i in g if (i.meta or {}).get("name") == "embed_tokens").meta["positions"]


def test_mixtral_routes_top2_of_8_over_ep():
    m = resolve_model("mixtral_8x7B")
    assert (m.kind, m.routed_experts, m.topk, m.shared_experts, m.qk_norm) == ("moe", 8, 2, 0, False)
    items = stage_items(InferenceJob(m, "decode", 1024, 16, world_size=8, tp=1, ep=8))
    a2a = [i for i in items if i.comm_type is CommType.all_to_all]
    # dispatch in FP8: 16 tokens x 2 copies x 4096 x (1 + 4/128) B; combine in bf16: 16 x 2 x 4096 x 2 B
    assert len(a2a) == 2 * 32 and [i.msg_size for i in a2a[:2]] == [int(262_144 * (1 + 4 / 128) / 2), 262_144]


def test_deepseek_v3_preset_has_mla_fp8_and_mtp():
    m = resolve_model("deepseek_v3")
    assert (m.attention, m.kv_width, m.weight_dtype, m.mtp_layers) == ("mla", 576, "float8", 1)
    assert resolve_model("DeepSeek-671B").mtp_layers == 1   # AICB's config is V3's
    assert resolve_model("deepseek_v2").weight_dtype == "bfloat16"


def test_speculative_decode_step_and_draft():
    job = InferenceJob(resolve_model("deepseek_v3"), "decode", 2048, 8, world_size=8, tp=1, ep=8, speculative_tokens=2)
    # 8 sequences x (1 + 2) verified positions; attention of 3 queries per sequence; logits for all 24
    assert job.tokens == 24 and job.lm_tokens() == 24
    attn = next(i for i in stage_items(job) if (i.meta or {}).get("op") == "decode_attention")
    assert attn.meta["q_len"] == 3 and attn.meta["batch"] == 8
    draft = draft_items(job)
    # one MTP pass over the 8 sequences: the 2h -> h projection, one MoE layer, the shared head
    proj = next(i for i in draft if (i.meta or {}).get("name") == "mtp.eh_proj")
    assert proj.shapes == ((8, 2 * 7168), (2 * 7168, 7168))
    assert next(i for i in draft if (i.meta or {}).get("name") == "lm_head").shapes[0] == (8, 7168)


def test_fp4_and_fp8_weights_and_kv():
    m = resolve_model("llama3_70B")
    bf16 = memory_per_gpu(InferenceJob(m, "decode", 1024, 1, world_size=4, tp=4))
    fp4 = memory_per_gpu(InferenceJob(m, "decode", 1024, 1, world_size=4, tp=4, weight_dtype="float4"))
    # linear weights 17,112,760,320 per GPU: bf16 2 B each, NVFP4 0.5 B plus an e4m3 scale per 16 (1,069,547,520 B);
    # the other 526,655,488 stay bf16
    assert bf16.weights_bytes == 2 * 17_112_760_320 + 2 * 526_655_488
    assert fp4.weights_bytes == 17_112_760_320 // 2 + 1_069_547_520 + 2 * 526_655_488
    kv8 = memory_per_gpu(InferenceJob(m, "decode", 1024, 1, world_size=4, tp=4, kv_dtype="float8"))
    assert kv8.kv_bytes * 2 == bf16.kv_bytes
    with pytest.raises(ConfigError, match="--dtype 'int4' is not one of float4"):
        InferenceJob(m, weight_dtype="int4", world_size=4, tp=4)


def test_moe_tp_refusals():
    m = resolve_model("deepseek_v3")
    with pytest.raises(ConfigError, match="--moe_tp with attention data parallelism"):
        InferenceJob(m, world_size=16, tp=8, ep=1, moe_tp=True)
    with pytest.raises(ConfigError, match="has no experts"):
        InferenceJob(resolve_model("llama3_8B"), world_size=1, tp=1, ep=1, moe_tp=True)


def test_unknown_model_is_one_line():
    with pytest.raises(ConfigError, match="unknown model 'Llama-70B'"):
        resolve_model("Llama-70B")
    with pytest.raises(ConfigError, match="AICB's JSON configs describe"):
        resolve_model("llama3_70B", ROOT / "scripts/inference_configs/deepseek_default.json")


def test_w_takes_the_model_the_file_was_made_from(tmp_path):
    data = json.loads((ROOT / "scripts/inference_configs/deepseek_default.json").read_text())
    data["num_layers"] = 31
    config = tmp_path / "ds31.json"
    config.write_text(json.dumps(data))
    out = tmp_path / "out"
    gen = run_cli("-m", "workload_generator.SimAI_inference_workload_generator", "DeepSeek-671B", str(config),
                  "--world_size", "8", "--expert_model_parallel_size", "8", "--micro_batch", "16", "--seq_length", "1024",
                  "--result_dir", str(out))
    assert gen.returncode == 0, gen.stderr
    path = out / "DeepSeek-671B-world_size8-tp1-pp1-ep8-bs16-seq1024-decode.txt"
    assert path.read_text().splitlines()[0].endswith(f"model_config: {config}")
    from simulator.options import TopoOptions
    from simulator.topo.inference import simulate_file

    options = TopoOptions(gpus_per_server=8)
    ours = simulate_file(str(path), None, options, "H200")
    default = simulate_file(str(path), None, options, "H200",
                            str(ROOT / "scripts/inference_configs/deepseek_default.json"))
    # 31 layers (28 MoE) hold about half of the 61 layers' weights: the header's config, not the name's default
    assert ours.memory.weights_bytes < 0.55 * default.memory.weights_bytes
    config.unlink()
    sim = run_cli("-m", "simulator", "-w", str(path), "--model", "topo", "-g_p_s", "8", "--gpu_type", "H200",
                  "-r_f", str(tmp_path / "r"))
    assert sim.returncode == 2 and "give --inference_config FILE" in sim.stderr and "Traceback" not in sim.stderr

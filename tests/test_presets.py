"""The preset registry: AICB's names and sizes, real architectures, clear errors."""

import pytest

from utils.errors import ConfigError
from utils.presets import PRESETS, find_preset, get_preset, resolve_model_size


@pytest.mark.parametrize("name, canonical", [
    ("gpt_13B", "gpt_13B"), ("GPT_175B", "gpt3_175B"), ("Mixtral_8*7B", "mixtral_8x7B"),
    ("mixtral-8x7b", "mixtral_8x7B"), ("Llama-3-405B", "llama3_405B"), ("llama_405B", "llama3_405B"),
    ("deepseek671", "deepseek_v3"), ("DeepSeek-V2-Lite", "deepseek_v2_lite"), ("Qwen3-30B-A3B", "qwen3_30B_A3B"),
])
def test_lookup(name, canonical):
    assert get_preset(name).name == canonical


def test_aicb_sizes():
    assert resolve_model_size("13") == "gpt_13B"
    assert resolve_model_size("moe") == "mixtral_8x7B"
    assert resolve_model_size("deepseek16") == "deepseek_v2_lite"
    assert resolve_model_size("7", frame="DeepSpeed") == "llama_7B"
    with pytest.raises(ConfigError, match="unknown -m/--model_size '8'.*known sizes: 7, 13"):
        resolve_model_size("8")


def test_unknown_lists_known():
    with pytest.raises(ConfigError, match=r"unknown model 'gpt_99B'; known models: gpt_tiny, gpt_7B"):
        get_preset("gpt_99B")
    assert find_preset("gpt_99B") is None


def test_published_architectures():
    # DeepSeek hidden sizes as published (AICB's presets carry the FFN sizes there instead)
    assert [get_preset(n).hidden_size for n in ("deepseek16", "deepseek236", "deepseek671")] == [2048, 5120, 7168]
    assert get_preset("llama3_405B").num_layers == 126
    assert get_preset("llama3_405B").query_groups == 8
    assert get_preset("qwen3_235B_A22B").kv_channels == 128
    for model in PRESETS.values():
        assert model.source, model.name


def test_every_preset_survives_the_flags_path():
    """A job built from ``--model_name NAME`` (what the generators, the replay and the simulator parse) holds the preset's
    architecture field for field: a field the flags' path forgets silently changes the model (as the sliding window of
    gpt_oss_* once did).  A dense preset's top-k is AICB's default and means nothing."""
    import dataclasses

    from utils.cli import parse_job
    from utils.model_config import ModelConfig
    from utils.presets import get_preset, known_names

    for name in known_names():
        preset = get_preset(name)
        argv = ["--model_name", name, "--world_size", "8", "--global_batch", "8"]
        if preset.is_moe:
            argv += ["--expert_model_parallel_size", str(8 if preset.num_experts % 8 == 0 else 1)]
        job, _ = parse_job(argv, "t", "")
        skip = {"name", "published_params", "source"} | (set() if preset.is_moe else {"moe_router_topk"})
        changed = [f.name for f in dataclasses.fields(ModelConfig)
                   if f.name not in skip and getattr(preset, f.name) != getattr(job.model, f.name)]
        assert not changed, f"{name}: {changed}"

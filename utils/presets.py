"""Named model architectures: one registry, reachable by AICB's names and sizes and by the models'
own names.

Lookup ignores case and punctuation, so ``Mixtral_8*7B``, ``mixtral-8x7b`` and ``Mixtral_8x7B`` are
the same model.  Each entry cites where its dimensions come from; ``published_params`` is the total
parameter count its source states (used by the tests that check our per-rank shapes).
A preset fixes the architecture only: sequence length, batch sizes and the parallel layout stay
the user's.
"""

from __future__ import annotations

import re
from typing import Any

from utils.errors import ConfigError
from utils.model_config import ModelConfig

_GPT = dict(normalization="LayerNorm", position_embedding_type="learned_absolute", add_bias_linear=True,
            vocab_size=50257, max_position_embeddings=2048)
_LLAMA = dict(normalization="RMSNorm", position_embedding_type="rope", swiglu=True, add_bias_linear=False,
              untie_embeddings_and_output_weights=True, attention_dropout=0.0, hidden_dropout=0.0)
"""Llama-style models train without dropout (Megatron-LM's Llama, Mixtral, DeepSeek and Qwen example
scripts pass --attention-dropout 0.0 --hidden-dropout 0.0); GPT presets keep Megatron's 0.1."""

_STATED: dict[str, frozenset[str]] = {}
"""The fields each preset states; the others are derived as Megatron derives them (see :func:`states`)."""


def _preset(**fields: Any) -> ModelConfig:
    """A preset, recording which fields it states (an FFN, kv channels, ... left out is derived from the
    final flags, as Megatron derives it, not copied from the preset)."""
    model = ModelConfig(**fields)
    _STATED[model.name] = frozenset(fields)
    return model


_PRESETS: list[tuple[ModelConfig, tuple[str, ...]]] = [
    # A tiny model for demos, tests and CPU timing; not a real architecture.
    (_preset(name="gpt_tiny", hidden_size=256, num_layers=4, num_attention_heads=8, vocab_size=1024,
                 max_position_embeddings=4096, normalization="LayerNorm", source="ours: demo and test size"),
     ("tiny",)),
    # AICB's own GPT sizes (scripts/megatron_gpt.sh); not published models, so no published total.  Their
    # 4096 positions are what AICB's scripts pass with them.
    (_preset(name="gpt_7B", hidden_size=4096, num_layers=36, num_attention_heads=32,
                 source="AICB scripts/megatron_gpt.sh (-m 7)", **{**_GPT, "max_position_embeddings": 4096}), ()),
    (_preset(name="gpt_13B", hidden_size=5120, num_layers=40, num_attention_heads=40,
                 source="AICB scripts/megatron_gpt.sh (-m 13); Megatron-LM's 13B GPT configuration",
                 **{**_GPT, "max_position_embeddings": 4096}), ()),
    (_preset(name="gpt_22B", hidden_size=6144, num_layers=48, num_attention_heads=64,
                 source="AICB scripts/megatron_gpt.sh (-m 22)", **{**_GPT, "max_position_embeddings": 4096}), ()),
    # GPT-3: Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1 (n_params,
    # n_layers, d_model, n_heads, d_head); context 2048, GPT-2 BPE vocabulary of 50257.
    # The 13B row gives d_model 5140 with 40 heads of d_head 128, hence kv_channels 128.
    (_preset(name="gpt3_13B", hidden_size=5140, num_layers=40, num_attention_heads=40, kv_channels_given=128,
                 published_params=13.0e9, source="GPT-3 paper, Table 2.1 (GPT-3 13B)", **_GPT), ()),
    (_preset(name="gpt3_175B", hidden_size=12288, num_layers=96, num_attention_heads=96,
                 published_params=174.6e9, source="GPT-3 paper, Table 2.1 (GPT-3 175B)", **_GPT),
     ("gpt_175B", "gpt3", "GPT-3")),
    # LLaMA: Touvron et al. 2023, "LLaMA: Open and Efficient Foundation Language Models", Table 2;
    # FFN sizes and parameter totals from the released checkpoints' params.json / model card.
    (_preset(name="llama_7B", hidden_size=4096, num_layers=32, num_attention_heads=32, ffn_hidden_size=11008,
                 vocab_size=32000, max_position_embeddings=2048, published_params=6.74e9,
                 source="LLaMA paper, Table 2; model card (6.7B)", **_LLAMA), ("llama1_7B",)),
    (_preset(name="llama_13B", hidden_size=5120, num_layers=40, num_attention_heads=40, ffn_hidden_size=13824,
                 vocab_size=32000, max_position_embeddings=2048, published_params=13.0e9,
                 source="LLaMA paper, Table 2; model card (13.0B)", **_LLAMA), ("llama1_13B",)),
    (_preset(name="llama_30B", hidden_size=6656, num_layers=60, num_attention_heads=52, ffn_hidden_size=17920,
                 vocab_size=32000, max_position_embeddings=2048, published_params=32.5e9,
                 source="LLaMA paper, Table 2 (33B); model card (32.5B)", **_LLAMA), ("llama_33B", "llama1_30B")),
    (_preset(name="llama_65B", hidden_size=8192, num_layers=80, num_attention_heads=64, ffn_hidden_size=22016,
                 vocab_size=32000, max_position_embeddings=2048, published_params=65.2e9,
                 source="LLaMA paper, Table 2; model card (65.2B)", **_LLAMA), ("llama1_65B",)),
    # Llama 3: Grattafiori et al. 2024, "The Llama 3 Herd of Models", Table 3 (layers, model
    # dimension, FFN dimension, heads, key/value heads, vocabulary 128,000 -> 128,256 tokens).
    (_preset(name="llama3_8B", hidden_size=4096, num_layers=32, num_attention_heads=32, num_query_groups=8,
                 ffn_hidden_size=14336, vocab_size=128256, max_position_embeddings=8192, published_params=8.03e9,
                 source="Llama 3 Herd paper, Table 3; Meta-Llama-3-8B model card", **_LLAMA), ("llama_3_8B",)),
    (_preset(name="llama3_70B", hidden_size=8192, num_layers=80, num_attention_heads=64, num_query_groups=8,
                 ffn_hidden_size=28672, vocab_size=128256, max_position_embeddings=8192, published_params=70.6e9,
                 source="Llama 3 Herd paper, Table 3; Meta-Llama-3-70B model card", **_LLAMA), ("llama_3_70B",)),
    (_preset(name="llama3_405B", hidden_size=16384, num_layers=126, num_attention_heads=128, num_query_groups=8,
                 ffn_hidden_size=53248, vocab_size=128256, max_position_embeddings=8192, published_params=405.9e9,
                 source="Llama 3 Herd paper, Table 3 (126 layers); Llama-3.1-405B model card", **_LLAMA),
     ("llama_3_405B", "llama_405B", "llama3_1_405B")),
    # Mixtral: Jiang et al. 2024, "Mixtral of Experts", Table 1 (dim 4096, 32 layers, head_dim 128,
    # hidden_dim 14336, 32 heads, 8 kv heads, 8 experts, top 2, vocab 32000); 46.7B total per the
    # model card.  8x22B from its model card (56 layers, 6144, 48 heads, FFN 16384, 141B).
    (_preset(name="mixtral_8x7B", hidden_size=4096, num_layers=32, num_attention_heads=32, num_query_groups=8,
                 ffn_hidden_size=14336, vocab_size=32000, max_position_embeddings=32768, num_experts=8,
                 moe_router_topk=2, published_params=46.7e9, source="Mixtral paper, Table 1; model card (46.7B)",
                 **_LLAMA), ("moe",)),
    (_preset(name="mixtral_8x22B", hidden_size=6144, num_layers=56, num_attention_heads=48, num_query_groups=8,
                 ffn_hidden_size=16384, vocab_size=32768, max_position_embeddings=65536, num_experts=8,
                 moe_router_topk=2, published_params=141e9, source="Mixtral-8x22B model card (141B)", **_LLAMA), ()),
    # DeepSeek-V2 and V2-Lite: DeepSeek-AI 2024, "DeepSeek-V2", section 3.1 and appendix B, and the
    # released config.json (hidden 5120 / 2048, first_k_dense_replace 1, moe_intermediate 1536 /
    # 1408, 160 / 64 routed and 2 shared experts, top 6).  V3: "DeepSeek-V3 Technical Report"
    # section 4.2 (61 layers, hidden 7168, 128 heads, q_lora 1536, kv_lora 512, 3 dense layers,
    # 256 routed + 1 shared expert of 2048, top 8); 671B total excluding the MTP module.
    (_preset(name="deepseek_v2_lite", hidden_size=2048, num_layers=27, num_attention_heads=16,
                 ffn_hidden_size=10944, vocab_size=102400, max_position_embeddings=163840, num_experts=64,
                 moe_router_topk=6, moe_ffn_hidden_size=1408, n_shared_experts=2, n_dense_layers=1,
                 multi_latent_attention=True, q_lora_rank=None, kv_lora_rank=512, qk_head_dim=128,
                 qk_pos_emb_head_dim=64, v_head_dim=128, published_params=15.7e9,
                 source="DeepSeek-V2 paper, appendix B; DeepSeek-V2-Lite config.json (15.7B)", **_LLAMA),
     ("deepseek16", "deepseek_16B", "DeepSeek-V2-Lite")),
    (_preset(name="deepseek_v2", hidden_size=5120, num_layers=60, num_attention_heads=128,
                 ffn_hidden_size=12288, vocab_size=102400, max_position_embeddings=163840, num_experts=160,
                 moe_router_topk=6, moe_ffn_hidden_size=1536, n_shared_experts=2, n_dense_layers=1,
                 multi_latent_attention=True, q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128,
                 qk_pos_emb_head_dim=64, v_head_dim=128, published_params=235.7e9,
                 source="DeepSeek-V2 paper, section 3.1; config.json (236B)", **_LLAMA),
     ("deepseek236", "deepseek_236B")),
    (_preset(name="deepseek_v3", hidden_size=7168, num_layers=61, num_attention_heads=128,
                 ffn_hidden_size=18432, vocab_size=129280, max_position_embeddings=163840, num_experts=256,
                 moe_router_topk=8, moe_ffn_hidden_size=2048, n_shared_experts=1, n_dense_layers=3,
                 multi_latent_attention=True, q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128,
                 qk_pos_emb_head_dim=64, v_head_dim=128, published_params=671e9, mtp_num_layers=1,
                 moe_router_score_function="sigmoid", moe_router_num_groups=8, moe_router_group_topk=4,
                 moe_router_enable_expert_bias=True,
                 source="DeepSeek-V3 Technical Report, section 4.2 (one MTP module, D = 1; sigmoid gating with the "
                        "auxiliary-loss-free bias, node-limited routing to 4 of 8 groups); config.json (671B, "
                        "num_nextn_predict_layers 1, scoring_func sigmoid, n_group 8, topk_group 4)", **_LLAMA),
     ("deepseek671", "deepseek_671B")),
    # Qwen3 MoE: Qwen3 Technical Report (2025), Table 2, and config.json (hidden 2048 / 4096,
    # 48 / 94 layers, 32 / 64 query and 4 kv heads of 128, 128 experts of 768 / 1536, top 8, QK-norm).
    (_preset(name="qwen3_30B_A3B", hidden_size=2048, num_layers=48, num_attention_heads=32, num_query_groups=4,
                 kv_channels_given=128, ffn_hidden_size=6144, vocab_size=151936, max_position_embeddings=40960,
                 num_experts=128, moe_router_topk=8, moe_ffn_hidden_size=768, qk_layernorm=True,
                 published_params=30.5e9, source="Qwen3 Technical Report, Table 2; Qwen3-30B-A3B config.json",
                 **_LLAMA), ("qwen3_moe_30B",)),
    (_preset(name="qwen3_235B_A22B", hidden_size=4096, num_layers=94, num_attention_heads=64, num_query_groups=4,
                 kv_channels_given=128, ffn_hidden_size=12288, vocab_size=151936, max_position_embeddings=40960,
                 num_experts=128, moe_router_topk=8, moe_ffn_hidden_size=1536, qk_layernorm=True,
                 published_params=235e9, source="Qwen3 Technical Report, Table 2; Qwen3-235B-A22B config.json",
                 **_LLAMA), ("qwen3_moe_235B", "qwen3_moe")),
    # GPT-OSS: OpenAI's gpt-oss-120b / gpt-oss-20b config.json (hidden 2880, 36 / 24 layers, 64 query and 8 kv
    # heads of 64, 128 / 32 experts of intermediate 2880, top 4, vocab 201088, biases in attention and experts,
    # sliding window 128 on every other layer: layer_types alternate sliding_attention / full_attention); the model
    # card's 116.8B / 20.9B total.
    (_preset(name="gpt_oss_120B", hidden_size=2880, num_layers=36, num_attention_heads=64, num_query_groups=8,
                 kv_channels_given=64, ffn_hidden_size=2880, vocab_size=201088, max_position_embeddings=131072,
                 num_experts=128, moe_router_topk=4, moe_ffn_hidden_size=2880, window_size=(128, 0),
                 window_attn_skip_freq=2, published_params=116.8e9,
                 source="gpt-oss-120b config.json and model card (116.8B)", **{**_LLAMA, "add_bias_linear": True}),
     ("gpt-oss-120b", "gpt_oss")),
    (_preset(name="gpt_oss_20B", hidden_size=2880, num_layers=24, num_attention_heads=64, num_query_groups=8,
                 kv_channels_given=64, ffn_hidden_size=2880, vocab_size=201088, max_position_embeddings=131072,
                 num_experts=32, moe_router_topk=4, moe_ffn_hidden_size=2880, window_size=(128, 0),
                 window_attn_skip_freq=2, published_params=20.9e9,
                 source="gpt-oss-20b config.json and model card (20.9B)", **{**_LLAMA, "add_bias_linear": True}),
     ("gpt-oss-20b",)),
]

# AICB's -m sizes: megatron_gpt.sh / megatron_workload_with_aiob.sh for Megatron and DeepSeek,
# deepspeed_llama.sh for DeepSpeed.
MEGATRON_SIZES = {
    "7": "gpt_7B", "13": "gpt_13B", "22": "gpt_22B", "175": "gpt3_175B", "405": "llama3_405B",
    "65": "llama_65B", "moe": "mixtral_8x7B", "deepseek16": "deepseek_v2_lite", "deepseek236": "deepseek_v2",
    "deepseek671": "deepseek_v3", "deepseek": "deepseek_v3",
}
DEEPSPEED_SIZES = {"7": "llama_7B", "13": "llama_13B", "30": "llama_30B", "65": "llama_65B"}
# The model names AICB's scripts pass for a size (they name the output files); sizes AICB's scripts do
# not know (deepseek*) keep the preset's name.
MEGATRON_SIZE_LABELS = {"7": "gpt_7B", "13": "gpt_13B", "22": "gpt_22B", "175": "gpt_175B", "405": "llama_405B",
                        "65": "llama_65B", "moe": "Mixtral_8*7B"}
DEEPSPEED_SIZE_LABELS = {"7": "llama_7b", "13": "llama_13b", "30": "llama_30b", "65": "llama_65b"}


def _key(name: str) -> str:
    return re.sub(r"[^0-9a-z]", "", name.lower().replace("*", "x"))


PRESETS: dict[str, ModelConfig] = {model.name: model for model, _ in _PRESETS}
_LOOKUP: dict[str, str] = {}
for _model, _aliases in _PRESETS:
    for _alias in (_model.name, *_aliases):
        _LOOKUP.setdefault(_key(_alias), _model.name)


def states(model: ModelConfig, field: str) -> bool:
    """Whether preset ``model`` states ``field`` itself (``False``: the field is derived, e.g. the GPT presets'
    FFN of 4h, which ``--swiglu`` turns into Megatron's ``int(8h/3/64)*64``)."""
    return field in _STATED.get(model.name, frozenset())


def known_names() -> list[str]:
    """Canonical preset names, in registry order."""
    return list(PRESETS)


def find_preset(name: str) -> ModelConfig | None:
    """The preset called ``name`` (any alias, any case or punctuation), or ``None``."""
    canonical = _LOOKUP.get(_key(name))
    return PRESETS[canonical] if canonical else None


def get_preset(name: str) -> ModelConfig:
    """The preset called ``name``; raises :class:`ConfigError` listing the known names."""
    model = find_preset(name)
    if model is None:
        raise ConfigError(f"unknown model {name!r}; known models: {', '.join(known_names())}")
    return model


def resolve_model_size(size: str, frame: str = "Megatron") -> str:
    """Preset name for AICB's ``-m/--model_size`` value under a frame.  Raises :class:`ConfigError`."""
    table = DEEPSPEED_SIZES if frame == "DeepSpeed" else MEGATRON_SIZES
    key = str(size).strip().lower()
    if key not in table:
        raise ConfigError(f"unknown -m/--model_size {size!r} for --frame {frame}; known sizes: {', '.join(table)}")
    return table[key]


def size_label(size: str, frame: str = "Megatron") -> str:
    """The model name AICB's scripts give the files of ``-m/--model_size`` under a frame (``-m 175`` ->
    ``gpt_175B``, DeepSpeed ``-m 13`` -> ``llama_13b``); the preset's own name for sizes they lack."""
    key = str(size).strip().lower()
    labels = DEEPSPEED_SIZE_LABELS if frame == "DeepSpeed" else MEGATRON_SIZE_LABELS
    return labels.get(key) or resolve_model_size(size, frame)

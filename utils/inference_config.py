"""Inference model architectures: AICB 2.1's DeepSeek-671B, Qwen3-Moe-235B and Qwen3-Next-80B, read
from AICB's JSON configs (``scripts/inference_configs/{deepseek,qwen3_moe,qwen3_next}_default.json``),
built from any preset of :mod:`utils.presets` (GPT, LLaMA, Llama 3, Mixtral, DeepSeek V2/V3, Qwen3 MoE),
or from the inference-only architectures below (Llama 2 and the dense Qwen3 models, from their
``config.json``).

Kinds (what decides the layer's items and SimAI records): ``deepseek`` (MLA, shared experts computed
before routing), ``qwen3_moe`` and ``qwen3_next`` (AICB's), ``dense`` (a dense GQA/MHA transformer:
Llama 1/2/3, Qwen3 dense, GPT; QK-norm only where the model has it, SwiGLU or a plain GeLU MLP) and
``moe`` (a GQA mixture of experts without MLA: Mixtral).

AICB's configs come in two dialects: DeepSeek's own keys (``d_q_c``, ``d_kv_c``, ``router_expert``,
``duped_expert``, ...) and Hugging Face ``config.json`` keys for the Qwen3 models.  A config that lacks
a key the model needs is a one-line :class:`~utils.errors.FormatError` naming the file and the key.

Model names, as AICB's Python entries match them (``SimAI_inference_workload_generator MODEL
[CONFIG]``): a name containing ``Qwen3-Moe``, ``Qwen3-Next`` or ``DeepSeek``; AICB's script sizes
(``deepseek-671B``, ``qwen3-235B``, ``qwen3-next-80B``); and our presets (``deepseek_v3``,
``qwen3_235B_A22B``, ``qwen3_30B_A3B``, ``deepseek_v2``, ...).  Without a config file the defaults
below are used (the contents of AICB's default JSON files, checked equal by the tests).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from utils.errors import ConfigError, FormatError
from utils.io import read_text

PHASES = ("prefill", "decode")
KINDS = ("deepseek", "qwen3_moe", "qwen3_next", "dense", "moe")
AICB_NAMES = {"deepseek": "DeepSeek-671B", "qwen3_moe": "Qwen3-Moe-235B", "qwen3_next": "Qwen3-Next-80B"}
"""The model name AICB's script passes for each kind (and writes into its file names)."""
SCRIPT_SIZES = {"deepseek-671B": "deepseek", "qwen3-235B": "qwen3_moe", "qwen3-next-80B": "qwen3_next"}
"""``-m`` values of AICB's ``scripts/inference_workload_with_aiob.sh``."""
CONFIG_FILES = {"deepseek": "deepseek_default.json", "qwen3_moe": "qwen3_moe_default.json",
                "qwen3_next": "qwen3_next_default.json"}
"""AICB's default config file of each kind, under ``scripts/inference_configs/``."""

DEEPSEEK_V3_DENSE_FFN = 18432
"""DeepSeek-V3's dense-layer FFN width (config.json ``intermediate_size``), which AICB's JSON lacks."""


@dataclass(frozen=True)
class InferenceModel:
    """One inference architecture.

    Attention: ``mla`` (DeepSeek: ``q_lora_rank``, ``kv_lora_rank``, ``qk_rope_dim``, ``qk_nope_dim``,
    ``v_head_dim``), ``gqa`` (Qwen3: ``num_kv_heads`` heads of ``head_dim``, QK-norm; Qwen3-Next's full
    attention also has an output gate), and gated DeltaNet (``gdn``, Qwen3-Next) on every layer that is
    not a full-attention one (layer ``i`` is full attention when ``(i + 1) % full_attention_interval
    == 0``, AICB's rule).

    MLP: ``dense_layer_ids`` hold a dense SwiGLU MLP of ``dense_ffn``; the others are MoE layers of
    ``routed_experts`` routed experts plus ``redundant_experts`` copies (DeepSeek's EPLB
    duplicates; AICB's ``duped_expert``), top-``topk``, each expert a SwiGLU MLP of ``expert_ffn``,
    and ``shared_experts`` shared experts of ``shared_expert_ffn``.

    A dense model (kind ``dense``) has every layer in ``dense_layer_ids`` and no experts; ``gated_mlp``
    False is GPT's ``fc1 -> GeLU -> fc2`` MLP (two matrices) instead of SwiGLU's three; ``rope`` False is
    GPT's learned absolute positions (added at the embedding) instead of rotary embeddings.

    ``weight_dtype``: the linear layers' weights (``float8``: DeepSeek's block-scaled FP8 checkpoint;
    ``bfloat16``: Qwen3's).  Norms, the router, embeddings and the LM head stay in bf16.
    ``mtp_layers``: DeepSeek-V3's multi-token-prediction modules (one transformer layer each, its
    technical report section 2.2: D = 1), the draft of MTP speculative decoding.
    ``window`` / ``window_layers``: sliding-window attention (GPT-OSS: 128 tokens on every other layer, its preset's
    ``--window_size`` and ``--window_attn_skip_freq``): those layers attend to, and keep the KV of, the last
    ``window`` positions only.
    """

    name: str
    kind: str
    num_layers: int
    hidden_size: int
    num_heads: int
    vocab_size: int
    attention: str = "gqa"
    head_dim: int = 128
    num_kv_heads: int = 1
    qk_norm: bool = False
    output_gate: bool = False
    partial_rotary_factor: float = 1.0
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_rope_dim: int = 0
    qk_nope_dim: int = 0
    v_head_dim: int = 0
    full_attention_interval: int = 1
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_dim: int = 0
    linear_value_dim: int = 0
    conv_kernel: int = 0
    dense_layer_ids: tuple[int, ...] = ()
    dense_ffn: int = 0
    routed_experts: int = 0
    redundant_experts: int = 0
    topk: int = 1
    expert_ffn: int = 0
    shared_experts: int = 0
    shared_expert_ffn: int = 0
    weight_dtype: str = "bfloat16"
    tied_embeddings: bool = False
    gated_mlp: bool = True
    rope: bool = True
    mtp_layers: int = 0
    window: int = 0
    window_layers: tuple[int, ...] = ()
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"unknown model kind {self.kind!r} (one of {', '.join(KINDS)})")
        for name in ("num_layers", "hidden_size", "num_heads", "vocab_size", "topk"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{self.name}: {name} must be a positive integer, got {value!r}")
        if self.is_moe:
            if self.routed_experts < 1 or self.expert_ffn < 1:
                raise ConfigError(f"{self.name}: an MoE model needs experts and an expert FFN width")
            if self.topk > self.routed_experts:
                raise ConfigError(f"{self.name}: top-{self.topk} routing exceeds the {self.routed_experts} routed experts")
        elif self.dense_ffn < 1:
            raise ConfigError(f"{self.name}: a dense model needs its FFN width (dense_ffn)")
        if self.full_attention_interval < 1:
            raise ConfigError(f"{self.name}: full_attention_interval must be at least 1")

    @property
    def is_moe(self) -> bool:
        """Whether any layer has an MoE MLP (a dense model lists every layer in ``dense_layer_ids``)."""
        dense = set(self.dense_layer_ids)
        return any(i not in dense for i in range(self.num_layers))

    @property
    def num_experts(self) -> int:
        """Physical experts per MoE layer: routed plus redundant copies (AICB's ``num_experts``)."""
        return self.routed_experts + self.redundant_experts

    def is_moe_layer(self, layer: int) -> bool:
        return layer not in self.dense_layer_ids

    def attention_kind(self, layer: int) -> str:
        """``mla``, ``gqa`` or ``gdn`` (gated DeltaNet) for global layer ``layer`` (0-based)."""
        if self.attention == "mla":
            return "mla"
        if self.linear_value_heads and (layer + 1) % self.full_attention_interval:
            return "gdn"
        return "gqa"

    def attention_window(self, layer: int) -> int | None:
        """The left window in tokens of layer ``layer``'s attention, or None when it attends to the whole past."""
        return self.window if self.window and layer in self.window_layers else None

    def full_attention_layers(self) -> list[int]:
        """The layers with full (softmax) attention."""
        return [i for i in range(self.num_layers) if self.attention_kind(i) != "gdn"]

    @property
    def kv_width(self) -> int:
        """MLA's cached width per token and layer: the compressed latent plus the rotary key."""
        return self.kv_lora_rank + self.qk_rope_dim


# ---- AICB's default configs (the JSON files AICB ships; the tests check the shipped copies) ----------

DEFAULT_CONFIGS: dict[str, dict[str, Any]] = {
    "deepseek": {
        "num_layers": 61, "dense_layer": 3, "hidden_size": 7168, "num_attention_heads": 128, "vocab_size": 129280,
        "d_kv_c": 512, "d_q_c": 1536, "d_r": 64, "head_num": 128, "d_q": 128, "d_kv": 128, "router_expert": 256,
        "duped_expert": 32, "shared_experts": 1, "moe_router_topk": 8, "expert_dim": 2048, "num_experts": 288,
        "computation_enable": True, "add_bias_linear": False,
    },
    "qwen3_moe": {
        "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
        "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 12288,
        "max_position_embeddings": 40960, "max_window_layers": 94, "mlp_only_layers": [], "model_type": "qwen3_moe",
        "moe_intermediate_size": 1536, "norm_topk_prob": True, "num_attention_heads": 64, "num_experts": 128,
        "num_experts_per_tok": 8, "num_hidden_layers": 94, "num_key_value_heads": 4, "output_router_logits": False,
        "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
        "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
    },
    "qwen3_next": {
        "architectures": ["Qwen3NextForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
        "decoder_sparse_step": 1, "eos_token_id": 151645, "full_attention_interval": 4, "head_dim": 256,
        "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 5120,
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
        "linear_num_value_heads": 32, "linear_value_head_dim": 128, "max_position_embeddings": 262144,
        "mlp_only_layers": [], "model_type": "qwen3_next", "moe_intermediate_size": 512, "norm_topk_prob": True,
        "num_attention_heads": 16, "num_experts": 512, "num_experts_per_tok": 10, "num_hidden_layers": 48,
        "num_key_value_heads": 2, "output_router_logits": False, "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-06,
        "rope_scaling": None, "rope_theta": 10000000, "router_aux_loss_coef": 0.001,
        "shared_expert_intermediate_size": 512, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.57.0.dev0", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
    },
}

_SOURCES = {
    "deepseek": "AICB 2.1 scripts/inference_configs/deepseek_default.json (DeepSeek-V3 Technical Report, section 4.2)",
    "qwen3_moe": "AICB 2.1 scripts/inference_configs/qwen3_moe_default.json (Qwen3-235B-A22B config.json)",
    "qwen3_next": "AICB 2.1 scripts/inference_configs/qwen3_next_default.json (Qwen3-Next-80B-A3B config.json)",
}


class _Keys:
    """Typed access to a config's keys; a missing or mistyped key is one line naming file and key."""

    def __init__(self, data: dict[str, Any], path: str, kind: str) -> None:
        self.data, self.path, self.kind = data, path, kind

    def int(self, key: str, default: int | None = None, minimum: int = 1) -> int:
        if key not in self.data:
            if default is not None:
                return default
            raise FormatError(self.path, f"missing key {key!r} (a {AICB_NAMES[self.kind]} config needs it; "
                              f"see AICB's {CONFIG_FILES[self.kind]})", field=key)
        value = self.data[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise FormatError(self.path, f"key {key!r} must be an integer >= {minimum}, got {value!r}", field=key)
        return value

    def number(self, key: str, default: float) -> float:
        value = self.data.get(key, default)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= 1:
            raise FormatError(self.path, f"key {key!r} must be a number in (0, 1], got {value!r}", field=key)
        return float(value)

    def int_list(self, key: str) -> list[int]:
        value = self.data.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise FormatError(self.path, f"key {key!r} must be a list of layer indices, got {value!r}", field=key)
        return value


def _deepseek(keys: _Keys, name: str, source: str) -> InferenceModel:
    hidden, layers = keys.int("hidden_size"), keys.int("num_layers")
    routed, expert_ffn = keys.int("router_expert"), keys.int("expert_dim")
    v3 = (hidden, layers, routed, expert_ffn) == (7168, 61, 256, 2048)
    if "intermediate_size" in keys.data:
        dense_ffn = keys.int("intermediate_size")
    elif v3:
        dense_ffn = DEEPSEEK_V3_DENSE_FFN   # AICB's JSON has no dense width; AICB uses expert_dim there (a defect)
    else:
        dense_ffn = expert_ffn              # what AICB uses for a config of its own
    return InferenceModel(
        name=name, kind="deepseek", num_layers=layers, hidden_size=hidden, num_heads=keys.int("num_attention_heads"),
        vocab_size=keys.int("vocab_size"), attention="mla", q_lora_rank=keys.int("d_q_c"),
        kv_lora_rank=keys.int("d_kv_c"), qk_rope_dim=keys.int("d_r"), qk_nope_dim=keys.int("d_q"),
        v_head_dim=keys.int("d_kv"), dense_layer_ids=tuple(range(keys.int("dense_layer", minimum=0))),
        dense_ffn=dense_ffn, routed_experts=routed, redundant_experts=keys.int("duped_expert", 0, minimum=0),
        topk=keys.int("moe_router_topk"), expert_ffn=expert_ffn, shared_experts=keys.int("shared_experts", minimum=0),
        shared_expert_ffn=expert_ffn, weight_dtype="float8", mtp_layers=keys.int("num_nextn_predict_layers", 1 if v3 else 0,
                                                                                 minimum=0), source=source)


def _qwen3(keys: _Keys, name: str, source: str) -> InferenceModel:
    layers = keys.int("num_hidden_layers")
    sparse_step = keys.int("decoder_sparse_step", 1)
    mlp_only = set(keys.int_list("mlp_only_layers"))
    dense = tuple(i for i in range(layers) if i in mlp_only or (i + 1) % sparse_step)
    next_model = keys.kind == "qwen3_next"
    linear: dict[str, Any] = {}
    if next_model:
        linear = dict(full_attention_interval=keys.int("full_attention_interval"),
                      linear_key_heads=keys.int("linear_num_key_heads"), linear_value_heads=keys.int("linear_num_value_heads"),
                      linear_key_dim=keys.int("linear_key_head_dim"), linear_value_dim=keys.int("linear_value_head_dim"),
                      conv_kernel=keys.int("linear_conv_kernel_dim"), output_gate=True,
                      partial_rotary_factor=keys.number("partial_rotary_factor", 1.0))
    shared_ffn = keys.int("shared_expert_intermediate_size", 0, minimum=0)
    dtype = str(keys.data.get("torch_dtype") or "bfloat16")
    return InferenceModel(
        name=name, kind=keys.kind, num_layers=layers, hidden_size=keys.int("hidden_size"),
        num_heads=keys.int("num_attention_heads"), vocab_size=keys.int("vocab_size"), attention="gqa",
        head_dim=keys.int("head_dim"), num_kv_heads=keys.int("num_key_value_heads"), qk_norm=True,
        dense_layer_ids=dense, dense_ffn=keys.int("intermediate_size") if dense else keys.int("intermediate_size", 0, 0),
        routed_experts=keys.int("num_experts"), topk=keys.int("num_experts_per_tok"),
        expert_ffn=keys.int("moe_intermediate_size"), shared_experts=1 if shared_ffn else 0, shared_expert_ffn=shared_ffn,
        weight_dtype="float8" if "8" in dtype else "bfloat16", tied_embeddings=bool(keys.data.get("tie_word_embeddings")),
        source=source, **linear)


_BUILDERS = {"deepseek": _deepseek, "qwen3_moe": _qwen3, "qwen3_next": _qwen3}


def model_from_dict(data: dict[str, Any], kind: str, name: str | None = None, path: str = "<config>",
                    source: str | None = None) -> InferenceModel:
    """The model a config dictionary of ``kind`` describes (AICB's keys).  Raises :class:`FormatError`."""
    if not isinstance(data, dict):
        raise FormatError(path, f"expected a JSON object of model keys, got {type(data).__name__}")
    keys = _Keys(data, path, kind)
    try:
        return _BUILDERS[kind](keys, name or AICB_NAMES[kind], source or path)
    except ConfigError as exc:
        raise FormatError(path, str(exc)) from None


def load_config(path: str | os.PathLike, kind: str, name: str | None = None) -> InferenceModel:
    """Read an AICB inference config (JSON) of ``kind``.  Raises :class:`FormatError` naming the file."""
    path = os.fspath(path)
    text = read_text(path, "an inference config (JSON)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(path, f"not valid JSON: {exc.msg}", line=exc.lineno) from None
    model = model_from_dict(data, kind, name, path, source=path)
    if data != DEFAULT_CONFIGS[kind]:   # a model of its own: files made from it say where it came from
        model.extra["config_path"] = os.path.abspath(path)
    return model


def default_model(kind: str, name: str | None = None) -> InferenceModel:
    """AICB's default config of ``kind``."""
    return model_from_dict(DEFAULT_CONFIGS[kind], kind, name, f"<built-in {CONFIG_FILES[kind]}>", _SOURCES[kind])


# ---- names --------------------------------------------------------------------------------------------

def _key(name: str) -> str:
    return re.sub(r"[^0-9a-z]", "", name.lower())


_ALIASES = {_key(n): kind for kind, n in AICB_NAMES.items()}
_ALIASES.update({_key(size): kind for size, kind in SCRIPT_SIZES.items()})
_ALIASES.update({_key(n): "qwen3_next" for n in ("qwen3_next", "qwen3_next_80B", "Qwen3-Next-80B-A3B")})
HF_MODELS: dict[str, dict[str, Any]] = {
    # Llama 2: Touvron et al. 2023, "Llama 2: Open Foundation and Fine-Tuned Chat Models", Table 1 and the
    # released config.json (meta-llama/Llama-2-{7b,13b,70b}-hf): 32/40/80 layers, hidden 4096/5120/8192,
    # 32/40/64 heads, 32/40/8 key/value heads (GQA on 70B only), intermediate 11008/13824/28672, vocab 32000
    "llama2_7B": dict(num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=32, dense_ffn=11008, vocab_size=32000,
                      source="Llama 2 paper, Table 1; meta-llama/Llama-2-7b-hf config.json"),
    "llama2_13B": dict(num_layers=40, hidden_size=5120, num_heads=40, num_kv_heads=40, dense_ffn=13824,
                       vocab_size=32000, source="Llama 2 paper, Table 1; meta-llama/Llama-2-13b-hf config.json"),
    "llama2_70B": dict(num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8, dense_ffn=28672,
                       vocab_size=32000, source="Llama 2 paper, Table 1; meta-llama/Llama-2-70b-hf config.json"),
    # Qwen3 dense: Qwen3 Technical Report (2025), Table 1, and config.json (Qwen/Qwen3-*): head_dim 128, 8
    # key/value heads, QK-norm, vocab 151936; embeddings tied below 8B
    "qwen3_0.6B": dict(num_layers=28, hidden_size=1024, num_heads=16, num_kv_heads=8, dense_ffn=3072,
                       vocab_size=151936, qk_norm=True, tied_embeddings=True,
                       source="Qwen3 Technical Report, Table 1; Qwen/Qwen3-0.6B config.json"),
    "qwen3_4B": dict(num_layers=36, hidden_size=2560, num_heads=32, num_kv_heads=8, dense_ffn=9728, vocab_size=151936,
                     qk_norm=True, tied_embeddings=True, source="Qwen3 Technical Report, Table 1; Qwen/Qwen3-4B config.json"),
    "qwen3_8B": dict(num_layers=36, hidden_size=4096, num_heads=32, num_kv_heads=8, dense_ffn=12288, vocab_size=151936,
                     qk_norm=True, source="Qwen3 Technical Report, Table 1; Qwen/Qwen3-8B config.json"),
    "qwen3_14B": dict(num_layers=40, hidden_size=5120, num_heads=40, num_kv_heads=8, dense_ffn=17408,
                      vocab_size=151936, qk_norm=True, source="Qwen3 Technical Report, Table 1; Qwen/Qwen3-14B config.json"),
    "qwen3_32B": dict(num_layers=64, hidden_size=5120, num_heads=64, num_kv_heads=8, dense_ffn=25600,
                      vocab_size=151936, qk_norm=True, source="Qwen3 Technical Report, Table 1; Qwen/Qwen3-32B config.json"),
}
"""Dense architectures inference serves that :mod:`utils.presets` (a training registry) lacks: kind ``dense``,
SwiGLU, head_dim 128 (``hidden / heads`` for Llama 2)."""
_HF_ALIASES = {"llama27b": "llama2_7B", "llama27bhf": "llama2_7B", "llama213b": "llama2_13B", "llama213bhf": "llama2_13B",
               "llama270b": "llama2_70B", "llama270bhf": "llama2_70B", "qwen306b": "qwen3_0.6B", "qwen34b": "qwen3_4B",
               "qwen38b": "qwen3_8B", "qwen314b": "qwen3_14B", "qwen332b": "qwen3_32B"}
_PRESET_MLA_FP8 = frozenset({"deepseek_v3"})
"""Presets whose released checkpoint is block-scaled FP8 (DeepSeek-V3's; V2's is bf16)."""


def known_models() -> str:
    from utils.presets import known_names

    return (f"{', '.join(AICB_NAMES.values())} (AICB's names), {', '.join(SCRIPT_SIZES)} (its script's -m), "
            f"the presets {', '.join(known_names())}, or {', '.join(HF_MODELS)}")


def preset_kind(preset: Any) -> str:
    """The inference kind of a :mod:`utils.presets` model: MLA -> ``deepseek``, an MoE with QK-norm ->
    ``qwen3_moe``, another MoE -> ``moe`` (Mixtral), else ``dense``."""
    if preset.multi_latent_attention:
        return "deepseek"
    if preset.is_moe:
        return "qwen3_moe" if preset.qk_layernorm else "moe"
    return "dense"


def model_kind(name: str) -> tuple[str, str | None]:
    """``(kind, preset or inference-only architecture, or None)`` for a model name.  Raises
    :class:`ConfigError` for an unknown name."""
    from utils.presets import find_preset

    key = _key(name)
    if key in _ALIASES:
        return _ALIASES[key], None
    if key in _HF_ALIASES or name in HF_MODELS:
        return "dense", _HF_ALIASES.get(key, name)
    preset = find_preset(name)
    if preset is not None:
        return preset_kind(preset), preset.name
    # AICB's rule: the kind is the first of these found in the name
    for marker, kind in (("qwen3moe", "qwen3_moe"), ("qwen3next", "qwen3_next"), ("deepseek", "deepseek")):
        if marker in key:
            return kind, None
    raise ConfigError(f"unknown model {name!r}; known: {known_models()}")


def _from_hf(arch: str, name: str) -> InferenceModel:
    fields = dict(HF_MODELS[arch])
    layers = fields["num_layers"]
    head_dim = fields.pop("head_dim", 128)
    return InferenceModel(name=name, kind="dense", attention="gqa", head_dim=head_dim,
                          dense_layer_ids=tuple(range(layers)), **fields)


def _from_preset(preset_name: str, name: str) -> InferenceModel:
    from utils.presets import get_preset

    m = get_preset(preset_name)
    kind = preset_kind(m)
    moe = m.is_moe
    common = dict(name=name, num_layers=m.num_layers, hidden_size=m.hidden_size, num_heads=m.num_attention_heads,
                  vocab_size=m.vocab_size, dense_ffn=m.ffn_hidden_size, gated_mlp=m.swiglu,
                  rope=m.position_embedding_type == "rope",
                  tied_embeddings=not m.untie_embeddings_and_output_weights, source=f"preset {m.name}: {m.source}")
    if moe:
        common.update(dense_layer_ids=tuple(range(m.n_dense_layers)), routed_experts=m.num_experts,
                      topk=m.moe_router_topk, expert_ffn=m.moe_ffn_hidden_size, shared_experts=m.n_shared_experts,
                      shared_expert_ffn=m.moe_ffn_hidden_size if m.n_shared_experts else 0)
    else:
        common.update(dense_layer_ids=tuple(range(m.num_layers)))
    if m.multi_latent_attention:
        return InferenceModel(kind=kind, attention="mla", q_lora_rank=m.q_lora_rank, kv_lora_rank=m.kv_lora_rank,
                              qk_rope_dim=m.qk_pos_emb_head_dim, qk_nope_dim=m.qk_head_dim, v_head_dim=m.v_head_dim,
                              weight_dtype="float8" if m.name in _PRESET_MLA_FP8 else "bfloat16",
                              mtp_layers=1 if m.name == "deepseek_v3" else 0, **common)
    windows = [m.attention_window(layer) for layer in range(m.num_layers)]
    windowed = tuple(layer for layer, w in enumerate(windows) if w is not None)
    return InferenceModel(kind=kind, attention="gqa", head_dim=m.kv_channels, num_kv_heads=m.query_groups,
                          qk_norm=m.qk_layernorm, window=windows[windowed[0]] if windowed else 0,
                          window_layers=windowed, **common)


def resolve_model(name: str, config: str | os.PathLike | None = None) -> InferenceModel:
    """The model called ``name``, from ``config`` (an AICB JSON file) when given, else from AICB's
    default config of its kind, the preset it names or an inference-only architecture (:data:`HF_MODELS`)."""
    kind, preset = model_kind(name)
    if config:
        if kind not in CONFIG_FILES:
            raise ConfigError(f"{name} is a {kind} model: AICB's JSON configs describe DeepSeek, Qwen3-MoE and "
                              "Qwen3-Next models only (give the model by its preset name without a config)")
        return load_config(config, kind, name)
    if preset in HF_MODELS:
        return _from_hf(preset, name)
    if preset is not None:
        return _from_preset(preset, name)
    return default_model(kind, name)


def default_config_path(kind: str, root: str | os.PathLike | None = None) -> str:
    """Where AICB keeps the default config of ``kind`` (``scripts/inference_configs/...``)."""
    base = root if root is not None else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(os.fspath(base), "scripts", "inference_configs", CONFIG_FILES[kind])

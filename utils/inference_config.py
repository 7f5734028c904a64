"""Inference model architectures: AICB 2.1's DeepSeek-671B, Qwen3-Moe-235B and Qwen3-Next-80B, read
from AICB's JSON configs (``scripts/inference_configs/{deepseek,qwen3_moe,qwen3_next}_default.json``)
or built from our presets.

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
KINDS = ("deepseek", "qwen3_moe", "qwen3_next")
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

    ``weight_dtype``: the linear layers' weights (``float8``: DeepSeek's block-scaled FP8 checkpoint;
    ``bfloat16``: Qwen3's).  Norms, the router, embeddings and the LM head stay in bf16.
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
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"unknown model kind {self.kind!r} (one of {', '.join(KINDS)})")
        for name in ("num_layers", "hidden_size", "num_heads", "vocab_size", "topk"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{self.name}: {name} must be a positive integer, got {value!r}")
        if self.num_experts < 1 or self.expert_ffn < 1:
            raise ConfigError(f"{self.name}: an MoE model needs experts and an expert FFN width")
        if self.topk > self.routed_experts:
            raise ConfigError(f"{self.name}: top-{self.topk} routing exceeds the {self.routed_experts} routed experts")
        if self.full_attention_interval < 1:
            raise ConfigError(f"{self.name}: full_attention_interval must be at least 1")

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
    if "intermediate_size" in keys.data:
        dense_ffn = keys.int("intermediate_size")
    elif (hidden, layers, routed, expert_ffn) == (7168, 61, 256, 2048):
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
        shared_expert_ffn=expert_ffn, weight_dtype="float8", source=source)


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
    return model_from_dict(data, kind, name, path, source=path)


def default_model(kind: str, name: str | None = None) -> InferenceModel:
    """AICB's default config of ``kind``."""
    return model_from_dict(DEFAULT_CONFIGS[kind], kind, name, f"<built-in {CONFIG_FILES[kind]}>", _SOURCES[kind])


# ---- names --------------------------------------------------------------------------------------------

def _key(name: str) -> str:
    return re.sub(r"[^0-9a-z]", "", name.lower())


_ALIASES = {_key(n): kind for kind, n in AICB_NAMES.items()}
_ALIASES.update({_key(size): kind for size, kind in SCRIPT_SIZES.items()})
_ALIASES.update({_key(n): "qwen3_next" for n in ("qwen3_next", "qwen3_next_80B", "Qwen3-Next-80B-A3B")})
_PRESETS = {"deepseek_v3": "deepseek", "deepseek_v2": "deepseek", "deepseek_v2_lite": "deepseek",
            "qwen3_235B_A22B": "qwen3_moe", "qwen3_30B_A3B": "qwen3_moe"}
"""Our presets (utils.presets) that inference can use, and their kind."""
_DEFAULT_PRESETS = {"deepseek": "deepseek_v3", "qwen3_moe": "qwen3_235B_A22B"}


def known_models() -> str:
    return (f"{', '.join(AICB_NAMES.values())} (AICB's names), {', '.join(SCRIPT_SIZES)} (its script's -m), "
            f"or the presets {', '.join(_PRESETS)}")


def model_kind(name: str) -> tuple[str, str | None]:
    """``(kind, preset or None)`` for a model name.  Raises :class:`ConfigError` for an unknown name."""
    from utils.presets import find_preset

    key = _key(name)
    if key in _ALIASES:
        return _ALIASES[key], None
    preset = find_preset(name)
    if preset is not None and preset.name in _PRESETS:
        return _PRESETS[preset.name], preset.name
    # AICB's rule: the kind is the first of these found in the name
    for marker, kind in (("qwen3moe", "qwen3_moe"), ("qwen3next", "qwen3_next"), ("deepseek", "deepseek")):
        if marker in key:
            return kind, None
    raise ConfigError(f"unknown model {name!r}; known: {known_models()}")


def _from_preset(preset_name: str, name: str) -> InferenceModel:
    from utils.presets import get_preset

    m = get_preset(preset_name)
    common = dict(name=name, num_layers=m.num_layers, hidden_size=m.hidden_size, num_heads=m.num_attention_heads,
                  vocab_size=m.vocab_size, dense_layer_ids=tuple(range(m.n_dense_layers)), dense_ffn=m.ffn_hidden_size,
                  routed_experts=m.num_experts or 1, topk=m.moe_router_topk, expert_ffn=m.moe_ffn_hidden_size or 1,
                  shared_experts=m.n_shared_experts, shared_expert_ffn=m.moe_ffn_hidden_size or 0,
                  tied_embeddings=not m.untie_embeddings_and_output_weights, source=f"preset {m.name}: {m.source}")
    if m.multi_latent_attention:
        return InferenceModel(kind="deepseek", attention="mla", q_lora_rank=m.q_lora_rank, kv_lora_rank=m.kv_lora_rank,
                              qk_rope_dim=m.qk_pos_emb_head_dim, qk_nope_dim=m.qk_head_dim, v_head_dim=m.v_head_dim,
                              weight_dtype="float8" if m.name == "deepseek_v3" else "bfloat16", **common)
    return InferenceModel(kind="qwen3_moe", attention="gqa", head_dim=m.kv_channels, num_kv_heads=m.query_groups,
                          qk_norm=m.qk_layernorm, **common)


def resolve_model(name: str, config: str | os.PathLike | None = None) -> InferenceModel:
    """The model called ``name``, from ``config`` (an AICB JSON file) when given, else from AICB's
    default config of its kind or the preset it names."""
    kind, preset = model_kind(name)
    if config:
        return load_config(config, kind, name)
    if preset is not None:
        return _from_preset(preset, name)
    return default_model(kind, name)


def default_config_path(kind: str, root: str | os.PathLike | None = None) -> str:
    """Where AICB keeps the default config of ``kind`` (``scripts/inference_configs/...``)."""
    base = root if root is not None else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(os.fspath(base), "scripts", "inference_configs", CONFIG_FILES[kind])

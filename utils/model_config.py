"""The model architecture: :class:`ModelConfig`, independent of how it is parallelised.

Its own checks (positive sizes, known norms and position embeddings) run at construction; the rules
that tie it to a parallel layout are :meth:`utils.parallel.ParallelConfig.check_model`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from utils.errors import ConfigError

NORMALIZATIONS = ("LayerNorm", "RMSNorm")
POSITION_EMBEDDINGS = ("learned_absolute", "rope", "none")


@dataclass(frozen=True)
class ModelConfig:
    """A transformer architecture, independent of how it is parallelised.

    Dimensions follow Megatron-LM's argument names.  ``ffn_hidden_size=None`` resolves as Megatron
    does: ``4 * hidden``, or ``int(4 * hidden * 2 / 3 / 64) * 64`` with SwiGLU.  MoE fields apply when
    ``num_experts > 1``; ``n_dense_layers`` leading layers keep a dense MLP.  Multi-latent attention
    (DeepSeek) uses the ``q_lora_rank`` .. ``v_head_dim`` fields.  ``published_params`` is the
    model's total parameter count as its paper or model card gives it (for checks), with its
    ``source``.
    """

    name: str = "custom"
    hidden_size: int = 1024
    num_layers: int = 24
    num_attention_heads: int = 16
    num_query_groups: int | None = None
    kv_channels_given: int | None = None
    ffn_hidden_size: int | None = None
    vocab_size: int = 32000
    max_position_embeddings: int = 4096
    swiglu: bool = False
    normalization: str = "LayerNorm"
    add_bias_linear: bool = False
    add_qkv_bias: bool = False
    qk_layernorm: bool = False
    position_embedding_type: str = "learned_absolute"
    untie_embeddings_and_output_weights: bool = False
    # Megatron's --attention-dropout and --hidden-dropout (its defaults: 0.1 each; Llama-style recipes 0)
    attention_dropout: float = 0.1
    hidden_dropout: float = 0.1
    # MoE
    num_experts: int | None = None
    moe_router_topk: int = 2
    moe_ffn_hidden_size: int | None = None
    n_shared_experts: int = 0
    n_dense_layers: int = 0
    # Megatron-core's --moe-router-score-function: softmax (Mixtral, Qwen) or sigmoid (DeepSeek-V3)
    moe_router_score_function: str = "softmax"
    # DeepSeek-V3's node-limited routing (--moe-router-num-groups / --moe-router-group-topk) and its
    # auxiliary-loss-free expert bias (--moe-router-enable-expert-bias): extra router kernels, no comm
    moe_router_num_groups: int | None = None
    moe_router_group_topk: int | None = None
    moe_router_enable_expert_bias: bool = False
    # DeepSeek-V3's multi-token prediction (--mtp-num-layers): extra transformer layers on the last stage
    mtp_num_layers: int = 0
    # sliding-window attention (--window-size LEFT,RIGHT; -1 unbounded), on every layer or, with
    # --window-attn-skip-freq N, with every N-th layer full (GPT-OSS alternates: N = 2)
    window_size: tuple[int, int] | None = None
    window_attn_skip_freq: int | None = None
    # Multi-latent attention (DeepSeek-V2/V3)
    multi_latent_attention: bool = False
    q_lora_rank: int | None = None
    kv_lora_rank: int = 512
    qk_head_dim: int = 128
    qk_pos_emb_head_dim: int = 64
    v_head_dim: int = 128
    published_params: float | None = None
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_layers", "num_attention_heads", "vocab_size", "max_position_embeddings"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"--{name} must be a positive integer, got {value!r}")
        for name in ("num_query_groups", "kv_channels_given", "ffn_hidden_size", "moe_ffn_hidden_size",
                     "q_lora_rank"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                flag = "kv_channels" if name == "kv_channels_given" else name
                raise ConfigError(f"--{flag} must be a positive integer, got {value!r}")
        for name in ("attention_dropout", "hidden_dropout"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ConfigError(f"--{name} must be a probability in [0, 1), got {value!r}")
        if self.normalization not in NORMALIZATIONS:
            raise ConfigError(f"--normalization {self.normalization!r} is not one of {', '.join(NORMALIZATIONS)}")
        if self.position_embedding_type not in POSITION_EMBEDDINGS:
            raise ConfigError(f"--position_embedding_type {self.position_embedding_type!r} is not one of "
                              f"{', '.join(POSITION_EMBEDDINGS)}")
        if self.ffn_hidden_size is None:
            h = self.hidden_size
            ffn = int((4 * h * 2 / 3) / 64) * 64 if self.swiglu else 4 * h
            object.__setattr__(self, "ffn_hidden_size", ffn)
        if self.num_experts is not None and self.num_experts < 1:
            raise ConfigError(f"--num_experts must be a positive integer, got {self.num_experts!r}")
        if self.moe_router_score_function not in ("softmax", "sigmoid"):
            raise ConfigError(f"--moe_router_score_function {self.moe_router_score_function!r} is not softmax or sigmoid")
        if not isinstance(self.mtp_num_layers, int) or self.mtp_num_layers < 0:
            raise ConfigError(f"--mtp_num_layers must be a whole number >= 0, got {self.mtp_num_layers!r}")
        if self.window_size is not None:
            left, right = self.window_size
            if left < -1 or right < -1 or (left, right) == (-1, -1):
                raise ConfigError(f"--window_size {left},{right}: each side is a number of tokens >= 0, or -1 for "
                                  "unbounded (not both)")
        if self.window_attn_skip_freq is not None and self.window_attn_skip_freq < 1:
            raise ConfigError(f"--window_attn_skip_freq must be a positive integer, got {self.window_attn_skip_freq}")
        if self.is_moe:
            if self.moe_router_topk < 1:
                raise ConfigError(f"--moe_router_topk must be a positive integer, got {self.moe_router_topk!r}")
            if self.moe_ffn_hidden_size is None:
                object.__setattr__(self, "moe_ffn_hidden_size", self.ffn_hidden_size)
            if not 0 <= self.n_dense_layers <= self.num_layers:
                raise ConfigError(f"--n_dense_layers {self.n_dense_layers} is outside 0..--num_layers {self.num_layers}")
            if self.n_shared_experts < 0:
                raise ConfigError(f"--n_shared_expert must not be negative, got {self.n_shared_experts}")

    @property
    def query_groups(self) -> int:
        """Key/value head groups (grouped-query attention); equals the head count without GQA."""
        return self.num_query_groups or self.num_attention_heads

    @property
    def kv_channels(self) -> int:
        """Size of one attention head (Megatron's ``kv_channels``)."""
        return self.kv_channels_given or self.hidden_size // self.num_attention_heads

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None and self.num_experts > 1

    def is_moe_layer(self, layer: int) -> bool:
        """Whether global transformer layer ``layer`` (0-based) has an MoE MLP."""
        return self.is_moe and layer >= self.n_dense_layers

    def attention_window(self, layer: int) -> int | None:
        """The left window in tokens of global transformer layer ``layer`` (0-based) under ``--window_size``, or None
        when it attends to the whole (causal) past: Megatron-core's ``is_layer_window_attention`` (1-based layer
        numbers; with ``--window_attn_skip_freq N`` every N-th layer is full).  GPT training's mask is causal, so the
        right side of the window adds nothing (Transformer Engine: a causal mask forces it to 0); an unbounded left
        side (-1) is full attention."""
        if self.window_size is None or self.window_size[0] < 0:
            return None
        if self.window_attn_skip_freq is not None and (layer + 1) % self.window_attn_skip_freq == 0:
            return None
        return self.window_size[0]

    def with_changes(self, **changes: Any) -> ModelConfig:
        return replace(self, **changes)

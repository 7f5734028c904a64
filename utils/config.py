"""Configuration dataclasses: the model architecture, the training options, and the job that
combines them with a :class:`~utils.parallel.ParallelConfig`.

A :class:`JobConfig` is what every producer of a workload takes and what a :class:`Workload`
carries as its ``config``; constructing one validates the whole combination.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from utils.errors import ConfigError
from utils.parallel import ParallelConfig
from utils.units import DTYPE_BYTES

NORMALIZATIONS = ("LayerNorm", "RMSNorm")
POSITION_EMBEDDINGS = ("learned_absolute", "rope", "none")
FRAMES = ("Megatron", "DeepSpeed", "DeepSeek", "collective_test")
RECOMPUTE = ("none", "selective", "full")
DISPATCHERS = ("alltoall", "allgather")


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
    # MoE
    num_experts: int | None = None
    moe_router_topk: int = 2
    moe_ffn_hidden_size: int | None = None
    n_shared_experts: int = 0
    n_dense_layers: int = 0
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

    def with_changes(self, **changes: Any) -> ModelConfig:
        return replace(self, **changes)


@dataclass(frozen=True)
class TrainingConfig:
    """Options of the training step that shape its communication (Megatron/AICB flag names)."""

    frame: str = "Megatron"
    seq_length: int = 2048
    dtype: str = "bfloat16"
    epoch_num: int = 1
    use_distributed_optimizer: bool = False
    make_vocab_size_divisible_by: int = 128
    recompute: str = "none"
    ddp_bucket_size: int | None = None
    overlap_grad_reduce: bool = False
    use_flash_attn: bool = False
    computation_enable: bool = False
    aiob_enable: bool = False
    comp_filepath: str | None = None
    gpu_type: str | None = None
    moe_token_dispatcher_type: str = "alltoall"
    moe_routing_skew: float = 0.0
    moe_expert_capacity_factor: float | None = None
    moe_pad_expert_input_to_capacity: bool = False
    moe_grouped_gemm: bool = False
    moe_fp8_dispatch: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.frame not in FRAMES:
            raise ConfigError(f"--frame {self.frame!r} is not one of {', '.join(FRAMES)}")
        if not isinstance(self.seq_length, int) or self.seq_length < 1:
            raise ConfigError(f"--seq_length must be a positive integer, got {self.seq_length!r}")
        if self.dtype.lower() not in DTYPE_BYTES:
            raise ConfigError(f"--dtype {self.dtype!r} is not one of bfloat16, float16, float32")
        if not isinstance(self.epoch_num, int) or self.epoch_num < 1:
            raise ConfigError(f"--epoch_num must be a positive integer, got {self.epoch_num!r}")
        if self.make_vocab_size_divisible_by < 1:
            raise ConfigError(f"--make_vocab_size_divisible_by must be positive, got {self.make_vocab_size_divisible_by}")
        if self.recompute not in RECOMPUTE:
            raise ConfigError(f"recompute mode {self.recompute!r} is not one of {', '.join(RECOMPUTE)}")
        if self.moe_token_dispatcher_type not in DISPATCHERS:
            raise ConfigError(f"--moe_token_dispatcher_type {self.moe_token_dispatcher_type!r} is not one of "
                              f"{', '.join(DISPATCHERS)}")
        if not 0 <= self.moe_routing_skew <= 8:
            raise ConfigError(f"--moe_routing_skew must be between 0 (balanced) and 8, got {self.moe_routing_skew}")
        if self.moe_expert_capacity_factor is not None and self.moe_expert_capacity_factor <= 0:
            raise ConfigError(f"--moe_expert_capacity_factor must be positive, got {self.moe_expert_capacity_factor}")
        if self.moe_pad_expert_input_to_capacity and self.moe_expert_capacity_factor is None:
            raise ConfigError("--moe_pad_expert_input_to_capacity needs --moe_expert_capacity_factor")
        if self.moe_grouped_gemm and self.dtype.lower() not in ("bfloat16", "bf16"):
            raise ConfigError(f"--moe_grouped_gemm needs --dtype bfloat16, got {self.dtype}")
        if self.ddp_bucket_size is not None and self.ddp_bucket_size < 1:
            raise ConfigError(f"--ddp_bucket_size must be a positive number of elements, got {self.ddp_bucket_size}")

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype.lower()]


@dataclass(frozen=True)
class JobConfig:
    """Model + parallel layout + training options, validated together at construction."""

    model: ModelConfig
    parallel: ParallelConfig
    training: TrainingConfig = field(default_factory=TrainingConfig)

    def __post_init__(self) -> None:
        if self.training.frame != "collective_test":
            self.parallel.check_model(self.model, self.training.seq_length, self.training.dtype)

    @property
    def padded_vocab_size(self) -> int:
        """Vocabulary padded to a multiple of ``make_vocab_size_divisible_by * tp`` (Megatron's
        ``_vocab_size_with_padding``)."""
        multiple = self.training.make_vocab_size_divisible_by * self.parallel.tp
        return -(-self.model.vocab_size // multiple) * multiple

    @property
    def stage_layers(self) -> list[int]:
        """Transformer layers on each pipeline stage."""
        return self.parallel.stage_layers(self.model.num_layers)

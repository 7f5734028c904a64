"""Configuration dataclasses: the training options, and the job that combines them with a
:class:`~utils.model_config.ModelConfig` and a :class:`~utils.parallel.ParallelConfig`.

A :class:`JobConfig` is what every producer of a workload takes and what a :class:`Workload`
carries as its ``config``; constructing one validates the whole combination.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from utils.errors import ConfigError
from utils.model_config import ModelConfig
from utils.parallel import ParallelConfig
from utils.units import DTYPE_BYTES

FRAMES = ("Megatron", "DeepSpeed", "DeepSeek", "collective_test", "Inference")
"""``Inference`` is aicb.py's: its job (workload_generator.inference_entry) rides in ``extra``."""
RECOMPUTE = ("none", "selective", "full")
DISPATCHERS = ("alltoall", "allgather")


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
    gradient_accumulation_fusion: bool = True
    accumulate_allreduce_grads_in_fp32: bool = False
    scatter_gather_tensors_in_pipeline: bool = False
    tp_comm_overlap: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.frame not in FRAMES:
            raise ConfigError(f"--frame {self.frame!r} is not one of {', '.join(FRAMES)}")
        if not isinstance(self.seq_length, int) or self.seq_length < 1:
            raise ConfigError(f"--seq_length must be a positive integer, got {self.seq_length!r}")
        if self.dtype.lower() not in DTYPE_BYTES:
            raise ConfigError(f"--dtype {self.dtype!r} is not one of bfloat16, float16, float32, float8")
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
    def fp8(self) -> bool:
        """FP8 training as Transformer Engine does it (``--dtype float8``): FP8 GEMM inputs, bf16 activations."""
        return DTYPE_BYTES[self.dtype.lower()] == 1

    @property
    def dtype_bytes(self) -> int:
        """Bytes of one activation, parameter or activation gradient element as it is stored and communicated:
        2 under FP8 training (Transformer Engine keeps activations, TP and p2p traffic and the model's
        parameters in bf16; only GEMM inputs are cast to FP8)."""
        return 2 if self.fp8 else DTYPE_BYTES[self.dtype.lower()]

    @property
    def grad_bytes(self) -> int:
        """Bytes per element of Megatron's main-gradient buffers (accumulation, DP reduction, optimizer input):
        fp32, except fp16 training, which keeps fp16 gradients unless ``--accumulate_allreduce_grads_in_fp32``
        (Megatron's ``arguments.py`` forces fp32 accumulation with bf16, and so with FP8 on bf16)."""
        if self.dtype.lower() in ("float16", "fp16", "half") and not self.accumulate_allreduce_grads_in_fp32:
            return 2
        return 4

    @property
    def loss_scaling(self) -> bool:
        """fp16 training scales the loss and checks the gradients for overflow every step."""
        return self.dtype.lower() in ("float16", "fp16", "half")


@dataclass(frozen=True)
class JobConfig:
    """Model + parallel layout + training options, validated together at construction."""

    model: ModelConfig
    parallel: ParallelConfig
    training: TrainingConfig = field(default_factory=TrainingConfig)

    def __post_init__(self) -> None:
        if self.training.frame not in ("collective_test", "Inference"):  # an InferenceJob checks its own
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

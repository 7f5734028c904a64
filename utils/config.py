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
DISPATCHERS = ("alltoall", "allgather", "flex")
"""Megatron-core's token dispatchers (``flex``: DeepEP's fused dispatch and combine, ``--moe_enable_deepep``)."""
CP_COMM_TYPES = ("p2p", "a2a", "allgather", "a2a+p2p")
"""Megatron-core's ``--cp-comm-type``: ring attention (p2p), DeepSpeed-Ulysses all-to-all (a2a), all-gathered keys
and values (allgather), or a2a inside ``--hierarchical_context_parallel_sizes``' first level and p2p across."""
LOAD_BALANCING = ("aux_loss", "seq_aux_loss", "sinkhorn", "none")
"""Megatron-core's ``--moe-router-load-balancing-type``."""
TRANSFORMER_IMPLS = ("transformer_engine", "local")
"""Megatron-LM's ``--transformer-impl``: Transformer Engine's modules (its default) or Megatron-core's local ones."""
ATTENTION_BACKENDS = ("auto", "flash", "fused", "unfused", "local")
"""Megatron-LM's ``--attention-backend`` (``AttnBackend``): under Transformer Engine, ``auto`` picks cuDNN's fused or
the flash kernel, ``unfused`` is TE's materialised attention; ``local`` is Megatron-core's own ``DotProductAttention``."""
CUDA_GRAPH_IMPLS = ("none", "local", "transformer_engine", "full_iteration")
"""Megatron-LM's ``--cuda-graph-impl``: no CUDA graphs, per-layer graphs (Megatron's or Transformer Engine's
capture), or the whole forward-backward as one graph."""
FP8_RECIPES = ("delayed", "tensorwise", "mxfp8", "blockwise")
"""Megatron-LM's ``--fp8-recipe``: delayed scaling (amax history), current per-tensor scaling, MXFP8 (1x32 block
scales, Blackwell) and DeepSeek-style 1x128 / 128x128 blocks."""


@dataclass(frozen=True)
class KernelStack:
    """Which kernels a Megatron training step launches: the software stack as the compute model and AIOB see it.

    - ``te``: Transformer Engine's modules (``--transformer_impl transformer_engine``): LayerNorm fused into the
      following linear (``TELayerNormColumnParallelLinear``), TE's attention, FP8 casts fused into its norms;
    - ``fused_extensions``: apex or Transformer Engine is installed, so Megatron uses their fused norms,
      multi-tensor optimizer kernels (fused Adam, ``multi_tensor_l2norm``/``scale``), its fused masked softmax and
      the gradient-accumulation fusion; without them (``--no_apex`` on the local path) Megatron-core falls back to
      torch norms, torch's AdamW, a host-synchronised norm per tensor and per-tensor copies;
    - ``flash``: a flash/fused attention kernel, else materialised attention; ``fused_softmax``: the materialised
      path's scale-mask-softmax in one kernel (else fp32 cast, mask, softmax, cast back);
    - ``rope_fused`` (TE's fused RoPE), ``bias_act_fused`` / ``bda_fused`` (Megatron's jit-fused bias-GeLU/SwiGLU
      and bias-dropout-add), ``ce_fused`` (``--cross_entropy_loss_fusion``), ``wgrad_accumulate`` (the weight
      gradient accumulated into the fp32 main gradient in the GEMM's epilogue).
    """

    te: bool = True
    fused_extensions: bool = True
    flash: bool = True
    fused_softmax: bool = True
    rope_fused: bool = True
    bias_act_fused: bool = True
    bda_fused: bool = True
    ce_fused: bool = False
    wgrad_accumulate: bool = True

    @property
    def name(self) -> str:
        """``te``, ``local`` (apex) or ``local-torch`` (no apex, no Transformer Engine)."""
        return "te" if self.te else ("local" if self.fused_extensions else "local-torch")


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
    async_tp_allreduce: bool = True
    transformer_impl: str = "transformer_engine"
    attention_backend: str = "auto"
    apex: bool = True
    masked_softmax_fusion: bool = True
    apply_rope_fusion: bool = True
    bias_activation_fusion: bool = True
    bias_dropout_fusion: bool = True
    cross_entropy_loss_fusion: bool = False
    fp8_recipe: str = "delayed"
    cuda_graph_impl: str = "none"
    cuda_graph_scope: tuple[str, ...] = ()
    """Megatron-core's ``--cuda-graph-scope`` (empty: whole layers; :mod:`utils.cuda_graphs` checks it)."""
    recompute_modules: tuple[str, ...] = ("core_attn",)
    """Megatron-core's ``--recompute-modules`` of selective recomputation (its default: the attention core)."""
    cp_comm_type: str = "p2p"
    hierarchical_cp_sizes: tuple[int, ...] | None = None
    overlap_param_gather: bool = False
    grad_reduce_in_bf16: bool = False
    moe_router_load_balancing_type: str = "aux_loss"
    moe_aux_loss_coeff: float = 0.0
    moe_z_loss_coeff: float | None = None
    moe_permute_fusion: bool = False
    moe_shared_expert_overlap: bool = False
    moe_imbalance: float = 1.0
    moe_enable_deepep: bool = False
    overlap_moe_expert_parallel_comm: bool = False
    delay_wgrad_compute: bool = False
    moe_router_dtype: str | None = None
    moe_router_fusion: bool = False
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
        if self.moe_grouped_gemm and self.dtype.lower() not in ("bfloat16", "bf16", "float8", "fp8"):
            raise ConfigError(f"--moe_grouped_gemm needs --dtype bfloat16 or float8 (Transformer Engine's grouped "
                              f"FP8 GEMMs), got {self.dtype}")
        if self.ddp_bucket_size is not None and self.ddp_bucket_size < 1:
            raise ConfigError(f"--ddp_bucket_size must be a positive number of elements, got {self.ddp_bucket_size}")
        if self.transformer_impl not in TRANSFORMER_IMPLS:
            raise ConfigError(f"--transformer_impl {self.transformer_impl!r} is not one of {', '.join(TRANSFORMER_IMPLS)}")
        if self.attention_backend not in ATTENTION_BACKENDS:
            raise ConfigError(f"--attention_backend {self.attention_backend!r} is not one of {', '.join(ATTENTION_BACKENDS)}")
        if self.cp_comm_type not in CP_COMM_TYPES:
            raise ConfigError(f"--cp_comm_type {self.cp_comm_type!r} is not one of {', '.join(CP_COMM_TYPES)}")
        if self.moe_router_load_balancing_type not in LOAD_BALANCING:
            raise ConfigError(f"--moe_router_load_balancing_type {self.moe_router_load_balancing_type!r} is not one of "
                              f"{', '.join(LOAD_BALANCING)}")
        if not self.moe_imbalance >= 1.0:  # also refuses NaN
            raise ConfigError(f"--moe_imbalance must be >= 1 (the busiest expert's tokens over the mean), got "
                              f"{self.moe_imbalance}")
        if self.moe_enable_deepep and self.moe_token_dispatcher_type != "flex":
            raise ConfigError("--moe_enable_deepep needs --moe_token_dispatcher_type flex (Megatron-core's)")
        if self.moe_token_dispatcher_type == "flex" and not self.moe_enable_deepep:
            raise ConfigError("--moe_token_dispatcher_type flex runs DeepEP: give --moe_enable_deepep")
        if self.overlap_param_gather and not self.use_distributed_optimizer:
            raise ConfigError("--overlap_param_gather needs --use-distributed-optimizer (Megatron's rule)")
        # --overlap_param_gather without --overlap_grad_reduce is accepted: Megatron-LM's arguments.py refuses the
        # pair's absence, but Megatron-core's DDP and distributed optimizer run it (one bucket per buffer, gathered
        # by the forward pre-hooks), and Megatron-Bridge's DeepSeek-V3 H100 recipe trains that way (run_script.py
        # sets comm_overlap.overlap_grad_reduce False over the recipe's overlap_param_gather True)
        if self.moe_router_dtype not in (None, "fp32", "fp64"):
            raise ConfigError(f"--moe_router_dtype {self.moe_router_dtype!r} is not fp32 or fp64 (Megatron's choices)")
        if self.delay_wgrad_compute and not self.overlap_moe_expert_parallel_comm:
            raise ConfigError("--delay_wgrad_compute needs --overlap_moe_expert_parallel_comm (Megatron's rule)")
        if self.cuda_graph_impl not in CUDA_GRAPH_IMPLS:
            raise ConfigError(f"--cuda_graph_impl {self.cuda_graph_impl!r} is not one of {', '.join(CUDA_GRAPH_IMPLS)}")
        if self.fp8_recipe not in FP8_RECIPES:
            raise ConfigError(f"--fp8_recipe {self.fp8_recipe!r} is not one of {', '.join(FP8_RECIPES)}")
        te = self.transformer_impl == "transformer_engine"
        if te and not self.apex:
            raise ConfigError("--no_apex describes Megatron-core's local path without apex or Transformer Engine; "
                              "--transformer_impl transformer_engine brings Transformer Engine's fused kernels "
                              "(use --transformer_impl local --no_apex)")
        if not te and self.attention_backend in ("fused", "unfused"):
            raise ConfigError(f"--attention_backend {self.attention_backend} selects a Transformer Engine attention; "
                              "--transformer_impl local runs Megatron-core's DotProductAttention (--attention_backend "
                              "local, or --use_flash_attn for the flash-attn package)")
        if self.fp8 and not te:
            raise ConfigError("--dtype float8 trains through Transformer Engine's FP8 GEMMs; it needs --transformer_impl "
                              "transformer_engine")

    @property
    def stack(self) -> KernelStack:
        """The kernels this job's software stack launches (:class:`KernelStack`), from ``--transformer_impl``,
        ``--attention_backend``, ``--use_flash_attn``, ``--no_apex`` and Megatron's fusion flags."""
        te = self.transformer_impl == "transformer_engine"
        if te:
            flash = self.attention_backend != "unfused"
        else:
            flash = self.use_flash_attn or self.attention_backend == "flash"
        return KernelStack(
            te=te, fused_extensions=self.apex, flash=flash,
            fused_softmax=self.masked_softmax_fusion and self.apex,
            rope_fused=self.apply_rope_fusion and te, bias_act_fused=self.bias_activation_fusion,
            bda_fused=self.bias_dropout_fusion, ce_fused=self.cross_entropy_loss_fusion,
            wgrad_accumulate=self.gradient_accumulation_fusion and self.apex)

    @property
    def flash_attention(self) -> bool:
        """Whether attention runs a flash/fused kernel (no ``s x s`` scores in memory)."""
        return self.stack.flash

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
        (Megatron's ``arguments.py`` forces fp32 accumulation with bf16, and so with FP8 on bf16), and
        ``--grad_reduce_in_bf16`` (Megatron's ``--grad-reduce-in-bf16``, ``grad_reduce_in_fp32=False``: DDP's
        buffers in the parameters' bf16)."""
        if self.grad_reduce_in_bf16:
            return 2
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
            sizes = self.training.hierarchical_cp_sizes
            if sizes and self.parallel.hierarchical_cp != tuple(sizes):  # one source: the layout holds the CP levels
                from dataclasses import replace

                object.__setattr__(self, "parallel", replace(self.parallel, hierarchical_cp=tuple(sizes)))
            from utils.pipeline_layout import embedding_stages

            stages = embedding_stages(self.model.untie_embeddings_and_output_weights, self.model.mtp_num_layers,
                                      self.parallel.pp, self.parallel.layout)
            if stages != self.parallel.embedding_stages:  # MTP ranks join the embedding group (pretrain_gpt.py)
                from dataclasses import replace

                object.__setattr__(self, "parallel", replace(self.parallel, embedding_stages=stages))
            self.parallel.check_model(self.model, self.training.seq_length, self.training.dtype)
            from utils.context_parallel import check_context_parallel

            check_context_parallel(self)
            from utils.moe_options import check_moe_options

            check_moe_options(self)
            from utils.cuda_graphs import check_graphs_and_recompute

            check_graphs_and_recompute(self)

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

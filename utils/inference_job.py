"""An inference job: a model, a phase, the batch and context, and the parallel layout, validated at
construction with messages that name AICB's flags.

Layout (as DeepSeek's and SGLang's deployments, and AICB 2.1's formulas, assume):

- ``world = tp x pp x dp``: each pipeline stage holds ``dp`` attention replicas of ``tp`` ranks
  (attention data parallelism when ``dp > 1``), each serving ``micro_batch`` sequences;
- the experts of a stage are spread over expert-parallel groups of ``ep`` consecutive ranks that span
  the attention TP ranks (expert tensor parallelism 1); ``ep`` divides the stage's ``tp x dp`` ranks
  and the physical expert count (routed plus redundant), and ``tp x dp / ep`` groups hold a copy each;
- before the dispatch each TP rank takes ``1/tp`` of its replica's tokens (AICB's ``// tp``).

Tokens of one step (``tokens``): ``micro_batch`` in decode (one new token per sequence, each attending
to a KV cache of ``seq_length``; ``micro_batch x (1 + K)`` when a speculative decode step verifies ``K``
draft tokens per sequence), ``seq_length x micro_batch`` in prefill (AICB 2.1 uses ``seq_length`` alone
there, ignoring the micro-batch: a defect we do not copy).

Experts split over TP ranks (``moe_tp``, ``--moe_tp``): SGLang's and vLLM's default MoE (SGLang without
``--enable-ep-moe`` / an ``--ep-size``, vLLM without ``--enable-expert-parallel``): every TP rank holds
``1/tp`` of every expert's FFN (and of the shared experts), runs the experts on all of its replica's
tokens and sums the partial outputs with an all-reduce over TP; no dispatch or combine.  We default to
expert parallelism (AICB's layout), so the switch names the other layout; Megatron's
``--expert_tensor_parallel_size`` would promise expert-TP x EP combinations no serving stack runs.

Precisions (``--dtype``, ``--kv_dtype``): weights ``bfloat16``, ``float8`` (block-scaled, 1 byte plus an
fp32 scale per 128 x 128 block) or ``float4`` (NVFP4: e2m1 values with an e4m3 scale per 16, 0.5 + 1/16
bytes per weight; Blackwell's FP4 tensor cores only); KV cache ``bfloat16`` or ``float8`` (1 byte per
value: half the cache per token, and half what a decode step's attention reads).

Host time (``host``): ``None`` leaves it out (AICB's and the SimAI files' steps); ``graphs`` replays a
captured CUDA graph; ``eager`` launches every kernel from Python (see
:func:`mocked_model.inference_host.host_ns`).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from utils.errors import ConfigError
from utils.inference_config import PHASES, InferenceModel

F_WORLD = "--world_size"
F_TP = "--tensor_model_parallel_size"
F_PP = "--pipeline_model_parallel"
F_EP = "--expert_model_parallel_size"
F_MBS = "--micro_batch"
F_SEQ = "--seq_length"
ROUTINGS = ("RoundRobin", "UniformRandom")
"""``--moe_routing_strategy`` values (AICB's names); ``--moe_routing_skew`` > 0 routes by a Zipf law."""
WEIGHT_DTYPES: dict[str, float] = {"float4": 0.5, "fp4": 0.5, "nvfp4": 0.5, "float8": 1, "fp8": 1, "bfloat16": 2,
                                   "bf16": 2, "float16": 2, "fp16": 2}
"""Bytes per weight value (FP4 before its scales, FP8 before its block scales)."""
KV_DTYPES = {"float8": 1, "fp8": 1, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2}
HOST_MODES = ("graphs", "eager")
NVFP4_GROUP = 16
"""Values per e4m3 scale of NVFP4 (NVIDIA's Blackwell FP4 format; MXFP4 scales 32 values with an e8m0)."""


def _positive(flag: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{flag} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class InferenceJob:
    """A validated inference job.  ``model_name`` is the name the user gave (AICB writes it into its
    file names); ``weight_dtype`` None means the model's own; ``dispatch_fp8`` sends the dispatch in
    FP8 (1 byte per value plus an fp32 scale per 128, DeepEP's format) and the combine in bf16."""

    model: InferenceModel
    phase: str = "decode"
    seq_length: int = 1024
    micro_batch: int = 32
    world_size: int = 8
    tp: int = 1
    pp: int = 1
    ep: int = 8
    pp_rank: int = 0
    weight_dtype: str | None = None
    kv_dtype: str = "bfloat16"
    dispatch_fp8: bool = True
    routing: str = "RoundRobin"
    routing_skew: float = 0.0
    seed: int = 0
    gpu_type: str | None = None
    epoch_num: int = 1
    model_name: str | None = None
    moe_tp: bool = False
    speculative_tokens: int = 0
    host: str | None = None

    def __post_init__(self) -> None:
        m = self.model
        if not m.is_moe and self.ep != 1:
            object.__setattr__(self, "ep", 1)   # a dense model has no experts to spread: EP means nothing
        if self.phase not in PHASES:
            raise ConfigError(f"--phase {self.phase!r} is not one of {', '.join(PHASES)}")
        for flag, value in ((F_SEQ, self.seq_length), (F_MBS, self.micro_batch), (F_WORLD, self.world_size),
                            (F_TP, self.tp), (F_PP, self.pp), (F_EP, self.ep), ("--epoch_num", self.epoch_num)):
            _positive(flag, value)
        if self.world_size % (self.tp * self.pp):
            raise ConfigError(f"{F_WORLD} {self.world_size} is not divisible by {F_TP} {self.tp} x {F_PP} {self.pp} "
                              f"= {self.tp * self.pp}")
        if not 0 <= self.pp_rank < self.pp:
            raise ConfigError(f"--pp_rank {self.pp_rank} is outside 0..{self.pp - 1} ({F_PP} {self.pp})")
        if self.pp > m.num_layers:
            raise ConfigError(f"{F_PP} {self.pp} exceeds the {m.num_layers} layers of {m.name}")
        if m.num_heads % self.tp:
            raise ConfigError(f"{F_TP} {self.tp} does not divide the {m.num_heads} attention heads of {m.name}")
        if m.attention == "gqa" and m.num_kv_heads % self.tp and self.tp % m.num_kv_heads:
            raise ConfigError(f"{F_TP} {self.tp} and the {m.num_kv_heads} key/value heads of {m.name} do not divide one "
                              "another (each rank needs whole key/value heads, or a replica of one)")
        if m.linear_value_heads:
            for what, heads in (("linear-attention key", m.linear_key_heads), ("linear-attention value",
                                                                             m.linear_value_heads)):
                if heads % self.tp:
                    raise ConfigError(f"{F_TP} {self.tp} does not divide the {heads} {what} heads of {m.name}")
        if m.dense_layer_ids and m.dense_ffn % self.tp:
            raise ConfigError(f"{F_TP} {self.tp} does not divide the dense FFN width {m.dense_ffn} of {m.name}")
        if self.moe_tp:
            if not m.is_moe:
                raise ConfigError(f"--moe_tp splits experts over TP ranks, but {m.name} has no experts")
            if self.ep != 1:
                raise ConfigError(f"--moe_tp splits every expert over the TP ranks: give {F_EP} 1, not {self.ep}")
            if self.dp != 1:
                raise ConfigError(f"--moe_tp with attention data parallelism ({F_WORLD} {self.world_size} = "
                                  f"{self.dp} x {F_TP} {self.tp} x {F_PP} {self.pp}) is not modelled: give {F_WORLD} "
                                  f"{self.tp * self.pp}")
            for what, width in (("expert FFN", m.expert_ffn), ("shared-expert FFN", m.shared_expert_ffn)):
                if width % self.tp:
                    raise ConfigError(f"--moe_tp: {F_TP} {self.tp} does not divide the {what} width {width} of {m.name}")
        if not isinstance(self.speculative_tokens, int) or isinstance(self.speculative_tokens, bool) \
                or self.speculative_tokens < 0:
            raise ConfigError(f"--speculative_tokens must be a whole number >= 0, got {self.speculative_tokens!r}")
        if self.host is not None and self.host not in HOST_MODES:
            raise ConfigError(f"host mode {self.host!r} is not one of {', '.join(HOST_MODES)}")
        stage = self.tp * self.dp
        if stage % self.ep:
            raise ConfigError(f"{F_EP} {self.ep} does not divide the {stage} ranks of a pipeline stage ({F_WORLD} "
                              f"{self.world_size} / {F_PP} {self.pp})")
        if m.num_experts % self.ep:
            extra = f" ({m.routed_experts} routed + {m.redundant_experts} redundant)" if m.redundant_experts else ""
            raise ConfigError(f"{F_EP} {self.ep} does not divide the {m.num_experts} experts{extra} of {m.name}")
        if self.weight_dtype is not None and self.weight_dtype.lower() not in WEIGHT_DTYPES:
            raise ConfigError(f"--dtype {self.weight_dtype!r} is not one of float4, float8, bfloat16, float16")
        if self.kv_dtype.lower() not in KV_DTYPES:
            raise ConfigError(f"--kv_dtype {self.kv_dtype!r} is not one of bfloat16, float16, float8")
        if self.routing not in ROUTINGS:
            raise ConfigError(f"--moe_routing_strategy {self.routing!r} is not one of {', '.join(ROUTINGS)}")
        if not 0 <= self.routing_skew <= 8:  # as training's (utils/config.py): past ~1074, (e + 1)^-s underflows to 0
            raise ConfigError(f"--moe_routing_skew must be between 0 (balanced) and 8, got {self.routing_skew!r}")

    # ---- derived sizes -------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The model name as the user gave it (file names), else the model's."""
        return self.model_name or self.model.name

    @property
    def dp(self) -> int:
        """Attention replicas per pipeline stage (``world / (tp x pp)``)."""
        return self.world_size // (self.tp * self.pp)

    @property
    def stage_ranks(self) -> int:
        return self.tp * self.dp

    @property
    def expert_replicas(self) -> int:
        """Copies of each stage's experts (expert-parallel groups per stage)."""
        return self.stage_ranks // self.ep

    @property
    def local_experts(self) -> int:
        return self.model.num_experts // self.ep

    @property
    def decode(self) -> bool:
        return self.phase == "decode"

    @property
    def tokens(self) -> int:
        """Tokens one attention replica processes in the step: ``micro_batch`` (decode) or
        ``seq_length x micro_batch`` (prefill)."""
        return self.micro_batch * self.tokens_per_sequence if self.decode else self.seq_length * self.micro_batch

    @property
    def tokens_per_sequence(self) -> int:
        """New tokens each sequence runs through the model in a decode step: 1, or ``1 + K`` when the step
        verifies ``K`` speculative tokens (Leviathan et al. 2023, 'Fast Inference from Transformers via
        Speculative Decoding', section 2.3: the target model scores the draft's ``K`` guesses and the
        position after them in one pass)."""
        return 1 + self.speculative_tokens

    @property
    def rank_tokens(self) -> float:
        """Tokens each TP rank routes (``tokens / tp``; AICB divides the bytes by tp)."""
        return self.tokens / self.tp

    @property
    def context(self) -> int:
        """Key/value positions each new token attends to: the cached ``seq_length`` in decode, the
        prompt in prefill (causal)."""
        return self.seq_length

    @property
    def weight_bytes(self) -> float:
        """Bytes per weight value of the linear layers (0.5 for FP4, before the scales)."""
        return WEIGHT_DTYPES[(self.weight_dtype or self.model.weight_dtype).lower()]

    @property
    def weight_kind(self) -> str:
        """``fp4``, ``fp8`` or ``bf16``: the kind of the linear layers' GEMMs."""
        return {0.5: "fp4", 1: "fp8"}.get(self.weight_bytes, "bf16")

    @property
    def kv_bytes(self) -> int:
        return KV_DTYPES[self.kv_dtype.lower()]

    @property
    def tokens_per_step(self) -> int:
        """New tokens the whole job produces per step (every replica of a stage; decode), or prompt
        tokens it processes (prefill)."""
        return self.tokens * self.dp

    def stage_layers(self) -> list[tuple[int, int]]:
        """``(first layer, count)`` of every pipeline stage: an even split, the first
        ``num_layers % pp`` stages taking one layer more."""
        n, pp = self.model.num_layers, self.pp
        counts = [n // pp + (1 if s < n % pp else 0) for s in range(pp)]
        out, first = [], 0
        for count in counts:
            out.append((first, count))
            first += count
        return out

    def file_stem(self) -> str:
        """AICB's name: ``{model}-world_size{W}-tp{T}-pp{P}-ep{E}-bs{B}-seq{S}-{phase}``."""
        return (f"{self.name}-world_size{self.world_size}-tp{self.tp}-pp{self.pp}-ep{self.ep}-bs{self.micro_batch}"
                f"-seq{self.seq_length}-{self.phase}").replace("/", "_")

    def balanced_a2a_bytes(self) -> tuple[int, int]:
        """AICB's dispatch and combine bytes per rank and MoE layer: combine = 2 x tokens x hidden x topk
        // tp (bf16), dispatch = int(combine x (1 + 4/128) / 2) in FP8 (else the combine's size)."""
        combine = 2 * self.tokens * self.model.hidden_size * self.model.topk // self.tp
        dispatch = int(combine * FP8_FACTOR) if self.dispatch_fp8 else combine
        return dispatch, combine

    def tp_allreduce_bytes(self) -> int:
        """The TP all-reduce after attention and a dense MLP: ``2 x tokens x hidden`` (bf16)."""
        return 2 * self.tokens * self.model.hidden_size

    def pp_bytes(self) -> int:
        """One activation sent between pipeline stages: ``2 x tokens x hidden`` (bf16), 0 with pp 1."""
        return 2 * self.tokens * self.model.hidden_size if self.pp > 1 else 0

    def lm_tokens(self) -> int:
        """Tokens whose logits the step computes: one per sequence (prefill keeps the last prompt token), every
        verified position of a speculative decode step."""
        return self.micro_batch * (self.tokens_per_sequence if self.decode else 1)

    def padded_vocab(self) -> int:
        return ceil(self.model.vocab_size / self.tp) * self.tp


FP8_FACTOR = (1 + 4 / 128) / 2
"""Bytes of an FP8 token (1 byte per value plus an fp32 scale per 128 values) over its bf16 bytes
(DeepEP's ``tests/test_internode.py``; AICB's ``FP8_FACTOR``)."""

"""The parallel layout of a training job and every rule that makes one possible.

All layout validation lives here, at construction, and every message names the flags (AICB's
spelling) and the numbers, so a user can fix the command line from the message alone.
Megatron-LM's own checks (``megatron/training/arguments.py``) are the reference for the rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from utils.errors import ConfigError
from utils.pipeline_layout import FLAG as F_LAYOUT
from utils.pipeline_layout import PipelineLayout, parse_layout
from utils.rank_generator import RankGenerator

if TYPE_CHECKING:
    from collections.abc import Sequence

    from utils.model_config import ModelConfig

# Flag names as AICB spells them; used in every message.
F_WORLD = "--world_size"
F_TP = "--tensor_model_parallel_size"
F_PP = "--pipeline_model_parallel"
F_CP = "--context-parallel-size"
F_EP = "--expert_model_parallel_size"
F_ETP = "--expert_tensor_parallel_size"
F_SP = "--enable_sequence_parallel"
F_MBS = "--micro_batch"
F_GBS = "--global_batch"
F_VPP = "--num_layers_per_virtual_pipeline_stage"
F_PP_RANK = "--pp_rank"
F_FIRST = "--decoder_first_pipeline_num_layers"
F_LAST = "--decoder_last_pipeline_num_layers"
F_VSTAGES = "--num_virtual_stages_per_pipeline_rank"
F_EMB_SPLIT = "--account_for_embedding_in_pipeline_split"
F_LOSS_SPLIT = "--account_for_loss_in_pipeline_split"
ORDERS = ("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp")
"""Rank orders Megatron-LM builds its groups in: the default, and ``--use-tp-pp-dp-mapping``'s (pipeline
stages of a replica on neighbouring ranks, data-parallel peers far apart)."""


def _positive(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class ParallelConfig:
    """A validated parallel layout.

    ``dp`` (data-parallel size) and ``ga`` (micro-batches per iteration, Megatron's
    ``num_microbatches``) are derived: ``dp = world / (tp * pp * cp)``,
    ``ga = global_batch / (micro_batch * dp)``.  ``global_batch=None`` means ``micro_batch * dp``.
    ``etp`` is the expert tensor-parallel size (``None``: the same as ``tp``).  With ``tp == 1``
    sequence parallelism has no effect, as in Megatron (``sequence_parallel`` reads False).

    Pipeline layout (Megatron core 0.12's ``get_num_layers_to_build`` / ``get_transformer_layer_offset``,
    see :meth:`virtual_stage_layers`): ``vpp_layers`` (``--num_layers_per_virtual_pipeline_stage``) or
    ``virtual_stages`` (``--num_virtual_stages_per_pipeline_rank``) interleave; ``first_stage_layers`` /
    ``last_stage_layers`` make the first / last stage uneven; ``embedding_in_split`` / ``loss_in_split``
    count the embedding / the loss as one layer of the split (``--account_for_*_in_pipeline_split``).
    """

    world_size: int
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    sequence_parallel: bool = False
    micro_batch: int = 1
    global_batch: int | None = None
    vpp_layers: int | None = None
    pp_rank: int = 0
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    virtual_stages: int | None = None
    embedding_in_split: bool = False
    loss_in_split: bool = False
    order: str = "tp-cp-ep-dp-pp"
    pipeline_layout: str | None = None
    hierarchical_cp: tuple[int, ...] | None = None
    embedding_stages: tuple[int, ...] | None = None
    dp: int = field(init=False)
    ga: int = field(init=False)

    def __post_init__(self) -> None:
        for name, value in ((F_WORLD, self.world_size), (F_TP, self.tp), (F_PP, self.pp), (F_CP, self.cp),
                            (F_EP, self.ep), (F_MBS, self.micro_batch)):
            _positive(name, value)
        if self.etp is not None:
            _positive(F_ETP, self.etp)
        model_parallel = self.tp * self.pp * self.cp
        if self.world_size % model_parallel:
            raise ConfigError(
                f"{F_WORLD} {self.world_size} is not divisible by {F_TP} {self.tp} x {F_PP} {self.pp} x "
                f"{F_CP} {self.cp} = {model_parallel}")
        dp = self.world_size // model_parallel
        object.__setattr__(self, "dp", dp)
        if self.expert_tp == self.tp and dp % self.ep:
            raise ConfigError(
                f"{F_EP} {self.ep} does not divide the data-parallel size {dp} "
                f"({F_WORLD} {self.world_size} / ({F_TP} {self.tp} x {F_PP} {self.pp} x {F_CP} {self.cp}))")
        etp = self.expert_tp
        expert_pool = self.tp * self.cp * dp
        if expert_pool % (etp * self.ep):
            raise ConfigError(
                f"{F_ETP} {etp} x {F_EP} {self.ep} = {etp * self.ep} does not divide the {expert_pool} ranks of a "
                f"pipeline stage ({F_TP} {self.tp} x {F_CP} {self.cp} x data-parallel {dp})")
        global_batch = self.global_batch if self.global_batch is not None else self.micro_batch * dp
        _positive(F_GBS, global_batch)
        if global_batch % (self.micro_batch * dp):
            raise ConfigError(
                f"{F_GBS} {global_batch} is not divisible by {F_MBS} {self.micro_batch} x data-parallel size {dp} "
                f"= {self.micro_batch * dp}")
        object.__setattr__(self, "global_batch", global_batch)
        object.__setattr__(self, "ga", global_batch // (self.micro_batch * dp))
        if not 0 <= self.pp_rank < self.pp:
            raise ConfigError(f"{F_PP_RANK} {self.pp_rank} is outside 0..{self.pp - 1} ({F_PP} {self.pp})")
        if self.vpp_layers is not None and self.virtual_stages is not None:
            raise ConfigError(f"give {F_VPP} or {F_VSTAGES}, not both")
        for name, value in ((F_VPP, self.vpp_layers), (F_VSTAGES, self.virtual_stages)):
            if value is None:
                continue
            _positive(name, value)
            if self.pp < 2:
                raise ConfigError(f"{name} needs pipeline parallelism ({F_PP} > 1), got {F_PP} {self.pp}")
            if self.ga % self.pp:
                raise ConfigError(
                    f"the interleaved schedule ({name}) needs the number of micro-batches {self.ga} "
                    f"({F_GBS} {global_batch} / ({F_MBS} {self.micro_batch} x data-parallel {dp})) "
                    f"to be a multiple of {F_PP} {self.pp}")
        for name, value in ((F_EMB_SPLIT, self.embedding_in_split), (F_LOSS_SPLIT, self.loss_in_split)):
            if value and self.pp < 2:
                raise ConfigError(f"{name} needs pipeline parallelism ({F_PP} > 1), got {F_PP} {self.pp}")
        for name, value in ((F_FIRST, self.first_stage_layers), (F_LAST, self.last_stage_layers)):
            if value is not None:
                _positive(name, value)
                if self.pp < 2:
                    raise ConfigError(f"{name} needs pipeline parallelism ({F_PP} > 1), got {F_PP} {self.pp}")
                if self.embedding_in_split or self.loss_in_split:
                    raise ConfigError(f"{name} cannot be combined with {F_EMB_SPLIT} or {F_LOSS_SPLIT} (Megatron "
                                      "allows one way of unbalancing the stages at a time)")
        if self.pipeline_layout is not None:
            self._check_layout(global_batch)
        if self.embedding_stages is not None:
            stages = tuple(sorted(set(self.embedding_stages)))
            if not stages or stages[0] < 0 or stages[-1] >= self.pp:
                raise ConfigError(f"embedding group stages {stages} are outside 0..{self.pp - 1} ({F_PP} {self.pp})")
            object.__setattr__(self, "embedding_stages", stages)
        if self.order not in ORDERS:
            raise ConfigError(f"rank order {self.order!r} is not one Megatron builds ({' or '.join(ORDERS)}; "
                              "--use-tp-pp-dp-mapping selects the second)")
        if self.sequence_parallel and self.tp == 1:
            object.__setattr__(self, "sequence_parallel", False)
        if self.hierarchical_cp is not None:
            sizes = tuple(self.hierarchical_cp)
            product = 1
            for size in sizes:
                product *= size
            if len(sizes) != 2 or product != self.cp:  # Megatron's arguments.py asserts the product
                raise ConfigError(f"--hierarchical_context_parallel_sizes {','.join(map(str, sizes))}: give the a2a "
                                  f"and p2p levels, two sizes whose product is {F_CP} {self.cp}")
            object.__setattr__(self, "hierarchical_cp", sizes)

    def _check_layout(self, global_batch: int) -> None:
        """Parse ``--pipeline_model_parallel_layout`` and refuse what Megatron refuses beside it."""
        layout = parse_layout(self.pipeline_layout, self.pp)
        self.__dict__["_layout"] = layout
        for name, value in ((F_VPP, self.vpp_layers), (F_VSTAGES, self.virtual_stages)):
            if value is not None:  # Megatron's arguments.py: no more than one of the three
                raise ConfigError(f"{F_LAYOUT} sets the chunks per pipeline rank itself: give it or {name}, not both")
        for name, value in ((F_FIRST, self.first_stage_layers), (F_LAST, self.last_stage_layers),
                            (F_EMB_SPLIT, self.embedding_in_split), (F_LOSS_SPLIT, self.loss_in_split)):
            if value:  # Megatron's TransformerConfig: the layout excludes the other ways of splitting
                raise ConfigError(f"{F_LAYOUT} cannot be combined with {name} (the layout places every layer itself)")
        if layout.vpp > 1:
            if self.pp < 2:
                raise ConfigError(f"{F_LAYOUT} {self.pipeline_layout!r} gives {layout.vpp} virtual stages to one pipeline "
                                  f"rank: the interleaved schedule needs {F_PP} > 1")
            if self.ga % self.pp:
                raise ConfigError(
                    f"the interleaved schedule ({F_LAYOUT}: {layout.vpp} chunks per rank) needs the number of "
                    f"micro-batches {self.ga} ({F_GBS} {global_batch} / ({F_MBS} {self.micro_batch} x data-parallel "
                    f"{self.dp})) to be a multiple of {F_PP} {self.pp}")

    @property
    def layout(self) -> PipelineLayout | None:
        """The parsed ``--pipeline_model_parallel_layout`` (None without one)."""
        return self.__dict__.get("_layout")

    @property
    def expert_tp(self) -> int:
        """Tensor-parallel size inside experts (``etp``, default ``tp``)."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_dp(self) -> int:
        """Size of the expert-data-parallel group: the stage's ranks / (etp * ep)."""
        return self.tp * self.cp * self.dp // (self.expert_tp * self.ep)

    @property
    def interleaved(self) -> bool:
        """Whether the interleaved schedule was asked for (``--num_layers_per_virtual_pipeline_stage`` or
        ``--num_virtual_stages_per_pipeline_rank``); :meth:`chunks` says how many chunks that gives."""
        return self.vpp_layers is not None or self.virtual_stages is not None or \
            (self.layout is not None and self.layout.vpp > 1)

    def rank_generator(self) -> RankGenerator:
        """Megatron's process groups for this layout (order ``tp-cp-ep-dp-pp``; one object per layout,
        which keeps the groups it has built)."""
        found = self.__dict__.get("_rank_generator")
        if found is None:
            found = self.__dict__["_rank_generator"] = RankGenerator(
                tp=self.tp, ep=self.ep if self.expert_tp == self.tp else 1, dp=self.dp, pp=self.pp, cp=self.cp, order=self.order,
                hierarchical_cp=self.hierarchical_cp)
        return found

    def expert_rank_generator(self) -> RankGenerator:
        """The expert layout (Megatron core >= 0.10): the ``tp * cp * dp`` ranks of a stage regrouped
        as expert-tp x ep x expert-dp, tp fastest.  With ``etp == tp`` and ``cp == 1`` its groups equal
        the expert view of :meth:`rank_generator`."""
        found = self.__dict__.get("_expert_rank_generator")
        if found is None:
            found = self.__dict__["_expert_rank_generator"] = RankGenerator(
                tp=self.expert_tp, ep=self.ep, dp=self.expert_dp * self.ep, pp=self.pp, order=self.order)
        return found

    _GROUP_TOKENS = {"tp_group": (False, "tp"), "dp_group": (False, "dp"), "pp_group": (False, "pp"),
                     "mp_group": (False, "tp-pp"), "ep_group": (True, "ep"), "ep_dp_group": (True, "edp"),
                     "ep_tp_group": (True, "tp-ep"), "cp_group": (False, "cp"), "tp_cp_group": (False, "tp-cp"),
                     "dp_cp_group": (False, "dp-cp"), "cp_a2a_group": (False, "hcp0"), "cp_p2p_group": (False, "hcp1"),
                     "etp_group": (True, "tp")}
    """CommGroup value -> (from the expert layout?, RankGenerator token)."""

    def group_ranks(self, group: str) -> list[list[int]]:
        """Global ranks of every group of a :class:`CommGroup` value (``tp_group``, ``dp_group``,
        ``pp_group``, ``ep_group``, ``ep_dp_group``, ``ep_tp_group``, ``mp_group``,
        ``embedding_group``, ``all_nodes``): the one place that maps group names to ranks."""
        name = getattr(group, "value", group)
        if name in self._GROUP_TOKENS:
            expert, token = self._GROUP_TOKENS[name]
            return (self.expert_rank_generator() if expert else self.rank_generator()).get_ranks(token)
        if name == "embedding_group":
            stages = self.embedding_group_stages()
            return [[ranks[s] for s in stages] for ranks in self.rank_generator().get_ranks("pp")] if self.pp > 1 else []
        if name == "all_nodes":
            return [list(range(self.world_size))]
        raise ConfigError(f"unknown process group {name!r}")

    def group_of(self, rank: int, group: str) -> Sequence[int] | None:
        """The ranks of the ``group`` (a :class:`CommGroup` value) that holds ``rank``: the same as the
        member of :meth:`group_ranks` that holds it, without building the others; None when no group
        holds it (the embedding group of a middle stage, or pp 1)."""
        name = getattr(group, "value", group)
        if name in self._GROUP_TOKENS:
            expert, token = self._GROUP_TOKENS[name]
            return (self.expert_rank_generator() if expert else self.rank_generator()).group_of(rank, token)
        if name == "embedding_group":
            if self.pp == 1:
                return None
            ranks = self.rank_generator().group_of(rank, "pp")
            members = [ranks[s] for s in self.embedding_group_stages()]
            return members if rank in members else None
        if name == "all_nodes":
            if not 0 <= rank < self.world_size:
                raise ConfigError(f"rank {rank} is outside the world of {self.world_size} ranks")
            return range(self.world_size)
        raise ConfigError(f"unknown process group {name!r}")

    def embedding_group_stages(self) -> tuple[int, ...]:
        """Pipeline ranks of Megatron's embedding group: the first and the last by default, or
        ``embedding_stages`` (set from the model by :class:`utils.config.JobConfig`: with multi-token
        prediction, ``pretrain_gpt.py``'s ``get_embedding_ranks`` adds the MTP ranks and keeps the last rank
        only with tied embeddings)."""
        if self.embedding_stages is not None:
            return self.embedding_stages
        return (0, self.pp - 1) if self.pp > 1 else (0,)

    # ---- rules that need the model -----------------------------------------------------------

    def chunks(self, num_layers: int) -> int:
        """Model chunks per pipeline rank (Megatron's virtual pipeline size; 1 without interleaving).

        With ``--num_layers_per_virtual_pipeline_stage L`` it is a (middle) stage's layers over ``L``,
        embedding and loss counted when they are part of the split (Megatron's ``arguments.py``).
        """
        if self.virtual_stages is not None:
            return self.virtual_stages
        if self.layout is not None:
            return self.layout.vpp
        if self.vpp_layers is None:
            return 1
        per_stage = self._stage_split(num_layers)[1]
        if per_stage % self.vpp_layers:
            raise ConfigError(f"a pipeline stage holds {per_stage} layers (--num_layers {num_layers} over {F_PP} "
                              f"{self.pp}), not divisible by {F_VPP} {self.vpp_layers}")
        return per_stage // self.vpp_layers

    def _stage_split(self, num_layers: int) -> tuple[int | None, int, int | None]:
        """(first stage's layers or None, a middle stage's layers, last stage's layers or None), with the
        embedding and the loss counted as layers when they are part of the split."""
        first, last = self.first_stage_layers, self.last_stage_layers
        total = num_layers + self.embedding_in_split + self.loss_in_split
        fixed = (first or 0) + (last or 0)
        middle_stages = self.pp - (first is not None) - (last is not None)
        rest = total - fixed
        if rest < 0 or (middle_stages == 0 and rest != 0) or (middle_stages and rest % middle_stages):
            given = " and ".join(f"{n} {v}" for n, v in ((F_FIRST, first), (F_LAST, last)) if v is not None)
            if given:
                raise ConfigError(
                    f"--num_layers {num_layers} minus {given} leaves {rest} layers, which do not split evenly "
                    f"over the other {middle_stages} of {F_PP} {self.pp} stages")
            counted = f" plus the embedding and loss ({total})" if self.embedding_in_split and self.loss_in_split else \
                f" plus the embedding ({total})" if self.embedding_in_split else \
                f" plus the loss ({total})" if self.loss_in_split else ""
            raise ConfigError(
                f"--num_layers {num_layers}{counted} is not divisible by {F_PP} {self.pp} (give {F_FIRST} "
                f"and/or {F_LAST} for uneven stages, as Megatron does)")
        return first, (rest // middle_stages if middle_stages else 0), last

    def virtual_stage_layers(self, num_layers: int) -> list[int]:
        """Transformer layers of every virtual stage, in the order the model's layers flow through them:
        virtual stage ``c * pp + r`` is chunk ``c`` of pipeline rank ``r``, and its layers follow those of
        the virtual stages before it (Megatron core's layer offsets).

        Each rank's stage layers are cut into :meth:`chunks` equal chunks (uneven first / last stages
        too: their layers must divide by the chunk count, as Megatron asserts); with the embedding
        (loss) counted in the split, the first (last) virtual stage builds one layer fewer.  Raises
        :class:`ConfigError` when the layers cannot be split as asked.
        """
        cache = self.__dict__.setdefault("_stage_layers_cache", {})
        if num_layers not in cache:
            cache[num_layers] = self._virtual_stage_layers(num_layers)
        return list(cache[num_layers])

    def _virtual_stage_layers(self, num_layers: int) -> list[int]:
        if self.layout is not None:  # the layout's own counts (empty stages allowed, as Megatron allows them)
            counts = self.layout.layers()
            if sum(counts) != num_layers:
                raise ConfigError(f"{F_LAYOUT} {self.pipeline_layout!r} holds {sum(counts)} transformer layers (t), not "
                                  f"--num_layers {num_layers}")
            return counts
        first, middle, last = self._stage_split(num_layers)
        v = self.chunks(num_layers)
        per_rank = [middle] * self.pp
        if first is not None:
            per_rank[0] = first
        if last is not None:
            per_rank[-1] = last
        for stage, count in enumerate(per_rank):
            if count % v:
                raise ConfigError(f"pipeline stage {stage} holds {count} layers, not divisible by its {v} model "
                                  f"chunks (interleaved schedule: {F_VPP} / {F_VSTAGES})")
        counts = [per_rank[r] // v for _c in range(v) for r in range(self.pp)]
        if self.embedding_in_split:
            counts[0] -= 1
        if self.loss_in_split:
            counts[-1] -= 1
        allowed_empty = {0} if self.embedding_in_split else set()
        if self.loss_in_split:
            allowed_empty.add(len(counts) - 1)
        if any(n < 0 or (n == 0 and u not in allowed_empty) for u, n in enumerate(counts)):
            raise ConfigError(f"--num_layers {num_layers} leaves a pipeline stage without layers ({F_PP} {self.pp}, "
                              f"{v} chunks per stage)")
        return counts

    def stage_layers(self, num_layers: int) -> list[int]:
        """Transformer layers of each pipeline stage, all its chunks together."""
        counts = self.virtual_stage_layers(num_layers)
        return [sum(counts[r::self.pp]) for r in range(self.pp)]

    def check_model(self, model: ModelConfig, seq_length: int, dtype: str = "bfloat16") -> None:
        """Rules that involve the model's dimensions.  Raises :class:`ConfigError`."""
        heads, groups = model.num_attention_heads, model.query_groups
        if heads % self.tp:
            raise ConfigError(f"--num_attention_heads {heads} is not divisible by {F_TP} {self.tp}")
        if heads % groups:
            raise ConfigError(f"--num_attention_heads {heads} is not divisible by --num_query_groups {groups}")
        if groups % self.tp:
            raise ConfigError(f"--num_query_groups {groups} is not divisible by {F_TP} {self.tp}")
        if model.kv_channels_given is None and model.hidden_size % heads:
            raise ConfigError(f"--hidden_size {model.hidden_size} is not divisible by --num_attention_heads {heads} "
                              "(give --kv_channels for a head size of your own)")
        if model.ffn_hidden_size % self.tp:
            raise ConfigError(f"--ffn_hidden_size {model.ffn_hidden_size} is not divisible by {F_TP} {self.tp}")
        self.virtual_stage_layers(model.num_layers)
        if self.layout is not None:
            self.layout.check_model(model.num_layers, model.mtp_num_layers)
        if model.mtp_num_layers and model.position_embedding_type == "learned_absolute":
            raise ConfigError(f"--mtp_num_layers {model.mtp_num_layers} needs --position_embedding_type rope or none "
                              "(Megatron's arguments.py refuses multi-token prediction with learned positions)")
        if model.position_embedding_type == "learned_absolute" and seq_length > model.max_position_embeddings:
            raise ConfigError(f"--seq_length {seq_length} exceeds --max_position_embeddings "
                              f"{model.max_position_embeddings} of learned position embeddings (Megatron refuses "
                              f"the job); give --max_position_embeddings {seq_length} or more")
        if self.sequence_parallel and seq_length % self.tp:
            raise ConfigError(f"--seq_length {seq_length} is not divisible by {F_TP} {self.tp} "
                              f"(needed by {F_SP})")
        if self.cp > 1 and seq_length % (2 * self.cp):
            raise ConfigError(f"--seq_length {seq_length} is not divisible by 2 x {F_CP} {self.cp} = {2 * self.cp}")
        if model.is_moe:
            experts = model.num_experts
            if experts % self.ep:
                raise ConfigError(f"--num_experts {experts} is not divisible by {F_EP} {self.ep}")
            if model.moe_router_topk > experts:
                raise ConfigError(f"--moe_router_topk {model.moe_router_topk} exceeds --num_experts {experts}")
            if self.tp > 1 and not self.sequence_parallel:
                raise ConfigError(f"MoE with {F_TP} {self.tp} needs {F_SP} (Megatron requires sequence "
                                  "parallelism for MoE with tensor parallelism)")
            moe_ffn = model.moe_ffn_hidden_size
            if moe_ffn % self.expert_tp:
                raise ConfigError(f"--moe_ffn_hidden_size {moe_ffn} is not divisible by the expert tensor-parallel "
                                  f"size {self.expert_tp}")
            if self.ep > 1 and dtype.lower() in ("float16", "fp16"):
                raise ConfigError(f"{F_EP} {self.ep} is not supported with --dtype {dtype} (Megatron: expert "
                                  "parallelism needs bf16 or fp32)")
        elif self.ep > 1:
            raise ConfigError(f"{F_EP} {self.ep} needs an MoE model (--moe_enable with --num_experts > 1)")

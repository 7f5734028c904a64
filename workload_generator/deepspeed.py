"""DeepSpeed ZeRO-1/2/3 training workloads: every collective (and, with ``--computation_enable``,
every GEMM) of one data-parallel rank of a DeepSpeed job, in execution order.

The frame is pure data parallelism: ZeRO shards over all ``--world_size`` ranks (dp = world,
tp = pp = 1).  Gradients and parameters travel in the training dtype (``--dtype``: 2 bytes for
bf16/fp16, DeepSpeed's default ``communication_data_type``; 4 for fp32).  One optimizer parameter
group is assumed (a single flat buffer in ZeRO-1/2).  Each iteration runs ``--global_batch /
(--micro_batch * dp)`` micro-batches (DeepSpeed's ``gradient_accumulation_steps``).

References (DeepSpeed 0.14-0.16; file paths under ``deepspeed/``):

- ``runtime/engine.py``: ``_configure_distributed_model`` broadcasts every parameter from DP rank 0
  unless AMP is on (``_broadcast_model``); ``backward`` ends with ``allreduce_gradients``, which
  in ZeRO-2/3 flushes the last gradient bucket after every micro-batch and in ZeRO-1 reduces only
  at the gradient-accumulation boundary.
- ``runtime/zero/stage_1_and_2.py`` (``DeepSpeedZeroOptimizer``): the parameters live in one flat
  buffer padded to a multiple of ``2 * dp`` elements and split in ``dp`` equal partitions;
  ``reduce_independent_p_g_buckets_and_remove_grads`` fills a bucket of ``reduce_bucket_size``
  elements and reduces it (``reduce_ipg_grads``) before a gradient that would overflow it;
  without ``contiguous_gradients`` a bucket is all-reduced (``buffered_reduce_fallback``), with it
  each owner's slice is reduced to its owner (``average_tensor``, one ``reduce`` per destination
  rank as with ``use_multi_rank_bucket_allreduce=False``); ZeRO-2 reduces from the backward hooks
  of every micro-batch (reverse order), ZeRO-1 (``overlap_comm`` off, its default) from
  ``reduce_gradients`` after the last micro-batch, walking the parameters in registration order;
  ``step`` checks fp16 overflow (``has_overflow``, a 1-byte MAX all-reduce), all-reduces the fp32
  gradient norm (``get_grad_norm_direct``) and gathers the updated partitions
  (``runtime/utils.py`` ``all_gather_dp_groups``, in shards of ``allgather_bucket_size``).
- ``runtime/zero/stage3.py``, ``parameter_offload.py``, ``partitioned_param_coordinator.py``,
  ``partition_parameters.py`` (ZeRO-3): see :class:`DeepSpeedZero3Workload`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from mocked_model.base import comm
from mocked_model.deepspeed import DeepSpeedContext, DeepSpeedLlama
from utils.config import JobConfig
from utils.errors import ConfigError
from utils.parallel import F_CP, F_EP, F_PP, F_TP, F_WORLD
from utils.presets import find_preset
from utils.workload import CommGroup, CommType, WorkItem
from workload_generator.generator import WorkloadGenerator
from workload_generator.schedules import Step

AR, AG, RS, REDUCE, BC, BARRIER = (CommType.all_reduce, CommType.all_gather, CommType.reduce_scatter, CommType.reduce,
                                   CommType.broadcast, CommType.barrier)
DP = CommGroup.dp_group
NCCL_START_ALIGNMENT = 2
"""``nccl_start_alignment_factor`` of ZeRO-1/2: 4-byte alignment of 2-byte elements."""
_NEVER = -(1 << 62)


# ---- configuration ---------------------------------------------------------------------------

_FLAG = {f: f"--{f}" for f in (
    "stage", "reduce_bucket_size", "allgather_bucket_size", "contiguous_gradients", "amp_enabled",
    "param_persistence_threshold", "model_persistence_threshold", "max_live_parameters", "prefetch_bucket_size",
    "overlap_comm", "use_multi_rank_bucket_allreduce", "max_reuse_distance", "sub_group_size")}


@dataclass(frozen=True)
class DeepSpeedConfig:
    """The ZeRO settings of a DeepSpeed job, validated.  Sizes and thresholds count elements.

    Fields with an AICB flag of the same name (``--stage`` .. ``--prefetch_bucket_size``) take its
    default.  The others are DeepSpeed ``zero_optimization`` settings without an AICB flag, read
    from the resolved values when present: ``overlap_comm`` (ZeRO-1/2 default False; True makes
    ZeRO-1 reduce from the backward hooks of its last micro-batch), ``use_multi_rank_bucket_allreduce``
    (True: the contiguous-gradient path all-reduces the bucket instead of reducing slices to their
    owners), ``max_reuse_distance`` (ZeRO-3: a released parameter whose next use lies within this
    many elements of upcoming modules stays gathered; 0, our default, releases after every use as
    AICB does; DeepSpeed's own default is 1e9) and ``sub_group_size`` (ZeRO-3 optimizer sub-groups,
    one gradient-norm all-reduce each; DeepSpeed's default 1e9).
    """

    stage: int
    reduce_bucket_size: int = 500_000_000
    allgather_bucket_size: int = 500_000_000
    contiguous_gradients: bool = False
    amp_enabled: bool = False
    param_persistence_threshold: int = 100_000
    model_persistence_threshold: int = sys.maxsize
    max_live_parameters: int = 1_000_000_000
    prefetch_bucket_size: int = 1_000_000_000
    overlap_comm: bool = False
    use_multi_rank_bucket_allreduce: bool = False
    max_reuse_distance: int = 0
    sub_group_size: int = 1_000_000_000

    def __post_init__(self) -> None:
        if isinstance(self.stage, bool) or self.stage not in (1, 2, 3):
            raise ConfigError(f"--stage {self.stage!r} is not a ZeRO stage; DeepSpeed has stages 1, 2 and 3")
        for name in ("reduce_bucket_size", "allgather_bucket_size", "sub_group_size"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise ConfigError(f"{_FLAG[name]} must be a positive number of elements, got {value!r}")
        for name in ("param_persistence_threshold", "model_persistence_threshold", "max_live_parameters",
                     "prefetch_bucket_size", "max_reuse_distance"):
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise ConfigError(f"{_FLAG[name]} must be a number of elements >= 0, got {value!r}")
        for name in ("contiguous_gradients", "amp_enabled", "overlap_comm", "use_multi_rank_bucket_allreduce"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{_FLAG[name]} is a switch (true or false), got {getattr(self, name)!r}")
        if self.stage in (1, 2) and self.allgather_bucket_size % NCCL_START_ALIGNMENT:
            raise ConfigError(f"--allgather_bucket_size {self.allgather_bucket_size} must be a multiple of 2 "
                              "(DeepSpeed aligns the parameter all-gather shards to 4 bytes of 2-byte elements)")

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> DeepSpeedConfig:
        """From resolved flag values (``parse_job``'s values or ``TrainingConfig.extra``); absent
        keys take the field defaults (AICB's flag defaults)."""
        kwargs = {f.name: values[f.name] for f in fields(cls) if values.get(f.name) is not None}
        kwargs.setdefault("stage", 3)
        return cls(**kwargs)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_LLAMA = {"normalization": "RMSNorm", "position_embedding_type": "rope", "swiglu": True,
          "untie_embeddings_and_output_weights": True}


def check_deepspeed_job(job: JobConfig) -> None:
    """The rules a DeepSpeed job must meet beyond the common ones.  Raises :class:`ConfigError`.

    Pure data parallelism (tp = pp = cp = ep = 1); a dense LLaMA-architecture model (RMSNorm,
    rotary positions, SwiGLU, untied ``lm_head``): an architecture flag that contradicts it, given
    by the user or by a preset, is refused, while the generic defaults of a custom model are
    replaced by LLaMA's; a training dtype DeepSpeed communicates in (bf16, fp16 or fp32).
    """
    p, model = job.parallel, job.model
    for flag, value in ((F_TP, p.tp), (F_PP, p.pp), (F_CP, p.cp), (F_EP, p.ep)):
        if value != 1:
            raise ConfigError(f"--frame DeepSpeed is pure data parallelism (ZeRO shards over all {F_WORLD} "
                              f"{p.world_size} ranks): {flag} must be 1, got {value}")
    if model.is_moe or model.multi_latent_attention:
        raise ConfigError("--frame DeepSpeed mocks a dense LLaMA model; mixture-of-experts and multi-latent attention "
                          f"(model {model.name}) are not supported")
    dtype = job.training.dtype.lower()
    if dtype in ("float8", "fp8"):
        raise ConfigError(f"--dtype {job.training.dtype} is not a DeepSpeed training dtype; use bfloat16, float16 or float32")
    given = job.training.extra.get("_given") or frozenset()
    preset = find_preset(model.name)
    for name, llama in _LLAMA.items():
        value = getattr(model, name)
        if value != llama and (name in given or (preset is not None and getattr(preset, name) == value)):
            raise ConfigError(f"--frame DeepSpeed mocks LLaMA (RMSNorm, rotary positions, SwiGLU, untied lm_head); "
                              f"model {model.name} has --{name} {value}: use a LLaMA model (-m 7/13/30/65, "
                              f"--model_name llama3_8B, ...) or drop the flag")


# ---- shared pieces ------------------------------------------------------------------------------

def ipg_buckets(order: Iterable[int], numel: Sequence[int], bucket_size: int) -> tuple[dict[int, list[int]], list[int]]:
    """DeepSpeed's gradient buckets (``reduce_independent_p_g_buckets_and_remove_grads``).

    Gradients arrive in ``order`` (parameter indices).  One whose elements would take the bucket
    past ``bucket_size`` first has the bucket reduced (when the bucket holds anything; an empty
    bucket reduces nothing), then starts the next; a parameter larger than the bucket therefore
    travels alone.  Returns ``{parameter: bucket reduced when its gradient arrives}`` and the
    bucket left for the epilogue (``independent_gradient_partition_epilogue``).
    """
    flush_at: dict[int, list[int]] = {}
    bucket: list[int] = []
    elements = 0
    for index in order:
        if elements + numel[index] > bucket_size and bucket:
            flush_at[index] = bucket
            bucket, elements = [], 0
        bucket.append(index)
        elements += numel[index]
    return flush_at, bucket


def allgather_shards(partition: int, dp: int, bucket_size: int) -> list[int]:
    """Elements per rank of each all-gather of ``all_gather_dp_groups`` (``runtime/utils.py``).

    ``num_shards = max(1, partition * dp // allgather_bucket_size)``; a shard is
    ``partition // num_shards`` rounded down to a multiple of 2 (``start_alignment_factor``); the
    last shard takes the rest.  Each all-gather moves ``shard * dp`` elements.
    """
    shards = max(1, partition * dp // bucket_size)
    size = partition // shards
    size -= size % NCCL_START_ALIGNMENT
    return [size] * (shards - 1) + [partition - (shards - 1) * size]


class DeepSpeedWorkload(WorkloadGenerator):
    """What the ZeRO generators share: the mocked model, message sizes and the engine's setup.

    ``params`` are the model's parameters in registration order; items name them in ``meta``
    (``{"params": (...)}``) for analysis (the CSV does not carry it).
    """

    name = "deepspeed"
    stages: tuple[int, ...] = (1, 2, 3)

    def __init__(self, job: JobConfig, config: DeepSpeedConfig | None = None) -> None:
        check_deepspeed_job(job)
        self.ds = config if config is not None else DeepSpeedConfig.from_values(job.training.extra)
        if self.ds.stage not in self.stages:
            raise ConfigError(f"--stage {self.ds.stage} is not generated by {type(self).__name__} "
                              f"(ZeRO stage {' or '.join(map(str, self.stages))})")
        from workload_generator.limits import check_deepspeed

        check_deepspeed(job, self.ds.stage)  # before the model is built: its size is what the estimate refuses
        super().__init__(job, rank=0)
        self.name = f"deepspeed_stage{self.ds.stage}"
        self.dp = job.parallel.dp
        self.elem = job.training.dtype_bytes
        self.fp16 = job.training.dtype.lower() in ("float16", "fp16", "half")
        self.model = DeepSpeedLlama(DeepSpeedContext.of(job), job.model)
        self.leaves = self.model.leaves()
        self.params = list(self.model.parameters())
        self.numel = [q.numel for q in self.params]
        index = {id(q): i for i, q in enumerate(self.params)}
        self.leaf_params = [tuple(index[id(q)] for q in leaf.params) for leaf in self.leaves]
        self._forward_items = [item for leaf in self.leaves for item in leaf.forward_items()]

    def num_params(self) -> int:
        """Parameters of the model (every rank holds or gathers all of them)."""
        return sum(self.numel)

    def _dp(self, ctype: CommType, nbytes: int, stage: str, params: Iterable[int] = (), **kw: Any) -> WorkItem:
        names = tuple(self.params[i].name for i in params)
        return comm(ctype, DP, self.dp, nbytes, stage, meta={"params": names} if names else None, **kw)

    def padded(self, params: Iterable[int]) -> int:
        """Elements a ZeRO-3 all-gather or reduce-scatter of ``params`` moves: each parameter is
        padded to a multiple of dp (``partition_parameters.py``, ``_aligned_size``), ``dp * sum(ceil(n / dp))``."""
        dp = self.dp
        return dp * sum(-(-self.numel[i] // dp) for i in params)

    def init(self, out: list[WorkItem]) -> None:
        """``DeepSpeedEngine._broadcast_model``: one broadcast per parameter from DP rank 0, skipped
        with ``--amp_enabled`` (as DeepSpeed's ``_configure_distributed_model`` does; DeepSpeed itself
        refuses AMP together with ZeRO)."""
        if not self.ds.amp_enabled:
            for i in range(len(self.params)):
                out.append(self._dp(BC, self.numel[i] * self.elem, "init._broadcast_model", (i,), src=0))

    def _scalar_checks(self, out: list[WorkItem], norm_bytes: int, norm_reductions: int) -> None:
        """The optimizer step's overflow check (fp16 loss scaling only: a 1-byte MAX all-reduce,
        ``has_overflow``) and gradient-norm all-reduces (``get_grad_norm_direct``)."""
        if self.fp16:
            out.append(self._dp(AR, 1, "step.has_overflow"))
        for _ in range(norm_reductions):
            out.append(self._dp(AR, norm_bytes, "step.get_grad_norm_direct"))


# ---- ZeRO-1 and ZeRO-2 -----------------------------------------------------------------------------

class DeepSpeedZero12Workload(DeepSpeedWorkload):
    """ZeRO stage 1 (optimizer states partitioned) and 2 (gradients too): ``DeepSpeedZeroOptimizer``.

    Backward reduces the gradients bucket by bucket (see the module docstring for when and in which
    order); the step all-gathers the updated parameter partitions.  Per reducing micro-batch the
    reductions move exactly ``dtype_bytes * parameters`` bytes; the step's all-gathers move the flat
    buffer, ``dtype_bytes * parameters`` padded to a multiple of ``2 * dp``.
    """

    stages = (1, 2)

    def __init__(self, job: JobConfig, config: DeepSpeedConfig | None = None) -> None:
        super().__init__(job, config)
        align = NCCL_START_ALIGNMENT * self.dp
        self.flat_numel = -(-self.num_params() // align) * align
        self.partition = self.flat_numel // self.dp
        from workload_generator.limits import check_items, limit_of

        # the step's all-gathers, one per shard of --allgather_bucket_size: --ffn_hidden_size 1e12 made billions
        # (MemoryError), which the per-layer estimate of check_deepspeed does not see
        shards = max(1, self.partition * self.dp // self.ds.allgather_bucket_size)
        check_items(shards * job.training.epoch_num, limit_of(job), f"the ZeRO-{self.ds.stage} step's all-gathers",
                    f"the model's size ({self.flat_numel:,} parameters), raise --allgather_bucket_size "
                    f"({self.ds.allgather_bucket_size:,} elements)")
        self.offsets: list[int] = []
        offset = 0
        for n in self.numel:
            self.offsets.append(offset)
            offset += n
        self._plain_backward = [item for leaf in reversed(self.leaves) for item in leaf.backward_items()]
        self._reducing_backward = self._build_reducing_backward()

    def owners(self, param: int) -> dict[int, int]:
        """``{dp rank: elements}`` of the slices of a parameter's gradient each rank owns (ascending)."""
        start, end, size = self.offsets[param], self.offsets[param] + self.numel[param], self.partition
        out: dict[int, int] = {}
        rank = start // size
        while start < end:
            stop = min(end, (rank + 1) * size)
            out[rank] = stop - start
            start, rank = stop, rank + 1
        return out

    def _reduce(self, bucket: list[int], stage: str) -> list[WorkItem]:
        """``reduce_ipg_grads`` of one bucket: an all-reduce of the bucket, or with
        ``--contiguous_gradients`` one reduce per owner rank of the slices it owns (destinations in
        order of first appearance, as ``average_tensor`` groups them)."""
        ds = self.ds
        if not ds.contiguous_gradients or ds.use_multi_rank_bucket_allreduce:
            return [self._dp(AR, sum(self.numel[i] for i in bucket) * self.elem, stage, bucket)]
        per_rank: dict[int, int] = {}
        members: dict[int, list[int]] = {}
        for i in bucket:
            for rank, count in self.owners(i).items():
                per_rank[rank] = per_rank.get(rank, 0) + count
                members.setdefault(rank, []).append(i)
        return [self._dp(REDUCE, count * self.elem, stage, members[rank], dst=rank) for rank, count in per_rank.items()]

    def _build_reducing_backward(self) -> list[WorkItem]:
        ds, out = self.ds, []
        hooks = ds.stage == 2 or ds.overlap_comm
        order = range(len(self.params) - 1, -1, -1) if hooks else range(len(self.params))
        flush_at, last = ipg_buckets(order, self.numel, ds.reduce_bucket_size)
        if hooks:
            # gradient hooks fire as backward produces each gradient, after the module's GEMMs
            for leaf, params in zip(reversed(self.leaves), reversed(self.leaf_params)):
                out.extend(leaf.backward_items())
                for p in reversed(params):
                    if p in flush_at:
                        out.extend(self._reduce(flush_at[p], "backward.reduce_ipg_grads"))
        else:
            # ZeRO-1 without overlap_comm: reduce_gradients walks the parameters after backward
            out.extend(self._plain_backward)
            for p in order:
                if p in flush_at:
                    out.extend(self._reduce(flush_at[p], "backward.reduce_ipg_grads"))
        if last:
            out.extend(self._reduce(last, "backward.independent_gradient_partition_epilogue"))
        return out

    def forward(self, out: list[WorkItem], step: Step) -> None:
        out.extend(self._forward_items)

    def backward(self, out: list[WorkItem], step: Step) -> None:
        # ZeRO-2 reduces every micro-batch; ZeRO-1 only at the gradient-accumulation boundary
        boundary = step.microbatch == self.job.parallel.ga - 1
        out.extend(self._reducing_backward if self.ds.stage == 2 or boundary else self._plain_backward)

    def step(self, out: list[WorkItem]) -> None:
        """Overflow check (fp16), fp32 gradient norm (4 bytes), then ``all_gather_dp_groups``."""
        self._scalar_checks(out, 4, 1)
        if self.dp > 1:
            for shard in allgather_shards(self.partition, self.dp, self.ds.allgather_bucket_size):
                out.append(self._dp(AG, shard * self.dp * self.elem, "step.all_gather_dp_groups"))


# ---- ZeRO-3 ------------------------------------------------------------------------------------------

class DeepSpeedZero3Workload(DeepSpeedWorkload):
    """ZeRO stage 3 (parameters partitioned too): ``DeepSpeedZeroOptimizer_Stage3`` with its
    ``PartitionedParameterCoordinator``.

    Init (besides the engine's broadcast): ``zero.Init`` converting the built model broadcasts each
    parameter from rank 0 (``Init._zero_init_param``); a barrier
    (``_create_fp16_partitions_with_defragmentation``), two (``_setup_for_real_optimizer``); one
    all-gather per parameter while the gradient hooks are created
    (``create_reduce_and_remove_grad_hooks``), after which every parameter is partitioned.

    Each micro-batch: before a module runs (forward, then backward in reverse), the parameters it
    lacks are all-gathered in one collective (``fetch_sub_module``); after it ran they are released.
    ZeRO-3 records the module order during the second micro-batch and only from the third on (a
    "complete trace") does it prefetch: after a fetch it gathers, in one collective, the next
    parameters of the trace not already gathered, up to ``--prefetch_bucket_size`` elements and
    ``--max_live_parameters`` minus the elements gathered now; the release then keeps the persistent
    parameters, those the prefetcher already reached for a later use, and (``max_reuse_distance``)
    those reused soon.  Persistent parameters are the ones of at most ``--param_persistence_threshold``
    elements, taken in registration order while their total stays within
    ``--model_persistence_threshold`` (``mark_persistent_parameters``).  The embedding, fed with
    token ids, is never released after its backward (see :class:`mocked_model.deepspeed.Leaf`).
    Gradients are reduce-scattered in buckets of ``--reduce_bucket_size`` elements as backward
    produces them (``__reduce_and_partition_ipg_grads``, one ``reduce_scatter_coalesced`` per
    bucket), the last bucket at the end of each backward.  A ZeRO-3 collective of parameters
    ``P`` moves ``dtype_bytes * dp * sum(ceil(n / dp))`` bytes.

    Step: release everything (``_partition_all_parameters``), the overflow check (fp16), one 8-byte
    (fp64) gradient-norm all-reduce per optimizer sub-group (``sub_group_size``), then one
    all-gather per persistent parameter (``_post_step``), which stay gathered.

    Simplifications: only modules with parameters count as trace steps (DeepSpeed also counts the
    parameter-free and container modules; this shifts step ids, not which parameters are gathered,
    except for the forward/backward turn); the trace-consistency broadcasts of
    ``assert_ints_same_as_other_ranks`` (a few int64 lists, first two micro-batches) are left out.
    """

    stages = (3,)

    def __init__(self, job: JobConfig, config: DeepSpeedConfig | None = None) -> None:
        super().__init__(job, config)
        ds = self.ds
        persistent: list[int] = []
        total = 0
        for i, n in enumerate(self.numel):
            if n + total > ds.model_persistence_threshold:
                continue
            if n <= ds.param_persistence_threshold:
                persistent.append(i)
                total += n
        self.persistent_order = persistent
        self.persistent = frozenset(persistent)
        # the trace: every leaf forward, then in reverse for backward
        count = len(self.leaves)
        self.trace = [(k, True) for k in range(count)] + [(k, False) for k in range(count - 1, -1, -1)]
        self.queue: list[tuple[int, int]] = []       # (parameter, step id of its use): the prefetch queue
        uses: dict[int, list[int]] = {}
        self._prefix = [0]                           # elements of the modules before each step
        step_id = 0
        for k, _ in self.trace:
            params = self.leaf_params[k]
            if not params:
                continue
            for p in sorted(params):
                self.queue.append((p, step_id))
                uses.setdefault(p, []).append(step_id)
            self._prefix.append(self._prefix[-1] + sum(self.numel[p] for p in params))
            step_id += 1
        self._uses = uses
        flush_at, last = ipg_buckets(range(len(self.params) - 1, -1, -1), self.numel, ds.reduce_bucket_size)
        self._flush_items = {p: [self._dp(RS, self.padded(b) * self.elem, "backward.reduce_and_partition_ipg_grads", b)]
                             for p, b in flush_at.items()}
        self._epilogue = ([self._dp(RS, self.padded(last) * self.elem, "backward.independent_gradient_partition_epilogue",
                                    last)] if last else [])
        self.sub_groups = self._count_sub_groups()
        self._passes: dict[tuple, tuple[list[WorkItem], list[WorkItem], frozenset[int], int]] = {}
        self._reset()

    def _reset(self) -> None:
        self.passes = 0                        # micro-batches run (the trace is complete from the third)
        self.available: frozenset[int] = frozenset()
        self.n_available = 0                   # the coordinator's count of gathered elements
        self._pending: list[WorkItem] = []

    def _count_sub_groups(self) -> int:
        """``_create_fp16_sub_groups``: partitions accumulate until ``sub_group_size`` elements."""
        sizes = [-(-n // self.dp) for n in self.numel]
        if self.ds.sub_group_size >= sum(sizes):
            return 1
        groups = current = 0
        for i, size in enumerate(sizes):
            current += size
            if current >= self.ds.sub_group_size or i == len(sizes) - 1:
                groups, current = groups + 1, 0
        return groups

    def _gather(self, out: list[WorkItem], params: Sequence[int], stage: str) -> None:
        if self.dp > 1:   # all_gather_coalesced skips the collective on one rank
            out.append(self._dp(AG, self.padded(params) * self.elem, stage, params))

    def _reused_soon(self, step_id: int, param: int) -> bool:
        """``__params_to_release``: modules from ``step_id`` on are scanned until
        ``max_reuse_distance`` elements were traversed; a parameter seen meanwhile is kept."""
        distance = self.ds.max_reuse_distance
        if distance <= 0:
            return False
        for use in self._uses[param]:
            if use >= step_id:
                return self._prefix[use] - self._prefix[step_id] < distance
        return False

    def _run_pass(self, complete: bool, available: frozenset[int], n_available: int):
        """Items of one micro-batch's forward and backward from a state of gathered parameters."""
        ds, numel, queue = self.ds, self.numel, self.queue
        gathered = set(available)
        fwd: list[WorkItem] = []
        bwd: list[WorkItem] = []
        head = 0
        recent: dict[int, int] = {}          # __most_recent_step_id_param_fetched_for
        step_id = 0
        for k, forward in self.trace:
            leaf, params = self.leaves[k], self.leaf_params[k]
            out, phase = (fwd, "forward") if forward else (bwd, "backward")
            if params:
                missing = [p for p in params if p not in gathered]
                if missing:
                    self._gather(out, missing, f"{phase}.fetch_sub_module")
                    gathered.update(missing)
                    n_available += sum(numel[p] for p in missing)
                if complete:
                    # pop this module's own entries off the queue, then prefetch what follows
                    wanted = sum(1 for p in params if recent.get(p, _NEVER) < step_id)
                    for _ in range(wanted):
                        p, use = queue[head]
                        head += 1
                        recent[p] = use
                    if ds.prefetch_bucket_size > 0:
                        limit = min(ds.max_live_parameters - n_available, ds.prefetch_bucket_size)
                        chosen: list[int] = []
                        taken = 0
                        while head < len(queue) and taken < limit:
                            p, use = queue[head]
                            head += 1
                            if p not in gathered and p not in chosen:
                                chosen.append(p)
                                taken += numel[p]
                            recent[p] = max(recent.get(p, _NEVER), use)
                        if chosen:
                            self._gather(out, chosen, f"{phase}.prefetch")
                            gathered.update(chosen)
                            n_available += taken
                step_id += 1
            out.extend(leaf.forward_items() if forward else leaf.backward_items())
            if not forward:
                for p in reversed(params):     # gradient hooks, as the gradients arrive
                    out.extend(self._flush_items.get(p, ()))
            if params and (forward or leaf.input_requires_grad):
                for p in params:
                    if p not in gathered:
                        continue
                    if complete and (p in self.persistent or recent.get(p, _NEVER) > step_id
                                     or self._reused_soon(step_id, p)):
                        continue
                    gathered.discard(p)
                    n_available -= numel[p]
        bwd.extend(self._epilogue)
        return fwd, bwd, frozenset(gathered), n_available

    # ---- the driver's parts -------------------------------------------------------------------------

    def init(self, out: list[WorkItem]) -> None:
        self._reset()
        super().init(out)
        world = self.job.parallel.world_size
        for i in range(len(self.params)):
            out.append(self._dp(BC, self.numel[i] * self.elem, "init._zero_init_param", (i,), src=0))
        out.append(comm(BARRIER, CommGroup.all_nodes, world, 0, "init._create_fp16_partitions_with_defragmentation"))
        out.append(comm(BARRIER, CommGroup.all_nodes, world, 0, "init._setup_for_real_optimizer"))
        out.append(comm(BARRIER, CommGroup.all_nodes, world, 0, "init._setup_for_real_optimizer"))
        for i in range(len(self.params)):
            self._gather(out, (i,), "init.create_reduce_and_remove_grad_hooks")

    def forward(self, out: list[WorkItem], step: Step) -> None:
        key = (self.passes >= 2, self.available, self.n_available)
        result = self._passes.get(key)
        if result is None:
            result = self._passes[key] = self._run_pass(*key)
        fwd, self._pending, self.available, self.n_available = result
        self.passes += 1
        out.extend(fwd)

    def backward(self, out: list[WorkItem], step: Step) -> None:
        out.extend(self._pending)

    def step(self, out: list[WorkItem]) -> None:
        self.available, self.n_available = frozenset(), 0       # _partition_all_parameters
        self._scalar_checks(out, 8, self.sub_groups)
        for i in self.persistent_order:
            self._gather(out, (i,), "step._post_step")
        self.available = self.persistent                        # gathered outside the coordinator's count


# ---- entry points ----------------------------------------------------------------------------------

def deepspeed_workload(job: JobConfig, config: DeepSpeedConfig | None = None) -> DeepSpeedWorkload:
    """The generator of the job's ZeRO ``--stage``."""
    config = config if config is not None else DeepSpeedConfig.from_values(job.training.extra)
    generator = DeepSpeedZero3Workload if config.stage == 3 else DeepSpeedZero12Workload
    return generator(job, config)

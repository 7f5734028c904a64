"""Megatron-LM training workloads: every collective and computation of one iteration of one
pipeline rank (tensor-parallel rank 0, data-parallel rank 0 of that stage), in execution order.

References (Megatron-LM core_r0.8): ``megatron/training/training.py`` (``pretrain``, ``train_step``),
``pretrain_gpt.py`` (``get_batch``, ``loss_func``), ``megatron/training/utils.py``
(``get_batch_on_this_tp_rank``), ``core/pipeline_parallel/schedules.py``,
``core/distributed/finalize_model_grads.py``, ``core/distributed/param_and_grad_buffer.py`` and
``core/optimizer`` (gradient clipping, distributed optimizer).
"""

from __future__ import annotations

from dataclasses import dataclass

from mocked_model.base import MockedModule, comm
from mocked_model.megatron import MegatronChunk, chunk_layout, optimizer_item
from mocked_model.megatron_layers import MegatronContext
from mocked_model.mtp import chunk_mtp_layers
from utils.config import JobConfig
from utils.errors import ConfigError
from utils.workload import CommGroup, CommType, WorkItem, Workload
from workload_generator.buckets import Bucket, default_bucket_size, forward_key, grad_buckets
from workload_generator.generator import WorkloadGenerator, p2p_items
from workload_generator.limits import check_megatron
from workload_generator.schedules import Step, pipeline_schedule


@dataclass(frozen=True)
class GradBuffer:
    """A gradient buffer: its reduction group, the group's size, and its buckets."""

    group: CommGroup
    size: int
    buckets: list[Bucket]


AR, AG, RS, BC, BARRIER = (CommType.all_reduce, CommType.all_gather, CommType.reduce_scatter, CommType.broadcast,
                           CommType.barrier)


class MegatronWorkload(WorkloadGenerator):
    """The workload of pipeline rank ``pp_rank`` (default ``--pp_rank``) of a Megatron job.

    ``chunk_factory`` builds the model chunks (the MoE and DeepSeek generators pass their own).
    """

    name = "megatron"

    def __init__(self, job: JobConfig, pp_rank: int | None = None, chunk_factory=None) -> None:
        p = job.parallel
        self.pp_rank = p.pp_rank if pp_rank is None else pp_rank
        if not 0 <= self.pp_rank < p.pp:
            raise ConfigError(f"--pp_rank {self.pp_rank} is outside 0..{p.pp - 1}")
        check_megatron(job, [self.pp_rank])  # before the layers are built: their number is what the estimate refuses
        super().__init__(job, rank=p.rank_generator().rank_at(pp=self.pp_rank))
        self.ctx = MegatronContext.of(job)
        factory = chunk_factory or MegatronChunk
        mtp = chunk_mtp_layers(job, self.pp_rank)
        self.chunks: list[MegatronChunk] = [
            factory(job, first, count, pre, post, self.ctx, mtp_layers=mtp[c])
            for c, (first, count, pre, post) in enumerate(chunk_layout(job, self.pp_rank))
        ]
        self.tied = not job.model.untie_embeddings_and_output_weights
        # the word embedding's copies stay in sync over the embedding group when they are tied to the output layer or
        # looked up again by MTP layers (finalize_model_grads.py's _get_shared_word_embedding_weight)
        stages = p.embedding_group_stages()
        self.embedding_group = len(stages) if p.pp > 1 and self.pp_rank in stages else 0
        self.syncs_embedding = (self.tied or job.model.mtp_num_layers > 0) and self.embedding_group > 1
        if self.syncs_embedding:
            for chunk in self.chunks:
                for param in chunk.parameters():
                    if param.shared_copy or param.name == "embedding.word_embeddings.weight":
                        param.shared_embedding = True
        self.buffers = [self._buffers(chunk, c) for c, chunk in enumerate(self.chunks)]
        self._batch_cache: dict[int, list[WorkItem]] = {}
        self._p2p_cache: dict[tuple[str, tuple[str, ...]], list[WorkItem]] = {}
        self._synced_backward: dict[int, list[WorkItem]] = {}
        self._bucket_items: dict[tuple, list[WorkItem]] = {}
        self._optimizer = optimizer_item(job, self.chunks)

    # ---- sizes ----------------------------------------------------------------------------------

    @property
    def scatter_gather(self) -> bool:
        """Legacy Megatron-LM's p2p optimisation (``--scatter_gather_tensors_in_pipeline``, without SP):
        each TP rank sends its 1/tp slice of the activation; the receiver all-gathers it over TP."""
        c = self.ctx
        return self.job.training.scatter_gather_tensors_in_pipeline and c.tp > 1 and not c.sp

    @property
    def p2p_bytes(self) -> int:
        """One pipeline activation: ``seq * micro_batch * hidden * dtype`` (``seq / tp`` with SP, and 1/tp
        of it with the scatter-gather optimisation)."""
        c = self.ctx
        full = c.seq_local * c.micro * c.hidden * c.dtype_bytes
        return full // c.tp if self.scatter_gather else full

    def _gather_received(self, phase: str) -> list[WorkItem]:
        """``gather_split_1d_tensor`` after a scatter-gather receive: a TP all-gather of the activation."""
        if not self.scatter_gather:
            return []
        key = ("gather", phase)
        items = self._p2p_cache.get(key)
        if items is None:
            c = self.ctx
            items = self._p2p_cache[key] = [comm(AG, CommGroup.tp_group, c.tp, c.seq * c.micro * c.hidden * c.dtype_bytes,
                                                 f"{phase}.gather_split_1d_tensor")]
        return items

    def _bucket_size(self, chunk: int = 0) -> int | None:
        """Megatron's bucket size in elements: one bucket per buffer without ``--overlap_grad_reduce``, on every
        pipeline rank but the first, and for every model chunk but the first (``get_model``'s
        ``disable_bucketing=(model_chunk_idx > 0)``, core_r0.8 on)."""
        p, t = self.job.parallel, self.job.training
        if not t.overlap_grad_reduce or self.pp_rank > 0 or chunk > 0:
            return None
        return t.ddp_bucket_size or default_bucket_size(p.dp)

    def _buffers(self, chunk: MockedModule, index: int = 0) -> list[GradBuffer]:
        """The chunk's gradient buffers: dense parameters over DP, expert parameters over expert-DP
        (Megatron's ``buffers`` and ``expert_parallel_buffers``), each cut into buckets."""
        p, t = self.job.parallel, self.job.training
        params = list(chunk.parameters())
        shared = frozenset(q.name for q in params if q.shared_embedding)
        out = []
        # dense gradients reduce over the data-parallel group with context parallelism (Megatron's DDP:
        # get_data_parallel_group(with_context_parallel=True)); the expert-DP group already spans the CP ranks
        dense = (CommGroup.dp_cp_group, p.dp * p.cp) if p.cp > 1 else (CommGroup.dp_group, p.dp)
        for group, size, members in ((*dense, [q for q in params if not q.is_expert]),
                                     (CommGroup.ep_dp_group, p.expert_dp, [q for q in params if q.is_expert])):
            if members:
                buckets = grad_buckets(members, size, self._bucket_size(index), t.use_distributed_optimizer, shared)
                out.append(GradBuffer(group, size, buckets))
        return out

    # ---- init -----------------------------------------------------------------------------------

    def init(self, out: list[WorkItem]) -> None:
        """``initialize_megatron`` and ``pretrain`` setup: the compile barrier, the start-time
        all-reduce (fp64, MIN), ``print_datetime`` barriers, and the tied-embedding sync between the
        first and last stage (``setup_embeddings_and_output_layer``)."""
        p = self.job.parallel
        if p.world_size == 1:
            return
        world = CommGroup.all_nodes
        out.append(comm(BARRIER, world, p.world_size, 0, "init.compile_dependencies"))
        out.append(comm(AR, world, p.world_size, 8, "init.start_time"))
        out.append(comm(BARRIER, world, p.world_size, 0, "init.print_datetime"))
        if self.syncs_embedding and any(c.shares_embedding for c in self.chunks):
            out.append(comm(AR, CommGroup.embedding_group, self.embedding_group, self._embedding_numel() * self.ctx.dtype_bytes,
                            "init.setup_embeddings_and_output_layer"))
        out.append(comm(BARRIER, world, p.world_size, 0, "init.print_datetime"))
        out.append(comm(BARRIER, world, p.world_size, 0, "init.print_datetime"))

    def _embedding_numel(self) -> int:
        return self.job.padded_vocab_size // self.ctx.tp * self.job.model.hidden_size

    # ---- one iteration --------------------------------------------------------------------------

    def schedule(self) -> list[Step]:
        p = self.job.parallel
        return pipeline_schedule(p.pp, self.pp_rank, p.ga, len(self.chunks))

    def forward(self, out: list[WorkItem], step: Step) -> None:
        chunk = self.chunks[step.chunk]
        if not chunk.pre_process:
            out.extend(self._gather_received("forward_step"))
        out.extend(self._get_batch(step.chunk))
        out.extend(chunk.forward_items())

    def backward(self, out: list[WorkItem], step: Step) -> None:
        chunk = self.chunks[step.chunk]
        if not chunk.post_process:
            out.extend(self._gather_received("backward_step"))
        if self.job.training.overlap_grad_reduce and step.microbatch == self.job.parallel.ga - 1:
            out.extend(self._backward_with_grad_sync(step.chunk))
        else:
            out.extend(chunk.backward_items())

    def step_key(self, step: Step) -> tuple:
        """Forward items depend on the model chunk only; backward items on the chunk and, with
        ``--overlap_grad_reduce``, on whether the step is the last micro-batch's (bucket reductions)."""
        if step.kind == "F":
            return ("F", step.chunk)
        if step.kind == "B":
            last = self.job.training.overlap_grad_reduce and step.microbatch == self.job.parallel.ga - 1
            return ("B", step.chunk, last)
        return ("P2P", step.name, step.ops)

    @classmethod
    def stage_signature(cls, job: JobConfig, pp_rank: int) -> tuple:
        """What the items of pipeline rank ``pp_rank`` depend on besides layer indices and p2p peers:
        per model chunk its layer count, embedding and output flags and each layer's kind (dense or
        MoE), and whether it is the first rank (which alone cuts its gradients into Megatron's
        buckets).  Every other input is the job's.  ``tests/test_simulator_stages.py`` checks that
        stages with equal signatures generate equal items, layer indices renumbered."""
        model = job.model
        mtp = chunk_mtp_layers(job, pp_rank)
        chunks = tuple((count, pre, post, tuple(model.is_moe_layer(first + k) for k in range(count)), mtp[c],
                        model.mtp_num_layers > 0 and count > 0 and first + count == model.num_layers)
                       for c, (first, count, pre, post) in enumerate(chunk_layout(job, pp_rank)))
        stages = job.parallel.embedding_group_stages()
        return (cls, chunks, pp_rank == 0, pp_rank in stages)

    def layer_ranges(self) -> list[tuple[int, int]]:
        return [(chunk.first_layer, chunk.num_layers) for chunk in self.chunks]

    def p2p(self, out: list[WorkItem], step: Step) -> None:
        key = (step.name, step.ops)
        items = self._p2p_cache.get(key)
        if items is None:
            items = self._p2p_cache[key] = p2p_items(step, self.p2p_bytes, self.job.parallel.pp, self.pp_rank)
        out.extend(items)

    def _get_batch(self, index: int) -> list[WorkItem]:
        """``get_batch_on_this_tp_rank``: TP rank 0 broadcasts the batch tensors the stage needs."""
        cached = self._batch_cache.get(index)
        if cached is not None:
            return cached
        chunk, c, p = self.chunks[index], self.ctx, self.job.parallel
        items: list[WorkItem] = []
        mtp = bool(getattr(chunk, "mtp_layers", None))
        if c.tp > 1 and (chunk.pre_process or chunk.post_process or mtp):
            b, s = c.micro, c.seq_full  # the whole sequence: get_batch_on_this_cp_rank slices it after the broadcasts
            mask = self.job.training.extra.get("no_create_attention_mask_in_dataloader") is not True
            tensors = {"tokens": b * s * 8, "labels": b * s * 8, "loss_mask": b * s * 4,
                       "attention_mask": b * s * s if mask else 0, "position_ids": b * s * 8}
            if p.pp == 1 or mtp:  # an MTP stage looks up the shifted tokens (get_batch_on_this_tp_rank's mtp_on_this_rank)
                names = ["tokens", "labels", "loss_mask", "attention_mask", "position_ids"]
            elif chunk.pre_process:
                names = ["tokens", "attention_mask", "position_ids"]
            else:
                names = ["labels", "loss_mask", "attention_mask"]
            for name in names:
                if tensors[name]:
                    items.append(comm(BC, CommGroup.tp_group, c.tp, tensors[name], "forward_step.get_batch", src=0))
        self._batch_cache[index] = items
        return items

    def _grad_collectives(self, index: int, buffer: GradBuffer, buckets: list[Bucket], stage: str) -> list[WorkItem]:
        if buffer.size == 1:
            return []
        ctype = RS if self.job.training.use_distributed_optimizer else AR
        grad_bytes = self.job.training.grad_bytes
        return [comm(ctype, buffer.group, buffer.size, b.numel * grad_bytes, stage, meta={"bucket": b.index, "chunk": index})
                for b in buckets]

    def closing_buckets(self, index: int) -> dict[str, list[tuple[GradBuffer, Bucket]]]:
        """Buckets of chunk ``index`` keyed by the parameter whose gradient completes them."""
        closing: dict[str, list[tuple[GradBuffer, Bucket]]] = {}
        for buffer in self.buffers[index]:
            for bucket in buffer.buckets:
                closing.setdefault(bucket.last_param, []).append((buffer, bucket))
        return closing

    def bucket_collectives(self, index: int, buffer: GradBuffer, bucket: Bucket) -> list[WorkItem]:
        """The reduction of one bucket issued from backward (``--overlap_grad_reduce``), cached so that
        every view of the workload shares the item."""
        key = (index, buffer.group, bucket.index)
        items = self._bucket_items.get(key)
        if items is None:
            items = self._bucket_items[key] = self._grad_collectives(index, buffer, [bucket], "backward.overlap_grad_reduce")
        return items

    def _backward_with_grad_sync(self, index: int) -> list[WorkItem]:
        """The last micro-batch's backward of a chunk with ``--overlap_grad_reduce``: each bucket's
        reduction is issued as soon as its last parameter's gradient is produced."""
        cached = self._synced_backward.get(index)
        if cached is not None:
            return cached
        closing = self.closing_buckets(index)
        out: list[WorkItem] = []
        for module, items in self.chunks[index].backward_segments():
            out.extend(items)
            for param in module.params:
                for buffer, bucket in closing.get(param.name, ()):
                    out.extend(self.bucket_collectives(index, buffer, bucket))
        self._synced_backward[index] = out
        return out

    def step(self, out: list[WorkItem]) -> None:
        """``finalize_model_grads`` then the optimizer step."""
        t, c = self.job.training, self.ctx
        if not t.overlap_grad_reduce:
            for index, buffers in enumerate(self.buffers):
                for buffer in buffers:
                    out.extend(self._grad_collectives(index, buffer, buffer.buckets, "step.finish_grad_sync"))
        if c.tp > 1:
            sp_numel = sum(q.numel for chunk in self.chunks for q in chunk.parameters() if q.sequence_parallel)
            if sp_numel:
                out.append(comm(AR, CommGroup.tp_group, c.tp, sp_numel * t.grad_bytes, "step._allreduce_layernorm_grads"))
        if self.syncs_embedding and any(chunk.shares_embedding for chunk in self.chunks):
            out.append(comm(AR, CommGroup.embedding_group, self.embedding_group, self._embedding_numel() * t.grad_bytes,
                            "step._allreduce_word_embedding_grads"))
        self.optimizer_step(out)

    def optimizer_step(self, out: list[WorkItem]) -> None:
        """Gradient-norm all-reduce (fp32; over the model-parallel group, or every rank with the
        distributed optimizer), fp16's overflow check, and the distributed optimizer's parameter
        all-gather per bucket."""
        p, t = self.job.parallel, self.job.training
        dist_opt = t.use_distributed_optimizer
        group, size = (CommGroup.all_nodes, p.world_size) if dist_opt else (CommGroup.mp_group, p.tp * p.pp)
        if t.dtype.lower() in ("float16", "fp16") and size > 1:
            out.append(comm(AR, group, size, 4, "step._unscale_main_grads_and_check_for_nan"))
        if size > 1:
            out.append(comm(AR, group, size, 4, "step.clip_grad_norm"))
        if self.ctx.compute:
            out.append(self._optimizer)
        if dist_opt:
            overlap = t.overlap_param_gather
            layers = self.job.model.num_layers
            for index, buffers in enumerate(self.buffers):
                for buffer in buffers:
                    if buffer.size > 1:
                        # --overlap_param_gather: the next forward gathers bucket by bucket in forward order (the last
                        # bucket first: buckets fill in reverse registration order), each before the first module that
                        # uses it (DDP's forward pre-hooks); the items carry that module's layer key
                        buckets = reversed(buffer.buckets) if overlap else buffer.buckets
                        out.extend(comm(AG, buffer.group, buffer.size, b.numel * self.ctx.dtype_bytes, "step.param_all_gather",
                                        meta={"bucket": b.index, "chunk": index,
                                              **({"overlap": "param_gather", "need": forward_key(b.last_param, layers)}
                                                 if overlap else {})}) for b in buckets)

    # ---- views ----------------------------------------------------------------------------------

    def num_params(self) -> int:
        """Parameters this rank holds (shared copies included: they occupy memory and buffers)."""
        return sum(q.numel for chunk in self.chunks for q in chunk.parameters())


def megatron_pipeline(job: JobConfig, generator_class=MegatronWorkload) -> list[Workload]:
    """The workload of every pipeline stage (tp rank 0, dp rank 0 of each), for the simulator."""
    return [generator_class(job, pp_rank=stage)() for stage in range(job.parallel.pp)]

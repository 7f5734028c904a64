"""What a layout search computes once and shares between layouts: the stage shapes of each parameter split,
each distinct model chunk's compute price, and from them every layout's memory and lower bound.

A search of Llama 3 405B on 16,384 GPUs looks at 2,586 layouts; they differ in a handful of sizes, and most of what
each one needs is the same as another's:

- a pipeline stage's parameters depend on the tensor, expert and pipeline split, not on the micro-batch, the
  recomputation or the data-parallel size, so :func:`memory_estimate` builds each split's stage shapes once
  (:func:`mocked_model.memory.megatron_stage_shapes`) and prices only the first stage of each distinct shape: a
  later stage of the same shape holds fewer micro-batches in flight (1F1B's ``p - s``, the interleaved warm-up's
  ``2(p - s - 1) + ...``), never more, so it can never be the most loaded one;
- a model chunk's computation (its forward and backward kernels, recomputation included) depends on the per-rank
  sizes (:class:`mocked_model.megatron_layers.MegatronContext`), its layer count and kinds, whether it holds the
  embedding or the loss, and the recomputation, so :class:`ChunkPrices` prices each distinct chunk once per
  search with the compute model the simulation uses.

The lower bound (:meth:`ChunkPrices.bound_s`) is the pipeline's critical chain, computation only.  Stage ``s``
cannot start its first forward (chunk 0, micro-batch 0) before stages ``0 .. s-1`` have run that micro-batch's
chunk-0 forward, it then runs all of its own steps one after another on its compute stream, and stage 0 cannot end
before the last micro-batch's chunk-0 backward has come back down through stages ``s-1 .. 0`` (1F1B and Megatron's
interleaved schedule both end every stage on chunk 0's last backward), after which it runs its optimizer step::

    T  >=  max over s of [ sum_{j<s} F0_j  +  W_s  +  max(opt_s, sum_{j<s} B0_j + opt_0) ]

where ``W_s = ga x sum over chunks (F + B)``.  With a :class:`simulator.search.comm.CommFloor` of the layout's
topology, ``F`` and ``B`` also hold the chunk's blocking collectives, ``W_s`` each P2P step's longest send, and each
hop of the chain its transfer: the communication the engine never hides.  Every other collective, SM contention,
host launch and wait only adds to it, so no simulation can come out faster (``tests/test_search_speed.py`` checks it
against full simulations).  For Llama 3 405B on 16,384 H100 it is 95% of the simulated time at the median over the
458 layouts that fit (85% from computation alone; the previous bound, the busiest stage's computation plus the
forward fill, was 26%); for Llama 3 70B on 1,024 H100, 96% over 2,018 layouts (88% from computation alone), and the
layouts that must be simulated to find the best 20 fall from 290 to 93.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mocked_model.memory import GIB, MemoryEstimate

BOUND_SLACK = 1e-9
"""Relative margin taken off every bound: the engine adds the same durations in another order (float rounding,
below a nanosecond on a 10 s iteration), so a bound equal to a layout's time must not prune it."""


def _split_key(job: Any) -> tuple:
    """What a pipeline stage's parameters depend on besides the model: the tensor, expert and pipeline split and the
    layers of each virtual stage (Megatron's uneven first and last stages, interleaving, a fixed layout)."""
    p = job.parallel
    return (p.tp, p.ep, p.expert_tp, p.cp, p.sequence_parallel, p.pp, tuple(p.virtual_stage_layers(job.model.num_layers)),
            str(p.layout) if p.layout is not None else None, job.training.dtype, job.padded_vocab_size)


class SearchCache:
    """One search's shared work (one per process: the workers of a pool each keep their own).

    ``gpu``: the GPU type whose compute model prices the chunks and whose memory the layouts must fit.
    """

    def __init__(self, gpu: str) -> None:
        self.gpu = gpu
        self._shapes: dict[tuple, list] = {}
        self._chunks: dict[tuple, tuple[float, float]] = {}
        self._optimizer: dict[tuple, float] = {}
        self._estimators: dict[tuple, Any] = {}
        self._layouts: dict[tuple, tuple[list[tuple], dict[tuple, tuple]]] = {}
        self.classify: Any = None
        self.blocking_kind: Any = None
        self.prices: dict = {}
        """The compute model's price of each distinct operation (:func:`mocked_model.compute.estimator`'s cache)."""

    # ---- memory -------------------------------------------------------------------------------------

    def stage_shapes(self, job: Any) -> list:
        """:func:`mocked_model.memory.megatron_stage_shapes` of the job, built once per parameter split."""
        from mocked_model.memory import megatron_stage_shapes

        key = _split_key(job)
        shapes = self._shapes.get(key)
        if shapes is None:
            from workload_generator.limits import check_mtp

            check_mtp(job)  # (the shapes build each MTP layer: --mtp_num_layers 1e9 ran out of memory)
            shapes = self._shapes[key] = megatron_stage_shapes(job)
        return shapes

    def memory_estimate(self, job: Any) -> MemoryEstimate:
        """The job's memory with the first stage of each distinct shape: its :attr:`~MemoryEstimate.most_loaded`,
        :attr:`~MemoryEstimate.fits` and :meth:`~MemoryEstimate.summary` are those of
        :func:`mocked_model.memory.estimate_memory` (a later stage of the same shape holds no more micro-batches in
        flight, and ties go to the earlier stage there too)."""
        from mocked_model.compute import gpu_spec, known_gpu
        from mocked_model.memory import estimate_memory, stage_memory

        if job.training.frame == "DeepSpeed":
            return estimate_memory(job, self.gpu)
        seen: set = set()
        stages = []
        for s, shape in enumerate(self.stage_shapes(job)):
            if shape not in seen:
                seen.add(shape)
                stages.append(stage_memory(job, s, shape))
        spec = gpu_spec(self.gpu) if known_gpu(self.gpu) else None
        return MemoryEstimate(stages, spec.memory_gib if spec else None, spec.name if spec else None)

    # ---- computation --------------------------------------------------------------------------------

    def _estimate(self, job: Any):
        """The compute model's GPU time of an item (ns), without host launch costs: whether the host or the GPU is
        the slower, and however the engine plays the host (:mod:`simulator.topo.host_model`), a kernel takes at least
        its GPU time, so the bound stays below the simulation."""
        from mocked_model.compute import estimator

        t = job.training
        key = (t.gpu_type or self.gpu, t.dtype)
        found = self._estimators.get(key)
        if found is None:
            try:
                found = estimator(key[0], t.dtype, self.prices, 0.0, gpu_only=True)
            except TypeError:  # a compute model without the host split: no host time at 0 us per launch
                found = estimator(key[0], t.dtype, self.prices, 0.0)
            self._estimators[key] = found
        return found

    def _price(self, job: Any, module: Any) -> tuple[float, float, tuple, tuple]:
        """(forward, backward) seconds of a mocked module's computation items (the backward with recomputation), and
        its blocking collectives of each, as ``(group, type, bytes, scale)`` (:mod:`simulator.search.comm`)."""
        estimate = self._estimate(job)
        forward = sum(estimate(i) or 0.0 for i in module.forward_items() if i.is_computation)
        backward = sum(estimate(i) or 0.0 for i in module.backward_items() if i.is_computation)
        ops = self._blocking(job, module)
        return forward * 1e-9, backward * 1e-9, ops[0], ops[1]

    def _blocking(self, job: Any, module: Any) -> tuple[tuple, tuple]:
        if self.classify is None:
            from simulator.search.comm import _classifier

            self.classify, self.blocking_kind = _classifier()
            if self.classify is None:
                self.classify = False
        if not self.classify:
            return (), ()
        out = []
        for phase, items in (("fwd", module.forward_items()), ("bwd", module.backward_items())):
            ops = []
            for item in items:
                if item.is_computation:
                    continue
                op = self.classify(item, phase, job.training.tp_comm_overlap)
                if op is not None and op.kind == self.blocking_kind and op.comm_type and not getattr(op, "deepep", None):
                    ops.append((op.group, op.comm_type, op.size, op.scale))
            out.append(tuple(ops))
        return out[0], out[1]

    def chunk_times(self, job: Any, ctx: Any, first: int, count: int, pre: bool, post: bool, mtp: int) -> tuple:
        """(forward, backward) seconds of one micro-batch through one model chunk, computation only (the backward
        with its recomputation), and the chunk's blocking collectives in each.  A chunk's items are its children's
        one after another (the embedding, the layers, the final norm, output layer and loss), so without MTP layers
        it is priced as its layers (one of each kind, priced once) plus the same chunk without layers; with them,
        whole, once per distinct chunk."""
        from mocked_model.megatron import MegatronChunk, TransformerLayer

        m, p, t = job.model, job.parallel, job.training
        # the data-parallel size decides only a collective of the loss, never a computation: layouts that differ in it
        # share the computation's prices (the collectives are priced per layout, on its groups)
        common = (replace(ctx, dp=1), t.recompute, p.ep, p.expert_tp, t.dtype, t.gpu_type, job.padded_vocab_size,
                  t.tp_comm_overlap, ctx.dp > 1)
        moe = tuple(m.is_moe_layer(first + k) for k in range(count))
        whole = (common, "chunk", count, pre, post, mtp, moe, first + count == m.num_layers)
        found = self._chunks.get(whole)
        if found is not None:  # (the same tuples each time: their sums on a stage are kept by identity)
            return found
        if mtp or m.mtp_num_layers:
            key = (common, count, pre, post, mtp, moe, first + count == m.num_layers)
            hit = self._chunks.get(key)
            if hit is None:
                hit = self._chunks[key] = self._price(job, MegatronChunk(job, first, count, pre, post, ctx, mtp_layers=mtp))
            return hit
        rest_key = (common, "rest", pre, post)
        rest = self._chunks.get(rest_key)
        if rest is None:  # (a chunk of nothing but layers has no rest; an empty module cannot be walked)
            rest = self._chunks[rest_key] = self._price(job, MegatronChunk(job, first, 0, pre, post, ctx, mtp_layers=0)) \
                if pre or post else (0.0, 0.0, (), ())
        forward, backward, fops, bops = rest
        for k, kind in enumerate(moe):
            layer_key = (common, "layer", kind)
            layer = self._chunks.get(layer_key)
            if layer is None:
                layer = self._chunks[layer_key] = self._price(job, TransformerLayer(ctx, job, first + k))
            forward, backward, fops, bops = forward + layer[0], backward + layer[1], fops + layer[2], bops + layer[3]
        found = self._chunks[whole] = (forward, backward, fops, bops)
        return found

    def optimizer_s(self, job: Any, chunks: tuple) -> float:
        """Seconds of a stage's optimizer step (:func:`mocked_model.megatron.optimizer_item`), priced once per
        distinct (parameter split, stage composition, optimizer)."""
        from mocked_model.megatron import MegatronChunk, optimizer_item

        p, t = job.parallel, job.training
        key = (_split_key(job), tuple(chunks), t.use_distributed_optimizer, p.dp, p.expert_dp, t.gpu_type, t.dtype,
               t.loss_scaling, t.grad_bytes)
        hit = self._optimizer.get(key)
        if hit is None:
            from mocked_model.megatron_layers import MegatronContext

            ctx = MegatronContext.of(job)
            modules = [MegatronChunk(job, first, count, pre, post, ctx, mtp_layers=mtp) for first, count, pre, post, mtp
                       in chunks]
            hit = self._optimizer[key] = (self._estimate(job)(optimizer_item(job, modules)) or 0.0) * 1e-9
        return hit

    def _stage_chunks(self, job: Any) -> tuple[list[tuple], dict[tuple, tuple]]:
        """Each stage's chunks as kinds ``(layers, embedding, loss, MTP layers, each layer's MoE flag, holds the last
        decoder layer)`` (what a chunk's computation and parameters depend on), and one chunk ``(first layer, layers,
        embedding, loss, MTP layers)`` of each kind; once per parameter split."""
        from mocked_model.megatron import chunk_layout
        from mocked_model.mtp import chunk_mtp_layers

        key = _split_key(job)
        found = self._layouts.get(key)
        if found is None:
            m = job.model
            stages: list[tuple] = []
            kinds: dict[tuple, tuple] = {}
            for s in range(job.parallel.pp):
                mtp = chunk_mtp_layers(job, s)
                own = []
                for c, (first, count, pre, post) in enumerate(chunk_layout(job, s)):
                    kind = (count, pre, post, mtp[c], tuple(m.is_moe_layer(first + k) for k in range(count)),
                            first + count == m.num_layers)
                    kinds.setdefault(kind, (first, count, pre, post, mtp[c]))
                    own.append(kind)
                stages.append(tuple(own))
            found = self._layouts[key] = (stages, kinds)
        return found

    def bound_s(self, job: Any, floor: Any = None) -> float:
        """A lower bound on the job's simulated iteration (seconds): the critical chain of the module docstring.
        ``floor`` (a :class:`simulator.search.comm.CommFloor` of the layout's topology) adds the communication the
        engine never hides: blocking collectives, P2P steps' sends, the chain's transfers."""
        from mocked_model.megatron_layers import MegatronContext

        ctx = MegatronContext.of(job)
        p = job.parallel
        stages, kinds = self._stage_chunks(job)
        times_of = {kind: self.chunk_times(job, ctx, *chunk) for kind, chunk in kinds.items()}
        compute = job.training.computation_enable
        optimizer = {s: self.optimizer_s(job, tuple(kinds[k] for k in s)) if compute else 0.0 for s in set(stages)}
        ga = p.ga
        sends = floor.p2p_steps(p.pp, ga, len(stages[0])) if floor is not None else []
        place = floor.placement(job) if floor is not None else None
        size = p2p_bytes(job) if sends else 0
        head = tail = 0.0
        first_opt = optimizer[stages[0]]
        best = 0.0
        for s, chunks in enumerate(stages):
            times = [times_of[c] for c in chunks]
            if place is not None:
                forwards = [f + place.collectives_s(s, fops) for f, _, fops, _ in times]
                backwards = [b + place.collectives_s(s, bops) for _, b, _, bops in times]
            else:
                forwards = [f for f, _, _, _ in times]
                backwards = [b for _, b, _, _ in times]
            work = ga * (sum(forwards) + sum(backwards))
            if sends:
                only_next, only_prev, both = sends[s]
                nxt = place.send_s(s, "send_next", size) if only_next or both else 0.0
                prev = place.send_s(s, "send_prev", size) if only_prev or both else 0.0
                work += only_next * nxt + only_prev * prev + both * max(nxt, prev)
            best = max(best, head + work + max(optimizer[chunks], tail + first_opt))
            # the next stage's first forward waits for this one's and its transfer; this one's last backward for the
            # next stage's and the gradient's transfer back
            last = s + 1 == p.pp
            head += forwards[0] + (place.send_s(s, "send_next", size) if sends and not last else 0.0)
            tail += backwards[0] + (place.send_s(s + 1, "send_prev", size) if sends and not last else 0.0)
        return best * (1.0 - BOUND_SLACK)


def p2p_bytes(job: Any) -> int:
    """One pipeline activation in bytes, as :attr:`workload_generator.megatron.MegatronWorkload.p2p_bytes` (the local
    sequence, ``/ tp`` under SP, x micro-batch x hidden x dtype; ``/ tp`` again with Megatron-LM's scatter-gather p2p)
    gives it; ``tests/test_search_speed.py`` holds the two equal."""
    from mocked_model.megatron_layers import MegatronContext

    c = MegatronContext.of(job)
    full = c.seq_local * c.micro * c.hidden * c.dtype_bytes
    scatter = job.training.scatter_gather_tensors_in_pipeline and c.tp > 1 and not c.sp
    return full // c.tp if scatter else full


def memory_gib(estimate: MemoryEstimate) -> float:
    """GiB of the most loaded GPU."""
    return estimate.most_loaded.total_bytes / GIB

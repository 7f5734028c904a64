"""DeepSeek-V3's multi-token prediction (``--mtp_num_layers``) as Megatron-core runs it.

Reference: Megatron-LM ``megatron/core/transformer/multi_token_prediction.py`` (``MultiTokenPredictionLayer``:
``_get_embeddings``, ``_concat_embeddings``, ``_proj_and_transformer_layer``, ``_postprocess``;
``process_mtp_loss``; ``get_mtp_num_layers_to_build``), ``megatron/core/models/gpt/gpt_model.py`` (the embedding is
built on every stage that holds MTP layers; MTP runs after the decoder, then the MTP losses, then the main loss) and
the DeepSeek-V3 Technical Report (arXiv 2412.19437), section 2.2.

MTP layer ``k`` (0-based) of a micro-batch, on the stage that holds it (the last virtual stage, or the layout's
``m``):

1. the embedding lookup of the tokens shifted by ``k + 1`` (``roll_tensor``; the shared word embedding, with the
   embedding's TP all-reduce, or reduce-scatter under sequence parallelism);
2. ``enorm`` on that embedding and ``hnorm`` on the previous depth's hidden states (RMSNorm, ``h`` wide, on the
   local sequence), concatenated to ``2h``;
3. ``eh_proj``: a column-parallel linear ``2h -> h`` (``gather_output=False``: under sequence parallelism its input is
   all-gathered as every column-parallel linear's), then ``gather_from_tensor_model_parallel_region`` (an all-gather
   of the ``h / tp`` outputs) and ``scatter_to_sequence_parallel_region`` (a local split; backward: an all-gather);
4. one transformer layer of the model's spec (DeepSeek-V3's MTP layer is an MoE layer, as its last decoder layer);
5. its own final norm;
6. on the post-process stage: the shared output layer on those hidden states and a vocab-parallel cross entropy
   (its three TP all-reduces), scaled by ``mtp_loss_scaling_factor / mtp_num_layers``.

The MTP layer's modules carry layer number ``num_layers + k`` (DeepSeek-V3's released checkpoint calls its MTP
module layer 61), so the simulator's per-layer tables list it after the decoder.  Megatron-LM's
``num_floating_point_operations`` counts each MTP layer as one more transformer layer (MoE when the last decoder
layer is), plus the norms, the ``2h x h`` projection and one more logit GEMM (:mod:`mocked_model.flops`).
"""

from __future__ import annotations

from collections.abc import Callable

from mocked_model.base import MockedModule, MockedParam, comm, compute
from mocked_model.megatron_layers import AG, TP, ColumnParallelLinear, MegatronContext, _meta, norm
from utils.config import JobConfig
from utils.workload import WorkItem


class EmbeddingCopy(MockedModule):
    """The word embedding an MTP stage that is not the first builds for its lookups (``GPTModel`` builds
    ``self.embedding`` where ``mtp_process``): a copy of the first stage's, synchronised over the embedding group.
    It holds the parameter only; the lookups are the MTP layers' items."""

    def __init__(self, ctx: MegatronContext, job: JobConfig) -> None:
        super().__init__("embedding")
        self.params.append(MockedParam("embedding.word_embeddings.weight",
                                       (job.padded_vocab_size // ctx.tp, job.model.hidden_size), shared_copy=True))

    def build_forward(self, phase: str) -> list[WorkItem]:
        return []

    def build_backward(self) -> list[WorkItem]:
        return []


class _Lookup(MockedModule):
    """The MTP layer's embedding lookup of the shifted tokens: the chunk's embedding module's items (its TP
    collective included), without parameters of its own (the weight is the embedding's)."""

    def __init__(self, embedding: MockedModule, name: str) -> None:
        super().__init__(name)
        self.embedding = embedding

    def build_forward(self, phase: str) -> list[WorkItem]:
        return self.embedding.build_forward(phase)

    def build_backward(self) -> list[WorkItem]:
        return self.embedding.build_backward()


class _Concat(MockedModule):
    """``torch.cat((enorm(e), hnorm(h)), -1)``: one copy kernel reading both halves and writing ``2h`` forward;
    backward splits the gradient by views (no kernel)."""

    def __init__(self, ctx: MegatronContext, name: str, layer: int) -> None:
        super().__init__(name)
        self.ctx, self.layer = ctx, layer

    def build_forward(self, phase: str) -> list[WorkItem]:
        c = self.ctx
        if not c.compute:
            return []
        return [compute(f"{phase}.MegatronMTPConcat.{self.name}", ((c.seq_local, c.micro, 2 * c.hidden),), None,
                        _meta(self.layer, "mtp", "copy", self.name))]

    def build_backward(self) -> list[WorkItem]:
        return []


class _GatherScatter(MockedModule):
    """``gather_from_tensor_model_parallel_region`` after ``eh_proj`` (forward: all-gather of the ``h / tp``
    outputs along the hidden dimension; backward: a split) and, under sequence parallelism,
    ``scatter_to_sequence_parallel_region`` (forward: a split; backward: all-gather along the sequence).  Both
    all-gathers move the whole ``(s, b, h)`` activation."""

    def __init__(self, ctx: MegatronContext, name: str, layer: int) -> None:
        super().__init__(name)
        self.ctx, self.layer = ctx, layer

    def _ag(self, phase: str) -> WorkItem:
        c = self.ctx
        return comm(AG, TP, c.tp, c.act_bytes(c.hidden), f"{phase}.MegatronMTPGather", _meta(self.layer, "mtp", "comm",
                                                                                                  self.name))

    def build_forward(self, phase: str) -> list[WorkItem]:
        return [self._ag(phase)] if self.ctx.tp > 1 else []

    def build_backward(self) -> list[WorkItem]:
        return [self._ag("backward")] if self.ctx.tp > 1 and self.ctx.sp else []


class MTPLayer(MockedModule):
    """One ``MultiTokenPredictionLayer`` (module docstring, steps 1-5): ``embedding`` the chunk's embedding module
    (whose items the lookup repeats), ``layer_factory(ctx, job, layer)`` the model's transformer layer."""

    def __init__(self, ctx: MegatronContext, job: JobConfig, k: int, embedding: MockedModule,
                 layer_factory: Callable[[MegatronContext, JobConfig, int], MockedModule]) -> None:
        super().__init__(f"mtp.layers.{k}")
        model = job.model
        h, layer, p = model.hidden_size, model.num_layers + k, f"mtp.layers.{k}"
        self.k, self.layer = k, layer
        self.transformer = layer_factory(ctx, job, layer)
        self.children = [
            _Lookup(embedding, f"{p}.embedding"),
            norm(ctx, f"{p}.enorm", model.normalization, h, layer, "mtp"),
            norm(ctx, f"{p}.hnorm", model.normalization, h, layer, "mtp"),
            _Concat(ctx, f"{p}.concat", layer),
            ColumnParallelLinear(ctx, f"{p}.eh_proj", 2 * h, h, False, layer, "mtp", label="MegatronMTPProjection"),
            _GatherScatter(ctx, f"{p}.eh_proj_gather", layer),
            self.transformer,
            norm(ctx, f"{p}.final_layernorm", model.normalization, h, layer, "mtp"),
        ]


class MTPLoss(MockedModule):
    """``process_mtp_loss`` for one MTP layer on the post-process stage: the shared output layer (no weight of its own:
    its gradient accumulates into the output layer's) and a vocab-parallel cross entropy; the MTP losses are logged
    through ``MTPLossLoggingHelper`` at the logging interval, not reduced per micro-batch.  ``loss``: the model's
    vocab-parallel cross entropy module."""

    def __init__(self, ctx: MegatronContext, job: JobConfig, k: int, loss: MockedModule) -> None:
        super().__init__(f"mtp.loss.{k}")
        model = job.model
        output = ColumnParallelLinear(ctx, "output_layer", model.hidden_size, job.padded_vocab_size, False, None, "output",
                                      label="MegatronOutputLayer", weight=False, bf16=True)
        self.children = [output, _NoReportLoss(loss)]


class _NoReportLoss(MockedModule):
    """A vocab-parallel cross entropy without the main loss's data-parallel report (``loss_func``'s all-reduce)."""

    def __init__(self, loss: MockedModule) -> None:
        super().__init__(loss.name)
        self.loss = loss

    def build_forward(self, phase: str) -> list[WorkItem]:
        return [i for i in self.loss.build_forward(phase) if i.stage != "forward_step.loss_func"]

    def build_backward(self) -> list[WorkItem]:
        return self.loss.build_backward()


def chunk_mtp_layers(job: JobConfig, pp_rank: int) -> list[int]:
    """MTP layers of each model chunk of a pipeline rank (:func:`mocked_model.megatron.chunk_layout`'s order): the
    layout's ``m`` (``--pipeline_model_parallel_layout``), or all of them on the last virtual stage."""
    p, mtp = job.parallel, job.model.mtp_num_layers
    layout = p.layout
    if layout is not None:
        per_stage = layout.mtp()
    else:
        per_stage = [0] * len(p.virtual_stage_layers(job.model.num_layers))
        per_stage[-1] = mtp
    return [per_stage[u] for u in range(pp_rank, len(per_stage), p.pp)]


def mtp_activation_bytes(job: JobConfig) -> float:
    """Activation bytes one MTP layer keeps besides its transformer layer's (which
    :func:`mocked_model.memory.layer_activation_bytes` counts), per micro-batch and TP rank: the inputs of ``enorm``
    and ``hnorm``, the concatenation (``eh_proj``'s ``2h`` input; under sequence parallelism Transformer Engine keeps
    its local shard) and the final norm's input, each on the local sequence, plus the shifted token ids (int64)."""
    p, t, m = job.parallel, job.training, job.model
    tokens = t.seq_length // p.cp * p.micro_batch
    unsplit = tokens * m.hidden_size / (p.tp if p.sequence_parallel else 1)
    return t.dtype_bytes * unsplit * (1 + 1 + 2 + 1) + 8 * tokens

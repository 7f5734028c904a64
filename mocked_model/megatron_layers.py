"""Building blocks of the mocked Megatron-LM layers, shared by the GPT/LLaMA model
(:mod:`mocked_model.megatron`), multi-latent attention (:mod:`mocked_model.mla`) and the MoE MLP
(:mod:`mocked_model.moe`): the per-rank sizes they need (:class:`MegatronContext`), the tensor-parallel
linears, norms and activations, and core attention.

Communication follows Megatron-LM core (``megatron/core/tensor_parallel/layers.py`` and
``mappings.py``):

- Column-parallel linear: forward all-gathers its input over TP under sequence parallelism (SP);
  backward re-gathers the input for the weight gradient (SP) while it computes the input gradient,
  then reduce-scatters it (SP) or all-reduces it (no SP) while it computes the weight gradient
  (``LinearWithGradAccumulationAndAsyncCommunication``: each collective is launched asynchronously
  and waited for after the GEMM that follows it; such items carry ``meta['overlap'] = 'next'``).
- Row-parallel linear: forward reduce-scatters (SP) or all-reduces (no SP) its output; backward
  all-gathers the output gradient under SP.

A TP collective moves the whole activation: ``seq * micro_batch * width * dtype_bytes`` bytes (for
an all-gather the gathered buffer, for a reduce-scatter the buffer before scattering).
"""

from __future__ import annotations

from dataclasses import dataclass

from mocked_model.base import MockedModule, MockedParam, comm, compute
from utils.config import JobConfig, KernelStack
from utils.context_parallel import cp_levels
from utils.workload import CommGroup, CommType, WorkItem

AG, RS, AR, BC = CommType.all_gather, CommType.reduce_scatter, CommType.all_reduce, CommType.broadcast
RS_SPLITS = 4
"""Chunks Transformer Engine's pipelined GEMM + reduce-scatter overlap cuts a row-parallel forward GEMM into (its
userbuffers ``num_splits`` for ``proj_fprop`` / ``fc2_fprop``, 4 in NeMo's and Megatron-LM's configurations)."""
TP = CommGroup.tp_group


@dataclass(frozen=True)
class MegatronContext:
    """Per-rank sizes every mocked Megatron module needs."""

    tp: int
    sp: bool
    seq: int
    micro: int
    hidden: int
    dtype_bytes: int
    compute: bool
    dp: int = 1
    stack: KernelStack = KernelStack(flash=False)
    attention_dropout: float = 0.0
    hidden_dropout: float = 0.0
    grad_bytes: int = 4
    bias: bool = False
    fp8_recipe: str | None = None
    async_allreduce: bool = True
    tp_comm_overlap: bool = False
    cp: int = 1
    """Context-parallel size: ``seq`` is then this rank's ``1/cp`` of the sequence (:mod:`mocked_model.context_parallel`)."""
    cp_comm: str = "p2p"
    cp_levels: tuple[int, int] = (1, 1)

    @property
    def seq_full(self) -> int:
        """The whole sequence (``seq * cp``): what the data loader's broadcasts carry before the CP split."""
        return self.seq * self.cp

    @property
    def flash(self) -> bool:
        """Whether attention runs a flash/fused kernel (the stack's choice)."""
        return self.stack.flash

    @property
    def wgrad_accumulate(self) -> bool:
        """Whether weight gradients accumulate into the fp32 main gradient in the GEMM's epilogue."""
        return self.stack.wgrad_accumulate

    def linear_meta(self, meta: dict, chunks: int = 1) -> dict:
        """The stack's keys of a linear layer's GEMM items (:mod:`mocked_model.compute.training_ops`); ``chunks``:
        the pieces Transformer Engine's comm-GEMM overlap splits the GEMM into (``--tp_comm_overlap``)."""
        if self.stack.te:
            meta["te"] = True
        if self.fp8_recipe is not None:
            meta["fp8_recipe"] = self.fp8_recipe
        if chunks > 1 and self.tp_comm_overlap and self.stack.te:  # userbuffers are Transformer Engine's
            meta["chunks"] = chunks
        return meta

    @property
    def tokens(self) -> int:
        """Tokens of one micro-batch on this rank after gathering (``seq * micro_batch``)."""
        return self.seq * self.micro

    @property
    def seq_local(self) -> int:
        """Sequence length held between layers: ``seq / tp`` under SP."""
        return self.seq // self.tp if self.sp else self.seq

    def act_bytes(self, width: int) -> int:
        """Bytes of a full ``(seq, micro_batch, width)`` activation."""
        return self.seq * self.micro * width * self.dtype_bytes

    @classmethod
    def of(cls, job: JobConfig) -> MegatronContext:
        p, t = job.parallel, job.training
        m = job.model
        # under context parallelism every rank holds seq / cp tokens between the attention cores (Megatron's
        # get_batch_on_this_cp_rank): every linear, norm and TP collective sees the local sequence
        return cls(tp=p.tp, sp=p.sequence_parallel, seq=t.seq_length // p.cp, micro=p.micro_batch, hidden=m.hidden_size,
                   cp=p.cp, cp_comm=t.cp_comm_type, cp_levels=cp_levels(job),
                   dtype_bytes=t.dtype_bytes, compute=t.computation_enable, dp=p.dp, stack=t.stack,
                   attention_dropout=m.attention_dropout, hidden_dropout=m.hidden_dropout, grad_bytes=t.grad_bytes,
                   bias=m.add_bias_linear, fp8_recipe=t.fp8_recipe if t.fp8 else None,
                   async_allreduce=t.async_tp_allreduce,
                   tp_comm_overlap=t.tp_comm_overlap and p.sequence_parallel and p.tp > 1)


def wgrad_meta(ctx: MegatronContext, meta: dict) -> dict:
    """A weight-gradient GEMM's meta: whether it accumulates into the main gradient in its epilogue
    (Megatron's ``gradient_accumulation_fusion``), and that buffer's bytes per element."""
    return {**meta, "accumulate": ctx.wgrad_accumulate, "grad_bytes": ctx.grad_bytes}


def _meta(layer: int | None, sub: str, op: str, name: str) -> dict:
    return {"layer": layer, "sub": sub, "op": op, "name": name}


class ColumnParallelLinear(MockedModule):
    """Megatron ``ColumnParallelLinear``: weight ``(out / tp, in)``."""

    def __init__(self, ctx: MegatronContext, name: str, in_size: int, out_size: int, bias: bool, layer: int | None,
                 sub: str, label: str = "MegatronColumnLinear", weight: MockedParam | None | bool = True,
                 norm_fused: bool = False, bf16: bool = False) -> None:
        super().__init__(name)
        self.ctx, self.in_size, self.layer, self.sub, self.label = ctx, in_size, layer, sub, label
        # Transformer Engine's LayerNormLinear writes an FP8 GEMM's input from its norm; Megatron's output layer
        # (a plain ColumnParallelLinear) stays in bf16 under FP8
        self.extra = {**({"fp8_input": True} if norm_fused and ctx.stack.te else {}), **({"bf16": True} if bf16 else {})}
        self.out_part = out_size // ctx.tp
        if weight is True:
            self.params.append(MockedParam(f"{name}.weight", (self.out_part, in_size)))
        elif isinstance(weight, MockedParam):
            self.params.append(weight)
        if bias:
            self.params.append(MockedParam(f"{name}.bias", (self.out_part,)))
        # the bias is added after the GEMM (and reduced for its gradient) unless a fused kernel that
        # follows takes it (Megatron's skip_bias_add: fc1's bias goes to the fused bias-GeLU / SwiGLU)
        self.bias_after = bias and not name.endswith("linear_fc1")

    def _gemm(self, phase: str, shapes, kind: str) -> WorkItem:
        flops = 2.0 * self.ctx.tokens * self.in_size * self.out_part
        # TE's userbuffers overlap the input's all-gather with the forward GEMM by a ring exchange: one GEMM
        # chunk per TP rank's share as it arrives (the layers' linears; Megatron's output layer is not TE's)
        chunks = self.ctx.tp if kind == "gemm" and self.layer is not None else 1
        meta = self.ctx.linear_meta({**_meta(self.layer, self.sub, kind, self.name), **self.extra}, chunks)
        if self.bias_after and kind in ("gemm", "dgrad"):
            meta["bias"] = True
        return compute(f"{phase}.{self.label}.{self.name}", shapes, flops,
                       wgrad_meta(self.ctx, meta) if kind == "wgrad" else meta)

    def _tp_comm(self, ctype: CommType, phase: str, overlap: bool = False) -> WorkItem:
        meta = _meta(self.layer, self.sub, "comm", self.name)
        if overlap and self.ctx.compute:
            meta["overlap"] = "next"
        return comm(ctype, TP, self.ctx.tp, self.ctx.act_bytes(self.in_size), f"{phase}.{self.label}", meta)

    def build_forward(self, phase: str) -> list[WorkItem]:
        c, out = self.ctx, []
        if c.tp > 1 and c.sp:
            out.append(self._tp_comm(AG, phase))
        if c.compute:
            out.append(self._gemm(phase, ((c.seq, c.micro, self.in_size), (self.in_size, self.out_part)), "gemm"))
        return out

    def build_backward(self) -> list[WorkItem]:
        c, out = self.ctx, []
        if c.tp > 1 and c.sp:
            out.append(self._tp_comm(AG, "backward", overlap=True))  # re-gather the input for the weight gradient
        if c.compute:
            out.append(self._gemm("backward", ((c.seq, c.micro, self.out_part), (self.out_part, self.in_size)), "dgrad"))
        if c.tp > 1:
            out.append(self._tp_comm(RS if c.sp else AR, "backward", overlap=c.sp or c.async_allreduce))
        if c.compute:
            out.append(self._gemm("backward", ((self.out_part, c.tokens), (c.tokens, self.in_size)), "wgrad"))
        return out


class RowParallelLinear(MockedModule):
    """Megatron ``RowParallelLinear``: weight ``(out, in / tp)``; its bias is whole on every rank."""

    def __init__(self, ctx: MegatronContext, name: str, in_size: int, out_size: int, bias: bool, layer: int | None,
                 sub: str, label: str = "MegatronRowLinear") -> None:
        super().__init__(name)
        self.ctx, self.out_size, self.layer, self.sub, self.label = ctx, out_size, layer, sub, label
        self.in_part = in_size // ctx.tp
        self.params.append(MockedParam(f"{name}.weight", (out_size, self.in_part)))
        if bias:
            self.params.append(MockedParam(f"{name}.bias", (out_size,), tp_sharded=False, sequence_parallel=ctx.sp))

    def _gemm(self, phase: str, shapes, kind: str) -> WorkItem:
        flops = 2.0 * self.ctx.tokens * self.in_part * self.out_size
        # TE's userbuffers: the forward GEMM's reduce-scatter pipelined over RS_SPLITS chunks, the output
        # gradient's all-gather by a ring exchange ahead of dgrad's TP chunks
        chunks = {"gemm": RS_SPLITS, "dgrad": self.ctx.tp}.get(kind, 1) if self.layer is not None else 1
        meta = self.ctx.linear_meta(_meta(self.layer, self.sub, kind, self.name), chunks)
        return compute(f"{phase}.{self.label}.{self.name}", shapes, flops,
                       wgrad_meta(self.ctx, meta) if kind == "wgrad" else meta)

    def _tp_comm(self, ctype: CommType, phase: str) -> WorkItem:
        return comm(ctype, TP, self.ctx.tp, self.ctx.act_bytes(self.out_size), f"{phase}.{self.label}",
                    _meta(self.layer, self.sub, "comm", self.name))

    def build_forward(self, phase: str) -> list[WorkItem]:
        c, out = self.ctx, []
        if c.compute:
            out.append(self._gemm(phase, ((c.seq, c.micro, self.in_part), (self.in_part, self.out_size)), "gemm"))
        if c.tp > 1:
            out.append(self._tp_comm(RS if c.sp else AR, phase))
        return out

    def build_backward(self) -> list[WorkItem]:
        c, out = self.ctx, []
        if c.tp > 1 and c.sp:
            out.append(self._tp_comm(AG, "backward"))
        if c.compute:
            out.append(self._gemm("backward", ((c.seq, c.micro, self.out_size), (self.out_size, self.in_part)), "dgrad"))
            out.append(self._gemm("backward", ((self.out_size, c.tokens), (c.tokens, self.in_part)), "wgrad"))
        return out


class Elementwise(MockedModule):
    """A memory-bound operation (norm, activation) that only contributes computation items.

    ``params`` (norm weights) are whole on every TP rank and, under SP, reduced over TP.
    """

    def __init__(self, ctx: MegatronContext, name: str, op: str, shape: tuple[int, ...], layer: int | None, sub: str,
                 label: str, params: list[MockedParam] | None = None, recompute: bool = False, **options) -> None:
        super().__init__(name)
        self.ctx, self.op, self.shape, self.layer, self.sub, self.label = ctx, op, shape, layer, sub, label
        self.recompute = recompute  # selective recomputation: its forward again in backward (--recompute_modules)
        self.options = options
        self.params.extend(params or [])

    def _item(self, phase: str) -> WorkItem:
        return compute(f"{phase}.{self.label}.{self.name}", (self.shape,), None,
                       {**_meta(self.layer, self.sub, self.op, self.name), **self.options})

    def build_forward(self, phase: str) -> list[WorkItem]:
        return [self._item(phase)] if self.ctx.compute else []

    def build_backward(self) -> list[WorkItem]:
        if not self.ctx.compute:
            return []
        return [self._item("recompute"), self._item("backward")] if self.recompute else [self._item("backward")]


class RecomputeForward(MockedModule):
    """Selective recomputation of a group of modules under one checkpoint (``--recompute_modules mla_up_proj`` and
    ``mlp``: Megatron-core's ``CheckpointWithoutOutput`` and ``te_checkpoint``).  Nothing in forward; placed after the
    module whose backward releases the recompute (in forward order), its backward replays the group's forward, TP
    collectives included, before the group's backward needs the outputs again."""

    def __init__(self, name: str, group: list[MockedModule]) -> None:
        super().__init__(name)
        self.group = group  # not children: their parameters and backward belong to the layer already

    def build_forward(self, phase: str) -> list[WorkItem]:
        return []

    def build_backward(self) -> list[WorkItem]:
        return [item for module in self.group for item in module.forward_items("recompute")]


def norm(ctx: MegatronContext, name: str, kind: str, width: int, layer: int | None, sub: str,
         feeds_linear: bool = False, recompute: bool = False) -> Elementwise:
    """LayerNorm (weight and bias) or RMSNorm (weight) over ``width``, on the local sequence: fused (Transformer
    Engine's or apex's) unless the stack has neither; ``feeds_linear``: Transformer Engine fuses it into the next
    linear (``TELayerNormColumnParallelLinear``), which under FP8 takes its output in FP8."""
    params = [MockedParam(f"{name}.weight", (width,), tp_sharded=False, sequence_parallel=ctx.sp)]
    if kind == "LayerNorm":
        params.append(MockedParam(f"{name}.bias", (width,), tp_sharded=False, sequence_parallel=ctx.sp))
    options = {"norm": kind, "fused": ctx.stack.fused_extensions}
    if feeds_linear and ctx.stack.te:
        options["in_linear"] = True  # TELayerNormColumnParallelLinear: one module with the GEMM (host cost, recompute)
        if ctx.fp8_recipe is not None:
            options["fp8_out"] = True
    # Megatron recomputes a norm only where it is its own module (an IdentityOp inside LayerNormLinear is not)
    return Elementwise(ctx, name, "norm", (ctx.seq_local, ctx.micro, width), layer, sub, f"Megatron{kind}", params,
                       recompute=recompute and not options.get("in_linear"), **options)


def bias_dropout_add(ctx: MegatronContext, name: str, layer: int, sub: str) -> Elementwise:
    """Megatron's bias-dropout-add after the attention projection (``self_attn_bda``) and after the MLP
    (``mlp_bda``): the residual connection, on the local sequence, with the hidden dropout."""
    return Elementwise(ctx, name, "bda", (ctx.seq_local, ctx.micro, ctx.hidden), layer, sub, "MegatronBiasDropoutAdd",
                       p=ctx.hidden_dropout, bias=ctx.bias, fused=ctx.stack.bda_fused)


class CoreAttention(MockedModule):
    """Softmax(QK^T)V over this rank's heads: ``4 * b * heads * s^2 * head_dim`` FLOPs forward (the
    full square, as Megatron's FLOP count states it), twice that backward.  Its meta says how it runs:
    ``impl`` (``flash`` with ``--use_flash_attn``, else Megatron's unfused path), ``p`` (attention
    dropout), ``v_dim`` and ``causal`` (GPT training is causal)."""

    def __init__(self, ctx: MegatronContext, name: str, heads: int, groups: int, head_dim: int, layer: int | None,
                 recompute: bool, v_head_dim: int | None = None, window: int | None = None) -> None:
        super().__init__(name)
        self.ctx, self.layer, self.recompute = ctx, layer, recompute
        self.window = window  # sliding-window layer: its left window in tokens (meta['window'])
        self.heads, self.groups, self.head_dim = heads // ctx.tp, max(groups // ctx.tp, 1), head_dim
        self.v_dim = v_head_dim or head_dim
        self.flops = 2.0 * ctx.micro * self.heads * ctx.seq * ctx.seq * (head_dim + self.v_dim)

    def _item(self, phase: str, flops: float) -> WorkItem:
        c = self.ctx
        shapes = ((c.micro, self.heads, c.seq, self.head_dim), (c.micro, self.groups, c.seq, self.head_dim))
        meta = {**_meta(self.layer, "attention", "attention", self.name), "impl": "flash" if c.flash else "unfused",
                "p": c.attention_dropout, "v_dim": self.v_dim, "causal": True}
        if not c.flash:
            meta["softmax"] = "fused" if c.stack.fused_softmax else "torch"
        if self.window is not None:
            meta["window"] = self.window
        return compute(f"{phase}.MegatronCoreAttention.{self.name}", shapes, flops, meta)

    def build_forward(self, phase: str) -> list[WorkItem]:
        return [self._item(phase, self.flops)] if self.ctx.compute else []

    def build_backward(self) -> list[WorkItem]:
        if not self.ctx.compute:
            return []
        out = [self._item("recompute", self.flops)] if self.recompute else []
        out.append(self._item("backward", 2 * self.flops))
        return out

"""The mocked DeepSpeed model: Hugging Face's ``LlamaForCausalLM`` as DeepSpeed ZeRO wraps it.

DeepSpeed shards nothing inside the model (no tensor or pipeline parallelism in this frame): every
rank holds the full model, so parameter shapes here are the full, unsharded ``torch.nn`` shapes
(``nn.Linear`` weights are ``(out_features, in_features)``).  Modules and parameters come in the
order ``LlamaForCausalLM`` uses them in forward (Hugging Face ``transformers``,
``models/llama/modeling_llama.py``):

    model.embed_tokens (vocab, hidden)
    per layer: input_layernorm (hidden,); self_attn.q_proj (heads*head_dim, hidden),
               k_proj and v_proj (kv_heads*head_dim, hidden) (grouped-query attention where the model
               has fewer key/value heads), o_proj (hidden, heads*head_dim);
               post_attention_layernorm (hidden,); mlp.gate_proj and up_proj (ffn, hidden),
               down_proj (hidden, ffn)
    model.norm (hidden,); lm_head (vocab, hidden) (LLaMA does not tie it to the embedding)

Assumption: registration order equals this execution order.  Hugging Face registers a decoder
layer's norms after its MLP; that moves where ZeRO-1/2 partition boundaries fall inside a layer,
not how many bytes are reduced or gathered.

Leaf modules (the ones DeepSpeed's ZeRO-3 hooks fetch parameters for) yield computation items:
the forward GEMM of each linear layer, its input-gradient (``dgrad``) and weight-gradient
(``wgrad``) GEMMs in backward, and the parameter-free work between them (norms, core attention,
SwiGLU, loss) with their operand shapes.  FLOPs are ``2 * tokens * in * out`` per GEMM and
Megatron's ``4 * b * heads * s^2 * head_dim`` for core attention (twice that in backward).
"""

from __future__ import annotations

from dataclasses import dataclass

from mocked_model.base import MockedModule, MockedParam, compute
from utils.config import JobConfig
from utils.model_config import ModelConfig
from utils.workload import WorkItem


@dataclass(frozen=True)
class DeepSpeedContext:
    """Sizes every mocked module needs: sequence length and micro-batch (tokens), and whether
    computation items are wanted (``--computation_enable``)."""

    seq: int
    micro: int
    compute: bool

    @property
    def tokens(self) -> int:
        """Tokens of one micro-batch: ``micro_batch * seq``."""
        return self.micro * self.seq

    @classmethod
    def of(cls, job: JobConfig) -> DeepSpeedContext:
        return cls(seq=job.training.seq_length, micro=job.parallel.micro_batch, compute=job.training.computation_enable)


def _meta(layer: int | None, op: str, name: str) -> dict:
    return {"layer": layer, "op": op, "name": name}


class Leaf(MockedModule):
    """A module whose parameters ZeRO-3 gathers as one unit (``fetch_sub_module``).

    ``label`` is the ``torch`` class name used in stage names (``forward.Linear.<name>``);
    ``input_requires_grad`` is False for a module fed with token ids: DeepSpeed's post-backward
    release hook hangs on the inputs' gradients, so such a module is never released after its
    backward (``deepspeed/runtime/zero/parameter_offload.py``, ``_post_backward_module_hook``).
    """

    label = "Module"
    input_requires_grad = True

    def __init__(self, ctx: DeepSpeedContext, name: str, layer: int | None) -> None:
        super().__init__(name)
        self.ctx, self.layer = ctx, layer

    def _item(self, phase: str, shapes, flops: float | None, op: str) -> WorkItem:
        return compute(f"{phase}.{self.label}.{self.name}", shapes, flops, _meta(self.layer, op, self.name))


class Embedding(Leaf):
    """``nn.Embedding(vocab, hidden)``: a lookup forward, a scatter-add of the output gradient
    into the weight gradient backward (no GEMM)."""

    label = "Embedding"
    input_requires_grad = False

    def __init__(self, ctx: DeepSpeedContext, name: str, vocab: int, hidden: int) -> None:
        super().__init__(ctx, name, None)
        self.params.append(MockedParam(f"{name}.weight", (vocab, hidden), tp_sharded=False))

    def build_forward(self, phase: str) -> list[WorkItem]:
        c = self.ctx
        return [self._item(phase, ((c.micro, c.seq), self.params[0].shape), None, "embedding")] if c.compute else []

    def build_backward(self) -> list[WorkItem]:
        c = self.ctx
        return [self._item("backward", ((c.micro, c.seq), self.params[0].shape), None, "embedding")] if c.compute else []


class RMSNorm(Leaf):
    """``LlamaRMSNorm(hidden)``: one weight of ``hidden`` elements; memory-bound work over the
    ``(micro_batch, seq, hidden)`` activation."""

    label = "LlamaRMSNorm"

    def __init__(self, ctx: DeepSpeedContext, name: str, hidden: int, layer: int | None) -> None:
        super().__init__(ctx, name, layer)
        self.hidden = hidden
        self.params.append(MockedParam(f"{name}.weight", (hidden,), tp_sharded=False))

    def build_forward(self, phase: str) -> list[WorkItem]:
        c = self.ctx
        return [self._item(phase, ((c.micro, c.seq, self.hidden),), None, "norm")] if c.compute else []

    def build_backward(self) -> list[WorkItem]:
        c = self.ctx
        return [self._item("backward", ((c.micro, c.seq, self.hidden),), None, "norm")] if c.compute else []


class Linear(Leaf):
    """``nn.Linear(in, out, bias)``: weight ``(out, in)``.  Forward ``y = x W^T``; backward the
    input gradient ``dx = dy W`` then the weight gradient ``dW = dy^T x``."""

    label = "Linear"

    def __init__(self, ctx: DeepSpeedContext, name: str, in_size: int, out_size: int, bias: bool,
                 layer: int | None) -> None:
        super().__init__(ctx, name, layer)
        self.in_size, self.out_size = in_size, out_size
        self.params.append(MockedParam(f"{name}.weight", (out_size, in_size), tp_sharded=False))
        if bias:
            self.params.append(MockedParam(f"{name}.bias", (out_size,), tp_sharded=False))
        self.flops = 2.0 * ctx.tokens * in_size * out_size

    def build_forward(self, phase: str) -> list[WorkItem]:
        c = self.ctx
        if not c.compute:
            return []
        return [self._item(phase, ((c.micro, c.seq, self.in_size), (self.in_size, self.out_size)), self.flops, "gemm")]

    def build_backward(self) -> list[WorkItem]:
        c = self.ctx
        if not c.compute:
            return []
        return [
            self._item("backward", ((c.micro, c.seq, self.out_size), (self.out_size, self.in_size)), self.flops, "dgrad"),
            self._item("backward", ((self.out_size, c.tokens), (c.tokens, self.in_size)), self.flops, "wgrad"),
        ]


class Elementwise(Leaf):
    """Parameter-free work between the layers (core attention, SwiGLU, loss): computation only."""

    def __init__(self, ctx: DeepSpeedContext, name: str, label: str, op: str, shapes, flops: float | None,
                 layer: int | None) -> None:
        super().__init__(ctx, name, layer)
        self.label, self.op, self.shapes, self.flops = label, op, shapes, flops

    def build_forward(self, phase: str) -> list[WorkItem]:
        return [self._item(phase, self.shapes, self.flops, self.op)] if self.ctx.compute else []

    def build_backward(self) -> list[WorkItem]:
        if not self.ctx.compute:
            return []
        return [self._item("backward", self.shapes, None if self.flops is None else 2 * self.flops, self.op)]


class DecoderLayer(MockedModule):
    """``LlamaDecoderLayer``: pre-norm attention with grouped-query key/value heads, then a pre-norm
    SwiGLU MLP (``down(silu(gate(x)) * up(x))``)."""

    def __init__(self, ctx: DeepSpeedContext, model: ModelConfig, layer: int) -> None:
        super().__init__(f"model.layers.{layer}")
        h, head_dim, heads, groups = model.hidden_size, model.kv_channels, model.num_attention_heads, model.query_groups
        ffn, bias, p = model.ffn_hidden_size, model.add_bias_linear, f"model.layers.{layer}"
        attention_flops = 4.0 * ctx.micro * heads * ctx.seq * ctx.seq * head_dim
        self.children = [
            RMSNorm(ctx, f"{p}.input_layernorm", h, layer),
            Linear(ctx, f"{p}.self_attn.q_proj", h, heads * head_dim, bias, layer),
            Linear(ctx, f"{p}.self_attn.k_proj", h, groups * head_dim, bias, layer),
            Linear(ctx, f"{p}.self_attn.v_proj", h, groups * head_dim, bias, layer),
            Elementwise(ctx, f"{p}.self_attn", "CoreAttention", "attention",
                        ((ctx.micro, heads, ctx.seq, head_dim), (ctx.micro, groups, ctx.seq, head_dim)), attention_flops,
                        layer),
            Linear(ctx, f"{p}.self_attn.o_proj", heads * head_dim, h, bias, layer),
            RMSNorm(ctx, f"{p}.post_attention_layernorm", h, layer),
            Linear(ctx, f"{p}.mlp.gate_proj", h, ffn, bias, layer),
            Linear(ctx, f"{p}.mlp.up_proj", h, ffn, bias, layer),
            Elementwise(ctx, f"{p}.mlp.act_fn", "SwiGLU", "swiglu", ((ctx.micro, ctx.seq, ffn),), None, layer),
            Linear(ctx, f"{p}.mlp.down_proj", ffn, h, bias, layer),
        ]


class DeepSpeedLlama(MockedModule):
    """``LlamaForCausalLM`` with full parameter shapes, leaves in forward order.

    From the model configuration it takes hidden size, layers, heads, key/value heads, head size,
    FFN size, vocabulary (unpadded: Hugging Face does not pad it) and ``add_bias_linear`` (biases
    on the projections, ``attention_bias``/``mlp_bias`` in ``LlamaConfig``).
    """

    def __init__(self, ctx: DeepSpeedContext, model: ModelConfig) -> None:
        super().__init__("model")
        self.ctx = ctx
        h, vocab = model.hidden_size, model.vocab_size
        self.layers = [DecoderLayer(ctx, model, i) for i in range(model.num_layers)]
        self.children = [
            Embedding(ctx, "model.embed_tokens", vocab, h),
            *self.layers,
            RMSNorm(ctx, "model.norm", h, None),
            Linear(ctx, "lm_head", h, vocab, False, None),
            Elementwise(ctx, "loss", "CrossEntropy", "loss", ((ctx.micro, ctx.seq, vocab),), None, None),
        ]

    def leaves(self) -> list[Leaf]:
        """Leaf modules in forward order (parameter-free ones included, for their computation)."""
        out: list[Leaf] = []
        stack: list[MockedModule] = [self]
        while stack:
            module = stack.pop()
            if isinstance(module, Leaf):
                out.append(module)
            else:
                stack.extend(reversed(module.children))
        return out

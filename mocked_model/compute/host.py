"""What the host (CPU) spends issuing each computation and collective of a Megatron training step, and where it must
wait for the GPU: the constants and the per-item cost the engine's host model plays (:mod:`simulator.topo.host_model`).

Eager PyTorch issues every kernel from Python: the GPU can start a kernel only once the CPU has walked through the
module's Python, the dispatcher and the launch.  The CPU normally runs ahead of long kernels and the GPU never waits;
it falls behind where kernels are short (fine-grained MoE experts, small layers) and, above all, after a
device-to-host synchronisation, which empties the queue: the GPU then idles while the CPU issues what follows.

Per-item CPU time (microseconds), measured on a DGX H100 host (Intel Xeon Platinum 8480C) where a figure exists:

- a PyTorch module or operator call that launches its kernel: :data:`TORCH_OP_US` = 13.48 us, ``torch.nn.Linear``'s
  forward on a DGX H100 (Transformer Engine issue #2053, "High CPU overhead on Grace systems", BF16, hidden 2048,
  8192 tokens); every further kernel the same operation launches eagerly adds :data:`LAUNCH_US` (the compute model's
  5 us per launch, the low end of PyTorch's 5-25 us per operator);
- a Transformer Engine module (``te.Linear``, ``LayerNormLinear``, ``GroupedLinear``, its norms, ``DotProductAttention``)
  costs :data:`TE_OVER_TORCH` = 2.7 times torch's (the same issue: 99.66 / 37.08 = 2.69 on GB200, 90.53 / 33.17 = 2.73
  on GH200; its H100 TE row is not in the excerpt, the ratio is taken to hold on the Xeon), and an FP8 one twice that
  (Transformer Engine issue #761, "CPU Overhead of te.Linear FP8 Layers": scheduling an FP8 ``te.Linear`` takes more
  than 2x the BF16 one on H100, :data:`FP8_FACTOR`); backward walks the same module's Python
  (``autograd.Function.backward``): the input-gradient item pays the module again, the weight-gradient GEMM one launch;
- ``GroupedLinear`` (the experts' grouped GEMMs) adds work per local expert (Transformer Engine issues #1499 and
  #2995: ``torch.split`` of the input, two ``torch.empty`` per GEMM for the FP8 casts' outputs, a quantization and a
  cuBLAS GEMM launched per expert on TE's multi-stream path): :data:`LAUNCH_US` per expert for its GEMM, plus (FP8) its
  quantization's kernels and the two allocations, (BF16) its split;
- a collective (``torch.distributed`` into NCCL, DeepEP's or HybridEP's Python): one :data:`TORCH_OP_US`;
- a CUDA graph's replay (``--cuda_graph_impl``; Transformer Engine's ``make_graphed_callables`` or Megatron's local
  graphs): :data:`GRAPH_REPLAY_US`, one call, in place of every captured op's own cost.

Host-device synchronisations (Megatron-core ``megatron/core/transformer/moe/token_dispatcher.py``): the ``alltoall``
dispatcher copies the split sizes and ``tokens_per_expert`` to the host after its preprocessing
(``_maybe_dtoh_and_synchronize``, ``cuda_dtoh_point``) and waits for them before the expert all-to-all
(``cuda_sync_point`` ``before_ep_alltoall``; ``before_finish`` without expert parallelism); the ``allgather`` one reads
``tokens_per_expert.cpu()``; DeepEP's dispatch busy-waits on the CPU for the received counts before its dispatch
kernel (DeepEP ``csrc/legacy/buffer.hpp``: "Synchronize total received tokens and tokens per expert"), and HybridEP's
``dispatch_with_permute`` does the same through pinned memory unless ``num_permuted_tokens`` is given
(``non_blocking``; Megatron gives it only with drop-and-pad).  Backward reuses the forward's handles and sizes: no wait.
Each wait costs :data:`SYNC_US` beyond the GPU's drain.  Megatron refuses a CUDA graph around any of them
(``transformer_config.py``: the ``moe`` scope needs drop-and-pad MoE; ``moe_preprocess`` with the alltoall dispatcher's
capacity or FP8 padding "is not supported when there are DtoH copies and synchronizations").
"""

from __future__ import annotations

from dataclasses import dataclass

from mocked_model.compute.kernel_list import AMAX_KERNELS
from mocked_model.compute.kernels import HOST_US_PER_LAUNCH

TORCH_OP_US = 13.48
"""CPU microseconds of one PyTorch module call that launches its kernel: ``torch.nn.Linear``'s forward on a DGX H100
(Xeon 8480C), Transformer Engine issue #2053."""
TE_OVER_TORCH = 2.7
"""A Transformer Engine module's CPU time over torch's for the same linear (issue #2053: 2.69 GB200, 2.73 GH200)."""
TE_MODULE_US = TORCH_OP_US * TE_OVER_TORCH
"""CPU microseconds of one BF16 Transformer Engine module call (36.4 us)."""
FP8_FACTOR = 2.0
"""An FP8 Transformer Engine module's CPU time over its BF16 one (issue #761: "more than 2x")."""
LAUNCH_US = HOST_US_PER_LAUNCH
"""Each further kernel an operation launches eagerly (5 us; PyTorch's dispatch walk-throughs: 5-25 us per operator)."""
SYNC_US = 10.0
"""A device-to-host copy and the host's wait on it, beyond the GPU's drain (the compute model's ``HOST_SYNC_US``)."""
GRAPH_REPLAY_US = TORCH_OP_US
"""One captured graph's replay: a Python call and ``cudaGraphLaunch``, taken as one module call."""

SYNC_WAIT = 1
"""The host waits for every GPU op before this one, then issues it (DeepEP's and HybridEP's dispatch)."""
SYNC_EVENT_COMM = 2
"""A device-to-host copy after this op; the host waits for it before issuing the next collective (alltoall)."""
SYNC_EVENT_NEXT = 3
"""A device-to-host copy after this op; the host waits for it before issuing the next op (``.cpu()``, ``.tolist()``)."""

GRAPH_SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "full_iteration")
"""Megatron-core's ``--cuda-graph-scope`` values (``CudaGraphScope``; an empty list captures whole layers)."""


@dataclass(frozen=True)
class HostSetup:
    """What decides an item's host cost: the stack (Transformer Engine or not), FP8 and its recipe, CUDA graphs
    (``graph_impl``; ``graph_scopes`` empty: whole layers), the dispatcher, expert parallelism and drop-and-pad."""

    te: bool = True
    fp8: bool = False
    fp8_recipe: str = "delayed"
    graph_impl: str = "none"
    graph_scopes: tuple[str, ...] = ()
    dispatcher: str = "alltoall"
    ep: int = 1
    etp: int = 1
    drop_and_pad: bool = False
    shared_overlap: bool = False

    @classmethod
    def of(cls, job) -> HostSetup:
        t = job.training
        return cls(te=t.transformer_impl == "transformer_engine", fp8=t.fp8, fp8_recipe=t.fp8_recipe,
                   graph_impl=t.cuda_graph_impl, graph_scopes=tuple(t.cuda_graph_scope),
                   dispatcher=t.moe_token_dispatcher_type, ep=job.parallel.ep, etp=job.parallel.expert_tp,
                   drop_and_pad=t.moe_pad_expert_input_to_capacity, shared_overlap=t.moe_shared_expert_overlap)

    @property
    def graphs(self) -> bool:
        return self.graph_impl != "none"


@dataclass(frozen=True, slots=True)
class HostCost:
    """One item's CPU microseconds (0 inside a captured graph), its synchronisation (``SYNC_*``, 0: none) and its
    graph (``scope:layer:phase``; consecutive ops of one graph share a replay; empty: eager)."""

    us: float = 0.0
    sync: int = 0
    graph: str = ""


def graph_scope(item, setup: HostSetup) -> str:
    """The ``--cuda_graph_scope`` that captures ``item`` ('' when it runs eagerly).  Megatron-core's
    ``TransformerLayer`` captures per layer: ``attn`` its ``_forward_attention`` (input norm to the residual add), ``mlp``
    a dense layer's ``_forward_mlp``, ``moe`` a (drop-and-pad) MoE layer's, ``moe_router`` the MoE part up to the
    router (pre-MLP norm, router, shared experts when not overlapped) and with ``moe_preprocess`` the dispatcher's
    preprocessing in the same graph (the alltoall dispatcher's permutation 1 with it); no scope captures whole
    layers; ``full_iteration`` (local graphs) everything.  Backward replays the captured forward's backward graph;
    recomputation runs eagerly.  Items outside layers (embedding, output layer, loss, optimizer) run eagerly unless
    the whole iteration is captured."""
    if not setup.graphs:
        return ""
    meta = item.meta or {}
    head = item.stage.split(".", 1)[0]
    scopes = setup.graph_scopes
    if "full_iteration" in scopes or setup.graph_impl == "full_iteration":
        return "full_iteration"
    if meta.get("layer") is None or head not in ("forward", "backward"):
        return ""
    if not scopes:
        return "layer"
    sub, op, name = meta.get("sub"), meta.get("op"), str(meta.get("name", ""))
    if sub == "attention":
        return "attn" if "attn" in scopes else ""
    if sub == "mlp":
        return "mlp" if "mlp" in scopes else ""
    if sub == "moe":
        if "moe" in scopes:
            return "moe"
        if "moe_router" not in scopes:
            return ""
        if "router" in name or name.endswith("pre_mlp_layernorm") or ("shared_experts" in name
                                                                     and not setup.shared_overlap):
            return "moe_router"
        if "moe_preprocess" in scopes and head == "forward" and (
                op == "moe_dispatch_meta" or meta.get("counts")
                or (op == "moe_permute" and setup.dispatcher == "alltoall")):
            return "moe_router"  # captured with the router, as TransformerLayer._te_cuda_graph_capture does
        if "moe_preprocess" in scopes and head == "backward" and op == "moe_permute" and setup.dispatcher == "alltoall":
            return "moe_router"
    return ""


def _sync(item, setup: HostSetup) -> int:
    """The item's host-device synchronisation (``SYNC_*``; forward only, none with drop-and-pad).  The alltoall
    dispatcher copies its counts to the host at the end of its preprocessing (after the counts' all-gather over
    the expert ranks; with ``moe_preprocess`` graphed, after the graph: ``cuda_dtoh_point`` ``before_ep_alltoall``)
    and waits before its all-to-all; without expert ranks to gather from, before its permutation."""
    meta = item.meta or {}
    if item.stage.split(".", 1)[0] != "forward" or setup.drop_and_pad:
        return 0
    op = meta.get("op")
    if setup.dispatcher == "alltoall":
        gathered = setup.ep * setup.etp > 1
        graphed = setup.graphs and "moe_preprocess" in setup.graph_scopes
        if meta.get("counts"):
            return SYNC_EVENT_COMM if gathered and not graphed else 0
        if op == "moe_permute":
            return SYNC_EVENT_COMM if gathered and graphed else 0
        return SYNC_EVENT_NEXT if op == "moe_dispatch_meta" and not gathered else 0
    if item.comm_type.value != "computation":
        deepep = meta.get("deepep")
        return SYNC_WAIT if deepep and deepep[0] == "dispatch" else 0  # DeepEP / HybridEP: the dispatch waits
    return SYNC_EVENT_NEXT if op == "moe_dispatch_meta" and setup.dispatcher == "allgather" else 0


def _quantize_kernels(setup: HostSetup) -> int:
    """Kernels of one tensor's FP8 quantization: current scaling (``tensorwise``) zeroes the amax, reduces it, turns
    it into the scale and casts (:data:`mocked_model.compute.kernel_list.AMAX_KERNELS` + 1, Transformer Engine's
    ``Float8CurrentScalingQuantizer::quantize_impl``); the other recipes one cast."""
    return AMAX_KERNELS + 1 if setup.fp8_recipe == "tensorwise" else 1


def _call_us(item, setup: HostSetup, kernels: int) -> float:
    """CPU microseconds of a computation item run eagerly (``kernels``: how many it launches)."""
    meta = item.meta or {}
    op = meta.get("op")
    name = str(meta.get("name", ""))
    extra = LAUNCH_US * max(kernels - 1, 0)
    te = setup.te and meta.get("te", setup.te)
    if op in ("gemm", "dgrad", "wgrad"):
        shapes = item.shapes or ()
        experts = meta.get("tokens_per_expert")
        grouped = len(shapes) > 1 and len(shapes[1]) == 3
        module = TORCH_OP_US
        if te and not name.endswith("router"):
            module = TE_MODULE_US * (FP8_FACTOR if setup.fp8 and not meta.get("bf16") else 1.0)
        if grouped:
            count = len(experts) if experts else shapes[1][0]
            if not experts:  # a loop of experts (SequentialMLP): a module call per expert
                return count * (module if op != "wgrad" else LAUNCH_US)
            fp8 = setup.fp8 and not meta.get("bf16")
            if op == "wgrad":
                return count * LAUNCH_US
            quantize = _quantize_kernels(setup) if fp8 else 0
            per_expert = LAUNCH_US * (1 + quantize + (2 if fp8 else 1))  # GEMM, its input's cast, allocations / split
            return module + count * per_expert
        if op == "wgrad":
            return LAUNCH_US * kernels
        return module if te else module + extra
    if op == "norm":
        if meta.get("in_linear") or meta.get("fp8_out"):
            return LAUNCH_US  # inside Transformer Engine's LayerNormLinear
        calls = 2 if name.endswith("qk_layernorm") else 1  # the query's and the key's norm modules
        return calls * (TE_MODULE_US if setup.te else TORCH_OP_US) + (0.0 if setup.te else extra)
    if op == "attention" and setup.te:
        return TE_MODULE_US
    return TORCH_OP_US + extra


def host_cost(item, setup: HostSetup, kernels: int = 1) -> HostCost:
    """The CPU cost of issuing ``item`` (a computation or a collective), its synchronisation and its graph.
    ``kernels``: how many kernels the item launches (the compute model's list)."""
    scope = graph_scope(item, setup)
    sync = _sync(item, setup)
    if scope:
        meta = item.meta or {}
        key = f"{scope}:{meta.get('layer', '')}:{item.stage.split('.', 1)[0]}"
        return HostCost(0.0, sync, key)
    if item.comm_type.value != "computation":
        return HostCost(TORCH_OP_US, sync)
    return HostCost(_call_us(item, setup, kernels), sync)


def launches_host_us(item, setup: HostSetup) -> float:
    """Host microseconds per kernel launch of ``item`` for the item-level model (:func:`mocked_model.compute.estimator`:
    an item is never faster than its launches): 0 inside a captured graph, :data:`LAUNCH_US` otherwise."""
    return 0.0 if graph_scope(item, setup) else LAUNCH_US

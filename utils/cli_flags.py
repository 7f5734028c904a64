"""The job flags of every command (AICB's names and defaults), as tables: imported by
:mod:`utils.cli` when a parser needs them, so that a command without job flags (``python -m simulator
-w FILE``) does not build them or import the configuration classes their choices come from."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from utils.cli_types import (
    at_least_one,
    int_pair,
    int_tuple,
    integer,
    non_negative,
    non_negative_int,
    path_text,
    positive_int,
    positive_number,
    pp_rank_type,
    probability,
    spellings,
)
from utils.config import (
    ATTENTION_BACKENDS,
    CP_COMM_TYPES,
    CUDA_GRAPH_IMPLS,
    DISPATCHERS,
    FP8_RECIPES,
    FRAMES,
    LOAD_BALANCING,
    TRANSFORMER_IMPLS,
)
from utils.cuda_graphs import RECOMPUTE_MODULES as RECOMPUTE_MODULE_CHOICES
from utils.cuda_graphs import SCOPES as GRAPH_SCOPE_CHOICES
from utils.model_config import NORMALIZATIONS, POSITION_EMBEDDINGS
from utils.units import parse_size

_int = positive_int
_count = non_negative_int


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_TRUE = ("1", "true", "yes", "on", "y", "t")
_FALSE = ("0", "false", "no", "off", "n", "f", "none", "")


class Switch(argparse.Action):
    """A switch that also takes an explicit value, as AICB's tutorial writes them (``--aiob_enable=$enable``,
    ``--moe_enable=True``): bare means on, ``=1/true/yes`` on, ``=0/false/no`` off.  With ``negatable``,
    ``--no_NAME`` / ``--no-NAME`` turn it off too."""

    def __init__(self, option_strings: Sequence[str], dest: str, negatable: bool = False, **kwargs: Any) -> None:
        names = list(option_strings)
        self.negations: frozenset[str] = frozenset()
        if negatable:
            negations = [f"--no{sep}{name[2:]}" for name in option_strings if name.startswith("--") for sep in "_-"]
            self.negations = frozenset(negations)
            names += negations
        kwargs.pop("type", None)
        super().__init__(list(dict.fromkeys(names)), dest, nargs="?", const=True, metavar="BOOL", **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        on = option_string not in self.negations  # a flag named --no_X itself (--no_apex) is a positive switch
        if values is not True:
            text = str(values).strip().lower()
            if text not in _TRUE + _FALSE:
                parser.error(f"argument {option_string}: expected no value or a boolean (1/0, true/false), got {values!r}")
            on = (text in _TRUE) == on
        setattr(namespace, self.dest, on)


def _bool(option_strings: Sequence[str], dest: str, **kwargs: Any) -> Switch:
    return Switch(option_strings, dest, negatable=True, **kwargs)


def _store_true(option_strings: Sequence[str], dest: str, **kwargs: Any) -> Switch:
    return Switch(option_strings, dest, **kwargs)


@dataclass(frozen=True)
class Flag:
    names: tuple[str, ...]
    dest: str
    default: Any
    help: str
    type: Callable[[str], Any] | None = None
    action: Any = None
    choices: Sequence[Any] | None = None
    nargs: str | None = None


def _dest(names: tuple[str, ...]) -> str:
    """The first long option names the value (``-m/--model_size`` -> ``model_size``)."""
    long = [n for n in names if n.startswith("--")]
    return (long or list(names))[0].lstrip("-").replace("-", "_")


def _f(names: str | tuple[str, ...], default: Any, help: str, type: Callable | None = _int, **kw: Any) -> Flag:
    names = (names,) if isinstance(names, str) else names
    dest = _dest(names)
    return Flag(names, kw.pop("dest", dest), default, help, type if kw.get("action") is None else None, **kw)


def _switch(names: str | tuple[str, ...], help: str, default: bool = False, negatable: bool = False) -> Flag:
    names = (names,) if isinstance(names, str) else names
    return Flag(names, _dest(names), default, help, None, _bool if negatable else _store_true)


ACTIVATIONS = ("gelu", "swiglu")
"""``--activation_func`` values: the MLPs the mocked model builds."""

# ---- the flags ------------------------------------------------------------------------------
GENERAL = [
    _f(("--frame", "--comm_frame"), "Megatron", "training framework to mock (--comm_frame: AICB's older spelling)",
       type=str, choices=FRAMES),
    _f("--gpu_type", None, "GPU type (names the output files; selects the analytical compute model)", type=str),
    _f("--gpu_spec", None, "a GPU spec file (JSON, python -m profiling fit-gpu writes one from a kernel sweep): its "
       "measured figures price the computation instead of the GPU table's; it names the GPU, so give it instead of "
       "--gpu_type", type=str),
    _f("--world_size", 1, "number of GPUs"),
    _f("--tensor_model_parallel_size", 1, "tensor-parallel size (tp)"),
    _f(("--pipeline_model_parallel", "--pipeline_model_parallel_size"), 1, "pipeline-parallel size (pp)"),
    _f(("--context-parallel-size", "--context_parallel_size"), 1, "context-parallel size (cp)",
       dest="context_parallel_size"),
    _f("--pp_rank", 0, "pipeline stage whose workload is generated (AICB's -1 means 0)", type=pp_rank_type),
    _f("--global_batch", 4, "global batch size (sequences per iteration)"),
    _f("--micro_batch", 1, "micro-batch size per model replica"),
    _f("--epoch_num", 1, "iterations to generate or replay"),
    _switch("--computation_enable", "add computation items (implied by --aiob_enable)"),
    _f("--dtype", "bfloat16", "training dtype (bfloat16, float16, float32; float8: Transformer Engine's FP8 GEMMs with "
       "bf16 activations and communication)", type=str),
    _switch("--enable_visual", "write plots of the replay results"),
    _switch("--workload_only", "generate the workload and stop (no replay)"),
    _switch("--memory", "print the memory per GPU of the job (parameters, gradients, optimizer states, activations) "
            "and warn when it does not fit --gpu_type"),
    _f(("--output", "-o"), None, "write the workload to this path instead of AICB's default location", type=path_text),
    _f("--output_dir", None, "directory for results (default: results/)", type=path_text),
    _f("--max_items", None, "refuse a workload estimated above this many items (default 5,000,000: about 670 MB of "
       "CSV; see docs/workloads.md, 'Size limit')"),
]
MODEL = [
    _f(("--model_name",), None, "model preset (e.g. gpt_13B, llama3_405B, Mixtral_8x7B, deepseek671)", type=str),
    _f(("-m", "--model_size"), None, "AICB model size (7, 13, 22, 175, 405, 65, moe, deepseek16, ...)", type=str),
    _f("--hidden_size", 1024, "transformer hidden size"),
    _f("--num_layers", 24, "transformer layers"),
    _f(("--seq_length", "--seq_len"), 2048, "sequence length"),
    _f("--num_attention_heads", 16, "attention heads (AICB's default copies --num_layers; ours is hidden/64)"),
    _f(("--num_query_groups", "--num_key_value_heads"), None, "key/value head groups (grouped-query attention)"),
    _f("--kv_channels", None, "size of one attention head (default hidden/heads)"),
    _f("--ffn_hidden_size", None, "MLP hidden size (default 4*hidden, or Megatron's SwiGLU rule)"),
    _f("--vocab_size", 32000, "vocabulary size before padding"),
    _f("--max_position_embeddings", 4096, "maximum positions (learned position embeddings)"),
    _switch("--add_bias_linear", "biases in the linear layers", negatable=True),
    _switch("--use_flash_attn", "use flash attention (AIOB timing)"),
    _switch("--swiglu", "SwiGLU MLP (fc1 doubled)", negatable=True),
    _f("--normalization", None, "LayerNorm or RMSNorm", type=str, choices=NORMALIZATIONS),
    _f("--position_embedding_type", None, "learned_absolute, rope or none", type=str, choices=POSITION_EMBEDDINGS),
    _switch("--untie_embeddings_and_output_weights", "separate output-layer weights", negatable=True),
    _f("--make_vocab_size_divisible_by", 128, "pad the vocabulary to a multiple of this times tp"),
    _f(("--attention_dropout", "--attention-dropout"), None, "dropout probability of the attention scores "
       "(default: the preset's, else Megatron's 0.1)", type=probability),
    _f(("--hidden_dropout", "--hidden-dropout"), None, "dropout probability after the attention and the MLP "
       "(default: the preset's, else Megatron's 0.1)", type=probability),
]
MEGATRON = [
    _switch("--enable_sequence_parallel", "Megatron sequence parallelism"),
    _switch(("--use-distributed-optimizer",), "Megatron's distributed optimizer (ZeRO-1 style)"),
    _switch("--overlap_grad_reduce", "overlap the DP gradient reduction with backward"),
    _f("--num_layers_per_virtual_pipeline_stage", None, "layers per virtual stage (interleaved 1F1B)"),
    _f("--decoder_first_pipeline_num_layers", None, "layers of the first pipeline stage (uneven split)", type=_count),
    _f("--decoder_last_pipeline_num_layers", None, "layers of the last pipeline stage (uneven split)", type=_count),
    _f("--num_virtual_stages_per_pipeline_rank", None, "model chunks per pipeline rank (interleaved 1F1B, Megatron "
       "core's spelling)"),
    _switch("--account_for_embedding_in_pipeline_split", "count the embedding as one layer when splitting the "
            "layers over pipeline stages (Megatron core)"),
    _switch("--account_for_loss_in_pipeline_split", "count the loss as one layer when splitting the layers over "
            "pipeline stages (Megatron core)"),
    _switch("--accumulate_allreduce_grads_in_fp32", "fp16 training: accumulate and reduce gradients in fp32 "
            "(Megatron's default with fp16 is fp16 gradients; bf16 always uses fp32)"),
    _switch("--no_gradient_accumulation_fusion", "weight gradients written, then added to the fp32 main gradient "
            "(Megatron fuses the two by default)"),
    _switch("--scatter_gather_tensors_in_pipeline", "legacy Megatron-LM's p2p optimisation without sequence "
            "parallelism: each TP rank sends 1/tp of the activation, the receiver all-gathers it over TP"),
    _switch("--tp_comm_overlap", "TP collectives overlap the GEMMs (Megatron's --tp-comm-overlap)"),
    _switch("--no_async_tensor_model_parallel_allreduce", "without sequence parallelism, the column-parallel "
            "linear's input-gradient all-reduce waits before its weight-gradient GEMM instead of overlapping it "
            "(Megatron-LM before 2022 and its flag)"),
    _switch(("--use-tp-pp-dp-mapping",), "rank order tp-cp-ep-pp-dp instead of Megatron's default tp-cp-ep-dp-pp"),
    _f("--ddp_bucket_size", None, "DP gradient bucket size in elements (default Megatron's: max(40M, 1M*dp))"),
    _switch("--recompute_activations", "selective activation recomputation"),
    _f("--recompute_granularity", None, "full or selective activation recomputation", type=str,
       choices=("full", "selective")),
    _switch("--no_create_attention_mask_in_dataloader", "no attention-mask broadcast in get_batch (Megatron's flag)"),
    _f("--transformer_impl", "transformer_engine", "the layers' implementation (Megatron-LM's flag): Transformer "
       "Engine's fused modules, or Megatron-core's local ones", type=str, choices=TRANSFORMER_IMPLS),
    _f("--attention_backend", "auto", "attention kernel (Megatron-LM's flag): under Transformer Engine auto/flash/fused "
       "run a flash-style kernel and unfused materialises the scores; local is Megatron-core's DotProductAttention "
       "(flash with --use_flash_attn)", type=str, choices=ATTENTION_BACKENDS),
    _switch("--no_apex", "the local path without apex or Transformer Engine installed: torch norms, fp32 softmax with "
            "an explicit mask, no gradient-accumulation fusion, torch's AdamW and a host-synchronised gradient norm per "
            "tensor (Megatron-core's fallbacks)"),
    _switch("--no_masked_softmax_fusion", "materialised attention: cast to fp32, mask and softmax as separate kernels "
            "(Megatron's flag)"),
    _switch("--no_rope_fusion", "rotary embedding as eager torch operations instead of Transformer Engine's fused "
            "kernel (Megatron's flag)"),
    _switch(("--no_bias_gelu_fusion", "--no_bias_swiglu_fusion"), "bias and activation as separate eager kernels "
            "(Megatron's flags)"),
    _switch("--no_bias_dropout_fusion", "bias, dropout and residual add as separate eager kernels (Megatron's flag)"),
    _switch("--cross_entropy_loss_fusion", "the vocab-parallel cross entropy in one fused kernel (Megatron's flag)"),
    _f("--cuda_graph_impl", "none", "CUDA graphs (Megatron-LM's flag): none, per-layer graphs (local, "
       "transformer_engine) or full_iteration; graphed kernels skip PyTorch's per-launch host cost", type=str,
       choices=CUDA_GRAPH_IMPLS),
    _f("--cuda_graph_scope", (), "what --cuda_graph_impl captures (Megatron's flag): attn, mlp, moe, moe_router, "
       "moe_preprocess, mamba, full_iteration (local graphs); none given (or full): whole layers; the captured ops' "
       "host time becomes one graph replay", type=str, nargs="+", choices=(*GRAPH_SCOPE_CHOICES, "full")),
    _f("--recompute_modules", ("core_attn",), "with --recompute_granularity selective: what is recomputed in backward "
       "(Megatron's flag): core_attn, layernorm (norms not fused into a linear), moe_act (the experts' activation), "
       "mla_up_proj (MLA's query and key/value up projections), mlp (the dense layers' MLPs); moe and shared_experts "
       "are not modelled",
       type=str, nargs="+", choices=RECOMPUTE_MODULE_CHOICES),
    _f("--cp_comm_type", "p2p", "context parallelism's communication (Megatron-core's flag): p2p (ring attention), "
       "a2a (all-to-all of Q/K/V/O, DeepSpeed-Ulysses), allgather (all-gathered K/V) or a2a+p2p (hierarchical)",
       type=str, choices=CP_COMM_TYPES),
    _f("--hierarchical_context_parallel_sizes", None, "with --cp_comm_type a2a+p2p: the a2a and p2p levels' sizes "
       "(their product is --context_parallel_size; Megatron's flag)", type=int_tuple),
    _switch("--overlap_param_gather", "the distributed optimizer's parameter all-gather overlaps the next forward, "
            "bucket by bucket (Megatron's flag; needs --use-distributed-optimizer; without --overlap_grad_reduce one "
            "bucket per buffer, as Megatron-core runs it)"),
    _switch(("--grad_reduce_in_bf16", "--no_grad_reduce_in_fp32"), "accumulate and reduce the gradients in bf16 "
            "(Megatron's --grad-reduce-in-bf16; its default reduces in fp32)"),
    _f("--pipeline_model_parallel_layout", None, "the layers of every virtual pipeline stage in Megatron-core's "
       "syntax: E (embedding), t (transformer layer), m (MTP layer), L (loss), | between stages, (..)*N to repeat; "
       "e.g. 'Et|(tt|)*30mL'", type=str),
    _f("--mtp_num_layers", None, "multi-token prediction layers, on the last virtual stage or where the layout's m "
       "puts them (default: the preset's, DeepSeek-V3's 1; 0 turns them off; Megatron's flag)", type=_count),
    _f("--window_size", None, "sliding-window attention LEFT,RIGHT in tokens (-1: unbounded; GPT-OSS 128,0; "
       "Megatron's flag)", type=int_pair),
    _f("--window_attn_skip_freq", None, "with --window_size: every N-th layer attends to the whole sequence "
       "(GPT-OSS: 2; Megatron's flag)"),
    _f("--fp8_recipe", "delayed", "with --dtype float8: Transformer Engine's scaling recipe (Megatron-LM's flag): "
       "delayed, tensorwise (current scaling), mxfp8 (Blackwell) or blockwise", type=str, choices=FP8_RECIPES),
]
DEEPSPEED = [
    _f("--stage", 3, "ZeRO stage", choices=(1, 2, 3)),
    _switch("--amp_enabled", "AMP (skips the initial parameter broadcast)"),
    _f("--reduce_bucket_size", int(5e8), "gradient reduction bucket, elements"),
    _f("--allgather_bucket_size", int(5e8), "parameter all-gather bucket (stage 1/2), elements"),
    _switch("--contiguous_gradients", "reduce partitions to their owners instead of all-reduce"),
    _f("--param_persistence_threshold", int(1e5), "stage 3: parameters this small stay gathered", type=_count),
    _f("--model_persistence_threshold", sys.maxsize, "stage 3: total persistent parameters limit", type=_count),
    _f("--max_live_parameters", int(1e9), "stage 3: gathered parameters limit", type=_count),
    _f("--prefetch_bucket_size", int(1e9), "stage 3: prefetch queue size, elements", type=_count),
]
COLLECTIVE = [
    _f("--begin_size", 1048576, "first message size (bytes; 64K, 1M, 1G accepted)", type=_size),
    _f("--end_size", 1048576, "last message size", type=_size),
    _f("--step_factor", 2, "size multiplier between steps"),
    _f("--test_comm", "all_reduce", "collective to sweep", type=str),
    _f("--iter_num", 500, "iterations per size"),
    _f("--multi_all_reduce_enable", 0, "AICB's multi all-reduce test (0 or 1)", type=_count, choices=(0, 1)),
]
MOE = [
    _switch("--moe_enable", "mixture-of-experts MLP", negatable=True),
    _f("--expert_model_parallel_size", 1, "expert-parallel size (ep)"),
    _f("--expert_tensor_parallel_size", None, "tensor-parallel size inside experts (default tp)"),
    _f("--num_experts", 1, "experts per MoE layer"),
    _f("--moe_router_topk", 1, "experts each token is routed to"),
    _f("--moe_ffn_hidden_size", None, "expert MLP hidden size (default --ffn_hidden_size)"),
    _switch("--moe_grouped_gemm", "grouped GEMM for the local experts"),
    _f("--activation_func", None, "MLP activation, AICB's flag: gelu (the default MLP) or swiglu (the same as "
       "--swiglu); it must agree with --swiglu", type=str, choices=ACTIVATIONS),
    _f("--moe_token_dispatcher_type", "alltoall", "token dispatcher: alltoall, allgather, or flex (DeepEP, with "
       "--moe_enable_deepep)", type=str, choices=DISPATCHERS),
    _switch("--moe_enable_deepep", "DeepEP's fused dispatch and combine (with --moe_token_dispatcher_type flex)"),
    _f("--moe_router_load_balancing_type", "aux_loss", "the router's balancing (Megatron-core's flag): aux_loss, "
       "seq_aux_loss, sinkhorn or none", type=str, choices=LOAD_BALANCING),
    _f("--moe_aux_loss_coeff", 0.0, "the load-balancing loss's weight (Megatron's flag; 0 computes no loss)",
       type=non_negative),
    _f("--moe_z_loss_coeff", None, "the router z-loss's weight (Megatron's flag; none: no z-loss)", type=non_negative),
    _f("--moe_router_score_function", None, "softmax (default) or sigmoid (DeepSeek-V3; Megatron's flag)", type=str,
       choices=("softmax", "sigmoid")),
    _switch("--moe_permute_fusion", "Transformer Engine's fused permute and unpermute (Megatron's flag)"),
    _f("--moe_router_dtype", None, "the router's logits and probabilities in fp32 or fp64 (Megatron's flag; default "
       "the activations' dtype)", type=str, choices=("fp32", "fp64")),
    _switch("--moe_router_fusion", "Transformer Engine's fused top-k, score and aux-loss kernels (Megatron's flag)"),
    _switch("--moe_shared_expert_overlap", "the shared experts run beside the dispatch and combine (Megatron's flag)"),
    _f("--moe_imbalance", 1.0, "load imbalance: the busiest expert's tokens over the mean (>= 1; 1 = balanced); its "
       "GEMMs and all-to-alls set the pace", type=at_least_one),
    _switch("--overlap_moe_expert_parallel_comm", "1F1B overlaps one micro-batch's expert all-to-alls with another's "
            "computation (Megatron's flag)"),
    _switch("--delay_wgrad_compute", "with --overlap_moe_expert_parallel_comm: weight gradients delayed to fill the "
            "overlap (Megatron's flag)"),
    _f("--moe_routing_skew", 0.0, "routing skew s: expert e gets a share proportional to (e+1)^-s (0 = balanced)",
       type=non_negative),
    _f("--moe_expert_capacity_factor", None, "expert capacity factor (tokens over capacity are dropped)", type=positive_number),
    _switch("--moe_pad_expert_input_to_capacity", "pad every expert's input to its capacity"),
    _switch("--moe_fp8_dispatch", "dispatch tokens in FP8 (1 byte per value plus fp32 scales per 128 values)"),
]
AIOB = [
    _switch("--aiob_enable", "measure computation times on this device (AIOB)"),
    _f("--compute_source", None, "where computation times come from: aiob, file, model (the compute model; "
       "'roofline' is accepted for it) or placeholder (default: aiob with --aiob_enable, file with --comp_filepath, "
       "else model when --gpu_type is known, else placeholder)", type=str,
       choices=("aiob", "file", "model", "roofline", "placeholder")),
    _f("--comp_filepath", None, "read computation times from this AIOB file", type=path_text),
    _switch("--gated_linear_unit", "gated linear unit (set by --swiglu)"),
    _switch("--bias_gelu_fusion", "fused bias+GeLU"),
    _switch("--openai_gelu", "OpenAI's GeLU"),
    _switch("--onnx_safe", "ONNX workarounds"),
    _switch("--squared_relu", "squared ReLU activation"),
]
SIMAI = [_switch("--overlap_version", "SimAI overlap variant")]
DEEPSEEK = [
    _f(("--n_dense_layers", "--n_dense_layer"), None, "leading dense (non-MoE) layers (DeepSeek frame default 3)", type=_count),
    _f(("--n_shared_expert", "--n_shared_experts"), None, "shared experts (DeepSeek frame default 2)", type=_count),
    _f("--qk_rope_dim", None, "query/key rotary head dimension (default 64)"),
    _f("--qk_nope_dim", None, "query/key non-rotary head dimension (default 128)"),
    _f("--q_lora_rank", None, "query down-projection rank (default 1536; 0: no query compression)", type=_count),
    _f("--kv_lora_rank", None, "key/value down-projection rank (default 512)"),
    _f("--v_head_dim", None, "value head dimension (default 128)"),
]
REPLAY = [
    _f("--backend", "auto", "torch.distributed backend of the replay (auto: nccl with CUDA, else gloo)", type=str,
       choices=("auto", "nccl", "gloo")),
    _f("--compute_mode", "auto", "computation items: sleep their time, run a real matmul of their shapes (gemm), or "
       "skip them (auto: sleep when timed, gemm on a GPU, else skip)", type=str,
       choices=("auto", "sleep", "gemm", "skip")),
    _f("--warmup", 1, "untimed, unlogged iterations before the measured ones", type=_count),
    _f("--timeout", 300.0, "seconds any one operation may take before every rank stops with a message",
       type=positive_number),
    _f("--join_timeout", 1800.0, "seconds the ranks may take to start and join the process group (and rank 0 to "
       "measure AIOB's compute times) before every rank stops with a message", type=positive_number),
    _switch("--check", "check the flags, the launch and every pipeline stage's workload as the replay would, then "
            "stop: no process group, nothing written (the AICB scripts run it once before torchrun)"),
    _f("--workload", None, "replay this AICB workload CSV instead of generating one ({pp_rank} and {rank} in the "
       "path pick a file per pipeline stage or rank)", type=path_text),
    _f("--emulate", None, "run these collectives (comma list, or all) as the gloo emulations do, even where the "
       "backend has them (for comparison and tests)", type=str),
]
INFERENCE = [
    # AICB 2.1's SimAI_inference_workload_generator / Vidur_workload_generator flags (its defaults), then ours.
    _f("--phase", "decode", "inference phase: prefill (tokens = seq_length x micro_batch) or decode (tokens = "
       "micro_batch, each attending to a KV cache of seq_length)", type=str, choices=("prefill", "decode")),
    _f("--seq_length", 1, "prompt length (prefill) or cached context per sequence (decode)"),
    _f("--micro_batch", 1, "sequences per attention replica (AICB's bs)"),
    _f("--world_size", 1, "number of GPUs"),
    _f("--tensor_model_parallel_size", 1, "attention tensor-parallel size (tp)"),
    _f("--expert_model_parallel_size", 1, "expert-parallel size (ep; spans the attention replicas)"),
    _f(("--pipeline_model_parallel", "--pipeline_model_parallel_size"), 1, "pipeline-parallel size (pp)"),
    _switch("--moe_enable", "accepted for AICB compatibility (the inference models are MoE)", default=True),
    _f("--result_dir", "results/workload/", "directory of the output files", type=str),
    _switch("--aiob_enable", "time the computation here (torch modules; CPU fallbacks without a GPU)"),
    _f("--aiob_forward_loops", 1, "timed forward passes per operation with --aiob_enable"),
    _f("--pp_rank", 0, "pipeline stage whose workload is written", type=_count),
    _f("--gpu_type", None, "GPU of the compute model's table (H100, H200, ...): estimated compute times and the "
       "memory check", type=str),
    _f("--compute_source", None, "aiob, file, model or placeholder (default: aiob with --aiob_enable, file with "
       "--comp_filepath or an existing AIOB output, model with --gpu_type, else AICB's 1 ns placeholder)", type=str,
       choices=("aiob", "file", "model", "placeholder")),
    _f("--comp_filepath", None, "read computation times from this inference compute file (AICB's or ours)",
       type=path_text),
    _f("--dtype", None, "weights of the linear layers: float4 (NVFP4, Blackwell only), float8 or bfloat16 (default: "
       "the model's, DeepSeek-V3 float8, the others bfloat16)", type=str),
    _f("--kv_dtype", "bfloat16", "KV cache (and recurrent state) dtype: bfloat16 or float8", type=str),
    _switch("--moe_tp", "split every expert over the TP ranks (SGLang's and vLLM's default MoE: an all-reduce over TP "
            "instead of the EP dispatch and combine; needs --expert_model_parallel_size 1)"),
    _f("--speculative_tokens", 0, "decode steps verify this many draft tokens per sequence (MTP / speculative "
       "decoding) and run as many draft passes", type=_count),
    _f("--host", None, "host time per step: graphs (decode replays a CUDA graph) or eager (every kernel launched); "
       "default none, as AICB", type=str, choices=("graphs", "eager")),
    _f("--moe_routing_strategy", "RoundRobin", "RoundRobin (balanced; AICB's sizes) or UniformRandom (seeded)",
       type=str, choices=("RoundRobin", "UniformRandom")),
    _f("--moe_routing_skew", 0.0, "Zipf skew s of the routing: expert e gets a share proportional to (e+1)^-s",
       type=non_negative),
    _f("--seed", 0, "seed of UniformRandom routing", type=integer),
    _f("--dispatch_dtype", "fp8", "MoE dispatch precision: fp8 (DeepEP's, AICB's) or bf16 (the combine is bf16)",
       type=str, choices=("fp8", "bf16")),
    _f(("--output", "-o"), None, "write to this path instead of AICB's name under --result_dir", type=str),
    _f("--max_items", None, "refuse a workload estimated above this many items (default 5,000,000; see docs/workloads.md, "
       "'Size limit')"),
]
"""Flags of the inference entries (:mod:`workload_generator.inference_entry`); not part of :data:`ALL_GROUPS`,
whose training flags share some names with other defaults."""


def add_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup, flags: Sequence[Flag]) -> None:
    """Add ``flags`` with their defaults (every long name in both spellings) to a parser or group."""
    for flag in flags:
        names = [s for name in flag.names for s in spellings(name)]
        kwargs: dict[str, Any] = {"dest": flag.dest, "default": flag.default,
                                  "help": f"{flag.help} (default: {flag.default})"}
        if flag.action is not None:
            kwargs["action"] = flag.action
        else:
            kwargs.update(type=flag.type, metavar=flag.dest.upper() if flag.choices is None else None)
            if flag.choices is not None:
                kwargs["choices"] = flag.choices
            if flag.nargs is not None:
                kwargs["nargs"] = flag.nargs
        parser.add_argument(*names, **kwargs)


ALL_GROUPS = {
    "general": GENERAL, "model": MODEL, "Megatron": MEGATRON, "DeepSpeed": DEEPSPEED,
    "collective test": COLLECTIVE, "MoE": MOE, "AIOB": AIOB, "SimAI": SIMAI, "DeepSeek": DEEPSEEK,
    "replay": REPLAY,
}
DEFAULTS = {flag.dest: flag.default for group in ALL_GROUPS.values() for flag in group}
# AICB's DeepSeek defaults (get_deepseek_params), used with --frame DeepSeek when no preset sets them.
DEEPSEEK_DEFAULTS = dict(n_dense_layers=3, n_shared_expert=2, qk_rope_dim=64, qk_nope_dim=128, q_lora_rank=1536,
                         kv_lora_rank=512, v_head_dim=128)



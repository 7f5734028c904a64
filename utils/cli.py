"""Command-line flags shared by ``aicb.py`` and the AICB-named generator modules.

Flags keep AICB's names and defaults (``utils/utils.py:get_params`` in AICB); every long flag is
also accepted with dashes and underscores swapped (``--use-distributed-optimizer`` and
``--use_distributed_optimizer``), as Megatron users type both.  Values come from three layers, the
later winning: AICB's defaults, the model preset (``--model_name`` / ``-m``), and the flags the user
gave.  A preset never overrides a flag the user gave (AICB's scripts do: a bug).

Bad flags and impossible combinations end with one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, NoReturn

from utils.config import FRAMES, JobConfig, TrainingConfig
from utils.errors import ConfigError, UserError
from utils.model_config import NORMALIZATIONS, POSITION_EMBEDDINGS, ModelConfig
from utils.parallel import ParallelConfig
from utils.presets import find_preset, get_preset, known_names, resolve_model_size, size_label, states
from utils.units import parse_size


class CliParser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def integer(text: str) -> int:
    """argparse type: an integer, also written as ``5e8`` or ``1_000`` (AICB's bucket sizes are often
    given so)."""
    try:
        value = float(text.replace("_", "")) if any(c in text for c in ".eE") else int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None
    if value != int(value):
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    return int(value)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = integer(text)
    except argparse.ArgumentTypeError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def number(text: str) -> float:
    """argparse type: a real number."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def positive_number(text: str) -> float:
    """argparse type: a number > 0."""
    value = number(text)
    if not value > 0.0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def fraction(text: str) -> float:
    """argparse type: a number in (0, 1]."""
    value = number(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {text!r}")
    return value


def non_negative(text: str) -> float:
    """argparse type: a number >= 0."""
    value = number(text)
    if not value >= 0.0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


_int = integer


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
        if negatable:
            for name in option_strings:
                if name.startswith("--"):
                    names += ["--no_" + name[2:], "--no-" + name[2:]]
        kwargs.pop("type", None)
        super().__init__(list(dict.fromkeys(names)), dest, nargs="?", const=True, metavar="BOOL", **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        on = not (option_string or "").startswith("--no")
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


# ---- the flags ------------------------------------------------------------------------------
GENERAL = [
    _f(("--frame", "--comm_frame"), "Megatron", "training framework to mock (--comm_frame: AICB's older spelling)",
       type=str, choices=FRAMES),
    _f("--gpu_type", None, "GPU type (names the output files; selects the analytical compute model)", type=str),
    _f("--world_size", 1, "number of GPUs"),
    _f("--tensor_model_parallel_size", 1, "tensor-parallel size (tp)"),
    _f(("--pipeline_model_parallel", "--pipeline_model_parallel_size"), 1, "pipeline-parallel size (pp)"),
    _f(("--context-parallel-size", "--context_parallel_size"), 1, "context-parallel size (cp)",
       dest="context_parallel_size"),
    _f("--pp_rank", 0, "pipeline stage whose workload is generated (AICB's -1 means 0)"),
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
    _f(("--output", "-o"), None, "write the workload to this path instead of AICB's default location", type=str),
    _f("--output_dir", None, "directory for results (default: results/)", type=str),
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
       "(default: the preset's, else Megatron's 0.1)", type=float),
    _f(("--hidden_dropout", "--hidden-dropout"), None, "dropout probability after the attention and the MLP "
       "(default: the preset's, else Megatron's 0.1)", type=float),
]
MEGATRON = [
    _switch("--enable_sequence_parallel", "Megatron sequence parallelism"),
    _switch(("--use-distributed-optimizer",), "Megatron's distributed optimizer (ZeRO-1 style)"),
    _switch("--overlap_grad_reduce", "overlap the DP gradient reduction with backward"),
    _f("--num_layers_per_virtual_pipeline_stage", None, "layers per virtual stage (interleaved 1F1B)"),
    _f("--decoder_first_pipeline_num_layers", None, "layers of the first pipeline stage (uneven split)"),
    _f("--decoder_last_pipeline_num_layers", None, "layers of the last pipeline stage (uneven split)"),
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
    _switch(("--use-tp-pp-dp-mapping",), "rank order tp-cp-ep-pp-dp instead of Megatron's default tp-cp-ep-dp-pp"),
    _f("--ddp_bucket_size", None, "DP gradient bucket size in elements (default Megatron's: max(40M, 1M*dp))"),
    _switch("--recompute_activations", "selective activation recomputation"),
    _f("--recompute_granularity", None, "full or selective activation recomputation", type=str,
       choices=("full", "selective")),
    _switch("--no_create_attention_mask_in_dataloader", "no attention-mask broadcast in get_batch (Megatron's flag)"),
]
DEEPSPEED = [
    _f("--stage", 3, "ZeRO stage", choices=(1, 2, 3)),
    _switch("--amp_enabled", "AMP (skips the initial parameter broadcast)"),
    _f("--reduce_bucket_size", int(5e8), "gradient reduction bucket, elements"),
    _f("--allgather_bucket_size", int(5e8), "parameter all-gather bucket (stage 1/2), elements"),
    _switch("--contiguous_gradients", "reduce partitions to their owners instead of all-reduce"),
    _f("--param_persistence_threshold", int(1e5), "stage 3: parameters this small stay gathered"),
    _f("--model_persistence_threshold", sys.maxsize, "stage 3: total persistent parameters limit"),
    _f("--max_live_parameters", int(1e9), "stage 3: gathered parameters limit"),
    _f("--prefetch_bucket_size", int(1e9), "stage 3: prefetch queue size, elements"),
]
COLLECTIVE = [
    _f("--begin_size", 1048576, "first message size (bytes; 64K, 1M, 1G accepted)", type=_size),
    _f("--end_size", 1048576, "last message size", type=_size),
    _f("--step_factor", 2, "size multiplier between steps"),
    _f("--test_comm", "all_reduce", "collective to sweep", type=str),
    _f("--iter_num", 500, "iterations per size"),
    _f("--multi_all_reduce_enable", 0, "AICB's multi all-reduce test (0 or 1)"),
]
MOE = [
    _switch("--moe_enable", "mixture-of-experts MLP", negatable=True),
    _f("--expert_model_parallel_size", 1, "expert-parallel size (ep)"),
    _f("--expert_tensor_parallel_size", None, "tensor-parallel size inside experts (default tp)"),
    _f("--num_experts", 1, "experts per MoE layer"),
    _f("--moe_router_topk", 1, "experts each token is routed to"),
    _f("--moe_ffn_hidden_size", None, "expert MLP hidden size (default --ffn_hidden_size)"),
    _switch("--moe_grouped_gemm", "grouped GEMM for the local experts"),
    _f("--activation_func", None, "MLP activation", type=str),
    _f("--moe_token_dispatcher_type", "alltoall", "token dispatcher: alltoall or allgather", type=str,
       choices=("alltoall", "allgather")),
    _f("--moe_routing_skew", 0.0, "routing skew s: expert e gets a share proportional to (e+1)^-s (0 = balanced)",
       type=float),
    _f("--moe_expert_capacity_factor", None, "expert capacity factor (tokens over capacity are dropped)", type=float),
    _switch("--moe_pad_expert_input_to_capacity", "pad every expert's input to its capacity"),
    _switch("--moe_fp8_dispatch", "dispatch tokens in FP8 (1 byte per value plus fp32 scales per 128 values)"),
]
AIOB = [
    _switch("--aiob_enable", "measure computation times on this device (AIOB)"),
    _f("--compute_source", None, "where computation times come from: aiob, file, model (the compute model; "
       "'roofline' is accepted for it) or placeholder (default: aiob with --aiob_enable, file with --comp_filepath, "
       "else model when --gpu_type is known, else placeholder)", type=str,
       choices=("aiob", "file", "model", "roofline", "placeholder")),
    _f("--comp_filepath", None, "read computation times from this AIOB file", type=str),
    _switch("--gated_linear_unit", "gated linear unit (set by --swiglu)"),
    _switch("--bias_gelu_fusion", "fused bias+GeLU"),
    _switch("--openai_gelu", "OpenAI's GeLU"),
    _switch("--onnx_safe", "ONNX workarounds"),
    _switch("--squared_relu", "squared ReLU activation"),
]
SIMAI = [_switch("--overlap_version", "SimAI overlap variant")]
DEEPSEEK = [
    _f(("--n_dense_layers", "--n_dense_layer"), None, "leading dense (non-MoE) layers (DeepSeek frame default 3)"),
    _f(("--n_shared_expert", "--n_shared_experts"), None, "shared experts (DeepSeek frame default 2)"),
    _f("--qk_rope_dim", None, "query/key rotary head dimension (default 64)"),
    _f("--qk_nope_dim", None, "query/key non-rotary head dimension (default 128)"),
    _f("--q_lora_rank", None, "query down-projection rank (default 1536; 0: no query compression)"),
    _f("--kv_lora_rank", None, "key/value down-projection rank (default 512)"),
    _f("--v_head_dim", None, "value head dimension (default 128)"),
]
REPLAY = [
    _f("--backend", "auto", "torch.distributed backend of the replay (auto: nccl with CUDA, else gloo)", type=str,
       choices=("auto", "nccl", "gloo")),
    _f("--compute_mode", "auto", "computation items: sleep their time, run a real matmul of their shapes (gemm), or "
       "skip them (auto: sleep when timed, gemm on a GPU, else skip)", type=str,
       choices=("auto", "sleep", "gemm", "skip")),
    _f("--warmup", 1, "untimed, unlogged iterations before the measured ones"),
    _f("--timeout", 300.0, "seconds any one operation may take before every rank stops with a message", type=float),
    _f("--workload", None, "replay this AICB workload CSV instead of generating one ({pp_rank} and {rank} in the "
       "path pick a file per pipeline stage or rank)", type=str),
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
    _f("--pp_rank", 0, "pipeline stage whose workload is written"),
    _f("--gpu_type", None, "GPU of the compute model's table (H100, H200, ...): estimated compute times and the "
       "memory check", type=str),
    _f("--compute_source", None, "aiob, file, model or placeholder (default: aiob with --aiob_enable, file with "
       "--comp_filepath or an existing AIOB output, model with --gpu_type, else AICB's 1 ns placeholder)", type=str,
       choices=("aiob", "file", "model", "placeholder")),
    _f("--comp_filepath", None, "read computation times from this inference compute file (AICB's or ours)",
       type=str),
    _f("--dtype", None, "weights of the linear layers: float8 or bfloat16 (default: the model's, DeepSeek float8, "
       "Qwen3 bfloat16)", type=str),
    _f("--kv_dtype", "bfloat16", "KV cache (and recurrent state) dtype", type=str),
    _f("--moe_routing_strategy", "RoundRobin", "RoundRobin (balanced; AICB's sizes) or UniformRandom (seeded)",
       type=str, choices=("RoundRobin", "UniformRandom")),
    _f("--moe_routing_skew", 0.0, "Zipf skew s of the routing: expert e gets a share proportional to (e+1)^-s",
       type=float),
    _f("--seed", 0, "seed of UniformRandom routing"),
    _f("--dispatch_dtype", "fp8", "MoE dispatch precision: fp8 (DeepEP's, AICB's) or bf16 (the combine is bf16)",
       type=str, choices=("fp8", "bf16")),
    _f(("--output", "-o"), None, "write to this path instead of AICB's name under --result_dir", type=str),
]
"""Flags of the inference entries (:mod:`workload_generator.inference_entry`); not part of :data:`ALL_GROUPS`,
whose training flags share some names with other defaults."""


def add_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup, flags: Sequence[Flag]) -> None:
    """Add ``flags`` with their defaults (every long name in both spellings) to a parser or group."""
    for flag in flags:
        names = [s for name in flag.names for s in _spellings(name)]
        kwargs: dict[str, Any] = {"dest": flag.dest, "default": flag.default,
                                  "help": f"{flag.help} (default: {flag.default})"}
        if flag.action is not None:
            kwargs["action"] = flag.action
        else:
            kwargs.update(type=flag.type, metavar=flag.dest.upper() if flag.choices is None else None)
            if flag.choices is not None:
                kwargs["choices"] = flag.choices
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


def _spellings(name: str) -> list[str]:
    if name.startswith("--"):
        body = name[2:]
        return list(dict.fromkeys([name, "--" + body.replace("-", "_"), "--" + body.replace("_", "-")]))
    return [name]


def build_parser(prog: str, description: str, extra: Callable[[argparse.ArgumentParser], None] | None = None,
                 groups: Sequence[str] | None = None) -> CliParser:
    """The AICB flag parser.  Every default is ``SUPPRESS`` so that we know what the user gave;
    :func:`resolve` fills in the rest."""
    parser = CliParser(prog=prog, description=description, allow_abbrev=False,
                       argument_default=argparse.SUPPRESS)
    add_job_flags(parser, groups)
    if extra is not None:
        extra(parser)
    return parser


def add_job_flags(parser: argparse.ArgumentParser, groups: Sequence[str] | None = None,
                  skip: Sequence[str] = ()) -> set[str]:
    """Add the job flags of ``groups`` (all by default) to ``parser``, every default ``SUPPRESS``; flags
    whose destination is in ``skip`` or whose spellings the parser already has are left out (another
    tool's own flag of the same name wins).  Returns the destinations added."""
    added: set[str] = set()
    taken = set(getattr(parser, "_option_string_actions", {}))
    for title, flags in ALL_GROUPS.items():
        if groups is not None and title not in groups:
            continue
        group = parser.add_argument_group(title)
        for flag in flags:
            names = [s for name in flag.names for s in _spellings(name) if s not in taken]
            if flag.dest in skip or not names:
                continue
            kwargs: dict[str, Any] = {"dest": flag.dest, "help": f"{flag.help} (default: {flag.default})",
                                      "default": argparse.SUPPRESS}
            if flag.action is not None:
                kwargs["action"] = flag.action
            else:
                kwargs["type"] = flag.type
                kwargs["metavar"] = flag.dest.upper() if flag.choices is None else None
                if flag.choices is not None:
                    kwargs["choices"] = flag.choices
            group.add_argument(*names, **kwargs)
            added.add(flag.dest)
    return added


ARCHITECTURE_FLAGS = ("hidden_size", "num_layers", "num_attention_heads")
"""Flags that describe a model without a preset: with any of them, an unknown ``--model_name`` is a label."""


def resolve(given: dict[str, Any]) -> dict[str, Any]:
    """All flag values: AICB defaults, then the preset, then what the user gave.

    ``--model_name`` names a preset when it is one; otherwise it is a label for the files, as in AICB
    (``ds_tiny``, ``my_llm``), which needs the model's dimensions (:data:`ARCHITECTURE_FLAGS`) unless the
    job trains nothing (``--frame collective_test``).  ``-m/--model_size`` always names a preset."""
    frame = given.get("frame", DEFAULTS["frame"])
    label = given.get("model_name")
    known = find_preset(label) if label is not None else None
    preset = None
    if given.get("model_size") is not None:
        size_name = resolve_model_size(given["model_size"], frame)
        preset = get_preset(size_name)
        if known is not None and known.name != preset.name:
            raise ConfigError(f"-m/--model_size {given['model_size']} ({size_name}) contradicts --model_name {label}")
    elif label is not None:
        preset = known
        if preset is None and frame != "collective_test" and not any(f in given for f in ARCHITECTURE_FLAGS):
            raise ConfigError(f"--model_name {label!r} is no preset and no dimensions were given: give --hidden_size, "
                              f"--num_layers and --num_attention_heads (the name then only labels the files), or "
                              f"one of: {', '.join(known_names())}")
    values = dict(DEFAULTS)
    if frame == "DeepSeek":
        values.update(DEEPSEEK_DEFAULTS)
        values["moe_enable"] = True
    if preset is not None:
        values.update(_preset_flags(preset))
    values.update({k: v for k, v in given.items() if k != "model_size"})
    if (preset is not None and preset.is_moe and "num_experts" in given and "moe_router_topk" not in given
            and values["moe_router_topk"] > values["num_experts"]):
        # the preset's top-k belongs to its own expert count: with fewer experts of the user's, AICB's default
        values["moe_router_topk"] = DEFAULTS["moe_router_topk"]
    if label is None and given.get("model_size") is not None:
        label = size_label(given["model_size"], frame)  # the file names AICB's scripts give
    values["model_name"] = label if label is not None else preset.name if preset is not None else None
    values["preset"] = preset
    values["_given"] = frozenset(given)
    if values["pp_rank"] == -1:
        values["pp_rank"] = 0
    return values


def _preset_flags(model: ModelConfig) -> dict[str, Any]:
    """The flag values a preset sets.  Fields the preset derives (the GPT presets' FFN of 4h, an MoE FFN equal
    to the dense one) are left to be derived again from the final flags, as Megatron does: copying them
    would freeze the derivation before ``--swiglu`` or ``--ffn_hidden_size`` applies."""
    flags = dict(
        hidden_size=model.hidden_size, num_layers=model.num_layers, num_attention_heads=model.num_attention_heads,
        num_query_groups=model.num_query_groups, kv_channels=model.kv_channels_given,
        ffn_hidden_size=model.ffn_hidden_size if states(model, "ffn_hidden_size") else None,
        vocab_size=model.vocab_size,
        max_position_embeddings=model.max_position_embeddings, swiglu=model.swiglu,
        normalization=model.normalization, add_bias_linear=model.add_bias_linear,
        position_embedding_type=model.position_embedding_type,
        untie_embeddings_and_output_weights=model.untie_embeddings_and_output_weights,
        moe_enable=model.is_moe, attention_dropout=model.attention_dropout, hidden_dropout=model.hidden_dropout,
    )
    if model.is_moe:
        flags.update(num_experts=model.num_experts, moe_router_topk=model.moe_router_topk,
                     moe_ffn_hidden_size=model.moe_ffn_hidden_size if states(model, "moe_ffn_hidden_size") else None,
                     n_shared_expert=model.n_shared_experts,
                     n_dense_layers=model.n_dense_layers)
    if model.multi_latent_attention:
        flags.update(q_lora_rank=model.q_lora_rank, kv_lora_rank=model.kv_lora_rank, qk_nope_dim=model.qk_head_dim,
                     qk_rope_dim=model.qk_pos_emb_head_dim, v_head_dim=model.v_head_dim)
    return flags


def model_from(values: dict[str, Any]) -> ModelConfig:
    """The :class:`ModelConfig` the resolved flag values describe."""
    preset: ModelConfig | None = values.get("preset")
    moe = bool(values["moe_enable"])
    if moe and values["num_experts"] <= 1:
        raise ConfigError(f"--moe_enable needs --num_experts > 1, got {values['num_experts']}")
    if not moe and values["num_experts"] > 1:
        raise ConfigError(f"--num_experts {values['num_experts']} given without --moe_enable")
    mla = values["frame"] == "DeepSeek" or (preset is not None and preset.multi_latent_attention)
    kwargs: dict[str, Any] = dict(
        name=values["model_name"] or "custom", hidden_size=values["hidden_size"], num_layers=values["num_layers"],
        num_attention_heads=values["num_attention_heads"], num_query_groups=values["num_query_groups"],
        kv_channels_given=values["kv_channels"], ffn_hidden_size=values["ffn_hidden_size"],
        vocab_size=values["vocab_size"], max_position_embeddings=values["max_position_embeddings"],
        swiglu=values["swiglu"], normalization=values["normalization"] or "LayerNorm",
        add_bias_linear=values["add_bias_linear"],
        position_embedding_type=values["position_embedding_type"] or "learned_absolute",
        untie_embeddings_and_output_weights=values["untie_embeddings_and_output_weights"],
        num_experts=values["num_experts"] if moe else None, moe_router_topk=values["moe_router_topk"],
        moe_ffn_hidden_size=values["moe_ffn_hidden_size"], n_shared_experts=values["n_shared_expert"] or 0,
        n_dense_layers=values["n_dense_layers"] or 0, multi_latent_attention=mla,
    )
    if preset is not None:
        kwargs.update(add_qkv_bias=preset.add_qkv_bias, qk_layernorm=preset.qk_layernorm,
                      published_params=preset.published_params, source=preset.source)
        # derived fields (None here) compare as Megatron will derive them
        built = ModelConfig(**{**kwargs, "name": preset.name})
        ignored = {"name"} if preset.is_moe or built.is_moe else {"name", "moe_router_topk"}
        unchanged = all(getattr(preset, k) == getattr(built, k) for k in kwargs if k not in ignored)
        if not unchanged:
            kwargs.update(published_params=None, source=f"{preset.source}, changed by flags")
    for name in ("attention_dropout", "hidden_dropout"):  # training options, not architecture
        if values[name] is not None:
            kwargs[name] = values[name]
    if mla:
        kwargs.update(q_lora_rank=values["q_lora_rank"] or None, kv_lora_rank=values["kv_lora_rank"],
                      qk_head_dim=values["qk_nope_dim"], qk_pos_emb_head_dim=values["qk_rope_dim"],
                      v_head_dim=values["v_head_dim"])
    return ModelConfig(**kwargs)


def job_from(values: dict[str, Any]) -> JobConfig:
    """The validated :class:`JobConfig` of resolved flag values.  Raises :class:`ConfigError`."""
    recompute = values["recompute_granularity"] or ("selective" if values["recompute_activations"] else "none")
    training_fields = {f.name for f in fields(TrainingConfig)}
    extra = {k: v for k, v in values.items() if k not in training_fields and k != "preset"}
    training = TrainingConfig(
        frame=values["frame"], seq_length=values["seq_length"], dtype=values["dtype"], epoch_num=values["epoch_num"],
        use_distributed_optimizer=values["use_distributed_optimizer"],
        make_vocab_size_divisible_by=values["make_vocab_size_divisible_by"], recompute=recompute,
        ddp_bucket_size=values["ddp_bucket_size"], overlap_grad_reduce=values["overlap_grad_reduce"],
        use_flash_attn=values["use_flash_attn"],
        computation_enable=values["computation_enable"] or values["aiob_enable"],
        aiob_enable=values["aiob_enable"], comp_filepath=values["comp_filepath"], gpu_type=values["gpu_type"],
        moe_token_dispatcher_type=values["moe_token_dispatcher_type"], moe_routing_skew=values["moe_routing_skew"],
        moe_expert_capacity_factor=values["moe_expert_capacity_factor"],
        moe_pad_expert_input_to_capacity=values["moe_pad_expert_input_to_capacity"],
        moe_grouped_gemm=values["moe_grouped_gemm"], moe_fp8_dispatch=values["moe_fp8_dispatch"],
        gradient_accumulation_fusion=not values["no_gradient_accumulation_fusion"],
        accumulate_allreduce_grads_in_fp32=values["accumulate_allreduce_grads_in_fp32"],
        scatter_gather_tensors_in_pipeline=values["scatter_gather_tensors_in_pipeline"],
        tp_comm_overlap=values["tp_comm_overlap"], extra=extra,
    )
    global_batch = _global_batch(values)
    parallel = ParallelConfig(
        world_size=values["world_size"], tp=values["tensor_model_parallel_size"],
        pp=values["pipeline_model_parallel"], cp=values["context_parallel_size"],
        ep=values["expert_model_parallel_size"], etp=values["expert_tensor_parallel_size"],
        sequence_parallel=values["enable_sequence_parallel"], micro_batch=values["micro_batch"],
        global_batch=global_batch, vpp_layers=values["num_layers_per_virtual_pipeline_stage"],
        pp_rank=values["pp_rank"], first_stage_layers=values["decoder_first_pipeline_num_layers"],
        last_stage_layers=values["decoder_last_pipeline_num_layers"],
        virtual_stages=values["num_virtual_stages_per_pipeline_rank"],
        embedding_in_split=values["account_for_embedding_in_pipeline_split"],
        loss_in_split=values["account_for_loss_in_pipeline_split"],
        order="tp-cp-ep-pp-dp" if values["use_tp_pp_dp_mapping"] else "tp-cp-ep-dp-pp",
    )
    model = model_from(values) if values["frame"] != "collective_test" else ModelConfig()
    return JobConfig(model=model, parallel=parallel, training=training)


def _global_batch(values: dict[str, Any]) -> int | None:
    """The global batch of the job: none for a collective sweep (it trains nothing: one micro-batch per
    replica stands in); AICB's default of 4 when it divides, else an error that names the flag to set."""
    if values["frame"] == "collective_test":
        return None
    batch = values["global_batch"]
    if "global_batch" in values.get("_given", ()):
        return batch
    world, micro = values["world_size"], values["micro_batch"]
    ranks = values["tensor_model_parallel_size"] * values["pipeline_model_parallel"] * values["context_parallel_size"]
    if ranks > 0 and micro > 0 and world % ranks == 0 and batch % (micro * (world // ranks)):
        step = micro * (world // ranks)
        raise ConfigError(f"the default --global_batch {batch} is not divisible by --micro_batch {micro} x data-parallel "
                          f"size {world // ranks} = {step}; set --global_batch to a multiple of {step}")
    return batch


def parse_job(argv: Sequence[str] | None, prog: str, description: str,
              extra: Callable[[argparse.ArgumentParser], None] | None = None) -> tuple[JobConfig, dict[str, Any]]:
    """Parse ``argv`` into a validated job and the resolved flag values."""
    parser = build_parser(prog, description, extra)
    given = vars(parser.parse_args(argv))
    values = resolve(given)
    from utils.io import check_not_input

    check_not_input({"-o/--output": values.get("output")},
                    {"--comp_filepath": values.get("comp_filepath"), "--workload": values.get("workload")})
    return job_from(values), values


def run_main(main: Callable[[], int | None], prog: str) -> NoReturn:
    """Run a CLI ``main``: user errors become one line on stderr and exit status 2."""
    try:
        code = main()
    except UserError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(1)
    sys.exit(code or 0)

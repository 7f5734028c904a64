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
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from utils.cli_types import (
    INT64_MAX,
    fraction,
    integer,
    non_negative,
    non_negative_int,
    number,
    positive_int,
    positive_number,
    pp_rank_type,
    probability,
    spellings,
)
from utils.errors import ConfigError, UserError

if TYPE_CHECKING:  # pragma: no cover
    from utils.config import JobConfig
    from utils.model_config import ModelConfig


__all__ = ["INT64_MAX", "CliParser", "add_job_flags", "build_parser", "fraction", "integer", "job_from", "model_from",
           "non_negative", "non_negative_int", "number", "parse_job", "positive_int", "positive_number", "pp_rank_type",
           "probability", "resolve", "run_main"]


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, sized without importing shutil (argparse builds one per ``add_argument``,
    and shutil pulls in the compression modules: a few ms of every command's start-up)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        if width is None:
            try:
                width = int(os.environ.get("COLUMNS", "")) or os.get_terminal_size().columns
            except (ValueError, OSError):
                width = 80
            width -= 2
        super().__init__(prog, indent_increment, max_help_position, width)


class CliParser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) and exit status 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def __getattr__(name: str) -> Any:
    # The flag tables (GENERAL, MODEL, ..., ALL_GROUPS, DEFAULTS) live in utils.cli_flags, built on first use.
    if name.isupper():
        from utils import cli_flags

        if hasattr(cli_flags, name):
            return getattr(cli_flags, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    from utils.cli_flags import ALL_GROUPS

    added: set[str] = set()
    taken = set(getattr(parser, "_option_string_actions", {}))
    for title, flags in ALL_GROUPS.items():
        if groups is not None and title not in groups:
            continue
        group = parser.add_argument_group(title)
        for flag in flags:
            names = [s for name in flag.names for s in spellings(name) if s not in taken]
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
                if flag.nargs is not None:
                    kwargs["nargs"] = flag.nargs
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
    from utils.cli_flags import DEEPSEEK_DEFAULTS, DEFAULTS
    from utils.presets import find_preset, get_preset, known_names, resolve_model_size, size_label

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
    activation = given.get("activation_func")
    if activation is not None:  # AICB's spelling of the MLP kind: the flag wins over a preset, not over --swiglu
        wanted = activation == "swiglu"
        if "swiglu" in given and bool(given["swiglu"]) != wanted:
            raise ConfigError(f"--activation_func {activation} contradicts {'--swiglu' if given['swiglu'] else '--no-swiglu'}")
        values["swiglu"] = wanted
    if (preset is not None and preset.is_moe and "num_experts" in given and "moe_router_topk" not in given
            and values["moe_router_topk"] > values["num_experts"]):
        # the preset's top-k belongs to its own expert count: with fewer experts of the user's, AICB's default
        values["moe_router_topk"] = DEFAULTS["moe_router_topk"]
    if label is None and given.get("model_size") is not None:
        label = size_label(given["model_size"], frame)  # the file names AICB's scripts give
    spec_file = given.get("gpu_spec")
    if spec_file is not None:
        values["gpu_type"] = gpu_spec_type(spec_file, given.get("gpu_type"))
    values["model_name"] = label if label is not None else preset.name if preset is not None else None
    values["preset"] = preset
    values["_given"] = frozenset(given)
    if values["pp_rank"] == -1:
        values["pp_rank"] = 0
    return values


def gpu_spec_type(path: str, gpu_type: str | None = None) -> str:
    """The ``--gpu_type`` value ``--gpu_spec FILE`` stands for: the file's path, which the compute model reads
    (:func:`mocked_model.compute.gpus.gpu_spec`).  One line for a missing file, a name that is not a JSON file, or
    both flags at once."""
    if gpu_type is not None:
        raise ConfigError(f"--gpu_spec {path} names its GPU: give --gpu_spec or --gpu_type {gpu_type}, not both")
    if not path.lower().endswith(".json"):
        raise ConfigError(f"--gpu_spec {path}: a GPU spec file is JSON (its name ends in .json)")
    from utils.io import not_a_file

    if not os.path.isfile(path):
        raise ConfigError(f"--gpu_spec {path}: {not_a_file(path)}")
    return path


def _preset_flags(model: ModelConfig) -> dict[str, Any]:
    """The flag values a preset sets.  Fields the preset derives (the GPT presets' FFN of 4h, an MoE FFN equal
    to the dense one) are left to be derived again from the final flags, as Megatron does: copying them
    would freeze the derivation before ``--swiglu`` or ``--ffn_hidden_size`` applies."""
    from utils.presets import states

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
    if model.window_size is not None:  # sliding-window attention (GPT-OSS: 128 tokens on every other layer)
        flags.update(window_size=model.window_size, window_attn_skip_freq=model.window_attn_skip_freq)
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
    from utils.model_config import ModelConfig

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
        window_size=values["window_size"], window_attn_skip_freq=values["window_attn_skip_freq"],
    )
    for name in ("moe_router_score_function", "mtp_num_layers", "moe_router_num_groups", "moe_router_group_topk",
                 "moe_router_enable_expert_bias"):  # architecture: the preset's unless given
        if values.get(name) is not None:
            kwargs[name] = values[name]
        elif preset is not None:
            kwargs[name] = getattr(preset, name)
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
    from dataclasses import fields

    from utils.config import JobConfig, TrainingConfig
    from utils.model_config import ModelConfig
    from utils.parallel import ParallelConfig

    recompute = values["recompute_granularity"] or ("selective" if values["recompute_activations"] else "none")
    from utils.cuda_graphs import parse_scopes

    if "recompute_modules" in values.get("_given", ()) and recompute != "selective":
        raise ConfigError("--recompute_modules needs --recompute_granularity selective (Megatron's rule)")
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
        tp_comm_overlap=values["tp_comm_overlap"], transformer_impl=values["transformer_impl"],
        async_tp_allreduce=not values["no_async_tensor_model_parallel_allreduce"],
        attention_backend=values["attention_backend"], apex=not values["no_apex"],
        masked_softmax_fusion=not values["no_masked_softmax_fusion"], apply_rope_fusion=not values["no_rope_fusion"],
        bias_activation_fusion=not values["no_bias_gelu_fusion"], bias_dropout_fusion=not values["no_bias_dropout_fusion"],
        cross_entropy_loss_fusion=values["cross_entropy_loss_fusion"], fp8_recipe=values["fp8_recipe"],
        cuda_graph_impl=values["cuda_graph_impl"], cp_comm_type=values["cp_comm_type"],
        cuda_graph_scope=parse_scopes(values["cuda_graph_scope"]), recompute_modules=tuple(values["recompute_modules"]),
        hierarchical_cp_sizes=values["hierarchical_context_parallel_sizes"],
        overlap_param_gather=values["overlap_param_gather"], grad_reduce_in_bf16=values["grad_reduce_in_bf16"],
        moe_router_load_balancing_type=values["moe_router_load_balancing_type"],
        moe_aux_loss_coeff=values["moe_aux_loss_coeff"], moe_z_loss_coeff=values["moe_z_loss_coeff"],
        moe_permute_fusion=values["moe_permute_fusion"], moe_shared_expert_overlap=values["moe_shared_expert_overlap"],
        moe_imbalance=values["moe_imbalance"], moe_enable_deepep=values["moe_enable_deepep"],
        overlap_moe_expert_parallel_comm=values["overlap_moe_expert_parallel_comm"],
        delay_wgrad_compute=values["delay_wgrad_compute"], moe_router_dtype=values["moe_router_dtype"],
        moe_router_fusion=values["moe_router_fusion"], extra=extra,
    )
    if "fp8_recipe" in values.get("_given", ()) and not training.fp8:
        raise ConfigError(f"--fp8_recipe {values['fp8_recipe']} needs --dtype float8 (got --dtype {values['dtype']})")
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
        pipeline_layout=values["pipeline_model_parallel_layout"],
    )
    model = model_from(values) if values["frame"] != "collective_test" else ModelConfig()
    job = JobConfig(model=model, parallel=parallel, training=training)
    if values["frame"] != "collective_test":
        _check_sizes(job)
    return job


def _check_sizes(job: JobConfig) -> None:
    """Refuse a model whose byte counts leave 64 bits (the workload files hold sizes as int64, SimAI reads them
    so): ``--hidden_size 9e18`` wrote messages of 10^40 bytes.  Bounds, not exact sizes: the weights of every
    layer and the embeddings, and a micro-batch's widest activation, in 16 bytes an element (fp32 with
    the optimizer's states)."""
    from utils.cli_types import INT64_MAX

    m = job.model
    h, experts = m.hidden_size, max(m.num_experts or 1, 1)
    attention = m.num_attention_heads * m.kv_channels
    ffn = max(m.ffn_hidden_size or 0, m.moe_ffn_hidden_size or 0)
    vocab = job.padded_vocab_size
    weights = m.num_layers * (4 * h * max(attention, h) + 3 * h * ffn * experts) + 2 * vocab * h
    activation = (job.parallel.micro_batch * job.training.seq_length * max(h, attention, ffn, vocab)
                  * max(m.moe_router_topk, 1))
    for what, elements in (("weights", weights), ("activations of a micro-batch", activation)):
        if elements * 16 > INT64_MAX:
            raise ConfigError(f"the model's {what} would be about {elements:.3g} elements, beyond the 64-bit byte counts "
                              "a workload holds: lower --hidden_size, --ffn_hidden_size, --num_layers, --num_experts, "
                              "--vocab_size, --seq_length or --micro_batch")


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

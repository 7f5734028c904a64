"""Megatron-core's rules for ``--cuda_graph_scope`` and ``--recompute_modules`` that need the whole job
(``TransformerConfig.__post_init__`` in ``megatron/core/transformer/transformer_config.py`` and ``arguments.py``):
refused with one line naming the flag, as Megatron asserts."""

from __future__ import annotations

from typing import Any

from utils.errors import ConfigError

SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "full_iteration")
"""``CudaGraphScope`` (Megatron-core ``transformer/enums.py``; ``full`` is accepted for an empty list: whole layers)."""
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
"""Megatron-core's ``--recompute-modules`` choices."""
MODELLED_RECOMPUTE = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp")
"""The selective recomputations the workload generator replays (``moe`` and ``shared_experts`` are not)."""
F_SCOPE = "--cuda_graph_scope"


def parse_scopes(values: list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """``--cuda_graph_scope`` values as Megatron's parser reads them: ``full`` alone means whole layers (empty)."""
    scopes = tuple(values or ())
    if "full" in scopes:
        if scopes != ("full",):
            raise ConfigError(f"{F_SCOPE} full (whole layers) cannot be combined with other scopes, got {' '.join(scopes)}")
        return ()
    for scope in scopes:
        if scope not in SCOPES:
            raise ConfigError(f"{F_SCOPE} {scope!r} is not one of {', '.join(SCOPES)} (or full)")
    return tuple(dict.fromkeys(scopes))


def check_graphs_and_recompute(job: Any) -> None:
    """The CUDA-graph scopes and selective-recompute modules of a :class:`utils.config.JobConfig` (called by its
    constructor, hence no import of it here)."""
    t, model = job.training, job.model
    for module in t.recompute_modules:
        if module not in RECOMPUTE_MODULES:
            raise ConfigError(f"--recompute_modules {module!r} is not one of {', '.join(RECOMPUTE_MODULES)}")
        if module not in MODELLED_RECOMPUTE:
            raise ConfigError(f"--recompute_modules {module} is not modelled (only {', '.join(MODELLED_RECOMPUTE)})")
    if t.recompute == "selective" and "mla_up_proj" in t.recompute_modules and not model.multi_latent_attention:
        raise ConfigError("--recompute_modules mla_up_proj needs multi-latent attention (Megatron's rule)")
    scopes = tuple(t.cuda_graph_scope)
    parse_scopes(scopes)
    if t.cuda_graph_impl == "none":
        if scopes:
            raise ConfigError(f"{F_SCOPE} needs --cuda_graph_impl transformer_engine or local")
        return
    full = t.cuda_graph_impl == "full_iteration" or "full_iteration" in scopes
    if "full_iteration" in scopes and t.cuda_graph_impl == "transformer_engine":
        raise ConfigError(f"{F_SCOPE} full_iteration needs --cuda_graph_impl local (Megatron's rule)")
    if "moe" in scopes and "moe_router" in scopes:
        raise ConfigError(f"{F_SCOPE} cannot hold both moe and moe_router (Megatron's rule)")
    if "moe_preprocess" in scopes and "moe_router" not in scopes:
        raise ConfigError(f"{F_SCOPE} moe_preprocess needs moe_router (Megatron's rule)")
    moe = model.is_moe
    if not moe and ("moe" in scopes or "moe_router" in scopes):
        raise ConfigError(f"{F_SCOPE} moe and moe_router need an MoE model (Megatron's rule)")
    every_layer_moe = moe and all(model.is_moe_layer(i) for i in range(model.num_layers))
    if every_layer_moe and "mlp" in scopes:
        raise ConfigError(f"{F_SCOPE} mlp captures dense layers, and every layer of {model.name} is MoE (Megatron's rule)")
    dropless = not (t.moe_expert_capacity_factor is not None and t.moe_pad_expert_input_to_capacity)
    if moe and dropless:
        if "moe" in scopes:
            raise ConfigError(f"{F_SCOPE} moe needs drop-and-pad MoE (--moe_expert_capacity_factor and "
                              "--moe_pad_expert_input_to_capacity; Megatron's rule)")
        if not scopes or full:
            what = "the whole iteration" if full else "whole layers (no scope)"
            raise ConfigError(f"{F_SCOPE}: capturing {what} needs drop-and-pad MoE: a dropless dispatcher synchronises "
                              "with the host, which a CUDA graph cannot hold; give attn moe_router moe_preprocess")
    if ("moe_preprocess" in scopes and t.moe_token_dispatcher_type == "alltoall"
            and t.moe_expert_capacity_factor is not None):
        raise ConfigError(f"{F_SCOPE} moe_preprocess is not supported with the alltoall dispatcher's capacity factor "
                          "(its device-to-host copies; Megatron's rule)")
    if t.recompute == "full" and not full:
        raise ConfigError(f"--recompute_granularity full with CUDA graphs needs {F_SCOPE} full_iteration (Megatron's rule)")

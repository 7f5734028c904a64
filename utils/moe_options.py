"""Megatron-core's rules for the MoE options of issue 26 that need the whole job (``TransformerConfig.__post_init__``
in ``megatron/core/transformer/transformer_config.py``): refused with one line naming the flag, as Megatron asserts."""

from __future__ import annotations

from typing import Any

from utils.errors import ConfigError

F_A2A = "--overlap_moe_expert_parallel_comm"


def check_moe_options(job: Any) -> None:
    """``--overlap_moe_expert_parallel_comm`` of a :class:`utils.config.JobConfig` (called by its constructor, hence
    no import of it here): expert parallelism, the alltoall or flex dispatcher, no full
    recomputation, the interleaved schedule when pipelining, not with ``--moe_shared_expert_overlap``.  Also bounds
    ``--moe_imbalance`` and ``--moe_expert_capacity_factor`` by what routing can give (:func:`check_moe_load`)."""
    t, p = job.training, job.parallel
    check_moe_load(job)
    if not t.overlap_moe_expert_parallel_comm:
        return
    if not job.model.is_moe or p.ep < 2:
        raise ConfigError(f"{F_A2A} needs expert parallelism (--expert_model_parallel_size > 1), got {p.ep}")
    if t.moe_token_dispatcher_type not in ("alltoall", "flex"):
        raise ConfigError(f"{F_A2A} needs --moe_token_dispatcher_type alltoall or flex, got "
                          f"{t.moe_token_dispatcher_type}")
    if t.recompute == "full":
        raise ConfigError(f"{F_A2A} cannot be combined with --recompute_granularity full (Megatron's rule)")
    if p.pp > 1 and not p.interleaved:
        raise ConfigError(f"{F_A2A} with --pipeline_model_parallel {p.pp} needs the interleaved schedule "
                          "(--num_layers_per_virtual_pipeline_stage or a layout with virtual stages; Megatron's rule)")
    if t.moe_shared_expert_overlap:
        raise ConfigError(f"{F_A2A} cannot be combined with --moe_shared_expert_overlap (Megatron's rule)")


def check_moe_load(job: Any) -> None:
    """An MoE job's ``--moe_imbalance`` at most ``--num_experts / --moe_router_topk`` (the busiest expert then takes
    every token once: a token picks ``topk`` distinct experts; 1e300 was clamped there silently) and its
    ``--moe_expert_capacity_factor`` at most ``--num_experts`` (a capacity of every token copy a rank routes: more
    pads each expert beyond what all of them together receive; 1.7e308 overflowed to a traceback)."""
    model, t = job.model, job.training
    if not model.is_moe:
        return
    experts, topk = model.num_experts, model.moe_router_topk
    if t.moe_imbalance > experts / topk:
        raise ConfigError(f"--moe_imbalance {t.moe_imbalance:g} is more than --num_experts {experts} / --moe_router_topk "
                          f"{topk} = {experts / topk:g}, the busiest expert taking every token (a token picks {topk} "
                          "distinct experts)")
    factor = t.moe_expert_capacity_factor
    if factor is not None and factor > experts:
        raise ConfigError(f"--moe_expert_capacity_factor {factor:g} is more than --num_experts {experts}: each expert's "
                          f"capacity would exceed every token copy its rank routes (at most {experts})")

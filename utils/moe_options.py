"""Megatron-core's rules for the MoE options of issue 26 that need the whole job (``TransformerConfig.__post_init__``
in ``megatron/core/transformer/transformer_config.py``): refused with one line naming the flag, as Megatron asserts."""

from __future__ import annotations

from typing import Any

from utils.errors import ConfigError

F_A2A = "--overlap_moe_expert_parallel_comm"


def check_moe_options(job: Any) -> None:
    """``--overlap_moe_expert_parallel_comm`` of a :class:`utils.config.JobConfig` (called by its constructor, hence
    no import of it here): expert parallelism, the alltoall or flex dispatcher, no full
    recomputation, the interleaved schedule when pipelining, not with ``--moe_shared_expert_overlap``."""
    t, p = job.training, job.parallel
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

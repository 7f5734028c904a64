"""Context parallelism's rules: what Megatron-core and Transformer Engine accept, checked once when a job is built.

References: Megatron-LM ``megatron/training/arguments.py`` (the product of ``--hierarchical-context-parallel-sizes``
is the CP size; ``a2a+p2p`` needs them), ``megatron/core/transformer/dot_product_attention.py`` (Megatron-core's
local attention asserts ``context_parallel_size == 1``: CP runs through Transformer Engine's
``TEDotProductAttention``), ``megatron/training/utils.py`` ``get_batch_on_this_cp_rank`` (the sequence in
``2 x cp`` chunks); Transformer Engine ``pytorch/attention/dot_product_attention/context_parallel.py``
(``attn_forward_func_with_cp``: sliding windows only with ``a2a`` or ``all_gather``; the a2a path splits the
heads: "The number of attention heads needs to be divisible by CP size").
"""

from __future__ import annotations

from typing import Any

from utils.errors import ConfigError

F_CP = "--context-parallel-size"
F_TYPE = "--cp_comm_type"
F_LEVELS = "--hierarchical_context_parallel_sizes"


def cp_levels(job: Any) -> tuple[int, int]:
    """(a2a size, p2p size) of the context parallelism of ``job`` (a :class:`utils.config.JobConfig`): ``(cp, 1)`` for
    ``a2a``, ``(1, cp)`` for ``p2p``, the hierarchical sizes for ``a2a+p2p``, ``(1, 1)`` for ``allgather`` (neither
    splits the heads nor runs a ring)."""
    cp, kind = job.parallel.cp, job.training.cp_comm_type
    if kind == "a2a":
        return cp, 1
    if kind == "p2p":
        return 1, cp
    if kind == "a2a+p2p":
        sizes = job.parallel.hierarchical_cp or (1, cp)
        return sizes[0], sizes[1]
    return 1, 1


def check_context_parallel(job: Any) -> None:
    """Refuse the CP layouts Megatron-core or Transformer Engine refuse, naming the flags (``job``: a
    :class:`utils.config.JobConfig`, which calls this while it is built; no import of it here, as it imports this).
    Raises :class:`ConfigError`."""
    p, t, m = job.parallel, job.training, job.model
    if p.cp == 1:
        return
    if t.transformer_impl != "transformer_engine":
        raise ConfigError(f"{F_CP} {p.cp} needs --transformer_impl transformer_engine (Megatron-core's local "
                          "DotProductAttention refuses context parallelism)")
    if not t.stack.flash:
        raise ConfigError(f"{F_CP} {p.cp} runs Transformer Engine's flash or fused attention; --attention_backend "
                          f"{t.attention_backend} has no context parallelism")
    if t.cp_comm_type == "a2a+p2p" and p.hierarchical_cp is None:
        raise ConfigError(f"{F_TYPE} a2a+p2p needs {F_LEVELS} (Megatron's rule)")
    a2a, _ = cp_levels(job)
    if a2a > 1:
        heads, groups = m.num_attention_heads // p.tp, m.query_groups // p.tp
        for flag, value in (("--num_attention_heads", heads), ("--num_query_groups", groups)):
            if value % a2a:
                raise ConfigError(f"{F_TYPE} {t.cp_comm_type} splits the heads over {a2a} CP ranks: {flag} over "
                                  f"--tensor_model_parallel_size {p.tp} leaves {value}, not divisible by {a2a}")
    if t.cp_comm_type in ("p2p", "a2a+p2p") and any(m.attention_window(i) is not None for i in range(m.num_layers)):
        raise ConfigError(f"--window_size with {F_CP} {p.cp} needs {F_TYPE} a2a or allgather (Transformer Engine's "
                          f"ring attention refuses sliding windows), got {F_TYPE} {t.cp_comm_type}")

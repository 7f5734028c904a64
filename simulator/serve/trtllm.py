"""TensorRT-LLM's benchmark settings: the ``max_batch_size`` and ``max_num_tokens`` that ``trtllm-bench throughput``
picks for a dataset when it is not given them (its ``tensorrt_llm/bench/build/tuning.py``, ``calc_engine_setting``
and ``finetune_setting``, NVIDIA/TensorRT-LLM at 04cba882; the formulas are theirs, the code ours):

- the KV bytes of a token over the whole model, counting at least one KV head per TP rank:
  ``2 x layers x max(tp, kv_heads) x head_dim x KV bytes``;
- the engine (weights): ``parameters x weight bytes`` (2 bf16, 1 FP8, 0.5 NVFP4);
- the cache: ``kv_fraction x (tp x pp x GPU memory - engine)`` (``--kv_cache_free_gpu_mem_fraction``, 0.90 by
  default); the requests it holds at ``ISL + OSL`` tokens each: ``requests = cache / (KV bytes per token x (ISL +
  OSL))``;
- ``raw batch = min(requests, 4096) / pp`` rounded up to a multiple of 32 (at least 64) below 256, of 128 below
  1024, of 256 above; ``raw tokens = min(raw batch x (1 + ISL / OSL), 32768)`` rounded up to a multiple of 256 (at
  least 2048) below 4096, of 512 below 8192, of 1024 above.

The GPU memory is the GPU table's ``memory_gib`` (trtllm-bench reads NVML's total, e.g. 79.6 GiB on an H100 80GB:
the rounding to 128 or 256 requests absorbs the difference).  With these settings TensorRT-LLM's default capacity
scheduler (``GUARANTEED_NO_EVICT``, :class:`simulator.serve.schedulers.TrtllmReplica`) runs the benchmark."""

from __future__ import annotations

import math
from typing import Any

from utils.errors import ConfigError

_WEIGHT_BYTES = {None: 2.0, "bfloat16": 2.0, "float8": 1.0, "float4": 0.5}
_KV_BYTES = {"bfloat16": 2.0, "float8": 1.0}
DEFAULT_KV_FRACTION = 0.90
"""``trtllm-bench --kv_cache_free_gpu_mem_fraction`` default."""


def finetune(requests: float, isl: int, osl: int, pp: int = 1) -> tuple[int, int]:
    """``(max_batch_size, max_num_tokens)`` from the requests the KV cache holds (``finetune_setting`` with its
    optimistic tuning on)."""
    raw_bs = min(requests, 4096) / pp
    raw_tokens = min(raw_bs * (1 + isl / osl), 32768)
    if raw_bs < 256:
        bs = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        bs = 128 * math.ceil(raw_bs / 128)
    else:
        bs = 256 * math.ceil(raw_bs / 256)
    if raw_tokens < 4096:
        tokens = max(2048, 256 * math.ceil(raw_tokens / 256))
    elif raw_tokens < 8192:
        tokens = 512 * math.ceil(raw_tokens / 512)
    else:
        tokens = 1024 * math.ceil(raw_tokens / 1024)
    return int(bs), int(tokens)


def bench_settings(model: Any, gpu: str, isl: int, osl: int, tp: int = 1, pp: int = 1, dtype: str | None = None,
                   kv_dtype: str = "bfloat16", kv_fraction: float = DEFAULT_KV_FRACTION) -> tuple[int, int]:
    """``(max_batch_size, max_num_tokens)`` trtllm-bench picks for ``model`` (a name or an
    :class:`~utils.inference_config.InferenceModel`) on ``tp x pp`` of ``gpu`` for requests of ``isl`` prompt and
    ``osl`` output tokens (see the module docstring)."""
    from mocked_model.compute import gpu_spec
    from mocked_model.inference_memory import model_params
    from utils.inference_config import InferenceModel, resolve_model

    m = model if isinstance(model, InferenceModel) else resolve_model(str(model))
    if m.attention != "gqa" or m.kind not in ("dense", "moe", "qwen3_moe"):
        raise ConfigError(f"trtllm-bench settings cover GQA models (Llama, Mixtral, Qwen3); {m.name} is {m.attention}")
    weight = _WEIGHT_BYTES.get(dtype)
    if weight is None:
        raise ConfigError(f"--dtype {dtype!r} is not one of bfloat16, float8, float4")
    gib = 1024 ** 3
    per_token = 2 * m.num_layers * max(tp, m.num_kv_heads) * m.head_dim * _KV_BYTES[kv_dtype] / gib
    engine = model_params(m) * weight / gib
    cache = (gpu_spec(gpu).memory_gib * tp * pp - engine) * kv_fraction
    if cache <= 0:
        raise ConfigError(f"{m.name} ({engine:.1f} GiB of weights) does not fit {tp * pp} x {gpu}")
    return finetune(cache / (per_token * (isl + osl)), isl, osl, pp)


__all__ = ("DEFAULT_KV_FRACTION", "bench_settings", "finetune")

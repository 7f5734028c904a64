"""Where a serving run's step costs come from: the step-cost model of :mod:`simulator.serve.cost` (the compute
model and the topology, engineer STEP's module), or a linear profile from a JSON file (``--step_cost FILE``:
:class:`~simulator.serve.step.LinearStepCost`'s fields, e.g. a fit of measured steps, for what-if runs)."""

from __future__ import annotations

import inspect
import json
import math
import os
from typing import Any

from simulator.serve.step import LinearStepCost
from utils.cli_types import INT64_MAX
from utils.errors import ConfigError, FormatError


def cost_model(model: str, gpu: str, topology: str | None, **kwargs: Any) -> Any:
    """The replica's :class:`~simulator.serve.step.StepCost` from :func:`simulator.serve.cost.cost_model`, given
    the keyword arguments it takes of ``tp, pp, ep, dtype, kv_dtype, cuda_graphs, options, gpus``."""
    try:
        from simulator.serve.cost import cost_model as factory
    except ImportError as exc:  # pragma: no cover - only before the step-cost model exists
        raise ConfigError(f"no step-cost model available ({exc}); give --step_cost FILE.json") from None
    accepted = inspect.signature(factory).parameters
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    given = {k: v for k, v in kwargs.items() if takes_all or k in accepted}
    return factory(model, gpu, topology, **given)


_WHOLE = ("kv_capacity_tokens", "replica_gpus", "speculative_tokens", "tokens_per_decode_step")
"""The fields of a linear profile that count tokens or GPUs (int64 in the engine)."""


def linear_cost(path: str | os.PathLike) -> LinearStepCost:
    """A :class:`LinearStepCost` from a JSON object of its fields (seconds, tokens, bytes)."""
    from simulator.serve.requests import refuse_device
    from utils.io import read_text

    path = os.fspath(path)
    refuse_device(path, "a JSON object of step-cost coefficients")
    try:
        data = json.loads(read_text(path, "a JSON object of step-cost coefficients"))
    except json.JSONDecodeError as exc:
        raise FormatError(path, f"not JSON: {exc.msg}", exc.lineno) from None
    if not isinstance(data, dict):
        raise FormatError(path, "expected a JSON object of LinearStepCost fields")
    fields = set(inspect.signature(LinearStepCost).parameters)
    unknown = sorted(set(data) - fields)
    if unknown:
        raise FormatError(path, f"unknown field {unknown[0]!r} (known: {', '.join(sorted(fields))})")
    for key, value in data.items():
        # json reads NaN and Infinity: a step that costs NaN or forever is no profile
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < math.inf:
            raise FormatError(path, f"{key} must be a finite non-negative number, got {value!r}")
        if key in _WHOLE and value > INT64_MAX:
            raise FormatError(path, f"{key} {value!r} is beyond the largest integer taken ({INT64_MAX})")
    for step, terms in (("prefill", ("prefill_token_s", "attention_s")), ("decode", ("decode_seq_s", "decode_context_s"))):
        if not any(data.get(k, 0) for k in ("base_s", *terms)):
            raise FormatError(path, f"a {step} step would take 0 s: give base_s or {' or '.join(terms)} a positive value")
    if "kv_capacity_tokens" in data:
        data["kv_capacity_tokens"] = int(data["kv_capacity_tokens"])
    if "replica_gpus" in data:
        data["replica_gpus"] = int(data["replica_gpus"]) or 1
    if "speculative_tokens" in data:
        data["speculative_tokens"] = int(data["speculative_tokens"])
    if data.get("tokens_per_decode_step", 1.0) < 1.0:
        raise FormatError(path, f"tokens_per_decode_step must be at least 1, got {data['tokens_per_decode_step']!r}")
    if "speculative_tokens" in data and data.get("tokens_per_decode_step", 1.0) > 1 + data["speculative_tokens"]:
        raise FormatError(path, f"tokens_per_decode_step {data['tokens_per_decode_step']!r} is more than the 1 + "
                                f"speculative_tokens ({data['speculative_tokens']}) tokens a decode step verifies")
    return LinearStepCost(**data)

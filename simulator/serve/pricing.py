"""Where a serving run's step costs come from: the step-cost model of :mod:`simulator.serve.cost` (the compute
model and the topology, engineer STEP's module), or a linear profile from a JSON file (``--step_cost FILE``:
:class:`~simulator.serve.step.LinearStepCost`'s fields, e.g. a fit of measured steps, for what-if runs)."""

from __future__ import annotations

import inspect
import json
import os
from typing import Any

from simulator.serve.step import LinearStepCost
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


def linear_cost(path: str | os.PathLike) -> LinearStepCost:
    """A :class:`LinearStepCost` from a JSON object of its fields (seconds, tokens, bytes)."""
    from utils.io import read_text

    path = os.fspath(path)
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
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise FormatError(path, f"{key} must be a non-negative number, got {value!r}")
    if "kv_capacity_tokens" in data:
        data["kv_capacity_tokens"] = int(data["kv_capacity_tokens"])
    if "replica_gpus" in data:
        data["replica_gpus"] = int(data["replica_gpus"]) or 1
    if "speculative_tokens" in data:
        data["speculative_tokens"] = int(data["speculative_tokens"])
    if data.get("tokens_per_decode_step", 1.0) < 1.0:
        raise FormatError(path, f"tokens_per_decode_step must be at least 1, got {data['tokens_per_decode_step']!r}")
    return LinearStepCost(**data)

"""Python entry point: ``simulate(workload, options) -> SimulationResult``.

    >>> from simulator.api import simulate
    >>> from simulator.options import SimAIOptions
    >>> result = simulate("workload.txt", SimAIOptions(gpus_per_server=8, nics_per_server=8))
    >>> result.summary_table()        # pandas: term, time_us, share_pct
    >>> result.layer_table()          # pandas: one row per layer record, times in us

Models plug in through :data:`MODELS` (name -> runner taking the workload and the options).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from simulator.options import SimAIOptions
from simulator.result import SimulationResult
from workload_generator.simai import SimAIWorkload


def _run_simai(workload: SimAIWorkload, options: Any) -> SimulationResult:
    from simulator.simai_model import SimAIModel

    if not isinstance(options, SimAIOptions):
        raise TypeError(f"the simai model takes SimAIOptions, got {type(options).__name__}")
    return SimAIModel(workload, options).run()


MODELS: dict[str, Callable[[SimAIWorkload, Any], SimulationResult]] = {"simai": _run_simai}
"""Available models.  ``topo`` (SIM_MODEL.md) registers here when it exists."""


def load_workload(workload: SimAIWorkload | str | os.PathLike) -> SimAIWorkload:
    """A workload object, reading a path leniently (SimAI accepts any comm token and line layout)."""
    if isinstance(workload, SimAIWorkload):
        return workload
    return SimAIWorkload.read(workload, strict=False)


def simulate(workload: SimAIWorkload | str | os.PathLike, options: Any, model: str = "simai") -> SimulationResult:
    """Simulate one training iteration of ``workload`` (a :class:`SimAIWorkload` or a path).

    Raises :class:`utils.errors.UserError` subclasses for bad inputs (file format, missing header
    keys, impossible layouts) and ``ValueError`` for an unknown model name.
    """
    try:
        runner = MODELS[model]
    except KeyError:
        raise ValueError(f"unknown model {model!r} (available: {', '.join(MODELS)})") from None
    loaded = load_workload(workload)
    result = runner(loaded, options)
    result.warnings[:0] = loaded.warnings
    return result

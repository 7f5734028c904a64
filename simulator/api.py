"""Python entry point: ``simulate(workload, topology, options) -> SimulationResult``.

    >>> from simulator.api import simulate
    >>> from simulator.options import SimAIOptions, TopoOptions
    >>> from utils.cli import parse_job
    >>> w = "tests/data/examples/simai_workload_analytical.txt"
    >>> topology = "tests/data/examples/topo_Spectrum-X_16g_8gps_400Gbps_H100"
    >>> r = simulate(w, SimAIOptions(gpus_per_server=8, nics_per_server=8))                # SimAI 1.7's model
    >>> job, _ = parse_job(["--model_name", "llama3_8B", "--world_size", "16", "--tensor_model_parallel_size", "8",
    ...                     "--global_batch", "32", "--gpu_type", "H100"], "api", "")
    >>> r = simulate(job, topology, TopoOptions(overlap_grad_reduce=True))                 # ours, a JobConfig
    >>> r.iteration_us, r.summary_table(), r.stage_table(), r.collective_table(), r.layer_table()

``workload``: a :class:`SimAIWorkload` or a path to one (both models); for ``topo`` also a
``JobConfig`` (its Megatron workloads are generated) or ``megatron_pipeline(job)``'s list of
per-stage Workloads.  ``topology``: a path or a :class:`topo.Topology` (``topo`` only; None derives a
two-tier fabric from the options).  ``model``: ``simai`` or ``topo``; by default ``topo`` when a
topology or :class:`TopoOptions` is given, else ``simai``.  The old call ``simulate(workload,
options, model=...)`` still works.

Models plug in through :data:`MODELS` (name -> runner taking the workload, the topology and the options).

For sweeps, :class:`TopoSession` keeps a topology and everything derived from it (placement, routes,
group shapes, collective costs, compute prices) across calls: ``TopoSession(topology).simulate(job,
options)`` returns what ``simulate(job, topology, options)`` does, without redoing the per-topology work.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from simulator.options import SimAIOptions, TopoOptions
from simulator.result import SimulationResult
from utils.errors import ConfigError
from workload_generator.simai import SimAIWorkload


def _run_simai(workload: Any, topology: Any, options: Any) -> SimulationResult:
    from simulator.simai.model import SimAIModel

    if topology is not None:
        raise ConfigError("-t/--topology is read by --model topo only (SimAI's analytical model ignores topologies)")
    if options is None:
        options = SimAIOptions()
    if not isinstance(options, SimAIOptions):
        raise TypeError(f"the simai model takes SimAIOptions, got {type(options).__name__}")
    loaded = load_workload(workload)
    result = SimAIModel(loaded, options).run()
    result.warnings[:0] = loaded.warnings + loaded.placeholder_warning()
    return result


def _run_topo(workload: Any, topology: Any, options: Any) -> SimulationResult:
    from simulator.topo.model import run_topo

    return run_topo(workload, topology, options)


def __getattr__(name: str) -> Any:
    if name == "TopoSession":  # imported on use: simulator.topo.session pulls in nothing heavy, but only sweeps need it
        from simulator.topo.session import TopoSession

        return TopoSession
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


MODELS: dict[str, Callable[[Any, Any, Any], SimulationResult]] = {"simai": _run_simai, "topo": _run_topo}
"""Available models: runner(workload, topology, options) -> SimulationResult."""


def load_workload(workload: SimAIWorkload | str | os.PathLike) -> SimAIWorkload:
    """A workload object, reading a path leniently (SimAI accepts any comm token and line layout), with
    records written alike shared (``share=True``: the models never change a record, and a file of 10^6
    records then holds one object per distinct line)."""
    if isinstance(workload, SimAIWorkload):
        return workload
    return SimAIWorkload.read(workload, strict=False, share=True)


def simulate(workload: Any, topology: Any = None, options: Any = None, model: str | None = None) -> SimulationResult:
    """Simulate one training iteration of ``workload`` (see the module docstring).

    Raises :class:`utils.errors.UserError` subclasses for bad inputs (file format, missing header
    keys, impossible layouts, a topology too small) and ``ValueError`` for an unknown model name.
    """
    if options is None and isinstance(topology, (SimAIOptions, TopoOptions)):
        topology, options = None, topology  # the original simulate(workload, options) call
    if model is None:
        model = "simai" if isinstance(options, SimAIOptions) or (topology is None and options is None
                                                                 and _is_simai_input(workload)) else "topo"
    try:
        runner = MODELS[model]
    except KeyError:
        raise ValueError(f"unknown model {model!r} (available: {', '.join(MODELS)})") from None
    return runner(workload, topology, options)


def _is_simai_input(workload: Any) -> bool:
    return isinstance(workload, (SimAIWorkload, str, os.PathLike))

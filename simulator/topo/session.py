"""A topology loaded once, many jobs simulated on it: the in-process API for sweeps and layout searches.

    >>> from simulator.api import TopoSession
    >>> from simulator.options import TopoOptions
    >>> session = TopoSession("topos/Spectrum-X_16384g_8gps_400Gbps_H100")   # read and modelled once
    >>> for job in jobs:                                                    # JobConfigs with gpu_type
    ...     result = session.simulate(job, TopoOptions(overlap_grad_reduce=True))
    ...     result.iteration_us, result.details.mfu

:func:`simulator.api.simulate` with ``model="topo"`` reads the topology, places the ranks, finds the
groups' routes and shapes, costs every collective with NCCL's model and prices every operation with
the compute model, then throws all of it away.  A session keeps what does not depend on the job:

- the :class:`topo.Topology` (read once) and, per rank count, its fabric: the per-GPU switch domains,
  the routes between attachment pairs, and the shape of every group asked about (keyed by its members,
  so two layouts that form the same group share it);
- NCCL's cost of each (group shape, collective, size, link efficiencies), across jobs and options;
- the compute model's price of each distinct operation (per GPU type and dtype), across jobs.

Results are exactly those of :func:`simulator.api.simulate` on the same inputs (the caches hold pure
functions' values).  A session is not thread-safe; use one per process (a layout search parallelises
over processes).  :meth:`TopoSession.clear` drops the per-job caches if memory matters in a very long
sweep (the fabric stays).
"""

from __future__ import annotations

import os
from typing import Any

from simulator.options import TopoOptions
from simulator.result import SimulationResult


class TopoSession:
    """Simulate many jobs (``JobConfig``, SimAI workloads, per-stage workloads) on one topology.

    ``topology``: a path to a SimAI topology file, a :class:`topo.Topology`, or None for the derived
    two-tier fabric of each call's options (``-g_p_s``, ``-n_p_s``, ``-nv``, ``-nic``).
    ``options``: the default :class:`TopoOptions` of :meth:`simulate`.
    """

    def __init__(self, topology: Any = None, options: TopoOptions | None = None) -> None:
        if isinstance(topology, (str, os.PathLike)):
            from topo import read_topology

            topology = read_topology(topology)
        self.topology = topology
        self.options = options or TopoOptions()
        self._caches: dict[str, dict] = {"fabrics": {}, "costs": {}, "prices": {}}

    def simulate(self, workload: Any, options: TopoOptions | None = None) -> SimulationResult:
        """One training iteration of ``workload`` on the session's topology (``--model topo``): what
        :func:`simulator.api.simulate` returns for the same inputs."""
        from simulator.topo.model import run_topo

        options = self.options if options is None else options
        if not isinstance(options, TopoOptions):
            raise TypeError(f"a TopoSession takes TopoOptions, got {type(options).__name__}")
        return run_topo(workload, self.topology, options, self._caches)

    def clear(self) -> None:
        """Forget the collective costs and compute prices (the fabrics, routes and group shapes stay)."""
        self._caches["costs"].clear()
        self._caches["prices"].clear()

    def __repr__(self) -> str:
        fabrics = len(self._caches["fabrics"])
        return (f"TopoSession({self.topology!r}, {fabrics} fabric(s), {len(self._caches['costs'])} collective costs, "
                f"{sum(len(v) for v in self._caches['prices'].values())} operation prices)")

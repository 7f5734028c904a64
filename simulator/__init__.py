"""``python -m simulator``: analytical training-iteration simulators.

Models (``--model``):

- ``simai``: SimAI 1.7's analytical model, reproduced number for number
  (``docs/simai_analytical.md``; :mod:`simulator.simai.model`).
- ``topo``: our topology-aware model (``docs/sim_model.md``; :mod:`simulator.topo.model`): NCCL's
  alpha-beta costs (:mod:`simulator.topo.collectives`) over the topology and the rank placement
  (:mod:`simulator.topo.fabric`), stage programs from SimAI files or our Megatron workloads
  (:mod:`simulator.topo.programs`), the real 1F1B / interleaved schedule played across stages
  (:mod:`simulator.topo.engine`), a Perfetto trace (:mod:`simulator.topo.trace`) and a breakdown plot
  (:mod:`simulator.plot`).

Use :func:`simulator.api.simulate` from Python; it returns a :class:`simulator.result.SimulationResult`
whose tables are pandas DataFrames.  This package imports nothing heavy at import time.
"""

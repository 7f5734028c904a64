"""``python -m simulator``: analytical training-iteration simulators.

Models (``--model``):

- ``simai``: SimAI 1.7's analytical model, reproduced number for number
  (``SIMAI_ANALYTICAL.md``; :mod:`simulator.simai_model`).
- ``topo``: our topology-aware model (``SIM_MODEL.md``), plugged in through
  :data:`simulator.api.MODELS`.

Use :func:`simulator.api.simulate` from Python; it returns a :class:`simulator.result.SimulationResult`
whose tables are pandas DataFrames.  This package imports nothing heavy at import time.
"""

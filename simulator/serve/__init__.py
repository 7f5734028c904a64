"""Request-level serving simulation (issue 27): request sources, per-replica schedulers, a global router,
prefill/decode disaggregation, metrics and reports (``python -m simulator serve``), and the capacity search
(``python -m simulator serve-search``).

Modules: :mod:`~simulator.serve.requests` (arrivals and lengths), :mod:`~simulator.serve.replica` (a replica,
its paged KV and its schedulers), :mod:`~simulator.serve.engine` (the event loop and the router),
:mod:`~simulator.serve.metrics`, :mod:`~simulator.serve.outputs` (CSV, JSON, Perfetto trace, HTML),
:mod:`~simulator.serve.cli` and :mod:`~simulator.serve.search`; the step costs come from
:mod:`~simulator.serve.cost` through the :class:`~simulator.serve.step.StepCost` interface.  Nothing heavy is
imported here.
"""

"""Measure once, simulate anywhere: the profiling database's measuring side (``python -m profiling``).

- :mod:`profiling.network`: ``torchrun ... -m profiling network``, every collective over sizes and group
  shapes with the replay's operations (NCCL on GPUs, gloo on CPUs), nccl-tests' times and bandwidths;
- :mod:`profiling.compute`: every distinct computation of a job (or a GEMM grid) timed with AIOB;
- :mod:`profiling.nccl_tests`: nccl-tests' text output converted into network rows;
- :mod:`profiling.report`: ``calibrate`` (the topo model fitted to a network profile) and ``show``;
- :mod:`profiling.export`: SimAI's ``busbw.yaml`` and AIOB compute files from a profile.

The database's format is :mod:`simulator.profiles.db`; the one reader the simulator asks is
:mod:`simulator.profiles.measured`.  This package sits above the replay (whose operations it times) and below
``aicb.py``.
"""

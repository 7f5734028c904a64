"""Replay: run a workload's collectives over torch.distributed and time them.

``workload_applyer.py`` (``WorkloadApplyer``, ``replay_main``) is the entry; this package holds what
it runs on:

* :mod:`replay.env` - flags, the launch environment, this rank's workload and its file names (no torch);
* :mod:`replay.plan` - every item checked against the layout and resolved to ranks and buffers (no torch);
* :mod:`replay.groups` - the torch.distributed process groups of the workload's CommGroups;
* :mod:`replay.ops` - the torch.distributed call of each operation, with gloo's emulations;
* :mod:`replay.timer` - timing one operation (CUDA events or the host clock) and a precise sleep;
* :mod:`replay.watchdog` - hangs, dead peers, signals and a killed launcher turned into one message and an exit;
* :mod:`replay.progress` - progress bars of the replay's phases (rank 0, a terminal).

The log it writes is :mod:`log_analyzer.log`'s (the format's writer and reader live together).
"""

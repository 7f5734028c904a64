"""AIOB: computation times of the model's operations.

- ``compute_file``: AICB's compute-time file (reader, writer, section of each operation); no torch.
- ``layout``: which operations a file times for a job (one rank's share, from the mocked model) and
  the compute model's estimate (:mod:`mocked_model.compute`) written as a compute file; no torch.
- ``estimate``: ``python -m mocked_model.aiob.estimate --gpu_type H100 ...`` writes an estimate file.
- ``modules``, ``timing``, ``measure``: real torch operations timed forward and backward on this
  device (``measure_job(job) -> ComputeFile``); these need torch.
"""

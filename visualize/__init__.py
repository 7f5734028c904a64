"""AICB's ``visualize`` entry: one HTML page of a replay log or a workload CSV (``python -m visualize.generate``)."""

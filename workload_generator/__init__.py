"""Generators of the workload model (``utils.workload``) and their file formats (SimAI records, AICB CLI entries)."""

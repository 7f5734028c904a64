"""Workload model, generators and their file formats."""

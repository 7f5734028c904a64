"""AIOB: computation times of the model's operations.

``compute_file`` reads and writes AICB's compute-time files (no torch needed); measuring on the local
device needs torch and lives in the timing modules.
"""

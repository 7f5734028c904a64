"""Replay logs and workloads for notebooks (no torch needed).

    from log_analyzer import Log, Workload
    log = Log.load("results/comm_logs/megatron_gpt_tiny_..._log.csv")
    log.items, log.iterations, log.epoch_times, log.comm_summary(), log.iteration_stats()
    Workload.load("results/mocked_workload/..._workload.csv")

Names load on first use (PEP 562), so that a replay rank writing a log never imports pandas.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DETAIL_COLUMNS": "log_analyzer.log", "Log": "log_analyzer.log", "LogWriter": "log_analyzer.log",
    "detail_path": "log_analyzer.log", "write_detail": "log_analyzer.log",
    "IterationStats": "log_analyzer.summary", "comm_summary": "log_analyzer.summary",
    "format_comm_summary": "log_analyzer.summary", "format_iteration_stats": "log_analyzer.summary",
    "format_sweep": "log_analyzer.summary", "iteration_stats": "log_analyzer.summary",
    "sweep_summary": "log_analyzer.summary", "report_text": "log_analyzer.summary",
    "Workload": "workload_generator.workload",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'log_analyzer' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__

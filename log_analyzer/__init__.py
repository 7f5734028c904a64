"""Replay logs and workloads for notebooks (no torch needed).

    from log_analyzer import Log, Workload
    log = Log.load("results/comm_logs/megatron_gpt_tiny_..._log.csv")
    log.items, log.iterations, log.epoch_times, log.comm_summary(), log.iteration_stats()
    Workload.load("results/mocked_workload/..._workload.csv")
    SimResult.load("results/run1-EndToEnd.csv")          # and the simulator's other CSVs beside it

    from log_analyzer import plots                      # matplotlib figures (PNG/SVG via plots.save)
    plots.busbw_vs_size(log, nominal={"NVLink": 360}), plots.iteration_times(log), plots.timeline(log)
    build_report("x_log.csv", sim="run1-EndToEnd.csv")   # one self-contained HTML page; write_report(html, path)
    compare_logs("before_log.csv", "after_log.csv")     # per (type, group, size) time and busbw, with the change

``python -m log_analyzer report|plot|compare`` does the same from the shell.

Names load on first use (PEP 562), so that a replay rank writing a log never imports pandas.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DETAIL_COLUMNS": "log_analyzer.log", "Log": "log_analyzer.log", "LogItem": "log_analyzer.log",
    "LogWriter": "log_analyzer.log",
    "detail_path": "log_analyzer.log", "write_detail": "log_analyzer.log",
    "IterationStats": "log_analyzer.summary", "comm_summary": "log_analyzer.summary",
    "format_comm_summary": "log_analyzer.summary", "format_iteration_stats": "log_analyzer.summary",
    "format_sweep": "log_analyzer.summary", "iteration_stats": "log_analyzer.summary",
    "sweep_summary": "log_analyzer.summary", "report_text": "log_analyzer.log",
    "Workload": "utils.workload",
    "batch_weights": "log_analyzer.summary", "logged_time": "log_analyzer.summary", "time_share": "log_analyzer.summary",
    "workload_frame": "log_analyzer.summary", "workload_share": "log_analyzer.summary",
    "workload_table": "log_analyzer.summary",
    "SimResult": "log_analyzer.sim_files", "detect_kind": "log_analyzer.file_kinds", "load_input": "log_analyzer.inputs",
    "build_report": "log_analyzer.report", "write_report": "log_analyzer.report",
    "compare_iterations": "log_analyzer.compare", "compare_logs": "log_analyzer.compare",
    "format_compare": "log_analyzer.compare",
}
_SUBMODULES = frozenset({"plots", "report", "compare", "inputs", "sim_files", "summary", "log"})
__all__ = sorted(_EXPORTS) + ["plots"]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"log_analyzer.{name}")
    if name not in _EXPORTS:
        raise AttributeError(f"module 'log_analyzer' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__

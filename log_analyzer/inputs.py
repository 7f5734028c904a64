"""Any input of the analysis commands loaded by its kind (:func:`load_input`): a replay log, an AICB
workload CSV or a simulator result, the kind read from the header (:mod:`log_analyzer.file_kinds`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from log_analyzer.file_kinds import SIM_KINDS, detect_kind
from utils.errors import FormatError


@dataclass
class Input:
    """A file loaded by its kind: ``data`` is a :class:`~log_analyzer.log.Log` (``log``), the workload's
    item table (``workload``: :func:`~log_analyzer.summary.workload_frame`, read in chunks, no
    WorkItem per row) or a :class:`~log_analyzer.sim_files.SimResult` (every simulator kind,
    ``kind == "sim"``)."""

    path: str
    kind: str
    data: Any


def load_input(path: Any, want: tuple[str, ...] = ("log", "workload", "sim")) -> Input:
    """Detect the file's kind and load it; ``want`` lists the acceptable kinds (``log``,
    ``workload``, ``sim``) and any other ends with a message saying what was expected.  ``path`` may
    also be a :class:`~log_analyzer.log.Log` a notebook loaded (compare_logs and the plots take one too)."""
    from log_analyzer.log import Log
    from utils.io import refuse_device

    if isinstance(path, Log):
        loaded, path, kind = path, path.path, "log"
    else:
        loaded = None
        path = os.fspath(path)
        refuse_device(path, "a replay log, an AICB workload CSV or a simulator result")  # /dev/zero has no first line
        kind = detect_kind(path)
        kind = "sim" if kind in SIM_KINDS else kind
    if kind not in want:
        names = {"log": "a replay log (*_log.csv)", "workload": "an AICB workload CSV",
                 "sim": "a simulator result (*EndToEnd.csv or our simai_layers.csv / topo_*.csv)"}
        expected = " or ".join(names[w] for w in want)
        raise FormatError(path, f"this is {names[kind].split(' (')[0]}; expected {expected}")
    if kind == "log":
        return Input(path, kind, loaded if loaded is not None else Log.load(path))
    if kind == "workload":
        from log_analyzer.summary import workload_frame

        return Input(path, kind, workload_frame(path))
    from log_analyzer.sim_files import SimResult

    return Input(path, kind, SimResult.load(path))


def read_paths(*paths: str | None) -> list[str]:
    """The files reading each of ``paths`` reads: the file, a log's detail CSV beside it, and every result
    file of a simulation's prefix (the outputs :func:`utils.io.guard_output` must not replace)."""
    from log_analyzer.log import detail_path
    from log_analyzer.sim_files import SUFFIXES, result_prefix

    out: list[str] = []
    for path in paths:
        if not path:
            continue
        out.append(path)
        out.append(detail_path(path))
        split = result_prefix(path)
        if split is not None:
            out += [split[0] + suffix for suffix in SUFFIXES]
    return out

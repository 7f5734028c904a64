"""``--trace FILE.json``: one simulated iteration as a Chrome trace (open in https://ui.perfetto.dev or
chrome://tracing).

Chrome's Trace Event Format (JSON object form): one process per pipeline stage (``pid`` = stage,
named ``stage s``), one thread per stream (``compute``, ``comm``: blocking collectives and waits,
``overlap comm``: collectives beside the compute, ``p2p``: pipeline sends and receives, ``grad
sync``: gradient-bucket reductions), and one complete event (``"ph": "X"``) per interval with
``ts``/``dur`` in microseconds, the category (``compute``, ``TP``, ``EP``, ``DP``, ``DP_EP``, ``PP``,
``other``) and the layer and micro-batch in ``args``.
"""

from __future__ import annotations

import json

from simulator.result import SimulationResult

STREAMS = ("compute", "comm", "overlap comm", "p2p", "grad sync")
"""Thread ids, in display order."""


def trace_events(result: SimulationResult) -> list[dict]:
    """The trace events of a topo-model result (metadata first, then intervals by stage and start)."""
    if result.details is None:
        raise ValueError("a trace needs a --model topo result (the simai model has no timeline)")
    intervals = result.details.intervals()
    tid = {name: i for i, name in enumerate(STREAMS)}
    stages = sorted({st.stage for st in result.details.stages})
    events: list[dict] = []
    for s in stages:
        events.append({"name": "process_name", "ph": "M", "pid": s, "tid": 0, "args": {"name": f"stage {s}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": s, "tid": 0, "args": {"sort_index": s}})
        for name, i in tid.items():
            events.append({"name": "thread_name", "ph": "M", "pid": s, "tid": i, "args": {"name": name}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": s, "tid": i, "args": {"sort_index": i}})
    for iv in sorted(intervals, key=lambda i: (i.stage, tid.get(i.stream, 9), i.start_s)):
        args = {"layer": iv.layer}
        if iv.microbatch >= 0:
            args["microbatch"] = iv.microbatch
        events.append({"name": iv.name, "cat": iv.category, "ph": "X", "pid": iv.stage,
                       "tid": tid.get(iv.stream, len(STREAMS)), "ts": round(iv.start_s * 1e6, 4),
                       "dur": round(iv.duration_s * 1e6, 4), "args": args})
    return events


def trace_text(result: SimulationResult) -> str:
    """The JSON text of the trace (``displayTimeUnit`` ns so that short collectives stay readable)."""
    meta = {"model": "topo", "workload": result.workload_path, "iteration_us": result.iteration_us}
    return json.dumps({"traceEvents": trace_events(result), "displayTimeUnit": "ns", "otherData": meta},
                      separators=(",", ":"))

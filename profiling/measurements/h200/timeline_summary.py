#!/usr/bin/env python3
"""Summarise one profiled Megatron-core step (``mcore_step.py`` with ``MCORE_PROFILE=1``) from its kernel timeline.

    python timeline_summary.py megatron_core_steps/<case>.json [-o megatron_core_steps/<case>.kernels.json]

Reads ``<case>.json`` (the run's JSON: the unprofiled step times, the host's CUDA runtime calls of the profiled step)
and ``<case>.timeline.json.gz`` beside it (every device event of the profiled step and the forward module ranges that
``mcore_step.py`` opens around each layer's attention, MLP, router, experts and each expert), and writes the kernel
breakdown in the layout of the other ``*.kernels.json`` files, with:

- the kernels by kind (``mcore_step.kernel_kind``), less the GPU-side copies of record_function ranges
  (``mcore_step.is_annotation``: torch.profiler lists them on the device timeline; the run's own ``kernel_breakdown``
  of script version 3 counted them as kernels, so its ``categories_ms``/``gpu_busy_ms`` of that run are too high);
- ``gpu_busy_ms`` (the union of the kernels' intervals) and ``host_gap_ms`` = the unprofiled step's median minus it:
  the time per step the GPU waits for the host (profiled kernel durations; the profiler inflates the host, not them);
- per forward module range (host side, the profiled step, so inflated by the profiler and the hooks): the mean host
  time of the range and the GPU time of the kernels that started inside it.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcore_step import is_annotation, kernel_kind  # noqa: E402


def summarise(run: dict, tl: dict, case: str) -> dict:
    names = tl["names"]
    kernels = sorted((s, d, names[i]) for s, d, i in tl["kernels"] if not is_annotation(names[i]))
    busy, cur, gaps = 0.0, None, []
    for s, d, _ in kernels:
        if cur is None or s > cur[1]:
            if cur:
                busy += cur[1] - cur[0]
                gaps.append(s - cur[1])
            cur = [s, s + d]
        else:
            cur[1] = max(cur[1], s + d)
    if cur:
        busy += cur[1] - cur[0]
    span = kernels[-1][0] + kernels[-1][1] - kernels[0][0] if kernels else 0.0
    by: dict[str, list] = {}
    for _, d, n in kernels:
        k = by.setdefault(n, [0, 0.0])
        k[0] += 1
        k[1] += d
    cats: dict[str, list] = {}
    for n, (c, t) in by.items():
        k = cats.setdefault(kernel_kind(n), [0, 0.0])
        k[0] += c
        k[1] += t
    step = run["step_ms"]["total_median"]
    kb = run.get("kernel_breakdown") or {}
    ranges: dict[str, list] = {}
    starts = [s for s, _, _ in kernels]
    import bisect

    for name, a, b in tl.get("ranges", ()):
        kind = name.split(".", 2)[2]
        kind = "expert" if kind.startswith("expert") and kind != "experts" else kind
        lo, hi = bisect.bisect_left(starts, a), bisect.bisect_right(starts, b)
        r = ranges.setdefault(kind, [0, 0.0, 0.0, 0])
        r[0] += 1
        r[1] += b - a
        r[2] += sum(kernels[i][1] for i in range(lo, hi))
        r[3] += hi - lo
    syncs: dict[str, int] = {}
    for name, _, _ in tl.get("sync_calls", ()):
        syncs[name] = syncs.get(name, 0) + 1
    mb = run.get("micro_batch_ms") or {}
    return {
        "case": case, "step_ms_median": step,
        "note": "one extra step of the same run under torch.profiler (CUDA and CPU activity, forward module ranges "
                "from hooks): every kernel's time; gpu_busy_ms = union of kernel intervals; categories by kernel "
                "name; recomputed from the timeline by timeline_summary.py (record_function ranges removed)",
        "kernels": len(kernels), "kernel_sum_ms": round(sum(d for _, d, _ in kernels) / 1e3, 3),
        "gpu_busy_ms": round(busy / 1e3, 3), "span_ms": round(span / 1e3, 3),
        "host_gap_ms": round(step - busy / 1e3, 3),
        "host_gap_note": "unprofiled step median minus the profiled step's GPU busy time: the GPU idle per step",
        "profiled_step_wall_ms": kb.get("profiled_step_wall_ms"),
        "micro_batch_fwd_bwd_ms": [mb.get("fwd_median"), mb.get("bwd_median")],
        "kernel_launch_calls": kb.get("kernel_launch_calls"),
        "host_runtime_calls": kb.get("host_runtime_calls"),
        "host_sync_calls": syncs,
        "idle_gaps_profiled": {"count": len(gaps), "sum_ms": round(sum(gaps) / 1e3, 3),
                               "over_50us": sum(1 for g in gaps if g > 50),
                               "over_50us_ms": round(sum(g for g in gaps if g > 50) / 1e3, 3)},
        "forward_module_ranges": {
            k: {"count": v[0], "host_us_mean": round(v[1] / v[0], 1), "kernel_us_mean": round(v[2] / v[0], 1),
                "kernels_mean": round(v[3] / v[0], 1)} for k, v in sorted(ranges.items())},
        "forward_module_ranges_note": "host time of each range in the PROFILED step (profiler and hooks inflate it: "
                                      "compare profiled_step_wall_ms with step_ms_median) and the GPU time of the "
                                      "kernels that started inside it",
        "categories_ms": {k: {"count": v[0], "ms": round(v[1] / 1e3, 3)}
                          for k, v in sorted(cats.items(), key=lambda kv: -kv[1][1])},
        "top_kernels": [{"name": n[:160], "count": c, "ms": round(t / 1e3, 3)}
                        for n, (c, t) in sorted(by.items(), key=lambda kv: -kv[1][1])[:40]],
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run_json")
    p.add_argument("--timeline", default=None, help="default: <run_json minus .json>.timeline.json.gz")
    p.add_argument("--case", default=None, help="default: the run JSON's name less mcore_ and .json")
    p.add_argument("-o", "--out", default=None, help="default: print")
    a = p.parse_args(argv)
    base = os.path.splitext(a.run_json)[0]
    tl_path = a.timeline or base + ".timeline.json.gz"
    with open(a.run_json) as f:
        run = json.load(f)
    with gzip.open(tl_path, "rt") as f:
        tl = json.load(f)
    case = a.case or os.path.basename(base).removeprefix("mcore_")
    out = summarise(run, tl, case)
    text = json.dumps(out, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()

"""The search's pictures, page and verdict: the Pareto plot, a self-contained HTML page (the job, the plot, the best
layouts of each sweep point in a table that fits the page; nothing fetched) and :func:`ties`, which says when the
best layouts are closer to each other than the model can tell apart."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from typing import Any

from utils.figures import new_figure, render


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both coordinates (smaller is better on both)."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    front, best = [], float("inf")
    for i in order:
        if points[i][1] < best:
            front.append(i)
            best = points[i][1]
    return front


def _axis(rows: list[dict[str, Any]]) -> tuple[str, str, bool]:
    """The plot's x axis: GPU-hours per million tokens across GPU types or topologies, GPUs across counts, else
    memory per GPU."""
    if len({(r.get("gpu_type"), r.get("topology")) for r in rows}) > 1:
        return "gpu_hours_per_million_tokens", "GPU-hours per million tokens", False
    if len({str(r.get("world_size")) for r in rows}) > 1:
        return "world_size", "GPUs", True
    return "memory_gib", "memory per GPU (GiB)", False


def pareto_png(rows: list[dict[str, Any]], across_worlds: bool | None = None) -> bytes:
    """Iteration time (s) against cost per token (a sweep of GPU types or topologies), GPUs (several counts: a
    column of layouts per count) or memory per GPU (GiB); every simulated layout a dot, the Pareto front joined."""
    fig, ax = new_figure(5.0)
    x_key, x_label, log2 = _axis(rows)
    if across_worlds is not None and across_worlds and x_key == "memory_gib":
        x_key, x_label, log2 = "world_size", "GPUs", True
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(f"{r.get('gpu_type') or ''} {r.get('topology') or ''}".strip(), []).append(i)
    points = [(float(r.get(x_key) or 0), float(r["iteration_s"])) for r in rows]
    colours = ("#4C72B0", "#55A868", "#8172B2", "#CCB974", "#64B5CD", "#DD8452")
    for k, (label, members) in enumerate(sorted(groups.items())):
        ax.scatter([points[i][0] for i in members], [points[i][1] for i in members], s=12, alpha=0.5,
                   color=colours[k % len(colours)], label=(label[:40] or "layouts") if len(groups) > 1 else "layouts")
    front = pareto_front(points)
    if front:
        ax.plot([points[i][0] for i in front], [points[i][1] for i in front], "-o", color="#C44E52", markersize=4,
                label="Pareto front")
    ax.set_xlabel(x_label)
    ax.set_ylabel("iteration (s)")
    if log2:
        ax.set_xscale("log", base=2)
        sizes = sorted({int(float(r["world_size"])) for r in rows})
        ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.legend(loc="upper right", fontsize=7)
    ax.set_title(f"{len(rows)} simulated layouts")
    return render(fig)


def ties(rows: list[dict[str, Any]], error: float) -> str | None:
    """One line when layouts other than the best are within ``error`` (a fraction: the model's mean error) of the best
    of their sweep point: their order is not something the model can tell (None when the best stands alone)."""
    by_point: dict[tuple, list[float]] = {}
    for r in rows:
        by_point.setdefault((r.get("gpu_type"), r.get("topology"), str(r.get("world_size"))), []).append(
            float(r["iteration_s"]))
    counts = []
    for times in by_point.values():
        times.sort()
        counts.append(sum(t <= times[0] * (1 + error) for t in times) - 1)
    if not any(counts):
        return None
    where = "of its sweep point's best" if len(by_point) > 1 else "of the best"
    n = max(counts)
    return (f"{n} other layout{'s are' if n > 1 else ' is'} within {error * 100:.1f}% {where}, the model's mean error on its "
            "dense validation suites (python -m simulator validate; MoE jobs and Blackwell GPUs are off by more): treat "
            "them as ties and choose among them by memory, cost or what the cluster allows")


COLUMNS = (("tp", "TP"), ("cp", "CP"), ("pp", "PP"), ("dp", "DP"), ("ep", "EP"), ("vpp", "chunks"),
           ("micro_batch", "micro"), ("recompute", "recompute"), ("sequence_parallel", "SP"),
           ("distributed_optimizer", "dist. opt."), ("tp_comm_overlap", "TP overlap"), ("order", "order"),
           ("iteration_s", "iteration (s)"), ("tokens_per_s_per_gpu", "tokens/s/GPU"), ("mfu", "MFU"),
           ("memory_gib", "memory (GiB)"), ("gpu_hours_per_million_tokens", "GPU-h / Mtok"), ("compute_s", "compute (s)"),
           ("exposed_comm_s", "exposed comm (s)"), ("bubble_s", "bubble (s)"))

STYLE = ("body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:75em;padding:0 1em;color:#222}"
         "h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.6em}"
         "dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}dt{color:#555}dd{margin:0}"
         ".note{background:#fff8e0;border-left:4px solid #e0b000;padding:.5em .8em}"
         ".wrap{overflow-x:auto;max-height:40em;border:1px solid #ddd}"
         "table{border-collapse:collapse;font-size:12px;white-space:nowrap}"
         "td,th{border-bottom:1px solid #eee;padding:3px 7px;text-align:right}td.t,th.t{text-align:left}"
         "th{background:#f3f3f3;position:sticky;top:0}tr:nth-child(even) td{background:#fafafa}"
         "img{max-width:100%;height:auto}")


def _cell(name: str, value: Any) -> str:
    if value in (None, ""):
        return "<td></td>"
    text = str(value)
    if name == "mfu":
        return f"<td>{float(text) * 100:.1f}%</td>"
    if text in ("True", "False"):
        return f"<td class='t'>{'yes' if text == 'True' else ''}</td>"
    try:
        number = float(text)
    except ValueError:
        return f"<td class='t'>{html.escape(text)}</td>"
    if name.endswith(("_s", "_gib")) or name == "gpu_hours_per_million_tokens":
        return f"<td>{number:.4g}</td>"
    return f"<td>{number:,.0f}</td>" if number >= 1000 else f"<td>{html.escape(text)}</td>"


def _table(rows: list[dict[str, Any]]) -> str:
    head = "".join(f"<th class='t'>{html.escape(label)}</th>" if name in ("recompute", "order") else
                   f"<th>{html.escape(label)}</th>" for name, label in COLUMNS)
    body = "".join("<tr>" + "".join(_cell(name, r.get(name)) for name, _ in COLUMNS) + "</tr>" for r in rows)
    return f"<div class='wrap'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def html_page(rows: list[dict[str, Any]], png: bytes, plan: Any, worlds: Sequence[int], gpus: Sequence[str] | str,
              base: dict[str, Any] | None = None, args: dict[str, Any] | None = None, error: float = 0.036,
              top: int = 20, extra: str = "") -> str:
    """The page: the job and the search (what was given, what was dropped and why), the verdict on ties, the plot,
    the best ``top`` layouts of each sweep point (a scrolling table with a fixed header), then ``extra`` (HTML: the
    placement section of ``--placement search``, :func:`simulator.search.placed.html_section`)."""
    gpus = [gpus] if isinstance(gpus, str) else list(gpus)
    base, args = base or {}, args or {}
    job = ", ".join(f"{k} {v}" for k, v in sorted(base.items()) if v not in (None, False)) or "defaults"
    rejected = sum(plan.rejected.values())
    room = f" (less {plan.headroom_gib:g} GiB of headroom)" if getattr(plan, "headroom_gib", 0) else ""
    facts = [("model and job", job), ("GPU types", ", ".join(gpus)), ("GPU counts", ", ".join(map(str, worlds))),
             ("topology", html.escape(str(args.get("topology") or "; ".join(args.get("topo_gen") or [])))),
             ("layouts", f"{plan.enumerated:,} enumerated: {rejected:,} rejected by Megatron's rules, {plan.too_big:,} do "
                         f"not fit the GPU's memory{room}, {len(plan.candidates):,} candidates, {len(rows):,} simulated "
                         f"(the rest bounded out: their lower bound exceeds their point's {top}th best time)")]
    facts += [(f"rejected ({count})", reason + " ...") for reason, count in plan.rejected.most_common(3)]
    summary = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v) if k != 'topology' else v}</dd>" for k, v in facts)
    note = ties(rows, error)
    verdict = f"<p class='note'>{html.escape(note)}.</p>" if note else ""
    by_point: dict[tuple, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: float(r["iteration_s"])):
        by_point.setdefault((r.get("gpu_type"), r.get("topology"), str(r.get("world_size"))), []).append(r)
    tables = []
    for (gpu, topology, world), members in sorted(by_point.items(), key=lambda kv: float(kv[1][0]["iteration_s"])):
        title = f"{world} {gpu} on {topology}: best {min(top, len(members))} of {len(members)}"
        tables.append(f"<h2>{html.escape(title)}</h2>{_table(members[:top])}")
    image = base64.b64encode(png).decode("ascii")
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><meta name='viewport' "
            f"content='width=device-width,initial-scale=1'><title>Layout search</title><style>{STYLE}</style></head><body>"
            f"<h1>Layout search</h1><dl>{summary}</dl>{verdict}"
            f"<img alt='iteration time of every simulated layout, Pareto front joined' src='data:image/png;base64,{image}'>"
            + "".join(tables) + extra + "</body></html>\n")

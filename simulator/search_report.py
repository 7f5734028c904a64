"""The search's pictures and page: the Pareto plot (iteration time against GPUs, or against memory per
GPU for one GPU count) and a self-contained HTML page (the plot embedded, the ranked layouts; nothing
fetched)."""

from __future__ import annotations

import base64
import html
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


def pareto_png(rows: list[dict[str, Any]], across_worlds: bool) -> bytes:
    """Iteration time (s) against GPUs (several counts) or memory per GPU (GiB), every simulated layout
    a dot, the Pareto front joined."""
    fig, ax = new_figure(5.0)
    x_key, x_label = ("world_size", "GPUs") if across_worlds else ("memory_gib", "memory per GPU (GiB)")
    points = [(float(r[x_key] or 0), float(r["iteration_s"])) for r in rows]
    ax.scatter([p[0] for p in points], [p[1] for p in points], s=12, alpha=0.5, color="#4C72B0", label="layouts")
    front = pareto_front(points)
    if front:
        ax.plot([points[i][0] for i in front], [points[i][1] for i in front], "-o", color="#C44E52", markersize=4,
                label="Pareto front")
    ax.set_xlabel(x_label)
    ax.set_ylabel("iteration (s)")
    if across_worlds:
        ax.set_xscale("log", base=2)
    ax.legend(loc="upper right")
    ax.set_title(f"{len(rows)} simulated layouts")
    return render(fig)


COLUMNS = ("tp", "pp", "dp", "ep", "vpp", "micro_batch", "recompute", "sequence_parallel", "distributed_optimizer",
           "order", "tp_comm_overlap", "iteration_s", "tokens_per_s_per_gpu", "mfu", "memory_gib", "compute_s",
           "exposed_comm_s", "bubble_s")


def html_page(rows: list[dict[str, Any]], png: bytes, plan: Any, worlds: list[int], gpu: str, top: int = 100) -> str:
    """The page: what was searched, the plot, the best ``top`` layouts."""
    ranked = sorted(rows, key=lambda r: float(r["iteration_s"]))[:top]

    def cell(value: Any) -> str:
        if isinstance(value, float) or (isinstance(value, str) and value.replace(".", "", 1).isdigit() and "." in value):
            return f"{float(value):.4g}"
        return html.escape(str(value))

    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{cell(r.get(c, ''))}</td>" for c in COLUMNS) + "</tr>" for r in ranked)
    rejected = sum(plan.rejected.values())
    summary = (f"{plan.enumerated} layouts on {', '.join(map(str, worlds))} {html.escape(gpu)} GPUs: {rejected} rejected by "
               f"Megatron's rules, {plan.too_big} too big for memory, {len(rows)} simulated.")
    image = base64.b64encode(png).decode("ascii")
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Layout search</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}th{background:#f3f3f3}</style></head><body>"
        f"<h1>Layout search</h1><p>{summary}</p><img alt='Pareto plot' src='data:image/png;base64,{image}'>"
        f"<h2>Best {len(ranked)} layouts</h2><table><tr>{head}</tr>{body}</table></body></html>\n")

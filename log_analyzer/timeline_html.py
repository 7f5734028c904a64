"""The zoomable timeline of one iteration in the HTML report: inline SVG and CSS, no script.

One lane for computation and one per communication group, the operations back to back as rank 0 ran them
(the rows of a p2p batch side by side), as :func:`log_analyzer.plots.timeline` draws them.  Zoom buttons
(1x to 64x: radio buttons that CSS styles) widen the drawing inside a box that scrolls sideways; the time
labels are HTML placed in percent of the width, so they keep their size while finer ticks appear as the
zoom grows.  Hovering an operation shows its type, group, size (or shapes), stage, start and time (the
SVG ``<title>``).  Nothing runs: the report's Content-Security-Policy forbids scripts, and none is needed.
"""

from __future__ import annotations

import html
import math
from typing import Any

import numpy as np

from utils.units import format_size

ZOOMS = (1, 2, 4, 8, 16, 32, 64)
"""The zoom factors offered."""
MAX_OPERATIONS = 20_000
"""Operations drawn at most (the first ones of the iteration; the page says when more were left out)."""
LANE_PX = 26
AXIS_PX = 18
WIDTH = 1000.0
"""Width of the drawing in SVG units (the iteration's logged time maps onto it)."""


def _css() -> str:
    rules = [
        ".tl { margin: 12px 0 6px; }",
        ".tl > input { position: absolute; opacity: 0; pointer-events: none; }",
        ".tl > label { display: inline-block; padding: 1px 9px; margin: 0 4px 6px 0; border: 1px solid var(--line); "
        "border-radius: 5px; font-size: 12px; cursor: pointer; background: #fff; }",
        ".tl > input:checked + label { background: var(--accent); border-color: var(--accent); color: #fff; }",
        ".tl > input:focus-visible + label { outline: 2px solid var(--accent); }",
        ".tl-view { display: flex; border: 1px solid var(--line); border-radius: 6px; overflow: hidden; }",
        ".tl-lanes { flex: 0 0 auto; font-size: 12px; background: var(--band); border-right: 1px solid var(--line); "
        f"padding-bottom: {AXIS_PX}px; }}",
        f".tl-lanes div {{ height: {LANE_PX}px; line-height: {LANE_PX}px; padding: 0 10px; white-space: nowrap; }}",
        ".tl-scroll { flex: 1 1 auto; overflow-x: auto; }",
        f".tl-canvas {{ position: relative; width: 100%; padding-bottom: {AXIS_PX}px; }}",
        ".tl-canvas svg { display: block; width: 100%; }",
        ".tl-canvas rect:hover { stroke: #1f2328; stroke-width: 1px; }",
        ".tl-ticks { position: absolute; inset: 0; pointer-events: none; }",
        ".tl-ticks span { position: absolute; top: 0; bottom: 0; border-left: 1px solid rgba(31, 35, 40, .10); }",
        ".tl-ticks b { position: absolute; bottom: 1px; left: 3px; font-weight: normal; font-size: 11px; "
        "color: var(--muted); white-space: nowrap; }",
        ".tl-legend { font-size: 12px; color: var(--muted); margin: 6px 0; display: flex; flex-wrap: wrap; gap: 4px 14px; }",
        ".tl-legend i { display: inline-block; width: 10px; height: 10px; margin-right: 5px; border-radius: 2px; }",
    ]
    rules.append(".tl-ticks span { display: none; }")
    for zoom in ZOOMS:
        if zoom > 1:
            rules.append(f".tl > input.z{zoom}:checked ~ .tl-view .tl-canvas {{ width: {zoom * 100}%; }}")
        rules.append(f".tl > input.z{zoom}:checked ~ .tl-view .tl-ticks .z{zoom} {{ display: block; }}")
    return "\n".join(rules) + "\n"


TIMELINE_CSS = _css()
"""The timeline's style rules (the report's stylesheet includes them)."""


def _nice_step(span: float) -> float:
    """A round step (1, 2 or 5 times a power of ten) of about ``span``."""
    if not span > 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(span))
    for factor in (1.0, 2.0, 5.0, 10.0):
        if span <= factor * power * 1.5:
            return factor * power
    return 10.0 * power


def _ms(value: float) -> str:
    return f"{value:,.6g} ms" if value >= 1 or value == 0 else f"{value * 1000:,.4g} us"


def ticks(end_ms: float) -> list[tuple[list[int], float]]:
    """(the zoom factors that show it, time in ms) of each axis tick: at each zoom, the multiples of a
    round step giving about 8 ticks per screen width."""
    shown: dict[float, list[int]] = {}
    for zoom in ZOOMS:
        step = _nice_step(end_ms / (8 * zoom))
        for k in range(0, int(end_ms / step * (1 + 1e-9)) + 1):
            shown.setdefault(round(k * step, 12), []).append(zoom)
    return sorted(((zooms, value) for value, zooms in shown.items()), key=lambda tick: tick[1])


def timeline_html(log: Any, iteration: int, prefix: str = "tl") -> str:
    """The timeline of ``iteration`` of a :class:`~log_analyzer.log.Log` as an HTML fragment; ``prefix``
    keeps the ids of the zoom buttons apart when a page holds several timelines."""
    from log_analyzer.plots import TYPE_COLORS, _timeline_slots

    rows = log.items[log.items["iteration"] == iteration]
    total = len(rows)
    if not total:
        return f'<p class="note">Iteration {iteration} has no operations in this log.</p>'
    rows = rows.iloc[:MAX_OPERATIONS]
    elapsed = rows["elapsed_ms"].to_numpy(dtype=float, na_value=np.nan)
    elapsed = np.where(np.isfinite(elapsed), elapsed, 0.0)
    start, offset, height = _timeline_slots(rows, elapsed)
    types = rows["comm_type"].astype(str).to_numpy()
    is_comp = types == "computation"
    groups = rows["comm_group"].astype("string").fillna("none").to_numpy(dtype=object)
    lane_names = (["computation"] if is_comp.any() else []) + sorted({g for g, c in zip(groups, is_comp) if not c})
    lane = {name: i for i, name in enumerate(lane_names)}
    lanes = np.array([lane["computation" if c else g] for g, c in zip(groups, is_comp)], dtype=float)
    end = float((start + elapsed).max()) or 1e-9
    scale = WIDTH / end
    svg_height = LANE_PX * len(lane_names)
    sizes = rows["msg_size"].to_numpy(dtype=float, na_value=0.0)
    shapes = rows["shapes"].astype("string").fillna("").to_numpy(dtype=object)
    stages = rows["stage"].astype("string").fillna("").to_numpy(dtype=object)
    parts = []
    for ctype in dict.fromkeys(types):
        color = TYPE_COLORS.get(ctype, "#999999")
        shapes_of = []
        for i in np.flatnonzero(types == ctype):
            top = (lanes[i] + 0.5 + offset[i] - height[i] / 2) * LANE_PX
            what = shapes[i] if is_comp[i] else format_size(sizes[i])
            where = "" if is_comp[i] else f" · {groups[i]}"
            tip = (f"{ctype}{where} · {what} · {stages[i]}\n{_ms(elapsed[i])}, from {_ms(start[i])} to "
                   f"{_ms(start[i] + elapsed[i])}")
            shapes_of.append(f'<rect x="{start[i] * scale:.3f}" y="{top:.1f}" width="{elapsed[i] * scale:.3f}" '
                             f'height="{height[i] * LANE_PX:.1f}"><title>{html.escape(tip)}</title></rect>')
        parts.append(f'<g fill="{color}">{"".join(shapes_of)}</g>')
    separators = "".join(f'<line x1="0" x2="{WIDTH:g}" y1="{k * LANE_PX}" y2="{k * LANE_PX}" stroke="#d1d9e0" '
                         'stroke-width="1" vector-effect="non-scaling-stroke"/>' for k in range(1, len(lane_names)))
    svg = (f'<svg viewBox="0 0 {WIDTH:g} {svg_height}" preserveAspectRatio="none" height="{svg_height}" '
           f'role="img" aria-label="timeline of iteration {iteration}">{separators}{"".join(parts)}</svg>')
    tick_html = "".join(f'<span class="{" ".join(f"z{z}" for z in zooms)}" style="left:{value / end * 100:.4f}%">'
                        f"<b>{html.escape(_ms(value))}</b></span>" for zooms, value in ticks(end) if value <= end)
    buttons = "".join(
        f'<input type="radio" name="{prefix}-zoom" id="{prefix}-z{zoom}" class="z{zoom}"{" checked" if zoom == 1 else ""}>'
        f'<label for="{prefix}-z{zoom}">{zoom}×</label>' for zoom in ZOOMS)
    lane_html = "".join(f"<div>{html.escape(name)}</div>" for name in lane_names)
    legend = "".join(f'<span><i style="background:{TYPE_COLORS.get(t, "#999999")}"></i>{html.escape(t)}</span>'
                     for t in dict.fromkeys(types))
    wall = log.iterations.loc[log.iterations["iteration"] == iteration, "time_ms"]
    wall_text = f"{_ms(float(wall.iloc[0]))} wall" if len(wall) and wall.notna().iloc[0] else "no wall time (incomplete)"
    shown = (f"the first {len(rows):,} of {total:,} operations" if total > len(rows) else f"{total:,} operations")
    return (f'<div class="tl">{buttons}<span class="note"> zoom, then scroll sideways; hover an operation for its '
            f'details</span><div class="tl-view"><div class="tl-lanes">{lane_html}</div><div class="tl-scroll">'
            f'<div class="tl-canvas">{svg}<div class="tl-ticks">{tick_html}</div></div></div></div>'
            f'<div class="tl-legend">{legend}</div></div>'
            f'<p class="note">Iteration {iteration} on rank 0: {_ms(end)} logged, {wall_text}; {shown}, back to back in '
            "log order (the gaps between them are not logged; a p2p batch's rows side by side).</p>")

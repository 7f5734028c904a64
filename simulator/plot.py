"""The breakdown chart: where a simulated iteration's time goes, as stacked bars (matplotlib, off-screen).

One horizontal bar per pipeline stage (topo model) or one for the simulated rank (simai model),
split into compute, exposed TP / EP / DP / DP_EP / PP / other comm and bubble, in milliseconds;
each bar adds up to the iteration time.  The terms, colors and labels are defined here, and the
chart is drawn here for both ``--plot`` (:func:`plot_png`) and the analyzer
(:func:`log_analyzer.plots.sim_breakdown`, which passes its ``SimResult``).  matplotlib and numpy
are imported only when a chart is drawn.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from utils.figures import new_figure, render

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from simulator.result import SimulationResult

TERMS = ("compute", "TP", "CP", "EP", "DP", "DP_EP", "PP", "other", "bubble")
COLORS = {"compute": "#4c72b0", "TP": "#dd8452", "CP": "#da8bc3", "EP": "#c44e52", "DP": "#55a868", "DP_EP": "#64b5cd",
          "PP": "#8172b3", "other": "#937860", "host": "#ccb974", "bubble": "#e5e5e5"}
LABELS = {"TP": "exposed TP", "CP": "exposed CP", "EP": "exposed EP", "DP": "exposed DP", "DP_EP": "exposed DP_EP",
          "PP": "exposed PP", "other": "exposed other", "host": "waiting for the host", "compute": "compute",
          "bubble": "bubble"}


def breakdown_chart(sim: Any, title: str | None = None) -> Figure:
    """Where a simulated iteration goes: one stacked bar per pipeline stage (topo) or one for the
    simulated rank (simai), compute + exposed TP / EP / DP / DP_EP / PP / other comm + bubble, in ms.
    ``sim`` is a :class:`SimulationResult` or the analyzer's ``SimResult`` (anything with
    ``breakdown()``, ``iteration_us`` and ``model``)."""
    import numpy as np

    rows = sim.breakdown()
    terms = [t for t in COLORS if any(values.get(t, 0.0) > 0 for _, values in rows)]
    fig, ax = new_figure(max(2.6, 1.9 + 0.4 * len(rows)))
    labels = [label for label, _ in rows]
    left = np.zeros(len(rows))
    for term in terms:
        widths = np.array([values.get(term, 0.0) / 1000.0 for _, values in rows])
        ax.barh(labels, widths, left=left, color=COLORS[term], label=LABELS[term], edgecolor="white",
                linewidth=0.4)
        left += widths
    for y, total in enumerate(left):
        ax.text(total, y, f"  {total:,.4g} ms", va="center", fontsize=8)
    ax.set_xlim(0, left.max() * 1.15 if len(left) and left.max() > 0 else 1)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.grid(True, axis="x", alpha=0.3)
    iteration = sim.iteration_us / 1000.0
    head = f"{sim.model} model" if sim.model != "unknown" else "simulation"
    ax.set_title(title or (f"{head}: iteration {iteration:,.4g} ms" if math.isfinite(iteration) else head))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return fig


def plot_png(result: SimulationResult, title: str | None = None) -> bytes:
    """The PNG bytes of the breakdown plot (rendered in memory, so a failure writes nothing)."""
    return render(breakdown_chart(result, title), "png", dpi=120)

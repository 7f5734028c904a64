"""``--plot FILE.png``: where the iteration's time goes, as stacked bars (matplotlib, Agg backend).

One horizontal bar per pipeline stage (topo model) or one for the simulated rank (simai model),
split into compute, exposed TP / EP / DP / DP_EP / PP / other comm and bubble, in milliseconds;
each bar adds up to the iteration time.  The terms, colors and labels are defined here; matplotlib
is imported only when a plot is drawn.
"""

from __future__ import annotations

from simulator.result import SimulationResult

TERMS = ("compute", "TP", "EP", "DP", "DP_EP", "PP", "other", "bubble")
COLORS = {"compute": "#4c72b0", "TP": "#dd8452", "EP": "#c44e52", "DP": "#55a868", "DP_EP": "#64b5cd",
          "PP": "#8172b3", "other": "#937860", "bubble": "#e5e5e5"}
LABELS = {"TP": "exposed TP", "EP": "exposed EP", "DP": "exposed DP", "DP_EP": "exposed DP_EP", "PP": "exposed PP",
          "other": "exposed other", "compute": "compute", "bubble": "bubble"}


def plot_png(result: SimulationResult, title: str | None = None) -> bytes:
    """The PNG bytes of the breakdown plot (rendered in memory, so a failure writes nothing).

    The chart itself is :func:`log_analyzer.plots.sim_breakdown`, the one drawing of a breakdown
    that reports and ``--plot`` share."""
    from log_analyzer.plots import render, sim_breakdown

    return render(sim_breakdown(result, title), "png", dpi=120)

"""``--plot FILE.png``: where the iteration's time goes, as stacked bars (matplotlib, Agg backend).

One horizontal bar per pipeline stage (topo model) or one for the simulated rank (simai model),
split into compute, exposed TP / EP / DP / DP_EP / PP / other comm and bubble, in milliseconds;
each bar adds up to the iteration time.  matplotlib is imported only here.
"""

from __future__ import annotations

import io

from simulator.result import SimulationResult

TERMS = ("compute", "TP", "EP", "DP", "DP_EP", "PP", "other", "bubble")
COLORS = {"compute": "#4c72b0", "TP": "#dd8452", "EP": "#c44e52", "DP": "#55a868", "DP_EP": "#64b5cd",
          "PP": "#8172b3", "other": "#937860", "bubble": "#e5e5e5"}
LABELS = {"TP": "exposed TP", "EP": "exposed EP", "DP": "exposed DP", "DP_EP": "exposed DP_EP", "PP": "exposed PP",
          "other": "exposed other", "compute": "compute", "bubble": "bubble"}


def plot_png(result: SimulationResult, title: str | None = None) -> bytes:
    """The PNG bytes of the breakdown plot (rendered in memory, so a failure writes nothing)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    rows = result.breakdown()
    used = [t for t in TERMS if any(values[t] > 0 for _, values in rows)]
    height = max(2.5, 0.35 * len(rows) + 1.8)
    fig, ax = plt.subplots(figsize=(10, height))
    try:
        labels = [label for label, _ in rows]
        left = [0.0] * len(rows)
        for term in used:
            widths = [values[term] / 1000.0 for _, values in rows]
            ax.barh(labels, widths, left=left, color=COLORS[term], label=LABELS[term], edgecolor="white", linewidth=0.3)
            left = [a + b for a, b in zip(left, widths)]
        ax.invert_yaxis()
        ax.set_xlabel("time (ms)")
        total_ms = result.iteration_us / 1000.0
        ax.set_title(title or f"{result.model} model: iteration {total_ms:,.3f} ms", pad=24)
        # the legend sits between the title and the bars, clear of the axis label
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=min(len(used), 8), frameon=False, fontsize=8)
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
        return buffer.getvalue()
    finally:
        plt.close(fig)

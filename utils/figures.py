"""Matplotlib figures drawn off-screen, for every chart of the toolkit: a new figure of one width, and
its PNG or SVG bytes.

No pyplot (no display, no global figure list to leak into).  matplotlib is imported when a figure is
made, so importing this module stays light.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

WIDTH_IN = 10.0
"""Figure width in inches (1100 px at the report's 110 dpi)."""


def new_figure(height_in: float, rows: int = 1, **kwargs: Any) -> tuple[Figure, Any]:
    """A figure ``WIDTH_IN`` wide and ``height_in`` high with ``rows`` axes stacked (constrained layout)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_IN, height_in), layout="constrained")
    axes = fig.subplots(rows, 1, squeeze=True, **kwargs)
    return fig, axes


def render(fig: Figure, fmt: str = "png", dpi: int = 110) -> bytes:
    """The figure as PNG or SVG bytes (drawn in memory: a failure writes nothing)."""
    if fmt not in ("png", "svg"):
        raise ValueError(f"format must be png or svg, got {fmt!r}")
    buffer = io.BytesIO()
    # SVG: text as paths (matplotlib's default), so the file shows the same without our fonts
    fig.savefig(buffer, format=fmt, dpi=dpi, metadata={"Software": None} if fmt == "png" else {"Date": None})
    return buffer.getvalue()

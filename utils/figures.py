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
    """A figure ``WIDTH_IN`` wide and ``height_in`` high with ``rows`` axes stacked (constrained layout).
    It shows itself as a PNG when it is a Jupyter cell's value (:func:`figure_class`)."""
    fig = figure_class()(figsize=(WIDTH_IN, height_in), layout="constrained")
    axes = fig.subplots(rows, 1, squeeze=True, **kwargs)
    return fig, axes


_FIGURE_CLASS: type | None = None


def figure_class() -> type:
    """matplotlib's Figure with IPython's ``_repr_png_``: a figure made without pyplot has no backend
    that registers it with IPython, so a notebook would print ``<Figure size ...>`` unless the user ran
    ``%matplotlib inline``; with this method Jupyter draws it (``%matplotlib inline`` still works)."""
    global _FIGURE_CLASS
    if _FIGURE_CLASS is None:
        from matplotlib.figure import Figure

        class NotebookFigure(Figure):
            def _repr_png_(self) -> bytes:
                return render(self, "png")

        _FIGURE_CLASS = NotebookFigure
    return _FIGURE_CLASS


def render(fig: Figure, fmt: str = "png", dpi: int = 110) -> bytes:
    """The figure as PNG or SVG bytes (drawn in memory: a failure writes nothing)."""
    if fmt not in ("png", "svg"):
        raise ValueError(f"format must be png or svg, got {fmt!r}")
    buffer = io.BytesIO()
    # SVG: text as paths (matplotlib's default), so the file shows the same without our fonts
    fig.savefig(buffer, format=fmt, dpi=dpi, metadata={"Software": None} if fmt == "png" else {"Date": None})
    return buffer.getvalue()

"""The layout search (``python -m simulator search``), hardware sweeps and the placement search (``python -m simulator
place``)."""

from __future__ import annotations

import importlib
import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    """``simulator.search`` was a module: its names still resolve here, from :mod:`simulator.search.run`, with a
    deprecation warning (the old path goes in the next release)."""
    module = importlib.import_module("simulator.search.run")
    try:
        value = getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module 'simulator.search' has no attribute {name!r}") from None
    old, new = "simulator.search", "simulator.search.run"
    warnings.warn(f"{old}.{name} moved to {new}.{name}; the old path goes in the next release", DeprecationWarning,
                  stacklevel=2)
    return value

"""Measured profiles: the database's format and reader, the fit of measured collectives, the flags that choose a
profile."""

from __future__ import annotations

import importlib
import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    """``simulator.profiles`` was a module: its names still resolve here, from :mod:`simulator.profiles.measured`, with a
    deprecation warning (the old path goes in the next release)."""
    module = importlib.import_module("simulator.profiles.measured")
    try:
        value = getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module 'simulator.profiles' has no attribute {name!r}") from None
    old, new = "simulator.profiles", "simulator.profiles.measured"
    warnings.warn(f"{old}.{name} moved to {new}.{name}; the old path goes in the next release", DeprecationWarning,
                  stacklevel=2)
    return value

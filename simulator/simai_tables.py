"""Deprecated path of :mod:`simulator.simai.tables` (simulator/ was split into folders): importing it warns
and gives that module itself; the old path goes in the next release."""

import sys
import warnings

from simulator.simai import tables as _moved

_OLD, _NEW = "simulator.simai_tables", "simulator.simai.tables"
warnings.warn(f"{_OLD} moved to {_NEW}; the old path goes in the next release", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved

"""Deprecated path of :mod:`simulator.topo.moe_comm` (simulator/ was split into folders): importing it warns
and gives that module itself; the old path goes in the next release."""

import sys
import warnings

from simulator.topo import moe_comm as _moved

_OLD, _NEW = "simulator.moe_comm", "simulator.topo.moe_comm"
warnings.warn(f"{_OLD} moved to {_NEW}; the old path goes in the next release", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved

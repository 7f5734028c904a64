"""Deprecated path of :mod:`simulator.search.comm` (simulator/ was split into folders): importing it warns
and gives that module itself; the old path goes in the next release."""

import sys
import warnings

from simulator.search import comm as _moved

_OLD, _NEW = "simulator.search_comm", "simulator.search.comm"
warnings.warn(f"{_OLD} moved to {_NEW}; the old path goes in the next release", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved

"""Deprecated path of :mod:`simulator.search.files` (simulator/ was split into folders): importing it warns
and gives that module itself; the old path goes in the next release."""

import sys
import warnings

from simulator.search import files as _moved

_OLD, _NEW = "simulator.search_files", "simulator.search.files"
warnings.warn(f"{_OLD} moved to {_NEW}; the old path goes in the next release", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved

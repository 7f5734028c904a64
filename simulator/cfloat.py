"""C arithmetic that SimAI's numbers depend on: 32-bit floats and printf-style formatting.

SimAI keeps bandwidths, ratios and overlap factors in C ``float`` and converts integer nanosecond
counts (``Tick``) to ``float`` when it scales them, so reproducing its output to the nanosecond
needs the same roundings.  A float32 operation is the double-precision result rounded once to
float32, which is what :func:`f32` does (exact for +, -, *, / of float32 operands: a double holds
their exact result or rounds it harmlessly before the float32 rounding).
"""

from __future__ import annotations

import math
import struct

_F32 = struct.Struct("<f")


F32_MAX = 3.4028234663852886e38
"""The largest finite C ``float``: a bandwidth SimAI keeps in one can be no larger."""


def f32(value: float) -> float:
    """``value`` rounded to the nearest IEEE-754 single-precision number (ties to even); beyond the float range
    +-inf, as C's conversion gives (``-nic 1e38`` x 8 NICs raised OverflowError here)."""
    try:
        return _F32.unpack(_F32.pack(value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


def c_fixed(value: float, digits: int) -> str:
    """``printf("%.<digits>f")`` / ``std::fixed`` text as glibc writes it.

    NaN prints ``-nan``: every NaN SimAI's report can produce comes from 0/0 or inf*0, whose x86
    result has the sign bit set.
    """
    if math.isnan(value):
        return "-nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{digits}f}"

"""Bandwidth and latency strings of SimAI topology files, as ns-3 reads them.

A topology file stores each link's rate and delay as the strings that SimAI's ns-3 frontend hands
to ``DataRate`` and ``Time`` (``400Gbps``, ``0.0005ms``).  We parse them to floats in SI units:

* bandwidth: bits per second (``400Gbps`` -> 4e11).  Decimal prefixes k/K, M, G, T are powers of
  10^3; binary prefixes Ki, Mi, Gi, Ti are powers of 2^10 (ns-3 ``DataRate`` accepts both).  The
  unit ``bps`` or ``b/s`` counts bits, ``Bps`` or ``B/s`` counts bytes (x8).  A bare number is bits
  per second, as ns-3 reads it.
* latency: seconds (``0.0005ms`` -> 5e-7).  Units s, ms, us, ns, ps, fs, min, h (ns-3 ``Time``);
  a bare number is seconds.

The generator is stricter than the reader: a flag value must carry a unit (``-bw 400`` would
silently mean 400 bit/s in ns-3).  Both raise ``ValueError`` with the text; callers turn it into a
``ConfigError`` or ``FormatError`` that names the flag or the file position.
"""

from __future__ import annotations

import math
import re

BITS_PER_BYTE = 8

_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_RATE_RE = re.compile(_NUMBER + r"(?:([kKMGT])(i?))?(bps|b/s|Bps|B/s)?$")
_TIME_RE = re.compile(_NUMBER + r"(s|ms|us|ns|ps|fs|min|h)?$")
_DECIMAL = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_BINARY = {"k": 2.0**10, "K": 2.0**10, "M": 2.0**20, "G": 2.0**30, "T": 2.0**40}
MIN_BPS, MAX_BPS = 1.0, float(2**64 - 1)
"""The rates an ns-3 ``DataRate`` holds (a uint64 of bit/s): 1e-300bps or 1e200Gbps made infinite times."""
MAX_LATENCY_S = (2**63 - 1) * 1e-9
"""The longest delay an ns-3 ``Time`` holds at its default nanosecond resolution (292 years)."""
_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "ps": 1e-12, "fs": 1e-15, "min": 60.0, "h": 3600.0}


def parse_bandwidth(text: str, require_unit: bool = False) -> float:
    """Bits per second of an ns-3 rate string: ``400Gbps`` -> 4e11, ``1.8Tbps`` -> 1.8e12,
    ``100Mbps`` -> 1e8, ``50GBps`` -> 4e11 (bytes x 8).  Must be finite and > 0."""
    match = _RATE_RE.match(text.strip())
    if match is None or (match.group(2) and not match.group(4)):
        raise ValueError(f"not a bandwidth: {text!r} (expected e.g. 400Gbps, 1.8Tbps, 100Mbps)")
    number, prefix, binary, unit = match.groups()
    if require_unit and unit is None:
        raise ValueError(f"bandwidth {text!r} has no unit (ns-3 would read bits per second; write e.g. {text}Gbps)")
    value = float(number)
    if prefix:
        value *= (_BINARY if binary else _DECIMAL)[prefix]
    if unit in ("Bps", "B/s"):
        value *= BITS_PER_BYTE
    if not value > 0:
        raise ValueError(f"bandwidth must be positive: {text!r}")
    if not MIN_BPS <= value <= MAX_BPS:
        raise ValueError(f"bandwidth {text!r} is outside the 1 bps to {MAX_BPS:.3g} bps an ns-3 DataRate holds")
    return value


def parse_latency(text: str, require_unit: bool = False) -> float:
    """Seconds of an ns-3 time string: ``0.0005ms`` -> 5e-7, ``500ns`` -> 5e-7, ``1us`` -> 1e-6.
    Must be finite and >= 0."""
    match = _TIME_RE.match(text.strip())
    if match is None:
        raise ValueError(f"not a latency: {text!r} (expected e.g. 0.0005ms, 500ns, 1us)")
    number, unit = match.groups()
    if require_unit and unit is None:
        raise ValueError(f"latency {text!r} has no unit (ns-3 would read seconds; write e.g. {text}ms)")
    value = float(number) * _SECONDS[unit or "s"]
    if not math.isfinite(value) or value > MAX_LATENCY_S:
        raise ValueError(f"latency {text!r} is beyond the {MAX_LATENCY_S:.3g} s an ns-3 Time holds (int64 nanoseconds)")
    return value


def parse_error_rate(text: str) -> float:
    """A per-link packet error rate: a number in [0, 1] (ns-3 reads it as a double)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"not an error rate: {text!r} (expected a number in [0, 1])") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"error rate must lie in [0, 1]: {text!r}")
    return value


def bytes_per_s(bits_per_s: float) -> float:
    """Bytes per second of a rate in bits per second (``/ 8``)."""
    return bits_per_s / BITS_PER_BYTE

"""Units, sizes and the one definition of algorithm and bus bandwidth.

Bandwidth follows nccl-tests (``doc/PERFORMANCE.md`` of NVIDIA/nccl-tests): GB/s means 10^9 bytes
per second, ``algbw = size / time`` and ``busbw = algbw * factor(n)`` with the per-collective
factors of :func:`busbw_factor`.  AICB prints GiB/s and calls them GB; SimAI reads busbw inputs as
GiB/s.  :data:`GIB` and ``gib=True`` exist only for comparing with those tools.
"""

from __future__ import annotations

import re

GB = 1_000_000_000
"""Bytes in a gigabyte (nccl-tests' GB/s)."""
GIB = 1 << 30
"""Bytes in a gibibyte (what AICB and SimAI call GB)."""

DTYPE_BYTES = {
    "float32": 4, "fp32": 4, "float": 4,
    "bfloat16": 2, "bf16": 2,
    "float16": 2, "fp16": 2, "half": 2,
    "float8": 1, "fp8": 1,
}
"""Element size in bytes of each dtype name the CLI accepts."""


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of ``dtype`` (``bfloat16`` -> 2).  Raises ``KeyError`` for unknown names."""
    return DTYPE_BYTES[dtype.lower()]


_FACTOR_ONE = frozenset({"broadcast", "reduce", "isend", "irecv", "send", "recv", "barrier"})
_FACTOR_GATHER = frozenset({
    "all_gather", "reduce_scatter", "all_to_all", "all_gather_into_tensor", "reduce_scatter_tensor",
})


def busbw_factor(comm_type: str, group_size: int) -> float:
    """nccl-tests' bus-bandwidth factor for a collective over ``group_size`` ranks.

    all_reduce: 2(n-1)/n; all_gather, reduce_scatter, all_to_all: (n-1)/n (size = the whole
    gathered / pre-scatter / exchanged buffer); broadcast, reduce, send/recv: 1.  Anything that moves
    no data (computation, epoch markers) has factor 0.  ``comm_type`` is a CommType or its value.
    """
    name = getattr(comm_type, "value", comm_type)
    n = int(group_size or 1)
    if name == "all_reduce":
        return 2.0 * (n - 1) / n if n > 0 else 0.0
    if name in _FACTOR_GATHER:
        return (n - 1) / n if n > 0 else 0.0
    if name in _FACTOR_ONE:
        return 1.0
    return 0.0


def algbw(size_bytes: float, time_s: float, gib: bool = False) -> float:
    """Algorithm bandwidth in GB/s (``gib=True``: GiB/s) of ``size_bytes`` moved in ``time_s``."""
    if time_s <= 0:
        return float("nan")
    return size_bytes / time_s / (GIB if gib else GB)


def busbw(comm_type: str, size_bytes: float, time_s: float, group_size: int, gib: bool = False) -> float:
    """Bus bandwidth in GB/s (``gib=True``: GiB/s): ``algbw * busbw_factor(comm_type, n)``."""
    return algbw(size_bytes, time_s, gib) * busbw_factor(comm_type, group_size)


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b?)\s*$", re.IGNORECASE)
_SIZE_POWER = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def parse_size(text: str | int) -> int:
    """Bytes from a size like ``1048576``, ``1M``, ``512K``, ``1GiB`` or ``2GB``.

    As in nccl-tests' ``-b/-e`` flags, the suffixes K, M, G, T are binary (1K = 1024) whether or not
    an ``i`` or ``B`` follows.  Raises ``ValueError`` naming the text otherwise.
    """
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"size must not be negative: {text}")
        return text
    match = _SIZE_RE.match(str(text))
    if not match:
        raise ValueError(f"not a size: {text!r} (expected bytes such as 1048576, 64K, 1M, 2G)")
    value = float(match.group(1)) * (1024 ** _SIZE_POWER[match.group(2).lower()])
    if value != int(value):
        raise ValueError(f"not a whole number of bytes: {text!r}")
    return int(value)


def format_size(size_bytes: float) -> str:
    """Human size with binary units: ``16777216`` -> ``16 MiB``, ``1536`` -> ``1.5 KiB``, ``10`` -> ``10 B``."""
    size = float(size_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            text = f"{size:.2f}".rstrip("0").rstrip(".")
            return f"{text} {unit}"
        size /= 1024
    raise AssertionError("unreachable")

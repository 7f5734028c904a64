"""busbw factors and sizes, against values computed by hand."""

import math

import pytest

from utils.units import GB, GIB, algbw, busbw, busbw_factor, format_size, parse_size


@pytest.mark.parametrize("comm, n, factor", [
    ("all_reduce", 8, 2 * 7 / 8),      # 1.75
    ("all_reduce", 2, 1.0),            # 2*1/2
    ("all_gather", 8, 7 / 8),
    ("reduce_scatter", 4, 3 / 4),
    ("all_to_all", 16, 15 / 16),       # nccl-tests' (n-1)/n, not AICB's 1
    ("broadcast", 8, 1.0),
    ("reduce", 8, 1.0),
    ("isend", 2, 1.0),
    ("computation", 8, 0.0),
    ("all_reduce", 1, 0.0),            # a group of one moves nothing
])
def test_factors(comm, n, factor):
    assert busbw_factor(comm, n) == pytest.approx(factor)


def test_busbw_by_hand():
    # 1 GB all-reduced over 8 ranks in 10 ms: algbw = 1e9 / 0.01 / 1e9 = 100 GB/s, busbw = 175 GB/s
    assert algbw(1e9, 0.01) == pytest.approx(100.0)
    assert busbw("all_reduce", 1e9, 0.01, 8) == pytest.approx(175.0)
    # 64 MiB all-gathered over 4 ranks in 2 ms: algbw = 67108864/0.002/1e9 = 33.554432, busbw * 3/4
    assert busbw("all_gather", 64 * 2**20, 0.002, 4) == pytest.approx(33.554432 * 0.75)
    # GiB/s compatibility: the same transfer in AICB's unit
    assert algbw(GIB, 1.0, gib=True) == pytest.approx(1.0)
    assert GB == 10**9
    assert math.isnan(algbw(1, 0))


def test_sizes():
    assert parse_size("1M") == 1048576
    assert parse_size("64K") == 65536
    assert parse_size("1GiB") == 2**30
    assert parse_size("2G") == 2 * 2**30
    assert parse_size("4096") == 4096
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")
    assert format_size(16777216) == "16 MiB"
    assert format_size(1536) == "1.5 KiB"
    assert format_size(10) == "10 B"

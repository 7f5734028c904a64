"""Repeated work simulated once and scaled, exactly: the float sums, the block detection, and SimAI's
model on files that unroll ``ga`` micro-batches (compressed and unrolled runs give identical results).

The unrolled run is the same model with block detection switched off (every record costed and added
one by one, as before compression existed), so any difference is the compression's.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulator.simai.model as simai_model
from simulator.api import simulate
from simulator.options import SimAIOptions
from simulator.repeat import RepeatedLayers, find_blocks, repeat_segments, repeat_sum
from simulator.report import result_texts
from tests.conftest import EXAMPLES
from workload_generator.simai import SimAIHeader, SimAILayer, SimAIWorkload

EXAMPLE_OPTIONS = SimAIOptions(gpus=9216, gpus_per_server=8, nics_per_server=8, nvlink_bw=360, nic_busbw=48.5)


def loop_sum(total: float, addends: list[float], times: int) -> float:
    for _ in range(times):
        for a in addends:
            total += a
    return total


# ---- repeat_sum: the unrolled loop's double, bit for bit --------------------------------------

def test_repeat_sum_by_hand():
    # 0.1 is not a binary fraction: 10 additions give 0.9999999999999999, not 1.0, and the scaled
    # sum must round the same way (multiplication would give 1.0)
    assert repeat_sum(0.0, [0.1], 10) == loop_sum(0.0, [0.1], 10) == 0.9999999999999999
    assert 0.1 * 10 == 1.0
    # microseconds from integer nanoseconds, as SimAI's sums add them
    terms = [87890 / 1000.0, 1 / 1000.0, 1234567 / 1000.0, 0.0]
    assert repeat_sum(5.5, terms, 1600) == loop_sum(5.5, terms, 1600)
    assert repeat_sum(1.0, [], 100) == 1.0 and repeat_sum(1.0, [2.0], 0) == 1.0


def test_repeat_sum_with_ties_and_tiny_addends():
    # 2^-53 is half an ulp of 1.0: round-half-even makes 1.0 + 2^-53 == 1.0, but the same addend
    # moves an odd total; the scaled sum has to notice the tie and add such blocks one by one
    half = 2.0 ** -53
    assert repeat_sum(1.0, [half], 1000) == loop_sum(1.0, [half], 1000) == 1.0
    odd = 1.0 + 2.0 ** -52
    assert repeat_sum(odd, [half, 2.0 ** -52], 1000) == loop_sum(odd, [half, 2.0 ** -52], 1000)
    assert repeat_sum(1e16, [0.4], 10_000) == 1e16  # every addend rounds away


@settings(max_examples=300, deadline=None)
@given(start=st.floats(min_value=0.0, max_value=1e9, allow_nan=False),
       nanoseconds=st.lists(st.integers(min_value=0, max_value=10**10), min_size=1, max_size=6),
       times=st.integers(min_value=0, max_value=3000))
def test_repeat_sum_matches_the_loop_on_microsecond_sums(start, nanoseconds, times):
    addends = [ns / 1000.0 for ns in nanoseconds]
    assert repeat_sum(start, addends, times) == loop_sum(start, addends, times)


@settings(max_examples=300, deadline=None)
@given(start=st.floats(min_value=0.0, max_value=1e300, allow_nan=False, allow_infinity=False),
       addends=st.lists(st.floats(min_value=0.0, max_value=1e300, allow_nan=False, allow_infinity=False),
                        min_size=1, max_size=5),
       times=st.integers(min_value=0, max_value=2000))
def test_repeat_sum_matches_the_loop_on_any_doubles(start, addends, times):
    assert repeat_sum(start, addends, times) == loop_sum(start, addends, times)


def test_repeat_sum_falls_back_to_the_loop_for_negative_values():
    assert repeat_sum(1.0, [0.3, -0.1], 77) == loop_sum(1.0, [0.3, -0.1], 77)
    assert math.isnan(repeat_sum(1.0, [math.nan], 3))


# ---- blocks -----------------------------------------------------------------------------------

def test_segments_cut_the_micro_batch_blocks_and_keep_the_rest():
    names = ["grad", "embedding_layer", "a", "b", "embedding_layer", "a", "b", "loss"]
    assert find_blocks(names, 2) == (1, 3)
    seq = [(n, 1) for n in names]

    class Named(tuple):
        @property
        def name(self):
            return self[0]

    records = [Named(x) for x in seq]
    assert repeat_segments(records, 2) == [(0, 1, 1), (1, 3, 2), (7, 1, 1)]
    # a block whose records differ in anything but the name is not a repeat of the one before
    records[5] = Named(("a", 2))
    assert repeat_segments(records, 2) == [(0, 1, 1), (1, 3, 1), (4, 3, 1), (7, 1, 1)]
    three = [Named(x) for x in [("e", 0), ("e", 1), ("e", 1), ("e", 1)]]
    assert repeat_segments(three, 4, names=["embedding_layer"] * 4) == [(0, 1, 1), (1, 1, 3)]
    assert repeat_segments(records, 1) == [(0, 8, 1)] and repeat_segments([], 3) == []


def test_repeated_layers_behave_as_the_full_list():
    class Row(tuple):
        index = property(lambda self: self[0])

    parts = [([Row((0, "head"))], 1), ([Row((1, "a")), Row((2, "b"))], 3)]
    layers = RepeatedLayers(parts, lambda row, index: Row((index, row[1])))
    full = [(0, "head"), (1, "a"), (2, "b"), (3, "a"), (4, "b"), (5, "a"), (6, "b")]
    assert len(layers) == 7 and list(layers) == full and layers == full
    assert layers[4] == (4, "b") and layers[-1] == (6, "b") and layers[2:4] == [(2, "b"), (3, "a")]
    with pytest.raises(IndexError):
        layers[7]
    assert [(row[1], i) for row, i in layers.with_index()] == [(name, i) for i, name in full]


# ---- SimAI's model: compressed == unrolled -----------------------------------------------------

@pytest.fixture
def unrolled(monkeypatch):
    """Run SimAI's model with block detection off: every record costed and added one by one."""
    def run(workload, options):
        with monkeypatch.context() as patch:
            patch.setattr(simai_model, "repeat_segments", lambda seq, times: [(0, len(seq), 1)] if len(seq) else [])
            return simulate(workload, options)
    return run


def assert_identical(compressed, plain):
    assert isinstance(compressed.layers, RepeatedLayers)
    # repr: exact for every double, and NaN (a 0-byte column's algbw) equals NaN
    assert list(map(repr, compressed.layers)) == list(map(repr, plain.layers))
    assert compressed.totals == plain.totals  # every term, to the bit
    assert compressed.setup == plain.setup and compressed.warnings == plain.warnings
    assert result_texts(compressed, "x-") == result_texts(plain, "x-")


def test_a_hand_checked_file_compressed_and_unrolled(unrolled):
    # tp 2 on one 8-GPU server, dp 2, pp 2: per micro-batch an embedding record (1 us of compute) and a
    # layer with 3 + 5 + 7 us of compute and a 2 MiB TP all-reduce forward.  All-reduce of 2 MiB over
    # n = 2 at 360 GiB/s: 2/1024 GiB / 360 * 1e9 * 2 * 1/2 = 5425.347 -> 5425 ns, exposed whole (tp_o 0).
    block = [SimAILayer("embedding_layer", -1, 1000, "NONE", 0, 0, "NONE", 0, 0, "NONE", 0, 100),
             SimAILayer("layer", -1, 3000, "ALLREDUCE", 2 << 20, 5000, "NONE", 0, 7000, "NONE", 0, 100)]
    ga = 5
    header = SimAIHeader.transformer(tp=2, ep=1, pp=2, vpp=1, ga=ga, all_gpus=8, pp_comm=1024)
    workload = SimAIWorkload(header, block * ga, path="hand.txt")
    options = SimAIOptions(gpus=8, gpus_per_server=8, nics_per_server=8, nvlink_bw=360, nic_busbw=48.5)
    compressed, plain = simulate(workload, options), unrolled(workload, options)
    assert_identical(compressed, plain)
    # 5 micro-batches x (1 + 3 + 5 + 7) us of compute = 80 us; TP exposed 5 x 5.425 us = 27.125 us;
    # bubble = (per micro-batch 5.425 + 15 us, the embedding left out) x 5 x (pp-1) / (ga * vpp) = 20.425 us
    t = compressed.totals
    assert t.compute_us == pytest.approx(80.0, abs=1e-9)
    assert t.tp_exposed_us == pytest.approx(27.125, abs=1e-9)
    assert t.bubble_us == pytest.approx(20.425, abs=1e-9)
    assert [layer.index for layer in compressed.layers] == list(range(10))


def test_simai_example_compressed_and_unrolled(unrolled):
    # SimAI's own 1,789-record example: 6 step records, 24 micro-batch blocks of 74 records (the first
    # one's embedding differs: its weight-gradient compute), then 7 step records
    workload = SimAIWorkload.read(EXAMPLES / "simai_workload_analytical.txt", strict=False)
    assert repeat_segments(workload.records, 24) == [(0, 6, 1), (6, 74, 1), (80, 74, 23), (1782, 7, 1)]
    assert_identical(simulate(workload, EXAMPLE_OPTIONS), unrolled(workload, EXAMPLE_OPTIONS))


def test_simai_example_at_ga_160_compressed_and_unrolled(unrolled):
    workload = SimAIWorkload.read(EXAMPLES / "simai_workload_analytical.txt", strict=False)
    head, first, block, tail = (workload.records[:6], workload.records[6:80], workload.records[80:154],
                                workload.records[1782:])
    workload.header.ga = 160
    big = SimAIWorkload(workload.header, head + first + block * 159 + tail, path="ga160.txt")
    for options in (EXAMPLE_OPTIONS, SimAIOptions(gpus=9216, gpus_per_server=8, nics_per_server=8, nvlink_bw=360,
                                                  nic_busbw=48.5, dp_overlap=0.3, tp_overlap=0.6, ep_overlap=0.1)):
        assert_identical(simulate(big, options), unrolled(big, options))


def test_a_near_repeat_is_not_compressed(unrolled):
    workload = SimAIWorkload.read(EXAMPLES / "simai_workload_analytical.txt", strict=False)
    workload.records[6 + 74 * 5 + 3].fwd_compute_ns += 1  # one record of micro-batch 5 differs
    assert repeat_segments(workload.records, 24) == [(0, 6, 1), (6, 74, 1), (80, 74, 4), (376, 74, 1), (450, 74, 18),
                                                     (1782, 7, 1)]
    assert_identical(simulate(workload, EXAMPLE_OPTIONS), unrolled(workload, EXAMPLE_OPTIONS))

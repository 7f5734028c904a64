"""A SimAI workload of many records simulates in bounded memory (issue 21, item 11): the reader streams the
file and shares one record object per distinct line, the model keeps one result per distinct record and
adds the sums as it goes, and the result files are written in pieces.  Every result stays the same to
the bit; the memory figure for 10^6 records lives in bench/bench_sim_memory.py (no RSS or timing here)."""

from __future__ import annotations

import tracemalloc

import pytest

import simulator.report  # noqa: F401  (imported before any memory is traced)
import simulator.simai.model  # noqa: F401
from simulator.api import load_workload, simulate
from simulator.options import SimAIOptions
from simulator.report import _csv_cell, _end_to_end_row, write_files, write_results
from simulator.result import layer_rows
from tests.conftest import EXAMPLES
from utils.errors import FormatError
from workload_generator.simai import SimAIWorkload

EXAMPLE_OPTIONS = SimAIOptions(gpus=9216, gpus_per_server=8, nics_per_server=8, nvlink_bw=360, nic_busbw=48.5)
EXAMPLE = EXAMPLES / "simai_workload_analytical.txt"

# ---- the reader ---------------------------------------------------------------------------------


def test_shared_records_read_as_the_plain_ones_and_simulate_alike():
    plain = SimAIWorkload.read(EXAMPLE, strict=False)
    shared = SimAIWorkload.read(EXAMPLE, strict=False, share=True)
    assert shared.records == plain.records and shared.header == plain.header and shared.warnings == plain.warnings
    # one object per distinct record line (the file's 1,789 lines hold far fewer texts)
    lines = EXAMPLE.read_text().splitlines()[2:]
    assert len({id(r) for r in shared.records}) == len(set(lines)) < len(lines)
    assert len({id(r) for r in plain.records}) == len(lines)
    a, b = simulate(plain, EXAMPLE_OPTIONS), simulate(shared, EXAMPLE_OPTIONS)
    assert list(map(repr, a.layers)) == list(map(repr, b.layers))  # repr: exact doubles, NaN == NaN
    assert a.totals == b.totals and a.warnings == b.warnings


def test_the_simulator_reads_with_shared_records():
    workload = load_workload(EXAMPLE)
    assert len({id(r) for r in workload.records}) < len(workload.records) == 1789


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_streamed_reading_splits_lines_as_the_whole_text_does(tmp_path, newline):
    # line ends as written; a form feed and a file separator, which str.splitlines() also breaks lines at
    # (after a record, and inside a record that a lenient read joins over two lines); blank lines
    lines = ["HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 1 vpp: 1 ga: 1", "3",
             "a\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tNONE\t0\t100\x0c", "", "b -1 1 NONE 0 1\x1cNONE 0 1 NONE 0 100",
             "a\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tNONE\t0\t100"]
    text = newline.join(lines) + newline
    path = tmp_path / "w.txt"
    path.write_bytes(text.encode())
    read, loaded = SimAIWorkload.read(path, strict=False, share=True), SimAIWorkload.loads(text, str(path), strict=False)
    assert (read.header, read.records, read.warnings) == (loaded.header, loaded.records, loaded.warnings)
    assert [r.name for r in read.records] == ["a", "b", "a"] and read.records[0] is read.records[2]


def test_streamed_reading_names_the_file_for_bad_bytes_and_missing_files(tmp_path):
    path = tmp_path / "w.txt"
    path.write_bytes(b"HYBRID_TRANSFORMER model_parallel_NPU_group: 2\n1\n" + b"x" * 100_000 + b"\xff\n")
    with pytest.raises(FormatError, match="not a text file") as info:
        SimAIWorkload.read(path)
    assert str(path) in str(info.value)
    with pytest.raises(FormatError, match="cannot read"):
        SimAIWorkload.read(tmp_path / "missing.txt")


# ---- 19,996 records by hand ------------------------------------------------------------------------

HEADER = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 8 ep: 1 pp: 2 vpp: 1 ga: {ga} all_gpus: 64 "
          "checkpoints: 0 checkpoint_initiates: 0 pp_comm: 0")
EMBEDDING = "embedding_layer\t-1\t1000\tNONE\t0\t1000\tNONE\t0\t1000\tNONE\t0\t100"
ATTENTION = "attention_layer\t-1\t2000\tALLREDUCE\t65536\t4000\tALLREDUCE\t65536\t1000\tNONE\t0\t100"
MLP = "mlp_layer\t-1\t3000\tNONE\t0\t6000\tNONE\t0\t5000\tALLREDUCE\t65536\t100"
OPTIONS = SimAIOptions(gpus=64, gpus_per_server=8, nics_per_server=8)


@pytest.fixture
def twenty_thousand(tmp_path):
    """4 micro-batch blocks of 4,999 records (an embedding, then 2,499 attention + mlp pairs), with the
    header's ga 4 (the blocks are found and costed once) or ga 1 (every record walked one by one)."""
    def write(ga: int):
        block = [EMBEDDING] + [ATTENTION, MLP] * 2499
        path = tmp_path / f"w_ga{ga}.txt"
        path.write_text("\n".join([HEADER.format(ga=ga), str(4 * len(block)), *block * 4, ""]))
        return path
    return write


@pytest.mark.parametrize("ga, bubble_us", [(4, 127_449.0), (1, 509_796.0)])
def test_about_twenty_thousand_records_by_hand(twenty_thousand, tmp_path, ga, bubble_us):
    # tp 8 inside one 8-GPU server, pp 2, dp 64 / (8 * 2) = 4; every message is 64 KiB (< 1 MiB), so it
    # costs SimAI's fixed latency: 15 us for the TP group of 8, 12 us for the DP group of 4; nothing overlaps.
    #   embedding: compute 1 + 1 + 1 = 3 us, no comm, left out of the bubble
    #   attention: compute 2 + 4 + 1 = 7 us, TP fwd 15 + ig 15 = 30 us, bubble (15 + 2 + 1 + 4 + 15) = 37 us
    #   mlp:       compute 3 + 6 + 5 = 14 us, DP wg 12 us,               bubble (3 + 5 + 6) = 14 us
    # per block (2,499 pairs): compute 3 + 2499 * 21 = 52,482; TP 2499 * 30 = 74,970; DP 2499 * 12 = 29,988;
    # bubble accumulator 2499 * 51 = 127,449.  Four blocks: compute 209,928, TP 299,880, DP 119,952,
    # exposed 419,832, accumulator 509,796; bubble = 509,796 * (pp - 1) / (ga * vpp): 127,449 at ga 4,
    # 509,796 at ga 1.  Every addend is a whole number of us, so every sum is exact.
    path = twenty_thousand(ga)
    tracemalloc.start()
    try:
        result = simulate(path, OPTIONS)
        paths = write_results(result, str(tmp_path / "out-"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    t = result.totals
    assert (t.compute_us, t.tp_exposed_us, t.dp_exposed_us, t.exposed_comm_us) == (209_928.0, 299_880.0, 119_952.0,
                                                                                   419_832.0)
    assert (t.ep_exposed_us, t.dp_ep_exposed_us, t.pp_exposed_us) == (0.0, 0.0, 0.0)
    assert t.bubble_us == bubble_us and t.total_us == 209_928.0 + 419_832.0 + bubble_us
    assert len(result.layers) == 4 * (1 + 2 * 2499) == 19_996 and result.warnings == []
    assert [(layer.index, layer.name) for layer in result.layers[4_998:5_001]] == [
        (4_998, "mlp_layer"), (4_999, "embedding_layer"), (5_000, "attention_layer")]
    # the files, written in pieces, hold every record's row as the per-record tables give it
    end_to_end, layers_csv = (open(p).read() for p in paths)
    rows = layer_rows(result)
    assert layers_csv == "".join(",".join(map(_csv_cell, row)) + "\n" for row in rows)
    assert end_to_end.splitlines()[3:] == [_end_to_end_row(layer) for layer in result.layers]
    assert end_to_end.endswith("\n") and len(end_to_end.splitlines()) == 3 + 19_996
    # Memory traced by Python (deterministic, unlike RSS): before the streaming reader and writer this run
    # traced 12.6 MiB (ga 4) and 20.9 MiB (ga 1) at its peak, now about 2 MiB: records, results and texts
    # are no longer held per record.  The bound leaves three times the room.
    assert peak < 6 * 2**20


def test_a_failing_piece_leaves_no_file(tmp_path):
    def pieces():
        yield "a row\n"
        raise ValueError("made while writing")

    with pytest.raises(ValueError, match="made while writing"):
        write_files({str(tmp_path / "a.csv"): "whole text\n", str(tmp_path / "b.csv"): pieces()})
    assert list(tmp_path.iterdir()) == []

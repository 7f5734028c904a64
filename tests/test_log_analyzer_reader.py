"""The analysis readers (issue 21): the chunked log reader takes exactly what the workload reader takes,
bad numbers in logs, detail files and simulator results end with one line naming the file, line and
column (exit status 2), a detail file that cannot be used is left out with a warning, and a log table
is compact (categoricals, no string per row)."""

from __future__ import annotations

import os
import re
import tempfile

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from log_analyzer import Log
from log_analyzer.frames import CHUNK_ROWS, _items_frame, read_items
from log_analyzer.log import DetailWarning, detail_path
from log_analyzer.report import build_report
from tests.conftest import run_cli
from tests.test_log_analyzer_plots import SMALL_LOG, end_to_end, write_small_log
from utils.errors import FormatError
from utils.workload import CSV_COLUMNS, Workload

HEADER = ",".join(CSV_COLUMNS)
GOOD = "CommType.all_reduce,CommGroup.dp_group,8,1048576,step.grad,None,None,,1.5,0.7,1.2,1"


def outcome(load, path):
    """What a reader makes of a file: ("ok", tables) or ("error", the message)."""
    try:
        return "ok", load(path)
    except FormatError as exc:
        return "error", str(exc)


def same_as_the_workload_reader(path: str) -> None:
    kind, ours = outcome(read_items, path)
    reference = outcome(lambda p: _items_frame(Workload.load(p).items), path)
    assert kind == reference[0], (ours, reference[1])
    if kind == "error":
        assert ours == reference[1]
    else:
        for mine, theirs in zip(ours, reference[1]):
            pd.testing.assert_frame_equal(mine, theirs)


_CELLS = {
    "comm_type": ["CommType.all_reduce", "CommType.epoch_end", "CommType.computation", "CommType.isend", "all_gather",
                  "CommType.bogus", "CommType.barrier"],
    "comm_group": ["CommGroup.dp_group", "CommGroup.tp_group", "None", "", "CommGroup.all", "CommGroup.nope"],
    "comm_group_size": ["8", "2", "None", "-1", "0", "NaN", "99999999999999999999", " 4 "],
    "msg_size": ["1048576", "0", "None", "8192.0", "((4 1) (1 4))", '"((4096, 1, 5120), (5120, 7680))"', "-8", "1e3",
                 "99999999999999999999", "12ab"],
    "stage": ["step", "", " fwd ", '"a,b"', "init.barrier"],
    "dst": ["None", "0", "3", "-1", "-2", "x"],
    "src": ["None", "1", "-1", "1.5"],
    "additional": ["", "send_next", "recv_prev", "None"],
    "_elapsed_time": ["1.5", "0", "None", "-1", "nan", "-3.0", "inf", "1e400", "99999999999999999999", "1e19", "abc",
                      " 2.5 ", "1_0", "0.30000000000000004"],
    "algbw": ["0.7", "None", "-1", "NaN", "-0.5"],
    "busbw": ["1.2", "None", "inf", "3e-5"],
    "count": ["1", "2", "None", "0", "-1", "1.0"],
}
_ROW = st.fixed_dictionaries({c: st.sampled_from(v) for c, v in _CELLS.items()}).map(lambda r: ",".join(r.values()))
_LINES = st.lists(st.one_of(_ROW, _ROW, _ROW, st.just(GOOD), st.just(""), st.just("   "), st.just(GOOD + ",extra"),
                            st.just("CommType.all_reduce,CommGroup.dp_group,8")), max_size=8)


@settings(max_examples=150, deadline=None)
@given(_LINES, st.booleans(), st.booleans())
def test_the_chunked_reader_agrees_with_the_workload_reader(lines, legacy, crlf):
    # the same file is accepted with the same table, or refused with the same one line (file, line, column)
    text = ("[rank0 ~ rank7]\n" if legacy else "") + "\n".join([HEADER, *lines]) + "\n"
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "x_log.csv")
        with open(path, "w", newline="") as handle:
            handle.write(text.replace("\n", "\r\n") if crlf else text)
        same_as_the_workload_reader(path)


def test_chunks_join_up(tmp_path):
    # more rows than one chunk, a blank line and a quoted stage in the second chunk, an error past the first chunk
    epoch = "CommType.epoch_end,None,None,0,,None,None,,9.5,None,None,1"
    rows = [GOOD] * (CHUNK_ROWS + 5) + ["", GOOD.replace("step.grad", '"a,b"'), epoch]
    path = tmp_path / "big_log.csv"
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    same_as_the_workload_reader(str(path))
    items, epochs = read_items(path)
    assert len(items) == CHUNK_ROWS + 6 and items["stage"].iloc[-1] == "a,b" and list(epochs["time_ms"]) == [9.5]
    rows[CHUNK_ROWS + 2] = GOOD.replace("1.5,", "-1.5,")
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    # the header is line 1, so row k (0-based) is line k + 2
    with pytest.raises(FormatError, match=rf"big_log.csv:{CHUNK_ROWS + 4}: _elapsed_time: expected a non-negative"):
        read_items(path)
    same_as_the_workload_reader(str(path))


@pytest.mark.parametrize("row, message", [
    (GOOD.replace("1.5,", "nan,"), r":3: _elapsed_time: expected a non-negative number or None; got 'nan'"),
    (GOOD.replace("1.5,", "-2.5,"), r":3: _elapsed_time: expected a non-negative number or None; got '-2.5'"),
    (GOOD.replace(",1.2,", ",-1.2,"), r":3: busbw: expected a non-negative number or None; got '-1.2'"),
    (GOOD.replace("1048576", "99999999999999999999"), r":3: msg_size: expected a byte count"),
    (GOOD.replace(",8,", ",9223372036854775808,"), r":3: comm_group_size: expected a positive integer or None"),
    (GOOD[:-1] + "0", r":3: count: expected a positive integer; got '0'"),
])
def test_bad_numbers_in_a_log_are_one_line_with_exit_2(tmp_path, row, message):
    a = write_small_log(tmp_path / "a_log.csv", detail=False)
    bad = tmp_path / "b_log.csv"
    bad.write_text(f"{HEADER}\n{GOOD}\n{row}\nCommType.epoch_end,None,None,0,,None,None,,5.0,None,None,1\n")
    for args in (["compare", a, str(bad)], ["report", str(bad), "-o", str(tmp_path / "r.html")]):
        proc = run_cli("-m", "log_analyzer", *args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith(f"log_analyzer: error: {bad}:")
        assert re.search(message, proc.stderr), proc.stderr
    assert not (tmp_path / "r.html").exists()


# ---- the detail file -------------------------------------------------------------------------------------

def detail_text(path: str) -> str:
    return open(detail_path(path)).read()


@pytest.mark.parametrize("name, change, message", [
    ("empty", lambda text: "", r"x_detail.csv: empty file"),
    ("header only", lambda text: text.splitlines()[0] + "\n", None),
    ("no comm_type", lambda text: text.replace("comm_type,", "kind,", 1), r"x_detail.csv:1: header lacks column\(s\) comm_type"),
    ("negative time", lambda text: text.replace(",5.5,3,", ",-5.5,3,", 1), r"x_detail.csv:2: max_elapsed_ms: expected a "
                                                                           r"non-negative number or nothing; got '-5.5'"),
    ("NaN time", lambda text: text.replace(",5.5,3,", ",nan,3,", 1), r"x_detail.csv:2: max_elapsed_ms: .* got 'nan'"),
    ("rank past 2^63", lambda text: text.replace(",5.5,3,", ",5.5,99999999999999999999,", 1),
     r"x_detail.csv:2: slowest_rank: expected a non-negative integer or nothing; got '99999999999999999999'"),
    ("bad emulated", lambda text: text.replace(",False,", ",maybe,", 1), r"x_detail.csv:2: emulated: expected True, False"),
    ("another log's", lambda text: text + "99,0,0,all_reduce,,,,,1,,,1,0,1,0,1,,False,,\n",
     r"x_detail.csv:16: row: holds row 99 but the log has 14 rows: it is not this log's detail file"),
    ("another operation", lambda text: text.replace("\n0,0,0,all_reduce,", "\n0,0,0,all_gather,", 1),
     r"x_detail.csv:2: comm_type: row 0 is all_gather here but all_reduce in the log"),
    ("a row twice", lambda text: text + text.splitlines()[1] + "\n", r"x_detail.csv:16: row: row 0 appears twice"),
])
def test_a_detail_file_that_cannot_be_used_is_left_out_with_a_warning(tmp_path, capsys, name, change, message):
    # issue 21 item 8: the log is good, so the analysis goes on without the detail file and says why in one
    # line naming it (the detail file is the run's by-product; every measurement is in the log)
    log_path = write_small_log(tmp_path / "x_log.csv")
    text = detail_text(log_path)
    with open(detail_path(log_path), "w") as handle:
        handle.write(change(text))
    if message is None:   # a header and no rows (a run stopped before its first row): nothing joined, no warning
        log = Log.load(log_path)
        assert log.detail_path is not None and log.items["slowest_rank"].isna().all() and log.warnings == []
        return
    with pytest.warns(DetailWarning, match=message):
        log = Log.load(log_path)
    assert log.detail_path is None and "slowest_rank" not in log.items.columns and len(log.warnings) == 1
    # the iterations are still there: iteration 1 logs AR 1 + 2 + 3 ms and the p2p batch's 4 ms once (found in the log)
    assert list(log.iterations["comm_ms"]) == [5.0, 10.0, 4.5]
    with pytest.warns(DetailWarning):
        page = build_report(log_path)
    assert "x_detail.csv" in page and "the log is read without it" in page
    # named by the caller, the file is an input that was asked for: its error is raised
    with pytest.raises(FormatError, match=message):
        Log.load(log_path, detail=detail_path(log_path))
    proc = run_cli("-m", "log_analyzer", "report", log_path, "-o", str(tmp_path / "r.html"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("log_analyzer: warning: ") and "Traceback" not in proc.stderr
    assert re.search(message, proc.stderr) and (tmp_path / "r.html").exists()


def test_a_detail_file_cut_short_joins_what_it_has(tmp_path):
    # a run stopped while writing the detail file: the rows it has are joined, the others are unknown
    log_path = write_small_log(tmp_path / "x_log.csv")
    lines = detail_text(log_path).splitlines()
    with open(detail_path(log_path), "w") as handle:
        handle.write("\n".join(lines[:4]) + "\n")   # the header and rows 0-2: AR, epoch_end, AR
    log = Log.load(log_path)
    # rows 0 and 2 are the first two of the 11 items; row 1 is iteration 0's epoch_end: its slowest rank took 6 + 1 ms
    assert log.warnings == [] and log.items["slowest_rank"].notna().tolist() == [True, True] + [False] * 9
    assert log.iterations["max_time_ms"].tolist()[0] == 7.0 and log.iterations["max_time_ms"].isna().tolist() == [
        False, True, True]


def test_detail_columns_are_compact(tmp_path):
    log = Log.load(write_small_log(tmp_path / "x_log.csv"))
    assert str(log.items["slowest_rank"].dtype) == "Int32" and str(log.items["emulated"].dtype) == "boolean"
    assert str(log.items["max_elapsed_ms"].dtype) == "float64" and str(log.items["item_index"].dtype) == "Int64"


# ---- simulator results ------------------------------------------------------------------------------------

@pytest.mark.parametrize("old, new, message", [
    ("200 (20.00%)", "-200 (20.00%)", r"run-EndToEnd.csv:2: Expose TP comm: expected 'microseconds \(share%\)'"),
    ("200 (20.00%)", "nan (20.00%)", r"run-EndToEnd.csv:2: Expose TP comm: expected"),
    ("attention,Analytical_test,100,", "attention,Analytical_test,-100,",
     r"run-EndToEnd.csv:4: fwd compute: expected a non-negative finite number of microseconds, got '-100'"),
    ("60,-nan,0.00\n", "60,-nan,-3.00\n", r"run-EndToEnd.csv:4: ig busbw: expected a non-negative bandwidth"),
])
def test_bad_times_in_a_simulation_result_are_refused(tmp_path, old, new, message):
    path = end_to_end(tmp_path / "run-EndToEnd.csv")
    text = open(path).read()
    assert old in text
    with open(path, "w") as handle:
        handle.write(text.replace(old, new, 1))
    proc = run_cli("-m", "log_analyzer", "report", path, "-o", str(tmp_path / "r.html"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert re.search(message, proc.stderr), proc.stderr


def test_bad_cells_in_our_simulator_tables_are_refused(tmp_path):
    stages = ("stage,compute_us,tp_exposed_us,ep_exposed_us,dp_exposed_us,dp_ep_exposed_us,pp_exposed_us,other_exposed_us,"
              "bubble_us,end_us\n")
    cases = [
        ("0,100,1,0,0,0,0,0,5,106\n1,-100,1,0,0,0,0,0,5,106\n", r"topo_stages.csv:3: compute_us: expected a non-negative finite"),
        ("0,100,nan,0,0,0,0,0,5,106\n", r"topo_stages.csv:2: tp_exposed_us: expected a non-negative finite"),
        ("18446744073709551616,100,1,0,0,0,0,0,5,106\n", r"topo_stages.csv:2: stage: expected a non-negative integer"),
    ]
    for rows, message in cases:
        path = tmp_path / "run-topo_stages.csv"
        path.write_text(stages + rows)
        proc = run_cli("-m", "log_analyzer", "report", str(path), "-o", str(tmp_path / "r.html"))
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert re.search(message, proc.stderr), proc.stderr


# ---- memory ---------------------------------------------------------------------------------------------------

def test_a_log_table_is_compact(tmp_path):
    # issue 21 item 11: text columns are categoricals (one code per row, not a string), so a log of a few
    # thousand rows takes under 120 bytes a row: row and iteration 8 + 8, type and group 1 + 1, group size,
    # size, dst, src, count 9 each (nullable), shapes, stage, additional codes 1-2 each, three floats 24
    rows = (SMALL_LOG[2:9]) * 500
    log = Log.load(write_small_log(tmp_path / "m_log.csv", rows, detail=False))
    for column in ("comm_type", "comm_group", "stage", "shapes", "additional"):
        assert str(log.items[column].dtype) == "category", column
    per_row = log.items.memory_usage(deep=True).sum() / len(log.items)
    assert per_row < 120, per_row


def test_measured_is_a_slice_not_a_copy(tmp_path):
    log = Log.load(write_small_log(tmp_path / "x_log.csv"))
    measured = log.measured
    assert list(measured["iteration"].unique()) == [1, 2] and measured.index[0] == 1
    assert list(measured["row"]) == [2, 3, 4, 5, 6, 7, 9, 10, 11, 12]

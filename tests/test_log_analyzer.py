"""log_analyzer: the log CSV (docs/formats.md section 5) written and read back, the typed tables, the
summaries with numbers worked out by hand, and no torch on the way."""

from __future__ import annotations

import math
import subprocess
import sys

import pandas as pd
import pytest

from log_analyzer import Log, LogWriter, Workload, comm_summary, iteration_stats, sweep_summary, write_detail
from log_analyzer.log import DETAIL_COLUMNS, DetailWarning, detail_path
from log_analyzer.summary import format_comm_summary, format_iteration_stats, format_sweep
from tests.conftest import ROOT
from utils.errors import FormatError
from utils.workload import CSV_COLUMNS, CommGroup, CommType, WorkItem

HEADER = ",".join(CSV_COLUMNS)
AR = WorkItem(CommType.all_reduce, CommGroup.tp_group, 2, 1000, "forward.x")
GEMM = WorkItem(CommType.computation, stage="forward.linear", shapes=((64, 1, 256), (256, 384)))


def write_log(path, iterations: list[list[tuple[WorkItem, float]]], epoch_ms: list[float], crash: bool = False) -> None:
    with LogWriter(path) as log:
        for block, ms in zip(iterations, epoch_ms + [None]):
            for item, elapsed in block:
                bw = item.msg_size / (elapsed / 1e3) / 1e9 if item.is_comm else None
                log.write(item, elapsed, bw, bw if bw is None else bw * 2 * (2 - 1) / 2)
            if ms is not None:
                log.write_epoch_end(ms)


def test_writer_speaks_formats_section_5(tmp_path):
    path = tmp_path / "x_log.csv"
    log = LogWriter(path)
    log.write(AR, 0.5, 2.0, 2.0)
    # flushed at once: a rank killed now keeps the row
    assert path.read_text() == (f"{HEADER}\nCommType.all_reduce,CommGroup.tp_group,2,1000,forward.x,None,None,,0.5,2.0,"
                                "2.0,1\n")
    log.write(GEMM, 0.25)
    log.write_epoch_end(12.5)
    log.close()
    lines = path.read_text().splitlines()
    assert lines[2] == "CommType.computation,None,None,((64 1 256) (256 384)),forward.linear,None,None,,0.25,None,None,1"
    assert lines[3] == "CommType.epoch_end,None,None,0,,None,None,,12.5,None,None,1"
    # the log is an AICB workload CSV too (same 12 columns): our reader and AICB's tools load it
    items = Workload.load(path).items
    assert [i.comm_type for i in items] == [CommType.all_reduce, CommType.computation, CommType.epoch_end]


def test_log_tables_are_typed_and_split(tmp_path):
    path = tmp_path / "x_log.csv"
    # init: one all-reduce of 1 ms; iterations 1 and 2: all-reduce + GEMM
    write_log(path, [[(AR, 1.0)], [(AR, 2.0), (GEMM, 0.5)], [(AR, 4.0), (GEMM, 0.5)]], [3.0, 10.0, 20.0])
    log = Log.load(path)
    assert list(log.items["iteration"]) == [0, 1, 1, 2, 2]
    assert str(log.items["comm_group_size"].dtype) == "Int64" and str(log.items["elapsed_ms"].dtype) == "float64"
    assert list(log.items["comm_type"].astype(str)) == ["all_reduce", "all_reduce", "computation", "all_reduce", "computation"]
    assert log.items["shapes"].iloc[2] == "((64 1 256) (256 384))" and pd.isna(log.items["shapes"].iloc[0])
    assert log.items["msg_size"].iloc[2] == 0
    it = log.iterations
    assert list(it["time_ms"]) == [3.0, 10.0, 20.0]
    assert list(it["comm_ms"]) == [1.0, 2.0, 4.0] and list(it["compute_ms"]) == [0.0, 0.5, 0.5]
    assert list(it["ops"]) == [1, 2, 2]
    assert log.epoch_times.to_dict() == {0: 3.0, 1: 10.0, 2: 20.0}
    assert len(log.measured) == 4 and log.detail_path is None


def test_a_crashed_log_keeps_its_rows(tmp_path):
    path = tmp_path / "x_log.csv"
    write_log(path, [[(AR, 1.0)], [(AR, 2.0), (AR, 3.0)]], [3.0])  # iteration 1 never ended
    log = Log.load(path)
    assert list(log.items["iteration"]) == [0, 1, 1]
    assert math.isnan(log.iterations["time_ms"].iloc[1]) and log.iterations["ops"].iloc[1] == 2
    assert list(log.epoch_times.index) == [0]


def test_detail_file_joins_by_row(tmp_path):
    path = tmp_path / "x_log.csv"
    write_log(path, [[(AR, 1.0)], [(AR, 2.0)]], [3.0, 10.0])
    rows = [
        {"row": 0, "iteration": 0, "item_index": 0, "comm_type": "all_reduce", "elapsed_ms": 1.0, "max_elapsed_ms": 1.5,
         "slowest_rank": 1, "ranks_timed": 2, "emulated": False},
        {"row": 1, "iteration": 0, "comm_type": "epoch_end", "elapsed_ms": 3.0, "max_elapsed_ms": 3.5, "slowest_rank": 1},
        {"row": 2, "iteration": 1, "item_index": 2, "comm_type": "all_reduce", "elapsed_ms": 2.0, "max_elapsed_ms": 2.0,
         "slowest_rank": 0, "ranks_timed": 2, "emulated": True, "batch": None},
        {"row": 3, "iteration": 1, "comm_type": "epoch_end", "elapsed_ms": 10.0, "max_elapsed_ms": 11.0, "slowest_rank": 3},
    ]
    write_detail(detail_path(path), rows)
    assert (tmp_path / "x_detail.csv").read_text().splitlines()[0] == ",".join(DETAIL_COLUMNS)
    log = Log.load(path)
    assert log.detail_path == str(tmp_path / "x_detail.csv")
    assert list(log.items["slowest_rank"]) == [1, 0] and list(log.items["max_elapsed_ms"]) == [1.5, 2.0]
    assert list(log.items["emulated"]) == [False, True]
    assert list(log.iterations["max_time_ms"]) == [3.5, 11.0] and list(log.iterations["slowest_rank"]) == [1, 3]
    stats = log.iteration_stats()
    assert stats.init_ms == 3.0 and stats.count == 1 and stats.slowest_rank_max_ms == 11.0


def test_iteration_stats_by_hand():
    stats = iteration_stats([10.0, 20.0, 30.0, 40.0])
    # mean 25; p90 by linear interpolation: position 0.9 x 3 = 2.7 -> 30 + 0.7 x 10 = 37;
    # population std: sqrt((225 + 25 + 25 + 225) / 4) = sqrt(125)
    assert (stats.count, stats.mean_ms, stats.max_ms, stats.min_ms) == (4, 25.0, 40.0, 10.0)
    assert math.isclose(stats.p90_ms, 37.0) and math.isclose(stats.std_ms, math.sqrt(125))
    assert "init (ms)" in format_iteration_stats(stats)
    assert iteration_stats([]).count == 0


def test_comm_summary_by_hand():
    items = pd.DataFrame({
        "iteration": [1, 1, 2, 1], "comm_type": ["all_reduce", "all_reduce", "all_reduce", "computation"],
        "comm_group": ["tp_group"] * 3 + [None], "msg_size": [1000, 1000, 1000, 0],
        "elapsed_ms": [1.0, 2.0, 3.0, 9.0], "busbw_gbps": [3.0, 2.0, 1.0, None],
        "max_elapsed_ms": [1.5, 2.5, 3.5, 9.0], "slowest_rank": pd.array([1, 1, 0, pd.NA], dtype="Int64"),
        "emulated": [False, False, True, False],
    })
    summary = comm_summary(items)
    assert len(summary) == 1   # computation rows are not communication
    row = summary.iloc[0]
    # times 1, 2, 3 ms: mean 2, population std sqrt(2/3); busbw 3, 2, 1 GB/s likewise
    assert (row["count"], row.time_mean_ms, row.busbw_mean_gbps) == (3, 2.0, 2.0)
    assert math.isclose(row.time_std_ms, math.sqrt(2 / 3)) and math.isclose(row.busbw_std_gbps, math.sqrt(2 / 3))
    assert (row.max_time_ms, row.slowest_rank, row.emulated) == (3.5, 1, True)   # rank 1 was slowest twice
    text = format_comm_summary(summary)
    assert "all_reduce*" in text and "2.000 ± 0.816" in text and "emulated" in text


def test_a_workload_loaded_as_a_log_summarises_without_warnings():
    """AICB's Log.load takes a workload CSV (no times): comm_summary warned 'All-NaN slice encountered' in a
    notebook for every row, from numpy's nanmax of the absent times."""
    import warnings

    log = Log.load(ROOT / "tests" / "data" / "examples" / "aicb_workload_L7B_megatron_tp2_pp1_mbs1.csv")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = log.comm_summary()
    assert len(table) and table["max_time_ms"].isna().all()


def test_a_detail_csv_is_named_as_such_where_a_log_or_workload_is_read(tmp_path):
    """Before: Log.load of a *_detail.csv (a tab completion away from the log) loaded it with every time NaN, and
    aicb.py --workload of one failed on a p2p row 'needs its peer (dst)': its header has the columns a workload
    requires.  Both now say what the file is."""
    from utils.workload import Workload as Items

    detail = tmp_path / "x_detail.csv"
    detail.write_text(",".join(DETAIL_COLUMNS) + "\n")
    for load in (Log.load, Items.load):
        with pytest.raises(FormatError, match=r"x_detail.csv:1: this is a replay's detail CSV: give the \*_log.csv"):
            load(detail)


def test_a_log_saved_with_a_byte_order_mark_loads(tmp_path):
    """A log opened and saved again in Excel ("CSV UTF-8") starts with a byte-order mark: Log.load and the CLI's
    kind detection refused it ('header lacks column(s) comm_type', 'unrecognised header')."""
    from log_analyzer import detect_kind

    log = tmp_path / "x_log.csv"
    with LogWriter(log) as writer:
        writer.write(WorkItem(CommType.all_reduce, CommGroup.dp_group, 2, 1024, "a"), 1.0, 1.0, 1.0)
        writer.write_epoch_end(2.0)
    marked = tmp_path / "excel_log.csv"
    marked.write_bytes(b"\xef\xbb\xbf" + log.read_bytes())
    assert detect_kind(marked) == "log"
    assert Log.load(marked).items.equals(Log.load(log).items)


def test_sweep_summary_uses_the_bandwidth_of_the_mean_time():
    items = pd.DataFrame({
        "iteration": [1, 1, 2, 2], "comm_type": ["all_reduce"] * 4, "msg_size": [1_000_000] * 2 + [2_000_000] * 2,
        "elapsed_ms": [1.0, 3.0, 2.0, 2.0], "algbw_gbps": [1.0, 1 / 3, 1.0, 1.0], "busbw_gbps": [1.5, 0.5, 1.5, 1.5],
    })
    sweep = sweep_summary(items)
    # 1 MB in a mean of 2 ms: algbw 0.5 GB/s (not the mean of 1 and 1/3); busbw x 1.5 (all-reduce over 4 ranks)
    assert list(sweep["msg_size"]) == [1_000_000, 2_000_000]
    assert math.isclose(sweep["algbw_gbps"][0], 0.5) and math.isclose(sweep["busbw_gbps"][0], 0.75)
    assert math.isclose(sweep["time_mean_us"][1], 2000.0)
    assert "busbw (GB/s)" in format_sweep(sweep, "all_reduce", 4)


def test_an_aicb_log_loads(tmp_path):
    # AICB's own log: the same 12 columns, sizes sometimes written as floats, empty additional
    path = tmp_path / "aicb_log.csv"
    path.write_text(f"{HEADER}\n"
                    "CommType.all_reduce,CommGroup.dp_group,8,8192.0,step,None,None,None,0.25,0.03,0.05,1\n"
                    "CommType.epoch_end,None,None,0,,None,None,None,5.0,None,None,1\n")
    log = Log.load(path)
    assert log.items["msg_size"].iloc[0] == 8192 and log.items["comm_group"].iloc[0] == "dp_group"
    assert log.epoch_times.to_dict() == {0: 5.0}


def test_bad_logs_name_the_file_and_line(tmp_path):
    path = tmp_path / "bad_log.csv"
    path.write_text(f"{HEADER}\nCommType.all_reduce,CommGroup.tp_group,two,8,x,None,None,,1.0,None,None,1\n")
    with pytest.raises(FormatError, match=r"bad_log.csv:2: comm_group_size"):
        Log.load(path)
    with pytest.raises(FormatError, match="cannot read"):
        Log.load(tmp_path / "missing_log.csv")
    write_log(tmp_path / "y_log.csv", [[(AR, 1.0)]], [2.0])
    (tmp_path / "y_detail.csv").write_text("row,iteration\n0,0\n")
    # a detail file found beside the log is left out with a warning; one the caller names is an error
    with pytest.warns(DetailWarning, match="y_detail.csv:1: header lacks column"):
        assert Log.load(tmp_path / "y_log.csv").detail_path is None
    with pytest.raises(FormatError, match="y_detail.csv:1: header lacks column"):
        Log.load(tmp_path / "y_log.csv", detail=tmp_path / "y_detail.csv")


def test_log_analyzer_needs_no_torch():
    code = ("import sys; import log_analyzer; from log_analyzer import Log, Workload; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr

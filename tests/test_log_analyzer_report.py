"""log_analyzer.report, compare and ``python -m log_analyzer``: the numbers in the report tables against
the small logs of tests/test_log_analyzer_plots.py worked out by hand, a self-contained page (no
network, no script, images that decode), the file kinds told apart, one-line errors with exit status 2
and nothing written, and the page opened in headless chromium when the machine has it."""

from __future__ import annotations

import base64
import math
import os
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from log_analyzer import Log, SimResult, compare_iterations, compare_logs, detect_kind, time_share
from log_analyzer.__main__ import PROG, main
from log_analyzer.inputs import load_input
from log_analyzer.report import build_report, fmt_value, write_report
from tests.conftest import EXAMPLES, run_cli
from tests.test_log_analyzer_plots import (
    AR,
    EPOCH,
    GEMM,
    MIB,
    SMALL_LOG,
    end_to_end,
    is_png,
    is_svg,
    small_workload,
    write_small_log,
)
from utils.cli import run_main
from utils.errors import UserError
from utils.workload import CSV_COLUMNS

# 1 MiB all-reduces over 8 ranks in 1, 2, 3 ms: busbw = 1048576 B / t / 1e9 * 2*7/8 = 1.835008 / t GB/s,
# mean 1.835008 * (1 + 1/2 + 1/3) / 3 = 1.1213938 GB/s; time mean 2 ms, population std sqrt(2/3) = 0.8165 ms
AR_BUSBW_MEAN = 1.835008 * 11 / 18


class Tables(HTMLParser):
    """Every table of a page by section id: {section: [[header cells], [row cells], ...], ...}."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, list[list[list[str]]]] = {}
        self.section = ""
        self.row: list[str] | None = None
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "section":
            self.section = dict(attrs)["id"]
        elif tag == "table":
            self.sections.setdefault(self.section, []).append([])
        elif tag == "tr":
            self.row = []
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None and self.row is not None:
            self.row.append("".join(self.cell).strip())
            self.cell = None
        elif tag == "tr" and self.row is not None:
            self.sections[self.section][-1].append(self.row)
            self.row = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


def tables(page: str) -> dict[str, list[list[dict[str, str]]]]:
    """Each section's tables as lists of {header: cell} rows."""
    parser = Tables()
    parser.feed(page)
    return {section: [[dict(zip(t[0], row)) for row in t[1:]] for t in found] for section, found in parser.sections.items()}


def by(rows: list[dict[str, str]], **match: str) -> dict[str, str]:
    hits = [r for r in rows if all(r[k] == v for k, v in match.items())]
    assert len(hits) == 1, (match, rows)
    return hits[0]


def check_self_contained(page: str, image_format: str = "png") -> int:
    """No script, nothing loaded from elsewhere, every image a data: URI that decodes; returns the count."""
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page.lower()
    assert "default-src 'none'; img-src data:" in page
    assert not re.search(r"""(src|href)\s*=\s*["'](?!data:|#)""", page)
    images = re.findall(r'<img src="data:(image/[a-z+]+);base64,([A-Za-z0-9+/=]+)"', page)
    for mime, data in images:
        raw = base64.b64decode(data)
        if image_format == "png":
            assert mime == "image/png"
            is_png(raw)
        else:
            assert mime == "image/svg+xml"
            is_svg(raw)
    return len(images)


@pytest.fixture
def small_log(tmp_path) -> str:
    return write_small_log(tmp_path / "small_log.csv")


# ---- the report's numbers --------------------------------------------------------------------------


def test_log_report_tables_by_hand(small_log):
    page = build_report(small_log, nominal={"NVLink": 2.0})
    # iteration times, share by type, time share, message-size CDF, bandwidth (the timeline is inline SVG)
    assert check_self_contained(page) == 5
    found = tables(page)
    # iteration statistics of the measured iterations 14 and 10 ms: mean 12, std 2 (population),
    # p90 10 + 0.9 * 4 = 13.6; init 6 ms; the slowest rank's longest iteration 14 + 1 = 15 ms
    stats = found["iterations"][0][0]
    assert stats == {"init (ms)": "6.000", "measured iterations": "2", "mean (ms)": "12.000", "min (ms)": "10.000",
                     "max (ms)": "14.000", "p90 (ms)": "13.600", "std (ms)": "2.000", "std / mean (%)": "16.7",
                     "slowest rank's max (ms)": "15.000"}
    # per iteration, a p2p batch counted once: iteration 1 logs AR 1 + 2 + 3 and the batch 4 = 10 ms of comm,
    # GEMM 2 ms, so 14 - 12 = 2 ms are not logged; iteration 2: AG 0.5 + batch 4 = 4.5, GEMM 2, 10 - 6.5 = 3.5
    per_iteration = found["iterations"][1]
    assert by(per_iteration, iteration="1") == {
        "iteration": "1", "wall time, rank 0 (ms)": "14.000", "wall time, slowest rank (ms)": "15.000",
        "slowest rank": "3", "comm logged (ms)": "10.000", "compute logged (ms)": "2.000", "not logged (ms)": "2.000",
        "operations": "6"}
    assert by(per_iteration, iteration="2")["not logged (ms)"] == "3.500"
    assert by(per_iteration, iteration="0")["comm logged (ms)"] == "5.000"
    # time shares of iterations 1-2: AR 6, GEMM 4, isend 2 + 2 (half of each batch), irecv 4, AG 0.5 ms = 18.5 ms
    by_type, by_group = found["share"]
    assert by(by_type, type="all_reduce") == {"type": "all_reduce", "operations": "3", "bytes": "3 MiB",
                                              "time (ms)": "6.000", "share of logged time (%)": "32.4"}
    assert by(by_type, type="computation")["bytes"] == "–"
    assert by(by_type, type="isend")["time (ms)"] == "4.000"
    assert by(by_type, type="all_gather")["share of logged time (%)"] == "2.7"      # 0.5 / 18.5
    assert by(by_group, group="pp_group")["share of logged time (%)"] == "43.2"     # 8 / 18.5
    assert [r["type"] for r in by_type] == ["all_reduce", "computation", "isend", "irecv", "all_gather"]
    # per (type, group, size): the all-reduces' busbw mean 1.1214 GB/s is 56.1% of the 2 GB/s nominal; its std is
    # 1.835008 * std(1, 1/2, 1/3) = 1.835008 * sqrt(((7/18)^2 + (2/18)^2 + (5/18)^2) / 3) = 1.835008 * 0.28328 = 0.5198
    comm = found["bandwidth"][0]
    row = by(comm, type="all_reduce")
    assert row == {"type": "all_reduce", "group": "dp_group", "size": "1 MiB", "size (B)": "1,048,576", "count": "3",
                   "time mean (ms)": "2.000", "time std (ms)": "0.816", "busbw mean (GB/s)": "1.121",
                   "busbw std (GB/s)": "0.520", "busbw / nominal (%)": f"{AR_BUSBW_MEAN / 2 * 100:.1f}",
                   "max time, any rank (ms)": "3.500", "slowest rank": "3", "straggler rank": "5"}
    # all-gather: 4 MiB over 2 ranks in 0.5 ms = 8.388608 GB/s algbw, x 1/2
    assert by(comm, type="all_gather")["busbw mean (GB/s)"] == "4.194"
    assert "Nominal bandwidth" in page and "NVLink 2 GB/s" in page


def test_build_report_takes_a_loaded_log(small_log):
    """Before: a notebook's Log (what Log.load gives, and what compare_logs and the plots take) was refused by
    build_report with a TypeError (expected str, bytes or os.PathLike object, not Log)."""
    log = Log.load(small_log)
    assert build_report(log) == build_report(small_log)
    assert load_input(log).path == small_log
    with pytest.raises(UserError, match="this is a replay log; expected a simulator result"):
        load_input(log, want=("sim",))


def test_tables_agree_with_the_summary_functions(small_log):
    log = Log.load(small_log)
    summary = log.comm_summary()
    ar = summary[summary["comm_type"] == "all_reduce"].iloc[0]
    assert math.isclose(ar.busbw_mean_gbps, AR_BUSBW_MEAN) and math.isclose(ar.time_std_ms, math.sqrt(2 / 3))
    share = time_share(log.measured, "comm_type").set_index("comm_type")
    assert math.isclose(share.loc["isend", "time_ms"], 4.0) and math.isclose(share["share_pct"].sum(), 100.0)
    assert math.isclose(share.loc["all_reduce", "share_pct"], 6 / 18.5 * 100)


def test_workload_report_by_hand(tmp_path):
    page = build_report(small_workload(tmp_path / "w_workload.csv"))
    assert check_self_contained(page) == 3   # share by type, bytes by group and size, message-size CDF
    found = tables(page)
    # init: 1 all-reduce; per iteration 3 all-reduces of 1 MiB (3 MiB) and one 4 MiB all-gather: 7 MiB
    by_type, by_group = found["share"]
    assert by(by_type, type="all_gather") == {"type": "all_gather", "operations per iteration": "1",
                                              "bytes per iteration": "4 MiB", "share of bytes (%)": "57.1"}
    assert by(by_group, group="dp_group")["share of bytes (%)"] == "42.9"
    sizes = found["sizes"][0]
    assert by(sizes, type="all_reduce") == {"type": "all_reduce", "group": "dp_group", "group size (ranks)": "8",
                                            "size": "1 MiB", "size (B)": "1,048,576", "count in init": "1",
                                            "count per iteration": "3", "bytes per iteration": "3 MiB"}
    assert "7 MiB" in page and "Workload report: w_workload.csv" in page


def test_sim_report_from_end_to_end_and_richer_files(tmp_path):
    page = build_report(small_log_path := write_small_log(tmp_path / "a_log.csv"), sim=end_to_end(tmp_path / "run-EndToEnd.csv"))
    assert small_log_path in page
    found = tables(page)
    terms = found["sim-terms"][0]
    assert by(terms, term="Expose TP comm") == {"term": "Expose TP comm", "time (us)": "200.0", "time (ms)": "0.200",
                                                "share of total (%)": "20.0"}
    assert by(terms, term="Total time")["share of total (%)"] == "100.0"
    # the two attention records sum: fwd 100, bwd 50 + 50, comm 40 + 80 + 60, exposed 40 + 0 + 60
    layers = found["sim-layers"][0]
    assert by(layers, layer="attention") == {"layer": "attention", "records": "2", "fwd compute (us)": "100.0",
                                             "bwd compute (us)": "100.0", "comm (us)": "180.0",
                                             "exposed comm (us)": "100.0", "overlapped comm (us)": "80.000",
                                             "compute + exposed (us)": "300.0"}


def test_simulator_outputs_load_back(tmp_path):
    from simulator.api import simulate
    from simulator.options import SimAIOptions, TopoOptions
    from simulator.report import write_results

    result = simulate(EXAMPLES / "simai_micro_allreduce.txt", SimAIOptions(gpus_per_server=8, nics_per_server=8))
    write_results(result, str(tmp_path / "simai-"))
    for name in ("simai-EndToEnd.csv", "simai-simai_layers.csv"):
        sim = SimResult.load(tmp_path / name)
        assert sim.model == "simai" and len(sim.files) == 2
        # the terms come from EndToEnd.csv (whole us), the layers from our exact CSV
        assert math.isclose(sim.terms["total_us"], round(result.totals.total_us))
        assert math.isclose(sim.layers["comm_us"].sum(), SimResult.from_result(result).layers["comm_us"].sum())
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(tmp_path / "simai-simai_layers.csv", alone / "x-simai_layers.csv")
    sim = SimResult.load(alone / "x-simai_layers.csv")
    assert math.isnan(sim.terms["bubble_us"]) and "EndToEnd.csv" in sim.notes[0]
    assert math.isclose(sim.terms["compute_us"], result.totals.compute_us, rel_tol=1e-9)
    topo = simulate(EXAMPLES / "simai_micro_allreduce.txt", EXAMPLES / "topo_Spectrum-X_16g_8gps_400Gbps_H100",
                    TopoOptions())
    write_results(topo, str(tmp_path / "topo-"))
    sim = SimResult.load(tmp_path / "topo-topo_collectives.csv")
    assert sim.model == "topo" and len(sim.files) == 4 and sim.stages is not None and sim.collectives is not None
    assert math.isclose(sim.iteration_us, topo.iteration_us, rel_tol=1e-6)
    assert detect_kind(tmp_path / "topo-topo_stages.csv") == "topo_stages"
    page = build_report(tmp_path / "topo-EndToEnd.csv", image_format="svg")
    assert check_self_contained(page, "svg") == 2 and "per pipeline stage" in page and "collectives" in page


def test_escaping_and_formatting(tmp_path):
    evil = end_to_end(tmp_path / "e-EndToEnd.csv")
    text = open(evil).read().replace("mlp,", "<img src=x onerror=alert(1)>,")
    open(evil, "w").write(text)
    page = build_report(evil, title="<b>t</b>")
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page and "&lt;b&gt;t&lt;/b&gt;" in page
    assert fmt_value(float("nan"), "num") == "–" and fmt_value(None, "int") == "–"
    assert (fmt_value(1234.5678, "num"), fmt_value(1.23456, "num"), fmt_value(0.000123, "num")) == ("1,234.6", "1.235",
                                                                                                   "0.000123")
    assert fmt_value(3 * MIB, "size") == "3 MiB" and fmt_value(float("inf"), "num") == "∞"


# ---- compare -----------------------------------------------------------------------------------------


def test_compare_by_hand(tmp_path):
    a = write_small_log(tmp_path / "a_log.csv")
    # B: every time halved, and one more all-reduce size that A lacks
    b_rows = SMALL_LOG + [(AR.__class__(AR.comm_type, AR.comm_group, 8, 2 * MIB, "x"), 1.0, None), (EPOCH, 3.0, None)]
    b = write_small_log(tmp_path / "b_log.csv", b_rows, scale=0.5)
    table = compare_logs(a, b)
    row = table[(table["comm_type"] == "all_reduce") & (table["msg_size"] == MIB)].iloc[0]
    # time 2 -> 1 ms: -50%; busbw doubles: +100%
    assert (row.count_a, row.count_b, row.time_mean_ms_a, row.time_mean_ms_b) == (3, 3, 2.0, 1.0)
    assert math.isclose(row.time_change_pct, -50.0) and math.isclose(row.busbw_change_pct, 100.0)
    new = table[table["msg_size"] == 2 * MIB].iloc[0]
    assert new.status == "only in B" and math.isnan(new.time_change_pct) and new.count_b == 1
    iterations = compare_iterations(a, b).set_index("statistic")
    # A: 14, 10 ms; B: 7, 5, 1.5 ms (the extra block): mean 12 -> 4.5
    assert iterations.loc["mean_ms", "a"] == 12.0 and math.isclose(iterations.loc["mean_ms", "b"], 13.5 / 3)
    assert list(table["comm_type"])[:3] == ["all_reduce", "all_reduce", "all_gather"]


def cli(args: list[str], capsys) -> tuple[int, str, str]:
    """Run ``python -m log_analyzer`` in this process as its entry point does."""
    with pytest.raises(SystemExit) as exit_info:
        run_main(lambda: main(args), PROG)
    out = capsys.readouterr()
    return exit_info.value.code, out.out, out.err


def test_cli_report_plot_compare(tmp_path, small_log, capsys):
    out = tmp_path / "out" / "r.html"
    code, stdout, _ = cli(["report", small_log, "--sim", end_to_end(tmp_path / "run-EndToEnd.csv"), "-o", str(out),
                           "--topology", str(EXAMPLES / "topo_Spectrum-X_16g_8gps_400Gbps_H100"), "--iteration", "1"], capsys)
    assert code == 0 and stdout == f"wrote {out}\n"
    page = out.read_text()
    # the log's 5 plots and the simulation's 2
    assert check_self_contained(page) == 7 and "NVLink (H100) 360 GB/s, NIC (topology) 50 GB/s" in page
    assert "Timeline of iteration 1" in page
    workload = small_workload(tmp_path / "w_workload.csv")
    code, stdout, _ = cli(["report", workload], capsys)   # default output beside the input
    assert code == 0 and stdout == f"wrote {tmp_path / 'w_workload_report.html'}\n"
    code, stdout, _ = cli(["plot", small_log, "--sim", str(tmp_path / "run-EndToEnd.csv"), "-o", str(tmp_path / "p"),
                           "--format", "svg"], capsys)
    assert code == 0 and sorted(os.listdir(tmp_path / "p")) == [
        "busbw_vs_size.svg", "iteration_times.svg", "sim_breakdown.svg", "sim_layers.svg", "size_cdf.svg", "time_share.svg",
        "timeline.svg", "type_share.svg"]
    b = write_small_log(tmp_path / "b_log.csv", scale=2.0)
    code, stdout, _ = cli(["compare", small_log, b, "--labels", "old", "new", "-o", str(tmp_path / "d.csv"),
                           "--html", str(tmp_path / "d.html")], capsys)
    assert code == 0 and "+100.0%" in stdout and "-50.0%" in stdout and "change = (new - old) / old" in stdout
    assert (tmp_path / "d.csv").read_text().splitlines()[0].startswith("comm_type,comm_group,msg_size,count_a,count_b")
    assert check_self_contained((tmp_path / "d.html").read_text()) == 1


def bad_inputs(tmp_path) -> dict[str, tuple[str, str]]:
    """name -> (path, what the one-line error says)."""
    header = ",".join(CSV_COLUMNS)
    files = {
        "empty": ("", "empty file (expected a replay log (*_log.csv), an AICB workload CSV"),
        "header_only": (header + "\n", "no rows after the header: an empty replay log or workload"),
        "bad_row": (f"{header}\nCommType.all_reduce,CommGroup.dp_group,8,12ab,x,None,None,,1.0,1,1,1\n",
                    ":2: msg_size: "),
        "short_row": (f"{header}\nCommType.all_reduce,CommGroup.dp_group,8\n", ":2: expected 12 comma-separated fields"),
        "unknown": ("a,b,c\n1,2,3\n", "unrecognised header 'a,b,c' (expected a replay log"),
        "binary": (b"\x89PNG\r\n\x1a\n\x00\xff\xfe", "not a text file"),
        "detail": ("row,iteration,max_elapsed_ms,slowest_rank\n0,0,1.0,2\n", "this is a replay's detail CSV"),
        "bad_sim": ("File name, Expose DP comm\nrun-, 12 (3%)\n", "header lacks term(s)"),
    }
    out = {}
    for name, (text, message) in files.items():
        path = tmp_path / f"{name}.csv"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        out[name] = (str(path), message)
    out["missing"] = (str(tmp_path / "nope_log.csv"), "cannot read: No such file or directory")
    out["folder"] = (str(tmp_path), "cannot read: Is a directory")
    return out


def test_bad_inputs_end_with_one_line_and_write_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    for name, (path, message) in bad_inputs(tmp_path).items():
        for command in (["report", path, "-o", str(out / "r.html")], ["plot", path, "-o", str(out / "p")],
                        ["compare", path, path]):
            code, stdout, stderr = cli(command, capsys)
            assert code == 2, (name, command, stderr)
            assert stderr.count("\n") == 1 and stderr.startswith("log_analyzer: error: "), (name, stderr)
            # compare tells a simulator result by its header before reading it
            expected = "expected a replay log" if command[0] == "compare" and name == "bad_sim" else message
            assert expected in stderr, (name, stderr)
            assert path in stderr, (name, stderr)
    assert not out.exists()


def test_wrong_kinds_and_flags(tmp_path, small_log, capsys):
    workload = small_workload(tmp_path / "w.csv")
    sim = end_to_end(tmp_path / "run-EndToEnd.csv")
    cases = [
        (["report", small_log, "--sim", workload], "is an AICB workload CSV; expected a simulator result"),
        (["compare", small_log, sim], "is a simulator result; expected a replay log"),
        (["report", small_log, "--iteration", "9"], "--iteration 9: the log has iterations 0 to 2"),
        (["report", small_log, "--nominal_gbps", "-1"], "expected a bandwidth > 0 GB/s"),
        (["report", small_log, "-o", str(tmp_path)], "is a folder"),
        (["compare", small_log, small_log, "--html", str(tmp_path)], f"--html {tmp_path}: is a folder"),  # was "-o"
        (["report", small_log, "--topology", workload], str(workload)),
        (["report"], "the following arguments are required: input"),
    ]
    for args, message in cases:
        code, _, stderr = cli(args, capsys)
        assert code == 2 and message in stderr and stderr.count("\n") == 1, (args, stderr)
    assert not os.path.exists(small_log.replace(".csv", "_report.html"))
    assert detect_kind(workload) == "workload" and detect_kind(small_log) == "log" and detect_kind(sim) == "end_to_end"


HEADER = ",".join(CSV_COLUMNS)
_CELLS = st.sampled_from(["CommType.all_reduce", "CommType.epoch_end", "CommType.computation", "CommGroup.dp_group",
                          "None", "", "8", "1048576", "1.5", "-1", "abc", "((4 1) (1 4))", "File name", "inf", "-nan"])


@settings(max_examples=80, deadline=None)
@given(st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200),
    # a log or workload header, then rows of plausible and implausible cells
    st.lists(st.lists(_CELLS, min_size=1, max_size=13).map(",".join), max_size=6).map(lambda rows: "\n".join([HEADER, *rows])),
    # an EndToEnd.csv with broken values
    st.lists(_CELLS, min_size=9, max_size=11).map(lambda cells: END_TO_END_HEAD + ", ".join(cells) + "\n"),
))
def test_any_file_loads_or_fails_with_a_user_error(content):
    # nothing a user can hand us ends in a traceback: it loads, or it is one UserError naming the file
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "x-EndToEnd.csv" if str(content).startswith("File name") else "x.csv")
        with open(path, "wb") as handle:
            handle.write(content if isinstance(content, bytes) else content.encode())
        try:
            load_input(path)
        except UserError as exc:
            assert path in str(exc) and "\n" not in str(exc)


END_TO_END_HEAD = ("File name, Expose DP comm, Expose DP_EP comm, Expose TP comm, Expose_EP_comm, Expose_PP_comm, "
                   "bubble time, total comp, total exposed comm, Total time\n")


def test_a_log_of_computation_only_is_a_log_by_its_name(tmp_path):
    path = write_small_log(tmp_path / "c_log.csv", [(GEMM, 1.0, None)], detail=False)
    assert detect_kind(path) == "log"
    page = build_report(path)
    assert "No measured iteration after init" in page and "has no epoch_end row" in page


def test_python_m_log_analyzer(tmp_path):
    proc = run_cli("-m", "log_analyzer", "report", str(tmp_path / "none.csv"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"log_analyzer: error: {tmp_path / 'none.csv'}: cannot read: No such file")
    proc = run_cli("-c", "import sys, log_analyzer; log_analyzer.Log; log_analyzer.plots; "
                         "print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))")
    assert proc.stdout.strip() == "[]"    # no torch, and matplotlib only once a plot is drawn


# ---- headless browser ----------------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium)")
def test_the_report_opens_in_headless_chromium(tmp_path, small_log):
    report = write_report(build_report(small_log, sim=end_to_end(tmp_path / "run-EndToEnd.csv")), tmp_path / "r.html")
    shot = tmp_path / "shot.png"
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--enable-logging=stderr", "--v=0",
             f"--user-data-dir={profile}", f"--screenshot={shot}", "--window-size=1400,3000", f"file://{report}"],
            capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # chromium logs every console message (script errors, blocked loads, CSP violations) as CONSOLE
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    assert console == []
    width, height = is_png(shot.read_bytes())
    assert (width, height) == (1400, 3000)


# ---- issue 21: the zoomable timeline and the overview cards ---------------------------------------------

class Timeline(HTMLParser):
    """The timeline fragment of a page: its zoom buttons, operation rects (x, width, tooltip) and tick labels."""

    def __init__(self) -> None:
        super().__init__()
        self.zooms: list[str] = []
        self.rects: list[tuple[float, float, str]] = []
        self.ticks: list[tuple[set[str], str]] = []
        self.scripts = 0
        self._rect: dict | None = None
        self._text: list[str] | None = None
        self._tick = False
        self._classes: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script":
            self.scripts += 1
        elif tag == "input" and attrs.get("type") == "radio":
            self.zooms.append(attrs["id"])
        elif tag == "rect":
            self._rect = {"x": float(attrs["x"]), "width": float(attrs["width"])}
        elif tag == "title" and self._rect is not None:
            self._text = []
        elif tag == "span" and "style" in attrs:
            self._classes = set((attrs.get("class") or "").split())
        elif tag == "b":
            self._tick, self._text = True, []

    def handle_endtag(self, tag):
        if tag == "title" and self._rect is not None and self._text is not None:
            self.rects.append((self._rect["x"], self._rect["width"], "".join(self._text)))
            self._rect, self._text = None, None
        elif tag == "b" and self._tick:
            self.ticks.append((self._classes, "".join(self._text or [])))
            self._tick, self._text = False, None

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)


def test_the_report_timeline_zooms_without_a_script(small_log):
    # issue 21 item 18: AICB's visualizer let the user zoom into an iteration; the report's timeline is inline SVG
    # with CSS zoom buttons (the page's Content-Security-Policy allows no script)
    page = build_report(small_log, iteration=1)
    check_self_contained(page)
    section = page.split('<section id="timeline"', 1)[1].split("</section>", 1)[0]
    found = Timeline()
    found.feed(section)
    assert found.scripts == 0 and found.zooms == [f"tl-z{z}" for z in (1, 2, 4, 8, 16, 32, 64)]
    assert ".tl > input.z64:checked ~ .tl-view .tl-canvas { width: 6400%; }" in page
    # iteration 1 back to back: AR 1 ms at 0, GEMM 2 at 1, AR 2 at 3, the p2p batch's isend and irecv side by side
    # at 5 (4 ms), AR 3 at 9: 12 ms logged on a drawing 1000 units wide, so x = start * 1000 / 12
    starts, lengths = [0, 1, 3, 5, 5, 9], [1, 2, 2, 4, 4, 3]
    assert len(found.rects) == 6
    by_start = sorted(found.rects)
    assert [round(x, 3) for x, _, _ in by_start] == [round(s * 1000 / 12, 3) for s in starts]
    assert [round(w, 3) for _, w, _ in by_start] == [round(t * 1000 / 12, 3) for t in lengths]
    assert "all_reduce · dp_group · 1 MiB · step.grad\n3 ms, from 9 ms to 12 ms" in by_start[-1][2]
    # zoom 1: a tick each 1 ms (12 / 8 = 1.5, rounded to 1), 0 to 12 ms
    assert [text for zooms, text in found.ticks if "z1" in zooms] == [f"{k} ms" for k in range(13)]
    # zoom 64: 12 / 512 = 0.023 ms rounded to a 20 us step: 601 ticks, 0 to 12 ms
    at_64 = [text for zooms, text in found.ticks if "z64" in zooms]
    assert len(at_64) == 601 and at_64[:3] == ["0 ms", "20 us", "40 us"] and at_64[-1] == "12 ms"
    assert "Iteration 1 on rank 0: 12 ms logged, 14 ms wall; 6 operations" in section


def card_pairs(page: str) -> list[tuple[str, str]]:
    """(label, value) of each overview card."""
    return re.findall(r'<div class="label">([^<]*)</div><div class="value">([^<]*)</div>', page)


def test_the_overview_shows_each_figure_once(tmp_path, small_log):
    # issue 21 item 17: a log without computation showed "communication" and "logged" with the same share of the
    # wall time.  Here the iterations are AR 1 + 2 ms in 4 ms wall and AR 3 ms in 4 ms (init AR 5 ms in 6):
    # communication 6 of 8 ms = 75 %, 2 ms not logged = 25 %
    rows = [(AR, 5.0, None), (EPOCH, 6.0, None), (AR, 1.0, None), (AR, 2.0, None), (EPOCH, 4.0, None),
            (AR, 3.0, None), (EPOCH, 4.0, None)]
    cards = card_pairs(build_report(write_small_log(tmp_path / "comm_log.csv", rows)))
    labels = [label for label, _ in cards]
    assert len(set(labels)) == len(labels) and len(set(value for _, value in cards)) == len(cards), cards
    assert ("communication", "75.0 %") in cards and ("not logged", "25.0 %") in cards and "computation" not in labels
    # with computation (the small log): iteration 1 logs 10 ms comm and 2 ms GEMM of 14, iteration 2 4.5 and 2 of 10:
    # comm 14.5 / 24 = 60.4 %, compute 4 / 24 = 16.7 %, not logged 5.5 / 24 = 22.9 %
    cards = card_pairs(build_report(small_log))
    assert [c for c in cards if c[0] in ("communication", "computation", "not logged")] == [
        ("communication", "60.4 %"), ("computation", "16.7 %"), ("not logged", "22.9 %")]
    assert len({label for label, _ in cards}) == len(cards)

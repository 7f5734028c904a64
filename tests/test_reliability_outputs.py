"""log_analyzer, visualize and topo.gen: outputs guarded, strict numbers, bounded sizes (issue 28, items 1, 7,
10, 11 and 21).

1/7. ``log_analyzer report/plot/compare``, ``visualize.generate`` and ``topo.gen`` refuse an output that is a
     symbolic link or one of the files read (a log's detail CSV, a simulation's sibling files included).
10.  ``0x10`` in any numeric column of ``topo_collectives.csv`` is one line with file, line and column;
     ``topo.gen -g 10240000 --pods 20000`` is refused before it is built (was MemoryError); an unclosed quote
     in ``--topo_gen`` flags is one line (``topo.gen.split_flags``).
11.  The chunked sums of the report give what the whole-table sums gave.
21.  topo.gen's default NVLink rate is the GPU table's nominal rate per direction (H100: 450 GB/s), the rate
     ``profiling calibrate --gpu_type`` divides by.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import EXAMPLES, run_cli

WORKLOAD = EXAMPLES / "aicb_workload_L7B_megatron_tp2_pp1_mbs1.csv"


def one_line(done, *needles: str) -> str:
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def topo_result(tmp_path_factory) -> Path:
    from simulator.api import simulate
    from simulator.options import TopoOptions
    from simulator.report import write_results

    folder = tmp_path_factory.mktemp("topo")
    result = simulate(EXAMPLES / "simai_micro_allreduce.txt", EXAMPLES / "topo_Spectrum-X_16g_8gps_400Gbps_H100",
                      TopoOptions())
    write_results(result, str(folder / "run-"))
    return folder


# ---- 10: strict numbers in the simulator's result files --------------------------------------------------

@pytest.mark.parametrize("column", ["total_us", "servers", "per_server", "congestion", "size_bytes", "time_us"])
def test_a_hex_number_in_topo_collectives_is_one_line(tmp_path, topo_result, column):
    for path in topo_result.iterdir():
        shutil.copy(path, tmp_path / path.name)
    path = tmp_path / "run-topo_collectives.csv"
    table = pd.read_csv(path, dtype=str, keep_default_na=False)
    table.loc[0, column] = "0x10"
    table.to_csv(path, index=False)
    done = run_cli("-m", "log_analyzer", "report", str(path), "-o", str(tmp_path / "r.html"))
    one_line(done, f"{path}:2: {column}:", "0x10")
    assert not (tmp_path / "r.html").exists()


def test_an_empty_optional_cell_is_still_read(tmp_path, topo_result):
    for path in topo_result.iterdir():
        shutil.copy(path, tmp_path / path.name)
    done = run_cli("-m", "log_analyzer", "report", str(tmp_path / "run-topo_collectives.csv"), "-o",
                   str(tmp_path / "r.html"))
    assert done.returncode == 0, done.stderr  # topo_stages.csv's flops column is empty: absent, not an error


# ---- 1/7: outputs -----------------------------------------------------------------------------------------

def test_report_refuses_a_symlink_and_the_simulations_own_files(tmp_path, topo_result):
    for path in topo_result.iterdir():
        shutil.copy(path, tmp_path / path.name)
    victim = tmp_path / "run-topo_layers.csv"
    before = victim.read_bytes()
    done = run_cli("-m", "log_analyzer", "report", str(WORKLOAD), "--sim", str(tmp_path / "run-EndToEnd.csv"), "-o",
                   str(victim))
    one_line(done, "would destroy", "--sim")
    link = tmp_path / "page.html"
    link.symlink_to(victim)
    done = run_cli("-m", "log_analyzer", "report", str(WORKLOAD), "-o", str(link))
    one_line(done, "symbolic link")
    assert victim.read_bytes() == before


def test_report_refuses_to_write_over_a_logs_detail_file(tmp_path):
    log = tmp_path / "x_log.csv"
    detail = tmp_path / "x_detail.csv"
    shutil.copy(WORKLOAD, log)
    detail.write_text("row,comm_type,max_elapsed_ms,slowest_rank\n")
    done = run_cli("-m", "log_analyzer", "report", str(log), "-o", str(detail))
    one_line(done, "would destroy")
    assert detail.read_text() == "row,comm_type,max_elapsed_ms,slowest_rank\n"


def test_plot_refuses_a_symlinked_image(tmp_path):
    target = tmp_path / "keep.txt"
    target.write_text("kept\n")
    out = tmp_path / "plots"
    out.mkdir()
    (out / "type_share.png").symlink_to(target)
    done = run_cli("-m", "log_analyzer", "plot", str(WORKLOAD), "-o", str(out))
    one_line(done, "type_share.png", "symbolic link")
    assert target.read_text() == "kept\n" and sorted(p.name for p in out.iterdir()) == ["type_share.png"]


def test_visualize_refuses_its_input_and_links(tmp_path):
    src = tmp_path / "w.csv"
    shutil.copy(WORKLOAD, src)
    before = src.read_bytes()
    done = run_cli("-m", "visualize.generate", str(src), "-o", str(src))
    one_line(done, "would destroy")
    link = tmp_path / "w.html"
    link.symlink_to(src)
    done = run_cli("-m", "visualize.generate", str(src), "-o", str(link))
    one_line(done, "symbolic link")
    assert src.read_bytes() == before


def test_topo_gen_refuses_a_symlinked_output(tmp_path):
    target = tmp_path / "keep.txt"
    target.write_text("kept\n")
    (tmp_path / "t").symlink_to(target)
    done = run_cli("-m", "topo.gen", "-topo", "Spectrum-X", "-g", "16", "-o", str(tmp_path / "t"))
    one_line(done, "symbolic link")
    assert target.read_text() == "kept\n"


# ---- 10: topo.gen bounds and flags -------------------------------------------------------------------------

def test_topo_gen_refuses_a_fabric_too_big_before_building_it(tmp_path):
    done = run_cli("-m", "topo.gen", "-g", "10240000", "--pods", "20000", "-o", str(tmp_path / "huge"))
    # 40,960,000 links and 12,960,008 nodes (shapes.plan's counts, nothing built)
    one_line(done, "-g 10240000", "--pods 20000", "40,960,000 links", "--max_items")
    assert list(tmp_path.iterdir()) == []
    done = run_cli("-m", "topo.gen", "-topo", "Spectrum-X", "-g", "16", "--max_items", "10", "-o", str(tmp_path / "t"))
    one_line(done, "-g 16", "above the limit of 10")
    done = run_cli("-m", "topo.gen", "-topo", "Spectrum-X", "-g", "16", "--max_items", "1000", "-o", str(tmp_path / "t"))
    assert done.returncode == 0 and (tmp_path / "t").exists()


def test_topo_gen_flags_with_an_unclosed_quote_are_one_error():
    from topo.gen import split_flags
    from utils.errors import ConfigError

    assert split_flags("-topo 'Spectrum-X' -gps 8") == ["-topo", "Spectrum-X", "-gps", "8"]
    with pytest.raises(ConfigError) as info:
        split_flags("-topo 'Spectrum-X")
    assert str(info.value).startswith("--topo_gen") and "closing quotation" in str(info.value)


# ---- 21: one nominal NVLink rate ----------------------------------------------------------------------------

@pytest.mark.parametrize("gpu, gbps", [("H100", 450), ("H200", 450), ("A100", 300), ("H800", 200), ("B200", 900)])
def test_the_default_topology_has_the_gpu_tables_nominal_nvlink(tmp_path, gpu, gbps):
    from mocked_model.compute import gpu_spec
    from topo import read_topology

    done = run_cli("-m", "topo.gen", "-topo", "Spectrum-X", "-g", "16", "-gt", gpu, "-o", str(tmp_path / "t"))
    assert done.returncode == 0, done.stderr
    topology = read_topology(tmp_path / "t")
    # per GPU per direction in GB/s: H100 SXM 18 NVLink4 links x 25 GB/s = 450 (3600Gbps on each GPU's link)
    assert topology.nvlink_bytes_per_s / 1e9 == pytest.approx(gbps) == gpu_spec(gpu).nvlink_gbps
    assert f" {gbps * 8}Gbps " in (tmp_path / "t").read_text().splitlines()[2]


def test_simais_nvlink_rate_on_request():
    from topo.gen import build_parser
    from topo.templates import resolve

    given = vars(build_parser().parse_args(["-topo", "Spectrum-X", "-g", "16", "-nvbw", "2880Gbps"]))
    given.pop("output", None)
    assert resolve(given).nvlink_bw == "2880Gbps"


# ---- 11: the chunked sums ----------------------------------------------------------------------------------

def test_chunked_sums_equal_whole_table_sums(monkeypatch):
    from log_analyzer import summary
    from log_analyzer.frames import _items_frame
    from log_analyzer.log import Log
    from log_analyzer.plots import _operations
    from utils.workload import Workload

    items, _ = _items_frame(Workload.load(WORKLOAD).items)
    rng = np.random.default_rng(0)
    items["elapsed_ms"] = rng.uniform(0.01, 2.0, len(items))
    items.loc[items.index[::7], "elapsed_ms"] = np.nan
    log = Log(path="x_log.csv", items=items, iterations=pd.DataFrame())
    whole = {by: summary.time_share(items, by) for by in ("comm_type", "comm_group")}
    logged = summary.logged_time(items)
    operations = _operations(log)[0]
    assert len(items) > 13 * 3
    monkeypatch.setattr(summary, "ROWS_AT_ONCE", 13)  # many chunks
    for by, table in whole.items():
        pd.testing.assert_frame_equal(summary.time_share(items, by), table)
    pd.testing.assert_frame_equal(summary.logged_time(items), logged)
    pd.testing.assert_frame_equal(_operations(log)[0], operations)
    # and the whole-table grouping the chunked sum replaced gives the same
    pd.testing.assert_frame_equal(logged, summary._logged_time_grouped(items), check_dtype=False)

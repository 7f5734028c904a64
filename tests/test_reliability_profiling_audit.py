"""Audit of profiling, log_analyzer, visualize.generate and the profile reader: each case below ended in a
traceback, ran without bound or wrote nonsense before; each now refuses in one line, exit status 2, nothing
written."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import ROOT, run_cli
from tests.test_log_analyzer import AR, GEMM, write_log

KERNELS = ROOT / "profiling" / "measurements" / "h200" / "kernels.json"
NCCL = """#  Rank  0 Group  0 Pid  1 on   host1 device  0 [0x00] NVIDIA H100
#  Rank  1 Group  0 Pid  1 on   host1 device  1 [0x00] NVIDIA H100
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
        1024           256     float     sum      -1    10.00    0.10    0.10      0    10.00    0.10    0.10      0
     1048576        262144     float     sum      -1    TIME   20.97   20.97      0    50.00   20.97   20.97      0
"""


def refused(result, *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


def test_fit_gpu_refuses_an_absurd_rate_and_writes_nothing(tmp_path):
    sweep = json.loads(KERNELS.read_text())
    sweep["gemm"][0]["bf16_tflops"] = 1e300  # was: a spec file written, then a math domain error
    (tmp_path / "k.json").write_text(json.dumps(sweep))
    out = tmp_path / "spec.json"
    refused(run_cli("-m", "profiling", "fit-gpu", str(tmp_path / "k.json"), "--base", "H200", "-o", str(out)),
            "bf16_tflops")
    assert not out.exists()
    sweep = json.loads(KERNELS.read_text())
    sweep["gemm"][0]["m"] = 10**30
    (tmp_path / "k.json").write_text(json.dumps(sweep))
    refused(run_cli("-m", "profiling", "fit-gpu", str(tmp_path / "k.json"), "--base", "H200", "-o", str(out)), "'m'")
    assert not out.exists()


def test_fit_gpu_refuses_an_empty_name(tmp_path):
    out = tmp_path / "spec.json"
    refused(run_cli("-m", "profiling", "fit-gpu", str(KERNELS), "--base", "H200", "--name", "", "-o", str(out)),
            "--name")
    assert not out.exists()


@pytest.mark.parametrize("argv, needle", [
    (["kernels", "--device", "cpu", "--sustained_s", "1e12"], "--sustained_s"),  # was: a probe of 30000 years
    (["compute", "--gemm_m", "8", "--gemm_n", "8", "--gemm_k", "8", "--device", "cpu", "--samples", "99999999999"],
     "--samples"),
    (["compute", "--gemm_m", "8", "--gemm_n", "8", "--gemm_k", "8", "--device", "cpu", "--warmup", "-3"], "--warmup"),
    (["compute", "--gemm_m", "99999999999", "--gemm_n", "8", "--gemm_k", "8", "--device", "cpu"], "--gemm_m"),
    (["compute", "--gemm_m", ",".join(map(str, range(1, 23))), "--gemm_n", ",".join(map(str, range(1, 23))),
      "--gemm_k", ",".join(map(str, range(1, 23))), "--device", "cpu"], "grid"),
])
def test_profiling_bounds_its_work(tmp_path, argv, needle):
    out = tmp_path / ("k.json" if argv[0] == "kernels" else "db")
    refused(run_cli("-m", "profiling", *argv, "-o", str(out), timeout=60), needle)
    assert not out.exists()


def test_network_refuses_a_bad_torchrun_variable(tmp_path):
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(ROOT), RANK="x", WORLD_SIZE="2")
    result = subprocess.run([sys.executable, "-m", "profiling", "network", "--network_device", "cpu_gloo", "-o",
                             str(tmp_path / "db")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    refused(result, "RANK")


@pytest.mark.parametrize("time, needle", [("1e-300", "too short"), ("0.00001", "too short")])
def test_nccl_tests_refuses_a_time_that_gives_an_infinite_bandwidth(tmp_path, time, needle):
    (tmp_path / "ar.txt").write_text(NCCL.replace("TIME", time))  # was: a row of time 0.0 and busbw inf written
    refused(run_cli("-m", "profiling", "nccl-tests", str(tmp_path / "ar.txt"), "--network_device", "x", "-o",
                    str(tmp_path / "db"), "--kind", "all_reduce"), needle)
    assert not (tmp_path / "db" / "network").exists()


def test_nccl_tests_refuses_a_size_beyond_int64(tmp_path):
    (tmp_path / "ar.txt").write_text(NCCL.replace("TIME", "50.00").replace("     1048576 ", " 99999999999999999999999 "))
    refused(run_cli("-m", "profiling", "nccl-tests", str(tmp_path / "ar.txt"), "--network_device", "x", "-o",
                    str(tmp_path / "db"), "--kind", "all_reduce"), "largest size")


def test_profile_reader_refuses_a_time_that_overflows_the_bandwidth(tmp_path):
    folder = tmp_path / "db" / "network" / "dev"
    folder.mkdir(parents=True)
    (folder / "allreduce.csv").write_text("ranks,ranks_per_node,size_bytes,time_us,algbw_gbps,busbw_gbps\n"
                                          "2,2,1024,10.0,0.1024,0.1024\n2,2,1048576,1e-300,20.97152,20.97152\n")
    # was: inf - inf passed the bandwidth check, and the fit ran on an infinite rate (exit 0, numpy warnings)
    refused(run_cli("-m", "profiling", "calibrate", "--profile", str(tmp_path / "db")), "allreduce.csv:3", "time_us")


@pytest.fixture
def logs(tmp_path):
    write_log(tmp_path / "a_log.csv", [[(AR, 0.5), (GEMM, 1.0)], [(AR, 0.6), (GEMM, 1.1)]], [2.0, 2.1])
    write_log(tmp_path / "b_log.csv", [[(AR, 0.4), (GEMM, 1.0)], [(AR, 0.5), (GEMM, 1.1)]], [1.9, 2.0])
    return tmp_path / "a_log.csv", tmp_path / "b_log.csv"


def test_log_analyzer_refuses_an_absurd_nominal_bandwidth(tmp_path, logs):
    out = tmp_path / "r.html"
    refused(run_cli("-m", "log_analyzer", "report", str(logs[0]), "-o", str(out), "--nominal_gbps", "1e308"),
            "--nominal_gbps")  # was: OverflowError in the plot's axis ticks
    assert not out.exists()


def test_log_analyzer_and_visualize_refuse_empty_outputs(tmp_path, logs):
    before = set(os.listdir(ROOT))
    refused(run_cli("-m", "log_analyzer", "plot", str(logs[0]), "-o", ""), "empty path")  # was: PNGs in the cwd
    refused(run_cli("-m", "log_analyzer", "report", str(logs[0]), "-o", ""), "empty path")
    refused(run_cli("-m", "log_analyzer", "compare", str(logs[0]), str(logs[1]), "--html", ""), "empty path")
    refused(run_cli("-m", "visualize.generate", str(logs[0]), "-o", ""), "empty path")
    assert set(os.listdir(ROOT)) == before
    assert not (tmp_path / "a_log_report.html").exists()


def test_compare_refuses_one_file_for_both_outputs_and_empty_labels(tmp_path, logs):
    out = tmp_path / "cmp.csv"
    refused(run_cli("-m", "log_analyzer", "compare", str(logs[0]), str(logs[1]), "-o", str(out), "--html", str(out)),
            "one file")
    assert not out.exists()
    refused(run_cli("-m", "log_analyzer", "compare", str(logs[0]), str(logs[1]), "--labels", "", ""), "--labels")

"""``python -m simulator serve`` and ``serve-search`` as a user runs them: trace files (good and bad), the JSON line,
the files of -o, a model that does not fit, an SLO no layout meets.  Step costs come from a linear profile
(--step_cost) where the numbers are checked by hand, from the compute model otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.serve.cli import JSON_KEYS, main
from simulator.serve.requests import PRESETS, make_workload, read_trace
from utils.errors import ConfigError, FormatError

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def linear(tmp_path):
    # step = 0.01 + 0.001 x prefill tokens + 0.002 x decodes; 1600 tokens of KV
    path = tmp_path / "cost.json"
    path.write_text(json.dumps({"base_s": 0.01, "prefill_token_s": 0.001, "decode_seq_s": 0.002,
                                "kv_capacity_tokens": 1600, "replica_gpus": 1}))
    return str(path)


def serve(linear, *flags):
    return ["--gpu_type", "H100", "--model_name", "llama3_8B", "--step_cost", linear, *flags]


def test_trace_two_requests_json_and_files(tmp_path, linear, capsys):
    # the two-request timeline of tests/test_serve_engine.py, from a trace file (its rows out of order)
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.005,20,2\n0,10,3\n")
    out = tmp_path / "run"
    assert main(serve(linear, "--trace", str(trace), "--slo_ttft", "0.03", "--slo_tpot", "0.05", "--json",
                      "-o", str(out))) == 0
    captured = capsys.readouterr()
    assert "arrival times are not in order (1 of 2 requests" in captured.err
    figures = json.loads(captured.out.strip().splitlines()[-1])
    for key in (*JSON_KEYS, "goodput_requests_per_s"):
        assert key in figures
    # TTFT 0.02 and 0.045 (p50: their mean 0.0325); TPOT 0.028 and 0.014; duration 0.076; r0 alone meets TTFT <= 0.03
    assert figures["ttft_p50_s"] == pytest.approx(0.0325)
    assert figures["tpot_p50_s"] == pytest.approx(0.021)
    assert figures["e2e_p50_s"] == pytest.approx((0.076 + 0.059) / 2)
    assert figures["requests_per_s"] == pytest.approx(2 / 0.076)
    assert figures["output_tokens_per_s"] == pytest.approx(5 / 0.076)
    assert figures["goodput_requests_per_s"] == pytest.approx(1 / 0.076)
    assert sorted(os.listdir(out)) == ["report.html", "requests.csv", "steps.csv", "summary.json", "trace.json"]
    rows = (out / "requests.csv").read_text().splitlines()
    assert rows[1].split(",")[:9] == ["0", "0", "", "0", "10", "3", "0.02", "0.076", "0.02"]
    steps = (out / "steps.csv").read_text().splitlines()
    assert len(steps) == 1 + 4 and steps[2].startswith("0,both,0.02,0.03,20,1,0,0,")
    trace_events = json.loads((out / "trace.json").read_text())["traceEvents"]
    assert sum(e.get("ph") == "X" for e in trace_events) == 4
    assert sum(e.get("ph") == "b" for e in trace_events) == 2
    assert "<img" in (out / "report.html").read_text()


@pytest.mark.parametrize("body, message", [
    ("arrival_s,prompt_tokens,output_tokens\n0,10,3\n-1,10,3\n", "t.csv:3: column 1 (arrival_s): negative arrival time -1"),
    ("arrival_s,prompt_tokens,output_tokens\n0,0,3\n", "t.csv:2: column 2 (prompt_tokens): prompt of 0 tokens"),
    ("arrival_s,prompt_tokens,output_tokens\n0,10,x\n", "t.csv:2: column 3 (output_tokens): 'x' is not a number"),
    ("time,prompt,output\n0,10,3\n", "t.csv:1: the header has no arrival_s column"),
])
def test_bad_traces_are_one_line_and_write_nothing(tmp_path, linear, body, message):
    trace = tmp_path / "t.csv"
    trace.write_text(body)
    out = tmp_path / "run"
    with pytest.raises(FormatError) as exc:
        main(serve(linear, "--trace", str(trace), "-o", str(out)))
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert not out.exists()


def test_bad_trace_exits_2_with_one_line(tmp_path, linear):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n-0.5,10,3\n")
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "simulator", "serve", *serve(linear, "--trace", str(trace), "-o",
                                                                               str(out))],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "negative arrival time -0.5" in proc.stderr
    assert proc.stdout == "" and not out.exists()


def test_vidur_trace_header_and_sorting(tmp_path):
    trace = tmp_path / "v.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n2.0,5,6\n1.0,7,8\n1.5,9,10\n")
    work = read_trace(trace)
    # sorted by arrival and shifted to start at 0: 1.0, 1.5, 2.0 -> 0, 0.5, 1.0
    assert work.arrival_s.tolist() == [0.0, 0.5, 1.0]
    assert work.prompt.tolist() == [7, 9, 5] and work.output.tolist() == [8, 10, 6]
    assert work.warnings and "sorted" in work.warnings[0]


def test_sources():
    # Poisson at 4/s: the mean gap of 20,000 draws is 0.25 s within 2% (its standard error is 0.25 / sqrt(20000))
    work = make_workload(20000, seed=1, qps=4.0)
    assert work.arrival_s[0] == 0 and abs(work.arrival_s[-1] / 19999 - 0.25) < 0.005
    # gamma with burstiness 0.25: coefficient of variation 1 / sqrt(0.25) = 2
    gaps = make_workload(20000, seed=1, qps=4.0, burstiness=0.25).arrival_s[1:] - make_workload(
        20000, seed=1, qps=4.0, burstiness=0.25).arrival_s[:-1]
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.05)
    fixed = make_workload(3, seed=0, concurrency=2, prompt_tokens=7, output_tokens=9)
    assert fixed.concurrency == 2 and fixed.prompt.tolist() == [7, 7, 7] and fixed.output.tolist() == [9, 9, 9]
    with pytest.raises(ConfigError, match="one of --qps X, --concurrency C or --trace FILE"):
        make_workload(3, seed=0)
    # a preset's medians: arxiv_summarization's table says 2730 and 167 (Vidur's file); 20,000 draws within 3%
    work = make_workload(20000, seed=2, qps=1.0, dataset="arxiv_summarization")
    assert float(sorted(work.prompt)[10000]) == pytest.approx(2730, rel=0.03)
    assert float(sorted(work.output)[10000]) == pytest.approx(167, rel=0.03)
    # ShareGPT as vLLM's benchmark filters it: prompt <= 1024, prompt + output <= 2048, both >= 4
    work = make_workload(2000, seed=2, qps=1.0, dataset="sharegpt")
    assert work.prompt.max() <= 1024 and (work.prompt + work.output).max() <= 2048 and work.output.min() >= 4
    for name in PRESETS:  # every preset draws, and the same seed draws the same
        a = make_workload(50, seed=3, qps=1.0, dataset=name)
        b = make_workload(50, seed=3, qps=1.0, dataset=name)
        assert (a.prompt == b.prompt).all() and (a.prompt >= 1).all() and (a.output >= 1).all()


def test_model_that_does_not_fit_is_one_line(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match="llama3_70B does not fit") as exc:
        main(["-g_p_s", "8", "--gpu_type", "H100", "--model_name", "llama3_70B", "--qps", "1", "--num_requests", "10",
              "-o", str(out)])
    assert "\n" not in str(exc.value) and not out.exists()


def test_compute_model_run_keys(capsys):
    assert main(["-g_p_s", "8", "--gpu_type", "H100", "--model_name", "llama3_8B", "--concurrency", "4",
                 "--num_requests", "12", "--prompt_tokens", "512", "--output_tokens", "16", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["configuration"]["kv_capacity_tokens"] > 100_000
    assert 0 < figures["ttft_p50_s"] < 1 and 0 < figures["tpot_p50_s"] < 0.1
    assert "goodput_requests_per_s" not in figures


def test_serve_search_no_layout_meets_the_slo(tmp_path, capsys):
    from simulator.serve.search import main as search

    out = tmp_path / "layouts.csv"
    # a TTFT of 0.1 ms: no 1024-token prefill of Llama 3 8B is that fast on any layout
    assert search(["-g_p_s", "8", "--gpu_type", "H100", "--model_name", "llama3_8B", "--gpus", "2", "--tp", "1,2",
                   "--slo_ttft", "0.0001", "--num_requests", "20", "--jobs", "1", "-q", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "no layout meets TTFT p99 <= 0.1 ms; the nearest: H100 x" in printed
    rows = out.read_text().splitlines()
    assert len(rows) == 3 and all(",0,False," in r for r in rows[1:])


def test_serve_search_finds_a_rate(tmp_path, capsys):
    from simulator.serve.search import main as search

    out = tmp_path / "layouts.csv"
    assert search(["-g_p_s", "8", "--gpu_type", "H100", "--model_name", "llama3_8B", "--gpus", "1",
                   "--slo_ttft", "2", "--slo_tpot", "0.1", "--num_requests", "50", "--jobs", "1", "-q",
                   "--prompt_tokens", "256", "--output_tokens", "32", "-o", str(out)]) == 0
    header, row = out.read_text().splitlines()
    values = dict(zip(header.split(","), row.split(",")))
    # the rate found meets the SLOs and is below the service rate (every request sent at once)
    assert values["meets_slo"] == "True"
    assert 0.25 <= float(values["max_qps"]) < float(values["saturation_qps"])
    assert float(values["ttft_s"]) <= 2 and float(values["tpot_s"]) <= 0.1


def test_serve_search_model_fits_no_layout():
    from simulator.serve.search import main as search

    with pytest.raises(ConfigError, match="no layout can serve llama3_70B: llama3_70B does not fit"):
        search(["-g_p_s", "8", "--gpu_type", "H100", "--model_name", "llama3_70B", "--gpus", "1", "--slo_ttft", "1",
                "--jobs", "1", "-q", "-o", "/nonexistent/never.csv"])


def test_warmup_requests_are_left_out(linear, capsys):
    # concurrency 1, prompt 10, 2 tokens: each request takes 0.02 (prefill 0.01 + 0.010) + 0.012 (decode) = 0.032;
    # leaving the first of three out: two requests from 0.032 to 0.096, TTFT 0.02 each
    assert main(serve(linear, "--concurrency", "1", "--num_requests", "3", "--prompt_tokens", "10", "--output_tokens",
                      "2", "--warmup_requests", "1", "--json")) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["completed"] == 2 and figures["duration_s"] == pytest.approx(0.064)
    assert figures["ttft_mean_s"] == pytest.approx(0.02) and figures["requests_per_s"] == pytest.approx(2 / 0.064)


def test_validation_serving_rows(capsys):
    from simulator.validation import main as validate

    assert validate(["--suite", "serving", "-k", "vLLM latency llama3_8B TP1 H200", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["suite"] == "serving" and row["metric"] == "e2e_mean_s" and row["published"] == pytest.approx(0.833421)
    assert row["error_pct"] == pytest.approx((row["simulated"] / row["published"] - 1) * 100)
    assert row["command"].startswith("python -m simulator serve -g_p_s 8 --gpu_type H200 --model_name llama3_8B")

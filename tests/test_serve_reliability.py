"""The serving and inference entries under adversarial input: outputs that would destroy an input or write through a
link, runs too large to finish (refused before they start, or stopped with one line), step-cost profiles of NaN,
infinity or zero, speculative decoding and prompts that could never be scheduled, traces with absurd cells, Vidur's
profile export and reading, and the inference generators' unbounded flags.  Every refusal is one line on stderr,
exit status 2, no traceback and nothing written."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import run_capped


def _run(*args: str, cwd, timeout: float = 60) -> subprocess.CompletedProcess:
    return run_capped(*args, cwd=cwd, timeout=timeout, memory_gib=3)


def _refused(proc: subprocess.CompletedProcess, *words: str) -> str:
    """The one line of a refusal (exit 2, no traceback, nothing on stdout)."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-800:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-800:]
    assert proc.stdout == ""
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def linear(tmp_path):
    path = tmp_path / "cost.json"
    path.write_text(json.dumps({"base_s": 0.01, "prefill_token_s": 0.001, "decode_seq_s": 0.002,
                                "kv_capacity_tokens": 1600, "replica_gpus": 1}))
    return path


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,3\n0.005,20,2\n")
    return path


def serve(cost, *flags: str) -> list[str]:
    return ["-m", "simulator", "serve", "--gpu_type", "H100", "--model_name", "llama3_8B", "--step_cost", str(cost),
            *flags]


def search(cost, *flags: str) -> list[str]:
    return ["-m", "simulator", "serve-search", "--gpu_type", "H100", "--model_name", "llama3_8B", "--step_cost",
            str(cost), "--gpus", "1", "--tp", "1", "--slo_ttft", "1", "--num_requests", "20", "--prompt_tokens", "100",
            "--output_tokens", "10", "-q", "--jobs", "1", *flags]


# ---- serve -o DIR: its files are guarded before the run ---------------------------------------------------------

def test_an_output_folder_holding_the_trace_or_the_profile_is_refused(tmp_path, linear, trace):
    """``-o DIR`` with ``--trace DIR/requests.csv`` (or ``--step_cost DIR/summary.json``) replaced the input with
    the run's table."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "requests.csv").write_text(trace.read_text())
    proc = _run(*serve(linear, "--trace", str(folder / "requests.csv"), "-o", str(folder), "-q"), cwd=tmp_path)
    _refused(proc, "requests.csv is also --trace")
    assert (folder / "requests.csv").read_text() == trace.read_text() and os.listdir(folder) == ["requests.csv"]
    (folder / "requests.csv").unlink()
    (folder / "summary.json").write_text(linear.read_text())
    proc = _run(*serve(folder / "summary.json", "--trace", str(trace), "-o", str(folder), "-q"), cwd=tmp_path)
    _refused(proc, "summary.json is also --step_cost")
    assert (folder / "summary.json").read_text() == linear.read_text() and os.listdir(folder) == ["summary.json"]


def test_a_link_in_the_output_folder_is_refused_and_kept(tmp_path, linear, trace):
    folder = tmp_path / "run"
    folder.mkdir()
    os.symlink(trace, folder / "steps.csv")
    proc = _run(*serve(linear, "--trace", str(trace), "-o", str(folder), "-q"), cwd=tmp_path)
    _refused(proc, "steps.csv is a symbolic link")
    assert os.path.islink(folder / "steps.csv") and os.listdir(folder) == ["steps.csv"]


@pytest.mark.parametrize("output, words", [("", ("empty path",)), ("t.csv", ("is a file, not a folder",)),
                                           ("t.csv/sub", ("is a file, not a folder",)),
                                           ("a" * 256 + "/x", ("256 bytes",))])
def test_an_output_folder_that_cannot_be_is_refused_before_the_run(tmp_path, linear, trace, output, words):
    before = sorted(os.listdir(tmp_path))
    proc = _run(*serve(linear, "--trace", str(trace), "-o", output, "-q"), cwd=tmp_path)
    _refused(proc, *words)
    assert sorted(os.listdir(tmp_path)) == before


# ---- bounded work: --max_items ---------------------------------------------------------------------------------

@pytest.mark.parametrize("flags, words", [
    (("--qps", "10", "--num_requests", "1e12"), ("--num_requests 1,000,000,000,000", "--max_items")),
    (("--qps", "10", "--num_requests", "1e8"), ("--num_requests 100,000,000", "--max_items")),
    (("--qps", "10", "--num_requests", "10", "--replicas", "1e12"), ("1,000,000,000,000 scheduler(s)", "--max_items")),
    (("--qps", "10", "--num_requests", "1000", "--max_items", "500"), ("--num_requests 1,000 is above", "--max_items")),
    (("--qps", "10", "--num_requests", "10", "--output_tokens", "1e7"), ("at least 10,000,000 replica steps",)),
])
def test_a_run_too_large_is_refused_before_it_starts(tmp_path, linear, flags, words):
    """``--num_requests 1e12`` ran out of memory with a traceback; 1e8 requests and 10^12 replicas ran for minutes."""
    proc = _run(*serve(linear, *flags, "-q"), cwd=tmp_path, timeout=30)
    _refused(proc, *words)


def test_a_run_whose_steps_pass_the_limit_stops_with_one_line(tmp_path, linear):
    # 50 requests of 1024 + 128 tokens on a replica of 1600 tokens of KV: one at a time, 129 steps each (6,450 steps),
    # while the estimate before the run can only count 128 decode steps
    out = tmp_path / "run"
    proc = _run(*serve(linear, "--qps", "10", "--num_requests", "50", "--max_items", "2000", "-o", str(out), "-q"),
                cwd=tmp_path)
    _refused(proc, "the run passed 2,000 items", "--max_items")
    assert not out.exists()
    ok = _run(*serve(linear, "--qps", "10", "--num_requests", "50", "--max_items", "7000", "-q"), cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr[-500:]


def test_a_trace_of_more_requests_than_the_limit_is_refused(tmp_path, linear):
    path = tmp_path / "big.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i},10,2\n" for i in range(30)))
    proc = _run(*serve(linear, "--trace", str(path), "--max_items", "20", "-q"), cwd=tmp_path)
    _refused(proc, "big.csv:22: more than 20 requests", "--max_items")


# ---- step-cost profiles, speculative decoding, the watermark -----------------------------------------------------

@pytest.mark.parametrize("body, words", [
    ('{"base_s": NaN, "prefill_token_s": 0.001}', ("base_s must be a finite non-negative number, got nan",)),
    ('{"base_s": Infinity}', ("base_s must be a finite non-negative number, got inf",)),
    ("{}", ("a prefill step would take 0 s",)),
    ('{"prefill_token_s": 0.01}', ("a decode step would take 0 s",)),
    ('{"base_s": 0.01, "replica_gpus": 1e300}', ("replica_gpus 1e+300 is beyond the largest integer",)),
    ('{"base_s": 0.01, "tokens_per_decode_step": 3, "speculative_tokens": 1}', ("more than the 1 + speculative",)),
])
def test_a_step_cost_profile_of_nan_infinity_or_zero_is_refused(tmp_path, trace, body, words):
    """NaN ended in a traceback, infinity ran with numpy's warnings and an all-zero profile served every request in
    0 s."""
    cost = tmp_path / "c.json"
    cost.write_text(body)
    _refused(_run(*serve(cost, "--trace", str(trace), "-q"), cwd=tmp_path), *words)


@pytest.mark.parametrize("flags, words", [
    (("--speculative_tokens", "1e12", "--acceptance_rate", "0.5"), ("more than a step's budget of 2048",)),
    (("--speculative_tokens", "2047", "--acceptance_rate", "1"), ("the 2048 a speculative decode step writes",)),
])
def test_speculative_decoding_that_no_step_can_hold_is_refused(tmp_path, linear, trace, flags, words):
    """Both ran into 'RuntimeError: 2 requests never finished' (a traceback) or accepted 10^12 draft tokens."""
    _refused(_run(*serve(linear, "--trace", str(trace), *flags, "-q"), cwd=tmp_path), *words)


@pytest.mark.parametrize("scheduler", ["vllm", "sarathi"])
def test_a_prompt_above_the_watermark_is_refused(tmp_path, linear, scheduler):
    """A prompt of 100 blocks on a replica of 100 blocks less the 1% watermark waited forever: 'RuntimeError: 1
    requests never finished'."""
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,1590,5\n")
    _refused(_run(*serve(linear, "--trace", str(path), "--scheduler", scheduler, "-q"), cwd=tmp_path),
             "needs 100 KV blocks", "--watermark")


@pytest.mark.parametrize("body, flags, words", [
    ({"base_s": 0.01, "prefill_token_s": 0.0001, "decode_seq_s": 0.002, "kv_capacity_tokens": 2000,
      "kv_bytes_per_token": 1e6}, ("--concurrency", "8", "--num_requests", "16", "--prompt_tokens", "100",
                                   "--output_tokens", "300", "--preemption", "swap", "--swap_gbps", "1e-300"),
     ("tokens swapped at --swap_gbps 1e-300", "check --swap_gbps")),
    ({"base_s": 1e300, "decode_seq_s": 1}, ("--qps", "1", "--num_requests", "2"), ("would take 1e+300 s",)),
    ({"base_s": 0.01, "decode_seq_s": 0.01, "transfer_s": 1e300},
     ("--qps", "1", "--num_requests", "2", "--replicas", "2", "--disaggregate", "1:1"), ("KV", "would take 1e+300 s")),
])
def test_a_step_or_transfer_that_would_swallow_the_clock_is_refused(tmp_path, body, flags, words):
    """--swap_gbps 1e-300 reported an E2E of 2.6e300 s (exit 0); a step or a KV transfer of 1e300 s did the same."""
    cost = tmp_path / "c.json"
    cost.write_text(json.dumps(body))
    _refused(_run(*serve(cost, *flags, "--json"), cwd=tmp_path), *words)


# ---- traces and arrivals -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("body, flags, words", [
    ("arrival_s,prompt_tokens,output_tokens\n0,1,1e30\n", (), ("t.csv:2: column 3 (output_tokens)", "beyond")),
    ("arrival_s,prompt_tokens,output_tokens\n1e300,1,1\n0,1,1\n", (), ("span 1e+300 s",)),
])
def test_absurd_trace_cells_are_refused(tmp_path, linear, body, flags, words):
    """1e30 tokens was cast to int64 (a numpy warning, a garbage length); an arrival at 1e300 s made every step
    vanish in the clock's rounding."""
    path = tmp_path / "t.csv"
    path.write_text(body)
    _refused(_run(*serve(linear, "--trace", str(path), *flags, "-q"), cwd=tmp_path), *words)


def test_a_rate_so_low_the_clock_loses_the_steps_is_refused(tmp_path, linear):
    _refused(_run(*serve(linear, "--qps", "1e-12", "--num_requests", "10", "-q"), cwd=tmp_path),
             "--qps 1e-12", "span")


def test_a_device_as_the_trace_or_the_profile_is_refused(tmp_path, linear, trace):
    """``--trace /dev/zero`` read a line without end until the memory ran out."""
    _refused(_run(*serve(linear, "--trace", "/dev/zero", "-q"), cwd=tmp_path, timeout=30), "/dev/zero: a device")
    _refused(_run(*serve("/dev/zero", "--trace", str(trace), "-q"), cwd=tmp_path, timeout=30), "/dev/zero: a device")


def test_a_header_with_a_byte_order_mark_is_read(tmp_path, linear):
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbfarrival_s,prompt_tokens,output_tokens\n0,10,3\n")
    proc = _run(*serve(linear, "--trace", str(path), "--json"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-500:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["completed"] == 1


# ---- serve-search ----------------------------------------------------------------------------------------------

def test_serve_search_outputs_and_flags_are_checked_first(tmp_path, linear):
    before = linear.read_text()
    _refused(_run(*search(linear, "-o", str(linear)), cwd=tmp_path), "is also --step_cost")
    assert linear.read_text() == before
    _refused(_run(*search(linear, "-o", "a.csv", "--html", "a.csv"), cwd=tmp_path), "--html a.csv is also -o/--output")
    os.symlink(linear, tmp_path / "l.csv")
    _refused(_run(*search(linear, "-o", "l.csv"), cwd=tmp_path), "is a symbolic link")
    _refused(_run(*search(linear, "-o", "a.csv", "--precision", "1e12"), cwd=tmp_path), "--precision")
    _refused(_run(*search(linear, "-o", "a.csv", "--max_qps", "1e-12"), cwd=tmp_path), "--max_qps 1e-12 is below")
    _refused(_run(*search(linear, "-o", "a.csv", "--num_requests", "1e12"), cwd=tmp_path, timeout=30), "--max_items")
    _refused(_run(*search(linear, "-o", "a.csv", "--gpus", "1e12"), cwd=tmp_path, timeout=30), "--max_items")
    _refused(_run(*search(linear, "-o", "a.csv", "--scheduler", ","), cwd=tmp_path), "--scheduler ','")
    assert sorted(os.listdir(tmp_path)) == ["cost.json", "l.csv"]


def test_serve_search_runs_no_more_workers_than_cpus(tmp_path, linear):
    """--jobs 1e12 started a worker process per layout, as many as asked."""
    proc = _run(*search(linear, "-o", "a.csv", "--jobs", "1e12"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-500:]
    assert "note: --jobs 1000000000000 is more than the" in proc.stderr and (tmp_path / "a.csv").exists()


# ---- Vidur's profiles ------------------------------------------------------------------------------------------

def _export(*flags: str) -> list[str]:
    return ["-m", "simulator.serve.vidur", "export", "--model_name", "llama3_8B", "--gpu_type", "H100", *flags]


@pytest.mark.parametrize("flags, words", [
    (("--tp", "0"), ("--tp '0': expected positive whole numbers",)),
    (("--tp", "-1"), ("--tp '-1'",)),
    (("--tp", "3"), ("none divides the 32 attention heads",)),
    (("--tp", "1", "--sku", "../../escape"), ("--sku '../../escape'",)),
    (("--tp", "1", "--network_device", "../x"), ("--network_device '../x'",)),
    (("--tp", "1", "--model_folder", "../x"), ("--model_folder '..'",)),
])
def test_vidur_export_flags_are_one_line_and_write_nothing(tmp_path, flags, words):
    """--tp 0 was a ZeroDivisionError, --tp -1 named --world_size, --tp 3 wrote empty tables, and --sku ../../x wrote
    outside -o."""
    _refused(_run(*_export(*flags, "-o", str(tmp_path / "out")), cwd=tmp_path), *words)
    assert os.listdir(tmp_path) == []


def test_vidur_export_refuses_a_link_and_reads_back_no_infinity(tmp_path):
    from simulator.options import TopoOptions
    from simulator.serve.vidur import vidur_cost_model
    from utils.errors import FormatError

    out = tmp_path / "out"
    proc = _run(*_export("--tp", "1,2", "-o", str(out)), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-500:]
    mlp = out / "compute" / "h100" / "llama3_8B" / "mlp.csv"
    lines = mlp.read_text().splitlines()
    column = lines[0].split(",").index("time_stats.mlp_up_proj.median")
    cells = lines[3].split(",")
    cells[column] = "inf"
    lines[3] = ",".join(cells)
    mlp.write_text("\n".join(lines) + "\n")
    with pytest.raises(FormatError, match="mlp.csv:4: column 'time_stats.mlp_up_proj.median' must be a finite"):
        vidur_cost_model(str(out), "llama3_8B", "H100", None, tp=1, options=TopoOptions(gpus_per_server=8))
    mlp.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(FormatError, match="not a text file"):
        vidur_cost_model(str(out), "llama3_8B", "H100", None, tp=1, options=TopoOptions(gpus_per_server=8))
    mlp.unlink()
    os.symlink(tmp_path / "elsewhere.csv", mlp)
    _refused(_run(*_export("--tp", "1,2", "-o", str(out)), cwd=tmp_path), "mlp.csv is a symbolic link")
    assert os.path.islink(mlp) and not (tmp_path / "elsewhere.csv").exists()


# ---- the inference generators ----------------------------------------------------------------------------------

_DECODE = ("DeepSeek-671B", "--phase", "decode", "--micro_batch", "32", "--world_size", "8",
           "--expert_model_parallel_size", "8", "--gpu_type", "H200")


@pytest.mark.parametrize("entry", ["workload_generator.SimAI_inference_workload_generator",
                                   "workload_generator.Vidur_workload_generator"])
def test_an_extreme_routing_skew_is_one_line(tmp_path, entry):
    """A skew past ~1074 made every expert but the first weigh 0: ZeroDivisionError in mocked_model/routing.py."""
    _refused(_run("-m", entry, *_DECODE, "--moe_routing_skew", "2000", "-o", str(tmp_path / "w"), cwd=tmp_path),
             "--moe_routing_skew must be between 0 (balanced) and 8")
    assert os.listdir(tmp_path) == []


def test_endless_aiob_timing_is_refused(tmp_path):
    """--aiob_enable --aiob_forward_loops 1e12 timed the first layer for ever."""
    _refused(_run("-m", "workload_generator.SimAI_inference_workload_generator", *_DECODE, "--aiob_enable",
                  "--aiob_forward_loops", "1e12", "-o", str(tmp_path / "w.txt"), cwd=tmp_path, timeout=30),
             "--aiob_forward_loops 1,000,000,000,000")
    assert os.listdir(tmp_path) == []

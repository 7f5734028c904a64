"""Progress bars (issue 21, item 14): AIOB timing, generation and simulation draw a tqdm bar on stderr when it
is a terminal, and nothing at all otherwise."""

from __future__ import annotations

import io
import sys

import pytest

from utils import progress as progress_module
from utils.cli import parse_job


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _terminal(monkeypatch) -> FakeTerminal:
    """stderr as a terminal, in the test's body (pytest's own capture replaces sys.stderr after fixtures run)."""
    fake = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", fake)
    monkeypatch.setattr(progress_module, "DELAY_S", 0.0)  # draw at once (the real delay is 2 s)
    return fake


def test_no_bar_off_a_terminal(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    bar = progress_module.progress(range(3), desc="x")
    assert bar.disable and list(bar) == [0, 1, 2]
    assert sys.stderr.getvalue() == ""


def test_bar_waits_two_seconds(monkeypatch):
    """A phase shorter than DELAY_S draws nothing even on a terminal."""
    fake = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", fake)
    assert progress_module.DELAY_S == 2.0
    for _ in progress_module.progress(range(100), desc="quick"):
        pass
    assert "quick" not in fake.getvalue()


def test_generation_bar(monkeypatch):
    tty_stderr = _terminal(monkeypatch)
    from workload_generator.entry import build_workload

    job, _ = parse_job(["--model_name", "gpt_tiny", "--world_size", "2", "--tensor_model_parallel_size", "2",
                        "--global_batch", "8"], "p", "d")
    build_workload(job)
    assert "generating (megatron)" in tty_stderr.getvalue()


def test_simai_model_bar(monkeypatch, examples, tmp_path):
    tty_stderr = _terminal(monkeypatch)
    from simulator.cli import main

    assert main(["-w", str(examples / "simai_micro_allreduce.txt"), "-g", "8", "-g_p_s", "8", "-n_p_s", "8", "-q",
                 "-r", str(tmp_path) + "/"]) == 0
    assert "simai model" in tty_stderr.getvalue()


def test_whole_job_bar_counts_stages(monkeypatch, tmp_path):
    tty_stderr = _terminal(monkeypatch)
    from simulator.cli import main
    from topo.gen import main as topo_main

    topo = tmp_path / "t.txt"
    assert topo_main(["-topo", "Spectrum-X", "-g", "8", "-o", str(topo)]) == 0
    assert main(["-t", str(topo), "--gpu_type", "H100", "--model_name", "gpt_tiny", "--world_size", "8",
                 "--pipeline_model_parallel", "2", "--global_batch", "8", "-q", "-r", str(tmp_path) + "/"]) == 0
    assert "building stages" in tty_stderr.getvalue() and "/2 " in tty_stderr.getvalue()


def test_aiob_bar_names_the_module(monkeypatch):
    tty_stderr = _terminal(monkeypatch)
    pytest.importorskip("torch")
    from mocked_model.aiob.measure import measure_job

    job, _ = parse_job(["--model_name", "gpt_tiny", "--world_size", "1", "--seq_length", "32", "--aiob_enable"], "p", "d")
    lines: list[str] = []
    compute = measure_job(job, device="cpu", log=lines.append)
    drawn = tty_stderr.getvalue()
    assert "AIOB" in drawn and "atten_qkv" in drawn  # the module being timed
    assert compute.sections and any(line.startswith("aiob: atten_qkv") for line in lines)

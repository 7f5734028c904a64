"""Unbounded work (issue 21, item 5): every entry estimates the items a job would generate before building it
and refuses one above ``--max_items`` with the estimate and the CSV size, exit status 2, and no file.

The refusals run in subprocesses capped at 2 GiB of address space and 120 s, so that a missing check fails
the test (MemoryError, or a timeout) instead of eating the machine.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from utils.cli import parse_job
from workload_generator import limits


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _run(*args: str, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
                          preexec_fn=_capped)


MEGATRON = ["--model_name", "gpt_7B", "--world_size", "8", "--tensor_model_parallel_size", "8"]


@pytest.mark.parametrize("args, needle", [
    (["-m", "workload_generator.generate_megatron_workload", *MEGATRON, "--num_layers", "1e7", "-o", "out.csv"],
     "--num_layers (10,000,000)"),
    (["-m", "workload_generator.generate_megatron_workload", *MEGATRON, "--global_batch", "1e9", "-o", "out.csv"],
     "--global_batch (1,000,000,000 micro-batches per iteration)"),
    (["aicb.py", *MEGATRON, "--global_batch", "1e9", "--workload_only", "-o", "out.csv"], "--global_batch"),
    (["aicb.py", "--frame", "collective_test", "--iter_num", "1e8", "--workload_only", "-o", "out.csv"],
     "--iter_num (100,000,000)"),
    (["-m", "workload_generator.SimAI_training_workload_generator", *MEGATRON, "--global_batch", "1e9", "-o", "out.txt"],
     "--global_batch"),
    (["-m", "workload_generator.generate_deepspeed_stage3_workload", "--model_name", "llama_7B", "--world_size", "8",
      "--global_batch", "1e9", "-o", "out.csv"], "the ZeRO-3 workload would hold about"),
    (["-m", "workload_generator.generate_deepspeed_stage1_2_workload", "--stage", "2", "--model_name", "llama_7B",
      "--world_size", "8", "--global_batch", "8", "--num_layers", "1e7", "-o", "out.csv"], "the ZeRO-2 workload"),
    (["aicb.py", "--frame", "Inference", "-m", "deepseek-671B", "--gpu_type", "H200", "--epoch_num", "1e9",
      "--workload_only", "-o", "out.csv"], "--epoch_num"),
    (["-m", "simulator", "--gpu_type", "H100", *MEGATRON, "--global_batch", "1e9", "-g_p_s", "8", "-r", "out-"],
     "the workload of pipeline rank 0 would hold about"),
    (["-m", "simulator", "--gpu_type", "H100", *MEGATRON, "--num_layers", "1e7", "--model", "topo", "-g_p_s", "8",
      "-r", "out-"], "--num_layers (10,000,000)"),
])
def test_entries_refuse_unbounded_jobs(tmp_path, args, needle):
    args = [str(ROOT / "aicb.py") if a == "aicb.py" else a for a in args]
    proc = _run(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-500:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-500:]
    assert "items (" in lines[0] and "as an AICB workload CSV), above the limit of 5,000,000 (--max_items)" in lines[0]
    assert needle in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_topo_model_plays_a_long_pipeline_within_the_limit(tmp_path):
    """--model topo with pipeline stages builds the micro-batches it plays before a cycle repeats: 100,000
    micro-batches of a 2-stage job (about 18 million items if generated in full) simulate under the limit."""
    from simulator.cli import main
    from topo.gen import main as topo_main

    topo = tmp_path / "t16"
    assert topo_main(["-topo", "Spectrum-X", "-g", "16", "-o", str(topo)]) == 0
    assert main(["-t", str(topo), "--gpu_type", "H100", *MEGATRON[:2], "--world_size", "16", "--tensor_model_parallel_size",
                 "8", "--pipeline_model_parallel", "2", "--global_batch", "100000", "-q", "-r", str(tmp_path) + "/"]) == 0


def _items(argv: list[str]) -> tuple[int, int]:
    """(estimate, actual) items of generate_megatron_workload's job."""
    from workload_generator.entry import build_workload

    job, _ = parse_job(argv, "p", "d")
    return limits.megatron_items(job, [job.parallel.pp_rank]), len(build_workload(job))


@pytest.mark.parametrize("argv", [
    ["--model_name", "gpt_tiny", "--world_size", "4", "--tensor_model_parallel_size", "2", "--global_batch", "16"],
    ["--model_name", "gpt_tiny", "--world_size", "8", "--tensor_model_parallel_size", "2", "--pipeline_model_parallel",
     "2", "--num_layers_per_virtual_pipeline_stage", "1", "--global_batch", "16", "--computation_enable",
     "--enable_sequence_parallel", "--pp_rank", "1"],
    ["--model_name", "gpt_tiny", "--world_size", "4", "--global_batch", "8", "--computation_enable",
     "--recompute_granularity", "full", "--epoch_num", "3", "--overlap_grad_reduce"],
    ["--model_name", "Mixtral_8x7B", "--num_layers", "4", "--world_size", "8", "--tensor_model_parallel_size", "2",
     "--expert_model_parallel_size", "4", "--enable_sequence_parallel", "--global_batch", "8", "--computation_enable"],
    ["--frame", "DeepSeek", "--model_name", "deepseek_v2_lite", "--num_layers", "4", "--world_size", "8",
     "--expert_model_parallel_size", "8", "--global_batch", "16", "--computation_enable"],
])
def test_megatron_estimate_is_close(argv):
    """The estimate is an upper bound within a factor of 2: the layers are counted exactly, the rest of a
    micro-batch and the step are allowances."""
    estimate, actual = _items(argv)
    assert actual <= estimate <= 2 * actual, (estimate, actual)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_deepspeed_estimate_is_an_upper_bound(stage):
    from workload_generator.deepspeed import DeepSpeedConfig, deepspeed_workload

    job, values = parse_job(["--frame", "DeepSpeed", "--stage", str(stage), "--model_name", "llama_7B", "--num_layers",
                             "4", "--world_size", "8", "--global_batch", "32", "--computation_enable"], "p", "d")
    actual = len(deepspeed_workload(job, DeepSpeedConfig.from_values(values))())
    limits.check_deepspeed(job, stage)  # far below the limit
    job_small = job.training.extra | {"max_items": actual - 1}
    with pytest.raises(limits.ConfigError, match=f"above the limit of {actual - 1:,}"):
        limits.check_items(actual, limits.limit_of(job_small), "x", "y")
    p = job.parallel
    estimate = p.ga * (limits.DEEPSPEED_PER_LAYER[stage] * 4 + limits.PER_MICRO_BATCH) + limits.DEEPSPEED_PER_LAYER[stage] * 4
    assert actual <= estimate <= 3 * actual


def test_sweep_estimate_is_exact(tmp_path):
    from workload_generator.collective_test import collective_test_workload

    job, _ = parse_job(["--frame", "collective_test", "--begin_size", "1K", "--end_size", "1M", "--iter_num", "7",
                        "--world_size", "2"], "p", "d")
    # 11 sizes (1 KiB .. 1 MiB, doubling) x 7 iterations + 11 epoch_end markers + the init barrier and its marker
    assert len(collective_test_workload(job)) == 11 * 7 + 11 + 2


def test_max_items_raises_the_limit(tmp_path, capsys):
    """gpt_tiny on tp 2 with 1,000 micro-batches: each carries 4 layers x 4 TP all-reduces (2 forward, 2 backward)
    = 16 items, 5 of the embedding, output layer and loss and 5 get_batch broadcasts: 26 x 1,000 = 26,000 items
    plus the step's allowance (26,056 estimated, 26,008 generated).  Refused under --max_items 20000, written
    under --max_items 30000."""
    from utils.cli import run_main
    from workload_generator.generate_megatron_workload import main

    out = tmp_path / "w.csv"
    argv = ["--model_name", "gpt_tiny", "--world_size", "2", "--tensor_model_parallel_size", "2", "--global_batch", "1000",
            "-o", str(out)]
    with pytest.raises(SystemExit) as exc:
        run_main(lambda: main([*argv, "--max_items", "20000"]), "p")
    assert exc.value.code == 2 and not out.exists()
    err = capsys.readouterr().err
    assert "would hold about 26,056 items (" in err and "above the limit of 20,000 (--max_items)" in err
    assert main([*argv, "--max_items", "30000"]) == 0 and out.exists()
    assert "(26008 items, pipeline rank 0)" in capsys.readouterr().out

"""Replays on a CUDA device over NCCL (``torchrun --nproc_per_node 1``); skipped without one."""

from __future__ import annotations

import subprocess
import sys

import pytest

from log_analyzer import Log
from tests.conftest import ROOT
from tests.test_replay import TINY_NAME, assert_bandwidths, base_env, free_port
from utils.workload import Workload

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def torchrun(cwd, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", "--master_port", str(free_port()),
           str(ROOT / "aicb.py"), *args]
    return subprocess.run(cmd, cwd=cwd, env=base_env(), capture_output=True, text=True, timeout=300)


def test_collective_sweep_over_nccl(tmp_path):
    proc = torchrun(tmp_path, "--frame", "collective_test", "--test_comm", "all_gather", "--begin_size", "1M",
                    "--end_size", "64M", "--iter_num", "5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "over nccl (cuda:0)" in proc.stdout and "# all_gather over 1 ranks" in proc.stdout
    log = Log.load(tmp_path / "results" / "comm_logs" / "collective_test_all_gather_1n_log.csv")
    assert sorted(set(log.measured["msg_size"])) == [1 << s for s in range(20, 27)]
    assert (log.measured["elapsed_ms"] > 0).all()
    assert_bandwidths(Workload.load(log.path).items)


def test_megatron_replay_with_gemms_on_the_gpu(tmp_path):
    proc = torchrun(tmp_path, "--frame", "Megatron", "--model_name", "gpt_tiny", "--seq_length", "64",
                    "--num_layers", "2", "--global_batch", "2", "--computation_enable", "--compute_mode", "gemm")
    assert proc.returncode == 0, proc.stderr[-3000:]
    name = TINY_NAME.format(n=1, c=True).replace("_4n", "_1n").replace("_sp_True", "_sp_False")
    log = Log.load(tmp_path / "results" / "comm_logs" / (name + "_log.csv"))
    comp = log.measured[log.measured["comm_type"].astype(str) == "computation"]
    assert len(comp) > 0 and (comp["elapsed_ms"] > 0).all()

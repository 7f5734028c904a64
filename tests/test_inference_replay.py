"""``aicb.py --frame Inference``: the workload CSV, and a real 4-process replay over gloo (tp 2 x pp 2,
an EP group of 2 spanning the TP ranks) logging every operation with busbw as for training."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_cli
from tests.test_inference_aiob import TINY_DEEPSEEK
from tests.test_replay import assert_bandwidths, base_env, free_port, row_signature, split_log
from utils.workload import CommGroup, CommType, Workload

ARGS = ["--frame", "Inference", "-m", "DeepSeek-tiny", "--phase", "decode", "--seq_length", "64", "--micro_batch", "4",
        "--tensor_model_parallel_size", "2", "--pipeline_model_parallel", "2", "--expert_model_parallel_size", "2",
        "--gpu_type", "H100"]
NAME = "inference_DeepSeek-tiny-world_size4-tp2-pp2-ep2-bs4-seq64-decode"


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY_DEEPSEEK))
    return str(path)


def test_workload_only_writes_the_stage_csv(tmp_path, config):
    out = tmp_path / "w.csv"
    proc = run_cli("aicb.py", *ARGS, "--inference_config", config, "--world_size", "4", "--pp_rank", "1",
                   "--workload_only", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    items = Workload.load(out).items
    # stage 1 (layers 2..3, both MoE): a receive from stage 0 first, no send; per layer the TP all-reduce
    # (2 x 4 tokens x 256 hidden = 2,048 B), dispatch (2 x 4 x 256 x top-2 / tp 2 = 2,048 B x 0.515625 = 1,056 B)
    # and combine (2,048 B) over the EP group of 2 (= the TP group: ep 2 / tp 2 = one TP group)
    comm = [i for i in items if i.is_comm]
    assert comm[0].comm_type is CommType.irecv and comm[0].src == 0
    assert [(i.comm_type, i.msg_size) for i in comm[1:4]] == [
        (CommType.all_reduce, 2048), (CommType.all_to_all, 1056), (CommType.all_to_all, 2048)]
    assert comm[2].comm_group is CommGroup.ep_tp_group and comm[-1].comm_type is CommType.all_gather  # logits
    assert all(i.time_ns for i in items if i.is_computation)     # compute-model times for the H100


def test_aiob_is_refused_for_the_replay(config):
    proc = run_cli("aicb.py", *ARGS, "--inference_config", config, "--world_size", "4", "--aiob_enable")
    assert proc.returncode == 2 and "--comp_filepath" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_replay_over_gloo(tmp_path, config):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "4", "--master_port", str(free_port()),
           str(ROOT / "aicb.py"), *ARGS, "--inference_config", config, "--epoch_num", "2"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=base_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    logged = split_log(Workload.load(tmp_path / "results" / "comm_logs" / f"{NAME}_log.csv").items)
    expected = Workload.load(tmp_path / "results" / "mocked_workload" / f"{NAME}_workload.csv").iterations()
    assert len(logged) == len(expected) == 3        # init + 2 steps (the warm-up step is not logged)
    for rows, items in zip(logged[1:], expected[1:]):
        assert [row_signature(r) for r in rows] == [row_signature(i) for i in items]
    # stage 0 (rank 0's log): layer 0 dense (attention AR, MLP AR), layer 1 MoE (AR, dispatch, combine), the
    # embedding's AR and the send to stage 1: 7 collectives, each with busbw = algbw x nccl-tests' factor
    assert assert_bandwidths(logged[1]) == 2 + 3 + 1 + 1

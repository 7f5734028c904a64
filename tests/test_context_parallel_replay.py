"""A context-parallel job replayed over gloo by 4 CPU processes (tp 2 x cp 2): ring attention's batched sends and
receives in the CP group, the CP loss all-reduce and the dp-cp gradient all-reduce run, in the workload's order."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.test_replay import base_env, free_port, row_signature, split_log, tiny_workload
from utils.workload import CommGroup, CommType, Workload

pytestmark = pytest.mark.slow

CP2 = ["--frame", "Megatron", "--model_name", "gpt_tiny", "--tensor_model_parallel_size", "2", "--context-parallel-size",
       "2", "--enable_sequence_parallel", "--seq_length", "64", "--num_layers", "2", "--global_batch", "2"]
"""gpt_tiny with 2 layers on 4 ranks: tp 2 x cp 2 (dp 1), ring attention (--cp_comm_type p2p), 2 micro-batches."""
LOG = "megatron_gpt_tiny_sp_True_iteration_1_computationEnable_False_4n_log.csv"


@pytest.mark.parametrize("comm_type", ["p2p", "a2a"])
def test_cp2_job_replays_over_gloo(tmp_path, comm_type):
    args = [*CP2, "--cp_comm_type", comm_type]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "4", "--master_port", str(free_port()),
           str(ROOT / "aicb.py"), *args]
    proc = subprocess.run(cmd, cwd=tmp_path, env=base_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    logged = split_log(Workload.load(tmp_path / "results" / "comm_logs" / LOG).items)
    expected = tiny_workload("--cp_comm_type", comm_type, base=CP2).iterations()
    assert len(logged) == len(expected) == 2
    for rows, items in zip(logged, expected):
        assert [row_signature(r) for r in rows] == [row_signature(i) for i in items]
    iteration = logged[1]
    groups = {(r.comm_type, r.comm_group) for r in iteration}
    # the gradients over dp x cp (2 ranks: dp 1 x cp 2) and the loss over cp, whatever the attention's traffic
    assert (CommType.all_reduce, CommGroup.dp_cp_group) in groups and (CommType.all_reduce, CommGroup.cp_group) in groups
    if comm_type == "p2p":
        # 2 layers x 2 micro-batches x (forward cp - 1 = 1 transfer, backward cp = 2: K/V, then dK/dV): 12 sends
        sends = [r for r in iteration if r.comm_type is CommType.isend]
        assert len(sends) == 2 * 2 * 3 and {r.comm_group for r in sends} == {CommGroup.cp_group}
        # gpt_tiny: hidden 256 over 8 heads of 32, 4 per TP rank; 64 / 2 = 32 local tokens: K and V are
        # 32 x 4 x (32 + 32) x 2 bytes = 16 KiB per transfer (backward's first and last transfers alike at cp 2)
        assert {r.msg_size for r in sends} == {32 * 4 * 64 * 2}
    else:
        a2a = [r for r in iteration if r.comm_type is CommType.all_to_all]
        # per layer and micro-batch Q, K, V, O forward and dO, dQ, dK, dV backward
        assert len(a2a) == 2 * 2 * 8 and {r.comm_group for r in a2a} == {CommGroup.cp_group}


EP_CP = ["--frame", "Megatron", "--model_name", "gpt_tiny", "--context-parallel-size", "2", "--moe_enable",
         "--num_experts", "4", "--moe_router_topk", "2", "--expert_model_parallel_size", "2", "--seq_length", "64",
         "--num_layers", "2", "--global_batch", "2"]
"""gpt_tiny as MoE on 4 ranks: cp 2 x dp 2, ep 2; Megatron core folds cp into expert dp (tp x cp x dp / ep = 2)."""


def test_an_expert_parallel_job_with_context_parallelism_replays_over_gloo(tmp_path):
    """Before: the replay refused this valid job ('comm_group_size 2, but the ep_dp_group of this layout has 1 ranks'):
    its groups came from the dense rank generator, where ep splits dp and cp stays outside expert dp."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "4", "--master_port", str(free_port()),
           str(ROOT / "aicb.py"), *EP_CP]
    proc = subprocess.run(cmd, cwd=tmp_path, env=base_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = "megatron_gpt_tiny_sp_False_iteration_1_computationEnable_False_4n_log.csv"
    logged = split_log(Workload.load(tmp_path / "results" / "comm_logs" / log).items)
    expected = tiny_workload(base=EP_CP).iterations()
    assert [[row_signature(r) for r in rows] for rows in logged] == [[row_signature(i) for i in items] for items in expected]
    groups = {(r.comm_type, r.comm_group, r.comm_group_size) for r in logged[1]}
    assert (CommType.all_to_all, CommGroup.ep_group, 2) in groups and (CommType.all_reduce, CommGroup.ep_dp_group, 2) in groups

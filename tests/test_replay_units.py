"""The replay's parts that need no second process: the plan (groups, roots, peers, batching,
buffers), the process-group lists, the flags, the sweep workload, the watchdog."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from replay.groups import group_ranks, member_group
from replay.plan import EMULATABLE, parse_emulate, plan_workload
from tests.conftest import ROOT
from utils.cli import parse_job
from utils.errors import ConfigError, UserError
from utils.rank_generator import RankGenerator
from utils.workload import CommGroup, CommType, WorkItem, Workload
from workload_applyer import options_from, resolve_backend
from workload_generator.collective_test import collective_test_workload, sweep_sizes
from workload_generator.entry import build_workload

G, T = CommGroup, CommType


def tiny(*extra: str, pp_rank: int = 0) -> Workload:
    job, _ = parse_job(["--model_name", "gpt_tiny", "--tensor_model_parallel_size", "2", "--pipeline_model_parallel",
                        "2", "--enable_sequence_parallel", "--seq_length", "64", "--global_batch", "2", "--world_size",
                        "4", *extra], "t", "")
    return build_workload(job, pp_rank=pp_rank)


def plan_of(items: list[WorkItem], rank: int = 0, **sizes: int):
    return plan_workload(Workload(items=items), RankGenerator(**sizes), rank, "bfloat16", "w.csv")


# ---- groups ------------------------------------------------------------------------------------

def test_group_lists_follow_megatron():
    gen = RankGenerator(tp=2, dp=2, pp=4)   # 16 ranks
    assert group_ranks(gen, G.embedding_group)[0] == [0, 12]    # first and last stage of pipeline 0
    assert group_ranks(gen, G.mp_group)[0] == [0, 1, 4, 5, 8, 9, 12, 13]   # tp x pp of dp replica 0
    assert group_ranks(gen, G.all_nodes) == [list(range(16))]
    assert member_group(gen, 4, G.embedding_group) is None       # a middle stage
    assert member_group(gen, 13, G.embedding_group) == (1, [1, 13])
    assert group_ranks(RankGenerator(tp=2), G.embedding_group) == [[0], [1]]   # pp 1: one rank


# ---- the plan -------------------------------------------------------------------------------------

def test_megatron_p2p_calls_become_batches():
    workload = tiny()
    plan = plan_workload(workload, RankGenerator(tp=2, pp=2), 0, "bfloat16", "w")
    items = workload.items
    p2p = [[items[i] for i in step.indexes] for block in plan.blocks for step in block if step.kind == "p2p"]
    pairs = [b for b in p2p if b[0].stage == "forward_step.send_forward_recv_backward"]
    assert pairs and all([i.additional for i in b] == ["send_next", "recv_next"] for b in pairs)
    assert all(len(b) == 1 for b in p2p if b[0].stage == "forward_step.send_forward")
    # rank 0's pipeline peer is rank 2 (tp 2: stages are 2 ranks apart)
    assert {plan.of(i).peer for b in p2p for i in b} == {2}


def test_a_repeated_direction_starts_a_new_batch():
    send = WorkItem(T.isend, G.pp_group, 2, 64, "s", dst=1, additional="send_next")
    recv = WorkItem(T.irecv, G.pp_group, 2, 64, "s", src=1, additional="recv_next")
    plan = plan_of([send, recv, send, WorkItem(T.epoch_end)], pp=2)
    assert [s.indexes for s in plan.blocks[0]] == [(0, 1), (2,)]
    assert plan.aux_bytes == 64 and plan.main_bytes == 64


def test_interleaved_p2p_wraps_around_the_ring():
    workload = tiny("--num_layers", "4", "--num_layers_per_virtual_pipeline_stage", "1")
    plan = plan_workload(workload, RankGenerator(tp=2, pp=2), 0, "bfloat16", "w")
    recv_prev = [plan.of(i) for i in workload.items if i.additional == "recv_prev"]
    assert recv_prev and {r.peer for r in recv_prev} == {2}   # stage 0 receives from the last stage


def test_roots_are_translated_to_global_ranks():
    items = [WorkItem(T.broadcast, G.dp_group, 2, 4096, "b", src=1), WorkItem(T.reduce, G.dp_group, 2, 4096, "r", dst=1),
             WorkItem(T.broadcast, G.tp_group, 2, 4096, "b0")]
    plan = plan_of(items, rank=1, tp=2, dp=2)   # dp group of rank 1 is [1, 3]
    assert [plan.of(i).root for i in items] == [3, 3, 0]


def test_p2p_peer_from_the_direction_when_the_file_has_none():
    # AICB's own files carry the direction but no peer
    item = WorkItem(T.irecv, G.pp_group, 4, 64, "x", additional="recv_prev")
    assert plan_of([item], rank=0, pp=4).of(item).peer == 3


@pytest.mark.parametrize("item, needle", [
    (WorkItem(T.all_reduce, G.tp_group, 8, 64, "fwd"), "item 0 (all_reduce, tp_group, 64 B, stage fwd): comm_group_size 8"),
    (WorkItem(T.isend, G.pp_group, 2, 64, "p"), "needs its peer"),
    (WorkItem(T.broadcast, G.tp_group, 2, 64, "b", src=2), "root 2 is outside the 2-rank tp_group"),
    (WorkItem(T.isend, G.pp_group, 2, 64, "p", dst=0), "not another member"),
])
def test_bad_items_name_the_file_and_item(item, needle):
    with pytest.raises(UserError, match="^w.csv: ") as err:
        plan_of([item], tp=2, pp=2)
    assert needle in str(err.value)


def test_middle_stages_are_not_in_the_embedding_group():
    item = WorkItem(T.all_reduce, G.embedding_group, 2, 64, "emb")
    with pytest.raises(UserError, match="rank 1 is in no embedding_group"):
        plan_of([item], rank=1, pp=4)


def test_element_counts_and_buffers():
    odd = WorkItem(T.all_gather, G.tp_group, 2, 1001, "ag")      # not whole bf16 elements per rank
    even = WorkItem(T.reduce_scatter, G.tp_group, 2, 4096, "rs")
    a2a = WorkItem(T.all_to_all, G.tp_group, 2, 8192, "a2a")
    plan = plan_of([odd, even, a2a], tp=2)
    assert (plan.of(odd).element, plan.of(odd).nbytes) == ("uint8", 1002)
    assert (plan.of(even).element, plan.of(even).nbytes) == ("bfloat16", 4096)
    # main holds the whole buffer of the largest item; aux the all-to-all output (8192) > the scatter halves
    assert plan.main_bytes == 8192 and plan.aux_bytes == 8192
    assert plan.of(even).factor == 0.5


def test_blocks_split_at_epoch_end():
    ar = WorkItem(T.all_reduce, G.tp_group, 2, 64, "a")
    plan = plan_of([ar, WorkItem(T.epoch_end), ar, ar, WorkItem(T.epoch_end)], tp=2)
    assert [[s.indexes for s in b] for b in plan.blocks] == [[(0,)], [(2,), (3,)]]
    assert plan.ended == [True, True]


# ---- flags and the sweep ------------------------------------------------------------------------------

def test_emulate_flag():
    assert parse_emulate("all") == frozenset(EMULATABLE)
    assert parse_emulate("reduce_scatter_tensor, isend") == {"reduce_scatter", "p2p"}
    with pytest.raises(ValueError, match="broadcast has no emulation"):
        parse_emulate("broadcast")


def test_options_and_backend():
    job, values = parse_job(["--frame", "collective_test", "--warmup", "3", "--timeout", "12.5"], "t", "")
    options = options_from(job, values)
    assert (options.warmup, options.timeout_s, options.backend, options.dtype) == (3, 12.5, "auto", "bfloat16")
    assert resolve_backend("auto", False) == "gloo" and resolve_backend("auto", True) == "nccl"
    with pytest.raises(ConfigError, match="--backend nccl needs a CUDA device"):
        resolve_backend("nccl", False)
    with pytest.raises(SystemExit):  # refused as the flags are parsed (utils.cli.positive_number)
        parse_job(["--frame", "collective_test", "--timeout", "0"], "t", "")
    job, values = parse_job(["--frame", "collective_test"], "t", "")
    with pytest.raises(ConfigError, match="--timeout must be a positive"):  # the API's own check stays
        options_from(job, {**values, "timeout": 0})


def test_sweep_workload_like_nccl_tests():
    assert sweep_sizes(1 << 20, 1 << 30, 2)[-1] == 1 << 30 and len(sweep_sizes(1 << 20, 1 << 30, 2)) == 11
    assert sweep_sizes(1024, 5000, 4) == [1024, 4096]
    job, _ = parse_job(["--frame", "collective_test", "--world_size", "8", "--tensor_model_parallel_size", "2",
                        "--test_comm", "reduce_scatter_tensor", "--begin_size", "1K", "--end_size", "4K",
                        "--iter_num", "3"], "t", "")
    workload = collective_test_workload(job)
    blocks = workload.iterations()
    assert [i.comm_type for i in blocks[0]] == [T.barrier]
    assert [[i.msg_size for i in b] for b in blocks[1:]] == [[1024] * 3, [2048] * 3, [4096] * 3]
    assert {(i.comm_type, i.comm_group, i.comm_group_size) for b in blocks[1:] for i in b} == {(T.reduce_scatter, G.dp_group, 4)}
    job, _ = parse_job(["--frame", "collective_test", "--test_comm", "isend"], "t", "")
    with pytest.raises(ConfigError, match="--test_comm 'isend' is not a collective"):
        collective_test_workload(job)


def test_generate_collective_test_entry(tmp_path):
    out = tmp_path / "s.csv"
    proc = subprocess.run([sys.executable, "-m", "workload_generator.generate_collective_test", "--test_comm",
                           "all_to_all", "--begin_size", "1K", "--end_size", "2K", "--iter_num", "2", "--world_size",
                           "4", "--output", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [i.msg_size for i in Workload.load(out) if i.comm_type is T.all_to_all] == [1024, 1024, 2048, 2048]


# ---- the watchdog (no torch: fast) ------------------------------------------------------------------

WATCHDOG = """
import os, signal, sys, time
sys.path.insert(0, {root!r})
from replay.watchdog import Watchdog
dog = Watchdog(0.3, "p: ", describe=lambda w: f"operation {{w}}", on_fatal=lambda: "; log kept", grace_s=0).start()
dog.watch(7)
if sys.argv[1] == "signal":
    os.kill(os.getpid(), signal.SIGTERM)
time.sleep(20)
"""


@pytest.mark.parametrize("mode, status, message", [
    ("hang", 1, "p: operation 7 did not complete within --timeout 0.3 s (a rank died, hangs, or never arrived); log kept"),
    ("signal", 143, "p: stopped by SIGTERM during operation 7; log kept"),
])
def test_watchdog_ends_a_hang_or_a_signal_with_one_line(mode, status, message):
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", WATCHDOG.format(root=str(ROOT)), mode], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == status and proc.stderr.strip() == message, proc.stderr
    assert time.monotonic() - start < 10

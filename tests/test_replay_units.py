"""The replay's parts that need no second process: the plan (groups, roots, peers, batching,
buffers), the process-group lists, the flags, the sweep workload, the watchdog."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from replay.groups import group_ranks, member_group
from replay.plan import EMULATABLE, parse_emulate, plan_workload
from tests.conftest import ROOT, process_alive
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


@pytest.mark.parametrize("layout", [
    ["--context-parallel-size", "2", "--expert_model_parallel_size", "2"],             # cp folded into expert dp
    ["--tensor_model_parallel_size", "2", "--expert_model_parallel_size", "2", "--expert_tensor_parallel_size", "1",
     "--enable_sequence_parallel"],                                                      # etp != tp
])
def test_the_replay_plans_moe_layouts_with_the_jobs_expert_groups(layout):
    """Before: the replay grouped ranks with the dense RankGenerator alone (ep splitting dp), so a valid MoE job with
    context parallelism (expert dp = tp x cp x dp / (etp x ep)) or an expert tensor-parallel size other than tp was
    refused: 'comm_group_size 2, but the ep_dp_group (or ep_group) of this layout has 1 ranks'.  The groups now come
    from the job's layout (utils.parallel.ParallelConfig.group_ranks), as the generator's and the simulator's do."""
    job, _ = parse_job(["--model_name", "gpt_tiny", "--world_size", "4", "--moe_enable", "--num_experts", "4",
                        "--moe_router_topk", "2", "--global_batch", "4", *layout], "t", "")
    workload = build_workload(job)
    for rank in range(4):
        plan = plan_workload(workload, job.parallel, rank, "bfloat16", "w")
        for item in workload.items:
            resolved = plan.resolved.get(id(item))
            if resolved is not None and item.comm_group is not None and item.comm_group.value != "embedding_group":
                assert list(resolved.ranks) == list(job.parallel.group_of(rank, item.comm_group.value))


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


@pytest.mark.parametrize("flag, value", [("--timeout", "inf"), ("--timeout", "nan"), ("--join_timeout", "inf"),
                                         ("--join_timeout", "-1")])
def test_timeouts_must_be_finite(flag, value, capsys):
    # inf once passed the check and ended in timedelta's OverflowError, a traceback.  The flag's type
    # refuses it as argparse's one line; the API (a dict of values, no flags) keeps its own check.
    with pytest.raises(SystemExit) as stop:
        parse_job(["--frame", "collective_test", flag, value], "t", "")
    assert stop.value.code == 2 and f"argument {flag}" in capsys.readouterr().err
    job, values = parse_job(["--frame", "collective_test"], "t", "")
    with pytest.raises(ConfigError, match=f"{flag} must be a positive number of seconds"):
        options_from(job, {**values, flag.lstrip("-"): float(value)})


def test_the_join_has_its_own_timeout():
    job, values = parse_job(["--frame", "collective_test", "--timeout", "5"], "t", "")
    options = options_from(job, values)
    assert (options.timeout_s, options.join_timeout_s) == (5, 1800)   # a slow start is not an operation
    job, values = parse_job(["--frame", "collective_test", "--join_timeout", "60"], "t", "")
    assert options_from(job, values).join_timeout_s == 60


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
    proc = subprocess.run([sys.executable, "-c", WATCHDOG.format(root=str(ROOT)), mode], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == status and proc.stderr.strip() == message, proc.stderr


# ---- a killed launcher (no torch: fast) ------------------------------------------------------------

ORPHAN_WORKER = """
import sys, time
sys.path.insert(0, {root!r})
import os
from replay.watchdog import Watchdog
dog = Watchdog(60, "p: ", describe=lambda w: f"operation {{w}}", on_fatal=lambda: "; log kept",
               parent=os.getppid()).start()
dog.watch(7)
open(sys.argv[1], "w").write("ready")
time.sleep(60)
"""
LAUNCHER = """
import subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stderr=open(sys.argv[3], "w"))
print(worker.pid, flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_worker_whose_launcher_was_killed_stops(tmp_path):
    """The watchdog's poll of the parent process (the fallback where prctl's death signal is not had)."""
    ready, err = tmp_path / "ready", tmp_path / "err.txt"
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, ORPHAN_WORKER.format(root=str(ROOT)), str(ready),
                                 str(err)], stdout=subprocess.PIPE, text=True)
    worker = int(launcher.stdout.readline())
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists() and process_alive(worker)
        launcher.kill()   # SIGKILL: the launcher cannot pass anything on
        launcher.wait()
        deadline = time.monotonic() + 30
        while process_alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not process_alive(worker), "the worker outlived its launcher"
        assert err.read_text().strip() == (f"p: the launcher (process {launcher.pid}) is gone; stopping during "
                                           "operation 7; log kept")
    finally:
        if process_alive(worker):
            os.kill(worker, signal.SIGKILL)
        launcher.stdout.close()


# ---- checks before anything starts -------------------------------------------------------------------

def test_check_flag_checks_every_stage_and_writes_nothing(tmp_path):
    for stage in (0, 1):
        Workload(items=[WorkItem(T.all_reduce, G.tp_group, 2, 64, "a"), WorkItem(T.epoch_end)]).dump(
            tmp_path / f"w{stage}.csv")
    base = [sys.executable, str(ROOT / "aicb.py"), "--tensor_model_parallel_size", "2", "--pipeline_model_parallel",
            "2", "--num_layers", "2", "--world_size", "4", "--check"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    ok = subprocess.run([*base, "--workload", "w{pp_rank}.csv"], cwd=tmp_path, env=env, capture_output=True, text=True,
                        timeout=60)
    assert ok.returncode == 0, ok.stderr
    # 2 stages of 2 items each (an all-reduce and its epoch_end)
    assert ok.stdout.strip().startswith("aicb.py: check passed: 4 ranks, 4 items in 2 pipeline stage(s) planned")
    # stage 1's file is wrong: the check reads it too (as stage 1's first rank, rank 2, would)
    Workload(items=[WorkItem(T.all_reduce, G.tp_group, 4, 64, "a")]).dump(tmp_path / "w1.csv")
    bad = subprocess.run([*base, "--workload", "w{pp_rank}.csv"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert bad.stderr.startswith("aicb.py: error: w1.csv: item 0") and "comm_group_size 4" in bad.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w0.csv", "w1.csv"]   # nothing written


@pytest.mark.parametrize("script, args, needle", [
    ("coll_comm_check", ["--begin_size", "2K", "--end_size", "1K"], "--end_size 1024 is smaller than --begin_size 2048"),
    ("megatron_gpt", ["-m", "13", "--tensor_model_parallel_size", "2", "--warmup", "-1"],
     "argument --warmup: expected an integer >= 0, got '-1'"),
    ("megatron_gpt", ["-m", "13", "--tensor_model_parallel_size", "2", "--bogus"], "unrecognized arguments: --bogus"),
])
def test_scripts_check_a_replay_before_torchrun_starts(tmp_path, script, args, needle):
    """Before, torchrun started every worker, each printed the line, and torchrun added its traceback
    (exit 1)."""
    proc = subprocess.run([sys.executable, "-m", "utils.aicb_scripts", script, "--nproc_per_node", "2", *args],
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout == "" and proc.stderr.strip().splitlines() == [f"aicb.py: error: {needle}"], proc.stderr


# ---- the detail CSV, streamed --------------------------------------------------------------------------

def test_streamed_detail_rows_read_as_the_final_ones(tmp_path):
    """A stopped run keeps the streamed detail rows: they must be the rows the end of the run writes,
    less the columns of every rank's times."""
    from log_analyzer.log import DETAIL_COLUMNS, DetailWriter, write_detail

    comm = WorkItem(T.all_gather, G.tp_group, 2, 4096, "fwd, with a comma")
    comp = WorkItem(T.computation, stage="gemm", shapes=((8, 8), (8, 8)), time_ns=1e6)
    streamed = DetailWriter(tmp_path / "s_detail.csv")
    streamed.write(0, 1, 3, comm, 0.25, 16.384, 8.192, True, 7, "tp_group", 2, 1)
    streamed.write(1, 1, 4, comp, 1.5)
    streamed.write(2, 1, 5, comm, 0.5, float("inf"), None, False, None, "tp_group", 2, 1)
    streamed.write_epoch_end(3, 1, 2.75)
    streamed.close()
    rows = [{"row": 0, "iteration": 1, "item_index": 3, "comm_type": "all_gather", "comm_group": "tp_group",
             "comm_group_size": 2, "msg_size": 4096, "stage": "fwd, with a comma", "elapsed_ms": 0.25,
             "algbw_gbps": 16.384, "busbw_gbps": 8.192, "emulated": True, "batch": 7, "peer_rank": 1},
            {"row": 1, "iteration": 1, "item_index": 4, "comm_type": "computation", "stage": "gemm", "elapsed_ms": 1.5,
             "emulated": False, "batch": None},
            {"row": 2, "iteration": 1, "item_index": 5, "comm_type": "all_gather", "comm_group": "tp_group",
             "comm_group_size": 2, "msg_size": 4096, "stage": "fwd, with a comma", "elapsed_ms": 0.5,
             "algbw_gbps": None, "busbw_gbps": None, "emulated": False, "batch": None, "peer_rank": 1},
            {"row": 3, "iteration": 1, "comm_type": "epoch_end", "elapsed_ms": 2.75}]
    write_detail(tmp_path / "f_detail.csv", rows)
    assert (tmp_path / "s_detail.csv").read_text() == (tmp_path / "f_detail.csv").read_text()
    assert (tmp_path / "s_detail.csv").read_text().splitlines()[0] == ",".join(DETAIL_COLUMNS)


# ---- progress bars ---------------------------------------------------------------------------------------

class _Stream:
    def __init__(self, tty: bool) -> None:
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_progress_only_on_rank_0_and_a_terminal():
    from replay.progress import Progress

    assert Progress.for_rank(0, _Stream(True)).enabled
    assert not Progress.for_rank(1, _Stream(True)).enabled
    assert not Progress.for_rank(0, _Stream(False)).enabled
    quiet = Progress.for_rank(0, _Stream(False))
    quiet.start("warm-up", 10)
    quiet.step()
    printed = []
    quiet.write(lambda text, flush: printed.append(text), "line")
    quiet.close()
    assert printed == ["line"]

"""Issue 28, the replay's part: a stopped rank still dies with its launcher (item 3), progress lines off a
terminal and a note on replaced results (item 17), the host-memory check (item 18), ``--epoch_num`` with a
``--workload`` file (item 21), the log writer and symlinks (item 7)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, process_alive

# ---- item 3: a SIGSTOPped rank whose launcher is then killed -------------------------------------------

STOPPABLE_WORKER = """
import os, sys, time
sys.path.insert(0, {root!r})
from replay.env import bind_to_parent
from replay.watchdog import Watchdog
parent = bind_to_parent()          # LOCAL_RANK is set: a launcher's worker
dog = Watchdog(60, "p: ", describe=lambda w: f"operation {{w}}", on_fatal=lambda: "; log kept", parent=parent).start()
dog.watch(7)
open(sys.argv[1], "w").write("ready")
time.sleep(120)
"""
LAUNCHER = """
import os, subprocess, sys, time
env = dict(os.environ, LOCAL_RANK="0")
worker = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stderr=open(sys.argv[3], "w"), env=env,
                          start_new_session=True)   # as torchrun starts its workers
print(worker.pid, flush=True)
time.sleep(120)
"""


def _wait_until(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl and /proc")
def test_a_stopped_worker_dies_with_its_killed_launcher(tmp_path):
    """Before: the kernel's parent-death signal stays pending on a stopped process and its watchdog thread cannot
    poll, so the rank stayed behind, stopped, forever.  Now a sentinel continues it (the pending signal then ends it
    through the watchdog, which says why) and kills it if it does not end."""
    ready, err = tmp_path / "ready", tmp_path / "err.txt"
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, STOPPABLE_WORKER.format(root=str(ROOT)), str(ready),
                                 str(err)], stdout=subprocess.PIPE, text=True)
    worker = int(launcher.stdout.readline())
    try:
        assert _wait_until(ready.exists, 60) and process_alive(worker)
        os.kill(worker, signal.SIGSTOP)
        assert _wait_until(lambda: _state(worker) in ("T", "t"), 30)
        launcher.kill()
        launcher.wait()
        assert _wait_until(lambda: not process_alive(worker), 60), "the stopped worker outlived its launcher"
        assert err.read_text().strip() == (f"p: the launcher (process {launcher.pid}) is gone; stopping during "
                                           "operation 7; log kept")
    finally:
        if process_alive(worker):
            os.kill(worker, signal.SIGKILL)
        launcher.stdout.close()


# ---- the replay run in one process (world 1) ------------------------------------------------------------------

def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                                             "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")}
    return dict(env, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1", **extra)


def _aicb(*args: str, cwd, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "aicb.py"), *args], cwd=cwd, env=_env(**env),
                          capture_output=True, text=True, timeout=timeout)


def _workload(path, iterations: int = 2, size: int = 4096) -> None:
    """init (a barrier), then ``iterations`` iterations of two all-reduces, on one rank."""
    from utils.workload import CommGroup as G
    from utils.workload import CommType as T
    from utils.workload import WorkItem, Workload

    items = [WorkItem(T.barrier, G.all_nodes, 1, 0, "init"), WorkItem(T.epoch_end)]
    for _ in range(iterations):
        items += [WorkItem(T.all_reduce, G.all_nodes, 1, size, "a"), WorkItem(T.all_reduce, G.all_nodes, 1, size, "b"),
                  WorkItem(T.epoch_end)]
    Workload(items=items).dump(path)


def test_progress_lines_off_a_terminal_unit():
    """Before: off a terminal (a log, pssh) nothing at all was printed while a phase ran."""
    from replay.progress import Progress

    class Pipe:
        def isatty(self) -> bool:
            return False

    now = [100.0]
    printed: list[str] = []
    progress = Progress.for_rank(0, Pipe(), print_fn=lambda text, flush: printed.append(text))
    progress._clock = lambda: now[0]
    assert not progress.enabled and progress.lines
    progress.start("warm-up", 10)
    progress.note("1/1")
    progress.step()
    now[0] += 31   # LINE_EVERY_S (30 s) later
    progress.step(2)
    progress.step()
    progress.start("process groups", 1, unit="group")
    progress.close()
    assert printed == ["[RANK 0] warm-up: 10 operations", "[RANK 0] warm-up: 3/10 operations (30%), 1/1, 31 s",
                       "[RANK 0] process groups: 1 group"]
    assert not Progress.for_rank(1, Pipe()).lines   # one rank speaks


def test_replay_prints_its_phases_into_a_log_and_names_what_it_replaces(tmp_path):
    _workload(tmp_path / "w.csv")
    first = _aicb("--workload", "w.csv", "--warmup", "1", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    lines = first.stdout.splitlines()
    for phase in ("[RANK 0] process groups: 1 group", "[RANK 0] init: 1 operation", "[RANK 0] warm-up: 2 operations",
                  "[RANK 0] iterations: 4 operations"):
        assert phase in lines, first.stdout
    assert "warning" not in first.stderr
    second = _aicb("--workload", "w.csv", cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-2000:]
    assert ("aicb.py: warning: replacing results/comm_logs/w_log.csv and its detail CSV, written by an earlier run"
            in second.stderr), second.stderr


def test_the_replay_log_never_writes_through_a_symbolic_link(tmp_path):
    """Before: the log was opened with open(path, "w"), which follows a link and overwrote its target."""
    _workload(tmp_path / "w.csv")
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    (tmp_path / "results" / "comm_logs").mkdir(parents=True)
    (tmp_path / "results" / "comm_logs" / "w_log.csv").symlink_to(target)
    proc = _aicb("--workload", "w.csv", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    assert proc.stderr.startswith("aicb.py: error: the log results/comm_logs/w_log.csv is a symbolic link")
    assert target.read_text() == "keep me\n"
    check = _aicb("--workload", "w.csv", "--check", cwd=tmp_path)   # --check says so too, before anything starts
    assert check.returncode == 2 and "is a symbolic link" in check.stderr


def test_an_output_folder_that_cannot_be_written_is_refused_before_anything_starts(tmp_path, monkeypatch):
    """Before: rank 0 found it could not write its outputs only after every rank had joined (its workload CSV,
    then the log): its error came with a 'Connection closed by peer' line from every other rank, and --check
    passed.  The outputs' folder is now checked with the other output checks, before anything starts."""
    from replay.env import prepare_outputs
    from utils.io import OutputError

    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if os.fspath(path) == str(locked)
                        else real_access(path, mode, **kw))
    with pytest.raises(OutputError, match=f"^cannot write {locked}/comm_logs/w_log.csv: {locked} is not writable"):
        prepare_outputs("w", None, {"output_dir": str(locked)}, "aicb.py")
    assert list(locked.iterdir()) == []


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_output_dir_is_one_line_in_check_and_run(tmp_path):
    _workload(tmp_path / "w.csv")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        for extra in (["--check"], []):
            proc = _aicb("--workload", "w.csv", "--output_dir", str(locked), *extra, cwd=tmp_path)
            assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
            assert f"{locked} is not writable" in proc.stderr
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o755)


def test_a_computation_time_beyond_any_clock_is_one_line_and_writes_nothing(tmp_path):
    """Before: a workload computation of 1e30 ns passed the reader; the replay wrote its log's header, then its
    sleep raised OverflowError (a traceback, exit 1)."""
    (tmp_path / "w.csv").write_text("comm_type,comm_group,comm_group_size,msg_size,stage,dst,src,additional,"
                                    "_elapsed_time,algbw,busbw,count\n"
                                    "CommType.computation,None,None,0,a,None,None,,1e30,None,None,1\n"
                                    "CommType.epoch_end,None,None,0,,None,None,,None,None,None,1\n")
    proc = _aicb("--workload", "w.csv", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    assert proc.stderr.startswith("aicb.py: error: w.csv:2: _elapsed_time: '1e30' is beyond"), proc.stderr
    assert not (tmp_path / "results").exists()


def test_check_reads_every_rank_file_of_a_rank_template(tmp_path):
    """Before: --check read the workload of each pipeline stage's first rank only, so with --workload 'w{rank}.csv'
    it passed while w1.csv was missing; the run then failed on rank 1."""
    for rank in (0, 2):   # ranks 0 and 2: the first of stages 0 and 1 (tp 2, pp 2); ranks 1 and 3 have no file
        proc = subprocess.run([sys.executable, "-m", "workload_generator.generate_megatron_workload", "--model_name",
                               "gpt_tiny", "--world_size", "4", "--tensor_model_parallel_size", "2",
                               "--pipeline_model_parallel", "2", "--global_batch", "4", "--pp_rank", str(rank // 2),
                               "-o", f"w{rank}.csv"], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
    proc = _aicb("--workload", "w{rank}.csv", "--world_size", "4", "--tensor_model_parallel_size", "2",
                 "--pipeline_model_parallel", "2", "--check", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip() == "aicb.py: error: w1.csv: cannot read: No such file or directory", \
        proc.stdout[-2000:] + proc.stderr[-2000:]


@pytest.mark.parametrize("flag", ["--workload", "--comp_filepath", "--output_dir", "-o"])
def test_an_empty_path_is_refused_not_taken_as_absent(tmp_path, flag):
    """Before: --workload "$FILE" with FILE unset replayed a generated workload of the default model instead (an
    empty value was taken as no flag), and an empty --comp_filepath, --output_dir or -o as theirs being absent."""
    proc = _aicb("--model_name", "gpt_tiny", flag, "", "--check", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert flag in proc.stderr and "empty path" in proc.stderr, proc.stderr


@pytest.mark.parametrize("flag", ["--output_dir", "--inference_config"])
def test_an_empty_path_is_refused_by_the_inference_replay_too(tmp_path, flag):
    """aicb.py --frame Inference parses its own flags: an empty --output_dir or --inference_config was taken as none."""
    proc = _aicb("--frame", "Inference", "-m", "gpt_tiny", flag, "", "--check", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert flag in proc.stderr and "empty path" in proc.stderr, proc.stderr


def test_epoch_num_with_a_workload_file_is_honoured(tmp_path):
    """Before: --epoch_num was ignored with --workload (the file's 2 iterations ran whatever it said)."""
    from log_analyzer import Log

    _workload(tmp_path / "w.csv", iterations=2)
    proc = _aicb("--workload", "w.csv", "--epoch_num", "5", "--warmup", "0", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "; --epoch_num 5: 5 iterations from the file's 2, cycled; log:" in proc.stdout
    log = Log.load(tmp_path / "results" / "comm_logs" / "w_log.csv")
    assert sorted(set(log.items["iteration"])) == [0, 1, 2, 3, 4, 5]
    assert list(log.items["stage"][log.items["iteration"] == 5]) == ["a", "b"]
    check = _aicb("--workload", "w.csv", "--epoch_num", "1", "--check", cwd=tmp_path)
    assert check.returncode == 0 and "; --epoch_num 1: 1 iteration from the file's 2 (the first ones);" in check.stdout
    _workload(tmp_path / "init_only.csv", iterations=0)
    refused = _aicb("--workload", "init_only.csv", "--epoch_num", "2", "--check", cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr.strip() == (
        "aicb.py: error: --epoch_num 2: init_only.csv holds no iteration after its init block (no epoch_end marker "
        "ends one) to repeat; drop --epoch_num")


def test_epoch_num_past_the_item_limit_is_one_line_before_anything_runs(tmp_path):
    """Before: --epoch_num 1e11 with a workload file passed --check, and the run wrote its log's header, then built a
    list of 1e11 iterations: a MemoryError traceback (or the OOM killer).  The logged rows are now held to
    --max_items, as a generated workload's items are."""
    from tests.conftest import run_capped

    _workload(tmp_path / "w.csv", iterations=1)
    for extra in (["--check"], []):
        proc = run_capped(str(ROOT / "aicb.py"), "--workload", "w.csv", "--epoch_num", "100000000000", *extra,
                          cwd=tmp_path)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
        assert "above the limit of 5,000,000 (--max_items): lower --epoch_num" in proc.stderr, proc.stderr
    assert not (tmp_path / "results").exists()
    ok = _aicb("--workload", "w.csv", "--epoch_num", "2000000", "--max_items", "10000000", "--check", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr


# ---- item 18: --check and host memory --------------------------------------------------------------------------

def test_check_refuses_buffers_that_cannot_fit_host_memory(tmp_path):
    """A 1 TiB all-reduce on one CPU rank: --check used to pass it; the replay then failed allocating."""
    _workload(tmp_path / "w.csv", iterations=1, size=1 << 40)
    proc = _aicb("--workload", "w.csv", "--check", "--backend", "gloo", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("aicb.py: error: the replay needs at least 1 TiB of host memory on this machine but ")
    assert "the replay buffers of 1 rank(s) (up to 1 TiB each" in proc.stderr and "MemAvailable" in proc.stderr
    assert not (tmp_path / "results").exists()


def test_check_names_end_size_when_a_sweep_cannot_fit(tmp_path):
    """Before: a collective sweep too large for host memory was told to use more tp, pp or ep or a shorter
    --seq_length, flags a sweep does not have; its largest message is --end_size."""
    proc = _aicb("--frame", "collective_test", "--begin_size", "1K", "--end_size", "1T", "--world_size", "4",
                 "--backend", "gloo", "--check", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "the replay buffers of 4 rank(s)" in proc.stderr and "(a smaller --end_size" in proc.stderr, proc.stderr
    assert "--seq_length" not in proc.stderr


def test_check_refuses_aiob_timing_that_cannot_fit(tmp_path):
    """AIOB on a CPU builds each operation in host memory: a 175B layer over a million tokens cannot fit."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("AIOB times on the GPU here")
    # (8 stages with sequence parallelism: the replay buffers, which --check sizes too, stay below AIOB's operation)
    proc = _aicb("--model_name", "gpt_175B", "--world_size", "64", "--tensor_model_parallel_size", "8",
                 "--pipeline_model_parallel", "8", "--enable_sequence_parallel", "--global_batch", "8",
                 "--seq_length", "1048576", "--max_position_embeddings", "1048576", "--aiob_enable", "--check",
                 cwd=tmp_path, LOCAL_WORLD_SIZE="1")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "AIOB timing on this CPU (rank 0; its largest operation" in proc.stderr
    assert "--gpu_type GPU prices the computation" in proc.stderr


def test_check_with_aiob_still_refuses_buffers_that_cannot_fit(tmp_path):
    """Before: with --aiob_enable, --check built no workload ("workloads not built") and so never sized the replay
    buffers: it passed a 175B job on 8 CPU ranks (650 GiB of buffers each) that the run would then time with AIOB and
    fail allocating.  The messages do not depend on the compute times, so --check sizes them untimed."""
    proc = _aicb("--model_name", "gpt_175B", "--world_size", "8", "--tensor_model_parallel_size", "1",
                 "--global_batch", "8", "--aiob_enable", "--gpu_type", "H100", "--backend", "gloo", "--check",
                 cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "the replay buffers of 8 rank(s)" in proc.stderr and "MemAvailable" in proc.stderr, proc.stderr
    small = _aicb("--model_name", "gpt_tiny", "--world_size", "2", "--tensor_model_parallel_size", "2",
                  "--aiob_enable", "--gpu_type", "H100", "--backend", "gloo", "--check", cwd=tmp_path)
    assert small.returncode == 0, small.stderr[-2000:]
    assert "check passed: 2 ranks, compute times measured by rank 0 at the start (AIOB);" in small.stdout, small.stdout
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
@pytest.mark.parametrize("world", [1, 2])
def test_a_run_refuses_buffers_that_cannot_fit_before_allocating(tmp_path, world):
    """Before: only --check sized the buffers; `torchrun aicb.py` run directly (AICB users do; the sweep's default
    --end_size is 8 GiB) allocated them all, and a host short of memory failed with an allocator error named after
    the group being warmed, or met the OOM killer.  Each host's ranks now sum their buffers before allocating."""
    pytest.importorskip("torch")
    args = ["--frame", "collective_test", "--begin_size", "1K", "--end_size", "1T", "--iter_num", "1", "--backend", "gloo"]
    if world == 1:
        proc = _aicb(*args, cwd=tmp_path)
    else:
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(world),
                               "--master_port", str(_free_port()), str(ROOT / "aicb.py"), *args], cwd=tmp_path,
                              env=_env(), capture_output=True, text=True, timeout=300)
    ours = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("aicb.py:")]
    assert len(ours) == 1 and ours[0].startswith("aicb.py: error: the replay needs at least "), proc.stderr[-3000:]
    assert f"the replay buffers of {world} rank(s) on this host" in ours[0] and "--end_size" in ours[0], ours[0]
    assert (proc.returncode == 2) if world == 1 else ("exitcode  : 2" in proc.stderr), proc.stderr[-3000:]
    assert not (tmp_path / "results").exists()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_host_terms_arithmetic(monkeypatch):
    """4 ranks on one host, 2 stages: stage 0's ranks take 3 MiB of buffers, stage 1's 1 MiB: 2 x 3 + 2 x 1 = 8 MiB;
    with LOCAL_WORLD_SIZE=2, 2 ranks of the fewest (1 MiB): 2 MiB."""
    from replay.memory import TORCH_PROCESS_BYTES, check_host_memory, host_terms

    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    mib = 1 << 20
    terms = host_terms([(3 * mib, 0), (1 * mib, 0)], world=4, pp=2)
    assert [size for _, size, _ in terms] == [8 * mib, 4 * TORCH_PROCESS_BYTES]
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert [size for _, size, _ in host_terms([(3 * mib, 0), (1 * mib, 0)], world=4, pp=2)] == [
        2 * mib, 2 * TORCH_PROCESS_BYTES]
    check_host_memory(terms, None, 4)   # unknown: nothing refused
    check_host_memory(terms, 8 * mib + 4 * TORCH_PROCESS_BYTES, 4)
    with pytest.raises(Exception, match="replay buffers"):
        check_host_memory(terms, 8 * mib, 4)


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    if int(handle.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                pass
    return found


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl and /proc")
def test_torchrun_killed_with_a_stopped_rank_leaves_no_rank(tmp_path):
    """End to end: 2 ranks under torchrun, rank 1 stopped (SIGSTOP) while rank 0 waits for it in an all-reduce,
    then torchrun killed outright: both ranks end (before, the stopped one stayed, stopped, forever)."""
    import socket

    from utils.workload import CommGroup as G
    from utils.workload import CommType as T
    from utils.workload import WorkItem, Workload

    for rank in range(2):
        items = [WorkItem(T.barrier, G.all_nodes, 2, 0, "init"), WorkItem(T.epoch_end),
                 WorkItem(T.all_reduce, G.all_nodes, 2, 4096, "before")]
        if rank == 0:   # rank 0 computes for 2 minutes; rank 1 waits for it inside an all-reduce (in gloo)
            items.append(WorkItem(T.computation, stage="long", time_ns=120e9))
        items += [WorkItem(T.all_reduce, G.all_nodes, 2, 4096, "after"), WorkItem(T.epoch_end)]
        Workload(items=items).dump(tmp_path / f"w_{rank}.csv")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
           str(ROOT / "aicb.py"), "--workload", "w_{rank}.csv", "--warmup", "0", "--compute_mode", "sleep",
           "--timeout", "600"]
    with open(tmp_path / "out.txt", "w") as out, open(tmp_path / "err.txt", "w") as err:
        launcher = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=out, stderr=err)
    workers: list[int] = []
    log = tmp_path / "results" / "comm_logs" / "w_rank_log.csv"   # the braces of the file name left out
    try:
        # rank 0 logged init and the first all-reduce: it computes, rank 1 waits in the second all-reduce
        assert _wait_until(lambda: log.exists() and len(log.read_text().splitlines()) >= 4 or launcher.poll() is not None,
                           180), (tmp_path / "err.txt").read_text()[-3000:]
        assert launcher.poll() is None, (tmp_path / "err.txt").read_text()[-3000:]
        workers = [w for w in _children(launcher.pid) if "aicb.py" in open(f"/proc/{w}/cmdline").read()]
        assert len(workers) == 2
        os.kill(workers[1], signal.SIGSTOP)
        launcher.kill()
        launcher.wait()
        assert _wait_until(lambda: not any(process_alive(w) for w in workers), 90), "a rank outlived its launcher"
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        for worker in workers:
            if process_alive(worker):
                os.kill(worker, signal.SIGKILL)
    errors = (tmp_path / "err.txt").read_text()
    # each rank names the cause, also the one whose all-reduce failed first because its peer had ended
    for rank in range(2):
        assert f"rank {rank}: the launcher (process {launcher.pid}) is gone" in errors, errors[-3000:]
    assert "Connection closed" not in errors, errors[-3000:]

"""The layout search under careless and adversarial use (issue 28, items 1, 2, 3, 4, 6, 7, 10): outputs that are
inputs or links, unbounded workers and work, workers outliving a killed search, resume files of another job or
damaged, unreachable Ray clusters, an unclosed quote in ``--topo_gen``.  Every refusal is one line and exit 2."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time

import pytest

from simulator.search.files import HEADER
from tests.conftest import EXAMPLES, ROOT, run_cli
from utils.errors import ConfigError

TOPO16 = str(EXAMPLES / "topo_Spectrum-X_16g_8gps_400Gbps_H100")
TINY = ("--model_name", "gpt_tiny", "--global_batch", "32", "--seq_length", "128", "--gpu_type", "H100")
ONE = ("--tp", "2", "--pp", "1", "--micro_batches", "1", "--recompute", "none", "--sequence_parallel", "off",
       "--orders", "tp-cp-ep-dp-pp")
"""tp 2, pp 1 (dp 8), micro 1, no recomputation, SP off: the distributed optimizer off and on -> 2 layouts."""


def search(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run_cli("-m", "simulator", "search", *args, timeout=timeout)


def one_error_line(done: subprocess.CompletedProcess, *words: str) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("simulator search: error: "), done.stderr
    assert "Traceback" not in done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def rows_of(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ---- item 1 and 7: outputs ---------------------------------------------------------------------------

def test_output_over_the_topology_is_refused_and_the_topology_kept(tmp_path):
    topo = tmp_path / "topo.txt"
    topo.write_bytes(open(TOPO16, "rb").read())
    before = topo.read_bytes()
    done = search("-t", str(topo), "--world_size", "16", *TINY, *ONE, "--jobs", "1", "-q", "-o", str(topo))
    one_error_line(done, "-o/--output", "-t/--topology", "destroy")
    assert topo.read_bytes() == before


def test_plot_over_the_csv_is_refused(tmp_path):
    out = tmp_path / "o.csv"
    done = search("-t", TOPO16, "--world_size", "16", *TINY, *ONE, "--jobs", "1", "-q", "-o", str(out),
                  "--plot", str(out))
    one_error_line(done, "--plot")
    assert not out.exists()


def test_output_through_a_symbolic_link_is_refused_and_its_target_kept(tmp_path):
    target = tmp_path / "precious.csv"
    target.write_text("keep me\n")
    link = tmp_path / "layouts.csv"
    link.symlink_to(target)
    done = search("-t", TOPO16, "--world_size", "16", *TINY, *ONE, "--jobs", "1", "-q", "-o", str(link))
    one_error_line(done, "symbolic link")
    assert target.read_text() == "keep me\n" and link.is_symlink()


# ---- item 2: --jobs -------------------------------------------------------------------------------------

def test_jobs_is_capped_at_the_cpus_in_one_line(tmp_path):
    from simulator.search.pool import cpu_count, worker_count

    said: list[str] = []
    assert worker_count(100000, said.append) == cpu_count() and len(said) == 1 and "--jobs 100000" in said[0]
    assert worker_count(1, said.append) == 1 and len(said) == 1
    out = tmp_path / "o.csv"
    done = search("-t", TOPO16, "--world_size", "16", *TINY, *ONE, "--jobs", "100000", "-q", "-o", str(out))
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if "--jobs 100000" in line]
    assert len(notes) == 1 and f"running {cpu_count()} workers" in notes[0]
    assert len(rows_of(out)) == 2


# ---- item 3: workers die with the search ------------------------------------------------------------------

def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_a_sigkilled_search_leaves_no_worker_behind(tmp_path):
    out = tmp_path / "o.csv"
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    # every layout of gpt_tiny on 16 GPUs, unpruned: long enough to be killed mid-way
    proc = subprocess.Popen([sys.executable, "-m", "simulator", "search", "-t", TOPO16, "--world_size", "16", *TINY,
                             "--jobs", "2", "--no_prune", "-q", "-o", str(out)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        workers: list[int] = []
        while time.time() < deadline and len(workers) < 2:
            time.sleep(0.2)
            workers = _children(proc.pid)
            assert proc.poll() is None, "the search ended before its workers could be seen"
        assert len(workers) >= 2, "no worker processes appeared"
        time.sleep(1.0)  # the workers are simulating
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.time() + 15
        while time.time() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.2)
        left = [w for w in workers if _alive(w)]
    finally:
        if proc.poll() is None:
            proc.kill()
    for pid in left:  # (tidy up only the test's own leftovers before failing)
        os.kill(pid, signal.SIGKILL)
    assert not left, f"workers {left} outlived the killed search"


# ---- item 4: --resume -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished search of the 2 layouts of ``ONE``: its CSV's lines."""
    out = tmp_path_factory.mktemp("resume") / "o.csv"
    done = search("-t", TOPO16, "--world_size", "16", *TINY, *ONE, "--jobs", "1", "-q", "-o", str(out))
    assert done.returncode == 0, done.stderr
    return out.read_text().splitlines(keepends=True)


def _resume(tmp_path, lines: list[str], *extra: str) -> tuple[subprocess.CompletedProcess, str]:
    out = tmp_path / "o.csv"
    out.write_text("".join(lines))
    done = search("-t", TOPO16, "--world_size", "16", *(extra or TINY), *ONE, "--jobs", "1", "-q", "-o", str(out),
                  "--resume")
    return done, str(out)


def test_resume_keeps_rows_of_the_same_job(tmp_path, finished):
    assert finished[0].rstrip("\n") == ",".join(HEADER) and len(finished) == 3
    done, out = _resume(tmp_path, finished[:2])  # the header and one row kept: one layout left to simulate
    assert done.returncode == 0, done.stderr
    rows = rows_of(out)
    assert len(rows) == 2 and len({r["job"] for r in rows}) == 1


def test_resume_refuses_rows_of_another_job(tmp_path, finished):
    other = tuple(v if v != "128" else "256" for v in TINY)  # another sequence length: another job
    done, out = _resume(tmp_path, finished, *other)
    one_error_line(done, f"{out}:2:", "another job", "fingerprint")
    assert open(out).read() == "".join(finished)  # nothing written


@pytest.mark.parametrize("damage, words", [
    (lambda row: row.replace(row.split(",")[10], "nan", 1), ("iteration_s 'nan' is not a positive number",)),
    (lambda row: row.replace(row.split(",")[10], "-1.5", 1), ("iteration_s '-1.5' is not a positive number",)),
    (lambda row: row[: len(row) // 2] + "\n", ("columns", "cut short")),
])
def test_resume_refuses_a_damaged_row_naming_file_and_line(tmp_path, finished, damage, words):
    lines = [finished[0], finished[1], damage(finished[2])]
    done, out = _resume(tmp_path, lines)
    one_error_line(done, f"{out}:3:", *words)


def test_resume_refuses_a_duplicate_row_and_a_row_cut_at_the_end(tmp_path, finished):
    done, out = _resume(tmp_path, [finished[0], finished[1], finished[1]])
    one_error_line(done, f"{out}:3:", "line 2 again")
    done, out = _resume(tmp_path, [finished[0], finished[1], finished[2].rstrip("\n")])
    one_error_line(done, f"{out}:3:", "cut short")


def _edit(row: str, column: str, value: str) -> str:
    cells = next(csv.reader([row]))
    cells[HEADER.index(column)] = value
    return ",".join(cells) + "\n"


@pytest.mark.parametrize("column, value, words", [
    ("mfu", "nan", ("mfu 'nan' is not a number >= 0",)),
    ("compute_s", "-5", ("compute_s '-5' is not a number >= 0",)),
    ("lower_bound_s", "inf", ("lower_bound_s 'inf' is not a number >= 0",)),
    ("tp", "0", ("tp '0' is not a size",)),
    ("tp", "-2", ("tp '-2' is not an integer >= 0",)),
    ("world_size", "8", ("world_size 8 is not tp x pp x dp x cp",)),
    ("recompute", "bogus", ("recompute 'bogus' is not one of",)),
    ("order", "bogus", ("order 'bogus' is not one of",)),
    ("sequence_parallel", "maybe", ("sequence_parallel 'maybe' is not True or False",)),
    ("gpu_type", "B200", ("gpu_type 'B200'", "an edited row")),
    ("topology", "other.txt", ("topology 'other.txt'", "an edited row")),
])
def test_resume_refuses_an_edited_row_of_the_same_job(tmp_path, finished, column, value, words):
    # rows keeping their fingerprint but edited (NaN, negative, impossible layouts, another GPU or topology) were kept,
    # ranked and reported as the best layout
    lines = [finished[0], finished[1], _edit(finished[2], column, value)]
    done, out = _resume(tmp_path, lines)
    one_error_line(done, f"{out}:3:", *words)
    assert open(out).read() == "".join(lines)  # nothing written


# ---- item 6: unbounded work and remote waits ---------------------------------------------------------------

def test_a_huge_global_batch_is_bounded_before_planning(tmp_path):
    from simulator.search.space import divisors

    assert len(divisors(10**9)) == 100  # 10^9 = 2^9 5^9: (9 + 1) x (9 + 1) divisors, found up to 31,623
    out = tmp_path / "o.csv"
    # gpt_tiny on 16 GPUs with 10^9 sequences per iteration: every dp divides it, with 100 micro-batch sizes or so
    # each; the space is refused before any planning
    done = search("-t", TOPO16, "--world_size", "16", "--model_name", "gpt_tiny", "--global_batch", "1000000000",
                  "--seq_length", "128", "--gpu_type", "H100", "--jobs", "1", "-q", "-o", str(out),
                  "--max_layouts", "1000", timeout=60)
    one_error_line(done, "--max_layouts 1,000")


def test_an_unreachable_ray_address_fails_in_seconds(monkeypatch):
    import types

    from simulator.search import pool as search_pool

    hung = types.ModuleType("ray")
    hung.init = lambda **kw: time.sleep(3600)  # a Ray client that would retry for minutes
    monkeypatch.setitem(sys.modules, "ray", hung)
    start = time.monotonic()
    with pytest.raises(ConfigError, match=r"--ray 127\.0\.0\.1:1: cannot reach the Ray cluster in 2 s"):
        search_pool.RayPool("127.0.0.1:1", timeout_s=2)  # nothing listens on port 1: refused at once
    with pytest.raises(ConfigError, match=r"--ray auto: cannot reach the Ray cluster \(no answer in 1 s\)"):
        search_pool.RayPool("auto", timeout_s=1)  # no port to try: ray.init itself is given 1 s
    assert time.monotonic() - start < 10


# ---- item 10: --topo_gen with an unclosed quote -------------------------------------------------------------

def test_topo_gen_with_an_unclosed_quote_is_one_line(tmp_path):
    done = search("--topo_gen", "-topo 'Spectrum-X", "--world_size", "8", *TINY, "--jobs", "1", "-q",
                  "-o", str(tmp_path / "o.csv"))
    one_error_line(done, "--topo_gen", "quotation")


def test_a_ray_cluster_gives_the_rows_a_local_pool_gives(tmp_path):
    ray = pytest.importorskip("ray")
    from simulator.search.pool import LocalPool, RayPool
    from simulator.search.space import Layout

    base = {"model_name": "gpt_tiny", "global_batch": 32, "seq_length": 128, "gpu_type": "H100"}
    point = {"topology": "t", "job": "j", "flags": {}}
    tasks = [(base, Layout(tp, 1, 16 // tp, 1, 1, 1, "none", False, dist, "tp-cp-ep-dp-pp"), TOPO16, 0.0, point)
             for tp in (1, 2) for dist in (False, True)]
    bundles = [tuple(tasks[:2]), tuple(tasks[2:])]
    local = {task[1]: row for bundle, rows in LocalPool(1).run(bundles, 2) for task, row in zip(bundle, rows)}
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)  # this test's own cluster, ended below
    try:
        pool = RayPool("auto", timeout_s=60)
        remote = {task[1]: row for bundle, rows in pool.run(bundles, 2) for task, row in zip(bundle, rows)}
    finally:
        ray.shutdown()
    assert remote == local and len(remote) == 4


def test_a_huge_placement_top_names_no_more_rank_files_than_layouts(tmp_path):
    # --placement_top 1e12 made 10^12 rank-file names to check before the search: MemoryError (a limit keeps the test
    # from taking the machine's memory before the fix)
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    topo = tmp_path / "t.txt"
    assert run_cli("-m", "topo.gen", "-topo", "Spectrum-X", "-g", "16", "--gpus_per_nic", "2", "-o", str(topo)).returncode == 0
    out = tmp_path / "o.csv"
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([sys.executable, "-m", "simulator", "search", "-t", str(topo), "--world_size", "16", *TINY, *ONE,
                           "--jobs", "1", "-q", "-o", str(out), "--placement", "search", "--placement_top", "1e12",
                           "--placement_max_evals", "3"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, preexec_fn=limit)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-800:]
    assert len(rows_of(out)) == 2 and len(rows_of(tmp_path / "o.placement.csv")) == 2


@pytest.mark.parametrize("flags, words", [("-h", ("-h", "takes topo.gen's flags")),
                                          ("--bogus", ("--bogus", "unrecognized arguments"))])
def test_topo_gen_help_or_bad_flag_is_one_line_of_the_search(tmp_path, flags, words):
    # --topo_gen "-h": topo.gen's parser printed its help into the search's muted stdout and exited 0: no CSV, no word
    out = tmp_path / "o.csv"
    done = search("--topo_gen", flags, "--world_size", "16", *TINY, *ONE, "--jobs", "1", "-q", "-o", str(out))
    one_error_line(done, "--topo_gen", *words)
    assert not out.exists()


@pytest.mark.parametrize("flag, value, words", [("--world_size", "16,,8", "an empty count in the list"),
                                                ("--world_size", ",16", "an empty count in the list"),
                                                ("--tp", "2,,4", "an empty item in the list"),
                                                ("--pp", ",1", "an empty item in the list")])
def test_comma_lists_with_an_empty_item_are_refused(tmp_path, flag, value, words):
    # '16,,8' and '2,,4' were read as 16,8 and 2,4 (--gpu_type 'H100,' is refused)
    out = tmp_path / "o.csv"
    args = ["--world_size", "16", *ONE]
    if flag in args:
        args[args.index(flag) + 1] = value
    else:
        args += [flag, value]
    done = search("-t", TOPO16, *TINY, *args, "--jobs", "1", "-q", "-o", str(out))
    one_error_line(done, f"{flag} {value!r}", words)
    assert not out.exists()

"""Profiling's database stays inside itself and whole (issue 28, items 1, 5, 9, 10, 15 and 21).

5.  Names from flags (``--sku``, ``--model_folder``, ``--model_name``, ``--network_device``, absolute names)
    never become paths outside the database: one line naming the flag, exit 2, nothing written anywhere.
9.  Duplicate compute rows are refused with the file and line (as network duplicates are); nccl-tests' NaN
    times, non-positive times, negative sizes and rows with wrong results are refused with the file and
    line, size-0 rows skipped with a note; two conversions into one database at once keep every row (a
    lock around the read-merge-write).
10. ``profiling compute --device tpu`` and ``--device cuda`` without CUDA: one line.
15. ``simai-busbw`` on a profile without inter-node points: the DP busbw comes from a nominal NIC and each
    value not measured is said in a warning line (before: 0.90 GiB/s for a 400 Gb/s NIC, silently).
21. CPU numbers stored under a GPU's name (``--network_device h100_dgx``, ``--sku h100``) are refused
    unless ``--allow_name_mismatch`` is given.
1.  ``simai-busbw -o`` over a database file is refused and the file kept.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.profiles import db as profile_db
from tests.conftest import ROOT, run_cli
from tests.test_profiles import NCCL_TESTS, write_series
from utils.errors import FormatError

MIB = 1 << 20
GRID = ("--gemm_m", "64", "--gemm_n", "64", "--gemm_k", "64", "--samples", "1", "--warmup", "0")


def one_line(done: subprocess.CompletedProcess, *needles: str) -> str:
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# ---- 5: names stay inside the database ---------------------------------------------------------------

@pytest.mark.parametrize("flags, flag", [
    (("--sku", "../../../x", *GRID), "--sku"),
    (("--sku", "/abs_sku", *GRID), "--sku"),
    (("--model_folder", "../../y", *GRID), "--model_folder"),
    (("--model_folder", "/abs_model", *GRID), "--model_folder"),
    (("--model_name", "../../z", "--hidden_size", "64", "--num_layers", "1", "--num_attention_heads", "2",
      "--world_size", "1", "--samples", "1"), "--model_name"),
])
def test_compute_names_cannot_leave_the_database(tmp_path, flags, flag):
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    done = run_cli("-m", "profiling", "compute", "-o", "db", *flags, cwd=work, timeout=300)
    one_line(done, flag, "outside")
    assert tree(tmp_path) == ["a", "a/b", "a/b/c"]


@pytest.mark.parametrize("device", ["../../net", "/abs_net", "..", "a/b"])
def test_nccl_tests_network_device_cannot_leave_the_database(tmp_path, device):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    (work / "all_reduce_perf.txt").write_text(NCCL_TESTS)
    done = run_cli("-m", "profiling", "nccl-tests", "all_reduce_perf.txt", "--network_device", device, "-o", "db",
                   cwd=work)
    one_line(done, "--network_device")
    assert tree(tmp_path) == ["a", "a/b", "a/b/all_reduce_perf.txt"]


# ---- 9: compute duplicates -----------------------------------------------------------------------------

def test_duplicate_compute_rows_are_refused_with_file_and_line(tmp_path):
    row = dict(op="gemm", phase="forward", dtype="bfloat16", shapes="64x64;64x64", variant="", m=64, n=64, k=64, batch=1,
               elements=4096, time_us=10.0)
    profile_db.write_compute(tmp_path, "h100", "m", [row, dict(row, m=128, shapes="128x64;64x64", elements=8192)], [])
    path = tmp_path / "compute" / "h100" / "m" / "mlp.csv"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines, lines[1].replace(",10.0", ",12.0")]) + "\n")  # line 4 repeats line 2's point
    with pytest.raises(FormatError) as info:
        profile_db.read_compute(tmp_path, "h100")
    assert f"{path}:4:" in str(info.value) and "line 2" in str(info.value)
    done = run_cli("-m", "profiling", "aiob", "--profile", str(tmp_path), "--compute_sku", "h100", "--model_name",
                   "gpt_tiny", "--world_size", "1", "-o", str(tmp_path / "aiob.txt"))
    one_line(done, "mlp.csv:4")
    assert not (tmp_path / "aiob.txt").exists()


def test_the_same_point_in_two_model_folders_is_still_read(tmp_path):
    row = dict(op="gemm", phase="forward", dtype="bfloat16", shapes="64x64;64x64", variant="", m=64, n=64, k=64, batch=1,
               elements=4096, time_us=10.0)
    profile_db.write_compute(tmp_path, "h100", "a", [row], [])
    profile_db.write_compute(tmp_path, "h100", "b", [dict(row, time_us=11.0)], [])
    assert [r["time_us"] for r in profile_db.read_compute(tmp_path, "h100").mlp] == [10.0]  # the first wins


# ---- 9: nccl-tests rows ----------------------------------------------------------------------------------

ROW_2M = "     2097152        524288     float     sum      -1    83.89   25.00   37.50      0    80.00   26.21   39.32      0"


@pytest.mark.parametrize("replacement, needle", [
    (ROW_2M.replace("83.89", "  nan"), "not a number"),
    (ROW_2M.replace("83.89", " -nan"), "not a number"),
    (ROW_2M.replace("83.89", "  inf"), "not a number"),
    (ROW_2M.replace("83.89", " 0.00"), "not positive"),
    (ROW_2M.replace("83.89", "-1.00"), "not positive"),
    (ROW_2M.replace("     2097152", "    -2097152"), "negative"),
    (ROW_2M.replace("   37.50      0", "   37.50      3"), "wrong"),
])
def test_nccl_tests_bad_rows_are_refused_with_file_and_line(tmp_path, replacement, needle):
    src = tmp_path / "all_reduce_perf.txt"
    src.write_text(NCCL_TESTS.replace(ROW_2M, replacement))
    done = run_cli("-m", "profiling", "nccl-tests", str(src), "--network_device", "dgx", "-o", str(tmp_path / "db"))
    one_line(done, f"{src}:13:", needle)
    assert not (tmp_path / "db").exists()


def test_nccl_tests_size_zero_rows_are_skipped_with_a_note(tmp_path):
    zero = "           0             0     float     sum      -1     4.10    0.00    0.00      0     4.00    0.00    0.00      0"
    src = tmp_path / "all_reduce_perf.txt"
    src.write_text(NCCL_TESTS.replace(ROW_2M, zero + "\n" + ROW_2M))
    done = run_cli("-m", "profiling", "nccl-tests", str(src), "--network_device", "dgx", "-o", str(tmp_path / "db"))
    assert done.returncode == 0, done.stderr
    assert f"{src}: line 13: size 0 skipped" in done.stderr
    sizes, _ = profile_db.read_network(tmp_path / "db", "dgx")["all_reduce"].series()[(4, 2)]
    assert sizes == (MIB, 2 * MIB, 4 * MIB)
    csv_text = (tmp_path / "db" / "network" / "dgx" / "allreduce.csv").read_text()
    assert ",," not in csv_text  # no empty cells (a NaN used to be written as one)


# ---- 9: two conversions into one database at once ----------------------------------------------------------

def nccl_output(sizes: list[int], us_per_mib: float) -> str:
    head = NCCL_TESTS.split("     1048576")[0]
    rows = [f"  {s:>10}  {s // 4:>12}     float     sum      -1  {20 + us_per_mib * s / MIB:8.2f}   1.00   1.00      0"
            f"  {20 + us_per_mib * s / MIB:8.2f}   1.00   1.00      0" for s in sizes]
    return head + "\n".join(rows) + "\n"


def test_a_conversion_waits_for_the_database_lock(tmp_path):
    from utils.io import folder_lock

    src = tmp_path / "all_reduce_perf.txt"
    src.write_text(NCCL_TESTS)
    db = tmp_path / "db"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with folder_lock(db, ".lock"):  # another writer holds the database
        proc = subprocess.Popen([sys.executable, "-m", "profiling", "nccl-tests", str(src), "--network_device", "dgx",
                                 "-o", str(db)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        line = proc.stderr.readline()  # it says it waits (read without a time limit: no timing assumption)
        assert "waiting for" in line and str(db) in line, line
        assert not (db / "network").exists() and proc.poll() is None  # nothing written while the lock is held
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert profile_db.read_network(db, "dgx")["all_reduce"].series()[(4, 2)][0] == (MIB, 2 * MIB, 4 * MIB)


def test_two_conversions_at_once_keep_every_row(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    rounds = 3
    for attempt in range(rounds):
        db = tmp_path / f"db{attempt}"
        procs = []
        expected: set[int] = set()
        for k in range(2):
            sizes = [(2 + 2 * i + k) * MIB for i in range(6)]
            expected |= set(sizes)
            src = tmp_path / f"all_reduce_perf_{attempt}_{k}.txt"
            src.write_text(nccl_output(sizes, 10.0 + k))
            procs.append(subprocess.Popen([sys.executable, "-m", "profiling", "nccl-tests", str(src), "--network_device",
                                           "dgx", "-o", str(db)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        for proc in procs:
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err
        sizes, _ = profile_db.read_network(db, "dgx")["all_reduce"].series()[(4, 2)]
        assert set(sizes) == expected, f"round {attempt}: lost {sorted(expected - set(sizes))}"
        meta = profile_db.read_meta(str(db / "network" / "dgx"))
        assert len(meta["converted_from"]) == 2


# ---- 10: devices ---------------------------------------------------------------------------------------------

def test_compute_device_tpu_is_one_line(tmp_path):
    done = run_cli("-m", "profiling", "compute", "-o", "db", "--device", "tpu", *GRID, cwd=tmp_path)
    one_line(done, "--device", "tpu")
    assert tree(tmp_path) == []


def test_compute_device_cuda_without_cuda_is_one_line(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    done = run_cli("-m", "profiling", "compute", "-o", "db", "--device", "cuda", *GRID, cwd=tmp_path)
    one_line(done, "--device cuda", "no CUDA device")
    assert tree(tmp_path) == []


# ---- 21: CPU numbers under a GPU's name ------------------------------------------------------------------

def test_cpu_times_under_a_gpu_sku_are_refused_unless_asked(tmp_path):
    pytest.importorskip("torch")
    done = run_cli("-m", "profiling", "compute", "-o", "db", "--sku", "h100", "--device", "cpu", *GRID, cwd=tmp_path,
                   timeout=300)
    one_line(done, "--sku h100", "CPU", "--allow_name_mismatch")
    assert tree(tmp_path) == []
    done = run_cli("-m", "profiling", "compute", "-o", "db", "--sku", "h100", "--device", "cpu", "--allow_name_mismatch",
                   *GRID, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "db" / "compute" / "h100" / "gemm_grid" / "mlp.csv").exists()


def test_names_that_speak_of_gpus():
    from profiling.guards import check_device_name, gpu_named

    assert [gpu_named(n) for n in ("h100_dgx", "a100_pair_nvlink", "gb200_nvl72", "h200", "cpu_gloo", "cpu", "my_box",
                                   "dgx_box", "H800-sxm")] == ["H100", "A100", "GB200", "H200", None, None, None, "dgx",
                                                                "H800"]
    check_device_name("cpu_gloo", "--network_device", None, False)
    check_device_name("h100_dgx", "--network_device", "H100", False)
    check_device_name("h100_pcie_box", "--sku", "H100", False)
    with pytest.raises(Exception, match="this run measures H100"):
        check_device_name("a100_pair", "--network_device", "H100", False)
    check_device_name("a100_pair", "--network_device", "H100", True)


def test_network_sweep_on_cpus_under_a_gpu_name_is_refused(tmp_path):
    pytest.importorskip("torch")
    from tests.test_replay import base_env, free_port

    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           "-m", "profiling", "network", "--network_device", "h100_dgx", "-o", "db", "--backend", "gloo", "-b", "1K",
           "-e", "1K", "--iters", "1", "--warmup", "0", "--timeout", "60"]
    done = subprocess.run(cmd, cwd=tmp_path, env=base_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    ours = [line for line in done.stderr.splitlines() if line.startswith("python -m profiling: error:")]
    assert len(ours) == 2 and all("--network_device h100_dgx names a GPU (H100) but this run measures a CPU" in line
                                  for line in ours), done.stderr
    # each rank: one line and no traceback of ours (torchrun's launcher adds its own ChildFailedError report)
    assert f'File "{ROOT / "profiling"}' not in done.stderr and not (tmp_path / "db").exists()


# ---- 15: simai-busbw without inter-node points ------------------------------------------------------------

def one_node_profile(root: Path) -> None:
    # all_reduce inside one 8-GPU node only: 256 MiB in 1600 us over 8 ranks = busbw 2^28 / 1.6e-3 x 1.75 = 293.6 GB/s
    write_series(root, "h100_dgx", "all_reduce", {(8, 8): {MIB: 40.0, 64 * MIB: 420.0, 256 * MIB: 1600.0},
                                                  (4, 4): {MIB: 30.0, 64 * MIB: 380.0, 256 * MIB: 1450.0}})


def test_simai_busbw_without_inter_node_points_says_so_and_uses_a_nominal_nic(tmp_path):
    one_node_profile(tmp_path / "db")
    done = run_cli("-m", "profiling", "simai-busbw", "--profile", "db", "--tp", "8", "--dp", "16", "-o", "busbw.yaml",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "busbw.yaml").read_text().splitlines()
    dp = float(text[text.index("DP:") + 2].split(":")[1])
    # DP: 16 ranks, one per node, over the NIC: a ring all-reduce's busbw is at most the NIC's 50 GB/s x 0.97
    # = 45.2 GiB/s, and with the fitted latencies at 256 MiB well above a tenth of it (before: 0.90 GiB/s)
    assert 10.0 < dp <= 45.2, dp
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    assert any("DP all_reduce over 16 ranks, 1 per node" in w and "no inter-node point" in w and "--nic_gbps" in w
               and "topo model" in w for w in warnings), done.stderr
    # the value's comment in the file says where it came from too
    assert "not measured: NIC" in text[text.index("DP:") + 1]
    slower = run_cli("-m", "profiling", "simai-busbw", "--profile", "db", "--tp", "8", "--dp", "16", "-o", "b2.yaml",
                     "--nic_gbps", "25", cwd=tmp_path)
    text2 = (tmp_path / "b2.yaml").read_text().splitlines()
    assert slower.returncode == 0 and float(text2[text2.index("DP:") + 2].split(":")[1]) < dp


def test_simai_busbw_over_a_database_file_is_refused(tmp_path):
    one_node_profile(tmp_path / "db")
    victim = tmp_path / "db" / "network" / "h100_dgx" / "allreduce.csv"
    before = victim.read_bytes()
    done = run_cli("-m", "profiling", "simai-busbw", "--profile", "db", "--tp", "8", "-o", str(victim), cwd=tmp_path)
    one_line(done, "would destroy", "--profile")
    assert victim.read_bytes() == before
    link = tmp_path / "busbw.yaml"
    link.symlink_to(victim)
    done = run_cli("-m", "profiling", "simai-busbw", "--profile", "db", "--tp", "8", "-o", "busbw.yaml", cwd=tmp_path)
    one_line(done, "busbw.yaml")
    assert victim.read_bytes() == before and link.is_symlink()


def test_fit_gpu_and_kernels_refuse_links_and_inputs(tmp_path):
    sweep = tmp_path / "k.json"
    sweep.write_text("{}\n")
    done = run_cli("-m", "profiling", "fit-gpu", str(sweep), "--base", "H200", "-o", str(sweep))
    one_line(done, "would destroy")
    link = tmp_path / "out.json"
    link.symlink_to(sweep)
    done = run_cli("-m", "profiling", "kernels", "-o", str(link), "--device", "cpu", "--quick")
    one_line(done, "symbolic link")
    assert sweep.read_text() == "{}\n"

"""Output paths at every entry that writes files (issue 21, items 1, 2 and 6).

1. A path that cannot be written (a folder, a parent that is a file) is one line naming it, exit 2, no
   traceback, nothing written.
2. An output that is one of the inputs is refused before anything is read or written: the input is
   left byte for byte as it was.
6. A killed writer's hidden temporary (``.NAME.XXXX.tmp``, older than ``utils.io.STALE_TMP_S``) is
   removed by the next write of NAME, and by any guarded writer of its folder; a fresh one (another
   writer's, still running) is left alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from utils.io import STALE_TMP_S

EXAMPLES = ROOT / "tests" / "data" / "examples"
TINY = ["--model_name", "gpt_tiny", "--world_size", "2", "--tensor_model_parallel_size", "2", "--global_batch", "8"]

# Each entry with the flags of one small run, and the flag that names its output file.
ENTRIES = {
    "megatron": (["-m", "workload_generator.generate_megatron_workload", *TINY], "-o"),
    "simai_training": (["-m", "workload_generator.SimAI_training_workload_generator", *TINY, "--gpu_type", "H100"], "-o"),
    "deepspeed": (["-m", "workload_generator.generate_deepspeed_stage3_workload", "--model_name", "llama_7B",
                   "--world_size", "16", "--global_batch", "16"], "-o"),
    "aicb": ([str(ROOT / "aicb.py"), *TINY, "--workload_only"], "-o"),
    "topo_gen": (["-m", "topo.gen", "-topo", "Spectrum-X", "-g", "16", "-gt", "H100"], "-o"),
    "search": (["-m", "simulator", "search", "-t", str(EXAMPLES / "topo_Spectrum-X_16g_8gps_400Gbps_H100"),
                "--gpu_type", "H100", "--model_name", "gpt_tiny", "--world_size", "8", "--global_batch", "8",
                "--tp", "2", "--pp", "1", "--micro_batches", "1", "--recompute", "none", "--jobs", "1", "-q"], "-o"),
    "log_report": (["-m", "log_analyzer", "report", str(EXAMPLES / "aicb_workload_L7B_megatron_tp2_pp1_mbs1.csv")], "-o"),
}


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def assert_one_line(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("entry", sorted(set(ENTRIES) - {"topo_gen"}))  # topo.gen -o DIR/ writes into DIR
def test_an_output_that_is_a_folder_is_one_line(entry, tmp_path):
    args, flag = ENTRIES[entry]
    folder = tmp_path / "out"
    folder.mkdir()
    before = files_under(tmp_path)
    proc = run([*args, flag, str(folder)], tmp_path)
    assert_one_line(proc, str(folder))
    assert files_under(tmp_path) == before  # nothing written, no temporaries


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_an_output_under_a_file_is_one_line(entry, tmp_path):
    args, flag = ENTRIES[entry]
    blocker = tmp_path / "plain.txt"
    blocker.write_text("a file, not a folder\n")
    before = files_under(tmp_path)
    proc = run([*args, flag, str(blocker / "out.csv")], tmp_path)
    assert_one_line(proc, str(blocker))
    assert files_under(tmp_path) == before and blocker.read_text() == "a file, not a folder\n"


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only folders")
@pytest.mark.parametrize("entry", ["megatron", "topo_gen"])
def test_an_output_in_a_read_only_folder_is_one_line(entry, tmp_path):
    args, flag = ENTRIES[entry]
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        proc = run([*args, flag, str(locked / "out.csv")], tmp_path)
        assert_one_line(proc, str(locked / "out.csv"))
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o755)


def test_the_simulator_result_under_a_file_is_one_line(tmp_path):
    blocker = tmp_path / "plain.txt"
    blocker.write_text("x\n")
    proc = run(["-m", "simulator", "-w", str(EXAMPLES / "simai_micro_allreduce.txt"), "-g", "8", "-g_p_s", "8",
                "-n_p_s", "8", "-r", str(blocker / "run-")], tmp_path)
    assert_one_line(proc, str(blocker))
    assert files_under(tmp_path) == ["plain.txt"]


# ---- 2: an output that is an input ------------------------------------------------------------

def _copy(name: str, to: Path) -> Path:
    target = to / name
    shutil.copyfile(EXAMPLES / name, target)
    return target


@pytest.mark.parametrize("case", ["report", "compare", "comp_filepath"])
def test_an_output_that_is_an_input_is_refused_and_the_input_kept(case, tmp_path):
    log = _copy("aicb_workload_L7B_megatron_tp2_pp1_mbs1.csv", tmp_path)
    other = tmp_path / "other.csv"
    shutil.copyfile(log, other)
    aiob = _copy("aiob_Example.txt", tmp_path)
    if case == "report":
        args, victim, needles = ["-m", "log_analyzer", "report", str(log), "-o", str(log)], log, ["-o/--output"]
    elif case == "compare":
        args, victim, needles = ["-m", "log_analyzer", "compare", str(log), str(other), "-o", str(log)], log, \
            ["-o/--output", "first log"]
    else:
        args = ["-m", "workload_generator.generate_megatron_workload", *TINY, "--computation_enable",
                "--comp_filepath", str(aiob), "-o", str(aiob)]
        victim, needles = aiob, ["-o/--output", "--comp_filepath"]
    before = victim.read_bytes()
    names = files_under(tmp_path)
    proc = run(args, tmp_path)
    assert_one_line(proc, "would destroy", *needles)
    assert victim.read_bytes() == before and files_under(tmp_path) == names


# ---- 6: a killed writer's temporaries ---------------------------------------------------------

def test_stale_temporaries_are_removed_by_the_next_write_and_fresh_ones_kept(tmp_path):
    out = tmp_path / "tiny.csv"
    stale = tmp_path / ".tiny.csv.0123456789ab.tmp"
    fresh = tmp_path / ".tiny.csv.ba9876543210.tmp"
    other = tmp_path / ".unrelated.csv.0123456789ab.tmp"  # another output's, as old: stale for any guarded writer
    other_fresh = tmp_path / ".unrelated.csv.ba9876543210.tmp"  # another output's, fresh: maybe a live writer's
    for path in (stale, fresh, other, other_fresh):
        path.write_text("half-written\n")
    old = time.time() - STALE_TMP_S - 60
    os.utime(stale, (old, old))
    os.utime(other, (old, old))
    proc = run(["-m", "workload_generator.generate_megatron_workload", *TINY, "-o", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out.exists() and not stale.exists()
    # issue 28 item 12: a guarded writer (utils.io.guard_output) also removes the folder's stale temporaries
    assert fresh.exists() and other_fresh.exists() and not other.exists()

"""The one output-path guard every writer calls (issue 28, items 1, 7 and 12): ``utils.io.guard_output``,
``safe_name``, ``folder_lock`` and the temporaries of ``atomic_write``.

1. An output that resolves to an input (the same path, a symbolic link to it, a hard link of it, the input
   reached through a linked folder) is refused with one line; the input is kept byte for byte.
7. A symbolic link at the output path that the command did not create is refused (neither followed nor
   replaced); one it made (``own_links``) is not.
12. Valid names of 248-255 bytes are written (the temporary's name is shortened, not the output's); a
   killed writer's temporary is removed by the next writer of the same file at once, and by any guarded
   writer of the folder once it is a minute old; a live writer's temporary is kept however old.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_capped
from utils.errors import UserError
from utils.io import OutputError, atomic_write, folder_lock, guard_output, name_in_folder, safe_name


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp"))


# ---- 12: long names ------------------------------------------------------------------------------------

@pytest.mark.parametrize("length", [220, 221, 248, 251, 255])
def test_valid_names_up_to_255_bytes_are_written(tmp_path, length):
    name = "n" * (length - 4) + ".csv"
    assert len(name.encode()) == length
    out = guard_output(tmp_path / name)
    with atomic_write(out) as handle:
        handle.write("a,b\n")
    assert (tmp_path / name).read_text() == "a,b\n" and _hidden(tmp_path) == []


def test_a_long_multibyte_name_is_written(tmp_path):
    name = "é" * 125 + ".txt"  # 254 bytes in UTF-8
    with atomic_write(tmp_path / name) as handle:
        handle.write("x")
    assert (tmp_path / name).read_text() == "x" and _hidden(tmp_path) == []


def test_a_name_longer_than_255_bytes_is_one_line(tmp_path):
    with pytest.raises(OutputError, match="256 bytes"):
        guard_output(tmp_path / ("n" * 256), flag="-o")


# ---- 1: an output that is an input ---------------------------------------------------------------------

@pytest.mark.parametrize("how", ["same", "symlink", "hardlink", "linked_folder", "relative"])
def test_an_output_that_resolves_to_an_input_is_refused(tmp_path, how, monkeypatch):
    src = tmp_path / "in.txt"
    src.write_text("precious\n")
    if how == "same":
        out = src
    elif how == "symlink":
        out = tmp_path / "link.txt"
        out.symlink_to(src)
    elif how == "hardlink":
        out = tmp_path / "hard.txt"
        os.link(src, out)
    elif how == "linked_folder":
        (tmp_path / "alias").symlink_to(tmp_path, target_is_directory=True)
        out = tmp_path / "alias" / "in.txt"
    else:
        monkeypatch.chdir(tmp_path)
        out = Path("sub/../in.txt")
        (tmp_path / "sub").mkdir()
    with pytest.raises(OutputError) as info:
        guard_output(out, {"-w/--workload": str(src)}, "--trace")
    message = str(info.value)
    assert "\n" not in message and message.startswith("--trace") and ("would destroy" in message or "link" in message)
    assert src.read_text() == "precious\n"


def test_outputs_that_are_not_inputs_pass(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("x")
    assert guard_output(tmp_path / "new.txt", {"in": src, "none": None, "several": [src, tmp_path / "absent"]}) \
        == str(tmp_path / "new.txt")
    (tmp_path / "old.txt").write_text("an old result: replaced atomically, not an input")
    guard_output(tmp_path / "old.txt", {"in": src})


# ---- 7: symbolic links at the output path --------------------------------------------------------------

def test_a_symlink_the_command_did_not_create_is_refused(tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("someone else's file\n")
    link = tmp_path / "out.csv"
    link.symlink_to(target)
    with pytest.raises(OutputError, match="symbolic link"):
        guard_output(link)
    dangling = tmp_path / "dangling.csv"
    dangling.symlink_to(tmp_path / "nowhere" / "x")
    with pytest.raises(OutputError, match="symbolic link"):
        guard_output(dangling)
    assert guard_output(link, own_links=[link]) == str(link)
    assert target.read_text() == "someone else's file\n"


# ---- names from flags ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["../../../x", "..", ".", "a/b", "/abs", "", "  ", "x\0y"])
def test_names_from_flags_stay_inside_their_folder(tmp_path, name):
    with pytest.raises(UserError) as info:
        name_in_folder(tmp_path, name, "--sku")
    assert str(info.value).startswith("--sku") and "\n" not in str(info.value)


def test_plain_names_pass():
    assert safe_name("h100_dgx", "--network_device") == "h100_dgx"
    assert safe_name("llama-3.1 8B", "--model_name") == "llama-3.1 8B"
    assert safe_name("n" * 255, "--x") == "n" * 255


# ---- 12: a killed writer's temporaries -----------------------------------------------------------------

WRITER = """
import sys, time
from utils.io import atomic_write
with atomic_write(sys.argv[1]) as handle:
    handle.write("half" * 1000)
    handle.flush()
    print("writing", flush=True)
    time.sleep(600)
"""


def _writer(path: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
    return proc


def _age(path: Path, seconds: float) -> None:
    old = time.time() - seconds
    os.utime(path, (old, old))


def test_a_killed_writers_temporary_is_removed_and_a_live_ones_kept(tmp_path):
    out = tmp_path / "result.csv"
    killed = _writer(out)
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=60)
    live = _writer(tmp_path / "other.csv")
    try:
        leftovers = _hidden(tmp_path)
        assert len(leftovers) == 2
        theirs = next(n for n in leftovers if n.startswith(".other.csv."))
        _age(tmp_path / theirs, 3600)  # an hour old, but its writer runs (a long sweep): kept
        # the next writer of the same file removes the killed writer's temporary at once, however fresh
        with atomic_write(out) as handle:
            handle.write("done\n")
        assert out.read_text() == "done\n" and _hidden(tmp_path) == [theirs]
        guard_output(tmp_path / "third.csv")  # a guarded writer of the folder keeps it too
        assert _hidden(tmp_path) == [theirs]
    finally:
        live.kill()
        live.wait(timeout=60)


def test_a_guarded_writer_removes_the_folders_stale_temporaries_at_start(tmp_path):
    killed = _writer(tmp_path / "a.csv")
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=60)
    (leftover,) = _hidden(tmp_path)
    guard_output(tmp_path / "b.csv")  # another output: a fresh leftover may be a slow writer's, so it stays
    assert _hidden(tmp_path) == [leftover]
    _age(tmp_path / leftover, 120)  # older than a minute and its writer gone: removed by any guarded writer
    guard_output(tmp_path / "b.csv")
    assert _hidden(tmp_path) == []


# ---- the database lock ---------------------------------------------------------------------------------

HOLDER = """
import sys, time
from utils.io import folder_lock
with folder_lock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.readline()
"""


def test_folder_lock_makes_a_second_writer_wait_and_says_so(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        notes: list[str] = []
        with pytest.raises(OutputError, match="held this lock"):
            with folder_lock(tmp_path, note=notes.append, wait_s=0.5):
                pass
        assert len(notes) == 1 and "waiting for" in notes[0]
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(timeout=60)
    with folder_lock(tmp_path, note=notes.append):  # released with its process
        pass
    assert len(notes) == 1


def test_guard_output_refuses_a_path_under_a_file(tmp_path):
    # -o FILE/name (simulator place -o over a file, a link to one): os.makedirs failed with a traceback after the work
    blocker = tmp_path / "plain.txt"
    blocker.write_text("x\n")
    for path in (blocker / "placement.txt", blocker / "a" / "b" / "placement.txt"):
        with pytest.raises(OutputError, match="plain.txt is a file, not a folder"):
            guard_output(str(path), None, "-o/--output")
    assert guard_output(str(tmp_path / "new" / "dir" / "out.txt"), None) == str(tmp_path / "new" / "dir" / "out.txt")


# ---- a device given as an input file -------------------------------------------------------------------------

EXAMPLE_WORKLOAD = str(ROOT / "tests" / "data" / "examples" / "simai_workload_analytical.txt")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
@pytest.mark.parametrize("args, expected", [
    (("-m", "simulator", "-w", "/dev/zero", "-g_p_s", "8"), "a SimAI workload"),
    (("-m", "simulator", "-t", "/dev/zero", "--model_name", "llama3_8B", "--world_size", "8", "--global_batch", "8",
      "--gpu_type", "H100"), "a SimAI topology"),
    (("-m", "simulator", "-w", EXAMPLE_WORKLOAD, "-g", "9216", "-g_p_s", "8", "-n_p_s", "8", "-busbw", "/dev/zero"),
     "SimAI's busbw.yaml"),
    (("-m", "log_analyzer", "report", "/dev/zero", "-o", "r.html"), "a replay log"),
    (("-m", "workload_generator.SimAI_inference_workload_generator", "DeepSeek-671B", "/dev/zero", "--world_size", "8",
      "--expert_model_parallel_size", "8", "--gpu_type", "H200", "-o", "x.txt"), "an inference config"),
])
def test_a_device_as_an_input_is_one_line(tmp_path, args, expected):
    """``/dev/zero`` as a workload, topology, busbw.yaml, log or model config: read until memory ran out (a
    MemoryError traceback, or the machine's OOM killer); now one line naming it, exit 2, nothing written."""
    done = run_capped(*args, cwd=tmp_path, timeout=300)  # before the fix: /dev/zero read until memory ran out
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.splitlines()
    assert "/dev/zero: a device, not a file (expected " + expected in line, line
    assert os.listdir(tmp_path) == []

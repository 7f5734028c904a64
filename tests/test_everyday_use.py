"""A new user's first commands (issue 21, items 13, 15, 16): console entry points and the README's activation
line, the scripts' own --help, the replay without torch, and a demo whose commands can be pasted and which
follows one job from its workload to an HTML report."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None


def _scripts() -> dict[str, str]:
    if tomllib is None:
        pytest.skip("tomllib needs Python 3.11")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


# ---- 13: entry points, activation, torch ---------------------------------------------------------------------

def test_console_entry_points_answer_help():
    scripts = _scripts()
    assert {"aicb", "aicb-simulator", "aicb-topo-gen", "aicb-log-analyzer", "aicb-search"} <= set(scripts)
    for name, target in scripts.items():
        module, function = target.split(":")
        code = f"import sys; sys.argv = [{name!r}, '--help']; from {module} import {function}; {function}()"
        proc = run_cli("-c", code)
        assert proc.returncode == 0, (name, proc.stderr[-400:])
        assert "usage:" in proc.stdout, name


def test_readme_says_what_to_activate_and_names_the_commands():
    readme = (ROOT / "README.md").read_text()
    quick = readme[readme.index("## Quick start"):readme.index("## What is in the box")]
    assert ". .venv/bin/activate" in quick
    for name in _scripts():
        assert f"`{name}`" in readme, name


def _no_torch(tmp_path: Path) -> dict[str, str]:
    """An environment in which ``import torch`` fails, as on a machine without the torch extra."""
    stub = tmp_path / "stub" / "torch"
    stub.mkdir(parents=True, exist_ok=True)
    (stub / "__init__.py").write_text("raise ImportError(\"No module named 'torch'\")\n")
    return dict(os.environ, PYTHONPATH=f"{tmp_path / 'stub'}{os.pathsep}{ROOT}", PYTHONDONTWRITEBYTECODE="1")


def test_replay_without_torch_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "aicb.py"), "--model_name", "gpt_tiny", "--world_size", "1"],
                          cwd=tmp_path, env=_no_torch(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "the replay needs torch" in lines[0] and "pip install '.[torch]'" in lines[0]
    assert ". .venv/bin/activate" in lines[0]
    # generation alone needs no torch
    proc = subprocess.run([sys.executable, str(ROOT / "aicb.py"), "--model_name", "gpt_tiny", "--world_size", "1",
                           "--workload_only", "-o", "w.csv"], cwd=tmp_path, env=_no_torch(tmp_path), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_scripts_without_torchrun_say_what_to_install(monkeypatch):
    import importlib.util
    import shutil

    from utils import aicb_scripts
    from utils.errors import ConfigError

    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(aicb_scripts.os, "access", lambda path, mode: False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"torchrun, which is not installed: install the torch extra"):
        aicb_scripts.command_for(aicb_scripts.MEGATRON_GPT, ["-m", "7", "--world_size", "8"], gpus_on_node=8)


# ---- 15: every script answers --help itself ------------------------------------------------------------------

SHELL_SCRIPTS = sorted(p.name for p in (ROOT / "scripts").glob("*.sh"))


@pytest.mark.parametrize("script", SHELL_SCRIPTS)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_shell_scripts_answer_help(script, flag):
    env = dict(os.environ, PYTHON=sys.executable, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(["sh", str(ROOT / "scripts" / script), flag, "-m", "13"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert 5 <= len(lines) <= 40, proc.stdout
    assert "docs/aicb_scripts.md" in proc.stdout and lines[0].lower().startswith("usage:")
    assert not any(line.startswith("+ ") for line in lines)  # nothing was started
    assert proc.stderr == ""


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "scripts").glob("*.py")))
def test_python_scripts_answer_help(script):
    proc = run_cli(str(ROOT / "scripts" / script), "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage:") and len(proc.stdout.splitlines()) <= 40
    assert "== 1." not in proc.stdout and "+ " not in proc.stdout


def test_script_help_describes_the_script():
    from utils.aicb_scripts import MEGATRON_GPT, usage

    text = usage(MEGATRON_GPT)
    assert "-m (13)" in text and "--tensor_model_parallel_size (8)" in text
    assert "Every other flag is passed on to aicb.py under torchrun" in text


# ---- 16: the demo ---------------------------------------------------------------------------------------------

def test_demo_commands_paste_and_follow_one_job(tmp_path, monkeypatch, capsys):
    """The demo with its commands recorded instead of run: each echoed line is the command that ran (with the
    interpreter, paths relative to the repository where the commands run), steps 1, 2, 5 and 6 describe the
    same job, the SimAI file gets the compute model's times for that job, and the last step writes an HTML
    report whose path is printed."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import demo

    monkeypatch.setattr(demo, "OUT", ROOT / "results" / "demo_test_unrun")
    ran: list[list[str]] = []

    def record(cmd, cwd=None, check=False):
        ran.append([str(c) for c in cmd])
        if "aicb.py" in cmd:  # the replay's log, which the report step reads
            logs = demo.OUT / "comm_logs"
            logs.mkdir(parents=True, exist_ok=True)
            (logs / "megatron_gpt_tiny_sp_True_iteration_2_computationEnable_False_4n_log.csv").write_text("")
        if "workload_generator.generate_megatron_workload" in cmd:
            from workload_generator.generate_megatron_workload import main

            assert main(cmd[cmd.index("-m") + 2:]) == 0
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(demo.subprocess, "run", record)
    try:
        assert demo.main([]) == 0
    finally:
        import shutil

        shutil.rmtree(demo.OUT, ignore_errors=True)
    out = capsys.readouterr().out
    echoed = [line[2:] for line in out.splitlines() if line.startswith("$ ")]
    assert len(echoed) == len(ran) == 7
    for line, cmd in zip(echoed, ran):
        words = shlex.split(line)
        assert words[0] in ("python", os.path.relpath(sys.executable, ROOT), sys.executable)
        assert words[1:] == [demo.shown(c) for c in cmd[1:]]  # the same arguments, paths relative to ROOT
        assert cmd[0] == sys.executable
    job = " ".join(demo.JOB)
    for index in (0, 1, 4, 5):
        assert job in " ".join(ran[index]), ran[index]
    assert "--gpu_type" in ran[1] and "aiob_Example" not in " ".join(ran[1])
    world = demo.JOB[demo.JOB.index("--world_size") + 1]
    assert ran[3][ran[3].index("-g") + 1] == world and ran[5][ran[5].index("--nproc_per_node") + 1] == world
    assert ran[3][ran[3].index("-w") + 1] == ran[1][ran[1].index("--output") + 1]
    assert ran[6][:4] == [sys.executable, "-m", "log_analyzer", "report"] and ran[6][-1].endswith("report.html")
    assert out.rstrip().endswith("results/demo_test_unrun/report.html")


def test_demo_shows_folders_with_their_slash():
    sys.path.insert(0, str(ROOT / "scripts"))
    import demo

    assert demo.shown(str(ROOT / "results" / "demo") + "/") == "results/demo/"
    assert demo.shown(ROOT / "results" / "demo" / "x.csv") == "results/demo/x.csv"


def test_simai_summary_prints_gb_per_s(examples, tmp_path):
    """One bandwidth unit in what we print: SimAI's -nv/-nic defaults (GiB/s, its flags' unit) appear converted
    to GB/s (1e9 B/s): H100's 370.8 GiB/s x 2^30 / 1e9 = 398.1 GB/s, cx7's 48.5 GiB/s = 52.1 GB/s."""
    proc = run_cli("-m", "simulator", "-w", str(examples / "simai_micro_allreduce.txt"), "-g", "8", "-g_p_s", "8",
                   "-n_p_s", "8", "-g_type", "H100", "-r", str(tmp_path) + "/")
    assert proc.returncode == 0, proc.stderr
    assert "NVLink 398.1 GB/s (-nv 370.8 GiB/s), NIC 52.1 GB/s (-nic 48.5 GiB/s)" in proc.stdout

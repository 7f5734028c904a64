"""Issue 28, the entries' part: the size estimate counts the schedule (item 6), the compute source and the device
its times were measured on (item 13), SimAI's ``AS_*`` variables (item 21), the inference entry's memory line
(item 19)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_capped


def _run(*args: str, cwd, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return run_capped(*args, cwd=cwd, timeout=timeout, memory_gib=2, env=env)


# ---- item 6: --global_batch 1e9 with the default layout -----------------------------------------------------

@pytest.mark.parametrize("entry", [["-m", "workload_generator.generate_megatron_workload"],
                                   [str(ROOT / "aicb.py"), "--workload_only"]])
def test_a_huge_global_batch_of_few_items_is_refused_at_once(tmp_path, entry):
    """tp 1 without computation items: each micro-batch adds no item, so the item estimate (96) passed, and the
    generator walked 2 billion schedule steps (2.3 GB in 30 s, then killed).  The estimate counts the steps."""
    proc = _run(*entry, "--global_batch", "1e9", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-500:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-500:]
    assert "2,000,000,000 pipeline-schedule steps" in lines[0]
    assert "--global_batch (1,000,000,000 micro-batches per iteration)" in lines[0] and "(--max_items)" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_the_step_estimate_bounds_the_schedule():
    """Steps of the generator's schedule: pp 1, 8 micro-batches: 8 forwards and 8 backwards = 16; pp 2 with 2 model
    chunks per stage (interleaved), 8 micro-batches: (forward + backward) x 2 chunks x 8 = 32 compute steps, plus at
    most as many p2p steps: 64 per stage."""
    from utils.cli import parse_job
    from workload_generator import limits
    from workload_generator.schedules import pipeline_schedule

    job, _ = parse_job(["--model_name", "gpt_tiny", "--world_size", "8", "--global_batch", "64"], "p", "d")
    assert limits.megatron_steps(job, [0]) == 16 == len(pipeline_schedule(1, 0, 8))
    job, _ = parse_job(["--model_name", "gpt_tiny", "--world_size", "8", "--pipeline_model_parallel", "2",
                        "--num_layers_per_virtual_pipeline_stage", "1", "--global_batch", "32"], "p", "d")
    assert job.parallel.ga == 8
    steps = limits.megatron_steps(job, [1])
    assert steps == 64 and len(pipeline_schedule(2, 1, 8, 2)) <= steps


# ---- item 13: the compute source and the device a compute file was measured on ------------------------------

TINY = ["--model_name", "gpt_tiny", "--world_size", "2", "--tensor_model_parallel_size", "2", "--global_batch", "4"]


@pytest.fixture
def compute_files(tmp_path):
    """An H100 estimate file (its device: ``H100 (analytical estimate, not a measurement)``) and the same times
    labelled as AIOB labels a CPU measurement."""
    h100 = tmp_path / "h100.txt"
    proc = _run("-m", "mocked_model.aiob.estimate", *TINY, "--gpu_type", "H100", "-o", str(h100), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = h100.read_text()
    assert "\ndevice: H100 (analytical estimate, not a measurement)\n" in text
    cpu = tmp_path / "cpu.txt"
    cpu.write_text(text.replace("device: H100 (analytical estimate, not a measurement)",
                                "device: cpu (x86_64, 2 threads)"))
    return h100, cpu


def _generate(tmp_path, *extra: str) -> subprocess.CompletedProcess:
    return _run("-m", "workload_generator.generate_megatron_workload", *TINY, *extra, "-o", str(tmp_path / "w.csv"),
                cwd=tmp_path)


def test_a_cpu_timing_file_is_refused_for_a_gpu(tmp_path, compute_files):
    """Before: the CPU's times were used for --gpu_type H100 without a word (TPOT 312,940 ms for 37.3)."""
    _, cpu = compute_files
    proc = _generate(tmp_path, "--comp_filepath", str(cpu), "--gpu_type", "H100")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"generate_megatron_workload: error: --comp_filepath {cpu}: it was measured on a "
                                  "CPU (x86_64, 2 threads), not on --gpu_type H100")
    assert "--compute_source model" in proc.stderr and "--compute_source file" in proc.stderr
    assert not (tmp_path / "w.csv").exists()


def test_another_gpus_file_is_refused_unless_chosen(tmp_path, compute_files):
    h100, _ = compute_files
    refused = _generate(tmp_path, "--comp_filepath", str(h100), "--gpu_type", "A100")
    assert refused.returncode == 2 and "the compute model's estimate for H100, not for --gpu_type A100" in refused.stderr
    chosen = _generate(tmp_path, "--comp_filepath", str(h100), "--gpu_type", "A100", "--compute_source", "file")
    assert chosen.returncode == 0, chosen.stderr
    assert chosen.stderr.strip() == (f"warning: --comp_filepath {h100}: it holds the compute model's estimate for H100, "
                                     "not for --gpu_type A100; its times are that device's (--compute_source file)")
    # the source and the device said on stdout
    assert (f"compute times: file (106 operations), H100 (analytical estimate, not a measurement); compute file {h100}"
            in chosen.stdout)


def test_a_matching_or_unlabelled_file_is_used_and_named(tmp_path, compute_files):
    h100, cpu = compute_files
    same = _generate(tmp_path, "--comp_filepath", str(h100), "--gpu_type", "h100-sxm")   # spellings of one GPU
    assert same.returncode == 0 and same.stderr == "", same.stderr
    alone = _generate(tmp_path, "--comp_filepath", str(cpu))   # no --gpu_type asked for: the file's times
    assert alone.returncode == 0 and "measured on cpu (x86_64, 2 threads)" in alone.stdout
    aicb = tmp_path / "aicb.txt"   # AICB's files record no device: nothing to compare, and said so
    aicb.write_text("".join(line for line in h100.read_text().splitlines(keepends=True)
                            if not line.startswith(("device:", "compute_source:", "dtype:"))))
    unlabelled = _generate(tmp_path, "--comp_filepath", str(aicb), "--gpu_type", "A100")
    assert unlabelled.returncode == 0, unlabelled.stderr
    assert "the file does not record its device" in unlabelled.stdout


def test_gpu_model_names():
    from mocked_model.aiob.compute_file import gpu_model

    assert [gpu_model(n) for n in ("NVIDIA H100 80GB HBM3", "h100-sxm", "A100_40G", "NVIDIA A800-SXM4-80GB", "H20",
                                   "NVIDIA H200", "GB200", "cpu (x86_64, 2 threads)", "", None, "mystery")] == [
        "H100", "H100", "A100", "A800", "H20", "H200", "GB200", "cpu", None, None, None]


# ---- item 21: SimAI's AS_* variables --------------------------------------------------------------------------

def test_simai_variables_are_named_when_ignored(tmp_path):
    """Before: AS_SEND_LAT and friends, SimAI's simulator settings, were ignored without a note."""
    proc = _run("-m", "workload_generator.SimAI_training_workload_generator", *TINY, "--gpu_type", "H100", "-o",
                str(tmp_path / "w.txt"), cwd=tmp_path,
                env={"AS_SEND_LAT": "3", "AS_NVLS_ENABLE": "1", "AS_PXN_ENABLE": "", "AS_OF": "2024-01-01"})
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if ": note: " in line]
    assert notes == [
        "SimAI_training_workload_generator: note: AS_SEND_LAT=3 (the send latency of every flow) is ignored: SimAI "
        "reads it when it simulates; the workload file does not depend on it",
        "SimAI_training_workload_generator: note: AS_NVLS_ENABLE=1 (NVLink SHARP for all-reduce) is ignored: SimAI "
        "reads it when it simulates; the workload file does not depend on it"], proc.stderr


def test_ignored_simai_env_lists_only_simai_variables():
    from workload_generator.entry import ignored_simai_env

    env = {"AS_LOG_LEVEL": "DEBUG", "AS_NVLSTREE_ENABLE": "1", "AS_OF": "x", "AS_PXN_ENABLE": ""}
    assert ignored_simai_env(env) == ["AS_NVLSTREE_ENABLE", "AS_LOG_LEVEL"]


# ---- item 19: aicb.py --frame Inference prints the memory per GPU ------------------------------------------------

def test_aicb_inference_prints_memory(tmp_path):
    proc = _run(str(ROOT / "aicb.py"), "--frame", "Inference", "-m", "deepseek-671B", "--gpu_type", "H200",
                "--world_size", "8", "--expert_model_parallel_size", "8", "--workload_only", "-o",
                str(tmp_path / "w.csv"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    from mocked_model.inference_memory import memory_per_gpu
    from workload_generator.inference_entry import aicb_parse, inference_job_of

    job, _ = aicb_parse(["-m", "deepseek-671B", "--gpu_type", "H200", "--world_size", "8",
                         "--expert_model_parallel_size", "8"], "aicb.py")
    line = memory_per_gpu(inference_job_of(job)).summary()
    assert line.startswith("memory per GPU: weights ") and line in proc.stdout.splitlines()


# ---- items 17 and 12: AICB-style names that replace a file, temporaries a killed writer left ------------------

def test_a_derived_name_that_replaces_a_file_is_named(tmp_path):
    """Two jobs that differ in tp map to one AICB-style name: the second used to replace the first's file
    without a note.  Now a warning names it (the file is still replaced: AICB's users rerun commands)."""
    first = _run("-m", "workload_generator.generate_megatron_workload", *TINY, cwd=tmp_path)
    assert first.returncode == 0 and "warning" not in first.stderr, first.stderr
    path = "results/mocked_workload/megatron_gpt_tiny_sp_False_iteration_1_computationEnable_False_2n_workload.csv"
    assert (tmp_path / path).exists()
    other = [a if a != "2" or i != TINY.index("--tensor_model_parallel_size") + 1 else "1" for i, a in enumerate(TINY)]
    second = _run("-m", "workload_generator.generate_megatron_workload", *other, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert second.stderr.startswith(f"generate_megatron_workload: warning: replacing {path}, written by an earlier "
                                    "run"), second.stderr
    assert second.stderr.count("\n") == 1
    explicit = _run("-m", "workload_generator.generate_megatron_workload", *TINY, "-o", path, cwd=tmp_path)
    assert explicit.returncode == 0 and explicit.stderr == ""   # -o names the file: replacing it is the request


def test_an_output_that_is_a_symbolic_link_is_refused(tmp_path):
    target = tmp_path / "precious.csv"
    target.write_text("keep me\n")
    folder = tmp_path / "results" / "mocked_workload"
    folder.mkdir(parents=True)
    link = folder / "megatron_gpt_tiny_sp_False_iteration_1_computationEnable_False_2n_workload.csv"
    link.symlink_to(target)
    proc = _run(str(ROOT / "aicb.py"), *TINY, "--workload_only", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "is a symbolic link" in proc.stderr
    assert target.read_text() == "keep me\n" and link.is_symlink()


KILLED_WRITER = """
import os, signal, sys
sys.path.insert(0, {root!r})
from utils.io import atomic_write
with atomic_write(sys.argv[1]) as handle:
    handle.write("half a row")
    handle.flush()
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_writers_temporary_is_removed_by_the_next_writer_of_its_folder(tmp_path):
    """A SIGKILL mid-write leaves ``.<name>.<...>.tmp``; it used to stay until the same file was written again (23
    after 23 kills of different commands).  Every writer of ours now checks its output first, which removes a
    dead writer's temporaries in the folder (``utils.io.guard_output``)."""
    folder = tmp_path / "results" / "mocked_workload"
    folder.mkdir(parents=True)
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITER.format(root=str(ROOT)), str(folder / "other.csv")],
                            capture_output=True, text=True, timeout=60)
    assert killed.returncode == -9
    left = [p for p in folder.iterdir() if p.name.endswith(".tmp")]
    assert len(left) == 1
    old = left[0].stat().st_mtime - 3600   # an hour ago: no live writer keeps a temporary that long untouched
    os.utime(left[0], (old, old))
    proc = _run("-m", "workload_generator.generate_megatron_workload", *TINY, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_a_stale_cpu_aiob_file_does_not_answer_for_an_inference_gpu(tmp_path, capsys):
    """Item 13, inference side: the README's block ran '-a' (AIOB on this CPU) and then '--gpu_type H100' for the same
    job; the second run silently reused the CPU's file (TPOT 312,940 ms where the README says 37.3)."""
    from mocked_model.aiob.compute_file import ComputeFile, SectionTimes
    from utils.errors import ConfigError
    from utils.inference_config import resolve_model
    from utils.inference_job import InferenceJob
    from workload_generator.inference import default_aiob_path, default_source, timed_step

    job = InferenceJob(resolve_model("DeepSeek-671B"), "decode", 1024, 32, world_size=8, ep=8, gpu_type="H100",
                       model_name="DeepSeek-671B")
    path = default_aiob_path(job, str(tmp_path))
    stale = ComputeFile(labels={"device": "cpu (x86_64, 2 threads)"}, sections={"x": SectionTimes(1.0, 1.0, 1.0)})
    os.makedirs(os.path.dirname(path))
    stale.write(path)
    assert default_source(job, None, False, None, path) == "model"
    note = capsys.readouterr().err
    assert note.startswith(f"note: {path} is not used (") and "--compute_source model answers instead" in note
    try:
        timed_step(job, "file", path)  # chosen by --comp_filepath alone: refused, as for training
    except ConfigError as exc:
        assert "--compute_source model" in str(exc) and "--compute_source file" in str(exc)
    else:
        raise AssertionError("a CPU file for --gpu_type H100 was used without --compute_source file")
    same = ComputeFile(labels={"device": "NVIDIA H100 80GB HBM3"}, sections={"x": SectionTimes(1.0, 1.0, 1.0)})
    same.write(path)
    assert default_source(job, None, False, None, path) == "file"  # measured on the GPU asked for: reused


# ---- item 1: an inference output over its own JSON config ----------------------------------------------------

@pytest.mark.parametrize("entry", ["SimAI_inference_workload_generator", "Vidur_workload_generator"])
def test_an_inference_output_over_its_model_config_is_refused(tmp_path, entry):
    """The inference generators wrote ``-o`` without a check: ``-o`` naming the model's JSON config replaced it (exit
    0), and every later run with that config failed."""
    config = tmp_path / "model.json"
    config.write_bytes((ROOT / "scripts" / "inference_configs" / "deepseek_default.json").read_bytes())
    kept = config.read_bytes()
    proc = _run("-m", f"workload_generator.{entry}", "DeepSeek-671B", str(config), "--world_size", "8",
                "--expert_model_parallel_size", "8", "--gpu_type", "H200", "--output", str(config), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line == f"{entry}: error: -o/--output {config} is also the model's JSON config: writing it would destroy that input"
    assert config.read_bytes() == kept and sorted(os.listdir(tmp_path)) == ["model.json"]

"""Adversarial inputs of the workload generators and the simulator that failed before this change: a huge
--num_layers that added few items (13 GB of layers built, or a simulator that walked 10^12 layers), SimAI record
numbers beyond int64 and compute-file times of 1e300 (accepted and written as 300-digit numbers), bandwidths beyond
a C float (an OverflowError traceback), and --model topo on 10^12 GPUs (MemoryError)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import EXAMPLES, ROOT, run_capped
from utils.errors import FormatError


def _run(*args: str, cwd, timeout: float = 120) -> subprocess.CompletedProcess:
    return run_capped(*args, cwd=cwd, timeout=timeout, memory_gib=2)


def _refused(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 2, proc.stderr[-800:]
    assert "Traceback" not in proc.stderr, proc.stderr[-800:]
    lines = [line for line in proc.stderr.strip().splitlines() if ": warning:" not in line]
    assert len(lines) == 1, proc.stderr[-800:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _simai_file(tmp_path, name: str = "w.txt"):
    """A small SimAI file of our generator (gpt_tiny, 8 GPUs, tp 2)."""
    from workload_generator.SimAI_training_workload_generator import main

    path = tmp_path / name
    assert main(["--model_name", "gpt_tiny", "--world_size", "8", "--tensor_model_parallel_size", "2",
                 "--global_batch", "8", "-o", str(path)]) == 0
    return path


# ---- layers that add no items -------------------------------------------------------------------------------

@pytest.mark.parametrize("entry", [["-m", "workload_generator.generate_megatron_workload"],
                                   [str(ROOT / "aicb.py"), "--workload_only"]])
def test_a_million_layers_of_few_items_are_refused_at_once(tmp_path, entry):
    """tp 1 without computation items: a layer adds no item, so 10^6 layers estimated 2 million items and passed;
    building them took 13 GB (MemoryError under a 3 GB cap after 26 s).  Each built layer now counts."""
    proc = _run(*entry, "--num_layers", "1e6", cwd=tmp_path)
    _refused(proc, "would build 1,000,000 transformer layers", "lower --num_layers (1,000,000)", "(--max_items)")
    assert list(tmp_path.iterdir()) == []


def test_layers_within_the_limit_still_generate():
    from utils.cli import parse_job
    from workload_generator import limits

    job, _ = parse_job(["--num_layers", "1000"], "p", "d")
    limits.check_megatron(job, [0])  # 1,000 layers: far below the limit
    job, _ = parse_job(["--num_layers", "100001"], "p", "d")
    with pytest.raises(limits.ConfigError, match="would build 100,001 transformer layers"):
        limits.check_megatron(job, [0])
    job, _ = parse_job(["--num_layers", "100001", "--max_items", "1e7"], "p", "d")
    limits.check_megatron(job, [0])  # --max_items raises the bound


@pytest.mark.parametrize("model", ["topo", "simai"])
def test_the_simulator_refuses_a_trillion_layers_before_walking_them(tmp_path, model):
    """--model topo computed every stage's signature (one entry per layer) before any check: 10^9 layers ran
    until killed."""
    proc = _run("-m", "simulator", "--model", model, "--model_name", "gpt_tiny", "--world_size", "8",
                "--global_batch", "16", "--gpu_type", "H100", "-g_p_s", "8", "-n_p_s", "8", "-q",
                "--num_layers", "1e9", cwd=tmp_path, timeout=60)
    _refused(proc, "(--max_items)", "--num_layers (1,000,000,000)")
    assert list(tmp_path.iterdir()) == []


# ---- numbers beyond 64 bits -----------------------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [(2, "99999999999999999999999"), (4, "18446744073709551616"),
                                          (10, "99999999999999999999999"), (1, "-99999999999999999999999")])
def test_simai_record_numbers_beyond_int64_are_refused(tmp_path, field, value):
    path = _simai_file(tmp_path)
    lines = path.read_text().splitlines()
    fields = lines[2].split("\t")
    fields[field] = value
    lines[2] = "\t".join(fields)
    path.write_text("\n".join(lines) + "\n")
    from workload_generator.simai import SimAIWorkload

    with pytest.raises(FormatError, match="64-bit integer"):
        SimAIWorkload.read(path, strict=False)
    out = tmp_path / "out"
    out.mkdir()
    proc = _run("-m", "simulator", "-w", str(path), "-g_p_s", "8", "-n_p_s", "8", "-q", cwd=out)
    _refused(proc, f"{path}:3:", "beyond the largest value a SimAI record holds")
    assert list(out.iterdir()) == []


def test_simai_numbers_of_64_bits_still_read(tmp_path):
    from workload_generator.simai import SimAIWorkload

    path = _simai_file(tmp_path)
    lines = path.read_text().splitlines()
    fields = lines[2].split("\t")
    fields[2] = str(2**64 - 1)
    lines[2] = "\t".join(fields)
    path.write_text("\n".join(lines) + "\n")
    assert SimAIWorkload.read(path).records[0].fwd_compute_ns == 2**64 - 1


@pytest.mark.parametrize("value", ["1e300", "1e18"])
def test_compute_file_times_beyond_int64_ns_are_refused(tmp_path, value):
    """A time of 1e300 us was accepted and written into the SimAI file as a 301-digit number."""
    text = (EXAMPLES / "aiob_Example.txt").read_text().replace("time_gpu_avg: 799", f"time_gpu_avg: {value}", 1)
    comp = tmp_path / "comp.txt"
    comp.write_text(text)
    out = tmp_path / "out"
    out.mkdir()
    proc = _run("-m", "workload_generator.SimAI_training_workload_generator", "--model_name", "gpt_tiny",
                "--world_size", "8", "--tensor_model_parallel_size", "2", "--global_batch", "8", "--aiob_enable",
                "--comp_filepath", str(comp), "-o", str(out / "w.txt"), cwd=out)
    _refused(proc, f"{comp}:", "Emb.time_gpu_avg", "beyond the longest time a workload holds")
    assert list(out.iterdir()) == []


# ---- bandwidths beyond a C float ------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["-nv", "-nic", "--pp_busbw"])
def test_bandwidths_beyond_a_float_are_refused(tmp_path, flag):
    path = _simai_file(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    proc = _run("-m", "simulator", "-w", str(path), "-g_p_s", "8", "-n_p_s", "8", "-q", flag, "1e300", cwd=out)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-800:]
    assert "beyond a C float" in proc.stderr
    assert list(out.iterdir()) == []


def test_a_bandwidth_that_overflows_a_float_in_the_model_runs_as_c_does(tmp_path):
    """-nic 1e38 x 8 NICs overflowed float32 in the model (OverflowError); C gives inf."""
    from simulator.cfloat import f32

    assert f32(1e39) == float("inf") and f32(-1e39) == float("-inf") and f32(1.5) == 1.5
    path = _simai_file(tmp_path)
    proc = _run("-m", "simulator", "-w", str(path), "-g_p_s", "8", "-n_p_s", "8", "-q", "-nic", "1e38", cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-800:]


@pytest.mark.parametrize("value", ["1e300", "inf"])
def test_busbw_file_bandwidths_beyond_a_float_are_refused(tmp_path, value):
    busbw = tmp_path / "busbw.yaml"
    busbw.write_text((EXAMPLES / "simai_busbw.yaml").read_text().replace("allreduce,: 300", f"allreduce,: {value}", 1))
    path = _simai_file(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    proc = _run("-m", "simulator", "-w", str(path), "-g_p_s", "8", "-busbw", str(busbw), "-q", cwd=out)
    _refused(proc, str(busbw), "finite number of GiB/s")
    assert list(out.iterdir()) == []


# ---- --model topo on absurd GPU counts --------------------------------------------------------------------------

def test_topo_model_refuses_more_gpus_than_the_limit(tmp_path):
    """-g 1e12 on a SimAI file: MemoryError listing a data-parallel group (1e8: 4.4 GB)."""
    path = _simai_file(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(path, out / "keep.txt")
    proc = _run("-m", "simulator", "-w", str(path), "--model", "topo", "--gpu_type", "H100", "-g_p_s", "8",
                "-n_p_s", "8", "-g", "1e12", "-q", cwd=out)
    _refused(proc, "--model topo would place 1,000,000,000,000 GPUs", "(--max_items)")
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


# ---- a folder or a device as an input file ---------------------------------------------------------------------

@pytest.mark.parametrize("given, why", [("folder", "a folder, not a file"), ("/dev/zero", "a device, not a file"),
                                        ("missing.txt", "no such file")])
def test_a_compute_file_that_is_no_file_is_named_so(tmp_path, given, why):
    """--comp_filepath /dev/zero or a folder said "no such file" of a path that exists."""
    (tmp_path / "folder").mkdir()
    out = tmp_path / "out"
    out.mkdir()
    path = given if given.startswith("/") else str(tmp_path / given)
    proc = _run("-m", "workload_generator.SimAI_training_workload_generator", "--model_name", "gpt_tiny",
                "--world_size", "8", "--global_batch", "8", "--comp_filepath", path, "-o", str(out / "w.txt"), cwd=out)
    _refused(proc, f"--comp_filepath {path}: {why}")
    assert list(out.iterdir()) == []


# ---- model dimensions whose byte counts leave 64 bits ----------------------------------------------------------

@pytest.mark.parametrize("flags, what", [(["--hidden_size", "9e18", "--num_attention_heads", "1"], "weights"),
                                         (["--hidden_size", "1e12"], "weights"),
                                         (["--seq_length", "1e18", "--max_position_embeddings", "1e18"],
                                          "activations of a micro-batch")])
def test_model_sizes_beyond_int64_bytes_are_refused(tmp_path, flags, what):
    """--hidden_size 9e18 wrote a workload of 10^40-byte messages and exited 0."""
    proc = _run("-m", "workload_generator.generate_megatron_workload", "--model_name", "gpt_tiny", "--world_size", "8",
                "--global_batch", "8", *flags, "-o", "w.csv", cwd=tmp_path)
    _refused(proc, f"the model's {what} would be about", "beyond the 64-bit byte counts")
    assert list(tmp_path.iterdir()) == []


def test_large_real_models_pass_the_size_check():
    from utils.cli import parse_job

    for argv in (["--model_name", "gpt_175B", "--world_size", "1024", "--tensor_model_parallel_size", "8",
                  "--global_batch", "1024"],
                 ["--frame", "DeepSeek", "-m", "deepseek671", "--world_size", "1024", "--tensor_model_parallel_size", "8",
                  "--expert_model_parallel_size", "8", "--enable_sequence_parallel", "--global_batch", "1024"]):
        parse_job(argv, "p", "d")


# ---- DeepSpeed's step all-gathers -------------------------------------------------------------------------------

@pytest.mark.parametrize("flags", [["--ffn_hidden_size", "1e12"], ["--vocab_size", "1e12"],
                                   ["--allgather_bucket_size", "2"]])
def test_zero2_all_gather_shards_are_bounded(tmp_path, flags):
    """One all-gather per --allgather_bucket_size shard of the partition: --ffn_hidden_size 1e12 made billions
    (MemoryError), --vocab_size 1e12 ran until killed."""
    proc = _run("-m", "workload_generator.generate_deepspeed_stage1_2_workload", "--model_name", "llama_7B",
                "--world_size", "8", "--global_batch", "8", *flags, "-o", "w.csv", cwd=tmp_path, timeout=90)
    _refused(proc, "the ZeRO-2 step's all-gathers would hold about", "raise --allgather_bucket_size", "(--max_items)")
    assert list(tmp_path.iterdir()) == []

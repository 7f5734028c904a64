"""The DeepSpeed entries and scripts/deepspeed_llama.sh as users run them."""

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_cli
from utils.workload import Workload

STAGE3 = "workload_generator.generate_deepspeed_stage3_workload"
STAGE12 = "workload_generator.generate_deepspeed_stage1_2_workload"


def _one_line_error(proc, *needles):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("frame", [["--frame", "DeepSpeed"], []])
def test_stage3_entry_writes_the_csv(tmp_path, frame):
    out = tmp_path / "f.csv"
    proc = run_cli("-m", STAGE3, *frame, "--model_name", "llama_7B", "--world_size", "16", "--global_batch", "16",
                   "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    items = Workload.load(out).items
    # one micro-batch: 291 parameters (1 + 32 x 9 + 2) gathered once in forward
    assert sum(1 for i in items if i.stage == "forward.fetch_sub_module") == 291
    assert {i.comm_group_size for i in items if i.comm_group is not None and i.comm_group.value == "dp_group"} == {16}


def test_stage1_2_entry_defaults_and_aicb_sizes(tmp_path):
    out = tmp_path / "s.csv"
    # -m 7 is LLaMA-7B under --frame DeepSpeed (the entry's default frame); --stage defaults to 2
    proc = run_cli("-m", STAGE12, "-m", "7", "--world_size", "8", "--global_batch", "16", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "ZeRO stage 2" in proc.stdout
    items = Workload.load(out).items
    # 2 micro-batches, each reduces all 6,738,415,616 bf16 gradients
    assert sum(i.msg_size for i in items if i.comm_type.value == "all_reduce" and i.stage.startswith("backward")) \
        == 2 * 2 * 6_738_415_616


def test_default_output_path_is_aicbs(tmp_path):
    proc = run_cli("-m", STAGE12, "--stage", "1", "--model_name", "llama_7B", "--world_size", "4", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    name = "deepspeed_stage1_llama_7B_sp_False_iteration_1_computationEnable_False_4n_workload.csv"
    expected = tmp_path / "results" / "mocked_workload" / name
    assert expected.exists()


@pytest.mark.parametrize("entry, args, needles", [
    (STAGE3, ["--stage", "4"], ["argument --stage: invalid choice: 4"]),
    (STAGE3, ["--reduce_bucket_size", "0"], ["--reduce_bucket_size", "expected a positive integer, got '0'"]),
    (STAGE12, ["--allgather_bucket_size", "0"], ["--allgather_bucket_size", "expected a positive integer, got '0'"]),
    (STAGE12, ["--allgather_bucket_size", "1001"], ["--allgather_bucket_size 1001 must be a multiple of 2"]),
    (STAGE3, ["--world_size", "12"], ["--global_batch 16 is not divisible by --micro_batch 1 x data-parallel size 12"]),
    (STAGE3, ["--tensor_model_parallel_size", "2"], ["--tensor_model_parallel_size must be 1, got 2"]),
    (STAGE3, ["--stage", "2"], ["--stage 2", "use generate_deepspeed_stage1_2_workload"]),
    (STAGE12, ["--stage", "3"], ["--stage 3", "use generate_deepspeed_stage3_workload"]),
    (STAGE3, ["--frame", "Megatron"], ["--frame Megatron", "generates DeepSpeed workloads"]),
    (STAGE3, ["--model_name", "gpt_13B"], ["mocks LLaMA", "--normalization LayerNorm"]),
])
def test_bad_flags_give_one_line(tmp_path, entry, args, needles):
    out = tmp_path / "w.csv"
    base = ["--model_name", "llama_7B", "--world_size", "16", "--global_batch", "16"]
    proc = run_cli("-m", entry, *base, *args, "--output", str(out))
    _one_line_error(proc, *needles)
    assert not out.exists()


def test_script_flags_do_what_they_say(tmp_path):
    out = tmp_path / "d.csv"
    proc = run_cli("-m", "utils.aicb_scripts", "deepspeed_llama", "-m", "13", "--world_size", "16", "--workload_only",
                   "--contiguous-gradients", "--stage", "2", "--max_live_parameters", "12345", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    command = proc.stdout.splitlines()[0]
    # --max_live_parameters reaches the generator as itself (AICB's script set the prefetch bucket),
    # and --contiguous-gradients does not swallow the --stage after it (AICB's script shifts twice)
    assert "--max_live_parameters=12345" in command and "prefetch_bucket_size" not in command
    assert "generate_deepspeed_stage1_2_workload" in command and "--stage=2" in command
    items = Workload.load(out).items
    assert {i.comm_type.value for i in items if i.stage.startswith("backward")} == {"reduce"}
    # AICB's script defaults: micro-batch 4, one micro-batch per replica, 10 iterations
    assert "--global_batch=64" in command and sum(1 for i in items if i.comm_type.value == "epoch_end") == 11


def test_shell_script(tmp_path):
    out = tmp_path / "sh.csv"
    # the script runs "${PYTHON:-python3}" from the repository root
    env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=str(ROOT))
    proc = subprocess.run(["sh", str(ROOT / "scripts" / "deepspeed_llama.sh"), "-m", "7", "--world_size", "8",
                           "--epoch_num", "1", "--workload_only", "--output", str(out)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "generate_deepspeed_stage3_workload --frame=DeepSpeed --model_size=7 --stage=3" in proc.stdout
    assert out.exists()

"""The Megatron entries as users run them: files written, flags honoured, one-line errors."""

import pytest

from tests.conftest import ROOT, run_cli
from utils.workload import Workload


def _one_line_error(proc, *needles):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_generate_writes_the_csv(tmp_path):
    out = tmp_path / "w.csv"
    proc = run_cli("-m", "workload_generator.generate_megatron_workload", "--model_name", "gpt_tiny", "--world_size", "4",
                   "--tensor_model_parallel_size", "2", "--global_batch", "4", "--seq_length", "128",
                   "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    workload = Workload.load(out)
    # gpt_tiny has 4 layers: per micro-batch 1 embedding + 2 x 4 row-parallel all-reduces forward
    forward = [i for i in workload if i.stage == "forward.MegatronRowLinear"]
    assert len(forward) == 2 * 4 * 2   # ga = 4 / (1 x dp 2) = 2 micro-batches
    assert f"{out}" in proc.stdout


def test_aicb_workload_only(tmp_path):
    out = tmp_path / "a.csv"
    proc = run_cli("aicb.py", "--frame", "Megatron", "--model_name", "gpt_tiny", "--world_size", "2",
                   "--tensor_model_parallel_size", "2", "--workload_only", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.exists()


def test_default_output_path_is_aicbs(tmp_path):
    proc = run_cli(str(ROOT / "aicb.py"), "--model_name", "gpt_tiny", "--workload_only", "--world_size", "2",
                   "--tensor_model_parallel_size", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    expected = tmp_path / "results/mocked_workload/megatron_gpt_tiny_sp_False_iteration_1_computationEnable_False_2n_workload.csv"
    assert expected.exists()


def test_size_flag_selects_the_preset(tmp_path):
    out = tmp_path / "w.csv"
    proc = run_cli("-m", "workload_generator.generate_megatron_workload", "-m", "13", "--world_size", "8",
                   "--tensor_model_parallel_size", "8", "--global_batch", "1", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = [i for i in Workload.load(out) if i.stage == "forward.MegatronRowLinear"]
    # AICB's -m 13: GPT 13B, 40 layers of hidden 5120: 2 x 40 all-reduces of 2048 x 5120 x 2 bytes
    assert len(rows) == 80 and {i.msg_size for i in rows} == {2048 * 5120 * 2}


def test_preset_never_overrides_given_flags(tmp_path):
    out = tmp_path / "w.csv"
    proc = run_cli("-m", "workload_generator.generate_megatron_workload", "-m", "175", "--num_layers", "8",
                   "--hidden_size", "1024", "--num_attention_heads", "16", "--world_size", "8",
                   "--tensor_model_parallel_size", "8", "--global_batch", "1", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = [i for i in Workload.load(out) if i.stage == "forward.MegatronRowLinear"]
    # 8 layers (not GPT-3's 96), activation 2048 seq x 1024 hidden (not 12288) x 2 bytes
    assert len(rows) == 16 and {i.msg_size for i in rows} == {2048 * 1024 * 2}


@pytest.mark.parametrize("args, needles", [
    (["--bogus"], ["unrecognized arguments: --bogus"]),
    (["--world_size", "x"], ["--world_size", "invalid integer: 'x'"]),
    (["--model_name", "gpt_99B"], ["--model_name 'gpt_99B' is no preset", "--hidden_size", "gpt_tiny"]),
    (["--model_name", "gpt_13B", "--world_size", "12", "--tensor_model_parallel_size", "8"],
     ["--world_size 12 is not divisible by --tensor_model_parallel_size 8"]),
    (["--model_name", "gpt_13B", "--world_size", "16", "--tensor_model_parallel_size", "16", "--global_batch", "1"],
     ["--num_attention_heads 40 is not divisible by --tensor_model_parallel_size 16"]),
    (["--frame", "Megatronn"], ["--frame", "invalid choice: 'Megatronn'"]),
])
def test_bad_input_is_one_line(tmp_path, args, needles):
    out = tmp_path / "w.csv"
    proc = run_cli("-m", "workload_generator.generate_megatron_workload", *args, "--output", str(out))
    _one_line_error(proc, *needles)
    assert not out.exists()


def test_aicb_script_keeps_user_values(tmp_path):
    out = tmp_path / "s.csv"
    proc = run_cli("-m", "utils.aicb_scripts", "megatron_gpt", "-m", "175", "--tensor_model_parallel_size", "4",
                   "--world_size", "64", "--workload_only", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    sizes = {i.comm_group_size for i in Workload.load(out) if i.comm_group is not None and i.comm_group.value == "tp_group"}
    assert sizes == {4}     # AICB's script would have forced tp 8 for -m 175
    assert "--use-distributed-optimizer" in proc.stdout      # as AICB's script always passes it


def test_aicb_collective_sweep_workload(tmp_path):
    out = tmp_path / "c.csv"
    proc = run_cli("aicb.py", "--frame", "collective_test", "--test_comm", "all_gather", "--begin_size", "1K",
                   "--end_size", "4K", "--iter_num", "2", "--world_size", "4", "--workload_only", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = [i for i in Workload.load(out) if i.comm_type.value == "all_gather"]
    # sizes 1 KiB, 2 KiB, 4 KiB (step factor 2), each twice, over the data-parallel group of 4
    assert [i.msg_size for i in rows] == [1024, 1024, 2048, 2048, 4096, 4096]
    assert {i.comm_group_size for i in rows} == {4}

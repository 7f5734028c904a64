"""Inference workloads (AICB 2.1): the items of a prefill or decode step, the SimAI inference file and
Vidur's CSV, AICB's entries as users run them, one-line errors.  Sizes derived by hand in comments."""

from __future__ import annotations

import json
import subprocess

import pytest

from mocked_model.inference import stage_items
from tests.conftest import EXAMPLES, ROOT, run_cli
from utils.errors import ConfigError, FormatError
from utils.inference_config import CONFIG_FILES, DEFAULT_CONFIGS, default_config_path, load_config, resolve_model
from utils.inference_job import InferenceJob
from utils.workload import CommGroup, CommType
from workload_generator.inference import InferenceWorkload
from workload_generator.simai_inference import simai_inference_workload, simai_records, vidur_rows

REFERENCE = EXAMPLES / "aicb_infer_DeepSeek-671B-world_size8-tp1-pp1-ep8-bs32-seq1024-decode.txt"


def deepseek_decode(**kw) -> InferenceJob:
    args = dict(phase="decode", seq_length=1024, micro_batch=32, world_size=8, tp=1, pp=1, ep=8,
                model_name="DeepSeek-671B")
    args.update(kw)
    return InferenceJob(resolve_model("DeepSeek-671B"), **args)


def comms(items, ctype):
    return [i for i in items if i.comm_type is ctype]


def test_shipped_configs_are_aicbs():
    for kind, name in CONFIG_FILES.items():
        shipped = json.loads((ROOT / "scripts" / "inference_configs" / name).read_text())
        assert shipped == DEFAULT_CONFIGS[kind]
        assert default_config_path(kind) == str(ROOT / "scripts" / "inference_configs" / name)


def test_deepseek_decode_dispatch_and_combine_bytes():
    items = stage_items(deepseek_decode())
    a2a = comms(items, CommType.all_to_all)
    # 58 MoE layers (61 - 3 dense), a dispatch and a combine each, over the EP group of 8
    assert len(a2a) == 2 * 58 and {(i.comm_group, i.comm_group_size) for i in a2a} == {(CommGroup.ep_group, 8)}
    # combine: 32 tokens x 7168 hidden x top-8 copies x 2 bytes (bf16) / tp 1 = 3,670,016
    # dispatch in FP8: 1 byte per value + a 4-byte scale per 128 values = 7168 + 56 x 4 = 7392 bytes per token
    # copy, 32 x 8 x 7392 = 1,892,352 (= 3,670,016 x (1 + 4/128) / 2)
    assert [i.msg_size for i in a2a[:2]] == [1_892_352, 3_670_016]
    assert not comms(items, CommType.all_reduce)     # tp 1: no TP all-reduce


def test_deepseek_decode_file_matches_aicb_record_for_record():
    job = deepseek_decode()
    workload = InferenceWorkload(job)()
    simai, layers, dropped = simai_inference_workload(job, workload.iterations()[1], timed=False)
    assert simai.dumps() == REFERENCE.read_text()    # placeholder times: AICB's file byte for byte
    assert not dropped and layers[:3] == [0, 0, 1]


def test_estimated_file_differs_only_in_compute():
    job = deepseek_decode(gpu_type="H200")
    from workload_generator.inference import timed_step

    workload, report = timed_step(job, "model")
    assert report.filled > 0 and not report.missing
    ours, _, _ = simai_inference_workload(job, workload.iterations()[1], timed=True)
    from workload_generator.simai import SimAIWorkload

    ref = SimAIWorkload.read(REFERENCE)
    assert ours.header == ref.header and len(ours.records) == len(ref.records) == 238
    for a, b in zip(ours.records, ref.records):
        assert (a.name, a.fwd_comm, a.fwd_size_bytes, a.ig_comm, a.wg_comm) == \
               (b.name, b.fwd_comm, b.fwd_size_bytes, b.ig_comm, b.wg_comm)
        assert a.fwd_compute_ns > 1


def test_qwen3_235b_prefill_tp4_allreduce_bytes():
    job = InferenceJob(resolve_model("Qwen3-Moe-235B"), "prefill", seq_length=1024, micro_batch=4, world_size=8, tp=4,
                       ep=8)
    items = stage_items(job)
    ar = comms(items, CommType.all_reduce)
    # prefill: 1024 x 4 = 4096 tokens; after each attention 2 bytes x 4096 x 4096 hidden = 33,554,432 bytes over TP 4
    # (AICB 2.1 counts 1024 tokens: 8,388,608); 94 layers, plus the vocab-parallel embedding's all-reduce
    assert {i.msg_size for i in ar} == {33_554_432} and len(ar) == 94 + 1
    assert {(i.comm_group, i.comm_group_size) for i in ar} == {(CommGroup.tp_group, 4)}
    a2a = comms(items, CommType.all_to_all)
    # combine: 2 x 4096 x 4096 x 8 / 4 = 67,108,864 over the EP group of 8 that spans the TP ranks
    assert a2a[1].msg_size == 67_108_864 and a2a[1].comm_group is CommGroup.ep_tp_group
    assert a2a[0].msg_size == 34_603_008   # 67,108,864 x 0.515625


def test_qwen3_next_full_attention_layers():
    model = resolve_model("Qwen3-Next-80B")
    # AICB's rule: layer i (0-based) is full attention when (i + 1) % full_attention_interval(4) == 0
    assert model.full_attention_layers() == [3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43, 47]
    job = InferenceJob(model, "decode", 1024, 8, world_size=8, ep=8, model_name="Qwen3-Next-80B")
    records, layers, _ = simai_records(stage_items(job), timed=False)
    names = [r.name for r in records]
    assert len(records) == 48 * 5
    assert names[:5] == ["attention_norm", "attention_gdn", "moe_norm", "moe_route", "moe_expert"]
    assert names[15:20] == ["attention_norm", "attention_layer", "moe_norm", "moe_route", "moe_expert"]
    assert [layers[i] for i in range(len(names)) if names[i] == "attention_layer"] == model.full_attention_layers()


def test_vidur_rows():
    job = deepseek_decode()
    records, layers, _ = simai_records(stage_items(job), timed=False)
    rows = vidur_rows(job, records, layers)
    assert rows[:2] == [(0, "attention", 1, 0), (0, "mlp", 1, 0)]
    # MoE layer 3: attention, then moe = shared_experts + moe_route + moe_expert (1 ns each), comm = dispatch + combine
    assert rows[6:8] == [(3, "attention", 1, 0), (3, "moe", 3, 1_892_352 + 3_670_016)]
    assert len(rows) == 61 * 2


def test_uneven_routing_sends_more():
    base = stage_items(deepseek_decode())
    skewed = stage_items(deepseek_decode(routing_skew=1.0))
    rand = stage_items(deepseek_decode(routing="UniformRandom", seed=3))
    a = comms(base, CommType.all_to_all)[1].msg_size
    assert comms(skewed, CommType.all_to_all)[1].msg_size > a
    assert comms(rand, CommType.all_to_all)[1].msg_size >= a
    assert comms(stage_items(deepseek_decode(routing="UniformRandom", seed=3)), CommType.all_to_all)[1].msg_size == \
        comms(rand, CommType.all_to_all)[1].msg_size


def test_pipeline_stages_send_one_activation():
    job = deepseek_decode(pp=2, ep=4)
    first, last = stage_items(job, 0), stage_items(job, 1)
    # 61 layers over 2 stages: 31 + 30; decode activation 2 x 32 tokens x 7168 = 458,752 bytes
    assert job.stage_layers() == [(0, 31), (31, 30)]
    assert first[-1].comm_type is CommType.isend and first[-1].msg_size == 458_752 and first[-1].dst == 1
    assert last[0].comm_type is CommType.irecv and last[0].src == 0
    sim, _, _ = simai_inference_workload(job, first, timed=False)
    assert sim.header.pp_comm == 458_752 and sim.header.pp == 2


@pytest.mark.parametrize("kw, needle", [
    (dict(ep=64, world_size=64), "does not divide the 288 experts (256 routed + 32 redundant)"),
    (dict(tp=3, world_size=3, ep=1), "does not divide the 128 attention heads"),
    (dict(phase="train"), "--phase 'train'"),
    (dict(world_size=8, ep=16), "does not divide the 8 ranks of a pipeline stage"),
])
def test_bad_layouts(kw, needle):
    with pytest.raises(ConfigError, match=None) as exc:
        deepseek_decode(**kw)
    assert needle in str(exc.value)


def test_config_missing_a_key(tmp_path):
    data = dict(DEFAULT_CONFIGS["deepseek"])
    del data["d_kv_c"]
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(data))
    with pytest.raises(FormatError, match="missing key 'd_kv_c'"):
        load_config(path, "deepseek")


# ---- the entries, as users run them --------------------------------------------------------------------

def _one_line_error(proc, *needles):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def _script(*args, cwd):
    import os
    import sys

    env = dict(os.environ, PYTHON=sys.executable, PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(["sh", str(ROOT / "scripts" / "inference_workload_with_aiob.sh"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_aicb_script_default_matches_the_reference(tmp_path):
    proc = _script("-m", "deepseek-671B", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "results/workload/DeepSeek-671B-world_size8-tp1-pp1-ep8-bs32-seq1024-decode.txt"
    assert out.read_text() == REFERENCE.read_text()


def test_aicb_readme_prefill_invocation(tmp_path):
    proc = _script("-m", "qwen3-235B", "-c", str(ROOT / "scripts/inference_configs/qwen3_moe_default.json"), "-s", "1024",
                   "-b", "4", "-w", "32", "-e", "32", "-p", "prefill", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "results/workload/Qwen3-Moe-235B-world_size32-tp1-pp1-ep32-bs4-seq1024-prefill.txt").exists()


def test_vidur_entry_writes_aicbs_name(tmp_path):
    proc = run_cli("-m", "workload_generator.Vidur_workload_generator", "Qwen3-Next-80B", "--world_size", "4",
                   "--expert_model_parallel_size", "4", "--micro_batch", "8", "--seq_length", "512",
                   "--result_dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "vidur-Qwen3-Next-80B-world_size4-tp1-pp1-ep4-bs8-seq512-decode.csv"
    lines = path.read_text().splitlines()
    assert lines[0] == "layer_id\tlayer_name\tcomp_time\tcomm_size" and len(lines) == 1 + 48 * 2
    assert lines[1].split("\t")[:2] == ["0", "attention"]


@pytest.mark.parametrize("args, needles", [
    (["Llama-70B"], ["unknown model 'Llama-70B'"]),
    (["DeepSeek-671B", "--world_size", "64", "--expert_model_parallel_size", "64"], ["does not divide the 288 experts"]),
    (["Qwen3-Moe-235B", "--world_size", "3", "--tensor_model_parallel_size", "3"], ["does not divide the 64 attention heads"]),
    (["DeepSeek-671B", "--phase", "train"], ["--phase", "invalid choice: 'train'"]),
    (["DeepSeek-671B", "--world_size", "8", "--expert_model_parallel_size", "8", "--micro_batch", "32",
      "--seq_length", "1024", "--gpu_type", "H100"], ["needs 105.6 GiB per GPU", "H100"]),
    (["DeepSeek-671B", "--world_size", "16", "--expert_model_parallel_size", "16", "--gpu_type", "A100"],
     ["no FP8 tensor cores", "--dtype bfloat16"]),
])
def test_bad_input_one_line_no_file(tmp_path, args, needles):
    proc = run_cli("-m", "workload_generator.SimAI_inference_workload_generator", *args, "--result_dir",
                   str(tmp_path / "out"))
    _one_line_error(proc, *needles)
    assert not (tmp_path / "out").exists()


def test_missing_config_key_entry(tmp_path):
    data = dict(DEFAULT_CONFIGS["qwen3_next"])
    del data["full_attention_interval"]
    config = tmp_path / "next.json"
    config.write_text(json.dumps(data))
    proc = run_cli("-m", "workload_generator.SimAI_inference_workload_generator", "Qwen3-Next-80B", str(config),
                   "--result_dir", str(tmp_path / "out"))
    _one_line_error(proc, str(config), "missing key 'full_attention_interval'")
    assert not (tmp_path / "out").exists()


def test_script_takes_aicbs_flag_spellings():
    from workload_generator.inference_script import command

    # the example of AICB's --help (dashed names, which AICB's own script does not match) and its -a form
    args = command(["-m", "deepseek-671B", "-p", "decode", "-s", "1024", "-b", "32", "--aiob-enable"])
    assert args[:2] == ["DeepSeek-671B", str(ROOT / "scripts/inference_configs/deepseek_default.json")]
    assert "--aiob_enable" in args and args[args.index("--aiob_forward_loops") + 1] == "10"
    assert "--aiob_enable" in command(["-m", "deepseek-671B", "-a"])
    # flags the script does not know go on to the generator
    assert command(["-m", "qwen3-next-80B", "--gpu_type", "H200"])[-2:] == ["--gpu_type", "H200"]
    with pytest.raises(ConfigError, match="invalid model size 'llama'"):
        command(["-m", "llama"])

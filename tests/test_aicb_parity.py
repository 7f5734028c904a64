"""AICB's documented commands and spellings work unchanged and give the right numbers (issue 15).

Every number below is derived by hand in the comment beside it.
"""

from __future__ import annotations

import pytest

from tests.conftest import EXAMPLES, ROOT, run_cli
from utils.aicb_scripts import COLL_COMM_CHECK, MEGATRON_GPT, MEGATRON_WORKLOAD_WITH_AIOB, command_for
from utils.cli import model_from, parse_job, resolve
from utils.errors import ConfigError
from workload_generator.entry import build_workload

EXAMPLE_AIOB = "workload/aiob_inputs/Example.txt"  # AICB's path of its example compute file, shipped with us


def job_of(*argv: str):
    return parse_job(list(argv), "test", "test")


# ---- 1. a preset with --swiglu derives Megatron's FFN -------------------------------------------------------

def test_gpt13b_tp2_sp_swiglu_dp_bytes_per_rank():
    job, _ = job_of("--model_name", "gpt_13B", "--world_size", "8", "--tensor_model_parallel_size", "2",
                    "--enable_sequence_parallel", "--swiglu", "--global_batch", "4")
    # Megatron's SwiGLU FFN: int(4h x 2/3 / 64) x 64 = int(13653.33 / 64) x 64 = 213 x 64 = 13632 (not 4h = 20480)
    assert job.model.ffn_hidden_size == 13632
    dp = [i for i in build_workload(job).items if i.stage == "step.finish_grad_sync"]
    # One TP rank's parameters, h = 5120, tp = 2, with biases (GPT), 40 layers:
    #   per layer: 2 LayerNorms 2 x 2h = 20480; QKV 3h.h/2 + 3h/2 = 39321600 + 7680; proj h.h/2 + h = 13107200 + 5120;
    #   fc1 (SwiGLU: 2 x FFN) 2.13632.h/2 + 2.13632/2 = 69795840 + 13632; fc2 h.13632/2 + h = 34897920 + 5120
    #   = 157174592
    #   embedding: vocab 50257 padded to a multiple of 128 x 2 = 50432, /2 x h = 129105920; positions 4096 x h =
    #   20971520 (gpt_13B's 4096, as AICB's scripts pass); final LayerNorm 2h = 10240
    #   P = 40 x 157174592 + 129105920 + 20971520 + 10240 = 6437071360
    # fp32 gradients all-reduced over DP: 4 x P = 25748285440 bytes per rank (20480 would give 33,800,... too many)
    assert [(i.comm_type.value, i.msg_size) for i in dp] == [("all_reduce", 25_748_285_440)]


def test_gpt7b_tp4_swiglu_ffn():
    values = resolve({"model_size": "7", "swiglu": True, "tensor_model_parallel_size": 4})
    # h = 4096: int(4 x 4096 x 2/3 / 64) x 64 = int(10922.67 / 64) x 64 = 170 x 64 = 10880
    assert model_from(values).ffn_hidden_size == 10880
    job, _ = job_of("-m", "7", "--world_size", "8", "--tensor_model_parallel_size", "4", "--swiglu", "--global_batch",
                    "2", "--computation_enable")
    # fc1's GEMM on one of 4 TP ranks: (seq 2048 x micro 1 x h 4096) @ (4096 x 2 x 10880 / 4 = 5440); fc2 takes
    # the SwiGLU's half, 10880 / 4 = 2720 rows
    shapes = {i.stage.rsplit(".", 1)[-1]: i.shapes for i in build_workload(job).items
              if i.is_computation and i.stage.startswith("forward") and ".layers.0.mlp." in i.stage}
    assert shapes["linear_fc1"] == ((2048, 1, 4096), (4096, 5440))
    assert shapes["linear_fc2"] == ((2048, 1, 2720), (2720, 4096))


def test_gpt3_175b_swiglu_ffn():
    # h = 12288: int(4 x 12288 x 2/3 / 64) x 64 = int(32768 / 64) x 64 = 32768; without SwiGLU 4h = 49152
    assert model_from(resolve({"model_size": "175", "swiglu": True})).ffn_hidden_size == 32768
    assert model_from(resolve({"model_size": "175"})).ffn_hidden_size == 49152
    assert model_from(resolve({"model_size": "175", "swiglu": True, "ffn_hidden_size": 40960})).ffn_hidden_size == 40960
    # a preset that states its FFN keeps it under --no-swiglu (LLaMA-7B's 11008)
    assert model_from(resolve({"model_name": "llama_7B", "swiglu": False})).ffn_hidden_size == 11008
    # an MoE preset's expert FFN follows a new dense FFN, as Megatron's moe_ffn_hidden_size defaults to it
    mixtral = model_from(resolve({"model_name": "mixtral_8x7B", "ffn_hidden_size": 8192}))
    assert mixtral.moe_ffn_hidden_size == 8192


def test_learned_positions_must_cover_the_sequence():
    # GPT-3 175B keeps its published 2048 positions; Megatron refuses seq 4096 with them
    with pytest.raises(ConfigError, match=r"--seq_length 4096 exceeds --max_position_embeddings 2048.*give "
                                          r"--max_position_embeddings 4096"):
        job_of("--model_name", "gpt3_175B", "--world_size", "8", "--tensor_model_parallel_size", "8",
               "--seq_length", "4096")
    job, _ = job_of("--model_name", "gpt3_175B", "--world_size", "8", "--tensor_model_parallel_size", "8",
                    "--seq_length", "4096", "--max_position_embeddings", "4096")
    assert job.model.max_position_embeddings == 4096


# ---- 2. the compute file is read, never timed over --------------------------------------------------------

def test_compute_file_times_come_from_the_file(tmp_path):
    out = tmp_path / "w.txt"
    done = run_cli("-m", "workload_generator.SimAI_training_workload_generator", "-m", "7", "--world_size", "8",
                   "--tensor_model_parallel_size", "2", "--global_batch", "4", "--seq_length", "4096", "--swiglu",
                   "--use_flash_attn", "--aiob_enable", "--comp_filepath", str(ROOT / EXAMPLE_AIOB), "--output",
                   str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "compute times: file" in done.stdout and not (tmp_path / "results" / "aiob_outputs").exists()
    records = [line.split("\t") for line in out.read_text().splitlines()[2:]]
    embedding = next(r for r in records if r[0] == "embedding_layer")
    qkv = next(r for r in records if r[0] == "attention_layer")
    # Example.txt (us, time_gpu_avg): Emb 799 -> 799000 ns forward
    assert embedding[2] == "799000"
    # the QKV record: layernorm 70 + atten_qkv 889 = 959 us forward; its weight gradient is AICB's
    # "backward = forward" of the GEMM: 889 us
    assert (qkv[2], qkv[8]) == ("959000", "889000")


def test_missing_compute_file_is_one_line(tmp_path):
    done = run_cli("-m", "workload_generator.SimAI_training_workload_generator", "-m", "7", "--world_size", "8",
                   "--tensor_model_parallel_size", "2", "--global_batch", "4", "--aiob_enable", "--comp_filepath",
                   "nowhere.txt", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr == ("SimAI_training_workload_generator: error: --comp_filepath "
                                                    "nowhere.txt: no such file\n")
    assert not (tmp_path / "results").exists()


# ---- 3. AICB's scripts -----------------------------------------------------------------------------------------

def test_deepseek16_megatron_workload_with_aiob_header(tmp_path):
    # AICB's README command for DeepSeek (its --aiob_enable priced by the compute model here: no GPU, --gpu_type)
    readme = ["-m", "deepseek16", "--world_size", "2048", "--tensor_model_parallel_size", "1", "--pipeline_model_parallel",
              "1", "--sp", "--ep", "16", "--moe_router_topk", "6", "--moe_enable", "--frame", "DeepSeek", "--global_batch",
              "4096", "--micro_batch", "1", "--seq_length", "4096", "--swiglu", "--aiob_enable", "--gpu_type", "H100"]
    assert readme[4:6] == ["--tensor_model_parallel_size", "1"]
    for argv in (readme, readme[:4] + readme[6:]):  # as written, and without the tp flag
        done = run_cli("-m", "utils.aicb_scripts", "megatron_workload_with_aiob", *argv, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        path = done.stdout.split("workload save in : ")[1].split(" (")[0]
        header = (tmp_path / path).read_text().splitlines()[0]
        # tp 1 (AICB's script's for DeepSeek, also without the flag: not the script's default 8);
        # ep 16; vpp = DeepSeek-V2-Lite's 27 layers on one stage; ga = 4096 / (micro 1 x dp 2048) = 2
        assert header == ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ep: 16 pp: 1 vpp: 27 ga: 2 "
                          "all_gpus: 2048 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 0")
        assert "priced by the compute model instead of timing this CPU" in done.stdout


def test_script_commands_flag_by_flag():
    gpt = command_for(MEGATRON_GPT, ["-m", "13", "--world_size", "16", "--workload_only"], gpus_on_node=8)
    # AICB's megatron_gpt.sh: tp 8, global batch 2 x dp x micro = 2 x 2 x 1 = 4, 4096 positions, distributed optimizer
    assert gpt[1:3] == ["-m", "workload_generator.generate_megatron_workload"]
    assert {"--tensor_model_parallel_size=8", "--global_batch=4", "--max_position_embeddings=4096",
            "--use-distributed-optimizer", "--model_size=13"} <= set(gpt)
    aiob = command_for(MEGATRON_WORKLOAD_WITH_AIOB, ["-m", "moe", "--sp"], gpus_on_node=8)
    # megatron_workload_with_aiob.sh -m moe: tp 4, grouped GEMM, 32 GPUs, global batch 1024, distributed optimizer
    assert {"--tensor_model_parallel_size=4", "--moe_grouped_gemm", "--world_size=32", "--global_batch=1024",
            "--use-distributed-optimizer", "--enable_sequence_parallel"} <= set(aiob)
    notes: list[str] = []
    command_for(MEGATRON_WORKLOAD_WITH_AIOB, ["-m", "deepseek16", "--tensor_model_parallel_size", "2"], 8, notes)
    assert notes == ["AICB's megatron_workload_with_aiob.sh forces --tensor_model_parallel_size 1 for -m deepseek16; "
                     "keeping your 2"]
    check = command_for(COLL_COMM_CHECK, ["--nnodes", "2", "--test_comm", "all_gather", "--multi_all_reduce_enable", "1"],
                        gpus_on_node=8)
    # coll_comm_check.sh: torchrun on every GPU, world 2 nodes x 8 = 16, one pipeline stage per node
    assert check[1:5] == ["--nnodes", "2", "--nproc_per_node", "8"] and "aicb.py" in check
    assert {"--frame=collective_test", "--world_size=16", "--begin_size=4096", "--end_size=8589934592",
            "--iter_num=500", "--model_name=all_reduce", "--test_comm=all_gather", "--pipeline_model_parallel=2"} <= set(check)
    # without GPUs to count, a replay starts one process per rank of the job
    cpu = command_for(MEGATRON_GPT, ["-m", "7", "--world_size", "4", "--tensor_model_parallel_size", "2"], gpus_on_node=None)
    assert cpu[cpu.index("--nproc_per_node") + 1] in ("4", "8")  # 8 only where nvidia-smi lists 8 GPUs


# ---- 4. no training batch for a sweep; a default batch that does not divide names the flag ------------------

def test_collective_test_needs_no_batch(tmp_path):
    done = run_cli(str(ROOT / "aicb.py"), "--frame", "collective_test", "--world_size", "8", "--begin_size", "1K",
                   "--end_size", "4K", "--iter_num", "2", "--workload_only", "--model_name", "all_reduce", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    done = run_cli("-m", "workload_generator.SimAI_training_workload_generator", "-m", "13", "--world_size", "64",
                   "--gpu_type", "H100", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == ("SimAI_training_workload_generator: error: the default --global_batch 4 is not divisible by "
                           "--micro_batch 1 x data-parallel size 64 = 64; set --global_batch to a multiple of 64\n")


# ---- 5. --model_name is a label when it is no preset ----------------------------------------------------------

def test_model_name_is_a_label(tmp_path):
    done = run_cli(str(ROOT / "aicb.py"), "--model_name", "my_llm", "--hidden_size", "256", "--num_layers", "2",
                   "--num_attention_heads", "4", "--world_size", "2", "--global_batch", "2", "--workload_only",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert list((tmp_path / "results" / "mocked_workload").iterdir())[0].name.startswith("megatron_my_llm_sp_False")
    done = run_cli(str(ROOT / "aicb.py"), "--model_name", "my_llm", "--workload_only", cwd=tmp_path)
    assert done.returncode == 2 and "--model_name 'my_llm' is no preset and no dimensions were given" in done.stderr
    # -m names the files as AICB's scripts do (gpt_175B, not our preset's gpt3_175B)
    assert resolve({"model_size": "175"})["model_name"] == "gpt_175B"
    assert resolve({"model_size": "moe"})["model_name"] == "Mixtral_8*7B"


# ---- 6. AICB's spellings ------------------------------------------------------------------------------------------

def test_aicb_spellings():
    job, values = job_of("--comm_frame", "DeepSeek", "-m", "deepseek", "--n_dense_layer", "2", "--q_lora_rank=0",
                         "--seq_len", "1024", "--num_layers", "4", "--num_experts", "8", "--world_size", "8",
                         "--expert_model_parallel_size", "8", "--global_batch", "8", "--aiob_enable=0")
    m = job.model
    assert job.training.frame == "DeepSeek" and job.training.seq_length == 1024 and not job.training.aiob_enable
    assert (m.n_dense_layers, m.q_lora_rank, m.num_layers, m.num_experts) == (2, None, 4, 8)
    # -m deepseek is DeepSeek-V3's architecture; its top-8 routing fits the 8 experts given
    assert (m.hidden_size, m.moe_router_topk) == (7168, 8)
    # with fewer experts than the preset routes to, AICB's default top-1 applies (its README's --num_experts 4)
    job, _ = job_of("--frame", "DeepSeek", "-m", "deepseek", "--num_experts", "4", "--num_layers", "4",
                    "--world_size", "4", "--tensor_model_parallel_size", "4", "--enable_sequence_parallel", "--global_batch", "4")
    assert job.model.moe_router_topk == 1


# ---- 9. --enable_visual does what it says, or is refused ----------------------------------------------------------

def test_enable_visual(tmp_path):
    done = run_cli(str(ROOT / "aicb.py"), "--model_name", "gpt_tiny", "--world_size", "2", "--global_batch", "2",
                   "--workload_only", "--enable_visual", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    pages = list((tmp_path / "results" / "visual_output").glob("*.html"))
    assert len(pages) == 1 and "<html" in pages[0].read_text()
    refused = run_cli("-m", "workload_generator.generate_megatron_workload", "--model_name", "gpt_tiny",
                      "--world_size", "2", "--global_batch", "2", "--enable_visual", cwd=tmp_path)
    assert refused.returncode == 2 and "python -m visualize.generate FILE only_workload" in refused.stderr
    workload = next((tmp_path / "results" / "mocked_workload").iterdir())
    done = run_cli("-m", "visualize.generate", str(workload), "only_workload", "-o", str(tmp_path / "v.html"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr and (tmp_path / "v.html").exists()


def test_workload_only_with_a_compute_file_fills_the_times(tmp_path):
    out = tmp_path / "w.csv"
    done = run_cli("-m", "workload_generator.generate_megatron_workload", "-m", "7", "--world_size", "2",
                   "--tensor_model_parallel_size", "2", "--global_batch", "1", "--aiob_enable", "--comp_filepath",
                   str(EXAMPLES / "aiob_Example.txt"), "--output", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = [line for line in out.read_text().splitlines() if line.startswith("CommType.computation")]
    # every computation row has its _elapsed_time (ns) from the file: none is empty
    assert rows and all(row.split(",")[-4] not in ("None", "") for row in rows)


# ---- 6. AICB's log_analyzer API -------------------------------------------------------------------------------------

def test_old_log_analyzer_api(tmp_path):
    from log_analyzer.log import Log, LogItem, Workload

    path = tmp_path / "x_log.csv"
    path.write_text("comm_type,comm_group,comm_group_size,msg_size,stage,dst,src,additional,_elapsed_time,algbw,busbw,"
                    "count\nCommType.all_reduce,CommGroup.dp_group,8,8192,step,None,None,None,0.25,0.03,0.05,1\n"
                    "CommType.epoch_end,None,None,0,,None,None,None,5.0,None,None,1\n"
                    "CommType.all_gather,CommGroup.tp_group,2,4096,forward,None,None,None,0.5,0.01,0.01,1\n"
                    "CommType.epoch_end,None,None,0,,None,None,None,6.0,None,None,1\n")
    log = Log.load(path)
    assert [item.comm_type for item in log.comm_logs] == ["all_reduce", "all_gather"]
    assert isinstance(log.comm_logs[0], LogItem) and log.comm_logs[0]._elapsed_time == 0.25
    assert [len(block) for block in log.comm_log_each_epoch] == [1, 1] and list(log.epoch_times) == [5.0, 6.0]
    workload, args = Workload.load(path)
    assert len(workload.items) == 4 and args is None


def test_run_in_cluster_dry_run(tmp_path):
    iplist = tmp_path / "iplist"
    iplist.write_text("127.0.0.1\n10.255.255.254\n")
    done = run_cli(str(ROOT / "scripts" / "run_in_cluster.py"), "--iplist", str(iplist), "--image", "img:1", "--dry_run",
                   cwd=tmp_path)
    if done.returncode == 2:  # this machine's addresses did not include 127.0.0.1
        assert "is in the IP list" in done.stderr
        return
    assert done.returncode == 0, done.stderr
    assert "-e WORLD_SIZE=2 -e RANK=0 -e MASTER_ADDR=127.0.0.1 -e MASTER_PORT=12345" in done.stdout
    assert "sh scripts/coll_comm_check.sh" in done.stdout
    missing = run_cli(str(ROOT / "scripts" / "run_in_cluster.py"), "--iplist", "none", "--image", "x", cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.startswith("run_in_cluster.py: error: --iplist none")

"""``python -m simulator`` on a whole job (the generators' flags instead of a SimAI file), the uneven and
interleaved pipeline it plays, and ``python -m simulator validate``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mocked_model.flops import model_flops
from simulator.api import simulate
from simulator.options import TopoOptions
from tests.conftest import EXAMPLES, ROOT, run_cli
from utils.cli import parse_job
from utils.config import JobConfig, TrainingConfig
from utils.model_config import ModelConfig
from utils.parallel import ParallelConfig

TOPO16 = str(EXAMPLES / "topo_Spectrum-X_16g_8gps_400Gbps_H100")
JOB = ("--model_name", "gpt_tiny", "--world_size", "16", "--tensor_model_parallel_size", "2",
       "--pipeline_model_parallel", "2", "--global_batch", "16", "--seq_length", "128", "--enable_sequence_parallel")


def last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def test_whole_job_json_and_files(tmp_path):
    done = run_cli("-m", "simulator", "-t", TOPO16, "--gpu_type", "H100", *JOB, "--json", "-r", "run-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    row = last_json(done.stdout)
    for key in ("iteration_s", "compute_s", "exposed_comm_s", "bubble_s", "tflops_per_gpu", "mfu"):
        assert isinstance(row[key], float), key
    # the busiest stage's terms add up to the iteration (host_s: the GPU waiting for the host's launches of this
    # tiny model's short kernels, simulator/topo/host_model.py)
    assert row["host_s"] > 0
    assert row["compute_s"] + row["exposed_comm_s"] + row["host_s"] + row["bubble_s"] == pytest.approx(row["iteration_s"])
    # Megatron's FLOP count: gpt_tiny (4 layers, hidden 256, vocab 1024, already a multiple of 128 x tp 2),
    # seq 128, global batch 16: 72 * 16 * 128 * 4 * 256^2 * (1 + 128 / (6 * 256) + 1024 / (12 * 4 * 256))
    # = 3.8655e10 * (1 + 1/12 + 1/12) = 4.5097e10
    flops = 72 * 16 * 128 * 4 * 256**2 * (1 + 128 / (6 * 256) + 1024 / (12 * 4 * 256))
    assert flops == pytest.approx(4.5097e10, rel=1e-4)
    job, _ = parse_job(list(JOB), "t", "")
    assert model_flops(job) == pytest.approx(flops)
    assert row["tflops_per_gpu"] == pytest.approx(flops / 16 / row["iteration_s"] / 1e12)
    assert row["mfu"] == pytest.approx(row["tflops_per_gpu"] / 989.4) and 0 < row["mfu"] < 1
    assert (row["tp"], row["pp"], row["dp"]) == (2, 2, 4)
    written = sorted(p.name for p in (tmp_path / "results").iterdir())
    assert written == sorted(f"run-{s}" for s in ("EndToEnd.csv", "topo_stages.csv", "topo_layers.csv",
                                                  "topo_collectives.csv"))
    # the same job through the API (a JobConfig) gives the same iteration
    job, _ = parse_job([*JOB, "--gpu_type", "H100"], "t", "")
    assert simulate(job, TOPO16, TopoOptions()).iteration_us / 1e6 == pytest.approx(row["iteration_s"])


@pytest.mark.parametrize("args, message", [
    (("-t", TOPO16, "--gpu_type", "V42", *JOB), "--gpu_type 'V42' is not in the GPU table"),
    (("-t", TOPO16, "--gpu_type", "H100", *JOB[:3], "32", *JOB[4:], "--global_batch", "32"),
     "has 16 GPUs, fewer than the 32 the workload runs on"),
    (("-t", TOPO16, "--gpu_type", "H100", *JOB, "--num_attention_heads", "7"),
     "--num_attention_heads 7 is not divisible by --tensor_model_parallel_size 2"),
    (("-t", TOPO16, *JOB), "simulating a job needs computation times: give --gpu_type"),
    (("-t", TOPO16, "--gpu_type", "H100", *JOB, "--frame", "DeepSpeed"), "--frame DeepSpeed"),
    (("-w", str(EXAMPLES / "simai_micro_allreduce.txt"), "--world_size", "8"), "--world_size describes a job"),
])
def test_whole_job_bad_inputs(tmp_path, args, message):
    done = run_cli("-m", "simulator", *args, "--plot", str(tmp_path / "p.png"), cwd=tmp_path)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("simulator: error: ") and message in lines[0], done.stderr
    assert done.stdout == "" and not (tmp_path / "results").exists() and not (tmp_path / "p.png").exists()


def test_simai_file_says_it_describes_one_stage(tmp_path):
    from workload_generator.simai import SimAIHeader, SimAILayer, SimAIWorkload

    header = SimAIHeader.transformer(tp=2, ep=1, pp=2, vpp=1, ga=2, all_gpus=16, pp_comm=4096)
    layer = SimAILayer("layer", -1, 1000, "ALLREDUCE", 1024, 1000, "NONE", 0, 1000, "NONE", 0, 100)
    path = tmp_path / "w.txt"
    SimAIWorkload(header, [layer, layer]).write(path)
    done = run_cli("-m", "simulator", "-w", str(path), "-t", TOPO16, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "describes one pipeline stage" in done.stdout.splitlines()[0]


def test_simai_model_on_a_whole_job(tmp_path):
    # --model simai derives the SimAI records of the job (one stage, as SimAI assumes) and runs SimAI's model
    done = run_cli("-m", "simulator", "--model", "simai", "-g_p_s", "8", "-n_p_s", "8", "--gpu_type", "H100", *JOB,
                   "--json", "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    row = last_json(done.stdout)
    assert row["model"] == "simai" and row["iteration_s"] > 0 and 0 < row["mfu"] < 1


# ---- uneven stages with interleaving, played ---------------------------------------------------------

TINY126 = ModelConfig(name="tiny126", hidden_size=64, num_layers=126, num_attention_heads=4, ffn_hidden_size=128,
                      vocab_size=256, max_position_embeddings=64)


def one_us(item) -> float:
    return 1000.0


@pytest.mark.parametrize("layout", [
    dict(first_stage_layers=6, last_stage_layers=8, virtual_stages=2),            # Megatron core's uneven split
    dict(embedding_in_split=True, loss_in_split=True, virtual_stages=4),        # Llama 3's: embedding and loss as layers
])
def test_126_layers_on_16_interleaved_stages(layout):
    parallel = ParallelConfig(world_size=16, pp=16, micro_batch=1, global_batch=16, **layout)
    job = JobConfig(TINY126, parallel, TrainingConfig(seq_length=32, computation_enable=True))
    options = TopoOptions(gpus_per_server=8, nvlink_bw=1e6, nic_busbw=1e6, latency_scale=0.0, compute_time_ns=one_us)
    result = simulate(job, None, options)
    stages = result.details.stages
    assert len(stages) == 16
    # every stage's terms add up to the iteration, which no stage's own work exceeds
    for st in stages:
        assert st.compute_us + st.exposed_comm_us + st.pp_exposed_us + st.bubble_us == pytest.approx(result.iteration_us)
    # with free communication and each computation item 1 us, a stage computes for as many us as its
    # iteration has computation items (its chunks' forwards and backwards of 16 micro-batches, and the
    # optimizer step)
    from workload_generator.megatron import MegatronWorkload

    for s in (0, 7, 15):
        items = [i for i in MegatronWorkload(job, pp_rank=s)().iterations()[1] if i.is_computation]
        assert stages[s].compute_us == pytest.approx(len(items))
    # the uneven split shows in the compute: the first stage (embedding, 6 or 7 layers) computes less
    # than a middle one (8 layers)
    counts = parallel.stage_layers(126)
    assert sum(counts) == 126 and counts[0] < counts[7]
    assert stages[0].compute_us < stages[7].compute_us
    assert result.details.mfu is None  # no peak without a GPU type


# ---- the validation suite ---------------------------------------------------------------------------

BARS = {"korthikanti2022": (5.0, 8.0), "narayanan2021": (6.0, 10.0)}
"""Issue 25's bar per suite: mean and max |error| (%)."""


def test_validation_suites_meet_their_bars():
    done = run_cli("-m", "simulator", "validate", "--json", timeout=600)
    assert done.returncode == 0, done.stderr
    rows = last_json(done.stdout)
    suites = {r["suite"] for r in rows}
    assert suites == {"korthikanti2022", "narayanan2021", "h200_mcore", "h200_mcore_moe", "moe", "bridge_dense",
                      "bridge_blackwell"}
    # issue 26's MoE runs (Megatron-Bridge on DGX H100): their 15% bar is not met; the suite's own bar
    # (simulator.validation.MOE_BAR_PCT, 35%, and why) holds, and the model is too fast on every run
    from simulator.validation import MOE_BAR_PCT

    moe = [r["error_pct"] for r in rows if r["suite"] == "moe"]
    assert len(moe) == 4 and all(-MOE_BAR_PCT <= e < 0 for e in moe), moe
    # Megatron-Bridge's dense Llama rows on DGX H100: within their own bar (simulator.validation.BRIDGE_DENSE_BAR_PCT)
    from simulator.validation import BRIDGE_DENSE_BAR_PCT

    dense = [r["error_pct"] for r in rows if r["suite"] == "bridge_dense"]
    assert len(dense) == 2 and all(abs(e) <= BRIDGE_DENSE_BAR_PCT for e in dense), dense
    for suite, (mean, worst) in BARS.items():
        errors = [abs(r["error_pct"]) for r in rows if r["suite"] == suite]
        assert len(errors) == {"korthikanti2022": 8, "narayanan2021": 10}[suite]
        assert sum(errors) / len(errors) <= mean and max(errors) <= worst, (suite, errors)
    # the H200 Megatron-core steps: the flash-attention steps within 10%, the local path's within 25%
    h200 = {r["case"]: r["error_pct"] for r in rows if r["suite"] == "h200_mcore"}
    assert len(h200) == 8 and abs(h200.pop("llama3_8b_8l_sdpa")) <= 10.0
    assert abs(h200.pop("qwen3_30b_dense_4l")) <= 10.0
    assert all(abs(e) <= 25.0 for e in h200.values()), h200
    # its MoE twin is reported without a bar: host-bound (profiling/measurements/h200/megatron_core_steps/
    # qwen3_30b_moe_4l.kernels.json), so the model, which prices its kernels, is too fast
    (moe_h200,) = [r for r in rows if r["suite"] == "h200_mcore_moe"]
    assert moe_h200["case"] == "qwen3_30b_moe_4l" and moe_h200["error_pct"] < 0
    # Megatron-Bridge's Blackwell rows are reported without a bar (test_bridge_blackwell_suite_...)
    assert len([r for r in rows if r["suite"] == "bridge_blackwell"]) == 22
    for r in rows:
        assert r["error_pct"] == pytest.approx((r["simulated_s"] / r["published_s"] - 1) * 100)
        # MFU counts the bf16 dense peak, which FP8 on Blackwell passes (the published GB300 Llama 3.1 405B FP8 row
        # reaches 2617 model TFLOP/s of 2500)
        assert 0 < r["mfu"] < (2 if r["suite"] == "bridge_blackwell" else 1)


def test_a_validation_row_reproduces_with_its_command(tmp_path):
    done = run_cli("-m", "simulator", "validate", "--json", "-k", "22B seq-par", timeout=300)
    assert done.returncode == 0, done.stderr
    (row,) = last_json(done.stdout)
    command = row["command"].replace("python ", f"{sys.executable} ")
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    shell = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert shell.returncode == 0, shell.stderr
    assert last_json(shell.stdout)["iteration_s"] == pytest.approx(row["simulated_s"])
    bad = run_cli("-m", "simulator", "validate", "-k", "nothing")
    assert bad.returncode == 2 and "matches none of" in bad.stderr


def test_narayanan_suite_derives_its_published_seconds():
    # Narayanan et al. 2021, Table 1, 1.7B: B 512, s 2048, l 24, h 2304, V 51200 on 32 GPUs at 137 TFLOP/s each;
    # 96 B s l h^2 (1 + s/6h + V/16lh) = 96 x 512 x 2048 x 24 x 2304^2 x (1 + 0.14815 + 0.05787) = 1.54668e16 FLOP,
    # / (137e12 x 32) = 3.528 s
    done = run_cli("-m", "simulator", "validate", "--suite", "narayanan2021", "-k", "1.7B", "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    (row,) = last_json(done.stdout)
    assert row["published_s"] == pytest.approx(3.528, abs=5e-4)
    # as Megatron-LM's examples/sc21/run_table_1.sh ran it: micro-batch 16, torch DDP (overlapped all-reduce),
    # the Megatron-LM of August 2021 (no asynchronous TP all-reduce, no gradient-accumulation fusion)
    assert row["source"] == "Narayanan et al. 2021, Table 1" and "--micro_batch 16" in row["command"]
    assert "--overlap_grad_reduce" in row["command"] and "--no_async_tensor_model_parallel_allreduce" in row["command"]
    assert "-tp" not in row["command"] and "--tensor_model_parallel_size 1" in row["command"]
    assert row["error_pct"] == pytest.approx((row["simulated_s"] / 3.528017807 - 1) * 100, rel=1e-6)
    # the interleaved runs give their layers per virtual stage as the script does
    done = run_cli("-m", "simulator", "validate", "--suite", "narayanan2021", "-k", "76.1B", "--json", timeout=300)
    (row,) = last_json(done.stdout)
    assert "--num_layers_per_virtual_pipeline_stage 5" in row["command"] and "--micro_batch 2" in row["command"]
    # a suite restricts -k
    bad = run_cli("-m", "simulator", "validate", "--suite", "korthikanti2022", "-k", "weak scaling")
    assert bad.returncode == 2 and "matches none of" in bad.stderr and "22B" in bad.stderr


def test_h200_suite_predicts_the_measured_steps_with_their_stack():
    # the single-GPU Megatron-core steps ran Megatron-core's local path without apex or Transformer Engine
    done = run_cli("-m", "simulator", "validate", "--suite", "h200_mcore", "-k", "sdpa", "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    (row,) = last_json(done.stdout)
    assert row["published_s"] == pytest.approx(1.055571)
    assert "--transformer_impl local --no_apex" in row["command"] and "--use_flash_attn" in row["command"]
    assert "-g_p_s 1" in row["command"] and "--gpu_type H200" in row["command"]


def test_bridge_dense_suite_derives_its_published_seconds_and_simulates_the_recipes():
    # Megatron-Bridge's performance summary archive, DGX-H100 rows of the 26.04.01 container, sequence 8192:
    # Llama 3 70B: 256 x 8192 / (64 x 1664) = 2,097,152 / 106,496 = 19.6923 s;
    # Llama 3.1 405B: 1536 x 8192 / (1024 x 328) = 12,582,912 / 335,872 = 37.4634 s
    done = run_cli("-m", "simulator", "validate", "--suite", "bridge_dense", "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    rows = {r["case"]: r for r in last_json(done.stdout)}
    assert set(rows) == {"Llama3 70B H100 x64 FP8", "Llama3.1 405B H100 x1024 FP8"}
    l70, l405 = rows["Llama3 70B H100 x64 FP8"], rows["Llama3.1 405B H100 x1024 FP8"]
    assert l70["published_s"] == pytest.approx(19.6923, abs=5e-5)
    assert l405["published_s"] == pytest.approx(37.4634, abs=5e-5)
    # the recipes' shared settings (simulator.validation._DENSE_RECIPE): FP8 current scaling, SP with TE's userbuffers,
    # the distributed optimizer with both overlaps, bf16 gradient reduction in 128 Mi-element buckets, fused cross entropy
    for r in rows.values():
        assert r["suite"] == "bridge_dense" and r["source"].startswith("Megatron-Bridge performance summary")
        for flag in ("--dtype float8 --fp8_recipe tensorwise", "--enable_sequence_parallel", "--tp_comm_overlap",
                     "--overlap_grad_reduce --overlap_param_gather --grad_reduce_in_bf16",
                     "--ddp_bucket_size 134217728", "--cross_entropy_loss_fusion", "--seq_length 8192 --micro_batch 1"):
            assert flag in r["command"], (r["case"], flag)
        assert "--cuda_graph_impl" not in r["command"] and "--recompute" not in r["command"]
        # each simulates (no refusal): its busiest stage's terms add up to the iteration
        parts = r["compute_s"] + r["host_s"] + r["exposed_comm_s"] + r["bubble_s"]
        assert parts == pytest.approx(r["simulated_s"], rel=1e-6) and 0 < r["mfu"] < 1
    # the layouts: 70B TP4 PP8 VP5 (80 layers, no embedding or loss in the split); 405B TP8 PP8 CP2 VP8, the embedding
    # and the loss counted as layers (126 + 2 = 128 in 64 virtual stages of 2), ring attention (p2p)
    assert "--tensor_model_parallel_size 4 --pipeline_model_parallel 8 --num_virtual_stages_per_pipeline_rank 5" \
        in l70["command"] and "account_for" not in l70["command"]
    assert "--context-parallel-size 2 --cp_comm_type p2p --num_virtual_stages_per_pipeline_rank 8 " \
           "--account_for_embedding_in_pipeline_split --account_for_loss_in_pipeline_split" in l405["command"]


def test_bridge_blackwell_suite_simulates_every_row_and_derives_its_published_seconds():
    # Megatron-Bridge's performance summary archive, 26.04.01 container: DGX-GB300 Llama 3.1 405B FP8, 256 GPUs, GBS 1536,
    # sequence 8192, 1024 tokens/s/GPU: 1536 x 8192 / (256 x 1024) = 12,582,912 / 262,144 = 48.0 s; DGX-GB300
    # Qwen3-30B-A3B MXFP8, 8 GPUs, GBS 512 (MBS 8), sequence 4096, 31744 tokens/s/GPU: 512 x 4096 / (8 x 31744) =
    # 2,097,152 / 253,952 = 8.25806 s
    done = run_cli("-m", "simulator", "validate", "--suite", "bridge_blackwell", "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    rows = {r["case"]: r for r in last_json(done.stdout)}
    assert len(rows) == 22
    l405, qwen = rows["Llama3.1 405B GB300 x256 FP8"], rows["Qwen3-30B-A3B GB300 x8 MXFP8"]
    assert l405["published_s"] == pytest.approx(48.0, abs=5e-5)
    assert qwen["published_s"] == pytest.approx(8.25806, abs=5e-5)
    assert "--micro_batch 8 --world_size 8 --global_batch 512" in qwen["command"]
    nic = {"B200": "400Gbps", "B300": "800Gbps", "GB200": "400Gbps", "GB300": "800Gbps"}
    for name, r in rows.items():
        # each simulates (no refusal): its busiest stage's terms add up to the iteration
        assert r["suite"] == "bridge_blackwell" and r["source"].startswith("Megatron-Bridge performance summary")
        parts = r["compute_s"] + r["host_s"] + r["exposed_comm_s"] + r["bubble_s"]
        assert parts == pytest.approx(r["simulated_s"], rel=1e-6) and r["mfu"] > 0
        system = name.split()[-3]
        assert f"--gpu_type {system} " in r["command"] and f"-gt {system} -bw {nic[system]}" in r["command"]
        # DGX-GB200/GB300: the launcher's NVLink segments of 16 trays (64 GPUs), or the whole job when smaller
        if system.startswith("GB"):
            assert f"-topo NVL -gps {min(int(name.split()[-2][1:]), 64)} " in r["command"]
        else:
            assert "--ro " in r["command"] and "-gps 8 " in r["command"]
        precision = {"MXFP8": "--fp8_recipe mxfp8", "FP8": "--fp8_recipe tensorwise", "BF16": "--dtype bfloat16"}
        assert precision[name.split()[-1]] in r["command"]
    # a layout of the v0.4.2 recipes the 26.04.01 table shows: DeepSeek-V3 on B300 at MBS 2, PP 8 without VP
    dsv3 = rows["DeepSeek-V3 B300 x256 MXFP8"]["command"]
    assert "--micro_batch 2" in dsv3 and "--pipeline_model_parallel_layout 'Et*8|(t*8|)*6t*5mL'" in dsv3


def test_moe_suite_simulates_deepseek_v3_as_the_25_09_h100_recipe_ran_it():
    # Megatron-Bridge's performance summary archive, 25.09 container, DGX-H100 "DeepSeekV3 (dropless)": 1024 GPUs,
    # GBS 8192, seq 4096, 1297 tokens/s/GPU: 8192 x 4096 / (1024 x 1297) = 33,554,432 / 1,328,128 = 25.26446 s
    from simulator.validation import MOE_BAR_PCT

    done = run_cli("-m", "simulator", "validate", "--suite", "moe", "-k", "DeepSeek", "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    (row,) = last_json(done.stdout)
    assert row["suite"] == "moe" and "bf71eba07" in row["source"]
    assert row["published_s"] == pytest.approx(25.26446, abs=5e-6)
    # the recipe (Megatron-Bridge bf71eba07): its layout with the MTP layer, DeepEP, the 1F1B all-to-all overlap,
    # recomputation of MLA's up projections and the dense MLPs, FP8 current scaling; the parameter gather overlapped
    # but not the gradient reduction (run_script.py sets overlap_grad_reduce False for H100): both were refused before
    command = row["command"]
    for flag in ("--model_name deepseek_v3 --dtype float8 --fp8_recipe tensorwise", "--tensor_model_parallel_size 2 "
                 "--enable_sequence_parallel --pipeline_model_parallel 8 --pipeline_model_parallel_layout "
                 "'Et|(tt|)*30mL' --mtp_num_layers 1 --expert_model_parallel_size 64 --expert_tensor_parallel_size 1",
                 "--moe_token_dispatcher_type flex --moe_enable_deepep",
                 "--overlap_moe_expert_parallel_comm --delay_wgrad_compute",
                 "--recompute_granularity selective --recompute_modules mla_up_proj mlp",
                 "--use-distributed-optimizer --overlap_param_gather --grad_reduce_in_bf16",
                 "--world_size 1024 --global_batch 8192"):
        assert flag in command, flag
    assert "--overlap_grad_reduce" not in command and "--cuda_graph_impl" not in command
    parts = row["compute_s"] + row["host_s"] + row["exposed_comm_s"] + row["bubble_s"]
    assert parts == pytest.approx(row["simulated_s"], rel=1e-6) and 0 < row["mfu"] < 1
    # too fast, as every run of the suite, within the suite's bar
    assert -MOE_BAR_PCT <= row["error_pct"] < 0


def test_fp8_changes_only_the_gemms_and_mfu_stays_against_the_bf16_peak():
    # the same job in bf16 and FP8 on H100: the same collectives (sizes in bf16 either way), faster GEMMs
    # (large enough here for the FP8 peak to beat the casts), so a shorter iteration and a higher MFU, which
    # is still counted against the dense bf16 peak and < 1
    base = ["--model_name", "gpt_13B", "--world_size", "16", "--tensor_model_parallel_size", "8",
            "--pipeline_model_parallel", "2", "--global_batch", "16", "--seq_length", "2048", "--enable_sequence_parallel",
            "--gpu_type", "H100", "--use_flash_attn"]
    bf16, _ = parse_job(base, "t", "")
    fp8, _ = parse_job([*base, "--dtype", "float8"], "t", "")
    a, b = simulate(bf16, TOPO16, TopoOptions()), simulate(fp8, TOPO16, TopoOptions())
    comm = [(c.group, c.comm_type, c.size_bytes, c.count) for c in a.details.collectives]
    assert comm == [(c.group, c.comm_type, c.size_bytes, c.count) for c in b.details.collectives]
    assert b.iteration_us < a.iteration_us and a.details.mfu < b.details.mfu < 1
    assert a.details.peak_tflops == b.details.peak_tflops == 989.4


@pytest.mark.parametrize("gpu", ["A100", "A800", "H100", "H800", "H20", "H200", "B200", "GB200"])
def test_mfu_never_exceeds_one(gpu):
    # every GPU, bf16 and (where it has FP8 tensor cores) FP8, a GEMM-heavy job (hidden 8192, no pipelining, one
    # server): MFU is counted against the dense bf16 peak and stays under 1; the hardware FLOPs' utilisation of the
    # GEMMs' own dense peak (hfu: FP8's for FP8 runs) stays under 1 too; hardware TFLOP/s include recomputation
    from mocked_model.compute import gpu_spec

    base = ["--hidden_size", "8192", "--num_attention_heads", "64", "--num_layers", "4", "--world_size", "8",
            "--tensor_model_parallel_size", "8", "--global_batch", "8", "--seq_length", "4096",
            "--max_position_embeddings", "4096", "--swiglu", "--enable_sequence_parallel", "--gpu_type", gpu,
            "--recompute_granularity", "full"]
    dtypes = ["bfloat16"] + (["float8"] if gpu_spec(gpu).fp8_tflops else [])
    for dtype in dtypes:
        job, _ = parse_job([*base, "--dtype", dtype], "t", "")
        d = simulate(job, None, TopoOptions(gpus_per_server=8, gpu_type=None)).details
        assert 0 < d.mfu < 1 and 0 < d.hfu < 1, (gpu, dtype, d.mfu, d.hfu)
        assert d.peak_tflops == gpu_spec(gpu).bf16_tflops
        assert d.hfu_peak_tflops == (gpu_spec(gpu).fp8_tflops if dtype == "float8" else gpu_spec(gpu).bf16_tflops)
        # full recomputation: the hardware does one more forward than the model FLOPs count
        assert d.hardware_flops > d.model_flops

"""Memory per GPU (mocked_model/memory.py): weights, optimizer states and activations derived by hand."""

from __future__ import annotations

import json

import pytest

from mocked_model.memory import FIXED_ALLOWANCE, FRAGMENTATION, GIB, estimate_memory, layer_activation_bytes
from tests.conftest import EXAMPLES, run_cli
from utils.cli import parse_job
from utils.config import JobConfig, TrainingConfig
from utils.model_config import ModelConfig
from utils.parallel import ParallelConfig

# hidden 64, 4 heads, 2 layers, FFN 4h = 256, vocabulary 256, learned positions up to 64, GPT dropout 0.1
TINY = ModelConfig(name="tiny", hidden_size=64, num_layers=2, num_attention_heads=4, ffn_hidden_size=256,
                   vocab_size=256, max_position_embeddings=64)


def tiny(recompute="none", sp=False, dist_opt=False, dtype="bfloat16", impl="local") -> JobConfig:
    # tp 2, dp 2, sequence 32, micro-batch 1: s*b*h = 32 * 64 = 2048; Megatron's local layers, whose materialised
    # attention Korthikanti et al.'s Table 2 counts (Transformer Engine's default runs flash attention)
    parallel = ParallelConfig(world_size=4, tp=2, micro_batch=1, global_batch=2, sequence_parallel=sp)
    training = TrainingConfig(seq_length=32, recompute=recompute, use_distributed_optimizer=dist_opt, dtype=dtype,
                              transformer_impl=impl)
    return JobConfig(TINY, parallel, training)


@pytest.mark.parametrize("recompute, sp, expected", [
    # Korthikanti et al. Table 2 with s*b*h = 2048, t = 2, a = 4, s = 32 (5as/h = 5*4*32/64 = 10):
    ("none", False, 2048 * (10 + 24 / 2 + 10 / 2)),      # sbh(10 + 24/t + 5as/(ht)) = 55,296
    ("none", True, 2048 / 2 * (34 + 10)),                # sbh(34 + 5as/h)/t = 45,056
    ("selective", False, 2048 * (10 + 24 / 2)),          # sbh(10 + 24/t) = 45,056
    ("selective", True, 2048 / 2 * 34),                  # 34 sbh/t = 34,816
    ("full", False, 2 * 2048),                           # the layer input, 2sbh = 4,096
    ("full", True, 2 * 2048 / 2),                        # split by SP: 2,048
])
def test_layer_activations_follow_table_2(recompute, sp, expected):
    assert layer_activation_bytes(tiny(recompute, sp), 0) == expected


def test_flash_attention_keeps_no_scores():
    # Transformer Engine's default (flash attention): no s x s scores, softmax output or dropout mask; the attention
    # output (2sbh/t) and the fp32 log-sum-exp per row and head (4 * b * a * s / t = 4 * 4 * 32 / 2 = 256) instead
    # of the materialised path's 5as/(ht) * sbh = 10,240 (no recomputation, no SP):
    # sbh(10 + 24/t) + 2sbh/t + 256 = 45,056 + 2,048 + 256 = 47,360
    assert layer_activation_bytes(tiny(impl="transformer_engine"), 0) == 2048 * (10 + 24 / 2) + 2048 + 256


def test_weights_and_optimizer_of_a_small_model():
    # per TP rank: word embedding 256/2 x 64 = 8192, positions 64 x 64 = 4096; per layer two LayerNorms
    # (2 x 128), QKV 96 x 64 = 6144, projection 64 x 32 = 2048, fc1 128 x 64 = 8192, fc2 64 x 128 = 8192
    # = 24,832; the final LayerNorm 128; the output layer reuses the word embedding (one stage):
    # 8192 + 4096 + 2 * 24,832 + 128 = 62,080 parameters.
    est = estimate_memory(tiny())
    (stage,) = est.stages
    assert stage.params == 62_080
    terms = {t.name: t.bytes for t in stage.terms}
    # bf16: 2 B parameters, 4 B fp32 main gradients, 12 B of fp32 master copy and Adam moments = 18 B
    assert (terms["parameters"], terms["gradients"], terms["optimizer states"]) == (2 * 62_080, 4 * 62_080, 12 * 62_080)
    assert stage.weights_bytes == 18 * 62_080
    # the distributed optimizer shards the 12 B over dp 2: 6 + 12 / 2 = 12 B per parameter
    sharded = estimate_memory(tiny(dist_opt=True)).stages[0]
    assert sharded.weights_bytes == 12 * 62_080
    # fp16 keeps fp16 gradients (Megatron's default): 2 + 2 + 12 = 16 B
    assert estimate_memory(tiny(dtype="float16")).stages[0].weights_bytes == 16 * 62_080


@pytest.mark.parametrize("recompute, sp", [("none", False), ("selective", True), ("full", False)])
def test_stage_total_adds_every_term(recompute, sp):
    job = tiny(recompute, sp)
    stage = estimate_memory(job).stages[0]
    terms = {t.name: t.bytes for t in stage.terms}
    per_layer = layer_activation_bytes(job, 0)
    # one stage, one micro-batch in flight: two layers' activations
    assert terms["activations"] == 2 * per_layer
    if recompute == "full":  # and the one layer being recomputed holds its full activations meanwhile
        assert terms["recompute working set"] == layer_activation_bytes(job, 0, "none")
    # first stage: int64 token ids (8 x 32) and the embedding's dropout mask (32 x 64, / tp with SP)
    assert terms["embedding activations"] == 8 * 32 + 32 * 64 / (2 if sp else 1)
    # last stage: final norm and output-layer inputs (2 x 2 B x 32 x 64, / tp with SP) and fp32 logits
    # 4 x 32 x 256 / tp 2
    assert terms["output-layer activations"] == 2 * 2 * 32 * 64 / (2 if sp else 1) + 4 * 32 * 256 / 2
    rest = sum(v for k, v in terms.items() if k != "workspace and fragmentation")
    assert terms["workspace and fragmentation"] == pytest.approx(FIXED_ALLOWANCE + FRAGMENTATION * rest)
    assert stage.total_bytes == pytest.approx(rest + FIXED_ALLOWANCE + FRAGMENTATION * rest)


def test_gpt3_175b_on_korthikantis_layout_follows_the_paper():
    # GPT-3 175B, tp 8, pp 8, 3 chunks per stage (Table 5), sequence 2048, micro-batch 1, SP + selective:
    # 34 sbh/t per layer = 34 * 2048 * 12288 / 8 bytes; the first stage holds L(1 + (p-1)/(pv)) =
    # 96 * (1 + 7/24) = 124 layers' worth (Megatron's interleaving penalty; section 4.2.3).
    job, _ = parse_job("--model_name gpt3_175B --world_size 64 --tensor_model_parallel_size 8 --pipeline_model_parallel 8 "
                       "--num_virtual_stages_per_pipeline_rank 3 --global_batch 64 --seq_length 2048 "
                       "--enable_sequence_parallel --recompute_granularity selective --transformer_impl local".split(), "t", "")
    est = estimate_memory(job, "A100")
    first = est.stages[0]
    terms = {t.name: t.bytes for t in first.terms}
    assert layer_activation_bytes(job, 0) == 34 * 2048 * 12288 / 8
    assert terms["activations"] == pytest.approx(124 * 34 * 2048 * 12288 / 8)
    # weights: Megatron's 18 bytes per parameter of the stage's shard
    assert first.weights_bytes == 18 * first.params
    assert est.most_loaded.stage == 0 and est.fits
    # without SP and recomputation the paper's 10 + 24/t + 5as/(ht) per layer, 8 micro-batches in flight
    # (1F1B, p = 8): it no longer fits an 80 GB A100, and the warning names the largest term
    plain, _ = parse_job("--model_name gpt3_175B --world_size 64 --tensor_model_parallel_size 8 "
                         "--pipeline_model_parallel 8 --global_batch 64 --seq_length 2048 --transformer_impl local".split(),
                         "t", "")
    s, b, h, t, a = 2048, 1, 12288, 8, 96
    assert layer_activation_bytes(plain, 0) == s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    big = estimate_memory(plain, "A100")
    assert {tm.name: tm.bytes for tm in big.stages[0].terms}["activations"] == pytest.approx(
        12 * 8 * s * b * h * (10 + 24 / t + 5 * a * s / (h * t)))
    assert not big.fits and "largest term is activations" in big.warning()


def test_deepspeed_zero_stages():
    # LLaMA-7B (6,738,415,616 parameters) on 16 ranks: ZeRO-1 keeps 2 + 2 B and 12/16 B per parameter,
    # ZeRO-2 2 + 14/16, ZeRO-3 16/16 (Rajbhandari et al. 2020, section 5)
    n = 6_738_415_616
    for stage, per_param in ((1, 4 + 12 / 16), (2, 2 + 14 / 16), (3, 16 / 16)):
        job, _ = parse_job(f"--frame DeepSpeed -m 7 --world_size 16 --global_batch 16 --stage {stage}".split(), "t", "")
        est = estimate_memory(job)
        assert est.stages[0].params == n
        assert est.stages[0].weights_bytes == pytest.approx(per_param * n)


def test_generators_and_simulator_report_memory(tmp_path):
    args = ("--model_name", "gpt3_175B", "--world_size", "64", "--tensor_model_parallel_size", "8",
            "--pipeline_model_parallel", "8", "--global_batch", "64", "--gpu_type", "A100")
    done = run_cli("-m", "workload_generator.generate_megatron_workload", *args, "--memory", "-o", str(tmp_path / "w.csv"))
    assert done.returncode == 0, done.stderr
    assert "memory per GPU (most loaded: pipeline stage 0" in done.stdout
    assert "DOES NOT FIT" in done.stdout and "warning: the job needs" in done.stdout
    # the simulator: summary, --json keys, a warning on stderr, per-stage columns in topo_stages.csv
    topo = str(EXAMPLES / "topo_Spectrum-X_16g_8gps_400Gbps_H100")
    sim = run_cli("-m", "simulator", "-t", topo, "--gpu_type", "H100", "--model_name", "gpt_13B", "--world_size", "16",
                  "--tensor_model_parallel_size", "8", "--pipeline_model_parallel", "2", "--global_batch", "16",
                  "--json", "-r", "m-", cwd=tmp_path)
    assert sim.returncode == 0, sim.stderr
    row = json.loads(sim.stdout.strip().splitlines()[-1])
    # the total is weights + activations + the allowance (2 GiB + 5% of the rest)
    rest = row["memory_weights_gib"] + row["memory_activations_gib"]
    assert row["memory_gib"] == pytest.approx(rest + 2 + 0.05 * rest)
    assert "warning" not in sim.stderr
    stages = (tmp_path / "results" / "m-topo_stages.csv").read_text().splitlines()
    assert stages[0].endswith("memory_gib,memory_weights_gib,memory_activations_gib") and len(stages) == 3
    est = estimate_memory(parse_job(["--model_name", "gpt_13B", "--world_size", "16", "--tensor_model_parallel_size", "8",
                                     "--pipeline_model_parallel", "2", "--global_batch", "16"], "t", "")[0], "H100")
    assert row["memory_gib"] == pytest.approx(est.most_loaded.total_bytes / GIB)


def test_fp8_keeps_its_gemm_inputs_in_one_byte():
    """Under FP8 Transformer Engine keeps each GEMM input for the weight gradient as its FP8 copy (columnwise only,
    one byte): QKV's (sbh = 2048 elements), the output projection's (sbh/t = 1024), fc1's (2048) and fc2's (4sbh/t =
    4096) inputs weigh 9,216 B instead of 18,432; norms' inputs, Q/K/V, attention's output and the activation's input
    stay bf16.  The flash-attention layer above (47,360 B) becomes 47,360 - 9,216 = 38,144 B."""
    assert layer_activation_bytes(tiny(impl="transformer_engine", dtype="float8"), 0) == 47360 - 9216


def test_moe_layer_keeps_its_experts_inputs_not_its_permutations():
    """Tiny MoE layer (4 experts, top 2, expert FFN 128), tp 1, ep 2, sequence 32: the busiest rank's experts take
    2 sources x 32 tokens x 2 copies / 2 ranks = 64 rows.  The layer keeps, besides attention (as the dense layer's),
    the MLP norm's input and dropout mask (2 x 2048 + 2048), the router's input (2 x 2048), the router's bf16
    probabilities (32 tokens x 4 experts x 2 B = 256) and the permuted ones in fp32 (64 x 4 = 256), and the experts'
    fc1, activation and fc2 inputs (64 x (64 + 128 + 128) x 2 B = 40,960); the permutations and all-to-alls keep only
    row maps (no 2 x 64 x 64 x 2 B of permuted and unpermuted rows)."""
    moe = ModelConfig(name="tiny_moe", hidden_size=64, num_layers=2, num_attention_heads=4, ffn_hidden_size=256,
                      vocab_size=256, max_position_embeddings=64, num_experts=4, moe_router_topk=2,
                      moe_ffn_hidden_size=128)
    parallel = ParallelConfig(world_size=2, tp=1, ep=2, micro_batch=1, global_batch=2)
    job = JobConfig(moe, parallel, TrainingConfig(seq_length=32, transformer_impl="transformer_engine"))
    # attention at t = 1 (flash, dropout): norm and QKV inputs 2 x 2 x 2048, Q/K/V 2 x 32 x 192, output and its
    # log-sum-exp 2 x 2048 + 4 x 4 x 32, the projection's input 2 x 2048, its dropout mask 2048
    attention = 8192 + 12288 + 4096 + 512 + 4096 + 2048
    mlp = 2 * 2048 + 2048 + 2 * 2048 + 256 + 256 + 40960
    assert layer_activation_bytes(job, 0) == attention + mlp


def test_moe_recompute_modules_drop_what_they_recompute():
    """--recompute_modules moe_act drops the experts' fc2 inputs (64 rows x 128 x 2 B = 16,384) and layernorm the
    router's input, the MLP norm's output (2 x 2048 = 4,096), from the tiny MoE layer above."""
    moe = ModelConfig(name="tiny_moe", hidden_size=64, num_layers=2, num_attention_heads=4, ffn_hidden_size=256,
                      vocab_size=256, max_position_embeddings=64, num_experts=4, moe_router_topk=2,
                      moe_ffn_hidden_size=128)
    parallel = ParallelConfig(world_size=2, tp=1, ep=2, micro_batch=1, global_batch=2)

    def layer(*modules: str) -> float:
        training = TrainingConfig(seq_length=32, transformer_impl="transformer_engine", recompute="selective",
                                  recompute_modules=modules)
        return layer_activation_bytes(JobConfig(moe, parallel, training), 0)

    base = layer("core_attn")
    assert base - layer("core_attn", "moe_act") == 64 * 128 * 2
    assert base - layer("core_attn", "layernorm") == 2 * 2048
    assert base - layer("core_attn", "moe_act", "layernorm") == 64 * 128 * 2 + 2 * 2048

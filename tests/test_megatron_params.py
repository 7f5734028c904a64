"""Per-rank parameter shapes summed over the TP and PP shards match the published model sizes."""

import pytest

from mocked_model.counting import model_param_count
from mocked_model.megatron import MegatronChunk, chunk_layout
from utils.config import JobConfig, TrainingConfig
from utils.parallel import ParallelConfig
from utils.presets import PRESETS, get_preset


def _job(model, tp=1, pp=1, **kw):
    return JobConfig(model, ParallelConfig(world_size=tp * pp, tp=tp, pp=pp, **kw), TrainingConfig(seq_length=2048))


def test_llama_7b_exact():
    # LLaMA-7B, h = 4096, ffn = 11008, 32 layers, vocab 32000 (a multiple of 128 * tp 2: no padding)
    #   attention 4 h^2            =  67,108,864
    #   SwiGLU MLP 3 h ffn         = 135,266,304
    #   two RMSNorms 2 h           =       8,192     -> 202,383,360 per layer, x 32 = 6,476,267,520
    #   embedding + untied output  = 2 x 32000 x 4096 = 262,144,000; final norm 4096
    #   total 6,738,415,616 (the released checkpoint's count)
    assert model_param_count(_job(get_preset("llama_7B"), tp=2, pp=2, global_batch=2)) == 6_738_415_616


def test_gpt3_175b_by_hand():
    # GPT-3 175B, h = 12288, 96 layers, biases, LayerNorm, tied embeddings, 2048 positions,
    # vocab 50257 padded to a multiple of 128 * tp 8 = 1024 -> 51200
    #   per layer 12 h^2 + 13 h = 1,811,939,328 + 159,744 = 1,812,099,072; x 96 = 173,961,510,912
    #   word embedding 51200 h = 629,145,600; positions 2048 h = 25,165,824; final LayerNorm 2 h = 24,576
    #   total 174,615,846,912 (published: 174.6e9)
    job = _job(get_preset("gpt3_175B"), tp=8, pp=8, global_batch=8)
    assert model_param_count(job) == 174_615_846_912


def test_llama3_405b_uneven_pipeline():
    # Llama 3 405B, h = 16384, 126 layers, 128 heads with 8 KV groups of 128, ffn 53248,
    # vocab 128256 padded to a multiple of 1024 -> 129024, untied
    #   attention h (q) + 2 x 1024 (k, v) per input dim, plus the output projection:
    #     16384 x (16384 + 2048) + 16384 x 16384 = 570,425,344
    #   MLP 3 x 16384 x 53248 = 2,617,245,696; norms 2 x 16384 -> 3,187,703,808 per layer, x 126
    #   = 401,650,679,808; embeddings 2 x 129024 x 16384 = 4,227,858,432; final norm 16384
    #   total 405,878,554,624 (published 405.9e9: the difference is the vocabulary padding)
    model = get_preset("llama3_405B")
    job = _job(model, tp=8, pp=16, first_stage_layers=7, last_stage_layers=7, global_batch=16)
    assert model_param_count(job) == 405_878_554_624


@pytest.mark.parametrize("name", [n for n, m in PRESETS.items() if m.published_params and not m.is_moe])
def test_dense_presets_match_published_totals(name):
    model = get_preset(name)
    tp = 8 if model.num_attention_heads % 8 == 0 and model.query_groups % 8 == 0 else 4
    pp = 2
    job = _job(model, tp=tp, pp=pp, global_batch=2)
    assert model_param_count(job) == pytest.approx(model.published_params, rel=0.01)


def test_per_rank_shapes():
    # LLaMA-7B on tp 4: QKV is column parallel (3 x 4096 / 4 = 3072 rows of 4096), the output
    # projection row parallel (4096 x 1024), fc1 doubled for SwiGLU (2 x 11008 / 4 = 5504 rows),
    # the word embedding split over the (padded) vocabulary 32256 / 4 = 8064 (32000 -> multiple of 512)
    job = _job(get_preset("llama_7B"), tp=4, pp=2, global_batch=2)
    first, count, pre, post = chunk_layout(job, 0)[0]
    shapes = {p.name: p.shape for p in MegatronChunk(job, first, count, pre, post).parameters()}
    assert shapes["layers.0.self_attention.linear_qkv.weight"] == (3072, 4096)
    assert shapes["layers.0.self_attention.linear_proj.weight"] == (4096, 1024)
    assert shapes["layers.0.mlp.linear_fc1.weight"] == (5504, 4096)
    assert shapes["layers.0.mlp.linear_fc2.weight"] == (4096, 2752)
    assert shapes["embedding.word_embeddings.weight"] == (8064, 4096)
    assert "embedding.position_embeddings.weight" not in shapes   # RoPE
    assert count == 16 and pre and not post

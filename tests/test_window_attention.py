"""Sliding-window attention (``--window_size L,R``, ``--window_attn_skip_freq N``, GPT-OSS's alternation): which layers
are windowed, what their flash kernel computes, and what stays Megatron's (the model FLOPs).  Hand arithmetic in the
comments; a flash thread block is a 128-row query tile, a key block 128 keys."""

from __future__ import annotations

import pytest

from mocked_model.compute.attention_band import band_scores, piece_work
from mocked_model.compute.kernel_list import Precision
from mocked_model.compute.training_ops import OPS
from mocked_model.flops import model_flops
from mocked_model.memory import estimate_memory
from utils.config import JobConfig, TrainingConfig
from utils.model_config import ModelConfig
from utils.parallel import ParallelConfig
from workload_generator.megatron import MegatronWorkload

MODEL = ModelConfig(name="swa_test", hidden_size=1024, num_layers=2, num_attention_heads=8, kv_channels_given=128,
                    vocab_size=32000, max_position_embeddings=4096, position_embedding_type="rope",
                    attention_dropout=0.0, hidden_dropout=0.0, swiglu=True, normalization="RMSNorm")
SWA = MODEL.with_changes(window_size=(128, 0), window_attn_skip_freq=2)


def job(model: ModelConfig, **parallel) -> JobConfig:
    return JobConfig(model, ParallelConfig(world_size=parallel.pop("world_size", 1), global_batch=2, **parallel),
                     TrainingConfig(seq_length=4096, computation_enable=True))


def test_which_layers_are_windowed():
    # Megatron-core's is_layer_window_attention: 1-based layer numbers, every N-th full (layer_number % N == 0)
    assert [SWA.attention_window(i) for i in range(4)] == [128, None, 128, None]
    assert [MODEL.with_changes(window_size=(128, 0)).attention_window(i) for i in range(3)] == [128] * 3
    assert MODEL.with_changes(window_size=(-1, 0)).attention_window(0) is None   # unbounded: full causal
    assert MODEL.attention_window(0) is None


def test_band_in_key_blocks_by_hand():
    # s = 4096, w = 128: 32 tiles; tile 0 touches key block 0, every later tile its own block and the previous one
    # (ceil((128 + 128) / 128) = 2): 1 + 31 x 2 = 63 blocks, less half a diagonal block per tile (the causal count's
    # convention): 63 - 16 = 47 blocks of 128 x 128 = 770,048 scores (the exact band 4096 x 129 - 128 x 129 / 2 =
    # 520,128, plus the masked halves of the edge blocks)
    assert band_scores(4096, 4096, True, 128) == 47 * 128 * 128
    # w = 300: tiles 0, 1, 2 touch 1, 2, 3 blocks, tiles 3-31 ceil(428 / 128) = 4: 122 - 16 = 106 blocks
    assert band_scores(4096, 4096, True, 300) == 106 * 128 * 128
    # a window as wide as the sequence is the causal square: 4096^2 / 2
    assert band_scores(4096, 4096, True, 4096) == 4096**2 / 2
    # a bottom-right piece (512 queries ending the 4096 keys), w = 128: 4 tiles of 2 blocks: 8 - 2 = 6 blocks
    assert band_scores(512, 4096, True, 128) == 6 * 128 * 128


def test_windowed_layer_kernel():
    gen = MegatronWorkload(job(SWA))
    pieces = [i for i in gen.chunks[0].forward_items() if (i.meta or {}).get("op") == "attention"]
    assert [i.meta.get("window") for i in pieces] == [128, None]
    p = Precision("bf16", 2)
    windowed, full = (OPS["attention"](i, p)[0] for i in pieces)
    # 8 heads, d + dv = 256, micro-batch 1: 2 x 8 x 770,048 x 256 FLOPs; the full layer 2 x 8 x 4096^2 / 2 x 256
    assert windowed.flash_flops == 2 * 8 * 770_048 * 256
    assert full.flash_flops == 2 * 8 * 4096**2 / 2 * 256
    # the same thread blocks (32 tiles x 8 heads), so the same per-block overhead
    assert windowed.cta_flops == full.cta_flops == 32 * 8 * 2 * 128 * 128 * 256
    # backward 2.5 x (FlashAttention-2)
    assert piece_work(1, 8, 4096, 4096, 128, 128, True, 128, backward=True)[0] == 2.5 * windowed.flash_flops


def test_megatron_flops_and_memory_do_not_change():
    # Megatron-LM's num_floating_point_operations has no sliding-window term: the MFU's count stays the full one
    assert model_flops(job(SWA)) == model_flops(job(MODEL))
    # flash attention keeps no s x s scores, windowed or not; the unfused path materialises them either way
    assert estimate_memory(job(SWA), "H100").most_loaded.total_bytes == \
        estimate_memory(job(MODEL), "H100").most_loaded.total_bytes


def test_window_with_context_parallel_allgather():
    # Transformer Engine runs sliding windows under CP with all_gather or a2a: the pieces keep the window
    model = SWA.with_changes(num_layers=1)
    j = JobConfig(model, ParallelConfig(world_size=4, cp=4, global_batch=1),
                  TrainingConfig(seq_length=4096, computation_enable=True, cp_comm_type="allgather"))
    pieces = [i for i in MegatronWorkload(j).chunks[0].forward_items() if (i.meta or {}).get("op") == "attention"]
    p = Precision("bf16", 2)
    # CP rank 0's chunk 0 (512 x 512: 4 tiles of 1, 2, 2, 2 blocks: 7 - 2 = 5 blocks) and chunk 7 (6 blocks, above)
    assert [OPS["attention"](i, p)[0].flash_flops for i in pieces] == [2 * 8 * b * 128 * 128 * 256 for b in (5, 6)]


@pytest.mark.parametrize("flag, value", [("--window_size", "64,0"), ("--window_attn_skip_freq", "2")])
def test_flags_reach_the_model(flag, value):
    from utils.cli import parse_job

    base = ["--model_name", "gpt_tiny", "--world_size", "1", "--seq_length", "128", "--window_size", "64,0"]
    j, _ = parse_job(base + ([flag, value] if flag != "--window_size" else []), "t", "")
    assert j.model.attention_window(0) == 64
    assert j.model.attention_window(1) == (None if flag == "--window_attn_skip_freq" else 64)


def test_a_presets_window_survives_its_flags():
    """GPT-OSS's preset windows every other layer to 128 tokens: a job built from ``--model_name gpt_oss_120B`` (the
    flags' path, which the generators and the simulator take) keeps it unless ``--window_size`` says otherwise."""
    from utils.cli import parse_job

    base = ["--model_name", "gpt_oss_120B", "--world_size", "8", "--expert_model_parallel_size", "8",
            "--seq_length", "4096", "--global_batch", "8"]
    j, _ = parse_job(base, "t", "")
    assert [j.model.attention_window(layer) for layer in range(4)] == [128, None, 128, None]
    # the flags win: a 256-token window, full attention on every fourth layer (Megatron's skip frequency)
    j, _ = parse_job(base + ["--window_size", "256,0", "--window_attn_skip_freq", "4"], "t", "")
    assert [j.model.attention_window(layer) for layer in range(4)] == [256, 256, 256, None]

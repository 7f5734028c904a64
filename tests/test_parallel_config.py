"""Every layout rule, each with the message that names the flags and numbers."""

import pytest

from utils.config import JobConfig, TrainingConfig
from utils.errors import ConfigError
from utils.model_config import ModelConfig
from utils.parallel import ParallelConfig
from utils.presets import get_preset


def test_derived_sizes():
    # 64 GPUs, tp 4, pp 2 -> dp 8; global 128 / (micro 2 * dp 8) = 8 micro-batches
    p = ParallelConfig(world_size=64, tp=4, pp=2, micro_batch=2, global_batch=128)
    assert (p.dp, p.ga) == (8, 8)
    # no global batch: one micro-batch per replica
    assert ParallelConfig(world_size=8, tp=2).global_batch == 4
    # MoE: ep 4 of dp 8 leaves expert-data-parallel 2 (tp*cp*dp / (etp*ep) = 4*8/(4*4))
    p = ParallelConfig(world_size=64, tp=4, pp=2, ep=4, global_batch=8)
    assert p.expert_dp == 2
    # expert tensor parallelism 1: ep may span the TP ranks (tp 2 x dp 2 = 4 ranks = ep 4, edp 1)
    p = ParallelConfig(world_size=4, tp=2, ep=4, etp=1, global_batch=2)
    assert (p.dp, p.expert_dp) == (2, 1)
    assert p.group_ranks("ep_group") == [[0, 1, 2, 3]] and p.group_ranks("tp_group") == [[0, 1], [2, 3]]


def test_group_ranks_match_the_rank_generator():
    # world 16 = tp2 x dp4 x pp2, ep2: the worked example of the foundation issue
    p = ParallelConfig(world_size=16, tp=2, pp=2, ep=2, global_batch=4)
    assert p.group_ranks("ep_group") == [[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9, 11], [12, 14], [13, 15]]
    assert p.group_ranks("ep_dp_group") == [[0, 4], [1, 5], [2, 6], [3, 7], [8, 12], [9, 13], [10, 14], [11, 15]]
    assert p.group_ranks("ep_tp_group")[0] == [0, 1, 2, 3]
    assert p.group_ranks("embedding_group") == [[0, 8], [1, 9], [2, 10], [3, 11], [4, 12], [5, 13], [6, 14], [7, 15]]
    assert p.group_ranks("mp_group")[0] == [0, 1, 8, 9]
    assert p.group_ranks("all_nodes") == [list(range(16))]


@pytest.mark.parametrize("kwargs, message", [
    (dict(world_size=12, tp=8),
     "--world_size 12 is not divisible by --tensor_model_parallel_size 8 x --pipeline_model_parallel 1 x "
     "--context-parallel-size 1 = 8"),
    (dict(world_size=16, tp=2, pp=2, cp=2, ep=3),
     r"--expert_model_parallel_size 3 does not divide the data-parallel size 2"),
    (dict(world_size=16, tp=2, global_batch=12, micro_batch=2),
     r"--global_batch 12 is not divisible by --micro_batch 2 x data-parallel size 8 = 16"),
    (dict(world_size=8, pp=2, pp_rank=2), r"--pp_rank 2 is outside 0..1"),
    (dict(world_size=8, tp=0), "--tensor_model_parallel_size must be a positive integer, got 0"),
    (dict(world_size=8, micro_batch=-1), "--micro_batch must be a positive integer"),
    (dict(world_size=8, vpp_layers=2), r"--num_layers_per_virtual_pipeline_stage needs pipeline parallelism"),
    (dict(world_size=8, pp=4, vpp_layers=2, global_batch=6),
     r"needs the number of micro-batches 3 .* multiple of --pipeline_model_parallel 4"),
    (dict(world_size=24, tp=4, ep=16, etp=1, global_batch=6),
     r"--expert_tensor_parallel_size 1 x --expert_model_parallel_size 16 = 16 does not divide the 24 ranks"),
    # any etp Megatron accepts (etp x ep dividing the stage's tp x cp x dp ranks), not only 1 or tp
    (dict(world_size=24, tp=4, ep=8, etp=2, global_batch=6),
     r"--expert_tensor_parallel_size 2 x --expert_model_parallel_size 8 = 16 does not divide the 24 ranks"),
])
def test_layout_rules(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        ParallelConfig(**kwargs)


def test_sequence_parallel_without_tp_is_off():
    # Megatron turns sequence parallelism off when tp == 1
    assert ParallelConfig(world_size=4, sequence_parallel=True).sequence_parallel is False
    assert ParallelConfig(world_size=4, tp=2, sequence_parallel=True).sequence_parallel is True


def _job(model, seq=2048, dtype="bfloat16", **layout):
    layout.setdefault("world_size", 8)
    return JobConfig(model=model, parallel=ParallelConfig(**layout), training=TrainingConfig(seq_length=seq, dtype=dtype))


DENSE = ModelConfig(hidden_size=1024, num_layers=24, num_attention_heads=16)
MOE = ModelConfig(hidden_size=1024, num_layers=4, num_attention_heads=16, num_experts=8, moe_router_topk=2)


@pytest.mark.parametrize("model, layout, message", [
    (ModelConfig(hidden_size=960, num_attention_heads=12), dict(tp=8),
     "--num_attention_heads 12 is not divisible by --tensor_model_parallel_size 8"),
    (ModelConfig(num_attention_heads=16, num_query_groups=2), dict(tp=4),
     "--num_query_groups 2 is not divisible by --tensor_model_parallel_size 4"),
    (ModelConfig(num_attention_heads=16, num_query_groups=3), dict(),
     "--num_attention_heads 16 is not divisible by --num_query_groups 3"),
    (ModelConfig(hidden_size=1000, num_attention_heads=16), dict(),
     "--hidden_size 1000 is not divisible by --num_attention_heads 16"),
    (ModelConfig(ffn_hidden_size=1001), dict(tp=2), "--ffn_hidden_size 1001 is not divisible by"),
    (ModelConfig(num_layers=10), dict(pp=4, global_batch=4),
     "--num_layers 10 is not divisible by --pipeline_model_parallel 4"),
    (DENSE, dict(pp=2, vpp_layers=5, global_batch=8),
     "a pipeline stage holds 12 layers .* not divisible by --num_layers_per_virtual_pipeline_stage 5"),
    (DENSE, dict(ep=2), "--expert_model_parallel_size 2 needs an MoE model"),
    (MOE, dict(ep=16, world_size=16), "--num_experts 8 is not divisible by --expert_model_parallel_size 16"),
    (MOE, dict(tp=2), "MoE with --tensor_model_parallel_size 2 needs --enable_sequence_parallel"),
    (ModelConfig(num_experts=4, moe_router_topk=6, num_layers=4), dict(), "--moe_router_topk 6 exceeds --num_experts 4"),
])
def test_model_rules(model, layout, message):
    with pytest.raises(ConfigError, match=message):
        _job(model, **layout)


def test_sequence_rules():
    with pytest.raises(ConfigError, match="--seq_length 1001 is not divisible by --tensor_model_parallel_size 2"):
        _job(DENSE, seq=1001, tp=2, sequence_parallel=True)
    with pytest.raises(ConfigError, match="--seq_length 2050 is not divisible by 2 x --context-parallel-size 2"):
        _job(DENSE, seq=2050, cp=2)
    with pytest.raises(ConfigError, match="not supported with --dtype float16"):
        _job(MOE, dtype="float16", ep=2)


def test_uneven_pipeline_stages():
    # Llama 3 405B: 126 layers on 16 stages = 7 + 14 x 8 + 7
    model = get_preset("llama3_405B")
    job = _job(model, world_size=128, tp=8, pp=16, first_stage_layers=7, last_stage_layers=7, global_batch=16)
    assert job.stage_layers == [7] + [8] * 14 + [7]
    with pytest.raises(ConfigError, match="--num_layers 126 is not divisible by --pipeline_model_parallel 16"):
        _job(model, world_size=128, tp=8, pp=16, global_batch=16)
    with pytest.raises(ConfigError, match="leaves 118 layers, which do not split evenly over the other 15"):
        _job(model, world_size=128, tp=8, pp=16, first_stage_layers=8, global_batch=16)


def test_uneven_stages_with_interleaving():
    # Megatron core: the first and last stages' layers are cut into the same number of chunks as the
    # others.  126 layers on 16 stages, first 6 and last 8: the 14 middle stages hold 112 / 14 = 8;
    # 2 chunks per stage -> chunks of 3 (first stage), 4 (middle), 4 (last).  Virtual stage u = c*16 + r
    # holds layers after those of u - 1: a round of 16 virtual stages holds 3 + 14*4 + 4 = 63 layers.
    model = get_preset("llama3_405B")
    p = ParallelConfig(world_size=128, tp=8, pp=16, global_batch=16, first_stage_layers=6, last_stage_layers=8,
                       virtual_stages=2)
    counts = p.virtual_stage_layers(126)
    assert counts == ([3] + [4] * 14 + [4]) * 2 and sum(counts) == 126
    assert p.stage_layers(126) == [6] + [8] * 14 + [8] and p.chunks(126) == 2
    # the same with --num_layers_per_virtual_pipeline_stage 4: a middle stage's 8 layers / 4 = 2 chunks
    same = ParallelConfig(world_size=128, tp=8, pp=16, global_batch=16, first_stage_layers=6, last_stage_layers=8,
                          vpp_layers=4)
    assert same.virtual_stage_layers(126) == counts
    job = _job(model, world_size=128, tp=8, pp=16, first_stage_layers=6, last_stage_layers=8, virtual_stages=2,
               global_batch=16)
    from mocked_model.megatron import chunk_layout

    assert chunk_layout(job, 0) == [(0, 3, True, False), (63, 3, False, False)]
    assert chunk_layout(job, 1) == [(3, 4, False, False), (66, 4, False, False)]
    assert chunk_layout(job, 15) == [(59, 4, False, False), (122, 4, False, True)]
    # 7 and 7 (Llama 3's split) cannot be cut into 2 chunks each: Megatron asserts, so do we
    with pytest.raises(ConfigError, match="pipeline stage 0 holds 7 layers, not divisible by its 2 model chunks"):
        _job(model, world_size=128, tp=8, pp=16, first_stage_layers=7, last_stage_layers=7, virtual_stages=2,
             global_batch=16)


def test_embedding_and_loss_counted_in_the_split():
    # Llama 3 405B as its paper trains it: 126 layers plus embedding and loss = 128 slots, 8 per stage;
    # with 4 chunks per stage each virtual stage holds 2, except the first (embedding and 1 layer) and
    # the last (1 layer and the loss).  Offsets: u = 0 holds layer 0, u >= 1 starts at 2u - 1.
    model = get_preset("llama3_405B")
    job = _job(model, world_size=128, tp=8, pp=16, virtual_stages=4, embedding_in_split=True, loss_in_split=True,
               global_batch=16)
    counts = job.parallel.virtual_stage_layers(126)
    assert counts == [1] + [2] * 62 + [1]
    from mocked_model.megatron import chunk_layout

    assert chunk_layout(job, 0) == [(0, 1, True, False), (31, 2, False, False), (63, 2, False, False),
                                    (95, 2, False, False)]
    assert chunk_layout(job, 15) == [(29, 2, False, False), (61, 2, False, False), (93, 2, False, False),
                                     (125, 1, False, True)]
    # 8 chunks of one slot: the first virtual stage holds only the embedding, the last only the loss
    eight = _job(model, world_size=128, tp=8, pp=16, virtual_stages=8, embedding_in_split=True, loss_in_split=True,
                 global_batch=16)
    assert chunk_layout(eight, 0)[0] == (0, 0, True, False) and chunk_layout(eight, 15)[-1] == (126, 0, False, True)
    with pytest.raises(ConfigError, match="needs pipeline parallelism"):
        _job(model, world_size=8, tp=8, pp=1, embedding_in_split=True)
    with pytest.raises(ConfigError, match="plus the embedding \\(127\\) is not divisible by --pipeline_model_parallel 16"):
        _job(model, world_size=128, tp=8, pp=16, embedding_in_split=True, global_batch=16)


def test_padded_vocab():
    # GPT-2 vocabulary 50257 padded to a multiple of 128 * tp 8 = 1024 -> 51200
    job = _job(get_preset("gpt_13B"), world_size=8, tp=8)
    assert job.padded_vocab_size == 51200
    assert _job(get_preset("gpt_13B"), world_size=8).padded_vocab_size == 50304  # multiple of 128

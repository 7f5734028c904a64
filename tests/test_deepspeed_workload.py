"""DeepSpeed ZeRO workloads of a tiny LLaMA, item by item, derived by hand.

Model: hidden 8, 2 heads of 4 with 1 key/value head (grouped-query attention), FFN 16, vocabulary
32, 3 layers.  Job: 4 data-parallel ranks, sequence 16, micro-batch 1, bf16 (2 bytes);
reduce bucket 300 elements, all-gather bucket 1000 elements.

Parameters in registration order (elements):
  embed_tokens (32, 8)                           = 256
  per layer: input_layernorm 8, q_proj (8, 8) 64, k_proj (4, 8) 32, v_proj (4, 8) 32, o_proj (8, 8) 64,
             post_attention_layernorm 8, gate_proj (16, 8) 128, up_proj (16, 8) 128, down_proj (8, 16) 128
                                                 = 592 per layer, 1776 for 3
  norm 8, lm_head (32, 8) 256
  total N = 256 + 1776 + 8 + 256 = 2296 (every size is a multiple of dp 4: ZeRO-3 pads nothing)

ZeRO-1/2 flat buffer: 2296 is a multiple of 2 x dp = 8, so 4 partitions of 574:
  rank 0 [0, 574), rank 1 [574, 1148), rank 2 [1148, 1722), rank 3 [1722, 2296)
  offsets: embed 0; layer l at 256 + 592 l: in +0, q +8, k +72, v +104, o +136, post +200, gate +208,
  up +336, down +464; norm 2032; lm_head 2040.
"""

import pytest

from utils.config import JobConfig, TrainingConfig
from utils.errors import ConfigError
from utils.model_config import ModelConfig
from utils.parallel import ParallelConfig
from workload_generator.deepspeed import (
    DeepSpeedConfig,
    DeepSpeedZero3Workload,
    DeepSpeedZero12Workload,
    allgather_shards,
    deepspeed_workload,
)

MODEL = ModelConfig(name="tiny_llama", hidden_size=8, num_layers=3, num_attention_heads=2, num_query_groups=1,
                    ffn_hidden_size=16, vocab_size=32, max_position_embeddings=32, normalization="RMSNorm",
                    position_embedding_type="rope", swiglu=True, untie_embeddings_and_output_weights=True)
LAYER = [8, 64, 32, 32, 64, 8, 128, 128, 128]        # in, q, k, v, o, post, gate, up, down
NUMEL = [256] + LAYER * 3 + [8, 256]
assert sum(NUMEL) == 2296 and len(NUMEL) == 30


def job(stage, global_batch=8, epochs=1, compute=False, dtype="bfloat16", **flags):
    extra = {"stage": stage, "reduce_bucket_size": 300, "allgather_bucket_size": 1000, **flags}
    parallel = ParallelConfig(world_size=4, micro_batch=1, global_batch=global_batch)
    training = TrainingConfig(frame="DeepSpeed", seq_length=16, epoch_num=epochs, computation_enable=compute, dtype=dtype,
                              extra=extra)
    return JobConfig(MODEL, parallel, training)


def rows(items):
    return [(i.comm_type.value, i.msg_size, i.stage, i.dst) for i in items]


def run(stage, **kw):
    return rows(deepspeed_workload(job(stage, **kw))())


END = ("epoch_end", 0, "", None)
BCAST = [("broadcast", n * 2, "init._broadcast_model", None) for n in NUMEL]
GRAD_NORM_FP32 = ("all_reduce", 4, "step.get_grad_norm_direct", None)
# all_gather_dp_groups: partition 574, num_shards = max(1, 574 * 4 // 1000) = 2, shard 574 // 2 = 287
# rounded down to even = 286, last shard 574 - 286 = 288; each gathers shard x 4 ranks x 2 bytes.
PARAM_ALLGATHER = [("all_gather", 286 * 4 * 2, "step.all_gather_dp_groups", None),
                   ("all_gather", 288 * 4 * 2, "step.all_gather_dp_groups", None)]


def ar(n, stage="backward.reduce_ipg_grads"):
    return ("all_reduce", n * 2, stage, None)


def red(dst, n, stage="backward.reduce_ipg_grads"):
    return ("reduce", n * 2, stage, dst)


EPI12 = "backward.independent_gradient_partition_epilogue"

# ZeRO-2 walks the gradients in reverse (lm_head first), bucket 300:
#   lm 256, norm 8 -> 264; L2 down would make 392: reduce 264 | down 128, up -> 256; gate would make 384:
#   reduce 256 | gate 128, post 136, o 200, v 232, k 264; q would make 328: reduce 264 | q 64, in 72,
#   L1 down 200; L1 up -> 328: reduce 200 | up 128, gate 256, post 264; o -> 328: reduce 264 |
#   o 64, v 96, k 128, q 192, in 200; L0 down -> 328: reduce 200 | down 128, up 256; gate -> 384:
#   reduce 256 | gate 128, post 136, o 200, v 232, k 264; q -> 328: reduce 264 | q 64, in 72;
#   embed -> 328: reduce 72 | embed 256 left for the epilogue.  Sum 2296.
STAGE2_BUCKETS = [264, 256, 264, 200, 264, 200, 256, 264, 72]


def test_stage2_all_reduces_buckets_every_micro_batch():
    backward = [ar(n) for n in STAGE2_BUCKETS] + [ar(256, EPI12)]
    # 2 micro-batches (global 8 / (1 x dp 4)); no compute items; bf16: no overflow check
    expected = BCAST + [END] + backward + backward + [GRAD_NORM_FP32] + PARAM_ALLGATHER + [END]
    assert run(2) == expected
    assert sum(n for n in STAGE2_BUCKETS) + 256 == 2296


def test_stage2_contiguous_gradients_reduce_to_owners():
    # The same buckets; each owner's slices summed, destinations in order of first appearance:
    #   [lm, norm]: both in rank 3                               -> r3 264
    #   [L2 down, up] [1776, 2032): rank 3                       -> r3 256
    #   [L2 gate [1648,1776) = r2 74 + r3 54, post, o, v, k (r2)] -> r2 74+8+64+32+32 = 210, r3 54
    #   [L2 q, in, L1 down [1312,1440)]: rank 2                  -> r2 200
    #   [L1 up (r2 128), gate [1056,1184) = r1 92 + r2 36, post r1 8] -> r2 164, r1 100
    #   [L1 o, v, k, q, in]: rank 1                              -> r1 200
    #   [L0 down, up] [592, 848): rank 1                         -> r1 256
    #   [L0 gate [464,592) = r0 110 + r1 18, post, o, v, k (r0)]  -> r0 246, r1 18
    #   [L0 q, in]: rank 0                                       -> r0 72
    #   epilogue [embed]: rank 0                                 -> r0 256
    backward = [red(3, 264), red(3, 256), red(2, 210), red(3, 54), red(2, 200), red(2, 164), red(1, 100),
                red(1, 200), red(1, 256), red(0, 246), red(1, 18), red(0, 72), red(0, 256, EPI12)]
    assert sum(r[1] for r in backward) == 2296 * 2
    expected = BCAST + [END] + backward + backward + [GRAD_NORM_FP32] + PARAM_ALLGATHER + [END]
    assert run(2, contiguous_gradients=True) == expected


def test_stage1_reduces_once_after_the_last_micro_batch_in_registration_order():
    # ZeRO-1 (overlap_comm off) reduces in reduce_gradients after the last micro-batch, walking
    # embed first: embed 256, L0 in 264; q -> 328: reduce 264 | q 64, k 96, v 128, o 192, post 200;
    # gate -> 328: reduce 200 | gate 128, up 256; down -> 384: reduce 256 | down 128, L1 in 136,
    # q 200, k 232, v 264; o -> 328: reduce 264 | o 64, post 72, gate 200; up -> 328: reduce 200 |
    # up 128, down 256, L2 in 264; q -> 328: reduce 264 | q 64, k 96, v 128, o 192, post 200;
    # gate -> 328: reduce 200 | gate 128, up 256; down -> 384: reduce 256 | down 128, norm 136;
    # lm -> 392: reduce 136 | lm 256 for the epilogue.
    buckets = [264, 200, 256, 264, 200, 264, 200, 256, 136]
    assert sum(buckets) + 256 == 2296
    backward = [ar(n) for n in buckets] + [ar(256, EPI12)]
    # float16: the step starts with the 1-byte overflow all-reduce (dynamic loss scaling)
    step = [("all_reduce", 1, "step.has_overflow", None), GRAD_NORM_FP32] + PARAM_ALLGATHER
    assert run(1, dtype="float16") == BCAST + [END] + backward + step + [END]


def test_stage1_with_overlap_comm_reduces_from_the_last_backward_hooks():
    # overlap_comm: hooks in reverse order, only in the last micro-batch -> ZeRO-2's buckets once
    backward = [ar(n) for n in STAGE2_BUCKETS] + [ar(256, EPI12)]
    assert run(1, overlap_comm=True) == BCAST + [END] + backward + [GRAD_NORM_FP32] + PARAM_ALLGATHER + [END]


def test_amp_skips_the_broadcast_and_a_big_bucket_reduces_once():
    got = run(2, global_batch=4, amp_enabled=True, reduce_bucket_size=10_000, allgather_bucket_size=10_000)
    # one micro-batch; every gradient fits one bucket, reduced in the epilogue; 574 x 4 // 10000 = 0 -> 1 shard
    assert got == [END, ar(2296, EPI12), GRAD_NORM_FP32, ("all_gather", 574 * 4 * 2, "step.all_gather_dp_groups", None),
                   END]


def test_stage2_gradient_hooks_follow_the_module_gemms():
    items = deepspeed_workload(job(2, global_batch=4, compute=True))()
    stages = [i.stage for i in items]
    first = stages.index("backward.reduce_ipg_grads")
    # lm_head dgrad + wgrad, final norm, loss ... the first bucket closes when L2 down's gradient arrives,
    # right after its two GEMMs
    assert stages[first - 2:first] == ["backward.Linear.model.layers.2.mlp.down_proj"] * 2
    dgrad, wgrad = items[first - 2], items[first - 1]
    # down_proj: in 16, out 8, tokens 1 x 16: dgrad (1,16,8)x(8,16); wgrad (8,16)x(16,16); 2 x 16 x 16 x 8 FLOPs
    assert dgrad.shapes == ((1, 16, 8), (8, 16)) and wgrad.shapes == ((8, 16), (16, 16))
    assert dgrad.flops == wgrad.flops == 2 * 16 * 16 * 8


# ---- ZeRO-3 -------------------------------------------------------------------------------------------

FETCH_F, FETCH_B, PREFETCH_F = "forward.fetch_sub_module", "backward.fetch_sub_module", "forward.prefetch"
RS_STAGE, EPI3 = "backward.reduce_and_partition_ipg_grads", "backward.independent_gradient_partition_epilogue"


def ag(n, stage):
    return ("all_gather", n * 2, stage, None)


def rs(n, stage=RS_STAGE):
    return ("reduce_scatter", n * 2, stage, None)


INIT3 = (BCAST + [("broadcast", n * 2, "init._zero_init_param", None) for n in NUMEL]
         + [("barrier", 0, "init._create_fp16_partitions_with_defragmentation", None)]
         + [("barrier", 0, "init._setup_for_real_optimizer", None)] * 2
         + [ag(n, "init.create_reduce_and_remove_grad_hooks") for n in NUMEL] + [END])
GRAD_NORM_FP64 = ("all_reduce", 8, "step.get_grad_norm_direct", None)
FWD_ALL = [ag(n, FETCH_F) for n in NUMEL]
# Backward without prefetch: each module gathers its weight, then its gradient arrives; the
# reduce-scatter buckets are ZeRO-2's (same reverse order), each issued on the arrival that overflows.
BWD_ALL = [ag(256, FETCH_B), ag(8, FETCH_B),                                   # lm_head, norm
           ag(128, FETCH_B), rs(264), ag(128, FETCH_B), ag(128, FETCH_B), rs(256),  # L2 down, up, gate
           ag(8, FETCH_B), ag(64, FETCH_B), ag(32, FETCH_B), ag(32, FETCH_B), ag(64, FETCH_B), rs(264),  # post..q
           ag(8, FETCH_B), ag(128, FETCH_B), ag(128, FETCH_B), rs(200),         # L2 in, L1 down, up
           ag(128, FETCH_B), ag(8, FETCH_B), ag(64, FETCH_B), rs(264),          # L1 gate, post, o
           ag(32, FETCH_B), ag(32, FETCH_B), ag(64, FETCH_B), ag(8, FETCH_B), ag(128, FETCH_B), rs(200),  # v..L0 down
           ag(128, FETCH_B), ag(128, FETCH_B), rs(256),                         # L0 up, gate
           ag(8, FETCH_B), ag(64, FETCH_B), ag(32, FETCH_B), ag(32, FETCH_B), ag(64, FETCH_B), rs(264),  # post..q
           ag(8, FETCH_B), ag(256, FETCH_B), rs(72),                            # L0 in, embed
           rs(256, EPI3)]
NORMS = {1, 6, 10, 15, 19, 24, 28}                  # parameter indices of the 7 RMSNorm weights (8 elements)


def test_stage3_without_prefetch_gathers_before_every_use():
    # The first two micro-batches run before DeepSpeed completes its module trace: no prefetch, and
    # every parameter is released after use.  Only the embedding (its input, token ids, carries no
    # gradient) stays gathered after backward, so the second forward does not gather it again.
    expected = INIT3 + FWD_ALL + BWD_ALL + FWD_ALL[1:] + BWD_ALL + [GRAD_NORM_FP64, END]
    assert run(3, param_persistence_threshold=0) == expected


def test_stage3_persistent_parameters_stay_gathered_once_the_trace_is_complete():
    # threshold 8: the 7 norms persist.  One micro-batch per iteration, 3 iterations, no prefetch.
    no_norms_fwd = [r for i, r in enumerate(FWD_ALL) if i not in NORMS]
    no_norms_bwd = [r for r in BWD_ALL if r[1] != 16]        # the norms' 8 x 2-byte gathers
    post_step = [ag(8, "step._post_step")] * 7               # one all-gather per persistent parameter
    step = [GRAD_NORM_FP64] + post_step + [END]
    expected = (INIT3
                + FWD_ALL + BWD_ALL + step                      # pass 0: everything partitioned after init
                + no_norms_fwd + BWD_ALL + step                 # pass 1 (trace recording): norms released after forward
                + no_norms_fwd + no_norms_bwd + step)           # pass 2 (trace complete): norms never gathered
    assert run(3, global_batch=4, epochs=3, param_persistence_threshold=8, prefetch_bucket_size=0) == expected


def test_stage3_model_persistence_threshold_caps_the_persistent_total():
    # norms in registration order: L0 in, L0 post, L1 in, L1 post, L2 in = 40 elements; L2 post would
    # make 48 > 40 and the final norm too: 5 persistent parameters.
    got = run(3, global_batch=4, epochs=3, param_persistence_threshold=8, model_persistence_threshold=40,
              prefetch_bucket_size=0)
    assert got.count(ag(8, "step._post_step")) == 3 * 5
    third_forward = [r for r in got[len(INIT3):] if r[2].startswith("forward")][-25:]
    assert third_forward == [r for i, r in enumerate(FWD_ALL) if i not in {1, 6, 10, 15, 19}]


def test_stage3_prefetch_bucket():
    # Third micro-batch (trace complete), prefetch bucket 100, nothing persistent.  The queue holds the
    # forward uses (steps 0-29) then the backward ones (30 lm_head ... 59 embed).
    #   step 0 embed: fetch 256; prefetch L0 in 8, q 64, k 32 (104 >= 100)
    #   step 1 in: v, o, post (104); 2 q: gate 128; 3 k: up; 4 v: down
    #   steps 5-9 and 10-14 do the same for layers 1 and 2; 15 L1 post: norm 8 + lm_head 256 = 264
    #   step 16 L1 gate: the queue reaches backward entries whose parameters are gathered (lm_head,
    #     norm, layer 2, L1 down, up, gate): skipped but marked, so they are not released after their
    #     forward use; then L1 post, o, v (104), released earlier; 17: L1 k, q, in (104);
    #   18 L0 down; 19 up; 20 gate; 21 L0 post, o, v; 22 L0 k, q, in; 23 embed 256; queue empty.
    # lm_head's backward use is step 30 = its release step: released, so backward gathers it again.
    prefetch = [104, 104, 128, 128, 128] * 3 + [264, 104, 104, 128, 128, 128, 104, 104, 256]
    forward = [ag(256, FETCH_F)] + [ag(n, PREFETCH_F) for n in prefetch]
    backward = [ag(256, FETCH_B)] + [rs(n) for n in STAGE2_BUCKETS] + [rs(256, EPI3)]
    got = run(3, global_batch=4, epochs=3, param_persistence_threshold=0, prefetch_bucket_size=100)
    third = got[len(INIT3) + 2 * (len(FWD_ALL) + len(BWD_ALL) + 2):]
    assert third == forward + backward + [GRAD_NORM_FP64, END]
    # forward gathers each parameter once: 256 + 3 x 592 + 264 = 2296; plus 1056 ahead for backward
    assert sum(prefetch) + 256 == 2296 + (208 + 592 + 256)


def test_stage3_max_live_parameters_limits_the_prefetch():
    # max live 300, prefetch bucket 1000; counts in elements (gathered minus released):
    #   step 0: fetch embed (256), limit 300 - 256 = 44: L0 in 8, q 64 -> 72; release embed -> 72
    #   step 1: limit 228: k 32, v 32, o 64, post 8, gate 128 -> 264; live 336, release in -> 328
    #   step 2: limit -28: none, release q -> 264; step 3: limit 36: up 128; live 392, release k -> 360
    #   steps 4, 5: none (limits -60, -28), releases -> 264; step 6: limit 36: down 128 -> 392, -> 384
    #   step 7: none, release gate -> 256; step 8: limit 44: L1 in 8, q 64 = 72
    got = run(3, global_batch=4, epochs=3, param_persistence_threshold=0, max_live_parameters=300,
              prefetch_bucket_size=1000)
    third = got[len(INIT3) + 2 * (len(FWD_ALL) + len(BWD_ALL) + 2):]
    assert third[:6] == [ag(256, FETCH_F), ag(72, PREFETCH_F), ag(264, PREFETCH_F), ag(128, PREFETCH_F),
                         ag(128, PREFETCH_F), ag(72, PREFETCH_F)]


def test_stage3_computation_where_the_parameter_is_used():
    items = deepspeed_workload(job(3, global_batch=4, compute=True, param_persistence_threshold=0))()
    forward = [(i.comm_type.value, i.stage) for i in items if i.stage.startswith("forward")][:12]
    assert forward == [
        ("all_gather", FETCH_F), ("computation", "forward.Embedding.model.embed_tokens"),
        ("all_gather", FETCH_F), ("computation", "forward.LlamaRMSNorm.model.layers.0.input_layernorm"),
        ("all_gather", FETCH_F), ("computation", "forward.Linear.model.layers.0.self_attn.q_proj"),
        ("all_gather", FETCH_F), ("computation", "forward.Linear.model.layers.0.self_attn.k_proj"),
        ("all_gather", FETCH_F), ("computation", "forward.Linear.model.layers.0.self_attn.v_proj"),
        ("computation", "forward.CoreAttention.model.layers.0.self_attn"),
        ("all_gather", FETCH_F),
    ]
    k_proj = next(i for i in items if i.stage == "forward.Linear.model.layers.0.self_attn.k_proj")
    # grouped-query attention: k_proj maps hidden 8 to 1 head x 4; 2 x 16 tokens x 8 x 4 FLOPs
    assert k_proj.shapes == ((1, 16, 8), (8, 4)) and k_proj.flops == 2 * 16 * 8 * 4
    core = next(i for i in items if i.stage == "forward.CoreAttention.model.layers.0.self_attn")
    assert core.flops == 4 * 1 * 2 * 16 * 16 * 4      # 4 b heads s^2 head_dim


def test_stage3_padding_and_sub_groups():
    # dp 3 does not divide 32000-style sizes: a 256-element weight is gathered as 3 x ceil(256/3) = 258
    parallel = ParallelConfig(world_size=3, micro_batch=1, global_batch=3)
    training = TrainingConfig(frame="DeepSpeed", seq_length=16, extra={"stage": 3, "sub_group_size": 300})
    generator = DeepSpeedZero3Workload(JobConfig(MODEL, parallel, training))
    assert generator.padded([0]) == 258 and generator.padded([1]) == 9
    # partitions ceil(n/3): 86, then layer 0: 3, 22, 11, 11, 22, 3, 43, 43, 43 ... groups close at >= 300
    # 86+3+22+11+11+22+3+43+43+43 = 287, +3 (L1 in) = 290, +22 = 312 -> 1; L1 k.. 11+11+22+3+43+43+43+3+22+11+11
    # +22+3+43+43 = 334 -> 2 (at L2 up); L2 down 43 + norm 3 + lm 86 = 132 (last) -> 3
    assert generator.sub_groups == 3


def test_allgather_shards_align_to_two_elements():
    # partition 101 x 4 ranks // 100 = 4 shards of 101 // 4 = 25 -> 24 (even), the last 101 - 72 = 29
    assert allgather_shards(101, 4, 100) == [24, 24, 24, 29]
    assert allgather_shards(574, 4, 10**9) == [574]


@pytest.mark.parametrize("changes, message", [
    ({"stage": 4}, "--stage 4 is not a ZeRO stage"),
    ({"reduce_bucket_size": 0}, "--reduce_bucket_size must be a positive number of elements, got 0"),
    ({"allgather_bucket_size": 999}, "--allgather_bucket_size 999 must be a multiple of 2"),
    ({"prefetch_bucket_size": -1}, "--prefetch_bucket_size must be a number of elements >= 0, got -1"),
    ({"contiguous_gradients": "yes"}, "--contiguous_gradients is a switch"),
])
def test_config_errors_name_the_flag(changes, message):
    with pytest.raises(ConfigError, match=message):
        DeepSpeedConfig.from_values({"stage": 2, **changes})


def test_layout_and_stage_errors():
    parallel = ParallelConfig(world_size=4, tp=2, micro_batch=1, global_batch=2)
    bad = JobConfig(MODEL.with_changes(num_query_groups=2), parallel,
                    TrainingConfig(frame="DeepSpeed", seq_length=16, extra={"stage": 3}))
    with pytest.raises(ConfigError, match="pure data parallelism .*--tensor_model_parallel_size must be 1, got 2"):
        deepspeed_workload(bad)
    with pytest.raises(ConfigError, match="--stage 3 is not generated by DeepSpeedZero12Workload"):
        DeepSpeedZero12Workload(job(3))
    gpt = ModelConfig(name="gpt_13B", hidden_size=64, num_layers=2, num_attention_heads=4)
    with pytest.raises(ConfigError, match="mocks LLaMA .*--normalization LayerNorm"):
        deepspeed_workload(JobConfig(gpt, ParallelConfig(world_size=4, micro_batch=1, global_batch=4),
                                     TrainingConfig(frame="DeepSpeed", seq_length=16, extra={"stage": 1})))

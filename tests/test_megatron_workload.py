"""The Megatron workload of a tiny model, item by item, derived by hand.

Model: GPT-style, hidden 64, 4 heads, 2 layers, FFN 256, vocabulary 256, 32 learned positions,
LayerNorm, no biases, tied embeddings.  Job: world 8 = tp 2 x pp 2 x dp 2, sequence 32, micro-batch
1, global batch 4 -> 2 micro-batches per iteration; bf16.

Sizes (bytes):
  activation s*b*h*2            = 32*1*64*2 = 4096  (every TP collective)
  p2p activation                = 4096, or 2048 with SP (seq / tp)
  cross-entropy all-reduce      = s*b*4 = 128 (fp32, three of them)
  get_batch: tokens, labels, position ids s*b*8 = 256; loss mask s*b*4 = 128; attention mask s*s = 1024
Parameters per rank (elements):
  word embedding (vocab 256 / tp 2, 64) = 8192; positions (32, 64) = 2048
  layer: 2 LayerNorms 4*64 = 256; QKV (3*64/2, 64) = 6144; proj (64, 32) = 2048;
         fc1 (256/2, 64) = 8192; fc2 (64, 128) = 8192                       -> 24832
  stage 0 = 8192 + 2048 + 24832 = 35072;  stage 1 = 24832 + final LayerNorm 128 + tied output copy 8192 = 33152
"""

import pytest

from utils.config import JobConfig, TrainingConfig
from utils.model_config import ModelConfig
from utils.parallel import ParallelConfig
from workload_generator.megatron import MegatronWorkload

MODEL = ModelConfig(name="tiny", hidden_size=64, num_layers=2, num_attention_heads=4, ffn_hidden_size=256,
                    vocab_size=256, max_position_embeddings=32)


def job(sp=False, dist_opt=False, **training):
    parallel = ParallelConfig(world_size=8, tp=2, pp=2, sequence_parallel=sp, micro_batch=1, global_batch=4)
    return JobConfig(MODEL, parallel, TrainingConfig(seq_length=32, use_distributed_optimizer=dist_opt, **training))


def items(stage, **kw):
    workload = MegatronWorkload(job(**kw), pp_rank=stage)()
    return [(i.comm_type.value, i.comm_group.value if i.comm_group else None, i.msg_size, i.stage, i.additional or "")
            for i in workload]


def ar(n, stage, group="tp_group"):
    return ("all_reduce", group, n, stage, "")


def ag(n, stage):
    return ("all_gather", "tp_group", n, stage, "")


def rs(n, stage):
    return ("reduce_scatter", "tp_group", n, stage, "")


def bc(n):
    return ("broadcast", "tp_group", n, "forward_step.get_batch", "")


def p2p(kind, n, call, op):
    return (kind, "pp_group", n, call, op)


INIT_STAGE = [
    ("barrier", "all_nodes", 0, "init.compile_dependencies", ""),
    ("all_reduce", "all_nodes", 8, "init.start_time", ""),
    ("barrier", "all_nodes", 0, "init.print_datetime", ""),
    # tied embeddings on a 2-stage pipeline: word embedding shard synced in bf16: 8192 * 2
    ("all_reduce", "embedding_group", 16384, "init.setup_embeddings_and_output_layer", ""),
    ("barrier", "all_nodes", 0, "init.print_datetime", ""),
    ("barrier", "all_nodes", 0, "init.print_datetime", ""),
    ("epoch_end", None, 0, "", ""),
]
END = [("epoch_end", None, 0, "", "")]

# ---- without sequence parallelism ----------------------------------------------------------------
F0 = [bc(256), bc(1024), bc(256),                          # tokens, attention mask, position ids
      ar(4096, "forward.MegatronEmbedding"),
      ar(4096, "forward.MegatronRowLinear"), ar(4096, "forward.MegatronRowLinear")]       # proj, fc2
B0 = [ar(4096, "backward.MegatronColumnLinear"), ar(4096, "backward.MegatronColumnLinear")]  # fc1, qkv input grads
F1 = [bc(256), bc(128), bc(1024),                          # labels, loss mask, attention mask
      ar(4096, "forward.MegatronRowLinear"), ar(4096, "forward.MegatronRowLinear"),
      ar(128, "forward_step._VocabParallelCrossEntropy"), ar(128, "forward_step._VocabParallelCrossEntropy"),
      ar(128, "forward_step._VocabParallelCrossEntropy"), ar(8, "forward_step.loss_func", "dp_group")]
B1 = [ar(4096, "backward.MegatronOutputLayer"),            # output layer's input grad (copy_to_tp region)
      ar(4096, "backward.MegatronColumnLinear"), ar(4096, "backward.MegatronColumnLinear")]


def test_stage0_no_sp():
    # Rank 0 of 2 stages, 2 micro-batches: warm-up 1 forward, one 1F1B step, one cool-down backward.
    send = p2p("isend", 4096, "forward_step.send_forward", "send_next")
    exchange = [p2p("isend", 4096, "forward_step.send_forward_recv_backward", "send_next"),
                p2p("irecv", 4096, "forward_step.send_forward_recv_backward", "recv_next")]
    recv_grad = [p2p("irecv", 4096, "backward_step.recv_backward", "recv_next")]
    step = [ar(35072 * 4, "step.finish_grad_sync", "dp_group"),          # fp32 grads, one bucket
            ar(8192 * 4, "step._allreduce_word_embedding_grads", "embedding_group"),
            ar(4, "step.clip_grad_norm", "mp_group")]                    # fp32 norm over tp x pp
    expected = INIT_STAGE + F0 + [send] + F0 + exchange + B0 + recv_grad + B0 + step + END
    assert items(0) == expected


def test_stage1_no_sp():
    recv = [p2p("irecv", 4096, "forward_step.recv_forward", "recv_prev")]
    exchange = [p2p("isend", 4096, "backward_step.send_backward_recv_forward", "send_prev"),
                p2p("irecv", 4096, "backward_step.send_backward_recv_forward", "recv_prev")]
    send = [p2p("isend", 4096, "backward_step.send_backward", "send_prev")]
    step = [ar(33152 * 4, "step.finish_grad_sync", "dp_group"),
            ar(8192 * 4, "step._allreduce_word_embedding_grads", "embedding_group"),
            ar(4, "step.clip_grad_norm", "mp_group")]
    expected = INIT_STAGE + recv + F1 + B1 + exchange + F1 + B1 + send + step + END
    assert items(1) == expected


# ---- with sequence parallelism and the distributed optimizer ------------------------------------
SP_F0 = [bc(256), bc(1024), bc(256),
         # learned positions: all-reduce, then a local scatter to the sequence-parallel region
         ar(4096, "forward.MegatronEmbedding"),
         ag(4096, "forward.MegatronColumnLinear"), rs(4096, "forward.MegatronRowLinear"),     # attention
         ag(4096, "forward.MegatronColumnLinear"), rs(4096, "forward.MegatronRowLinear")]     # MLP
SP_B0 = [ag(4096, "backward.MegatronRowLinear"),                                   # fc2: grad of its reduce-scatter
         ag(4096, "backward.MegatronColumnLinear"), rs(4096, "backward.MegatronColumnLinear"),  # fc1
         ag(4096, "backward.MegatronRowLinear"),                                   # proj
         ag(4096, "backward.MegatronColumnLinear"), rs(4096, "backward.MegatronColumnLinear"),  # qkv
         ag(4096, "backward.MegatronEmbedding")]                                   # the scatter's backward


def test_stage0_sp_distributed_optimizer():
    send = p2p("isend", 2048, "forward_step.send_forward", "send_next")
    exchange = [p2p("isend", 2048, "forward_step.send_forward_recv_backward", "send_next"),
                p2p("irecv", 2048, "forward_step.send_forward_recv_backward", "recv_next")]
    recv_grad = [p2p("irecv", 2048, "backward_step.recv_backward", "recv_next")]
    # Buffer in reverse registration order: layer 0 (24832) and positions (2048) fill bucket 0 =
    # 26880 elements (a multiple of lcm(dp 2, 128)); the shared word embedding gets bucket 1 (8192).
    step = [("reduce_scatter", "dp_group", 26880 * 4, "step.finish_grad_sync", ""),
            ("reduce_scatter", "dp_group", 8192 * 4, "step.finish_grad_sync", ""),
            ar(256 * 4, "step._allreduce_layernorm_grads"),           # the layer's LayerNorm weights and biases
            ar(8192 * 4, "step._allreduce_word_embedding_grads", "embedding_group"),
            ar(4, "step.clip_grad_norm", "all_nodes"),                 # distributed optimizer: every rank
            ("all_gather", "dp_group", 26880 * 2, "step.param_all_gather", ""),   # bf16 parameters
            ("all_gather", "dp_group", 8192 * 2, "step.param_all_gather", "")]
    expected = INIT_STAGE + SP_F0 + [send] + SP_F0 + exchange + SP_B0 + recv_grad + SP_B0 + step + END
    assert items(0, sp=True, dist_opt=True) == expected


def test_stage1_sp():
    f1 = [bc(256), bc(128), bc(1024),
          ag(4096, "forward.MegatronColumnLinear"), rs(4096, "forward.MegatronRowLinear"),
          ag(4096, "forward.MegatronColumnLinear"), rs(4096, "forward.MegatronRowLinear"),
          ag(4096, "forward.MegatronOutputLayer"),                              # gather before the logits
          ar(128, "forward_step._VocabParallelCrossEntropy"), ar(128, "forward_step._VocabParallelCrossEntropy"),
          ar(128, "forward_step._VocabParallelCrossEntropy"), ar(8, "forward_step.loss_func", "dp_group")]
    b1 = [ag(4096, "backward.MegatronOutputLayer"), rs(4096, "backward.MegatronOutputLayer"),
          ag(4096, "backward.MegatronRowLinear"),
          ag(4096, "backward.MegatronColumnLinear"), rs(4096, "backward.MegatronColumnLinear"),
          ag(4096, "backward.MegatronRowLinear"),
          ag(4096, "backward.MegatronColumnLinear"), rs(4096, "backward.MegatronColumnLinear")]
    recv = [p2p("irecv", 2048, "forward_step.recv_forward", "recv_prev")]
    exchange = [p2p("isend", 2048, "backward_step.send_backward_recv_forward", "send_prev"),
                p2p("irecv", 2048, "backward_step.send_backward_recv_forward", "recv_prev")]
    send = [p2p("isend", 2048, "backward_step.send_backward", "send_prev")]
    # layer LayerNorms 256 + final LayerNorm 128 = 384 SP parameters; one fp32 bucket of 33152
    step = [ar(33152 * 4, "step.finish_grad_sync", "dp_group"), ar(384 * 4, "step._allreduce_layernorm_grads"),
            ar(8192 * 4, "step._allreduce_word_embedding_grads", "embedding_group"), ar(4, "step.clip_grad_norm", "mp_group")]
    assert items(1, sp=True) == INIT_STAGE + recv + f1 + b1 + exchange + f1 + b1 + send + step + END


def test_stage1_distributed_optimizer_buckets():
    # Reverse order starts with the tied output copy (shared embedding): its own bucket of 8192;
    # then final LayerNorm and layer 1: 128 + 24832 = 24960 = 195 x 128.
    step = [i for i in items(1, dist_opt=True) if i[3].startswith("step.")]
    assert step[:2] == [("reduce_scatter", "dp_group", 8192 * 4, "step.finish_grad_sync", ""),
                        ("reduce_scatter", "dp_group", 24960 * 4, "step.finish_grad_sync", "")]
    assert step[-2:] == [("all_gather", "dp_group", 8192 * 2, "step.param_all_gather", ""),
                         ("all_gather", "dp_group", 24960 * 2, "step.param_all_gather", "")]


def test_full_recompute_repeats_forward_collectives():
    # Full recomputation replays each layer's forward (two all-reduces) before its backward.
    got = items(0, recompute="full")
    backward_block = got[got.index(("irecv", "pp_group", 4096, "backward_step.recv_backward", "recv_next")) + 1:]
    assert backward_block[:4] == [ar(4096, "recompute.MegatronRowLinear"), ar(4096, "recompute.MegatronRowLinear"),
                                  ar(4096, "backward.MegatronColumnLinear"), ar(4096, "backward.MegatronColumnLinear")]


def test_overlap_grad_reduce_buckets_in_last_backward():
    # With --overlap_grad_reduce on pipeline rank 0 and a 10,000-element bucket: reverse order
    # fc2 8192 + fc1 8192 -> bucket 0 = 16384 closes when fc1's gradient is ready; proj 2048 + QKV
    # 6144 -> bucket 1 = 8192 (QKV); LayerNorms 256 + positions 2048 + word embedding 8192 -> 10496.
    parallel = ParallelConfig(world_size=8, tp=2, pp=2, micro_batch=1, global_batch=4)
    training = TrainingConfig(seq_length=32, overlap_grad_reduce=True, ddp_bucket_size=10_000)
    workload = MegatronWorkload(JobConfig(MODEL, parallel, training), pp_rank=0)()
    rows = [(i.comm_type.value, i.msg_size, i.stage) for i in workload if i.comm_group and i.comm_group.value != "pp_group"]
    it = rows[rows.index(("all_reduce", 8, "init.start_time")) + 1:]
    grads = [r for r in it if r[2] == "backward.overlap_grad_reduce"]
    assert grads == [("all_reduce", 16384 * 4, "backward.overlap_grad_reduce"),
                     ("all_reduce", 8192 * 4, "backward.overlap_grad_reduce"),
                     ("all_reduce", 10496 * 4, "backward.overlap_grad_reduce")]
    # bucket 0 right after fc1's backward (its input-grad all-reduce), only in the last micro-batch
    last_backward = [r[2] for r in it if r[2].startswith("backward")]
    assert last_backward[-5:] == ["backward.MegatronColumnLinear", "backward.overlap_grad_reduce",
                                  "backward.MegatronColumnLinear", "backward.overlap_grad_reduce",
                                  "backward.overlap_grad_reduce"]
    assert not any(r[2] == "step.finish_grad_sync" for r in it)


def test_any_rank_and_the_pipeline_view():
    from workload_generator.megatron import megatron_pipeline

    stages = megatron_pipeline(job())
    assert [w.rank for w in stages] == [0, 4]      # tp 0, dp 0 of each stage: pp stride tp*dp = 4
    assert [len(w) for w in stages] == [len(items(0)), len(items(1))]


@pytest.mark.parametrize("kw, training, message", [
    # context parallelism runs through Transformer Engine's attention (Megatron-core's local one asserts cp == 1)
    (dict(cp=2), dict(transformer_impl="local"), "--context-parallel-size 2 needs --transformer_impl transformer_engine"),
])
def test_unsupported(kw, training, message):
    from utils.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        parallel = ParallelConfig(world_size=8, tp=2, global_batch=2, **kw)
        MegatronWorkload(JobConfig(MODEL, parallel, TrainingConfig(seq_length=32, **training)))

"""MoE and DeepSeek workloads, derived by hand.

Tiny MoE: hidden 64, 4 heads, 2 MoE layers of 4 experts (top 2, expert FFN 128), RoPE, RMSNorm,
vocabulary 256, tied embeddings.  Job: world 8 = tp 2 x dp 4, ep 2 (expert-data-parallel 4/2 = 2),
sequence parallel, sequence 32, micro-batch 1, global batch 4 -> 1 micro-batch.

  tokens per rank T = 32 / tp 2 = 16; routed copies T x topk = 32
  all-to-all (balanced)  = 32 x 64 hidden x 2 bytes        = 4096
  probabilities' all-to-all = 32 x 2 bytes (bf16 logits)  = 64
  expert-TP all-gather    = etp 2 x received 32 x 64 x 2    = 8192 (probabilities: 2 x 32 x 2 = 128)
  count all-gather (ETP x EP = 4 ranks) = 4 x 4 experts x 8 bytes (int64) = 128
  TP activation           = 32 x 1 x 64 x 2                 = 4096
No aux loss (Megatron's --moe_aux_loss_coeff defaults to 0), so no count all-reduce over TP.
"""

import pytest

from mocked_model.counting import model_param_count
from mocked_model.routing import expert_shares, route
from tests.conftest import run_cli
from utils.config import JobConfig, TrainingConfig
from utils.model_config import ModelConfig
from utils.parallel import ParallelConfig
from utils.presets import PRESETS, get_preset
from utils.workload import Workload
from workload_generator.megatron import MegatronWorkload

MOE = ModelConfig(name="tiny_moe", hidden_size=64, num_layers=2, num_attention_heads=4, ffn_hidden_size=128,
                  vocab_size=256, normalization="RMSNorm", position_embedding_type="rope", num_experts=4,
                  moe_router_topk=2, moe_ffn_hidden_size=128)


def rows(model=MOE, world=8, tp=2, ep=2, **training):
    parallel = ParallelConfig(world_size=world, tp=tp, ep=ep, sequence_parallel=True, micro_batch=1, global_batch=4)
    workload = MegatronWorkload(JobConfig(model, parallel, TrainingConfig(seq_length=32, **training)))()
    return [(i.comm_type.value, i.comm_group.value if i.comm_group else None, i.comm_group_size, i.msg_size, i.stage)
            for i in workload]


def tp(kind, n, stage):
    return (kind, "tp_group", 2, n, stage)


def ep(kind, n, stage):
    return (kind, "ep_group", 2, n, stage)


A2A_F, A2A_B = "forward.MoEAlltoAllTokenDispatcher", "backward.MoEAlltoAllTokenDispatcher"
LAYER_F = [tp("all_gather", 4096, "forward.MegatronColumnLinear"), tp("reduce_scatter", 4096, "forward.MegatronRowLinear"),
           ("all_gather", "ep_tp_group", 4, 128, A2A_F), ep("all_to_all", 4096, A2A_F), ep("all_to_all", 64, A2A_F),
           tp("all_gather", 8192, A2A_F), tp("all_gather", 128, A2A_F),                                # dispatch
           tp("reduce_scatter", 8192, A2A_F), ep("all_to_all", 4096, A2A_F)]                            # combine
LAYER_B = [ep("all_to_all", 4096, A2A_B), tp("all_gather", 8192, A2A_B),        # combine's backward
           tp("reduce_scatter", 8192, A2A_B), tp("reduce_scatter", 128, A2A_B),  # dispatch's backward
           ep("all_to_all", 4096, A2A_B), ep("all_to_all", 64, A2A_B),
           tp("all_gather", 4096, "backward.MegatronRowLinear"),                 # attention projection
           tp("all_gather", 4096, "backward.MegatronColumnLinear"), tp("reduce_scatter", 4096, "backward.MegatronColumnLinear")]


def test_tiny_moe_item_by_item():
    init = [("barrier", "all_nodes", 8, 0, "init.compile_dependencies"), ("all_reduce", "all_nodes", 8, 8, "init.start_time"),
            ("barrier", "all_nodes", 8, 0, "init.print_datetime"), ("barrier", "all_nodes", 8, 0, "init.print_datetime"),
            ("barrier", "all_nodes", 8, 0, "init.print_datetime"), ("epoch_end", None, None, 0, "")]
    batch = [tp("broadcast", n, "forward_step.get_batch") for n in (256, 256, 128, 1024, 256)]
    forward = (batch + [tp("reduce_scatter", 4096, "forward.MegatronEmbedding")] + LAYER_F + LAYER_F
               + [tp("all_gather", 4096, "forward.MegatronOutputLayer")]
               + [tp("all_reduce", 128, "forward_step._VocabParallelCrossEntropy")] * 3
               + [("all_reduce", "dp_group", 4, 8, "forward_step.loss_func")])
    backward = ([tp("all_gather", 4096, "backward.MegatronOutputLayer"),
                 tp("reduce_scatter", 4096, "backward.MegatronOutputLayer")]
                + LAYER_B + LAYER_B + [tp("all_gather", 4096, "backward.MegatronEmbedding")])
    # Dense buffer: word embedding 128 x 64 = 8192; per layer 2 RMSNorms 128, QKV 96 x 64 = 6144,
    # projection 64 x 32 = 2048, router 4 x 64 = 256 -> 8576, two layers 17152; final norm 64 -> 25408.
    # Expert buffer: per layer 2 local experts x (fc1 64 x 64 + fc2 64 x 64) = 16384, two layers 32768.
    # SP-replicated parameters: norms 2 x 128 + 64 and routers 2 x 256 = 832.
    step = [("all_reduce", "dp_group", 4, 25408 * 4, "step.finish_grad_sync"),
            ("all_reduce", "ep_dp_group", 2, 32768 * 4, "step.finish_grad_sync"),
            ("all_reduce", "tp_group", 2, 832 * 4, "step._allreduce_layernorm_grads"),
            ("all_reduce", "mp_group", 2, 4, "step.clip_grad_norm")]
    assert rows() == init + forward + backward + step + [("epoch_end", None, None, 0, "")]


def test_distributed_optimizer_splits_dense_and_expert_groups():
    got = [r for r in rows(use_distributed_optimizer=True) if r[4] in ("step.finish_grad_sync", "step.param_all_gather")]
    # dense buffer padded to lcm(dp 4, 128) = 128: 25408 -> 25472; experts to lcm(edp 2, 128): 32768
    assert got == [("reduce_scatter", "dp_group", 4, 25472 * 4, "step.finish_grad_sync"),
                   ("reduce_scatter", "ep_dp_group", 2, 32768 * 4, "step.finish_grad_sync"),
                   ("all_gather", "dp_group", 4, 25472 * 2, "step.param_all_gather"),
                   ("all_gather", "ep_dp_group", 2, 32768 * 2, "step.param_all_gather")]


def test_skewed_routing_by_hand():
    # s = 1: shares 1 : 1/2 : 1/3 : 1/4 over 25/12 -> 0.48, 0.24, 0.16, 0.12 of 32 copies
    # = 15.36, 7.68, 5.12, 3.84 -> 15, 8, 5, 4 (largest remainders .84 and .68 round up)
    r = route(16, 4, 2, 2, skew=1.0)
    assert r.per_expert == (15, 8, 5, 4)
    # EP rank 0 holds experts 0 and 1: 2 source ranks x (15 + 8) = 46 tokens in; rank 1 2 x 9 = 18
    assert r.recv_tokens == (46, 18) and r.send_tokens == 32 and r.busiest_tokens == 46
    # s = 2: expert 0 is capped at 1/topk = 0.5; the rest share 1/4 : 1/9 : 1/16 of the other half
    assert expert_shares(4, 2, 2.0)[0] == pytest.approx(0.5)
    assert route(16, 4, 2, 2, skew=2.0).per_expert == (16, 10, 4, 2)
    # balanced: 8 each, 32 in and out of every rank
    assert route(16, 4, 2, 2).recv_tokens == (32, 32)


def test_capacity_factor():
    # capacity = ceil(16 x 2 / 4 x 1.0) = 8: 15, 8, 5, 4 -> 8, 8, 5, 4 (7 dropped); padding fills all to 8
    r = route(16, 4, 2, 2, skew=1.0, capacity_factor=1.0)
    assert (r.per_expert, r.dropped, r.recv_tokens, r.send_tokens) == ((8, 8, 5, 4), 7, (32, 18), 25)
    assert route(16, 4, 2, 2, skew=1.0, capacity_factor=1.0, pad_to_capacity=True).per_expert == (8, 8, 8, 8)


def test_skew_raises_the_busiest_dispatch():
    got = rows(moe_routing_skew=1.0)
    a2a = {r[3] for r in got if r[0] == "all_to_all"}
    gather = {r[3] for r in got if r[4] == A2A_F and r[0] == "all_gather" and r[1] == "tp_group"}
    # the busiest rank moves 46 tokens: 46 x 64 x 2 = 5888 bytes (balanced: 4096), their probabilities 46 x 2 = 92;
    # its expert-TP gather 2 x 46 x 64 x 2 = 11776 (probabilities 2 x 46 x 2 = 184)
    assert a2a == {5888, 92} and gather == {11776, 184}


def test_allgather_dispatcher():
    got = [r for r in rows(moe_token_dispatcher_type="allgather") if "Dispatcher" in r[4]]
    g = "ep_tp_group"
    # token_dispatch gathers over tp x ep = 4 ranks the routing map 16 x 4 x 4 experts (bool) = 256, the probabilities
    # in the logits' bf16 16 x 4 x 4 x 2 = 512 and the hidden states 16 x 4 x 64 x 2 = 8192; combine reduce-scatters
    # the outputs in the probabilities' dtype (bf16): 8192
    fwd = [("all_gather", g, 4, 256, "forward.MoEAllGatherTokenDispatcher"),
           ("all_gather", g, 4, 512, "forward.MoEAllGatherTokenDispatcher"),
           ("all_gather", g, 4, 8192, "forward.MoEAllGatherTokenDispatcher"),
           ("reduce_scatter", g, 4, 8192, "forward.MoEAllGatherTokenDispatcher")]
    bwd = [("all_gather", g, 4, 8192, "backward.MoEAllGatherTokenDispatcher"),
           ("reduce_scatter", g, 4, 8192, "backward.MoEAllGatherTokenDispatcher"),
           ("reduce_scatter", g, 4, 512, "backward.MoEAllGatherTokenDispatcher")]
    assert got == fwd + fwd + bwd + bwd


def test_fp8_dispatch_sizes():
    # FP8: 64 bytes per token plus one fp32 scale per 128 values (ceil(64/128) = 1) = 68 bytes; 32 x 68 = 2176
    got = rows(moe_fp8_dispatch=True)
    fwd = [r[3] for r in got if r[0] == "all_to_all" and r[4] == A2A_F]
    assert fwd == [2176, 64, 4096, 2176, 64, 4096]  # dispatch in FP8 (probabilities 32 x 2), combine in bf16
    assert {r[3] for r in got if r[0] == "all_to_all" and r[4] == A2A_B} == {4096, 64}


def test_expert_computation_items():
    parallel = ParallelConfig(world_size=8, tp=2, ep=2, sequence_parallel=True, global_batch=4)
    for grouped, expected in ((False, [((32, 64), (64, 64))] * 2), (True, [((64, 64), (2, 64, 64))])):
        training = TrainingConfig(seq_length=32, computation_enable=True, moe_grouped_gemm=grouped)
        w = MegatronWorkload(JobConfig(MOE, parallel, training))()
        fc1 = [i for i in w if i.stage == "forward.MoEExperts.layers.0.mlp.experts.fc1"]
        # each local expert sees 2 (etp) x 2 (ep) x 8 = 32 tokens; fc1 64 (FFN 128 / etp 2) x 64 hidden
        assert [i.shapes for i in fc1] == expected
        assert sum(i.flops for i in fc1) == 2 * 64 * 64 * 64


def test_mixtral_command_writes_all_to_alls(tmp_path):
    out = tmp_path / "m.csv"
    proc = run_cli("-m", "workload_generator.generate_megatron_workload", "--frame", "Megatron", "--model_name",
                   "Mixtral_8x7B", "--world_size", "64", "--tensor_model_parallel_size", "2",
                   "--expert_model_parallel_size", "8", "--num_experts", "8", "--moe_router_topk", "2", "--moe_enable",
                   "--enable_sequence_parallel", "--use-distributed-optimizer", "--global_batch", "64", "--micro_batch",
                   "1", "--seq_length", "2048", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    a2a = [i for i in Workload.load(out) if i.comm_type.value == "all_to_all"]
    # per micro-batch and layer: dispatch (tokens and probabilities) and combine forward, their mirrors backward;
    # 32 layers, global 64 / (micro 1 x dp 32) = 2 micro-batches -> 192 forward and 192 backward
    # size: 2048 / tp 2 = 1024 tokens x top 2 x 4096 hidden x 2 bytes = 16777216; probabilities 2048 x 2 = 4096
    assert sum(i.stage.startswith("forward") for i in a2a) == 192
    assert sum(i.stage.startswith("backward") for i in a2a) == 192
    assert {(i.comm_group.value, i.comm_group_size, i.msg_size) for i in a2a} == {("ep_group", 8, 16777216),
                                                                                  ("ep_group", 8, 4096)}


def test_deepseek_generation_without_compute_file(tmp_path):
    out = tmp_path / "d.csv"
    proc = run_cli("-m", "workload_generator.generate_megatron_workload", "--frame", "DeepSeek", "-m", "deepseek16",
                   "--world_size", "16", "--tensor_model_parallel_size", "2", "--expert_model_parallel_size", "8",
                   "--enable_sequence_parallel", "--global_batch", "8", "--seq_length", "1024", "--num_layers", "2",
                   "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    items = Workload.load(out).iterations()[1]
    mla = [(i.comm_type.value, i.msg_size) for i in items if i.stage == "forward.MegatronColumnLinear"]
    # DeepSeek-V2-Lite has no q_lora_rank: the query projection gathers the hidden state
    # (1024 x 2048 x 2 = 4194304), the KV up projection the compressed KV (1024 x 512 x 2 = 1048576)
    assert mla[:2] == [("all_gather", 4194304), ("all_gather", 1048576)]
    # the rotary key part (64 per token) is gathered too: 1024 x 64 x 2 = 131072
    assert ("all_gather", 131072) in [(i.comm_type.value, i.msg_size) for i in items if i.stage == "forward.MLASelfAttention"]
    # layer 0 is dense (n_dense_layers 1); layer 1 MoE with 64 experts, top 6: 512 tokens x 6 x 2048 x 2
    a2a = {i.msg_size for i in items if i.comm_type.value == "all_to_all"}
    assert a2a == {512 * 6 * 2048 * 2, 512 * 6 * 2}  # tokens and their bf16 probabilities


@pytest.mark.parametrize("name", [n for n, m in PRESETS.items() if m.is_moe])
def test_moe_presets_match_published_totals(name):
    # e.g. DeepSeek-V3: per layer MLA 187.1e6 (q down 7168x1536, q up 1536x128x192, kv down 7168x576,
    # kv up 512x128x256, output 128x128x7168); 58 MoE layers x 257 experts x 3 x 7168 x 2048 = 656.5e9;
    # 3 dense layers x 3 x 7168 x 18432 = 1.19e9; embeddings 2 x 129280 x 7168 = 1.85e9 -> 671.0e9
    # the published totals leave out multi-token prediction (DeepSeek-V3: 671B without its MTP module)
    model = get_preset(name).with_changes(mtp_num_layers=0)
    ep = 8 if model.num_experts % 8 == 0 else 2
    job = JobConfig(model, ParallelConfig(world_size=2 * ep, tp=2, ep=ep, sequence_parallel=True),
                    TrainingConfig(seq_length=4096))
    assert model_param_count(job) == pytest.approx(model.published_params, rel=0.01)


def test_expert_tensor_parallel_one():
    # etp 1 on tp 2: no expert-TP gather; ep 4 spans both TP ranks of 2 DP replicas; expert-DP =
    # tp 2 x dp 4 / ep 4 = 2
    parallel = ParallelConfig(world_size=8, tp=2, ep=4, etp=1, sequence_parallel=True, global_batch=4)
    w = MegatronWorkload(JobConfig(MOE.with_changes(num_experts=4), parallel, TrainingConfig(seq_length=32)))()
    dispatch = [(i.comm_type.value, i.comm_group.value, i.comm_group_size) for i in w if i.stage == A2A_F]
    assert dispatch == [("all_gather", "ep_group", 4), ("all_to_all", "ep_group", 4), ("all_to_all", "ep_group", 4),
                        ("all_to_all", "ep_group", 4)] * 2  # counts, tokens, probabilities; combine
    assert parallel.expert_dp == 2

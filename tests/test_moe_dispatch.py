"""MoE as Megatron-core runs it, by hand: dispatch sizes under imbalance, the permutations' kernels, grouped GEMMs
of uneven experts, DeepEP's deduplicated rows, the 1F1B all-to-all overlap, expert-TP groups, and the bad inputs.

Tiny MoE (as tests/test_moe_workload.py): hidden 64, 4 heads, 2 MoE layers of 4 experts (top 2, FFN 128); world 8 =
tp 2 x dp 4, ep 2, sequence parallel, sequence 32: T = 32 / tp 2 = 16 tokens per rank, 32 routed copies.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from mocked_model.compute.gpus import gpu_spec
from mocked_model.compute.grouped import grouped_gemm_ns
from mocked_model.compute.kernels import GEMM_T0_NS, GemmShape
from mocked_model.compute.moe_ops import permute_kernels, unpermute_kernels
from mocked_model.compute.ops import Precision
from mocked_model.moe_dispatch import deepep_traffic, miss_probability
from mocked_model.routing import expert_shares, route
from simulator.topo.moe_overlap import _slowed, pair_time, pairs
from simulator.topo.programs import StageScript
from tests.conftest import ROOT, run_cli
from utils.config import JobConfig, TrainingConfig
from utils.errors import ConfigError
from utils.model_config import ModelConfig
from utils.parallel import ParallelConfig
from utils.workload import CommType, WorkItem
from workload_generator.megatron import MegatronWorkload
from workload_generator.schedules import pipeline_schedule

MOE = ModelConfig(name="tiny_moe", hidden_size=64, num_layers=2, num_attention_heads=4, ffn_hidden_size=128,
                  vocab_size=256, normalization="RMSNorm", position_embedding_type="rope", num_experts=4,
                  moe_router_topk=2, moe_ffn_hidden_size=128)
H100 = gpu_spec("H100")


def workload(model=MOE, world=8, tp=2, ep=2, etp=None, **training):
    parallel = ParallelConfig(world_size=world, tp=tp, ep=ep, etp=etp, sequence_parallel=tp > 1, micro_batch=1,
                              global_batch=world // tp)
    return MegatronWorkload(JobConfig(model, parallel, TrainingConfig(seq_length=32, **training)))()


# ---- routing under imbalance ------------------------------------------------------------------------

def test_top_k_router_dispatch_sizes_under_imbalance():
    # --moe_imbalance 1.5: expert 0 takes 1.5 / 4 = 0.375 of the 32 copies = 12; the other three share 0.625:
    # 6.667 each -> 6, 6, 6 + the 2 left by largest remainder (ties to the lower index) -> 12, 7, 7, 6
    assert expert_shares(4, 2, 0.0, 1.5) == pytest.approx([0.375, 0.625 / 3, 0.625 / 3, 0.625 / 3])
    r = route(16, 4, 2, 2, imbalance=1.5)
    assert r.per_expert == (12, 7, 7, 6)
    # EP rank 0 (experts 0, 1) receives 2 sources x 19 = 38 copies, rank 1 2 x 13 = 26; each rank sends 32
    assert (r.recv_tokens, r.send_tokens, r.busiest_tokens) == ((38, 26), 32, 38)
    items = workload(moe_imbalance=1.5, computation_enable=True)
    a2a = {i.msg_size for i in items if i.comm_type == CommType.all_to_all}
    # the busiest rank's all-to-alls: 38 x 64 hidden x 2 bytes = 4864; its probabilities 38 x 2 (bf16) = 76
    assert a2a == {4864, 76}
    fc1 = [i for i in items if i.stage == "forward.MoEExperts.layers.0.mlp.experts.fc1"]
    # its experts see etp 2 x ep 2 x (12, 7) = (48, 28) tokens: one GEMM each (no grouped GEMM)
    assert [i.shapes[0][0] for i in fc1] == [48, 28]


def test_imbalance_caps_at_one_over_topk():
    # imbalance 3 on 4 experts, top 2: 3/4 exceeds the cap 1/2, so expert 0 takes half, the rest 1/6 each
    assert expert_shares(4, 2, 0.0, 3.0) == pytest.approx([0.5, 1 / 6, 1 / 6, 1 / 6])


def test_imbalance_with_skew_keeps_the_zipf_shape_of_the_rest():
    # skew 1: the other 3 experts keep their Zipf weights 1/2 : 1/3 : 1/4 (of 13/12) -> 6/13, 4/13, 3/13 of
    # the 1 - 0.375 the hot expert leaves
    got = expert_shares(4, 2, 1.0, 1.5)
    assert got == pytest.approx([0.375, 0.625 * 6 / 13, 0.625 * 4 / 13, 0.625 * 3 / 13])


def test_router_items_follow_megatron():
    items = workload(moe_aux_loss_coeff=0.01, moe_z_loss_coeff=0.001, moe_router_dtype="fp32", computation_enable=True)
    router = [i for i in items if i.stage.startswith("forward.MoERouter") and (i.meta or {}).get("layer") == 0]
    # the gating GEMM (logits in fp32), the route item (score, top-k, aux loss, z-loss), and the aux loss's
    # per-expert counts all-reduced over TP: 4 experts x 8 bytes (int64)
    assert [(i.comm_type.value, (i.meta or {}).get("op")) for i in router] == [
        ("computation", "gemm"), ("computation", "moe_route"), ("all_reduce", "comm")]
    assert router[2].msg_size == 32
    route_meta = router[1].meta
    assert (route_meta["aux"], route_meta["z_loss"], route_meta["probs_bytes"]) == ("aux_loss", True, 4)
    # no coefficient, no loss and no all-reduce (Megatron's default --moe_aux_loss_coeff 0)
    assert not [i for i in workload() if i.stage.startswith("forward.MoERouter") and not i.is_computation]


# ---- the permutations' kernels ------------------------------------------------------------------------

def _item(op, shapes, phase="forward", **meta):
    return WorkItem(CommType.computation, stage=f"{phase}.x", shapes=shapes, meta={"op": op, **meta})


def test_fused_permute_and_unpermute_bytes_and_times_by_hand():
    p = Precision("bf16", 2)
    T, H, R, E = 4096, 2048, 32768, 128  # Qwen3-30B-A3B: 4096 tokens, top 8 -> 32768 copies of 2048 values
    permute = permute_kernels(_item("moe_permute", ((T, H), (R, H)), fused=True, experts=E, probs_bytes=2), p)
    # the row-id map: 4096 x 128 x (1 + 4 + 4) = 4,718,592 B in 3 kernels; the permute reads and writes every
    # copy 32768 x 2048 x 2 x 2 = 268,435,456 B, and its probability 32768 x 2 x 2 = 131,072 B
    assert [(k.nbytes, k.count, k.kind) for k in permute] == [(4718592, 3, "copy"), (268566528, 1, "copy")]
    # H100: 3.35 TB/s x 0.81 (copy) = 2.7135e12 B/s, 3 us per kernel:
    # 4 x 3000 ns + (4,718,592 + 268,566,528) / 2.7135e12 s = 12,000 + 100,713.5 ns
    ns = sum(k.ns(H100) for k in permute)
    assert ns == pytest.approx(4 * 3000 + (4718592 + 268566528) / 2.7135e12 * 1e9)
    unpermute = unpermute_kernels(_item("moe_unpermute", ((R, H), (T, H)), fused=True), p)
    # read the copies 32768 x 4096 = 134,217,728 B, write the tokens 4096 x 4096 = 16,777,216 B (stream rate)
    assert [(k.nbytes, k.count) for k in unpermute] == [(134217728 + 16777216, 1)]
    assert unpermute[0].ns(H100) == pytest.approx(3000 + 150994944 / 2.7135e12 * 1e9)


def test_eager_permute_costs_more_kernels_than_the_fused_one():
    p = Precision("bf16", 2)
    eager = permute_kernels(_item("moe_permute", ((4096, 2048), (32768, 2048)), fused=False, experts=128), p)
    # transpose 1, argsort 6, row indices 2, probabilities 2, index_select 1 = 12 launches
    assert sum(k.count for k in eager) == 12
    # the tokens' gather alone: 32768 x (2048 x 2 x 2 + 8 index bytes) = 268,697,600 B
    assert eager[-1].nbytes == 32768 * (2048 * 4 + 8)
    backward = permute_kernels(_item("moe_permute", ((4096, 2048), (32768, 2048)), "backward", fused=False,
                                     experts=128, probs_bytes=2), p)
    # zeros and index_add_ on the tokens 4096 x 4096 x 2 = 33,554,432, the copies read 32768 x 4096 = 134,217,728
    # and their indices 32768 x 8 = 262,144: 168,034,304 B; probabilities' gradient 4096 x 128 x 2 x 2 + 32768 x
    # (2 + 8) = 2,424,832 B
    assert [k.nbytes for k in backward] == [168034304, 2424832]


# ---- grouped GEMMs of uneven experts -------------------------------------------------------------------

def test_grouped_gemm_of_uneven_experts_by_hand():
    # experts of 300, 100 and 0 tokens, n 256, k 512, bf16 on H100 (132 SMs).  Tiles over the sum of the experts:
    # 256x128 -> 4 + 2 = 6 tiles, 128x128 -> 6 + 2 = 8, 64x64 -> 5x4 + 2x4 = 28, ... all in one wave; the
    # cheapest is 64x64 at 0.75 of the main-loop rate: 2 x 64 x 64 x (512 + 64) / (5.674250e12 x 0.75) = 1108.8 ns;
    # the operands and results of the two non-empty experts, (300 x 512 + 512 x 256 + 300 x 256) x 2 + (100 x 512 +
    # 512 x 256 + 100 x 256) x 2 = 1,138,688 B at 3.35e12 x 0.91 B/s = 373.5 ns, are 0.337 of it: the smooth
    # maximum (c^4 + m^4)^(1/4) adds 1108.8 x 0.337^4 / 4 = 3.6 ns.  Each non-empty expert is its own cuBLAS kernel
    # (Transformer Engine's multi-stream GroupedLinear) and pays T0: 2 x 5.5 us; the empty expert costs nothing
    group = ((300, 256, 512), (100, 256, 512), (0, 256, 512))
    shape = GemmShape(400, 256, 512)
    per_sm = H100.tensor_flops("bf16") * H100.gemm_efficiency("bf16") / H100.sms
    compute = 2 * 64 * 64 * (512 + 64) / (per_sm * 0.75)
    memory = 1_138_688 / (3.35e12 * 0.91)
    assert (compute * 1e9, memory * 1e9) == pytest.approx((1108.8, 373.5), abs=0.1)
    expected = 2 * GEMM_T0_NS + (compute**4 + memory**4) ** 0.25 * 1e9
    assert expected - 2 * GEMM_T0_NS - compute * 1e9 == pytest.approx(3.55, abs=0.01)
    assert grouped_gemm_ns(shape, group, H100) == pytest.approx(expected) == pytest.approx(12112.3, abs=0.1)


def test_grouped_gemm_waves_count_the_sum_of_tiles():
    # 10 experts of 1000 tokens, n 1024, k 4096: tiles over all experts and their waves on 132 SMs:
    # 256x128 4 x 8 x 10 = 320 -> 3 waves, 128x256 8 x 4 x 10 = 320 -> 3, 128x128 8 x 8 x 10 = 640 -> 5,
    # 128x64 and 64x128 1280 -> 10, 64x64 2560 -> 20; waves x tm tn / factor: 98304, 98304, 86232 (128x128),
    # 96376, 96376, 109227: the 128x128 tiles win, 5 waves of 2 x 128 x 128 x (4096 + 64) / (5.674250e12 x 0.95) s
    # = 126.44 us (compute-bound: 84 GFLOP against 10 x (1000 x 4096 + 4096 x 1024 + 1000 x 1024) x 2 = 186,286,080 B
    # of operands and results, 61.11 us at 3.35e12 x 0.91 B/s); at 0.483 of the compute the operands lift it through
    # the smooth maximum by (1 + 0.483^4)^(1/4) = 1.0134: + 1.69 us; ten kernels' fixed costs, 10 x 5.5 us: 183.13 us
    group = tuple((1000, 1024, 4096) for _ in range(10))
    per_sm = H100.tensor_flops("bf16") * H100.gemm_efficiency("bf16") / H100.sms
    compute = 5 * 2 * 128 * 128 * (4096 + 64) / (per_sm * 0.95)
    memory = 186_286_080 / (3.35e12 * 0.91)
    assert (compute * 1e6, memory * 1e6) == pytest.approx((126.44, 61.11), abs=0.01)
    expected = 10 * GEMM_T0_NS + (compute**4 + memory**4) ** 0.25 * 1e9
    assert (expected - 10 * GEMM_T0_NS) / 1e3 - compute * 1e6 == pytest.approx(1.69, abs=0.01)
    assert grouped_gemm_ns(GemmShape(10000, 1024, 4096), group, H100) == pytest.approx(expected)
    assert expected / 1e3 == pytest.approx(183.13, abs=0.01)
    # the same GEMMs one after another each pay their own waves: 8 x 8 = 64 tiles < 132 SMs, so cuBLAS splits k (the
    # law's split-k); the streams' packing of the tiles makes the group faster than that
    from mocked_model.compute.kernels import gemm_ns

    assert grouped_gemm_ns(GemmShape(10000, 1024, 4096), group, H100) < 10 * gemm_ns(GemmShape(1000, 1024, 4096), H100)


def test_grouped_fp8_casts_one_expert_at_a_time_by_hand():
    # Qwen3-30B-A3B's fc1 forward at EP 16 on H100: 8 local experts of 4096 tokens, input width 2048.  The grouped
    # GEMM (FP8): 128x256 tiles, 8 x (32 x 6) = 1536 tiles -> ceil(1536 / 132) = 12 waves of 2 x 128 x 256 x (2048 +
    # 64) / (1978.9e12 x 1485 / 1830 x 0.8137 / 132) s, the smooth maximum with its operands, and 8 kernels' T0:
    # 174.1 us + 7 x 5.5 us = 212.6 us.  Current scaling quantizes each expert's split by itself (TE split_quantize):
    # per expert zero-amax, amax and scale (3 kernels) reading the split (32768 x 2048 x 2 = 134,217,728 B at 0.86 of
    # 3.35 TB/s: 46.59 us) + 24 x 3 us = 118.59 us; then 8 cast-transposes reading 2 and writing 1 + 1 bytes
    # (268,435,456 B: 93.17 us) + 8 x 3 us = 117.17 us.  Delayed scaling: one fused multi-tensor cast-transpose,
    # 93.17 + 3 = 96.17 us
    from mocked_model.compute import precision
    from mocked_model.compute.moe_ops import grouped_gemm_kernels

    def fc1(recipe):
        return WorkItem(CommType.computation, stage="forward.MoEExperts.layers.0.mlp.experts.fc1",
                        shapes=((32768, 2048), (8, 2048, 1536)),
                        meta={"op": "gemm", "te": True, "fp8_recipe": recipe, "tokens_per_expert": (4096,) * 8})

    p = precision("float8", H100)
    gemm, amax, cast = grouped_gemm_kernels(fc1("tensorwise"), p)
    assert gemm.ns(H100) / 1e3 == pytest.approx(212.6, abs=0.1)
    assert (amax.count, amax.nbytes, cast.count, cast.nbytes) == (24, 134_217_728, 8, 268_435_456)
    rate = 3.35e12 * 0.86
    assert amax.ns(H100) / 1e3 == pytest.approx(134_217_728 / rate * 1e6 + 24 * 3) == pytest.approx(118.59, abs=0.01)
    assert cast.ns(H100) / 1e3 == pytest.approx(268_435_456 / rate * 1e6 + 8 * 3) == pytest.approx(117.17, abs=0.01)
    gemm, delayed = grouped_gemm_kernels(fc1("delayed"), p)
    assert (delayed.count, delayed.ns(H100) / 1e3) == (1, pytest.approx(96.17, abs=0.01))


def test_grouped_expert_items_carry_per_expert_counts():
    items = workload(moe_grouped_gemm=True, computation_enable=True, moe_imbalance=1.5)
    fc1 = [i for i in items if i.stage == "forward.MoEExperts.layers.0.mlp.experts.fc1"]
    # one grouped item of 48 + 28 = 76 rows over 2 local experts, its counts in the meta
    assert [(i.shapes, i.meta["tokens_per_expert"]) for i in fc1] == [(((76, 64), (2, 64, 64)), (48, 28))]


# ---- DeepEP -------------------------------------------------------------------------------------------

def test_deepep_sends_a_token_once_per_destination_rank():
    # 128 experts on 16 ranks (8 each), top 8: a rank misses all 8 with probability
    # prod_{i<8} (120 - i) / (128 - i); 16 x (1 - that) distinct destination ranks per token
    miss = math.prod((120 - i) / (128 - i) for i in range(8))
    assert miss_probability(128, 8, 1 / 16) == pytest.approx(miss)
    r = route(4096, 128, 8, 16)
    traffic = deepep_traffic(4096, r, 128, 8, 16)
    assert traffic.distinct == pytest.approx(16 * (1 - miss))
    # 4096 tokens x 6.57 ranks = 26,895 rows instead of 32,768 copies
    assert traffic.send == round(4096 * 16 * (1 - miss))
    items = workload(moe_token_dispatcher_type="flex", moe_enable_deepep=True, tp=1, world=4)
    a2a = [i for i in items if i.comm_type == CommType.all_to_all and i.stage.startswith("forward")]
    assert {i.meta["deepep"][0] for i in a2a} == {"dispatch", "combine"}


# ---- the 1F1B all-to-all overlap ------------------------------------------------------------------------

def test_overlapped_layer_pair_by_hand():
    # forward layer (A_f, D_f, M_f, C_f, P_f) = (2, 3, 4, 3, 1), backward (pre_b, C_b, M_b, D_b, A_b) = (1, 3, 6, 3, 5)
    # comm: C_b 1-4, D_f 4-7 (after A_f 1-3 and C_b), D_b 10-13 (after M_b 4-10), C_f 14-17 (after M_f 10-14)
    # comp: pre_b 0-1, A_f 1-3, M_b 4-10, M_f 10-14, A_b 14-19, P_f 19-20 -> 20 instead of 13 + 18 = 31
    assert pair_time((2, 3, 4, 3, 1), (1, 3, 6, 3, 5), 0.0, False) == pytest.approx(20)


def test_delayed_weight_gradients_let_the_dispatch_backward_start_earlier():
    # (1, 3, 1, 3, 1) beside (1, 3, 6, 3, 5): without delay D_b waits for all of M_b (4-10): 10-13, C_f 13-16,
    # A_b 13-18, P_f 18-19 -> 19; with 3 of M_b's 6 being weight gradients D_b starts at 7: 7-10, M_f 10-11,
    # C_f 11-14, A_b 11-16, P_f 16-17 -> 17
    f, b = (1, 3, 1, 3, 1), (1, 3, 6, 3, 5)
    assert pair_time(f, b, 0.0, False) == pytest.approx(19)
    assert pair_time(f, b, 0.0, True, b_wgrad=3) == pytest.approx(17)


def test_an_all_to_all_slows_the_compute_beside_it():
    # 2 s of compute beside a 2 s all-to-all holding half the SMs: 1 s of work done by t = 2, the rest by 3
    assert _slowed(0.0, 2.0, [(0.0, 2.0)], 0.5) == pytest.approx(3.0)


def test_combined_1f1b_pairs_each_backward_with_the_next_forward():
    # pp 1, 4 micro-batches: F0 B0 F1 B1 F2 B2 F3 B3 -> (F1, B0), (F2, B1), (F3, B2); F0 and B3 run alone
    steps = pipeline_schedule(1, 0, 4, 1)
    script = StageScript(0, steps, [None] * len(steps), [None] * len(steps), None)
    got = [(steps[f].microbatch, steps[b].microbatch) for f, b in pairs(script)]
    assert got == [(1, 0), (2, 1), (3, 2)]


def test_overlap_hides_all_to_all_on_a_small_job():
    flags = ["--model", "topo", "-g_p_s", "8", "--gpu_type", "H100", "--model_name", "qwen3_30B_A3B", "--num_layers",
             "2", "--world_size", "8", "--expert_model_parallel_size", "8", "--seq_length", "1024", "--micro_batch",
             "1", "--global_batch", "32", "--moe_enable", "--moe_grouped_gemm", "--json"]
    import json

    def run(*extra):
        done = run_cli("-m", "simulator", *flags, *extra, timeout=300)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    plain, overlapped = run(), run("--overlap_moe_expert_parallel_comm")
    # same compute (the overlap only hides all-to-alls, slowing the compute beside them), less exposed comm
    assert overlapped["exposed_comm_s"] < plain["exposed_comm_s"]
    assert overlapped["iteration_s"] < plain["iteration_s"]


# ---- expert tensor parallelism --------------------------------------------------------------------------

def test_expert_tensor_parallel_groups_from_the_expert_layout():
    # world 16, tp 4, etp 2, ep 2: the expert layout puts etp fastest ([0, 1], [2, 3], ...), then ep ([0, 2],
    # [1, 3], [4, 6], ...), expert-DP the rest: 16 / (2 x 2) = 4
    p = ParallelConfig(world_size=16, tp=4, ep=2, etp=2)
    assert p.group_ranks("etp_group")[:3] == [[0, 1], [2, 3], [4, 5]]
    assert p.group_ranks("ep_group")[:3] == [[0, 2], [1, 3], [4, 6]]
    assert p.expert_dp == 4
    items = [i for i in workload(MOE, world=16, tp=4, ep=2, etp=2) if i.stage == "forward.MoEAlltoAllTokenDispatcher"]
    assert {(i.comm_group.value, i.comm_group_size) for i in items if i.comm_type == CommType.all_gather} == {
        ("ep_tp_group", 4), ("etp_group", 2)}


def test_expert_tensor_parallel_must_divide_the_stage():
    with pytest.raises(ConfigError, match="--expert_tensor_parallel_size 4 x --expert_model_parallel_size 4 = 16"):
        ParallelConfig(world_size=8, tp=2, ep=4, etp=4)


# ---- bad input -------------------------------------------------------------------------------------------

def test_imbalance_below_one_is_one_line_exit_2_and_nothing_written(tmp_path):
    out = tmp_path / "w.csv"
    done = run_cli("-m", "workload_generator.generate_megatron_workload", "--frame", "Megatron", "--model_name",
                   "Mixtral_8x7B", "--world_size", "16", "--expert_model_parallel_size", "8", "--moe_enable",
                   "--num_layers", "2", "--global_batch", "16", "--moe_imbalance", "0.5", "--output", str(out))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().count("\n") == 0 and "--moe_imbalance" in done.stderr
    assert not out.exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize("extra, needle", [
    (["--overlap_moe_expert_parallel_comm", "--expert_model_parallel_size", "1"], "needs expert parallelism"),
    (["--overlap_moe_expert_parallel_comm", "--moe_token_dispatcher_type", "allgather"], "alltoall or flex"),
])
def test_overlap_rules_are_megatrons(tmp_path, extra, needle):
    args = ["--frame", "Megatron", "--model_name", "Mixtral_8x7B", "--world_size", "16", "--moe_enable",
            "--num_layers", "2", "--global_batch", "16", "--output", str(tmp_path / "w.csv")]
    if "--expert_model_parallel_size" not in extra:
        args += ["--expert_model_parallel_size", "8"]
    done = run_cli("-m", "workload_generator.generate_megatron_workload", *args, *extra)
    assert done.returncode == 2 and needle in done.stderr and done.stderr.strip().count("\n") == 0


# ---- replay ---------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_an_ep_job_replays_over_gloo_on_four_processes(tmp_path):
    # tiny MoE on 4 ranks: tp 2 x dp 2, ep 2 (4 experts, top 2): every all-to-all of the dispatch and the combine
    # runs in its EP group of 2
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    args = ["--frame", "Megatron", "--model_name", "gpt_tiny", "--tensor_model_parallel_size", "2",
            "--enable_sequence_parallel", "--seq_length", "64", "--num_layers", "2", "--global_batch", "2",
            "--moe_enable", "--num_experts", "4", "--moe_router_topk", "2", "--expert_model_parallel_size", "2",
            "--epoch_num", "1", "--warmup", "0"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "4", "--master_port", str(port),
           str(ROOT / "aicb.py"), *args]
    import os

    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", AICB_ROOT=str(ROOT))
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    logs = list((tmp_path / "results" / "comm_logs").glob("*_log.csv"))
    assert logs
    from utils.workload import Workload

    rows = [i for i in Workload.load(logs[0]).items if i.comm_type == CommType.all_to_all]
    # per iteration, 2 layers x (dispatch tokens + probabilities + combine) forward and backward = 12
    assert len(rows) == 12 and {(i.comm_group.value, i.comm_group_size) for i in rows} == {("ep_group", 2)}


def test_unfused_weighted_gelu_experts_by_hand():
    """A plain GeLU expert cannot fuse its routing weights (Megatron refuses the fusion), so the activation is
    followed by ``x * probs`` and, with an fp32 router, the cast back: Megatron's moe_perf Mixtral proxy, one local
    expert of 8192 rows of 14336 on an H100."""
    from mocked_model.compute.ops import kernels_of

    p = Precision("bf16", 2)
    m = 8192 * 14336  # 117,440,512 activations
    fwd = kernels_of(_item("gelu", ((8192, 14336),), fused=False, weighted=True, probs_bytes=4), p)
    # GeLU reads and writes the 2-byte values (4m B); the product writes fp32 (2m + 4m), the cast reads it (4m + 2m)
    assert [(k.nbytes, k.count, k.kind) for k in fwd] == [(4 * m, 1, "activation"), (12 * m, 2, "add")]
    # H100: 3.35 TB/s x 0.69 (activation) and x 0.86 (add), 3 us a kernel
    assert sum(k.ns(H100) for k in fwd) == pytest.approx(
        3000 + 4 * m / (3.35e12 * 0.69) * 1e9 + 2 * 3000 + 12 * m / (3.35e12 * 0.86) * 1e9)
    bwd = kernels_of(_item("gelu", ((8192, 14336),), "backward", fused=False, weighted=True, probs_bytes=4), p)
    # GeLU's backward 6m; the weighting's: cast up (2+4), g*p (4+4), cast down (4+2), g*x (4+2+4), row sums (4): 34m
    assert [(k.nbytes, k.count) for k in bwd] == [(6 * m, 1), (34 * m, 5)]
    # bf16 probabilities keep the product in bf16: one kernel forward (4m), three backward (12m)
    same = kernels_of(_item("gelu", ((8192, 14336),), fused=False, weighted=True, probs_bytes=2), p)
    assert [(k.nbytes, k.count) for k in same] == [(4 * m, 1), (4 * m, 1)]
    # gated and fused (weighted_bias_swiglu_impl): the weights ride in the activation kernel, nothing added
    fused = kernels_of(_item("swiglu", ((8192, 2 * 14336),), fused=True, weighted=True, probs_bytes=4), p)
    assert len(fused) == 1


def test_gelu_experts_never_fuse_their_weighting():
    """The experts' activation item is fused only when gated (SwiGLU) and bias-activation fusion is on, and it carries
    the router's probability width (an fp32 router: 4 bytes)."""
    from dataclasses import replace

    def experts_activation(model, **training):
        return [i for i in workload(model, world=4, tp=1, ep=4, computation_enable=True, **training)
                if "MoEExperts" in i.stage and i.stage.endswith("activation")]

    assert not MOE.swiglu
    plain = experts_activation(MOE)
    gated = experts_activation(replace(MOE, swiglu=True))
    assert plain and gated
    assert all(i.meta["weighted"] and not i.meta["fused"] for i in plain)
    assert all(i.meta["weighted"] and i.meta["fused"] for i in gated)
    assert {i.meta["probs_bytes"] for i in plain} == {2}  # bf16 router by default

"""Context parallelism as Megatron-core runs it through Transformer Engine: the ring-attention schedule of a layer,
the all-to-all and all-gather layers, the dp-cp gradient group, the memory split, the SimAI mapping, the search's
``--cp`` and the one-line refusals.  Numbers derived by hand in the comments.

The small model: hidden 1024, 8 heads of 128 (no GQA), one layer, sequence 4096, bf16 (2 bytes), tp 1, micro-batch 1.
At cp 4 every rank holds s / cp = 1024 tokens (chunks of c = s / (2 cp) = 512), so one rank's K and V are
1024 x 8 x (128 + 128) x 2 = 4,194,304 bytes (4 MiB).
"""

from __future__ import annotations

import pytest

from mocked_model.compute.kernel_list import Precision
from mocked_model.compute.training_ops import OPS
from mocked_model.context_parallel import ContextParallelAttention, cp_buffer_bytes
from mocked_model.memory import estimate_memory
from simulator.api import simulate
from simulator.options import TopoOptions
from tests.conftest import run_cli
from utils.config import JobConfig, TrainingConfig
from utils.errors import ConfigError
from utils.model_config import ModelConfig
from utils.parallel import ParallelConfig
from utils.workload import CommGroup, CommType
from workload_generator.megatron import MegatronWorkload
from workload_generator.simai_training import derive_simai

MODEL = ModelConfig(name="cp_test", hidden_size=1024, num_layers=1, num_attention_heads=8, kv_channels_given=128,
                    vocab_size=32000, max_position_embeddings=4096, position_embedding_type="rope",
                    attention_dropout=0.0, hidden_dropout=0.0, swiglu=True, normalization="RMSNorm")
KV = 1024 * 8 * 256 * 2
BF16 = Precision("bf16", 2)


def job(cp: int = 4, world: int | None = None, tp: int = 1, model: ModelConfig = MODEL, **training) -> JobConfig:
    parallel = ParallelConfig(world_size=world or cp * tp, tp=tp, cp=cp, global_batch=training.pop("global_batch", 1),
                              sequence_parallel=tp > 1)
    return JobConfig(model, parallel, TrainingConfig(seq_length=training.pop("seq_length", 4096), computation_enable=True,
                                                     **training))


def cp_module(gen: MegatronWorkload) -> ContextParallelAttention:
    return next(m for m in gen.chunks[0].layers[0].children if isinstance(m, ContextParallelAttention))


def ring_items(items):
    return [(i.comm_type, i.additional, i.msg_size, (i.meta or {}).get("overlap")) for i in items if i.is_comm]


# ---- ring attention (p2p) ---------------------------------------------------------------------------

def test_ring_schedule_of_one_layer_at_cp4():
    module = cp_module(MegatronWorkload(job()))
    forward, backward = module.forward_items(), module.backward_items()
    # forward: 4 rounds, 3 transfers of K/V to the next rank (from the previous); each send is marked to overlap the
    # compute that follows it (its round's attention), the receive carries no time of its own
    send = (CommType.isend, "send_next", KV, "next")
    recv = (CommType.irecv, "recv_prev", KV, None)
    assert ring_items(forward) == [send, recv] * 3
    kinds = ["comm" if i.is_comm else "attention" for i in forward]
    assert kinds == ["comm", "comm", "attention"] * 3 + ["attention"]
    assert all(i.comm_group is CommGroup.cp_group and i.comm_group_size == 4 for i in forward if i.is_comm)
    # round 0 is the diagonal (both local chunks, causal 1024 x 1024); rounds 1-3 full tiles of 2c = 1024 queries
    # against one chunk of c = 512 keys
    pieces = [i for i in forward if i.is_computation]
    assert [(i.shapes, i.meta["causal"]) for i in pieces] == [
        (((1, 8, 1024, 128), (1, 8, 1024, 128)), True)] + [(((1, 8, 1024, 128), (1, 8, 512, 128)), False)] * 3
    # backward, the other way round the ring: K/V (4 MiB), K/V + dK/dV (8 MiB) twice, dK/dV (4 MiB): 4 transfers, each
    # before its round's attention backward
    sizes = [(i.additional, i.msg_size) for i in backward if i.comm_type is CommType.isend]
    assert sizes == [("send_prev", KV), ("send_prev", 2 * KV), ("send_prev", 2 * KV), ("send_prev", KV)]
    assert ["comm" if i.is_comm else "attention" for i in backward] == ["comm", "comm", "attention"] * 4
    assert all(i.stage.startswith("backward") for i in backward)


def test_ring_rounds_split_the_attention_work_evenly():
    pieces = [i for i in cp_module(MegatronWorkload(job())).forward_items() if i.is_computation]
    # Megatron's count for this rank: the full square 2 b h s^2 (d + dv) over cp = 2 x 8 x 4096^2 x 256 / 4
    # = 17,179,869,184, a quarter per round
    assert [i.flops for i in pieces] == [17_179_869_184 / 4] * 4
    kernels = [OPS["attention"](i, BF16) for i in pieces]
    # what the flash kernel computes: the diagonal (2c)^2 / 2 = 524,288 scores, a full tile 2c x c = 524,288 scores;
    # each 2 x 8 heads x 524,288 x 256 = 2^31 FLOPs.  Four rounds: 2^33 = (4096^2 / 2) / 4 x 2 x 8 x 256, the causal
    # work of the whole sequence over cp
    assert [k[0].flash_flops for k in kernels] == [2.0**31] * 4
    # 1024 query rows: 8 tiles x 8 heads = 64 thread blocks, each charged one 128 x 128 key block: 64 x 2 x 128^2 x 256
    assert {k[0].cta_flops for k in kernels} == {64 * 2 * 128 * 128 * 256}
    # every round merges its output into the running fp32 output: read 1024 x 8 x 128 outputs in bf16 (2 B), read
    # and write fp32 (8 B), and the log-sum-exp (1024 x 8 rows, 8 B): 10,485,760 + 65,536 bytes
    assert [k[1].name for k in kernels] == ["ring output correction"] * 4
    assert kernels[0][1].nbytes == 1024 * 8 * 128 * 10 + 1024 * 8 * 8


def test_ring_layer_time_on_a_derived_fabric():
    # One server of 4 GPUs, NVLink 64 GiB/s (2^36 B/s), no latency terms: a ring transfer of 4 MiB takes
    # 2^22 / 2^36 s = 61.03515625 us.  Computation: every attention round 40 us forward, 100 us backward, the rest 0.
    def hook(item):
        if (item.meta or {}).get("op") == "attention":
            return 100_000.0 if item.stage.startswith("backward") else 40_000.0
        return 0.0

    t = 2**22 / 2**36 * 1e6
    result = simulate(job(), None, TopoOptions(gpus_per_server=4, nvlink_bw=64, latency_scale=0, compute_time_ns=hook))
    d = result.details
    layer = next(lt for lt in d.layer_times if lt.layer == "layers.0")
    # forward: rounds 0-2 wait for their transfer, max(40, 61.035) each, round 3 computes alone: 3 x 21.035 exposed.
    # backward: max(100, 61.035) = 100, then max(100, 122.07) twice, then 100: 2 x 22.07 exposed.
    exposed = 3 * (t - 40) + 2 * (2 * t - 100)
    assert layer.fwd_compute_us == pytest.approx(160) and layer.bwd_compute_us == pytest.approx(400)
    assert layer.comm_us == pytest.approx(9 * t, rel=1e-12)        # 3 transfers forward, 1 + 2 + 2 + 1 backward
    assert layer.exposed_comm_us == pytest.approx(exposed, rel=1e-12)
    assert exposed == pytest.approx(107.24609375, rel=1e-12)
    # the stage books it to CP, with the loss's all-reduce of [sum, count] over cp (8 B: 2 x 3/4 x 8 / 2^36 s)
    loss = 2 * 0.75 * 8 / 2**36 * 1e6
    stage = d.stages[0]
    assert stage.cp_exposed_us == pytest.approx(exposed + loss, rel=1e-12)
    assert stage.cp_comm_us == pytest.approx(9 * t + loss, rel=1e-12)
    assert stage.tp_exposed_us == 0.0
    # which transfer overlaps which compute: each round's transfer starts with that round's attention
    spans = sorted((iv.start_s, iv.stream, iv.name) for iv in d.intervals()
                   if iv.layer == "layers.0" and iv.microbatch == 0 and ("AttnFunc" in iv.name or "core_attention" in iv.name))
    forward = [s for s in spans if "forward" in s[2]]
    transfers = [s[0] for s in forward if s[1] == "overlap comm"]
    rounds = [s[0] for s in forward if s[1] == "compute"]
    assert len(transfers) == 3 and len(rounds) == 4
    assert transfers == pytest.approx(rounds[:3], abs=1e-12)
    assert [b - a for a, b in zip(rounds, rounds[1:])] == pytest.approx([t * 1e-6] * 3, rel=1e-9)


def test_ring_exchange_cost_crosses_servers_on_the_nic():
    from simulator.topo.collectives import LinkModel, collective_cost, p2p_cost
    from simulator.topo.fabric import DerivedFabric

    # cp 4 over 2 servers of 2 GPUs: the ring's hop between servers goes through a NIC share (52.1 GB/s here)
    fabric = DerivedFabric(4, 2, 2, 400 * 2**30, 50e9, None)
    links = LinkModel(1.0, 1.0, 0.0)
    shape = fabric.group_shape([0, 1, 2, 3])
    cost = collective_cost("isend", KV, shape, links)
    assert cost.time_s == pytest.approx(p2p_cost(KV, False, shape.nic_Bps, 0.0, links).time_s, rel=1e-12)
    assert cost.time_s == pytest.approx(KV / 50e9, rel=1e-12)


# ---- all-to-all and all-gather ------------------------------------------------------------------------

def test_a2a_layer_sizes():
    # tp 2, cp 2, GQA with 4 groups: per TP rank 4 heads and 2 groups, each split over the 2 CP ranks by the a2a
    model = MODEL.with_changes(num_query_groups=4)
    module = cp_module(MegatronWorkload(job(cp=2, tp=2, model=model, cp_comm_type="a2a")))
    forward, backward = module.forward_items(), module.backward_items()
    # each rank's tensors before the all-to-all: 4096 / 2 = 2048 tokens; Q 2048 x 4 x 128 x 2 = 2 MiB, K and V
    # 2048 x 2 x 128 x 2 = 1 MiB each, O like Q
    q, kv = 2048 * 4 * 128 * 2, 2048 * 2 * 128 * 2
    assert [(i.comm_type, i.msg_size, i.meta["tensor"]) for i in forward if i.is_comm] == [
        (CommType.all_to_all, q, "q"), (CommType.all_to_all, kv, "k"), (CommType.all_to_all, kv, "v"),
        (CommType.all_to_all, q, "o")]
    assert [(i.msg_size, i.meta["tensor"]) for i in backward if i.is_comm] == [(q, "o"), (q, "q"), (kv, "k"), (kv, "v")]
    assert all(i.comm_group is CommGroup.cp_group and i.comm_group_size == 2 for i in forward + backward if i.is_comm)
    # between them one attention over the whole sequence with the heads split: 4 / 2 heads, 2 / 2 groups, causal
    (piece,) = [i for i in forward if i.is_computation]
    assert piece.shapes == ((1, 2, 4096, 128), (1, 1, 4096, 128)) and piece.meta["causal"] is True
    # its kernels: the causal flash 2 x 2 heads x 4096^2 / 2 x 256 and the reorders around the all-to-alls (four
    # passes of read and write over Q, O (2 x 4096 x 256 each) and K, V (1 x 4096 x 256): 2 x 2 x 2 x 3,145,728 B)
    kernels = OPS["attention"](piece, BF16)
    assert kernels[0].flash_flops == 2 * 2 * 4096**2 / 2 * 256
    assert kernels[1].name == "a2a reorders" and kernels[1].nbytes == 8 * (2 * 4096 * 256 + 4096 * 256)


def test_allgather_layer_sizes():
    module = cp_module(MegatronWorkload(job(cp_comm_type="allgather")))
    forward, backward = module.forward_items(), module.backward_items()
    # K and V gathered over the 4 CP ranks: 4096 x 8 x 128 x 2 = 8 MiB each; backward again, then dK, dV scattered
    full = 4096 * 8 * 128 * 2
    assert [(i.comm_type, i.msg_size) for i in forward if i.is_comm] == [(CommType.all_gather, full)] * 2
    assert [(i.comm_type, i.msg_size) for i in backward if i.is_comm] == [(CommType.all_gather, full)] * 2 + \
        [(CommType.reduce_scatter, full)] * 2
    # CP rank 0's chunks 0 and 7 (c = 512 queries each) against the keys up to them: 512 and 4096, bottom-right causal
    pieces = [i for i in forward if i.is_computation]
    assert [i.shapes[1][2] for i in pieces] == [512, 4096]
    # scores: 512^2 / 2 = 131,072 and 512 x 3584 + 512^2 / 2 = 1,966,080: together 2,097,152 = (4096^2 / 2) / 4
    flops = [OPS["attention"](i, BF16)[0].flash_flops for i in pieces]
    assert flops == [2 * 8 * 131_072 * 256, 2 * 8 * 1_966_080 * 256]


def test_hierarchical_groups_and_layer():
    # cp 4 as 2 x 2: the a2a level pairs consecutive CP ranks, the ring runs across them
    j = job(cp=4, tp=2, world=16, global_batch=2, cp_comm_type="a2a+p2p", hierarchical_cp_sizes=(2, 2))
    p = j.parallel
    assert p.group_ranks("cp_group")[:2] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert p.group_of(0, "cp_a2a_group") == [0, 2] and p.group_of(0, "cp_p2p_group") == [0, 4]
    items = cp_module(MegatronWorkload(j)).forward_items()
    comms = [(i.comm_type, i.comm_group) for i in items if i.is_comm]
    assert comms == [(CommType.all_to_all, CommGroup.cp_a2a_group)] * 3 + \
        [(CommType.isend, CommGroup.cp_p2p_group), (CommType.irecv, CommGroup.cp_p2p_group)] + \
        [(CommType.all_to_all, CommGroup.cp_a2a_group)]
    # after the a2a: 4 / 2 heads over s / P = 2048 tokens; one ring transfer is still (s / cp) x g x (d + dv) x 2:
    # 1024 x 4 x 256 x 2 (tp 2: 4 groups per rank)
    assert [i.msg_size for i in items if i.comm_type is CommType.isend] == [1024 * 4 * 256 * 2]
    assert [i.shapes[0] for i in items if i.is_computation] == [(1, 2, 2048, 128)] * 2


# ---- gradients, optimizer, memory ---------------------------------------------------------------------

def test_gradients_reduce_over_dp_cp():
    # 8 GPUs as tp 2 x cp 2 x dp 2 (order tp-cp-ep-dp-pp: rank = tp + 2 cp + 4 dp): rank 0's dp-cp group is the ranks
    # with tp 0: cp 0/1 x dp 0/1 = 0, 2, 4, 6
    j = job(cp=2, tp=2, world=8, global_batch=2, use_distributed_optimizer=True)
    assert j.parallel.group_of(0, "dp_cp_group") == [0, 2, 4, 6]
    assert j.parallel.group_ranks("dp_group")[:2] == [[0, 4], [1, 5]]
    workload = MegatronWorkload(j)()
    step = [i for i in workload.iterations()[1] if i.stage.startswith("step")]
    grads = [i for i in step if i.comm_type in (CommType.reduce_scatter, CommType.all_gather)]
    assert grads and all(i.comm_group is CommGroup.dp_cp_group and i.comm_group_size == 4 for i in grads)
    # the loss report stays over dp (Megatron's loss_func), the [sum, count] over cp first
    loss = [(i.comm_group, i.comm_group_size) for i in workload.iterations()[1] if i.stage == "forward_step.loss_func"]
    assert loss == [(CommGroup.cp_group, 2), (CommGroup.dp_group, 2)]


def test_memory_at_cp2_against_cp1():
    # dp 2 both times (4 and 8 GPUs), the distributed optimizer on
    one, two = (estimate_memory(job(cp=cp, world=2 * cp, global_batch=2, use_distributed_optimizer=True), "H100")
                .most_loaded for cp in (1, 2))
    a, b = ({t.name: t.bytes for t in s.terms} for s in (one, two))
    # every activation is of s / cp tokens: half (4096 tokens -> 2048)
    for name in ("activations", "output-layer activations", "embedding activations"):
        assert b[name] == pytest.approx(a[name] / 2, rel=1e-12)
    # the optimizer's shard: over dp x cp = 4 ranks instead of 2
    assert b["optimizer states"] == pytest.approx(a["optimizer states"] / 2, rel=1e-6)
    assert a["parameters"] == b["parameters"] and a["gradients"] == b["gradients"]
    # the ring's buffers: P = 2 rounds x (K/V + O) of 2048 tokens: 2 x (2048 x 2048 + 2048 x 1024) x 2 bytes
    assert b["context-parallel buffers"] == 2 * (2048 * 2048 + 2048 * 1024) * 2
    assert "context-parallel buffers" not in a
    assert cp_buffer_bytes(job(cp=2, world=4, global_batch=2, cp_comm_type="allgather")) == 2 * 2 * 2048 * 2048 * 2


def test_model_flops_stay_megatrons_for_the_whole_job():
    from mocked_model.flops import model_flops

    # the same global batch of 4096-token sequences: CP changes where the work runs, not the count
    assert model_flops(job(cp=4, world=4)) == model_flops(job(cp=1, world=1))


# ---- the SimAI file -----------------------------------------------------------------------------------

def test_simai_file_maps_cp_to_simais_groups():
    derived = derive_simai(MegatronWorkload(job(cp=4, world=8, global_batch=4)))  # dp 2: 2 micro-batches
    header, records = derived.workload.header, derived.workload.records
    # SimAI's EP group (ep ranks at stride tp) stands for the CP group; its DP group (8 / (1 x 1) ranks) is dp x cp
    assert header.ep == 4
    tokens = [(r.fwd_comm, r.fwd_size_bytes) for r in records] + [(r.ig_comm, r.ig_size_bytes) for r in records]
    # the forward ring (3 transfers of 4 MiB) as one all-gather of 4 x 4 MiB; backward its all-gather and reduce-scatter
    assert ("ALLGATHER_EP", 4 * KV) in tokens and ("REDUCESCATTER_EP", 4 * KV) in tokens
    assert sum(1 for t in tokens if t == ("ALLGATHER_EP", 4 * KV)) == 2 * 2   # forward and backward, 2 micro-batches
    assert any(r.wg_comm == "ALLREDUCE" for r in records)                   # the dp-cp gradients: SimAI's DP group


# ---- the search ---------------------------------------------------------------------------------------

def test_search_enumerates_cp_sizes():
    from simulator.search.space import Layout, Space, check_space, layouts

    # 16 GPUs, tp 2, pp 1, cp 1/2/4: dp 8, 4, 2
    space = Space(tp=(2,), pp=(1,), cp=(1, 2, 4), micro_batch=(1,), recompute=("none",), sequence_parallel=(True,),
                  distributed_optimizer=(True,), order=("tp-cp-ep-dp-pp",), tp_comm_overlap=(False,))
    found = list(layouts(MODEL.with_changes(num_layers=4), 16, 32, space))
    assert [(x.cp, x.dp) for x in found] == [(1, 8), (2, 4), (4, 2)]
    assert all(x.world_size == 16 for x in found)
    flags = Layout(2, 1, 2, 1, 1, 1, "none", True, True, "tp-cp-ep-dp-pp", cp=4).flags()
    assert flags[flags.index("--context-parallel-size") + 1] == "4" and flags[:2] == ["--world_size", "16"]
    assert check_space({"cp": "1,2"}).cp == (1, 2) and check_space({}).cp == (1,)
    with pytest.raises(ConfigError, match="--cp '0'"):
        check_space({"cp": "0"})


# ---- refusals -----------------------------------------------------------------------------------------

BASE = ("-m", "workload_generator.generate_megatron_workload", "--model_name", "gpt_tiny", "--global_batch", "2")


@pytest.mark.parametrize("args, needles", [
    # the sequence in 2 x cp chunks: 100 is not a multiple of 8
    (("--world_size", "4", "--context-parallel-size", "4", "--seq_length", "100"),
     ("--seq_length 100", "2 x --context-parallel-size 4 = 8")),
    # gpt_tiny's 8 heads over tp 2 leave 4 per rank; a2a over 8 CP ranks cannot split them
    (("--world_size", "16", "--tensor_model_parallel_size", "2", "--context-parallel-size", "8", "--seq_length", "128",
      "--cp_comm_type", "a2a"), ("--cp_comm_type a2a", "--num_attention_heads", "not divisible by 8")),
    (("--world_size", "8", "--context-parallel-size", "8", "--seq_length", "128", "--num_query_groups", "4",
      "--cp_comm_type", "a2a"), ("--num_query_groups", "leaves 4, not divisible by 8")),
    (("--world_size", "4", "--context-parallel-size", "4", "--seq_length", "128", "--cp_comm_type", "a2a+p2p",
      "--hierarchical_context_parallel_sizes", "2,3"), ("--hierarchical_context_parallel_sizes 2,3", "product is")),
    (("--world_size", "4", "--context-parallel-size", "4", "--seq_length", "128", "--cp_comm_type", "a2a+p2p"),
     ("--cp_comm_type a2a+p2p needs --hierarchical_context_parallel_sizes",)),
    (("--world_size", "2", "--context-parallel-size", "2", "--seq_length", "128", "--transformer_impl", "local"),
     ("--context-parallel-size 2 needs --transformer_impl transformer_engine",)),
    (("--world_size", "2", "--context-parallel-size", "2", "--seq_length", "128", "--window_size", "64,0"),
     ("--window_size", "--cp_comm_type a2a or allgather")),
])
def test_bad_cp_input_is_one_line_and_writes_nothing(tmp_path, args, needles):
    out = tmp_path / "w.csv"
    proc = run_cli(*BASE, *args, "--output", str(out))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not out.exists() and not any(tmp_path.iterdir())

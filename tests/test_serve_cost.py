"""The serving step-cost model (simulator/serve/cost.py): a step priced from the engine's aggregates agrees with the
per-step simulation (simulator/topo/inference.py) to the nanosecond; the KV capacity, a KV transfer, speculative decoding's
accepted tokens, DeepEP's low-latency dispatch and the precisions by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mocked_model.compute.kernels import GemmShape, gemm_ns
from simulator.options import TopoOptions
from simulator.serve.cost import BatchStep, StepCost, accepted_tokens, cost_model
from simulator.topo.inference import deepep_a2a_s, simulate_job
from utils.errors import ConfigError

NV = 360 * 2**30
"""-nv 360 GiB/s in B/s (the derived fabric's NVLink rate; its efficiency is 1)."""


def _both(name: str, gpu: str, tp: int, ep: int, host: str, phase: str, batch: int, seq: int, **kw):
    """(per-step simulation, step-cost model) seconds of one uniform step."""
    opts = TopoOptions(gpus_per_server=tp)
    cost = cost_model(name, gpu, None, tp=tp, ep=ep, options=opts, cuda_graphs=host == "graphs", memo="exact", **kw)
    job = replace(cost.job, phase=phase, micro_batch=batch, seq_length=seq, host=host)
    step = BatchStep(0, 0, batch, batch * seq) if phase == "decode" else BatchStep(batch * seq, batch * seq * (seq + 1) / 2,
                                                                                  0, 0, batch)
    return simulate_job(job, None, opts).step_s, cost.step_s(step)


@pytest.mark.parametrize("name, gpu, tp, ep", [("gpt_tiny", "H100", 1, 1), ("qwen3_0.6B", "H100", 1, 1),
                                               ("deepseek_v2_lite", "H100", 2, 2), ("mixtral_8x7B", "H100", 2, 2),
                                               ("Qwen3-Next-80B", "H200", 2, 2)])
@pytest.mark.parametrize("host", ["graphs", "eager"])
def test_single_decode_and_prefill_agree_with_the_step_simulation(name, gpu, tp, ep, host):
    # a decode of 8 sequences (a captured batch size, so the graph pads nothing) over 512 cached tokens each, and a
    # single 300-token prefill: the same items, compute-model prices and collective costs, summed in another order.
    # The prefill's attention comes from the aggregate 300 x 301 / 2 score pairs less 300 / 2 (the compute model
    # counts a causal square as s^2 / 2 pairs): 45,000 = 300^2 / 2, the simulation's count.
    for phase, batch, seq in (("decode", 8, 512), ("prefill", 1, 300)):
        simulated, priced = _both(name, gpu, tp, ep, host, phase, batch, seq)
        assert priced == pytest.approx(simulated, abs=1e-9)


def test_interface_and_a_mixed_step():
    cost = cost_model("llama3_8B", "H100", None, tp=1)
    assert isinstance(cost, StepCost) and cost.replica_gpus == 1
    assert cost.step_s(BatchStep(0, 0.0, 0, 0)) == 0.0
    decode = cost.step_s(BatchStep(0, 0.0, 16, 16_000))
    mixed = cost.step_s(BatchStep(512, 512 * 513 / 2, 16, 16_000, 1))
    assert mixed > decode and cost.mode(BatchStep(512, 1.0, 16, 16_000, 1)) == "eager"
    # 257 sequences are more than vLLM captures (256): eager
    assert cost.mode(BatchStep(0, 0.0, 16, 1)) == "graphs" and cost.mode(BatchStep(0, 0.0, 257, 1)) == "eager"


def test_graph_pads_the_batch_to_the_next_captured_size():
    cost = cost_model("llama3_8B", "H100", None, tp=1, memo="exact")
    # 33 sequences replay the graph of 40 (vLLM v0 captures 1, 2, 4, 8, 16, 24, 32, 40, ...): the linear work is the
    # 40-sequence batch's, the attention reads only the 33 real caches, and the scheduler updates 33 requests
    # (1.11 us each, vLLM PR #46112)
    padded = cost.step_s(BatchStep(0, 0.0, 33, 33 * 100))
    forty = cost.step_s(BatchStep(0, 0.0, 40, 33 * 100))
    attention = (cost._attention_s(cost._attention[0][0], 40, 3300, 1, 0, 0, 0, 0)
                 - cost._attention_s(cost._attention[0][0], 33, 3300, 1, 0, 0, 0, 0)) * 32
    assert padded == pytest.approx(forty - attention - 7 * 1.11e-6, rel=1e-12)


def test_kv_capacity_llama3_70b_tp4_h100():
    cost = cost_model("llama3_70B", "H100", None, tp=4)
    # usable: 0.9 x 80 GiB = 77,309,411,328 B
    # weights per GPU (bf16): per layer attention 8192 x (16 x 128 + 2 x 2 x 128) + 16 x 128 x 8192 = 37,748,736,
    #   MLP 3 x 8192 x 28672 / 4 = 176,160,768: 213,909,504 x 80 layers = 17,112,760,320 linear; norms 2 x 8192 x 80
    #   = 1,310,720, embedding and LM head 32,064 x 8192 = 262,668,288 each, final norm 8192: 526,655,488 other;
    #   2 x (17,112,760,320 + 526,655,488) = 35,278,831,616 B
    # activations of the profiling step (8192 tokens, logits of 256 rows): 8192 x (6 x 8192 + 2 x 28672 / 4) x 2
    #   + 256 x 128,256 x 4 = 1,040,187,392 + 131,334,144 = 1,171,521,536 B
    # KV per token per GPU: 80 layers x 2 (K, V) x 8 / 4 heads x 128 x 2 B = 81,920 B
    # (77,309,411,328 - 35,278,831,616 - 1,171,521,536) / 81,920 = 498,767.8 -> 498,767 tokens
    assert cost.capacity.weights_bytes == 35_278_831_616
    assert cost.capacity.activation_bytes == 1_171_521_536
    assert cost.kv_bytes_per_token == 81_920
    assert cost.kv_capacity_tokens == 498_767
    # an FP8 cache holds twice the tokens' worth of the same bytes
    assert cost_model("llama3_70B", "H100", None, tp=4, kv_dtype="float8").kv_bytes_per_token == 40_960


def test_kv_transfer_by_hand():
    options = TopoOptions(gpus_per_server=8, nvlink_bw=360, nic_busbw=45, latency_scale=0)
    # Llama 3 8B, tp 1: 32 layers x 2 x 8 heads x 128 x 2 B = 131,072 B per token; 1000 tokens = 131,072,000 B.
    # Replicas 0 and 1 are GPUs 0 and 1 of one server: NVLink at 360 GiB/s
    one = cost_model("llama3_8B", "H100", None, tp=1, options=options, gpus=16)
    assert one.kv_transfer_s(1000) == pytest.approx(131_072_000 / NV, rel=1e-12)    # 339.08 us
    # tp 8: a replica fills a server; each GPU sends its 1 / 8 (one key/value head: 32 x 2 x 1 x 128 x 2 = 16,384 B
    # per token) to its peer in the next server at once, over its NIC share: 45 GiB/s x 8 NICs / 8 GPUs
    eight = cost_model("llama3_8B", "H100", None, tp=8, options=options, gpus=16)
    assert eight.kv_transfer_s(1000) == pytest.approx(16_384_000 / (45 * 2**30), rel=1e-12)   # 339.08 us as well
    with pytest.raises(ConfigError, match="needs 24 GPUs"):
        eight.kv_transfer_s(1000, 0, 2)


def test_speculative_decoding():
    # Leviathan et al. 2023, eq. 1: (1 - a^(K+1)) / (1 - a); K = 3, a = 0.8: (1 - 0.4096) / 0.2 = 2.952
    assert accepted_tokens(3, 0.8) == pytest.approx(2.952)
    assert accepted_tokens(0, 0.5) == 1.0 and accepted_tokens(2, 1.0) == 3.0
    plain = cost_model("deepseek_v3", "H200", None, tp=8, ep=8, moe_tp=False)
    spec = cost_model("deepseek_v3", "H200", None, tp=8, ep=8, moe_tp=False, speculative_tokens=1, acceptance_rate=0.7)
    assert spec.tokens_per_decode_step == pytest.approx(1.7)
    step = BatchStep(0, 0.0, 32, 32 * 2000)
    # verifying 2 tokens per sequence and one MTP pass costs more than one plain step, less than two
    assert plain.step_s(step) < spec.step_s(step) < 2 * plain.step_s(step)


def test_deepep_low_latency_dispatch_reproduces_its_table():
    # DeepEP's legacy table: EP 8 low-latency dispatch of 128 tokens x top-8 x 7,392 B (FP8 with scales) in 77 us at
    # 98 GB/s on a 50 GB/s NIC per GPU: a fabric whose NIC share is 50 GB/s gives 7,569,408 / 98e9 = 77.24 us
    from simulator.topo.collectives import GroupShape, LinkModel

    shape = GroupShape(8, 1, 8, "NVSwitch", 450e9, 50e9, 0.0, 0.0)
    links = LinkModel(1.0, 1.0, 0.0)
    assert deepep_a2a_s("dispatch", 128 * 8 * 7392, shape, links, True) == pytest.approx(7_569_408 / 98e9)
    # combine in bf16: 128 x 8 x 7168 x 2 / 127e9 = 115.6 us (the table: 114 us)
    assert deepep_a2a_s("combine", 128 * 8 * 7168 * 2, shape, links, True) == pytest.approx(14_680_064 / 127e9)
    # normal kernels, one server: the intra-server 7/8 over 153/160 of the NVLink rate
    assert deepep_a2a_s("dispatch", 8e6, shape, links, False) == pytest.approx(7e6 / (153 / 160 * 450e9))


def test_precisions():
    with pytest.raises(ConfigError, match="--dtype float4 needs FP4 tensor cores"):
        cost_model("llama3_8B", "H100", None, dtype="float4")
    steps = [BatchStep(0, 0.0, 64, 64 * 1000), BatchStep(4096, 4096 * 4097 / 2, 0, 0, 1)]
    times = {d: [cost_model("llama3_70B", "B200", None, tp=2, dtype=d).step_s(s) for s in steps]
             for d in ("bfloat16", "float8", "float4")}
    for i in range(2):
        assert times["float4"][i] < times["float8"][i] < times["bfloat16"][i]
    caps = [cost_model("llama3_70B", "B200", None, tp=2, dtype=d).kv_capacity_tokens for d in ("bfloat16", "float4")]
    assert caps[1] > caps[0]   # smaller weights leave more room for KV


def test_moe_over_tp_all_reduces_instead_of_all_to_all():
    from mocked_model.inference import stage_items
    from utils.workload import CommType

    cost = cost_model("deepseek_v3", "H200", None, tp=8)   # ep 1, tp 8: experts over TP (SGLang's default)
    assert cost.job.moe_tp and cost.job.ep == 1
    items = stage_items(replace(cost.job, micro_batch=16))
    assert not [i for i in items if i.comm_type is CommType.all_to_all]
    # per layer: the attention's all-reduce and the MLP's (dense) or the experts' (MoE): 61 x 2, plus the embedding's
    ar = [i for i in items if i.comm_type is CommType.all_reduce]
    assert len(ar) == 61 * 2 + 1 and {i.msg_size for i in ar} == {2 * 16 * 7168}
    with pytest.raises(ConfigError, match="--moe_tp splits every expert over the TP ranks"):
        cost_model("deepseek_v3", "H200", None, tp=8, ep=8, moe_tp=True)


def test_grid_memo_is_exact_on_its_points_and_linear_between():
    exact = cost_model("llama3_8B", "H100", None, memo="exact")
    grid = cost_model("llama3_8B", "H100", None)
    step = lambda t: BatchStep(t, t * (t + 1) / 2, 0, 0, 1)   # noqa: E731
    # above 1024 tokens the segment (1024, 1088] is priced at 1025 and 1088 and interpolated inside
    for t in (1024, 1025, 1088):
        assert grid.step_s(step(t)) == exact.step_s(step(t))
    lin = lambda c, t: c._memo("common", "eager", True)(t)[0] + c._memo("prefill", "eager", True)(t)   # noqa: E731
    w = (1050 - 1025) / 63
    assert lin(grid, 1050) == pytest.approx(lin(exact, 1025) + w * (lin(exact, 1088) - lin(exact, 1025)), rel=1e-12)
    # inside a segment no GEMM changes its tiles or waves, so each GEMM's compute c is fixed and its operand time m
    # grows linearly with the tokens; everything else of the dense model is linear.  The smooth maximum (c^4 +
    # m^4)^(1/4) is convex in m: the chord between the grid points lies above it by (1050 - 1025)(1088 - 1050) / 2 x
    # f'', f'' = 3 c^4 m^2 m'^2 / (c^4 + m^4)^(7/4).  Llama 3 8B on H100 at 1050 tokens (c, m, m' per token):
    #   QKV 1050 x 6144 x 4096: 256x128 tiles, 240 in 2 waves: c 96.09 us, m 23.56 us, m' 6.72 ns: f'' 8.42e-14 /s
    #   o_proj 4096 x 4096: 128x64, 576 in 5 waves: 70.66 us, 16.65 us, 5.37 ns: 6.77e-14
    #   fc1 28672 x 4096: 128x256, 1008 in 8 waves: 384.37 us, 99.62 us, 21.50 ns: 2.40e-13
    #   fc2 4096 x 14336: 128x64, 576 in 5 waves: 244.58 us, 51.22 us, 12.09 ns: 7.84e-14
    # 475 x (0.842 + 0.677 + 2.404 + 0.784)e-13 s = 0.040 + 0.032 + 0.114 + 0.037 ns per layer, x 32 layers = 7.17 ns
    # above the exact 30.12 ms (2.4e-7; the hard maximum's pieces were linear here, exact to rounding).  So the grid
    # is exact on its points, and between them off by exactly its GEMMs' chords
    chords = []
    for n, k in ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)):
        lo, hi, mid = (gemm_ns(GemmShape(t, n, k), "H100") for t in (1025, 1088, 1050))
        chords.append(lo + w * (hi - lo) - mid)
    assert chords == pytest.approx([0.0401, 0.0323, 0.1144, 0.0373], abs=1e-4)
    excess = grid.step_s(step(1050)) - exact.step_s(step(1050))
    assert excess == pytest.approx(32 * sum(chords) * 1e-9, rel=1e-6)
    assert excess / exact.step_s(step(1050)) == pytest.approx(2.4e-7, abs=0.05e-7)


def test_a_segment_with_a_step_inside_is_halved_until_linear():
    # Qwen3-Next-80B on H200, TP 2, EP 2: inside the segment (6529, 6592] its expert GEMMs gain a tile row (128 -> 129
    # tokens per expert: 6554 tokens x 10 routed / 512 experts = 128.01), a step in the cost that a chord over the whole
    # segment smears by up to 3.5% of the step.  The midpoint 6560 disagrees with that chord, so the memo halves the
    # segment until each part's midpoint agrees (within 1e-5): every count then lands within 1e-5 of the exact price
    grid = cost_model("Qwen3-Next-80B", "H200", None, tp=2, ep=2)
    exact = cost_model("Qwen3-Next-80B", "H200", None, tp=2, ep=2, memo="exact")
    step = lambda t: BatchStep(t, t * (t + 1) / 2, 0, 0, 1)   # noqa: E731
    errors = [abs(grid.step_s(step(t)) / exact.step_s(step(t)) - 1) for t in range(6529, 6593)]
    assert max(errors) < 1e-5
    memo = grid._memos[next(k for k in grid._memos if k[0] == "common")]
    assert (6529, 6592) not in memo.linear and any(lo >= 6529 and hi <= 6592 for lo, hi in memo.linear)

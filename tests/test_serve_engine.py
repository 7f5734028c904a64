"""The serving engine against timelines derived by hand from a linear step cost (simulator.serve.step's
LinearStepCost): every step's duration is base + prefill_token x prefill tokens + attention x prefill attention +
decode_seq x decoding requests + decode_context x their context, so each step boundary, TTFT and TPOT below is
arithmetic in the comment beside it."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.serve.engine import Deployment, simulate
from simulator.serve.metrics import SLO, request_table, summarize, token_gaps
from simulator.serve.replica import SchedulerConfig
from simulator.serve.requests import Workload
from simulator.serve.step import LinearStepCost


def work(arrivals, prompts, outputs) -> Workload:
    return Workload(np.array(prompts), np.array(outputs), arrival_s=np.array(arrivals, dtype=float))


def run(workload, cost, scheduler="vllm", replicas=1, router="round_robin", prefill=0, **config):
    return simulate(workload, cost, Deployment(replicas, scheduler, router, prefill, SchedulerConfig(**config)))


def times(result):
    """First token and finish of each request, one flat list."""
    return [t for r in result.requests for t in (r.first_token, r.finish)]


def flat(pairs):
    return [x for pair in pairs for x in pair]


def steps(replica):
    return [(round(s, 9), round(d, 9), p, dec) for s, d, p, dec in
            zip(replica.log_start, replica.log_dur, replica.log_prefill, replica.log_decode)]


def test_two_requests_continuous_batching_vllm():
    # step = 0.01 + 0.001 x prefill tokens + 0.002 x decoding requests.  r0: prompt 10, 3 tokens, at 0; r1: prompt
    # 20, 2 tokens, at 0.005.  vLLM V0 runs prefills first and alone:
    #   [0, 0.02]      prefill r0: 0.01 + 0.010 = 0.02             -> r0's first token at 0.02
    #   [0.02, 0.05]   prefill r1 (arrived at 0.005): 0.01 + 0.020 -> r1's first token at 0.05 (r0 waits)
    #   [0.05, 0.064]  decode r0, r1: 0.01 + 2 x 0.002 = 0.014     -> r0 token 2, r1 token 2 = done at 0.064
    #   [0.064, 0.076] decode r0: 0.012                            -> r0 token 3 = done at 0.076
    cost = LinearStepCost(base_s=0.01, prefill_token_s=0.001, decode_seq_s=0.002)
    result = run(work([0.0, 0.005], [10, 20], [3, 2]), cost)
    assert steps(result.replicas[0]) == [(0.0, 0.02, 10, 0), (0.02, 0.03, 20, 0), (0.05, 0.014, 0, 2),
                                         (0.064, 0.012, 0, 1)]
    assert times(result) == pytest.approx(flat([(0.02, 0.076), (0.05, 0.064)]))
    table = request_table(result.requests)
    # TTFT 0.02 and 0.05 - 0.005 = 0.045; TPOT (0.076 - 0.02) / 2 = 0.028 and (0.064 - 0.05) / 1 = 0.014;
    # queueing: r1 first ran at 0.02, 0.015 after it arrived
    assert table.ttft == pytest.approx([0.02, 0.045])
    assert table.tpot == pytest.approx([0.028, 0.014])
    assert table.queueing == pytest.approx([0.0, 0.015])
    # inter-token gaps: r0 0.064 - 0.02 = 0.044, 0.076 - 0.064 = 0.012; r1 0.064 - 0.05 = 0.014
    assert sorted(token_gaps(result.requests, result.replicas)) == pytest.approx([0.012, 0.014, 0.044])
    summary = summarize(table, token_gaps(result.requests, result.replicas), SLO(ttft_s=0.03))
    # duration 0.076 (first arrival 0, last finish 0.076); 5 output tokens; r0 alone meets TTFT <= 0.03
    assert summary["requests_per_s"] == pytest.approx(2 / 0.076)
    assert summary["output_tokens_per_s"] == pytest.approx(5 / 0.076)
    assert summary["goodput_requests_per_s"] == pytest.approx(1 / 0.076)


def test_chunked_prefill_shares_a_step_with_decodes():
    # Sarathi, a budget of 8 tokens; step = 0.01 + 0.001 x prefill tokens + 1e-5 x prefill attention + 0.002 x
    # decodes + 1e-4 x their context.  r0: prompt 4, 3 tokens, at 0; r1: prompt 10, 2 tokens, at 0.001.
    #   step 1 at 0:       r0's prompt, 4 tokens, attention 4 x (0 + 5/2) = 10: 0.01 + 0.004 + 0.0001 = 0.0141
    #   step 2 at 0.0141:  r0 decodes (context 4) + r1's first chunk of 8 - 1 = 7 tokens, attention 7 x (0 + 8/2)
    #                      = 28: 0.01 + 0.007 + 0.00028 + 0.002 + 0.0004 = 0.01968 -> ends 0.03378
    #   step 3 at 0.03378: r0 decodes (context 5) + r1's last 3 tokens after 7, attention 3 x (7 + 4/2) = 27:
    #                      0.01 + 0.003 + 0.00027 + 0.002 + 0.0005 = 0.01577 -> ends 0.04955: r0 done, r1's first
    #   step 4 at 0.04955: r1 decodes (context 10): 0.01 + 0.002 + 0.001 = 0.013 -> ends 0.06255: r1 done
    cost = LinearStepCost(base_s=0.01, prefill_token_s=0.001, attention_s=1e-5, decode_seq_s=0.002,
                          decode_context_s=1e-4)
    result = run(work([0.0, 0.001], [4, 10], [3, 2]), cost, "sarathi", chunk_tokens=8, max_batch=4)
    assert steps(result.replicas[0]) == [(0.0, 0.0141, 4, 0), (0.0141, 0.01968, 7, 1), (0.03378, 0.01577, 3, 1),
                                         (0.04955, 0.013, 0, 1)]
    assert list(result.replicas[0].log_context) == [0, 4, 5, 10]
    assert times(result) == pytest.approx(flat([(0.0141, 0.04955), (0.04955, 0.06255)]))


def preemption_case(**config):
    # 4 blocks of 16 tokens (watermark int(0.01 x 4) = 0).  r0 and r1: prompt 16, 40 tokens, both at 0.
    # step = 0.01 + 0.001 x prefill tokens (decodes cost 0.01 each).
    cost = LinearStepCost(base_s=0.01, prefill_token_s=0.001, kv_capacity_tokens=64, kv_bytes_per_token=1e6)
    return run(work([0.0, 0.0], [16, 16], [40, 40]), cost, **config)


def test_preemption_by_recompute_when_blocks_run_out():
    #   [0, 0.042]  both prompts: 0.01 + 32 x 0.001; one block each, first tokens at 0.042
    #   decode step T (T = 0, 1, ...) writes position 16 + T: T = 0 takes one new block each (4 of 4 used);
    #   16 steps of 0.01 end at 0.202 with both at 17 tokens and 32 of KV.  Step T = 16 needs two blocks and none
    #   is free: the youngest running request (r1, admitted second) is preempted and freed (2 blocks), r0 takes 1.
    #   r0 decodes alone to its 40th token: 39 decode steps in all -> done at 0.042 + 39 x 0.01 = 0.432 (its block
    #   at position 48 is the last free one).  r1 waits (its recompute needs blocks(16 + 17) = 3), then recomputes
    #   33 tokens: [0.432, 0.475] = 0.01 + 0.033, sampling its 18th token, and decodes 22 more: done at
    #   0.475 + 22 x 0.01 = 0.695.
    result = preemption_case()
    (r0, r1) = result.requests
    assert (r0.preemptions, r1.preemptions) == (0, 1)
    assert r0.finish == pytest.approx(0.432)
    assert (r1.first_token, r1.finish) == pytest.approx((0.042, 0.695))
    rep = result.replicas[0]
    assert (rep.log_start[17], rep.log_decode[17]) == pytest.approx((0.202, 1))  # the step after the preemption
    assert (rep.log_start[-23], rep.log_prefill[-23], rep.log_dur[-23]) == pytest.approx((0.432, 33, 0.043))
    # r1's tokens: 0.042, 16 decodes to 0.202, its recompute's token at 0.475, 22 decodes to 0.695: the gap that
    # shows the preemption is 0.475 - 0.202 = 0.273
    gaps = token_gaps([r1], result.replicas)
    assert len(gaps) == 39 and max(gaps) == pytest.approx(0.273)
    assert request_table([r1]).tpot == pytest.approx([(0.695 - 0.042) / 39])


def test_preemption_by_swap_moves_the_kv_over_the_host_link():
    # As above, but r1's 32 tokens of KV go to the host: 32 x 1e6 B / 1e9 B/s = 0.032 s added to the step that
    # swaps them out ([0.202, 0.244]) and to the one that brings them back.  r0's remaining 22 decodes end at
    # 0.244 + 0.22 = 0.464, when r1 is swapped in (blocks(33) = 3 free of 4) and decodes: [0.464, 0.506] (0.01 +
    # 0.032), then 22 more: 0.726.  No recompute: r1's first token stays 0.042.
    result = preemption_case(preemption="swap", swap_bytes_per_s=1e9)
    (r0, r1) = result.requests
    assert r1.preemptions == 1
    assert r0.finish == pytest.approx(0.464)
    assert r1.finish == pytest.approx(0.726)
    rep = result.replicas[0]
    assert list(rep.log_swap).count(32) == 2
    assert rep.log_prefill[-1] == 0 and sum(rep.log_prefill) == 32  # nothing recomputed


def test_disaggregated_kv_transfer():
    # One prefill and one decode replica.  step = 0.01 + 0.001 x prefill tokens (decodes 0.01); moving KV takes
    # 0.005 + 1e-4 s per token.  r0 and r1: prompt 100, 3 tokens, at 0.
    #   prefill replica [0, 0.21]: both prompts (0.01 + 0.2): first tokens at 0.21
    #   KV of r0: [0.21, 0.225] (0.005 + 100 x 1e-4), then r1's on the same sender: [0.225, 0.24]
    #   decode replica: r0 from 0.225: tokens at 0.235 and 0.245 (done); r1's KV lands at 0.24, during that step, so
    #   r1 joins at 0.245: tokens at 0.255 and 0.265 (done)
    cost = LinearStepCost(base_s=0.01, prefill_token_s=0.001, transfer_s=0.005, transfer_token_s=1e-4)
    result = run(work([0.0, 0.0], [100, 100], [3, 3]), cost, replicas=2, prefill=1)
    (r0, r1) = result.requests
    assert [r0.first_token, r0.finish, r1.first_token, r1.finish] == pytest.approx([0.21, 0.245, 0.21, 0.265])
    assert (r0.prefill_replica, r0.replica) == (0, 1)
    decode = result.replicas[1]
    assert [round(s, 9) for s in decode.log_start] == [0.225, 0.235, 0.245, 0.255]
    assert list(decode.log_decode) == [1, 1, 1, 1]
    # r0's TPOT: (0.245 - 0.21) / 2 = 0.0175, the transfer inside its first gap (0.235 - 0.21 = 0.025); r1's first
    # gap holds its wait for the sender and the step in flight: 0.255 - 0.21 = 0.045
    assert request_table([r0, r1]).tpot == pytest.approx([0.0175, 0.0275])
    assert sorted(token_gaps([r1], result.replicas)) == pytest.approx([0.01, 0.045])
    assert result.replicas[0].free == result.replicas[0].total_blocks  # the prefill side freed the KV it sent


def test_orca_reserves_max_model_len():
    # step = 0.01 + 0.001 x prefill tokens + 0.002 x decodes; r0: prompt 4, 3 tokens, at 0; r1: prompt 6, 2 tokens,
    # at 0.005; Orca reserves max_model_len 16 = 1 block per request.
    cost = LinearStepCost(base_s=0.01, prefill_token_s=0.001, decode_seq_s=0.002, kv_capacity_tokens=32)
    #   [0, 0.014] r0's prompt; [0.014, 0.032] r0 decodes and r1 joins with its whole prompt: 0.01 + 0.006 + 0.002;
    #   [0.032, 0.046] both decode: r0's 3rd token and r1's 2nd: both done
    result = run(work([0.0, 0.005], [4, 6], [3, 2]), cost, "orca", max_model_len=16)
    assert times(result) == pytest.approx(flat([(0.014, 0.046), (0.032, 0.046)]))
    # with room for one reservation (16 tokens), r1 waits for r0: [0.014, 0.026], [0.026, 0.038] r0 decodes (done),
    # [0.038, 0.054] r1's prompt (0.01 + 0.006), [0.054, 0.066] its decode
    small = LinearStepCost(base_s=0.01, prefill_token_s=0.001, decode_seq_s=0.002, kv_capacity_tokens=16)
    result = run(work([0.0, 0.005], [4, 6], [3, 2]), small, "orca", max_model_len=16)
    assert times(result) == pytest.approx(flat([(0.014, 0.038), (0.054, 0.066)]))


def test_static_batch_runs_to_its_longest_request():
    # max_batch 2; r0: prompt 4, 3 tokens; r1: prompt 6, 1 token (both at 0); r2: prompt 4, 2 tokens at 0.001.
    #   [0, 0.02]      r0 + r1's prompts: 0.01 + 0.010; r1 is done at its first token (0.02) but keeps its slot
    #   [0.02, 0.034]  decode both (padding): 0.01 + 2 x 0.002;  [0.034, 0.048] again: r0 done, the batch ends
    #   [0.048, 0.062] r2's prompt: 0.01 + 0.004;  [0.062, 0.074] its decode: done
    cost = LinearStepCost(base_s=0.01, prefill_token_s=0.001, decode_seq_s=0.002)
    result = run(work([0.0, 0.0, 0.001], [4, 6, 4], [3, 1, 2]), cost, "static", max_batch=2)
    assert times(result) == pytest.approx(flat([(0.02, 0.048), (0.02, 0.02), (0.062, 0.074)]))
    assert list(result.replicas[0].log_decode) == [0, 2, 2, 0, 1]
    assert request_table(result.requests).queueing == pytest.approx([0.0, 0.0, 0.047])


def test_vllm_watermark_and_max_batch_hold_back_admission():
    # max_batch 1: r1 (at 0) waits until r0 is done although blocks are free.  step = 0.01 (everything else free)
    cost = LinearStepCost(base_s=0.01)
    result = run(work([0.0, 0.0], [8, 8], [2, 2]), cost, max_batch=1)
    # r0: prefill [0, 0.01], decode [0.01, 0.02]; r1: prefill [0.02, 0.03], decode [0.03, 0.04]
    assert times(result) == pytest.approx(flat([(0.01, 0.02), (0.03, 0.04)]))
    # 100 blocks, watermark 1% = 1 block: a prompt of 99 blocks (1584 tokens) is admitted (100 - 99 >= 1), 100 is not
    room = LinearStepCost(base_s=0.01, kv_capacity_tokens=1600)
    ok = run(work([0.0, 0.0], [1584, 16], [1, 1]), room)
    assert ok.replicas[0].log_prefill[0] == 1584  # the second prompt's block would break the watermark: next step
    assert list(ok.replicas[0].log_prefill) == [1584, 16]


def test_routers():
    # 2 replicas; step = 0.01 + 0.001 x prefill tokens; prompts of 48, 16, 16 tokens (3, 1, 1 blocks), 50 tokens
    cost = LinearStepCost(base_s=0.01, prefill_token_s=0.001, kv_capacity_tokens=160)
    w = work([0.0, 0.001, 0.002, 0.003], [48, 16, 16, 16], [50, 50, 50, 50])
    assert [r.replica for r in run(w, cost, replicas=2).requests] == [0, 1, 0, 1]
    # least outstanding: 0 (tie, lowest index), 1, then 0 and 1 again (one each)
    assert [r.replica for r in run(w, cost, replicas=2, router="least_outstanding").requests] == [0, 1, 0, 1]
    # KV-aware: r0 -> 0 (tie); r1 -> 1 (10 free blocks against 7); r2 at 0.002: replica 0 holds 3 blocks (7 free),
    # replica 1 one (9 free) -> 1; r3: 7 free against 8 -> 1
    assert [r.replica for r in run(w, cost, replicas=2, router="kv_aware").requests] == [0, 1, 1, 1]


def test_closed_loop_sends_the_next_request_when_one_finishes():
    # concurrency 1: request i arrives when request i - 1 finishes.  step 0.01; prompt 8, 2 tokens: 0.02 each
    cost = LinearStepCost(base_s=0.01)
    w = Workload(np.full(3, 8), np.full(3, 2), concurrency=1)
    result = simulate(w, cost, Deployment())
    assert [t for r in result.requests for t in (r.arrival, r.finish)] == pytest.approx([0, 0.02, 0.02, 0.04, 0.04,
                                                                                      0.06])


def test_a_request_larger_than_a_replica_is_refused():
    from utils.errors import ConfigError

    cost = LinearStepCost(base_s=0.01, kv_capacity_tokens=64)
    with pytest.raises(ConfigError, match="needs 80 tokens of KV cache"):
        run(work([0.0], [70], [10]), cost)


def test_pipeline_stages_run_as_virtual_engines():
    # pp 2: two schedulers per replica (vLLM's virtual engines), each with half of the KV cache (64 / 2 = 32 tokens,
    # 2 blocks).  Two requests (prompt 16, 2 tokens) at 0 go to one engine each and run side by side: prefill
    # [0, 0.01], decode [0.01, 0.02] on both.
    from utils.errors import ConfigError

    cost = LinearStepCost(base_s=0.01, kv_capacity_tokens=64)
    deployment = Deployment(1, "vllm", "round_robin", 0, SchedulerConfig(), engines=2)
    result = simulate(work([0.0, 0.0], [16, 16], [2, 2]), cost, deployment)
    assert [r.replica for r in result.requests] == [0, 1]
    assert [e.physical for e in result.replicas] == [0, 0] and [e.total_blocks for e in result.replicas] == [2, 2]
    assert times(result) == pytest.approx([0.01, 0.02, 0.01, 0.02])
    # a request of 40 + 1 tokens fits the replica's 64 but not an engine's 32
    with pytest.raises(ConfigError, match="needs 41 tokens of KV cache"):
        simulate(work([0.0], [40], [1]), cost, deployment)


@pytest.mark.parametrize("scheduler, preemption, prefill", [
    ("vllm", "recompute", 0), ("vllm", "swap", 0), ("sarathi", "recompute", 0), ("orca", "recompute", 0),
    ("static", "recompute", 0), ("vllm", "recompute", 1), ("sarathi", "recompute", 1), ("trtllm", "recompute", 0),
    ("trtllm", "recompute", 1)])
def test_invariants_under_memory_pressure(scheduler, preemption, prefill):
    # 300 requests on 2 replicas of 640 tokens of KV (40 blocks): every request finishes, each with exactly its
    # output tokens (counted from the token times the engine keeps), and every block is free again at the end
    rng = np.random.default_rng(7)
    n = 300
    w = work(np.cumsum(rng.exponential(0.004, n)), rng.integers(1, 200, n), rng.integers(1, 120, n))
    cost = LinearStepCost(base_s=0.002, prefill_token_s=1e-5, decode_seq_s=1e-4, kv_capacity_tokens=640,
                          kv_bytes_per_token=1e3, transfer_s=1e-3)
    result = run(w, cost, scheduler, replicas=2, prefill=prefill, preemption=preemption, max_batch=32,
                 chunk_tokens=64, max_model_len=320, max_batched_tokens=512)
    for req in result.requests:
        assert req.finish >= req.first_token >= req.arrival
        tokens = sum(1 if not isinstance(m, tuple) else m[2] - m[1] for m in req.marks)
        assert tokens == req.output, req.rid
    assert all(r.free == r.total_blocks for r in result.replicas)
    if scheduler in ("vllm", "sarathi") and not prefill:
        assert sum(r.preemptions for r in result.requests) > 0  # the case does exercise preemption


@pytest.mark.parametrize("scheduler, preemption, prefill", [
    ("vllm", "recompute", 0), ("vllm", "swap", 0), ("sarathi", "recompute", 0), ("trtllm", "recompute", 0),
    ("orca", "recompute", 0), ("static", "recompute", 0), ("sarathi", "recompute", 1)])
def test_invariants_with_speculative_decoding(scheduler, preemption, prefill):
    # the same pressure with 1.8 tokens per decode step (K = 1, a = 0.8): every request ends with exactly its output
    # tokens, its last step at most K tokens past them, and every block is free again
    rng = np.random.default_rng(7)
    n = 300
    w = work(np.cumsum(rng.exponential(0.004, n)), rng.integers(1, 200, n), rng.integers(1, 120, n))
    cost = LinearStepCost(base_s=0.002, prefill_token_s=1e-5, decode_seq_s=1e-4, kv_capacity_tokens=640,
                          kv_bytes_per_token=1e3, transfer_s=1e-3, tokens_per_decode_step=1.8, speculative_tokens=1)
    result = run(w, cost, scheduler, replicas=2, prefill=prefill, preemption=preemption, max_batch=32,
                 chunk_tokens=64, max_model_len=320, max_batched_tokens=512)
    for req in result.requests:
        assert req.finish >= req.first_token >= req.arrival
        assert req.gen == req.output, req.rid
        ticks = sum(1 if not isinstance(m, tuple) else m[2] - m[1] for m in req.marks)
        assert req.output <= ticks <= req.output + 1 or scheduler == "static", req.rid
    assert all(r.free == r.total_blocks for r in result.replicas)

"""Speculative decoding in the serving engine: a decode step emits the cost model's ``tokens_per_decode_step`` tokens
per sequence on average (``round((s + 1) tau) - round(s tau)`` in the replica's ``s``-th decode step), requests
finish when their tokens are out, KV blocks grow by the emitted tokens, and TPOT / ITL follow vLLM's definitions
(TPOT = (E2E - TTFT) / (output - 1); ITL = the gap between streamed chunks, one per step).  Every number is
arithmetic from a linear step cost, written out beside it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simulator.serve.cli import main
from simulator.serve.cost import accepted_tokens
from simulator.serve.engine import Deployment, simulate
from simulator.serve.metrics import request_table, token_gaps
from simulator.serve.replica import SchedulerConfig
from simulator.serve.requests import Workload
from simulator.serve.step import LinearStepCost
from utils.errors import ConfigError


def work(arrivals, prompts, outputs) -> Workload:
    return Workload(np.array(prompts), np.array(outputs), arrival_s=np.array(arrivals, dtype=float))


def run(workload, cost, scheduler="vllm", **config):
    return simulate(workload, cost, Deployment(1, scheduler, "round_robin", 0, SchedulerConfig(**config)))


def log(replica):
    """(start, duration, prefill tokens, decodes, their context, KV blocks in use) of each step."""
    return [(round(s, 9), round(d, 9), p, n, c, kv) for s, d, p, n, c, kv in
            zip(replica.log_start, replica.log_dur, replica.log_prefill, replica.log_decode, replica.log_context,
                replica.log_kv)]


def test_two_tokens_per_step_finish_kv_tpot_and_itl():
    # K = 1 draft token, always accepted: (1 - 1^2) / (1 - 1) -> K + 1 = 2 tokens per step.
    # step = 0.01 + 0.001 x prefill tokens + 0.002 x decodes + 0.0001 x their context; one request, prompt 10,
    # 9 output tokens:
    #   [0, 0.02]        prefill 10 tokens: 0.01 + 0.010 = 0.02    -> token 1; KV 10 tokens = 1 block
    #   [0.02, 0.033]    decode, context 10: 0.01 + 0.002 + 0.0010 -> tokens 2, 3 (positions 10, 11: block 1)
    #   [0.033, 0.0462]  context 12: 0.0132                        -> tokens 4, 5 (12, 13)
    #   [0.0462, 0.0596] context 14: 0.0134                        -> tokens 6, 7 (14, 15)
    #   [0.0596, 0.0732] context 16: 0.0136; position 16 opens block 2 before the step -> tokens 8, 9: done
    assert accepted_tokens(1, 1.0) == 2.0
    cost = LinearStepCost(base_s=0.01, prefill_token_s=0.001, decode_seq_s=0.002, decode_context_s=1e-4,
                          tokens_per_decode_step=2.0, speculative_tokens=1)
    result = run(work([0.0], [10], [9]), cost)
    replica = result.replicas[0]
    assert log(replica) == [(0.0, 0.02, 10, 0, 0, 1), (0.02, 0.013, 0, 1, 10, 1), (0.033, 0.0132, 0, 1, 12, 1),
                            (0.0462, 0.0134, 0, 1, 14, 1), (0.0596, 0.0136, 0, 1, 16, 2)]
    req = result.requests[0]
    assert (req.first_token, req.finish, req.gen) == (pytest.approx(0.02), pytest.approx(0.0732), 9)
    # TPOT (0.0732 - 0.02) / (9 - 1) = 0.00665; the four chunks' gaps are the steps: 0.013, 0.0132, 0.0134, 0.0136
    assert request_table(result.requests).tpot == pytest.approx([0.00665])
    assert sorted(token_gaps(result.requests, result.replicas)) == pytest.approx([0.013, 0.0132, 0.0134, 0.0136])
    assert replica.free == replica.total_blocks  # both blocks back


def test_fractional_rate_and_a_last_step_past_the_output():
    # K = 1, acceptance 0.8: (1 - 0.8^2) / (1 - 0.8) = 1.8 tokens per step; steps s = 0, 1, 2 emit round(1.8) - 0
    # = 2, round(3.6) - 2 = 2, round(5.4) - 4 = 1.  step = 0.01 + 0.001 x prefill tokens + 0.002 x decodes.
    # r0: prompt 4, 6 tokens, at 0; r1: prompt 6, 4 tokens, at 0 (vLLM V0: both prefills in one step)
    #   [0, 0.02]      prefill 4 + 6: 0.01 + 0.010 = 0.02 -> token 1 of each
    #   [0.02, 0.034]  s = 0, 2 tokens each: 0.01 + 2 x 0.002 -> r0 3, r1 3
    #   [0.034, 0.048] s = 1, 2 tokens each                   -> r0 5, r1 5 > 4: r1 done at 0.048 (its 4 tokens)
    #   [0.048, 0.060] s = 2, 1 token: 0.01 + 0.002           -> r0 6: done at 0.060
    tau = accepted_tokens(1, 0.8)
    assert tau == pytest.approx(1.8)
    cost = LinearStepCost(base_s=0.01, prefill_token_s=0.001, decode_seq_s=0.002, tokens_per_decode_step=tau,
                          speculative_tokens=1)
    result = run(work([0.0, 0.0], [4, 6], [6, 4]), cost)
    assert [row[:4] for row in log(result.replicas[0])] == [(0.0, 0.02, 10, 0), (0.02, 0.014, 0, 2),
                                                             (0.034, 0.014, 0, 2), (0.048, 0.012, 0, 1)]
    r0, r1 = result.requests
    assert (r0.finish, r0.gen, r1.finish, r1.gen) == (pytest.approx(0.060), 6, pytest.approx(0.048), 4)
    # TPOT r0 (0.060 - 0.02) / 5 = 0.008, r1 (0.048 - 0.02) / 3 = 0.009333
    assert request_table(result.requests).tpot == pytest.approx([0.008, 0.028 / 3])


def test_chunked_prefill_budget_counts_the_verified_tokens():
    # Sarathi with a budget of 8 tokens, K = 1 (2 tokens per step, a = 1): each decode takes 1 + K = 2 tokens of the
    # budget.  step = 0.01 + 0.001 x prefill tokens + 0.002 x decodes.  r0: prompt 4, 5 tokens, at 0; r1: prompt
    # 10, 2 tokens, at 0.001.
    #   [0, 0.014]      r0's prompt: 0.01 + 0.004                       -> r0 token 1
    #   [0.014, 0.032]  r0 decodes (2 of 8) + r1's first 6 tokens: 0.01 + 0.006 + 0.002 -> r0 3
    #   [0.032, 0.048]  r0 decodes + r1's last 4: 0.01 + 0.004 + 0.002  -> r0 5: done; r1 token 1
    #   [0.048, 0.060]  r1 decodes: 0.012, 2 tokens for the 1 it needs  -> r1 done
    cost = LinearStepCost(base_s=0.01, prefill_token_s=0.001, decode_seq_s=0.002, tokens_per_decode_step=2.0,
                          speculative_tokens=1)
    result = run(work([0.0, 0.001], [4, 10], [5, 2]), cost, "sarathi", chunk_tokens=8, max_batch=4)
    assert [row[:4] for row in log(result.replicas[0])] == [(0.0, 0.014, 4, 0), (0.014, 0.018, 6, 1),
                                                             (0.032, 0.016, 4, 1), (0.048, 0.012, 0, 1)]
    assert [(r.first_token, r.finish) for r in result.requests] == [
        (pytest.approx(0.014), pytest.approx(0.048)), (pytest.approx(0.048), pytest.approx(0.060))]


def test_serve_flags(tmp_path, capsys):
    # --speculative_tokens 1 --acceptance_rate 1 on a linear profile: 2 tokens per step, so a request of prompt 10
    # and 9 tokens takes a 0.02 s prefill and 4 decode steps of 0.012 s: E2E 0.068, TPOT 0.048 / 8 = 0.006
    path = tmp_path / "cost.json"
    path.write_text(json.dumps({"base_s": 0.01, "prefill_token_s": 0.001, "decode_seq_s": 0.002,
                                "kv_capacity_tokens": 1600}))
    base = ["--gpu_type", "H100", "--model_name", "llama3_8B", "--step_cost", str(path), "--concurrency", "1",
            "--num_requests", "1", "--prompt_tokens", "10", "--output_tokens", "9"]
    assert main([*base, "--speculative_tokens", "1", "--acceptance_rate", "1", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["e2e_p50_s"] == pytest.approx(0.068)
    assert figures["tpot_p50_s"] == pytest.approx(0.006)
    assert figures["configuration"]["tokens_per_decode_step"] == 2.0
    for flags, message in ((["--speculative_tokens", "2"], "needs --acceptance_rate"),
                           (["--acceptance_rate", "0.7"], "needs --speculative_tokens"),
                           (["--speculative_tokens", "2", "--acceptance_rate", "1.5"], "must be in [0, 1]")):
        with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
            main([*base, *flags])


def test_cost_model_tokens_reach_the_engine():
    # the step-cost model's tokens_per_decode_step (DeepSeek-style MTP or an EAGLE head of the target's shape):
    # Llama 3 8B, K = 2 at a = 0.5 emits (1 - 0.5^3) / 0.5 = 1.75 tokens per step; 175 tokens after the first
    # take 100 decode steps (round(100 x 1.75) = 175)
    from simulator.options import TopoOptions
    from simulator.serve.cost import cost_model

    cost = cost_model("llama3_8B", "H100", None, options=TopoOptions(gpus_per_server=8), speculative_tokens=2,
                      acceptance_rate=0.5)
    assert cost.tokens_per_decode_step == pytest.approx(1.75)
    result = run(work([0.0], [100], [176]), cost)
    assert result.replicas[0].decode_steps == 100
    assert result.requests[0].gen == 176

"""TensorRT-LLM's scheduling (``--scheduler trtllm``): the default ``GUARANTEED_NO_EVICT`` capacity policy reserves
each request's prompt and whole output at admission and never preempts; the micro-batch scheduler's
``max_num_tokens`` budget takes decodes first and whole prompts (no context chunking); and ``trtllm-bench``'s own
choice of ``max_batch_size`` / ``max_num_tokens`` (:func:`simulator.serve.trtllm.bench_settings`).  Timelines from
a linear step cost, the arithmetic beside each number."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.serve.engine import Deployment, simulate
from simulator.serve.replica import SchedulerConfig
from simulator.serve.requests import Workload
from simulator.serve.step import LinearStepCost
from simulator.serve.trtllm import bench_settings, finetune
from simulator.serve.validation import TRT_SETTINGS
from utils.errors import ConfigError


def work(arrivals, prompts, outputs) -> Workload:
    return Workload(np.array(prompts), np.array(outputs), arrival_s=np.array(arrivals, dtype=float))


def run(workload, cost, scheduler="trtllm", **config):
    return simulate(workload, cost, Deployment(1, scheduler, "round_robin", 0, SchedulerConfig(**config)))


def test_guaranteed_no_evict_holds_a_request_until_its_whole_output_fits():
    # 64 tokens of KV = 4 blocks of 16.  r0 and r1: prompt 20, 20 tokens each -> each reserves ceil(40 / 16) = 3
    # blocks; r1 does not fit the 1 left and waits for r0 to finish.
    # step = 0.01 + 0.001 x prefill tokens + 0.002 x decodes:
    #   [0, 0.03]       r0's prompt: 0.01 + 0.020                      -> token 1
    #   19 decodes of 0.012 -> r0 done at 0.03 + 0.228 = 0.258, its 3 blocks free
    #   [0.258, 0.288]  r1's prompt -> token 1; 19 decodes -> done at 0.288 + 0.228 = 0.516
    cost = LinearStepCost(base_s=0.01, prefill_token_s=0.001, decode_seq_s=0.002, kv_capacity_tokens=64)
    result = run(work([0.0, 0.0], [20, 20], [20, 20]), cost, max_batch=8, max_batched_tokens=64)
    r0, r1 = result.requests
    assert (r0.first_token, r0.finish) == (pytest.approx(0.03), pytest.approx(0.258))
    assert (r1.first_token, r1.finish) == (pytest.approx(0.288), pytest.approx(0.516))
    assert r0.preemptions == r1.preemptions == 0
    assert max(result.replicas[0].log_kv) == 3  # one request's 3 reserved blocks at a time
    # vLLM's paged admission takes both at once (2 blocks each for the prompts); both reach position 32 in the same
    # decode step, need a third block each with none free, and the younger is preempted
    paged = run(work([0.0, 0.0], [20, 20], [20, 20]), cost, "vllm", max_batch=8, max_batched_tokens=64)
    assert sum(r.preemptions for r in paged.requests) > 0


def test_budget_takes_decodes_first_and_whole_prompts():
    # max_num_tokens 16: r0 (prompt 8, 3 tokens, at 0) decodes from its second step; r1 (prompt 15, 2 tokens, at
    # 0.001) fits the budget only without r0's decode token (16 - 1 = 15 >= 15).  step = 0.01 + 0.001 x prefill +
    # 0.002 x decodes:
    #   [0, 0.018]      r0's prompt 8: 0.018                          -> r0 token 1
    #   [0.018, 0.045]  r0 decodes (1 of 16) + r1's 15: 0.01 + 0.015 + 0.002 -> r0 2, r1 1
    #   [0.045, 0.059]  both decode: 0.014                            -> r0 3 done, r1 2 done
    cost = LinearStepCost(base_s=0.01, prefill_token_s=0.001, decode_seq_s=0.002)
    result = run(work([0.0, 0.001], [8, 15], [3, 2]), cost, max_batch=8, max_batched_tokens=16)
    assert [(r.first_token, r.finish) for r in result.requests] == [
        (pytest.approx(0.018), pytest.approx(0.059)), (pytest.approx(0.045), pytest.approx(0.059))]
    # without context chunking a prompt larger than max_num_tokens can never run: refused up front
    with pytest.raises(ConfigError, match="TensorRT-LLM refuses it"):
        run(work([0.0], [17], [2]), cost, max_batch=8, max_batched_tokens=16)


def test_trtllm_bench_settings():
    # Llama 3 8B FP8 (weights and KV) on one H100 (80 GiB), ISL 1000 / OSL 1000, --kv_cache_free_gpu_mem_fraction 0.9:
    #   KV per token: 2 x 32 layers x 8 heads x 128 x 1 B = 65,536 B; engine 8,030,261,248 params x 1 B = 7.479 GiB
    #   cache (80 - 7.479) x 0.9 = 65.27 GiB = 1,069,357 tokens = 534.7 requests of 2000 tokens
    #   batch: 534.7 in [256, 1024) -> 128 x ceil(4.18) = 640; tokens 534.7 x (1 + 1) = 1069 < 4096 -> max(2048,
    #   256 x ceil(4.18) = 1280) = 2048
    assert bench_settings("llama3_8B", "H100", 1000, 1000, dtype="float8", kv_dtype="float8") == (640, 2048)
    # ISL 2048 / OSL 128: 1,069,357 / 2176 = 491.4 requests -> 128 x 4 = 512; 491.4 x 17 = 8354 -> 1024 x 9 = 9216
    assert bench_settings("llama3_8B", "H100", 2048, 128, dtype="float8", kv_dtype="float8") == (512, 9216)
    # the rounding itself: 40 requests -> max(64, 32 x 2) = 64; 3000 -> 256 x 12 = 3072; tokens capped at 32768
    assert finetune(40, 100, 100) == (64, 2048)
    assert finetune(3000, 2000, 100) == (3072, 32768)
    for (model, gpu, tp, isl, osl), settings in TRT_SETTINGS.items():
        assert bench_settings(model, gpu, isl, osl, tp=tp, dtype="float8", kv_dtype="float8") == settings

"""``python -m simulator validate --suite serving``: published serving benchmarks through ``python -m simulator
serve``, each with its source, the configuration assumed and the metric compared.  Nothing was fitted to them:
the step costs are the compute model's and the topology's (:mod:`simulator.serve.cost`), the scheduling the
engine's.

Sources (numbers as published; the command of each row reproduces it):

- ``vllm-nightly``: vLLM's performance benchmark (buildkite vllm/performance-benchmark build 9515, H200): latency
  tests (``benchmark_latency.py``: one batch of 8 requests of 32 prompt and 128 output tokens; mean end-to-end
  latency) and throughput tests (``benchmark_throughput.py``: 200 ShareGPT prompts sent at once; requests per
  second).  Llama-3 70B TP4, Llama-3.1 8B TP1, Mixtral 8x7B TP2, bf16.  The engine of that build is vLLM V1 (chunked
  prefill, CUDA graphs) run offline (the ``LLM`` class): ``--scheduler sarathi --chunk_tokens 16384 --max_batch
  1024``, V1's defaults for the ``LLM`` class on GPUs of 70 GiB or more other than the A100
  (``vllm/engine/arg_utils.py``, ``get_batch_defaults``: 16384 batched tokens and 1024 sequences).  The throughput
  test (``.buildkite/nightly-benchmarks/tests/throughput-tests.json``: ``num_prompts`` 200, ``load_format`` dummy,
  ``backend`` vllm) runs ``benchmark_throughput.py``: 200 ShareGPT requests sampled with seed 0 (first human turn as
  the prompt, the answer's token count as ``max_tokens`` with ``ignore_eos``), all given to ``LLM.generate`` at
  once; requests/s = 200 / the time to the last answer.  The ShareGPT rows draw their lengths from our ``sharegpt``
  preset (its means are the dataset's; its spread an assumption: no statistics of the 200 sampled requests are
  published), so they test that preset more than the step model: with all 200 requests running at once the run
  ends when the longest answer does, and over half of the simulated run decodes 32 requests or fewer.  The published
  latency rows (8 requests, 128 tokens) put a decode step of these layouts at 6.5-19.1 ms (latency / 128), and no
  step of a run is shorter than a decode of a few requests, so the published throughput rows (200 / requests/s =
  8.9-22.6 s) bound the sample's longest answer at about 1,180-1,360 Llama-3 tokens (makespan / step); the
  preset's seed-0 sample holds one of 1,706 tokens.
- ``vllm-nightly-h100``: the same benchmark on H100 (the report as stored under
  buildkite.com/elastic/enterprise-search-ruby/builds/571, whose content is vLLM's performance-benchmark page).
- ``nim``: NVIDIA NIM LLM benchmarking, performance page (docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance):
  Llama-3.3-70B-Instruct, NIM 1.8.0, 2 x H100 80G, FP8, TP2, 5000 input / 500 output tokens, AIPerf at fixed
  concurrency: TTFT, ITL (AIPerf's: (latency - TTFT) / (output - 1), i.e. TPOT) and output tokens/s.  NIM runs
  TensorRT-LLM's in-flight batching: ``--scheduler sarathi --chunk_tokens 8192``; FP8 weights and, as the ``trtllm``
  rows, an FP8 KV cache (assumed: NIM builds its FP8 profiles from the same ModelOpt checkpoints; with a bf16 KV
  cache the replica holds half the tokens and the rows at concurrency 50 and 250 run out of KV);
  requests: 10 x the concurrency (at least 100), the first ``concurrency`` of them a warm-up left out of the
  figures (``--warmup_requests``, AIPerf's ``--warmup-request-count``: the clients all start at once, and that
  burst's queue is not the steady state the table reports; the page does not state its request counts).
- ``trtllm``: TensorRT-LLM's performance overview (NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md at
  00f37686): ``trtllm-bench throughput`` with every request queued at once, output tokens/s, ModelOpt FP8
  checkpoints (FP8 weights; FP8 KV assumed), the request counts of its table.  ``--scheduler trtllm``: TensorRT-LLM's
  default capacity policy ``GUARANTEED_NO_EVICT`` (each request reserves its prompt and whole output; nothing is
  preempted) without context chunking (its default); ``--max_batch`` / ``--max_batched_tokens`` are the
  ``max_batch_size`` / ``max_num_tokens`` trtllm-bench derives from the dataset and the KV memory
  (:func:`simulator.serve.trtllm.bench_settings`, its ``calc_engine_setting`` at the default
  ``--kv_cache_free_gpu_mem_fraction`` 0.90; ``tests/test_serve_trtllm.py`` checks the table below against it).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

_NIGHTLY = "vLLM performance-benchmark (buildkite vllm/performance-benchmark build 9515), H200"
_NIGHTLY_H100 = "vLLM performance-benchmark on H100 (stored under buildkite.com/elastic/enterprise-search-ruby/builds/571)"
_NIM = "NVIDIA NIM benchmarking performance page, Llama-3.3-70B-Instruct NIM 1.8.0, 2 x H100 FP8 TP2, 5000/500"
_TRTLLM = "TensorRT-LLM perf-overview.md (00f37686), trtllm-bench throughput, FP8"
_V1 = ("--scheduler", "sarathi", "--chunk_tokens", "16384", "--max_batch", "1024")
_TRT = ("--scheduler", "trtllm", "--dtype", "float8", "--kv_dtype", "float8")
TRT_SETTINGS = {("llama3_8B", "H100", 1, 1000, 1000): (640, 2048), ("llama3_8B", "H100", 1, 2048, 128): (512, 9216),
                ("llama3_8B", "H100", 1, 128, 2048): (512, 2048), ("llama3_70B", "H100", 2, 1000, 1000): (384, 2048),
                ("llama3_70B", "H100", 2, 2048, 128): (256, 4608), ("llama3_70B", "H100", 2, 128, 2048): (256, 2048),
                ("llama3_70B", "H200", 1, 1000, 1000): (224, 2048)}
"""(model, GPU, TP, ISL, OSL) -> trtllm-bench's (max_batch_size, max_num_tokens): ``bench_settings``' values."""


@dataclass(frozen=True)
class ServingCase:
    """One published figure: its name, source, the metric (a key of the run's figures), the published value in
    the metric's unit (seconds, requests/s, tokens/s), and the ``serve`` flags that reproduce the setup."""

    name: str
    source: str
    metric: str
    published: float
    flags: tuple[str, ...]

    def argv(self) -> list[str]:
        return ["-g_p_s", "8", *self.flags, "-q"]

    def command(self) -> str:
        return "python -m simulator serve " + shlex.join([*self.argv()[:-1], "--json"])


def _latency(gpu: str, model: str, tp: int, ms: float, source: str) -> ServingCase:
    return ServingCase(f"vLLM latency {model} TP{tp} {gpu}", source, "e2e_mean_s", ms / 1e3,
                       ("--gpu_type", gpu, "--model_name", model, "--tensor_model_parallel_size", str(tp), *_V1,
                        "--concurrency", "8", "--num_requests", "8", "--prompt_tokens", "32", "--output_tokens", "128"))


def _throughput(gpu: str, model: str, tp: int, rps: float, source: str) -> ServingCase:
    return ServingCase(f"vLLM throughput {model} TP{tp} {gpu} ShareGPT", source, "requests_per_s", rps,
                       ("--gpu_type", gpu, "--model_name", model, "--tensor_model_parallel_size", str(tp), *_V1,
                        "--concurrency", "200", "--num_requests", "200", "--dataset", "sharegpt"))


def _nim(concurrency: int, metric: str, value: float) -> ServingCase:
    label = {"ttft_mean_s": "TTFT", "tpot_mean_s": "ITL", "output_tokens_per_s": "throughput"}[metric]
    return ServingCase(f"NIM 70B FP8 TP2 H100 c{concurrency} {label}", _NIM, metric, value,
                       ("--gpu_type", "H100", "--model_name", "llama3_70B", "--tensor_model_parallel_size", "2",
                        "--dtype", "float8", "--kv_dtype", "float8", "--scheduler", "sarathi", "--chunk_tokens", "8192",
                        "--concurrency",
                        str(concurrency), "--num_requests", str(max(10 * concurrency, 100)), "--prompt_tokens", "5000",
                        "--output_tokens", "500", "--warmup_requests", str(concurrency)))


def _trt(gpu: str, model: str, tp: int, isl: int, osl: int, requests: int, tokens_per_s: float) -> ServingCase:
    batch, tokens = TRT_SETTINGS[(model, gpu, tp, isl, osl)]
    return ServingCase(f"TRT-LLM {model} TP{tp} {gpu} {isl}/{osl}", _TRTLLM, "output_tokens_per_s", tokens_per_s,
                       ("--gpu_type", gpu, "--model_name", model, "--tensor_model_parallel_size", str(tp), *_TRT,
                        "--max_batch", str(batch), "--max_batched_tokens", str(tokens), "--concurrency", str(requests),
                        "--num_requests", str(requests), "--prompt_tokens", str(isl), "--output_tokens", str(osl)))


CASES: list[ServingCase] = [
    _latency("H200", "llama3_8B", 1, 833.421, _NIGHTLY),
    _latency("H200", "llama3_70B", 4, 2077.53, _NIGHTLY),
    _latency("H200", "mixtral_8x7B", 2, 1917.44, _NIGHTLY),
    _throughput("H200", "llama3_8B", 1, 22.5674, _NIGHTLY),
    _throughput("H200", "llama3_70B", 4, 9.83905, _NIGHTLY),
    _throughput("H200", "mixtral_8x7B", 2, 8.06251, _NIGHTLY),
    _latency("H100", "llama3_8B", 1, 997.542, _NIGHTLY_H100),
    _latency("H100", "llama3_70B", 4, 2444.47, _NIGHTLY_H100),
    _latency("H100", "mixtral_8x7B", 2, 2326.97, _NIGHTLY_H100),
    _throughput("H100", "llama3_8B", 1, 19.5005, _NIGHTLY_H100),
    _throughput("H100", "llama3_70B", 4, 8.86239, _NIGHTLY_H100),
    _throughput("H100", "mixtral_8x7B", 2, 8.15186, _NIGHTLY_H100),
    _nim(1, "ttft_mean_s", 0.40677), _nim(1, "tpot_mean_s", 0.01858), _nim(1, "output_tokens_per_s", 51.67),
    _nim(25, "ttft_mean_s", 0.68869), _nim(25, "tpot_mean_s", 0.03875), _nim(25, "output_tokens_per_s", 623.4),
    _nim(50, "ttft_mean_s", 0.83451), _nim(50, "tpot_mean_s", 0.05973), _nim(50, "output_tokens_per_s", 814.37),
    _nim(250, "tpot_mean_s", 0.0932), _nim(250, "output_tokens_per_s", 920.12),
    _trt("H100", "llama3_8B", 1, 1000, 1000, 3000, 15220),
    _trt("H100", "llama3_8B", 1, 2048, 128, 3000, 3450),
    _trt("H100", "llama3_8B", 1, 128, 2048, 3000, 22714),
    _trt("H100", "llama3_70B", 2, 1000, 1000, 3000, 4205),
    _trt("H100", "llama3_70B", 2, 2048, 128, 3000, 762),
    _trt("H100", "llama3_70B", 2, 128, 2048, 3000, 6651),
    _trt("H200", "llama3_70B", 1, 1000, 1000, 3000, 2909),
]
SOURCES = {"vllm-nightly": _NIGHTLY, "vllm-nightly-h100": _NIGHTLY_H100, "nim": _NIM, "trtllm": _TRTLLM}
KINDS = {"e2e_mean_s": "latency", "ttft_mean_s": "TTFT", "tpot_mean_s": "TPOT", "requests_per_s": "throughput",
         "output_tokens_per_s": "throughput"}


def run_case(case: ServingCase) -> dict:
    """Simulate ``case``'s command; its row (published and simulated in the metric's unit, the error in %)."""
    from simulator.serve.cli import build_parser, simulate_args

    args = build_parser().parse_args(case.argv())
    _result, _table, summary, _config = simulate_args(args)
    simulated = summary[case.metric]
    return {"case": case.name, "source": case.source, "suite": "serving", "metric": case.metric,
            "published": case.published, "simulated": simulated, "error_pct": (simulated / case.published - 1) * 100,
            "command": case.command()}


def main(json_out: bool, show: bool, pattern: str | None) -> int:
    """Run the cases (those whose name contains ``pattern``), print a row each and the mean |error| per kind."""
    cases = [c for c in CASES if pattern is None or pattern.lower() in c.name.lower()]
    if not cases:
        from utils.errors import ConfigError

        raise ConfigError(f"--cases {pattern!r} matches none of: {', '.join(c.name for c in CASES)}")
    rows = []
    for case in cases:
        row = run_case(case)
        rows.append(row)
        if not json_out:
            unit, scale = _unit(case.metric)
            print(f"{row['case']:<44} {case.published * scale:>10.1f} {unit:<6} {row['simulated'] * scale:>10.1f} "
                  f"{unit:<6} {row['error_pct']:>+7.1f}%", flush=True)
            if show:
                print(f"    {row['command']}")
    if json_out:
        print(json.dumps(rows))
        return 0
    for kind in dict.fromkeys(KINDS.values()):
        errors = [abs(r["error_pct"]) for r in rows if KINDS[r["metric"]] == kind]
        if errors:
            print(f"{kind}: {len(errors)} figures, mean |error| {sum(errors) / len(errors):.1f}%, max {max(errors):.1f}%")
    return 0


def _unit(metric: str) -> tuple[str, float]:
    if metric.endswith("_s") and not metric.endswith("per_s"):
        return "ms", 1e3
    return ("req/s", 1.0) if metric == "requests_per_s" else ("tok/s", 1.0)


__all__: Sequence[str] = ("CASES", "TRT_SETTINGS", "ServingCase", "main", "run_case")

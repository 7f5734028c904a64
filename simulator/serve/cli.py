"""``python -m simulator serve``: serve a stream of requests on replicas of a model and report latency,
throughput and goodput.

    python -m simulator serve -t topo.txt --gpu_type H100 --model_name llama3_70B --tensor_model_parallel_size 4 \\
        --replicas 8 --qps 20 --num_requests 10000 --slo_ttft 2 --slo_tpot 0.05 -o run/ --json

One of ``--qps X`` (Poisson, or gamma with ``--burstiness``), ``--concurrency C`` (closed loop) or ``--trace FILE``
gives the arrivals; ``--prompt_tokens/--output_tokens`` (fixed) or ``--dataset NAME`` the lengths.  Step times
come from the step-cost model (:mod:`simulator.serve.cost`) for the model, GPU, layout and topology (``-t FILE``,
or ``-g_p_s N`` to derive a two-tier fabric as the simulator does).  Prints a summary (``--json``: one JSON object on
the last line) and with ``-o DIR`` writes ``requests.csv``, ``steps.csv``, ``summary.json``, ``trace.json`` and
``report.html`` (:mod:`simulator.serve.outputs`).  Bad input ends with one line and exit status 2, before any file
is written.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from utils.cli import CliParser, non_negative_int, positive_int, positive_number
from utils.errors import ConfigError

PROG = "simulator serve"
JSON_KEYS = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p50_s", "output_tokens_per_s",
             "requests_per_s")
"""Keys ``--json`` always prints (issue 27's interface), and ``goodput_requests_per_s`` with SLOs."""
HOST_LINK_GBPS = {"A100": 32.0, "A100_40G": 32.0, "A800": 32.0, "H100": 64.0, "H100_PCIE": 64.0, "H800": 64.0,
                  "H20": 64.0, "H200": 64.0, "B200": 64.0, "GB200": 450.0, "B300": 128.0, "GB300": 450.0}
"""GPU <-> host bytes/s per direction (GB/s) for swap preemption: PCIe Gen4 x16 (A100/A800: 'PCIe Gen4: 64GB/s',
both directions, NVIDIA A100 datasheet), PCIe Gen5 x16 (H100/H800/H20/H200/B200: 'PCIe Gen5: 128GB/s', NVIDIA
H100 and H200 datasheets; HGX B200 links each GPU to the host over Gen5 x16), PCIe Gen6 x16 (B300: 256 GB/s both
directions, Blackwell Ultra's host interface), NVLink-C2C to Grace (GB200, GB300: 900 GB/s both directions, the
NVL72 datasheets)."""


def add_deployment_flags(p: argparse.ArgumentParser, search: bool = False) -> None:
    """The model, GPU and fabric flags ``serve`` and ``serve-search`` share."""
    p.add_argument("-t", "--topology", metavar="FILE", help="SimAI topology file (python -m topo.gen)")
    p.add_argument("-g_p_s", "--gpus_per_server", "--gpus-per-server", type=positive_int, metavar="N",
                   help="without -t: derive a two-tier fabric of N GPUs per server (as python -m simulator does)")
    p.add_argument("-n_p_s", "--nics_per_server", "--nics-per-server", type=positive_int, metavar="N",
                   help="derived fabric: NICs per server (default one per GPU)")
    p.add_argument("-nv", "--nvlink_bw", "--nvlink-bw", type=positive_number, metavar="GIBPS",
                   help="derived fabric: NVLink busbw in GiB/s (default by GPU type)")
    p.add_argument("-nic", "--nic_busbw", "--nic-busbw", type=positive_number, metavar="GIBPS",
                   help="derived fabric: busbw of one NIC in GiB/s (default by NIC type)")
    p.add_argument("--gpu_type", "--gpu-type", "-g_type", required=not search, metavar="GPU",
                   help="GPU type (H100, H200, A100, B200, ...)" + ("; a comma list to compare" if search else ""))
    p.add_argument("--model_name", "--model-name", "-m", required=True, metavar="NAME",
                   help="model preset (llama3_70B, mixtral_8x7B, deepseek_v3, qwen3_235B_A22B, ...) or AICB name")
    p.add_argument("--dtype", choices=("bfloat16", "float8", "float4"), help="weights (default: the model's own)")
    p.add_argument("--kv_dtype", "--kv-dtype", choices=("bfloat16", "float8"), default="bfloat16",
                   help="KV cache (default bfloat16)")
    p.add_argument("--step_cost", "--step-cost", metavar="FILE.json",
                   help="price steps with a linear profile instead of the compute model: a JSON object of "
                        "simulator.serve.step.LinearStepCost's fields (seconds, tokens)")
    p.add_argument("--eager", action="store_true", help="no CUDA graphs (vLLM's --enforce-eager): eager host time per step")
    p.add_argument("--speculative_tokens", "--speculative-tokens", type=non_negative_int, default=0, metavar="K",
                   help="speculative decoding (MTP / EAGLE-style draft): K draft tokens verified per sequence per "
                        "decode step (default 0: off); needs --acceptance_rate")
    p.add_argument("--acceptance_rate", "--acceptance-rate", type=float, default=None, metavar="A",
                   help="probability that each draft token is accepted (0-1): a decode step emits (1 - A^(K+1)) / "
                        "(1 - A) tokens per sequence on average (Leviathan et al. 2023)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of every random draw (default 0)")
    p.add_argument("--num_requests", "--num-requests", type=positive_int, default=None, metavar="N",
                   help="requests to serve (default 1000, vLLM's --num-prompts)")
    p.add_argument("--prompt_tokens", "--prompt-tokens", type=positive_int, metavar="P",
                   help="every prompt P tokens (default 1024, vLLM's random dataset)")
    p.add_argument("--output_tokens", "--output-tokens", type=positive_int, metavar="O",
                   help="every answer O tokens (default 128)")
    from simulator.serve.requests import PRESETS

    p.add_argument("--dataset", metavar="NAME", help=f"lengths drawn from a preset: {', '.join(PRESETS)}")
    p.add_argument("--burstiness", type=positive_number, default=1.0,
                   help="gamma shape of the gaps between arrivals, vLLM's --burstiness (1: Poisson; the gaps' "
                        "coefficient of variation is 1/sqrt(burstiness))")
    p.add_argument("--router", choices=("round_robin", "least_outstanding", "kv_aware"), default="round_robin",
                   help="how requests are spread over replicas (default round_robin)")
    p.add_argument("--preemption", choices=("recompute", "swap"), default="recompute",
                   help="what vLLM does when KV blocks run out (default recompute)")
    p.add_argument("--swap_gbps", "--swap-gbps", type=positive_number, metavar="GB/S",
                   help="host link per GPU and direction for --preemption swap (default by GPU: PCIe Gen5 64)")
    p.add_argument("--watermark", type=float, default=0.01, help="share of KV blocks kept free (vLLM's 0.01)")
    p.add_argument("--max_model_len", "--max-model-len", type=positive_int, metavar="N",
                   help="the longest request (Orca and static batching reserve it; default: the workload's longest)")
    p.add_argument("--warmup_requests", "--warmup-requests", type=non_negative_int, default=0, metavar="N",
                   help="serve the first N requests but leave them out of the figures (AIPerf's --warmup-request-count: "
                        "a closed loop's clients all start at once)")
    p.add_argument("--slo_ttft", "--slo-ttft", type=positive_number, metavar="S", help="TTFT objective (s)")
    p.add_argument("--slo_tpot", "--slo-tpot", type=positive_number, metavar="S", help="TPOT objective (s)")
    p.add_argument("--slo_e2e", "--slo-e2e", type=positive_number, metavar="S", help="end-to-end objective (s)")
    from simulator.serve.requests import MAX_ITEMS

    p.add_argument("--max_items", "--max-items", type=positive_int, metavar="N",
                   help=f"refuse a run of more than N requests + schedulers + replica steps (default {MAX_ITEMS:,}: "
                        "about 2 GB and half a minute), before it starts when its size is known, else when it passes N"
                        + ("; each run of a layout" if search else ""))
    p.add_argument("-q", "--quiet", action="store_true", help="no summary, no progress bar")


def build_parser() -> CliParser:
    p = CliParser(prog=PROG, allow_abbrev=False,
                  description="Simulate serving requests on replicas of a model: TTFT, TPOT, throughput, goodput.")
    add_deployment_flags(p)
    p.add_argument("--tensor_model_parallel_size", "--tensor-model-parallel-size", "--tp", type=positive_int, default=1,
                   metavar="N", help="GPUs per replica's tensor parallelism (default 1)")
    p.add_argument("--pipeline_model_parallel", "--pipeline-model-parallel", "--pp", type=positive_int, default=1,
                   metavar="N", help="pipeline stages per replica (default 1)")
    p.add_argument("--expert_model_parallel_size", "--expert-model-parallel-size", "--ep", type=positive_int, default=1,
                   metavar="N", help="expert parallelism over the replica's GPUs (default 1)")
    p.add_argument("--dp_attention", "--dp-attention", type=positive_int, default=1, metavar="N",
                   help="attention data parallelism per replica (SGLang's --enable-dp-attention --dp-size N): the "
                        "replica's tp x pp x N GPUs hold N attention replicas, its experts spread over "
                        "--expert_model_parallel_size of them (default 1)")
    p.add_argument("--replicas", type=positive_int, default=1, metavar="R", help="model replicas (default 1)")
    src = p.add_argument_group("arrivals (one of)")
    src.add_argument("--qps", type=positive_number, metavar="X", help="requests per second (Poisson, or --burstiness)")
    src.add_argument("--concurrency", type=positive_int, metavar="C", help="C clients, each sending its next request "
                                                                            "when the last one finishes")
    src.add_argument("--trace", metavar="FILE", help="CSV of arrival_s,prompt_tokens,output_tokens")
    sched = p.add_argument_group("scheduler")
    sched.add_argument("--scheduler", choices=("vllm", "sarathi", "orca", "static", "trtllm"), default="vllm",
                       help="vllm: vLLM V0's prefill-first continuous batching (default); sarathi: chunked prefill "
                            "with a token budget (vLLM V1's default); orca: iteration-level, KV reserved per request; "
                            "static: batches run to their longest request; trtllm: TensorRT-LLM's in-flight batching "
                            "(GUARANTEED_NO_EVICT: each request reserves its prompt and whole output, --max_batched_tokens "
                            "is max_num_tokens, default 8192)")
    sched.add_argument("--max_batch", "--max-batch", "--max_num_seqs", type=positive_int, default=256, metavar="N",
                       help="running requests per replica at most (vLLM's max_num_seqs, default 256)")
    sched.add_argument("--max_batched_tokens", "--max-batched-tokens", type=positive_int, metavar="N",
                       help="tokens per step without chunking (default max(2048, the longest request))")
    sched.add_argument("--chunk_tokens", "--chunk-tokens", type=positive_int, default=2048, metavar="N",
                       help="sarathi: token budget per step (default 2048)")
    sched.add_argument("--disaggregate", metavar="P:D",
                       help="prefill and decode replicas in this ratio (the replicas split P:D), KV moved between them")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object on the last line")
    p.add_argument("-o", "--output", metavar="DIR", help="write requests.csv, steps.csv, summary.json, trace.json and "
                                                         "report.html into DIR")
    return p


def split_ratio(text: str, replicas: int) -> int:
    """Prefill replicas of ``--disaggregate P:D`` over ``replicas`` (their sum must divide the replicas)."""
    try:
        p, d = (int(x) for x in text.split(":"))
    except ValueError:
        raise ConfigError(f"--disaggregate {text!r}: expected P:D, two whole numbers (e.g. 1:3)") from None
    if p < 1 or d < 1:
        raise ConfigError(f"--disaggregate {text}: both pools need at least one replica")
    if replicas % (p + d):
        raise ConfigError(f"--disaggregate {text}: --replicas {replicas} is not a multiple of {p} + {d}")
    return replicas // (p + d) * p


def fabric_options(args: argparse.Namespace, gpu: str) -> Any:
    """The options of a derived fabric (``-g_p_s``) or a topology file's defaults."""
    from simulator.options import TopoOptions, derived_fabric_gpu

    if args.topology is None and args.gpus_per_server is None:
        raise ConfigError("give -t/--topology FILE, or -g_p_s/--gpus_per_server N to derive a two-tier fabric")
    simai_gpu, nvlink_bw = derived_fabric_gpu(gpu, args.nvlink_bw)
    return TopoOptions(gpus_per_server=args.gpus_per_server, nics_per_server=args.nics_per_server,
                       nvlink_bw=nvlink_bw, nic_busbw=args.nic_busbw, gpu_type=simai_gpu)


def speculative_of(args: argparse.Namespace) -> tuple[int, float]:
    """``(K, acceptance rate)`` of ``--speculative_tokens`` / ``--acceptance_rate`` (``(0, 0.0)`` when off)."""
    k = int(getattr(args, "speculative_tokens", 0) or 0)
    a = getattr(args, "acceptance_rate", None)
    if a is not None and not 0.0 <= a <= 1.0:
        raise ConfigError(f"--acceptance_rate must be in [0, 1], got {a:g}")
    if k == 0:
        if a is not None:
            raise ConfigError("--acceptance_rate needs --speculative_tokens K (the draft tokens per step)")
        return 0, 0.0
    if a is None:
        raise ConfigError(f"--speculative_tokens {k} needs --acceptance_rate A (each draft token's chance of being "
                          "accepted, e.g. 0.7)")
    return k, float(a)


def with_speculation(cost: Any, k: int, a: float) -> Any:
    """A ``--step_cost`` linear profile told what a decode step emits with ``k`` draft tokens accepted at rate
    ``a`` (its coefficients price the step as measured)."""
    from dataclasses import replace

    from simulator.serve.cost import accepted_tokens

    return replace(cost, tokens_per_decode_step=accepted_tokens(k, a), speculative_tokens=k) if k else cost


def replica_cost(args: argparse.Namespace, gpu: str, layout: dict[str, int], replicas: int, config: Any) -> Any:
    """The step-cost model of one replica (:func:`simulator.serve.cost.cost_model`, or ``--step_cost``'s), its KV
    cache sized as vLLM sizes it for ``config``'s token budget and batch."""
    from simulator.serve.pricing import cost_model, linear_cost

    k, a = speculative_of(args)
    if args.step_cost:
        return with_speculation(linear_cost(args.step_cost), k, a)
    tp, pp, ep, dp = layout["tp"], layout["pp"], layout["ep"], layout["dp"]
    budget = (config.chunk_tokens if getattr(args, "scheduler", "vllm") == "sarathi"
              else config.max_batched_tokens)
    return cost_model(args.model_name, gpu, args.topology, tp=tp, pp=pp, ep=ep, dp=dp, dtype=args.dtype,
                      kv_dtype=args.kv_dtype, cuda_graphs=not args.eager, options=fabric_options(args, gpu),
                      gpus=replicas * tp * pp * dp, max_num_batched_tokens=budget, max_num_seqs=config.max_batch,
                      speculative_tokens=k, acceptance_rate=a)


def scheduler_config(args: argparse.Namespace, workload: Any, gpu: str) -> Any:
    from simulator.serve.replica import SchedulerConfig

    longest = int((workload.prompt + workload.output).max())
    max_model_len = args.max_model_len or longest
    if max_model_len < longest:
        raise ConfigError(f"--max_model_len {max_model_len} is shorter than the workload's longest request ({longest} "
                          "tokens)")
    # TensorRT-LLM's LLM API defaults max_num_tokens to 8192; vLLM V0 without chunking to max(2048, max_model_len)
    default_batched = 8192 if getattr(args, "scheduler", "vllm") == "trtllm" else max(2048, max_model_len)
    max_batched = getattr(args, "max_batched_tokens", None) or default_batched
    chunk = getattr(args, "chunk_tokens", 2048)
    max_batch = getattr(args, "max_batch", 256)
    if getattr(args, "scheduler", "vllm") == "sarathi" and chunk < max_batch:
        raise ConfigError(f"--chunk_tokens {chunk} is below --max_batch {max_batch}: every running request's decode "
                          "must fit a step's budget (vLLM refuses max_num_batched_tokens < max_num_seqs)")
    k = int(getattr(args, "speculative_tokens", 0) or 0)
    sarathi = getattr(args, "scheduler", "vllm") == "sarathi"
    budget = chunk if sarathi else max_batched
    if k + 1 > budget:
        raise ConfigError(f"--speculative_tokens {k}: each decode verifies 1 + {k} tokens, more than a step's budget "
                          f"of {budget} ({'--chunk_tokens' if sarathi else '--max_batched_tokens'}; vLLM counts the "
                          "draft tokens against max_num_batched_tokens)")
    if not 0 <= args.watermark < 1:
        raise ConfigError(f"--watermark must be in [0, 1), got {args.watermark}")
    swap = (args.swap_gbps or HOST_LINK_GBPS.get(gpu.upper(), 64.0)) * 1e9
    return SchedulerConfig(max_batch=max_batch, max_batched_tokens=max_batched, chunk_tokens=chunk,
                           watermark=args.watermark, preemption=args.preemption, max_model_len=max_model_len,
                           swap_bytes_per_s=swap)


def workload_of(args: argparse.Namespace, qps: float | None = None) -> Any:
    from simulator.serve.requests import DEFAULT_NUM_REQUESTS, make_workload

    return make_workload(args.num_requests or DEFAULT_NUM_REQUESTS, args.seed,
                         qps=qps if qps is not None else getattr(args, "qps", None),
                         concurrency=getattr(args, "concurrency", None), trace=getattr(args, "trace", None),
                         burstiness=args.burstiness, dataset=args.dataset, prompt_tokens=args.prompt_tokens,
                         output_tokens=args.output_tokens, max_items=getattr(args, "max_items", None))


def slo_of(args: argparse.Namespace) -> Any:
    from simulator.serve.metrics import SLO

    return SLO(args.slo_ttft, args.slo_tpot, args.slo_e2e)


def summary_text(summary: dict[str, Any], config: dict[str, Any]) -> str:
    def ms(value: float | None) -> str:
        return "       –" if value is None else f"{value * 1e3:10.1f}"

    s = summary
    lines = [f"serve: {config['model']} on {config['replicas']} replica(s) x {config['replica_gpus']} {config['gpu']} "
             f"(tp {config['tp']} pp {config['pp']} ep {config['ep']} dp {config['dp']}) = {config['gpus']} GPUs; "
             f"{config['scheduler']} scheduler, {config['router']} router" + (f", disaggregated {config['disaggregate']}"
                                                         if config.get("disaggregate") else ""),
             f"  {config['workload']}",
             f"  KV cache per replica: {config['kv_capacity_tokens']:,} tokens "
             f"({config['kv_capacity_tokens'] / config['dp'] * config['kv_bytes_per_token'] / 2**30:.1f} GiB per GPU)",
             f"  {'(ms)':<12}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}"]
    for name, key in (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"), ("E2E", "e2e"), ("queueing", "queue")):
        lines.append(f"  {name:<12}" + "".join(ms(s[f"{key}_{q}_s"]) for q in ("mean", "p50", "p90", "p99")))
    rps, tps = s["requests_per_s"] or 0.0, s["output_tokens_per_s"] or 0.0
    lines.append(f"  throughput: {rps:,.3f} requests/s, {tps:,.1f} output tokens/s ({tps / config['gpus']:,.1f} per GPU)"
                 f" over {s['duration_s']:,.2f} s simulated; {s['preemptions']:,} preemptions")
    if "goodput_requests_per_s" in s:
        slos = ", ".join(f"{k} <= {v * 1e3:g} ms" for k, v in (("TTFT", s["slo_ttft_s"]), ("TPOT", s["slo_tpot_s"]),
                                                                ("E2E", s["slo_e2e_s"])) if v is not None)
        lines.append(f"  goodput: {s['goodput_requests_per_s'] or 0:,.3f} requests/s meet {slos} "
                     f"({(s['slo_attainment'] or 0) * 100:.1f}% of requests)")
    return "\n".join(lines)


def run(args: argparse.Namespace, workload: Any, cost: Any, deployment: Any, quiet: bool = True) -> tuple[Any, dict]:
    """Simulate and measure: the run and its summary."""
    from simulator.serve.engine import simulate
    from simulator.serve.metrics import request_table, summarize, token_gaps
    from utils.progress import progress

    bar = progress(total=len(workload), desc="requests", unit="req") if not quiet else None
    try:
        result = simulate(workload, cost, deployment, on_progress=bar.update if bar is not None else None,
                          max_items=getattr(args, "max_items", None))
    finally:
        if bar is not None:
            bar.close()
    warm = getattr(args, "warmup_requests", 0)
    if warm >= len(result.requests):
        raise ConfigError(f"--warmup_requests {warm} leaves none of the {len(result.requests)} requests to measure")
    measured = result.requests[warm:]
    table = request_table(measured)
    summary = summarize(table, token_gaps(measured, result.replicas), slo_of(args))
    if warm:
        summary["warmup_requests"] = warm
    return (result, table), summary


def simulate_args(args: argparse.Namespace, quiet: bool = True) -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    """Run the command the parsed flags describe: the run, its request table, its figures and its configuration."""
    from mocked_model.compute import gpu_spec

    gpu = gpu_spec(args.gpu_type).name
    workload = workload_of(args)
    prefill = split_ratio(args.disaggregate, args.replicas) if args.disaggregate else 0
    layout = {"tp": args.tensor_model_parallel_size, "pp": args.pipeline_model_parallel,
              "ep": args.expert_model_parallel_size, "dp": args.dp_attention}
    config = scheduler_config(args, workload, gpu)
    cost = replica_cost(args, gpu, layout, args.replicas, config)
    deployment = deployment_of(args, config, prefill, layout)
    for message in workload.warnings:
        print(f"{PROG}: warning: {message}", file=sys.stderr)
    (result, table), summary = run(args, workload, cost, deployment, quiet=quiet)
    return result, table, summary, configuration(args, gpu, cost, deployment, workload, layout)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.output is not None:  # before the run: an input in the folder, a link or a file where the folder goes
        from simulator.serve.outputs import check_output_folder

        check_output_folder(args.output, input_paths(args))
    result, table, summary, config = simulate_args(args, quiet=args.quiet or args.json)
    paths: list[str] = []
    if args.output:
        from simulator.report import write_files
        from simulator.serve.outputs import output_files

        command = "python -m simulator serve " + shlex.join(sys.argv[1:] if argv is None else list(argv))
        paths = write_files(output_files(args.output, summary, config, table, result.replicas, command))
    if args.json:
        print(json.dumps({**{k: summary.get(k) for k in JSON_KEYS}, **summary, "configuration": config}))
        return 0
    if not args.quiet:
        print(summary_text(summary, config))
        if paths:
            print(f"wrote {', '.join(paths)}")
    return 0


def input_paths(args: argparse.Namespace) -> dict[str, str | None]:
    """The files the command reads, by flag: no output may be one of them."""
    return {"--trace": getattr(args, "trace", None), "--step_cost": args.step_cost, "-t/--topology": args.topology}


def deployment_of(args: argparse.Namespace, config: Any, prefill: int, layout: dict[str, int]) -> Any:
    """The replicas and their schedulers: ``pp`` virtual engines per replica (vLLM), and an attention-DP replica's
    ``dp`` schedulers taken as one with ``dp`` times the batch (their steps meet at every MoE all-to-all)."""
    from dataclasses import replace

    from simulator.serve.engine import Deployment

    if layout["dp"] > 1:
        config = replace(config, max_batch=config.max_batch * layout["dp"])
    return Deployment(args.replicas, args.scheduler, args.router, prefill, config, engines=layout["pp"])


def configuration(args: argparse.Namespace, gpu: str, cost: Any, deployment: Any, workload: Any,
                  layout: dict[str, int]) -> dict[str, Any]:
    """What was simulated (summary.json's ``configuration``)."""
    c = deployment.config
    return {"model": args.model_name, "gpu": gpu, **layout, "replicas": deployment.replicas,
            "replica_gpus": cost.replica_gpus, "gpus": deployment.replicas * cost.replica_gpus,
            "dtype": args.dtype or "model's own", "kv_dtype": args.kv_dtype, "cuda_graphs": not args.eager,
            "scheduler": deployment.scheduler, "router": deployment.router, "max_batch": c.max_batch,
            "max_batched_tokens": c.max_batched_tokens, "chunk_tokens": c.chunk_tokens, "preemption": c.preemption,
            "watermark": c.watermark, "max_model_len": c.max_model_len, "disaggregate": args.disaggregate,
            "workload": workload.description, "seed": args.seed, "kv_capacity_tokens": int(cost.kv_capacity_tokens),
            "kv_bytes_per_token": float(cost.kv_bytes_per_token),
            "speculative_tokens": int(getattr(cost, "speculative_tokens", 0) or 0),
            "tokens_per_decode_step": float(getattr(cost, "tokens_per_decode_step", 1.0) or 1.0),
            "topology": args.topology or f"derived, {args.gpus_per_server} GPUs per server"}

"""``python -m simulator serve-search``: the largest request rate each serving layout sustains under SLOs.

    python -m simulator serve-search -g_p_s 8 --gpu_type H100,H200 --model_name llama3_70B --gpus 32 \\
        --tp 2,4,8 --scheduler vllm,sarathi --slo_ttft 2 --slo_tpot 0.05 -o layouts.csv --html layouts.html

For each GPU type and layout (TP, PP, attention DP and EP, replicas filling ``--gpus``, max batch, chunk size,
scheduler, disaggregation ratio) the search finds the largest ``--qps`` whose run meets the SLOs: the
``--slo_percentile`` (default 99) of TTFT and of TPOT (and E2E) at most the objectives.  Every run of a layout
serves the same ``--num_requests`` requests (``--seed``: the same lengths, and the same arrival gaps scaled by
``1 / qps``), so the rate is the only thing that changes.  A first run sends every request at once: its throughput
is the layout's service rate (``saturation_qps``), above which no rate is sustainable however a finite run's
percentiles look.  The search then bisects between ``--min_qps`` (which must meet the SLOs) and that rate until the
bracket is within ``--precision`` (relative, default 2%): the rate reported meets the SLOs and one ``1 + precision``
times higher does not (or reaches the service rate).  Layouts whose model does not fit are left out (counted); one
that misses the SLOs even at ``--min_qps`` reports 0 with its figures there.  Rows are ranked by GPUs (fewest
first), then by goodput at the rate found; when no layout meets the SLOs the command says so and names the nearest
(the smallest ratio of figure to objective), exit status 0.

Layouts run on every local core (``--jobs``, a process pool) or on a Ray cluster (``--ray ADDRESS``), like the
training search (:mod:`simulator.search.run`'s task pump); ``-o`` gets the ranked CSV, ``--html`` a page with a plot.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from simulator.serve.cli import (
    add_deployment_flags,
    deployment_of,
    fabric_options,
    scheduler_config,
    speculative_of,
    split_ratio,
    with_speculation,
)
from utils.cli import CliParser, fraction, positive_int, positive_number
from utils.errors import ConfigError, UserError

PROG = "simulator serve-search"
HEADER = ("gpu_type", "tp", "pp", "ep", "dp", "replica_gpus", "replicas", "gpus", "scheduler", "max_batch",
          "chunk_tokens", "disaggregate", "max_qps", "meets_slo", "goodput_requests_per_s", "output_tokens_per_s",
          "ttft_s", "tpot_s", "e2e_s", "qps_per_gpu", "saturation_qps", "kv_capacity_tokens", "runs", "note")


@dataclass(frozen=True)
class Layout:
    """One deployment to try."""

    gpu_type: str
    tp: int
    pp: int
    ep: int
    dp: int
    replicas: int
    scheduler: str
    max_batch: int
    chunk_tokens: int
    disaggregate: str

    @property
    def replica_gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def describe(self) -> str:
        extra = f" disaggregated {self.disaggregate}" if self.disaggregate else ""
        chunk = f" chunk {self.chunk_tokens}" if self.scheduler == "sarathi" else ""
        return (f"{self.gpu_type} x {self.replicas} replicas of tp {self.tp} pp {self.pp} ep {self.ep} dp {self.dp}, "
                f"{self.scheduler} max_batch {self.max_batch}{chunk}{extra}")


def _ints(text: str | None, flag: str, default: Sequence[int]) -> list[int]:
    if text is None:
        return list(default)
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: expected a whole number or a comma list of them") from None
    if not values or values[0] < 1:
        raise ConfigError(f"{flag} {text!r}: expected positive whole numbers")
    return values


def _words(text: str, flag: str, allowed: Sequence[str]) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values:
        raise ConfigError(f"{flag} {text!r}: expected one or more of {', '.join(allowed)}, separated by commas")
    for v in values:
        if v not in allowed:
            raise ConfigError(f"{flag}: {v!r} is not one of {', '.join(allowed)}")
    return values


def build_parser() -> CliParser:
    p = CliParser(prog=PROG, allow_abbrev=False,
                  description="Find the largest request rate each serving layout sustains under TTFT/TPOT objectives.")
    add_deployment_flags(p, search=True)
    p.add_argument("--gpus", type=positive_int, required=True, metavar="N", help="GPUs to fill with replicas")
    for name, text, default in (("tp", "tensor-parallel sizes", "1,2,4,8"), ("pp", "pipeline stages", "1"),
                                ("ep", "expert-parallel sizes (MoE models)", "1"),
                                ("dp_attention", "attention data-parallel sizes", "1"),
                                ("max_batch", "max batch sizes (max_num_seqs)", "256"),
                                ("chunk_tokens", "sarathi token budgets", "2048")):
        p.add_argument(f"--{name}", metavar="N[,N...]", help=f"{text} to try (default {default})")
    p.add_argument("--scheduler", default="vllm", metavar="S[,S...]", help="schedulers to try: vllm, sarathi, orca, "
                                                                           "static, trtllm (default vllm)")
    p.add_argument("--disaggregate", default="none", metavar="P:D[,...]",
                   help="prefill:decode ratios to try, 'none' for no disaggregation (default none)")
    p.add_argument("--max_batched_tokens", "--max-batched-tokens", type=positive_int, metavar="N",
                   help="vllm/orca: tokens per step (default max(2048, the longest request))")
    p.add_argument("--slo_percentile", "--slo-percentile", type=positive_number, default=99.0, metavar="P",
                   help="the percentile of TTFT/TPOT/E2E held to the objectives (default 99)")
    p.add_argument("--min_qps", "--min-qps", type=positive_number, default=0.25, metavar="X",
                   help="first rate tried (default 0.25 requests/s)")
    p.add_argument("--max_qps", "--max-qps", type=positive_number, default=1e5, metavar="X",
                   help="stop doubling here (default 100000)")
    p.add_argument("--precision", type=fraction, default=0.02, metavar="R",
                   help="relative width of the final bracket, in (0, 1] (default 0.02: within 2%%)")
    p.add_argument("-o", "--output", metavar="FILE.csv", required=True, help="the ranked layouts")
    p.add_argument("--html", metavar="FILE.html", help="a self-contained page with the layouts and a plot")
    p.add_argument("--jobs", type=positive_int, metavar="N", help="worker processes (default: every core)")
    p.add_argument("--ray", metavar="ADDRESS", help="run on this Ray cluster (ray://host:port or auto)")
    return p


def layouts(args: argparse.Namespace) -> list[Layout]:
    """Every layout of the flags that fits ``--gpus`` (each replica-count the most that fits)."""
    from mocked_model.compute import gpu_spec

    gpus = [gpu_spec(g.strip()).name for g in args.gpu_type.split(",") if g.strip()]
    if not gpus:
        raise ConfigError("--gpu_type: give a GPU type or a comma list")
    schedulers = _words(args.scheduler, "--scheduler", ("vllm", "sarathi", "orca", "static", "trtllm"))
    ratios = [r.strip() for r in args.disaggregate.split(",") if r.strip()]
    if not ratios:
        raise ConfigError(f"--disaggregate {args.disaggregate!r}: expected P:D ratios or 'none', separated by commas")
    out = []
    for gpu, tp, pp, ep, dp, sched, batch, ratio in itertools.product(
            gpus, _ints(args.tp, "--tp", (1, 2, 4, 8)), _ints(args.pp, "--pp", (1,)), _ints(args.ep, "--ep", (1,)),
            _ints(args.dp_attention, "--dp_attention", (1,)), schedulers, _ints(args.max_batch, "--max_batch", (256,)),
            ratios):
        replicas = args.gpus // (tp * pp * dp)
        if ratio != "none":
            p, d = (int(x) for x in ratio.split(":")) if ":" in ratio else (0, 0)
            split_ratio(ratio, p + d)  # the ratio's own check
            replicas -= replicas % (p + d)
        if replicas < 1:
            continue
        for chunk in _ints(args.chunk_tokens, "--chunk_tokens", (2048,)) if sched == "sarathi" else [2048]:
            out.append(Layout(gpu, tp, pp, ep, dp, replicas, sched, batch, chunk, "" if ratio == "none" else ratio))
    if not out:
        raise ConfigError(f"--gpus {args.gpus}: no layout of the sizes given fits (a replica needs tp x pp x dp GPUs)")
    return out


# ---- one layout ------------------------------------------------------------------------------------------

_FABRICS: dict = {}
"""Fabrics built in this process (one per topology and size), shared by its layouts."""


def _namespace(settings: dict[str, Any], layout: Layout) -> argparse.Namespace:
    return argparse.Namespace(**{**settings, "scheduler": layout.scheduler, "max_batch": layout.max_batch,
                                 "chunk_tokens": layout.chunk_tokens, "disaggregate": layout.disaggregate or None,
                                 "replicas": layout.replicas})


def evaluate(settings: dict[str, Any], layout: Layout) -> dict[str, Any]:
    """The row of ``layout``: the largest rate meeting the SLOs and the figures there."""
    from simulator.serve.engine import simulate
    from simulator.serve.metrics import SLO, request_table, summarize, token_gaps
    from simulator.serve.pricing import cost_model, linear_cost
    from simulator.serve.requests import Workload, arrivals, lengths

    args = _namespace(settings, layout)
    row: dict[str, Any] = {**asdict(layout), "replica_gpus": layout.replica_gpus,
                           "gpus": layout.replicas * layout.replica_gpus, "runs": 0, "note": ""}
    rng = np.random.default_rng(args.seed)
    prompt, output, _ = lengths(args.num_requests, rng, args.dataset, args.prompt_tokens, args.output_tokens)
    unit = arrivals(args.num_requests, 1.0, args.burstiness, rng)
    probe = Workload(prompt, output, arrival_s=unit)
    try:
        config = scheduler_config(args, probe, layout.gpu_type)
        budget = config.chunk_tokens if layout.scheduler == "sarathi" else config.max_batched_tokens
        k, a = speculative_of(args)
        if args.step_cost:
            cost = with_speculation(linear_cost(args.step_cost), k, a)
        else:
            cost = cost_model(args.model_name, layout.gpu_type, args.topology, tp=layout.tp, pp=layout.pp,
                              ep=layout.ep, dp=layout.dp, dtype=args.dtype, kv_dtype=args.kv_dtype,
                              cuda_graphs=not args.eager, options=fabric_options(args, layout.gpu_type),
                              gpus=row["gpus"], max_num_batched_tokens=budget, max_num_seqs=config.max_batch,
                              fabrics=_FABRICS, speculative_tokens=k, acceptance_rate=a)
        prefill = split_ratio(layout.disaggregate, layout.replicas) if layout.disaggregate else 0
        deployment = deployment_of(args, config, prefill, {"tp": layout.tp, "pp": layout.pp, "ep": layout.ep,
                                                            "dp": layout.dp})
    except UserError as exc:
        return {**row, "max_qps": None, "meets_slo": False, "note": f"skipped: {exc}"}
    row["kv_capacity_tokens"] = int(cost.kv_capacity_tokens)
    q = settings["slo_percentile"]
    slos = (("ttft", settings["slo_ttft"]), ("tpot", settings["slo_tpot"]), ("e2e", settings["slo_e2e"]))

    def measure(qps: float) -> tuple[bool, dict[str, Any]]:
        work = Workload(prompt, output, arrival_s=unit / qps if qps != float("inf") else np.zeros_like(unit))
        try:
            result = simulate(work, cost, deployment, max_items=settings.get("max_items"))
        except UserError as exc:
            raise _Skip(str(exc)) from None
        row["runs"] += 1
        measured = result.requests[args.warmup_requests:]
        table = request_table(measured)
        summary = summarize(table, token_gaps(measured, result.replicas), SLO(*(v for _, v in slos)))
        figures = {"ttft": table.ttft, "tpot": table.tpot, "e2e": table.e2e}
        at: dict[str, Any] = {"qps": qps, "summary": summary}
        ok = True
        for name, objective in slos:
            values = figures[name][~np.isnan(figures[name])]
            value = float(np.percentile(values, q)) if len(values) else 0.0
            at[name] = value
            if objective is not None:
                at[f"{name}_ratio"] = value / objective
                ok &= value <= objective
        return ok, at

    try:
        # the service rate: every request at once, served as fast as the replicas go; no rate at or above it is
        # sustainable (the queue would grow without bound), whatever a finite run's percentiles say
        _ok, burst = measure(float("inf"))
        row["saturation_qps"] = burst["summary"]["requests_per_s"]
        ok, best = measure(settings["min_qps"])
        if not ok or settings["min_qps"] >= row["saturation_qps"]:
            return {**row, **_figures(best), "max_qps": 0.0, "meets_slo": False,
                    "violation": max(best.get(f"{n}_ratio", 0.0) for n, _ in slos),
                    "note": f"misses the SLOs at --min_qps {settings['min_qps']:g}"}
        lo, hi = settings["min_qps"], min(row["saturation_qps"], settings["max_qps"])
        while hi - lo > settings["precision"] * lo:
            rate = (lo + hi) / 2
            if not lo < rate < hi:  # the bracket is as narrow as floats go
                break
            ok, at = measure(rate)
            if ok:
                lo, best = rate, at
            else:
                hi = rate
    except _Skip as exc:
        return {**row, "max_qps": None, "meets_slo": False, "note": f"skipped: {exc}"}
    return {**row, **_figures(best), "max_qps": lo, "meets_slo": True}


class _Skip(Exception):
    """A layout the engine refuses (a request larger than its KV cache)."""


def _figures(at: dict[str, Any]) -> dict[str, Any]:
    s = at["summary"]
    return {"goodput_requests_per_s": s.get("goodput_requests_per_s"), "output_tokens_per_s": s["output_tokens_per_s"],
            "ttft_s": at["ttft"], "tpot_s": at["tpot"], "e2e_s": at["e2e"], "at_qps": at["qps"]}


def _task(task: tuple[dict[str, Any], Layout]) -> dict[str, Any]:
    return evaluate(*task)


# ---- the pool --------------------------------------------------------------------------------------------

def _run(tasks: list[tuple[dict[str, Any], Layout]], jobs: int, ray_address: str | None,
         on_done: Any) -> list[dict[str, Any]]:
    """Every task's row, in the order they finish, on local processes or a Ray cluster (the training search's
    task pump, :func:`simulator.search.run._in_flight`)."""
    from simulator.search.run import _in_flight

    rows: list[dict[str, Any]] = []
    if ray_address:
        try:
            import ray
        except ImportError:
            raise ConfigError("--ray needs Ray: pip install '.[ray]'") from None
        try:
            ray.init(address=ray_address, ignore_reinit_error=True, logging_level="ERROR", log_to_driver=False)
        except Exception as exc:  # noqa: BLE001 - any failure to connect is the user's address
            raise ConfigError(f"--ray {ray_address}: cannot reach the Ray cluster ({str(exc).splitlines()[0]})") from None
        remote = ray.remote(_task)
        width = max(int(ray.cluster_resources().get("CPU", 1)), 1)
        try:
            for _, ref in _in_flight(tasks, 2 * width, lambda t: remote.remote(t),
                                          lambda refs: ray.wait(refs, num_returns=1)[0]):
                rows.append(ray.get(ref))
                on_done()
        finally:
            ray.shutdown()
        return rows
    if jobs <= 1 or len(tasks) == 1:
        for task in tasks:
            rows.append(_task(task))
            on_done()
        return rows
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for _, future in _in_flight(tasks, 2 * jobs, lambda t: pool.submit(_task, t),
                                         lambda futures: wait(futures, return_when=FIRST_COMPLETED)[0]):
            rows.append(future.result())
            on_done()
    return rows


# ---- files -----------------------------------------------------------------------------------------------

def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value).replace(",", ";")


def ranked(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Layouts that ran, by GPUs (fewest first) then goodput at the rate found (highest first); skipped ones last."""
    for row in rows:
        if row.get("max_qps") is not None:
            row["qps_per_gpu"] = row["max_qps"] / row["gpus"]
    ran = [r for r in rows if r.get("max_qps") is not None]
    skipped = [r for r in rows if r.get("max_qps") is None]
    ran.sort(key=lambda r: (r["gpus"], -(r.get("goodput_requests_per_s") or 0.0), -(r["max_qps"] or 0.0)))
    return ran + skipped


def csv_text(rows: list[dict[str, Any]]) -> str:
    return "\n".join([",".join(HEADER)] + [",".join(_cell(r.get(h)) for h in HEADER) for r in rows]) + "\n"


def html_text(rows: list[dict[str, Any]], title: str) -> str:
    import base64
    import html

    from utils.figures import new_figure, render

    fig, ax = new_figure(4.5)
    ran = [r for r in rows if r.get("max_qps") is not None]
    for gpu in sorted({r["gpu_type"] for r in ran}):
        mine = [r for r in ran if r["gpu_type"] == gpu]
        ax.scatter([r["gpus"] for r in mine], [r["max_qps"] for r in mine], label=gpu, s=18, alpha=0.7)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("largest rate meeting the SLOs (requests/s)")
    ax.grid(alpha=0.3)
    if ran:
        ax.legend(loc="upper left")
    png = base64.b64encode(render(fig)).decode("ascii")
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADER)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(r.get(h)))}</td>" for h in HEADER) + "</tr>" for r in rows)
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; img-src data:; "
            "style-src 'unsafe-inline'\"><title>Serving capacity search</title>"
            "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:13px}"
            "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}th{background:#f3f3f3}</style></head><body>"
            f"<h1>Serving capacity search</h1><p>{html.escape(title)}</p>"
            f"<img alt='rate against GPUs' src='data:image/png;base64,{png}'>"
            f"<h2>Layouts, ranked</h2><table><tr>{head}</tr>{body}</table></body></html>\n")


# ---- the command -----------------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.slo_ttft is None and args.slo_tpot is None and args.slo_e2e is None:
        raise ConfigError("give at least one objective: --slo_ttft S, --slo_tpot S or --slo_e2e S")
    if not 0 < args.slo_percentile <= 100:
        raise ConfigError(f"--slo_percentile must be in (0, 100], got {args.slo_percentile}")
    if args.topology is None and args.gpus_per_server is None and not args.step_cost:
        raise ConfigError("give -t/--topology FILE, or -g_p_s/--gpus_per_server N to derive a two-tier fabric")
    if args.warmup_requests >= (args.num_requests or 1000):
        raise ConfigError(f"--warmup_requests {args.warmup_requests} leaves no request to measure")
    if args.max_qps < args.min_qps:
        raise ConfigError(f"--max_qps {args.max_qps:g} is below --min_qps {args.min_qps:g}")
    from simulator.serve.requests import DEFAULT_NUM_REQUESTS, check_requests, lengths

    args.num_requests = args.num_requests or DEFAULT_NUM_REQUESTS
    check_requests(args.num_requests, args.max_items)
    _guard_outputs(args)
    lengths(1, np.random.default_rng(0), args.dataset, args.prompt_tokens, args.output_tokens)  # the flags' check
    settings = {k: v for k, v in vars(args).items() if k not in ("tp", "pp", "ep", "dp_attention", "scheduler",
                                                                 "max_batch", "chunk_tokens", "disaggregate",
                                                                 "output", "html", "jobs", "ray", "gpus")}
    found = layouts(args)
    from simulator.search.pool import worker_count
    from utils.progress import progress

    # as the training search: no more worker processes than CPUs (--jobs 1e12 started one per layout)
    jobs = worker_count(args.jobs, lambda text: print(f"{PROG}: {text}", file=sys.stderr))

    bar = progress(total=len(found), desc="layouts", unit="layout") if not args.quiet else None
    try:
        rows = _run([(settings, layout) for layout in found], jobs, args.ray,
                    bar.update if bar is not None else (lambda: None))
    finally:
        if bar is not None:
            bar.close()
    skipped = [r for r in rows if r.get("max_qps") is None]
    if len(skipped) == len(rows):
        reasons = sorted({r["note"].removeprefix("skipped: ") for r in skipped})
        raise ConfigError(f"no layout can serve {args.model_name}: {reasons[0]}"
                          + (f" (and {len(reasons) - 1} other reasons)" if len(reasons) > 1 else ""))
    rows = ranked(rows)
    slo_text = ", ".join(f"{name} p{args.slo_percentile:g} <= {value * 1e3:g} ms" for name, value in
                         (("TTFT", args.slo_ttft), ("TPOT", args.slo_tpot), ("E2E", args.slo_e2e)) if value is not None)
    contents: dict[str, str] = {args.output: csv_text(rows)}
    if args.html:
        contents[args.html] = html_text(rows, f"{args.model_name}, {args.gpus} GPUs, {slo_text}; "
                                              f"{args.num_requests} requests per run, seed {args.seed}, rates within "
                                              f"{args.precision:.0%}")
    from simulator.report import write_files

    write_files(contents)
    meeting = [r for r in rows if r.get("meets_slo")]
    print(f"{len(rows) - len(skipped)} layouts searched ({len(skipped)} skipped: the model does not fit or a request "
          f"exceeds the KV cache); {slo_text}; rates within {args.precision:.0%}")
    if meeting:
        best = max(meeting, key=lambda r: (r["max_qps"] / r["gpus"], -r["gpus"]))
        print(f"best per GPU: {_describe(best)}: {best['max_qps']:.3g} requests/s ({best['max_qps'] / best['gpus']:.3g} "
              f"per GPU), TTFT p{args.slo_percentile:g} {best['ttft_s'] * 1e3:.0f} ms, TPOT p{args.slo_percentile:g} "
              f"{best['tpot_s'] * 1e3:.1f} ms")
    else:
        ran = [r for r in rows if r.get("max_qps") is not None]
        nearest = min(ran, key=lambda r: r.get("violation", float("inf")))
        print(f"no layout meets {slo_text}; the nearest: {_describe(nearest)} at {args.min_qps:g} requests/s: TTFT "
              f"p{args.slo_percentile:g} {nearest['ttft_s'] * 1e3:.0f} ms, TPOT p{args.slo_percentile:g} "
              f"{nearest['tpot_s'] * 1e3:.1f} ms ({nearest['violation']:.2f}x the objective)")
    print(f"wrote {', '.join(contents)}")
    return 0


def _guard_outputs(args: argparse.Namespace) -> None:
    """Check ``-o`` and ``--html`` before any layout runs (:func:`utils.io.guard_output`): neither an input (the
    step-cost file, the topology), a symbolic link, a folder, nor the other one."""
    from simulator.serve.cli import input_paths
    from utils.io import OutputError, guard_output

    inputs = input_paths(args)
    guard_output(args.output, inputs, "-o/--output")
    if args.html:
        guard_output(args.html, {**inputs, "-o/--output": args.output}, "--html")
        if os.path.realpath(args.html) == os.path.realpath(args.output):
            raise OutputError(f"--html {args.html} is also -o/--output: give the page and the CSV two names")


def _describe(row: dict[str, Any]) -> str:
    fields = {k: row[k] for k in ("gpu_type", "tp", "pp", "ep", "dp", "replicas", "scheduler", "max_batch",
                                  "chunk_tokens", "disaggregate")}
    return Layout(**fields).describe()


__all__ = ["Layout", "build_parser", "evaluate", "layouts", "main", "ranked", "replace"]

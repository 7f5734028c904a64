"""The files of a serving run (``-o DIR``), built in memory and written atomically together (a failure leaves
none of them):

- ``requests.csv``: one row per request: arrival, first token, finish (s), tokens, TTFT, TPOT, E2E, queueing (s),
  preemptions, replica (and prefill replica when disaggregated);
- ``steps.csv``: one row per replica step: start and duration (s), prefill tokens and requests, decoding
  requests and their context, KV blocks in use (and the share of the replica's), tokens swapped;
- ``summary.json``: the configuration and every figure of :func:`simulator.serve.metrics.summarize`;
- ``trace.json``: a Chrome/Perfetto trace (https://ui.perfetto.dev): one process per replica with a slice per step
  (its prefill tokens, decoding requests and their context) and counters of batch size and KV use (where they
  change), and one async span per request from arrival to finish;
- ``report.html``: a self-contained page (the log analyzer's look): key figures, CDFs of TTFT, TPOT and E2E,
  batch size and KV use over time per replica.
"""

from __future__ import annotations

import base64
import html
import json
import os
from typing import Any

import numpy as np

from simulator.serve.metrics import RequestTable


def _num(value: float) -> str:
    return f"{value:.6f}".rstrip("0").rstrip(".") if value == value else ""


def requests_csv(table: RequestTable) -> str:
    head = ("request,replica,prefill_replica,arrival_s,prompt_tokens,output_tokens,first_token_s,finish_s,ttft_s,"
            "tpot_s,e2e_s,queue_s,preemptions")
    ttft, tpot, e2e, queue = table.ttft, table.tpot, table.e2e, table.queueing
    lines = [head]
    for i in range(len(table.rid)):
        pre = int(table.prefill_replica[i])
        lines.append(f"{table.rid[i]},{table.replica[i]},{pre if pre >= 0 else ''},{_num(table.arrival[i])},"
                     f"{table.prompt[i]},{table.output[i]},{_num(table.first_token[i])},{_num(table.finish[i])},"
                     f"{_num(ttft[i])},{_num(tpot[i])},{_num(e2e[i])},{_num(queue[i])},{table.preemptions[i]}")
    return "\n".join(lines) + "\n"


def steps_csv(replicas: list[Any]) -> str:
    lines = ["replica,role,start_s,duration_s,prefill_tokens,prefill_requests,decode_requests,decode_context,"
             "kv_blocks_used,kv_use,swap_tokens"]
    for r in replicas:
        total = max(r.total_blocks, 1)
        for i in range(len(r.log_start)):
            lines.append(f"{r.index},{r.role},{_num(r.log_start[i])},{_num(r.log_dur[i])},{r.log_prefill[i]},"
                         f"{r.log_prefill_seqs[i]},{r.log_decode[i]},{r.log_context[i]},{r.log_kv[i]},"
                         f"{r.log_kv[i] / total:.4f},{r.log_swap[i]}")
    return "\n".join(lines) + "\n"


def summary_json(summary: dict[str, Any], config: dict[str, Any]) -> str:
    return json.dumps({"configuration": config, "metrics": summary}, indent=1) + "\n"


def trace_chunks(table: RequestTable, replicas: list[Any]) -> list[str]:
    """The Chrome trace as text pieces (written one after another, never joined into one string)."""
    pieces = ['{"displayTimeUnit":"ms","traceEvents":[\n']
    meta = []
    for r in replicas:
        name = f"replica {r.index}" + (f" ({r.role})" if r.role != "both" else "")
        meta.append(json.dumps({"name": "process_name", "ph": "M", "pid": r.index, "tid": 0, "args": {"name": name}}))
        meta.append(json.dumps({"name": "process_sort_index", "ph": "M", "pid": r.index, "tid": 0,
                                "args": {"sort_index": r.index}}))
        meta.append(json.dumps({"name": "thread_name", "ph": "M", "pid": r.index, "tid": 0, "args": {"name": "steps"}}))
    pieces.append(",\n".join(meta))
    for r in replicas:
        lines = []
        total = max(r.total_blocks, 1)
        last_batch = last_kv = -1
        for i in range(len(r.log_start)):
            ts = r.log_start[i] * 1e6
            pre, dec = r.log_prefill[i], r.log_decode[i]
            name = "prefill+decode" if pre and dec else "prefill" if pre else "decode"
            lines.append(f'{{"name":"{name}","ph":"X","pid":{r.index},"tid":0,"ts":{ts:.3f},'
                         f'"dur":{r.log_dur[i] * 1e6:.3f},"args":{{"prefill":{pre},"decode":{dec},'
                         f'"context":{r.log_context[i]}}}}}')
            # counters only where they change: a run has 10^5-10^6 steps, most of them alike
            batch = r.log_prefill_seqs[i] + dec
            if batch != last_batch:
                lines.append(f'{{"name":"batch","ph":"C","pid":{r.index},"ts":{ts:.3f},"args":{{"requests":{batch}}}}}')
                last_batch = batch
            kv = r.log_kv[i]
            if kv != last_kv:
                lines.append(f'{{"name":"KV use","ph":"C","pid":{r.index},"ts":{ts:.3f},"args":{{"share":'
                             f'{kv / total:.4f}}}}}')
                last_kv = kv
        if lines:
            pieces.append(",\n" + ",\n".join(lines))
    lines = []
    for i in range(len(table.rid)):
        rid, pid = int(table.rid[i]), int(table.prefill_replica[i] if table.prefill_replica[i] >= 0 else table.replica[i])
        args = (f'{{"prompt_tokens":{table.prompt[i]},"output_tokens":{table.output[i]},'
                f'"ttft_ms":{(table.first_token[i] - table.arrival[i]) * 1e3:.3f},"preemptions":{table.preemptions[i]}}}')
        lines.append(f'{{"name":"request {rid}","cat":"request","ph":"b","id":{rid},"pid":{pid},"tid":0,'
                     f'"ts":{table.arrival[i] * 1e6:.3f},"args":{args}}}')
        lines.append(f'{{"name":"first token","cat":"request","ph":"n","id":{rid},"pid":{pid},"tid":0,'
                     f'"ts":{table.first_token[i] * 1e6:.3f}}}')
        lines.append(f'{{"name":"request {rid}","cat":"request","ph":"e","id":{rid},"pid":{pid},"tid":0,'
                     f'"ts":{table.finish[i] * 1e6:.3f}}}')
    if lines:
        pieces.append(",\n" + ",\n".join(lines))
    pieces.append("\n]}\n")
    return pieces


# ---- the HTML report --------------------------------------------------------------------------------------

_CSS = """
:root { --ink: #1f2328; --muted: #59636e; --line: #d1d9e0; --band: #f6f8fa; --accent: #4c72b0; }
body { margin: 0; color: var(--ink); font: 15px/1.5 -apple-system, "Segoe UI", "Noto Sans", Helvetica, Arial, sans-serif; }
main, header, footer { max-width: 1200px; margin: 0 auto; padding: 0 28px; }
header { padding-top: 28px; } h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 20px; margin: 36px 0 10px; padding-bottom: 6px; border-bottom: 2px solid var(--line); }
p.meta, p.note, figcaption, footer { color: var(--muted); font-size: 13px; }
code { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12.5px; background: var(--band); padding: 1px 4px;
       border-radius: 4px; word-break: break-all; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(190px, 1fr)); gap: 12px; margin: 14px 0; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; background: var(--band); }
.card .label { font-size: 12px; color: var(--muted); text-transform: uppercase; letter-spacing: .03em; }
.card .value { font-size: 22px; font-weight: 600; font-variant-numeric: tabular-nums; }
.card .sub { font-size: 12px; color: var(--muted); }
table { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { padding: 5px 10px; border-bottom: 1px solid var(--line); text-align: right; }
th.text, td.text { text-align: left; } thead th { background: #eaeef2; }
figure { margin: 14px 0 6px; } figure img { max-width: 100%; border: 1px solid var(--line); border-radius: 6px; }
footer { margin: 40px auto 30px; border-top: 1px solid var(--line); padding-top: 10px; }
"""
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value * 1e3:,.1f} ms"


def _figure(png: bytes, caption: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(caption, quote=True)}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def cdf_png(table: RequestTable) -> bytes:
    """CDFs of TTFT, TPOT and E2E latency (ms)."""
    from utils.figures import new_figure, render

    fig, axes = new_figure(3.6, rows=1)
    fig.clear()
    axes = fig.subplots(1, 3)
    for ax, (name, values) in zip(axes, (("TTFT", table.ttft), ("TPOT", table.tpot), ("E2E latency", table.e2e))):
        values = np.sort(values[~np.isnan(values)]) * 1e3
        if len(values):
            ax.plot(values, np.arange(1, len(values) + 1) / len(values), color="#4C72B0")
            for p, style in ((50, ":"), (99, "--")):
                ax.axvline(np.percentile(values, p), color="#C44E52", linestyle=style, linewidth=1, label=f"p{p}")
            ax.legend(loc="lower right", fontsize=8)
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("share of requests")
    return render(fig)


def _binned(start: np.ndarray, values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The mean of ``values`` in each time bin (NaN where a replica ran no step)."""
    index = np.clip(np.searchsorted(edges, start, side="right") - 1, 0, len(edges) - 2)
    sums = np.bincount(index, weights=values, minlength=len(edges) - 1)
    counts = np.bincount(index, minlength=len(edges) - 1)
    with np.errstate(invalid="ignore"):
        return sums / counts


def timeseries_png(replicas: list[Any], bins: int = 400) -> bytes:
    """Batch size (requests per step) and KV use (share of blocks) over time, one line per replica (binned
    means); with more than 16 replicas, their mean and range."""
    from utils.figures import new_figure, render

    fig, (top, bottom) = new_figure(6.0, rows=2, sharex=True)
    ends = [r.log_start[-1] + r.log_dur[-1] for r in replicas if len(r.log_start)]
    horizon = max(ends) if ends else 1.0
    edges = np.linspace(0.0, horizon, bins + 1)
    mids = (edges[:-1] + edges[1:]) / 2
    series = []
    for r in replicas:
        start = np.frombuffer(r.log_start, dtype=float) if len(r.log_start) else np.empty(0)
        if not len(start):
            continue
        batch = np.frombuffer(r.log_prefill_seqs, dtype=np.int64) + np.frombuffer(r.log_decode, dtype=np.int64)
        kv = np.frombuffer(r.log_kv, dtype=np.int64) / max(r.total_blocks, 1)
        series.append((r, _binned(start, batch.astype(float), edges), _binned(start, kv, edges)))
    if len(series) <= 16:
        for r, batch, kv in series:
            label = f"replica {r.index}" + (f" ({r.role})" if r.role != "both" else "")
            top.plot(mids, batch, linewidth=0.8, label=label)
            bottom.plot(mids, kv * 100, linewidth=0.8)
        if 1 < len(series) <= 16:
            top.legend(loc="upper right", fontsize=7, ncol=4)
    else:
        for ax, k, scale in ((top, 1, 1.0), (bottom, 2, 100.0)):
            stack = np.vstack([s[k] for s in series]) * scale
            ax.plot(mids, np.nanmean(stack, axis=0), color="#4C72B0", label="mean of replicas")
            ax.fill_between(mids, np.nanmin(stack, axis=0), np.nanmax(stack, axis=0), color="#4C72B0", alpha=0.2,
                            label="range")
        top.legend(loc="upper right", fontsize=8)
    top.set_ylabel("requests per step")
    bottom.set_ylabel("KV blocks in use (%)")
    bottom.set_xlabel("time (s)")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    return render(fig)


def report_html(summary: dict[str, Any], config: dict[str, Any], table: RequestTable, replicas: list[Any],
                command: str) -> str:
    s = summary
    cards = [("TTFT p50 / p99", f"{_ms(s['ttft_p50_s'])}", f"p99 {_ms(s['ttft_p99_s'])}, mean {_ms(s['ttft_mean_s'])}"),
             ("TPOT p50 / p99", f"{_ms(s['tpot_p50_s'])}", f"p99 {_ms(s['tpot_p99_s'])}, mean {_ms(s['tpot_mean_s'])}"),
             ("E2E p50", f"{_ms(s['e2e_p50_s'])}", f"p99 {_ms(s['e2e_p99_s'])}"),
             ("throughput", f"{(s['requests_per_s'] or 0):,.2f} req/s", f"{(s['output_tokens_per_s'] or 0):,.0f} "
                                                                         "output tokens/s"),
             ("queueing p50 / p99", _ms(s["queue_p50_s"]), f"p99 {_ms(s['queue_p99_s'])}"),
             ("preemptions", f"{s['preemptions']:,}", f"{s['requests_preempted']:,} requests")]
    if "goodput_requests_per_s" in s:
        cards.append(("goodput", f"{(s['goodput_requests_per_s'] or 0):,.2f} req/s",
                      f"{(s['slo_attainment'] or 0) * 100:.1f}% of requests meet the SLOs"))
    card_html = "".join(f'<div class="card"><div class="label">{html.escape(a)}</div><div class="value">'
                        f'{html.escape(b)}</div><div class="sub">{html.escape(c)}</div></div>' for a, b, c in cards)
    rows = []
    for name, key in (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL (TBT)", "itl"), ("E2E latency", "e2e"),
                      ("queueing", "queue")):
        cells = "".join(f"<td>{_ms(s[f'{key}_{q}_s'])}</td>" for q in ("mean", "p50", "p90", "p99"))
        rows.append(f'<tr><td class="text">{name}</td>{cells}</tr>')
    latency = ('<table><thead><tr><th class="text">metric</th><th>mean</th><th>p50</th><th>p90</th><th>p99</th></tr>'
               f'</thead><tbody>{"".join(rows)}</tbody></table>')
    conf = "".join(f'<tr><td class="text">{html.escape(str(k))}</td><td class="text">{html.escape(str(v))}</td></tr>'
                   for k, v in config.items())
    steps = sum(len(r.log_start) for r in replicas)
    body = (f'<section id="summary"><h2>Summary</h2><div class="cards">{card_html}</div>{latency}'
            f'<p class="note">{s["completed"]:,} requests in {s["duration_s"]:,.2f} s simulated; {steps:,} replica steps. '
            "TPOT = (E2E - TTFT) / (output tokens - 1), vLLM's benchmark definition.</p></section>"
            f'<section id="cdf"><h2>Latency distributions</h2>{_figure(cdf_png(table), "CDFs of TTFT, TPOT and E2E")}'
            "</section>"
            f'<section id="time"><h2>Batch and KV cache over time</h2>'
            f'{_figure(timeseries_png(replicas), "requests per step and KV blocks in use, per replica")}</section>'
            f'<section id="config"><h2>Configuration</h2><table><tbody>{conf}</tbody></table></section>')
    title = f"Serving: {config.get('model', '')}"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n<body>"
            f'<header><h1>{html.escape(title)}</h1><p class="meta"><code>{html.escape(command)}</code></p></header>\n'
            f"<main>{body}</main>\n<footer>Made by <code>python -m simulator serve</code> (aicb-toolkit). Times in ms "
            "unless marked; simulated time.</footer>\n</body></html>\n")


OUTPUT_NAMES = ("requests.csv", "steps.csv", "summary.json", "trace.json", "report.html")
"""The files ``-o DIR`` holds after a run."""


def check_output_folder(folder: str, inputs: dict[str, Any], flag: str = "-o/--output") -> list[str]:
    """Check ``-o DIR`` before the run (one line naming the flag, :class:`utils.io.OutputError`): ``DIR`` (or a
    folder above it) is not a file and no name in it is longer than a file system takes, and none of its files
    is one of ``inputs`` (a trace or a step-cost file there would be replaced), a symbolic link or a folder
    (:func:`utils.io.guard_output`, which also removes what a killed run left).  Returns the files' paths."""
    from utils.io import NAME_MAX, OutputError, guard_output

    if not folder:
        raise OutputError(f"{flag}: empty path (give a folder)")
    for part in os.path.normpath(folder).split(os.sep):
        if len(os.fsencode(part)) > NAME_MAX:
            raise OutputError(f"{flag} {folder}: a name of {len(os.fsencode(part))} bytes, more than the {NAME_MAX} a "
                              "file system allows")
    probe = os.path.abspath(folder)
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise OutputError(f"{flag} {folder}: {probe} is a file, not a folder (the run writes "
                          f"{', '.join(OUTPUT_NAMES)} into a folder)")
    return [guard_output(os.path.join(folder, name), inputs, flag) for name in OUTPUT_NAMES]


def output_files(folder: str, summary: dict[str, Any], config: dict[str, Any], table: RequestTable,
                 replicas: list[Any], command: str) -> dict[str, Any]:
    """Every file of ``-o DIR`` (:data:`OUTPUT_NAMES`): name -> contents."""
    requests, steps, summary_name, trace, report = (os.path.join(folder, name) for name in OUTPUT_NAMES)
    return {requests: requests_csv(table), steps: steps_csv(replicas), summary_name: summary_json(summary, config),
            trace: trace_chunks(table, replicas), report: report_html(summary, config, table, replicas, command)}

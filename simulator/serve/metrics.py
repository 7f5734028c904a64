"""What a serving run measured, with vLLM's benchmark definitions (``benchmarks/benchmark_serving.py``,
``calculate_metrics``):

- TTFT: first token time - arrival; E2E latency: finish - arrival;
- TPOT: ``(e2e - ttft) / (output_tokens - 1)`` for requests of more than one output token (the others are left out
  of TPOT's statistics, and count as TPOT 0 for goodput, as vLLM does);
- ITL / TBT: every gap between two consecutive tokens of a request (vLLM's ``itl`` list);
- queueing delay: start of the first step that ran the request - arrival (not in vLLM's benchmark: the server's
  view);
- duration: from the first arrival to the last finish (vLLM times the benchmark from the first request sent to
  the last response); throughput = completed requests (output tokens) / duration; goodput = requests meeting
  every SLO given (TTFT <= ``slo_ttft``, TPOT <= ``slo_tpot``, E2E <= ``slo_e2e``) / duration;
- percentiles are numpy's (linear interpolation), as vLLM's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class SLO:
    """Service-level objectives in seconds (None: not asked)."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.ttft_s, self.tpot_s, self.e2e_s))


@dataclass
class RequestTable:
    """Per-request arrays (seconds, tokens), in request id order."""

    rid: np.ndarray
    replica: np.ndarray
    prefill_replica: np.ndarray
    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    scheduled: np.ndarray
    preemptions: np.ndarray

    @property
    def ttft(self) -> np.ndarray:
        return self.first_token - self.arrival

    @property
    def e2e(self) -> np.ndarray:
        return self.finish - self.arrival

    @property
    def tpot(self) -> np.ndarray:
        """TPOT per request, NaN for a single output token."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.output > 1, (self.e2e - self.ttft) / np.maximum(self.output - 1, 1), np.nan)

    @property
    def queueing(self) -> np.ndarray:
        return self.scheduled - self.arrival


def request_table(requests: list[Any]) -> RequestTable:
    def column(name: str, dtype: Any) -> np.ndarray:
        return np.fromiter((getattr(r, name) for r in requests), dtype=dtype, count=len(requests))

    return RequestTable(column("rid", np.int64), column("replica", np.int64), column("prefill_replica", np.int64),
                        column("arrival", float), column("prompt", np.int64), column("output", np.int64),
                        column("first_token", float), column("finish", float), column("scheduled", float),
                        column("preemptions", np.int64))


def token_gaps(requests: list[Any], replicas: list[Any]) -> np.ndarray:
    """Every inter-token gap of every request (s): its tokens' times are its prefills' ends and the ends of the
    decode steps it took part in (a span of ticks of a replica).  With speculative decoding a step emits several
    ticks at once: they reach the client as one streamed chunk, and vLLM's ITL is the gap between chunks, so the
    repeated times of one step count once."""
    ticks = [np.frombuffer(r.tick_times, dtype=float) if len(r.tick_times) else np.empty(0) for r in replicas]
    multi = [getattr(r, "tau", 1.0) != 1.0 for r in replicas]
    pieces = []
    for req in requests:
        marks = req.marks
        if len(marks) == 1:
            continue
        parts = []
        for mark in marks:
            if isinstance(mark, tuple):
                replica, t0, t1 = mark
                span = ticks[replica][t0:t1]
                if multi[replica] and len(span) > 1:
                    span = span[np.concatenate(([True], np.diff(span) != 0))]
                parts.append(span)
            else:
                parts.append(np.array((mark,)))
        times = np.concatenate(parts)
        if len(times) > 1:
            pieces.append(np.diff(times))
    return np.concatenate(pieces) if pieces else np.empty(0)


def stats(values: np.ndarray) -> dict[str, float | None]:
    """mean, p50, p90, p99 (None when there are no values)."""
    values = values[~np.isnan(values)] if values.dtype.kind == "f" else values
    if len(values) == 0:
        return {"mean": None, **{f"p{p}": None for p in PERCENTILES}}
    q = np.percentile(values, PERCENTILES)
    return {"mean": float(np.mean(values)), **{f"p{p}": float(v) for p, v in zip(PERCENTILES, q)}}


def summarize(table: RequestTable, gaps: np.ndarray, slo: SLO) -> dict[str, Any]:
    """The run's figures (seconds, tokens, per second), flat keys as ``--json`` prints them."""
    out: dict[str, Any] = {}
    duration = float(np.max(table.finish) - np.min(table.arrival)) if len(table.rid) else 0.0
    tpot = table.tpot
    for name, values in (("ttft", table.ttft), ("tpot", tpot), ("itl", gaps), ("e2e", table.e2e),
                         ("queue", table.queueing)):
        for key, value in stats(values).items():
            out[f"{name}_{key}_s"] = value
    completed = len(table.rid)
    out.update(completed=completed, duration_s=duration, total_prompt_tokens=int(np.sum(table.prompt)),
               total_output_tokens=int(np.sum(table.output)), preemptions=int(np.sum(table.preemptions)),
               requests_preempted=int(np.count_nonzero(table.preemptions)))
    out["requests_per_s"] = completed / duration if duration > 0 else None
    out["output_tokens_per_s"] = out["total_output_tokens"] / duration if duration > 0 else None
    out["total_tokens_per_s"] = ((out["total_prompt_tokens"] + out["total_output_tokens"]) / duration
                                 if duration > 0 else None)
    if slo:
        good = meets(table, slo)
        out["slo_ttft_s"], out["slo_tpot_s"], out["slo_e2e_s"] = slo.ttft_s, slo.tpot_s, slo.e2e_s
        out["good_requests"] = int(np.count_nonzero(good))
        out["goodput_requests_per_s"] = out["good_requests"] / duration if duration > 0 else None
        out["slo_attainment"] = out["good_requests"] / completed if completed else None
    return out


def meets(table: RequestTable, slo: SLO) -> np.ndarray:
    """Which requests meet every SLO (vLLM's goodput: TPOT 0 for single-token answers)."""
    good = np.ones(len(table.rid), dtype=bool)
    if slo.ttft_s is not None:
        good &= table.ttft <= slo.ttft_s
    if slo.tpot_s is not None:
        good &= np.nan_to_num(table.tpot, nan=0.0) <= slo.tpot_s
    if slo.e2e_s is not None:
        good &= table.e2e <= slo.e2e_s
    return good

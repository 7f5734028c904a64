"""Request sources of a serving run: when requests arrive and how long their prompts and answers are.

Arrivals (seconds from the start; the first request at 0, as vLLM's ``benchmarks/benchmark_serving.py`` sends its
first request at once and sleeps an interval after each):

- ``poisson(qps)``: exponential gaps of mean ``1 / qps``;
- ``gamma(qps, burstiness)``: gamma gaps of shape ``burstiness`` and scale ``1 / (qps x burstiness)``, vLLM's
  ``--burstiness`` (1 is Poisson; below 1 burstier; the gaps' coefficient of variation is ``1 / sqrt(burstiness)``);
- a fixed concurrency (closed loop): no arrival times; the engine sends a request at 0 for each of the ``C``
  clients and a client's next one when its previous one finishes (vLLM's ``--max-concurrency`` with every request
  ready at once);
- a trace CSV (:func:`read_trace`): ``arrival_s,prompt_tokens,output_tokens`` per line (Vidur's
  ``arrived_at,num_prefill_tokens,num_decode_tokens`` header is read too).

Lengths: fixed (``--prompt_tokens P --output_tokens O``: every request those lengths; vLLM's random dataset's
defaults 1024 and 128) or a named preset of :data:`PRESETS`, each citing where its numbers come from.  Every draw
uses one seeded :class:`numpy.random.Generator` (``--seed``), so a run is reproducible.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from utils.cli_types import INT64_MAX
from utils.errors import ConfigError, FormatError

DEFAULT_PROMPT_TOKENS = 1024
DEFAULT_OUTPUT_TOKENS = 128
"""vLLM's ``benchmark_serving.py --dataset-name random`` defaults (``--random-input-len``, ``--random-output-len``)."""
DEFAULT_NUM_REQUESTS = 1000
"""vLLM's ``benchmark_serving.py --num-prompts`` default."""
MAX_ITEMS = 2_000_000
"""Requests + schedulers + replica steps one run may take unless ``--max_items`` says otherwise (as the workload
generators' ``--max_items``): a request holds about 1 KB and takes about 12 us, a step about 0.1 KB and 3 us (2-core
machine), so a run at the limit takes about 2 GB and half a minute; ``--num_requests 1e8`` or an answer of 10^8
tokens is refused before it starts, a run whose steps pass the limit stops there with one line."""
MAX_SPAN_S = 1e9
"""The longest time a run's arrivals may span (about 32 years): the engine's clock is a float of seconds, which
beyond this no longer resolves a tenth of a microsecond, so a step's duration would be lost in its rounding."""

_Q = (0, 1, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 75, 80, 85, 90, 95, 99, 100)
"""Percentiles of the empirical presets' tables."""


@dataclass(frozen=True)
class LengthPreset:
    """A length distribution: ``kind`` ``quantiles`` (piecewise-linear inverse CDFs at the percentiles :data:`_Q`)
    or ``lognormal`` (median and spread of each); prompt and output are drawn independently (the traces' correlation
    is not kept: Arxiv-Summarization's log lengths correlate at -0.48, the Splitwise traces' at 0.09 and 0.00), and
    draws outside the filters (prompt + output above ``max_total``, prompt above ``max_prompt``, either below
    ``min_tokens``) are drawn again, as the source filtered its requests."""

    name: str
    source: str
    kind: str
    prompt: tuple[float, ...]
    output: tuple[float, ...]
    max_total: int | None = None
    max_prompt: int | None = None
    min_tokens: int = 1

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``n`` prompt and output lengths (int64 arrays)."""
        prompts = np.empty(0, dtype=np.int64)
        outputs = np.empty(0, dtype=np.int64)
        while len(prompts) < n:  # rejection of draws outside the filters (a few % at most)
            want = max(n - len(prompts), 16) * 2
            p, o = self._draw(want, rng)
            keep = (p >= self.min_tokens) & (o >= self.min_tokens)
            if self.max_prompt is not None:
                keep &= p <= self.max_prompt
            if self.max_total is not None:
                keep &= p + o <= self.max_total
            prompts = np.concatenate([prompts, p[keep]])
            outputs = np.concatenate([outputs, o[keep]])
        return prompts[:n], outputs[:n]

    def _draw(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        if self.kind == "quantiles":
            u = rng.random((2, n)) * 100.0
            p = np.interp(u[0], _Q, self.prompt)
            o = np.interp(u[1], _Q, self.output)
        else:
            z = rng.standard_normal((2, n))
            p = np.exp(math.log(self.prompt[0]) + self.prompt[1] * z[0])
            o = np.exp(math.log(self.output[0]) + self.output[1] * z[1])
        return np.maximum(np.rint(p), 1).astype(np.int64), np.maximum(np.rint(o), 1).astype(np.int64)

    def describe(self) -> str:
        return f"{self.name} ({self.source})"


_Z90 = 1.2815515655446004
"""The standard normal's 90th percentile: a lognormal of median m and 90th percentile q has sigma ln(q/m) / z90."""


def _lognormal_from(median: float, p90: float) -> tuple[float, float]:
    return (median, math.log(p90 / median) / _Z90)


_VIDUR_REPO = ("microsoft/vidur data/processed_traces/{} (Vidur, Agrawal et al., MLSys 2024), percentiles computed "
               "from the file's {} requests")
_VIDUR_TABLE = ("Vidur (Agrawal et al., MLSys 2024, arXiv 2405.05465) Table 2, {}: median and P90 of prefill tokens "
                "{} / {}, decode tokens {} / {} (LLaMA-2 tokenizer, requests of at most 4096 tokens); a lognormal "
                "through each median and P90")

PRESETS: dict[str, LengthPreset] = {
    "arxiv_summarization": LengthPreset(
        "arxiv_summarization", _VIDUR_REPO.format("arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
                                                  "28,257") + " (mean 2588 / 291, median 2730 / 167, P90 3702 / 372)",
        "quantiles",
        (1, 73, 749, 1242, 1564, 1802, 1986, 2150, 2308, 2453, 2596, 2730, 2861, 2996, 3127, 3249, 3370, 3490, 3597,
         3702, 3813, 3933, 4054),
        (5, 36, 60, 78, 92, 104, 115, 125, 135, 145, 156, 167, 179, 192, 206, 222, 242, 268, 304, 372, 736, 3271, 4056)),
    "splitwise_conv": LengthPreset(
        "splitwise_conv", _VIDUR_REPO.format("splitwise_conv.csv", "19,366") + ": Azure's LLM inference trace 2023, "
        "conversation (Patel et al., Splitwise, ISCA 2024); mean 1155 / 211, median 1020 / 129, P90 2734 / 424",
        "quantiles",
        (2, 29, 181, 207, 372, 387, 396, 403, 414, 703, 984, 1020, 1045, 1071, 1097, 1130, 1189, 1315, 1876, 2734, 4083,
         4142, 14050),
        (7, 16, 41, 54, 67, 77, 85, 91, 96, 103, 113, 129, 151, 177, 217, 384, 395, 400, 411, 424, 451, 601, 1000)),
    "splitwise_code": LengthPreset(
        "splitwise_code", _VIDUR_REPO.format("splitwise_code.csv", "8,819") + ": Azure's LLM inference trace 2023, "
        "code (Patel et al., Splitwise, ISCA 2024); mean 2048 / 28, median 1469 / 13, P90 5188 / 55",
        "quantiles",
        (3, 17, 75, 147, 232, 386, 578, 770, 939, 1075, 1261, 1469, 1690, 1909, 2164, 2433, 2744, 3192, 3920, 5188, 7303,
         7436, 7437),
        (6, 6, 6, 7, 7, 8, 9, 9, 10, 11, 12, 13, 14, 16, 18, 20, 24, 29, 39, 55, 90, 251, 1899)),
    "chat1m": LengthPreset(
        "chat1m", _VIDUR_TABLE.format("LMSys-Chat-1M-4K", 417, 1678, 139, 484) + " (Table 2's means 686 / 197)",
        "lognormal", _lognormal_from(417, 1678), _lognormal_from(139, 484), max_total=4096),
    "bwb": LengthPreset(
        "bwb", _VIDUR_TABLE.format("Bilingual-Web-Book-4K", 1037, 1453, 1601, 2149) + " (Table 2's means 1067 / 1612)",
        "lognormal", _lognormal_from(1037, 1453), _lognormal_from(1601, 2149), max_total=4096),
    "sharegpt": LengthPreset(
        "sharegpt", "ShareGPT as vLLM's benchmark_serving.py samples it (ShareGPT_V3_unfiltered_cleaned_split.json, "
        "first turn and its answer, requests kept with prompt and output of at least 4 tokens, prompt at most 1024 and "
        "prompt + output at most 2048): means 161.31 input and 337.99 output tokens (Kwon et al., 'Efficient Memory "
        "Management for LLM Serving with PagedAttention', SOSP 2023, Fig. 11a); a lognormal of sigma 1 (our "
        "assumption: the paper gives means only) scaled to those means before the filters",
        "lognormal", (161.31 / math.exp(0.5), 1.0), (337.99 / math.exp(0.5), 1.0), max_total=2048, max_prompt=1024,
        min_tokens=4),
}
"""Named length distributions (``--dataset NAME``)."""


@dataclass
class Workload:
    """The requests of a run: ``arrival_s`` (seconds, sorted; None for a closed loop of ``concurrency`` clients),
    prompt and output tokens (int64 arrays of one length), what it is, and warnings for the user."""

    prompt: np.ndarray
    output: np.ndarray
    arrival_s: np.ndarray | None = None
    concurrency: int | None = None
    description: str = ""
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if (self.arrival_s is None) == (self.concurrency is None):
            raise ValueError("a workload has arrival times or a concurrency, not both")

    def __len__(self) -> int:
        return len(self.prompt)


def arrivals(n: int, qps: float, burstiness: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` arrival times (s): 0, then cumulative gamma gaps of shape ``burstiness`` and mean ``1 / qps``
    (exponential for burstiness 1), vLLM's ``get_request``.  ``qps`` infinite: all at 0."""
    if not qps > 0:
        raise ConfigError(f"--qps must be positive, got {qps}")
    if not burstiness > 0:
        raise ConfigError(f"--burstiness must be positive, got {burstiness}")
    if math.isinf(qps):
        return np.zeros(n)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (qps * burstiness), size=max(n - 1, 0))
    return np.concatenate([[0.0], np.cumsum(gaps)])


def lengths(n: int, rng: np.random.Generator, dataset: str | None = None, prompt_tokens: int | None = None,
            output_tokens: int | None = None) -> tuple[np.ndarray, np.ndarray, str]:
    """``n`` prompt and output lengths and their description: a preset (``dataset``) or fixed lengths."""
    if dataset is not None:
        if prompt_tokens is not None or output_tokens is not None:
            raise ConfigError("--dataset draws the lengths: give it or --prompt_tokens/--output_tokens, not both")
        preset = PRESETS.get(dataset.lower())
        if preset is None:
            raise ConfigError(f"--dataset {dataset!r} is not one of {', '.join(PRESETS)}")
        p, o = preset.sample(n, rng)
        return p, o, f"lengths from {preset.name}"
    p_len = DEFAULT_PROMPT_TOKENS if prompt_tokens is None else prompt_tokens
    o_len = DEFAULT_OUTPUT_TOKENS if output_tokens is None else output_tokens
    for flag, value in (("--prompt_tokens", p_len), ("--output_tokens", o_len)):
        if value < 1:
            raise ConfigError(f"{flag} must be at least 1, got {value}")
    return (np.full(n, p_len, dtype=np.int64), np.full(n, o_len, dtype=np.int64),
            f"{p_len} prompt and {o_len} output tokens each")


_TRACE_COLUMNS = {"arrival_s": ("arrival_s", "arrived_at"), "prompt_tokens": ("prompt_tokens", "num_prefill_tokens"),
                  "output_tokens": ("output_tokens", "num_decode_tokens")}


def limit_of(max_items: int | None) -> int:
    """``--max_items`` or :data:`MAX_ITEMS`."""
    return int(max_items) if max_items else MAX_ITEMS


def refuse_device(path: str, expected: str) -> None:
    """A :class:`FormatError` for a device given as an input file (``/dev/zero`` has no line end: reading its
    first line would fill the memory); a missing file is left to the reader, which says why."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        raise FormatError(path, f"a device, not a file (expected {expected})")


def check_requests(num_requests: int, max_items: int | None = None) -> None:
    """Refuse more requests than a run may take (``--max_items``, :data:`MAX_ITEMS`) before
    any of them is drawn: ``--num_requests 1e12`` would otherwise allocate terabytes."""
    limit = limit_of(max_items)
    if num_requests > limit:
        raise ConfigError(f"--num_requests {num_requests:,} is above the limit of {limit:,} requests + schedulers + "
                          "replica steps a run may take (--max_items): lower --num_requests, or raise --max_items if "
                          "the machine has the time and memory for it")


def read_trace(path: str | os.PathLike, max_items: int | None = None) -> Workload:
    """A trace CSV: a header naming ``arrival_s``, ``prompt_tokens`` and ``output_tokens`` (or Vidur's
    ``arrived_at``, ``num_prefill_tokens``, ``num_decode_tokens``) in any order, then one request per line.

    A bad cell (not a number, a negative time, a prompt or output of fewer than 1 token) is a
    :class:`~utils.errors.FormatError` naming the file, line and column; arrivals out of order are sorted, with a
    warning saying how many were.  A trace of more requests than a run may take (``max_items``) is refused when
    its reading passes that many."""
    from utils.io import read_lines

    limit = limit_of(max_items)
    path = os.fspath(path)
    refuse_device(path, "a trace CSV")
    rows: list[tuple[float, int, int]] = []
    columns: dict[str, int] | None = None
    for number, line in enumerate(read_lines(path, "a trace CSV (arrival_s,prompt_tokens,output_tokens)"), start=1):
        cells = [c.strip() for c in line.split(",")]
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if columns is None:
            columns = _header(path, number, cells)
            continue
        if max(columns.values()) >= len(cells):
            raise FormatError(path, f"expected at least {max(columns.values()) + 1} columns, got {len(cells)}", number)
        rows.append(_row(path, number, cells, columns))
        if len(rows) > limit:
            raise FormatError(path, f"more than {limit:,} requests, the most a run may take (--max_items): serve a "
                                    "part of the trace, or raise --max_items if the machine has the time and memory "
                                    "for it", number)
    if columns is None:
        raise FormatError(path, "empty trace: expected a header arrival_s,prompt_tokens,output_tokens and requests")
    if not rows:
        raise FormatError(path, "the trace holds no request (only its header)")
    data = np.array(rows, dtype=np.float64)
    warnings = []
    order = np.argsort(data[:, 0], kind="stable")
    unsorted = int(np.count_nonzero(np.diff(data[:, 0]) < 0))
    if unsorted:
        warnings.append(f"{path}: arrival times are not in order ({unsorted} of {len(rows)} requests arrive before the "
                        "one above them): sorted")
        data = data[order]
    start = data[0, 0]
    return Workload(data[:, 1].astype(np.int64), data[:, 2].astype(np.int64), arrival_s=data[:, 0] - start,
                    description=f"trace {os.path.basename(path)}" + (f" (shifted by -{start:g} s)" if start else ""),
                    warnings=warnings)


def _header(path: str, number: int, cells: list[str]) -> dict[str, int]:
    names = [c.lower().lstrip("\ufeff") for c in cells]  # a byte-order mark (Excel's UTF-8 CSV) is no part of a name
    out: dict[str, int] = {}
    for key, spellings in _TRACE_COLUMNS.items():
        for spelling in spellings:
            if spelling in names:
                out[key] = names.index(spelling)
                break
        else:
            raise FormatError(path, f"the header has no {key} column (expected arrival_s,prompt_tokens,output_tokens; "
                                    f"got {','.join(cells)})", number)
    return out


def _row(path: str, number: int, cells: list[str], columns: dict[str, int]) -> tuple[float, int, int]:
    values: list[float] = []
    for key in ("arrival_s", "prompt_tokens", "output_tokens"):
        text = cells[columns[key]]
        column = f"column {columns[key] + 1} ({key})"
        try:
            value = float(text)
        except ValueError:
            raise FormatError(path, f"{text!r} is not a number", number, column) from None
        if not math.isfinite(value):
            raise FormatError(path, f"{text!r} is not a finite number", number, column)
        if key == "arrival_s":
            if value < 0:
                raise FormatError(path, f"negative arrival time {text}", number, column)
        else:
            if value != int(value):
                raise FormatError(path, f"{text!r} is not a whole number of tokens", number, column)
            if value < 1:
                raise FormatError(path, f"{'prompt' if key == 'prompt_tokens' else 'output'} of {text} tokens "
                                        "(at least 1 expected)", number, column)
            if value > INT64_MAX:
                raise FormatError(path, f"{text} tokens is beyond the largest integer taken ({INT64_MAX})", number,
                                  column)
        values.append(value)
    return values[0], int(values[1]), int(values[2])


def _check_span(times: np.ndarray, what: str) -> None:
    """Refuse arrivals spread over more than :data:`MAX_SPAN_S` (a step would vanish in the clock's rounding)."""
    span = float(times[-1] - times[0]) if len(times) else 0.0
    if not span <= MAX_SPAN_S:
        raise ConfigError(f"{what} span {span:.3g} s, more than the {MAX_SPAN_S:.0e} s (about 32 years) a run's clock "
                          "resolves to a tenth of a microsecond: give arrivals closer together")


def make_workload(num_requests: int, seed: int, qps: float | None = None, concurrency: int | None = None,
                  trace: str | None = None, burstiness: float = 1.0, dataset: str | None = None,
                  prompt_tokens: int | None = None, output_tokens: int | None = None,
                  max_items: int | None = None) -> Workload:
    """The workload the flags describe (one of ``qps``, ``concurrency``, ``trace``); more requests than
    ``max_items`` are refused before any is made (:func:`check_requests`)."""
    given = [name for name, value in (("--qps", qps), ("--concurrency", concurrency), ("--trace", trace))
             if value is not None]
    if len(given) != 1:
        raise ConfigError("give one of --qps X, --concurrency C or --trace FILE" +
                          (f" (got {' and '.join(given)})" if given else ""))
    if num_requests < 1:
        raise ConfigError(f"--num_requests must be at least 1, got {num_requests}")
    rng = np.random.default_rng(seed)
    if trace is not None:
        if dataset is not None or prompt_tokens is not None or output_tokens is not None:
            raise ConfigError("--trace gives the lengths: --dataset, --prompt_tokens and --output_tokens do not apply")
        work = read_trace(trace, max_items)
        if num_requests < len(work):
            work = Workload(work.prompt[:num_requests], work.output[:num_requests], arrival_s=work.arrival_s[:num_requests],
                            description=work.description + f", first {num_requests} requests", warnings=work.warnings)
        _check_span(work.arrival_s, f"the arrivals of {trace}")
        return work
    check_requests(num_requests, max_items)
    prompt, output, what = lengths(num_requests, rng, dataset, prompt_tokens, output_tokens)
    if concurrency is not None:
        if concurrency < 1:
            raise ConfigError(f"--concurrency must be at least 1, got {concurrency}")
        return Workload(prompt, output, concurrency=concurrency,
                        description=f"{num_requests} requests from {concurrency} concurrent clients, {what}")
    assert qps is not None
    times = arrivals(num_requests, qps, burstiness, rng)
    _check_span(times, f"--qps {qps:g}" + (f" --burstiness {burstiness:g}" if burstiness != 1 else "") +
                f": the {num_requests:,} arrivals")
    kind = "Poisson" if burstiness == 1 else f"gamma (burstiness {burstiness:g})"
    return Workload(prompt, output, arrival_s=times, description=f"{num_requests} requests, {kind} arrivals at {qps:g}/s, "
                                                                 f"{what}")

"""Host (CPU) time of an inference step: kernel launches in eager PyTorch, or the replay of a captured CUDA graph.

An inference server runs a step either eagerly (every kernel launched from Python) or by replaying a CUDA graph
captured for that batch size.  vLLM (v0's ``ModelRunner``; ``_BATCH_SIZES_TO_CAPTURE = [1, 2, 4] + [8 * i for i in
range(1, 33)]`` in ``vllm/worker/model_runner.py``) and SGLang (``--cuda-graph-max-bs``) capture decode steps up to a
batch size and pad a decode batch up to the next captured size; prefills and mixed (chunked-prefill) steps run
eagerly.  So (:func:`step_mode`):

- **graphs** (a decode-only step within the captured sizes): the step's kernels run back to back on the GPU; the host
  copies the step's inputs into the graph's static buffers (:data:`INPUT_COPIES` copies in vLLM v0's
  ``CUDAGraphRunner.forward``: input ids, positions, slot mapping, sequence lengths, block tables), launches the graph
  once and copies the sampled tokens back: :data:`GRAPH_STEP_LAUNCHES` host launches, in series with the GPU (the
  next step's inputs depend on the sampled tokens);
- **eager**: the same input copies and token copy (:data:`EAGER_STEP_LAUNCHES`) in series, and each operation costs
  ``max(GPU time, its kernels x HOST_US_PER_LAUNCH)``: the host runs ahead of long kernels and the GPU waits on the
  host's launches of short ones (the compute model's :func:`~mocked_model.compute.estimator` with its ``host``
  argument; :data:`~mocked_model.compute.kernels.HOST_US_PER_LAUNCH` is 5 us per launch).

Derived, not measured: a graph launch and a copy are taken to cost one eager launch each.  The scheduler's CPU time
per step: only its output update is measured where we can cite it (:data:`SCHEDULER_US_PER_SEQ`, per running
request, in series with the GPU in vLLM V1's engine loop without ``--async-scheduling``); ``schedule()`` itself,
tokenization, detokenization and the API server's IPC are left out (no measurement we can cite separates them:
Vidur models them from a per-deployment profile, ``cpu_overheads.csv``, and skips them by default,
``skip_cpu_overhead_modeling``).
"""

from __future__ import annotations

from bisect import bisect_left

from mocked_model.compute.kernels import HOST_US_PER_LAUNCH

GRAPH_CAPTURE_SIZES: tuple[int, ...] = (1, 2, 4) + tuple(8 * i for i in range(1, 33))
"""Decode batch sizes vLLM v0 captures (``_BATCH_SIZES_TO_CAPTURE``, 1 to 256); a batch runs padded to the next."""
INPUT_COPIES = 5
"""Host-to-device copies of a step's inputs (vLLM v0 ``CUDAGraphRunner.forward``: ``input_ids``, ``positions``,
``slot_mapping``, ``seq_lens_tensor``, ``block_tables``; an eager step prepares the same tensors)."""
GRAPH_STEP_LAUNCHES = INPUT_COPIES + 2
"""Host launches in series per graph-replayed step: the input copies, the graph's launch, the sampled tokens' copy back."""
EAGER_STEP_LAUNCHES = INPUT_COPIES + 1
"""Host launches in series per eager step beyond its kernels: the input copies and the sampled tokens' copy back."""


def graph_batch(tokens: int, sizes: tuple[int, ...] = GRAPH_CAPTURE_SIZES) -> int | None:
    """The captured batch a decode step of ``tokens`` tokens replays (the next captured size), or None when it is
    larger than every captured size (the step runs eagerly)."""
    i = bisect_left(sizes, tokens)
    return sizes[i] if i < len(sizes) else None


def step_mode(host: str | None, decode_only: bool, tokens: int,
              sizes: tuple[int, ...] = GRAPH_CAPTURE_SIZES) -> str | None:
    """``graphs``, ``eager`` or None (no host time) for a step: graphs only for a decode-only step within the
    captured sizes of a server that captures them."""
    if host is None:
        return None
    if host == "graphs" and decode_only and graph_batch(tokens, sizes) is not None:
        return "graphs"
    return "eager"


SCHEDULER_US_PER_SEQ = 1.11
"""vLLM V1's ``Scheduler.update_from_output`` per running request: 0.142 ms for a decode batch of 128 (vllm-project/vllm
PR #46112, its micro-benchmark ``benchmarks/overheads/benchmark_scheduler_update_from_output.py``, baseline median;
0.287 ms at 256, 1.12 us per request)."""


def fixed_host_s(mode: str | None, seqs: int = 0) -> float:
    """Seconds of host time in series with the GPU per step of ``seqs`` running requests (see the module docstring)."""
    if mode is None:
        return 0.0
    launches = GRAPH_STEP_LAUNCHES if mode == "graphs" else EAGER_STEP_LAUNCHES
    return (launches * HOST_US_PER_LAUNCH + seqs * SCHEDULER_US_PER_SEQ) * 1e-6


def launch_us(mode: str | None) -> float:
    """Microseconds of host time per kernel launch inside the step: :data:`HOST_US_PER_LAUNCH` eager, 0 replayed."""
    return HOST_US_PER_LAUNCH if mode == "eager" else 0.0

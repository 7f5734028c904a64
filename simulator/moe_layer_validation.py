"""``python -m simulator validate --suite moe_layer``: one MoE layer's forward and backward as Megatron-LM's own CI
times them on H100, against the same layer inside a simulated job.

Source: Megatron-LM's MoE performance test, ``tests/functional_tests/test_cases/common/moe_perf/`` (NVIDIA/Megatron-LM at
d98e8a64dd; ``baseline.json`` last changed 2025-12-16): ``__main__.py`` builds one ``MoELayer`` with Transformer
Engine's grouped GEMM (``get_gpt_layer_with_transformer_engine_submodules(..., moe_grouped_gemm=True)``) on 8 H100s
(EP 8, TP 1), feeds it a [4096, 1, hidden] bf16 input and times the forward and the backward with CUDA events, 5 warm-up
and 20 measured iterations (the mean of the 20), a long dummy GEMM before each so that the host's launches run ahead.
Its ``TransformerConfig`` (``_build_transformer_config``): no bias, the config's default non-gated GeLU experts
(``gated_linear_unit`` False) without bias-activation fusion (``bias_activation_fusion`` False: the experts' GeLU,
its product with the fp32 routing probabilities and the cast back run as separate kernels), the aux-loss balancing at
coefficient 1.0 for every case, forced balanced routing (``moe_router_force_load_balancing``), an fp32 router
(``moe_router_dtype`` "fp32", the proxies' default), fused permutation and router kernels, bf16 parameters; FP8 cases
use the ``hybrid`` format with the ``blockwise`` recipe.  The two proxies (``test_cases.py``):

- Mixtral: hidden 4096, expert FFN 14336, 8 experts, top-2 (one local expert of 8192 routed tokens per GPU);
- DeepSeek: hidden 7168, expert FFN 2048, 32 experts, top-8 (four local experts of 8192 tokens each), sigmoid scores,
  expert bias, group-limited routing (8 groups, top 4: not modelled here, the router is a few kernels) and one shared
  expert of FFN 2048 (no overlap).

Dispatchers: ``alltoall``; ``flex`` with DeepEP; ``flex`` with HybridEP, which this model prices as DeepEP (as the
``moe`` suite does).  The simulated layer is layer 0 of a one-layer job on a DGX H100 (8 GPUs on NVLink 4) with the
same flags; its forward is the span of its MoE operations on the compute stream (router to combine, the exposed
all-to-alls included), its backward likewise, which is what the CUDA events bracket.  Reported without a bar.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

SOURCE = ("Megatron-LM tests/functional_tests/test_cases/common/moe_perf (d98e8a64dd): one MoELayer, 8 H100, EP 8, "
          "4096 tokens per GPU, CUDA-event forward and backward")
TOPOLOGY = ("--ro", "-g", "8", "-gps", "8", "-gt", "H100", "-nvbw", "3600Gbps", "-bw", "400Gbps")
"""A DGX H100: 8 GPUs on NVLink 4 (450 GB/s each way = 3600 Gb/s) and one 400 Gb/s NIC each (unused at EP 8)."""
_JOB = ("--model", "topo", "--gpu_type", "H100", "--frame", "Megatron", "--world_size", "8", "--num_layers", "1",
        "--num_attention_heads", "8", "--seq_length", "4096", "--micro_batch", "1", "--global_batch", "8",
        "--vocab_size", "32000", "--moe_enable", "--expert_model_parallel_size", "8", "--moe_grouped_gemm",
        "--moe_permute_fusion", "--moe_router_fusion", "--moe_router_load_balancing_type", "aux_loss",
        "--moe_aux_loss_coeff", "1.0", "--moe_router_dtype", "fp32", "--no_bias_gelu_fusion", "-q")
_PROXIES = {
    "mixtral": ("--hidden_size", "4096", "--ffn_hidden_size", "14336", "--num_experts", "8", "--moe_router_topk", "2",
                "--moe_ffn_hidden_size", "14336"),
    "deepseek": ("--hidden_size", "7168", "--ffn_hidden_size", "18432", "--num_experts", "32", "--moe_router_topk", "8",
                 "--moe_ffn_hidden_size", "2048", "--n_shared_expert", "1", "--moe_router_score_function", "sigmoid"),
}
_DISPATCHERS = {"a2a": ("--moe_token_dispatcher_type", "alltoall"),
                "deepep": ("--moe_token_dispatcher_type", "flex", "--moe_enable_deepep"),
                "hybridep": ("--moe_token_dispatcher_type", "flex", "--moe_enable_deepep")}
_PRECISIONS = {"bf16": ("--dtype", "bfloat16"), "fp8": ("--dtype", "float8", "--fp8_recipe", "blockwise")}
PUBLISHED_MS: dict[str, tuple[float, float]] = {
    "deepseek_a2a_tp1ep8_bf16": (7.119169592857361, 10.482670497894286),
    "deepseek_a2a_tp1ep8_fp8": (7.609272027015686, 10.126460886001587),
    "deepseek_deepep_tp1ep8_bf16": (5.681718397140503, 9.055137538909912),
    "deepseek_deepep_tp1ep8_fp8": (6.034772801399231, 8.60211353302002),
    "deepseek_hybridep_tp1ep8_bf16": (5.390828824043274, 8.795001602172851),
    "deepseek_hybridep_tp1ep8_fp8": (5.142886424064637, 7.6874864339828495),
    "mixtral_a2a_tp1ep8_bf16": (4.32688798904419, 7.684332823753357),
    "mixtral_a2a_tp1ep8_fp8": (3.7876319885253906, 6.618246412277221),
    "mixtral_deepep_tp1ep8_bf16": (4.635550403594971, 7.854356813430786),
    "mixtral_deepep_tp1ep8_fp8": (4.101150441169739, 6.82720000743866),
    "mixtral_hybridep_tp1ep8_bf16": (4.342604804039001, 7.740782427787781),
    "mixtral_hybridep_tp1ep8_fp8": (3.7007392168045046, 6.57167682647705),
}
"""Case name -> (forward, backward) milliseconds, ``baseline.json`` as published."""


@dataclass(frozen=True)
class LayerCase:
    """One ``baseline.json`` entry: its name, the published forward and backward (ms) and the job's flags."""

    name: str
    forward_ms: float
    backward_ms: float
    flags: tuple[str, ...]

    def command(self, topology: str = "dgx_h100_8g.txt") -> str:
        import shlex

        return (f"python -m topo.gen {shlex.join(TOPOLOGY)} -o {topology} && python -m simulator "
                f"{shlex.join([*self.flags, '-t', topology])} --trace it.json")


def _case(name: str) -> LayerCase:
    model, dispatcher, _parallel, precision = name.split("_")
    fwd, bwd = PUBLISHED_MS[name]
    return LayerCase(name, fwd, bwd, (*_JOB, *_PROXIES[model], *_DISPATCHERS[dispatcher], *_PRECISIONS[precision]))


CASES: list[LayerCase] = [_case(name) for name in sorted(PUBLISHED_MS, key=lambda n: (not n.startswith("mixtral"), n))]


def moe_spans_ms(result, layer: str = "layers.0") -> tuple[float, float]:
    """(forward, backward) milliseconds of ``layer``'s MoE block on stage 0's compute stream: from the first operation
    of the block (router, dispatch, experts, shared experts, combine) to the last, each way, so that all-to-alls the
    compute waits for count as they do between two CUDA events."""
    prefix = f"{layer}.mlp"
    spans: dict[str, list[float]] = {}
    for iv in result.details.intervals():
        if iv.stage != 0 or iv.stream != "compute":
            continue
        op = iv.name.split(" ")[-1]
        if op != prefix and not op.startswith(prefix + "."):
            continue
        direction = iv.name.split(".", 1)[0]
        span = spans.setdefault(direction, [float("inf"), 0.0])
        span[0] = min(span[0], iv.start_s)
        span[1] = max(span[1], iv.start_s + iv.duration_s)
    if set(spans) != {"forward", "backward"}:
        raise ValueError(f"no MoE operations of {layer} in both directions (found {sorted(spans)})")
    return tuple((end - start) * 1e3 for start, end in (spans["forward"], spans["backward"]))  # type: ignore[return-value]


def run_case(case: LayerCase, folder: str) -> dict:
    """Simulate ``case``'s job (the topology written into ``folder`` once); its row."""
    from simulator.cli import build_parser, simulate_args
    from topo.gen import write_topology

    path = os.path.join(folder, "dgx_h100_8g.txt")
    if not os.path.exists(path):
        write_topology([*TOPOLOGY, "-o", path])
    result, _source, _job = simulate_args(build_parser().parse_args([*case.flags, "-t", path]))
    fwd, bwd = moe_spans_ms(result)
    total, published = fwd + bwd, case.forward_ms + case.backward_ms
    return {"case": case.name, "source": SOURCE, "suite": "moe_layer", "published_forward_ms": case.forward_ms,
            "published_backward_ms": case.backward_ms, "simulated_forward_ms": fwd, "simulated_backward_ms": bwd,
            "error_pct": (total / published - 1) * 100, "command": case.command()}


def main(json_out: bool, show: bool, pattern: str | None) -> int:
    """Run the cases (those whose name contains ``pattern``): a row each and the mean |error| of forward + backward."""
    cases = [c for c in CASES if pattern is None or pattern.lower() in c.name.lower()]
    if not cases:
        from utils.errors import ConfigError

        raise ConfigError(f"--cases {pattern!r} matches none of: {', '.join(c.name for c in CASES)}")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for case in cases:
            row = run_case(case, folder)
            rows.append(row)
            if not json_out:
                print(f"{row['case']:<30} forward {row['published_forward_ms']:6.2f} / {row['simulated_forward_ms']:6.2f} ms"
                      f"  backward {row['published_backward_ms']:6.2f} / {row['simulated_backward_ms']:6.2f} ms"
                      f"  {row['error_pct']:+6.1f}%", flush=True)
                if show:
                    print(f"    {row['command']}")
    if json_out:
        print(json.dumps(rows))
        return 0
    errors = [abs(r["error_pct"]) for r in rows]
    print(f"{SOURCE}: {len(errors)} layers, published / simulated; forward + backward mean |error| "
          f"{sum(errors) / len(errors):.1f}%, max {max(errors):.1f}% (reported, no bar)")
    return 0


__all__: Sequence[str] = ("CASES", "PUBLISHED_MS", "LayerCase", "main", "moe_spans_ms", "run_case")

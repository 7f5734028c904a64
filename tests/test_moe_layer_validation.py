"""``python -m simulator validate --suite moe_layer``: Megatron-LM's MoE layer timings on H100 against the same layer
inside a simulated one-layer job (simulator/moe_layer_validation.py)."""

from __future__ import annotations

import pytest

from simulator.moe_layer_validation import CASES, PUBLISHED_MS, moe_spans_ms, run_case


def test_cases_cover_the_published_baseline() -> None:
    """Every baseline.json entry is a case, with its flags read from its name (proxy, dispatcher, precision)."""
    assert {c.name for c in CASES} == set(PUBLISHED_MS) and len(CASES) == 12
    by_name = {c.name: c for c in CASES}
    mix = by_name["mixtral_a2a_tp1ep8_bf16"]
    assert (mix.forward_ms, mix.backward_ms) == PUBLISHED_MS["mixtral_a2a_tp1ep8_bf16"]
    flags = " ".join(mix.flags)
    assert "--num_experts 8 --moe_router_topk 2" in flags and "--moe_token_dispatcher_type alltoall" in flags
    assert "--swiglu" not in flags  # the harness's TransformerConfig keeps the default non-gated GeLU experts
    ds = " ".join(by_name["deepseek_hybridep_tp1ep8_fp8"].flags)
    assert "--n_shared_expert 1" in ds and "--moe_enable_deepep" in ds and "--fp8_recipe blockwise" in ds


@pytest.fixture(scope="module")
def mixtral_row(tmp_path_factory) -> dict:
    (case,) = [c for c in CASES if c.name == "mixtral_a2a_tp1ep8_bf16"]
    return run_case(case, str(tmp_path_factory.mktemp("moe_layer")))


def test_span_is_the_moe_block_with_its_exposed_all_to_alls(mixtral_row: dict, tmp_path) -> None:
    """The forward span runs from the router to the combine and holds the experts' two GEMMs and both all-to-alls
    (one local expert of 8192 tokens: fc1 and fc2 are 2 x 8192 x 4096 x 14336 FLOPs each), and the error is of the
    sum of both directions."""
    from simulator.cli import build_parser, simulate_args
    from simulator.moe_layer_validation import TOPOLOGY
    from topo.gen import main as topo_main

    (case,) = [c for c in CASES if c.name == "mixtral_a2a_tp1ep8_bf16"]
    path = str(tmp_path / "t.txt")
    topo_main([*TOPOLOGY, "-o", path])
    result, _, _ = simulate_args(build_parser().parse_args([*case.flags, "-t", path]))
    fwd, bwd = moe_spans_ms(result)
    assert (fwd, bwd) == (mixtral_row["simulated_forward_ms"], mixtral_row["simulated_backward_ms"])
    ops = [iv for iv in result.details.intervals() if iv.stage == 0 and iv.stream == "compute"
           and iv.name.split(" ")[-1].startswith("layers.0.mlp.") and iv.name.startswith("forward")]
    gemms = sum(iv.duration_s for iv in ops if iv.name.split(" ")[-1] in ("layers.0.mlp.experts.fc1",
                                                                             "layers.0.mlp.experts.fc2")) * 1e3
    busy = sum(iv.duration_s for iv in ops) * 1e3
    assert gemms < busy < fwd  # the span also holds what the compute stream waits for: the all-to-alls
    flops = 2 * 2 * 8192 * 4096 * 14336
    assert 400 < flops / (gemms * 1e-3) / 1e12 < 989  # below H100's dense bf16 peak
    published = sum(PUBLISHED_MS["mixtral_a2a_tp1ep8_bf16"])
    assert mixtral_row["error_pct"] == pytest.approx(((fwd + bwd) / published - 1) * 100)


def test_spans_need_an_moe_layer() -> None:
    """A result without the layer's MoE operations is an error naming the layer, not a zero span."""
    from types import SimpleNamespace

    empty = SimpleNamespace(details=SimpleNamespace(intervals=lambda: []))
    with pytest.raises(ValueError, match="layers.0"):
        moe_spans_ms(empty)


def test_validate_runs_the_suite_by_name(capsys) -> None:
    """``python -m simulator validate --suite moe_layer -k TEXT --json``: the rows of the matching layers."""
    import json

    from simulator.validation import main

    assert main(["--suite", "moe_layer", "-k", "deepseek_deepep_tp1ep8_bf16", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["case"] == "deepseek_deepep_tp1ep8_bf16" and row["suite"] == "moe_layer"
    assert (row["published_forward_ms"], row["published_backward_ms"]) == PUBLISHED_MS[row["case"]]
    assert row["simulated_forward_ms"] > 0 and row["simulated_backward_ms"] > row["simulated_forward_ms"]

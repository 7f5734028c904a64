"""GPU spec files from kernel sweeps: ``python -m profiling kernels`` -> ``fit-gpu`` -> ``--gpu_spec``.

(a) the shipped profiling/gpu_specs/H200.json is what fit-gpu makes of profiling/measurements/h200/kernels.json;
(b) the fit's arithmetic by hand on tiny synthetic sweeps; (c) a CPU ``--quick`` sweep feeds fit-gpu; (d) bad
sweeps, bad outputs and bad spec files are one line and exit 2 with nothing written; (e) the real sweep on CUDA.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path

import pytest

from mocked_model.compute import calibrate
from mocked_model.compute.gpu_table import GPUS, H200_FP8_SPEEDUP, H200_GEMM_EFF, H200_SUSTAINED_MHZ
from mocked_model.compute.kernels import GemmShape, attention_work, flash_attention_ns, gemm_ns
from mocked_model.compute.spec_file import load_gpu_spec, spec_to_dict
from profiling import fit_gpu
from tests.conftest import ROOT, run_cli

SWEEP = "profiling/measurements/h200/kernels.json"
SHIPPED = ROOT / "profiling" / "gpu_specs" / "H200.json"
COMMAND = f"python -m profiling fit-gpu {SWEEP} --base H200 -o profiling/gpu_specs/H200.json"
SIM = ["-m", "simulator", "--model", "topo", "-g_p_s", "1", "--world_size", "1", "--num_layers", "2", "--hidden_size",
       "256", "--num_attention_heads", "4", "--seq_length", "128", "--max_position_embeddings", "128"]


def _one_error(result, *words: str) -> str:
    """The one stderr line of a refused command (exit 2, no traceback, no stdout), containing ``words``."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and "Traceback" not in result.stderr, result.stderr
    assert result.stdout == ""
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


# ---- (a) the shipped file and its source -------------------------------------------------------------------


def test_shipped_h200_is_the_fit_of_its_sweep_field_by_field():
    spec = fit_gpu.fit(fit_gpu.load_sweep(str(ROOT / SWEEP)), "H200", None, SWEEP).spec
    fitted = spec_to_dict(spec, "H200")
    shipped = json.loads(SHIPPED.read_text(encoding="utf-8"))
    assert sorted(fitted) == sorted(shipped)
    for key in shipped:
        assert fitted[key] == shipped[key], f"H200.json field {key!r} drifted from {SWEEP}: run {COMMAND}"
    assert load_gpu_spec(str(SHIPPED)) == spec  # and it reads back as that spec (what --gpu_spec does)
    assert COMMAND in (ROOT / "profiling" / "gpu_specs" / "README.md").read_text(encoding="utf-8")


def test_shipped_h200_cli_reproduces_the_file_byte_for_byte(tmp_path):
    out = tmp_path / "H200.json"
    result = run_cli("-m", "profiling", "fit-gpu", SWEEP, "--base", "H200", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert out.read_bytes() == SHIPPED.read_bytes()
    assert "rms log error" in result.stdout and f"wrote {out}" in result.stdout


def test_the_sweep_gives_the_gpu_tables_h200_figures():
    """The table's H200 constants are this sweep's fit: clock, GEMM and FP8 exactly, memory kinds to 0.01 (the
    table converts cross entropy from the rounded 0.19: 0.19 x 14 / 6 = 0.443 -> 0.44; the fit from 0.1925:
    0.449 -> 0.45)."""
    spec = fit_gpu.fit(fit_gpu.load_sweep(str(ROOT / SWEEP)), "H200").spec
    assert spec.sustained_mhz == H200_SUSTAINED_MHZ == 1485
    assert spec.gemm_eff == H200_GEMM_EFF == 0.9329
    assert spec.fp8_gemm_eff == round(H200_GEMM_EFF * H200_FP8_SPEEDUP / 2, 4) == 0.8137  # 0.9329 x 1.7444 / 2
    table = dict(GPUS["H200"].mem_eff)
    for kind, share in spec.mem_eff:
        assert abs(share - table[kind]) <= 0.01 + 1e-9, kind


@pytest.mark.parametrize("gpu, shape, tflops, mhz, kind, table", [
    # [HE] cuBLAS 8192^3 on zeros at the A100's 1410 MHz
    ("A100", (8192, 8192, 8192), 295.0, 1410.0, "bf16", 0.9775),
    # [MAMF] best of a sweep, at the datasheet clock (B200 1856, GB200 2062 MHz): the smooth maximum with the operands
    # (0.23-0.41 of the time) moved these from 0.8426 / 0.8204 / 0.8720 / 0.8236 under the hard maximum
    ("B200", (1792, 16128, 3072), 1745.0, 1856.0, "bf16", 0.8433),
    ("B200", (15360, 4096, 3072), 3432.5, 1856.0, "fp8", 0.8210),
    ("GB200", (4096, 9728, 2048), 1822.0, 2062.0, "bf16", 0.8725),
    ("GB200", (19456, 5120, 1536), 3615.6, 2062.0, "fp8", 0.8296),
])
def test_the_tables_other_gemm_efficiencies_are_the_fit_of_their_measurement(gpu, shape, tflops, mhz, kind, table):
    """Each GEMM efficiency the table cites a measurement for is what the current shape law needs to reach it."""
    spec = GPUS[gpu]
    assert (spec.gemm_eff if kind == "bf16" else spec.fp8_gemm_eff) == table
    assert round(calibrate.gemm_efficiency_for(spec, shape, tflops, mhz, kind), 4) == table


def test_simulator_takes_the_shipped_spec(tmp_path):
    result = run_cli(*SIM, "--gpu_spec", str(SHIPPED), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "989.4" in result.stdout  # the MFU's peak: the spec's bf16 peak


# ---- (b) the fit's arithmetic by hand ----------------------------------------------------------------------


def _sweep(**sections):
    return {"device": "cuda", "gpu": "test", **sections}


def test_fit_by_hand_clock_gemm_fp8_and_memory_shares():
    sweep = _sweep(
        sustained=[{"t": 0.1, "tflops": 700.0, "smi": "1500, 600, 60"}, {"t": 0.2, "tflops": 720.0, "smi": "1400, 650, 61"},
                   {"t": 0.3, "tflops": 710.0, "smi": "1450, 640, 62"}],
        # FP8 over bf16: 1500 / 1000 = 1.5, 1800 / 900 = 2.0, 1440 / 800 = 1.8 -> median 1.8
        gemm=[{"m": 4096, "n": 4096, "k": 4096, "bf16_us": 200.0, "bf16_tflops": 1000.0, "fp8_tflops": 1500.0},
              {"m": 8192, "n": 4096, "k": 4096, "bf16_us": 300.0, "bf16_tflops": 900.0, "fp8_tflops": 1800.0},
              {"m": 2048, "n": 4096, "k": 4096, "bf16_us": 100.0, "bf16_tflops": 800.0, "fp8_tflops": 1440.0}],
        memory_kernels=[{"op": "copy", "us": 34.7, "bytes": 134217728, "gbps": 3866.25},
                        {"op": "softmax_fp32", "us": 100.0, "bytes": 240000000, "gbps": 2400.0}])
    fit_gpu.check_sweep(sweep, "synthetic")
    result = fit_gpu.fit(sweep, "H200")
    spec = result.spec
    assert spec.sustained_mhz == 1450  # median of 1500, 1400, 1450
    # gemm_eff: the shape law at 1450 MHz runs 8192^3 at the median rate, 710 TFLOP/s (to the 4-digit rounding)
    law = GemmShape(8192, 8192, 8192).flops / gemm_ns(GemmShape(8192, 8192, 8192), spec) / 1e3
    assert law == pytest.approx(710.0, rel=2e-4)
    assert spec.fp8_gemm_eff == round(spec.gemm_eff * 1.8 / 2, 4)
    shares = dict(spec.mem_eff)
    assert shares["copy"] == shares["stream"] == 0.81  # 3866.25 GB/s / 4800 GB/s = 0.8055 -> 0.81
    assert shares["softmax"] == 0.58  # 2400 x 14 / 12 = 2800 GB/s (BYTE_CONVERSION) / 4800 = 0.583 -> 0.58
    assert shares["adam"] == dict(GPUS["H200"].mem_eff)["adam"]  # not in the sweep: the base's
    assert result.fitted == ["sustained_mhz", "gemm_eff", "fp8_gemm_eff", "mem_eff"]
    errors = calibrate.relative_errors(spec, sweep)
    assert [shape for shape, _, _ in errors] == [(4096, 4096, 4096), (8192, 4096, 4096), (2048, 4096, 4096)]
    report = fit_gpu.report(result)
    assert "rms log error" in report and "copy* 0.81" in report


def test_fit_without_a_clock_keeps_the_bases_and_drops_tiny_shares():
    sweep = _sweep(sustained=[{"t": 0.1, "tflops": 500.0, "smi": ""}, {"t": 0.2, "tflops": 520.0, "smi": ""}],
                   memory_kernels=[{"op": "add", "us": 10.0, "bytes": 335000, "gbps": 33.5}])
    result = fit_gpu.fit(sweep, "H100")
    assert result.spec.sustained_mhz == GPUS["H100"].sustained_mhz  # no SM clock in the rows: the base's
    assert "sustained_mhz" not in result.spec.measured and result.fitted == ["gemm_eff", "mem_eff"]
    assert dict(result.spec.mem_eff)["add"] == 0.01  # 33.5 GB/s / 3350 GB/s (H100: 3.35 TB/s) = 0.01: kept
    tiny = _sweep(memory_kernels=[{"op": "copy", "us": 10.0, "bytes": 100000, "gbps": 10.0}])
    dropped = fit_gpu.fit(tiny, "H200")  # 10 / 4800 = 0.0021 -> 0.00: left out, the base's 0.81 kept
    assert dict(dropped.spec.mem_eff)["copy"] == 0.81 and "mem_eff" not in dropped.fitted
    assert any("copy" in note and "left out" in note for note in dropped.notes)


def test_fit_attention_recovers_the_law_forward_and_backward_apart():
    """Rows made by the attention law itself (efficiency 0.6 / 0.5, 2 / 4 blocks of overhead at the sustained
    clock) are fitted back exactly, the forward and backward overheads separately."""
    truth = replace(GPUS["H200"], attn_fwd_eff=0.6, attn_fwd_cta=2.0, attn_bwd_eff=0.5, attn_bwd_cta=4.0)
    rows = []
    for seq in (2048, 4096, 8192):
        for heads in (16, 32):
            batch = 16384 // seq
            fwd = attention_work(batch, heads, seq, 128, 128, True, False)
            bwd = attention_work(batch, heads, seq, 128, 128, True, True)
            rows.append(dict(batch=batch, heads=heads, seq=seq, head_dim=128, v_dim=128, causal=True,
                             fwd_us=flash_attention_ns(fwd[0], 0, truth, False, fwd[1]) / 1e3,
                             bwd_us=flash_attention_ns(bwd[0], 0, truth, True, bwd[1]) / 1e3))
    sweep = _sweep(sustained=[{"t": 0.1, "tflops": 718.0, "smi": "1485, 650, 60"}], attention=rows)
    fit_gpu.check_sweep(sweep, "synthetic")
    spec = fit_gpu.fit(sweep, "H200").spec
    assert (spec.attn_fwd_eff, spec.attn_fwd_cta, spec.attn_bwd_eff, spec.attn_bwd_cta) == (0.6, 2.0, 0.5, 4.0)
    assert {"attn_fwd_eff", "attn_fwd_cta", "attn_bwd_eff", "attn_bwd_cta"} <= set(spec.measured)


def test_fit_keeps_the_bases_attention_when_the_rows_are_too_short():
    """Rows under a kernel's fixed 5.5 us (a --quick GPU sweep) cannot be fitted: the base's attention stays."""
    rows = [dict(batch=8, heads=h, seq=64, head_dim=128, v_dim=128, causal=True, fwd_us=4.0, bwd_us=5.0) for h in (16, 32)]
    result = fit_gpu.fit(_sweep(sustained=[{"t": 0.1, "tflops": 718.0, "smi": "1485, 650, 60"}], attention=rows), "H200")
    assert result.spec.attn_fwd_cta == GPUS["H200"].attn_fwd_cta and "attn_fwd_eff" not in result.fitted
    assert any("attention kept from the base" in note for note in result.notes)


def test_memory_ops_cover_every_kernel_of_the_sweep():
    from profiling.kernels import MEMORY_BYTES

    assert set(MEMORY_BYTES) <= set(calibrate.MEMORY_OPS)


# ---- (c) a CPU sweep feeds fit-gpu -------------------------------------------------------------------------


def test_cpu_quick_sweep_feeds_fit_gpu(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "kernels.json"
    result = run_cli("-m", "profiling", "kernels", "--device", "cpu", "--quick", "--sustained_s", "0.2", "-o", str(out),
                     cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    sweep = json.loads(out.read_text(encoding="utf-8"))
    assert sweep["device"] == "cpu" and sweep["gpu"] is None and "meaningless" in sweep["note"]
    assert sweep["command"] == f"python -m profiling kernels --device cpu --quick --sustained_s 0.2 -o {out}"
    assert len(sweep["gemm"]) == 17 and sweep["sustained"] and "attention" in sweep["skipped"]
    ops = {row["op"] for row in sweep["memory_kernels"]}
    assert {"copy", "rotary_eager", "mixed_add", "masked_fill", "adam", "foreach"} <= ops
    for row in sweep["memory_kernels"]:
        assert row["gbps"] == pytest.approx(row["bytes"] / row["us"] / 1e3)
    assert [f for f in os.listdir(tmp_path) if f != "kernels.json"] == []  # no temporary left
    spec = tmp_path / "spec.json"
    fitted = run_cli("-m", "profiling", "fit-gpu", str(out), "--base", "H200", "-o", str(spec), cwd=tmp_path)
    assert fitted.returncode == 0, fitted.stderr
    assert "ran on a CPU" in fitted.stdout
    assert load_gpu_spec(str(spec)).sustained_mhz == GPUS["H200"].sustained_mhz  # no SM clock: the base's


def test_kernels_refuses_a_folder_before_measuring(tmp_path):
    (tmp_path / "d").mkdir()
    _one_error(run_cli("-m", "profiling", "kernels", "--device", "cpu", "-o", "d", cwd=tmp_path), "d", "folder")
    assert os.listdir(tmp_path / "d") == []


def test_kernels_without_cuda_is_one_line(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    _one_error(run_cli("-m", "profiling", "kernels", "--device", "cuda", "-o", "k.json", cwd=tmp_path), "--device cuda")
    assert os.listdir(tmp_path) == []


# ---- (d) bad inputs ----------------------------------------------------------------------------------------


def _h200_sweep() -> dict:
    return json.loads((ROOT / SWEEP).read_text(encoding="utf-8"))


def _bad_sweeps() -> dict[str, tuple[str, tuple[str, ...]]]:
    """name -> (the file's text, words its error names)."""
    cases: dict[str, tuple[str, tuple[str, ...]]] = {"malformed": ('{"gemm": [', ("not valid JSON",)),
                                                     "no_sections": ('{"gpu": "x"}', ("no gemm, memory_kernels or sustained",)),
                                                     "not_object": ("[1, 2]", ("one JSON object",))}
    d = _h200_sweep()
    del d["gemm"][3]["bf16_tflops"]
    cases["missing_field"] = (json.dumps(d), ("gemm[3] (8192x28672x4096)", "'bf16_tflops'", "missing"))
    d = _h200_sweep()
    d["gemm"][2]["bf16_us"] = math.nan
    cases["nan_time"] = (json.dumps(d), ("gemm[2] (8192x4096x14336)", "'bf16_us'", "NaN"))
    assert "NaN" in cases["nan_time"][0]  # json writes the literal NaN, which json.load accepts
    d = _h200_sweep()
    d["memory_kernels"][1]["gbps"] = -3
    cases["negative_rate"] = (json.dumps(d), ("memory_kernels[1] (add)", "'gbps'", "-3"))
    d = _h200_sweep()
    d["sustained"][5]["tflops"] = 0
    cases["zero_rate"] = (json.dumps(d), ("sustained[5]", "'tflops'", "got 0"))
    d = _h200_sweep()
    d["memory_kernels"][0]["op"] = "memcpy"
    cases["unknown_op"] = (json.dumps(d), ("memory_kernels[0]", "'memcpy'"))
    return cases


@pytest.mark.parametrize("case", sorted(_bad_sweeps()))
def test_fit_gpu_refuses_a_bad_sweep(tmp_path, case):
    text, words = _bad_sweeps()[case]
    (tmp_path / "k.json").write_text(text, encoding="utf-8")
    _one_error(run_cli("-m", "profiling", "fit-gpu", "k.json", "--base", "H200", "-o", "spec.json", cwd=tmp_path),
               "k.json", *words)
    assert os.listdir(tmp_path) == ["k.json"]


@pytest.mark.parametrize("case", ["missing_file", "unknown_base", "output_is_input", "output_is_folder"])
def test_fit_gpu_refuses_bad_arguments(tmp_path, case):
    sweep = tmp_path / "k.json"
    sweep.write_bytes((ROOT / SWEEP).read_bytes())
    (tmp_path / "d").mkdir()
    args, words = {"missing_file": (["none.json", "--base", "H200", "-o", "spec.json"], ("none.json", "no such file")),
                   "unknown_base": (["k.json", "--base", "H999", "-o", "spec.json"], ("--base 'H999'", "H200")),
                   "output_is_input": (["k.json", "--base", "H200", "-o", "k.json"], ("-o k.json", "destroy")),
                   "output_is_folder": (["k.json", "--base", "H200", "-o", "d"], ("d", "folder"))}[case]
    _one_error(run_cli("-m", "profiling", "fit-gpu", *args, cwd=tmp_path), *words)
    assert sorted(os.listdir(tmp_path)) == ["d", "k.json"] and os.listdir(tmp_path / "d") == []
    assert sweep.read_bytes() == (ROOT / SWEEP).read_bytes()


def _bad_specs() -> dict[str, tuple[str, tuple[str, ...]]]:
    full = spec_to_dict(GPUS["H200"])  # every figure, no base
    without = {k: v for k, v in full.items() if k != "hbm_tbps"}
    negative = json.loads(json.dumps(full))
    negative["peak_tflops"]["bf16"] = -989.4
    nan = json.dumps(full).replace('"hbm_tbps": 4.8', '"hbm_tbps": NaN')
    assert "NaN" in nan
    return {"malformed": ('{"name": "H200", "base": ', ("not valid JSON",)),
            "missing_field": (json.dumps(without), ("missing field 'hbm_tbps'",)),
            "negative_rate": (json.dumps(negative), ("peak_tflops.bf16", "-989.4")),
            "nan_rate": (nan, ("hbm_tbps", "NaN")),
            "unknown_dtype": ('{"name": "H200", "base": "H200", "gemm_efficiency": {"int4": 0.5}}',
                              ("'int4'", "gemm_efficiency")),
            "unknown_field": ('{"name": "H200", "base": "H200", "tflops": 900}', ("unknown field 'tflops'",))}


@pytest.mark.parametrize("case", sorted(_bad_specs()))
def test_simulator_refuses_a_bad_gpu_spec(tmp_path, case):
    text, words = _bad_specs()[case]
    (tmp_path / "BAD.json").write_text(text, encoding="utf-8")
    _one_error(run_cli(*SIM, "--gpu_spec", "BAD.json", cwd=tmp_path), "BAD.json", *words)
    assert os.listdir(tmp_path) == ["BAD.json"]  # no results folder


# ---- (e) the real sweep on a GPU ---------------------------------------------------------------------------


@pytest.mark.gpu
def test_cuda_quick_sweep_and_fit(tmp_path: Path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    out = tmp_path / "kernels.json"
    result = run_cli("-m", "profiling", "kernels", "--quick", "--sustained_s", "2", "-o", str(out), cwd=tmp_path,
                     timeout=600)
    assert result.returncode == 0, result.stderr
    sweep = json.loads(out.read_text(encoding="utf-8"))
    assert sweep["device"] == "cuda" and sweep["gpu"] == torch.cuda.get_device_name()
    assert len(sweep["attention"]) == 6 and all(r["fwd_us"] > 0 and r["bwd_us"] > 0 for r in sweep["attention"])
    assert sweep["sustained_shape"] == [8192, 8192, 8192] and len(sweep["sustained"]) >= 2
    if torch.cuda.get_device_capability() >= (8, 9):
        assert all("fp8_tflops" in row for row in sweep["gemm"]), sweep["skipped"]
    ops = {row["op"] for row in sweep["memory_kernels"]}
    assert {"copy", "add", "adam", "foreach", "masked_fill", "rotary_eager", "mixed_add"} <= ops
    spec = tmp_path / "spec.json"
    fitted = run_cli("-m", "profiling", "fit-gpu", str(out), "--base", "H100", "-o", str(spec), cwd=tmp_path)
    assert fitted.returncode == 0, fitted.stderr
    loaded = load_gpu_spec(str(spec))
    assert {"attn_fwd_eff", "attn_bwd_eff"} <= set(loaded.measured)

"""The roofline compute model (no torch): GPU table, calibration against published measurements, item
coverage, the estimate compute file and its wiring into SimAI generation.

Published figures the assertions cite (see mocked_model/aiob/roofline.py):
[MAMF] S. Bekman, ml-engineering, "Maximum Achievable Matmul FLOPS comparison table": H100 SXM bf16
       794.5 TFLOP/s (older run: 792.1), A100 SXM 271.2.
[HE]   H. He (thonking.ai, 2024): A100 8192^3 bf16 cuBLAS 258 TFLOP/s with randn inputs.
[XLA]  OpenXLA matmul_interpolator_data.h, sm_90 bf16 (b, m, n, k) -> measured TFLOP/s.
"""

import subprocess
import sys

import pytest

from mocked_model.aiob.compute_file import FORWARD_SECTIONS, ComputeFile
from mocked_model.aiob.layout import op_specs, roofline_compute_file
from mocked_model.aiob.roofline import GPUS, estimator, gemm_ns, gemm_tflops, gpu_spec
from tests.conftest import ROOT, run_cli
from utils.config import JobConfig, TrainingConfig
from utils.errors import ConfigError
from utils.model_config import ModelConfig
from utils.parallel import ParallelConfig
from workload_generator.compute_times import default_source, fill_compute_times
from workload_generator.megatron import MegatronWorkload
from workload_generator.simai import SimAIWorkload

MOE_MLA = ModelConfig(name="tiny_ds", hidden_size=128, num_layers=3, num_attention_heads=4, ffn_hidden_size=256,
                      vocab_size=256, num_experts=4, moe_router_topk=2, moe_ffn_hidden_size=64, n_shared_experts=1,
                      n_dense_layers=1, normalization="RMSNorm", swiglu=True, position_embedding_type="rope",
                      multi_latent_attention=True, q_lora_rank=64, kv_lora_rank=32, qk_head_dim=16,
                      qk_pos_emb_head_dim=8, v_head_dim=16)
DENSE = ModelConfig(name="tiny", hidden_size=64, num_layers=2, num_attention_heads=4, ffn_hidden_size=256,
                    vocab_size=256, max_position_embeddings=64)


def job(model=DENSE, seq=32, **layout):
    p = dict(world_size=4, tp=2, micro_batch=1, global_batch=4)
    p.update(layout)
    return JobConfig(model, ParallelConfig(**p), TrainingConfig(seq_length=seq, computation_enable=True, gpu_type="H100"))


def test_h100_8192_cubed_gemm_is_in_the_published_band():
    # MAMF measured 794.5 TFLOP/s (792.1 in an older run): within 15% means 675..914 TFLOP/s
    tflops = gemm_tflops(8192, 8192, 8192, "H100")
    assert 0.85 * 794.5 <= tflops <= 1.15 * 794.5
    assert 0.85 * 800 <= tflops <= 1.15 * 800          # "the 0.8 PFLOP/s class"
    # time = 2 * 8192^3 / tflops: about 1.39 ms
    assert gemm_ns(8192, 8192, 8192, "H100") == pytest.approx(2 * 8192**3 / tflops / 1e3)


def test_a100_8192_cubed_matches_he():
    assert gemm_tflops(8192, 8192, 8192, "A100") == pytest.approx(258, rel=0.15)


@pytest.mark.parametrize("shape, measured", [
    ((1, 4096, 4096, 4096), 783.3), ((4, 4096, 4096, 4096), 793.1), ((1, 2048, 2048, 2048), 632.0),
    ((1, 1024, 2048, 2048), 524.3), ((1, 4096, 4096, 2048), 738.7), ((1, 4096, 1024, 1024), 488.1),
    ((1, 4096, 4096, 256), 392.2), ((1, 256, 2048, 256), 41.8), ((1, 2048, 4096, 1024), 594.2),
])
def test_xla_h100_table(shape, measured):
    b, m, n, k = shape
    tflops = 2.0 * b * m * n * k / gemm_ns(m, n, k, "H100", groups=b) / 1e3
    assert tflops == pytest.approx(measured, rel=0.15)


def test_gpu_table_cites_every_entry():
    for gpu in GPUS.values():
        assert gpu.bf16_tflops > 0 and gpu.hbm_tbps > 0 and 0.5 < gpu.gemm_eff < 1 and gpu.source and gpu.calibration
    # datasheet figures (dense): A100 312 / 2.039 TB/s, H100 SXM 989.4 / 3.35, H200 989.4 / 4.8, B200 2250 / 8
    assert (GPUS["A100"].bf16_tflops, GPUS["A100"].hbm_tbps) == (312, 2.039)
    assert (GPUS["H100"].bf16_tflops, GPUS["H100"].hbm_tbps) == (989.4, 3.35)
    assert (GPUS["H200"].bf16_tflops, GPUS["H200"].hbm_tbps) == (989.4, 4.8)
    assert (GPUS["B200"].bf16_tflops, GPUS["B200"].hbm_tbps) == (2250, 8.0)


def test_gpu_names():
    assert gpu_spec("h100-sxm").name == "H100" and gpu_spec("H100 PCIe").name == "H100_PCIE"
    with pytest.raises(ConfigError, match="--gpu_type 'V42' is not in the roofline GPU table"):
        gpu_spec("V42")
    with pytest.raises(ConfigError, match="A100 has no FP8"):
        gemm_ns(1024, 1024, 1024, "A100", "fp8")
    # FP8 GEMMs run at the FP8 peak: about twice as fast when compute bound
    assert gemm_ns(8192, 8192, 8192, "H100", "fp8") < 0.6 * gemm_ns(8192, 8192, 8192, "H100")


@pytest.mark.parametrize("model, layout", [(DENSE, {}), (DENSE, dict(sequence_parallel=True)),
                                           (MOE_MLA, dict(ep=2, sequence_parallel=True))])
def test_estimator_covers_every_computation_item(model, layout):
    gen = MegatronWorkload(job(model, **layout))
    items = [i for i in gen() if i.is_computation]
    report = fill_compute_times(items, "roofline", estimator=estimator("H100"))
    assert report.filled == len({id(i) for i in items})
    assert all(i.time_ns > 0 for i in items)


def test_estimate_file_round_trips_and_fills_like_a_measurement():
    j = job(MOE_MLA, ep=2, sequence_parallel=True)
    compute = roofline_compute_file(j, "H100")
    assert compute.labels["compute_source"] == "roofline H100" and "not a measurement" in compute.labels["device"]
    again = ComputeFile.loads(compute.dumps())
    assert again.dumps() == compute.dumps() and again.labels == compute.labels
    # every section the measurement would write, forward and backward, and nothing file_times lacks
    specs = op_specs(j)
    assert {s.section for s in specs} <= set(compute.sections)
    assert {s.backward for s in specs if s.backward} <= set(compute.sections)
    items = [i for i in MegatronWorkload(j)() if i.is_computation]
    report = fill_compute_times(items, "file", compute=again)
    assert not report.missing and all(i.time_ns > 0 for i in items)
    known = {f for _, f, _ in FORWARD_SECTIONS} | {b for _, _, b in FORWARD_SECTIONS} | {"param_time"}
    assert set(compute.sections) <= known


def test_estimate_grows_with_sequence_and_backward_is_two_gemms():
    short, long = roofline_compute_file(job(seq=32), "H100"), roofline_compute_file(job(seq=64), "H100")
    for section in ("atten_qkv", "atten_flash", "mlp_linear_1", "bwd_fc1"):
        assert long.avg_us(section) > short.avg_us(section)
    # a GEMM's backward is its dgrad plus its wgrad: at least twice the launch overhead of 6 us
    assert short.avg_us("bwd_fc1") >= 2 * 6.0 and short.avg_us("bwd_fc1") > short.avg_us("mlp_linear_1")


def test_roofline_does_not_import_torch():
    code = ("import sys; import mocked_model.aiob.roofline, mocked_model.aiob.layout, mocked_model.aiob.estimate, "
            "workload_generator.compute_times; assert 'torch' not in sys.modules, 'torch imported'")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_simai_defaults_to_roofline_for_a_known_gpu(tmp_path):
    out = tmp_path / "s.txt"
    args = ["-m", "workload_generator.SimAI_training_workload_generator", "--model_name", "gpt_tiny", "--world_size", "2",
            "--tensor_model_parallel_size", "2", "--seq_length", "128", "--output", str(out)]
    proc = run_cli(*args, "--gpu_type", "H100")
    assert proc.returncode == 0, proc.stderr
    assert "compute times: roofline" in proc.stdout
    records = SimAIWorkload.read(out).records
    assert any(r.fwd_compute_ns > 1000 for r in records if r.name == "mlp_layer")
    # an unknown GPU type only names the file: placeholder times, as before
    assert "placeholder" in run_cli(*args, "--gpu_type", "V42").stdout
    bad = run_cli(*args, "--gpu_type", "V42", "--compute_source", "roofline")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "V42" in bad.stderr


def test_default_source():
    j = job()
    assert default_source(j, None) == "placeholder"
    assert default_source(j, None, roofline_default=True) == "roofline"
    assert default_source(j, "file", roofline_default=True) == "file"


def test_estimate_cli(tmp_path):
    out = tmp_path / "e.txt"
    proc = run_cli("-m", "mocked_model.aiob.estimate", "--gpu_type", "B200", "--model_name", "gpt_tiny", "--seq_length", "64",
                   "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert ComputeFile.read(out).labels["compute_source"] == "roofline B200"
    bad = run_cli("-m", "mocked_model.aiob.estimate", "--model_name", "gpt_tiny", "-o", str(tmp_path / "x.txt"))
    assert bad.returncode == 2 and "--gpu_type" in bad.stderr and not (tmp_path / "x.txt").exists()


def test_aicb_roofline_times_deepspeed_items_and_refuses_aiob_there(tmp_path):
    out = tmp_path / "ds.csv"
    args = [str(ROOT / "aicb.py"), "--frame", "DeepSpeed", "-m", "7", "--world_size", "8", "--global_batch", "8",
            "--seq_length", "512", "--workload_only"]
    proc = run_cli(*args, "--compute_source", "roofline", "--gpu_type", "H800", "--output", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    from utils.workload import Workload

    items = [i for i in Workload.load(out) if i.is_computation]
    assert items and all(i.time_ns and i.time_ns > 0 for i in items)
    bad = run_cli(*args, "--aiob_enable", "--output", str(tmp_path / "no.csv"), cwd=tmp_path)
    assert bad.returncode == 2 and "--frame DeepSpeed" in bad.stderr and not (tmp_path / "no.csv").exists()

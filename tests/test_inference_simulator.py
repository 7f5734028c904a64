"""Inference on a topology (``--model topo``): TTFT / TPOT with its breakdown, throughput per GPU and
memory; SimAI 1.7's reading of the same files (``--model simai``).  Times derived by hand on the derived
fabric with no latency terms (``--latency_scale 0``): a collective then costs its bytes over the NVLink
busbw, here -nv 360 GiB/s = 360 x 2^30 = 386,547,056,640 B/s."""

from __future__ import annotations

import pytest

from simulator.options import TopoOptions
from simulator.topo.inference import simulate_file, simulate_inference
from tests.conftest import EXAMPLES, run_cli
from utils.errors import ConfigError
from utils.inference_config import resolve_model
from utils.inference_job import InferenceJob
from workload_generator.inference import timed_step
from workload_generator.simai_inference import simai_inference_workload

NV = 360 * 2**30
OPTIONS = TopoOptions(gpus_per_server=8, nvlink_bw=360, latency_scale=0)
REFERENCE = EXAMPLES / "aicb_infer_DeepSeek-671B-world_size8-tp1-pp1-ep8-bs32-seq1024-decode.txt"


def deepseek(**kw) -> InferenceJob:
    args = dict(phase="decode", seq_length=1024, micro_batch=32, world_size=8, ep=8, gpu_type="H200",
                model_name="DeepSeek-671B")
    args.update(kw)
    return InferenceJob(resolve_model("DeepSeek-671B"), **args)


def _write(job: InferenceJob, tmp_path) -> str:
    workload, _ = timed_step(job, "model")
    simai, _, _ = simai_inference_workload(job, workload.iterations()[1], timed=True)
    path = tmp_path / (job.file_stem() + ".txt")
    simai.write(path)
    return str(path)


def test_deepseek_decode_tpot_breakdown(tmp_path):
    result = simulate_file(_write(deepseek(), tmp_path), None, OPTIONS)
    # EP 8 on one server: an all-to-all moves (n-1)/n of its bytes over NVLink.  Per MoE layer: dispatch
    # 1,892,352 x 7/8 = 1,655,808 B -> 4.2836 us, combine 3,670,016 x 7/8 = 3,211,264 B -> 8.3075 us;
    # 58 layers: 58 x 12.5911 us = 730.28 us
    ep = result.breakdown_s()["EP"]
    assert ep == pytest.approx(58 * (1_655_808 + 3_211_264) / NV, rel=1e-9)
    assert ep * 1e6 == pytest.approx(730.28, abs=0.01)
    assert result.breakdown_s().get("TP", 0.0) == 0.0      # tp 1
    compute = sum(r.compute_s for r in result.rows)
    assert result.step_s == pytest.approx(compute + ep, rel=1e-12)
    # 8 replicas x 32 sequences = 256 tokens per step over 8 GPUs
    assert result.tokens_per_step == 256
    assert result.tokens_per_s_per_gpu == pytest.approx(256 / result.step_s / 8)
    assert result.phase == "decode" and result.memory is not None


def test_job_and_its_file_agree(tmp_path):
    job = deepseek()
    from_job = simulate_inference(job, None, OPTIONS)
    from_file = simulate_inference(_write(job, tmp_path), None, OPTIONS)
    # the file rounds each record's compute to a nanosecond: 238 records
    assert from_job.step_s == pytest.approx(from_file.step_s, abs=238e-9)


def test_qwen3_prefill_tp4_ttft_has_the_tp_allreduces():
    job = InferenceJob(resolve_model("Qwen3-Moe-235B"), "prefill", 1024, 4, world_size=8, tp=4, ep=8, gpu_type="H100")
    result = simulate_inference(job, None, OPTIONS)
    # ring all-reduce of 33,554,432 B over TP 4 in one server: 2 x 3/4 x 33,554,432 / 386.547e9 = 130.21 us;
    # 94 layers and the embedding's all-reduce, and the logits' all-gather of 4 x 151,936 x 2 B x 3/4
    ar = 1.5 * 33_554_432 / NV
    gather = 0.75 * 4 * 151_936 * 2 / NV
    assert result.breakdown_s()["TP"] == pytest.approx(95 * ar + gather, rel=1e-9)
    assert result.phase == "prefill" and result.tokens_per_step == 1024 * 4 * 2   # 2 replicas of tp 4


def test_h100_cannot_hold_deepseek(tmp_path):
    path = _write(deepseek(), tmp_path)
    with pytest.raises(ConfigError, match="needs 105.6 GiB per GPU"):
        simulate_file(path, None, TopoOptions(gpus_per_server=8, gpu_type="H100"))


def test_cli_topo_writes_the_inference_tables(tmp_path):
    path = _write(deepseek(), tmp_path)
    proc = run_cli("-m", "simulator", "--model", "topo", "-w", path, "-g_p_s", "8", "-nv", "360", "--latency_scale", "0",
                   "-r", str(tmp_path / "out") + "/")
    assert proc.returncode == 0, proc.stderr
    assert "TPOT (decode step)" in proc.stdout and "output tokens/s per GPU" in proc.stdout
    stem = tmp_path / "out" / "DeepSeek-671B-world_size8-tp1-pp1-ep8-bs32-seq1024-decode-"
    head, values = (stem.parent / (stem.name + "inference.csv")).read_text().splitlines()
    row = dict(zip(head.split(","), values.split(",")))
    assert row["phase"] == "decode" and row["tokens_per_step"] == "256" and float(row["ep_us"]) == pytest.approx(730.28, abs=0.01)
    assert len((stem.parent / (stem.name + "inference_layers.csv")).read_text().splitlines()) == 1 + 238


def test_cli_simai_reads_aicbs_file_as_simai_does(tmp_path):
    proc = run_cli("-m", "simulator", "-w", str(REFERENCE), "-g_p_s", "8", "-n_p_s", "8", "-r", str(tmp_path) + "/")
    assert proc.returncode == 0, proc.stderr
    assert "mode: 1" in proc.stderr and "Total time" in proc.stdout


def test_cli_memory_error_is_one_line(tmp_path):
    path = _write(deepseek(), tmp_path)
    proc = run_cli("-m", "simulator", "--model", "topo", "-w", path, "-g_p_s", "8", "-g_type", "H100",
                   "-r", str(tmp_path / "out") + "/")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "H100" in proc.stderr
    assert not (tmp_path / "out").exists()
    # an H200 (the compute model's table, not SimAI's NVLink table) holds it
    proc = run_cli("-m", "simulator", "--model", "topo", "-w", path, "-g_p_s", "8", "-g_type", "H200",
                   "-r", str(tmp_path / "out") + "/")
    assert proc.returncode == 0 and "of 126.9 GiB usable on the H200" in proc.stdout, proc.stderr


def test_a_file_under_a_name_of_its_own_keeps_its_phase_and_batch(tmp_path):
    # issue 28, item 19: the generator's -o used to lose the phase and batch, which only AICB's file name carries
    args = ("-m", "workload_generator.SimAI_inference_workload_generator", "DeepSeek-671B", "--phase", "decode",
            "--world_size", "8", "--expert_model_parallel_size", "8", "--micro_batch", "32", "--seq_length", "1024",
            "--gpu_type", "H200")
    own = tmp_path / "my_step.txt"
    assert run_cli(*args, "--output", str(own)).returncode == 0
    header = own.read_text().splitlines()[0]
    assert header.endswith(" aicb_name: DeepSeek-671B-world_size8-tp1-pp1-ep8-bs32-seq1024-decode")
    # under AICB's own name the file stays AICB's, byte for byte in its header
    assert run_cli(*args, "--result_dir", str(tmp_path / "aicb")).returncode == 0
    (aicb,) = (tmp_path / "aicb").rglob("*.txt")
    assert aicb.read_text().splitlines()[0] == header.split(" aicb_name:")[0]
    results = [run_cli("-m", "simulator", "--model", "topo", "-w", str(path), "-g_p_s", "8", "-nv", "360",
                       "--gpu_type", "H200", "-r", str(tmp_path / name) + "/") for path, name in ((own, "a"), (aicb, "b"))]
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results]
    assert "does not follow AICB's name" not in results[0].stderr
    # the same TPOT, throughput (32 sequences x dp 8 = 256 tokens per step) and memory figure from either file
    lines = [[line for line in r.stdout.splitlines() if "TPOT" in line or "tokens/s" in line or "memory" in line]
             for r in results]
    assert lines[0] == lines[1] and len(lines[0]) == 3 and "(256 tokens per step)" in lines[0][1]


JOB = ("--phase", "decode", "--world_size", "8", "--expert_model_parallel_size", "8", "--micro_batch", "32",
       "--seq_length", "1024", "--gpu_type", "H200")


def test_the_simulator_takes_an_inference_jobs_flags_as_its_file_does(tmp_path):
    # issue 28, item 19: 'python -m simulator --frame Inference' listed the frame and refused -m and --phase
    path = tmp_path / "step.txt"
    made = run_cli("-m", "workload_generator.SimAI_inference_workload_generator", "DeepSeek-671B", *JOB, "--output",
                   str(path))
    assert made.returncode == 0, made.stderr
    from_file = run_cli("-m", "simulator", "--model", "topo", "-w", str(path), "-g_p_s", "8", "--gpu_type", "H200",
                        "-r", str(tmp_path / "f") + "/")
    from_job = run_cli("-m", "simulator", "--frame", "Inference", "-m", "deepseek-671B", *JOB, "-g_p_s", "8",
                       "-r", str(tmp_path / "j") + "/")
    assert from_file.returncode == 0 and from_job.returncode == 0, from_file.stderr + from_job.stderr

    def row(folder: str) -> dict[str, str]:
        (path,) = (tmp_path / folder).glob("*-inference.csv")
        head, values = path.read_text().splitlines()
        return dict(zip(head.split(","), values.split(",")))

    job, file = row("j"), row("f")
    assert job["phase"] == file["phase"] == "decode" and job["tokens_per_step"] == file["tokens_per_step"] == "256"
    # the file rounds each of its 238 records' compute to a nanosecond; its name resolves to the same model
    for key in ("step_us", "compute_us", "ep_us", "tokens_per_s_per_gpu", "weights_gib", "kv_cache_gib"):
        assert float(job[key]) == pytest.approx(float(file[key]), rel=1e-4), key
    assert "TPOT (decode step)" in from_job.stdout
    (written,) = (tmp_path / "j").glob("*-inference.csv")
    assert written.name == "deepseek-671B-world_size8-tp1-pp1-ep8-bs32-seq1024-decode-inference.csv"


@pytest.mark.parametrize("extra, message", [
    (("--output", "w.txt"), "--output writes or times a workload file"),
    (("--compute_source", "aiob"), "--compute_source aiob writes or times a workload file"),
    (("--phase", "train"), "argument --phase: invalid choice"),
    ((), "--frame Inference needs -t/--topology FILE, or -g_p_s"),
])
def test_inference_job_refusals_are_one_line(tmp_path, extra, message):
    flags = ["--frame", "Inference", "-m", "deepseek-671B", *JOB, "-r", str(tmp_path / "o") + "/"]
    if extra:
        flags += ["-g_p_s", "8", *extra]
    done = run_cli("-m", "simulator", *flags)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("simulator: error: ") and message in line, line
    assert not (tmp_path / "o").exists()


def test_a_derived_fabric_takes_the_nvlink_of_a_gpu_simais_table_lacks():
    # serving, inference files and inference jobs on -g_p_s with --gpu_type H200 used SimAI's A100 default (240 GiB/s):
    # now NCCL's NVLink rate from the compute model's spec, as the training path does (H200: 450 x 0.824 = 370.8)
    from simulator.options import derived_fabric_gpu

    assert derived_fabric_gpu("H200", None) == (None, pytest.approx(450 * 0.824))
    assert derived_fabric_gpu("H200", 100.0) == (None, 100.0)  # -nv wins
    assert derived_fabric_gpu("h100", None) == ("H100", None)  # SimAI's table: its own default
    with pytest.raises(ConfigError, match=r"--gpu_type 'TPU9' is not in the GPU table \(known: A100, .*H200, B200"):
        derived_fabric_gpu("TPU9", None)  # every known type named, not only SimAI's five

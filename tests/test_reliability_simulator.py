"""Issue 28 in the simulator's entry: no output over an input (item 1), non-UTF-8 file names (item 10), a job's GPU
that differs from the topology's (item 21).  Each failed on the main before this change (--trace over the workload
replaced it and exited 0; a non-UTF-8 name was a UnicodeEncodeError traceback; an A100 job on an H100 file said
nothing)."""

from __future__ import annotations

import os
import shutil

from tests.conftest import EXAMPLES, run_cli

TOPO = EXAMPLES / "topo_Spectrum-X_16g_8gps_400Gbps_H100"
JOB = ("--model_name", "llama3_8B", "--world_size", "16", "--tensor_model_parallel_size", "8", "--global_batch", "32")
SIMAI = ("-g_p_s", "8", "-n_p_s", "8", "-g_type", "H100")


def test_a_trace_over_the_workload_is_refused_and_the_workload_kept(tmp_path):
    workload = tmp_path / "w.txt"
    shutil.copy(EXAMPLES / "simai_workload_analytical.txt", workload)
    before = workload.read_bytes()
    out = run_cli("-m", "simulator", "-w", str(workload), *SIMAI, "--trace", str(workload), cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("simulator: error: --trace")
    assert "is also -w/--workload" in out.stderr
    assert "Traceback" not in out.stderr
    assert workload.read_bytes() == before
    assert not (tmp_path / "results").exists()  # nothing written


def test_a_result_prefix_landing_on_the_topology_is_refused(tmp_path):
    topology = tmp_path / "pEndToEnd.csv"  # -r p writes pEndToEnd.csv: the topology itself
    shutil.copy(TOPO, topology)
    before = topology.read_bytes()
    out = run_cli("-m", "simulator", "-t", str(topology), "--gpu_type", "H100", *JOB, "-r", str(tmp_path / "p"),
                  "-q", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "-t/--topology" in out.stderr and "Traceback" not in out.stderr
    assert topology.read_bytes() == before


def test_a_non_utf8_workload_name_is_simulated_and_written(tmp_path):
    name = os.fsdecode(b"w\xff.txt")
    shutil.copy(EXAMPLES / "simai_workload_analytical.txt", tmp_path / name)
    out = run_cli("-m", "simulator", "-w", name, *SIMAI, "-q", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    written = sorted(os.listdir(os.fsencode(tmp_path / "results")))
    assert written == [b"w\xff-EndToEnd.csv", b"w\xff-simai_layers.csv"]


def test_a_job_on_another_gpus_topology_is_named(tmp_path):
    out = run_cli("-m", "simulator", "-t", str(TOPO), "--gpu_type", "A100", *JOB, "-q", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "--gpu_type A100 differs from the topology's GPU H100" in out.stderr
    same = run_cli("-m", "simulator", "-t", str(TOPO), "--gpu_type", "H100", *JOB, "-q", cwd=tmp_path)
    assert "differs from the topology" not in same.stderr


INFER = EXAMPLES / "aicb_infer_DeepSeek-671B-world_size8-tp1-pp1-ep8-bs32-seq1024-decode.txt"


def _edited(tmp_path, name: str, old: str, new: str):
    text = INFER.read_text()
    first, rest = text.split("\n", 1)
    path = tmp_path / name
    path.write_text(first.replace(old, new) + "\n" + rest)
    return path


def test_impossible_inference_files_are_refused_with_nothing_written(tmp_path):
    """Item 8: 'mode: 7' and 'mode: nan' ran as training, 'ep 16' on 8 GPUs and 'bs0' in the name were simulated."""
    cases = [(_edited(tmp_path, "m7.txt", "mode: 1", "mode: 7"), "header key 'mode' is '7'"),
             (_edited(tmp_path, "mnan.txt", "mode: 1", "mode: nan"), "header key 'mode' is 'nan'"),
             (_edited(tmp_path, "e16.txt", "ep: 8", "ep: 16"), "ep 16 is more than the 8 GPUs"),
             (_edited(tmp_path, INFER.name.replace("-bs32-", "-bs0-"), "mode: 1", "mode: 1"), "gives bs 0")]
    for path, message in cases:
        for model in (("--model", "topo", "-t", str(TOPO)), ("-g_p_s", "8", "-n_p_s", "8", "-g_type", "H100")):
            if message.startswith(("ep", "gives")) and model[0] != "--model":
                continue  # SimAI's own model plays any ep and ignores the name, as SimAI does
            out = run_cli("-m", "simulator", "-w", str(path), *model, cwd=tmp_path)
            assert out.returncode == 2, (path.name, out.stdout, out.stderr)
            assert message in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "results").exists()


def test_simais_environment_settings_are_named_by_the_simulator(tmp_path):
    """Item 21: SimAI's AS_* variables changed nothing here without a word."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1", AS_SEND_LAT="3")
    out = subprocess.run([sys.executable, "-m", "simulator", "-w", str(EXAMPLES / "simai_workload_analytical.txt"),
                          *SIMAI, "-q"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stderr.startswith("simulator: note: AS_SEND_LAT=3 (") and "is ignored" in out.stderr


MOE = ("--gpu_type", "H100", "--model_name", "gpt_tiny", "--world_size", "16", "--tensor_model_parallel_size", "2",
       "--enable_sequence_parallel", "--global_batch", "16", "--moe_enable", "--num_experts", "8",
       "--expert_model_parallel_size", "4", "--moe_router_topk", "2", "--moe_grouped_gemm", "-q")


def test_impossible_moe_loads_are_refused(tmp_path):
    # --moe_imbalance above experts / topk was clamped silently; a capacity factor of 1.7e308 overflowed (OverflowError)
    # and 1e300 with padding simulated 8.5e296 s
    for extra, words in ((("--moe_imbalance", "1e300"), "--moe_imbalance 1e+300 is more than --num_experts 8 / "
                                                          "--moe_router_topk 2 = 4"),
                         (("--moe_expert_capacity_factor", "1.7e308"), "--moe_expert_capacity_factor 1.7e+308 is more "
                                                                       "than --num_experts 8"),
                         (("--moe_expert_capacity_factor", "1e300", "--moe_pad_expert_input_to_capacity"),
                          "--moe_expert_capacity_factor 1e+300 is more than --num_experts 8")):
        out = run_cli("-m", "simulator", "-t", str(TOPO), *MOE, *extra, cwd=tmp_path)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr[-800:]
        assert words in lines[0]
    ok = run_cli("-m", "simulator", "-t", str(TOPO), *MOE, "--moe_imbalance", "4", "--moe_expert_capacity_factor", "8",
                 "--moe_pad_expert_input_to_capacity", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr[-800:]


def test_link_values_no_ns3_link_holds_are_refused_naming_the_line(tmp_path):
    # a hand-edited latency of 1e300h or a rate of 1e-300bps parsed, then made an infinite time: OverflowError
    for old, new, words in (("0.0005ms", "1e300h", "latency '1e300h' is beyond"),
                            ("400Gbps", "1e-300bps", "bandwidth '1e-300bps' is outside")):
        edited = tmp_path / "t.txt"
        edited.write_text(TOPO.read_text().replace(old, new, 1))
        out = run_cli("-m", "simulator", "-t", str(edited), "--gpu_type", "H100", *JOB, "-q", cwd=tmp_path)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr[-800:]
        assert lines[0].startswith(f"simulator: error: {edited}:") and words in lines[0]

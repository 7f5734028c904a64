"""Measure once, simulate anywhere, on CPUs: a 4-process gloo sweep (two emulated nodes of 2 ranks) and
an AIOB compute profile write the database; the simulator run with it gives the measured collective times
at measured sizes and times between their neighbours in between.  No timing assertions: gloo on a shared
CPU is noisy, so the checks compare the simulator with what this very run measured."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys

import pytest

from simulator.profiles import db as profile_db
from simulator.profiles.measured import INTERPOLATED, MEASURED, Profile
from tests.conftest import run_cli
from tests.test_replay import base_env, free_port

pytestmark = pytest.mark.slow

SIZES = (1024, 8192, 65536)
JOB = ["--model_name", "gpt_tiny", "--world_size", "4", "--tensor_model_parallel_size", "2", "--pipeline_model_parallel", "2",
       "--seq_length", "64", "--num_layers", "2", "--global_batch", "2", "--enable_sequence_parallel", "--dtype", "float32"]
MICRO = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 1 vpp: 1 ga: 1 all_gpus: 4 checkpoints: 0 "
         "checkpoint_initiates: 0\n2\n"
         "layer_a\t-1\t1000\tALLREDUCE\t8192\t1000\tNONE\t0\t1000\tALLREDUCE\t65536\t100\n"
         "layer_b\t-1\t1000\tALLREDUCE\t20000\t1000\tNONE\t0\t1000\tNONE\t0\t100\n")


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("profile")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "4", "--master_port", str(free_port()),
           "-m", "profiling", "network", "--network_device", "cpu_gloo", "-o", "db", "--ranks_per_node", "2",
           "-b", "1K", "-e", "64K", "-f", "8", "--iters", "2", "--warmup", "1", "--timeout", "120"]
    proc = subprocess.run(cmd, cwd=cwd, env=base_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    compute = subprocess.run([sys.executable, "-m", "profiling", "compute", "-o", "db", "--samples", "2", *JOB], cwd=cwd,
                             env=base_env(), capture_output=True, text=True, timeout=300)
    assert compute.returncode == 0, compute.stdout[-3000:] + compute.stderr[-3000:]
    return cwd, proc.stdout, compute.stdout


def test_the_database_has_the_documented_layout(database):
    cwd, stdout, compute_stdout = database
    folder = cwd / "db" / "network" / "cpu_gloo"
    assert sorted(p.name for p in folder.iterdir()) == sorted([*profile_db.NETWORK_FILES.values(), "profile.json"])
    # 4 ranks in 2 "nodes": all_reduce & co over 2 ranks in a node, 2 ranks on 2 nodes and 4 ranks on 2 nodes;
    # send/recv inside a node and across: 3 x 3 sizes and 2 x 3 sizes
    for kind, name in profile_db.NETWORK_FILES.items():
        with open(folder / name, newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert tuple(rows[0])[:6] == profile_db.NETWORK_COLUMNS
        shapes = {(int(r["ranks"]), int(r["ranks_per_node"])) for r in rows}
        assert shapes == ({(2, 2), (2, 1)} if kind == "send_recv" else {(2, 2), (2, 1), (4, 2)}), kind
        assert {int(r["size_bytes"]) for r in rows} == set(SIZES)
        assert all(r["backend"] == "gloo" and float(r["time_us"]) > 0 for r in rows)
    meta = json.loads((folder / "profile.json").read_text())
    assert meta["world_size"] == 4 and meta["ranks_per_node"] == 2 and meta["backend"] == "gloo"
    assert "51 points" in stdout  # 5 collectives x 3 groups x 3 sizes + 2 pairs x 3 sizes
    compute = cwd / "db" / "compute" / "cpu" / "gpt_tiny"
    assert {p.name for p in compute.iterdir()} == {"mlp.csv", "attention.csv", "profile.json"}
    assert (compute / "mlp.csv").read_text().startswith(",".join(profile_db.MLP_COLUMNS))
    assert (compute / "attention.csv").read_text().startswith(",".join(profile_db.ATTENTION_COLUMNS))
    assert "wrote 22 mlp and 2 attention rows (float32)" in compute_stdout


def test_the_simulator_gives_the_measured_times_and_monotone_between(database):
    cwd, _, _ = database
    tables = profile_db.read_network(cwd / "db", "cpu_gloo")
    measured = tables["all_reduce"].series()
    (cwd / "micro.txt").write_text(MICRO)
    done = run_cli("-m", "simulator", "-w", "micro.txt", "--model", "topo", "-g_p_s", "2", "--profile", "db",
                   "--network_device", "cpu_gloo", "-r", "micro-", cwd=cwd)
    assert done.returncode == 0, done.stderr
    with open(cwd / "results" / "micro-topo_collectives.csv", newline="") as handle:
        rows = {(r["group"], int(r["size_bytes"])): r for r in csv.DictReader(handle)}
    tp_sizes, tp_times = measured[(2, 2)]   # tp 2 with 2 GPUs per server: one node
    dp_sizes, dp_times = measured[(2, 1)]   # dp 2: one rank on each of 2 nodes
    assert float(rows[("tp_group", 8192)]["time_us"]) == pytest.approx(tp_times[tp_sizes.index(8192)], abs=1e-4)
    assert rows[("tp_group", 8192)]["protocol"] == MEASURED
    assert float(rows[("dp_group", 65536)]["time_us"]) == pytest.approx(dp_times[dp_sizes.index(65536)], abs=1e-4)
    # 20000 bytes: on the line through the 8 KiB and 64 KiB points
    t0, t1 = tp_times[1], tp_times[2]
    between = float(rows[("tp_group", 20000)]["time_us"])
    assert rows[("tp_group", 20000)]["protocol"] == INTERPOLATED
    assert between == pytest.approx(t0 + (t1 - t0) * (20000 - 8192) / (65536 - 8192), abs=1e-3)
    assert "sources: collectives (3 distinct, network profile cpu_gloo): 2 measured, 1 interpolated" in done.stdout
    # every series: exact at every measured size, monotone between neighbours (the reader the simulator asks)
    profile = Profile.load(cwd / "db", network_device="cpu_gloo")
    for kind, table in tables.items():
        for (n, r), (sizes, times) in table.series().items():
            for size, t in zip(sizes, times):
                assert profile.collective_time(kind, size, n, r).time_s == pytest.approx(t * 1e-6, rel=1e-12)
            for (s0, t0), (s1, t1) in zip(zip(sizes, times), zip(sizes[1:], times[1:])):
                grid = [profile.collective_time(kind, s0 + (s1 - s0) * i // 16, n, r).time_s * 1e6 for i in range(17)]
                steps = [b - a for a, b in zip(grid, grid[1:])]
                assert all(s >= -1e-9 for s in steps) or all(s <= 1e-9 for s in steps), (kind, n, r, s0, s1)
                assert min(t0, t1) - 1e-6 <= min(grid) and max(grid) <= max(t0, t1) + 1e-6


def test_a_job_simulated_with_both_profiles_says_what_was_measured(database):
    cwd, _, _ = database
    done = run_cli("-m", "simulator", *JOB, "--gpu_type", "H100", "--model", "topo", "-g_p_s", "2", "--profile", "db",
                   "--network_device", "cpu_gloo", "--compute_sku", "cpu", "-r", "job-", "--json", cwd=cwd)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    # every computation of the job was profiled above (same job, same dtype): all measured; what the profile does
    # not time (the optimizer's kernels besides Adam: the NaN check, norm, copies, zeroing) comes from the model
    assert "computations (59 distinct, compute profile cpu, compute model H100): 59 measured; " in summary["sources"]
    share = re.search(r"59 measured; (\d+)% of their time from measurements", summary["sources"])
    assert share and 95 <= int(share.group(1)) <= 100
    assert "network profile cpu_gloo" in summary["sources"]
    # SimAI's model: -nv and -nic from the measured busbw, the job's computations from the compute profile
    simai = run_cli("-m", "simulator", *JOB, "--gpu_type", "H100", "--model", "simai", "-g_p_s", "2", "-n_p_s", "2",
                    "--profile", "db", "--compute_sku", "cpu", "-r", "simai-", cwd=cwd)
    assert simai.returncode == 0, simai.stderr
    assert "sources: simai model: -nv " in simai.stdout and "from cpu_gloo (all_reduce busbw" in simai.stdout
    assert re.search(r"measured; (9[5-9]|100)% of their time from measurements", simai.stdout)

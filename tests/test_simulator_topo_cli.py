"""``--model topo`` from the command line and the Python API: agreement with the simai model where
the two models coincide, result files, trace, plot, and one-line errors with no output."""

from __future__ import annotations

import json

import pytest

from simulator.api import MODELS, simulate
from simulator.options import SimAIOptions, TopoOptions
from tests.conftest import EXAMPLES, run_cli
from workload_generator.simai import SimAIHeader, SimAILayer, SimAIWorkload

MICRO = EXAMPLES / "simai_micro_allreduce.txt"
TOPO16 = str(EXAMPLES / "topo_Spectrum-X_16g_8gps_400Gbps_H100")


def record(name, fwd=("NONE", 0), ig=("NONE", 0), wg=("NONE", 0), compute=(1000, 2000, 1000)) -> SimAILayer:
    return SimAILayer(name, -1, compute[0], fwd[0], fwd[1], compute[1], ig[0], ig[1], compute[2], wg[0], wg[1], 100)


@pytest.fixture(scope="module")
def pp2_file(tmp_path_factory):
    """tp 4, pp 2 (dp 2), ga 4, 16 GPUs: per micro-batch an embedding record and two layers with TP
    collectives; a DP reduce-scatter before the blocks (AICB's layout)."""
    block = [record("embedding_layer", fwd=("ALLREDUCE", 2**20)),
             record("attention", fwd=("ALLGATHER", 2**22), ig=("REDUCESCATTER", 2**22)),
             record("mlp", fwd=("REDUCESCATTER", 2**22), ig=("ALLGATHER", 2**22))]
    records = [record("grad_param_comm", wg=("REDUCESCATTER", 2**26), compute=(0, 0, 0))] + block * 4
    header = SimAIHeader.transformer(tp=4, ep=1, pp=2, vpp=2, ga=4, all_gpus=16, pp_comm=2**21)
    path = tmp_path_factory.mktemp("w") / "pp2.txt"
    SimAIWorkload(header, records).write(path)
    return str(path)


# ---- agreement with SimAI's analytical model ------------------------------------------------------

def test_one_server_no_pp_agrees_with_simai_given_the_same_busbw():
    # SimAI's micro example: tp 8 on one server, two all-reduces (16 MiB, 64 MiB) and 556 us of compute
    # each.  SimAI: 2(n-1)/n * S / 2^30 / 240 GiB/s * 1e9, truncated: 113932 + 455729 ns.  Ours on the
    # derived fabric with the same busbw (-nv 240) and no latency terms: 113932.29 + 455729.17 ns.
    simai = simulate(MICRO, SimAIOptions(gpus_per_server=8, nics_per_server=8, nvlink_bw=240))
    topo = simulate(MICRO, None, TopoOptions(gpus_per_server=8, nvlink_bw=240, latency_scale=0.0))
    assert topo.model == "topo" and simai.model == "simai"
    assert topo.totals.compute_us == pytest.approx(simai.totals.compute_us)
    assert topo.totals.tp_exposed_us == pytest.approx(simai.totals.tp_exposed_us, abs=0.002)
    assert topo.totals.total_us == pytest.approx(simai.totals.total_us, abs=0.002)
    assert topo.totals.bubble_us == simai.totals.bubble_us == 0


def test_large_messages_agree_within_nccl_latency():
    # With NCCL's latencies on, a 1 GiB all-reduce over 8 GPUs differs from SimAI's pure bandwidth
    # term by the ring Simple latency only: 8.4 + 14 * (3.4 + 0.05) = 56.7 us of 1.75 * 2^30 / (240 *
    # 2^30) = 7291.67 us (0.78%).
    header = SimAIHeader.transformer(tp=8, ep=1, pp=1, vpp=1, ga=1, all_gpus=8, pp_comm=0)
    workload = SimAIWorkload(header, [record("embedding_layer", fwd=("ALLREDUCE", 2**30), compute=(0, 0, 0))])
    simai = simulate(workload, SimAIOptions(gpus_per_server=8, nics_per_server=8, nvlink_bw=240))
    topo = simulate(workload, None, TopoOptions(gpus_per_server=8, nvlink_bw=240))
    assert simai.totals.total_us == pytest.approx(7291.666)  # SimAI truncates to whole ns
    assert topo.totals.total_us - simai.totals.total_us == pytest.approx(56.7, abs=0.002)


# ---- the command line -------------------------------------------------------------------------

def test_topology_implies_topo_and_writes_every_file(tmp_path, pp2_file):
    trace, plot = tmp_path / "it.json", tmp_path / "it.png"
    done = run_cli("-m", "simulator", "-w", pp2_file, "-t", TOPO16, "-r", "run-", "--trace", str(trace),
                   "--plot", str(plot), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "topo model" in done.stdout and "iteration" in done.stdout
    results = tmp_path / "results"
    end_to_end = (results / "run-EndToEnd.csv").read_text().splitlines()
    assert end_to_end[0].startswith("File name, Expose DP comm, Expose DP_EP comm, Expose TP comm")
    assert len(end_to_end) == 3 + 13  # terms, values, layer header, one row per record
    stages = (results / "run-topo_stages.csv").read_text().splitlines()
    assert stages[0].startswith("stage,compute_us,tp_exposed_us") and len(stages) == 3
    collectives = (results / "run-topo_collectives.csv").read_text()
    assert "tp_group,all_gather,4194304,4,1,4,NVSwitch,ring" in collectives
    assert "pp_group,send_next,2097152,2,2,1,ASW,p2p,Simple" in collectives
    assert (results / "run-topo_layers.csv").exists()
    data = json.loads(trace.read_text())
    events = data["traceEvents"]
    names = {(e["pid"], e["args"]["name"]) for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {(0, "stage 0"), (1, "stage 1")}
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["cat"] for e in spans} >= {"compute", "TP", "PP", "DP"}
    assert max(e["ts"] + e["dur"] for e in spans) == pytest.approx(data["otherData"]["iteration_us"], rel=1e-6)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_works_for_the_simai_model_too(tmp_path):
    plot = tmp_path / "simai.png"
    done = run_cli("-m", "simulator", "-w", str(MICRO), "-g_p_s", "8", "-n_p_s", "8", "-q", "--plot", str(plot),
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert plot.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("args, message", [
    (("-t", TOPO16, "-g", "12"), "-g 12 GPUs is not a multiple of tp*pp = 4*2 = 8"),
    (("-t", TOPO16, "-g", "32"), "has 16 GPUs, fewer than the 32 the workload runs on"),
    (("--model", "topo"), "--model topo needs -t/--topology FILE, or -g_p_s/--gpus_per_server"),
    (("--model", "simai", "-g_p_s", "8", "-n_p_s", "8", "--trace", "x.json"), "--trace need(s) --model topo"),
    (("--model", "simai", "-g_p_s", "8", "-n_p_s", "8", "-t", TOPO16), "-t/--topology need(s) --model topo"),
    (("-t", TOPO16, "-g_p_s", "4"), "-g_p_s 4 contradicts"),
    (("-t", "no_such_topology"), "no_such_topology: cannot read the topology file"),
    (("-t", TOPO16, "--nvlink_efficiency", "1.5"), "expected a fraction in (0, 1], got '1.5'"),
    (("-w", str(EXAMPLES / "aicb_simai_L7B_megatron_tp2_pp1_mbs1_A100.txt"), "-t", TOPO16),
     "missing header keys 'pp', 'ga'"),
    (("-w", str(MICRO), "--model", "topo", "-g_p_s", "8", "-g", "0"), "argument -g/--gpus: expected a positive integer"),
])
def test_bad_inputs_end_with_one_line_and_no_output(tmp_path, pp2_file, args, message):
    done = run_cli("-m", "simulator", "-w", pp2_file, *args, "--plot", str(tmp_path / "out.file"), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("simulator: error: "), done.stderr
    assert message in lines[0]
    assert not (tmp_path / "results").exists() and not (tmp_path / "out.file").exists()
    assert not (tmp_path / "x.json").exists()


# ---- the Python API ---------------------------------------------------------------------------

def test_api_tables_for_notebooks(pp2_file):
    assert set(MODELS) == {"simai", "topo"}
    result = simulate(pp2_file, TOPO16)  # a topology selects the topo model
    assert result.model == "topo"
    stages = result.stage_table()
    assert list(stages["stage"]) == [0, 1]
    total = stages[["compute_us", "tp_exposed_us", "ep_exposed_us", "dp_exposed_us", "dp_ep_exposed_us",
                    "pp_exposed_us", "other_exposed_us", "bubble_us"]].sum(axis=1)
    assert total.tolist() == pytest.approx([result.iteration_us] * 2)
    collectives = result.collective_table()
    assert {"algorithm", "protocol", "busbw_gbps", "count"} <= set(collectives.columns)
    # the 64 MiB DP reduce-scatter of the step: ranks {0, 4} (stage 0) and {8, 12} (stage 1), each
    # inside one server; once per stage.
    dp = collectives[collectives.group == "dp_group"].iloc[0]
    assert (dp.group_size, dp.servers, dp.per_server, dp.tier, dp["count"]) == (2, 1, 2, "NVSwitch", 2)
    layers = result.layer_table()
    assert set(layers.layer) >= {"embedding_layer", "attention", "mlp", "grad_param_comm"}
    trace = result.trace_table()
    assert set(trace.stream) >= {"compute", "comm", "p2p"}
    assert result.summary_table().iloc[-1].time_us == pytest.approx(result.iteration_us)
    # The options select the model too, and the old (workload, options) call still works.
    assert simulate(pp2_file, TopoOptions(gpus_per_server=8)).model == "topo"
    assert simulate(MICRO, SimAIOptions(gpus_per_server=8, nics_per_server=8)).model == "simai"

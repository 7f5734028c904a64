"""The profiling database (simulator.profiles.db), its reader (simulator.profiles.measured), the fits
(simulator.profiles.fit) and python -m profiling's torch-free commands: hand-derived numbers, synthetic
profiles with known answers, and one-line errors."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.profiles import db as profile_db
from simulator.profiles.fit import alpha_beta, calibrate, fit_shape, model_time
from simulator.profiles.measured import (
    EXTRAPOLATED,
    GROUP_INTERPOLATED,
    INTERPOLATED,
    MEASURED,
    MODEL,
    SCALED,
    ComputeProfile,
    Profile,
)
from simulator.topo.collectives import LinkModel
from tests.conftest import run_cli
from utils.errors import ConfigError, FormatError
from utils.units import GIB

MIB = 1 << 20


def write_series(root, device, kind, series: dict[tuple[int, int], dict[int, float]]) -> None:
    rows = [profile_db.network_row(kind, n, r, size, t) for (n, r), points in series.items() for size, t in points.items()]
    profile_db.write_network(root, device, kind, rows)


# ---- the format ------------------------------------------------------------------------------------

def test_rows_carry_nccl_tests_bandwidths_and_read_back(tmp_path):
    # all_reduce of 1 MiB over 8 ranks in 100 us: algbw = 1048576 / 100e-6 / 1e9 = 10.48576 GB/s,
    # busbw = algbw x 2 x 7/8 = 18.35008 GB/s
    row = profile_db.network_row("all_reduce", 8, 8, MIB, 100.0)
    assert row["algbw_gbps"] == 10.48576 and row["busbw_gbps"] == 18.35008
    write_series(tmp_path, "dev", "all_reduce", {(8, 8): {MIB: 100.0, 4 * MIB: 300.0}})
    path = tmp_path / "network" / "dev" / "allreduce.csv"
    assert path.read_text().splitlines()[0] == "ranks,ranks_per_node,size_bytes,time_us,algbw_gbps,busbw_gbps"
    tables = profile_db.read_network(tmp_path, "dev")
    assert tables["all_reduce"].series() == {(8, 8): ((MIB, 4 * MIB), (100.0, 300.0))}
    # a new measurement of a point replaces the old row, other rows stay
    write_series(tmp_path, "dev", "all_reduce", {(8, 8): {MIB: 90.0}})
    assert profile_db.read_network(tmp_path, "dev")["all_reduce"].series()[(8, 8)] == ((MIB, 4 * MIB), (90.0, 300.0))


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("time_us", "time"), "allreduce.csv:1: missing column(s) time_us"),
    (lambda t: t.replace(",100.0,", ",-100.0,"), "allreduce.csv:2: time_us: must be positive, got -100.0"),
    (lambda t: t.replace(",100.0,", ",0,"), "allreduce.csv:2: time_us: must be positive, got 0"),
    (lambda t: t.replace("18.35008", "17.0897"), "allreduce.csv:2: busbw_gbps: 17.0897 disagrees with size_bytes / "
                                                 "time_us x factor = 18.35"),
    (lambda t: t.replace("8,8,1048576", "8,3,1048576"), "allreduce.csv:2: ranks_per_node: 3 does not divide ranks 8"),
    (lambda t: t + t.splitlines()[1] + "\n", "allreduce.csv:4: ranks 8, ranks_per_node 8, size_bytes 1048576 "
                                             "again (first on line 2)"),
    (lambda t: t.replace("8,8,1048576", "8,8,1M"), "allreduce.csv:2: size_bytes: expected a whole number, got '1M'"),
    (lambda t: t.splitlines()[0] + "\n", "allreduce.csv: no rows"),
])
def test_bad_network_files_are_one_line_errors(tmp_path, edit, message):
    write_series(tmp_path, "dev", "all_reduce", {(8, 8): {MIB: 100.0, 4 * MIB: 300.0}})
    path = tmp_path / "network" / "dev" / "allreduce.csv"
    path.write_text(edit(path.read_text()))
    with pytest.raises(FormatError) as info:
        profile_db.read_network(tmp_path, "dev")
    assert message in str(info.value) and str(path) in str(info.value)


def test_unknown_device_names_the_database(tmp_path):
    write_series(tmp_path, "h100_dgx", "all_reduce", {(8, 8): {MIB: 100.0}})
    with pytest.raises(ConfigError, match=r"--network_device a100: .*network holds no such device \(it has: h100_dgx\)"):
        Profile.load(tmp_path, network_device="a100")


# ---- collectives --------------------------------------------------------------------------------------

@pytest.fixture
def network(tmp_path):
    write_series(tmp_path, "dev", "all_reduce", {
        (2, 2): {MIB: 100.0, 4 * MIB: 250.0, 16 * MIB: 850.0},
        (8, 8): {MIB: 200.0, 4 * MIB: 500.0, 16 * MIB: 1700.0},
        (16, 8): {MIB: 400.0, 4 * MIB: 900.0, 16 * MIB: 3000.0},
    })
    write_series(tmp_path, "dev", "send_recv", {(2, 2): {MIB: 30.0, 16 * MIB: 80.0}, (2, 1): {MIB: 40.0, 16 * MIB: 400.0}})
    return Profile.load(tmp_path, network_device="dev")


def test_measured_sizes_are_the_measured_times_and_linear_between(network):
    assert network.collective_time("all_reduce", 4 * MIB, 8, 8) .time_s == pytest.approx(500e-6, rel=1e-12)
    assert network.collective_time("all_reduce", 4 * MIB, 8, 8).source == MEASURED
    # halfway between 4 MiB and 16 MiB (10 MiB): 500 + (1700 - 500) x 6/12 = 1100 us
    middle = network.collective_time("all_reduce", 10 * MIB, 8, 8)
    assert middle.time_s == pytest.approx(1100e-6) and middle.source == INTERPOLATED
    times = [network.collective_time("all_reduce", s, 8, 8).time_s for s in range(MIB, 16 * MIB + 1, MIB // 4)]
    assert all(a <= b for a, b in zip(times, times[1:]))


def test_group_size_interpolates_bus_bandwidth_in_log2_ranks(network):
    # 4 ranks in one node lie between the 2- and 8-rank one-node series.  At 1 MiB:
    #   busbw(2) = 1048576 x 2(1)/2 / 100e-6 = 10.48576 GB/s;  busbw(8) = 1048576 x 1.75 / 200e-6 = 9.17504 GB/s
    #   log2 4 is halfway between log2 2 and log2 8: 9.8304 GB/s;  time = 1048576 x 1.5 / 9.8304e9 = 160 us
    answer = network.collective_time("all_reduce", MIB, 4, 4)
    assert answer.source == GROUP_INTERPOLATED
    assert answer.time_s == pytest.approx(160e-6, rel=1e-9)


def test_beyond_the_measurements_the_fitted_model_takes_over(network):
    cal = network.network.calibration
    assert cal.nvlink_gbps is not None and cal.nic_gbps is not None
    # above the largest size: measured time + the model's cost of the extra bytes
    shape, links = cal.links(None, fit_shape(8, 8))
    extra = model_time("all_reduce", 64 * MIB, shape, links) - model_time("all_reduce", 16 * MIB, shape, links)
    above = network.collective_time("all_reduce", 64 * MIB, 8, 8)
    assert above.source == EXTRAPOLATED and above.time_s == pytest.approx(1700e-6 + extra)
    # a group shape the profile never measured (64 ranks on 8 nodes): the topo model with the fitted terms
    beyond = network.collective_time("all_reduce", 16 * MIB, 64, 8)
    assert beyond.source == MODEL and "fitted to dev" in beyond.detail
    shape, links = cal.links(None, fit_shape(64, 8))
    assert beyond.time_s == pytest.approx(model_time("all_reduce", 16 * MIB, shape, links))


def test_topo_model_hook_answers_from_the_profile(network):
    from simulator.topo.collectives import collective_cost

    shape = fit_shape(8, 8, 450e9, 50e9)
    cost = network.collective_cost("all_reduce", 4 * MIB, shape, LinkModel())
    assert (cost.algorithm, cost.protocol) == ("profile", MEASURED) and cost.time_s == pytest.approx(500e-6)
    assert cost.busbw_Bps == pytest.approx(4 * MIB / 500e-6 * 1.75)
    p2p = network.p2p_cost(16 * MIB, False, 50e9, 1e-6, LinkModel())
    assert p2p.time_s == pytest.approx(400e-6) and p2p.protocol == MEASURED
    # what the profile does not hold goes to NCCL's model with the fitted terms, and says so
    assert network.collective_cost("barrier", 0, shape, LinkModel()) == collective_cost("barrier", 0, shape, LinkModel())
    reduce = network.collective_cost("reduce", MIB, shape, LinkModel())
    assert reduce.protocol.endswith(", model")
    # every answer is recorded: 1 measured all-reduce, 1 measured send/recv, 1 modelled reduce
    assert "collectives (3 distinct, network profile dev): 2 measured, 1 model; 67% from measurements" \
        in network.sources_text()


# ---- the fits: synthetic profiles with known answers ---------------------------------------------------

def test_alpha_beta_recovers_a_known_line():
    # t = 12 us + size x 2(7/8) / 80 GB/s for an 8-rank all-reduce: 1 MiB -> 12 + 1048576 x 1.75 / 80e3 = 34.94 us
    sizes = tuple(1 << e for e in range(10, 29, 2))
    times = tuple(12.0 + s * 1.75 / 80e3 for s in sizes)
    assert times[5] == pytest.approx(34.94, abs=0.01)
    fit = alpha_beta("all_reduce", 8, 8, sizes, times)
    assert fit.alpha_us == pytest.approx(12.0, rel=1e-6) and fit.busbw_gbps == pytest.approx(80.0, rel=1e-6)


def synthetic_links_profile(root, links: LinkModel, nvlink_Bps: float, nic_Bps: float) -> None:
    for kind in profile_db.NETWORK_FILES:
        shapes = [(2, 2), (2, 1)] if kind == "send_recv" else [(2, 2), (8, 8), (2, 1), (16, 8), (8, 1)]
        series = {}
        for n, r in shapes:
            shape = fit_shape(n, r, nvlink_Bps, nic_Bps)
            series[(n, r)] = {1 << e: model_time(kind, 1 << e, shape, links) * 1e6 for e in range(10, 31, 2)}
        write_series(root, "synthetic", kind, series)


def test_calibrate_recovers_known_efficiencies_and_latency_scale(tmp_path):
    # H100 NVLink 450 GB/s at efficiency 0.7 (315 GB/s), 50 GB/s NICs at 0.9 (45 GB/s), latencies x 1.5
    synthetic_links_profile(tmp_path, LinkModel(0.7, 0.9, 1.5), 450e9, 50e9)
    cal = calibrate(Profile.load(tmp_path, network_device="synthetic").network.calibration.points)
    assert cal.nvlink_gbps == pytest.approx(315.0, rel=0.01) and cal.nic_gbps == pytest.approx(45.0, rel=0.01)
    assert cal.latency_scale == pytest.approx(1.5, rel=0.01)
    # the command prints the fit and writes it as JSON
    done = run_cli("-m", "profiling", "calibrate", "--profile", str(tmp_path), "--gpu_type", "H100", "--nic_gbps", "50",
                   "--json", str(tmp_path / "fit.json"))
    assert done.returncode == 0, done.stderr
    fit = json.loads((tmp_path / "fit.json").read_text())
    assert fit["nvlink_efficiency"] == pytest.approx(0.7, rel=0.01) and fit["nic_efficiency"] == pytest.approx(0.9, rel=0.01)
    assert fit["latency_scale"] == pytest.approx(1.5, rel=0.01) and fit["rms_error_pct"] < 0.01  # times are written to 1e-4 us
    assert "--nvlink_efficiency 0.7 --nic_efficiency 0.9 --latency_scale 1.5" in done.stdout
    assert "all_reduce, 16 ranks, 8 per node (2 nodes)" in done.stdout and "resid%" in done.stdout


def test_calibrate_recovers_known_alpha_and_beta_per_series(tmp_path):
    # send/recv between nodes: alpha 5 us, 24 GB/s;  all-gather of 8 ranks in a node: alpha 9 us, busbw 150 GB/s
    sizes = [1 << e for e in range(12, 31, 3)]
    write_series(tmp_path, "ab", "send_recv", {(2, 1): {s: 5.0 + s / 24e3 for s in sizes}})
    write_series(tmp_path, "ab", "all_gather", {(8, 8): {s: 9.0 + s * 7 / 8 / 150e3 for s in sizes}})
    done = run_cli("-m", "profiling", "calibrate", "--profile", str(tmp_path), "--network_device", "ab",
                   "--json", str(tmp_path / "fit.json"))
    assert done.returncode == 0, done.stderr
    series = {(s["kind"], s["ranks"]): s for s in json.loads((tmp_path / "fit.json").read_text())["series"]}
    # times are written rounded to 1e-4 us; the fit stays well within 1%
    assert series[("send_recv", 2)]["alpha_us"] == pytest.approx(5.0, rel=0.01)
    assert series[("send_recv", 2)]["busbw_gbps"] == pytest.approx(24.0, rel=0.01)
    assert series[("all_gather", 8)]["alpha_us"] == pytest.approx(9.0, rel=0.01)
    assert series[("all_gather", 8)]["busbw_gbps"] == pytest.approx(150.0, rel=0.01)
    assert "alpha 5.000 us, busbw 24.000 GB/s" in done.stdout


# ---- computations ---------------------------------------------------------------------------------------

def tiny_items():
    from utils.cli import parse_job
    from workload_generator.entry import build_workload

    job, _ = parse_job(["--frame", "Megatron", "--model_name", "gpt_tiny", "--world_size", "2",
                        "--tensor_model_parallel_size", "2", "--seq_length", "64", "--num_layers", "1",
                        "--global_batch", "1", "--computation_enable", "--enable_sequence_parallel"], "t", "")
    items = [i for i in build_workload(job).items if i.is_computation]
    return job, items


def write_compute_rows(root, items, dtype, time_us) -> None:
    mlp, attention = {}, {}
    for item in items:
        found = profile_db.item_key(item, dtype)
        if found is None:
            continue
        name, key = found
        row = dict(key, time_us=time_us(item, key))
        table = attention if name == "attention.csv" else mlp
        table[profile_db.row_key(row, name)] = row
    profile_db.write_compute(root, "h100", "tiny", list(mlp.values()), list(attention.values()))


def test_compute_rows_answer_items_and_the_model_fills_the_rest(tmp_path):
    from mocked_model.compute import estimate_ns, gpu_spec

    _, items = tiny_items()
    write_compute_rows(tmp_path, items, "bfloat16", lambda item, key: 7.0)
    profile = Profile.load(tmp_path, compute_sku="h100", gpu="H100", dtype="bfloat16")
    norm = next(i for i in items if i.meta["op"] == "norm")
    assert profile.kernel_time(norm).time_s == pytest.approx(7e-6) and profile.kernel_time(norm).source == MEASURED
    # a GEMM item: the measured GEMM plus the model's other kernels (none here: no bias on these linears)
    gemm = next(i for i in items if i.meta["op"] == "wgrad")
    assert profile.kernel_time(gemm).time_s == pytest.approx(7e-6)
    # the same job in float32 finds no rows: the compute model for H100, and the summary says so
    fp32 = Profile.load(tmp_path, compute_sku="h100", gpu="H100", dtype="float32")
    answer = fp32.kernel_time(norm)
    assert answer.source == MODEL and answer.time_s == pytest.approx(estimate_ns(norm, gpu_spec("H100"), "float32") * 1e-9)
    assert "1 model" in fp32.sources_text()


def test_compute_interpolates_in_m_and_scales_by_the_shape_law(tmp_path):
    from mocked_model.compute import gemm_ns, gpu_spec
    from mocked_model.compute.kernels import GemmShape
    from utils.workload import CommType, WorkItem

    def gemm(m, n, k):
        return WorkItem(CommType.computation, stage="forward.x", shapes=((m, 1, k), (k, n)), meta={"op": "gemm"})

    rows = [dict(profile_db.item_key(gemm(m, 4096, 4096), "bfloat16")[1], time_us=t) for m, t in ((1024, 100.0), (4096, 400.0))]
    profile_db.write_compute(tmp_path, "h100", "grid", rows, [])
    profile = ComputeProfile(profile_db.read_compute(tmp_path, "h100"), "H100", "bfloat16")
    # m = 2048 between 1024 and 4096 of the same (n, k): 100 + 300 x (1024 / 3072) = 200 us
    ns, source, _, _ = profile.answer(gemm(2048, 4096, 4096))
    assert source == INTERPOLATED and ns == pytest.approx(200e3)
    # m = 8192 is outside: the nearest measured GEMM (m 4096) times the law's ratio
    ns, source, detail, _ = profile.answer(gemm(8192, 4096, 4096))
    h100 = gpu_spec("H100")
    ratio = gemm_ns(GemmShape(8192, 4096, 4096), h100) / gemm_ns(GemmShape(4096, 4096, 4096), h100)
    assert source == SCALED and ns == pytest.approx(400e3 * ratio) and "mlp.csv:" in detail


def test_aiob_file_from_a_compute_profile(tmp_path):
    from mocked_model.aiob.compute_file import ComputeFile

    _, items = tiny_items()
    write_compute_rows(tmp_path, items, "bfloat16", lambda item, key: 1.0)
    out = tmp_path / "aiob.txt"
    done = run_cli("-m", "profiling", "aiob", "--profile", str(tmp_path), "--compute_sku", "h100", "--gpu_type", "H100",
                   "--model_name", "gpt_tiny", "--world_size", "2", "--tensor_model_parallel_size", "2", "--seq_length", "64",
                   "--num_layers", "1", "--global_batch", "1", "--enable_sequence_parallel", "-o", str(out))
    assert done.returncode == 0, done.stderr
    compute = ComputeFile.read(out)
    # every item 1 us: a norm is one item; the QKV backward is dgrad + wgrad (2 us); the optimizer step is
    # Adam measured (1 us) plus the model's zeroing, norm and copies
    assert compute.avg_us("layernorm") == 1.0 and compute.avg_us("bwd_qkv") == 2.0
    assert compute.avg_us("param_time") > 1.0
    assert compute.labels["compute_source"] == "profile h100"
    assert "measured" in done.stdout


# ---- SimAI's busbw.yaml ------------------------------------------------------------------------------------

def test_busbw_yaml_for_a_layout(tmp_path):
    size = 256 * MIB
    # TP 8 in a node: all_reduce busbw 300 GB/s at 256 MiB: time = 268435456 x 1.75 / 300e9 s = 1565.87 us
    write_series(tmp_path, "d", "all_reduce", {(8, 8): {size: size * 1.75 / 300e9 * 1e6},
                                                (4, 1): {size: size * 1.5 / 40e9 * 1e6}})
    write_series(tmp_path, "d", "send_recv", {(2, 1): {size: size / 45e9 * 1e6}})
    out = tmp_path / "busbw.yaml"
    done = run_cli("-m", "profiling", "simai-busbw", "--profile", str(tmp_path), "--tp", "8", "--dp", "4", "--pp", "2",
                   "-o", str(out))
    assert done.returncode == 0, done.stderr
    values, section = {}, None
    for line in out.read_text().splitlines()[1:]:  # SimAI skips line 1 and '#' lines, as this loop does
        if not line or line.startswith("#"):
            continue
        if line.endswith(":"):
            section = line[:-1]
            continue
        key, _, value = line.partition(":")
        values[(section, key.split(",")[0])] = None if value.strip() == "null" else float(value)
    # GiB/s, as SimAI divides by 2^30: 300e9 / 2^30 = 279.40, 40e9 / 2^30 = 37.25, 45e9 / 2^30 = 41.91
    assert values[("TP", "allreduce")] == round(300e9 / GIB, 2) == 279.4
    assert values[("DP", "allreduce")] == round(40e9 / GIB, 2)
    assert values[("PP", "busbw")] == round(45e9 / GIB, 2)
    assert values[("EP", "alltoall")] is None
    assert "# all_reduce over 8 ranks, 8 per node: measured" in out.read_text()
    # and SimAI's reader as the simulator's -busbw has it (simulator.simai.busbw_file) agrees
    from simulator.simai.busbw_file import BusbwFile

    read = BusbwFile.read(out)
    assert read.busbw("TP", "all_reduce") == pytest.approx(279.4, rel=1e-6) and read.pp_busbw == pytest.approx(41.91)
    assert not read.notes


# ---- nccl-tests' output --------------------------------------------------------------------------------------

NCCL_TESTS = """\
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1
#
# Using devices
#  Rank  0 Group  0 Pid  41002 on     node01 device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  41003 on     node01 device  1 [0x2a] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid  51002 on     node02 device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid  51003 on     node02 device  1 [0x2a] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    52.43   20.00   30.00      0    51.00   20.56   30.84      0
     2097152        524288     float     sum      -1    83.89   25.00   37.50      0    80.00   26.21   39.32      0
     4194304       1048576     float     sum      -1   139.81   30.00   45.00      0   130.00   32.26   48.40      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 37.5
"""


def test_nccl_tests_output_becomes_profile_rows(tmp_path):
    src = tmp_path / "all_reduce_perf_4gpu.txt"
    src.write_text(NCCL_TESTS)
    done = run_cli("-m", "profiling", "nccl-tests", str(src), "--network_device", "dgx", "-o", str(tmp_path / "db"))
    assert done.returncode == 0, done.stderr
    table = profile_db.read_network(tmp_path / "db", "dgx")["all_reduce"]
    # 4 ranks on 2 hosts: 2 per node; out-of-place times; busbw 1048576 / 52.43e-6 x 1.5 / 1e9 = 30.00 GB/s
    assert table.series() == {(4, 2): ((MIB, 2 * MIB, 4 * MIB), (52.43, 83.89, 139.81))}
    assert table.busbw_gbps[0] == pytest.approx(30.0, abs=0.01)
    assert "all_reduce, 4 ranks, 2 per node, 3 sizes" in done.stdout


@pytest.mark.parametrize("text, extra, message", [
    ("no table here\n", (), "no nccl-tests table"),
    (NCCL_TESTS.replace("# nThread", "# x"), ("--kind", "all_gather", "--ranks", "4"), "give --ranks_per_node"),
])
def test_nccl_tests_errors(tmp_path, text, extra, message):
    src = tmp_path / "all_reduce_perf.txt"
    src.write_text(text)
    done = run_cli("-m", "profiling", "nccl-tests", str(src), "--network_device", "dgx", "-o", str(tmp_path / "db"), *extra)
    assert done.returncode == 2 and message in done.stderr and str(src) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "db").exists()


# ---- the simulator's command line ---------------------------------------------------------------------------

MICRO = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 1 vpp: 1 ga: 1 all_gpus: 4 checkpoints: 0 "
         """checkpoint_initiates: 0
2
layer_a\t-1\t1000\tALLREDUCE\t1048576\t1000\tNONE\t0\t1000\tALLREDUCE\t4194304\t100
layer_b\t-1\t1000\tALLREDUCE\t2621440\t1000\tNONE\t0\t1000\tNONE\t0\t100
""")


def test_simulator_with_a_profile_and_bad_profiles(tmp_path):
    db = tmp_path / "db"
    write_series(db, "dev", "all_reduce", {(2, 2): {MIB: 100.0, 4 * MIB: 250.0}, (2, 1): {MIB: 300.0, 4 * MIB: 900.0}})
    (tmp_path / "micro.txt").write_text(MICRO)
    base = ("-m", "simulator", "-w", "micro.txt", "--model", "topo", "-g_p_s", "2", "-r", "m-")
    done = run_cli(*base, "--profile", "db", "--network_device", "dev", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = (tmp_path / "results" / "m-topo_collectives.csv").read_text().splitlines()
    header = rows[0].split(",")
    got = {(r["group"], int(r["size_bytes"])): r for r in (dict(zip(header, line.split(","))) for line in rows[1:])}
    # TP (2 ranks in a node) at 1 MiB: measured 100 us; at 2.5 MiB: 100 + 150 x 1.5/3 = 175 us; DP (2 nodes) 4 MiB: 900 us
    assert float(got[("tp_group", MIB)]["time_us"]) == 100.0 and got[("tp_group", MIB)]["protocol"] == MEASURED
    assert float(got[("tp_group", 2621440)]["time_us"]) == pytest.approx(175.0)
    assert float(got[("dp_group", 4 * MIB)]["time_us"]) == 900.0
    assert "sources: collectives (3 distinct, network profile dev): 2 measured, 1 interpolated; 100% from measurements" \
        in done.stdout
    # bad inputs: one line naming the file, exit 2, no result files
    cases = [
        (lambda: (db / "network" / "dev" / "allreduce.csv").write_text("ranks,size_bytes,time_us\n2,1,1\n"),
         ("--network_device", "dev"), "allreduce.csv:1: missing column(s) ranks_per_node, algbw_gbps, busbw_gbps"),
        (lambda: write_series(db, "dev", "all_reduce", {(2, 2): {MIB: 100.0}}), ("--network_device", "other"),
         "--network_device other: " + os.path.join("db", "network") + " holds no such device (it has: dev)"),
        (lambda: None, ("--profile", "missing"), "--profile missing: no such folder"),
    ]
    for i, (setup, flags, message) in enumerate(cases):
        setup()
        out = f"bad{i}-"
        args = [*base[:-1], out, *(("--profile", "db") if "--profile" not in flags else ()), *flags]
        failed = run_cli(*args, cwd=tmp_path)
        assert failed.returncode == 2, failed.stdout
        assert failed.stderr.startswith("simulator: error: ") and message in failed.stderr
        assert len(failed.stderr.strip().splitlines()) == 1
        assert not any(p.name.startswith(out) for p in (tmp_path / "results").iterdir())
    failed = run_cli(*base, "--profile", "db", "--compute_sku", "h100", cwd=tmp_path)
    assert failed.returncode == 2 and "a SimAI workload file carries its own compute times" in failed.stderr
    time_negative = (db / "network" / "dev" / "allreduce.csv")
    time_negative.write_text(time_negative.read_text().replace(",100.0,", ",-100.0,"))
    failed = run_cli(*base, "--profile", "db", cwd=tmp_path)
    assert failed.returncode == 2 and "allreduce.csv:2: time_us: must be positive, got -100.0" in failed.stderr


# ---- properties of the readers --------------------------------------------------------------------------

POINTS = st.dictionaries(st.integers(1, 1 << 34), st.floats(0.5, 1e7, allow_nan=False), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(points=POINTS, kind=st.sampled_from(sorted(profile_db.NETWORK_FILES)), shape=st.sampled_from([(2, 1), (2, 2)]))
def test_written_network_rows_read_back(tmp_path_factory, points, kind, shape):
    root = tmp_path_factory.mktemp("rt")
    write_series(root, "d", kind, {shape: points})
    sizes, times = profile_db.read_network(root, "d")[kind].series()[shape]
    assert sizes == tuple(sorted(points))
    assert times == pytest.approx([round(points[s], 4) for s in sizes], rel=1e-9, abs=1e-4)


@settings(max_examples=40, deadline=None)
@given(points=POINTS, in_place=st.booleans())
def test_nccl_tests_tables_parse_back(points, in_place):
    lines = ["# Collective test starting: all_gather_perf",
             "#  Rank  0 Group  0 Pid  1 on  a device  0 [0x18] NVIDIA H100",
             "#  Rank  1 Group  0 Pid  2 on  b device  0 [0x18] NVIDIA H100",
             "#  size  count  type  redop  root  time  algbw  busbw #wrong  time  algbw  busbw #wrong"]
    for size, t in sorted(points.items()):
        lines.append(f"  {size}  {size // 4}  float  none  -1  {t:.2f}  0.00  0.00  0  {t * 2:.2f}  0.00  0.00  0")
    from profiling.nccl_tests import parse

    run = parse("\n".join(lines) + "\n", "x.txt", in_place=in_place)
    assert (run.kind, run.ranks, run.ranks_per_node) == ("all_gather", 2, 1)
    for row, (size, t) in zip(run.rows, sorted(points.items())):
        expected = float(f"{t * 2:.2f}") if in_place else float(f"{t:.2f}")
        assert row["size_bytes"] == size and row["time_us"] == pytest.approx(expected)

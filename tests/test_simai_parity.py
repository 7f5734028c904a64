"""SimAI's documented spellings: ``-busbw busbw.yaml`` (the pre-1.7 analytical binary), ``-v 1``, the ns-3
binary's ``-t N -n TOPO``, ``--lenient`` for AICB's older files, and the ``-pp_o`` note."""

from __future__ import annotations

import pytest

from simulator.api import simulate
from simulator.options import SimAIOptions
from simulator.simai.busbw_file import BusbwFile
from tests.conftest import EXAMPLES, run_cli
from utils.errors import ConfigError, FormatError

EXAMPLE = str(EXAMPLES / "simai_workload_analytical.txt")
BUSBW = str(EXAMPLES / "simai_busbw.yaml")
PRE17 = EXAMPLES / "simai_busbw_yaml_example_g9216_gps8-EndToEnd.csv"


def test_busbw_yaml_reproduces_the_pre17_binary(tmp_path):
    # SimAI's documented pre-1.7 command (no -n_p_s), with the prefix the example output was written under
    done = run_cli("-m", "simulator", "-w", EXAMPLE, "-g", "9216", "-g_p_s", "8", "-r", "O_A1_wa_g9216_gps8-",
                   "-busbw", BUSBW, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    ours = (tmp_path / "results" / "O_A1_wa_g9216_gps8-EndToEnd.csv").read_bytes()
    assert ours == PRE17.read_bytes()  # every layer row, the totals, the bandwidth columns: byte for byte


def test_busbw_yaml_one_layer_by_hand():
    result = simulate(EXAMPLE, SimAIOptions(gpus=9216, gpus_per_server=8, busbw_file=BUSBW))
    rows = {(layer.name, layer.fwd.token): layer for layer in result.layers}
    # The EP all-to-all of an MoE layer: 100663296 B = 0.09375 GiB over the EP group of 16 at the file's
    # EP alltoall 80 GiB/s: 0.09375 / 80 s x 15/16 = 1.0986328125e-3 s -> 1,098,632 ns (truncated); no ratio
    # table and no small-message latency in the pre-1.7 binary.  The report: algbw 0.09375 GiB / 1.098632e-3 s
    # = 85.33 GiB/s, busbw x 15/16 = 80.00.
    a2a = rows[("mlp_moelayer", "ALLTOALL_EP")]
    assert (a2a.fwd.group, a2a.fwd.group_size, a2a.fwd.time_ns) == ("EP", 16, 1_098_632)
    assert (a2a.ig.time_ns, round(a2a.fwd.algbw_gibps, 2), round(a2a.fwd.busbw_gibps, 2)) == (1_098_632, 85.33, 80.0)
    # The TP all-gather of attention_column: 50331648 B = 0.046875 GiB at TP allgather 280 GiB/s over tp 2:
    # 0.046875 / 280 s x 1/2 = 83,705.357 ns -> 83,705 ns (SimAI 1.7's ratio table would make it 87.89 us).
    column = rows[("attention_column", "ALLGATHER")]
    assert (column.fwd.group_size, column.fwd.time_ns) == (2, 83_705)
    # The DP_EP all-gather reads the EP section (allgather 45 GiB/s) with n = dp / ep = (9216 / (2 x 12)) / 16 = 24:
    # 19327352832 B = 18 GiB; 18 / 45 s x 23/24 = 0.383333... s -> 383,333,333 ns.
    norm1 = rows[("moe_grad_norm1", "NONE")]
    assert (norm1.wg.group, norm1.wg.group_size, norm1.wg.time_ns) == ("DP_EP", 24, 383_333_333)
    # PP: the header's pp_comm with SimAI's default -pp_o 1 exposes nothing, as the binary printed (0)
    assert result.totals.pp_exposed_us == 0 and result.setup["pp_busbw_gibps"] is None


def test_busbw_file_format():
    table = BusbwFile.loads("name\nTP:\nallreduce,: 300\n# comment\n\nDP:\nallreduce,: null\nalltoall: 12.5\n"
                            "PP:\nbusbw: 47.5\nXX:\nfoo: 1\n", "b.yaml")
    assert table.values[("TP", "allreduce")] == 300.0 and table.values[("DP", "allreduce")] is None
    assert table.values[("DP", "alltoall")] == 12.5 and table.pp_busbw == 47.5
    assert any("section 'XX'" in note for note in table.notes)
    assert table.busbw("TP", "all_reduce") == 300.0
    with pytest.raises(ConfigError, match=r"gives no DP allreduce \(absent or null\)"):
        table.busbw("DP", "all_reduce")
    with pytest.raises(ConfigError, match=r"no EP allgather"):
        table.busbw("DP_EP", "all_gather")
    with pytest.raises(FormatError, match=r"b.yaml:3: TP allreduce: expected a bandwidth in GiB/s or null"):
        BusbwFile.loads("n\nTP:\nallreduce,: fast\n", "b.yaml")
    with pytest.raises(FormatError, match=r"b.yaml:2: .*before any section"):
        BusbwFile.loads("n\nallreduce: 1\n", "b.yaml")
    # a reduce-scatter value of its own is used, and the difference to the pre-1.7 binary (which priced
    # reduce-scatters with the allgather value) is said
    table = BusbwFile.loads("n\nTP:\nallgather: 280\nreducescatter: 200\n", "b.yaml")
    assert table.busbw("TP", "reduce_scatter") == 200.0
    assert "pre-1.7 binary used the allgather value" in table.differences_from_pre17()[0]


@pytest.mark.parametrize("args, needle", [
    (("-busbw", "missing.yaml"), "-busbw missing.yaml: no such file"),
    (("-v", "2"), "-v/--visual takes 0 or 1"),
    (("-t", "16"), "-t 16: no topology file of that name"),
])
def test_bad_spellings_are_one_line(tmp_path, args, needle):
    done = run_cli("-m", "simulator", "-w", EXAMPLE, "-g", "9216", "-g_p_s", "8", "-n_p_s", "8", *args, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().count("\n") == 0 and needle in done.stderr
    assert not (tmp_path / "results").exists()


def test_v1_and_ns3_spellings(tmp_path):
    micro = str(EXAMPLES / "simai_micro_allreduce.txt")
    done = run_cli("-m", "simulator", "-w", micro, "-g_p_s", "8", "-n_p_s", "8", "-v", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "-v/--visual: SimAI's HTML pie chart is not written" in done.stderr
    topo = str(EXAMPLES / "topo_Spectrum-X_16g_8gps_400Gbps_H100")
    done = run_cli("-m", "simulator", "-t", "16", "-w", micro, "-n", topo, "-c", "SimAI.conf", "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "-t 16: SimAI's ns-3 thread count, ignored" in done.stderr and "-c SimAI.conf" in done.stderr
    assert (tmp_path / "results" / "simai_micro_allreduce-topo_stages.csv").exists()


def test_lenient_older_aicb_file(tmp_path):
    older = str(EXAMPLES / "aicb_simai_L7B_megatron_tp2_pp1_mbs1_A100.txt")  # header: model_parallel_NPU_group only
    args = ("-m", "simulator", "-w", older, "-g", "16", "-g_p_s", "8", "-n_p_s", "8", "-q")
    refused = run_cli(*args, cwd=tmp_path)
    assert refused.returncode == 2 and "pp" in refused.stderr
    done = run_cli(*args, "--lenient", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "--lenient" in done.stderr and "assumed ep 1, pp 1, ga 1, vpp 1" in done.stderr


def test_pp_overlap_note_on_stdout(tmp_path):
    done = run_cli("-m", "simulator", "-w", EXAMPLE, "-g", "9216", "-g_p_s", "8", "-n_p_s", "8", "-pp_o", "0.5",
                   "--pp_busbw", "47.5", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "note: -pp_o 0.5 differs from SimAI 1.7's meaning" in done.stdout and "47.5 GiB/s" in done.stdout


def test_placeholder_compute_warns_and_estimator_is_refused_for_simai_files():
    from simulator.options import TopoOptions
    from workload_generator.simai import SimAIWorkload

    older = SimAIWorkload.read(EXAMPLES / "aicb_simai_L7B_megatron_tp2_pp1_mbs1_A100.txt", strict=False)
    assert older.placeholder_compute is False  # AICB's A100 file carries measured times
    micro = SimAIWorkload.read(EXAMPLES / "simai_micro_allreduce.txt", strict=False)
    for record in micro.records:
        record.fwd_compute_ns = record.ig_compute_ns = record.wg_compute_ns = 1
    result = simulate(micro, SimAIOptions(gpus_per_server=8, nics_per_server=8))
    assert any("AICB's placeholder of 1 ns" in w for w in result.warnings)
    with pytest.raises(ConfigError, match="compute_time_ns prices the computation items of a job"):
        simulate(str(EXAMPLES / "simai_micro_allreduce.txt"), None,
                 TopoOptions(gpus_per_server=8, compute_time_ns=lambda item: 1000.0))


def test_topo_gen_nvl_says_what_simai_builds(tmp_path):
    done = run_cli("-m", "topo.gen", "-topo", "NVL", "-g", "16", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert "-g 16 is not a multiple of -topo NVL's 72 GPUs per NVLink domain" in done.stderr
    assert "No_Rail_Opti_16g_8gps_SingleToR_400Gbps_H100" in done.stderr and "IndexError" not in done.stderr
    assert run_cli("-m", "topo.gen", "-topo", "NVL", "-gps", "8", "-g", "16", cwd=tmp_path).returncode == 0

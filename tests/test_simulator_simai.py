"""``--model simai``: SimAI 1.7's analytical model, checked against arithmetic done by hand.

Every expected number below is derived in the comment above it from docs/simai_analytical.md, never
copied from the program's output.  Notation: G = 2^30; F = (n-1)/n (2(n-1)/n for all-reduce);
time = size / G / (ratio * busbw) * 1e9 * F, truncated to whole ns.  Where SimAI's float32
arithmetic changes the truncated integer, the comment says so.

The example is /work/shared/examples/simai_workload_analytical.txt with
``-g 9216 -g_p_s 8 -n_p_s 8 -nv 360 -nic 48.5``: tp 2, ep 16, pp 12, vpp 8, ga 24, so
dp = 9216 / (2 * 12) = 384, the DP_EP group has 384 / 16 = 24 ranks.
"""

from __future__ import annotations

import math

import pytest

from simulator.api import simulate
from simulator.options import SimAIOptions
from simulator.simai.model import SimAIModel
from tests.conftest import EXAMPLES
from utils.errors import ConfigError, FormatError
from workload_generator.simai import SimAIHeader, SimAILayer, SimAIWorkload
from workload_generator.simai_tokens import classify

EXAMPLE_OPTIONS = SimAIOptions(gpus=9216, gpus_per_server=8, nics_per_server=8, nvlink_bw=360, nic_busbw=48.5)


@pytest.fixture(scope="module")
def example():
    return simulate(EXAMPLES / "simai_workload_analytical.txt", EXAMPLE_OPTIONS)


def first(result, name, fwd_comm=None):
    return next(layer for layer in result.layers
                if layer.name == name and (fwd_comm is None or layer.fwd.token == fwd_comm))


def record(fwd=("NONE", 0), ig=("NONE", 0), wg=("NONE", 0), name="layer", compute=(0, 0, 0)) -> SimAILayer:
    return SimAILayer(name, -1, compute[0], fwd[0], fwd[1], compute[1], ig[0], ig[1], compute[2], wg[0], wg[1], 100)


def model(records, tp=2, ep=1, pp=1, gpus=None, gps=8, nps=8, nv=360.0, nic=48.5, **opts) -> SimAIModel:
    gpus = gpus or tp * pp * 2
    header = SimAIHeader.transformer(tp=tp, ep=ep, pp=pp, vpp=1, ga=1, all_gpus=gpus, pp_comm=0 if pp == 1 else 1024)
    options = SimAIOptions(gpus=gpus, gpus_per_server=gps, nics_per_server=nps, nvlink_bw=nv, nic_busbw=nic, **opts)
    return SimAIModel(SimAIWorkload(header, list(records), path="synthetic.txt"), options)


# ---- one collective of each group and type, on the example ----------------------------------

def test_tp_allgather_and_reducescatter_use_the_ratio_table(example):
    # attention_column fwd ALLGATHER 50331648 B (48 MiB), TP group n = tp = 2 <= 8 GPUs per server:
    # one node, busbw = nv = 360.  One node is not "NVLink" (that needs several nodes), so the nic
    # table, node count 1: 48 MiB lies half-way between 32 MiB (.55) and 64 MiB (.65) -> .60,
    # normalised by the 16 GiB row .81 -> .7407407.  ratio * busbw = 266.6667 GiB/s.
    # 48 MiB / G = 0.046875 GiB; 0.046875 / 266.6667 * 1e9 = 175781.25; * F (1/2) = 87890.6 -> 87890 ns.
    layer = first(example, "attention_column")
    assert (layer.fwd.comm_type, layer.fwd.group, layer.fwd.group_size) == ("all_gather", "TP", 2)
    assert layer.fwd.time_ns == 87890
    assert layer.fwd.ratio == pytest.approx(0.60 / 0.81, rel=1e-7)
    # Its ig REDUCESCATTER of 0 bytes costs 0 (ratio of size 0 is 1, 0 / bw = 0).
    assert layer.ig.time_ns == 0
    # attention_row: fwd REDUCESCATTER and ig ALLGATHER of 48 MiB, same arithmetic.
    row = first(example, "attention_row")
    assert (row.fwd.time_ns, row.ig.time_ns) == (87890, 87890)
    # 192 MiB all-gather: between 128 MiB (.69) and 256 MiB (.73) -> .71 / .81 = .8765432;
    # * 360 = 315.5556; 0.1875 GiB / 315.5556 * 1e9 / 2 = 297095.07 -> 297095 ns.
    assert first(example, "mlp_moelayer", "ALLGATHER").fwd.time_ns == 3662   # 1.5 MiB, see below
    big = next(layer for layer in example.layers if layer.fwd.token == "ALLGATHER" and layer.fwd.size_bytes == 201326592)
    assert big.fwd.time_ns == 297095 and big.ig.time_ns == 297095


def test_tp_allreduce(example):
    # embedding_layer fwd ALLREDUCE 48 MiB in TP (n = 2): all-reduce uses ratio 1, busbw 360.
    # 0.046875 / 360 * 1e9 = 130208.33; F = 2 * 1 / 2 = 1 -> 130208 ns.
    layer = first(example, "embedding_layer")
    assert (layer.fwd.comm_type, layer.fwd.ratio, layer.fwd.time_ns) == ("all_reduce", 1.0, 130208)
    # embedding_grads has the same all-reduce in its ig column.
    assert first(example, "embedding_grads").ig.time_ns == 130208


def test_tp_alltoall_uses_the_ata_table(example):
    # mlp_moelayer fwd ALLTOALL 25165824 B (24 MiB) without suffix: TP group, n = 2, inside one
    # node: all_to_all busbw = nv = 360.  ata table, node count 1: between 16 MiB (.44) and 32 MiB
    # (.51) -> .475, / .78 = .6089744; * 360 = 219.2308.  0.0234375 / 219.2308 * 1e9 = 106907.9;
    # / 2 = 53453.9 -> 53453 ns.
    layer = first(example, "mlp_moelayer", "ALLTOALL")
    assert (layer.fwd.group, layer.fwd.time_ns, layer.ig.time_ns) == ("TP", 53453, 53453)
    assert layer.booked_fwd_ig == "TP"


def test_ep_alltoall(example):
    # mlp_moelayer ALLTOALL_EP 100663296 B (96 MiB), EP group n = ep = 16.  tp * n = 32 > 8:
    # node_count = 32 / 8 = 4, gpus_per_node = max(8 / 2, 1) = 4, nics_per_node = 8 / 2 = 4.
    # all_to_all across nodes: nic * nics / gpn * (N - 1) / ((node_count - 1) * gpn) with N = 16:
    # 48.5 * 4 / 4 * 15 / (3 * 4) = 60.625 GiB/s.  Ratio: ata table, tp*n > 8 and tp < 8 ->
    # node count 32 / 8 = 4: between 64 MiB (.83) and 128 MiB (.90) -> .865, / .95 = .9105263;
    # ratio * busbw = 55.2007.  0.09375 GiB / 55.2007 * 1e9 = 1698349.3; * 15/16 = 1592202.5 -> 1592202 ns.
    layer = first(example, "mlp_moelayer", "ALLTOALL_EP")
    assert (layer.fwd.group, layer.fwd.group_size) == ("EP", 16)
    assert layer.fwd.model_busbw_gibps == pytest.approx(60.625 * 0.865 / 0.95, rel=1e-6)
    assert (layer.fwd.time_ns, layer.ig.time_ns) == (1592202, 1592202)
    assert layer.booked_fwd_ig == "EP"


def test_dp_allgather_and_reducescatter(example):
    # grad_gather wg ALLGATHER 2807758848 B: DP group, n = dp = 384, tp 2 <= 8: node_count 384,
    # gpus_per_node 8 / 2 = 4, nics 8 / 2 = 4 -> nic * nics = 194 <= nv 360: busbw min(360, 194) = 194.
    # DP collectives use ratio 1.  2807758848 / G = 2.614929199 GiB; / 194 * 1e9 = 13478999.99...;
    # * 383/384 = 13443914.9 -> 13443914 ns.
    gather = first(example, "grad_gather").wg
    assert (gather.group, gather.group_size, gather.model_busbw_gibps) == ("DP", 384, 194.0)
    assert gather.time_ns == 13443914
    # grad_param_comm wg REDUCESCATTER of twice that size: 26887829.8 -> 26887829 ns.  Its exposed
    # time passes through a C float: 26887829 lies in [2^24, 2^25) where floats step by 2, and
    # rounds (ties to even) to 26887828.
    layer = first(example, "grad_param_comm")
    assert layer.wg.time_ns == 26887829 and layer.wg_exposed_ns == 26887828 and layer.booked_wg == "DP"
    # Exposure below 2^24 ns is exact.
    assert first(example, "grad_gather").wg_exposed_ns == 13443914


def test_dp_ep_collectives(example):
    # moe_grad_norm1 wg ALLGATHER_DP_EP 19327352832 B (18 GiB): DP_EP group n = dp / ep = 24;
    # tp * ep = 32 > 8: node_count 24, 1 GPU per node, nics 8 / 8 = 1 -> busbw = 48.5 * 1.
    # Ratio 1 (no table lookup, so 18 and 36 GiB are fine).  18 / 48.5 * 1e9 = 371134020.6;
    # * 23/24 = 355670103.1 -> 355670103 ns.  Exposed: as a float32 (step 32 in [2^28, 2^29))
    # 355670103 / 32 = 11114690.7 -> 11114691 * 32 = 355670112 ns.
    norm1 = first(example, "moe_grad_norm1")
    assert (norm1.wg.group, norm1.wg.group_size) == ("DP_EP", 24)
    assert (norm1.wg.time_ns, norm1.wg_exposed_ns) == (355670103, 355670112)
    # moe_grad_norm2 REDUCESCATTER_DP_EP 36 GiB: 36 / 48.5 * 1e9 * 23/24 = 711340206.2 -> 711340206;
    # float32 step 64 in [2^29, 2^30): 711340206 / 64 = 11114690.7 -> 711340224 ns.
    norm2 = first(example, "moe_grad_norm2")
    assert (norm2.wg.time_ns, norm2.wg_exposed_ns, norm2.booked_wg) == (711340206, 711340224, "DP_EP")
    assert not any("16 GiB" in w for w in example.warnings)


def test_small_messages_use_the_latency_table(example):
    # cross_entropy1 fwd ALLREDUCE 16384 B: 1 < size < 1 MiB -> fixed latency by group size 2: 10 us.
    assert first(example, "cross_entropy1").fwd.time_ns == 10_000
    assert first(example, "cross_entropy1").fwd.how == "latency"
    # 1.5 MiB is not small: mlp_moelayer fwd ALLGATHER 1572864 B in TP; below the first ratio row
    # (16 MiB) the first row counts: .45 / .81 = .5555556; * 360 = 200 GiB/s.
    # 1572864 / G = 0.00146484375; / 200 * 1e9 = 7324.2; / 2 = 3662.1 -> 3662 ns.
    layer = first(example, "mlp_moelayer", "ALLGATHER")
    assert (layer.fwd.time_ns, layer.fwd.how) == (3662, "bandwidth")


def test_forward_4kib_floor(example):
    # optimizer1 fwd ALLREDUCE of 4 bytes counts as 4096 B: latency 10 us (n = 2), and the
    # report's algbw uses the 4096 B: 4096 / 10 us = 4.096e8 B/s / G = 0.38147 GiB/s -> "0.38";
    # busbw = algbw * 2 * 1 / 2 = 0.38.
    layer = first(example, "optimizer1")
    assert (layer.fwd.size_bytes, layer.fwd.time_ns) == (4096, 10_000)
    assert layer.fwd.algbw_gibps == pytest.approx(4096 / 10e-6 / 2**30, rel=1e-6)
    # The floor is forward-only: 1 byte in the fwd column -> 4096 B -> 10 us; in the ig column
    # 1 B is not "> 1" so it takes the bandwidth formula: 1 / G / 360 * 1e9 * 2 * 1/2 = 0.0026 -> 0 ns.
    m = model([record(fwd=("ALLREDUCE", 1), ig=("ALLREDUCE", 1))])
    assert m.cost("fwd", "ALLREDUCE", 1).time_ns == 10_000
    assert m.cost("ig", "ALLREDUCE", 1).time_ns == 0


def test_report_bandwidth_columns(example):
    # attention_column fwd: algbw = 0.046875 GiB / 87890 ns = 533.3371 GiB/s; busbw = algbw / 2.
    layer = first(example, "attention_column")
    assert layer.fwd.algbw_gibps == pytest.approx(0.046875 / 87890e-9, rel=1e-6)
    assert layer.fwd.busbw_gibps == pytest.approx(0.046875 / 87890e-9 / 2, rel=1e-6)
    # time 0: size 0 -> NaN (SimAI prints -nan); for NONE busbw is 0.
    assert math.isnan(layer.wg.algbw_gibps) and layer.wg.busbw_gibps == 0.0
    # ig REDUCESCATTER of 0 B: algbw NaN and busbw NaN * F = NaN.
    assert math.isnan(layer.ig.algbw_gibps) and math.isnan(layer.ig.busbw_gibps)


# ---- bubble, PP and the totals line ---------------------------------------------------------

# Hand-derived per-record costs (ns) from the tests above, per distinct record of the example:
# (count, name, fwd comm, ig comm, wg comm, wg exposed, fwd+ig+wg compute, in bubble?)
KINDS = [
    (192, "attention_column", 87890, 0, 0, 0, 1750840 + 875420 + 875420, True),
    (192, "attention_row", 87890, 87890, 0, 0, 1750840 + 875420 + 875420, True),
    (3, "cross_entropy", 10000, 0, 0, 0, 0, True),
    (1, "embedding_grads", 0, 130208, 0, 0, 3, True),
    (1, "embedding_layer (wg 15091072)", 130208, 0, 0, 0, 622731 + 1 + 15091072, False),
    (23, "embedding_layer", 130208, 0, 0, 0, 622731 + 1 + 875420, False),
    (24, "final_column", 87890, 0, 0, 0, 3 * 875420, True),
    (1, "grad_gather", 0, 0, 13443914, 13443914, 3, True),
    (1, "grad_param_comm", 0, 0, 26887829, 26887828, 3, True),
    (1, "grad_param_compute", 0, 0, 0, 0, 1 + 29700224 + 1, True),
    (192, "mlp AG 192M / RS", 297095, 297095, 0, 0, 3, True),
    (384, "mlp ALLTOALL (TP)", 53453, 53453, 0, 0, 3, True),
    (384, "mlp ALLTOALL_EP", 1592202, 1592202, 0, 0, 3, True),
    (192, "mlp RS 192M / AG", 297095, 297095, 0, 0, 3, True),
    (192, "mlp AG 1.5M", 3662, 3662, 0, 0, 2 * 7956367 + 1, True),
    (1, "moe_grad_norm1", 0, 0, 355670103, 355670112, 3, True),
    (1, "moe_grad_norm2", 0, 0, 711340206, 711340224, 3, True),
    (4, "optimizer", 10000, 0, 0, 0, 0, True),
]


def test_hand_table_covers_the_example():
    # The counts above are the file's (sort | uniq -c of its records): 1789 records.
    records = SimAIWorkload.read(EXAMPLES / "simai_workload_analytical.txt").records
    assert sum(k[0] for k in KINDS) == len(records) == 1789
    assert len({r.fields() for r in records}) == len(KINDS) + 2 + 3  # cross_entropy1-3, optimizer1-4 differ by name


def test_totals_line(example):
    t = example.totals
    # Exposed DP = grad_gather + grad_param_comm exposed = 13443914 + 26887828 ns = 40331.742 us.
    assert t.dp_exposed_us == pytest.approx(40331.742, abs=1e-6)
    # Exposed DP_EP = 355670112 + 711340224 = 1067010336 ns.
    assert t.dp_ep_exposed_us == pytest.approx(1067010.336, abs=1e-6)
    # Exposed TP = sum of fwd+ig of every non-EP record:
    # 192*87890 + 192*175780 + 3*10000 + 130208 + 24*130208 + 24*87890 + 192*594190 + 384*106906
    # + 192*594190 + 192*7324 + 4*10000 = 326686272 ns.
    assert sum(k[0] * (k[2] + k[3]) for k in KINDS if "EP" not in k[1]) == 326_686_272
    assert t.tp_exposed_us == pytest.approx(326686.272, abs=1e-6)
    # Exposed EP = 384 * 2 * 1592202 = 1222811136 ns.
    assert t.ep_exposed_us == pytest.approx(1222811.136, abs=1e-6)
    # Compute = 192*3501680 * 2 + 15713804 + 23*1498152 + 24*2626260 + 29700226 + 192*15912735 + small
    # ones = 4542795477 ns.
    assert sum(k[0] * k[6] for k in KINDS) == 4_542_795_477
    assert t.compute_us == pytest.approx(4542795.477, abs=1e-6)
    # total exposed = DP + DP_EP + TP + EP = 2656839.486 us.
    assert t.exposed_comm_us == pytest.approx(40331.742 + 1067010.336 + 326686.272 + 1222811.136, abs=1e-6)
    # Bubble accumulator: fwd comm + fwd compute + wg compute + ig compute + ig comm, except
    # embedding_layer: 6038996593 ns.  bubble = 6038996.593 * (12 - 1) / (24 * 8) = 345984.1798 us.
    accumulator_ns = sum(k[0] * (k[2] + k[3] + k[6]) for k in KINDS if k[7])
    assert accumulator_ns == 6_038_996_593
    assert example.setup["bubble_accumulator_us"] == pytest.approx(6038996.593, abs=1e-6)
    assert t.bubble_us == pytest.approx(6038996.593 * 11 / 192, abs=1e-6)
    # PP: SimAI's default pp_o = 1 keeps none of it exposed.
    assert t.pp_exposed_us == 0
    # Total = 4542795.477 + 2656839.486 + 345984.1798 + 0 = 7545619.1428 us.
    assert t.total_us == pytest.approx(7545619.142807, abs=1e-5)


def test_end_to_end_text(example):
    from simulator.report import end_to_end_text
    lines = end_to_end_text(example, "run1-").splitlines()
    assert lines[0] == ("File name, Expose DP comm, Expose DP_EP comm, Expose TP comm, Expose_EP_comm, Expose_PP_comm, "
                        "bubble time, total comp, total exposed comm, Total time")
    # Each value / 7545619.1428 * 100: 40331.742 -> 0.53%, 1067010.336 -> 14.14%, 326686.272 -> 4.33%,
    # 1222811.136 -> 16.21%, 345984.18 -> 4.59%, 4542795.477 -> 60.20%, 2656839.486 -> 35.21%.
    assert lines[1] == ("run1-, 40332 (0.53%), 1067010 (14.14%), 326686 (4.33%), 1222811 (16.21%), 0 (0.00%), "
                        "345984 (4.59%), 4542795 (60.20%), 2656839 (35.21%), 7545619")
    assert lines[2].startswith("layer_name,Analytical_test,fwd compute,wg compute,ig compute,")
    assert len(lines) == 3 + 1789
    # attention_column: computes 1750840 / 875420 / 875420 ns -> 1751, 875, 875 us; fwd comm 87890 ns
    # -> 88 us at 533.34 / 266.67 GiB/s; ig REDUCESCATTER of 0 B -> 0 us, -nan, -nan.
    assert lines[3 + 7] == ("attention_column,Analytical_test,1751,875,875,88,0,0,88,533.34,266.67,0,-nan,0.00,"
                            "0,-nan,-nan")
    # optimizer1: fwd 10 us at 0.38 GiB/s (the 4 KiB floor).
    assert lines[-4] == "optimizer1,Analytical_test,0,0,0,10,0,0,10,0.38,0.38,0,-nan,0.00,0,-nan,0.00"


def test_pp_exposed_term():
    path = EXAMPLES / "simai_workload_analytical.txt"
    # pp_comm 50331648 B = 0.046875 GiB; 2 * vpp * ga = 2 * 8 * 24 = 384.
    # With pp_o 0 and the default PP busbw (the DP group's inter-node busbw, 194 GiB/s):
    # 384 * 0.046875 / 194 * 1e9 / 1000 = 92783.5 -> 92783 us, all exposed.
    opts = dict(gpus=9216, gpus_per_server=8, nics_per_server=8, nvlink_bw=360, nic_busbw=48.5)
    assert simulate(path, SimAIOptions(pp_overlap=0.0, **opts)).totals.pp_exposed_us == 92783
    # pp_o 0.5: 92783 * 0.5 = 46391.5 -> 46391 us.  (SimAI 1.7 divides by pp_o instead:
    # 384 * 0.046875 / 0.5 * 1e6 * 0.5 = 18,000,000 us.)
    assert simulate(path, SimAIOptions(pp_overlap=0.5, **opts)).totals.pp_exposed_us == 46391
    # --pp_busbw 100: 384 * 0.046875 / 100 * 1e6 = 180000 us.
    result = simulate(path, SimAIOptions(pp_overlap=0.0, pp_busbw=100.0, **opts))
    assert result.totals.pp_exposed_us == 180000
    assert result.totals.total_us == pytest.approx(7545619.142807 + 180000, abs=1e-5)


def test_overlap_ratios_multiply_in_float32():
    path = EXAMPLES / "simai_workload_analytical.txt"
    opts = dict(gpus=9216, gpus_per_server=8, nics_per_server=8, nvlink_bw=360, nic_busbw=48.5)
    result = simulate(path, SimAIOptions(dp_overlap=0.3, tp_overlap=0.5, ep_overlap=0.25, **opts))
    # dp_o 0.3: 1 - float(0.3) = 0.69999999 (float); 13443914 * 0.69999999 = 9410739.6, which as a
    # float32 (step 1 in [2^23, 2^24)) is 9410740 -> 9410740 ns (exact arithmetic would give 9410739).
    assert first(result, "grad_gather").wg_exposed_ns == 9410740
    # tp_o 0.5: 87890 * 0.5 = 43945 ns; the total comm column keeps 87890.
    layer = first(result, "attention_column")
    assert (layer.fwd_exposed_ns, layer.fwd.time_ns) == (43945, 87890)
    # ep_o 0.25: 1592202 * 0.75 = 1194151.5 -> 1194151 ns.
    assert first(result, "mlp_moelayer", "ALLTOALL_EP").fwd_exposed_ns == 1194151
    # The bubble uses the unscaled times: same as without overlap.
    assert result.totals.bubble_us == pytest.approx(6038996.593 * 11 / 192, abs=1e-6)


# ---- the ratio tables and group shapes, on synthetic workloads -------------------------------

def test_tp_across_nodes_uses_the_nvlink_table():
    # tp 16 over 8-GPU servers: node_count 2, 8 GPUs per node, nics 8: nic * nics = 388 > nv 200, so
    # busbw = min(200 * 8 / 7, 388) = 228.5714, and it is the NVLink value: "is NVLink" -> nvlink
    # table, node count 16 / 8 = 2: 48 MiB between .68 and .74 -> .71, / .88 = .8068182.
    # ratio * busbw = 184.4156 GiB/s (float32: 184.41559).  0.046875 / 184.41559 * 1e9 * 15/16
    # = 238294.9993 -> 238294 ns.  (In exact arithmetic 238295.004: SimAI's float32 ratio * busbw
    # costs one ns here, and we reproduce it.)
    m = model([record(fwd=("ALLGATHER", 50331648))], tp=16, nv=200.0)
    cost = m.cost("fwd", "ALLGATHER", 50331648)
    assert cost.ratio == pytest.approx(0.71 / 0.88, rel=1e-7)
    assert cost.time_ns == 238294


def test_node_count_nine_uses_the_multi_column():
    # tp 72 over 8-GPU servers: node_count 9.  388 > 360 and 360 * 8 / 7 = 411.4 >= 388 -> busbw 388
    # (nic table).  SimAI codes "Multi" as 9, so node count 9 reads the Multi column: 16 MiB -> .86
    # / .96 = .8958333; * 388 = 347.5833.  0.015625 / 347.5833 * 1e9 * 71/72 = 44328.9 -> 44328 ns.
    m = model([record(fwd=("ALLGATHER", 16777216))], tp=72)
    assert m.cost("fwd", "ALLGATHER", 16777216).time_ns == 44328
    # tp 80: node_count 10 is no column: the 16 column, .05 / .96 = .0520833; * 388 = 20.20833.
    # 0.015625 / 20.20833 * 1e9 * 79/80 = 763530.9 -> 763530 ns.
    m = model([record(fwd=("ALLGATHER", 16777216))], tp=80)
    assert m.cost("fwd", "ALLGATHER", 16777216).time_ns == 763530


def test_ep_with_tp_filling_a_server_uses_the_multi_column():
    # tp 8, ep 2 on 8-GPU servers: tp * n = 16 > 8 -> node_count 2, gpus_per_node max(8/8, 1) = 1,
    # nics 8 / 8 = 1: all_to_all across nodes 48.5 * 1 / 1 * 1 / (1 * 1) = 48.5 GiB/s.  tp >= 8 ->
    # the ata Multi column: 32 MiB -> .92 / .96 = .9583333; * 48.5 = 46.47917.
    # 0.03125 / 46.47917 * 1e9 / 2 = 336172.1 -> 336172 ns.
    m = model([record(fwd=("ALLTOALL_EP", 33554432))], tp=8, ep=2, gpus=16)
    assert m.cost("fwd", "ALLTOALL_EP", 33554432).time_ns == 336172


def test_ratio_lookup_above_16_gib_is_clamped_with_a_warning():
    # 32 GiB TP all-gather: clamped to the 16 GiB row -> ratio .81 / .81 = 1.
    # 32 / 360 * 1e9 / 2 = 44444444.4 -> 44444444 ns.
    m = model([record(fwd=("ALLGATHER", 2 * 17179869184))])
    result = m.run()
    assert result.layers[0].fwd.time_ns == 44444444
    assert any("above the 16 GiB ratio table" in w for w in result.warnings)


def test_fractional_nics_instead_of_a_negative_busbw():
    # 1 NIC per 8-GPU server, tp 2: SimAI gives the DP group 1 / 2 = 0 NICs (integer division) and a
    # busbw of -1.  We use 0.5 NIC: busbw = min(360, 48.5 * 0.5) = 24.25; a 1 GiB DP all-gather over
    # 2 ranks: 1 / 24.25 * 1e9 / 2 = 20618556.7 -> 20618556 ns, with a warning.
    m = model([record(wg=("ALLGATHER", 2**30))], nps=1)
    result = m.run()
    assert result.layers[0].wg.time_ns == 20618556
    assert any("1//2 = 0" in w for w in result.warnings)


def test_group_size_one():
    # tp 1: a TP all-reduce costs 0 (SimAI: NaN), with a warning.
    m = model([record(fwd=("ALLREDUCE", 16777216))], tp=1)
    result = m.run()
    assert result.layers[0].fwd.time_ns == 0 and result.layers[0].fwd.how == "group-size-1"
    assert any("tp is 1" in w for w in result.warnings)
    # tp 6, ep 2 on 8-GPU servers: SimAI models the EP group as one node of one GPU and divides by 0.
    m = model([record(fwd=("ALLTOALL_EP", 2**21))], tp=6, ep=2, gpus=24)  # whole 8-GPU servers (dp 4)
    with pytest.raises(ConfigError, match="one node with one GPU"):
        m.run()


def test_record_times_and_sizes_pass_through_a_c_float():
    # SimAI multiplies each record's compute times and sizes by its float compute/comm scale (1.0),
    # so values above 2^24 become float32: 16777217 ns (between 2^24 and 2^24 + 2, a tie) rounds to
    # even, 16777216; 33554435 B (floats step by 4 in [2^25, 2^26)) rounds to 33554436.
    result = model([record(fwd=("ALLREDUCE", 33554435), compute=(16777217, 5, 7))]).run()
    layer = result.layers[0]
    assert (layer.fwd_compute_ns, layer.ig_compute_ns, layer.wg_compute_ns) == (16777216, 5, 7)
    assert layer.fwd.size_bytes == 33554436
    # TP all-reduce of 33554436 B over 2 ranks at 360 GiB/s: 33554436 / G / 360 * 1e9 = 86805.566 -> 86805 ns.
    assert layer.fwd.time_ns == 86805


def test_pp_comm_with_pp_one_still_counts():
    # SimAI adds 2 * vpp * ga * pp_comm / X whenever pp_comm is set, pp 1 included (and warns).
    # vpp = ga = 1, pp_comm = 2^30 B at --pp_busbw 100 GiB/s: 2 * 1 / 100 * 1e6 = 20000 us.
    header = SimAIHeader.transformer(tp=2, ep=1, pp=1, vpp=1, ga=1, all_gpus=4, pp_comm=2**30)
    options = SimAIOptions(gpus_per_server=8, nics_per_server=8, pp_overlap=0.0, pp_busbw=100.0)
    result = SimAIModel(SimAIWorkload(header, [record()]), options).run()
    assert result.totals.pp_exposed_us == 20000
    assert any("pp_comm is 1073741824 with pp 1" in w for w in result.warnings)


def test_token_classification_as_simai_parses():
    assert classify("ALLREDUCE", "fwd") == ("all_reduce", "TP")
    assert classify("ALLREDUCE", "wg") == ("all_reduce", "DP")
    assert classify("ALLGATHER_EP", "wg") == ("all_gather", "EP")
    assert classify("REDUCESCATTER_DP_EP", "ig") == ("reduce_scatter", "DP_EP")
    # Prefix order ALLREDUCE first: ALLREDUCEALLTOALL is an all-reduce; its rest is no known suffix.
    assert classify("ALLREDUCEALLTOALL", "fwd") == ("all_reduce", "OTHER")
    assert classify("ALLGATHER_TP", "fwd") == ("all_gather", "OTHER")
    assert classify("BROADCAST", "fwd") == (None, "")
    m = model([record()])
    # An unknown suffix costs 0 at >= 1 MiB; small messages still take the latency (n = tp = 2).
    assert m.cost("fwd", "ALLREDUCEALLTOALL", 16777216).time_ns == 0
    assert m.cost("fwd", "ALLGATHER_TP", 16384).time_ns == 10_000
    assert m.cost("fwd", "BROADCAST", 16384).time_ns == 0


def test_wg_ep_and_fwd_dp_ep_group_sizes():
    # _EP in the wg column is the EP group with n = DP size; _DP_EP in a fwd column has n = TP size.
    # tp 4 on 8 GPUs: dp = 2.  So the fwd ALLGATHER_DP_EP has n = 4, the wg ALLTOALL_EP n = 2.
    m = model([record(fwd=("ALLGATHER_DP_EP", 2**24), wg=("ALLTOALL_EP", 2**24))], tp=4, ep=2, gpus=8)
    assert m.cost("fwd", "ALLGATHER_DP_EP", 2**24).group_size == 4
    assert m.cost("wg", "ALLTOALL_EP", 2**24).group_size == 2


def test_missing_inputs_are_named():
    with pytest.raises(ConfigError, match="-g_p_s/--gpus_per_server is required"):
        model([record()], gps=None)
    with pytest.raises(ConfigError, match="-n_p_s/--nics_per_server is required"):
        model([record()], nps=None)
    with pytest.raises(ConfigError, match="not a multiple of tp\\*pp = 2\\*2 = 4"):
        model([record()], pp=2, gpus=6)
    workload = SimAIWorkload(SimAIHeader(tp=2, pp=1, all_gpus=4), [record(fwd=("ALLTOALL_EP", 2**24))], path="w.txt")
    with pytest.raises(FormatError, match="missing header keys 'vpp', 'ga'"):
        SimAIModel(workload, SimAIOptions(gpus_per_server=8, nics_per_server=8))
    workload.header.vpp = workload.header.ga = 1
    with pytest.raises(FormatError, match="missing header key 'ep'"):
        SimAIModel(workload, SimAIOptions(gpus_per_server=8, nics_per_server=8))
    data = SimAIWorkload(SimAIHeader(policy="DATA"), [record()], path="w.txt")
    with pytest.raises(FormatError, match="only runs HYBRID_TRANSFORMER"):
        SimAIModel(data, SimAIOptions(gpus_per_server=8, nics_per_server=8))


def test_default_bandwidths_by_type():
    # Neither -nv nor -g_type: A100, 240 GiB/s; H100: 20.6 * 18 = 370.8 (as a float); cx6: 23.5.
    assert SimAIOptions().nvlink_gibps == 240.0
    assert SimAIOptions(gpu_type="h100").nvlink_gibps == pytest.approx(370.8, rel=1e-7)
    assert SimAIOptions(nvlink_bw=0, gpu_type="H800").nvlink_gibps == pytest.approx(164.8, rel=1e-7)
    assert SimAIOptions(nic_type="CX6").nic_gibps == 23.5 and SimAIOptions().nic_gibps == 48.5
    with pytest.raises(ConfigError, match="unknown GPU type"):
        SimAIOptions(gpu_type="B200")


def test_pandas_tables(example):
    layers = example.layer_table()
    assert len(layers) == 1789 and "fwd_compute_us" in layers.columns and "wg_exposed_us" in layers.columns
    assert layers.loc[7, "fwd_comm_us"] == 87.890
    summary = example.summary_table()
    assert list(summary["term"])[-1] == "Total time"
    assert summary["time_us"].iloc[-1] == pytest.approx(7545619.142807, abs=1e-5)

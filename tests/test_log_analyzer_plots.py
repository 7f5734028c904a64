"""log_analyzer.plots: every plot renders from small logs, workloads and simulation results made here, as
a valid PNG and a well-formed SVG; the numbers drawn (series means, timeline slots) are checked by hand.

The small log (``small_log``) used here and by the report tests, times in ms:

    iteration 0 (init): all_reduce dp 8 ranks 1 MiB 5 ms;                               epoch_end 6
    iteration 1: all_reduce 1 ms, GEMM 2 ms, all_reduce 2 ms, isend + irecv 64 KiB as one p2p batch
                 (4 ms logged on both rows), all_reduce 3 ms;                            epoch_end 14
    iteration 2: all_gather tp 2 ranks 4 MiB 0.5 ms, GEMM 2 ms, isend + irecv batch 4 ms; epoch_end 10
"""

from __future__ import annotations

import io
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PIL import Image

from log_analyzer import Log, LogWriter, SimResult, Workload, plots, write_detail
from log_analyzer.log import detail_path
from tests.conftest import EXAMPLES
from utils.units import busbw
from utils.workload import CommGroup, CommType, WorkItem

MIB = 1 << 20
AR = WorkItem(CommType.all_reduce, CommGroup.dp_group, 8, MIB, "step.grad")
AG = WorkItem(CommType.all_gather, CommGroup.tp_group, 2, 4 * MIB, "forward.x")
SEND = WorkItem(CommType.isend, CommGroup.pp_group, 2, 64 * 1024, "forward_step", additional="send_next")
RECV = WorkItem(CommType.irecv, CommGroup.pp_group, 2, 64 * 1024, "forward_step", additional="recv_prev")
GEMM = WorkItem(CommType.computation, stage="forward.linear", shapes=((64, 1, 256), (256, 384)))
EPOCH = WorkItem(CommType.epoch_end)

# (item, elapsed ms, p2p batch) in log order; epoch_end rows carry the iteration's wall time
SMALL_LOG = [
    (AR, 5.0, None), (EPOCH, 6.0, None),
    (AR, 1.0, None), (GEMM, 2.0, None), (AR, 2.0, None), (SEND, 4.0, 7), (RECV, 4.0, 7), (AR, 3.0, None), (EPOCH, 14.0, None),
    (AG, 0.5, None), (GEMM, 2.0, None), (SEND, 4.0, 8), (RECV, 4.0, 8), (EPOCH, 10.0, None),
]


def write_small_log(path, rows=SMALL_LOG, detail: bool = True, scale: float = 1.0) -> str:
    """Write a replay log (and its detail CSV: slowest rank 3 taking 0.5 ms more, straggler rank 5, the p2p
    batches) of ``rows``; every time multiplied by ``scale``."""
    details = []
    iteration = 0
    with LogWriter(path) as log:
        for row, (item, ms, batch) in enumerate(rows):
            ms *= scale
            if item.is_epoch_end:
                log.write_epoch_end(ms)
                details.append({"row": row, "iteration": iteration, "comm_type": "epoch_end", "elapsed_ms": ms,
                                "max_elapsed_ms": ms + 1.0, "slowest_rank": 3})
                iteration += 1
                continue
            if item.is_computation:
                log.write(item, ms)
            else:
                algbw = item.msg_size / (ms * 1e-3) / 1e9
                log.write(item, ms, algbw, busbw(item.comm_type, item.msg_size, ms * 1e-3, item.comm_group_size))
            details.append({"row": row, "iteration": iteration, "item_index": row, "comm_type": item.comm_type.value,
                            "elapsed_ms": ms, "max_elapsed_ms": ms + 0.5, "slowest_rank": 3, "min_elapsed_ms": ms,
                            "last_arrival_rank": 5, "ranks_timed": 8, "emulated": False, "batch": batch})
    if detail:
        write_detail(detail_path(path), details)
    return str(path)


@pytest.fixture
def small_log(tmp_path) -> str:
    return write_small_log(tmp_path / "small_log.csv")


def small_workload(path) -> str:
    """init: one all-reduce; two iterations of three all-reduces (dp, 8 ranks, 1 MiB), one all-gather (tp, 2
    ranks, 4 MiB) and a GEMM."""
    items = [AR, EPOCH] + [AR, AR, AR, AG, GEMM, EPOCH] * 2
    Workload(items=list(items)).dump(path)
    return str(path)


END_TO_END = """File name, Expose DP comm, Expose DP_EP comm, Expose TP comm, Expose_EP_comm, Expose_PP_comm, bubble time, \
total comp, total exposed comm, Total time
run-, 100 (10.00%), 0 (0.00%), 200 (20.00%), 0 (0.00%), 50 (5.00%), 150 (15.00%), 500 (50.00%), 350 (35.00%), 1000
layer_name,Analytical_test,fwd compute,wg compute,ig compute,fwd exposed comm,wg exposed comm,ig exposed comm,\
fwd total comm,algbw,busbw,wg total comm,algbw,busbw,ig total comm,algbw,busbw
attention,Analytical_test,100,50,50,40,0,60,40,10.00,15.00,80,20.00,30.00,60,-nan,0.00
mlp,Analytical_test,100,100,100,60,100,40,60,inf,0.00,100,20.00,30.00,40,5.00,7.50
attention,Analytical_test,0,0,0,0,0,0,0,-nan,0.00,0,-nan,0.00,0,-nan,0.00
"""
"""A SimAI EndToEnd.csv with terms that add up (500 compute + 350 exposed + 150 bubble = 1000 us)."""


def end_to_end(path) -> str:
    path.write_text(END_TO_END)
    return str(path)


def is_png(data: bytes) -> tuple[int, int]:
    """The size of a valid PNG (signature checked, then decoded in full)."""
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    with Image.open(io.BytesIO(data)) as image:
        image.load()
        return image.size


def is_svg(data: bytes) -> ET.Element:
    root = ET.fromstring(data)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    return root


# ---- every plot renders ----------------------------------------------------------------------------


def test_every_log_plot_renders_as_png_and_svg(small_log):
    log = Log.load(small_log)
    figures = {
        "busbw": plots.busbw_vs_size(log, nominal={"NVLink": 360.0, "NIC": 50.0}),
        "iterations": plots.iteration_times(log), "timeline": plots.timeline(log), "share": plots.time_share(log),
        "compare": plots.compare_busbw(log, small_log, ("before", "after"), nominal=100.0),
    }
    for name, fig in figures.items():
        width, height = is_png(plots.render(fig, "png"))
        assert width == 1100 and height > 200, name   # 10 in at 110 dpi
        is_svg(plots.render(fig, "svg"))


def test_workload_and_simulation_plots_render(tmp_path):
    from simulator.api import simulate
    from simulator.options import SimAIOptions

    result = simulate(EXAMPLES / "simai_micro_allreduce.txt", SimAIOptions(gpus_per_server=8, nics_per_server=8))
    sources = [end_to_end(tmp_path / "run-EndToEnd.csv"), result, SimResult.from_result(result)]
    for sim in sources:
        is_png(plots.render(plots.sim_breakdown(sim)))
        is_svg(plots.render(plots.sim_layers(sim), "svg"))
    is_png(plots.render(plots.workload_sizes(small_workload(tmp_path / "w.csv"))))


def test_save_writes_by_extension(tmp_path, small_log):
    fig = plots.time_share(small_log)
    is_png((tmp_path / "a.png").read_bytes()) if plots.save(fig, tmp_path / "a.png") else None
    plots.save(fig, tmp_path / "sub" / "a.svg")
    is_svg((tmp_path / "sub" / "a.svg").read_bytes())
    with pytest.raises(ValueError, match="png or svg"):
        plots.save(fig, tmp_path / "a.jpg")
    assert not (tmp_path / "a.jpg").exists()


def test_plots_of_logs_without_data_say_so(tmp_path):
    # only an init block of computation: no bandwidth, one iteration, nothing measured
    only_init = write_small_log(tmp_path / "init_log.csv", [(GEMM, 1.0, None), (EPOCH, 2.0, None)], detail=False)
    # a crashed run: the first iteration never ended
    crashed = write_small_log(tmp_path / "crash_log.csv", SMALL_LOG[:5], detail=False)
    for path in (only_init, crashed):
        log = Log.load(path)
        for fig in (plots.busbw_vs_size(log), plots.iteration_times(log), plots.timeline(log), plots.time_share(log),
                    plots.timeline(log, iteration=9)):
            is_png(plots.render(fig))
    texts = [t.get_text() for t in plots.busbw_vs_size(only_init).axes[0].texts]
    assert texts == ["no timed communication with a size > 0 in this log"]


# ---- the numbers drawn -------------------------------------------------------------------------------


def test_busbw_series_are_means_per_size(small_log):
    series = {label: means for label, _, _, means in plots._busbw_series(plots.comm_items(Log.load(small_log)))}
    assert list(series) == ["all_reduce · dp_group (n=8)", "all_gather · tp_group (n=2)", "isend · pp_group (n=2)",
                            "irecv · pp_group (n=2)"]
    # 1 MiB in 1, 2, 3 ms over 8 ranks: algbw 1.048576 / t GB/s, busbw x 2*7/8 = 1.835008 / t;
    # mean over t = 1, 2, 3: 1.835008 * (1 + 1/2 + 1/3) / 3 = 1.835008 * 11/18 = 1.1213938
    means = series["all_reduce · dp_group (n=8)"]
    assert list(means["msg_size"]) == [MIB] and math.isclose(means["busbw_gbps"][0], 1.835008 * 11 / 18)
    # 4 MiB all-gather over 2 ranks in 0.5 ms: 8.388608 GB/s x 1/2
    assert math.isclose(series["all_gather · tp_group (n=2)"]["busbw_gbps"][0], 4.194304)


def test_timeline_places_a_p2p_batch_side_by_side(small_log):
    log = Log.load(small_log)
    assert plots.default_iteration(log) == 2
    rows = log.items[log.items["iteration"] == 1]
    elapsed = rows["elapsed_ms"].to_numpy()
    start, offset, height = plots._timeline_slots(rows, elapsed)
    # AR 0-1, GEMM 1-3, AR 3-5, isend and irecv together 5-9 (half a lane each), AR 9-12
    assert list(start) == [0.0, 1.0, 3.0, 5.0, 5.0, 9.0]
    assert list(height) == [0.7, 0.7, 0.7, 0.35, 0.35, 0.7]
    assert np.allclose(offset, [-0.0, 0.0, 0.0, -0.175, 0.175, 0.0])
    fig = plots.timeline(log, iteration=1)
    assert fig.axes[0].get_xlim() == (0.0, 12.0)
    assert "12 ms logged, 14 ms wall, 6 operations" in fig.axes[0].get_title()
    # without the detail file the batch is found in the log as the replay forms it (isend then irecv of one
    # stage, two directions, the batch's 4 ms on both rows): side by side all the same
    no_detail = Log.load(write_small_log(small_log.replace("small_log", "plain_log"), detail=False))
    rows = no_detail.items[no_detail.items["iteration"] == 1]
    start, _, _ = plots._timeline_slots(rows, rows["elapsed_ms"].to_numpy())
    assert list(start) == [0.0, 1.0, 3.0, 5.0, 5.0, 9.0]
    # rows that cannot be one batch (the irecv took 3 ms, not the isend's 4) run back to back
    apart = [row if row[0] is not RECV else (RECV, 3.0, None) for row in SMALL_LOG]
    rows = Log.load(write_small_log(small_log.replace("small_log", "apart_log"), apart, detail=False)).items
    rows = rows[rows["iteration"] == 1]
    start, _, _ = plots._timeline_slots(rows, rows["elapsed_ms"].to_numpy())
    assert list(start) == [0.0, 1.0, 3.0, 5.0, 9.0, 12.0]


def test_nominal_lines_and_log_scale(small_log):
    fig = plots.busbw_vs_size(small_log, nominal={"NVLink": 360.0})
    ax = fig.axes[0]
    # busbw from 0.016 to 4.2 GB/s and a 360 GB/s line: more than two decades, so a log y axis
    assert ax.get_yscale() == "log" and ax.get_xscale() == "log"
    assert any(line.get_label() == "NVLink: 360 GB/s" for line in ax.get_lines())
    assert [t.get_text() for t in ax.get_xticklabels()] == ["64 KiB", "128 KiB", "256 KiB", "512 KiB", "1 MiB", "2 MiB", "4 MiB"]


def test_sim_breakdown_bars_add_up_to_the_total(tmp_path):
    sim = SimResult.load(end_to_end(tmp_path / "run-EndToEnd.csv"))
    fig = plots.sim_breakdown(sim)
    widths = sum(patch.get_width() for patch in fig.axes[0].patches)
    assert math.isclose(widths, 1.0)      # 500 + 100 + 200 + 50 + 150 us = 1 ms
    assert fig.axes[0].get_title() == "simulation: iteration 1 ms"


# ---- issue 21: analysis defects and what AICB's visualizer had -----------------------------------------

def sweep_log(path) -> str:
    """A collective sweep (``--frame collective_test``) over 4 ranks: an init barrier, then 1 MiB all-reduces in
    1 and 3 ms and 2 MiB ones in 2 and 2 ms, one block per size (busbw = algbw x 2*3/4)."""
    ar = WorkItem(CommType.all_reduce, CommGroup.dp_group, 4, MIB, "test_step")
    ar2 = WorkItem(CommType.all_reduce, CommGroup.dp_group, 4, 2 * MIB, "test_step")
    barrier = WorkItem(CommType.barrier, CommGroup.all_nodes, 4, 0, "init.barrier")
    with LogWriter(path) as log:
        log.write(barrier, 0.5, 0.0, 0.0)
        log.write_epoch_end(1.0)
        for item, times in ((ar, (1.0, 3.0)), (ar2, (2.0, 2.0))):
            for ms in times:
                algbw = item.msg_size / (ms * 1e-3) / 1e9
                log.write(item, ms, algbw, algbw * 1.5)
            log.write_epoch_end(sum(times) + 0.5)
    return str(path)


def test_iterations_count_a_p2p_batch_once(small_log):
    # the isend and irecv of a batch both log its 4 ms: iteration 1 is AR 1 + 2 + 3 and the batch 4 = 10 ms of
    # communication (not 14), iteration 2 AG 0.5 + batch 4 = 4.5 (not 8.5); with the detail file and without it
    log = Log.load(small_log)
    assert list(log.iterations["comm_ms"]) == [5.0, 10.0, 4.5] and list(log.iterations["compute_ms"]) == [0.0, 2.0, 2.0]
    plain = Log.load(write_small_log(small_log.replace("small_log", "plain_log"), detail=False))
    assert list(plain.iterations["comm_ms"]) == [5.0, 10.0, 4.5]
    # every logged millisecond sits inside its iteration's wall time (14 and 10 ms)
    assert (log.iterations["comm_ms"] + log.iterations["compute_ms"] <= log.iterations["time_ms"]).all()


def test_one_iteration_is_drawn_whole(tmp_path):
    path = write_small_log(tmp_path / "one_log.csv", SMALL_LOG[:9], detail=False)   # init and iteration 1 (14 ms)
    fig = plots.iteration_times(path)
    top, bottom = fig.axes[:2]
    is_png(plots.render(fig))
    low, high = bottom.get_xlim()
    shown = [t for t in bottom.get_xticks() if low <= t <= high]
    assert shown == [1.0] and low <= 0.5 and high >= 1.5     # one whole iteration, labelled 1 (not 0.72 ... 1.28)
    assert [t.get_text() for t in bottom.get_xticklabels() if low <= t.get_position()[0] <= high] == ["1"]
    assert top.get_ylim()[1] >= 14.0 * 1.1   # the 14 ms point well inside the axes, not on their edge


def test_busbw_lines_stay_on_a_log_axis(tmp_path):
    # a 1 KiB all-reduce whose busbw was logged as 0 (AICB rounds tiny bandwidths to 0.00) beside 1 MiB ones at
    # 1 GB/s and a 360 GB/s reference: a log axis, on which 0 has no place
    small = WorkItem(CommType.all_reduce, CommGroup.dp_group, 8, 1024, "x")
    path = tmp_path / "z_log.csv"
    with LogWriter(path) as log:
        log.write(small, 0.5, 0.0, 0.0)
        log.write(AR, 1.0, 1.0, 1.0)
        log.write(AR, 2.0, 0.5, 0.5)
        log.write_epoch_end(4.0)
    for fig in (plots.busbw_vs_size(path, nominal={"NVLink": 360.0}),
                plots.compare_busbw(path, path, nominal={"NVLink": 360.0})):
        ax = fig.axes[0]
        low, high = ax.get_ylim()
        assert ax.get_yscale() == "log"
        for line in ax.get_lines():
            y = np.asarray(line.get_ydata(), dtype=float)
            assert ((y >= low) & (y <= high))[np.isfinite(y)].all(), (line.get_label(), y, (low, high))
    ax = plots.busbw_vs_size(path, nominal={"NVLink": 360.0}).axes[0]
    assert "1 operations at 0 not drawn (log axis)" in ax.get_ylabel()


def test_many_operations_are_drawn_as_a_sample(tmp_path, monkeypatch):
    monkeypatch.setattr(plots, "MAX_POINTS", 300)
    rows = [(AR, 1.0 + (i % 7) / 10, None) for i in range(1000)] + [(EPOCH, 2000.0, None)]
    fig = plots.busbw_vs_size(write_small_log(tmp_path / "big_log.csv", rows, detail=False))
    points = sum(len(c.get_offsets()) for c in fig.axes[0].collections)
    assert points <= 300 and "a sample of 300 of 1,000 operations" in fig.axes[0].get_title()


def test_every_figure_shows_in_a_notebook(small_log, tmp_path):
    # built without pyplot, a figure needs its own _repr_png_ for Jupyter to draw it (else: <Figure size ...>)
    figures = [plots.busbw_vs_size(small_log), plots.iteration_times(small_log), plots.timeline(small_log),
               plots.time_share(small_log), plots.type_share(small_log), plots.size_cdf(small_log),
               plots.workload_sizes(small_workload(tmp_path / "w.csv")),
               plots.sim_breakdown(end_to_end(tmp_path / "run-EndToEnd.csv"))]
    for fig in figures:
        is_png(fig._repr_png_())


def test_size_cdf_by_hand(tmp_path):
    # three 1 KiB all-reduces and one of 1 MiB: 75% of the operations are 1 KiB or less, but only
    # 3072 / (3072 + 1048576) = 0.292% of the bytes; the all-gather's one size holds 100% of both
    small = WorkItem(CommType.all_reduce, CommGroup.dp_group, 8, 1024, "x")
    rows = [(AR, 5.0, None), (EPOCH, 6.0, None), (small, 1.0, None), (small, 1.0, None), (small, 1.0, None),
            (AR, 2.0, None), (AG, 1.0, None), (EPOCH, 8.0, None)]
    fig = plots.size_cdf(write_small_log(tmp_path / "c_log.csv", rows, detail=False))
    top, bottom = fig.axes[:2]
    ops = {line.get_label(): line for line in top.get_lines()}
    assert list(ops) == ["all_reduce (4)", "all_gather (1)"]
    assert list(ops["all_reduce (4)"].get_xdata()) == [1024, 1024, MIB] and np.allclose(
        ops["all_reduce (4)"].get_ydata(), [0, 75, 100])
    assert np.allclose(bottom.get_lines()[0].get_ydata(), [0, 3072 / (3072 + MIB) * 100, 100])
    assert np.allclose(ops["all_gather (1)"].get_ydata(), [0, 100])
    # the workload of the same sizes per iteration gives the same lines
    workload = tmp_path / "c_workload.csv"
    Workload(items=[item for item, _, _ in rows]).dump(workload)
    again = plots.size_cdf(str(workload)).axes[0].get_lines()[0]
    assert np.allclose(again.get_ydata(), [0, 75, 100])


def test_type_share_by_hand(small_log):
    # measured iterations: operations AR 3, isend 2, irecv 2, AG 1 (of 8); bytes AR 3 MiB, isend and irecv
    # 2 x 64 KiB each, AG 4 MiB (7.25 MiB); logged time AR 6, GEMM 4, isend 4, irecv 4, AG 0.5 ms (18.5 ms: a
    # batch's 4 ms halved per row)
    fig = plots.type_share(small_log)
    ax = fig.axes[0]
    bars = {}
    for patch in ax.patches:
        bars.setdefault(round(patch.get_y() + patch.get_height() / 2), []).append(patch.get_width())
    assert np.allclose(bars[0], [3 / 8 * 100, 1 / 8 * 100, 2 / 8 * 100, 2 / 8 * 100])  # all_reduce, all_gather, isend, irecv
    total = 3 * MIB + 4 * MIB + 4 * 64 * 1024
    assert np.allclose(bars[1], [3 * MIB / total * 100, 4 * MIB / total * 100, 128 * 1024 / total * 100,
                                 128 * 1024 / total * 100])
    assert np.allclose(bars[2], [6 / 18.5 * 100, 0.5 / 18.5 * 100, 4 / 18.5 * 100, 4 / 18.5 * 100, 4 / 18.5 * 100])
    assert [t.get_text() for t in ax.get_yticklabels()] == ["operations\n(8)", "bytes\n(7.25 MiB)", "logged time\n(18.5 ms)"]


def test_a_sweep_is_labelled_by_size_not_iteration(tmp_path):
    fig = plots.iteration_times(sweep_log(tmp_path / "sweep_log.csv"))
    top, bottom = fig.axes[:2]
    labels = [t.get_label() for t in top.get_lines()] + [p.get_label() for p in top.patches]
    assert not any("mean" in label for label in labels)          # no jitter band: the steps differ by size
    assert bottom.get_xlabel() == "size step (message size)" and "size step" in top.get_title()
    assert [bottom.xaxis.get_major_formatter()(v, 0) for v in (1, 2)] == ["1 MiB", "2 MiB"]

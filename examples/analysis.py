# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---
# ruff: noqa: E402, B018
# (notebook cells import where they need to and end with the value the notebook shows)

# %% [markdown]
# # Where the time goes: replay logs, workloads and simulations
#
# This notebook loads the three files the toolkit produces and draws the plots of `log_analyzer`:
#
# - a **replay log** (`results/comm_logs/<name>_log.csv`, written by `torchrun ... aicb.py`): time, algbw and
#   busbw of every operation, iteration times, and the `_detail.csv` beside it when the run completed;
# - a **workload CSV** (`results/mocked_workload/<name>_workload.csv`): what a training iteration would send;
# - a **simulation result** (`<prefix>EndToEnd.csv` and our richer CSVs, written by `python -m simulator`).
#
# Set the three paths below to your files (or the environment variables `AICB_LOG`, `AICB_WORKLOAD`,
# `AICB_SIM`).  Left empty, the notebook makes small demo inputs first: a generated workload, a
# **synthetic** replay log of it (times from a simple latency + bandwidth model, not measured) and a
# simulation of the same job.  Bandwidths are GB/s = 10^9 B/s with nccl-tests' bus-bandwidth factors.
#
# `examples/analysis.py` holds the same code (jupytext percent format); the tests run it, so it keeps working.
# Every plot is a matplotlib figure that Jupyter draws when it ends a cell (no `%matplotlib inline` needed).

# %%
import os
import sys
from pathlib import Path

try:
    import log_analyzer  # noqa: F401
except ImportError:  # a clone without `pip install -e .`: the repository root is the folder above examples/
    sys.path.insert(0, str(Path.cwd().parent if Path.cwd().name == "examples" else Path.cwd()))

from log_analyzer import Log, SimResult, Workload, compare_logs, plots
from log_analyzer.report import build_report, write_report
from log_analyzer.summary import time_share, workload_frame, workload_table

LOG = os.environ.get("AICB_LOG", "")            # a *_log.csv of a replay
WORKLOAD = os.environ.get("AICB_WORKLOAD", "")  # an AICB workload CSV
SIM = os.environ.get("AICB_SIM", "")            # a simulator result: <prefix>EndToEnd.csv, simai_layers.csv or topo_*.csv
OUT = Path(os.environ.get("AICB_ANALYSIS_OUT", "results/analysis"))  # where the plots and the report go
NOMINAL_GBPS = {"NVLink": 360.0, "NIC": 50.0}   # reference lines on the bandwidth plot (H100 NVLink, 400G NIC)
OUT.mkdir(parents=True, exist_ok=True)

# %% [markdown]
# ## Demo inputs (only when no paths are given)
#
# A Megatron GPT job (tp 2, pp 2, 8 GPUs): its rank-0 workload, a synthetic replay log of it with a second
# "after" log whose inter-node bandwidth is doubled (for the comparison at the end), and a simulation of the
# job with the `topo` model on a derived two-tier fabric.

# %%
import random

from log_analyzer.log import LogWriter
from mocked_model.compute import estimator
from simulator.api import simulate
from simulator.options import TopoOptions
from simulator.report import write_results
from utils.cli import parse_job
from utils.units import busbw_factor
from workload_generator.entry import build_workload


def synthetic_log(workload, path, nvlink_gbps, nic_gbps, seed=0):
    """A replay log of ``workload`` with made-up times: 20 us + bytes / bandwidth (TP and PP over NVLink,
    the rest over the NIC), +-20% noise, 50 us per computation item."""
    rng = random.Random(seed)
    with LogWriter(path) as log:
        iteration_ms = 0.0
        for item in workload.items:
            if item.is_epoch_end:
                log.write_epoch_end(iteration_ms * 1.05)  # 5% of gaps between operations
                iteration_ms = 0.0
                continue
            if item.is_computation:
                elapsed = 0.05 * rng.uniform(0.9, 1.1)
                log.write(item, elapsed)
            else:
                fast = item.comm_group is not None and item.comm_group.value in ("tp_group", "pp_group")
                gbps = nvlink_gbps if fast else nic_gbps
                factor = busbw_factor(item.comm_type, item.comm_group_size or 1) or 1.0
                elapsed = (0.02 + item.msg_size * factor / (gbps * 1e9) * 1e3) * rng.uniform(0.8, 1.2)
                algbw = item.msg_size / (elapsed * 1e-3) / 1e9
                log.write(item, elapsed, algbw, algbw * busbw_factor(item.comm_type, item.comm_group_size or 1))
            iteration_ms += elapsed
    return str(path)


def make_demo_inputs(folder):
    folder = Path(folder)
    flags = ["--frame", "Megatron", "--model_name", "gpt_tiny", "--world_size", "8", "--tensor_model_parallel_size", "2",
             "--pipeline_model_parallel", "2", "--enable_sequence_parallel", "--num_layers", "4", "--seq_length", "512",
             "--global_batch", "8", "--epoch_num", "3", "--computation_enable"]
    job, _ = parse_job(flags, "demo", "")
    workload = build_workload(job)
    workload.dump(folder / "demo_workload.csv")
    synthetic_log(workload, folder / "demo_before_log.csv", nvlink_gbps=150.0, nic_gbps=20.0, seed=1)
    synthetic_log(workload, folder / "demo_after_log.csv", nvlink_gbps=150.0, nic_gbps=40.0, seed=2)
    # compute times of an H100 from the compute model (no GPU needed), communication over a derived fabric
    result = simulate(job, None, TopoOptions(gpus_per_server=4, gpu_type="H100", compute_time_ns=estimator("H100")))
    write_results(result, str(folder / "demo-"))
    return str(folder / "demo_before_log.csv"), str(folder / "demo_workload.csv"), str(folder / "demo-EndToEnd.csv")


if not (LOG and WORKLOAD and SIM):
    LOG, WORKLOAD, SIM = make_demo_inputs(OUT)
print(LOG, WORKLOAD, SIM, sep="\n")

# %% [markdown]
# ## The replay log
#
# `Log.load` gives typed pandas tables: `items` (one row per operation, `iteration` 0 is init),
# `iterations` (wall time per iteration in ms, logged comm and compute), and the per (type, group, size)
# summary of the measured iterations.

# %%
log = Log.load(LOG)
stats = log.iteration_stats()
print(f"{stats.count} measured iterations, mean {stats.mean_ms:.3f} ms, std {stats.std_ms:.3f} ms, p90 {stats.p90_ms:.3f} ms")
log.iterations

# %%
log.comm_summary()

# %%
time_share(log.measured, "comm_group")

# %% [markdown]
# Bus bandwidth against message size, one series per collective type and group, with the nominal link
# bandwidths as reference lines: small messages are latency-bound, large ones should approach the line.

# %%
fig = plots.busbw_vs_size(log, nominal=NOMINAL_GBPS)
plots.save(fig, OUT / "busbw_vs_size.png")
fig

# %%
fig = plots.iteration_times(log)
plots.save(fig, OUT / "iteration_times.svg")
fig

# %%
fig = plots.timeline(log)  # the last completed iteration; plots.timeline(log, iteration=2) for another
plots.save(fig, OUT / "timeline.png")
fig

# %%
fig = plots.time_share(log)
plots.save(fig, OUT / "time_share.png")
fig

# %% [markdown]
# The share of each operation type (operations, bytes, logged time) and the message sizes as cumulative
# distributions: how much of the traffic is small, latency-bound messages.

# %%
fig = plots.type_share(log)
plots.save(fig, OUT / "type_share.png")
fig

# %%
fig = plots.size_cdf(log)
plots.save(fig, OUT / "size_cdf.png")
fig

# %% [markdown]
# ## The workload: what would be sent

# %%
workload = Workload.load(WORKLOAD)
sends = workload_table(workload_frame(workload))
sends.sort_values("bytes_per_iteration", ascending=False).head(10)

# %%
fig = plots.workload_sizes(workload)
plots.save(fig, OUT / "workload_sizes.png")
fig

# %% [markdown]
# ## The simulation
#
# `SimResult.load` reads any result file and the others of the same prefix; `plots.sim_breakdown` also takes
# the object `simulator.api.simulate` returns.

# %%
sim = SimResult.load(SIM)
sim.summary_table()

# %%
fig = plots.sim_breakdown(sim)
plots.save(fig, OUT / "sim_breakdown.png")
fig

# %%
fig = plots.sim_layers(sim, top=12)
plots.save(fig, OUT / "sim_layers.png")
fig

# %% [markdown]
# ## A report and a comparison
#
# The same as `python -m log_analyzer report LOG --sim SIM -o report.html` and
# `python -m log_analyzer compare BEFORE AFTER`.

# %%
report = OUT / "report.html"
write_report(build_report(LOG, sim=SIM, nominal=NOMINAL_GBPS), report)
print(f"wrote {report}")

# %%
AFTER = os.environ.get("AICB_LOG_AFTER", str(Path(LOG).with_name("demo_after_log.csv")))
if Path(AFTER).exists():
    changes = compare_logs(log, AFTER)
    display_columns = ["comm_type", "comm_group", "msg_size", "time_mean_ms_a", "time_mean_ms_b", "time_change_pct",
                       "busbw_change_pct"]
    print(changes[display_columns].to_string(index=False))

"""SimAI 1.7's analytical model, reproduced to the nanosecond (``--model simai``).

Every rule below is docs/simai_analytical.md's; section names are cited where a rule is applied.  Where
SimAI 1.7 crashes or prints garbage we do something documented instead:

- a workload without tp/pp/vpp/ga (or ep when it uses EP groups) header keys: an error naming them;
- missing -g_p_s or -n_p_s: an error (SimAI divides by an uninitialised value);
- -g not a multiple of tp*pp: an error (SimAI truncates the DP size);
- a TP group of size 1: costs 0 with a warning (SimAI computes NaN);
- a ratio lookup above 16 GiB: clamped to the 16 GiB row with a warning (SimAI aborts);
- NICs per GPU group computed by integer division as 0 (e.g. 1 NIC per server shared by tp=2):
  SimAI gets a bandwidth of -1 and negative times; we use the fraction (0.5 NIC) and warn;
- an EP group SimAI models as 1 node x 1 GPU: an error (SimAI divides by a zero bandwidth);
- the PP exposed term divides by a PP busbw in GiB/s (``pp_busbw``, default the DP group's
  inter-node busbw) instead of SimAI 1.7's ``pp_o`` (a bug: 0 < pp_o < 1 gives absurd values).
  With SimAI's default pp_o = 1 the term is 0 either way.

Details of SimAI's arithmetic kept for exactness (all read from SimAI's source, not spelled out in
docs/simai_analytical.md): record compute times and sizes pass through a C ``float`` (SimAI multiplies
them by its float compute/comm scale of 1.0, which rounds values above 2^24 to float32);
bandwidths, ratios and ``ratio * busbw`` are C floats; the time formula's operations run in the
order ``size / 2^30 / (ratio * busbw) * 1e9 [* 2] * (n - 1) / n`` in double; the report's algbw and
busbw columns are C floats.  Checkpoint layers listed in the header change nothing (SimAI 1.7's
parser never marks a layer as starting a recompute, so its forward-in-backward pass never runs).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from operator import attrgetter

from simulator.cfloat import f32
from simulator.options import SimAIOptions
from simulator.repeat import RepeatedLayers, repeat_segments, repeat_sum
from simulator.result import CollectiveCost, LayerResult, SimulationResult, Totals
from simulator.simai import tables as simai_tables
from utils.errors import ConfigError, FormatError
from utils.progress import progress
from workload_generator.simai import SimAILayer, SimAIWorkload
from workload_generator.simai_tokens import classify

GIB = 1 << 30
SMALL_MESSAGE_BYTES = 1 << 20
"""Collectives with 1 < size < 1 MiB cost a fixed latency by group size (docs/simai_analytical.md,
"Time of one collective")."""
LATENCY_NS = {2: 10_000, 4: 12_000, 8: 15_000, 16: 66_000, 32: 135_000, 64: 200_000, 128: 320_000}
"""That latency in ns; any other group size (1, 24, 384, ...) costs 0."""
FORWARD_FLOOR_BYTES = 4096
"""Forward-pass sizes strictly between 0 and 4096 bytes count as 4096."""
BUBBLE_EXCLUDED = "embedding_layer"
"""The one layer name left out of the bubble accumulator."""

ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL = "all_reduce", "all_gather", "reduce_scatter", "all_to_all"


@dataclass(frozen=True)
class _Shape:
    """How SimAI sees a group: nodes, GPUs per node, NICs per node (docs/simai_analytical.md, the group table)."""

    nodes: int
    gpus_per_node: int
    nics_per_node: float


class SimAIModel:
    """SimAI 1.7's analytical model for one workload and one set of options.

    :meth:`run` returns the :class:`SimulationResult`; :meth:`cost` prices one comm column.
    Raises :class:`ConfigError` / :class:`FormatError` (both user errors) for inputs SimAI would
    crash on.
    """

    def __init__(self, workload: SimAIWorkload, options: SimAIOptions) -> None:
        self.workload = workload
        self.options = options
        self.warnings: list[str] = []
        self._warned: set[str] = set()
        self._costs: dict[tuple[str, str, int], CollectiveCost] = {}
        header = workload.header
        path = workload.path
        if not header.is_transformer:
            raise FormatError(path, f"SimAI's analytical mode only runs HYBRID_TRANSFORMER and "
                              f"HYBRID_TRANSFORMER_FWD_IN_BCKWD workloads, not {header.policy}", line=1, field="policy")
        self.tp, self.pp, self.vpp, self.ga = workload.require("tp", "pp", "vpp", "ga")
        if options.gpus_per_server is None:
            raise ConfigError("-g_p_s/--gpus_per_server is required (SimAI 1.7 crashes without it)")
        if options.nics_per_server is None and options.busbw_file is None:
            raise ConfigError("-n_p_s/--nics_per_server is required (SimAI 1.7 crashes without it; with -busbw FILE "
                              "the file's bandwidths stand in)")
        self.gps = options.gpus_per_server
        self.nps = options.nics_per_server
        gpus = options.gpus if options.gpus is not None else header.all_gpus
        if gpus is None:
            raise ConfigError(f"-g/--gpus is required: {path} has no all_gpus header key")
        if options.gpus is not None and header.all_gpus is not None and header.all_gpus != options.gpus:
            self._warn(f"-g {options.gpus} differs from the workload's all_gpus {header.all_gpus}; using -g as SimAI does")
        if gpus < 1 or gpus % (self.tp * self.pp):
            raise ConfigError(f"-g {gpus} GPUs is not a multiple of tp*pp = {self.tp}*{self.pp} = {self.tp * self.pp} "
                              f"from {path}, so the DP size g/(tp*pp) is not an integer")
        if gpus > self.gps and gpus % self.gps:  # fewer GPUs than a server is part of one; more must fill servers
            raise ConfigError(f"-g {gpus} GPUs is not a multiple of -g_p_s {self.gps} GPUs per server (a job of more "
                              "than one server fills whole servers)")
        self.gpus = gpus
        self.dp = gpus // (self.tp * self.pp)
        self.nv = options.nvlink_gibps
        self.nic = options.nic_gibps
        self.busbw_file = options.busbw_file
        if isinstance(self.busbw_file, (str, os.PathLike)):  # -busbw FILE: read here, where it is used
            from simulator.simai.busbw_file import BusbwFile

            self.busbw_file = BusbwFile.read(self.busbw_file)
        if self.busbw_file is not None:
            for note in (*self.busbw_file.notes, *self.busbw_file.differences_from_pre17()):
                self._warn(note)
        groups = self._groups_used()
        self.ep = self._resolve_ep(groups)
        self.pp_comm = self._resolve_pp_comm()
        if self.tp == 1 and "TP" in groups:
            self._warn("tp is 1: TP collectives cost 0 (SimAI 1.7 computes NaN for a group of one)")
        # (1 - overlap) as SimAI holds it: a float.  docs/simai_analytical.md, "Exposure, bubble, totals".
        self.dp_keep = f32(1.0 - f32(options.dp_overlap))
        self.tp_keep = f32(1.0 - f32(options.tp_overlap))
        self.ep_keep = f32(1.0 - f32(options.ep_overlap))
        self.pp_keep = f32(1.0 - f32(options.pp_overlap))

    # ---- set-up ------------------------------------------------------------------------------

    def _warn(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            self.warnings.append(message)

    def _groups_used(self) -> set[str]:
        """The groups the workload's comm columns run in (distinct tokens only: files are repetitive)."""
        records = self.workload.records
        tokens = {("fwd", t) for t in set(map(attrgetter("fwd_comm"), records))}
        tokens |= {("ig", t) for t in set(map(attrgetter("ig_comm"), records))}
        tokens |= {("wg", t) for t in set(map(attrgetter("wg_comm"), records))}
        return {classify(token, column)[1] for column, token in tokens}

    def _resolve_ep(self, groups: set[str]) -> int | None:
        """ep is needed only by EP and DP_EP collectives; then it must divide the DP size."""
        if not groups & {"EP", "DP_EP"}:
            return self.workload.header.ep
        (ep,) = self.workload.require("ep")
        if "DP_EP" in groups and self.dp % ep:
            raise ConfigError(f"ep {ep} from {self.workload.path} does not divide the DP size {self.dp} "
                              f"(= {self.gpus} GPUs / (tp {self.tp} * pp {self.pp})), so the DP_EP group size "
                              "is not an integer")
        return ep

    def _resolve_pp_comm(self) -> int:
        header = self.workload.header
        if header.pp_comm is None:
            if self.pp > 1:
                self._warn(f"{self.workload.path} has no pp_comm header key with pp {self.pp}: the PP exposed term "
                           "is 0 (SimAI warns and does the same)")
            return 0
        (pp_comm,) = self.workload.require("pp_comm")
        if self.pp == 1 and pp_comm:
            self._warn(f"pp_comm is {pp_comm} with pp 1: SimAI warns and still adds the PP exposed term, as we do")
        return pp_comm

    # ---- one collective ----------------------------------------------------------------------

    def group_size(self, column: str, group: str) -> int:
        """n for a group in a column (docs/simai_analytical.md, "Time of one collective"): fwd/ig: EP size
        for EP, else TP size; wg: DP/EP for DP_EP, else DP size."""
        if group in ("EP", "DP_EP") and self.ep is None:
            (self.ep,) = self.workload.require("ep")
        if column == "wg":
            return self.dp // self.ep if group == "DP_EP" else self.dp
        return self.ep if group == "EP" else self.tp

    def _nics(self, divisor: int, what: str) -> float:
        """NICs per server divided between GPU groups by integer division, as SimAI does; where that
        gives 0 SimAI returns a busbw of -1, and we use the fraction instead."""
        nics = self.nps // divisor
        if nics >= 1:
            return float(nics)
        self._warn(f"{what}: SimAI 1.7 computes NICs per node as {self.nps}//{divisor} = 0 and gets a negative "
                   f"bandwidth; using {self.nps}/{divisor} = {self.nps / divisor:g} NIC instead")
        return f32(self.nps / divisor)

    def shape(self, group: str, n: int) -> _Shape | None:
        """(nodes, GPUs per node, NICs per node) of a group of n ranks, or None when it costs 0."""
        tp, gps = self.tp, self.gps
        if group == "TP":
            if n <= 1:
                return None
            return _Shape(1, tp, float(self.nps)) if tp <= gps else _Shape(tp // gps, gps, float(self.nps))
        if n <= 1:
            return None
        if group == "EP":
            if tp * n <= gps:
                return _Shape(1, gps // tp, float(self.nps))
            nics = self._nics(gps if tp > gps else tp, f"EP group of {n} with tp {tp}")
            shape = _Shape(tp * n // gps, max(gps // tp, 1), nics)
        elif group == "DP":
            shape = (_Shape(n, gps // tp, self._nics(tp, f"DP group with tp {tp}")) if tp <= gps
                     else _Shape(n, 1, self._nics(gps, f"DP group with tp {tp}")))
        elif group == "DP_EP":
            span = tp * self.ep
            shape = (_Shape(n, gps // span, self._nics(span, f"DP_EP group with tp*ep {span}")) if span <= gps
                     else _Shape(n, 1, self._nics(gps, f"DP_EP group with tp*ep {span}")))
        else:
            return None
        if shape.nodes * shape.gpus_per_node == 1:
            raise ConfigError(f"SimAI 1.7 models the {group} group of {n} ranks (tp {tp}, {gps} GPUs per server) as "
                              "one node with one GPU and divides by a zero bandwidth; choose a layout whose tp "
                              "divides -g_p_s")
        return shape

    def busbw(self, comm_type: str, shape: _Shape) -> tuple[float, bool]:
        """busbw in GiB/s (float32) and "is NVLink" (docs/simai_analytical.md, "Bandwidth of one collective")."""
        nv, gpn, nodes = self.nv, shape.gpus_per_node, shape.nodes
        nic_total = f32(self.nic * shape.nics_per_node)
        is_nvlink = False
        if nodes == 1:
            value = nv
        elif gpn == 1:
            value = nic_total
        elif nic_total > nv:
            nv_per_gpu = f32(f32(nv * gpn) / (gpn - 1))
            value, is_nvlink = (nv_per_gpu, True) if nv_per_gpu < nic_total else (nic_total, False)
        else:
            value = nv if nv < nic_total else nic_total
        if comm_type == ALL_TO_ALL:
            if nodes == 1:
                return nv, True
            ranks = nodes * gpn
            value = f32(f32(f32(nic_total / gpn) * (ranks - 1)) / ((nodes - 1) * gpn))
        return value, is_nvlink

    def ratio(self, comm_type: str, group: str, n: int, size: int, is_nvlink: bool) -> float:
        """The size-dependent efficiency ratio (docs/simai_analytical.md, "Size-dependent efficiency ratio")."""
        tp, gps = self.tp, self.gps
        if comm_type in (ALL_GATHER, REDUCE_SCATTER) and group == "TP":
            table = simai_tables.NVLINK if is_nvlink else simai_tables.NIC
            nodes = 1 if tp < gps else tp // gps
        elif comm_type == ALL_TO_ALL and group == "EP":
            table = simai_tables.ATA
            nodes = 1 if tp * n <= gps else 9 if tp >= gps else tp * n // gps
        elif comm_type == ALL_TO_ALL and group == "TP":
            table = simai_tables.ATA
            nodes = 1 if tp <= gps else tp // gps
        else:
            return 1.0
        if size > table.max_size:
            self._warn(f"a {comm_type} of {size} bytes in the {group} group is above the 16 GiB ratio table: "
                       "clamped to the 16 GiB row (SimAI 1.7 aborts)")
        return table.lookup(size, nodes)

    def cost(self, column: str, token: str, size_bytes: int) -> CollectiveCost:
        """Price one comm column of a record (size as written in the file).  Cached."""
        key = (column, token, size_bytes)
        cost = self._costs.get(key)
        if cost is None:
            cost = self._costs[key] = self._cost(column, token, size_bytes)
        return cost

    def _cost(self, column: str, token: str, size_bytes: int) -> CollectiveCost:
        comm_type, group = classify(token, column)
        n = self.group_size(column, group)
        # SimAI scales sizes by its float comm_scale (1.0): a round trip through float32.
        size = int(f32(size_bytes))
        if column == "fwd" and 0 < size < FORWARD_FLOOR_BYTES:
            size = FORWARD_FLOOR_BYTES
        ratio, model_bw = 1.0, None
        if comm_type is None:
            time_ns, how = 0, "none"
        elif self.busbw_file is not None and group in _group_sections():
            # -busbw: SimAI's pre-1.7 binary: the file's busbw, no ratio table, no fixed small-message latency
            if n <= 1:
                time_ns, how = 0, "group-size-1"
            else:
                model_bw = self.busbw_file.busbw(group, comm_type)
                seconds_x1e9 = size / GIB / model_bw * 1e9
                if comm_type == ALL_REDUCE:
                    seconds_x1e9 = seconds_x1e9 * 2
                time_ns, how = int(seconds_x1e9 * (n - 1) / n), "busbw-file"
        elif 1 < size < SMALL_MESSAGE_BYTES:
            time_ns, how = LATENCY_NS.get(n, 0), "latency"
        else:
            shape = self.shape(group, n)
            if shape is None:
                time_ns, how = 0, "unknown-group" if group == "OTHER" else "group-size-1"
            else:
                busbw, is_nvlink = self.busbw(comm_type, shape)
                ratio = self.ratio(comm_type, group, n, size, is_nvlink)
                model_bw = f32(ratio * busbw)
                # size / 2^30 / (ratio * busbw) * 1e9 * F, in SimAI's order, truncated to whole ns.
                seconds_x1e9 = size / GIB / model_bw * 1e9
                if comm_type == ALL_REDUCE:
                    seconds_x1e9 = seconds_x1e9 * 2
                time_ns, how = int(seconds_x1e9 * (n - 1) / n), "bandwidth"
        algbw, busbw_col = report_bandwidths(comm_type, n, size, time_ns)
        return CollectiveCost(token, comm_type, group, n, size, time_ns, how, ratio, model_bw, algbw, busbw_col)

    # ---- the iteration -----------------------------------------------------------------------

    def default_pp_busbw(self) -> float:
        """The DP group's inter-node busbw in GiB/s: an all-gather over max(dp, 2) nodes."""
        if self.nps is None:
            raise ConfigError(f"the PP term of {self.workload.path} needs a PP busbw: give --pp_busbw, a 'PP: busbw' in "
                              "the -busbw file, or -n_p_s")
        shape = self.shape("DP", max(self.dp, 2))
        assert shape is not None
        return self.busbw(ALL_GATHER, shape)[0]

    def run(self) -> SimulationResult:
        """Cost every record and add up SimAI's end-to-end terms (docs/simai_analytical.md, "Exposure,
        bubble, totals").  Sums run in SimAI's order so that the doubles match too; the ``ga``
        micro-batch blocks of a file are costed once and their sums scaled exactly
        (:func:`_run_records`)."""
        layers, sums = _run_records(self)
        dp_us, dp_ep_us, tp_us, ep_us, compute_us, exposed_us, bubble_acc_us = sums
        bubble_us = bubble_acc_us * (float(self.pp - 1) / (self.ga * self.vpp))
        pp_busbw = None
        pp_us = 0
        if self.pp_comm and self.pp_keep:  # SimAI adds the term whenever pp_comm is non-zero, pp 1 included
            pp_busbw = f32(self.options.pp_busbw) if self.options.pp_busbw is not None else (
                self.busbw_file.pp_busbw if self.busbw_file is not None and self.busbw_file.pp_busbw
                else self.default_pp_busbw())
            # truncate(truncate(2 * vpp * ga * (pp_comm / 2^30) / X * 1e9 / 1000) * (1 - pp_o)), in us.
            pp_raw = int(2 * self.vpp * self.ga * (self.pp_comm / GIB / pp_busbw * 1e9) / 1000.0)
            pp_us = _expose(pp_raw, self.pp_keep)
        total_us = compute_us + exposed_us + bubble_us + pp_us
        totals = Totals(dp_us, dp_ep_us, tp_us, ep_us, float(pp_us), bubble_us, compute_us, exposed_us, total_us)
        setup = dict(
            tp=self.tp, ep=self.ep, pp=self.pp, vpp=self.vpp, ga=self.ga, dp=self.dp, gpus=self.gpus,
            gpus_per_server=self.gps, nics_per_server=self.nps, nvlink_gibps=self.nv, nic_gibps=self.nic,
            pp_comm_bytes=self.pp_comm, pp_busbw_gibps=pp_busbw, bubble_accumulator_us=bubble_acc_us,
            busbw_file=self.busbw_file.path if self.busbw_file is not None else None,
            dp_overlap=self.options.dp_overlap, tp_overlap=self.options.tp_overlap,
            ep_overlap=self.options.ep_overlap, pp_overlap=self.options.pp_overlap,
        )
        return SimulationResult("simai", self.workload.path, layers, totals, setup, list(self.warnings))


# ---- the records, each repeated micro-batch block costed once ----------------------------------------

_SUMS = ("dp", "dp_ep", "tp", "ep", "compute", "exposed", "bubble")
"""The accumulators of :meth:`SimAIModel.run`, in the order :func:`_run_records` returns them."""


_PRICED = 1 << 16
"""Distinct records whose result and terms :func:`_run_records` keeps for the records alike that follow;
past that it starts again (a file of all-different records then holds its results, not its terms too)."""


def _run_records(model: SimAIModel) -> tuple[RepeatedLayers, tuple[float, ...]]:
    """Every record's :class:`LayerResult` and the seven sums of :meth:`SimAIModel.run` (us).

    The records are cut into segments (:func:`simulator.repeat.repeat_segments`: the ``ga``
    micro-batch blocks a file unrolls, checked record by record); each distinct record object is costed
    once (a file read with ``share=True`` holds one object per distinct line), and each sum adds a
    segment's terms ``repeat`` times with :func:`simulator.repeat.repeat_sum`, which gives the same
    double as adding them one record at a time (a term a record does not book is added as 0.0, which
    leaves a sum unchanged).  A segment that does not repeat is added record by record as it is
    read, holding no list of terms.  The result is identical to the unrolled loop to the bit.

    Memory: a record's result and terms are shared by every record that is the same object, so 10^6
    records of a few hundred distinct lines hold a few hundred results and lists of references (and
    the simulator reads 10^6 such records in about 30 MB: ``bench/bench_sim_memory.py``)."""
    records = model.workload.records
    priced: dict[int, tuple[LayerResult, tuple[float, ...]]] = {}  # id(record) -> its result and terms (records live on)
    sums = [0.0] * len(_SUMS)
    parts: list[tuple[list[LayerResult], int]] = []
    with progress(total=len(records), desc="simai model", unit="record") as bar:
        for start, length, times in repeat_segments(records, model.ga):
            _run_segment(model, records, start, length, times, sums, parts, priced)
            bar.update(length * times)
    return RepeatedLayers(parts, _reindexed), tuple(sums)


def _run_segment(model: SimAIModel, records: list, start: int, length: int, times: int, sums: list[float],
                 parts: list[tuple[list[LayerResult], int]], priced: dict) -> None:
    """Cost the ``length`` records from ``start`` (each distinct record object once: ``priced``), add their
    terms ``times`` times to ``sums`` and their results to ``parts`` (one segment of :func:`_run_records`)."""
    templates: list[LayerResult] = []
    keep = templates.append
    if times == 1:
        dp, dp_ep, tp, ep, compute, exposed, bubble = sums
        for index in range(start, start + length):
            entry = _priced(model, records[index], index, priced)
            keep(entry[0])
            # the unrolled loop's additions, in its order (compute and exposed add three terms each)
            t = entry[1]
            dp += t[0]
            dp_ep += t[1]
            tp += t[2]
            ep += t[3]
            compute += t[4]
            compute += t[5]
            compute += t[6]
            exposed += t[7]
            exposed += t[8]
            exposed += t[9]
            bubble += t[10]
        sums[:] = [dp, dp_ep, tp, ep, compute, exposed, bubble]
    else:
        terms: list[list[float]] = [[] for _ in _SUMS]
        t_dp, t_dp_ep, t_tp, t_ep, t_compute, t_exposed, t_bubble = terms
        for index in range(start, start + length):
            entry = _priced(model, records[index], index, priced)
            keep(entry[0])
            t = entry[1]
            t_dp.append(t[0])
            t_dp_ep.append(t[1])
            t_tp.append(t[2])
            t_ep.append(t[3])
            t_compute += t[4:7]
            t_exposed += t[7:10]
            t_bubble.append(t[10])
        for k, addends in enumerate(terms):
            sums[k] = repeat_sum(sums[k], addends, times)
    parts.append((templates, times))


def _priced(model: SimAIModel, r: SimAILayer, index: int, priced: dict) -> tuple[LayerResult, tuple[float, ...]]:
    """:func:`_price_record` of ``r``, once per distinct record object while ``priced`` holds it (cleared
    past :data:`_PRICED` entries, so that a file of all-different records does not keep every term)."""
    entry = priced.get(id(r))
    if entry is None:
        if len(priced) >= _PRICED:
            priced.clear()
        entry = priced[id(r)] = _price_record(model, r, index)
    return entry


def _price_record(model: SimAIModel, r: SimAILayer, index: int) -> tuple[LayerResult, tuple[float, ...]]:
    """One record's :class:`LayerResult` (with ``index``) and its eleven addends in us: dp, dp_ep, tp,
    ep, compute (fwd, wg, ig), exposed (fwd, wg, ig) and bubble."""
    # SimAI scales compute times by its float compute_scale (1.0): a float32 round trip.
    fwd_c, ig_c, wg_c = int(f32(r.fwd_compute_ns)), int(f32(r.ig_compute_ns)), int(f32(r.wg_compute_ns))
    fwd = model.cost("fwd", r.fwd_comm, r.fwd_size_bytes)
    ig = model.cost("ig", r.ig_comm, r.ig_size_bytes)
    wg = model.cost("wg", r.wg_comm, r.wg_size_bytes)
    bubble = (fwd.time_ns + fwd_c + wg_c + ig_c + ig.time_ns) / 1000.0 if r.name != BUBBLE_EXCLUDED else 0.0
    wg_exp = _expose(wg.time_ns, model.dp_keep)
    booked_wg = "DP_EP" if wg.group == "DP_EP" else "DP"
    dp_ep = wg_exp / 1000.0 if booked_wg == "DP_EP" else 0.0
    dp = 0.0 if booked_wg == "DP_EP" else wg_exp / 1000.0
    if fwd.group == "EP":
        booked = "EP"
        fwd_exp, ig_exp = _expose(fwd.time_ns, model.ep_keep), _expose(ig.time_ns, model.ep_keep)
        ep, tp = (fwd_exp + ig_exp) / 1000.0, 0.0
    else:
        booked = "TP"
        fwd_exp, ig_exp = _expose(fwd.time_ns, model.tp_keep), _expose(ig.time_ns, model.tp_keep)
        tp, ep = (fwd_exp + ig_exp) / 1000.0, 0.0
    layer = LayerResult(index, r.name, fwd_c, ig_c, wg_c, fwd, ig, wg, fwd_exp, ig_exp, wg_exp, booked, booked_wg)
    return layer, (dp, dp_ep, tp, ep, fwd_c / 1000.0, wg_c / 1000.0, ig_c / 1000.0,
                   fwd_exp / 1000.0, wg_exp / 1000.0, ig_exp / 1000.0, bubble)


def _reindexed(layer: LayerResult, index: int) -> LayerResult:
    return replace(layer, index=index)


def _expose(time_ns: int, keep: float) -> int:
    """truncate(time * (1 - overlap)) as SimAI computes it: the integer ns converted to a C float,
    multiplied by a float, truncated (above 2^24 ns the conversion rounds to float32)."""
    if keep == 1.0:
        return int(f32(time_ns)) if time_ns > 1 << 24 else time_ns
    return int(f32(f32(time_ns) * keep))


def report_bandwidths(comm_type: str | None, n: int, size: int, time_ns: int) -> tuple[float, float]:
    """The report's algbw and busbw in GiB/s, as C floats (docs/simai_analytical.md, "Per-layer bandwidth
    columns"): algbw = size / 2^30 / (time in s) using the costed size; busbw = algbw * F, 0 for no
    communication.  A time of 0 gives NaN (size 0) or inf, as SimAI's division by zero does."""
    if time_ns == 0:
        algbw = math.nan if size == 0 else math.inf
    else:
        algbw = f32(size / (time_ns / 1000.0) * 1000000 / GIB)
    if comm_type == ALL_REDUCE:
        busbw = f32(f32(f32(algbw * 2) * (n - 1)) / n)
    elif comm_type is not None:
        busbw = f32(f32(algbw * (n - 1)) / n)
    else:
        busbw = 0.0
    return algbw, busbw


def _group_sections() -> dict[str, str]:
    """:data:`simulator.simai.busbw_file.GROUP_SECTIONS`, imported only by the runs that read a busbw.yaml (``-busbw``)."""
    from simulator.simai.busbw_file import GROUP_SECTIONS

    return GROUP_SECTIONS

"""``--model topo``: our topology-aware model (SIM_MODEL.md), from either input to a result.

1. Stage scripts (:mod:`simulator.programs`) from a SimAI workload file or from our per-stage
   Megatron workloads.
2. Placement (:mod:`simulator.fabric`): rank r on GPU r; groups from the RankGenerator
   (``ParallelConfig.group_ranks``), one representative group per stage (tp rank 0, dp rank 0), whose
   shape (servers, members per server, tier, latencies, congestion) prices every collective.
3. Costs (:mod:`simulator.collectives`): NCCL's alpha-beta model, each distinct (group shape,
   collective, size) costed once.
4. The engine (:mod:`simulator.engine`) plays the schedule across stages.
5. Results: the iteration time, per stage terms, the EndToEnd terms of the busiest stage (least
   bubble) in SimAI's layout, per-layer and per-collective tables, MFU, and the trace intervals.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from simulator import engine
from simulator.collectives import NIC_EFFICIENCY, NVLINK_EFFICIENCY, Cost, LinkModel, collective_cost, p2p_cost
from simulator.fabric import DerivedFabric, TopologyFabric
from simulator.options import TopoOptions
from simulator.programs import (
    ASYNC,
    COMM,
    COMPUTE,
    GRAD,
    GRAD_WAIT,
    SYNC,
    Op,
    Scripts,
    scripts_from_generators,
    scripts_from_simai,
    scripts_from_workloads,
)
from simulator.result import (
    CollectiveCost,
    CollectiveRecord,
    LayerResult,
    LayerTimes,
    SimulationResult,
    StageResult,
    TopoDetails,
    Totals,
)
from simulator.simai_model import report_bandwidths
from utils.errors import ConfigError
from workload_generator.simai_tokens import classify


def peak_tflops(options: TopoOptions, gpu_type: str | None) -> float | None:
    """The MFU's peak: ``--peak_tflops``, else the dense bf16 peak of the GPU type in the compute model's
    table (the convention of published MFU figures, FP8 runs included); None for an unknown type."""
    if options.peak_tflops is not None:
        return options.peak_tflops
    from mocked_model.compute import gpu_spec, known_gpu

    return gpu_spec(gpu_type).bf16_tflops if known_gpu(gpu_type) else None


def comm_sm_share(options: TopoOptions, gpu_type: str | None) -> float:
    """The share of a GPU's SMs an overlapped collective takes from the compute it overlaps: the GPU
    table's (:func:`mocked_model.compute.gpus.nccl_sm_share`), 0 for an unknown GPU type."""
    from mocked_model.compute import known_gpu
    from mocked_model.compute.gpus import nccl_sm_share

    return nccl_sm_share(gpu_type) if known_gpu(gpu_type) else 0.0


def build_fabric(topology: Any, options: TopoOptions, gpus: int) -> tuple[Any, LinkModel, list[str]]:
    """The fabric and link model: a topology (path or :class:`topo.Topology`) or the derived two-tier one."""
    notes: list[str] = []
    if topology is None:
        gps = options.gpus_per_server
        if gps is None:
            raise ConfigError("--model topo needs -t/--topology FILE, or -g_p_s/--gpus_per_server (with -n_p_s, -nv, "
                              "-nic) to derive a two-tier fabric")
        if gpus % gps:
            raise ConfigError(f"-g {gpus} GPUs is not a multiple of -g_p_s {gps} GPUs per server")
        nps = options.nics_per_server or gps
        fabric = DerivedFabric(gpus, gps, nps, options.nvlink_gibps * 2**30, options.nic_gibps * 2**30, options.gpu_type)
        links = LinkModel(options.nvlink_efficiency or 1.0, options.nic_efficiency or 1.0, options.latency_scale)
        return fabric, links, notes
    from topo import Topology, read_topology

    topo = topology if isinstance(topology, Topology) else read_topology(topology)
    source = topo.source or "the topology"
    if topo.gpu_count < gpus:
        raise ConfigError(f"{source} has {topo.gpu_count} GPUs, fewer than the {gpus} the workload runs on "
                          "(--world_size / -g)")
    if options.gpus_per_server is not None and options.gpus_per_server != topo.gpus_per_server:
        raise ConfigError(f"-g_p_s {options.gpus_per_server} contradicts {source}, which has {topo.gpus_per_server} "
                          "GPUs per server")
    for value, flag in ((options.nvlink_bw, "-nv"), (options.nic_busbw, "-nic"), (options.nics_per_server, "-n_p_s")):
        if value is not None:
            notes.append(f"{flag} is ignored with a topology file: its links give the rates")
    if topo.gpu_count > gpus:
        notes.append(f"{source} has {topo.gpu_count} GPUs; the {gpus} ranks use GPUs 0..{gpus - 1}")
    links = LinkModel(options.nvlink_efficiency or nvlink_efficiency(topo.gpu_type), options.nic_efficiency or NIC_EFFICIENCY,
                      options.latency_scale)
    return TopologyFabric(topo, gpus), links, notes


def nvlink_efficiency(gpu_type: str | None) -> float:
    """NCCL's modelled share of the nominal NVLink rate for the GPU's generation (the GPU table's
    ``nvlink_efficiency``), or :data:`simulator.collectives.NVLINK_EFFICIENCY` for an unknown type."""
    from mocked_model.compute import gpu_spec, known_gpu

    return gpu_spec(gpu_type).nvlink_efficiency if known_gpu(gpu_type) else NVLINK_EFFICIENCY


def load_scripts(workload: Any, options: TopoOptions) -> tuple[Scripts, Any, int, str, Any]:
    """(scripts, job or None, gpus, workload path, the SimAI workload or None) from any accepted input:
    a :class:`SimAIWorkload`, a path to one, a ``JobConfig``, or a list of per-stage Workloads."""
    from utils.config import JobConfig
    from workload_generator.simai import SimAIWorkload

    if isinstance(workload, JobConfig):
        return _job_scripts(workload, options)
    if isinstance(workload, (list, tuple)):
        if not workload:
            raise ConfigError("no workloads given (expected one per pipeline stage)")
        job = workload[0].config
        if not isinstance(job, JobConfig):
            raise ConfigError("the workloads carry no JobConfig (use megatron_pipeline(job) or pass the JobConfig)")
        gpus = job.parallel.world_size
        if options.gpus is not None and options.gpus != gpus:
            raise ConfigError(f"-g {options.gpus} differs from the job's world size {gpus}")
        scripts = scripts_from_workloads(workload, job, options.compute_time_ns, options.overlap_grad_reduce,
                                         options.tp_comm_overlap)
        return scripts, job, gpus, f"{job.model.name} tp{job.parallel.tp} pp{job.parallel.pp} dp{job.parallel.dp}", None
    if not isinstance(workload, SimAIWorkload):
        workload = SimAIWorkload.read(workload, strict=False)
    header = workload.header
    if header.is_transformer:
        workload.require("tp", "pp", "ga")  # name every missing key before asking for -g
    gpus = options.gpus if options.gpus is not None else header.all_gpus
    if gpus is None:
        raise ConfigError(f"-g/--gpus is required: {workload.path} has no all_gpus header key")
    overlap = True if options.overlap_grad_reduce is None else options.overlap_grad_reduce
    scripts = scripts_from_simai(workload, gpus, overlap)
    if options.gpus is not None and header.all_gpus is not None and header.all_gpus != options.gpus:
        scripts.warnings.append(f"-g {options.gpus} differs from the workload's all_gpus {header.all_gpus}; using -g")
    if options.compute_time_ns is not None:
        scripts.warnings.append("compute_time_ns applies to our workloads only; SimAI records carry their compute times")
    scripts.warnings[:0] = workload.warnings
    return scripts, None, gpus, workload.path, workload


def _job_scripts(job: Any, options: TopoOptions) -> tuple[Scripts, Any, int, str, None]:
    """Scripts of every pipeline stage of a Megatron job, straight from its generators; computation
    times from ``options.compute_time_ns``, else from the job's compute source (the compute model for
    its ``gpu_type``, its ``comp_filepath``, or AIOB with ``aiob_enable``)."""
    from dataclasses import replace

    from workload_generator.compute_times import default_source, fill_job_times
    from workload_generator.entry import generator_for

    if job.training.frame not in ("Megatron", "DeepSeek"):
        raise ConfigError(f"--frame {job.training.frame}: the topo model simulates whole Megatron and DeepSeek jobs")
    training = job.training
    if options.overlap_grad_reduce is not None and options.overlap_grad_reduce != training.overlap_grad_reduce:
        training = replace(training, overlap_grad_reduce=options.overlap_grad_reduce)
    if options.tp_comm_overlap and not training.tp_comm_overlap:
        training = replace(training, tp_comm_overlap=True)
    if not training.computation_enable:
        training = replace(training, computation_enable=True)
    job = replace(job, training=training)
    gpus = job.parallel.world_size
    if options.gpus is not None and options.gpus != gpus:
        raise ConfigError(f"-g {options.gpus} differs from the job's --world_size {gpus}")
    gens = [generator_for(job, stage) for stage in range(job.parallel.pp)]
    hook = options.compute_time_ns
    warnings: list[str] = []
    if hook is None:
        source = default_source(job, options.compute_source, model_default=True)
        if source == "placeholder":
            raise ConfigError("simulating a job needs computation times: give --gpu_type (the compute model), "
                              "--comp_filepath FILE or --aiob_enable")
        report = fill_job_times(_distinct_items(gens), job, source)
        warnings.append(report.summary())
    scripts = scripts_from_generators(gens, job, hook, options.overlap_grad_reduce, job.training.tp_comm_overlap)
    scripts.warnings[:0] = [w for w in warnings if "no time for" in w]
    p = job.parallel
    return scripts, job, gpus, f"{job.model.name} tp{p.tp} pp{p.pp} dp{p.dp}", None


def _distinct_items(generators: Sequence) -> list:
    """Every distinct item object of one iteration of each generator (each distinct step once)."""
    seen: dict[int, Any] = {}
    for gen in generators:
        keys: set = set()
        for step in gen.schedule():
            key = gen.step_key(step)
            if key is not None and key in keys:
                continue
            keys.add(key)
            for item in gen.step_items(step):
                seen.setdefault(id(item), item)
        rest: list = []
        gen.step(rest)
        for item in rest:
            seen.setdefault(id(item), item)
    return list(seen.values())


class TopoModel:
    """One ``--model topo`` simulation: scripts on a fabric.  :meth:`run` returns the result."""

    def __init__(self, scripts: Scripts, fabric: Any, links: LinkModel, options: TopoOptions, path: str,
                 simai_workload: Any = None, notes: Sequence[str] = (), job: Any = None) -> None:
        from utils.parallel import ParallelConfig

        self.scripts, self.fabric, self.links, self.options, self.path = scripts, fabric, links, options, path
        self.job = job
        self.simai = simai_workload
        self.warnings = list(scripts.warnings) + list(notes)
        lay = scripts.layout
        self.pp = lay["pp"]
        self.world = lay["world"]
        self.pconf = ParallelConfig(world_size=lay["world"], tp=lay["tp"], pp=lay["pp"], ep=lay["ep"])
        rg = self.pconf.rank_generator()
        self.rep = [rg.rank_at(pp=s) for s in range(self.pp)]
        self._members: dict[tuple[str, int], Sequence[int]] = {}
        self._shapes: dict[tuple[str, int], Any] = {}
        self._costs: dict[tuple[Any, str, int], Cost] = {}
        self._stage_costs: dict[tuple[int, str, str, int], tuple[Cost, Any]] = {}
        self._op_counts: dict[int, Counter] = {}
        self._p2p: dict[tuple[int, str, int], tuple[Cost, Any]] = {}
        self.contention = comm_sm_share(options, getattr(fabric, "gpu_type", None))

    # ---- placement and costs -----------------------------------------------------------------

    def members(self, group: str, stage: int) -> Sequence[int]:
        """Global ranks of the ``group`` that holds stage ``stage``'s representative rank (that rank alone
        when no such group holds it, e.g. a middle stage's embedding group)."""
        key = (group, stage)
        found = self._members.get(key)
        if found is None:
            rank = self.rep[stage]
            found = self._members[key] = self.pconf.group_of(rank, group) or [rank]
        return found

    def shape(self, group: str, stage: int):
        key = (group, stage)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = self.fabric.group_shape(self.members(group, stage))
        return shape

    def cost(self, stage: int, op: Op) -> tuple[Cost, Any]:
        """NCCL's cost of a collective op on a stage and the group's shape.  Each distinct (group
        shape, type, size) is costed once; the per-stage lookup is keyed by plain values."""
        return self.comm_cost(stage, op.group, op.comm_type, op.size)

    def comm_cost(self, stage: int, group: str, comm_type: str, size: int) -> tuple[Cost, Any]:
        key = (stage, group, comm_type, size)
        hit = self._stage_costs.get(key)
        if hit is None:
            shape = self.shape(group, stage)
            shape_key = (shape, comm_type, size)
            cost = self._costs.get(shape_key)
            if cost is None:
                cost = self._costs[shape_key] = collective_cost(comm_type, size, shape, self.links)
            hit = self._stage_costs[key] = (cost, shape)
        return hit

    def op_time(self, stage: int, op: Op) -> float:
        """Seconds of one op (compute: its ns; collectives: NCCL's cost), times the op's scale."""
        if op.kind == COMPUTE:
            return op.compute_ns * 1e-9 * op.scale
        if op.kind == GRAD_WAIT or not op.comm_type:
            return 0.0
        return self.comm_cost(stage, op.group, op.comm_type, op.size)[0].time_s * op.scale

    def p2p(self, stage: int, op: str, size: int) -> tuple[Cost, Any]:
        key = (stage, op, size)
        hit = self._p2p.get(key)
        if hit is None:
            peer = (stage + 1) % self.pp if op.endswith("next") else (stage - 1) % self.pp
            a, b = (self.rep[stage], self.rep[peer]) if op.startswith("send") else (self.rep[peer], self.rep[stage])
            route = self.fabric.p2p_shape(a, b)
            cost = p2p_cost(size, route.same_server, route.bottleneck_Bps, route.latency_s, self.links, route.congestion)
            hit = self._p2p[key] = (cost, route)
        return hit

    # ---- the run ----------------------------------------------------------------------------------

    def run(self) -> SimulationResult:
        scripts = self.scripts.stages
        compiled: list[dict[int, engine.CompiledProgram]] = []
        occurrences: list[Counter] = []
        groups = sorted({op.group for script in scripts for program in {id(p): p for p in script.programs if p}.values()
                         for op in program.ops if op.group})
        shared: dict[tuple, engine.CompiledProgram] = {}
        for script in scripts:
            s = script.stage
            # stages whose groups have the same shapes share compiled programs (SimAI files: every stage)
            signature = tuple(self.shape(g, s) for g in groups)
            table: dict[int, engine.CompiledProgram] = {}
            counts: Counter = Counter()
            for program in script.programs:
                if program is None:
                    continue
                counts[id(program)] += 1
                if id(program) not in table:
                    key = (id(program), signature)
                    cp = shared.get(key)
                    if cp is None:
                        cp = shared[key] = engine.compile_program(program, [self.op_time(s, op) for op in program.ops],
                                                                  self.contention)
                    table[id(program)] = cp
            compiled.append(table)
            occurrences.append(counts)

        def members_of(group: str) -> Sequence[int]:
            return [0, self.pp - 1] if group == "embedding_group" else range(self.pp)

        played = engine.run(scripts, compiled, lambda s, op, size: self.p2p(s, op, size)[0].time_s, self.op_time, members_of)
        iteration_s = played.iteration_s
        stages = [self._stage_result(t, played.iteration_s, scripts[t.stage].flops) for t in played.stages]
        reported = min(range(len(stages)), key=lambda s: (stages[s].bubble_us, s))
        layer_times = self._layer_times(scripts, compiled, occurrences, played)
        collectives = self._collectives(scripts, occurrences)
        flops = [script.flops for script in scripts]
        peak = peak_tflops(self.options, self.fabric.gpu_type)
        model_flops = None
        mfu = None
        if self.job is not None or (flops and all(f is not None for f in flops)):
            if self.job is not None:  # Megatron's formula, the convention of published MFU figures
                from mocked_model.flops import model_flops as megatron_flops

                model_flops = megatron_flops(self.job)
            else:
                model_flops = sum(flops) * (self.world // self.pp)  # type: ignore[arg-type]
            missing = any("computation items have no time" in w for w in self.warnings)
            if peak and iteration_s > 0 and not missing:
                mfu = model_flops / (iteration_s * self.world * peak * 1e12)
        st = stages[reported]
        dp_us = st.dp_exposed_us + st.other_exposed_us
        exposed_us = dp_us + st.dp_ep_exposed_us + st.tp_exposed_us + st.ep_exposed_us
        totals = Totals(dp_us, st.dp_ep_exposed_us, st.tp_exposed_us, st.ep_exposed_us, st.pp_exposed_us, st.bubble_us,
                        st.compute_us, exposed_us, iteration_s * 1e6)
        layers = self._simai_layers(scripts[reported], compiled[reported], played.stages[reported]) \
            if self.simai is not None else self._workload_layers(scripts[reported], compiled[reported], played.stages[reported])

        def intervals() -> list[engine.Interval]:
            return trace_intervals(scripts, compiled, played)

        details = TopoDetails(iteration_s * 1e6, reported, stages, collectives, layer_times, mfu, model_flops, peak,
                              intervals)
        lay = self.scripts.layout
        setup = dict(
            tp=lay["tp"], ep=lay["ep"], pp=lay["pp"], dp=lay["dp"], ga=lay["ga"], vpp=lay.get("vpp", lay["chunks"]),
            chunks=lay["chunks"], gpus=self.world, gpus_per_server=self.fabric.gpus_per_server, fabric=self.fabric.description,
            nvlink_efficiency=self.links.nvlink_efficiency, nic_efficiency=self.links.nic_efficiency,
            latency_scale=self.links.latency_scale, source=self.scripts.source, reported_stage=reported,
            overlap_grad_reduce=self.options.overlap_grad_reduce, tp_comm_overlap=self.options.tp_comm_overlap,
            mfu=mfu, peak_tflops=peak,
        )
        return SimulationResult("topo", self.path, layers, totals, setup, list(dict.fromkeys(self.warnings)), details)

    # ---- result tables ----------------------------------------------------------------------------

    def _stage_result(self, t: engine.StageTimes, iteration_s: float, flops: float | None) -> StageResult:
        e, c = t.exposed_s, t.comm_s
        return StageResult(
            t.stage, t.compute_s * 1e6, e["TP"] * 1e6, e["EP"] * 1e6, e["DP"] * 1e6, e["DP_EP"] * 1e6, e["PP"] * 1e6,
            e["other"] * 1e6, engine.bubble_s(t, iteration_s) * 1e6, t.end_s * 1e6, c["TP"] * 1e6, c["EP"] * 1e6,
            c["DP"] * 1e6, c["DP_EP"] * 1e6, c["PP"] * 1e6, flops)

    def _grad_exposure(self, t: engine.StageTimes) -> dict[tuple[int, int], float]:
        """Exposed seconds of each gradient bucket instance, keyed by (step index, op index)."""
        out: dict[tuple[int, int], float] = {}
        if t.grad_wait_s is None:
            return out
        for start, end, _cat, step_index, op_index in t.grad_instances:
            out[(step_index, op_index)] = max(0.0, end - max(start, t.grad_wait_s))
        return out

    def _layer_times(self, scripts, compiled, occurrences, played) -> list[LayerTimes]:
        rows = []
        for script, table, counts, t in zip(scripts, compiled, occurrences, played.stages):
            acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
            for pid, n in counts.items():
                cp = table[pid]
                fwd = cp.program.kind == "F"
                for layer, (comp, comm, exposed) in cp.layers.items():
                    a = acc[layer]
                    a[0 if fwd else 1] += comp * n
                    a[2] += comm * n
                    a[3] += exposed * n
            exposure = self._grad_exposure(t)
            for (step_index, op_index), seconds in exposure.items():
                program = script.programs[step_index]
                acc[program.ops[op_index].layer][3] += seconds
            for op in script.step_program.ops:
                if op.kind == GRAD_WAIT:
                    continue
                d = self.op_time(script.stage, op)
                a = acc[op.layer]
                if op.kind == COMPUTE:
                    a[1] += d
                else:
                    a[2] += d
                    a[3] += d if op.kind != ASYNC else 0.0
            for layer, (f, b, comm, exposed) in acc.items():
                rows.append(LayerTimes(script.stage, layer, f * 1e6, b * 1e6, comm * 1e6, exposed * 1e6))
        return rows

    def _collectives(self, scripts, occurrences) -> list[CollectiveRecord]:
        counts: dict[tuple, list] = {}
        programs: dict[int, Any] = {}
        for script, occ in zip(scripts, occurrences):
            for program in script.programs:
                if program is not None:
                    programs[id(program)] = program
            items = [(programs[pid], n) for pid, n in occ.items()]
            items.append((script.step_program, 1))
            for program, n in items:
                for (group, ctype, size), k in self._comm_counts(program).items():
                    cost, shape = self.comm_cost(script.stage, group, ctype, size)
                    key = (group, ctype, size, shape)
                    entry = counts.setdefault(key, [cost, 0, set()])
                    entry[1] += n * k
                    entry[2].add(script.stage)
            for step, sizes in zip(script.steps, script.p2p_sizes):
                if sizes is None:
                    continue
                for op, size in zip(step.ops, sizes):
                    if not op.startswith("send"):
                        continue
                    cost, route = self.p2p(script.stage, op, size)
                    key = ("pp_group", op, size, route)
                    entry = counts.setdefault(key, [cost, 0, set()])
                    entry[1] += 1
                    entry[2].add(script.stage)
        rows = []
        for (group, ctype, size, shape), (cost, count, stages) in counts.items():
            time_us = cost.time_s * 1e6
            algbw = size / cost.time_s / 1e9 if cost.time_s > 0 else math.nan
            if group == "pp_group":
                rows.append(CollectiveRecord(group, ctype, size, 2, 1 if shape.same_server else 2, 1, shape.tier,
                                             cost.algorithm, cost.protocol, time_us, algbw, cost.busbw_Bps / 1e9,
                                             shape.congestion, count, _stage_list(stages)))
                continue
            congestion = shape.a2a_congestion if ctype == "all_to_all" else shape.congestion
            rows.append(CollectiveRecord(group, ctype, size, shape.n, shape.servers, shape.per_server, shape.tier,
                                         cost.algorithm, cost.protocol, time_us, algbw, cost.busbw_Bps / 1e9, congestion,
                                         count, _stage_list(stages)))
        rows.sort(key=lambda r: -r.total_us)
        return rows

    def _comm_counts(self, program) -> Counter:
        """(group, type, size) -> how many times the program runs that collective (cached per program)."""
        counts = self._op_counts.get(id(program))
        if counts is None:
            counts = self._op_counts[id(program)] = Counter(
                (op.group, op.comm_type, op.size) for op in program.ops if op.kind != COMPUTE and op.comm_type)
        return counts

    def _per_op_columns(self, script, table, t) -> tuple[dict, dict]:
        """For the reported stage: per (layer key or record, column) compute ns and comm lists."""
        compute: dict[tuple, float] = defaultdict(float)
        comms: dict[tuple, list] = defaultdict(list)  # (time_s, exposed_s, op, cost, shape)
        exposure = self._grad_exposure(t)
        for _start, step_index, _mb, _chunk in t.runs:
            program = script.programs[step_index]
            cp = table[id(program)]
            for op_index, (op, d) in enumerate(zip(program.ops, cp.durations)):
                column = op.phase if op.phase in ("fwd", "ig", "wg") else ("fwd" if program.kind == "F" else "ig")
                key = (op.record if self.simai is not None else op.layer, column)
                if op.kind == COMPUTE:
                    compute[key] += d
                    continue
                if op.kind == GRAD:
                    exposed = exposure.get((step_index, op_index), 0.0)
                    key = (key[0], "wg")
                elif op.kind in (COMM, SYNC):
                    exposed = d
                else:
                    exposed = 0.0
                comms[key].append((d, exposed, op))
        for op in script.step_program.ops:
            if op.kind == GRAD_WAIT:
                continue
            d = self.op_time(script.stage, op)
            column = op.phase if op.phase in ("fwd", "ig", "wg") else ("wg" if op.group in ("dp_group", "ep_dp_group")
                                                                       else "fwd")
            key = (op.record if self.simai is not None else op.layer, column)
            if op.kind == COMPUTE:
                compute[key] += d
            else:
                comms[key].append((d, d if op.kind != ASYNC else 0.0, op))
        return compute, comms

    def _simai_layers(self, script, table, t) -> list[LayerResult]:
        compute, comms = self._per_op_columns(script, table, t)
        out = []
        for index, r in enumerate(self.simai.records):
            columns = []
            exposed_ns = []
            for column in ("fwd", "ig", "wg"):
                token, size = getattr(r, f"{column}_comm"), getattr(r, f"{column}_size_bytes")
                entries = comms.get((index, column), [])
                comm_type, group = classify(token, column)
                if entries:
                    op = entries[0][2]
                    cost, shape = self.cost(script.stage, op)
                    time_ns = int(round(cost.time_s * 1e9))
                    n = shape.n
                    how = f"{cost.algorithm}/{cost.protocol}" if cost.algorithm != "none" else "none"
                else:
                    time_ns, n, how = 0, 0, "none"
                algbw, busbw = report_bandwidths(comm_type, max(n, 1), size, time_ns)
                model_bw = busbw if time_ns else None
                columns.append(CollectiveCost(token, comm_type, group, n, size, time_ns, how, 1.0, model_bw, algbw, busbw))
                exposed_ns.append(int(round(sum(e for _, e, _ in entries) * 1e9)))
            fwd, ig, wg = columns
            out.append(LayerResult(index, r.name, int(round(compute.get((index, "fwd"), 0.0) * 1e9)),
                                   int(round(compute.get((index, "ig"), 0.0) * 1e9)),
                                   int(round(compute.get((index, "wg"), 0.0) * 1e9)), fwd, ig, wg,
                                   exposed_ns[0], exposed_ns[1], exposed_ns[2],
                                   "EP" if fwd.group == "EP" else "TP", "DP_EP" if wg.group == "DP_EP" else "DP"))
        return out

    def _workload_layers(self, script, table, t) -> list[LayerResult]:
        compute, comms = self._per_op_columns(script, table, t)
        names = list(dict.fromkeys([k[0] for k in compute] + [k[0] for k in comms]))
        out = []
        for index, name in enumerate(names):
            columns = []
            exposed_ns = []
            for column in ("fwd", "ig", "wg"):
                entries = comms.get((name, column), [])
                columns.append(_aggregate_cost(entries))
                exposed_ns.append(int(round(sum(e for _, e, _ in entries) * 1e9)))
            fwd, ig, wg = columns
            out.append(LayerResult(index, name, int(round(compute.get((name, "fwd"), 0.0) * 1e9)),
                                   int(round(compute.get((name, "ig"), 0.0) * 1e9)),
                                   int(round(compute.get((name, "wg"), 0.0) * 1e9)), fwd, ig, wg,
                                   exposed_ns[0], exposed_ns[1], exposed_ns[2],
                                   "EP" if fwd.group == "EP" else "TP", "DP_EP" if wg.group == "DP_EP" else "DP"))
        return out


_SIMAI_LABEL = {"tp_group": "TP", "ep_tp_group": "TP", "ep_group": "EP", "dp_group": "DP", "ep_dp_group": "DP_EP"}


def _aggregate_cost(entries: list) -> CollectiveCost:
    """One EndToEnd comm column for a layer of our workloads: the sum of its collectives (token
    ``+``-joined types; algbw in GiB/s of the summed bytes over the summed time, busbw the same, as
    the collectives mix group sizes)."""
    if not entries:
        return CollectiveCost("NONE", None, "", 0, 0, 0, "none", 1.0, None, math.nan, 0.0)
    types = sorted({op.comm_type for _, _, op in entries})
    groups = sorted({_SIMAI_LABEL.get(op.group, "OTHER") for _, _, op in entries})
    size = sum(op.size for _, _, op in entries)
    time_ns = int(round(sum(d for d, _, _ in entries) * 1e9))
    comm_type = types[0] if len(types) == 1 else None
    group = groups[0] if len(groups) == 1 else "+".join(groups)
    algbw = size / 2**30 / (time_ns * 1e-9) if time_ns else (math.nan if size == 0 else math.inf)
    return CollectiveCost("+".join(types), comm_type, group, 0, size, time_ns, "sum", 1.0, None, algbw, algbw)


def _stage_list(stages: set[int]) -> str:
    ordered = sorted(stages)
    if len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}-{ordered[-1]}"
    return " ".join(map(str, ordered))


def trace_intervals(scripts, compiled, played: engine.EngineResult) -> list[engine.Interval]:
    """Every interval of the iteration: F/B programs expanded at their start times, p2p calls,
    gradient buckets, step-program ops."""
    out: list[engine.Interval] = []
    Interval = engine.Interval
    for script, table, t in zip(scripts, compiled, played.stages):
        s = script.stage
        for start, step_index, mb, _chunk in t.runs:
            program = script.programs[step_index]
            cp = table[id(program)]
            for offset, d, stream, cat, name, layer in cp.intervals:
                if d > 0:
                    out.append(Interval(s, stream, start + offset, d, cat, name, layer, mb))
        out.extend(i for i in t.extra if i.duration_s > 0)
        for g_start, g_end, cat, step_index, op_index in t.grad_instances:
            op = script.programs[step_index].ops[op_index]
            if g_end > g_start:
                out.append(Interval(s, "grad sync", g_start, g_end - g_start, cat, op.name, op.layer,
                                    script.steps[step_index].microbatch))
    return out


def run_topo(workload: Any, topology: Any, options: TopoOptions | None) -> SimulationResult:
    """``--model topo`` from any accepted workload input and a topology (path, Topology or None)."""
    options = options or TopoOptions()
    if not isinstance(options, TopoOptions):
        raise TypeError(f"the topo model takes TopoOptions, got {type(options).__name__}")
    scripts, job, gpus, path, simai = load_scripts(workload, options)
    fabric, links, notes = build_fabric(topology, options, gpus)
    return TopoModel(scripts, fabric, links, options, path, simai, notes, job).run()


__all__ = ["TopoModel", "run_topo", "build_fabric", "load_scripts", "peak_tflops"]

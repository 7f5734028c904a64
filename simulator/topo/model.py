"""``--model topo``: our topology-aware model (docs/sim_model.md), from either input to a result.

1. Stage scripts (:mod:`simulator.topo.programs`) from a SimAI workload file or from our per-stage
   Megatron workloads.
2. Placement (:mod:`simulator.topo.fabric`): rank r on GPU r; groups from the RankGenerator
   (``ParallelConfig.group_ranks``), one representative group per stage (tp rank 0, dp rank 0), whose
   shape (servers, members per server, tier, latencies, congestion) prices every collective.
3. Costs (:mod:`simulator.topo.collectives`): NCCL's alpha-beta model, each distinct (group shape,
   collective, size) costed once.
4. The engine (:mod:`simulator.topo.engine`) plays the schedule across stages.
5. Results: the iteration time, per stage terms, the EndToEnd terms of the busiest stage (least
   bubble) in SimAI's layout, per-layer and per-collective tables, MFU, and the trace intervals.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from simulator.options import TopoOptions
from simulator.repeat import RepeatedLayers, repeat_sum
from simulator.result import CollectiveCost, LayerResult, SimulationResult, Totals
from simulator.simai.model import report_bandwidths
from simulator.topo import engine
from simulator.topo.collectives import NIC_EFFICIENCY, NVLINK_EFFICIENCY, Cost, LinkModel, collective_cost, p2p_cost
from simulator.topo.fabric import DerivedFabric, TopologyFabric
from simulator.topo.programs import (
    ASYNC,
    COMM,
    COMPUTE,
    GRAD,
    GRAD_WAIT,
    SYNC,
    BlockProgram,
    Op,
    Scripts,
    scripts_from_generators,
    scripts_from_simai,
    scripts_from_workloads,
)
from simulator.topo.result import CollectiveRecord, Interval, LayerTimes, StageResult, TopoDetails
from utils.errors import ConfigError
from utils.progress import progress
from workload_generator.simai_tokens import classify


def peak_tflops(options: TopoOptions, gpu_type: str | None) -> float | None:
    """The MFU's peak: ``--peak_tflops``, else the dense bf16 peak of the GPU type in the compute model's
    table (the convention of published MFU figures, FP8 runs included); None for an unknown type."""
    if options.peak_tflops is not None:
        return options.peak_tflops
    from mocked_model.compute import gpu_spec, known_gpu

    return gpu_spec(gpu_type).bf16_tflops if known_gpu(gpu_type) else None


def hardware_peak_tflops(options: TopoOptions, gpu_type: str | None, job: Any = None) -> float | None:
    """The peak the hardware FLOPs utilisation divides by: the dense peak of the precision the job's GEMMs run in
    (FP8 under ``--dtype float8``, else bf16), so that it can never exceed 1; ``--peak_tflops`` when given."""
    if options.peak_tflops is not None:
        return options.peak_tflops
    from mocked_model.compute import gpu_spec, known_gpu

    if not known_gpu(gpu_type):
        return None
    spec = gpu_spec(gpu_type)
    if job is not None and job.training.fp8 and spec.fp8_tflops:
        return spec.fp8_tflops
    return spec.bf16_tflops


def comm_sm_share(options: TopoOptions, gpu_type: str | None) -> float:
    """The share of a GPU's SMs an overlapped collective takes from the compute it overlaps: the GPU
    table's (:func:`mocked_model.compute.gpus.nccl_sm_share`), 0 for an unknown GPU type."""
    from mocked_model.compute import known_gpu
    from mocked_model.compute.gpus import nccl_sm_share

    return nccl_sm_share(gpu_type) if known_gpu(gpu_type) else 0.0


def build_fabric(topology: Any, options: TopoOptions, gpus: int, fabrics: dict | None = None,
                 ) -> tuple[Any, LinkModel, list[str]]:
    """The fabric and link model: a topology (path or :class:`topo.Topology`) or the derived two-tier one.
    ``fabrics`` (a session's cache) keeps the fabric of each topology and rank count, with its placement,
    group shapes and routes, across calls."""
    notes: list[str] = []
    if topology is None:
        gps = options.gpus_per_server
        if gps is None:
            raise ConfigError("--model topo needs -t/--topology FILE, or -g_p_s/--gpus_per_server (with -n_p_s, -nv, "
                              "-nic) to derive a two-tier fabric")
        if gpus % gps:
            raise ConfigError(f"-g {gpus} GPUs is not a multiple of -g_p_s {gps} GPUs per server")
        nps = options.nics_per_server or gps
        key = ("derived", gpus, gps, nps, options.nvlink_gibps, options.nic_gibps, options.gpu_type)
        fabric = fabrics.get(key) if fabrics is not None else None
        if fabric is None:
            fabric = DerivedFabric(gpus, gps, nps, options.nvlink_gibps * 2**30, options.nic_gibps * 2**30,
                                   options.gpu_type)
            if fabrics is not None:
                fabrics[key] = fabric
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
    key = (id(topo), gpus)
    fabric = fabrics.get(key) if fabrics is not None else None
    if fabric is None or fabric.topology is not topo:
        from topo.hierarchy import needs_hierarchy

        if needs_hierarchy(topo):  # PCIe switches and shared NICs inside the servers, or NICs of several rates (issue 30)
            from simulator.topo.placed_fabric import HierarchyFabric

            fabric = HierarchyFabric(topo, gpus)
        else:
            fabric = TopologyFabric(topo, gpus)
        if fabrics is not None:
            fabrics[key] = fabric
    return fabric, links, notes


def nvlink_efficiency(gpu_type: str | None) -> float:
    """NCCL's modelled share of the nominal NVLink rate for the GPU's generation (the GPU table's
    ``nvlink_efficiency``), or :data:`simulator.topo.collectives.NVLINK_EFFICIENCY` for an unknown type."""
    from mocked_model.compute import gpu_spec, known_gpu

    return gpu_spec(gpu_type).nvlink_efficiency if known_gpu(gpu_type) else NVLINK_EFFICIENCY


def load_scripts(workload: Any, options: TopoOptions, prices: dict | None = None,
                 shorten: bool = True) -> tuple[Scripts, Any, int, str, Any]:
    """(scripts, job or None, gpus, workload path, the SimAI workload or None) from any accepted input:
    a :class:`SimAIWorkload`, a path to one, a ``JobConfig``, or a list of per-stage Workloads.
    ``prices``: the compute model's prices a session keeps across jobs; ``shorten``: a job's long 1F1B
    schedule may be built short of its middle cycles (see :data:`SHORT_CYCLES`)."""
    from utils.config import JobConfig
    from workload_generator.simai import SimAIWorkload

    if isinstance(workload, JobConfig):
        return _job_scripts(workload, options, prices, shorten)
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
        # the model never changes a record; records kept as columns (a file of 10^6 distinct records in 60 MB)
        workload = SimAIWorkload.read(workload, strict=False, share=True, columns=True)
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
    for name in ("compute_time_ns", "compute_source"):
        if getattr(options, name) is not None:
            raise ConfigError(f"TopoOptions.{name} prices the computation items of a job or of our workloads; the "
                              f"records of {workload.path} carry their own compute times and no operation shapes "
                              "(simulate the JobConfig instead, or regenerate the file with --gpu_type)")
    scripts.warnings[:0] = workload.warnings + workload.placeholder_warning()
    return scripts, None, gpus, workload.path, workload


def _job_scripts(job: Any, options: TopoOptions, prices: dict | None = None,
                 shorten: bool = True) -> tuple[Scripts, Any, int, str, None]:
    """Scripts of every pipeline stage of a Megatron job, straight from its generators; computation
    times from ``options.compute_time_ns``, else from the job's compute source (the compute model for
    its ``gpu_type``, its ``comp_filepath``, or AIOB with ``aiob_enable``).

    Stages with the same :meth:`~workload_generator.generator.WorkloadGenerator.stage_signature` (a
    pipeline's middle stages) share one generator and its programs, their layers renumbered; the
    compute model prices each distinct operation once (``prices``: a cache a session keeps across
    jobs)."""
    from dataclasses import replace

    from workload_generator.compute_times import ALIASES, default_source, fill_job_times
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
    full_job, insert = job, 0
    p = job.parallel
    if shorten and p.pp > 1 and not p.interleaved and p.ga > p.pp + SHORT_CYCLES:
        # the middle micro-batches run the same programs: build pp + SHORT_CYCLES of them, and the engine
        # inserts the others once a cycle repeats
        short = p.pp + SHORT_CYCLES
        insert = p.ga - short
        job = replace(job, parallel=replace(p, global_batch=p.global_batch // p.ga * short))
    from workload_generator.limits import check_layers

    check_layers(job)  # before the stage signatures walk every layer (--num_layers 1e12 ran for ever there)
    gens = stage_generators(job, generator_for)
    hook = options.compute_time_ns
    warnings: list[str] = []
    host = None
    if hook is None:
        source = default_source(job, options.compute_source, model_default=True)
        if source == "placeholder":
            raise ConfigError("simulating a job needs computation times: give --gpu_type (the compute model), "
                              "--comp_filepath FILE or --aiob_enable")
        # the compute model's GPU times, issued by the host model (simulator/topo/host_model.py); measured times (AIOB, a
        # compute file) come as they were timed
        engine_host = ALIASES.get(source, source) == "model"
        report = fill_job_times(_distinct_items(gens, job), job, source, prices=prices, engine_host=engine_host)
        if report.warning():
            warnings.append(report.warning())
        if engine_host:
            from simulator.topo.host_model import job_host_hook

            host = job_host_hook(job)
    scripts = scripts_from_generators(gens, job, hook, options.overlap_grad_reduce, job.training.tp_comm_overlap,
                                      host=host)
    scripts.warnings[:0] = warnings
    scripts.insert = insert
    scripts.layout["ga"] = full_job.parallel.ga
    p = full_job.parallel
    cp = f" cp{p.cp}" if p.cp > 1 else ""
    return scripts, full_job, gpus, f"{full_job.model.name} tp{p.tp}{cp} pp{p.pp} dp{p.dp}", None


def stage_generators(job: Any, make: Callable[[Any, int], Any]) -> list:
    """One generator per pipeline stage, shared by the stages with the same stage signature (built
    for the first of them)."""
    from workload_generator.entry import generator_class

    signature = generator_class(job).stage_signature
    by_signature: dict[object, Any] = {}
    gens = []
    for stage in progress(range(job.parallel.pp), desc="building stages", unit="stage"):
        key = signature(job, stage)
        gen = by_signature.get(key) if key is not None else None
        if gen is None:
            gen = make(job, stage)
            if key is not None:
                by_signature[key] = gen
        gens.append(gen)
    return gens


def _distinct_items(generators: Sequence, job: Any = None) -> list:
    """Every distinct item object of one iteration of each stage (each distinct step once; a generator
    that serves several stages gives the steps of each of their schedules)."""
    from workload_generator.schedules import pipeline_schedule

    seen: dict[int, Any] = {}
    keys: dict[int, set] = {}
    rests: set[int] = set()
    for stage, gen in enumerate(generators):
        own = job is None or getattr(gen, "pp_rank", stage) == stage
        p = job.parallel if job is not None else None
        steps = gen.schedule() if own else pipeline_schedule(p.pp, stage, p.ga, len(gen.layer_ranges()) or 1)
        done = keys.setdefault(id(gen), set())
        for step in steps:
            key = gen.step_key(step)
            if key is not None and key in done:
                continue
            done.add(key)
            for item in gen.step_items(step):
                seen.setdefault(id(item), item)
        if id(gen) not in rests:
            rests.add(id(gen))
            rest: list = []
            gen.step(rest)
            for item in rest:
                seen.setdefault(id(item), item)
    return list(seen.values())


class NoPeriod(Exception):
    """A shortened schedule (:data:`SHORT_CYCLES`) reached no repeating steady cycle to insert the rest at."""


SHORT_CYCLES = 6
"""Steady 1F1B cycles the first stage plays when a job's schedule is shortened: a job's micro-batches
between the first and the last run the same programs, so :func:`_job_scripts` builds ``pp + 6`` of them
and the engine inserts the others once a cycle repeats (:func:`simulator.topo.engine.run`'s ``insert``)."""


class TopoModel:
    """One ``--model topo`` simulation: scripts on a fabric.  :meth:`run` returns the result."""

    def __init__(self, scripts: Scripts, fabric: Any, links: LinkModel, options: TopoOptions, path: str,
                 simai_workload: Any = None, notes: Sequence[str] = (), job: Any = None, costs: dict | None = None) -> None:
        from utils.parallel import ParallelConfig

        self.scripts, self.fabric, self.links, self.options, self.path = scripts, fabric, links, options, path
        self.job = job
        self.simai = simai_workload
        self.warnings = list(scripts.warnings) + list(notes)
        lay = scripts.layout
        self.pp = lay["pp"]
        self.world = lay["world"]
        self.pconf = ParallelConfig(world_size=lay["world"], tp=lay["tp"], pp=lay["pp"], ep=lay["ep"],
                                    etp=lay.get("etp"), order=lay.get("order", "tp-cp-ep-dp-pp"), cp=lay.get("cp", 1),
                                    hierarchical_cp=lay.get("hierarchical_cp"),
                                    embedding_stages=lay.get("embedding_stages"))
        rg = self.pconf.rank_generator()
        self.rep = [rg.rank_at(pp=s) for s in range(self.pp)]
        from simulator.topo.placed_fabric import bind_fabric

        # a placement (--placement) or servers with PCIe switches: the fabric that knows where every rank sits
        self.fabric = fabric = bind_fabric(fabric, self.pconf, options, links)
        self._members: dict[tuple[str, int], Sequence[int]] = {}
        self._shapes: dict[tuple[str, int], Any] = {}
        # a profile answers instead of NCCL's model, so its costs must not mix with a session's NCCL costs
        shared = costs is not None and options.profile is None
        self._costs: dict[tuple[Any, str, int, LinkModel], Cost] = costs if shared else {}
        """NCCL's cost of each (group shape, collective, size, link model): a session's, across jobs."""
        self._stage_costs: dict[tuple[int, str, str, int], tuple[Cost, Any]] = {}
        self._op_counts: dict[int, Counter] = {}
        self._p2p: dict[tuple[int, str, int], tuple[Cost, Any]] = {}
        self._deepep: dict[tuple[str, str, int], tuple] = {}
        """(group, type, size) of DeepEP's ops -> their :attr:`Op.deepep` (priced by :mod:`simulator.topo.moe_comm`)."""
        self.gpu_name = (job.training.gpu_type if job is not None else None) or getattr(fabric, "gpu_type", None)
        """The GPU the job runs on (its ``--gpu_type``, else the topology's): the MFU's peak, NCCL's SM share."""
        from mocked_model.compute import known_gpu

        topo_gpu = getattr(fabric, "gpu_type", None)
        if (job is not None and job.training.gpu_type and topo_gpu and known_gpu(topo_gpu)
                and job.training.gpu_type.upper() != str(topo_gpu).upper()):
            # compute follows --gpu_type, links follow the file: say so rather than mix them silently (issue 28, 21)
            self.warnings.append(f"--gpu_type {job.training.gpu_type} differs from the topology's GPU {topo_gpu}: compute "
                                 f"is priced on the {job.training.gpu_type}, NVLink and NICs are the file's")
        self.contention = comm_sm_share(options, self.gpu_name)
        # --profile: collectives and p2p transfers are asked of the measured profile first (simulator.profiles.measured)
        self.collective_cost = options.profile.collective_cost if options.profile is not None else collective_cost
        self.p2p_cost = options.profile.p2p_cost if options.profile is not None else p2p_cost

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
            kinded = getattr(self.fabric, "group_shape_kind", None)  # a fabric that shares links among a kind's groups
            members = self.members(group, stage)
            shape = self._shapes[key] = kinded(members, group) if kinded else self.fabric.group_shape(members)
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
            spec = self._deepep.get((group, comm_type, size))
            if spec is not None:  # DeepEP's fused dispatch / combine (simulator.topo.moe_comm), not NCCL's all-to-all
                from simulator.topo.moe_comm import deepep_time_s

                t = deepep_time_s(spec[0], spec[1:], shape, self.links)
                cost = Cost(t, "deepep", spec[0], size / t * (shape.n - 1) / shape.n if t > 0 else 0.0)
                hit = self._stage_costs[key] = (cost, shape)
                return hit
            shape_key = (shape, comm_type, size, self.links)
            cost = self._costs.get(shape_key)
            if cost is None:
                cost = self._costs[shape_key] = self.collective_cost(comm_type, size, shape, self.links)
            hit = self._stage_costs[key] = (cost, shape)
        return hit

    def op_time(self, stage: int, op: Op) -> float:
        """Seconds of one op (compute: its ns; collectives: NCCL's cost, DeepEP's for its dispatch and combine),
        times the op's scale."""
        if op.kind == COMPUTE:
            return op.compute_ns * 1e-9 * op.scale
        if op.kind == GRAD_WAIT or not op.comm_type:
            return 0.0
        if op.deepep:
            self._deepep[(op.group, op.comm_type, op.size)] = op.deepep
        return self.comm_cost(stage, op.group, op.comm_type, op.size)[0].time_s * op.scale

    def p2p(self, stage: int, op: str, size: int) -> tuple[Cost, Any]:
        key = (stage, op, size)
        hit = self._p2p.get(key)
        if hit is None:
            peer = (stage + 1) % self.pp if op.endswith("next") else (stage - 1) % self.pp
            a, b = (self.rep[stage], self.rep[peer]) if op.startswith("send") else (self.rep[peer], self.rep[stage])
            route = self.fabric.p2p_shape(a, b)
            cost = self.p2p_cost(size, route.same_server, route.bottleneck_Bps, route.latency_s, self.links, route.congestion)
            hit = self._p2p[key] = (cost, route)
        return hit

    # ---- the run ----------------------------------------------------------------------------------

    def run(self) -> SimulationResult:
        scripts = self.scripts.stages
        training = getattr(self.job, "training", None)
        if training is not None and training.overlap_moe_expert_parallel_comm:
            # Megatron's combined 1F1B: each step pair's expert all-to-alls hide behind the other's compute
            from mocked_model.compute.gpus import NCCL_CHANNELS
            from simulator.topo.moe_comm import DEEPEP_SMS
            from simulator.topo.moe_overlap import overlap_moe_a2a

            share = self.contention if training.moe_token_dispatcher_type != "flex" else \
                min(self.contention * DEEPEP_SMS / NCCL_CHANNELS, 0.5)
            scripts = overlap_moe_a2a(scripts, self.op_time, share, training.delay_wgrad_compute)
        compiled: list[dict[int, engine.CompiledProgram]] = []
        occurrences: list[Counter] = []
        if self.simai is not None:  # a SimAI file's blocks are compiled one by one and kept compact (topo_stream.py)
            from simulator.topo.stream import compile_simai

            compiled, occurrences = compile_simai(self, scripts)
        distinct = [dict(zip(map(id, script.programs), script.programs)) for script in scripts if self.simai is None]
        for table in distinct:
            table.pop(id(None), None)
        groups = sorted({op.group for table in distinct for program in table.values() for op in program.ops if op.group})
        shared: dict[tuple, engine.CompiledProgram] = {}
        for script, programs in zip(scripts, distinct):
            s = script.stage
            # stages whose groups have the same shapes share compiled programs (SimAI files: every stage),
            # and so do programs whose ops take the same times on two stages
            signature = tuple(self.shape(g, s) for g in groups)
            table: dict[int, engine.CompiledProgram] = {}
            counts: Counter = Counter(map(id, script.programs))
            counts.pop(id(None), None)
            for pid, program in programs.items():
                key = (pid, signature)
                cp = shared.get(key)
                if cp is None:
                    durations = [self.op_time(s, op) for op in program.ops]
                    same_times = (pid, tuple(durations))
                    cp = shared.get(same_times)
                    if cp is None:
                        cp = shared[same_times] = engine.compile_program(program, durations, self.contention)
                    shared[key] = cp
                table[pid] = cp
            compiled.append(table)
            occurrences.append(counts)

        def members_of(group: str) -> Sequence[int]:
            return list(self.pconf.embedding_group_stages()) if group == "embedding_group" else range(self.pp)

        from simulator.topo.param_gather import stage_plans

        # --overlap_param_gather: the first forward of each chunk waits for its buckets' all-gathers (aligned across
        # stages with the interleaved schedule, Megatron's default --align-param-gather)
        gathers = stage_plans(scripts, self.op_time, self.contention, aligned=self.scripts.layout.get("chunks", 1) > 1)
        insert = self.scripts.insert
        # a SimAI file whose blocks all differ has no two cycles alike: played straight through (what it would come to)
        straight = {} if self.simai is None or any(p is not None and not isinstance(p, BlockProgram)
                                                   for script in scripts for p in script.programs) else {"extrapolate": False}
        played = engine.run(scripts, compiled, lambda s, op, size: self.p2p(s, op, size)[0].time_s, self.op_time, members_of,
                            insert=insert, param_gathers=gathers, **straight)
        if insert and not played.inserted:
            raise NoPeriod
        fill = None
        if self.options.fill_bubbles:  # --fill_bubbles: play again with each stage's own step work in its bubble
            from simulator.topo.bubble_fill import fill_report, fill_scripts

            filled = fill_scripts(scripts)
            after = engine.run(filled, compiled, lambda s, op, size: self.p2p(s, op, size)[0].time_s, self.op_time,
                               members_of, insert=insert, param_gathers=gathers)
            if insert and not after.inserted:
                raise NoPeriod
            fill = (played.iteration_s * 1e6, fill_report(played, after))
            scripts, played = filled, after
        flops = [script.flops for script in scripts]
        hw = [script.hw_flops for script in scripts]
        extra_steps: list[Counter] = [Counter() for _ in scripts]
        if insert:  # the schedules are short of `insert` steady cycles: count them in
            for i, (script, t) in enumerate(zip(scripts, played.stages)):
                r = t.repeat
                cycle = range(r.first_step, r.first_step + r.steps)
                for k in cycle:
                    program = script.programs[k]
                    if program is not None:
                        occurrences[i][id(program)] += r.times
                        if flops[i] is not None:
                            flops[i] += r.times * program.work
                        if hw[i] is not None:
                            hw[i] += r.times * program.hw_work
                    extra_steps[i][k] = r.times
        iteration_s = played.iteration_s
        stages = [self._stage_result(t, played.iteration_s, flops[t.stage]) for t in played.stages]
        reported = min(range(len(stages)), key=lambda s: (stages[s].bubble_us, s))
        layer_times = self._layer_times(scripts, compiled, occurrences, played)
        collectives = self._collectives(scripts, occurrences, extra_steps)
        peak = peak_tflops(self.options, self.gpu_name)
        model_flops = hardware_flops = mfu = hfu = None
        missing = any("computation items have no time" in w for w in self.warnings)
        if hw and all(f is not None for f in hw):
            hardware_flops = sum(hw) * (self.world // self.pp)  # type: ignore[arg-type]
        if self.job is not None or (flops and all(f is not None for f in flops)):
            if self.job is not None:  # Megatron's formula, the convention of published MFU figures
                from mocked_model.flops import model_flops as megatron_flops

                model_flops = megatron_flops(self.job)
            else:
                model_flops = sum(flops) * (self.world // self.pp)  # type: ignore[arg-type]
            if peak and iteration_s > 0 and not missing:
                mfu = model_flops / (iteration_s * self.world * peak * 1e12)
        gemm_peak = hardware_peak_tflops(self.options, self.gpu_name, self.job)
        if hardware_flops is not None and gemm_peak and iteration_s > 0 and not missing:
            hfu = hardware_flops / (iteration_s * self.world * gemm_peak * 1e12)
        st = stages[reported]
        dp_us = st.dp_exposed_us + st.other_exposed_us
        # SimAI's EndToEnd layout has no CP column: context parallelism's exposed time joins TP's there (the stage
        # table keeps it apart)
        tp_us = st.tp_exposed_us + st.cp_exposed_us
        exposed_us = dp_us + st.dp_ep_exposed_us + tp_us + st.ep_exposed_us
        totals = Totals(dp_us, st.dp_ep_exposed_us, tp_us, st.ep_exposed_us, st.pp_exposed_us, st.bubble_us,
                        st.compute_us, exposed_us, iteration_s * 1e6)
        layers = self._simai_layers(scripts[reported], compiled[reported], played.stages[reported]) \
            if self.simai is not None else self._workload_layers(scripts[reported], compiled[reported], played.stages[reported])

        def intervals() -> list[Interval]:
            return trace_intervals(scripts, compiled, played)

        details = TopoDetails(iteration_s * 1e6, reported, stages, collectives, layer_times, mfu, model_flops, peak,
                              intervals, hardware_flops=hardware_flops, hfu=hfu, hfu_peak_tflops=gemm_peak, bubble_fill=fill)
        lay = self.scripts.layout
        setup = dict(
            tp=lay["tp"], ep=lay["ep"], pp=lay["pp"], dp=lay["dp"], ga=lay["ga"], vpp=lay.get("vpp", lay["chunks"]),
            chunks=lay["chunks"], gpus=self.world, gpus_per_server=self.fabric.gpus_per_server, fabric=self.fabric.description,
            nvlink_efficiency=self.links.nvlink_efficiency, nic_efficiency=self.links.nic_efficiency,
            latency_scale=self.links.latency_scale, source=self.scripts.source, reported_stage=reported,
            overlap_grad_reduce=self.options.overlap_grad_reduce, tp_comm_overlap=self.options.tp_comm_overlap,
            mfu=mfu, peak_tflops=peak, cp=lay.get("cp", 1),
        )
        memory = None
        if self.job is not None:
            from mocked_model.memory import estimate_memory

            memory = estimate_memory(self.job, self.job.training.gpu_type or self.fabric.gpu_type)
            if memory.warning():
                self.warnings.append(memory.warning())
        return SimulationResult("topo", self.path, layers, totals, setup, list(dict.fromkeys(self.warnings)), details,
                                memory)

    # ---- result tables ----------------------------------------------------------------------------

    def _stage_result(self, t: engine.StageTimes, iteration_s: float, flops: float | None) -> StageResult:
        e, c = t.exposed_s, t.comm_s
        return StageResult(
            t.stage, t.compute_s * 1e6, e["TP"] * 1e6, e["EP"] * 1e6, e["DP"] * 1e6, e["DP_EP"] * 1e6, e["PP"] * 1e6,
            e["other"] * 1e6, engine.bubble_s(t, iteration_s) * 1e6, t.end_s * 1e6, c["TP"] * 1e6, c["EP"] * 1e6,
            c["DP"] * 1e6, c["DP_EP"] * 1e6, c["PP"] * 1e6, flops, e["CP"] * 1e6, c["CP"] * 1e6, e["host"] * 1e6)

    def _grad_exposure(self, t: engine.StageTimes) -> dict[tuple[int, int], float]:
        """Exposed seconds of each gradient bucket instance, keyed by (step index, op index)."""
        out: dict[tuple[int, int], float] = {}
        if t.grad_wait_s is None:
            return out
        for start, end, _cat, step_index, op_index in t.all_grad_instances():
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
                    a = acc[script.layer(layer)]
                    a[0 if fwd else 1] += comp * n
                    a[2] += comm * n
                    a[3] += exposed * n
            exposure = self._grad_exposure(t)
            for (step_index, op_index), seconds in exposure.items():
                program = script.programs[step_index]
                acc[script.layer(program.ops[op_index].layer)][3] += seconds
            for op in script.step_program.ops:
                if op.kind == GRAD_WAIT:
                    continue
                d = self.op_time(script.stage, op)
                a = acc[script.layer(op.layer)]
                if op.kind == COMPUTE:
                    a[1] += d
                else:
                    a[2] += d
                    a[3] += d if op.kind != ASYNC else 0.0
            for layer, (f, b, comm, exposed) in acc.items():
                rows.append(LayerTimes(script.stage, layer, f * 1e6, b * 1e6, comm * 1e6, exposed * 1e6))
        return rows

    def _collectives(self, scripts, occurrences, extra_steps=None) -> list[CollectiveRecord]:
        """Every distinct collective with its count per iteration (``extra_steps[stage]``: step index ->
        how many more times the step runs than the schedule lists, for inserted cycles)."""
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
            steps = dict(zip(map(id, script.steps), script.steps))
            p2p_counts = Counter(zip(map(id, script.steps), script.p2p_sizes))
            for k, times in (extra_steps[script.stage] if extra_steps else {}).items():
                p2p_counts[(id(script.steps[k]), script.p2p_sizes[k])] += times
            for (step_id, sizes), n in p2p_counts.items():
                if sizes is None:
                    continue
                for op, size in zip(steps[step_id].ops, sizes):
                    if not op.startswith("send"):
                        continue
                    cost, route = self.p2p(script.stage, op, size)
                    key = ("pp_group", op, size, route)
                    entry = counts.setdefault(key, [cost, 0, set()])
                    entry[1] += n
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

    def _per_op_columns(self, script, table, t, microbatches: set[int] | None = None) -> tuple[dict, dict]:
        """For the reported stage: per (layer key or record, column) compute seconds and comm entries
        ``(seconds, exposed seconds, op, occurrences)``, over every F/B step of the iteration (the
        extrapolated cycles of :attr:`engine.StageTimes.repeat` added as one entry per op, their compute
        summed as the unrolled steps would add it)."""
        compute: dict[tuple, float] = defaultdict(float)
        comms: dict[tuple, list] = defaultdict(list)
        exposure = self._grad_exposure(t)
        simai = self.simai is not None

        shifts = script.record_shift
        laid_out: dict[tuple[int, int], list[tuple]] = {}

        def ops_of(step_index: int) -> list[tuple]:
            """(op index, op, seconds, key) of a step's program (keys shifted to its records), once per
            program and shift."""
            program = script.programs[step_index]
            shift = shifts[step_index] if shifts is not None else 0
            found = laid_out.get((id(program), shift))
            if found is None:
                found = laid_out[(id(program), shift)] = [
                    (op_index, op, d, (op.record + shift if simai else script.layer(op.layer),
                                       op.phase if op.phase in ("fwd", "ig", "wg") else ("fwd" if program.kind == "F" else "ig")))
                    for op_index, (op, d) in enumerate(zip(program.ops, table[id(program)].durations))]
            return found

        def play(runs) -> None:
            for _start, step_index, _mb, _chunk in runs:
                for op_index, op, d, key in ops_of(step_index):
                    kind = op.kind
                    if kind == COMPUTE:
                        compute[key] += d
                        continue
                    if kind == GRAD:
                        exposed = exposure.get((step_index, op_index), 0.0)
                        key = (key[0], "wg")
                    elif kind == COMM or kind == SYNC:
                        exposed = d
                    else:
                        exposed = 0.0
                    comms[key].append((d, exposed, op, 1))

        r = t.repeat
        if microbatches is not None:  # only these micro-batches' steps (their blocks stand for the others)
            play(run for run in t.all_runs() if run[2] in microbatches)
        elif r is None:
            play(t.runs)
        elif shifts is not None:  # the repeated micro-batches are other records: play them out
            play(t.all_runs())
        else:
            lo, hi = r.runs_span
            play(t.runs[:hi])
            addends: dict[tuple, list[float]] = defaultdict(list)
            for _start, step_index, _mb, _chunk in t.runs[lo:hi]:
                for op_index, op, d, key in ops_of(step_index):
                    if op.kind == COMPUTE:
                        addends[key].append(d)
                    elif op.kind == GRAD:
                        exposed = sum(exposure.get((step_index + k * r.step_shift, op_index), 0.0)
                                      for k in range(1, r.times + 1))
                        comms[(key[0], "wg")].append((d * r.times, exposed, op, r.times))
                    else:
                        comms[key].append((d * r.times, d * r.times if op.kind in (COMM, SYNC) else 0.0, op, r.times))
            for key, values in addends.items():
                compute[key] = repeat_sum(compute[key], values, r.times)
            play(t.runs[hi:])
        for op in script.step_program.ops:
            if op.kind == GRAD_WAIT:
                continue
            d = self.op_time(script.stage, op)
            column = op.phase if op.phase in ("fwd", "ig", "wg") else ("wg" if op.group in ("dp_group", "ep_dp_group")
                                                                       else "fwd")
            key = (op.record if self.simai is not None else script.layer(op.layer), column)
            if op.kind == COMPUTE:
                compute[key] += d
            else:
                comms[key].append((d, d if op.kind != ASYNC else 0.0, op, 1))
        return compute, comms

    def _simai_layers(self, script, table, t) -> RepeatedLayers:
        """One EndToEnd row per record of the SimAI file, for the reported stage.  Rows alike share one
        :class:`LayerResult` and its costs; micro-batch blocks that share programs (record for record
        alike) are costed from their template block, each keeping its own gradient buckets' exposure,
        and consecutive blocks of the same rows are held once (:class:`simulator.repeat.RepeatedLayers`); when
        blocks that no other micro-batch repeats hold thousands of records, the rows are computed a few thousand
        records at a time as they are read (:class:`simulator.topo.stream.StreamedLayers`, the same values)."""
        from simulator.topo.stream import shifted_rows, simai_layers

        streamed = simai_layers(self, script, table, t)
        if streamed is not None:
            return streamed
        records = self.simai.records
        shifts = script.record_shift
        ga = self.scripts.layout["ga"]
        found = None
        if shifts is not None:
            from simulator.repeat import find_blocks

            found = find_blocks([r.name for r in records], ga)
        if found is None:
            compute, comms = self._per_op_columns(script, table, t)
            out = self._simai_rows(script, compute, comms, range(len(records)), {}, {})
            return RepeatedLayers(_repeated_parts(out, records, ga), _reindexed)
        first, length = found
        steps = script.steps
        backward: dict[int, int] = {}
        forward: dict[int, int] = {}
        for i, st in enumerate(steps):
            if st.kind == "B":
                backward[st.microbatch] = i
            elif st.kind == "F":
                forward[st.microbatch] = i
        own = {b for b in range(ga) if shifts[forward[b]] == 0}  # template blocks: their own records
        compute, comms = self._per_op_columns(script, table, t, own)
        costs: dict[tuple, CollectiveCost] = {}
        rows: dict[tuple, LayerResult] = {}
        inside = range(first, first + ga * length)
        template_records = [i for i in range(len(records)) if i not in inside or (i - first) // length in own]
        by_record = dict(zip(template_records, self._simai_rows(script, compute, comms, template_records, costs, rows)))
        exposure = self._grad_exposure(t)
        out: list[LayerResult] = [by_record[i] for i in range(first)]
        for b in range(ga):
            shift = shifts[forward[b]]
            if not shift:
                out += [by_record[first + b * length + k] for k in range(length)]
                continue
            out += shifted_rows(script, comms, by_record, rows, exposure, backward[b], first + b * length, length,
                                shift)
        out += [by_record[i] for i in range(first + ga * length, len(records))]
        return RepeatedLayers(_repeated_parts(out, records, ga), _reindexed)

    def _simai_rows(self, script, compute: dict, comms: dict, indices, costs: dict, rows: dict) -> list[LayerResult]:
        """The rows of the records ``indices`` from per (record, column) compute and comm entries; ``costs``
        and ``rows`` share alike cost columns and rows."""
        kinds: dict[tuple[str, str], tuple[str | None, str]] = {}
        records = self.simai.records
        out: list[LayerResult] = []
        for index in indices:
            r = records[index]
            columns = []
            exposed_ns = []
            for column in ("fwd", "ig", "wg"):
                token, size = getattr(r, f"{column}_comm"), getattr(r, f"{column}_size_bytes")
                entries = comms.get((index, column), ())
                kind = kinds.get((token, column))
                if kind is None:
                    kind = kinds[(token, column)] = classify(token, column)
                if entries:
                    op = entries[0][2]
                    cost, shape = self.cost(script.stage, op)
                    key = (token, column, size, id(cost), shape.n)
                else:
                    cost, key = None, (token, column, size)
                found = costs.get(key)
                if found is None:
                    comm_type, group = kind
                    if cost is not None:
                        time_ns = int(round(cost.time_s * 1e9))
                        n = shape.n
                        how = f"{cost.algorithm}/{cost.protocol}" if cost.algorithm != "none" else "none"
                    else:
                        time_ns, n, how = 0, 0, "none"
                    algbw, busbw = report_bandwidths(comm_type, max(n, 1), size, time_ns)
                    model_bw = busbw if time_ns else None
                    found = costs[key] = CollectiveCost(token, comm_type, group, n, size, time_ns, how, 1.0, model_bw,
                                                        algbw, busbw)
                columns.append(found)
                exposed_ns.append(int(round(sum(e for _, e, _, _ in entries) * 1e9)) if entries else 0)
            fwd, ig, wg = columns
            content = (r.name, int(round(compute.get((index, "fwd"), 0.0) * 1e9)),
                       int(round(compute.get((index, "ig"), 0.0) * 1e9)), int(round(compute.get((index, "wg"), 0.0) * 1e9)),
                       id(fwd), id(ig), id(wg), *exposed_ns)
            row = rows.get(content)
            if row is None:
                row = rows[content] = LayerResult(index, r.name, content[1], content[2], content[3], fwd, ig, wg,
                                                  exposed_ns[0], exposed_ns[1], exposed_ns[2],
                                                  "EP" if fwd.group == "EP" else "TP",
                                                  "DP_EP" if wg.group == "DP_EP" else "DP")
            out.append(row)
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
                exposed_ns.append(int(round(sum(e for _, e, _, _ in entries) * 1e9)))
            fwd, ig, wg = columns
            out.append(LayerResult(index, name, int(round(compute.get((name, "fwd"), 0.0) * 1e9)),
                                   int(round(compute.get((name, "ig"), 0.0) * 1e9)),
                                   int(round(compute.get((name, "wg"), 0.0) * 1e9)), fwd, ig, wg,
                                   exposed_ns[0], exposed_ns[1], exposed_ns[2],
                                   "EP" if fwd.group == "EP" else "TP", "DP_EP" if wg.group == "DP_EP" else "DP"))
        return out


def _repeated_parts(rows: list[LayerResult], records: Sequence, ga: int) -> list[tuple[list[LayerResult], int]]:
    """``rows`` (one per record, alike rows the same object) as (templates, times) parts: consecutive
    micro-batch blocks whose rows are the same objects become one part."""
    from simulator.repeat import find_blocks

    found = find_blocks([r.name for r in records], ga) if ga > 1 else None
    if found is None:
        return [(rows, 1)]
    first, length = found
    parts: list[tuple[list[LayerResult], int]] = [(rows[:first], 1)] if first else []
    for b in range(ga):
        block = rows[first + b * length:first + (b + 1) * length]
        if parts and parts[-1][1] >= 1 and len(parts[-1][0]) == length and b > 0 and all(
                x is y for x, y in zip(parts[-1][0], block)):
            parts[-1] = (parts[-1][0], parts[-1][1] + 1)
        else:
            parts.append((block, 1))
    end = first + ga * length
    if end < len(rows):
        parts.append((rows[end:], 1))
    return parts


def _reindexed(layer: LayerResult, index: int) -> LayerResult:
    return replace(layer, index=index)


_SIMAI_LABEL = {"tp_group": "TP", "ep_tp_group": "TP", "etp_group": "TP", "ep_group": "EP", "dp_group": "DP",
                "ep_dp_group": "DP_EP"}


def _aggregate_cost(entries: list) -> CollectiveCost:
    """One EndToEnd comm column for a layer of our workloads: the sum of its collectives (token
    ``+``-joined types; algbw in GiB/s of the summed bytes over the summed time, busbw the same, as
    the collectives mix group sizes)."""
    if not entries:
        return CollectiveCost("NONE", None, "", 0, 0, 0, "none", 1.0, None, math.nan, 0.0)
    types = sorted({op.comm_type for _, _, op, _ in entries})
    groups = sorted({_SIMAI_LABEL.get(op.group, "OTHER") for _, _, op, _ in entries})
    size = sum(op.size * n for _, _, op, n in entries)
    time_ns = int(round(sum(d for d, _, _, _ in entries) * 1e9))
    comm_type = types[0] if len(types) == 1 else None
    group = groups[0] if len(groups) == 1 else "+".join(groups)
    algbw = size / 2**30 / (time_ns * 1e-9) if time_ns else (math.nan if size == 0 else math.inf)
    return CollectiveCost("+".join(types), comm_type, group, 0, size, time_ns, "sum", 1.0, None, algbw, algbw)


def _stage_list(stages: set[int]) -> str:
    ordered = sorted(stages)
    if len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}-{ordered[-1]}"
    return " ".join(map(str, ordered))


def trace_intervals(scripts, compiled, played: engine.EngineResult) -> list[Interval]:
    """Every interval of the iteration: F/B programs expanded at their start times, p2p calls,
    gradient buckets, step-program ops (the extrapolated steady cycles included)."""
    out: list[Interval] = []
    for script, table, t in zip(scripts, compiled, played.stages):
        s = script.stage
        for start, step_index, mb, _chunk in t.all_runs():
            program = script.programs[step_index]
            cp = table[id(program)]
            for offset, d, stream, cat, name, layer in cp.intervals:
                if d > 0:
                    out.append(Interval(s, stream, start + offset, d, cat, script.rename(name), script.layer(layer), mb))
        out.extend(Interval(s, stream, start, d, cat, script.rename(name), script.layer(layer))
                   for stream, start, d, cat, name, layer in t.all_extra() if d > 0)
        for g_start, g_end, cat, step_index, op_index in t.all_grad_instances():
            op = script.programs[step_index].ops[op_index]
            if g_end > g_start:
                r = t.repeat
                later = r.times if r is not None and r.inserted and step_index >= r.first_step + r.steps else 0
                out.append(Interval(s, "grad sync", g_start, g_end - g_start, cat, script.rename(op.name),
                                    script.layer(op.layer), script.steps[step_index].microbatch + later))
    return out


def _check_gpus(gpus: int, job: Any) -> None:
    """Refuse more GPUs than ``--max_items``: the model lists the ranks of each group it prices (``-g 1e8`` on a
    SimAI file held 4.4 GB for one data-parallel group, ``-g 1e12`` ran out of memory)."""
    from workload_generator.limits import limit_of

    limit = limit_of(job)
    if gpus > limit:
        raise ConfigError(f"--model topo would place {gpus:,} GPUs (-g, the workload's all_gpus or --world_size), "
                          f"above the limit of {limit:,} (--max_items): lower -g, or raise --max_items if the machine "
                          "has the memory for it")


def run_topo(workload: Any, topology: Any, options: TopoOptions | None, caches: dict | None = None) -> SimulationResult:
    """``--model topo`` from any accepted workload input and a topology (path, Topology or None).
    ``caches`` (``fabrics``, ``costs``, ``prices`` dicts; :class:`simulator.topo.session.TopoSession` keeps
    them) carry the per-topology work and the compute model's prices from one call to the next."""
    options = options or TopoOptions()
    if not isinstance(options, TopoOptions):
        raise TypeError(f"the topo model takes TopoOptions, got {type(options).__name__}")
    caches = caches if caches is not None else {}
    scripts, job, gpus, path, simai = load_scripts(workload, options, caches.get("prices"))
    _check_gpus(gpus, job)
    fabric, links, notes = build_fabric(topology, options, gpus, caches.get("fabrics"))
    try:
        return TopoModel(scripts, fabric, links, options, path, simai, notes, job, caches.get("costs")).run()
    except NoPeriod:  # the shortened schedule never settled into a repeating cycle: play the whole one
        scripts, job, gpus, path, simai = load_scripts(workload, options, caches.get("prices"), shorten=False)
        return TopoModel(scripts, fabric, links, options, path, simai, notes, job, caches.get("costs")).run()


__all__ = ["TopoModel", "run_topo", "build_fabric", "load_scripts", "peak_tflops"]

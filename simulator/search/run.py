"""``python -m simulator search``: rank every feasible parallel layout of a model on a cluster, or sweep clusters.

    python -m simulator search -t topo.txt --gpu_type H100 --model_name llama3_405B --world_size 16384 \\
        --global_batch 2048 --seq_length 8192 --use_flash_attn -o layouts.csv --plot pareto.png --html layouts.html
    python -m simulator search --topo_gen "-topo Spectrum-X" --gpu_type H100,H200,B200 --world_size 1024,2048,4096 \\
        --model_name llama3_70B --global_batch 1024 --seq_length 8192 -o sweep.csv --html sweep.html

For each sweep point (:mod:`simulator.search.sweep`: a GPU type, a GPU count and a topology) the search enumerates the
layouts of :mod:`simulator.search.space` (TP, CP, PP, DP, EP and expert TP, model chunks, micro-batch, recomputation,
sequence parallelism, distributed optimizer, rank order, TP-communication overlap), drops those Megatron-LM rejects
and those that do not fit the GPU's memory (less ``--memory_headroom_gib``), bounds each of the rest from below
(:mod:`simulator.search.cache`: the pipeline's critical chain of computation and of the communication no schedule
hides, :mod:`simulator.search.comm`), and simulates them with ``--model topo`` best bound first.  A layout whose
bound exceeds its point's ``--top``-th best simulated time cannot enter that point's best and is not simulated
(``--no_prune`` simulates every one); every time reported is a full simulation's.

The work runs here (``--jobs 1``), on worker processes that die with the search (``--jobs``, at most the CPUs) or on
a Ray cluster (``--ray ADDRESS``); rows are appended to ``-o`` as they arrive, each with its job's fingerprint, so an
interrupted search keeps what it found and ``--resume`` continues it (:mod:`simulator.search.files`); at the end the
CSV is rewritten ranked (fastest iteration first), with the plot (``--plot``) and a page (``--html``) when asked.
"""

from __future__ import annotations

import argparse
import bisect
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from simulator.search.files import BREAKDOWN_FIELDS, HEADER, RESULT_FIELDS, layout_key, line_of, read_rows, write_ranked
from simulator.search.placed import PLACEMENT_TOP, PLACEMENTS
from simulator.search.placed import describe as _describe_row
from simulator.search.pool import LocalPool, RayPool, in_flight, simulate_layout, worker_count
from simulator.search.space import Layout, build_job, check_space, compute_bound_s, layouts
from simulator.search.sweep import Point
from utils.cli import CliParser, add_job_flags, positive_int
from utils.errors import ConfigError, UserError

_in_flight = in_flight  # simulator.serve.search's task pump
__all__ = ["BREAKDOWN_FIELDS", "HEADER", "RESULT_FIELDS", "compute_bound_s", "main", "simulate_layout"]

PROG = "simulator search"
JOB_GROUPS = ("general", "model", "Megatron", "MoE", "AIOB", "DeepSeek")
SKIP = ("output", "output_dir", "workload_only", "enable_visual", "pp_rank", "epoch_num", "world_size",
        "tensor_model_parallel_size", "pipeline_model_parallel", "expert_model_parallel_size", "micro_batch",
        "num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank", "memory",
        "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers", "recompute_granularity",
        "recompute_activations", "enable_sequence_parallel", "use_distributed_optimizer", "use_tp_pp_dp_mapping",
        "tp_comm_overlap", "context_parallel_size", "overlap_param_gather")
"""Job flags the search does not take (the layout's own, and output ones)."""

MODEL_ERROR = 0.036
"""The model's mean |error| against published and measured dense runs, the largest of the dense validation suites'
(``python -m simulator validate``: Korthikanti et al. 2.2%, Narayanan et al. 3.3%, the H200 Megatron-core steps 3.6%,
Megatron-Bridge's dense H100 recipes 1.3%; the largest single error 8.3%).  Layouts closer than this to the best are
reported as ties: the ranking among them is inside what the model can tell apart.  MoE jobs and Blackwell GPUs are
off by more (the ``moe`` and ``bridge_blackwell`` suites: 23-34% and 7-48% too fast), which the message says."""

MAX_LAYOUTS = 200_000
"""Default ``--max_layouts``: planning takes about 0.1 ms per layout, so this is under a minute."""

PROGRESS_EVERY_S = 10.0
"""Seconds between progress lines when stderr is not a terminal (a log file, pssh): a line, not a bar."""


def build_parser() -> CliParser:
    p = CliParser(prog=PROG, allow_abbrev=False,
                  description="Rank every feasible parallel layout of a model on a topology, or sweep GPU types, "
                              "GPU counts and topologies (see --help of python -m simulator for the job flags).")
    p.add_argument("-t", "--topology", metavar="FILE", help="SimAI topology file (python -m topo.gen)")
    p.add_argument("--topo_gen", "--topo-gen", metavar="FLAGS", action="append",
                   help="python -m topo.gen flags to build a topology for each GPU count and GPU type (its -g and -gt "
                        "are set per point), e.g. \"-topo Spectrum-X --pods 4\"; repeat it to sweep topologies")
    p.add_argument("--world_size", "--world-size", metavar="N[,N...]", required=True,
                   help="GPU count, or a comma list of counts to compare")
    p.add_argument("--gpu_type", "--gpu-type", metavar="GPU[,GPU...]",
                   help="GPU type of the compute model's table (its times and memory), or a comma list to sweep, e.g. "
                        "H100,H200,B200")
    p.add_argument("-o", "--output", metavar="FILE.csv", required=True, help="the ranked CSV (rows appended as found)")
    p.add_argument("--plot", metavar="FILE.png", help="the Pareto plot: iteration time against GPUs, memory or cost")
    p.add_argument("--html", metavar="FILE.html", help="a self-contained HTML page of the results")
    p.add_argument("--jobs", type=positive_int, metavar="N", help="worker processes (default and most: the CPUs)")
    p.add_argument("--ray", metavar="ADDRESS", help="run on this Ray cluster (ray://host:port, host:port or auto)")
    p.add_argument("--resume", action="store_true", help="keep the rows already in -o (same job only) and simulate "
                   "the rest")
    p.add_argument("--top", type=positive_int, default=20, metavar="K",
                   help="per sweep point, prune layouts whose lower bound exceeds the K-th best time (default 20)")
    p.add_argument("--no_prune", "--no-prune", action="store_true", help="simulate every layout that fits")
    p.add_argument("--limit", type=positive_int, metavar="N", help="simulate at most N layouts (best bounds first)")
    p.add_argument("--max_layouts", type=positive_int, default=MAX_LAYOUTS, metavar="N",
                   help=f"refuse a space of more than N layouts before planning it (default {MAX_LAYOUTS:,})")
    p.add_argument("--memory_headroom_gib", type=float, default=0.0, metavar="GIB",
                   help="keep this much of each GPU's memory free: layouts whose most loaded GPU needs more than the "
                        "capacity less GIB are dropped (default 0)")
    for name, text in (("tp", "tensor-parallel sizes"), ("pp", "pipeline-parallel sizes"), ("ep", "expert-parallel sizes"),
                       ("vpp", "model chunks per pipeline stage"), ("micro_batches", "micro-batch sizes")):
        p.add_argument(f"--{name}", metavar="N[,N...]", help=f"{text} to try (default: every one that divides)")
    p.add_argument("--etp", metavar="N[,N...]", help="expert tensor-parallel sizes to try beside --ep (default: the TP "
                   "size, Megatron's; any etp with etp x ep dividing a stage's tp x cp x dp ranks)")
    p.add_argument("--cp", metavar="N[,N...]", help="context-parallel sizes to try (default 1; Megatron's "
                   "--context-parallel-size, with the job's --cp_comm_type)")
    p.add_argument("--max_tp", type=positive_int, default=8, metavar="N", help="largest tensor-parallel size (default 8)")
    p.add_argument("--recompute", metavar="MODES", help="recomputation modes to try (default none,selective,full)")
    p.add_argument("--orders", metavar="ORDERS", help="rank orders to try (default tp-cp-ep-dp-pp,tp-cp-ep-pp-dp)")
    p.add_argument("--sequence_parallel", "--sequence-parallel", choices=("both", "on", "off"), default="both",
                   help="sequence parallelism (with tp > 1): both (default), on or off")
    p.add_argument("--distributed_optimizer", "--distributed-optimizer", choices=("both", "on", "off"),
                   default="both", help="Megatron's distributed optimizer (with dp > 1): both (default), on or off")
    p.add_argument("--tp_comm_overlap", "--tp-comm-overlap", choices=("both", "on", "off"), default="both",
                   help="Megatron's --tp-comm-overlap in the layouts with sequence parallelism: both (default), "
                        "on or off")
    p.add_argument("--overlap_param_gather", "--overlap-param-gather", choices=("both", "on", "off"), default="on",
                   help="Megatron's --overlap-param-gather (with --overlap-grad-reduce, which it needs) in the layouts "
                        "with the distributed optimizer: on (default, as the NeMo / Megatron-Bridge recipes), off or both")
    p.add_argument("--placement", choices=PLACEMENTS, default="default",
                   help="default: rank r on GPU r (torchrun's node rank j on server j, CUDA_VISIBLE_DEVICES unset); "
                        "search: after the ranking, place each point's --placement_top best layouts as python -m "
                        "simulator place does (server order, GPU slot order) on topologies with shared NICs or PCIe "
                        "switches, re-rank them by the placed time, write FILE.placement.csv and each layout's rank "
                        "file FILE.placementK.txt beside -o FILE.csv (the main CSV keeps the default's times)")
    p.add_argument("--placement_top", "--placement-top", type=positive_int, metavar="K",
                   help=f"with --placement search: layouts placed per sweep point, fastest first (default {PLACEMENT_TOP})")
    p.add_argument("--placement_max_evals", "--placement-max-evals", type=positive_int, metavar="N",
                   help="with --placement search: simulations per placed layout at most (default 300, as python -m "
                        "simulator place --max_evals)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress and no summary lines (errors still)")
    p.set_defaults(job_flags=frozenset(add_job_flags(p, JOB_GROUPS, SKIP)))
    return p


# ---- planning ---------------------------------------------------------------------------------------

@dataclass
class Candidate:
    layout: Layout
    bound_s: float
    memory_gib: float
    point: Point


@dataclass
class Plan:
    """What the enumeration found: the candidates best bound first, and the counts of what was dropped."""

    candidates: list[Candidate]
    enumerated: int
    rejected: Counter
    too_big: int
    smallest_memory: tuple[float, Layout, Point] | None
    headroom_gib: float = 0.0


def space_size(model: Any, sizes: Sequence[int], global_batch: int, space: Any, limit: int) -> int:
    """How many layouts the space holds, counted up to ``limit + 1`` (enumeration alone, microseconds a layout)."""
    count = 0
    for world in sizes:
        for _ in layouts(model, world, global_batch, space):
            count += 1
            if count > limit:
                return count
    return count


def plan(base: dict[str, Any], points: Sequence[Point], space: Any, headroom_gib: float = 0.0,
         say=None) -> Plan:
    """Enumerate, validate, check the memory of and bound every layout of every point."""
    from simulator.search.cache import SearchCache
    from utils.cli import model_from, resolve
    from workload_generator.limits import check_megatron

    model = model_from(resolve(dict(base)))
    global_batch = base.get("global_batch") or 4
    out: list[Candidate] = []
    rejected: Counter = Counter()
    too_big = enumerated = 0
    smallest: tuple[float, Layout, Point] | None = None
    caches: dict[str, SearchCache] = {}
    by_world: dict[int, list[Layout]] = {}
    started = time.perf_counter()
    last = started
    for point in points:
        cache = caches.get(point.gpu)
        if cache is None:
            cache = caches[point.gpu] = SearchCache(point.gpu)
        given = {**base, **point.flags}
        found = by_world.get(point.world)
        if found is None:
            found = by_world[point.world] = list(layouts(model, point.world, global_batch, space))
        memories: dict[tuple, Any] = {}
        bounds: dict[tuple, float] = {}
        floor = _floor(point)
        for layout in found:
            enumerated += 1
            if say is not None and time.perf_counter() - last > PROGRESS_EVERY_S:
                last = time.perf_counter()
                say(f"planning: {enumerated:,} layouts checked in {last - started:.0f} s")
            try:
                job = build_job(given, layout)
                if _needs_size_check(job):
                    check_megatron(job)  # the simulator would refuse its workload's size (--max_items): say why here
            except UserError as exc:
                rejected[_reason(str(exc))] += 1
                continue
            # the rank order changes neither the memory nor the computation
            key = layout.key()[:9] + layout.key()[10:]
            memory = memories.get(key)
            if memory is None:
                memory = memories[key] = cache.memory_estimate(job)
            need = memory.most_loaded.total_bytes / 2**30
            if smallest is None or need < smallest[0]:
                smallest = (need, layout, point)
            if memory.capacity_gib is not None and need > memory.capacity_gib - headroom_gib:
                too_big += 1
                continue
            # (the bound's communication depends on the rank order: where the groups and the pipeline's neighbours are)
            bound = bounds.get(layout.key())
            if bound is None:
                bound = bounds[layout.key()] = cache.bound_s(job, floor)
            out.append(Candidate(layout, bound, need, point))
    out.sort(key=lambda c: (c.bound_s, c.point.key, c.layout))
    return Plan(out, enumerated, rejected, too_big, smallest, headroom_gib)


def _floor(point: Point) -> Any:
    """The point's :class:`simulator.search.comm.CommFloor` on the session its simulations will use (this process's;
    pool workers fork with it), or None when the topology cannot be modelled here (the bound is then computation
    only: looser, still a bound)."""
    from simulator.search.comm import CommFloor
    from simulator.search.pool import session_for

    try:
        return CommFloor(session_for(point.path), point.world)
    except UserError:
        return None


def _needs_size_check(job: Any) -> bool:
    """Whether to count the job's workload against ``--max_items`` while planning: only where the simulator would
    build the whole schedule (:func:`simulator.topo.model._job_scripts` builds a 1F1B pipeline of more than ``pp +
    SHORT_CYCLES`` micro-batches short of its middle cycles) and the schedule is long enough to come near the limit."""
    from simulator.topo.model import SHORT_CYCLES

    p = job.parallel
    if p.ga * -(-job.model.num_layers // p.pp) < CHECKED_LAYER_STEPS:
        return False  # far below any --max_items: counting the workload's items (milliseconds) is not worth it
    return not (p.pp > 1 and not p.interleaved and p.ga > p.pp + SHORT_CYCLES)


CHECKED_LAYER_STEPS = 10_000
"""Micro-batches x layers per stage below which a layout's workload is not counted against ``--max_items`` in the
planning (a layer is well under 100 items per micro-batch, so this is under a million of the default 5,000,000)."""


def _reason(message: str) -> str:
    """A rejection message without its numbers, to count reasons."""
    words = [w for w in message.split() if not any(ch.isdigit() for ch in w)]
    return " ".join(words[:8])


# ---- the command ------------------------------------------------------------------------------------

def _join_topo_gen(argv: Sequence[str]) -> list[str]:
    """``--topo_gen "-topo Spectrum-X"`` as one argument: argparse takes a value that starts with a dash
    for an option and stops there, so the value is attached (``--topo_gen=-topo Spectrum-X``)."""
    out, args = [], list(argv)
    for i, arg in enumerate(args):
        if i > 0 and args[i - 1] in ("--topo_gen", "--topo-gen") and out and out[-1] in ("--topo_gen", "--topo-gen"):
            out[-1] = f"--topo_gen={arg}"
        else:
            out.append(arg)
    return out


def _guard_outputs(args: argparse.Namespace, base: dict[str, Any]) -> None:
    """Every output checked before anything is read or written (issue 28, items 1 and 7): none may be an input (the
    topology, a compute or spec file) or another output, or a symbolic link the search did not create."""
    from utils.io import OutputError, guard_output

    inputs: dict[str, Any] = {"-t/--topology": args.topology, "--comp_filepath": base.get("comp_filepath"),
                              "--gpu_spec": base.get("gpu_spec")}
    guard_output(args.output, inputs, "-o/--output")
    taken = {"-o/--output": args.output}
    outputs = [("--plot", args.plot), ("--html", args.html)]
    if args.placement == "search":
        from simulator.search.placed import output_paths

        outputs.append(("--placement search's CSV", output_paths(args.output, 0)[0]))
    for flag, value in outputs:
        if value:
            guard_output(value, {**inputs, **taken}, flag)
            for other, path in taken.items():  # outputs not written yet: the same path is the same file
                if os.path.realpath(value) == os.path.realpath(path):
                    raise OutputError(f"{flag} {value} is also {other}: one would overwrite the other")
            taken[flag] = value


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(_join_topo_gen(sys.argv[1:] if argv is None else argv))
    base = {dest: getattr(args, dest) for dest in args.job_flags if hasattr(args, dest)}
    from simulator.search import sweep

    gpus = sweep.gpu_types(args.gpu_type or base.pop("gpu_spec", None))  # (a --gpu_spec FILE stands for its GPU)
    sizes = sweep.worlds(args.world_size)
    space = check_space(vars(args))
    if args.memory_headroom_gib < 0 or args.memory_headroom_gib != args.memory_headroom_gib:
        raise ConfigError(f"--memory_headroom_gib {args.memory_headroom_gib:g}: expected GiB to keep free, 0 or more")
    if bool(args.topology) == bool(args.topo_gen):
        raise ConfigError("give -t/--topology FILE or --topo_gen \"FLAGS\" (one of them)")
    from simulator.search.placed import check_flags

    check_flags(args)
    _guard_outputs(args, base)
    say = (lambda text: None) if args.quiet else print
    jobs = 1 if args.ray else worker_count(args.jobs, lambda text: print(text, file=sys.stderr))
    from utils.cli import model_from, resolve

    model = model_from(resolve({**base, "gpu_type": gpus[0]}))
    count = space_size(model, sizes, base.get("global_batch") or 4, space, args.max_layouts)
    if count > args.max_layouts:
        raise ConfigError(f"the space holds more than --max_layouts {args.max_layouts:,} layouts per sweep point set "
                          f"(over {count - 1:,}): narrow it with --tp, --pp, --micro_batches, --recompute or a smaller "
                          "--global_batch, or raise --max_layouts")
    with tempfile.TemporaryDirectory() as folder:
        found_points = sweep.points(args.topology, args.topo_gen, gpus, sizes, folder)
        from simulator.search.files import fingerprint, topology_identity

        identities: dict[str, str] = {}
        for point in found_points:
            if point.path not in identities:
                identities[point.path] = topology_identity(point.path if args.topology else None,
                                                           None if args.topology else f"{point.topology} -g {point.world}")
            point.job = fingerprint(base, point.gpu, identities[point.path])
        rank_files = _guard_rank_files(args, base, len(found_points), count)
        named: dict[str, set[tuple[str | None, str]]] = {}
        for p in found_points:  # (a --gpu_spec FILE's rows carry the spec's GPU name, not the file's)
            named.setdefault(p.job, set()).add((None if os.path.isfile(p.gpu) else p.gpu, p.topology))
        done_rows = read_rows(args.output, named) \
            if args.resume and os.path.exists(args.output) else []
        local = LocalPool(jobs) if not args.ray and jobs > 1 else None
        # the Ray cluster is reached before anything is planned or written: an address that does not answer is one
        # line and no CSV
        remote = RayPool(args.ray) if args.ray else None
        try:
            rows, found = _plan_and_run(args, base, found_points, space, done_rows, jobs, sizes, gpus, say, local,
                                        remote)
        finally:
            for pool in (local, remote):
                if pool is not None:
                    pool.close()
        write_ranked(args.output, rows)
        placed = _place(args, base, rows, found_points, jobs, rank_files, say)
    _pictures(args, rows, found, sizes, gpus, base, placed)
    _say_results(rows, args, found_points, say)
    print(f"wrote {args.output} ({len(rows)} layouts ranked)")
    if placed is not None:
        _say_placement(args, placed, say)
    return 0


def _guard_rank_files(args: argparse.Namespace, base: dict[str, Any], npoints: int, layouts: int) -> list[str]:
    """With ``--placement search``: the rank files every point's placed layouts may write, each checked (as
    :func:`_guard_outputs` checks the others) before anything is simulated.  A point places at most its
    ``layouts`` (the space's size): a ``--placement_top`` above it names no more files than that (or the default
    top's), where 1e12 ran out of memory."""
    if args.placement != "search":
        return []
    from simulator.search.placed import output_paths
    from utils.io import OutputError, guard_output

    top = min(args.placement_top or PLACEMENT_TOP, max(layouts, PLACEMENT_TOP))
    csv_path, paths = output_paths(args.output, top * npoints)
    inputs = {"-t/--topology": args.topology, "--comp_filepath": base.get("comp_filepath"),
              "--gpu_spec": base.get("gpu_spec"), "-o/--output": args.output, "--plot": args.plot, "--html": args.html,
              "--placement search's CSV": csv_path}
    taken = {os.path.realpath(path): flag for flag, path in inputs.items() if path and not flag.startswith("-t")}
    for path in paths:
        guard_output(path, inputs, "--placement search's rank file")
        if os.path.realpath(path) in taken:  # outputs not written yet: the same path is the same file
            raise OutputError(f"--placement search's rank file {path} is also {taken[os.path.realpath(path)]}: one "
                              "would overwrite the other")
    return paths


def _place(args: argparse.Namespace, base: dict[str, Any], rows: list[dict[str, Any]], points: list[Point],
           jobs: int, rank_files: list[str], say) -> list[Any] | None:
    """``--placement search`` (:mod:`simulator.search.placed`): each point's best layouts placed, re-ranked, their
    placement CSV and rank files written beside ``-o``; None with ``--placement default``."""
    if args.placement != "search":
        return None
    from simulator.report import write_files
    from simulator.search import placed
    from simulator.topo.placement import MAX_EVALS

    found = placed.place_points(rows, points, base, args.placement_top or PLACEMENT_TOP,
                                args.placement_max_evals or MAX_EVALS, 1 if args.ray else jobs, say)
    placed.assign_files(found, rank_files)
    contents = placed.files(found, placed.output_paths(args.output, 0)[0])
    if contents:
        write_files(contents)
    return found


def _say_placement(args: argparse.Namespace, found: list[Any], say) -> None:
    from simulator.search.placed import output_paths, summary_lines

    verdict, details = summary_lines(found)
    for line in details:
        say(line)
    for line in verdict:
        print(line)
    written = [p.rank_file for entry in found for p in entry.placed if p.rank_file]
    if written:
        print(f"wrote {output_paths(args.output, 0)[0]} and {len(written)} rank file{'s' if len(written) > 1 else ''} "
              f"({os.path.basename(written[0])}{' ...' if len(written) > 1 else ''})")


def plan_points(base: dict[str, Any], points: Sequence[Point], space: Any, headroom_gib: float, say,
                local: LocalPool | None) -> Plan:
    """:func:`plan` of every point, the points planned side by side on the pool's workers when there are several
    (each worker then keeps the sessions of the topologies it planned on, for the simulations it gets)."""
    if local is None or local.pool is None or len(points) < 2:
        return plan(base, points, space, headroom_gib, say)
    plans = [future.result() for future in [local.pool.submit(plan, base, [point], space, headroom_gib)
                                            for point in points]]
    smallest = [p.smallest_memory for p in plans if p.smallest_memory is not None]
    candidates = [c for p in plans for c in p.candidates]
    candidates.sort(key=lambda c: (c.bound_s, c.point.key, c.layout))
    return Plan(candidates, sum(p.enumerated for p in plans), sum((p.rejected for p in plans), Counter()),
                sum(p.too_big for p in plans), min(smallest, key=lambda m: m[0]) if smallest else None, headroom_gib)


def _plan_and_run(args: argparse.Namespace, base: dict[str, Any], found_points: list[Point], space: Any,
                  done_rows: list[dict[str, Any]], jobs: int, sizes: list[int], gpus: list[str], say,
                  local: LocalPool | None, remote: RayPool | None = None) -> tuple[list[dict[str, Any]], Plan]:
    """Plan the points, then simulate what can enter their best (the CSV written as rows arrive)."""
    found = plan_points(base, found_points, space, args.memory_headroom_gib, say, local)
    _say_plan(found, sizes, gpus, len(found_points), say)
    if not found.candidates:  # a user error: nothing is written (a --resume file stays as it was)
        if found.too_big == 0:
            raise ConfigError(f"--world_size {args.world_size}: no layout of the model divides it (every one of the "
                              f"{found.enumerated} tried is rejected; most often: {_top_reason(found)})")
        need, layout, point = found.smallest_memory or (0.0, None, None)
        room = f" less --memory_headroom_gib {args.memory_headroom_gib:g}" if args.memory_headroom_gib else ""
        raise ConfigError(f"the model fits no layout on --world_size {args.world_size}: the smallest needs {need:.1f} "
                          f"GiB per GPU ({_describe(layout)}{' on ' + point.gpu if point else ''}), more than the "
                          f"GPU's memory{room}")
    rows = _run(args, base, found, done_rows, jobs, say, local, remote)
    return rows, found


def _pictures(args: argparse.Namespace, rows: list[dict[str, Any]], found: Plan, sizes: list[int], gpus: list[str],
              base: dict[str, Any], placed: list[Any] | None = None) -> None:
    if not (args.plot or args.html):
        return
    from simulator.report import write_files
    from simulator.search.report import html_page, pareto_png

    png = pareto_png(rows)
    contents: dict[str, str | bytes] = {}
    if args.plot:
        contents[args.plot] = png
    if args.html:
        extra = ""
        if placed is not None:
            from simulator.search.placed import html_section

            extra = html_section(placed, args.html)
        contents[args.html] = html_page(rows, png, found, sizes, gpus, base, vars(args), MODEL_ERROR, args.top, extra)
    write_files(contents)


def _run(args: argparse.Namespace, base: dict[str, Any], found: Plan, done_rows: list[dict[str, Any]], jobs: int,
         say, local: LocalPool | None = None, remote: RayPool | None = None) -> list[dict[str, Any]]:
    from simulator.search.files import open_rows

    rows = list(done_rows)
    done_keys = {layout_key(r) for r in done_rows}
    times: dict[tuple, list[float]] = {}
    for r in rows:
        times.setdefault((r["gpu_type"], r["topology"], int(r["world_size"])), []).append(float(r["iteration_s"]))
    for values in times.values():
        values.sort()
    todo = [c for c in found.candidates
            if layout_key({**{f: getattr(c.layout, f) for f in c.layout.__dataclass_fields__},
                           "gpu_type": c.point.gpu, "topology": c.point.topology}) not in done_keys]
    if args.limit:
        todo = todo[:args.limit]
    pruned = failures = simulated = 0
    append = bool(args.resume and done_rows)
    # the CSV exists (header, or the rows kept) before any worker starts: a failure leaves what was done
    stream = open_rows(args.output, append)
    progress = _Progress(len(todo), args.quiet)
    pool: LocalPool | RayPool | None = None
    try:
        if not append:
            stream.write(",".join(HEADER) + "\n")
            stream.flush()
        pool = remote or (RayPool(args.ray) if args.ray else local or LocalPool(jobs))

        def cannot_win(c: Candidate) -> bool:
            best = times.get(c.point.key, ())
            return not args.no_prune and len(best) >= args.top and c.bound_s > best[args.top - 1]

        # a layout's rank orders go in one bundle, to one process, which builds their stage scripts once (they differ
        # only in where the groups sit): the other order joins when it, too, could still enter the best
        siblings: dict[tuple, list[int]] = {}
        for i, c in enumerate(todo):
            siblings.setdefault((c.point.key, c.layout.key()[:9] + c.layout.key()[10:]), []).append(i)
        sent: set[int] = set()

        def bundles() -> Iterable[tuple]:
            nonlocal pruned
            for i, c in enumerate(todo):
                if i in sent:
                    continue
                if cannot_win(c):
                    pruned += 1
                    progress.update(simulated, pruned)
                    continue
                bundle = [i] + [j for j in siblings[(c.point.key, c.layout.key()[:9] + c.layout.key()[10:])]
                                if j > i and j not in sent and not cannot_win(todo[j])]
                sent.update(bundle)
                yield tuple((base, todo[j].layout, todo[j].point.path, todo[j].bound_s, todo[j].point.columns())
                            for j in bundle)

        for _bundle, results in pool.run(bundles(), pending_limit=2 * pool.jobs):
            for row in results:
                simulated += 1
                if isinstance(row, Exception):
                    failures += 1
                    continue
                rows.append(row)
                bisect.insort(times.setdefault((row["gpu_type"], row["topology"], int(row["world_size"])), []),
                              float(row["iteration_s"]))
                stream.write(line_of(row))
            stream.flush()
            progress.update(simulated, pruned)
    finally:
        stream.close()
        if pool is not None and pool is not remote:  # the caller closes the pool it made
            pool.close()
        progress.close()
    say(f"simulated {simulated - failures} layouts" + (f" ({len(done_rows)} kept from {args.output})" if done_rows else "")
        + f"; pruned {pruned} whose lower bound exceeds their point's {args.top}th best time"
        + (f"; {failures} failed" if failures else ""))
    return rows


class _Progress:
    """A bar on a terminal (tqdm: rate and ETA), a line every :data:`PROGRESS_EVERY_S` seconds elsewhere.  The ETA
    assumes every remaining layout is simulated: pruning makes the search end sooner."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total, self.quiet = total, quiet
        self.bar = None
        self.started = self.last = time.perf_counter()
        self.done = 0
        if quiet:
            return
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, file=sys.stderr, unit="layout")

    def update(self, simulated: int, pruned: int) -> None:
        if self.quiet:
            return
        done = simulated + pruned
        if self.bar is not None:
            self.bar.update(done - self.done)
            self.done = done
            return
        now = time.perf_counter()
        if now - self.last < PROGRESS_EVERY_S:
            return
        self.last = now
        rate = simulated / (now - self.started) if simulated else 0.0
        left = self.total - done
        eta = f", at most {left / rate:.0f} s left" if rate > 0 else ""
        print(f"search: {done:,} of {self.total:,} layouts ({simulated:,} simulated, {pruned:,} pruned), "
              f"{rate:.1f} simulated/s{eta}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _say_plan(found: Plan, sizes: list[int], gpus: list[str], npoints: int, say) -> None:
    dropped = sum(found.rejected.values())
    room = f" less {found.headroom_gib:g} GiB of headroom" if found.headroom_gib else ""
    where = f"{', '.join(map(str, sizes))} GPUs" + (f" ({npoints} sweep points)" if npoints > 1 else "")
    say(f"{found.enumerated} layouts on {where}: {dropped} rejected by Megatron's rules, {found.too_big} do not fit "
        f"the {'/'.join(gpus)}'s memory{room}, {len(found.candidates)} to simulate")
    for reason, count in found.rejected.most_common(3):
        say(f"  rejected {count}: {reason} ...")


def _say_results(rows: list[dict[str, Any]], args: argparse.Namespace, points: list[Point], say) -> None:
    """The best layout (of each point in a sweep), the ties within the model's error, the Pareto front."""
    if not rows:
        return
    from simulator.search.report import ties
    from simulator.search.sweep import best_per_point, pareto_rows

    best = min(rows, key=lambda r: float(r["iteration_s"]))
    print(f"best: {_describe_row(best)}: {float(best['iteration_s']):.3f} s per iteration, "
          f"{float(best['tokens_per_s_per_gpu']):,.0f} tokens/s per GPU, MFU {float(best['mfu'] or 0) * 100:.1f}%, "
          f"{float(best['memory_gib'] or 0):.1f} GiB, {float(best['gpu_hours_per_million_tokens']):.3g} GPU-hours per "
          "million tokens")
    if len(points) > 1:
        say("best per sweep point (cheapest per token first):")
        for r in best_per_point(rows):
            say(f"  {r['world_size']} {r['gpu_type']} on {r['topology']}: {float(r['iteration_s']):.3f} s, "
                f"{float(r['gpu_hours_per_million_tokens']):.3g} GPU-h per Mtoken, MFU {float(r['mfu'] or 0) * 100:.1f}%"
                f" ({_describe_row(r)})")
        front = pareto_rows(rows)
        say(f"Pareto front (iteration time against GPU-hours per token): {len(front)} layouts, "
            + "; ".join(f"{r['world_size']} {r['gpu_type']} {float(r['iteration_s']):.2f} s "
                        f"{float(r['gpu_hours_per_million_tokens']):.3g}" for r in front[:6]))
    note = ties(rows, MODEL_ERROR)
    if note:
        say(note)
        # the best by a margin the model cannot resolve may sit at the memory's edge: name the lightest of its ties
        point = (best["gpu_type"], best["topology"], str(best["world_size"]))
        close = [r for r in rows if (r["gpu_type"], r["topology"], str(r["world_size"])) == point
                 and float(r["iteration_s"]) <= float(best["iteration_s"]) * (1 + MODEL_ERROR)]
        light = min(close, key=lambda r: float(r["memory_gib"] or 0))
        if float(light["memory_gib"] or 0) < 0.9 * float(best["memory_gib"] or 0):
            say(f"the lightest of them: {_describe_row(light)}: {float(light['iteration_s']):.3f} s "
                f"({(float(light['iteration_s']) / float(best['iteration_s']) - 1) * 100:+.1f}%), "
                f"{float(light['memory_gib']):.1f} GiB (--memory_headroom_gib keeps room on every GPU)")


def _top_reason(found: Plan) -> str:
    return found.rejected.most_common(1)[0][0] if found.rejected else "no sizes multiply out"


def _describe(layout: Layout | None) -> str:
    if layout is None:
        return "none"
    cp = f" cp {layout.cp}" if layout.cp > 1 else ""
    return (f"tp {layout.tp}{cp} pp {layout.pp} dp {layout.dp} ep {layout.ep} vpp {layout.vpp} micro {layout.micro_batch} "
            f"{layout.recompute} recomputation")

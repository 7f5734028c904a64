"""``python -m simulator search``: rank every feasible parallel layout of a model on a cluster.

    python -m simulator search -t topo.txt --gpu_type H100 --model_name llama3_405B --world_size 16384 \\
        --global_batch 2048 --seq_length 8192 --use_flash_attn -o layouts.csv --plot pareto.png --html layouts.html

For each GPU count (``--world_size``, a number or a comma list) the search enumerates the layouts of
:mod:`simulator.search_space` (TP, PP, DP, EP, model chunks, micro-batch, recomputation, sequence
parallelism, distributed optimizer, rank order), drops those Megatron-LM rejects and those that do not
fit the GPU's memory (:mod:`mocked_model.memory`), and simulates the rest with ``--model topo`` on the
topology (``-t FILE``, or ``--topo_gen "FLAGS"``: ``python -m topo.gen`` flags, run with ``-g`` per
GPU count), best lower bound first.  A layout whose compute-only lower bound exceeds the
``--top``-th best time found so far is pruned (``--no_prune`` simulates every one).

The work runs on every local core (``--jobs``, a process pool) or on a Ray cluster (``--ray
ADDRESS``, ``pip install .[ray]``); rows are appended to ``-o`` as they arrive, so an interrupted search
keeps what it found and ``--resume`` continues it; at the end the CSV is rewritten ranked (fastest
iteration first), with the Pareto plot (``--plot``) and an HTML page (``--html``) when asked.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from simulator.search_space import LAYOUT_FIELDS, Layout, build_job, check_space, compute_bound_s, layouts
from utils.cli import CliParser, add_job_flags, positive_int
from utils.errors import ConfigError, UserError

PROG = "simulator search"
JOB_GROUPS = ("general", "model", "Megatron", "MoE", "AIOB", "DeepSeek")
SKIP = ("output", "output_dir", "workload_only", "enable_visual", "pp_rank", "epoch_num", "world_size",
        "tensor_model_parallel_size", "pipeline_model_parallel", "expert_model_parallel_size", "micro_batch",
        "num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank", "memory",
        "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers", "recompute_granularity",
        "recompute_activations", "enable_sequence_parallel", "use_distributed_optimizer", "use_tp_pp_dp_mapping",
        "tp_comm_overlap", "context_parallel_size", "overlap_param_gather")
"""Job flags the search does not take (the layout's own, and output ones)."""
RESULT_FIELDS = ("iteration_s", "tokens_per_s_per_gpu", "mfu", "memory_gib")
BREAKDOWN_FIELDS = ("tp_comm_overlap", "overlap_param_gather", "cp", "etp",
                    "world_size", "first_stage_layers", "last_stage_layers", "compute_s",
                    "exposed_comm_s", "bubble_s",
                    "tp_exposed_s", "ep_exposed_s", "dp_exposed_s", "pp_exposed_s", "cp_exposed_s", "memory_weights_gib",
                    "memory_activations_gib", "lower_bound_s")
HEADER = tuple(f for f in LAYOUT_FIELDS if f not in BREAKDOWN_FIELDS) + RESULT_FIELDS + \
    BREAKDOWN_FIELDS


def build_parser() -> CliParser:
    p = CliParser(prog=PROG, allow_abbrev=False,
                  description="Rank every feasible parallel layout of a model on a topology (see --help of "
                              "python -m simulator for the job flags).")
    p.add_argument("-t", "--topology", metavar="FILE", help="SimAI topology file (python -m topo.gen)")
    p.add_argument("--topo_gen", metavar="FLAGS",
                   help="python -m topo.gen flags to build a topology for each GPU count (its -g is set per count), "
                        "e.g. \"-topo Spectrum-X --pods 4\"")
    p.add_argument("--world_size", "--world-size", metavar="N[,N...]", required=True,
                   help="GPU count, or a comma list of counts to compare")
    p.add_argument("-o", "--output", metavar="FILE.csv", required=True, help="the ranked CSV (rows appended as found)")
    p.add_argument("--plot", metavar="FILE.png", help="the Pareto plot: iteration time against GPUs or memory")
    p.add_argument("--html", metavar="FILE.html", help="a self-contained HTML page of the results")
    p.add_argument("--jobs", type=positive_int, metavar="N", help="worker processes (default: every core)")
    p.add_argument("--ray", metavar="ADDRESS", help="run on this Ray cluster (ray://host:port or auto)")
    p.add_argument("--resume", action="store_true", help="keep the rows already in -o and simulate the rest")
    p.add_argument("--top", type=positive_int, default=20, metavar="K",
                   help="prune layouts whose lower bound exceeds the K-th best time found (default 20)")
    p.add_argument("--no_prune", "--no-prune", action="store_true", help="simulate every layout that fits")
    p.add_argument("--limit", type=positive_int, metavar="N", help="simulate at most N layouts (best bounds first)")
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
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(job_flags=frozenset(add_job_flags(p, JOB_GROUPS, SKIP)))
    return p


@dataclass
class Candidate:
    layout: Layout
    bound_s: float
    memory: Any


@dataclass
class Plan:
    """What the enumeration found: the candidates best bound first, and the counts of what was dropped."""

    candidates: list[Candidate]
    enumerated: int
    rejected: Counter
    too_big: int
    smallest_memory: tuple[float, Layout] | None


def plan(base: dict[str, Any], worlds: Sequence[int], gpu: str, space: Any) -> Plan:
    """Enumerate, validate and bound every layout of every GPU count."""
    from mocked_model.memory import GIB, estimate_memory
    from utils.cli import model_from, resolve

    model = model_from(resolve({k: v for k, v in base.items()}))
    global_batch = base.get("global_batch") or 4
    out: list[Candidate] = []
    rejected: Counter = Counter()
    too_big = enumerated = 0
    smallest: tuple[float, Layout] | None = None
    memories: dict[tuple, Any] = {}
    bounds: dict[tuple, float] = {}
    layer_cache: dict = {}
    for world in worlds:
        for layout in layouts(model, world, global_batch, space):
            enumerated += 1
            try:
                job = build_job(base, layout)
            except UserError as exc:
                rejected[_reason(str(exc))] += 1
                continue
            # the rank order changes neither the memory nor the computation
            key = layout.key()[:9] + layout.key()[10:]
            memory = memories.get(key)
            if memory is None:
                memory = memories[key] = estimate_memory(job, gpu)
            need = memory.most_loaded.total_bytes / GIB
            if smallest is None or need < smallest[0]:
                smallest = (need, layout)
            if memory.fits is False:
                too_big += 1
                continue
            bound_key = key[:8] + key[9:]  # the bound ignores the distributed optimizer too
            bound = bounds.get(bound_key)
            if bound is None:
                bound = bounds[bound_key] = compute_bound_s(job, gpu, layer_cache)
            out.append(Candidate(layout, bound, memory))
    out.sort(key=lambda c: (c.bound_s, c.layout))
    return Plan(out, enumerated, rejected, too_big, smallest)


def _reason(message: str) -> str:
    """A rejection message without its numbers, to count reasons."""
    words = [w for w in message.split() if not any(ch.isdigit() for ch in w)]
    return " ".join(words[:8])


# ---- the work -------------------------------------------------------------------------------------

_SESSIONS: dict[str, Any] = {}
"""One :class:`simulator.session.TopoSession` per topology and process: the topology is read once, and
its fabric, routes, group shapes, NCCL costs and operation prices serve every layout after the first."""


def simulate_layout(base: dict[str, Any], layout: Layout, topology: str, bound_s: float) -> dict[str, Any]:
    """One row: simulate ``layout`` of the job ``base`` on ``topology`` (the process's session for it)."""
    from simulator.options import TopoOptions
    from simulator.session import TopoSession

    session = _SESSIONS.get(topology)
    if session is None:
        session = _SESSIONS[topology] = TopoSession(topology)
    job = build_job(base, layout)
    result = session.simulate(job, TopoOptions())
    return result_row(layout, job, result, bound_s)


def result_row(layout: Layout, job: Any, result: Any, bound_s: float) -> dict[str, Any]:
    t = result.totals
    iteration = result.iteration_us / 1e6
    st = result.details.stages[result.details.reported_stage]
    memory = result.memory.summary() if result.memory is not None else {}
    row: dict[str, Any] = {f: getattr(layout, f) for f in LAYOUT_FIELDS}
    row.update(iteration_s=iteration, tokens_per_s_per_gpu=job.parallel.global_batch * job.training.seq_length
               / iteration / layout.world_size, mfu=result.details.mfu, memory_gib=memory.get("memory_gib"),
               world_size=layout.world_size, compute_s=t.compute_us / 1e6,
               exposed_comm_s=max(t.total_us - t.compute_us - t.bubble_us, 0.0) / 1e6, bubble_s=t.bubble_us / 1e6,
               tp_exposed_s=st.tp_exposed_us / 1e6, ep_exposed_s=st.ep_exposed_us / 1e6,
               dp_exposed_s=(st.dp_exposed_us + st.dp_ep_exposed_us) / 1e6, pp_exposed_s=st.pp_exposed_us / 1e6,
               cp_exposed_s=st.cp_exposed_us / 1e6,
               memory_weights_gib=memory.get("memory_weights_gib"),
               memory_activations_gib=memory.get("memory_activations_gib"), lower_bound_s=bound_s)
    return row


class LocalPool:
    """Worker processes on this machine (``--jobs``)."""

    def __init__(self, jobs: int) -> None:
        from concurrent.futures import ProcessPoolExecutor

        self.jobs = jobs
        self.pool = ProcessPoolExecutor(max_workers=jobs) if jobs > 1 else None

    def run(self, tasks: Iterable[tuple], pending_limit: int) -> Iterable[tuple[tuple, Any]]:
        """Yield ``(task, row or exception)`` as tasks finish, keeping at most ``pending_limit`` in flight;
        ``tasks`` is consumed lazily, so that pruning sees the results found so far."""
        if self.pool is None:
            for task in tasks:
                try:
                    yield task, simulate_layout(*task)
                except UserError as exc:
                    yield task, exc
            return
        from concurrent.futures import FIRST_COMPLETED, wait

        pool = self.pool
        for task, future in _in_flight(tasks, pending_limit, lambda task: pool.submit(simulate_layout, *task),
                                       lambda futures: wait(futures, return_when=FIRST_COMPLETED)[0]):
            try:
                yield task, future.result()
            except UserError as exc:
                yield task, exc

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)


def _in_flight(tasks: Iterable[tuple], pending_limit: int, submit: Callable[[tuple], Any],
               wait_done: Callable[[list], Iterable]) -> Iterator[tuple[tuple, Any]]:
    """Submit ``tasks`` (consumed lazily) with at most ``pending_limit`` in flight and yield ``(task,
    handle)`` for each one ``wait_done`` (given the handles in flight) reports finished.  ``submit``
    turns a task into a handle: a future of a process pool, or a Ray object reference."""
    running: dict[Any, tuple] = {}
    iterator = iter(tasks)
    exhausted = False
    while running or not exhausted:
        while not exhausted and len(running) < pending_limit:
            task = next(iterator, None)
            if task is None:
                exhausted = True
                break
            running[submit(task)] = task
        if not running:
            break
        for handle in wait_done(list(running)):
            yield running.pop(handle), handle


class RayPool:
    """Tasks on an existing Ray cluster (``--ray ADDRESS``); the topology files must be readable by its
    workers at the same paths."""

    def __init__(self, address: str) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("--ray needs Ray: pip install '.[ray]'") from None
        try:
            ray.init(address=address, ignore_reinit_error=True, logging_level="ERROR", log_to_driver=False)
        except Exception as exc:  # noqa: BLE001 - any failure to connect is the user's address
            raise ConfigError(f"--ray {address}: cannot reach the Ray cluster ({str(exc).splitlines()[0]})") from None
        self.ray = ray
        self.remote = ray.remote(simulate_layout)
        self.jobs = max(int(ray.cluster_resources().get("CPU", 1)), 1)

    def run(self, tasks: Iterable[tuple], pending_limit: int) -> Iterable[tuple[tuple, Any]]:
        ray = self.ray
        for task, ref in _in_flight(tasks, pending_limit, lambda task: self.remote.remote(*task),
                                    lambda refs: ray.wait(refs, num_returns=1)[0]):
            try:
                yield task, ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - a remote UserError arrives wrapped
                yield task, exc

    def close(self) -> None:
        self.ray.shutdown()


# ---- files ----------------------------------------------------------------------------------------

def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def read_rows(path: str) -> list[dict[str, Any]]:
    """Rows of an earlier search's CSV (for ``--resume``); raises :class:`FormatError` if it is not one."""
    from utils.errors import FormatError
    from utils.io import read_text

    text = read_text(path, "a search CSV (python -m simulator search -o)")
    reader = csv.DictReader(text.splitlines())
    if reader.fieldnames is None or tuple(reader.fieldnames) != HEADER:
        raise FormatError(path, "not a search CSV of this version (its header differs); --resume needs one", line=1)
    return list(reader)


def _layout_key(row: dict[str, Any]) -> tuple:
    return tuple(str(row[f]) for f in LAYOUT_FIELDS)


def write_ranked(path: str, rows: list[dict[str, Any]]) -> None:
    from utils.io import atomic_write

    ranked = sorted(rows, key=lambda r: float(r["iteration_s"]))
    lines = [",".join(HEADER)] + [",".join(_cell(r.get(f)) for f in HEADER) for r in ranked]
    with atomic_write(path) as handle:
        handle.write("\n".join(lines) + "\n")


# ---- the command ----------------------------------------------------------------------------------

def _worlds(text: str) -> list[int]:
    try:
        worlds = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise ConfigError(f"--world_size {text!r}: expected a GPU count or a comma list of counts") from None
    if not worlds or worlds[0] < 1:
        raise ConfigError(f"--world_size {text!r}: expected positive GPU counts")
    return worlds


def topologies(args: argparse.Namespace, worlds: list[int], folder: str) -> dict[int, str]:
    """The topology file of each GPU count: ``-t FILE`` for all, or ``--topo_gen`` run per count."""
    import shlex

    if bool(args.topology) == bool(args.topo_gen):
        raise ConfigError("give -t/--topology FILE or --topo_gen \"FLAGS\" (one of them)")
    if args.topology:
        from topo import read_topology

        topo = read_topology(args.topology)
        small = [w for w in worlds if w > topo.gpu_count]
        if small:
            raise ConfigError(f"{args.topology} has {topo.gpu_count} GPUs, fewer than --world_size {small[0]}")
        from simulator.session import TopoSession

        _SESSIONS[args.topology] = TopoSession(topo)  # the main process's (and forked workers') session
        return dict.fromkeys(worlds, args.topology)
    from topo.gen import main as topo_main

    out = {}
    flags = shlex.split(args.topo_gen)
    for world in worlds:
        path = os.path.join(folder, f"topology_{world}.txt")
        with open(os.devnull, "w") as sink:
            saved, sys.stdout = sys.stdout, sink
            try:
                topo_main([*flags, "-g", str(world), "-o", path])
            finally:
                sys.stdout = saved
        out[world] = path
    return out


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


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(_join_topo_gen(sys.argv[1:] if argv is None else argv))
    base = {dest: getattr(args, dest) for dest in args.job_flags if hasattr(args, dest)}
    gpu = base.get("gpu_type")
    if not gpu:
        raise ConfigError("the search needs --gpu_type (its memory and the compute model's times)")
    from mocked_model.compute import gpu_spec

    gpu = gpu_spec(gpu).name
    worlds = _worlds(args.world_size)
    space = check_space(vars(args))
    done_rows: list[dict[str, Any]] = read_rows(args.output) if args.resume and os.path.exists(args.output) else []
    done_keys = {_layout_key(r) for r in done_rows}
    with tempfile.TemporaryDirectory() as folder:
        paths = topologies(args, worlds, folder)
        found = plan(base, worlds, gpu, space)
        _say_plan(found, worlds, gpu, args.quiet)
        if not found.candidates:
            _write_header_only(args.output, done_rows)
            if found.too_big == 0:
                raise ConfigError(f"--world_size {args.world_size}: no layout of the model divides it (every one of the "
                                  f"{found.enumerated} tried is rejected; most often: {_top_reason(found)})")
            need, layout = found.smallest_memory or (0.0, None)
            raise ConfigError(f"the model fits no layout on --world_size {args.world_size}: the smallest needs {need:.1f} "
                              f"GiB per GPU ({_describe(layout)}), more than the {gpu}'s")
        rows = _run(args, base, paths, found, done_rows, done_keys)
    write_ranked(args.output, rows)
    if args.plot or args.html:
        from simulator.search_report import html_page, pareto_png

        png = pareto_png(rows, len(worlds) > 1)
        contents: dict[str, str | bytes] = {}
        if args.plot:
            contents[args.plot] = png
        if args.html:
            contents[args.html] = html_page(rows, png, found, worlds, gpu)
        from simulator.report import write_files

        write_files(contents)
    best = min(rows, key=lambda r: float(r["iteration_s"])) if rows else None
    if best is not None:
        print(f"best: {_describe_row(best)}: {float(best['iteration_s']):.3f} s per iteration, "
              f"{float(best['tokens_per_s_per_gpu']):,.0f} tokens/s per GPU, MFU {float(best['mfu'] or 0) * 100:.1f}%, "
              f"{float(best['memory_gib'] or 0):.1f} GiB")
    print(f"wrote {args.output} ({len(rows)} layouts ranked)")
    return 0


def _run(args: argparse.Namespace, base: dict[str, Any], paths: dict[int, str], found: Plan,
         done_rows: list[dict[str, Any]], done_keys: set) -> list[dict[str, Any]]:
    rows = list(done_rows)
    times = sorted(float(r["iteration_s"]) for r in rows)
    todo = [c for c in found.candidates if c.layout.key() not in done_keys]
    if args.limit:
        todo = todo[:args.limit]
    pruned = failures = 0
    new_file = not (args.resume and done_rows)
    # the CSV exists (header, or the rows kept) before any worker starts: a failure leaves what was done
    try:
        stream = open(args.output, "w" if new_file else "a", newline="")  # noqa: SIM115 (closed below)
    except OSError as exc:
        from utils.io import OutputError

        raise OutputError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    progress = None
    pool: LocalPool | RayPool | None = None
    try:
        if new_file:
            stream.write(",".join(HEADER) + "\n")
            stream.flush()
        pool = RayPool(args.ray) if args.ray else LocalPool(args.jobs or os.cpu_count() or 1)
        if not args.quiet:
            from tqdm import tqdm

            progress = tqdm(total=len(todo), file=sys.stderr, unit="layout", disable=not sys.stderr.isatty())

        def tasks() -> Iterable[tuple]:
            nonlocal pruned
            for c in todo:
                if not args.no_prune and len(times) >= args.top and c.bound_s > times[args.top - 1]:
                    pruned += 1
                    if progress is not None:
                        progress.update(1)
                    continue
                yield (base, c.layout, paths[c.layout.world_size], c.bound_s)

        for _task, row in pool.run(tasks(), pending_limit=2 * pool.jobs):
            if progress is not None:
                progress.update(1)
            if isinstance(row, Exception):
                failures += 1
                continue
            rows.append(row)
            times.append(float(row["iteration_s"]))
            times.sort()
            stream.write(",".join(_cell(row.get(f)) for f in HEADER) + "\n")
            stream.flush()
    finally:
        stream.close()
        if pool is not None:
            pool.close()
        if progress is not None:
            progress.close()
    if not args.quiet:
        print(f"simulated {len(rows) - len(done_rows)} layouts" + (f" ({len(done_rows)} kept from {args.output})"
                                                                     if done_rows else "")
              + f"; pruned {pruned} whose compute-only bound exceeds the {args.top}th best time"
              + (f"; {failures} failed" if failures else ""))
    return rows


def _say_plan(found: Plan, worlds: list[int], gpu: str, quiet: bool) -> None:
    if quiet:
        return
    dropped = sum(found.rejected.values())
    print(f"{found.enumerated} layouts on {', '.join(map(str, worlds))} GPUs: {dropped} rejected by Megatron's rules, "
          f"{found.too_big} do not fit the {gpu}'s memory, {len(found.candidates)} to simulate")
    for reason, count in found.rejected.most_common(3):
        print(f"  rejected {count}: {reason} ...")


def _top_reason(found: Plan) -> str:
    return found.rejected.most_common(1)[0][0] if found.rejected else "no sizes multiply out"


def _describe(layout: Layout | None) -> str:
    if layout is None:
        return "none"
    cp = f" cp {layout.cp}" if layout.cp > 1 else ""
    return (f"tp {layout.tp}{cp} pp {layout.pp} dp {layout.dp} ep {layout.ep} vpp {layout.vpp} micro {layout.micro_batch} "
            f"{layout.recompute} recomputation")


def _describe_row(row: dict[str, Any]) -> str:
    cp = f" cp {row['cp']}" if str(row.get("cp", "1")) not in ("1", "") else ""
    return (f"tp {row['tp']}{cp} pp {row['pp']} dp {row['dp']} ep {row['ep']} vpp {row['vpp']} micro {row['micro_batch']} "
            f"recompute {row['recompute']} sp {row['sequence_parallel']} dist-opt {row['distributed_optimizer']} "
            f"order {row['order']}{' tp-comm-overlap' if str(row.get('tp_comm_overlap')) == 'True' else ''}")


def _write_header_only(path: str, rows: list[dict[str, Any]]) -> None:
    """The partial CSV of a search that found nothing to simulate (what was done: nothing new)."""
    write_ranked(path, rows)

"""Placement of a job's ranks on a topology's GPUs, its rank file, and the search for the best one (issue 30).

A placement keeps the rank order's grouping into servers (Megatron's ``tp-cp-ep-dp-pp``, or ``tp-cp-ep-pp-dp`` with
``--use-tp-pp-dp-mapping``: ranks ``j x gps .. (j+1) x gps - 1`` share a server, as torchrun's node ranks give them;
which order is best is the layout search's question) and chooses:

* which physical server runs node rank ``j`` (``server_of[j]``): the stage-to-server mapping, the pipeline's order over
  the servers (it matters when servers differ: NIC rates per server);
* which GPU slot of its server each local rank takes (``slot_of[i]``, the same for every server so that the members
  of a DP or EP group, one per server at one local rank, stay on one rail): the slots that hold a NIC, and the
  NVLink pairs, go to the ranks whose traffic needs them (cross-server pipeline transfers on NIC-local GPUs spread over
  the NICs).

Rank ``r`` then runs on GPU ``server_of[r // gps] x gps + slot_of[r % gps]``.  The rank file (:func:`rank_file_text`)
lists ``host:slot`` per global rank; torchrun runs it with ``--node_rank j`` on host ``server_of[j]`` and
``CUDA_VISIBLE_DEVICES`` set to the slots in local-rank order (local rank ``i`` sees device ``slot_of[i]`` as its
``cuda:i``), and Megatron keeps its own rank order on top.

:func:`search_placement` is what ``python -m simulator place`` runs and what the layout search (simulator/search/run.py)
can call for its best layouts: it simulates the default placement, then slot orders spread over the NICs
(:func:`seed_slots`), then improves the slot order by swaps of two slots and the server order by swaps of two servers
whose NIC rates differ, each candidate played by the topo model, keeping a change only when the iteration gets shorter
by more than a nanosecond (so a topology where every placement is alike returns the default, to the microsecond).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from utils.errors import ConfigError, FormatError

NANOSECOND_S = 1e-9
"""A candidate replaces the best only when it is faster by more than this (float noise is no improvement)."""
MAX_EVALS = 300
"""Simulations one search runs at most (``--max_evals``); each is one play of the job (0.02-0.2 s for a 70B job)."""


@dataclass(frozen=True)
class Placement:
    """Node rank ``j`` on physical server ``server_of[j]``; local rank ``i`` on slot ``slot_of[i]`` of its server."""

    server_of: tuple[int, ...]
    slot_of: tuple[int, ...]

    @property
    def gps(self) -> int:
        return len(self.slot_of)

    def gpu_of(self) -> tuple[int, ...]:
        """The GPU of each global rank."""
        gps = self.gps
        return tuple(s * gps + slot for s in self.server_of for slot in self.slot_of)

    @property
    def is_default(self) -> bool:
        return self.server_of == tuple(range(len(self.server_of))) and self.slot_of == tuple(range(self.gps))

    @classmethod
    def default(cls, servers: int, gps: int) -> Placement:
        return cls(tuple(range(servers)), tuple(range(gps)))


def host_name(server: int) -> str:
    """The rank file's name of the topology's server ``server`` (its number is what a reader takes back)."""
    return f"server{server}"


def rank_file_text(placement: Placement, note: str = "") -> str:
    """The rank file: comment lines (how to launch it), then one ``host:slot`` line per global rank in rank order."""
    gps = placement.gps
    lines = ["# rank file: line k (k = 0, 1, ..., comments aside) is host:slot of global rank k",
             f"# torchrun --nnodes {len(placement.server_of)} --nproc_per_node {gps}: on each host, its node rank and "
             "CUDA_VISIBLE_DEVICES (local rank i uses the i-th device listed)"]
    devices = ",".join(map(str, placement.slot_of))
    for j, s in enumerate(placement.server_of):
        lines.append(f"#   {host_name(s)}: --node_rank {j} CUDA_VISIBLE_DEVICES={devices}")
    if note:
        lines += [f"# {line}" for line in note.splitlines()]
    for s in placement.server_of:
        lines += [f"{host_name(s)}:{slot}" for slot in placement.slot_of]
    return "\n".join(lines) + "\n"


_LINE = re.compile(r"^\s*([^\s:#]+)\s*:\s*(\d+)\s*$")
_HOST = re.compile(r"(\d+)$")


def parse_rank_file(text: str, source: str, gps: int, servers: int, world: int) -> tuple[int, ...]:
    """The GPU of each rank from a rank file's text: ``host:slot`` per rank in rank order (``#`` comments and blank
    lines skipped); a host's trailing number is its server in the topology (``server3``, ``node-3``, ``3``).  Raises
    :class:`FormatError` (one line: the file, the line) for a malformed line, a slot or server the topology lacks, a
    GPU named twice, or a count of ranks other than the job's."""
    gpus: list[int] = []
    first: dict[int, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        body = raw.split("#", 1)[0]
        if not body.strip():
            continue
        match = _LINE.match(body)
        if match is None:
            raise FormatError(source, f"expected host:slot (e.g. server0:3), got {body.strip()!r}", line=number)
        host, slot = match.group(1), int(match.group(2))
        server_match = _HOST.search(host)
        if server_match is None:
            raise FormatError(source, f"host {host!r} ends in no number: the number is its server in the topology "
                              "(server0, node-7, 12)", line=number, field="host")
        server = int(server_match.group(1))
        if server >= servers:
            raise FormatError(source, f"host {host} is server {server}; the topology has servers 0..{servers - 1}",
                              line=number, field="host")
        if slot >= gps:
            raise FormatError(source, f"slot {slot}: the topology's servers have slots 0..{gps - 1}", line=number,
                              field="slot")
        gpu = server * gps + slot
        if gpu in first:
            raise FormatError(source, f"{host}:{slot} (GPU {gpu}) is named twice, on lines {first[gpu]} and {number}",
                              line=number)
        first[gpu] = number
        gpus.append(gpu)
    if len(gpus) != world:
        raise FormatError(source, f"names {len(gpus)} ranks; the job has {world} (one host:slot line per rank)")
    return tuple(gpus)


def read_placement(path: str, topology: Any, world: int) -> tuple[int, ...]:
    """The GPU of each rank from the rank file at ``path`` (:func:`parse_rank_file`) for ``topology`` (a path or a
    :class:`topo.Topology`)."""
    from topo import Topology, read_topology
    from utils.io import read_text

    topo = topology if isinstance(topology, Topology) else read_topology(topology)
    text = read_text(path, "a rank file (host:slot per line)", what="--placement")
    return parse_rank_file(text, os.fspath(path), topo.gpus_per_server, topo.server_count, world)


# ---- the search -------------------------------------------------------------------------------------------


@dataclass
class PlaceResult:
    """What :func:`search_placement` found: iteration times in seconds, the placements, the simulations run, and the
    results of the default, the best, and the best with bubble filling (:mod:`simulator.topo.bubble_fill`)."""

    default_s: float
    best_s: float
    default: Placement
    best: Placement
    evaluated: int
    steps: list[str] = field(default_factory=list)
    """Each accepted change, in order (e.g. ``slots 2 <-> 4: 8.8127 -> 8.8084 s``)."""
    default_result: Any = None
    best_result: Any = None
    fill_result: Any = None


def _sim(session: Any, job: Any, options: Any, placement: Placement) -> Any:
    gpu_of = None if placement.is_default else placement.gpu_of()
    return session.simulate(job, replace(options, placement=gpu_of))


def _server_signature(topology: Any, server: int, hierarchy: Any) -> tuple[float, ...]:
    """What tells two servers apart for placement: the rates of their NICs, in order.  Servers of the same rates
    under other switches are not swapped: trying every such pair would spend the search's budget mostly on ties."""
    if hierarchy is not None:
        return tuple(float(topology.bandwidth_bps[e]) for e in hierarchy.nics(server))
    gps = topology.gpus_per_server
    return tuple(float(topology.nic_bps_per_gpu[g]) for g in range(server * gps, (server + 1) * gps))


def seed_slots(topology: Any, hierarchy: Any) -> list[tuple[int, ...]]:
    """Slot orders worth starting from besides the identity: the slots spread over the NICs and, under each NIC, over
    its PCIe switches (each NIC's GPUs taken switch by switch in turn, the NIC's own switch first; then the NICs taken
    in turn), so that consecutive local ranks (a TP group's, a stage's senders) share neither a NIC nor a switch's
    uplink; and the same order with the NIC-local slots (NCCL's PIX) first.  Empty without shared NICs."""
    if hierarchy is None:
        return []
    from topo.hierarchy import PATH_TYPES

    gps = topology.gpus_per_server
    by_nic: dict[int, dict[int, list[tuple[int, int]]]] = {}
    for g in range(gps):
        nic = hierarchy.local_nic(g)
        kind = PATH_TYPES.index(hierarchy.path(g, nic).kind)
        by_nic.setdefault(nic, {}).setdefault(hierarchy.switch_of(g), []).append((kind, g))
    if len(by_nic) == gps:  # a NIC per GPU: nothing to spread
        return []
    columns = []
    for _, switches in sorted(by_nic.items()):
        groups = sorted((sorted(cells) for cells in switches.values()), key=lambda cells: cells[0])
        columns.append([cells[row] for row in range(max(map(len, groups))) for cells in groups if row < len(cells)])
    cells = [col[row] for row in range(max(map(len, columns))) for col in columns if row < len(col)]
    spread = tuple(g for _, g in cells)
    near = tuple(g for _, g in sorted(cells, key=lambda cell: cell[0]))  # stable: NIC-local slots first
    return [slots for k, slots in enumerate((spread, near))
            if slots != tuple(range(gps)) and slots not in (spread, near)[:k]]


def search_placement(job: Any, topology: Any, options: Any = None, session: Any = None, max_evals: int = MAX_EVALS,
                     progress: Callable[[str], None] | None = None, fill_bubbles: bool = True) -> PlaceResult:
    """The best placement of ``job`` (a ``JobConfig``) on ``topology`` (a path or :class:`topo.Topology`) that the
    search finds (see the module docstring), with the default's and the best's iteration times.  ``options``: the
    :class:`simulator.options.TopoOptions` every simulation uses (its ``placement`` and ``fill_bubbles`` are set
    here); ``session``: a :class:`simulator.topo.session.TopoSession` on the topology to reuse (the layout search's).
    ``fill_bubbles``: also play the best placement with bubble filling (``fill_result``; the layout search, which
    reports no bubble filling, leaves it out).  Raises :class:`ConfigError` when the job does not fill whole servers."""
    from simulator.options import TopoOptions
    from simulator.topo.session import TopoSession
    from topo.hierarchy import hierarchy_of

    options = replace(options or TopoOptions(), placement=None, fill_bubbles=False)
    session = session or TopoSession(topology)
    topo = session.topology
    gps = topo.gpus_per_server
    world = job.parallel.world_size
    if world % gps:
        raise ConfigError(f"--world_size {world} does not fill whole servers of {gps} GPUs: a placement moves whole "
                          "servers and the slots inside them")
    if world > topo.gpu_count:
        raise ConfigError(f"{topo.source or 'the topology'} has {topo.gpu_count} GPUs, fewer than --world_size {world}")
    if max_evals < 1:
        raise ConfigError(f"--max_evals {max_evals}: expected at least 1")
    nodes = world // gps
    hierarchy = hierarchy_of(topo, options.pxn)
    default = Placement.default(nodes, gps)
    default_result = _sim(session, job, options, default)
    best, best_result = default, default_result
    best_s = default_s = default_result.iteration_us / 1e6
    evaluated = 1
    steps: list[str] = []
    say = progress or (lambda _text: None)

    def consider(candidate: Placement, label: str) -> bool:
        nonlocal best, best_result, best_s, evaluated
        if evaluated >= max_evals:
            return False
        result = _sim(session, job, options, candidate)
        evaluated += 1
        seconds = result.iteration_us / 1e6
        if seconds < best_s - NANOSECOND_S:
            steps.append(f"{label}: {best_s:.6f} -> {seconds:.6f} s")
            say(steps[-1])
            best, best_result, best_s = candidate, result, seconds
            return True
        return False

    for slots in seed_slots(topo, hierarchy):
        consider(replace(default, slot_of=slots), f"slots {','.join(map(str, slots))}")
    improved = True
    while improved and evaluated < max_evals:
        improved = False
        for i in range(gps):
            for k in range(i + 1, gps):
                slots = list(best.slot_of)
                slots[i], slots[k] = slots[k], slots[i]
                if consider(replace(best, slot_of=tuple(slots)), f"slots of local ranks {i} <-> {k}"):
                    improved = True
    # servers: only swaps with (or moves to) a server whose NIC rates differ are tried
    pool = range(topo.server_count)
    signature = {s: _server_signature(topo, s, hierarchy) for s in pool}
    improved = len(set(signature.values())) > 1
    while improved and evaluated < max_evals:
        improved = False
        for j in range(nodes):
            for s in pool:
                current = best.server_of
                if signature[s] == signature[current[j]]:
                    continue
                servers = list(current)
                if s in current:
                    k = current.index(s)
                    servers[j], servers[k] = s, current[j]
                    label = f"node ranks {j} <-> {k} (servers {current[j]} <-> {s})"
                else:
                    servers[j] = s
                    label = f"node rank {j}: server {current[j]} -> {s}"
                if consider(replace(best, server_of=tuple(servers)), label):
                    improved = True
    fill_result = None
    if fill_bubbles:
        fill_result = session.simulate(job, replace(options, placement=None if best.is_default else best.gpu_of(),
                                                    fill_bubbles=True))
    return PlaceResult(default_s, best_s, default, best, evaluated, steps, default_result, best_result, fill_result)


def placement_note(topology: Any, placement: Placement, pxn: bool) -> str:
    """What a rank file's comments say about the servers' insides: each slot's NIC and NCCL path type."""
    from topo.hierarchy import hierarchy_of

    h = hierarchy_of(topology, pxn)
    if h is None:
        return ""
    return "\n".join(["slots of server 0 (NCCL PXN " + ("on" if pxn else "off") + "):", *h.describe(0)])


def slots_text(slots: Sequence[int]) -> str:
    return ",".join(map(str, slots))

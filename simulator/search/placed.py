"""``python -m simulator search --placement search``: the best layouts of each sweep point placed on their topology.

    python -m topo.gen -topo Spectrum-X -g 64 --gpus_per_nic 4 --gpus_per_pcie_switch 2 -o topos/
    python -m simulator search -t topos/Spectrum-X_64g_8gps_4gpn_400Gbps_H100 --gpu_type H100 --model_name llama3_70B \\
        --world_size 64 --global_batch 64 --seq_length 8192 --use_flash_attn -o layouts.csv --placement search

After the usual ranking (rank ``r`` on GPU ``r``: torchrun's node rank ``j`` on server ``j``, ``CUDA_VISIBLE_DEVICES``
unset), each point's ``--placement_top`` fastest layouts go through :func:`simulator.topo.placement.search_placement`,
the search ``python -m simulator place`` runs (same options, same session, so the same times to the microsecond):
server order and GPU slot order.  Those layouts are re-ranked by their best placement's iteration time and written,
beside ``-o layouts.csv``, to ``layouts.placement.csv`` (one row per placed layout: its default and placed times,
the torchrun node-to-server map and ``CUDA_VISIBLE_DEVICES``, its rank file) and ``layouts.placementK.txt`` (the rank
file of row K: ``host:slot`` per global rank).  The main CSV is not touched: its rows stay the default placement's,
its header and fingerprints as :mod:`simulator.search.files` writes them, so ``--resume`` and its checks still hold.

A topology whose every GPU has its own NIC, all of one rate, with no PCIe switch or CPU socket described (what
``topo.gen`` writes without ``--gpus_per_nic``, ``--nvlink`` or ``--server_nic_bw``) has no GPU nearer a NIC than
another: no placement changes an iteration (``python -m simulator place`` returns the default there), so such a
point is skipped with one line saying so.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from simulator.search.files import LAYOUT_FIELDS, cell, layout_of
from utils.errors import ConfigError, UserError

PLACEMENTS = ("default", "search")
"""``--placement``: ``default`` rank r on GPU r (torchrun's node ranks, ``CUDA_VISIBLE_DEVICES`` unset); ``search``
the best layouts placed (this module)."""
PLACEMENT_TOP = 3
"""Default ``--placement_top``: layouts placed per sweep point (each up to ``--placement_max_evals`` simulations)."""
COLUMNS = ("rank", "gpu_type", "topology", "world_size", *(f for f in LAYOUT_FIELDS if f != "world_size"),
           "default_s", "placed_s", "gain_s", "csv_rank", "server_of_node_rank", "cuda_visible_devices", "evaluated",
           "rank_file", "job")
"""The placement CSV's columns: ``rank`` after re-ranking by ``placed_s`` within the sweep point, ``csv_rank`` the
layout's rank in the main CSV's point (default placement)."""


@dataclass
class Placed:
    """One layout placed: its main-CSV row, the default and best iteration times (s), the best placement."""

    row: dict[str, Any]
    csv_rank: int
    default_s: float = 0.0
    placed_s: float = 0.0
    server_of: tuple[int, ...] = ()
    slot_of: tuple[int, ...] = ()
    evaluated: int = 0
    steps: list[str] = field(default_factory=list)
    rank_text: str = ""
    skipped: str = ""
    """Why this layout was not placed (a job that does not fill whole servers), else empty."""
    rank_file: str = ""


@dataclass
class PointPlacement:
    """A sweep point's placed layouts, re-ranked (fastest placed first), or why the point was skipped."""

    point: Any
    placed: list[Placed]
    note: str = ""


def check_flags(args: Any) -> None:
    """``--placement_top`` and ``--placement_max_evals`` mean something only with ``--placement search``."""
    if args.placement != "search":
        for flag, value in (("--placement_top", args.placement_top), ("--placement_max_evals", args.placement_max_evals)):
            if value is not None:
                raise ConfigError(f"{flag} {value}: only with --placement search (--placement {args.placement} places "
                                  "rank r on GPU r)")


def output_paths(csv_path: str, count: int) -> tuple[str, list[str]]:
    """The placement CSV and the ``count`` rank files beside ``csv_path`` (``layouts.csv`` -> ``layouts.placement.csv``,
    ``layouts.placement1.txt`` ...)."""
    stem = os.path.splitext(csv_path)[0]
    return f"{stem}.placement.csv", [f"{stem}.placement{k}.txt" for k in range(1, count + 1)]


def cannot_place(topology: Any) -> str:
    """Why no placement can change an iteration on ``topology`` (a :class:`topo.Topology`), or "" when one can: the
    topology needs no :class:`topo.hierarchy.ServerHierarchy` (:func:`topo.hierarchy.needs_hierarchy`), so
    :func:`simulator.topo.placement.search_placement` would seed no slot order, find every slot swap equal (each
    DP group and pipeline peer stays on one rail) and try no server swap (every server's NICs alike)."""
    from topo.hierarchy import needs_hierarchy

    if needs_hierarchy(topology):
        return ""
    return ("every GPU has its own NIC, all of one rate, and no PCIe switch or CPU socket is described: no GPU is nearer "
            "a NIC than another and no server's NICs are faster, so placement cannot change an iteration (python -m "
            "simulator place returns rank r on GPU r here); --placement search skipped")


def place_layout(base: dict[str, Any], row: dict[str, Any], path: str, flags: dict[str, Any],
                 max_evals: int) -> dict[str, Any]:
    """One task (here or on a worker): the layout of ``row`` on the topology at ``path``, placed by
    :func:`simulator.topo.placement.search_placement` with the options of the search's own simulations
    (:func:`simulator.search.pool.simulate_job`), so its default time is the row's."""
    from simulator.options import TopoOptions
    from simulator.search.pool import session_for
    from simulator.search.space import build_job
    from simulator.topo.placement import placement_note, rank_file_text, search_placement

    try:
        job = build_job({**base, **flags}, layout_of(row))
        session = session_for(path)
        found = search_placement(job, path, TopoOptions(), session, max_evals, fill_bubbles=False)
    except UserError as exc:
        return {"skipped": str(exc)}
    note = "\n".join(filter(None, [f"layout: {describe(row)} (python -m simulator search --placement search)",
                                   f"iteration: {found.default_s:.6f} s at rank r on GPU r, {found.best_s:.6f} s placed",
                                   placement_note(session.topology, found.best, True)]))
    return {"default_s": found.default_s, "placed_s": found.best_s, "server_of": found.best.server_of,
            "slot_of": found.best.slot_of, "evaluated": found.evaluated, "steps": found.steps,
            "rank_text": rank_file_text(found.best, note)}


def describe(row: dict[str, Any]) -> str:
    cp = f" cp {row['cp']}" if str(row.get("cp", "1")) not in ("1", "") else ""
    return (f"tp {row['tp']}{cp} pp {row['pp']} dp {row['dp']} ep {row['ep']} vpp {row['vpp']} micro {row['micro_batch']} "
            f"recompute {row['recompute']} sp {row['sequence_parallel']} dist-opt {row['distributed_optimizer']} "
            f"order {row['order']}{' tp-comm-overlap' if str(row.get('tp_comm_overlap')) == 'True' else ''}")


def rerank(placed: list[Placed]) -> list[Placed]:
    """Placed layouts fastest placed first (ties: the main CSV's order); those skipped last, in the CSV's order."""
    done = sorted((p for p in placed if not p.skipped), key=lambda p: (p.placed_s, p.csv_rank))
    return done + [p for p in placed if p.skipped]


def place_points(rows: Sequence[dict[str, Any]], points: Sequence[Any], base: dict[str, Any], top: int,
                 max_evals: int, jobs: int, say: Callable[[str], None]) -> list[PointPlacement]:
    """Each point's ``top`` fastest rows placed (on ``jobs`` processes), re-ranked; points on topologies where no
    placement can change an iteration skipped with their note."""
    from simulator.search.pool import session_for

    out: list[PointPlacement] = []
    tasks: list[tuple[Placed, tuple]] = []
    for point in points:
        mine = sorted((r for r in rows if (r["gpu_type"], r["topology"], int(r["world_size"])) == point.key),
                      key=lambda r: float(r["iteration_s"]))
        if not mine:
            continue
        note = cannot_place(session_for(point.path).topology)
        if note:
            out.append(PointPlacement(point, [], note))
            continue
        placed = [Placed(row, rank) for rank, row in enumerate(mine[:top], start=1)]
        out.append(PointPlacement(point, placed))
        tasks += [(p, (base, p.row, point.path, point.flags, max_evals)) for p in placed]
    if tasks:
        say(f"placement: {len(tasks)} layout{'s' if len(tasks) > 1 else ''} to place (at most {max_evals} simulations "
            "each: server order, GPU slot order)")
    for (placed, _), found in zip(tasks, _run(tasks, jobs)):
        if "skipped" in found:
            placed.skipped = found["skipped"]
            continue
        for name, value in found.items():
            setattr(placed, name, value)
    for entry in out:
        entry.placed = rerank(entry.placed)
    return out


def _run(tasks: list[tuple[Placed, tuple]], jobs: int) -> list[dict[str, Any]]:
    """The tasks' results in order: here, or on up to ``jobs`` worker processes that die with the search."""
    if jobs <= 1 or len(tasks) < 2:
        return [place_layout(*args) for _, args in tasks]
    from simulator.search.pool import LocalPool

    local = LocalPool(min(jobs, len(tasks)))
    try:
        return list(local.pool.map(place_layout, *zip(*(args for _, args in tasks))))
    finally:
        local.close()


def assign_files(points: list[PointPlacement], rank_files: Sequence[str]) -> None:
    """Number the placed layouts in the placement CSV's order and give each its rank file."""
    k = 0
    for entry in points:
        for placed in entry.placed:
            if not placed.skipped:
                placed.rank_file = rank_files[k]
                k += 1


def csv_text(points: Sequence[PointPlacement]) -> str:
    """The placement CSV: the placed layouts of each point, fastest placed first (microseconds: ``*_s`` to 6 places)."""
    lines = [",".join(COLUMNS)]
    for entry in points:
        for rank, p in enumerate((p for p in entry.placed if not p.skipped), start=1):
            values = {**{f: p.row.get(f) for f in LAYOUT_FIELDS}, "rank": rank, "gpu_type": p.row.get("gpu_type"),
                      "topology": p.row.get("topology"), "world_size": p.row.get("world_size"),
                      "default_s": p.default_s, "placed_s": p.placed_s, "gain_s": p.default_s - p.placed_s,
                      "csv_rank": p.csv_rank, "server_of_node_rank": " ".join(map(str, p.server_of)),
                      "cuda_visible_devices": " ".join(map(str, p.slot_of)), "evaluated": p.evaluated,
                      "rank_file": os.path.basename(p.rank_file), "job": p.row.get("job")}
            lines.append(",".join(cell(values[name], name) for name in COLUMNS))
    return "\n".join(lines) + "\n"


def files(points: Sequence[PointPlacement], csv_path: str) -> dict[str, str]:
    """What to write: the placement CSV and each placed layout's rank file (none when nothing was placed)."""
    out = {p.rank_file: p.rank_text for entry in points for p in entry.placed if p.rank_file}
    return {csv_path: csv_text(points), **out} if out else {}


def summary_lines(points: Sequence[PointPlacement]) -> tuple[list[str], list[str]]:
    """(the verdict: one line per point, always printed; the details: a line per placed layout)."""
    verdict: list[str] = []
    details: list[str] = []
    for entry in points:
        where = entry.point.describe()
        if entry.note:
            verdict.append(f"placement: {where}: {entry.note}")
            continue
        done = [p for p in entry.placed if not p.skipped]
        details.append(f"placement on {where} ({len(done)} of the best layouts placed, re-ranked by the placed time):")
        for rank, p in enumerate(done, start=1):
            details.append(f"  {rank}. {describe(p.row)} (CSV rank {p.csv_rank}): rank r on GPU r {p.default_s:.6f} s, "
                           f"placed {p.placed_s:.6f} s ({(p.default_s - p.placed_s) * 1e6:,.1f} us faster, "
                           f"{p.evaluated} placements simulated), CUDA_VISIBLE_DEVICES={','.join(map(str, p.slot_of))}, "
                           f"node rank j on server {' '.join(map(str, p.server_of))}: {p.rank_file}")
        details += [f"  not placed: {describe(p.row)}: {p.skipped}" for p in entry.placed if p.skipped]
        if done:
            best = done[0]
            moved = " (not the main CSV's best)" if best.csv_rank != 1 else ""
            verdict.append(f"best placed on {where}: {describe(best.row)}{moved}: {best.placed_s:.6f} s per iteration "
                           f"(rank r on GPU r {best.default_s:.6f} s), rank file {best.rank_file}")
    return verdict, details


def html_section(points: Sequence[PointPlacement], html_path: str) -> str:
    """The page's placement section: per point, the placed layouts re-ranked with their default and placed times and
    each rank file (a link beside the page's folder, and its text in a fold, so the page stays self-contained)."""
    parts = ["<h2>Placement (--placement search)</h2>"]
    for entry in points:
        where = html.escape(entry.point.describe())
        if entry.note:
            parts.append(f"<p class='note'>{where}: {html.escape(entry.note)}.</p>")
            continue
        head = "".join(f"<th{' class=t' if text in ('layout', 'rank file') else ''}>{text}</th>" for text in (
            "rank", "layout", "CSV rank", "rank r on GPU r (s)", "placed (s)", "gain (us)", "CUDA_VISIBLE_DEVICES",
            "node rank j on server", "rank file"))
        body = []
        for rank, p in enumerate((p for p in entry.placed if not p.skipped), start=1):
            link = os.path.relpath(p.rank_file, os.path.dirname(os.path.abspath(html_path)) or ".")
            body.append(f"<tr><td>{rank}</td><td class='t'>{html.escape(describe(p.row))}</td><td>{p.csv_rank}</td>"
                        f"<td>{p.default_s:.6f}</td><td>{p.placed_s:.6f}</td><td>{(p.default_s - p.placed_s) * 1e6:,.1f}"
                        f"</td><td class='t'>{','.join(map(str, p.slot_of))}</td><td class='t'>"
                        f"{' '.join(map(str, p.server_of))}</td><td class='t'><a href='{html.escape(link)}'>"
                        f"{html.escape(os.path.basename(p.rank_file))}</a></td></tr>")
        parts.append(f"<h2>{where}: placed</h2><div class='wrap'><table><thead><tr>{head}</tr></thead><tbody>"
                     + "".join(body) + "</tbody></table></div>")
        parts += [f"<details><summary>{html.escape(os.path.basename(p.rank_file))}</summary><pre>"
                  f"{html.escape(p.rank_text)}</pre></details>" for p in entry.placed if p.rank_file]
        parts += [f"<p class='note'>not placed: {html.escape(describe(p.row))}: {html.escape(p.skipped)}</p>"
                  for p in entry.placed if p.skipped]
    return "".join(parts)

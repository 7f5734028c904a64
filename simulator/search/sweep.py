"""Hardware sweeps in the layout search: GPU types x GPU counts x topologies, each point searched for its best
layouts, the points compared by what a trained token costs.

    python -m simulator search --topo_gen "-topo Spectrum-X" --gpu_type H100,H200,B200 --world_size 1024,2048,4096 \\
        --model_name llama3_70B --global_batch 1024 --seq_length 8192 -o sweep.csv --html sweep.html

A point is one GPU type, one GPU count and one topology: ``-t FILE`` for every point, or each ``--topo_gen`` template
(the flag repeated) generated per GPU count with the point's GPU type (``topo.gen -gt``, which gives the GPU's
nominal NVLink rate) unless the flags name one.  Pruning compares layouts within a point only, so every point keeps
its own best ``--top`` (issue 28, item 14).  Each row carries the point's GPU type, topology and
``gpu_hours_per_million_tokens`` (GPU count x iteration seconds / 3600 / tokens per iteration x 10^6): what the
layout costs per trained token, comparable across GPU types and sizes.  :func:`pareto_rows` is the front of
iteration time against that cost (no other layout is both faster and cheaper).
"""

from __future__ import annotations

import io
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from utils.errors import ConfigError


@dataclass
class Point:
    """One sweep point: the GPU type, GPU count and topology its layouts run on."""

    gpu: str
    world: int
    topology: str
    """The topology's name in the CSV: the file name of ``-t``, or the ``--topo_gen`` flags."""
    path: str
    """The topology file the workers read."""
    job: str = ""
    """The job fingerprint (:func:`simulator.search.files.fingerprint`)."""
    flags: dict[str, Any] = field(default_factory=dict)
    """Job flags the point sets (its ``gpu_type``)."""

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.gpu, self.topology, self.world)

    def columns(self) -> dict[str, Any]:
        """What :func:`simulator.search.pool.simulate_layout` needs of the point."""
        return {"topology": self.topology, "job": self.job, "flags": self.flags}

    def describe(self) -> str:
        return f"{self.world} {self.gpu} on {self.topology}"


def gpu_types(text: str | None) -> list[str]:
    """``--gpu_type`` as a list of the compute model's GPU names (``H100,H200,B200``); an unknown one is a one-line
    error naming it."""
    from mocked_model.compute import gpu_spec

    if not text:
        raise ConfigError("the search needs --gpu_type (its memory and the compute model's times; a comma list sweeps "
                          "GPU types)")
    names: list[str] = []
    for value in (v.strip() for v in str(text).split(",")):
        if not value:
            raise ConfigError(f"--gpu_type {text!r}: an empty name in the list")
        name = gpu_spec(value).name if not os.path.isfile(value) else value
        if name not in names:
            names.append(name)
    return names


def worlds(text: str) -> list[int]:
    """``--world_size``: a GPU count or a comma list of counts (an empty item refused, as ``--gpu_type``'s)."""
    if text.strip() and not all(v.strip() for v in text.split(",")):
        raise ConfigError(f"--world_size {text!r}: an empty count in the list")
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise ConfigError(f"--world_size {text!r}: expected a GPU count or a comma list of counts") from None
    if not values or values[0] < 1:
        raise ConfigError(f"--world_size {text!r}: expected positive GPU counts")
    return values


def _names_gpu(flags: list[str]) -> bool:
    return any(f in ("-gt", "--gpu_type") or f.startswith(("--gpu_type=", "-gt=")) for f in flags)


def points(topology: str | None, templates: list[str] | None, gpus: list[str], sizes: list[int], folder: str,
           say=print) -> list[Point]:
    """Every (GPU type, GPU count, topology) of the sweep, topologies generated into ``folder`` as needed.

    ``topology``: ``-t FILE`` (read once here: a count above its GPUs is a one-line error); ``templates``: the
    ``--topo_gen`` values (each shell-quoted ``topo.gen`` flags, :func:`topo.gen.split_flags`)."""
    if bool(topology) == bool(templates):
        raise ConfigError("give -t/--topology FILE or --topo_gen \"FLAGS\" (one of them)")
    out: list[Point] = []
    if topology:
        from topo import read_topology

        topo = read_topology(topology)
        small = [w for w in sizes if w > topo.gpu_count]
        if small:
            raise ConfigError(f"{topology} has {topo.gpu_count} GPUs, fewer than --world_size {small[0]}")
        from simulator.search.pool import _SESSIONS
        from simulator.topo.session import TopoSession

        _SESSIONS[topology] = TopoSession(topo)  # the main process's (and forked workers') session
        name = os.path.basename(topology)
        return [Point(g, w, name, topology, flags={"gpu_type": g}) for g in gpus for w in sizes]
    from topo.gen import main as topo_main
    from topo.gen import split_flags

    for index, text in enumerate(templates or []):
        flags = split_flags(text)
        for gpu in gpus:
            for world in sizes:
                # the point's GPU in the file (its nominal NVLink rate), unless the flags name one or it is a spec file
                own = flags if _names_gpu(flags) or os.path.isfile(gpu) else [*flags, "-gt", gpu]
                path = os.path.join(folder, f"topology_{index}_{gpu}_{world}.txt")
                said = io.StringIO()
                with open(os.devnull, "w") as sink:
                    saved, sys.stdout, saved_err, sys.stderr = sys.stdout, sink, sys.stderr, said
                    try:
                        topo_main([*own, "-g", str(world), "-o", path])
                    except SystemExit as exc:  # topo.gen's parser: -h (exit 0, which ended the search silently), a bad flag
                        lines = said.getvalue().strip().splitlines()
                        why = lines[-1].removeprefix("topo.gen: error: ") if exc.code and lines else \
                            "takes topo.gen's flags for a topology (-h/--help prints none)"
                        raise ConfigError(f"--topo_gen {text!r}: {why}") from None
                    finally:
                        sys.stdout, sys.stderr = saved, saved_err
                if said.getvalue():
                    sys.stderr.write(said.getvalue())  # topo.gen's warnings
                out.append(Point(gpu, world, text.strip(), path, flags={"gpu_type": gpu}))
    return out


def pareto_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows no other row beats on both iteration time and GPU-hours per million tokens, cheapest first."""
    from simulator.search.report import pareto_front

    pts = [(float(r["gpu_hours_per_million_tokens"]), float(r["iteration_s"])) for r in rows]
    return [rows[i] for i in pareto_front(pts)]


def best_per_point(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fastest row of each (GPU type, topology, GPU count), cheapest per token first."""
    best: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        key = (r.get("gpu_type"), r.get("topology"), str(r.get("world_size")))
        if key not in best or float(r["iteration_s"]) < float(best[key]["iteration_s"]):
            best[key] = r
    return sorted(best.values(), key=lambda r: float(r["gpu_hours_per_million_tokens"]))

"""The profiling database: measured collectives per node wiring and measured kernels per GPU type, as CSV.

Layout (Vidur's, with one file per collective)::

    <root>/network/<network_device>/allreduce.csv      all_reduce
                                    allgather.csv      all_gather
                                    reducescatter.csv  reduce_scatter
                                    alltoall.csv       all_to_all
                                    broadcast.csv      broadcast
                                    send_recv.csv      one send / recv between two ranks
                                    profile.json       how it was measured (optional)
    <root>/compute/<sku>/<model>/mlp.csv               GEMMs and every memory-bound operation
                                 attention.csv         attention cores
                                 profile.json

``network_device`` names a node's wiring (``h100_dgx``, ``a100_pair_nvlink``): network profiles depend
on it; compute profiles depend only on the GPU type (``sku``), so the reader merges every ``<model>``
folder of a sku (a GEMM measured for one model prices the same GEMM of another).

Network files: one row per measured point, units in the column names, nccl-tests' conventions
(docs/formats.md section 1: ``size_bytes`` is the whole buffer, GB/s = 1e9 B/s, ``busbw = algbw x factor``)::

    ranks, ranks_per_node, size_bytes, time_us, algbw_gbps, busbw_gbps[, more columns]

``ranks_per_node`` divides ``ranks`` (``ranks / ranks_per_node`` nodes); ``send_recv`` rows have 2
ranks (``ranks_per_node`` 2: inside a node, 1: across nodes).  A user can write one by hand or from
nccl-tests' output (``python -m profiling nccl-tests``).

Compute files (times of one call, microseconds, on this sku, in ``dtype``)::

    mlp.csv:        op, phase, dtype, shapes, variant, m, n, k, batch, elements, time_us[, more]
    attention.csv:  phase, dtype, impl, batch, heads, kv_heads, seq, head_dim, v_dim, dropout, time_us[, more]

``op`` is a computation item's ``meta['op']`` (GEMMs, whatever their role, are ``gemm`` rows keyed by
``m, n, k, batch``: ``batch`` GEMMs of ``(m, k) x (k, n)``); ``phase`` forward or backward; ``shapes``
the item's operand shapes (``64x1x256;256x384``); ``variant`` the options that change its kernels
(``bias=True,p>0``); ``elements`` the size an operation scales with.  :func:`item_key` computes
these from a :class:`utils.workload.WorkItem`, so the profiler writes exactly what the reader looks up.

Every malformed file is one :class:`utils.errors.FormatError` naming the file (and line and column);
an absent device or sku is a :class:`utils.errors.ConfigError` naming the folder and what it holds.
Writers merge with what is there (a new measurement of the same point replaces the old row) and
write through a temporary file, so a failed run leaves the database as it was.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from utils.errors import ConfigError, FormatError
from utils.io import atomic_write, read_text
from utils.units import busbw_factor

NETWORK_FILES = {"all_reduce": "allreduce.csv", "all_gather": "allgather.csv", "reduce_scatter": "reducescatter.csv",
                 "all_to_all": "alltoall.csv", "broadcast": "broadcast.csv", "send_recv": "send_recv.csv"}
"""Collective (CommType value, and ``send_recv``) -> its file in a network device's folder."""
NETWORK_COLUMNS = ("ranks", "ranks_per_node", "size_bytes", "time_us", "algbw_gbps", "busbw_gbps")
MLP_COLUMNS = ("op", "phase", "dtype", "shapes", "variant", "m", "n", "k", "batch", "elements", "time_us")
ATTENTION_COLUMNS = ("phase", "dtype", "impl", "batch", "heads", "kv_heads", "seq", "head_dim", "v_dim", "dropout",
                     "time_us")
META_FILE = "profile.json"
MAX_ALGBW_GBPS = 1e9
"""The largest algbw (size_bytes / time_us, GB/s) a network row may imply: an exabyte a second, far beyond any
link; a larger one is a broken time (``1e-300`` us made it infinite)."""
GEMM_OPS = frozenset({"gemm", "dgrad", "wgrad"})
"""Computation ops whose time is one GEMM (their rows are ``op = gemm``)."""
PHASES = ("forward", "backward", "step")


# ---- the network side ------------------------------------------------------------------------------

@dataclass(frozen=True)
class NetworkTable:
    """One collective's measured points, as read (rows in file order; ``lines`` their line numbers)."""

    kind: str
    path: str
    ranks: tuple[int, ...]
    ranks_per_node: tuple[int, ...]
    size_bytes: tuple[int, ...]
    time_us: tuple[float, ...]
    busbw_gbps: tuple[float, ...]

    def series(self) -> dict[tuple[int, int], tuple[tuple[int, ...], tuple[float, ...]]]:
        """``(ranks, ranks_per_node) -> (sizes ascending, times in us)``."""
        out: dict[tuple[int, int], list[tuple[int, float]]] = {}
        for n, r, s, t in zip(self.ranks, self.ranks_per_node, self.size_bytes, self.time_us):
            out.setdefault((n, r), []).append((s, t))
        return {key: (tuple(s for s, _ in sorted(v)), tuple(t for _, t in sorted(v))) for key, v in sorted(out.items())}


def network_dir(root: str | os.PathLike, device: str) -> str:
    return os.path.join(os.fspath(root), "network", device)


def network_devices(root: str | os.PathLike) -> list[str]:
    """The network devices a database holds (folders under ``<root>/network``)."""
    base = os.path.join(os.fspath(root), "network")
    return sorted(d for d in os.listdir(base) if os.path.isdir(os.path.join(base, d))) if os.path.isdir(base) else []


def read_network(root: str | os.PathLike, device: str) -> dict[str, NetworkTable]:
    """Every collective file of ``device`` (at least one), validated."""
    root = os.fspath(root)
    if not os.path.isdir(root):
        raise ConfigError(f"--profile {root}: no such folder (a profiling database: python -m profiling)")
    folder = network_dir(root, device)
    if not os.path.isdir(folder):
        known = network_devices(root)
        raise ConfigError(f"--network_device {device}: {os.path.join(root, 'network')} holds no such device "
                          f"(it has: {', '.join(known) or 'none'})")
    tables = {kind: read_network_file(os.path.join(folder, name), kind)
              for kind, name in NETWORK_FILES.items() if os.path.isfile(os.path.join(folder, name))}
    if not tables:
        raise ConfigError(f"--network_device {device}: {folder} holds none of {', '.join(NETWORK_FILES.values())}")
    return tables


def _rows(path: str, required: Sequence[str], what: str) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    text = read_text(path, what)
    reader = csv.reader(text.splitlines())
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise FormatError(path, f"empty file (expected the header {', '.join(required)})") from None
    missing = [c for c in required if c not in header]
    if missing:
        raise FormatError(path, f"missing column(s) {', '.join(missing)} (a {what} has {', '.join(required)})", line=1)
    rows = []
    for line, cells in enumerate(reader, start=2):
        if not cells or all(not c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise FormatError(path, f"{len(cells)} cells, the header has {len(header)}", line=line)
        rows.append((line, {h: c.strip() for h, c in zip(header, cells)}))
    if not rows:
        raise FormatError(path, f"no rows (a {what} holds one row per measured point)")
    return header, rows


def _int(path: str, line: int, row: dict[str, str], name: str, low: int | None = 0) -> int:
    text = row[name]
    try:
        value = float(text)
    except ValueError:
        raise FormatError(path, f"expected a whole number, got {text!r}", line=line, field=name) from None
    if not math.isfinite(value) or value != int(value):
        raise FormatError(path, f"expected a whole number, got {text!r}", line=line, field=name)
    if low is not None and value < low:
        raise FormatError(path, f"must be at least {low}, got {text}", line=line, field=name)
    return int(value)


def _float(path: str, line: int, row: dict[str, str], name: str, positive: bool = True) -> float:
    text = row[name]
    try:
        value = float(text)
    except ValueError:
        raise FormatError(path, f"expected a number, got {text!r}", line=line, field=name) from None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise FormatError(path, f"must be {'positive' if positive else 'non-negative'}, got {text}", line=line,
                          field=name)
    return value


def read_network_file(path: str, kind: str) -> NetworkTable:
    """Read and check one collective file (columns, types, signs, nccl-tests' bandwidths, duplicates)."""
    _, rows = _rows(path, NETWORK_COLUMNS, "network profile")
    cols: dict[str, list] = {c: [] for c in ("ranks", "ranks_per_node", "size_bytes", "time_us", "busbw_gbps")}
    seen: dict[tuple[int, int, int], int] = {}
    for line, row in rows:
        n = _int(path, line, row, "ranks", 2)
        r = _int(path, line, row, "ranks_per_node", 1)
        if n % r:
            raise FormatError(path, f"{r} does not divide ranks {n} (ranks / ranks_per_node nodes)", line=line,
                              field="ranks_per_node")
        if kind == "send_recv" and n != 2:
            raise FormatError(path, f"a send/recv has 2 ranks, got {n}", line=line, field="ranks")
        size = _int(path, line, row, "size_bytes", 1)
        time_us = _float(path, line, row, "time_us")
        algbw = size / (time_us * 1e-6) / 1e9
        if not algbw <= MAX_ALGBW_GBPS:  # also inf: 1e-300 us overflowed, and inf - inf passed the check below
            raise FormatError(path, f"{size} bytes in {time_us:g} us is {algbw:.3g} GB/s, more than the "
                                    f"{MAX_ALGBW_GBPS:g} GB/s any network moves (a broken time)", line=line,
                              field="time_us")
        for name, factor in (("algbw_gbps", 1.0), ("busbw_gbps", busbw_factor("isend" if kind == "send_recv" else kind, n))):
            given = _float(path, line, row, name, positive=False)
            exact = size / (time_us * 1e-6) / 1e9 * factor
            if abs(given - exact) > max(0.006, 0.01 * exact):
                raise FormatError(path, f"{given:g} disagrees with size_bytes / time_us{' x factor' if factor != 1 else ''} "
                                        f"= {exact:.4g} (GB/s = 1e9 B/s, nccl-tests' definitions)", line=line, field=name)
        key = (n, r, size)
        if key in seen:
            raise FormatError(path, f"ranks {n}, ranks_per_node {r}, size_bytes {size} again (first on line "
                                    f"{seen[key]}); keep one row per measured point", line=line)
        seen[key] = line
        for name, value in zip(cols, (n, r, size, time_us, _float(path, line, row, "busbw_gbps", positive=False))):
            cols[name].append(value)
    return NetworkTable(kind, path, *(tuple(v) for v in cols.values()))


def network_row(kind: str, ranks: int, ranks_per_node: int, size_bytes: int, time_us: float, **more: Any) -> dict[str, Any]:
    """A row with nccl-tests' algbw and busbw (GB/s) worked out from size and time."""
    algbw = size_bytes / (time_us * 1e-6) / 1e9
    factor = busbw_factor("isend" if kind == "send_recv" else kind, ranks)
    return dict(ranks=ranks, ranks_per_node=ranks_per_node, size_bytes=size_bytes, time_us=round(time_us, 4),
                algbw_gbps=round(algbw, 6), busbw_gbps=round(algbw * factor, 6), **more)


def write_network(root: str | os.PathLike, device: str, kind: str, rows: Iterable[dict[str, Any]],
                  merge: bool = True) -> str:
    """Write (merging) ``device``'s file of ``kind``; returns its path."""
    path = os.path.join(network_dir(root, device), NETWORK_FILES[kind])
    return _write(path, NETWORK_COLUMNS, list(rows), ("ranks", "ranks_per_node", "size_bytes"), merge)


# ---- the compute side ---------------------------------------------------------------------------------

def compute_dir(root: str | os.PathLike, sku: str, model: str) -> str:
    return os.path.join(os.fspath(root), "compute", sku, model)


def skus(root: str | os.PathLike) -> list[str]:
    base = os.path.join(os.fspath(root), "compute")
    return sorted(d for d in os.listdir(base) if os.path.isdir(os.path.join(base, d))) if os.path.isdir(base) else []


@dataclass(frozen=True)
class ComputeRows:
    """A sku's measured operations, every model folder merged: ``mlp`` and ``attention`` rows as dicts
    with typed values (ints, floats, strings), each with ``_where`` (file:line) for messages."""

    sku: str
    paths: tuple[str, ...]
    mlp: tuple[dict[str, Any], ...]
    attention: tuple[dict[str, Any], ...]


def read_compute(root: str | os.PathLike, sku: str) -> ComputeRows:
    root = os.fspath(root)
    folder = os.path.join(root, "compute", sku)
    if not os.path.isdir(folder):
        raise ConfigError(f"--compute_sku {sku}: {os.path.join(root, 'compute')} holds no such GPU type "
                          f"(it has: {', '.join(skus(root)) or 'none'})")
    paths: list[str] = []
    mlp: dict[tuple, dict[str, Any]] = {}
    attention: dict[tuple, dict[str, Any]] = {}
    for model in sorted(os.listdir(folder)):
        for name, table, reader in (("mlp.csv", mlp, _mlp_row), ("attention.csv", attention, _attention_row)):
            path = os.path.join(folder, model, name)
            if not os.path.isfile(path):
                continue
            paths.append(path)
            _, rows = _rows(path, MLP_COLUMNS if name == "mlp.csv" else ATTENTION_COLUMNS, f"compute profile ({name})")
            here: dict[tuple, int] = {}
            for line, raw in rows:
                row = reader(path, line, raw)
                key = row_key(row, name)
                if key in here:  # in one file, as the network files: two times for one point is a broken file
                    raise FormatError(path, f"the point of line {here[key]} again ({_key_text(key, name)}); keep one "
                                            "row per measured point", line=line)
                here[key] = line
                table.setdefault(key, row)  # the same point in two model folders: the first wins
    if not paths:
        raise ConfigError(f"--compute_sku {sku}: {folder} holds no <model>/mlp.csv or attention.csv")
    return ComputeRows(sku, tuple(paths), tuple(mlp.values()), tuple(attention.values()))


def _mlp_row(path: str, line: int, raw: dict[str, str]) -> dict[str, Any]:
    op = raw["op"]
    if not op:
        raise FormatError(path, "empty op", line=line, field="op")
    phase = raw["phase"]
    if phase not in PHASES:
        raise FormatError(path, f"expected one of {', '.join(PHASES)}, got {phase!r}", line=line, field="phase")
    row: dict[str, Any] = dict(op=op, phase=phase, dtype=raw["dtype"], shapes=raw["shapes"], variant=raw["variant"],
                               time_us=_float(path, line, raw, "time_us"), _where=f"{path}:{line}")
    try:
        parse_shapes(raw["shapes"])
    except ValueError:
        raise FormatError(path, f"expected shapes like 64x1x256;256x384, got {raw['shapes']!r}", line=line,
                          field="shapes") from None
    if op == "gemm":
        for name in ("m", "n", "k", "batch"):
            row[name] = _int(path, line, raw, name, 1)
        row["elements"] = row["m"] * row["k"] * row["batch"]
    else:
        row["elements"] = _int(path, line, raw, "elements", 1)
    return row


def _attention_row(path: str, line: int, raw: dict[str, str]) -> dict[str, Any]:
    phase = raw["phase"]
    if phase not in ("forward", "backward"):
        raise FormatError(path, f"expected forward or backward, got {phase!r}", line=line, field="phase")
    row: dict[str, Any] = dict(phase=phase, dtype=raw["dtype"], impl=raw["impl"], _where=f"{path}:{line}",
                               dropout=_float(path, line, raw, "dropout", positive=False),
                               time_us=_float(path, line, raw, "time_us"))
    for name in ("batch", "heads", "kv_heads", "seq", "head_dim", "v_dim"):
        row[name] = _int(path, line, raw, name, 1)
    return row


def row_key(row: dict[str, Any], name: str = "mlp.csv") -> tuple:
    """What identifies a measured point (two rows with one key measure the same thing)."""
    if name == "attention.csv":
        return tuple(row[c] for c in ATTENTION_COLUMNS[:-1])
    if row["op"] == "gemm":
        return ("gemm", row["dtype"], row["m"], row["n"], row["k"], row["batch"])
    return (row["op"], row["phase"], row["dtype"], row["shapes"], row["variant"])


def _key_text(key: tuple, name: str) -> str:
    """A row key as ``column value, ...`` for messages."""
    if name == "attention.csv":
        columns = ATTENTION_COLUMNS[:-1]
    elif key and key[0] == "gemm":
        columns = ("op", "dtype", "m", "n", "k", "batch")
    else:
        columns = ("op", "phase", "dtype", "shapes", "variant")
    return ", ".join(f"{c} {v}" for c, v in zip(columns, key) if v != "")


def write_compute(root: str | os.PathLike, sku: str, model: str, mlp: Sequence[dict[str, Any]],
                  attention: Sequence[dict[str, Any]], merge: bool = True) -> list[str]:
    """Write (merging) a model folder's two files; returns the paths written."""
    folder = compute_dir(root, sku, model)
    out = []
    if mlp:
        out.append(_write(os.path.join(folder, "mlp.csv"), MLP_COLUMNS, list(mlp), None, merge))
    if attention:
        out.append(_write(os.path.join(folder, "attention.csv"), ATTENTION_COLUMNS, list(attention), ATTENTION_COLUMNS[:-1],
                          merge))
    return out


# ---- the keys of a computation item ------------------------------------------------------------------

def shapes_text(shapes: Sequence[Sequence[int]] | None) -> str:
    return ";".join("x".join(str(int(d)) for d in shape) for shape in (shapes or ()))


def parse_shapes(text: str) -> tuple[tuple[int, ...], ...]:
    if not text:
        return ()
    return tuple(tuple(int(d) for d in part.split("x")) for part in text.split(";"))


def phase_of(item: Any) -> str:
    phase = item.stage.split(".", 1)[0]
    return "forward" if phase == "recompute" else phase


def gemm_dims(item: Any) -> tuple[int, int, int, int] | None:
    """``(m, n, k, batch)`` of a GEMM item, as the compute model reads its shapes
    (:func:`mocked_model.compute.ops._gemm_kernels`): ``((.., k), (k, n))`` or grouped ``((tokens, k), (E, k, n))``."""
    shapes = item.shapes or ()
    if len(shapes) < 2:
        return None
    a, b = shapes[0], shapes[1]
    if len(b) == 3:
        experts, k, n = b
        return max(math.prod(a[:-1]) // max(experts, 1), 1), n, k, experts
    return math.prod(a[:-1]), b[-1], a[-1], 1


VARIANT_KEYS = {"bda": ("bias", "p"), "gelu": ("bias",), "swiglu": ("bias",), "embedding": ("positions", "p"),
                "optimizer": ("grad_bytes", "loss_scaling")}
"""The meta entries that change an operation's kernels (dropout only as on or off)."""


def variant(item: Any) -> str:
    meta = item.meta or {}
    parts = []
    for name in VARIANT_KEYS.get(meta.get("op"), ()):
        if name == "p":
            parts.append(f"p>0={bool(meta.get('p', 0.0) > 0)}")
        elif name in meta:
            parts.append(f"{name}={meta[name]}")
    return ",".join(parts)


def elements(item: Any) -> int:
    """What a memory-bound operation scales with: the elements of its first operand (the optimizer:
    the parameters it updates)."""
    shapes = item.shapes or ()
    if not shapes:
        return 0
    return math.prod(shapes[-1] if (item.meta or {}).get("op") == "optimizer" else shapes[0])


def attention_dims(item: Any) -> dict[str, Any] | None:
    shapes = item.shapes or ()
    if not shapes:
        return None
    meta = item.meta or {}
    b, h, s, d = shapes[0]
    g = shapes[1][1] if len(shapes) > 1 else h
    return dict(batch=b, heads=h, kv_heads=g, seq=s, head_dim=d, v_dim=meta.get("v_dim") or d,
                impl=meta.get("impl", "flash"), dropout=float(meta.get("p", 0.0)))


def item_key(item: Any, dtype: str) -> tuple[str, dict[str, Any]] | None:
    """``(file, the row's key columns)`` of a computation item, or None when no profile row can hold it."""
    meta = item.meta or {}
    op = meta.get("op")
    if op in GEMM_OPS:
        dims = gemm_dims(item)
        if dims is None:
            return None
        m, n, k, batch = dims
        return "mlp.csv", dict(op="gemm", phase="forward", dtype=dtype, shapes=f"{m}x{k};{k}x{n}" if batch == 1
                               else f"{batch}x{m}x{k};{batch}x{k}x{n}", variant="", m=m, n=n, k=k, batch=batch,
                               elements=m * k * batch)
    if op == "attention":
        dims = attention_dims(item)
        if dims is None:
            return None
        return "attention.csv", dict(phase=phase_of(item), dtype=dtype, **dims)
    if op is None or not item.shapes:
        return None
    return "mlp.csv", dict(op=op, phase=phase_of(item), dtype=dtype, shapes=shapes_text(item.shapes), variant=variant(item),
                           m="", n="", k="", batch="", elements=elements(item))


# ---- metadata and writing ----------------------------------------------------------------------------

def write_meta(folder: str, meta: dict[str, Any]) -> str:
    """``profile.json``: how the folder's files were measured (merged with what is there)."""
    path = os.path.join(folder, META_FILE)
    old = read_meta(folder)
    old.update(meta)
    with atomic_write(path) as handle:
        handle.write(json.dumps(old, indent=2, sort_keys=True) + "\n")
    return path


def read_meta(folder: str) -> dict[str, Any]:
    path = os.path.join(folder, META_FILE)
    if not os.path.isfile(path):
        return {}
    try:
        value = json.loads(read_text(path, "a JSON object"))
    except json.JSONDecodeError as exc:
        raise FormatError(path, f"not JSON: {exc.msg}", line=exc.lineno) from None
    if not isinstance(value, dict):
        raise FormatError(path, "expected a JSON object")
    return value


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return repr(round(value, 6)) if value == value else ""
    return "" if value is None else str(value)


def _write(path: str, columns: Sequence[str], rows: list[dict[str, Any]], key: Sequence[str] | None, merge: bool) -> str:
    header = list(columns) + [c for row in rows for c in row if c not in columns and not c.startswith("_")]
    header = list(dict.fromkeys(header))
    table: dict[tuple, dict[str, Any]] = {}

    def key_of(row: dict[str, Any]) -> tuple:
        values = row_key(row, os.path.basename(path)) if key is None else tuple(row.get(c) for c in key)
        # numbers as floats: a file's "0" and a new row's 0.0 are one point (the reader keys them alike)
        return tuple(repr(float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v) for v in values)

    if merge and os.path.isfile(path):
        with open(path, encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle)
            old_header = list(reader.fieldnames or [])
            header += [c for c in old_header if c not in header]
            for old in reader:
                typed = {c: _typed(v) for c, v in old.items()}
                table[key_of(typed)] = old
    for row in rows:
        table[key_of(row)] = row
    with atomic_write(path) as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        for row in sorted(table.values(), key=lambda r: tuple(_sort_value(r.get(c)) for c in header[:len(columns)])):
            writer.writerow([_cell(row.get(c)) for c in header])
    return path


def _typed(text: str | None) -> Any:
    if text is None or text == "":
        return text
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value == int(value) and "." not in text and "e" not in text.lower() else value


def _sort_value(value: Any) -> tuple:
    value = _typed(value) if isinstance(value, str) else value
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))

"""Read nccl-tests' text output (``all_reduce_perf -b 8 -e 1G -f 2 ...``) into network-profile rows.

nccl-tests prints a header naming its columns, then one line per size::

    # Collective test starting: all_reduce_perf
    #  Rank  0 Group  0 Pid  41002 on     node01 device  0 [0x18] NVIDIA H100 80GB HBM3
    ...
    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
             8             2     float     sum      -1    21.47    0.00    0.00      0    21.20    0.00    0.00      0

The collective comes from the ``Collective test starting`` line, the binary's name in the file name,
or ``--kind``; the ranks from the ``#  Rank`` lines (``-g``/``-t`` with one rank line per GPU) and the
nodes from their host names, unless ``--ranks`` / ``--ranks_per_node`` say otherwise.  Times are the
out-of-place columns (``in_place=True``: the in-place ones), as nccl-tests reports its averages.  Sizes,
algbw and busbw keep nccl-tests' definitions, which are ours (docs/formats.md section 1); algbw and busbw
are recomputed from size and time (nccl-tests prints two decimals).

Strict: a time that is not a number (``nan``, ``inf``), not positive, a negative size, a row whose
``#wrong`` count is not zero, or a size twice is refused with the file and line (a profile that
silently lacks or keeps such a row misprices every size around it); size-0 rows (``-b 0``) move nothing
and are skipped, each file's skipped lines said in :attr:`NcclTestsRun.notes`.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

from simulator.profiles.db import MAX_ALGBW_GBPS, network_row
from utils.cli_types import INT64_MAX
from utils.errors import FormatError

BINARIES = {"all_reduce_perf": "all_reduce", "all_gather_perf": "all_gather", "reduce_scatter_perf": "reduce_scatter",
            "alltoall_perf": "all_to_all", "broadcast_perf": "broadcast", "sendrecv_perf": "send_recv"}
"""nccl-tests' binaries -> the profile's collectives (reduce_perf, gather_perf, scatter_perf, hypercube_perf
have no file in the profile)."""
_STARTING = re.compile(r"Collective test starting:\s*(\S+)")
_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_RANK = re.compile(r"^#\s*Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device")


@dataclass
class NcclTestsRun:
    """One output file: the collective, ranks, ranks per node and the rows (``network_row`` dicts)."""

    path: str
    kind: str
    ranks: int
    ranks_per_node: int
    rows: list[dict]
    notes: list[str] = field(default_factory=list)
    """Rows left out, each said (size-0 rows)."""


def kind_of(text: str, path: str, kind: str | None) -> str:
    if kind:
        return kind
    found = _STARTING.search(text)
    names = [found.group(1)] if found else []
    names.append(os.path.basename(path))
    for name in names:
        for binary, value in BINARIES.items():
            if binary in name:
                return value
    raise FormatError(path, "cannot tell which collective this is (no 'Collective test starting: <binary>' line and no "
                            f"binary name in the file name); give --kind (one of {', '.join(BINARIES.values())})")


def parse(text: str, path: str, kind: str | None = None, ranks: int | None = None, ranks_per_node: int | None = None,
          in_place: bool = False) -> NcclTestsRun:
    """Parse one nccl-tests output.  Raises :class:`FormatError` naming the file and line."""
    kind = kind_of(text, path, kind)
    hosts: dict[int, str] = {}
    header: list[str] | None = None
    rows = []
    skipped: list[int] = []
    seen: set[int] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        match = _RANK.match(stripped)
        if match:
            hosts[int(match.group(1))] = match.group(2)
            continue
        if stripped.startswith("#"):
            words = stripped.lstrip("#").split()
            if words[:2] == ["size", "count"] and "time" in words:
                header = words
            continue
        if not stripped or header is None:
            continue
        cells = stripped.split()
        if not _INTEGER.match(cells[0]):
            continue  # nccl-tests' own messages between rows
        if len(cells) != len(header):
            raise FormatError(path, f"{len(cells)} columns, the header has {len(header)}", line=number)
        pick = 1 if in_place else 0
        column = [i for i, name in enumerate(header) if name == "time"][pick]
        try:
            size, time_us = int(cells[0]), float(cells[column])
        except ValueError:
            raise FormatError(path, f"expected a size and a time, got {cells[0]!r} and {cells[column]!r}", line=number) from None
        wrong = [i for i, name in enumerate(header) if name == "#wrong"]
        if len(wrong) > pick and cells[wrong[pick]].isdigit() and int(cells[wrong[pick]]) > 0:
            raise FormatError(path, f"size {size}: nccl-tests counted {cells[wrong[pick]]} wrong elements (#wrong): "
                                    "the collective gave wrong results, so its time is not a measurement; fix the run "
                                    "or delete the line", line=number)
        if size < 0:
            raise FormatError(path, f"size {size} is negative", line=number)
        if not math.isfinite(time_us):
            # refused, not skipped: a profile quietly missing this size would be interpolated across a
            # measurement that failed; the line is named so that the user re-runs it or deletes it knowingly
            raise FormatError(path, f"size {size}: the time is {cells[column]!r}, not a number (nccl-tests did not "
                                    "time it); re-run the test or delete the line", line=number)
        if size == 0:
            skipped.append(number)  # nccl-tests prints size-0 rows (-b 0): nothing moves, nothing to keep
            continue
        if time_us <= 0:
            raise FormatError(path, f"size {size}: time {cells[column]} us is not positive (bytes moved in no time)",
                              line=number)
        if size > INT64_MAX:
            raise FormatError(path, f"size {size} is beyond the largest size taken ({INT64_MAX} bytes)", line=number)
        if round(time_us, 4) <= 0 or not size / (time_us * 1e-6) / 1e9 <= MAX_ALGBW_GBPS:
            raise FormatError(path, f"size {size}: a time of {cells[column]} us is too short (under 0.0001 us, or "
                                    f"more than the {MAX_ALGBW_GBPS:g} GB/s any network moves): a broken time",
                              line=number)
        if size in seen:
            raise FormatError(path, f"size {size} again (one test per file)", line=number)
        seen.add(size)
        rows.append((size, time_us))
    if header is None:
        raise FormatError(path, "no nccl-tests table (expected a '#  size  count  type ... time  algbw  busbw' header)")
    if not rows:
        raise FormatError(path, "no measured sizes in the nccl-tests table")
    n = ranks or len(hosts)
    if n < 2:
        raise FormatError(path, "fewer than 2 ranks in the '#  Rank' lines; give --ranks N (and --ranks_per_node)")
    if ranks_per_node is None:
        per_host: dict[str, int] = {}
        for host in hosts.values():
            per_host[host] = per_host.get(host, 0) + 1
        counts = set(per_host.values())
        if len(counts) != 1 or ranks:
            raise FormatError(path, "cannot tell the ranks per node from the '#  Rank' lines; give --ranks_per_node")
        ranks_per_node = counts.pop()
    if n % ranks_per_node:
        raise FormatError(path, f"ranks per node {ranks_per_node} does not divide the {n} ranks")
    if kind == "send_recv" and n != 2:
        raise FormatError(path, f"sendrecv_perf over {n} ranks: the profile's send_recv.csv holds pairs (run it on 2 ranks)")
    source = f"nccl-tests {os.path.basename(path)}{' (in place)' if in_place else ''}"
    out = [network_row(kind, n, ranks_per_node, size, time_us, source=source) for size, time_us in rows]
    notes = [f"{path}: line{'s' if len(skipped) > 1 else ''} {', '.join(map(str, skipped))}: size 0 skipped (nothing "
             "moves; a profile holds sizes of at least 1 byte)"] if skipped else []
    return NcclTestsRun(path, kind, n, ranks_per_node, out, notes)

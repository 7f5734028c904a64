"""Simulating repeated work once, exactly: repeated blocks of a sequence, the float sums over them, and
the per-record results they repeat.

A SimAI workload file unrolls one micro-batch's records ``ga`` times, and a model's identical layers
repeat the same work; both models cost one copy and scale it.  Scaling must not change a number:

- :func:`repeat_segments` cuts a sequence into ``(start, length, times)`` segments in which the block
  ``seq[start:start + length]`` occurs ``times`` times in a row (found from the names of the records
  and checked element by element, so a near-repeat is never compressed);
- :func:`repeat_sum` is the exact value of adding a block of non-negative doubles to a total ``times``
  times in order, the way the unrolled loop rounds after every addition, in time proportional to
  the block's length times the binades the total crosses (not to ``times``);
- :class:`RepeatedLayers` is the list of per-record results of a run, holding each repeated block
  once.

Why :func:`repeat_sum` is exact: within one binade ``[2^e, 2^(e+1))`` every double is a multiple of
``u = 2^(e-52)``.  Adding ``a >= 0`` to such a total ``S`` rounds the exact ``S + a`` to that grid;
when the result stays inside the binade it is ``S + r(a)``, with ``r(a)`` the multiple of ``u``
nearest to ``a``, the same for every ``S`` unless ``a / u`` lies exactly halfway between two integers
(round-half-even then depends on ``S``).  So while the total stays in one binade and no addend is
such a tie, each block adds the same exact multiple of ``u`` and ``k`` blocks add ``k`` times it; the
blocks that cross into the next binade (and any tie) are added one by one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any


def find_blocks(names: Sequence[str], times: int) -> tuple[int, int] | None:
    """``(first, length)`` of ``times`` consecutive blocks with the same names, or None.

    A block starts at each occurrence of a name that occurs exactly ``times`` times at a constant
    spacing with the same names in every block; ``embedding_layer`` (AICB's first record of a
    micro-batch) is tried first, then the names in order.  With ``times == 1`` the block runs from
    the first ``embedding_layer`` (or the first record) to the end.
    """
    if not names:
        return None
    if times == 1:
        first = names.index("embedding_layer") if "embedding_layer" in names else 0
        return first, len(names) - first
    found = _blocks_at([i for i, name in enumerate(names) if name == "embedding_layer"], names, times)
    if found is not None:
        return found
    positions: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        positions.setdefault(name, []).append(i)
    for name, where in positions.items():
        if name != "embedding_layer":
            found = _blocks_at(where, names, times)
            if found is not None:
                return found
    return None


def _blocks_at(where: list[int], names: Sequence[str], times: int) -> tuple[int, int] | None:
    """``(first, length)`` when the ``times`` positions ``where`` start equal blocks of names."""
    if len(where) != times:
        return None
    length = where[1] - where[0]
    if any(b - a != length for a, b in zip(where, where[1:])) or where[-1] + length > len(names):
        return None
    block = names[where[0]:where[0] + length]
    if all(names[p:p + length] == block for p in where[1:]):
        return where[0], length
    return None


def repeat_segments(seq: Sequence[Any], times: int, names: Sequence[str] | None = None) -> list[tuple[int, int, int]]:
    """``seq`` as ``(start, length, repeat)`` segments in order: the ``times`` blocks :func:`find_blocks`
    finds in ``names`` (default: each element's ``name``), consecutive blocks equal element by element
    merged into one segment repeated as often (SimAI's example: the first micro-batch's block differs,
    the other 23 are one segment), and the records before and after them as segments of repeat 1."""
    n = len(seq)
    if not n:
        return []
    found = find_blocks(names if names is not None else [r.name for r in seq], times) if times > 1 else None
    if found is None:
        return [(0, n, 1)]
    first, length = found
    out = [(0, first, 1)] if first else []
    run_start, run_times = first, 1
    block = seq[first:first + length]
    for k in range(1, times):
        start = first + k * length
        nxt = seq[start:start + length]
        if nxt == block:
            run_times += 1
            continue
        out.append((run_start, length, run_times))
        run_start, run_times, block = start, 1, nxt
    out.append((run_start, length, run_times))
    end = first + times * length
    if end < n:
        out.append((end, n - end, 1))
    return out


LOOP_TIMES = 12
"""Up to this many repeats :func:`repeat_sum` adds in the plain loop: its binade analysis costs about ten additions'
time per addend (a floor, a division, the tie checks), so a short repeat (a GPT-7B file's ga 8) is cheaper added out.
Both give the same double: the loop is the reference."""


def repeat_sum(total: float, addends: Sequence[float], times: int) -> float:
    """``total`` after ``for _ in range(times): for a in addends: total += a``, bit for bit, in
    O(len(addends) x binades crossed).  Falls back to the loop for negative or non-finite values."""
    if times <= 0 or not addends:
        return total
    if times <= LOOP_TIMES or not (total >= 0.0 and math.isfinite(total)) or any(
            not (a >= 0.0 and a < math.inf) for a in addends):
        for _ in range(times):
            for a in addends:
                total += a
        return total
    adds = [a for a in addends if a != 0.0]  # adding +0.0 to a total >= 0 leaves it unchanged
    if not adds:
        return total
    remaining = times
    while remaining:
        step = _blocks_in_binade(total, adds, remaining)
        if step is not None:
            blocks, value = step
            total = value
            remaining -= blocks
            if not remaining:
                break
        for a in adds:  # one block the slow way: it crosses a binade, meets a tie, or starts at 0
            total += a
        remaining -= 1
    return total


def _blocks_in_binade(total: float, adds: Sequence[float], limit: int) -> tuple[int, float] | None:
    """(k, total after k blocks) for the largest k <= ``limit`` whose sums all stay in ``total``'s binade
    with no tie, or None when no whole block fits (or a tie, or a total of 0 or subnormal)."""
    if total < 2.2250738585072014e-308:  # 0 or subnormal: no fixed grid to reason on
        return None
    _, exponent = math.frexp(total)  # total = m * 2^exponent, 0.5 <= m < 1: binade [2^(exponent-1), 2^exponent)
    ulp = math.ldexp(1.0, exponent - 53)
    steps = 0
    for a in adds:
        q = a / ulp  # exact: scaling by a power of two (inf for an addend far above the binade)
        if q >= 9007199254740992.0:  # 2^53 ulps: the addend alone leaves the binade
            return None
        whole = math.floor(q)
        frac = q - whole
        if frac == 0.5:
            return None
        steps += int(whole) + (1 if frac > 0.5 else 0)
    if steps == 0:
        return limit, total  # every addend rounds away: the total never moves
    base = int(total / ulp)  # exact: total is a multiple of ulp below 2^53 ulps
    room = (1 << 53) - 1 - base  # stay strictly below the next power of two
    blocks = min(limit, room // steps)
    if blocks < 1:
        return None
    return blocks, (base + blocks * steps) * ulp


class RepeatedLayers(Sequence):
    """Per-record results of a run whose records repeat: ``parts`` is a list of ``(templates, times)``,
    the templates being the results of one copy of a block (with the record index of that first copy)
    and ``times`` how often the block repeats in a row.  Indexing and iteration give every record's
    result with its own index; :meth:`with_index` gives ``(template, index)`` pairs without building
    the copies (the report writes each distinct row once)."""

    def __init__(self, parts: list[tuple[list[Any], int]], reindex: Callable[[Any, int], Any]) -> None:
        self._parts = [(list(templates), times) for templates, times in parts if templates and times > 0]
        self._reindex = reindex
        self._length = sum(len(t) * times for t, times in self._parts)

    def __len__(self) -> int:
        return self._length

    def blocks(self) -> Iterator[tuple[list[Any], int, int]]:
        """``(templates, times, first index)`` of every repeated block, in order."""
        index = 0
        for templates, times in self._parts:
            yield templates, times, index
            index += len(templates) * times

    def with_index(self) -> Iterator[tuple[Any, int]]:
        """``(template, index)`` for every record in order."""
        for templates, times, index in self.blocks():
            for _ in range(times):
                for template in templates:
                    yield template, index
                    index += 1

    def __iter__(self) -> Iterator[Any]:
        reindex = self._reindex
        for template, index in self.with_index():
            yield template if template.index == index else reindex(template, index)

    def __getitem__(self, key):  # type: ignore[override]
        if isinstance(key, slice):
            return [self[i] for i in range(*key.indices(self._length))]
        index = key + self._length if key < 0 else key
        if not 0 <= index < self._length:
            raise IndexError("record index out of range")
        offset = index
        for templates, times in self._parts:
            size = len(templates) * times
            if offset < size:
                template = templates[offset % len(templates)]
                return template if template.index == index else self._reindex(template, index)
            offset -= size
        raise IndexError("record index out of range")  # pragma: no cover

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (RepeatedLayers, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        return f"RepeatedLayers({self._length} records in {len(self._parts)} repeated blocks)"


def with_index(layers: Sequence[Any]) -> Iterator[tuple[Any, int]]:
    """``(layer, index)`` pairs of any per-record result list (cheap for :class:`RepeatedLayers`)."""
    if isinstance(layers, RepeatedLayers):
        return layers.with_index()
    return ((layer, layer.index) for layer in layers)


def blocks(layers: Sequence[Any]) -> Iterator[tuple[list[Any], int, int | None]]:
    """``(templates, times, first index)`` of any per-record result list: the repeated blocks of a
    :class:`RepeatedLayers`, else the whole list once with its own indices (first index None)."""
    if isinstance(layers, RepeatedLayers):
        return layers.blocks()
    return iter([(list(layers), 1, None)])

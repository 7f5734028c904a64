"""A SimAI file's layer records kept as columns: the store ``--model topo`` reads large files into.

A :class:`~workload_generator.simai.SimAILayer` costs about 250 bytes with its integers, so a file of 10^6
records that all differ (every compute time its own) would hold 250 MB of records alone.  :class:`RecordColumns`
keeps each distinct record's fields in typed arrays (4 bytes per integer that fits 32 bits, 8 otherwise; names
and comm tokens as 4-byte indices into one table of strings) and each record as a 4-byte index of its distinct
record: about 60 bytes per distinct record and 4 per record.

It is a read-only sequence of records.  While the file has at most :data:`KEEP_OBJECTS` distinct records (a
repetitive file: SimAI unrolls one micro-batch's records ``ga`` times) it hands out the very objects it was given,
so records read alike (``share=True``) stay one object; past that it drops them and builds a new record object
on each access (equal, not identical: nothing may key on a record's identity then).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import Any

KEEP_OBJECTS = 1 << 16
"""Distinct records up to which the store keeps the record objects it was given (and returns them)."""
_KNOWN = 1 << 16
"""Record objects the store remembers by identity to recognise a shared one (bounded, like the reader's cache)."""
_RECENT = 1 << 12
"""Records built from the columns that the store keeps for the next access (a few micro-batch blocks' worth)."""
_NO_POLICY = 0xFFFFFFFF
"""The policy index of a record without a 13th field."""
_TEXT = ("name", "fwd_comm", "ig_comm", "wg_comm", "policy")
_INTS = ("dependency", "fwd_compute_ns", "fwd_size_bytes", "ig_compute_ns", "ig_size_bytes", "wg_compute_ns",
         "wg_size_bytes", "update_ns")


class RecordColumns(Sequence):
    """SimAI layer records as columns (see the module docstring).  ``make(*fields)`` builds a record from its
    12 or 13 field values in file order (the record class itself); :meth:`append` takes record objects."""

    def __init__(self, make: Callable[..., Any]) -> None:
        self._make = make
        self._rows = array("I")
        """Per record, its distinct record's index."""
        self._strings: list[str] = []
        self._string_index: dict[str, int] = {}
        self._text = [array("I") for _ in _TEXT]
        self._ints: list[Any] = [array("i") for _ in _INTS]
        """Per distinct record: 32-bit columns, widened to 64 bits (then to a list) when a value does not fit."""
        self._count = 0
        self._objects: list[Any] | None = []
        self._known: dict[int, tuple[Any, int]] = {}
        self._recent: dict[int, Any] = {}
        """Records built lately (distinct record -> record), once the objects are dropped."""

    # ---- building --------------------------------------------------------------------------------

    def append(self, record: Any) -> None:
        """Add one record (a record object appended before, by identity, is stored once)."""
        hit = self._known.get(id(record))
        if hit is not None and hit[0] is record:
            self._rows.append(hit[1])
            return
        row = self._count
        self._count += 1
        index = self._string_index
        t0, t1, t2, t3, t4 = self._text
        name, fwd, ig, wg, policy = record.name, record.fwd_comm, record.ig_comm, record.wg_comm, record.policy
        t0.append(index[name] if name in index else self._string(name))
        t1.append(index[fwd] if fwd in index else self._string(fwd))
        t2.append(index[ig] if ig in index else self._string(ig))
        t3.append(index[wg] if wg in index else self._string(wg))
        t4.append(_NO_POLICY if policy is None else self._string(policy))
        ints = self._ints
        values = (record.dependency, record.fwd_compute_ns, record.fwd_size_bytes, record.ig_compute_ns,
                  record.ig_size_bytes, record.wg_compute_ns, record.wg_size_bytes, record.update_ns)
        try:
            for column, value in zip(ints, values):
                column.append(value)
        except OverflowError:  # widen the column that overflowed, then append the rest
            for k in range(len(ints)):
                if len(ints[k]) == row:
                    try:
                        ints[k].append(values[k])
                    except OverflowError:
                        ints[k] = _widened(ints[k], values[k])
        if self._objects is not None:
            if row < KEEP_OBJECTS:
                self._objects.append(record)
            else:
                self._objects = None  # a file of many distinct records: keep the columns only
        if len(self._known) >= _KNOWN:
            self._known.clear()
        self._known[id(record)] = (record, row)
        self._rows.append(row)

    def _string(self, text: str) -> int:
        index = self._string_index.get(text)
        if index is None:
            index = self._string_index[text] = len(self._strings)
            self._strings.append(text)
        return index

    # ---- reading ---------------------------------------------------------------------------------

    @property
    def distinct(self) -> int:
        """How many distinct records the store holds."""
        return self._count

    def _record(self, row: int) -> Any:
        s = self._strings
        t0, t1, t2, t3, t4 = self._text
        n0, n1, n2, n3, n4, n5, n6, n7 = self._ints
        policy = t4[row]
        return self._make(s[t0[row]], n0[row], n1[row], s[t1[row]], n2[row], n3[row], s[t2[row]], n4[row], n5[row],
                          s[t3[row]], n6[row], n7[row], None if policy == _NO_POLICY else s[policy])

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, key):  # type: ignore[override]
        if isinstance(key, slice):
            return [self._at(row) for row in self._rows[key]]
        return self._at(self._rows[key])

    def _at(self, row: int) -> Any:
        objects = self._objects
        if objects is not None:
            return objects[row]
        recent = self._recent  # records are asked for a block at a time, several times over
        record = recent.get(row)
        if record is None:
            if len(recent) >= _RECENT:
                recent.clear()
            record = recent[row] = self._record(row)
        return record

    def __iter__(self) -> Iterator[Any]:
        objects = self._objects
        if objects is not None:
            return map(objects.__getitem__, self._rows)
        return map(self._record, self._rows)

    def names(self) -> list[str]:
        """Every record's name, in order (without building the records)."""
        s, t0 = self._strings, self._text[0]
        return [s[t0[row]] for row in self._rows]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (RecordColumns, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RecordColumns({len(self)} records, {self._count} distinct)"


def _widened(column: Any, value: int) -> Any:
    """``column`` with ``value`` appended, in the next wider form: 32-bit -> 64-bit array -> list."""
    if isinstance(column, array) and column.typecode == "i":
        column = array("q", column)
        try:
            column.append(value)
            return column
        except OverflowError:
            pass
    column = list(column)
    column.append(value)
    return column


__all__ = ["RecordColumns", "KEEP_OBJECTS"]


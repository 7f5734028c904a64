"""``--model topo`` on large SimAI files in bounded memory: compact compiled blocks and streamed per-record rows.

A SimAI file unrolls ``ga`` micro-batch blocks.  Blocks alike share one program pair (:mod:`simulator.topo.programs`);
a block that no other micro-batch runs is a :class:`~simulator.topo.programs.BlockProgram`, whose ops are rebuilt from
the records when asked for.  A file of 10^6 records that all differ is 13,513 such blocks, and holding every op,
every compiled op's interval and every record's result row took 4.6 GB.  Here, for the topo model
(:class:`simulator.topo.model.TopoModel` calls in):

- :func:`compile_simai` compiles each block program once per group-shape signature from freshly built ops and
  keeps a :class:`CompactProgram`: what the engine plays (duration, compute, exposed and comm time per category,
  gradient buckets) and the per-layer sums; the op times, the intervals and the op start offsets are recompiled
  when asked for (the trace, the per-record rows), the same numbers again;
- :func:`simai_layers` gives the EndToEnd rows as :class:`StreamedLayers`: computed a few thousand records at a
  time whenever the rows are read (the report writes them as they come), each chunk from the steps of its own
  micro-batches, with the very sums and roundings of the whole-file computation (``TopoModel._per_op_columns``
  over those micro-batches, ``TopoModel._simai_rows``), so the files are byte-identical.

What stays per record: the records as columns (:class:`workload_generator.simai_records.RecordColumns`, about 60
bytes each) and the engine's per-step entries; ``bench/bench_sim_memory.py --topo --distinct`` measures the whole.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from simulator.repeat import RepeatedLayers, find_blocks
from simulator.topo import engine
from simulator.topo.programs import COMPUTE, GRAD, BlockProgram, Program, record_names

CHUNK_RECORDS = 1 << 12
"""Records whose rows :class:`StreamedLayers` computes at a time (their ops, sums and rows are then dropped)."""


class CompactProgram:
    """A compiled :class:`~simulator.topo.programs.BlockProgram` without its per-op lists: the fields
    :class:`simulator.topo.engine.CompiledProgram` gives the engine and the tables, with ``durations``, ``intervals`` and
    ``starts`` recompiled from the program's ops on each access (``stage``: a stage it was compiled for; the op times
    are a pure function of the op and the stage's group shapes)."""

    __slots__ = ("program", "duration_s", "compute_s", "exposed_s", "comm_s", "grads", "_layer_keys", "_layer_sums",
                 "_model", "_stage")

    def __init__(self, program: Program, compiled: engine.CompiledProgram, model: Any, stage: int,
                 interned: dict[Any, Any]) -> None:
        self.program = program
        self.duration_s = compiled.duration_s
        self.compute_s = compiled.compute_s
        self.exposed_s = _interned(compiled.exposed_s, interned)
        self.comm_s = _interned(compiled.comm_s, interned)
        self.grads = compiled.grads if compiled.grads else ()
        keys = tuple(compiled.layers)
        self._layer_keys = interned.setdefault(("layers", keys), keys)
        self._layer_sums = array("d", [v for sums in compiled.layers.values() for v in sums])
        self._model = model
        self._stage = stage

    @property
    def layers(self) -> dict[str, list[float]]:
        """Per layer key, [compute, comm, exposed comm] seconds (a new dict each time)."""
        sums = self._layer_sums
        return {key: list(sums[3 * k:3 * k + 3]) for k, key in enumerate(self._layer_keys)}

    @property
    def durations(self) -> list[float]:
        """Each op's seconds, in the order of the program's ops."""
        return [self._model.op_time(self._stage, op) for op in self.program.ops]

    def recompiled(self) -> engine.CompiledProgram:
        """The whole :class:`simulator.topo.engine.CompiledProgram` again (the same numbers)."""
        ops = self.program.ops
        durations = [self._model.op_time(self._stage, op) for op in ops]
        return engine.compile_program(Program(self.program.kind, ops), durations, self._model.contention)

    @property
    def intervals(self) -> list[tuple[float, float, str, str, str, str]]:
        return self.recompiled().intervals

    @property
    def starts(self) -> list[float]:
        return self.recompiled().starts


def _interned(value: dict[str, float], interned: dict[Any, Any]) -> dict[str, float]:
    """One shared dict per distinct content (the engine only reads these)."""
    return interned.setdefault(("dict", tuple(value.items())), value)


def compile_simai(model: Any, scripts: Sequence[Any]) -> tuple[list[dict[int, Any]], list[Counter]]:
    """Per stage, ``id(program) -> compiled program`` and how often each program runs: what ``TopoModel.run``
    compiles, for SimAI scripts.  Stages whose groups have the same shapes share compiled programs, and so do programs
    whose ops take the same times on two stages (as for every input); block programs are compiled from ops built
    for the purpose and kept as :class:`CompactProgram` (their comm counts go to the model's cache on the way)."""
    distinct = [dict(zip(map(id, script.programs), script.programs)) for script in scripts]
    for table in distinct:
        table.pop(id(None), None)
    programs_of: dict[int, Program] = {}
    for table in distinct:
        programs_of.update(table)
    groups = sorted({g for program in programs_of.values() for g in _groups(program)})
    op_counts = getattr(model, "_op_counts", None)
    interned: dict[Any, Any] = {}
    shared: dict[tuple, Any] = {}
    compiled_at: dict[int, list[tuple[int, Any]]] = {}  # program id -> (stage, compiled) per signature compiled
    compiled: list[dict[int, Any]] = []
    occurrences: list[Counter] = []
    tables: dict[tuple, list[tuple[dict, dict[int, Any]]]] = {}  # signature -> (programs, their compiled table)
    for script, programs in zip(scripts, distinct):
        s = script.stage
        signature = tuple(model.shape(g, s) for g in groups)
        candidates = tables.setdefault(signature, [])
        table = next((known for theirs, known in candidates if theirs.keys() == programs.keys()), None)
        if table is None:  # stages with the same shapes and programs (a SimAI file's) share one table
            table = {}
            for pid, program in programs.items():
                key = (pid, signature)
                cp = shared.get(key)
                if cp is None:
                    cp = shared[key] = _compile_one(model, s, program, compiled_at, op_counts, interned)
                table[pid] = cp
            candidates.append((programs, table))
        compiled.append(table)
        counts: Counter = Counter(map(id, script.programs))
        counts.pop(id(None), None)
        occurrences.append(counts)
    return compiled, occurrences


def _groups(program: Program) -> frozenset[str] | set[str]:
    groups = getattr(program, "groups", None)
    return groups if groups is not None else {op.group for op in program.ops if op.group}


def _compile_one(model: Any, stage: int, program: Program, compiled_at: dict[int, list[tuple[int, Any]]],
                 op_counts: dict | None, interned: dict[Any, Any]) -> Any:
    """One program on one stage: the compiled program of another signature when its op times are the same, else
    compiled anew (compact for a block program)."""
    ops = program.ops
    durations = [model.op_time(stage, op) for op in ops]
    earlier = compiled_at.setdefault(id(program), [])
    for _, cp in earlier:
        if cp.durations == durations:
            return cp
    if not isinstance(program, BlockProgram):
        cp = engine.compile_program(program, durations, model.contention)
    else:
        cp = CompactProgram(program, engine.compile_program(Program(program.kind, ops), durations, model.contention),
                            model, stage, interned)
        if op_counts is not None and id(program) not in op_counts:
            counts = Counter((op.group, op.comm_type, op.size) for op in ops if op.kind != COMPUTE and op.comm_type)
            op_counts[id(program)] = interned.setdefault(("counts", tuple(counts.items())), counts)
    earlier.append((stage, cp))
    return cp


# ---- the EndToEnd rows ------------------------------------------------------------------------------


def simai_layers(model: Any, script: Any, table: dict[int, Any], t: engine.StageTimes) -> StreamedLayers | None:
    """The reported stage's per-record rows as :class:`StreamedLayers` when the micro-batch blocks that no other
    micro-batch repeats hold more than :data:`CHUNK_RECORDS` records; None where the whole-file computation applies
    (a file of repeated blocks holds their rows once; no micro-batch blocks; a schedule whose repeated cycles were
    added rather than played)."""
    own = sum(len(program.span) for program in {id(p): p for p in script.programs}.values()
              if isinstance(program, BlockProgram) and program.kind == "F")
    if own <= CHUNK_RECORDS:
        return None
    records = model.simai.records
    ga = model.scripts.layout["ga"]
    found = find_blocks(record_names(records), ga)
    if found is None or (script.record_shift is None and t.repeat is not None):
        return None
    return StreamedLayers(model, script, table, t, found, ga)


class StreamedLayers(RepeatedLayers):
    """The rows of every record of a SimAI file, computed :data:`CHUNK_RECORDS` records at a time each time they are
    read (:meth:`blocks`, iteration, indexing), never held all at once.  Values are those of the whole-file
    computation in ``TopoModel._simai_layers``."""

    def __init__(self, model: Any, script: Any, table: dict[int, Any], t: engine.StageTimes, found: tuple[int, int],
                 ga: int) -> None:
        self._model, self._script, self._table, self._t = model, script, table, t
        self._first, self._block = found
        self._ga = ga
        self._length = len(model.simai.records)
        self._parts = []
        self._reindex = _reindexed

    def blocks(self) -> Iterator[tuple[list[Any], int, int]]:
        """``(rows, 1, index of the first)`` per chunk of records, in order."""
        index = 0
        for rows in self._chunks():
            if rows:
                yield rows, 1, index
                index += len(rows)

    def __getitem__(self, key):  # type: ignore[override]
        if isinstance(key, slice):
            return [self[i] for i in range(*key.indices(self._length))]
        index = key + self._length if key < 0 else key
        if not 0 <= index < self._length:
            raise IndexError("record index out of range")
        for rows, _, first in self.blocks():
            if index < first + len(rows):
                row = rows[index - first]
                return row if row.index == index else _reindexed(row, index)
        raise IndexError("record index out of range")  # pragma: no cover

    def __repr__(self) -> str:
        return f"StreamedLayers({self._length} records, computed {CHUNK_RECORDS} at a time)"

    def _chunks(self) -> Iterator[list[Any]]:
        model, script, table, t = self._model, self._script, self._table, self._t
        first, length, ga = self._first, self._block, self._ga
        shifts = script.record_shift
        n = self._length
        end = first + ga * length
        forward: dict[int, int] = {}
        backward: dict[int, int] = {}
        for i, st in enumerate(script.steps):
            if st.kind == "B":
                backward[st.microbatch] = i
            elif st.kind == "F":
                forward[st.microbatch] = i

        def template(b: int) -> int:
            return b if shifts is None else b - shifts[forward[b]] // length

        exposure = model._grad_exposure(t) if shifts is not None else {}
        costs: dict[tuple, Any] = {}
        per = max(1, CHUNK_RECORDS // max(length, 1))
        for lo in range(0, ga, per):
            chunk = range(lo, min(ga, lo + per))
            needed = {template(b) for b in chunk}
            compute, comms = model._per_op_columns(script, table, t, needed)
            indices = [i for b in sorted(needed) for i in range(first + b * length, first + (b + 1) * length)]
            head = range(first) if lo == 0 else range(0)
            tail = range(end, n) if chunk.stop == ga else range(0)
            indices += [*head, *tail]
            rows: dict[tuple, Any] = {}
            by_record = dict(zip(indices, model._simai_rows(script, compute, comms, indices, costs, rows)))
            out = [by_record[i] for i in head]
            for b in chunk:
                shift = 0 if shifts is None else shifts[forward[b]]
                if not shift:
                    out += [by_record[first + b * length + k] for k in range(length)]
                    continue
                out += shifted_rows(script, comms, by_record, rows, exposure, backward[b], first + b * length, length,
                                     shift)
            out += [by_record[i] for i in tail]
            yield out


def shifted_rows(script: Any, comms: dict, by_record: dict, rows: dict, exposure: dict, step_index: int, start: int,
                  length: int, shift: int) -> list[Any]:
    """The rows of a block that runs another block's programs: the template's, each with its own gradient buckets'
    exposure where it has any (``TopoModel._simai_layers``)."""
    program = script.programs[step_index]
    grads = {id(op): exposure.get((step_index, k), 0.0) for k, op in enumerate(program.ops) if op.kind == GRAD}
    out = []
    for k in range(length):
        index = start + k
        template = by_record[index - shift]
        entries = comms.get((index - shift, "wg"), ())
        if not grads or not any(op.kind == GRAD for _, _, op, _ in entries):
            out.append(template)
            continue
        wg_exposed = int(round(sum(grads.get(id(op), 0.0) if op.kind == GRAD else e for _, e, op, _ in entries) * 1e9))
        content = (template.name, template.fwd_compute_ns, template.ig_compute_ns, template.wg_compute_ns,
                   id(template.fwd), id(template.ig), id(template.wg), template.fwd_exposed_ns,
                   template.ig_exposed_ns, wg_exposed)
        row = rows.get(content)
        if row is None:
            row = rows[content] = replace(template, index=index, wg_exposed_ns=wg_exposed)
        out.append(row)
    return out


def _reindexed(layer: Any, index: int) -> Any:
    return replace(layer, index=index)


__all__ = ["CompactProgram", "StreamedLayers", "compile_simai", "simai_layers", "CHUNK_RECORDS"]

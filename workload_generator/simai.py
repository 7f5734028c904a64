"""The SimAI training workload file (docs/formats.md section 2): typed header and layer records, reader and writer.

Layout, as SimAI's ``Workload::initialize_workload`` reads it:

- line 1: a parallelism-policy keyword and ``key: value`` pairs (``pp_comm`` also without the colon);
- line 2: N, the number of layer records;
- then N records of 12 whitespace-separated fields (13 for ``HYBRID_CUSTOMIZED``, whose records end
  with a per-layer policy keyword).  SimAI tokenizes the records by whitespace, so line breaks
  between (or inside) records do not matter to it.

Units: compute and update times are integer nanoseconds, sizes are bytes.

Reading (:meth:`SimAIWorkload.read`, :meth:`SimAIWorkload.loads`):

- ``strict=True`` (the default; what we use to validate files we write): one record per line with
  exactly 12 fields, only the comm tokens of docs/formats.md section 2
  (``workload_generator.simai_tokens.VALID_TOKENS``), exactly N records, integer header values (an
  integer-valued float such as AICB's ``pp_comm 6291456.0`` is accepted), a known policy keyword.
- ``strict=False``: whatever SimAI accepts: records across any line breaks, any comm token (SimAI
  matches it by prefix, see ``simulator.simai.model``), header values read with C++ ``stoi``
  semantics (leading integer), trailing tokens after N records ignored.  What SimAI would silently
  reinterpret is reported in :attr:`SimAIWorkload.warnings`.

In both modes numeric record fields must be non-negative integers (the dependency any integer):
SimAI reads them with ``operator>>`` into unsigned integers, so ``1.5`` would shift every later
field.  Every error is a :class:`utils.errors.FormatError` naming the file, the line and the field.

Header keys that a consumer needs are checked by name when it needs them
(:meth:`SimAIHeader.require`), never divided by while absent.

Writing (:meth:`SimAIWorkload.write`, :meth:`SimAIWorkload.dumps`) validates what SimAI 1.7 needs to
parse the file without its "Input workload format mismatch" warning (every transformer header key
present and non-zero, ``pp_comm`` an integer that is 0 exactly when pp is 1, valid tokens, 12
fields), writes one record per line, tab-separated, and is atomic.  A file we write reads back to
the same header and records, and write-read-write is byte-identical.
"""

from __future__ import annotations

import operator
import os
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from utils.errors import FormatError
from utils.io import atomic_write, read_lines
from workload_generator.simai_records import RecordColumns
from workload_generator.simai_tokens import VALID_TOKENS

POLICIES = (
    "DATA", "HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_DLRM", "HYBRID_DLRM_ENHANCED",
    "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_CUSTOMIZED", "MICRO", "DISTRIBUTED_INFERENCE",
)
"""Policy keywords SimAI's ``Workload::decode_parallelsim`` knows (any other makes SimAI exit)."""
TRANSFORMER_POLICIES = frozenset({"HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD"})
"""The policies whose header keys SimAI parses, and the only ones its analytical mode runs."""
CUSTOMIZED_POLICY = "HYBRID_CUSTOMIZED"
"""The policy whose records carry a 13th field: the layer's own policy keyword."""

HEADER_KEYS = {
    "tp": "model_parallel_NPU_group", "ep": "ep", "pp": "pp", "vpp": "vpp", "ga": "ga", "all_gpus": "all_gpus",
    "checkpoints": "checkpoints", "checkpoint_initiates": "checkpoint_initiates", "pp_comm": "pp_comm",
}
"""Known header keys: attribute name -> key as written in the file (without the colon), in AICB's order."""
_ATTR_OF_KEY = {key: attr for attr, key in HEADER_KEYS.items()}
_INT_ATTRS = ("tp", "ep", "pp", "vpp", "ga", "all_gpus", "pp_comm")
_LIST_ATTRS = ("checkpoints", "checkpoint_initiates")
_POSITIVE_ATTRS = frozenset({"tp", "ep", "pp", "vpp", "ga", "all_gpus"})

RECORD_FIELDS = (
    "name", "dependency", "fwd_compute_ns", "fwd_comm", "fwd_size_bytes", "ig_compute_ns", "ig_comm",
    "ig_size_bytes", "wg_compute_ns", "wg_comm", "wg_size_bytes", "update_ns",
)
"""The 12 fields of a layer record, in file order (docs/formats.md section 2)."""
_TOKEN_FIELDS = frozenset({"fwd_comm", "ig_comm", "wg_comm"})
_STRING_POSITIONS = frozenset({0, 3, 6, 9})

# A whole well-formed record line: 12 fields, ASCII digits where SimAI reads integers.
_FIELD_PATTERNS = (r"(\S+)", r"(-?\d{1,18})", r"(\d{1,18})", r"(\S+)", r"(\d{1,18})", r"(\d{1,18})", r"(\S+)",
                   r"(\d{1,18})", r"(\d{1,18})", r"(\S+)", r"(\d{1,18})", r"(\d{1,18})")
"""A well-formed record's fields; numbers of at most 18 digits (below int64's limit), so that a longer one
takes :func:`_convert`, which checks it against :data:`UINT64_MAX`."""
UINT64_MAX = 2**64 - 1
"""The largest time or size a record holds (and ``dependency``'s magnitude): SimAI reads them into 64-bit
integers (``1e22`` ns overflowed them there and was simulated here as 300,000 years)."""


@lru_cache(maxsize=2)
def _record_re(width: int) -> re.Pattern:
    """The pattern of a well-formed record line of ``width`` fields (compiled on first use)."""
    patterns = _FIELD_PATTERNS + ((r"(\S+)",) if width == 13 else ())
    return re.compile(r"\s*" + r"\s+".join(patterns) + r"\s*", re.ASCII)


_UINT_RE = re.compile(r"\d+", re.ASCII)
_INT_RE = re.compile(r"-?\d+", re.ASCII)
_HEADER_INT_RE = re.compile(r"([+-]?\d+)(?:\.0*)?", re.ASCII)
_STOI_RE = re.compile(r"\s*([+-]?\d+)", re.ASCII)
_NAME_RE = re.compile(r"\S+")


def _is_key_token(token: str) -> bool:
    # SimAI finds keys as exact tokens ending in ':'; pp_comm is also matched without the colon.
    return (len(token) > 1 and token.endswith(":")) or token == "pp_comm"


@dataclass
class SimAIHeader:
    """Line 1 of a SimAI workload: the policy keyword and its ``key: value`` pairs.

    Known keys are typed (``None`` = absent): ``tp`` (``model_parallel_NPU_group``), ``ep``, ``pp``,
    ``vpp`` (transformer layers per pipeline stage, used by SimAI's bubble), ``ga`` (micro-batches),
    ``all_gpus``, ``pp_comm`` (bytes of one pipeline activation send), and ``checkpoints`` /
    ``checkpoint_initiates``, written as a count followed by that many layer indices and stored
    here as the tuple of layer indices (``checkpoints: 0`` is ``()``).  ``extra`` keeps unknown
    keys (raw value text) and ``order`` the file keys in the order read, so that a file round-trips
    (key order does not take part in ``==``).  ``stray`` holds tokens that belong to no key and
    ``invalid`` known keys whose value was not an integer (both from lenient reading; the latter
    are reported by :meth:`require`).
    """

    policy: str = "HYBRID_TRANSFORMER_FWD_IN_BCKWD"
    tp: int | None = None
    ep: int | None = None
    pp: int | None = None
    vpp: int | None = None
    ga: int | None = None
    all_gpus: int | None = None
    checkpoints: tuple[int, ...] | None = None
    checkpoint_initiates: tuple[int, ...] | None = None
    pp_comm: int | None = None
    extra: dict[str, str] = field(default_factory=dict)
    order: tuple[str, ...] = field(default=(), compare=False)
    stray: tuple[str, ...] = ()
    invalid: dict[str, str] = field(default_factory=dict)

    @classmethod
    def transformer(cls, tp: int, ep: int, pp: int, vpp: int, ga: int, all_gpus: int, pp_comm: int,
                    policy: str = "HYBRID_TRANSFORMER_FWD_IN_BCKWD") -> SimAIHeader:
        """The header AICB writes (no checkpoints); ``pp_comm`` in bytes, 0 when pp == 1."""
        return cls(policy=policy, tp=tp, ep=ep, pp=pp, vpp=vpp, ga=ga, all_gpus=all_gpus, checkpoints=(),
                   checkpoint_initiates=(), pp_comm=pp_comm)

    @property
    def is_transformer(self) -> bool:
        """True for the two policies SimAI's analytical mode runs."""
        return self.policy in TRANSFORMER_POLICIES

    def keys(self) -> list[str]:
        """File keys (without colon) in the order they are written."""
        present = [key for key in self.order
                   if key in self.extra or (key in _ATTR_OF_KEY and getattr(self, _ATTR_OF_KEY[key]) is not None)]
        for attr, key in HEADER_KEYS.items():
            if key not in present and getattr(self, attr) is not None:
                present.append(key)
        present.extend(key for key in self.extra if key not in present)
        return present

    def require(self, *names: str, path: str = "<SimAI workload>") -> tuple[int, ...]:
        """The integer values of header keys a consumer needs, in the order asked.

        ``names`` are attribute names (``tp``) or file keys (``model_parallel_NPU_group``).  Raises
        :class:`FormatError` (line 1) naming every absent key, a key whose value is not an integer,
        or one that is 0 or negative where SimAI divides by it (tp, ep, pp, vpp, ga, all_gpus).
        ``checkpoints`` and ``checkpoint_initiates`` give their count.
        """
        attrs = [_ATTR_OF_KEY.get(name, name) for name in names]
        unknown = [name for name, attr in zip(names, attrs) if attr not in HEADER_KEYS]
        if unknown:
            raise ValueError(f"not a SimAI header key: {', '.join(unknown)}")
        invalid = [a for a in attrs if HEADER_KEYS[a] in self.invalid]
        if invalid:
            key = HEADER_KEYS[invalid[0]]
            raise FormatError(path, f"header key {key!r} has value {self.invalid[key]!r}, expected an integer",
                              line=1, field=key)
        missing = [HEADER_KEYS[a] for a in attrs if getattr(self, a) is None]
        if missing:
            what = "key" if len(missing) == 1 else "keys"
            raise FormatError(path, f"missing header {what} {', '.join(repr(k) for k in missing)} "
                              f"(needed for {self.policy} workloads; AICB and our generator write them)",
                              line=1, field=", ".join(missing))
        values = []
        for attr in attrs:
            value = getattr(self, attr)
            if attr in _LIST_ATTRS:
                value = len(value)
            elif attr in _POSITIVE_ATTRS and value < 1:
                raise FormatError(path, f"header key {HEADER_KEYS[attr]!r} is {value}, must be at least 1",
                                  line=1, field=HEADER_KEYS[attr])
            elif value < 0:
                raise FormatError(path, f"header key {HEADER_KEYS[attr]!r} is {value}, must not be negative",
                                  line=1, field=HEADER_KEYS[attr])
            values.append(value)
        return tuple(values)

    # ---- text ------------------------------------------------------------------------------

    def format(self) -> str:
        """Line 1 as we write it: ``POLICY key: value ...`` with single spaces, integers only."""
        parts = [self.policy, *self.stray]
        for key in self.keys():
            attr = _ATTR_OF_KEY.get(key)
            if attr is None:
                parts.append(f"{key}: {self.extra[key]}")
            elif attr in _LIST_ATTRS:
                layers = getattr(self, attr)
                parts.append(" ".join([f"{key}:", str(len(layers)), *map(str, layers)]))
            else:
                parts.append(f"{key}: {getattr(self, attr)}")
        return " ".join(parts)

    def validate(self, path: str = "<SimAI workload>") -> None:
        """Check that SimAI parses this header without a warning.  Raises :class:`FormatError`."""
        def fail(message: str, key: str | None = None) -> None:
            raise FormatError(path, message, line=1, field=key)

        if self.policy not in POLICIES:
            fail(f"unknown policy keyword {self.policy!r} (SimAI knows {', '.join(POLICIES)})", "policy")
        if self.invalid:
            key = next(iter(self.invalid))
            fail(f"header key {key!r} has value {self.invalid[key]!r}, expected an integer", key)
        for attr in _INT_ATTRS:
            value = getattr(self, attr)
            if value is not None and (type(value) is not int or value < (1 if attr in _POSITIVE_ATTRS else 0)):
                fail(f"header key {HEADER_KEYS[attr]!r} is {value!r}, expected an integer "
                     f"{'>= 1' if attr in _POSITIVE_ATTRS else '>= 0'}", HEADER_KEYS[attr])
        for attr in _LIST_ATTRS:
            layers = getattr(self, attr)
            if layers is not None and not all(type(v) is int and v >= 0 for v in layers):
                fail(f"header key {HEADER_KEYS[attr]!r} must list layer indices >= 0, got {layers!r}", HEADER_KEYS[attr])
        for key, value in self.extra.items():
            tokens = value.split()
            if (not _NAME_RE.fullmatch(key) or ":" in key or key in _ATTR_OF_KEY or not tokens
                    or any(_is_key_token(t) for t in tokens)):
                fail(f"unknown header key {key!r} with value {value!r} cannot be written so that it reads back", key)
        if self.is_transformer:
            if self.stray:
                fail(f"tokens outside any 'key: value' pair: {' '.join(self.stray)}", "header")
            self.require(*HEADER_KEYS, path=path)
            if (self.pp == 1) != (self.pp_comm == 0):
                fail(f"pp_comm is {self.pp_comm} with pp {self.pp}: SimAI expects pp_comm 0 exactly when pp is 1",
                     "pp_comm")
        elif any(_is_key_token(t) for t in self.stray):
            fail(f"stray header tokens {' '.join(self.stray)} would read back as keys", "header")

    @classmethod
    def parse(cls, line: str, path: str = "<SimAI workload>", strict: bool = True,
              warnings: list[str] | None = None) -> SimAIHeader:
        """Parse line 1.  See the module docstring for what ``strict`` changes."""
        tokens = line.split()
        if not tokens:
            raise FormatError(path, "empty first line: expected a policy keyword such as "
                              "HYBRID_TRANSFORMER_FWD_IN_BCKWD and its 'key: value' pairs", line=1, field="policy")
        policy = tokens[0]
        if strict and policy not in POLICIES:
            raise FormatError(path, f"unknown policy keyword {policy!r} (SimAI knows {', '.join(POLICIES)})",
                              line=1, field="policy")
        notes = warnings if warnings is not None else []
        if policy not in POLICIES:
            notes.append(f"{path}:1: unknown policy keyword {policy!r}: SimAI exits on it")
        values: dict[str, list[str]] = {}
        order: list[str] = []
        stray: list[str] = []
        current: str | None = None
        for token in tokens[1:]:
            if _is_key_token(token):
                current = token[:-1] if token.endswith(":") else token
                if current in values:
                    notes.append(f"{path}:1: header key {current!r} given twice; the last value counts, as in SimAI")
                else:
                    order.append(current)
                values[current] = []
            elif current is None:
                stray.append(token)
            else:
                values[current].append(token)
        header = cls(policy=policy, order=tuple(order))
        for key, vals in values.items():
            attr = _ATTR_OF_KEY.get(key)
            if attr is None:
                if not vals:
                    if strict:
                        raise FormatError(path, f"header key {key!r} has no value", line=1, field=key)
                    notes.append(f"{path}:1: header key {key!r} has no value; dropped")
                    header.order = tuple(k for k in header.order if k != key)
                    continue
                header.extra[key] = " ".join(vals)
                if key == "mode" and header.extra[key] not in ("0", "1"):
                    # AICB 2.1 writes 0 (training) or 1 (inference); SimAI ignores the key, so 'mode: 7' or
                    # 'mode: nan' would silently run as training (issue 28, item 8): refused even when lenient
                    raise FormatError(path, f"header key 'mode' is {header.extra[key]!r}: AICB writes 0 (training) "
                                      "or 1 (inference)", line=1, field=key)
                continue
            if attr in _LIST_ATTRS:
                count_text, *layer_texts = vals or [""]
                count = _header_int(count_text, key, path, strict, notes, header)
                if count is None:
                    continue
                layers = [_header_int(t, key, path, strict, notes, header) for t in layer_texts[:max(count, 0)]]
                if len(layers) < count or None in layers:
                    if strict:
                        raise FormatError(path, f"header key {key!r} announces {count} layers but lists "
                                          f"{' '.join(layer_texts) or 'none'}", line=1, field=key)
                    header.invalid.setdefault(key, " ".join(vals))
                    continue
                setattr(header, attr, tuple(layers))
                rest = layer_texts[count:]
            else:
                value = _header_int(vals[0] if vals else "", key, path, strict, notes, header)
                if value is not None:
                    setattr(header, attr, value)
                rest = vals[1:]
            if rest:
                if strict:
                    raise FormatError(path, f"unexpected tokens after header key {key!r}: {' '.join(rest)}",
                                      line=1, field=key)
                notes.append(f"{path}:1: tokens {' '.join(rest)} after header key {key!r} are ignored by SimAI")
                stray.extend(rest)
        if stray:
            if strict:
                raise FormatError(path, f"tokens outside any 'key: value' pair: {' '.join(stray)}", line=1,
                                  field="header")
            notes.append(f"{path}:1: header tokens {' '.join(stray)} belong to no 'key:' (SimAI ignores them)")
            header.stray = tuple(stray)
        return header


def _header_int(text: str, key: str, path: str, strict: bool, notes: list[str], header: SimAIHeader) -> int | None:
    """An integer header value.  ``12582912.0`` is 12582912 in both modes (AICB writes pp_comm so and
    SimAI's ``std::stoi`` reads the leading integer); lenient mode reads any leading integer as stoi
    does, and records a value without one in ``header.invalid``."""
    match = _HEADER_INT_RE.fullmatch(text)
    if match:
        return int(match.group(1))
    if strict:
        raise FormatError(path, f"header key {key!r} has value {text!r}, expected an integer", line=1, field=key)
    match = _STOI_RE.match(text)
    if match:
        notes.append(f"{path}:1: header key {key!r} value {text!r} read as {int(match.group(1))}, as SimAI's stoi does")
        return int(match.group(1))
    header.invalid[key] = text
    return None


@dataclass(slots=True)
class SimAILayer:
    """One layer record: times in integer ns, sizes in bytes, comm tokens as written.

    ``policy`` is the 13th field of ``HYBRID_CUSTOMIZED`` records and ``None`` otherwise.
    """

    name: str
    dependency: int
    fwd_compute_ns: int
    fwd_comm: str
    fwd_size_bytes: int
    ig_compute_ns: int
    ig_comm: str
    ig_size_bytes: int
    wg_compute_ns: int
    wg_comm: str
    wg_size_bytes: int
    update_ns: int
    policy: str | None = None

    def fields(self) -> tuple:
        """The record's values in file order (12, or 13 with a per-layer policy)."""
        values = (self.name, self.dependency, self.fwd_compute_ns, self.fwd_comm, self.fwd_size_bytes,
                  self.ig_compute_ns, self.ig_comm, self.ig_size_bytes, self.wg_compute_ns, self.wg_comm,
                  self.wg_size_bytes, self.update_ns)
        return values if self.policy is None else values + (self.policy,)


@dataclass
class SimAIWorkload:
    """A SimAI workload file: :class:`SimAIHeader` and :class:`SimAILayer` records.

    ``path`` is where it was read from (used in error messages); ``warnings`` what a lenient read
    found that SimAI would silently reinterpret.
    """

    header: SimAIHeader = field(default_factory=SimAIHeader)
    records: list[SimAILayer] = field(default_factory=list)
    path: str = "<SimAI workload>"
    warnings: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[SimAILayer]:
        return iter(self.records)

    def require(self, *names: str) -> tuple[int, ...]:
        """:meth:`SimAIHeader.require` with this file's name in the error."""
        return self.header.require(*names, path=self.path)

    def assume_defaults(self) -> list[str]:
        """Fill the transformer header keys an older AICB file lacks with what a file without them describes:
        ``model_parallel_NPU_group``, ``ep``, ``pp``, ``ga`` and ``vpp`` 1 (AICB's older files unroll every
        micro-batch into the records, so ``ga: 1``; with ``pp: 1`` there is no bubble and no pipeline send).
        SimAI itself leaves them uninitialised (its own warning: "Input workload format mismatch").  Returns
        the note to print, or nothing when no key was missing."""
        header = self.header
        assumed = [key for attr, key in (("tp", "model_parallel_NPU_group"), ("ep", "ep"), ("pp", "pp"),
                                         ("ga", "ga"), ("vpp", "vpp")) if getattr(header, attr) is None]
        for attr in ("tp", "ep", "pp", "ga", "vpp"):
            if getattr(header, attr) is None:
                setattr(header, attr, 1)
        if header.pp_comm is None and header.pp == 1:
            header.pp_comm = 0
        if not assumed:
            return []
        return [f"--lenient: {self.path} has no {', '.join(assumed)} header key(s); assumed "
                f"{', '.join(k + ' 1' for k in assumed)} (an older AICB file: its records unroll every micro-batch)"]

    @property
    def placeholder_compute(self) -> bool:
        """Whether every compute time is AICB's placeholder (1 ns, or 0): a file generated without compute
        times, whose simulation is communication only."""
        return bool(self.records) and all(
            max(r.fwd_compute_ns, r.ig_compute_ns, r.wg_compute_ns) <= 1 for r in self.records)

    def placeholder_warning(self) -> list[str]:
        """The warning a simulation of a placeholder-compute file prints (empty otherwise)."""
        if not self.placeholder_compute:
            return []
        return [f"every compute time in {self.path} is AICB's placeholder of 1 ns: the simulated iteration is "
                "communication only (generate the file with --gpu_type GPU, --comp_filepath FILE or --aiob_enable)"]

    # ---- reading ---------------------------------------------------------------------------

    @classmethod
    def read(cls, path: str | os.PathLike, strict: bool = True, share: bool = False,
             columns: bool = False) -> SimAIWorkload:
        """Read a SimAI workload file.  Raises :class:`FormatError` naming the file, line and field.

        The file is read line by line (never held whole).  ``share=True`` gives records written alike
        (the same line text) one shared :class:`SimAILayer` object, so that a file of 10^6 records
        repeating a few hundred lines holds a few hundred records and a list of references (what the
        simulator reads with; it never changes a record).  Do not change a shared record: its copies
        change with it.  ``columns=True`` keeps the records in a read-only
        :class:`workload_generator.simai_records.RecordColumns` (about 60 bytes per distinct record instead of
        250: what ``--model topo`` reads with, for files of 10^6 records that all differ)."""
        path = os.fspath(path)
        lines = read_lines(path, "a SimAI workload .txt")
        try:
            return cls._parse(lines, path, strict, share, columns)
        finally:
            lines.close()

    @classmethod
    def loads(cls, text: str, path: str = "<SimAI workload>", strict: bool = True,
              share: bool = False, columns: bool = False) -> SimAIWorkload:
        """Parse the text of a SimAI workload file (see :meth:`read`)."""
        return cls._parse(iter(text.splitlines()), path, strict, share, columns)

    @classmethod
    def _parse(cls, lines: Iterator[str], path: str, strict: bool, share: bool,
               columns: bool = False) -> SimAIWorkload:
        # SimAI reads lines 1 and 2 with getline and the records with operator>>; so do we.
        warnings: list[str] = []
        header = SimAIHeader.parse(next(lines, ""), path, strict, warnings)
        count = _record_count(next(lines, None), path, strict, warnings)
        width = 13 if header.policy == CUSTOMIZED_POLICY else 12
        records = _read_records(lines, count, width, path, strict, warnings, share, columns)
        return cls(header=header, records=records, path=path, warnings=warnings)

    # ---- writing ---------------------------------------------------------------------------

    def dumps(self, path: str | None = None) -> str:
        """The file text we write: validated, one record per line, tab-separated, ``\\n`` line ends."""
        where = path or self.path
        self.header.validate(where)
        customized = self.header.policy == CUSTOMIZED_POLICY
        out = [self.header.format(), str(len(self.records))]
        append = out.append
        tokens = VALID_TOKENS
        name_ok = _NAME_RE.fullmatch
        for index, r in enumerate(self.records):
            # Fast path: plain ints and valid tokens; anything else goes through the checker that
            # names the offending field.
            if (type(r.fwd_compute_ns) is int and type(r.fwd_size_bytes) is int and type(r.ig_compute_ns) is int
                    and type(r.ig_size_bytes) is int and type(r.wg_compute_ns) is int
                    and type(r.wg_size_bytes) is int and type(r.update_ns) is int and type(r.dependency) is int
                    and r.fwd_compute_ns >= 0 and r.fwd_size_bytes >= 0 and r.ig_compute_ns >= 0
                    and r.ig_size_bytes >= 0 and r.wg_compute_ns >= 0 and r.wg_size_bytes >= 0 and r.update_ns >= 0
                    and r.fwd_comm in tokens and r.ig_comm in tokens and r.wg_comm in tokens
                    and type(r.name) is str and name_ok(r.name) and (r.policy is None) != customized):
                line = (f"{r.name}\t{r.dependency}\t{r.fwd_compute_ns}\t{r.fwd_comm}\t{r.fwd_size_bytes}\t"
                        f"{r.ig_compute_ns}\t{r.ig_comm}\t{r.ig_size_bytes}\t{r.wg_compute_ns}\t{r.wg_comm}\t"
                        f"{r.wg_size_bytes}\t{r.update_ns}")
                if customized:
                    if r.policy not in POLICIES:
                        _check_record(r, index, where, customized)
                    line += "\t" + r.policy
                append(line)
            else:
                append("\t".join(_check_record(r, index, where, customized)))
        out.append("")
        return "\n".join(out)

    def write(self, path: str | os.PathLike) -> None:
        """Validate and write atomically (no partial file on error).  Raises :class:`FormatError`."""
        path = os.fspath(path)
        text = self.dumps(path)
        with atomic_write(path) as handle:
            handle.write(text)


def _check_record(record: SimAILayer, index: int, path: str, customized: bool) -> list[str]:
    """The fields of ``record`` as text, or :class:`FormatError` naming the first bad field (the
    line is the one it would be written at: index + 3)."""
    line = index + 3

    def fail(name: str, message: str) -> None:
        raise FormatError(path, message, line=line, field=name)

    out: list[str] = []
    for name in RECORD_FIELDS:
        value = getattr(record, name)
        if name == "name":
            if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
                fail(name, f"layer name must be one token without whitespace, got {value!r}")
            out.append(value)
        elif name in _TOKEN_FIELDS:
            if value not in VALID_TOKENS:
                fail(name, f"comm token {value!r} is not one of {', '.join(sorted(VALID_TOKENS))}")
            out.append(value)
        else:
            try:
                if isinstance(value, bool):
                    raise TypeError
                number = operator.index(value)
            except TypeError:
                fail(name, f"expected an integer, got {value!r}")
            if name != "dependency" and number < 0:
                fail(name, f"must not be negative, got {number}")
            out.append(str(number))
    if customized:
        if record.policy not in POLICIES:
            fail("policy", f"{CUSTOMIZED_POLICY} records end with a policy keyword, got {record.policy!r}")
        out.append(record.policy)
    elif record.policy is not None:
        fail("policy", f"only {CUSTOMIZED_POLICY} records carry a per-layer policy, got {record.policy!r}")
    return out


def _record_count(line: str | None, path: str, strict: bool, warnings: list[str]) -> int:
    if line is None or not line.strip():
        raise FormatError(path, "line 2 must hold N, the number of layer records", line=2, field="record count")
    text = line.strip()
    if _UINT_RE.fullmatch(text):
        return int(text)
    match = _STOI_RE.match(text)
    if strict or not match or int(match.group(1)) < 0:
        raise FormatError(path, f"expected the number of layer records alone on line 2, got {text!r}", line=2,
                          field="record count")
    warnings.append(f"{path}:2: only the leading integer of {text!r} counts (SimAI ignores the rest of line 2)")
    return int(match.group(1))


def _field_names(width: int) -> tuple[str, ...]:
    return RECORD_FIELDS + ("policy",) if width == 13 else RECORD_FIELDS


def _convert(tokens: Sequence[str], token_lines: Sequence[int], path: str, strict: bool,
             width: int) -> SimAILayer:
    """A record from ``width`` tokens, or :class:`FormatError` naming the first bad field and its line."""
    names = _field_names(width)
    values: list = []
    for position, (name, token) in enumerate(zip(names, tokens)):
        if position in _STRING_POSITIONS:
            if strict and name in _TOKEN_FIELDS and token not in VALID_TOKENS:
                raise FormatError(path, f"unknown comm token {token!r} (expected NONE or one of ALLREDUCE, ALLGATHER, "
                                  "REDUCESCATTER, ALLTOALL, optionally with _EP or _DP_EP)",
                                  line=token_lines[position], field=name)
            values.append(token)
        elif name == "policy":
            if strict and token not in POLICIES:
                raise FormatError(path, f"unknown per-layer policy {token!r}", line=token_lines[position], field=name)
            values.append(token)
        elif (_INT_RE if name == "dependency" else _UINT_RE).fullmatch(token):
            value = int(token)
            if abs(value) > UINT64_MAX:
                unit = " ns" if name.endswith("_ns") else " bytes" if name.endswith("_bytes") else ""
                raise FormatError(path, f"{token}{unit} is beyond the largest value a SimAI record holds ({UINT64_MAX:,}, "
                                  "a 64-bit integer)", line=token_lines[position], field=name)
            values.append(value)
        else:
            what = "an integer" if name == "dependency" else "a non-negative integer"
            unit = " (ns)" if name.endswith("_ns") else " (bytes)" if name.endswith("_bytes") else ""
            raise FormatError(path, f"expected {what}{unit}, got {token!r}", line=token_lines[position], field=name)
    return SimAILayer(*values)


SHARED_LINES = 1 << 16
"""How many distinct record lines the reader remembers (to parse a repeated line once, and with
``share`` to give it one record object); past that it forgets them and starts again, so that a file
of all-different lines does not keep every line's text as well."""


def _read_records(lines: Iterator[str], count: int, width: int, path: str, strict: bool,
                  warnings: list[str], share: bool = False, columns: bool = False) -> Any:
    """The ``count`` records: a list, or with ``columns`` a :class:`RecordColumns` (see :meth:`SimAIWorkload.read`)."""
    records: Any = RecordColumns(SimAILayer) if columns else []
    append = records.append
    names = _field_names(width)
    fast = _record_re(width).fullmatch
    valid = VALID_TOKENS
    intern = sys.intern  # names and tokens repeat: one string each
    seen: dict[str, tuple] = {}    # a well-formed line's text -> its record's values
    shared: dict[str, SimAILayer] = {}  # with share: a well-formed line's text -> its record
    pending: list[str] = []        # tokens of a record spread over lines (lenient mode)
    pending_lines: list[int] = []
    for number, line in enumerate(lines, 3):
        if len(records) == count and not pending:
            if line.strip():
                if strict:
                    raise FormatError(path, f"more records than the {count} announced on line 2", line=number,
                                      field="record count")
                warnings.append(f"{path}:{number}: data after the {count} records announced on line 2 is ignored "
                                "(as SimAI does)")
                break
            continue
        if not pending:
            if share:
                record = shared.get(line)
                if record is not None:
                    append(record)
                    continue
            else:
                values = seen.get(line)
                if values is not None:  # files repeat one micro-batch's lines ga times: parse each text once
                    append(SimAILayer(*values))
                    continue
        match = fast(line) if not pending else None
        if match:
            g = match.groups()
            if not strict or (g[3] in valid and g[6] in valid and g[9] in valid and (width == 12 or g[12] in POLICIES)):
                values = (intern(g[0]), int(g[1]), int(g[2]), intern(g[3]), int(g[4]), int(g[5]), intern(g[6]),
                          int(g[7]), int(g[8]), intern(g[9]), int(g[10]), int(g[11]),
                          intern(g[12]) if width == 13 else None)
                record = SimAILayer(*values)
                if share:
                    if len(shared) >= SHARED_LINES:
                        shared.clear()
                    shared[line] = record
                else:
                    if len(seen) >= SHARED_LINES:
                        seen.clear()
                    seen[line] = values
                append(record)
                continue
        tokens = line.split()
        if not tokens:
            continue
        if strict:
            if len(tokens) != width:
                detail = (f"missing field {names[len(tokens)]!r}" if len(tokens) < width
                          else f"{len(tokens) - width} extra field(s) from {tokens[width]!r}")
                raise FormatError(path, f"expected {width} fields, found {len(tokens)} ({detail}); "
                                  "files we check strictly have one record per line",
                                  line=number, field=names[min(len(tokens), width - 1)])
            append(_convert(tokens, [number] * width, path, strict, width))
            continue
        pending.extend(tokens)
        pending_lines.extend([number] * len(tokens))
        while len(pending) >= width and len(records) < count:
            append(_convert(pending[:width], pending_lines[:width], path, strict, width))
            del pending[:width], pending_lines[:width]
        if len(records) == count and pending:
            warnings.append(f"{path}:{pending_lines[0]}: data after the {count} records announced on line 2 is "
                            "ignored (as SimAI does)")
            pending.clear()
            break
    if pending:
        raise FormatError(path, f"incomplete record: {len(pending)} of {width} fields, missing "
                          f"{names[len(pending)]!r}", line=pending_lines[0], field=names[len(pending)])
    if len(records) < count:
        raise FormatError(path, f"line 2 announces {count} records but the file holds {len(records)}", line=2,
                          field="record count")
    return records

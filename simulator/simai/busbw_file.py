"""SimAI's ``busbw.yaml`` (``-busbw FILE``): measured bus bandwidths per group and collective.

The format, as SimAI's pre-1.7 analytical binary reads it (``AstraParamParse.hh``)::

    test                      <- line 1: a name, skipped
    TP:                       <- a line ending in ':' opens a section (TP, DP, EP, PP)
    allreduce,: 300           <- key (anything after a ',' dropped), ':', a value in GiB/s, or null
    allgather,: 280
    ...
    PP:
    busbw: 47.5

Blank lines and lines starting with ``#`` are skipped.  SimAI stores each value as a C ``float``
and ignores the PP section (its PP term divides by ``-pp_o``); we use ``PP: busbw`` as the default
of ``--pp_busbw``.  DP_EP collectives take the EP section's values, as SimAI does.

It is YAML only in looks (``allreduce,:`` is a key with a comma), so it is read line by line, not
with a YAML library.  Errors name the file and line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from simulator.cfloat import F32_MAX, f32
from utils.errors import ConfigError, FormatError

SECTIONS = ("TP", "DP", "EP", "PP")
KEYS = ("allreduce", "allgather", "reducescatter", "alltoall")
TYPE_KEYS = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reducescatter",
             "all_to_all": "alltoall"}
"""Our comm types (CommType values) -> the file's keys."""
GROUP_SECTIONS = {"TP": "TP", "EP": "EP", "DP": "DP", "DP_EP": "EP"}
"""The section a group's collectives read (DP_EP: EP's, as SimAI's pre-1.7 binary does)."""


@dataclass(frozen=True)
class BusbwFile:
    """The values of a busbw.yaml: ``values[(section, key)]`` in GiB/s (C floats), ``None`` for ``null``;
    ``pp_busbw`` the PP section's ``busbw``; ``notes`` what was skipped (unknown sections or keys)."""

    path: str
    name: str = ""
    values: dict[tuple[str, str], float | None] = field(default_factory=dict)
    pp_busbw: float | None = None
    notes: tuple[str, ...] = ()

    @classmethod
    def read(cls, path: str | os.PathLike) -> BusbwFile:
        from utils.io import refuse_device

        path = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as handle:
                refuse_device(path, "SimAI's busbw.yaml", handle)
                text = handle.read()
        except FileNotFoundError:
            raise ConfigError(f"-busbw {path}: no such file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"-busbw {path}: cannot read it ({exc})") from None
        return cls.loads(text, path)

    @classmethod
    def loads(cls, text: str, path: str = "<busbw.yaml>") -> BusbwFile:
        lines = text.splitlines()
        name = lines[0].strip() if lines else ""
        values: dict[tuple[str, str], float | None] = {}
        notes: list[str] = []
        pp_busbw: float | None = None
        section: str | None = None
        for number, raw in enumerate(lines[1:], start=2):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if line.endswith(":"):
                section = line[:-1].strip()
                if section not in SECTIONS:
                    notes.append(f"{path}:{number}: section {section!r} is not one of {', '.join(SECTIONS)}; "
                                 "its values are ignored (as SimAI does)")
                continue
            key, colon, rest = line.partition(":")
            if not colon:
                raise FormatError(path, f"expected 'key: value' or 'SECTION:', got {raw.strip()!r}", line=number)
            key = key.strip().split(",", 1)[0].strip().lower()
            token = rest.split()[0] if rest.split() else ""
            if section is None:
                raise FormatError(path, f"{key!r} comes before any section (TP:, DP:, EP:, PP:)", line=number)
            value: float | None
            if token == "null":
                value = None
            else:
                try:
                    value = float(token)
                except ValueError:
                    raise FormatError(path, f"expected a bandwidth in GiB/s or null, got {token!r}", line=number,
                                      field=f"{section} {key}") from None
                if abs(value) > F32_MAX:  # inf, or 1e300: beyond SimAI's float (f32 overflowed on it)
                    raise FormatError(path, f"a bandwidth must be a finite number of GiB/s (at most {F32_MAX:.3g}, a "
                                      f"C float), got {token}", line=number, field=f"{section} {key}")
                value = f32(value)
                if not value > 0:
                    raise FormatError(path, f"a bandwidth must be positive, got {token}", line=number,
                                      field=f"{section} {key}")
            if section == "PP":
                if key == "busbw":
                    pp_busbw = value
                else:
                    notes.append(f"{path}:{number}: PP takes 'busbw', not {key!r}; ignored")
            elif section in SECTIONS:
                if key in KEYS:
                    values[(section, key)] = value
                else:
                    notes.append(f"{path}:{number}: {section} key {key!r} is not one of {', '.join(KEYS)}; ignored")
        return cls(path, name, values, pp_busbw, tuple(notes))

    def busbw(self, group: str, comm_type: str) -> float:
        """The busbw (GiB/s) of a collective ``comm_type`` (a CommType value) in ``group`` (TP, EP, DP,
        DP_EP).  Raises :class:`ConfigError` when the file gives none (absent or ``null``)."""
        section, key = GROUP_SECTIONS[group], TYPE_KEYS[comm_type]
        value = self.values.get((section, key))
        if value is None:
            where = f"{group} (its {section} section)" if group != section else group
            raise ConfigError(f"-busbw {self.path}: the workload has {comm_type.replace('_', '-')}s in {where}, "
                              f"but the file gives no {section} {key} (absent or null)")
        return value

    def differences_from_pre17(self) -> list[str]:
        """Where the pre-1.7 binary would read other values than we do: it prices reduce-scatters with the
        allgather value of the section."""
        out = []
        for section in ("TP", "DP", "EP"):
            ag, rs = self.values.get((section, "allgather")), self.values.get((section, "reducescatter"))
            if rs is not None and ag is not None and rs != ag:
                out.append(f"-busbw {self.path}: {section} reducescatter {rs:g} differs from allgather {ag:g}; we "
                           f"use {rs:g} for reduce-scatters, SimAI's pre-1.7 binary used the allgather value")
        return out

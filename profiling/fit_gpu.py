"""``python -m profiling fit-gpu KERNELS.json --base GPU -o spec.json``: a GPU spec file from a kernel sweep.

The sweep (``python -m profiling kernels``, or ``profiling/measurements/h200/kernels.json``) is checked row by row,
fitted by :func:`mocked_model.compute.calibrate.fit_gpu` over the GPU table's ``--base`` entry (whose figures fill
what the sweep did not measure), and written by :func:`mocked_model.compute.spec_file.dumps`; the command prints
the fitted figures and the GEMM shape law's error against every bf16 GEMM row of the sweep.

Where the sweep leaves ``fit_gpu`` without an answer, this module decides:

- sustained rows without an SM clock (no nvidia-smi on the machine): the base's sustained clock is kept, and
  ``gemm_eff`` is fitted to the sustained rate at that clock;
- a sustained GEMM other than 8192^3 (``sustained_shape``, a CPU ``--quick`` run): ``gemm_eff`` (and FP8's) are
  fitted at the sweep's shape;
- a memory kernel whose share of the base's HBM rate rounds to 0 (a CPU run): left out, the base's share kept;
- attention rows: the forward and backward efficiencies and per-thread-block overheads (``attn_fwd_cta``,
  ``attn_bwd_cta``) are fitted separately by :func:`~mocked_model.compute.calibrate.attention_fit`, at the sustained
  clock (the sweep times attention after its sustained GEMM).
"""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import dataclass, field, replace
from typing import Any

from mocked_model.compute import calibrate
from mocked_model.compute.gpu_table import GPUS, GPUSpec, table_entry
from mocked_model.compute.kernels import GEMM_T0_NS
from mocked_model.compute.spec_file import dumps, spec_from_dict
from utils.errors import ConfigError, FormatError

SECTIONS = ("gemm", "memory_kernels", "sustained")
"""The sweep's sections a fit needs at least one of (``attention`` is optional)."""
_POSITIVE = object()
_INT = object()
ROW_FIELDS: dict[str, dict[str, tuple[object, bool]]] = {
    "gemm": {"m": (_INT, True), "n": (_INT, True), "k": (_INT, True), "bf16_us": (_POSITIVE, True),
             "bf16_tflops": (_POSITIVE, True), "fp8_us": (_POSITIVE, False), "fp8_tflops": (_POSITIVE, False),
             "fp8_speedup": (_POSITIVE, False), "cast_amax_us": (_POSITIVE, False)},
    "memory_kernels": {"us": (_POSITIVE, True), "bytes": (_POSITIVE, True), "gbps": (_POSITIVE, True)},
    "sustained": {"tflops": (_POSITIVE, True)},
    "attention": {"batch": (_INT, True), "heads": (_INT, True), "seq": (_INT, True), "head_dim": (_INT, True),
                  "v_dim": (_INT, True), "fwd_us": (_POSITIVE, True), "bwd_us": (_POSITIVE, False)},
}
"""Each section's numeric fields: (kind, required).  Times (us), rates (TFLOP/s, GB/s) and sizes must be positive
finite numbers; sizes whole numbers.  ``null`` counts as absent for an optional field."""
_BOUNDS = (("tflops", 1e5, "TFLOP/s, beyond any GPU"), ("gbps", 1e6, "GB/s, beyond any memory"),
           ("speedup", 1e3, "times, beyond any kernel"), ("bytes", float(1 << 50), "bytes, beyond any GPU's memory"),
           ("us", 1e10, "us, hours for one kernel call"))
"""Largest value a field whose name ends so may hold (a sweep's rows are one GPU's kernels): a larger one is a
broken file, and fitting it gave nonsense (a rate of 1e300 TFLOP/s ended in a math domain error)."""
_MAX_DIM = 1 << 31
"""Largest size (``m``, ``n``, ``k``, batch, heads, sequence, head dims) a sweep's row may hold."""


def _bound(name: str, kind: object) -> tuple[float, str]:
    if kind is _INT:
        return float(_MAX_DIM), "(a tensor dimension beyond any kernel's)"
    for tail, limit, why in _BOUNDS:
        if name.endswith(tail):
            return limit, why
    return math.inf, ""


@dataclass
class Fit:
    """A fitted spec, the table entry it started from, and what the fit had to decide (``notes``)."""

    spec: GPUSpec
    base: GPUSpec
    base_name: str
    sweep: dict[str, Any]
    fitted: list[str] = field(default_factory=list)
    """The spec's fields this sweep gave (the others are the base's)."""
    memory_rows: list[dict[str, Any]] = field(default_factory=list)
    """The memory-kernel rows the fit used."""
    notes: list[str] = field(default_factory=list)


def base_entry(name: str) -> tuple[str, GPUSpec]:
    """The GPU table's entry for ``--base`` and its table name (one line naming the table otherwise)."""
    entry = table_entry(name)
    if entry is None:
        raise ConfigError(f"--base {name!r} is not in the GPU table (known: {', '.join(GPUS)})")
    return next(key for key, spec in GPUS.items() if spec is entry), entry


def load_sweep(path: str) -> dict[str, Any]:
    """Read and check a kernel sweep's JSON: one :class:`FormatError` naming the file, the row and the field."""
    if os.path.isdir(path):
        raise FormatError(path, "is a folder, not a kernel sweep (python -m profiling kernels -o FILE)")
    if not os.path.exists(path):
        raise FormatError(path, "no such file (a kernel sweep: python -m profiling kernels -o FILE)")
    from utils.io import read_text

    text = read_text(path, "a kernel sweep's JSON", "the kernel sweep")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(path, f"not valid JSON (line {exc.lineno}: {exc.msg})") from None
    check_sweep(data, path)
    return data


def check_sweep(data: Any, path: str) -> None:
    """Refuse a sweep a fit cannot trust: not an object, none of :data:`SECTIONS`, a row missing a field or with a
    time, rate or size that is not a positive finite number, an unknown memory kernel, an unreadable SM clock."""
    if not isinstance(data, dict):
        raise FormatError(path, f"a kernel sweep holds one JSON object, got {type(data).__name__}")
    for section in (*SECTIONS, "attention"):
        if data.get(section) is not None and not isinstance(data[section], list):
            raise FormatError(path, f"{section} must be a list of rows, got {type(data[section]).__name__}")
    if not any(data.get(section) for section in SECTIONS):
        raise FormatError(path, "no gemm, memory_kernels or sustained rows: nothing to fit (a kernel sweep: "
                                "python -m profiling kernels -o FILE)")
    shape = data.get("sustained_shape")
    if shape is not None and not (isinstance(shape, list) and len(shape) == 3
                                  and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)):
        raise FormatError(path, f"sustained_shape must be [m, n, k], three positive whole numbers, got {_text(shape)}")
    for section, fields in ROW_FIELDS.items():
        for i, row in enumerate(data.get(section) or ()):
            where = f"{section}[{i}]"
            if not isinstance(row, dict):
                raise FormatError(path, f"{where} must be an object, got {json.dumps(row)[:60]}")
            if section == "memory_kernels":
                op = row.get("op")
                if not isinstance(op, str):
                    raise FormatError(path, f"{where}: missing field 'op' (a memory kernel's name)")
                if op not in calibrate.MEMORY_OPS:
                    raise FormatError(path, f"{where}: op {op!r} is not a known memory kernel "
                                            f"(known: {', '.join(calibrate.MEMORY_OPS)})")
                where += f" ({op})"
            elif section == "gemm" and all(isinstance(row.get(d), int) for d in "mnk"):
                where += f" ({row['m']}x{row['n']}x{row['k']})"
            elif section == "attention" and all(isinstance(row.get(d), int) for d in ("batch", "heads", "seq")):
                where += f" (batch {row['batch']}, {row['heads']} heads, sequence {row['seq']})"
            for name, (kind, required) in fields.items():
                value = row.get(name)
                if value is None:
                    if required:
                        raise FormatError(path, f"{where}: missing field {name!r}")
                    continue
                number = isinstance(value, int | float) and not isinstance(value, bool)
                if not number or not math.isfinite(value) or value <= 0 or (kind is _INT and value != int(value)):
                    want = "a positive whole number" if kind is _INT else "a positive finite number"
                    raise FormatError(path, f"{where}: field {name!r} must be {want}, got {_text(value)}")
                limit, why = _bound(name, kind)
                if value > limit:
                    raise FormatError(path, f"{where}: field {name!r} is {_text(value)}, more than {limit:g} {why}")
            if section == "sustained":
                smi = row.get("smi", "")
                if not isinstance(smi, str):
                    raise FormatError(path, f"{where}: field 'smi' must be text ('clock MHz, power W, temp C'), "
                                            f"got {_text(smi)}")
                if smi.strip() and _smi_clock(smi) is None:
                    raise FormatError(path, f"{where}: field 'smi' {smi!r} does not start with a positive SM clock "
                                            "in MHz")
            if section == "attention" and not isinstance(row.get("causal", True), bool):
                raise FormatError(path, f"{where}: field 'causal' must be true or false, got {_text(row['causal'])}")


def _text(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value).replace("nan", "NaN").replace("inf", "Infinity")
    return json.dumps(value)[:60]


def _smi_clock(smi: str) -> float | None:
    try:
        value = float(smi.split(",")[0])
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def fit(sweep: dict[str, Any], base: str, name: str | None = None, label: str = "<sweep>") -> Fit:
    """Fit ``sweep`` (checked by :func:`check_sweep`) over the table entry ``base``; ``label`` (the sweep's path as
    given) goes into the spec's ``calibration``."""
    base_name, entry = base_entry(base)
    notes: list[str] = []
    kernels = dict(sweep)
    keep_clock = False
    sustained = kernels.get("sustained") or []
    if sustained and not any(_smi_clock(str(r.get("smi") or "")) for r in sustained):
        keep_clock = True
        kernels["sustained"] = [{**r, "smi": f"{entry.sustained_mhz:g}"} for r in sustained]
        notes.append(f"the sustained rows carry no SM clock: kept the base's sustained clock {entry.sustained_mhz:g} MHz "
                     "and fitted gemm_eff at it")
    memory = []
    for r in kernels.get("memory_kernels") or ():
        share = r["gbps"] * calibrate.BYTE_CONVERSION.get(r["op"], 1.0) / (entry.hbm_tbps * 1e3)
        if round(share, 2) > 0:
            memory.append(r)
        else:
            notes.append(f"memory kernel {r['op']}: {r['gbps']:.3g} GB/s is {share:.2g} of the base's "
                         f"{entry.hbm_tbps:g} TB/s, under 0.005: left out (the base's share kept)")
    kernels["memory_kernels"] = memory
    spec = calibrate.fit_gpu(entry, kernels, (), name)
    measured = list(spec.measured)
    if keep_clock and "sustained_mhz" not in entry.measured:
        measured.remove("sustained_mhz")
    shape = tuple(int(d) for d in sweep.get("sustained_shape") or calibrate.SUSTAINED_SHAPE)
    if sustained and shape != calibrate.SUSTAINED_SHAPE:
        rate = statistics.median(float(r["tflops"]) for r in sustained)
        eff = round(calibrate.gemm_efficiency_for(entry, shape, rate, spec.sustained_mhz), 4)  # type: ignore[arg-type]
        speedup = calibrate.fp8_speedup(kernels.get("gemm", ()))
        fp8 = round(eff * speedup / 2, 4) if speedup is not None and spec.fp8_tflops else spec.fp8_gemm_eff
        spec = replace(spec, gemm_eff=eff, fp8_gemm_eff=fp8)
        notes.append(f"the sustained GEMM is {'x'.join(map(str, shape))}, not 8192^3: gemm_eff fitted at that shape")
    if sustained and not 0.051 < spec.gemm_eff < 1.999:
        notes.append(f"gemm_eff {spec.gemm_eff} is at the fit's bound (0.05-2): the sustained rate is out of the law's "
                     "reach at that clock (a CPU sweep, or the wrong --base?)")
    attention = [r for r in sweep.get("attention") or () if r.get("bwd_us")]
    attention_fitted = False
    if len(attention) >= 2:  # at the sustained clock: the sweep times attention after its sustained GEMM
        rate = spec.tensor_flops("bf16")
        try:
            fwd_eff, fwd_cta = calibrate.attention_fit(calibrate.attention_rows(attention, False), rate)
            bwd_eff, bwd_cta = calibrate.attention_fit(calibrate.attention_rows(attention, True), rate)
        except ValueError:  # fewer than two rows above the kernel's fixed cost
            notes.append(f"fewer than two attention rows take more than a kernel's fixed {GEMM_T0_NS / 1e3:g} "
                         "us: attention kept from the base")
        else:
            spec = replace(spec, attn_fwd_eff=round(fwd_eff, 4), attn_fwd_cta=round(fwd_cta, 2),
                           attn_bwd_eff=round(bwd_eff, 4), attn_bwd_cta=round(bwd_cta, 2))
            measured += ["attn_fwd_eff", "attn_fwd_cta", "attn_bwd_eff", "attn_bwd_cta"]
            attention_fitted = True
    elif sweep.get("attention"):
        notes.append("fewer than two attention rows with a forward and a backward time: attention kept from the base")
    sms = sweep.get("sms")
    if isinstance(sms, int) and sms != entry.sms:
        notes.append(f"the sweep's GPU has {sms} SMs, the base {base_name} {entry.sms}: is --base right?")
    if sweep.get("device") == "cpu":
        notes.append("the sweep ran on a CPU: these figures check the pipeline, they describe no GPU")
    elif sweep.get("quick"):
        notes.append("a --quick sweep (small shapes, few loops): a check of the pipeline, not a calibration")
    measured = list(dict.fromkeys(measured))
    new = ["gemm_eff"] if sustained else []
    if sustained and not keep_clock:
        new.insert(0, "sustained_mhz")
    if sustained and calibrate.fp8_speedup(kernels.get("gemm", ())) is not None and entry.fp8_tflops:
        new.append("fp8_gemm_eff")
    new += (["mem_eff"] if memory else []) + (["attn_fwd_eff", "attn_fwd_cta", "attn_bwd_eff", "attn_bwd_cta"]
                                             if attention_fitted else [])
    origin = ", ".join(f"{prefix}{sweep[k]}" for k, prefix in (("gpu", ""), ("torch", "torch "), ("date", ""))
                       if sweep.get(k))
    calibration = (f"python -m profiling fit-gpu {label} --base {base_name}"
                   f"{' (' + origin + ')' if origin else ''}: fitted {', '.join(new) or 'nothing'}; "
                   f"the other figures from the GPU table's {base_name} entry ({entry.calibration})")
    spec = replace(spec, measured=tuple(measured), calibration=calibration)
    return Fit(spec, entry, base_name, sweep, new, memory, notes)


def spec_text(result: Fit, out_path: str) -> str:
    """The spec file's text, checked by reading it back (a fit the file format refuses is one line)."""
    text = dumps(result.spec, result.base_name)
    try:
        spec_from_dict(json.loads(text), out_path)
    except FormatError as exc:
        raise ConfigError(f"the fitted spec is not a valid GPU spec ({exc}): check the sweep") from None
    return text


def report(result: Fit) -> str:
    """The fitted figures beside the base's, and the GEMM shape law's check against the sweep's bf16 GEMMs."""
    spec, base = result.spec, result.base

    def line(label: str, attr: str, unit: str = "") -> str:
        new, old = getattr(spec, attr), getattr(base, attr)
        tag = "sweep" if attr in result.fitted else ("base, measured" if attr in base.measured else "base")
        change = "" if new == old else f" (base {old:g}{unit})"
        return f"  {label:<28}{new:>10g}{unit}  {tag}{change}"

    sweep = result.sweep
    what = ", ".join(f"{len(sweep.get(k) or [])} {k}" for k in (*SECTIONS, "attention"))
    lines = [f"{spec.name}: fitted over the GPU table's {result.base_name} ({what})",
             line("sustained SM clock", "sustained_mhz", " MHz"), line("bf16 GEMM efficiency", "gemm_eff"),
             line("FP8 GEMM efficiency", "fp8_gemm_eff"), line("attention forward efficiency", "attn_fwd_eff"),
             line("attention forward overhead", "attn_fwd_cta"), line("attention backward efficiency", "attn_bwd_eff"),
             line("attention backward overhead", "attn_bwd_cta")]
    shares, old = dict(spec.mem_eff), dict(base.mem_eff)
    fitted = set(calibrate.memory_efficiencies(result.memory_rows, base.hbm_tbps))
    lines.append(f"  memory-kernel shares of {spec.hbm_tbps:g} TB/s (* from the sweep):")
    cells = [f"{k}{'*' if k in fitted else ''} {v:g}"
             + (f" (base {old[k]:g})" if k in old and old[k] != v else "") for k, v in shares.items()]
    lines += ["    " + ", ".join(cells[i:i + 6]) for i in range(0, len(cells), 6)]
    errors = calibrate.relative_errors(spec, sweep)
    if errors:
        lines.append(f"GEMM shape law at {spec.sustained_mhz:g} MHz against the sweep's bf16 GEMMs:")
        lines.append(f"  {'m':>6} {'n':>6} {'k':>6} {'measured':>10} {'law':>10} {'error':>8}  (TFLOP/s)")
        for (m, n, k), rate, err in errors:
            lines.append(f"  {m:>6} {n:>6} {k:>6} {rate:>10.1f} {rate * (1 + err):>10.1f} {err:>+8.1%}")
        rms = calibrate.rms_log_error(e for _, _, e in errors)
        lines.append(f"  rms log error {rms:.3f} over {len(errors)} shapes (law / measured - 1 per shape)")
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def run(args: Any) -> int:
    """``python -m profiling fit-gpu``: check, fit, write (atomically), print."""
    from utils.io import atomic_write, guard_output

    guard_output(args.output, {"KERNELS.json": args.kernels}, "-o")
    if args.name is not None and (not args.name.strip() or args.name != args.name.strip()
                                  or any(not c.isprintable() for c in args.name)):
        raise ConfigError(f"--name {args.name!r}: expected the --gpu_type name the spec answers to (printable, no "
                          "surrounding blanks)")
    base_entry(args.base)
    sweep = load_sweep(args.kernels)
    result = fit(sweep, args.base, args.name, args.kernels)
    text = spec_text(result, args.output)
    summary = report(result)  # before the file is written: a sweep the report cannot describe writes nothing
    with atomic_write(args.output) as handle:
        handle.write(text)
    print(summary)
    print(f"wrote {args.output} (python -m simulator --gpu_spec {args.output} ...)")
    return 0


__all__ = ["Fit", "base_entry", "check_sweep", "fit", "load_sweep", "report", "run", "spec_text"]

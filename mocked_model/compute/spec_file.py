"""GPU spec files: a GPU's figures as JSON, read by ``--gpu_spec FILE`` and written by ``python -m profiling fit-gpu``.

A measured GPU beats the table: the file's figures replace the table's entry of its name for the run (or describe a
GPU the table lacks).  The format (version 1)::

    {
      "format": "aicb-gpu-spec/1",
      "name": "H200",                       # the --gpu_type it answers to
      "base": "H200",                       # optional: a table entry whose figures fill what the file leaves out
      "peak_tflops": {"bf16": 989.4, "fp8": 1978.9, "fp32": 66.9},    # dense datasheet peaks
      "gemm_efficiency": {"bf16": 0.9329, "fp8": 0.8137},              # main-loop share at the sustained clock
      "clock_mhz": {"spec": 1830, "sustained": 1485},
      "attention": {"forward_efficiency": 0.7165, "forward_cta": 3.19,
                    "backward_efficiency": 0.6253, "backward_cta": 5.06},
      "memory_efficiency": {"copy": 0.81, "add": 0.86, ...},         # per kernel kind (MEMORY_KINDS)
      "hbm_tbps": 4.8, "memory_gib": 141, "sms": 132, "kernel_us": 3.0,
      "nvlink_gbps": 450, "nvlink_efficiency": 0.824,
      "epilogue_overlap": true, "mx_formats": false,
      "source": "...", "calibration": "...", "measured": ["sustained_mhz", ...]
    }

Without ``base`` every figure is required.  A malformed file (not JSON, a missing or unknown field, a rate that is
not a positive finite number, a dtype other than bf16/fp8/fp32) is one :class:`~utils.errors.FormatError` naming
the file and the field.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import fields, replace
from typing import Any

from mocked_model.compute.gpu_table import GPUS, MEMORY_KINDS, GPUSpec, table_entry
from utils.errors import ConfigError, FormatError

FORMAT = "aicb-gpu-spec/1"
DTYPES = ("bf16", "fp8", "fp32")
_GROUPS: dict[str, dict[str, str]] = {
    "peak_tflops": {"bf16": "bf16_tflops", "fp8": "fp8_tflops", "fp32": "fp32_tflops"},
    "gemm_efficiency": {"bf16": "gemm_eff", "fp8": "fp8_gemm_eff"},
    "clock_mhz": {"spec": "spec_mhz", "sustained": "sustained_mhz"},
    "attention": {"forward_efficiency": "attn_fwd_eff", "forward_cta": "attn_fwd_cta",
                  "backward_efficiency": "attn_bwd_eff", "backward_cta": "attn_bwd_cta"},
}
"""JSON object -> its keys -> the :class:`GPUSpec` field each fills."""
_SCALARS = {"hbm_tbps": "hbm_tbps", "memory_gib": "memory_gib", "sms": "sms", "kernel_us": "kernel_us",
            "nvlink_gbps": "nvlink_gbps", "nvlink_efficiency": "nvlink_efficiency"}
_FLAGS = ("epilogue_overlap", "mx_formats")
_TEXT = ("source", "calibration")
_ZERO_OK = {"attn_fwd_cta", "attn_bwd_cta", "kernel_us"}
"""Figures that may be 0 (every other rate must be positive)."""
_TOP = {"format", "name", "base", "memory_efficiency", "measured", *_GROUPS, *_SCALARS, *_FLAGS, *_TEXT}


def _number(path: str, where: str, value: Any, zero_ok: bool = False) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not zero_ok):
        want = "a finite number >= 0" if zero_ok else "a positive finite number"
        raise FormatError(path, f"{where} must be {want}, got {json.dumps(value)}")
    return float(value)


def spec_from_dict(data: Any, path: str = "<gpu spec>") -> GPUSpec:
    """The :class:`GPUSpec` a parsed spec file describes (``path`` names it in errors)."""
    if not isinstance(data, dict):
        raise FormatError(path, f"a GPU spec file holds one JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - _TOP)
    if unknown:
        raise FormatError(path, f"unknown field {unknown[0]!r} (known: {', '.join(sorted(_TOP))})")
    if data.get("format", FORMAT) != FORMAT:
        raise FormatError(path, f"format {data.get('format')!r} is not {FORMAT!r}")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise FormatError(path, "missing field 'name' (the --gpu_type it answers to)")
    values: dict[str, Any] = {"name": name.strip()}
    base: GPUSpec | None = None
    if data.get("base") is not None:
        base = table_entry(str(data["base"]))
        if base is None:
            raise FormatError(path, f"base {data['base']!r} is not in the GPU table ({', '.join(GPUS)})")
    for group, keys in _GROUPS.items():
        given = data.get(group)
        if given is None:
            continue
        if not isinstance(given, dict):
            raise FormatError(path, f"{group} must be an object of {', '.join(keys)}")
        for key, value in given.items():
            if key not in keys:
                what = "dtype" if group in ("peak_tflops", "gemm_efficiency") else "key"
                raise FormatError(path, f"unknown {what} {key!r} in {group} (known: {', '.join(keys)})")
            if value is None and key == "fp8":
                values[keys[key]] = None
                continue
            values[keys[key]] = _number(path, f"{group}.{key}", value, keys[key] in _ZERO_OK)
    for key, attr in _SCALARS.items():
        if key in data:
            values[attr] = _number(path, key, data[key], attr in _ZERO_OK)
    if "sms" in values:
        if values["sms"] != int(values["sms"]):
            raise FormatError(path, f"sms must be a whole number, got {data['sms']}")
        values["sms"] = int(values["sms"])
    for key in _FLAGS:
        if key in data:
            if not isinstance(data[key], bool):
                raise FormatError(path, f"{key} must be true or false, got {json.dumps(data[key])}")
            values[key] = data[key]
    memory = data.get("memory_efficiency")
    if memory is not None:
        if not isinstance(memory, dict):
            raise FormatError(path, "memory_efficiency must be an object of kernel kinds")
        shares = dict(base.mem_eff) if base is not None else {}
        for kind, value in memory.items():
            if kind not in MEMORY_KINDS:
                raise FormatError(path, f"unknown kernel kind {kind!r} in memory_efficiency "
                                  f"(known: {', '.join(MEMORY_KINDS)})")
            shares[kind] = _number(path, f"memory_efficiency.{kind}", value)
        if "stream" not in shares:
            raise FormatError(path, "missing field 'memory_efficiency.stream' (the share of any other kernel)")
        values["mem_eff"] = tuple(sorted(shares.items()))
    values["source"] = str(data.get("source") or (base.source if base else path))
    values["calibration"] = str(data.get("calibration") or f"from the GPU spec file {path}")
    measured = data.get("measured", [])
    if not isinstance(measured, list) or not all(isinstance(m, str) for m in measured):
        raise FormatError(path, "measured must be a list of field names")
    values["measured"] = tuple(measured)
    if base is not None:
        return replace(base, **values)
    missing = [f.name for f in fields(GPUSpec) if f.name not in values and f.name not in ("measured", "fp4_tflops")]
    if missing:
        field = _json_name(missing[0])
        raise FormatError(path, f"missing field {field!r} (give it, or 'base': a GPU of the table to start from)")
    return GPUSpec(**values)


def _json_name(attr: str) -> str:
    for group, keys in _GROUPS.items():
        for key, name in keys.items():
            if name == attr:
                return f"{group}.{key}"
    return {"mem_eff": "memory_efficiency"}.get(attr, attr)


def spec_to_dict(spec: GPUSpec, base: str | None = None) -> dict[str, Any]:
    """The JSON object of ``spec`` (every figure written, so the file stands alone; ``base`` recorded if given)."""
    out: dict[str, Any] = {"format": FORMAT, "name": spec.name}
    if base:
        out["base"] = base
    for group, keys in _GROUPS.items():
        out[group] = {key: getattr(spec, attr) for key, attr in keys.items()}
    for key, attr in _SCALARS.items():
        out[key] = getattr(spec, attr)
    out["memory_efficiency"] = dict(spec.mem_eff)
    for key in _FLAGS:
        out[key] = getattr(spec, key)
    out.update(source=spec.source, calibration=spec.calibration, measured=list(spec.measured))
    return out


def load_gpu_spec(path: str) -> GPUSpec:
    """Read and check a spec file (one :class:`FormatError` naming the file and the field when it is wrong)."""
    from utils.io import not_a_file

    if not os.path.isfile(path):
        raise ConfigError(f"--gpu_spec {path}: {not_a_file(path)}")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except UnicodeDecodeError:
        raise FormatError(path, "not a UTF-8 text file") from None
    except json.JSONDecodeError as exc:
        raise FormatError(path, f"not valid JSON (line {exc.lineno}: {exc.msg})") from None
    return spec_from_dict(data, path)


def dumps(spec: GPUSpec, base: str | None = None) -> str:
    """The spec file's text."""
    return json.dumps(spec_to_dict(spec, base), indent=2) + "\n"

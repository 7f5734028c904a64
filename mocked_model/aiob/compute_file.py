"""AICB's compute-time file (docs/formats.md section 6): reader, writer, and which section times which
computation item.

```
train_iter:<iterations>
<section>:
    time_gpu_max: <us>
    time_gpu_min: <us>
    time_gpu_avg: <us>
```

Times are microseconds.  AICB's sections (``Emb``, ``layernorm``, ``atten_qkv``, ``atten_flash`` or
``atten_core_qk`` + ``atten_core_softmax`` + ``atten_core_contex``, ``atten_linear``, ``layernorm2``,
``mlp_linear_1``, ``mlp_gelu``, ``mlp_linear_2``, ``layernorm_post``, ``logit_time``, ``param_time``)
hold forward times.  Our files add sections AICB's readers ignore or file under "other": backward
times (``bwd_qkv``, ``bwd_core``, ...: names without ``atten`` or ``mlp``, which AICB's reader would
add to its attention or MLP sums), MoE and MLA operations (``moe_*``, ``mla_*``), and per-section
``implementation:`` lines plus top-level ``compute_source:`` / ``device:`` lines.

Without a backward section, a GEMM's input-gradient and weight-gradient passes each take its forward
time (same FLOPs), attention's backward twice its forward (two GEMMs per forward GEMM), and an
elementwise operation's backward its forward time.  AICB instead takes backward = forward for the
whole layer, which undercounts the GEMMs' backward by half.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

from utils.errors import FormatError
from utils.io import atomic_write, read_text

MAX_TIME_US = (2**63 - 1) // 1000
"""The longest compute time a file may give (us): workloads hold times as 64-bit integers of ns, so ``1e300`` was
written into a SimAI file as a 301-digit number."""

# Forward section of each operation (by the suffix of the mocked module's name) and its backward
# section in our files.
FORWARD_SECTIONS: tuple[tuple[str, str, str], ...] = (
    # (name suffix, forward section, backward section)
    ("mlp.shared_experts.linear_fc1", "moe_shared_fc1", "bwd_moe_shared_fc1"),
    ("mlp.shared_experts.activation", "moe_shared_act", "bwd_moe_shared_act"),
    ("mlp.shared_experts.linear_fc2", "moe_shared_fc2", "bwd_moe_shared_fc2"),
    ("mlp.experts.fc1", "moe_expert_fc1", "bwd_moe_expert_fc1"),
    ("mlp.experts.fc2", "moe_expert_fc2", "bwd_moe_expert_fc2"),
    ("mlp.experts", "moe_expert_act", "bwd_moe_expert_act"),
    ("mlp.router", "moe_router", "bwd_moe_router"),
    ("self_attention.linear_q_down_proj", "mla_q_down", "bwd_mla_q_down"),
    ("self_attention.q_layernorm", "mla_q_norm", "bwd_mla_q_norm"),
    ("self_attention.linear_q_up_proj", "mla_q_up", "bwd_mla_q_up"),
    ("self_attention.linear_q_proj", "mla_q_proj", "bwd_mla_q_proj"),
    ("self_attention.linear_kv_down_proj", "mla_kv_down", "bwd_mla_kv_down"),
    ("self_attention.kv_layernorm", "mla_kv_norm", "bwd_mla_kv_norm"),
    ("self_attention.linear_kv_up_proj", "mla_kv_up", "bwd_mla_kv_up"),
    ("self_attention.qk_layernorm", "qk_norm", "bwd_qk_norm"),
    ("self_attention.linear_qkv", "atten_qkv", "bwd_qkv"),
    ("self_attention.rotary_pos_emb", "atten_rope", "bwd_rope"),
    ("self_attention.core_attention", "atten_flash", "bwd_core"),
    ("self_attention.linear_proj", "atten_linear", "bwd_proj"),
    ("self_attn_bda", "residual_attn", "bwd_residual_attn"),
    ("mlp_bda", "residual_mlp", "bwd_residual_mlp"),
    ("input_layernorm", "layernorm", "bwd_norm1"),
    ("pre_mlp_layernorm", "layernorm2", "bwd_norm2"),
    ("mlp.linear_fc1", "mlp_linear_1", "bwd_fc1"),
    ("mlp.activation", "mlp_gelu", "bwd_act"),
    ("mlp.linear_fc2", "mlp_linear_2", "bwd_fc2"),
    ("final_layernorm", "layernorm_post", "bwd_norm_post"),
    ("output_layer", "logit_time", "bwd_logit"),
    ("embedding", "Emb", "bwd_emb"),
    ("loss", "loss", "bwd_loss"),
    ("optimizer", "param_time", "param_time"),
)
CORE_PARTS = ("atten_core_qk", "atten_core_softmax", "atten_core_contex")
"""AICB's split of attention without flash attention; their sum stands for ``atten_flash``."""
AICB_SECTIONS = frozenset({"Emb", "layernorm", "atten_qkv", "atten_flash", "atten_linear", "layernorm2", "mlp_linear_1",
                           "mlp_gelu", "mlp_linear_2", "layernorm_post", "logit_time", "param_time"})
"""The forward sections AICB's AIOB writes for every Megatron model (``atten_flash`` or its core parts): a file
without one that the job needs is truncated or edited, and reading it is an error.  Our other sections
(residual adds, rotary embedding, QK-norm, loss, MoE and MLA operations) time operations AICB's AIOB does not:
an AICB file lacks them, and those operations count 0 ns with a warning, as AICB has no time for them either."""


def sections_of(name: str) -> tuple[str, str] | None:
    """``(forward section, backward section)`` of a mocked module name, or ``None``."""
    for suffix, forward, backward in FORWARD_SECTIONS:
        if name == suffix or name.endswith("." + suffix) or name.endswith(suffix):
            return forward, backward
    return None


@dataclass
class SectionTimes:
    """One section: max, min and average time in microseconds, and which implementation ran."""

    max_us: float
    min_us: float
    avg_us: float
    implementation: str | None = None


@dataclass
class ComputeFile:
    """A compute-time file: measured iterations, top-level labels, and the sections in order."""

    iterations: int = 1
    sections: dict[str, SectionTimes] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    path: str | None = field(default=None, compare=False)
    """The file it was read from (named in errors about its contents)."""
    without_average: dict[str, int] = field(default_factory=dict, compare=False)
    """Sections read without a ``time_gpu_avg`` line (AICB's inference files carry such), by their line."""

    def where(self, section: str) -> str:
        """How an error names a section it lacks: the file and, for a section without an average, its line."""
        name = self.path or "the compute file"
        if section in self.without_average:
            return f"{name}:{self.without_average[section]}: section {section!r} has no time_gpu_avg"
        return f"{name}: no {section!r} section"

    def avg_us(self, section: str) -> float | None:
        """Average time of ``section`` (``atten_flash`` falls back to the sum of AICB's core parts)."""
        entry = self.sections.get(section)
        if entry is not None:
            return entry.avg_us
        if section == "atten_flash" and all(p in self.sections for p in CORE_PARTS):
            return sum(self.sections[p].avg_us for p in CORE_PARTS)
        return None

    # ---- text ---------------------------------------------------------------------------------

    def dumps(self) -> str:
        lines = [f"train_iter:{self.iterations}"]
        lines += [f"{key}: {value}" for key, value in self.labels.items()]
        for name, t in self.sections.items():
            lines.append(f"{name}:")
            lines += [f"    time_gpu_max: {_num(t.max_us)}", f"    time_gpu_min: {_num(t.min_us)}",
                      f"    time_gpu_avg: {_num(t.avg_us)}"]
            if t.implementation:
                lines.append(f"    implementation: {t.implementation}")
        return "\n".join(lines) + "\n"

    def write(self, path: str | os.PathLike) -> None:
        with atomic_write(path) as handle:
            handle.write(self.dumps())

    @classmethod
    def read(cls, path: str | os.PathLike) -> ComputeFile:
        path = os.fspath(path)
        return cls.loads(read_text(path, "an AIOB compute-time file"), path)

    @classmethod
    def loads(cls, text: str, path: str = "<compute file>") -> ComputeFile:
        """Parse a compute file.  Section headers are ``name:`` at the start of a line, their fields
        indented ``key: value`` lines; a section needs ``time_gpu_avg`` (max and min default to it).  A time
        that is not a finite number >= 0 (``nan``, ``inf``, ``-5``) is refused with its line."""
        out = cls(path=path)
        current: str | None = None
        fields: dict[str, dict[str, str]] = {}
        lines: dict[str, int] = {}
        field_lines: dict[tuple[str, str], int] = {}
        seen_iter = False
        for number, raw in enumerate(text.splitlines(), start=1):
            if not raw.strip():
                continue
            indented = raw[:1].isspace()
            key, sep, value = raw.strip().partition(":")
            if not sep or not re.fullmatch(r"[A-Za-z_][\w.\-]*", key):
                raise FormatError(path, f"expected 'name:' or '    key: value', got {raw.strip()!r}", line=number)
            value = value.strip()
            if indented:
                if current is None:
                    raise FormatError(path, f"field {key!r} outside any section", line=number)
                fields[current][key] = value
                field_lines[(current, key)] = number
            elif key == "train_iter":
                try:
                    out.iterations = int(value)
                except ValueError:
                    raise FormatError(path, f"expected an integer count, got {value!r}", line=number,
                                      field="train_iter") from None
                if out.iterations < 0:
                    raise FormatError(path, f"expected a count >= 0, got {value!r}", line=number, field="train_iter")
                seen_iter = True
            elif value:
                out.labels[key] = value
            else:
                current = key
                fields[current] = {}
                lines[current] = number
        if not seen_iter and not fields:
            raise FormatError(path, "no 'train_iter:' line and no sections (expected an AIOB compute-time file)")
        for name, values in fields.items():
            times = {}
            for key in ("time_gpu_avg", "time_gpu_max", "time_gpu_min"):
                if key in values:
                    line = field_lines.get((name, key), lines[name])
                    try:
                        times[key] = float(values[key])
                    except ValueError:
                        raise FormatError(path, f"expected microseconds, got {values[key]!r}", line=line,
                                          field=f"{name}.{key}") from None
                    if not math.isfinite(times[key]) or times[key] < 0:
                        raise FormatError(path, f"expected a time in microseconds (a finite number >= 0), got "
                                          f"{values[key]!r}", line=line, field=f"{name}.{key}")
                    if times[key] > MAX_TIME_US:
                        raise FormatError(path, f"{values[key]} us is beyond the longest time a workload holds "
                                          f"({MAX_TIME_US:,} us: 2^63 ns)", line=line, field=f"{name}.{key}")
            if "time_gpu_avg" not in times:
                out.without_average[name] = lines[name]
                continue  # e.g. AICB's inference files carry other sections
            avg = times["time_gpu_avg"]
            out.sections[name] = SectionTimes(times.get("time_gpu_max", avg), times.get("time_gpu_min", avg), avg,
                                              values.get("implementation"))
        return out


_GPU_TOKEN = re.compile(r"^[A-Z]{1,3}[0-9]{2,4}[A-Z]?$")
"""A GPU model in a name: ``H100``, ``A800``, ``H20``, ``GB200``, ``L40S``, ``MI300X`` (not ``80GB`` or ``HBM3``)."""


def gpu_model(name: str | None) -> str | None:
    """The GPU model a device label or ``--gpu_type`` names (``NVIDIA H100 80GB HBM3`` -> ``H100``,
    ``h100-sxm`` -> ``H100``, ``A100_40G`` -> ``A100``), ``cpu`` for a CPU label (AIOB's ``cpu (x86_64, 8
    threads)``), or None when it names none."""
    if not name:
        return None
    text = str(name).strip()
    if text.lower().startswith("cpu"):
        return "cpu"
    for token in re.split(r"[^A-Za-z0-9]+", text.upper()):
        if _GPU_TOKEN.match(token):
            return token
    return None


def device_mismatch(compute: ComputeFile, gpu_type: str | None, gpu_name: str | None = None) -> str | None:
    """Why ``compute``'s times are not those of ``--gpu_type``: the device it records (its ``device:`` label;
    AIOB writes it, the compute model's estimate names its GPU) is a CPU, or another GPU model.  None when they
    agree, when no ``--gpu_type`` was asked for, or when either side names no model (AICB's files record no
    device: nothing can be said).  ``gpu_name``: how to name the asked GPU (a spec file's GPU name)."""
    label = compute.labels.get("device")
    asked = gpu_model(gpu_name or gpu_type)
    found = gpu_model(label)
    if not gpu_type or asked is None or found is None or asked == found:
        return None
    asked_name = gpu_name or gpu_type
    if found == "cpu":
        detail = str(label)[3:].strip(" ()")
        return f"it was measured on a CPU{f' ({detail})' if detail else ''}, not on --gpu_type {asked_name}"
    if "estimate" in str(label):
        return f"it holds the compute model's estimate for {found}, not for --gpu_type {asked_name}"
    return f"it was measured on {label}, not on --gpu_type {asked_name}"


def device_words(compute: ComputeFile) -> str:
    """How a fill's summary names where a file's times come from: ``measured on <device>``, or that the file
    does not say (AICB's files)."""
    label = compute.labels.get("device")
    if not label:
        return "the file does not record its device (AICB's files do not)"
    return label if "estimate" in label else f"measured on {label}"


def _num(value: float) -> str:
    """A time as written: 3 decimals, none when they are all zero (decided on the rounded text, so that
    873.9996 is written ``874`` and reads back as it is written)."""
    text = f"{float(value):.3f}"
    return text[:-4] if text.endswith(".000") else text

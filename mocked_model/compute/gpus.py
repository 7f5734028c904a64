"""Which GPU a ``--gpu_type`` names: an entry of the table (:mod:`mocked_model.compute.gpu_table`) or a GPU spec
file (:mod:`mocked_model.compute.spec_file`; ``--gpu_spec FILE`` passes the file's path as the type), and the few
figures other layers ask of it."""

from __future__ import annotations

import os

from mocked_model.compute.gpu_table import ALIASES, GPUS, MEMORY_KINDS, SOURCES, GPUSpec, table_entry
from mocked_model.compute.spec_file import load_gpu_spec
from utils.errors import ConfigError

_FILES: dict[tuple[str, float, int], GPUSpec] = {}
"""Spec files read in this process, by (path, modification time, size)."""


def is_spec_file(name: str) -> bool:
    """Whether a ``--gpu_type`` value is a spec file's path (what ``--gpu_spec FILE`` passes on)."""
    return name.lower().endswith(".json")


def gpu_spec(name: str | GPUSpec | None) -> GPUSpec:
    """The table entry for ``--gpu_type`` (case and punctuation ignored: ``h100``, ``H100-SXM``), or the GPU a spec
    file describes when the value is its path."""
    if isinstance(name, GPUSpec):
        return name
    if not name:
        raise ConfigError("the compute model needs --gpu_type (one of " + ", ".join(GPUS) + ") or --gpu_spec FILE")
    if is_spec_file(name):
        from utils.io import not_a_file

        if not os.path.isfile(name):
            raise ConfigError(f"--gpu_spec {name}: {not_a_file(name)}")
        stat = os.stat(name)
        key = (os.path.abspath(name), stat.st_mtime, stat.st_size)
        if key not in _FILES:
            _FILES[key] = load_gpu_spec(name)
        return _FILES[key]
    entry = table_entry(name)
    if entry is None:
        raise ConfigError(f"--gpu_type {name!r} is not in the GPU table (known: {', '.join(GPUS)}; or give --gpu_spec "
                          "FILE)")
    return entry


def known_gpu(name: str | None) -> bool:
    """Whether ``--gpu_type`` names a GPU of the table or a spec file (a malformed file is an error, not False)."""
    if not name:
        return False
    if is_spec_file(name):
        gpu_spec(name)
        return True
    return table_entry(name) is not None


def gpu_label(name: str | None) -> str | None:
    """How to name the GPU in file names and reports: a spec file's ``name``, else ``name`` itself."""
    if name and is_spec_file(name):
        return gpu_spec(name).name
    return name


NCCL_CHANNELS = 16
"""Thread blocks (one SM each) an NCCL ring collective keeps busy on an NVSwitch server: NCCL runs one
block per channel, and Calculon's A100 system description charges an overlapped NVLink collective 15% of
the GPU (``processor_usage`` 0.15 of 108 SMs = 16 SMs; calculon-ai/calculon systems/a100_80g.json)."""


def nccl_sm_share(gpu: GPUSpec | str) -> float:
    """Share of the GPU's SMs a collective running beside a compute kernel takes from it."""
    spec = gpu_spec(gpu)
    return min(NCCL_CHANNELS / spec.sms, 0.5)


__all__ = ["ALIASES", "GPUS", "MEMORY_KINDS", "NCCL_CHANNELS", "SOURCES", "GPUSpec", "gpu_label", "gpu_spec",
           "is_spec_file", "known_gpu", "nccl_sm_share"]

"""What profiling checks before it measures or writes anything.

- Names that come from flags (``--sku``, ``--model_folder``, ``--model_name``, ``--network_device``,
  ``--compute_sku``) are folder names inside the database: a ``/``, ``..`` or an absolute name is refused
  with one line naming the flag (:func:`utils.io.safe_name`), never joined into a path outside it.
- Every file written goes through :func:`utils.io.guard_output` (not an input, not a symbolic link the
  command did not make) and the database's read-merge-write runs under :func:`utils.io.folder_lock`
  (``<database>/.lock``), so two conversions into one database at once keep both's rows.
- Numbers are stored under a name that says what measured them: a CPU run stored under a GPU's name
  (``--network_device h100_dgx``, ``--sku h100``) would be read later as that GPU's, so it is refused
  unless ``--allow_name_mismatch`` says it is meant (a GPU run under another GPU's name likewise).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from utils.errors import ConfigError
from utils.io import folder_lock, guard_output, safe_name

LOCK_NAME = ".lock"
"""The database's lock file (in its root folder): held while a writer reads, merges and rewrites files."""
GPU_WORDS = ("dgx", "hgx", "nvl", "nvlink", "nvswitch", "gpu", "sxm", "cuda", "nccl")
"""Words of a name that say it describes GPUs (besides the GPU table's type names)."""
OVERRIDE_FLAG = "--allow_name_mismatch"


def db_name(value: str, flag: str, root: str | os.PathLike) -> str:
    """``value`` of ``flag`` as a folder name of the database ``root`` (refused when it would leave it)."""
    return safe_name(value, flag, root)


def _gpu_types() -> list[str]:
    from mocked_model.compute import GPUS

    return sorted(GPUS, key=len, reverse=True)


def gpu_named(name: str) -> str | None:
    """The GPU a database name speaks of: a type of the compute model's GPU table written as a word
    (``h100_dgx`` -> ``H100``; ``gb200`` is not ``B200``, ``h200`` is not ``H20``), else a word that only
    GPUs have (``dgx``, ``nvlink``, ``gpu``, ...), else None."""
    text = name.lower()
    for gpu in _gpu_types():
        if re.search(rf"(?<![a-z0-9]){re.escape(gpu.lower())}(?![0-9])", text):
            return gpu
    words = re.split(r"[^a-z0-9]+", text)
    for word in GPU_WORDS:
        if any(w == word or (w.startswith(word) and w[len(word):].isdigit()) for w in words):
            return word
    return None


def gpu_of_device(device: Any) -> str | None:
    """The GPU table's type of a torch device (None for a CPU; the device's own name when the table has
    no such type)."""
    if getattr(device, "type", str(device)).split(":")[0] != "cuda":
        return None
    from profiling.compute import default_sku

    return default_sku(device).upper()


def check_device_name(name: str, flag: str, measured: str | None, allow: bool, what: str = "profile") -> None:
    """Refuse to store numbers measured on ``measured`` (a GPU type, or None for a CPU) under ``name``
    when the name says another device: one line naming ``flag`` and :data:`OVERRIDE_FLAG`."""
    named = gpu_named(name)
    if allow or named is None:
        return
    if measured is None:
        example = "cpu_gloo" if "network" in what else "cpu"
        raise ConfigError(f"{flag} {name} names a GPU ({named}) but this run measures a CPU: the {what} would be read "
                          f"later as {named}'s numbers; name it after what runs (e.g. {example}) or give "
                          f"{OVERRIDE_FLAG} to store it under that name anyway")
    types = {t.upper() for t in _gpu_types()}
    if named.upper() in types and measured.upper() in types:
        a, b = named.upper(), measured.upper()
        if not (a.startswith(b) or b.startswith(a)):  # h100 and h100_pcie are one family: no refusal
            raise ConfigError(f"{flag} {name} names {a} but this run measures {b}: the {what} would be read later as "
                              f"{a}'s numbers; name it after {b} or give {OVERRIDE_FLAG} to store it anyway")


def check_cuda(device: str | None, flag: str = "--device") -> None:
    """Refuse ``cuda`` / ``cuda:N`` on a machine whose torch sees no such GPU (one line)."""
    if device is None or not device.startswith("cuda"):
        return
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(f"{flag} {device}: no CUDA device here (torch {torch.__version__}); use {flag} cpu")
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    if index >= torch.cuda.device_count():
        raise ConfigError(f"{flag} {device}: this machine has {torch.cuda.device_count()} CUDA device(s) "
                          f"(cuda:0 to cuda:{torch.cuda.device_count() - 1})")


def database_files(root: str | os.PathLike) -> list[str]:
    """Every file of the database ``root`` that a reader reads (``network/**`` and ``compute/**``): the
    inputs an output of a command reading the database must not replace."""
    out = []
    for part in ("network", "compute"):
        base = os.path.join(os.fspath(root), part)
        for folder, _, files in os.walk(base):
            out += [os.path.join(folder, f) for f in files]
    return out


def guard_files(paths: Iterable[str], inputs: Mapping[str, Any] | None = None) -> list[str]:
    """:func:`utils.io.guard_output` for each file a database writer will write (the flag named is the
    database's ``-o``)."""
    return [guard_output(path, inputs, "-o/--output") for path in paths]


@contextmanager
def database_lock(root: str | os.PathLike, prog: str) -> Iterator[str]:
    """Hold the database's lock (:data:`LOCK_NAME` in ``root``) around a read-merge-write; a writer that
    has to wait says so in one line."""
    import sys

    def note(text: str) -> None:
        print(f"{prog}: {text}", file=sys.stderr, flush=True)

    with folder_lock(root, LOCK_NAME, note) as path:
        yield path

"""Shared test helpers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Real files written by AICB, SimAI and SimAI's topology generator (copied from the team's shared
# examples so that a clean clone tests against them).
EXAMPLES = ROOT / "tests" / "data" / "examples"


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (Linux: /proc; a zombie waiting for its new parent to reap it does not)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return False


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``python <args>`` from the repository root (or ``cwd``) and capture its output."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, *args], cwd=cwd or ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def run_capped(*args: str, cwd: Path | str, timeout: float = 120, memory_gib: int = 3,
               env: dict | None = None) -> subprocess.CompletedProcess:
    """``python <args>`` in ``cwd`` under an address-space cap of ``memory_gib`` GiB, so that a reader or generator
    that runs away on adversarial input fails its test instead of exhausting the machine."""
    full = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1", **(env or {}))
    limit = memory_gib << 30

    def cap() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return subprocess.run([sys.executable, *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=cap)


@pytest.fixture
def examples() -> Path:
    return EXAMPLES

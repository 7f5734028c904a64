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


@pytest.fixture
def examples() -> Path:
    return EXAMPLES

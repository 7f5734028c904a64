#!/usr/bin/env python3
"""Set up and run the toolkit with nothing but Python (the README's quick start).

    python3 make.py demo    # create .venv, install the toolkit, run the CPU demo
    python3 make.py test    # create .venv, install the toolkit and test tools, run ruff and pytest

The virtual environment is reused while pyproject.toml (and the install command below) is unchanged.
The toolkit is installed in editable mode as a plain path in a ``.pth`` file (setuptools' ``compat``
mode) rather than through setuptools' import finder, which costs every Python start-up in the
environment about 25 ms (measured with ``python -X importtime -c pass``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".installed"
INSTALL = ("-m", "pip", "install", "--quiet", "-e", ".[torch,test]", "--config-settings", "editable_mode=compat")
"""The install command: editable, as a path in a .pth file (no import hook at start-up)."""


def run(*cmd: str | os.PathLike) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], cwd=ROOT, check=True)


def setup() -> None:
    """Create .venv and install the toolkit with its torch and test extras (once per pyproject)."""
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + " ".join(INSTALL).encode()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted and PYTHON.exists():
        return
    if not PYTHON.exists():
        print(f"+ python -m venv {VENV}", flush=True)
        venv.create(VENV, with_pip=True)
    run(PYTHON, *INSTALL)
    STAMP.write_text(wanted)


def demo() -> None:
    setup()
    run(PYTHON, "scripts/demo.py")


def test() -> None:
    setup()
    run(PYTHON, "-m", "ruff", "check", ".")
    run(PYTHON, "-m", "pytest", *sys.argv[2:])


COMMANDS = {"setup": setup, "demo": demo, "test": test}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(f"usage: python3 make.py {{{'|'.join(COMMANDS)}}} [pytest args]")
    try:
        COMMANDS[sys.argv[1]]()
    except subprocess.CalledProcessError as exc:
        sys.exit(exc.returncode)

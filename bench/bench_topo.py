"""Benchmark: generate + read the default AlibabaHPN topology (15360 GPUs, ~2.3 MB), and generate the
default Spectrum-X one (4096 GPUs).  Run by hand from the repository root:

    .venv/bin/python bench/bench_topo.py [--repeat 5]

The bar (issue "Topologies"): AlibabaHPN generate + read together under 2 seconds.  Figures are the
best and the median of ``--repeat`` runs, in milliseconds, measured with time.perf_counter; "CLI" is a
whole ``python -m topo.gen`` process (interpreter start and imports included).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from topo.gen import generate  # noqa: E402
from topo.templates import resolve  # noqa: E402
from topo.topology import read_topology  # noqa: E402


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float, object]:
    """(best ms, median ms, last result) of ``repeat`` calls."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - start) * 1e3)
    return min(times), statistics.median(times), result


def bench_generate(template: str, out: str, repeat: int) -> tuple[str, float, float, str]:
    spec = resolve({"topology": template})
    best, median, (path, layout) = timed(lambda: generate(spec, out), repeat)
    size_mb = os.path.getsize(path) / 1e6
    return f"generate {template} ({spec.gpus} GPUs, {layout.links} links, {size_mb:.2f} MB)", best, median, path


def bench_cli(template: str, out: str, repeat: int) -> tuple[str, float, float]:
    cmd = [sys.executable, "-m", "topo.gen", "-topo", template, "-o", out]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    best, median, _ = timed(lambda: subprocess.run(cmd, check=True, capture_output=True, env=env), repeat)
    return f"CLI: python -m topo.gen -topo {template} (whole process)", best, median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    repeat = parser.parse_args().repeat
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = tmp + os.sep
        *row, hpn = bench_generate("AlibabaHPN", out, repeat)
        rows.append(tuple(row))
        rows.append(("read AlibabaHPN", *timed(lambda: read_topology(hpn), repeat)[:2]))
        spec = resolve({"topology": "AlibabaHPN"})
        rows.append(("generate + read AlibabaHPN (the 2 s bar)",
                     *timed(lambda: read_topology(generate(spec, out)[0]), repeat)[:2]))
        rows.append(("read AlibabaHPN + first path query (builds the router)",
                     *timed(lambda: read_topology(hpn).path(0, spec.gpus - 1), repeat)[:2]))
        rows.append(bench_generate("Spectrum-X", out, repeat)[:3])
        rows.append(bench_cli("AlibabaHPN", out, repeat))
        rows.append(bench_cli("Spectrum-X", out, repeat))
    width = max(len(r[0]) for r in rows)
    print(f"{'step':<{width}}  {'best ms':>9}  {'median ms':>9}   (repeat {repeat}, Python {sys.version.split()[0]})")
    for name, best, median in rows:
        print(f"{name:<{width}}  {best:9.1f}  {median:9.1f}")


if __name__ == "__main__":
    main()

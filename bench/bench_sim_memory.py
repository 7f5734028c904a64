#!/usr/bin/env python3
"""Peak memory of ``python -m simulator`` on a SimAI workload of 10^6 records (the bar: under 300 MB).

    .venv/bin/python bench/bench_sim_memory.py [--records 1000000] [--topo] [--distinct]

The workload is SimAI's own example (tests/data/examples/simai_workload_analytical.txt, 1,789 records,
ga 24) with its micro-batch block repeated until the file holds about ``--records`` records (ga 13,513:
999,975 records, 79 MB of text), run as bench_vs_simai.py runs it: ``-g 9216 -g_p_s 8 -n_p_s 8 -nv 360
-nic 48.5``.  Cases, each a whole process measured with ``os.wait4`` (peak resident set, ru_maxrss):

1. the baseline: the interpreter with the simulator's modules imported and nothing run;
2. ``--model simai`` on the file;
3. ``--model simai`` on the same records with header ``ga: 1`` (the model then finds no repeated
   micro-batch blocks and walks all 10^6 records one by one: the worst case of a repetitive file);
4. with ``--topo``: ``--model topo`` on the file (for information: its schedule has 13,513 micro-batches);
5. with ``--distinct``: the file with every record made different (the forward compute time of record i
   raised by i ns), so that no record is priced once for many: the worst case, which the bar's figure
   is not (for information);
6. with both: ``--model topo`` on that file (issue 28's bar: under 500 MB).

Printed: peak RSS in MiB, the growth over the baseline per million records, and the ratio to the baseline.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "tests" / "data" / "examples" / "simai_workload_analytical.txt"
FLAGS = ["-g", "9216", "-g_p_s", "8", "-n_p_s", "8", "-nv", "360", "-nic", "48.5"]
IMPORTS = "import simulator.cli, simulator.api, simulator.simai.model, simulator.report, workload_generator.simai"
BAR_MB = 300
TOPO_DISTINCT_BAR_MB = 500
"""Issue 28's bar for ``--model topo`` on a file of 10^6 records that all differ."""


def write_workload(path: Path, records: int, ga_header: int | None = None) -> int:
    """SimAI's example with its micro-batch block repeated to about ``records`` records, written line by
    line (never held whole); returns the record count.  ``ga_header`` overrides the header's ga."""
    lines = EXAMPLE.read_text().splitlines()
    header, body = lines[0], lines[2:]
    # 6 optimizer records, 24 blocks of 74 records (the first differs, the other 23 alike), 7 at the end
    head, first, block, tail = body[:6], body[6:80], body[80:154], body[1782:]
    assert all(body[80 + 74 * k:154 + 74 * k] == block for k in range(23)), "the example changed"
    ga = max(2, (records - len(head) - len(tail)) // len(block))
    count = len(head) + len(first) + len(block) * (ga - 1) + len(tail)
    header = re.sub(r"\bga: \d+", f"ga: {ga if ga_header is None else ga_header}", header)
    block_text = "\n".join(block) + "\n"
    with open(path, "w") as out:
        out.write(f"{header}\n{count}\n" + "\n".join(head + first) + "\n")
        for _ in range(ga - 1):
            out.write(block_text)
        out.write("\n".join(tail) + "\n")
    return count


def make_distinct(source: Path, path: Path) -> None:
    """``source`` with record i's forward compute time (field 3) raised by i ns: no two records alike."""
    with open(source) as src, open(path, "w") as out:
        out.write(src.readline())
        out.write(src.readline())
        for i, line in enumerate(src):
            fields = line.split()
            fields[2] = str(int(fields[2]) + i)
            out.write("\t".join(fields) + "\n")


def peak(command: list[str], env: dict, cwd: str) -> tuple[int, float]:
    """(peak RSS bytes, wall s) of one whole process."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(command)}")
    return usage.ru_maxrss * 1024, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--topo", action="store_true", help="also run --model topo on the file")
    parser.add_argument("--distinct", action="store_true",
                        help="also run --model simai on the file with every record different (slow: minutes)")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        repeated, flat = folder / "example_1m.txt", folder / "example_1m_ga1.txt"
        count = write_workload(repeated, args.records)
        write_workload(flat, args.records, ga_header=1)
        base, _ = peak([sys.executable, "-c", IMPORTS], env, tmp)
        print(f"{count:,} records ({repeated.stat().st_size / 1e6:.0f} MB of text); baseline (imports only): "
              f"{base / 2**20:.0f} MiB")
        cases = [("--model simai", repeated, ["--model", "simai", *FLAGS]),
                 ("--model simai, header ga 1", flat, ["--model", "simai", *FLAGS])]
        if args.topo:
            cases.append(("--model topo", repeated, ["--model", "topo", *FLAGS[:6]]))
        if args.distinct:
            distinct = folder / "example_1m_distinct.txt"
            make_distinct(repeated, distinct)
            cases.append(("--model simai, every record different", distinct, ["--model", "simai", *FLAGS]))
            if args.topo:  # issue 28's bar: --model topo on 10^6 distinct records within 500 MB
                cases.append(("--model topo, every record different", distinct, ["--model", "topo", *FLAGS[:6]]))
        for name, path, flags in cases:
            rss, wall = peak([sys.executable, "-m", "simulator", "-w", str(path), *flags, "-r", str(folder / "out-")],
                             env, tmp)
            per_million = (rss - base) / count * 1e6
            verdict = f"; bar {BAR_MB} MB: {'met' if rss < BAR_MB * 1e6 else 'NOT met'}" if "simai" in name else ""
            if "different" in name:
                bar = TOPO_DISTINCT_BAR_MB if "topo" in name else BAR_MB
                verdict = f"; {'under' if rss < bar * 1e6 else 'over'} {bar} MB"
            print(f"{name}: peak {rss / 2**20:.0f} MiB ({rss / 1e6:.0f} MB), {per_million / 2**20:.1f} MiB per million "
                  f"records over the baseline, {rss / base:.1f}x the baseline; wall {wall:.1f} s{verdict}")


if __name__ == "__main__":
    main()

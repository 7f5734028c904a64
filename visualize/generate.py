"""AICB's visualizer entry, on our report: one self-contained HTML page per file.

    python -m visualize.generate results/comm_logs/megatron_gpt_13B_8n_log.csv      # a replay log
    python -m visualize.generate local_megatron_workload.csv only_workload          # a workload CSV

The page goes where AICB puts it, ``results/visual_output/<file stem>.html`` (``-o`` picks another
path).  It is ``python -m log_analyzer report``'s page (AICB's needs pyecharts; ours only the core
dependencies); the second argument ``only_workload`` is accepted for AICB's spelling, the kind of file
being read from its header either way.  ``aicb.py --enable_visual`` writes the same page after a run.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

PROG = "visualize.generate"


def visual_path(source: str, output_dir: str | None = None) -> str:
    """AICB's place for the page of ``source``: ``<output_dir or results>/visual_output/<stem>.html``."""
    stem = os.path.splitext(os.path.basename(source))[0]
    return os.path.join(output_dir or "results", "visual_output", stem + ".html")


def write_visual(source: str, output: str | None = None, output_dir: str | None = None) -> str:
    """Write the HTML page of ``source`` (a replay log or a workload CSV); returns its path.  Raises
    :class:`utils.errors.UserError` for a missing or malformed file."""
    from log_analyzer.inputs import read_paths
    from log_analyzer.report import build_report, write_report
    from utils.io import guard_output

    path = output if output is not None else visual_path(source, output_dir)
    inputs = {"the input file": read_paths(source)}
    guard_output(path, inputs, "-o/--output" if output is not None else "the page")  # before the page is built
    return write_report(build_report(source), path, inputs)


def main(argv: Sequence[str] | None = None) -> int:
    from utils.cli import CliParser

    parser = CliParser(prog=PROG, description="Write one HTML page of a replay log or a workload CSV "
                                              "(AICB's visualize.generate).")
    parser.add_argument("file", help="a replay log (*_log.csv) or a workload CSV")
    parser.add_argument("mode", nargs="?", choices=("only_workload",),
                        help="AICB's marker for a workload file (the kind is read from the file either way)")
    parser.add_argument("-o", "--output", help="the HTML path (default results/visual_output/<stem>.html)")
    args = parser.parse_args(argv)
    from log_analyzer.log import warning_lines

    with warning_lines(PROG):
        path = write_visual(args.file, args.output)
    print(f"visual output: {path}")
    return 0


if __name__ == "__main__":
    from utils.cli import run_main

    run_main(lambda: main(sys.argv[1:]), PROG)

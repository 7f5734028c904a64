"""``python -m log_analyzer``: reports, plots and comparisons of replay logs, workloads and simulations.

    python -m log_analyzer report LOG.csv [--sim RESULT.csv] [-o report.html] [--nominal_gbps 360] [--topology FILE]
    python -m log_analyzer report WORKLOAD.csv -o workload.html       # what a workload would send
    python -m log_analyzer report run1-EndToEnd.csv -o sim.html       # a simulation alone
    python -m log_analyzer plot LOG.csv [--sim RESULT.csv] -o plots/ [--format svg]
    python -m log_analyzer compare A_log.csv B_log.csv [--labels before after] [-o diff.csv] [--html diff.html]

The kind of each file is read from its header.  Bad inputs end with one line ``log_analyzer: error: ...``
and exit status 2, before anything is written; outputs are written atomically.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from utils.cli import CliParser, run_main
from utils.errors import ConfigError, UserError

PROG = "log_analyzer"
MAX_NOMINAL_GBPS = 1e6
"""The largest ``--nominal_gbps`` taken (GB/s): a reference line beyond any link is a typo."""


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a bandwidth in GB/s, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a bandwidth > 0 GB/s, got {text!r}")
    if not value <= MAX_NOMINAL_GBPS:  # inf too: 1e308 GB/s overflowed the plot's axis ticks (a traceback)
        raise argparse.ArgumentTypeError(f"expected a bandwidth up to {MAX_NOMINAL_GBPS:g} GB/s (a petabyte a second, "
                                         f"beyond any link), got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an iteration number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an iteration number >= 0, got {text!r}")
    return value


def _reference_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nominal_gbps", "--nominal-gbps", dest="nominal_gbps", type=_positive, metavar="GBPS",
                        help="nominal link bandwidth in GB/s (1e9 B/s), drawn as a reference line on the bandwidth plot")
    parser.add_argument("--topology", "-t", metavar="FILE",
                        help="a SimAI topology file: its per-GPU NVLink and NIC rates are drawn as reference lines")
    parser.add_argument("--format", dest="image_format", choices=("png", "svg"), default="png",
                        help="image format of the plots (default: png)")


def build_parser() -> CliParser:
    parser = CliParser(prog=PROG, description="Reports, plots and comparisons of AICB replay logs, workload CSVs and "
                                              "simulator results (python -m log_analyzer COMMAND --help).")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=CliParser)
    report = commands.add_parser("report", help="one self-contained HTML report of a log, a workload or a simulation")
    report.add_argument("input", help="a replay log (*_log.csv), an AICB workload CSV, or a simulator result CSV")
    report.add_argument("--sim", metavar="RESULT", help="a simulator result (<prefix>EndToEnd.csv or our "
                                                        "simai_layers.csv / topo_*.csv) shown beside the input")
    report.add_argument("-o", "--output", metavar="HTML", help="the report (default: <input>_report.html beside it)")
    report.add_argument("--iteration", type=_non_negative_int, help="the iteration the timeline shows (default: the "
                                                                    "last completed)")
    report.add_argument("--title", help="the report's title")
    _reference_flags(report)
    plot = commands.add_parser("plot", help="write every plot of a log, a workload or a simulation as PNG or SVG")
    plot.add_argument("input", help="a replay log, an AICB workload CSV, or a simulator result CSV")
    plot.add_argument("--sim", metavar="RESULT", help="a simulator result whose plots are written too")
    plot.add_argument("-o", "--output", metavar="DIR", required=True, help="folder for the image files")
    plot.add_argument("--iteration", type=_non_negative_int, help="the iteration the timeline shows")
    _reference_flags(plot)
    compare = commands.add_parser("compare", help="two replay logs side by side: time and busbw per (type, group, "
                                                  "size) with the change")
    compare.add_argument("a", help="the first replay log (before)")
    compare.add_argument("b", help="the second replay log (after)")
    compare.add_argument("--labels", nargs=2, metavar=("A", "B"), default=("A", "B"), help="names of the two logs")
    compare.add_argument("-o", "--output", metavar="CSV", help="also write the comparison table as CSV")
    compare.add_argument("--html", metavar="HTML", help="also write a self-contained HTML page of the comparison")
    _reference_flags(compare)
    return parser


def nominal_from(args: argparse.Namespace) -> dict[str, float] | None:
    """Reference bandwidths in GB/s: ``--nominal_gbps`` and the topology's per-GPU NVLink and NIC rates."""
    lines: dict[str, float] = {}
    if args.topology:
        from topo.topology import read_topology
        from utils.units import GB

        topo = read_topology(args.topology)
        if topo.nvlink_bytes_per_s > 0:
            lines[f"NVLink ({topo.gpu_type or 'topology'})"] = topo.nvlink_bytes_per_s / GB
        if topo.nic_bytes_per_s > 0:
            lines["NIC (topology)"] = topo.nic_bytes_per_s / GB
    if args.nominal_gbps:
        lines["nominal"] = float(args.nominal_gbps)
    return lines or None


def _write(contents: dict[str, str | bytes]) -> list[str]:
    """Write every file atomically, after all were built; an OS error becomes a one-line error."""
    from utils.io import atomic_write

    written = []
    for path, data in contents.items():
        try:
            with atomic_write(path, "wb" if isinstance(data, bytes) else "w") as handle:
                handle.write(data)
        except OSError as exc:
            raise UserError(f"{path}: cannot write: {exc.strerror or exc}") from None
        written.append(path)
    return written


def check_not_input(outputs: dict, inputs: dict) -> None:
    from utils.io import check_not_input as check

    check(outputs, inputs)


def _guard(outputs: dict[str, str | None], inputs: dict[str, str | None]) -> None:
    """Every output checked before anything is read or written: not a folder, not a symbolic link, not
    one of the files the inputs are read from (a log's detail file and a simulation's siblings included)."""
    from log_analyzer.inputs import read_paths
    from utils.io import guard_output

    for flag, path in outputs.items():
        if path:
            guard_output(path, {name: read_paths(value) for name, value in inputs.items()}, flag)


def _check_output(path: str, folder: bool = False, flag: str = "-o/--output") -> None:
    """``flag``: the flag that named ``path``, which the error names (compare's --html too)."""
    if not path:  # an empty -o would write beside the input or into the working folder without a word
        raise ConfigError(f"{flag}: empty path (give a {'folder' if folder else 'file'} name)")
    if folder:
        if os.path.exists(path) and not os.path.isdir(path):
            raise ConfigError(f"{flag} {path}: exists and is not a folder")
    elif os.path.isdir(path):
        raise ConfigError(f"{flag} {path}: is a folder (give a file name)")


def cmd_report(args: argparse.Namespace) -> int:
    from log_analyzer.report import build_report

    output = args.output if args.output is not None else os.path.splitext(args.input)[0] + "_report.html"
    _check_output(output)
    _guard({"-o/--output": output}, {"the input file": args.input, "--sim": args.sim, "--topology": args.topology})
    sim = None
    if args.sim:
        from log_analyzer.inputs import load_input

        sim = load_input(args.sim, ("sim",)).data
    text = build_report(args.input, sim=sim, nominal=nominal_from(args), image_format=args.image_format,
                        iteration=args.iteration, title=args.title)
    _write({output: text})
    print(f"wrote {output}")
    return 0


def plot_files(input_path: str, sim_path: str | None, folder: str, nominal: dict[str, float] | None,
               image_format: str = "png", iteration: int | None = None) -> dict[str, bytes]:
    """Every plot of the input (and of the simulation) rendered: file path -> image bytes."""
    from log_analyzer import plots
    from log_analyzer.inputs import load_input

    loaded = load_input(input_path)
    figures = {}
    if loaded.kind == "log":
        log = loaded.data
        if iteration is not None and not (log.items["iteration"] == iteration).any():
            raise ConfigError(f"--iteration {iteration}: {input_path} has no operations in iteration {iteration}")
        figures.update({"busbw_vs_size": plots.busbw_vs_size(log, nominal), "iteration_times": plots.iteration_times(log),
                        "timeline": plots.timeline(log, iteration), "time_share": plots.time_share(log),
                        "type_share": plots.type_share(log), "size_cdf": plots.size_cdf(log)})
    elif loaded.kind == "workload":
        figures.update({"workload_sizes": plots.workload_sizes(loaded.data), "type_share": plots.type_share(loaded.data),
                        "size_cdf": plots.size_cdf(loaded.data)})
    sims = [loaded.data] if loaded.kind == "sim" else []
    if sim_path:
        sims.append(load_input(sim_path, ("sim",)).data)
    for i, sim in enumerate(sims):
        tag = "" if i == 0 else "_2"
        figures[f"sim_breakdown{tag}"] = plots.sim_breakdown(sim)
        figures[f"sim_layers{tag}"] = plots.sim_layers(sim)
    return {os.path.join(folder, f"{name}.{image_format}"): plots.render(fig, image_format)
            for name, fig in figures.items()}


def cmd_plot(args: argparse.Namespace) -> int:
    _check_output(args.output, folder=True)
    files = plot_files(args.input, args.sim, args.output, nominal_from(args), args.image_format, args.iteration)
    for path in files:
        _guard({"-o/--output": path}, {"the input file": args.input, "--sim": args.sim, "--topology": args.topology})
    for path in _write(dict(files)):
        print(f"wrote {path}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from log_analyzer.compare import compare_csv_text, compare_html, compare_iterations, compare_logs, format_compare
    from log_analyzer.inputs import load_input

    for flag, path in (("-o/--output", args.output), ("--html", args.html)):
        if path is not None:
            if not path:
                raise ConfigError(f"{flag}: empty path (give a file name)")
            _check_output(path, flag=flag)
    if args.output and args.html and os.path.realpath(args.output) == os.path.realpath(args.html):
        raise ConfigError(f"-o/--output {args.output} and --html {args.html} are one file: the page would replace the "
                          "table (give two names)")
    if any(not label.strip() for label in args.labels):
        raise ConfigError(f"--labels {' '.join(repr(v) for v in args.labels)}: expected two names (not empty)")
    _guard({"-o/--output": args.output, "--html": args.html}, {"the first log": args.a, "the second log": args.b,
                                                               "--topology": args.topology})
    a = load_input(args.a, ("log",)).data
    b = load_input(args.b, ("log",)).data
    labels = tuple(args.labels)
    table = compare_logs(a, b)
    contents: dict[str, str | bytes] = {}
    if args.output:
        contents[args.output] = compare_csv_text(table)
    if args.html:
        contents[args.html] = compare_html(a, b, labels, nominal_from(args), args.image_format)
    print(format_compare(table, compare_iterations(a, b), labels))
    for path in _write(contents):
        print(f"wrote {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from log_analyzer.log import warning_lines

    args = build_parser().parse_args(argv)
    with warning_lines(PROG):  # a detail file left out: one line on stderr, and the work goes on
        return {"report": cmd_report, "plot": cmd_plot, "compare": cmd_compare}[args.command](args)


def cli() -> None:
    """The console entry point (pyproject.toml's [project.scripts])."""
    run_main(lambda: main(sys.argv[1:]), PROG)


if __name__ == "__main__":
    cli()

"""``python -m simulator``: simulate one training iteration of a SimAI workload file.

SimAI-analytical's flags, same names (also with ``--long_names`` and ``--long-names``)::

    python -m simulator -w workload.txt -g 9216 -g_p_s 8 -n_p_s 8 -nv 360 -nic 48.5 -r run1-

Writes ``results/<prefix>EndToEnd.csv`` (SimAI's layout) and ``results/<prefix>simai_layers.csv``
(ours, microseconds), prints a summary, and warnings on stderr.  Bad inputs end with one line
``simulator: error: ...`` and exit status 2, before any file is written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from utils.cli import CliParser
from utils.errors import ConfigError

PROG = "simulator"
MODEL_CHOICES = ("simai", "topo")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def build_parser() -> CliParser:
    """The argument parser (SimAI-analytical's flag names)."""
    p = CliParser(prog=PROG, allow_abbrev=False,
                  description="Simulate one training iteration of a SimAI workload (times in microseconds).")
    p.add_argument("-w", "--workload", required=True, metavar="FILE", help="SimAI workload file (.txt)")
    p.add_argument("--model", choices=MODEL_CHOICES, default="simai",
                   help="simai: SimAI 1.7's analytical model (SIMAI_ANALYTICAL.md); topo: ours (SIM_MODEL.md)")
    p.add_argument("-g", "--gpus", type=_positive_int, metavar="N", help="number of GPUs (default: the workload's all_gpus)")
    p.add_argument("-g_p_s", "--gpus_per_server", "--gpus-per-server", type=_positive_int, metavar="N", help="GPUs per server")
    p.add_argument("-n_p_s", "--nics_per_server", "--nics-per-server", type=_positive_int, metavar="N", help="NICs per server")
    p.add_argument("-nv", "--nvlink_bw", "--nvlink-bw", type=_float, metavar="GIBPS",
                   help="NVLink busbw in GiB/s (default by GPU type; <= 0 also means the default)")
    p.add_argument("-nic", "--nic_busbw", "--nic-busbw", type=_float, metavar="GIBPS",
                   help="busbw of one NIC in GiB/s (default by NIC type; <= 0 also means the default)")
    p.add_argument("-g_type", "--gpu_type", "--gpu-type", metavar="TYPE", help="H100, H20, H800, A100 (default) or A800")
    p.add_argument("-nic_t", "--nic_type", "--nic-type", metavar="TYPE", help="cx6, cx7 (default) or bf3")
    for short, name, default in (("-dp_o", "dp", 0.0), ("-tp_o", "tp", 0.0), ("-ep_o", "ep", 0.0), ("-pp_o", "pp", 1.0)):
        p.add_argument(short, f"--{name}_overlap_ratio", f"--{name}-overlap-ratio", dest=f"{name}_overlap",
                       type=_float, metavar="RATIO", default=default,
                       help=f"{name.upper()} overlap ratio in [0, 1] (default {default})")
    p.add_argument("--pp_busbw", "--pp-busbw", type=_float, metavar="GIBPS",
                   help="busbw of the pipeline send in GiB/s for the PP exposed term (default: the DP group's "
                        "inter-node busbw; SimAI 1.7 divides by -pp_o there, a bug)")
    p.add_argument("-r", "--result", metavar="PREFIX",
                   help="result path prefix, as SimAI's -r (ending in '/': a folder; the name is then the workload's stem)")
    p.add_argument("-r_f", "--result_folder", "--result-folder", metavar="DIR",
                   help="folder for the result files (default results/ for a prefix without a folder)")
    p.add_argument("-v", "--visual", action="store_true", help="accepted for SimAI compatibility; no HTML chart")
    p.add_argument("-q", "--quiet", action="store_true", help="do not print the summary")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags, simulate, write the result files, print the summary.  Returns the exit status."""
    args = build_parser().parse_args(argv)
    # Heavy imports after the flags are known to be well-formed.
    from simulator import api, report
    from simulator.options import SimAIOptions

    if args.model not in api.MODELS:
        raise ConfigError(f"--model {args.model} is not available in this version (available: {', '.join(api.MODELS)})")
    options = SimAIOptions(
        gpus=args.gpus, gpus_per_server=args.gpus_per_server, nics_per_server=args.nics_per_server,
        nvlink_bw=args.nvlink_bw, nic_busbw=args.nic_busbw, gpu_type=args.gpu_type, nic_type=args.nic_type,
        dp_overlap=args.dp_overlap, tp_overlap=args.tp_overlap, ep_overlap=args.ep_overlap,
        pp_overlap=args.pp_overlap, pp_busbw=args.pp_busbw,
    )
    result = api.simulate(args.workload, options, model=args.model)
    if args.visual:
        result.warnings.append("-v/--visual is accepted for SimAI compatibility; no HTML chart is written")
    prefix = report.output_prefix(args.result, args.result_folder, args.workload)
    paths = report.write_results(result, prefix)
    for message in result.warnings:
        print(f"{PROG}: warning: {message}", file=sys.stderr)
    if not args.quiet:
        print(report.summary_text(result))
        print(f"wrote {', '.join(paths)}")
    return 0

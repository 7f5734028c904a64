"""``python -m simulator``: simulate one training iteration of a SimAI workload file.

SimAI-analytical's flags, same names (also with ``--long_names`` and ``--long-names``)::

    python -m simulator -w workload.txt -g 9216 -g_p_s 8 -n_p_s 8 -nv 360 -nic 48.5 -r run1-
    python -m simulator -w workload.txt -t Spectrum-X_128g_8gps_400Gbps_H100 --trace it.json --plot it.png

``--model simai`` (the default without ``-t``) is SimAI 1.7's analytical model; ``--model topo``
(the default with ``-t/--topology``) is ours: NCCL's costs over the topology, the real pipeline
schedule, overlap from dependencies.  Without ``-t``, ``--model topo`` derives a two-tier fabric from
``-g_p_s`` (required), ``-n_p_s``, ``-nv`` and ``-nic``.

Writes ``results/<prefix>EndToEnd.csv`` (SimAI's layout) and ``results/<prefix>simai_layers.csv``
(simai) or ``<prefix>topo_stages.csv``, ``topo_layers.csv``, ``topo_collectives.csv`` (topo), and the
``--trace`` JSON and ``--plot`` PNG when asked; prints a summary, and warnings on stderr.  Bad inputs
end with one line ``simulator: error: ...`` and exit status 2, before any file is written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from utils.cli import CliParser, fraction, non_negative, number, positive_int, positive_number
from utils.errors import ConfigError

PROG = "simulator"
MODEL_CHOICES = ("simai", "topo")


def build_parser() -> CliParser:
    """The argument parser (SimAI-analytical's flag names)."""
    p = CliParser(prog=PROG, allow_abbrev=False,
                  description="Simulate one training iteration of a SimAI workload (times in microseconds).")
    p.add_argument("-w", "--workload", required=True, metavar="FILE", help="SimAI workload file (.txt)")
    p.add_argument("--model", choices=MODEL_CHOICES, default=None,
                   help="simai: SimAI 1.7's analytical model (SIMAI_ANALYTICAL.md); topo: ours (SIM_MODEL.md). "
                        "Default: topo with -t, else simai")
    p.add_argument("-t", "--topology", metavar="FILE",
                   help="SimAI topology file (python -m topo.gen); implies --model topo")
    p.add_argument("-g", "--gpus", type=positive_int, metavar="N", help="number of GPUs (default: the workload's all_gpus)")
    p.add_argument("-g_p_s", "--gpus_per_server", "--gpus-per-server", type=positive_int, metavar="N", help="GPUs per server")
    p.add_argument("-n_p_s", "--nics_per_server", "--nics-per-server", type=positive_int, metavar="N", help="NICs per server")
    p.add_argument("-nv", "--nvlink_bw", "--nvlink-bw", type=number, metavar="GIBPS",
                   help="NVLink busbw in GiB/s (default by GPU type; <= 0 also means the default)")
    p.add_argument("-nic", "--nic_busbw", "--nic-busbw", type=number, metavar="GIBPS",
                   help="busbw of one NIC in GiB/s (default by NIC type; <= 0 also means the default)")
    p.add_argument("-g_type", "--gpu_type", "--gpu-type", metavar="TYPE", help="H100, H20, H800, A100 (default) or A800")
    p.add_argument("-nic_t", "--nic_type", "--nic-type", metavar="TYPE", help="cx6, cx7 (default) or bf3")
    for short, name, default in (("-dp_o", "dp", 0.0), ("-tp_o", "tp", 0.0), ("-ep_o", "ep", 0.0), ("-pp_o", "pp", 1.0)):
        p.add_argument(short, f"--{name}_overlap_ratio", f"--{name}-overlap-ratio", dest=f"{name}_overlap",
                       type=number, metavar="RATIO", default=default,
                       help=f"{name.upper()} overlap ratio in [0, 1] (default {default})")
    p.add_argument("--pp_busbw", "--pp-busbw", type=number, metavar="GIBPS",
                   help="busbw of the pipeline send in GiB/s for the PP exposed term (default: the DP group's "
                        "inter-node busbw; SimAI 1.7 divides by -pp_o there, a bug)")
    p.add_argument("-r", "--result", metavar="PREFIX",
                   help="result path prefix, as SimAI's -r (ending in '/': a folder; the name is then the workload's stem)")
    p.add_argument("-r_f", "--result_folder", "--result-folder", metavar="DIR",
                   help="folder for the result files (default results/ for a prefix without a folder)")
    p.add_argument("-v", "--visual", action="store_true", help="accepted for SimAI compatibility; no HTML chart")
    p.add_argument("--trace", metavar="FILE.json", help="topo: write a Chrome/Perfetto trace of the iteration")
    p.add_argument("--plot", metavar="FILE.png", help="write a breakdown plot (compute, exposed comm, bubble)")
    topo = p.add_argument_group("--model topo")
    topo.add_argument("--overlap_grad_reduce", "--overlap-grad-reduce", action=argparse.BooleanOptionalAction,
                      default=None, help="overlap DP/EP gradient reduction with backward as buckets complete "
                                         "(default on for SimAI files)")
    topo.add_argument("--tp_comm_overlap", "--tp-comm-overlap", action="store_true",
                      help="TP collectives run beside the compute (Megatron's --tp-comm-overlap)")
    topo.add_argument("--nvlink_efficiency", "--nvlink-efficiency", type=fraction, metavar="F",
                      help="busbw / nominal NVLink rate (default 0.824 with -t, 1 for the derived fabric)")
    topo.add_argument("--nic_efficiency", "--nic-efficiency", type=fraction, metavar="F",
                      help="busbw / nominal NIC rate (default 0.97 with -t, 1 for the derived fabric)")
    topo.add_argument("--latency_scale", "--latency-scale", type=non_negative, metavar="X", default=1.0,
                      help="multiply every latency term of NCCL's model (0: bandwidth only; default 1)")
    topo.add_argument("--peak_tflops", "--peak-tflops", type=positive_number, metavar="TFLOPS",
                      help="dense peak TFLOP/s per GPU for the MFU (default by GPU type)")
    p.add_argument("-q", "--quiet", action="store_true", help="do not print the summary")
    return p


SIMAI_ONLY = (("dp_overlap", "-dp_o", 0.0), ("tp_overlap", "-tp_o", 0.0), ("ep_overlap", "-ep_o", 0.0),
              ("pp_overlap", "-pp_o", 1.0), ("pp_busbw", "--pp_busbw", None))
TOPO_ONLY = (("topology", "-t/--topology", None), ("trace", "--trace", None),
             ("overlap_grad_reduce", "--overlap_grad_reduce", None), ("tp_comm_overlap", "--tp_comm_overlap", False),
             ("nvlink_efficiency", "--nvlink_efficiency", None), ("nic_efficiency", "--nic_efficiency", None),
             ("latency_scale", "--latency_scale", 1.0), ("peak_tflops", "--peak_tflops", None))


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags, simulate, write the result files, print the summary.  Returns the exit status."""
    args = build_parser().parse_args(argv)
    # Heavy imports after the flags are known to be well-formed.
    from simulator import api, report
    from simulator.options import SimAIOptions, TopoOptions

    model = args.model or ("topo" if args.topology else "simai")
    if model not in api.MODELS:
        raise ConfigError(f"--model {model} is not available in this version (available: {', '.join(api.MODELS)})")
    notes: list[str] = []
    if model == "simai":
        given = [flag for name, flag, default in TOPO_ONLY if getattr(args, name) != default]
        if given:
            raise ConfigError(f"{', '.join(given)} need(s) --model topo (SimAI's analytical model has no topology "
                              "or timeline)")
        options = SimAIOptions(
            gpus=args.gpus, gpus_per_server=args.gpus_per_server, nics_per_server=args.nics_per_server,
            nvlink_bw=args.nvlink_bw, nic_busbw=args.nic_busbw, gpu_type=args.gpu_type, nic_type=args.nic_type,
            dp_overlap=args.dp_overlap, tp_overlap=args.tp_overlap, ep_overlap=args.ep_overlap,
            pp_overlap=args.pp_overlap, pp_busbw=args.pp_busbw,
        )
    else:
        for name, flag, default in SIMAI_ONLY:
            if getattr(args, name) != default:
                notes.append(f"{flag} is SimAI's knob and is ignored by --model topo (overlap comes from the schedule)")
        options = TopoOptions(
            gpus=args.gpus, gpus_per_server=args.gpus_per_server, nics_per_server=args.nics_per_server,
            nvlink_bw=args.nvlink_bw, nic_busbw=args.nic_busbw, gpu_type=args.gpu_type, nic_type=args.nic_type,
            nvlink_efficiency=args.nvlink_efficiency, nic_efficiency=args.nic_efficiency,
            latency_scale=args.latency_scale, overlap_grad_reduce=args.overlap_grad_reduce,
            tp_comm_overlap=args.tp_comm_overlap, peak_tflops=args.peak_tflops,
        )
    result = api.simulate(args.workload, args.topology, options, model=model)
    result.warnings.extend(notes)
    if args.visual:
        result.warnings.append("-v/--visual is accepted for SimAI compatibility; no HTML chart is written (see --plot)")
    prefix = report.output_prefix(args.result, args.result_folder, args.workload)
    contents: dict[str, str | bytes] = dict(report.result_texts(result, prefix))
    if args.trace:
        from simulator.trace import trace_text

        contents[args.trace] = trace_text(result)
    if args.plot:
        from simulator.plot import plot_png

        contents[args.plot] = plot_png(result)
    paths = report.write_files(contents)
    for message in result.warnings:
        print(f"{PROG}: warning: {message}", file=sys.stderr)
    if not args.quiet:
        print(report.summary_text(result))
        print(f"wrote {', '.join(paths)}")
    return 0

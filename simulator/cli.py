"""``python -m simulator``: simulate one training iteration of a SimAI workload file, or of a whole
Megatron job given by the generators' flags.

SimAI-analytical's flags, same names (also with ``--long_names`` and ``--long-names``)::

    python -m simulator -w workload.txt -g 9216 -g_p_s 8 -n_p_s 8 -nv 360 -nic 48.5 -r run1-
    python -m simulator -w workload.txt -t Spectrum-X_128g_8gps_400Gbps_H100 --trace it.json --plot it.png

Without ``-w``, the generators' flags describe the job (``python -m workload_generator.
generate_megatron_workload --help`` lists them) and every pipeline stage of it is generated and
simulated, computation priced by the compute model for ``--gpu_type`` (or ``--comp_filepath``)::

    python -m simulator --model topo -t topo.txt --gpu_type A100 --model_name gpt3_175B --world_size 1024 \
        --tensor_model_parallel_size 8 --pipeline_model_parallel 8 --global_batch 1024 --json

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
import os
import sys
from collections.abc import Sequence
from typing import Any

from utils.cli import CliParser, add_job_flags, fraction, non_negative, number, positive_int, positive_number
from utils.errors import ConfigError

PROG = "simulator"
MODEL_CHOICES = ("simai", "topo")
JOB_GROUPS = ("general", "model", "Megatron", "MoE", "AIOB", "DeepSeek")
"""The generators' flag groups the whole-job mode takes."""
JOB_SKIP = ("output", "output_dir", "workload_only", "enable_visual", "pp_rank", "epoch_num")
"""Generator flags that mean nothing to a simulation of the whole job."""


def gibps(text: str) -> float:
    """argparse type of a bandwidth in GiB/s (-nv, -nic, --pp_busbw): a finite number a C ``float`` holds (SimAI
    keeps them so; ``-nv 1e300`` overflowed its float32 rounding); <= 0 keeps its meaning (the default)."""
    from simulator.cfloat import F32_MAX

    value = number(text)
    if abs(value) > F32_MAX:
        raise argparse.ArgumentTypeError(f"{text!r} GiB/s is beyond a C float (at most {F32_MAX:.3g}), as SimAI keeps it")
    return value


def build_parser(job_flags: bool = True) -> CliParser:
    """The argument parser (SimAI-analytical's flag names, then the generators' job flags unless
    ``job_flags`` is False)."""
    p = CliParser(prog=PROG, allow_abbrev=False,
                  description="Simulate one training iteration of a SimAI workload, or of the whole job the "
                              "generators' flags describe (times in microseconds).")
    p.add_argument("-w", "--workload", metavar="FILE",
                   help="SimAI workload file (.txt); without it, the job flags below describe the job")
    p.add_argument("--model", choices=MODEL_CHOICES, default=None,
                   help="simai: SimAI 1.7's analytical model (docs/simai_analytical.md); topo: ours (docs/sim_model.md). "
                        "Default: topo with -t, else simai")
    p.add_argument("-t", "--topology", metavar="FILE",
                   help="SimAI topology file (python -m topo.gen); implies --model topo.  SimAI's ns-3 spelling "
                        "'-t N -n TOPO' (N threads) is understood: -n names the topology, N is ignored")
    p.add_argument("-n", "--network", dest="network", metavar="FILE",
                   help="SimAI ns-3 binary's spelling of -t/--topology")
    p.add_argument("-c", "--config", dest="ns3_config", metavar="FILE",
                   help="SimAI ns-3 binary's SimAI.conf: accepted and ignored (our models take no ns-3 settings)")
    p.add_argument("-busbw", "--bus-bandwidth", "--bus_bandwidth", "--busbw", dest="busbw", metavar="FILE",
                   help="SimAI's busbw.yaml: measured busbw (GiB/s) per group and collective, used as SimAI's "
                        "pre-1.7 binary did (--model simai)")
    p.add_argument("--lenient", action="store_true",
                   help="accept AICB's older SimAI files without pp/vpp/ga (or ep, all_gpus) header keys, assuming "
                        "SimAI's defaults (pp 1, ga 1, ep 1, vpp = the layer records per micro-batch) and saying so")
    p.add_argument("-g", "--gpus", type=positive_int, metavar="N", help="number of GPUs (default: the workload's all_gpus)")
    p.add_argument("-g_p_s", "--gpus_per_server", "--gpus-per-server", type=positive_int, metavar="N", help="GPUs per server")
    p.add_argument("-n_p_s", "--nics_per_server", "--nics-per-server", type=positive_int, metavar="N", help="NICs per server")
    p.add_argument("-nv", "--nvlink_bw", "--nvlink-bw", type=gibps, metavar="GIBPS",
                   help="NVLink busbw in GiB/s (default by GPU type; <= 0 also means the default)")
    p.add_argument("-nic", "--nic_busbw", "--nic-busbw", type=gibps, metavar="GIBPS",
                   help="busbw of one NIC in GiB/s (default by NIC type; <= 0 also means the default)")
    p.add_argument("-g_type", "--gpu_type", "--gpu-type", metavar="TYPE", help="H100, H20, H800, A100 (default) or A800")
    p.add_argument("--gpu_spec", "--gpu-spec", metavar="FILE.json",
                   help="a GPU spec file (python -m profiling fit-gpu): its measured figures price the computation and "
                        "give the MFU's peak instead of the GPU table's; it names the GPU (instead of --gpu_type)")
    p.add_argument("-nic_t", "--nic_type", "--nic-type", metavar="TYPE", help="cx6, cx7 (default) or bf3")
    for short, name, default in (("-dp_o", "dp", 0.0), ("-tp_o", "tp", 0.0), ("-ep_o", "ep", 0.0), ("-pp_o", "pp", 1.0)):
        p.add_argument(short, f"--{name}_overlap_ratio", f"--{name}-overlap-ratio", dest=f"{name}_overlap",
                       type=number, metavar="RATIO", default=default,
                       help=f"{name.upper()} overlap ratio in [0, 1] (default {default})")
    p.add_argument("--pp_busbw", "--pp-busbw", type=gibps, metavar="GIBPS",
                   help="busbw of the pipeline send in GiB/s for the PP exposed term (default: the DP group's "
                        "inter-node busbw; SimAI 1.7 divides by -pp_o there, a bug)")
    p.add_argument("-r", "--result", metavar="PREFIX",
                   help="result path prefix, as SimAI's -r (ending in '/': a folder; the name is then the workload's stem)")
    p.add_argument("-r_f", "--result_folder", "--result-folder", metavar="DIR",
                   help="folder for the result files (default results/ for a prefix without a folder)")
    p.add_argument("-v", "--visual", nargs="?", const="1", default=None, metavar="0|1",
                   help="SimAI's -v / -v 1 (its HTML pie chart): our --plot draws the breakdown instead; "
                        "accepted with a note")
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
    topo.add_argument("--placement", metavar="FILE",
                      help="a rank file (host:slot per global rank, python -m simulator place writes one): where each rank "
                           "runs (default rank r on GPU r)")
    topo.add_argument("--pxn", action=argparse.BooleanOptionalAction, default=True,
                      help="NCCL's PXN on servers with shared NICs (topo.gen --gpus_per_nic; NCCL's default)")
    topo.add_argument("--fill_bubbles", "--fill-bubbles", action="store_true",
                      help="each stage's step (optimizer, parameter all-gather) runs in its bubble as soon as its own "
                           "backward is done, the gradient norm validated after the step; reports the bubble per stage "
                           "before and after")
    topo.add_argument("--inference_config", "--inference-config", metavar="JSON",
                      help="an inference workload's model config (AICB's JSON) when -w's file was made from one: "
                           "default the config its header names, else the model its name names")
    from simulator.profiles.flags import add_flags as add_profile_flags  # --profile DIR --network_device NAME

    add_profile_flags(p)
    p.add_argument("--json", action="store_true",
                   help="print one JSON object on the last line of stdout (iteration_s, compute_s, exposed_comm_s, "
                        "bubble_s, tflops_per_gpu, mfu, ...)")
    p.add_argument("-q", "--quiet", action="store_true", help="do not print the summary")
    p.set_defaults(job_flags=frozenset(add_job_flags(p, JOB_GROUPS, JOB_SKIP) if job_flags else ()))
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The parsed flags.  A SimAI file's run (``-w`` without job flags) is parsed without building the
    job flags (a hundred options and the configuration modules behind their choices): the same
    namespace, as those flags are then absent; anything else goes through the whole parser."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-w", "--workload") or a.startswith("--workload=") for a in argv) and not any(
            a in ("-h", "--help") for a in argv):
        args, rest = build_parser(job_flags=False).parse_known_args(argv)
        if not rest:
            return args
    return build_parser().parse_args(argv)


SIMAI_ONLY = (("dp_overlap", "-dp_o", 0.0), ("tp_overlap", "-tp_o", 0.0), ("ep_overlap", "-ep_o", 0.0),
              ("pp_overlap", "-pp_o", 1.0), ("pp_busbw", "--pp_busbw", None), ("busbw", "-busbw", None))
TOPO_ONLY = (("topology", "-t/--topology", None), ("trace", "--trace", None),
             ("overlap_grad_reduce", "--overlap_grad_reduce", None), ("tp_comm_overlap", "--tp_comm_overlap", False),
             ("nvlink_efficiency", "--nvlink_efficiency", None), ("nic_efficiency", "--nic_efficiency", None),
             ("latency_scale", "--latency_scale", 1.0), ("peak_tflops", "--peak_tflops", None),
             ("placement", "--placement", None), ("pxn", "--no-pxn", True), ("fill_bubbles", "--fill_bubbles", False))


def job_of(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The whole-job mode's validated job and resolved flag values, from the job flags the user gave
    (and ``--gpu_type``, ``-g``, ``--overlap_grad_reduce``, which both modes share)."""
    from utils.cli import job_from, resolve

    given = {dest: getattr(args, dest) for dest in args.job_flags if hasattr(args, dest)}
    if args.gpu_type is not None:
        given["gpu_type"] = args.gpu_type
    if args.overlap_grad_reduce is not None:
        given["overlap_grad_reduce"] = args.overlap_grad_reduce
    if args.gpus is not None:
        if given.setdefault("world_size", args.gpus) != args.gpus:
            raise ConfigError(f"-g {args.gpus} differs from --world_size {given['world_size']}")
    values = resolve(given)
    job = job_from(values)
    if job.training.gpu_type is not None:
        from mocked_model.compute import gpu_spec

        gpu_spec(job.training.gpu_type)  # one line naming the GPU table when the type is unknown
    if job.training.frame not in ("Megatron", "DeepSeek"):
        raise ConfigError(f"--frame {job.training.frame}: the simulator takes Megatron and DeepSeek jobs (give -w FILE "
                          "for a SimAI workload)")
    return job, values


def _job_name(job: Any, values: dict[str, Any]) -> str:
    p = job.parallel
    return f"{values.get('model_name') or job.model.name}-tp{p.tp}-pp{p.pp}-dp{p.dp}-gbs{p.global_batch}.job"


def json_summary(result: Any, job: Any = None) -> dict[str, Any]:
    """The ``--json`` object: iteration, the busiest stage's compute, exposed communication (every group,
    pipeline transfers included), the GPU waiting for the host (``host_s``, topo with the compute model) and bubble,
    in seconds, model TFLOP/s per GPU and MFU (Megatron's FLOP count, recomputation excluded, against the dense bf16
    peak)."""
    t = result.totals
    iteration_s = result.iteration_us / 1e6
    details = result.details
    host_us = details.stages[details.reported_stage].host_us if details is not None else 0.0
    out: dict[str, Any] = {
        "model": result.model, "iteration_s": iteration_s, "compute_s": t.compute_us / 1e6,
        "exposed_comm_s": max(t.total_us - t.compute_us - t.bubble_us - host_us, 0.0) / 1e6,
        "bubble_s": t.bubble_us / 1e6,
    }
    if host_us:
        out["host_s"] = host_us / 1e6
    flops = details.model_flops if details is not None else None
    mfu = details.mfu if details is not None else None
    gpus = result.setup.get("gpus")
    if flops is None and job is not None:
        from mocked_model.compute import gpu_spec, known_gpu
        from mocked_model.flops import model_flops

        flops = model_flops(job)
        if known_gpu(job.training.gpu_type) and iteration_s > 0:
            mfu = flops / (iteration_s * job.parallel.world_size * gpu_spec(job.training.gpu_type).bf16_tflops * 1e12)
    if flops and gpus and iteration_s > 0:
        out["tflops_per_gpu"] = flops / gpus / iteration_s / 1e12
        out["model_tflops_per_gpu"] = out["tflops_per_gpu"]
    out["mfu"] = mfu
    peak = details.peak_tflops if details is not None else None
    if peak is None and job is not None:
        from mocked_model.compute import gpu_spec, known_gpu

        peak = gpu_spec(job.training.gpu_type).bf16_tflops if known_gpu(job.training.gpu_type) else None
    if mfu is not None and peak:
        out["mfu_basis"] = f"model FLOPs (Megatron's count, recomputation excluded) / dense bf16 peak {peak:g} TFLOP/s"
    if details is not None and getattr(details, "hfu", None) is not None:
        out["hardware_tflops_per_gpu"] = details.hfu * details.hfu_peak_tflops
        out["hfu"] = details.hfu
        out["hfu_basis"] = (f"every computation's FLOPs (recomputation included) / dense peak of the GEMMs' precision "
                            f"{details.hfu_peak_tflops:g} TFLOP/s")
    for key in ("tp", "pp", "dp", "ep", "ga", "chunks", "gpus"):
        if key in result.setup:
            out[key] = result.setup[key]
    if result.memory is not None:
        out.update(result.memory.summary())
    if result.setup.get("sources"):
        out["sources"] = result.setup["sources"]
    fill = getattr(details, "bubble_fill", None)
    if fill is not None:  # --fill_bubbles
        from dataclasses import asdict

        out["fill_before_s"] = fill[0] / 1e6
        out["fill_stages"] = [asdict(row) for row in fill[1]]
    return out


def simulate_args(args: argparse.Namespace) -> tuple[Any, str, Any]:
    """Simulate what parsed flags describe: ``(result, the input's name, the job or None)``.  The one path
    the command line, ``python -m simulator validate`` and scripts share."""
    from simulator import api
    from simulator.options import SimAIOptions, TopoOptions

    notes: list[str] = _ns3_spellings(args)
    if getattr(args, "gpu_spec", None) is not None:
        from mocked_model.compute import gpu_spec
        from utils.cli import gpu_spec_type

        args.gpu_type = gpu_spec_type(args.gpu_spec, args.gpu_type)
        spec = gpu_spec(args.gpu_type)  # a malformed file is one line naming the file and the field, before anything
        args.gpu_spec = None
        if args.peak_tflops is None:
            args.peak_tflops = spec.bf16_tflops
    model = args.model or ("topo" if args.topology else "simai")
    if model not in api.MODELS:
        raise ConfigError(f"--model {model} is not available in this version (available: {', '.join(api.MODELS)})")
    job = values = None
    if args.workload is None:
        given = sorted(d for d in args.job_flags if hasattr(args, d))
        if not given:
            raise ConfigError("give -w FILE (a SimAI workload) or the job's flags (e.g. --model_name NAME --world_size N "
                              "--gpu_type GPU); see --help")
        job, values = job_of(args)
    else:
        stray = sorted(d for d in args.job_flags if hasattr(args, d))
        if stray:
            raise ConfigError(f"--{stray[0]} describes a job: give the job's flags without -w, or -w FILE without them")
    spec_file = False
    if args.gpu_type is not None:  # (the compute model's table only when a GPU is named: a SimAI run imports none of it)
        from mocked_model.compute.gpus import is_spec_file

        spec_file = is_spec_file(args.gpu_type)
    gpu_type = _simai_gpu(args.gpu_type) if job is not None or spec_file else args.gpu_type
    workload: Any = args.workload
    if workload is not None and args.lenient:
        workload = api.load_workload(workload)
        notes.extend(workload.assume_defaults())
    if model == "simai":
        given = [flag for name, flag, default in TOPO_ONLY if getattr(args, name) != default]
        if given:
            raise ConfigError(f"{', '.join(given)} need(s) --model topo (SimAI's analytical model has no topology "
                              "or timeline)")
        options = SimAIOptions(
            gpus=args.gpus, gpus_per_server=args.gpus_per_server, nics_per_server=args.nics_per_server,
            nvlink_bw=args.nvlink_bw, nic_busbw=args.nic_busbw, gpu_type=gpu_type,
            nic_type=args.nic_type, dp_overlap=args.dp_overlap, tp_overlap=args.tp_overlap,
            ep_overlap=args.ep_overlap, pp_overlap=args.pp_overlap, pp_busbw=args.pp_busbw, busbw_file=args.busbw,
        )
    else:
        for name, flag, default in SIMAI_ONLY:
            if getattr(args, name) != default:
                why = "overlap comes from the schedule" if name.endswith("overlap") else "bandwidths come from the fabric"
                notes.append(f"{flag} is SimAI's knob and is ignored by --model topo ({why})")
        nvlink_bw = args.nvlink_bw
        if gpu_type is None and args.gpu_type is not None:  # a GPU SimAI's table lacks: NCCL's NVLink rate
            from simulator.options import derived_fabric_gpu

            nvlink_bw = derived_fabric_gpu(args.gpu_type, nvlink_bw)[1]
        placement = None
        if getattr(args, "placement", None) is not None:  # issue 30: a rank file (simulator/topo/placement.py)
            if args.topology is None:
                raise ConfigError("--placement places ranks on a topology's GPUs: give -t/--topology FILE")
            from simulator.topo.placement import read_placement

            world = job.parallel.world_size if job is not None else args.gpus
            if world is None:
                from simulator.api import load_workload

                world = load_workload(workload).header.all_gpus
            placement = read_placement(args.placement, args.topology, world)
        options = TopoOptions(
            gpus=args.gpus, gpus_per_server=args.gpus_per_server, nics_per_server=args.nics_per_server,
            nvlink_bw=nvlink_bw, nic_busbw=args.nic_busbw, gpu_type=gpu_type,
            nic_type=args.nic_type, nvlink_efficiency=args.nvlink_efficiency, nic_efficiency=args.nic_efficiency,
            latency_scale=args.latency_scale, overlap_grad_reduce=args.overlap_grad_reduce,
            tp_comm_overlap=args.tp_comm_overlap, peak_tflops=args.peak_tflops,
            compute_source=values.get("compute_source") if values else None,
            placement=placement, pxn=getattr(args, "pxn", True), fill_bubbles=getattr(args, "fill_bubbles", False),
        )
    from simulator.profiles.flags import PROFILE_FLAGS

    profile = None
    if any(getattr(args, name, None) is not None for name in PROFILE_FLAGS):
        from simulator.profiles.measured import use_profile

        options, profile = use_profile(args, options, model, job)  # --profile: measured collectives and compute
    if job is not None:
        result = simulate_job(job, args.topology, options, model, profile)
        source = _job_name(job, values)
    else:
        from simulator.inference_header import SIMAI_NOTE, is_inference_workload

        if model == "simai" and is_inference_workload(args.workload):  # AICB 2.1's inference files
            notes.append(SIMAI_NOTE)
        result = api.simulate(workload, args.topology, options, model=model)
        source = args.workload
    if profile is not None:
        from simulator.profiles.measured import annotate

        annotate(result, profile)  # result.setup["sources"]: what came from measurements, what from models
    result.warnings.extend(notes)
    if args.visual not in (None, "0"):
        result.warnings.append("-v/--visual: SimAI's HTML pie chart is not written; --plot FILE.png draws the "
                               "breakdown")
    return result, source, job


def _ns3_spellings(args: argparse.Namespace) -> list[str]:
    """SimAI's ns-3 binary spells the topology ``-n FILE`` and the thread count ``-t N``; ours is ``-t FILE``.
    Resolve the two (in place) and return the notes: ``-n`` names the topology, a ``-t`` given beside it or
    one that is a bare number naming no file is the thread count (ignored: our models run in one thread);
    ``-c SimAI.conf`` is ignored.  ``-v`` takes SimAI's 0 or 1."""
    notes = []
    if args.visual not in (None, "0", "1"):
        raise ConfigError(f"-v/--visual takes 0 or 1 (SimAI's spelling), got {args.visual!r}")
    threads = args.topology if args.topology is not None and args.topology.isdigit() else None
    if args.network is not None:
        if args.topology is not None and threads is None:
            raise ConfigError(f"-t {args.topology} and -n {args.network} both name a topology; give one")
        args.topology = args.network
    elif threads is not None and not os.path.exists(threads):
        raise ConfigError(f"-t {threads}: no topology file of that name (SimAI's ns-3 binary reads -t as a thread "
                          "count and -n as the topology: give -n FILE, or -t FILE)")
    if threads is not None and args.topology != threads:
        notes.append(f"-t {threads}: SimAI's ns-3 thread count, ignored (the topology is -n {args.topology})")
    if args.ns3_config is not None:
        notes.append(f"-c {args.ns3_config}: SimAI's ns-3 settings file is ignored (our models take none)")
    return notes


def _frame_of(argv: Sequence[str]) -> str | None:
    """The ``--frame`` (``--comm_frame``) value in ``argv``, or None."""
    for i, arg in enumerate(argv):
        name, sep, value = arg.partition("=")
        if name in ("--frame", "--comm_frame", "--comm-frame"):
            return value if sep else (argv[i + 1] if i + 1 < len(argv) else None)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags, simulate, write the result files, print the summary.  Returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if _frame_of(argv) == "Inference":  # an inference job's flags (issue 28, item 19): simulator/topo/inference.py
        from simulator.topo.inference import job_main

        return job_main(argv, PROG)
    args = parse_args(argv)
    # Heavy imports after the flags are known to be well-formed.
    from simulator import report
    from simulator.inference_header import wants_topo
    from simulator.inputs import input_files
    from utils.io import guard_output

    if any(name.startswith("AS_") for name in os.environ):  # SimAI's settings (issue 28, item 21); import only then
        from workload_generator.entry import note_ignored_simai_env

        note_ignored_simai_env(PROG, why="this simulator does not model it")
    inputs = input_files(args)
    for flag, path in (("--trace", args.trace), ("--plot", args.plot)):
        if path:
            guard_output(path, inputs, flag)  # before any work: a trace over the workload would destroy it
    if wants_topo(args):  # an inference workload (mode: 1) on --model topo: TTFT / TPOT
        from simulator.topo import inference

        return inference.cli_main(args, PROG, SIMAI_ONLY)
    result, source, job = simulate_args(args)
    prefix = report.output_prefix(args.result, args.result_folder, source)
    contents: dict[str, Any] = dict(report.result_chunks(result, prefix))  # tables streamed as written
    for path in contents:
        guard_output(path, inputs, "-r/--result")
    if args.trace:
        from simulator.topo.trace import trace_text

        contents[args.trace] = trace_text(result)
    if args.plot:
        from simulator.plot import plot_png

        contents[args.plot] = plot_png(result)
    paths = report.write_files(contents)
    for message in result.warnings:
        print(f"{PROG}: warning: {message}", file=sys.stderr)
    if not args.quiet:
        stages = result.setup.get("pp") or 1
        if job is None and result.model == "topo" and stages > 1:
            print(f"note: {args.workload} describes one pipeline stage; each of the {stages} stages runs its records "
                  "(give the job's flags instead of -w to simulate every stage as Megatron builds it)")
        if result.model == "simai" and args.pp_overlap != 1.0:
            bw = result.setup.get("pp_busbw_gibps")
            print(f"note: -pp_o {args.pp_overlap:g} differs from SimAI 1.7's meaning: SimAI divides the PP term by "
                  f"pp_o as if it were a bandwidth; here the PP term is 2 x vpp x ga x pp_comm / PP busbw"
                  f"{f' ({bw * 2**30 / 1e9:.1f} GB/s: --pp_busbw {bw:g} GiB/s)' if bw else ' (--pp_busbw)'} x (1 - pp_o)")
        print(report.summary_text(result))
        fill = getattr(result.details, "bubble_fill", None)
        if fill is not None:  # --fill_bubbles: the bubble per stage before and after (simulator/topo/bubble_fill.py)
            from simulator.topo.bubble_fill import fill_table

            print(fill_table(fill[1], fill[0], result.iteration_us))
        if result.setup.get("sources"):
            print(result.setup["sources"])
        if result.memory is not None:
            print(result.memory.table())
        print(f"wrote {', '.join(paths)}")
    if args.json:
        import json

        print(json.dumps(json_summary(result, job)))
    return 0


def _simai_gpu(gpu_type: str | None) -> str | None:
    """The GPU type SimAI's options take (its NVLink default table); other types of the compute model's
    table (B200, H200, ...) leave the options' type unset."""
    from simulator.options import GPU_NVLINK_GIBPS

    if gpu_type is None:
        return None
    name = gpu_type.strip().upper()
    if name in GPU_NVLINK_GIBPS:
        return name
    from mocked_model.compute import known_gpu

    if known_gpu(gpu_type):
        return None
    return gpu_type


def simulate_job(job: Any, topology: str | None, options: Any, model: str, profile: Any = None) -> Any:
    """Simulate a whole job: the topo model plays every stage; SimAI's model runs the SimAI records
    derived from the job (one stage, as SimAI assumes), with the job's computation priced alike."""
    from simulator import api

    if model == "topo":
        return api.simulate(job, topology, options, model="topo")
    from dataclasses import replace

    from workload_generator.compute_times import default_source, fill_job_times
    from workload_generator.megatron import MegatronWorkload
    from workload_generator.simai_training import derive_simai

    job = replace(job, training=replace(job.training, computation_enable=True))
    source = default_source(job, options and getattr(options, "compute_source", None), model_default=True)
    if source == "placeholder":
        raise ConfigError("simulating a job needs computation times: give --gpu_type (the compute model), "
                          "--comp_filepath FILE or --aiob_enable")
    gen = MegatronWorkload(job)
    if profile is not None and profile.compute is not None:  # --profile: measured compute first, the model behind
        from workload_generator.compute_times import fill_compute_times

        report = fill_compute_times(gen().items, "model", estimator=profile.compute_time_ns)
    else:
        report = fill_job_times(gen().items, job, source)
    result = api.simulate(derive_simai(gen).workload, None, options, model="simai")
    if report.warning():
        result.warnings.append(report.warning())
    from mocked_model.memory import estimate_memory
    from workload_generator.limits import check_mtp

    check_mtp(job)  # (the estimate builds every stage's MTP layers; the workload above is one rank's)
    result.memory = estimate_memory(job, job.training.gpu_type)
    if result.memory.warning():
        result.warnings.append(result.memory.warning())
    return result

"""``python -m profiling``: measure once (collectives per node wiring, kernels per GPU type), simulate anywhere.

    torchrun --nproc_per_node 8 -m profiling network --network_device h100_dgx -o profiles/      # NCCL sweep
    python -m profiling compute -o profiles/ --model_name llama3_8B --tensor_model_parallel_size 8 ...  # AIOB
    python -m profiling nccl-tests all_reduce.txt --network_device h100_dgx -o profiles/            # convert
    python -m profiling calibrate --profile profiles/ --network_device h100_dgx --gpu_type H100      # fit
    python -m profiling simai-busbw --profile profiles/ --network_device h100_dgx --tp 8 --dp 16 -o busbw.yaml
    python -m profiling aiob --profile profiles/ --compute_sku h100 --gpu_type H100 <job flags> -o aiob.txt
    python -m profiling show profiles/
    python -m profiling kernels -o kernels.json [--device cuda|cpu] [--quick] [--sustained_s 20]  # kernel sweep
    python -m profiling fit-gpu kernels.json --base H200 -o H200.json                          # GPU spec file
    python -m simulator --profile profiles/ --network_device h100_dgx ...                            # use it
    python -m simulator --gpu_spec H200.json ...                                                   # use the spec

Bad input ends with one line naming it and exit status 2, and writes nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from utils.cli import CliParser, add_job_flags, non_negative_int, positive_int, positive_number, run_main
from utils.errors import ConfigError
from utils.units import parse_size

PROG = "python -m profiling"
JOB_GROUPS = ("general", "model", "Megatron", "MoE", "DeepSeek")
JOB_SKIP = ("output", "output_dir", "workload_only", "enable_visual", "pp_rank", "epoch_num", "aiob_enable",
            "comp_filepath", "compute_source")


def size(text: str) -> int:
    try:
        value = parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive size, got {text!r}")
    return value


MAX_CALLS = 100_000
"""The most timed or warm-up calls per point (``--iters``, ``--warmup``, ``--samples``): more is a typo that
would run for days."""


def calls(minimum: int) -> Any:
    """argparse type: a count of calls per point, ``minimum`` to :data:`MAX_CALLS`."""
    def parse(text: str) -> int:
        value = (positive_int if minimum >= 1 else non_negative_int)(text)
        if value > MAX_CALLS:
            raise argparse.ArgumentTypeError(f"{text!r} calls per point is more than {MAX_CALLS} (bounded work)")
        return value

    return parse


def int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers separated by commas, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive whole numbers, got {text!r}")
    return values


def device(text: str) -> str:
    """``--device`` of ``kernels``: ``cuda``, ``cuda:N`` or ``cpu``."""
    value = text.strip().lower()
    if value in ("cpu", "cuda") or (value.startswith("cuda:") and value[5:].isdigit()):
        return value
    raise argparse.ArgumentTypeError(f"expected cuda, cuda:N or cpu, got {text!r}")


def build_parser() -> CliParser:
    p = CliParser(prog=PROG, description="Measure a profiling database (collectives per node wiring, kernels per GPU "
                                         "type), fit the simulator's link model to it, and export it for SimAI; sweep "
                                         "a GPU's kernels (kernels) and fit a GPU spec file to them (fit-gpu).")
    sub = p.add_subparsers(dest="command", required=True, parser_class=CliParser)

    n = sub.add_parser("network", help="under torchrun: sweep every collective over sizes and group shapes")
    n.add_argument("--network_device", "--network-device", required=True, metavar="NAME",
                   help="name of this node wiring in the database (h100_dgx, a100_pair_nvlink, cpu_gloo, ...)")
    n.add_argument("-o", "--output", required=True, metavar="DIR", help="the database (created if absent)")
    n.add_argument("--ops", default="all", help="collectives, comma-separated (default all: all_reduce, all_gather, "
                   "reduce_scatter, all_to_all, broadcast, send_recv)")
    n.add_argument("-b", "--begin_size", "--begin-size", type=size, default=1024, metavar="BYTES", help="default 1K")
    n.add_argument("-e", "--end_size", "--end-size", type=size, default=256 << 20, metavar="BYTES", help="default 256M")
    n.add_argument("-f", "--step_factor", "--step-factor", type=positive_int, default=4, help="default 4")
    n.add_argument("--group_sizes", "--group-sizes", type=int_list, metavar="N,N", help="default: powers of two up to "
                   "the world, and the world")
    n.add_argument("--ranks_per_node", "--ranks-per-node", type=positive_int, metavar="N",
                   help="ranks per node (default torchrun's LOCAL_WORLD_SIZE; smaller emulates nodes on one machine)")
    n.add_argument("--iters", type=calls(1), default=20, help="timed calls per point (default 20)")
    n.add_argument("--warmup", type=calls(0), default=5, help="untimed calls before them (default 5)")
    n.add_argument("--dtype", default="float32", help="element type (default float32, as nccl-tests)")
    n.add_argument("--backend", default="auto", choices=("auto", "nccl", "gloo"), help="default nccl with CUDA, else gloo")
    n.add_argument("--emulate", default="", help="operations to run on the replay's gloo emulations (comma-separated)")
    n.add_argument("--timeout", type=positive_number, default=300.0, help="seconds any rank may wait (default 300)")
    n.add_argument("--allow_name_mismatch", "--allow-name-mismatch", action="store_true",
                   help="store the sweep under --network_device even though it names a GPU and the run measures "
                        "CPUs (gloo), or another GPU")

    c = sub.add_parser("compute", help="time every distinct computation of a job (or a GEMM grid) on this device")
    c.add_argument("-o", "--output", required=True, metavar="DIR", help="the database (created if absent)")
    c.add_argument("--sku", metavar="NAME", help="GPU type folder (default: this GPU's name in the compute model, or cpu)")
    c.add_argument("--model_folder", "--model-folder", metavar="NAME",
                   help="folder under compute/<sku>/ (default: the model's name, or gemm_grid)")
    c.add_argument("--gemm_m", "--gemm-m", metavar="M,M", help="a GEMM grid instead of a job: rows (tokens)")
    c.add_argument("--gemm_n", "--gemm-n", metavar="N,N", help="output columns")
    c.add_argument("--gemm_k", "--gemm-k", metavar="K,K", help="inner dimension")
    c.add_argument("--samples", type=calls(1), default=5, help="samples per operation (default 5)")
    c.add_argument("--warmup", type=calls(0), default=None, help="warm-up calls (default AIOB's: 5 on a GPU, 1 on a CPU)")
    c.add_argument("--device", type=device, metavar="DEV", help="cuda, cuda:N or cpu (default: the GPU when there is "
                   "one)")
    c.add_argument("--allow_name_mismatch", "--allow-name-mismatch", action="store_true",
                   help="store the times under --sku even though it names another device than the one measured")
    c.set_defaults(job_flags=frozenset(add_job_flags(c, JOB_GROUPS, JOB_SKIP)))

    t = sub.add_parser("nccl-tests", help="convert nccl-tests' text output into network profile rows")
    t.add_argument("files", nargs="+", metavar="FILE", help="nccl-tests stdout, one test per file")
    t.add_argument("--network_device", "--network-device", required=True, metavar="NAME")
    t.add_argument("-o", "--output", required=True, metavar="DIR", help="the database (created if absent)")
    t.add_argument("--kind", choices=("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv"),
                   help="the collective (default: from the output or the file name)")
    t.add_argument("--ranks", type=positive_int, help="ranks (default: the '#  Rank' lines)")
    t.add_argument("--ranks_per_node", "--ranks-per-node", type=positive_int, help="default: from the host names")
    t.add_argument("--in_place", "--in-place", action="store_true", help="take the in-place columns")

    k = sub.add_parser("calibrate", help="fit the topo model's NVLink/NIC bandwidth and latency to a network profile")
    _profile_flags(k)
    k.add_argument("--gpu_type", "--gpu-type", metavar="GPU", help="nominal NVLink rate from the compute model's GPU table")
    k.add_argument("--nvlink_gbps", "--nvlink-gbps", type=positive_number, metavar="GBPS",
                   help="nominal NVLink GB/s per GPU per direction (overrides --gpu_type's)")
    k.add_argument("--nic_gbps", "--nic-gbps", type=positive_number, metavar="GBPS",
                   help="nominal NIC GB/s per GPU (default 50: a 400 Gb/s NIC per GPU)")
    k.add_argument("--topology", "-t", metavar="FILE", help="take the nominal NVLink and NIC rates from the topology "
                   "the simulation will run on (its per-GPU rates), so that the efficiencies printed apply to it")
    k.add_argument("--json", metavar="FILE", help="also write the fit as JSON")

    y = sub.add_parser("simai-busbw", help="write SimAI-analytical's busbw.yaml for a layout from a network profile")
    _profile_flags(y)
    y.add_argument("--tp", type=positive_int, required=True)
    y.add_argument("--dp", type=positive_int)
    y.add_argument("--ep", type=positive_int)
    y.add_argument("--pp", type=positive_int)
    y.add_argument("--gpus_per_node", "--gpus-per-node", "-g_p_s", type=positive_int, default=8, help="default 8")
    y.add_argument("--size", type=size, default=256 << 20, help="message size the busbw is read at (default 256M)")
    y.add_argument("--gpu_type", "--gpu-type", metavar="GPU", help="nominal NVLink rate (the GPU table's) for a group "
                   "the profile has no intra-node points for")
    y.add_argument("--nvlink_gbps", "--nvlink-gbps", type=positive_number, metavar="GBPS",
                   help="nominal NVLink GB/s per GPU per direction for what the profile did not measure")
    y.add_argument("--nic_gbps", "--nic-gbps", type=positive_number, metavar="GBPS", help="nominal NIC GB/s per GPU "
                   "for a group the profile has no inter-node points for (default 50: a 400 Gb/s NIC per GPU)")
    y.add_argument("-o", "--output", required=True, metavar="FILE")

    a = sub.add_parser("aiob", help="write an AIOB compute file for a job from a compute profile")
    a.add_argument("--profile", required=True, metavar="DIR")
    a.add_argument("--compute_sku", "--compute-sku", metavar="SKU", help="default: --gpu_type in lower case")
    a.add_argument("-o", "--output", metavar="FILE", help="default: AICB's results/aiob_outputs/<name>")
    a.set_defaults(job_flags=frozenset(add_job_flags(a, JOB_GROUPS, JOB_SKIP)))

    s = sub.add_parser("show", help="what a database holds")
    s.add_argument("profile", metavar="DIR")

    g = sub.add_parser("kernels", help="time GEMMs, memory-bound kernels, attention and the sustained clock on this "
                       "GPU (the sweep fit-gpu reads)")
    g.add_argument("-o", "--output", required=True, metavar="FILE", help="the sweep's JSON")
    g.add_argument("--device", type=device, metavar="DEV", help="cuda, cuda:N or cpu (default: the GPU when "
                   "there is one; a CPU run checks the pipeline only)")
    g.add_argument("--quick", action="store_true", help="every size / 32 and few loops: seconds on a CPU (a GPU "
                   "keeps the 8192^3 clock probe)")
    g.add_argument("--sustained_s", "--sustained-s", type=positive_number, metavar="SECONDS",
                   help="seconds of the sustained 8192^3 GEMM clock probe (default 20; 2 with --quick)")
    g.add_argument("--dtype", default="bf16", choices=("bf16",), help="GEMM and activation type (bf16, what the "
                   "fits read)")

    f = sub.add_parser("fit-gpu", help="fit a GPU spec file (--gpu_spec) to a kernel sweep")
    f.add_argument("kernels", metavar="KERNELS.json", help="a kernel sweep (python -m profiling kernels)")
    f.add_argument("--base", required=True, metavar="GPU", help="the GPU table entry whose figures fill what the "
                   "sweep does not measure (H200, H100, ...)")
    f.add_argument("--name", metavar="NAME", help="the --gpu_type the spec answers to (default: the base's name)")
    f.add_argument("-o", "--output", required=True, metavar="FILE", help="the spec file (JSON)")
    return p


def _profile_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", required=True, metavar="DIR", help="the database")
    p.add_argument("--network_device", "--network-device", metavar="NAME", help="default: the only one")


def _job(args: argparse.Namespace) -> Any:
    from utils.cli import job_from, resolve

    given = {dest: getattr(args, dest) for dest in args.job_flags if hasattr(args, dest)}
    return job_from(resolve(given))


def _device(root: str, device: str | None) -> str:
    from profiling.guards import db_name
    from simulator.profiles import db as profile_db

    if not os.path.isdir(root):
        raise ConfigError(f"--profile {root}: no such folder (a profiling database: python -m profiling)")
    if device is not None:
        return db_name(device, "--network_device", os.path.join(root, "network"))
    devices = profile_db.network_devices(root)
    if len(devices) != 1:
        raise ConfigError(f"--profile {root} holds {len(devices)} network devices ({', '.join(devices) or 'none'}): "
                          "choose one with --network_device NAME")
    return devices[0]


def cmd_compute(args: argparse.Namespace) -> int:
    from profiling import compute
    from profiling.guards import check_cuda, check_device_name, database_lock, db_name, gpu_of_device, guard_files
    from simulator.profiles import db as profile_db

    grid = [args.gemm_m, args.gemm_n, args.gemm_k]
    has_job = any(hasattr(args, d) for d in args.job_flags)
    if any(grid) and not all(grid):
        raise ConfigError("a GEMM grid needs --gemm_m, --gemm_n and --gemm_k")
    if all(grid) and has_job:
        raise ConfigError("give a GEMM grid (--gemm_m/n/k) or a job's flags, not both")
    if not all(grid) and not has_job:
        raise ConfigError("give a job's flags (e.g. --model_name NAME --tensor_model_parallel_size N) or a GEMM grid "
                          "(--gemm_m, --gemm_n, --gemm_k)")
    if all(grid):
        job, items, folder = None, compute.gemm_grid(args.gemm_m, args.gemm_n, args.gemm_k), args.model_folder or "gemm_grid"
        dtype = "bfloat16"
    else:
        job = _job(args)
        items = compute.job_items(job)
        folder = args.model_folder or job.model.name
        dtype = job.training.dtype
    root = args.output
    folder = db_name(folder, "--model_folder" if args.model_folder or all(grid) else "--model_name",
                     os.path.join(root, "compute", "<sku>"))
    if args.sku is not None:
        db_name(args.sku, "--sku", os.path.join(root, "compute"))
    try:
        import torch
    except ImportError as exc:
        raise ConfigError(f"profiling compute needs torch (pip install '.[torch]'): {exc}") from None
    check_cuda(args.device)
    measured_on = torch.device(args.device) if args.device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sku = args.sku or compute.default_sku(args.device)
    check_device_name(sku, "--sku", gpu_of_device(measured_on), args.allow_name_mismatch, "compute profile")
    target = profile_db.compute_dir(root, sku, folder)
    outputs = [os.path.join(target, name) for name in ("mlp.csv", "attention.csv", profile_db.META_FILE)]
    guard_files(outputs)  # before minutes of timing: a path that would be refused is refused now
    print(f"{PROG} compute: {len(items)} computation items -> compute/{sku}/{folder} in {root}", flush=True)
    mlp, attention, dtype_name, labels = compute.measure(items, job, dtype, args.device, args.samples, args.warmup)
    labels.update(sku=sku, model=folder, job_dtype=dtype)
    with database_lock(root, f"{PROG} compute"):
        guard_files(outputs)
        paths = profile_db.write_compute(root, sku, folder, mlp, attention)
        paths.append(profile_db.write_meta(target, labels))
    print(f"wrote {len(mlp)} mlp and {len(attention)} attention rows ({dtype_name}): {', '.join(paths)}")
    if labels.get("not_measured"):
        print(f"note: not measured: {labels['not_measured']}")
    return 0


def cmd_nccl_tests(args: argparse.Namespace) -> int:
    from profiling.guards import database_lock, db_name, guard_files
    from profiling.nccl_tests import parse
    from simulator.profiles import db as profile_db
    from utils.io import read_text

    device = db_name(args.network_device, "--network_device", os.path.join(args.output, "network"))
    folder = profile_db.network_dir(args.output, device)
    inputs = {"FILE": args.files}
    runs = [parse(read_text(path, "nccl-tests output"), path, args.kind, args.ranks, args.ranks_per_node, args.in_place)
            for path in args.files]
    by_kind: dict[str, list[dict]] = {}
    for run in runs:
        by_kind.setdefault(run.kind, []).extend(run.rows)
    for kind, rows in by_kind.items():
        keys = [(r["ranks"], r["ranks_per_node"], r["size_bytes"]) for r in rows]
        if len(set(keys)) != len(keys):
            raise ConfigError(f"two of {', '.join(args.files)} measure the same {kind} point (ranks, ranks per node, size)")
    outputs = [os.path.join(folder, profile_db.NETWORK_FILES[kind]) for kind in by_kind]
    outputs.append(os.path.join(folder, profile_db.META_FILE))
    guard_files(outputs, inputs)
    for run in runs:
        for note in run.notes:
            print(f"{PROG} nccl-tests: note: {note}", file=sys.stderr)
    with database_lock(args.output, f"{PROG} nccl-tests"):  # the read-merge-write of each file, one writer at a time
        guard_files(outputs, inputs)
        written = [profile_db.write_network(args.output, device, kind, rows) for kind, rows in by_kind.items()]
        meta = profile_db.read_meta(folder)
        converted = list(dict.fromkeys([*meta.get("converted_from", []), *(os.path.basename(f) for f in args.files)]))
        written.append(profile_db.write_meta(folder, {"network_device": device, "converted_from": converted}))
    for run in runs:
        print(f"{run.path}: {run.kind}, {run.ranks} ranks, {run.ranks_per_node} per node, {len(run.rows)} sizes")
    print(f"wrote {', '.join(written)}")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from profiling.guards import database_files
    from profiling.report import calibration_json, calibration_text
    from simulator.profiles import db as profile_db
    from simulator.profiles.fit import calibrate, points_of, series_fits
    from utils.io import guard_output

    device = _device(args.profile, args.network_device)
    if args.json:
        guard_output(args.json, {"--profile": database_files(args.profile)}, "--json")
    tables = profile_db.read_network(args.profile, device)
    nv, nic = args.nvlink_gbps, args.nic_gbps
    if args.topology:  # the efficiencies are of the rates the topo model multiplies them with: the file's
        from topo.topology import read_topology

        topology = read_topology(args.topology)
        nv = nv or (topology.nvlink_bytes_per_s / 1e9 if topology.nvlink_bytes_per_s > 0 else None)
        nic = nic or (topology.nic_bytes_per_s / 1e9 if topology.nic_bytes_per_s > 0 else None)
    if nv is None and args.gpu_type:
        from mocked_model.compute import gpu_spec

        nv = gpu_spec(args.gpu_type).nvlink_gbps  # NVLink per GPU per direction: H100 SXM 450 GB/s, topo.gen's default
    nic = nic or 50.0
    cal = calibrate(points_of(tables))
    fits = series_fits(tables)
    text = calibration_text(device, tables, nv, nic, cal, fits)
    if args.json:
        import json

        from utils.io import atomic_write

        with atomic_write(args.json) as handle:
            handle.write(json.dumps(calibration_json(device, cal, fits, nv, nic), indent=2) + "\n")
    print(text)
    if args.json:
        print(f"wrote {args.json}")
    return 0


def cmd_simai_busbw(args: argparse.Namespace) -> int:
    from profiling.export import busbw_yaml
    from profiling.guards import database_files
    from simulator.profiles.measured import Profile
    from utils.io import atomic_write, guard_output

    device = _device(args.profile, args.network_device)
    guard_output(args.output, {"--profile": database_files(args.profile)})
    profile = Profile.load(args.profile, network_device=device)
    nv = args.nvlink_gbps
    if nv is None and args.gpu_type:
        from mocked_model.compute import gpu_spec

        nv = gpu_spec(args.gpu_type).nvlink_gbps
    warnings: list[str] = []
    text = busbw_yaml(profile, args.tp, args.dp, args.ep, args.pp, args.gpus_per_node, args.size,
                      nvlink_gbps=nv, nic_gbps=args.nic_gbps or 50.0, warnings=warnings)
    with atomic_write(args.output) as handle:
        handle.write(text)
    print(text, end="")
    for warning in warnings:
        print(f"{PROG} simai-busbw: warning: {warning}", file=sys.stderr)
    print(f"wrote {args.output}")
    return 0


def cmd_aiob(args: argparse.Namespace) -> int:
    from mocked_model.aiob.layout import default_aiob_path
    from mocked_model.compute import known_gpu
    from profiling.export import profile_compute_file
    from profiling.guards import database_files, db_name
    from simulator.profiles import db as profile_db
    from simulator.profiles.measured import Profile
    from utils.io import guard_output

    job = _job(args)
    gpu = job.training.gpu_type
    sku = args.compute_sku or (gpu.lower() if gpu else None)
    if sku is None:
        raise ConfigError(f"give --compute_sku SKU (the database has: {', '.join(profile_db.skus(args.profile)) or 'none'}) "
                          "or --gpu_type")
    db_name(sku, "--compute_sku" if args.compute_sku else "--gpu_type", os.path.join(args.profile, "compute"))
    path = args.output or default_aiob_path(job)
    guard_output(path, {"--profile": database_files(args.profile)}, "-o/--output" if args.output else "the output")
    profile = Profile.load(args.profile, compute_sku=sku, gpu=gpu if known_gpu(gpu) else None, dtype=job.training.dtype)
    compute_file = profile_compute_file(job, profile)
    compute_file.write(path)
    print(profile.sources_text())
    print(f"wrote {path}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from profiling.report import show_text

    if not os.path.isdir(args.profile):
        raise ConfigError(f"{args.profile}: no such folder (a profiling database: python -m profiling)")
    print(show_text(args.profile))
    return 0


def cmd_kernels(args: argparse.Namespace, argv: list[str]) -> int:
    from profiling import kernels

    return kernels.run(args, argv)


def cmd_fit_gpu(args: argparse.Namespace) -> int:
    from profiling import fit_gpu

    return fit_gpu.run(args)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.command == "network":
        from profiling.network import run

        return run(args)
    if args.command == "kernels":
        return cmd_kernels(args, argv)
    handlers = {"compute": cmd_compute, "nccl-tests": cmd_nccl_tests, "calibrate": cmd_calibrate,
                "simai-busbw": cmd_simai_busbw, "aiob": cmd_aiob, "show": cmd_show, "fit-gpu": cmd_fit_gpu}
    return handlers[args.command](args)


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]), PROG)

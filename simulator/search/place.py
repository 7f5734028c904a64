"""``python -m simulator place``: the best placement of a job's ranks on a topology's GPUs (:mod:`simulator.topo.placement`).

    python -m topo.gen -topo Spectrum-X -g 64 --gpus_per_nic 2 -o topos/
    python -m simulator place -t topos/Spectrum-X_64g_8gps_2gpn_400Gbps_H100 --gpu_type H100 --model_name llama3_70B \\
        --world_size 64 --tensor_model_parallel_size 4 --pipeline_model_parallel 8 --global_batch 64 --seq_length 8192 \\
        --enable_sequence_parallel --use-distributed-optimizer --overlap_grad_reduce --use_flash_attn \\
        --use-tp-pp-dp-mapping -o place/ --json

Simulates the job with rank r on GPU r (the default), searches the server order and the GPU slot order (swaps of two
slots, of two servers whose NIC rates differ), then plays the best placement with bubble filling (``--fill_bubbles``).
Writes ``DIR/placement.txt`` (the rank file: ``host:slot`` per global rank, with the torchrun node rank and
``CUDA_VISIBLE_DEVICES`` of each host in its comments) and ``DIR/place.json``; prints a summary, and with ``--json``
one JSON object on the last line of stdout with at least ``default_s``, ``best_s`` (iteration times, seconds) and
``placement`` (the rank file's path).  Bad input: one line ``simulator place: error: ...``, exit status 2, nothing
written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from utils.cli import CliParser, add_job_flags, fraction, positive_int

PROG = "simulator place"


def build_parser() -> CliParser:
    from simulator.cli import JOB_GROUPS, JOB_SKIP

    p = CliParser(prog=PROG, allow_abbrev=False,
                  description="Find the best placement of a job's ranks on a topology's GPUs (server order, GPU slots), "
                              "against the default rank r on GPU r; write the rank file.")
    p.add_argument("-t", "--topology", metavar="FILE", required=True, help="SimAI topology file (python -m topo.gen)")
    p.add_argument("-o", "--output", metavar="DIR", default="results",
                   help="folder for placement.txt (the rank file) and place.json (default results/)")
    p.add_argument("--pxn", action=argparse.BooleanOptionalAction, default=True,
                   help="NCCL's PXN on servers with shared NICs (NCCL's default; --no-pxn: NCCL_PXN_DISABLE=1)")
    p.add_argument("--max_evals", "--max-evals", type=positive_int, default=None, metavar="N",
                   help="simulations the search runs at most (default 300)")
    p.add_argument("--overlap_grad_reduce", "--overlap-grad-reduce", action=argparse.BooleanOptionalAction, default=None,
                   help="overlap DP gradient reduction with backward (default: the job's flag)")
    p.add_argument("--tp_comm_overlap", "--tp-comm-overlap", action="store_true",
                   help="TP collectives run beside the compute (Megatron's --tp-comm-overlap)")
    p.add_argument("--nvlink_efficiency", "--nvlink-efficiency", type=fraction, metavar="F",
                   help="busbw / nominal NVLink rate (default the GPU's, 0.824 on H100)")
    p.add_argument("--nic_efficiency", "--nic-efficiency", type=fraction, metavar="F",
                   help="busbw / nominal NIC rate (default 0.97)")
    p.add_argument("--json", action="store_true", help="print one JSON object on the last line of stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the JSON (with --json) or nothing")
    p.set_defaults(job_flags=frozenset(add_job_flags(p, JOB_GROUPS, JOB_SKIP)))
    return p


def _job(args: argparse.Namespace) -> Any:
    from utils.cli import job_from, resolve
    from utils.errors import ConfigError

    given = {dest: getattr(args, dest) for dest in args.job_flags if hasattr(args, dest)}
    if not given:
        raise ConfigError("give the job's flags (e.g. --gpu_type H100 --model_name llama3_70B --world_size 64 ...)")
    if args.overlap_grad_reduce is not None:
        given["overlap_grad_reduce"] = args.overlap_grad_reduce
    job = job_from(resolve(given))
    if job.training.frame not in ("Megatron", "DeepSeek"):
        raise ConfigError(f"--frame {job.training.frame}: place simulates Megatron and DeepSeek jobs")
    if job.training.gpu_type is None:
        raise ConfigError("--gpu_type is required: the compute model prices each placement's iteration")
    from mocked_model.compute import gpu_spec

    gpu_spec(job.training.gpu_type)  # one line naming the GPU table when the type is unknown
    return job


def place_json(result: Any, path: str, pxn: bool) -> dict[str, Any]:
    """The ``--json`` object (and place.json): iteration times in seconds, the rank file, the placements, the bubble
    filling per stage (microseconds)."""
    best = result.best
    out: dict[str, Any] = {
        "default_s": result.default_s, "best_s": result.best_s, "placement": path,
        "improvement_s": result.default_s - result.best_s, "evaluated": result.evaluated, "pxn": pxn,
        "server_of_node_rank": list(best.server_of), "slot_of_local_rank": list(best.slot_of),
        "cuda_visible_devices": ",".join(map(str, best.slot_of)), "steps": result.steps,
    }
    fill = result.fill_result
    if fill is not None and fill.details is not None and fill.details.bubble_fill is not None:
        before_us, rows = fill.details.bubble_fill
        out["fill_s"] = fill.iteration_us / 1e6
        out["fill_before_s"] = before_us / 1e6
        out["fill_stages"] = [asdict(row) for row in rows]
    return out


def summary_text(result: Any, job: Any, topology: Any, pxn: bool) -> str:
    """What the command prints: default and best iterations, the best placement, each stage's pipeline transfers, and
    the bubble filling."""
    from simulator.topo.bubble_fill import fill_table

    p = job.parallel
    lines = [f"placement of {job.model.name} tp{p.tp} pp{p.pp} dp{p.dp} ({p.order}) on {topology.source}: "
             f"{result.evaluated} placements simulated, NCCL PXN {'on' if pxn else 'off'}",
             f"  default (rank r on GPU r)  {result.default_s * 1e6:16,.1f} us",
             f"  best                       {result.best_s * 1e6:16,.1f} us  ({(result.default_s - result.best_s) * 1e6:,.1f} us "
             "faster)",
             f"  best: node rank j on server {list(result.best.server_of)}; local rank i on slot "
             f"{list(result.best.slot_of)} (CUDA_VISIBLE_DEVICES={','.join(map(str, result.best.slot_of))})"]
    for step in result.steps:
        lines.append(f"    {step}")
    d, b = result.default_result.details, result.best_result.details
    lines.append("  stage   PP exposed default   PP exposed best   DP exposed default   DP exposed best (us)")
    for sd, sb in zip(d.stages, b.stages):
        lines.append(f"  {sd.stage:5d} {sd.pp_exposed_us:20,.1f} {sb.pp_exposed_us:17,.1f} {sd.dp_exposed_us:20,.1f} "
                     f"{sb.dp_exposed_us:17,.1f}")
    fill = result.fill_result
    if fill is not None and fill.details.bubble_fill is not None:
        before_us, rows = fill.details.bubble_fill
        lines.append(fill_table(rows, before_us, fill.iteration_us))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    from simulator.options import TopoOptions
    from simulator.topo.placement import MAX_EVALS, placement_note, rank_file_text, search_placement
    from simulator.topo.session import TopoSession
    from utils.io import atomic_write, guard_output

    job = _job(args)
    folder = args.output
    inputs = {"-t/--topology": args.topology, "--comp_filepath": job.training.comp_filepath}
    paths = {name: guard_output(os.path.join(folder, name), inputs, "-o/--output") for name in ("placement.txt", "place.json")}
    options = TopoOptions(overlap_grad_reduce=args.overlap_grad_reduce, tp_comm_overlap=args.tp_comm_overlap,
                          nvlink_efficiency=args.nvlink_efficiency, nic_efficiency=args.nic_efficiency, pxn=args.pxn)
    session = TopoSession(args.topology)
    say = (lambda text: None) if args.quiet else (lambda text: print(f"  better: {text}", flush=True))
    result = search_placement(job, args.topology, options, session, args.max_evals or MAX_EVALS, say)
    text = rank_file_text(result.best, placement_note(session.topology, result.best, args.pxn))
    summary = place_json(result, paths["placement.txt"], args.pxn)
    os.makedirs(folder, exist_ok=True)
    with atomic_write(paths["placement.txt"]) as handle:
        handle.write(text)
    with atomic_write(paths["place.json"]) as handle:
        handle.write(json.dumps(summary, indent=1) + "\n")
    for message in dict.fromkeys(result.best_result.warnings):
        print(f"{PROG}: warning: {message}", file=sys.stderr)
    if not args.quiet:
        print(summary_text(result, job, session.topology, args.pxn))
        print(f"wrote {paths['placement.txt']}, {paths['place.json']}")
    if args.json:
        print(json.dumps(summary))
    return 0

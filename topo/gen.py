"""``python -m topo.gen``: write a SimAI topology file.

Flags, defaults and output follow SimAI 1.7's ``gen_Topo_Template.py`` (``docs/topology.md``): for the
same flags the file has the same name, header, switch list and links in the same order, and stdout
carries SimAI's lines (``asw_switch_num: N``, ``psw_switch_num: N``, ``Creating Topology of totally S
segment(s), totally P pod(s).``, then the file written).  Differences, all deliberate:

* errors (GPU count not a multiple of ``-gps``, capacity overflow, unknown ``-topo``, ``--dp`` without
  rail-optimised dual ToR, odd ``-psn`` with dual plane, unparsable values) end with one line
  ``topo.gen: error: ...`` on stderr, exit status 2, and no file (SimAI: tracebacks, partial files,
  or a silently different fabric);
* warnings (``-asn`` recomputed, a switch the template ignores) are one ``topo.gen: warning: ...`` line
  each on stderr; SimAI also warns about its own default ``-asn``, we only about one the user gave;
* ``-o/--output`` picks the file or the directory (SimAI writes into the working directory);
* beyond SimAI: ``-topo NVL72`` / ``-topo NVL -gps N``, ``--pods`` with a core tier (``-csn``,
  ``--oversub``, ``-pcbw``, ``-pcl``) and ``-apl`` for the ASW-PSW latency (SimAI reuses ``-l``).
  See :mod:`topo.shapes` for the id order of the extra tier.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from topo.shapes import Layout, build, plan
from topo.templates import TEMPLATES, FabricSpec, resolve
from utils.cli import CliParser, integer, positive_number, run_main
from utils.errors import ConfigError

PROG = "topo.gen"


def build_parser() -> CliParser:
    """SimAI's flags (same spellings, single-dash long options included) plus ours.  Every default
    is SUPPRESS so that :func:`topo.templates.resolve` knows which flags the user gave."""
    p = CliParser(prog=PROG, allow_abbrev=False, argument_default=argparse.SUPPRESS,
                  description="Write a SimAI (ns-3) topology file; flags and defaults as SimAI's gen_Topo_Template.py.")
    add = p.add_argument
    add("-topo", "--topology", metavar="NAME", help=f"template: {', '.join(TEMPLATES)} (default: custom shape set by "
        "--ro/--dt/--dp)")
    add("--ro", action="store_true", help="rail-optimised (custom shape)")
    add("--dt", action="store_true", help="dual ToR: each NIC reaches two ASWs (custom shape, DCN+)")
    add("--dp", action="store_true", help="dual plane (needs rail-optimised dual ToR; AlibabaHPN)")
    add("-g", "--gpu", type=integer, help="number of GPUs (default 32; Spectrum-X 4096, AlibabaHPN 15360, DCN+ 512)")
    add("-er", "--error_rate", help="per-link error rate, written as given (default 0)")
    add("-gps", "--gpu_per_server", "--gps", type=integer, help="GPUs per server / NVLink domain (default 8; NVL 72)")
    add("-gt", "--gpu_type", help="GPU type in the header and file name (default H100; NVL GB200)")
    add("-nsps", "--nv_switch_per_server", type=integer, help="NVSwitch nodes per server (default 1)")
    add("-nvbw", "--nvlink_bw", help="GPU-NVSwitch bandwidth (default 2880Gbps; NVL 7200Gbps)")
    add("-nl", "--nv_latency", help="GPU-NVSwitch latency (default 0.000025ms)")
    add("-l", "--latency", help="NIC-ASW latency (default 0.0005ms; also ASW-PSW unless -apl)")
    add("-bw", "--bandwidth", help="NIC-ASW bandwidth (default 400Gbps; AlibabaHPN 200Gbps; NVL 800Gbps)")
    add("-asn", "--asw_switch_num", type=integer, help="ASW count (recomputed from the GPU count, as SimAI does)")
    add("-npa", "--nics_per_aswitch", type=integer, help="NICs per ASW (default 64; AlibabaHPN 128)")
    add("-psn", "--psw_switch_num", type=integer, help="PSWs per pod (default 64; AlibabaHPN 120; DCN+ 8)")
    add("-apbw", "--ap_bandwidth", help="ASW-PSW bandwidth (default 400Gbps; NVL 800Gbps)")
    add("-app", "--asw_per_psw", type=integer, help="capacity: ASWs per PSW (default 64; AlibabaHPN 240, 120 with --dp; DCN+ 8)")
    ours = p.add_argument_group("beyond SimAI")
    ours.add_argument("-o", "--output", metavar="PATH", help="file to write, or an existing directory (or one ending "
                      "in '/') to write SimAI's file name into (default: SimAI's file name here)")
    ours.add_argument("-apl", "--ap_latency", help="ASW-PSW latency (default: -l, as SimAI uses)")
    ours.add_argument("--pods", type=integer, help="pods joined by a core tier above the PSWs (default 1: SimAI's fabric)")
    ours.add_argument("-csn", "--core_switch_num", type=integer, help="core switches (default: from --oversub)")
    ours.add_argument("--oversub", "--oversubscription", dest="oversubscription", type=positive_number,
                      help="PSW downlink:uplink bandwidth ratio that sizes the core tier (default 1: non-blocking)")
    ours.add_argument("-pcbw", "--pc_bandwidth", help="PSW-core bandwidth (default: -apbw)")
    ours.add_argument("-pcl", "--pc_latency", help="PSW-core latency (default: -apl)")
    return p


def output_path(output: str | None, name: str) -> str:
    """Where to write: SimAI's ``name`` in the working directory, in ``output`` when it is (or
    ends like) a directory, else ``output`` itself."""
    if output is None:
        return name
    if output.endswith(("/", os.sep)) or os.path.isdir(output):
        return os.path.join(output, name)
    return output


def generate(spec: FabricSpec, output: str | None = None) -> tuple[str, Layout]:
    """Build and write the topology of ``spec``; returns (path written, layout).  Raises ConfigError."""
    layout = plan(spec)
    path = output_path(output, layout.file_name)
    topo = build(spec, layout)
    try:
        topo.write(path)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path, layout


def main(argv: Sequence[str] | None = None) -> int:
    given = vars(build_parser().parse_args(argv))
    output = given.pop("output", None)
    spec = resolve(given)
    path, layout = generate(spec, output)
    # messages go out only once the file exists, so an error leaves one line and nothing else
    for warning in layout.warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    print(f"asw_switch_num: {layout.asws}")
    print(f"psw_switch_num: {layout.psws}")
    if layout.cores:
        print(f"core_switch_num: {layout.cores}")
    print(f"Creating Topology of totally {layout.segments} segment(s), totally {spec.pods} pod(s).")
    print(path)
    return 0


def cli() -> None:
    """The console entry point (pyproject.toml's [project.scripts])."""
    run_main(main, PROG)


if __name__ == "__main__":
    cli()

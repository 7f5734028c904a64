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
* ``-o/--output`` picks the file or the directory (SimAI writes into the working directory); a symbolic
  link there is refused, not written through (:func:`utils.io.guard_output`);
* ``-nvbw`` defaults to ``-gt``'s nominal NVLink rate per GPU per direction (H100: 3600Gbps = 450 GB/s, the
  rate calibration and the topo model call nominal; :func:`topo.templates.nominal_nvlink_bw`), not SimAI's
  2880Gbps for every type (give ``-nvbw 2880Gbps`` for SimAI's file byte for byte);
* a fabric above ``--max_items`` nodes + links (default 5 million) is refused before it is built;
* beyond SimAI: ``-topo NVL72`` / ``-topo NVL -gps N``, ``--pods`` with a core tier (``-csn``,
  ``--oversub``, ``-pcbw``, ``-pcl``) and ``-apl`` for the ASW-PSW latency (SimAI reuses ``-l``).
  See :mod:`topo.shapes` for the id order of the extra tier;
* the inside of a server (:mod:`topo.server`): ``--gpus_per_nic`` GPUs share a NIC behind PCIe switches
  (``--gpus_per_pcie_switch``, ``--sockets``, ``--pcie_bw``, ``--pcie_uplink_bw``, ``--socket_bw``,
  ``--pcie_latency``), ``--nvlink full|pairs|none``, and ``--server_nic_bw`` (a NIC rate per server).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import replace

from topo.server import SERVER_FLAGS, ServerSpec, build_servers, describe, plan_servers, resolve_server, with_suffix
from topo.shapes import Layout, build, file_name, plan, shape_name
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
    add("-nvbw", "--nvlink_bw", help="GPU-NVSwitch bandwidth (default: -gt's nominal NVLink rate per GPU and "
        "direction, H100 3600Gbps, A100 2400Gbps, B200 7200Gbps; SimAI writes 2880Gbps for every type)")
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
    inside = p.add_argument_group("inside a server (beyond SimAI's flags; written in SimAI's format, topo/server.py)")
    inside.add_argument("--gpus_per_nic", "--gpus-per-nic", type=integer, metavar="N",
                        help="GPUs sharing one NIC behind a PCIe switch (default: SimAI's one NIC link per GPU)")
    inside.add_argument("--gpus_per_pcie_switch", "--gpus-per-pcie-switch", type=integer, metavar="K",
                        help="GPUs per PCIe switch (default --gpus_per_nic: every GPU on its NIC's switch); NIC j of n "
                             "sits on switch j x switches / n")
    inside.add_argument("--sockets", type=integer, metavar="C", help="CPU sockets per server (default 2, 1 with one switch)")
    inside.add_argument("--pcie_bw", "--pcie-bw", metavar="RATE", help="GPU-PCIe switch bandwidth (default 512Gbps: Gen5 x16)")
    inside.add_argument("--pcie_uplink_bw", "--pcie-uplink-bw", metavar="RATE",
                        help="PCIe switch-CPU socket bandwidth (default --pcie_bw)")
    inside.add_argument("--socket_bw", "--socket-bw", metavar="RATE",
                        help="CPU socket-socket bandwidth (default 176Gbps: NCCL's SRP_QPI_BW, 22 GB/s)")
    inside.add_argument("--pcie_latency", "--pcie-latency", metavar="TIME", help="latency per PCIe hop (default 0.0001ms)")
    inside.add_argument("--nvlink", choices=("full", "pairs", "none"),
                        help="full: SimAI's NVSwitch per server (default); pairs: GPUs 2k and 2k+1 joined by NVLink "
                             "(-nvbw); none: GPUs of a server talk over PCIe")
    inside.add_argument("--server_nic_bw", "--server-nic-bw", metavar="RATE[,RATE...]",
                        help="NIC rate of each server, repeated in turn when shorter (default -bw for every server)")
    ours.add_argument("--max_items", "--max-items", type=integer, metavar="N",
                      help=f"largest topology written, in nodes + links (default {MAX_ITEMS:,}: a file of about "
                           f"{MAX_ITEMS * LINK_BYTES / 1e6:,.0f} MB built in about {MAX_ITEMS * BUILD_BYTES / 1e9:.1f} GB)")
    return p


MAX_ITEMS = 5_000_000
"""Nodes + links one topology may hold unless ``--max_items`` says otherwise (as the workload generators'
``--max_items``): 128K GPUs of Spectrum-X in 32 pods are 0.7 million."""
LINK_BYTES = 34
"""Bytes of one link line (``src dst 400Gbps 0.0005ms 0``; 131,072 GPUs: 17.6 MB for 524,288 links)."""
BUILD_BYTES = 260
"""Peak memory per link while the file is built and written (131,072 GPUs: 153 MB for 524,288 links)."""


def check_size(spec: FabricSpec, layout: Layout, limit: int | None = None) -> None:
    """Refuse a fabric above ``limit`` (:data:`MAX_ITEMS`) nodes + links before anything is built, with one
    line naming its size and the flags that drive it (``-g 10240000 --pods 20000`` asked for 41 million
    links and ran out of memory)."""
    limit = limit or MAX_ITEMS
    items = layout.total_nodes + layout.links
    if items <= limit:
        return
    drivers = [f"-g {spec.gpus}"] + ([f"--pods {spec.pods}"] if spec.pods > 1 else [])
    raise ConfigError(f"{' '.join(drivers)} makes {layout.total_nodes:,} nodes and {layout.links:,} links (a file of "
                      f"about {layout.links * LINK_BYTES / 1e6:,.0f} MB, {layout.links * BUILD_BYTES / 1e9:,.1f} GB of "
                      f"memory to build), above the limit of {limit:,} nodes + links (--max_items): lower "
                      f"{' or '.join(d.split()[0] for d in drivers)}, or raise --max_items if the machine has the memory")


def split_flags(text: str, flag: str = "--topo_gen") -> list[str]:
    """``text`` (a shell-quoted list of this generator's flags, as ``simulator search --topo_gen`` takes)
    as a list, or a :class:`ConfigError` naming ``flag`` (an unclosed quote is one line, not a traceback)."""
    import shlex

    try:
        return shlex.split(text)
    except ValueError as exc:
        raise ConfigError(f"{flag} {text!r}: {exc} (quote it as a shell would: --topo_gen \"-topo Spectrum-X\")") from None


def output_path(output: str | None, name: str) -> str:
    """Where to write: SimAI's ``name`` in the working directory, in ``output`` when it is (or
    ends like) a directory, else ``output`` itself."""
    if output is None:
        return name
    if output.endswith(("/", os.sep)) or os.path.isdir(output):
        return os.path.join(output, name)
    return output


def generate(spec: FabricSpec, output: str | None = None, max_items: int | None = None,
             server: ServerSpec | None = None) -> tuple[str, Layout]:
    """Build and write the topology of ``spec`` (with ``server`` inside every server, :mod:`topo.server`); returns
    (path written, the network's layout).  Raises ConfigError (a fabric above ``max_items`` nodes + links,
    :func:`check_size`) or :class:`utils.io.OutputError` (an output that is a symbolic link or a folder:
    :func:`utils.io.guard_output`), before anything is built."""
    from utils.io import guard_output

    if server is not None and server.hierarchy:
        layout, inside = plan_servers(spec, server)
        check_size(spec, replace(layout, gpus=inside.nodes - layout.asws - layout.psws - layout.cores, nvswitches=0,
                                 links=inside.links), max_items)
        name = file_name(spec, shape_name(spec))
    else:
        layout = plan(spec)
        check_size(spec, layout, max_items)
        name = layout.file_name
    if server is not None:
        name = with_suffix(name, spec, server)
    path = guard_output(output_path(output, name), None, "-o/--output")
    topo = build(spec, layout) if server is None else build_servers(spec, server)
    try:
        topo.write(path)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path, layout


def write_topology(argv: Sequence[str]) -> str:
    """Write the topology topo.gen's flags ``argv`` describe and return its path, printing nothing but topo.gen's
    warnings (for the commands that build topologies of their own, such as ``python -m simulator validate``)."""
    path, layout, _spec, _server = _write(argv)
    for warning in layout.warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    return path


def _write(argv: Sequence[str] | None) -> tuple[str, Layout, FabricSpec, ServerSpec | None]:
    given = vars(build_parser().parse_args(argv))
    output = given.pop("output", None)
    max_items = given.pop("max_items", None)
    if max_items is not None and max_items < 1:
        raise ConfigError(f"--max_items {max_items}: expected a positive number of nodes + links")
    inside = {k: given.pop(k) for k in list(given) if k in SERVER_FLAGS}
    if inside.get("nvlink", "full") != "full" and "nv_switch_per_server" in given:
        raise ConfigError(f"-nsps {given['nv_switch_per_server']} asks for NVSwitches, which --nvlink {inside['nvlink']} "
                          "has none of (--nvlink full keeps SimAI's NVSwitch per server)")
    spec = resolve(given)
    server = resolve_server(inside, spec)
    path, layout = generate(spec, output, max_items, server)
    return path, layout, spec, server


def main(argv: Sequence[str] | None = None) -> int:
    path, layout, spec, server = _write(argv)
    # messages go out only once the file exists, so an error leaves one line and nothing else
    for warning in layout.warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    print(f"asw_switch_num: {layout.asws}")
    print(f"psw_switch_num: {layout.psws}")
    if layout.cores:
        print(f"core_switch_num: {layout.cores}")
    print(f"Creating Topology of totally {layout.segments} segment(s), totally {spec.pods} pod(s).")
    if server is not None:
        print(describe(server, spec))
    print(path)
    return 0


def cli() -> None:
    """The console entry point (pyproject.toml's [project.scripts])."""
    run_main(main, PROG)


if __name__ == "__main__":
    cli()

"""Topologies: ``python -m topo.gen`` writes SimAI topology files; :mod:`topo.topology` reads and models them.

* :mod:`topo.gen` - the command line (SimAI's ``gen_Topo_Template.py`` flags and output).
* :mod:`topo.templates` - flags, defaults and templates -> :class:`FabricSpec`.
* :mod:`topo.shapes` - sizing and wiring (SimAI's five shapes, NVLink domains, pods and a core tier).
* :mod:`topo.topology` - :class:`Topology`, :func:`read_topology`, :func:`parse_topology`.
* :mod:`topo.paths` - :class:`Path` between two GPUs (hops, bottleneck bandwidth, latency).
* :mod:`topo.server` - the inside of a server: shared NICs behind PCIe switches, CPU sockets, NVLink pairs, NIC rates.
* :mod:`topo.hierarchy` - NCCL's GPU-NIC paths and PXN over a server's PCIe tree.
* :mod:`topo.node_kinds` - GPU, NVSwitch and packet-switch node kinds (both modules above use them).
* :mod:`topo.units` - bandwidth (bits per second) and latency (seconds) strings.
"""

from topo.paths import Path
from topo.topology import Link, Topology, parse_topology, read_topology

__all__ = ["Link", "Path", "Topology", "parse_topology", "read_topology"]

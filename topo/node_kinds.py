"""The kinds of node in a SimAI topology, shared by the model (:mod:`topo.topology`) and the router
(:mod:`topo.paths`): GPUs, NVSwitches and packet switches (ASW, PSW, core)."""

GPU, NVSWITCH, PACKET_SWITCH = 0, 1, 2
"""Node kinds (:attr:`topo.topology.Topology.node_kind`)."""

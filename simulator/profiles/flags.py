"""The simulator's profile flags (``--profile DIR --network_device NAME --compute_sku SKU``), kept apart
from :mod:`simulator.profiles.measured` so that a run without a profile parses them without loading the
profiling database's reader."""

from __future__ import annotations

from typing import Any

PROFILE_FLAGS = ("profile", "network_device", "compute_sku")
"""The parsed names of the flags; a run that gives none of them needs no profile."""


def add_flags(parser: Any) -> None:
    """``--profile DIR --network_device NAME [--compute_sku SKU]`` (the simulator's flags)."""
    group = parser.add_argument_group("profiles (python -m profiling)")
    group.add_argument("--profile", metavar="DIR", help="profiling database: collective times and compute times "
                       "measured on a cluster; measured points win, the models fill the gaps (the summary says which)")
    group.add_argument("--network_device", "--network-device", metavar="NAME",
                       help="the network profile to use (<DIR>/network/NAME; default: the only one)")
    group.add_argument("--compute_sku", "--compute-sku", metavar="SKU",
                       help="the compute profile to use (<DIR>/compute/SKU; default: --gpu_type in lower case when "
                            "the database has it)")

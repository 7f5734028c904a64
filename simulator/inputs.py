"""The files a simulator run reads, by the flag that names each: the inputs no output may resolve to."""

from __future__ import annotations

import argparse
import os
from typing import Any


def input_files(args: argparse.Namespace) -> dict[str, Any]:
    """Every file the run reads, by the flag that names it: what no output may resolve to (issue 28, item 1)."""
    inputs: dict[str, Any] = {}
    for flag, dest in (("-w/--workload", "workload"), ("-t/--topology", "topology"), ("-n/--network", "network"),
                       ("-c/--config", "ns3_config"), ("-busbw", "busbw"), ("--gpu_spec", "gpu_spec"),
                       ("--inference_config", "inference_config"), ("--placement", "placement")):
        value = getattr(args, dest, None)
        if value:
            inputs[flag] = value
    root = getattr(args, "profile", None)
    if root and os.path.isdir(root):
        inputs["--profile"] = [os.path.join(folder, name) for part in ("network", "compute")
                               for folder, _, names in os.walk(os.path.join(root, part)) for name in names]
    return inputs

"""What a SimAI workload's header says about inference (AICB 2.1's ``mode: 1``), read without the
inference simulator's imports: a training file's run checks this and goes on without them."""

from __future__ import annotations

import os
from typing import Any


def is_inference_workload(path: Any) -> bool:
    """Whether ``path`` is a SimAI workload file whose header says ``mode: 1`` (inference)."""
    if not isinstance(path, (str, os.PathLike)):
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            tokens = handle.readline(1 << 16).split()  # a header line is short; /dev/zero has no line end
    except OSError:
        return False
    return any(t == "mode:" and tokens[i + 1:i + 2] == ["1"] for i, t in enumerate(tokens))


def wants_topo(args: Any) -> bool:
    """Whether parsed ``python -m simulator`` flags ask ``--model topo`` (or give ``-t``) of an inference workload."""
    model = args.model or ("topo" if args.topology else "simai")
    return model == "topo" and args.workload is not None and is_inference_workload(args.workload)


SIMAI_NOTE = ("inference workload (mode: 1): SimAI 1.7 ignores the mode key and plays the records as a training "
              "iteration with empty backward columns, so its total is one step of the file's stage; --model topo "
              "reports TTFT/TPOT, throughput and memory")

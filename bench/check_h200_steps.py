"""Check the compute model's kernels against the H200's kernel traces of Megatron-core steps.

profiling/measurements/h200/megatron_core_steps/<case>.kernels.json holds every kernel of one step under
torch.profiler, grouped by kind (GEMMs, attention, optimizer, other elementwise, norms, ...).  This predicts the same
step (the validation suite's command: ``--transformer_impl local --no_apex``) kernel by kernel with the compute
model and prints both, per kind, beside the step's measured time.  Nothing is fitted here.

    python bench/check_h200_steps.py
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mocked_model.compute import gpu_spec, item_kernels  # noqa: E402
from simulator.validation import CASES  # noqa: E402
from utils.cli import parse_job  # noqa: E402
from workload_generator.megatron import MegatronWorkload  # noqa: E402

STEPS = ROOT / "profiling" / "measurements" / "h200" / "megatron_core_steps"
OPTIMIZER = ("adam", "AdamW", "gradient norm", "copy main", "NaN", "zero grad")


def kind_of(kernel) -> str:
    """The trace's grouping of a kernel of the compute model's lists."""
    if kernel.gemm is not None:
        return "gemm"
    if kernel.flash_flops:
        return "attention"
    if any(word in kernel.name for word in OPTIMIZER):
        return "optimizer"
    if kernel.name.startswith("norm "):
        return "norm"
    return "elementwise"


def predicted(case) -> Counter:
    """Milliseconds per kind of the case's step, every item of the single stage."""
    job, _ = parse_job([*case.job_flags, "--computation_enable"], "check", "")
    spec = gpu_spec("H200")
    out: Counter = Counter()
    for item in MegatronWorkload(job)().items:
        if not item.is_computation:
            continue
        for kernel in item_kernels(item, job.training.dtype, spec) or ():
            out[kind_of(kernel)] += kernel.ns(spec) / 1e6 * item.count
    return out


def measured(trace: dict) -> Counter:
    """Milliseconds per kind in the trace (its elementwise kinds together; the optimizer's profiler range left out)."""
    cats = trace["categories_ms"]
    out: Counter = Counter()
    for name, value in cats.items():
        kind = {"gemm": "gemm", "attention": "attention", "optimizer": "optimizer", "norm": "norm"}.get(name,
                                                                                                      "elementwise")
        if name != "memcpy":
            out[kind] += value["ms"]
    ranges = sum(k["ms"] for k in trace["top_kernels"] if k["name"].startswith("Optimizer.step#"))
    out["optimizer"] -= ranges  # torch.profiler's range of the step, not a kernel
    return out


def main() -> None:
    for case in CASES:
        path = STEPS / f"{case.name}.kernels.json"
        if case.suite not in ("h200_mcore", "h200_mcore_moe") or not path.exists():
            continue
        trace = json.loads(path.read_text())
        model, real = predicted(case), measured(trace)
        print(f"{case.name}: step {case.published_s * 1e3:.0f} ms measured, kernels {sum(model.values()):.0f} ms "
              f"predicted (the GPU was busy {trace['gpu_busy_ms']:.0f} ms of its {trace['span_ms']:.0f} ms span)")
        if "host_gap_ms" in trace:  # timeline_summary.py: the unprofiled step less the profiled kernels' busy time
            print(f"  {'host gap':<12} {'':>18} measured {trace['host_gap_ms']:8.1f} ms (the GPU idle per step; "
                  f"{trace['kernel_launch_calls']} kernel launches)")
        for kind in ("gemm", "attention", "elementwise", "norm", "optimizer"):
            if model[kind] or real[kind]:
                print(f"  {kind:<12} predicted {model[kind]:8.1f} ms   measured {real[kind]:8.1f} ms")


if __name__ == "__main__":
    main()

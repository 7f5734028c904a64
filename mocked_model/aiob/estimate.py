"""Write the compute model's estimate of a job's computation as a compute file (docs/formats.md section 6),
for GPUs nobody profiled; every consumer reads it like a measurement, and its labels say it is not one.

    python -m mocked_model.aiob.estimate --gpu_type H100 --model_name llama3_8B --seq_length 4096 \\
        --tensor_model_parallel_size 1 -o h100.txt

Default output: ``results/aiob_outputs/<AICB's AIOB name without .txt>-estimate-<GPU>.txt`` (under
``--output_dir`` when given).
"""

from __future__ import annotations

import os
import sys

from mocked_model.aiob.layout import aiob_filename, estimated_compute_file
from mocked_model.compute import gpu_spec
from utils.cli import parse_job, run_main
from utils.io import guard_output

PROG = "python -m mocked_model.aiob.estimate"


def main(argv: list[str] | None = None) -> int:
    job, values = parse_job(argv, PROG, "Write the compute model's estimate of a job's computation times (AIOB format).")
    gpu = gpu_spec(job.training.gpu_type)
    path = values.get("output")
    if not path:
        name = aiob_filename(job, values)[: -len(".txt")] + f"-estimate-{gpu.name}.txt"
        path = os.path.join(values.get("output_dir") or "results", "aiob_outputs", name)
    # not an input, not a symbolic link; a killed writer's temporaries beside it removed
    guard_output(path, {"--gpu_spec": values.get("gpu_spec"), "--comp_filepath": values.get("comp_filepath")},
                 "-o/--output" if values.get("output") else "the compute file")
    compute = estimated_compute_file(job, gpu)
    compute.write(path)
    print(f"compute-model estimate for {gpu.name} ({job.training.dtype}): {len(compute.sections)} sections written to {path}")
    return 0


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]), PROG)

"""``scripts/inference_workload_with_aiob.sh``: AICB 2.1's script, its flags and defaults, running
``SimAI_inference_workload_generator`` in this process.

    sh scripts/inference_workload_with_aiob.sh -m deepseek-671B -a
    sh scripts/inference_workload_with_aiob.sh -m qwen3-235B -c ./scripts/inference_configs/qwen3_moe_default.json \\
        -s 1024 -b 4 -w 32 -e 32 -p prefill

Flags: ``-m`` model size (``deepseek-671B``, ``qwen3-235B``, ``qwen3-next-80B``), ``-c`` config, ``-p``
phase, ``-s`` sequence length, ``-b`` micro-batch, ``-w`` world size, ``-t`` tp, ``-e`` ep, ``-l`` pp,
``-M`` MoE (always on), ``-r`` result directory, ``-a`` AIOB, ``-f`` AIOB loops, ``-h`` help; each also
with AICB's long names (``--model_size`` ... as the script matches them, ``--model-size`` ... as its help
prints them).  Defaults as AICB's: deepseek-671B, decode, 1024, 32, 8 GPUs, tp 1, ep 8, pp 1, AIOB off, 10
loops.  Unlike AICB's script, which stops reading at the first flag it does not know and drops the rest,
the remaining flags go on to the Python entry (``--gpu_type H200``, ``--compute_source``, ...), which
checks them.
"""

from __future__ import annotations

import os
import shlex
import sys

from utils.cli import run_main
from utils.errors import ConfigError
from utils.inference_config import AICB_NAMES, SCRIPT_SIZES, default_config_path

PROG = "inference_workload_with_aiob.sh"
VALUES = {
    "model_size": ("-m", "--model_size", "--model-size"),
    "config": ("-c", "--config"),
    "phase": ("-p", "--phase"),
    "seq_length": ("-s", "--seq_length", "--seq-length"),
    "micro_batch": ("-b", "--micro_batch", "--micro-batch"),
    "world_size": ("-w", "--world_size", "--world-size"),
    "tensor_model_parallel_size": ("-t", "--tensor_model_parallel_size", "--tp-size"),
    "expert_model_parallel_size": ("-e", "--expert_model_parallel_size", "--ep-size"),
    "pipeline_model_parallel": ("-l", "--pipeline_model_parallel", "--pp-size"),
    "result_dir": ("-r", "--result_dir", "--result-dir"),
    "aiob_forward_loops": ("-f", "--aiob_forward_loops", "--aiob-loops"),
}
SWITCHES = {"moe_enable": ("-M", "--moe_enable", "--moe-enable"), "aiob_enable": ("-a", "--aiob_enable", "--aiob-enable")}
DEFAULTS = {"model_size": "deepseek-671B", "config": "", "phase": "decode", "seq_length": "1024", "micro_batch": "32",
            "world_size": "8", "tensor_model_parallel_size": "1", "expert_model_parallel_size": "8",
            "pipeline_model_parallel": "1", "result_dir": "results/workload/", "aiob_forward_loops": "10"}
USAGE = f"""Usage: {PROG} [OPTIONS] [generator flags]

  Generate an inference workload for SimAI (AICB 2.1's script).

Options:
  -m, --model-size <SIZE>   {{deepseek-671B, qwen3-235B, qwen3-next-80B}} (default: deepseek-671B)
  -c, --config <FILE>       model config (default: scripts/inference_configs/<model>_default.json)
  -p, --phase <PHASE>       {{prefill, decode}} (default: decode)
  -s, --seq-length <LEN>    sequence length (default: 1024)
  -b, --micro-batch <SIZE>  micro batch size (default: 32)
  -w, --world-size <SIZE>   number of GPUs (default: 8)
  -t, --tp-size <SIZE>      tensor parallel size (default: 1)
  -e, --ep-size <SIZE>      expert parallel size (default: 8)
  -l, --pp-size <SIZE>      pipeline parallel size (default: 1)
  -M, --moe-enable          MoE (always on)
  -r, --result-dir <DIR>    result directory (default: results/workload/)
  -a, --aiob-enable         time the computation on this device (AIOB)
  -f, --aiob-loops <LOOPS>  AIOB forward loops (default: 10)
  -h, --help                this help
Further flags go to python -m workload_generator.SimAI_inference_workload_generator (see its --help):
  --gpu_type H200 estimates the computation with the compute model.
Every flag against AICB's script: docs/aicb_scripts.md
"""


def parse(argv: list[str]) -> tuple[dict[str, str], set[str], list[str]]:
    """(values, switches given, the rest) of the script's arguments."""
    names = {n: dest for dest, ns in VALUES.items() for n in ns}
    switches = {n: dest for dest, ns in SWITCHES.items() for n in ns}
    values, given, rest = dict(DEFAULTS), set(), []
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, inline = arg.partition("=")
        if arg in ("-h", "--help"):
            print(USAGE, end="")
            raise SystemExit(0)
        if flag in names:
            if eq:
                values[names[flag]] = inline
            elif i + 1 < len(argv):
                values[names[flag]] = argv[i + 1]
                i += 1
            else:
                raise ConfigError(f"{flag} needs a value (see -h)")
        elif arg in switches:
            given.add(switches[arg])
        else:
            rest.append(arg)
        i += 1
    return values, given, rest


def command(argv: list[str]) -> list[str]:
    """The arguments of ``SimAI_inference_workload_generator`` that AICB's script would pass."""
    values, given, rest = parse(argv)
    size = values["model_size"]
    if size not in SCRIPT_SIZES:
        raise ConfigError(f"invalid model size {size!r} (-m): one of {', '.join(SCRIPT_SIZES)}")
    kind = SCRIPT_SIZES[size]
    config = values["config"] or default_config_path(kind)
    args = [AICB_NAMES[kind], config]
    for dest in ("phase", "seq_length", "micro_batch", "world_size", "tensor_model_parallel_size",
                 "expert_model_parallel_size", "pipeline_model_parallel"):
        args += [f"--{dest}", values[dest]]
    args.append("--moe_enable")
    args += ["--result_dir", values["result_dir"]]
    if "aiob_enable" in given:
        args.append("--aiob_enable")
    args += ["--aiob_forward_loops", values["aiob_forward_loops"]]
    return args + rest


def main(argv: list[str] | None = None) -> int:
    args = command(list(sys.argv[1:] if argv is None else argv))
    print("python -m workload_generator.SimAI_inference_workload_generator " + shlex.join(args), flush=True)
    from workload_generator.SimAI_inference_workload_generator import main as generate

    return generate(args)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    run_main(lambda: main(sys.argv[1:]), PROG)

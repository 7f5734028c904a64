"""AICB's shell entries (``scripts/megatron_gpt.sh``, ``scripts/megatron_workload_with_aiob.sh``,
``scripts/deepspeed_llama.sh``): their flags, their per-size defaults, and the command they run.

AICB's scripts assign a model size's defaults (tp, pp, ...) after reading the flags, silently
replacing what the user typed.  Here a size only fills in what the user did not give.  Flags the
scripts do not know are passed on to the Python entry, which checks them: before a replay, once, in
this process's ``aicb.py --check``, so that a bad flag is one line and exit status 2 rather than one
line per worker and torchrun's failure report.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field

from utils.errors import ConfigError


@dataclass
class Script:
    """One AICB script: its value flags (with aliases), switches, defaults and size defaults."""

    name: str
    values: dict[str, tuple[str, ...]]
    switches: dict[str, tuple[str, ...]]
    defaults: dict[str, str]
    size_defaults: dict[str, dict[str, str]] = field(default_factory=dict)


_COMMON_VALUES = {
    "frame": ("--frame", "--comm_frame"),
    "world_size": ("--world_size",),
    "tensor_model_parallel_size": ("--tensor_model_parallel_size", "--tp_num", "tp_num", "--tp"),
    "pipeline_model_parallel": ("--pipeline_model_parallel_size", "--pipeline_model_parallel", "--pp_num", "pp_num",
                                "--pp"),
    "context_parallel_size": ("--context_parallel_size",),
    "global_batch": ("--global_batch",),
    "micro_batch": ("--micro_batch",),
    "num_layers": ("--num_layers",),
    "seq_length": ("--seq_length",),
    "hidden_size": ("--hidden_size",),
    "epoch_num": ("--epoch_num",),
    "num_attention_heads": ("--num_attention_heads",),
    "ffn_hidden_size": ("--ffn_hidden_size",),
    "comp_filepath": ("--comp_filepath",),
    "model_size": ("-m", "--model_size"),
    "model_name": ("--model_name",),
    "max_position_embeddings": ("--max_position_embeddings",),
    "moe_router_topk": ("--moe_router_topk", "--topk"),
    "num_experts": ("--num_experts", "--experts", "--num_moe_experts"),
    "expert_model_parallel_size": ("--expert_model_parallel_size", "--ep", "--expert_parallel_size"),
    "gpu_type": ("--gpu_type",),
    "output": ("--output", "-o"),
    "nnodes": ("--nnodes",),
    "node_rank": ("--node_rank",),
    "nproc_per_node": ("--nproc_per_node",),
    "master_addr": ("--master_addr",),
    "master_port": ("--master_port",),
}
_COMMON_SWITCHES = {
    "aiob_enable": ("--aiob_enable", "--aiob"),
    "enable_visual": ("--enable_visual",),
    "workload_only": ("--workload_only",),
    "use_flash_attn": ("--use_flash_attn", "--flash_attn"),
    "swiglu": ("--swiglu",),
    "enable_sequence_parallel": ("--sp", "--sp-enable", "--enable_sequence_parallel"),
    "moe_enable": ("--moe_enable", "--moe_enabled", "--me_enable"),
    "moe_grouped_gemm": ("--grouped_gemm", "--moe_grouped_gemm"),
    "recompute_activations": ("--recompute_activations", "--recompute"),
    "use_distributed_optimizer": ("--use_distributed_optimizer", "--use-distributed-optimizer"),
}

# megatron_gpt.sh: tp 8 unless a size says otherwise, global batch = 2 micro-batches per replica,
# the distributed optimizer always on.
# Both Megatron scripts pass --max_position_embeddings=4096 and --use-distributed-optimizer with every size.
MEGATRON_GPT = Script(
    "megatron_gpt", _COMMON_VALUES, _COMMON_SWITCHES,
    defaults={"frame": "Megatron", "model_size": "13", "seq_length": "2048", "micro_batch": "1", "epoch_num": "1",
              "tensor_model_parallel_size": "8", "pipeline_model_parallel": "1", "context_parallel_size": "1",
              "max_position_embeddings": "4096"},
    size_defaults={"405": {"pipeline_model_parallel": "16"}, "65": {"pipeline_model_parallel": "2"},
                   "moe": {"tensor_model_parallel_size": "2"}},
)
# megatron_workload_with_aiob.sh: 32 GPUs, tp 8 (4 for -m 7 and moe, 1 for DeepSeek), global batch 1024, seq 4096.
_DEEPSEEK_TP = {"tensor_model_parallel_size": "1"}
MEGATRON_WORKLOAD_WITH_AIOB = Script(
    "megatron_workload_with_aiob", _COMMON_VALUES, _COMMON_SWITCHES,
    defaults={"frame": "Megatron", "model_size": "13", "world_size": "32", "tensor_model_parallel_size": "8",
              "pipeline_model_parallel": "1", "global_batch": "1024", "micro_batch": "1", "seq_length": "4096",
              "epoch_num": "1", "max_position_embeddings": "4096"},
    size_defaults={"7": {"tensor_model_parallel_size": "4"}, "moe": {"tensor_model_parallel_size": "4"},
                   "deepseek": _DEEPSEEK_TP, "deepseek16": _DEEPSEEK_TP, "deepseek236": _DEEPSEEK_TP,
                   "deepseek671": _DEEPSEEK_TP},
)
_SIZE_SWITCHES = {"moe": {"moe_grouped_gemm"}}
"""Switches a size turns on in both Megatron scripts (-m moe: grouped GEMM)."""
FORCED_BY_AICB = {("megatron_workload_with_aiob", "deepseek"): {"tensor_model_parallel_size": "1"}}
"""Values AICB's script forces over the user's flags for a size family; ours only defaults them and says so."""
SCRIPTS = {s.name: s for s in (MEGATRON_GPT, MEGATRON_WORKLOAD_WITH_AIOB)}

# deepspeed_llama.sh: LLaMA -m 7/13/30/65 (7 by default), ZeRO stage 3, 10 iterations, micro-batch 4,
# one micro-batch per replica (global batch = world x micro-batch).  Each flag sets what it names:
# AICB's script stores --max_live_parameters in the prefetch bucket and lets --contiguous-gradients
# swallow the flag after it.
DEEPSPEED_LLAMA = Script(
    "deepspeed_llama",
    {**_COMMON_VALUES,
     "model_name": ("--model_name", "--model-name"),
     "model_size": ("-m", "--model_size", "--model-size"),
     "stage": ("--stage", "--zero_stage", "--zero-stage"),
     "epoch_num": ("--epoch_num", "--epoch-num"),
     "micro_batch": ("--micro_batch", "--batch_size", "--batch-size"),
     "seq_length": ("--seq_length", "--seq_len", "--seq-len"),
     "reduce_bucket_size": ("--reduce_bucket_size", "--reduce-bucket-size"),
     "allgather_bucket_size": ("--allgather_bucket_size", "--allgather-bucket-size"),
     "prefetch_bucket_size": ("--prefetch_bucket_size", "--prefetch-bucket-size"),
     "max_live_parameters": ("--max_live_parameters", "--max-live-parameters"),
     "param_persistence_threshold": ("--param_persistence_threshold", "--param-persistence-threshold"),
     "model_persistence_threshold": ("--model_persistence_threshold", "--model-persistence-threshold")},
    {**_COMMON_SWITCHES,
     "contiguous_gradients": ("--contiguous_gradients", "--contiguous-gradients"),
     "amp_enabled": ("--amp_enabled", "--amp-enabled")},
    defaults={"frame": "DeepSpeed", "model_size": "7", "stage": "3", "epoch_num": "10", "micro_batch": "4",
              "seq_length": "2048"},
)
SCRIPTS[DEEPSPEED_LLAMA.name] = DEEPSPEED_LLAMA
# coll_comm_check.sh: a collective sweep over every GPU of the job (4 KiB .. 8 GiB, 500 iterations each);
# --multi_all_reduce_enable 1 runs AICB's multi all-reduce test with one pipeline stage per node.
COLL_COMM_CHECK = Script(
    "coll_comm_check",
    {"model_name": ("--model_name", "--model-name"), "iter_num": ("--iter_num", "--iter-num"),
     "begin_size": ("--begin_size", "--begin-size"), "end_size": ("--end_size", "--end-size"),
     "test_comm": ("--test_comm", "--test-comm"),
     "multi_all_reduce_enable": ("--multi_all_reduce_enable", "--muti-all-reduce-enable", "--multi-all-reduce-enable"),
     "world_size": ("--world_size",), "nnodes": ("--nnodes",), "node_rank": ("--node_rank",),
     "nproc_per_node": ("--nproc_per_node",), "master_addr": ("--master_addr",), "master_port": ("--master_port",)},
    {"enable_visual": ("--enable_visual",), "workload_only": ("--workload_only",)},
    defaults={"frame": "collective_test", "model_name": "all_reduce", "iter_num": "500", "begin_size": "4096",
              "end_size": "8589934592", "test_comm": "all_reduce", "multi_all_reduce_enable": "0", "epoch_num": "1"},
)
SCRIPTS[COLL_COMM_CHECK.name] = COLL_COMM_CHECK
# Uneven stages for Llama 3 405B on 16 stages (7 + 14 x 8 + 7 = 126 layers), as Meta trained it.
_UNEVEN = {("405", "16"): ("7", "7")}


def parse_script_args(script: Script, argv: list[str]) -> tuple[dict[str, str], set[str], list[str]]:
    """Split ``argv`` into the script's values, its switches, and the rest (passed on)."""
    values: dict[str, str] = {}
    switches: set[str] = set()
    rest: list[str] = []
    by_flag = {flag: key for key, flags in script.values.items() for flag in flags}
    switch_by_flag = {flag: key for key, flags in script.switches.items() for flag in flags}
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, inline = arg.partition("=")
        if flag in by_flag:
            if eq:
                values[by_flag[flag]] = inline
            else:
                if i + 1 >= len(argv):
                    raise ConfigError(f"{flag} needs a value")
                values[by_flag[flag]] = argv[i + 1]
                i += 1
        elif arg in switch_by_flag:
            switches.add(switch_by_flag[arg])
        else:
            rest.append(arg)
        i += 1
    return values, switches, rest


def command_for(script: Script, argv: list[str], gpus_on_node: int | None = None,
                notes: list[str] | None = None) -> list[str]:
    """The command the script runs for ``argv`` (the generator, or torchrun for a replay).  ``notes``
    collects what the user should know (a value AICB's script would have forced)."""
    given, switches, rest = parse_script_args(script, argv)
    values = dict(script.defaults)
    size = given.get("model_size", values.get("model_size"))
    if "model_name" in given and "model_size" not in given:
        values.pop("model_size", None)
        size = None
    key = str(size).lower() if size is not None else None
    values.update(script.size_defaults.get(key, {}))
    switches |= _SIZE_SWITCHES.get(key, set()) if script in (MEGATRON_GPT, MEGATRON_WORKLOAD_WITH_AIOB) else set()
    family = "deepseek" if key and key.startswith("deepseek") else key
    for flag, forced in FORCED_BY_AICB.get((script.name, family), {}).items():
        if flag in given and given[flag] != forced and notes is not None:
            notes.append(f"AICB's {script.name}.sh forces --{flag} {forced} for -m {size}; keeping your {given[flag]}")
    values.update(given)
    if size is not None:
        values["model_size"] = str(size)
    nnodes = int(values.pop("nnodes", os.environ.get("WORLD_SIZE", "1")))
    launcher = {k: values.pop(k) for k in ("node_rank", "master_addr", "master_port") if k in values}
    nproc_given = values.pop("nproc_per_node", None)
    on_node = gpus_on_node or _gpus_on_node()
    if nproc_given is not None:
        nproc = int(nproc_given)
    elif on_node is None and "world_size" in values and int(values["world_size"]) % nnodes == 0:
        nproc = int(values["world_size"]) // nnodes  # no GPUs to count: one process per rank of the job
    else:
        nproc = on_node or 8
    if "world_size" not in values:
        values["world_size"] = str(nnodes * nproc)
    if script is COLL_COMM_CHECK:
        if values.get("multi_all_reduce_enable", "0") != "0":
            values["pipeline_model_parallel"] = str(nnodes)
        return _launch(script, values, switches, rest, nnodes, nproc, launcher)
    world, tp = int(values["world_size"]), int(values.get("tensor_model_parallel_size", 1))
    pp, cp = int(values.get("pipeline_model_parallel", 1)), int(values.get("context_parallel_size", 1))
    # micro-batches per replica when the global batch is not given: 2, or 1 in deepspeed_llama.sh
    per_replica = 1 if script is DEEPSPEED_LLAMA else 2
    if "global_batch" not in values and world % (tp * pp * cp) == 0:
        values["global_batch"] = str(per_replica * (world // (tp * pp * cp)) * int(values["micro_batch"]))
    uneven = _UNEVEN.get((str(size), values.get("pipeline_model_parallel", "1")))
    if uneven and "num_layers" not in given:
        rest = ["--decoder_first_pipeline_num_layers", uneven[0], "--decoder_last_pipeline_num_layers", uneven[1], *rest]
    if script in (MEGATRON_GPT, MEGATRON_WORKLOAD_WITH_AIOB):
        switches.add("use_distributed_optimizer")
    return _launch(script, values, switches, rest, nnodes, nproc, launcher)


def _launch(script: Script, values: dict[str, str], switches: set[str], rest: list[str], nnodes: int, nproc: int,
            launcher: dict[str, str]) -> list[str]:
    args = [f"--{key}={value}" if not key.startswith("-") else key for key, value in values.items()]
    args += ["--use-distributed-optimizer" if s == "use_distributed_optimizer" else f"--{s}" for s in sorted(switches)]
    args += rest
    if script is MEGATRON_WORKLOAD_WITH_AIOB:
        return [sys.executable, "-m", "workload_generator.SimAI_training_workload_generator", *args]
    visual = "enable_visual" in switches
    if script is DEEPSPEED_LLAMA and "workload_only" in switches and not visual:
        entry = "generate_deepspeed_stage3_workload" if values.get("stage") == "3" else "generate_deepspeed_stage1_2_workload"
        return [sys.executable, "-m", f"workload_generator.{entry}", *args]
    if "workload_only" in switches:
        if visual or script is COLL_COMM_CHECK:  # aicb.py writes the page (the generator entries write files only)
            return [sys.executable, "aicb.py", *args]
        return [sys.executable, "-m", "workload_generator.generate_megatron_workload", *args]
    launch = [*_torchrun(), "--nnodes", str(nnodes), "--nproc_per_node", str(nproc)]
    for key in ("node_rank", "master_addr", "master_port"):
        if key in launcher:
            launch += [f"--{key}", launcher[key]]
    return [*launch, "aicb.py", *args]


def _torchrun() -> list[str]:
    """torchrun, or this Python's ``-m torch.distributed.run`` when only the module is there; without torch,
    one line that says what to install."""
    beside = os.path.join(os.path.dirname(sys.executable), "torchrun")  # this Python's environment, not activated
    found = shutil.which("torchrun") or (beside if os.access(beside, os.X_OK) else None)
    if found:
        return [found]
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        return [sys.executable, "-m", "torch.distributed.run"]
    raise ConfigError("the replay runs under torchrun, which is not installed: install the torch extra, pip install "
                      "'.[torch]', or use the toolkit's environment (. .venv/bin/activate, made by python3 make.py "
                      "setup); --workload_only needs no torch")


def _gpus_on_node() -> int | None:
    """GPUs on this node (``nvidia-smi -L``), or ``None`` on a machine without NVIDIA's tools or GPUs."""
    if shutil.which("nvidia-smi"):
        try:
            listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
            count = sum(1 for line in listing.splitlines() if line.startswith("GPU "))
            if count:
                return count
        except (OSError, subprocess.SubprocessError):
            pass
    return None


_LAUNCH_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID")
"""What a launcher sets for its workers; the check runs as a process no launcher started."""


def check_replay(cmd: list[str]) -> int:
    """Before torchrun starts its workers, run their checks once here (``aicb.py ... --check``: the
    flags, the layout, every stage's workload); returns its exit status, having printed its error when
    it failed (0 for a command that is not a torchrun replay)."""
    if "aicb.py" not in cmd or cmd[0] == sys.executable:
        return 0
    args = cmd[cmd.index("aicb.py") + 1:]
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARIABLES}
    done = subprocess.run([sys.executable, "aicb.py", *args, "--check"], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        if done.returncode != 2:  # not a user error: show everything
            sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr)
        sys.stderr.flush()
    return done.returncode


SUMMARIES = {
    "megatron_gpt": ("Replay a Megatron training job under torchrun (one process per GPU of this node), or with "
                     "--workload_only write its workload CSV.",
                     "aicb.py under torchrun, or python -m workload_generator.generate_megatron_workload with "
                     "--workload_only"),
    "megatron_workload_with_aiob": ("Write the SimAI workload (.txt) of a Megatron job, its compute times from "
                                    "--comp_filepath, --aiob_enable or --gpu_type.",
                                    "python -m workload_generator.SimAI_training_workload_generator"),
    "deepspeed_llama": ("Replay a DeepSpeed ZeRO job of LLaMA under torchrun, or with --workload_only write its "
                        "workload CSV.",
                        "aicb.py under torchrun, or python -m workload_generator.generate_deepspeed_stage3_workload "
                        "(stage1_2 for --stage 1 or 2) with --workload_only"),
    "coll_comm_check": ("Sweep one collective over every GPU of the job under torchrun (nccl-tests style), AICB's "
                        "collective check.", "aicb.py --frame collective_test under torchrun"),
}
"""What each script does and the entry its other flags go to (its ``--help`` lists them)."""


def usage(script: Script) -> str:
    """The script's own ``--help``: its flags with their defaults, where the rest goes, and the document."""
    summary, entry = SUMMARIES[script.name]
    flags = [f"{flags[0]}" + (f" ({script.defaults[key]})" if key in script.defaults else "")
             for key, flags in script.values.items()]
    switches = [flags[0] for flags in script.switches.values()]
    wrap = textwrap.TextWrapper(width=110, initial_indent="  ", subsequent_indent="  ")
    lines = [f"usage: sh scripts/{script.name}.sh [SCRIPT FLAGS] [OTHER FLAGS]", "", *textwrap.wrap(summary, 110), "",
             "Script flags (defaults; AICB's aliases are accepted too):", *wrap.wrap(", ".join(flags)),
             "Switches:", *wrap.wrap(", ".join(switches))]
    if script.size_defaults:
        sizes = "; ".join(f"-m {size}: " + ", ".join(f"--{k} {v}" for k, v in values.items())
                          for size, values in script.size_defaults.items())
        lines += ["A model size fills in only what you did not give:", *wrap.wrap(sizes)]
    lines += ["", *textwrap.wrap(f"Every other flag is passed on to {entry}, which checks it (see its --help).", 110),
              "Every flag and alias, against AICB's script: docs/aicb_scripts.md", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in SCRIPTS:
        raise ConfigError(f"usage: python -m utils.aicb_scripts {{{'|'.join(SCRIPTS)}}} [flags]")
    if any(arg in ("-h", "--help") for arg in argv[1:]):
        print(usage(SCRIPTS[argv[0]]), end="")
        return 0
    notes: list[str] = []
    cmd = command_for(SCRIPTS[argv[0]], argv[1:], notes=notes)
    for note in notes:
        print(f"note: {note}", file=sys.stderr, flush=True)
    status = check_replay(cmd)
    if status != 0:
        return status
    print("+ " + shlex.join(cmd), flush=True)
    return subprocess.run(cmd).returncode


if __name__ == "__main__":
    from utils.cli import run_main

    run_main(lambda: main(sys.argv[1:]), "aicb script")

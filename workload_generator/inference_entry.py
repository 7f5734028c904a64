"""What the inference entries share: their flags (AICB 2.1's, :data:`utils.cli.INFERENCE`), the job they
describe, and generating, timing and writing its files.

    python -m workload_generator.SimAI_inference_workload_generator MODEL [CONFIG] --phase decode ...
    python -m workload_generator.Vidur_workload_generator MODEL [CONFIG] ...
    python aicb.py --frame Inference --model_name MODEL [--inference_config CONFIG] ... [--workload_only]

Bad input (an unknown model, a layout that does not divide the experts or the heads, a phase other than
prefill or decode, a config missing a key, a batch that does not fit the GPU) ends with one line and exit
status 2 before any file is written.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from typing import Any

from utils.cli import CliParser
from utils.cli_flags import INFERENCE, add_flags
from utils.inference_config import resolve_model
from utils.inference_job import InferenceJob
from utils.workload import Workload
from workload_generator.compute_times import FillReport, print_report
from workload_generator.limits import check_inference

MAX_AIOB_LOOPS = 1000
"""``--aiob_forward_loops`` at most: AICB's scripts time 10 passes, and a larger count only lengthens the run."""


def build_parser(prog: str, description: str, positional: bool = True,
                 extra: Callable[[argparse.ArgumentParser], None] | None = None) -> CliParser:
    """The inference flags; ``positional``: AICB's ``MODEL [CONFIG]`` arguments (else ``--model_name`` and
    ``--inference_config``)."""
    parser = CliParser(prog=prog, description=description, allow_abbrev=False)
    if positional:
        parser.add_argument("model_name", metavar="MODEL", help="DeepSeek-671B, Qwen3-Moe-235B, Qwen3-Next-80B (or a "
                            "name containing DeepSeek, Qwen3-Moe or Qwen3-Next), any preset (llama3_70B, mixtral_8x7B, "
                            "deepseek_v3, ...) or llama2_7B/13B/70B, qwen3_0.6B/4B/8B/14B/32B")
        parser.add_argument("config_file", metavar="CONFIG", nargs="?", default=None,
                            help="AICB's JSON config of the model (default: AICB's default config of its kind)")
    add_flags(parser.add_argument_group("inference"), INFERENCE)
    if extra is not None:
        extra(parser)
    return parser


def job_from(values: dict[str, Any]) -> InferenceJob:
    """The validated job the parsed flags describe.  Raises :class:`~utils.errors.UserError`."""
    model = resolve_model(values["model_name"], values.get("config_file"))
    return InferenceJob(
        model=model, phase=values["phase"], seq_length=values["seq_length"], micro_batch=values["micro_batch"],
        world_size=values["world_size"], tp=values["tensor_model_parallel_size"], pp=values["pipeline_model_parallel"],
        ep=values["expert_model_parallel_size"], pp_rank=values["pp_rank"], weight_dtype=values["dtype"],
        kv_dtype=values["kv_dtype"], dispatch_fp8=values["dispatch_dtype"] == "fp8",
        routing=values["moe_routing_strategy"], routing_skew=values["moe_routing_skew"], seed=values["seed"],
        gpu_type=values["gpu_type"], epoch_num=values.get("epoch_num", 1), model_name=values["model_name"],
        moe_tp=values.get("moe_tp", False), speculative_tokens=values.get("speculative_tokens", 0),
        host=values.get("host"))


def parse(argv: Sequence[str] | None, prog: str, description: str) -> tuple[InferenceJob, dict[str, Any]]:
    values = vars(build_parser(prog, description).parse_args(argv))
    return job_from(values), values


def generate(job: InferenceJob, values: dict[str, Any],
             log: Callable[[str], None] | None = print) -> tuple[Workload, FillReport, Any]:
    """The timed workload of the job's stage and its memory use (checked against ``--gpu_type``)."""
    from mocked_model.inference_memory import check_fits
    from workload_generator.inference import default_aiob_path, default_source, timed_step

    check_inference(job, values)
    loops = values.get("aiob_forward_loops", 1)
    if loops > MAX_AIOB_LOOPS:
        from utils.errors import ConfigError

        raise ConfigError(f"--aiob_forward_loops {loops:,}: more than the {MAX_AIOB_LOOPS:,} timed passes per operation "
                          "taken (AICB's scripts time 10; each pass runs every operation of the layer once more)")
    memory = check_fits(job)
    aiob_path = default_aiob_path(job)
    source = default_source(job, values.get("compute_source"), values.get("aiob_enable", False),
                            values.get("comp_filepath"), aiob_path)
    workload, report = timed_step(job, source, values.get("comp_filepath"), values.get("aiob_forward_loops", 1),
                                  aiob_path, log, explicit=values.get("compute_source") == "file")
    return workload, report, memory


def step_items(workload: Workload) -> list:
    """The items of one step (the workload's second block)."""
    blocks = workload.iterations()
    return blocks[1] if len(blocks) > 1 else []


def describe(job: InferenceJob) -> str:
    layers = job.stage_layers()[job.pp_rank]
    return (f"{job.name} {job.phase}: {job.tokens} tokens per replica ({job.micro_batch} sequences, "
            f"{'context' if job.decode else 'prompt'} {job.seq_length}), tp {job.tp} x pp {job.pp} x {job.dp} replicas, "
            f"ep {job.ep}; stage {job.pp_rank}: layers {layers[0]}..{layers[0] + layers[1] - 1}")


def simai_main(argv: Sequence[str] | None, prog: str) -> int:
    """``SimAI_inference_workload_generator``: write the SimAI inference workload (.txt)."""
    from workload_generator.simai_inference import default_paths, name_job, simai_inference_workload

    job, values = parse(argv, prog, "Write the SimAI inference workload (.txt) of a prefill or decode step.")
    path = _output(values, default_paths(job, values["result_dir"])[0], prog)
    workload, report, memory = generate(job, values)
    simai, _layers, dropped = simai_inference_workload(job, step_items(workload), workload.compute_source != "placeholder")
    name_job(simai, job, path)
    simai.write(path)
    print(describe(job))
    print_report(report)
    print(memory.summary())
    if dropped:
        print("not in SimAI's format (left out): " + ", ".join(f"{k} x{v}" for k, v in sorted(dropped.items())))
    print(f"workload save in : {path} ({len(simai.records)} records)")
    return 0


def _output(values: dict[str, Any], default: str, prog: str) -> str:
    """The file to write (``--output``, else AICB's name ``default``), checked before any work: not the model's JSON
    config or another input, not a symbolic link (:func:`workload_generator.entry.prepare_output`)."""
    from workload_generator.entry import prepare_output

    given = bool(values.get("output"))
    return prepare_output(values["output"] if given else default, values, prog, given)


def vidur_main(argv: Sequence[str] | None, prog: str) -> int:
    """``Vidur_workload_generator``: write Vidur's per-layer CSV."""
    from workload_generator.simai_inference import default_paths, simai_records, vidur_rows, write_vidur

    job, values = parse(argv, prog, "Write Vidur's per-layer workload (tab-separated CSV) of an inference step.")
    path = _output(values, default_paths(job, values["result_dir"])[1], prog)
    workload, report, memory = generate(job, values)
    records, layers, _dropped = simai_records(step_items(workload), workload.compute_source != "placeholder")
    rows = vidur_rows(job, records, layers)
    write_vidur(path, rows)
    print(describe(job))
    print_report(report)
    print(memory.summary())
    print(f"workload save in : {path} ({len(rows)} rows)")
    return 0


def default_csv_path(job: InferenceJob, output_dir: str | None = None) -> str:
    """Our AICB-style workload CSV: ``results/mocked_workload/inference_<stem>_workload.csv``."""
    return os.path.join(output_dir or "results", "mocked_workload", f"inference_{job.file_stem()}_workload.csv")


# ---- aicb.py --frame Inference ------------------------------------------------------------------------

def _aicb_flags(parser: argparse.ArgumentParser) -> None:
    from utils.cli import REPLAY, positive_int
    from utils.cli_types import path_text

    parser.add_argument("--frame", choices=("Inference",), default="Inference", help="Inference (this entry)")
    parser.add_argument("-m", "--model_name", "--model-name", "--model_size", "--model-size", dest="model_name",
                        required=True, metavar="MODEL", help="DeepSeek-671B, Qwen3-Moe-235B, Qwen3-Next-80B, "
                        "deepseek-671B, qwen3-235B, qwen3-next-80B or a preset (deepseek_v3, qwen3_235B_A22B, ...)")
    parser.add_argument("--inference_config", "--inference-config", dest="config_file", metavar="JSON", type=path_text,
                        help="AICB's JSON config of the model (default: AICB's default of its kind)")
    parser.add_argument("--epoch_num", "--epoch-num", type=positive_int, default=1, help="steps to generate or replay")
    parser.add_argument("--workload_only", "--workload-only", action="store_true",
                        help="write the workload CSV and stop (no replay)")
    parser.add_argument("--output_dir", "--output-dir", default=None, type=path_text,
                        help="directory for results (default results/)")
    add_flags(parser.add_argument_group("replay"), REPLAY)


def replay_job(job: InferenceJob) -> Any:
    """The :class:`~utils.config.JobConfig` the replay runs an inference job with: its ranks grouped as the
    items say (TP groups of ``tp`` consecutive ranks; the EP group, ``ep`` consecutive ranks, as Megatron's
    tp x ep expert group when tp > 1); the job itself rides in ``training.extra['inference_job']``."""
    from utils.config import JobConfig, TrainingConfig
    from utils.errors import ConfigError
    from utils.model_config import ModelConfig
    from utils.parallel import ParallelConfig

    ep = job.ep
    if job.tp > 1 and ep > 1:
        if ep % job.tp:
            raise ConfigError(f"the replay needs --expert_model_parallel_size {ep} to be a multiple of "
                              f"--tensor_model_parallel_size {job.tp} (its EP groups are whole TP groups)")
        ep //= job.tp
    m = job.model
    model = ModelConfig(name=job.name, hidden_size=m.hidden_size, num_layers=m.num_layers,
                        num_attention_heads=m.num_heads, vocab_size=m.vocab_size)
    parallel = ParallelConfig(world_size=job.world_size, tp=job.tp, pp=job.pp, ep=ep)
    training = TrainingConfig(frame="Inference", seq_length=job.seq_length, epoch_num=job.epoch_num,
                              gpu_type=job.gpu_type, extra={"inference_job": job})
    return JobConfig(model=model, parallel=parallel, training=training)


def aicb_parse(argv: Sequence[str], prog: str) -> tuple[Any, dict[str, Any]]:
    """``aicb.py --frame Inference``: the replay's JobConfig and the resolved values."""
    from utils.errors import ConfigError

    parser = build_parser(prog, "Generate and replay the communication of an inference step.", positional=False,
                          extra=_aicb_flags)
    values = vars(parser.parse_args(list(argv)))
    if values["aiob_enable"] or values["compute_source"] == "aiob":
        raise ConfigError("--aiob_enable: measure first with python -m workload_generator."
                          "SimAI_inference_workload_generator ... --aiob_enable, then replay with --comp_filepath FILE")
    job = job_from(values)
    return replay_job(job), values


def inference_job_of(job: Any) -> InferenceJob:
    return job.training.extra["inference_job"]


def stage_workload(job: Any, values: dict[str, Any], stage: int, log: Callable[[str], None] | None = None) -> Workload:
    """A replaying rank's workload: its stage's items, timed from the flags (model, file or placeholder)."""
    from dataclasses import replace

    from mocked_model.inference_memory import check_fits
    from workload_generator.inference import default_aiob_path, default_source, timed_step

    ijob = replace(inference_job_of(job), pp_rank=stage)
    check_inference(ijob, values)
    check_fits(ijob)
    source = default_source(ijob, values.get("compute_source"), False, values.get("comp_filepath"),
                            default_aiob_path(ijob))
    workload, report = timed_step(ijob, source, values.get("comp_filepath"), 1, default_aiob_path(ijob),
                                  explicit=values.get("compute_source") == "file")
    print_report(report, log)
    return workload


def log_names(job: Any, values: dict[str, Any]) -> tuple[str, str | None]:
    """(base name of the replay's log files, where rank 0 writes its workload CSV)."""
    ijob = inference_job_of(job)
    path = values.get("output") or default_csv_path(ijob, values.get("output_dir"))
    return f"inference_{ijob.file_stem()}", path


def aicb_workload_only(job: Any, values: dict[str, Any]) -> int:
    """``aicb.py --frame Inference --workload_only``: write the stage's workload CSV (``--pp_rank``)."""
    from workload_generator.entry import prepare_output

    ijob = inference_job_of(job)
    path = log_names(job, values)[1]
    prepare_output(path, values, "aicb.py", bool(values.get("output")))  # before any work, as every generator
    workload = stage_workload(job, values, ijob.pp_rank, print)
    workload.dump(path)
    print(f"Workload file generated: {path} ({len(workload)} items, pipeline rank {ijob.pp_rank})")
    return 0

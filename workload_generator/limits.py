"""How big a workload would be, estimated before it is generated, and the limit every entry enforces.

A generator holds every item of the iterations it writes (repeated micro-batches share their item objects,
but the list and the file hold each occurrence), so ``--num_layers 1e7``, ``--global_batch 1e9`` or
``--iter_num 1e8`` would grow memory until the process is killed.  Each entry estimates the item count
from the job's dimensions (one transformer layer of each kind is built and counted; nothing else is) and
refuses a job above ``--max_items`` (default :data:`DEFAULT_MAX_ITEMS`) with one line naming the count, the
size of the CSV it would write and the flags that drive it.  The checks sit where the jobs are built:
:class:`~workload_generator.megatron.MegatronWorkload` and the DeepSpeed generator check their stage before
building it (every Megatron and DeepSpeed entry, the replay, and the simulator's whole-job mode, which builds
each stage's generator: with ``--model topo`` and pipeline stages those are built for the few micro-batches
it plays before repeating a cycle, so a long ``--global_batch`` simulates without reaching the limit); the
collective sweep and the inference entries check theirs.
"""

from __future__ import annotations

from typing import Any

from utils.config import JobConfig
from utils.errors import ConfigError
from utils.units import format_size

DEFAULT_MAX_ITEMS = 5_000_000
"""Items one workload may hold unless ``--max_items`` says otherwise: about 670 MB of AICB CSV (134 bytes a
row) and 1.5 GB of memory while it is written, or 15 s of ``--model topo`` simulation."""
CSV_BYTES_PER_ITEM = 134
"""Mean row of the AICB workload CSV with computation items (GPT 7B, tp 8: 274,818,864 bytes, 2,054,009 rows)."""
LAYER_ITEMS = 50
"""Items' worth of memory and time one built Megatron transformer layer costs (about 13 KB and 0.15 ms: its
modules, parameters and buckets, against some 300 bytes an item): a layer counts as at least this many, since
``--num_layers 1e6`` at tensor parallelism 1 without computation items held 2 items and built 13 GB of layers."""
PER_MICRO_BATCH = 32
"""Items of a DeepSpeed micro-batch or an inference step besides its layers, an allowance (the embedding, the
output layer, the loss, pipeline transfers)."""
DEEPSPEED_PER_LAYER = {1: 40, 2: 40, 3: 80}
"""Items per transformer layer and micro-batch of the DeepSpeed generators, rounded up from LLaMA-7B on 16
ranks with computation items (ZeRO-1/2: 30-38, ZeRO-3: 49-76, the first micro-batch the most)."""
INFERENCE_PER_LAYER = 24
"""Items per layer and step of the inference generators, rounded up from the three AICB 2.1 models (13-21)."""


def limit_of(values: Any) -> int:
    """``--max_items`` from a job (its ``training.extra``) or a dict of flag values, else the default."""
    if isinstance(values, JobConfig):
        values = values.training.extra
    given = (values or {}).get("max_items")
    return int(given) if given else DEFAULT_MAX_ITEMS


def check_items(items: int, limit: int, what: str, drivers: str) -> None:
    """Refuse ``items`` above ``limit`` with one line: the estimate, the CSV it would make, what drives it."""
    if items <= limit:
        return
    raise ConfigError(f"{what} would hold about {items:,} items ({format_size(items * CSV_BYTES_PER_ITEM)} as an AICB "
                      f"workload CSV), above the limit of {limit:,} (--max_items): lower {drivers}, or raise --max_items "
                      "if the machine has the memory for it")


# ---- Megatron -------------------------------------------------------------------------------------------

def _items_of(module) -> int:
    """Items a mocked module adds to a micro-batch: its forward and its backward (recomputation included)."""
    return len(module.forward_items()) + sum(len(items) for _module, items in module.backward_segments())


def megatron_items(job: JobConfig, stages: list[int] | None = None) -> int:
    """Estimated items of ``--epoch_num`` iterations of the given pipeline ranks (default every rank): one
    transformer layer of each kind (dense, MoE) and each chunk's embedding and output layer are built and
    counted; get_batch, pipeline transfers and the step are allowances."""
    from mocked_model.megatron import MegatronChunk, TransformerLayer, VocabEmbedding, VocabParallelLoss
    from mocked_model.megatron_layers import MegatronContext
    from mocked_model.mtp import MTPLayer, MTPLoss

    p, model = job.parallel, job.model
    ctx = MegatronContext.of(job)
    counts = p.virtual_stage_layers(model.num_layers)
    offsets = [0]
    for n in counts[:-1]:
        offsets.append(offsets[-1] + n)
    dense_layers = model.n_dense_layers if model.is_moe else model.num_layers
    cache: dict[object, int] = {}
    # MTP layers per virtual stage (the layout's m, else all on the last), each counted once and multiplied:
    # building --mtp_num_layers 1e9 of them to count them ran out of memory
    mtp_at = [0] * len(counts)
    if model.mtp_num_layers:
        if p.layout is not None:
            mtp_at = p.layout.mtp()
        else:
            mtp_at[-1] = model.mtp_num_layers

    def counted(key: object, build) -> int:
        if key not in cache:
            cache[key] = _items_of(build())
        return cache[key]

    total = 0
    for stage in stages if stages is not None else range(p.pp):
        layers = micro = 0
        for u in range(stage, len(counts), p.pp):
            first, count, pre, post = offsets[u], counts[u], u == 0, u == len(counts) - 1
            moe = max(0, first + count - max(first, dense_layers)) if model.is_moe else 0
            if count > moe:
                micro += (count - moe) * counted("dense", lambda: TransformerLayer(ctx, job, 0))
            if moe:
                micro += moe * counted("moe", lambda: TransformerLayer(ctx, job, dense_layers))
            if pre or post:
                ends = lambda first=first, pre=pre, post=post: MegatronChunk(job, first, 0, pre, post, ctx,  # noqa: E731
                                                                             mtp_layers=0, mtp_losses=0)
                micro += counted((pre, post), ends)
                micro += 5 if ctx.tp > 1 else 0  # get_batch's broadcasts
            if mtp_at[u]:
                micro += mtp_at[u] * counted("mtp", lambda: MTPLayer(ctx, job, 0, VocabEmbedding(ctx, job),
                                                                     TransformerLayer))
            if post and model.mtp_num_layers:
                micro += model.mtp_num_layers * counted("mtp_loss", lambda: MTPLoss(
                    ctx, job, 0, VocabParallelLoss(ctx, job.padded_vocab_size // ctx.tp)))
            micro += 10 if p.pp > 1 else 0  # p2p: up to two batched send/receive pairs per forward and backward, gathers
            layers += count + mtp_at[u]  # (an MTP layer is a transformer layer's parameters, buckets and modules)
        step = 2 * layers + 32  # gradient buckets (at most about one per layer), norms, the optimizer
        total += job.training.epoch_num * (p.ga * micro + step) + 16
    return total


def megatron_steps(job: JobConfig, stages: list[int] | None = None) -> int:
    """Pipeline-schedule steps the generator walks for ``--epoch_num`` iterations of the given pipeline ranks
    (default every rank): a forward and a backward per micro-batch and model chunk, and with pipeline stages
    up to two p2p calls beside each.  The generator builds and walks every step even when a step adds no
    item (tensor parallelism 1 and no computation items: a micro-batch of no items), so the steps bound the
    work and the memory where the items do not: ``--global_batch 1e9`` made 2 billion steps of 2 items."""
    p = job.parallel
    chunks = -(-len(p.virtual_stage_layers(job.model.num_layers)) // p.pp)
    per_micro = 2 * chunks * (2 if p.pp > 1 else 1)
    return (len(stages) if stages is not None else p.pp) * job.training.epoch_num * p.ga * per_micro


def _megatron_what(job: JobConfig, stages: list[int] | None) -> tuple[str, str]:
    """What a refused Megatron job would have built, and the flags that drive its size."""
    what = (f"the workload of pipeline rank {stages[0]}" if stages is not None and len(stages) == 1
            else f"the whole job ({job.parallel.pp} pipeline stages)")
    mtp = f", --mtp_num_layers ({job.model.mtp_num_layers:,})" if job.model.mtp_num_layers else ""
    drivers = (f"--global_batch ({job.parallel.ga:,} micro-batches per iteration), --num_layers "
               f"({job.model.num_layers:,}){mtp} or --epoch_num ({job.training.epoch_num:,})")
    return what, drivers


def check_layers(job: JobConfig, stages: list[int] | None = None) -> None:
    """Refuse a Megatron job whose given stages (default all) hold more transformer layers than ``--max_items``
    allows at :data:`LAYER_ITEMS` each: the generators build (and the simulator's stage signatures walk) every
    layer, whether or not it adds items.  Cheap: called before anything walks the layers."""
    if job.training.frame not in ("Megatron", "DeepSeek"):
        return
    counts = job.parallel.virtual_stage_layers(job.model.num_layers)
    built = sum(counts[u] for stage in (stages if stages is not None else range(job.parallel.pp))
                for u in range(stage, len(counts), job.parallel.pp))
    limit = limit_of(job)
    if built * LAYER_ITEMS > limit:
        what, drivers = _megatron_what(job, stages)
        check_items(megatron_items(job, stages), limit, what, drivers)  # items over the limit too: say that first
        raise ConfigError(f"{what} would build {built:,} transformer layers (about {format_size(built * 13_000)} of "
                          f"memory; each counts as {LAYER_ITEMS} items), above the limit of {limit:,} (--max_items): "
                          f"lower --num_layers ({job.model.num_layers:,}), or raise --max_items if the machine has the "
                          "memory for it")


def check_megatron(job: JobConfig, stages: list[int] | None = None) -> None:
    """Refuse a Megatron job whose workload (the given stages, or all: the simulator's whole job) is too big:
    its items, or the schedule steps that make them (:func:`megatron_steps`)."""
    if job.training.frame not in ("Megatron", "DeepSeek"):
        return
    items = megatron_items(job, stages)
    what, drivers = _megatron_what(job, stages)
    limit = limit_of(job)
    check_items(items, limit, what, drivers)
    check_layers(job, stages)
    steps = megatron_steps(job, stages)
    if steps > limit:
        raise ConfigError(f"{what} would walk about {steps:,} pipeline-schedule steps (for at most {items:,} items), "
                          f"above the limit of {limit:,} (--max_items): lower {drivers}, or raise --max_items if "
                          "the machine has the memory for it")


def check_mtp(job: JobConfig) -> None:
    """:func:`check_megatron` for the pipeline ranks that hold MTP layers: what builds a job's every stage without
    generating it (the memory estimate, :func:`mocked_model.memory.megatron_stage_shapes`, builds each MTP layer) calls
    it first, since a rank's own check covers that rank only (``--mtp_num_layers 1e9`` ran out of memory there)."""
    if not job.model.mtp_num_layers or job.training.frame not in ("Megatron", "DeepSeek"):
        return
    from mocked_model.mtp import chunk_mtp_layers

    check_megatron(job, [r for r in range(job.parallel.pp) if any(chunk_mtp_layers(job, r))])


# ---- DeepSpeed, the sweep, inference -------------------------------------------------------------------

def check_deepspeed(job: JobConfig, stage: int) -> None:
    p, t = job.parallel, job.training
    per_layer = DEEPSPEED_PER_LAYER.get(stage, 80)
    items = t.epoch_num * p.ga * (per_layer * job.model.num_layers + PER_MICRO_BATCH) + per_layer * job.model.num_layers
    check_items(items, limit_of(job), f"the ZeRO-{stage} workload",
                f"--global_batch ({p.ga:,} micro-batches per iteration), --num_layers ({job.model.num_layers:,}) or "
                f"--epoch_num ({t.epoch_num:,})")


def check_sweep(iterations: int, sizes: int, limit: int) -> None:
    check_items(iterations * sizes + sizes + 2, limit, f"the sweep ({sizes} message sizes)",
                f"--iter_num ({iterations:,}) or the size range")


def check_inference(job: Any, values: dict[str, Any]) -> None:
    """An inference job (:class:`~utils.inference_job.InferenceJob`): ``--epoch_num`` steps of its stage."""
    layers = job.model.num_layers
    items = job.epoch_num * (INFERENCE_PER_LAYER * layers + PER_MICRO_BATCH) + 2
    check_items(items, limit_of(values), f"the inference workload ({job.epoch_num:,} steps of {layers} layers)",
                "--epoch_num")

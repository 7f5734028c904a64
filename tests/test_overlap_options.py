"""``--overlap_param_gather``, ``--grad_reduce_in_bf16``, Megatron's bucket sizes, and their memory: items, engine
waits and bytes by hand."""

from __future__ import annotations

import pytest

from mocked_model.memory import estimate_memory, megatron_stage_shapes
from mocked_model.mtp import mtp_activation_bytes
from simulator.search.space import Space, build_job, layouts
from simulator.topo import engine
from simulator.topo.param_gather import Gather, StagePlan, stage_plans
from simulator.topo.programs import ASYNC, COMPUTE, Op, Program, StageScript
from utils.cli import model_from, resolve
from utils.config import JobConfig, TrainingConfig
from utils.model_config import ModelConfig
from utils.parallel import ParallelConfig
from workload_generator.megatron import MegatronWorkload
from workload_generator.schedules import Step

SMALL = ModelConfig(hidden_size=64, num_layers=4, num_attention_heads=4, ffn_hidden_size=128, vocab_size=256,
                    normalization="RMSNorm", position_embedding_type="rope", swiglu=True,
                    untie_embeddings_and_output_weights=True, attention_dropout=0.0, hidden_dropout=0.0)
"""Parameters (tp 1): embedding 256 x 64 = 16384; a layer 64 + 192 x 64 + 64 x 64 + 64 + 256 x 64 + 64 x 128 =
41088; final norm 64; output layer 16384: 16384 + 4 x 41088 + 64 + 16384 = 197184."""


def _two_bucket_job(**training) -> JobConfig:
    options = dict(seq_length=32, computation_enable=True, use_distributed_optimizer=True, overlap_grad_reduce=True,
                   ddp_bucket_size=100_000)
    options.update(training)
    return JobConfig(SMALL, ParallelConfig(world_size=2, global_batch=2), TrainingConfig(**options))


def test_two_buckets_by_hand():
    # buffer order is backward order: output 16384 + final norm 64 + layers 3 and 2 (2 x 41088) = 98624 < 100000, then
    # layer 1's fc2 (8192) closes the bucket at 106816, padded to lcm(dp 2, 128) = 128: 106880; the rest, 197184 -
    # 106816 = 90368, starts at 106880 and ends at 197248 = 1541 x 128
    gen = MegatronWorkload(_two_bucket_job(overlap_param_gather=True))
    (buffer,) = gen.buffers[0]
    assert [b.numel for b in buffer.buckets] == [106880, 90368]
    assert buffer.buckets[0].last_param == "layers.1.mlp.linear_fc2.weight"
    assert buffer.buckets[1].last_param == "embedding.word_embeddings.weight"
    items = gen().items
    gathers = [i for i in items if i.stage == "step.param_all_gather"]
    # in forward order: the bucket holding the embedding first (bf16: 90368 x 2 B), waited for by the embedding's
    # items; then bucket 0 (106880 x 2 B), waited for by layer 1's
    assert [(i.msg_size, i.meta["need"], i.meta["overlap"]) for i in gathers] == [
        (180736, "embedding", "param_gather"), (213760, "layers.1", "param_gather")]
    # gradient reduce-scatters in fp32 (Megatron's default grad_reduce_in_fp32): 4 B per element
    reduce = [i.msg_size for i in items if i.stage == "backward.overlap_grad_reduce"]
    assert reduce == [106880 * 4, 90368 * 4]


def test_without_overlap_the_gathers_stay_in_the_step():
    items = MegatronWorkload(_two_bucket_job())().items
    gathers = [i for i in items if i.stage == "step.param_all_gather"]
    assert [(i.msg_size, "overlap" in i.meta) for i in gathers] == [(213760, False), (180736, False)]


def test_param_gather_overlaps_without_the_overlapped_reduction():
    # Megatron-Bridge's DeepSeek-V3 H100 recipe (25.09) runs overlap_param_gather with overlap_grad_reduce off, which
    # Megatron-core's DDP accepts (only Megatron-LM's arguments.py refuses it): it was refused here. Without the
    # overlapped reduction Megatron-core keeps one bucket per buffer (197184 padded to lcm(dp 2, 128): 197248), reduced
    # after backward in the step; its all-gather (bf16, 2 B per element) is still left to the next forward
    gen = MegatronWorkload(_two_bucket_job(overlap_grad_reduce=False, overlap_param_gather=True))
    (buffer,) = gen.buffers[0]
    assert [b.numel for b in buffer.buckets] == [197248]
    items = gen().items
    gathers = [i for i in items if i.stage == "step.param_all_gather"]
    assert [(i.msg_size, i.meta["need"], i.meta["overlap"]) for i in gathers] == [(394496, "embedding", "param_gather")]
    assert not any(i.stage == "backward.overlap_grad_reduce" for i in items)
    assert any(i.stage == "step.finish_grad_sync" for i in items)


def test_grad_reduce_in_bf16_halves_the_reductions_and_the_gradient_buffers():
    # --grad_reduce_in_bf16: DDP's buffers in bf16: each bucket's reduce-scatter moves 2 B per element, the weight
    # gradient GEMMs accumulate into a bf16 main gradient, the memory estimate keeps 2 B of gradient per parameter
    job = _two_bucket_job(grad_reduce_in_bf16=True)
    assert job.training.grad_bytes == 2
    gen = MegatronWorkload(job)
    items = gen().items
    assert [i.msg_size for i in items if i.stage == "backward.overlap_grad_reduce"] == [106880 * 2, 90368 * 2]
    wgrads = [i for i in items if i.is_computation and (i.meta or {}).get("op") == "wgrad"]
    assert wgrads and all(i.meta["grad_bytes"] == 2 for i in wgrads)
    assert gen._optimizer.meta["grad_bytes"] == 2
    (stage,) = estimate_memory(job).stages
    grads = next(t for t in stage.terms if t.name == "gradients")
    assert grads.bytes == 2 * 197184


def test_only_the_first_chunk_of_the_first_rank_is_bucketed():
    # Megatron's get_model: disable_bucketing=(model_chunk_idx > 0), and every pipeline rank but the first has one
    # bucket per buffer: pp 2 x 2 chunks, one layer each; rank 0 chunk 0 = embedding + layer 0 (16384 + 41088 = 57472)
    # with buckets of 20000, in backward order: fc2 8192 + fc1 16384 = 24576 >= 20000 closes the first (24576 = 192 x
    # 128); the MLP norm 64, proj 4096, QKV 12288, input norm 64 and the embedding 16384 close the second at 57472
    # (449 x 128): 32896; chunk 1 (layer 2) is one bucket of 41088 (321 x 128)
    job = JobConfig(SMALL, ParallelConfig(world_size=4, pp=2, virtual_stages=2, global_batch=4),
                    TrainingConfig(seq_length=32, use_distributed_optimizer=True, overlap_grad_reduce=True,
                                   ddp_bucket_size=20_000))
    gen = MegatronWorkload(job, pp_rank=0)
    first, second = ([b.numel for buffer in buffers for b in buffer.buckets] for buffers in gen.buffers)
    assert first == [24576, 32896]
    assert second == [41088]
    assert [len(buffer.buckets) for buffers in MegatronWorkload(job, pp_rank=1).buffers for buffer in buffers] == [1, 1]


def _one_stage(gather_s: tuple[float, float], contention: float) -> engine.EngineResult:
    """One stage, one micro-batch: forward = the embedding (1 s), layer 0 (2 s), layer 1 (2 s); backward 3 s; the step
    holds two overlapped parameter all-gathers: the embedding's bucket and layer 1's."""
    fwd = Program("F", [Op(COMPUTE, "embedding", "embedding", "fwd", 1e9), Op(COMPUTE, "layer 0", "layers.0", "fwd", 2e9),
                        Op(COMPUTE, "layer 1", "layers.1", "fwd", 2e9)])
    bwd = Program("B", [Op(COMPUTE, "backward", "layers.1", "bwd", 3e9)])
    step = Program("STEP", [
        Op(ASYNC, "bucket 1", "grad_sync", "step", comm_type="all_gather", group="dp_group", size=1, chunk=0,
           need="embedding"),
        Op(ASYNC, "bucket 0", "grad_sync", "step", comm_type="all_gather", group="dp_group", size=2, chunk=0,
           need="layers.1")])
    script = StageScript(0, [Step("F", 0), Step("B", 0)], [fwd, bwd], [None, None], step)
    compiled = [{id(fwd): engine.compile_program(fwd, [1.0, 2.0, 2.0]), id(bwd): engine.compile_program(bwd, [3.0])}]

    def step_time(_stage: int, op: Op) -> float:
        return gather_s[op.size - 1] if op.comm_type else 0.0

    plans = stage_plans([script], step_time, contention, aligned=False)
    return engine.run([script], compiled, lambda *_: 0.0, step_time, lambda _g: [0], param_gathers=plans)


def test_param_gather_overlap_on_a_two_bucket_job_by_hand():
    # bucket 1 (0.5 s) is dispatched by the embedding's pre-hook and waited for at once: exposed 0.5 s.  Waiting for it
    # dispatches bucket 0 (4 s) at 0.5 s; it runs under the embedding and layer 0 (1 + 2 = 3 s) and is waited for
    # when layer 1 starts, at 0.5 + 3 = 3.5 s: 4.5 - 3.5 = 1 s exposed.  Forward 5 + 1.5 s, backward 3 s: 9.5 s
    result = _one_stage((0.5, 4.0), contention=0.0)
    (stage,) = result.stages
    assert stage.exposed_s["DP"] == pytest.approx(1.5)
    assert result.iteration_s == pytest.approx(9.5)
    assert stage.comm_s["DP"] == pytest.approx(4.5)  # both gathers counted in the step
    # NCCL's SMs: bucket 0 ran 3 s beside the forward; at a 20% share it slows the stage by 0.6 s
    slowed = _one_stage((0.5, 4.0), contention=0.2)
    assert slowed.iteration_s == pytest.approx(10.1)
    assert slowed.stages[0].exposed_s["DP"] == pytest.approx(2.1)
    # a bucket shorter than the layers before it is hidden: bucket 0 of 2 s ends at 2.5 s, before layer 1 (3.5 s)
    hidden = _one_stage((0.5, 2.0), contention=0.0)
    assert hidden.stages[0].exposed_s["DP"] == pytest.approx(0.5)
    assert hidden.iteration_s == pytest.approx(8.5)


def test_aligned_param_gathers_by_hand():
    # the interleaved schedule (align_param_gather): chunks 0 and 1 dispatched at the iteration's start, one after the
    # other on the DP stream (chunk 0's 1 s ends at 1 s, chunk 1's 2 s at 3 s); chunk 2's when rank 0 starts its third
    # forward (virtual micro-batch 2 + rank 0 = chunk 1's first on pp 2), at 4 s: it ends at 5 s.
    plan = StagePlan(rank=0, pp=2, aligned=True, contention=0.0, gathers={
        c: [Gather(c, "dp_group", "DP", 0, d, f"chunk {c}")] for c, d in ((0, 1.0), (1, 2.0), (2, 1.0))})

    class Times:
        exposed_s = {"DP": 0.0}
        extra: list = []

    times = Times()
    assert plan.forward(Step("F", 0, 0), 0.0, [0.0], times) == pytest.approx(1.0)  # waits for chunk 0's gather
    assert plan.forward(Step("F", 1, 0), 2.0, [0.0], times) == 0.0
    assert plan.forward(Step("F", 0, 1), 4.0, [0.0], times) == 0.0  # chunk 1's ended at 3 s
    assert plan.forward(Step("F", 1, 1), 6.0, [0.0], times) == 0.0
    assert plan.forward(Step("F", 0, 2), 4.5, [0.0], times) == pytest.approx(0.5)  # chunk 2's ends at 5 s
    assert times.exposed_s["DP"] == pytest.approx(1.5)


def test_mtp_memory_by_hand():
    # the last stage (pp 2, no layout) holds the MTP layer: its transformer layer's activations are counted as a layer's,
    # plus 5 copies of the local activation (enorm, hnorm inputs, the 2h concatenation, the final norm's input) and the
    # shifted token ids: s 32 x b 1 x h 64 x 2 B x 5 + 8 x 32 = 20480 + 256 = 20736 B; the output layer's inputs and
    # logits twice (the MTP loss's too)
    model = SMALL.with_changes(mtp_num_layers=1)
    job = JobConfig(model, ParallelConfig(world_size=2, pp=2, global_batch=2), TrainingConfig(seq_length=32))
    assert mtp_activation_bytes(job) == 20736
    shapes = megatron_stage_shapes(job)
    assert shapes[1].mtp == 1 and shapes[0].mtp == 0
    assert dict(shapes[1].layers)[4] == 1  # the MTP layer's transformer layer, numbered num_layers + 0
    base = JobConfig(SMALL, ParallelConfig(world_size=2, pp=2, global_batch=2), TrainingConfig(seq_length=32))
    out = {t.name: t.bytes for t in estimate_memory(job).stages[1].terms}
    out0 = {t.name: t.bytes for t in estimate_memory(base).stages[1].terms}
    assert out["output-layer activations"] == 2 * out0["output-layer activations"]


def test_search_takes_a_fixed_layout_and_the_param_gather_switch():
    # gpt_tiny has 4 layers; 'Et|t|t|tL' is 4 stages: pipeline sizes 2 (2 chunks) and 4 (1 chunk) on 8 GPUs, never 1
    # or 8; no uneven first / last stage of the search's own
    model = model_from(resolve({"model_name": "gpt_tiny"}))
    space = Space(tp=(1,), micro_batch=(1,), recompute=("none",), order=("tp-cp-ep-dp-pp",), layout_stages=4,
                  overlap_param_gather=(True,))
    found = list(layouts(model, 8, 16, space))
    assert {(lay.pp, lay.vpp) for lay in found} == {(2, 2), (4, 1)}
    assert all(lay.first_stage_layers == 0 for lay in found)
    # --overlap_param_gather on: only with the distributed optimizer (off without it)
    assert {(lay.distributed_optimizer, lay.overlap_param_gather) for lay in found} == {(True, True), (False, False)}
    layout = next(lay for lay in found if lay.pp == 2 and lay.distributed_optimizer)
    job = build_job({"model_name": "gpt_tiny", "global_batch": 16, "seq_length": 128, "position_embedding_type": "rope",
                     "pipeline_model_parallel_layout": "Et|t|t|tL"}, layout)
    assert job.parallel.chunks(4) == 2 and job.training.overlap_param_gather and job.training.overlap_grad_reduce

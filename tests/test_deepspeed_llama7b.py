"""The invariants the README states, checked on LLaMA-7B over 16 data-parallel ranks.

LLaMA-7B (hidden 4096, 32 layers, FFN 11008, vocabulary 32000, untied lm_head):
  embed_tokens and lm_head 32000 x 4096             = 131,072,000 each
  per layer: q, k, v, o 4 x 4096^2 = 67,108,864; gate, up, down 3 x 4096 x 11008 = 135,266,304;
             2 norms 8,192                           -> 202,383,360; x 32 = 6,476,267,520
  final norm 4,096
  N = 2 x 131,072,000 + 6,476,267,520 + 4,096       = 6,738,415,616 parameters (the model card's 6.74e9)
  gradient bytes (bf16) = 2 N                        = 13,476,831,232
Every parameter size is a multiple of 16, so ZeRO-3 pads nothing; N is a multiple of 2 x 16 = 32,
so the ZeRO-1/2 flat buffer is not padded either.  65 norms (4,096 elements each) fall under the
default persistence threshold of 100,000 elements.
"""

from collections import Counter

import pytest

from utils.config import JobConfig, TrainingConfig
from utils.parallel import ParallelConfig
from utils.presets import get_preset
from workload_generator.deepspeed import deepspeed_workload

N = 2 * 131_072_000 + 32 * (4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096) + 4096
GRAD_BYTES = 2 * N
NORMS = 2 * 32 + 1


def generate(stage, epochs=1, **flags):
    parallel = ParallelConfig(world_size=16, micro_batch=1, global_batch=16)      # 1 micro-batch per iteration
    training = TrainingConfig(frame="DeepSpeed", seq_length=2048, epoch_num=epochs, extra={"stage": stage, **flags})
    generator = deepspeed_workload(JobConfig(get_preset("llama_7B"), parallel, training))
    return generator, generator()


def test_parameter_count():
    assert N == 6_738_415_616 and GRAD_BYTES == 13_476_831_232
    generator, _ = generate(1)
    assert generator.num_params() == N


@pytest.mark.parametrize("stage, flags", [(1, {}), (2, {}), (2, {"contiguous_gradients": True})])
def test_stage1_2_reductions_carry_every_gradient_once(stage, flags):
    _, workload = generate(stage, **flags)
    iteration = workload.iterations()[1]
    reductions = [i for i in iteration if i.stage.startswith("backward.")]
    assert {i.comm_type.value for i in reductions} == ({"reduce"} if flags else {"all_reduce"})
    assert sum(i.msg_size for i in reductions) == GRAD_BYTES
    # the step gathers the whole (unpadded) flat buffer back
    assert sum(i.msg_size for i in iteration if i.stage == "step.all_gather_dp_groups") == GRAD_BYTES


def _gathers(items, phase):
    """How often each parameter is all-gathered in a phase (forward / backward)."""
    counts = Counter()
    for item in items:
        if item.comm_type.value == "all_gather" and item.stage.startswith(phase):
            counts.update(item.meta["params"])
    return counts


def test_stage3_first_micro_batch_gathers_everything_once_each_way():
    generator, workload = generate(3)
    names = [q.name for q in generator.params]
    iteration = workload.iterations()[1]
    # the first micro-batch runs before the trace is complete: every parameter (persistent ones too,
    # partitioned after init) is gathered once in forward and once in backward
    assert _gathers(iteration, "forward") == Counter(names)
    assert _gathers(iteration, "backward") == Counter(names)
    assert sum(i.msg_size for i in iteration if i.comm_type.value == "all_gather" and i.stage.startswith("forward")) \
        == GRAD_BYTES
    scattered = [i for i in iteration if i.comm_type.value == "reduce_scatter"]
    assert sum(i.msg_size for i in scattered) == GRAD_BYTES
    assert Counter(n for i in scattered for n in i.meta["params"]) == Counter(names)


def test_stage3_complete_trace_keeps_persistent_parameters():
    # without prefetch, the third micro-batch (trace complete) gathers every non-persistent parameter
    # once in forward and once in backward, and never the 65 persistent norms
    generator, workload = generate(3, epochs=3, prefetch_bucket_size=0)
    persistent = {generator.params[i].name for i in generator.persistent}
    assert len(persistent) == NORMS
    non_persistent = Counter(q.name for q in generator.params if q.name not in persistent)
    third = workload.iterations()[3]
    assert _gathers(third, "forward") == non_persistent
    assert _gathers(third, "backward") == non_persistent
    assert sum(i.msg_size for i in third if i.comm_type.value == "reduce_scatter") == GRAD_BYTES
    # the step re-gathers the persistent parameters: 65 x 4096 x 2 bytes
    assert sum(i.msg_size for i in third if i.stage == "step._post_step") == NORMS * 4096 * 2


def test_stage3_with_prefetch_gathers_no_parameter_more_often_than_it_is_used():
    # DeepSpeed's defaults (prefetch bucket and live parameters 1e9), third micro-batch: each
    # non-persistent parameter is gathered once or twice (it is used twice; the prefetcher may gather
    # it for its backward use while forward still runs, or find it still gathered and keep it), the
    # persistent ones never, and every gradient is reduce-scattered once
    generator, workload = generate(3, epochs=3)
    third = workload.iterations()[3]
    gathered = _gathers(third, "forward") + _gathers(third, "backward")
    persistent = {generator.params[i].name for i in generator.persistent}
    assert set(gathered) == {q.name for q in generator.params} - persistent
    assert set(gathered.values()) == {1, 2}
    assert sum(i.msg_size for i in third if i.comm_type.value == "reduce_scatter") == GRAD_BYTES

"""Parameter counts of a whole model from the per-rank mocked shapes."""

from __future__ import annotations

from mocked_model.megatron import MegatronChunk, chunk_layout
from mocked_model.mtp import chunk_mtp_layers
from utils.config import JobConfig


def model_param_count(job: JobConfig, chunk_factory=None) -> int:
    """Total parameters of the model, summed from every pipeline stage's per-rank shapes.

    A TP-sharded tensor counts ``tp`` times its per-rank size (for experts: ``etp * ep`` over the
    expert-parallel shards of the experts this rank holds); replicated tensors (norms, row biases)
    count once; the last stage's copy of tied embeddings is not a parameter of its own.
    """
    p = job.parallel
    factory = chunk_factory or MegatronChunk
    total = 0
    for stage in range(p.pp):
        mtp = chunk_mtp_layers(job, stage)  # multi-token prediction's layers are trained parameters too
        for c, (first, count, pre, post) in enumerate(chunk_layout(job, stage)):
            for param in factory(job, first, count, pre, post, mtp_layers=mtp[c]).parameters():
                if param.shared_copy:
                    continue
                if param.is_expert:
                    total += param.numel * p.expert_tp * p.ep if param.tp_sharded else param.numel * p.ep
                else:
                    total += param.numel * p.tp if param.tp_sharded else param.numel
    return total

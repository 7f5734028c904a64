"""SimAI records derived from the Megatron work items, by hand.

Tiny model (as in test_megatron_workload): hidden 64, 4 heads, 2 layers, FFN 256, vocabulary 256,
32 learned positions, LayerNorm, tied embeddings; world 4 = tp 2 x dp 2, sequence 32, micro-batch 1,
global batch 4 -> ga 2.  TP all-reduces move 32 x 64 x 2 = 4096 bytes; the cross-entropy ones 32 x 4.

Compute file (microseconds): Emb 1, layernorm 2, atten_qkv 3, atten_flash 4, atten_linear 5,
layernorm2 6, mlp_linear_1 7, mlp_gelu 8, mlp_linear_2 9, layernorm_post 10, logit_time 11 (no
loss section: 0).  Backward: a GEMM's dgrad and wgrad each its forward time, attention twice.
"""

import pytest

from tests.conftest import run_cli
from utils.config import JobConfig, TrainingConfig
from utils.errors import ConfigError
from utils.model_config import ModelConfig
from utils.parallel import ParallelConfig
from workload_generator.compute_times import fill_compute_times
from workload_generator.megatron import MegatronWorkload
from workload_generator.simai import SimAIWorkload
from workload_generator.simai_tokens import VALID_TOKENS
from workload_generator.simai_training import derive_simai

MODEL = ModelConfig(name="tiny", hidden_size=64, num_layers=2, num_attention_heads=4, ffn_hidden_size=256,
                    vocab_size=256, max_position_embeddings=32)
SECTIONS = {"Emb": 1, "layernorm": 2, "atten_qkv": 3, "atten_flash": 4, "atten_linear": 5, "layernorm2": 6,
            "mlp_linear_1": 7, "mlp_gelu": 8, "mlp_linear_2": 9, "layernorm_post": 10, "logit_time": 11}


def _compute_file(tmp_path):
    path = tmp_path / "aiob.txt"
    text = "train_iter:1\n" + "".join(f"{k}:\n    time_gpu_max: {v}\n    time_gpu_min: {v}\n    time_gpu_avg: {v}\n"
                                      for k, v in SECTIONS.items())
    path.write_text(text)
    return str(path)


def derive(source="placeholder", path=None, **kw):
    layout = dict(world_size=4, tp=2, micro_batch=1, global_batch=4)
    layout.update(kw.pop("layout", {}))
    job = JobConfig(MODEL, ParallelConfig(**layout), TrainingConfig(seq_length=32, computation_enable=True, **kw))
    gen = MegatronWorkload(job)
    items = [i for c in gen.chunks for _, seg in c.backward_segments() for i in seg]
    items += [i for c in gen.chunks for i in c.forward_items()]
    fill_compute_times(items, source, path)
    return derive_simai(gen)


def rows(derived):
    return [r.fields() for r in derived.workload.records]


def test_tiny_model_records_by_hand(tmp_path):
    d = derive("file", _compute_file(tmp_path))
    h = d.workload.header
    assert (h.tp, h.ep, h.pp, h.vpp, h.ga, h.all_gpus, h.pp_comm) == (2, 1, 1, 2, 2, 4, 0)
    AR = "ALLREDUCE"

    def layer(next_norm_bwd):
        return [
            # QKV: forward = input norm 2 + GEMM 3; ig = dgrad 3 + attention backward 2 x 4; its input-grad all-reduce
            ("attention_layer", -1, 5000, "NONE", 0, 11000, AR, 4096, 3000, "NONE", 0, 100),
            # projection: forward = attention 4 + GEMM 5, then its all-reduce; ig = dgrad 5 + pre-MLP norm 6
            ("attention_layer", -1, 9000, AR, 4096, 11000, "NONE", 0, 5000, "NONE", 0, 100),
            # fc1: forward = norm 6 + GEMM 7; ig = dgrad 7 + activation 8; input-grad all-reduce
            ("mlp_layer", -1, 13000, "NONE", 0, 15000, AR, 4096, 7000, "NONE", 0, 100),
            # fc2: forward = activation 8 + GEMM 9 + all-reduce; ig = dgrad 9 + the next norm's backward
            ("mlp_layer", -1, 17000, AR, 4096, 9000 + next_norm_bwd, "NONE", 0, 9000, "NONE", 0, 100),
        ]

    micro_batch = (
        # embedding: lookup 1, all-reduce; ig = embedding backward 1 + layer 0's input norm 2
        [("embedding_layer", -1, 1000, AR, 4096, 3000, "NONE", 0, 0, "NONE", 0, 100)]
        + layer(2000) + layer(10000)      # layer 1's fc2 takes the final norm's backward (10)
        # output layer: final norm 10 + logits 11; ig dgrad 11, all-reduce of the input grad; wg 11
        + [("output_layer", -1, 21000, "NONE", 0, 11000, AR, 4096, 11000, "NONE", 0, 100),
           # cross entropy (no section: 0) and its three fp32 all-reduces
           ("output_layer", -1, 0, AR, 128, 0, "NONE", 0, 0, "NONE", 0, 100),
           ("output_layer", -1, 0, AR, 128, 0, "NONE", 0, 0, "NONE", 0, 100),
           ("output_layer", -1, 0, AR, 128, 0, "NONE", 0, 0, "NONE", 0, 100)]
    )
    # every gradient, fp32, one bucket over DP: (8192 + 2048 + 2 x 24832 + 128) x 4 = 240128
    head = [("grad_sync", -1, 0, "NONE", 0, 0, "NONE", 0, 0, AR, 240128, 100)]
    assert rows(d) == head + micro_batch * 2
    assert d.dropped == {"forward_step.loss_func": 1, "step.clip_grad_norm": 1}


def test_sources_differ_only_in_times(tmp_path):
    a, b = rows(derive("placeholder")), rows(derive("file", _compute_file(tmp_path)))
    strip = [(r[0], r[3], r[4], r[6], r[7], r[9], r[10]) for r in a]
    assert strip == [(r[0], r[3], r[4], r[6], r[7], r[9], r[10]) for r in b]
    # AICB's placeholder: 1 ns wherever there is computation
    assert rows(derive())[1][2] == 1


def test_sequence_parallel_and_pipeline(tmp_path):
    d = derive(layout=dict(world_size=8, pp=2, sequence_parallel=True), use_distributed_optimizer=True)
    h = d.workload.header
    # pp_comm = 32 / tp 2 x 1 x 64 x 2 bytes = 2048 (an integer); one layer per stage
    assert (h.pp, h.vpp, h.pp_comm, h.ga) == (2, 1, 2048, 2)
    tokens = {(r.fwd_comm, r.fwd_size_bytes) for r in d.workload.records}
    assert ("ALLGATHER", 4096) in tokens and ("REDUCESCATTER", 4096) in tokens
    first = [r.name for r in d.workload.records[:4]]
    # step reductions first: the param all-gathers last in the step run first in the file
    assert first[0] == "param_all_gather" and "layernorm_grads" in first


def test_overlapped_buckets_sit_where_they_complete():
    d = derive(overlap_grad_reduce=True, ddp_bucket_size=20_000)
    wg = [(i, r.name, r.wg_comm, r.wg_size_bytes) for i, r in enumerate(d.workload.records) if r.wg_comm != "NONE"]
    # buckets in reverse order, each closing once it reaches 20,000 elements: final norm 128 + layer 1's
    # fc2 8192, fc1 8192, pre-MLP norm 128, proj 2048, QKV 6144 = 24832 (closes at layer 1's QKV);
    # layer 1's input norm 128 + layer 0's fc2 .. QKV 24704 = 24832 (closes at layer 0's QKV); layer 0's
    # input norm 128 + positions 2048 + word embedding 8192 = 10368 (at the embedding).  In file order:
    assert [w[3] for w in wg] == [10368 * 4, 24832 * 4, 24832 * 4]
    # all in the first micro-batch copy (SimAI plays its backward last), none at the head
    assert wg[0][1] == "embedding_layer" and all(w[0] < 14 for w in wg)


def test_written_file_is_valid_for_simai(tmp_path):
    d = derive("file", _compute_file(tmp_path))
    path = tmp_path / "w.txt"
    d.workload.write(path)
    back = SimAIWorkload.read(path, strict=True)
    assert back.records == d.workload.records
    for r in back.records:
        assert {r.fwd_comm, r.ig_comm, r.wg_comm} <= VALID_TOKENS and len(r.fields()) == 12


def test_allgather_dispatcher_cannot_be_written():
    model = MODEL.with_changes(num_experts=4, moe_router_topk=2, normalization="RMSNorm")
    with pytest.raises(ConfigError, match="TP x EP group, which SimAI's workload format cannot express"):
        job = JobConfig(model, ParallelConfig(world_size=4, tp=2, ep=2, sequence_parallel=True, global_batch=2),
                        TrainingConfig(seq_length=32, moe_token_dispatcher_type="allgather"))
        derive_simai(MegatronWorkload(job))


def test_issue_example_header(tmp_path):
    out = tmp_path / "s.txt"
    proc = run_cli("-m", "workload_generator.SimAI_training_workload_generator", "-m", "7", "--world_size", "64",
                   "--tensor_model_parallel_size", "4", "--global_batch", "128", "--micro_batch", "1", "--seq_length",
                   "4096", "--swiglu", "--use_flash_attn", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "placeholder" in proc.stdout
    w = SimAIWorkload.read(out)
    h = w.header
    # ga = 128 / (1 x dp 16) = 8; AICB's -m 7 has 36 layers on the one stage
    assert (h.tp, h.pp, h.ga, h.all_gpus, h.vpp, h.pp_comm) == (4, 1, 8, 64, 36, 0)
    sizes = {r.fwd_size_bytes for r in w.records if r.fwd_comm == "ALLREDUCE" and r.name in ("attention_layer", "mlp_layer")}
    assert sizes == {2 * 4096 * 1 * 4096}
    # the cross-entropy all-reduces are fp32 per token: 4096 x 4
    assert {r.fwd_size_bytes for r in w.records if r.name == "output_layer" and r.fwd_comm == "ALLREDUCE"} == {16384}


def test_aicb_script_default_path(tmp_path):
    proc = run_cli("-m", "utils.aicb_scripts", "megatron_workload_with_aiob", "-m", "7", "--world_size", "64",
                   "--global_batch", "128", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # -m 7 defaults to tp 4 in AICB's script; seq 4096 by default
    expected = tmp_path / ("results/workload/None-gpt_7B-world_size64-tp4-pp1-ep1-gbs128-mbs1-seq4096-MOE-False"
                           "-GEMM-False-flash_attn-False.txt")
    assert expected.exists(), proc.stdout

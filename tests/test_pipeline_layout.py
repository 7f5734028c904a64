"""``--pipeline_model_parallel_layout`` (Megatron-core's syntax) and DeepSeek's multi-token prediction
(``--mtp_num_layers``): parsing, the stages' contents, the refusals, the MTP layer's items, parameters and FLOPs."""

from __future__ import annotations

import pytest

from mocked_model.counting import model_param_count
from mocked_model.flops import layer_forward_flops_per_token, model_flops
from mocked_model.megatron import MegatronChunk, chunk_layout
from mocked_model.mtp import chunk_mtp_layers
from tests.conftest import run_cli
from utils.config import JobConfig, TrainingConfig
from utils.errors import ConfigError
from utils.model_config import ModelConfig
from utils.parallel import ParallelConfig
from utils.pipeline_layout import parse_layout, stage_count
from workload_generator.megatron import MegatronWorkload

DEEPSEEK_DOC = "Et*3|(tt|)*29,m|L"
"""Megatron-LM docs/user-guide/features/pipeline_parallel_layout.md: DeepSeek-V3 (61 layers, one MTP layer) on
PP 16 x VPP 2."""
DEEPSEEK_H100 = "Et|(tt|)*30mL"
"""NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/deepseek/deepseek_workload_base_configs.py,
DEEPSEEK_V3_PRETRAIN_CONFIG_H100_V1: 1024 H100s, TP 2, PP 8, VPP 4, EP 64."""

SMALL = ModelConfig(hidden_size=64, num_layers=4, num_attention_heads=4, ffn_hidden_size=128, vocab_size=256,
                    normalization="RMSNorm", position_embedding_type="rope", swiglu=True,
                    untie_embeddings_and_output_weights=True, attention_dropout=0.0, hidden_dropout=0.0)


def _job(model: ModelConfig = SMALL, **parallel) -> JobConfig:
    return JobConfig(model, ParallelConfig(**parallel), TrainingConfig(seq_length=32, computation_enable=True))


def test_deepseek_layout_parsed_into_stages():
    # 'Et*3|(tt|)*29,m|L' unrolls to Ettt | tt x 29 | m | L: 1 + 29 + 1 + 1 = 32 virtual stages = 16 ranks x 2 chunks;
    # transformer layers 3 + 29 x 2 = 61, one MTP layer
    layout = parse_layout(DEEPSEEK_DOC, 16)
    assert layout.vpp == 2 and len(layout.stages) == 32
    assert layout.layers() == [3] + [2] * 29 + [0, 0]
    assert layout.mtp() == [0] * 30 + [1, 0]
    assert layout.stages[0].embedding and layout.stages[31].loss
    # stage u = chunk * 16 + rank: the MTP stage 30 is chunk 1 of rank 14, the loss stage 31 chunk 1 of rank 15
    assert layout.mtp_ranks() == [14]
    layout.check_model(61, 1)
    assert stage_count(DEEPSEEK_DOC) == 32 and stage_count(DEEPSEEK_H100) == 32


def test_deepseek_layout_gives_each_rank_its_chunks():
    model = ModelConfig(hidden_size=64, num_layers=61, num_attention_heads=4, ffn_hidden_size=128, vocab_size=256,
                        normalization="RMSNorm", position_embedding_type="rope", untie_embeddings_and_output_weights=True,
                        mtp_num_layers=1)
    job = _job(model, world_size=16, pp=16, global_batch=16, pipeline_layout=DEEPSEEK_DOC)
    p = job.parallel
    assert p.chunks(61) == 2 and p.interleaved
    # rank 0: Ettt (layers 0-2) and tt (stage 16: layers 3 + 15 x 2 = 33, 34); rank 14: tt (stage 14: 3 + 13 x 2 = 29,
    # 30) and m; rank 15: tt (31, 32) and L
    assert chunk_layout(job, 0) == [(0, 3, True, False), (33, 2, False, False)]
    assert chunk_layout(job, 14) == [(29, 2, False, False), (61, 0, False, False)]
    assert chunk_layout(job, 15) == [(31, 2, False, False), (61, 0, False, True)]
    assert chunk_mtp_layers(job, 14) == [0, 1] and chunk_mtp_layers(job, 15) == [0, 0]
    # stage layers: 3 + 2, thirteen ranks of 2 + 2, then 2 (+ m) and 2 (+ L): 5 + 52 + 2 + 2 = 61
    assert p.stage_layers(61) == [5] + [4] * 13 + [2, 2]
    # untied embeddings: the embedding group is rank 0 and the MTP rank (pretrain_gpt.py's get_embedding_ranks)
    assert p.embedding_group_stages() == (0, 14)
    tied = _job(model.with_changes(untie_embeddings_and_output_weights=False), world_size=16, pp=16, global_batch=16,
                pipeline_layout=DEEPSEEK_DOC)
    assert tied.parallel.embedding_group_stages() == (0, 14, 15)


def test_h100_recipe_layout_puts_mtp_and_loss_on_the_last_chunk():
    # 'Et|(tt|)*30mL' on PP 8: stages Et, tt x 30, mL -> 32 = 8 x 4; the last rank's last chunk holds m and L,
    # the final norm sits with layer 60 (stage 30 = chunk 3 of rank 6)
    model = ModelConfig(hidden_size=64, num_layers=61, num_attention_heads=4, ffn_hidden_size=128, vocab_size=256,
                        normalization="RMSNorm", position_embedding_type="rope", mtp_num_layers=1)
    job = _job(model, world_size=8, pp=8, global_batch=8, pipeline_layout=DEEPSEEK_H100)
    assert job.parallel.chunks(61) == 4
    assert chunk_layout(job, 7)[-1] == (61, 0, False, True) and chunk_mtp_layers(job, 7) == [0, 0, 0, 1]
    assert chunk_layout(job, 6)[-1] == (59, 2, False, False)
    names = [c.name for c in MegatronChunk(job, 59, 2, False, False).children]
    assert names == ["layers.59", "layers.60", "final_layernorm"]
    last = [c.name for c in MegatronChunk(job, 61, 0, False, True, mtp_layers=1).children]
    # an MTP stage that is not the first keeps a copy of the word embedding; MTP, its loss, then the main loss
    assert last == ["embedding", "mtp.layers.0", "mtp.loss.0", "output_layer", "loss"]


@pytest.mark.parametrize("layout, pp, extra, message", [
    ("Et|tt|t|L", 2, {}, r"--pipeline_model_parallel_layout 'Et\|tt\|t\|L' holds 4 transformer layers \(t\), not "
                         r"--num_layers 5"),
    ("Et|tt|tt", 3, {}, r"must end with the loss \(L\)"),
    ("tE|tt|ttL", 3, {}, r"must start with the embedding \(E\)"),
    ("Et|ttt|tL", 2, {}, r"has 3 virtual stages, not a multiple of --pipeline_model_parallel 2"),
    ("Et|(tt|tL", 2, {}, r"a '\(' is never closed"),
    ("Et|tt)*2|L", 2, {}, r"'\)' at position 5 closes no '\('"),
    ("Et|t*|ttL", 2, {}, r"'\*' at position 4 needs a repeat count"),
    ("Et|tx|ttL", 2, {}, r"unknown symbol 'x'"),
    ("EEt|tt|ttL", 3, {}, r"holds the embedding \(E\) 2 times, not once"),
    ("Et|tt|ttL", 3, {"virtual_stages": 1}, r"give it or --num_virtual_stages_per_pipeline_rank, not both"),
    ("Et|tt|ttL", 3, {"first_stage_layers": 1}, r"cannot be combined with --decoder_first_pipeline_num_layers"),
    ("Et|tt|ttL", 3, {"embedding_in_split": True}, r"cannot be combined with --account_for_embedding_in_pipeline_split"),
])
def test_bad_layouts(layout, pp, extra, message):
    model = SMALL.with_changes(num_layers=5)
    with pytest.raises(ConfigError, match=message):
        _job(model, world_size=pp, pp=pp, global_batch=pp * 2, pipeline_layout=layout, **extra)


@pytest.mark.parametrize("layout, mtp, message", [
    ("Et|tt|tL", 1, r"holds 0 MTP layers \(m\), not --mtp_num_layers 1"),
    ("Ettm|t|t|L", 1, r"puts the MTP layers in chunk 0 of pipeline rank 0: Megatron needs them in the rank's last chunk"),
    ("Et|t|m|ttL", 1, r"places transformer layers \(t\) after the MTP layers"),
    ("Ett|tt|m|mL", 2, r"spreads the MTP layers over virtual stages \[2, 3\]"),
])
def test_bad_mtp_placements(layout, mtp, message):
    model = SMALL.with_changes(mtp_num_layers=mtp)
    stages = stage_count(layout)
    pp = 2 if stages % 2 == 0 else stages
    with pytest.raises(ConfigError, match=message):
        _job(model, world_size=pp, pp=pp, global_batch=pp * 2, pipeline_layout=layout)


def test_empty_stages_are_allowed():
    # Megatron's docs: 'E||t|L' (a stage without layers); 4 stages on 2 ranks: 2 chunks each
    job = _job(SMALL.with_changes(num_layers=4), world_size=2, pp=2, global_batch=4, pipeline_layout="E||t|tttL")
    assert job.parallel.virtual_stage_layers(4) == [0, 0, 1, 3]
    assert chunk_layout(job, 1) == [(0, 0, False, False), (1, 3, False, True)]


def test_bad_layout_on_the_command_line_exits_2_and_writes_nothing(tmp_path):
    done = run_cli("-m", "workload_generator.generate_megatron_workload", "--model_name", "gpt_tiny", "--world_size", "2",
                   "--pipeline_model_parallel", "2", "--global_batch", "4", "--pipeline_model_parallel_layout", "Et|tL",
                   "--output_dir", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 2
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "--pipeline_model_parallel_layout 'Et|tL' holds 2 transformer layers" in lines[0]
    assert "Traceback" not in done.stderr
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


def test_mtp_layer_parameters_by_hand():
    # h 64, tp 2, RMSNorm, SwiGLU ffn 128, 4 heads of 16, untied.  One MTP layer per rank: enorm 64 + hnorm 64 +
    # eh_proj (64 / 2) x 128 = 4096 + a transformer layer + final norm 64.  Transformer layer per rank: input norm 64,
    # QKV (3 x 64 / 2) x 64 = 6144, proj 64 x 32 = 2048, MLP norm 64, fc1 (2 x 128 / 2) x 64 = 8192, fc2 64 x 64 = 4096
    # -> 20608.  MTP layer: 64 + 64 + 4096 + 20608 + 64 = 24896.
    model = SMALL.with_changes(mtp_num_layers=1)
    job = _job(model, world_size=2, tp=2, sequence_parallel=True, global_batch=1)
    chunk = MegatronChunk(job, 0, 4, True, True)
    (mtp,) = chunk.mtp_layers
    assert sum(q.numel for q in mtp.parameters()) == 24896
    # whole model: the MTP layer counts its TP-sharded tensors twice (tp 2) and its norms once:
    # 4096 x 2 + 20608 -> the transformer layer's whole count is 6144*2 + 2048*2 + 8192*2 + 4096*2 + 64*2 = 41088;
    # MTP whole = 64 * 3 + 8192 + 41088 = 49472
    base = model_param_count(_job(SMALL, world_size=2, tp=2, sequence_parallel=True, global_batch=1))
    assert model_param_count(job) - base == 49472


def test_mtp_layer_items_by_hand():
    # tp 2 with SP, s 32, b 1, h 64: the MTP layer's own TP collectives (besides its transformer layer's):
    # forward: the embedding lookup's reduce-scatter (s b h x 2 B = 4096 B), eh_proj's input all-gather (2h: 8192 B),
    # the gather of its h / tp outputs (4096 B); backward: the scatter's all-gather (4096 B), eh_proj's re-gather
    # (8192 B) and reduce-scatter of the input gradient (8192 B), the lookup's all-gather (4096 B)
    model = SMALL.with_changes(mtp_num_layers=1)
    job = _job(model, world_size=2, tp=2, sequence_parallel=True, global_batch=1)
    (mtp,) = MegatronChunk(job, 0, 4, True, True).mtp_layers
    own = [c for c in mtp.children if c is not mtp.transformer]
    forward = [(i.comm_type.value, i.msg_size) for c in own for i in c.forward_items() if not i.is_computation]
    assert forward == [("reduce_scatter", 4096), ("all_gather", 8192), ("all_gather", 4096)]
    backward = [(i.comm_type.value, i.msg_size) for c in reversed(own) for i in c.backward_items() if not i.is_computation]
    assert backward == [("all_gather", 4096), ("all_gather", 8192), ("reduce_scatter", 8192), ("all_gather", 4096)]
    ops = [i.meta["op"] for c in own for i in c.forward_items() if i.is_computation]
    assert ops == ["embedding", "norm", "norm", "copy", "gemm", "norm"]


def test_mtp_stage_generates_and_syncs_the_embedding():
    # pp 2, 'Et|tt|m|tL' is refused (t after m); 'Ett|t|tm|L': chunk 1 of rank 0 holds the MTP layer (Megatron allows
    # it outside rank 0's chunk 0 only in the rank's last chunk: here chunk 1), the loss on rank 1's last chunk
    model = SMALL.with_changes(num_layers=4, mtp_num_layers=1)
    job = JobConfig(model, ParallelConfig(world_size=4, tp=2, pp=2, sequence_parallel=True, global_batch=4,
                                          pipeline_layout="Ett|t|tm|L"),
                    TrainingConfig(seq_length=32, computation_enable=True))
    assert job.parallel.embedding_group_stages() == (0,)  # untied, MTP on rank 0: no group to sync over
    gen = MegatronWorkload(job, pp_rank=0)
    assert [len(c.mtp_layers) for c in gen.chunks] == [0, 1]
    items = gen().items
    assert not [i for i in items if i.comm_group is not None and i.comm_group.value == "embedding_group"]
    # rank 1 (the loss) runs the output layer twice per micro-batch: once for the MTP layer's hidden states
    last = MegatronWorkload(job, pp_rank=1)
    assert sum(1 for i in last.chunks[1].forward_items() if i.stage == "forward.MegatronOutputLayer.output_layer") == 2


def test_mtp_flops_follow_megatron():
    # Megatron-LM's num_floating_point_operations: each MTP layer is one more layer of the last layer's kind, plus
    # 3 x 2 x (3h + 2h^2) per token and one more logit GEMM: 3 x 2 x h x V per token
    model = SMALL.with_changes(mtp_num_layers=1)
    job = _job(model, world_size=1, global_batch=4)
    base = _job(SMALL, world_size=1, global_batch=4)
    tokens = 4 * 32
    h, v = 64, job.padded_vocab_size
    extra = 3 * tokens * (layer_forward_flops_per_token(base, 3) + 2 * (3 * h + 2 * h * h) + 2 * h * v)
    assert model_flops(job) - model_flops(base) == pytest.approx(extra)


# ---- adversarial layouts and MTP counts (bounded work, one line) ----------------------------------------------

@pytest.mark.parametrize("layout", ["t*1000000000000", "(t|)*1000000000000", "((t)*100000)*100000",
                                    "Et*" + "9" * 5000 + "L"])
def test_huge_repeat_counts_are_refused_before_they_are_built(layout):
    # t*10**12 was unrolled before the size check: MemoryError; 5,000 digits: int()'s ValueError
    with pytest.raises(ConfigError, match="unrolls to more than 1,000,000 symbols"):
        parse_layout(layout, 2)


def test_deeply_nested_groups_are_one_line():
    with pytest.raises(ConfigError, match="nested more than 100 deep"):  # was a RecursionError
        parse_layout("E" + "(" * 5000 + "t" + ")" * 5000 + "L", 1)
    assert parse_layout("E" + "(" * 100 + "t" + ")" * 100 + "L", 1).layers() == [1]


def test_a_long_literal_layout_parses_in_linear_time():
    import time

    started = time.perf_counter()
    assert parse_layout("E" + "t" * 130_000 + "L", 1).layers() == [130_000]  # the longest argv string: was ~2 min
    assert time.perf_counter() - started < 5


def test_an_empty_stage_is_generated_and_simulated(tmp_path):
    # Megatron's 'E||t|L': a chunk without layers recursed forever building its backward (RecursionError)
    job = _job(SMALL.with_changes(num_layers=4), world_size=2, pp=2, global_batch=4, pipeline_layout="E||tttt|L")
    for rank in (0, 1):
        from dataclasses import replace

        items = MegatronWorkload(replace(job, parallel=replace(job.parallel, pp_rank=rank)))().items
        assert items
    done = run_cli("-m", "simulator", "-t", str(_topo16(tmp_path)), "--gpu_type", "H100", "--model_name", "gpt_tiny",
                   "--world_size", "16", "--pipeline_model_parallel", "2", "--global_batch", "16",
                   "--pipeline_model_parallel_layout", "E||" + "t" * _tiny_layers() + "|L", "-q", "--json")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-800:]


def _tiny_layers() -> int:
    from utils.presets import get_preset

    return get_preset("gpt_tiny").num_layers


def _topo16(tmp_path):
    from topo.gen import main as topo_gen

    path = tmp_path / "t16.txt"
    assert topo_gen(["-topo", "Spectrum-X", "-g", "16", "-o", str(path)]) == 0
    return path


@pytest.mark.parametrize("entry", [("-m", "simulator", "-t", "TOPO", "--gpu_type", "H100"),
                                   ("-m", "simulator", "-g_p_s", "8", "-n_p_s", "8", "--gpu_type", "H100"),
                                   ("-m", "workload_generator.generate_megatron_workload", "--memory", "-o", "OUT")])
def test_a_huge_mtp_count_is_refused_at_once_and_writes_nothing(tmp_path, entry):
    # --mtp_num_layers 1e9: the size estimate (and the memory estimate) built every MTP layer: MemoryError after minutes
    args = [str(_topo16(tmp_path)) if a == "TOPO" else str(tmp_path / "w.csv") if a == "OUT" else a for a in entry]
    done = run_cli(*args, "--model_name", "gpt_tiny", "--world_size", "16", "--pipeline_model_parallel", "2",
                   "--global_batch", "16", "--position_embedding_type", "rope", "--mtp_num_layers", "1e9", timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-800:]
    assert "--mtp_num_layers (1,000,000,000)" in lines[0] and "--max_items" in lines[0]
    assert not (tmp_path / "w.csv").exists()

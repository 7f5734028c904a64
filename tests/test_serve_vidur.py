"""Vidur's profiling layout in and out (simulator/serve/vidur.py): a hand-made profile in Vidur's columns prices a step
by hand, and our export writes Vidur's own header lines and reads back."""

from __future__ import annotations

import csv

import pytest

from simulator.options import TopoOptions
from simulator.serve.cost import BatchStep, cost_model
from simulator.serve.vidur import ATTENTION_KEYS, MLP_KEYS, MLP_OPS, STATS, vidur_cost_model, write_profile
from utils.errors import ConfigError

VIDUR_MLP_HEADER = (
    "time_stats.emb.min,time_stats.emb.max,time_stats.emb.mean,time_stats.emb.median,time_stats.emb.std,"
    "time_stats.input_layernorm.min,time_stats.input_layernorm.max,time_stats.input_layernorm.mean,"
    "time_stats.input_layernorm.median,time_stats.input_layernorm.std,time_stats.attn_pre_proj.min,"
    "time_stats.attn_pre_proj.max,time_stats.attn_pre_proj.mean,time_stats.attn_pre_proj.median,"
    "time_stats.attn_pre_proj.std,time_stats.attn_rope.min,time_stats.attn_rope.max,time_stats.attn_rope.mean,"
    "time_stats.attn_rope.median,time_stats.attn_rope.std,time_stats.attn_post_proj.min,time_stats.attn_post_proj.max,"
    "time_stats.attn_post_proj.mean,time_stats.attn_post_proj.median,time_stats.attn_post_proj.std,"
    "time_stats.post_attention_layernorm.min,time_stats.post_attention_layernorm.max,"
    "time_stats.post_attention_layernorm.mean,time_stats.post_attention_layernorm.median,"
    "time_stats.post_attention_layernorm.std,time_stats.mlp_up_proj.min,time_stats.mlp_up_proj.max,"
    "time_stats.mlp_up_proj.mean,time_stats.mlp_up_proj.median,time_stats.mlp_up_proj.std,time_stats.mlp_act.min,"
    "time_stats.mlp_act.max,time_stats.mlp_act.mean,time_stats.mlp_act.median,time_stats.mlp_act.std,"
    "time_stats.mlp_down_proj.min,time_stats.mlp_down_proj.max,time_stats.mlp_down_proj.mean,"
    "time_stats.mlp_down_proj.median,time_stats.mlp_down_proj.std,time_stats.add.min,time_stats.add.max,"
    "time_stats.add.mean,time_stats.add.median,time_stats.add.std,n_head,n_kv_head,n_embd,n_expanded_embd,vocab_size,"
    "use_gated_mlp,num_tokens,num_tensor_parallel_workers")
"""The first line of microsoft/vidur data/profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv (commit 7d47513)."""
VIDUR_NETWORK_HEADER = (",time_stats.all_reduce.min,time_stats.all_reduce.max,time_stats.all_reduce.mean,"
                        "time_stats.all_reduce.median,time_stats.all_reduce.std,rank,num_workers,size,collective,"
                        "devices_per_node,max_devices_per_node")
"""The first line of microsoft/vidur data/profiling/network/h100_dgx/all_reduce.csv."""
LLAMA2_7B = dict(n_head=32, n_kv_head=32, n_embd=4096, n_expanded_embd=11008, vocab_size=32000, use_gated_mlp=True)


def _write(path, columns, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, columns)
        w.writeheader()
        w.writerows(rows)


def _profile(root):
    folder = root / "compute" / "h100" / "meta-llama" / "Llama-2-7b-hf"
    mlp_cols = [f"time_stats.{op}.{s}" for op in MLP_OPS for s in STATS] + list(MLP_KEYS)
    rows = []
    for tokens, up in ((8, 0.1), (16, 0.2)):   # ms; every other op 0 but the pre-projection's 0.05
        row = {c: 0.0 for c in mlp_cols if c.startswith("time_stats")}
        row.update({f"time_stats.mlp_up_proj.{s}": up for s in STATS}, **{f"time_stats.attn_pre_proj.{s}": 0.05
                                                                           for s in STATS})
        rows.append({**row, **LLAMA2_7B, "num_tokens": tokens, "num_tensor_parallel_workers": 1})
    _write(folder / "mlp.csv", mlp_cols, rows)
    att_cols = [f"time_stats.attn_{k}.median" for k in ("decode", "prefill")] + list(ATTENTION_KEYS)
    base = dict(n_embd=4096, n_q_head=32, n_kv_head=32, block_size=16, num_tensor_parallel_workers=1, max_model_len=4096,
                attention_backend="flashinfer")
    att = [dict(base, batch_size=b, prefill_chunk_size=0, kv_cache_size=kv, is_prefill=False,
                **{"time_stats.attn_decode.median": ms}) for b, kv, ms in ((1, 1000, 0.02), (2, 1000, 0.03), (1, 2000, 0.03))]
    att += [dict(base, batch_size=1, prefill_chunk_size=c, kv_cache_size=0, is_prefill=True,
                 **{"time_stats.attn_prefill.median": ms}) for c, ms in ((100, 0.06), (200, 0.15))]
    _write(folder / "attention.csv", att_cols, att)


def test_a_vidur_profile_prices_steps_by_hand(tmp_path):
    _profile(tmp_path)
    cost = vidur_cost_model(tmp_path, "llama2_7B", "H100")
    # decode fit a + b batch + c batch kv through (1, 1000) 0.02, (2, 1000 each) 0.03, (1, 2000) 0.03 ms:
    # c = 0.01 / 1000 = 1e-5 ms, a + b = 0.01, a + 2b = 0.01 -> b = 0, a = 0.01 ms
    a, b, c = cost.profile.decode
    assert (a, b, c) == pytest.approx((0.01e-3, 0.0, 1e-8), abs=1e-12)
    # prefill: pairs 100^2 / 2 = 5,000 -> 0.06 ms, 200^2 / 2 = 20,000 -> 0.15 ms: w = 6e-6 ms per pair, a = 0.03 ms
    assert cost.profile.prefill == pytest.approx((0.03e-3, 6e-9), rel=1e-9)
    # two decodes over 3,000 cached tokens: 2 tokens round up to 8 -> up 0.1 + pre-projection 0.05 = 0.15 ms;
    # attention (0.01 + 1e-5 x 3000) x 1.1 (Vidur's batching overhead, batch > 1) = 0.044 ms; x 32 layers = 6.208 ms
    assert cost.step_s(BatchStep(0, 0.0, 2, 3000)) == pytest.approx(6.208e-3, rel=1e-9)
    # a 12-token prefill (78 pairs): 16 tokens -> 0.2 + 0.05; 0.03 + 6e-6 x 78 = 0.030468 ms; x 32 = 8.974976 ms
    assert cost.step_s(BatchStep(12, 78.0, 0, 0, 1)) == pytest.approx(8.974976e-3, rel=1e-9)
    assert cost.kv_capacity_tokens > 0 and cost.replica_gpus == 1
    with pytest.raises(ConfigError, match="no mlp.csv holds the model"):
        vidur_cost_model(tmp_path, "llama3_8B", "H100")


def test_export_writes_vidurs_columns_and_reads_back(tmp_path):
    paths = write_profile(tmp_path, "llama3_8B", "H100", (1, 2), model_folder="meta-llama/Meta-Llama-3-8B",
                          network_device="h100_dgx", options=TopoOptions(gpus_per_server=8))
    mlp = tmp_path / "compute/h100/meta-llama/Meta-Llama-3-8B/mlp.csv"
    assert str(mlp) in paths and mlp.read_text().splitlines()[0] == VIDUR_MLP_HEADER
    assert (tmp_path / "network/h100_dgx/all_reduce.csv").read_text().splitlines()[0] == VIDUR_NETWORK_HEADER
    ours = cost_model("llama3_8B", "H100", None, tp=2, host=False)
    back = vidur_cost_model(tmp_path, "llama3_8B", "H100", tp=2)
    step = BatchStep(2048, 2048 * 2049 / 2, 0, 0, 1)
    # Vidur's composition leaves out the embedding, LM head and sampling and adds 0.02 ms per all-reduce (64): the
    # same kernels otherwise, so within a few per cent
    assert back.step_s(step) == pytest.approx(ours.step_s(step), rel=0.05)

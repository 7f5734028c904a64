"""Sliding-window attention in inference (GPT-OSS: 128 tokens on every other layer): the inference model keeps its
preset's windows, a windowed layer's KV is bounded per sequence (vLLM's sliding-window manager), its decode reads and
its prefill scores at most ``window`` positions, derived by hand."""

from __future__ import annotations

import pytest

from mocked_model.inference import stage_items
from mocked_model.inference_memory import KV_BLOCK_TOKENS, kv_bytes_per_token, state_bytes_per_sequence
from utils.inference_config import resolve_model
from utils.inference_job import InferenceJob

OSS = resolve_model("gpt_oss_120B")


def test_the_presets_windows_reach_the_inference_model():
    # 36 layers; Megatron's skip frequency 2 leaves the even (0-based) layers windowed
    assert OSS.window == 128 and OSS.window_layers == tuple(range(0, 36, 2))
    assert [OSS.attention_window(layer) for layer in range(4)] == [128, None, 128, None]
    assert resolve_model("llama3_8B").window_layers == ()


def test_windowed_layers_keep_a_bounded_kv_per_sequence():
    """TP 4: 8 KV heads / 4 = 2 heads of 64, K and V in bf16: 512 B per position and layer.  The 18 full layers grow
    with the sequence (9,216 B per token, half of the 18,432 every layer would take); the 18 windowed ones hold at most
    128 + 16 positions each: 18 x 144 x 512 = 1,327,104 B per sequence, or all of a shorter one's."""
    job = InferenceJob(OSS, "decode", 4096, 8, world_size=4, tp=4, ep=4)
    assert kv_bytes_per_token(job) == 18 * 512 == 9216
    assert KV_BLOCK_TOKENS == 16
    assert state_bytes_per_sequence(job) == 18 * (128 + 16) * 512
    assert state_bytes_per_sequence(job, positions=100) == 18 * 100 * 512


def test_decode_and_prefill_attention_of_a_windowed_layer():
    decode = InferenceJob(OSS, "decode", 4096, 8, world_size=4, tp=4, ep=4)
    ctx = {item.meta["name"]: item.meta["ctx"] for item in stage_items(decode) if item.meta.get("op") == "decode_attention"}
    assert ctx["layers.0.self_attn.attn"] == 128 and ctx["layers.1.self_attn.attn"] == decode.context
    prefill = InferenceJob(OSS, "prefill", 4096, 1, world_size=4, tp=4, ep=4)
    attention = {item.meta["name"]: item for item in stage_items(prefill) if item.meta.get("op") == "attention"}
    heads, d, s, w = 64 // 4, 64, 4096, 128
    # the band: s x w - w^2 / 2 score pairs against the causal square's s^2 / 2, QK^T and PV at 2 x d FLOPs each
    assert attention["layers.0.self_attn.attn"].flops == pytest.approx(2.0 * heads * (s * w - w * w / 2) * 2 * d)
    assert attention["layers.0.self_attn.attn"].meta["window"] == 128
    assert attention["layers.1.self_attn.attn"].flops == pytest.approx(2.0 * heads * s * s / 2 * 2 * d)


def test_the_serving_step_caps_a_windowed_layers_reads():
    """Decoding 4 sequences: past 4 x 128 = 512 positions in all, a windowed layer's attention costs the same; the
    full layers' keep growing."""
    from simulator.options import TopoOptions
    from simulator.serve.cost import cost_model

    cost = cost_model("gpt_oss_120B", "H100", None, tp=4, options=TopoOptions(gpus_per_server=8))
    windowed, full = (next(a for a in cost._attention[0] if (a.window is not None) == w) for w in (True, False))
    assert (windowed.count, full.count) == (18, 18)
    args = (4, 1, 0, 0.0, 0.0, 0.0)
    at = {ctx: (cost._attention_s(windowed, args[0], ctx, *args[1:]), cost._attention_s(full, args[0], ctx, *args[1:]))
          for ctx in (1000.0, 4000.0)}
    assert at[1000.0][0] == at[4000.0][0]
    assert at[4000.0][1] > at[1000.0][1]

"""The work of one flash-attention kernel over a piece of the score matrix: a query block against a key/value block,
causal or not, with or without a sliding window.  Context parallelism runs attention as such pieces (ring attention's
rounds, the all-gather path's two chunks), sliding-window layers compute only a band.

Conventions (the same as :func:`mocked_model.compute.kernels.attention_work`, whose causal square is the special case
``sq == skv`` without a window):

- the ``sq`` query rows are the last ``sq`` of the ``skv`` key positions (Transformer Engine's bottom-right aligned
  causal mask, ``padding_causal_bottom_right``: the all-gather path's chunk attends to every key before it);
- the scores a causal kernel computes are counted exactly (``sq (skv - sq) + sq^2 / 2``), a kernel without a mask
  computes ``sq x skv``;
- a sliding window of ``w`` keys to the left (FlashAttention-2 / cuDNN ``window_size = (w, 0)``): the kernel skips
  key blocks wholly outside the band, so it pays for every 128 x 128 block a query tile touches: a tile of 128 rows
  touches ``ceil((w + 128) / 128)`` key blocks once past the first ``w`` rows.  Counted in blocks, less half a block
  per tile (the diagonal block, as the causal count has it), so that a window as wide as the sequence gives the causal
  count back;
- FLOPs ``2 x scores x (d + dv)`` per batch element and head forward, 2.5 x that backward (FlashAttention-2, section
  3.1); thread blocks ``ceil(sq / 128)`` per batch element and head, each charged one key block of overhead
  (``cta_flops``, priced by :func:`mocked_model.compute.kernels.flash_attention_ns`).
"""

from __future__ import annotations

import math

from mocked_model.compute.kernels import ATTENTION_TILE


def band_scores(sq: int, skv: int, causal: bool = True, window: int | None = None) -> float:
    """Scores one head of one batch element computes: ``sq`` query rows (the last ``sq`` of ``skv`` positions when
    causal) against ``skv`` keys, in 128 x 128 blocks when a ``window`` narrower than the keys applies."""
    if not causal:
        return float(sq * skv)
    offset = skv - sq
    if window is None or window + 1 >= skv:
        return float(sq * offset + sq * sq / 2)
    tile = ATTENTION_TILE
    blocks = 0
    tiles = math.ceil(sq / tile)
    for t in range(tiles):
        first_row = offset + t * tile
        last_row = min(offset + (t + 1) * tile, skv) - 1
        first_key = max(0, first_row - window)
        blocks += last_row // tile - first_key // tile + 1
    exact_causal = sq * offset + sq * sq / 2
    return min((blocks - tiles / 2) * tile * tile, exact_causal)


def piece_work(batch: int, heads: int, sq: int, skv: int, head_dim: int, v_dim: int, causal: bool = True,
               window: int | None = None, backward: bool = False) -> tuple[float, float]:
    """FLOPs of one flash-attention kernel over a piece, and its ``cta_flops`` (thread blocks x one key block's FLOPs),
    as the module docstring counts them."""
    scale = 2.5 if backward else 1.0
    flops = 2.0 * batch * heads * band_scores(sq, skv, causal, window) * (head_dim + v_dim) * scale
    blocks = batch * heads * math.ceil(sq / ATTENTION_TILE)
    return flops, blocks * 2.0 * ATTENTION_TILE * ATTENTION_TILE * (head_dim + v_dim) * scale


def context_parallel_kernels(meta: dict, b: int, h: int, g: int, sq: int, skv: int, d: int, dv: int, a: int,
                             backward: bool) -> list:
    """The memory-bound kernels Transformer Engine's context parallelism adds around one attention piece
    (``pytorch/attention/dot_product_attention/context_parallel.py``), from the piece's meta:

    - ``cp_round`` (ring attention, ``AttnFuncWithCPAndKVP2P``): forward, each round's output is merged into the
      running output with the log-sum-exp correction (``flash_attn_fwd_out_correction``: read the round's output in
      ``a`` bytes, read and write the fp32 output); backward, the round's dK and dV are added into the buffer that
      travels the ring (``dk.add_(dk_)``: read both, write one);
    - ``cp_a2a`` (``AttnFuncWithCPAndQKVOA2A``): before the all-to-all each of Q, K, V is made contiguous with the CP
      dimension first, after it its sequence chunks are reordered (two copies each); the output (backward: dO before,
      dQ, dK, dV after) likewise: four passes of read and write over Q, K, V and O.
    """
    from mocked_model.compute.kernel_list import mem

    out = []
    if "cp_round" in meta:
        if backward:
            out.append(mem("ring dK/dV accumulate", b * g * skv * (d + dv) * 3 * a, 2, kind="add"))
        else:
            out.append(mem("ring output correction", b * h * sq * dv * (a + 8) + b * h * sq * 8, 2, kind="add"))
    if meta.get("cp_a2a"):
        elements = b * h * sq * (d + dv) + b * g * skv * (d + dv)
        out.append(mem("a2a reorders", elements * 2 * 2 * a, 8, kind="copy"))
    return out

"""The kernels of Megatron-core's MoE layer besides the dense GEMMs: the router's score, top-k and losses, the token
dispatchers' metadata, permutations and unpermutations, and the local experts' grouped GEMMs (``meta['op']``
``moe_route``, ``moe_dispatch_meta``, ``moe_permute``, ``moe_unpermute``, ``moe_sort_chunks``; grouped GEMM items
come through :func:`mocked_model.compute.training_ops._gemm_kernels`).

Each law counts the kernels Megatron-core launches (``megatron/core/transformer/moe``: ``router.py``
``TopKRouter.routing``, ``moe_utils.py`` ``topk_routing_with_score_function``, ``compute_routing_scores_for_aux_loss``,
``switch_load_balancing_loss_func``, ``z_loss_func``, ``apply_router_token_dropping``, ``permute``, ``unpermute``,
``sort_chunks_by_idxs``; ``token_dispatcher.py``) and the HBM bytes they move; ``--moe_router_fusion`` and
``--moe_permute_fusion`` swap the eager torch paths for Transformer Engine's fused kernels (``fused_topk_with_score_
function``, ``fused_compute_score_for_moe_aux_loss``, ``fused_moe_aux_loss``, ``moe_permute_with_probs``,
``moe_unpermute``, ``moe_sort_chunks_by_index``: one kernel each way, plus the row-id map's 3 kernels).  The router's
tensors are ``tokens x experts`` (small: their kernels cost launches more than bytes); the permutations move every
routed token copy (``rows x hidden``), which is what costs in fine-grained MoE.  Memory kinds: a gather
(``index_select``, a permutation) moves at the copy rate, a scatter-add (``scatter_add_``: atomic read-modify-write)
at the plain streaming rate (no measurement of its own: the kernel-level data in profiling/measurements/h200 has
none), the router's small kernels at the fp32 softmax's rate.
"""

from __future__ import annotations

from mocked_model.compute.kernel_list import Kernel, Precision, block_scaled, fp8_quantize, mem, phase
from mocked_model.compute.kernels import GemmShape

HOST_SYNC_US = 10.0
"""A device-to-host copy and synchronisation (the dispatcher's token counts, ``.tolist()`` / ``.cpu()``); the same
figure as :data:`mocked_model.compute.training_ops.HOST_SYNC_US`."""
ROW_MAP_KERNELS = 3
"""Kernels of Transformer Engine's row-id map before a fused permute (``moe_permute_row_map``: a block cumsum, its
scan and the map; TE ``pytorch/triton/permutation.py``)."""


def router_kernels(item, p: Precision) -> list[Kernel]:
    """The router after its gating GEMM, on ``((tokens, experts),)``; meta ``score`` (softmax or sigmoid), ``topk``,
    ``fused`` (``--moe_router_fusion``), ``logits_bytes`` / ``probs_bytes`` (the router dtype's: ``--moe_router_dtype
    fp32`` gives 4, else the activations'), ``aux`` (``aux_loss`` or ``seq_aux_loss`` when its coefficient > 0),
    ``z_loss``, ``groups`` (group-limited top-k), ``expert_bias``, ``capacity`` (token dropping).

    Eager forward, softmax: ``torch.topk`` on the logits, softmax of the k values in fp32, the cast back, and the
    sparse probabilities and routing map built by ``zeros_like`` + ``scatter`` (twice; the map through an int and a
    bool cast): 8 kernels.  Sigmoid (DeepSeek-V3): the fp32 cast and sigmoid, the expert bias added for the choice,
    top-k, the gather of the chosen scores, their sum and division, the scaling factor, the cast, and the same
    scatters: 12 kernels; group-limited top-k adds the per-group top-k and sum, the group top-k, its mask
    (zeros, scatter, expand) and the masked fill: 7.  Aux loss: its own softmax over all experts, top-k and map
    (4), the per-expert counts and probability sums (2) and the loss's scalar arithmetic (3); z-loss:
    ``logsumexp``, square, mean (4).  Capacity: top-k over the tokens of each expert, the mask's zeros and scatter,
    two multiplies (5).  Backward mirrors each: the scatters' gathers, the casts, the softmax's (or sigmoid's)
    backward, top-k's scatter into zeros, the losses' broadcasts added to the logits' gradient.  Fused (TE >= 2.6):
    one kernel for the top-k and score each way, and one each for the aux loss's scores and the loss."""
    meta = item.meta or {}
    shapes = item.shapes or ()
    if not shapes:
        return []
    tokens, experts = shapes[0][-2], shapes[0][-1]
    n = tokens * experts
    lb, pb = meta.get("logits_bytes", p.a), meta.get("probs_bytes", p.a)
    backward = phase(item) == "backward"
    sigmoid = meta.get("score") == "sigmoid"
    aux, z_loss = meta.get("aux"), meta.get("z_loss")
    out: list[Kernel] = []
    if meta.get("fused"):
        # read the logits, write the probabilities and the routing map; backward reads their gradient and writes the
        # logits' gradient
        out.append(mem("fused top-k and score" + (" backward" if backward else ""),
                       n * (pb + lb) if backward else n * (lb + pb + 1), kind="softmax"))
        if aux:
            out.append(mem("fused aux-loss scores and loss" + (" backward" if backward else ""),
                           n * (4 + lb) if backward else n * (lb + 4 + 1) + n * 4, 1 if backward else 2, kind="softmax"))
    elif not backward:
        if sigmoid:
            out.append(mem("sigmoid score, expert bias, top-k, normalise", n * (lb + 4 + 4 + 4) + tokens * 24, 9,
                           kind="softmax"))
        else:
            out.append(mem("top-k, softmax of the top-k", n * lb + tokens * 24, 3, kind="softmax"))
        out.append(mem("scatter probabilities and routing map", n * (pb + pb + 4 + 4 + 1), 5, kind="softmax"))
        if meta.get("groups"):
            out.append(mem("group-limited top-k", n * 4 * 3, 7, kind="softmax"))
        if aux:
            out.append(mem(f"{aux} scores, map and counts", n * (lb + 4 + 4 + 4 + 4 + 1 + 1), 6, kind="softmax"))
            out.append(mem(f"{aux} arithmetic", experts * 16, 3, kind="softmax"))
    else:
        out.append(mem("gather probabilities' gradient, cast", n * (pb + pb) + tokens * 24, 2, kind="softmax"))
        out.append(mem("score backward, top-k scatter into zeros", n * (lb + lb + 4), 3 if sigmoid else 2,
                       kind="softmax"))
        if aux:
            out.append(mem(f"{aux} backward", n * (4 + 4 + lb + lb), 3, kind="softmax"))
    if z_loss:
        out.append(mem("z-loss" + (" backward" if backward else ""), n * (lb + lb) if backward else n * lb + tokens * 8,
                       2 if backward else 4, kind="softmax"))
    if meta.get("capacity"):
        out.append(mem("token dropping" + (" backward" if backward else ""), n * (pb + 1) * (1 if backward else 3),
                       1 if backward else 5, kind="softmax"))
    if meta.get("expert_bias") and not backward:
        out.append(mem("expert-bias token counts", n, kind="softmax"))
    return out


def dispatch_meta_kernels(item, p: Precision) -> list[Kernel]:
    """A dispatcher's bookkeeping on ``((tokens, experts),)`` (forward only; no gradient flows through it); meta
    ``dispatcher``, ``syncs`` (device-to-host synchronisations), ``copies`` (bytes of the routing tensors it
    reshapes).  alltoall: the per-expert counts (``routing_map.sum``), their splits per rank and local expert (4
    small kernels), one D2H copy and wait (``_maybe_dtoh_and_synchronize``); allgather: the local map's and
    probabilities' slices and counts, ``.cpu()``; flex (DeepEP): the routing map and probabilities expanded to the
    TP x EP ranks, the top-k of the probabilities into indices, their fp32 cast, DeepEP's dispatch layout, and after
    the dispatch the indices turned back into a local multi-hot map (zeros, mask, ``repeat_interleave`` with its
    host sync, two ``index_put``)."""
    if phase(item) == "backward":
        return []
    meta = item.meta or {}
    shapes = item.shapes or ()
    tokens, experts = shapes[0][-2], shapes[0][-1]
    n = tokens * experts
    kernels = {"alltoall": 5, "allgather": 5, "flex": 12}.get(meta.get("dispatcher", "alltoall"), 5)
    syncs = int(meta.get("syncs", 1))
    return [mem(f"{meta.get('dispatcher', 'alltoall')} dispatcher metadata", n * 2 + meta.get("copies", 0), kernels,
                kind="softmax", host_us=syncs * HOST_SYNC_US)]


def permute_kernels(item, p: Precision) -> list[Kernel]:
    """Permute ``((tokens, hidden), (rows, hidden))``: gather each routed copy of a token into expert order (``rows``
    = routed copies), with its probability; meta ``fused``, ``experts`` (the routing map's width), ``probs_bytes``,
    ``pad`` (drop-and-pad: an argsort per expert of the transposed map).

    Eager: the routing map transposed (``.T.contiguous()``), its stable argsort (a radix sort: about 4 passes of
    the ``experts x tokens`` keys with int64 indices), the row indices, the probabilities' transpose and gather,
    and ``index_select`` of the tokens: ``rows x hidden`` read and written.  Fused: the row-id map (3 kernels) and
    one permute kernel reading and writing the rows (TE ``moe_permute_with_probs``).  Backward is an unpermute of
    the gradients: a scatter-add of the rows onto zeroed tokens (eager: ``index_select``'s backward, zeros and
    ``index_add_``), fused one kernel; the probabilities' gradient is gathered back (2 kernels eager)."""
    meta = item.meta or {}
    shapes = item.shapes or ()
    if len(shapes) < 2:
        return []
    (tokens, hidden), rows = shapes[0][-2:], shapes[1][-2]
    experts = meta.get("experts", 1)
    pb, a = meta.get("probs_bytes", p.a), p.a
    token_bytes = hidden * a
    backward = phase(item) == "backward"
    probs = meta.get("probs", True)
    if meta.get("fused"):
        if backward:
            return [mem("fused unpermute of the gradients", rows * token_bytes + tokens * token_bytes
                        + (rows * pb * 2 if probs else 0), kind="stream")]
        return [mem("row-id map", tokens * experts * (1 + 4 + 4), ROW_MAP_KERNELS, kind="copy"),
                mem("fused permute", rows * token_bytes * 2 + (rows * pb * 2 if probs else 0), kind="copy")]
    if backward:
        out = [mem("scatter-add of the gradients (zeros, index_add_)", tokens * token_bytes * 2 + rows * token_bytes
                   + rows * 8, 2, kind="stream")]
        if probs:
            out.append(mem("probabilities' gradient", tokens * experts * pb * 2 + rows * (pb + 8), 2, kind="copy"))
        return out
    keys = tokens * experts
    out = [mem("routing map transpose", keys * 2, kind="copy"),
           mem("argsort of the routing map", keys * (1 + 8) * 4, 6, kind="copy"),
           mem("row indices", rows * 8 * 3, 2, kind="copy")]
    if probs:
        out.append(mem("probabilities' transpose and gather", keys * pb * 2 + rows * (pb + 8), 2, kind="copy"))
    out.append(mem("index_select of the tokens", rows * (token_bytes * 2 + 8), kind="copy"))
    return out


def unpermute_kernels(item, p: Precision) -> list[Kernel]:
    """Unpermute ``((rows, hidden), (tokens, hidden))``: sum each token's routed copies back into its place (the
    probabilities were applied in the experts' weighted activation, ``TEGroupedMLP``'s ``bias_act_func``).  Eager:
    zeros and ``scatter_add_`` of the rows (read every row and its index, read-modify-write the tokens; meta
    ``cast``: a cast back when the rows are fp32); fused: one TE kernel reading the rows and writing the tokens.
    Backward gathers the tokens' gradient into the rows (``scatter_add_``'s backward, or the fused kernel)."""
    meta = item.meta or {}
    shapes = item.shapes or ()
    if len(shapes) < 2:
        return []
    (rows, hidden), tokens = shapes[0][-2:], shapes[1][-2]
    token_bytes = hidden * p.a
    if phase(item) == "backward":
        return [mem("gather of the gradients", rows * (token_bytes * 2 + 8), kind="copy")]
    if meta.get("fused"):
        return [mem("fused unpermute", rows * token_bytes + tokens * token_bytes, kind="stream")]
    out = [mem("zeros, scatter_add_ of the rows", tokens * token_bytes * 3 + rows * (token_bytes + 8), 2, kind="stream")]
    if meta.get("cast"):
        out.append(mem("cast back", tokens * hidden * (4 + p.a), kind="copy"))
    return out


def sort_chunks_kernels(item, p: Precision) -> list[Kernel]:
    """The all-to-all dispatcher's second permutation, ``((rows, hidden),)``: the received chunks (one per source
    rank and local expert) reordered by local expert, tokens and probabilities (meta ``probs_bytes``; 0 on the
    combine side, which moves only tokens).  Eager: ``torch.split`` and ``torch.cat`` (one copy kernel per tensor);
    fused: TE's ``moe_sort_chunks_by_index`` (one kernel).  Backward: the inverse reordering, alike."""
    meta = item.meta or {}
    shapes = item.shapes or ()
    if not shapes:
        return []
    rows, hidden = shapes[0][-2:]
    pb = meta.get("probs_bytes", 0)
    nbytes = rows * (hidden * p.a + pb) * 2
    fused = meta.get("fused")
    return [mem("sort chunks by local expert", nbytes, 1 if fused else (2 if pb else 1), kind="copy")]


def expert_bias_kernels(item, p: Precision) -> list[Kernel]:
    """The experts' fc2 bias under Transformer Engine's grouped GEMMs, ``((rows, hidden),)`` with meta ``experts``:
    ``TEGroupedMLP._apply_bias`` (Megatron-core ``moe/experts.py``) adds it eagerly, one expert at a time, weighted by
    the routing probability: ``t + b * p`` per expert on ``torch.split`` views (the fp32 probabilities make both results
    fp32), ``torch.cat`` of the experts and the cast back to the activations' dtype: 2 kernels per expert and 2, about
    ``a + 4 + 4 + 4 + 4 + 4 + a`` bytes per element (product written; the add reads the rows and the product and writes;
    the cat reads and writes; the cast reads and writes).  Backward: the cast's backward (fp32 gradient), per expert the
    rows' gradient cast back (the add), the bias's gradient (``g * p`` summed over the tokens) and the probabilities'
    (``g * b`` summed over the hidden size): 5 kernels per expert and 1, about 26 bytes per element."""
    shapes = item.shapes or ()
    if not shapes:
        return []
    rows, hidden = shapes[0][-2:]
    experts = max(int((item.meta or {}).get("experts", 1)), 1)
    n = rows * hidden
    if phase(item) == "backward":
        return [mem("expert bias backward (per expert)", n * (p.a + 4 + 4 + p.a + 4 + 4 + 4), 5 * experts + 1, kind="add")]
    return [mem("expert bias (per expert, weighted)", n * (4 + p.a + 4 + 4 + 4 + 4 + p.a), 2 * experts + 2, kind="add")]


def grouped_gemm_kernels(item, p: Precision) -> list[Kernel] | None:
    """The local experts' GEMMs as one grouped launch (``((tokens, k), (E, k, n))``, meta ``tokens_per_expert``):
    forward ``m_e x n x k`` per expert, dgrad ``m_e x k x n`` (the input's gradient), wgrad ``k x n`` over ``m_e``
    tokens; priced by :mod:`mocked_model.compute.grouped` (None when the item carries no per-expert counts: the
    caller's even split applies).  FP8 (TE's ``GroupedLinear``): each expert's rows padded to 16 (``Fp8Padding``,
    a copy when any count is not a multiple) and quantized by ``split_quantize`` (forward: the permuted tokens;
    dgrad: the output gradient): one fused multi-tensor cast under delayed scaling, else one expert at a time
    (:func:`mocked_model.compute.kernel_list.fp8_quantize`: current scaling's amax, scale and cast per expert);
    weights once per iteration (the optimizer item)."""
    meta = item.meta or {}
    counts = meta.get("tokens_per_expert")
    shapes = item.shapes or ()
    if not counts or len(shapes) < 2 or len(shapes[1]) != 3:
        return None
    _, k, n = shapes[1]
    op = meta.get("op")
    kind = p.kind
    accumulate = op == "wgrad" and meta.get("accumulate", True)
    out_bytes = meta.get("grad_bytes", 4) if accumulate else p.a
    total = sum(counts)
    if op == "wgrad":
        group = tuple((k, n, m) for m in counts)
        shape = GemmShape(k, n, total, 1, kind, out_bytes, accumulate, block_scaled(kind, meta))
    elif op == "dgrad":
        group = tuple((m, k, n) for m in counts)
        shape = GemmShape(total, k, n, 1, kind, out_bytes, accumulate, block_scaled(kind, meta))
    else:
        group = tuple((m, n, k) for m in counts)
        shape = GemmShape(total, n, k, 1, kind, out_bytes, accumulate, block_scaled(kind, meta))
    out = [Kernel(f"grouped {op} gemm ({len(counts)} experts)", shape, group=group)]
    if op == "wgrad" and not accumulate and meta.get("main_grad", True):
        g = meta.get("grad_bytes", 4)
        out.append(mem("main-grad accumulate", len(counts) * k * n * (g + p.a + g), kind="add" if g == p.a else "mixed_add"))
    if kind == "fp8" and op in ("gemm", "dgrad"):
        width = k if op == "gemm" else n
        if any(m % 16 for m in counts):
            out.append(mem("fp8 padding of the experts' rows", total * width * p.a * 2, kind="copy"))
        name = "fp8 cast of the grouped input" if op == "gemm" else "fp8 cast of the grouped output gradient"
        out += fp8_quantize(name, total * width, p, meta, tensors=sum(1 for m in counts if m))
    return out


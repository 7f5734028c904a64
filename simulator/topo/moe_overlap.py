"""Megatron-core's all-to-all overlap of 1F1B (``--overlap_moe_expert_parallel_comm``, with or without
``--delay_wgrad_compute``) in ``--model topo``.

Megatron runs the steady state's forward of one micro-batch and backward of another as one combined step
(``megatron/core/pipeline_parallel/combined_1f1b.py``; the first forward and the last backward of a rank run
alone), layer by layer (``TransformerLayerSchedulePlan.run`` in ``megatron/core/models/common/model_chunk_schedule_
plan.py``: forward layer ``i`` beside the backward's ``i``-th layer in its own order), on two streams::

    comm stream: combine_bwd        | dispatch_fwd -> dispatch_bwd      | combine_fwd
    comp stream: attn+router_fwd    | mlp_bwd -> mlp_bwd_dw -> mlp_fwd  | attn+router_bwd

so each one's expert all-to-alls hide behind the other's computation.  This module plays that two-stream schedule
per layer pair with the ops' own times: a forward layer's ops split at its token all-to-alls into ``A_f`` (before
the dispatch), ``D_f``, ``M_f`` (experts), ``C_f`` (combine) and ``P_f`` (after it); a backward layer's into
``pre_b``, ``C_b``, ``M_b``, ``D_b``, ``A_b``.  Dependencies: ``C_b`` after ``pre_b``; ``D_f`` after ``A_f`` and
``C_b``; ``M_b`` after ``C_b``; ``D_b`` after ``M_b`` (with ``--delay_wgrad_compute`` after its input gradients
only: the experts' weight gradients move past it) and ``D_f``; ``M_f`` after ``M_b`` and ``D_f``; ``C_f`` after
``M_f`` and ``D_b``; ``A_b`` after ``M_f`` and ``D_b``; ``P_f`` after ``A_b`` and ``C_f``.  A computation beside an
all-to-all runs at ``1 - c`` of its speed, ``c`` the share of the SMs the all-to-all kernels hold (NCCL's channels;
DeepEP's 20 SMs), as the engine's ``contention`` does for TP.

The pair's time ``T`` replaces the sequential sum ``S`` of its ops; the engine keeps playing forward and backward
steps one after the other, so the saving ``S - T`` is taken off the pair's all-to-alls: each of them is scaled by
``1 - (S - T) / (their sum)`` (never below 0) in copies of the two programs.  Steps are paired as the schedule
places them: a backward followed by a forward (Megatron's combined step), then any forward and backward still
adjacent (P2P steps between them aside); unpaired steps keep their all-to-alls whole.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from simulator.topo.programs import COMM, COMPUTE, Op, Program, StageScript

EP_GROUPS = frozenset({"ep_group", "ep_tp_group"})


def _is_a2a(op: Op) -> bool:
    return op.kind == COMM and op.comm_type == "all_to_all" and op.group in EP_GROUPS


def _layers(program: Program) -> list[tuple[str, list[int]]]:
    """The program's ops grouped by layer key, in order (runs of the same key)."""
    out: list[tuple[str, list[int]]] = []
    for index, op in enumerate(program.ops):
        if out and out[-1][0] == op.layer:
            out[-1][1].append(index)
        else:
            out.append((op.layer, [index]))
    return out


def _split(indices: list[int], program: Program) -> tuple[list[int], list[int], list[int], list[int], list[int]] | None:
    """A layer's op indices cut at its first two runs of token all-to-alls: (before, first, between, second, after);
    None when the layer has fewer than two runs (a dense layer)."""
    runs: list[list[int]] = []
    for i in indices:
        if _is_a2a(program.ops[i]):
            if runs and runs[-1][-1] == i - 1:
                runs[-1].append(i)
            else:
                runs.append([i])
    if len(runs) < 2:
        return None
    first, second = runs[0], runs[1]
    return ([i for i in indices if i < first[0]], first, [i for i in indices if first[-1] < i < second[0]], second,
            [i for i in indices if i > second[-1]])


def _slowed(start: float, work: float, busy: Sequence[tuple[float, float]], c: float) -> float:
    """When a computation of ``work`` seconds started at ``start`` ends, running at ``1 - c`` of its speed while
    the intervals ``busy`` (all-to-alls on the other stream) last."""
    t, left = start, work
    for a, b in sorted(busy):
        if left <= 0:
            break
        if b <= t:
            continue
        if a > t:
            run = min(left, a - t)
            t, left = t + run, left - run
            if left <= 0:
                break
        span = b - t
        if span * (1.0 - c) >= left:
            return t + left / (1.0 - c)
        left -= span * (1.0 - c)
        t = b
    return t + max(left, 0.0)


def pair_time(f: Sequence[float], b: Sequence[float], c: float, delay_wgrad: bool, b_wgrad: float = 0.0) -> float:
    """Seconds of one forward layer ``f = (A_f, D_f, M_f, C_f, P_f)`` beside one backward layer ``b = (pre_b, C_b,
    M_b, D_b, A_b)`` on Megatron's two streams (the module's dependencies); ``b_wgrad``: the part of ``M_b`` that is
    weight gradients (run after ``D_b`` is issued with ``delay_wgrad``)."""
    a_f, d_f, m_f, c_f, p_f = f
    pre_b, c_b, m_b, d_b, a_b = b
    busy: list[tuple[float, float]] = []
    cb = (pre_b, pre_b + c_b)
    busy.append(cb)
    end_af = _slowed(pre_b, a_f, busy, c)
    df_start = max(cb[1], end_af)
    df = (df_start, df_start + d_f)
    busy.append(df)
    mb_start = max(end_af, cb[1])
    if delay_wgrad:
        end_dgrad = _slowed(mb_start, m_b - b_wgrad, busy, c)
        db_start = max(df[1], end_dgrad)
        db = (db_start, db_start + d_b)
        busy.append(db)
        end_mb = _slowed(end_dgrad, b_wgrad, busy, c)
    else:
        end_mb = _slowed(mb_start, m_b, busy, c)
        db_start = max(df[1], end_mb)
        db = (db_start, db_start + d_b)
        busy.append(db)
    end_mf = _slowed(max(end_mb, df[1]), m_f, busy, c)
    cf_start = max(db[1], end_mf)
    cf = (cf_start, cf_start + c_f)
    busy.append(cf)
    end_ab = _slowed(max(end_mf, db[1]), a_b, busy, c)
    end_pf = _slowed(max(end_ab, cf[1]), p_f, busy, c)
    return max(end_pf, cf[1])


def _overlapped_pair(fwd: Program, bwd: Program, time: Callable[[Op], float], c: float,
                     delay_wgrad: bool) -> tuple[Program, Program]:
    """Copies of a paired forward and backward program with their MoE layers' all-to-alls scaled (module doc)."""
    f_layers = [(key, cut) for key, idx in _layers(fwd) if (cut := _split(idx, fwd)) is not None]
    b_layers = [(key, cut) for key, idx in _layers(bwd) if (cut := _split(idx, bwd)) is not None]
    f_scale: dict[int, float] = {}
    b_scale: dict[int, float] = {}
    for (_, fc), (_, bc) in zip(f_layers, b_layers):
        f_t = [sum(time(fwd.ops[i]) for i in part) for part in fc]
        b_t = [sum(time(bwd.ops[i]) for i in part) for part in bc]
        wgrad = sum(time(bwd.ops[i]) for i in bc[2] if bwd.ops[i].kind == COMPUTE and bwd.ops[i].phase == "wg")
        together = pair_time(f_t, b_t, c, delay_wgrad, wgrad)
        a2a = f_t[1] + f_t[3] + b_t[1] + b_t[3]
        saving = sum(f_t) + sum(b_t) - together
        if a2a <= 0 or saving <= 0:
            continue
        factor = max(0.0, 1.0 - saving / a2a)
        for i in fc[1] + fc[3]:
            f_scale[i] = factor
        for i in bc[1] + bc[3]:
            b_scale[i] = factor

    def scaled(program: Program, scale: dict[int, float]) -> Program:
        if not scale:
            return program
        ops = [replace(op, scale=op.scale * scale[i]) if i in scale else op for i, op in enumerate(program.ops)]
        return Program(program.kind, ops, program.work, program.hw_work)

    return scaled(fwd, f_scale), scaled(bwd, b_scale)


def pairs(script: StageScript) -> list[tuple[int, int]]:
    """(forward step, backward step) index pairs Megatron's combined 1F1B runs together: each backward followed by a
    forward (P2P steps between them aside), then forward-backward neighbours left over."""
    fb = [i for i, st in enumerate(script.steps) if st.kind in ("F", "B")]
    used: set[int] = set()
    out: list[tuple[int, int]] = []
    for first_pass in (True, False):
        for a, b in zip(fb, fb[1:]):
            if a in used or b in used:
                continue
            ka, kb = script.steps[a].kind, script.steps[b].kind
            if (ka, kb) == ("B", "F") or (not first_pass and ka != kb):
                out.append((b, a) if ka == "B" else (a, b))
                used.update((a, b))
    return sorted(out)


def overlap_moe_a2a(scripts: Sequence[StageScript], op_time: Callable[[int, Op], float], contention: float,
                    delay_wgrad: bool) -> list[StageScript]:
    """The stages' scripts with the combined-1F1B overlap applied: copies whose paired steps run scaled copies of
    their programs (each distinct pair built once); the scripts given are left as they are (a session may simulate
    them again on another fabric)."""
    out = []
    for script in scripts:
        s = script.stage
        made: dict[tuple[int, int], tuple[Program, Program]] = {}
        programs = list(script.programs)
        for f, b in pairs(script):
            fwd, bwd = script.programs[f], script.programs[b]
            if fwd is None or bwd is None:
                continue
            key = (id(fwd), id(bwd))
            if key not in made:
                made[key] = _overlapped_pair(fwd, bwd, lambda op, s=s: op_time(s, op), contention, delay_wgrad)
            programs[f], programs[b] = made[key]
        out.append(replace(script, programs=programs))
    return out

"""Megatron's pipeline schedules: hand-checked sequences, and every stage's p2p matching its
neighbours' so that the played pipeline neither deadlocks nor loses a tensor."""

import pytest

from workload_generator.schedules import interleaved, one_f_one_b, pipeline_schedule


def _compact(steps):
    out = []
    for s in steps:
        if s.kind == "P2P":
            out.append("+".join(s.ops))
        else:
            out.append(f"{s.kind}{s.microbatch}" + (f"c{s.chunk}" if s.chunk else ""))
    return out


def test_1f1b_by_hand():
    # pp 4, 6 micro-batches.  Rank 1: warm-up min(4-1-1, 6) = 2 forwards, 4 steady 1F1B, 2 cool-down.
    assert _compact(one_f_one_b(4, 1, 6)) == [
        "recv_prev", "F0", "send_next",
        "recv_prev", "F1", "send_next",
        "recv_prev",                                    # before the steady state
        "F2", "send_next+recv_next", "B0", "send_prev+recv_prev",
        "F3", "send_next+recv_next", "B1", "send_prev+recv_prev",
        "F4", "send_next+recv_next", "B2", "send_prev+recv_prev",
        "F5", "send_next+recv_next", "B3", "send_prev",   # the last steady step only sends
        "recv_next", "B4", "send_prev",
        "recv_next", "B5", "send_prev",
    ]
    # The last rank has no warm-up and never talks to a next stage.
    assert _compact(one_f_one_b(4, 3, 2)) == ["recv_prev", "F0", "B0", "send_prev+recv_prev", "F1", "B1", "send_prev"]
    # pp 1: forward and backward per micro-batch
    assert _compact(pipeline_schedule(1, 0, 2)) == ["F0", "B0", "F1", "B1"]


def _play(pp, schedules):
    """Run every rank's schedule: a p2p call completes when each of its ops meets the matching op of
    the neighbour's current call (FIFO per direction, ring wrap-around).  Returns False on deadlock."""
    pos = [0] * pp
    sent = {}
    while any(pos[r] < len(schedules[r]) for r in range(pp)):
        progressed = False
        for r in range(pp):
            while pos[r] < len(schedules[r]) and schedules[r][pos[r]].kind != "P2P":
                pos[r] += 1
                progressed = True
        current = {r: schedules[r][pos[r]] for r in range(pp) if pos[r] < len(schedules[r])}
        ready = set(current)
        changed = True
        while changed:
            changed = False
            for r in list(ready):
                for op in current[r].ops:
                    peer = (r + (1 if op.endswith("next") else -1)) % pp
                    want = {"send_next": "recv_prev", "recv_next": "send_prev",
                            "send_prev": "recv_next", "recv_prev": "send_next"}[op]
                    if peer not in ready or want not in current[peer].ops:
                        ready.discard(r)
                        changed = True
                        break
        for r in ready:
            for op in current[r].ops:
                sent[(r, op)] = sent.get((r, op), 0) + 1
            pos[r] += 1
            progressed = True
        if not progressed:
            return False, sent
    return True, sent


@pytest.mark.parametrize("pp, m, v", [(2, 2, 1), (4, 8, 1), (4, 3, 1), (8, 16, 1), (4, 8, 2), (4, 4, 2),
                                      (2, 4, 3), (4, 12, 3), (8, 8, 4)])
def test_schedules_play_without_deadlock(pp, m, v):
    schedules = [pipeline_schedule(pp, r, m, v) for r in range(pp)]
    ok, sent = _play(pp, schedules)
    assert ok
    for _r, steps in enumerate(schedules):
        fwd = sorted((s.microbatch, s.chunk) for s in steps if s.kind == "F")
        bwd = sorted((s.microbatch, s.chunk) for s in steps if s.kind == "B")
        assert fwd == bwd == sorted((mb, c) for mb in range(m) for c in range(v))
        # every backward after its forward
        order = [(s.kind, s.microbatch, s.chunk) for s in steps if s.kind != "P2P"]
        for mb in range(m):
            for c in range(v):
                assert order.index(("F", mb, c)) < order.index(("B", mb, c))
    # activations: every virtual stage but the last sends one per micro-batch to the next
    total_sends = sum(n for (r, op), n in sent.items() if op == "send_next")
    assert total_sends == m * (pp * v - 1)
    assert sum(n for (r, op), n in sent.items() if op == "send_prev") == m * (pp * v - 1)


def test_interleaved_by_hand():
    # pp 2, 4 micro-batches, 2 chunks on rank 0: warm-up (2-0-1)*2 + (2-1)*2 = 4 of 8 virtual
    # micro-batches; forward k runs on chunk (k mod 4) div 2: F0c0 F1c0 F0c1 F1c1, then 1F1B.
    steps = [s for s in interleaved(2, 0, 4, 2) if s.kind != "P2P"]
    assert [(s.kind, s.microbatch, s.chunk) for s in steps[:6]] == [
        ("F", 0, 0), ("F", 1, 0), ("F", 0, 1), ("F", 1, 1), ("F", 2, 0), ("B", 0, 1)]

"""The communication no schedule can hide, for the search's lower bound (:mod:`simulator.search.cache`).

Two kinds of it stop a stage's compute stream in the topo engine (:mod:`simulator.topo.engine`) whatever else happens:

- a collective the programs mark blocking (``COMM``: :func:`simulator.topo.programs._item_op_plain` decides, e.g. a
  sequence-parallel all-gather or reduce-scatter without ``--tp_comm_overlap``, an expert all-to-all): the stream
  waits for all of it (``t += d``);
- a P2P step: it ends no earlier than its own longest send has been transferred (``end >= t + send_end``).

So a stage's work ``W_s`` in the bound grows by its blocking collectives and by each P2P step's longest send, and
every hop of the chain by the activation's or gradient's transfer.  Both are priced as the engine prices them: the
session's fabric (the same object, so routes and group shapes found here serve the simulations after), NCCL's cost
of each collective on the group's shape (:func:`simulator.topo.collectives.collective_cost`) and of each send on its
route (:func:`simulator.topo.collectives.p2p_cost`), with the link model :func:`simulator.topo.model.build_fabric` gives
a simulation with default options.  Anything this module cannot classify or price adds nothing: the bound only
loses tightness, never soundness.
"""

from __future__ import annotations

from typing import Any

MAX_SCHEDULE_STEPS = 1_000_000
"""Schedules longer than this (stages x micro-batches x chunks) are not walked for their P2P steps (a 10^9 global
batch): their sends add nothing to the bound."""


class CommFloor:
    """Prices the unhideable communication of layouts on one sweep point's topology."""

    def __init__(self, session: Any, world: int) -> None:
        from simulator.options import TopoOptions
        from simulator.topo.model import build_fabric

        self.options = TopoOptions()
        fabrics = getattr(session, "_caches", {}).get("fabrics")
        self.fabric, self.links, _ = build_fabric(session.topology, self.options, world, fabrics)
        self._costs: dict[tuple, float] = {}
        self._steps: dict[tuple, list[tuple[int, int, int]]] = {}
        self._placements: dict[tuple, Placement] = {}

    # ---- per layout -------------------------------------------------------------------------------

    def placement(self, job: Any) -> Placement:
        """The job's ranks on the fabric (its representative rank per stage, its groups' shapes), shared by the
        layouts of the same parallel split and rank order."""
        p = job.parallel
        key = (p.world_size, p.tp, p.pp, p.dp, p.cp, p.ep, p.expert_tp, p.order, getattr(p, "hierarchical_cp", None))
        found = self._placements.get(key)
        if found is None:
            found = self._placements[key] = Placement(self, p)
        return found

    def p2p_steps(self, pp: int, ga: int, chunks: int) -> list[tuple[int, int, int]]:
        """Per stage: how many P2P steps send only forward, only backward, and both (Megatron's schedule,
        :func:`workload_generator.schedules.pipeline_schedule`); empty when the schedule is too long to walk."""
        key = (pp, ga, chunks)
        found = self._steps.get(key)
        if found is None:
            found = []
            if pp > 1 and pp * ga * chunks <= MAX_SCHEDULE_STEPS:
                from workload_generator.schedules import pipeline_schedule

                for s in range(pp):
                    counts = [0, 0, 0]
                    for step in pipeline_schedule(pp, s, ga, chunks):
                        if step.kind != "P2P":
                            continue
                        nxt, prev = "send_next" in step.ops, "send_prev" in step.ops
                        if nxt or prev:
                            counts[2 if nxt and prev else 0 if nxt else 1] += 1
                    found.append(tuple(counts))
            self._steps[key] = found
        return found

    def collective_s(self, shape: Any, comm_type: str, size: int) -> float:
        """Seconds of one collective on a group of ``shape``: NCCL's model, as the engine prices it."""
        key = (shape, comm_type, size)
        hit = self._costs.get(key)
        if hit is None:
            from simulator.topo.collectives import collective_cost

            hit = self._costs[key] = collective_cost(comm_type, size, shape, self.links).time_s
        return hit


class Placement:
    """One parallel split and rank order on a :class:`CommFloor`'s fabric: per stage its representative rank (pipeline
    rank ``s``, the others 0), the shape of each of its groups, and the cost of its sends."""

    def __init__(self, floor: CommFloor, parallel: Any) -> None:
        self.floor, self.parallel = floor, parallel
        rg = parallel.rank_generator()
        self.rep = [rg.rank_at(pp=s) for s in range(parallel.pp)]
        self._shapes: dict[tuple[int, str], Any] = {}
        self._sums: dict[tuple[int, int], tuple[tuple, float]] = {}
        self._sends: dict[tuple[int, str, int], float] = {}

    def shape(self, stage: int, group: str) -> Any:
        """The shape of the ``group`` holding the stage's representative rank (:meth:`TopoModel.members`)."""
        key = (stage, group)
        found = self._shapes.get(key)
        if found is None:
            rank = self.rep[stage]
            found = self._shapes[key] = self.floor.fabric.group_shape(self.parallel.group_of(rank, group) or [rank])
        return found

    def collectives_s(self, stage: int, ops: tuple) -> float:
        """Seconds of ``ops`` (``(group, type, bytes, scale)``) on the stage, one after another."""
        if not ops:
            return 0.0
        key = (stage, id(ops))  # (a tuple's hash is not kept: the search's cache hands out the same tuple objects)
        hit = self._sums.get(key)
        if hit is None or hit[0] is not ops:
            hit = self._sums[key] = (ops, sum(self.floor.collective_s(self.shape(stage, g), t, n) * k
                                              for g, t, n, k in ops))
        return hit[1]

    def send_s(self, stage: int, op: str, size: int) -> float:
        """Seconds of one p2p send of ``size`` bytes from ``stage`` (``send_next`` or ``send_prev``), as
        :meth:`simulator.topo.model.TopoModel.p2p` prices it (the route between the two stages' representatives)."""
        key = (stage, op, size)
        hit = self._sends.get(key)
        if hit is None:
            from simulator.topo.collectives import p2p_cost

            pp = self.parallel.pp
            peer = (stage + 1) % pp if op.endswith("next") else (stage - 1) % pp
            route = self.floor.fabric.p2p_shape(self.rep[stage], self.rep[peer])
            hit = self._sends[key] = p2p_cost(size, route.same_server, route.bottleneck_Bps, route.latency_s,
                                              self.floor.links, route.congestion).time_s
        return hit


def _classifier() -> tuple[Any, Any]:
    """``(item, phase, tp_comm_overlap) -> Op or None`` as the topo engine's programs classify an item
    (:func:`simulator.topo.programs._item_op_plain`), and the kind it gives a blocking collective; (None, None) when that
    function is not there to ask."""
    try:
        from simulator.topo.programs import COMM, _Counters, _item_op_plain
    except ImportError:
        return None, None

    def classify(item: Any, phase: str, tp_comm_overlap: bool) -> Any:
        try:
            return _item_op_plain(item, phase, lambda _item: 0.0, _Counters(), tp_comm_overlap)
        except TypeError:  # another signature: nothing classified, nothing added
            return None

    return classify, COMM

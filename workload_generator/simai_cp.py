"""Context parallelism in a SimAI workload file, whose format has no CP group (docs/formats.md section 2).

SimAI forms its groups from the header's ``tp``, ``ep`` and ``pp`` and ``all_gpus``: its DP group is the
``all_gpus / (tp x pp)`` ranks of a stage with the same TP rank, and its EP group ``ep`` of them at stride ``tp``
(docs/simai_analytical.md, "Bandwidth of one collective").  Under Megatron's ``tp-cp-ep-dp-pp`` order both line up
with context parallelism's groups, so the writer maps them:

- the gradient reductions over ``dp x cp`` (``dp_cp_group``) are SimAI's DP group: the wg column without a suffix;
- with a dense model (``ep`` 1) the header says ``ep = cp`` (for ``a2a+p2p``: the first level's size) and every CP
  collective is written in SimAI's EP group (``_EP``), whose ranks are exactly Megatron's CP group (the a2a level's);
- ring attention's exchanges (isend / irecv, which SimAI's records cannot carry) become, per layer and direction,
  one all-gather over the CP group of ``P`` times the K/V one transfer moves: a ring all-gather makes the same
  ``P - 1`` hops of that size, so SimAI charges the same bytes; backward moves twice that (K/V, then dK/dV), written
  as that all-gather and a reduce-scatter of the same size.  SimAI plays them blocking: the overlap of each round with
  its attention is lost, so the file's CP time is an upper bound where the ring hides behind the attention;
- what cannot be mapped is left out and counted in ``dropped`` (the derivation's report): CP collectives when the
  model also has expert parallelism (SimAI's one EP group is the experts'), and the second level of ``a2a+p2p``.
"""

from __future__ import annotations

from utils.workload import CommGroup, CommType, WorkItem

_RING = {CommGroup.cp_group, CommGroup.cp_p2p_group}
_CP_GROUPS = {CommGroup.cp_group, CommGroup.cp_a2a_group, CommGroup.cp_p2p_group}


def simai_ep(job) -> int:
    """The header's ``ep``: the job's, or with context parallelism and no expert parallelism the CP group SimAI's EP
    group stands for (the a2a level of ``a2a+p2p``)."""
    p = job.parallel
    if p.cp == 1 or p.ep > 1:
        return p.ep
    return p.hierarchical_cp[0] if job.training.cp_comm_type == "a2a+p2p" and p.hierarchical_cp else p.cp


class SimAIContextView:
    """Maps one job's work items to what SimAI's records can carry (the module docstring); each item maps to the same
    object every time (the writer caches tokens by identity)."""

    def __init__(self, job) -> None:
        self.job = job
        self.ep = simai_ep(job)
        p = job.parallel
        self.mapped = p.cp > 1 and p.ep == 1
        self.hierarchical = job.training.cp_comm_type == "a2a+p2p" and p.hierarchical_cp is not None
        self._cache: dict[int, WorkItem | None] = {}

    def items(self, items: list[WorkItem]) -> list[WorkItem]:
        """``items`` with CP's mapped (unmappable ones stay, for the writer to count as dropped)."""
        if self.job.parallel.cp == 1:
            return items
        passes: dict[str, list[WorkItem]] = {}  # a pass's ring exchanges (its stage names it), in order
        for item in items:
            if item.comm_type in (CommType.isend, CommType.irecv) and item.comm_group in _RING:
                passes.setdefault(item.stage, []).append(item)
        out: list[WorkItem] = []
        for item in items:
            rounds = passes.get(item.stage) if item.comm_type in (CommType.isend, CommType.irecv) else None
            if rounds is None:
                out.append(self._one(item))
            elif rounds[0] is item:  # the pass's exchanges where its first one was
                out += self._ring(rounds)
        return out

    def _one(self, item: WorkItem) -> WorkItem:
        if item.comm_group is CommGroup.dp_cp_group:
            return self._copy(item, CommGroup.dp_group)
        if item.comm_group in _CP_GROUPS and self.mapped:
            if item.comm_group is CommGroup.cp_p2p_group or (self.hierarchical and item.comm_group is CommGroup.cp_group):
                return item  # SimAI's EP group stands for the a2a level only
            return self._copy(item, CommGroup.ep_group)
        return item

    def _copy(self, item: WorkItem, group: CommGroup, ctype: CommType | None = None, size: int | None = None,
              key: int | None = None) -> WorkItem:
        key = id(item) if key is None else key
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = WorkItem(ctype or item.comm_type, group, item.comm_group_size,
                                                item.msg_size if size is None else size, item.stage, meta=item.meta)
        return found

    def _ring(self, rounds: list[WorkItem]) -> list[WorkItem]:
        """One layer pass's ring exchanges as the all-gather (and backward reduce-scatter) of the module docstring."""
        sends = [r for r in rounds if r.comm_type is CommType.isend]
        first = sends[0]
        if not self.mapped or first.comm_group is CommGroup.cp_p2p_group:
            return rounds  # dropped by the writer
        ring = first.comm_group_size
        if (first.additional or "").endswith("prev"):  # backward: K/V round the ring, then dK/dV
            kv = sends[0].msg_size
            return [self._copy(first, CommGroup.ep_group, CommType.all_gather, ring * kv),
                    self._copy(first, CommGroup.ep_group, CommType.reduce_scatter, ring * kv, key=id(sends[-1]))]
        return [self._copy(first, CommGroup.ep_group, CommType.all_gather, ring * first.msg_size)]

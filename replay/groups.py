"""torch.distributed process groups for the workload's CommGroups, built from one RankGenerator.

Every group of every CommGroup a workload uses is created on every rank in one fixed order
(``torch.distributed.new_group`` is collective over the whole world: PyTorch docs, "new_group"), the
way Megatron's ``initialize_model_parallel`` does.  Members of a group are in ascending global rank
order, which is both RankGenerator's order and torch's (``sort_ranks=True``), so "rank k inside the
group" means the same thing to the workload, to Megatron and to torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from utils.parallel import ParallelConfig
from utils.rank_generator import RankGenerator
from utils.workload import CommGroup

Layout = RankGenerator | ParallelConfig
"""Where the groups come from: the job's layout (the replay's: expert groups from Megatron core's expert layout,
the embedding group from the model) or one RankGenerator (its dense and ep-splits-dp views alone)."""

TOKENS = {
    CommGroup.tp_group: "tp", CommGroup.dp_group: "dp", CommGroup.pp_group: "pp", CommGroup.ep_group: "ep",
    CommGroup.ep_dp_group: "edp", CommGroup.ep_tp_group: "tp-ep", CommGroup.mp_group: "tp-pp",
    CommGroup.cp_group: "cp", CommGroup.tp_cp_group: "tp-cp", CommGroup.dp_cp_group: "dp-cp",
    CommGroup.cp_a2a_group: "hcp0", CommGroup.cp_p2p_group: "hcp1",
}
"""RankGenerator token of each CommGroup (embedding_group and all_nodes are derived, see :func:`group_ranks`)."""


def group_ranks(generator: Layout, group: CommGroup) -> list[list[int]]:
    """Every group of ``group``'s kind as lists of global ranks, in RankGenerator's order.

    ``embedding_group``: the first and last stage of each pipeline (Megatron's
    ``_EMBEDDING_GROUP``; one rank when pp == 1); ``all_nodes``: the whole world.
    """
    if isinstance(generator, ParallelConfig):
        # the job's layout, as the generator wrote the workload: a RankGenerator alone has no expert layout of its
        # own (cp folded into expert dp, --expert_tensor_parallel_size) and no MTP embedding stages
        if group is CommGroup.embedding_group and generator.pp == 1:
            return [[rank] for rank in range(generator.world_size)]
        return [list(r) for r in generator.group_ranks(group.value)]
    if group is CommGroup.all_nodes:
        return [list(range(generator.world_size))]
    if group is CommGroup.embedding_group:
        return [[ranks[0], ranks[-1]] if len(ranks) > 1 else [ranks[0]] for ranks in generator.get_ranks("pp")]
    return [list(r) for r in generator.get_ranks(TOKENS[group])]


@dataclass
class GroupHandle:
    """This rank's group of one CommGroup kind: ``index`` among the kind's groups (a world-wide
    name for it), ``ranks`` its members in group-rank order, ``pg`` the torch process group."""

    kind: CommGroup
    index: int
    ranks: list[int]
    pg: Any = field(repr=False)

    @property
    def size(self) -> int:
        return len(self.ranks)

    def global_rank(self, group_rank: int) -> int:
        """The global rank of the member with index ``group_rank`` inside the group."""
        return self.ranks[group_rank]


class ProcessGroups:
    """The process groups of ``kinds`` (CommGroups), created collectively; ``self[kind]`` is this rank's.

    Every kind gets its own groups even where its members coincide with another kind's, as Megatron
    does, so that operations on different kinds never queue behind each other on one communicator;
    ``all_nodes`` too gets a group of every rank rather than the default one, whose timeout is the
    start's (``--join_timeout``), not an operation's (``timeout_s``).  ``on_group`` is called after
    each group is created (a progress bar).
    """

    def __init__(self, generator: Layout, rank: int, kinds: Iterable[CommGroup], timeout_s: float,
                 on_group: Callable[[], None] | None = None) -> None:
        import torch.distributed as dist

        self.generator = generator
        self.rank = rank
        self._mine: dict[CommGroup, GroupHandle] = {}
        wanted = set(kinds)
        timeout = timedelta(seconds=timeout_s)
        for kind in CommGroup:  # the enum's order: the same on every rank
            if kind not in wanted:
                continue
            for index, ranks in enumerate(group_ranks(generator, kind)):
                pg = dist.new_group(ranks, timeout=timeout)
                if rank in ranks:
                    self._mine[kind] = GroupHandle(kind, index, list(ranks), pg)
                if on_group is not None:
                    on_group()

    def __contains__(self, kind: CommGroup) -> bool:
        return kind in self._mine

    def __getitem__(self, kind: CommGroup) -> GroupHandle:
        return self._mine[kind]

    def handles(self) -> list[GroupHandle]:
        """This rank's groups in creation order."""
        return [self._mine[k] for k in CommGroup if k in self._mine]


def group_count(generator: Layout, kinds: Iterable[CommGroup]) -> int:
    """How many groups :class:`ProcessGroups` creates for ``kinds`` (every rank creates them all)."""
    return sum(len(group_ranks(generator, kind)) for kind in set(kinds))


def member_group(generator: Layout, rank: int, kind: CommGroup) -> tuple[int, list[int]] | None:
    """``(index, ranks)`` of the group of ``kind`` that holds ``rank`` (None when it is in none:
    a middle pipeline stage and the embedding group).  Needs no torch: used to validate a workload
    before any process group exists."""
    for index, ranks in enumerate(group_ranks(generator, kind)):
        if rank in ranks:
            return index, list(ranks)
    return None

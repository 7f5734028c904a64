"""What a replay will run, worked out before anything is sent (no torch here).

:func:`plan_workload` checks every item of one rank's workload against the parallel layout (group
exists and holds this rank, group size matches, roots and p2p peers are members), resolves each to
global ranks, splits the items into blocks at ``epoch_end`` (block 0 is init), groups pipeline p2p
items into Megatron's batched calls, and sizes the two buffers the replay allocates once.

P2P batching: Megatron issues each p2p call's operations with one ``batch_isend_irecv``
(``p2p_communication._communicate``); our generator writes them as consecutive items sharing the
call's ``stage``.  Consecutive isend/irecv items with the same stage form one batch until a
direction (``additional``) repeats.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from replay.groups import Layout, member_group
from utils.errors import UserError
from utils.units import DTYPE_BYTES, busbw_factor, format_size
from utils.workload import CommGroup, CommType, WorkItem, Workload

P2P_TYPES = (CommType.isend, CommType.irecv)
_SPLIT = (CommType.all_gather, CommType.reduce_scatter, CommType.all_to_all)
_DIRECTION_STEP = {"send_next": 1, "recv_next": 1, "send_prev": -1, "recv_prev": -1}
ALIGN = 64
"""Byte alignment of the slices of one buffer (so every dtype view of a slice is aligned)."""


EMULATABLE = ("all_gather", "reduce_scatter", "all_to_all", "reduce", "p2p")
"""Operations with a gloo emulation (``replay/ops.py``); ``--emulate`` takes these names, or ``all``."""


def parse_emulate(text: str | None) -> frozenset[str]:
    """``--emulate`` value -> operation names.  Raises ``ValueError`` naming a bad entry."""
    if not text:
        return frozenset()
    names = {n.strip() for n in text.split(",") if n.strip()}
    if "all" in names:
        return frozenset(EMULATABLE)
    aliases = {"all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter",
               "all_to_all_single": "all_to_all", "isend": "p2p", "irecv": "p2p"}
    names = {aliases.get(n, n) for n in names}
    bad = sorted(names - set(EMULATABLE))
    if bad:
        raise ValueError(f"--emulate {text!r}: {', '.join(bad)} has no emulation (choose from {', '.join(EMULATABLE)}, all)")
    return frozenset(names)


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


@dataclass(slots=True)
class Resolved:
    """One workload item resolved for this rank.

    ``group_index`` names the group world-wide (its index among its kind's groups); ``me`` is this
    rank's index in it; ``root`` the global rank of a broadcast/reduce root; ``peer`` the global rank
    of a p2p peer.  ``element`` is the element type the buffers are viewed as (the item's
    ``meta["dtype"]`` or the job's dtype, or ``uint8`` when the bytes do not split into whole
    elements per rank) and ``nbytes`` the bytes
    of the whole buffer (``msg_size``, padded up to a multiple of the group size if needed).
    """

    item: WorkItem
    group: CommGroup | None = None
    group_index: int = 0
    ranks: tuple[int, ...] = ()
    me: int = 0
    root: int | None = None
    peer: int | None = None
    direction: str | None = None
    element: str = "uint8"
    nbytes: int = 0
    factor: float = 0.0

    @property
    def size(self) -> int:
        return len(self.ranks)


@dataclass(frozen=True, slots=True)
class Step:
    """``kind`` is ``comm`` (one collective), ``p2p`` (one batched call) or ``compute``; ``indexes``
    are workload item indexes."""

    kind: str
    indexes: tuple[int, ...]


@dataclass
class Plan:
    blocks: list[list[Step]]
    ended: list[bool]
    resolved: dict[int, Resolved] = field(default_factory=dict)
    main_bytes: int = 0
    aux_bytes: int = 0
    kinds: set[CommGroup] = field(default_factory=set)

    def of(self, item: WorkItem) -> Resolved:
        return self.resolved[id(item)]


def describe(item: WorkItem, resolved: Resolved | None = None) -> str:
    """``all_gather, tp_group of ranks [0, 1], 32 KiB, stage forward.MegatronColumnLinear``."""
    if item.is_computation:
        return f"computation, stage {item.stage}"
    group = item.comm_group.value if item.comm_group is not None else "all_nodes"
    if resolved is not None and resolved.ranks:
        ranks = list(resolved.ranks)
        group += f" of ranks {ranks if len(ranks) <= 8 else f'[{ranks[0]}, {ranks[1]}, ..., {ranks[-1]}]'}"
    text = f"{item.comm_type.value}, {group}, {format_size(item.msg_size)}"
    if resolved is not None and resolved.peer is not None:
        text += f", peer rank {resolved.peer}"
    if resolved is not None and resolved.root is not None:
        text += f", root rank {resolved.root}"
    return text + (f", stage {item.stage}" if item.stage else "")


def _fail(source: str, index: int, item: WorkItem, message: str) -> UserError:
    return UserError(f"{source}: item {index} ({describe(item)}): {message}")


def resolve_item(item: WorkItem, index: int, generator: Layout, rank: int, dtype: str, source: str) -> Resolved:
    """Check one communication item against the layout and resolve it for ``rank``."""
    kind = item.comm_group or CommGroup.all_nodes
    member = member_group(generator, rank, kind)
    if member is None:
        raise _fail(source, index, item, f"rank {rank} is in no {kind.value} of this layout (only the first and "
                                         "last pipeline stage are in the embedding group)")
    group_index, ranks = member
    if item.comm_group_size is not None and item.comm_group_size != len(ranks):
        raise _fail(source, index, item, f"comm_group_size {item.comm_group_size}, but the {kind.value} of this "
                                         f"layout has {len(ranks)} ranks {ranks[:8]}; check --world_size and the "
                                         "parallel sizes")
    out = Resolved(item=item, group=kind, group_index=group_index, ranks=tuple(ranks), me=ranks.index(rank),
                   factor=busbw_factor(item.comm_type, len(ranks)))
    ctype = item.comm_type
    if ctype in P2P_TYPES:
        send = ctype is CommType.isend
        peer_index = item.dst if send else item.src
        if peer_index is None and item.additional in _DIRECTION_STEP:
            peer_index = (out.me + _DIRECTION_STEP[item.additional]) % len(ranks)
        if peer_index is None:
            raise _fail(source, index, item, f"a p2p item needs its peer ({'dst' if send else 'src'}) or a direction "
                                             "(additional: send_next, recv_prev, send_prev, recv_next)")
        if not 0 <= peer_index < len(ranks) or peer_index == out.me:
            raise _fail(source, index, item, f"p2p peer {peer_index} is not another member of the {len(ranks)}-rank "
                                             f"{kind.value}")
        out.peer = ranks[peer_index]
        out.direction = item.additional or f"{ctype.value}:{peer_index}"
    elif ctype in (CommType.broadcast, CommType.reduce):
        first, second = (item.src, item.dst) if ctype is CommType.broadcast else (item.dst, item.src)
        root = first if first is not None else (second if second is not None else 0)
        if not 0 <= root < len(ranks):
            raise _fail(source, index, item, f"root {root} is outside the {len(ranks)}-rank {kind.value}")
        out.root = ranks[root]
    parts = len(ranks) if ctype in _SPLIT else 1
    # a producer may name the item's own element type (meta["dtype"], e.g. fp32 gradients); else the job's
    dtype = str((item.meta or {}).get("dtype", dtype))
    elem = DTYPE_BYTES.get(dtype.lower(), 1)
    if item.msg_size % (elem * parts) == 0:
        out.element, out.nbytes = dtype.lower(), item.msg_size
    else:
        out.element, out.nbytes = "uint8", -(-item.msg_size // parts) * parts
    return out


def _buffer_needs(r: Resolved) -> tuple[int, int]:
    """(main, aux) bytes of one resolved item; see the applyer for which tensor lives where."""
    ctype = r.item.comm_type
    if ctype in (CommType.all_gather, CommType.reduce_scatter):
        return r.nbytes, r.nbytes // max(r.size, 1)
    if ctype is CommType.all_to_all:
        return r.nbytes, r.nbytes
    if ctype is CommType.irecv:
        return 0, 0  # counted per batch
    return r.nbytes, 0


def plan_workload(workload: Workload, generator: Layout, rank: int, dtype: str, source: str) -> Plan:
    """The replay plan of ``rank``'s workload.  Raises :class:`UserError` naming the item."""
    items = workload.items
    plan = Plan(blocks=[[]], ended=[False])
    main = aux = 0
    i, n = 0, len(items)
    while i < n:
        item = items[i]
        if item.is_epoch_end:
            plan.ended[-1] = True
            plan.blocks.append([])
            plan.ended.append(False)
            i += 1
            continue
        if item.is_computation:
            plan.blocks[-1].append(Step("compute", (i,)))
            i += 1
            continue
        resolved = plan.resolved.get(id(item))
        if resolved is None:
            resolved = plan.resolved[id(item)] = resolve_item(item, i, generator, rank, dtype, source)
            plan.kinds.add(resolved.group)
            need_main, need_aux = _buffer_needs(resolved)
            main, aux = max(main, need_main), max(aux, need_aux)
        if item.comm_type not in P2P_TYPES:
            plan.blocks[-1].append(Step("comm", (i,)))
            i += 1
            continue
        batch, seen, recv_bytes = [i], {resolved.direction}, 0
        if item.comm_type is CommType.irecv:
            recv_bytes += _align(resolved.nbytes)
        j = i + 1
        while j < n and items[j].comm_type in P2P_TYPES and items[j].stage == item.stage:
            other = plan.resolved.get(id(items[j]))
            if other is None:
                other = plan.resolved[id(items[j])] = resolve_item(items[j], j, generator, rank, dtype, source)
                plan.kinds.add(other.group)
                main = max(main, _buffer_needs(other)[0])
            if other.direction in seen:
                break
            seen.add(other.direction)
            if items[j].comm_type is CommType.irecv:
                recv_bytes += _align(other.nbytes)
            batch.append(j)
            j += 1
        aux = max(aux, recv_bytes)
        plan.blocks[-1].append(Step("p2p", tuple(batch)))
        i = j
    if not plan.blocks[-1] and len(plan.blocks) > 1:
        plan.blocks.pop()
        plan.ended.pop()
    plan.main_bytes, plan.aux_bytes = main, aux
    return plan

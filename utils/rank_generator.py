"""Process groups of a parallel layout, as Megatron-LM's ``RankGenerator`` builds them.

Ranks are laid out along the dimensions of ``order`` (default ``tp-cp-ep-dp-pp``), the first one
varying fastest.  Expert parallelism shares ranks with data parallelism: in the expert view the dp
dimension splits into ``ep x dp/ep`` (ep faster), which is how Megatron forms the expert-parallel
and expert-data-parallel groups.  Reference: Megatron-LM ``megatron/core/parallel_state.py``
(``RankGenerator``, ``generate_masked_orthogonal_rank_groups``).
"""

from __future__ import annotations

from utils.errors import ConfigError

_DIMS = ("tp", "cp", "ep", "dp", "pp")
EXPERT_DP = "edp"
"""Token for the expert-data-parallel group (``dp`` in the expert view)."""
HIERARCHICAL_CP = ("hcp0", "hcp1")
"""Tokens for the two levels of hierarchical context parallelism (``--hierarchical_context_parallel_sizes a,p``):
Megatron-core's ``create_hierarchical_parallel_groups`` cuts each CP group (ranks ``c_0 .. c_{cp-1}``) into level-0
groups of ``a`` consecutive members (``c_{k a} .. c_{k a + a - 1}``) and level-1 groups of the members ``a`` apart."""


def _strides(shape: list[int]) -> list[int]:
    out, acc = [], 1
    for size in shape:
        out.append(acc)
        acc *= size
    return out


def _masked_groups(shape: list[int], mask: list[bool]) -> list[list[int]]:
    """Groups spanning the masked dimensions, one per combination of the unmasked ones.

    Group order and member order follow Megatron's ``generate_masked_orthogonal_rank_groups``:
    both enumerate their dimensions with the first (fastest) dimension varying fastest.
    """
    strides = _strides(shape)
    inner = [(s, st) for s, st, m in zip(shape, strides, mask) if m]
    outer = [(s, st) for s, st, m in zip(shape, strides, mask) if not m]

    def offsets(dims: list[tuple[int, int]]) -> list[int]:
        values = [0]
        for size, stride in dims:
            values = [v + i * stride for i in range(size) for v in values]
        return values

    members = offsets(inner)
    return [[base + m for m in members] for base in offsets(outer)]


class RankGenerator:
    """Global ranks of every process group of a layout.

    >>> RankGenerator(tp=2, ep=2, dp=4, pp=2).get_ranks("tp")[:2]
    [[0, 1], [2, 3]]
    """

    def __init__(self, tp: int = 1, ep: int = 1, dp: int = 1, pp: int = 1, cp: int = 1,
                 order: str = "tp-cp-ep-dp-pp", hierarchical_cp: tuple[int, ...] | None = None) -> None:
        self.hierarchical_cp = tuple(hierarchical_cp) if hierarchical_cp else (cp, 1)
        if len(self.hierarchical_cp) != 2 or self.hierarchical_cp[0] * self.hierarchical_cp[1] != cp:
            raise ConfigError(f"RankGenerator: hierarchical CP sizes {hierarchical_cp!r} are not two levels whose "
                              f"product is cp {cp}")
        sizes = {"tp": tp, "ep": ep, "dp": dp, "pp": pp, "cp": cp}
        for name, size in sizes.items():
            if not isinstance(size, int) or size < 1:
                raise ConfigError(f"RankGenerator: {name} must be a positive integer, got {size!r}")
        if dp % ep:
            raise ConfigError(f"RankGenerator: ep {ep} must divide dp {dp} (expert parallelism splits "
                              "the data-parallel dimension)")
        tokens = order.lower().split("-")
        unknown = [t for t in tokens if t not in _DIMS]
        if unknown or len(set(tokens)) != len(tokens):
            raise ConfigError(f"RankGenerator: bad order {order!r} (use each of tp, cp, ep, dp, pp at most once)")
        if ep > 1 and "ep" in tokens and ("dp" not in tokens or abs(tokens.index("ep") - tokens.index("dp")) != 1):
            raise ConfigError(f"RankGenerator: ep and dp must be adjacent in order {order!r}")
        for name in _DIMS:
            if name not in tokens:
                if sizes[name] != 1:
                    raise ConfigError(f"RankGenerator: {name} size is {sizes[name]} but order {order!r} lacks it")
                tokens.append(name)
        self.sizes = sizes
        self.order = "-".join(tokens)
        self.world_size = tp * dp * pp * cp
        # Dense view: ep folded into dp.  Expert view: dp split into ep and dp/ep.
        self._dense_dims = [t for t in tokens if t != "ep"]
        self._dense_shape = [sizes[t] for t in self._dense_dims]
        self._expert_dims = tokens
        self._expert_shape = [dp // ep if t == "dp" else sizes[t] for t in tokens]
        self._cache: dict[tuple[str, bool], list[list[int]]] = {}

    def _view(self, token: str, independent_ep: bool | None) -> tuple[str, bool, list[int], list[bool]]:
        """(cache key, expert view?, shape, mask of the token's dimensions) of a group token."""
        key = token.lower()
        if key == EXPERT_DP:
            key, independent_ep = "dp", True
        parts = key.split("-")
        if independent_ep is None:
            independent_ep = "ep" in parts
        dims = self._expert_dims if independent_ep else self._dense_dims
        shape = self._expert_shape if independent_ep else self._dense_shape
        bad = [p for p in parts if p not in dims]
        if bad or len(set(parts)) != len(parts):
            view = "expert" if independent_ep else "dense"
            raise ConfigError(f"RankGenerator: bad group token {token!r} for the {view} view ({'-'.join(dims)})")
        return key, independent_ep, shape, [d in parts for d in dims]

    def get_ranks(self, token: str, independent_ep: bool | None = None) -> list[list[int]]:
        """Groups for ``token`` (``tp``, ``pp``, ``dp``, ``ep``, ``cp``, ``tp-ep``, ``tp-dp-cp``, ...).

        Tokens that name ``ep`` use the expert view, where ``dp`` means the expert-data-parallel
        dimension (size dp/ep); other tokens use the dense view.  ``independent_ep=True`` forces
        the expert view (Megatron's flag): ``get_ranks("dp", independent_ep=True)`` is the
        expert-data-parallel group, also available as the token ``edp``.
        """
        if token in HIERARCHICAL_CP:
            level = HIERARCHICAL_CP.index(token)
            cached = self._cache.get((token, False))
            if cached is None:
                cached = self._cache[(token, False)] = [
                    group for ranks in self.get_ranks("cp") for group in self._levels(ranks)[level]]
            return cached
        key, independent_ep, shape, mask = self._view(token, independent_ep)
        cache_key = (key, independent_ep)
        if cache_key not in self._cache:
            self._cache[cache_key] = _masked_groups(shape, mask)
        return self._cache[cache_key]

    def group_of(self, rank: int, token: str, independent_ep: bool | None = None) -> list[int]:
        """The group of ``token`` that contains global ``rank`` (the same list :meth:`get_ranks` holds),
        computed from the rank's coordinates without building the other groups."""
        if not 0 <= rank < self.world_size:
            raise ConfigError(f"rank {rank} is outside the world of {self.world_size} ranks")
        if token in HIERARCHICAL_CP:
            level = self._levels(self.group_of(rank, "cp"))[HIERARCHICAL_CP.index(token)]
            return next(group for group in level if rank in group)
        _, _, shape, mask = self._view(token, independent_ep)
        base, rest, members = rank, rank, [0]
        for size, stride, masked in zip(shape, _strides(shape), mask):
            index = rest % size
            rest //= size
            if masked:
                base -= index * stride
                members = [m + i * stride for i in range(size) for m in members]
        return [base + m for m in members]

    def _levels(self, ranks: list[int]) -> tuple[list[list[int]], list[list[int]]]:
        """One CP group's level-0 and level-1 groups (:data:`HIERARCHICAL_CP`)."""
        a, p = self.hierarchical_cp
        first = [[ranks[k * a + i] for i in range(a)] for k in range(p)]
        second = [[ranks[j + i * a] for i in range(p)] for j in range(a)]
        return first, second

    def coordinates(self, rank: int) -> dict[str, int]:
        """The rank's index along each dimension: ``{"tp": .., "cp": .., "dp": .., "pp": .., "ep": .., "edp": ..}``."""
        out: dict[str, int] = {}
        rest = rank
        for dim, size in zip(self._dense_dims, self._dense_shape):
            out[dim] = rest % size
            rest //= size
        out["ep"] = out["dp"] % self.sizes["ep"]
        out["edp"] = out["dp"] // self.sizes["ep"]
        return out

    def rank_at(self, **coords: int) -> int:
        """Global rank from dense coordinates (``tp``, ``cp``, ``dp``, ``pp``; missing ones are 0)."""
        rank, stride = 0, 1
        for dim, size in zip(self._dense_dims, self._dense_shape):
            index = coords.get(dim, 0)
            if not 0 <= index < size:
                raise ConfigError(f"{dim} index {index} is outside 0..{size - 1}")
            rank += index * stride
            stride *= size
        return rank

    def __repr__(self) -> str:
        s = self.sizes
        return (f"RankGenerator(tp={s['tp']}, ep={s['ep']}, dp={s['dp']}, pp={s['pp']}, cp={s['cp']}, "
                f"order={self.order!r})")

"""The SimAI workload comm tokens and their meaning (docs/formats.md section 2).

A token is a collective name (``ALLREDUCE``, ``ALLGATHER``, ``REDUCESCATTER``, ``ALLTOALL``) or
``NONE``, optionally followed by a group suffix: none means the TP group in the fwd and ig columns
and the DP group in the wg column; ``_EP`` the expert-parallel group; ``_DP_EP`` the
expert-data-parallel group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # pragma: no cover
    from utils.workload import CommGroup, CommType

Column = Literal["fwd", "ig", "wg"]

_NAME_TO_VALUE = {"ALLREDUCE": "all_reduce", "ALLGATHER": "all_gather", "REDUCESCATTER": "reduce_scatter",
                  "ALLTOALL": "all_to_all"}
"""Token name -> :class:`utils.workload.CommType` value (tests/test_simai_tokens.py checks they agree).  Kept
as strings so that reading a SimAI file (the simulator's hot path) needs no work-item module."""
# SimAI matches the collective by prefix in this order (docs/simai_analytical.md).
_PREFIX_ORDER = ("ALLREDUCE", "ALLTOALL", "ALLGATHER", "REDUCESCATTER")
_SUFFIX_GROUP = {"": "", "_EP": "EP", "_DP_EP": "DP_EP"}

VALID_TOKENS = frozenset(
    ["NONE"] + [name + suffix for name in _NAME_TO_VALUE for suffix in ("", "_EP", "_DP_EP")]
)
"""Every token our writer may produce and SimAI parses without a warning."""


def __getattr__(name: str):
    if name == "SIMAI_COMM_TYPES":  # collectives a SimAI record can carry (CommType members)
        from utils.workload import CommType

        return frozenset(CommType(value) for value in _NAME_TO_VALUE.values())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _name_to_type(name: str) -> CommType:
    from utils.workload import CommType

    return CommType(_NAME_TO_VALUE[name])


def _type_to_name(comm_type: CommType) -> str | None:
    return next((name for name, value in _NAME_TO_VALUE.items() if value == comm_type.value), None)


def _groups():
    from utils.workload import CommGroup

    return CommGroup


def default_group(column: Column) -> CommGroup:
    """The group a suffix-less token runs in: TP for fwd/ig, DP for wg."""
    CommGroup = _groups()
    return CommGroup.dp_group if column == "wg" else CommGroup.tp_group


def simai_token(comm_type: CommType | None, group: CommGroup | None, column: Column) -> str:
    """The token for a collective in a given record column.

    Raises ``ValueError`` when SimAI's format cannot express the pair (e.g. a broadcast, or a DP
    collective in the fwd column).
    """
    if comm_type is None:
        return "NONE"
    CommGroup = _groups()
    name = _type_to_name(comm_type)
    if name is None:
        raise ValueError(f"SimAI workloads cannot carry {comm_type.value}")
    if group is None or group == default_group(column):
        return name
    if group == CommGroup.ep_group:
        return name + "_EP"
    if group == CommGroup.ep_dp_group:
        return name + "_DP_EP"
    raise ValueError(f"SimAI workloads cannot carry a {comm_type.value} in {group.value} in the {column} column")


def parse_simai_token(token: str, column: Column) -> tuple[CommType | None, CommGroup | None]:
    """Strictly parse a token written by SimAI-compatible tools.

    Returns ``(None, None)`` for ``NONE``; raises ``ValueError`` for any token outside
    :data:`VALID_TOKENS`.
    """
    if token == "NONE":
        return None, None
    if token not in VALID_TOKENS:
        raise ValueError(f"unknown comm token {token!r} (expected NONE or one of ALLREDUCE, ALLGATHER, "
                         "REDUCESCATTER, ALLTOALL, optionally with _EP or _DP_EP)")
    CommGroup = _groups()
    if token.endswith("_DP_EP"):
        return _name_to_type(token[:-6]), CommGroup.ep_dp_group
    if token.endswith("_EP"):
        return _name_to_type(token[:-3]), CommGroup.ep_group
    return _name_to_type(token), default_group(column)


def simai_match(token: str) -> tuple[CommType | None, str]:
    """SimAI's lenient reading: the collective by prefix, and the group from the exact rest.

    Returns ``(comm_type or None, group)`` with group ``""`` (nothing follows the prefix: the
    column's default group), ``"EP"`` (``_EP``), ``"DP_EP"`` (``_DP_EP``) or ``"OTHER"`` (anything
    else, which SimAI costs as zero).  So ``ALLREDUCEALLTOALL`` is an all-reduce in group OTHER.
    """
    name, group = _match(token)
    return (_name_to_type(name) if name is not None else None), group


def _match(token: str) -> tuple[str | None, str]:
    for name in _PREFIX_ORDER:
        if token.startswith(name):
            return name, _SUFFIX_GROUP.get(token[len(name):], "OTHER")
    return None, ""


def classify(token: str, column: str) -> tuple[str | None, str]:
    """SimAI's reading of a comm token in a record column (``fwd``, ``ig`` or ``wg``).

    Returns ``(comm_type, group)``: the collective from the token's prefix (see
    :func:`simai_match`) or ``None``; the group ``TP`` (fwd/ig) or ``DP`` (wg) when
    nothing follows the prefix, else ``EP``, ``DP_EP`` or ``OTHER`` (SimAI's group NONE: no bandwidth
    cost).
    """
    name, group = _match(token)
    if name is None:
        return None, ""
    return _NAME_TO_VALUE[name], group or ("DP" if column == "wg" else "TP")

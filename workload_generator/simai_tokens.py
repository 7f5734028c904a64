"""The SimAI workload comm tokens and their meaning (FORMATS.md section 2).

A token is a collective name (``ALLREDUCE``, ``ALLGATHER``, ``REDUCESCATTER``, ``ALLTOALL``) or
``NONE``, optionally followed by a group suffix: none means the TP group in the fwd and ig columns
and the DP group in the wg column; ``_EP`` the expert-parallel group; ``_DP_EP`` the
expert-data-parallel group.
"""

from __future__ import annotations

from typing import Literal

from utils.workload import CommGroup, CommType

Column = Literal["fwd", "ig", "wg"]

_TYPE_TO_NAME = {
    CommType.all_reduce: "ALLREDUCE",
    CommType.all_gather: "ALLGATHER",
    CommType.reduce_scatter: "REDUCESCATTER",
    CommType.all_to_all: "ALLTOALL",
}
_NAME_TO_TYPE = {name: ctype for ctype, name in _TYPE_TO_NAME.items()}
# SimAI matches the collective by prefix in this order (SIMAI_ANALYTICAL.md).
_PREFIX_ORDER = ("ALLREDUCE", "ALLTOALL", "ALLGATHER", "REDUCESCATTER")

SIMAI_COMM_TYPES = frozenset(_TYPE_TO_NAME)
"""Collectives a SimAI record can carry."""

VALID_TOKENS = frozenset(
    ["NONE"] + [name + suffix for name in _NAME_TO_TYPE for suffix in ("", "_EP", "_DP_EP")]
)
"""Every token our writer may produce and SimAI parses without a warning."""


def default_group(column: Column) -> CommGroup:
    """The group a suffix-less token runs in: TP for fwd/ig, DP for wg."""
    return CommGroup.dp_group if column == "wg" else CommGroup.tp_group


def simai_token(comm_type: CommType | None, group: CommGroup | None, column: Column) -> str:
    """The token for a collective in a given record column.

    Raises ``ValueError`` when SimAI's format cannot express the pair (e.g. a broadcast, or a DP
    collective in the fwd column).
    """
    if comm_type is None:
        return "NONE"
    name = _TYPE_TO_NAME.get(comm_type)
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
    if token.endswith("_DP_EP"):
        return _NAME_TO_TYPE[token[:-6]], CommGroup.ep_dp_group
    if token.endswith("_EP"):
        return _NAME_TO_TYPE[token[:-3]], CommGroup.ep_group
    return _NAME_TO_TYPE[token], default_group(column)


def simai_match(token: str) -> tuple[CommType | None, str]:
    """SimAI's lenient reading: the collective by prefix, and the group from the exact rest.

    Returns ``(comm_type or None, group)`` with group ``""`` (nothing follows the prefix: the
    column's default group), ``"EP"`` (``_EP``), ``"DP_EP"`` (``_DP_EP``) or ``"OTHER"`` (anything
    else, which SimAI costs as zero).  So ``ALLREDUCEALLTOALL`` is an all-reduce in group OTHER.
    """
    for name in _PREFIX_ORDER:
        if token.startswith(name):
            rest = token[len(name):]
            return _NAME_TO_TYPE[name], {"": "", "_EP": "EP", "_DP_EP": "DP_EP"}.get(rest, "OTHER")
    return None, ""


def classify(token: str, column: str) -> tuple[str | None, str]:
    """SimAI's reading of a comm token in a record column (``fwd``, ``ig`` or ``wg``).

    Returns ``(comm_type, group)``: the collective from the token's prefix (see
    :func:`simai_match`) or ``None``; the group ``TP`` (fwd/ig) or ``DP`` (wg) when
    nothing follows the prefix, else ``EP``, ``DP_EP`` or ``OTHER`` (SimAI's group NONE: no bandwidth
    cost).
    """
    comm_type, group = simai_match(token)
    if comm_type is None:
        return None, ""
    return comm_type.value, group or ("DP" if column == "wg" else "TP")

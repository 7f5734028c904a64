"""SimAI comm tokens <-> CommType/CommGroup."""

import pytest

from utils.workload import CommGroup, CommType
from workload_generator.simai_tokens import VALID_TOKENS, parse_simai_token, simai_match, simai_token


def test_tokens_round_trip():
    assert simai_token(CommType.all_reduce, CommGroup.tp_group, "fwd") == "ALLREDUCE"
    assert simai_token(CommType.reduce_scatter, CommGroup.dp_group, "wg") == "REDUCESCATTER"
    assert simai_token(CommType.all_to_all, CommGroup.ep_group, "fwd") == "ALLTOALL_EP"
    assert simai_token(CommType.all_gather, CommGroup.ep_dp_group, "wg") == "ALLGATHER_DP_EP"
    assert simai_token(None, None, "ig") == "NONE"
    for token in VALID_TOKENS:
        for column in ("fwd", "ig", "wg"):
            ctype, group = parse_simai_token(token, column)
            assert simai_token(ctype, group, column) == token


def test_default_groups():
    assert parse_simai_token("ALLGATHER", "fwd") == (CommType.all_gather, CommGroup.tp_group)
    assert parse_simai_token("ALLGATHER", "wg") == (CommType.all_gather, CommGroup.dp_group)


def test_rejects():
    with pytest.raises(ValueError, match="unknown comm token 'BROADCAST'"):
        parse_simai_token("BROADCAST", "fwd")
    with pytest.raises(ValueError, match="cannot carry broadcast"):
        simai_token(CommType.broadcast, CommGroup.tp_group, "fwd")
    with pytest.raises(ValueError, match="dp_group in the fwd column"):
        simai_token(CommType.all_reduce, CommGroup.dp_group, "fwd")


def test_simai_lenient_prefix_matching():
    assert simai_match("ALLREDUCEALLTOALL") == (CommType.all_reduce, "OTHER")
    assert simai_match("ALLGATHER") == (CommType.all_gather, "")
    assert simai_match("ALLTOALL_EP") == (CommType.all_to_all, "EP")
    assert simai_match("REDUCESCATTER_DP_EP") == (CommType.reduce_scatter, "DP_EP")
    assert simai_match("ALLGATHER_TP") == (CommType.all_gather, "OTHER")
    assert simai_match("BROADCAST") == (None, "")


def test_token_values_are_the_work_item_types():
    # the tokens' collectives are kept as CommType values (strings) so that reading a file needs no
    # work-item module; they must name CommType members
    from utils.workload import CommType
    from workload_generator import simai_tokens

    assert {simai_match(name)[0] for name in simai_tokens._NAME_TO_VALUE} == simai_tokens.SIMAI_COMM_TYPES
    assert {CommType(v) for v in simai_tokens._NAME_TO_VALUE.values()} == {CommType.all_reduce, CommType.all_gather,
                                                                           CommType.reduce_scatter, CommType.all_to_all}

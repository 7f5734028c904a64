"""RankGenerator against the worked example of the foundation issue and Megatron's layout rules."""

import pytest

from utils.errors import ConfigError
from utils.rank_generator import RankGenerator


@pytest.fixture
def gen():
    # world 16 = tp2 x dp4 x pp2, ep2 splitting dp into ep2 x edp2 (order tp-cp-ep-dp-pp).
    return RankGenerator(tp=2, ep=2, dp=4, pp=2, cp=1, order="tp-cp-ep-dp-pp")


def test_worked_example(gen):
    assert gen.world_size == 16
    assert gen.get_ranks("tp") == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11], [12, 13], [14, 15]]
    # pp stride = tp*cp*dp = 8
    assert gen.get_ranks("pp") == [[0, 8], [1, 9], [2, 10], [3, 11], [4, 12], [5, 13], [6, 14], [7, 15]]
    # dp stride = tp = 2, one group per (tp rank, pp rank)
    assert gen.get_ranks("dp") == [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]]
    # ep: the fast half of dp (stride 2, size 2)
    assert gen.get_ranks("ep") == [[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9, 11], [12, 14], [13, 15]]
    assert gen.get_ranks("tp-ep") == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    # expert-data-parallel: the slow half of dp (stride tp*ep = 4, size dp/ep = 2)
    edp = [[0, 4], [1, 5], [2, 6], [3, 7], [8, 12], [9, 13], [10, 14], [11, 15]]
    assert gen.get_ranks("dp", independent_ep=True) == edp
    assert gen.get_ranks("edp") == edp


def test_combined_tokens(gen):
    assert gen.get_ranks("tp-dp-cp") == [list(range(8)), list(range(8, 16))]
    assert gen.get_ranks("tp-pp") == [[0, 1, 8, 9], [2, 3, 10, 11], [4, 5, 12, 13], [6, 7, 14, 15]]
    # ep-dp in the expert view spans the whole data-parallel dimension again
    assert gen.get_ranks("ep-dp") == gen.get_ranks("dp")


def test_groups_partition_the_world(gen):
    for token in ("tp", "pp", "dp", "ep", "edp", "tp-ep", "cp", "tp-pp"):
        members = sorted(r for group in gen.get_ranks(token) for r in group)
        assert members == list(range(16)), token


def test_coordinates_and_lookup(gen):
    # rank 13 = tp 1 + dp 2 * 2 + pp 1 * 8; dp 2 = ep 0 + edp 1 * 2
    assert gen.coordinates(13) == {"tp": 1, "cp": 0, "dp": 2, "pp": 1, "ep": 0, "edp": 1}
    assert gen.rank_at(tp=1, dp=2, pp=1) == 13
    assert gen.group_of(13, "dp") == [9, 11, 13, 15]
    assert gen.group_of(13, "ep") == [13, 15]  # tp rank 1 of the ep pair {dp 2, dp 3}


def test_context_parallel_sits_between_tp_and_dp():
    gen = RankGenerator(tp=2, cp=2, dp=2, pp=1)
    assert gen.get_ranks("cp") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert gen.get_ranks("dp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert gen.get_ranks("tp-dp-cp") == [list(range(8))]


@pytest.mark.parametrize("kwargs, message", [
    (dict(tp=2, ep=3, dp=4), "ep 3 must divide dp 4"),
    (dict(tp=0), "tp must be a positive integer"),
    (dict(tp=2, order="tp-ep-pp-dp", ep=2, dp=2), "adjacent"),
])
def test_bad_layouts(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        RankGenerator(**kwargs)


def test_bad_token(gen):
    with pytest.raises(ConfigError, match="bad group token"):
        gen.get_ranks("xp")

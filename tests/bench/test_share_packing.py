"""bench/share_packing.py's packings and bound: what its table compares usher's share GPUs with."""

from __future__ import annotations

from bench_scripts import load
from hypothesis import given
from hypothesis import strategies as st

packing = load("share_packing")


def test_online_best_fit_goes_where_the_share_leaves_least_room():
    # 600 and 700 open two GPUs; 300 fits beside 700 exactly (best fit), so 400 still fits beside 600
    assert packing.online_best_fit([600, 700, 300, 400]) == 2
    # first fit would put 300 beside 600 and need a third GPU for 400; so does a bad order
    assert packing.online_best_fit([400, 300, 600, 700]) == 3
    assert packing.offline_best_fit([400, 300, 600, 700]) == 2


def test_the_bound_counts_shares_that_cannot_pair():
    # three 810s and three 160s: the 160s fit beside them; three 810s and three 200s: they cannot
    assert packing.lower_bound([810] * 3 + [160] * 3) == 3
    assert packing.lower_bound([810] * 3 + [200] * 3) == 4
    assert packing.lower_bound([500] * 4) == 2


@given(st.lists(st.integers(1, 99).map(lambda x: x * 10), max_size=60))
def test_no_packing_uses_fewer_gpus_than_the_bound(shares):
    bound, offline, online = packing.lower_bound(shares), packing.offline_best_fit(shares), packing.online_best_fit(shares)
    assert bound <= offline and bound <= online
    assert sum(shares) <= 1000 * offline

"""Unit tests of the policy functions on hand-built states (no replay)."""

from __future__ import annotations

import textwrap

from usher.engine.build import build_state
from usher.engine.enums import PendingReason
from usher.engine.policy import quota
from usher.engine.policy.placement import Placer, gang_counts, pick_shared_gpu, pick_whole_gpus
from usher.engine.report import percentile
from usher.engine.scenario import parse_scenario
from usher.engine.state import MILLI, Node


def state_of(text: str):
    return build_state(parse_scenario(textwrap.dedent(text)))


def node(free: list[int], islands: list[list[int]]) -> Node:
    n = Node(0, "n", {}, "H100", 0, len(free), islands, 1 << 62, 1 << 62)
    n.gpu_free = list(free)
    n.whole_free = sum(1 for f in free if f == MILLI)
    return n


def test_pick_whole_gpus_prefers_the_tightest_island_then_fewest_islands():
    n = node([0, MILLI, MILLI, MILLI, MILLI, MILLI, MILLI, MILLI], [[0, 1, 2, 3], [4, 5, 6, 7]])
    assert pick_whole_gpus(n, 3) == [1, 2, 3]  # the island with exactly 3 free
    assert pick_whole_gpus(n, 4) == [4, 5, 6, 7]
    assert sorted(pick_whole_gpus(n, 6)) == [1, 2, 4, 5, 6, 7]  # spans two islands only when it must


def test_pick_shared_gpu_fills_partly_used_gpus_first_best_fit():
    n = node([MILLI, 600, 300, MILLI], [[0, 1, 2, 3]])
    assert pick_shared_gpu(n, 250) == 2  # leaves 50 rather than 350
    assert pick_shared_gpu(n, 500) == 1
    assert pick_shared_gpu(n, 700) == 0  # no partial GPU has room: a whole one


QUEUES = """
name: u
nodes: [{name: n1, gpus: 64}]
queues:
  - {name: a, cohort: c, quota: {gpu: 8}, borrowingLimit: {gpu: 4}}
  - {name: b, cohort: c, quota: {gpu: 16}, lendingLimit: {gpu: 6}}
  - {name: solo, quota: {gpu: 8}}
"""


def test_quota_ceiling_and_guaranteed_share():
    st = state_of(QUEUES)
    a, b = st.queues["a"], st.queues["b"]
    assert quota.ceiling(st, a, 0) == 12 * MILLI  # 8 nominal + borrowing limit 4
    assert quota.ceiling(st, b, 0) == 16 * MILLI + 8 * MILLI  # a lends all of its 8
    assert b.guaranteed[0] == 10 * MILLI  # 16 - lending limit 6
    assert quota.check(st, a, (12 * MILLI, 0, 0)).fits
    v = quota.check(st, a, (13 * MILLI, 0, 0))
    assert v.reason == PendingReason.EXCEEDS_QUOTA and v.ceiling == 12 * MILLI


def test_quota_waits_when_the_cohort_pool_is_used_by_others():
    st = state_of(QUEUES)
    b = st.queues["b"]
    b.usage[0] = 16 * MILLI  # b uses its 6 lendable GPUs itself
    a = st.queues["a"]
    assert quota.check(st, a, (8 * MILLI, 0, 0)).fits  # 8 of the 14-GPU pool is still free to it
    v = quota.check(st, a, (10 * MILLI, 0, 0))
    assert v.reason == PendingReason.WAITING_FOR_QUOTA
    assert quota.check(st, st.queues["solo"], (9 * MILLI, 0, 0)).reason == PendingReason.EXCEEDS_QUOTA


def test_dominant_share_is_divided_by_weight():
    st = state_of("""
    name: u
    nodes: [{name: n1, gpus: 8, cpu: 64}]
    queues:
      - {name: a, cohort: c, quota: {gpu: 4, cpu: 32}, weight: 2}
      - {name: b, cohort: c, quota: {gpu: 4, cpu: 32}}
    """)
    a, b = st.queues["a"], st.queues["b"]
    a.usage[:] = [4 * MILLI, 8000, 0]
    b.usage[:] = [2 * MILLI, 48000, 0]
    assert quota.dominant_share(st, a) == 0.5 / 2  # GPUs dominate: 4 of 8
    assert quota.dominant_share(st, b) == 0.75  # CPU dominates: 48 of 64 cores


def test_gang_placement_is_all_or_nothing_on_the_state():
    st = state_of("""
    name: u
    nodes: [{name: n1, gpus: 8}, {name: n2, gpus: 4}]
    queues: [{name: q}]
    jobs: [{name: g, queue: q, pods: [{count: 2, gpu: 6}]}]
    """)
    job = st.jobs[0]
    placer = Placer(st)
    assert not placer.place_gang(job, gang_counts(job, False))
    assert [n.whole_free for n in st.nodes] == [8, 4]  # the first pod's reservation was undone
    assert st.total_whole_free == 12 and not placer.taken


def test_min_count_gang_counts():
    st = state_of("""
    name: u
    nodes: [{name: n1, gpus: 8}]
    queues: [{name: q}]
    jobs: [{name: g, queue: q, minCount: 3, pods: [{name: a, count: 2, gpu: 1}, {name: b, count: 4, gpu: 1}]}]
    """)
    job = st.jobs[0]
    assert gang_counts(job, False) == [2, 4]
    assert gang_counts(job, True) == [2, 1]


def test_percentile_is_nearest_rank():
    assert percentile([], 95) == 0.0
    assert percentile([float(i) for i in range(1, 101)], 95) == 95.0
    assert percentile([5.0, 1.0], 50) == 1.0

"""The engine places gangs by their pods' rules against other pods, counting the gang's own.

The rules are judged by the kube backend's ``podrules`` (the engine only narrows each pod to the
nodes they allow, given the gang's pods placed so far); here gangs are placed on an engine state
with pods already on its nodes. A hypothesis property holds every placement to the rules: each
pod, judged against the pods there before it (existing and its gang's earlier ones), is allowed
where it went, and a gang is placed whole or not at all.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from usher.engine.backends.kube.podrules import Incoming, Judge, PlacedPod, parse_pod_rules
from usher.engine.backends.kube.podrules.pods import PodIndex, group_rules
from usher.engine.build import group_request, queue_from_spec
from usher.engine.enums import JobState, PendingReason
from usher.engine.explain import message
from usher.engine.policy.filters.registry import diagnose
from usher.engine.policy.placement import Placer
from usher.engine.scenario import QueueSpec, Resources
from usher.engine.state import MILLI, ClusterState, Job, Node, PodGroup

HOST, ZONE = "kubernetes.io/hostname", "topology.kubernetes.io/zone"
ONE_PER_NODE = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "w"}}, "topologyKey": HOST}]}}}
SPREAD_ZONES = {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                                               "labelSelector": {"matchLabels": {"app": "w"}}}]}
NEAR_WORKERS = {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "w"}}, "topologyKey": HOST}]}}}


def cluster(zones: list[str], gpus: int = 8) -> tuple[ClusterState, PodIndex]:
    state = ClusterState("rules", [], {})
    for i, z in enumerate(zones):
        state.add_node(Node(i, f"n{i}", {HOST: f"n{i}", ZONE: z}, "H100", 0, gpus, [list(range(gpus))], 64_000, 512 << 30))
    state.finish_building()
    index = PodIndex()
    index.nodes = state.nodes
    return state, index


def existing(index: PodIndex, key: str, node: str, spec: dict[str, Any] | None = None, **labels: str) -> None:
    index.pod_changed(key, {"metadata": {"name": key, "namespace": "default", "labels": labels},
                            "spec": {"nodeName": node, **(spec or {})}, "status": {"phase": "Running"}})


def gang(index: PodIndex, groups: list[tuple[int, int, dict[str, Any], dict[str, str]]]) -> Job:
    """A job of pod groups ``(count, whole GPUs, spec with rules, labels)``."""
    parsed = [(f"g{i}", "default", labels, parse_pod_rules(spec, labels)[0], None, ())
              for i, (_, _, spec, labels) in enumerate(groups)]
    rules = group_rules(index, parsed) or {}
    pods = tuple(PodGroup(f"g{i}", n, g * MILLI, 1000, 1 << 30, None, rules=rules.get(f"g{i}"))
                 for i, (n, g, _, _) in enumerate(groups))
    job = Job(0, "job", "q", 0.0, 0, None, None, True, None, sum(n for n, *_ in groups), pods)
    job.request = group_request(list(pods))
    return job


def test_one_worker_per_node_places_the_gang_whole_one_per_node() -> None:
    state, index = cluster(["a", "a", "b", "b"])
    job = gang(index, [(4, 1, ONE_PER_NODE, {"app": "w"})])
    placer = Placer(state)
    assert placer.place_gang(job, [4])
    assert sorted(p.node_id for p in placer.taken) == [0, 1, 2, 3]


def test_one_worker_per_node_waits_whole_when_nodes_are_too_few() -> None:
    state, index = cluster(["a", "b", "b"])
    job = gang(index, [(4, 1, ONE_PER_NODE, {"app": "w"})])
    placer = Placer(state)
    assert not placer.place_gang(job, [4])
    assert placer.taken == [] and all(n.whole_free == 8 for n in state.nodes)


def test_an_existing_pods_anti_affinity_keeps_the_gang_off_its_node() -> None:
    state, index = cluster(["a", "a"])
    existing(index, "default/db", "n0", {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"team": "ml"}}, "topologyKey": HOST}]}}}, app="db")
    job = gang(index, [(2, 2, {}, {"team": "ml"})])  # no rules of its own
    placer = Placer(state)
    assert placer.place_gang(job, [2])
    assert {p.node_id for p in placer.taken} == {1}
    assert diagnose(state, job.groups[0]) == {
        f"anti-affinity of 1 pod already on its {HOST} (team=ml)": 1, "fits": 1}


def test_a_gang_spread_over_two_zones_with_max_skew_one_is_met_by_the_whole_gang() -> None:
    state, index = cluster(["a", "a", "a", "b"])
    job = gang(index, [(4, 4, SPREAD_ZONES, {"app": "w"})])
    placer = Placer(state)
    assert placer.place_gang(job, [4])
    zones = [state.nodes[p.node_id].labels[ZONE] for p in placer.taken]
    assert sorted(zones) == ["a", "a", "b", "b"]


def test_a_spread_the_zones_cannot_meet_waits_whole() -> None:
    state, index = cluster(["a", "a", "b"], gpus=4)
    job = gang(index, [(4, 4, SPREAD_ZONES, {"app": "w"})])  # zone b holds one pod: a would reach skew 2
    placer = Placer(state)
    assert not placer.place_gang(job, [4]) and placer.taken == []


def test_a_launcher_with_affinity_to_its_workers_goes_beside_them() -> None:
    state, index = cluster(["a", "a", "a"])
    existing(index, "default/other", "n0", None, app="x")
    job = gang(index, [(2, 8, {}, {"app": "w"}), (1, 0, NEAR_WORKERS, {"role": "launcher"})])
    placer = Placer(state)
    assert placer.place_gang(job, [2, 1])
    workers = {p.node_id for p in placer.taken if p.pod.startswith("g0-")}
    launcher = [p.node_id for p in placer.taken if p.pod.startswith("g1-")]
    assert launcher[0] in workers


def test_a_launcher_whose_workers_are_nowhere_is_refused_with_the_rule() -> None:
    state, index = cluster(["a", "a"])
    job = gang(index, [(1, 0, NEAR_WORKERS, {"role": "launcher"})])
    assert not Placer(state).place_gang(job, [1])
    assert diagnose(state, job.groups[0]) == {f"affinity to pods of app=w: 0 pods match, none on its {HOST}": 2}


def test_pods_without_rules_carry_none() -> None:
    _, index = cluster(["a"])
    existing(index, "default/web", "n0", None, app="web")
    job = gang(index, [(2, 1, {}, {"app": "w"})])
    assert job.groups[0].rules is None


RULES = st.sampled_from([ONE_PER_NODE, SPREAD_ZONES, NEAR_WORKERS, {**ONE_PER_NODE, **SPREAD_ZONES}])


@settings(max_examples=60, deadline=None)
@given(zones=st.lists(st.sampled_from("abc"), min_size=1, max_size=6), spec=RULES,
       others=st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["w", "x"])), max_size=4),
       count=st.integers(1, 5), gpus=st.integers(1, 8))
def test_no_placement_breaks_a_required_rule(zones: list[str], spec: dict[str, Any],
                                             others: list[tuple[int, str]], count: int, gpus: int) -> None:
    state, index = cluster(zones)
    for i, (node, app) in enumerate(others):
        if node < len(zones):
            existing(index, f"default/o{i}", f"n{node}", None, app=app)
    job = gang(index, [(count, gpus, spec, {"app": "w"})])
    placer = Placer(state)
    ok = placer.place_gang(job, [count])
    if not ok:
        assert placer.taken == [] and job.state == JobState.PENDING
        return
    assert len(placer.taken) == count
    rules = parse_pod_rules(spec, {"app": "w"})[0]
    before = list(index.placed(state.nodes))
    for p in placer.taken:
        judge = Judge(Incoming("default", {"app": "w"}, rules), before, state.nodes, {})
        assert judge.refusal(state.nodes[p.node_id]) is None, (p, spec)
        before.append(PlacedPod("default", {"app": "w"}, p.node_id, rules.anti_affinity))


def test_why_pending_names_the_rule_and_the_numbers() -> None:
    state, index = cluster(["a", "b"])
    state.queues["q"] = queue_from_spec(QueueSpec(name="q", quota=Resources(gpu=64, cpu=1000, memory="10Ti")))
    job = gang(index, [(3, 1, ONE_PER_NODE, {"app": "w"})])
    words = message(state, job, PendingReason.INSUFFICIENT_CAPACITY, 0.0)
    assert words == (
        "Asks for 3 pods x 1 GPU = 3 GPUs, 1 CPU and 1Gi memory per pod; with 2 of its 3 pods placed, "
        f"anti-affinity with 2 pods of app=w (one per {HOST}) on every node with room (2 nodes) "
        "(16 GPUs free on schedulable nodes).")
    existing(index, "default/w0", "n0", None, app="w")
    spread = gang(index, [(2, 1, SPREAD_ZONES, {"app": "w"})])
    state.set_schedulable(state.nodes[1], cordoned=True, failed=False)
    assert f"spread over {ZONE} would reach skew 2, max 1" in message(state, spread, PendingReason.INSUFFICIENT_CAPACITY, 0.0)


SOFT_APART = {"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
    {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "w"}}, "topologyKey": HOST}}]}}}


def test_preferred_anti_affinity_spreads_a_gang_where_it_can_and_packs_where_it_must() -> None:
    state, index = cluster(["a", "a", "a"])
    placer = Placer(state)
    assert placer.place_gang(gang(index, [(3, 1, SOFT_APART, {"app": "w"})]), [3])
    assert sorted(p.node_id for p in placer.taken) == [0, 1, 2]  # best fit alone packs them on one
    state, index = cluster(["a"])
    placer = Placer(state)
    assert placer.place_gang(gang(index, [(3, 1, SOFT_APART, {"app": "w"})]), [3])
    assert [p.node_id for p in placer.taken] == [0, 0, 0]

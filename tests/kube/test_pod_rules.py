"""Pod affinity, anti-affinity and topology spread as usher reads and judges them (pure rules).

Table-driven: each case is a pod's spec, the pods around it and the nodes it is judged on, and
the nodes kube-scheduler's InterPodAffinity and PodTopologySpread filters would allow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from usher.engine.backends.kube.podrules import Incoming, Judge, PlacedPod, RuleKind, parse_pod_rules

HOST, ZONE = "kubernetes.io/hostname", "topology.kubernetes.io/zone"


@dataclass(frozen=True)
class N:
    id: int
    labels: dict[str, str] = field(default_factory=dict)


def nodes(*zones: str | None) -> list[N]:
    """One node a zone given (None: a node without the zone label), named n0, n1, ..."""
    return [N(i, {HOST: f"n{i}", **({ZONE: z} if z else {})}) for i, z in enumerate(zones)]


def anti(key: str = HOST, **labels: str) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": labels}, "topologyKey": key}]}}


def aff(key: str = HOST, **labels: str) -> dict[str, Any]:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": labels}, "topologyKey": key}]}}


def spread(skew: int = 1, key: str = ZONE, **extra: Any) -> dict[str, Any]:
    return {"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "w"}}, **extra}


def judge(spec: dict[str, Any], labels: dict[str, str], pods: list[PlacedPod], ns: list[N],
          ns_labels: dict[str, dict[str, str]] | None = None, **kw: Any) -> Judge:
    rules, problems = parse_pod_rules(spec, labels)
    assert problems == []
    return Judge(Incoming("default", labels, rules, **kw), pods, ns, ns_labels or {})


def on(node: int, ns: str = "default", terminating: bool = False, anti_of: dict[str, Any] | None = None,
       **labels: str) -> PlacedPod:
    terms = parse_pod_rules({"affinity": anti_of}, labels)[0].anti_affinity if anti_of else ()
    return PlacedPod(ns, labels, node, terms, terminating)


CASES = [
    # (name, spec, labels, pods, nodes, allowed)
    ("anti-affinity one per node", {"affinity": anti(app="w")}, {"app": "w"},
     [on(0, app="w")], nodes("a", "a", "b"), {1, 2}),
    ("anti-affinity per zone", {"affinity": anti(ZONE, app="w")}, {"app": "w"},
     [on(0, app="w")], nodes("a", "a", "b"), {2}),
    ("anti-affinity ignores another namespace", {"affinity": anti(app="w")}, {"app": "w"},
     [on(0, ns="other", app="w")], nodes("a", "b"), {0, 1}),
    ("anti-affinity counts a terminating pod", {"affinity": anti(app="w")}, {"app": "w"},
     [on(0, terminating=True, app="w")], nodes("a", "b"), {1}),
    ("anti-affinity key missing on a node: that node is free of it", {"affinity": anti(ZONE, app="w")}, {"app": "w"},
     [on(0, app="w")], nodes("a", None), {1}),
    ("an existing pod's anti-affinity keeps others away (symmetry)", {}, {"app": "x"},
     [on(0, anti_of=anti(app="x"), app="db")], nodes("a", "b"), {1}),
    ("symmetry per zone", {}, {"app": "x"},
     [on(0, anti_of=anti(ZONE, app="x"), app="db")], nodes("a", "a", "b"), {2}),
    ("affinity needs a matching pod in the domain", {"affinity": aff(ZONE, app="w")}, {"role": "launcher"},
     [on(1, app="w")], nodes("a", "b", "b"), {1, 2}),
    ("affinity with nothing matching and not self-matching: nowhere", {"affinity": aff(app="w")}, {"role": "x"},
     [], nodes("a", "b"), set()),
    ("affinity first of a series: self-matching pod anywhere", {"affinity": aff(app="w")}, {"app": "w"},
     [], nodes("a", "b"), {0, 1}),
    ("affinity needs the topology key on the node", {"affinity": aff(ZONE, app="w")}, {"app": "w"},
     [], nodes("a", None), {0}),
    ("spread maxSkew 1 over two zones", {"topologySpreadConstraints": [spread()]}, {"app": "w"},
     [on(0, app="w")], nodes("a", "b"), {1}),
    ("spread balanced: both zones", {"topologySpreadConstraints": [spread()]}, {"app": "w"},
     [on(0, app="w"), on(1, app="w")], nodes("a", "b"), {0, 1}),
    ("spread ignores terminating pods", {"topologySpreadConstraints": [spread()]}, {"app": "w"},
     [on(0, terminating=True, app="w")], nodes("a", "b"), {0, 1}),
    ("spread: node without the key is refused", {"topologySpreadConstraints": [spread()]}, {"app": "w"},
     [], nodes("a", None), {0}),
    ("spread minDomains 3 with two domains: the smallest count is taken as 0",
     {"topologySpreadConstraints": [spread(minDomains=3)]}, {"app": "w"}, [on(0, app="w"), on(1, app="w")],
     nodes("a", "b"), set()),
    ("spread maxSkew 2", {"topologySpreadConstraints": [spread(2)]}, {"app": "w"},
     [on(0, app="w")], nodes("a", "b"), {0, 1}),
    ("spread matchLabelKeys splits by revision", {"topologySpreadConstraints": [spread(matchLabelKeys=["rev"])]},
     {"app": "w", "rev": "2"}, [on(0, app="w", rev="1")], nodes("a", "b"), {0, 1}),
    ("anti-affinity mismatchLabelKeys: only other tenants", {"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchExpressions": [
            {"key": "tenant", "operator": "Exists"}]}, "mismatchLabelKeys": ["tenant"], "topologyKey": HOST}]}}},
     {"tenant": "a"}, [on(0, tenant="a"), on(1, tenant="b")], nodes("a", "b"), {0}),
    ("namespaceSelector picks namespaces by label", {"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchLabels": {"app": "w"}},
                                                            "namespaceSelector": {"matchLabels": {"team": "ml"}},
                                                            "topologyKey": HOST}]}}},
     {"app": "w"}, [on(0, ns="ml1", app="w"), on(1, ns="web", app="w")], nodes("a", "b", "c"), {1, 2}),
]


@pytest.mark.parametrize(("spec", "labels", "pods", "ns", "allowed"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rules_allow_the_nodes_kube_scheduler_would(spec, labels, pods, ns, allowed) -> None:
    j = judge(spec, labels, pods, ns, {"ml1": {"team": "ml"}, "web": {"team": "web"}})
    assert set(j.allowed()) == allowed


def test_spread_node_affinity_policy_honor_leaves_out_domains_the_pod_cannot_use() -> None:
    ns = nodes("a", "b", "c")
    pods = [on(0, app="w"), on(1, app="w")]
    only_ab = lambda n: n.labels[ZONE] != "c"  # noqa: E731
    honored = judge({"topologySpreadConstraints": [spread()]}, {"app": "w"}, pods, ns, node_affinity=only_ab)
    assert set(honored.allowed()) == {0, 1, 2}  # zone c is no domain: min is 1
    ignored = judge({"topologySpreadConstraints": [spread(nodeAffinityPolicy="Ignore")]}, {"app": "w"}, pods, ns,
                    node_affinity=only_ab)
    assert set(ignored.allowed()) == {2}  # zone c counts with 0


def test_spread_taints_policy_honor_leaves_out_untolerated_nodes() -> None:
    ns = nodes("a", "b", "c")
    pods = [on(0, app="w"), on(1, app="w")]
    tainted_c = lambda n: n.labels[ZONE] != "c"  # noqa: E731
    assert set(judge({"topologySpreadConstraints": [spread()]}, {"app": "w"}, pods, ns, tolerates=tainted_c).allowed()) == {2}
    honored = judge({"topologySpreadConstraints": [spread(nodeTaintsPolicy="Honor")]}, {"app": "w"}, pods, ns,
                    tolerates=tainted_c)
    assert set(honored.allowed()) == {0, 1, 2}


def test_refusals_name_the_rule_and_the_numbers() -> None:
    j = judge({"affinity": anti(app="vllm")}, {"app": "vllm"}, [on(i, app="vllm") for i in range(3)], nodes("a", "a", "a"))
    r = j.refusal(N(0, {HOST: "n0", ZONE: "a"}))
    assert r is not None and r.kind == RuleKind.ANTI_AFFINITY
    assert r.words == f"anti-affinity with 3 pods of app=vllm (one per {HOST})"
    s = judge({"topologySpreadConstraints": [spread()]}, {"app": "w"}, [on(0, app="w")], nodes("a", "b"))
    r = s.refusal(N(0, {HOST: "n0", ZONE: "a"}))
    assert r is not None and r.words == f"spread over {ZONE} would reach skew 2, max 1"


BAD = [
    ({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]}}},
     "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: required"),
    ({"affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 0, "podAffinityTerm": {"topologyKey": HOST}}]}}},
     "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: must be an integer from 1 to 100"),
    ({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": HOST, "labelSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}]}}},
     "requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchExpressions[0].values: must be non-empty"),
    ({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": HOST, "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}]}}},
     "matchExpressions[0].operator: 'Near' is not one of In, NotIn, Exists, DoesNotExist"),
    ({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": HOST, "labelSelector": {}, "matchLabelKeys": ["a"], "mismatchLabelKeys": ["a"]}]}}},
     "[0].matchLabelKeys: 'a' is also in mismatchLabelKeys"),
    ({"affinity": {"podAntiAffinity": {"required": []}}}, "spec.affinity.podAntiAffinity.required: unknown field"),
    ({"topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}]},
     "spec.topologySpreadConstraints[0].maxSkew: must be an integer of at least 1, got 0"),
    ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": ZONE}]},
     "spec.topologySpreadConstraints[0].whenUnsatisfiable: required"),
    ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "Never"}]},
     "spec.topologySpreadConstraints[0].whenUnsatisfiable: 'Never' is not one of DoNotSchedule, ScheduleAnyway"),
    ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway",
                                     "minDomains": 2}]},
     "spec.topologySpreadConstraints[0].minDomains: may only be given with whenUnsatisfiable DoNotSchedule"),
    ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                                     "nodeTaintsPolicy": "Maybe"}]},
     "spec.topologySpreadConstraints[0].nodeTaintsPolicy: 'Maybe' is not one of Honor, Ignore"),
    ({"topologySpreadConstraints": [spread(), spread()]},
     "spec.topologySpreadConstraints[1]: a constraint with topologyKey 'topology.kubernetes.io/zone' and whenUnsatisfiable DoNotSchedule is given twice"),
    ({"topologySpreadConstraints": {"maxSkew": 1}}, "spec.topologySpreadConstraints: expected a list, got an object"),
]


@pytest.mark.parametrize(("spec", "words"), BAD, ids=[b[1][:60] for b in BAD])
def test_bad_rules_are_problems_naming_the_field(spec: dict[str, Any], words: str) -> None:
    rules, problems = parse_pod_rules(spec, {"a": "1"})
    assert any(words in p for p in problems), problems


def test_no_rules_parse_to_nothing() -> None:
    rules, problems = parse_pod_rules({"containers": []}, {})
    assert not rules and problems == []


def soft_anti(weight: int = 100, key: str = HOST, **labels: str) -> dict[str, Any]:
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": weight, "podAffinityTerm": {"labelSelector": {"matchLabels": labels}, "topologyKey": key}}]}}


def soft_aff(weight: int = 100, key: str = HOST, **labels: str) -> dict[str, Any]:
    return {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": weight, "podAffinityTerm": {"labelSelector": {"matchLabels": labels}, "topologyKey": key}}]}}


PREFERENCES = [
    # (name, spec, labels, pods, nodes, tiers best first, the lowest left out)
    ("preferred anti-affinity ranks nodes without a match first", {"affinity": soft_anti(app="w")}, {"app": "w"},
     [on(0, app="w")], nodes("a", "b", "c"), [{1, 2}]),
    ("preferred affinity ranks the zone with a match first", {"affinity": soft_aff(key=ZONE, app="db")}, {"app": "w"},
     [on(0, app="db")], nodes("a", "a", "b"), [{0, 1}]),
    ("weights add up: affinity 80 beats anti-affinity 20 on one node",
     {"affinity": {**soft_aff(80, app="db"), **soft_anti(20, app="w")}}, {"app": "w"},
     [on(0, app="db"), on(0, app="w"), on(1, app="w")], nodes("a", "b", "c"), [{0}, {2}]),
    ("ScheduleAnyway spread ranks the emptier zone first",
     {"topologySpreadConstraints": [{**spread(), "whenUnsatisfiable": "ScheduleAnyway"}]}, {"app": "w"},
     [on(0, app="w"), on(1, app="w")], nodes("a", "a", "b"), [{2}]),
    ("no soft rule: no tiers", {"affinity": anti(app="w")}, {"app": "w"}, [on(0, app="w")], nodes("a", "b"), []),
]


@pytest.mark.parametrize(("spec", "labels", "pods", "ns", "expected"), [c[1:] for c in PREFERENCES],
                         ids=[c[0] for c in PREFERENCES])
def test_soft_rules_rank_nodes_as_kube_scheduler_scores_them(spec, labels, pods, ns, expected) -> None:
    j = judge(spec, labels, pods, ns)
    assert [set(t) for t in j.preference(j.allowed())] == expected


def test_existing_pods_soft_and_required_terms_rank_nodes_for_others() -> None:
    ns = nodes("a", "b", "c")
    repelling = PlacedPod("default", {"app": "db"}, 0, (), False, (),
                          (), parse_pod_rules({"affinity": soft_anti(app="w")}, {})[0].preferred_anti_affinity)
    attracting = PlacedPod("default", {"app": "lb"}, 1, (), False,
                           parse_pod_rules({"affinity": aff(app="w")}, {})[0].affinity)
    j = judge({}, {"app": "w"}, [repelling, attracting], ns)
    assert [set(t) for t in j.preference(j.allowed())] == [{1}, {2}]

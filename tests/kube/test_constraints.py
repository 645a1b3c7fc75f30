"""Node constraints of a pod (nodeSelector, node affinity, tolerations) against nodes (labels,
taints), with kube-scheduler's semantics; and what usher refuses, by field path."""

from __future__ import annotations

from typing import Any

import pytest
from usher.engine.backends.kube.constraints import (
    Exclusion,
    NodeConstraints,
    Taint,
    eligible_node_ids,
    explain_exclusions,
    filter_nodes,
    group_constraints,
    node_taints,
    parse_constraints,
)
from usher.engine.backends.kube.objects import node_view, pod_view
from usher.engine.backends.kube.podrules import parse_pod_rules
from usher.engine.state import Node

REQUIRED = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def parsed(spec: dict[str, Any]) -> NodeConstraints:
    constraints, problems = parse_constraints(spec)
    assert problems == []
    assert constraints is not None
    return constraints


def engine_node(i: int, name: str, labels: dict[str, str] | None = None,
                taints: tuple[tuple[str, str, str], ...] = ()) -> Node:
    return Node(i, name, {"kubernetes.io/hostname": name, **(labels or {})}, "H100", 0, 8, [list(range(8))],
                1 << 62, 1 << 62, taints=taints)


def allowed(spec: dict[str, Any], *nodes: Node) -> set[str]:
    """The names of ``nodes`` a pod with ``spec`` may go on."""
    result = filter_nodes(parsed(spec), nodes)
    return {n.name for n in nodes} if result.eligible is None else set(result.eligible)


def expression(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, **({"values": list(values)} if values else {})}


def required(*terms: list[dict[str, Any]], fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    node_terms: list[dict[str, Any]] = [{"matchExpressions": t} for t in terms]
    if fields is not None:
        node_terms.append({"matchFields": fields})
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": node_terms}}}}


ZONES = (
    engine_node(0, "a", {"zone": "a", "gen": "3"}),
    engine_node(1, "b", {"zone": "b", "gen": "4"}),
    engine_node(2, "c", {"gen": "x"}),
)


# -- node affinity ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (expression("zone", "In", "a", "z"), {"a"}),
        (expression("zone", "NotIn", "a"), {"b", "c"}),  # NotIn also holds where the label is absent
        (expression("zone", "Exists"), {"a", "b"}),
        (expression("zone", "DoesNotExist"), {"c"}),
        (expression("gen", "Gt", "3"), {"b"}),  # "x" is not an integer: no match
        (expression("gen", "Lt", "4"), {"a"}),
        (expression("missing", "Lt", "100"), set()),  # an absent label never satisfies Gt/Lt
    ],
)
def test_each_match_expression_operator(expr: dict[str, Any], expected: set[str]):
    assert allowed(required([expr]), *ZONES) == expected


def test_terms_are_ored_and_expressions_within_a_term_anded():
    spec = required(
        [expression("zone", "In", "a"), expression("gen", "In", "4")],  # nobody: a has gen 3
        [expression("gen", "In", "x")],
    )
    assert allowed(spec, *ZONES) == {"c"}


def test_an_empty_term_matches_no_node():
    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}}}
    assert allowed(spec, *ZONES) == set()


def test_match_fields_on_metadata_name_match_the_node_name():
    assert allowed(required(fields=[expression("metadata.name", "In", "b", "c")]), *ZONES) == {"b", "c"}
    assert allowed(required(fields=[expression("metadata.name", "NotIn", "b")]), *ZONES) == {"a", "c"}


def test_node_selector_and_required_affinity_must_both_hold():
    spec = {"nodeSelector": {"gen": "4"}, **required([expression("zone", "Exists")])}
    assert allowed(spec, *ZONES) == {"b"}
    assert allowed({"nodeSelector": {"zone": "a", "gen": "3"}}, *ZONES) == {"a"}
    assert allowed({"nodeSelector": {"zone": "a", "gen": "4"}}, *ZONES) == set()


# -- taints and tolerations ---------------------------------------------------------------

RESERVED = ("gpu", "reserved", "NoSchedule")
TAINTED = (
    engine_node(0, "plain"),
    engine_node(1, "reserved", taints=(RESERVED,)),
    engine_node(2, "maint", taints=(("maint", "", "NoExecute"),)),
)


def tolerate(*tolerations: dict[str, Any]) -> dict[str, Any]:
    return {"tolerations": list(tolerations)}


def test_untolerated_no_schedule_and_no_execute_taints_exclude_the_node():
    assert allowed({"nodeSelector": {}, **tolerate({"key": "x", "operator": "Exists"})}, *TAINTED) == {"plain"}


def test_exists_with_an_empty_key_tolerates_every_taint():
    assert allowed(tolerate({"operator": "Exists"}), *TAINTED) == {"plain", "reserved", "maint"}


def test_exists_with_a_key_tolerates_any_value_of_that_key():
    assert allowed(tolerate({"key": "gpu", "operator": "Exists"}), *TAINTED) == {"plain", "reserved"}


def test_equal_needs_the_same_value_and_an_empty_value_matches_a_taint_without_one():
    assert allowed(tolerate({"key": "gpu", "value": "reserved"}), *TAINTED) == {"plain", "reserved"}
    assert allowed(tolerate({"key": "gpu", "operator": "Equal", "value": "other"}), *TAINTED) == {"plain"}
    assert allowed(tolerate({"key": "maint", "operator": "Equal"}), *TAINTED) == {"plain", "maint"}
    assert allowed(tolerate({"key": "gpu", "operator": "Equal"}), *TAINTED) == {"plain"}


def test_an_empty_effect_matches_every_effect_and_a_given_one_only_itself():
    assert allowed(tolerate({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}), *TAINTED) == {"plain", "reserved"}
    assert allowed(tolerate({"key": "gpu", "operator": "Exists", "effect": "NoExecute"}), *TAINTED) == {"plain"}
    assert allowed(tolerate({"key": "maint", "operator": "Exists", "effect": "NoExecute"}), *TAINTED) == {"plain", "maint"}


def test_a_no_execute_taint_tolerated_only_for_a_time_keeps_the_pod_off():
    # The pod would be evicted tolerationSeconds after it started: no place for a batch gang.
    limited = {"key": "maint", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    assert allowed(tolerate(limited), *TAINTED) == {"plain"}
    result = filter_nodes(parsed(tolerate(limited)), TAINTED)
    text = explain_exclusions(result, parsed(tolerate(limited)))
    assert text is not None and "maint:NoExecute, tolerated for 300s only" in text
    # the first toleration that matches counts, as the taint eviction controller picks it
    # (GetMatchingTolerations): one for ever before the limited one keeps the pod; after it, not
    forever = {"key": "maint", "operator": "Exists"}
    assert allowed(tolerate(forever, limited), *TAINTED) == {"plain", "maint"}
    assert allowed(tolerate(limited, forever), *TAINTED) == {"plain"}


def test_prefer_no_schedule_is_a_score_not_a_filter():
    nodes = (
        engine_node(0, "soft", taints=(("spot", "true", "PreferNoSchedule"),)),
        engine_node(1, "clean"),
    )
    spec = tolerate({"key": "other", "operator": "Exists"})
    result = filter_nodes(parsed(spec), nodes)
    assert result.eligible is None  # both nodes allowed
    assert result.scores["clean"] > result.scores["soft"]
    fields = group_constraints(parsed(spec), nodes)
    assert fields["eligible"] is None and fields["preferred"] == (frozenset({1}),)
    # tolerated: no preference left
    tolerant = tolerate({"key": "spot", "operator": "Exists", "effect": "PreferNoSchedule"})
    assert group_constraints(parsed(tolerant), nodes)["preferred"] == ()


def test_preferred_affinity_weights_make_preference_tiers():
    spec = {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 80, "preference": {"matchExpressions": [expression("zone", "In", "b")]}},
        {"weight": 20, "preference": {"matchExpressions": [expression("zone", "Exists")]}},
    ]}}}
    result = filter_nodes(parsed(spec), ZONES)
    assert result.eligible is None
    assert result.scores["b"] > result.scores["a"] > result.scores["c"]
    # tiers of engine node ids, best first; the least preferred (c) is the fallback
    assert group_constraints(parsed(spec), ZONES)["preferred"] == (frozenset({1}), frozenset({0}))


def test_node_taints_leave_out_what_usher_reads_from_node_state():
    spec = {"taints": [
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
        {"key": "gpu", "value": "reserved", "effect": "NoSchedule"},
        {"key": "odd", "effect": "Sometimes"},
        "garbage",
    ]}
    assert node_taints(spec) == (Taint("gpu", "reserved", "NoSchedule"),)


# -- for the engine and for people --------------------------------------------------------


def test_eligible_node_ids_and_the_explanation():
    nodes = (
        engine_node(0, "n0", {"pool": "train"}, taints=(RESERVED,)),
        engine_node(1, "n1", {"pool": "train"}, taints=(RESERVED,)),
        engine_node(2, "n2", {"pool": "train"}, taints=(RESERVED,)),
        engine_node(3, "n3", {"pool": "infer"}),
        engine_node(4, "n4", {"pool": "infer"}),
        engine_node(5, "n5", {"pool": "train"}),
    )
    constraints = parsed({"nodeSelector": {"pool": "train"}})
    assert eligible_node_ids(constraints, nodes) == frozenset({5})
    result = filter_nodes(constraints, nodes)
    assert result.excluded == {Exclusion.TAINT: 3, Exclusion.NODE_SELECTOR: 2}
    assert explain_exclusions(result) == (
        "3 nodes have a taint the pod does not tolerate (gpu=reserved:NoSchedule), 2 do not match its nodeSelector"
    )
    assert group_constraints(constraints, nodes)["exclusions"] == explain_exclusions(result)
    # nothing excluded: no restriction at all
    assert eligible_node_ids(parsed(tolerate({"operator": "Exists"})), nodes) is None
    # a pod with no constraints tolerates no taint: it keeps off the tainted nodes
    assert eligible_node_ids(None, nodes) == frozenset({3, 4, 5})
    assert eligible_node_ids(None, nodes[3:]) is None


# -- what usher does not do ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        (required([expression("zone", "In", "a"), {"key": "zone", "operator": "Foo", "values": ["a"]}]),
         f"{REQUIRED}.nodeSelectorTerms[0].matchExpressions[1].operator: 'Foo' is not one of In, NotIn, Exists, DoesNotExist, Gt, Lt"),
        (required(fields=[expression("metadata.labels", "In", "a")]),
         f"{REQUIRED}.nodeSelectorTerms[0].matchFields[0].key: 'metadata.labels' is not supported"),
        (required(fields=[expression("metadata.name", "Exists")]),
         f"{REQUIRED}.nodeSelectorTerms[0].matchFields[0].operator: 'Exists' is not supported on metadata.name"),
        (required([expression("gen", "Gt", "three")]),
         f"{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].values: Gt needs exactly one integer value"),
        (required([expression("zone", "In")]), f"{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].values: In needs at least one value"),
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}},
         f"{REQUIRED}.nodeSelectorTerms: expected a non-empty list"),
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingRequiredDuringExecution": {"nodeSelectorTerms": [{}]}}}},
         "spec.affinity.nodeAffinity.requiredDuringSchedulingRequiredDuringExecution is not supported by usher"),
        ({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 0, "preference": {}}]}}},
         "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: 0 is not a whole number from 1 to 100"),
        (tolerate({"key": "gpu", "operator": "Gt", "value": "3"}),
         "spec.tolerations[0].operator: 'Gt' is not one of Exists, Equal"),
        (tolerate({"key": "gpu", "effect": "NoRun"}), "spec.tolerations[0].effect: 'NoRun' is not one of"),
        (tolerate({"operator": "Equal", "value": "x"}), "spec.tolerations[0].key: an empty key (every taint) needs the operator Exists"),
        ({"nodeSelector": ["zone=a"]}, "spec.nodeSelector: expected a map"),
    ],
)
def test_what_usher_does_not_implement_is_a_problem_naming_the_field(spec: dict[str, Any], problem: str):
    _, problems = parse_constraints(spec)
    assert any(p.startswith(problem) for p in problems), problems


@pytest.mark.parametrize(
    "spec",
    [
        {"affinity": "yes"},
        {"affinity": {"nodeAffinity": []}},
        {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [None, 3]}}}},
        {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": True}]}}},
        required([{"key": None, "operator": ["In"], "values": "a"}]),
        {"tolerations": [None, {"key": 3}, {"tolerationSeconds": "soon", "operator": "Exists"}]},
        {"tolerations": {"key": "gpu"}},
        {"nodeSelector": {"zone": 1}},
        {"topologySpreadConstraints": "x"},
    ],
)
def test_malformed_constraints_are_problems_never_exceptions(spec: dict[str, Any]):
    _, problems = parse_constraints(spec)
    problems += parse_pod_rules(spec, {})[1]  # rules against other pods are podrules' to read
    assert problems


def test_a_pod_without_constraints_has_none():
    assert parse_constraints({"containers": [{"name": "c"}]}) == (None, [])


# -- pods and nodes as usher reads them ---------------------------------------------------


def pod_obj(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ml", "labels": {"usher/gang": "g", "usher/gang-size": "2"}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}}}], **spec},
    }


def test_pod_view_carries_constraints_and_folds_problems_into_problem():
    plain = pod_view(pod_obj("w-0"))
    picky = pod_view(pod_obj("w-1", nodeSelector={"pool": "train"}))
    assert plain.constraints is None and plain.problem is None
    assert picky.constraints == parsed({"nodeSelector": {"pool": "train"}})
    # one gang, different constraints: different engine pod groups
    assert plain.signature() != picky.signature()
    assert pod_view(pod_obj("w-2", nodeSelector={"pool": "train"})).signature() == picky.signature()
    # rules against other pods are read by podrules: a bad one is a problem naming its field,
    # a soft one is honoured (a preference), a good one is part of the signature
    bad = pod_view(pod_obj("w-3", affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}}))
    assert bad.problem is not None
    assert "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: required" in bad.problem
    soft = pod_view(pod_obj("w-4", affinity={"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {}}}]}}))
    assert soft.problem is None and soft.rules.preferred_anti_affinity
    apart = pod_view(pod_obj("w-5", affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"usher/gang": "g"}}}]}}))
    assert apart.problem is None and apart.rules.anti_affinity and apart.signature() != plain.signature()


def test_node_view_taints_are_part_of_its_shape():
    def node_obj(taints: list[dict[str, str]]) -> dict[str, Any]:
        return {"metadata": {"name": "n1", "labels": {}}, "spec": {"taints": taints},
                "status": {"allocatable": {"nvidia.com/gpu": "8"}}}

    clean = node_view(node_obj([]))
    tainted = node_view(node_obj([{"key": "gpu", "value": "reserved", "effect": "NoSchedule"}]))
    assert tainted.taints == (Taint("gpu", "reserved", "NoSchedule"),)
    assert clean.shape() != tainted.shape()  # a taint change rebuilds the engine's state
    cordoned = node_view(node_obj([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]))
    assert cordoned.shape() == clean.shape()  # a cordon stays a cheap schedulability change


def test_tolerations_read_once_are_told_apart_by_type_as_well_as_value() -> None:
    """1, 1.0 and True are equal in Python: a remembered reading must not pass for another's."""
    def problems(seconds: object) -> list[str]:
        spec = {"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}]}
        return parse_constraints(spec)[1]

    assert problems(1.0) and problems(1) == [] and problems(True) and problems(1) == []

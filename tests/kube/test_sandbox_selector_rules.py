"""The sandbox reads each selector rule once: a ``metav1.LabelSelector`` by
``sandbox/labels.LabelSelector`` (for the API server, the controllers and the scheduler's plugins
alike), node selector terms, a volume's node affinity and a class's ``allowedTopologies`` by
``sandbox/nodefit``. These are the cases where the second copies it once had disagreed, each
answered as Kubernetes' own code answers it (apimachinery's ``LabelSelectorAsSelector`` and
``NewRequirement``, component-helpers' ``MatchTopologySelectorTerms``, volume util's
``CheckNodeAffinity``)."""

from __future__ import annotations

from typing import Any

import pytest

from usher.sandbox import labels, nodefit, pod_affinity, provisioner, topology_spread
from usher.sandbox.api_errors import ApiError
from usher.sandbox.store import LabelSelector

POD_LABELS = {"app": "train", "tier": "gpu"}
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"

#: selectors kube-apiserver refuses on create; met unvalidated, ``LabelSelectorAsSelector`` fails on each
MALFORMED = [
    ("an unknown operator", {"matchExpressions": [{"key": "tier", "operator": "Gt", "values": ["1"]}]}),
    # the old affinity copy read a missing key as "", so DoesNotExist matched every pod
    ("no key", {"matchExpressions": [{"operator": "DoesNotExist"}]}),
    # both old copies read NotIn of nothing as "any value": every pod
    ("NotIn without values", {"matchExpressions": [{"key": "team", "operator": "NotIn"}]}),
    ("Exists with values", {"matchExpressions": [{"key": "tier", "operator": "Exists", "values": ["x"]}]}),
    ("a key that is no qualified name", {"matchExpressions": [{"key": "-tier", "operator": "Exists"}]}),
    ("an expression that is no object", {"matchExpressions": ["tier"]}),
    ("a matchLabels value that is no label value", {"matchLabels": {"tier": "gpu/a100"}}),
]


@pytest.mark.parametrize("selector", [c[1] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_a_selector_kube_cannot_build_is_an_error_that_each_caller_answers_as_kube_does(selector: dict[str, Any]) -> None:
    with pytest.raises(labels.InvalidSelector):
        labels.LabelSelector.from_spec(selector)
    # the scheduler's plugins and the controllers: it matches nothing
    assert labels.LabelSelector.or_nothing(selector).matches(POD_LABELS) is False
    # the API server: 400 Bad Request
    with pytest.raises(ApiError) as refused:
        LabelSelector.from_spec(selector)
    assert refused.value.code == 400


def test_the_api_server_keeps_its_words_for_an_unknown_operator() -> None:
    with pytest.raises(ApiError) as refused:
        LabelSelector.from_spec(MALFORMED[0][1])
    assert refused.value.code == 400 and "'Gt' is not a valid label selector operator" in str(refused.value)


def test_nil_selects_nothing_and_empty_everything() -> None:
    assert labels.LabelSelector.from_spec(None).matches(POD_LABELS) is False
    assert labels.LabelSelector.from_spec({}).matches(POD_LABELS) is True


@pytest.mark.parametrize("selector", [c[1] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_pod_affinity_and_spread_read_a_selector_kube_cannot_build_as_matching_no_pod(selector: dict[str, Any]) -> None:
    owner = {"metadata": {"name": "me", "namespace": "default", "labels": {}}}
    other = {"metadata": {"name": "other", "namespace": "default", "labels": POD_LABELS}}
    term = pod_affinity.Term.of({"labelSelector": selector, "topologyKey": HOST}, owner)
    assert term.matches(other, {}) is False
    constraint = topology_spread.Constraint.of(
        {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}, owner)
    assert constraint.selects(POD_LABELS) is False


# -- a StorageClass's allowedTopologies (MatchTopologySelectorTerms) ---------------------------------


def _term(*expressions: tuple[str, list[str]]) -> dict[str, Any]:
    return {"matchLabelExpressions": [{"key": k, "values": v} for k, v in expressions]}


NODE_LABELS = {ZONE: "zone-b", HOST: "n2"}

TOPOLOGIES = [
    ("no terms: every node", [], True),
    ("the node's zone listed", [_term((ZONE, ["zone-a", "zone-b"]))], True),
    ("another zone", [_term((ZONE, ["zone-a"]))], False),
    ("terms are ORed", [_term((ZONE, ["zone-a"])), _term((HOST, ["n2"]))], True),
    # the old provisioner copy skipped an expression on a key other than its driver's: it allowed zone-b here
    ("a term's expressions are ANDed, a key the node lacks fails it",
     [_term((ZONE, ["zone-b"]), ("example.com/rack", ["r1"]))], False),
    # both old copies let an empty term allow every node
    ("an empty term allows no node", [{}], False),
    ("an expression without values allows no node", [_term((ZONE, []))], False),
]


@pytest.mark.parametrize(("terms", "expected"), [c[1:] for c in TOPOLOGIES], ids=[c[0] for c in TOPOLOGIES])
def test_allowed_topologies_read_one_way_by_the_scheduler_and_the_provisioner(terms: list[Any], expected: bool) -> None:
    assert nodefit.topology_terms_match(terms, NODE_LABELS) is expected
    sc = {"metadata": {"name": "sc"}, "allowedTopologies": terms}
    node = {"metadata": {"name": "n2", "labels": NODE_LABELS}}
    assert provisioner._allowed(sc, node, ZONE, "zone-b") is expected


# -- a PersistentVolume's node affinity (CheckNodeAffinity) ------------------------------------------


def _pv(*terms: dict[str, Any] | None) -> dict[str, Any]:
    if terms == (None,):
        return {"spec": {}}
    return {"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": list(terms)}}}}


def _expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


NODE = {"metadata": {"name": "n2", "labels": NODE_LABELS}}

VOLUME_AFFINITY = [
    ("no node affinity: every node", _pv(None), True),
    ("the node's hostname", _pv({"matchExpressions": [_expr(HOST, "In", "n2")]}), True),
    ("another hostname", _pv({"matchExpressions": [_expr(HOST, "In", "n1")]}), False),
    ("terms ORed", _pv({"matchExpressions": [_expr(HOST, "In", "n1")]}, {"matchExpressions": [_expr(ZONE, "In", "zone-b")]}), True),
    # kube checks a node built of the labels alone: matchFields on the name never holds
    ("matchFields metadata.name of the node", _pv({"matchFields": [_expr("metadata.name", "In", "n2")]}), False),
    ("required without terms", _pv(), False),
]


@pytest.mark.parametrize(("pv", "expected"), [c[1:] for c in VOLUME_AFFINITY], ids=[c[0] for c in VOLUME_AFFINITY])
def test_a_volumes_node_affinity_is_read_one_way_by_the_scheduler_and_the_kubelet(pv: dict[str, Any], expected: bool) -> None:
    assert nodefit.volume_fits_node(pv, NODE) is expected


def test_a_node_selector_term_kube_cannot_build_matches_no_node() -> None:
    """NodeSelectorRequirementsAsSelector builds each requirement with NewRequirement, as label
    selectors do: Exists with values, In without values, a missing key fail their term."""
    for expr in ({"key": "gpu", "operator": "Exists", "values": ["x"]}, {"key": ZONE, "operator": "NotIn"},
                 {"operator": "DoesNotExist"}):
        assert nodefit.term_matches({"matchExpressions": [expr]}, NODE) is False
    assert nodefit.term_matches({"matchFields": [_expr("metadata.name", "NotIn", "n1", "n3")]}, NODE) is False  # one value only

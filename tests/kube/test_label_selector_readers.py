"""Every place usher reads a raw ``metav1.LabelSelector`` holds the same rules (one reader,
``selectors.read_label_selector``): a PodDisruptionBudget's selector, a volume claim's, a
CSIStorageCapacity's ``nodeTopology`` and a pod affinity term's. A selector kube refuses is never
read more loosely in one place than another: a pod's rule names the field, and an object the API
server validated (so only a server that does not validate lets such a selector through) selects
nothing rather than more than was written."""

from __future__ import annotations

from typing import Any

import pytest

from usher.engine.backends.kube.objects import selector_matches
from usher.engine.backends.kube.podrules.parse import parse_pod_rules
from usher.engine.backends.kube.volumes.model import parse_capacity, parse_claim

LABELS = {"tier": "gold", "zone": "a"}

#: selectors the API server refuses; each, read loosely, would select LABELS
MALFORMED = [
    ("Exists with values", {"matchExpressions": [{"key": "tier", "operator": "Exists", "values": ["x"]}]},
     "matchExpressions[0].values: must be empty when operator is Exists"),
    ("NotIn without values", {"matchExpressions": [{"key": "tier", "operator": "NotIn"}]},
     "matchExpressions[0].values: must be non-empty when operator is NotIn"),
    ("no key", {"matchExpressions": [{"operator": "DoesNotExist"}]}, "matchExpressions[0].key: required"),
    ("an unknown operator", {"matchExpressions": [{"key": "tier", "operator": "Gt", "values": ["1"]}]},
     "matchExpressions[0].operator: 'Gt' is not one of In, NotIn, Exists, DoesNotExist"),
    ("a misspelt field", {"matchLabel": {"tier": "gold"}}, "matchLabel: unknown field"),
]


@pytest.mark.parametrize(("selector", "problem"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_a_selector_kube_refuses_is_refused_or_selects_nothing_everywhere(selector: dict[str, Any], problem: str) -> None:
    # a PodDisruptionBudget's: it protects no pod rather than pods it did not name
    assert selector_matches(selector, LABELS) is False
    # a claim's selector of static volumes, a capacity's node topology: nothing rather than more
    claim = parse_claim({"metadata": {"name": "c", "namespace": "ns"},
                         "spec": {"storageClassName": "", "selector": selector, "accessModes": ["ReadWriteOnce"]}})
    assert claim.selector is not None and not claim.selector.selects(LABELS)
    capacity = parse_capacity({"metadata": {"name": "cap", "namespace": "ns"}, "storageClassName": "local",
                               "nodeTopology": selector, "capacity": "1Ti"})
    assert not capacity.serves(LABELS)
    # a pod's own rule: it waits with the field's path
    spec = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}]}}}
    _, problems = parse_pod_rules(spec, {})
    path = "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector"
    assert problems == [f"{path}.{problem}"]


def test_a_well_formed_selector_reads_alike_everywhere() -> None:
    selector = {"matchLabels": {"zone": "a"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]}
    assert selector_matches(selector, LABELS) is True
    assert selector_matches(selector, {**LABELS, "tier": "lead"}) is False
    claim = parse_claim({"metadata": {"name": "c", "namespace": "ns"}, "spec": {"storageClassName": "", "selector": selector}})
    assert claim.selector is not None and claim.selector.selects(LABELS)
    capacity = parse_capacity({"metadata": {"name": "cap", "namespace": "ns"}, "storageClassName": "local",
                               "nodeTopology": selector, "capacity": "1Ti"})
    assert capacity.serves(LABELS) and not capacity.serves({"zone": "b", "tier": "gold"})
    _, problems = parse_pod_rules({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}]}}}, {})
    assert problems == []

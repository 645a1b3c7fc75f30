"""kube-scheduler's InterPodAffinity plugin, as the sandbox's default scheduler runs it.

**Filter** (required terms), for a pod on a node, in the plugin's order:

1. the pod's required *affinity*: the node has every term's ``topologyKey``, and in that
   domain there is a pod that matches *all* the terms ("node(s) didn't match pod affinity
   rules"). The first pod of a group with affinity to itself is let through: when no pod on
   the cluster matches the terms and the pod matches all of them itself;
2. the pod's required *anti-affinity*: no pod matching a term in the node's domain of that
   term's key ("node(s) didn't match pod anti-affinity rules");
3. symmetry: no pod already placed whose required anti-affinity matches the incoming pod has
   the node in its term's domain ("node(s) didn't satisfy existing pods anti-affinity rules").

A term matches a pod when the pod is in one of its namespaces (``namespaces``, the pods whose
namespace's labels ``namespaceSelector`` matches, or the term's pod's own namespace when both are
empty) and its ``labelSelector`` matches the pod's labels, read by the sandbox's one selector rule
(:class:`usher.sandbox.labels.LabelSelector`): a missing selector, or one ``LabelSelectorAsSelector``
cannot build (an unknown operator, a missing key, which validation refuses), matches nothing.
``matchLabelKeys`` / ``mismatchLabelKeys`` are merged into the selector as ``In`` / ``NotIn``
requirements on the pod's own values, as kube-apiserver does on creation (:func:`merged_selector`).
Every pod bound to a node counts, terminating ones too, until they are gone.

**Score** (preferred terms): each node's domain gains the weight of every preferred affinity
term of the pod matched by a pod there and loses that of every preferred anti-affinity term;
the pods already placed count the other way round (their preferred terms matching the incoming
pod, and their required affinity with weight 1). :func:`scores` normalizes to 0..100.

Written from the plugin's documented semantics; the sandbox's own, never usher's rules.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .labels import LabelSelector

JsonObject = dict[str, Any]

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
HARD_AFFINITY_WEIGHT = 1
"""``hardPodAffinityWeight``: what an existing pod's required affinity adds to a node's score."""


class Reason(StrEnum):
    """The plugin's Filter reasons, as kube-scheduler words them."""

    AFFINITY = "node(s) didn't match pod affinity rules"
    ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
    EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"


class Kind(StrEnum):
    AFFINITY = "podAffinity"
    ANTI_AFFINITY = "podAntiAffinity"


def merged_selector(term: Mapping[str, Any], labels: Mapping[str, str]) -> JsonObject | None:
    """The term's ``labelSelector`` with its ``matchLabelKeys`` (``In``) and
    ``mismatchLabelKeys`` (``NotIn``) on the pod's own label values; None when it has none."""
    selector = term.get("labelSelector")
    if not isinstance(selector, dict):
        return None
    extra = [{"key": k, "operator": op, "values": [labels[k]]}
             for field, op in (("matchLabelKeys", "In"), ("mismatchLabelKeys", "NotIn"))
             for k in term.get(field) or [] if k in labels]
    if not extra:
        return selector
    return {**selector, "matchExpressions": [*(selector.get("matchExpressions") or []), *extra]}


@dataclass(frozen=True)
class Term:
    """One pod affinity term, resolved: its selector, namespaces and topology key."""

    selector: LabelSelector
    """What ``LabelSelectorAsSelector`` makes of the term's selector: a missing one, or one it
    cannot build (validation refuses it), matches nothing."""
    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None
    topology_key: str
    weight: int = 0

    @classmethod
    def of(cls, term: Mapping[str, Any], owner: Mapping[str, Any], weight: int = 0) -> Term:
        meta = owner.get("metadata") or {}
        raw = merged_selector(term, meta.get("labels") or {})
        names = frozenset(term.get("namespaces") or ())
        ns_selector = term.get("namespaceSelector")
        if not names and ns_selector is None:
            names = frozenset({meta.get("namespace") or "default"})
        return cls(
            LabelSelector.or_nothing(raw),
            names,
            LabelSelector.or_nothing(ns_selector) if isinstance(ns_selector, dict) else None,
            str(term.get("topologyKey") or ""),
            weight,
        )

    def matches(self, pod: Mapping[str, Any], namespace_labels: Mapping[str, Mapping[str, str]]) -> bool:
        meta = pod.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        in_namespace = namespace in self.namespaces or (
            self.namespace_selector is not None and self.namespace_selector.matches(namespace_labels.get(namespace) or {}))
        return in_namespace and self.selector.matches(meta.get("labels") or {})


def terms(pod: Mapping[str, Any], kind: Kind, required: bool = True) -> list[Term]:
    """The pod's required (or preferred, with their weights) terms of ``kind``."""
    rules = (((pod.get("spec") or {}).get("affinity") or {}).get(kind) or {})
    if required:
        return [Term.of(t, pod) for t in rules.get(REQUIRED) or [] if isinstance(t, dict)]
    return [Term.of(w.get("podAffinityTerm") or {}, pod, int(w.get("weight") or 0))
            for w in rules.get(PREFERRED) or [] if isinstance(w, dict)]


def has_rules(pod: Mapping[str, Any]) -> bool:
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    return bool(affinity.get(Kind.AFFINITY) or affinity.get(Kind.ANTI_AFFINITY))


Domain = tuple[str, str]
"""(topology key, value)."""


def _domain(node_labels: Mapping[str, str], key: str) -> Domain | None:
    value = node_labels.get(key)
    return None if value is None else (key, value)


class Affinity:
    """The plugin's PreFilter state for one pod: counts per topology domain of the pods its
    terms match, and the domains barred by existing pods' anti-affinity."""

    def __init__(self, pod: JsonObject, placed: Iterable[tuple[JsonObject, Mapping[str, str]]],
                 namespace_labels: Mapping[str, Mapping[str, str]]) -> None:
        """``placed``: every pod bound to a node, with that node's labels."""
        self.pod = pod
        self.affinity = terms(pod, Kind.AFFINITY)
        self.anti = terms(pod, Kind.ANTI_AFFINITY)
        self.affinity_counts: Counter[Domain] = Counter()
        self.anti_counts: Counter[Domain] = Counter()
        self.existing_anti: Counter[Domain] = Counter()
        self.namespace_labels = namespace_labels
        for other, labels in placed:
            self.add(other, labels)

    def add(self, other: JsonObject, node_labels: Mapping[str, str]) -> None:
        """Count a pod placed on a node with ``node_labels`` (a gang's pods as they are placed)."""
        if self.affinity and all(t.matches(other, self.namespace_labels) for t in self.affinity):
            for t in self.affinity:
                if (d := _domain(node_labels, t.topology_key)) is not None:
                    self.affinity_counts[d] += 1
        for t in self.anti:
            if t.matches(other, self.namespace_labels) and (d := _domain(node_labels, t.topology_key)) is not None:
                self.anti_counts[d] += 1
        for t in terms(other, Kind.ANTI_AFFINITY):
            if t.matches(self.pod, self.namespace_labels) and (d := _domain(node_labels, t.topology_key)) is not None:
                self.existing_anti[d] += 1

    def filter(self, node_labels: Mapping[str, str]) -> Reason | None:
        """Why the pod may not go to a node with these labels; None when it may."""
        exists = True
        for t in self.affinity:
            d = _domain(node_labels, t.topology_key)
            if d is None:
                return Reason.AFFINITY
            if self.affinity_counts[d] <= 0:
                exists = False
        if not exists and not (not +self.affinity_counts and all(t.matches(self.pod, self.namespace_labels) for t in self.affinity)):
            return Reason.AFFINITY
        for t in self.anti:
            d = _domain(node_labels, t.topology_key)
            if d is not None and self.anti_counts[d] > 0:
                return Reason.ANTI_AFFINITY
        if any(self.existing_anti[item] > 0 for item in node_labels.items()):
            return Reason.EXISTING_ANTI_AFFINITY
        return None


def scores(pod: JsonObject, nodes: list[Mapping[str, str]], placed: Iterable[tuple[JsonObject, Mapping[str, str]]],
           namespace_labels: Mapping[str, Mapping[str, str]]) -> list[float]:
    """The plugin's normalized score (0..100) of each node (by its labels) for ``pod``."""
    mine = [(t, 1) for t in terms(pod, Kind.AFFINITY, required=False)] + \
           [(t, -1) for t in terms(pod, Kind.ANTI_AFFINITY, required=False)]
    by_domain: Counter[Domain] = Counter()
    for other, labels in placed:
        for term, sign in mine:
            if term.matches(other, namespace_labels) and (d := _domain(labels, term.topology_key)) is not None:
                by_domain[d] += sign * term.weight
        theirs = [(t, HARD_AFFINITY_WEIGHT) for t in terms(other, Kind.AFFINITY)] + \
                 [(t, t.weight) for t in terms(other, Kind.AFFINITY, required=False)] + \
                 [(t, -t.weight) for t in terms(other, Kind.ANTI_AFFINITY, required=False)]
        for term, weight in theirs:
            if term.matches(pod, namespace_labels) and (d := _domain(labels, term.topology_key)) is not None:
                by_domain[d] += weight
    raw = [sum(by_domain[item] for item in labels.items() if item in by_domain) for labels in nodes]
    if not raw:
        return []
    low, high = min(raw), max(raw)
    return [100.0 * (r - low) / (high - low) if high > low else 0.0 for r in raw]

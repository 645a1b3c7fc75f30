"""The pod placement rules a pod carries, as plain hashable values: what ``parse`` makes.

Two pods with equal rules are alike to the engine (a pod group's signature includes them), so every
record here is a frozen dataclass of tuples and frozensets. ``matchLabelKeys`` and
``mismatchLabelKeys`` are already folded into the selectors they extend (``key In (value)`` and
``key NotIn (value)`` with the pod's own label value), as the API server does for pod affinity and
kube-scheduler for topology spread, so the evaluation never needs the pod's labels to read a rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from ..selectors import LabelSelector


class Unsatisfiable(StrEnum):
    """``whenUnsatisfiable`` of a topology spread constraint."""

    DO_NOT_SCHEDULE = "DoNotSchedule"
    SCHEDULE_ANYWAY = "ScheduleAnyway"


class InclusionPolicy(StrEnum):
    """``nodeAffinityPolicy`` / ``nodeTaintsPolicy``: whether a node the pod could not go on
    still counts as a domain of the spread."""

    HONOR = "Honor"
    IGNORE = "Ignore"


class RuleKind(StrEnum):
    """Which rule keeps a pod off a node, as why-pending names it."""

    AFFINITY = "pod affinity"
    ANTI_AFFINITY = "pod anti-affinity"
    EXISTING_ANTI_AFFINITY = "anti-affinity of pods already there"
    SPREAD = "topology spread"
    MISSING_KEY = "topology label"


@dataclass(slots=True, frozen=True)
class AffinityTerm:
    """One ``PodAffinityTerm``: pods its selector picks, in the namespaces it names, on nodes that
    share the candidate node's value of ``topology_key``."""

    selector: LabelSelector | None
    topology_key: str
    #: ``namespaces``; with no ``namespace_selector`` and none named, the pod's own namespace
    namespaces: frozenset[str] = frozenset()
    namespace_selector: LabelSelector | None = None

    def in_namespace(self, owner_ns: str, ns: str, ns_labels: Mapping[str, Mapping[str, str]]) -> bool:
        """Whether a pod in namespace ``ns`` is within the term of a pod in ``owner_ns``."""
        if not self.namespaces and self.namespace_selector is None:
            return ns == owner_ns
        if ns in self.namespaces:
            return True
        return self.namespace_selector is not None and self.namespace_selector.selects(ns_labels.get(ns, {}))

    def matches(self, owner_ns: str, ns: str, labels: Mapping[str, str], ns_labels: Mapping[str, Mapping[str, str]]) -> bool:
        """Whether a pod (``ns``, ``labels``) is one the term of a pod in ``owner_ns`` picks;
        a term without a selector picks no pod."""
        return self.selector is not None and self.selector.selects(labels) and self.in_namespace(owner_ns, ns, ns_labels)


@dataclass(slots=True, frozen=True)
class WeightedTerm:
    weight: int
    term: AffinityTerm


@dataclass(slots=True, frozen=True)
class SpreadConstraint:
    """One ``topologySpreadConstraints`` entry."""

    max_skew: int
    topology_key: str
    when: Unsatisfiable
    selector: LabelSelector | None
    min_domains: int | None = None
    node_affinity_policy: InclusionPolicy = InclusionPolicy.HONOR
    node_taints_policy: InclusionPolicy = InclusionPolicy.IGNORE

    def counts(self, labels: Mapping[str, str]) -> bool:
        """Whether a pod with ``labels`` (in the same namespace) counts toward this spread."""
        return self.selector is not None and self.selector.selects(labels)


@dataclass(slots=True, frozen=True)
class PodRules:
    """Every inter-pod rule of one pod (the fields a ``PodView`` may carry)."""

    affinity: tuple[AffinityTerm, ...] = ()
    anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[WeightedTerm, ...] = ()
    preferred_anti_affinity: tuple[WeightedTerm, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()

    @property
    def hard_spread(self) -> tuple[SpreadConstraint, ...]:
        return tuple(c for c in self.spread if c.when == Unsatisfiable.DO_NOT_SCHEDULE)

    def __bool__(self) -> bool:
        return bool(self.affinity or self.anti_affinity or self.preferred_affinity
                    or self.preferred_anti_affinity or self.spread)

    @property
    def label_keys(self) -> frozenset[str]:
        """The pod label keys its selectors read: pods of one gang that differ in one of them are
        different pods to these rules (``rank=0`` beside ``rank=1``), whatever else they share."""
        selectors = [t.selector for t in (*self.affinity, *self.anti_affinity)]
        selectors += [w.term.selector for w in (*self.preferred_affinity, *self.preferred_anti_affinity)]
        selectors += [c.selector for c in self.spread]
        return frozenset(k for sel in selectors if sel is not None
                         for k in (*(k for k, _ in sel.match_labels), *(e[0] for e in sel.expressions)))

    def words(self) -> str:
        """The rules in short, for a job's details: ``anti-affinity with app=x per
        kubernetes.io/hostname; spread over topology.kubernetes.io/zone, max skew 1``."""
        def what(t: AffinityTerm) -> str:
            return t.selector.words() if t.selector else "no selector"

        parts = [f"affinity to {what(t)} per {t.topology_key}" for t in self.affinity]
        parts += [f"anti-affinity with {what(t)} per {t.topology_key}" for t in self.anti_affinity]
        parts += [f"preferred affinity to {what(w.term)} per {w.term.topology_key} (weight {w.weight})"
                  for w in self.preferred_affinity]
        parts += [f"preferred anti-affinity with {what(w.term)} per {w.term.topology_key} (weight {w.weight})"
                  for w in self.preferred_anti_affinity]
        for c in self.spread:
            soft = ", if it can" if c.when == Unsatisfiable.SCHEDULE_ANYWAY else ""
            of = c.selector.words() if c.selector else "no selector"
            parts.append(f"spread of {of} over {c.topology_key}, max skew {c.max_skew}{soft}")
        return "; ".join(parts)


NO_RULES = PodRules()


class NodeLike(Protocol):
    @property
    def id(self) -> int: ...

    @property
    def labels(self) -> Mapping[str, str]: ...


@dataclass(slots=True, frozen=True)
class PlacedPod:
    """A pod on a node as these rules see it."""

    namespace: str
    labels: Mapping[str, str]
    node_id: int
    #: its own required anti-affinity terms (others must keep away from it)
    anti_affinity: tuple[AffinityTerm, ...] = ()
    #: a deletion is under way: still counts for (anti-)affinity, no longer for spread
    terminating: bool = False
    #: its own required affinity and preferred terms (they rank nodes for others: ``scoring``)
    affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[WeightedTerm, ...] = ()
    preferred_anti_affinity: tuple[WeightedTerm, ...] = ()


@dataclass(slots=True, frozen=True)
class Incoming:
    """The pod being placed."""

    namespace: str
    labels: Mapping[str, str]
    rules: PodRules
    #: whether the pod's nodeSelector and required node affinity allow a node (spread's Honor)
    node_affinity: Callable[[NodeLike], bool] = field(default=lambda node: True)
    #: whether the pod tolerates a node's NoSchedule/NoExecute taints (spread's nodeTaintsPolicy Honor)
    tolerates: Callable[[NodeLike], bool] = field(default=lambda node: True)

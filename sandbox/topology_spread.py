"""kube-scheduler's PodTopologySpread plugin, as the sandbox's default scheduler runs it.

**Filter** (``whenUnsatisfiable: DoNotSchedule`` constraints): for each constraint, the pods
its selector matches (``labelSelector`` plus ``matchLabelKeys`` as ``In`` requirements on the
pod's own values; same namespace as the pod; not terminating) are counted per domain of its
``topologyKey``, over the *eligible* nodes: those that carry every constraint's key, match the
pod's node selector and required node affinity (``nodeAffinityPolicy: Honor``, the default) and,
with ``nodeTaintsPolicy: Honor`` (default ``Ignore``), have no taint the pod does not tolerate.
A node passes when ``count(its domain) + (1 if the pod matches the selector) - min`` is at most
``maxSkew``, ``min`` being the smallest count among the eligible domains, or 0 while there are
fewer domains than ``minDomains``. A node without the key fails with "node(s) didn't match pod
topology spread constraints (missing required label)", one over the skew with "node(s) didn't
match pod topology spread constraints".

**Score** (``ScheduleAnyway`` constraints): the fewer matching pods in a node's domains (each
weighted by log(domains + 2)), the higher; normalized to 0..100, a node without a key scores 0.

Not modelled: the cluster-level default constraints (soft ones only, for pods of a Service or a
controller), which change scores and never feasibility.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .labels import LabelSelector

JsonObject = dict[str, Any]


class Reason(StrEnum):
    CONSTRAINTS = "node(s) didn't match pod topology spread constraints"
    MISSING_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"


class When(StrEnum):
    DO_NOT_SCHEDULE = "DoNotSchedule"
    SCHEDULE_ANYWAY = "ScheduleAnyway"


class Policy(StrEnum):
    HONOR = "Honor"
    IGNORE = "Ignore"


@dataclass(frozen=True)
class Constraint:
    max_skew: int
    key: str
    when: str
    selector: LabelSelector | None
    """None for a missing ``labelSelector``: it matches no pod (nor does one kube cannot build)."""
    min_domains: int | None
    affinity_policy: str
    taints_policy: str

    @classmethod
    def of(cls, raw: Mapping[str, Any], pod: Mapping[str, Any]) -> Constraint:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        selector = dict(raw.get("labelSelector") or {})
        extra = [{"key": k, "operator": "In", "values": [labels[k]]} for k in raw.get("matchLabelKeys") or [] if k in labels]
        if extra:
            selector["matchExpressions"] = [*(selector.get("matchExpressions") or []), *extra]
        return cls(int(raw.get("maxSkew") or 1), str(raw.get("topologyKey") or ""), str(raw.get("whenUnsatisfiable") or ""),
                   LabelSelector.or_nothing(selector) if raw.get("labelSelector") is not None else None,
                   raw.get("minDomains"), raw.get("nodeAffinityPolicy") or Policy.HONOR,
                   raw.get("nodeTaintsPolicy") or Policy.IGNORE)

    def selects(self, labels: Mapping[str, str]) -> bool:
        return self.selector is not None and self.selector.matches(labels)


def constraints(pod: Mapping[str, Any], when: When) -> list[Constraint]:
    raw = (pod.get("spec") or {}).get("topologySpreadConstraints") or []
    return [Constraint.of(c, pod) for c in raw if isinstance(c, dict) and c.get("whenUnsatisfiable") == when]


def has_rules(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("topologySpreadConstraints"))


NodeCheck = Callable[[JsonObject], bool]
"""Whether the pod's node affinity (or its tolerations) let it onto a node."""


class Spread:
    """The plugin's PreFilter state for one pod and one kind of constraint."""

    def __init__(self, pod: JsonObject, when: When, nodes: list[JsonObject], placed: Iterable[tuple[JsonObject, str]],
                 affinity_ok: NodeCheck, taints_ok: NodeCheck) -> None:
        """``placed``: every pod bound to a node, with the node's name."""
        self.pod = pod
        self.namespace = pod["metadata"].get("namespace") or "default"
        self.labels = pod["metadata"].get("labels") or {}
        self.constraints = constraints(pod, when)
        self.eligible: dict[str, Mapping[str, str]] = {}
        self.counts: Counter[tuple[str, str]] = Counter()
        if not self.constraints:
            return
        for node in nodes:
            labels = node["metadata"].get("labels") or {}
            if not all(c.key in labels for c in self.constraints):
                continue
            if any(c.affinity_policy == Policy.HONOR for c in self.constraints) and not affinity_ok(node):
                continue
            if any(c.taints_policy == Policy.HONOR for c in self.constraints) and not taints_ok(node):
                continue
            self.eligible[node["metadata"]["name"]] = labels
            for c in self.constraints:
                self.counts.setdefault((c.key, labels[c.key]), 0)
        for other, node_name in placed:
            self.add(other, node_name)

    def add(self, other: JsonObject, node_name: str) -> None:
        """Count a pod placed on a node (a gang's pods as they are placed)."""
        labels = self.eligible.get(node_name)
        meta = other["metadata"]
        if labels is None or meta.get("deletionTimestamp") or (meta.get("namespace") or "default") != self.namespace:
            return
        for c in self.constraints:
            if c.selects(meta.get("labels") or {}):
                self.counts[(c.key, labels[c.key])] += 1

    def _minimum(self, c: Constraint) -> int:
        domains = [n for (key, _), n in self.counts.items() if key == c.key]
        if not domains or (c.min_domains is not None and len(domains) < int(c.min_domains)):
            return 0
        return min(domains)

    def filter(self, node_labels: Mapping[str, str]) -> Reason | None:
        for c in self.constraints:
            if c.key not in node_labels:
                return Reason.MISSING_LABEL
            own = 1 if c.selects(self.labels) else 0
            if self.counts.get((c.key, node_labels[c.key]), 0) + own - self._minimum(c) > c.max_skew:
                return Reason.CONSTRAINTS
        return None

    def scores(self, nodes: list[Mapping[str, str]]) -> list[float]:
        """Normalized (0..100) score of each node (by its labels) for the soft constraints."""
        if not self.constraints:
            return [0.0] * len(nodes)
        weights = {c.key: math.log(len({v for (k, v) in self.counts if k == c.key}) + 2) for c in self.constraints}
        raw: list[float | None] = []
        for labels in nodes:
            if not all(c.key in labels for c in self.constraints):
                raw.append(None)
                continue
            raw.append(sum(self.counts.get((c.key, labels[c.key]), 0) * weights[c.key] + c.max_skew - 1
                           for c in self.constraints))
        known = [r for r in raw if r is not None]
        if not known:
            return [0.0] * len(nodes)
        low, high = min(known), max(known)
        return [0.0 if r is None else (100.0 if high == low else 100.0 * (high - r) / (high - low)) for r in raw]

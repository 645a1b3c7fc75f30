"""PodDisruptionBudgets: what an eviction may take, and their status kept current.

:class:`DisruptionController` plays kube-controller-manager's disruption controller: whenever a
pod or a budget changes it recomputes the budgets that select it (``minAvailable`` or
``maxUnavailable``, whole or in percent, over the healthy pods) and writes their status, which the
eviction subresource reads to answer ``429``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from usher.sandbox.store import RESOURCE_TYPES, Change, EventType, JsonObject, LabelSelector, Resource, Store, Stored


# --------------------------------------------------------------------------- disruption budgets


def pod_healthy(pod: JsonObject) -> bool:
    """Running, and Ready unless the pod reports no Ready condition at all."""
    status = pod.get("status", {})
    if status.get("phase") != "Running":
        return False
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    return ready is None or ready.get("status") == "True"


def _pdb_selector(pdb: JsonObject) -> LabelSelector | None:
    selector = pdb.get("spec", {}).get("selector")
    return None if selector is None else LabelSelector.from_spec(selector)


def _scaled(value: Any, total: int) -> int:
    """An int-or-percent value against ``total``, percentages rounded up."""
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


@dataclass(frozen=True, slots=True)
class Budget:
    """What a disruption budget allows right now."""

    expected: int
    healthy: int
    desired: int

    @property
    def allowed(self) -> int:
        return max(0, self.healthy - self.desired)


class DisruptionController:
    """Keeps PodDisruptionBudget status current and answers the eviction check, from the store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.add_listener(self._on_change)

    def budget(self, pdb: JsonObject) -> Budget:
        selector = _pdb_selector(pdb)
        namespace = pdb["metadata"]["namespace"]
        pods = (
            []
            if selector is None
            else [
                p.obj
                for p in self.store.namespaced_objects(Resource.PODS, namespace)
                if selector.matches(p.obj["metadata"].get("labels"))
                and p.obj.get("status", {}).get("phase") not in ("Succeeded", "Failed")
            ]
        )
        spec = pdb.get("spec", {})
        # a pod being deleted (one just evicted, in its grace period) is not healthy, as the
        # disruption controller counts it: a second eviction against the same budget is refused
        expected = len(pods)
        healthy = sum(1 for p in pods if pod_healthy(p) and not p["metadata"].get("deletionTimestamp"))
        if spec.get("maxUnavailable") is not None:
            desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
        elif spec.get("minAvailable") is not None:
            desired = _scaled(spec["minAvailable"], expected)
        else:
            desired = 0
        return Budget(expected, healthy, desired)

    def budgets_for(self, pod: JsonObject) -> list[Stored]:
        labels = pod["metadata"].get("labels")
        return [
            pdb
            for pdb in self.store.namespaced_objects(Resource.PODDISRUPTIONBUDGETS, pod["metadata"]["namespace"])
            if (selector := _pdb_selector(pdb.obj)) is not None and selector.matches(labels)
        ]

    def _on_change(self, change: Change) -> None:
        if change.rt.resource is Resource.PODDISRUPTIONBUDGETS:
            if change.type is not EventType.DELETED and (
                change.old is None or change.old.obj.get("spec") != change.new.obj.get("spec")
            ):
                self._refresh(change.new)
        elif change.rt.resource is Resource.PODS:
            affected = {
                pdb.obj["metadata"]["name"]: pdb
                for pod in (change.old, change.new)
                if pod is not None
                for pdb in self.budgets_for(pod.obj)
            }
            for pdb in affected.values():
                self._refresh(pdb)

    def _refresh(self, stored: Stored) -> None:
        meta = stored.obj["metadata"]
        current = self.store.get_stored(Resource.PODDISRUPTIONBUDGETS, meta["name"], meta["namespace"])
        budget = self.budget(current.obj)
        new = current.copy()
        new["status"] = self._status(current.obj, budget)
        self.store.commit_update(RESOURCE_TYPES[Resource.PODDISRUPTIONBUDGETS], current, new)

    def _status(self, pdb: JsonObject, budget: Budget) -> JsonObject:
        generation = pdb["metadata"].get("generation", 1)
        allowed = budget.allowed > 0
        old = next(
            (c for c in pdb.get("status", {}).get("conditions") or [] if c.get("type") == "DisruptionAllowed"), None
        )
        flag = "True" if allowed else "False"
        condition = {
            "type": "DisruptionAllowed",
            "status": flag,
            "observedGeneration": generation,
            "reason": "SufficientPods" if allowed else "InsufficientPods",
            "message": "",
            "lastTransitionTime": old["lastTransitionTime"] if old and old.get("status") == flag else self.store.now(),
        }
        return {
            "observedGeneration": generation,
            "disruptionsAllowed": budget.allowed,
            "currentHealthy": budget.healthy,
            "desiredHealthy": budget.desired,
            "expectedPods": budget.expected,
            "conditions": [condition],
        }

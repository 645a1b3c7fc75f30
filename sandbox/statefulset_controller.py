"""The StatefulSet controller of the sandbox (a built-in kind the operators build on).

**StatefulSet** (apps/v1, kube-controller-manager 1.30; the sandbox had none): pods
``<sts>-<ordinal>`` for ``spec.ordinals.start`` .. ``+replicas``, ``hostname`` the pod name and
``subdomain`` the ``serviceName``, labels ``controller-revision-hash: <sts>-<hash>``,
``statefulset.kubernetes.io/pod-name``, ``apps.kubernetes.io/pod-index``; ``OrderedReady``
creates one at a time once the lower ordinals are Running and Ready, ``Parallel`` all at once; a
terminal pod is deleted and created again; status ``replicas``, ``readyReplicas``,
``currentReplicas``, ``updatedReplicas``, ``availableReplicas``, revisions. Mutating admission
webhooks (the LWS pod webhook) are modelled as :attr:`StatefulSetController.mutators`.
``volumeClaimTemplates`` give each pod its claims ``<template>-<sts>-<ordinal>``
(:func:`usher.sandbox.pod_claims.statefulset_claims`; kept when the pod or set goes: ``Retain``).

What the operators share, and what none models, is in :mod:`.operator_base` and :mod:`.operators`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .kinds import RESOURCE_TYPES, Resource
from .nodefit import controller_ref, is_terminal
from .parts import Host
from .operator_base import deleting, labels_of, live, pod_from_template
from .pod_claims import statefulset_claims
from .store import ApiError, Change, Stored
from .workloads import OwnerPart, owner_reference, pod_ready, template_hash

JsonObject = dict[str, Any]

POD_RT = RESOURCE_TYPES[Resource.PODS]
STS_RT = RESOURCE_TYPES[Resource.STATEFULSETS]


# ====================================================================== StatefulSet


def _ordinal(sts_name: str, pod: JsonObject) -> int | None:
    prefix, _, tail = pod["metadata"]["name"].rpartition("-")
    return int(tail) if prefix == sts_name and tail.isdigit() else None


class StatefulSetController(OwnerPart):
    """A minimal StatefulSet controller: stable pod names, ordinals, hostname and subdomain."""

    resources = (Resource.STATEFULSETS, Resource.PODS)
    owner_rt = STS_RT

    def __init__(self, mgr: Host) -> None:
        super().__init__(mgr)
        self.mutators: list[Callable[[JsonObject, JsonObject], None]] = []
        """``fn(statefulset, pod)`` run on every pod before it is created: mutating admission webhooks."""

    def on_change(self, change: Change) -> None:
        ref = controller_ref(change.new.obj) or {}
        if change.rt.key == STS_RT.key or (change.rt.key == POD_RT.key and ref.get("kind") == "StatefulSet"):
            self._dirty = True

    def sync_one(self, stored: Stored) -> None:
        sts = stored.obj
        spec = sts.get("spec") or {}
        name = sts["metadata"]["name"]
        replicas = int(spec.get("replicas", 1))
        start = int((spec.get("ordinals") or {}).get("start") or 0)
        parallel = spec.get("podManagementPolicy") == "Parallel"
        revision = f"{name}-{template_hash(spec.get('template') or {})}"
        pods: dict[int, Stored] = {}
        for s in self.owned(sts):
            ordinal = _ordinal(name, s.obj)
            if ordinal is not None:
                pods[ordinal] = s
        wanted = range(start, start + replicas)
        for ordinal, s in sorted(pods.items()):
            if ordinal not in wanted or (is_terminal(s.obj) and not deleting(s.obj)):
                self.delete(POD_RT, s)  # out of range, or ended: deleted, and created again once gone
        for ordinal in wanted:
            s = pods.get(ordinal)
            if s is None:
                self._create(sts, ordinal, revision)
                if not parallel:
                    break
            elif not parallel and not (live(s.obj) and pod_ready(s.obj)):
                break
        current = [s.obj for s in self.owned(sts) if not deleting(s.obj)]
        ready = sum(1 for p in current if live(p) and pod_ready(p))
        updated = sum(1 for p in current if labels_of(p).get("controller-revision-hash") == revision)
        status = {
            "observedGeneration": sts["metadata"].get("generation", 1),
            "replicas": len(current),
            "readyReplicas": ready,
            "currentReplicas": updated,
            "updatedReplicas": updated,
            "availableReplicas": ready,
            "currentRevision": revision,
            "updateRevision": revision,
            "collisionCount": 0,
        }
        if status != (sts.get("status") or {}):
            self.write_status(STS_RT, stored, status)

    def _create(self, sts: JsonObject, ordinal: int, revision: str) -> None:
        spec = sts.get("spec") or {}
        name, ns = sts["metadata"]["name"], sts["metadata"].get("namespace", "default")
        pod_name = f"{name}-{ordinal}"
        pod = pod_from_template(spec.get("template") or {}, ns, owner_reference(sts, STS_RT), name=pod_name, labels={
            "controller-revision-hash": revision,
            "statefulset.kubernetes.io/pod-name": pod_name,
            "apps.kubernetes.io/pod-index": str(ordinal),
        })
        pod["spec"]["hostname"] = pod_name
        if spec.get("serviceName"):
            pod["spec"]["subdomain"] = spec["serviceName"]
        statefulset_claims(self.store, sts, pod, ordinal)
        for mutate in self.mutators:
            mutate(sts, pod)
        try:
            self.store.create_stored(POD_RT, pod, ns)
        except ApiError:
            pass  # the name is still taken by a pod on its way out

"""The storage side of usher's caches: informer events in, each pod's volume fit out.

The controller feeds this index the objects its storage informers deliver (claims, volumes,
classes, CSIStorageCapacities, CSINodes, CSIDrivers) and every pod it sees (``pod_changed``:
which claims the pod uses, and where it runs, for ReadWriteOncePod, Multi-Attach and attach
limits). The mirror asks ``fit`` for a waiting pod: the nodes its volumes allow and why not the
others. A result is kept until the storage or the nodes change (``Storage.version``, the
caller's node version), so a cycle over a backlog of pods costs one dictionary lookup per pod.
A pod without claims is not kept at all: its events cost a look at ``spec.volumes``, and its
fit is ``FREE``.

A gang's PreBind that found its pods together over a CSI driver's attach limit on a node
(``crowd``) takes that node out of the fit of the pod that went over, so the gang's next
placement puts it elsewhere; the mark goes when the pod binds or goes.

Pure: the index does no I/O, and reads only what the informers gave it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..constraints import NodeLike
from .fit import FREE, NO_CLAIMS, PodClaims, Storage, VolumeFit, fit_nodes, sort_claims
from .reasons import VolumeReason
from .model import (PodVolume, parse_capacity, parse_claim, parse_class, parse_csidriver, parse_csinode, parse_volume,
                    pod_volumes)


class StorageKind(StrEnum):
    """The storage resources usher watches (their plural names, as RBAC names them)."""

    CLAIMS = "persistentvolumeclaims"
    VOLUMES = "persistentvolumes"
    CLASSES = "storageclasses"
    CAPACITIES = "csistoragecapacities"
    CSINODES = "csinodes"
    DRIVERS = "csidrivers"


#: where each kind is listed and watched, across all namespaces
PATHS: dict[StorageKind, str] = {
    StorageKind.CLAIMS: "/api/v1/persistentvolumeclaims",
    StorageKind.VOLUMES: "/api/v1/persistentvolumes",
    StorageKind.CLASSES: "/apis/storage.k8s.io/v1/storageclasses",
    StorageKind.CAPACITIES: "/apis/storage.k8s.io/v1/csistoragecapacities",
    StorageKind.CSINODES: "/apis/storage.k8s.io/v1/csinodes",
    StorageKind.DRIVERS: "/apis/storage.k8s.io/v1/csidrivers",
}

#: the API group of each kind (``""``: core), for the RBAC list
GROUPS: dict[StorageKind, str] = {
    StorageKind.CLAIMS: "",
    StorageKind.VOLUMES: "",
    StorageKind.CLASSES: "storage.k8s.io",
    StorageKind.CAPACITIES: "storage.k8s.io",
    StorageKind.CSINODES: "storage.k8s.io",
    StorageKind.DRIVERS: "storage.k8s.io",
}


@dataclass(slots=True)
class _Pod:
    uid: str
    volumes: tuple[PodVolume, ...]
    node: str | None


@dataclass(slots=True)
class VolumeIndex:
    storage: Storage = field(default_factory=Storage)
    pods: dict[str, _Pod] = field(default_factory=dict)
    #: pods whose volumes usher cannot read: the field paths and what is wrong
    problems: dict[str, list[str]] = field(default_factory=dict)
    _fits: dict[str, tuple[int, int, VolumeFit]] = field(default_factory=dict)
    #: what the volume problems of each volume are (a PersistentVolume usher cannot read)
    volume_problems: dict[str, list[str]] = field(default_factory=dict)
    #: pod key -> nodes where its gang's pods together went over an attach limit (``crowd``)
    crowded: dict[str, dict[str, str]] = field(default_factory=dict)

    def crowd(self, pod: str, node: str, claim: str) -> None:
        """Keep ``pod`` off ``node``: placed there with others of its gang, ``claim`` took a CSI
        driver past its attach limit."""
        self.crowded.setdefault(pod, {})[node] = claim
        self._fits.pop(pod, None)
        self.storage.changed()

    def object_changed(self, kind: StorageKind, key: str, obj: Mapping[str, Any] | None) -> None:
        """One informer event: ``obj`` is the object as it is now, None when it was deleted."""
        s = self.storage
        if kind == StorageKind.CLAIMS:
            _put(s.claims, key, parse_claim(obj) if obj is not None else None)
        elif kind == StorageKind.VOLUMES:
            if obj is None:
                _put(s.volumes, key, None)
                self.volume_problems.pop(key, None)
            else:
                volume, problems = parse_volume(obj)
                _put(s.volumes, key, volume)
                if problems:
                    self.volume_problems[key] = problems
                else:
                    self.volume_problems.pop(key, None)
        elif kind == StorageKind.CLASSES:
            _put(s.classes, key, parse_class(obj) if obj is not None else None)
        elif kind == StorageKind.CAPACITIES:
            _put(s.capacities, key, parse_capacity(obj) if obj is not None else None)
        elif kind == StorageKind.CSINODES:
            if obj is None:
                s.limits.pop(key, None)
            else:
                node, limits = parse_csinode(obj)
                s.limits[node or key] = limits
        elif kind == StorageKind.DRIVERS:
            if obj is None:
                s.drivers.pop(key, None)
            else:
                name, checked = parse_csidriver(obj)
                s.drivers[name or key] = checked
        s.changed()

    def pod_changed(self, key: str, obj: Mapping[str, Any] | None, live: bool = True) -> bool:
        """A pod as the informers see it (None or not ``live``: gone, or ended). True when the
        use of some claim changed (which pods use it, or where): other pods' fits may change."""
        known = self.pods.get(key)
        if known is None and key not in self.problems and (
                obj is None or not live or not (obj.get("spec") or {}).get("volumes")):
            return False  # a pod without volumes, as most are: nothing to keep
        if obj is None or not live or (obj.get("spec") or {}).get("nodeName"):
            self.crowded.pop(key, None)
        if obj is None or not live:
            self.problems.pop(key, None)
            if known is not None:
                del self.pods[key]
                self._fits.pop(key, None)
                if known.volumes:
                    self.storage.set_use(key, None, ())
                    return True
            return False
        volumes, problems = pod_volumes(obj)
        if problems:
            self.problems[key] = problems
        else:
            self.problems.pop(key, None)
        if not volumes and known is None:
            return False  # volumes, but none from a claim (a ServiceAccount's token, a ConfigMap)
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        node = (obj.get("spec") or {}).get("nodeName") or None
        pod = _Pod(uid, volumes, node)
        if known == pod:
            return False
        self.pods[key] = pod
        self._fits.pop(key, None)
        if volumes or (known is not None and known.volumes):
            namespace = key.split("/", 1)[0]
            self.storage.set_use(key, node, (f"{namespace}/{v.claim}" for v in volumes))
            return True
        return False

    def claims_of(self, key: str) -> PodClaims:
        """The pod's claims, sorted as kube-scheduler's PreFilter does."""
        pod = self.pods.get(key)
        if pod is None or not pod.volumes:
            return NO_CLAIMS
        return sort_claims(key, pod.uid, pod.volumes, self.storage)

    def claim_keys(self, key: str) -> tuple[str, ...]:
        pod = self.pods.get(key)
        if pod is None:
            return ()
        namespace = key.split("/", 1)[0]
        return tuple(dict.fromkeys(f"{namespace}/{v.claim}" for v in pod.volumes))

    def fit(self, key: str, nodes: Iterable[NodeLike], nodes_version: int) -> VolumeFit:
        """Which of ``nodes`` the pod's volumes allow (``FREE``: all of them)."""
        pod = self.pods.get(key)
        if pod is None or not pod.volumes:
            return FREE
        known = self._fits.get(key)
        if known is not None and known[0] == self.storage.version and known[1] == nodes_version:
            return known[2]
        nodes = list(nodes)
        result = fit_nodes(self.claims_of(key), nodes, self.storage)
        crowded = self.crowded.get(key)
        if crowded:
            names = [n.name for n in nodes if n.name in crowded and (result.eligible is None or n.name in result.eligible)]
            if names:  # a fit of its own (FREE is shared)
                allowed = result.eligible if result.eligible is not None else frozenset(n.name for n in nodes)
                excluded = result.excluded.copy()
                excluded[VolumeReason.ATTACH_LIMIT] += len(names)
                result = VolumeFit(allowed - frozenset(names), result.blockers, excluded,
                                   {VolumeReason.ATTACH_LIMIT: crowded[names[0]], **result.claims})
        self._fits[key] = (self.storage.version, nodes_version, result)
        return result


def _put(into: dict[str, Any], key: str, value: Any) -> None:
    if value is None:
        into.pop(key, None)
    else:
        into[key] = value

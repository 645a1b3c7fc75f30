"""The storage objects usher reads, parsed once into plain records: claims, volumes, classes.

usher places a pod by its volumes the way kube-scheduler's VolumeBinding, VolumeZone,
VolumeRestrictions and NodeVolumeLimits plugins do; those rules (``fit``, ``gang``) work on the
records here, never on raw API objects, so a field is read (and its absence defaulted) in one
place. Parsing never raises: the API server has validated what it stores, and whatever usher
still cannot read becomes a problem naming the field path, as a pod's unreadable constraints do.

Read as Kubernetes reads them:

- a pod's claims: ``spec.volumes[].persistentVolumeClaim.claimName``, and for a generic
  ephemeral volume (``ephemeral.volumeClaimTemplate``) the claim ``<pod>-<volume>`` that the
  ephemeral volume controller creates, owned by the pod;
- a claim's class: ``spec.storageClassName``, else the beta annotation; neither: the class ``""``
  (the DefaultStorageClass admission plugin has already written the default class into a claim
  made while one existed), which binds only to volumes without a class, and immediately;
- a claim is fully bound when it names its volume and carries ``pv.kubernetes.io/bind-completed``
  (the PV controller's mark), or its status says ``Bound``;
- a volume's node affinity (``spec.nodeAffinity.required``) by the node-selector rules of
  ``constraints``, and its zone and region labels as VolumeZone reads them (a value may list
  several zones joined by ``__``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ....scenario.quantity import parse_memory
from ....selectors import LabelSelector, label_selector_or_nothing
from ..constraints import Term, parse_node_selector


class AccessMode(StrEnum):
    RWO = "ReadWriteOnce"
    ROX = "ReadOnlyMany"
    RWX = "ReadWriteMany"
    RWOP = "ReadWriteOncePod"


class BindingMode(StrEnum):
    IMMEDIATE = "Immediate"
    WAIT = "WaitForFirstConsumer"


class VolumeMode(StrEnum):
    FILESYSTEM = "Filesystem"
    BLOCK = "Block"


class Source(StrEnum):
    """Where a pod's volume gets its claim."""

    CLAIM = "persistentVolumeClaim"
    EPHEMERAL = "ephemeral"


class Known(StrEnum):
    """The storage annotations and labels Kubernetes components write and read."""

    SELECTED_NODE = "volume.kubernetes.io/selected-node"
    BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
    BETA_CLASS = "volume.beta.kubernetes.io/storage-class"
    DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
    #: the provisioner of classes whose volumes are made by hand (local volumes)
    NO_PROVISIONER = "kubernetes.io/no-provisioner"


#: the labels VolumeZone compares between a bound volume and a node
ZONE_LABELS = (
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
)
#: how a volume's zone label lists several zones
ZONE_SEPARATOR = "__"



@dataclass(slots=True, frozen=True)
class PodVolume:
    """One volume of a pod that is backed by a claim."""

    volume: str
    claim: str
    source: Source


@dataclass(slots=True, frozen=True)
class Claim:
    """A PersistentVolumeClaim."""

    namespace: str
    name: str
    uid: str = ""
    class_name: str = ""
    access_modes: frozenset[AccessMode] = frozenset()
    request: int = 0
    volume_mode: VolumeMode = VolumeMode.FILESYSTEM
    selector: LabelSelector | None = None
    volume_name: str = ""
    selected_node: str | None = None
    bind_completed: bool = False
    phase: str = "Pending"
    owner_uids: frozenset[str] = frozenset()
    deleting: bool = False
    #: ``metadata.resourceVersion`` as a number (0: unknown), to tell a cache older than a write
    version: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def bound(self) -> bool:
        """Fully bound: kube-scheduler waits for this before it binds a pod."""
        return bool(self.volume_name) and (self.bind_completed or self.phase == "Bound")

    @property
    def single_node(self) -> bool:
        """Whether every pod using it must share one node (no ``ReadWriteMany``/``ReadOnlyMany``)."""
        return not (self.access_modes & {AccessMode.RWX, AccessMode.ROX})


@dataclass(slots=True, frozen=True)
class Volume:
    """A PersistentVolume."""

    name: str
    class_name: str = ""
    capacity: int = 0
    access_modes: frozenset[AccessMode] = frozenset()
    volume_mode: VolumeMode = VolumeMode.FILESYSTEM
    #: ``spec.nodeAffinity.required`` terms (ORed); None: any node
    terms: tuple[Term, ...] | None = None
    labels: tuple[tuple[str, str], ...] = ()
    #: ``spec.claimRef`` as (namespace, name, uid); None: not claimed
    claim_ref: tuple[str, str, str] | None = None
    phase: str = "Available"
    #: ``spec.csi.driver``: whose attach limit it counts against
    driver: str | None = None
    deleting: bool = False

    def fits(self, name: str, labels: Mapping[str, str]) -> bool:
        """Whether a pod on this node can use it: its node affinity and its zone labels."""
        if self.terms is not None and not any(t.matches(name, labels) for t in self.terms):
            return False
        for key, value in self.labels:
            if key in ZONE_LABELS and labels.get(key) not in value.split(ZONE_SEPARATOR):
                return False
        return True

    def where(self) -> str:
        """Where it may be used, in words (``node gpu-01``, ``topology.kubernetes.io/zone in (a)``)."""
        parts = []
        for term in self.terms or ():
            words = [f"{r.key} {r.operator} ({', '.join(r.values)})" for r in term.expressions]
            words += [f"node {' or '.join(r.values)}" for r in term.fields]
            parts.append(" and ".join(words))
        parts += [f"{k}={v}" for k, v in self.labels if k in ZONE_LABELS]
        return " or ".join(p for p in parts if p) or "any node"


@dataclass(slots=True, frozen=True)
class StorageClass:
    name: str
    provisioner: str = ""
    binding_mode: BindingMode = BindingMode.IMMEDIATE
    #: ``allowedTopologies``: terms ORed, each a conjunction of ``(label, allowed values)``
    allowed: tuple[tuple[tuple[str, frozenset[str]], ...], ...] = ()
    default: bool = False

    @property
    def provisions(self) -> bool:
        return bool(self.provisioner) and self.provisioner != Known.NO_PROVISIONER

    def allows(self, labels: Mapping[str, str]) -> bool:
        """Whether the class may provision for a node with ``labels`` (no topologies: anywhere)."""
        if not self.allowed:
            return True
        return any(all(labels.get(k) in values for k, values in term) for term in self.allowed)


@dataclass(slots=True, frozen=True)
class Capacity:
    """A CSIStorageCapacity: room for new volumes of a class, on the nodes its topology selects."""

    name: str
    class_name: str
    topology: LabelSelector | None
    capacity: int | None = None
    maximum: int | None = None

    def room(self) -> int | None:
        """The largest volume it says fits (``maximumVolumeSize`` when given, as kube-scheduler)."""
        return self.maximum if self.maximum is not None else self.capacity

    def serves(self, labels: Mapping[str, str]) -> bool:
        return self.topology is not None and _selects(self.topology, labels)


def _selects(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    return selector.selects(labels)


# -- parsing ------------------------------------------------------------------------------


def pod_volumes(pod: Mapping[str, Any]) -> tuple[tuple[PodVolume, ...], list[str]]:
    """The claim-backed volumes of a pod, and the problems found (field paths)."""
    problems: list[str] = []
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    raw = spec.get("volumes") if isinstance(spec, Mapping) else None
    if not isinstance(raw, list):
        return (), problems
    name = str((pod.get("metadata") or {}).get("name") or "")
    out = []
    for i, vol in enumerate(raw):
        if not isinstance(vol, Mapping):
            continue
        path = f"spec.volumes[{i}]"
        vname = vol.get("name")
        pvc = vol.get(Source.CLAIM)
        if pvc is not None:
            claim = pvc.get("claimName") if isinstance(pvc, Mapping) else None
            if not isinstance(claim, str) or not claim:
                problems.append(f"{path}.persistentVolumeClaim.claimName: expected a claim's name, got {claim!r}")
                continue
            out.append(PodVolume(str(vname), claim, Source.CLAIM))
        elif vol.get(Source.EPHEMERAL) is not None:
            template = vol[Source.EPHEMERAL].get("volumeClaimTemplate") if isinstance(vol[Source.EPHEMERAL], Mapping) else None
            if not isinstance(template, Mapping):
                problems.append(f"{path}.ephemeral.volumeClaimTemplate: expected a claim template")
                continue
            out.append(PodVolume(str(vname), f"{name}-{vname}", Source.EPHEMERAL))
    return tuple(out), problems


def parse_claim(obj: Mapping[str, Any]) -> Claim:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    notes = meta.get("annotations") or {}
    klass = spec.get("storageClassName")
    if klass is None:
        klass = notes.get(Known.BETA_CLASS, "")
    requests = (spec.get("resources") or {}).get("requests") or {}
    return Claim(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        class_name=str(klass or ""),
        access_modes=_modes(spec.get("accessModes")),
        request=_bytes(requests.get("storage")),
        volume_mode=_mode(spec.get("volumeMode")),
        selector=label_selector_or_nothing(spec.get("selector")),
        volume_name=str(spec.get("volumeName") or ""),
        selected_node=notes.get(Known.SELECTED_NODE) or None,
        bind_completed=Known.BIND_COMPLETED in notes,
        phase=str((obj.get("status") or {}).get("phase") or "Pending"),
        owner_uids=frozenset(str(o.get("uid")) for o in meta.get("ownerReferences") or [] if isinstance(o, Mapping)),
        deleting=bool(meta.get("deletionTimestamp")),
        version=resource_version(meta.get("resourceVersion")),
    )


def resource_version(raw: Any) -> int:
    """A resourceVersion as kube-scheduler compares them (etcd's revision, a number)."""
    try:
        return int(str(raw))
    except ValueError:
        return 0


def parse_volume(obj: Mapping[str, Any]) -> tuple[Volume, list[str]]:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    klass = spec.get("storageClassName")
    if klass is None:
        klass = (meta.get("annotations") or {}).get(Known.BETA_CLASS, "")
    affinity = spec.get("nodeAffinity") or {}
    terms, problems = parse_node_selector(affinity.get("required") if isinstance(affinity, Mapping) else None,
                                          "spec.nodeAffinity.required")
    ref = spec.get("claimRef")
    claim_ref = None
    if isinstance(ref, Mapping) and ref.get("name"):
        claim_ref = (str(ref.get("namespace") or ""), str(ref["name"]), str(ref.get("uid") or ""))
    csi = spec.get("csi")
    labels = meta.get("labels") or {}
    return Volume(
        name=str(meta.get("name") or ""),
        class_name=str(klass or ""),
        capacity=_bytes((spec.get("capacity") or {}).get("storage")),
        access_modes=_modes(spec.get("accessModes")),
        volume_mode=_mode(spec.get("volumeMode")),
        terms=terms,
        labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
        claim_ref=claim_ref,
        phase=str((obj.get("status") or {}).get("phase") or "Available"),
        driver=str(csi["driver"]) if isinstance(csi, Mapping) and csi.get("driver") else None,
        deleting=bool(meta.get("deletionTimestamp")),
    ), problems


def parse_class(obj: Mapping[str, Any]) -> StorageClass:
    meta = obj.get("metadata") or {}
    terms = []
    for term in obj.get("allowedTopologies") or []:
        exprs = term.get("matchLabelExpressions") if isinstance(term, Mapping) else None
        terms.append(tuple(
            (str(e.get("key")), frozenset(str(v) for v in e.get("values") or []))
            for e in exprs or [] if isinstance(e, Mapping)
        ))
    mode = obj.get("volumeBindingMode")
    return StorageClass(
        name=str(meta.get("name") or ""),
        provisioner=str(obj.get("provisioner") or ""),
        binding_mode=BindingMode.WAIT if mode == BindingMode.WAIT else BindingMode.IMMEDIATE,
        allowed=tuple(terms),
        default=str((meta.get("annotations") or {}).get(Known.DEFAULT_CLASS, "")).lower() == "true",
    )


def parse_capacity(obj: Mapping[str, Any]) -> Capacity:
    meta = obj.get("metadata") or {}
    maximum = obj.get("maximumVolumeSize")
    capacity = obj.get("capacity")
    return Capacity(
        name=f"{meta.get('namespace') or ''}/{meta.get('name') or ''}",
        class_name=str(obj.get("storageClassName") or ""),
        topology=label_selector_or_nothing(obj.get("nodeTopology")),
        capacity=_bytes(capacity) if capacity is not None else None,
        maximum=_bytes(maximum) if maximum is not None else None,
    )


def parse_csinode(obj: Mapping[str, Any]) -> tuple[str, dict[str, int | None]]:
    """A CSINode's node name and each driver's attach limit (None: no limit given)."""
    limits: dict[str, int | None] = {}
    for driver in (obj.get("spec") or {}).get("drivers") or []:
        if not isinstance(driver, Mapping) or not driver.get("name"):
            continue
        count = (driver.get("allocatable") or {}).get("count")
        limits[str(driver["name"])] = count if isinstance(count, int) and not isinstance(count, bool) else None
    return str((obj.get("metadata") or {}).get("name") or ""), limits


def parse_csidriver(obj: Mapping[str, Any]) -> tuple[str, bool]:
    """A CSIDriver's name and whether it asks schedulers to check its storage capacity
    (``spec.storageCapacity``; absent: false, the API server's default)."""
    spec = obj.get("spec") or {}
    return str((obj.get("metadata") or {}).get("name") or ""), spec.get("storageCapacity") is True


def _modes(raw: Any) -> frozenset[AccessMode]:
    known = {m.value for m in AccessMode}
    return frozenset(AccessMode(m) for m in raw or [] if m in known)


def _mode(raw: Any) -> VolumeMode:
    return VolumeMode.BLOCK if raw == VolumeMode.BLOCK else VolumeMode.FILESYSTEM


def _bytes(raw: Any) -> int:
    if raw is None:
        return 0
    try:
        return parse_memory(raw if isinstance(raw, int | float) else str(raw))
    except ValueError:
        return 0

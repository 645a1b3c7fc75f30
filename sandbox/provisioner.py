"""The external provisioner of the sandbox's CSI drivers: what makes a volume for a claim.

On a cluster each CSI driver runs ``external-provisioner`` beside it: it watches claims the PV
controller annotated ``volume.kubernetes.io/storage-provisioner: <driver>``, calls the driver's
``CreateVolume`` and writes a PersistentVolume pre-bound to the claim (``claimRef`` with the
claim's uid), which the PV controller then binds. This stand-in does that for two drivers:

- :data:`LOCAL_DRIVER` makes node-local volumes: the volume's node affinity is the node's
  ``kubernetes.io/hostname`` (a local disk, as local-path or TopoLVM make);
- :data:`ZONAL_DRIVER` makes zonal volumes: node affinity ``topology.kubernetes.io/zone`` (a
  cloud disk, as the EBS or PD drivers make).

As external-provisioner does, a claim of a ``WaitForFirstConsumer`` class is provisioned only
once ``volume.kubernetes.io/selected-node`` is set, on that node's topology (refused if outside
the class's ``allowedTopologies``); an ``Immediate`` claim goes to the first allowed topology.
Events on the claim: ``Provisioning`` ("External provisioner is provisioning volume for claim
"ns/name""), ``ProvisioningSucceeded`` ("Successfully provisioned volume pvc-<uid>") and
``ProvisioningFailed`` ("failed to provision volume with StorageClass "sc": rpc error: code =
<code> desc = <message>"). A ``ResourceExhausted`` failure of a claim with a selected node is
final for that node: the annotation is removed, so the scheduler picks again (external-provisioner's
``ProvisioningReschedule``); any other failure is retried with backoff (1 s, doubling, at most
300 s). A released volume of reclaim policy ``Delete`` is deleted. A bound claim of a class with
``allowVolumeExpansion`` that asks for more is expanded at once (external-resizer and the
kubelet's resize in one step: the volume's capacity, then the claim's ``status.capacity``).

Knobs, in the StorageClass's ``parameters`` (what a driver is configured by) or from Python:

- ``sandbox.usher/capacity``: the space of each topology segment (a node or a zone; default
  10Ti); a claim larger than what is left fails ``ResourceExhausted``, and the remaining
  capacity is published as a CSIStorageCapacity per class and segment in ``kube-system`` (the
  drivers' CSIDrivers say ``storageCapacity: true``, so schedulers read them);
- ``sandbox.usher/fail``: every provisioning of the class fails with this message
  (``sandbox.usher/fail-code``: the gRPC code, default ``ResourceExhausted``);
- ``sandbox.usher/delay``: provisioning takes this long (``30s``, ``2m``) on the store's clock;
- :meth:`Provisioner.fail` makes the next provisioning(s) of one claim fail;
- ``sandbox.usher/csi-attach-limit`` on a Node: its CSINode's ``allocatable.count`` for both
  drivers (each node's CSINode is written here, as the drivers' node-driver-registrar does).

Claims of other provisioners are left alone (as on a cluster where that driver is not running:
they wait, with the PV controller's ``ExternalProvisioning`` event).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from usher.engine.scenario.quantity import parse_duration

from .events import EventType, record
from .kinds import RESOURCE_TYPES, Resource
from .nodefit import topology_terms_match
from .parts import Host, Part
from .storage import (
    Annotation,
    BindingMode,
    ClaimPhase,
    ReclaimPolicy,
    VolumePhase,
    binary_quantity,
    storage_request,
    to_bytes,
)
from .store import ApiError, Change, EventType as ChangeType, Store, Stored

JsonObject = dict[str, Any]

LOCAL_DRIVER = "local.csi.sandbox.usher"
ZONAL_DRIVER = "zonal.csi.sandbox.usher"
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
TOPOLOGY_KEYS = {LOCAL_DRIVER: HOSTNAME, ZONAL_DRIVER: ZONE}
"""Each driver's topology key: what its volumes' node affinity names."""
FINALIZER = "external-provisioner.volume.kubernetes.io/finalizer"
CAPACITY_NAMESPACE = "kube-system"

PVC_RT = RESOURCE_TYPES[Resource.PERSISTENTVOLUMECLAIMS]
PV_RT = RESOURCE_TYPES[Resource.PERSISTENTVOLUMES]
SC_RT = RESOURCE_TYPES[Resource.STORAGECLASSES]
CAP_RT = RESOURCE_TYPES[Resource.CSISTORAGECAPACITIES]
NODE_RT = RESOURCE_TYPES[Resource.NODES]
CSINODE_RT = RESOURCE_TYPES[Resource.CSINODES]
ATTACH_LIMIT = "sandbox.usher/csi-attach-limit"
DEFAULT_CAPACITY = "10Ti"
"""Each topology segment's space when the class does not say (``sandbox.usher/capacity``)."""


class Param(StrEnum):
    CAPACITY = "sandbox.usher/capacity"
    FAIL = "sandbox.usher/fail"
    FAIL_CODE = "sandbox.usher/fail-code"
    DELAY = "sandbox.usher/delay"


class RpcCode(StrEnum):
    """The gRPC codes a driver's CreateVolume answers that change what the provisioner does."""

    RESOURCE_EXHAUSTED = "ResourceExhausted"
    INVALID_ARGUMENT = "InvalidArgument"
    INTERNAL = "Internal"
    UNAVAILABLE = "Unavailable"


@dataclass(slots=True)
class Failure:
    message: str
    code: RpcCode
    times: int


class ProvisioningError(Exception):
    def __init__(self, code: RpcCode, message: str) -> None:
        super().__init__(f"rpc error: code = {code} desc = {message}")
        self.code = code


def _params(sc: JsonObject) -> dict[str, str]:
    return {str(k): str(v) for k, v in (sc.get("parameters") or {}).items()}


def segment_of(node: JsonObject, key: str) -> str | None:
    """A node's value of a topology key (its name for the hostname when unlabelled)."""
    labels = node["metadata"].get("labels") or {}
    if key == HOSTNAME:
        return labels.get(HOSTNAME, node["metadata"]["name"])
    return labels.get(key)


def _segments_of(pv: JsonObject) -> set[tuple[str, str]]:
    """The (topology key, value) pairs of one of our drivers' volumes, from its node affinity."""
    provisioner = (pv["metadata"].get("annotations") or {}).get(Annotation.PROVISIONED_BY)
    key = TOPOLOGY_KEYS.get(str(provisioner))
    if key is None:
        return set()
    spec = pv.get("spec") or {}
    return {(key, str(v)) for term in ((spec.get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms") or []
            for expr in term.get("matchExpressions") or [] if expr.get("key") == key and expr.get("operator") == "In"
            for v in expr.get("values") or []}


def _allowed(sc: JsonObject, node: JsonObject, key: str, value: str) -> bool:
    """Whether the class's ``allowedTopologies`` hold the node, by :func:`nodefit.topology_terms_match`
    (the scheduler's rule) on its labels with the driver's topology label (``value`` for ``key``),
    which a cluster's kubelet sets from the driver's node info."""
    return topology_terms_match(sc.get("allowedTopologies"), {**(node["metadata"].get("labels") or {}), key: value})


class Provisioner(Part):
    """external-provisioner for the sandbox's drivers (see the module docstring)."""

    resources = (Resource.PERSISTENTVOLUMECLAIMS, Resource.PERSISTENTVOLUMES, Resource.STORAGECLASSES, Resource.NODES)

    def __init__(self, mgr: Host) -> None:
        super().__init__(mgr)
        self.failures: dict[tuple[str, str], Failure] = {}
        self._first_seen: dict[str, tuple[str | None, float]] = {}
        """claim uid -> (the node it is provisioned for, when CreateVolume started)."""
        self._backoff: dict[str, tuple[float, float]] = {}
        """claim uid -> (next attempt, last backoff)."""
        self._told: dict[str, tuple[str, str]] = {}
        # what changed since the last sync: the work follows it (a node's status changing, which
        # happens all the time, costs nothing; a new node costs its CSINode and capacities)
        self._claims = self._topology = True
        self._nodes: set[str] | None = None
        """Nodes to register again (``None``: all)."""
        self._new_nodes: set[str] | None = set()
        """Nodes created since the last sync, whose capacities to publish."""
        self._segments: set[tuple[str, str]] = set()
        """(topology key, value) of the volumes changed since the last sync: their capacities change."""

    def resync(self) -> None:
        self._dirty = self._claims = self._topology = True
        self._nodes = None

    def fail(self, namespace: str, name: str, message: str, code: RpcCode = RpcCode.RESOURCE_EXHAUSTED, times: int = 1) -> None:
        """Make the next ``times`` provisionings of claim ``namespace/name`` fail with ``message``."""
        self.failures[(namespace, name)] = Failure(message, code, times)
        self._retry()

    def _retry(self) -> None:
        self._dirty = self._claims = True

    def on_change(self, change: Change) -> None:
        resource = change.rt.resource
        if resource == Resource.NODES:
            meta, old = change.new.obj["metadata"], change.old.obj["metadata"] if change.old else None
            if old is not None and change.type is not ChangeType.DELETED and all(
                    old.get(k) == meta.get(k) for k in ("labels", "annotations", "uid")):
                return
            if old is None and change.type is not ChangeType.DELETED and self._new_nodes is not None:
                self._new_nodes.add(meta["name"])  # a new node: its segments only
            elif (old or {}).get("labels") != meta.get("labels") or change.type is ChangeType.DELETED:
                self._topology = True  # segments may have gone: everything again
            if self._nodes is not None:
                self._nodes.add(meta["name"])
        elif resource == Resource.STORAGECLASSES:
            self._claims = self._topology = True
        elif resource == Resource.PERSISTENTVOLUMES:
            # a volume made, bound, released or gone changes what is left in its segment only
            self._claims = True
            for stored in (change.old, change.new):
                if stored is not None:
                    self._segments.update(_segments_of(stored.obj))
        elif resource == Resource.PERSISTENTVOLUMECLAIMS:
            self._claims = True
        else:
            return
        self._dirty = True

    # ------------------------------------------------------------------ the loop

    def sync(self) -> None:
        classes = {s.obj["metadata"]["name"]: s.obj for s in self.stored(SC_RT)}
        claims, topology, nodes, new_nodes = self._claims, self._topology, self._nodes, self._new_nodes
        self._claims, self._topology, self._nodes, self._new_nodes = False, False, set(), set()
        if claims:
            self._sync_claims(classes)
        segments, self._segments = self._segments, set()
        if topology:
            self._publish(classes, None)
        elif new_nodes or segments:
            self._publish(classes, set(new_nodes or ()) | self._nodes_in(segments))
        self._register(nodes)

    def _sync_claims(self, classes: dict[str, JsonObject]) -> None:
        for s in self.stored(PVC_RT):
            claim = s.obj
            provisioner = (claim["metadata"].get("annotations") or {}).get(Annotation.STORAGE_PROVISIONER)
            if provisioner not in TOPOLOGY_KEYS or claim["metadata"].get("deletionTimestamp"):
                continue
            if (claim.get("spec") or {}).get("volumeName") or (claim.get("status") or {}).get("phase") != ClaimPhase.PENDING:
                continue
            sc = classes.get((claim.get("spec") or {}).get("storageClassName") or "")
            if sc is None or sc.get("provisioner") != provisioner:
                continue
            ns, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
            self.mgr.guard(lambda ns=ns, name=name, sc=sc: self._provision(ns, name, sc))
        for s in self.stored(PV_RT):
            self.mgr.guard(lambda s=s: self._reclaim(s))
        for s in self.stored(PVC_RT):
            sc = classes.get((s.obj.get("spec") or {}).get("storageClassName") or "")
            if sc is not None and sc.get("provisioner") in TOPOLOGY_KEYS and sc.get("allowVolumeExpansion"):
                self.mgr.guard(lambda s=s: self._expand(s))

    def _register(self, names: set[str] | None) -> None:
        """node-driver-registrar's part: each node's CSINode lists both drivers, their topology key
        and, from the node annotation ``sandbox.usher/csi-attach-limit``, how many volumes attach."""
        if names is None:
            nodes = [s.obj for s in self.stored(NODE_RT)]
        else:
            nodes = [n for name in sorted(names) if (n := self._node(name)) is not None]
        for node in nodes:
            name = node["metadata"]["name"]
            limit = (node["metadata"].get("annotations") or {}).get(ATTACH_LIMIT)
            drivers = [{"name": d, "nodeID": name, "topologyKeys": [key],
                        **({"allocatable": {"count": int(limit)}} if limit and limit.isdigit() else {})}
                       for d, key in sorted(TOPOLOGY_KEYS.items())]
            want = {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
                    "metadata": {"name": name, "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name,
                                                                    "uid": node["metadata"]["uid"]}]},
                    "spec": {"drivers": drivers}}
            try:
                current = self.store.get_stored(CSINODE_RT, name)
            except ApiError:
                self.store.create(CSINODE_RT.resource, want)
                continue
            if (current.obj.get("spec") or {}) != want["spec"]:
                new = current.copy()
                new["spec"] = want["spec"]
                self.store.update_stored(CSINODE_RT, new, None)

    # ------------------------------------------------------------------ provisioning

    def _provision(self, ns: str, name: str, sc: JsonObject) -> None:
        try:
            stored = self.store.get_stored(PVC_RT, name, ns)
        except ApiError:
            return
        claim = stored.obj
        uid = claim["metadata"]["uid"]
        pv_name = f"pvc-{uid}"
        if self.store.exists(PV_RT, pv_name):
            return  # made already; the PV controller binds it
        selected = (claim["metadata"].get("annotations") or {}).get(Annotation.SELECTED_NODE)
        if sc.get("volumeBindingMode") == BindingMode.WAIT_FOR_FIRST_CONSUMER and not selected:
            if self._first_seen.pop(uid, None) is not None:  # the scheduler took its choice back: abandoned
                self._told.pop(uid, None)
            return
        now = self.mgr.now()
        params = _params(sc)
        retry_at = self._backoff.get(uid, (0.0, 0.0))[0]
        if now < retry_at:
            self.mgr.at(retry_at, ("provision", uid), self._retry)
            return
        provisioner = str(sc.get("provisioner"))
        if self._first_seen.get(uid, (None, 0.0))[0] != selected or uid not in self._first_seen:
            # CreateVolume starts (again, for another node): a slow driver answers ``delay`` later
            self._first_seen[uid] = (selected, now)
            self._tell(claim, EventType.NORMAL, "Provisioning", f'External provisioner is provisioning volume for claim "{ns}/{name}"', provisioner)
        delay = parse_duration(params[Param.DELAY]) if params.get(Param.DELAY) else 0.0
        started = self._first_seen[uid][1]
        if now < started + delay:
            self.mgr.at(started + delay, ("provision", uid), self._retry)
            return
        try:
            segment = self._segment(sc, provisioner, selected)
            self._check(ns, name, sc, params, provisioner, segment, storage_request(claim))
        except ProvisioningError as error:
            self._failed(stored, sc, provisioner, error, selected)
            return
        self._backoff.pop(uid, None)
        self._first_seen.pop(uid, None)
        self.store.create_stored(PV_RT, self._volume(claim, sc, provisioner, segment), None)
        self._tell(claim, EventType.NORMAL, "ProvisioningSucceeded", f"Successfully provisioned volume {pv_name}", provisioner)

    def _nodes_in(self, segments: set[tuple[str, str]]) -> set[str]:
        """The nodes of these segments (a hostname is its node; a zone, the nodes labelled so)."""
        names = {value for key, value in segments if key == HOSTNAME}
        zonal = {(key, value) for key, value in segments if key != HOSTNAME}
        if zonal:
            names.update(s.obj["metadata"]["name"] for s in self.stored(NODE_RT)
                         if any(segment_of(s.obj, key) == value for key, value in zonal))
        return names

    def _node(self, name: str) -> JsonObject | None:
        try:
            return self.store.get_stored(NODE_RT, name).obj
        except ApiError:
            return None

    def _segment(self, sc: JsonObject, provisioner: str, selected: str | None) -> str:
        key = TOPOLOGY_KEYS[provisioner]
        if selected:
            try:
                node = self.store.get_stored(NODE_RT, selected).obj
            except ApiError:
                raise ProvisioningError(RpcCode.RESOURCE_EXHAUSTED, f'failed to get target node: node "{selected}" not found') from None
            value = segment_of(node, key)
            if value is None:
                raise ProvisioningError(RpcCode.INVALID_ARGUMENT, f'node "{selected}" has no label {key}')
            if not _allowed(sc, node, key, value):
                raise ProvisioningError(RpcCode.INVALID_ARGUMENT, (
                    f'selected node "{selected}" topology {key}={value} is not in the allowed topologies of StorageClass '
                    f'"{sc["metadata"]["name"]}"'))
            return value
        values = sorted({v for s in self.stored(NODE_RT) if (v := segment_of(s.obj, key)) is not None and _allowed(sc, s.obj, key, v)})
        if not values:
            raise ProvisioningError(RpcCode.RESOURCE_EXHAUSTED, f"no node offers topology {key} allowed by the StorageClass")
        return values[0]

    def _check(self, ns: str, name: str, sc: JsonObject, params: dict[str, str], provisioner: str, segment: str, size: int) -> None:
        failure = self.failures.get((ns, name))
        if failure is not None:
            failure.times -= 1
            if failure.times <= 0:
                del self.failures[(ns, name)]
            raise ProvisioningError(failure.code, failure.message)
        if params.get(Param.FAIL):
            raise ProvisioningError(RpcCode(params.get(Param.FAIL_CODE, RpcCode.RESOURCE_EXHAUSTED)), params[Param.FAIL])
        left = to_bytes(params.get(Param.CAPACITY, DEFAULT_CAPACITY)) - self._usage().get((sc["metadata"]["name"], segment), 0)
        if size > left:
            raise ProvisioningError(RpcCode.RESOURCE_EXHAUSTED, (
                f"insufficient capacity in {TOPOLOGY_KEYS[provisioner]}={segment}: requested {size} bytes, {max(left, 0)} left"))

    def _failed(self, stored: Stored, sc: JsonObject, provisioner: str, error: ProvisioningError, selected: str | None) -> None:
        claim = stored.obj
        uid = claim["metadata"]["uid"]
        message = f'failed to provision volume with StorageClass "{sc["metadata"]["name"]}": {error}'
        self._tell(claim, EventType.WARNING, "ProvisioningFailed", message, provisioner)
        self._told.pop(uid, None)  # the next attempt is told again (the event's count grows)
        if error.code is RpcCode.RESOURCE_EXHAUSTED and selected:
            # final on this node: give the choice back to the scheduler
            self._first_seen.pop(uid, None)
            self._backoff.pop(uid, None)
            new = stored.copy()
            new["metadata"]["annotations"].pop(Annotation.SELECTED_NODE, None)
            self.store.update_stored(PVC_RT, new, claim["metadata"]["namespace"])
            return
        self._first_seen.pop(uid, None)
        _, last = self._backoff.get(uid, (0.0, 0.0))
        wait = min(300.0, last * 2 if last else 1.0)
        when = self.mgr.now() + wait
        self._backoff[uid] = (when, wait)
        self.mgr.at(when, ("provision", uid), self._retry)

    def _volume(self, claim: JsonObject, sc: JsonObject, provisioner: str, segment: str) -> JsonObject:
        meta, spec = claim["metadata"], claim.get("spec") or {}
        key = TOPOLOGY_KEYS[provisioner]
        return {
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {
                "name": f"pvc-{meta['uid']}",
                "annotations": {Annotation.PROVISIONED_BY.value: provisioner,
                                "volume.kubernetes.io/provisioner-deletion-secret-name": "",
                                "volume.kubernetes.io/provisioner-deletion-secret-namespace": ""},
                "finalizers": [FINALIZER],
            },
            "spec": {
                "accessModes": list(spec.get("accessModes") or []),
                "capacity": {"storage": (spec.get("resources") or {}).get("requests", {}).get("storage", "0")},
                "claimRef": {"kind": "PersistentVolumeClaim", "namespace": meta["namespace"], "name": meta["name"],
                             "uid": meta["uid"], "apiVersion": "v1", "resourceVersion": meta["resourceVersion"]},
                "csi": {"driver": provisioner, "volumeHandle": f"{segment}/pvc-{meta['uid']}", "fsType": "ext4",
                        "volumeAttributes": {"storage.kubernetes.io/csiProvisionerIdentity": f"{provisioner}-sandbox"}},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": key, "operator": "In", "values": [segment]}]}]}},
                "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy", ReclaimPolicy.DELETE.value),
                "storageClassName": sc["metadata"]["name"],
                "volumeMode": spec.get("volumeMode", "Filesystem"),
                **({"mountOptions": list(sc["mountOptions"])} if sc.get("mountOptions") else {}),
            },
        }

    # ------------------------------------------------------------------ capacity and deletion

    def _usage(self) -> dict[tuple[str, str], int]:
        """Bytes provisioned by our drivers, by (class, segment), in one pass over the volumes."""
        used: dict[tuple[str, str], int] = {}
        for s in self.stored(PV_RT):
            spec = s.obj.get("spec") or {}
            provisioner = (s.obj["metadata"].get("annotations") or {}).get(Annotation.PROVISIONED_BY)
            if provisioner not in TOPOLOGY_KEYS:
                continue
            for term in ((spec.get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms") or []:
                for expr in term.get("matchExpressions") or []:
                    if expr.get("key") == TOPOLOGY_KEYS[provisioner] and expr.get("operator") == "In":
                        for value in expr.get("values") or []:
                            key = (str(spec.get("storageClassName")), str(value))
                            used[key] = used.get(key, 0) + to_bytes((spec.get("capacity") or {}).get("storage"))
        return used

    def _publish(self, classes: dict[str, JsonObject], new_nodes: set[str] | None) -> None:
        """One CSIStorageCapacity per class of our drivers and per segment, kept current; with
        ``new_nodes``, only the segments of those nodes are added (nothing else changed)."""
        wanted: dict[str, JsonObject] = {}
        if new_nodes is None:
            nodes = [s.obj for s in self.stored(NODE_RT)]
        else:
            nodes = [n for name in sorted(new_nodes) if (n := self._node(name)) is not None]
        used = self._usage()
        for sc in classes.values():
            provisioner, params = sc.get("provisioner"), _params(sc)
            if provisioner not in TOPOLOGY_KEYS:
                continue
            key = TOPOLOGY_KEYS[str(provisioner)]
            class_name = sc["metadata"]["name"]
            for segment in sorted({v for n in nodes if (v := segment_of(n, key)) is not None and _allowed(sc, n, key, v)}):
                left = max(0, to_bytes(params.get(Param.CAPACITY, DEFAULT_CAPACITY)) - used.get((class_name, segment), 0))
                name = f"csisc-{class_name}-{segment}".lower().replace("_", "-")[:253]
                wanted[name] = {"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
                                "metadata": {"name": name, "namespace": CAPACITY_NAMESPACE,
                                             "labels": {"csi.storage.k8s.io/drivername": str(provisioner)}},
                                "storageClassName": class_name,
                                "nodeTopology": {"matchLabels": {key: segment}}, "capacity": binary_quantity(left)}
        if new_nodes is None:
            existing = [s for s in self.store.list(CAP_RT, CAPACITY_NAMESPACE, label_selector="csi.storage.k8s.io/drivername").items
                        if s.obj["metadata"]["labels"]["csi.storage.k8s.io/drivername"] in TOPOLOGY_KEYS]
        else:
            existing = [s for name in wanted if (s := self._capacity(name)) is not None]
        for s in existing:
            name = s.obj["metadata"]["name"]
            want = wanted.pop(name, None)
            if want is None:
                self.store.delete_stored(CAP_RT, name, CAPACITY_NAMESPACE)
            elif to_bytes(s.obj.get("capacity")) != to_bytes(want["capacity"]):
                new = s.copy()
                new["capacity"] = want["capacity"]
                self.store.update_stored(CAP_RT, new, CAPACITY_NAMESPACE)
        for want in wanted.values():
            self.store.create(CAP_RT.resource, want, CAPACITY_NAMESPACE)

    def _capacity(self, name: str) -> Stored | None:
        try:
            return self.store.get_stored(CAP_RT, name, CAPACITY_NAMESPACE)
        except ApiError:
            return None

    def _expand(self, stored: Stored) -> None:
        """external-resizer and the kubelet's filesystem resize, at once: a bound claim that asks
        for more gets it (the volume's capacity, then the claim's ``status.capacity``)."""
        claim = stored.obj
        status = claim.get("status") or {}
        wanted = storage_request(claim)
        if status.get("phase") != ClaimPhase.BOUND or wanted <= to_bytes((status.get("capacity") or {}).get("storage")):
            return
        try:
            pv = self.store.get_stored(PV_RT, claim["spec"]["volumeName"])
        except ApiError:
            return
        if to_bytes((pv.obj["spec"].get("capacity") or {}).get("storage")) < wanted:
            new_pv = pv.copy()
            new_pv["spec"]["capacity"] = {"storage": claim["spec"]["resources"]["requests"]["storage"]}
            self.store.update_stored(PV_RT, new_pv, None)
        new = stored.copy()
        new["status"]["capacity"] = {"storage": claim["spec"]["resources"]["requests"]["storage"]}
        self.store.update_stored(PVC_RT, new, claim["metadata"]["namespace"], subresource="status")
        self._tell(claim, EventType.NORMAL, "VolumeResizeSuccessful", f'resize volume "{pv.obj["metadata"]["name"]}" by resizer "{pv.obj["spec"]["csi"]["driver"]}" finished successfully', str(pv.obj["spec"]["csi"]["driver"]))

    def _reclaim(self, stored: Stored) -> None:
        """Delete a released volume of ours whose policy is Delete (DeleteVolume, then the PV)."""
        pv = stored.obj
        meta = pv["metadata"]
        if (meta.get("annotations") or {}).get(Annotation.PROVISIONED_BY) not in TOPOLOGY_KEYS:
            return
        if (pv.get("status") or {}).get("phase") != VolumePhase.RELEASED or (pv.get("spec") or {}).get("persistentVolumeReclaimPolicy") != ReclaimPolicy.DELETE:
            return
        if FINALIZER in (meta.get("finalizers") or []):
            new = stored.copy()
            new["metadata"]["finalizers"] = [f for f in meta["finalizers"] if f != FINALIZER]
            stored = self.store.update_stored(PV_RT, new, None)
        if not stored.obj["metadata"].get("deletionTimestamp"):
            self.store.delete_stored(PV_RT, meta["name"], None)

    def _tell(self, claim: JsonObject, type_: EventType, reason: str, message: str, provisioner: str) -> None:
        uid = claim["metadata"]["uid"]
        if self._told.get(uid) == (reason, message):
            return
        self._told[uid] = (reason, message)
        record(self.store, claim, type_, reason, message, f"{provisioner}_csi-provisioner-0")


# ---------------------------------------------------------------------- what the drivers install

DEFAULT_CLASS = "standard"
ZONAL_CLASS = "zonal"


def driver_objects() -> list[tuple[Resource, JsonObject]]:
    """The CSIDrivers and StorageClasses the sandbox's drivers install: a default class
    ``standard`` (node-local volumes, ``WaitForFirstConsumer``, as most CSI drivers install) and a
    class ``zonal`` (zonal volumes, ``WaitForFirstConsumer``)."""
    objects: list[tuple[Resource, JsonObject]] = []
    for driver, attach in ((LOCAL_DRIVER, False), (ZONAL_DRIVER, True)):
        objects.append((Resource.CSIDRIVERS, {
            "apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": driver},
            "spec": {"attachRequired": attach, "storageCapacity": True, "podInfoOnMount": False,
                     "volumeLifecycleModes": ["Persistent"]},
        }))
    for name, driver, default in ((DEFAULT_CLASS, LOCAL_DRIVER, True), (ZONAL_CLASS, ZONAL_DRIVER, False)):
        annotations = {Annotation.DEFAULT_CLASS.value: "true"} if default else {}
        objects.append((Resource.STORAGECLASSES, {
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name, **({"annotations": annotations} if annotations else {})},
            "provisioner": driver, "reclaimPolicy": ReclaimPolicy.DELETE.value,
            "volumeBindingMode": BindingMode.WAIT_FOR_FIRST_CONSUMER.value, "allowVolumeExpansion": True,
        }))
    return objects


def install(store: Store) -> None:
    """Create what :func:`driver_objects` lists, unless it exists already."""
    for resource, obj in driver_objects():
        if not store.exists(resource, obj["metadata"]["name"]):
            store.create(resource, obj)

"""kube-controller-manager's storage controllers: the PersistentVolume binder and the protection controllers.

**The PV controller** (``persistentvolume-binder``) binds claims to volumes, both ways, as the real
one does:

- a claim that names a volume (``spec.volumeName``) is bound to it if that volume is free or
  pre-bound to it and satisfies it (else ``VolumeMismatch``, or ``FailedBinding`` "volume "x"
  already bound to a different claim.");
- a claim of an ``Immediate`` class (or of no class, ``""``) is bound to the smallest free
  volume of the same class and volume mode whose access modes include the claim's, whose
  capacity covers the request and whose labels match the claim's selector (a volume pre-bound
  to the claim first);
- a claim of a ``WaitForFirstConsumer`` class is bound only to a volume pre-bound to it (the
  scheduler's VolumeBinding PreBind writes a static volume's ``claimRef``); until a scheduler
  sets ``volume.kubernetes.io/selected-node`` on it the controller says so
  (``WaitForFirstConsumer``: "waiting for first consumer to be created before binding");
- otherwise a class with a provisioner gets the claim annotated
  ``volume.kubernetes.io/storage-provisioner`` (and the beta key) for the external provisioner
  (``ExternalProvisioning``); a class that does not exist, or ``kubernetes.io/no-provisioner``,
  is a ``ProvisioningFailed`` warning; no class at all is ``FailedBinding`` ("no persistent
  volumes available for this claim and no storage class is set");
- binding writes the volume's ``claimRef`` (with ``pv.kubernetes.io/bound-by-controller`` when the
  controller chose it) and phase ``Bound``, then the claim's ``volumeName``,
  ``pv.kubernetes.io/bind-completed`` and status (``Bound``, the volume's access modes and
  capacity);
- an unbound claim with no ``storageClassName`` at all gets the default class once one exists
  (the retroactive default StorageClass assignment);
- a bound claim whose volume is gone, or bound elsewhere, is ``Lost`` (``ClaimLost``); a volume
  whose claim is gone is ``Released``, then kept (``Retain``), left to its provisioner
  (``Delete`` of a provisioned volume) or ``Failed`` (``Delete`` of a static volume: no deleter).

**pvc-protection** removes ``kubernetes.io/pvc-protection`` from a claim being deleted once no
pod that is not terminal uses it (scheduled or not); **pv-protection** removes
``kubernetes.io/pv-protection`` from a volume being deleted once it is not ``Bound``.

Each event is recorded once per state of the object (the real controller repeats it on every
resync; the count would only grow). Pods matter only for protection: the changes of pods that
use no claim cost this controller nothing.
"""

from __future__ import annotations

from typing import Any

from .events import EventType, record
from .kinds import RESOURCE_TYPES, Resource
from .nodefit import is_terminal
from .parts import Host, Part
from .storage import (
    Annotation,
    BindingMode,
    ClaimPhase,
    Finalizer,
    ReclaimPolicy,
    VolumePhase,
    default_class,
    storage_request,
    to_bytes,
)
from .store import ApiError, Change, EventType as ChangeType, LabelSelector, Stored, Subresource

JsonObject = dict[str, Any]

PVC_RT = RESOURCE_TYPES[Resource.PERSISTENTVOLUMECLAIMS]
PV_RT = RESOURCE_TYPES[Resource.PERSISTENTVOLUMES]
SC_RT = RESOURCE_TYPES[Resource.STORAGECLASSES]
COMPONENT = "persistentvolume-controller"
NO_PROVISIONER = "kubernetes.io/no-provisioner"


def claim_names(pod: JsonObject) -> list[str]:
    """The claims a pod's volumes use: ``persistentVolumeClaim.claimName``, and ``<pod>-<volume>``
    for a generic ephemeral volume."""
    names = []
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if not isinstance(volume, dict):
            continue
        if isinstance(volume.get("persistentVolumeClaim"), dict):
            names.append(str(volume["persistentVolumeClaim"].get("claimName", "")))
        elif isinstance(volume.get("ephemeral"), dict):
            names.append(f"{pod['metadata']['name']}-{volume.get('name', '')}")
    return names


def claim_of_volume_source(pod: JsonObject, volume: JsonObject) -> str | None:
    if isinstance(volume.get("persistentVolumeClaim"), dict):
        return str(volume["persistentVolumeClaim"].get("claimName", ""))
    if isinstance(volume.get("ephemeral"), dict):
        return f"{pod['metadata']['name']}-{volume.get('name', '')}"
    return None


def _spec(obj: JsonObject) -> JsonObject:
    return obj.get("spec") or {}


def _phase(obj: JsonObject) -> str:
    return (obj.get("status") or {}).get("phase", "")


def _key(obj: JsonObject) -> tuple[str, str]:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def _refers_to(ref: Any, claim: JsonObject) -> bool:
    """A ``claimRef`` names this claim (by namespace and name, and uid when it has one)."""
    if not isinstance(ref, dict):
        return False
    meta = claim["metadata"]
    return (ref.get("namespace"), ref.get("name")) == (meta.get("namespace"), meta["name"]) and ref.get("uid") in (None, "", meta["uid"])


def mismatch(claim: JsonObject, pv: JsonObject) -> str | None:
    """Why ``pv`` cannot satisfy ``claim`` (``checkVolumeSatisfyClaim``), or ``None``."""
    claim_spec, pv_spec = _spec(claim), _spec(pv)
    if to_bytes((pv_spec.get("capacity") or {}).get("storage")) < storage_request(claim):
        return "requested PV is too small"
    if (pv_spec.get("storageClassName") or "") != (claim_spec.get("storageClassName") or ""):
        return "storageClassName does not match"
    if (pv_spec.get("volumeMode") or "Filesystem") != (claim_spec.get("volumeMode") or "Filesystem"):
        return "incompatible volumeMode"
    if not set(claim_spec.get("accessModes") or []) <= set(pv_spec.get("accessModes") or []):
        return "incompatible accessMode"
    return None


class PersistentVolumeController(Part):
    """The binder, pvc-protection and pv-protection (see the module docstring)."""

    resources = (Resource.PERSISTENTVOLUMECLAIMS, Resource.PERSISTENTVOLUMES, Resource.STORAGECLASSES)

    def __init__(self, mgr: Host) -> None:
        super().__init__(mgr)
        self._told: dict[str, tuple[str, str]] = {}
        """The last event recorded about each object (by uid): not recorded again while it holds."""

    def on_change(self, change: Change) -> None:
        if change.rt.resource in self.resources:
            self._dirty = True
        elif change.rt.resource == Resource.PODS and (claim_names(change.new.obj) or (change.old and claim_names(change.old.obj))):
            self._dirty = True
        if change.type is ChangeType.DELETED:
            self._told.pop(change.new.obj["metadata"].get("uid", ""), None)

    # ------------------------------------------------------------------ reading

    def _claims(self) -> list[Stored]:
        return self.stored(PVC_RT)

    def _volumes(self) -> dict[str, Stored]:
        return {s.obj["metadata"]["name"]: s for s in self.stored(PV_RT)}

    def _class(self, name: str) -> JsonObject | None:
        try:
            return self.store.get_stored(SC_RT, name).obj
        except ApiError:
            return None

    def _tell(self, obj: JsonObject, type_: EventType, reason: str, message: str) -> None:
        uid = obj["metadata"]["uid"]
        if self._told.get(uid) == (reason, message):
            return
        self._told[uid] = (reason, message)
        record(self.store, obj, type_, reason, message, COMPONENT)

    # ------------------------------------------------------------------ the loop

    def sync(self) -> None:
        for s in self._volumes().values():
            self.mgr.guard(lambda s=s: self._sync_volume(s.obj["metadata"]["name"]))
        for s in self._claims():
            ns, name = _key(s.obj)
            self.mgr.guard(lambda ns=ns, name=name: self._sync_claim(ns, name))
        self._protect()

    def _fresh(self, rt: Any, name: str, namespace: str | None = None) -> Stored | None:
        try:
            return self.store.get_stored(rt, name, namespace)
        except ApiError:
            return None

    def _set_phase(self, rt: Any, stored: Stored, phase: str, **extra: Any) -> Stored:
        if _phase(stored.obj) == phase and all((stored.obj.get("status") or {}).get(k) == v for k, v in extra.items()):
            return stored
        new = stored.copy()
        status = new.setdefault("status", {})
        status["phase"] = phase
        for k, v in extra.items():
            if v is None:
                status.pop(k, None)
            else:
                status[k] = v
        meta = new["metadata"]
        return self.store.update_stored(rt, new, meta.get("namespace"), subresource=Subresource.STATUS)

    # ------------------------------------------------------------------ volumes

    def _sync_volume(self, name: str) -> None:
        stored = self._fresh(PV_RT, name)
        if stored is None:
            return
        pv = stored.obj
        ref = _spec(pv).get("claimRef")
        if not isinstance(ref, dict):
            if _phase(pv) != VolumePhase.FAILED:
                self._set_phase(PV_RT, stored, VolumePhase.AVAILABLE)
            return
        claim = self._fresh(PVC_RT, str(ref.get("name", "")), str(ref.get("namespace", "")))
        if ref.get("uid") and (claim is None or claim.obj["metadata"]["uid"] != ref["uid"]):
            self._release(stored)
            return
        if claim is not None and _spec(claim.obj).get("volumeName") == name:
            self._set_phase(PV_RT, stored, VolumePhase.BOUND)
        elif claim is not None and _spec(claim.obj).get("volumeName") and ref.get("uid") and (
                (pv["metadata"].get("annotations") or {}).get(Annotation.BOUND_BY_CONTROLLER)):
            # bound by this controller to a claim that went to another volume: free it again
            new = stored.copy()
            new["spec"].pop("claimRef", None)
            new["metadata"].get("annotations", {}).pop(Annotation.BOUND_BY_CONTROLLER, None)
            self.store.update_stored(PV_RT, new, None)
        elif _phase(pv) in ("", VolumePhase.PENDING):
            self._set_phase(PV_RT, stored, VolumePhase.AVAILABLE)

    def _release(self, stored: Stored) -> None:
        pv = stored.obj
        if _phase(pv) not in (VolumePhase.RELEASED, VolumePhase.FAILED):
            stored = self._set_phase(PV_RT, stored, VolumePhase.RELEASED)
        policy = _spec(pv).get("persistentVolumeReclaimPolicy")
        provisioned = (pv["metadata"].get("annotations") or {}).get(Annotation.PROVISIONED_BY)
        if policy == ReclaimPolicy.DELETE and not provisioned and _phase(stored.obj) != VolumePhase.FAILED:
            message = f'error getting deleter volume plugin for volume "{pv["metadata"]["name"]}": no deletable volume plugin matched'
            stored = self._set_phase(PV_RT, stored, VolumePhase.FAILED, message=message)
            self._tell(stored.obj, EventType.WARNING, "VolumeFailedDelete", message)
        # Retain: kept Released for an administrator; Delete of a provisioned volume: its provisioner deletes it

    # ------------------------------------------------------------------ claims

    def _sync_claim(self, ns: str, name: str) -> None:
        stored = self._fresh(PVC_RT, name, ns)
        if stored is None or stored.obj["metadata"].get("deletionTimestamp"):
            return
        claim = stored.obj
        spec = _spec(claim)
        volume_name = spec.get("volumeName")
        if _phase(claim) in (ClaimPhase.BOUND, ClaimPhase.LOST):
            pv = self._fresh(PV_RT, str(volume_name or ""))
            if pv is None:
                self._lose(stored, "Bound claim has lost its PersistentVolume. Data on the volume is lost!")
            elif not _refers_to(_spec(pv.obj).get("claimRef"), claim):
                self._lose(stored, "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!")
            elif _phase(claim) == ClaimPhase.LOST:
                self._bind(stored, pv)
            return
        if volume_name:
            pv = self._fresh(PV_RT, str(volume_name))
            if pv is None:
                return  # the user named a volume that does not exist (yet): wait for it
            ref = _spec(pv.obj).get("claimRef")
            if ref and not _refers_to(ref, claim):
                self._tell(claim, EventType.WARNING, "FailedBinding", f'volume "{volume_name}" already bound to a different claim.')
                return
            why = mismatch(claim, pv.obj)
            if why is not None:
                self._tell(claim, EventType.WARNING, "VolumeMismatch", f'Cannot bind to requested volume "{volume_name}": {why}')
                return
            self._bind(stored, pv)
            return
        if spec.get("storageClassName") is None and self._retroactive_default(stored):
            return  # the claim changed: synced again with its class
        class_name = spec.get("storageClassName") or ""
        sc = self._class(class_name) if class_name else None
        delayed = sc is not None and sc.get("volumeBindingMode") == BindingMode.WAIT_FOR_FIRST_CONSUMER
        match = self._matching(claim, delayed)
        if match is not None:
            self._bind(stored, match)
            return
        annotations = claim["metadata"].get("annotations") or {}
        if delayed and not annotations.get(Annotation.SELECTED_NODE):
            self._tell(claim, EventType.NORMAL, "WaitForFirstConsumer", "waiting for first consumer to be created before binding")
        elif not class_name:
            self._tell(claim, EventType.NORMAL, "FailedBinding", "no persistent volumes available for this claim and no storage class is set")
        elif sc is None:
            self._tell(claim, EventType.WARNING, "ProvisioningFailed", f'storageclass.storage.k8s.io "{class_name}" not found')
        elif sc.get("provisioner") == NO_PROVISIONER:
            self._tell(claim, EventType.WARNING, "ProvisioningFailed", f"no volume plugin matched name: {NO_PROVISIONER}")
        else:
            self._ask_provisioner(stored, str(sc.get("provisioner")))

    def _retroactive_default(self, stored: Stored) -> bool:
        """A claim made with no class before any default existed gets today's default class."""
        chosen = default_class([s.obj for s in self.stored(SC_RT)])
        if chosen is None:
            return False
        new = stored.copy()
        new["spec"]["storageClassName"] = chosen["metadata"]["name"]
        self.store.update_stored(PVC_RT, new, stored.obj["metadata"]["namespace"])
        return True

    def _matching(self, claim: JsonObject, delayed: bool) -> Stored | None:
        """The volume this claim binds to: one pre-bound to it, else (not delayed) the smallest that fits."""
        selector_spec = _spec(claim).get("selector")
        selector = LabelSelector.from_spec(selector_spec) if isinstance(selector_spec, dict) else None
        prebound, free = [], []
        for s in self._volumes().values():
            pv = s.obj
            if pv["metadata"].get("deletionTimestamp") or _phase(pv) in (VolumePhase.RELEASED, VolumePhase.FAILED):
                continue
            # who the volume is for first (cheap), then whether it satisfies the claim (sizes parsed)
            ref = _spec(pv).get("claimRef")
            if ref:
                if not _refers_to(ref, claim):
                    continue
            elif delayed or (selector is not None and not selector.matches(pv["metadata"].get("labels") or {})):
                continue
            if mismatch(claim, pv) is not None:
                continue
            (prebound if ref else free).append(s)
        chosen = prebound or free
        if not chosen:
            return None
        return min(chosen, key=lambda s: (to_bytes((_spec(s.obj).get("capacity") or {}).get("storage")), s.obj["metadata"]["name"]))

    def _ask_provisioner(self, stored: Stored, provisioner: str) -> None:
        claim = stored.obj
        annotations = claim["metadata"].get("annotations") or {}
        if annotations.get(Annotation.STORAGE_PROVISIONER) != provisioner:
            new = stored.copy()
            new["metadata"].setdefault("annotations", {}).update({
                Annotation.STORAGE_PROVISIONER.value: provisioner, Annotation.BETA_STORAGE_PROVISIONER.value: provisioner,
            })
            stored = self.store.update_stored(PVC_RT, new, claim["metadata"]["namespace"])
        self._tell(stored.obj, EventType.NORMAL, "ExternalProvisioning", (
            f"Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually by the "
            "system administrator. If volume creation is delayed, please verify that the provisioner is running and "
            "correctly registered."))

    def _lose(self, stored: Stored, message: str) -> None:
        if _phase(stored.obj) != ClaimPhase.LOST:
            stored = self._set_phase(PVC_RT, stored, ClaimPhase.LOST)
            self._tell(stored.obj, EventType.WARNING, "ClaimLost", message)

    def _bind(self, claim_stored: Stored, pv_stored: Stored) -> None:
        """Bind both ways: the volume's ``claimRef`` and phase, then the claim's ``volumeName`` and status."""
        claim, pv = claim_stored.obj, pv_stored.obj
        meta = claim["metadata"]
        ref = _spec(pv).get("claimRef")
        if not (isinstance(ref, dict) and ref.get("uid") == meta["uid"]):
            new = pv_stored.copy()
            new["spec"]["claimRef"] = {"kind": "PersistentVolumeClaim", "namespace": meta["namespace"], "name": meta["name"],
                                       "uid": meta["uid"], "apiVersion": "v1", "resourceVersion": meta["resourceVersion"]}
            if not isinstance(ref, dict):
                new["metadata"].setdefault("annotations", {})[Annotation.BOUND_BY_CONTROLLER.value] = "yes"
            pv_stored = self.store.update_stored(PV_RT, new, None)
        pv_stored = self._set_phase(PV_RT, pv_stored, VolumePhase.BOUND)
        pv = pv_stored.obj
        if _spec(claim).get("volumeName") != pv["metadata"]["name"] or not (meta.get("annotations") or {}).get(Annotation.BIND_COMPLETED):
            new = claim_stored.copy()
            annotations = new["metadata"].setdefault("annotations", {})
            if not _spec(claim).get("volumeName"):
                annotations[Annotation.BOUND_BY_CONTROLLER.value] = "yes"
            annotations[Annotation.BIND_COMPLETED.value] = "yes"
            new["spec"]["volumeName"] = pv["metadata"]["name"]
            claim_stored = self.store.update_stored(PVC_RT, new, meta["namespace"])
        self._set_phase(PVC_RT, claim_stored, ClaimPhase.BOUND, accessModes=list(_spec(pv).get("accessModes") or []),
                        capacity=dict(_spec(pv).get("capacity") or {}))

    # ------------------------------------------------------------------ protection

    def _protect(self) -> None:
        claims = [s for s in self._claims() if s.obj["metadata"].get("deletionTimestamp")
                  and Finalizer.PVC_PROTECTION in (s.obj["metadata"].get("finalizers") or [])]
        if claims:
            used: set[tuple[str, str]] = set()
            for namespace in {_key(s.obj)[0] for s in claims}:
                for pod in self.store.list(Resource.PODS, namespace).items:
                    if not is_terminal(pod.obj):
                        used.update((namespace, n) for n in claim_names(pod.obj))
            for s in claims:
                if _key(s.obj) not in used:
                    self._drop_finalizer(PVC_RT, s, Finalizer.PVC_PROTECTION)
        for s in self._volumes().values():
            meta = s.obj["metadata"]
            if meta.get("deletionTimestamp") and Finalizer.PV_PROTECTION in (meta.get("finalizers") or []) and _phase(s.obj) != VolumePhase.BOUND:
                self._drop_finalizer(PV_RT, s, Finalizer.PV_PROTECTION)

    def _drop_finalizer(self, rt: Any, stored: Stored, finalizer: str) -> None:
        new = stored.copy()
        new["metadata"]["finalizers"] = [f for f in new["metadata"].get("finalizers") or [] if f != finalizer]
        self.store.update_stored(rt, new, new["metadata"].get("namespace"))

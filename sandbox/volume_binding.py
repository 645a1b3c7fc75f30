"""kube-scheduler's VolumeBinding plugin, for the sandbox's default scheduler.

The default scheduler (:mod:`usher.sandbox.default_scheduler`) places a pod with claims as
kube-scheduler does:

- **PreFilter**: a claim that does not exist (``persistentvolumeclaim "x" not found``), is being
  deleted (``persistentvolumeclaim "x" is being deleted``) or is an unbound claim of an
  ``Immediate`` class (``pod has unbound immediate PersistentVolumeClaims``) makes the pod
  unschedulable on every node;
- **Filter**: a bound claim's volume must accept the node by its node affinity ("node(s) had
  volume node affinity conflict"); a delayed (``WaitForFirstConsumer``) claim needs on the node
  either a free static volume that satisfies it, or a class that can provision there: not
  ``kubernetes.io/no-provisioner``, the node inside ``allowedTopologies``, and, when the
  driver's CSIDriver says ``storageCapacity``, a CSIStorageCapacity of the class whose topology
  holds the node with room for the claim ("node(s) didn't find available persistent volumes to
  bind", "node(s) did not have enough free storage"); a delayed claim that another pod's PreBind
  gave a ``selected-node`` already fits only that node;
- **PreBind**: on the chosen node, a static volume's ``claimRef`` is written (the PV controller
  completes the binding) or the claim gets ``volume.kubernetes.io/selected-node`` (the
  provisioner provisions); the pod is bound only once every claim is ``Bound``. If a claim's
  ``selected-node`` is taken away (the provisioner gave up on that node) or 600 s pass
  (``bindTimeoutSeconds``), the pod is not bound: ``running PreBind plugin "VolumeBinding":
  binding volumes: selectedNode annotation reset for PVC "x"`` (or ``context deadline
  exceeded``), and it is scheduled again.

Beside it, two filters of the same family: **VolumeRestrictions** (a ``ReadWriteOncePod``
claim another pod uses makes the pod unschedulable: "node has pod using PersistentVolumeClaim
with the same name and ReadWriteOncePod access mode") and **NodeVolumeLimits** (a node whose
CSINode gives a driver an ``allocatable.count`` takes no more of its volumes than that: "node(s)
exceed max volume count").

The sandbox's own reading of the plugins (the independent oracle for usher's), sharing only the
storage words of :mod:`usher.sandbox.storage` with the other stand-ins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .kinds import RESOURCE_TYPES, Resource
from .labels import LabelSelector
from .nodefit import is_terminal, topology_terms_match, volume_fits_node
from .pv_controller import NO_PROVISIONER, claim_of_volume_source, mismatch
from .storage import AccessMode, Annotation, BindingMode, ClaimPhase, storage_request, to_bytes
from .store import ApiError, Store

JsonObject = dict[str, Any]

PVC_RT = RESOURCE_TYPES[Resource.PERSISTENTVOLUMECLAIMS]
PV_RT = RESOURCE_TYPES[Resource.PERSISTENTVOLUMES]
SC_RT = RESOURCE_TYPES[Resource.STORAGECLASSES]
DRIVER_RT = RESOURCE_TYPES[Resource.CSIDRIVERS]
CAP_RT = RESOURCE_TYPES[Resource.CSISTORAGECAPACITIES]

BIND_TIMEOUT = 600.0
"""kube-scheduler's VolumeBinding ``bindTimeoutSeconds``."""
NODE_CONFLICT = "node(s) had volume node affinity conflict"
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
RWOP_CONFLICT = "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
MAX_VOLUMES = "node(s) exceed max volume count"
POD_RT = RESOURCE_TYPES[Resource.PODS]
CSINODE_RT = RESOURCE_TYPES[Resource.CSINODES]
PREBIND = 'running PreBind plugin "VolumeBinding": binding volumes: '


@dataclass(slots=True)
class Pending:
    """A pod whose volumes are being bound on ``node`` since ``since``."""

    node: str
    since: float
    claims: list[str] = field(default_factory=list)


def pod_claims(pod: JsonObject) -> list[str]:
    return [name for v in (pod.get("spec") or {}).get("volumes") or []
            if isinstance(v, dict) and (name := claim_of_volume_source(pod, v)) is not None]


class VolumeBinding:
    """The plugin's checks and API calls (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _get(self, rt: Any, name: str, namespace: str | None = None) -> JsonObject | None:
        try:
            return self.store.get_stored(rt, name, namespace).obj
        except ApiError:
            return None

    def _claims(self, pod: JsonObject) -> list[tuple[str, JsonObject | None]]:
        ns = pod["metadata"].get("namespace", "default")
        return [(name, self._get(PVC_RT, name, ns)) for name in pod_claims(pod)]

    def _delayed(self, claim: JsonObject) -> bool:
        name = (claim.get("spec") or {}).get("storageClassName")
        sc = self._get(SC_RT, name) if name else None
        return sc is not None and sc.get("volumeBindingMode") == BindingMode.WAIT_FOR_FIRST_CONSUMER

    def prefilter(self, pod: JsonObject) -> str | None:
        """Why no node can take the pod because of its claims, or ``None``."""
        immediate = False
        for name, claim in self._claims(pod):
            if claim is None:
                return f'persistentvolumeclaim "{name}" not found'
            if claim["metadata"].get("deletionTimestamp"):
                return f'persistentvolumeclaim "{name}" is being deleted'
            if (claim.get("status") or {}).get("phase") != ClaimPhase.BOUND and not self._delayed(claim):
                immediate = True
            if AccessMode.READ_WRITE_ONCE_POD in ((claim.get("spec") or {}).get("accessModes") or []) and self._used_by_other(pod, name):
                return RWOP_CONFLICT
        return "pod has unbound immediate PersistentVolumeClaims" if immediate else None

    def _used_by_other(self, pod: JsonObject, claim_name: str) -> bool:
        ns, uid = pod["metadata"].get("namespace", "default"), pod["metadata"]["uid"]
        return any(o.obj["metadata"]["uid"] != uid and not is_terminal(o.obj) and (o.obj.get("spec") or {}).get("nodeName")
                   and claim_name in pod_claims(o.obj) for o in self.store.list(POD_RT, ns).items)

    def limits_exceeded(self, pod: JsonObject, node: JsonObject, pods_on_node: list[JsonObject]) -> bool:
        """NodeVolumeLimits: the pod's CSI volumes would take a driver past the node's CSINode count."""
        csinode = self._get(CSINODE_RT, node["metadata"]["name"])
        limits = {d.get("name"): (d.get("allocatable") or {}).get("count")
                  for d in ((csinode or {}).get("spec") or {}).get("drivers") or []}
        if not any(isinstance(v, int) for v in limits.values()):
            return False
        mine = self._drivers_of(pod)
        if not mine:
            return False
        used: dict[str, set[str]] = {}
        for other in pods_on_node:
            for driver, handles in self._drivers_of(other).items():
                used.setdefault(driver, set()).update(handles)
        return any(isinstance(limits.get(d), int) and len(used.get(d, set()) | handles) > limits[d] for d, handles in mine.items())

    def _drivers_of(self, pod: JsonObject) -> dict[str, set[str]]:
        """The CSI driver of each of the pod's claims, and the claims (bound or not) it would attach."""
        ns = pod["metadata"].get("namespace", "default")
        found: dict[str, set[str]] = {}
        for name, claim in self._claims(pod):
            if claim is None:
                continue
            volume_name = (claim.get("spec") or {}).get("volumeName")
            pv = self._get(PV_RT, volume_name) if volume_name else None
            if pv is not None:
                driver = ((pv.get("spec") or {}).get("csi") or {}).get("driver")
            else:
                sc = self._get(SC_RT, (claim.get("spec") or {}).get("storageClassName") or "")
                driver = (sc or {}).get("provisioner")
            if driver:
                found.setdefault(str(driver), set()).add(volume_name or f"{ns}/{name}")
        return found

    def filter(self, pod: JsonObject, node: JsonObject) -> str | None:
        """Why ``node`` cannot take the pod's volumes, or ``None``."""
        taken: set[str] = set()
        for _, claim in self._claims(pod):
            if claim is None:
                continue
            volume_name = (claim.get("spec") or {}).get("volumeName")
            if volume_name:
                pv = self._get(PV_RT, volume_name)
                if pv is None:
                    return "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
                if not volume_fits_node(pv, node):
                    return NODE_CONFLICT
                continue
            selected = (claim["metadata"].get("annotations") or {}).get(Annotation.SELECTED_NODE)
            if selected and selected != node["metadata"]["name"]:
                return BIND_CONFLICT  # another pod's PreBind chose a node for it already
            static = self._static_volume(claim, node, taken)
            if static is not None:
                taken.add(static["metadata"]["name"])
                continue
            why = self._provision_problem(claim, node)
            if why is not None:
                return why
        return None

    def _static_volume(self, claim: JsonObject, node: JsonObject, taken: set[str]) -> JsonObject | None:
        fits = []
        for s in self.store.list(PV_RT).items:
            pv = s.obj
            ref = (pv.get("spec") or {}).get("claimRef")
            if pv["metadata"]["name"] in taken or pv["metadata"].get("deletionTimestamp"):
                continue
            if (pv.get("status") or {}).get("phase") not in ("Available", "Pending", None):
                continue
            mine = isinstance(ref, dict) and (ref.get("namespace"), ref.get("name")) == (
                claim["metadata"]["namespace"], claim["metadata"]["name"])
            if (ref and not mine) or mismatch(claim, pv) is not None or not volume_fits_node(pv, node):
                continue
            fits.append(pv)
        return min(fits, key=lambda pv: (to_bytes(((pv.get("spec") or {}).get("capacity") or {}).get("storage")),
                                         pv["metadata"]["name"])) if fits else None

    def _provision_problem(self, claim: JsonObject, node: JsonObject) -> str | None:
        sc = self._get(SC_RT, (claim.get("spec") or {}).get("storageClassName") or "")
        labels = node["metadata"].get("labels") or {}
        if sc is None or sc.get("provisioner") == NO_PROVISIONER or not topology_terms_match(sc.get("allowedTopologies"), labels):
            return BIND_CONFLICT
        driver = self._get(DRIVER_RT, str(sc.get("provisioner")))
        if driver is None or not (driver.get("spec") or {}).get("storageCapacity"):
            return None
        size = storage_request(claim)
        for s in self.store.list(CAP_RT).items:
            cap = s.obj
            if cap.get("storageClassName") != sc["metadata"]["name"]:
                continue
            topology = cap.get("nodeTopology")
            if not LabelSelector.or_nothing(topology).matches(labels):  # no nodeTopology: no node
                continue
            limit = cap.get("maximumVolumeSize", cap.get("capacity"))
            if limit is not None and to_bytes(limit) >= size:
                return None
        return NOT_ENOUGH_SPACE

    # ------------------------------------------------------------------ PreBind

    def prebind(self, pod: JsonObject, node: JsonObject) -> Pending:
        """Write what the chosen node needs: static volumes' ``claimRef``, else ``selected-node``."""
        node_name = node["metadata"]["name"]
        pending = Pending(node_name, self.store.clock())
        taken: set[str] = set()
        for name, claim in self._claims(pod):
            if claim is None or (claim.get("spec") or {}).get("volumeName"):
                continue
            pending.claims.append(name)
            static = self._static_volume(claim, node, taken)
            if static is not None:
                taken.add(static["metadata"]["name"])
                if not (static.get("spec") or {}).get("claimRef"):
                    stored = self.store.get_stored(PV_RT, static["metadata"]["name"])
                    new = stored.copy()
                    meta = claim["metadata"]
                    new["spec"]["claimRef"] = {"kind": "PersistentVolumeClaim", "namespace": meta["namespace"],
                                               "name": meta["name"], "uid": meta["uid"], "apiVersion": "v1",
                                               "resourceVersion": meta["resourceVersion"]}
                    new["metadata"].setdefault("annotations", {})[Annotation.BOUND_BY_CONTROLLER.value] = "yes"
                    self.store.update_stored(PV_RT, new, None)
                continue
            stored = self.store.get_stored(PVC_RT, name, claim["metadata"]["namespace"])
            if (stored.obj["metadata"].get("annotations") or {}).get(Annotation.SELECTED_NODE) != node_name:
                new = stored.copy()
                new["metadata"].setdefault("annotations", {})[Annotation.SELECTED_NODE.value] = node_name
                self.store.update_stored(PVC_RT, new, claim["metadata"]["namespace"])
        return pending

    def check(self, pod: JsonObject, pending: Pending) -> str | None | bool:
        """``True`` once every claim is bound, an error (the PreBind failure) or ``None`` (still waiting)."""
        ns = pod["metadata"].get("namespace", "default")
        waiting = False
        for name in pending.claims:
            claim = self._get(PVC_RT, name, ns)
            if claim is None:
                return PREBIND + f'persistentvolumeclaim "{name}" not found'
            if (claim.get("status") or {}).get("phase") == ClaimPhase.BOUND:
                continue
            annotations = claim["metadata"].get("annotations") or {}
            if self._delayed(claim) and annotations.get(Annotation.SELECTED_NODE) != pending.node and not self._prebound(claim):
                return PREBIND + f'selectedNode annotation reset for PVC "{name}"'
            waiting = True
        if not waiting:
            return True
        if self.store.clock() - pending.since >= BIND_TIMEOUT:
            return PREBIND + "context deadline exceeded"
        return None

    def _prebound(self, claim: JsonObject) -> bool:
        meta = claim["metadata"]
        for s in self.store.list(PV_RT).items:
            ref = (s.obj.get("spec") or {}).get("claimRef")
            if isinstance(ref, dict) and (ref.get("namespace"), ref.get("name"), ref.get("uid")) == (meta["namespace"], meta["name"], meta["uid"]):
                return True
        return False

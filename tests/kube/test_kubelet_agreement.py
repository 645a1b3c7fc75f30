"""usher never binds a pod where the kubelet would refuse it: usher's accounting against the
sandbox kubelet's admission, on random pods and random nodes with pods already on them.

A kubelet that refuses a bound pod fails it (``OutOfnvidia.com/gpu``, ``NodePorts``, ...), and a
batch Job counts that against its backoffLimit: usher's count of what a node has free must never
be more than the kubelet's. The property: for any pod the API server accepts and usher does not
refuse as written (an InvalidRequest problem), on any nodes with any pods already on them (usher's
own, bound before, and other schedulers'), a node usher binds it to is one whose kubelet admits it.

usher's side is driven as the kube controller drives it (``KubeController._apply`` with what its
two pod informers deliver, then an engine cycle); the kubelet's is the sandbox's own
(``usher.sandbox.kubelet``, on an in-process store, the oracle), which admits in creation order
exactly as it does behind the fake API server.
"""

from __future__ import annotations

import types
from typing import Any

from hypothesis import HealthCheck, example, given, note, settings
from hypothesis import strategies as st

from usher.engine.backends.kube.controller import KubeController, Source
from usher.engine.backends.kube.informer import DeltaType
from usher.engine.backends.kube.objects import GPU_RESOURCE, SCHEDULER_NAME, key_of
from usher.engine.enums import DecisionKind
from usher.engine.scenario import parse_queue_config
from usher.sandbox.controllers import Controllers
from usher.sandbox.store import ApiError, Store

MI = 2**20
EXTENDED = ("example.com/fpga", "rdma/ib")
HUGEPAGES = "hugepages-2Mi"
PORTS = (8000, 8001, 29500)
QUEUES = "queues:\n  - {name: q, quota: {gpu: 1000}, namespaceSelector: {}}\n"
NOW = 1_000_000.0
ZONE, RANK = "topology.kubernetes.io/zone", "example.com/rank"
ZONES = ("a", "b", "c")
TAINTS = (
    {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "ml", "effect": "NoExecute"},
    {"key": "maintenance", "effect": "NoExecute"},
    {"key": "spot", "value": "true", "effect": "PreferNoSchedule"},
)
TOLERATIONS = (
    {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
    {"key": "dedicated", "operator": "Exists"},
    {"key": "maintenance", "operator": "Exists", "effect": "NoExecute"},
    {"key": "maintenance", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0},
)

# -- what the API server accepts -------------------------------------------------------------
# extended resources and hugepages: whole, a limit, and a request (if any) equal to it; cpu,
# memory and ephemeral storage: a request no larger than the limit; hugepages with memory


@st.composite
def resources(draw, big: bool) -> dict[str, Any]:
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    scale = 4 if big else 1
    for name, unit, top in (("cpu", "m", 4000 * scale), ("memory", "Mi", 2048 * scale), ("ephemeral-storage", "Mi", 4096)):
        mode = draw(st.sampled_from(("none", "none", "request", "limit", "both")))
        if mode == "none":
            continue
        low = draw(st.integers(0, top))
        if mode in ("request", "both"):
            requests[name] = f"{low}{unit}"
        if mode in ("limit", "both"):
            limits[name] = f"{draw(st.integers(low, top)) if mode == 'both' else low}{unit}"
    for name, top in ((GPU_RESOURCE, 3 * scale), *((e, 2) for e in EXTENDED), (HUGEPAGES, 4)):
        mode = draw(st.sampled_from(("none", "none", "limit", "both")))
        if mode == "none":
            continue
        amount = draw(st.integers(0, top))
        text = f"{amount * 2}Mi" if name == HUGEPAGES else str(amount)
        limits[name] = text
        if mode == "both":
            requests[name] = text
    if HUGEPAGES in limits and "memory" not in requests and "memory" not in limits:
        requests["memory"] = limits["memory"] = "64Mi"
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


@st.composite
def pod_spec(draw, big: bool) -> dict[str, Any]:
    host_network = draw(st.booleans())
    free_ports = list(PORTS)

    def ports() -> list[dict[str, Any]]:
        out = []
        for _ in range(draw(st.integers(0, 2))):
            if not free_ports:
                break
            port = free_ports.pop(draw(st.integers(0, len(free_ports) - 1)))
            entry: dict[str, Any] = {"containerPort": port, "protocol": draw(st.sampled_from(("TCP", "UDP")))}
            if not host_network and draw(st.booleans()):
                entry["hostPort"] = port
                if draw(st.integers(0, 4)) == 0:
                    entry["hostIP"] = "127.0.0.1"
            out.append(entry)
        return out

    def container(name: str, sidecar: bool | None = None) -> dict[str, Any]:
        c: dict[str, Any] = {"name": name, "image": "busybox:1.36", "resources": draw(resources(big))}
        if sidecar:
            c["restartPolicy"] = "Always"
        found = ports()
        if found:
            c["ports"] = found
        return c

    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container(f"c{i}") for i in range(draw(st.integers(1, 3)))],
    }
    inits = [container(f"i{i}", draw(st.booleans())) for i in range(draw(st.integers(0, 3)))]
    if inits:
        spec["initContainers"] = inits
    if host_network:
        spec["hostNetwork"] = True
    if draw(st.integers(0, 2)) == 0:
        spec["nodeSelector"] = {ZONE: draw(st.sampled_from(ZONES))}
    if draw(st.integers(0, 2)) == 0:
        expression = draw(st.sampled_from((
            {"key": ZONE, "operator": "In", "values": list(ZONES[:2])}, {"key": ZONE, "operator": "NotIn", "values": [ZONES[0]]},
            {"key": RANK, "operator": "Exists"}, {"key": RANK, "operator": "DoesNotExist"},
            {"key": RANK, "operator": "Gt", "values": ["1"]}, {"key": RANK, "operator": "Lt", "values": ["2"]},
        )))
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [expression]}]}}}
    tolerations = draw(st.lists(st.sampled_from(TOLERATIONS), max_size=2, unique_by=lambda t: repr(sorted(t.items()))))
    if tolerations:
        spec["tolerations"] = tolerations
    if draw(st.integers(0, 3)) == 0:
        # as a RuntimeClass's overhead is written into the pod at admission
        spec["overhead"] = {"cpu": f"{draw(st.integers(0, 500))}m", "memory": f"{draw(st.integers(0, 256))}Mi"}
    return spec


@st.composite
def pod(draw, name: str, *, usher: bool, node: str | None, big: bool = False) -> dict[str, Any]:
    annotations: dict[str, str] = {}
    if usher and draw(st.integers(0, 3)) == 0:
        annotations["usher/gpu-fraction"] = draw(st.sampled_from(("0.25", "0.5", "0.75")))
    if usher and node is not None and draw(st.booleans()):
        annotations["usher/gpus"] = ",".join(map(str, draw(st.lists(st.integers(0, 3), max_size=2, unique=True))))
    spec = draw(pod_spec(big))
    spec["schedulerName"] = SCHEDULER_NAME if usher else "default-scheduler"
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"usher/queue": "q"} if usher else {},
                     "annotations": annotations},
        "spec": spec,
    }


@st.composite
def node(draw, name: str) -> dict[str, Any]:
    alloc = {
        "cpu": str(draw(st.integers(1, 16))),
        "memory": f"{draw(st.integers(1, 16))}Gi",
        GPU_RESOURCE: str(draw(st.integers(0, 4))),
        "pods": str(draw(st.integers(1, 8))),
    }
    for extra in (*EXTENDED, HUGEPAGES, "ephemeral-storage"):
        if draw(st.booleans()):
            amount = draw(st.integers(0, 4))
            alloc[extra] = f"{amount * 2}Mi" if extra == HUGEPAGES else f"{amount}Gi" if extra == "ephemeral-storage" else str(amount)
    labels = {"kubernetes.io/hostname": name, "nvidia.com/gpu.product": "H100"}
    if draw(st.booleans()):
        labels[ZONE] = draw(st.sampled_from(ZONES))
    if draw(st.booleans()):
        labels[RANK] = str(draw(st.integers(0, 3)))
    taints = draw(st.lists(st.sampled_from(TAINTS), max_size=2, unique_by=lambda t: (t["key"], t["effect"])))
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints} if taints else {},
        "status": {"capacity": dict(alloc), "allocatable": alloc,
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
    }


@st.composite
def cluster(draw) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], bool]:
    nodes = [draw(node(f"n{i}")) for i in range(draw(st.integers(1, 3)))]
    existing = []
    for n in nodes:
        for k in range(draw(st.integers(0, 4))):
            usher = draw(st.booleans())
            existing.append(draw(pod(f"{n['metadata']['name']}-{'u' if usher else 'o'}{k}", usher=usher, node=n["metadata"]["name"])))
    candidate = draw(pod("candidate", usher=True, node=None, big=draw(st.booleans())))
    return nodes, existing, candidate, draw(st.booleans())


# -- the two sides ---------------------------------------------------------------------------


class Kubelet:
    """The sandbox's store with its kubelet alone running (no scheduler, no workloads)."""

    def __init__(self) -> None:
        self.store = Store(clock=lambda: NOW)
        self.controllers = Controllers(self.store, scheduler=False, workloads=False, operators=False)
        self.controllers.active = True
        for part in self.controllers.parts:
            part.resync()

    def create(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        created = self.store.create(resource, obj, obj["metadata"].get("namespace"))
        self.controllers.step()
        return created

    def pod(self, name: str) -> dict[str, Any] | None:
        """The pod as it is now; None once deleted (the taint manager evicts what does not
        tolerate a NoExecute taint of its node)."""
        try:
            return self.store.get("pods", name, "default")
        except ApiError:
            return None

    def bind(self, name: str, node_name: str, gpus: list[int]) -> dict[str, Any] | None:
        """What the binding subresource does: ``spec.nodeName`` and usher's annotation."""
        stored = self.store.get_stored("pods", name, "default")
        pod = stored.copy()
        pod["spec"]["nodeName"] = node_name
        pod["metadata"].setdefault("annotations", {})["usher/gpus"] = ",".join(map(str, gpus))
        self.store.commit_update(self.store.resource_type("pods"), stored, pod)
        self.controllers.step()
        return self.pod(name)


def usher_controller() -> KubeController:
    client = types.SimpleNamespace(pool_size=8)  # never called: nothing here is sent
    ctrl = KubeController(client, identity="usher-0", clock=lambda: NOW, elect=False)  # type: ignore[arg-type]
    ctrl.mirror.set_config(parse_queue_config(QUEUES), None)
    return ctrl


def deliver(ctrl: KubeController, pod: dict[str, Any]) -> None:
    """What the controller's pod informers deliver for ``pod``: every pod of usher's, and every
    assigned pod that has not finished."""
    phase = (pod.get("status") or {}).get("phase")
    if pod["spec"].get("schedulerName") == SCHEDULER_NAME:
        ctrl._apply(Source.PODS, DeltaType.ADDED, pod)
    if pod["spec"].get("nodeName") and phase not in ("Succeeded", "Failed"):
        ctrl._apply(Source.ASSIGNED_PODS, DeltaType.ADDED, pod)


def refused(pod: dict[str, Any]) -> str | None:
    status = pod.get("status") or {}
    return f"{status.get('reason')}: {status.get('message')}" if status.get("phase") == "Failed" else None


def _gpu_pod(name: str, gpus: int, node: str | None = None, fraction: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"usher/queue": "q"},
                     "annotations": {"usher/gpu-fraction": fraction} if fraction else {}},
        "spec": {"restartPolicy": "Never", "schedulerName": SCHEDULER_NAME, **({"nodeName": node} if node else {}),
                 "containers": [{"name": "c", "image": "busybox:1.36", "resources": {"limits": {GPU_RESOURCE: str(gpus)}}}]},
    }


def _the_issue(incremental: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], bool]:
    """The issue's node: two pods bound to it that ask for one GPU each and a share of one
    (``usher/gpu-fraction: 0.5``), then a pod asking for seven GPUs."""
    gpu_node = {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n0", "labels": {"nvidia.com/gpu.product": "H100"}}, "spec": {},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", GPU_RESOURCE: "8", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
    }
    shares = [_gpu_pod(f"share-{i}", 1, "n0", "0.5") for i in range(2)]
    return [gpu_node], shares, _gpu_pod("candidate", 7), incremental


@example(_the_issue(False))
@example(_the_issue(True))
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cluster())
def test_a_node_usher_binds_a_pod_to_is_one_whose_kubelet_admits_it(world) -> None:
    nodes, existing, candidate, incremental = world
    kubelet = Kubelet()
    ctrl = usher_controller()
    for n in nodes:
        kubelet.create("nodes", n)
        ctrl._apply(Source.NODES, DeltaType.ADDED, n)
    if incremental:
        ctrl.mirror.rebuild(NOW)  # the pods arrive one by one after the first sync, not in it
    for p in existing:
        kubelet.create("pods", p)
    for p in existing:
        left = kubelet.pod(p["metadata"]["name"])  # as the kubelet left it: running, refused or evicted
        if left is not None:
            deliver(ctrl, left)
    if ctrl.mirror.dirty:
        ctrl.mirror.rebuild(NOW)
    pending = kubelet.create("pods", candidate)  # as the API server defaulted it
    deliver(ctrl, pending)
    view = ctrl.mirror.gangs[key_of(pending)].pods["candidate"]
    if view.problem is not None:
        return  # refused as written (InvalidRequest): never bound
    binds = [d for d in ctrl.mirror.engine.cycle(NOW).decisions if d.kind == DecisionKind.BIND and d.placements]
    assert all(d.job is binds[0].job for d in binds)
    if not binds:
        return
    (placement,) = binds[0].placements
    target = ctrl.state.nodes[placement.node_id].name
    note(f"usher binds the candidate to {target} on GPUs {placement.gpus}")
    for p in existing:
        note(f"{p['metadata']['name']}: {(kubelet.pod(p['metadata']['name']) or {}).get('status')}")
    bound = kubelet.bind("candidate", target, placement.gpus)
    assert bound is not None and not bound["metadata"].get("deletionTimestamp"), f"the taint manager evicted it from {target}"
    assert refused(bound) is None, f"the kubelet on {target} refused what usher bound there: {refused(bound)}"

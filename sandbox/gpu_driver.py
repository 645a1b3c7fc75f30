"""A stand-in for NVIDIA's DRA driver (``dra-driver-nvidia-gpu``): its DeviceClass, one
ResourceSlice per GPU node, and its kubelet plugin's refusal to prepare what it must not.

The shapes it publishes are listed at the top of :mod:`usher.sandbox.dra` (the contract usher's
allocator codes against). They come from what the sandbox knows of a node: its
``nvidia.com/gpu`` allocatable count (the GPUs, ``gpu-0`` ..), ``nvidia.com/gpu.product`` and
``nvidia.com/gpu.memory`` labels (product, memory), ``usher/nvlink`` annotation (islands) and
``usher/gpu-health`` annotation: an unhealthy GPU stays in the slice with the DRA device taint
(KEP-5055) NVIDIA's NVML health monitor gives it (``gpu.nvidia.com/xid`` = the XID, or
``gpu.nvidia.com/gpu-lost``; effect ``NoSchedule``). So a node created by a scenario, by a test or by hand
gets the same slice, and a change to those fields republishes it with the pool's next
generation. A node that loses its GPUs loses its slice; a deleted node's slice goes with it
(owner reference, garbage collector).

:func:`prepare_problem` is the kubelet plugin's ``NodePrepareResources``: it refuses devices of
another node's pool, devices this node does not publish and a device another
allocated claim holds already (no device is prepared for two claims unless both ask for admin
access), with words that name the device and the holder.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from .dra import (
    ISLAND_ATTRIBUTE,
    NVIDIA_CLASS,
    NVIDIA_CLASS_SELECTOR,
    NVIDIA_DRIVER,
    allocated_devices,
    allocation,
)
from . import quantity
from .kinds import RESOURCE_TYPES, Resource
from .parts import Host, Part
from .store import ApiError, Change, Store
from .usher_names import GPU_RESOURCE, Annotation, Label

JsonObject = dict[str, Any]

SLICE_RT = RESOURCE_TYPES[Resource.RESOURCESLICES]
CLASS_RT = RESOURCE_TYPES[Resource.DEVICECLASSES]
CLAIM_RT = RESOURCE_TYPES[Resource.RESOURCECLAIMS]
NODE_RT = RESOURCE_TYPES[Resource.NODES]
GPU_HEALTH_ANNOTATION = "usher/gpu-health"
"""GPU index -> why it is unhealthy (JSON), as ``usher agent`` writes it on a node."""

DRIVER_VERSION = "580.95.5"
CUDA_DRIVER_VERSION = "13.0.0"
_ARCHITECTURES = (  # product name words -> (architecture, CUDA compute capability), newest first
    (("GB300", "B300", "GB200", "B200", "B100"), ("Blackwell", "10.0.0")),
    (("GH200", "H200", "H100", "H800", "H20"), ("Hopper", "9.0.0")),
    (("L40", "L4"), ("Ada Lovelace", "8.9.0")),
    (("A100", "A800", "A30"), ("Ampere", "8.0.0")),
    (("A40", "A10", "A16", "A2"), ("Ampere", "8.6.0")),
    (("T4",), ("Turing", "7.5.0")),
    (("V100",), ("Volta", "7.0.0")),
)


def device_class() -> JsonObject:
    """The DeviceClass NVIDIA's chart installs for whole GPUs."""
    return {"apiVersion": CLASS_RT.api_version, "kind": "DeviceClass", "metadata": {"name": NVIDIA_CLASS},
            "spec": {"selectors": [{"cel": {"expression": NVIDIA_CLASS_SELECTOR}}]}}


def install(store: Store) -> None:
    """Create the DeviceClass unless it exists already."""
    if not store.exists(CLASS_RT, NVIDIA_CLASS):
        store.create(CLASS_RT, device_class())


def _architecture(product: str) -> tuple[str, str]:
    words = product.upper().replace("-", " ").split()
    for names, found in _ARCHITECTURES:
        if any(word.startswith(name) for word in words for name in names):
            return found
    return "Unknown", "0.0.0"


def _islands(node: JsonObject, gpus: int) -> dict[int, int]:
    """GPU index -> island index from ``usher/nvlink`` (no annotation, or one unreadable: one island)."""
    text = ((node["metadata"].get("annotations") or {}).get(Annotation.NVLINK) or "").strip()
    found: dict[int, int] = {}
    for k, island in enumerate(text.split(";") if text else []):
        for index in island.split(","):
            if index.strip().isdigit():
                found.setdefault(int(index), k)
    return {i: found.get(i, 0) for i in range(gpus)}


def _unhealthy(node: JsonObject) -> dict[int, str]:
    """GPU index -> why it is unhealthy, from ``usher/gpu-health`` (unreadable: none)."""
    text = (node["metadata"].get("annotations") or {}).get(GPU_HEALTH_ANNOTATION)
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        return {}
    return {int(k): str(v) for k, v in data.items() if str(k).isdigit()} if isinstance(data, dict) else {}


_XID = re.compile(r"\bXID\s*(\d+)", re.IGNORECASE)


def health_taint(reason: str) -> JsonObject:
    """The device taint NVIDIA's health monitor puts on an unhealthy GPU: ``gpu.nvidia.com/xid``
    with the XID as value when the reason names one, else ``gpu.nvidia.com/gpu-lost``; both
    ``NoSchedule`` (a critical event)."""
    found = _XID.search(reason)
    if found:
        return {"key": f"{NVIDIA_DRIVER}/xid", "value": found.group(1), "effect": "NoSchedule"}
    return {"key": f"{NVIDIA_DRIVER}/gpu-lost", "effect": "NoSchedule"}


def _gpu_count(node: JsonObject) -> int:
    raw = str(((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE, "0"))
    return int(raw) if raw.isdigit() else 0


def node_devices(node: JsonObject) -> list[JsonObject]:
    """The devices NVIDIA's driver would publish for ``node``'s GPUs (unhealthy ones tainted)."""
    name = node["metadata"]["name"]
    labels = node["metadata"].get("labels") or {}
    gpus = _gpu_count(node)
    product = str(labels.get(Label.GPU_PRODUCT) or "NVIDIA GPU").replace("-", " ")
    architecture, capability = _architecture(product)
    memory_mib = str(labels.get(Label.GPU_MEMORY) or "")
    islands, unhealthy = _islands(node, gpus), _unhealthy(node)
    devices = []
    for minor in range(gpus):
        attributes: JsonObject = {
            "type": {"string": "gpu"},
            "uuid": {"string": f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{name}.gpu{minor}.usher-sandbox')}"},
            "productName": {"string": product},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": architecture},
            "cudaComputeCapability": {"version": capability},
            "driverVersion": {"version": DRIVER_VERSION},
            "cudaDriverVersion": {"version": CUDA_DRIVER_VERSION},
            "resource.kubernetes.io/pciBusID": {"string": f"0000:{0x18 + 0x10 * minor:02x}:00.0"},
            "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{0x10 + 0x10 * (minor // 2):02x}"},
            ISLAND_ATTRIBUTE: {"int": islands[minor]},
        }
        device: JsonObject = {"name": f"gpu-{minor}", "attributes": attributes}
        if memory_mib.isdigit():
            # as the API server stores it (81920Mi is kept as 80Gi): the driver compares what it
            # would publish with what is stored, and must not see a change where there is none
            device["capacity"] = {"memory": {"value": str(quantity.parse(f"{memory_mib}Mi"))}}
        if minor in unhealthy:
            device["taints"] = [health_taint(unhealthy[minor])]
        devices.append(device)
    return devices


class GpuDriver(Part):
    """Publishes one ResourceSlice per GPU node (see the module docstring); works on the nodes
    that changed (and the nodes of slices that changed), all of them on a resync."""

    resources = (Resource.NODES, Resource.RESOURCESLICES)

    def __init__(self, mgr: Host) -> None:
        super().__init__(mgr)
        self._nodes: set[str] = set()
        self._all = True

    def on_change(self, change: Change) -> None:
        obj = change.new.obj
        if change.rt.resource == Resource.NODES:
            self._nodes.add(obj["metadata"]["name"])
        elif change.rt.resource == Resource.RESOURCESLICES and (obj.get("spec") or {}).get("driver") == NVIDIA_DRIVER:
            self._nodes.add(str(obj["spec"].get("nodeName") or ""))

    def resync(self) -> None:
        self._all = True

    def dirty(self) -> bool:
        return self._all or bool(self._nodes)

    def reconcile(self) -> None:
        names = None if self._all else set(self._nodes)
        self._all, self._nodes = False, set()
        self.mgr.guard(lambda: self._sync(names))

    def sync(self) -> None:  # pragma: no cover - reconcile is overridden
        self._sync(None)

    def _slices(self, names: set[str] | None) -> dict[str, Any]:
        if names is not None and len(names) == 1:
            found = self.store.list(SLICE_RT, field_selector=f"spec.nodeName={next(iter(names))}").items
        else:
            found = self.stored(SLICE_RT)
        return {s.obj["spec"].get("nodeName", ""): s for s in found
                if (s.obj.get("spec") or {}).get("driver") == NVIDIA_DRIVER and s.obj["spec"].get("nodeName")
                and (names is None or s.obj["spec"]["nodeName"] in names)}

    def _sync(self, names: set[str] | None) -> None:
        """Publish, update or remove the slice of each node of ``names`` (None: every node)."""
        slices = self._slices(names)
        if names is None:
            nodes = {s.obj["metadata"]["name"]: s.obj for s in self.stored(NODE_RT)}
        else:
            nodes = {}
            for name in names:
                try:
                    nodes[name] = self.store.get_stored(NODE_RT, name, None).obj
                except ApiError:
                    pass
        for name, node in nodes.items():
            devices = node_devices(node) if _gpu_count(node) else None
            stored = slices.get(name)
            if devices is None:
                if stored is not None:
                    self._delete(stored.obj)
            elif stored is None:
                self._create(node, devices)
            elif (stored.obj.get("spec") or {}).get("devices") != devices:
                new = stored.copy()
                pool = new["spec"]["pool"]
                pool["generation"] = int(pool.get("generation", 0)) + 1
                new["spec"]["devices"] = devices
                self.store.update_stored(SLICE_RT, new, None)
        for name, stored in slices.items():
            if name not in nodes:
                self._delete(stored.obj)

    def _create(self, node: JsonObject, devices: list[JsonObject]) -> None:
        meta = node["metadata"]
        self.store.create(SLICE_RT, {
            "apiVersion": SLICE_RT.api_version, "kind": "ResourceSlice",
            "metadata": {"generateName": f"{meta['name']}-{NVIDIA_DRIVER}-",
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": meta["name"],
                                              "uid": meta.get("uid", ""), "controller": True}]},
            "spec": {"driver": NVIDIA_DRIVER, "nodeName": meta["name"],
                     "pool": {"name": meta["name"], "generation": 0, "resourceSliceCount": 1}, "devices": devices},
        })

    def _delete(self, obj: JsonObject) -> None:
        try:
            self.store.delete_stored(SLICE_RT, obj["metadata"]["name"], None)
        except ApiError:
            pass


# --------------------------------------------------------------------------- the kubelet plugin


def prepare_problem(store: Store, claim: JsonObject, node: JsonObject) -> str | None:
    """What NVIDIA's kubelet plugin on ``node`` says preparing ``claim``'s GPUs (None: prepared)."""
    node_name = node["metadata"]["name"]
    published = {d["name"] for d in node_devices(node)}
    ns, name = claim["metadata"].get("namespace", ""), claim["metadata"]["name"]
    results = [r for r in ((allocation(claim) or {}).get("devices") or {}).get("results") or []
               if isinstance(r, dict) and r.get("driver") == NVIDIA_DRIVER]
    for result in results:
        pool, device = result.get("pool", ""), result.get("device", "")
        if pool != node_name:
            return (f"device {device} of pool {pool} is not a device of this node ({node_name}): "
                    f"the claim is allocated to another node's GPUs")
        if device not in published:
            return f"device {device} is not allocatable on node {node_name} (this node publishes no such device)"
        if result.get("adminAccess"):
            continue
        for other in store.list(CLAIM_RT).items:
            ometa = other.obj["metadata"]
            if ometa.get("uid") == claim["metadata"].get("uid"):
                continue
            held = [r for r in ((allocation(other.obj) or {}).get("devices") or {}).get("results") or []
                    if isinstance(r, dict) and not r.get("adminAccess")]
            if (NVIDIA_DRIVER, pool, device) in allocated_devices({"status": {"allocation": {"devices": {"results": held}}}}):
                return (f"device {device} of pool {pool} is already allocated to claim "
                        f"{ometa.get('namespace', '')}/{ometa['name']}; it cannot be prepared for {ns}/{name}")
    return None

"""usher places pods by their volumes and binds a gang's claims all or none, on the sandbox.

Over real HTTP: the sandbox's PV controller and CSI provisioner stand-in do what a cluster's do
(a ``WaitForFirstConsumer`` claim is provisioned only once ``volume.kubernetes.io/selected-node``
is set, on that node's topology), and usher must set it for the whole gang, wait, and bind the
pods only once every claim is bound. What a user sees is checked: where pods run, which volume
each claim got, the PodScheduled reason while a gang waits, and that no gang is ever partly bound.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sandboxes import UsherOnSandbox, node, pod, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)

from usher.sandbox.provisioner import LOCAL_DRIVER, ZONAL_DRIVER

PODS = "/api/v1/namespaces/default/pods"
PVCS = "/api/v1/namespaces/default/persistentvolumeclaims"
PVS = "/api/v1/persistentvolumes"
CLASSES = "/apis/storage.k8s.io/v1/storageclasses"
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def storage_class(name: str, driver: str = LOCAL_DRIVER, **params: str) -> dict[str, Any]:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
            "provisioner": driver, "volumeBindingMode": "WaitForFirstConsumer", "parameters": params}


def claim(name: str, klass: str = "standard", size: str = "10Gi", modes: tuple[str, ...] = ("ReadWriteOnce",),
          volume: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": list(modes), "resources": {"requests": {"storage": size}},
                            "storageClassName": klass}
    if volume:
        spec["volumeName"] = volume
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": spec}


def local_volume(name: str, host: str, klass: str = "manual", size: str = "10Gi") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": {
        "capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "storageClassName": klass,
        "persistentVolumeReclaimPolicy": "Retain", "local": {"path": f"/mnt/{name}"},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": HOST, "operator": "In", "values": [host]}]}]}}}}


def worker(name: str, gpus: int, claims: list[str], gang: str | None = None, size: int = 0,
           ephemeral: bool = False) -> dict[str, Any]:
    vols: list[dict[str, Any]] = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    if ephemeral:
        vols.append({"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}})
    body = pod(name, gpus, scheduler="usher", volumes=vols)
    body["metadata"]["labels"] = {"usher/queue": "research", **({"usher/gang": gang, "usher/gang-size": str(size)} if gang else {})}
    return body


async def _claims(sb: UsherOnSandbox) -> dict[str, dict[str, Any]]:
    return {c["metadata"]["name"]: c for c in (await sb.req("GET", PVCS))["items"]}


async def _volumes(sb: UsherOnSandbox) -> dict[str, dict[str, Any]]:
    return {v["metadata"]["name"]: v for v in (await sb.req("GET", PVS))["items"]}


def _scheduled(p: dict[str, Any]) -> tuple[str, str]:
    c = next((c for c in p["status"].get("conditions", []) if c["type"] == "PodScheduled"), {})
    return c.get("reason", ""), c.get("message", "")


def _host_of(volume: dict[str, Any]) -> str:
    terms = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    return terms[0]["matchExpressions"][0]["values"][0]


async def _gang(sb: UsherOnSandbox, gang: str) -> list[dict[str, Any]]:
    return await sb.pods(f"usher/gang={gang}")


def _partly_bound(pods: list[dict[str, Any]]) -> bool:
    bound = sum(1 for p in pods if p["spec"].get("nodeName"))
    return 0 < bound < len(pods)


async def test_a_gangs_delayed_claims_are_all_provisioned_and_bound_before_any_pod_binds(sb: UsherOnSandbox) -> None:
    for n in ("gpu-1", "gpu-2"):
        await sb.create("/api/v1/nodes", node(n))
    await sb.create(CLASSES, storage_class("slow-local", **{"sandbox.usher/delay": "30s"}))
    await sb.start_usher(sb.tmp)
    for i in range(4):
        await sb.create(PVCS, claim(f"ckpt-{i}", klass="slow-local"))
        await sb.create(PODS, worker(f"w-{i}", 4, [f"ckpt-{i}"], gang="train", size=4))

    async def all_selected() -> Any:
        claims = await _claims(sb)
        notes = [(c["metadata"].get("annotations") or {}).get("volume.kubernetes.io/selected-node") for c in claims.values()]
        return claims if all(notes) else None

    claims = await sb.until(all_selected, "usher selects a node for every claim of the gang")
    waiting = await _gang(sb, "train")
    assert not any(p["spec"].get("nodeName") for p in waiting), "no pod binds while its gang's claims are unbound"
    assert {c["status"]["phase"] for c in claims.values()} == {"Pending"}
    reason, message = await sb.until(lambda: _waiting_said(sb), "the pods say what they wait for")
    assert "waiting for provisioning of pvc/ckpt-" in message and "no pod of the gang is bound before all its claims are" in message

    sb.advance(31)  # the provisioner takes 30 s
    async def all_running() -> Any:
        pods = await _gang(sb, "train")
        return pods if all(p["status"].get("phase") == "Running" for p in pods) else None

    pods = await sb.until(all_running, "the gang runs once its claims are bound")
    claims, volumes = await _claims(sb), await _volumes(sb)
    for p in pods:
        c = claims[p["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]]
        assert c["status"]["phase"] == "Bound"
        assert _host_of(volumes[c["spec"]["volumeName"]]) == p["spec"]["nodeName"], "each volume is on its pod's node"


async def _waiting_said(sb: UsherOnSandbox) -> tuple[str, str] | None:
    for p in await _gang(sb, "train"):
        said = _scheduled(p)
        if "waiting for provisioning" in said[1]:
            return said
    return None


async def test_a_failed_claim_leaves_no_pod_bound_and_the_provisioned_ones_pin_the_next_try(sb: UsherOnSandbox) -> None:
    for n in ("gpu-1", "gpu-2"):
        await sb.create("/api/v1/nodes", node(n))
    await sb.start_usher(sb.tmp)
    sb.server.controllers.provisioner.fail("default", "ckpt-3", "no space left in pool-7")
    seen_partial = []

    async def watch() -> None:
        while True:
            seen_partial.append(_partly_bound(await _gang(sb, "train")))
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    try:
        for i in range(4):
            await sb.create(PVCS, claim(f"ckpt-{i}"))
            await sb.create(PODS, worker(f"w-{i}", 4, [f"ckpt-{i}"], gang="train", size=4))
        events = await sb.until(lambda: _gang_events(sb, "provisioning failed for pvc/ckpt-3"), "the gang is told the claim failed")
        assert "provisioning failed for pvc/ckpt-3 on node" in events[0]["message"]
        assert "no space left in pool-7" in events[0]["message"]

        async def all_running() -> Any:
            pods = await _gang(sb, "train")
            return pods if all(p["status"].get("phase") == "Running" for p in pods) else None

        pods = await sb.until(all_running, "the gang runs on its second try")
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    assert not any(seen_partial), "no moment shows the gang partly bound"
    claims, volumes = await _claims(sb), await _volumes(sb)
    for p in pods:
        c = claims[p["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]]
        assert _host_of(volumes[c["spec"]["volumeName"]]) == p["spec"]["nodeName"]


async def _gang_events(sb: UsherOnSandbox, words: str) -> list[dict[str, Any]]:
    items = (await sb.req("GET", "/api/v1/namespaces/default/events"))["items"]
    return [e for e in items if e["involvedObject"]["kind"] == "Pod" and words in (e.get("message") or "")]


async def test_a_local_volume_pins_its_pod_to_its_node(sb: UsherOnSandbox) -> None:
    for n in ("gpu-1", "gpu-2"):
        await sb.create("/api/v1/nodes", node(n))
    await sb.create(CLASSES, {**storage_class("manual"), "provisioner": "kubernetes.io/no-provisioner"})
    await sb.create(PVS, local_volume("disk-2", "gpu-2"))
    await sb.start_usher(sb.tmp)
    # gpu-1 is busier: usher's bin packing would put the pod there, were it not for its volume
    await sb.create(PODS, pod("other", 4, node_name="gpu-1"))
    await sb.create(PVCS, claim("data", klass="manual"))
    await sb.create(PODS, worker("reader", 2, ["data"]))
    p = await sb.pod_where("reader", lambda p: p["status"].get("phase") == "Running")
    assert p["spec"]["nodeName"] == "gpu-2"
    assert (await _claims(sb))["data"]["spec"]["volumeName"] == "disk-2"


def zonal_volume(name: str, zone: str, size: str = "10Gi") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": {
        "capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "storageClassName": "disks",
        "persistentVolumeReclaimPolicy": "Retain", "csi": {"driver": ZONAL_DRIVER, "volumeHandle": name},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}]}}}}


async def test_zonal_volumes_keep_a_gang_in_their_zone_and_say_so_when_it_cannot_fit(sb: UsherOnSandbox) -> None:
    for n, zone in (("gpu-1", "a"), ("gpu-2", "a"), ("gpu-3", "b"), ("gpu-4", "b")):
        await sb.create("/api/v1/nodes", node(n, labels={ZONE: zone}))
    await sb.create(CLASSES, {**storage_class("disks", driver=ZONAL_DRIVER), "volumeBindingMode": "Immediate"})
    await sb.start_usher(sb.tmp)
    # the gang's dataset disks were made in zone b; its claims name them
    names = ["data-0", "data-1", "more-0", "more-1"]
    for name in names:
        await sb.create(PVS, zonal_volume(f"disk-{name}", "b"))
        await sb.create(PVCS, claim(name, klass="disks", volume=f"disk-{name}"))
    await sb.until(lambda: _all_bound(sb, names), "the claims are bound to their zone-b disks")
    for i in range(2):
        await sb.create(PODS, worker(f"w-{i}", 8, [f"data-{i}"], gang="zonal", size=2))

    async def running() -> Any:
        pods = await _gang(sb, "zonal")
        return pods if len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods) else None

    pods = await sb.until(running, "the gang runs in zone b")
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["gpu-3", "gpu-4"]
    # a second gang of the same shape on zone-b disks cannot fit while the first runs: it says why
    for i in range(2):
        await sb.create(PODS, worker(f"x-{i}", 8, [f"more-{i}"], gang="second", size=2))

    async def told() -> Any:
        pods = await _gang(sb, "second")
        said = [_scheduled(p) for p in pods]
        return said if len(pods) == 2 and all("volume node affinity conflict" in m for _, m in said) else None

    said = await sb.until(told, "the second gang says its volumes keep it in zone b")
    assert not any(p["spec"].get("nodeName") for p in await _gang(sb, "second"))
    assert "2 nodes (gpu-1, gpu-2) had volume node affinity conflict" in said[0][1]


async def _all_bound(sb: UsherOnSandbox, names: list[str]) -> bool:
    claims = await _claims(sb)
    return all(claims.get(n, {}).get("status", {}).get("phase") == "Bound" for n in names)


async def test_a_read_write_once_pod_claim_waits_for_the_pod_that_uses_it(sb: UsherOnSandbox) -> None:
    await sb.create("/api/v1/nodes", node("gpu-1"))
    await sb.start_usher(sb.tmp)
    await sb.create(PVCS, claim("solo", modes=("ReadWriteOncePod",)))
    await sb.create(PODS, worker("first", 1, ["solo"]))
    await sb.pod_where("first", lambda p: p["status"].get("phase") == "Running")
    await sb.create(PODS, worker("second", 1, ["solo"]))
    p = await sb.pod_where("second", lambda p: "ReadWriteOncePod" in _scheduled(p)[1])
    assert "claim default/solo is ReadWriteOncePod and pod default/first already uses it" in _scheduled(p)[1]
    assert not p["spec"].get("nodeName")
    await sb.req("DELETE", f"{PODS}/first")
    p = await sb.pod_where("second", lambda p: p["status"].get("phase") == "Running")
    assert p["spec"]["nodeName"] == "gpu-1"


async def test_a_new_leader_finishes_or_undoes_a_prebind_never_half(sb: UsherOnSandbox) -> None:
    for n in ("gpu-1", "gpu-2"):
        await sb.create("/api/v1/nodes", node(n))
    await sb.create(CLASSES, storage_class("slow-local", **{"sandbox.usher/delay": "30s"}))
    await sb.start_usher(sb.tmp)
    for i in range(2):
        await sb.create(PVCS, claim(f"c-{i}", klass="slow-local"))
        await sb.create(PODS, worker(f"w-{i}", 8, [f"c-{i}"], gang="train", size=2))
    await sb.until(lambda: _waiting_said(sb), "the first leader waits on the claims")
    # the leader dies mid-PreBind; a new one starts
    sb.task.cancel()
    await asyncio.gather(sb.task, return_exceptions=True)
    await sb.usher.client.aclose()
    await _restart(sb)
    assert not _partly_bound(await _gang(sb, "train"))
    sb.advance(31)

    async def running() -> Any:
        pods = await _gang(sb, "train")
        return pods if all(p["status"].get("phase") == "Running" for p in pods) else None

    pods = await sb.until(running, "the new leader binds the gang once its claims are bound")
    claims, volumes = await _claims(sb), await _volumes(sb)
    for p in pods:
        c = claims[p["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]]
        assert _host_of(volumes[c["spec"]["volumeName"]]) == p["spec"]["nodeName"]


async def _restart(sb: UsherOnSandbox) -> None:
    from usher.engine.backends.kube.client import KubeClient
    from usher.engine.backends.kube.controller import KubeController

    client = await KubeClient.connect(str(sb.kubeconfig))
    sb.usher = KubeController(client, identity="usher-1", clock=sb.clock.now, elect=False, status_interval=0.0)
    sb.task = asyncio.create_task(sb.usher.run())
    await asyncio.wait_for(sb.usher.synced.wait(), 10)


async def test_a_gang_whose_volumes_fit_nowhere_says_which_nodes_are_out_for_what(sb: UsherOnSandbox) -> None:
    """Each node is counted once, under the first reason that keeps it out, as kube-scheduler's
    "0/4 nodes are available: ..." does: its nodeSelector leaves gpu-1 and gpu-2, and on those the
    `zonal` class cannot provision (they carry no zone label, so no CSIStorageCapacity of the class
    serves them). The words name those nodes, the claim, the class and the label the capacities
    select by, and do not call the volumes' reason a node constraint."""
    for n, labels in (("gpu-1", {"pool": "big"}), ("gpu-2", {"pool": "big"}),
                      ("gpu-3", {"pool": "small"}), ("gpu-4", {"pool": "small", ZONE: "a"})):
        await sb.create("/api/v1/nodes", node(n, labels=labels))
    await sb.start_usher(sb.tmp)
    for i in range(2):
        await sb.create(PVCS, claim(f"data-{i}", klass="zonal"))
        body = worker(f"w-{i}", 8, [f"data-{i}"], gang="nowhere", size=2)
        body["spec"]["nodeSelector"] = {"pool": "big"}
        await sb.create(PODS, body)

    async def told() -> Any:
        said = [_scheduled(p) for p in await _gang(sb, "nowhere")]
        return said if len(said) == 2 and all("storage" in m for _, m in said) else None

    said = await sb.until(told, "the gang says why no node can take it")
    reason, message = said[0]
    assert reason == "Unschedulable"
    assert "of 4 nodes, 4 excluded (2 nodes do not match its nodeSelector, 2 nodes (gpu-1, gpu-2) did not have " \
           "enough free storage: claim default/data-" in message, message
    assert f"of class 'zonal', whose CSIStorageCapacities select nodes by {ZONE}, and none serves these nodes" in message
    assert "node constraints" not in message
    assert not any(p["spec"].get("nodeName") for p in await _gang(sb, "nowhere"))

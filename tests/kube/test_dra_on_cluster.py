"""usher allocates ResourceClaims (resource.k8s.io/v1) for whole gangs, on the sandbox over HTTP.

A pod that asks its GPUs through a claim asks no ``nvidia.com/gpu``: without usher reading its
claims it would be placed anywhere and never start (no one allocates the claim). Here usher
places it on devices that exist, writes each claim's allocation and reservation before any pod
of the gang binds, undoes them all when one write is refused, and says why a pod waits when its
claim asks what no node has or what usher does not implement.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import yaml
from kubectl import Kubectl
from sandboxes import UsherOnSandbox, node, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)

from usher.sandbox.faults import FaultKind

PODS = "/api/v1/namespaces/default/pods"
DRA = "/apis/resource.k8s.io/v1"
CLAIMS = f"{DRA}/namespaces/default/resourceclaims"
TEMPLATES = f"{DRA}/namespaces/default/resourceclaimtemplates"
ISLANDS = "0,1,2,3;4,5,6,7"


def gpu_node(name: str) -> dict[str, Any]:
    """A GPU node: the sandbox's NVIDIA driver stand-in publishes its ResourceSlice."""
    body = node(name)
    body["metadata"]["labels"].update({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"})
    body["metadata"]["annotations"] = {"usher/nvlink": ISLANDS}
    return body


async def setup(sb: UsherOnSandbox, *names: str) -> None:
    """The nodes, and (from the driver stand-in) NVIDIA's DeviceClass and each node's slice."""
    for n in names:
        await sb.create("/api/v1/nodes", gpu_node(n))

    async def published() -> bool:
        slices = (await sb.req("GET", f"{DRA}/resourceslices"))["items"]
        return {s["spec"].get("nodeName") for s in slices} >= set(names) and \
            await sb.get(f"{DRA}/deviceclasses/gpu.nvidia.com") is not None

    await sb.until(published, "the driver stand-in publishes the nodes' GPUs")


def claim_spec(count: int, selectors: tuple[str, ...] = (), klass: str = "gpu.nvidia.com") -> dict[str, Any]:
    exact: dict[str, Any] = {"deviceClassName": klass, "allocationMode": "ExactCount", "count": count}
    if selectors:
        exact["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"devices": {"requests": [{"name": "gpus", "exactly": exact}]}}


def claim_pod(name: str, *, template: str | None = None, claim: str | None = None, gang: str | None = None,
              size: int = 1, queue: str = "research") -> dict[str, Any]:
    entry: dict[str, Any] = {"name": "gpus"}
    if template:
        entry["resourceClaimTemplateName"] = template
    else:
        entry["resourceClaimName"] = claim
    labels = {"usher/queue": queue}
    if gang:
        labels.update({"usher/gang": gang, "usher/gang-size": str(size)})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"schedulerName": "usher", "restartPolicy": "Never", "resourceClaims": [entry],
                     "containers": [{"name": "main", "image": "busybox:1.36", "resources": {"claims": [{"name": "gpus"}]}}]}}


async def make_claim(sb: UsherOnSandbox, name: str, spec: dict[str, Any]) -> None:
    await sb.create(CLAIMS, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
                             "spec": spec})


def scheduled(p: dict[str, Any]) -> tuple[str, str]:
    c = next((c for c in p["status"].get("conditions") or [] if c["type"] == "PodScheduled"), {})
    return c.get("reason", ""), c.get("message", "")


async def test_a_pod_with_a_claim_template_for_two_gpus_gets_two_gpus_of_one_island_and_runs(sb: UsherOnSandbox) -> None:
    await setup(sb, "gpu-1")
    await sb.start_usher(sb.tmp)
    # as a user applies them, with kubectl
    kubectl = Kubectl(sb.kubeconfig)
    manifests = [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                  "metadata": {"name": "two-gpus", "namespace": "default"}, "spec": {"spec": claim_spec(2)}},
                 {**claim_pod("train-0", template="two-gpus")}]
    manifests[1]["metadata"]["namespace"] = "default"
    await asyncio.to_thread(kubectl.ok, "apply", "-f", "-", stdin=yaml.safe_dump_all(manifests))
    p = await sb.pod_where("train-0", lambda p: p["status"].get("phase") == "Running")
    listed = await asyncio.to_thread(kubectl.ok, "get", "resourceclaims", "-n", "default")
    assert re.search(r"^train-0-gpus-\S+\s+allocated,reserved\s", listed, re.M), listed
    made = next(s["resourceClaimName"] for s in p["status"]["resourceClaimStatuses"] if s["name"] == "gpus")
    claim = await sb.get(f"{CLAIMS}/{made}")
    results = claim["status"]["allocation"]["devices"]["results"]
    devices = sorted(int(r["device"].removeprefix("gpu-")) for r in results)
    assert len(devices) == 2 and {r["driver"] for r in results} == {"gpu.nvidia.com"}
    assert devices[0] // 4 == devices[1] // 4, f"one NVLink island ({ISLANDS}): {devices}"
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "train-0", "uid": p["metadata"]["uid"]}]
    assert p["spec"]["nodeName"] == "gpu-1"
    assert sorted(int(i) for i in p["metadata"]["annotations"]["usher/gpus"].split(",")) == devices


async def test_a_gangs_claims_are_all_allocated_before_any_pod_binds(sb: UsherOnSandbox) -> None:
    await setup(sb, "gpu-1", "gpu-2")
    await sb.start_usher(sb.tmp)
    for i in range(4):
        await make_claim(sb, f"w-{i}", claim_spec(4))
    for i in range(4):
        await sb.create(PODS, claim_pod(f"w-{i}", claim=f"w-{i}", gang="four", size=4))

    async def all_bound() -> Any:
        pods = [await sb.get(f"{PODS}/w-{i}") for i in range(4)]
        return pods if all(p["spec"].get("nodeName") for p in pods) else None

    pods = await sb.until(all_bound, "the gang is bound")
    binds = [r for r in sb.server.requests if r.method == "POST" and r.path.endswith("/binding")]
    allocations = [r for r in sb.server.requests if r.method == "PATCH" and "/resourceclaims/" in r.path]
    assert len(allocations) >= 4 and len(binds) == 4
    first_bind = min(sb.server.requests.index(r) for r in binds)
    assert all(sb.server.requests.index(r) < first_bind for r in allocations[:4]), "every claim before any bind"
    used: set[tuple[str, str]] = set()
    for p in pods:
        claim = await sb.get(f"{CLAIMS}/{p['metadata']['name']}")
        for r in claim["status"]["allocation"]["devices"]["results"]:
            assert (p["spec"]["nodeName"], r["device"]) not in used, "no device given twice"
            used.add((p["spec"]["nodeName"], r["device"]))
    assert len(used) == 16


async def test_first_available_falls_back_to_the_alternative_the_cluster_has(sb: UsherOnSandbox) -> None:
    """A claim asks 4 H100s, or else 4 A100s (firstAvailable): on a cluster of A100 nodes only,
    usher places the pod there and allocates the second alternative, and the allocation result
    names the subrequest (`gpus/a100`), as the API server requires and the kubelet reads."""
    body = gpu_node("a100-1")
    body["metadata"]["labels"].update({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.memory": "81920"})
    await sb.create("/api/v1/nodes", body)

    async def published() -> bool:
        return bool((await sb.req("GET", f"{DRA}/resourceslices"))["items"])

    await sb.until(published, "the driver stand-in publishes the node's GPUs")
    await sb.start_usher(sb.tmp)
    await make_claim(sb, "either", {"devices": {"requests": [{"name": "gpus", "firstAvailable": [
        {"name": "h100", "deviceClassName": "gpu.nvidia.com", "count": 4,
         "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')"}}]},
        {"name": "a100", "deviceClassName": "gpu.nvidia.com", "count": 4,
         "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100')"}}]},
    ]}]}})
    await sb.create(PODS, claim_pod("train", claim="either"))
    p = await sb.pod_where("train", lambda p: p["status"].get("phase") == "Running")
    results = (await sb.get(f"{CLAIMS}/either"))["status"]["allocation"]["devices"]["results"]
    assert {r["request"] for r in results} == {"gpus/a100"} and len(results) == 4
    assert p["spec"]["nodeName"] == "a100-1"


async def test_a_claim_deleted_while_its_pod_runs_stays_until_the_pod_is_done(sb: UsherOnSandbox) -> None:
    """usher protects a claim it allocates as kube-scheduler does (the delete-protection
    finalizer): a tenant's `kubectl delete resourceclaim` while the pod runs leaves the claim
    terminating with its devices allocated, so they are never given to another pod under it;
    once the pod is gone the resourceclaim controller deallocates it and it goes. A pod naming a
    claim being deleted waits, saying so, rather than being given it."""
    await setup(sb, "gpu-1")
    await sb.start_usher(sb.tmp)
    await make_claim(sb, "mine", claim_spec(8))
    await sb.create(PODS, claim_pod("train", claim="mine"))
    await sb.pod_where("train", lambda p: p["status"].get("phase") == "Running")
    claim = await sb.get(f"{CLAIMS}/mine")
    assert claim["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    kubectl = Kubectl(sb.kubeconfig)
    await asyncio.to_thread(kubectl.ok, "delete", "resourceclaim", "mine", "-n", "default", "--wait=false")
    claim = await sb.get(f"{CLAIMS}/mine")
    assert claim["metadata"].get("deletionTimestamp") and claim["status"]["allocation"], "terminating, still allocated"
    await sb.create(PODS, claim_pod("late", claim="mine"))

    async def told() -> Any:
        p = await sb.get(f"{PODS}/late")
        reason, message = scheduled(p)
        return (reason, message) if "ResourceClaim default/mine (spec.resourceClaims[0]) is being deleted" in message else None

    reason, _ = await sb.until(told, "the later pod is told its claim is being deleted")
    assert reason == "WaitingForResourceClaims"
    await sb.req("DELETE", f"{PODS}/train")

    async def gone() -> bool:
        return await sb.get(f"{CLAIMS}/mine") is None

    await sb.until(gone, "the claim goes once its pod is gone")
    assert not (await sb.get(f"{PODS}/late"))["spec"].get("nodeName")


async def test_a_refused_claim_write_leaves_no_pod_bound_and_no_claim_allocated(sb: UsherOnSandbox) -> None:
    """The API server refuses every write of claim w-2 (a conflict): the claims written before it
    for the gang are undone, no pod binds, the pods are told which claim; once the writes are
    allowed again the gang starts whole."""
    await setup(sb, "gpu-1", "gpu-2")
    fault = sb.server.inject(FaultKind.ERROR, method="PATCH", path="*/resourceclaims/w-2/status", status=409)
    await sb.start_usher(sb.tmp)
    for i in range(4):
        await make_claim(sb, f"w-{i}", claim_spec(4))
    for i in range(4):
        await sb.create(PODS, claim_pod(f"w-{i}", claim=f"w-{i}", gang="four", size=4))

    async def refused_twice() -> Any:
        events = [e for e in await sb.events_of("w-0") if e["reason"] == "FailedResourceClaimAllocation"]
        return events if events and (events[0].get("count") or 1) >= 2 else None

    events = await sb.until(refused_twice, "the gang is refused its claim twice")
    assert events[0]["message"].startswith("claim default/w-2 could not be allocated for pod default/w-2: 409")
    assert not [p for p in await sb.all_pods() if p["spec"].get("nodeName")], "no pod bound"
    allocated = [c["metadata"]["name"] for c in (await sb.req("GET", CLAIMS))["items"]
                 if (c.get("status") or {}).get("allocation") or (c.get("status") or {}).get("reservedFor")]
    assert allocated == [], "every claim written for the gang was undone"
    protected = [c["metadata"]["name"] for c in (await sb.req("GET", CLAIMS))["items"] if c["metadata"].get("finalizers")]
    assert protected == [], "no claim keeps the delete protection of an allocation that was undone"
    sb.server.faults.remove(fault)
    await sb.until(lambda: _all_running(sb, 4), "the gang runs once its claims can be written")


async def _all_running(sb: UsherOnSandbox, n: int) -> bool:
    pods = [p for p in await sb.all_pods() if p["metadata"]["name"].startswith("w-")]
    return len(pods) == n and all(p["status"].get("phase") == "Running" for p in pods)


async def test_a_broken_cel_selector_is_the_reason_the_pod_waits(sb: UsherOnSandbox) -> None:
    await setup(sb, "gpu-1")
    await sb.start_usher(sb.tmp)
    await make_claim(sb, "bad", claim_spec(1, ("device.attributes['gpu.nvidia.com'].productName.startsWith(",)))
    await sb.create(PODS, claim_pod("w-0", claim="bad"))
    p = await sb.pod_where("w-0", lambda p: "compilation failed" in scheduled(p)[1])
    reason, message = scheduled(p)
    assert reason == "InvalidRequest"
    assert "claim default/bad, request gpus: ResourceClaim default/bad spec.devices.requests[0].exactly.selectors[0]" \
           ".cel.expression: compilation failed" in message
    assert not p["spec"].get("nodeName")


async def test_a_pod_asking_another_device_class_is_refused_with_the_field_path(sb: UsherOnSandbox) -> None:
    await setup(sb, "gpu-1")
    await sb.start_usher(sb.tmp)
    await make_claim(sb, "nic", claim_spec(1, klass="rdma.example.com"))
    await sb.create(PODS, claim_pod("w-0", claim="nic"))
    p = await sb.pod_where("w-0", lambda p: "deviceClassName" in scheduled(p)[1])
    reason, message = scheduled(p)
    assert reason == "InvalidRequest"
    assert ("ResourceClaim default/nic spec.devices.requests[0].exactly.deviceClassName: usher allocates only devices "
            "of DeviceClass gpu.nvidia.com, not 'rdma.example.com'") in message
    assert not p["spec"].get("nodeName")


async def test_quota_counts_claimed_gpus(sb: UsherOnSandbox) -> None:
    """Queue ``small`` has 4 GPUs of quota: a pod claiming 8 may never start in it."""
    await setup(sb, "gpu-1")
    await sb.start_usher(sb.tmp)
    await make_claim(sb, "eight", claim_spec(8))
    await sb.create(PODS, claim_pod("big", claim="eight", queue="small"))
    p = await sb.pod_where("big", lambda p: scheduled(p)[0] not in ("", "Unschedulable"))
    reason, message = scheduled(p)
    assert reason == "ExceedsQuota", message
    assert "8" in message
    assert not p["spec"].get("nodeName")


async def test_a_new_leader_undoes_claims_a_leader_before_it_left_half_allocated(sb: UsherOnSandbox) -> None:
    """A leader died mid-PreBind: claim w-0 is allocated on gpu-1 and reserved for pod w-0, which
    never bound, and w-1 was never written. gpu-1 is cordoned since. The new leader undoes w-0
    (else the pod would stay held to gpu-1 by its claim) and the gang starts whole on gpu-2."""
    await setup(sb, "gpu-1", "gpu-2")
    for i in range(2):
        await make_claim(sb, f"w-{i}", claim_spec(2))
    pods = [await sb.create(PODS, claim_pod(f"w-{i}", claim=f"w-{i}", gang="pair", size=2)) for i in range(2)]
    claim = await sb.get(f"{CLAIMS}/w-0")
    await sb.req("PATCH", f"{CLAIMS}/w-0/status", {"status": {
        "allocation": {"devices": {"results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gpu-1",
                                                "device": f"gpu-{i}"} for i in range(2)]},
                       "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                           {"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}]}},
        "reservedFor": [{"resource": "pods", "name": "w-0", "uid": pods[0]["metadata"]["uid"]}]},
        "metadata": {"resourceVersion": claim["metadata"]["resourceVersion"]}})
    await sb.req("PATCH", "/api/v1/nodes/gpu-1", {"spec": {"unschedulable": True}})
    await sb.start_usher(sb.tmp)
    await sb.until(lambda: _all_running(sb, 2), "the gang runs")
    for i in range(2):
        p = await sb.get(f"{PODS}/w-{i}")
        assert p["spec"]["nodeName"] == "gpu-2"
        allocated = (await sb.get(f"{CLAIMS}/w-{i}"))["status"]["allocation"]
        assert {r["pool"] for r in allocated["devices"]["results"]} == {"gpu-2"}


async def test_a_claim_shared_by_a_launcher_and_its_workers_is_allocated_once_and_they_run_together(sb: UsherOnSandbox) -> None:
    """A launcher and two workers of one gang name one claim of 4 GPUs, in queue ``small`` (4 GPUs
    of quota): counted once, the gang fits its quota (counted per pod it would ask 12); the claim
    is allocated once, on one node, and reserved for all three, which run there together."""
    await setup(sb, "gpu-1", "gpu-2")
    await sb.start_usher(sb.tmp)
    await make_claim(sb, "shared", claim_spec(4))
    names = ("launcher", "worker-0", "worker-1")
    for name in names:
        await sb.create(PODS, claim_pod(name, claim="shared", gang="mpi", size=3, queue="small"))
    async def running() -> bool:
        phases = [(await sb.get(f"{PODS}/{name}"))["status"].get("phase") for name in names]
        return phases == ["Running"] * len(names)

    await sb.until(running, "the gang runs")
    pods = {name: await sb.get(f"{PODS}/{name}") for name in names}
    assert len({p["spec"]["nodeName"] for p in pods.values()}) == 1, {n: p["spec"]["nodeName"] for n, p in pods.items()}
    claim = await sb.get(f"{CLAIMS}/shared")
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == 4 and {r["pool"] for r in results} == {pods["launcher"]["spec"]["nodeName"]}
    assert sorted(r["uid"] for r in claim["status"]["reservedFor"]) == sorted(p["metadata"]["uid"] for p in pods.values())
    allocations = [r for r in sb.server.requests if r.method == "PATCH" and r.path.endswith("/resourceclaims/shared/status")]
    assert len(allocations) == 1, [r.path for r in allocations]


async def test_when_the_pod_that_counts_a_shared_claim_ends_another_counts_it_and_quota_stays_charged(sb: UsherOnSandbox) -> None:
    """The launcher (first by name: it counts the claim's 4 GPUs) ends after a minute; the workers
    run on with the claim. Queue ``small`` (4 GPUs) stays full: a later pod asking one GPU waits
    for quota rather than starting over devices the workers still use."""
    await setup(sb, "gpu-1")
    await sb.start_usher(sb.tmp)
    await make_claim(sb, "shared", claim_spec(4))
    names = ("a-launcher", "worker-0", "worker-1")
    for name in names:
        body = claim_pod(name, claim="shared", gang="mpi", size=3, queue="small")
        if name == "a-launcher":
            body["metadata"]["annotations"] = {"usher/duration": "60s"}
        await sb.create(PODS, body)

    async def running() -> bool:
        phases = [(await sb.get(f"{PODS}/{name}"))["status"].get("phase") for name in names]
        return phases == ["Running"] * len(names)

    await sb.until(running, "the gang runs")
    sb.advance(61)
    await sb.pod_where("a-launcher", lambda p: p["status"].get("phase") == "Succeeded")
    await make_claim(sb, "late", claim_spec(1))
    await sb.create(PODS, claim_pod("late", claim="late", queue="small"))
    late = await sb.pod_where("late", lambda p: p["spec"].get("nodeName") or scheduled(p)[0])
    assert not late["spec"].get("nodeName"), "started over the workers' devices, past the queue's quota"
    assert scheduled(late)[0] == "WaitingForQuota", scheduled(late)


async def test_the_pods_sharing_a_claim_are_placed_on_one_node_whatever_else_they_prefer(sb: UsherOnSandbox) -> None:
    """The launcher must run on gpu-2; its workers would rather run on gpu-1. Their claim's devices
    are one node's, so usher places them beside the launcher (else the claim could not be
    allocated for all of them and the bind would be refused, again and again)."""
    await setup(sb, "gpu-1", "gpu-2")
    await sb.start_usher(sb.tmp)
    await make_claim(sb, "shared", claim_spec(4))
    names = ("launcher", "worker-0", "worker-1")
    for name in names:
        body = claim_pod(name, claim="shared", gang="mpi", size=3)
        if name == "launcher":
            body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "gpu-2"}
        else:
            body["spec"]["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "preference": {"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-1"]}]}}]}}
        await sb.create(PODS, body)

    async def running() -> bool:
        phases = [(await sb.get(f"{PODS}/{name}"))["status"].get("phase") for name in names]
        return phases == ["Running"] * len(names)

    await sb.until(running, "the gang runs")
    assert {(await sb.get(f"{PODS}/{name}"))["spec"]["nodeName"] for name in names} == {"gpu-2"}


async def test_pods_of_two_gangs_naming_one_claim_wait_saying_so(sb: UsherOnSandbox) -> None:
    """Two pods alone (two gangs) name one claim: one gang's quota would pay for devices the
    other uses, so neither is bound and both say why."""
    await setup(sb, "gpu-1")
    await sb.start_usher(sb.tmp)
    await make_claim(sb, "shared", claim_spec(2))
    await sb.create(PODS, claim_pod("alone-a", claim="shared"))
    await sb.create(PODS, claim_pod("alone-b", claim="shared"))
    for name, other in (("alone-a", "alone-b"), ("alone-b", "alone-a")):
        p = await sb.pod_where(name, lambda p: "of another gang" in scheduled(p)[1])
        assert scheduled(p)[0] == "InvalidRequest"
        assert (f"ResourceClaim default/shared is named by pod default/{other} of another gang too; usher shares a "
                "claim only among the pods of one gang") in scheduled(p)[1]
    assert not [p for p in await sb.all_pods() if p["spec"].get("nodeName")]


async def test_a_burn_in_pod_that_tolerates_the_health_taint_gets_the_failed_gpu(sb: UsherOnSandbox) -> None:
    """GPU 0 of gpu-1 had an XID: NVIDIA's driver (the stand-in) taints it NoSchedule. A pod asking
    for that GPU waits; a burn-in pod whose request tolerates the taint is given it and runs."""
    node = gpu_node("gpu-1")
    node["metadata"]["annotations"]["usher/gpu-health"] = json.dumps({"0": "XID 79: fallen off the bus"})
    await sb.create("/api/v1/nodes", node)

    async def tainted() -> bool:
        slices = (await sb.req("GET", f"{DRA}/resourceslices"))["items"]
        return any(d.get("taints") for s in slices for d in s["spec"].get("devices") or [])

    await sb.until(tainted, "the driver stand-in taints GPU 0")
    await sb.start_usher(sb.tmp)
    gpu0 = "device.attributes['resource.kubernetes.io'].pciBusID == '0000:18:00.0'"  # GPU 0's
    await make_claim(sb, "plain", claim_spec(1, (gpu0,)))
    await sb.create(PODS, claim_pod("plain", claim="plain"))
    tolerating = claim_spec(1, (gpu0,))
    tolerating["devices"]["requests"][0]["exactly"]["tolerations"] = [{"key": "gpu.nvidia.com/xid", "operator": "Exists"}]
    await make_claim(sb, "burn-in", tolerating)
    await sb.create(PODS, claim_pod("burn-in", claim="burn-in"))
    await sb.pod_where("burn-in", lambda p: p["status"].get("phase") == "Running")
    results = (await sb.get(f"{CLAIMS}/burn-in"))["status"]["allocation"]["devices"]["results"]
    assert [r["device"] for r in results] == ["gpu-0"]
    stored = (await sb.get(f"{CLAIMS}/burn-in"))["spec"]["devices"]["requests"][0]["exactly"]["tolerations"]
    assert stored == [{"key": "gpu.nvidia.com/xid", "operator": "Exists"}]
    plain = await sb.get(f"{PODS}/plain")
    assert not plain["spec"].get("nodeName") and scheduled(plain)[0] == "Unschedulable", scheduled(plain)


async def test_distinct_attribute_gives_two_gpus_behind_two_pcie_roots(sb: UsherOnSandbox) -> None:
    """The driver stand-in puts GPUs two by two behind one PCIe root; a claim for 2 GPUs with
    ``distinctAttribute: resource.kubernetes.io/pcieRoot`` is given two behind two roots."""
    await setup(sb, "gpu-1")
    await sb.start_usher(sb.tmp)
    spec = claim_spec(2)
    spec["devices"]["constraints"] = [{"distinctAttribute": "resource.kubernetes.io/pcieRoot"}]
    await make_claim(sb, "apart", spec)
    await sb.create(PODS, claim_pod("apart", claim="apart"))
    await sb.pod_where("apart", lambda p: p["status"].get("phase") == "Running")
    results = (await sb.get(f"{CLAIMS}/apart"))["status"]["allocation"]["devices"]["results"]
    slices = (await sb.req("GET", f"{DRA}/resourceslices"))["items"]
    root = {d["name"]: d["attributes"]["resource.kubernetes.io/pcieRoot"]["string"]
            for s in slices for d in s["spec"]["devices"]}
    assert len(results) == 2 and len({root[r["device"]] for r in results}) == 2, results


ADMIN_LABEL = "resource.kubernetes.io/admin-access"


def admin_claim(namespace: str) -> dict[str, Any]:
    spec = claim_spec(2)
    spec["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "watch", "namespace": namespace}, "spec": spec}


async def test_admin_access_is_refused_in_a_namespace_operators_did_not_label_for_it(sb: UsherOnSandbox) -> None:
    """As kube-apiserver: a tenant's claim asking admin access (every tenant's GPUs) is refused,
    naming the field, unless the namespace carries the label only operators can set."""
    await setup(sb, "gpu-1")
    await sb.start_usher(sb.tmp)
    kubectl = Kubectl(sb.kubeconfig)
    done = await asyncio.to_thread(kubectl.run, "apply", "-f", "-", stdin=yaml.safe_dump(admin_claim("default")))
    assert done.returncode != 0
    assert ("spec.devices.requests[0].exactly.adminAccess: Forbidden: admin access to devices requires the "
            f"`{ADMIN_LABEL}: true` label on the containing namespace") in done.stderr, done.stderr
    await sb.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": "monitoring", "labels": {ADMIN_LABEL: "true"}}})
    await asyncio.to_thread(kubectl.ok, "apply", "-f", "-", stdin=yaml.safe_dump(admin_claim("monitoring")))


async def test_a_monitoring_pod_with_admin_access_runs_beside_the_pod_that_holds_the_gpus(sb: UsherOnSandbox) -> None:
    """``train`` holds all 8 GPUs of gpu-1 through its claim. A DCGM-like pod in the operators'
    labelled namespace asks admin access to 2: it runs on gpu-1 too, its devices flagged
    ``adminAccess``, counting no GPUs (queue ``small`` has 4 and is not charged)."""
    await setup(sb, "gpu-1")
    await sb.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": "monitoring", "labels": {ADMIN_LABEL: "true"}}})
    await sb.start_usher(sb.tmp)
    await make_claim(sb, "eight", claim_spec(8))
    await sb.create(PODS, claim_pod("train", claim="eight"))
    await sb.pod_where("train", lambda p: p["status"].get("phase") == "Running")
    await sb.create(f"{DRA}/namespaces/monitoring/resourceclaims", admin_claim("monitoring"))
    await sb.create("/api/v1/namespaces/monitoring/pods", claim_pod("dcgm", claim="watch", queue="small"))
    p = await sb.pod_where("dcgm", lambda p: p["status"].get("phase") == "Running", ns="monitoring")
    assert p["spec"]["nodeName"] == "gpu-1"
    results = (await sb.get(f"{DRA}/namespaces/monitoring/resourceclaims/watch"))["status"]["allocation"]["devices"]["results"]
    assert len(results) == 2 and all(r.get("adminAccess") is True for r in results), results
    train = (await sb.get(f"{CLAIMS}/eight"))["status"]["allocation"]["devices"]["results"]
    assert len(train) == 8  # still train's, all of them


def claim_job(name: str, gpus: int, priority_class: str | None = None) -> dict[str, Any]:
    """A batch Job of one pod whose GPUs come from a claim template (``<name>-gpus``)."""
    spec: dict[str, Any] = {
        "schedulerName": "usher", "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": f"{name}-gpus"}],
        "containers": [{"name": "main", "image": "trainer:1", "resources": {"claims": [{"name": "gpus"}]}}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": {
        "backoffLimit": 6, "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
        "template": {"metadata": {"labels": {"usher/queue": "research"}}, "spec": spec}}}


async def test_preemption_frees_the_victims_claimed_devices_for_the_preemptor(sb: UsherOnSandbox) -> None:
    """low holds all 8 GPUs of gpu-1 through its claim; urgent (higher priority) asks 8 through
    its own: usher evicts low, and urgent's claim is given those devices and urgent runs."""
    await setup(sb, "gpu-1")
    await sb.start_usher(sb.tmp, "queues:\n  - {name: research, quota: {gpu: 64}, namespaces: [default], "
                                 "preemption: {withinQueue: LowerPriority}}\n")
    await sb.create("/apis/scheduling.k8s.io/v1/priorityclasses", {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "urgent"}, "value": 100})
    for name in ("low", "urgent"):
        await sb.create(TEMPLATES, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                                    "metadata": {"name": f"{name}-gpus"}, "spec": {"spec": claim_spec(8)}})

    async def running(job: str) -> Any:
        pods = [p for p in await sb.pods(f"job-name={job}")
                if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
        return pods or None

    await sb.create("/apis/batch/v1/namespaces/default/jobs", claim_job("low", 8))
    [low] = await sb.until(lambda: running("low"), "low runs on its claim")
    sb.advance(60)  # past the time a job runs before it may be preempted
    await sb.create("/apis/batch/v1/namespaces/default/jobs", claim_job("urgent", 8, "urgent"))
    [urgent] = await sb.until(lambda: running("urgent"), "urgent runs on the devices low held", deadline=30.0)
    assert urgent["spec"]["nodeName"] == "gpu-1"
    made = urgent["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    results = (await sb.get(f"{CLAIMS}/{made}"))["status"]["allocation"]["devices"]["results"]
    assert sorted(r["device"] for r in results) == sorted(f"gpu-{i}" for i in range(8))
    assert not await running("low")

"""A gang's volumes judged for the gang as placed, on the sandbox: attach limits, and pins.

Each pod of a gang may fit a node on its own while the gang's pods together do not: a CSI
driver's attach limit counts the distinct volumes of all the pods on the node, and several pods
held to one node by their volumes may need more than it has. usher must neither bind such a gang
(half of it would start) nor let it wait without saying why.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sandboxes import UsherOnSandbox, node, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)
from test_volumes_on_cluster import CLASSES, PVCS, PVS, _all_bound, _gang, _scheduled, claim, local_volume, storage_class, worker

PODS = "/api/v1/namespaces/default/pods"


async def test_a_gangs_pods_on_one_node_stay_within_the_drivers_attach_limit(sb: UsherOnSandbox) -> None:
    """Each node's CSI driver attaches one volume there (its CSINode, from the node annotation
    the sandbox's driver reads). Each pod of the gang alone fits either node; usher packs a gang
    onto as few nodes as it can, and both pods on one node would need two volumes there. They
    must not be bound there together (the kubelet would fail one with FailedAttachVolume, half a
    gang started): the pod that went over is kept off that node, and the gang runs split."""
    for n in ("gpu-1", "gpu-2"):
        body = node(n)
        body["metadata"]["annotations"] = {"sandbox.usher/csi-attach-limit": "1"}
        await sb.create("/api/v1/nodes", body)
    await sb.start_usher(sb.tmp)
    seen: list[list[str]] = []

    async def watch() -> None:
        while True:
            seen.append([p["spec"].get("nodeName") or "" for p in await _gang(sb, "pair")])
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    try:
        for i in range(2):
            await sb.create(PVCS, claim(f"c-{i}"))
            await sb.create(PODS, worker(f"w-{i}", 4, [f"c-{i}"], gang="pair", size=2))

        async def running() -> Any:
            pods = await _gang(sb, "pair")
            return pods if len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods) else None

        pods = await sb.until(running, "the gang runs, one pod on each node")
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["gpu-1", "gpu-2"]
    assert not [nodes for nodes in seen if nodes[0] and nodes[0] == nodes[-1] and len(nodes) == 2], \
        "never both pods bound on one node"
    for p in pods:
        assert not [e for e in await sb.events_of(p["metadata"]["name"]) if e["reason"] == "FailedAttachVolume"]


async def test_a_gang_held_by_its_volumes_to_a_node_too_small_for_it_says_so(sb: UsherOnSandbox) -> None:
    """Both pods' claims are bound to local volumes on gpu-1, and each pod asks all 8 of its GPUs:
    the gang can never start as its volumes stand, and says so (not "waiting for capacity")."""
    for n in ("gpu-1", "gpu-2"):
        await sb.create("/api/v1/nodes", node(n))
    await sb.create(CLASSES, {**storage_class("manual"), "provisioner": "kubernetes.io/no-provisioner"})
    await sb.start_usher(sb.tmp)
    for name in ("a", "b"):
        await sb.create(PVS, local_volume(f"disk-{name}", "gpu-1"))
        await sb.create(PVCS, claim(name, klass="manual", volume=f"disk-{name}"))
    await sb.until(lambda: _all_bound(sb, ["a", "b"]), "the claims are bound to their gpu-1 disks")
    for i, name in enumerate(("a", "b")):
        await sb.create(PODS, worker(f"w-{i}", 8, [name], gang="held", size=2))

    async def told() -> Any:
        pods = await _gang(sb, "held")
        said = [_scheduled(p) for p in pods]
        return said if len(said) == 2 and all("held to node gpu-1" in m for _, m in said) else None

    said = await sb.until(told, "the gang says its volumes hold it where it cannot fit")
    reason, message = said[0]
    assert reason == "WaitingForVolumes"  # not Unschedulable: more nodes would not help
    assert message.startswith("WaitingForVolumes: The gang cannot start: pods default/w-0, default/w-1 are held to node "
                              "gpu-1 by default/a, default/b"), message
    assert "together need 16 GPUs where the node has 8" in message
    assert not any(p["spec"].get("nodeName") for p in await _gang(sb, "held"))


ELASTIC = "training.kubeflow.org/job-name=ft"


async def _elastic_at_its_minimum(sb: UsherOnSandbox) -> list[dict[str, Any]]:
    """An elastic PyTorchJob (1 to 2 workers beside its master, 8 GPUs each, a generic ephemeral
    scratch volume per pod of the default `WaitForFirstConsumer` class) running at its minimum on
    two nodes; its running pods."""
    from test_workload_gangs import eight_gpu_nodes, gpu_template, running_whole

    await eight_gpu_nodes(sb, 2)
    await sb.start_usher(sb.tmp)
    template = gpu_template(8, labels={"usher/queue": "research"})
    template["spec"]["volumes"] = [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "100Gi"}}}}}}]
    replica = {"restartPolicy": "OnFailure", "template": template}
    await sb.create("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs", {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "ft"},
        "spec": {"elasticPolicy": {"minReplicas": 1, "maxReplicas": 2},
                 "pytorchReplicaSpecs": {"Master": {**replica, "replicas": 1}, "Worker": {**replica, "replicas": 2}}},
    })
    return await running_whole(sb, ELASTIC, 2)


async def test_the_pods_an_elastic_gang_grows_by_are_bound_only_once_their_claims_are(sb: UsherOnSandbox) -> None:
    """A third node comes and the job grows by a worker. That worker's claim must get
    `selected-node` and be provisioned on its node before the worker is bound, as the first
    pods' were: bound without, its claim is never provisioned and the kubelet never mounts it."""
    from test_workload_gangs import eight_gpu_nodes, running_whole

    first = await _elastic_at_its_minimum(sb)
    await eight_gpu_nodes(sb, 1, first=3)
    grown = await running_whole(sb, ELASTIC, 3)
    [extra] = [p for p in grown if p["metadata"]["uid"] not in {q["metadata"]["uid"] for q in first}]
    assert extra["spec"]["nodeName"] == "gpu-3"
    claims = {c["metadata"]["name"]: c for c in (await sb.req("GET", PVCS))["items"]}
    volumes = {v["spec"]["claimRef"]["name"]: v for v in (await sb.req("GET", PVS))["items"]}
    for p in grown:
        name = f"{p['metadata']['name']}-scratch"
        assert claims[name]["status"]["phase"] == "Bound"
        assert claims[name]["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == p["spec"]["nodeName"]
        [term] = volumes[name]["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
        assert term["matchExpressions"][0]["values"] == [p["spec"]["nodeName"]]
    assert not [e for e in await sb.events_of(extra["metadata"]["name"]) if e["reason"] == "FailedMount"]


async def test_a_grow_whose_claim_fails_to_provision_binds_nothing_and_the_gang_runs_on(sb: UsherOnSandbox) -> None:
    """The waiting worker's scratch claim fails to provision once: the worker is not bound (it is
    told why, naming the claim and the provisioner's words), the job runs on with the pods it
    had, and the next grow binds the worker once its claim is provisioned."""
    from test_workload_gangs import eight_gpu_nodes, running_whole

    first = await _elastic_at_its_minimum(sb)
    [waiting] = [p["metadata"]["name"] for p in await sb.pods(ELASTIC) if not p["spec"].get("nodeName")]
    sb.server.controllers.provisioner.fail("default", f"{waiting}-scratch", "disk pool exhausted")
    await eight_gpu_nodes(sb, 1, first=3)

    async def told() -> Any:
        said = [e for e in await sb.events_of(waiting) if e["reason"] == "FailedVolumeBinding"]
        return said or None

    [event, *_] = await sb.until(told, "the worker is told its claim failed")
    assert f"pvc/{waiting}-scratch" in event["message"] and "disk pool exhausted" in event["message"]
    assert event["type"] == "Warning"
    running = await running_whole(sb, ELASTIC, 3)  # the next grow, with the claim provisioned
    assert {p["metadata"]["uid"] for p in first} <= {p["metadata"]["uid"] for p in running}
    assert not [e for e in await sb.events_of(waiting) if e["reason"] == "FailedMount"]

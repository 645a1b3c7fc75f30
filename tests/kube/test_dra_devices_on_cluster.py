"""usher's view of a node's GPUs follows the devices its claims were given, on the sandbox over HTTP.

A claim's CEL selector may exclude the GPUs usher's placement chose for the pod: the PreBind then
gives other devices of the node. usher must count those as taken (and the ones it chose first
as free), or it keeps placing later gangs on devices a claim holds: their claims cannot be
allocated there, and they wait for ever although another node has room.
"""

from __future__ import annotations

from typing import Any

from sandboxes import UsherOnSandbox, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)
from test_dra_on_cluster import CLAIMS, PODS, TEMPLATES, claim_pod, claim_spec, make_claim, scheduled, setup
from test_workload_gangs import running_whole

ISLAND = "sandbox.usher/nvlinkIsland"


def bus_id(minor: int) -> str:
    """The PCI bus ID the driver stand-in publishes for GPU ``minor``."""
    return f"0000:{0x18 + 0x10 * minor:02x}:00.0"


def devices_of(claim: dict[str, Any]) -> set[str]:
    return {r["device"] for r in claim["status"]["allocation"]["devices"]["results"]}


async def test_pods_whose_selectors_take_only_some_gpus_never_share_a_device_and_both_run(sb: UsherOnSandbox) -> None:
    await setup(sb, "gpu-1", "gpu-2")
    await sb.start_usher(sb.tmp)
    # GPUs 1 and 5 only: one in each NVLink island (placement would take 0 and 1, one island)
    pick = f"device.attributes['resource.kubernetes.io'].pciBusID in ['{bus_id(1)}', '{bus_id(5)}']"
    await make_claim(sb, "two", claim_spec(2, (pick,)))
    await sb.create(PODS, claim_pod("first", claim="two"))
    first = await sb.pod_where("first", lambda p: p["status"].get("phase") == "Running")
    assert devices_of(await sb.get(f"{CLAIMS}/two")) == {"gpu-1", "gpu-5"}
    assert sorted(first["metadata"]["annotations"]["usher/gpus"].split(",")) == ["1", "5"]
    # usher's own view (what its placement, why-pending and the console's heatmap read): GPUs 1
    # and 5 taken, 0 free, as on the cluster
    node = sb.usher.mirror.state.node(first["spec"]["nodeName"])
    assert [i for i, free in enumerate(node.gpu_free) if free == 0] == [1, 5], node.gpu_free
    # and so after a rebuild from the caches (the claims' allocations are the truth)
    sb.usher.mirror.dirty = True
    await sb.until(lambda: _async(not sb.usher.mirror.dirty), "usher rebuilds its view")
    node = sb.usher.mirror.state.node(first["spec"]["nodeName"])
    assert [i for i, free in enumerate(node.gpu_free) if free == 0] == [1, 5], node.gpu_free
    # four GPUs of one island: the first pod's node has none left whole (it holds 1 and 5)
    four = claim_spec(4)
    four["devices"]["constraints"] = [{"matchAttribute": ISLAND}]
    await make_claim(sb, "four", four)
    await sb.create(PODS, claim_pod("second", claim="four"))
    second = await sb.pod_where("second", lambda p: p["status"].get("phase") == "Running")
    assert second["spec"]["nodeName"] != first["spec"]["nodeName"]
    given = devices_of(await sb.get(f"{CLAIMS}/four"))
    assert len(given) == 4 and len({int(d.removeprefix("gpu-")) // 4 for d in given}) == 1, given


ELASTIC = "training.kubeflow.org/job-name=ft"


async def test_the_pods_an_elastic_gang_grows_by_get_their_claims_allocated_before_they_bind(sb: UsherOnSandbox) -> None:
    """An elastic PyTorchJob (1 to 2 workers beside its master) whose pods claim 8 GPUs each runs
    at its minimum on two nodes (the third is cordoned); the third is uncordoned and it grows by a
    worker. That worker's claim must be allocated on its node and reserved for it before it binds,
    as the first pods' were: bound without, the kubelet never starts it."""
    await setup(sb, "gpu-1", "gpu-2", "gpu-3")
    await sb.req("PATCH", "/api/v1/nodes/gpu-3", {"spec": {"unschedulable": True}})
    await sb.start_usher(sb.tmp)
    await sb.create(TEMPLATES, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                                "metadata": {"name": "eight"}, "spec": {"spec": claim_spec(8)}})
    template = claim_pod("x", template="eight")
    template = {"metadata": {"labels": template["metadata"]["labels"]},
                "spec": {**template["spec"], "restartPolicy": "OnFailure"}}
    replica = {"restartPolicy": "OnFailure", "template": template}
    await sb.create("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs", {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "ft"},
        "spec": {"elasticPolicy": {"minReplicas": 1, "maxReplicas": 2},
                 "pytorchReplicaSpecs": {"Master": {**replica, "replicas": 1}, "Worker": {**replica, "replicas": 2}}},
    })
    first = await running_whole(sb, ELASTIC, 2)
    await sb.req("PATCH", "/api/v1/nodes/gpu-3", {"spec": {"unschedulable": None}})
    grown = await running_whole(sb, ELASTIC, 3)
    [extra] = [p for p in grown if p["metadata"]["uid"] not in {q["metadata"]["uid"] for q in first}]
    assert extra["spec"]["nodeName"] == "gpu-3"
    [made] = [s["resourceClaimName"] for s in extra["status"]["resourceClaimStatuses"]]
    claim = await sb.get(f"{CLAIMS}/{made}")
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": extra["metadata"]["name"],
                                               "uid": extra["metadata"]["uid"]}]
    assert claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["gpu-3"]
    assert len(devices_of(claim)) == 8


async def test_a_pod_whose_claim_is_still_to_be_made_from_its_template_waits_for_it_and_is_no_invalid_request(
        sb: UsherOnSandbox) -> None:
    """The resourceclaim controller (kube-controller-manager's) is slow to make the pod's claim:
    nothing is wrong with the pod, it waits for its claim, and says which template it comes from;
    once the claim is made the pod runs."""
    await setup(sb, "gpu-1")
    controllers = sb.server.controllers
    controllers.parts.remove(controllers.claims)  # kube-controller-manager is behind
    await sb.start_usher(sb.tmp)
    await sb.create(TEMPLATES, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                                "metadata": {"name": "two"}, "spec": {"spec": claim_spec(2)}})
    await sb.create(PODS, claim_pod("w-0", template="two"))
    p = await sb.pod_where("w-0", lambda p: scheduled(p)[0] not in ("", "Unschedulable"))
    reason, message = scheduled(p)
    assert reason == "WaitingForResourceClaims", message
    assert ("Pod w-0 waits: its claim gpus (spec.resourceClaims[0]) is still to be created from ResourceClaimTemplate "
            "default/two by the cluster's resourceclaim controller") in message
    assert not p["spec"].get("nodeName")
    controllers.parts.append(controllers.claims)  # it catches up: the claim is made
    controllers.claims.resync()
    await sb.pod_where("w-0", lambda p: p["status"].get("phase") == "Running")


async def _async(value: Any) -> Any:
    return value

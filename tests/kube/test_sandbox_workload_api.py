"""The Workload API of 1.35 (``scheduling.k8s.io/v1alpha1``) on the sandbox: served to kubectl
and the official client, validated with the real field paths, and gang-scheduled by the default
scheduler all or nothing, as the GangScheduling plugin does."""

from __future__ import annotations

import json

import pytest
from kubernetes.client import CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from sandboxes import Sandbox, kubectl_fixture, node, official_client_fixture, pod, two_node_sandbox_fixture  # noqa: F401

WORKLOADS = "/apis/scheduling.k8s.io/v1alpha1/namespaces/default/workloads"


@pytest.fixture
async def sb():
    s = Sandbox()
    await s.start()
    yield s
    await s.stop()


def workload(name: str, min_count: int) -> dict:
    return {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload", "metadata": {"name": name},
            "spec": {"controllerRef": {"apiGroup": "batch", "kind": "Job", "name": name},
                     "podGroups": [{"name": "workers", "policy": {"gang": {"minCount": min_count}}}]}}


def worker(name: str, gpus: int, workload_name: str = "train", key: str | None = None) -> dict:
    ref = {"name": workload_name, "podGroup": "workers", **({"podGroupReplicaKey": key} if key else {})}
    return pod(name, gpus=gpus, workloadRef=ref)


async def test_a_gang_of_min_count_four_is_placed_whole_or_not_at_all(sb):
    for n in ("n1", "n2"):
        await sb.create("/api/v1/nodes", node(n, gpus=8))
    await sb.create(WORKLOADS, workload("train", 4))
    for i in range(4):  # 4 x 5 GPUs: only two fit on two 8-GPU nodes
        await sb.create("/api/v1/namespaces/default/pods", worker(f"w-{i}", 5))

    async def decided():
        pods = [await sb.get(f"/api/v1/namespaces/default/pods/w-{i}") for i in range(4)]
        refused = [p for p in pods if any(c.get("reason") == "Unschedulable" for c in p["status"].get("conditions") or [])]
        return pods if len(refused) == 2 else None

    pods = await sb.until(decided, "two workers found no node")
    assert not any(p["spec"].get("nodeName") for p in pods)  # the two that fit were not bound either
    assert (await sb.get("/api/v1/namespaces/default/pods/w-0"))["spec"]["workloadRef"]["podGroup"] == "workers"
    # the same gang that fits is bound whole
    await sb.create(WORKLOADS, workload("small", 4))
    for i in range(4):
        await sb.create("/api/v1/namespaces/default/pods", worker(f"s-{i}", 1, "small"))
    for i in range(4):
        await sb.pod_where(f"s-{i}", lambda p: p["spec"].get("nodeName"))


async def test_a_gang_waits_for_its_workload_and_its_min_count(sb):
    await sb.create("/api/v1/nodes", node("n1", gpus=8))
    for i in range(3):
        await sb.create("/api/v1/namespaces/default/pods", worker(f"w-{i}", 1, key="r0"))
    await sb.create(WORKLOADS, workload("train", 4))
    sb.advance(1)
    for i in range(3):
        p = await sb.get(f"/api/v1/namespaces/default/pods/w-{i}")
        assert not p["spec"].get("nodeName") and not p["status"].get("conditions")
    await sb.create("/api/v1/namespaces/default/pods", worker("w-other-replica", 1, key="r1"))
    sb.advance(1)
    assert not (await sb.get("/api/v1/namespaces/default/pods/w-0"))["spec"].get("nodeName")  # r1 is another gang
    await sb.create("/api/v1/namespaces/default/pods", worker("w-3", 1, key="r0"))
    for i in range(4):
        await sb.pod_where(f"w-{i}", lambda p: p["spec"].get("nodeName"))
    assert not (await sb.get("/api/v1/namespaces/default/pods/w-other-replica"))["spec"].get("nodeName")


def test_workloads_through_kubectl_and_the_official_client(sandbox, kubectl, api, tmp_path):
    manifest = tmp_path / "w.json"
    manifest.write_text(json.dumps(workload("train", 4)))
    kubectl.ok("apply", "-f", str(manifest))
    out = kubectl.ok("get", "workloads.scheduling.k8s.io")
    assert out.split("\n")[0].split() == ["NAME", "AGE"] and out.split("\n")[1].startswith("train")
    got = json.loads(kubectl.ok("get", "workload", "train", "-o", "json"))
    assert got["spec"]["podGroups"][0]["policy"]["gang"]["minCount"] == 4
    resources = json.loads(kubectl.ok("get", "--raw", "/apis/scheduling.k8s.io/v1alpha1"))["resources"]
    assert any(r["name"] == "workloads" and r["namespaced"] for r in resources)
    bad = workload("bad", 0)
    bad["spec"]["podGroups"].append({"name": "workers", "policy": {"basic": {}, "gang": {"minCount": 1}}})
    with pytest.raises(ApiException) as caught:
        CustomObjectsApi(api).create_namespaced_custom_object("scheduling.k8s.io", "v1alpha1", "default", "workloads", bad)
    assert caught.value.status == 422
    body = json.loads(caught.value.body)
    fields = [c["field"] for c in body["details"]["causes"]]
    assert fields == ["spec.podGroups[0].policy.gang.minCount", "spec.podGroups[1].name", "spec.podGroups[1].policy"]
    assert 'spec.podGroups[1].name: Duplicate value: "workers"' in body["message"]


def test_a_pod_workload_ref_is_validated_and_kept(sandbox, kubectl, tmp_path):
    """Through kubectl (strict field validation): the 1.37 official client's models no longer
    have the 1.35 field and refuse it before sending."""
    manifest = tmp_path / "p.json"
    manifest.write_text(json.dumps(worker("p", 0)))
    kubectl.ok("apply", "-f", str(manifest))
    got = json.loads(kubectl.ok("get", "pod", "p", "-o", "json"))
    assert got["spec"]["workloadRef"] == {"name": "train", "podGroup": "workers"}
    manifest.write_text(json.dumps(pod("q", workloadRef={"name": "train", "podGroup": "Workers"})))
    result = kubectl.run("apply", "-f", str(manifest))
    assert result.returncode != 0 and 'spec.workloadRef.podGroup: Invalid value: "Workers"' in result.stderr

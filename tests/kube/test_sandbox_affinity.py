"""The sandbox's default scheduler as kube-scheduler's InterPodAffinity and PodTopologySpread
place pods, and the API server's validation of those fields, through HTTP, kubectl and the
official client."""

from __future__ import annotations

import pytest
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException
from sandboxes import Sandbox, kubectl_fixture, node, official_client_fixture, pod, two_node_sandbox_fixture  # noqa: F401

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


@pytest.fixture
async def sb():
    s = Sandbox()
    await s.start()
    yield s
    await s.stop()


def cond(p: dict, type_: str) -> dict:
    return next((c for c in p.get("status", {}).get("conditions") or [] if c["type"] == type_), {})


def unschedulable(p: dict) -> bool:
    return cond(p, "PodScheduled").get("reason") == "Unschedulable"


def labelled(name: str, labels: dict, **spec) -> dict:
    body = pod(name, **spec)
    body["metadata"]["labels"] = labels
    return body


def one_per_node(app: str) -> dict:
    """Away from every pod of ``app`` in any namespace (``namespaceSelector: {}``)."""
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "namespaceSelector": {}, "topologyKey": HOST}]}}


async def test_deployment_with_required_anti_affinity_spreads_one_per_node_and_the_extra_waits(sb):
    for n in ("n1", "n2", "n3", "n4"):
        await sb.create("/api/v1/nodes", node(n))
    await sb.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    await sb.create("/api/v1/namespaces/other/pods", labelled("elsewhere", {"app": "vllm"}, node_name="n4"))
    template = {"metadata": {"labels": {"app": "vllm"}},
                "spec": {"containers": [{"name": "main", "image": "vllm:1"}], "affinity": one_per_node("vllm")}}
    await sb.create("/apis/apps/v1/namespaces/default/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "vllm"},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "vllm"}}, "template": template}})

    async def settled():
        pods = await sb.pods("app=vllm")
        bound = [p for p in pods if p["spec"].get("nodeName")]
        waiting = [p for p in pods if unschedulable(p)]
        return (bound, waiting) if len(pods) == 4 and len(bound) == 3 and len(waiting) == 1 else None

    bound, [extra] = await sb.until(settled, "three replicas bound, one unschedulable")
    assert sorted(p["spec"]["nodeName"] for p in bound) == ["n1", "n2", "n3"]
    assert cond(extra, "PodScheduled")["message"] == (
        "0/4 nodes are available: 4 node(s) didn't match pod anti-affinity rules. "
        "preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.")


async def test_existing_pods_anti_affinity_keeps_a_newcomer_away(sb):
    await sb.create("/api/v1/nodes", node("n1"))
    await sb.create("/api/v1/namespaces/default/pods", labelled("loner", {"app": "loner"}, affinity={
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"team": "noisy"}}, "topologyKey": HOST}]}}))
    await sb.pod_where("loner", lambda p: p["spec"].get("nodeName"))
    await sb.create("/api/v1/namespaces/default/pods", labelled("noisy", {"team": "noisy"}))
    p = await sb.pod_where("noisy", unschedulable)
    assert cond(p, "PodScheduled")["message"].startswith(
        "0/1 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity rules.")


async def test_launcher_goes_beside_its_workers_and_waits_without_them(sb):
    await sb.create("/api/v1/nodes", node("n1", gpus=4, labels={"rack": "a"}))
    await sb.create("/api/v1/nodes", node("n2", gpus=4, labels={"rack": "b"}))
    beside = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"job": "train", "role": "worker"}}, "topologyKey": "rack"}]}}
    await sb.create("/api/v1/namespaces/default/pods", labelled("launcher", {"job": "train", "role": "launcher"},
                                                                affinity=beside))
    p = await sb.pod_where("launcher", unschedulable)
    assert "2 node(s) didn't match pod affinity rules" in cond(p, "PodScheduled")["message"]
    await sb.create("/api/v1/namespaces/default/pods", labelled("worker", {"job": "train", "role": "worker"}, gpus=4,
                                                                nodeSelector={"rack": "b"}))
    await sb.pod_where("worker", lambda p: p["spec"].get("nodeName") == "n2")
    p = await sb.pod_where("launcher", lambda p: p["spec"].get("nodeName"))
    assert p["spec"]["nodeName"] == "n2"


async def test_spread_over_two_zones_with_max_skew_one(sb):
    for n, zone in (("a1", "a"), ("a2", "a"), ("a3", "a"), ("b1", "b")):
        await sb.create("/api/v1/nodes", node(n, labels={ZONE: zone}))
    spread = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "serve"}}}]
    # b1 is the fullest node, so the least-allocated choice alone would never pick it
    await sb.create("/api/v1/namespaces/default/pods", pod("filler", gpus=6, nodeName="b1"))
    for i in range(4):
        await sb.create("/api/v1/namespaces/default/pods", labelled(f"serve-{i}", {"app": "serve"}, gpus=1,
                                                                    topologySpreadConstraints=spread))
        await sb.pod_where(f"serve-{i}", lambda p: p["spec"].get("nodeName"))
    zones = [(await sb.get(f"/api/v1/namespaces/default/pods/serve-{i}"))["spec"]["nodeName"][0] for i in range(4)]
    assert sorted(zones) == ["a", "a", "b", "b"]
    # zone b is full now (8 GPUs): a fifth replica would make a 3 against b's 2, skew 1, fine;
    # a sixth (a: 4, b: 2) would be skew 2, so it waits with the real reason
    for i in (4, 5):
        await sb.create("/api/v1/namespaces/default/pods", labelled(f"serve-{i}", {"app": "serve"}, gpus=1,
                                                                    topologySpreadConstraints=spread))
    await sb.pod_where("serve-4", lambda p: p["spec"].get("nodeName", "").startswith("a"))
    p = await sb.pod_where("serve-5", unschedulable)
    assert cond(p, "PodScheduled")["message"].startswith(
        "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) didn't match pod topology spread constraints.")


def test_api_server_refuses_bad_placement_rules_with_field_paths(sandbox, api):
    core = CoreV1Api(api)
    body = labelled("bad", {"app": "x"}, topologySpreadConstraints=[
        {"maxSkew": 0, "topologyKey": "", "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2,
         "labelSelector": {"matchLabels": {"app": "x"}}, "matchLabelKeys": ["app"]}],
        affinity={"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 101, "podAffinityTerm": {"labelSelector": {}, "topologyKey": HOST}}]}})
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("default", body)
    assert caught.value.status == 422
    text = caught.value.body
    where = "spec.topologySpreadConstraints[0]"
    for expected in (f"{where}.maxSkew: Invalid value: 0: must be greater than zero",
                     f"{where}.topologyKey: Required value: can not be empty",
                     f"{where}.minDomains: Invalid value: 2: can only use minDomains if whenUnsatisfiable=DoNotSchedule, not ScheduleAnyway",
                     f'{where}.matchLabelKeys[0]: Invalid value: \\"app\\": exists in both matchLabelKeys and labelSelector',
                     "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: "
                     "Invalid value: 101: must be in the range 1-100"):
        assert expected in text, (expected, text)


def test_kubectl_refuses_an_affinity_term_without_topology_key(sandbox, kubectl, tmp_path):
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, image: busybox}]\n"
        "  affinity:\n    podAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n"
        "      - labelSelector: {matchLabels: {a: b}}\n")
    result = kubectl.run("apply", "-f", str(manifest))
    assert result.returncode != 0
    assert ("spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: "
            "Required value: can not be empty") in result.stderr

"""The sandbox serves Dynamic Resource Allocation as a cluster does (issue 35): the four
``resource.k8s.io/v1`` kinds, NVIDIA's driver stand-in (DeviceClass ``gpu.nvidia.com``, a slice per
GPU node), the resourceclaim controller and the kubelet's claim checks, seen through kubectl and
the official ``kubernetes`` client over real HTTPS. Allocation here is done by hand (a status
PATCH, as a scheduler writes it): the sandbox's own default scheduler does not allocate claims.

Time is the store's ManualClock: a pod's run ends only when a test moves it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from kubectl import Kubectl
from kubernetes.client import ApiClient, Configuration, CoreV1Api, ResourceV1Api
from kubernetes.client.rest import ApiException
from sandboxes import node
from usher.sandbox.apiserver import FakeApiServer, ServerThread
from usher.sandbox.store import Store
from usher.sandbox.world import ManualClock

NS = "default"


class Cluster:
    """A sandbox with the controllers on a manual clock, kubectl and the official client."""

    def __init__(self, thread: ServerThread, clock: ManualClock, kubectl: Kubectl, api: ApiClient) -> None:
        self.thread, self.clock, self.kubectl = thread, clock, kubectl
        self.core, self.resource = CoreV1Api(api), ResourceV1Api(api)

    def step(self) -> None:
        self.thread.call(self.thread.server.controllers.step)

    def advance(self, seconds: float) -> None:
        self.clock.t += seconds
        self.step()

    def until(self, probe: Callable[[], Any], what: str, deadline: float = 15.0) -> Any:
        end = time.monotonic() + deadline
        while True:
            self.step()
            value = probe()
            if value:
                return value
            if time.monotonic() > end:
                raise AssertionError(f"never happened: {what}")
            time.sleep(0.02)

    def apply(self, text: str) -> str:
        return self.kubectl.ok("apply", "-f", "-", stdin=text)

    def pod(self, name: str) -> Any:
        return self.core.read_namespaced_pod(name, NS)

    def claim(self, name: str) -> Any:
        return self.resource.read_namespaced_resource_claim(name, NS)

    def events(self, name: str) -> list[Any]:
        return [e for e in self.core.list_namespaced_event(NS).items if e.involved_object.name == name]

    def event(self, name: str, reason: str) -> Any:
        return self.until(lambda: next((e for e in self.events(name) if e.reason == reason), None),
                          f"{reason} event on {name}")

    def slice_of(self, node_name: str) -> Any:
        slices = self.resource.list_resource_slice(field_selector=f"spec.nodeName={node_name}").items
        return slices[0] if slices else None

    def allocate(self, claim: str, pod: str, node_name: str, devices: list[str], pool: str | None = None) -> Any:
        """Allocate ``devices`` of ``pool`` (default: the node's) and reserve the claim for ``pod``,
        as a scheduler does: one status PATCH through the official client."""
        uid = self.pod(pod).metadata.uid
        request = self.claim(claim).spec.devices.requests[0].name
        body = {"status": {
            "allocation": {
                "devices": {"results": [{"request": request, "driver": "gpu.nvidia.com", "pool": pool or node_name,
                                         "device": d} for d in devices]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]},
            },
            "reservedFor": [{"resource": "pods", "name": pod, "uid": uid}],
        }}
        return self.resource.patch_namespaced_resource_claim_status(claim, NS, body)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    clock = ManualClock(1_000_000.0)
    with ServerThread(FakeApiServer(Store(clock=clock.now), controllers=True, tls=True)) as thread:
        for name in ("n1", "n2"):
            body = node(name, gpus=4, labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                               "nvidia.com/gpu.memory": "81559"})
            body["metadata"]["annotations"] = {"usher/nvlink": "0,1;2,3"}
            thread.call(thread.server.store.create, "nodes", body)
        thread.call(thread.server.store.create, "nodes", node("cpu-only", gpus=0))
        config = tmp_path / "kubeconfig"
        config.write_text(yaml.safe_dump(thread.server.kubeconfig(thread.server.admin_token)))
        configuration = Configuration()
        kubernetes.config.load_kube_config_from_dict(thread.server.kubeconfig(thread.server.admin_token),
                                                     client_configuration=configuration)
        with ApiClient(configuration) as api:
            c = Cluster(thread, clock, Kubectl(config), api)
            c.step()
            yield c
        assert not thread.server.controllers.errors, thread.server.controllers.errors


TEMPLATE = """apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: two-gpus}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly: {deviceClassName: gpu.nvidia.com, count: 2}
"""


def pod_yaml(name: str, claims: str, node_name: str | None = None, duration: str = "60s") -> str:
    text = (f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, annotations: {{usher/duration: {duration}}}}}\n"
            f"spec:\n  restartPolicy: Never\n  resourceClaims: {claims}\n"
            "  containers: [{name: main, image: busybox:1.36, resources: {claims: [{name: gpus}]}}]\n")
    return text + (f"  nodeName: {node_name}\n" if node_name else "")


def made_claim(cluster: Cluster, pod: str) -> str:
    """The claim the resourceclaim controller made for the pod's ``gpus`` entry."""
    statuses = cluster.until(lambda: cluster.pod(pod).status.resource_claim_statuses, f"claim made for {pod}")
    return statuses[0].resource_claim_name


# ---------------------------------------------------------------- kinds served, the driver's objects


def test_kubectl_lists_the_dra_kinds_with_the_clusters_columns(cluster: Cluster) -> None:
    resources = cluster.kubectl.ok("api-resources", "--api-group=resource.k8s.io", "-o", "name").split()
    assert sorted(resources) == ["deviceclasses.resource.k8s.io", "resourceclaims.resource.k8s.io",
                                 "resourceclaimtemplates.resource.k8s.io", "resourceslices.resource.k8s.io"]
    cluster.apply(TEMPLATE)
    cluster.apply(pod_yaml("p", "[{name: gpus, resourceClaimTemplateName: two-gpus}]", node_name="n1"))
    claim = made_claim(cluster, "p")
    out = cluster.kubectl.ok("get", "deviceclasses,resourceslices,resourceclaims,resourceclaimtemplates")
    lines = [line.split() for line in out.splitlines() if line.strip()]
    assert ["NAME", "AGE"] in lines and ["NAME", "NODE", "DRIVER", "POOL", "AGE"] in lines
    assert ["NAME", "STATE", "AGE"] in lines
    assert any(line[0] == "deviceclass.resource.k8s.io/gpu.nvidia.com" for line in lines)
    slices = {line[1]: line for line in lines if line[0].startswith("resourceslice.")}
    assert sorted(slices) == ["n1", "n2"]  # one per GPU node, none for cpu-only
    assert slices["n1"][2:4] == ["gpu.nvidia.com", "n1"]
    assert any(line[0] == f"resourceclaim.resource.k8s.io/{claim}" and line[1] == "pending" for line in lines)
    assert any(line[0] == "resourceclaimtemplate.resource.k8s.io/two-gpus" for line in lines)


def test_the_driver_publishes_nvidias_class_and_devices_with_islands_and_health_taints(cluster: Cluster) -> None:
    cls = cluster.resource.read_device_class("gpu.nvidia.com")
    assert [s.cel.expression for s in cls.spec.selectors] == [
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"]
    published = cluster.slice_of("n1")
    assert (published.spec.driver, published.spec.pool.name, published.spec.pool.resource_slice_count) == (
        "gpu.nvidia.com", "n1", 1)
    devices = {d.name: d for d in published.spec.devices}
    assert sorted(devices) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    gpu = devices["gpu-2"]
    assert gpu.attributes["type"].string == "gpu" and gpu.attributes["productName"].string == "NVIDIA H100 80GB HBM3"
    assert gpu.attributes["architecture"].string == "Hopper"
    assert gpu.attributes["cudaComputeCapability"].version == "9.0.0"
    assert gpu.attributes["uuid"].string.startswith("GPU-")
    assert gpu.attributes["sandbox.usher/nvlinkIsland"].int == 1  # usher/nvlink "0,1;2,3"
    assert devices["gpu-1"].attributes["sandbox.usher/nvlinkIsland"].int == 0
    assert gpu.capacity["memory"].value == "81559Mi"
    generation = published.spec.pool.generation
    cluster.core.patch_node("n1", {"metadata": {"annotations": {"usher/gpu-health": json.dumps({"2": "XID 79"})}}})
    republished = cluster.until(lambda: (s := cluster.slice_of("n1")).spec.pool.generation > generation and s,
                                "slice republished after a GPU fell ill")
    taints = {d.name: [(t.key, t.value, t.effect) for t in d.taints or []] for d in republished.spec.devices}
    assert taints == {"gpu-0": [], "gpu-1": [], "gpu-2": [("gpu.nvidia.com/xid", "79", "NoSchedule")], "gpu-3": []}
    cluster.core.delete_node("n2")
    cluster.until(lambda: cluster.slice_of("n2") is None, "a deleted node's slice goes with it")


def test_a_slice_whose_memory_the_server_stores_shorter_is_published_once(cluster: Cluster) -> None:
    # 81920 MiB (an A100 80GB's figure) is stored as 80Gi, as kube-apiserver keeps a quantity: the
    # driver must see its slice as published, not republish it on every round (the sandbox then
    # never settled: fixtures/demo.yaml's nodes say 81920)
    body = node("a100", gpus=2, labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                                        "nvidia.com/gpu.memory": "81920"})
    cluster.thread.call(cluster.thread.server.store.create, "nodes", body)
    published = cluster.until(lambda: cluster.slice_of("a100"), "the A100 node's slice")
    assert {d.capacity["memory"].value for d in published.spec.devices} == {"80Gi"}
    for _ in range(3):
        cluster.advance(60)
    assert cluster.slice_of("a100").spec.pool.generation == published.spec.pool.generation
    assert not any(part.dirty() for part in cluster.thread.server.controllers.parts)


# ---------------------------------------------------------------- the resourceclaim controller and the kubelet


def test_a_claim_from_a_template_is_owned_and_the_pod_waits_until_allocated_and_reserved(cluster: Cluster) -> None:
    cluster.apply(TEMPLATE)
    cluster.apply(pod_yaml("p", "[{name: gpus, resourceClaimTemplateName: two-gpus}]", node_name="n1"))
    name = made_claim(cluster, "p")
    claim = cluster.claim(name)
    pod = cluster.pod("p")
    assert name.startswith("p-gpus-")
    assert claim.metadata.annotations["resource.kubernetes.io/pod-claim-name"] == "gpus"
    owner = claim.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.uid, owner.controller) == ("Pod", "p", pod.metadata.uid, True)
    assert claim.spec.devices.requests[0].exactly.count == 2
    failed = cluster.event("p", "FailedPrepareDynamicResources")
    assert failed.type == "Warning" and failed.source.component == "kubelet"
    assert failed.message.startswith("Failed to prepare dynamic resources: ")
    assert "is not allowed to use ResourceClaim" in failed.message
    assert cluster.pod("p").status.phase == "Pending"
    assert "ContainerCreating" in cluster.kubectl.ok("get", "pod", "p")
    cluster.allocate(name, "p", "n1", ["gpu-0", "gpu-1"])
    assert "allocated,reserved" in cluster.kubectl.ok("get", "resourceclaim", name)
    cluster.until(lambda: cluster.pod("p").status.phase == "Running", "pod started once its claim is allocated")


def test_reservation_and_allocation_go_when_the_pod_ends_and_the_made_claim_is_deleted(cluster: Cluster) -> None:
    cluster.apply(TEMPLATE)
    cluster.apply(pod_yaml("p", "[{name: gpus, resourceClaimTemplateName: two-gpus}]", node_name="n1", duration="30s"))
    name = made_claim(cluster, "p")
    cluster.apply("apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: shared}\nspec:\n  devices:\n"
                  "    requests: [{name: gpus, exactly: {deviceClassName: gpu.nvidia.com}}]\n")
    cluster.apply(pod_yaml("q", "[{name: gpus, resourceClaimName: shared}]", node_name="n2", duration="30s"))
    cluster.allocate(name, "p", "n1", ["gpu-0", "gpu-1"])
    cluster.allocate("shared", "q", "n2", ["gpu-3"])
    cluster.until(lambda: cluster.pod("q").status.phase == "Running", "q started")
    cluster.advance(31)
    cluster.until(lambda: cluster.pod("q").status.phase == "Succeeded", "q finished")
    shared = cluster.until(lambda: (c := cluster.claim("shared")).status.allocation is None and c,
                           "the named claim deallocated")
    assert not shared.status.reserved_for
    assert "pending" in cluster.kubectl.ok("get", "resourceclaim", "shared")
    # the claim made from the template goes with its finished pod
    cluster.until(lambda: name not in [c.metadata.name for c in cluster.resource.list_namespaced_resource_claim(NS).items],
                  "the template's claim deleted")


def test_the_driver_refuses_another_nodes_gpus_and_a_gpu_held_by_another_claim(cluster: Cluster) -> None:
    cluster.apply(TEMPLATE)
    cluster.apply(pod_yaml("p", "[{name: gpus, resourceClaimTemplateName: two-gpus}]", node_name="n1"))
    name = made_claim(cluster, "p")
    # allocated with n1 as node but n2's devices: NVIDIA's plugin on n1 does not prepare them
    cluster.allocate(name, "p", "n1", ["gpu-0", "gpu-1"], pool="n2")
    failed = cluster.until(lambda: next((e for e in cluster.events("p") if "not a device of this node" in e.message), None),
                           "the driver's refusal")
    assert failed.reason == "FailedPrepareDynamicResources"
    assert "device gpu-0 of pool n2 is not a device of this node (n1)" in failed.message
    assert cluster.pod("p").status.phase == "Pending"
    # a GPU another claim holds is not prepared twice
    cluster.apply(pod_yaml("q", "[{name: gpus, resourceClaimTemplateName: two-gpus}]", node_name="n2"))
    other = made_claim(cluster, "q")
    cluster.allocate(other, "q", "n2", ["gpu-0", "gpu-1"])
    twice = cluster.until(lambda: next((e for e in cluster.events("q") if "already allocated to claim" in e.message), None),
                          "refused: device given twice")
    assert f"device gpu-0 of pool n2 is already allocated to claim default/{name}" in twice.message


# ---------------------------------------------------------------- validation


def test_bad_claims_are_refused_with_the_field_paths(cluster: Cluster) -> None:
    bad = ("apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: bad}\nspec:\n  devices:\n"
           "    requests:\n    - {name: a, exactly: {count: 0}}\n"
           "    - {name: b, exactly: {deviceClassName: gpu.nvidia.com, count: -2}}\n"
           "    - {name: c, exactly: {deviceClassName: gpu.nvidia.com, allocationMode: Some}}\n"
           "    - {name: d}\n"
           "    constraints: [{requests: [a, nope]}]\n")
    out = cluster.kubectl.run("apply", "-f", "-", stdin=bad)
    assert out.returncode != 0
    for line in (
        "spec.devices.requests[0].exactly.deviceClassName: Required value",
        "spec.devices.requests[1].exactly.count: Invalid value: -2: must be greater than zero",
        'spec.devices.requests[2].exactly.allocationMode: Unsupported value: "Some": supported values: "All", "ExactCount"',
        "spec.devices.requests[3]: Required value: exactly one of `exactly` or `firstAvailable` is required",
        "spec.devices.constraints[0].requests[1]: Invalid value: \"nope\": must be the name of a request in the claim",
        "spec.devices.constraints[0].matchAttribute: Required value",
    ):
        assert line in out.stderr, (line, out.stderr)


def test_device_tolerations_are_defaulted_and_validated_with_the_field_paths(cluster: Cluster) -> None:
    bad = ("apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: tolerant}\nspec:\n  devices:\n"
           "    requests:\n    - name: a\n      exactly:\n        deviceClassName: gpu.nvidia.com\n        tolerations:\n"
           "        - {key: gpu.nvidia.com/xid, operator: Maybe}\n"
           "        - {key: gpu.nvidia.com/xid, operator: Exists, value: '79'}\n"
           "        - {key: gpu.nvidia.com/xid, effect: PreferNoSchedule}\n")
    out = cluster.kubectl.run("apply", "-f", "-", stdin=bad)
    assert out.returncode != 0
    for line in (
        'spec.devices.requests[0].exactly.tolerations[0].operator: Unsupported value: "Maybe": supported values: "Equal", "Exists"',
        'spec.devices.requests[0].exactly.tolerations[1].value: Invalid value: "79": must be empty for operator `Exists`',
        'spec.devices.requests[0].exactly.tolerations[2].effect: Unsupported value: "PreferNoSchedule": supported values: '
        '"NoExecute", "NoSchedule", "None"',
    ):
        assert line in out.stderr, (line, out.stderr)
    good = bad.split("        - {key: gpu.nvidia.com/xid, operator: Maybe}")[0] + "        - {key: gpu.nvidia.com/xid, value: '79'}\n"
    cluster.kubectl.ok("apply", "-f", "-", stdin=good)
    stored = json.loads(cluster.kubectl.ok("get", "resourceclaim", "tolerant", "-o", "json"))
    assert stored["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] == [
        {"key": "gpu.nvidia.com/xid", "operator": "Equal", "value": "79"}]


def test_status_writes_are_validated_reserved_for_limit_and_allocation_set_once(cluster: Cluster) -> None:
    cluster.apply("apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c}\nspec:\n  devices:\n"
                  "    requests: [{name: gpus, exactly: {deviceClassName: gpu.nvidia.com}}]\n")
    consumers = [{"resource": "pods", "name": f"p{i}", "uid": f"uid-{i}"} for i in range(257)]
    with pytest.raises(ApiException) as too_many:
        cluster.resource.patch_namespaced_resource_claim_status("c", NS, {"status": {"reservedFor": consumers[:1]}})
    assert too_many.value.status == 422
    assert "status.reservedFor: Forbidden: may not be specified when `allocated` is not set" in too_many.value.body
    allocation = {"devices": {"results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}]}}
    with pytest.raises(ApiException) as over:
        cluster.resource.patch_namespaced_resource_claim_status(
            "c", NS, {"status": {"allocation": allocation, "reservedFor": consumers}})
    assert "status.reservedFor: Too many: 257: must have at most 256 items" in over.value.body
    cluster.apply(pod_yaml("p", "[{name: gpus, resourceClaimName: c}]", node_name="n1"))
    cluster.resource.patch_namespaced_resource_claim_status("c", NS, {"status": {
        "allocation": allocation, "reservedFor": [{"resource": "pods", "name": "p", "uid": cluster.pod("p").metadata.uid}]}})
    moved = {"devices": {"results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-1"}]}}
    with pytest.raises(ApiException) as immutable:
        cluster.resource.patch_namespaced_resource_claim_status("c", NS, {"status": {"allocation": moved}})
    assert "status.allocation: Invalid value" in immutable.value.body and "field is immutable" in immutable.value.body
    with pytest.raises(ApiException) as spec_change:
        cluster.resource.patch_namespaced_resource_claim(
            "c", NS, {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "other"}}]}}})
    assert spec_change.value.status == 422 and "spec: Invalid value" in spec_change.value.body


def test_the_sandboxs_default_scheduler_says_it_does_not_allocate_claims(cluster: Cluster) -> None:
    cluster.apply(TEMPLATE)
    cluster.apply(pod_yaml("p", "[{name: gpus, resourceClaimTemplateName: two-gpus}]"))
    condition = cluster.until(
        lambda: next((c for c in cluster.pod("p").status.conditions or [] if c.type == "PodScheduled"), None),
        "the scheduler's verdict")
    assert (condition.status, condition.reason) == ("False", "Unschedulable")
    assert "which the sandbox's default scheduler does not allocate" in condition.message
    assert cluster.pod("p").spec.node_name is None


def test_a_pods_claims_are_validated_with_the_field_paths(cluster: Cluster) -> None:
    both = ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n"
            "  resourceClaims: [{name: gpus, resourceClaimName: a, resourceClaimTemplateName: b}, {name: none}]\n"
            "  containers: [{name: main, image: busybox:1.36, resources: {claims: [{name: gpus}, {name: nvme}]}}]\n")
    out = cluster.kubectl.run("apply", "-f", "-", stdin=both)
    assert out.returncode != 0
    assert "spec.resourceClaims[0]: Invalid value: " in out.stderr
    assert "at most one of `resourceClaimName` or `resourceClaimTemplateName` may be specified" in out.stderr
    assert "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`" in out.stderr
    assert ('spec.containers[0].resources.claims[1]: Not found: "nvme": '
            "must be one of the names in pod.spec.resourceClaims: gpus, none") in out.stderr
    job = ("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n    spec:\n"
           "      restartPolicy: Never\n      containers: [{name: main, image: busybox:1.36, resources: {claims: [{name: gpus}]}}]\n")
    out = cluster.kubectl.run("apply", "-f", "-", stdin=job)
    assert ('spec.template.spec.containers[0].resources.claims[0]: Not found: "gpus": '
            "must be one of the names in pod.spec.resourceClaims which is empty") in out.stderr

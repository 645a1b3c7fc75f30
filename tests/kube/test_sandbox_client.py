"""The official ``kubernetes`` Python client against the sandbox, typed models and all.

The client deserializes every response into its generated models, which require the fields a
real cluster always sends (a Node's full ``nodeInfo``, a Job's defaults...), so a sandbox that
leaves one out fails here as it would fail a user.
"""

from __future__ import annotations

import threading

import kubernetes
from kubernetes.client import (
    ApiClient,
    ApiextensionsV1Api,
    BatchV1Api,
    CoordinationV1Api,
    CoreV1Api,
    CustomObjectsApi,
)

from sandboxes import official_client_fixture, two_node_sandbox_fixture  # noqa: F401 (the api and sandbox fixtures)

M = kubernetes.client


def watch_first(list_fn: object, *args: object, **kwargs: object) -> list[tuple[str, object]]:
    events = []
    for event in kubernetes.watch.Watch().stream(list_fn, *args, timeout_seconds=2, **kwargs):
        events.append((event["type"], event["object"]))
    return events


def test_nodes_list_read_patch_and_watch_as_typed_models(api: ApiClient) -> None:
    core = CoreV1Api(api)
    nodes = core.list_node().items
    assert [n.metadata.name for n in nodes] == ["gpu-1", "gpu-2"]
    info = nodes[0].status.node_info
    assert info.kubelet_version and info.os_image and info.architecture and info.boot_id
    assert {c.type for c in nodes[0].status.conditions} >= {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"}
    patched = core.patch_node("gpu-1", {"metadata": {"labels": {"usher/rack": "r1"}}})
    assert patched.metadata.labels["usher/rack"] == "r1"
    assert core.read_node("gpu-1").status.allocatable["nvidia.com/gpu"] == "8"
    events = watch_first(core.list_node)
    assert [(kind, node.metadata.name) for kind, node in events] == [("ADDED", "gpu-1"), ("ADDED", "gpu-2")]


def test_pods_jobs_leases_and_events(api: ApiClient) -> None:
    core, batch, leases = CoreV1Api(api), BatchV1Api(api), CoordinationV1Api(api)
    container = M.V1Container(name="t", image="busybox", resources=M.V1ResourceRequirements(limits={"nvidia.com/gpu": "8"}))
    template = M.V1PodTemplateSpec(spec=M.V1PodSpec(restart_policy="Never", scheduler_name="usher", containers=[container]))
    job = M.V1Job(metadata=M.V1ObjectMeta(name="train"), spec=M.V1JobSpec(parallelism=2, completions=2, template=template))
    created = batch.create_namespaced_job("default", job)
    assert created.spec.selector.match_labels["batch.kubernetes.io/controller-uid"] == created.metadata.uid
    assert batch.read_namespaced_job("train", "default").spec.backoff_limit == 6
    assert [j.metadata.name for j in batch.list_job_for_all_namespaces().items] == ["train"]
    batch.patch_namespaced_job("train", "default", {"spec": {"suspend": True}})
    assert batch.read_namespaced_job("train", "default").spec.suspend is True

    pod = M.V1Pod(metadata=M.V1ObjectMeta(name="p0", labels={"app": "x"}), spec=template.spec)
    core.create_namespaced_pod("default", pod)
    status = {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m"}]}}
    core.patch_namespaced_pod_status("p0", "default", status)
    read = core.read_namespaced_pod("p0", "default")
    assert read.status.conditions[0].reason == "Unschedulable" and read.status.phase == "Pending"
    assert [p.metadata.name for p in core.list_namespaced_pod("default", label_selector="app=x").items] == ["p0"]

    lease = M.V1Lease(metadata=M.V1ObjectMeta(name="usher"), spec=M.V1LeaseSpec(holder_identity="usher-0", lease_duration_seconds=15))
    leases.create_namespaced_lease("default", lease)
    renewed = leases.patch_namespaced_lease("usher", "default", {"spec": {"holderIdentity": "usher-1"}})
    assert renewed.spec.holder_identity == "usher-1"

    event = M.CoreV1Event(
        metadata=M.V1ObjectMeta(name="p0.1"),
        involved_object=M.V1ObjectReference(kind="Pod", name="p0", namespace="default"),
        reason="Scheduled",
        message="bound",
        type="Normal",
    )
    core.create_namespaced_event("default", event)
    assert [e.reason for e in core.list_namespaced_event("default", field_selector="involvedObject.name=p0").items] == ["Scheduled"]

    seen = watch_first(batch.list_namespaced_job, "default")
    assert [(kind, j.metadata.name) for kind, j in seen] == [("ADDED", "train")]


def test_custom_resources_from_a_crd(api: ApiClient) -> None:
    crd = M.V1CustomResourceDefinition(
        metadata=M.V1ObjectMeta(name="pytorchjobs.kubeflow.org"),
        spec=M.V1CustomResourceDefinitionSpec(
            group="kubeflow.org",
            scope="Namespaced",
            names=M.V1CustomResourceDefinitionNames(plural="pytorchjobs", singular="pytorchjob", kind="PyTorchJob"),
            versions=[
                M.V1CustomResourceDefinitionVersion(
                    name="v1",
                    served=True,
                    storage=True,
                    schema=M.V1CustomResourceValidation(
                        open_apiv3_schema=M.V1JSONSchemaProps(type="object", x_kubernetes_preserve_unknown_fields=True)
                    ),
                )
            ],
        ),
    )
    ApiextensionsV1Api(api).create_custom_resource_definition(crd)
    custom = CustomObjectsApi(api)
    body = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "llama"}, "spec": {"x": 1}}
    custom.create_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs", body)
    listed = custom.list_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["llama"]
    changes: list[str] = []

    def watch() -> None:
        stream = kubernetes.watch.Watch().stream(
            custom.list_namespaced_custom_object, "kubeflow.org", "v1", "default", "pytorchjobs", timeout_seconds=3
        )
        changes.extend(f"{e['type']} {e['object']['metadata']['name']}" for e in stream)

    watcher = threading.Thread(target=watch)
    watcher.start()
    custom.patch_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs", "llama", {"spec": {"x": 2}})
    watcher.join()
    assert changes[0] == "ADDED llama" and "MODIFIED llama" in changes or changes == ["ADDED llama"]

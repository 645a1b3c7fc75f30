"""The sandbox's object lifecycle as a real API server has it: CRDs, graceful deletion,
finalizers and the garbage collector, seen over HTTP as any client sees them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from usher.sandbox.apiserver import FakeApiServer
from usher.sandbox.store import Store

PODS = "/api/v1/namespaces/default/pods"

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "pytorchjobs.kubeflow.org"},
    "spec": {
        "group": "kubeflow.org",
        "scope": "Namespaced",
        "names": {"plural": "pytorchjobs", "singular": "pytorchjob", "kind": "PyTorchJob", "listKind": "PyTorchJobList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    clock = [1000.0]
    server = FakeApiServer(Store(clock=lambda: clock[0]))
    await server.start()
    async with httpx.AsyncClient(base_url=server.url) as http:
        http.server = server  # type: ignore[attr-defined]
        yield http
    await server.stop()


def pod(name: str, node: str | None = None, **meta: object) -> dict:
    spec: dict = {"containers": [{"name": "main", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **meta}, "spec": spec}


async def test_a_crd_is_served_once_created_and_its_objects_go_with_it(client: httpx.AsyncClient) -> None:
    path = "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs"
    assert (await client.get(path)).status_code == 404
    assert (await client.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=CRD)).status_code == 201
    crd = (await client.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/pytorchjobs.kubeflow.org")).json()
    assert {c["type"]: c["status"] for c in crd["status"]["conditions"]} == {"NamesAccepted": "True", "Established": "True"}
    resources = (await client.get("/apis/kubeflow.org/v1")).json()["resources"]
    assert {r["name"] for r in resources} == {"pytorchjobs", "pytorchjobs/status"}
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "llama"}, "spec": {"x": 1}}
    assert (await client.post(path, json=job)).status_code == 201
    listed = (await client.get(path)).json()
    assert [i["metadata"]["name"] for i in listed["items"]] == ["llama"]
    assert listed["items"][0]["kind"] == "PyTorchJob"  # custom resources keep kind in lists
    await client.delete("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/pytorchjobs.kubeflow.org")
    assert (await client.get(path)).status_code == 404
    assert "kubeflow.org" not in {g["name"] for g in (await client.get("/apis")).json()["groups"]}


async def test_a_bound_pod_is_deleted_gracefully_and_an_unbound_one_at_once(client: httpx.AsyncClient) -> None:
    await client.post(PODS, json=pod("waiting"))
    await client.post(PODS, json=pod("running", node="n1"))
    assert (await client.delete(f"{PODS}/waiting")).status_code == 200
    assert (await client.get(f"{PODS}/waiting")).status_code == 404
    marked = (await client.delete(f"{PODS}/running")).json()
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 30
    assert marked["metadata"]["deletionTimestamp"] == "1970-01-01T00:17:10Z"  # now (1000 s) + 30 s
    assert (await client.get(f"{PODS}/running")).status_code == 200
    shorter = (await client.delete(f"{PODS}/running", params={"gracePeriodSeconds": "5"})).json()
    assert shorter["metadata"]["deletionGracePeriodSeconds"] == 5
    # an update cannot take the deletion back
    current = (await client.get(f"{PODS}/running")).json()
    del current["metadata"]["deletionTimestamp"]
    updated = (await client.put(f"{PODS}/running", json=current)).json()
    assert updated["metadata"]["deletionTimestamp"]
    await client.delete(f"{PODS}/running", params={"gracePeriodSeconds": "0"})
    assert (await client.get(f"{PODS}/running")).status_code == 404


async def test_finalizers_hold_an_object_until_the_last_is_removed(client: httpx.AsyncClient) -> None:
    path = "/api/v1/namespaces/default/configmaps"
    cm = {"metadata": {"name": "held", "finalizers": ["example.com/a", "example.com/b"]}, "data": {}}
    await client.post(path, json=cm)
    held = await client.delete(f"{path}/held")
    assert held.status_code == 200 and held.json()["metadata"]["deletionTimestamp"]
    adding = await client.patch(
        f"{path}/held",
        json={"metadata": {"finalizers": ["example.com/a", "example.com/b", "example.com/c"]}},
        headers={"content-type": "application/merge-patch+json"},
    )
    assert adding.status_code == 422
    for left in (["example.com/b"], []):
        await client.patch(
            f"{path}/held", json={"metadata": {"finalizers": left}}, headers={"content-type": "application/merge-patch+json"}
        )
    assert (await client.get(f"{path}/held")).status_code == 404


async def test_deleting_an_owner_collects_its_dependents_unless_orphaned(client: httpx.AsyncClient) -> None:
    cms = "/api/v1/namespaces/default/configmaps"
    for name in ("owner", "keeper"):
        await client.post(cms, json={"metadata": {"name": name}})
    owner = (await client.get(f"{cms}/owner")).json()
    keeper = (await client.get(f"{cms}/keeper")).json()
    for name, parent in (("child", owner), ("kept", keeper)):
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": parent["metadata"]["name"], "uid": parent["metadata"]["uid"]}
        await client.post(PODS, json=pod(name, ownerReferences=[ref]))
    await client.delete(f"{cms}/owner")
    assert (await client.get(f"{PODS}/child")).status_code == 404
    await client.delete(f"{cms}/keeper", params={"propagationPolicy": "Orphan"})
    kept = (await client.get(f"{PODS}/kept")).json()
    assert "ownerReferences" not in kept["metadata"]
    bad = await client.delete(f"{PODS}/kept", params={"propagationPolicy": "Sometimes"})
    assert bad.status_code == 400 and "propagationPolicy" in bad.json()["message"]


async def test_an_apply_never_replaces_the_scenarios_queues_but_an_edit_does(client: httpx.AsyncClient) -> None:
    from usher.engine.scenario import parse_scenario
    from usher.sandbox.objects import queue_configmap

    scenario = parse_scenario(
        "name: demo\nnodes: [{name: n1, gpus: 8}]\nqueues: [{name: research, namespaceSelector: {}, quota: {gpu: 8}}]\njobs: []\n"
    )
    await client.post("/api/v1/namespaces", json={"metadata": {"name": "usher-system"}})
    path = "/api/v1/namespaces/usher-system/configmaps"
    await client.post(path, json=queue_configmap(scenario))
    applied = await client.patch(
        f"{path}/usher-queues",
        params={"fieldManager": "kubectl-client-side-apply"},
        json={"data": {"queues.yaml": "queues: []\n"}},
        headers={"content-type": "application/strategic-merge-patch+json"},
    )
    assert applied.status_code == 403
    assert "holds the queues of the sandbox's scenario 'demo'" in applied.json()["message"]
    assert "research" in (await client.get(f"{path}/usher-queues")).json()["data"]["queues.yaml"]
    edited = await client.patch(
        f"{path}/usher-queues",
        json={"data": {"queues.yaml": "queues: []\n"}},
        headers={"content-type": "application/merge-patch+json"},
    )
    assert edited.status_code == 200


async def test_workloads_get_the_registrys_defaults_and_kubectls_columns(client: httpx.AsyncClient) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {"parallelism": 4, "completions": 4, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "t", "image": "x"}]}}},
    }
    created = (await client.post("/apis/batch/v1/namespaces/default/jobs", json=job)).json()
    uid = created["metadata"]["uid"]
    assert created["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert created["spec"]["template"]["metadata"]["labels"]["job-name"] == "train"
    assert created["spec"]["backoffLimit"] == 6
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}
    created = (await client.post("/api/v1/namespaces/default/services", json=service)).json()
    assert created["spec"]["clusterIP"].startswith("10.96.") and created["spec"]["ports"][0]["targetPort"] == 80
    accept = {"accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
    jobs = (await client.get("/apis/batch/v1/namespaces/default/jobs", headers=accept)).json()
    assert [c["name"] for c in jobs["columnDefinitions"] if c["priority"] == 0] == ["Name", "Status", "Completions", "Duration", "Age"]
    assert jobs["rows"][0]["cells"][:3] == ["train", "Running", "0/4"]
    services = (await client.get("/api/v1/namespaces/default/services", headers=accept)).json()
    assert services["rows"][0]["cells"][4] == "80/TCP"

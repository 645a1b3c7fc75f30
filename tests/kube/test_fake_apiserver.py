"""Contract tests of the sandbox's fake Kubernetes API server, over real loopback HTTP.

The same semantics are checked twice: with raw HTTP (httpx, as usher's backend talks) and with
the official ``kubernetes`` client (whose expectations encode the real API's wire format).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import kubernetes
import pytest
from kubernetes.client import ApiClient, Configuration, CoordinationV1Api, CoreV1Api, PolicyV1Api
from kubernetes.client.rest import ApiException

from usher.engine.backends.http_server import HttpServer, Request, Response
from usher.sandbox.apiserver import FakeApiServer, FaultKind, ServerThread
from usher.sandbox.tables import human_duration
from usher.sandbox.store import ApiError, EventType, PatchType, Store

NOW = 1_800_000_000.0
PODS = "/api/v1/namespaces/default/pods"
MERGE = {"content-type": "application/merge-patch+json"}
JSON_PATCH = {"content-type": "application/json-patch+json"}
TABLE = {"accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}
GUARD = 5.0
"""Seconds before a test that waits for the server gives up: a hang guard, not a measured bound."""


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def pod(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}}
    body["spec"] = {"containers": [{"name": "main", "image": "busybox"}], **spec}
    return body


def binding(name: str, node: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "annotations": annotations or {}}
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta, "target": {"kind": "Node", "name": node}}


def running(store: Store, name: str, ready: bool = True) -> None:
    """Move a pod to Running (and Ready), as a kubelet reports it."""
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    store.patch("pods", name, {"status": status}, "default", subresource="status")


def pdb(name: str, selector: dict[str, str], **spec: Any) -> dict[str, Any]:
    meta = {"name": name}
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": meta,
        "spec": {"selector": {"matchLabels": selector}, **spec},
    }


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def server(clock: Clock) -> AsyncIterator[FakeApiServer]:
    srv = FakeApiServer(Store(clock, seed=1), bookmark_interval=0.05, seed=7)
    await srv.start()
    yield srv
    await srv.stop()


@pytest.fixture
async def client(server: FakeApiServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=GUARD) as c:
        yield c


async def names(client: httpx.AsyncClient, path: str = PODS, **params: str) -> list[str]:
    response = await client.get(path, params=params)
    assert response.status_code == 200, response.text
    return [item["metadata"]["name"] for item in response.json()["items"]]


async def read_events(response: httpx.Response, count: int) -> list[dict[str, Any]]:
    """The next ``count`` events of a watch response."""
    events: list[dict[str, Any]] = []

    async def read() -> None:
        async for line in response.aiter_lines():
            if line:
                events.append(json.loads(line))
            if len(events) == count:
                return

    await asyncio.wait_for(read(), GUARD)
    return events


async def all_events(client: httpx.AsyncClient, path: str = PODS, **params: str) -> list[dict[str, Any]]:
    """Every event of a watch that ends by itself (``timeoutSeconds``, an error, a drop)."""
    async with client.stream("GET", path, params={"watch": "true", **params}) as response:
        assert response.status_code == 200
        lines = await asyncio.wait_for(_lines(response), GUARD)
    return [json.loads(line) for line in lines if line]


async def _lines(response: httpx.Response) -> list[str]:
    return [line async for line in response.aiter_lines()]


def kinds(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["object"]["metadata"].get("name", "")) for e in events]


# --------------------------------------------------------------------------- discovery


async def test_discovery_names_every_served_resource_and_subresource(client: httpx.AsyncClient) -> None:
    assert (await client.get("/api")).json()["versions"] == ["v1"]
    core = {r["name"]: r for r in (await client.get("/api/v1")).json()["resources"]}
    assert {
        "pods",
        "pods/status",
        "pods/binding",
        "pods/eviction",
        "nodes",
        "nodes/status",
        "namespaces",
        "configmaps",
        "events",
    } <= core.keys()
    assert core["pods"]["namespaced"] and not core["nodes"]["namespaced"]
    assert core["pods/eviction"]["group"] == "policy"
    groups = {g["name"]: g["preferredVersion"]["groupVersion"] for g in (await client.get("/apis")).json()["groups"]}
    assert {
        "apps": "apps/v1",
        "batch": "batch/v1",
        "rbac.authorization.k8s.io": "rbac.authorization.k8s.io/v1",
        "apiextensions.k8s.io": "apiextensions.k8s.io/v1",
        "authorization.k8s.io": "authorization.k8s.io/v1",
        "coordination.k8s.io": "coordination.k8s.io/v1",
        "policy": "policy/v1",
        "scheduling.x-k8s.io": "scheduling.x-k8s.io/v1alpha1",
    }.items() <= groups.items()
    podgroups = (await client.get("/apis/scheduling.x-k8s.io/v1alpha1")).json()["resources"]
    assert podgroups[0]["kind"] == "PodGroup"
    assert (await client.get("/version")).json()["major"] == "1"


async def test_unknown_paths_are_404_status(client: httpx.AsyncClient) -> None:
    for path in ("/api/v2/pods", "/apis/apps/v2/deployments", "/api/v1/widgets", "/api/v1/pods/p1"):
        response = await client.get(path)
        assert response.status_code == 404, path
        assert response.json()["reason"] == "NotFound"


# --------------------------------------------------------------------------- create, get, errors


async def test_create_fills_server_fields_and_pod_defaults(client: httpx.AsyncClient) -> None:
    spoofed = pod("p1") | {"status": {"phase": "Running"}}
    created = await client.post(PODS, json=spoofed)
    assert created.status_code == 201
    body = created.json()
    meta = body["metadata"]
    assert meta["namespace"] == "default" and meta["uid"] and meta["generation"] == 1
    assert meta["creationTimestamp"] == "2027-01-15T08:00:00Z"
    assert int(meta["resourceVersion"]) > 0
    assert body["status"]["phase"] == "Pending"
    assert body["spec"]["schedulerName"] == "default-scheduler"
    assert (await client.get(f"{PODS}/p1")).json() == body


async def test_create_generates_names_and_rejects_duplicates(client: httpx.AsyncClient) -> None:
    generated = (await client.post(PODS, json={"metadata": {"generateName": "job-"}, "spec": {}})).json()
    assert generated["metadata"]["name"].startswith("job-") and len(generated["metadata"]["name"]) == 9
    await client.post(PODS, json=pod("p1"))
    duplicate = await client.post(PODS, json=pod("p1"))
    assert duplicate.status_code == 409
    assert duplicate.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "p1" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "p1", "kind": "pods"},
        "code": 409,
    }


async def test_errors_are_status_bodies(client: httpx.AsyncClient) -> None:
    missing = await client.get(f"{PODS}/nope")
    assert missing.status_code == 404
    assert missing.json()["message"] == 'pods "nope" not found'
    no_namespace = await client.post("/api/v1/namespaces/ghost/pods", json=pod("p1"))
    assert no_namespace.status_code == 404 and no_namespace.json()["details"]["kind"] == "namespaces"
    bad_name = await client.post(PODS, json=pod("Not_A_Name"))
    assert bad_name.status_code == 422 and bad_name.json()["reason"] == "Invalid"
    wrong_kind = await client.post(PODS, json={"kind": "Node", "metadata": {"name": "x"}})
    assert wrong_kind.status_code == 400 and wrong_kind.json()["reason"] == "BadRequest"
    group_missing = await client.get("/apis/coordination.k8s.io/v1/namespaces/default/leases/l")
    assert group_missing.json()["details"] == {"name": "l", "group": "coordination.k8s.io", "kind": "leases"}


# --------------------------------------------------------------------------- list


@pytest.fixture
async def labelled(client: httpx.AsyncClient, server: FakeApiServer) -> None:
    for name, labels in (("a", {"app": "web", "tier": "front"}), ("b", {"app": "db"}), ("c", {"app": "web"})):
        await client.post(PODS, json=pod(name, labels))
    await client.post(f"{PODS}/a/binding", json=binding("a", "n1"))
    running(server.store, "b")


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", ["a", "c"]),
        ("app==web", ["a", "c"]),
        ("app!=web", ["b"]),
        ("app in (db, web)", ["a", "b", "c"]),
        ("app notin (web)", ["b"]),
        ("tier", ["a"]),
        ("!tier", ["b", "c"]),
        ("app=web,!tier", ["c"]),
    ],
)
async def test_list_label_selectors(
    client: httpx.AsyncClient, labelled: None, selector: str, expected: list[str]
) -> None:
    assert await names(client, labelSelector=selector) == expected


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("spec.nodeName=", ["b", "c"]),
        ("spec.nodeName=n1", ["a"]),
        ("spec.nodeName!=n1", ["b", "c"]),
        ("status.phase=Running", ["b"]),
        ("status.phase==Pending,spec.nodeName=", ["c"]),
        ("metadata.name=c", ["c"]),
        ("metadata.namespace=default,spec.schedulerName=default-scheduler", ["a", "b", "c"]),
    ],
)
async def test_list_field_selectors(
    client: httpx.AsyncClient, labelled: None, selector: str, expected: list[str]
) -> None:
    assert await names(client, "/api/v1/pods", fieldSelector=selector) == expected


async def test_bad_selectors_are_400(client: httpx.AsyncClient) -> None:
    for params in ({"fieldSelector": "spec.color=red"}, {"labelSelector": "app in web"}):
        response = await client.get(PODS, params=params)
        assert response.status_code == 400 and response.json()["reason"] == "BadRequest"


async def test_list_has_resource_version_and_typed_items(client: httpx.AsyncClient) -> None:
    created = (await client.post(PODS, json=pod("p1"))).json()
    listed = (await client.get("/api/v1/pods")).json()
    assert listed["kind"] == "PodList" and listed["apiVersion"] == "v1"
    assert listed["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert "kind" not in listed["items"][0]
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g"},
        "spec": {"minMember": 2},
    }
    await client.post("/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups", json=group)
    custom = (await client.get("/apis/scheduling.x-k8s.io/v1alpha1/podgroups")).json()
    assert custom["items"][0]["kind"] == "PodGroup"


async def test_pagination_pages_come_from_one_snapshot(client: httpx.AsyncClient) -> None:
    for i in range(5):
        await client.post(PODS, json=pod(f"p{i}"))
    first = (await client.get(PODS, params={"limit": 2})).json()
    assert [p["metadata"]["name"] for p in first["items"]] == ["p0", "p1"]
    assert first["metadata"]["remainingItemCount"] == 3
    await client.delete(f"{PODS}/p3")
    await client.post(PODS, json=pod("p5"))
    token, seen = first["metadata"]["continue"], []
    while token:
        page = (await client.get(PODS, params={"limit": 2, "continue": token})).json()
        assert page["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        seen += [p["metadata"]["name"] for p in page["items"]]
        token = page["metadata"].get("continue")
    assert seen == ["p2", "p3", "p4"]
    assert await names(client) == ["p0", "p1", "p2", "p4", "p5"]


async def test_expired_continue_token_is_410(client: httpx.AsyncClient, server: FakeApiServer) -> None:
    for i in range(3):
        await client.post(PODS, json=pod(f"p{i}"))
    token = (await client.get(PODS, params={"limit": 1})).json()["metadata"]["continue"]
    server.store.compact()
    response = await client.get(PODS, params={"limit": 1, "continue": token})
    assert response.status_code == 410
    assert response.json()["reason"] == "Expired"


# --------------------------------------------------------------------------- update and patch


async def test_put_with_stale_resource_version_conflicts(client: httpx.AsyncClient) -> None:
    old = (await client.post("/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "c"}})).json()
    fresh = (await client.put("/api/v1/namespaces/default/configmaps/c", json=old | {"data": {"k": "1"}})).json()
    assert fresh["metadata"]["resourceVersion"] != old["metadata"]["resourceVersion"]
    stale = await client.put("/api/v1/namespaces/default/configmaps/c", json=old | {"data": {"k": "2"}})
    assert stale.status_code == 409 and stale.json()["reason"] == "Conflict"
    assert "the object has been modified" in stale.json()["message"]
    unconditional = old | {"data": {"k": "3"}, "metadata": {"name": "c"}}
    assert (await client.put("/api/v1/namespaces/default/configmaps/c", json=unconditional)).json()["data"] == {
        "k": "3"
    }


async def test_update_without_changes_keeps_resource_version(client: httpx.AsyncClient) -> None:
    created = (await client.post(PODS, json=pod("p1"))).json()
    again = (await client.put(f"{PODS}/p1", json=created)).json()
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_status_changes_only_through_the_status_subresource(client: httpx.AsyncClient) -> None:
    created = (await client.post(PODS, json=pod("p1"))).json()
    edited = created | {"status": {"phase": "Running"}}
    edited["metadata"] = created["metadata"] | {"labels": {"x": "1"}}
    main = (await client.put(f"{PODS}/p1", json=edited)).json()
    assert main["status"]["phase"] == "Pending" and main["metadata"]["labels"] == {"x": "1"}
    status_edit = main | {"status": {"phase": "Running"}, "metadata": main["metadata"] | {"labels": {}}}
    via_status = (await client.put(f"{PODS}/p1/status", json=status_edit)).json()
    assert via_status["status"] == {"phase": "Running"} and via_status["metadata"]["labels"] == {"x": "1"}
    patched = await client.patch(f"{PODS}/p1/status", json={"status": {"podIP": "10.0.0.1"}}, headers=MERGE)
    assert patched.json()["status"] == {"phase": "Running", "podIP": "10.0.0.1"}


async def test_pod_spec_is_immutable_except_images(client: httpx.AsyncClient) -> None:
    await client.post(PODS, json=pod("p1"))
    node = await client.patch(f"{PODS}/p1", json={"spec": {"nodeName": "n1"}}, headers=MERGE)
    assert node.status_code == 422 and "pod updates may not change fields" in node.json()["message"]
    image = [{"op": "replace", "path": "/spec/containers/0/image", "value": "busybox:2"}]
    assert (await client.patch(f"{PODS}/p1", json=image, headers=JSON_PATCH)).status_code == 200


async def test_generation_counts_spec_changes(client: httpx.AsyncClient) -> None:
    path = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups"
    await client.post(path, json={"metadata": {"name": "g"}, "spec": {"minMember": 2}})
    labelled = (await client.patch(f"{path}/g", json={"metadata": {"labels": {"a": "b"}}}, headers=MERGE)).json()
    assert labelled["metadata"]["generation"] == 1
    resized = (await client.patch(f"{path}/g", json={"spec": {"minMember": 4}}, headers=MERGE)).json()
    assert resized["metadata"]["generation"] == 2 and resized["spec"]["minMember"] == 4


async def test_merge_and_strategic_merge_patches(client: httpx.AsyncClient) -> None:
    await client.post(PODS, json=pod("p1", {"a": "1", "b": "2"}))
    merged = await client.patch(f"{PODS}/p1", json={"metadata": {"labels": {"a": None, "c": "3"}}}, headers=MERGE)
    assert merged.json()["metadata"]["labels"] == {"b": "2", "c": "3"}
    strategic = {"content-type": "application/strategic-merge-patch+json"}
    patched = await client.patch(f"{PODS}/p1", json={"metadata": {"annotations": {"k": "v"}}}, headers=strategic)
    assert patched.json()["metadata"]["annotations"] == {"k": "v"}


async def test_json_patch_with_test_operation(client: httpx.AsyncClient) -> None:
    await client.post(PODS, json=pod("p1", {"a": "1"}))
    ops = [
        {"op": "test", "path": "/metadata/labels/a", "value": "1"},
        {"op": "add", "path": "/metadata/labels/b", "value": "2"},
        {"op": "copy", "from": "/metadata/labels/b", "path": "/metadata/labels/c"},
        {"op": "remove", "path": "/metadata/labels/a"},
    ]
    ok = await client.patch(f"{PODS}/p1", json=ops, headers=JSON_PATCH)
    assert ok.json()["metadata"]["labels"] == {"b": "2", "c": "2"}
    failed = await client.patch(
        f"{PODS}/p1", json=[{"op": "test", "path": "/metadata/labels/b", "value": "9"}], headers=JSON_PATCH
    )
    assert failed.status_code == 422
    assert failed.json()["details"]["causes"][0]["message"] == "testing value /metadata/labels/b failed"
    assert (await client.get(f"{PODS}/p1")).json()["metadata"]["labels"] == {"b": "2", "c": "2"}


async def test_patch_rejects_unknown_media_types_and_honours_resource_version(client: httpx.AsyncClient) -> None:
    created = (await client.post(PODS, json=pod("p1"))).json()
    apply = await client.patch(f"{PODS}/p1", content=b"{}", headers={"content-type": "application/apply-patch+yaml"})
    assert apply.status_code == 415 and apply.json()["reason"] == "UnsupportedMediaType"
    await client.patch(f"{PODS}/p1", json={"metadata": {"labels": {"x": "1"}}}, headers=MERGE)
    stale = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"], "labels": {"x": "2"}}}
    assert (await client.patch(f"{PODS}/p1", json=stale, headers=MERGE)).status_code == 409


# --------------------------------------------------------------------------- delete


async def test_delete_returns_the_pod_and_a_status_for_others(client: httpx.AsyncClient) -> None:
    created = (await client.post(PODS, json=pod("p1"))).json()
    deleted = (await client.delete(f"{PODS}/p1")).json()
    assert deleted["metadata"]["uid"] == created["metadata"]["uid"]
    assert int(deleted["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert (await client.get(f"{PODS}/p1")).status_code == 404
    await client.post("/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "c"}})
    status = (await client.delete("/api/v1/namespaces/default/configmaps/c")).json()
    assert status["kind"] == "Status" and status["status"] == "Success" and status["details"]["name"] == "c"


async def test_delete_preconditions_and_namespace_cascade(client: httpx.AsyncClient) -> None:
    await client.post("/api/v1/namespaces", json={"metadata": {"name": "team"}})
    await client.post("/api/v1/namespaces/team/pods", json=pod("p1"))
    options = {"preconditions": {"uid": "not-the-uid"}}
    refused = await client.request("DELETE", "/api/v1/namespaces/team/pods/p1", json=options)
    assert refused.status_code == 409
    await client.delete("/api/v1/namespaces/team")
    assert await names(client, "/api/v1/pods") == []


# --------------------------------------------------------------------------- watch


async def test_watch_from_resource_version_streams_later_changes(client: httpx.AsyncClient) -> None:
    start = (await client.get(PODS)).json()["metadata"]["resourceVersion"]
    async with client.stream("GET", PODS, params={"watch": "true", "resourceVersion": start}) as watch:
        await client.post(PODS, json=pod("p1"))
        await client.patch(f"{PODS}/p1", json={"metadata": {"labels": {"x": "1"}}}, headers=MERGE)
        await client.delete(f"{PODS}/p1")
        events = await read_events(watch, 3)
    assert kinds(events) == [("ADDED", "p1"), ("MODIFIED", "p1"), ("DELETED", "p1")]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and versions[0] > int(start)
    assert events[0]["object"]["kind"] == "Pod"


async def test_watch_without_resource_version_starts_with_current_state(client: httpx.AsyncClient) -> None:
    await client.post(PODS, json=pod("p1"))
    await client.post(PODS, json=pod("p2"))
    async with client.stream("GET", PODS, params={"watch": "1"}) as watch:
        await client.post(PODS, json=pod("p3"))
        events = await read_events(watch, 3)
    assert kinds(events) == [("ADDED", "p1"), ("ADDED", "p2"), ("ADDED", "p3")]


async def test_watch_resumes_where_the_client_left_off(client: httpx.AsyncClient) -> None:
    async with client.stream("GET", PODS, params={"watch": "true", "resourceVersion": "0"}) as watch:
        await client.post(PODS, json=pod("p1"))
        last = (await read_events(watch, 1))[0]["object"]["metadata"]["resourceVersion"]
    await client.post(PODS, json=pod("p2"))
    await client.delete(f"{PODS}/p1")
    async with client.stream("GET", PODS, params={"watch": "true", "resourceVersion": last}) as watch:
        events = await read_events(watch, 2)
    assert kinds(events) == [("ADDED", "p2"), ("DELETED", "p1")]


async def test_watch_bookmarks_carry_only_the_resource_version(client: httpx.AsyncClient) -> None:
    created = (await client.post(PODS, json=pod("p1"))).json()
    params = {"watch": "true", "resourceVersion": created["metadata"]["resourceVersion"], "allowWatchBookmarks": "true"}
    async with client.stream("GET", PODS, params=params) as watch:
        bookmark = (await read_events(watch, 1))[0]
    assert bookmark == {
        "type": "BOOKMARK",
        "object": {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": created["metadata"]["resourceVersion"]},
        },
    }


async def test_watch_from_an_expired_resource_version_gets_an_error_event(clock: Clock) -> None:
    server = FakeApiServer(Store(clock, history=3))
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url) as client:
            first = (await client.post(PODS, json=pod("p0"))).json()["metadata"]["resourceVersion"]
            for i in range(1, 5):
                await client.post(PODS, json=pod(f"p{i}"))
            async with client.stream("GET", PODS, params={"watch": "true", "resourceVersion": first}) as watch:
                assert watch.status_code == 200
                events = [json.loads(line) for line in await asyncio.wait_for(_lines(watch), GUARD) if line]
    finally:
        await server.stop()
    assert [e["type"] for e in events] == ["ERROR"]
    assert events[0]["object"]["code"] == 410 and events[0]["object"]["reason"] == "Expired"
    assert events[0]["object"]["kind"] == "Status"


async def test_watch_selectors_turn_transitions_into_added_and_deleted(client: httpx.AsyncClient) -> None:
    await client.post(PODS, json=pod("p1", {"app": "web"}))
    start = (await client.get(PODS)).json()["metadata"]["resourceVersion"]
    params = {"watch": "true", "resourceVersion": start, "labelSelector": "app=web"}
    async with client.stream("GET", PODS, params=params) as watch:
        await client.patch(f"{PODS}/p1", json={"metadata": {"labels": {"app": "db"}}}, headers=MERGE)
        await client.post(PODS, json=pod("p2", {"app": "db"}))
        await client.patch(f"{PODS}/p2", json={"metadata": {"labels": {"app": "web"}}}, headers=MERGE)
        events = await read_events(watch, 2)
    assert kinds(events) == [("DELETED", "p1"), ("ADDED", "p2")]


async def test_field_selected_watch_sees_binding_as_deleted(client: httpx.AsyncClient) -> None:
    await client.post(PODS, json=pod("p1"))
    params = {"watch": "true", "fieldSelector": "spec.nodeName="}
    async with client.stream("GET", "/api/v1/pods", params=params) as watch:
        await client.post(f"{PODS}/p1/binding", json=binding("p1", "n1"))
        events = await read_events(watch, 2)
    assert kinds(events) == [("ADDED", "p1"), ("DELETED", "p1")]
    assert events[1]["object"]["spec"]["nodeName"] == "n1"


async def test_watch_timeout_seconds_ends_the_stream(client: httpx.AsyncClient) -> None:
    await client.post(PODS, json=pod("p1"))
    assert kinds(await all_events(client, timeoutSeconds="1")) == [("ADDED", "p1")]


async def test_send_initial_events_ends_with_a_marked_bookmark(client: httpx.AsyncClient) -> None:
    await client.post(PODS, json=pod("p1"))
    params = {
        "watch": "true",
        "sendInitialEvents": "true",
        "allowWatchBookmarks": "true",
        "resourceVersionMatch": "NotOlderThan",
    }
    async with client.stream("GET", PODS, params=params) as watch:
        events = await read_events(watch, 2)
    assert events[0]["type"] == "ADDED"
    assert events[1]["type"] == "BOOKMARK"
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_in_process_writes_and_http_watchers_share_versions(
    client: httpx.AsyncClient, server: FakeApiServer
) -> None:
    start = str(server.store.resource_version)
    subscription = server.store.watch("pods", "default", resource_version=start)
    async with client.stream("GET", PODS, params={"watch": "true", "resourceVersion": start}) as watch:
        created = server.store.create("pods", pod("p1"))
        http_event = (await read_events(watch, 1))[0]
    local_event = await subscription.get(GUARD)
    subscription.close()
    assert local_event is not None and local_event.type is EventType.ADDED
    assert local_event.object == created == http_event["object"]


# --------------------------------------------------------------------------- binding and eviction


async def test_binding_assigns_the_node_once(client: httpx.AsyncClient, server: FakeApiServer) -> None:
    await client.post(PODS, json=pod("p1"))
    bound = await client.post(f"{PODS}/p1/binding", json=binding("p1", "n1", {"usher/placement": "rack-a"}))
    assert bound.status_code == 201 and bound.json()["status"] == "Success"
    obj = (await client.get(f"{PODS}/p1")).json()
    assert obj["spec"]["nodeName"] == "n1"
    assert obj["metadata"]["annotations"] == {"usher/placement": "rack-a"}
    assert [c["type"] for c in obj["status"]["conditions"] if c["status"] == "True"] == ["PodScheduled"]
    again = await client.post(f"{PODS}/p1/binding", json=binding("p1", "n2"))
    assert again.status_code == 409
    assert again.json()["message"] == (
        'Operation cannot be fulfilled on pods/binding "p1": pod p1 is already assigned to node "n1"'
    )
    missing = await client.post(f"{PODS}/ghost/binding", json=binding("ghost", "n1"))
    assert missing.status_code == 404
    assert server.count("POST", "*/pods/p1/binding") == 2
    assert server.count("POST", "*/binding", status=201) == 1


async def test_legacy_bindings_endpoint(client: httpx.AsyncClient) -> None:
    await client.post(PODS, json=pod("p1"))
    assert (await client.post("/api/v1/namespaces/default/bindings", json=binding("p1", "n3"))).status_code == 201
    assert (await client.get(f"{PODS}/p1")).json()["spec"]["nodeName"] == "n3"


def eviction(name: str) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": "default"}}


async def test_eviction_without_a_budget_deletes_the_pod(client: httpx.AsyncClient, server: FakeApiServer) -> None:
    await client.post(PODS, json=pod("p1"))
    running(server.store, "p1")
    evicted = await client.post(f"{PODS}/p1/eviction", json=eviction("p1"))
    assert evicted.status_code == 201
    assert (await client.get(f"{PODS}/p1")).status_code == 404


async def test_eviction_that_would_violate_a_budget_is_429(client: httpx.AsyncClient, server: FakeApiServer) -> None:
    for name in ("w1", "w2", "w3"):
        await client.post(PODS, json=pod(name, {"app": "web"}))
        running(server.store, name)
    await client.post(
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets", json=pdb("web", {"app": "web"}, minAvailable=2)
    )
    assert (await client.post(f"{PODS}/w1/eviction", json=eviction("w1"))).status_code == 201
    refused = await client.post(f"{PODS}/w2/eviction", json=eviction("w2"))
    assert refused.status_code == 429
    assert refused.json()["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert refused.json()["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert await names(client) == ["w2", "w3"]
    status = (await client.get("/apis/policy/v1/namespaces/default/poddisruptionbudgets/web")).json()["status"]
    assert status | {"conditions": []} == {
        "observedGeneration": 1,
        "disruptionsAllowed": 0,
        "currentHealthy": 2,
        "desiredHealthy": 2,
        "expectedPods": 2,
        "conditions": [],
    }


async def test_a_pod_in_its_grace_period_no_longer_counts_as_healthy_for_a_budget(client: httpx.AsyncClient, server: FakeApiServer) -> None:
    """Two evictions against a budget that allows one: the second is refused while the first pod
    is still terminating (bound pods get a grace period), as the disruption controller does not
    count a pod being deleted as healthy."""
    for name in ("w1", "w2", "w3"):
        await client.post(PODS, json=pod(name, {"app": "web"}))
        await client.post(f"{PODS}/{name}/binding", json=binding(name, "gpu-1"))
        running(server.store, name)
    await client.post("/apis/policy/v1/namespaces/default/poddisruptionbudgets", json=pdb("web", {"app": "web"}, minAvailable=2))
    assert (await client.post(f"{PODS}/w1/eviction", json=eviction("w1"))).status_code == 201
    assert (await client.get(f"{PODS}/w1")).json()["metadata"].get("deletionTimestamp")  # still terminating
    refused = await client.post(f"{PODS}/w2/eviction", json=eviction("w2"))
    assert refused.status_code == 429
    status = (await client.get("/apis/policy/v1/namespaces/default/poddisruptionbudgets/web")).json()["status"]
    assert (status["currentHealthy"], status["disruptionsAllowed"]) == (2, 0)


async def test_an_eviction_dry_run_checks_the_budget_and_changes_nothing(client: httpx.AsyncClient, server: FakeApiServer) -> None:
    for name in ("w1", "w2"):
        await client.post(PODS, json=pod(name, {"app": "web"}))
        running(server.store, name)
    await client.post("/apis/policy/v1/namespaces/default/poddisruptionbudgets", json=pdb("web", {"app": "web"}, minAvailable=1))
    before = (await client.get(f"{PODS}/w1")).json()["metadata"]["resourceVersion"]
    for _ in range(2):  # a dry run takes nothing from the budget: asking twice gives the same answer
        assert (await client.post(f"{PODS}/w1/eviction", params={"dryRun": "All"}, json=eviction("w1"))).status_code == 201
    in_body = eviction("w2") | {"deleteOptions": {"dryRun": ["All"]}}
    assert (await client.post(f"{PODS}/w2/eviction", json=in_body)).status_code == 201
    assert await names(client) == ["w1", "w2"]
    assert (await client.get(f"{PODS}/w1")).json()["metadata"]["resourceVersion"] == before  # no DisruptionTarget either
    assert (await client.post(f"{PODS}/w1/eviction", json=eviction("w1"))).status_code == 201
    refused = await client.post(f"{PODS}/w2/eviction", params={"dryRun": "All"}, json=eviction("w2"))
    assert refused.status_code == 429 and await names(client) == ["w2"]
    odd = await client.post(f"{PODS}/w2/eviction", params={"dryRun": "Some"}, json=eviction("w2"))
    assert odd.status_code == 400 and "Invalid dry run value" in odd.json()["message"]
    elsewhere = await client.post(PODS, params={"dryRun": "All"}, json=pod("w3"))
    assert elsewhere.status_code == 400  # dry run is for evictions only here


async def test_budget_status_follows_pods_and_percentages(client: httpx.AsyncClient, server: FakeApiServer) -> None:
    path = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
    await client.post(path, json=pdb("web", {"app": "web"}, maxUnavailable="25%"))
    for name in ("w1", "w2", "w3", "w4"):
        await client.post(PODS, json=pod(name, {"app": "web"}))
    running(server.store, "w1")
    running(server.store, "w2")
    running(server.store, "w3", ready=False)
    status = (await client.get(f"{path}/web")).json()["status"]
    assert (status["expectedPods"], status["currentHealthy"], status["desiredHealthy"]) == (4, 2, 3)
    assert status["disruptionsAllowed"] == 0
    pending = await client.post(f"{PODS}/w4/eviction", json=eviction("w4"))
    assert pending.status_code == 201


# --------------------------------------------------------------------------- leases, configmaps, events


async def test_lease_renewal_is_optimistic(client: httpx.AsyncClient) -> None:
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
    lease = {"metadata": {"name": "usher"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
    created = (await client.post(path, json=lease)).json()
    assert created["apiVersion"] == "coordination.k8s.io/v1"
    renewed = await client.put(f"{path}/usher", json=created | {"spec": created["spec"] | {"renewTime": "x"}})
    assert renewed.status_code == 200
    takeover = await client.put(f"{path}/usher", json=created | {"spec": {"holderIdentity": "b"}})
    assert takeover.status_code == 409
    assert (await client.get(f"{path}/usher")).json()["spec"]["holderIdentity"] == "a"


async def test_events_are_listed_by_involved_object(client: httpx.AsyncClient) -> None:
    path = "/api/v1/namespaces/default/events"
    for name, target in (("e1", "p1"), ("e2", "p2")):
        event = {
            "metadata": {"name": name},
            "involvedObject": {"kind": "Pod", "name": target, "namespace": "default"},
            "reason": "Scheduled",
            "type": "Normal",
            "message": f"{target} placed",
        }
        assert (await client.post(path, json=event)).status_code == 201
    selector = "involvedObject.kind=Pod,involvedObject.name=p2,involvedObject.namespace=default"
    assert await names(client, path, fieldSelector=selector) == ["e2"]
    assert await names(client, "/api/v1/events", fieldSelector="reason=Scheduled,type=Normal") == ["e1", "e2"]


async def test_configmaps_round_trip(client: httpx.AsyncClient) -> None:
    path = "/api/v1/namespaces/default/configmaps"
    await client.post(path, json={"metadata": {"name": "queues"}, "data": {"queues.yaml": "a: 1"}})
    patched = await client.patch(f"{path}/queues", json={"data": {"queues.yaml": "a: 2"}}, headers=MERGE)
    assert patched.json()["data"] == {"queues.yaml": "a: 2"}
    assert await names(client, path) == ["queues"]


# --------------------------------------------------------------------------- tables


async def test_pod_and_node_tables_for_kubectl(client: httpx.AsyncClient, server: FakeApiServer, clock: Clock) -> None:
    await client.post(PODS, json=pod("p1"))
    await client.post(f"{PODS}/p1/binding", json=binding("p1", "n1"))
    node = {
        "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/gpu": ""}},
        "spec": {"unschedulable": True},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.32.1"}},
    }
    await client.post("/api/v1/nodes", json=node)
    clock.now += 150
    pods = (await client.get(PODS, headers=TABLE)).json()
    assert pods["kind"] == "Table" and pods["apiVersion"] == "meta.k8s.io/v1"
    # kube-apiserver's pod columns (pkg/printers/internalversion/printers.go), in its order
    columns = [(c["name"], c["priority"]) for c in pods["columnDefinitions"]]
    assert columns == [("Name", 0), ("Ready", 0), ("Status", 0), ("Restarts", 0), ("Age", 0),
                       ("IP", 1), ("Node", 1), ("Nominated Node", 1), ("Readiness Gates", 1)]
    assert pods["rows"][0]["cells"] == ["p1", "0/1", "Pending", "0", "2m30s", "<none>", "n1", "<none>", "<none>"]
    assert pods["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    nodes = (await client.get("/api/v1/nodes", headers=TABLE)).json()
    assert nodes["rows"][0]["cells"][:5] == ["n1", "Ready,SchedulingDisabled", "gpu", "2m30s", "v1.32.1"]
    full = (await client.get(f"{PODS}/p1", params={"includeObject": "Object"}, headers=TABLE)).json()
    assert full["rows"][0]["object"]["kind"] == "Pod"


async def test_other_tables_and_unacceptable_media(client: httpx.AsyncClient) -> None:
    await client.post("/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "c"}})
    cms = (
        await client.get("/api/v1/namespaces/default/configmaps", params={"includeObject": "None"}, headers=TABLE)
    ).json()
    assert [c["name"] for c in cms["columnDefinitions"]] == ["Name", "Data", "Age"]  # as kubectl shows them
    assert cms["rows"] == [{"cells": ["c", 0, "0s"]}]
    refused = await client.get(PODS, headers={"accept": "application/vnd.kubernetes.protobuf"})
    assert refused.status_code == 406


def test_ages_print_like_kubectl() -> None:
    seconds = (5, 119, 150, 600, 7500, 14700, 30 * 3600, 3 * 86400 + 7200, 400 * 86400, 1000 * 86400)
    assert [human_duration(s) for s in seconds] == [
        "5s",
        "119s",
        "2m30s",
        "10m",
        "125m",
        "4h5m",
        "30h",
        "3d2h",
        "400d",
        "2y270d",
    ]


# --------------------------------------------------------------------------- authentication


async def test_bearer_tokens_can_be_rotated(client: httpx.AsyncClient, server: FakeApiServer) -> None:
    server.tokens = {"old"}
    assert (await client.get(PODS)).status_code == 401
    assert (await client.get(PODS, headers={"authorization": "Bearer old"})).status_code == 200
    server.tokens = {"new"}
    rejected = await client.get(PODS, headers={"authorization": "Bearer old"})
    assert rejected.status_code == 401 and rejected.json()["reason"] == "Unauthorized"
    assert (await client.get(PODS, headers={"authorization": "Bearer new"})).status_code == 200
    assert (await client.get("/readyz")).text == "ok"


# --------------------------------------------------------------------------- faults and the request log


async def test_error_fault_fires_n_times(client: httpx.AsyncClient, server: FakeApiServer) -> None:
    await client.post(PODS, json=pod("p1"))
    fault = server.inject(FaultKind.ERROR, method="POST", path="*/binding", status=500, times=2)
    codes = [(await client.post(f"{PODS}/p1/binding", json=binding("p1", "n1"))).status_code for _ in range(3)]
    assert codes == [500, 500, 201] and fault.fired == 2
    assert (await client.get(f"{PODS}/p1")).status_code == 200


async def test_429_fault_has_retry_after(client: httpx.AsyncClient, server: FakeApiServer) -> None:
    server.inject(FaultKind.ERROR, path="/api/v1/nodes", status=429, retry_after=3, times=1)
    throttled = await client.get("/api/v1/nodes")
    assert throttled.status_code == 429 and throttled.headers["retry-after"] == "3"
    assert throttled.json()["details"]["retryAfterSeconds"] == 3
    assert (await client.get("/api/v1/nodes")).status_code == 200


async def test_410_fault_on_a_watch_is_an_error_event(client: httpx.AsyncClient, server: FakeApiServer) -> None:
    server.inject(FaultKind.ERROR, path=PODS, watch=True, status=410, times=1)
    events = await all_events(client, resourceVersion="1")
    assert [(e["type"], e["object"]["code"]) for e in events] == [("ERROR", 410)]
    assert (await client.get(PODS, params={"resourceVersion": "1"})).status_code == 200


async def test_probability_faults_follow_the_seeded_rng(clock: Clock) -> None:
    fired = []
    for _ in range(2):
        server = FakeApiServer(Store(clock), seed=3)
        fault = server.inject(FaultKind.ERROR, status=503, probability=0.5)
        await server.start()
        async with httpx.AsyncClient(base_url=server.url) as client:
            fired.append([(await client.get("/api/v1/nodes")).status_code for _ in range(20)])
        await server.stop()
        assert fault.fired == fired[-1].count(503)
    assert fired[0] == fired[1] and 0 < fired[0].count(503) < 20


async def test_delay_fault_outlasts_a_short_client_timeout(client: httpx.AsyncClient, server: FakeApiServer) -> None:
    server.inject(FaultKind.DELAY, path="/api/v1/nodes", delay=30, times=1)
    with pytest.raises(httpx.ReadTimeout):
        await client.get("/api/v1/nodes", timeout=0.2)
    assert (await client.get("/api/v1/nodes")).status_code == 200


async def test_hang_fault_is_logged_without_a_status(client: httpx.AsyncClient, server: FakeApiServer) -> None:
    server.inject(FaultKind.HANG, method="POST", times=1)
    with pytest.raises(httpx.ReadTimeout):
        await client.post(PODS, json=pod("p1"), timeout=0.2)
    assert (await client.post(PODS, json=pod("p1"))).status_code == 201
    records = [(r.method, r.path, r.status) for r in server.requests]
    assert records == [("POST", PODS, None), ("POST", PODS, 201)]


async def test_drop_fault_closes_the_connection(client: httpx.AsyncClient, server: FakeApiServer) -> None:
    server.inject(FaultKind.DROP, path="/api/v1/nodes", watch=False, times=1)
    with pytest.raises(httpx.RemoteProtocolError):
        await client.get("/api/v1/nodes")
    assert (await client.get("/api/v1/nodes")).status_code == 200


async def test_watch_drop_after_k_events(client: httpx.AsyncClient, server: FakeApiServer) -> None:
    for i in range(4):
        await client.post(PODS, json=pod(f"p{i}"))
    server.inject(FaultKind.DROP, watch=True, after_events=2, times=2)
    received: list[str] = []
    with pytest.raises(httpx.RemoteProtocolError):
        async with client.stream("GET", PODS, params={"watch": "true"}) as watch:
            async for line in watch.aiter_lines():
                received.append(json.loads(line)["object"]["metadata"]["name"])
    assert received == ["p0", "p1"]
    server.faults[0].after_events = 0
    with pytest.raises(httpx.RemoteProtocolError):
        async with client.stream("GET", PODS, params={"watch": "true"}) as watch:
            assert [line async for line in watch.aiter_lines()] == []
    async with client.stream("GET", PODS, params={"watch": "true"}) as watch:
        assert len(await read_events(watch, 4)) == 4


async def test_request_log_records_queries(client: httpx.AsyncClient, server: FakeApiServer) -> None:
    await client.get(PODS, params={"labelSelector": "a=b", "limit": "5"})
    record = server.requests[-1]
    assert (record.method, record.path, record.query, record.status, record.watch) == (
        "GET",
        PODS,
        {"labelSelector": "a=b", "limit": "5"},
        200,
        False,
    )


# --------------------------------------------------------------------------- the HTTP server itself


async def test_http_server_keeps_connections_alive_and_cancels_abandoned_handlers() -> None:
    cancelled = asyncio.Event()
    seen_bodies: list[bytes] = []

    async def handler(request: Request) -> Response:
        if request.path == "/slow":
            try:
                await asyncio.Event().wait()
            finally:
                cancelled.set()
        seen_bodies.append(request.body)
        return Response.json(200, {"path": request.path, "q": request.query})

    server = HttpServer(handler)
    port = await server.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            responses = [await client.post(f"/a%20b?x={i}&x=y&e=", content=b"body") for i in range(3)]
            assert responses[0].json() == {"path": "/a b", "q": {"x": ["0", "y"], "e": [""]}}
            local_ends = {r.extensions["network_stream"].get_extra_info("client_addr") for r in responses}
            assert len(local_ends) == 1 and None not in local_ends
            assert seen_bodies == [b"body"] * 3
            with pytest.raises(httpx.ReadTimeout):
                await client.get("/slow", timeout=0.1)
            await asyncio.wait_for(cancelled.wait(), GUARD)
    finally:
        await server.stop()


async def test_http_server_stop_ends_streams_cleanly() -> None:
    started = asyncio.Event()

    async def forever() -> AsyncIterator[bytes]:
        yield b"first\n"
        started.set()
        await asyncio.Event().wait()

    async def handler(request: Request) -> Response:
        return Response(200, {"content-type": "text/plain"}, stream=forever())

    server = HttpServer(handler)
    port = await server.start()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client, client.stream("GET", "/") as response:
        await asyncio.wait_for(started.wait(), GUARD)
        await server.stop()
        assert await asyncio.wait_for(_lines(response), GUARD) == ["first"]


# --------------------------------------------------------------------------- the official kubernetes client


@pytest.fixture
def sandbox(clock: Clock) -> Iterator[ServerThread]:
    with ServerThread(FakeApiServer(Store(clock), bookmark_interval=0.05)) as thread:
        yield thread


@pytest.fixture
def api(sandbox: ServerThread) -> Iterator[ApiClient]:
    configuration = Configuration()
    kubernetes.config.load_kube_config_from_dict(sandbox.server.kubeconfig(), client_configuration=configuration)
    with ApiClient(configuration) as api_client:
        yield api_client


def k8s_pod(name: str, labels: dict[str, str] | None = None) -> kubernetes.client.V1Pod:
    return kubernetes.client.V1Pod(
        metadata=kubernetes.client.V1ObjectMeta(name=name, labels=labels),
        spec=kubernetes.client.V1PodSpec(containers=[kubernetes.client.V1Container(name="main", image="busybox")]),
    )


def test_client_create_get_list_with_selectors_and_pages(api: ApiClient) -> None:
    core = CoreV1Api(api)
    for i in range(5):
        core.create_namespaced_pod("default", k8s_pod(f"p{i}", {"parity": "even" if i % 2 == 0 else "odd"}))
    got = core.read_namespaced_pod("p1", "default")
    assert got.status.phase == "Pending" and got.spec.scheduler_name == "default-scheduler"
    even = core.list_namespaced_pod("default", label_selector="parity=even")
    assert [p.metadata.name for p in even.items] == ["p0", "p2", "p4"]
    pages, token = [], None
    while True:
        page = core.list_pod_for_all_namespaces(limit=2, _continue=token, field_selector="spec.nodeName=")
        pages.append([p.metadata.name for p in page.items])
        token = page.metadata._continue
        if not token:
            break
    assert pages == [["p0", "p1"], ["p2", "p3"], ["p4"]]


def test_client_patches_and_conflicts(api: ApiClient) -> None:
    core = CoreV1Api(api)
    created = core.create_namespaced_pod("default", k8s_pod("p1"))
    patched = core.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"a": "1"}}})
    assert patched.metadata.labels == {"a": "1"}
    json_patched = core.patch_namespaced_pod(
        "p1", "default", [{"op": "add", "path": "/metadata/labels/b", "value": "2"}]
    )
    assert json_patched.metadata.labels == {"a": "1", "b": "2"}
    with pytest.raises(ApiException) as stale:
        core.replace_namespaced_pod("p1", "default", created)
    assert stale.value.status == 409
    assert json.loads(stale.value.body)["reason"] == "Conflict"
    status = core.patch_namespaced_pod_status("p1", "default", {"status": {"phase": "Running"}})
    assert status.status.phase == "Running"


def test_client_watch_resume_bookmarks_and_expiry(api: ApiClient, sandbox: ServerThread) -> None:
    core = CoreV1Api(api)
    start = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", k8s_pod("p1"))
    core.delete_namespaced_pod("p1", "default")
    watch, events = kubernetes.watch.Watch(), []
    for event in watch.stream(core.list_namespaced_pod, "default", resource_version=start, timeout_seconds=5):
        events.append(event)
        if len(events) == 2:
            watch.stop()
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "p1"), ("DELETED", "p1")]
    bookmarks = kubernetes.watch.Watch()
    for event in bookmarks.stream(
        core.list_namespaced_pod, "default", resource_version=start, allow_watch_bookmarks=True, timeout_seconds=5
    ):
        if event["type"] == "BOOKMARK":
            bookmarks.stop()
    assert bookmarks.resource_version == str(sandbox.call(lambda: sandbox.server.store.resource_version))
    sandbox.call(sandbox.server.store.compact)
    with pytest.raises(ApiException) as expired:
        list(
            kubernetes.watch.Watch().stream(
                core.list_namespaced_pod, "default", resource_version=start, timeout_seconds=1
            )
        )
    assert expired.value.status == 410


def test_client_binding_and_eviction(api: ApiClient, sandbox: ServerThread) -> None:
    core, policy = CoreV1Api(api), PolicyV1Api(api)
    for name in ("a", "b"):
        core.create_namespaced_pod("default", k8s_pod(name, {"app": "web"}))
    body = kubernetes.client.V1Binding(
        metadata=kubernetes.client.V1ObjectMeta(name="a"),
        target=kubernetes.client.V1ObjectReference(kind="Node", name="n1"),
    )
    response = core.create_namespaced_pod_binding("a", "default", body, _preload_content=False)
    assert response.status == 201
    with pytest.raises(ApiException) as bound:
        core.create_namespaced_pod_binding("a", "default", body, _preload_content=False)
    assert bound.value.status == 409
    assert core.read_namespaced_pod("a", "default").spec.node_name == "n1"
    for name in ("a", "b"):
        sandbox.call(running, sandbox.server.store, name)
    budget = kubernetes.client.V1PodDisruptionBudget(
        metadata=kubernetes.client.V1ObjectMeta(name="web"),
        spec=kubernetes.client.V1PodDisruptionBudgetSpec(
            min_available=2, selector=kubernetes.client.V1LabelSelector(match_labels={"app": "web"})
        ),
    )
    policy.create_namespaced_pod_disruption_budget("default", budget)
    assert policy.read_namespaced_pod_disruption_budget_status("web", "default").status.disruptions_allowed == 0
    evict = kubernetes.client.V1Eviction(metadata=kubernetes.client.V1ObjectMeta(name="a", namespace="default"))
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod_eviction("a", "default", evict)
    assert refused.value.status == 429
    policy.delete_namespaced_pod_disruption_budget("web", "default")
    core.create_namespaced_pod_eviction("a", "default", evict)
    terminating = core.read_namespaced_pod("a", "default")  # a running pod is evicted gracefully
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.metadata.deletion_grace_period_seconds == 30
    core.delete_namespaced_pod("a", "default", grace_period_seconds=0)  # what its kubelet does once it stopped
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("a", "default")
    assert gone.value.status == 404


def test_client_leases_configmaps_and_events(api: ApiClient) -> None:
    leases, core = CoordinationV1Api(api), CoreV1Api(api)
    lease = kubernetes.client.V1Lease(
        metadata=kubernetes.client.V1ObjectMeta(name="usher"),
        spec=kubernetes.client.V1LeaseSpec(holder_identity="a", lease_duration_seconds=15),
    )
    created = leases.create_namespaced_lease("kube-system", lease)
    created.spec.lease_transitions = 1
    leases.replace_namespaced_lease("usher", "kube-system", created)
    with pytest.raises(ApiException) as stale:
        leases.replace_namespaced_lease("usher", "kube-system", created)
    assert stale.value.status == 409
    config = kubernetes.client.V1ConfigMap(metadata=kubernetes.client.V1ObjectMeta(name="queues"), data={"a": "1"})
    core.create_namespaced_config_map("default", config)
    assert core.read_namespaced_config_map("queues", "default").data == {"a": "1"}
    assert core.delete_namespaced_config_map("queues", "default")["status"] == "Success"
    event = kubernetes.client.CoreV1Event(
        metadata=kubernetes.client.V1ObjectMeta(name="e1"),
        reason="Preempted",
        type="Warning",
        message="by big",
        involved_object=kubernetes.client.V1ObjectReference(kind="Pod", name="p1", namespace="default"),
    )
    core.create_namespaced_event("default", event)
    listed = core.list_namespaced_event("default", field_selector="involvedObject.name=p1")
    assert [e.reason for e in listed.items] == ["Preempted"]


def test_client_reloads_credentials_after_401(sandbox: ServerThread) -> None:
    sandbox.server.tokens = {"second"}
    configuration = Configuration()
    kubernetes.config.load_kube_config_from_dict(
        sandbox.server.kubeconfig(token="first"), client_configuration=configuration
    )
    with ApiClient(configuration) as api_client, pytest.raises(ApiException) as denied:
        CoreV1Api(api_client).list_node()
    assert denied.value.status == 401
    kubernetes.config.load_kube_config_from_dict(
        sandbox.server.kubeconfig(token="second"), client_configuration=configuration
    )
    with ApiClient(configuration) as api_client:
        assert CoreV1Api(api_client).list_node().items == []


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_gets_pods_and_nodes(sandbox: ServerThread, tmp_path: Any) -> None:
    store = sandbox.server.store
    sandbox.call(store.create, "nodes", {"metadata": {"name": "gpu-1"}})
    sandbox.call(store.create, "pods", pod("train-0"))
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps(sandbox.server.kubeconfig()))
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(config), "get", "pods,nodes"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split()
    assert "pod/train-0" in lines and "node/gpu-1" in lines and "Pending" in lines


# --------------------------------------------------------------------------- the store in-process


async def test_store_rejects_bad_patches_and_expired_watches(clock: Clock) -> None:
    store = Store(clock, history=2)
    store.create("pods", pod("p1"))
    with pytest.raises(ApiError) as bad:
        store.patch("pods", "p1", [{"op": "remove", "path": "/metadata/labels/missing"}], patch_type=PatchType.JSON)
    assert bad.value.code == 422
    old = str(store.resource_version)
    for i in range(3):
        store.patch("pods", "p1", {"metadata": {"labels": {"n": str(i)}}})
    with pytest.raises(ApiError) as expired:
        store.watch("pods", resource_version=old)
    assert expired.value.code == 410 and expired.value.reason == "Expired"


async def test_a_watcher_that_falls_behind_is_closed_and_resumes(clock: Clock) -> None:
    store = Store(clock, watch_buffer=2)
    start = str(store.resource_version)
    slow = store.watch("pods", resource_version=start)
    for i in range(5):
        store.create("pods", pod(f"p{i}"))
    received = [event async for event in slow]
    assert [e.object["metadata"]["name"] for e in received] == ["p0", "p1"]
    resumed = store.watch("pods", resource_version=received[-1].resource_version)
    assert [(await resumed.get(GUARD)).object["metadata"]["name"] for _ in range(3)] == ["p2", "p3", "p4"]


async def test_a_body_nested_too_deep_is_a_400_not_a_crash(client: httpx.AsyncClient) -> None:
    body = b'{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "deep"}, "data": {"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
    response = await client.post("/api/v1/namespaces/default/configmaps", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400 and "exceeded max depth" in response.json()["message"]
    assert (await client.get("/api/v1/namespaces/default/configmaps/deep")).status_code == 404

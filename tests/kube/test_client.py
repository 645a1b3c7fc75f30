"""KubeClient against the sandbox's fake API server over loopback HTTP: credentials, errors,
retries and the scheduler's helpers."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from usher.engine.backends.http_server import HttpServer, Request, Response
from usher.engine.backends.kube.client import (
    NODES,
    PODS,
    ApiError,
    Backoff,
    ClusterUnreachable,
    ConditionStatus,
    Conflict,
    DisruptionBudgetBlocked,
    EventType,
    Gone,
    KubeClient,
    KubeConfigError,
    NotSent,
    ObjectRef,
    RetryPolicy,
    TooManyRequests,
    Unauthorized,
)
from usher.sandbox.apiserver import FakeApiServer, FaultKind
from usher.sandbox.store import ApiError as StoreError
from usher.sandbox.store import Subresource

FAST = RetryPolicy(attempts=5, backoff=Backoff(base=0.01, cap=0.04), max_retry_after=5.0)


class Sleeps(list[float]):
    """Records the client's retry delays; waits only a token time."""

    async def __call__(self, delay: float) -> None:
        self.append(delay)
        await asyncio.sleep(0)


def write_kubeconfig(path: Path, server: FakeApiServer, token: str | None = None) -> str:
    path.write_text(yaml.safe_dump(server.kubeconfig(token)))
    return str(path)


@pytest.fixture
async def server() -> AsyncIterator[FakeApiServer]:
    fake = FakeApiServer()
    await fake.start(port=0)
    yield fake
    await fake.stop()


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
async def client(server: FakeApiServer, tmp_path: Path, sleeps: Sleeps) -> AsyncIterator[KubeClient]:
    kube = await KubeClient.connect(write_kubeconfig(tmp_path / "config", server), retry=FAST, sleep=sleeps)
    yield kube
    await kube.aclose()


def make_pod(server: FakeApiServer, name: str, labels: dict[str, str] | None = None) -> dict:
    pod = {"metadata": {"name": name, "labels": labels or {}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    return server.store.create("pods", pod, "default")


def make_running(server: FakeApiServer, name: str) -> None:
    pod = server.store.get("pods", name, "default")
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    server.store.update("pods", pod, "default", subresource=Subresource.STATUS)


# --- credentials and connection errors ---


async def test_missing_kubeconfig_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError) as caught:
        await KubeClient.connect(str(tmp_path / "nope"))
    message = str(caught.value)
    assert "\n" not in message and "does not exist" in message and "usher demo" in message


async def test_unknown_context_names_the_ones_there(server: FakeApiServer, tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "config", server)
    with pytest.raises(KubeConfigError) as caught:
        await KubeClient.connect(path, context="prod")
    message = str(caught.value)
    assert "\n" not in message and "'prod'" in message and "usher-sandbox" in message and "usher demo" in message


async def test_unreachable_server_is_one_clear_line(server: FakeApiServer, tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = server.kubeconfig()
    config["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{port}"
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ClusterUnreachable) as caught:
        await KubeClient.connect(str(path))
    message = str(caught.value)
    assert "\n" not in message and f"127.0.0.1:{port}" in message and "usher demo" in message


async def test_kubeconfig_from_environment(server: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", write_kubeconfig(tmp_path / "config", server))
    async with await KubeClient.connect() as kube:
        assert kube.host == server.url
        assert (await kube.get("/api/v1/namespaces/default"))["metadata"]["name"] == "default"


async def test_401_reloads_rotated_token(server: FakeApiServer, tmp_path: Path) -> None:
    server.tokens = {"first"}
    path = write_kubeconfig(tmp_path / "config", server, "first")
    async with await KubeClient.connect(path, retry=FAST) as kube:
        await kube.get("/api/v1/namespaces/default")
        write_kubeconfig(tmp_path / "config", server, "second")
        server.tokens = {"second"}
        await kube.get("/api/v1/namespaces/default")
        assert server.count("GET", "/api/v1/namespaces/default", 401) == 1
        assert server.count("GET", "/api/v1/namespaces/default", 200) == 2

        server.tokens = {"third"}  # the file still says "second": reloading does not help
        with pytest.raises(Unauthorized):
            await kube.get("/api/v1/namespaces/default")
        assert server.count("GET", "/api/v1/namespaces/default", 401) == 3


PLUGIN = """
import datetime, json, pathlib, sys
expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=1)
print(json.dumps({
    "apiVersion": "client.authentication.k8s.io/v1",
    "kind": "ExecCredential",
    "status": {"token": pathlib.Path(sys.argv[1]).read_text(), "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")},
}))
"""


async def test_exec_plugin_token_is_refreshed_before_it_expires(server: FakeApiServer, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one")
    plugin = tmp_path / "plugin.py"
    plugin.write_text(textwrap.dedent(PLUGIN))
    config = server.kubeconfig()
    config["users"][0]["user"] = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(plugin), str(token)],
            "interactiveMode": "Never",
        }
    }
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(config))
    server.tokens = {"one"}
    async with await KubeClient.connect(str(path)) as kube:
        await kube.get("/api/v1/namespaces/default")
        # the credential expires within the library's 5-minute margin, so each request asks
        # the plugin again: the new token is used before the old one is ever refused
        token.write_text("two")
        server.tokens = {"two"}
        await kube.get("/api/v1/namespaces/default")
    assert server.count(status=401) == 0 and server.count("GET", "/api/v1/namespaces/default", 200) == 2


# --- reading ---


async def test_list_is_paginated_and_filtered(server: FakeApiServer, client: KubeClient) -> None:
    for i in range(7):
        make_pod(server, f"p{i}", {"team": "a" if i % 2 else "b"})
    listed = await client.list(PODS.path("default"), limit=3)
    assert [p["metadata"]["name"] for p in listed.items] == [f"p{i}" for i in range(7)]
    assert listed.resource_version == str(server.store.resource_version)
    pages = [r for r in server.requests if r.path == "/api/v1/namespaces/default/pods"]
    assert [r.query.get("limit") for r in pages] == ["3", "3", "3"]
    assert [bool(r.query.get("continue")) for r in pages] == [False, True, True]

    team_a = await client.list(PODS.path(), label_selector="team=a")
    assert [p["metadata"]["name"] for p in team_a.items] == ["p1", "p3", "p5"]


async def test_not_found_is_parsed_from_status(client: KubeClient) -> None:
    with pytest.raises(ApiError) as caught:
        await client.get(PODS.path("default", "ghost"))
    assert caught.value.code == 404 and caught.value.reason == "NotFound" and "ghost" in caught.value.message


async def test_watch_streams_changes_and_too_old_is_gone(server: FakeApiServer, client: KubeClient) -> None:
    start = str(server.store.resource_version)
    make_pod(server, "a")
    server.store.delete("pods", "a", "default")
    seen = []
    async for event in client.watch(PODS.path("default"), resource_version=start, timeout_seconds=1):
        seen.append((event.type, event.object["metadata"]["name"]))
    assert seen == [("ADDED", "a"), ("DELETED", "a")]

    server.store.compact()
    with pytest.raises(Gone):  # the real server's way: HTTP 200 and an ERROR event holding a 410
        async for _ in client.watch(PODS.path("default"), resource_version=start):
            pass
    server.inject(FaultKind.ERROR, method="GET", path="/api/v1/pods", status=410, watch=True, times=1)
    with pytest.raises(Gone):
        async for _ in client.watch(PODS.path(), resource_version=str(server.store.resource_version)):
            pass


async def test_a_watch_event_larger_than_the_client_buffers_arrives_whole(server: FakeApiServer, client: KubeClient) -> None:
    start = str(server.store.resource_version)
    big = "x" * 200_000  # annotations may hold 256 KiB; aiohttp's readline stops at 128 KiB
    pod = {"metadata": {"name": "big", "annotations": {"note": big}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    server.store.create("pods", pod, "default")
    make_pod(server, "small")
    seen = [event async for event in client.watch(PODS.path("default"), resource_version=start, timeout_seconds=1)]
    assert [e.object["metadata"]["name"] for e in seen if e.type == "ADDED"] == ["big", "small"]
    assert seen[0].object["metadata"]["annotations"]["note"] == big


# --- retries ---


async def test_500s_back_off_then_succeed(server: FakeApiServer, client: KubeClient, sleeps: Sleeps) -> None:
    path = "/api/v1/namespaces/default"
    server.inject(FaultKind.ERROR, method="GET", path=path, status=500, times=3)
    assert (await client.get(path))["metadata"]["name"] == "default"
    assert server.count("GET", path, 500) == 3 and server.count("GET", path, 200) == 1
    assert len(sleeps) == 3
    for attempt, delay in enumerate(sleeps, start=1):
        ceiling = min(FAST.backoff.cap, FAST.backoff.base * 2 ** (attempt - 1))
        assert ceiling / 2 <= delay <= ceiling


async def test_a_create_is_not_repeated_after_a_500(server: FakeApiServer, client: KubeClient) -> None:
    server.inject(FaultKind.ERROR, method="POST", path="/api/v1/namespaces/default/configmaps", status=500, times=1)
    with pytest.raises(ApiError) as caught:
        await client.create("/api/v1/namespaces/default/configmaps", {"metadata": {"name": "c"}, "data": {}})
    assert caught.value.code == 500
    assert server.count("POST", "/api/v1/namespaces/default/configmaps") == 1


async def test_a_dropped_connection_is_repeated_only_by_the_retry_policy(server: FakeApiServer, client: KubeClient, sleeps: Sleeps) -> None:
    path = "/api/v1/namespaces/default"
    server.inject(FaultKind.DROP, method="GET", path=path, watch=False)
    with pytest.raises(ClusterUnreachable):
        await client.get(path)
    assert len([r for r in server.requests if r.path == path]) == FAST.attempts  # no resend by the HTTP client itself
    assert len(sleeps) == FAST.attempts - 1
    server.clear_faults()
    configmaps = "/api/v1/namespaces/default/configmaps"
    server.inject(FaultKind.DROP, method="POST", path=configmaps)
    with pytest.raises(ClusterUnreachable):
        await client.create(configmaps, {"metadata": {"name": "c"}, "data": {}})
    assert len([r for r in server.requests if r.path == configmaps]) == 1  # the server may have acted: not repeated


async def test_429_waits_retry_after(server: FakeApiServer, client: KubeClient, sleeps: Sleeps) -> None:
    path = "/api/v1/namespaces/default"
    server.inject(FaultKind.ERROR, method="GET", path=path, status=429, retry_after=2, times=2)
    await client.get(path)
    assert server.count("GET", path, 429) == 2 and server.count("GET", path, 200) == 1
    assert sleeps == [2.0, 2.0]


async def test_429_gives_up_after_bounded_attempts(server: FakeApiServer, client: KubeClient, sleeps: Sleeps) -> None:
    path = "/api/v1/namespaces/default"
    server.inject(FaultKind.ERROR, method="GET", path=path, status=429, retry_after=600)
    with pytest.raises(TooManyRequests) as caught:
        await client.get(path)
    assert caught.value.retry_after == 600
    assert server.count("GET", path, 429) == FAST.attempts
    assert sleeps == [FAST.max_retry_after] * (FAST.attempts - 1)


# --- the scheduler's helpers ---


async def test_bind_repeated_to_the_same_node_succeeds(server: FakeApiServer, client: KubeClient) -> None:
    make_pod(server, "p")
    await client.bind("default", "p", "n1", {"usher.io/gpus": "0,1"})
    pod = server.store.get("pods", "p", "default")
    assert pod["spec"]["nodeName"] == "n1" and pod["metadata"]["annotations"]["usher.io/gpus"] == "0,1"

    await client.bind("default", "p", "n1")  # 409 "already assigned" to the node we asked for
    with pytest.raises(Conflict) as caught:
        await client.bind("default", "p", "n2")
    assert "already assigned" in caught.value.message
    assert server.count("POST", "*/pods/p/binding", 409) == 2


async def test_bind_with_a_uid_binds_only_that_pod_and_never_one_being_deleted(server: FakeApiServer, client: KubeClient) -> None:
    make_pod(server, "p")
    old_uid = server.store.get("pods", "p", "default")["metadata"]["uid"]
    server.store.delete("pods", "p", "default")
    make_pod(server, "p")  # created again under the name, as a Job or a StatefulSet does
    with pytest.raises(Conflict):
        await client.bind("default", "p", "n1", uid=old_uid)
    assert not server.store.get("pods", "p", "default")["spec"].get("nodeName")
    make_pod(server, "q")
    server.store.patch("pods", "q", {"metadata": {"finalizers": ["test/hold"]}}, "default")
    server.store.delete("pods", "q", "default")  # held by its finalizer: terminating, not gone
    with pytest.raises(Conflict) as caught:
        await client.bind("default", "q", "n1")
    assert "being deleted" in caught.value.message


async def test_bind_whose_answer_was_lost_is_retried_to_success(
    server: FakeApiServer, client: KubeClient, tmp_path: Path
) -> None:
    make_pod(server, "p")
    server.inject(FaultKind.HANG, method="POST", path="*/pods/p/binding", times=1)
    path = write_kubeconfig(tmp_path / "config", server)
    async with await KubeClient.connect(path, retry=FAST, timeout=0.3) as impatient:
        bind = asyncio.create_task(impatient.bind("default", "p", "n1"))
        while server.count("POST", "*/pods/p/binding") == 0:
            await asyncio.sleep(0.01)
        # the binding went through, but its answer never reaches the impatient client
        await client.bind("default", "p", "n1")
        await bind
    assert server.store.get("pods", "p", "default")["spec"]["nodeName"] == "n1"
    assert server.count("POST", "*/pods/p/binding", 409) == 1


async def test_a_write_is_repeated_only_while_its_caller_may_still_write(server: FakeApiServer, client: KubeClient, sleeps: Sleeps) -> None:
    """A leader's bind throttled with Retry-After: the repeat is asked for again, and not sent
    once the caller says no (its lease lapsed meanwhile); nor is a first attempt."""
    make_pod(server, "p")
    make_pod(server, "q")
    server.inject(FaultKind.ERROR, method="POST", path="*/pods/p/binding", status=429, retry_after=2, times=1)
    asked: list[int] = []

    def may_send() -> bool:
        asked.append(len(sleeps))
        return not sleeps  # yes for the first attempt; no once the client waited to repeat

    with pytest.raises(NotSent, match="not sent again"):
        await client.bind("default", "p", "n1", may_send=may_send)
    assert asked == [0, 1] and sleeps == [2.0]
    assert server.count("POST", "*/pods/p/binding") == 1 and not server.store.get("pods", "p", "default")["spec"].get("nodeName")
    with pytest.raises(NotSent, match="POST /api/v1/namespaces/default/pods/q/eviction: not sent: "):
        await client.evict("default", "q", may_send=lambda: False)
    assert server.count("POST", "*/pods/q/eviction") == 0


async def test_eviction(server: FakeApiServer, client: KubeClient) -> None:
    make_pod(server, "p")
    assert await client.evict("default", "p") is True
    assert await client.evict("default", "p") is False  # already gone
    with pytest.raises(StoreError):
        server.store.get("pods", "p", "default")


async def test_eviction_blocked_by_budget_raises_at_once(server: FakeApiServer, client: KubeClient, sleeps: Sleeps) -> None:
    make_pod(server, "p", {"app": "train"})
    make_running(server, "p")
    pdb = {"metadata": {"name": "keep"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "train"}}}}
    server.store.create("poddisruptionbudgets", pdb, "default")
    with pytest.raises(DisruptionBudgetBlocked) as caught:
        await client.evict("default", "p")
    assert "disruption budget" in caught.value.message
    assert server.count("POST", "*/pods/p/eviction") == 1 and sleeps == []
    assert server.store.get("pods", "p", "default")["metadata"]["name"] == "p"


async def test_cordon_condition_and_event(server: FakeApiServer, client: KubeClient) -> None:
    server.store.create("nodes", {"metadata": {"name": "n1"}})
    await client.set_unschedulable("n1", True)
    assert server.store.get("nodes", "n1")["spec"]["unschedulable"] is True
    await client.set_unschedulable("n1", False)
    assert server.store.get("nodes", "n1")["spec"]["unschedulable"] is False

    pod = make_pod(server, "p")
    await client.patch_pod_condition(
        "default", "p", "PodScheduled", ConditionStatus.FALSE, "WaitingForQuota", "queue a is full"
    )
    conditions = server.store.get("pods", "p", "default")["status"]["conditions"]
    scheduled = next(c for c in conditions if c["type"] == "PodScheduled")
    assert (scheduled["status"], scheduled["reason"], scheduled["message"]) == ("False", "WaitingForQuota", "queue a is full")

    about = ObjectRef("Pod", "p", "default", pod["metadata"]["uid"])
    created = await client.create_event(about, "WaitingForQuota", "queue a is full", EventType.WARNING)
    event = server.store.get("events", created["metadata"]["name"], "default")
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": "default", "uid": pod["metadata"]["uid"]}
    assert (event["type"], event["reason"], event["source"]["component"], event["count"]) == ("Warning", "WaitingForQuota", "usher", 1)
    node_event = await client.create_event(ObjectRef("Node", "n1"), "Cordoned", "by alice")
    assert node_event["metadata"]["namespace"] == "default" and node_event["type"] == "Normal"
    assert NODES.path(name="n1") == "/api/v1/nodes/n1"


async def test_access_review_answers_are_cached(server: FakeApiServer, tmp_path: Path) -> None:
    # the fake API server does not serve SelfSubjectAccessReview: a stand-in that allows lists
    asked: list[dict[str, str]] = []

    async def reviewer(request: Request) -> Response:
        if request.path != "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
            return Response.json(200, {"gitVersion": "v1.32.0"})
        review = json.loads(request.body)
        attributes = review["spec"]["resourceAttributes"]
        asked.append(attributes)
        return Response.json(201, {**review, "status": {"allowed": attributes["verb"] == "list"}})

    http = HttpServer(reviewer)
    port = await http.start(port=0)
    config = server.kubeconfig()
    config["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{port}"
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(config))
    try:
        async with await KubeClient.connect(str(path)) as kube:
            assert await kube.access_review("list", "pods") is True
            assert await kube.access_review("create", "pods", "default", "eviction") is False
            assert await kube.access_review("list", "pods") is True
            assert await kube.access_review("create", "pods", "default", "eviction") is False
    finally:
        await http.stop()
    assert asked == [
        {"verb": "list", "group": "", "resource": "pods"},
        {"verb": "create", "group": "", "resource": "pods", "namespace": "default", "subresource": "eviction"},
    ]


async def test_the_proxy_comes_from_the_kubeconfig_and_no_proxy_bypasses_it(
    server: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``proxy-url`` (or ``HTTP_PROXY``) carries the requests, with the proxy's credentials from its
    URL; ``NO_PROXY`` naming the server bypasses an environment proxy."""
    relayed: list[tuple[str, str]] = []

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        auth = next((line.split(":", 1)[1].strip() for line in lines if line.lower().startswith("proxy-authorization:")), "")
        relayed.append((lines[0], auth))
        target = lines[0].split(" ")[1].split("/")[2]  # an absolute-form request: http://host:port/path
        host, port = target.rsplit(":", 1)
        upstream_reader, upstream = await asyncio.open_connection(host, int(port))
        upstream.write(head)  # HTTP/1.1 servers accept the absolute form too

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except ConnectionError:
                pass
            finally:
                sink.close()

        await asyncio.gather(pipe(reader, upstream), pipe(upstream_reader, writer))

    proxy = await asyncio.start_server(relay, "127.0.0.1", 0)
    proxy_port = proxy.sockets[0].getsockname()[1]
    try:
        config = server.kubeconfig()
        config["clusters"][0]["cluster"]["proxy-url"] = f"http://me:secret@127.0.0.1:{proxy_port}"
        path = tmp_path / "proxied"
        path.write_text(yaml.safe_dump(config))
        async with await KubeClient.connect(str(path)) as kube:
            await kube.get("/api/v1/namespaces/default")
        assert relayed and relayed[0][0].startswith(f"GET {server.url}/version ")
        assert relayed[0][1] == "Basic bWU6c2VjcmV0"  # me:secret

        relayed.clear()
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy_port}")
        monkeypatch.delenv("http_proxy", raising=False)
        async with await KubeClient.connect(write_kubeconfig(tmp_path / "plain", server)) as kube:
            await kube.get("/api/v1/namespaces/default")
        assert relayed

        relayed.clear()
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        monkeypatch.delenv("no_proxy", raising=False)
        async with await KubeClient.connect(write_kubeconfig(tmp_path / "plain", server)) as kube:
            await kube.get("/api/v1/namespaces/default")
        assert relayed == []

        monkeypatch.delenv("NO_PROXY")
        config["clusters"][0]["cluster"]["proxy-url"] = f"socks5://127.0.0.1:{proxy_port}"
        path.write_text(yaml.safe_dump(config))
        with pytest.raises(KubeConfigError) as caught:
            await KubeClient.connect(str(path))
        assert "socks5://" in str(caught.value) and "\n" not in str(caught.value)
    finally:
        proxy.close()

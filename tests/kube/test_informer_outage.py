"""The informer across an API server outage and restart, through real HTTP against the sandbox.

- an outage (the server goes away and comes back with its store): the informer resumes from its
  resourceVersion and reports what changed meanwhile, without listing again;
- a restart with a fresh store (etcd wiped, a sandbox restarted): resourceVersions start again
  from low numbers, so the informer's is "in the future"; the server answers that watch with
  ``504 Too large resource version`` (as kube-apiserver does since 1.18) and the informer lists
  again, reporting the old objects DELETED and the new ones ADDED;
- an outage longer than ``relist_after`` lists again rather than trusting the old
  resourceVersion;
- a watch that stalls (the stream open but silent) is given up by the client's read timeout;
- ``connected`` / ``last_contact`` follow all of this, and :func:`connection_of` sums them up.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_informer import PODS, QUICK, Recorder, lists, running, until, watches
from usher.engine.backends.kube.client import ApiError, KubeClient, RetryPolicy
from usher.engine.backends.kube.client import watching as watch_stream
from usher.engine.backends.kube.connection import (
    Connection,
    ConnectionState,
    connection_of,
)
from usher.engine.backends.kube.informer import DeltaType, Informer, object_key
from usher.sandbox.apiserver import FakeApiServer, FaultKind
from usher.sandbox.store import Store

FAST_FRESHNESS = 0.05
"""How long the test servers wait for a watch's resourceVersion to arrive (a real server: 3 s)."""


class Servers:
    """An API server on one port that can be stopped and started again, with or without its store."""

    def __init__(self) -> None:
        self.port = 0
        self.server: FakeApiServer | None = None

    async def start(self, store: Store | None = None) -> FakeApiServer:
        server = FakeApiServer(store or Store(), bookmark_interval=0.05)
        server.too_large_wait = FAST_FRESHNESS
        self.port = await server.start(port=self.port)
        self.server = server
        return server

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
            self.server = None


@pytest.fixture
async def servers() -> AsyncIterator[Servers]:
    s = Servers()
    await s.start()
    yield s
    await s.stop()


@pytest.fixture
async def client(servers: Servers, tmp_path: Path) -> AsyncIterator[KubeClient]:
    assert servers.server is not None
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(servers.server.kubeconfig()))
    kube = await KubeClient.connect(str(path), retry=RetryPolicy(attempts=2, backoff=QUICK))
    yield kube
    await kube.aclose()


def pod(store: Store, name: str, **labels: str) -> dict[str, Any]:
    body = {"metadata": {"name": name, "labels": labels}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    return store.create("pods", body, "default")


def server_pods(store: Store) -> dict[str, tuple[str, str]]:
    """What the server holds: key -> (uid, resourceVersion)."""
    return {object_key(p): (p["metadata"]["uid"], p["metadata"]["resourceVersion"]) for p in store.list("pods", "default").objects()}


def cached_pods(informer: Informer) -> dict[str, tuple[str, str]]:
    return {k: (p["metadata"]["uid"], p["metadata"]["resourceVersion"]) for k, p in informer.cache.items()}


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self) -> None:
        self.t = 1_700_000_000.0

    def __call__(self) -> float:
        return self.t


async def test_an_outage_resumes_from_the_resource_version_and_reports_what_changed(
    servers: Servers, client: KubeClient
) -> None:
    assert servers.server is not None
    store = servers.server.store
    pod(store, "a")
    pod(store, "b")
    seen = Recorder()
    async with running(Informer(client, PODS, on_event=seen, backoff=QUICK)) as informer:
        assert informer.connected and informer.since_disconnected() is None and informer.disconnected_since is None
        contact = informer.last_contact
        await servers.stop()
        await until(lambda: not informer.connected)
        assert informer.since_disconnected() is not None and informer.disconnected_since is not None
        assert informer.disconnected_since >= informer.last_contact
        # meanwhile, in the cluster (etcd lives on; the API server is down)
        store.delete("pods", "a", "default")
        created = pod(store, "c")
        server = await servers.start(store)
        await until(lambda: cached_pods(informer) == server_pods(store))
        await until(lambda: informer.connected)
        assert informer.last_contact >= contact
        assert [(k, n) for k, n, _ in seen.deltas[2:]] == [(DeltaType.DELETED, "a"), (DeltaType.ADDED, "c")]
        assert seen.deltas[-1][2] == created["metadata"]["resourceVersion"]
        assert lists(server) == 0  # resumed where it left off: nothing to list again
        pod(store, "d")  # and it watches on
        await until(lambda: seen.names(DeltaType.ADDED)[-1:] == ["d"])


async def test_a_restart_with_a_fresh_store_lists_again(servers: Servers, client: KubeClient) -> None:
    assert servers.server is not None
    old = servers.server.store
    for name in ("a", "b", "c"):
        pod(old, name)
    for i in range(10):  # the old server's resourceVersion runs ahead of what the new one will reach
        old.patch("pods", "b", {"metadata": {"labels": {"v": str(i)}}}, "default")
    seen = Recorder()
    async with running(Informer(client, PODS, on_event=seen, backoff=QUICK)) as informer:
        await until(lambda: informer.resource_version == str(old.resource_version))
        old_a = informer.cache["default/a"]
        await servers.stop()
        await until(lambda: not informer.connected)
        seen.deltas.clear()
        # the API server comes back with an empty etcd; new objects, one under an old name
        fresh = Store()
        pod(fresh, "a")  # the same name and (the first write) the same resourceVersion as the old "a"
        assert fresh.get("pods", "a", "default")["metadata"]["resourceVersion"] == old_a["metadata"]["resourceVersion"]
        pod(fresh, "x")
        server = await servers.start(fresh)
        await until(lambda: cached_pods(informer) == server_pods(fresh))
        await until(lambda: informer.connected)
        # the watch from the old resourceVersion was refused as too large, and the informer listed
        assert lists(server) >= 1
        assert watches(server)[0] == str(old.resource_version)
        deleted = sorted(n for k, n, _ in seen.deltas if k is DeltaType.DELETED)
        added = sorted(n for k, n, _ in seen.deltas if k is DeltaType.ADDED)
        assert deleted == ["a", "b", "c"] and added == ["a", "x"]
        pod(fresh, "y")  # and it watches the new server from its own resourceVersions
        await until(lambda: seen.names(DeltaType.ADDED)[-1:] == ["y"])


async def test_an_outage_longer_than_relist_after_lists_again(servers: Servers, client: KubeClient) -> None:
    """A wiped store whose resourceVersion has already passed the informer's is not refused as
    too large; after a long enough outage the informer does not trust its old one anyway."""
    assert servers.server is not None
    pod(servers.server.store, "a")
    clock = Clock()
    seen = Recorder()
    informer = Informer(client, PODS, on_event=seen, backoff=QUICK, clock=clock, relist_after=30.0)
    async with running(informer):
        assert informer.last_contact == clock.t
        await servers.stop()
        await until(lambda: not informer.connected)
        clock.t += 31.0
        await until(lambda: informer.resource_version == "")  # the next attempt gives up on it
        fresh = Store()
        for name in ("p", "q", "r"):
            pod(fresh, name)  # resourceVersions 1..3: past the informer's 1, so a watch would go on
        server = await servers.start(fresh)
        await until(lambda: cached_pods(informer) == server_pods(fresh))
        await until(lambda: informer.connected)
        assert lists(server) == 1
        assert informer.last_contact == clock.t
        assert sorted(seen.names(DeltaType.ADDED)) == ["a", "p", "q", "r"] and seen.names(DeltaType.DELETED) == ["a"]


async def test_a_short_outage_with_the_same_store_resumes(servers: Servers, client: KubeClient) -> None:
    """The same clock, an outage shorter than relist_after: the resourceVersion is trusted."""
    assert servers.server is not None
    store = servers.server.store
    pod(store, "a")
    clock = Clock()
    informer = Informer(client, PODS, on_event=Recorder(), backoff=QUICK, clock=clock, relist_after=30.0)
    async with running(informer):
        await servers.stop()
        await until(lambda: not informer.connected)
        clock.t += 29.0
        pod(store, "b")
        server = await servers.start(store)
        await until(lambda: sorted(informer.cache) == ["default/a", "default/b"])
        assert lists(server) == 0


async def test_a_silent_watch_is_given_up_by_the_read_timeout(
    servers: Servers, client: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream stays open but nothing comes, not even its end at timeoutSeconds (a peer gone
    without a FIN): the client's read timeout, a little past timeoutSeconds, ends the wait."""
    server = servers.server
    assert server is not None
    monkeypatch.setattr(watch_stream, "WATCH_READ_GRACE", 0.2)
    server.inject(FaultKind.STALL, method="GET", path=PODS, watch=True, times=1)
    seen = Recorder()
    async with running(Informer(client, PODS, on_event=seen, backoff=QUICK, watch_timeout=1)) as informer:
        rv = informer.resource_version
        pod(server.store, "late")
        await until(lambda: seen.names(DeltaType.ADDED) == ["late"], timeout=15)
    assert watches(server)[:2] == [rv, rv]  # the stalled watch, then a resumed one from the same point


# --- the sandbox answers as kube-apiserver does -------------------------------------------------


async def test_a_watch_from_a_future_resource_version_is_refused_as_too_large(servers: Servers, client: KubeClient) -> None:
    server = servers.server
    assert server is not None
    ahead = str(server.store.resource_version + 5)
    with pytest.raises(ApiError) as caught:
        async with aclosing(client.watch(PODS, resource_version=ahead, timeout_seconds=5)) as events:
            async for _ in events:
                pass
    error = caught.value
    assert error.code == 504 and error.reason == "Timeout"
    assert error.message.startswith("Timeout: Too large resource version: ")
    assert [c.get("reason") for c in error.causes] == ["ResourceVersionTooLarge"]
    assert error.retry_after == 1
    watch = [r for r in server.requests if r.watch][-1]
    assert watch.status == 200  # an ERROR event on the stream, not an HTTP error


async def test_a_watch_slightly_ahead_waits_for_the_store_to_catch_up(servers: Servers, client: KubeClient) -> None:
    server = servers.server
    assert server is not None
    server.too_large_wait = 30.0
    ahead = server.store.resource_version + 1
    names: list[str] = []

    async def watch() -> None:
        async with aclosing(client.watch(PODS, resource_version=str(ahead), timeout_seconds=30)) as events:
            async for event in events:
                if event.type != "BOOKMARK":
                    names.append(event.object["metadata"]["name"])
                    return

    task = asyncio.create_task(watch())
    await until(lambda: any(r.watch for r in server.requests))
    pod(server.store, "first")  # reaches the watch's resourceVersion: not part of the watch
    pod(server.store, "second")
    await asyncio.wait_for(task, 10)
    assert names == ["second"]


# --- connection health, summed up ---------------------------------------------------------------


class Probe:
    def __init__(self, last_contact: float, disconnected_since: float | None = None) -> None:
        self.connected = disconnected_since is None
        self.last_contact = last_contact
        self.disconnected_since = disconnected_since


def test_connection_of_informers() -> None:
    now = 1000.0
    assert connection_of([Probe(900.0), Probe(990.0)], now) == Connection(ConnectionState.LIVE, 990.0, 990.0)
    reconnecting = connection_of([Probe(995.0), Probe(985.0, disconnected_since=990.0)], now, stale_after=30.0)
    assert reconnecting == Connection(ConnectionState.RECONNECTING, 990.0, 995.0)
    assert reconnecting.seconds_without_contact(now) == 10.0
    stale = connection_of([Probe(950.0, 960.0), Probe(980.0, 985.0)], now, stale_after=30.0)
    assert stale.state is ConnectionState.STALE and stale.since == 960.0 and stale.last_contact == 980.0
    assert connection_of([], now).state is ConnectionState.LIVE

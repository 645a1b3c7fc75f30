"""Informer against the sandbox's fake API server: list then watch, resuming across broken
streams without losing or repeating a change, re-listing after 410, backing off on errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from usher.engine.backends.kube.client import Backoff, KubeClient, KubeError, RetryPolicy, WatchEvent, WatchEventType
from usher.engine.backends.kube.informer import DeltaType, Informer
from usher.sandbox.apiserver import FakeApiServer, FaultKind

QUICK = Backoff(base=0.01, cap=0.05)
PODS = "/api/v1/namespaces/default/pods"


class Recorder:
    """The informer's consumer: every delta as (type, name, resourceVersion)."""

    def __init__(self) -> None:
        self.deltas: list[tuple[DeltaType, str, str]] = []

    def __call__(self, kind: DeltaType, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self.deltas.append((kind, meta["name"], meta["resourceVersion"]))

    def names(self, kind: DeltaType) -> list[str]:
        return [name for k, name, _ in self.deltas if k is kind]


class Sleeps(list[float]):
    async def __call__(self, delay: float) -> None:
        self.append(delay)
        await asyncio.sleep(0.01)


@pytest.fixture
async def server() -> AsyncIterator[FakeApiServer]:
    fake = FakeApiServer(bookmark_interval=0.05)
    await fake.start(port=0)
    yield fake
    await fake.stop()


@pytest.fixture
async def client(server: FakeApiServer, tmp_path: Path) -> AsyncIterator[KubeClient]:
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(server.kubeconfig()))
    retry = RetryPolicy(attempts=2, backoff=QUICK)
    kube = await KubeClient.connect(str(path), retry=retry)
    yield kube
    await kube.aclose()


@asynccontextmanager
async def running(informer: Informer) -> AsyncIterator[Informer]:
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.has_synced.wait(), 5)
        yield informer
    finally:
        informer.stop()
        await asyncio.wait([task])
        assert task.cancelled()


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


def make_pod(server: FakeApiServer, name: str, **labels: str) -> dict[str, Any]:
    pod = {"metadata": {"name": name, "labels": labels}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    return server.store.create("pods", pod, "default")


def relabel(server: FakeApiServer, name: str, **labels: str) -> None:
    server.store.patch("pods", name, {"metadata": {"labels": labels}}, "default")


async def restart(server: FakeApiServer) -> None:
    """Stop the API server (its watches end cleanly) and start it again on the same port."""
    port = int(server.url.rsplit(":", 1)[1])
    await server.stop()
    await server.start(port=port)


def watches(server: FakeApiServer) -> list[str]:
    """The resourceVersion each watch request started from."""
    return [r.query.get("resourceVersion", "") for r in server.requests if r.path == PODS and r.watch]


def lists(server: FakeApiServer) -> int:
    return sum(1 for r in server.requests if r.path == PODS and not r.watch)


async def test_lists_then_watches(server: FakeApiServer, client: KubeClient) -> None:
    make_pod(server, "a")
    make_pod(server, "b")
    seen = Recorder()
    async with running(Informer(client, PODS, on_event=seen, backoff=QUICK)) as informer:
        assert seen.names(DeltaType.ADDED) == ["a", "b"]
        make_pod(server, "c")
        relabel(server, "a", team="x")
        server.store.delete("pods", "b", "default")
        await until(lambda: len(seen.deltas) == 5)
        assert [(k, n) for k, n, _ in seen.deltas[2:]] == [
            (DeltaType.ADDED, "c"),
            (DeltaType.MODIFIED, "a"),
            (DeltaType.DELETED, "b"),
        ]
        assert sorted(informer.cache) == ["default/a", "default/c"]
        assert informer.cache["default/a"]["metadata"]["labels"] == {"team": "x"}
    requests = [r for r in server.requests if r.path == PODS and r.watch]
    assert requests and requests[0].query["allowWatchBookmarks"] == "true"


async def test_resumes_a_dropped_stream_without_loss_or_repeat(server: FakeApiServer, client: KubeClient) -> None:
    seen = Recorder()
    server.inject(FaultKind.DROP, method="GET", path=PODS, watch=True, after_events=2, times=2)
    async with running(Informer(client, PODS, on_event=seen, backoff=QUICK)):
        created = [make_pod(server, f"p{i}") for i in range(6)]
        await until(lambda: len(seen.deltas) == 6)
        await asyncio.sleep(0.2)  # time for anything repeated to show up
    expected = [(DeltaType.ADDED, p["metadata"]["name"], p["metadata"]["resourceVersion"]) for p in created]
    assert seen.deltas == expected
    resumed_from = watches(server)
    assert len(resumed_from) >= 3 and lists(server) == 1
    assert resumed_from[1:3] == [expected[1][2], expected[3][2]]  # where each broken stream left off


async def test_replayed_events_are_not_delivered_twice(server: FakeApiServer, client: KubeClient) -> None:
    seen = Recorder()
    async with running(Informer(client, PODS, on_event=seen, backoff=QUICK)) as informer:
        make_pod(server, "a")
        relabel(server, "a", v="1")
        await until(lambda: len(seen.deltas) == 2)
        # as if the last change had not been seen: the next watch sends it again
        replay_from = seen.deltas[0][2]
        informer.resource_version = replay_from
        await restart(server)
        await until(lambda: watches(server)[-1] == replay_from)
        relabel(server, "a", v="2")  # this one is new
        await until(lambda: len(seen.deltas) == 3)
        await asyncio.sleep(0.2)
    assert [(k, n) for k, n, _ in seen.deltas] == [
        (DeltaType.ADDED, "a"),
        (DeltaType.MODIFIED, "a"),
        (DeltaType.MODIFIED, "a"),
    ]
    assert len({rv for _, _, rv in seen.deltas}) == 3


async def test_gone_relists_and_reports_what_changed_meanwhile(server: FakeApiServer, client: KubeClient) -> None:
    for name in ("a", "b", "c"):
        make_pod(server, name)
    seen = Recorder()
    # the informer is cut off (every watch breaks at once) while the cluster changes...
    server.inject(FaultKind.DROP, method="GET", path=PODS, watch=True)
    async with running(Informer(client, PODS, on_event=seen, backoff=QUICK)) as informer:
        await until(lambda: len(watches(server)) >= 1)
        server.requests.clear()
        server.store.delete("pods", "b", "default")
        relabel(server, "c", team="x")
        make_pod(server, "d")
        # ...and the history it would resume from is compacted away
        server.store.compact()
        server.clear_faults()
        await until(lambda: len(seen.deltas) == 6)
        assert seen.deltas[3:] == [
            (DeltaType.DELETED, "b", seen.deltas[1][2]),  # the last state the informer saw
            (DeltaType.MODIFIED, "c", server.store.get("pods", "c", "default")["metadata"]["resourceVersion"]),
            (DeltaType.ADDED, "d", server.store.get("pods", "d", "default")["metadata"]["resourceVersion"]),
        ]
        assert sorted(informer.cache) == ["default/a", "default/c", "default/d"]
        assert lists(server) == 1
        relabel(server, "a", team="y")  # and it watches again
        await until(lambda: len(seen.deltas) == 7)


async def test_bookmarks_advance_the_resume_point(server: FakeApiServer, client: KubeClient) -> None:
    seen = Recorder()
    informer = Informer(client, PODS, on_event=seen, label_selector="team=a", backoff=QUICK)
    async with running(informer):
        make_pod(server, "other", team="b")  # not selected: no event, only bookmarks move on
        target = str(server.store.resource_version)
        await until(lambda: informer.resource_version == target)
        server.store.compact()
        server.requests.clear()
        await restart(server)
        make_pod(server, "mine", team="a")
        await until(lambda: seen.names(DeltaType.ADDED) == ["mine"])
        assert watches(server)[0] == target and lists(server) == 0  # resumed from the bookmark, no 410


async def test_errors_back_off_and_429_waits_retry_after(server: FakeApiServer, client: KubeClient) -> None:
    make_pod(server, "a")
    seen = Recorder()
    sleeps = Sleeps()
    server.inject(FaultKind.ERROR, method="GET", path=PODS, watch=False, status=500, times=4)
    server.inject(FaultKind.ERROR, method="GET", path=PODS, watch=True, status=429, retry_after=3, times=1)
    backoff = Backoff(base=0.01, cap=5.0)
    async with running(Informer(client, PODS, on_event=seen, backoff=backoff, sleep=sleeps)):
        make_pod(server, "b")
        await until(lambda: seen.names(DeltaType.ADDED) == ["a", "b"])
    # the client tries each list twice: two failed lists, each followed by a growing pause
    assert lists(server) == 5 and server.count("GET", PODS, 500) == 4
    assert len(sleeps) == 3
    assert 0.005 <= sleeps[0] <= 0.01 and 0.01 <= sleeps[1] <= 0.02
    assert sleeps[2] == 3.0  # then the watch's Retry-After


async def test_optional_resource_not_served_counts_as_empty(client: KubeClient) -> None:
    seen = Recorder()
    path = "/apis/example.com/v1/widgets"
    async with running(Informer(client, path, on_event=seen, optional=True, backoff=QUICK)) as informer:
        assert informer.has_synced.is_set() and seen.deltas == []


async def test_a_quiet_watch_that_ran_its_time_is_renewed_at_once(server: FakeApiServer, client: KubeClient) -> None:
    server.bookmark_interval = 60.0  # no bookmarks: nothing at all arrives on the stream
    sleeps = Sleeps()
    async with running(Informer(client, PODS, on_event=Recorder(), watch_timeout=1, sleep=sleeps)):
        await until(lambda: len(watches(server)) == 2)
    assert sleeps == []


class _BookmarkThenDrop:
    """A client whose watches bring one bookmark and then break (a proxy that cuts every
    stream after its first message); lists go to the real server."""

    def __init__(self, inner: KubeClient) -> None:
        self.inner = inner
        self.watches = 0

    async def list(self, *args: Any, **kwargs: Any) -> Any:
        return await self.inner.list(*args, **kwargs)

    async def watch(self, path: str, resource_version: str = "", **kwargs: Any) -> AsyncIterator[WatchEvent]:
        self.watches += 1
        if kwargs.get("on_open") is not None:
            kwargs["on_open"]()
        yield WatchEvent(WatchEventType.BOOKMARK, {"metadata": {"resourceVersion": resource_version}})
        raise KubeError("the connection was closed")


async def test_a_watch_that_only_bookmarks_and_drops_backs_off(client: KubeClient) -> None:
    """Re-watching at once after each such stream would hammer the API server."""
    proxy = _BookmarkThenDrop(client)
    sleeps = Sleeps()
    async with running(Informer(proxy, PODS, on_event=Recorder(), backoff=QUICK, sleep=sleeps)):  # type: ignore[arg-type]
        await until(lambda: proxy.watches >= 4)
    assert len(sleeps) >= 3  # a pause before each watch again

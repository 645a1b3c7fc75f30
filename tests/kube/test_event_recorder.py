"""usher's Events through the sandbox API: a repeat is counted on the Event already there (as
client-go's recorder does), a repeat after the window or of an Event gone is a new Event, and
repeats at the same moment make one Event."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from sandboxes import Sandbox

from usher.engine.backends.kube.client import EventType, KubeClient, ObjectRef
from usher.engine.backends.kube.events import AGGREGATE_WINDOW, EventRecorder

POD = ObjectRef("Pod", "w-0", "default", "uid-1")


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[Sandbox, KubeClient]]:
    sb = Sandbox()
    await sb.start()
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump(sb.server.kubeconfig()))
    client = await KubeClient.connect(str(config))
    yield sb, client
    await client.aclose()
    await sb.stop()


async def _events(sb: Sandbox) -> list[dict]:
    return sorted((await sb.req("GET", "/api/v1/namespaces/default/events"))["items"], key=lambda e: e["metadata"]["name"])


async def test_repeats_are_counted_then_recorded_anew_after_the_window_or_once_the_first_is_gone(api) -> None:
    sb, client = api
    now = [0.0]
    recorder = EventRecorder(client, clock=lambda: now[0])
    for _ in range(3):
        await recorder.record(POD, "EvictionBlocked", "refused", EventType.WARNING)
    await recorder.record(POD, "EvictionBlocked", "another message", EventType.WARNING)
    events = await _events(sb)
    assert sorted((e["message"], e["count"]) for e in events) == [("another message", 1), ("refused", 3)]

    await sb.req("DELETE", f"/api/v1/namespaces/default/events/{next(e for e in events if e['message'] == 'refused')['metadata']['name']}")
    await recorder.record(POD, "EvictionBlocked", "refused", EventType.WARNING)  # its first copy is gone
    assert sorted((e["message"], e["count"]) for e in await _events(sb)) == [("another message", 1), ("refused", 1)]

    now[0] += AGGREGATE_WINDOW + 1
    await recorder.record(POD, "EvictionBlocked", "another message", EventType.WARNING)
    assert sorted((e["message"], e["count"]) for e in await _events(sb)) == [
        ("another message", 1), ("another message", 1), ("refused", 1)]


async def test_repeats_at_the_same_moment_make_one_event_counted(api) -> None:
    sb, client = api
    recorder = EventRecorder(client)
    await asyncio.gather(*(recorder.record(POD, "GangBroken", "stopped", EventType.WARNING) for _ in range(3)))
    assert [e["count"] for e in await _events(sb)] == [3]

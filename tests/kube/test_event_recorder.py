"""usher's Events through the sandbox API: a repeat is counted on the Event already there (as
client-go's recorder does), a repeat after the window or of an Event gone is a new Event."""

from __future__ import annotations

from pathlib import Path

import yaml
from sandboxes import Sandbox

from usher.engine.backends.kube.client import EventType, KubeClient, ObjectRef
from usher.engine.backends.kube.events import AGGREGATE_WINDOW, EventRecorder


async def _events(sb: Sandbox) -> list[dict]:
    return sorted((await sb.req("GET", "/api/v1/namespaces/default/events"))["items"], key=lambda e: e["metadata"]["name"])


async def test_repeats_are_counted_then_recorded_anew_after_the_window_or_once_the_first_is_gone(tmp_path: Path) -> None:
    sb = Sandbox()
    await sb.start()
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump(sb.server.kubeconfig()))
    client = await KubeClient.connect(str(config))
    try:
        now = [0.0]
        recorder = EventRecorder(client, clock=lambda: now[0])
        pod = ObjectRef("Pod", "w-0", "default", "uid-1")
        for _ in range(3):
            await recorder.record(pod, "EvictionBlocked", "refused", EventType.WARNING)
        await recorder.record(pod, "EvictionBlocked", "another message", EventType.WARNING)
        events = await _events(sb)
        assert sorted((e["message"], e["count"]) for e in events) == [("another message", 1), ("refused", 3)]

        await sb.req("DELETE", f"/api/v1/namespaces/default/events/{next(e for e in events if e['message'] == 'refused')['metadata']['name']}")
        await recorder.record(pod, "EvictionBlocked", "refused", EventType.WARNING)  # its first copy is gone
        assert sorted((e["message"], e["count"]) for e in await _events(sb)) == [("another message", 1), ("refused", 1)]

        now[0] += AGGREGATE_WINDOW + 1
        await recorder.record(pod, "EvictionBlocked", "another message", EventType.WARNING)
        assert sorted((e["message"], e["count"]) for e in await _events(sb)) == [
            ("another message", 1), ("another message", 1), ("refused", 1)]
    finally:
        await client.aclose()
        await sb.stop()


async def test_two_repeats_at_once_make_one_event_counted_twice(tmp_path: Path) -> None:
    import asyncio

    sb = Sandbox()
    await sb.start()
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump(sb.server.kubeconfig()))
    client = await KubeClient.connect(str(config))
    try:
        recorder = EventRecorder(client)
        pod = ObjectRef("Pod", "w-0", "default", "uid-1")
        await asyncio.gather(*(recorder.record(pod, "GangBroken", "stopped", EventType.WARNING) for _ in range(3)))
        assert [e["count"] for e in await _events(sb)] == [3]
    finally:
        await client.aclose()
        await sb.stop()

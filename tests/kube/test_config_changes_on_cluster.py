"""Queue config edits while gangs run (ConfigMap usher-system/usher-queues): a queue or a
topology level taken out from under running gangs must not break the loop, nor free what those
gangs hold."""

from __future__ import annotations

from sandboxes import UsherOnSandbox, node, pod, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)

from usher.engine.enums import AuditAction, PendingReason

PODS = "/api/v1/namespaces/default/pods"
CONFIG = "/api/v1/namespaces/usher-system/configmaps/usher-queues"


def _pod(name: str, gpus: int, queue: str, **labels: str) -> dict:
    body = pod(name, gpus, scheduler="usher")
    body["metadata"]["labels"] = {"usher/queue": queue, **labels}
    return body


async def _running(sb: UsherOnSandbox, name: str) -> dict:
    return await sb.pod_where(name, lambda p: p.get("status", {}).get("phase") == "Running")


async def _set_config(sb: UsherOnSandbox, text: str) -> None:
    cm = await sb.get(CONFIG)
    cm["data"]["queues.yaml"] = text
    await sb.req("PUT", CONFIG, cm)


async def test_a_queue_taken_out_while_its_gang_runs_keeps_that_gangs_capacity_and_scheduling_goes_on(sb: UsherOnSandbox) -> None:
    for i in range(2):
        await sb.create("/api/v1/nodes", node(f"gpu-{i}"))
    await sb.start_usher(sb.tmp, "queues:\n  - {name: research, namespaceSelector: {}, quota: {gpu: 64}}\n  - {name: other, namespaceSelector: {}, quota: {gpu: 64}}\n")
    await sb.create(PODS, _pod("a", 8, "research"))
    held = (await _running(sb, "a"))["spec"]["nodeName"]
    await _set_config(sb, "queues:\n  - {name: other, namespaceSelector: {}, quota: {gpu: 64}}\n")
    await sb.until(lambda: _async("other" in sb.usher.state.queues and sb.usher.state.queues["research"].retired),
                   "the config is read and research retired")
    await sb.create(PODS, _pod("b", 8, "other"))
    await sb.create(PODS, _pod("c", 8, "other"))
    b = await _running(sb, "b")
    assert b["spec"]["nodeName"] != held  # a's node is still a's
    await sb.create(PODS, _pod("late", 1, "research"))
    gang = await sb.until(lambda: _async(sb.usher.mirror.gangs.get("default/late")), "late is seen")
    await sb.until(lambda: _async(gang.reason == PendingReason.UNKNOWN_QUEUE), "late waits for a queue")
    assert (await sb.get(f"{PODS}/c"))["spec"].get("nodeName") is None  # no room: only two nodes
    assert any(e.action == AuditAction.RETIRE_QUEUE and e.target == "research" for e in sb.usher.state.audit)
    scrape = sb.usher.metrics.render().decode()
    assert 'usher_queue_used{queue="research",resource="gpu"} 8.0' in scrape

    await sb.req("DELETE", f"{PODS}/a")  # a ends: its queue goes with it, and c takes the node
    c = await _running(sb, "c")
    assert c["spec"]["nodeName"] == held
    await sb.until(lambda: _async("research" not in sb.usher.state.queues), "the retired queue goes")
    assert 'queue="research"' not in sb.usher.metrics.render().decode()


async def test_usher_starting_beside_a_running_pod_of_a_queue_no_longer_configured_takes_it_in(sb: UsherOnSandbox) -> None:
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.create("/api/v1/nodes", node("gpu-1"))
    left = _pod("left", 8, "gone")
    left["spec"]["nodeName"] = "gpu-0"  # bound by a leader that ran with another config
    await sb.create(PODS, left)
    await _running(sb, "left")
    await sb.start_usher(sb.tmp, "queues:\n  - {name: other, namespaceSelector: {}, quota: {gpu: 64}}\n")
    await sb.create(PODS, _pod("new", 8, "other"))
    assert (await _running(sb, "new"))["spec"]["nodeName"] == "gpu-1"
    assert sb.usher.state.queues["gone"].retired


async def test_a_topology_level_taken_out_while_a_gang_that_requires_it_runs_breaks_nothing(sb: UsherOnSandbox) -> None:
    for i in range(2):
        await sb.create("/api/v1/nodes", node(f"gpu-{i}", labels={"usher/rack": "r1"}))
    await sb.start_usher(sb.tmp, "topology: {levels: [usher/rack, kubernetes.io/hostname]}\nqueues:\n  - {name: research, namespaceSelector: {}, quota: {gpu: 64}}\n")
    racked = [_pod(f"t-{i}", 8, "research", **{"usher/gang": "t", "usher/gang-size": "2"}) for i in range(2)]
    for body in racked:
        body["metadata"]["annotations"] = {"usher/topology-required": "usher/rack"}
        await sb.create(PODS, body)
    for i in range(2):
        await _running(sb, f"t-{i}")
    await _set_config(sb, "queues:\n  - {name: research, namespaceSelector: {}, quota: {gpu: 64}}\n")
    await sb.until(lambda: _async(sb.usher.state.levels == []), "the config without levels is read")
    await sb.create(PODS, _pod("next", 1, "research"))
    gang = await sb.until(lambda: _async(sb.usher.mirror.gangs.get("default/next")), "next is seen")
    await sb.until(lambda: _async(gang.job is not None and gang.job.pending_reason == PendingReason.INSUFFICIENT_CAPACITY),
                   "next waits for room, not an error")
    assert sb.usher.metrics.render().decode().count('usher_controller_errors_total{kind="cycle"} 0.0') == 1


async def _async(value):
    return value


async def test_an_emptied_queue_config_is_refused_and_the_last_good_one_keeps_scheduling(sb: UsherOnSandbox) -> None:
    """An admin empties the key by mistake (or applies a file whose queues are commented out):
    taken as a config with no queue, every new pod would wait as UnknownQueue."""
    await sb.create("/api/v1/nodes", node("gpu-0"))
    good = "queues:\n  - {name: research, namespaceSelector: {}, quota: {gpu: 64}}\n"
    await sb.start_usher(sb.tmp, good)
    for n, text in enumerate(("", "# queues:\n#   - {name: research}\n", "queues: []\n")):
        await _set_config(sb, text)
        events = await sb.until(lambda n=n: _events_past(sb, n), f"the refusal of config {text!r}")
        said = "the queue config is empty" if n < 2 else "line 1: queues: empty"
        assert any(m.startswith("invalid queue config in usher-system/usher-queues[queues.yaml]; keeping the last good queue config; "
                                f"1 error: {said}") for m in events), events
        assert 'usher_config_valid 0.0' in sb.usher.metrics.render().decode()
        await sb.create(PODS, _pod(f"after-{n}", 1, "research"))
        await _running(sb, f"after-{n}")  # the last good config still places pods
        await _set_config(sb, good)
        await sb.until(lambda: _async('usher_config_valid 1.0' in sb.usher.metrics.render().decode()), "the good config back")
    assert "research" in sb.usher.state.queues and not sb.usher.state.queues["research"].retired


async def test_usher_starting_on_an_empty_queue_config_says_it_has_none_and_schedules_once_it_is_fixed(sb: UsherOnSandbox) -> None:
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.start_usher(sb.tmp, "")
    events = await sb.until(lambda: _events_past(sb, 0), "the refusal of the empty config")
    assert events[-1].startswith("invalid queue config in usher-system/usher-queues[queues.yaml]; no good queue config has been loaded yet"), events[-1]
    assert "1 error: the queue config is empty" in events[-1]
    await _set_config(sb, "queues:\n  - {name: research, namespaceSelector: {}, quota: {gpu: 64}}\n")
    await sb.create(PODS, _pod("first", 1, "research"))
    await _running(sb, "first")
    assert 'usher_config_valid 1.0' in sb.usher.metrics.render().decode()


async def _events_past(sb: UsherOnSandbox, seen: int) -> list[str] | None:
    """The ConfigMap's refusal Events once there are more than ``seen`` of them (their count included)."""
    items = (await sb.req("GET", "/api/v1/namespaces/usher-system/events"))["items"]
    refusals = [e for e in items if e["involvedObject"]["name"] == "usher-queues" and e["reason"] == "InvalidQueueConfig"]
    return [e["message"] for e in refusals] if sum(e.get("count", 1) for e in refusals) > seen else None

"""A gang whose binds do not all succeed is rolled back (the pods that bound are evicted) so it
never runs half; when a PodDisruptionBudget refuses those evictions, usher completes the gang
instead (binds the rest where they were to go), rather than leave half of it running for as long
as the budget holds."""

from __future__ import annotations

import asyncio

from sandboxes import UsherOnSandbox, node, pod, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)

from usher.sandbox.apiserver import FaultKind

PODS = "/api/v1/namespaces/default/pods"


def _member(name: str) -> dict:
    body = pod(name, 4, scheduler="usher")
    body["metadata"]["labels"] = {"usher/gang": "g", "usher/gang-size": "2"}
    return body


async def _guard(sb: UsherOnSandbox) -> None:
    await sb.create("/apis/policy/v1/namespaces/default/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "g"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"usher/gang": "g"}}}})


async def _both_running(sb: UsherOnSandbox) -> list[dict] | None:
    pods = [p for p in await sb.pods("usher/gang=g") if p.get("status", {}).get("phase") == "Running"]
    return pods if len(pods) == 2 else None


async def test_a_rollback_a_budget_refuses_is_completed_instead(sb: UsherOnSandbox) -> None:
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.start_usher(sb.tmp, "queues:\n  - {name: research, quota: {gpu: 64}, namespaces: [default]}\n")
    await _guard(sb)
    refused = sb.server.inject(FaultKind.ERROR, method="POST", path="*/pods/g-1/binding", status=403, times=1)
    for i in range(2):
        await sb.create(PODS, _member(f"g-{i}"))
    pods = await sb.until(lambda: _both_running(sb), "the gang runs whole")
    assert refused.fired == 1
    assert {p["spec"]["nodeName"] for p in pods} == {"gpu-0"}
    blocked = [e for e in await sb.events_of("g-0") if e["reason"] == "EvictionBlocked"]
    assert blocked  # the rollback was tried, and refused
    assert sb.usher.mirror.gangs["default/g"].teardown is None


async def test_a_rollback_without_a_budget_in_the_way_evicts_and_starts_the_gang_again_whole(sb: UsherOnSandbox) -> None:
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.start_usher(sb.tmp, "queues:\n  - {name: research, quota: {gpu: 64}, namespaces: [default]}\n")
    sb.server.inject(FaultKind.ERROR, method="POST", path="*/pods/g-1/binding", status=403, times=1)
    for i in range(2):
        await sb.create(PODS, _member(f"g-{i}"))
    # a bare pod evicted is gone for good (nothing makes it anew): the gang waits for its member
    await sb.until(lambda: _gone(sb, "g-0"), "the pod that bound is rolled back")
    await sb.create(PODS, _member("g-0"))
    await sb.until(lambda: _both_running(sb), "the gang runs whole")


async def _gone(sb: UsherOnSandbox, name: str) -> bool:
    return await sb.get(f"{PODS}/{name}") is None


async def test_a_gang_whose_bind_is_refused_for_good_waits_longer_after_each_refusal(sb: UsherOnSandbox) -> None:
    """An admission webhook refuses one pod's binding every time: usher tries again at once, then
    after 1 s, 2, 4, ... (its clock driven here), not hundreds of times a second; the pods say
    why they wait (BindRefused, not Unschedulable: more nodes would not help); once the webhook
    lets it through, the gang starts whole."""
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.start_usher(sb.tmp, "queues:\n  - {name: research, quota: {gpu: 64}, namespaces: [default]}\n")
    clock = [0.0]
    sb.usher.monotonic = lambda: clock[0]
    sb.server.inject(FaultKind.ERROR, method="POST", path="*/pods/g-1-*/binding", status=422)
    template = _member("x")
    template["metadata"].pop("name")
    await sb.create("/apis/batch/v1/namespaces/default/jobs", {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "g"},
        "spec": {"parallelism": 2, "completions": 2, "completionMode": "Indexed", "backoffLimit": 1000,
                 "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
                 "template": template}})  # its pods are made anew when a rollback evicts them

    def tries() -> int:
        return sum(1 for r in sb.server.requests if r.path.startswith("/api/v1/namespaces/default/pods/g-1-") and r.path.endswith("/binding"))

    await sb.until(lambda: _async(tries() >= 2), "refused, and tried again at once")
    for _ in range(30):  # 15 s of usher's retry clock
        clock[0] += 0.5
        sb.usher._wake.set()
        await asyncio.sleep(0.1)
    assert 3 <= tries() <= 7  # at 0, 0, 1, 3, 7 (and 15) s: not hundreds
    [waiting] = [p for p in await sb.pods("batch.kubernetes.io/job-completion-index=1") if not p["metadata"].get("deletionTimestamp")]
    scheduled = next(c for c in waiting["status"]["conditions"] if c["type"] == "PodScheduled")
    assert scheduled["reason"] == "BindRefused" and "tries again in" in scheduled["message"]

    sb.server.clear_faults()
    clock[0] += 300.0
    sb.usher._wake.set()
    await sb.until(lambda: _both_running(sb), "the gang runs whole once the binds go through")


async def _async(value):
    return value

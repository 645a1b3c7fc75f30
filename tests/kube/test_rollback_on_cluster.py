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


async def _bind_by_hand(sb: UsherOnSandbox, name: str, node_name: str, gpus: str) -> None:
    """What a leader that died right after it does leaves behind: one pod of the gang bound."""
    await sb.create(f"{PODS}/{name}/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "annotations": {"usher/gpus": gpus}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node_name}})
    await sb.pod_where(name, lambda p: p.get("status", {}).get("phase") == "Running")


async def test_a_gang_a_dead_leader_left_half_bound_under_a_budget_is_completed_beside_its_running_pod(sb: UsherOnSandbox) -> None:
    """A leader bound one pod of a two-pod gang and died before the second bind. The gang's
    PodDisruptionBudget (minAvailable 2) refuses the eviction of the running pod, so the new leader
    cannot tear the gang down; rather than leave that pod waiting for its peer for as long as the
    budget holds, it places the other pod and binds it, and the gang runs whole. The running pod
    is never evicted, and no GPU is given twice."""
    for i in range(2):
        await sb.create("/api/v1/nodes", node(f"gpu-{i}"))
    await _guard(sb)
    for i in range(2):
        await sb.create(PODS, _member(f"g-{i}"))
    await _bind_by_hand(sb, "g-0", "gpu-0", "0,1,2,3")
    first = await sb.get(f"{PODS}/g-0")
    await sb.start_usher(sb.tmp, "queues:\n  - {name: research, quota: {gpu: 64}, namespaces: [default]}\n")
    pods = await sb.until(lambda: _both_running(sb), "the gang runs whole")
    assert first["metadata"]["uid"] in {p["metadata"]["uid"] for p in pods}
    by_name = {p["metadata"]["name"]: p for p in pods}
    second = by_name["g-1"]
    if second["spec"]["nodeName"] == "gpu-0":  # beside it: on the GPUs it leaves
        assert not set(second["metadata"]["annotations"]["usher/gpus"].split(",")) & {"0", "1", "2", "3"}
    blocked = [e for e in await sb.events_of("g-0") if e["reason"] == "EvictionBlocked"]
    assert blocked  # the teardown was tried, and refused
    scheduled = [e for e in await sb.events_of("g-1") if e["reason"] == "Scheduled"]
    assert scheduled and "PodDisruptionBudget" in scheduled[-1]["message"]
    gang = sb.usher.mirror.gangs["default/g"]
    assert gang.teardown is None and not gang.partial
    assert sb.usher.state.queues["research"].usage[0] == 8_000


async def test_a_refused_rollback_is_still_completed_after_usher_derives_its_state_again(sb: UsherOnSandbox) -> None:
    """A rollback a budget refuses is to be completed, but the completing bind fails too; then a
    node joins, and usher derives its state again from the cluster, which no longer says where
    the rollback meant to put the pod. The gang is found partly bound, its teardown is refused
    again, and usher places and binds the rest anew: the gang runs whole, never half for good."""
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.start_usher(sb.tmp, "queues:\n  - {name: research, quota: {gpu: 64}, namespaces: [default]}\n")
    clock = [0.0]
    sb.usher.monotonic = lambda: clock[0]
    await _guard(sb)
    refused = sb.server.inject(FaultKind.ERROR, method="POST", path="*/pods/g-1/binding", status=403, times=2)
    for i in range(2):
        await sb.create(PODS, _member(f"g-{i}"))
    await sb.until(lambda: _async(refused.fired == 2), "the bind and the completing bind are both refused")
    first = await sb.pod_where("g-0", lambda p: p.get("status", {}).get("phase") == "Running")
    await sb.create("/api/v1/nodes", node("gpu-1"))
    await sb.until(lambda: _async(sb.usher.mirror.gangs["default/g"].completable), "found partly bound after the rebuild")

    async def whole() -> list[dict] | None:
        clock[0] += 5.0  # the teardown's retry clock
        sb.usher._wake.set()
        return await _both_running(sb)

    pods = await sb.until(whole, "the gang runs whole")
    assert first["metadata"]["uid"] in {p["metadata"]["uid"] for p in pods}
    assert sb.usher.mirror.gangs["default/g"].teardown is None

"""A GPU node dies under a running gang, as it happens on a real cluster (the sandbox's node
lifecycle controller, taint manager and pod garbage collector, `usher.sandbox.nodelifecycle`).

The node's Ready condition turns Unknown; the control plane taints it `unreachable` and marks
its pods not ready, and evicts them 300 s later (the toleration every pod gets). With no kubelet
to finish the deletion, the evicted pod stays Terminating on the dead node until the node comes
back, is deleted, or is declared out of service. usher must not bind onto the node meanwhile, must
stop the rest of the gang once its member is evicted, and must start the gang again whole on
the nodes left, with the pods the Job made anew.
"""

from __future__ import annotations

import asyncio

from sandboxes import UsherOnSandbox, node, pod, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)

from usher.sandbox.objects import unreachable_conditions

QUEUES = """
queues:
  - {name: research, quota: {gpu: 64}, namespaces: [default]}
"""


def _job(name: str, parallelism: int, gpus: int, failure_policy: bool = False) -> dict:
    spec: dict = {"parallelism": parallelism, "completions": parallelism, "template": {
        "metadata": {"labels": {"usher/gang": name}},
        "spec": {
            "schedulerName": "usher", "restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "main", "image": "trainer:1",
                            "resources": {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
    }}
    if failure_policy:
        spec["podFailurePolicy"] = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


async def _running(sb: UsherOnSandbox, selector: str) -> list[dict]:
    return [p for p in await sb.pods(selector)
            if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]


async def _lose_node(sb: UsherOnSandbox, name: str) -> None:
    """What the node lifecycle controller writes once the node's kubelet has gone silent."""
    r = await sb.http.patch(f"/api/v1/nodes/{name}/status", json={"status": {"conditions": unreachable_conditions(sb.server.store.now())}},
                            headers={"Content-Type": "application/strategic-merge-patch+json"})
    assert r.status_code == 200, r.text


async def _started_again(sb: UsherOnSandbox, *old: dict) -> list[dict]:
    """The gang's two pods made anew, once both run."""
    names = {p["metadata"]["name"] for p in old}

    async def fresh() -> list[dict] | None:
        pods = [p for p in await _running(sb, "job-name=train") if p["metadata"]["name"] not in names]
        return pods if len(pods) == 2 else None

    return await sb.until(fresh, "train starts again on the nodes left", deadline=30.0)


async def _train_on_two_of_three(sb: UsherOnSandbox, failure_policy: bool = False) -> tuple[dict, dict]:
    for i in range(3):
        await sb.create("/api/v1/nodes", node(f"gpu-{i}"))
    await sb.start_usher(sb.tmp, QUEUES)
    await sb.create("/apis/batch/v1/namespaces/default/jobs", _job("train", 2, 8, failure_policy))

    async def both() -> list[dict] | None:
        pods = await _running(sb, "job-name=train")
        return pods if len(pods) == 2 else None

    first = sorted(await sb.until(both, "train runs"), key=lambda p: p["spec"]["nodeName"])
    sb.advance(60)
    return first[0], first[1]


async def test_a_gang_on_a_dead_node_starts_again_on_the_nodes_left_while_its_old_pod_hangs_terminating(sb: UsherOnSandbox) -> None:
    lost, other = await _train_on_two_of_three(sb)
    dead = lost["spec"]["nodeName"]
    await _lose_node(sb, dead)

    node_now = await sb.until(lambda: sb.get(f"/api/v1/nodes/{dead}"), "node")
    taints = {(t["key"], t["effect"]) for t in node_now["spec"].get("taints") or []}
    assert taints == {("node.kubernetes.io/unreachable", "NoSchedule"), ("node.kubernetes.io/unreachable", "NoExecute")}
    pod = await sb.pod_where(lost["metadata"]["name"], lambda p: any(
        c["type"] == "Ready" and c["status"] == "False" for c in p["status"]["conditions"]))
    assert not pod["metadata"].get("deletionTimestamp")

    sb.advance(290)  # within the 300 s every pod tolerates an unreachable node: the gang runs on
    assert len(await _running(sb, "job-name=train")) == 2
    assert not (await sb.get(f"/api/v1/namespaces/default/pods/{lost['metadata']['name']}"))["metadata"].get("deletionTimestamp")

    sb.advance(15)  # the taint manager evicts it; nobody on the dead node can finish the deletion
    stuck = await sb.pod_where(lost["metadata"]["name"], lambda p: p["metadata"].get("deletionTimestamp"))
    assert stuck["status"]["phase"] == "Running"
    assert any(c["type"] == "DisruptionTarget" and c["reason"] == "DeletionByTaintManager" for c in stuck["status"]["conditions"])

    fresh = await _started_again(sb, lost, other)
    assert sorted(p["spec"]["nodeName"] for p in fresh) == sorted({"gpu-0", "gpu-1", "gpu-2"} - {dead})
    # the old pod still hangs there, and nothing else was put on the dead node
    assert (await sb.get(f"/api/v1/namespaces/default/pods/{lost['metadata']['name']}"))["metadata"].get("deletionTimestamp")
    said = [e["message"] for e in await sb.events_of(other["metadata"]["name"])]
    assert any("GangBroken" in e.get("reason", "") for e in await sb.events_of(other["metadata"]["name"])), said

    # the operator deletes the dead node: PodGC removes the pod left on it 40 s later
    await sb.req("DELETE", f"/api/v1/nodes/{dead}")
    sb.advance(41)
    assert await sb.until(lambda: _gone(sb, lost["metadata"]["name"]), "the pod on the deleted node is collected")
    assert len(await _running(sb, "job-name=train")) == 2


async def _gone(sb: UsherOnSandbox, name: str) -> bool:
    return await sb.get(f"/api/v1/namespaces/default/pods/{name}") is None


async def test_a_gang_whose_job_waits_for_the_pod_on_the_dead_node_says_so_and_starts_once_the_node_is_declared_out_of_service(sb: UsherOnSandbox) -> None:
    """With a ``podFailurePolicy`` the Job makes a pod anew only once the old one is terminal,
    which no kubelet on a dead node will ever report: the gang waits, and the reason names the
    pod, the node and the way out; the out-of-service taint lets PodGC remove the pod, and the
    gang starts again whole on the nodes left."""
    lost, other = await _train_on_two_of_three(sb, failure_policy=True)
    dead = lost["spec"]["nodeName"]
    await _lose_node(sb, dead)
    sb.advance(305)
    await sb.pod_where(lost["metadata"]["name"], lambda p: p["metadata"].get("deletionTimestamp"))

    async def explained() -> str | None:
        pods = [p for p in await sb.pods("job-name=train") if not p["spec"].get("nodeName")]
        for p in pods:
            for c in p["status"].get("conditions") or []:
                if c["type"] == "PodScheduled" and "stuck terminating" in (c.get("message") or ""):
                    return c["message"]
        return None

    message = await sb.until(explained, "the waiting pod says why", deadline=30.0)
    assert f"{lost['metadata']['name']} on {dead}" in message
    assert "node.kubernetes.io/out-of-service" in message
    assert "1 of the gang's 2 pods exist" in message
    assert not [p for p in await sb.pods("job-name=train") if p["spec"].get("nodeName") == dead and p["metadata"]["name"] != lost["metadata"]["name"]]

    await sb.req("PATCH", f"/api/v1/nodes/{dead}", {"spec": {"taints": [
        *((await sb.get(f"/api/v1/nodes/{dead}"))["spec"]["taints"]),
        {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"},
    ]}})

    fresh = await _started_again(sb, lost, other)
    assert sorted(p["spec"]["nodeName"] for p in fresh) == sorted({"gpu-0", "gpu-1", "gpu-2"} - {dead})
    assert await _gone(sb, lost["metadata"]["name"])
    job = await sb.get("/apis/batch/v1/namespaces/default/jobs/train")
    assert job["spec"]["podReplacementPolicy"] == "Failed"
    assert job["status"].get("failed", 0) == 0  # evictions the podFailurePolicy ignores


async def test_a_gang_whose_node_is_deleted_under_it_is_stopped_and_started_again_on_the_nodes_left(sb: UsherOnSandbox) -> None:
    """`kubectl delete node` without a drain: 40 s later PodGC fails the pod left on it and
    deletes it; the gang has lost a member, so usher stops the rest and starts it again whole."""
    lost, other = await _train_on_two_of_three(sb)
    gone_node = lost["spec"]["nodeName"]
    await sb.req("DELETE", f"/api/v1/nodes/{gone_node}")
    sb.advance(41)
    await sb.until(lambda: _gone(sb, lost["metadata"]["name"]), "PodGC removes the pod of the deleted node")
    fresh = await _started_again(sb, lost, other)
    assert sorted(p["spec"]["nodeName"] for p in fresh) == sorted({"gpu-0", "gpu-1", "gpu-2"} - {gone_node})
    assert any(e.get("reason") == "GangBroken" for e in await sb.events_of(other["metadata"]["name"]))


async def test_a_teardown_a_budget_refuses_asks_again_less_and_less_often_and_counts_its_event(sb: UsherOnSandbox) -> None:
    """A gang of two bare pods (nothing makes a lost one anew) runs; one is deleted by hand, and
    a PodDisruptionBudget guards the other, so the teardown's eviction is refused, and there is
    no pod to complete the gang with. usher asks again after 10 s, then 20, 40, ... (up to
    5 minutes), not every 10 s for ever, and its Warning is one Event whose count grows, not a
    new Event per try. Once the budget goes, the teardown ends."""
    for i in range(3):
        await sb.create("/api/v1/nodes", node(f"gpu-{i}"))
    await sb.start_usher(sb.tmp, QUEUES)
    for i in range(2):
        await sb.create("/api/v1/namespaces/default/pods", _bare_member(f"w-{i}"))

    async def both() -> list[dict] | None:
        pods = await _running(sb, "usher/gang=train")
        return pods if len(pods) == 2 else None

    await sb.until(both, "train runs")
    await sb.create("/apis/policy/v1/namespaces/default/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "train"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"usher/gang": "train"}}}})
    fake = [0.0]
    sb.usher.monotonic = lambda: fake[0]
    await sb.req("DELETE", "/api/v1/namespaces/default/pods/w-0")
    path = "/api/v1/namespaces/default/pods/w-1/eviction"

    def refused() -> int:
        return sum(1 for r in sb.server.requests if r.path == path and r.status == 429 and not r.query.get("dryRun"))

    await sb.until(lambda: _async(refused() >= 1), "the first eviction is refused")
    for _ in range(60):  # ten minutes of the teardown's clock, a tick every 10 s
        fake[0] += 10.0
        sb.usher._wake.set()
        await asyncio.sleep(0.1)
    tries = refused()
    assert 3 <= tries <= 7  # 0, 10, 30, 70, 150, 310 s: not the 60 a fixed 10 s would make
    warnings = [e for e in await sb.events_of("w-1") if e["reason"] == "EvictionBlocked"]
    assert len(warnings) == 1 and warnings[0]["count"] == tries

    await sb.req("DELETE", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/train")
    fake[0] += 300.0
    sb.usher._wake.set()
    await sb.until(lambda: _gone(sb, "w-1"), "the teardown ends once the budget allows it")


async def test_a_pod_made_anew_after_the_teardown_was_refused_completes_the_gang(sb: UsherOnSandbox) -> None:
    """As above, but the lost pod is made anew only after the budget refused the teardown (by
    hand here; an owner's backoff does the same): at the next try, usher completes the gang with it."""
    for i in range(3):
        await sb.create("/api/v1/nodes", node(f"gpu-{i}"))
    await sb.start_usher(sb.tmp, QUEUES)
    for i in range(2):
        await sb.create("/api/v1/namespaces/default/pods", _bare_member(f"w-{i}"))

    async def running(n: int) -> list[dict] | None:
        pods = await _running(sb, "usher/gang=train")
        return pods if len(pods) == n else None

    await sb.until(lambda: running(2), "train runs")
    await sb.create("/apis/policy/v1/namespaces/default/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "train"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"usher/gang": "train"}}}})
    fake = [0.0]
    sb.usher.monotonic = lambda: fake[0]
    survivor = await sb.get("/api/v1/namespaces/default/pods/w-1")
    await sb.req("DELETE", "/api/v1/namespaces/default/pods/w-0")
    await sb.until(lambda: _refused(sb, "w-1"), "the teardown is refused")
    await sb.create("/api/v1/namespaces/default/pods", _bare_member("w-2"))

    async def whole() -> list[dict] | None:
        fake[0] += 10.0  # the teardown's retry clock
        sb.usher._wake.set()
        return await running(2)

    pods = await sb.until(whole, "the gang runs whole with w-2")
    assert {p["metadata"]["name"] for p in pods} == {"w-1", "w-2"}
    assert survivor["metadata"]["uid"] in {p["metadata"]["uid"] for p in pods}


def _bare_member(name: str) -> dict:
    body = pod(name, 8, scheduler="usher")
    body["metadata"]["labels"] = {"usher/gang": "train", "usher/gang-size": "2"}
    return body


async def _refused(sb: UsherOnSandbox, name: str) -> bool:
    path = f"/api/v1/namespaces/default/pods/{name}/eviction"
    return any(r.path == path and r.status == 429 and not r.query.get("dryRun") for r in sb.server.requests)


async def test_a_gang_that_lost_a_member_under_a_budget_is_completed_with_the_pod_made_anew(sb: UsherOnSandbox) -> None:
    """One pod of a running Job's gang is deleted by hand; the Job makes it anew, and a
    PodDisruptionBudget (maxUnavailable 0: with a pod missing it allows no disruption, for as long
    as the rest run) keeps the other from being evicted. Rather than hold the other pod's GPUs
    for ever with the new pod waiting, usher binds the new pod: the gang runs whole again, and the
    pod that kept running was never evicted."""
    lost, other = await _train_on_two_of_three(sb)
    await sb.create("/apis/policy/v1/namespaces/default/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "train"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"job-name": "train"}}}})
    await sb.req("DELETE", f"/api/v1/namespaces/default/pods/{lost['metadata']['name']}")

    async def whole_again() -> list[dict] | None:
        pods = await _running(sb, "job-name=train")
        names = {p["metadata"]["name"] for p in pods}
        return pods if len(pods) == 2 and lost["metadata"]["name"] not in names else None

    pods = await sb.until(whole_again, "the gang runs whole again")
    assert other["metadata"]["uid"] in {p["metadata"]["uid"] for p in pods}
    assert any(e["reason"] == "EvictionBlocked" for e in await sb.events_of(other["metadata"]["name"]))
    [new] = [p for p in pods if p["metadata"]["uid"] != other["metadata"]["uid"]]
    scheduled = [e for e in await sb.events_of(new["metadata"]["name"]) if e["reason"] == "Scheduled"]
    assert scheduled and "PodDisruptionBudget" in scheduled[-1]["message"]
    gang = next(g for g in sb.usher.mirror.gangs.values() if g.pods.keys() >= {new["metadata"]["name"]})
    assert gang.teardown is None and not gang.partial


async def _async(value: bool) -> bool:
    return value

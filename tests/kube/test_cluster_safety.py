"""usher on a cluster that is not its own: each way a real cluster hurt it, through the sandbox
over HTTP, with the sandbox's kubelet, Job controller, graceful deletion and injected faults.

Every test here failed before the fix it stands for (issue 11): pods usher did not place were
invisible, a transport error left half a gang, a drained gang kept its GPUs, terminating pods
were bound over, a node added mid-bind evicted a gang, and waiting pods carried a reason that
cluster autoscalers ignore.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import pytest
from kubectl import Kubectl
from sandboxes import UsherOnSandbox, node, pod, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)
from usher.engine.backends.kube.controller import KubeController
from usher.engine.channel import Command, CommandError
from usher.engine.enums import Action
from usher.sandbox.apiserver import FaultKind

PODS = "/api/v1/namespaces/default/pods"


def gang_pod(name: str, gang: str, size: int, gpus: int, queue: str = "research", **extra: Any) -> dict:
    body = pod(name, gpus, scheduler="usher", **extra)
    body["metadata"]["labels"] = {"usher/queue": queue, "usher/gang": gang, "usher/gang-size": str(size)}
    return body


def phase(p: dict) -> str:
    return p.get("status", {}).get("phase", "")


def scheduled(p: dict) -> dict | None:
    return next((c for c in p.get("status", {}).get("conditions") or [] if c["type"] == "PodScheduled"), None)


def gpu_use(pods: list[dict]) -> dict[str, int]:
    """GPUs requested by the unfinished pods bound to each node (what the kubelet admits against)."""
    use: dict[str, int] = defaultdict(int)
    for p in pods:
        node_name = p["spec"].get("nodeName")
        if node_name and phase(p) not in ("Succeeded", "Failed"):
            for c in p["spec"]["containers"]:
                use[node_name] += int((c.get("resources") or {}).get("requests", {}).get("nvidia.com/gpu", 0))
    return use


def rejected(pods: list[dict]) -> list[str]:
    """Pods the kubelet refused (OutOfcpu, OutOfnvidia.com/gpu, ...)."""
    return [f"{p['metadata']['name']}: {p['status'].get('reason')}" for p in pods if str(p["status"].get("reason", "")).startswith("OutOf")]


async def two_nodes(sb: UsherOnSandbox) -> None:
    for name in ("gpu-1", "gpu-2"):
        await sb.create("/api/v1/nodes", node(name))


# ---------------------------------------------------------------- 1. pods usher did not place


async def test_pods_of_other_schedulers_and_daemonsets_are_never_overcommitted(sb):
    await two_nodes(sb)
    await sb.start_usher(sb.tmp)
    # a DaemonSet on every node, and a default-scheduler pod holding 4 GPUs of gpu-1
    await sb.create("/apis/apps/v1/namespaces/default/daemonsets", {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "node-exporter"},
        "spec": {"selector": {"matchLabels": {"app": "exporter"}}, "template": {
            "metadata": {"labels": {"app": "exporter"}},
            "spec": {"containers": [{"name": "e", "image": "exporter:1", "resources": {"requests": {"cpu": "60"}}}]}}},
    })
    await sb.create(PODS, pod("notebook", 4, node_name="gpu-1"))
    await sb.until(lambda: _running(sb, 3), "the DaemonSet's two pods and the notebook run")
    await sb.usher.wait_idle()
    # 8 GPUs each for two pods: only gpu-2 has 8 free, so the gang must wait (whole), not be
    # bound onto gpu-1 where the kubelet would refuse it
    for i in range(2):
        await sb.create(PODS, gang_pod(f"big-{i}", "big", 2, 8))
    waiting = await sb.until(lambda: _condition(sb, "big-0"), "big-0 says why it waits")
    assert waiting["reason"] == "Unschedulable" and waiting["message"].startswith("InsufficientCapacity")
    # 4 GPUs and 2 cores each: fits beside the notebook on gpu-1 and beside the DaemonSet's 60 cores
    for i in range(2):
        await sb.create(PODS, gang_pod(f"mid-{i}", "mid", 2, 4, containers=[{
            "name": "main", "image": "trainer:1",
            "resources": {"requests": {"nvidia.com/gpu": "4", "cpu": "2"}, "limits": {"nvidia.com/gpu": "4"}}}]))
    await sb.until(lambda: _running(sb, 5), "the 4-GPU gang runs")
    pods = await sb.all_pods()
    assert rejected(pods) == []
    assert all(used <= 8 for used in gpu_use(pods).values()), gpu_use(pods)
    assert {p["spec"]["nodeName"] for p in pods if p["metadata"]["name"].startswith("mid-")} == {"gpu-1", "gpu-2"}
    assert all(not p["spec"].get("nodeName") for p in pods if p["metadata"]["name"].startswith("big-"))


async def _running(sb: UsherOnSandbox, n: int) -> bool:
    return sum(phase(p) == "Running" for p in await sb.all_pods()) >= n


async def _condition(sb: UsherOnSandbox, name: str) -> dict | None:
    """The pod's PodScheduled=False condition, once usher has seen its whole gang."""
    p = await sb.get(f"{PODS}/{name}")
    c = scheduled(p) if p else None
    return c if c is not None and c["status"] == "False" and not c["message"].startswith("WaitingForGangMembers") else None


# ---------------------------------------------------------------- 6. autoscalers


async def test_only_pods_that_wait_for_capacity_say_unschedulable(sb):
    await two_nodes(sb)
    await sb.start_usher(sb.tmp)
    await sb.create(PODS, gang_pod("huge", "huge", 1, 8, queue="small"))  # over its queue's quota
    await sb.create(PODS, gang_pod("wide-0", "wide", 3, 8))  # 24 GPUs: more than the cluster has free
    for i in (1, 2):
        await sb.create(PODS, gang_pod(f"wide-{i}", "wide", 3, 8))
    quota = await sb.until(lambda: _condition(sb, "huge"), "huge says why")
    capacity = await sb.until(lambda: _condition(sb, "wide-0"), "wide-0 says why")
    # Cluster Autoscaler and Karpenter act on reason Unschedulable: capacity yes, quota never
    assert capacity["reason"] == "Unschedulable" and capacity["message"].startswith("InsufficientCapacity: ")
    assert quota["reason"] in ("ExceedsQuota", "WaitingForQuota") and quota["message"].startswith(quota["reason"] + ": ")


async def test_taints_node_selectors_and_required_affinity_are_honoured(sb):
    await sb.create("/api/v1/nodes", node("gpu-1", labels={"pool": "train"}))
    await sb.create("/api/v1/nodes", node("gpu-2", labels={"pool": "train"},
                                          taints=[{"key": "gpu", "value": "reserved", "effect": "NoSchedule"}]))
    await sb.create("/api/v1/nodes", node("gpu-3", labels={"pool": "serve"}))
    await sb.start_usher(sb.tmp)
    # two 8-GPU pods for the train pool: gpu-2 is tainted, so only gpu-1 can take one
    for i in range(2):
        await sb.create(PODS, gang_pod(f"sel-{i}", "sel", 2, 8, nodeSelector={"pool": "train"}))
    c = await sb.until(lambda: _condition(sb, "sel-0"), "sel-0 says why it waits")
    assert c["reason"] == "Unschedulable"
    assert "1 node has a taint the pod does not tolerate (gpu=reserved:NoSchedule)" in c["message"], c["message"]
    # the same gang tolerating the taint, with required affinity instead of a selector
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["train"]}]}]}}}
    tolerate = [{"key": "gpu", "operator": "Equal", "value": "reserved", "effect": "NoSchedule"}]
    for i in range(2):
        await sb.create(PODS, gang_pod(f"tol-{i}", "tol", 2, 8, affinity=affinity, tolerations=tolerate))

    async def placed() -> dict[str, str] | None:
        pods = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in await sb.all_pods()}
        return pods if pods.get("tol-0") and pods.get("tol-1") else None

    where = await sb.until(placed, "the tolerating gang is bound")
    assert {where["tol-0"], where["tol-1"]} == {"gpu-1", "gpu-2"}
    assert not where.get("sel-0") and not where.get("sel-1")
    # a pod with no tolerations at all respects taints too: gpu-3, the only node with room,
    # is tainted now, so it waits
    await sb.req("PATCH", "/api/v1/nodes/gpu-3", {"spec": {"taints": [{"key": "gpu", "value": "reserved", "effect": "NoSchedule"}]}})
    await sb.usher.wait_idle()
    await sb.create(PODS, gang_pod("plain", "plain", 1, 8))
    c = await sb.until(lambda: _condition(sb, "plain"), "plain says why it waits")
    assert c["reason"] == "Unschedulable" and "taint the pod does not tolerate" in c["message"], c["message"]


async def test_a_pod_with_an_unsupported_constraint_waits_with_the_field_named(sb):
    await two_nodes(sb)
    await sb.start_usher(sb.tmp)
    body = gang_pod("picky", "picky", 1, 1)
    # Gt with a value that is no integer: the API server lets it through, usher cannot read it
    body["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu-generation", "operator": "Gt", "values": ["three"]}]}]}}}
    await sb.create(PODS, body)
    c = await sb.until(lambda: _condition(sb, "picky"), "picky says why")
    assert c["reason"] == "InvalidRequest" and "spec.affinity.nodeAffinity" in c["message"], c["message"]


# ---------------------------------------------------------------- 3. transport failures


async def test_a_bind_lost_in_transport_rolls_the_gang_back_and_it_starts_whole_later(sb):
    await two_nodes(sb)
    await sb.start_usher(sb.tmp)
    # every attempt to bind train-1 has its connection cut (the client's retries included)
    cut = sb.server.inject(FaultKind.DROP, path="*/pods/train-1/binding", times=5)
    for i in range(2):
        await sb.create(PODS, gang_pod(f"train-{i}", "train", 2, 8))
    rollback = await sb.until(lambda: _events(sb, "train-0", "GangRollback"), "usher evicts the member that bound")
    assert "binds failed" in rollback[0]["message"] and "cannot reach" in rollback[0]["message"]
    await sb.until(lambda: _gone(sb, "train-0"), "the member that bound is gone")
    assert cut.fired == 5
    assert not (await sb.get(f"{PODS}/train-1"))["spec"].get("nodeName")  # never half a gang
    # its controller (here: the test) creates the pod again, and the gang starts whole
    await sb.create(PODS, gang_pod("train-0", "train", 2, 8))

    async def whole() -> bool:
        pods = [p for p in await sb.all_pods() if p["metadata"]["name"].startswith("train-")]
        return len(pods) == 2 and all(phase(p) == "Running" for p in pods)

    await sb.until(whole, "the gang runs whole")


async def test_commands_reply_and_the_loop_survives_transport_errors_and_a_broken_config(sb):
    await two_nodes(sb)
    usher = await sb.start_usher(sb.tmp)
    await sb.create(PODS, gang_pod("solo", "solo", 1, 8))
    await sb.until(lambda: _running(sb, 1), "solo runs")
    await usher.wait_idle()
    # releasing a job that is not held claims nothing
    assert await asyncio.wait_for(usher.post(Command(Action.RELEASE, job="default/solo", actor="ops")), 30) == "not held; nothing to release"
    sb.server.inject(FaultKind.DROP, path="*/pods/solo/eviction", times=12)
    with pytest.raises(CommandError, match="preempt"):
        await asyncio.wait_for(usher.post(Command(Action.PREEMPT, job="default/solo", actor="ops")), 30)
    # a broken queue config: the quota edit is refused with a reason, the old config stays
    await sb.req("PATCH", "/api/v1/namespaces/usher-system/configmaps/usher-queues", {"data": {"queues.yaml": "queues: [ {name: x"}})
    await sb.until(lambda: _config_invalid(usher), "usher notices the broken config")
    with pytest.raises(CommandError):
        await asyncio.wait_for(usher.post(Command(Action.SET_QUOTA, queue="research", quota={"gpu": 16_000}, actor="ops")), 30)
    # and the loop still schedules
    await sb.create(PODS, gang_pod("after", "after", 1, 8))
    await sb.until(lambda: _running(sb, 2), "a pod created afterwards runs")
    assert not sb.task.done()


async def _config_invalid(usher: KubeController) -> bool:
    return usher.mirror.config_error is not None


# ---------------------------------------------------------------- 4. a gang that loses a member


def job_gang(name: str, size: int, gpus: int) -> dict:
    """A batch Job whose pods form one usher gang; a pod lost to a disruption is not a failure."""
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {
            "parallelism": size, "completions": size, "backoffLimit": 0,
            "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
            "template": {
                "metadata": {"labels": {"usher/queue": "research", "usher/gang": name, "usher/gang-size": str(size)}},
                "spec": {"schedulerName": "usher", "restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "trainer:1",
                    "resources": {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}]},
            },
        },
    }


async def _job_pods(sb: UsherOnSandbox, name: str) -> list[dict]:
    return [p for p in await sb.all_pods() if p["metadata"].get("labels", {}).get("job-name") == name]


async def test_kubectl_drain_of_one_node_of_a_gang_stops_the_whole_gang_and_restarts_it_whole(sb):
    await two_nodes(sb)
    await sb.create("/api/v1/nodes", node("gpu-3"))
    await sb.start_usher(sb.tmp)
    await sb.create("/apis/batch/v1/namespaces/default/jobs", job_gang("train", 2, 8))

    async def running() -> list[dict] | None:
        pods = [p for p in await _job_pods(sb, "train") if phase(p) == "Running"]
        return pods if len(pods) == 2 else None

    first = await sb.until(running, "the gang runs")
    drained = first[0]["spec"]["nodeName"]
    kubectl = Kubectl(sb.kubeconfig)
    done = await asyncio.to_thread(kubectl.run, "drain", drained, "--ignore-daemonsets", "--timeout=60s")
    assert done.returncode == 0, done.stderr
    # the member on the other node is evicted by usher, with an Event that says why
    survivor = next(p for p in first if p["spec"]["nodeName"] != drained)["metadata"]["name"]
    broken = await sb.until(lambda: _events(sb, survivor, "GangBroken"), "usher stops the rest of the gang")
    assert "is being stopped" in broken[0]["message"]
    # the Job recreates both pods; they start together on the two nodes left, never one alone
    again = await sb.until(running, "the gang runs again, whole", deadline=40.0)
    assert {p["metadata"]["uid"] for p in again}.isdisjoint({p["metadata"]["uid"] for p in first})
    assert drained not in {p["spec"]["nodeName"] for p in again}
    pods = await sb.all_pods()
    assert rejected(pods) == [] and all(used <= 8 for used in gpu_use(pods).values())
    job = await sb.get("/apis/batch/v1/namespaces/default/jobs/train")
    assert not any(c["type"] == "Failed" for c in job["status"].get("conditions") or [])


async def _events(sb: UsherOnSandbox, name: str, reason: str) -> list[dict]:
    return [e for e in await sb.events_of(name) if e["reason"] == reason]


async def test_deleting_one_pod_of_a_running_gang_stops_the_rest(sb):
    await two_nodes(sb)
    await sb.start_usher(sb.tmp)
    for i in range(2):
        await sb.create(PODS, gang_pod(f"pair-{i}", "pair", 2, 8))
    await sb.until(lambda: _running(sb, 2), "the gang runs")
    await sb.req("DELETE", f"{PODS}/pair-0")
    await sb.until(lambda: _events(sb, "pair-1", "GangBroken"), "usher evicts the other member")
    await sb.until(lambda: _gone(sb, "pair-1"), "the other member is gone")


async def _gone(sb: UsherOnSandbox, name: str) -> bool:
    return await sb.get(f"{PODS}/{name}") is None


# ---------------------------------------------------------------- 7. terminating pods


async def test_gpus_of_a_pod_in_its_grace_period_are_not_bound_over(sb):
    await sb.create("/api/v1/nodes", node("gpu-1"))
    await sb.start_usher(sb.tmp)
    await sb.create(PODS, pod("slow-stop", 8, node_name="gpu-1", annotations={"sandbox.usher/ignore-sigterm": "true"},
                              terminationGracePeriodSeconds=600))
    await sb.until(lambda: _running(sb, 1), "the foreign pod runs")
    await sb.req("DELETE", f"{PODS}/slow-stop")
    await sb.create(PODS, gang_pod("next", "next", 1, 8))
    c = await sb.until(lambda: _condition(sb, "next"), "next says why it waits")
    assert c["reason"] == "Unschedulable"
    sb.clock.t += 300  # half the grace period: still there, still holding its GPUs
    await sb.usher.wait_idle()
    assert not (await sb.get(f"{PODS}/next"))["spec"].get("nodeName")
    sb.clock.t += 301
    await sb.until(lambda: _bound(sb, "next"), "next binds once the old pod is gone")
    assert rejected(await sb.all_pods()) == []


async def _bound(sb: UsherOnSandbox, name: str) -> bool:
    p = await sb.get(f"{PODS}/{name}")
    return bool(p and p["spec"].get("nodeName") and phase(p) == "Running")


# ---------------------------------------------------------------- 8. nodes change mid-bind


async def test_a_node_added_while_a_gang_binds_does_not_evict_the_gang(sb):
    await two_nodes(sb)
    await sb.start_usher(sb.tmp)
    sb.server.inject(FaultKind.DELAY, path="*/pods/grow-1/binding", delay=1.0, times=1)
    for i in range(2):
        await sb.create(PODS, gang_pod(f"grow-{i}", "grow", 2, 8))
    await sb.until(lambda: _bound_any(sb, "grow-0"), "the first bind lands")
    await sb.create("/api/v1/nodes", node("gpu-3", labels={"usher/rack": "r9"}))
    await sb.until(lambda: _running(sb, 2), "the gang runs")
    await sb.usher.wait_idle()
    assert [e for e in await sb.events_of("grow-0") if e["reason"] in ("GangRollback", "GangBroken")] == []
    assert all(phase(p) == "Running" for p in await sb.all_pods())


async def _bound_any(sb: UsherOnSandbox, name: str) -> bool:
    p = await sb.get(f"{PODS}/{name}")
    return bool(p and p["spec"].get("nodeName"))


# ---------------------------------------------------------------- the sandbox fails as a cluster does


async def test_a_failed_node_reports_ready_unknown_and_keeps_its_other_conditions(tmp_path):
    from harness import Cluster, scenario_of

    c = Cluster(scenario_of("""
        name: node-failure
        nodes: [{name: n1, gpus: 8}]
        queues: [{name: q, namespaceSelector: {}, quota: {gpu: 8}}]
        jobs: []
        events: [{at: 10, action: fail, node: n1}, {at: 20, action: recover, node: n1}]
    """), tmp_path)
    await c.start()
    try:
        def conditions() -> dict[str, dict]:
            obj = c.server.store.get("nodes", "n1")
            return {cond["type"]: cond for cond in obj["status"]["conditions"]}

        healthy = conditions()
        assert healthy["Ready"]["status"] == "True" and not healthy["Ready"]["lastHeartbeatTime"].startswith("1970")
        await c.play(until=10)
        failed = conditions()
        assert failed["Ready"]["status"] == "Unknown" and failed["Ready"]["reason"] == "NodeStatusUnknown"
        assert {"MemoryPressure", "DiskPressure", "PIDPressure"} <= failed.keys()
        await c.play(until=20)
        assert conditions()["Ready"]["status"] == "True" and len(conditions()) == 4
    finally:
        await c.stop()


# ---------------------------------------------------------------- 5. a hostile queue config

ALIAS_BOMB = "\n".join(
    ["a: &a [x, x, x, x, x, x, x, x, x]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
    + ["queues: *i"]
)


@pytest.mark.timeout(120)
async def test_a_hostile_queue_config_is_refused_and_scheduling_goes_on(sb):
    await two_nodes(sb)
    usher = await sb.start_usher(sb.tmp)
    for text, what in ((ALIAS_BOMB, "alias"), ("queues: " + "[" * 20_000 + "]" * 20_000, "nest")):
        await sb.req("PATCH", "/api/v1/namespaces/usher-system/configmaps/usher-queues", {"data": {"queues.yaml": text}})
        await sb.until(lambda what=what: _config_error_mentions(usher, what), f"usher refuses the {what} document")
        # the last good config (queue research) is still in force: a new gang is scheduled
        name = f"after-{what}"
        await sb.create(PODS, gang_pod(name, name, 1, 8))
        await sb.until(lambda name=name: _bound(sb, name), f"{name} runs under the last good config")
        await sb.req("DELETE", f"{PODS}/{name}")
        await sb.until(lambda name=name: _gone(sb, name), f"{name} is gone")
    assert not sb.task.done()


async def _config_error_mentions(usher: KubeController, what: str) -> bool:
    return what in (usher.mirror.config_error or "").lower()

"""Priority preemption on a cluster, where victims take their grace period to go: usher must never
bind a preemptor onto GPUs a victim still holds (the kubelet rejects the pod with
``OutOfnvidia.com/gpu``; a Job counts that against its backoffLimit and may fail for good).

Batch Jobs under the sandbox's Job controller, PriorityClasses through its admission, victims that
ignore SIGTERM for their whole ``terminationGracePeriodSeconds``.
"""

from __future__ import annotations

import asyncio

from sandboxes import UsherOnSandbox, node, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)

from test_workload_gangs import QUEUES, create_pod, eight_gpu_nodes, gpu_template, running_whole

from usher.sandbox.apiserver import FaultKind

JOBS = "/apis/batch/v1/namespaces/default/jobs"
PODS = "/api/v1/namespaces/default/pods"
PREEMPTING = """
queues:
  - {name: research, quota: {gpu: 64}, namespaces: [default], preemption: {withinQueue: LowerPriority}}
"""


def job(name: str, gpus: int, *, grace: int = 0, priority_class: str | None = None, pods: int = 1,
        labels: dict[str, str] | None = None) -> dict:
    """A batch Job of ``pods`` pods (a gang) whose pods take ``grace`` seconds to go when evicted
    or deleted, and whose disruptions do not count against its backoffLimit."""
    spec: dict = {
        "schedulerName": "usher", "restartPolicy": "Never", "terminationGracePeriodSeconds": grace,
        "containers": [{"name": "main", "image": "trainer:1",
                        "resources": {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": {
        "backoffLimit": 6, "parallelism": pods, "completions": pods,
        "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
        "template": {"metadata": {"annotations": {"sandbox.usher/ignore-sigterm": "true"}, "labels": labels or {}}, "spec": spec},
    }}


async def priority_class(sb: UsherOnSandbox, name: str, value: int, preemption_policy: str | None = None) -> None:
    body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}
    if preemption_policy is not None:
        body["preemptionPolicy"] = preemption_policy
    await sb.create("/apis/scheduling.k8s.io/v1/priorityclasses", body)


async def running(sb: UsherOnSandbox, name: str) -> list[dict] | None:
    pods = [p for p in await sb.pods(f"job-name={name}")
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
    return pods or None


async def ticks(sb: UsherOnSandbox, seconds: float) -> None:
    """Let usher and the sandbox's controllers work for a while (usher ticks every second)."""
    for _ in range(int(seconds / 0.1)):
        sb.server.controllers.step()
        await asyncio.sleep(0.1)


def rejected(pods: list[dict]) -> list[str]:
    """Pods the kubelet refused: usher bound them onto resources already in use."""
    return [f"{p['metadata']['name']}: {p['status'].get('reason')}" for p in pods if str(p["status"].get("reason", "")).startswith("OutOf")]


def evictions(sb: UsherOnSandbox) -> list[str]:
    return [r.path.split("/")[-2] for r in sb.server.requests
            if r.method == "POST" and r.path.endswith("/eviction") and "dryRun" not in r.query]


async def failed_jobs(sb: UsherOnSandbox, *names: str) -> list[str]:
    out = []
    for name in names:
        status = (await sb.get(f"{JOBS}/{name}"))["status"]
        if any(c["type"] == "Failed" and c["status"] == "True" for c in status.get("conditions") or []):
            out.append(name)
    return out


async def test_a_victim_someone_else_is_deleting_is_waited_for_before_the_preemptor_binds(sb: UsherOnSandbox) -> None:
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.start_usher(sb.tmp, PREEMPTING)
    await sb.create(JOBS, job("low", 8, grace=60))
    [low] = await sb.until(lambda: running(sb, "low"), "low runs")
    sb.advance(60)
    # an operator deletes low's pod: it holds its 8 GPUs through its 60 s grace period
    await sb.req("DELETE", f"{PODS}/{low['metadata']['name']}")
    await ticks(sb, 1)
    await priority_class(sb, "urgent", 100)
    await sb.create(JOBS, job("urgent", 8, priority_class="urgent"))
    await ticks(sb, 3)
    assert rejected(await sb.all_pods()) == []
    assert not (await sb.pods("job-name=urgent"))[0]["spec"].get("nodeName"), "bound while low still holds the GPUs"
    sb.advance(61)  # low is gone
    [urgent] = await sb.until(lambda: running(sb, "urgent"), "urgent runs once low is gone")
    assert urgent["spec"]["nodeName"] == "gpu-0" and rejected(await sb.all_pods()) == []


async def test_a_preemptor_preempted_while_it_waits_for_its_room_never_binds(sb: UsherOnSandbox) -> None:
    """mid preempts low and waits out low's 30 s grace period; top arrives meanwhile and
    preempts mid, which has nothing bound yet: mid's waiting bind must be called off."""
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.start_usher(sb.tmp, PREEMPTING)
    await sb.create(JOBS, job("low", 8, grace=30))
    await sb.until(lambda: running(sb, "low"), "low runs")
    sb.advance(60)
    await priority_class(sb, "mid", 100)
    await priority_class(sb, "top", 200)
    await sb.create(JOBS, job("mid", 8, priority_class="mid"))

    async def low_evicted() -> bool | None:
        return bool(evictions(sb)) or None

    await sb.until(low_evicted, "low is evicted for mid")
    sb.advance(10)
    await ticks(sb, 1)
    await sb.create(JOBS, job("top", 8, priority_class="top"))
    await ticks(sb, 2)
    sb.advance(25)  # low is gone
    [top] = await sb.until(lambda: running(sb, "top"), "top runs once low is gone")
    await ticks(sb, 3)
    pods = await sb.all_pods()
    assert rejected(pods) == [] and await failed_jobs(sb, "low", "mid", "top") == []
    assert [p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") and p["status"].get("phase") == "Running"] == [
        top["metadata"]["name"]], "top alone runs; mid and low wait for it"
    [evicted] = evictions(sb)
    assert evicted.startswith("low-"), "only low's pod was evicted: mid had nothing bound to evict"


async def test_a_preemptor_preempted_while_it_waits_goes_back_to_its_queue_at_once(sb: UsherOnSandbox) -> None:
    """mid preempts low on gpu-0 and waits out low's 30 s grace period; top arrives and preempts
    mid. mid's waiting bind ends at once and mid is requeued, not once low is gone: when gpu-1
    frees meanwhile (its job is deleted), mid starts there while low is still going, and nothing
    of mid is evicted (a bind task still waiting beside the new one used to start mid twice, and
    the old preemption's teardown evicted the pod that had just started)."""
    for i in range(2):
        await sb.create("/api/v1/nodes", node(f"gpu-{i}"))
    await sb.start_usher(sb.tmp, PREEMPTING)
    await sb.create(JOBS, job("low", 8, grace=30))
    await sb.until(lambda: running(sb, "low"), "low runs")
    kept = job("kept", 8)
    kept["spec"]["template"]["metadata"]["annotations"]["usher/preemptible"] = "false"
    await sb.create(JOBS, kept)
    await sb.until(lambda: running(sb, "kept"), "kept runs")
    sb.advance(60)
    await priority_class(sb, "mid", 100)
    await priority_class(sb, "top", 200)
    await sb.create(JOBS, job("mid", 8, priority_class="mid"))
    await sb.until(lambda: _async_value(bool(evictions(sb)) or None), "low is evicted for mid")
    sb.advance(10)
    await ticks(sb, 1)
    await sb.create(JOBS, job("top", 8, priority_class="top"))
    await ticks(sb, 2)
    await sb.req("DELETE", f"{JOBS}/kept?propagationPolicy=Background")
    [started] = await sb.until(lambda: running(sb, "mid"), "mid starts on gpu-1 while low still goes")
    assert started["spec"]["nodeName"] == "gpu-1"
    low = [p for p in await sb.pods("job-name=low") if p["metadata"].get("deletionTimestamp")]
    assert low, "low's pod is still in its grace period"
    sb.advance(25)  # low is gone
    [top] = await sb.until(lambda: running(sb, "top"), "top runs once low is gone")
    assert top["spec"]["nodeName"] == "gpu-0" and rejected(await sb.all_pods()) == []
    assert [e.split("-")[0] for e in evictions(sb)] == ["low"], "only low's pod was evicted"
    [mid] = await running(sb, "mid")
    assert mid["metadata"]["uid"] == started["metadata"]["uid"], "mid runs on, started once"


async def _async_value(value):
    return value


async def test_a_victim_whose_binds_are_on_their_way_is_preempted_once_they_land(sb: UsherOnSandbox) -> None:
    """mid's bind is slow to be answered (a busy API server) when top arrives and preempts it:
    the bind cannot be called back, so usher decides again once mid is seen bound, and evicts it
    then, rather than binding top beside a pod about to land on the same GPUs."""
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.start_usher(sb.tmp, PREEMPTING)
    await priority_class(sb, "mid", 100)
    await priority_class(sb, "top", 200)
    slow = sb.server.inject(FaultKind.DELAY, path="*/binding", delay=2.0, times=1)
    await sb.create(JOBS, job("mid", 8, priority_class="mid"))

    async def mid_binding() -> bool | None:
        return slow.fired == 1 or None

    await sb.until(mid_binding, "mid's bind is sent")
    sb.advance(10)  # (a job admitted at this very moment is never a victim)
    await sb.create(JOBS, job("top", 8, priority_class="top"))
    await sb.until(lambda: running(sb, "mid"), "mid's bind lands")
    assert rejected(await sb.all_pods()) == [], "top was bound beside mid's bind on its way"
    sb.advance(10)
    [top] = await sb.until(lambda: running(sb, "top"), "top runs once mid was evicted", deadline=30)
    await ticks(sb, 2)
    pods = await sb.all_pods()
    assert rejected(pods) == [] and await failed_jobs(sb, "mid", "top") == []
    [evicted] = evictions(sb)
    assert evicted.startswith("mid-") and top["spec"]["nodeName"] == "gpu-0"


async def test_a_pod_whose_class_says_preemption_policy_never_evicts_nobody_but_goes_first(sb: UsherOnSandbox) -> None:
    """Kubernetes' non-preempting PriorityClass: its pods wait for room rather than take it, and
    go ahead of lower priorities when room frees."""
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.start_usher(sb.tmp, PREEMPTING)
    await sb.create(JOBS, job("low", 8))
    await sb.until(lambda: running(sb, "low"), "low runs")
    sb.advance(60)
    await priority_class(sb, "polite", 1000, preemption_policy="Never")
    await sb.create(JOBS, job("polite", 8, priority_class="polite"))
    [pod] = await sb.until(lambda: sb.pods("job-name=polite"), "polite's pod exists")
    assert pod["spec"]["preemptionPolicy"] == "Never", "set by admission from its PriorityClass"
    await ticks(sb, 3)
    assert evictions(sb) == [] and not (await sb.pods("job-name=polite"))[0]["spec"].get("nodeName")
    # room frees: polite goes before another low-priority job that came before it
    await sb.create(JOBS, job("later-low", 8))
    await ticks(sb, 1)
    await sb.req("DELETE", f"{JOBS}/low?propagationPolicy=Background")
    [started] = await sb.until(lambda: running(sb, "polite"), "polite runs once low is gone")
    assert started["spec"]["nodeName"] == "gpu-0" and not await running(sb, "later-low")


async def test_a_victim_that_cannot_be_evicted_costs_the_other_victims_nothing(sb: UsherOnSandbox) -> None:
    """A 2 x 8-GPU gang needs both nodes: low-a and low-b are its victims. low-b falls under two
    PodDisruptionBudgets, which the Eviction API answers with 500 every time (an admission
    webhook on pods/eviction that denies is alike): the preemption cannot finish, so low-a must
    not be evicted for it, once or every minute after, and low-b's Events must say why."""
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.create("/api/v1/nodes", node("gpu-1"))
    await sb.start_usher(sb.tmp, PREEMPTING)
    await sb.create(JOBS, job("low-a", 8))
    await sb.until(lambda: running(sb, "low-a"), "low-a runs")
    await sb.create(JOBS, job("low-b", 8, labels={"app": "b", "tier": "x"}))
    [low_b] = await sb.until(lambda: running(sb, "low-b"), "low-b runs")
    for name, selector in (("by-app", {"app": "b"}), ("by-tier", {"tier": "x"})):
        await sb.create("/apis/policy/v1/namespaces/default/poddisruptionbudgets", {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector}}})
    sb.advance(60)
    await priority_class(sb, "urgent", 100)
    await sb.create(JOBS, job("urgent", 8, priority_class="urgent", pods=2))
    for _ in range(6):  # three minutes
        await ticks(sb, 2)
        sb.advance(30)
    assert evictions(sb) == [], "a victim was evicted for a preemption that could not finish"
    said = [e["message"] for e in await sb.events_of(low_b["metadata"]["name"]) if e["reason"] == "EvictionBlocked"]
    assert said and "more than one PodDisruptionBudget" in said[0], said
    # and the waiting pods say what the cluster shows, not what the called-off preemption assumed
    for pod in await sb.pods("job-name=urgent"):
        [why] = [c["message"] for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
        assert "0 GPUs are free" in why, why


async def elastic_job_under_budget(sb: UsherOnSandbox, workers: int, max_unavailable: int) -> None:
    """An elastic PyTorchJob (a master and ``workers`` workers, at least one) running whole on
    as many 8-GPU nodes, under a PodDisruptionBudget; and a PriorityClass ``urgent``."""
    await eight_gpu_nodes(sb, workers + 1)
    await sb.start_usher(sb.tmp, QUEUES)
    replica = {"restartPolicy": "OnFailure", "template": gpu_template(8)}
    await sb.create("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs", {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "ft"},
        "spec": {"elasticPolicy": {"minReplicas": 1, "maxReplicas": workers},
                 "pytorchReplicaSpecs": {"Master": {**replica, "replicas": 1}, "Worker": {**replica, "replicas": workers}}},
    })
    await running_whole(sb, "training.kubeflow.org/job-name=ft", workers + 1)
    await sb.create("/apis/policy/v1/namespaces/default/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "ft"},
        "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": {"training.kubeflow.org/job-name": "ft"}}}})
    await priority_class(sb, "urgent", 1000)


async def test_an_elastic_job_whose_budget_refuses_to_shrink_keeps_its_gpus(sb: UsherOnSandbox) -> None:
    """An elastic PyTorchJob grown to 3 pods, under a PodDisruptionBudget that allows no
    disruption; an urgent pod waits: the pod the job grew by cannot be taken back, so the urgent
    pod must not be bound onto its GPUs (the kubelet would refuse it: a bare pod lost for good)."""
    await elastic_job_under_budget(sb, workers=2, max_unavailable=0)
    urgent = gpu_template(8, labels={"app": "urgent"})
    urgent["spec"]["priorityClassName"] = "urgent"
    await create_pod(sb, "urgent", urgent)
    await ticks(sb, 3)
    assert rejected(await sb.all_pods()) == []
    assert not (await sb.get(f"{PODS}/urgent"))["spec"].get("nodeName") and evictions(sb) == []
    said = [e["message"] for e in await sb.events_of("ft-worker-1") if e["reason"] == "EvictionBlocked"]
    assert said and "gives back a pod beyond its minimum" in said[0], said


async def test_an_elastic_job_is_not_shrunk_by_more_pods_than_its_budget_lets_go_together(sb: UsherOnSandbox) -> None:
    """Two pods to take back, under a budget that allows one disruption: each passes a dry run
    alone, but together the second would be refused after the first lost its work."""
    await elastic_job_under_budget(sb, workers=3, max_unavailable=1)
    for i in range(2):
        urgent = gpu_template(8, labels={"app": "urgent", "usher/gang": "urgent", "usher/gang-size": "2"})
        urgent["spec"]["priorityClassName"] = "urgent"
        await create_pod(sb, f"urgent-{i}", urgent)
    await ticks(sb, 3)
    assert evictions(sb) == [] and rejected(await sb.all_pods()) == []

"""The sandbox's controller stand-ins (kubelet, taint manager, default scheduler, Job, DaemonSet,
Deployment/ReplicaSet) against the documented behaviour of a real cluster, over HTTP.

Time is the store's ManualClock; tests move it and step the controllers. Everything else is
polled with generous deadlines (no timing thresholds).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml
from sandboxes import Sandbox, node, pod

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def sb():
    s = Sandbox()
    await s.start()
    yield s
    await s.stop()


def phase(p: dict) -> str:
    return p.get("status", {}).get("phase", "")


def cond(p: dict, type_: str) -> dict | None:
    return next((c for c in p.get("status", {}).get("conditions") or [] if c["type"] == type_), None)


# ---------------------------------------------------------------- kubelet


async def test_running_pod_has_ready_container_statuses_and_conditions(sb):
    await sb.create("/api/v1/nodes", node("n1"))
    await sb.create("/api/v1/namespaces/default/pods", pod("web", node_name="n1"))
    p = await sb.pod_where("web", lambda p: phase(p) == "Running")
    st = p["status"]
    assert st["podIP"] and st["hostIP"] and st["startTime"]
    [cs] = st["containerStatuses"]
    assert cs["name"] == "main" and cs["ready"] is True and cs["started"] is True and cs["restartCount"] == 0
    assert cs["state"]["running"]["startedAt"] and cs["image"] == "busybox:1.36"
    assert cs["imageID"] and cs["containerID"].startswith("containerd://")
    for t in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "PodScheduled"):
        assert cond(p, t)["status"] == "True", t
    # kubectl's READY column: 1/1
    table = (await sb.http.get("/api/v1/namespaces/default/pods/web",
                               headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})).json()
    columns = [c["name"] for c in table["columnDefinitions"]]
    assert table["rows"][0]["cells"][columns.index("Ready")] == "1/1"


async def test_admission_rejects_a_pod_bound_onto_a_full_node(sb):
    await sb.create("/api/v1/nodes", node("n1", gpus=8))
    await sb.create("/api/v1/namespaces/default/pods", pod("first", 8, scheduler="usher"))
    await sb.create("/api/v1/namespaces/default/pods", pod("second", 8, scheduler="usher"))
    for name in ("first", "second"):
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"kind": "Node", "name": "n1"}}
        await sb.create(f"/api/v1/namespaces/default/pods/{name}/binding", binding)
        if name == "first":
            await sb.pod_where("first", lambda p: phase(p) == "Running")
    p = await sb.pod_where("second", lambda p: phase(p) == "Failed")
    assert p["status"]["reason"] == "OutOfnvidia.com/gpu"
    assert p["status"]["message"] == (
        "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 8, used: 8, capacity: 8"
    )
    assert phase(await sb.get("/api/v1/namespaces/default/pods/first")) == "Running"


async def test_pod_runs_for_its_duration_then_succeeds_or_fails_with_its_exit_code(sb):
    await sb.create("/api/v1/nodes", node("n1"))
    await sb.create("/api/v1/namespaces/default/pods", pod("ok", node_name="n1", annotations={"usher/duration": "600s"}))
    await sb.create("/api/v1/namespaces/default/pods", pod("bad", node_name="n1", annotations={
        "usher/duration": "60s", "sandbox.usher/exit-code": "3"}))
    await sb.pod_where("ok", lambda p: phase(p) == "Running")
    await sb.pod_where("bad", lambda p: phase(p) == "Running")
    sb.advance(60)
    p = await sb.pod_where("bad", lambda p: phase(p) == "Failed")
    assert p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    assert phase(await sb.get("/api/v1/namespaces/default/pods/ok")) == "Running"
    sb.advance(540)
    p = await sb.pod_where("ok", lambda p: phase(p) == "Succeeded")
    term = p["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 0 and term["reason"] == "Completed"
    assert cond(p, "Ready")["status"] == "False" and cond(p, "Ready")["reason"] == "PodCompleted"


async def test_pods_on_a_node_not_ready_are_not_started(sb):
    await sb.create("/api/v1/nodes", node("down", ready=False))
    await sb.create("/api/v1/namespaces/default/pods", pod("waits", node_name="down"))
    await asyncio.sleep(0.2)
    sb.server.controllers.step()
    assert phase(await sb.get("/api/v1/namespaces/default/pods/waits")) == "Pending"


async def test_graceful_deletion_at_once_on_sigterm_and_after_the_grace_period_when_ignored(sb):
    await sb.create("/api/v1/nodes", node("n1"))
    await sb.create("/api/v1/namespaces/default/pods", pod("polite", node_name="n1"))
    await sb.create("/api/v1/namespaces/default/pods", pod("stubborn", node_name="n1", terminationGracePeriodSeconds=30,
                                                           annotations={"sandbox.usher/ignore-sigterm": "true"}))
    for name in ("polite", "stubborn"):
        await sb.pod_where(name, lambda p: phase(p) == "Running")
    await sb.req("DELETE", "/api/v1/namespaces/default/pods/polite")
    await sb.until(lambda: _gone(sb, "polite"), "polite deleted")
    await sb.req("DELETE", "/api/v1/namespaces/default/pods/stubborn")
    p = await sb.pod_where("stubborn", lambda p: p["metadata"].get("deletionTimestamp"))
    assert p["metadata"]["deletionGracePeriodSeconds"] == 30
    sb.advance(10)
    await asyncio.sleep(0.2)
    assert await sb.get("/api/v1/namespaces/default/pods/stubborn") is not None  # still in its grace period
    sb.advance(20)
    await sb.until(lambda: _gone(sb, "stubborn"), "stubborn killed at the end of its grace period")


async def _gone(sb: Sandbox, name: str) -> bool:
    return await sb.get(f"/api/v1/namespaces/default/pods/{name}") is None


async def test_noexecute_taint_evicts_an_intolerant_pod_and_not_a_tolerant_one(sb):
    await sb.create("/api/v1/nodes", node("n1"))
    await sb.create("/api/v1/namespaces/default/pods", pod("intolerant", node_name="n1",
                                                           annotations={"sandbox.usher/ignore-sigterm": "true"}))
    tolerant = pod("tolerant", node_name="n1", tolerations=[{"key": "maint", "operator": "Exists", "effect": "NoExecute"}])
    await sb.create("/api/v1/namespaces/default/pods", tolerant)
    brief = pod("brief", node_name="n1", tolerations=[{"key": "maint", "operator": "Exists", "effect": "NoExecute",
                                                      "tolerationSeconds": 100}])
    await sb.create("/api/v1/namespaces/default/pods", brief)
    for name in ("intolerant", "tolerant", "brief"):
        await sb.pod_where(name, lambda p: phase(p) == "Running")
    await sb.req("PATCH", "/api/v1/nodes/n1", {"spec": {"taints": [{"key": "maint", "value": "now", "effect": "NoExecute"}]}})
    # kept in its grace period (it ignores SIGTERM) so its DisruptionTarget can be read
    p = await sb.pod_where("intolerant", lambda p: p["metadata"].get("deletionTimestamp"))
    dt = cond(p, "DisruptionTarget")
    assert dt["status"] == "True" and dt["reason"] == "DeletionByTaintManager"
    sb.advance(99)
    await asyncio.sleep(0.2)
    assert not (await sb.get("/api/v1/namespaces/default/pods/brief"))["metadata"].get("deletionTimestamp")
    sb.advance(1)
    await sb.until(lambda: _gone(sb, "brief"), "brief evicted after tolerationSeconds")
    assert await sb.get("/api/v1/namespaces/default/pods/tolerant") is not None
    assert phase(await sb.get("/api/v1/namespaces/default/pods/tolerant")) == "Running"


# ---------------------------------------------------------------- default scheduler


async def test_default_scheduler_binds_respects_selector_and_taints_and_reports_unschedulable(sb):
    await sb.create("/api/v1/nodes", node("a", gpus=0, labels={"pool": "cpu"}))
    await sb.create("/api/v1/nodes", node("b", labels={"pool": "gpu"}, taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]))
    await sb.create("/api/v1/nodes", node("c", gpus=2, labels={"pool": "gpu"}))
    await sb.create("/api/v1/namespaces/default/pods", pod("any"))
    p = await sb.pod_where("any", lambda p: p["spec"].get("nodeName"))
    assert cond(p, "PodScheduled")["status"] == "True"
    await sb.create("/api/v1/namespaces/default/pods", pod("selected", nodeSelector={"pool": "gpu"}))
    p = await sb.pod_where("selected", lambda p: p["spec"].get("nodeName"))
    assert p["spec"]["nodeName"] == "c"  # b is tainted
    await sb.create("/api/v1/namespaces/default/pods", pod("tolerating", nodeSelector={"pool": "gpu"}, gpus=8,
                                                           tolerations=[{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]))
    p = await sb.pod_where("tolerating", lambda p: p["spec"].get("nodeName"))
    assert p["spec"]["nodeName"] == "b"
    await sb.pod_where("tolerating", lambda p: phase(p) == "Running")
    await sb.create("/api/v1/namespaces/default/pods", pod("too-big", gpus=8))
    p = await sb.pod_where("too-big", lambda p: (cond(p, "PodScheduled") or {}).get("reason") == "Unschedulable")
    assert not p["spec"].get("nodeName")
    assert cond(p, "PodScheduled")["status"] == "False"
    assert cond(p, "PodScheduled")["message"] == (
        "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: ml}, 2 Insufficient nvidia.com/gpu. "
        "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    )
    # retried when the cluster changes: a node with room comes
    await sb.create("/api/v1/nodes", node("d"))
    p = await sb.pod_where("too-big", lambda p: p["spec"].get("nodeName"))
    assert p["spec"]["nodeName"] == "d"


async def test_default_scheduler_required_node_affinity(sb):
    await sb.create("/api/v1/nodes", node("small", gpus=2, labels={"gen": "3"}))
    await sb.create("/api/v1/nodes", node("large", gpus=8, labels={"gen": "5"}))
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]}]}]}}}
    await sb.create("/api/v1/namespaces/default/pods", pod("new-gen", affinity=affinity))
    p = await sb.pod_where("new-gen", lambda p: p["spec"].get("nodeName"))
    assert p["spec"]["nodeName"] == "large"
    pinned = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["small"]}]}]}}}
    await sb.create("/api/v1/namespaces/default/pods", pod("pinned", affinity=pinned))
    p = await sb.pod_where("pinned", lambda p: p["spec"].get("nodeName"))
    assert p["spec"]["nodeName"] == "small"


# ---------------------------------------------------------------- Job


def job(name: str, parallelism: int = 4, completions: int | None = 4, indexed: bool = False, duration: str | None = "100s",
        backoff: int = 6, policy: dict | None = None, exit_code: int | None = None) -> dict:
    annotations = {}
    if duration:
        annotations["usher/duration"] = duration
    if exit_code is not None:
        annotations["sandbox.usher/exit-code"] = str(exit_code)
    spec: dict[str, Any] = {
        "parallelism": parallelism, "backoffLimit": backoff,
        "template": {"metadata": {"annotations": annotations, "labels": {"app": name}},
                     "spec": {"restartPolicy": "Never", "containers": [{"name": "w", "image": "busybox:1.36"}]}},
    }
    if completions is not None:
        spec["completions"] = completions
    if indexed:
        spec["completionMode"] = "Indexed"
    if policy:
        spec["podFailurePolicy"] = policy
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


async def _job(sb: Sandbox, name: str) -> dict:
    return await sb.get(f"/apis/batch/v1/namespaces/default/jobs/{name}")


async def _job_cond(sb: Sandbox, name: str, type_: str) -> dict | None:
    j = await _job(sb, name)
    c = cond(j, type_)
    return c if c and c["status"] == "True" else None


async def test_indexed_job_runs_4_pods_recreates_an_evicted_one_and_completes(sb):
    for n in ("n1", "n2"):
        await sb.create("/api/v1/nodes", node(n))
    policy = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    created = await sb.create("/apis/batch/v1/namespaces/default/jobs", job("train", indexed=True, backoff=0, policy=policy))
    uid = created["metadata"]["uid"]

    async def running():
        pods = await sb.pods("job-name=train")
        return pods if len(pods) == 4 and all(phase(p) == "Running" for p in pods) else None

    pods = await sb.until(running, "4 running pods")
    indexes = sorted(int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]) for p in pods)
    assert indexes == [0, 1, 2, 3]
    for p in pods:
        i = p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
        assert p["metadata"]["name"].startswith(f"train-{i}-")
        assert p["spec"]["hostname"] == f"train-{i}"
        labels = p["metadata"]["labels"]
        assert labels["batch.kubernetes.io/job-name"] == labels["job-name"] == "train"
        assert labels["batch.kubernetes.io/controller-uid"] == labels["controller-uid"] == uid
        [ref] = p["metadata"]["ownerReferences"]
        assert ref["kind"] == "Job" and ref["controller"] is True and ref["uid"] == uid
    j = await sb.until(lambda: _job_ready(sb, "train", 4), "status.ready 4")
    assert j["status"]["active"] == 4 and j["status"]["startTime"]
    # evict index 2: DisruptionTarget + the Ignore rule: a new pod for index 2, no failure counted
    victim = next(p for p in pods if p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "2")
    name = victim["metadata"]["name"]
    await sb.create(f"/api/v1/namespaces/default/pods/{name}/eviction",
                    {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}})

    async def replaced():
        pods = await sb.pods("job-name=train")
        twos = [p for p in pods if p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "2"]
        return twos if len(twos) == 1 and twos[0]["metadata"]["name"] != name and phase(twos[0]) == "Running" else None

    await sb.until(replaced, "index 2 recreated")
    assert (await _job(sb, "train"))["status"]["failed"] == 0
    assert not await _job_cond(sb, "train", "Failed")
    sb.advance(100)
    c = await sb.until(lambda: _job_cond(sb, "train", "Complete"), "Complete")
    j = await _job(sb, "train")
    assert j["status"]["succeeded"] == 4 and j["status"]["completedIndexes"] == "0-3"
    assert j["status"]["completionTime"] and j["status"]["active"] == 0 and c["status"] == "True"


async def _job_ready(sb: Sandbox, name: str, n: int) -> dict | None:
    j = await _job(sb, name)
    return j if j and j.get("status", {}).get("ready") == n else None


async def test_job_with_parallelism_4_creates_4_pods_and_completes(sb):
    await sb.create("/api/v1/nodes", node("n1"))
    await sb.create("/apis/batch/v1/namespaces/default/jobs", job("batch", parallelism=4, completions=4))

    async def four():
        pods = await sb.pods("job-name=batch")
        return len(pods) == 4 and all(phase(p) == "Running" for p in pods)

    await sb.until(four, "4 pods running")
    sb.advance(100)
    await sb.until(lambda: _job_cond(sb, "batch", "Complete"), "Complete")
    assert (await _job(sb, "batch"))["status"]["succeeded"] == 4


async def test_backoff_limit_fails_the_job(sb):
    await sb.create("/api/v1/nodes", node("n1"))
    await sb.create("/apis/batch/v1/namespaces/default/jobs",
                    job("flaky", parallelism=1, completions=1, backoff=1, duration="10s", exit_code=1))
    for _ in range(2):
        async def running():
            pods = await sb.pods("job-name=flaky")
            return any(phase(p) == "Running" for p in pods)
        await sb.until(running, "a running pod")
        sb.advance(10)
    c = await sb.until(lambda: _job_cond(sb, "flaky", "Failed"), "Failed")
    assert c["reason"] == "BackoffLimitExceeded"
    j = await _job(sb, "flaky")
    assert j["status"]["failed"] == 2 and j["status"]["active"] == 0
    assert len(await sb.pods("job-name=flaky")) == 2


async def test_pod_failure_policy_fail_job_on_exit_code(sb):
    await sb.create("/api/v1/nodes", node("n1"))
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}
    await sb.create("/apis/batch/v1/namespaces/default/jobs",
                    job("fatal", parallelism=1, completions=1, duration="5s", exit_code=42, policy=policy))
    await sb.until(lambda: _any_running(sb, "job-name=fatal"), "running")
    sb.advance(5)
    c = await sb.until(lambda: _job_cond(sb, "fatal", "Failed"), "Failed")
    assert c["reason"] == "PodFailurePolicy"


async def _any_running(sb: Sandbox, selector: str) -> bool:
    return any(phase(p) == "Running" for p in await sb.pods(selector))


# ---------------------------------------------------------------- DaemonSet


def _agent_daemonset() -> dict:
    docs = list(yaml.safe_load_all((ROOT / "deploy/70-agent.yaml").read_text()))
    return next(d for d in docs if d and d["kind"] == "DaemonSet")


async def test_daemonset_puts_one_pod_per_matching_node_with_affinity_and_tolerations(sb):
    await sb.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "usher-system"}})
    gpu = {"nvidia.com/gpu.present": "true"}
    await sb.create("/api/v1/nodes", node("g1", labels=gpu))
    await sb.create("/api/v1/nodes", node("g2", labels=gpu, taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]))
    await sb.create("/api/v1/nodes", node("cpu-only", gpus=0))
    await sb.create("/apis/apps/v1/namespaces/usher-system/daemonsets", _agent_daemonset())

    async def placed(n: int):
        pods = await sb.pods("app.kubernetes.io/component=agent", ns="usher-system")
        return pods if len(pods) == n and all(phase(p) == "Running" for p in pods) else None

    pods = await sb.until(lambda: placed(2), "2 agent pods running")
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["g1", "g2"]
    for p in pods:
        terms = p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [p["spec"]["nodeName"]]}]}]
        keys = {(t["key"], t["effect"]) for t in p["spec"]["tolerations"]}
        assert {("node.kubernetes.io/not-ready", "NoExecute"), ("node.kubernetes.io/unreachable", "NoExecute"),
                ("node.kubernetes.io/disk-pressure", "NoSchedule"), ("node.kubernetes.io/memory-pressure", "NoSchedule"),
                ("node.kubernetes.io/pid-pressure", "NoSchedule"), ("node.kubernetes.io/unschedulable", "NoSchedule"),
                ("nvidia.com/gpu", "NoSchedule")} <= keys
        assert p["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"

    async def status(n: int):
        ds = await sb.get("/apis/apps/v1/namespaces/usher-system/daemonsets/usher-agent")
        st = ds.get("status", {})
        return st if st.get("desiredNumberScheduled") == n and st.get("numberReady") == n else None

    st = await sb.until(lambda: status(2), "status 2/2")
    assert st["currentNumberScheduled"] == 2 and st["numberMisscheduled"] == 0
    await sb.create("/api/v1/nodes", node("g3", labels=gpu))
    pods = await sb.until(lambda: placed(3), "a pod on the new node")
    assert "g3" in {p["spec"]["nodeName"] for p in pods}
    await sb.until(lambda: status(3), "status 3/3")


# ---------------------------------------------------------------- Deployment


async def test_deployment_gets_its_replicas_running(sb):
    await sb.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "usher-system"}})
    for n in ("n1", "n2", "n3"):
        await sb.create("/api/v1/nodes", node(n))
    deployment = yaml.safe_load((ROOT / "deploy/40-deployment.yaml").read_text())
    await sb.create("/apis/apps/v1/namespaces/usher-system/deployments", deployment)

    async def available():
        d = await sb.get("/apis/apps/v1/namespaces/usher-system/deployments/usher-controller")
        st = d.get("status", {})
        return d if st.get("availableReplicas") == 2 and st.get("readyReplicas") == 2 else None

    d = await sb.until(available, "2 available replicas")
    assert cond(d, "Available")["status"] == "True"
    pods = await sb.pods("app.kubernetes.io/name=usher,app.kubernetes.io/component=controller", ns="usher-system")
    assert len(pods) == 2 and all(phase(p) == "Running" for p in pods)
    assert len({p["spec"]["nodeName"] for p in pods}) == 2  # the required anti-affinity on the hostname
    [rs] = (await sb.get("/apis/apps/v1/namespaces/usher-system/replicasets"))["items"]
    assert rs["status"]["readyReplicas"] == 2 and rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    # scale down to 1
    await sb.req("PATCH", "/apis/apps/v1/namespaces/usher-system/deployments/usher-controller", {"spec": {"replicas": 1}})

    async def one():
        pods = await sb.pods("app.kubernetes.io/component=controller", ns="usher-system")
        return len([p for p in pods if not p["metadata"].get("deletionTimestamp")]) == 1

    await sb.until(one, "scaled to 1")


# ---------------------------------------------------------------- the example gang Job under usher

GANG_CLUSTER = """
name: gang-example
topology: {levels: [usher/rack, kubernetes.io/hostname]}
nodeGroups:
  - prefix: n
    count: 4
    layout: {usher/rack: 4}
    template: {gpus: 8, gpuModel: H100, cpu: 96, memory: 1Ti}
queues:
  - {name: research-vision, namespaceSelector: {}, quota: {gpu: 32}}
jobs: []
"""


async def test_example_gang_job_runs_to_completion_under_usher(tmp_path):
    from harness import Cluster, scenario_of

    c = Cluster(scenario_of(GANG_CLUSTER), tmp_path)
    await c.start(controllers=True)
    try:
        await c.controller()
        http = c.world.http
        await http.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "research"}})
        docs = [d for d in yaml.safe_load_all((ROOT / "deploy/examples/gang-job.yaml").read_text()) if d]
        for doc in docs:
            if doc["kind"] == "Job":
                doc["spec"]["template"]["metadata"]["annotations"]["usher/duration"] = "1h"
                path = "/apis/batch/v1/namespaces/research/jobs"
            else:
                path = "/api/v1/namespaces/research/services"
            r = await http.post(path, json=doc)
            assert r.status_code == 201, r.text
        loop = asyncio.get_running_loop()
        end = loop.time() + 30
        while True:
            pods = (await http.get("/api/v1/namespaces/research/pods", params={"labelSelector": "usher/gang=llm-pretrain"})).json()["items"]
            if len(pods) == 4 and all(phase(p) == "Running" for p in pods):
                break
            assert loop.time() < end, [(p["metadata"]["name"], p["spec"].get("nodeName"), phase(p)) for p in pods]
            await asyncio.sleep(0.05)
        assert len({p["spec"]["nodeName"] for p in pods}) == 4
        c.clock.t += 3600
        c.server.controllers.step()
        while True:
            j = (await http.get("/apis/batch/v1/namespaces/research/jobs/llm-pretrain")).json()
            if (cond(j, "Complete") or {}).get("status") == "True":
                break
            assert loop.time() < end + 30, j.get("status")
            await asyncio.sleep(0.05)
        assert j["status"]["succeeded"] == 4 and j["status"]["completedIndexes"] == "0-3"
    finally:
        await c.stop()


async def test_replay_through_the_api_still_matches_with_the_controllers_on(tmp_path):
    """The scenario's pods stay the World's; the generic kubelet and scheduler leave them be."""
    from harness import Cluster, per_job, replay_starts, scenario_of
    from test_equivalence import GANGS_AND_BACKFILL

    c = Cluster(scenario_of(GANGS_AND_BACKFILL), tmp_path)
    await c.start(controllers=True)
    try:
        await c.controller()
        await c.play()
        direct = per_job(replay_starts(c.scenario))
        assert per_job(c.starts()) == direct
        assert not c.server.controllers.errors
    finally:
        await c.stop()

"""The workloads people already run are gangs without relabelling (issue 12): each kind through
the sandbox over HTTP, its pods made by the sandbox's stand-in of its controller (with the real
labels and owner references), usher running as a controller beside it.

Each test: the gang is admitted whole or not at all, its minimum is honoured, and a member that
is lost brings the whole gang back to its queue.
"""

from __future__ import annotations

from typing import Any

from sandboxes import UsherOnSandbox, node, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)

QUEUES = """
queues:
  - {name: research, quota: {gpu: 64}, namespaces: [default]}
"""
PODS = "/api/v1/pods"


def gpu_template(gpus: int, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod template for usher, with no usher/gang label: the owner says how big the gang is."""
    return {
        "metadata": {"labels": labels or {}, "annotations": annotations or {}},
        "spec": {
            "schedulerName": "usher",
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "trainer:1",
                            "resources": {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
    }


async def pods_of(sb: UsherOnSandbox, selector: str) -> list[dict]:
    return (await sb.req("GET", f"{PODS}?labelSelector={selector}"))["items"]


def bound(pods: list[dict]) -> list[dict]:
    return [p for p in pods if p["spec"].get("nodeName")]


def condition(p: dict) -> dict | None:
    return next((c for c in p.get("status", {}).get("conditions") or [] if c["type"] == "PodScheduled"), None)


async def waiting_whole(sb: UsherOnSandbox, selector: str, count: int, reason: str) -> list[dict]:
    """Wait until ``count`` pods exist, none bound, each saying ``reason`` (the gang's verdict)."""

    async def check() -> list[dict] | None:
        pods = await pods_of(sb, selector)
        if len(pods) != count or bound(pods):
            return None
        conds = [condition(p) for p in pods]
        return pods if all(c and c["status"] == "False" and c["message"].startswith(reason) for c in conds) else None

    return await sb.until(check, f"{count} pods of {selector} wait whole with {reason}")


async def running_whole(sb: UsherOnSandbox, selector: str, count: int) -> list[dict]:
    async def check() -> list[dict] | None:
        pods = [p for p in await pods_of(sb, selector) if p.get("status", {}).get("phase") == "Running"]
        return pods if len(pods) == count else None

    return await sb.until(check, f"{count} pods of {selector} run", deadline=30.0)


async def test_a_batch_job_is_a_gang_of_its_parallelism(sb):
    for name in ("gpu-1", "gpu-2"):
        await sb.create("/api/v1/nodes", node(name))
    usher = await sb.start_usher(sb.tmp, QUEUES)
    await sb.create("/apis/batch/v1/namespaces/default/jobs", {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "annotations": {"usher/estimate": "2h"}},
        "spec": {"parallelism": 3, "completions": 3, "backoffLimit": 0, "template": gpu_template(8)},
    })
    # three 8-GPU pods on two 8-GPU nodes: not two now and one later (a half-started job), none
    pods = await waiting_whole(sb, "job-name=train", 3, "InsufficientCapacity")
    assert "3 pods" in condition(pods[0])["message"] or "Needs 3" in condition(pods[0])["message"]
    job = next(j for j in usher.state.jobs if j.name == "Job default/train")
    assert job.total_pods == 3 and job.estimate == 7200.0  # the Job's annotation is the gang's
    await sb.create("/api/v1/nodes", node("gpu-3"))
    await running_whole(sb, "job-name=train", 3)


async def eight_gpu_nodes(sb: UsherOnSandbox, n: int, first: int = 1) -> None:
    for i in range(first, first + n):
        await sb.create("/api/v1/nodes", node(f"gpu-{i}"))


async def test_a_jobset_is_one_gang_of_all_its_jobs_pods(sb):
    # modelled on JobSet v1alpha2's documented example: replicatedJobs with replicas x parallelism
    await eight_gpu_nodes(sb, 4)
    await sb.start_usher(sb.tmp, QUEUES)
    job = {"parallelism": 2, "completions": 2, "backoffLimit": 0, "template": gpu_template(8)}
    await sb.create("/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets", {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "jax"},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 3, "template": {"spec": job}}]},
    })
    # 3 Jobs x 2 pods x 8 GPUs = 48 GPUs on 32: the six pods wait together
    await waiting_whole(sb, "jobset.sigs.k8s.io/jobset-name=jax", 6, "InsufficientCapacity")
    await eight_gpu_nodes(sb, 2, first=5)
    pods = await running_whole(sb, "jobset.sigs.k8s.io/jobset-name=jax", 6)
    assert len({p["metadata"]["labels"]["job-name"] for p in pods}) == 3


async def test_a_pytorchjob_is_one_gang_and_an_elastic_one_starts_at_its_minimum_and_grows(sb):
    # modelled on the Kubeflow Training Operator's kubeflow.org/v1 PyTorchJob (elasticPolicy)
    await eight_gpu_nodes(sb, 3)
    usher = await sb.start_usher(sb.tmp, QUEUES)
    replica = {"restartPolicy": "OnFailure", "template": gpu_template(8)}
    await sb.create("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs", {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "ft"},
        "spec": {
            "elasticPolicy": {"minReplicas": 2, "maxReplicas": 4, "rdzvBackend": "c10d"},
            "pytorchReplicaSpecs": {"Master": {**replica, "replicas": 1}, "Worker": {**replica, "replicas": 4}},
        },
    })
    # 5 pods of 8 GPUs on 3 nodes: the whole job does not fit, its minimum (master + 2 workers) does
    pods = await running_whole(sb, "training.kubeflow.org/job-name=ft", 3)
    roles = sorted(p["metadata"]["labels"]["training.kubeflow.org/replica-type"] for p in pods)
    assert roles == ["master", "worker", "worker"]
    job = next(j for j in usher.state.jobs if j.name == "PyTorchJob default/ft")
    assert (job.total_pods, job.min_count) == (5, 3)

    async def rest_say_why() -> bool:
        waiting = [p for p in await pods_of(sb, "training.kubeflow.org/job-name=ft") if not p["spec"].get("nodeName")]
        return len(waiting) == 2 and all("runs with 3 of its 5 pods (its minimum is 3)" in (condition(p) or {}).get("message", "") for p in waiting)

    await sb.until(rest_say_why, "the two workers beyond the minimum say why they wait")
    # room for the rest: the running gang grows to its full size, without a restart
    await eight_gpu_nodes(sb, 2, first=4)
    grown = await running_whole(sb, "training.kubeflow.org/job-name=ft", 5)
    assert {p["metadata"]["uid"] for p in pods} <= {p["metadata"]["uid"] for p in grown}
    assert len(running_job(usher, "PyTorchJob default/ft").current_run.placements) == 5
    # a worker beyond the minimum is lost: the gang runs on with 4 (not stopped whole), and the
    # operator's new pod joins it again
    extra = next(p for p in grown if p["metadata"]["uid"] not in {q["metadata"]["uid"] for q in pods})
    await sb.req("DELETE", f"/api/v1/namespaces/default/pods/{extra['metadata']['name']}")
    again = await sb.until(lambda: _recreated_and_running(sb, extra), "the recreated worker joins the gang")
    assert {p["metadata"]["uid"] for p in pods} <= {p["metadata"]["uid"] for p in again}
    current = running_job(usher, "PyTorchJob default/ft")
    assert len(current.runs) == 1 and len(current.current_run.placements) == 5
    assert [e.action for e in usher.state.audit if e.target == current.name][-2:] == ["shrink", "grow"]


def running_job(usher, name: str):
    """The engine's running job of that name (a rebuild, for a new node, makes a new object)."""
    return next(j for j in usher.state.jobs if j.name == name and j.current_run is not None)


async def test_a_job_of_higher_priority_takes_an_elastic_gangs_extra_pods_before_any_whole_gang(sb):
    await eight_gpu_nodes(sb, 3)
    usher = await sb.start_usher(sb.tmp, QUEUES)
    replica = {"restartPolicy": "OnFailure", "template": gpu_template(8)}
    await sb.create("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs", {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "ft"},
        "spec": {"elasticPolicy": {"minReplicas": 1, "maxReplicas": 2},
                 "pytorchReplicaSpecs": {"Master": {**replica, "replicas": 1}, "Worker": {**replica, "replicas": 2}}},
    })
    first = await running_whole(sb, "training.kubeflow.org/job-name=ft", 3)  # grown to its size
    await sb.create("/apis/scheduling.k8s.io/v1/priorityclasses", {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "urgent"}, "value": 1000})
    urgent = gpu_template(8, labels={"app": "urgent"})
    urgent["spec"]["priorityClassName"] = "urgent"
    await create_pod(sb, "urgent", urgent)
    # one worker beyond the minimum makes room; the gang runs on with 2 of its 3 pods
    await running_whole(sb, "app=urgent", 1)
    ft = [p for p in await pods_of(sb, "training.kubeflow.org/job-name=ft") if p.get("status", {}).get("phase") == "Running"]
    assert len(ft) == 2 and {p["metadata"]["uid"] for p in ft} <= {p["metadata"]["uid"] for p in first}
    current = running_job(usher, "PyTorchJob default/ft")
    assert len(current.runs) == 1 and current.min_count == 2


async def _recreated_and_running(sb: UsherOnSandbox, lost: dict) -> list[dict] | None:
    pods = [p for p in await pods_of(sb, "training.kubeflow.org/job-name=ft") if p.get("status", {}).get("phase") == "Running"]
    fresh = [p for p in pods if p["metadata"]["name"] == lost["metadata"]["name"] and p["metadata"]["uid"] != lost["metadata"]["uid"]]
    return pods if len(pods) == 5 and fresh else None


async def test_a_raycluster_is_head_and_workers_and_a_lost_worker_restarts_the_whole_gang(sb):
    # modelled on KubeRay's ray.io/v1 RayCluster samples (headGroupSpec + workerGroupSpecs)
    await eight_gpu_nodes(sb, 3)
    usher = await sb.start_usher(sb.tmp, QUEUES)
    await sb.create("/apis/ray.io/v1/namespaces/default/rayclusters", {
        "apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "sweep"},
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": gpu_template(0)},
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "minReplicas": 2, "maxReplicas": 2,
                                  "rayStartParams": {}, "template": gpu_template(8)}],
        },
    })
    first = await running_whole(sb, "ray.io/cluster=sweep", 3)
    assert any(j.name == "RayCluster default/sweep" and j.total_pods == 3 for j in usher.state.jobs)
    worker = next(p for p in first if p["metadata"]["labels"]["ray.io/node-type"] == "worker")
    await sb.req("DELETE", f"/api/v1/namespaces/default/pods/{worker['metadata']['name']}")
    # usher stops the rest (a gang is whole or stopped); KubeRay recreates them; they start together
    head = next(p for p in first if p["metadata"]["labels"]["ray.io/node-type"] == "head")["metadata"]["name"]
    await sb.until(lambda: _gone(sb, head), "the head of the broken gang is evicted")

    async def all_new() -> list[dict] | None:
        pods = await running_whole(sb, "ray.io/cluster=sweep", 3)
        old = {p["metadata"]["uid"] for p in first}
        return pods if not old & {p["metadata"]["uid"] for p in pods} else None

    await sb.until(all_new, "a whole new RayCluster gang runs", deadline=30.0)


async def _gone(sb: UsherOnSandbox, name: str) -> bool:
    return await sb.get(f"/api/v1/namespaces/default/pods/{name}") is None


async def test_a_leaderworkerset_is_one_gang_per_group(sb):
    # modelled on LeaderWorkerSet leaderworkerset.x-k8s.io/v1 (leader StatefulSet, a worker
    # StatefulSet per leader pod)
    await eight_gpu_nodes(sb, 3)
    usher = await sb.start_usher(sb.tmp, QUEUES)
    await sb.create("/apis/leaderworkerset.x-k8s.io/v1/namespaces/default/leaderworkersets", {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "serve"},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2, "leaderTemplate": gpu_template(8), "workerTemplate": gpu_template(8)}},
    })
    # two groups of 2 x 8 GPUs on 3 nodes: one group runs whole, the other waits whole
    pods = await running_whole(sb, "leaderworkerset.sigs.k8s.io/name=serve", 2)
    assert len({p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"] for p in pods}) == 1
    names = sorted(j.name for j in usher.state.jobs if j.name.startswith("LeaderWorkerSet"))
    assert names == ["LeaderWorkerSet default/serve/0", "LeaderWorkerSet default/serve/1"]
    await eight_gpu_nodes(sb, 1, first=4)
    await running_whole(sb, "leaderworkerset.sigs.k8s.io/name=serve", 4)


async def test_a_leaderworkerset_that_makes_its_workers_once_its_leader_is_ready_starts(sb):
    """``startupPolicy: LeaderReady``: the operator makes the workers only once the leader runs,
    so the gang's minimum is the leader alone; the workers join it when they come."""
    await eight_gpu_nodes(sb, 3)
    await sb.start_usher(sb.tmp, QUEUES)
    await sb.create("/apis/leaderworkerset.x-k8s.io/v1/namespaces/default/leaderworkersets", {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "serve"},
        "spec": {"replicas": 1, "startupPolicy": "LeaderReady",
                 "leaderWorkerTemplate": {"size": 3, "leaderTemplate": gpu_template(8), "workerTemplate": gpu_template(8)}},
    })
    pods = await running_whole(sb, "leaderworkerset.sigs.k8s.io/name=serve", 3)
    assert len({p["spec"]["nodeName"] for p in pods}) == 3


async def test_an_mpijob_whose_launcher_comes_once_its_workers_are_ready_starts(sb):
    """``launcherCreationPolicy: WaitForWorkersReady``: the workers start first (the gang's
    minimum), and the launcher joins them once the operator makes it."""
    await eight_gpu_nodes(sb, 3)
    await sb.start_usher(sb.tmp, QUEUES)
    await sb.create("/apis/kubeflow.org/v1/namespaces/default/mpijobs", {
        "apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "metadata": {"name": "hvd"},
        "spec": {"launcherCreationPolicy": "WaitForWorkersReady", "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": gpu_template(0)},
            "Worker": {"replicas": 2, "template": gpu_template(8)}}},
    })
    pods = await running_whole(sb, "training.kubeflow.org/job-name=hvd", 3)
    assert sorted(p["metadata"]["labels"]["training.kubeflow.org/replica-type"] for p in pods) == ["launcher", "worker", "worker"]


async def test_kueue_and_volcano_pod_groups_are_gangs(sb):
    await eight_gpu_nodes(sb, 2)
    await sb.start_usher(sb.tmp, QUEUES)
    await sb.create("/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups", {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "vc"}, "spec": {"minMember": 3},
    })
    for i in range(3):  # Volcano: the annotation names the PodGroup, whose minMember is the gang
        await create_pod(sb, f"vc-{i}", gpu_template(8, labels={"app": "vc"}, annotations={"scheduling.k8s.io/group-name": "vc"}))
    await waiting_whole(sb, "app=vc", 3, "InsufficientCapacity")
    for i in range(2):  # Kueue's plain pod groups: a label names the group, an annotation its size
        await create_pod(sb, f"kq-{i}", gpu_template(4, labels={"kueue.x-k8s.io/pod-group-name": "kq", "app": "kq"},
                                                     annotations={"kueue.x-k8s.io/pod-group-total-count": "2"}))
    await running_whole(sb, "app=kq", 2)


async def create_pod(sb: UsherOnSandbox, name: str, template: dict[str, Any]) -> None:
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **template["metadata"]}, "spec": template["spec"]}
    await sb.create("/api/v1/namespaces/default/pods", body)


async def test_the_console_shows_a_workload_by_its_owner_with_its_pods(sb, tmp_path, monkeypatch):
    from harness import wait_for
    from usher.console.app import UsherApp
    from usher.console.table import RowTable
    from usher.engine.backends.kube.client import KubeClient
    from usher.engine.backends.kube.controller import KubeController

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    await eight_gpu_nodes(sb, 1)
    await sb.start_usher(sb.tmp, QUEUES)
    await sb.create("/apis/ray.io/v1/namespaces/default/rayclusters", {
        "apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "sweep"},
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": gpu_template(0)},
                 "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "rayStartParams": {}, "template": gpu_template(8)}]},
    })
    await waiting_whole(sb, "ray.io/cluster=sweep", 3, "InsufficientCapacity")
    client = await KubeClient.connect(str(sb.kubeconfig))
    console = KubeController(client, identity="console", clock=sb.clock.now, schedule=False)
    app = UsherApp(console, speed=None)
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            await pilot.press("3")
            table = app.query_one("#job-table", RowTable)
            await wait_for(lambda: any(r.key == "RayCluster default/sweep" for r in table.rows), pilot)
            details = str(app.job_details("RayCluster default/sweep"))
            assert "Pods" in details and details.count("default/sweep-") == 3 and "Pending" in details
    finally:
        await client.aclose()

"""A pod's gang from its labels or its top owner (``owners.infer_group``): no I/O, a dict lookup.

Objects are shaped as each project documents them (the version is in each test's comment) and
pods as the operator builds them: its labels and a ``controller: true`` ownerReference.
"""

from __future__ import annotations

from typing import Any

import pytest
from usher.engine.backends.kube import owners
from usher.engine.backends.kube.objects import pod_view
from usher.engine.backends.kube.owners import (
    JOB,
    JOB_SET,
    LEADER_WORKER_SET,
    MPI_JOB,
    OWNER_RESOURCES,
    POD_GROUP,
    PYTORCH_JOB,
    RAY_CLUSTER,
    RAY_JOB,
    TF_JOB,
    TRAIN_JOB,
    VOLCANO_POD_GROUP,
    GroupSpec,
    Kind,
    OwnerResource,
    infer_group,
)

NS = "research"


class Cache:
    """The lead's owner caches: (resource key, namespace, name) -> object; records every read."""

    def __init__(self, *objs: tuple[OwnerResource, dict[str, Any]]) -> None:
        self.objs = {(r.key, o["metadata"].get("namespace", NS), o["metadata"]["name"]): o for r, o in objs}
        self.reads: list[tuple[str, str, str]] = []

    def __call__(self, key: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads.append((key, namespace, name))
        return self.objs.get((key, namespace, name))


def nothing(key: str, namespace: str, name: str) -> dict[str, Any] | None:
    raise AssertionError(f"no owner should be read, yet {key} {namespace}/{name} was")


def obj(
    api_version: str,
    kind: str,
    name: str,
    spec: dict[str, Any],
    owner: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{kind}-{name}"}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    if annotations:
        meta["annotations"] = annotations
    if labels:
        meta["labels"] = labels
    out = {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec}
    if status is not None:
        out["status"] = status
    return out


def ref(owner: dict[str, Any]) -> dict[str, Any]:
    """The ownerReference a controller writes on what it creates (``metav1.NewControllerRef``)."""
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod(
    name: str,
    owner: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-pod-{name}", "labels": dict(labels or {})}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"schedulerName": "usher", "containers": [{"name": "main", "image": "busybox"}]},
        "status": {"phase": "Pending"},
    }


def job_pod(job: dict[str, Any], index: int = 0, **labels: str) -> dict[str, Any]:
    """A pod as the Job controller makes it (labels of Kubernetes 1.27+)."""
    name = job["metadata"]["name"]
    uid = job["metadata"]["uid"]
    return pod(
        f"{name}-{index}-x7k2p",
        ref(job),
        {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
            "batch.kubernetes.io/job-completion-index": str(index),
            **labels,
        },
    )


def spec_of(resource: OwnerResource, name: str) -> tuple[str, str, str]:
    return (resource.key, NS, name)


# -- the resources ---------------------------------------------------------------------------


def test_owner_resources_are_the_documented_versions_each_at_its_own_path():
    paths = [r.path for r in OWNER_RESOURCES]
    assert len(set(paths)) == len(paths)
    by_key = {(r.group, r.version, r.plural): r.kind for r in OWNER_RESOURCES}
    assert by_key == {
        ("batch", "v1", "jobs"): "Job",
        ("jobset.x-k8s.io", "v1alpha2", "jobsets"): "JobSet",
        ("kubeflow.org", "v1", "pytorchjobs"): "PyTorchJob",
        ("kubeflow.org", "v1", "mpijobs"): "MPIJob",
        ("kubeflow.org", "v2beta1", "mpijobs"): "MPIJob",
        ("kubeflow.org", "v1", "tfjobs"): "TFJob",
        ("trainer.kubeflow.org", "v1alpha1", "trainjobs"): "TrainJob",
        ("ray.io", "v1", "rayclusters"): "RayCluster",
        ("ray.io", "v1", "rayjobs"): "RayJob",
        ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"): "LeaderWorkerSet",
        ("scheduling.volcano.sh", "v1beta1", "podgroups"): "PodGroup",
        ("scheduling.x-k8s.io", "v1alpha1", "podgroups"): "PodGroup",
        ("scheduling.k8s.io", "v1alpha1", "workloads"): "Workload",
        # 1.36 and 1.37's runtime PodGroups, keyed apart from the Volcano and coscheduling ones
        ("scheduling.k8s.io", "v1alpha2", "podgroups"): "SchedulingGroup",
        ("scheduling.k8s.io", "v1beta1", "podgroups"): "SchedulingGroup",
    }
    assert all(r.namespaced for r in OWNER_RESOURCES)
    assert JOB.path == "/apis/batch/v1/jobs" and JOB.key == "batch/Job" and JOB.api_version == "batch/v1"
    assert OwnerResource("", "v1", "pods", "Pod").path == "/api/v1/pods"
    # both MPIJob versions feed one cache; the two PodGroups do not share one
    assert owners.MPI_JOB_V2.key == MPI_JOB.key
    assert VOLCANO_POD_GROUP.key != POD_GROUP.key


def test_resource_key_of_an_owner_reference_ignores_the_version():
    assert owners.resource_key({"apiVersion": "ray.io/v1alpha1", "kind": "RayCluster"}) == RAY_CLUSTER.key
    assert owners.resource_key({"apiVersion": "v1", "kind": "Pod"}) == "Pod"


# -- batch Job -------------------------------------------------------------------------------


def test_a_job_with_parallelism_4_and_completions_2_is_a_gang_of_2():
    # Kubernetes docs, batch/v1 Job ("Parallel execution for Jobs"): parallelism and completions
    job = obj("batch/v1", "Job", "sweep", {"parallelism": 4, "completions": 2, "template": {}})
    spec = infer_group(job_pod(job), Cache((JOB, job)))
    assert spec == GroupSpec(
        key=f"{NS}/Job/sweep",
        kind=Kind.JOB,
        name="sweep",
        size=2,
        owner=spec_of(JOB, "sweep"),
        depends=(spec_of(JOB, "sweep"),),
        survives_eviction=True,  # 2 failures are within the default backoffLimit of 6
    )


DISRUPTION = {"type": "DisruptionTarget"}


@pytest.mark.parametrize(
    ("job_spec", "status", "survives"),
    [
        ({"parallelism": 2}, None, True),
        ({"parallelism": 2, "backoffLimit": 0}, None, False),  # the eviction's failures fail it
        ({"parallelism": 2, "backoffLimit": 2}, None, True),
        ({"parallelism": 2, "backoffLimit": 2}, {"failed": 1}, False),  # 3 failures > 2
        # Kubernetes docs' podFailurePolicy example: disruptions are not counted
        ({"parallelism": 2, "backoffLimit": 0, "podFailurePolicy": {"rules": [
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
            {"action": "Ignore", "onPodConditions": [DISRUPTION]}]}}, None, True),
        ({"parallelism": 2, "podFailurePolicy": {"rules": [{"action": "FailJob", "onPodConditions": [DISRUPTION]}]}}, None, False),
        # an exit-code rule that may match SIGTERM's 143 and fails the Job, before the Ignore
        ({"parallelism": 2, "backoffLimit": 0, "podFailurePolicy": {"rules": [
            {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}},
            {"action": "Ignore", "onPodConditions": [DISRUPTION]}]}}, None, False),
        # one that counts it first: the Ignore after it never applies
        ({"parallelism": 2, "backoffLimit": 0, "podFailurePolicy": {"rules": [
            {"action": "Count", "onExitCodes": {"operator": "In", "values": [143]}},
            {"action": "Ignore", "onPodConditions": [DISRUPTION]}]}}, None, False),
    ],
)
def test_whether_a_batch_job_makes_its_evicted_pods_anew_or_fails(job_spec, status, survives):
    """usher moves a Job's pods only when the Job would make them anew (consolidation), not when
    the eviction's failures would end it by its podFailurePolicy or backoffLimit."""
    job = obj("batch/v1", "Job", "train", {**job_spec, "template": {}}, status=status)
    spec = infer_group(job_pod(job), Cache((JOB, job)))
    assert spec.survives_eviction is survives
    assert pod_view(job_pod(job), spec).movable is survives
    assert pod_view(job_pod(job) | {"metadata": job_pod(job)["metadata"] | {"annotations": {"usher/movable": "true"}}}, spec).movable


@pytest.mark.parametrize(
    ("job_spec", "status", "size"),
    [
        ({}, None, 1),  # the "pi" example: one pod
        ({"parallelism": 4}, None, 4),  # a work queue: no completions, parallelism pods
        ({"parallelism": 4, "completions": 8, "completionMode": "Indexed"}, None, 4),
        ({"parallelism": 4, "completions": 8}, {"succeeded": 6}, 2),  # the last wave
        ({"parallelism": 4, "completions": 8}, {"succeeded": 8}, 1),
    ],
)
def test_a_job_runs_parallelism_pods_capped_by_the_completions_left(job_spec, status, size):
    job = obj("batch/v1", "Job", "train", {**job_spec, "template": {}}, status=status)
    assert infer_group(job_pod(job), Cache((JOB, job))).size == size


def test_a_job_parallelism_0_or_a_malformed_field_is_named():
    job = obj("batch/v1", "Job", "idle", {"parallelism": 0, "template": {}})
    spec = infer_group(job_pod(job), Cache((JOB, job)))
    assert spec.size is None and not spec.waiting
    assert spec.problem == f"Job {NS}/idle has spec.parallelism 0: it runs no pods"
    job = obj("batch/v1", "Job", "odd", {"parallelism": "four", "template": {}})
    assert infer_group(job_pod(job), Cache((JOB, job))).problem == f"Job {NS}/odd has spec.parallelism 'four', not a whole number"


def test_a_job_not_cached_yet_waits_naming_it():
    job = obj("batch/v1", "Job", "train", {"parallelism": 2})
    spec = infer_group(job_pod(job), Cache())
    assert spec.problem == f"the owner Job {NS}/train is not known yet"
    assert spec.waiting and spec.size is None
    assert spec.key == f"{NS}/Job/train" and spec.owner == spec_of(JOB, "train")
    assert spec.depends == (spec_of(JOB, "train"),)


def test_a_pod_of_a_deleted_job_recreated_under_its_name_waits():
    old = obj("batch/v1", "Job", "train", {"parallelism": 2})
    new = obj("batch/v1", "Job", "train", {"parallelism": 2})
    new["metadata"]["uid"] = "uid-of-the-new-job"
    spec = infer_group(job_pod(old), Cache((JOB, new)))
    assert spec.waiting and spec.size is None and "uid" in (spec.problem or "")
    assert infer_group(job_pod(new), Cache((JOB, new))).size == 2


def test_a_cronjob_run_is_a_gang_of_its_job():
    # batch/v1 CronJob: usher does not read CronJobs, so the Job is the top owner it knows
    cron = obj("batch/v1", "CronJob", "nightly", {"schedule": "0 2 * * *"})
    job = obj("batch/v1", "Job", "nightly-29000000", {"parallelism": 3, "completions": 3}, owner=ref(cron))
    spec = infer_group(job_pod(job), Cache((JOB, job)))
    assert (spec.key, spec.kind, spec.size) == (f"{NS}/Job/nightly-29000000", Kind.JOB, 3)


def test_the_jobs_usher_annotations_come_back_for_the_gang():
    job = obj(
        "batch/v1",
        "Job",
        "train",
        {"parallelism": 2},
        annotations={
            "usher/estimate": "2h",
            "usher/topology-required": "usher/rack",
            "usher/gpus": "0,1",  # usher's per-pod bind record: never taken from an owner
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
        },
    )
    spec = infer_group(job_pod(job), Cache((JOB, job)))
    assert spec.annotations == {"usher/estimate": "2h", "usher/topology-required": "usher/rack"}


# -- JobSet ----------------------------------------------------------------------------------


def jobset(name: str, replicated: list[dict[str, Any]], owner: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return obj("jobset.x-k8s.io/v1alpha2", "JobSet", name, {"replicatedJobs": replicated, **spec}, owner=owner)


def rjob(name: str, replicas: int | None = None, parallelism: int | None = None, completions: int | None = None, **extra: Any) -> dict[str, Any]:
    job_spec: dict[str, Any] = {"template": {"spec": {"containers": [{"name": name, "image": "bash"}]}}}
    if parallelism is not None:
        job_spec["parallelism"] = parallelism
    if completions is not None:
        job_spec["completions"] = completions
    out: dict[str, Any] = {"name": name, "template": {"spec": job_spec}, **extra}
    if replicas is not None:
        out["replicas"] = replicas
    return out


def jobset_job(js: dict[str, Any], replicated: str, index: int, parallelism: int = 1) -> dict[str, Any]:
    """A child Job as the JobSet controller makes it (``<jobset>-<replicatedJob>-<index>``)."""
    name = js["metadata"]["name"]
    labels = {
        "jobset.sigs.k8s.io/jobset-name": name,
        "jobset.sigs.k8s.io/replicatedjob-name": replicated,
        "jobset.sigs.k8s.io/job-index": str(index),
    }
    return obj(
        "batch/v1", "Job", f"{name}-{replicated}-{index}", {"parallelism": parallelism, "completions": parallelism}, owner=ref(js), labels=labels
    )


def test_a_jobset_is_one_gang_of_all_its_replicated_jobs_pods():
    # JobSet docs, v1alpha2 "failure policy" example: leader 1 x 2 pods, workers 1 x 2 pods;
    # here with 3 worker replicas and a replicated job left to the defaults (1 x 1)
    js = jobset(
        "failjobset-action-example",
        [rjob("leader", 1, 2, 2), rjob("workers", 3, 2, 2), rjob("driver")],
    )
    js["metadata"]["annotations"] = {"usher/preemptible": "false"}
    job = jobset_job(js, "workers", 1, 2)
    job["metadata"]["annotations"] = {"usher/estimate": "9h"}  # a Job's own: not the gang's
    spec = infer_group(job_pod(job), Cache((JOB, job), (JOB_SET, js)))
    assert (spec.key, spec.kind, spec.name, spec.size, spec.minimum) == (
        f"{NS}/JobSet/failjobset-action-example",
        Kind.JOB_SET,
        "failjobset-action-example",
        1 * 2 + 3 * 2 + 1,
        None,
    )
    assert spec.owner == spec_of(JOB_SET, "failjobset-action-example")
    assert spec.annotations == {"usher/preemptible": "false"}
    assert spec.depends == (spec_of(JOB, job["metadata"]["name"]), spec.owner)
    # every Job of the set lands in the same gang
    other = jobset_job(js, "leader", 0, 2)
    assert infer_group(job_pod(other), Cache((JOB, other), (JOB_SET, js))).key == spec.key


def test_a_jobset_template_with_completions_below_parallelism_counts_the_completions():
    js = jobset("capped", [rjob("w", 2, parallelism=4, completions=1)])
    job = jobset_job(js, "w", 0)
    assert infer_group(job_pod(job), Cache((JOB, job), (JOB_SET, js))).size == 2


def test_a_jobset_that_starts_its_jobs_in_order_makes_a_gang_per_replicated_job():
    # JobSet v1alpha2: startupPolicy InOrder creates a replicated job's Jobs once the previous
    # one's pods are ready; dependsOn likewise waits for another replicated job
    for extra, deps in (({"startupPolicy": {"startupPolicyOrder": "InOrder"}}, {}), ({}, {"dependsOn": [{"name": "driver", "status": "Ready"}]})):
        js = jobset("staged", [rjob("driver", 1, 1, 1), rjob("workers", 2, 4, 4, **deps)], **extra)
        job = jobset_job(js, "workers", 1, 4)
        spec = infer_group(job_pod(job), Cache((JOB, job), (JOB_SET, js)))
        assert (spec.key, spec.size) == (f"{NS}/JobSet/staged/workers", 8)
        driver = jobset_job(js, "driver", 0)
        assert infer_group(job_pod(driver), Cache((JOB, driver), (JOB_SET, js))).key == f"{NS}/JobSet/staged/driver"


def test_a_jobset_without_replicated_jobs_is_named():
    js = obj("jobset.x-k8s.io/v1alpha2", "JobSet", "empty", {})
    job = obj("batch/v1", "Job", "empty-w-0", {"parallelism": 1}, owner=ref(js))
    spec = infer_group(job_pod(job), Cache((JOB, job), (JOB_SET, js)))
    assert spec.problem == f"JobSet {NS}/empty has no spec.replicatedJobs"
    assert spec.key == f"{NS}/JobSet/empty" and not spec.waiting


def test_a_jobset_not_cached_yet_waits_under_its_own_key():
    js = jobset("later", [rjob("w", 2, 2, 2)])
    job = jobset_job(js, "w", 0, 2)
    spec = infer_group(job_pod(job), Cache((JOB, job)))
    assert spec.waiting and spec.problem == f"the owner JobSet {NS}/later is not known yet"
    assert spec.key == f"{NS}/JobSet/later" and spec.owner == spec_of(JOB_SET, "later")


def test_a_job_whose_jobset_kind_is_not_served_is_its_own_gang():
    js = jobset("nocrd", [rjob("w", 2, 2, 2)])
    job = jobset_job(js, "w", 0, 2)
    spec = infer_group(job_pod(job), Cache((JOB, job)), served={JOB.key})
    assert (spec.key, spec.size, spec.problem) == (f"{NS}/Job/nocrd-w-0", 2, None)


# -- Kubeflow Training Operator (kubeflow.org/v1) --------------------------------------------


def kubeflow_pod(owner: dict[str, Any], rtype: str, index: int, operator: str) -> dict[str, Any]:
    """A pod as the training operator makes it (labels of training-operator v1.7+)."""
    name = owner["metadata"]["name"]
    labels = {
        "training.kubeflow.org/job-name": name,
        "training.kubeflow.org/operator-name": operator,
        "training.kubeflow.org/replica-type": rtype.lower(),
        "training.kubeflow.org/replica-index": str(index),
    }
    if rtype in ("Master", "Launcher", "Chief"):
        labels["training.kubeflow.org/job-role"] = rtype.lower()
    return pod(f"{name}-{rtype.lower()}-{index}", ref(owner), labels)


def replica(count: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {"restartPolicy": "OnFailure", "template": {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}}}
    if count is not None:
        out["replicas"] = count
    return out


def test_a_pytorchjob_is_one_gang_of_master_and_workers():
    # Kubeflow docs, kubeflow.org/v1 PyTorchJob "pytorch-simple": Master 1, Worker 1; a Worker
    # count left out defaults to 1; annotations on the PyTorchJob are the gang's
    job = obj(
        "kubeflow.org/v1",
        "PyTorchJob",
        "llama-ft",
        {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(3)}},
        annotations={"usher/checkpoint-every": "30m", "usher/gpu-model": "H100"},
    )
    cache = Cache((PYTORCH_JOB, job))
    for p in (kubeflow_pod(job, "Master", 0, "pytorchjob-controller"), kubeflow_pod(job, "Worker", 2, "pytorchjob-controller")):
        spec = infer_group(p, cache)
        assert (spec.key, spec.kind, spec.name, spec.size, spec.minimum) == (f"{NS}/PyTorchJob/llama-ft", Kind.PYTORCH_JOB, "llama-ft", 4, None)
        assert spec.annotations == {"usher/checkpoint-every": "30m", "usher/gpu-model": "H100"}
        assert spec.owner == spec_of(PYTORCH_JOB, "llama-ft")
    job["spec"]["pytorchReplicaSpecs"]["Worker"] = replica(None)
    assert infer_group(kubeflow_pod(job, "Worker", 0, "pytorchjob-controller"), cache).size == 2


def test_an_elastic_pytorchjob_may_start_with_its_min_replicas_workers():
    # Kubeflow docs, elastic example "elastic-example-echo": Worker 2, elasticPolicy minReplicas
    # 1 maxReplicas 2. minReplicas bounds the Workers (the CRD's scale subresource is
    # pytorchReplicaSpecs.Worker.replicas), so a Master comes on top of it
    job = obj(
        "kubeflow.org/v1",
        "PyTorchJob",
        "elastic-example-echo",
        {"elasticPolicy": {"rdzvBackend": "c10d", "minReplicas": 1, "maxReplicas": 2, "maxRestarts": 100}, "pytorchReplicaSpecs": {"Worker": replica(2)}},
    )
    spec = infer_group(kubeflow_pod(job, "Worker", 0, "pytorchjob-controller"), Cache((PYTORCH_JOB, job)))
    assert (spec.size, spec.minimum) == (2, 1)
    job["spec"]["pytorchReplicaSpecs"] = {"Master": replica(1), "Worker": replica(4)}
    job["spec"]["elasticPolicy"]["minReplicas"] = 2
    spec = infer_group(kubeflow_pod(job, "Master", 0, "pytorchjob-controller"), Cache((PYTORCH_JOB, job)))
    assert (spec.size, spec.minimum) == (5, 3)
    # the training operator's own gang minimum wins
    job["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 4}}
    assert infer_group(kubeflow_pod(job, "Master", 0, "pytorchjob-controller"), Cache((PYTORCH_JOB, job))).minimum == 4


def test_a_pytorchjob_without_replica_specs_names_the_field():
    job = obj("kubeflow.org/v1", "PyTorchJob", "llama-ft", {"runPolicy": {}})
    spec = infer_group(kubeflow_pod(job, "Worker", 0, "pytorchjob-controller"), Cache((PYTORCH_JOB, job)))
    assert spec.problem == f"PyTorchJob {NS}/llama-ft has no spec.pytorchReplicaSpecs"
    assert spec.size is None and not spec.waiting and spec.key == f"{NS}/PyTorchJob/llama-ft"
    job["spec"]["pytorchReplicaSpecs"] = {"Worker": {"replicas": -1}}
    spec = infer_group(kubeflow_pod(job, "Worker", 0, "pytorchjob-controller"), Cache((PYTORCH_JOB, job)))
    assert spec.problem == f"PyTorchJob {NS}/llama-ft has spec.pytorchReplicaSpecs.Worker.replicas -1, not a whole number"


def test_an_mpijob_counts_its_launcher_and_workers():
    # Kubeflow docs, kubeflow.org/v1 MPIJob "tensorflow-benchmarks": Launcher 1, Worker 2
    job = obj("kubeflow.org/v1", "MPIJob", "tensorflow-benchmarks", {"slotsPerWorker": 1, "mpiReplicaSpecs": {"Launcher": replica(1), "Worker": replica(2)}})
    spec = infer_group(kubeflow_pod(job, "Launcher", 0, "mpijob-controller"), Cache((MPI_JOB, job)))
    assert (spec.key, spec.kind, spec.size, spec.minimum) == (f"{NS}/MPIJob/tensorflow-benchmarks", Kind.MPI_JOB, 3, None)


def test_an_mpi_operator_v2beta1_job_that_waits_for_its_workers_may_start_without_its_launcher():
    # MPI Operator docs, kubeflow.org/v2beta1 MPIJob "pi": Launcher 1, Worker 2; with
    # launcherCreationPolicy WaitForWorkersReady the launcher pod is created after the workers
    job = obj(
        "kubeflow.org/v2beta1",
        "MPIJob",
        "pi",
        {"slotsPerWorker": 1, "launcherCreationPolicy": "WaitForWorkersReady", "runPolicy": {"cleanPodPolicy": "Running"}, "mpiReplicaSpecs": {"Launcher": replica(1), "Worker": replica(2)}},
    )
    worker = pod(
        "pi-worker-0",
        ref(job),
        {"training.kubeflow.org/job-name": "pi", "training.kubeflow.org/job-role": "worker", "training.kubeflow.org/operator-name": "mpi-operator", "training.kubeflow.org/replica-index": "0"},
    )
    spec = infer_group(worker, Cache((owners.MPI_JOB_V2, job)))
    assert (spec.size, spec.minimum, spec.owner) == (3, 2, spec_of(MPI_JOB, "pi"))


def test_a_tfjob_sums_every_replica_type():
    # Kubeflow docs, kubeflow.org/v1 TFJob "dist-mnist-for-e2e-test": PS 2, Worker 4; plus a Chief
    job = obj("kubeflow.org/v1", "TFJob", "dist-mnist-for-e2e-test", {"tfReplicaSpecs": {"Chief": replica(None), "PS": replica(2), "Worker": replica(4)}})
    spec = infer_group(kubeflow_pod(job, "PS", 1, "tfjob-controller"), Cache((TF_JOB, job)))
    assert (spec.key, spec.kind, spec.size) == (f"{NS}/TFJob/dist-mnist-for-e2e-test", Kind.TF_JOB, 7)
    job["spec"] = {}
    assert infer_group(kubeflow_pod(job, "PS", 1, "tfjob-controller"), Cache((TF_JOB, job))).problem == f"TFJob {NS}/dist-mnist-for-e2e-test has no spec.tfReplicaSpecs"


# -- Kubeflow Trainer (trainer.kubeflow.org/v1alpha1) ----------------------------------------


def trainjob_chain(replicated: list[dict[str, Any]], annotations: dict[str, str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """A TrainJob (Kubeflow Trainer v2 docs: runtimeRef torch-distributed, trainer.numNodes 2)
    and the JobSet of the same name its controller makes from the runtime's template."""
    train = obj(
        "trainer.kubeflow.org/v1alpha1",
        "TrainJob",
        "pytorch-mnist",
        {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}},
        annotations=annotations,
    )
    js = jobset("pytorch-mnist", replicated, owner=ref(train))
    return train, js


def test_a_trainjob_is_the_gang_sized_by_the_jobset_it_owns():
    train, js = trainjob_chain([rjob("node", 1, 2, 2)], {"usher/estimate": "4h"})
    js["metadata"]["annotations"] = {"usher/estimate": "1h", "usher/hold": "true"}  # the TrainJob's win
    job = jobset_job(js, "node", 0, 2)
    spec = infer_group(job_pod(job), Cache((JOB, job), (JOB_SET, js), (TRAIN_JOB, train)))
    assert (spec.key, spec.kind, spec.name, spec.size) == (f"{NS}/TrainJob/pytorch-mnist", Kind.TRAIN_JOB, "pytorch-mnist", 2)
    assert spec.owner == spec_of(TRAIN_JOB, "pytorch-mnist")
    assert spec.annotations == {"usher/estimate": "4h", "usher/hold": "true"}
    assert spec.depends == (spec_of(JOB, "pytorch-mnist-node-0"), spec_of(JOB_SET, "pytorch-mnist"), spec.owner)


def test_a_trainjob_with_initializers_gangs_its_nodes_apart_from_them():
    # torchtune runtimes: dataset-initializer and model-initializer run before the nodes
    deps = [{"name": "dataset-initializer", "status": "Complete"}, {"name": "model-initializer", "status": "Complete"}]
    train, js = trainjob_chain([rjob("dataset-initializer", 1), rjob("model-initializer", 1), rjob("node", 1, 2, 2, dependsOn=deps)])
    cache = Cache((JOB_SET, js), (TRAIN_JOB, train))
    node = jobset_job(js, "node", 0, 2)
    init = jobset_job(js, "model-initializer", 0)
    cache.objs.update({spec_of(JOB, j["metadata"]["name"]): j for j in (node, init)})
    spec = infer_group(job_pod(node), cache)
    assert (spec.key, spec.size) == (f"{NS}/TrainJob/pytorch-mnist/node", 2)
    assert infer_group(job_pod(init), cache).key == f"{NS}/TrainJob/pytorch-mnist/model-initializer"


def test_a_trainjob_not_cached_yet_waits():
    _, js = trainjob_chain([rjob("node", 1, 2, 2)])
    job = jobset_job(js, "node", 0, 2)
    spec = infer_group(job_pod(job), Cache((JOB, job), (JOB_SET, js)))
    assert spec.waiting and spec.problem == f"the owner TrainJob {NS}/pytorch-mnist is not known yet"
    assert spec.key == f"{NS}/TrainJob/pytorch-mnist"


# -- KubeRay (ray.io/v1) ---------------------------------------------------------------------


def ray_pod(cluster: dict[str, Any], node_type: str, group: str, suffix: str) -> dict[str, Any]:
    """A pod as KubeRay makes it."""
    name = cluster["metadata"]["name"]
    labels = {"ray.io/cluster": name, "ray.io/node-type": node_type, "ray.io/group": group, "ray.io/is-ray-node": "yes"}
    return pod(f"{name}-{group}-{suffix}", ref(cluster), labels)


def worker_group(name: str, replicas: int | None, min_replicas: int | None = None, max_replicas: int | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"groupName": name, "rayStartParams": {}, "template": {"spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray"}]}}, **extra}
    for field_name, value in (("replicas", replicas), ("minReplicas", min_replicas), ("maxReplicas", max_replicas)):
        if value is not None:
            out[field_name] = value
    return out


def raycluster(name: str, groups: list[dict[str, Any]], owner: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    head = {"rayStartParams": {}, "template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray"}]}}}
    return obj("ray.io/v1", "RayCluster", name, {"headGroupSpec": head, "workerGroupSpecs": groups, **spec}, owner=owner)


def test_a_raycluster_is_its_head_and_every_worker_group():
    # KubeRay docs, ray.io/v1 "ray-cluster.sample.yaml": one group, replicas 1, minReplicas 1,
    # maxReplicas 5; plus a multi-host group (numOfHosts 2) and a suspended one
    cluster = raycluster(
        "raycluster-kuberay",
        [worker_group("workergroup", 1, 1, 5), worker_group("tpu", 2, 0, 4, numOfHosts=2), worker_group("idle", 3, suspend=True)],
    )
    head = ray_pod(cluster, "head", "headgroup", "x2b9c")
    spec = infer_group(head, Cache((RAY_CLUSTER, cluster)))
    assert (spec.key, spec.kind, spec.size, spec.minimum) == (f"{NS}/RayCluster/raycluster-kuberay", Kind.RAY_CLUSTER, 1 + 1 + 4, None)
    assert infer_group(ray_pod(cluster, "worker", "tpu", "0-abcde"), Cache((RAY_CLUSTER, cluster))).key == spec.key


def test_an_autoscaling_raycluster_may_start_with_its_min_replicas():
    # KubeRay docs, "ray-cluster.autoscaler.yaml": enableInTreeAutoscaling true, replicas 1,
    # minReplicas 1, maxReplicas 10; replicas are clamped to [minReplicas, maxReplicas]
    cluster = raycluster(
        "raycluster-autoscaler",
        [worker_group("small-group", 1, 1, 10), worker_group("big", 9, 2, 3, numOfHosts=2), worker_group("none", None, 0)],
        enableInTreeAutoscaling=True,
    )
    spec = infer_group(ray_pod(cluster, "worker", "small-group", "q8w2e"), Cache((RAY_CLUSTER, cluster)))
    assert (spec.size, spec.minimum) == (1 + 1 + 3 * 2 + 0, 1 + 1 + 2 * 2)


def test_a_rayjob_is_the_gang_sized_by_its_raycluster():
    # KubeRay docs, ray.io/v1 "ray-job.sample.yaml": the RayJob creates a RayCluster it controls
    rayjob = obj("ray.io/v1", "RayJob", "rayjob-sample", {"entrypoint": "python /home/ray/samples/sample_code.py"}, annotations={"usher/estimate": "20m"})
    cluster = raycluster("rayjob-sample-raycluster-v8nn5", [worker_group("small-group", 2, 1, 5)], owner=ref(rayjob))
    cluster["metadata"]["annotations"] = {"usher/estimate": "1h", "usher/preemptible": "false"}
    spec = infer_group(ray_pod(cluster, "worker", "small-group", "8sx9b"), Cache((RAY_CLUSTER, cluster), (RAY_JOB, rayjob)))
    assert (spec.key, spec.kind, spec.name, spec.size) == (f"{NS}/RayJob/rayjob-sample", Kind.RAY_JOB, "rayjob-sample", 3)
    assert spec.annotations == {"usher/estimate": "20m", "usher/preemptible": "false"}
    assert spec.owner == spec_of(RAY_JOB, "rayjob-sample")
    waiting = infer_group(ray_pod(cluster, "head", "headgroup", "z"), Cache((RAY_CLUSTER, cluster)))
    assert waiting.waiting and waiting.problem == f"the owner RayJob {NS}/rayjob-sample is not known yet"


def test_a_raycluster_with_a_malformed_group_names_the_field():
    cluster = raycluster("broken", [worker_group("g", 2, numOfHosts="two")])
    spec = infer_group(ray_pod(cluster, "head", "headgroup", "x"), Cache((RAY_CLUSTER, cluster)))
    assert spec.problem == f"RayCluster {NS}/broken has spec.workerGroupSpecs[0].numOfHosts 'two', not a whole number"


# -- LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) -------------------------------------------


def lws_pods(lws: dict[str, Any], group: int) -> list[dict[str, Any]]:
    """A group's pods as the LWS controller makes them: the leader ``<lws>-<group>`` owned by
    the leader StatefulSet ``<lws>`` (owned by the LWS), the workers ``<lws>-<group>-<i>`` owned
    by the StatefulSet ``<lws>-<group>`` (owned by the leader Pod)."""
    name = lws["metadata"]["name"]
    size = lws["spec"]["leaderWorkerTemplate"].get("size", 1)
    leader_sts = obj("apps/v1", "StatefulSet", name, {}, owner=ref(lws))
    common = {"leaderworkerset.sigs.k8s.io/name": name, "leaderworkerset.sigs.k8s.io/group-index": str(group), "leaderworkerset.sigs.k8s.io/group-key": "5c3b1e"}
    notes = {"leaderworkerset.sigs.k8s.io/size": str(size)}
    leader = pod(f"{name}-{group}", ref(leader_sts), {**common, "leaderworkerset.sigs.k8s.io/worker-index": "0"}, notes)
    worker_sts = obj("apps/v1", "StatefulSet", f"{name}-{group}", {}, owner=ref(leader))
    workers = [
        pod(f"{name}-{group}-{i}", ref(worker_sts), {**common, "leaderworkerset.sigs.k8s.io/worker-index": str(i)}, {**notes, "leaderworkerset.sigs.k8s.io/leader-name": leader["metadata"]["name"]})
        for i in range(1, size)
    ]
    return [leader, *workers]


def test_a_leaderworkerset_makes_one_gang_per_group_leader_included():
    # LWS docs, leaderworkerset.x-k8s.io/v1 example "vllm": replicas 2, leaderWorkerTemplate size 4
    lws = obj(
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        "vllm",
        {"replicas": 2, "leaderWorkerTemplate": {"size": 4, "restartPolicy": "RecreateGroupOnPodRestart", "leaderTemplate": {}, "workerTemplate": {}}, "startupPolicy": "LeaderCreated"},
        annotations={"usher/topology-required": "usher/rack"},
    )
    cache = Cache((LEADER_WORKER_SET, lws))
    for group in (0, 1):
        specs = [infer_group(p, cache) for p in lws_pods(lws, group)]
        assert len(specs) == 4
        assert {(s.key, s.kind, s.name, s.size, s.minimum) for s in specs} == {(f"{NS}/LeaderWorkerSet/vllm/{group}", Kind.LEADER_WORKER_SET, "vllm", 4, None)}
        assert all(s.annotations == {"usher/topology-required": "usher/rack"} for s in specs)
        assert all(s.owner == spec_of(LEADER_WORKER_SET, "vllm") for s in specs)
    # neither StatefulSet nor the leader Pod is read
    assert {r[0] for r in cache.reads} == {LEADER_WORKER_SET.key}


def test_a_leaderworkerset_that_waits_for_its_leader_may_start_with_it_alone():
    lws = obj("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "sglang", {"replicas": 1, "startupPolicy": "LeaderReady", "leaderWorkerTemplate": {"size": 2, "workerTemplate": {}}})
    leader, worker = lws_pods(lws, 0)
    for p in (leader, worker):
        spec = infer_group(p, Cache((LEADER_WORKER_SET, lws)))
        assert (spec.size, spec.minimum) == (2, 1)


def test_a_leaderworkerset_pod_without_its_group_index_or_cache_is_named():
    lws = obj("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "vllm", {"leaderWorkerTemplate": {"size": 2}})
    leader, _ = lws_pods(lws, 0)
    del leader["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"]
    spec = infer_group(leader, Cache((LEADER_WORKER_SET, lws)))
    assert spec.problem == f"the pod of LeaderWorkerSet {NS}/vllm has no label leaderworkerset.sigs.k8s.io/group-index (which group it is in)"
    _, worker = lws_pods(lws, 1)
    spec = infer_group(worker, Cache())
    assert spec.waiting and spec.key == f"{NS}/LeaderWorkerSet/vllm/1"
    assert spec.problem == f"the owner LeaderWorkerSet {NS}/vllm is not known yet"


# -- PodGroups and Kueue ---------------------------------------------------------------------


def test_a_volcano_pod_group_sizes_the_gang_by_its_min_member():
    # Volcano docs, scheduling.volcano.sh/v1beta1 PodGroup "test": minMember 1..; here 3
    pg = obj("scheduling.volcano.sh/v1beta1", "PodGroup", "test", {"minMember": 3, "queue": "default"})
    p = pod("vc-worker-0", annotations={"scheduling.k8s.io/group-name": "test"})
    spec = infer_group(p, Cache((VOLCANO_POD_GROUP, pg)))
    assert spec == GroupSpec(
        key=f"{NS}/PodGroup/test",
        kind=Kind.POD_GROUP,
        name="test",
        size=3,
        owner=spec_of(VOLCANO_POD_GROUP, "test"),
        depends=(spec_of(VOLCANO_POD_GROUP, "test"),),
    )
    waiting = infer_group(p, Cache())
    assert waiting.waiting and waiting.size is None
    assert waiting.problem == f"PodGroup {NS}/test is not known yet (its spec.minMember gives the gang's size)"


def test_a_coscheduling_pod_group_keeps_todays_key():
    # scheduler-plugins, scheduling.x-k8s.io/v1alpha1 PodGroup: minMember
    pg = obj("scheduling.x-k8s.io/v1alpha1", "PodGroup", "nginx", {"minMember": 2, "scheduleTimeoutSeconds": 10})
    p = pod("nginx-0", labels={"scheduling.x-k8s.io/pod-group": "nginx"})
    spec = infer_group(p, Cache((POD_GROUP, pg)))
    assert (spec.key, spec.kind, spec.size, spec.owner) == (f"{NS}/nginx", Kind.POD_GROUP, 2, spec_of(POD_GROUP, "nginx"))
    assert spec.key == pod_view(p).gang
    del pg["spec"]["minMember"]
    spec = infer_group(p, Cache((POD_GROUP, pg)))
    assert spec.problem == f"PodGroup {NS}/nginx has no spec.minMember" and not spec.waiting
    spec = infer_group(p, Cache(), served={JOB.key})
    assert spec.problem == f"the pod names PodGroup {NS}/nginx, but usher cannot read scheduling.x-k8s.io/v1alpha1 PodGroups"


def test_a_kueue_pod_group_is_sized_by_its_total_count():
    # Kueue docs, "Run a group of plain pods": label pod-group-name, annotation pod-group-total-count
    labels = {"kueue.x-k8s.io/queue-name": "user-queue", "kueue.x-k8s.io/pod-group-name": "sample-group"}
    p = pod("sample-leader", labels=labels, annotations={"kueue.x-k8s.io/pod-group-total-count": "3"})
    spec = infer_group(p, nothing)
    assert (spec.key, spec.kind, spec.name, spec.size, spec.problem) == (f"{NS}/KueuePodGroup/sample-group", Kind.KUEUE_POD_GROUP, "sample-group", 3, None)
    spec = infer_group(pod("sample-leader", labels=labels), nothing)
    assert spec.size is None and spec.problem == "label kueue.x-k8s.io/pod-group-name has no annotation kueue.x-k8s.io/pod-group-total-count beside it"


# -- usher's labels, singles ----------------------------------------------------------------


def test_usher_labels_win_over_the_owners_and_keep_todays_key():
    job = obj("batch/v1", "Job", "train", {"parallelism": 4})
    p = job_pod(job)
    p["metadata"]["labels"].update({"usher/gang": "mine", "usher/gang-size": "2", "scheduling.x-k8s.io/pod-group": "pg"})
    spec = infer_group(p, Cache())
    # the Job is not known yet: the labels' gang stands, and the pod is decided again when it is
    assert spec == GroupSpec(key=f"{NS}/mine", kind=Kind.GANG, name="mine", size=2, depends=(spec_of(JOB, "train"),))
    assert spec.key == pod_view(p).gang
    # the gang is the labels', but the Job that made the pod still says whether an eviction
    # would end it (it is read for that alone, and re-decides the pod when it changes)
    strict = obj("batch/v1", "Job", "train", {"parallelism": 4, "backoffLimit": 0})
    labelled = infer_group(p, Cache((JOB, strict)))
    assert (labelled.key, labelled.size, labelled.survives_eviction) == (f"{NS}/mine", 2, False)
    assert labelled.depends == (spec_of(JOB, "train"),)
    assert not pod_view(p, labelled).movable and not pod_view(p, labelled).comes_back
    p["metadata"]["labels"]["usher/gang-size"] = "two"
    assert infer_group(p, Cache()).problem == "label usher/gang-size: 'two' is not a positive whole number"


def test_an_usher_gang_without_a_size_takes_its_owners():
    job = obj("batch/v1", "Job", "train", {"parallelism": 4}, annotations={"usher/estimate": "1h"})
    p = job_pod(job)
    p["metadata"]["labels"]["usher/gang"] = "mine"
    spec = infer_group(p, Cache((JOB, job)))
    assert (spec.key, spec.kind, spec.name, spec.size, spec.owner) == (f"{NS}/mine", Kind.GANG, "mine", 4, spec_of(JOB, "train"))
    assert spec.annotations == {"usher/estimate": "1h"}
    waiting = infer_group(p, Cache())
    assert waiting.key == f"{NS}/mine" and waiting.waiting and waiting.problem == f"the owner Job {NS}/train is not known yet"
    alone = pod("solo", labels={"usher/gang": "mine"})
    spec = infer_group(alone, nothing)
    assert spec.size is None and not spec.waiting and "usher/gang-size" in (spec.problem or "")


def test_a_deployment_pod_stays_a_single_and_reads_nothing():
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-7d9f8", "uid": "rs-uid"}}
    p = pod("web-7d9f8-abcde", ref(rs), {"app": "web", "pod-template-hash": "7d9f8"})
    assert infer_group(p, nothing) == GroupSpec(key=f"{NS}/web-7d9f8-abcde", kind=Kind.POD, name="web-7d9f8-abcde", size=1)
    bare = pod("scratch")
    spec = infer_group(bare, nothing)
    assert (spec.key, spec.size, spec.kind) == (f"{NS}/scratch", 1, Kind.POD)
    assert spec.key == pod_view(bare).gang


@pytest.mark.parametrize("kind", ["StatefulSet", "DaemonSet"])
def test_statefulset_and_daemonset_pods_are_singles(kind):
    owner = {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "db", "uid": "u"}}
    spec = infer_group(pod("db-0", ref(owner), {"app": "db"}), nothing)
    assert (spec.key, spec.size) == (f"{NS}/db-0", 1)


def test_an_owner_reference_without_controller_is_not_followed():
    job = obj("batch/v1", "Job", "train", {"parallelism": 4})
    p = job_pod(job)
    p["metadata"]["ownerReferences"][0]["controller"] = False
    assert infer_group(p, nothing).key == f"{NS}/{p['metadata']['name']}"


def test_an_eviction_ends_a_job_of_a_jobset_or_an_index_past_its_own_limit():
    """What the review found unchecked: a JobSet's child Job, and an Indexed Job's per-index limit."""
    js = jobset("train", [rjob("workers", 1, 2, 2)])
    child = jobset_job(js, "workers", 0, 2)
    child["spec"]["backoffLimit"] = 0  # its failure fails the JobSet (no failurePolicy restarts)
    spec = infer_group(job_pod(child), Cache((JOB, child), (JOB_SET, js)))
    assert spec.key == f"{NS}/JobSet/train" and spec.survives_eviction is False
    assert spec_of(JOB, child["metadata"]["name"]) in spec.depends
    child["spec"]["backoffLimit"] = 6
    assert infer_group(job_pod(child), Cache((JOB, child), (JOB_SET, js))).survives_eviction is True
    indexed = obj("batch/v1", "Job", "idx", {"parallelism": 2, "completions": 4, "completionMode": "Indexed", "backoffLimitPerIndex": 1, "template": {}})
    fresh = job_pod(indexed)
    assert infer_group(fresh, Cache((JOB, indexed))).survives_eviction is True
    failed_once = job_pod(indexed)
    failed_once["metadata"]["annotations"] = {"batch.kubernetes.io/job-index-failure-count": "1"}
    assert infer_group(failed_once, Cache((JOB, indexed))).survives_eviction is False
    indexed["spec"]["backoffLimitPerIndex"] = 0
    assert infer_group(fresh, Cache((JOB, indexed))).survives_eviction is False

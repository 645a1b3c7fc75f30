"""When a kubelet refuses a pod usher bound, usher doubts its own view of that node.

The issue: usher counted a node's GPUs differently from its kubelet, bound a Job's pod there 7
times in 0.2 s, the kubelet refused it 7 times (``OutOfnvidia.com/gpu ... used: 2, capacity: 8``)
and the Job ended BackoffLimitExceeded. Here usher's mirror misses one pod of another scheduler
on gpu-1 (its watch event is lost), so usher sees 7 GPUs free where the kubelet sees 6. After the
kubelet's refusal usher must back off instead of binding the replacement pod there again at
once, read the node's pods again (and find the one it missed), say so in an Event on the Node and
in ``usher_bind_refusals_total``, and start the Job where it fits, with one failure, not six.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sandboxes import UsherOnSandbox, node, pod, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)

from usher.engine.backends.kube.controller import Source

PODS = "/api/v1/namespaces/default/pods"
JOBS = "/apis/batch/v1/namespaces/default/jobs"


def training_job(name: str, gpus: int, backoff_limit: int) -> dict[str, Any]:
    spec = {
        "schedulerName": "usher", "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "trainer:1",
                        "resources": {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}],
    }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": {
        "backoffLimit": backoff_limit, "template": {"metadata": {"labels": {"usher/queue": "research"}}, "spec": spec},
    }}


class LossyWatch(asyncio.Queue):
    """The controller's queue of watch deltas, losing every one of another scheduler's pod
    ``key`` (as a watch that missed its events): only a list finds that pod."""

    def __init__(self, key: str, before: asyncio.Queue) -> None:
        super().__init__()
        self.name = key.split("/")[1]
        self.lost = 0
        while not before.empty():
            super().put_nowait(before.get_nowait())

    def put_nowait(self, item: Any) -> None:
        source, _, obj = item
        if source == Source.ASSIGNED_PODS and obj.get("metadata", {}).get("name") == self.name:
            self.lost += 1
            return
        super().put_nowait(item)


async def _is(value: Any) -> Any:
    await asyncio.sleep(0)
    return value


def _scheduled(p: dict[str, Any]) -> tuple[str, str]:
    c = next((c for c in p["status"].get("conditions", []) if c["type"] == "PodScheduled"), {})
    return c.get("reason", ""), c.get("message", "")


async def test_a_kubelet_refusal_makes_usher_back_off_reread_the_node_and_say_so(sb: UsherOnSandbox) -> None:
    await sb.create("/api/v1/nodes", node("gpu-1"))
    await sb.create("/api/v1/nodes", node("gpu-2"))
    await sb.start_usher(sb.tmp)
    clock = [1000.0]
    sb.usher.monotonic = lambda: clock[0]  # usher's back-offs wait for this test, not for the wall clock
    watch = sb.usher.deltas = LossyWatch("default/exporter-b", sb.usher.deltas)
    for name in ("exporter-a", "exporter-b"):
        await sb.create(PODS, pod(name, 1, node_name="gpu-1"))
        await sb.pod_where(name, lambda p: p["status"].get("phase") == "Running")
    await sb.until(lambda: _is(watch.lost and "default/exporter-a" in sb.usher.mirror.holdings), "usher sees exporter-a only")
    assert "default/exporter-b" not in sb.usher.mirror.holdings

    await sb.create(JOBS, training_job("train", 7, backoff_limit=2))
    failed = (await sb.until(lambda: _failed(sb), "the kubelet refuses the first pod"))[0]
    assert failed["spec"]["nodeName"] == "gpu-1"
    assert failed["status"]["reason"] == "OutOfnvidia.com/gpu"
    assert "used: 2, capacity: 8" in failed["status"]["message"]
    name = failed["metadata"]["name"]

    # an Event on the Node: the pod, the kubelet's reason and message, usher's count beside the
    # kubelet's, and what reading the node's pods again found
    events = await sb.until(lambda: _node_events(sb, "gpu-1"), "an UsherBindRefused Event on gpu-1")
    (event,) = events
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "Node"
    message = event["message"]
    assert f"default/{name}" in message and "OutOfnvidia.com/gpu" in message and "used: 2, capacity: 8" in message
    assert "usher counted 1 nvidia.com/gpu in use besides this pod, the kubelet 2" in message
    assert "missed default/exporter-b," in message
    assert "default/exporter-b" in sb.usher.mirror.holdings  # taken in from the API server's list
    scrape = sb.usher.metrics.render().decode()
    assert 'usher_bind_refusals_total{reason="OutOfnvidia.com/gpu"} 1.0' in scrape

    # the replacement pod backs off: not bound at once, and it says why
    def replacement_waiting() -> Any:
        async def probe() -> Any:
            pods = [p for p in await sb.pods("job-name=train") if p["metadata"]["name"] != name]
            return pods if pods and _scheduled(pods[0])[0] == "BindRefused" else None
        return probe()

    (waiting,) = await sb.until(replacement_waiting, "the replacement pod waits, backing off")
    assert not waiting["spec"].get("nodeName")
    assert f"the kubelet on gpu-1 refused pod {name}: OutOfnvidia.com/gpu" in _scheduled(waiting)[1]

    clock[0] += 60  # the back-off is over: usher places it where it fits, as the kubelet counts
    started = await sb.pod_where(waiting["metadata"]["name"], lambda p: p["status"].get("phase") == "Running")
    assert started["spec"]["nodeName"] == "gpu-2"
    job = await sb.get(f"{JOBS}/train")
    assert job["status"].get("failed") == 1 and not any(c["type"] == "Failed" for c in job["status"].get("conditions", []))
    assert len(await _failed(sb)) == 1


async def _failed(sb: UsherOnSandbox) -> list[dict[str, Any]]:
    return [p for p in await sb.pods("job-name=train") if p["status"].get("phase") == "Failed"]


async def _node_events(sb: UsherOnSandbox, node_name: str) -> list[dict[str, Any]]:
    items = (await sb.req("GET", "/api/v1/events"))["items"]
    return [e for e in items if e["involvedObject"].get("kind") == "Node" and e["involvedObject"]["name"] == node_name
            and e["reason"] == "UsherBindRefused"]


class LossyNodeWatch(asyncio.Queue):
    """The controller's queue of watch deltas, losing every change of the node ``name``."""

    def __init__(self, name: str, before: asyncio.Queue) -> None:
        super().__init__()
        self.name = name
        self.lost = 0
        while not before.empty():
            super().put_nowait(before.get_nowait())

    def put_nowait(self, item: Any) -> None:
        source, _, obj = item
        if source == Source.NODES and obj.get("metadata", {}).get("name") == self.name:
            self.lost += 1
            return
        super().put_nowait(item)


def zoned(name: str, zone: str) -> dict[str, Any]:
    body = node(name)
    body["metadata"]["labels"]["topology.kubernetes.io/zone"] = zone
    return body


async def test_a_node_affinity_refusal_makes_usher_read_the_node_again(sb: UsherOnSandbox) -> None:
    """gpu-1 moves from zone a to zone c, but usher's watch loses the change: it binds a pod that
    asks for zone a to gpu-1, whose kubelet refuses it (NodeAffinity). usher reads gpu-1 again and
    learns its zone: the Job's next pod waits for a node in zone a, and runs on gpu-2 once that
    one joins the zone."""
    await sb.create("/api/v1/nodes", zoned("gpu-1", "a"))
    await sb.create("/api/v1/nodes", zoned("gpu-2", "b"))
    await sb.start_usher(sb.tmp)
    clock = [1000.0]
    sb.usher.monotonic = lambda: clock[0]
    watch = sb.usher.deltas = LossyNodeWatch("gpu-1", sb.usher.deltas)
    await sb.req("PATCH", "/api/v1/nodes/gpu-1", {"metadata": {"labels": {"topology.kubernetes.io/zone": "c"}}})
    await sb.until(lambda: _is(watch.lost), "usher's watch loses gpu-1's change")
    assert sb.usher.mirror.nodes["gpu-1"].labels["topology.kubernetes.io/zone"] == "a"

    body = training_job("train", 4, backoff_limit=1)
    body["spec"]["template"]["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": "a"}
    await sb.create(JOBS, body)
    failed = (await sb.until(lambda: _failed(sb), "the kubelet refuses the first pod"))[0]
    assert (failed["spec"]["nodeName"], failed["status"]["reason"]) == ("gpu-1", "NodeAffinity")
    (event,) = await sb.until(lambda: _node_events(sb, "gpu-1"), "an UsherBindRefused Event on gpu-1")
    assert "NodeAffinity" in event["message"] and "usher found the node fit for the pod" in event["message"]
    assert "the node's own labels, taints or allocatable" in event["message"]
    assert 'usher_bind_refusals_total{reason="NodeAffinity"} 1.0' in sb.usher.metrics.render().decode()
    await sb.until(lambda: _is(sb.usher.mirror.nodes["gpu-1"].labels["topology.kubernetes.io/zone"] == "c"), "usher knows gpu-1's zone")

    clock[0] += 60  # the back-off is over; no node of zone a, as usher now knows
    await sb.req("PATCH", "/api/v1/nodes/gpu-2", {"metadata": {"labels": {"topology.kubernetes.io/zone": "a"}}})
    started = await sb.until(lambda: _running(sb), "the Job's next pod runs")
    assert started[0]["spec"]["nodeName"] == "gpu-2"
    job = await sb.get(f"{JOBS}/train")
    assert job["status"].get("failed") == 1 and not any(c["type"] == "Failed" for c in job["status"].get("conditions", []))


async def _running(sb: UsherOnSandbox) -> list[dict[str, Any]]:
    return [p for p in await sb.pods("job-name=train") if p["status"].get("phase") == "Running"]


def test_a_doubted_node_takes_no_pod_until_its_doubt_is_over_or_lifted() -> None:
    """``Mirror.doubt``: while usher's view of a node is known wrong (its kubelet refused a pod
    and reading it again explained nothing), nothing is placed there, through a rebuild too."""
    from test_mirror import add, mirror_with, pod as mirror_pod

    m = mirror_with(nodes=1)
    t = [100.0]
    m.monotonic = lambda: t[0]
    m.doubt("n0", 110.0)
    add(m, mirror_pod("p", gpus=8))
    assert not [d for d in m.engine.cycle(0.0).decisions if d.placements]
    m.rebuild(0.0)
    assert not [d for d in m.engine.cycle(0.0).decisions if d.placements]
    t[0] = 110.0
    m.retry_binds(0.0)  # what every tick of the controller does first
    (bind,) = [d for d in m.engine.cycle(0.0).decisions if d.placements]
    assert m.state.nodes[bind.placements[0].node_id].name == "n0"

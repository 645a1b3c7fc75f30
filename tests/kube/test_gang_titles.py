"""A gang is written one way wherever a person reads it: ``Kind namespace/name`` (as kubectl
writes objects), or ``namespace/name`` when no object stands for it; never the key's own order
``namespace/Kind/name``. Seen before: ``Job default/pvc-train`` in one Event beside
``research/RayCluster/ray-sweep`` in the next (the bind Event used the title, the drain's used
the key)."""

from __future__ import annotations

import asyncio

from kubectl import Kubectl
from sandboxes import UsherOnSandbox, node, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)
from usher.engine.backends.kube.objects import pod_view
from usher.engine.backends.kube.owners import Kind, infer_group


def pod(name: str, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict:
    meta = {"name": name, "namespace": "research", "uid": f"uid-{name}", "labels": labels or {},
            "annotations": annotations or {}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": "usher", "containers": [{"name": "main", "image": "x"}]}}


def no_owner(key: str, namespace: str, name: str) -> None:
    return None


def test_every_kind_of_gang_has_a_title_in_one_order() -> None:
    kueue = pod("k-0", labels={"kueue.x-k8s.io/pod-group-name": "sample"},
                annotations={"kueue.x-k8s.io/pod-group-total-count": "2"})
    coscheduling = pod("c-0", labels={"scheduling.x-k8s.io/pod-group": "nginx"})
    labelled = pod("g-0", labels={"usher/gang": "train", "usher/gang-size": "2"})
    alone = pod("notebook")
    titles = {p["metadata"]["name"]: pod_view(p, infer_group(p, no_owner)).gang_title
              for p in (kueue, coscheduling, labelled, alone)}
    assert titles == {
        "k-0": "KueuePodGroup research/sample",  # was None, so the key research/KueuePodGroup/sample was shown
        "c-0": "PodGroup research/nginx",  # waiting for its PodGroup, still titled
        "g-0": "research/train",
        "notebook": "research/notebook",
    }


def test_a_gang_waiting_for_its_owner_is_titled_as_it_will_be_once_known() -> None:
    worker = pod("ray-sweep-worker-0")
    worker["metadata"]["ownerReferences"] = [
        {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "ray-sweep", "uid": "u", "controller": True}]
    group = infer_group(worker, no_owner)
    assert (group.key, group.kind, group.waiting) == ("research/RayCluster/ray-sweep", Kind.RAY_CLUSTER, True)
    assert pod_view(worker, group).gang_title == "RayCluster research/ray-sweep"


def job(name: str, size: int, gpus: int) -> dict:
    """A batch Job of ``size`` pods, a gang by its owner alone (no usher/gang label)."""
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {
            "parallelism": size, "completions": size, "backoffLimit": 0,
            "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
            "template": {
                "metadata": {"labels": {"usher/queue": "research"}},
                "spec": {"schedulerName": "usher", "restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "trainer:1",
                    "resources": {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}]},
            },
        },
    }


async def test_the_bind_and_the_drain_events_write_the_gang_the_same_way(sb: UsherOnSandbox) -> None:
    for name in ("gpu-1", "gpu-2", "gpu-3"):
        await sb.create("/api/v1/nodes", node(name))
    await sb.start_usher(sb.tmp)
    await sb.create("/apis/batch/v1/namespaces/default/jobs", job("train", 2, 8))

    async def running() -> list[dict] | None:
        pods = [p for p in await sb.all_pods()
                if p["metadata"]["labels"].get("job-name") == "train" and p["status"].get("phase") == "Running"]
        return pods if len(pods) == 2 else None

    first = await sb.until(running, "the gang runs")
    drained = first[0]["spec"]["nodeName"]
    done = await asyncio.to_thread(Kubectl(sb.kubeconfig).run, "drain", drained, "--ignore-daemonsets", "--timeout=60s")
    assert done.returncode == 0, done.stderr
    survivor = next(p for p in first if p["spec"]["nodeName"] != drained)["metadata"]["name"]

    async def events() -> list[dict] | None:
        found = await sb.events_of(survivor)
        return found if any(e["reason"] == "GangBroken" for e in found) else None

    found = await sb.until(events, "usher stops the rest of the gang")
    by_reason = {e["reason"]: e["message"] for e in found}
    assert by_reason["Scheduled"].endswith(" with gang Job default/train")
    assert by_reason["GangBroken"].startswith("Evicted by usher: gang Job default/train is being stopped: ")
    assert not [e["message"] for e in found if "default/Job/train" in e["message"]]

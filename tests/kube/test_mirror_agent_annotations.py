"""What the node agent publishes reaches placement: NVLink islands and GPUs out of service."""

from __future__ import annotations

from typing import Any

from usher.engine.backends.kube.mirror import Mirror
from usher.engine.backends.kube.objects import format_gpu_health, format_nvlink, node_view, pod_view
from usher.engine.enums import PendingReason
from usher.engine.scenario import parse_queue_config

CONFIG = "queues: [{name: team-a, namespaceSelector: {}}]\n"


def gpu_node(name: str, annotations: dict[str, str] | None = None, gpus: int = 8) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "H100"}, "annotations": annotations or {}},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "96", "memory": "1Ti"}},
    }


def gpu_pod(name: str, gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "labels": {"usher/queue": "team-a"},
                     "creationTimestamp": "2026-11-21T10:00:00Z"},
        "spec": {"schedulerName": "usher", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
        "status": {"phase": "Pending"},
    }


def mirror_of(*nodes: dict[str, Any]) -> Mirror:
    m = Mirror("test")
    for obj in nodes:
        view = node_view(obj)
        m.node_changed(view, view.name, 0.0)
    m.set_config(parse_queue_config(CONFIG), None)
    m.rebuild(0.0)
    return m


def submit(m: Mirror, obj: dict[str, Any]) -> None:
    view = pod_view(obj)
    m.pod_changed(view, view.key, 0.0)


def placed_gpus(m: Mirror, pod: str) -> list[int] | None:
    for decision in m.engine.cycle(0.0).decisions:
        for view, placement in m.pods_of(m.gang_of_job[decision.job.id], decision.placements):
            if view.name == pod:
                return placement.gpus
    return None


def test_a_multi_gpu_pod_lands_inside_one_published_nvlink_island():
    islands = format_nvlink([[0, 1, 2, 3], [4, 5, 6, 7]])
    assert islands == "0,1,2,3;4,5,6,7"
    m = mirror_of(gpu_node("n1", {"usher/nvlink": islands}))
    assert m.state.node("n1").islands == [[0, 1, 2, 3], [4, 5, 6, 7]]
    submit(m, gpu_pod("one", 2))
    assert placed_gpus(m, "one") in ([0, 1], [4, 5])
    submit(m, gpu_pod("four", 4))
    gpus = placed_gpus(m, "four")
    assert gpus is not None and (set(gpus) <= {0, 1, 2, 3} or set(gpus) <= {4, 5, 6, 7}), gpus


def test_an_unhealthy_gpu_is_never_given_to_a_pod_and_is_not_capacity():
    health = format_gpu_health({3: "XID 79: the GPU has fallen off the bus"})
    m = mirror_of(gpu_node("n1", {"usher/gpu-health": health}))
    assert m.state.schedulable_gpu_count == 7
    submit(m, gpu_pod("seven", 7))
    gpus = placed_gpus(m, "seven")
    assert gpus is not None and 3 not in gpus and len(gpus) == 7


def test_a_pod_needing_every_gpu_of_a_node_with_a_broken_one_waits():
    m = mirror_of(gpu_node("n1", {"usher/gpu-health": format_gpu_health({5: "uncorrectable ECC errors"})}))
    submit(m, gpu_pod("eight", 8))
    assert placed_gpus(m, "eight") is None
    job = m.gangs["ml/eight"].job
    assert job is not None and job.pending_reason == PendingReason.INSUFFICIENT_CAPACITY


def test_a_gpu_the_agent_reports_healthy_again_returns_to_service():
    broken = gpu_node("n1", {"usher/gpu-health": format_gpu_health({0: "row remapping pending"})})
    m = mirror_of(broken)
    assert m.state.schedulable_gpu_count == 7
    fixed = node_view(gpu_node("n1", {"usher/gpu-health": format_gpu_health({})}))
    m.node_changed(fixed, "n1", 1.0)
    assert m.dirty, "a health change rebuilds the engine's capacity"
    m.rebuild(1.0)
    assert m.state.schedulable_gpu_count == 8
    assert m.state.node("n1").whole_free == 8


def test_a_malformed_health_annotation_takes_no_gpu_out_of_service():
    for text in ("not json", "[3]", '{"9": "beyond the node"}'):
        view = node_view(gpu_node("n1", {"usher/gpu-health": text}))
        assert view.unhealthy == {}, text

"""Schema defaults, canonical values and node-group expansion."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from usher.engine.scenario import (
    HOSTNAME_LABEL,
    Approval,
    BorrowWithinCohortPolicy,
    EventAction,
    EventSpec,
    JobSpec,
    NodeGroup,
    NodeSpec,
    PodSpec,
    ReclaimWithinCohortPolicy,
    Resources,
    TopologyMode,
    WithinQueuePolicy,
    parse_scenario,
)

MINIMAL = """
name: minimal
nodes:
  - {name: n1, gpus: 2}
queues:
  - name: q
jobs:
  - name: j
    queue: q
    pods:
      - {}
"""


def test_every_default() -> None:
    scenario = parse_scenario(MINIMAL)
    assert scenario.name == "minimal"
    assert scenario.topology.levels == []
    assert scenario.priority_classes == {}
    assert scenario.node_groups == [] and scenario.events == [] and scenario.traces == []
    assert scenario.warnings == []

    node = scenario.nodes[0]
    assert (node.cpu, node.memory, node.gpu_model, node.gpu_memory, node.nvlink) == (None, None, None, None, None)
    assert node.labels == {HOSTNAME_LABEL: "n1"}
    assert node.nvlink_islands == [[0, 1]]

    queue = scenario.queues[0]
    assert queue.cohort is None
    assert queue.quota == Resources() and (queue.quota.gpu, queue.quota.cpu, queue.quota.memory) == (None, None, None)
    assert queue.borrowing_limit is None and queue.lending_limit is None
    assert queue.weight == 1.0
    assert queue.approval is Approval.AUTO
    assert queue.preemption.within_queue is WithinQueuePolicy.NEVER
    assert queue.preemption.reclaim_within_cohort is ReclaimWithinCohortPolicy.NEVER
    assert queue.preemption.borrow_within_cohort is BorrowWithinCohortPolicy.NEVER

    job = scenario.jobs[0]
    assert job.submit == 0.0
    assert job.priority == 0 and scenario.priority_of(job) == 0
    assert job.preemptible is True
    assert job.duration is None and job.estimate is None
    assert job.checkpoint_every is None
    assert job.min_count is None and job.gang_size == 1 and job.pod_count == 1

    pod = job.pods[0]
    assert pod.name == "pod"
    assert pod.count == 1
    assert pod.gpu == 0.0 and pod.cpu == 0 and pod.memory == 0
    assert pod.gpu_model == [] and pod.topology is None
    assert scenario.all_jobs() == [job]


def test_canonical_values() -> None:
    scenario = parse_scenario(
        """
name: canon
topology: {levels: [usher/rack]}
priorityClasses: {high: 1000}
nodes:
  - {name: n1, gpus: 8, gpuModel: H100, gpuMemory: 80Gi, cpu: "96000m", memory: 1Ti}
queues:
  - {name: q, quota: {gpu: 1.5, cpu: 64, memory: 1Ti}, weight: 2.5, approval: manual}
jobs:
  - name: j
    queue: q
    submit: 1h30m
    priority: high
    duration: 6h
    checkpointEvery: 30m
    minCount: 2
    pods:
      - {name: a, count: 2, gpu: 0.4567, gpuModel: H100, cpu: 0.5, memory: 1.5Gi}
      - {name: b, gpu: 2, topology: {preferred: usher/rack}}
  - {name: k, queue: q, priority: "-5", estimate: 90s, pods: [{gpu: "0.25"}]}
events:
  - {at: 2h, action: cordon, node: n1}
  - {at: 3600, action: setQuota, queue: q, quota: {gpu: 8}, borrowingLimit: {gpu: 0}}
"""
    )
    node = scenario.nodes[0]
    assert (node.gpus, node.gpu_model, node.gpu_memory, node.cpu, node.memory) == (
        8,
        "H100",
        80 * 2**30,
        96000,
        2**40,
    )
    queue = scenario.queues[0]
    assert queue.quota == Resources(gpu=1.5, cpu=64, memory="1Ti")
    assert (queue.quota.cpu, queue.quota.memory) == (64000, 2**40)
    assert queue.weight == 2.5 and queue.approval is Approval.MANUAL
    job = scenario.jobs[0]
    assert (job.submit, job.duration, job.estimate, job.checkpoint_every) == (5400.0, 21600.0, 21600.0, 1800.0)
    assert scenario.priority_of(job) == 1000
    assert job.pod_count == 3 and job.gang_size == 2
    a, b = job.pods
    assert a.gpu == 0.457 and a.is_shared and a.whole_gpus == 0
    assert a.gpu_model == ["H100"] and a.cpu == 500 and a.memory == 3 * 2**29
    assert b.gpu == 2.0 and b.whole_gpus == 2 and not b.is_shared
    assert b.topology is not None
    assert (b.topology.mode, b.topology.level) == (TopologyMode.PREFERRED, "usher/rack")
    k = scenario.jobs[1]
    assert scenario.priority_of(k) == -5
    assert k.duration is None and k.estimate == 90.0
    assert k.pods[0].gpu == 0.25
    cordon, quota = scenario.events
    assert cordon.action is EventAction.CORDON and cordon.at == 7200.0
    assert quota.action is EventAction.SET_QUOTA and quota.quota == Resources(gpu=8)
    assert quota.borrowing_limit == Resources(gpu=0)


def test_snake_case_names_work_from_python() -> None:
    pod = PodSpec(gpu_model="A100", gpu=1)
    assert pod.gpu_model == ["A100"]
    job = JobSpec(name="j", queue="q", pods=[pod], min_count=1, duration="1h")
    assert job.estimate == 3600.0
    assert JobSpec.model_validate({"name": "j", "queue": "q", "pods": [{}], "minCount": 1}).min_count == 1


def test_pod_gpu_rule() -> None:
    with pytest.raises(ValidationError, match=r"must be a whole number or a share between 0 and 1 \(got 1.5\)"):
        PodSpec(gpu=1.5)
    for bad in (-1, "nan", "inf", "two", True):
        with pytest.raises(ValidationError, match="must be a number of GPUs"):
            PodSpec(gpu=bad)
    with pytest.raises(ValidationError, match=r"at least 0\.001"):
        PodSpec(gpu=0.0001)
    assert PodSpec(gpu=0.9999).gpu == 1.0


def test_nvlink_must_partition_the_gpus() -> None:
    assert NodeSpec(name="n", gpus=4, nvlink=[[0, 1], [2, 3]]).nvlink_islands == [[0, 1], [2, 3]]
    for bad in ([[0, 1], [1, 2, 3]], [[0, 1, 2]], [[0, 1, 2, 3, 4]], [[0, 1, 2, 3], []]):
        with pytest.raises(ValidationError, match=r"islands must split GPUs 0\.\.3"):
            NodeSpec(name="n", gpus=4, nvlink=bad)
    assert NodeSpec(name="n").nvlink_islands == []


def test_event_fields_follow_the_action() -> None:
    EventSpec(at=0, action="drain", node="n")
    EventSpec(at=0, action="hold", job="j")
    EventSpec(at=0, action="setQuota", queue="q", quota={"gpu": 1}, lending_limit={"gpu": 0})
    for bad in (
        {"action": "drain"},
        {"action": "drain", "node": "n", "job": "j"},
        {"action": "approve", "node": "n"},
        {"action": "setQuota", "queue": "q"},
        {"action": "release", "job": "j", "borrowingLimit": {"gpu": 1}},
    ):
        with pytest.raises(ValidationError):
            EventSpec.model_validate({"at": "1h", **bad})


def test_node_group_naming_and_labels_as_in_the_spec() -> None:
    group = NodeGroup.model_validate(
        {
            "prefix": "b",
            "count": 32,
            "layout": {"usher/rack": 4, "usher/block": 16},
            "template": {
                "gpus": 8,
                "gpuModel": "H100",
                "cpu": 96,
                "memory": "1Ti",
                "labels": {"pool": "x"},
                "nvlink": [[0, 1, 2, 3, 4, 5, 6, 7]],
            },
        }
    )
    nodes = group.nodes()
    assert [n.name for n in nodes[:3]] == ["b-01", "b-02", "b-03"] and nodes[-1].name == "b-32"
    assert nodes[0].labels == {
        "pool": "x",
        "usher/rack": "b-rack1",
        "usher/block": "b-block1",
        HOSTNAME_LABEL: "b-01",
    }
    racks = [n.labels["usher/rack"] for n in nodes]
    assert racks[:5] == ["b-rack1"] * 4 + ["b-rack2"] and racks[-1] == "b-rack8"
    blocks = [n.labels["usher/block"] for n in nodes]
    assert blocks[15] == "b-block1" and blocks[16] == "b-block2" and blocks[-1] == "b-block2"
    assert all(n.gpus == 8 and n.gpu_model == "H100" and n.cpu == 96000 and n.memory == 2**40 for n in nodes)
    nodes[0].nvlink[0].append(99)  # expanded nodes do not share mutable state
    assert nodes[1].nvlink == [[0, 1, 2, 3, 4, 5, 6, 7]]


@pytest.mark.parametrize(
    ("count", "first", "last"),
    [
        (1, "g-01", "g-01"),
        (9, "g-01", "g-09"),
        (99, "g-01", "g-99"),
        (100, "g-001", "g-100"),
        (1000, "g-0001", "g-1000"),
    ],
)
def test_node_group_zero_padding(count: int, first: str, last: str) -> None:
    names = NodeGroup(prefix="g", count=count).node_names()
    assert (names[0], names[-1], len(names)) == (first, last, count)


def test_layout_key_last_word() -> None:
    group = NodeGroup.model_validate(
        {"prefix": "c", "count": 3, "layout": {"topology.kubernetes.io/zone": 2, "my-pod": 1}}
    )
    assert [n.labels["topology.kubernetes.io/zone"] for n in group.nodes()] == ["c-zone1", "c-zone1", "c-zone2"]
    assert [n.labels["my-pod"] for n in group.nodes()] == ["c-pod1", "c-pod2", "c-pod3"]


def test_all_nodes_orders_explicit_then_groups() -> None:
    scenario = parse_scenario(
        """
name: order
nodes: [{name: z-1, gpus: 1}]
nodeGroups:
  - {prefix: a, count: 2}
  - {prefix: b, count: 1, template: {gpus: 4}}
"""
    )
    assert [n.name for n in scenario.all_nodes()] == ["z-1", "a-01", "a-02", "b-01"]
    assert scenario.all_nodes()[-1].gpus == 4

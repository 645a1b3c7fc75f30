"""The mirror: Kubernetes pods and nodes become engine gangs, queues and nodes (no HTTP here)."""

from __future__ import annotations

from typing import Any

from usher.engine.backends.kube.decisions import parse_decisions
from usher.engine.backends.kube.gang import GangPhase
from usher.engine.backends.kube.mirror import Mirror
from usher.engine.backends.kube.objects import node_view, parse_time, pod_view
from usher.engine.backends.kube.owners import GroupSpec
from usher.engine.enums import DecisionKind, JobState, PendingReason
from usher.engine.scenario import parse_queue_config
from usher.engine.state import MILLI

CONFIG = """
topology: {levels: [usher/rack, kubernetes.io/hostname]}
queues:
  - {name: team-a, namespaceSelector: {}, cohort: lab, quota: {gpu: 16}}
  - {name: team-b, namespaceSelector: {}, cohort: lab, quota: {gpu: 8}, approval: manual}
"""


def node(name: str, rack: str = "r1", gpus: int = 8, **extra: Any) -> dict[str, Any]:
    obj = {
        "metadata": {"name": name, "labels": {"usher/rack": rack, "nvidia.com/gpu.product": "H100"}},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "96", "memory": "1Ti"}},
    }
    obj["spec"].update(extra)
    return obj


def pod(
    name: str,
    queue: str | None = "team-a",
    gpus: int = 8,
    gang: str | None = None,
    size: int | None = None,
    node_name: str | None = None,
    annotations: dict[str, str] | None = None,
    phase: str = "Pending",
    uid: str | None = None,
) -> dict[str, Any]:
    labels = {}
    if queue:
        labels["usher/queue"] = queue
    if gang:
        labels["usher/gang"] = gang
        labels["usher/gang-size"] = str(size)
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": uid or f"uid-{name}",
            "labels": labels,
            "annotations": annotations or {},
            "creationTimestamp": "2026-11-21T10:00:00Z",
        },
        "spec": {
            "schedulerName": "usher",
            "nodeName": node_name,
            "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus), "cpu": "4"}}}],
        },
        "status": {"phase": phase},
    }


def mirror_with(nodes: int = 4, config: str = CONFIG) -> Mirror:
    m = Mirror("test")
    for i in range(nodes):
        v = node_view(node(f"n{i}", rack=f"r{i // 2}"))
        m.node_changed(v, v.name, 0.0)
    m.set_config(parse_queue_config(config), None)
    m.rebuild(0.0)
    return m


def add(m: Mirror, obj: dict[str, Any], now: float = 0.0) -> None:
    view = pod_view(obj)
    m.pod_changed(view, view.key, now)


def test_a_gang_is_submitted_only_when_all_its_pods_exist():
    m = mirror_with()
    add(m, pod("w-0", gang="train", size=3))
    add(m, pod("w-1", gang="train", size=3))
    gang = m.gangs["ml/train"]
    assert gang.job is None
    assert gang.reason == PendingReason.WAITING_FOR_GANG
    assert "2 of the gang's 3 pods" in gang.message
    add(m, pod("w-2", gang="train", size=3))
    job = gang.job
    assert job is not None and job.submitted and job.total_pods == 3
    result = m.engine.cycle(0.0)
    [bind] = result.decisions
    pairs = m.pods_of(gang, bind.placements)
    assert sorted(v.name for v, _ in pairs) == ["w-0", "w-1", "w-2"]


def test_a_pod_deleted_before_admission_withdraws_the_gang():
    m = mirror_with()
    for i in range(2):
        add(m, pod(f"w-{i}", gang="train", size=2))
    assert m.gangs["ml/train"].job.submitted
    m.pod_changed(None, "ml/w-1", 0.0)
    job = m.gangs["ml/train"].job
    assert not job.submitted
    assert m.engine.cycle(0.0).decisions == []


def test_unknown_queue_and_bad_annotation_say_so():
    m = mirror_with()
    add(m, pod("lost", queue="nope"))
    assert m.gangs["ml/lost"].reason == PendingReason.UNKNOWN_QUEUE
    assert "'nope' is not in usher-system/usher-queues (queues: team-a, team-b)" in m.gangs["ml/lost"].message
    add(m, pod("odd", annotations={"usher/gpu-fraction": "1.5"}, gpus=0))
    assert m.gangs["ml/odd"].reason == PendingReason.INVALID_REQUEST
    assert "usher/gpu-fraction" in m.gangs["ml/odd"].message
    add(m, pod("far", annotations={"usher/topology-required": "usher/block"}))
    assert "'usher/block'" in m.gangs["ml/far"].message


def restart_with(m: Mirror, *objs: dict[str, Any]) -> None:
    """What a restarted controller does: list everything, then build the engine once."""
    m.dirty = True
    for obj in objs:
        add(m, obj)
    m.rebuild(0.0)


def test_a_restarted_controller_adopts_running_gangs_where_they_run():
    m = mirror_with()
    restart_with(
        m,
        *(pod(f"w-{i}", gang="train", size=2, node_name=f"n{i}", annotations={"usher/gpus": "0,1,2,3,4,5,6,7"}, phase="Running") for i in range(2)),
    )
    job = m.gangs["ml/train"].job
    assert job is not None and job.state == JobState.RUNNING
    assert m.state.queues["team-a"].usage[0] == 16_000
    assert m.state.node("n0").whole_free == 0 and m.state.node("n2").whole_free == 8
    # finishing: both pods succeed -> capacity comes back
    for i in range(2):
        add(m, pod(f"w-{i}", gang="train", size=2, node_name=f"n{i}", phase="Succeeded"))
    assert job.state == JobState.FINISHED
    assert m.state.node("n0").whole_free == 8
    assert m.state.queues["team-a"].usage[0] == 0


def test_a_partly_bound_gang_found_at_start_keeps_its_gpus_until_torn_down():
    m = mirror_with()
    restart_with(m, pod("w-0", gang="train", size=2, node_name="n0", annotations={"usher/gpus": "0,1,2,3,4,5,6,7"}), pod("w-1", gang="train", size=2))
    gang = m.gangs["ml/train"]
    # half-bound: a leader may be binding it (a standby or a console sees that); only the leader,
    # which is not binding it, decides to tear it down
    assert [g.key for g in m.half_bound()] == ["ml/train"] and gang.teardown is None
    assert gang.reason == PendingReason.WAITING_FOR_GANG and "being bound: 1 of its 2 pods" in gang.message
    # the bound pod still runs on n0: its GPUs are not free for anyone else until it is gone
    assert m.state.node("n0").whole_free == 0
    # the rest of it binds: it is whole, and one job
    job = gang.job
    add(m, pod("w-1", gang="train", size=2, node_name="n1", annotations={"usher/gpus": "0,1,2,3,4,5,6,7"}))
    assert not gang.partial and gang.job is job and len(job.current_run.placements) == 2
    assert m.state.audit[-1].action == "started"
    # a leader that finds it half-bound instead tears it down
    m.pod_changed(None, "ml/w-1", 0.0)
    add(m, pod("w-1", gang="train", size=2, uid="uid-w-1-new"))
    m.tear_down(gang, "found partly bound", replace=True)
    m.sync(gang, 0.0)
    assert [g.key for g in m.teardowns()] == ["ml/train"] and "being stopped" in gang.message
    m.pod_changed(None, "ml/w-0", 0.0)
    assert m.state.node("n0").whole_free == 8 and gang.teardown is None
    assert m.teardowns() == []


def test_a_running_gang_that_loses_a_member_is_torn_down_and_holds_until_gone():
    m = mirror_with()
    pods = [pod(f"w-{i}", gang="train", size=2, node_name=f"n{i}", annotations={"usher/gpus": "0,1,2,3,4,5,6,7"}, phase="Running") for i in range(2)]
    restart_with(m, *pods)
    gang = m.gangs["ml/train"]
    assert gang.teardown is None and m.teardowns() == []
    # one member finishing early is not a loss
    add(m, pod("w-1", gang="train", size=2, node_name="n1", phase="Succeeded"))
    assert gang.teardown is None
    assert m.state.node("n1").whole_free == 8  # and its node is free at once
    # drained: the pod is being deleted; the rest must go, and the GPUs stay held meanwhile
    drained = pods[0] | {"metadata": pods[0]["metadata"] | {"deletionTimestamp": "2026-11-21T11:00:00Z"}}
    add(m, drained)
    assert gang.teardown == "pod w-0 is being deleted from n0"
    assert m.teardowns() == []  # nothing left to evict: w-1 ran to completion
    assert m.state.node("n0").whole_free == 0
    job = gang.job
    for i in range(2):
        m.pod_changed(None, f"ml/w-{i}", 0.0)
    assert job.runs[-1].end_reason == "GangBroken"
    assert m.state.node("n0").whole_free == 8 and m.state.queues["team-a"].usage[0] == 0


def test_pods_usher_does_not_schedule_take_their_node_capacity():
    from usher.engine.backends.kube.objects import holding_of

    m = mirror_with()
    m.rebuild(0.0)
    daemon = pod("dcgm", queue=None, gpus=0) | {"spec": {"nodeName": "n0", "schedulerName": "default-scheduler",
        "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "10"}}}],
        "containers": [{"name": "a", "resources": {"requests": {"cpu": "2", "nvidia.com/gpu": "3"}}},
                       {"name": "b", "resources": {"requests": {"cpu": "3"}}}],
        "overhead": {"cpu": "1"}}}
    m.holding_changed("ml/dcgm", holding_of(daemon))
    n0 = m.state.node("n0")
    # kube-scheduler's arithmetic: max(2 + 3, 10) + 1 overhead = 11 cores; 3 GPUs
    assert n0.whole_free == 5 and n0.cpu_free == 96_000 - 11_000
    add(m, pod("big", gpus=8))
    decisions = m.engine.cycle(0.0).decisions
    assert [m.state.nodes[p.node_id].name for p in decisions[0].placements] != ["n0"]
    m.dirty = True
    m.rebuild(0.0)  # a rebuild takes the holding again
    assert m.state.node("n0").whole_free == 5
    m.holding_changed("ml/dcgm", None)
    assert m.state.node("n0").whole_free == 8 and m.state.node("n0").cpu_free == 96_000


def test_a_pod_usher_does_not_schedule_found_on_a_full_node_takes_its_room_once_that_room_frees():
    """A pod of another scheduler admitted where the engine still counted a run of usher's (a
    bind race, a run ending): it is taken short, and taken whole once the run ends, so nothing
    is bound over it."""
    from usher.engine.backends.kube.objects import holding_of

    m = mirror_with()
    add(m, pod("a", gpus=8, node_name="n0", phase="Running"))
    other = pod("other", queue=None, gpus=4) | {"spec": {"nodeName": "n0", "schedulerName": "default-scheduler",
        "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "4"}}}]}}
    m.holding_changed("ml/other", holding_of(other))
    assert m.state.node("n0").whole_free == 0
    add(m, pod("a", gpus=8, node_name="n0", phase="Succeeded"))
    assert m.state.node("n0").whole_free == 4  # not 8: the other pod's 4 GPUs are taken now


def test_members_that_ran_to_completion_free_their_gpus_while_the_rest_run_on():
    m = mirror_with()
    restart_with(m, *(pod(f"w-{i}", gpus=4, gang="train", size=2, node_name="n0", phase="Running",
                          annotations={"usher/gpus": "0,1,2,3" if i == 0 else "4,5,6,7"}) for i in range(2)))
    assert m.state.node("n0").whole_free == 0
    add(m, pod("w-0", gpus=4, gang="train", size=2, node_name="n0", phase="Succeeded"))
    gang = m.gangs["ml/train"]
    assert gang.job.state == JobState.RUNNING and gang.teardown is None
    assert m.state.node("n0").whole_free == 4 and m.state.queues["team-a"].usage[0] == 4_000
    add(m, pod("w-1", gpus=4, gang="train", size=2, node_name="n0", phase="Succeeded"))
    assert m.state.node("n0").whole_free == 8 and m.state.queues["team-a"].usage[0] == 0


def test_a_pod_an_elastic_gang_grew_by_whose_bind_seemed_to_fail_is_counted_once_seen_bound():
    """A grow bind that timed out but went through: the pod was given back (shrunk out of the
    run), then the watch shows it on its node; its GPUs must be counted, or usher binds over it."""
    from usher.engine.backends.kube.owners import GroupSpec

    m = mirror_with()
    group = GroupSpec(key="ml/el", kind="Gang", name="el", size=3, minimum=2)

    def member(i: int, node: str | None, phase: str = "Pending") -> None:
        obj = pod(f"el-{i}", gpus=8, node_name=node, phase=phase)
        view = pod_view(obj, group)
        m.pod_changed(view, view.key, 0.0)

    for i in range(3):
        member(i, None)
    for i in range(2):
        member(i, f"n{i}", "Running")
    m.dirty = True
    m.rebuild(0.0)  # the gang runs on two nodes, its third pod waiting
    assert m.state.node("n2").whole_free == 8
    member(2, "n2", "Running")  # seen bound though usher gave its placement back
    assert m.state.node("n2").whole_free == 0
    assert len(m.gangs["ml/el"].job.current_run.placements) == 3


def test_a_holding_short_for_good_changes_nothing_until_room_frees():
    """A node the kubelet overcommitted (usher's 8 GPUs and another scheduler's 2): each tick asks
    to take the rest again, which must leave the state as it is (its epoch too: a new epoch
    throws away the preemption searches remembered as failed)."""
    from usher.engine.backends.kube.objects import holding_of

    m = mirror_with()
    add(m, pod("a", gpus=8, node_name="n0", phase="Running"))
    other = pod("other", queue=None, gpus=2) | {"spec": {"nodeName": "n0", "schedulerName": "default-scheduler",
        "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "2"}}}]}}
    m.holding_changed("ml/other", holding_of(other))
    before = m.state.epoch
    for _ in range(3):
        m.retake_short()
    assert m.state.epoch == before


def test_a_queue_retired_is_said_once_in_the_audit_not_at_every_rebuild():
    m = mirror_with()
    restart_with(m, *(pod(f"w-{i}", gang="train", size=2, node_name=f"n{i}", phase="Running",
                          annotations={"usher/gpus": "0,1,2,3,4,5,6,7"}) for i in range(2)))
    m.set_config(parse_queue_config("queues:\n  - {name: team-b, namespaceSelector: {}, quota: {gpu: 8}}\n"), None)
    for _ in range(4):
        m.dirty = True
        m.rebuild(0.0)
    assert m.state.queues["team-a"].retired
    assert [e.target for e in m.state.audit if e.action == "retire-queue"] == ["team-a"]


def test_pods_of_a_gang_found_running_without_their_gpus_written_never_count_the_same_gpu_twice():
    m = mirror_with()
    restart_with(m, *(pod(f"w-{i}", gpus=4, gang="pair", size=2, node_name="n0", phase="Running") for i in range(2)))
    run = m.gangs["ml/pair"].job.current_run
    taken = [g for p in run.placements for g in p.gpus]
    assert sorted(taken) == list(range(8)) and m.state.node("n0").whole_free == 0


def test_a_refused_rollback_is_not_completed_after_a_rebuild_that_gave_its_room_away():
    m = mirror_with()
    for i in range(2):
        add(m, pod(f"w-{i}", gang="train", size=2))
    gang = m.gangs["ml/train"]
    [bind] = m.engine.cycle(0.0).decisions
    where = {v.name: (m.state.nodes[p.node_id].name, p.gpus) for v, p in m.pods_of(gang, bind.placements)}
    node0, gpus0 = where["w-0"]
    # as the controller leaves it: w-0 bound, w-1's bind failed, the eviction of w-0 refused
    add(m, pod("w-0", gang="train", size=2, node_name=node0, phase="Running", annotations={"usher/gpus": ",".join(map(str, gpus0))}))
    m.tear_down(gang, "rolled back: 1 of 2 binds failed", replace=True)
    gang.to_bind = {"w-1": (where["w-1"][0], list(where["w-1"][1]))}
    m.dirty = True
    m.rebuild(0.0)
    assert gang.to_bind == {}  # the run no longer holds w-1's room: the rollback goes on


def test_gangs_whose_pods_all_went_before_they_ran_are_forgotten():
    m = mirror_with(nodes=1)
    for i in range(20):
        objs = [pod(f"j{i}-{k}", gang=f"j{i}", size=2) for k in range(2)]  # 16 GPUs on one 8-GPU node: waits
        for obj in objs:
            add(m, obj)
        m.engine.cycle(0.0)
        for obj in objs:
            m.pod_changed(None, pod_view(obj).key, 1.0)
    assert m.gangs == {} and m.gang_of_job == {}
    assert all(not q.pending for q in m.state.queues.values())


def test_months_of_gangs_coming_and_going_are_compacted_by_a_rebuild(monkeypatch):
    import usher.engine.backends.kube.mirror_rebuild as mirror_module  # where the rebuild's limits live

    monkeypatch.setattr(mirror_module, "FINISHED_JOBS_KEPT", 50)
    monkeypatch.setattr(mirror_module, "AUDIT_KEPT", 30)
    m = mirror_with(nodes=2)
    for i in range(60):
        objs = [pod(f"j{i}-{k}", gang=f"j{i}", size=2, node_name=f"n{k}", phase="Running") for k in range(2)]
        for obj in objs:
            add(m, obj, float(i))
        for obj in objs:
            m.pod_changed(None, pod_view(obj).key, float(i) + 0.5)
    assert m.gangs == {} and m.needs_compaction()
    add(m, pod("still", gpus=8, node_name="n0", phase="Running"), 100.0)
    m.dirty = True
    m.rebuild(100.0)  # what the controller's tick does once needs_compaction() says so
    # the newest half of the finished jobs is kept (a console still shows them), and still
    assert not m.needs_compaction() and [j.name for j in m.state.jobs] == [f"ml/j{i}" for i in range(35, 60)] + ["ml/still"]
    # the newest 30 audit lines kept, still's adopt the last: the rebuild does not adopt it again
    assert len(m.state.audit) == 30 and m.state.audit[0].target == "ml/j31" and m.state.audit[-1].target == "ml/still"
    assert m.state.node("n0").whole_free == 0


def test_a_gang_whose_pods_all_went_while_its_binds_failed_is_forgotten_after_them():
    m = mirror_with(nodes=1)
    objs = [pod(f"j-{k}", gang="j", size=2, gpus=4) for k in range(2)]
    for obj in objs:
        add(m, obj)
    gang = m.gangs["ml/j"]
    m.engine.cycle(0.0)
    m.move(gang, GangPhase.RESERVED)  # the controller binds...
    for obj in objs:  # ... while the Job is deleted
        m.pod_changed(None, pod_view(obj).key, 1.0)
    assert "ml/j" in m.gangs  # it runs (being bound): kept for now
    m.engine.unbind(gang.job, 1.0, "2 of 2 binds failed")  # the binds failed: what the controller does then
    m.binds_over(gang)
    m.sync(gang, 1.0)
    m.forget_if_empty(gang)
    assert "ml/j" not in m.gangs and not m.gang_of_job


def test_cordon_and_readiness_change_schedulability_in_place():
    m = mirror_with()
    before = m.state.schedulable_gpu_count
    v = node_view(node("n1", rack="r0", unschedulable=True))
    m.node_changed(v, "n1", 0.0)
    assert not m.dirty
    assert m.state.node("n1").cordoned and m.state.schedulable_gpu_count == before - 8
    v = node_view(node("n9", rack="r9"))
    m.node_changed(v, "n9", 0.0)
    assert m.dirty  # a new node: the indexes are rebuilt before the next cycle


def test_approval_and_hold_come_from_the_operators_decisions_not_from_the_pod():
    m = mirror_with()
    add(m, pod("nb", queue="team-b", gpus=1))
    assert m.engine.cycle(0.0).decisions == []
    assert m.gangs["ml/nb"].job.pending_reason == PendingReason.AWAITING_APPROVAL
    m.set_decisions(parse_decisions("approved: {ml/nb: {by: alice}}", "cm"))
    assert len(m.engine.cycle(0.0).decisions) == 1


def test_a_pod_that_approves_or_holds_itself_is_refused_and_says_who_decides():
    m = mirror_with()
    add(m, pod("self-approved", queue="team-b", gpus=1, annotations={"usher/approved": "true"}))
    add(m, pod("self-held", queue="team-a", gpus=1, annotations={"usher/hold": "true"}))
    assert m.engine.cycle(0.0).decisions == []
    for name, annotation in (("self-approved", "usher/approved"), ("self-held", "usher/hold")):
        gang = m.gangs[f"ml/{name}"]
        assert gang.reason == PendingReason.INVALID_REQUEST
        assert f"annotation {annotation} is an operator's decision" in gang.message
        assert "usher-system/usher-decisions" in gang.message


def test_a_hold_in_the_decisions_holds_a_waiting_job_and_its_release_lets_it_start():
    m = mirror_with()
    m.set_decisions(parse_decisions("held: {ml/train: {by: bob}}", "cm"))
    add(m, pod("train", queue="team-a", gpus=1))
    assert m.engine.cycle(0.0).decisions == []
    assert m.gangs["ml/train"].job.pending_reason == PendingReason.HELD
    m.set_decisions(parse_decisions("held: {}", "cm"))
    assert len(m.engine.cycle(0.0).decisions) == 1


def test_gang_of_mixed_pods_forms_groups_and_names_map_back():
    m = mirror_with()
    add(m, pod("j-launcher", gang="j", size=3, gpus=0))
    add(m, pod("j-worker-0", gang="j", size=3, gpus=4))
    add(m, pod("j-worker-1", gang="j", size=3, gpus=4))
    job = m.gangs["ml/j"].job
    assert sorted(g.count for g in job.groups) == [1, 2]
    [bind] = m.engine.cycle(0.0).decisions
    names = {v.name: p for v, p in m.pods_of(m.gangs["ml/j"], bind.placements)}
    assert len(names["j-worker-0"].gpus) == 4 and names["j-launcher"].gpus == []


def test_a_rebuild_counts_the_gpus_of_a_gang_whose_eviction_is_under_way():
    m = mirror_with()
    pods = [pod(f"w-{i}", gang="train", size=2, node_name=f"n{i}", annotations={"usher/gpus": "0,1,2,3,4,5,6,7"}, phase="Running") for i in range(2)]
    restart_with(m, *pods)
    gang = m.gangs["ml/train"]
    m.engine.unbind(gang.job, 0.0, "preempted")  # the engine gave its capacity away ...
    m.tear_down(gang, "Preempted", replace=True)  # ... and the controller is evicting its pods
    evicting = pods[0] | {"metadata": pods[0]["metadata"] | {"deletionTimestamp": "2026-11-21T11:00:00Z"}}
    add(m, evicting)
    m.dirty = True
    m.rebuild(0.0)  # a new node, say: the pods still on n0 and n1 hold them
    assert m.state.node("n0").whole_free == 0 and m.state.node("n1").whole_free == 0
    assert gang.teardown == "pod w-0 is being deleted from n0"


def test_two_workloads_under_one_gang_label_wait_and_say_so():
    m = mirror_with()
    m.rebuild(0.0)
    for i in range(2):
        add(m, pod(f"a-{i}", gang="train", size=2))
    job_pod = pod("b-0", gang="train", size=2)
    job_pod["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "other", "uid": "u1", "controller": True}]
    add(m, job_pod)
    gang = m.gangs["ml/train"]
    assert gang.reason == PendingReason.INVALID_REQUEST
    assert "2 owners (Job/other, bare pods)" in gang.message
    assert m.engine.cycle(0.0).decisions == []


def test_a_job_bound_by_the_leader_is_one_job_for_a_watching_console():
    m = mirror_with()
    m.rebuild(0.0)
    add(m, pod("solo"))
    pending = m.gangs["ml/solo"].job
    add(m, pod("solo", node_name="n0", annotations={"usher/gpus": "0,1,2,3,4,5,6,7"}, phase="Running"))
    assert m.gangs["ml/solo"].job is pending and pending.state == JobState.RUNNING
    assert [j.name for j in m.state.jobs] == ["ml/solo"]
    assert m.state.audit[-1].action == "started"


def test_a_namespace_default_queue_takes_pods_without_a_queue_label():
    m = Mirror("t")
    m.set_config(parse_queue_config(CONFIG.replace("{name: team-a, namespaceSelector: {}, cohort: lab,", "{name: team-a, namespaceSelector: {}, cohort: lab, namespaces: [ml],"), "q"), None)
    for name in ("n0", "n1"):
        m.node_changed(node_view(node(name)), name, 0.0)
    m.rebuild(0.0)
    add(m, pod("nolabel", queue=None))
    assert m.gangs["ml/nolabel"].job.queue == "team-a"
    add(m, pod("labelled", queue="team-b"))  # the label still wins
    assert m.gangs["ml/labelled"].job.queue == "team-b"


def test_usher_movable_defaults_to_whether_a_controller_owns_the_pod():
    owned = pod("w-0")
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": True}]
    assert pod_view(owned).movable
    assert not pod_view(pod("bare")).movable  # an eviction deletes a bare pod for good
    assert pod_view(pod("bare", annotations={"usher/movable": "TRUE"})).movable
    owned["metadata"]["annotations"] = {"usher/movable": "false"}
    assert not pod_view(owned).movable
    odd = pod_view(pod("odd", annotations={"usher/movable": "sometimes"}))
    assert odd.problem is not None and "annotation usher/movable: expected true or false, got 'sometimes'" in odd.problem


#: the pods' creation time: an adopted run starts then
T0 = parse_time("2026-11-21T10:00:00Z")
MOVES = """
topology: {levels: [usher/rack, kubernetes.io/hostname]}
queues: [{name: team-a, namespaceSelector: {}, quota: {gpu: 64}}]
"""


def test_a_moved_gang_made_anew_under_other_names_starts_in_the_room_kept_for_it():
    """Consolidation through the mirror: one 4-GPU job per node, a 16-GPU gang that needs a
    rack. Two movers are evicted; their pods come back under new names (as a Job's do), as a
    new engine job that inherits the kept room and is bound into it."""
    m = mirror_with(config=MOVES)
    for i in range(4):
        add(m, pod(f"m{i}-a", gpus=4, gang=f"m{i}", size=1, node_name=f"n{i}", phase="Running",
                   annotations={"usher/gpus": "0,1,2,3", "usher/movable": "true"}))
    for k in range(2):
        add(m, pod(f"big-{k}", gang="big", size=2, annotations={"usher/topology-required": "usher/rack"}), now=T0 + 5)
    result = m.engine.cycle(T0 + 10)
    evicted = sorted(d.job.name for d in result.decisions if d.kind == "evict")
    [bind] = [d for d in result.decisions if d.kind == "bind"]
    assert len(evicted) == 2 and bind.job.name == "ml/big"
    kept = {m.state.jobs[i].name: [(m.state.nodes[p.node_id].name, tuple(p.gpus)) for p in room.placements] for i, room in m.state.kept_rooms.items()}
    assert sorted(kept) == evicted
    # a job arriving meanwhile finds no room: the movers' rooms are kept
    add(m, _created(pod("late", gpus=4, gang="late", size=1), "10:00:15"), now=T0 + 15)
    assert m.engine.cycle(T0 + 15).decisions == []
    # the controller evicts them; the old pods go and their owners create new ones
    for name in evicted:
        gang = m.gangs[name]
        m.tear_down(gang, "moved", replace=True)
        old = next(iter(gang.pods))
        m.pod_changed(None, f"ml/{old}", T0 + 20)
        add(m, _created(pod(f"{old[:2]}-b", gpus=4, gang=old[:2], size=1, annotations={"usher/movable": "true"}), "10:00:30"), now=T0 + 30)
        assert m.gangs[name].job.submitted
    result = m.engine.cycle(T0 + 30)
    placed = {d.job.name: [(m.state.nodes[p.node_id].name, tuple(p.gpus)) for p in d.placements] for d in result.decisions}
    assert placed == kept  # and nothing for the job that came meanwhile
    assert not m.state.kept_rooms


def _created(obj: dict[str, Any], at: str) -> dict[str, Any]:
    obj["metadata"]["creationTimestamp"] = f"2026-11-21T{at}Z"
    return obj


def test_a_budgets_label_selector_selects_as_kubernetes_does():
    from usher.engine.backends.kube.objects import selector_matches

    labels = {"app": "web", "tier": "gpu"}
    assert selector_matches({}, labels)  # policy/v1: an empty selector selects every pod
    assert not selector_matches(None, labels)
    assert selector_matches({"matchLabels": {"app": "web"}}, labels)
    assert not selector_matches({"matchLabels": {"app": "db"}}, labels)
    assert selector_matches({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu", "cpu"]}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gpu"]}]}, labels)
    assert selector_matches({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}, labels)
    assert selector_matches({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}, labels)


def _moved(m):
    """The MOVES cluster with the consolidation made: the two movers' kept rooms, by gang."""
    for i in range(4):
        add(m, pod(f"m{i}-a", gpus=4, gang=f"m{i}", size=1, node_name=f"n{i}", phase="Running",
                   annotations={"usher/gpus": "0,1,2,3", "usher/movable": "true"}))
    for k in range(2):
        add(m, pod(f"big-{k}", gang="big", size=2, annotations={"usher/topology-required": "usher/rack"}), now=T0 + 5)
    m.engine.cycle(T0 + 10)
    return {m.state.jobs[i].name: [(m.state.nodes[p.node_id].name, tuple(p.gpus)) for p in r.placements] for i, r in m.state.kept_rooms.items()}


def _terminating(name: str, node: str) -> dict[str, Any]:
    obj = pod(name, gpus=4, gang=name[:2], size=1, node_name=node, phase="Running",
              annotations={"usher/gpus": "0,1,2,3", "usher/movable": "true"})
    obj["metadata"]["deletionTimestamp"] = "2026-11-21T10:00:20Z"
    return obj


def test_a_rebuild_while_the_movers_pods_go_keeps_their_rooms_until_the_new_pods_come():
    """Rebuilds (a node or the queue config changed) in both windows of a move: while the old
    pods are still terminating, and once they are gone but before the new ones exist. The rooms
    stay kept throughout, no job placed meanwhile gets them, and the new pods are bound into
    them."""
    for window in ("terminating", "gone"):
        m = mirror_with(config=MOVES)
        kept = _moved(m)
        assert len(kept) == 2
        for name in kept:
            old = next(iter(m.gangs[name].pods))
            m.tear_down(m.gangs[name], "moved", replace=True)  # the controller evicts them
            add(m, _terminating(old, f"n{old[1]}"), now=T0 + 20)
            if window == "gone":
                m.pod_changed(None, f"ml/{old}", T0 + 20)
        m.dirty = True
        m.rebuild(T0 + 21)
        assert len(m.state.kept_rooms) == 2, window
        add(m, _created(pod("late", gpus=4, gang="late", size=1), "10:00:22"), now=T0 + 22)
        rooms = {where for places in kept.values() for where in places}
        for d in m.engine.cycle(T0 + 22).decisions:  # (big was never bound here: it may go again)
            assert not {(m.state.nodes[p.node_id].name, tuple(p.gpus)) for p in d.placements} & rooms, (window, d.job.name)
        for name in kept:
            # (a gang whose old pods are all gone is forgotten; its room stays with its key)
            old = next(iter(m.gangs[name].pods), None) if name in m.gangs else None
            if old is not None:
                m.pod_changed(None, f"ml/{old}", T0 + 25)  # the old pod is gone now
            add(m, _created(pod(f"{name[3:]}-b", gpus=4, gang=name[3:], size=1, annotations={"usher/movable": "true"}), "10:00:30"), now=T0 + 30)
        placed = {d.job.name: [(m.state.nodes[p.node_id].name, tuple(p.gpus)) for p in d.placements] for d in m.engine.cycle(T0 + 30).decisions}
        assert placed == kept, window
        assert not m.state.kept_rooms


def test_a_job_whose_room_is_kept_is_not_moved_again_and_nothing_is_held_twice():
    """A rebuild while the movers' old pods go adopts them running, their rooms still kept; a
    later cycle must not pick them as movers again (their first room would be held for ever).
    Whatever happens, the GPUs taken are those of the runs plus those of the kept rooms."""
    m = mirror_with(nodes=6, config=MOVES)
    for i in (4, 5):  # the third rack is taken by jobs that may not move
        add(m, pod(f"f{i}-a", gpus=4, gang=f"f{i}", size=1, node_name=f"n{i}", phase="Running",
                   annotations={"usher/gpus": "0,1,2,3", "usher/movable": "false"}))
    kept = _moved(m)
    for name in kept:
        old = next(iter(m.gangs[name].pods))
        m.tear_down(m.gangs[name], "moved", replace=True)
        add(m, _terminating(old, f"n{old[1]}"), now=T0 + 20)
    m.dirty = True
    m.rebuild(T0 + 21)
    evicted = [d.job.name for d in m.engine.cycle(T0 + 40).decisions if d.kind == "evict"]
    assert not set(evicted) & set(kept), evicted
    st = m.state
    held = sum(p.gpu_milli for j in st.jobs if j.current_run for p in j.current_run.placements)
    held += sum(p.gpu_milli for room in st.kept_rooms.values() for p in room.placements)
    assert held == sum(n.gpu_count * 1000 - sum(n.gpu_free) for n in st.nodes)


def _bound_on_all(name: str, node: str, gang: str, size: int, *, terminating: bool = False, phase: str = "Running") -> dict:
    obj = pod(name, gang=gang, size=size, node_name=node, phase=phase, annotations={"usher/gpus": "0,1,2,3,4,5,6,7"})
    if terminating:
        obj["metadata"]["deletionTimestamp"] = "2026-11-21T10:05:00Z"
    return obj


def test_a_pod_adopted_onto_gpus_still_counted_for_an_ending_run_is_counted_once_they_free():
    """A standby watches the leader preempt V (2 x 8 GPUs) for Q: the leader binds q-0 onto n0
    once v-0 is gone, while this replica still counts V's whole run (v-1 is in its grace period
    on n1). q-0 is adopted with none of its GPUs free; they must be counted for it as soon as V's
    run ends, or n0 looks empty while q-0 runs on it, and a replica that leads binds onto it."""
    m = mirror_with(nodes=2)
    add(m, _bound_on_all("v-0", "n0", "v", 2))
    add(m, _bound_on_all("v-1", "n1", "v", 2))
    add(m, pod("q-0", gang="q", size=1))
    add(m, _bound_on_all("v-0", "n0", "v", 2, terminating=True))
    add(m, _bound_on_all("v-1", "n1", "v", 2, terminating=True))
    add(m, _bound_on_all("v-0", "n0", "v", 2, terminating=True, phase="Failed"))
    m.pod_changed(None, "ml/v-0", 0.0)
    add(m, _bound_on_all("q-0", "n0", "q", 1))
    add(m, _bound_on_all("v-1", "n1", "v", 2, terminating=True, phase="Failed"))
    m.pod_changed(None, "ml/v-1", 0.0)
    assert m.state.node("n0").gpu_free == [0] * 8 and m.state.node("n1").gpu_free == [MILLI] * 8
    # n1 is taken too; a pod that waits finds no room
    add(m, _bound_on_all("w-0", "n1", "w", 1))
    add(m, pod("r-0", gang="r", size=1))
    assert not [d for d in m.engine.cycle(0.0).decisions if d.kind == DecisionKind.BIND]
    # q-0 goes: its GPUs are free again
    m.pod_changed(None, "ml/q-0", 0.0)
    assert m.state.node("n0").gpu_free == [MILLI] * 8


PREEMPTING = """
queues:
  - {name: team-a, namespaceSelector: {}, quota: {gpu: 64}, preemption: {withinQueue: LowerPriority}}
"""


def _with_priority(obj: dict[str, Any], value: int) -> dict[str, Any]:
    obj["spec"]["priority"] = value
    return obj


def test_a_gang_whose_binds_are_on_their_way_is_no_victim_even_after_a_rebuild():
    """Its binds cannot be called back: evicting it before they land would let the preemptor
    bind beside them. A rebuild meanwhile (a node added, a config change) makes a new engine job
    for the gang, which must still be settling."""
    m = mirror_with(nodes=1, config=PREEMPTING)
    add(m, _with_priority(pod("low-0", gang="low", size=1), 0))
    [bind] = [d for d in m.engine.cycle(0.0).decisions if d.kind == DecisionKind.BIND]
    gang = m.gangs["ml/low"]
    m.pods_of(gang, bind.placements)
    m.move(gang, GangPhase.RESERVED)  # as the controller's bind task does
    m.move(gang, GangPhase.BINDS_SENT)
    bind.job.settling = True
    m.dirty = True
    m.rebuild(5.0)
    assert gang.job is not bind.job and gang.job.settling
    add(m, _with_priority(pod("high-0", gang="high", size=1), 100), 10.0)
    assert [d for d in m.engine.cycle(10.0).decisions if d.kind == DecisionKind.EVICT] == []


def _bound_on(name: str, node_name: str, gang: str, gpus: int, annotated: range, *, terminating: bool = False,
              phase: str = "Running") -> dict[str, Any]:
    obj = pod(name, gang=gang, size=1, gpus=gpus, node_name=node_name, phase=phase,
              annotations={"usher/gpus": ",".join(map(str, annotated))})
    if terminating:
        obj["metadata"]["deletionTimestamp"] = "2026-11-21T10:05:00Z"
    return obj


def test_what_a_pod_owes_is_never_the_gpus_its_own_placement_took():
    m = mirror_with(nodes=1)
    # r-0 holds GPUs 0-5 and is on its way out; this replica still counts its run
    add(m, _bound_on("r-0", "n0", "r", 6, range(6)))
    add(m, _bound_on("r-0", "n0", "r", 6, range(6), terminating=True))
    # the leader saw r-0 gone and bound p-0 onto 0-3: adopted with 2 GPUs placed and 2 owed
    add(m, _bound_on("p-0", "n0", "p", 4, range(4)))
    n0 = m.state.node("n0")
    assert n0.gpu_free == [0] * 8, "no GPU counted twice"
    add(m, _bound_on("r-0", "n0", "r", 6, range(6), terminating=True, phase="Failed"))
    m.pod_changed(None, "ml/r-0", 0.0)
    assert sorted(n0.gpu_free) == [0] * 4 + [MILLI] * 4, "p-0 holds 4 GPUs, 4 are free"


def test_a_pod_that_owed_gpus_and_was_stranded_frees_them_once_gone():
    m = mirror_with(nodes=1)
    add(m, _bound_on("v-0", "n0", "v", 8, range(8)))
    add(m, _bound_on("v-0", "n0", "v", 8, range(8), terminating=True))
    add(m, _bound_on("q-0", "n0", "q", 8, range(8)))  # adopted with none of its GPUs free
    add(m, _bound_on("v-0", "n0", "v", 8, range(8), terminating=True, phase="Failed"))
    m.pod_changed(None, "ml/v-0", 0.0)
    # n0 goes NotReady and q-0 is deleted there (stranded); then it is gone and n0 is back
    down = node("n0", rack="r0")
    down["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    m.node_changed(node_view(down), "n0", 1.0)
    add(m, _bound_on("q-0", "n0", "q", 8, range(8), terminating=True), 1.0)
    assert "ml/q-0" in m.stranded
    m.pod_changed(None, "ml/q-0", 2.0)
    up = node("n0", rack="r0")
    up["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    m.node_changed(node_view(up), "n0", 3.0)
    assert not m.dirty and m.state.node("n0").gpu_free == [MILLI] * 8


def test_a_job_whose_grow_is_on_its_way_gives_nothing_back_to_a_waiting_job():
    m = mirror_with(nodes=3, config="queues:\n  - {name: team-a, namespaceSelector: {}, quota: {gpu: 64}}\n")
    group = GroupSpec(key="ml/el", kind="Gang", name="el", size=3, minimum=2)
    for i, on in ((0, "n0"), (1, "n1"), (2, None)):
        view = pod_view(pod(f"el-{i}", gpus=8, node_name=on, phase="Running" if on else "Pending"), group)
        m.pod_changed(view, view.key, 0.0)
    m.dirty = True
    m.rebuild(0.0)
    assert m.engine.grow(10.0, m.missing_pods).decisions, "el grows by el-2 onto n2"
    m.gangs["ml/el"].job.settling = True  # as the controller's grow task does while el-2 binds
    urgent = pod_view(_with_priority(pod("urgent", gpus=8), 1000))
    m.pod_changed(urgent, urgent.key, 11.0)
    m.engine.cycle(11.0)
    assert m.engine.shrink_for_waiting(11.0) == []


def test_a_running_elastic_gang_grows_by_a_pod_its_operator_made_after_it_started():
    """An operator makes a job's pods one by one (a PyTorchJob's workers): the gang may start at
    its minimum before the last of them exists, and grows by it once it comes."""
    m = mirror_with(nodes=3, config="queues:\n  - {name: team-a, namespaceSelector: {}, quota: {gpu: 64}}\n")
    group = GroupSpec(key="ml/el", kind="Gang", name="el", size=3, minimum=2)
    for i in range(2):
        view = pod_view(pod(f"el-{i}", gpus=8, node_name=f"n{i}", phase="Running"), group)
        m.pod_changed(view, view.key, 0.0)
    m.dirty = True
    m.rebuild(0.0)
    assert m.engine.grow(5.0, m.missing_pods).decisions == [], "nothing to grow by yet"
    late = pod_view(pod("el-2", gpus=8), group)
    m.pod_changed(late, late.key, 10.0)
    [grow] = m.engine.grow(10.0, m.missing_pods).decisions
    assert [(p.pod, m.state.nodes[p.node_id].name) for p in grow.placements] == [("el-2", "n2")]
    assert len(m.gangs["ml/el"].job.current_run.placements) == 3


def test_a_running_elastic_gang_grows_onto_a_node_whose_storage_capacity_came_after_the_node():
    """A new node's CSIStorageCapacity is published by the driver after the node itself: the
    waiting pod's claim (of a WaitForFirstConsumer class) could not go there when the gang's job
    was made, and may once the capacity comes."""
    from usher.engine.backends.kube.volumes import StorageKind

    m = Mirror("test")
    m.set_config(parse_queue_config("queues:\n  - {name: team-a, namespaceSelector: {}, quota: {gpu: 64}}\n"), None)
    host = "kubernetes.io/hostname"
    for i in range(3):
        obj = node(f"n{i}")
        obj["metadata"]["labels"][host] = f"n{i}"
        v = node_view(obj)
        m.node_changed(v, v.name, 0.0)
    storage = [(StorageKind.DRIVERS, "csi.example.com", {"metadata": {"name": "csi.example.com"}, "spec": {"storageCapacity": True}}),
               (StorageKind.CLASSES, "local", {"metadata": {"name": "local"}, "provisioner": "csi.example.com",
                                               "volumeBindingMode": "WaitForFirstConsumer"})]
    capacity = [(StorageKind.CAPACITIES, f"kube-system/cap-n{i}", {
        "metadata": {"name": f"cap-n{i}", "namespace": "kube-system"}, "storageClassName": "local",
        "nodeTopology": {"matchLabels": {host: f"n{i}"}}, "capacity": "1Ti"}) for i in range(3)]
    for kind, key, obj in storage + capacity[:2]:
        m.volumes.object_changed(kind, key, obj)
    group = GroupSpec(key="ml/el", kind="Gang", name="el", size=3, minimum=2)
    for i, on in ((0, "n0"), (1, "n1"), (2, None)):
        obj = pod(f"el-{i}", gpus=8, node_name=on, phase="Running" if on else "Pending")
        obj["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": f"el-{i}-data"}}]
        claim = {"metadata": {"name": f"el-{i}-data", "namespace": "ml", "uid": f"uid-c{i}"}, "status": {"phase": "Pending"},
                 "spec": {"storageClassName": "local", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}}
        m.volumes.object_changed(StorageKind.CLAIMS, f"ml/el-{i}-data", claim)
        view = pod_view(obj, group)
        m.volumes.pod_changed(view.key, obj, live=True)
        m.pod_changed(view, view.key, 0.0)
    m.dirty = True
    m.rebuild(0.0)
    assert m.engine.grow(5.0, m.missing_pods).decisions == [], "no storage on n2 yet"
    kind, key, obj = capacity[2]
    m.volumes.object_changed(kind, key, obj)
    m.storage_changed(10.0)
    [grow] = m.engine.grow(10.0, m.missing_pods).decisions
    assert [(p.pod, m.state.nodes[p.node_id].name) for p in grow.placements] == [("el-2", "n2")]


def test_a_gang_whose_node_is_deleted_under_it_is_torn_down_before_its_pod_is_gone():
    """`kubectl delete node` without a drain: the gang's pod there stays bound (PodGC deletes it
    40 s later) but the engine's state has no such node. The run cannot count that member, so
    the gang is broken now, not left running with one pod of two once the pod goes."""
    m = mirror_with(nodes=3)
    restart_with(m, pod("w-0", gang="train", size=2, node_name="n0", phase="Running"),
                 pod("w-1", gang="train", size=2, node_name="n1", phase="Running"))
    gang = m.gangs["ml/train"]
    assert gang.teardown is None and len(gang.job.current_run.placements) == 2
    m.node_changed(None, "n1", 5.0)
    m.rebuild(5.0)
    assert gang.teardown == "pod w-1 is bound to node n1, which is gone"


def _half_bound(size: int) -> Mirror:
    """A gang of ``size`` pods that must share a rack, found with one pod on n2 (rack r1)."""
    m = mirror_with()  # n0, n1 in rack r0; n2, n3 in r1
    rack = {"usher/topology-required": "usher/rack"}
    restart_with(m, pod("w-0", gang="train", size=size, node_name="n2", annotations=rack | {"usher/gpus": "0,1,2,3,4,5,6,7"}),
                 *(pod(f"w-{i}", gang="train", size=size, annotations=rack) for i in range(1, size)))
    return m


def test_a_gang_found_half_bound_is_completed_inside_its_bound_pods_topology_domain():
    m = _half_bound(2)
    gang = m.gangs["ml/train"]
    placements = m.engine.complete(gang.job, m.unplaced_members(gang), 5.0)
    # n0 comes first in the cluster's order, but the gang must share a rack with w-0 (on n2)
    assert [(p.pod, m.state.nodes[p.node_id].name) for p in placements] == [("w-1", "n3")]
    assert m.state.node("n3").whole_free == 0 and len(gang.job.current_run.placements) == 2
    assert m.state.queues["team-a"].usage[0] == 16_000
    assert m.state.audit[-1].action == "complete"


def test_a_gang_found_half_bound_is_completed_whole_or_not_at_all():
    m = _half_bound(3)
    gang = m.gangs["ml/train"]
    # two pods to place and only n3 left in rack r1: none is placed, nothing is held for them
    assert m.engine.complete(gang.job, m.unplaced_members(gang), 5.0) == []
    assert m.state.node("n3").whole_free == 8 and len(gang.job.current_run.placements) == 1
    assert m.state.queues["team-a"].usage[0] == 8_000


FENCED = """
queues:
  - {name: team-a, namespaces: [team-a], quota: {gpu: 8}}
  - {name: team-b, namespaceSelector: {matchLabels: {team: b}}, quota: {gpu: 8}}
"""


def test_a_pod_placed_on_a_node_in_a_queue_its_namespace_may_not_use_holds_its_node_but_no_quota():
    """A tenant may create a pod with spec.nodeName set (no scheduler is asked): it runs, so it
    holds its GPUs, but it is charged to no team's quota."""
    m = mirror_with(config=FENCED)
    add(m, pod("squatter", queue="team-a", node_name="n0", phase="Running"))  # namespace ml names team-a
    m.rebuild(0.0)
    assert m.state.queues["team-a"].usage[0] == 0
    assert m.state.queues["not-allowed/ml"].usage[0] == 8000
    assert m.state.node("n0").whole_free == 0
    add(m, pod("honest", queue="team-a", gpus=8))
    assert m.gangs["ml/honest"].reason == PendingReason.QUEUE_NOT_ALLOWED


def test_a_namespace_selector_follows_the_namespaces_labels():
    m = mirror_with(config=FENCED)
    m.namespace_changed("ml", {"team": "a"})
    m.rebuild(0.0)  # as the controller does at its next tick once the mirror is dirty
    add(m, pod("w", queue="team-b", gpus=8))
    assert m.gangs["ml/w"].reason == PendingReason.QUEUE_NOT_ALLOWED
    assert "namespaces labelled team=b" in m.gangs["ml/w"].message
    m.namespace_changed("ml", {"team": "b"})
    m.rebuild(0.0)
    assert [d.kind for d in m.engine.cycle(0.0).decisions] == [DecisionKind.BIND]


def test_a_queue_name_that_no_pod_label_could_hold_is_refused():
    import pytest
    from usher.engine.scenario import ScenarioError
    with pytest.raises(ScenarioError, match="cannot be a queue's name"):
        parse_queue_config("queues:\n  - {name: not-allowed/ml, quota: {gpu: 8}}\n", "q")

"""Operator commands that land while usher is binding (or growing) a gang (found by ``bench/chaos.py --operator``).

A preemptor's binds wait until its victims are gone, which takes their whole grace period. An
operator who cordons (or drains) the node meanwhile, or holds the preemptor, has been told
"cordoned" / "held", and usher's mirror shows it: the binds must not go ahead onto that node, nor
for that job, once the wait is over.
"""

from __future__ import annotations

from sandboxes import UsherOnSandbox, node, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)

from test_workload_gangs import eight_gpu_nodes, gpu_template, running_whole
from test_preemption_on_cluster import JOBS, PREEMPTING, evictions, job, priority_class, rejected, running, ticks

from usher.engine.channel import Command
from usher.engine.enums import Action, AuditAction


async def urgent_waiting_for_its_room(sb: UsherOnSandbox) -> str:
    """low runs on gpu-0 (8 GPUs) and takes 30 s to go when evicted; urgent (8 GPUs, higher
    priority) preempts it and waits for it to leave before binding onto gpu-0. urgent's gang key."""
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.start_usher(sb.tmp, PREEMPTING)
    await sb.create(JOBS, job("low", 8, grace=30))
    await sb.until(lambda: running(sb, "low"), "low runs")
    sb.advance(60)
    await priority_class(sb, "urgent", 100)
    await sb.create(JOBS, job("urgent", 8, priority_class="urgent"))

    async def low_evicted() -> bool | None:
        return bool(evictions(sb)) or None

    await sb.until(low_evicted, "low is evicted for urgent")
    await ticks(sb, 1)
    [gang] = [g for g in sb.usher.mirror.gangs.values() if g.key.endswith("/urgent")]
    assert gang.binding, "urgent's binds wait for low to go"
    return gang.key


def low_evicted_again(sb: UsherOnSandbox):
    async def check() -> bool | None:
        return len(evictions(sb)) >= 2 or None
    return check


async def urgent_pods(sb: UsherOnSandbox) -> list[dict]:
    return await sb.pods("job-name=urgent")


async def test_a_node_cordoned_while_a_preemptor_waits_for_its_room_gets_no_bind(sb: UsherOnSandbox) -> None:
    await urgent_waiting_for_its_room(sb)
    assert await sb.usher.post(Command(Action.CORDON, node="gpu-0")) == "cordoned"
    await ticks(sb, 1)
    assert sb.usher.mirror.nodes["gpu-0"].unschedulable
    sb.advance(31)  # low is gone
    await ticks(sb, 3)
    assert rejected(await sb.all_pods()) == []
    assert [p["spec"].get("nodeName") for p in await urgent_pods(sb)] == [None], "bound onto the node the operator cordoned"
    assert await sb.usher.post(Command(Action.UNCORDON, node="gpu-0")) == "uncordoned"
    [urgent] = await sb.until(lambda: running(sb, "urgent"), "urgent runs once gpu-0 is uncordoned")
    assert urgent["spec"]["nodeName"] == "gpu-0"


async def test_a_preemptor_held_while_it_waits_for_its_room_is_not_bound(sb: UsherOnSandbox) -> None:
    key = await urgent_waiting_for_its_room(sb)
    assert await sb.usher.post(Command(Action.HOLD, job=key)) == "held"
    await ticks(sb, 1)
    sb.advance(31)  # low is gone
    await ticks(sb, 3)
    assert [p["spec"].get("nodeName") for p in await urgent_pods(sb)] == [None], "bound although the operator held it"
    # meanwhile low's Job made its pod anew, and it runs again on the room urgent no longer takes
    await sb.until(lambda: running(sb, "low"), "low runs again while urgent is held")
    sb.advance(10)  # (a job started this very moment is no victim)
    assert await sb.usher.post(Command(Action.RELEASE, job=key)) == "released"
    await sb.until(low_evicted_again(sb), "low is evicted again for urgent")
    sb.advance(31)
    [urgent] = await sb.until(lambda: running(sb, "urgent"), "urgent runs once released")
    assert urgent["spec"]["nodeName"] == "gpu-0" and rejected(await sb.all_pods()) == []


async def test_a_held_elastic_job_runs_on_but_does_not_grow_until_released(sb: UsherOnSandbox) -> None:
    """An elastic PyTorchJob runs at its minimum (a Master and 1 of 2 Workers) on two nodes; the
    operator holds it, and a third node comes: it does not grow (nor decide to, again and again),
    until it is released."""
    await eight_gpu_nodes(sb, 2)
    await sb.start_usher(sb.tmp, PREEMPTING)
    replica = {"restartPolicy": "OnFailure", "template": gpu_template(8)}
    await sb.create("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs", {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "ft"},
        "spec": {"elasticPolicy": {"minReplicas": 1, "maxReplicas": 2},
                 "pytorchReplicaSpecs": {"Master": {**replica, "replicas": 1}, "Worker": {**replica, "replicas": 2}}},
    })
    await running_whole(sb, "training.kubeflow.org/job-name=ft", 2)
    [gang] = [g for g in sb.usher.mirror.gangs.values() if g.key.endswith("/ft")]
    assert await sb.usher.post(Command(Action.HOLD, job=gang.key)) == "held"
    await ticks(sb, 1)
    audit_before = len(sb.usher.state.audit)
    await eight_gpu_nodes(sb, 1, first=3)
    await ticks(sb, 3)
    bound = [p for p in await sb.pods("training.kubeflow.org/job-name=ft") if p["spec"].get("nodeName")]
    assert len(bound) == 2, "grew although the operator held it"
    assert [e for e in sb.usher.state.audit[audit_before:] if e.action == AuditAction.GROW] == []
    assert await sb.usher.post(Command(Action.RELEASE, job=gang.key)) == "released"
    await running_whole(sb, "training.kubeflow.org/job-name=ft", 3)

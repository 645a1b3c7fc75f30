"""Consolidation on a cluster (issue 15): a gang waiting for a rack starts once two jobs are moved,
through the API as a real cluster does it: the movers' pods are evicted, their owner creates them
again, and usher binds them into the room it kept for them on the other rack.

The first test plays ``fixtures/examples/consolidation.yaml`` (four 8-GPU nodes in two racks, one
long 4-GPU job left per node, a 16-GPU gang that needs one rack at 700 s); the sandbox's World
plays each pod's owner: an evicted pod is created again at once, its work cut to its last
checkpoint. The others run batch Jobs under the sandbox's Job controller, which makes evicted
pods anew under other names, and PodDisruptionBudgets that refuse the evictions (usher asks with
a dry run first, so a move or a preemption a budget forbids evicts nothing).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from harness import Cluster, per_job, replay_starts
from sandboxes import UsherOnSandbox, node, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)
from test_controller import cluster  # noqa: F401 (the fixture that makes a Cluster of a scenario)

from usher.engine.backends.kube.controller import EVICTION_REFUSED_BACKOFF
from usher.engine.enums import AuditAction

SCATTERED = (Path(__file__).resolve().parents[2] / "fixtures" / "examples" / "consolidation.yaml").read_text()


def _evictions(c: Cluster | UsherOnSandbox, dry_run: bool = False) -> Counter:
    """Pods asked to be evicted (or, with ``dry_run``, only checked), and how many times."""
    return Counter(
        r.path.split("/")[-2] for r in c.server.requests
        if r.path.endswith("/eviction") and r.method == "POST" and ("dryRun" in r.query) == dry_run
    )


async def test_the_gang_starts_at_once_and_the_moved_jobs_start_again_in_the_room_kept_for_them(cluster) -> None:
    c = await cluster(SCATTERED)
    ctrl = await c.controller()
    await c.play()
    starts = c.starts()
    gang = [s for s in starts if s[0] == "gang"]
    assert [t for _, t, _, _ in gang] == [700.0, 700.0]
    gang_racks = {_rack(c, node) for _, _, node, _ in gang}
    assert len(gang_racks) == 1
    # two long jobs were moved: each of their pods evicted once, bound again at 700 s on the
    # other rack; nothing else was evicted
    evicted = _evictions(c)
    assert sorted(evicted.values()) == [1, 1]
    moved = sorted(pod.rsplit("-", 2)[0] for pod in evicted)
    assert len(moved) == 2 and all(m.startswith("long-") for m in moved)
    for name in moved:
        runs = [s for s in starts if s[0] == name]
        assert [t for _, t, _, _ in runs] == [0.0, 700.0]
        assert _rack(c, runs[1][2]) not in gang_racks
    # each evicted pod says why, where a user looks (kubectl describe pod)
    for pod in evicted:
        said = [e["message"] for e in c.server.store.list("events", "default").objects() if e["involvedObject"]["name"] == pod]
        assert any("moved to make room for default/gang: usher binds its pods again on n" in m for m in said), said
    # exactly what the replay does, where a move is a stop and a start at the same moment
    assert per_job(starts) == per_job(replay_starts(c.scenario))
    # the events view tells the story: moving, room kept, started again there, the gang's start
    audit = ctrl.state.audit
    moves = [e for e in audit if e.action == AuditAction.MOVE]
    assert sorted(e.target for e in moves) == [f"default/{m}" for m in moved]  # the gangs' keys
    assert all("so that default/gang could start in usher/rack=" in e.result and "is kept for 10m" in e.result for e in moves), moves
    back = [e for e in audit if e.action == AuditAction.KEEP_ROOM]
    assert sorted(e.target for e in back) == [f"default/{m}" for m in moved]
    assert all(e.result.startswith("started again on ") and "moved for default/gang" in e.result for e in back), back
    assert any(e.action == AuditAction.MAKE_ROOM and e.target == "default/gang" for e in audit)
    assert not ctrl.state.kept_rooms
    total = sum(p.count for j in c.scenario.jobs for p in j.pods)
    assert len(c.world.finished) == total


def _rack(c: Cluster, node: str) -> str:
    return c.server.store.get("nodes", node)["metadata"]["labels"]["usher/rack"]


RACKS = """
topology: {levels: [usher/rack, kubernetes.io/hostname]}
queues:
  - {name: research, quota: {gpu: 64}, namespaces: [default]}
"""


def _job(name: str, parallelism: int, gpus: int, annotations: dict[str, str] | None = None, backoff_limit: int = 6) -> dict:
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"parallelism": parallelism, "completions": parallelism, "backoffLimit": backoff_limit, "template": {
            "metadata": {"annotations": annotations or {}},
            "spec": {
                "schedulerName": "usher", "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": "trainer:1",
                                "resources": {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}],
            },
        }},
    }


async def _one_long_job_per_node(sb: UsherOnSandbox, backoff_limits: tuple[int, ...] = (6, 6, 6, 6)) -> dict[str, str]:
    """Four 1-pod batch Jobs of 4 GPUs, one per 8-GPU node (placed one node at a time, the others
    cordoned), running a minute by the time this returns; their first pods' names by Job."""
    for i in range(4):
        await sb.create("/api/v1/nodes", node(f"gpu-{i}", labels={"usher/rack": "ab"[i // 2]}) | {"spec": {"unschedulable": True}})
    await sb.start_usher(sb.tmp, RACKS)
    first: dict[str, str] = {}
    for i in range(4):
        await sb.req("PATCH", f"/api/v1/nodes/gpu-{i}", {"spec": {"unschedulable": False}})
        await sb.create("/apis/batch/v1/namespaces/default/jobs", _job(f"long-{i}", 1, 4, backoff_limit=backoff_limits[i]))
        [p] = await sb.until(lambda i=i: _running(sb, f"job-name=long-{i}", 1), f"long-{i} runs")
        assert p["spec"]["nodeName"] == f"gpu-{i}"
        first[f"long-{i}"] = p["metadata"]["name"]
        await sb.req("PATCH", f"/api/v1/nodes/gpu-{i}", {"spec": {"unschedulable": True}})
    for i in range(4):
        await sb.req("PATCH", f"/api/v1/nodes/gpu-{i}", {"spec": {"unschedulable": False}})
    sb.advance(60)  # they have worked a while: a job admitted this very moment is never moved
    return first


BIG = _job("big", 2, 8, {"usher/topology-required": "usher/rack"})


async def test_batch_jobs_are_moved_and_the_pods_their_job_makes_anew_land_in_the_room_kept(sb: UsherOnSandbox) -> None:
    """A 2x8-GPU Job that needs one rack, beside one 4-GPU Job per node: usher evicts two of
    them, the Job controller makes their pods anew (other names), and usher binds those where it
    kept room; no node is overcommitted."""
    first = await _one_long_job_per_node(sb)
    await sb.create("/apis/batch/v1/namespaces/default/jobs", BIG)
    big = await sb.until(lambda: _running(sb, "job-name=big", 2), "big runs", deadline=30.0)
    [rack] = {_rack_of_node(p["spec"]["nodeName"]) for p in big}
    longs = [(await sb.until(lambda i=i: _running(sb, f"job-name=long-{i}", 1), f"long-{i} runs again"))[0] for i in range(4)]
    moved = [p for p in longs if p["metadata"]["name"] != first[p["metadata"]["labels"]["job-name"]]]
    assert len(moved) == 2  # made anew by the Job controller, under new names
    assert all(_rack_of_node(p["spec"]["nodeName"]) != rack for p in longs)
    used: dict[str, int] = {}
    for p in [*big, *longs]:
        used[p["spec"]["nodeName"]] = used.get(p["spec"]["nodeName"], 0) + int(p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"])
    assert used == {f"gpu-{i}": 8 for i in range(4)}
    for p in moved:
        old = first[p["metadata"]["labels"]["job-name"]]
        said = [e["message"] for e in await sb.events_of(old)]
        assert any("moved to make room for Job default/big" in m for m in said), said
    assert not sb.usher.state.kept_rooms
    scrape = sb.usher.metrics.render().decode()
    assert 'usher_jobs_moved_total{queue="research"} 2.0' in scrape
    assert 'usher_preemptions_total{queue="research"} 0.0' in scrape  # a move is not a preemption


async def _running(sb: UsherOnSandbox, selector: str, count: int) -> list[dict] | None:
    pods = [p for p in await sb.pods(selector) if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
    return pods if len(pods) == count else None


def _rack_of_node(name: str) -> str:
    return "ab"[int(name.rsplit("-", 1)[1]) // 2]


async def test_a_move_refused_by_a_disruption_budget_binds_nothing_and_is_not_asked_again_at_once(sb: UsherOnSandbox) -> None:
    """A PodDisruptionBudget forbids evicting the long Jobs' pods. The refused eviction must not
    leave the gang bound onto nodes its would-be movers still hold (the kubelet would reject the
    pods, and the Job would fail), nor be asked again every tick; once the budget is gone and the
    back-off has passed, the move happens."""
    first = await _one_long_job_per_node(sb)
    await sb.create("/apis/policy/v1/namespaces/default/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep-long"},
        "spec": {"maxUnavailable": 0, "selector": {"matchExpressions": [
            {"key": "job-name", "operator": "In", "values": [f"long-{i}" for i in range(4)]}]}},
    })
    await sb.create("/apis/batch/v1/namespaces/default/jobs", BIG)

    # one rack's long Jobs are refused, then (spared for a while) the other rack's: asked
    # without evicting (a dry run), so nothing is evicted for a move that cannot be made
    blocked = await _blocked(sb, 4)
    assert all("moved to make room for Job default/big" in e["message"] and "disruption budget" in e["message"] for e in blocked)
    await asyncio.sleep(3.0)  # three ticks or more of the controller's loop (it ticks every second at least)
    assert not _evictions(sb)
    assert sorted(_evictions(sb, dry_run=True)) == sorted(first.values()) and set(_evictions(sb, dry_run=True).values()) == {1}
    assert sorted(e["involvedObject"]["name"].rsplit("-", 1)[0] for e in blocked) == [f"long-{i}" for i in range(4)]
    called_off = [e for e in sb.usher.state.audit if e.action == AuditAction.KEEP_ROOM]
    assert len(called_off) == 4 and all("the move was called off" in e.result for e in called_off), called_off
    assert not sb.usher.state.kept_rooms
    big = await sb.pods("job-name=big")
    assert len(big) == 2 and not any(p["spec"].get("nodeName") for p in big), [p["spec"].get("nodeName") for p in big]
    job = await sb.get("/apis/batch/v1/namespaces/default/jobs/big")
    assert not job["status"].get("failed"), job["status"]
    assert [(await _running(sb, f"job-name=long-{i}", 1)) is not None for i in range(4)] == [True] * 4
    # the budget goes; after the back-off the gang starts and two long Jobs run again elsewhere
    await sb.req("DELETE", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/keep-long")
    sb.advance(EVICTION_REFUSED_BACKOFF + 1)
    await sb.until(lambda: _running(sb, "job-name=big", 2), "big runs", deadline=30.0)
    for i in range(4):
        await sb.until(lambda i=i: _running(sb, f"job-name=long-{i}", 1), f"long-{i} runs")


async def _blocked(sb: UsherOnSandbox, at_least: int) -> list[dict]:
    """The EvictionBlocked Events, once there are ``at_least`` of them."""

    async def found() -> list[dict] | None:
        items = (await sb.req("GET", "/api/v1/namespaces/default/events"))["items"]
        hits = [e for e in items if e["reason"] == "EvictionBlocked"]
        return hits if len(hits) >= at_least else None

    return await sb.until(found, f"{at_least} evictions refused")


async def _submit_urgent(sb: UsherOnSandbox) -> None:
    """An 8-GPU Job of priority 100 (its PriorityClass made first, as a cluster needs)."""
    await sb.create("/apis/scheduling.k8s.io/v1/priorityclasses", {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "urgent"}, "value": 100})
    urgent = _job("urgent", 1, 8)
    urgent["spec"]["template"]["spec"]["priorityClassName"] = "urgent"
    await sb.create("/apis/batch/v1/namespaces/default/jobs", urgent)


PREEMPTING = """
queues:
  - {name: research, quota: {gpu: 64}, namespaces: [default], preemption: {withinQueue: LowerPriority}}
"""


async def test_a_preemption_refused_by_a_disruption_budget_binds_nothing_either(sb: UsherOnSandbox) -> None:
    """The same refusal when preempting: the urgent pod is never bound onto a node its victim
    still holds, and each victim is asked once until the back-off has passed."""
    for i in range(2):
        await sb.create("/api/v1/nodes", node(f"gpu-{i}"))
    await sb.start_usher(sb.tmp, PREEMPTING)
    for i in range(2):
        await sb.create("/apis/batch/v1/namespaces/default/jobs", _job(f"low-{i}", 1, 8))
    for i in range(2):
        await sb.until(lambda i=i: _running(sb, f"job-name=low-{i}", 1), f"low-{i} runs")
    await sb.create("/apis/policy/v1/namespaces/default/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep-low"},
        "spec": {"maxUnavailable": 0, "selector": {"matchExpressions": [{"key": "job-name", "operator": "In", "values": ["low-0", "low-1"]}]}},
    })
    sb.advance(60)
    await _submit_urgent(sb)

    await _blocked(sb, 2)
    await asyncio.sleep(3.0)
    assert not _evictions(sb) and sum(_evictions(sb, dry_run=True).values()) == 2
    [pod] = await sb.pods("job-name=urgent")
    assert not pod["spec"].get("nodeName") and pod["status"]["phase"] == "Pending"
    await sb.req("DELETE", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/keep-low")
    sb.advance(EVICTION_REFUSED_BACKOFF + 1)
    await sb.until(lambda: _running(sb, "job-name=urgent", 1), "urgent runs", deadline=30.0)


async def test_a_move_half_forbidden_evicts_nothing_in_that_rack_and_is_made_in_the_other(sb: UsherOnSandbox) -> None:
    """A budget protects one long Job only. Moving the two of rack a would be stopped halfway
    (one evicted for nothing): the dry run sees it first, so usher evicts nobody there and moves
    the two of rack b instead."""
    first = await _one_long_job_per_node(sb)
    await sb.create("/apis/policy/v1/namespaces/default/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep-long-1"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"job-name": "long-1"}}},
    })
    await sb.create("/apis/batch/v1/namespaces/default/jobs", BIG)
    big = await sb.until(lambda: _running(sb, "job-name=big", 2), "big runs", deadline=30.0)
    assert {p["spec"]["nodeName"] for p in big} == {"gpu-2", "gpu-3"}
    assert sorted(_evictions(sb)) == [first["long-2"], first["long-3"]]
    for i in range(4):
        [p] = await sb.until(lambda i=i: _running(sb, f"job-name=long-{i}", 1), f"long-{i} runs")
        assert (p["metadata"]["name"] == first[f"long-{i}"]) == (i < 2)  # rack a's never evicted


async def test_a_job_an_eviction_would_fail_is_never_moved(sb: UsherOnSandbox) -> None:
    """Rack a's long Jobs have backoffLimit 0: an evicted pod counts as a failure, so moving one
    would end it for good. usher leaves them alone and moves rack b's instead."""
    first = await _one_long_job_per_node(sb, backoff_limits=(0, 0, 6, 6))
    await sb.create("/apis/batch/v1/namespaces/default/jobs", BIG)
    big = await sb.until(lambda: _running(sb, "job-name=big", 2), "big runs", deadline=30.0)
    assert {p["spec"]["nodeName"] for p in big} == {"gpu-2", "gpu-3"}  # the rack whose Jobs could move
    assert sorted(_evictions(sb)) == [first["long-2"], first["long-3"]] and not _evictions(sb, dry_run=True) - _evictions(sb)
    for i in range(4):
        job = await sb.get(f"/apis/batch/v1/namespaces/default/jobs/long-{i}")
        assert not any(c["type"] == "Failed" for c in job["status"].get("conditions") or []), job["status"]
        await sb.until(lambda i=i: _running(sb, f"job-name=long-{i}", 1), f"long-{i} runs")


async def test_preemption_takes_a_victim_that_comes_back_before_one_an_eviction_would_end(sb: UsherOnSandbox) -> None:
    """Two low-priority Jobs fill two nodes; low-0 has backoffLimit 0 (an eviction would fail it
    for good) and has run for less time, so the order by work lost alone would take it. usher
    takes low-1, whose Job makes its pod anew, and low-0 runs on."""
    for i in range(2):
        await sb.create("/api/v1/nodes", node(f"gpu-{i}"))
    await sb.start_usher(sb.tmp, PREEMPTING)
    await sb.create("/apis/batch/v1/namespaces/default/jobs", _job("low-1", 1, 8))
    [first] = await sb.until(lambda: _running(sb, "job-name=low-1", 1), "low-1 runs")
    sb.advance(600)
    await sb.create("/apis/batch/v1/namespaces/default/jobs", _job("low-0", 1, 8, backoff_limit=0))
    [kept] = await sb.until(lambda: _running(sb, "job-name=low-0", 1), "low-0 runs")
    sb.advance(60)
    await _submit_urgent(sb)
    await sb.until(lambda: _running(sb, "job-name=urgent", 1), "urgent runs", deadline=30.0)
    assert sorted(_evictions(sb)) == [first["metadata"]["name"]]
    [still] = await sb.until(lambda: _running(sb, "job-name=low-0", 1), "low-0 runs on")
    assert still["metadata"]["uid"] == kept["metadata"]["uid"]
    low1 = await sb.get("/apis/batch/v1/namespaces/default/jobs/low-1")
    assert not any(c["type"] == "Failed" for c in low1["status"].get("conditions") or [])
    assert len(await sb.pods("job-name=low-1")) >= 1  # made anew; it waits for room


async def test_a_gang_a_budget_lets_lose_one_pod_but_not_two_is_not_preempted_at_all(sb: UsherOnSandbox) -> None:
    """A 2-pod gang under a budget of minAvailable 1: each pod alone may go (a dry run passes for
    each), both may not. Evicting them would stop halfway and leave a broken gang whose last pod
    the budget then guards for ever. usher reads the budget and evicts neither."""
    for i in range(2):
        await sb.create("/api/v1/nodes", node(f"gpu-{i}"))
    await sb.start_usher(sb.tmp, PREEMPTING)
    await sb.create("/apis/batch/v1/namespaces/default/jobs", _job("pair", 2, 8))
    before = await sb.until(lambda: _running(sb, "job-name=pair", 2), "pair runs")
    await sb.create("/apis/policy/v1/namespaces/default/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep-one"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"job-name": "pair"}}},
    })
    sb.advance(60)
    await _submit_urgent(sb)

    blocked = await _blocked(sb, 2)
    assert all("fall under PodDisruptionBudget default/keep-one, which allows 1 disruption(s) now" in e["message"] for e in blocked)
    await asyncio.sleep(3.0)
    assert not _evictions(sb)
    after = await sb.until(lambda: _running(sb, "job-name=pair", 2), "pair runs on")
    assert {p["metadata"]["uid"] for p in after} == {p["metadata"]["uid"] for p in before}
    [pod] = await sb.pods("job-name=urgent")
    assert not pod["spec"].get("nodeName")


async def test_pods_not_ready_take_nothing_from_a_budget_that_lets_them_go(sb: UsherOnSandbox) -> None:
    """A gang whose pods are not Ready (still loading, say) under a budget whose
    unhealthyPodEvictionPolicy is AlwaysAllow: the eviction API lets them go whatever the budget
    says, so usher's count of pods per budget must not hold the preemption back."""
    for i in range(2):
        await sb.create("/api/v1/nodes", node(f"gpu-{i}"))
    await sb.start_usher(sb.tmp, PREEMPTING)
    await sb.create("/apis/batch/v1/namespaces/default/jobs", _job("pair", 2, 8))
    for p in await sb.until(lambda: _running(sb, "job-name=pair", 2), "pair runs"):
        status = p["status"] | {"conditions": [c | {"status": "False"} if c["type"] == "Ready" else c for c in p["status"]["conditions"]]}
        await sb.req("PATCH", f"/api/v1/namespaces/default/pods/{p['metadata']['name']}/status", {"status": status})
    await sb.create("/apis/policy/v1/namespaces/default/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep-both"},
        "spec": {"minAvailable": 2, "unhealthyPodEvictionPolicy": "AlwaysAllow", "selector": {"matchLabels": {"job-name": "pair"}}},
    })
    sb.advance(60)
    await _submit_urgent(sb)
    await sb.until(lambda: _running(sb, "job-name=urgent", 1), "urgent runs", deadline=30.0)
    assert len(_evictions(sb)) == 2

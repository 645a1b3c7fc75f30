"""The sandbox's node lifecycle controller, taint-based eviction and pod garbage collector against
what a real control plane does to a node whose kubelet goes silent (kube-controller-manager's
nodelifecycle, tainteviction and podgc; kube-apiserver's DefaultTolerationSeconds plugin).

Time is the store's ManualClock; tests move it and step the controllers. The kubectl checks run
the real binary against a sandbox in a thread.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest
import yaml
from kubectl import Kubectl
from sandboxes import Sandbox, node, pod
from test_sandbox_controllers import cond, phase, sb  # noqa: F401 (sb: the plain sandbox fixture)

from usher.sandbox.apiserver import FakeApiServer, ServerThread
from usher.sandbox.objects import node_conditions, unreachable_conditions

UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"


async def _status(sb: Sandbox, name: str, conditions: list[dict]) -> None:
    r = await sb.http.patch(f"/api/v1/nodes/{name}/status", json={"status": {"conditions": conditions}},
                            headers={"Content-Type": "application/strategic-merge-patch+json"})
    assert r.status_code == 200, r.text


async def _silence(sb: Sandbox, name: str) -> None:
    """The node's kubelet stopped posting status: what the node lifecycle controller writes."""
    await _status(sb, name, unreachable_conditions(sb.server.store.now()))


async def _taints(sb: Sandbox, name: str) -> set[tuple[str, str]]:
    sb.server.controllers.step()
    return {(t["key"], t["effect"]) for t in (await sb.get(f"/api/v1/nodes/{name}"))["spec"].get("taints") or []}


async def _gone(sb: Sandbox, name: str) -> bool:
    return await sb.get(f"/api/v1/namespaces/default/pods/{name}") is None


async def _running_on_n1_of_two(sb: Sandbox, name: str) -> None:
    """Nodes n1 and n2 (so that one down is not every node down), and the pod ``name`` running on n1."""
    await sb.create("/api/v1/nodes", node("n1"))
    await sb.create("/api/v1/nodes", node("n2"))
    await sb.create("/api/v1/namespaces/default/pods", pod(name, node_name="n1"))
    await sb.pod_where(name, lambda p: phase(p) == "Running")


async def _settle(sb: Sandbox) -> None:
    await asyncio.sleep(0.1)
    sb.server.controllers.step()


async def test_every_new_pod_tolerates_a_lost_node_for_300_seconds_unless_a_toleration_of_its_own_covers_it(sb):
    await sb.create("/api/v1/namespaces/default/pods", pod("plain"))
    await sb.create("/api/v1/namespaces/default/pods", pod("everything", tolerations=[{"operator": "Exists"}]))
    await sb.create("/api/v1/namespaces/default/pods", pod("brief", tolerations=[
        {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}]))
    await sb.create("/api/v1/namespaces/default/pods", pod("schedule-only", tolerations=[
        {"key": NOT_READY, "operator": "Exists", "effect": "NoSchedule"}]))

    def added(p: dict) -> list[tuple[str, int | None]]:
        return [(t.get("key"), t.get("tolerationSeconds")) for t in p["spec"].get("tolerations") or []
                if t.get("effect") == "NoExecute" and t.get("key") in (NOT_READY, UNREACHABLE)]

    got = {n: added(await sb.get(f"/api/v1/namespaces/default/pods/{n}")) for n in ("plain", "everything", "brief", "schedule-only")}
    assert got == {
        "plain": [(NOT_READY, 300), (UNREACHABLE, 300)],
        "everything": [],  # an empty key with any effect covers both
        "brief": [(UNREACHABLE, 10), (NOT_READY, 300)],  # its own first, then the one it lacked
        "schedule-only": [(NOT_READY, 300), (UNREACHABLE, 300)],  # a NoSchedule toleration covers nothing here
    }


async def test_a_silent_node_is_tainted_its_pods_marked_not_ready_evicted_after_300_s_and_left_terminating(sb):
    await sb.create("/api/v1/nodes", node("n1"))
    await sb.create("/api/v1/nodes", node("n2"))
    await sb.create("/api/v1/namespaces/default/pods", pod("victim", node_name="n1"))
    await sb.create("/api/v1/namespaces/default/pods", pod("stays", node_name="n1", tolerations=[
        {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}]))
    await sb.create("/api/v1/namespaces/default/pods", pod("short", node_name="n1", annotations={"usher/duration": "100s"},
                                                           tolerations=[{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}]))
    for name in ("victim", "stays", "short"):
        await sb.pod_where(name, lambda p: phase(p) == "Running")

    await _silence(sb, "n1")
    assert await _taints(sb, "n1") == {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}
    assert all("timeAdded" in t for t in (await sb.get("/api/v1/nodes/n1"))["spec"]["taints"])
    assert await _taints(sb, "n2") == set()
    victim = await sb.pod_where("victim", lambda p: cond(p, "Ready")["status"] == "False")
    assert phase(victim) == "Running" and cond(victim, "ContainersReady")["status"] == "True"  # only Ready is touched

    sb.advance(299)
    await _settle(sb)
    assert not (await sb.get("/api/v1/namespaces/default/pods/victim"))["metadata"].get("deletionTimestamp")
    sb.advance(1)
    victim = await sb.pod_where("victim", lambda p: p["metadata"].get("deletionTimestamp"))
    assert cond(victim, "DisruptionTarget")["reason"] == "DeletionByTaintManager"
    sb.advance(600)  # no kubelet confirms the deletion, nor reports the short pod's end
    await _settle(sb)
    assert phase(await sb.get("/api/v1/namespaces/default/pods/victim")) == "Running"
    assert phase(await sb.get("/api/v1/namespaces/default/pods/short")) == "Running"

    await _status(sb, "n1", node_conditions(sb.server.store.now()))  # the kubelet is back
    assert await _taints(sb, "n1") == set()
    await sb.until(lambda: _gone(sb, "victim"), "the kubelet finishes the deletion")
    await sb.pod_where("short", lambda p: phase(p) == "Succeeded")
    await sb.pod_where("stays", lambda p: phase(p) == "Running" and cond(p, "Ready")["status"] == "True")


async def test_a_node_reporting_not_ready_gets_the_not_ready_taints_and_its_kubelet_still_finishes_deletions(sb):
    await _running_on_n1_of_two(sb, "p")
    await _status(sb, "n1", [{"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "container runtime is down"}])
    assert await _taints(sb, "n1") == {(NOT_READY, "NoSchedule"), (NOT_READY, "NoExecute")}
    await sb.req("DELETE", "/api/v1/namespaces/default/pods/p")
    await sb.until(lambda: _gone(sb, "p"), "deleted by its (living) kubelet")


async def test_when_no_node_is_ready_the_control_plane_evicts_nothing(sb):
    """A cluster whose every node went silent at once: the control plane takes itself to be the
    one cut off and adds no NoExecute taint, so nothing is evicted."""
    await sb.create("/api/v1/nodes", node("only"))
    await sb.create("/api/v1/namespaces/default/pods", pod("p", node_name="only"))
    await sb.pod_where("p", lambda p: phase(p) == "Running")
    await _silence(sb, "only")
    assert await _taints(sb, "only") == {(UNREACHABLE, "NoSchedule")}
    sb.advance(3600)
    await _settle(sb)
    assert not (await sb.get("/api/v1/namespaces/default/pods/p"))["metadata"].get("deletionTimestamp")


async def test_a_small_zone_mostly_down_gets_no_evictions_while_a_healthy_zone_does(sb):
    for i in range(4):
        await sb.create("/api/v1/nodes", node(f"a{i}", labels={"topology.kubernetes.io/zone": "a"}))
    await sb.create("/api/v1/nodes", node("b0", labels={"topology.kubernetes.io/zone": "b"}))
    await sb.create("/api/v1/nodes", node("b1", labels={"topology.kubernetes.io/zone": "b"}))
    for i in range(3):
        await _silence(sb, f"a{i}")
    # a0 and a1 went down while their zone was healthy; with a2, 3 of its 4 nodes are down: partly
    # disrupted and small, so no more NoExecute taints there (those added stay)
    assert await _taints(sb, "a1") == {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}
    assert await _taints(sb, "a2") == {(UNREACHABLE, "NoSchedule")}
    await _silence(sb, "b0")  # 1 of 2: a zone in its normal state
    assert await _taints(sb, "b0") == {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}


async def test_a_cordoned_node_carries_the_unschedulable_taint_until_uncordoned(sb):
    await sb.create("/api/v1/nodes", node("n1", taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]))
    await sb.req("PATCH", "/api/v1/nodes/n1", {"spec": {"unschedulable": True}})
    assert await _taints(sb, "n1") == {("dedicated", "NoSchedule"), ("node.kubernetes.io/unschedulable", "NoSchedule")}
    await sb.req("PATCH", "/api/v1/nodes/n1", {"spec": {"unschedulable": False}})
    assert await _taints(sb, "n1") == {("dedicated", "NoSchedule")}  # the user's taint is never touched


async def test_pods_of_a_deleted_node_are_marked_failed_and_removed_after_40_seconds(sb):
    await _running_on_n1_of_two(sb, "orphan")
    seen: list[dict] = []
    sb.server.store.add_listener(lambda change: seen.append(change.new.obj) if change.new.obj["metadata"]["name"] == "orphan" else None)
    await _silence(sb, "n1")
    await sb.req("DELETE", "/api/v1/nodes/n1")
    sb.advance(39)
    await _settle(sb)
    assert not await _gone(sb, "orphan")
    sb.advance(1)
    await sb.until(lambda: _gone(sb, "orphan"), "PodGC removes it")
    last = seen[-1]
    assert phase(last) == "Failed"
    assert cond(last, "DisruptionTarget")["reason"] == "DeletionByPodGC"
    assert cond(last, "DisruptionTarget")["message"] == "PodGC: node no longer exists"


async def test_the_out_of_service_taint_lets_podgc_remove_what_a_dead_node_keeps_terminating(sb):
    await _running_on_n1_of_two(sb, "stuck")
    await _silence(sb, "n1")
    await sb.req("DELETE", "/api/v1/namespaces/default/pods/stuck")
    await _settle(sb)
    assert (await sb.get("/api/v1/namespaces/default/pods/stuck"))["metadata"].get("deletionTimestamp")
    taints = (await sb.get("/api/v1/nodes/n1"))["spec"]["taints"]
    await sb.req("PATCH", "/api/v1/nodes/n1", {"spec": {"taints": [
        *taints, {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}]}})
    await sb.until(lambda: _gone(sb, "stuck"), "PodGC removes it")


async def test_a_pod_already_being_deleted_is_evicted_whatever_its_disruption_budget(sb):
    """The Eviction API skips budgets for a pod that is already terminating (``canIgnorePDB``):
    a drain does not hang on a pod a dead node keeps Terminating."""
    await sb.create("/api/v1/nodes", node("n1"))
    await sb.create("/api/v1/nodes", node("n2"))
    body = pod("guarded", node_name="n1")
    body["metadata"]["labels"] = {"app": "guarded"}
    await sb.create("/api/v1/namespaces/default/pods", body)
    await sb.create("/apis/policy/v1/namespaces/default/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "all"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "guarded"}}}})
    await sb.pod_where("guarded", lambda p: phase(p) == "Running")
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "guarded", "namespace": "default"}}
    refused = await sb.http.post("/api/v1/namespaces/default/pods/guarded/eviction", content=json.dumps(eviction))
    assert refused.status_code == 429
    await _silence(sb, "n1")
    await sb.req("DELETE", "/api/v1/namespaces/default/pods/guarded")
    await _settle(sb)
    answered = await sb.http.post("/api/v1/namespaces/default/pods/guarded/eviction", content=json.dumps(eviction))
    assert answered.status_code == 201, answered.text


async def test_a_job_with_a_pod_failure_policy_defaults_to_replacing_failed_pods_only(sb):
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {
        "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "busybox:1.36"}]}}}}
    created = await sb.create("/apis/batch/v1/namespaces/default/jobs", job)
    assert created["spec"]["podReplacementPolicy"] == "Failed"
    del job["spec"]["podFailurePolicy"]
    job["metadata"]["name"] = "k"
    assert (await sb.create("/apis/batch/v1/namespaces/default/jobs", job))["spec"]["podReplacementPolicy"] == "TerminatingOrFailed"


@pytest.fixture
def live_sandbox(tmp_path) -> Iterator[tuple[ServerThread, Kubectl]]:
    with ServerThread(FakeApiServer(controllers=True)) as thread:
        config = tmp_path / "kubeconfig"
        config.write_text(yaml.safe_dump(thread.server.kubeconfig()))
        yield thread, Kubectl(config)


def test_kubectl_sees_the_taints_and_tolerations_a_cluster_shows(live_sandbox) -> None:
    thread, kubectl = live_sandbox
    thread.call(thread.server.store.create, "nodes", node("gpu-1"))
    thread.call(thread.server.store.create, "nodes", node("gpu-2"))
    kubectl.ok("run", "web", "--image=busybox:1.36", "--overrides", json.dumps({"spec": {"nodeName": "gpu-1"}}))
    tolerations = json.loads(kubectl.ok("get", "pod", "web", "-o", "jsonpath={.spec.tolerations}"))
    assert {(t["key"], t["effect"], t["tolerationSeconds"]) for t in tolerations} == {
        (NOT_READY, "NoExecute", 300), (UNREACHABLE, "NoExecute", 300)}
    kubectl.ok("cordon", "gpu-2")
    assert "node.kubernetes.io/unschedulable:NoSchedule" in kubectl.ok("describe", "node", "gpu-2")
    status = {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "PLEG is not healthy"}]}}
    kubectl.ok("patch", "node", "gpu-1", "--subresource=status", "--type=strategic", "-p", json.dumps(status))
    want = [f"{NOT_READY}:NoExecute", f"{NOT_READY}:NoSchedule"]
    for _ in range(50):  # the controllers run on the server's loop, just after the write
        taints = sorted(kubectl.ok("get", "node", "gpu-1", "-o", "jsonpath={range .spec.taints[*]}{.key}:{.effect} {end}").split())
        if taints == want:
            break
        time.sleep(0.1)
    assert taints == want
    thread.call(thread.server.store.create, "nodes", node("gpu-3"))
    silent = {"status": {"conditions": unreachable_conditions(thread.server.store.now())}}
    kubectl.ok("patch", "node", "gpu-3", "--subresource=status", "--type=strategic", "-p", json.dumps(silent))
    rows = {line.split()[0]: line.split()[1] for line in kubectl.ok("get", "nodes").splitlines()[1:]}
    # a kubelet gone silent (Ready Unknown) is NotReady to kubectl, as on a cluster
    assert rows == {"gpu-1": "NotReady", "gpu-2": "Ready,SchedulingDisabled", "gpu-3": "NotReady"}


async def test_a_node_failing_again_later_gives_its_pods_their_whole_toleration_again(sb):
    await _running_on_n1_of_two(sb, "p")
    await _silence(sb, "n1")
    sb.advance(200)  # back before its 300 s ran out
    await _status(sb, "n1", node_conditions(sb.server.store.now()))
    assert await _taints(sb, "n1") == set()
    sb.advance(3600)
    await _silence(sb, "n1")  # a new failure, a new taint: 300 s from now, not from the first
    assert (UNREACHABLE, "NoExecute") in await _taints(sb, "n1")
    sb.advance(299)
    await _settle(sb)
    assert not (await sb.get("/api/v1/namespaces/default/pods/p"))["metadata"].get("deletionTimestamp")
    sb.advance(1)
    await sb.pod_where("p", lambda p: p["metadata"].get("deletionTimestamp"))


async def test_a_zone_wholly_down_beside_a_healthy_one_is_evicted_as_usual(sb):
    for zone in "ab":
        for i in range(2):
            await sb.create("/api/v1/nodes", node(f"{zone}{i}", labels={"topology.kubernetes.io/zone": zone}))
    for i in range(2):
        await _silence(sb, f"a{i}")
    assert await _taints(sb, "a1") == {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}


async def test_the_quarantine_of_a_deleted_nodes_pods_runs_from_the_deletion_whatever_touches_them(sb):
    await _running_on_n1_of_two(sb, "orphan")
    await sb.req("DELETE", "/api/v1/nodes/n1")
    for i in range(3):
        sb.advance(13)
        await sb.req("PATCH", "/api/v1/namespaces/default/pods/orphan", {"metadata": {"labels": {"touched": str(i)}}})
    sb.advance(2)  # 41 s after the node went
    await sb.until(lambda: _gone(sb, "orphan"), "PodGC removes it 40 s after the node went")

"""A shared cluster's boundaries, probed as a tenant would probe them.

The sandbox runs with RBAC on and over HTTPS, deploy/'s manifests applied as the cluster's
admin, and usher's controller with the ``usher`` ServiceAccount's token. Each team is a
namespace whose ServiceAccount ``tenant`` is that namespace's admin (every verb on every
resource in it, nothing cluster-wide): what a platform team hands an ML team. The tenant then
does what it may (create pods, with any labels and annotations it likes) and tries what it may
not (another team's queue, approving or holding itself, buying immunity from reclaim, writing
the operators' decisions), and the tests look at what usher did: which pods it bound, why the
others wait, whom it evicted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubectl import Kubectl
from usher.engine.backends.kube.client import KubeClient
from usher.engine.channel import Command
from usher.engine.enums import Action
from usher.engine.backends.kube.controller import KubeController
from usher.sandbox import crds
from usher.sandbox.apiserver import FakeApiServer
from usher.sandbox.objects import node_object
from usher.sandbox.store import Store
from usher.sandbox.world import ManualClock
from usher.engine.scenario import parse_scenario

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = [d for p in sorted((ROOT / "deploy").glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]

NODES = parse_scenario("name: t\nnodes: [{name: n1, gpus: 8, cpu: 64, memory: 512Gi}, {name: n2, gpus: 8, cpu: 64, memory: 512Gi}]\n")

QUEUES = """
queues:
  - {name: team-a, cohort: lab, namespaces: [team-a], quota: {gpu: 8},
     preemption: {withinQueue: LowerPriority, reclaimWithinCohort: Any}}
  - {name: team-b, cohort: lab, namespaces: [team-b], quota: {gpu: 8}}
  - {name: gated, namespaces: [team-b], quota: {gpu: 16}, approval: manual}
"""

PODS_SCHEDULED = "PodScheduled"


class Tenancy:
    """The sandbox, the controller, and a client per actor (admin, each team's tenant)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.clock = ManualClock(1_000_000.0)
        self.server = FakeApiServer(Store(clock=self.clock.now), authorization=True, controllers=True, tls=True)
        self.tenants: dict[str, httpx.AsyncClient] = {}
        #: controllers a test started beside usher's (an operator's console), stopped with it
        self.consoles: list[tuple[KubeController, asyncio.Task[None]]] = []

    async def start(self) -> None:
        await self.server.start(port=0)
        self.admin = self._client(self.server.admin_token)
        for doc in MANIFESTS:  # kubectl apply -f deploy/, as the admin
            await self.admin_create(_collection(self.server, doc), doc)
        crds.install(self.server.store)
        for spec in NODES.all_nodes():
            await self.admin_create("/api/v1/nodes", node_object(spec))
        for name, value in (("low", 1), ("high", 1000)):
            await self.admin_create("/apis/scheduling.k8s.io/v1/priorityclasses", {
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value})
        path = "/api/v1/namespaces/usher-system/configmaps/usher-queues"
        cm = (await self.admin.get(path)).json()
        cm["data"] = {"queues.yaml": QUEUES}
        assert (await self.admin.put(path, json=cm)).status_code == 200
        for team in ("team-a", "team-b"):
            self.tenants[team] = await self._namespace_admin(team)
        token = await self._token("usher-system", "usher")
        path = self.tmp / "usher.kubeconfig"
        path.write_text(yaml.safe_dump(self.server.kubeconfig(token, "usher-system")))
        self.usher = KubeController(await KubeClient.connect(str(path)), identity="usher-0", clock=self.clock.now,
                                    elect=False, status_interval=0.0)
        self.task = asyncio.create_task(self.usher.run())
        await asyncio.wait_for(self.usher.synced.wait(), 10)

    async def stop(self) -> None:
        tasks = [self.task, *(task for _, task in self.consoles)]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for console, _ in self.consoles:
            await console.client.aclose()
        await self.usher.client.aclose()
        for client in (self.admin, *self.tenants.values()):
            await client.aclose()
        await self.server.stop()

    def _client(self, token: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.server.url, verify=self.server.verify, timeout=30,
                                 headers={"Authorization": f"Bearer {token}"})

    async def admin_create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = await self.admin.post(path, json=body)
        assert r.status_code == 201, (path, r.text)
        return r.json()

    async def _token(self, namespace: str, name: str) -> str:
        r = await self.admin.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                                  json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})
        assert r.status_code == 201, r.text
        return r.json()["status"]["token"]

    async def _namespace_admin(self, team: str) -> httpx.AsyncClient:
        """Namespace ``team``, and a client for its ServiceAccount ``tenant``: every verb on
        every resource of the namespace, nothing outside it."""
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        await self.admin_create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team}})
        await self.admin_create(f"/api/v1/namespaces/{team}/serviceaccounts",
                                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "tenant"}})
        await self.admin_create(f"{rbac}/namespaces/{team}/roles", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "namespace-admin"},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]})
        await self.admin_create(f"{rbac}/namespaces/{team}/rolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "tenant"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "namespace-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": team}]})
        return self._client(await self._token(team, "tenant"))

    async def submit(self, team: str, name: str, gpus: int | None = None, *, queue: str | None = None,
                     priority: str | None = None, annotations: dict[str, str] | None = None,
                     requests: dict[str, str] | None = None) -> None:
        """The tenant of ``team`` creates a bare pod for usher, as it likes it."""
        resources = requests if requests is not None else {"nvidia.com/gpu": str(gpus)}
        spec: dict[str, Any] = {
            "schedulerName": "usher", "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox:1.36", "resources": {"requests": resources, "limits": resources}}],
        }
        if priority:
            spec["priorityClassName"] = priority
        body = {"apiVersion": "v1", "kind": "Pod", "spec": spec, "metadata": {
            "name": name, "labels": {"usher/queue": queue} if queue else {}, "annotations": annotations or {}}}
        r = await self.tenants[team].post(f"/api/v1/namespaces/{team}/pods", json=body)
        assert r.status_code == 201, r.text

    def stored(self, resource: str, name: str, namespace: str) -> dict[str, Any]:
        return self.server.store.get(resource, name, namespace)

    def pod(self, team: str, name: str) -> dict[str, Any]:
        return self.server.store.get("pods", name, team)

    def node_of(self, team: str, name: str) -> str | None:
        return self.pod(team, name)["spec"].get("nodeName")

    def waiting(self, team: str, name: str) -> tuple[str, str]:
        """The reason and message of the pod's PodScheduled=False condition."""
        cond = next(c for c in self.pod(team, name)["status"].get("conditions") or [] if c["type"] == PODS_SCHEDULED)
        assert cond["status"] == "False", cond
        return cond["reason"], cond["message"]

    async def settle(self) -> None:
        for _ in range(6):
            self.server.controllers.step()
            await asyncio.wait_for(self.usher.wait_idle(), 20)
            await asyncio.sleep(0.02)

    async def until(self, check, what: str) -> None:
        """Wait for ``check()``, a second of the cluster's time passing at each look (a job
        just started is no victim at that very moment, and evicted pods take a while to go)."""
        for _ in range(500):
            self.clock.t += 1.0
            self.server.controllers.step()
            if check():
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"never happened: {what}")


def _collection(server: FakeApiServer, doc: dict[str, Any]) -> str:
    rt = next(t for t in server.store.catalogue.versions().get(doc["apiVersion"], []) if t.kind == doc["kind"])
    base = "/api/v1" if doc["apiVersion"] == "v1" else f"/apis/{doc['apiVersion']}"
    namespace = doc["metadata"].get("namespace")
    return base + (f"/namespaces/{namespace}" if rt.namespaced else "") + f"/{rt.resource}"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Tenancy]:
    c = Tenancy(tmp_path)
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


def _has_condition(c: Tenancy, team: str, name: str) -> bool:
    return any(x["type"] == PODS_SCHEDULED for x in c.pod(team, name)["status"].get("conditions") or [])


async def test_a_tenant_cannot_use_another_namespaces_queue_nor_preempt_in_it(cluster: Tenancy) -> None:
    c = cluster
    await c.submit("team-a", "a1", 8, queue="team-a", priority="low")
    await c.until(lambda: c.node_of("team-a", "a1") is not None, "team-a's pod runs")
    # team-b names team-a's queue, with a higher priority that would preempt a1 in that queue
    await c.submit("team-b", "intruder", 8, queue="team-a", priority="high")
    await c.until(lambda: _has_condition(c, "team-b", "intruder"), "the intruder is told why it waits")
    await c.settle()
    reason, message = c.waiting("team-b", "intruder")
    assert reason == "QueueNotAllowed"
    assert "queue 'team-a'" in message and "namespaces team-a" in message and "'team-b'" in message
    assert c.node_of("team-b", "intruder") is None
    assert c.pod("team-a", "a1")["spec"]["nodeName"] and not c.pod("team-a", "a1")["metadata"].get("deletionTimestamp")
    assert c.usher.state.queues["team-a"].usage[0] == 8000  # a1 alone is charged to team-a
    # the same pod in its own queue runs (there is room: n2 is free)
    await c.submit("team-b", "honest", 8, queue="team-b", priority="high")
    await c.until(lambda: c.node_of("team-b", "honest") is not None, "team-b's own queue admits it")


async def test_a_tenant_cannot_approve_itself_and_an_operators_approval_starts_it(cluster: Tenancy) -> None:
    c = cluster
    await c.submit("team-b", "self-approved", 1, queue="gated", annotations={"usher/approved": "true"})
    await c.submit("team-b", "honest", 1, queue="gated")
    await c.until(lambda: _has_condition(c, "team-b", "self-approved") and _has_condition(c, "team-b", "honest"),
                  "both are told why they wait")
    await c.settle()
    assert c.node_of("team-b", "self-approved") is None and c.node_of("team-b", "honest") is None
    reason, message = c.waiting("team-b", "self-approved")
    assert reason == "InvalidRequest" and "usher/approved is an operator's decision" in message
    assert c.waiting("team-b", "honest")[0] == "AwaitingApproval"
    # the operators' decisions are out of the tenant's reach: it may not write them, nor make its own
    path = "/api/v1/namespaces/usher-system/configmaps/usher-decisions"
    tenant = c.tenants["team-b"]
    assert (await tenant.get(path)).status_code == 403
    forged = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "usher-decisions", "namespace": "usher-system"},
              "data": {"decisions.yaml": "approved: {team-b/honest: {by: me}}"}}
    assert (await tenant.put(path, json=forged)).status_code == 403
    own = await tenant.post("/api/v1/namespaces/team-b/configmaps", json={**forged, "metadata": {"name": "usher-decisions"}})
    assert own.status_code == 201  # its own namespace is its own, and usher does not read it there
    await c.settle()
    assert c.node_of("team-b", "honest") is None
    # an operator approves (as the console does: an entry in usher-system/usher-decisions)
    cm = (await c.admin.get(path)).json()
    cm["data"] = {"decisions.yaml": "approved:\n  team-b/honest: {by: alice}\n"}
    assert (await c.admin.put(path, json=cm)).status_code == 200
    await c.until(lambda: c.node_of("team-b", "honest") is not None, "the approved pod runs")
    assert c.node_of("team-b", "self-approved") is None


async def _operator_console(c: Tenancy) -> KubeController:
    """A console as an operator runs it: a ServiceAccount bound to deploy/'s ``usher-operator``
    ClusterRole (as the README says), a controller that does not schedule."""
    await c.admin_create("/api/v1/namespaces/usher-system/serviceaccounts",
                         {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "alice"}})
    await c.admin_create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "usher-operators"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "usher-operator"},
        "subjects": [{"kind": "ServiceAccount", "name": "alice", "namespace": "usher-system"}]})
    path = c.tmp / "alice.kubeconfig"
    path.write_text(yaml.safe_dump(c.server.kubeconfig(await c._token("usher-system", "alice"), "usher-system")))
    console = KubeController(await KubeClient.connect(str(path)), identity="alice-console", clock=c.clock.now,
                             elect=False, schedule=False, status_interval=0.0)
    c.consoles.append((console, asyncio.create_task(console.run())))
    await asyncio.wait_for(console.synced.wait(), 10)
    return console


async def test_an_approval_is_of_one_job_not_of_a_name_the_tenant_may_reuse(cluster: Tenancy) -> None:
    """An operator approves team-b's 1-GPU pod in the gated queue; the tenant deletes it and makes
    another of the same name asking 8 GPUs. The approval was of the first: the second waits for
    its own (before, the entry named only the key, so the bigger pod started on the old approval)."""
    c = cluster
    console = await _operator_console(c)
    await c.submit("team-b", "sweep", 1, queue="gated")
    await c.until(lambda: _has_condition(c, "team-b", "sweep"), "told why it waits")
    await c.until(lambda: "team-b/sweep" in console.mirror.gangs, "the console sees it")
    assert await asyncio.wait_for(console.post(Command(Action.APPROVE, job="team-b/sweep")), 10) == "approved"
    decisions = yaml.safe_load(c.stored("configmaps", "usher-decisions", "usher-system")["data"]["decisions.yaml"])
    assert decisions["approved"]["team-b/sweep"]["uid"] == c.pod("team-b", "sweep")["metadata"]["uid"]
    await c.until(lambda: c.node_of("team-b", "sweep") is not None, "the approved pod runs")
    # the tenant reuses the name for a bigger pod
    tenant = c.tenants["team-b"]
    assert (await tenant.delete("/api/v1/namespaces/team-b/pods/sweep", params={"gracePeriodSeconds": "0"})).status_code == 200
    await c.until(lambda: not c.server.store.exists("pods", "sweep", "team-b"), "the first pod is gone")
    await c.submit("team-b", "sweep", 8, queue="gated")
    await c.until(lambda: _has_condition(c, "team-b", "sweep"), "told why it waits")
    await c.settle()
    assert c.node_of("team-b", "sweep") is None
    assert c.waiting("team-b", "sweep")[0] == "AwaitingApproval"
    # approved again, for this one: it runs
    await c.until(lambda: console.mirror.gangs.get("team-b/sweep") is not None
                  and console.mirror.gangs["team-b/sweep"].uid == c.pod("team-b", "sweep")["metadata"]["uid"], "the console sees the new pod")
    assert await asyncio.wait_for(console.post(Command(Action.APPROVE, job="team-b/sweep")), 10) == "approved"
    await c.until(lambda: c.node_of("team-b", "sweep") is not None, "the new approval starts it")


async def test_an_approval_covers_the_gpus_approved_not_a_job_grown_after_it(cluster: Tenancy) -> None:
    """An operator approves team-b's Job of 2 one-GPU pods while it waits for room; before it
    starts, the tenant raises its parallelism to 8. The approval said 2 GPUs: the grown Job waits
    for the operator again once there is room (before, it started all 8 on the approval of 2), and
    runs whole once approved at its new size."""
    c = cluster
    console = await _operator_console(c)
    await c.submit("team-a", "filler-a", 7, queue="team-a")
    await c.submit("team-b", "filler-b", 8, queue="team-b")
    await c.until(lambda: c.node_of("team-a", "filler-a") and c.node_of("team-b", "filler-b"), "the cluster is nearly full")
    pod = {"metadata": {"labels": {"usher/queue": "gated"}}, "spec": {
        "schedulerName": "usher", "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "busybox:1.36",
                        "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "grow"},
           "spec": {"parallelism": 2, "completions": 8, "backoffLimit": 0, "template": pod}}
    tenant = c.tenants["team-b"]
    assert (await tenant.post("/apis/batch/v1/namespaces/team-b/jobs", json=job)).status_code == 201
    key = "team-b/Job/grow"
    await c.until(lambda: key in console.mirror.gangs and console.mirror.gangs[key].job is not None, "the console sees the Job")

    def bound() -> list[str]:
        return sorted(p["metadata"]["name"] for p in c.server.store.list("pods", "team-b").objects()
                      if p["metadata"]["name"].startswith("grow-") and p["spec"].get("nodeName"))

    assert await asyncio.wait_for(console.post(Command(Action.APPROVE, job=key)), 10) == "approved"
    decisions = yaml.safe_load(c.stored("configmaps", "usher-decisions", "usher-system")["data"]["decisions.yaml"])
    assert decisions["approved"][key]["gpus"] == "2"
    await c.settle()
    assert bound() == [] and c.waiting("team-b", next(p["metadata"]["name"] for p in c.server.store.list("pods", "team-b").objects()
                                                      if p["metadata"]["name"].startswith("grow-")))[0] != "AwaitingApproval"
    r = await tenant.patch("/apis/batch/v1/namespaces/team-b/jobs/grow", json={"spec": {"parallelism": 8}},
                           headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    await c.until(lambda: sum(p["metadata"]["name"].startswith("grow-") for p in c.server.store.list("pods", "team-b").objects()) == 8,
                  "the Job controller makes six more pods")
    for team, name in (("team-a", "filler-a"), ("team-b", "filler-b")):
        assert (await c.tenants[team].delete(f"/api/v1/namespaces/{team}/pods/{name}", params={"gracePeriodSeconds": "0"})).status_code == 200
    await c.until(lambda: not c.server.store.exists("pods", "filler-a", "team-a")
                  and not c.server.store.exists("pods", "filler-b", "team-b"), "there is room")
    for _ in range(10):
        c.clock.t += 1.0
        await c.settle()
    assert bound() == []
    assert {c.waiting("team-b", p["metadata"]["name"])[0] for p in c.server.store.list("pods", "team-b").objects()
            if p["metadata"]["name"].startswith("grow-")} == {"AwaitingApproval"}
    await c.until(lambda: console.mirror.gangs[key].job is not None and console.mirror.gangs[key].size == 8, "the console sees it grown")
    assert await asyncio.wait_for(console.post(Command(Action.APPROVE, job=key)), 10) == "approved"
    await c.until(lambda: len(bound()) == 8, "approved at its new size, it runs whole")


async def test_a_tenant_cannot_hold_its_own_job(cluster: Tenancy) -> None:
    c = cluster
    await c.submit("team-b", "held", 1, queue="team-b", annotations={"usher/hold": "true"})
    await c.until(lambda: _has_condition(c, "team-b", "held"), "told why it waits")
    reason, message = c.waiting("team-b", "held")
    assert reason == "InvalidRequest" and "usher/hold is an operator's decision" in message


async def test_a_borrower_that_asks_not_to_be_preempted_is_reclaimed_all_the_same(cluster: Tenancy) -> None:
    c = cluster
    # team-b runs 16 GPUs on a quota of 8: 8 of them borrowed from team-a, each pod "not preemptible"
    for name in ("b1", "b2"):
        await c.submit("team-b", name, 8, queue="team-b", annotations={"usher/preemptible": "false"})
    await c.until(lambda: c.node_of("team-b", "b1") and c.node_of("team-b", "b2"), "team-b borrows")
    # team-a wants its own quota back
    await c.submit("team-a", "a1", 8, queue="team-a")
    await c.until(lambda: c.node_of("team-a", "a1") is not None, "the lender gets its quota back")
    kept = [n for n in ("b1", "b2") if c.server.store.exists("pods", n, "team-b")
            and not c.pod("team-b", n)["metadata"].get("deletionTimestamp")]
    assert kept == ["b1"]  # the one admitted on borrowed quota; b1 runs within team-b's own quota


async def test_an_unreadable_preemptible_value_is_refused_not_guessed(cluster: Tenancy) -> None:
    c = cluster
    await c.submit("team-b", "maybe", 1, queue="team-b", annotations={"usher/preemptible": "maybe"})
    await c.until(lambda: _has_condition(c, "team-b", "maybe"), "told why it waits")
    reason, message = c.waiting("team-b", "maybe")
    assert reason == "InvalidRequest" and "usher/preemptible" in message and "'maybe'" in message


async def test_a_whole_gpu_with_a_fraction_is_refused_as_contradictory(cluster: Tenancy) -> None:
    c = cluster
    await c.submit("team-b", "both", 1, queue="team-b", annotations={"usher/gpu-fraction": "0.5"})
    await c.until(lambda: _has_condition(c, "team-b", "both"), "told why it waits")
    reason, message = c.waiting("team-b", "both")
    assert reason == "InvalidRequest" and "usher/gpu-fraction" in message and "nvidia.com/gpu: 1" in message
    assert c.node_of("team-b", "both") is None


async def test_a_tenant_cannot_rewrite_what_usher_recorded_on_its_running_pods(cluster: Tenancy) -> None:
    """deploy/74: on its running pods a tenant may not move the GPUs usher recorded (usher/gpus),
    shrink a shared pod's share of its GPU (usher/gpu-fraction) nor move the pod to another of its
    queues (usher/queue); usher's view of what the pods hold stays as bound, so a second team's
    shared pod is never put on a GPU already full. Before it is bound, the queue is the tenant's
    to change, and a pod may not be made with usher/gpus already set."""
    c = cluster
    token = await c._token("team-b", "tenant")
    path = c.tmp / "tenant.kubeconfig"
    path.write_text(yaml.safe_dump(c.server.kubeconfig(token, "team-b")))
    kubectl = Kubectl(path)
    await c.submit("team-b", "whole", 2, queue="team-b")
    await c.submit("team-b", "half", requests={}, queue="team-b", annotations={"usher/gpu-fraction": "0.5"})
    await c.until(lambda: c.node_of("team-b", "whole") and c.node_of("team-b", "half"), "both run")
    recorded = {n: c.pod("team-b", n)["metadata"]["annotations"]["usher/gpus"] for n in ("whole", "half")}
    for args, what in (
        (("annotate", "--overwrite", "pod", "whole", "usher/gpus=6,7"), "may not be changed"),
        (("annotate", "pod", "whole", "usher/gpus-"), "may not be changed"),
        (("annotate", "--overwrite", "pod", "half", "usher/gpu-fraction=0.1"), "the share may not change"),
        (("label", "--overwrite", "pod", "whole", "usher/queue=gated"), "the queue may not change"),
    ):
        refused = await asyncio.to_thread(kubectl.run, *args)
        assert refused.returncode != 0 and what in refused.stderr, (args, refused.stderr)
        assert "usher-pods-placement-record" in refused.stderr
    await c.settle()
    assert {n: c.pod("team-b", n)["metadata"]["annotations"]["usher/gpus"] for n in ("whole", "half")} == recorded
    held = {p.name: p.gpus for g in c.usher.mirror.gangs.values() for p in g.pods.values() if p.namespace == "team-b"}
    assert held == {n: [int(i) for i in recorded[n].split(",")] for n in recorded}
    assert c.usher.state.queues["team-b"].usage[0] == 2500
    # other annotations stay the tenant's, and a pending pod's queue is its request
    await asyncio.to_thread(kubectl.ok, "annotate", "pod", "whole", "team/owner=alice")
    await c.submit("team-b", "later", 1, queue="gated")
    await asyncio.to_thread(kubectl.ok, "label", "--overwrite", "pod", "later", "usher/queue=team-b")
    await c.until(lambda: c.node_of("team-b", "later") is not None, "relabelled while pending, it runs in its own queue")
    manifest = yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "forged", "annotations": {"usher/gpus": "0"}},
        "spec": {"schedulerName": "usher", "restartPolicy": "Never", "containers": [
            {"name": "main", "image": "busybox:1.36", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    made = await asyncio.to_thread(kubectl.run, "apply", "-f", "-", stdin=manifest)
    assert made.returncode != 0 and "usher writes it when it binds the pod" in made.stderr


async def test_a_tenant_with_kubectl_is_itself_and_cannot_reach_the_operators_decisions(cluster: Tenancy) -> None:
    """The same boundary through kubectl over HTTPS, with the tenant's token in its kubeconfig:
    the server knows it as its ServiceAccount (not anonymous), it may create what it likes in its
    namespace, and usher, not RBAC, refuses what the pod asks beyond its namespace's rights."""
    c = cluster
    token = await c._token("team-b", "tenant")
    path = c.tmp / "tenant.kubeconfig"
    path.write_text(yaml.safe_dump(c.server.kubeconfig(token, "team-b")))
    kubectl = Kubectl(path)
    denied = await asyncio.to_thread(
        kubectl.run, "patch", "configmap", "usher-decisions", "-n", "usher-system", "--type=merge",
        "-p", '{"data": {"decisions.yaml": "approved: {team-b/intruder: {by: me}}"}}')
    assert denied.returncode != 0
    assert '"usher-decisions" is forbidden: User "system:serviceaccount:team-b:tenant" cannot' in denied.stderr
    read = await asyncio.to_thread(kubectl.run, "get", "configmap", "usher-decisions", "-n", "usher-system")
    assert read.returncode != 0 and "Forbidden" in read.stderr
    manifest = yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "intruder", "labels": {"usher/queue": "team-a"}},
        "spec": {"schedulerName": "usher", "restartPolicy": "Never", "containers": [
            {"name": "main", "image": "busybox:1.36", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
    })
    await asyncio.to_thread(kubectl.ok, "apply", "-f", "-", stdin=manifest)
    await c.until(lambda: _has_condition(c, "team-b", "intruder"), "told why it waits")
    reason = await asyncio.to_thread(
        kubectl.ok, "get", "pod", "intruder", "-o", 'jsonpath={.status.conditions[?(@.type=="PodScheduled")].reason}')
    assert reason == "QueueNotAllowed"
    # its own pod it may annotate as it likes; usher reads the approval as a request it refuses
    await asyncio.to_thread(kubectl.ok, "annotate", "pod", "intruder", "usher/approved=true")
    await c.until(lambda: c.waiting("team-b", "intruder")[0] == "InvalidRequest", "the self-approval is refused")
    assert c.node_of("team-b", "intruder") is None


async def test_a_tenant_cannot_place_its_own_pod_on_a_node_past_usher(cluster: Tenancy) -> None:
    """deploy/72's admission policy: a pod for usher may not name its node at creation (the
    kubelet would run it without usher's quota, gang or approval)."""
    c = cluster
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "squatter", "labels": {"usher/queue": "team-b"}},
            "spec": {"schedulerName": "usher", "nodeName": "n1", "restartPolicy": "Never", "containers": [
                {"name": "main", "image": "busybox:1.36", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    r = await c.tenants["team-b"].post("/api/v1/namespaces/team-b/pods", json=body)
    assert r.status_code == 403, r.text
    assert "ValidatingAdmissionPolicy 'usher-pods-placed-by-usher'" in r.json()["message"]
    assert "names its node n1 (spec.nodeName)" in r.json()["message"]
    # a pod of another scheduler may still name its node (the policy is about usher's pods)
    body["metadata"]["name"], body["spec"]["schedulerName"] = "elsewhere", "default-scheduler"
    assert (await c.tenants["team-b"].post("/api/v1/namespaces/team-b/pods", json=body)).status_code == 201


async def test_a_tenant_cannot_keep_another_teams_pods_out_of_a_zone(cluster: Tenancy) -> None:
    """deploy/73's admission policy: required anti-affinity wider than a node may pick only the
    pod's own namespace (symmetry would otherwise empty a zone of another team's pods); within the
    namespace, or per node, it stays allowed."""
    c = cluster

    def body(name: str, term: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
                "spec": {"schedulerName": "usher", "restartPolicy": "Never",
                         "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
                         "containers": [{"name": "main", "image": "busybox:1.36"}]}}

    zone = "topology.kubernetes.io/zone"
    everyone = {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}, "topologyKey": zone,
                "namespaceSelector": {}}
    r = await c.tenants["team-a"].post("/api/v1/namespaces/team-a/pods", json=body("greedy", everyone))
    assert r.status_code == 403, r.text
    assert "ValidatingAdmissionPolicy 'usher-anti-affinity-stays-in-the-namespace'" in r.json()["message"]
    assert "with topologyKey topology.kubernetes.io/zone picks pods outside namespace team-a" in r.json()["message"]
    named = {**everyone, "namespaceSelector": None, "namespaces": ["team-b"]}
    del named["namespaceSelector"]
    assert (await c.tenants["team-a"].post("/api/v1/namespaces/team-a/pods", json=body("named", named))).status_code == 403
    # the same zone-wide rule over the team's own pods, and a per-node rule over everyone's, are fine
    own = {"labelSelector": {"matchLabels": {"app": "serve"}}, "topologyKey": zone}
    assert (await c.tenants["team-a"].post("/api/v1/namespaces/team-a/pods", json=body("serve", own))).status_code == 201
    per_node = {**everyone, "topologyKey": "kubernetes.io/hostname"}
    assert (await c.tenants["team-a"].post("/api/v1/namespaces/team-a/pods", json=body("alone", per_node))).status_code == 201


async def test_a_tenant_cannot_give_itself_admin_access_to_every_teams_gpus(cluster: Tenancy) -> None:
    """A claim with ``adminAccess`` is given devices other claims hold (a monitoring tool's view of
    every team's GPUs). The API server grants it only in a namespace labelled for it by the
    operators: the tenant's claim is refused, naming the field. (Who may label a namespace is the
    cluster's RBAC: this harness's tenant holds ``*`` on its namespace, which in Kubernetes covers
    the namespace object too, as the built-in ``admin`` ClusterRole does not; docs/tenancy.md.)"""
    c = cluster
    tenant = c.tenants["team-a"]
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "peek"},
             "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                 "deviceClassName": "gpu.nvidia.com", "count": 8, "adminAccess": True}}]}}}
    r = await tenant.post("/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims", json=claim)
    assert r.status_code == 422, r.text
    assert ("spec.devices.requests[0].exactly.adminAccess: Forbidden: admin access to devices requires the "
            "`resource.kubernetes.io/admin-access: true` label on the containing namespace") in r.json()["message"]
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "peek"},
                "spec": {"spec": claim["spec"]}}
    r = await tenant.post("/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaimtemplates", json=template)
    assert r.status_code == 422, r.text
    assert "spec.spec.devices.requests[0].exactly.adminAccess: Forbidden" in r.json()["message"]

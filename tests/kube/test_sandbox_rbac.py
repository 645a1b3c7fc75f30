"""The sandbox's authentication and RBAC (``FakeApiServer(authorization=True)``, :mod:`usher.sandbox.auth`).

First the authorizer against the documented behaviour of a real cluster (401 vs 403 and their
messages, Role vs ClusterRole scoping, resourceNames, subresources, the verbs list/watch/get/
deletecollection, the access and rules reviews, TokenRequest), through httpx and the official
``kubernetes`` client. Then the real thing: every manifest of deploy/ applied as the admin, and
usher's controller run with the ``usher`` ServiceAccount's token through its whole job (gang
binds, pod conditions and Events, the leader Lease, a quota edit, preemption, cordon and drain)
without a single 403; and the grants of deploy/ that such a run never uses.
(tests/kube/test_deploy.py checks that the manifests match engine/backends/kube/rbac.py; this
file checks that the cluster's RBAC, evaluated as a real API server does, lets usher work.)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from harness import Cluster, scenario_of
from kubernetes.client import ApiClient, ApiException, Configuration, CoreV1Api
from usher.engine.channel import Command
from usher.engine.enums import Action
from usher.sandbox import crds, workload_api_beta
from usher.sandbox.apiserver import (
    FakeApiServer,
    FaultKind,
    RequestRecord,
    ServerThread,
)
from usher.sandbox.auth import Access, granted_by
from usher.sandbox.authn import service_account_user
from usher.sandbox.objects import queue_configmap
from usher.sandbox.store import Store
from usher.sandbox.world import World

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
MANIFESTS = [d for p in sorted(DEPLOY.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]
RBAC = "/apis/rbac.authorization.k8s.io/v1"
AUTHZ = "/apis/authorization.k8s.io/v1"


# --------------------------------------------------------------------------- the authorizer


@dataclass
class Sandbox:
    thread: ServerThread
    admin: httpx.Client

    @property
    def server(self) -> FakeApiServer:
        return self.thread.server

    def client(self, token: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.thread.url, headers=headers, timeout=10)

    def sa(self, namespace: str, name: str) -> httpx.Client:
        return self.client(self.thread.call(self.server.token_for, namespace, name))

    def create(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        r = self.admin.post(path, json=obj)
        assert r.status_code == 201, r.text
        return r.json()


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    with ServerThread(FakeApiServer(authorization=True)) as thread:
        admin = httpx.Client(base_url=thread.url, headers={"Authorization": "Bearer sandbox"}, timeout=10)
        box = Sandbox(thread, admin)
        box.create("/api/v1/namespaces", {"metadata": {"name": "team"}})
        for ns, name in (("team", "bot"), ("team", "other")):
            box.create(f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": name}})
        for ns in ("team", "default"):
            box.create(f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "mine"}, "data": {}})
            box.create(f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "theirs"}, "data": {}})
        yield box
        admin.close()


def bind(box: Sandbox, kind: str, name: str, rules: list[dict[str, Any]], namespace: str | None = None,
         role_kind: str | None = None, subject: dict[str, Any] | None = None) -> None:
    """A Role/ClusterRole ``name`` with ``rules`` and a binding of it to the ServiceAccount team/bot."""
    subject = subject or {"kind": "ServiceAccount", "name": "bot", "namespace": "team"}
    role_kind = role_kind or ("Role" if namespace else "ClusterRole")
    role_path = f"{RBAC}/namespaces/{namespace}/roles" if role_kind == "Role" else f"{RBAC}/clusterroles"
    if rules is not None:
        box.admin.post(role_path, json={"metadata": {"name": name}, "rules": rules})
    binding_path = f"{RBAC}/namespaces/{namespace}/rolebindings" if kind == "RoleBinding" else f"{RBAC}/clusterrolebindings"
    box.create(binding_path, {"metadata": {"name": name},
                              "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name},
                              "subjects": [subject]})


BOT = "system:serviceaccount:team:bot"


def test_unknown_tokens_are_401_and_anonymous_sees_only_public_info(sandbox):
    r = sandbox.client("no-such-token").get("/api/v1/namespaces/default/pods")
    assert r.status_code == 401
    assert r.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
    anonymous = sandbox.client(None)
    assert anonymous.get("/version").status_code == 200
    assert anonymous.get("/healthz").status_code == 200
    r = anonymous.get("/api")
    assert r.status_code == 403
    assert r.json()["message"] == 'forbidden: User "system:anonymous" cannot get path "/api"'
    assert "details" not in r.json()
    # any ServiceAccount may discover (system:discovery) and ask about itself (system:basic-user)
    bot = sandbox.sa("team", "bot")
    assert bot.get("/api").status_code == 200 and bot.get("/apis/apps/v1").status_code == 200
    assert bot.get("/api/v1").json()["kind"] == "APIResourceList"
    # the kubeconfig's admin may do anything
    assert sandbox.admin.delete("/api/v1/namespaces/default/configmaps/theirs").status_code == 200


def test_denials_name_the_user_verb_resource_group_and_scope(sandbox):
    bot = sandbox.sa("team", "bot")
    r = bot.get("/api/v1/namespaces/default/pods/x")
    assert r.status_code == 403
    assert r.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f'pods "x" is forbidden: User "{BOT}" cannot get resource "pods" in API group "" in the namespace "default"',
        "reason": "Forbidden", "details": {"name": "x", "kind": "pods"}, "code": 403,
    }
    r = bot.get("/api/v1/pods")
    assert r.json()["message"] == (
        f'pods is forbidden: User "{BOT}" cannot list resource "pods" in API group "" at the cluster scope'
    )
    r = bot.get("/api/v1/namespaces/team/pods", params={"watch": "true"})
    assert 'cannot watch resource "pods" in API group "" in the namespace "team"' in r.json()["message"]
    r = bot.put("/apis/coordination.k8s.io/v1/namespaces/team/leases/l", json={})
    assert r.json()["message"].startswith('leases.coordination.k8s.io "l" is forbidden: ')
    assert r.json()["details"] == {"name": "l", "group": "coordination.k8s.io", "kind": "leases"}
    r = bot.post("/api/v1/namespaces/default/pods/x/eviction", json={})
    assert 'cannot create resource "pods/eviction" in API group ""' in r.json()["message"]
    r = bot.delete("/api/v1/namespaces/team/configmaps")
    assert 'cannot deletecollection resource "configmaps"' in r.json()["message"]
    # authorization comes before routing: a resource that does not exist is forbidden, not missing
    assert bot.get("/apis/example.com/v1/widgets").status_code == 403
    assert sandbox.admin.get("/apis/example.com/v1/widgets").status_code == 404
    # a binding to a role that does not exist says so in the reason
    bind(sandbox, "ClusterRoleBinding", "ghost", None)  # type: ignore[arg-type]
    r = bot.get("/api/v1/nodes")
    assert r.json()["message"].endswith(': RBAC: clusterrole.rbac.authorization.k8s.io "ghost" not found')


def test_a_role_holds_in_its_namespace_a_cluster_role_binding_everywhere(sandbox):
    bot = sandbox.sa("team", "bot")
    bind(sandbox, "RoleBinding", "read-cm", [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
         namespace="team")
    assert bot.get("/api/v1/namespaces/team/configmaps").status_code == 200
    assert bot.get("/api/v1/namespaces/team/configmaps/mine").status_code == 200
    assert bot.get("/api/v1/namespaces/default/configmaps").status_code == 403
    assert bot.get("/api/v1/configmaps").status_code == 403  # list across namespaces is cluster scope
    assert bot.get("/api/v1/namespaces/team/configmaps", params={"watch": "1"}).status_code == 403  # watch != list
    # a RoleBinding to a ClusterRole grants the ClusterRole's rules in the binding's namespace only
    bind(sandbox, "RoleBinding", "pod-reader", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
         namespace="team", role_kind="ClusterRole")
    assert bot.get("/api/v1/namespaces/team/pods").status_code == 200
    assert bot.get("/api/v1/namespaces/default/pods").status_code == 403
    # a ClusterRoleBinding: every namespace and the cluster scope
    bind(sandbox, "ClusterRoleBinding", "node-reader", [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list"]}])
    assert bot.get("/api/v1/nodes").status_code == 200
    assert bot.get("/api/v1/pods").status_code == 200
    # a Group subject: every ServiceAccount of the namespace
    other = sandbox.sa("team", "other")
    assert other.get("/apis/apps/v1/namespaces/team/deployments").status_code == 403
    bind(sandbox, "RoleBinding", "apps", [{"apiGroups": ["apps"], "resources": ["*"], "verbs": ["*"]}],
         namespace="team", subject={"kind": "Group", "name": "system:serviceaccounts:team"})
    assert other.get("/apis/apps/v1/namespaces/team/deployments").status_code == 200
    assert other.get("/api/v1/namespaces/team/pods").status_code == 403  # wrong group: "" is not apps


def test_resource_names_and_subresources(sandbox):
    bot = sandbox.sa("team", "bot")
    bind(sandbox, "RoleBinding", "named", [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["mine"], "verbs": ["get", "list", "watch", "update", "create"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["*/eviction"], "verbs": ["create"]},
    ], namespace="team")
    assert bot.get("/api/v1/namespaces/team/configmaps/mine").status_code == 200
    assert bot.get("/api/v1/namespaces/team/configmaps/theirs").status_code == 403
    # a named rule does not allow an unnamed list, only one selecting the object by name
    assert bot.get("/api/v1/namespaces/team/configmaps").status_code == 403
    assert bot.get("/api/v1/namespaces/team/configmaps", params={"fieldSelector": "metadata.name=mine"}).status_code == 200
    assert bot.get("/api/v1/namespaces/team/configmaps", params={"fieldSelector": "metadata.name=theirs"}).status_code == 403
    r = bot.post("/api/v1/namespaces/team/configmaps", json={"metadata": {"name": "mine2"}})
    assert r.status_code == 403  # create carries no name in the URL: never allowed by a named rule
    # pods/status is not pods; */eviction matches the subresource of any resource
    forbidden_patch = bot.patch("/api/v1/namespaces/team/pods/p", json={}, headers={"content-type": "application/merge-patch+json"})
    assert forbidden_patch.status_code == 403
    status_patch = bot.patch("/api/v1/namespaces/team/pods/p/status", json={}, headers={"content-type": "application/merge-patch+json"})
    assert status_patch.status_code == 404  # allowed, and the pod does not exist
    assert bot.post("/api/v1/namespaces/team/pods/p/eviction", json={}).status_code == 404
    assert bot.post("/api/v1/namespaces/team/pods/p/binding", json={}).status_code == 403


def test_access_reviews_and_rules_reviews_answer_from_the_same_rules(sandbox):
    bot = sandbox.sa("team", "bot")
    bind(sandbox, "RoleBinding", "named", [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["mine"], "verbs": ["get"]},
    ], namespace="team")

    def ssar(client: httpx.Client, **attributes: str) -> dict[str, Any]:
        r = client.post(f"{AUTHZ}/selfsubjectaccessreviews", json={
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes}})
        assert r.status_code == 201, r.text
        return r.json()["status"]

    allowed = ssar(bot, verb="get", resource="configmaps", namespace="team", name="mine")
    assert allowed == {"allowed": True,
                       "reason": 'RBAC: allowed by RoleBinding "named/team" of Role "named" to ServiceAccount "bot/team"'}
    assert ssar(bot, verb="get", resource="configmaps", namespace="team", name="theirs") == {"allowed": False}
    assert ssar(bot, verb="get", resource="configmaps", namespace="team") == {"allowed": False}
    assert ssar(sandbox.admin, verb="delete", resource="nodes")["allowed"] is True
    # SubjectAccessReview: about someone else, and only for those allowed to create it
    sar = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
           "spec": {"user": BOT, "groups": ["system:serviceaccounts", "system:authenticated"],
                    "resourceAttributes": {"verb": "get", "resource": "configmaps", "namespace": "team", "name": "mine"}}}
    r = bot.post(f"{AUTHZ}/subjectaccessreviews", json=sar)
    assert r.status_code == 403 and 'cannot create resource "subjectaccessreviews" in API group "authorization.k8s.io" at the cluster scope' in r.json()["message"]
    r = sandbox.admin.post(f"{AUTHZ}/subjectaccessreviews", json=sar)
    assert r.status_code == 201 and r.json()["status"]["allowed"] is True
    sar["spec"]["nonResourceAttributes"] = {"verb": "get", "path": "/apis/apps"}
    del sar["spec"]["resourceAttributes"]
    assert sandbox.admin.post(f"{AUTHZ}/subjectaccessreviews", json=sar).json()["status"]["allowed"] is True
    sar["spec"]["groups"] = []
    assert sandbox.admin.post(f"{AUTHZ}/subjectaccessreviews", json=sar).json()["status"]["allowed"] is False
    # SelfSubjectRulesReview lists what applies in the namespace, discovery and basic-user included
    r = bot.post(f"{AUTHZ}/selfsubjectrulesreviews", json={"spec": {"namespace": "team"}})
    status = r.json()["status"]
    assert {"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["mine"]} in status["resourceRules"]
    assert any("selfsubjectaccessreviews" in rule["resources"] for rule in status["resourceRules"])
    assert any("/api/*" in rule["nonResourceURLs"] for rule in status["nonResourceRules"])
    assert status["incomplete"] is False
    in_default = bot.post(f"{AUTHZ}/selfsubjectrulesreviews", json={"spec": {"namespace": "default"}}).json()["status"]
    assert not any("configmaps" in rule["resources"] for rule in in_default["resourceRules"])
    # the test hook forbid() still denies, ahead of RBAC, and the reviews say so
    sandbox.server.forbid("get", "configmaps")
    assert bot.get("/api/v1/namespaces/team/configmaps/mine").status_code == 403
    assert ssar(bot, verb="get", resource="configmaps", namespace="team", name="mine")["allowed"] is False


def test_token_request_through_the_kubernetes_client(sandbox):
    config = Configuration(host=sandbox.thread.url)
    config.api_key = {"authorization": "sandbox"}
    config.api_key_prefix = {"authorization": "Bearer"}
    with ApiClient(config) as api_client:
        core = CoreV1Api(api_client)
        answer = core.create_namespaced_service_account_token(
            "bot", "team", {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                            "spec": {"expirationSeconds": 3600}})
        token = answer.status.token
        assert answer.status.expiration_timestamp is not None and token.count(".") == 2
        with pytest.raises(ApiException) as missing:
            core.create_namespaced_service_account_token("nobody", "team", {"spec": {}})
        assert missing.value.status == 404
    bind(sandbox, "RoleBinding", "read-cm", [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
         namespace="team")
    bot_config = Configuration(host=sandbox.thread.url)
    bot_config.api_key = {"authorization": token}
    bot_config.api_key_prefix = {"authorization": "Bearer"}
    with ApiClient(bot_config) as api_client:
        core = CoreV1Api(api_client)
        assert {cm.metadata.name for cm in core.list_namespaced_config_map("team").items} >= {"mine", "theirs"}
        with pytest.raises(ApiException) as denied:
            core.list_namespaced_config_map("default")
        assert denied.value.status == 403
        # a token dies with its ServiceAccount
        assert sandbox.admin.delete("/api/v1/namespaces/team/serviceaccounts/bot").status_code == 200
        with pytest.raises(ApiException) as gone:
            core.list_namespaced_config_map("team")
        assert gone.value.status == 401


# --------------------------------------------------------------------------- deploy/ and usher's controller


SCENARIO = """
name: rbac
topology: {levels: [usher/rack, kubernetes.io/hostname]}
priorityClasses: {low: 10, high: 1000}
nodeGroups:
  - prefix: n
    count: 4
    layout: {usher/rack: 2}
    template: {gpus: 8, cpu: 64, memory: 512Gi}
queues:
  - {name: research, namespaceSelector: {}, quota: {gpu: 24}, preemption: {withinQueue: LowerPriority}}
  - {name: product, namespaceSelector: {}, quota: {gpu: 8}, approval: manual}
jobs:
  - {name: pretrain, queue: research, submit: 0, duration: 600, priority: low, pods: [{name: w, count: 2, gpu: 8, topology: {required: usher/rack}}]}
  - {name: sweep, queue: research, submit: 5, duration: 300, priority: low, pods: [{name: w, count: 4, gpu: 2}]}
  - {name: eval, queue: research, submit: 20, duration: 200, priority: high, pods: [{gpu: 8}]}
  - {name: nb, queue: product, submit: 40, duration: 100, pods: [{gpu: 0.5}]}
"""
"""A realistic run for the controller alone: gangs bound (one bind ambiguous), a high-priority job
that must preempt a lower one to fit its queue's quota, a job that waits for approval (a pending
reason on its pod), and the leader Lease."""

USHER = service_account_user("usher-system", "usher")
OPERATOR_NAMESPACE = "ops"
OPERATOR = service_account_user(OPERATOR_NAMESPACE, "alice")
"""Someone who runs the console: bound to the ``usher-operator`` ClusterRole of deploy/, nothing else."""


def _path(server: FakeApiServer, doc: dict[str, Any]) -> str:
    rt = next(t for t in server.store.catalogue.versions().get(doc["apiVersion"], []) if t.kind == doc["kind"])
    base = "/api/v1" if doc["apiVersion"] == "v1" else f"/apis/{doc['apiVersion']}"
    namespace = doc["metadata"].get("namespace")
    return base + (f"/namespaces/{namespace}" if rt.namespaced else "") + f"/{rt.resource}"


@dataclass(frozen=True)
class Grant:
    """One verb of one rule that deploy/ grants a user: on a resource, in a namespace (``""``: a
    ClusterRoleBinding, every namespace and the cluster scope), on one named object (``""``: any)."""

    group: str
    resource: str
    verb: str
    namespace: str = ""
    name: str = ""

    def allows(self, access: Access) -> bool:
        return ((access.group, access.resource, access.verb) == (self.group, self.resource, self.verb)
                and self.namespace in ("", access.namespace) and self.name in ("", access.name))

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        return f"{self.verb} {self.resource}{'.' + self.group if self.group else ''}{' ' + self.name if self.name else ''}{where}"


def _grants(user: Any) -> set[Grant]:
    """Every grant of deploy/ to ``user``, one per verb and per resourceName (what RBAC can tell apart)."""
    roles = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in MANIFESTS
             if d["kind"] in ("Role", "ClusterRole")}
    out: set[Grant] = set()
    for binding in MANIFESTS:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s.get("name") == user.name.rsplit(":", 1)[-1]
                   and s.get("namespace") == user.name.split(":")[2] for s in binding["subjects"]):
            continue
        namespace = binding["metadata"].get("namespace", "") if binding["kind"] == "RoleBinding" else ""
        ref = binding["roleRef"]
        role = roles[(ref["kind"], namespace if ref["kind"] == "Role" else "", ref["name"])]
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames") or [""]:
                            out.add(Grant(group, resource, verb, namespace, name))
    return out


@dataclass
class UsherRun:
    requests: list[RequestRecord]
    accesses: list[Access]
    results: dict[str, Any]


_RUN: dict[str, UsherRun] = {}


async def _start(tmp: Path) -> tuple[Cluster, httpx.AsyncClient]:
    c = Cluster(scenario_of(SCENARIO), tmp)
    c.server = FakeApiServer(Store(clock=c.clock.now), authorization=True)
    # 1.37's runtime PodGroups beside 1.35's Workloads (no release serves both): usher reads
    # whichever its cluster serves, and one run is to use every grant of deploy/
    c.server.store.serve_builtin([workload_api_beta.POD_GROUP])
    port = await c.server.start(port=0)
    c.url = f"http://127.0.0.1:{port}"
    admin = httpx.AsyncClient(base_url=c.url, headers={"Authorization": f"Bearer {c.server.admin_token}"})
    # kubectl apply -f deploy/, as the cluster's admin
    for doc in MANIFESTS:
        r = await admin.post(_path(c.server, doc), json=doc)
        assert r.status_code == 201, (doc["kind"], doc["metadata"]["name"], r.text)
    crds.install(c.server.store)  # the operators AI teams run: usher watches their workloads
    # the scenario's nodes and pods (the world plays the cluster's other users, as the admin);
    # its queue config replaces the example queues of deploy/30-configmap-queues.yaml
    c.world = World(c.scenario, c.url, c.clock)
    c.world.http.headers["Authorization"] = f"Bearer {c.server.admin_token}"
    await c.world.setup()
    path = "/api/v1/namespaces/usher-system/configmaps/usher-queues"
    cm = (await admin.get(path)).json()
    cm["data"] = queue_configmap(c.scenario)["data"]
    assert (await admin.put(path, json=cm)).status_code == 200
    c.tasks.append(asyncio.create_task(c.world.kubelet()))
    # the controller's credentials: the usher ServiceAccount's token, as `kubectl create token` makes it
    c.kubeconfig = tmp / "usher.kubeconfig"
    c.kubeconfig.write_text(yaml.safe_dump(c.server.kubeconfig(await _token(admin, "usher-system", "usher"), "usher-system")))
    return c, admin


async def _token(admin: httpx.AsyncClient, namespace: str, name: str) -> str:
    r = await admin.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                         json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})
    assert r.status_code == 201, r.text
    return r.json()["status"]["token"]


async def _run_usher(tmp: Path) -> UsherRun:
    """``usher --no-ui`` as deployed: the usher ServiceAccount's token on deploy/'s RBAC, headless,
    electing its leader, through the scenario to its end; nobody sends it a command."""
    if "run" in _RUN:
        return _RUN["run"]
    c, admin = await _start(tmp)
    results: dict[str, Any] = {}
    try:
        ctrl = await c.controller("usher-0", elect=True, lease_duration=2.0)
        for _ in range(200):
            if ctrl.is_leader:
                break
            await asyncio.sleep(0.05)
        results["leader"] = ctrl.is_leader
        results["forbidden_actions"] = await ctrl.forbidden_actions()
        # one ambiguous bind (409 with the pod unbound): the client reads the pod back, as it would on a cluster
        c.server.inject(FaultKind.ERROR, method="POST", path="*/binding", status=409, times=1)
        await c.play(until=40)
        results["bound"] = sorted(
            p["metadata"]["name"] for p in c.server.store.list("pods", "default").objects() if p["spec"].get("nodeName")
        )
        nb = c.server.store.get("pods", "nb-pod-0", "default")
        results["nb_condition"] = next(x for x in nb["status"]["conditions"] if x["type"] == "PodScheduled")
        # an admin applies a broken queue config, puts the good one back, then makes the same
        # mistake again: the controller refuses it twice, the second time counted on the first Event
        path = "/api/v1/namespaces/usher-system/configmaps/usher-queues"
        good = (await admin.get(path)).json()["data"]
        for data in ({"queues.yaml": "queues: [{name: research, quota: {gpu: lots}}]\n"}, good) * 2:
            cm = (await admin.get(path)).json()
            cm["data"] = data
            assert (await admin.put(path, json=cm)).status_code == 200
            await c.settle()
        results["config_events"] = [e.get("count") for e in c.server.store.list("events", "usher-system").objects()
                                     if e["reason"] == "InvalidQueueConfig"]
        await c.play()
        results["volumes"] = await _volume_gang(c, admin)
        results["claims"] = await _claim_gang(c, admin)
        results["pod_group"] = await _pod_group_gang(c, admin)
        results["evicted"] = sorted({r.path.split("/")[-2].rsplit("-", 2)[0] for r in c.server.requests
                                     if r.method == "POST" and r.path.endswith("/eviction") and "dryRun" not in r.query
                                     and r.status == 201})
        results["events"] = sorted({e["reason"] for e in c.server.store.list("events").objects()})
        results["lease"] = c.server.store.get("leases", "usher-controller", "usher-system")["spec"]["holderIdentity"]
        results["eval_ran"] = any(s[0] == "eval" for s in c.world.starts)
        results["binds"] = ctrl.stats.binds
    finally:
        await admin.aclose()
        await c.stop()
    run = UsherRun(list(c.server.requests), [a for a in c.server.rbac.accesses if a.user == USHER.name], results)
    _RUN["run"] = run
    return run


async def _pod_group_gang(c: Cluster, admin: httpx.AsyncClient) -> dict[str, Any]:
    """A pod naming a 1.37 PodGroup of minCount 1: usher places it and writes the PodGroup's
    condition. The condition at the end."""
    groups = "/apis/scheduling.k8s.io/v1beta1/namespaces/default/podgroups"
    body = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": "pg"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}}}
    assert (await admin.post(groups, json=body)).status_code == 201
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pg-0", "labels": {"usher/queue": "research"}},
           "spec": {"schedulerName": "usher", "schedulingGroup": {"podGroupName": "pg"},
                    "containers": [{"name": "main", "image": "busybox:1.36"}]}}
    assert (await admin.post("/api/v1/namespaces/default/pods", json=pod)).status_code == 201
    found: dict[str, Any] = {}
    for _ in range(400):
        conditions = ((await admin.get(f"{groups}/pg")).json().get("status") or {}).get("conditions") or []
        found = next((x for x in conditions if x["type"] == "PodGroupInitiallyScheduled"), {})
        if found.get("status") == "True":
            break
        await asyncio.sleep(0.025)
    return found


async def _claim_gang(c: Cluster, admin: httpx.AsyncClient) -> dict[str, list[str]]:
    """A gang of two pods, each with a ResourceClaim of one GPU, on a node whose GPUs a slice
    publishes (made by the admin, as NVIDIA's driver would): the first write of claim gpu-b is
    refused, so usher undoes gpu-a (reading it afresh) and tries again. The devices each claim
    was given at the end."""
    dra = "/apis/resource.k8s.io/v1"
    host = c.server.store.list("nodes").objects()[0]["metadata"]["name"]
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}}
    assert (await admin.post(f"{dra}/deviceclasses", json=body)).status_code == 201
    devices = [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}, "index": {"int": i}}} for i in range(8)]
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{host}-gpu.nvidia.com"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": host, "devices": devices,
                     "pool": {"name": host, "generation": 1, "resourceSliceCount": 1}}}
    assert (await admin.post(f"{dra}/resourceslices", json=body)).status_code == 201
    c.server.inject(FaultKind.ERROR, method="PATCH", path="*/resourceclaims/gpu-b/status", status=409, times=1)
    claims = f"{dra}/namespaces/default/resourceclaims"
    for name in ("gpu-a", "gpu-b"):
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name}, "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1}}]}}}
        assert (await admin.post(claims, json=body)).status_code == 201
    for name in ("gpu-a", "gpu-b"):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"dra-{name}", "labels": {
            "usher/queue": "research", "usher/gang": "dra", "usher/gang-size": "2"}},
            "spec": {"schedulerName": "usher", "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                     "containers": [{"name": "main", "image": "busybox:1.36", "resources": {"claims": [{"name": "gpu"}]}}]}}
        assert (await admin.post("/api/v1/namespaces/default/pods", json=pod)).status_code == 201
    given: dict[str, list[str]] = {}
    for _ in range(400):
        items = (await admin.get(claims)).json()["items"]
        given = {c["metadata"]["name"]: sorted(r["device"] for r in c["status"]["allocation"]["devices"]["results"])
                 for c in items if (c.get("status") or {}).get("allocation")}
        bound = [p for p in c.server.store.list("pods", "default").objects()
                 if p["metadata"]["name"].startswith("dra-") and p["spec"].get("nodeName")]
        if len(given) == 2 and len(bound) == 2:
            break
        await asyncio.sleep(0.025)
    return given


async def _volume_gang(c: Cluster, admin: httpx.AsyncClient) -> str:
    """A pod with two delayed claims: one matched by a static local volume, one of a class whose
    provisioner (played by the admin) fails it. usher binds the volume to its claim, selects a node
    for the other, reads the provisioner's words, and binds no pod. The message usher tells the pod."""
    storage = "/apis/storage.k8s.io/v1/storageclasses"
    for name, provisioner in (("manual", "kubernetes.io/no-provisioner"), ("fast", "csi.example.com")):
        body = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
                "provisioner": provisioner, "volumeBindingMode": "WaitForFirstConsumer"}
        assert (await admin.post(storage, json=body)).status_code == 201
    host = c.server.store.list("nodes").objects()[0]["metadata"]["name"]
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "disk-1"}, "spec": {
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "manual",
        "local": {"path": "/mnt/disk-1"}, "nodeAffinity": {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]}]}}}}
    assert (await admin.post("/api/v1/persistentvolumes", json=pv)).status_code == 201
    # no PV controller runs here: the admin marks the volume Available, as it would
    r = await admin.patch("/api/v1/persistentvolumes/disk-1/status", content=json.dumps({"status": {"phase": "Available"}}),
                          headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    claims = "/api/v1/namespaces/default/persistentvolumeclaims"
    for name, klass in (("static", "manual"), ("made", "fast")):
        body = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "storageClassName": klass}}
        assert (await admin.post(claims, json=body)).status_code == 201
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vol-0", "labels": {"usher/queue": "research"}},
           "spec": {"schedulerName": "usher", "containers": [{"name": "main", "image": "busybox:1.36"}],
                    "volumes": [{"name": "a", "persistentVolumeClaim": {"claimName": "static"}},
                                {"name": "b", "persistentVolumeClaim": {"claimName": "made"}}]}}
    assert (await admin.post("/api/v1/namespaces/default/pods", json=pod)).status_code == 201
    for _ in range(400):
        made = (await admin.get(f"{claims}/made")).json()
        if (made["metadata"].get("annotations") or {}).get("volume.kubernetes.io/selected-node"):
            break
        await asyncio.sleep(0.025)
    # the provisioner gives up on that node, as external-provisioner does after ResourceExhausted
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "made.1"}, "type": "Warning",
             "reason": "ProvisioningFailed", "message": "rpc error: code = ResourceExhausted desc = pool full",
             "involvedObject": {"kind": "PersistentVolumeClaim", "namespace": "default", "name": "made",
                                "uid": made["metadata"]["uid"]}, "source": {"component": "csi.example.com"}}
    assert (await admin.post("/api/v1/namespaces/default/events", json=event)).status_code == 201
    r = await admin.patch(f"{claims}/made", content=json.dumps(
        {"metadata": {"annotations": {"volume.kubernetes.io/selected-node": None}}}),
        headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    pod_now = (await admin.get("/api/v1/namespaces/default/pods/vol-0")).json()
    for _ in range(400):
        told = [e["message"] for e in c.server.store.list("events", "default").objects()
                if e["reason"] == "FailedVolumeBinding" and e["involvedObject"]["name"] == "vol-0"]
        if told:
            return told[0]
        await asyncio.sleep(0.025)
    return f"never told; the pod says {pod_now['status'].get('conditions')}"


async def test_usher_does_its_whole_job_with_the_rbac_of_deploy(tmp_path):
    run = await _run_usher(tmp_path)
    r = run.results
    denied = [f"{q.method} {q.path} -> {q.status}" for q in run.requests if q.status in (401, 403)]
    assert not denied, "requests refused:\n" + "\n".join(denied)
    assert r["leader"] and r["lease"] == "usher-0"
    assert {"pretrain-w-0", "pretrain-w-1"} <= set(r["bound"]) and r["binds"] > 0
    assert r["nb_condition"]["reason"] == "AwaitingApproval"
    assert "sweep" in r["evicted"] and r["eval_ran"], "eval (high) preempts the sweep (low) to fit research's quota"
    assert {"AwaitingApproval", "Preempted"} <= set(r["events"]), r["events"]
    assert r["config_events"] == [2], "a broken queue config refused twice: one Event, counted twice"
    assert "provisioning failed for pvc/made on node" in r["volumes"] and "pool full" in r["volumes"], r["volumes"]
    assert r["claims"] == {"gpu-a": ["gpu-0"], "gpu-b": ["gpu-1"]}, r["claims"]
    assert r["pod_group"].get("reason") == "Scheduled", r["pod_group"]


async def test_every_grant_of_deploy_to_the_usher_service_account_is_used(tmp_path):
    """Least privilege, proven: the controller as deployed uses every verb of every rule deploy/
    grants it, each named object included. (Operator commands are not the controller's: they
    run with the operator's credentials, below.)"""
    run = await _run_usher(tmp_path)
    unused = sorted(str(g) for g in _grants(USHER) if not any(g.allows(a) for a in run.accesses))
    assert not unused, "granted to usher by deploy/ and never used by the controller: " + "; ".join(unused)


async def test_the_controller_may_do_no_operator_action(tmp_path):
    """Its ServiceAccount cannot cordon, evict for an operator, approve, hold or change a quota:
    a console must act with its operator's credentials, and the controller knows it."""
    run = await _run_usher(tmp_path)
    operator_actions = {Action.CORDON, Action.UNCORDON, Action.DRAIN, Action.PREEMPT, Action.APPROVE,
                        Action.HOLD, Action.RELEASE, Action.SET_QUOTA}
    assert set(run.results["forbidden_actions"]) == operator_actions - {Action.PREEMPT}, run.results["forbidden_actions"]


# --------------------------------------------------------------------------- the console, with an operator's credentials


@dataclass
class ConsoleRun:
    requests: list[RequestRecord]
    results: dict[str, Any]


_CONSOLE: dict[str, ConsoleRun] = {}


async def _run_console(tmp: Path) -> ConsoleRun:
    """The controller as deployed, and beside it a console (``usher --kubeconfig ...``) with the
    credentials of an operator bound to ``usher-operator``, sending every kind of command."""
    if "run" in _CONSOLE:
        return _CONSOLE["run"]
    c, admin = await _start(tmp)
    results: dict[str, Any] = {}
    try:
        assert (await admin.post("/api/v1/namespaces", json={"metadata": {"name": OPERATOR_NAMESPACE}})).status_code == 201
        r = await admin.post(f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/serviceaccounts", json={"metadata": {"name": "alice"}})
        assert r.status_code == 201, r.text
        # as the README says: kubectl create clusterrolebinding usher-operators --clusterrole=usher-operator ...
        r = await admin.post(f"{RBAC}/clusterrolebindings", json={
            "metadata": {"name": "usher-operators"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "usher-operator"},
            "subjects": [{"kind": "ServiceAccount", "name": "alice", "namespace": OPERATOR_NAMESPACE}]})
        assert r.status_code == 201, r.text
        await c.controller("usher-0", elect=True, lease_duration=2.0)
        await c.play(until=40)
        operator_config = tmp / "alice.kubeconfig"
        token = await _token(admin, OPERATOR_NAMESPACE, "alice")
        operator_config.write_text(yaml.safe_dump(c.server.kubeconfig(token, "default")))
        c.kubeconfig = operator_config
        console = await c.controller("alice-console", schedule=False)
        results["forbidden_actions"] = await console.forbidden_actions()
        results["approve"] = await asyncio.wait_for(console.post(Command(Action.APPROVE, job="nb")), 10)
        await c.settle()
        nb = c.server.store.get("pods", "nb-pod-0", "default")
        results["nb_bound"] = bool(nb["spec"].get("nodeName"))
        results["quota"] = await asyncio.wait_for(
            console.post(Command(Action.SET_QUOTA, queue="research", quota={"gpu": 16_000})), 10)
        results["cordon"] = await asyncio.wait_for(console.post(Command(Action.CORDON, node="n-04")), 10)
        # the same action again: its Event is counted on the first (a patch), not copied
        await asyncio.wait_for(console.post(Command(Action.CORDON, node="n-04")), 10)
        results["cordon_events"] = [e.get("count") for e in c.server.store.list("events").objects() if e["reason"] == "UsherCordon"]
        await c.settle()
        results["preempt"] = await asyncio.wait_for(console.post(Command(Action.PREEMPT, job="pretrain")), 10)
        await c.settle()
        node = next(p["spec"]["nodeName"] for p in c.server.store.list("pods", "default").objects()
                    if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp"))
        results["drain"] = await asyncio.wait_for(console.post(Command(Action.DRAIN, node=node)), 10)
        await c.settle()
        results["node_cordoned"] = c.server.store.get("nodes", "n-04")["spec"].get("unschedulable")
        results["configmap"] = yaml.safe_load(
            c.server.store.get("configmaps", "usher-queues", "usher-system")["data"]["queues.yaml"])
        results["events"] = sorted({e["reason"] for e in c.server.store.list("events").objects()})
        results["controller_denied"] = [
            f"{q.method} {q.path} -> {q.status}" for q in c.server.requests if q.status in (401, 403)]
    finally:
        await admin.aclose()
        await c.stop()
    run = ConsoleRun(list(c.server.requests), results)
    _CONSOLE["run"] = run
    return run


async def test_an_operator_bound_to_the_operator_role_cordons_drains_preempts_and_sets_quotas(tmp_path):
    r = (await _run_console(tmp_path)).results
    assert not r["controller_denied"], "requests refused:\n" + "\n".join(r["controller_denied"])
    assert r["configmap"]["queues"][0]["quota"]["gpu"] == 16
    assert r["node_cordoned"] is True
    assert r["cordon_events"] == [2]
    assert {"UsherCordon", "UsherSetQuota", "UsherPreempt", "UsherDrain"} <= set(r["events"]), r["events"]


async def test_an_operator_bound_to_the_operator_role_approves_and_may_do_every_action(tmp_path):
    """Approve and hold are the decisions ConfigMap's (the operator role has no pod patch)."""
    run = await _run_console(tmp_path)
    assert run.results["forbidden_actions"] == {}
    denied = [f"{q.method} {q.path} -> {q.status}" for q in run.requests if q.status in (401, 403)]
    assert not denied, "requests refused:\n" + "\n".join(denied)
    assert run.results["nb_bound"], "the approved notebook runs"

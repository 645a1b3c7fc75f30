"""ValidatingAdmissionPolicies in the sandbox (:mod:`usher.sandbox.admission_policy`), through real clients.

deploy/'s policy for the node agent is applied to a sandbox with RBAC, and the agent's own
ServiceAccount token (bound to its pod, as the kubelet mounts it) patches Nodes through the
official ``kubernetes`` client: only its own Node's three annotations get through. Then the
evaluator's general rules, each on a policy written for it: denials and their status codes and
wording, Warn, matchConditions and variables, resource rules with subresources, selectors and
exclusions, deletes and bindings, every user including the admin, failure policies, and the
policies the sandbox refuses to evaluate (parameters) rather than ignore.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes.client import ApiClient, ApiException, Configuration, CoreV1Api

from usher.sandbox.apiserver import FakeApiServer, ServerThread

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
AGENT_SA = ("usher-system", "usher-agent")
NODE_NAME = "authentication.kubernetes.io/node-name"


def _docs(*names: str) -> list[dict[str, Any]]:
    return [d for n in names for d in yaml.safe_load_all((DEPLOY / n).read_text()) if d]


def _path(server: FakeApiServer, doc: dict[str, Any]) -> str:
    rt = next(t for t in server.store.catalogue.versions().get(doc["apiVersion"], []) if t.kind == doc["kind"])
    base = "/api/v1" if doc["apiVersion"] == "v1" else f"/apis/{doc['apiVersion']}"
    namespace = doc["metadata"].get("namespace")
    return base + (f"/namespaces/{namespace}" if rt.namespaced else "") + f"/{rt.resource}"


def _client(url: str, token: str) -> ApiClient:
    config = Configuration(host=url)
    config.api_key = {"authorization": token}
    config.api_key_prefix = {"authorization": "Bearer"}
    return ApiClient(config)


def _node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name},
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
            "spec": {"podCIDR": "10.0.7.0/24"}}


class Agent:
    """deploy/'s agent objects and policy in a sandbox with RBAC; nodes gpu-7 and gpu-8."""

    def __init__(self, thread: ServerThread, admin: httpx.Client) -> None:
        self.thread, self.admin = thread, admin

    def create(self, path: str, doc: dict[str, Any]) -> None:
        r = self.admin.post(path, json=doc)
        assert r.status_code == 201, r.text

    def token(self, pod: str | None) -> str:
        """The agent's token through TokenRequest, bound to ``pod`` as the kubelet's projected one is."""
        with _client(self.thread.url, "sandbox") as api:
            body: dict[str, Any] = {"spec": {"expirationSeconds": 3600}}
            if pod is not None:
                body["spec"]["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": pod}
            return CoreV1Api(api).create_namespaced_service_account_token(AGENT_SA[1], AGENT_SA[0], body).status.token


@pytest.fixture
def agent() -> Iterator[Agent]:
    with ServerThread(FakeApiServer(authorization=True)) as thread, \
            httpx.Client(base_url=thread.url, headers={"Authorization": "Bearer sandbox"}, timeout=10) as admin:
        box = Agent(thread, admin)
        for doc in _docs("00-namespace.yaml", "70-agent.yaml", "71-agent-admission-policy.yaml"):
            box.create(_path(thread.server, doc), doc)
        for name in ("gpu-7", "gpu-8"):
            box.create("/api/v1/nodes", _node(name))
        box.create("/api/v1/namespaces/usher-system/pods", {
            "metadata": {"name": "usher-agent-x7"},
            "spec": {"serviceAccountName": "usher-agent", "nodeName": "gpu-7", "containers": [{"name": "agent", "image": "usher"}]},
        })
        yield box


def _patch(api: ApiClient, node: str, patch: dict[str, Any]) -> ApiException | None:
    try:
        CoreV1Api(api).patch_node(node, patch)
    except ApiException as error:
        return error
    return None


def test_the_agent_may_annotate_only_its_own_node_and_nothing_else(agent: Agent) -> None:
    wanted = {"usher/nvlink": "0,1,2,3;4,5,6,7", "usher/gpu-health": "", "usher/gpu-xids": "{}"}
    with _client(agent.thread.url, agent.token("usher-agent-x7")) as api:
        assert _patch(api, "gpu-7", {"metadata": {"annotations": wanted}}) is None
        node = CoreV1Api(api).read_node("gpu-7")
        assert node.metadata.annotations["usher/nvlink"] == "0,1,2,3;4,5,6,7"
        assert _patch(api, "gpu-7", {"metadata": {"annotations": {"usher/nvlink": None}}}) is None
        for node_name, patch, why in [
            ("gpu-8", {"metadata": {"annotations": {"usher/gpu-health": "0:xid 79"}}}, "may change only its own Node, not gpu-8"),
            ("gpu-7", {"metadata": {"annotations": {"node.alpha.kubernetes.io/ttl": "30"}}}, "may change only the annotations"),
            ("gpu-7", {"metadata": {"labels": {"usher/rack": "r9"}}}, "may not change a Node's labels"),
            ("gpu-7", {"spec": {"unschedulable": True}}, "may not change a Node's spec"),
            ("gpu-7", {"metadata": {"finalizers": ["example.com/hold"]}}, "owner references or finalizers"),
        ]:
            error = _patch(api, node_name, patch)
            assert error is not None and error.status == 403, (patch, error)
            message = yaml.safe_load(error.body)["message"]
            assert message.startswith(f'nodes "{node_name}" is forbidden: ValidatingAdmissionPolicy '
                                      "'usher-agent-own-node' with binding 'usher-agent-own-node' denied request: "), message
            assert why in message, message
        # RBAC still holds around the policy: no deletes, no nodes/status
        with pytest.raises(ApiException) as denied:
            CoreV1Api(api).delete_node("gpu-7")
        assert denied.value.status == 403 and "cannot delete resource" in denied.value.body
    assert "unschedulable" not in (agent.admin.get("/api/v1/nodes/gpu-7").json()["spec"])
    # a token that names no node (kubectl create token) may change no Node at all
    with _client(agent.thread.url, agent.token(None)) as api:
        error = _patch(api, "gpu-7", {"metadata": {"annotations": {"usher/gpu-health": ""}}})
        assert error is not None and error.status == 403 and "token names no node" in error.body
    # everyone else is left alone: the admin cordons and relabels the agent's Node
    r = agent.admin.patch("/api/v1/nodes/gpu-7", json={"spec": {"unschedulable": True}, "metadata": {"labels": {"usher/rack": "r1"}}},
                          headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200 and r.json()["spec"]["unschedulable"] is True, r.text


def test_a_pod_bound_token_carries_the_node_of_its_pod(agent: Agent) -> None:
    token = agent.token("usher-agent-x7")
    user = agent.thread.call(agent.thread.server.auth.user, f"Bearer {token}")
    extra = dict(user.extra)
    assert extra[NODE_NAME] == ("gpu-7",) and extra["authentication.kubernetes.io/pod-name"] == ("usher-agent-x7",)
    with _client(agent.thread.url, "sandbox") as api, pytest.raises(ApiException) as missing:
        CoreV1Api(api).create_namespaced_service_account_token(AGENT_SA[1], AGENT_SA[0], {
            "spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "nope"}}})
    assert missing.value.status == 404


# --------------------------------------------------------------------------- the evaluator's rules


@pytest.fixture
def sandbox() -> Iterator[tuple[ServerThread, httpx.Client]]:
    with ServerThread() as thread, httpx.Client(base_url=thread.url, timeout=10) as client:
        assert client.post("/api/v1/namespaces", json={"metadata": {"name": "team", "labels": {"env": "prod"}}}).status_code == 201
        assert client.post("/api/v1/namespaces", json={"metadata": {"name": "lab"}}).status_code == 201
        yield thread, client


def _policy(client: httpx.Client, name: str, spec: dict[str, Any], actions: list[str] | None = None,
            binding: dict[str, Any] | None = None) -> None:
    r = client.post(f"{ADMISSION}/validatingadmissionpolicies", json={"metadata": {"name": name}, "spec": spec})
    assert r.status_code == 201, r.text
    r = client.post(f"{ADMISSION}/validatingadmissionpolicybindings", json={
        "metadata": {"name": f"{name}-binding"},
        "spec": {"policyName": name, "validationActions": actions or ["Deny"], **(binding or {})}})
    assert r.status_code == 201, r.text


def _rules(resources: list[str], operations: list[str] | None = None, groups: list[str] | None = None) -> dict[str, Any]:
    return {"resourceRules": [{"apiGroups": groups or [""], "apiVersions": ["v1"],
                               "operations": operations or ["CREATE", "UPDATE"], "resources": resources}]}


def _cm(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name, **({"labels": labels} if labels else {})}, "data": data}


def test_a_denial_names_policy_binding_and_message_with_the_reasons_status_code(sandbox) -> None:
    _, client = sandbox
    _policy(client, "small-configmaps", {
        "matchConstraints": _rules(["configmaps"]),
        "validations": [
            {"expression": "!has(object.data.big)", "message": "no big keys", "reason": "Forbidden"},
            {"expression": "size(object.data) <= 2"},
            {"expression": "object.metadata.name.startsWith('cm-')",
             "messageExpression": "'name ' + object.metadata.name + ' lacks the cm- prefix'"},
        ],
    })
    r = client.post("/api/v1/namespaces/team/configmaps", json=_cm("cm-a", big="x"))
    assert r.status_code == 403 and r.json()["reason"] == "Forbidden"
    assert r.json()["message"] == ('configmaps "cm-a" is forbidden: ValidatingAdmissionPolicy \'small-configmaps\' '
                                   "with binding 'small-configmaps-binding' denied request: no big keys")
    r = client.post("/api/v1/namespaces/team/configmaps", json=_cm("cm-b", a="1", b="2", c="3"))
    assert r.status_code == 422 and r.json()["reason"] == "Invalid"
    assert r.json()["message"].endswith("denied request: failed expression: size(object.data) <= 2")
    r = client.post("/api/v1/namespaces/team/configmaps", json=_cm("plain"))
    assert r.status_code == 422 and r.json()["message"].endswith("denied request: name plain lacks the cm- prefix")
    assert client.post("/api/v1/namespaces/team/configmaps", json=_cm("cm-ok", a="1")).status_code == 201
    # an update and a patch are UPDATEs of the whole object
    r = client.patch("/api/v1/namespaces/team/configmaps/cm-ok", json={"data": {"big": "y"}},
                     headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 403 and "no big keys" in r.json()["message"]
    assert "big" not in client.get("/api/v1/namespaces/team/configmaps/cm-ok").json()["data"]


def test_warn_answers_a_warning_header_and_lets_the_write_through(sandbox) -> None:
    _, client = sandbox
    _policy(client, "labelled", {"matchConstraints": _rules(["configmaps"]),
                                 "validations": [{"expression": "has(object.metadata.labels)", "message": "label it"}]},
            actions=["Warn", "Audit"])
    r = client.post("/api/v1/namespaces/team/configmaps", json=_cm("bare"))
    assert r.status_code == 201
    assert r.headers["warning"] == ('299 - "Validation failed for ValidatingAdmissionPolicy \'labelled\' '
                                    "with binding 'labelled-binding': label it\"")


def test_match_conditions_variables_and_the_request(sandbox) -> None:
    thread, client = sandbox
    _policy(client, "anonymous-reads-only", {
        "matchConstraints": _rules(["configmaps"], ["*"]),
        "matchConditions": [{"name": "anonymous", "expression": "request.userInfo.username == 'system:anonymous'"}],
        "variables": [{"name": "op", "expression": "request.operation"},
                      {"name": "where", "expression": "request.namespace + '/' + request.name"},
                      {"name": "broken", "expression": "object.nope"}],
        "validations": [{"expression": "variables.op != 'DELETE' || namespaceObject.metadata.name == 'lab'",
                         "messageExpression": "'no ' + variables.op + ' of ' + variables.where + ' by ' + request.userInfo.username"}],
    })
    assert client.post("/api/v1/namespaces/team/configmaps", json=_cm("x")).status_code == 201
    r = client.delete("/api/v1/namespaces/team/configmaps/x")
    assert r.status_code == 422 and r.json()["message"].endswith("denied request: no DELETE of team/x by system:anonymous")
    assert client.post("/api/v1/namespaces/lab/configmaps", json=_cm("x")).status_code == 201
    assert client.delete("/api/v1/namespaces/lab/configmaps/x").status_code == 200
    # another user (the admin's token) is not matched by the condition
    admin = {"Authorization": f"Bearer {thread.server.admin_token}"}
    assert client.delete("/api/v1/namespaces/team/configmaps/x", headers=admin).status_code == 200


def test_subresources_selectors_and_exclusions(sandbox) -> None:
    _, client = sandbox
    _policy(client, "no-binding-to-n2", {
        "matchConstraints": {**_rules(["pods/binding", "pods/status"]), "namespaceSelector": {"matchLabels": {"env": "prod"}},
                             "excludeResourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"],
                                                       "resources": ["pods/status"], "resourceNames": ["free"]}]},
        "validations": [{"expression": "request.subResource != 'binding' || object.target.name != 'n2'", "message": "not n2"},
                        {"expression": "request.subResource != 'status' || object.status.phase != 'Failed'", "message": "no failing"}],
    }, binding={"matchResources": {"objectSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}}})
    for ns in ("team", "lab"):
        for name in ("p", "free"):
            r = client.post(f"/api/v1/namespaces/{ns}/pods", json={"metadata": {"name": name, "labels": {"app": "x"}},
                                                                   "spec": {"containers": [{"name": "c", "image": "i"}]}})
            assert r.status_code == 201, r.text
    # pods themselves are not matched: only their subresources
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p", "labels": {"app": "x"}}, "target": {"name": "n2"}}
    r = client.post("/api/v1/namespaces/team/pods/p/binding", json=binding)
    assert r.status_code == 422 and r.json()["message"].endswith("denied request: not n2"), r.text
    assert client.post("/api/v1/namespaces/lab/pods/p/binding", json=binding).status_code == 201, "lab is not selected"
    unlabelled = {**binding, "metadata": {"name": "p"}}
    assert client.post("/api/v1/namespaces/team/pods/p/binding", json=unlabelled).status_code == 201, "object selector"
    failing = {"status": {"phase": "Failed"}}
    merge = {"Content-Type": "application/merge-patch+json"}
    r = client.patch("/api/v1/namespaces/team/pods/p/status", json=failing, headers=merge)
    assert r.status_code == 422 and "no failing" in r.json()["message"]
    assert client.patch("/api/v1/namespaces/team/pods/free/status", json=failing, headers=merge).status_code == 200, "excluded by name"
    assert client.patch("/api/v1/namespaces/team/pods/p", json={"metadata": {"labels": {"k": "v"}}}, headers=merge).status_code == 200


def test_failure_policy_and_what_the_sandbox_refuses_to_evaluate(sandbox) -> None:
    _, client = sandbox
    _policy(client, "broken-fail", {"matchConstraints": _rules(["configmaps"]),
                                    "validations": [{"expression": "object.data.missing == 'x'"}]})
    r = client.post("/api/v1/namespaces/team/configmaps", json=_cm("a", k="v"))
    assert r.status_code == 422 and "expression 'object.data.missing == 'x'' resulted in error" in r.json()["message"]
    assert client.delete(f"{ADMISSION}/validatingadmissionpolicybindings/broken-fail-binding").status_code == 200
    _policy(client, "broken-ignore", {"matchConstraints": _rules(["configmaps"]), "failurePolicy": "Ignore",
                                      "validations": [{"expression": "object.data.missing == 'x'"}]})
    assert client.post("/api/v1/namespaces/team/configmaps", json=_cm("a", k="v")).status_code == 201
    _policy(client, "with-params", {"matchConstraints": _rules(["configmaps"]),
                                    "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                                    "validations": [{"expression": "true"}]},
            binding={"paramRef": {"name": "limits", "namespace": "team", "parameterNotFoundAction": "Deny"}})
    r = client.post("/api/v1/namespaces/team/configmaps", json=_cm("b"))
    assert r.status_code == 422 and "does not evaluate policies with parameters" in r.json()["message"]


def test_every_user_is_subject_to_policies_the_admin_included() -> None:
    with ServerThread(FakeApiServer(authorization=True)) as thread, \
            httpx.Client(base_url=thread.url, headers={"Authorization": "Bearer sandbox"}, timeout=10) as admin:
        _policy(admin, "frozen", {"matchConstraints": _rules(["namespaces"], ["DELETE"]),
                                  "validations": [{"expression": "oldObject.metadata.name != 'kube-system'", "reason": "Forbidden",
                                                   "message": "kube-system stays"}]})
        r = admin.delete("/api/v1/namespaces/kube-system")
        assert r.status_code == 403 and r.json()["message"].endswith("denied request: kube-system stays")

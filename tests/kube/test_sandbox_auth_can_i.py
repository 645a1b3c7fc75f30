"""``kubectl auth can-i`` (with ``--as``, ``--as-group``, ``--list``) and ``kubectl auth whoami``
against ``usher sandbox --rbac``, as an operator checks a tenant boundary on a real cluster.

The sandbox runs with RBAC on and over HTTPS. Namespace ``team-a``'s ServiceAccount ``tenant``
is that namespace's admin (every verb on every resource in it, nothing cluster-wide); ``team-b``
is another team's; ``usher-system`` holds the operators' decisions ConfigMap. The real kubectl
(sending its reviews as protobuf, and ``Impersonate-*`` headers for ``--as``) and the official
``kubernetes`` client are the judges: what they print and raise is what a real cluster gives
them (sandbox/impersonation.py, sandbox/authn.py, sandbox/auth.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import kubernetes
import pytest
import yaml
from kubectl import Kubectl
from kubernetes.client import ApiClient, ApiException, AuthenticationV1Api, Configuration, V1SelfSubjectReview
from usher.sandbox.apiserver import FakeApiServer, ServerThread
from usher.sandbox.objects import DECISIONS_CONFIGMAP, USHER_NAMESPACE, decisions_configmap

RBAC = "/apis/rbac.authorization.k8s.io/v1"
TENANT = "system:serviceaccount:team-a:tenant"


@dataclass
class Cluster:
    thread: ServerThread
    admin: Kubectl
    tenant: Kubectl
    tmp: Path

    @property
    def server(self) -> FakeApiServer:
        return self.thread.server

    def client(self, token: str, headers: dict[str, str] | None = None) -> ApiClient:
        """The official client with ``token``, sending ``headers`` on every request."""
        configuration = Configuration()
        kubernetes.config.load_kube_config_from_dict(self.server.kubeconfig(token), client_configuration=configuration)
        client = ApiClient(configuration)
        for name, value in (headers or {}).items():
            client.set_default_header(name, value)
        return client


def _post(admin: httpx.Client, path: str, body: dict[str, Any]) -> None:
    r = admin.post(path, json=body)
    assert r.status_code == 201, (path, r.text)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with ServerThread(FakeApiServer(authorization=True, tls=True)) as thread:
        server = thread.server
        with httpx.Client(base_url=thread.url, verify=server.verify, timeout=10,
                          headers={"Authorization": f"Bearer {server.admin_token}"}) as admin:
            for ns in ("team-a", "team-b", USHER_NAMESPACE):
                _post(admin, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            _post(admin, f"/api/v1/namespaces/{USHER_NAMESPACE}/configmaps", decisions_configmap())
            _post(admin, "/api/v1/namespaces/team-a/serviceaccounts",
                  {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "tenant"}})
            _post(admin, f"{RBAC}/namespaces/team-a/roles", {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "namespace-admin"},
                "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]})
            _post(admin, f"{RBAC}/namespaces/team-a/rolebindings", {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "tenant"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "namespace-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": "team-a"}]})
            # group "researchers" may read pods in team-b (what --as-group is for)
            _post(admin, f"{RBAC}/namespaces/team-b/roles", {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "pod-reader"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]})
            _post(admin, f"{RBAC}/namespaces/team-b/rolebindings", {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "researchers"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "researchers"}]})
        token = thread.call(server.token_for, "team-a", "tenant")
        configs = {}
        for who, (tok, ns) in {"admin": (server.admin_token, "default"), "tenant": (token, "team-a")}.items():
            configs[who] = tmp_path / who / "kubeconfig"
            configs[who].parent.mkdir()
            configs[who].write_text(yaml.safe_dump(server.kubeconfig(tok, ns)))
        yield Cluster(thread, Kubectl(configs["admin"]), Kubectl(configs["tenant"]), tmp_path)


def can_i(kubectl: Kubectl, *args: str) -> str:
    """``kubectl auth can-i`` 's answer: ``yes`` (exit 0) or ``no`` (exit 1); fails on anything else."""
    result = kubectl.run("auth", "can-i", *args)
    answer = result.stdout.strip()
    assert (answer, result.returncode) in (("yes", 0), ("no", 1)), (args, result.returncode, result.stdout, result.stderr)
    return answer


def test_a_tenants_can_i_is_yes_in_its_namespace_and_no_in_another_or_for_the_decisions(cluster):
    tenant = cluster.tenant
    assert can_i(tenant, "create", "pods", "-n", "team-a") == "yes"
    assert can_i(tenant, "delete", "jobs.batch", "-n", "team-a") == "yes"
    assert can_i(tenant, "create", "pods", "-n", "team-b") == "no"
    # cluster-wide: kubectl would send its context's namespace for nodes too (and warn), which the
    # namespace's Role then answers, as on a real cluster; -A asks at the cluster scope
    assert can_i(tenant, "list", "nodes", "--all-namespaces") == "no"
    assert can_i(tenant, "update", f"configmaps/{DECISIONS_CONFIGMAP}", "-n", USHER_NAMESPACE) == "no"
    assert can_i(tenant, "patch", f"configmaps/{DECISIONS_CONFIGMAP}", "-n", USHER_NAMESPACE) == "no"
    # the admin may do all of it
    assert can_i(cluster.admin, "update", f"configmaps/{DECISIONS_CONFIGMAP}", "-n", USHER_NAMESPACE) == "yes"
    assert can_i(cluster.admin, "create", "pods", "-n", "team-b") == "yes"


def test_can_i_list_shows_the_namespace_admins_rules_and_none_of_them_elsewhere(cluster):
    own = cluster.tenant.ok("auth", "can-i", "--list", "-n", "team-a").splitlines()
    assert own[0].split() == ["Resources", "Non-Resource", "URLs", "Resource", "Names", "Verbs"]
    assert ["*.*", "[]", "[]", "[*]"] in [line.split() for line in own]
    assert ["selfsubjectreviews.authentication.k8s.io", "[]", "[]", "[create]"] in [line.split() for line in own]
    other = [line.split() for line in cluster.tenant.ok("auth", "can-i", "--list", "-n", "team-b").splitlines()]
    assert ["*.*", "[]", "[]", "[*]"] not in other
    assert ["selfsubjectaccessreviews.authorization.k8s.io", "[]", "[]", "[create]"] in other


def test_a_tenant_may_not_impersonate_anyone_outside_its_namespace(cluster):
    result = cluster.tenant.run("auth", "can-i", "create", "pods", "-n", "team-b", "--as=alice")
    assert result.returncode == 1
    assert ('Error from server (Forbidden): users "alice" is forbidden: User "system:serviceaccount:team-a:tenant" '
            'cannot impersonate resource "users" in API group "" at the cluster scope') in result.stderr
    result = cluster.tenant.run("get", "--raw", "/api/v1/namespaces/team-b/pods", "--as=system:serviceaccount:team-b:default")
    assert result.returncode == 1
    assert ('Error from server (Forbidden): serviceaccounts "default" is forbidden: User "system:serviceaccount:team-a:tenant" '
            'cannot impersonate resource "serviceaccounts" in API group "" in the namespace "team-b"') in result.stderr
    # every request is refused, discovery's too (kubectl then prints what it prints against any cluster)
    result = cluster.tenant.run("get", "pods", "-n", "team-a", "--as=alice")
    assert result.returncode == 1 and "Error from server (Forbidden)" in result.stderr
    result = cluster.tenant.run("auth", "whoami", "--as=alice", "--as-group=system:masters")
    assert result.returncode == 1 and "you do not have permission to call it" in result.stderr  # kubectl's words for a 403
    # a namespace admin's "*" covers its own namespace's ServiceAccounts, as on a real cluster
    assert can_i(cluster.tenant, "create", "pods", "-n", "team-a", "--as=system:serviceaccount:team-a:runner") == "no"
    assert can_i(cluster.tenant, "impersonate", "serviceaccounts", "-n", "team-a") == "yes"
    assert can_i(cluster.tenant, "impersonate", "users", "-A") == "no"


def test_the_admin_as_the_tenant_gets_the_tenants_answers(cluster):
    admin = cluster.admin
    assert can_i(admin, "create", "pods", "-n", "team-b") == "yes"
    assert can_i(admin, "create", "pods", "-n", "team-a", f"--as={TENANT}") == "yes"
    assert can_i(admin, "create", "pods", "-n", "team-b", f"--as={TENANT}") == "no"
    assert can_i(admin, "update", f"configmaps/{DECISIONS_CONFIGMAP}", "-n", USHER_NAMESPACE, f"--as={TENANT}") == "no"
    # and the requests themselves run as the tenant, not only the reviews
    result = admin.run("get", "pods", "-n", "team-b", f"--as={TENANT}")
    assert result.returncode == 1
    assert (f'pods is forbidden: User "{TENANT}" cannot list resource "pods" in API group "" '
            'in the namespace "team-b"') in result.stderr
    admin.ok("create", "configmap", "mine", "-n", "team-a", f"--as={TENANT}")
    listed = [line.split() for line in admin.ok("auth", "can-i", "--list", "-n", "team-a", f"--as={TENANT}").splitlines()]
    assert ["*.*", "[]", "[]", "[*]"] in listed


def test_as_group_is_authorized_as_that_group(cluster):
    admin = cluster.admin
    assert can_i(admin, "list", "pods", "-n", "team-b", "--as=alice") == "no"
    assert can_i(admin, "list", "pods", "-n", "team-b", "--as=alice", "--as-group=researchers") == "yes"
    assert can_i(admin, "delete", "pods", "-n", "team-b", "--as=alice", "--as-group=researchers") == "no"
    admin.ok("get", "pods", "-n", "team-b", "--as=alice", "--as-group=researchers")
    # groups asked for are the groups: alice is not system:masters unless she is asked to be
    assert can_i(admin, "list", "nodes", "-A", "--as=alice", "--as-group=researchers") == "no"
    assert can_i(admin, "list", "nodes", "-A", "--as=alice", "--as-group=system:masters") == "yes"


def test_whoami_names_the_caller_or_whom_it_impersonates(cluster):
    rows = [line.split(None, 1) for line in cluster.tenant.ok("auth", "whoami").splitlines()]
    assert rows[0] == ["ATTRIBUTE", "VALUE"]
    got = {key: value.strip() for key, value in rows[1:]}
    assert got["Username"] == TENANT
    assert got["Groups"] == "[system:serviceaccounts system:serviceaccounts:team-a system:authenticated]"
    assert json.loads(cluster.admin.ok("auth", "whoami", "-o", "json"))["status"]["userInfo"] == {
        "username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]}
    # impersonated: a ServiceAccount's name brings its groups; each --as-group is one group, commas and all
    review = json.loads(cluster.admin.ok("auth", "whoami", "-o", "json", "--as=system:serviceaccount:team-b:ci"))
    assert review["kind"] == "SelfSubjectReview" and review["apiVersion"] == "authentication.k8s.io/v1"
    assert review["status"]["userInfo"] == {"username": "system:serviceaccount:team-b:ci", "groups": [
        "system:serviceaccounts", "system:serviceaccounts:team-b", "system:authenticated"]}
    review = json.loads(cluster.admin.ok("auth", "whoami", "-o", "json", "--as=alice", "--as-group=a, b",
                                         "--as-group=researchers", "--as-uid=42"))
    assert review["status"]["userInfo"] == {"username": "alice", "uid": "42",
                                            "groups": ["a, b", "researchers", "system:authenticated"]}
    # system:anonymous is unauthenticated: public info, but no discovery and no reviews
    assert json.loads(cluster.admin.ok("get", "--raw", "/version", "--as=system:anonymous"))["gitVersion"]
    result = cluster.admin.run("get", "--raw", "/api", "--as=system:anonymous")
    assert 'Error from server (Forbidden): forbidden: User "system:anonymous" cannot get path "/api"' in result.stderr
    result = cluster.admin.run("auth", "whoami", "--as=system:anonymous")
    assert result.returncode == 1 and "you do not have permission to call it" in result.stderr


def test_the_official_client_impersonates_with_headers_and_extras(cluster):
    admin_token = cluster.server.admin_token
    with cluster.client(admin_token, {"Impersonate-User": "alice", "Impersonate-Extra-Scopes": "view",
                                      "Impersonate-Extra-Example.com%2fteam": "ml"}) as client:
        review = AuthenticationV1Api(client).create_self_subject_review(V1SelfSubjectReview())
    info = review.status.user_info
    assert (info.username, info.groups, info.extra) == (
        "alice", ["system:authenticated"], {"example.com/team": ["ml"], "scopes": ["view"]})
    # a group without a user is refused before any check, in the real server's plain text
    with cluster.client(admin_token, {"Impersonate-Group": "researchers"}) as client:
        with pytest.raises(ApiException) as refused:
            AuthenticationV1Api(client).create_self_subject_review(V1SelfSubjectReview())
    assert refused.value.status == 500
    body = refused.value.body
    assert (body.decode() if isinstance(body, bytes) else body) == (
        'Internal Server Error: "/apis/authentication.k8s.io/v1/selfsubjectreviews": '
        "requested [{Group  researchers    }] without impersonating a user\n")
    # the tenant may not set extras on itself either
    token = cluster.thread.call(cluster.server.token_for, "team-a", "tenant")
    with cluster.client(token, {"Impersonate-User": TENANT, "Impersonate-Extra-Scopes": "admin"}) as client:
        with pytest.raises(ApiException) as forbidden:
            AuthenticationV1Api(client).create_self_subject_review(V1SelfSubjectReview())
    assert forbidden.value.status == 403
    status = json.loads(forbidden.value.body)
    assert status["message"] == (
        f'userextras.authentication.k8s.io "admin" is forbidden: User "{TENANT}" cannot impersonate resource '
        '"userextras/scopes" in API group "authentication.k8s.io" at the cluster scope')


def test_without_rbac_every_impersonation_is_allowed_and_whoami_answers(tmp_path):
    """``usher sandbox`` without ``--rbac`` is a cluster whose authorizer is AlwaysAllow."""
    with ServerThread(FakeApiServer(tls=True)) as thread:
        config = tmp_path / "kubeconfig"
        config.write_text(yaml.safe_dump(thread.server.kubeconfig(thread.server.admin_token)))
        kubectl = Kubectl(config)
        assert can_i(kubectl, "create", "pods") == "yes"
        review = json.loads(kubectl.ok("auth", "whoami", "-o", "json", "--as=alice", "--as-group=researchers"))
        assert review["status"]["userInfo"] == {"username": "alice", "groups": ["researchers", "system:authenticated"]}
        kubectl.ok("create", "configmap", "x", "--as=system:serviceaccount:default:ci")


def test_the_operating_guides_check_of_an_operator_binding(cluster):
    """docs/operating.md: bind usher-operator to a group, then check a member's rights with --as/--as-group."""
    admin = cluster.admin
    admin.ok("apply", "-f", str(Path(__file__).resolve().parents[2] / "deploy" / "22-rbac-operator.yaml"))
    decisions = (f"configmap/{DECISIONS_CONFIGMAP}", "-n", USHER_NAMESPACE)
    assert can_i(admin, "update", *decisions, "--as=alice", "--as-group=gpu-admins") == "no"
    admin.ok("create", "clusterrolebinding", "usher-operators", "--clusterrole=usher-operator", "--group=gpu-admins")
    assert can_i(admin, "update", *decisions, "--as=alice", "--as-group=gpu-admins") == "yes"
    assert can_i(admin, "update", *decisions, "--as=alice") == "no"
    assert can_i(admin, "update", *decisions, f"--as={TENANT}") == "no"

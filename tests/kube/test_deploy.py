"""The manifests in deploy/ and the Dockerfile, checked for what a cluster operator would notice.

Every document loads and is named; `kubectl apply -f deploy/` creates the namespace first and
puts everything namespaced in it; the controller's RBAC grants exactly `CONTROLLER_PERMISSIONS`
(the operator role exactly `OPERATOR_PERMISSIONS`, the node agent's `AGENT_PERMISSIONS`), nothing
broader; the agent DaemonSet reaches every GPU node without taking a GPU; the queue config
parses with the scenario models and makes sense; the Deployment is hardened, probed on the port
it serves, and spread over nodes; the examples reach usher and can run in their queues; the agent
may change only its own Node's annotations (a ValidatingAdmissionPolicy, evaluated by the
sandbox's API server; tests/kube/test_sandbox_admission_policy.py applies it over HTTP with RBAC); NetworkPolicies let only Prometheus (and, for
the agent, the controller) reach the metrics ports. The sandbox takes every new kind with strict
field validation.

What is not checked here, because no test has a real API server: that Kubernetes compiles and
type-checks the policy's CEL as the sandbox's interpreter (cel-python) does, that it fills
``authentication.kubernetes.io/node-name`` for the agent's token, and that a network plugin
enforces the NetworkPolicies (and lets the kubelet's probes through).
"""

from __future__ import annotations

import math
import re
import tomllib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from pydantic import TypeAdapter

from usher.agent.main import DEFAULT_PORT as AGENT_PORT
from usher.agent.main import NODE_ENV
from usher.agent.publish import node_annotations
from usher.engine.backends.kube.health import DEFAULT_PORT, Endpoint
from usher.engine.backends.kube.objects import Annotation
from usher.engine.backends.kube.rbac import (
    AGENT_PERMISSIONS,
    AGENT_SERVICE_ACCOUNT,
    CONTROLLER_PERMISSIONS,
    DECISIONS_CONFIG_KEY,
    DECISIONS_CONFIGMAP,
    LEADER_LEASE,
    OPERATOR_PERMISSIONS,
    QUEUES_CONFIG_KEY,
    QUEUES_CONFIGMAP,
    SERVICE_ACCOUNT,
    USHER_NAMESPACE,
    Permission,
    Scope,
    Verb,
)
from usher.engine.backends.nvml.reader import LayoutSource, NodeReading
from usher.engine.enums import Approval
from usher.engine.scenario.models import HOSTNAME_LABEL, QueueSpec, TopologySpec
from usher.engine.scenario.quantity import parse_duration
from usher.sandbox.admission_policy import PolicyEvaluator
from usher.sandbox.apiserver import ServerThread
from usher.sandbox.authn import UserInfo
from usher.sandbox.store import Attempt, Operation, Store

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
EXAMPLES = DEPLOY / "examples"

Doc = dict[str, Any]

CLUSTER_SCOPED_KINDS = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}
QUEUE_LABELS = ("usher/queue", "kueue.x-k8s.io/queue-name")
GPU = "nvidia.com/gpu"


def _load(path: Path) -> list[Doc]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


MANIFEST_FILES = sorted(DEPLOY.glob("*.yaml"))
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))
MANIFESTS = [doc for path in MANIFEST_FILES for doc in _load(path)]
EXAMPLE_DOCS = [doc for path in EXAMPLE_FILES for doc in _load(path)]


def _ids(paths: list[Path]) -> list[str]:
    return [str(path.relative_to(DEPLOY)) for path in paths]


def _the(kind: str, name: str | None = None) -> Doc:
    found = [d for d in MANIFESTS if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''} in deploy/, found {len(found)}"
    return found[0]


def _pod_templates(docs: list[Doc]) -> Iterator[tuple[Doc, Doc, Doc]]:
    """(owner, pod metadata, pod spec) for every Pod and every workload's pod template."""
    for doc in docs:
        if doc["kind"] == "Pod":
            yield doc, doc["metadata"], doc["spec"]
        elif "template" in doc.get("spec", {}):
            template = doc["spec"]["template"]
            yield doc, template["metadata"], template["spec"]


def _metadata_blocks(node: object) -> Iterator[Doc]:
    """Every `metadata` mapping in a document, pod templates included."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "metadata" and isinstance(value, dict):
                yield value
            yield from _metadata_blocks(value)
    elif isinstance(node, list):
        for item in node:
            yield from _metadata_blocks(item)


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


# --- every document ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", MANIFEST_FILES + EXAMPLE_FILES, ids=_ids(MANIFEST_FILES + EXAMPLE_FILES))
def test_every_document_has_api_version_kind_and_name(path: Path) -> None:
    docs = _load(path)
    assert docs, f"{path.name} holds no document"
    for doc in docs:
        assert isinstance(doc.get("apiVersion"), str) and doc["apiVersion"], doc
        assert isinstance(doc.get("kind"), str) and doc["kind"], doc
        name = doc.get("metadata", {}).get("name")
        assert isinstance(name, str) and re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name), (path.name, name)


@pytest.mark.parametrize("path", MANIFEST_FILES + EXAMPLE_FILES, ids=_ids(MANIFEST_FILES + EXAMPLE_FILES))
def test_label_and_annotation_values_are_strings(path: Path) -> None:
    """The API server refuses `usher/gang-size: 4` (a number); it must be `"4"`."""
    for doc in _load(path):
        for metadata in _metadata_blocks(doc):
            for field in ("labels", "annotations"):
                for key, value in (metadata.get(field) or {}).items():
                    assert isinstance(value, str), f"{path.name}: {field} {key}: {value!r} is not a string"


def test_kubectl_apply_creates_the_namespace_first() -> None:
    first = _load(MANIFEST_FILES[0])
    assert first[0]["kind"] == "Namespace" and first[0]["metadata"]["name"] == USHER_NAMESPACE
    assert [d["kind"] for d in MANIFESTS].count("Namespace") == 1
    assert all(re.fullmatch(r"\d\d-[a-z0-9-]+\.yaml", p.name) for p in MANIFEST_FILES), _ids(MANIFEST_FILES)
    assert not [p for p in DEPLOY.iterdir() if p.suffix in (".yml", ".json")], "kubectl would apply these too"


def test_everything_namespaced_is_in_usher_system() -> None:
    for doc in MANIFESTS:
        namespace = doc["metadata"].get("namespace")
        if doc["kind"] in CLUSTER_SCOPED_KINDS:
            assert namespace is None, f"{doc['kind']} {doc['metadata']['name']} is cluster-scoped"
        else:
            assert namespace == USHER_NAMESPACE, f"{doc['kind']} {doc['metadata']['name']} is in {namespace}"


def test_no_object_is_defined_twice() -> None:
    keys = Counter((d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in MANIFESTS)
    assert [key for key, count in keys.items() if count > 1] == []


# --- RBAC -------------------------------------------------------------------------------------


def _permissions(rules: list[Doc], scope: Scope) -> set[Permission]:
    granted = set()
    for rule in rules:
        assert set(rule) <= {"apiGroups", "resources", "verbs", "resourceNames"}, rule
        names = tuple(sorted(rule.get("resourceNames", ())))
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert verb in set(Verb), f"verb {verb!r} in {rule}"
                    granted.add(Permission(group, resource, Verb(verb), scope, names))
    return granted


def _normalised(permissions: tuple[Permission, ...]) -> set[Permission]:
    return {
        Permission(p.group, p.resource, p.verb, p.scope, tuple(sorted(p.names))) for p in permissions
    }


def _controller_grants(service_account: str = SERVICE_ACCOUNT) -> set[Permission]:
    """What the controller's (or another) service account may do, from every binding that names it."""
    account = {"kind": "ServiceAccount", "name": service_account, "namespace": USHER_NAMESPACE}
    granted: set[Permission] = set()
    for binding in MANIFESTS:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if account not in binding["subjects"]:
            continue
        ref = binding["roleRef"]
        assert ref["apiGroup"] == "rbac.authorization.k8s.io"
        role = _the(ref["kind"], ref["name"])
        if ref["kind"] == "Role":
            assert role["metadata"]["namespace"] == binding["metadata"]["namespace"]
        scope = Scope.CLUSTER if binding["kind"] == "ClusterRoleBinding" else Scope.NAMESPACE
        granted |= _permissions(role["rules"], scope)
    return granted


def _report(granted: set[Permission], wanted: set[Permission]) -> str:
    def show(perms: set[Permission]) -> list[str]:
        return sorted(f"{p.scope} {p.group or 'core'}/{p.resource} {p.verb} {list(p.names) or ''}" for p in perms)

    return f"missing: {show(wanted - granted)}; too much: {show(granted - wanted)}"


def test_controller_rbac_grants_exactly_the_permission_list() -> None:
    granted = _controller_grants()
    wanted = _normalised(CONTROLLER_PERMISSIONS)
    assert granted == wanted, _report(granted, wanted)


def test_operator_role_grants_exactly_its_permission_list_and_is_not_bound_by_default() -> None:
    role = _the("ClusterRole", "usher-operator")
    granted = _permissions(role["rules"], Scope.CLUSTER)
    wanted = _normalised(OPERATOR_PERMISSIONS)
    assert granted == wanted, _report(granted, wanted)
    bindings = [d for d in MANIFESTS if d["kind"] in ("ClusterRoleBinding", "RoleBinding") and d["roleRef"]["name"] == "usher-operator"]
    assert bindings == [], "who operates usher is the cluster admin's choice"


@pytest.mark.parametrize("role", ["controller", "operator", "agent"])
def test_permission_lists_are_least_privilege(role: str) -> None:
    permissions = {"controller": CONTROLLER_PERMISSIONS, "operator": OPERATOR_PERMISSIONS, "agent": AGENT_PERMISSIONS}[role]
    for p in permissions:
        assert "*" not in (p.group, p.resource, p.verb) and "*" not in p.names, p
        assert p.resource.split("/")[0] != "secrets", p
        assert p.verb not in (Verb.DELETE, Verb.DELETE_COLLECTION), p
        assert not (p.resource == "pods" and p.verb == Verb.CREATE), p
        if p.resource == "configmaps" and p.verb in (Verb.CREATE, Verb.UPDATE, Verb.PATCH):
            assert p.verb == Verb.UPDATE and p.names in ((QUEUES_CONFIGMAP,), (DECISIONS_CONFIGMAP,)), p
            assert role == "operator", f"{p}: only operators change the queue config and the decisions"
        if role == "controller":
            # the controller acts for its own decisions only: binds, evictions, pod status,
            # Events and its Lease; operator commands run with the operator's own credentials
            assert p.resource not in ("pods", "nodes") or p.verb in (Verb.GET, Verb.LIST, Verb.WATCH), p
        if p.resource in ("configmaps", "leases"):
            assert p.names or p.verb == Verb.CREATE, f"{p} could be limited to one object by name"
            assert p.resource != "configmaps" or p.verb != Verb.CREATE, "usher never creates its config"
        if p.resource == "leases" and p.names:
            assert p.names == (LEADER_LEASE,), p
        assert not (p.verb == Verb.CREATE and p.names), f"{p}: RBAC cannot limit create by name"


def test_no_rule_anywhere_uses_wildcards_or_touches_secrets() -> None:
    for doc in MANIFESTS:
        for rule in doc.get("rules", []):
            assert "nonResourceURLs" not in rule, rule
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), f"{doc['metadata']['name']}: {rule}"
            assert "secrets" not in rule["resources"], f"{doc['metadata']['name']}: {rule}"


def test_deployment_runs_as_the_bound_service_account() -> None:
    deployment = _the("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    _the("ServiceAccount", SERVICE_ACCOUNT)
    assert pod.get("automountServiceAccountToken", True), "the controller needs its token"
    assert _controller_grants(), "no binding names the service account"


# --- the queue config -------------------------------------------------------------------------


def _queue_config() -> tuple[TopologySpec, list[QueueSpec]]:
    configmap = _the("ConfigMap", QUEUES_CONFIGMAP)
    assert set(configmap["data"]) == {QUEUES_CONFIG_KEY}
    config = yaml.safe_load(configmap["data"][QUEUES_CONFIG_KEY])
    assert isinstance(config, dict) and set(config) <= {"topology", "queues"}, config
    topology = TopologySpec.model_validate(config.get("topology", {}))
    queues = TypeAdapter(list[QueueSpec]).validate_python(config["queues"])
    return topology, queues


def test_queue_config_parses_with_the_scenario_models() -> None:
    topology, queues = _queue_config()
    assert queues
    assert topology.levels and topology.levels[-1] == HOSTNAME_LABEL, topology.levels
    names = [q.name for q in queues]
    assert len(set(names)) == len(names), names


def test_the_decisions_configmap_ships_empty_so_nobody_needs_create() -> None:
    """Consoles only update it and the controller only reads it: it must exist, holding no decision."""
    configmap = _the("ConfigMap", DECISIONS_CONFIGMAP)
    assert configmap["metadata"]["namespace"] == USHER_NAMESPACE
    assert set(configmap["data"]) == {DECISIONS_CONFIG_KEY}
    assert not yaml.safe_load(configmap["data"][DECISIONS_CONFIG_KEY]), "shipped with decisions in it"
    for permissions in (CONTROLLER_PERMISSIONS, OPERATOR_PERMISSIONS):
        assert not any(p.resource == "configmaps" and p.verb == Verb.CREATE for p in permissions)


def test_queue_cohorts_and_limits_make_sense() -> None:
    _, queues = _queue_config()
    cohorts = Counter(q.cohort for q in queues if q.cohort is not None)
    assert cohorts and all(count >= 2 for count in cohorts.values()), f"a cohort of one shares nothing: {cohorts}"
    for q in queues:
        if q.cohort is None:
            assert q.borrowing_limit is None and q.lending_limit is None, f"{q.name}: limits without a cohort"
            continue
        for resource in ("gpu", "cpu", "memory"):
            nominal = getattr(q.quota, resource)
            lending = getattr(q.lending_limit, resource) if q.lending_limit else None
            borrowing = getattr(q.borrowing_limit, resource) if q.borrowing_limit else None
            if lending is not None:
                assert nominal is not None and lending <= nominal, f"{q.name}: lends more {resource} than it has"
            if borrowing is not None:
                assert nominal is not None, f"{q.name}: borrows {resource} it has no quota of (unlimited)"
    assert any(q.approval is Approval.MANUAL for q in queues), "the example shows a manual-approval queue"


# --- the controller Deployment ------------------------------------------------------------------


def _container() -> Doc:
    containers = _the("Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def test_deployment_runs_two_headless_replicas_with_a_leader_identity() -> None:
    deployment = _the("Deployment")
    assert deployment["spec"]["replicas"] == 2
    container = _container()
    assert [*container.get("command", []), *container.get("args", [])] == ["--no-ui"]
    assert not container["image"].endswith(":latest") and ":" in container["image"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"] if "valueFrom" in e}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    template = deployment["spec"]["template"]
    assert _selects(deployment["spec"]["selector"]["matchLabels"], template["metadata"]["labels"])
    assert template["spec"]["terminationGracePeriodSeconds"] > 0


def test_deployment_is_hardened() -> None:
    pod = _the("Deployment")["spec"]["template"]["spec"]
    container = _container()
    pod_security, security = pod.get("securityContext", {}), container["securityContext"]
    assert pod_security.get("runAsNonRoot") or security.get("runAsNonRoot")
    assert (security.get("runAsUser") or pod_security.get("runAsUser")) not in (None, 0)
    seccomp = security.get("seccompProfile") or pod_security.get("seccompProfile")
    assert seccomp == {"type": "RuntimeDefault"}
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(key), key
    resources = container["resources"]
    assert {"cpu", "memory"} <= set(resources["requests"]) and "memory" in resources["limits"]


def test_probes_and_metrics_use_the_port_the_container_exposes() -> None:
    container = _container()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": DEFAULT_PORT}

    def port_number(port: int | str) -> int:
        assert port in ports or port in ports.values(), f"probe port {port} is not exposed"
        return ports[port] if isinstance(port, str) else port

    liveness, readiness = container["livenessProbe"]["httpGet"], container["readinessProbe"]["httpGet"]
    assert liveness["path"] == Endpoint.HEALTHZ and port_number(liveness["port"]) == DEFAULT_PORT
    assert readiness["path"] == Endpoint.READYZ and port_number(readiness["port"]) == DEFAULT_PORT
    annotations = _the("Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(DEFAULT_PORT)
    assert annotations["prometheus.io/path"] == Endpoint.METRICS
    service = _the("Service", "usher-metrics")
    assert _selects(service["spec"]["selector"], _the("Deployment")["spec"]["template"]["metadata"]["labels"])
    [service_port] = service["spec"]["ports"]
    assert port_number(service_port["targetPort"]) == DEFAULT_PORT


def test_replicas_land_on_different_nodes_and_drains_take_one_at_a_time() -> None:
    deployment = _the("Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    terms = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert any(
        t["topologyKey"] == HOSTNAME_LABEL and _selects(t["labelSelector"]["matchLabels"], labels) for t in terms
    )
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0, "a surge replica has no node to go to"
    budget = _the("PodDisruptionBudget")
    assert budget["apiVersion"] == "policy/v1" and budget["spec"]["maxUnavailable"] == 1
    assert _selects(budget["spec"]["selector"]["matchLabels"], labels)


# --- the node agent DaemonSet ---------------------------------------------------------------------


def test_agent_rbac_grants_exactly_its_permission_list() -> None:
    granted = _controller_grants(AGENT_SERVICE_ACCOUNT)
    wanted = _normalised(AGENT_PERMISSIONS)
    assert granted == wanted, _report(granted, wanted)
    assert wanted == {Permission("", "nodes", Verb.PATCH, Scope.CLUSTER), Permission("", "nodes", Verb.GET, Scope.CLUSTER)}, (
        "the agent patches its Node and reads it once when it starts, nothing else")


def test_the_agent_runs_on_every_gpu_node_without_taking_a_gpu() -> None:
    daemonset = _the("DaemonSet", "usher-agent")
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == AGENT_SERVICE_ACCOUNT
    _the("ServiceAccount", AGENT_SERVICE_ACCOUNT)
    assert _selects(daemonset["spec"]["selector"]["matchLabels"], daemonset["spec"]["template"]["metadata"]["labels"])
    assert pod["nodeSelector"].get("nvidia.com/gpu.present") == "true"
    assert any(t["key"] == GPU and t["operator"] == "Exists" for t in pod["tolerations"]), "GPU nodes are often tainted"
    [container] = pod["containers"]
    assert container.get("args") == ["agent"]
    assert all(GPU not in container["resources"].get(kind, {}) for kind in ("requests", "limits")), "it would take a GPU"
    env = {e["name"]: e for e in container["env"]}
    assert env[NODE_ENV]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"


def test_the_agent_is_hardened_probed_and_scraped_on_its_port() -> None:
    daemonset = _the("DaemonSet", "usher-agent")
    template = daemonset["spec"]["template"]
    pod = template["spec"]
    [container] = pod["containers"]
    security = container["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(key), key
    assert not security.get("privileged")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": AGENT_PORT}
    assert container["livenessProbe"]["httpGet"] == {"path": Endpoint.HEALTHZ, "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": Endpoint.READYZ, "port": "metrics"}
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(AGENT_PORT) and annotations["prometheus.io/path"] == Endpoint.METRICS
    service = _the("Service", "usher-agent")
    assert service["spec"]["clusterIP"] == "None", "one address per agent, for dns+http:// telemetry"
    assert _selects(service["spec"]["selector"], template["metadata"]["labels"])
    assert not _selects(service["spec"]["selector"], _the("Deployment")["spec"]["template"]["metadata"]["labels"])


# --- the Dockerfile -----------------------------------------------------------------------------


def test_dockerfile_installs_every_package_and_runs_usher_as_non_root() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+)", dockerfile, re.MULTILINE)
    assert stages and all(image.startswith("python:3.11-slim") for image in stages)
    copied = {part for line in re.findall(r"^COPY (?!--from)(.+)$", dockerfile, re.MULTILINE) for part in line.split()}
    package_dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    tops = {folder.split("/")[0] for folder in package_dirs.values()}
    assert tops | {"pyproject.toml", "README.md"} <= copied, f"not copied into the image: {tops - copied}"
    assert "pip install ." in dockerfile
    [user] = re.findall(r"^USER (\S+)$", dockerfile, re.MULTILINE)
    uid = int(user.split(":")[0])
    pod = _the("Deployment")["spec"]["template"]["spec"]
    assert uid != 0 and uid == pod["securityContext"]["runAsUser"]
    assert re.search(r'^ENTRYPOINT \["usher"\]$', dockerfile, re.MULTILINE)
    assert "Dockerfile" in (DEPLOY / "40-deployment.yaml").read_text(), "say where the image comes from"


# --- the examples -------------------------------------------------------------------------------


def test_examples_are_not_applied_with_the_controller_and_pick_no_namespace() -> None:
    assert {p.name for p in EXAMPLE_FILES} >= {"gang-job.yaml", "notebook.yaml"}
    assert all(d["kind"] not in ("Pod", "Job") for d in MANIFESTS), "workloads belong in deploy/examples/"
    for doc in EXAMPLE_DOCS:
        assert "namespace" not in doc["metadata"], "examples go into the submitting user's namespace"


def test_example_pods_reach_usher_in_a_queue_that_can_hold_them() -> None:
    topology, queues = _queue_config()
    by_name = {q.name: q for q in queues}
    templates = list(_pod_templates(EXAMPLE_DOCS))
    assert templates
    for owner, metadata, spec in templates:
        what = f"{owner['kind']} {owner['metadata']['name']}"
        assert spec["schedulerName"] == "usher", what
        labels, annotations = metadata.get("labels", {}), metadata.get("annotations", {})
        queue_names = [labels[key] for key in QUEUE_LABELS if key in labels]
        assert len(queue_names) == 1 and queue_names[0] in by_name, f"{what}: queue label {queue_names}"
        queue = by_name[queue_names[0]]
        for key in ("usher/topology-required", "usher/topology-preferred"):
            if key in annotations:
                assert annotations[key] in topology.levels, f"{what}: {key} names no topology level"
        for key in ("usher/estimate", "usher/checkpoint-every"):
            if key in annotations:
                assert parse_duration(annotations[key]) > 0
        gpus = sum(_gpus(what, container, annotations) for container in spec["containers"])
        pods = int(labels.get("usher/gang-size", "1"))
        ceiling = _gpu_ceiling(queue, queues)
        assert pods * gpus <= ceiling, f"{what}: {pods * gpus} GPUs never fit {queue.name} ({ceiling})"


def _gpu_ceiling(queue: QueueSpec, queues: list[QueueSpec]) -> float:
    """The most GPUs the queue can ever hold: nominal quota plus what it may borrow."""
    if queue.quota.gpu is None:
        return math.inf
    lendable = sum(
        math.inf if q.quota.gpu is None else (q.lending_limit.gpu if q.lending_limit and q.lending_limit.gpu is not None else q.quota.gpu)
        for q in queues
        if q.cohort is not None and q.cohort == queue.cohort and q.name != queue.name
    )
    limit = queue.borrowing_limit.gpu if queue.borrowing_limit else None
    return queue.quota.gpu + (lendable if limit is None else min(limit, lendable))


def _gpus(what: str, container: Doc, annotations: dict[str, str]) -> float:
    """GPUs one container asks for: whole ones, or the pod's share of one."""
    resources = container.get("resources", {})
    limit, request = resources.get("limits", {}).get(GPU), resources.get("requests", {}).get(GPU)
    if "usher/gpu-fraction" in annotations:
        share = float(annotations["usher/gpu-fraction"])
        assert 0 < share < 1 and limit is None and request is None, f"{what}: a share asks for no whole GPU"
        return share
    assert request is None or request == limit, f"{what}: GPU requests must equal limits"
    return float(limit or 0)


def test_a_gangs_size_is_its_parallelism() -> None:
    gangs = [doc for doc in EXAMPLE_DOCS if doc["kind"] == "Job"]
    assert gangs
    for job in gangs:
        labels = job["spec"]["template"]["metadata"]["labels"]
        assert labels["usher/gang"], job["metadata"]["name"]
        size = int(labels["usher/gang-size"])
        assert size == job["spec"]["parallelism"] == job["spec"]["completions"] > 1
        spec = job["spec"]["template"]["spec"]
        services = [d for d in EXAMPLE_DOCS if d["kind"] == "Service" and d["metadata"]["name"] == spec.get("subdomain")]
        for service in services:
            assert service["spec"]["clusterIP"] == "None", "workers find each other through a headless Service"
            assert _selects(service["spec"]["selector"], labels)


def test_the_notebook_asks_for_a_share_of_one_gpu() -> None:
    [(_, metadata, spec)] = [t for t in _pod_templates(EXAMPLE_DOCS) if t[0]["kind"] == "Pod"]
    share = float(metadata["annotations"]["usher/gpu-fraction"])
    assert 0 < share < 1
    assert all(GPU not in c.get("resources", {}).get(kind, {}) for c in spec["containers"] for kind in ("limits", "requests"))


# --- the agent's own Node only (ValidatingAdmissionPolicy) ---------------------------------------

AGENT_USER = f"system:serviceaccount:{USHER_NAMESPACE}:{AGENT_SERVICE_ACCOUNT}"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


AGENT_POLICY = "usher-agent-own-node"


def _agent_policy() -> tuple[Doc, Doc]:
    policies = [d for d in MANIFESTS if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == AGENT_POLICY]
    bindings = [d for d in MANIFESTS if d["kind"] == "ValidatingAdmissionPolicyBinding"
                and d["spec"]["policyName"] == AGENT_POLICY]
    assert len(policies) == 1 and len(bindings) == 1, "one policy for the agent, and its binding"
    return policies[0], bindings[0]


def test_the_agent_policy_is_bound_and_matches_every_change_of_a_node_by_the_agent() -> None:
    policy, binding = _agent_policy()
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail", "an error in the policy must not let the change through"
    # a PATCH is an UPDATE to admission; RBAC grants the agent no create, delete or nodes/status
    [rule] = spec["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"], rule["operations"]) == ([""], ["nodes"], ["UPDATE"])
    assert rule["apiVersions"] in (["v1"], ["*"])
    writes = {p.verb for p in AGENT_PERMISSIONS} - {Verb.GET}
    assert writes == {Verb.PATCH} and {p.resource for p in AGENT_PERMISSIONS} == {"nodes"}
    [condition] = spec["matchConditions"]
    assert condition["expression"] == f"request.userInfo.username == '{AGENT_USER}'"
    assert _the("ServiceAccount", AGENT_SERVICE_ACCOUNT)["metadata"]["namespace"] == USHER_NAMESPACE
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert "matchResources" not in binding["spec"], "every node the policy matches"
    assert "paramKind" not in spec and "paramRef" not in binding["spec"]
    assert "patch nodes" in (DEPLOY / "71-agent-admission-policy.yaml").read_text(), "say why RBAC is not enough"


class AgentPolicy:
    """The policy as the sandbox's API server evaluates it (:mod:`usher.sandbox.admission_policy`),
    on a request of one user: the same CEL, matching and messages a write to the sandbox meets."""

    def __init__(self) -> None:
        self.store = Store()
        self.evaluator = PolicyEvaluator(self.store)
        self.policy, self.binding = _agent_policy()

    def denials(self, user: str, node: str | None, old: Doc, new: Doc) -> list[str] | None:
        """The messages of the validations that fail; None when the policy does not apply."""
        extra = ((NODE_NAME_EXTRA, (node,)),) if node is not None else ()
        nodes = self.store.resource_type("nodes")
        attempt = Attempt(Operation.UPDATE, nodes, new["metadata"]["name"], None, new, old)
        violations = self.evaluator.check(self.policy, self.binding, attempt, UserInfo(user, extra=extra))
        return None if violations is None else [v.message for v in violations]


def _node(name: str = "gpu-7", **changes: Any) -> Doc:
    node: Doc = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", str(Annotation.GPU_HEALTH): ""},
        },
        "spec": {"podCIDR": "10.0.7.0/24", "providerID": f"kind://{name}"},
    }
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        target = node
        for key in parents:
            target = target.setdefault(key, {})
        if value is None:
            target.pop(leaf, None)
        else:
            target[leaf] = value
    return node


def _merge(old: Doc, patch: Doc) -> Doc:
    """A JSON merge patch (RFC 7386) applied to ``old``, as the API server applies the agent's."""
    out = dict(old)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def test_the_policy_lets_the_agent_annotate_its_own_node_exactly_as_it_does() -> None:
    policy = AgentPolicy()
    reading = NodeReading(driver="550.54", gpus=[], islands=[[0, 1, 2, 3], [4, 5, 6, 7]], layout_source=next(iter(LayoutSource)))
    wanted = node_annotations(reading, boot="7d3e0c1a-5b1f-4a53-9d0e-2f6a1c9b8e44")
    assert set(wanted) == {Annotation.NVLINK, Annotation.GPU_HEALTH, Annotation.GPU_XIDS}
    old = _node()
    new = _merge(old, {"metadata": {"annotations": wanted}})
    assert new["metadata"]["annotations"][Annotation.NVLINK] == "0,1,2,3;4,5,6,7"
    assert policy.denials(AGENT_USER, "gpu-7", old, new) == []
    # removing its own annotation (a merge patch with null) is fine too
    assert policy.denials(AGENT_USER, "gpu-7", new, _merge(new, {"metadata": {"annotations": {Annotation.NVLINK: None}}})) == []
    # a Node with no annotations or labels at all yet
    bare = _node(metadata__annotations=None, metadata__labels=None)
    assert policy.denials(AGENT_USER, "gpu-7", bare, _merge(bare, {"metadata": {"annotations": wanted}})) == []


@pytest.mark.parametrize(
    ("node", "change", "denied"),
    [
        ("gpu-8", {"metadata": {"annotations": {"usher/gpu-health": "0:xid 79"}}}, "may change only its own Node, not gpu-7"),
        (None, {"metadata": {"annotations": {"usher/gpu-health": "0:xid 79"}}}, "token names no node"),
        ("", {"metadata": {"annotations": {"usher/gpu-health": "0:xid 79"}}}, "token names no node"),
        ("gpu-7", {"metadata": {"annotations": {"usher/something-else": "x"}}}, "only the annotations"),
        ("gpu-7", {"metadata": {"annotations": {"node.alpha.kubernetes.io/ttl": "30"}}}, "only the annotations"),
        ("gpu-7", {"metadata": {"annotations": {"node.alpha.kubernetes.io/ttl": None}}}, "only the annotations"),
        ("gpu-7", {"metadata": {"labels": {"usher/rack": "r9"}}}, "labels"),
        ("gpu-7", {"metadata": {"labels": {"nvidia.com/gpu.present": None}}}, "labels"),
        ("gpu-7", {"spec": {"unschedulable": True}}, "spec"),
        ("gpu-7", {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}, "spec"),
        ("gpu-7", {"metadata": {"finalizers": ["example.com/hold"]}}, "finalizers"),
        ("gpu-7", {"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u"}]}}, "owner"),
    ],
)
def test_the_policy_denies_the_agent_anything_else(node: str | None, change: Doc, denied: str) -> None:
    policy = AgentPolicy()
    old = _node()
    messages = policy.denials(AGENT_USER, node, old, _merge(old, change))
    assert messages and any(denied in m for m in messages), messages


def test_the_policy_leaves_everyone_else_alone() -> None:
    policy = AgentPolicy()
    old = _node()
    cordon = _merge(old, {"spec": {"unschedulable": True}, "metadata": {"labels": {"usher/rack": "r1"}}})
    for user in (f"system:serviceaccount:{USHER_NAMESPACE}:{SERVICE_ACCOUNT}", "system:node:gpu-7", "alice@example.com",
                 f"system:serviceaccount:other:{AGENT_SERVICE_ACCOUNT}"):
        assert policy.denials(user, None, old, cordon) is None, user


# --- NetworkPolicies ----------------------------------------------------------------------------------

MONITORING = {"kubernetes.io/metadata.name": "monitoring"}


def _network_policy_for(template_labels: dict[str, str]) -> Doc:
    found = [
        d for d in MANIFESTS
        if d["kind"] == "NetworkPolicy" and _selects(d["spec"]["podSelector"]["matchLabels"], template_labels)
    ]
    assert len(found) == 1, f"one NetworkPolicy for the pods labelled {template_labels}, found {len(found)}"
    return found[0]


@pytest.mark.parametrize("workload", [("Deployment", "usher-controller"), ("DaemonSet", "usher-agent")], ids=["controller", "agent"])
def test_only_the_metrics_port_is_open_and_only_to_monitoring(workload: tuple[str, str]) -> None:
    owner = _the(*workload)
    template = owner["spec"]["template"]
    [container] = template["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    policy = _network_policy_for(template["metadata"]["labels"])
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"], "egress stays open: the API server's address is the cluster's"
    [rule] = spec["ingress"]
    assert [(p["port"], p["protocol"]) for p in rule["ports"]] == [("metrics", "TCP")]
    assert "metrics" in ports
    # the probes are on the same port: they come from the pod's node, which a NetworkPolicy always admits
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["port"] in ("metrics", ports["metrics"])
    sources = rule["from"]
    assert {"namespaceSelector": {"matchLabels": MONITORING}} in sources
    controller_labels = _the("Deployment")["spec"]["template"]["metadata"]["labels"]
    others = [s for s in sources if s != {"namespaceSelector": {"matchLabels": MONITORING}}]
    if workload[0] == "Deployment":
        assert others == [], "nothing but Prometheus calls the controller"
    else:
        # the controller reads the agents' telemetry (a podSelector alone: pods of usher-system)
        [peer] = others
        assert set(peer) == {"podSelector"} and _selects(peer["podSelector"]["matchLabels"], controller_labels)
        assert not _selects(peer["podSelector"]["matchLabels"], template["metadata"]["labels"]), "agents do not call each other"


def test_no_network_policy_opens_more_than_the_metrics_ports() -> None:
    policies = [d for d in MANIFESTS if d["kind"] == "NetworkPolicy"]
    assert len(policies) == 2
    for policy in policies:
        for rule in policy["spec"].get("ingress", []):
            assert rule.get("from"), f"{policy['metadata']['name']}: a rule without `from` admits everyone"
            for source in rule["from"]:
                assert "ipBlock" not in source, "no address ranges by default"
                if "namespaceSelector" in source:
                    assert source["namespaceSelector"] == {"matchLabels": MONITORING}, source


def test_the_new_kinds_pass_the_sandboxs_strict_field_validation() -> None:
    """The sandbox serves the real OpenAPI schemas: a misspelt field would be refused (400)."""
    paths = {
        "NetworkPolicy": f"/apis/networking.k8s.io/v1/namespaces/{USHER_NAMESPACE}/networkpolicies",
        "ValidatingAdmissionPolicy": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
    }
    docs = [d for d in MANIFESTS if d["kind"] in paths]
    assert {d["kind"] for d in docs} == set(paths)
    with ServerThread() as sandbox, httpx.Client(base_url=sandbox.url, timeout=10) as client:
        assert client.post("/api/v1/namespaces", json={"metadata": {"name": USHER_NAMESPACE}}).status_code == 201
        for doc in docs:
            r = client.post(paths[doc["kind"]], params={"fieldValidation": "Strict"}, json=doc)
            assert r.status_code == 201, (doc["kind"], doc["metadata"]["name"], r.text)
            assert r.json()["spec"] == doc["spec"], "nothing pruned or defaulted away"
        typo = {**docs[-1], "metadata": {"name": "typo"}, "spec": {**docs[-1]["spec"], "validationAction": ["Deny"]}}
        r = client.post(paths[typo["kind"]], params={"fieldValidation": "Strict"}, json=typo)
        assert r.status_code == 400 and "unknown field" in r.text, "the check would catch a typo"

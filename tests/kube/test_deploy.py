"""The manifests in deploy/ and the Dockerfile, checked for what a cluster operator would notice.

Every document loads and is named; `kubectl apply -f deploy/` creates the namespace first and
puts everything namespaced in it; the controller's RBAC grants exactly `CONTROLLER_PERMISSIONS`
(the operator role exactly `OPERATOR_PERMISSIONS`, the node agent's `AGENT_PERMISSIONS`), nothing
broader; the agent DaemonSet reaches every GPU node without taking a GPU; the queue config
parses with the scenario models and makes sense; the Deployment is hardened, probed on the port
it serves, and spread over nodes; the examples reach usher and can run in their queues.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import TypeAdapter

from usher.engine.backends.kube.health import DEFAULT_PORT, Endpoint
from usher.agent.main import DEFAULT_PORT as AGENT_PORT, NODE_ENV
from usher.engine.backends.kube.rbac import (
    AGENT_PERMISSIONS,
    AGENT_SERVICE_ACCOUNT,
    CONTROLLER_PERMISSIONS,
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
from usher.engine.enums import Approval
from usher.engine.scenario.models import HOSTNAME_LABEL, QueueSpec, TopologySpec
from usher.engine.scenario.quantity import parse_duration

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
EXAMPLES = DEPLOY / "examples"

Doc = dict[str, Any]

CLUSTER_SCOPED_KINDS = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
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
    bindings = [d for d in MANIFESTS if d["kind"].endswith("Binding") and d["roleRef"]["name"] == "usher-operator"]
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
            assert p.verb == Verb.UPDATE and p.names == (QUEUES_CONFIGMAP,), p
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
    assert wanted == {Permission("", "nodes", Verb.PATCH, Scope.CLUSTER)}, "the agent reads nothing"


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

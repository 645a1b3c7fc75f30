"""kubectl against the sandbox: what a user beside usher types must work as on a real cluster."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml
from kubectl import Kubectl
from sandboxes import kubectl_fixture, two_node_sandbox_fixture  # noqa: F401 (the kubectl and sandbox fixtures)
from usher.sandbox import crds
from usher.sandbox.apiserver import ServerThread


def pod(name: str, node: str | None = None, grace: int | None = None, **meta: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "usher",
        "containers": [{"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
    }
    if node:
        spec["nodeName"] = node
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", **meta}, "spec": spec}


def test_get_wide_yaml_and_json(sandbox: ServerThread, kubectl: Kubectl) -> None:
    sandbox.call(sandbox.server.store.create, "pods", pod("train-0", labels={"usher/gang": "train"}))
    wide = kubectl.ok("get", "pods", "-o", "wide")
    header, row = wide.split("\n")[:2]
    # real kubectl against kube-apiserver: IP before NODE, then NOMINATED NODE and READINESS GATES
    assert header.split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED", "NODE", "READINESS", "GATES"]
    assert row.split()[:3] == ["train-0", "0/1", "Pending"] and row.split()[5:] == ["<none>"] * 4
    assert kubectl.ok("get", "pods").split("\n")[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    as_yaml = yaml.safe_load(kubectl.ok("get", "pod", "train-0", "-o", "yaml"))
    assert as_yaml["spec"]["schedulerName"] == "usher"
    as_json = json.loads(kubectl.ok("get", "pods", "-l", "usher/gang=train", "-o", "json"))
    assert [i["metadata"]["name"] for i in as_json["items"]] == ["train-0"]
    nodes = kubectl.ok("get", "nodes")
    assert "gpu-1" in nodes and "Ready" in nodes


def test_describe_a_pending_pod_shows_why_it_waits(sandbox: ServerThread, kubectl: Kubectl) -> None:
    store = sandbox.server.store
    uid = sandbox.call(store.create, "pods", pod("train-0"))["metadata"]["uid"]
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "InsufficientCapacity: needs 4 GPUs on one node, the roomiest has 2",
    }
    patch = {"status": {"conditions": [condition]}}
    sandbox.call(lambda: store.patch("pods", "train-0", patch, "default", subresource="status"))
    event = {
        "metadata": {"name": "train-0.1", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "train-0", "namespace": "default", "apiVersion": "v1", "uid": uid},
        "reason": "FailedScheduling",
        "message": "needs 4 GPUs on one node",
        "type": "Warning",
        "source": {"component": "usher"},
        "count": 1,
    }
    sandbox.call(store.create, "events", event)
    described = kubectl.ok("describe", "pod", "train-0")
    assert "Status:" in described and "Pending" in described
    assert "FailedScheduling" in described and "needs 4 GPUs on one node" in described


def test_cordon_taint_label_annotate_and_uncordon(sandbox: ServerThread, kubectl: Kubectl) -> None:
    kubectl.ok("cordon", "gpu-1")
    assert "SchedulingDisabled" in kubectl.ok("get", "node", "gpu-1")
    kubectl.ok("taint", "nodes", "gpu-1", "maintenance=true:NoSchedule")
    kubectl.ok("label", "node", "gpu-1", "usher/rack=r1")
    kubectl.ok("annotate", "node", "gpu-1", "usher/nvlink=0,1,2,3;4,5,6,7")
    node = json.loads(kubectl.ok("get", "node", "gpu-1", "-o", "json"))
    assert node["spec"]["taints"] == [{"key": "maintenance", "value": "true", "effect": "NoSchedule"}]
    assert node["metadata"]["labels"]["usher/rack"] == "r1"
    assert node["metadata"]["annotations"]["usher/nvlink"] == "0,1,2,3;4,5,6,7"
    assert node["status"]["conditions"]  # a strategic merge patch of spec leaves status alone
    kubectl.ok("uncordon", "gpu-1")
    kubectl.ok("taint", "nodes", "gpu-1", "maintenance-")
    node = json.loads(kubectl.ok("get", "node", "gpu-1", "-o", "json"))
    assert not node["spec"].get("unschedulable") and not node["spec"].get("taints")


def test_get_watch_streams_changes(sandbox: ServerThread, kubectl: Kubectl) -> None:
    watcher = kubectl.popen("get", "pods", "-w", "--request-timeout=20s")
    try:
        time.sleep(1.5)  # let the watch start; a later pod must still arrive as a change
        sandbox.call(sandbox.server.store.create, "pods", pod("late-0"))
        lines: list[str] = []
        deadline = time.monotonic() + 20
        assert watcher.stdout is not None
        while time.monotonic() < deadline and not any("late-0" in line for line in lines):
            lines.append(watcher.stdout.readline())
        assert any("late-0" in line and "Pending" in line for line in lines), lines
    finally:
        watcher.kill()
        watcher.communicate()


def test_delete_waits_for_a_running_pods_grace_period(sandbox: ServerThread, kubectl: Kubectl) -> None:
    store = sandbox.server.store
    sandbox.call(store.create, "pods", pod("busy-0", node="gpu-1"))
    kubectl.ok("delete", "pod", "busy-0", "--wait=false")
    assert "Terminating" in kubectl.ok("get", "pod", "busy-0")
    kubectl.ok("delete", "pod", "busy-0", "--grace-period=0", "--force")
    assert "NotFound" in kubectl.run("get", "pod", "busy-0").stderr


def _run(store: Any, name: str) -> None:
    """What a kubelet reports for a started pod: Running and Ready."""
    status = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    store.patch("pods", name, status, "default", subresource="status")


def test_drain_under_a_disruption_budget_retries_until_the_budget_allows(sandbox: ServerThread, kubectl: Kubectl) -> None:
    store, server = sandbox.server.store, sandbox.server
    sandbox.call(store.create, "pods", pod("web-0", node="gpu-1", grace=0, labels={"app": "web"}))
    sandbox.call(_run, store, "web-0")
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    }
    sandbox.call(store.create, "poddisruptionbudgets", budget)
    drain = kubectl.popen("drain", "gpu-1", "--force", "--ignore-daemonsets", "--timeout=90s")
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and server.count("POST", "*/pods/web-0/eviction", 429) == 0:
            time.sleep(0.2)
        assert server.count("POST", "*/pods/web-0/eviction", 429) >= 1  # refused: the budget needs web-0
        assert sandbox.call(store.exists, "pods", "web-0", "default")
        sandbox.call(store.create, "pods", pod("web-1", node="gpu-2", grace=0, labels={"app": "web"}))
        sandbox.call(_run, store, "web-1")  # a second healthy replica: now one may go
        out, err = drain.communicate(timeout=60)
    finally:
        drain.kill()
    assert drain.returncode == 0, err
    assert "evicting pod default/web-0" in out + err and "node/gpu-1 drained" in out
    assert not sandbox.call(store.exists, "pods", "web-0", "default")
    assert "SchedulingDisabled" in kubectl.ok("get", "node", "gpu-1")


REPO = Path(__file__).resolve().parents[2]


def test_apply_every_manifest_with_validation_then_again_and_a_typo_is_refused(sandbox: ServerThread, kubectl: Kubectl) -> None:
    sandbox.call(crds.install, sandbox.server.store)  # the examples' operators are installed, as they must be on a cluster
    first = kubectl.ok("apply", "-f", str(REPO / "deploy"))
    assert "deployment.apps/usher-controller created" in first and "daemonset.apps/usher-agent created" in first
    examples = kubectl.ok("apply", "-f", str(REPO / "deploy" / "examples"))
    assert "job.batch/llm-pretrain created" in examples
    again = kubectl.ok("apply", "-f", str(REPO / "deploy"))
    assert "daemonset.apps/usher-agent unchanged" in again
    typo = kubectl.run("apply", "-f", "-", stdin="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: typo}\ndta: {a: b}\n")
    assert typo.returncode != 0 and 'strict decoding error: unknown field "dta"' in typo.stderr
    kubectl.ok("create", "namespace", "team-a")  # a typed command: kubectl sends protobuf
    assert "team-a" in kubectl.ok("get", "namespaces")
    assert "FIELD: containers <[]Container>" in kubectl.ok("explain", "pod.spec.containers")

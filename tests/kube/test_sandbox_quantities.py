"""Resource quantities come back from the sandbox as a real API server returns them: canonical
strings, whatever the client wrote (a YAML number, ``1000m``, ``0.5``), so the official client's
models read them and kubectl prints them as a cluster would."""

from __future__ import annotations

import json

import yaml
from kubectl import Kubectl
from kubernetes.client import ApiClient, CoreV1Api

from sandboxes import kubectl_fixture, official_client_fixture, two_node_sandbox_fixture  # noqa: F401 (fixtures)

POD = """
apiVersion: v1
kind: Pod
metadata: {name: numbers}
spec:
  schedulerName: nobody
  overhead: {cpu: 0.25}
  volumes: [{name: scratch, emptyDir: {sizeLimit: 1024Mi}}]
  containers:
  - name: main
    image: busybox:1.36
    resources:
      requests: {nvidia.com/gpu: 8, cpu: 0.5, memory: 1Gi}
      limits: {nvidia.com/gpu: 8, cpu: 1000m, memory: 1.5Gi}
"""


def test_the_official_client_reads_a_pod_written_with_numeric_quantities(kubectl: Kubectl, api: ApiClient) -> None:
    kubectl.ok("create", "-f", "-", stdin=POD)
    pod = CoreV1Api(api).read_namespaced_pod("numbers", "default")
    resources = pod.spec.containers[0].resources
    assert resources.requests == {"nvidia.com/gpu": "8", "cpu": "500m", "memory": "1Gi"}
    assert resources.limits == {"nvidia.com/gpu": "8", "cpu": "1", "memory": "1536Mi"}
    assert pod.spec.overhead == {"cpu": "250m"}
    assert pod.spec.volumes[0].empty_dir.size_limit == "1Gi"


def test_kubectl_json_shows_quantities_as_strings_on_pods_and_nodes(kubectl: Kubectl) -> None:
    kubectl.ok("create", "-f", "-", stdin=POD)
    pod = json.loads(kubectl.ok("get", "pod", "numbers", "-o", "json"))
    assert pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "8"
    node = yaml.safe_load(kubectl.ok("get", "node", "gpu-1", "-o", "yaml"))
    patched = {"status": {"capacity": {**node["status"]["capacity"], "nvidia.com/gpu": 4, "example.com/nic": 2000}}}
    kubectl.ok("patch", "node", "gpu-1", "--subresource=status", "--type=merge", "-p", json.dumps(patched))
    capacity = json.loads(kubectl.ok("get", "node", "gpu-1", "-o", "json"))["status"]["capacity"]
    assert capacity["nvidia.com/gpu"] == "4" and capacity["example.com/nic"] == "2k"
    assert all(isinstance(v, str) for v in capacity.values())


def test_a_claim_request_written_as_a_number_is_stored_as_text(kubectl: Kubectl, api: ApiClient) -> None:
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
             "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": 1073741824}}}}
    kubectl.ok("create", "-f", "-", stdin=json.dumps(claim))
    read = CoreV1Api(api).read_namespaced_persistent_volume_claim("data", "default")
    assert read.spec.resources.requests == {"storage": "1073741824"}  # a decimal number stays decimal


def test_a_quantity_that_does_not_parse_is_refused_as_the_decoder_refuses_it(kubectl: Kubectl) -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "odd"}, "status": {"capacity": {"cpu": "lots"}}}
    refused = kubectl.run("create", "-f", "-", stdin=json.dumps(node))
    assert refused.returncode != 0
    assert "cannot be handled as a Node: quantities must match the regular expression" in refused.stderr
    assert kubectl.run("get", "node", "odd").returncode != 0

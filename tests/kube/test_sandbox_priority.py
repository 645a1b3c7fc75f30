"""The sandbox's Priority admission, as a cluster's: a pod's priority comes from its PriorityClass.

Checked with clients nobody here wrote: kubectl and the official ``kubernetes`` client. A pod
that names a class gets its value (and preemption policy); one that names none gets the class
marked ``globalDefault``, else 0; a class that does not exist, or a ``spec.priority`` written by
hand that differs from what the class says, is refused with 403 Forbidden, as kube-apiserver
refuses it. The two system classes every cluster has are there from the start.
"""

from __future__ import annotations

import kubernetes
import pytest
from kubectl import Kubectl
from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.rest import ApiException
from sandboxes import kubectl_fixture, official_client_fixture, two_node_sandbox_fixture  # noqa: F401 (kubectl, api, sandbox)

M = kubernetes.client


def _pod(name: str, priority_class: str | None = None) -> str:
    line = f"\n  priorityClassName: {priority_class}" if priority_class else ""
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:{line}
  containers: [{{name: main, image: busybox:1.36}}]
"""


def test_kubectl_pods_take_their_priority_from_their_class(kubectl: Kubectl) -> None:
    classes = kubectl.ok("get", "priorityclasses", "-o", "name")
    assert "priorityclass.scheduling.k8s.io/system-node-critical" in classes
    assert "priorityclass.scheduling.k8s.io/system-cluster-critical" in classes
    kubectl.ok("create", "priorityclass", "high", "--value=1000", "--description=urgent work")
    kubectl.ok("apply", "-f", "-", stdin=_pod("urgent", "high"))
    assert kubectl.ok("get", "pod", "urgent", "-o", "jsonpath={.spec.priority} {.spec.preemptionPolicy}") == "1000 PreemptLowerPriority"
    kubectl.ok("apply", "-f", "-", stdin=_pod("plain"))
    assert kubectl.ok("get", "pod", "plain", "-o", "jsonpath={.spec.priority}") == "0"
    # a class marked globalDefault is what a pod naming none gets
    kubectl.ok("create", "priorityclass", "normal", "--value=10", "--global-default=true")
    kubectl.ok("apply", "-f", "-", stdin=_pod("later"))
    assert kubectl.ok("get", "pod", "later", "-o", "jsonpath={.spec.priorityClassName} {.spec.priority}") == "normal 10"


def test_kubectl_a_pod_naming_a_missing_class_is_forbidden(kubectl: Kubectl) -> None:
    result = kubectl.run("apply", "-f", "-", stdin=_pod("lost", "nope"))
    assert result.returncode != 0
    assert 'Error from server (Forbidden)' in result.stderr
    assert 'pods "lost" is forbidden: no PriorityClass with name nope was found' in result.stderr
    assert kubectl.run("get", "pod", "lost").returncode != 0  # nothing was created


def test_official_client_a_priority_written_by_hand_is_forbidden(api: ApiClient) -> None:
    core = CoreV1Api(api)
    pod = M.V1Pod(metadata=M.V1ObjectMeta(name="sneaky"), spec=M.V1PodSpec(priority=5, containers=[M.V1Container(name="main", image="busybox:1.36")]))
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("default", pod)
    assert caught.value.status == 403
    assert ("the integer value of priority (5) must not be provided in pod spec; "
            "priority admission controller computed 0 from the given PriorityClass name") in caught.value.body
    critical = M.V1Pod(metadata=M.V1ObjectMeta(name="agent"), spec=M.V1PodSpec(
        priority_class_name="system-node-critical", containers=[M.V1Container(name="main", image="busybox:1.36")]))
    made = core.create_namespaced_pod("kube-system", critical)
    assert made.spec.priority == 2000001000


def test_kubectl_the_rules_for_priority_classes_and_updates_hold(kubectl: Kubectl) -> None:
    kubectl.ok("create", "priorityclass", "normal", "--value=10", "--global-default=true")
    second = kubectl.run("create", "priorityclass", "other", "--value=20", "--global-default=true")
    assert second.returncode != 0 and "PriorityClass normal is already marked as default. Only one default can exist" in second.stderr
    reserved = kubectl.run("create", "priorityclass", "system-mine", "--value=10")
    assert reserved.returncode != 0 and "reserved for system use only" in reserved.stderr
    huge = kubectl.run("create", "priorityclass", "huge", "--value=2000000000")
    assert huge.returncode != 0 and "maximum allowed value of a user defined priority is 1000000000" in huge.stderr
    # an update that leaves the priority out keeps the one admission set (kubectl replace sends
    # the object as the user wrote it)
    kubectl.ok("apply", "-f", "-", stdin=_pod("kept", "normal"))
    kubectl.ok("replace", "-f", "-", stdin=_pod("kept", "normal").replace("busybox:1.36", "busybox:1.37"))
    assert kubectl.ok("get", "pod", "kept", "-o", "jsonpath={.spec.priority}") == "10"
    changed = kubectl.run("replace", "-f", "-", stdin=_pod("kept", "normal").replace("  containers:", "  priority: 99\n  containers:"))
    assert changed.returncode != 0 and "pod updates may not change fields" in changed.stderr

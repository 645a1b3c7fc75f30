"""The sandbox serves storage as a cluster does (issue 31): classes, claims, volumes, the PV
controller, the CSI provisioner stand-in, the ephemeral volume controller and the kubelet's
volume checks, seen through kubectl and the official ``kubernetes`` client over real HTTPS.

Time is the store's ManualClock: what is timed (a slow provisioner, a retry) happens only when a
test moves it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from kubectl import Kubectl
from kubernetes.client import ApiClient, Configuration, CoreV1Api, StorageV1Api
from kubernetes.client.rest import ApiException
from sandboxes import node
from usher.sandbox.apiserver import FakeApiServer, ServerThread
from usher.sandbox.store import Store
from usher.sandbox.world import ManualClock

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"

ZONES = {"n1": "zone-a", "n2": "zone-b", "n3": "zone-a"}
NS = "default"


class Cluster:
    """A sandbox with the controllers on a manual clock, kubectl and the official client."""

    def __init__(self, thread: ServerThread, clock: ManualClock, kubectl: Kubectl, api: ApiClient) -> None:
        self.thread, self.clock, self.kubectl = thread, clock, kubectl
        self.core, self.storage = CoreV1Api(api), StorageV1Api(api)

    @property
    def controllers(self) -> Any:
        return self.thread.server.controllers

    def advance(self, seconds: float) -> None:
        self.clock.t += seconds
        self.thread.call(self.controllers.step)

    def until(self, probe: Callable[[], Any], what: str, deadline: float = 15.0) -> Any:
        end = time.monotonic() + deadline
        while True:
            self.thread.call(self.controllers.step)
            value = probe()
            if value:
                return value
            if time.monotonic() > end:
                raise AssertionError(f"never happened: {what}")
            time.sleep(0.02)

    def apply(self, text: str) -> str:
        return self.kubectl.ok("apply", "-f", "-", stdin=text)

    def claim(self, name: str, ns: str = NS) -> Any:
        return self.core.read_namespaced_persistent_volume_claim(name, ns)

    def volume(self, name: str) -> Any:
        return self.core.read_persistent_volume(name)

    def bound(self, name: str, ns: str = NS) -> Any:
        return self.until(lambda: (c := self.claim(name, ns)).status.phase == "Bound" and c, f"claim {name} bound")

    def events(self, name: str, ns: str = NS) -> list[Any]:
        return [e for e in self.core.list_namespaced_event(ns).items if e.involved_object.name == name]

    def event(self, name: str, reason: str, ns: str = NS) -> Any:
        return self.until(lambda: next((e for e in self.events(name, ns) if e.reason == reason), None),
                          f"{reason} event on {name}")

    def pod(self, name: str, ns: str = NS) -> Any:
        return self.core.read_namespaced_pod(name, ns)

    def gone(self, read: Callable[[], Any]) -> bool:
        try:
            read()
        except ApiException as error:
            return error.status == 404
        return False


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    clock = ManualClock(1_000_000.0)
    with ServerThread(FakeApiServer(Store(clock=clock.now), controllers=True, tls=True)) as thread:
        for name, zone in ZONES.items():
            thread.call(thread.server.store.create, "nodes",
                        node(name, cpu="96", memory="1Ti", labels={"topology.kubernetes.io/zone": zone}))
        config = tmp_path / "kubeconfig"
        config.write_text(yaml.safe_dump(thread.server.kubeconfig(thread.server.admin_token)))
        configuration = Configuration()
        kubernetes.config.load_kube_config_from_dict(thread.server.kubeconfig(thread.server.admin_token),
                                                     client_configuration=configuration)
        with ApiClient(configuration) as api:
            c = Cluster(thread, clock, Kubectl(config), api)
            c.thread.call(c.controllers.step)
            yield c
        assert not thread.server.controllers.errors, thread.server.controllers.errors


def claim_yaml(name: str, size: str = "10Gi", cls: str | None = None, modes: str = "[ReadWriteOnce]", extra: str = "") -> str:
    text = f"apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {name}{extra}}}\nspec:\n  accessModes: {modes}\n"
    text += f"  resources: {{requests: {{storage: {size}}}}}\n"
    if cls is not None:
        text += f"  storageClassName: {json.dumps(cls)}\n"
    return text


def local_pv_yaml(name: str, host: str, size: str = "100Gi", cls: str = "", modes: str = "[ReadWriteOnce]") -> str:
    return (f"apiVersion: v1\nkind: PersistentVolume\nmetadata: {{name: {name}}}\nspec:\n"
            f"  capacity: {{storage: {size}}}\n  accessModes: {modes}\n  storageClassName: {json.dumps(cls)}\n"
            f"  local: {{path: /mnt/disks/{name}}}\n  nodeAffinity:\n    required:\n      nodeSelectorTerms:\n"
            f"        - matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [{host}]}}]\n")


def class_yaml(name: str, provisioner: str, mode: str = "WaitForFirstConsumer", params: dict[str, str] | None = None,
               extra: str = "") -> str:
    text = (f"apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{name: {name}}}\n"
            f"provisioner: {provisioner}\nvolumeBindingMode: {mode}\n")
    if params:
        text += "parameters:\n" + "".join(f"  {k}: {json.dumps(v)}\n" for k, v in params.items())
    return text + extra


def pod_yaml(name: str, claims: dict[str, str], node_name: str | None = None, ephemeral: str | None = None) -> str:
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1.36"}],
                 "volumes": [{"name": v, "persistentVolumeClaim": {"claimName": c}} for v, c in claims.items()]},
    }
    if ephemeral:
        body["spec"]["volumes"].append({"name": ephemeral, "ephemeral": {"volumeClaimTemplate": {
            "metadata": {"labels": {"purpose": "scratch"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "50Gi"}}}}}})
    if node_name:
        body["spec"]["nodeName"] = node_name
    return yaml.safe_dump(body)


def affinity(pv: Any) -> tuple[str, list[str]]:
    [term] = pv.spec.node_affinity.required.node_selector_terms
    [expr] = term.match_expressions
    return expr.key, expr.values


def select(cluster: Cluster, claim: str, node_name: str) -> None:
    cluster.kubectl.ok("annotate", "pvc", claim, f"volume.kubernetes.io/selected-node={node_name}")


# ---------------------------------------------------------------- classes, claims and volumes


def test_kubectl_gets_claims_volumes_and_classes_as_on_a_cluster(cluster: Cluster) -> None:
    cluster.apply(local_pv_yaml("disk-1", "n1") + "---\n" + claim_yaml("data", "50Gi", cls="") + "---\n" + claim_yaml("later"))
    cluster.bound("data")
    out = cluster.kubectl.ok("get", "pvc,pv,sc")
    lines = [line.split() for line in out.splitlines() if line.strip()]
    assert ["NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS", "MODES", "STORAGECLASS", "VOLUMEATTRIBUTESCLASS", "AGE"] == lines[0]
    rows = {line[0]: line for line in lines}
    assert rows["persistentvolumeclaim/data"][1:5] == ["Bound", "disk-1", "100Gi", "RWO"]
    assert rows["persistentvolumeclaim/later"][1:3] == ["Pending", "standard"]  # the default class, given at admission
    assert ["NAME", "CAPACITY", "ACCESS", "MODES", "RECLAIM", "POLICY", "STATUS", "CLAIM", "STORAGECLASS"] == lines[
        next(i for i, line in enumerate(lines) if line[0] == "persistentvolume/disk-1") - 1][:9]
    assert rows["persistentvolume/disk-1"][1:6] == ["100Gi", "RWO", "Retain", "Bound", "default/data"]
    assert rows["storageclass.storage.k8s.io/standard"][1:6] == [
        "(default)", "local.csi.sandbox.usher", "Delete", "WaitForFirstConsumer", "true"]
    assert rows["storageclass.storage.k8s.io/zonal"][1:4] == ["zonal.csi.sandbox.usher", "Delete", "WaitForFirstConsumer"]
    claim = cluster.claim("later")
    assert claim.metadata.finalizers == ["kubernetes.io/pvc-protection"] and claim.spec.volume_mode == "Filesystem"
    assert cluster.volume("disk-1").metadata.finalizers == ["kubernetes.io/pv-protection"]
    assert {d.name for d in cluster.storage.read_csi_node("n2").spec.drivers} == {"local.csi.sandbox.usher", "zonal.csi.sandbox.usher"}


def test_a_wait_for_first_consumer_claim_waits_for_a_node_then_is_provisioned_on_its_topology(cluster: Cluster) -> None:
    cluster.apply(claim_yaml("local-data") + "---\n" + claim_yaml("zonal-data", cls="zonal"))
    waiting = cluster.event("local-data", "WaitForFirstConsumer")
    assert waiting.message == "waiting for first consumer to be created before binding" and waiting.type == "Normal"
    cluster.advance(60)
    assert cluster.claim("local-data").status.phase == "Pending" and cluster.claim("zonal-data").status.phase == "Pending"
    assert cluster.core.list_persistent_volume().items == []
    select(cluster, "local-data", "n2")
    select(cluster, "zonal-data", "n2")
    local, zonal = cluster.bound("local-data"), cluster.bound("zonal-data")
    assert affinity(cluster.volume(local.spec.volume_name)) == ("kubernetes.io/hostname", ["n2"])
    assert affinity(cluster.volume(zonal.spec.volume_name)) == ("topology.kubernetes.io/zone", ["zone-b"])
    pv = cluster.volume(zonal.spec.volume_name)
    assert pv.metadata.name == f"pvc-{zonal.metadata.uid}" and pv.spec.csi.driver == "zonal.csi.sandbox.usher"
    assert pv.spec.claim_ref.uid == zonal.metadata.uid and pv.status.phase == "Bound"
    assert zonal.status.capacity == {"storage": "10Gi"} and zonal.status.access_modes == ["ReadWriteOnce"]
    assert cluster.event("zonal-data", "ProvisioningSucceeded").message == f"Successfully provisioned volume {pv.metadata.name}"
    assert "external provisioner 'zonal.csi.sandbox.usher'" in cluster.event("zonal-data", "ExternalProvisioning").message


def test_an_immediate_class_provisions_at_once_within_its_allowed_topologies(cluster: Cluster) -> None:
    cluster.apply(class_yaml("zone-b-disks", "zonal.csi.sandbox.usher", "Immediate", extra=(
        "allowedTopologies:\n- matchLabelExpressions:\n  - {key: topology.kubernetes.io/zone, values: [zone-b]}\n"))
        + "---\n" + claim_yaml("now", cls="zone-b-disks"))
    claim = cluster.bound("now")
    assert affinity(cluster.volume(claim.spec.volume_name)) == ("topology.kubernetes.io/zone", ["zone-b"])
    assert "selected-node" not in str(claim.metadata.annotations)


def test_an_allowed_topology_holds_only_where_all_its_expressions_do(cluster: Cluster) -> None:
    """A term's expressions are ANDed (``MatchTopologySelectorTerms``, the scheduler's rule too):
    zone-b and a rack no node is labelled with allow no node, so nothing is provisioned in zone-b."""
    cluster.apply(class_yaml("zone-b-rack", "zonal.csi.sandbox.usher", "Immediate", extra=(
        "allowedTopologies:\n- matchLabelExpressions:\n  - {key: topology.kubernetes.io/zone, values: [zone-b]}\n"
        "  - {key: example.com/rack, values: [r1]}\n")) + "---\n" + claim_yaml("racked", cls="zone-b-rack"))
    failed = cluster.event("racked", "ProvisioningFailed")
    assert "no node offers topology topology.kubernetes.io/zone allowed by the StorageClass" in failed.message
    assert cluster.claim("racked").status.phase == "Pending" and cluster.core.list_persistent_volume().items == []


def test_the_pv_controller_binds_a_static_volume_that_matches(cluster: Cluster) -> None:
    cluster.apply("---\n".join([
        local_pv_yaml("small", "n1", "10Gi"),
        local_pv_yaml("other-class", "n1", "200Gi", cls="zonal"),
        local_pv_yaml("read-only", "n1", "200Gi", modes="[ReadOnlyMany]"),
        local_pv_yaml("big", "n3", "500Gi"),
        local_pv_yaml("right", "n2", "200Gi"),
        claim_yaml("data", "100Gi", cls=""),
    ]))
    assert cluster.bound("data").spec.volume_name == "right"  # the smallest that fits, not "big"
    pv = cluster.volume("right")
    assert pv.spec.claim_ref.name == "data" and pv.metadata.annotations["pv.kubernetes.io/bound-by-controller"] == "yes"
    assert affinity(pv) == ("kubernetes.io/hostname", ["n2"])
    for name in ("small", "other-class", "read-only", "big"):
        assert cluster.volume(name).status.phase == "Available" and cluster.volume(name).spec.claim_ref is None
    # a claim that names its volume gets it, whatever is smaller; one that names a volume of another class does not
    cluster.apply(claim_yaml("named", "1Gi", cls="", extra="") .replace("spec:\n", "spec:\n  volumeName: big\n")
                  + "---\n" + claim_yaml("wrong", "1Gi", cls="").replace("spec:\n", "spec:\n  volumeName: other-class\n"))
    assert cluster.bound("named").spec.volume_name == "big"
    mismatch = cluster.event("wrong", "VolumeMismatch")
    assert mismatch.message == 'Cannot bind to requested volume "other-class": storageClassName does not match'
    assert cluster.claim("wrong").status.phase == "Pending"


def test_a_claim_in_use_is_kept_until_its_pod_is_gone_and_its_volume_is_then_deleted(cluster: Cluster) -> None:
    cluster.apply(claim_yaml("ckpt", cls="zonal") + "---\n" + pod_yaml("trainer", {"ckpt": "ckpt"}, node_name="n1"))
    select(cluster, "ckpt", "n1")
    volume = cluster.bound("ckpt").spec.volume_name
    cluster.until(lambda: cluster.pod("trainer").status.phase == "Running", "trainer running")
    cluster.kubectl.ok("delete", "pvc", "ckpt", "--wait=false")
    cluster.advance(5)
    claim = cluster.claim("ckpt")
    assert claim.metadata.deletion_timestamp is not None and claim.metadata.finalizers == ["kubernetes.io/pvc-protection"]
    assert "Terminating" in cluster.kubectl.ok("get", "pvc", "ckpt")
    cluster.kubectl.ok("delete", "pod", "trainer", "--wait=false")
    cluster.until(lambda: cluster.gone(lambda: cluster.claim("ckpt")), "claim deleted once unused")
    cluster.until(lambda: cluster.gone(lambda: cluster.volume(volume)), "provisioned volume deleted (reclaim Delete)")


def test_a_static_volume_of_a_deleted_claim_is_released_and_kept(cluster: Cluster) -> None:
    cluster.apply(local_pv_yaml("keep", "n1") + "---\n" + claim_yaml("data", cls=""))
    cluster.bound("data")
    cluster.kubectl.ok("delete", "pvc", "data")
    cluster.until(lambda: cluster.volume("keep").status.phase == "Released", "volume released")
    assert cluster.volume("keep").spec.claim_ref.name == "data"


def test_an_ephemeral_volume_gets_a_claim_named_after_its_pod_and_owned_by_it(cluster: Cluster) -> None:
    cluster.apply(pod_yaml("ray-worker", {}, ephemeral="scratch"))
    claim = cluster.until(lambda: not cluster.gone(lambda: cluster.claim("ray-worker-scratch")) and cluster.claim("ray-worker-scratch"),
                          "ephemeral claim")
    pod = cluster.pod("ray-worker")
    [owner] = claim.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid, owner.controller, owner.block_owner_deletion) == ("Pod", "ray-worker", pod.metadata.uid, True, True)
    assert claim.metadata.labels == {"purpose": "scratch"} and claim.spec.storage_class_name == "standard"
    cluster.kubectl.ok("delete", "pod", "ray-worker", "--wait=false")
    cluster.until(lambda: cluster.gone(lambda: cluster.claim("ray-worker-scratch")), "ephemeral claim collected with its pod")


def test_a_statefulset_gets_a_claim_per_replica_from_its_templates(cluster: Cluster) -> None:
    cluster.apply(yaml.safe_dump({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"replicas": 2, "serviceName": "db", "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}},
                              "spec": {"containers": [{"name": "db", "image": "busybox:1.36"}]}},
                 "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": {"tier": "db"}},
                                           "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]},
    }))
    for i in (0, 1):
        claim = cluster.until(lambda i=i: not cluster.gone(lambda: cluster.claim(f"data-db-{i}")) and cluster.claim(f"data-db-{i}"), f"claim {i}")
        assert claim.metadata.labels == {"tier": "db", "app": "db"} and not claim.metadata.owner_references
        pod = cluster.until(lambda i=i: not cluster.gone(lambda: cluster.pod(f"db-{i}")) and cluster.pod(f"db-{i}"), f"pod {i}")
        [volume] = pod.spec.volumes
        assert (volume.name, volume.persistent_volume_claim.claim_name) == ("data", f"data-db-{i}")


# ---------------------------------------------------------------- the kubelet


def test_the_kubelet_does_not_start_a_pod_whose_claim_is_not_bound(cluster: Cluster) -> None:
    cluster.apply(claim_yaml("data") + "---\n" + pod_yaml("p", {"data": "data"}, node_name="n1"))
    failed = cluster.event("p", "FailedMount")
    assert failed.message == ("Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[data], "
                              "failed to process volumes=[data]: error processing PVC default/data: PVC is not bound")
    assert failed.source.component == "kubelet" and failed.source.host == "n1"
    pod = cluster.pod("p")
    assert pod.status.phase == "Pending" and pod.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    assert "ContainerCreating" in cluster.kubectl.ok("get", "pod", "p")
    select(cluster, "data", "n1")
    cluster.until(lambda: cluster.pod("p").status.phase == "Running", "pod started once its claim is bound")


def test_the_kubelet_names_a_claim_that_does_not_exist(cluster: Cluster) -> None:
    cluster.apply(pod_yaml("p", {"data": "nowhere"}, node_name="n1"))
    assert cluster.event("p", "FailedMount").message.endswith(
        'error processing PVC default/nowhere: failed to fetch PVC from API server: persistentvolumeclaims "nowhere" not found')


def test_a_volume_bound_elsewhere_cannot_be_used_on_the_pods_node(cluster: Cluster) -> None:
    cluster.apply(local_pv_yaml("disk-n1", "n1") + "---\n" + claim_yaml("local", cls="") + "---\n"
                  + claim_yaml("zonal", cls="zonal"))
    cluster.bound("local")
    select(cluster, "zonal", "n1")  # zone-a
    zonal_pv = cluster.bound("zonal").spec.volume_name
    cluster.apply(pod_yaml("on-n2", {"data": "local"}, node_name="n2") + "---\n" + pod_yaml("zonal-on-n2", {"data": "zonal"}, node_name="n2"))
    assert cluster.event("on-n2", "FailedMount").message == (
        'MountVolume.NodeAffinity check failed for volume "disk-n1" : no matching NodeSelectorTerms')
    attach = cluster.event("zonal-on-n2", "FailedAttachVolume")
    assert attach.message == (f'AttachVolume.Attach failed for volume "{zonal_pv}" : rpc error: code = FailedPrecondition '
                              f"desc = volume {zonal_pv} is not accessible from node n2")
    assert attach.source.component == "attachdetach-controller"
    assert cluster.pod("on-n2").status.phase == "Pending" and cluster.pod("zonal-on-n2").status.phase == "Pending"


def test_a_read_write_once_volume_in_use_on_one_node_is_a_multi_attach_error_on_another(cluster: Cluster) -> None:
    cluster.apply(claim_yaml("shared", cls="zonal") + "---\n" + pod_yaml("first", {"d": "shared"}, node_name="n1"))
    select(cluster, "shared", "n1")
    pv = cluster.bound("shared").spec.volume_name
    cluster.until(lambda: cluster.pod("first").status.phase == "Running", "first running")
    cluster.apply(pod_yaml("second", {"d": "shared"}, node_name="n3"))  # same zone: it could attach, but it is in use
    assert cluster.event("second", "FailedAttachVolume").message == f'Multi-Attach error for volume "{pv}" Volume is already used by pod(s) first'
    cluster.kubectl.ok("delete", "pod", "first", "--wait=false")
    cluster.until(lambda: cluster.pod("second").status.phase == "Running", "second starts once the volume is free")


# ---------------------------------------------------------------- the provisioner


def test_a_failing_provisioner_leaves_the_claim_pending_and_gives_the_node_back(cluster: Cluster) -> None:
    cluster.apply(class_yaml("broken", "local.csi.sandbox.usher", params={"sandbox.usher/fail": "disk pool exhausted"})
                  + "---\n" + claim_yaml("data", cls="broken"))
    select(cluster, "data", "n1")
    failed = cluster.event("data", "ProvisioningFailed")
    assert failed.type == "Warning" and failed.message == (
        'failed to provision volume with StorageClass "broken": rpc error: code = ResourceExhausted desc = disk pool exhausted')
    claim = cluster.until(lambda: "volume.kubernetes.io/selected-node" not in (c := cluster.claim("data")).metadata.annotations and c,
                          "selected-node removed for rescheduling")
    assert claim.status.phase == "Pending" and not claim.spec.volume_name
    assert cluster.core.list_persistent_volume().items == []


def test_a_failure_that_is_not_final_is_retried_on_the_same_node(cluster: Cluster) -> None:
    cluster.apply(claim_yaml("data", cls="zonal"))
    cluster.controllers.provisioner.fail(NS, "data", "driver restarting", code="Unavailable")
    select(cluster, "data", "n2")
    assert "code = Unavailable desc = driver restarting" in cluster.event("data", "ProvisioningFailed").message
    assert cluster.claim("data").metadata.annotations["volume.kubernetes.io/selected-node"] == "n2"
    assert cluster.claim("data").status.phase == "Pending"
    cluster.advance(1)  # the first retry, after 1 s of backoff
    assert affinity(cluster.volume(cluster.bound("data").spec.volume_name)) == ("topology.kubernetes.io/zone", ["zone-b"])


def test_a_slow_provisioner_makes_the_claim_wait(cluster: Cluster) -> None:
    cluster.apply(class_yaml("slow", "local.csi.sandbox.usher", params={"sandbox.usher/delay": "30s"}) + "---\n" + claim_yaml("data", cls="slow"))
    select(cluster, "data", "n1")
    cluster.event("data", "Provisioning")  # the driver's CreateVolume has started
    cluster.advance(29)
    assert cluster.claim("data").status.phase == "Pending"
    cluster.advance(1)
    cluster.bound("data")


def test_capacity_is_published_and_a_claim_larger_than_what_is_left_fails(cluster: Cluster) -> None:
    cluster.apply(class_yaml("small-disks", "local.csi.sandbox.usher", params={"sandbox.usher/capacity": "100Gi"})
                  + "---\n" + claim_yaml("a", "80Gi", cls="small-disks") + "---\n" + claim_yaml("b", "80Gi", cls="small-disks"))
    capacities = {c.node_topology.match_labels["kubernetes.io/hostname"]: c for c in
                  cluster.storage.list_namespaced_csi_storage_capacity("kube-system").items if c.storage_class_name == "small-disks"}
    assert sorted(capacities) == ["n1", "n2", "n3"] and capacities["n1"].capacity == "100Gi"
    select(cluster, "a", "n1")
    cluster.bound("a")
    left = cluster.until(lambda: next(c for c in cluster.storage.list_namespaced_csi_storage_capacity("kube-system").items
                                      if c.metadata.name == "csisc-small-disks-n1").capacity != "100Gi", "capacity updated")
    assert left
    select(cluster, "b", "n1")
    assert "code = ResourceExhausted desc = insufficient capacity" in cluster.event("b", "ProvisioningFailed").message
    select(cluster, "b", "n2")
    cluster.bound("b")


# ---------------------------------------------------------------- validation


def test_claims_are_validated_and_immutable_as_kube_apiserver_does(cluster: Cluster) -> None:
    bad = cluster.kubectl.run("apply", "-f", "-", stdin=claim_yaml("bad", "0", modes="[ReadWriteOncePod, Sideways]"))
    assert bad.returncode != 0
    assert 'spec.accessModes: Unsupported value: "Sideways": supported values: "ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"' in bad.stderr
    assert "spec.accessModes: Forbidden: may not use ReadWriteOncePod with other access modes" in bad.stderr
    assert 'spec.resources[storage]: Invalid value: "0": must be greater than zero' in bad.stderr
    unknown = cluster.kubectl.run("apply", "-f", "-", stdin=claim_yaml("typo").replace("spec:\n", "spec:\n  storageClass: fast\n"))
    assert 'strict decoding error: unknown field "spec.storageClass"' in unknown.stderr
    no_affinity = cluster.kubectl.run("apply", "-f", "-", stdin=local_pv_yaml("x", "n1").split("  nodeAffinity:")[0])
    assert "spec.nodeAffinity: Required value: Local volume requires node affinity" in no_affinity.stderr
    cluster.apply(claim_yaml("data", "10Gi", cls="zonal"))
    changed = cluster.kubectl.run("patch", "pvc", "data", "-p", '{"spec": {"accessModes": ["ReadWriteMany"]}}')
    assert "spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims" in changed.stderr
    select(cluster, "data", "n1")
    cluster.bound("data")
    cluster.kubectl.ok("patch", "pvc", "data", "-p", '{"spec": {"resources": {"requests": {"storage": "20Gi"}}}}')
    grown = cluster.until(lambda: (c := cluster.claim("data")).status.capacity == {"storage": "20Gi"} and c, "claim expanded")
    assert cluster.volume(grown.spec.volume_name).spec.capacity == {"storage": "20Gi"}
    shrink = cluster.kubectl.run("patch", "pvc", "data", "-p", '{"spec": {"resources": {"requests": {"storage": "5Gi"}}}}')
    assert "spec.resources.requests.storage: Forbidden: field can not be less than status.capacity" in shrink.stderr
    cluster.apply(class_yaml("fixed", "zonal.csi.sandbox.usher", "Immediate") + "---\n" + claim_yaml("fixed", cls="fixed"))
    cluster.bound("fixed")
    grow = cluster.kubectl.run("patch", "pvc", "fixed", "-p", '{"spec": {"resources": {"requests": {"storage": "20Gi"}}}}')
    assert ('persistentvolumeclaims "fixed" is forbidden: only dynamically provisioned pvc can be resized and the '
            "storageclass that provisions the pvc must support resize") in grow.stderr
    mode = cluster.kubectl.run("patch", "sc", "fixed", "-p", '{"volumeBindingMode": "WaitForFirstConsumer"}')
    assert "volumeBindingMode: Invalid value" in mode.stderr and "field is immutable" in mode.stderr


# ---------------------------------------------------------------- the default scheduler's VolumeBinding


def scheduled_pod_yaml(name: str, claims: dict[str, str], zone: str | None = None) -> str:
    body = yaml.safe_load(pod_yaml(name, claims))
    if zone:
        body["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": zone}
    return yaml.safe_dump(body)


def test_the_default_scheduler_provisions_a_delayed_claim_on_the_node_it_chooses_before_binding(cluster: Cluster) -> None:
    cluster.apply(claim_yaml("data", cls="zonal") + "---\n" + scheduled_pod_yaml("p", {"d": "data"}, zone="zone-b"))
    pod = cluster.until(lambda: (p := cluster.pod("p")).spec.node_name and p, "pod bound")
    claim = cluster.claim("data")
    assert pod.spec.node_name == "n2" and claim.metadata.annotations["volume.kubernetes.io/selected-node"] == "n2"
    assert claim.status.phase == "Bound"  # bound before the pod was
    assert affinity(cluster.volume(claim.spec.volume_name)) == ("topology.kubernetes.io/zone", ["zone-b"])
    cluster.until(lambda: cluster.pod("p").status.phase == "Running", "pod running")


def test_the_default_scheduler_follows_a_bound_volume_and_says_when_it_cannot(cluster: Cluster) -> None:
    cluster.apply(local_pv_yaml("disk-n1", "n1") + "---\n" + claim_yaml("data", cls=""))
    cluster.bound("data")
    cluster.apply(scheduled_pod_yaml("follows", {"d": "data"}) + "---\n" + scheduled_pod_yaml("elsewhere", {"d": "data"}, zone="zone-b"))
    assert cluster.until(lambda: cluster.pod("follows").spec.node_name, "bound") == "n1"
    blocked = cluster.until(lambda: next((c for c in cluster.pod("elsewhere").status.conditions or []
                                          if c.type == "PodScheduled" and c.status == "False"), None), "unschedulable")
    assert blocked.message.startswith("0/3 nodes are available: 1 node(s) had volume node affinity conflict, "
                                      "2 node(s) didn't match Pod's node affinity/selector.")
    cluster.apply(scheduled_pod_yaml("no-claim", {"d": "missing"}))
    missing = cluster.until(lambda: next((c for c in cluster.pod("no-claim").status.conditions or []
                                          if c.type == "PodScheduled" and c.status == "False"), None), "unschedulable")
    assert missing.message.startswith('0/3 nodes are available: persistentvolumeclaim "missing" not found.')


def test_the_default_scheduler_does_not_bind_a_pod_whose_claim_fails_to_provision(cluster: Cluster) -> None:
    cluster.apply(class_yaml("broken", "zonal.csi.sandbox.usher", params={"sandbox.usher/fail": "quota exceeded"})
                  + "---\n" + claim_yaml("data", cls="broken") + "---\n" + scheduled_pod_yaml("p", {"d": "data"}))
    failed = cluster.event("p", "FailedScheduling")
    assert failed.message == 'running PreBind plugin "VolumeBinding": binding volumes: selectedNode annotation reset for PVC "data"'
    assert not cluster.pod("p").spec.node_name and cluster.claim("data").status.phase == "Pending"
    assert "quota exceeded" in cluster.event("data", "ProvisioningFailed").message


# ---------------------------------------------------------------- the examples


def on_default_scheduler(path: Path) -> str:
    """An example as written, but for the sandbox's default scheduler (usher's side is tested elsewhere)."""
    return path.read_text().replace("schedulerName: usher", "schedulerName: default-scheduler")


def running(cluster: Cluster, name: str) -> Any:
    """The pod once it runs, read with the official client (it may not exist yet)."""
    return cluster.until(lambda: not cluster.gone(lambda: cluster.pod(name)) and (p := cluster.pod(name)).status.phase == "Running" and p,
                         f"{name} running", deadline=30)


def test_the_pytorchjob_example_shares_its_dataset_and_gives_each_pod_scratch(cluster: Cluster) -> None:
    out = cluster.apply(on_default_scheduler(EXAMPLES / "pytorchjob-dataset.yaml"))
    assert "persistentvolumeclaim/imagenet created" in out and "pytorchjob.kubeflow.org/resnet-data created" in out
    nodes = {}
    for name in ("resnet-data-master-0", "resnet-data-worker-0"):
        nodes[name] = running(cluster, name).spec.node_name
        scratch = cluster.claim(f"{name}-scratch")
        assert scratch.metadata.owner_references[0].name == name and scratch.status.phase == "Bound"
        assert affinity(cluster.volume(scratch.spec.volume_name)) == ("kubernetes.io/hostname", [nodes[name]])
    dataset = cluster.claim("imagenet")
    assert dataset.status.phase == "Bound" and dataset.status.access_modes == ["ReadWriteMany"]
    zone = affinity(cluster.volume(dataset.spec.volume_name))[1][0]
    assert {ZONES[n] for n in nodes.values()} == {zone} and len(set(nodes.values())) == 2


def test_the_leaderworkerset_example_gives_each_pod_its_own_claim(cluster: Cluster) -> None:
    cluster.apply(on_default_scheduler(EXAMPLES / "leaderworkerset-claims.yaml"))
    for pod_name, claim_name in (("llm-cache-0", "model-cache-llm-cache-0"), ("llm-cache-0-1", "model-cache-llm-cache-0-1")):
        pod = running(cluster, pod_name)
        assert [v.persistent_volume_claim.claim_name for v in pod.spec.volumes if v.name == "model-cache"] == [claim_name]
        claim = cluster.claim(claim_name)
        assert claim.status.phase == "Bound" and claim.spec.storage_class_name == "standard"
        assert affinity(cluster.volume(claim.spec.volume_name)) == ("kubernetes.io/hostname", [pod.spec.node_name])


def test_a_claim_made_before_any_default_class_gets_the_default_once_there_is_one(cluster: Cluster) -> None:
    cluster.kubectl.ok("annotate", "sc", "standard", "storageclass.kubernetes.io/is-default-class-")
    cluster.apply(claim_yaml("early"))
    cluster.advance(1)
    assert cluster.claim("early").spec.storage_class_name is None
    cluster.kubectl.ok("annotate", "sc", "zonal", "storageclass.kubernetes.io/is-default-class=true")
    cluster.until(lambda: cluster.claim("early").spec.storage_class_name == "zonal", "the default class given afterwards")


def test_a_pod_whose_ephemeral_volume_template_is_wrong_is_refused_with_the_place(cluster: Cluster) -> None:
    body = yaml.safe_load(pod_yaml("p", {}, ephemeral="scratch"))
    body["spec"]["volumes"][0]["ephemeral"]["volumeClaimTemplate"]["spec"].pop("accessModes")
    refused = cluster.kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(body))
    assert refused.returncode != 0
    assert "spec.volumes[0].ephemeral.volumeClaimTemplate.spec.accessModes: Required value: at least 1 access mode is required" in refused.stderr


def test_the_storage_controllers_hold_their_cluster_roles_and_a_tenant_does_not(tmp_path: Path) -> None:
    with ServerThread(FakeApiServer(authorization=True, controllers=True, tls=True)) as thread:
        configuration = Configuration()
        kubernetes.config.load_kube_config_from_dict(thread.server.kubeconfig(thread.server.admin_token),
                                                     client_configuration=configuration)
        with ApiClient(configuration) as api:
            authz = kubernetes.client.AuthorizationV1Api(api)

            def allowed(account: str, verb: str, resource: str, namespace: str = "", group: str = "") -> bool:
                review = authz.create_subject_access_review({
                    "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                    "spec": {"user": f"system:serviceaccount:{account}", "groups": ["system:serviceaccounts"],
                             "resourceAttributes": {"verb": verb, "resource": resource, "namespace": namespace, "group": group}}})
                return bool(review.status.allowed)

            binder = "kube-system:persistent-volume-binder"
            assert allowed(binder, "update", "persistentvolumes") and allowed(binder, "update", "persistentvolumeclaims", "team")
            assert not allowed(binder, "delete", "persistentvolumeclaims", "team")
            assert allowed("kube-system:ephemeral-volume-controller", "create", "persistentvolumeclaims", "team")
            assert allowed("kube-system:csi-provisioner", "create", "csistoragecapacities", "kube-system", "storage.k8s.io")
            assert not allowed("team:default", "create", "persistentvolumeclaims", "team")  # a tenant only as granted
            assert "system:controller:persistent-volume-binder" in {
                r.metadata.name for r in kubernetes.client.RbacAuthorizationV1Api(api).list_cluster_role().items}


def unschedulable(cluster: Cluster, name: str) -> str:
    return cluster.until(lambda: next((c.message for c in cluster.pod(name).status.conditions or []
                                       if c.type == "PodScheduled" and c.status == "False"), None), f"{name} unschedulable")


def test_the_default_scheduler_keeps_a_node_within_its_attach_limit(cluster: Cluster) -> None:
    cluster.kubectl.ok("annotate", "node", "n1", "sandbox.usher/csi-attach-limit=1")
    cluster.until(lambda: [d.allocatable.count for d in cluster.storage.read_csi_node("n1").spec.drivers] == [1, 1], "CSINode count")
    on_n1 = {"kubernetes.io/hostname": "n1"}
    first, second = (yaml.safe_load(scheduled_pod_yaml(n, {"d": n})) for n in ("first", "second"))
    for body in (first, second):
        body["spec"]["nodeSelector"] = on_n1
    cluster.apply(claim_yaml("first") + "---\n" + yaml.safe_dump(first))
    assert cluster.until(lambda: cluster.pod("first").spec.node_name, "first bound") == "n1"
    cluster.apply(claim_yaml("second") + "---\n" + yaml.safe_dump(second))
    assert unschedulable(cluster, "second").startswith(
        "0/3 nodes are available: 1 node(s) exceed max volume count, 2 node(s) didn't match Pod's node affinity/selector.")


def test_a_read_write_once_pod_claim_in_use_keeps_a_second_pod_off_every_node(cluster: Cluster) -> None:
    cluster.apply(claim_yaml("solo", cls="zonal", modes="[ReadWriteOncePod]") + "---\n" + scheduled_pod_yaml("owner", {"d": "solo"}))
    cluster.until(lambda: cluster.pod("owner").status.phase == "Running", "owner running")
    cluster.apply(scheduled_pod_yaml("intruder", {"d": "solo"}))
    assert unschedulable(cluster, "intruder").startswith(
        "0/3 nodes are available: node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode.")


def test_a_selected_node_withdrawn_before_a_slow_provisioner_answers_leaves_no_volume(cluster: Cluster) -> None:
    cluster.apply(class_yaml("slow", "local.csi.sandbox.usher", params={"sandbox.usher/delay": "30s"}) + "---\n" + claim_yaml("data", cls="slow"))
    select(cluster, "data", "n1")
    cluster.event("data", "Provisioning")
    cluster.kubectl.ok("annotate", "pvc", "data", "volume.kubernetes.io/selected-node-")  # the scheduler changes its mind
    cluster.advance(60)
    assert cluster.claim("data").status.phase == "Pending" and cluster.core.list_persistent_volume().items == []
    select(cluster, "data", "n2")
    cluster.until(lambda: cluster.event("data", "Provisioning").count == 2, "CreateVolume started again, for n2")
    cluster.advance(30)
    assert affinity(cluster.volume(cluster.bound("data").spec.volume_name)) == ("kubernetes.io/hostname", ["n2"])

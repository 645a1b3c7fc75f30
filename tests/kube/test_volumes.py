"""usher's volume rules on plain API objects: which nodes a pod's claims allow, and a gang's PreBind.

Table-driven: each case is a small cluster of claims, volumes and classes written as the API
serves them, and what a user would see (the nodes a pod may use, the reason it waits).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from usher.engine.backends.kube.objects import node_view
from usher.engine.backends.kube.volumes import (
    Placed, Source, Step, Storage, VolumeReason, fit_nodes, leftovers, parse_capacity, parse_claim, parse_class,
    parse_csidriver, parse_csinode, parse_volume, plan, pod_volumes, progress, sort_claims, undo,
)

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
NODES = {"gpu-01": "a", "gpu-02": "a", "gpu-03": "b"}


def nodes() -> list[Any]:
    return [node_view({"metadata": {"name": n, "labels": {ZONE: z, HOST: n}},
                       "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi"}}})
            for n, z in NODES.items()]


def labels() -> dict[str, dict[str, str]]:
    return {n.name: dict(n.labels) for n in nodes()}


def sc(name: str, mode: str = "WaitForFirstConsumer", provisioner: str = "csi.example.com",
       zones: list[str] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": name}, "provisioner": provisioner, "volumeBindingMode": mode}
    if zones:
        obj["allowedTopologies"] = [{"matchLabelExpressions": [{"key": ZONE, "values": zones}]}]
    return obj


def pvc(name: str, klass: str | None = "fast", size: str = "10Gi", modes: tuple[str, ...] = ("ReadWriteOnce",),
        volume: str = "", bound: bool = False, selected: str | None = None, owner: str | None = None,
        ns: str = "ml") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"uid-{name}", "annotations": {}}
    if selected:
        meta["annotations"]["volume.kubernetes.io/selected-node"] = selected
    if bound:
        meta["annotations"]["pv.kubernetes.io/bind-completed"] = "yes"
    if owner:
        meta["ownerReferences"] = [{"kind": "Pod", "name": owner, "uid": f"uid-{owner}", "controller": True}]
    spec: dict[str, Any] = {"accessModes": list(modes), "resources": {"requests": {"storage": size}}}
    if klass is not None:
        spec["storageClassName"] = klass
    if volume:
        spec["volumeName"] = volume
    return {"metadata": meta, "spec": spec, "status": {"phase": "Bound" if bound else "Pending"}}


def pv(name: str, klass: str = "fast", size: str = "10Gi", modes: tuple[str, ...] = ("ReadWriteOnce",),
       host: str | None = None, zone: str | None = None, claim: str | None = None, driver: str | None = None,
       zone_label: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"storageClassName": klass, "capacity": {"storage": size}, "accessModes": list(modes)}
    if host or zone:
        key, value = (HOST, host) if host else (ZONE, zone)
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}]}}
    if claim:
        spec["claimRef"] = {"namespace": "ml", "name": claim}
    if driver:
        spec["csi"] = {"driver": driver, "volumeHandle": name}
    meta: dict[str, Any] = {"name": name}
    if zone_label:
        meta["labels"] = {ZONE: zone_label}
    return {"metadata": meta, "spec": spec, "status": {"phase": "Bound" if claim else "Available"}}


def pod(name: str, *claims: str, ephemeral: tuple[str, ...] = ()) -> dict[str, Any]:
    vols: list[dict[str, Any]] = [{"name": "config", "configMap": {"name": "c"}}]
    vols += [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    vols += [{"name": e, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}} for e in ephemeral]
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"}, "spec": {"volumes": vols}}


def storage(*objs: dict[str, Any], capacities: list[dict[str, Any]] = (), csinodes: list[dict[str, Any]] = (),
            users: dict[str, tuple[str, str | None]] | None = None, drivers: list[dict[str, Any]] = ()) -> Storage:
    s = Storage()
    for o in drivers:
        name, checked = parse_csidriver(o)
        s.drivers[name] = checked
    for o in objs:
        if "provisioner" in o:
            c = parse_class(o)
            s.classes[c.name] = c
        elif "claimRef" in o["spec"] or "capacity" in o["spec"]:
            v, problems = parse_volume(o)
            assert not problems
            s.volumes[v.name] = v
        else:
            c = parse_claim(o)
            s.claims[c.key] = c
    for o in capacities:
        cap = parse_capacity(o)
        s.capacities[cap.name] = cap
    for o in csinodes:
        node, limits = parse_csinode(o)
        s.limits[node] = limits
    for claim, (user, node) in (users or {}).items():
        s.set_use(user, node, [claim])
    s.changed()
    return s


def fit(p: dict[str, Any], s: Storage):
    vols, problems = pod_volumes(p)
    assert not problems
    claims = sort_claims(f"ml/{p['metadata']['name']}", p["metadata"]["uid"], vols, s)
    return fit_nodes(claims, nodes(), s), claims


def test_a_pods_claims_are_read_from_its_volumes_ephemeral_ones_by_the_controllers_name():
    vols, problems = pod_volumes(pod("w-0", "data", ephemeral=("scratch",)))
    assert [(v.volume, v.claim, v.source) for v in vols] == [
        ("v0", "data", Source.CLAIM), ("scratch", "w-0-scratch", Source.EPHEMERAL)]
    assert problems == []
    bad = {"metadata": {"name": "p"}, "spec": {"volumes": [{"name": "x", "persistentVolumeClaim": {}}]}}
    assert pod_volumes(bad)[1] == ["spec.volumes[0].persistentVolumeClaim.claimName: expected a claim's name, got None"]


BLOCKED = [
    ("claim not found", [], pod("p", "data"), VolumeReason.CLAIM_NOT_FOUND,
     "persistentvolumeclaim 'data' not found: the pod's volume 'v0' uses claim ml/data"),
    ("ephemeral claim not made yet", [sc("fast")], pod("p", ephemeral=("scratch",)), VolumeReason.CLAIM_NOT_FOUND,
     "waiting for the ephemeral volume controller to create claim ml/p-scratch"),
    ("ephemeral claim of another pod", [sc("fast"), pvc("p-scratch", owner="q")], pod("p", ephemeral=("scratch",)),
     VolumeReason.CLAIM_NOT_OWNED, "claim ml/p-scratch was not created for this pod"),
    ("class not found", [pvc("data", klass="gold")], pod("p", "data"), VolumeReason.CLASS_NOT_FOUND,
     "claim ml/data asks for StorageClass 'gold', which does not exist"),
    ("unbound claim of an Immediate class", [sc("fast", mode="Immediate"), pvc("data")], pod("p", "data"),
     VolumeReason.UNBOUND_IMMEDIATE, "claim ml/data is not bound and class 'fast' binds immediately"),
    ("unbound claim without a class", [pvc("data", klass=None)], pod("p", "data"),
     VolumeReason.UNBOUND_IMMEDIATE, "claim ml/data is not bound and it has no storage class"),
    ("bound to a volume that is gone", [sc("fast"), pvc("data", volume="pv-9", bound=True)], pod("p", "data"),
     VolumeReason.VOLUME_NOT_FOUND, "claim ml/data is bound to PersistentVolume 'pv-9', which does not exist"),
]


@pytest.mark.parametrize("case,objs,the_pod,reason,words", BLOCKED, ids=[c[0] for c in BLOCKED])
def test_a_claim_that_cannot_be_used_keeps_the_pod_off_every_node_with_a_reason(case, objs, the_pod, reason, words):
    result, claims = fit(the_pod, storage(*objs))
    assert result.eligible == frozenset()
    assert [b.reason for b in result.blockers] == [reason]
    assert words in result.explain(storage(*objs))


def test_a_read_write_once_pod_claim_used_by_another_pod_blocks_the_second():
    s = storage(sc("fast"), pvc("data", modes=("ReadWriteOncePod",), volume="pv-1", bound=True), pv("pv-1", claim="data",
                modes=("ReadWriteOncePod",)), users={"ml/data": ("ml/other", "gpu-01")})
    result, _ = fit(pod("p", "data"), s)
    assert result.eligible == frozenset()
    assert result.blockers[0].reason == VolumeReason.RWOP_IN_USE
    assert "pod ml/other already uses it" in result.blockers[0].message
    # the pod that uses it is not blocked by itself
    vols, _ = pod_volumes(pod("other", "data"))
    assert fit_nodes(sort_claims("ml/other", "uid-other", vols, s), nodes(), s).eligible is None


PLACED = [
    # case, objects, claims of the pod, nodes it may use, the reason the others are out, words in the reason
    ("bound local volume pins its pod", [sc("local", provisioner="kubernetes.io/no-provisioner"),
                                         pvc("data", klass="local", volume="pv-1", bound=True),
                                         pv("pv-1", klass="local", host="gpu-02", claim="data")],
     {"gpu-02"}, VolumeReason.NODE_CONFLICT,
     "2 nodes (gpu-01, gpu-03) had volume node affinity conflict: claim ml/data is bound to volume pv-1, usable "
     "only where kubernetes.io/hostname In (gpu-02)"),
    ("bound zonal volume keeps its pod in the zone", [sc("fast"), pvc("data", volume="pv-z", bound=True),
                                                       pv("pv-z", zone="b", claim="data")],
     {"gpu-03"}, VolumeReason.NODE_CONFLICT, "usable only where topology.kubernetes.io/zone In (b)"),
    ("zone label of a bound volume (VolumeZone)", [sc("fast"), pvc("data", volume="pv-z", bound=True),
                                                    pv("pv-z", claim="data", zone_label="c__a")],
     {"gpu-01", "gpu-02"}, VolumeReason.NODE_CONFLICT, "topology.kubernetes.io/zone=c__a"),
    ("delayed claim with a static local volume", [sc("local", provisioner="kubernetes.io/no-provisioner"),
                                                 pvc("data", klass="local"), pv("pv-l", klass="local", host="gpu-03")],
     {"gpu-03"}, VolumeReason.NO_VOLUME,
     "2 nodes (gpu-01, gpu-02) didn't find available persistent volumes to bind: no available volume of class "
     "'local' for claim ml/data (10Gi, ReadWriteOnce), and its class cannot provision (no provisioner)"),
    ("static volume too small", [sc("local", provisioner="kubernetes.io/no-provisioner"),
                                 pvc("data", klass="local", size="20Gi"), pv("pv-l", klass="local", host="gpu-03")],
     set(), VolumeReason.NO_VOLUME, "3 nodes (gpu-01, gpu-02, gpu-03) didn't find available persistent volumes to bind"),
    ("static volume of the wrong access mode", [sc("local", provisioner="kubernetes.io/no-provisioner"),
                                                pvc("data", klass="local", modes=("ReadWriteMany",)),
                                                pv("pv-l", klass="local", host="gpu-03")],
     set(), VolumeReason.NO_VOLUME, "(10Gi, ReadWriteMany)"),
    ("static volume claimed by another claim", [sc("local", provisioner="kubernetes.io/no-provisioner"),
                                                pvc("data", klass="local"),
                                                pv("pv-l", klass="local", host="gpu-03", claim="theirs")],
     set(), VolumeReason.NO_VOLUME, "3 nodes"),
    ("class provisions only in its allowed topologies", [sc("fast", zones=["a"]), pvc("data")],
     {"gpu-01", "gpu-02"}, VolumeReason.NO_VOLUME, "its class's allowedTopologies exclude them"),
    ("a claim's selected node is the only node for it", [sc("fast"), pvc("data", selected="gpu-02")],
     {"gpu-02"}, VolumeReason.SELECTED_ELSEWHERE, "claim ml/data has selected node gpu-02"),
    ("a ReadWriteOnce claim in use is where its user runs", [sc("fast"), pvc("data", volume="pv-1", bound=True),
                                                             pv("pv-1", claim="data")],
     {"gpu-03"}, VolumeReason.IN_USE_ELSEWHERE, "claim ml/data is ReadWriteOnce and in use on gpu-03"),
]


@pytest.mark.parametrize("case,objs,allowed,reason,words", PLACED, ids=[c[0] for c in PLACED])
def test_a_pods_volumes_limit_the_nodes_it_may_use(case, objs, allowed, reason, words):
    users = {"ml/data": ("ml/running", "gpu-03")} if "in use" in case else None
    s = storage(*objs, users=users)
    result, _ = fit(pod("p", "data"), s)
    assert result.eligible == frozenset(allowed)
    assert reason in result.excluded
    assert words in result.explain(s)


def csidriver(name: str = "csi.example.com", capacity: bool | None = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"attachRequired": True}
    if capacity is not None:
        spec["storageCapacity"] = capacity
    return {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": name}, "spec": spec}


def cap(name: str, zone: str, capacity: str, maximum: str | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": name, "namespace": "kube-system"}, "storageClassName": "fast",
                           "nodeTopology": {"matchLabels": {ZONE: zone}}, "capacity": capacity}
    if maximum:
        obj["maximumVolumeSize"] = maximum
    return obj


def test_storage_capacity_keeps_a_delayed_claim_where_there_is_room():
    # zone a has 100Gi in all but no volume over 5Gi; zone b has 50Gi
    s = storage(sc("fast"), pvc("data"), capacities=[cap("a", "a", "100Gi", maximum="5Gi"), cap("b", "b", "50Gi")],
                drivers=[csidriver()])
    result, _ = fit(pod("p", "data"), s)
    assert result.eligible == frozenset({"gpu-03"})
    assert result.explain(s) == ("2 nodes (gpu-01, gpu-02) did not have enough free storage: claim ml/data asks 10Gi "
                                 "of class 'fast'; no CSIStorageCapacity serving these nodes has room")


@pytest.mark.parametrize("driver, allowed", [
    # the driver asks schedulers to check capacity: only zone b has room, and a node no
    # CSIStorageCapacity serves has none (as kube-scheduler)
    (csidriver(capacity=True), {"gpu-03"}),
    # it does not (false, or left out: the API's default), or there is no CSIDriver object: the
    # CSIStorageCapacities are not asked, and the class may provision anywhere
    (csidriver(capacity=False), None),
    (csidriver(capacity=None), None),
    (None, None),
    # another driver's flag says nothing about this class's
    (csidriver("other.example.com"), None),
])
def test_capacity_is_checked_only_for_a_driver_whose_csidriver_says_storage_capacity(driver, allowed):
    s = storage(sc("fast"), pvc("data"), capacities=[cap("a", "a", "1Gi"), cap("b", "b", "50Gi")],
                drivers=[driver] if driver else [])
    result, _ = fit(pod("p", "data"), s)
    assert result.eligible == (frozenset(allowed) if allowed is not None else None)
    s = storage(sc("fast"), pvc("data"), drivers=[driver] if driver else [])  # no CSIStorageCapacity at all
    result, _ = fit(pod("p", "data"), s)
    assert result.eligible == (frozenset() if allowed is not None else None)


def test_the_index_reads_csidrivers_from_their_informer():
    from usher.engine.backends.kube.volumes import StorageKind, VolumeIndex
    index = VolumeIndex()
    index.object_changed(StorageKind.CLASSES, "fast", sc("fast"))
    index.object_changed(StorageKind.CLAIMS, "ml/data", pvc("data"))
    index.object_changed(StorageKind.CAPACITIES, "kube-system/b", cap("b", "b", "50Gi"))
    index.pod_changed("ml/p", pod("p", "data"))
    assert index.fit("ml/p", nodes(), 1).eligible is None
    index.object_changed(StorageKind.DRIVERS, "csi.example.com", csidriver())
    assert index.fit("ml/p", nodes(), 1).eligible == frozenset({"gpu-03"})
    index.object_changed(StorageKind.DRIVERS, "csi.example.com", None)
    assert index.fit("ml/p", nodes(), 1).eligible is None


def test_a_drivers_attach_limit_closes_a_full_node():
    csinode = {"metadata": {"name": "gpu-01"}, "spec": {"drivers": [{"name": "csi.example.com", "nodeID": "gpu-01",
                                                                       "allocatable": {"count": 1}}]}}
    s = storage(sc("fast"), pvc("data"), pvc("old", volume="pv-old", bound=True), pv("pv-old", claim="old",
                driver="csi.example.com"), csinodes=[csinode], users={"ml/old": ("ml/running", "gpu-01")})
    result, _ = fit(pod("p", "data"), s)
    assert result.eligible == frozenset({"gpu-02", "gpu-03"})
    assert result.excluded == {VolumeReason.ATTACH_LIMIT: 1}
    assert "1 node (gpu-01) exceed max volume count: claim ml/data would take its driver past" in result.explain(s)


def test_a_gangs_pods_on_one_node_are_counted_together_against_the_attach_limit():
    # each pod alone fits gpu-01 (limit 2, one volume attached there); two pods together bring
    # two more volumes of the driver, three in all
    csinode = {"metadata": {"name": "gpu-01"}, "spec": {"drivers": [{"name": "csi.example.com", "nodeID": "gpu-01",
                                                                       "allocatable": {"count": 2}}]}}
    s = storage(sc("fast"), pvc("a"), pvc("b"), pvc("old", volume="pv-old", bound=True),
                pv("pv-old", claim="old", driver="csi.example.com"), csinodes=[csinode],
                users={"ml/old": ("ml/running", "gpu-01")})
    assert all(fit(pod(n, c), s)[0].eligible is None or "gpu-01" in fit(pod(n, c), s)[0].eligible
               for n, c in (("w-0", "a"), ("w-1", "b")))
    refused = plan(placed(s, {"gpu-01": ("a",), "gpu-01#2": ("b",)}), s)
    assert refused.reason == VolumeReason.ATTACH_LIMIT
    assert (refused.pod, refused.node) == ("ml/w-1", "gpu-01")
    assert ("pods ml/w-0, ml/w-1 of the gang, placed together on node gpu-01, would use 3 volumes of CSI driver "
            "csi.example.com there, and its CSINode allows 2") in refused.message
    # apart they fit; a claim both pods share is one volume, counted once
    assert plan(placed(s, {"gpu-01": ("a",), "gpu-02": ("b",)}), s).provisions == (("ml/a", "gpu-01"), ("ml/b", "gpu-02"))
    shared = storage(sc("fast"), pvc("a", modes=("ReadWriteMany",)), csinodes=[csinode])
    assert plan(placed(shared, {"gpu-01": ("a",), "gpu-01#2": ("a",), "gpu-01#3": ("a",)}), shared).provisions == (
        ("ml/a", "gpu-01"),)


def test_a_pod_without_claims_may_go_anywhere():
    result, claims = fit(pod("p"), storage(sc("fast")))
    assert claims.free and result.eligible is None and result.explain(Storage()) is None


# -- the gang's PreBind ---------------------------------------------------------------------


def placed(s: Storage, where: dict[str, tuple[str, ...]], ephemeral: bool = False) -> list[Placed]:
    out = []
    for i, (node, claims) in enumerate(where.items()):
        name = f"w-{i}"
        vols, _ = pod_volumes(pod(name, *claims))
        node_name = node.split("#")[0]
        out.append(Placed(f"ml/{name}", sort_claims(f"ml/{name}", f"uid-{name}", vols, s), node_name,
                          labels()[node_name]))
    return out


def test_a_gangs_delayed_claims_are_provisioned_each_on_its_pods_node():
    s = storage(sc("fast"), *(pvc(f"ckpt-{i}") for i in range(4)))
    p = plan(placed(s, {"gpu-01": ("ckpt-0",), "gpu-02": ("ckpt-1",), "gpu-03": ("ckpt-2",), "gpu-01#2": ("ckpt-3",)}), s)
    assert p.provisions == (("ml/ckpt-0", "gpu-01"), ("ml/ckpt-1", "gpu-02"), ("ml/ckpt-2", "gpu-03"),
                            ("ml/ckpt-3", "gpu-01"))
    assert p.bindings == ()
    assert len(p.waits) == 4


def test_static_volumes_are_chosen_once_and_a_shared_read_write_many_claim_is_provisioned_once():
    s = storage(sc("local", provisioner="kubernetes.io/no-provisioner"), pvc("a", klass="local"),
                pvc("b", klass="local"), pv("pv-1", klass="local", host="gpu-01"),
                pv("pv-2", klass="local", host="gpu-01", size="20Gi"), sc("shared"),
                pvc("dataset", klass="shared", modes=("ReadWriteMany",)))
    p = plan(placed(s, {"gpu-01": ("a", "dataset"), "gpu-01#2": ("b", "dataset")}), s)
    assert p.bindings == (("ml/a", "pv-1"), ("ml/b", "pv-2"))
    assert p.provisions == (("ml/dataset", "gpu-01"),)


def test_a_read_write_once_claim_shared_by_pods_on_two_nodes_is_refused():
    s = storage(sc("fast"), pvc("shared"))
    p = plan(placed(s, {"gpu-01": ("shared",), "gpu-02": ("shared",)}), s)
    assert p.reason == VolumeReason.SHARED_APART
    assert "claim ml/shared is ReadWriteOnce and shared by pods ml/w-0, ml/w-1" in p.message
    # on one node it is fine
    ok = plan(placed(s, {"gpu-01": ("shared",), "gpu-01#2": ("shared",)}), s)
    assert ok.provisions == (("ml/shared", "gpu-01"),)


def bind(s: Storage, name: str, node: str, zone: str | None = None) -> None:
    """What the provisioner and the PV controller do for a claim selected on ``node``."""
    claim = parse_claim(pvc(name, volume=f"pv-{name}", bound=True, selected=node))
    s.claims[claim.key] = claim
    v, _ = parse_volume(pv(f"pv-{name}", claim=name, host=None if zone else node, zone=zone))
    s.volumes[v.name] = v
    s.changed()


def select(s: Storage, p) -> None:
    """What PreBind writes: the selected node on each claim to provision."""
    for key, node in p.provisions:
        name = key.split("/")[1]
        s.claims[key] = parse_claim(pvc(name, selected=node))
    s.changed()


def test_prebind_waits_for_every_claim_then_is_done():
    s = storage(sc("fast"), pvc("c0"), pvc("c1"))
    p = plan(placed(s, {"gpu-01": ("c0",), "gpu-02": ("c1",)}), s)
    select(s, p)
    step = progress(p, s, labels(), waited=1, timeout=600)
    assert step.step == Step.WAIT
    assert step.blocker.message.startswith("waiting for provisioning of pvc/c0 on node gpu-01 (and 1 other claim)")
    bind(s, "c0", "gpu-01")
    assert progress(p, s, labels(), 2, 600).blocker.message.startswith("waiting for provisioning of pvc/c1 on node gpu-02;")
    bind(s, "c1", "gpu-02")
    assert progress(p, s, labels(), 3, 600).step == Step.DONE
    assert undo(p, s) == ()


def test_a_withdrawn_selected_node_fails_the_prebind_with_the_provisioners_message():
    s = storage(sc("fast"), pvc("c0"), pvc("c1"))
    p = plan(placed(s, {"gpu-01": ("c0",), "gpu-02": ("c1",)}), s)
    select(s, p)
    bind(s, "c0", "gpu-01")
    s.claims["ml/c1"] = parse_claim(pvc("c1"))  # the provisioner withdrew gpu-02
    s.changed()
    step = progress(p, s, labels(), 5, 600, {"ml/c1": "out of space on pool-b"})
    assert step.step == Step.FAIL and step.blocker.reason == VolumeReason.PROVISIONING_FAILED
    assert step.blocker.message.startswith("provisioning failed for pvc/c1 on node gpu-02: out of space on pool-b;")
    assert step.blocker.claim == "ml/c1"
    assert undo(p, s) == ()  # nothing left selected: c0 is bound and pins the next placement
    again, _ = fit(pod("w-0", "c0"), s)
    assert again.eligible == frozenset({"gpu-01"})


def test_a_prebind_past_its_bound_fails_and_undoes_what_was_not_acted_on():
    s = storage(sc("fast"), pvc("c0"), pvc("c1"))
    p = plan(placed(s, {"gpu-01": ("c0",), "gpu-02": ("c1",)}), s)
    select(s, p)
    bind(s, "c0", "gpu-01")
    step = progress(p, s, labels(), 600, 600)
    assert step.step == Step.FAIL and step.blocker.reason == VolumeReason.BINDING_TIMED_OUT
    assert step.blocker.message.startswith("pvc/c1 was not bound on node gpu-02 within 600 s")
    assert undo(p, s) == ("ml/c1",)
    assert leftovers(["ml/c0", "ml/c1"], s) == ("ml/c1",)


def test_a_claim_bound_to_a_volume_its_pod_cannot_use_fails_the_prebind():
    s = storage(sc("fast"), pvc("c0"))
    p = plan(placed(s, {"gpu-01": ("c0",)}), s)
    select(s, p)
    bind(s, "c0", "gpu-01", zone="b")  # provisioned in the wrong zone
    step = progress(p, s, labels(), 1, 600)
    assert step.step == Step.FAIL and step.blocker.reason == VolumeReason.NODE_CONFLICT
    assert "not on node gpu-01" in step.blocker.message


def test_a_gang_whose_claims_are_all_bound_has_nothing_to_prebind():
    s = storage(sc("fast"), pvc("c0", volume="pv-c0", bound=True), pv("pv-c0", claim="c0"))
    assert plan(placed(s, {"gpu-01": ("c0",)}), s).empty
    assert plan(placed(s, {"gpu-01": ()}), s).empty


def test_the_index_follows_informer_events_for_claims_volumes_and_pods():
    from usher.engine.backends.kube.volumes.index import StorageKind, VolumeIndex

    index = VolumeIndex()
    index.object_changed(StorageKind.CLASSES, "fast", sc("fast"))
    index.pod_changed("ml/w-0", pod("w-0", "data"))
    assert index.fit("ml/w-0", nodes(), 1).blockers[0].reason == VolumeReason.CLAIM_NOT_FOUND
    index.object_changed(StorageKind.CLAIMS, "ml/data", pvc("data", volume="pv-1", bound=True))
    index.object_changed(StorageKind.VOLUMES, "pv-1", pv("pv-1", host="gpu-02", claim="data"))
    assert index.fit("ml/w-0", nodes(), 1).eligible == frozenset({"gpu-02"})
    # a second pod that runs on gpu-02 with the same ReadWriteOnce claim: the first must go there too
    index.pod_changed("ml/w-1", {**pod("w-1", "data"), "spec": {**pod("w-1", "data")["spec"], "nodeName": "gpu-02"}})
    assert index.storage.users["ml/data"] == {"ml/w-0": None, "ml/w-1": "gpu-02"}
    index.pod_changed("ml/w-1", None)
    assert index.storage.users["ml/data"] == {"ml/w-0": None}
    index.object_changed(StorageKind.VOLUMES, "pv-1", None)
    assert index.fit("ml/w-0", nodes(), 1).blockers[0].reason == VolumeReason.VOLUME_NOT_FOUND
    assert index.fit("ml/nobody", nodes(), 1).eligible is None


OUTCOMES = ("bound-here", "bound-elsewhere", "withdrawn", "nothing", "deleted")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(OUTCOMES), min_size=1, max_size=5), st.floats(0, 1200))
def test_a_prebind_is_done_only_when_every_claim_of_the_gang_is_bound_where_its_pod_runs(outcomes, waited):
    """Whatever the provisioner does to each claim, the pods may bind (DONE) only when every claim
    is bound to a volume their node can use; any failure leaves nothing selected that was not
    acted on (so no claim is provisioned for a gang that will not bind there)."""
    names = [f"c{i}" for i in range(len(outcomes))]
    s = storage(sc("fast"), *(pvc(n) for n in names))
    where = {f"gpu-0{1 + i % 2}#{i}": (n,) for i, n in enumerate(names)}
    p = plan(placed(s, where), s)
    select(s, p)
    for (key, node), outcome in zip(p.provisions, outcomes):
        name = key.split("/")[1]
        if outcome == "bound-here":
            bind(s, name, node)
        elif outcome == "bound-elsewhere":
            bind(s, name, node, zone="b")
        elif outcome == "withdrawn":
            s.claims[key] = parse_claim(pvc(name))
        elif outcome == "deleted":
            del s.claims[key]
    s.changed()
    step = progress(p, s, labels(), waited, 600)
    all_good = all(o == "bound-here" for o in outcomes)
    assert (step.step == Step.DONE) == all_good
    if step.step == Step.FAIL:
        assert step.blocker.claim in {k for k, _ in p.provisions}
        left = undo(p, s)
        assert all(s.claims[k].selected_node and not s.claims[k].bound for k in left)
        assert set(left) == {k for (k, _), o in zip(p.provisions, outcomes) if o == "nothing"}
    if step.step == Step.WAIT:
        assert waited < 600 and "nothing" in outcomes


_CAP_NODES = {f"gpu-{i:02d}": ("a" if i < 3 else "b") for i in range(6)}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["host", "zone", "zone-expr", "none", "all"]), st.integers(0, 5),
                          st.integers(0, 40), st.booleans()), max_size=12),
       st.integers(1, 40))
def test_property_capacity_by_label_lookup_answers_as_trying_every_capacity(caps, request):
    """``Storage.room_on`` looks capacities up by the labels they select on; it must say what
    trying each CSIStorageCapacity against the node says, for capacities per node, per zone, by
    expression, with no topology or selecting every node, and with or without a maximum size."""
    objs = []
    for i, (kind, n, gib, with_max) in enumerate(caps):
        node = f"gpu-{n:02d}"
        topology = {"host": {"matchLabels": {HOST: node}}, "zone": {"matchLabels": {ZONE: _CAP_NODES[node]}},
                    "zone-expr": {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [_CAP_NODES[node]]}]},
                    "none": None, "all": {}}[kind]
        obj = {"metadata": {"name": f"c{i}", "namespace": "kube-system"}, "storageClassName": "fast",
               "capacity": f"{gib}Gi"}
        if topology is not None:
            obj["nodeTopology"] = topology
        if with_max:
            obj["maximumVolumeSize"] = f"{max(0, gib - 3)}Gi"
        objs.append(obj)
    s = storage(sc("fast"), capacities=objs, drivers=[csidriver(capacity=True)])
    cls = s.classes["fast"]
    for node, zone in _CAP_NODES.items():
        labels = {HOST: node, ZONE: zone}
        tried = any(c.serves(labels) and (c.room() or 0) >= request * 2**30 for c in s.tracks_capacity(cls))
        assert (s.room_on(cls, labels) >= request * 2**30) == tried

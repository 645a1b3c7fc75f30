"""usher's reading of Dynamic Resource Allocation (issue 35), without a server: a pod's claims
as GPUs, nodes and problems; CEL selectors; the devices chosen for a placement."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from usher.engine.backends.kube.dra import DraIndex, DraKind, choose, parse_claim_spec
from usher.engine.backends.kube.dra.plan import Placed, plan, undo_patch, write_patch
from usher.engine.backends.kube.dra_pods import node_with_devices, with_claims
from usher.engine.backends.kube.objects import pod_view

GPU_CLASS_SELECTOR = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"


def device(i: int, product: str = "NVIDIA H100 80GB HBM3", memory: str = "80Gi", island: int = 0) -> dict[str, Any]:
    return {"name": f"gpu-{i}", "attributes": {
        "type": {"string": "gpu"}, "productName": {"string": product}, "index": {"int": i}, "minor": {"int": i},
        "uuid": {"string": f"GPU-{i:08d}"}, "nvlinkIsland": {"int": island}},
        "capacity": {"memory": {"value": memory}}}


def slice_of(node: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-gpu.nvidia.com"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node, "pool": {"name": node, "generation": 1,
                                                                           "resourceSliceCount": 1}, "devices": devices}}


def gpu_class() -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression": GPU_CLASS_SELECTOR}}]}}


def claim_spec(count: int = 2, klass: str = "gpu.nvidia.com", selectors: tuple[str, ...] = (), **exact: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": klass, "count": count, **exact}
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"devices": {"requests": [{"name": "gpus", "exactly": body}]}}


def template(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"spec": spec}}


def claim(name: str, spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}, "spec": spec, "status": status or {}}


def pod(name: str = "w-0", template_name: str | None = "two", made: str | None = None, claim_name: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": "gpus"}
    if claim_name:
        entry["resourceClaimName"] = claim_name
    else:
        entry["resourceClaimTemplateName"] = template_name
    status: dict[str, Any] = {"phase": "Pending"}
    if made:
        status["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": made}]
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": {"usher/queue": "research"}},
            "spec": {"schedulerName": "usher", "resourceClaims": [entry],
                     "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpus"}]}}]},
            "status": status}


def index(*nodes: tuple[str, list[dict[str, Any]]]) -> DraIndex:
    ix = DraIndex()
    ix.object_changed(DraKind.CLASS, "gpu.nvidia.com", gpu_class())
    for node, devices in nodes:
        ix.object_changed(DraKind.SLICE, f"{node}-gpu.nvidia.com", slice_of(node, devices))
    return ix


def eight(node: str, product: str = "NVIDIA H100 80GB HBM3") -> tuple[str, list[dict[str, Any]]]:
    return node, [device(i, product, island=i // 4) for i in range(8)]


def test_a_claim_made_from_a_template_asks_its_gpus_of_the_pod():
    ix = index(eight("gpu-1"))
    ix.object_changed(DraKind.TEMPLATE, "default/two", template("two", claim_spec(2)))
    ix.object_changed(DraKind.CLAIM, "default/w-0-gpus-abc", claim("w-0-gpus-abc", claim_spec(2)))
    view = with_claims(pod_view(pod(made="w-0-gpus-abc")), ix.ask(pod(made="w-0-gpus-abc")))
    assert view.gpu_milli == 2000
    assert view.problem is None
    assert view.claim_nodes == frozenset({"gpu-1"})


def test_a_pod_whose_claim_is_not_made_yet_waits_saying_so():
    ix = index(eight("gpu-1"))
    ix.object_changed(DraKind.TEMPLATE, "default/two", template("two", claim_spec(2)))
    view = with_claims(pod_view(pod()), ix.ask(pod()))
    assert view.gpu_milli == 2000
    assert view.problem is None  # nothing is wrong: it waits
    assert view.claims_waiting == ("claim gpus (spec.resourceClaims[0]) is still to be created from ResourceClaimTemplate "
                                   "default/two by the cluster's resourceclaim controller")


def test_a_missing_template_or_claim_is_named():
    ix = index(eight("gpu-1"))
    assert ix.ask(pod()).problems == (
        "spec.resourceClaims[0].resourceClaimTemplateName: ResourceClaimTemplate default/two not found",)
    assert ix.ask(pod(claim_name="shared")).problems == ("spec.resourceClaims[0]: ResourceClaim default/shared not found",)


def test_another_device_class_is_refused_with_its_field_path():
    ix = index(eight("gpu-1"))
    ix.object_changed(DraKind.CLAIM, "default/nic", claim("nic", claim_spec(1, klass="rdma.example.com")))
    ask = ix.ask(pod(claim_name="nic"))
    assert ask.problems == ("ResourceClaim default/nic spec.devices.requests[0].exactly.deviceClassName: usher allocates "
                            "only devices of DeviceClass gpu.nvidia.com, not 'rdma.example.com'",)


def test_fields_usher_does_not_implement_are_refused_not_ignored():
    spec = claim_spec(2, adminAccess=True)
    spec["devices"]["constraints"] = [{"requests": ["gpus"], "distinctAttribute": "gpu.nvidia.com/nvlinkIsland",
                                       "matchAttribute": "gpu.nvidia.com/nvlinkIsland"}]
    parsed = parse_claim_spec(spec, "ResourceClaim default/x spec")
    assert parsed.problems == (
        "ResourceClaim default/x spec.devices.constraints[0]: exactly one of matchAttribute and distinctAttribute, not both",
    )
    assert parsed.requests[0].admin
    first = {"devices": {"requests": [{"name": "g", "firstAvailable": [
        {"name": "a", "deviceClassName": "gpu.nvidia.com", "count": 8},
        {"name": "b", "deviceClassName": "gpu.nvidia.com", "count": 4}]}]}}
    assert parse_claim_spec(first, "ResourceClaim default/y spec").problems == (
        "ResourceClaim default/y spec.devices.requests[0].firstAvailable: usher implements alternatives only when "
        "each asks the same count of devices (here 8, 4): it counts a pod's GPUs in quota and placement once, "
        "whatever node it lands on",)


def test_a_selector_narrows_the_nodes_to_those_with_devices_enough_that_match():
    ix = index(eight("gpu-1"), eight("gpu-2", "NVIDIA A100-SXM4-40GB"))
    ix.object_changed(DraKind.CLAIM, "default/c", claim("c", claim_spec(
        4, selectors=("device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')",))))
    ask = ix.ask(pod(claim_name="c"))
    assert ask.problems == ()
    assert (ask.gpus, ask.nodes) == (4, frozenset({"gpu-1"}))
    assert "only 1 node(s) publish gpu.nvidia.com devices enough that match its claims' requests gpus (4)" in ask.exclusions


def test_a_node_whose_slice_is_published_again_with_other_devices_is_judged_on_them():
    """Selector verdicts are kept per device between reads, and forgotten when a slice changes:
    a node whose driver republishes its GPUs as A100s no longer serves a claim for H100s, and
    a runtime error is said again on every read, not only the first."""
    ix = index(eight("gpu-1"), eight("gpu-2"))
    ix.object_changed(DraKind.CLAIM, "default/c", claim("c", claim_spec(
        4, selectors=("device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')",))))
    assert ix.ask(pod(claim_name="c")).nodes == frozenset({"gpu-1", "gpu-2"})
    _, devices = eight("gpu-2", "NVIDIA A100-SXM4-40GB")
    ix.object_changed(DraKind.SLICE, "gpu-2-gpu.nvidia.com", slice_of("gpu-2", devices))
    assert ix.ask(pod(claim_name="c")).nodes == frozenset({"gpu-1"})
    ix.object_changed(DraKind.CLAIM, "default/c", claim("c", claim_spec(2, selectors=("device.attributes['gpu.nvidia.com'].nope == 1",))))
    assert ix.ask(pod(claim_name="c")).problems == ix.ask(pod(claim_name="c")).problems != ()


def _devices_from_scratch(slices: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """Each node's GPUs read from every slice at once: the newest generation of each pool."""
    newest: dict[str, int] = {}
    for obj in slices.values():
        pool = obj["spec"]["pool"]
        newest[pool["name"]] = max(newest.get(pool["name"], 0), pool["generation"])
    out: dict[str, list[str]] = {}
    for obj in slices.values():
        if obj["spec"]["pool"]["generation"] == newest[obj["spec"]["pool"]["name"]]:
            names = out.setdefault(obj["spec"]["nodeName"], [])
            names.extend(d["name"] for d in obj["spec"]["devices"] if d["name"] not in names)
    return {n: sorted(names, key=lambda d: int(d.split("-")[1])) for n, names in out.items() if names}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["n1", "n2", "n3"]), st.sampled_from(["p1", "p2", "n1"]),
                          st.integers(1, 3), st.lists(st.integers(0, 7), max_size=4, unique=True), st.booleans()),
                max_size=25))
def test_property_each_nodes_devices_follow_its_slices_event_by_event(events):
    """Slices published, replaced in a new pool generation and withdrawn in any order: after each
    event every node's GPUs are those of its pools' newest generation, as read from scratch."""
    ix = index()
    live: dict[str, dict[str, Any]] = {}
    for n, node, pool, generation, gpus, deleted in events:
        key = f"s{n}"
        if deleted:
            live.pop(key, None)
            ix.object_changed(DraKind.SLICE, key, None)
        else:
            obj = slice_of(node, [device(i) for i in gpus])
            obj["metadata"]["name"] = key
            obj["spec"]["pool"] = {"name": pool, "generation": generation, "resourceSliceCount": 1}
            live[key] = obj
            ix.object_changed(DraKind.SLICE, key, obj)
        assert {n: [d.name for d in ds] for n, ds in ix.devices.items()} == _devices_from_scratch(live)


def test_claims_that_share_a_broken_selector_are_each_told_at_their_own_path():
    """Verdicts and fits are kept by what claims ask, so the pods of one template share them;
    the error each pod is shown still names its own claim."""
    ix = index(eight("gpu-1"))
    for expression in ("device.attributes['gpu.nvidia.com'].nope == 1", "device.attributes["):
        for name in ("a", "b"):
            ix.object_changed(DraKind.CLAIM, f"default/{name}", claim(name, claim_spec(2, selectors=(expression,))))
        for name in ("a", "b"):
            (problem,) = ix.ask(pod(claim_name=name)).problems
            assert problem.startswith(f"claim default/{name}, request gpus: ResourceClaim default/{name} spec.devices."), problem


def test_a_claim_change_is_read_again_by_the_pods_that_use_it_only():
    ix = index(eight("gpu-1"))
    ix.object_changed(DraKind.TEMPLATE, "default/two", template("two", claim_spec(2)))
    for p in (pod("w-0", made="w-0-gpus-a"), pod("w-1", made="w-1-gpus-b"), pod("s-0", claim_name="shared")):
        ix.pod_changed(f"default/{p['metadata']['name']}", p)
    made = claim("w-0-gpus-a", claim_spec(2))
    made["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "w-0", "uid": "uid-w-0", "controller": True}]
    assert set(ix.readers(DraKind.CLAIM, "default/w-0-gpus-a", made)) == {"default/w-0"}
    assert set(ix.readers(DraKind.CLAIM, "default/shared", claim("shared", claim_spec(2)))) == {"default/s-0"}
    assert set(ix.readers(DraKind.SLICE, "gpu-1-gpu.nvidia.com", slice_of("gpu-1", []))) == {"default/w-0", "default/w-1", "default/s-0"}


H100_FIRST = ("device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')",
              "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100')")


def first_available(count: int = 4) -> dict[str, Any]:
    """A request for ``count`` H100s, or else as many A100s (firstAvailable)."""
    return {"devices": {"requests": [{"name": "gpus", "firstAvailable": [
        {"name": name, "deviceClassName": "gpu.nvidia.com", "count": count, "selectors": [{"cel": {"expression": e}}]}
        for name, e in zip(("h100", "a100"), H100_FIRST)]}]}}


def test_first_available_lets_any_alternative_serve_a_node_and_gives_the_first_it_can():
    """firstAvailable: a node of either model may take the pod; on each, the first alternative
    its devices can serve is given, and the allocation names the subrequest."""
    ix = index(eight("gpu-1"), eight("gpu-2", "NVIDIA A100-SXM4-40GB"), eight("gpu-3", "NVIDIA L4"))
    ix.object_changed(DraKind.CLAIM, "default/c", claim("c", first_available(4)))
    ask = ix.ask(pod(claim_name="c"))
    assert ask.problems == ()
    assert (ask.gpus, ask.nodes) == (4, frozenset({"gpu-1", "gpu-2"}))
    for node, given in (("gpu-1", "gpus/h100"), ("gpu-2", "gpus/a100")):
        chosen = choose(ix, ix.ask(pod(claim_name="c")).claims[0].spec.requests, ix.devices[node], [0, 1, 2, 3], set())
        assert chosen is not None and list(chosen) == [given] and len(chosen[given]) == 4
    # with 6 of gpu-1's H100s held, it has no 4 free: no alternative serves it there
    assert choose(ix, ask.claims[0].spec.requests, ix.devices["gpu-1"], [], {f"gpu-{i}" for i in range(6)}) is None


def test_a_capacity_selector_compares_quantities():
    ix = index(eight("gpu-1"), ("gpu-2", [device(i, memory="40Gi") for i in range(8)]))
    ix.object_changed(DraKind.CLAIM, "default/c", claim("c", claim_spec(
        1, selectors=("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('64Gi')) >= 0",))))
    assert ix.ask(pod(claim_name="c")).nodes == frozenset({"gpu-1"})


def test_a_broken_selector_names_the_claim_the_request_and_the_cel_error():
    ix = index(eight("gpu-1"))
    ix.object_changed(DraKind.CLAIM, "default/c", claim("c", claim_spec(2, selectors=("device.attributes[",))))
    (problem,) = ix.ask(pod(claim_name="c")).problems
    assert problem.startswith("claim default/c, request gpus: ResourceClaim default/c "
                              "spec.devices.requests[0].exactly.selectors[0].cel.expression: compilation failed: ")
    ix.object_changed(DraKind.CLAIM, "default/c", claim("c", claim_spec(2, selectors=("device.attributes['gpu.nvidia.com'].nope == 1",))))
    (problem,) = ix.ask(pod(claim_name="c")).problems
    assert "CEL runtime error on device gpu-0 of node gpu-1" in problem and "nope" in problem
    ix.object_changed(DraKind.CLAIM, "default/c", claim("c", claim_spec(2, selectors=("1 + 1",))))
    (problem,) = ix.ask(pod(claim_name="c")).problems
    assert problem.endswith("the expression must give a bool, not IntType")


def test_all_asks_every_matching_device_of_a_node():
    ix = index(eight("gpu-1"), ("gpu-2", [device(i) for i in range(4)]))
    ix.object_changed(DraKind.CLAIM, "default/c", claim("c", claim_spec(0, allocationMode="All")))
    spec = claim_spec(1)
    spec["devices"]["requests"][0]["exactly"] = {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}
    ix.object_changed(DraKind.CLAIM, "default/c", claim("c", spec))
    ask = ix.ask(pod(claim_name="c"))
    assert (ask.gpus, ask.nodes) == (8, frozenset({"gpu-1"}))


def test_choose_gives_the_placed_gpus_and_swaps_one_a_selector_excludes():
    ix = index(("gpu-1", [device(i, "NVIDIA H100 80GB HBM3" if i != 2 else "NVIDIA A100") for i in range(8)]))
    spec = parse_claim_spec(claim_spec(2, selectors=("device.attributes['gpu.nvidia.com'].productName.contains('H100')",)), "c")
    got = choose(ix, spec.requests, ix.devices["gpu-1"], [4, 5], set())
    assert [d.name for d in got["gpus"]] == ["gpu-4", "gpu-5"]
    got = choose(ix, spec.requests, ix.devices["gpu-1"], [2, 3], set())
    assert [d.name for d in got["gpus"]] == ["gpu-3", "gpu-0"]
    assert choose(ix, spec.requests, ix.devices["gpu-1"], [4, 5], {f"gpu-{i}" for i in range(8) if i != 4}) is None


def test_a_node_without_the_device_plugin_has_the_gpus_its_slices_publish():
    ix = index(eight("gpu-1"))
    node = {"metadata": {"name": "gpu-1", "annotations": {"usher/nvlink": "0,1,2,3;4,5,6,7"}},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi"}}}
    view = node_with_devices(node, ix)
    assert view.gpus == 8
    assert view.islands == [[0, 1, 2, 3], [4, 5, 6, 7]]


# -- the bind path's plan -------------------------------------------------------------------------

def _gang_index(n: int = 4, count: int = 2) -> DraIndex:
    ix = index(eight("gpu-1"), eight("gpu-2"))
    for i in range(n):
        ix.object_changed(DraKind.CLAIM, f"default/w-{i}-gpus", claim(f"w-{i}-gpus", claim_spec(count)))
        ix.pod_changed(f"default/w-{i}", pod(f"w-{i}", made=f"w-{i}-gpus"))
    return ix


def test_the_plan_gives_every_claim_of_the_gang_the_placed_gpus_and_reserves_it_for_its_pod():
    ix = _gang_index()
    placed = [Placed(f"default/w-{i}", f"w-{i}", "default", f"uid-w-{i}", f"gpu-{1 + i // 2}", ((i % 2) * 4 + 2, (i % 2) * 4 + 3))
              for i in range(4)]
    the_plan = plan(ix, placed)
    assert not isinstance(the_plan, str)
    assert [w.claim for w in the_plan.writes] == [f"default/w-{i}-gpus" for i in range(4)]
    first = write_patch(the_plan.writes[0])
    assert first["status"]["allocation"]["devices"]["results"] == [
        {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gpu-1", "device": "gpu-2"},
        {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gpu-1", "device": "gpu-3"}]
    assert first["status"]["allocation"]["nodeSelector"] == {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}]}
    assert first["status"]["reservedFor"] == [{"resource": "pods", "name": "w-0", "uid": "uid-w-0"}]
    assert dict(the_plan.gpus)["default/w-1"] == (6, 7)


def test_the_plan_never_gives_a_device_twice():
    ix = _gang_index(n=2, count=4)
    # another claim already holds gpu-0..3 of gpu-1; both pods were placed on the same GPUs
    ix.object_changed(DraKind.CLAIM, "default/other", claim("other", claim_spec(4), {"allocation": {
        "devices": {"results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gpu-1", "device": f"gpu-{i}"}
                                for i in range(4)]}, "nodeSelector": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}]}}}))
    placed = [Placed(f"default/w-{i}", f"w-{i}", "default", f"uid-w-{i}", "gpu-1", (0, 1, 2, 3)) for i in range(2)]
    assert plan(ix, placed) == "claim default/w-1-gpus: node gpu-1 has not devices enough free that match its requests"
    the_plan = plan(ix, placed[:1])
    assert dict(the_plan.gpus)["default/w-0"] == (4, 5, 6, 7)


def test_undo_takes_the_pod_out_and_frees_a_claim_nobody_reserves():
    reserved = claim("c", claim_spec(1), {"allocation": {"devices": {"results": []}},
                                          "reservedFor": [{"resource": "pods", "name": "a", "uid": "ua"},
                                                          {"resource": "pods", "name": "b", "uid": "ub"}]})
    reserved["metadata"]["resourceVersion"] = "7"
    assert undo_patch(reserved, {"ua"}) == {"metadata": {"resourceVersion": "7"}, "status": {
        "reservedFor": [{"resource": "pods", "name": "b", "uid": "ub"}]}}
    assert undo_patch(reserved, {"ua", "ub"}) == {"metadata": {"resourceVersion": "7"}, "status": {
        "reservedFor": None, "allocation": None}}
    assert undo_patch(reserved, {"uc"}) is None


def test_a_tainted_device_is_never_given():
    devices = [device(i) for i in range(8)]
    devices[0]["taints"] = [{"key": "gpu.nvidia.com/unhealthy", "value": "XID79", "effect": "NoSchedule"}]
    ix = index(("gpu-1", devices))
    spec = parse_claim_spec(claim_spec(2), "c")
    assert [d.name for d in choose(ix, spec.requests, ix.devices["gpu-1"], [0, 1], set())["gpus"]] == ["gpu-1", "gpu-2"]
    ix.object_changed(DraKind.CLAIM, "default/c", claim("c", claim_spec(8)))
    assert ix.ask(pod(claim_name="c")).nodes == frozenset()


def test_a_request_that_tolerates_a_devices_taint_may_be_given_it():
    """A burn-in test after an XID: its request tolerates the health monitor's taint (by key, or
    every taint), so the tainted GPU may be given; a toleration of another key or value does not."""
    devices = [device(i) for i in range(8)]
    devices[0]["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
    devices[1]["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "48", "effect": "None"}]  # says, keeps nobody off
    ix = index(("gpu-1", devices))
    first = "device.attributes['gpu.nvidia.com'].index == 0"
    for tolerations, given in (
        ([{"key": "gpu.nvidia.com/xid", "operator": "Exists"}], True),
        ([{"operator": "Exists"}], True),
        ([{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}], True),
        ([{"key": "gpu.nvidia.com/xid", "value": "48"}], False),
        ([{"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoExecute"}], False),
    ):
        spec = parse_claim_spec(claim_spec(1, selectors=(first,), tolerations=tolerations), "c")
        assert spec.problems == ()
        got = choose(ix, spec.requests, ix.devices["gpu-1"], [0], set())
        assert (got is not None and [d.name for d in got["gpus"]] == ["gpu-0"]) == given, tolerations
    bad = parse_claim_spec(claim_spec(1, tolerations=[{"operator": "Maybe"}, {"operator": {"a": 1}},
                                                      {"operator": "Exists", "tolerationSeconds": "soon"}]), "c")
    assert bad.problems == ("c.devices.requests[0].exactly.tolerations[0].operator: 'Maybe' is not one of Exists, Equal",
                            "c.devices.requests[0].exactly.tolerations[1].operator: {'a': 1} is not one of Exists, Equal",
                            "c.devices.requests[0].exactly.tolerations[2].tolerationSeconds: 'soon' is not a whole "
                            "number of seconds")
    # a NoExecute taint tolerated only for a while is not tolerated: the pod would be evicted then
    devices[0]["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoExecute"}]
    ix = index(("gpu-1", devices))
    for seconds, given in ((None, True), (60, False)):
        toleration = {"key": "gpu.nvidia.com/xid", "operator": "Exists",
                      **({"tolerationSeconds": seconds} if seconds is not None else {})}
        spec = parse_claim_spec(claim_spec(1, selectors=(first,), tolerations=[toleration]), "c")
        assert (choose(ix, spec.requests, ix.devices["gpu-1"], [0], set()) is not None) == given, seconds


def test_a_claim_allocated_for_nodes_usher_cannot_name_is_a_problem_not_allocated_again():
    """Another scheduler allocated a claim for every node of a rack (a nodeSelector by label, as a
    network-attached device's is): usher cannot say where such a pod would run, so the pod waits
    with the field; before, the claim read as unallocated and usher allocated it a second time."""
    ix = index(("gpu-1", [device(i) for i in range(8)]))
    allocation = {"devices": {"results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gpu-1", "device": "gpu-0"}]},
                  "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
                      {"key": "usher/rack", "operator": "In", "values": ["r1"]}]}]}}
    ix.object_changed(DraKind.CLAIM, "default/c", claim("c", claim_spec(1), {"allocation": allocation}))
    assert ix.ask(pod(claim_name="c")).problems == (
        "spec.resourceClaims[0]: ResourceClaim default/c is allocated for the nodes its allocation's nodeSelector "
        "picks, not for one named node; usher places pods only on claims allocated on one node",)
    allocation["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}]}
    ix.object_changed(DraKind.CLAIM, "default/c", claim("c", claim_spec(1), {"allocation": allocation}))
    assert ix.ask(pod(claim_name="c")).problems == ()


def test_device_tolerations_are_read_by_the_pods_rules():
    """A request's tolerations are read as a pod's are (``taints``), with a device's effects: an
    ``Exists`` toleration with a value, or an ``Equal`` one with no key, is refused as the API
    server refuses it (before, a device toleration was read more loosely than a pod's: the first
    tolerated every ``k`` taint, whatever its value); ``PreferNoSchedule`` is not a device effect;
    ``None`` matches only taints that keep nobody off; ``tolerationSeconds`` counts only for
    ``NoExecute``, so a ``NoSchedule`` toleration with seconds still tolerates."""
    bad = parse_claim_spec(claim_spec(1, tolerations=[
        {"key": "k", "operator": "Exists", "value": "v"}, {"operator": "Equal", "value": "v"},
        {"key": "k", "operator": "Exists", "effect": "PreferNoSchedule"}]), "c")
    where = "c.devices.requests[0].exactly.tolerations"
    assert bad.problems == (
        f"{where}[0].value: must be empty when the operator is Exists (got 'v')",
        f"{where}[1].key: an empty key (every taint) needs the operator Exists",
        f"{where}[2].effect: 'PreferNoSchedule' is not one of NoSchedule, NoExecute, None (or empty for all)")
    devices = [device(i) for i in range(8)]
    devices[0]["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
    ix = index(("gpu-1", devices))
    first = 'device.attributes["gpu.nvidia.com"].index == 0'
    for toleration, given in (
        ({"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "None"}, False),
        ({"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}, True),
    ):
        spec = parse_claim_spec(claim_spec(1, selectors=(first,), tolerations=[toleration]), "c")
        assert spec.problems == ()
        assert (choose(ix, spec.requests, ix.devices["gpu-1"], [0], set()) is not None) == given, toleration


def test_distinct_attribute_gives_each_device_its_own_value():
    """Two GPUs behind two PCIe roots (``distinctAttribute``): usher placed the pod on GPUs 0 and
    1, which share one root, so another GPU on another root is given instead; two requests bound
    together keep distinct values between them too, and an island of four cannot give five."""
    devices = [device(i, island=i // 4) for i in range(8)]
    for i, d in enumerate(devices):
        d["attributes"]["resource.kubernetes.io/pcieRoot"] = {"string": f"pci{i // 2}"}
    ix = index(("gpu-1", devices))
    spec = claim_spec(2)
    spec["devices"]["constraints"] = [{"distinctAttribute": "resource.kubernetes.io/pcieRoot"}]
    parsed = parse_claim_spec(spec, "c")
    assert parsed.problems == ()
    got = choose(ix, parsed.requests, ix.devices["gpu-1"], [0, 1], set(), parsed.constraints)
    assert [d.name for d in got["gpus"]] == ["gpu-0", "gpu-2"]
    two = {"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}},
                                    {"name": "b", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}],
                       "constraints": [{"distinctAttribute": "resource.kubernetes.io/pcieRoot"}]}}
    parsed = parse_claim_spec(two, "c")
    got = choose(ix, parsed.requests, ix.devices["gpu-1"], [], set(), parsed.constraints)
    roots = [d.attributes["resource.kubernetes.io"]["pcieRoot"] for found in got.values() for d in found]
    assert len(set(roots)) == 4
    islands = claim_spec(3)
    islands["devices"]["constraints"] = [{"distinctAttribute": "gpu.nvidia.com/nvlinkIsland"}]
    parsed = parse_claim_spec(islands, "c")
    assert choose(ix, parsed.requests, ix.devices["gpu-1"], [], set(), parsed.constraints) is None  # two islands only
    ix.object_changed(DraKind.CLAIM, "default/c", claim("c", islands))
    assert ix.ask(pod(claim_name="c")).nodes == frozenset()


def test_match_attribute_keeps_a_claims_devices_in_one_island():
    ix = index(eight("gpu-1"))
    spec = claim_spec(3)
    spec["devices"]["constraints"] = [{"matchAttribute": "gpu.nvidia.com/nvlinkIsland"}]
    parsed = parse_claim_spec(spec, "c")
    assert parsed.problems == ()
    # usher placed it on 2,3,4 (across the islands 0-3 and 4-7): one island is given instead
    got = choose(ix, parsed.requests, ix.devices["gpu-1"], [2, 3, 4], set(), parsed.constraints)
    assert [d.name for d in got["gpus"]] == ["gpu-2", "gpu-3", "gpu-0"]
    taken = {"gpu-0", "gpu-1"}
    got = choose(ix, parsed.requests, ix.devices["gpu-1"], [2, 3, 4], taken, parsed.constraints)
    assert [d.name for d in got["gpus"]] == ["gpu-4", "gpu-5", "gpu-6"]
    spec["devices"]["requests"][0]["exactly"]["count"] = 5
    ix.object_changed(DraKind.CLAIM, "default/c", claim("c", spec))
    assert ix.ask(pod(claim_name="c")).nodes == frozenset(), "no island has 5 GPUs"


def test_a_victims_claim_not_yet_freed_does_not_hold_its_devices_once_the_victim_is_gone():
    ix = _gang_index(n=1, count=8)
    victim = pod("victim", made="victim-gpus")
    ix.pod_changed("default/victim", victim)
    ix.object_changed(DraKind.CLAIM, "default/victim-gpus", claim("victim-gpus", claim_spec(8), {
        "allocation": {"devices": {"results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gpu-1",
                                                "device": f"gpu-{i}"} for i in range(8)]},
                       "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                           {"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}]}},
        "reservedFor": [{"resource": "pods", "name": "victim", "uid": "uid-victim"}]}))
    placed = [Placed("default/w-0", "w-0", "default", "uid-w-0", "gpu-1", tuple(range(8)))]
    assert isinstance(plan(ix, placed), str)
    ix.pod_changed("default/victim", None)  # evicted and gone; the resourceclaim controller frees its claim later
    assert dict(plan(ix, placed).gpus)["default/w-0"] == tuple(range(8))


def _held_by_another(ix: DraIndex, devices: range) -> None:
    ix.object_changed(DraKind.CLAIM, "default/theirs", claim("theirs", claim_spec(len(devices)), {"allocation": {
        "devices": {"results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gpu-1", "device": f"gpu-{i}"}
                                for i in devices]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}]}},
        "reservedFor": [{"resource": "pods", "name": "theirs", "uid": "uid-theirs"}]}))


def test_admin_access_is_given_devices_others_hold_and_counts_no_gpus():
    """A monitoring pod asks admin access to 2 GPUs of a node whose 8 another claim holds: it is
    given two of them, flagged so, and they stay that claim's (not its GPUs, nothing taken)."""
    ix = index(eight("gpu-1"))
    _held_by_another(ix, range(8))
    ix.object_changed(DraKind.CLAIM, "default/watch", claim("watch", claim_spec(2, adminAccess=True)))
    ix.pod_changed("default/dcgm", pod("dcgm", claim_name="watch"))
    ask = ix.ask(pod("dcgm", claim_name="watch"))
    assert (ask.gpus, ask.nodes, ask.problems) == (0, frozenset({"gpu-1"}), ())
    done = plan(ix, [Placed("default/dcgm", "dcgm", "default", "uid-dcgm", "gpu-1", ())])
    assert not isinstance(done, str)
    results = done.writes[0].allocation["devices"]["results"]
    assert [(r["device"], r.get("adminAccess")) for r in results] == [("gpu-0", True), ("gpu-1", True)]
    assert dict(done.gpus) == {"default/dcgm": ()}
    ix.object_changed(DraKind.CLAIM, "default/watch", claim("watch", claim_spec(2, adminAccess=True), {
        "allocation": done.writes[0].allocation, "reservedFor": list(done.writes[0].reserved_for)}))
    assert ix.taken_on("gpu-1", but=["default/theirs"]) == set()  # the admin claim takes nothing


def test_admin_access_in_a_namespace_not_labelled_for_it_waits_saying_so():
    from usher.engine.backends.kube.dra_pods import check_admin_access
    ix = index(eight("gpu-1"))
    ix.object_changed(DraKind.CLAIM, "default/watch", claim("watch", claim_spec(2, adminAccess=True)))
    ask = ix.ask(pod("dcgm", claim_name="watch"))
    view = check_admin_access(with_claims(pod_view(pod("dcgm", claim_name="watch")), ask), ask, {"team": "a"})
    assert view.problem == ("spec.resourceClaims[0]: claim default/watch, request gpus asks adminAccess, which needs "
                            "the label resource.kubernetes.io/admin-access=true on namespace default (cluster operators "
                            "set it)")
    labelled = {"resource.kubernetes.io/admin-access": "true"}
    assert check_admin_access(with_claims(pod_view(pod("dcgm", claim_name="watch")), ask), ask, labelled).problem is None


def test_a_claim_the_pods_of_a_gang_share_counts_its_gpus_once():
    """A launcher and a worker name one claim of 2 GPUs: the first by name counts them, the other
    none; both are held to the nodes that can give them."""
    ix = index(eight("gpu-1"))
    ix.object_changed(DraKind.CLAIM, "default/shared", claim("shared", claim_spec(2)))
    for name in ("launcher", "worker"):
        ix.pod_changed(f"default/{name}", pod(name, claim_name="shared"))
    launcher, worker = ix.ask(pod("launcher", claim_name="shared")), ix.ask(pod("worker", claim_name="shared"))
    assert (launcher.gpus, worker.gpus) == (2, 0)
    assert launcher.problems == worker.problems == ()
    assert launcher.nodes == worker.nodes == frozenset({"gpu-1"})
    assert launcher.claims[0].sharers == ("default/worker",)
    ix.pod_changed("default/launcher", None)  # gone: the worker counts them now
    assert ix.ask(pod("worker", claim_name="shared")).gpus == 2


def test_a_shared_claim_is_allocated_once_and_reserved_for_every_pod_of_the_gang():
    ix = index(eight("gpu-1"))
    ix.object_changed(DraKind.CLAIM, "default/shared", claim("shared", claim_spec(2)))
    for name in ("launcher", "worker"):
        ix.pod_changed(f"default/{name}", pod(name, claim_name="shared"))
    placed = [Placed("default/worker", "worker", "default", "uid-worker", "gpu-1", ()),
              Placed("default/launcher", "launcher", "default", "uid-launcher", "gpu-1", (3, 5))]
    done = plan(ix, placed)
    assert not isinstance(done, str)
    (write,) = done.writes
    assert [r["device"] for r in write.allocation["devices"]["results"]] == ["gpu-3", "gpu-5"]
    assert [r["uid"] for r in write.reserved_for] == ["uid-launcher", "uid-worker"]
    assert dict(done.gpus) == {"default/launcher": (3, 5), "default/worker": ()}
    apart = [Placed("default/worker", "worker", "default", "uid-worker", "gpu-2", ()), placed[1]]
    assert plan(ix, apart) == ("pods default/launcher and default/worker share claim default/shared but were placed "
                               "on different nodes (gpu-1, gpu-2)")


def test_a_pod_joining_an_allocated_shared_claim_is_held_to_its_node_and_counts_nothing():
    ix = index(eight("gpu-1"), eight("gpu-2"))
    ix.object_changed(DraKind.CLAIM, "default/shared", claim("shared", claim_spec(2), {"allocation": {
        "devices": {"results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gpu-2", "device": f"gpu-{i}"}
                                for i in (0, 1)]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["gpu-2"]}]}]}},
        "reservedFor": [{"resource": "pods", "name": "a-launcher", "uid": "uid-a-launcher"}]}))
    for name in ("a-launcher", "worker"):
        ix.pod_changed(f"default/{name}", pod(name, claim_name="shared"))
    joining = ix.ask(pod("worker", claim_name="shared"))
    assert (joining.gpus, joining.nodes, joining.problems) == (0, frozenset({"gpu-2"}), ())
    # a pod that joins later and comes first by name takes nothing over from the one it is reserved for
    ix.pod_changed("default/0-launcher", pod("0-launcher", claim_name="shared"))
    assert ix.ask(pod("0-launcher", claim_name="shared")).gpus == 0
    assert ix.ask(pod("a-launcher", claim_name="shared")).gpus == 2
    ix.pod_changed("default/0-launcher", None)
    # a worker joining it with a claim of its own too is not given the shared claim's devices for it
    ix.object_changed(DraKind.CLAIM, "default/own", claim("own", claim_spec(1, selectors=(
        "device.attributes['gpu.nvidia.com'].index < 2",))))
    both = pod("worker", claim_name="shared")
    both["spec"]["resourceClaims"].append({"name": "own", "resourceClaimName": "own"})
    ix.pod_changed("default/worker", both)
    done = plan(ix, [Placed("default/worker", "worker", "default", "uid-worker", "gpu-2", (5,))])
    assert done == "claim default/own: node gpu-2 has not devices enough free that match its requests"
    ix.pod_changed("default/worker", pod("worker", claim_name="shared"))
    # reserved for a pod usher does not place (another scheduler's): not shared with it
    held = claim("held", claim_spec(2), {**ix.claims["default/shared"]["status"],
                                         "reservedFor": [{"resource": "pods", "name": "theirs", "uid": "uid-theirs"}]})
    ix.object_changed(DraKind.CLAIM, "default/held", held)
    assert ix.ask(pod("worker", claim_name="held")).problems == (
        "spec.resourceClaims[0]: ResourceClaim default/held is reserved for a pod usher does not place with this one "
        "(uid uid-theirs); usher shares a claim only among the pods of one gang it schedules",)


def test_pods_of_two_gangs_naming_one_claim_wait_saying_why():
    from usher.engine.backends.kube.dra_pods import share_claims
    ix = index(eight("gpu-1"))
    ix.object_changed(DraKind.CLAIM, "default/shared", claim("shared", claim_spec(2)))
    for name in ("a", "b"):
        ix.pod_changed(f"default/{name}", pod(name, claim_name="shared"))
    ask = ix.ask(pod("a", claim_name="shared"))
    gangs = {"default/a": "default/a", "default/b": "default/b"}
    view = share_claims(with_claims(pod_view(pod("a", claim_name="shared")), ask), ask, gangs.get)
    assert view.problem == ("spec.resourceClaims[0]: ResourceClaim default/shared is named by pod default/b of another "
                            "gang too; usher shares a claim only among the pods of one gang (each gang's quota pays "
                            "for its own devices)")
    gangs["default/b"] = "default/a"
    same = share_claims(with_claims(pod_view(pod("a", claim_name="shared")), ask), ask, lambda k: "default/a")
    assert same.problem is None
    assert [t.topology_key for t in same.rules.affinity] == ["kubernetes.io/hostname"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(1, 4), st.sampled_from(["gpu-1", "gpu-2"]), st.permutations(range(8))),
                min_size=1, max_size=5),
       st.sets(st.integers(0, 7), max_size=6))
def test_property_no_device_is_given_twice_and_a_gang_is_given_whole_or_not_at_all(pods, held):
    """Whatever usher's placement said (even GPUs that overlap, or that another claim holds):
    the plan gives every claim of the gang devices, none twice on a node nor one another claim
    holds, or it gives none and says why."""
    ix = index(eight("gpu-1"), eight("gpu-2"))
    ix.object_changed(DraKind.CLAIM, "default/other", claim("other", claim_spec(1), {"allocation": {
        "devices": {"results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gpu-1", "device": f"gpu-{i}"}
                                for i in sorted(held)]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}]}},
        "reservedFor": [{"resource": "pods", "name": "x", "uid": "ux"}]}))
    placed = []
    for i, (count, node, order) in enumerate(pods):
        ix.object_changed(DraKind.CLAIM, f"default/w-{i}-gpus", claim(f"w-{i}-gpus", claim_spec(count)))
        ix.pod_changed(f"default/w-{i}", pod(f"w-{i}", made=f"w-{i}-gpus"))
        placed.append(Placed(f"default/w-{i}", f"w-{i}", "default", f"uid-w-{i}", node, tuple(order[:count])))
    the_plan = plan(ix, placed)
    wanted = sum(count for count, _, _ in pods)
    free = {"gpu-1": 8 - len(held), "gpu-2": 8}
    need = {n: sum(c for c, node, _ in pods if node == n) for n in free}
    if isinstance(the_plan, str):
        assert any(need[n] > free[n] for n in free), the_plan
        return
    assert [w.claim for w in the_plan.writes] == [f"default/w-{i}-gpus" for i in range(len(pods))]
    given = [(w.pod.node, r["device"]) for w in the_plan.writes for r in w.allocation["devices"]["results"]]
    assert len(given) == wanted and len(set(given)) == wanted
    assert not {("gpu-1", f"gpu-{i}") for i in held} & set(given)

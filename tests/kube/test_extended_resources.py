"""Resources beyond GPUs, CPU and memory: RDMA devices, hugepages, ephemeral storage, the pod limit.

kube-scheduler's NodeResourcesFit checks every resource a pod requests against what its node
allocates, and the kubelet refuses a pod that does not fit (``OutOfrdma/ib``), which a batch Job
counts against its backoffLimit. usher must place by the same arithmetic: a training pod asking for
an InfiniBand device goes only where one is free, and says why it waits when none is.
"""

from __future__ import annotations

import asyncio

from sandboxes import UsherOnSandbox, node, pod, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)

from usher.engine.backends.kube.objects import node_view, pod_requests
from usher.engine.state import UNLIMITED
from usher.sandbox import nodefit

PODS = "/api/v1/namespaces/default/pods"
QUEUES = "queues:\n  - {name: research, quota: {gpu: 64}, namespaces: [default]}\n"


def _spec() -> dict:
    """App containers, a sidecar (an init container that keeps running) and an ordinary init
    container, each asking for some of an RDMA device and of hugepages."""
    return {
        "initContainers": [
            {"name": "mesh", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1", "rdma/ib": "1"}}},
            {"name": "warm", "resources": {"requests": {"cpu": "6", "hugepages-2Mi": "512Mi"}}},
        ],
        "containers": [
            {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "4", "rdma/ib": "2"}, "requests": {"cpu": "2"}}},
            {"name": "b", "resources": {"requests": {"cpu": "1", "hugepages-2Mi": "256Mi", "ephemeral-storage": "10Gi"}}},
        ],
        "overhead": {"cpu": "250m"},
    }


def test_a_pods_extras_are_counted_as_kube_scheduler_counts_them():
    requests = pod_requests(_spec())
    # cpu: max(app 2 + 1 and the sidecar 1, the init container 6 with the sidecar before it 1) + 0.25
    assert (requests.cpu, requests.gpus) == (7_250, 4)
    # rdma/ib: app 2 + sidecar 1 (a limit stands in for a missing request); hugepages: max(256Mi, 512Mi)
    assert dict(requests.extra) == {"rdma/ib": 3, "hugepages-2Mi": 512 * 2**20, "ephemeral-storage": 10 * 2**30, "pods": 1}
    assert [name for name, _ in requests.extra] == sorted(name for name, _ in requests.extra)
    # the sandbox's kubelet admits by the same arithmetic
    kubelet = nodefit.pod_requests({"spec": _spec()})
    assert kubelet["cpu"] == 7_250 and kubelet["rdma/ib"] == 3 and kubelet["hugepages-2Mi"] == 512 * 2**20


def test_a_node_offers_the_extras_its_allocatable_lists_and_no_others():
    listed = node("gpu-0")
    listed["status"]["allocatable"] |= {"rdma/ib": "4", "hugepages-2Mi": "1Gi"}
    assert node_view(listed).extra == {"pods": 110, "rdma/ib": 4, "hugepages-2Mi": 2**30}
    bare = {"metadata": {"name": "n"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    assert node_view(bare).extra == {"pods": UNLIMITED}  # a bare object: no pod limit, no extras


async def _pods(sb: UsherOnSandbox, *names: str) -> dict[str, dict]:
    return {n: await sb.get(f"{PODS}/{n}") for n in names}


def _scheduled(p: dict) -> str:
    return next((c.get("message", "") for c in p["status"].get("conditions", []) if c["type"] == "PodScheduled"), "")


def _asking(name: str, gpus: int, rdma: str) -> dict:
    body = pod(name, gpus, scheduler="usher")
    body["spec"]["containers"][0]["resources"]["requests"]["rdma/ib"] = rdma
    body["spec"]["containers"][0]["resources"]["limits"]["rdma/ib"] = rdma
    return body


async def test_a_pod_asking_for_an_rdma_device_goes_where_one_is_free_and_says_why_it_waits(sb: UsherOnSandbox) -> None:
    """Two GPU nodes, one InfiniBand device on gpu-b only. The first pod asking for it runs on
    gpu-b (gpu-a comes first and has the GPUs, but its kubelet would refuse the pod); the second
    waits, saying the device is taken; a pod asking for two can never run and says so. Nothing
    is refused by a kubelet. When the first ends, the second starts."""
    with_ib = node("gpu-b")
    for field in ("allocatable", "capacity"):
        with_ib["status"][field]["rdma/ib"] = "1"
    await sb.create("/api/v1/nodes", node("gpu-a"))
    await sb.create("/api/v1/nodes", with_ib)
    await sb.start_usher(sb.tmp, QUEUES)
    for name, rdma in (("p", "1"), ("q", "1"), ("r", "2")):
        await sb.create(PODS, _asking(name, 1, rdma))
        await sb.until(lambda n=name: _async(sb.usher.mirror.gangs.get(f"default/{n}") is not None), f"{name} seen")
        await sb.usher.wait_idle()
    running = await sb.pod_where("p", lambda p: p["status"].get("phase") == "Running")
    assert running["spec"]["nodeName"] == "gpu-b"
    q = await sb.pod_where("q", lambda p: "rdma/ib" in _scheduled(p))
    assert "1 rdma/ib, which is taken on every node that offers it (1 node)" in _scheduled(q)
    r = await sb.pod_where("r", lambda p: "rdma/ib" in _scheduled(p))
    assert "can ever hold" in _scheduled(r) and "no rdma/ib to offer" in _scheduled(r)
    for p in (await _pods(sb, "p", "q", "r")).values():
        assert not str(p["status"].get("reason", "")).startswith("OutOf")

    await sb.req("DELETE", f"{PODS}/p")
    started = await sb.pod_where("q", lambda p: p["status"].get("phase") == "Running")
    assert started["spec"]["nodeName"] == "gpu-b"


async def test_a_node_at_its_pod_limit_gets_no_pod_of_usher(sb: UsherOnSandbox) -> None:
    """gpu-a takes one pod and runs one already (a pod of another scheduler): usher's pod goes to
    gpu-b, which the kubelet on gpu-a would refuse with OutOfpods."""
    small = node("gpu-a")
    for field in ("allocatable", "capacity"):
        small["status"][field]["pods"] = "1"
    await sb.create("/api/v1/nodes", small)
    await sb.create("/api/v1/nodes", node("gpu-b"))
    await sb.create(PODS, pod("agent", 0, node_name="gpu-a"))
    await sb.start_usher(sb.tmp, QUEUES)
    await sb.create(PODS, pod("train", 8, scheduler="usher"))
    placed = await sb.pod_where("train", lambda p: p["status"].get("phase") == "Running")
    assert placed["spec"]["nodeName"] == "gpu-b"


async def _async(value: bool) -> bool:
    await asyncio.sleep(0)
    return value


def _with_port(body: dict, port: int, host_network: bool = False) -> dict:
    container = body["spec"]["containers"][0]
    if host_network:
        body["spec"]["hostNetwork"] = True
        container["ports"] = [{"containerPort": port}]
    else:
        container["ports"] = [{"containerPort": 8080, "hostPort": port}]
    return body


def test_a_pods_host_ports_are_extras_a_node_has_one_of_each():
    spec = {"hostNetwork": True,
            "initContainers": [{"name": "mesh", "restartPolicy": "Always", "ports": [{"containerPort": 15001}]},
                               {"name": "setup", "ports": [{"containerPort": 9999}]}],
            "containers": [{"name": "a", "ports": [{"containerPort": 29500}, {"containerPort": 4791, "protocol": "UDP"}]}]}
    extra = dict(pod_requests(spec).extra)
    # with hostNetwork every port of the containers and sidecars is a host port; an ordinary init
    # container's ports are not held while the pod runs
    assert {k for k in extra if k.startswith("hostport:")} == {"hostport:TCP/29500", "hostport:UDP/4791", "hostport:TCP/15001"}
    assert "hostport:TCP/8080" not in dict(pod_requests({"containers": [{"ports": [{"containerPort": 8080}]}]}).extra)


async def test_pods_taking_one_host_port_never_share_a_node(sb: UsherOnSandbox) -> None:
    """gpu-a runs an exporter of another scheduler on host port 9400; a gang of two one-GPU pods
    each on host port 29500 (hostNetwork). Packing would put both pods on gpu-a; the kubelet would
    refuse the second (NodePorts), and any pod on 9400 there. Each pod goes where its port is free."""
    for i in range(3):
        await sb.create("/api/v1/nodes", node(f"gpu-{i}"))
    await sb.create(PODS, _with_port(pod("exporter", 0, node_name="gpu-0"), 9400))
    await sb.start_usher(sb.tmp, QUEUES)
    for i in range(2):
        body = _with_port(pod(f"w-{i}", 1, scheduler="usher"), 29500, host_network=True)
        body["metadata"]["labels"] = {"usher/gang": "w", "usher/gang-size": "2"}
        await sb.create(PODS, body)
    await sb.create(PODS, _with_port(pod("probe", 1, scheduler="usher"), 9400))
    placed = {}
    for name in ("w-0", "w-1", "probe"):
        p = await sb.pod_where(name, lambda p: p["status"].get("phase") == "Running")
        placed[name] = p["spec"]["nodeName"]
    assert placed["w-0"] != placed["w-1"]
    assert placed["probe"] != "gpu-0"


async def test_the_sandboxs_kubelet_refuses_a_pod_whose_host_port_is_taken(sb: UsherOnSandbox) -> None:
    """As a real kubelet's admission does (NodePorts), for pods bound without a scheduler."""
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.create(PODS, _with_port(pod("first", 0, node_name="gpu-0"), 29500))
    await sb.pod_where("first", lambda p: p["status"].get("phase") == "Running")
    await sb.create(PODS, _with_port(pod("second", 0, node_name="gpu-0"), 29500, host_network=True))
    refused = await sb.pod_where("second", lambda p: p["status"].get("phase") == "Failed")
    assert refused["status"]["reason"] == "NodePorts"
    assert refused["spec"]["containers"][0]["ports"][0] == {"containerPort": 29500, "hostPort": 29500, "protocol": "TCP"}


async def test_a_pod_whose_host_port_is_taken_everywhere_says_so(sb: UsherOnSandbox) -> None:
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.create(PODS, _with_port(pod("exporter", 0, node_name="gpu-0"), 9400))
    await sb.start_usher(sb.tmp, QUEUES)
    await sb.create(PODS, _with_port(pod("probe", 1, scheduler="usher"), 9400))
    waiting = await sb.pod_where("probe", lambda p: "9400" in _scheduled(p))
    assert "host port TCP/9400, which a pod holds on every schedulable node" in _scheduled(waiting)
    assert waiting["spec"].get("nodeName") is None

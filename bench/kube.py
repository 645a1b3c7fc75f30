"""Kube backend benchmarks: binds per second and cold start, against the sandbox over loopback.

    python bench/kube.py binds      # 1,000 nodes, 5,000 pending one-GPU pods: end-to-end binds/s
    python bench/kube.py coldstart  # 1,000 nodes, 20,000 pods: controller start to first cycle
    USHER_BENCH_POOL=8 python bench/kube.py binds   # the client's request pool at 8 connections
    python bench/kube.py volumes    # 2,000 one-GPU pods without volumes, then with one claim each
    USHER_BENCH_NODES=100 USHER_BENCH_PODS=200 python bench/kube.py claims   # nvidia.com/gpu, then device claims
    python bench/kube.py rules      # 500 one-GPU pods on 1,000 nodes, then the same as one replica per node spread over racks

``volumes`` runs two rounds back to back, each against a fresh sandbox of 1,000 nodes: the same
number of one-GPU pods, created over HTTP before the controller starts, first without volumes,
then each with a generic ephemeral volume of the sandbox's default ``WaitForFirstConsumer`` class
(the ephemeral volume controller has made every claim before the controller starts). Each pod is
a gang of one, so each bind goes through the volume PreBind: ``selected-node`` on the claim, the
provisioner's volume, the PV controller's bind, then the pod's. Binds/s and CPU per bind of both.
``claims`` is the same with the GPU itself asked as a device claim (a ResourceClaimTemplate of one
``gpu.nvidia.com`` device, no ``nvidia.com/gpu``; the resourceclaim controller has made every
claim before the controller starts): each bind goes through the claims PreBind (the claim's
``status.allocation`` and ``reservedFor`` written) before the pod's. ``rules`` is the same with
each pod a replica of an inference service: label ``app: serve``, a required pod anti-affinity on
``kubernetes.io/hostname`` against that label (never two on one node) and a ``DoNotSchedule``
spread of skew 1 over ``usher/rack``; so each placement is judged against every replica placed
before it (500 by default; ``USHER_BENCH_PODS`` is capped at what the racks can hold, :func:`spread_room`).

``binds`` also prints the CPU each process used while binding, per bind: on a shared machine that
is steadier than the rate. Then, against the same sandbox in the same run, it measures the floor:
a bare client (aiohttp, as usher's client, on as many connections as usher's pool, the same share
of them for Events) that only posts the Bindings and ``Scheduled`` Events usher posts, for pods
made like usher's (a copy of one, under a scheduler name nobody serves) on the GPUs usher left
free. Usher's binds/s as a fraction of the floor's is the kube path's ratio (issue 34 aims at 0.8
or more); the controller is stopped before the floor runs, so the floor has the process to itself.

The fake API server runs in its own process (``usher sandbox``, as a user would run it), so the
controller under test has this process's CPU to itself; the two share the machine's cores. The
sandbox listens on a free port it picks itself (``--port 0``) and writes its URL into the
kubeconfig, which this process reads. The sandbox creates the pods at scenario time 0; the
controller starts once they all exist. The sandbox serves HTTPS with a CA it makes at start and
writes into the kubeconfig (``certificate-authority-data``); this process's own HTTP clients
trust that CA and nothing else (``trust``), as the controller's client does, so a certificate
error is an error here too.

``USHER_BENCH_TREE`` runs the benchmark against another checkout of usher (its ``src``,
``engine``, ``sandbox`` packages put first on ``sys.path``, for both processes), so one script
measures two trees back to back; the tree in use is printed first.
"""

from __future__ import annotations

import asyncio
import base64
import math
import os
import ssl
import subprocess
import sys
import tempfile
import time
from enum import StrEnum
from pathlib import Path

import aiohttp
import httpx
import yaml

if os.environ.get("USHER_BENCH_TREE"):  # before usher is imported: measure that tree's code
    sys.path.insert(0, os.environ["USHER_BENCH_TREE"])

import usher  # noqa: E402
from usher.engine.backends.kube.client import KubeClient  # noqa: E402
from usher.engine.backends.kube.context import EVENT_SHARE  # noqa: E402
from usher.engine.backends.kube.controller import KubeController  # noqa: E402

#: the pods the floor binds: nobody schedules them but the floor
FLOOR_SCHEDULER = "bench-floor"
#: usher's annotation on a Binding naming the GPUs it chose (the floor sends the same)
GPUS_ANNOTATION = "usher/gpus"
#: the GPUs of each node in :func:`scenario`
NODE_GPUS = 8
#: the nodes of each rack in :func:`scenario`
RACK_NODES = 16


def trust(kubeconfig: Path) -> ssl.SSLContext | bool:
    """What this process's HTTP clients verify the sandbox with: its CA from the kubeconfig
    (``certificate-authority-data``); True (the system's CAs) when the kubeconfig carries none."""
    doc = yaml.safe_load(kubeconfig.read_text())
    data = (doc["clusters"][0]["cluster"] or {}).get("certificate-authority-data")
    if not data:
        return True
    return ssl.create_default_context(cadata=base64.b64decode(data).decode())


def scenario(nodes: int, pods: int) -> str:
    lines = [
        "name: kube-bench",
        "topology: {levels: [usher/rack, kubernetes.io/hostname]}",
        "nodeGroups:",
        f"  - {{prefix: n, count: {nodes}, layout: {{usher/rack: {RACK_NODES}}}, template: {{gpus: 8, gpuModel: H100}}}}",
        "queues: [{name: q}]",
        "jobs:" if pods else "jobs: []",
    ]
    lines += [f"  - {{name: j{i}, queue: q, pods: [{{gpu: 1}}]}}" for i in range(pods)]
    return "\n".join(lines) + "\n"


async def wait_for_pods(url: str, want: int, verify: ssl.SSLContext | bool) -> float:
    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=60, verify=verify) as http:
        while True:
            r = await http.get("/api/v1/namespaces/default/pods", params={"limit": "1"})
            if r.status_code == 200:
                remaining = r.json()["metadata"].get("remainingItemCount")
                have = (remaining or 0) + len(r.json()["items"])
                if have >= want:
                    return time.perf_counter() - started
            await asyncio.sleep(0.5)


async def sandbox_url(kubeconfig: Path, process: subprocess.Popen[bytes], wait: float = 60.0) -> str:
    """The server URL the sandbox wrote into ``kubeconfig`` once it listens (on a port of its choosing)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the sandbox exited with {process.returncode} before it served")
        try:
            doc = yaml.safe_load(kubeconfig.read_text())
            return str(doc["clusters"][0]["cluster"]["server"])
        except (OSError, yaml.YAMLError, KeyError, IndexError, TypeError):
            await asyncio.sleep(0.1)  # not written yet, or half written
    raise SystemExit(f"the sandbox wrote no kubeconfig in {wait:.0f}s")


async def count(url: str, path: str, params: dict[str, str], verify: ssl.SSLContext | bool) -> int:
    """How many objects a list would return (one item fetched, the rest counted by the server)."""
    async with httpx.AsyncClient(base_url=url, timeout=60, verify=verify) as http:
        r = await http.get(path, params={**params, "limit": "1"})
        r.raise_for_status()
        return (r.json()["metadata"].get("remainingItemCount") or 0) + len(r.json()["items"])


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) a process has used so far, from ``/proc`` (None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def floor_pod(template: dict, name: str) -> dict:
    """A pod made like ``template`` (one of usher's), pending, for the floor's scheduler only."""
    meta = template["metadata"]
    spec = {k: v for k, v in template["spec"].items() if k != "nodeName"}
    spec["schedulerName"] = FLOOR_SCHEDULER
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": meta["namespace"], "labels": dict(meta.get("labels") or {})},
        "spec": spec,
    }


def free_gpus(bound: list[dict]) -> list[tuple[str, int]]:
    """(node, GPU index) for every GPU that the bound one-GPU pods left free, node by node."""
    used: dict[str, set[int]] = {}
    for pod in bound:
        node = pod["spec"].get("nodeName")
        if node:
            gpus = (pod["metadata"].get("annotations") or {}).get(GPUS_ANNOTATION, "")
            used.setdefault(node, set()).update(int(g) for g in gpus.split(",") if g)
    return [(node, g) for node in sorted(used) for g in range(NODE_GPUS) if g not in used[node]]


async def floor(url: str, token: str | None, verify: ssl.SSLContext | bool, pool: int, event_share: float, sandbox_pid: int) -> dict[str, float]:
    """Create pods like usher's on the free GPUs (untimed), then post each one's Binding and its
    ``Scheduled`` Event as fast as the server takes them: the floor under usher's binds/s."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    ssl_arg = verify if isinstance(verify, ssl.SSLContext) else None
    connector = aiohttp.TCPConnector(limit=pool, limit_per_host=0, ssl=ssl_arg)
    async with aiohttp.ClientSession(base_url=url, connector=connector, headers=headers) as http:
        async def call(method: str, path: str, body: dict | None = None, **params: str) -> dict:
            async with http.request(method, path, json=body, params=params or None) as r:
                data = await r.json()
                if r.status >= 300:
                    raise SystemExit(f"floor: {method} {path} answered {r.status}: {data.get('message')}")
                return data

        pods = (await call("GET", "/api/v1/pods"))["items"]
        template = next(p for p in pods if p["spec"].get("nodeName"))
        namespace = template["metadata"]["namespace"]
        slots = free_gpus(pods)
        creating = asyncio.Semaphore(pool)

        async def create(i: int) -> dict:
            async with creating:
                return await call("POST", f"/api/v1/namespaces/{namespace}/pods", floor_pod(template, f"floor-{i}"))

        made = await asyncio.gather(*(create(i) for i in range(len(slots))))
        events = max(1, int(pool * event_share))
        bind_slots, event_slots = asyncio.Semaphore(max(1, pool - events)), asyncio.Semaphore(events)
        last_bind = 0.0
        event_tasks: list[asyncio.Task[dict]] = []

        async def event(pod: dict, node: str) -> dict:
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            meta = pod["metadata"]
            body = {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"{meta['name']}.floor", "namespace": namespace},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "namespace": namespace, "uid": meta["uid"]},
                "reason": "Scheduled", "message": f"Successfully assigned {namespace}/{meta['name']} to {node}",
                "type": "Normal", "source": {"component": FLOOR_SCHEDULER}, "reportingComponent": FLOOR_SCHEDULER,
                "count": 1, "firstTimestamp": now, "lastTimestamp": now,
            }
            async with event_slots:
                return await call("POST", f"/api/v1/namespaces/{namespace}/events", body)

        async def bind(pod: dict, node: str, gpu: int) -> None:
            nonlocal last_bind
            meta = pod["metadata"]
            binding = {
                "apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": meta["name"], "namespace": namespace, "uid": meta["uid"], "annotations": {GPUS_ANNOTATION: str(gpu)}},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
            async with bind_slots:
                await call("POST", f"/api/v1/namespaces/{namespace}/pods/{meta['name']}/binding", binding)
            last_bind = time.perf_counter()
            event_tasks.append(asyncio.create_task(event(pod, node)))

        cpu, sandbox_cpu = time.process_time(), process_cpu(sandbox_pid)
        started = time.perf_counter()
        await asyncio.gather(*(bind(pod, node, gpu) for pod, (node, gpu) in zip(made, slots)))
        await asyncio.gather(*event_tasks)
        done = time.perf_counter()
        sandbox_end = process_cpu(sandbox_pid)
        return {
            "binds": len(made),
            "bind_s": last_bind - started,
            "all_s": done - started,
            "cpu": time.process_time() - cpu,
            "sandbox_cpu": (sandbox_end - sandbox_cpu) if sandbox_cpu is not None and sandbox_end is not None else float("nan"),
        }


async def measure(nodes: int, pods: int, what: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        path.write_text(scenario(nodes, pods))
        kubeconfig = Path(tmp) / "kubeconfig"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if os.environ.get("USHER_BENCH_TREE"):
            env["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ["USHER_BENCH_TREE"], env.get("PYTHONPATH")) if p)
        sandbox = subprocess.Popen(
            [sys.executable, "-m", "usher", "sandbox", str(path), "--port", "0", "--kubeconfig-out", str(kubeconfig), "--speed", "1"],
            stderr=subprocess.DEVNULL,
            env=env,
        )
        try:
            url = await sandbox_url(kubeconfig, sandbox)
            verify = trust(kubeconfig)
            setup = await wait_for_pods(url, pods, verify)
            print(f"sandbox ready: {nodes} nodes, {pods} pods created in {setup:.1f}s")
            pool = int(os.environ.get("USHER_BENCH_POOL", "0")) or None  # experiments with the pool's size
            client = await KubeClient.connect(str(kubeconfig), **({"pool_size": pool} if pool else {}))
            ctrl = KubeController(client, identity="bench", elect=False, status_interval=3600.0)
            started = time.perf_counter()
            task = asyncio.create_task(ctrl.run())
            await ctrl.synced.wait()
            synced = time.perf_counter()
            while ctrl.stats.first_cycle_at is None:
                await asyncio.sleep(0.01)
            first_cycle = ctrl.stats.first_cycle_at
            print(f"cold start: list + mirror {synced - started:.2f}s, first cycle done at {first_cycle - started:.2f}s")
            if what == "binds":
                cpu, sandbox_cpu = time.process_time(), process_cpu(sandbox.pid)
                while ctrl.stats.binds + ctrl.stats.bind_errors < pods:
                    await asyncio.sleep(0.05)
                done = time.perf_counter()
                print(
                    f"binds: {ctrl.stats.binds} in {done - first_cycle:.2f}s after the first cycle = "
                    f"{ctrl.stats.binds / (done - first_cycle):.0f} binds/s ({ctrl.stats.bind_errors} errors)"
                )
                # the Scheduled Events go out behind the binds (a share of the connections): the
                # CPU below covers them too
                scheduled = {"fieldSelector": "reason=Scheduled"}
                while (events := await count(url, "/api/v1/namespaces/default/events", scheduled, verify)) < ctrl.stats.binds:
                    if time.perf_counter() - done > 120:
                        break
                    await asyncio.sleep(0.2)
                print(f"Scheduled Events: {events} recorded {time.perf_counter() - done:.1f}s after the last bind")
                cpu, sandbox_cpu_end = time.process_time() - cpu, process_cpu(sandbox.pid)
                per_bind = 1000 / max(ctrl.stats.binds, 1)
                sandbox_part = (
                    f", sandbox {sandbox_cpu_end - sandbox_cpu:.1f}s ({(sandbox_cpu_end - sandbox_cpu) * per_bind:.2f} ms per bind)"
                    if sandbox_cpu is not None and sandbox_cpu_end is not None else ""
                )
                print(f"CPU from the first cycle to the last Event: controller {cpu:.1f}s ({cpu * per_bind:.2f} ms per bind){sandbox_part}")
                usher_binds_s = ctrl.stats.binds / (done - first_cycle)
                usher_all_s = ctrl.stats.binds / (time.perf_counter() - first_cycle)
                usher_cpu_ms = cpu * per_bind
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.aclose()
            if what == "binds":
                # the floor: the same sandbox, the controller stopped, a bare client on usher's pool
                token = (yaml.safe_load(kubeconfig.read_text())["users"][0]["user"] or {}).get("token")
                f = await floor(url, token, verify, pool or client.pool_size, EVENT_SHARE, sandbox.pid)
                floor_binds_s, floor_all_s = f["binds"] / f["bind_s"], f["binds"] / f["all_s"]
                print(
                    f"floor: {f['binds']:.0f} binds in {f['bind_s']:.2f}s = {floor_binds_s:.0f} binds/s, with their Events "
                    f"{floor_all_s:.0f}/s; CPU client {1000 * f['cpu'] / f['binds']:.2f} ms per bind, "
                    f"sandbox {1000 * f['sandbox_cpu'] / f['binds']:.2f} ms per bind"
                )
                print("| benchmark | result |\n|---|---|")
                print(f"| kube binds: usher | {usher_binds_s:,.0f} binds/s ({usher_all_s:,.0f}/s to the last Scheduled Event) |")
                print(f"| kube binds: floor (bare client, same sandbox) | {floor_binds_s:,.0f} binds/s ({floor_all_s:,.0f}/s with their Events) |")
                print(f"| kube binds: usher/floor | {usher_binds_s / floor_binds_s:.2f} of the floor's binds/s "
                      f"({usher_all_s / floor_all_s:.2f} with Events; aim: at least 0.8) |")
                print(f"| kube binds: controller CPU per bind | {usher_cpu_ms:.2f} ms (floor's client: {1000 * f['cpu'] / f['binds']:.2f} ms) |")
        finally:
            sandbox.terminate()
            sandbox.wait(10)


class Ask(StrEnum):
    """How a bench pod of ``volumes`` and ``claims`` asks for what it needs."""

    PLAIN = "plain"  # nvidia.com/gpu from the device plugin, no volume
    VOLUME = "volume"  # the same, with a scratch claim of its own (a generic ephemeral volume)
    CLAIM = "claim"  # its GPU as a device claim made from a ResourceClaimTemplate, no nvidia.com/gpu
    RULES = "rules"  # nvidia.com/gpu, one replica per node (required anti-affinity) spread evenly over racks


#: the ResourceClaimTemplate the ``claim`` pods name: one GPU of NVIDIA's driver's class
ONE_GPU_TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "one-gpu", "namespace": "default"},
    "spec": {"spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}}]}}},
}


def bench_pod(i: int, ask: Ask) -> dict:
    """A pending one-GPU pod for usher in queue ``q``, asking for its GPU (and scratch) as ``ask`` says."""
    gpu = {"nvidia.com/gpu": "1"}
    container: dict = {"name": "main", "image": "trainer:1", "resources": {"requests": gpu, "limits": gpu}}
    spec: dict = {"schedulerName": "usher", "restartPolicy": "Never", "containers": [container]}
    if ask == Ask.VOLUME:
        spec["volumes"] = [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}}}}]
    elif ask == Ask.CLAIM:
        container["resources"] = {"claims": [{"name": "gpu"}]}
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    labels = {"usher/queue": "q"}
    if ask == Ask.RULES:
        # what an inference Deployment's replicas carry: never two on one node, even over the racks
        labels["app"] = "serve"
        mine = {"matchLabels": {"app": "serve"}}
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": mine, "topologyKey": "kubernetes.io/hostname"}]}}
        spec["topologySpreadConstraints"] = [
            {"maxSkew": 1, "topologyKey": "usher/rack", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": mine}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p{i}", "namespace": "default", "labels": labels}, "spec": spec}


async def ask_round(nodes: int, pods: int, ask: Ask) -> dict[str, float]:
    """One round of ``volumes``, ``claims`` or ``rules``: binds/s from the first cycle to the last bind, CPU per bind."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        path.write_text(scenario(nodes, 0))
        kubeconfig = Path(tmp) / "kubeconfig"
        sandbox = subprocess.Popen(
            [sys.executable, "-m", "usher", "sandbox", str(path), "--port", "0", "--kubeconfig-out", str(kubeconfig), "--speed", "1"],
            stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            url = await sandbox_url(kubeconfig, sandbox)
            verify = trust(kubeconfig)
            token = (yaml.safe_load(kubeconfig.read_text())["users"][0]["user"] or {}).get("token")
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            async with httpx.AsyncClient(base_url=url, timeout=60, verify=verify, headers=headers) as http:
                while (await http.get("/api/v1/namespaces/usher-system/configmaps/usher-queues")).status_code != 200:
                    await asyncio.sleep(0.2)  # the sandbox's setup is done once the queues are there
                slots = asyncio.Semaphore(16)
                if ask == Ask.CLAIM:
                    r = await http.post("/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates", json=ONE_GPU_TEMPLATE)
                    r.raise_for_status()

                async def create(i: int) -> None:
                    async with slots:
                        r = await http.post("/api/v1/namespaces/default/pods", json=bench_pod(i, ask))
                        r.raise_for_status()

                await asyncio.gather(*(create(i) for i in range(pods)))
            # the claims made before the controller starts (the volume and resourceclaim controllers'):
            # the round measures binding, not those controllers catching up
            made = {Ask.VOLUME: "/api/v1/namespaces/default/persistentvolumeclaims",
                    Ask.CLAIM: "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"}.get(ask)
            while made is not None and await count(url, made, {}, verify) < pods:
                await asyncio.sleep(0.2)
            client = await KubeClient.connect(str(kubeconfig))
            ctrl = KubeController(client, identity="bench", elect=False, status_interval=3600.0)
            started, start_cpu = time.perf_counter(), time.process_time()
            task = asyncio.create_task(ctrl.run())
            await ctrl.synced.wait()
            while ctrl.stats.first_cycle_at is None:
                await asyncio.sleep(0.01)
            first_cycle = ctrl.stats.first_cycle_at
            # the informers' lists and the first rebuild, where each pod's claims are judged on every node
            to_first, to_first_cpu = first_cycle - started, time.process_time() - start_cpu
            cpu, sandbox_cpu = time.process_time(), process_cpu(sandbox.pid)
            while ctrl.stats.binds + ctrl.stats.bind_errors < pods:
                await asyncio.sleep(0.05)
            done = time.perf_counter()
            cpu, sandbox_end = time.process_time() - cpu, process_cpu(sandbox.pid)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.aclose()
            if ask == Ask.RULES:
                await check_rules(url, verify, headers, nodes)
            binds = max(ctrl.stats.binds, 1)
            return {"binds": ctrl.stats.binds, "errors": ctrl.stats.bind_errors, "rate": binds / (done - first_cycle),
                    "to_first": to_first, "to_first_cpu": to_first_cpu,
                    "cpu_ms": 1000 * cpu / binds,
                    "sandbox_ms": 1000 * (sandbox_end - sandbox_cpu) / binds if sandbox_cpu is not None and sandbox_end is not None else math.nan}
        finally:
            sandbox.terminate()
            sandbox.wait(10)


async def check_rules(url: str, verify: ssl.SSLContext | bool, headers: dict[str, str], nodes: int) -> None:
    """The ``rules`` round's placements keep the rules: never two replicas on one node, no rack
    more than one replica ahead of another (every rack is eligible: all nodes are alike)."""
    async with httpx.AsyncClient(base_url=url, timeout=60, verify=verify, headers=headers) as http:
        r = await http.get("/api/v1/namespaces/default/pods", params={"labelSelector": "app=serve"})
        r.raise_for_status()
    on = [p["spec"].get("nodeName") for p in r.json()["items"] if p["spec"].get("nodeName")]
    if len(set(on)) != len(on):
        raise SystemExit(f"rules broken: {len(on)} replicas bound on {len(set(on))} nodes")
    per_rack = [0] * -(-nodes // RACK_NODES)
    for node in on:  # the sandbox names scenario nodes n0, n1, ... in order, RACK_NODES a rack
        per_rack[int(node.lstrip("n")) // RACK_NODES] += 1
    if max(per_rack) - min(per_rack) > 1:
        raise SystemExit(f"rules broken: replicas per rack {min(per_rack)}-{max(per_rack)}, max skew 1")
    print(f"rules kept: {len(on)} replicas on {len(on)} nodes, {min(per_rack)}-{max(per_rack)} a rack")


def spread_room(nodes: int) -> int:
    """How many ``rules`` replicas :func:`scenario`'s cluster can hold: one per node, and no rack more
    than one ahead of the smallest rack (:data:`RACK_NODES` nodes a rack, the last one maybe fewer)."""
    racks = -(-nodes // RACK_NODES)
    smallest = nodes - RACK_NODES * (racks - 1)
    return nodes if smallest == RACK_NODES else smallest + (racks - 1) * (smallest + 1)


def measure_asks(nodes: int, pods: int, ask: Ask) -> None:
    """``volumes`` or ``claims``: the same pods asking plainly and as ``ask`` says, back to back."""
    rounds = {}
    for a in (Ask.PLAIN, ask):
        r = rounds[a] = asyncio.run(ask_round(nodes, pods, a))
        print(f"{a}: {r['binds']:.0f} binds ({r['errors']:.0f} errors), "
              f"{r['rate']:.0f} binds/s, controller CPU {r['cpu_ms']:.2f} ms per bind, sandbox {r['sandbox_ms']:.2f} ms, "
              f"start to first cycle {r['to_first']:.1f} s ({r['to_first_cpu']:.1f} s CPU)", flush=True)
    plain, other = rounds[Ask.PLAIN], rounds[ask]
    title = {Ask.VOLUME: "with a volume claim per pod", Ask.CLAIM: "GPU as a device claim",
             Ask.RULES: "one per node, spread over racks"}[ask]
    print(f"| benchmark | nvidia.com/gpu, nothing else | {title} | ratio |\n|---|---:|---:|---:|")
    print(f"| binds/s, first cycle to last bind | {plain['rate']:,.0f} | {other['rate']:,.0f} | {other['rate'] / plain['rate']:.2f} |")
    print(f"| controller CPU per bind | {plain['cpu_ms']:.2f} ms | {other['cpu_ms']:.2f} ms | {other['cpu_ms'] / plain['cpu_ms']:.2f} |")
    print(f"| sandbox CPU per bind | {plain['sandbox_ms']:.2f} ms | {other['sandbox_ms']:.2f} ms | {other['sandbox_ms'] / plain['sandbox_ms']:.2f} |")
    print(f"| controller start to first cycle, CPU | {plain['to_first_cpu']:.1f} s | {other['to_first_cpu']:.1f} s | "
          f"{other['to_first_cpu'] / max(plain['to_first_cpu'], 1e-9):.2f} |")


def main(argv: list[str]) -> None:
    which = argv or ["binds", "coldstart"]
    import usher.engine
    print(f"usher from {Path(usher.__file__).parent} (engine: {Path(usher.engine.__file__).resolve().parent})")
    for name in which:
        if name == "binds":
            asyncio.run(measure(1000, 5000, "binds"))
        elif name == "coldstart":
            asyncio.run(measure(1000, 20000, "coldstart"))
        elif name == "volumes":
            measure_asks(1000, int(os.environ.get("USHER_BENCH_PODS", "2000")), Ask.VOLUME)
        elif name == "claims":
            measure_asks(int(os.environ.get("USHER_BENCH_NODES", "1000")), int(os.environ.get("USHER_BENCH_PODS", "2000")), Ask.CLAIM)
        elif name == "rules":
            nodes = int(os.environ.get("USHER_BENCH_NODES", "1000"))
            measure_asks(nodes, min(spread_room(nodes), int(os.environ.get("USHER_BENCH_PODS", "500"))), Ask.RULES)
        else:
            raise SystemExit(f"unknown benchmark {name!r} (binds, coldstart, volumes, claims, rules)")


if __name__ == "__main__":
    main(sys.argv[1:])

"""Sandboxes for tests: two 8-GPU nodes in a thread (for blocking clients such as kubectl and the
official client), and an in-loop sandbox with the controller stand-ins on a manual clock. Both
serve HTTPS, as ``usher sandbox`` and every cluster do: clients trust them through the CA in
``server.kubeconfig()`` (or ``server.verify`` for httpx)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import kubernetes
import pytest
import yaml
from kubectl import Kubectl
from kubernetes.client import ApiClient, Configuration
from usher.engine.backends.kube.client import KubeClient
from usher.engine.backends.kube.controller import KubeController
from usher.engine.scenario import parse_scenario
from usher.sandbox.apiserver import FakeApiServer, ServerThread
from usher.sandbox.objects import decisions_configmap, node_object
from usher.sandbox.store import Store
from usher.sandbox.world import ManualClock

TWO_NODES = parse_scenario(
    "name: t\n"
    "nodes: [{name: gpu-1, gpus: 8, cpu: 64, memory: 512Gi}, {name: gpu-2, gpus: 8, cpu: 64, memory: 512Gi}]\n"
    "queues: [{name: research, namespaceSelector: {}, quota: {gpu: 16}}]\njobs: []\n"
)


@contextmanager
def two_node_sandbox() -> Iterator[ServerThread]:
    with ServerThread(FakeApiServer(tls=True)) as thread:
        for spec in TWO_NODES.all_nodes():
            thread.call(thread.server.store.create, "nodes", node_object(spec))
        yield thread


def node(name: str, gpus: int = 8, cpu: str = "64", memory: str = "512Gi", labels: dict | None = None,
         taints: list | None = None, ready: bool = True) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": memory, "nvidia.com/gpu": str(gpus), "pods": "110"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                              **(labels or {})}},
        "spec": {"taints": taints} if taints else {},
        "status": {"capacity": dict(alloc), "allocatable": alloc,
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady"}]},
    }


def pod(name: str, gpus: int = 0, *, node_name: str | None = None, scheduler: str | None = None,
        annotations: dict | None = None, **spec: Any) -> dict[str, Any]:
    resources = {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1.36", "resources": resources}], **spec},
    }
    if node_name:
        body["spec"]["nodeName"] = node_name
    if scheduler:
        body["spec"]["schedulerName"] = scheduler
    return body


class Sandbox:
    def __init__(self) -> None:
        self.clock = ManualClock(1_000_000.0)
        self.server = FakeApiServer(Store(clock=self.clock.now), controllers=True, tls=True)

    async def start(self) -> None:
        await self.server.start(port=0)
        self.http = httpx.AsyncClient(base_url=self.server.url, timeout=30, verify=self.server.verify)

    async def stop(self) -> None:
        await self.http.aclose()
        await self.server.stop()

    def advance(self, seconds: float) -> None:
        """Move the clock and do what became due."""
        self.clock.t += seconds
        self.server.controllers.step()

    async def req(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = ()) -> Any:
        headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else None
        r = await self.http.request(method, path, content=json.dumps(body) if body is not None else None, headers=headers)
        assert r.status_code < 300 or r.status_code in ok, (method, path, r.status_code, r.text)
        return r.json() if r.content else None

    async def create(self, path: str, body: dict) -> dict:
        return await self.req("POST", path, body)

    async def get(self, path: str) -> dict | None:
        r = await self.http.get(path)
        return r.json() if r.status_code == 200 else None

    #: step the controller stand-ins on every poll of ``until`` (time-driven work stays the test's)
    steps = False

    async def until(self, fn, what: str, deadline: float = 15.0) -> Any:
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline
        while True:
            if self.steps:
                self.server.controllers.step()
            value = await fn()
            if value:
                return value
            if loop.time() > end:
                raise AssertionError(f"never happened: {what}")
            await asyncio.sleep(0.02)

    async def pod_where(self, name: str, check, ns: str = "default") -> dict:
        async def probe():
            p = await self.get(f"/api/v1/namespaces/{ns}/pods/{name}")
            return p if p is not None and check(p) else None
        return await self.until(probe, f"pod {name}")

    async def pods(self, selector: str, ns: str = "default") -> list[dict]:
        r = await self.http.get(f"/api/v1/namespaces/{ns}/pods", params={"labelSelector": selector})
        return r.json()["items"]


USHER_QUEUES = """
queues:
  - {name: research, namespaceSelector: {}, quota: {gpu: 32}}
  - {name: small, namespaceSelector: {}, quota: {gpu: 4}}
"""


class UsherOnSandbox(Sandbox):
    """The sandbox with usher's namespace and queue config, and a running controller."""

    steps = True

    async def start_usher(self, tmp: Path, queues: str | None = USHER_QUEUES) -> KubeController:
        """``queues``: the usher-queues ConfigMap to make, with usher's namespace; None: they are
        there already (a scenario's, as ``usher sandbox`` makes them)."""
        if queues is not None:
            await self.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "usher-system"}})
            await self.create("/api/v1/namespaces/usher-system/configmaps", {
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "usher-queues"}, "data": {"queues.yaml": queues},
            })
            await self.create("/api/v1/namespaces/usher-system/configmaps", decisions_configmap())
        path = tmp / "kubeconfig"
        path.write_text(yaml.safe_dump(self.server.kubeconfig(self.server.admin_token)))  # kubectl needs credentials over HTTPS
        self.kubeconfig = path
        client = await KubeClient.connect(str(path))
        self.usher = KubeController(client, identity="usher-0", clock=self.clock.now, elect=False, status_interval=0.0)
        self.task = asyncio.create_task(self.usher.run())
        await asyncio.wait_for(self.usher.synced.wait(), 10)
        return self.usher

    async def stop(self) -> None:
        if hasattr(self, "task"):
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
            await self.usher.client.aclose()
        await super().stop()

    async def all_pods(self) -> list[dict]:
        return (await self.req("GET", "/api/v1/pods"))["items"]

    async def events_of(self, name: str) -> list[dict]:
        items = (await self.req("GET", "/api/v1/namespaces/default/events"))["items"]
        return [e for e in items if e["involvedObject"]["name"] == name]


@pytest.fixture(name="sb")
async def usher_sandbox(tmp_path: Path) -> AsyncIterator[UsherOnSandbox]:
    """The ``sb`` fixture of the tests that run usher on the sandbox (import it to use it)."""
    s = UsherOnSandbox()
    await s.start()
    s.tmp = tmp_path
    yield s
    await s.stop()


@pytest.fixture(name="sandbox")
def two_node_sandbox_fixture() -> Iterator[ServerThread]:
    """The ``sandbox`` fixture: ``two_node_sandbox`` (import it to use it)."""
    with two_node_sandbox() as thread:
        yield thread


@pytest.fixture(name="kubectl")
def kubectl_fixture(sandbox: ServerThread, tmp_path: Path) -> Kubectl:
    """The ``kubectl`` fixture: the real kubectl with a kubeconfig for ``sandbox`` (with a token:
    over HTTPS, kubectl asks for a user name when the kubeconfig's user has no credentials)."""
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump(sandbox.server.kubeconfig(sandbox.server.admin_token)))
    return Kubectl(config)


@pytest.fixture(name="api")
def official_client_fixture(sandbox: ServerThread) -> Iterator[ApiClient]:
    """The ``api`` fixture: the official ``kubernetes`` client configured for ``sandbox``."""
    configuration = Configuration()
    kubernetes.config.load_kube_config_from_dict(sandbox.server.kubeconfig(), client_configuration=configuration)
    with ApiClient(configuration) as client:
        yield client

"""``pods/log`` on the sandbox's API server: the text a real API server serves for a container's
log, with its status codes, over raw HTTP, the official client and kubectl."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubectl import Kubectl
from sandboxes import two_node_sandbox
from usher.sandbox.apiserver import FakeApiServer, ServerThread
from usher.sandbox.store import Store

NOW = 1_800_000_000.0
PODS = "/api/v1/namespaces/default/pods"
STARTED = "2027-01-15T08:00:00Z"
FINISHED = "2027-01-15T09:00:00Z"


def pod(name: str, node: str | None = None, containers: tuple[str, ...] = ("main",), gpus: int = 4) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {"name": c, "image": "trainer:1.0", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}}
            for c in containers
        ]
    }
    if node:
        spec["nodeName"] = node
    meta = {"name": name, "annotations": {"usher/gpus": ",".join(map(str, range(gpus)))} if gpus and node else {}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def running(name: str, started: str = STARTED) -> dict[str, Any]:
    return {"name": name, "ready": True, "started": True, "restartCount": 0, "state": {"running": {"startedAt": started}}}


def set_status(store: Store, name: str, **status: Any) -> None:
    store.patch("pods", name, {"status": status}, "default", subresource="status")


@pytest.fixture
async def server() -> AsyncIterator[FakeApiServer]:
    srv = FakeApiServer(Store(lambda: NOW, seed=1))
    await srv.start()
    yield srv
    await srv.stop()


@pytest.fixture
async def client(server: FakeApiServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=5.0) as c:
        yield c


async def test_discovery_lists_pods_log_with_get(client: httpx.AsyncClient) -> None:
    core = {r["name"]: r for r in (await client.get("/api/v1")).json()["resources"]}
    assert core["pods/log"]["verbs"] == ["get"] and core["pods/log"]["kind"] == "Pod"


async def test_a_running_container_logs_where_it_runs_and_on_which_gpus(server: FakeApiServer, client: httpx.AsyncClient) -> None:
    server.store.create("pods", pod("train-0", node="gpu-1"), "default")
    set_status(server.store, "train-0", phase="Running", startTime=STARTED, containerStatuses=[running("main")])
    r = await client.get(f"{PODS}/train-0/log")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert r.text.splitlines() == [
        'usher-sandbox: container "main" started, image trainer:1.0',
        "usher-sandbox: running on node gpu-1 with 4 GPUs (0,1,2,3)",
    ]
    stamped = (await client.get(f"{PODS}/train-0/log", params={"timestamps": "true", "tailLines": "1"})).text
    assert stamped == "2027-01-15T08:00:00.000000000Z usher-sandbox: running on node gpu-1 with 4 GPUs (0,1,2,3)\n"
    assert (await client.get(f"{PODS}/train-0/log", params={"limitBytes": "14"})).text == "usher-sandbox:"


async def test_an_ended_container_logs_its_exit_and_a_restarted_one_its_previous_run(server: FakeApiServer, client: httpx.AsyncClient) -> None:
    server.store.create("pods", pod("done-0", node="gpu-2", gpus=1), "default")
    ended = {"exitCode": 3, "reason": "Error", "startedAt": STARTED, "finishedAt": FINISHED}
    set_status(server.store, "done-0", phase="Failed", containerStatuses=[{"name": "main", "state": {"terminated": ended}}])
    lines = (await client.get(f"{PODS}/done-0/log", params={"timestamps": "true"})).text.splitlines()
    assert lines[1].endswith("running on node gpu-2 with 1 GPU (0)")
    assert lines[-1] == "2027-01-15T09:00:00.000000000Z usher-sandbox: exited with code 3 (Error)"
    r = await client.get(f"{PODS}/done-0/log", params={"previous": "true"})
    assert r.status_code == 400 and r.json()["message"] == 'previous terminated container "main" in pod "done-0" not found'
    status = {"name": "main", "restartCount": 1, "state": {"running": {"startedAt": FINISHED}}, "lastState": {"terminated": ended}}
    set_status(server.store, "done-0", phase="Running", containerStatuses=[status])
    assert "started (restart 1)" in (await client.get(f"{PODS}/done-0/log")).text
    previous = (await client.get(f"{PODS}/done-0/log", params={"previous": "true"})).text
    assert previous.splitlines()[-1] == "usher-sandbox: exited with code 3 (Error)"


async def test_status_codes_follow_the_real_endpoint(server: FakeApiServer, client: httpx.AsyncClient) -> None:
    store = server.store
    r = await client.get(f"{PODS}/ghost/log")
    assert r.status_code == 404 and r.json()["reason"] == "NotFound" and r.json()["message"] == 'pods "ghost" not found'
    store.create("pods", pod("waiting-0"), "default")
    r = await client.get(f"{PODS}/waiting-0/log")
    assert r.status_code == 400 and r.json()["message"] == "pod waiting-0 does not have a host assigned"
    store.create("pods", pod("bound-0", node="gpu-1"), "default")
    r = await client.get(f"{PODS}/bound-0/log")
    assert (r.status_code, r.json()["reason"]) == (400, "BadRequest")
    assert r.json()["message"] == 'container "main" in pod "bound-0" is waiting to start: ContainerCreating'
    set_status(store, "bound-0", containerStatuses=[{"name": "main", "state": {"waiting": {"reason": "ErrImagePull"}}}])
    assert "is waiting to start: ErrImagePull" in (await client.get(f"{PODS}/bound-0/log")).json()["message"]
    store.create("pods", pod("two-0", node="gpu-1", containers=("main", "sidecar")), "default")
    r = await client.get(f"{PODS}/two-0/log")
    assert r.status_code == 400 and r.json()["message"] == "a container name must be specified for pod two-0, choose one of: [main sidecar]"
    r = await client.get(f"{PODS}/two-0/log", params={"container": "nope"})
    assert r.status_code == 400 and r.json()["message"] == "container nope is not valid for pod two-0"
    r = await client.get(f"{PODS}/two-0/log", params={"tailLines": "-1"})
    assert r.status_code == 422 and "tailLines: Invalid value: -1" in r.json()["message"]
    assert (await client.post(f"{PODS}/two-0/log", json={})).status_code == 405
    server.forbid("get", "pods", "log")
    r = await client.get(f"{PODS}/two-0/log", params={"container": "main"})
    assert r.status_code == 403 and "pods/log" in r.json()["message"]


@pytest.fixture
def sandbox() -> Iterator[ServerThread]:
    with two_node_sandbox() as thread:
        yield thread


def test_the_official_client_and_kubectl_read_the_log(sandbox: ServerThread, tmp_path: Path) -> None:
    from kubernetes.client import ApiClient, Configuration, CoreV1Api
    from kubernetes.client.rest import ApiException
    from kubernetes.config import load_kube_config_from_dict

    store = sandbox.server.store
    sandbox.call(store.create, "pods", pod("train-0", node="gpu-1"), "default")
    sandbox.call(lambda: set_status(store, "train-0", phase="Running", containerStatuses=[running("main")]))
    sandbox.call(store.create, "pods", pod("queued-0"), "default")
    config = Configuration()
    load_kube_config_from_dict(sandbox.server.kubeconfig(), client_configuration=config)  # the URL and its CA
    with ApiClient(config) as api:
        core = CoreV1Api(api)
        assert "running on node gpu-1" in core.read_namespaced_pod_log("train-0", "default")
        with pytest.raises(ApiException) as failed:
            core.read_namespaced_pod_log("queued-0", "default")
        assert failed.value.status == 400
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(sandbox.server.kubeconfig(sandbox.server.admin_token)))
    kubectl = Kubectl(kubeconfig)
    assert "with 4 GPUs (0,1,2,3)" in kubectl.ok("logs", "train-0", "--tail=1")
    failed_run = kubectl.run("logs", "queued-0")
    assert failed_run.returncode != 0 and "does not have a host assigned" in failed_run.stderr

"""The agent against the sandbox's fake API server over HTTP: its Node, the scheduler, /metrics."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import pytest
from api_fixtures import api, server  # noqa: F401 (fixtures)
from fake_nvml import FakeNvml, two_hgx_a100_4gpu

from usher.agent import publish
from usher.agent.main import NodeAgent, run_agent
from usher.agent.metrics import AgentMetrics
from usher.agent.publish import NodePublisher
from usher.cli import build_parser
from usher.engine.backends.kube.client import KubeClient
from usher.engine.backends.kube.controller import KubeController
from usher.engine.backends.nvml.reader import NvmlReader
from usher.engine.backends.telemetry.exposition import parse_exposition
from usher.engine.backends.telemetry.poller import TelemetryPoller, parse_source
from usher.engine.telemetry import Metric, TelemetryStore
from usher.sandbox.apiserver import FakeApiServer, FaultKind

NODE = "dgx-a100-02"


def node_object(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "A100"}},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "128", "memory": "1Ti"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


@pytest.fixture
def nvml(monkeypatch) -> FakeNvml:
    fake = two_hgx_a100_4gpu()
    fake.gpus[3].ecc_uncorrected = 4
    fake.gpus[0].utilization = 91
    return fake.install(monkeypatch)


async def wait_for(condition, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


async def test_the_scheduler_places_by_the_layout_and_health_the_agent_publishes(api: KubeClient, nvml: FakeNvml):
    await api.create("/api/v1/nodes", node_object(NODE))
    ctrl = KubeController(api, identity="test", elect=False, schedule=False)
    runner = asyncio.create_task(ctrl.run())
    reader = NvmlReader()
    reader.open()
    agent = NodeAgent(reader, AgentMetrics(NODE), NodePublisher(api, NODE), interval=60.0)
    try:
        await agent.start("127.0.0.1", 0)
        await wait_for(ctrl.synced.is_set)
        await agent.read_once()
        annotations = (await api.get(f"/api/v1/nodes/{NODE}"))["metadata"]["annotations"]
        assert annotations == {
            "usher/nvlink": "0,1,2,3;4,5,6,7",
            "usher/gpu-health": '{"3":"4 uncorrectable ECC errors since the driver loaded"}',
        }
        await wait_for(lambda: NODE in ctrl.state.node_by_name and ctrl.state.node(NODE).out_of_service == {3})
        node = ctrl.state.node(NODE)
        assert node.islands == [[0, 1, 2, 3], [4, 5, 6, 7]]
        assert ctrl.state.schedulable_gpu_count == 7 and node.gpu_free[3] == 0
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await agent.stop()
        reader.close()


async def test_an_unchanged_reading_writes_nothing_and_a_change_is_written(api: KubeClient, nvml: FakeNvml):
    await api.create("/api/v1/nodes", node_object(NODE))
    publisher = NodePublisher(api, NODE)
    with NvmlReader() as reader:
        assert await publisher.publish(reader.read())
        version = (await api.get(f"/api/v1/nodes/{NODE}"))["metadata"]["resourceVersion"]
        assert not await publisher.publish(reader.read())
        assert (await api.get(f"/api/v1/nodes/{NODE}"))["metadata"]["resourceVersion"] == version
        nvml.emit_xid(6, 74)
        assert await publisher.publish(reader.read())
    health = (await api.get(f"/api/v1/nodes/{NODE}"))["metadata"]["annotations"]["usher/gpu-health"]
    assert health == '{"3":"4 uncorrectable ECC errors since the driver loaded","6":"XID 74: NVLink error"}'


async def test_a_refused_patch_is_logged_once_and_tried_again(api: KubeClient, nvml: FakeNvml, caplog):
    caplog.set_level(logging.INFO, logger="usher.agent")
    publisher = NodePublisher(api, "not-yet-there")
    with NvmlReader() as reader:
        assert not await publisher.publish(reader.read())
        assert not await publisher.publish(reader.read())
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and "cannot annotate node not-yet-there" in errors[0].getMessage()
        await api.create("/api/v1/nodes", node_object("not-yet-there"))
        assert await publisher.publish(reader.read())
    assert any(r.getMessage() == "node not-yet-there annotated again" for r in caplog.records)


async def test_the_controller_reads_the_agents_metrics_like_a_dcgm_exporters(nvml: FakeNvml):
    reader = NvmlReader()
    reader.open()
    agent = NodeAgent(reader, AgentMetrics(NODE), None, interval=60.0)
    store = TelemetryStore()
    try:
        port = await agent.start("127.0.0.1", 0)
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 503
            await agent.read_once()
            assert (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200
            page = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
        [utilization] = [s for s in parse_exposition(page, {"usher_gpu_utilization_percent"}) if s.labels["gpu"] == "0"]
        assert utilization.value == 91.0
        assert utilization.labels == {"node": NODE, "gpu": "0", "uuid": nvml.gpus[0].uuid, "model": "NVIDIA A100-SXM4-40GB"}
        assert "usher_gpu_uncorrected_ecc_errors" in page and "usher_node_nvlink_islands 2.0" in page
        poller = TelemetryPoller([parse_source(f"http://127.0.0.1:{port}/metrics")], store, clock=lambda: 50.0)
        await poller.poll_due()
        await poller.aclose()
    finally:
        await agent.stop()
        reader.close()
    assert store.source_errors() == {}
    assert store.value(NODE, 0, Metric.UTILIZATION, 50.0) == 0.91
    assert store.value(NODE, 0, Metric.MEMORY, 50.0) == pytest.approx(0.5 / 40)
    assert store.latest(NODE, 3).healthy is False and store.latest(NODE, 2).healthy is True
    assert store.value(NODE, 5, Metric.POWER, 50.0) == 71.0


async def _annotation(api: KubeClient, key: str) -> str | None:
    return ((await api.get(f"/api/v1/nodes/{NODE}"))["metadata"].get("annotations") or {}).get(key)


async def test_a_critical_xid_outlives_an_agent_restart_until_the_node_reboots(api: KubeClient, nvml: FakeNvml, caplog):
    caplog.set_level(logging.INFO, logger="usher.agent")
    await api.create("/api/v1/nodes", node_object(NODE))
    with NvmlReader() as reader:
        publisher = NodePublisher(api, NODE, "boot-1")
        assert await publisher.restore(reader) == {}
        nvml.emit_xid(6, 74)
        nvml.emit_xid(5, 13)  # an application's: not kept
        assert await publisher.publish(reader.read())
    assert json.loads(await _annotation(api, "usher/gpu-xids")) == {"boot": "boot-1", "xids": {nvml.gpus[6].uuid: [74]}}

    # the agent restarts (a DaemonSet rollout): NVML has forgotten; the Node has not
    with NvmlReader() as reader:
        publisher = NodePublisher(api, NODE, "boot-1")
        assert await publisher.restore(reader) == {6: [74]}
        reading = reader.read()
        assert reading.unhealthy[6] == "XID 74: NVLink error" and reading.gpus[5].healthy
        await publisher.publish(reading)
    assert "6" in json.loads(await _annotation(api, "usher/gpu-health"))
    assert any(r.getMessage() == "GPU 6: XID 74: NVLink error, seen before this agent started (node not rebooted since): out of service"
               for r in caplog.records)

    # the node rebooted: the GPU is back, and the record starts afresh
    with NvmlReader() as reader:
        publisher = NodePublisher(api, NODE, "boot-2")
        assert await publisher.restore(reader) == {}
        reading = reader.read()
        assert 6 not in reading.unhealthy
        await publisher.publish(reading)
    assert json.loads(await _annotation(api, "usher/gpu-xids")) == {"boot": "boot-2", "xids": {}}
    assert set(json.loads(await _annotation(api, "usher/gpu-health"))) == {"3"}, "the ECC errors of GPU 3 are NVML's to say"


async def test_a_spoiled_xid_record_is_reported_and_nothing_is_taken_from_it(api: KubeClient, nvml: FakeNvml, caplog):
    node = node_object(NODE)
    node["metadata"]["annotations"] = {"usher/gpu-xids": '{"boot": "boot-1", "xids": {"GPU-x": "79"}}'}
    await api.create("/api/v1/nodes", node)
    with NvmlReader() as reader:
        assert await NodePublisher(api, NODE, "boot-1").restore(reader) == {}
        assert reader.read().unhealthy.keys() == {3}
    [error] = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert error == ("node dgx-a100-02: annotation usher/gpu-xids is not usable (xids.GPU-x: not a list of XID numbers); "
                     "no XID seen before this agent started is kept")


async def test_a_node_that_cannot_be_read_keeps_its_xid_record_until_it_can(
    api: KubeClient, server: FakeApiServer, nvml: FakeNvml, caplog
):
    """The agent restarts while its RBAC is not there yet (a 403) or the API server is away: it
    must not write over the record it could not read, and takes it back once it can."""
    node = node_object(NODE)
    kept = json.dumps({"boot": "boot-1", "xids": {nvml.gpus[1].uuid: [79]}})
    node["metadata"]["annotations"] = {"usher/gpu-xids": kept}
    await api.create("/api/v1/nodes", node)
    server.inject(FaultKind.ERROR, method="GET", path=f"/api/v1/nodes/{NODE}", status=403, times=2)
    with NvmlReader() as reader:
        publisher = NodePublisher(api, NODE, "boot-1")
        for _ in range(2):  # refused twice: logged once
            assert await publisher.restore(reader) == {}
            await publisher.publish(reader.read())
            assert server.store.get("nodes", NODE)["metadata"]["annotations"]["usher/gpu-xids"] == kept
        assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1
        assert await publisher.restore(reader) == {1: [79]}
        await publisher.publish(reader.read())
    assert json.loads(await _annotation(api, "usher/gpu-health"))["1"] == "XID 79: GPU has fallen off the bus"
    assert json.loads(await _annotation(api, "usher/gpu-xids")) == {"boot": "boot-1", "xids": {nvml.gpus[1].uuid: [79]}}


async def test_the_running_agent_reads_its_node_before_it_first_publishes(api: KubeClient, nvml: FakeNvml, tmp_path, monkeypatch):
    await api.create("/api/v1/nodes", node_object(NODE))
    boot = tmp_path / "boot_id"
    boot.write_text("boot-1\n")
    monkeypatch.setattr(publish, "BOOT_ID", boot)
    await api.patch(f"/api/v1/nodes/{NODE}", {"metadata": {"annotations": {
        "usher/gpu-xids": json.dumps({"boot": "boot-1", "xids": {nvml.gpus[1].uuid: [79]}})}}})
    args = build_parser().parse_args(["agent", "--node", NODE, "--kubeconfig", str(tmp_path / "kubeconfig"),
                                      "--metrics-host", "127.0.0.1", "--metrics-port", "0"])
    agent = asyncio.create_task(run_agent(args))
    try:
        await wait_for_async(lambda: _annotation(api, "usher/gpu-health"), lambda v: v is not None and "1" in json.loads(v))
    finally:
        agent.cancel()
        assert await agent == 0
    health = json.loads(await _annotation(api, "usher/gpu-health"))
    assert health["1"] == "XID 79: GPU has fallen off the bus"


async def wait_for_async(read, condition, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition(await read()):
            await asyncio.sleep(0.05)


def test_the_boot_id_is_read_from_the_kernel_and_its_absence_is_said(tmp_path, caplog):
    (tmp_path / "boot_id").write_text("0f6b3c1e-8a2d-4e5f-9c7b-1d2e3f4a5b6c\n")
    assert publish.boot_id(tmp_path / "boot_id") == "0f6b3c1e-8a2d-4e5f-9c7b-1d2e3f4a5b6c"
    assert publish.boot_id(tmp_path / "none") is None
    assert "critical XIDs will not be kept over an agent restart" in caplog.text

"""The agent against the sandbox's fake API server over HTTP: its Node, the scheduler, /metrics."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fake_nvml import FakeNvml, two_hgx_a100_4gpu

from usher.agent.main import NodeAgent
from usher.agent.metrics import AgentMetrics
from usher.agent.publish import NodePublisher
from usher.engine.backends.kube.client import KubeClient
from usher.engine.backends.kube.controller import KubeController
from usher.engine.backends.nvml.reader import NvmlReader
from usher.engine.backends.telemetry.exposition import parse_exposition
from usher.engine.backends.telemetry.poller import TelemetryPoller, parse_source
from usher.engine.telemetry import Metric, TelemetryStore
from usher.sandbox.apiserver import FakeApiServer
from usher.sandbox.serve import kubeconfig

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
async def api(tmp_path: Path) -> AsyncIterator[KubeClient]:
    server = FakeApiServer()
    port = await server.start(port=0)
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig(f"http://127.0.0.1:{port}"))
    client = await KubeClient.connect(str(path))
    try:
        yield client
    finally:
        await client.aclose()
        await server.stop()


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

"""The agent's ``/metrics``: the node's GPUs in the Prometheus text format.

One sample per GPU per series, labelled ``node``, ``gpu`` (the NVML index), ``uuid`` and
``model``; a figure the GPU cannot give (N/A) is left out rather than written as zero. The per-GPU
series are ``AgentSeries`` (what the controller's telemetry reads back): utilization in percent,
memory used and total in bytes, temperature in degrees Celsius, power in watts, and
``usher_gpu_healthy`` (1, or 0 when unfit for work). Besides them:

- ``usher_gpu_uncorrected_ecc_errors``: uncorrectable ECC errors since the driver loaded;
- ``usher_gpu_xid_errors_total``: XIDs seen since the agent started (``xid`` label: its number);
- ``usher_gpu_throttled``: 1 for each reason the clocks are held down now (``reason`` label);
- ``usher_node_nvlink_islands``: how many NVLink islands the node's GPUs form;
- ``usher_agent_last_read_timestamp_seconds``: when the GPUs were last read;
- ``process_*``: the agent's own CPU and memory.

``AgentMetrics`` is a collector over the latest reading in a registry of its own; ``render()`` is
the body of ``GET /metrics`` (served by the kube backend's ``HealthServer``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from usher.engine.backends.nvml.reader import GpuReading, NodeReading
from usher.engine.backends.telemetry.series import AgentSeries

GPU_LABELS = ("node", "gpu", "uuid", "model")

_GAUGES: tuple[tuple[str, str, Callable[[GpuReading], float | None]], ...] = (
    (AgentSeries.UTILIZATION, "Percent of time a kernel ran on the GPU.", lambda g: g.utilization),
    (AgentSeries.MEMORY_USED, "GPU memory in use, bytes.", lambda g: g.memory_used),
    (AgentSeries.MEMORY_TOTAL, "GPU memory, bytes.", lambda g: g.memory_total),
    (AgentSeries.TEMPERATURE, "GPU temperature, degrees Celsius.", lambda g: g.temperature),
    (AgentSeries.POWER, "GPU power draw, watts.", lambda g: g.power),
    (AgentSeries.HEALTHY, "1 if no signal says the GPU is unfit for work, else 0.", lambda g: 1.0 if g.healthy else 0.0),
    ("usher_gpu_uncorrected_ecc_errors", "Uncorrectable ECC errors since the driver loaded.", lambda g: g.uncorrected_ecc),
)


class AgentMetrics:
    """The latest reading as Prometheus series, in a registry of its own."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.reading: NodeReading | None = None
        self.read_at: float | None = None
        self.registry = CollectorRegistry()
        self.registry.register(self)
        ProcessCollector(registry=self.registry)

    def update(self, reading: NodeReading, at: float) -> None:
        self.reading, self.read_at = reading, at

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        reading = self.reading
        if reading is None:
            return
        labels = {g.index: [self.node, str(g.index), g.uuid or "", g.name or ""] for g in reading.gpus}
        for name, help_text, value_of in _GAUGES:
            family = GaugeMetricFamily(str(name), help_text, labels=GPU_LABELS)
            for g in reading.gpus:
                value = value_of(g)
                if value is not None:
                    family.add_metric(labels[g.index], float(value))
            yield family
        xids = CounterMetricFamily("usher_gpu_xid_errors", "XIDs seen since the agent started.", labels=(*GPU_LABELS, "xid"))
        throttled = GaugeMetricFamily("usher_gpu_throttled", "1 for each reason the GPU's clocks are held down now.", labels=(*GPU_LABELS, "reason"))
        for g in reading.gpus:
            for xid, count in sorted(Counter(g.xids or ()).items()):
                xids.add_metric([*labels[g.index], str(xid)], count)
            for reason in g.throttle or ():
                throttled.add_metric([*labels[g.index], reason], 1.0)
        yield xids
        yield throttled
        if reading.islands is not None:
            yield GaugeMetricFamily("usher_node_nvlink_islands", "NVLink islands the node's GPUs form.", value=len(reading.islands))
        if self.read_at is not None:
            yield GaugeMetricFamily("usher_agent_last_read_timestamp_seconds", "When the GPUs were last read.", value=self.read_at)

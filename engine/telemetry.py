"""Live GPU telemetry as the controller and the console see it: samples in, latest and history out.

A telemetry *source* turns whatever it reads (the synthetic model of a replay, a DCGM exporter or
``usher agent`` scrape, a Prometheus query) into ``GpuSample`` records and hands them to the
controller's ``TelemetryStore`` with ``add``. The console reads the store:

- ``value(node, gpu, metric, now)``: the figure to draw in a heatmap cell, or ``None`` when the
  GPU has no recent sample (stale) or the source cannot measure that metric (N/A). Stale is never
  drawn as zero: a GPU whose node stopped reporting is not an idle GPU.
- ``history(node, gpu, metric)``: the last ``history`` samples, oldest first, for a sparkline.
- ``version``: bumps on every ``add`` (and when a source's error changes), so a console can skip
  redraws while nothing new arrived.
- ``source_errors()``: the last error of each failing source, for the status line.

Utilization and memory come out as fractions 0..1 (memory is used over total), temperature in
degrees Celsius, power in watts. Times are the controller's clock: simulated seconds in a
replay, epoch seconds on a cluster. The store is pure (no I/O, no clock of its own): callers say
what ``now`` is.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class Metric(StrEnum):
    """What a heatmap or a sparkline can show."""

    UTILIZATION = "utilization"
    MEMORY = "memory"
    TEMPERATURE = "temperature"
    POWER = "power"


@dataclass(slots=True, frozen=True)
class GpuSample:
    """One reading of one GPU; a field is ``None`` where the source could not measure it (N/A)."""

    node: str
    gpu: int
    time: float
    """When it was read, on the controller's clock (scenario seconds in a replay, epoch seconds on a cluster)."""
    utilization: float | None = None
    """Percent 0-100."""
    memory_used: int | None = None
    """Bytes."""
    memory_total: int | None = None
    """Bytes."""
    temperature: float | None = None
    """Degrees Celsius."""
    power: float | None = None
    """Watts."""
    healthy: bool | None = None
    """False when the source reports the GPU unhealthy (an XID, ECC errors); None when it cannot tell."""


def metric_value(sample: GpuSample, metric: Metric) -> float | None:
    """One metric of a sample in the store's units: fractions 0..1 for utilization and memory."""
    if metric is Metric.UTILIZATION:
        u = sample.utilization
        return None if u is None else min(max(u / 100.0, 0.0), 1.0)
    if metric is Metric.MEMORY:
        used, total = sample.memory_used, sample.memory_total
        if used is None or not total:
            return None
        return min(max(used / total, 0.0), 1.0)
    if metric is Metric.TEMPERATURE:
        return sample.temperature
    return sample.power


GpuKey = tuple[str, int]


class TelemetryStore:
    """The latest sample and a short history per GPU, with staleness and per-source errors."""

    def __init__(self, history: int = 60, stale_after: float = 60.0) -> None:
        if history < 1:
            raise ValueError(f"history must keep at least one sample, not {history}")
        if stale_after <= 0:
            raise ValueError(f"stale_after must be positive, not {stale_after}")
        self.history_length = history
        self.stale_after = stale_after
        self.version = 0
        self._samples: dict[GpuKey, deque[GpuSample]] = {}
        self._errors: dict[str, str] = {}

    # -- writing ----------------------------------------------------------------------------

    def add(self, samples: Iterable[GpuSample]) -> None:
        """Record samples; one older than the GPU's latest is dropped (history stays in order)."""
        store = self._samples
        length = self.history_length
        for sample in samples:
            key = (sample.node, sample.gpu)
            kept = store.get(key)
            if kept is None:
                store[key] = deque((sample,), maxlen=length)
            elif sample.time >= kept[-1].time:
                kept.append(sample)
        self.version += 1

    def report_error(self, source: str, message: str) -> None:
        """``source`` is failing with ``message`` (replaces its previous error)."""
        if self._errors.get(source) != message:
            self._errors[source] = message
            self.version += 1

    def clear_error(self, source: str) -> None:
        """``source`` works again."""
        if self._errors.pop(source, None) is not None:
            self.version += 1

    # -- reading ----------------------------------------------------------------------------

    def latest(self, node: str, gpu: int) -> GpuSample | None:
        kept = self._samples.get((node, gpu))
        return kept[-1] if kept else None

    def is_stale(self, node: str, gpu: int, now: float) -> bool:
        """True when the GPU has no sample, or its last one is older than ``stale_after``."""
        kept = self._samples.get((node, gpu))
        return not kept or now - kept[-1].time > self.stale_after

    def value(self, node: str, gpu: int, metric: Metric, now: float) -> float | None:
        """The metric's current value (fractions for utilization and memory); None when stale or N/A."""
        kept = self._samples.get((node, gpu))
        if not kept:
            return None
        last = kept[-1]
        if now - last.time > self.stale_after:
            return None
        return metric_value(last, metric)

    def history(self, node: str, gpu: int, metric: Metric) -> list[float | None]:
        """The kept samples' values, oldest first, in the units of ``value``."""
        kept = self._samples.get((node, gpu))
        if not kept:
            return []
        return [metric_value(s, metric) for s in kept]

    def gpus(self) -> list[GpuKey]:
        """Every (node, gpu) that has had a sample."""
        return list(self._samples)

    def source_errors(self) -> dict[str, str]:
        """Source name -> its last error message, for every source that is failing now."""
        return dict(self._errors)

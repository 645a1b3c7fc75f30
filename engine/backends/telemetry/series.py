"""Which Prometheus series telemetry reads, and how they become ``GpuSample`` records.

Two families are understood, whichever way they arrive (a page scraped from an exporter, or a
Prometheus server's query answer):

- the DCGM exporter's fields (``DcgmField``), as NVIDIA documents them: utilization in percent,
  framebuffer memory in MiB (used, free, and reserved where the exporter has it), temperature in
  degrees Celsius, power in watts; labelled ``gpu`` (the index) and ``Hostname`` (the node's name
  when the exporter runs with ``NODE_NAME`` set, as the GPU Operator deploys it);
- the ``usher agent``'s own series (``AgentSeries``), in base units, labelled ``node`` and ``gpu``.

A series is placed on a node by the first of ``NODE_LABELS`` it carries. Series of MIG instances
(a non-empty ``GPU_I_ID``) are left out: one row per physical GPU is what the heatmap draws.
DCGM marks a value it could not read with a "blank" sentinel near the top of the integer range;
such values, and NaN, are N/A.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from ...telemetry import GpuSample
from .exposition import Series

MIB = 2**20


class DcgmField(StrEnum):
    """The DCGM exporter series telemetry reads (their names as the exporter writes them)."""

    GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
    FB_USED = "DCGM_FI_DEV_FB_USED"
    FB_FREE = "DCGM_FI_DEV_FB_FREE"
    FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"
    FB_TOTAL = "DCGM_FI_DEV_FB_TOTAL"
    GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
    POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"


class AgentSeries(StrEnum):
    """The per-GPU series ``usher agent`` serves on ``/metrics`` (and telemetry reads back)."""

    UTILIZATION = "usher_gpu_utilization_percent"
    MEMORY_USED = "usher_gpu_memory_used_bytes"
    MEMORY_TOTAL = "usher_gpu_memory_total_bytes"
    TEMPERATURE = "usher_gpu_temperature_celsius"
    POWER = "usher_gpu_power_watts"
    HEALTHY = "usher_gpu_healthy"


class Label(StrEnum):
    GPU = "gpu"
    NODE = "node"
    DCGM_HOSTNAME = "Hostname"
    MIG_INSTANCE = "GPU_I_ID"


NODE_LABELS: tuple[str, ...] = (Label.NODE, Label.DCGM_HOSTNAME, "kubernetes_node", "nodename")
"""Labels that name the node a series belongs to, in order of preference."""

WANTED: frozenset[str] = frozenset({*DcgmField, *AgentSeries})
"""Every series name telemetry reads; the rest of a page is skipped unread."""

DCGM_BLANK = 0x7FFFFFF0
"""DCGM's smallest "blank" (not available) marker for 32-bit fields; the 64-bit ones are larger."""


@dataclass(slots=True)
class _Reading:
    utilization: float | None = None
    used: float | None = None
    free: float | None = None
    reserved: float | None = None
    total: float | None = None
    temperature: float | None = None
    power: float | None = None
    healthy: bool | None = None


@dataclass(slots=True)
class Conversion:
    """What ``to_samples`` made of a batch of series."""

    samples: list[GpuSample]
    unplaced: int = 0
    """Series that named no node or no GPU index (and so went nowhere)."""


_DCGM_NAMES = frozenset(DcgmField)


def _value(name: str, v: float) -> float | None:
    if math.isnan(v) or math.isinf(v) or (v >= DCGM_BLANK and name in _DCGM_NAMES):
        return None
    return v


def to_samples(series: Iterable[Series], time: float) -> Conversion:
    """One ``GpuSample`` per (node, GPU) found in ``series``, all stamped ``time``."""
    readings: dict[tuple[str, int], _Reading] = {}
    unplaced = 0
    for s in series:
        labels = s.labels
        if labels.get(Label.MIG_INSTANCE):
            continue
        node = next((labels[k] for k in NODE_LABELS if labels.get(k)), None)
        gpu_text = labels.get(Label.GPU, "")
        if node is None or not gpu_text.isdigit():
            unplaced += 1
            continue
        key = (node, int(gpu_text))
        r = readings.get(key)
        if r is None:
            r = readings[key] = _Reading()
        v = _value(s.name, s.value)
        match s.name:
            case DcgmField.GPU_UTIL | AgentSeries.UTILIZATION:
                r.utilization = v
            case DcgmField.FB_USED:
                r.used = None if v is None else v * MIB
            case DcgmField.FB_FREE:
                r.free = None if v is None else v * MIB
            case DcgmField.FB_RESERVED:
                r.reserved = None if v is None else v * MIB
            case DcgmField.FB_TOTAL:
                r.total = None if v is None else v * MIB
            case AgentSeries.MEMORY_USED:
                r.used = v
            case AgentSeries.MEMORY_TOTAL:
                r.total = v
            case DcgmField.GPU_TEMP | AgentSeries.TEMPERATURE:
                r.temperature = v
            case DcgmField.POWER_USAGE | AgentSeries.POWER:
                r.power = v
            case AgentSeries.HEALTHY:
                r.healthy = None if v is None else v >= 1
    samples = []
    for (node, gpu), r in readings.items():
        total = r.total
        if total is None and r.used is not None and r.free is not None:
            total = r.used + r.free + (r.reserved or 0.0)
        samples.append(
            GpuSample(
                node,
                gpu,
                time,
                utilization=r.utilization,
                memory_used=None if r.used is None else int(r.used),
                memory_total=None if total is None else int(total),
                temperature=r.temperature,
                power=r.power,
                healthy=r.healthy,
            )
        )
    return Conversion(samples, unplaced)

"""How usher writes figures for people: durations, GPU amounts and counted words, one way.

The console's cells, its dialogs, the engine's "why pending" sentences, the audit trail and the
CLI's one-line summaries all go through these, so the same figure reads the same everywhere:

- ``duration(6900)`` -> ``1h55m``: the two largest units, rounded to the smaller one, never
  milliseconds (``45s``, ``10m47s``, ``1h55m``, ``3d4h``);
- ``gpus(8000)`` -> ``8``: milli-GPUs as whole GPUs when whole, else a share to two decimals
  (``0.25``, ``36.75``); a share that would round to a whole number keeps a third decimal
  (``7.999``), so a node that is not full never reads full;
- ``plural(1, "queue")`` -> ``1 queue``, ``plural(3, "queue")`` -> ``3 queues``;
- ``figure("cpu", 96000)`` -> ``96``, ``amount("memory", 2**39)`` -> ``512Gi memory``: an amount
  of a queue resource (GPUs from milli-GPUs, CPU from millicores, memory from bytes) as a figure or
  with its word. CPU and memory are written as Kubernetes quantities (``500m``, ``64Gi``, exact,
  from ``scenario.quantity``), so a figure a person reads can be typed back into a quota form or a
  queue config as it is;
- ``limits_change({"quota": {"gpu": 80000}})`` -> ``set quota gpu=80``: what a ``setQuota``
  did, the one sentence the replay and the cluster controller both record (status line, audit
  trail, Kubernetes Event), so an operator command reads the same on either backend.

Pure functions of numbers: the engine uses them too, so nothing here imports the console.
(``scenario.quantity.format_duration`` is the exact, parseable form a scenario file uses; this is
the one a person reads.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum

from .scenario.quantity import format_cpu, format_memory

INF = float("inf")
MILLI = 1000

_MINUTE = 60
_HOUR = 3600
_DAY = 86400


def _round(x: float) -> int:
    """Half up (``round`` rounds half to even: 0.5 s would read 0s)."""
    return math.floor(x + 0.5)


def duration(seconds: float) -> str:
    """``45s``, ``10m47s``, ``1h55m``, ``3d4h``; ``0s`` for zero or less; ``∞`` for infinity."""
    if seconds is None or math.isnan(seconds):
        return "?"
    if seconds == INF:
        return "∞"
    seconds = max(0.0, float(seconds))
    secs = _round(seconds)
    if secs < _MINUTE:
        return f"{secs}s"
    if secs < _HOUR:
        m, s = divmod(secs, _MINUTE)
        return f"{m}m{s}s" if s else f"{m}m"
    mins = _round(seconds / _MINUTE)
    if mins < _DAY // _MINUTE:
        h, m = divmod(mins, 60)
        return f"{h}h{m}m" if m else f"{h}h"
    hours = _round(seconds / _HOUR)
    d, h = divmod(hours, 24)
    return f"{d}d{h}h" if h else f"{d}d"


def gpus(milli: float, unlimited: str = "∞") -> str:
    """Milli-GPUs as GPUs: ``8``, ``0.25``, ``36.75``, ``0.19``; ``unlimited`` for infinity."""
    if milli == INF:
        return unlimited
    if milli % MILLI == 0:
        return str(int(milli // MILLI))
    value = milli / MILLI
    for digits in (2, 3):
        text = f"{value:.{digits}f}".rstrip("0").rstrip(".")
        if "." in text:
            return text
    # closer than a thousandth to a whole number, but not one
    return f"<{text}" if value < float(text) else f">{text}"


def gpu_amount(milli: float, unlimited: str = "unlimited GPUs") -> str:
    """``1 GPU``, ``8 GPUs``, ``0.5 GPUs``: a GPU figure with its word."""
    if milli == INF:
        return unlimited
    return f"{gpus(milli)} GPU" + ("" if milli == MILLI else "s")


def plural(n: float, word: str, many: str | None = None) -> str:
    """``1 queue``, ``2 queues``, ``0 jobs``; ``many`` for an irregular plural."""
    number = f"{n:g}" if isinstance(n, float) else str(n)
    return f"{number} {word if n == 1 else (many or word + 's')}"


def verb(n: float, one: str, many: str) -> str:
    """The verb agreeing with a count: ``verb(1, "is", "are")``."""
    return one if n == 1 else many


class QueueResource(StrEnum):
    """The resources a queue's limits count, by the names the queue config gives them."""

    GPU = "gpu"
    CPU = "cpu"
    MEMORY = "memory"


class LimitField(StrEnum):
    """A queue's limits, by the names the queue config and a ``setQuota`` give them."""

    QUOTA = "quota"
    BORROWING_LIMIT = "borrowingLimit"
    LENDING_LIMIT = "lendingLimit"


def figure(resource: str, value: float | None, unlimited: str = "unlimited") -> str:
    """An amount of a queue resource in state units as a bare figure: ``80`` (GPUs, from
    milli-GPUs), ``96`` or ``500m`` (CPU, from millicores), ``512Gi`` (memory, from bytes);
    ``unlimited`` for infinity or ``None`` (what a limit set to nothing means)."""
    if value is None or value == INF:
        return unlimited
    res = QueueResource(resource)
    if res is QueueResource.GPU:
        return gpus(value)
    if res is QueueResource.CPU:
        return format_cpu(_round(value))
    return format_memory(_round(value))


def amount(resource: str, value: float | None) -> str:
    """An amount with its word: ``8 GPUs``, ``1 GPU``, ``500m CPU``, ``64Gi memory``, ``unlimited``."""
    if value is None or value == INF:
        return "unlimited"
    if QueueResource(resource) is QueueResource.GPU:
        return gpu_amount(value)
    return f"{figure(resource, value)} {resource.upper() if resource == QueueResource.CPU else resource}"


def limits_change(changes: Mapping[str, Mapping[str, float | None] | None]) -> str:
    """What a ``setQuota`` set, by limit field (``quota``, ``borrowingLimit``, ``lendingLimit``)
    and resource, values in state units (``None``: unlimited): ``set quota gpu=80, cpu=96;
    borrowingLimit gpu=unlimited``, or ``nothing to change``."""
    parts = [
        f"{LimitField(field)} " + ", ".join(f"{res}={figure(res, value)}" for res, value in values.items())
        for field, values in changes.items()
        if values
    ]
    return "set " + "; ".join(parts) if parts else "nothing to change"

"""How usher writes figures for people: durations, GPU amounts and counted words, one way.

The console's cells, its dialogs, the engine's "why pending" sentences, the audit trail and the
CLI's one-line summaries all go through these, so the same figure reads the same everywhere:

- ``duration(6900)`` -> ``1h55m``: the two largest units, rounded to the smaller one, never
  milliseconds (``45s``, ``10m47s``, ``1h55m``, ``3d4h``);
- ``gpus(8000)`` -> ``8``: milli-GPUs as whole GPUs when whole, else a share to two decimals
  (``0.25``, ``36.75``); a share that would round to a whole number keeps a third decimal
  (``7.999``), so a node that is not full never reads full;
- ``plural(1, "queue")`` -> ``1 queue``, ``plural(3, "queue")`` -> ``3 queues``.

Pure functions of numbers: the engine uses them too, so nothing here imports the console.
(``scenario.quantity.format_duration`` is the exact, parseable form a scenario file uses; this is
the one a person reads.)
"""

from __future__ import annotations

import math

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

"""A reader for the Prometheus text exposition format, for the few series telemetry needs.

A DCGM exporter or an ``usher agent`` answers ``GET /metrics`` with lines such as::

    # HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
    # TYPE DCGM_FI_DEV_GPU_UTIL gauge
    DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-6b1c...",Hostname="gpu-01"} 87

``parse_exposition(text, wanted)`` returns a ``Series`` for every sample line whose metric name is
in ``wanted``; every other line is skipped without being parsed (a node's exporter serves dozens
of series per GPU and the controller reads thousands of these pages). A wanted line that does not
follow the format raises ``ExpositionError`` naming its line, and the whole page is refused, as
Prometheus refuses a scrape.

The format (version 0.0.4, which OpenMetrics extends compatibly for what is read here): a metric
name, optionally ``{name="value",...}`` labels (values escape ``\\``, ``"`` and newlines with a
backslash), whitespace, a float (``NaN``, ``+Inf`` and ``-Inf`` allowed), and optionally a
timestamp in milliseconds. Lines starting with ``#`` are comments, HELP or TYPE lines.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


class ExpositionError(ValueError):
    """A wanted line that is not in the text format; ``str()`` names the line."""


@dataclass(slots=True, frozen=True)
class Series:
    """One sample line: metric name, labels, value, and its timestamp in seconds if it had one."""

    name: str
    labels: dict[str, str]
    value: float
    timestamp: float | None = None


def parse_exposition(text: str, wanted: Container[str]) -> list[Series]:
    """The samples of the ``wanted`` metrics in a text-format page; raises ``ExpositionError``."""
    out: list[Series] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        end = 0
        while end < len(line) and line[end] not in "{ \t":
            end += 1
        name = line[:end]
        if name not in wanted:
            continue
        try:
            out.append(_sample(name, line, end))
        except ExpositionError as exc:
            raise ExpositionError(f"line {number}: {exc}") from None
    return out


def _sample(name: str, line: str, at: int) -> Series:
    labels: dict[str, str] = {}
    while at < len(line) and line[at] in " \t":
        at += 1
    if at < len(line) and line[at] == "{":
        labels, at = _labels(line, at + 1)
    rest = line[at:].split()
    if not rest:
        raise ExpositionError(f"{name} has no value")
    if len(rest) > 2:
        raise ExpositionError(f"{name}: unexpected text after the value: {' '.join(rest[2:])!r}")
    value = _float(name, rest[0])
    timestamp = None
    if len(rest) == 2:
        try:
            timestamp = int(rest[1]) / 1000.0
        except ValueError:
            raise ExpositionError(f"{name}: timestamp {rest[1]!r} is not whole milliseconds") from None
    return Series(name, labels, value, timestamp)


def _float(name: str, text: str) -> float:
    try:
        return float(text)  # accepts NaN, +Inf, -Inf as the format spells them
    except ValueError:
        raise ExpositionError(f"{name}: value {text!r} is not a number") from None


def _labels(line: str, at: int) -> tuple[dict[str, str], int]:
    """Labels from just after ``{``; returns them and the index just after ``}``."""
    labels: dict[str, str] = {}
    n = len(line)
    while True:
        while at < n and line[at] in " \t":
            at += 1
        if at >= n:
            raise ExpositionError("the labels are not closed with '}'")
        if line[at] == "}":
            return labels, at + 1
        start = at
        while at < n and (line[at].isalnum() or line[at] == "_"):
            at += 1
        label = line[start:at]
        if not label:
            raise ExpositionError(f"expected a label name at column {at + 1}")
        while at < n and line[at] in " \t":
            at += 1
        if at >= n or line[at] != "=":
            raise ExpositionError(f"label {label} has no '=' (column {at + 1})")
        at += 1
        while at < n and line[at] in " \t":
            at += 1
        if at >= n or line[at] != '"':
            raise ExpositionError(f"label {label}: the value must be in double quotes (column {at + 1})")
        at += 1
        chars: list[str] = []
        while True:
            if at >= n:
                raise ExpositionError(f"label {label}: the quoted value never ends")
            c = line[at]
            if c == '"':
                at += 1
                break
            if c == "\\":
                if at + 1 >= n or line[at + 1] not in _ESCAPES:
                    raise ExpositionError(f"label {label}: bad escape at column {at + 1}")
                chars.append(_ESCAPES[line[at + 1]])
                at += 2
                continue
            chars.append(c)
            at += 1
        labels[label] = "".join(chars)
        while at < n and line[at] in " \t":
            at += 1
        if at < n and line[at] == ",":
            at += 1
        elif at < n and line[at] != "}":
            raise ExpositionError(f"expected ',' or '}}' after label {label} (column {at + 1})")

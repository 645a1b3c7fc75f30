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

import re
from collections.abc import Container
from dataclasses import dataclass

_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


_NAME_END = re.compile(r"[{ \t]|$")


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
        end = _NAME_END.search(line).start()  # type: ignore[union-attr]  # the pattern matches at the end at worst
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
        labels, at = _labels(line, at)
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


_QUOTED = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_PAIR = rf"[ \t]*[A-Za-z_][A-Za-z0-9_]*[ \t]*=[ \t]*{_QUOTED}[ \t]*"
_WELL_FORMED = re.compile(rf"(?:{_PAIR},)*(?:{_PAIR})?[ \t]*\}}")
"""Every label pair up to and including the closing ``}``."""
_PAIRS = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*"([^"\\]*(?:\\.[^"\\]*)*)"')
_ESCAPE = re.compile(r"\\(.)")


def _unescape(match: re.Match[str]) -> str:
    try:
        return _ESCAPES[match.group(1)]
    except KeyError:
        raise ExpositionError(f"bad escape \\{match.group(1)} in a label value") from None


def _labels(line: str, at: int) -> tuple[dict[str, str], int]:
    """Labels from the ``{`` at ``at``; returns them and the index just after ``}``.

    The block is checked and split by regular expressions (the hot path: thousands of lines per
    scrape round); only a malformed one is walked pair by pair, to say where it goes wrong."""
    block = _WELL_FORMED.match(line, at + 1)
    if block is None:
        raise ExpositionError(_label_problem(line, at + 1))
    labels = dict(_PAIRS.findall(line, at + 1, block.end()))
    if "\\" in line[at + 1:block.end()]:
        labels = {k: _ESCAPE.sub(_unescape, v) for k, v in labels.items()}
    return labels, block.end()


def _label_problem(line: str, at: int) -> str:
    """Why the labels starting at ``at`` (just after ``{``) are malformed, in words."""
    pair = re.compile(rf"({_PAIR})(,?)")
    while True:
        rest = line[at:].lstrip(" \t")
        column = len(line) - len(rest) + 1
        if not rest:
            return "the labels are not closed with '}'"
        if rest.startswith("}"):
            return f"malformed labels before column {column}"
        found = pair.match(line, at)
        if found is None:
            break
        at = found.end()
        if not found.group(2) and not line[at:].lstrip(" \t").startswith("}"):
            name = found.group(1).split("=")[0].strip()
            return f"expected ',' or '}}' after label {name} (column {at + 1})"
    name = re.match(r"[A-Za-z_][A-Za-z0-9_]*", rest)
    if name is None:
        return f"expected a label name at column {column}"
    after = rest[name.end():].lstrip(" \t")
    if not after.startswith("="):
        return f"label {name.group()} has no '=' (column {column})"
    value = after[1:].lstrip(" \t")
    if not value.startswith('"'):
        return f"label {name.group()}: the value must be in double quotes (column {column})"
    return f"label {name.group()}: the quoted value never ends"

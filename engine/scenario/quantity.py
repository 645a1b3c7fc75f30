"""Parsing and formatting of durations, CPU and memory quantities.

Canonical units everywhere in usher: seconds (float) for time, millicores (int) for CPU,
bytes (int) for memory. Inputs follow the scenario contract: durations such as `90s`, `1h30m`,
`1.5h` or plain seconds; Kubernetes quantities for CPU (`96`, `96000m`, `0.5`) and memory
(`80Gi`, `1e9`, `512M`). Every parser raises `ValueError` with a message a person can act on.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

_DURATION_UNITS: dict[str, int] = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_NUMBER = r"\d+(?:\.\d*)?|\.\d+"
_DURATION_PART = re.compile(rf"\s*({_NUMBER})\s*([dhms])")
_DURATION_FULL = re.compile(rf"(?:\s*(?:{_NUMBER})\s*[dhms])+\s*")

_MEMORY_SUFFIXES: dict[str, int] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
_MEMORY = re.compile(rf"({_NUMBER})(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E))?")
_BINARY_UNITS: tuple[tuple[str, int], ...] = (
    ("Ei", 2**60),
    ("Pi", 2**50),
    ("Ti", 2**40),
    ("Gi", 2**30),
    ("Mi", 2**20),
    ("Ki", 2**10),
)
_DECIMAL_UNITS: tuple[tuple[str, int], ...] = (
    ("E", 10**18),
    ("P", 10**15),
    ("T", 10**12),
    ("G", 10**9),
    ("M", 10**6),
    ("k", 10**3),
)


def _number(value: object, what: str) -> float:
    """A finite, non-negative int or float (bools are refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} must be a number or a string (got {value!r})")
    if not math.isfinite(value):
        raise ValueError(f"{what} must be finite (got {value!r})")
    if value < 0:
        raise ValueError(f"{what} must not be negative (got {value!r})")
    return float(value)


def _decimal(text: str) -> Decimal:
    try:
        return Decimal(text)
    except InvalidOperation as exc:  # pragma: no cover - the regexes only pass numbers
        raise ValueError(f"not a number: {text!r}") from exc


def parse_duration(value: object) -> float:
    """Seconds from `90s`, `30m`, `6h`, `2d`, `1h30m`, `1.5h`, `"45"` or a number of seconds."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("-"):
            raise ValueError(f"a duration must not be negative (got {value!r})")
        if re.fullmatch(_NUMBER, text):
            return float(text)
        if not text or not _DURATION_FULL.fullmatch(text):
            raise ValueError(
                f"not a duration: {value!r} (use seconds, or a number with d, h, m or s, "
                "such as 90s, 30m, 1h30m, 1.5h, 2d)"
            )
        seen: set[str] = set()
        total = 0.0
        for amount, unit in _DURATION_PART.findall(text):
            if unit in seen:
                raise ValueError(f"not a duration: {value!r} (unit {unit!r} given twice)")
            seen.add(unit)
            total += float(amount) * _DURATION_UNITS[unit]
        return total
    return _number(value, "a duration")


def parse_cpu(value: object) -> int:
    """Millicores from `96`, `"96"`, `"96000m"`, `0.5` or `"500m"` (fractions round up)."""
    if isinstance(value, str):
        text = value.strip()
        milli = text.endswith("m")
        number = text[:-1] if milli else text
        if not re.fullmatch(_NUMBER, number):
            raise ValueError(f"not a CPU quantity: {value!r} (use cores such as 96 or 0.5, or millicores such as 500m)")
        amount = _decimal(number) if milli else _decimal(number) * 1000
    else:
        amount = Decimal(repr(_number(value, "a CPU quantity"))) * 1000
    return int(amount.to_integral_value(rounding=ROUND_CEILING))


def parse_memory(value: object) -> int:
    """Bytes from a Kubernetes quantity: `80Gi`, `1.5Gi`, `512M`, `1e9`, `1073741824`."""
    if isinstance(value, str):
        text = value.strip()
        match = _MEMORY.fullmatch(text)
        if match is None:
            raise ValueError(
                f"not a memory quantity: {value!r} (use bytes, or a number with Ki, Mi, Gi, "
                "Ti, Pi, Ei, k, M, G, T, P or E, such as 80Gi)"
            )
        number, exponent, suffix = match.groups()
        amount = _decimal(number)
        if exponent:
            amount = amount.scaleb(int(exponent[1:]))
        elif suffix:
            amount *= _MEMORY_SUFFIXES[suffix]
    else:
        amount = Decimal(repr(_number(value, "a memory quantity")))
    return int(amount.to_integral_value(rounding=ROUND_CEILING))


def format_duration(seconds: float) -> str:
    """`5400` -> `1h30m`, `45` -> `45s`, `183600` -> `2d3h`, `0` -> `0s`, `90.5` -> `1m30.5s`."""
    value = _number(seconds, "a duration")
    whole = int(value)
    fraction = round(value - whole, 3)
    if fraction >= 1:
        whole, fraction = whole + 1, 0.0
    parts: list[str] = []
    for unit, size in _DURATION_UNITS.items():
        amount, whole = divmod(whole, size)
        if unit == "s" and fraction:
            parts.append(f"{amount + fraction:.3f}".rstrip("0").rstrip(".") + "s")
        elif amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts) or "0s"


def format_memory(num_bytes: int) -> str:
    """Exact, shortest quantity for a byte count: `80Gi`, `1536Mi`, `1G`, `1000001`."""
    value = int(_number(num_bytes, "a memory quantity"))
    if value == 0:
        return "0"
    for units in (_BINARY_UNITS, _DECIMAL_UNITS):
        for suffix, size in units:
            if value % size == 0:
                return f"{value // size}{suffix}"
    return str(value)


def format_cpu(millicores: int) -> str:
    """Whole cores as `96`, anything else as millicores: `500m`, `1500m`."""
    value = int(_number(millicores, "a CPU quantity"))
    if value % 1000 == 0:
        return str(value // 1000)
    return f"{value}m"

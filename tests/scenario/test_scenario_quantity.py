"""Durations, CPU and memory quantities: parsing, formatting, and refusing garbage."""

from __future__ import annotations

import pytest

from usher.engine.scenario.quantity import (
    format_cpu,
    format_duration,
    format_memory,
    parse_cpu,
    parse_duration,
    parse_memory,
)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (0, 0.0),
        (45, 45.0),
        (2.5, 2.5),
        ("45", 45.0),
        ("0s", 0.0),
        ("90s", 90.0),
        ("30m", 1800.0),
        ("6h", 21600.0),
        ("2d", 172800.0),
        ("1h30m", 5400.0),
        ("1h 30m", 5400.0),
        ("1.5h", 5400.0),
        ("2d3h4m5s", 2 * 86400 + 3 * 3600 + 4 * 60 + 5),
        (" 10m ", 600.0),
    ],
)
def test_parse_duration(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["", "5x", "h", "-5", "-1h", "1h1h", "1ms", -1, float("nan"), True, None, [1]])
def test_parse_duration_refuses(value: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(value)


def test_parse_duration_message_is_helpful() -> None:
    with pytest.raises(ValueError, match=r"not a duration: '5x' \(use seconds"):
        parse_duration("5x")
    with pytest.raises(ValueError, match="negative"):
        parse_duration(-3)


@pytest.mark.parametrize(
    ("value", "milli"),
    [(96, 96000), ("96", 96000), ("96000m", 96000), (0.5, 500), ("0.5", 500), ("250m", 250), (0, 0), ("0.0005", 1)],
)
def test_parse_cpu(value: object, milli: int) -> None:
    assert parse_cpu(value) == milli


@pytest.mark.parametrize("value", ["", "abc", "1Gi", "-1", "1.5mm", -0.5, False])
def test_parse_cpu_refuses(value: object) -> None:
    with pytest.raises(ValueError):
        parse_cpu(value)


@pytest.mark.parametrize(
    ("value", "num_bytes"),
    [
        (1024, 1024),
        ("1024", 1024),
        ("1Ki", 1024),
        ("80Gi", 80 * 2**30),
        ("1Ti", 2**40),
        ("1.5Gi", 3 * 2**29),
        ("1Pi", 2**50),
        ("1Ei", 2**60),
        ("1k", 1000),
        ("512M", 512 * 10**6),
        ("1G", 10**9),
        ("2T", 2 * 10**12),
        ("1P", 10**15),
        ("1E", 10**18),
        ("1e9", 10**9),
        ("1.5e3", 1500),
        (1e9, 10**9),
    ],
)
def test_parse_memory(value: object, num_bytes: int) -> None:
    assert parse_memory(value) == num_bytes


@pytest.mark.parametrize("value", ["", "1GB", "Gi", "-1Gi", "lots", -5, None])
def test_parse_memory_refuses(value: object) -> None:
    with pytest.raises(ValueError):
        parse_memory(value)


def test_parse_memory_refuses_inner_space() -> None:
    with pytest.raises(ValueError, match="not a memory quantity"):
        parse_memory("1 Gi")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (45, "45s"), (5400, "1h30m"), (2 * 86400 + 3 * 3600, "2d3h"), (90.5, "1m30.5s"), (3600, "1h")],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("num_bytes", "text"),
    [(0, "0"), (80 * 2**30, "80Gi"), (3 * 2**29, "1536Mi"), (10**9, "1G"), (1000, "1k"), (1001, "1001")],
)
def test_format_memory(num_bytes: int, text: str) -> None:
    assert format_memory(num_bytes) == text
    assert parse_memory(text) == num_bytes


@pytest.mark.parametrize(("milli", "text"), [(96000, "96"), (500, "500m"), (1500, "1500m"), (0, "0")])
def test_format_cpu(milli: int, text: str) -> None:
    assert format_cpu(milli) == text
    assert parse_cpu(text) == milli


def test_format_refuses_negative() -> None:
    for formatter in (format_duration, format_memory, format_cpu):
        with pytest.raises(ValueError):
            formatter(-1)

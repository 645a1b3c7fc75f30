"""The telemetry store: what the console's heatmap and sparklines read."""

from __future__ import annotations

import pytest

from usher.engine.telemetry import GpuSample, Metric, TelemetryStore

GIB = 2**30


def sample(t: float, util: float | None = 50.0, used: int | None = 20 * GIB, **extra) -> GpuSample:
    return GpuSample("n1", 0, t, utilization=util, memory_used=used, memory_total=80 * GIB, **extra)


def test_values_come_as_fractions_for_utilization_and_memory_and_as_units_otherwise():
    store = TelemetryStore()
    store.add([sample(10.0, util=75.0, used=40 * GIB, temperature=61.0, power=412.5)])
    assert store.value("n1", 0, Metric.UTILIZATION, 10.0) == 0.75
    assert store.value("n1", 0, Metric.MEMORY, 10.0) == 0.5
    assert store.value("n1", 0, Metric.TEMPERATURE, 10.0) == 61.0
    assert store.value("n1", 0, Metric.POWER, 10.0) == 412.5


def test_a_gpu_that_stopped_reporting_is_stale_not_idle():
    store = TelemetryStore(stale_after=60.0)
    store.add([sample(100.0, util=90.0)])
    assert not store.is_stale("n1", 0, 160.0)
    assert store.value("n1", 0, Metric.UTILIZATION, 160.0) == 0.9
    assert store.is_stale("n1", 0, 160.5)
    assert store.value("n1", 0, Metric.UTILIZATION, 160.5) is None
    assert store.latest("n1", 0) is not None, "the last sample stays readable (for a tooltip)"


def test_a_gpu_never_seen_is_stale_and_has_no_history():
    store = TelemetryStore()
    assert store.is_stale("n9", 3, 0.0)
    assert store.latest("n9", 3) is None
    assert store.value("n9", 3, Metric.POWER, 0.0) is None
    assert store.history("n9", 3, Metric.POWER) == []


def test_missing_measurements_are_none_not_zero():
    store = TelemetryStore()
    store.add([GpuSample("n1", 0, 5.0, utilization=None, memory_used=1 * GIB, memory_total=None)])
    assert store.value("n1", 0, Metric.UTILIZATION, 5.0) is None
    assert store.value("n1", 0, Metric.MEMORY, 5.0) is None, "used without a total is no fraction"
    assert store.value("n1", 0, Metric.TEMPERATURE, 5.0) is None


def test_history_keeps_the_last_samples_oldest_first():
    store = TelemetryStore(history=3)
    store.add([sample(float(t), util=float(t * 10)) for t in range(1, 6)])
    assert store.history("n1", 0, Metric.UTILIZATION) == [0.3, 0.4, 0.5]
    store.add([sample(6.0, util=None)])
    assert store.history("n1", 0, Metric.UTILIZATION) == [0.4, 0.5, None]


def test_an_out_of_order_sample_does_not_rewrite_history():
    store = TelemetryStore()
    store.add([sample(20.0, util=20.0)])
    store.add([sample(10.0, util=10.0)])
    assert store.history("n1", 0, Metric.UTILIZATION) == [0.2]
    assert store.latest("n1", 0).time == 20.0


def test_version_tells_a_console_when_to_redraw():
    store = TelemetryStore()
    v0 = store.version
    store.add([sample(1.0)])
    v1 = store.version
    assert v1 > v0
    store.report_error("http://dcgm:9400/metrics", "connection refused")
    v2 = store.version
    assert v2 > v1
    store.report_error("http://dcgm:9400/metrics", "connection refused")
    assert store.version == v2, "the same error again changes nothing on screen"
    store.clear_error("http://dcgm:9400/metrics")
    assert store.version > v2


def test_source_errors_hold_the_last_message_of_each_failing_source():
    store = TelemetryStore()
    store.report_error("a", "timed out")
    store.report_error("a", "connection refused")
    store.report_error("b", "HTTP 503")
    assert store.source_errors() == {"a": "connection refused", "b": "HTTP 503"}
    store.clear_error("a")
    assert store.source_errors() == {"b": "HTTP 503"}


def test_out_of_range_readings_are_clamped_to_a_fraction():
    store = TelemetryStore()
    store.add([sample(1.0, util=104.0, used=90 * GIB)])
    assert store.value("n1", 0, Metric.UTILIZATION, 1.0) == 1.0
    assert store.value("n1", 0, Metric.MEMORY, 1.0) == 1.0


@pytest.mark.parametrize("history, stale_after", [(0, 60.0), (10, 0.0)])
def test_nonsense_settings_are_refused(history: int, stale_after: float):
    with pytest.raises(ValueError):
        TelemetryStore(history=history, stale_after=stale_after)

"""Reading DCGM exporter pages, usher agent pages and Prometheus API answers into GPU samples."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from usher.engine.backends.telemetry.exposition import ExpositionError, parse_exposition
from usher.engine.backends.telemetry.prometheus_api import QUERY, PrometheusApiError, parse_query_response
from usher.engine.backends.telemetry.series import WANTED, AgentSeries, DcgmField, to_samples
from usher.engine.telemetry import GpuSample, Metric, TelemetryStore

DCGM_PAGE = (Path(__file__).parent / "dcgm-exporter.txt").read_text()
MIB = 2**20


def samples_of(text: str, time: float = 100.0) -> dict[tuple[str, int], GpuSample]:
    conversion = to_samples(parse_exposition(text, WANTED), time)
    return {(s.node, s.gpu): s for s in conversion.samples}


# --- a DCGM exporter page ------------------------------------------------------------------------


def test_a_dcgm_exporter_page_gives_one_sample_per_gpu_in_base_units():
    got = samples_of(DCGM_PAGE)
    assert set(got) == {("gpu-node-01", 0), ("gpu-node-01", 1)}
    busy = got[("gpu-node-01", 0)]
    assert busy.utilization == 87.0
    assert busy.memory_used == 60774 * MIB
    assert busy.memory_total == (60774 + 20279 + 506) * MIB, "used + free + reserved"
    assert busy.temperature == 67.0
    assert busy.power == pytest.approx(612.433)
    assert busy.healthy is None, "DCGM's last-XID gauge is not a health verdict"
    idle = got[("gpu-node-01", 1)]
    assert idle.utilization == 0.0 and idle.memory_used == 0


def test_a_mig_slice_does_not_overwrite_its_gpus_figures():
    idle = samples_of(DCGM_PAGE)[("gpu-node-01", 1)]
    assert idle.utilization == 0.0  # the page's MIG slice of GPU 1 reports 93


def test_the_store_shows_a_dcgm_page_as_fractions():
    store = TelemetryStore()
    store.add(samples_of(DCGM_PAGE).values())
    assert store.value("gpu-node-01", 0, Metric.UTILIZATION, 100.0) == 0.87
    assert store.value("gpu-node-01", 0, Metric.MEMORY, 100.0) == pytest.approx(60774 / 81559)


def test_only_wanted_series_are_read_and_other_lines_are_not_even_parsed():
    page = DCGM_PAGE + "this line is not the format at all {{{\n"
    series = parse_exposition(page, {DcgmField.GPU_UTIL})
    assert {s.name for s in series} == {"DCGM_FI_DEV_GPU_UTIL"}
    assert len(series) == 3


def test_dcgm_blank_values_and_nan_are_not_available():
    page = (
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="n1"} 9223372036854775794\n'
        'DCGM_FI_DEV_POWER_USAGE{gpu="0",Hostname="n1"} 2147483632\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n1"} NaN\n'
        'DCGM_FI_DEV_FB_USED{gpu="0",Hostname="n1"} 1024\n'
    )
    s = samples_of(page)[("n1", 0)]
    assert s.temperature is None and s.power is None and s.utilization is None
    assert s.memory_used == 1024 * MIB and s.memory_total is None, "no free figure: total unknown"


# --- the usher agent's page -----------------------------------------------------------------------


def test_an_usher_agent_page_carries_node_gpu_health_and_bytes():
    page = (
        f"# TYPE {AgentSeries.UTILIZATION} gauge\n"
        f'{AgentSeries.UTILIZATION}{{node="dgx-07",gpu="3",uuid="GPU-1",model="NVIDIA A100-SXM4-80GB"}} 42.0\n'
        f'{AgentSeries.MEMORY_USED}{{node="dgx-07",gpu="3",uuid="GPU-1",model="NVIDIA A100-SXM4-80GB"}} 1.073741824e+10\n'
        f'{AgentSeries.MEMORY_TOTAL}{{node="dgx-07",gpu="3",uuid="GPU-1",model="NVIDIA A100-SXM4-80GB"}} 8.589934592e+10\n'
        f'{AgentSeries.HEALTHY}{{node="dgx-07",gpu="3",uuid="GPU-1",model="NVIDIA A100-SXM4-80GB"}} 0.0\n'
    )
    s = samples_of(page)[("dgx-07", 3)]
    assert s.utilization == 42.0
    assert s.memory_used == 10 * 2**30 and s.memory_total == 80 * 2**30
    assert s.healthy is False
    assert s.temperature is None and s.power is None


def test_series_without_a_node_or_gpu_label_are_counted_not_guessed():
    page = 'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 50\nDCGM_FI_DEV_GPU_UTIL{Hostname="n1"} 50\n'
    conversion = to_samples(parse_exposition(page, WANTED), 0.0)
    assert conversion.samples == [] and conversion.unplaced == 2


# --- the text format itself ------------------------------------------------------------------------


def test_label_values_unescape_and_whitespace_and_timestamps_are_read():
    page = 'usher_gpu_power_watts { node = "a\\"b\\\\c\\nd" , gpu="0", } 1.5e2 1735689600000\n'
    [s] = parse_exposition(page, WANTED)
    assert s.labels == {"node": 'a"b\\c\nd', "gpu": "0"}
    assert s.value == 150.0 and s.timestamp == 1735689600.0


def test_special_float_values_are_read():
    page = "\n".join(f'usher_gpu_power_watts{{node="n",gpu="{i}"}} {v}' for i, v in enumerate(["+Inf", "-Inf", "NaN"]))
    values = [s.value for s in parse_exposition(page, WANTED)]
    assert values[0] == math.inf and values[1] == -math.inf and math.isnan(values[2])


@pytest.mark.parametrize(
    "line, says",
    [
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0"}', "has no value"),
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0"} busy', "is not a number"),
        ('DCGM_FI_DEV_GPU_UTIL{gpu=0} 5', "double quotes"),
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0" 5', "expected ',' or '}'"),
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0', "never ends"),
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0",', "not closed"),
        ('DCGM_FI_DEV_GPU_UTIL{gpu="\\x"} 5', "bad escape"),
        ('DCGM_FI_DEV_GPU_UTIL{="0"} 5', "label name"),
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0"} 5 soon', "timestamp"),
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0"} 5 1 2', "unexpected text"),
    ],
)
def test_a_malformed_wanted_line_is_refused_naming_its_line(line: str, says: str):
    page = "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n\n" + line + "\n"
    with pytest.raises(ExpositionError) as info:
        parse_exposition(page, WANTED)
    assert str(info.value).startswith("line 3: ")
    assert says in str(info.value)


# --- a Prometheus server's answer --------------------------------------------------------------------


def prometheus_answer(*results: dict) -> str:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": list(results)}})


def test_a_prometheus_answer_gives_the_same_samples_as_a_scrape():
    labels = {"gpu": "0", "Hostname": "gpu-node-01", "instance": "10.0.3.7:9400", "job": "dcgm-exporter"}
    body = prometheus_answer(
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", **labels}, "value": [1735689600.5, "87"]},
        {"metric": {"__name__": "DCGM_FI_DEV_FB_USED", **labels}, "value": [1735689600.5, "60774"]},
        {"metric": {"__name__": "DCGM_FI_DEV_FB_FREE", **labels}, "value": [1735689600.5, "20785"]},
    )
    series = parse_query_response(body)
    assert series[0].timestamp == 1735689600.5
    [s] = to_samples(series, 1735689601.0).samples
    assert (s.node, s.gpu, s.utilization) == ("gpu-node-01", 0, 87.0)
    assert s.memory_total == 81559 * MIB


def test_the_query_selects_every_series_telemetry_reads():
    for name in WANTED:
        assert name in QUERY


@pytest.mark.parametrize(
    "body, says",
    [
        ('{"status":"error","errorType":"bad_data","error":"invalid parameter \\"query\\""}', 'bad_data: invalid parameter "query"'),
        ("<html>502 Bad Gateway</html>", "not JSON"),
        ('{"status":"success","data":{"resultType":"matrix","result":[]}}', "not 'vector'"),
        ('{"status":"success","data":{}}', "data.result is missing"),
        ('{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1]}]}}', "data.result[0]"),
        ('{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"x"]}]}}', "data.result[0].value"),
        ("[]", "not a JSON object"),
        ('{"status":"pending"}', "status 'pending'"),
    ],
)
def test_a_prometheus_answer_that_is_not_a_result_says_why(body: str, says: str):
    with pytest.raises(PrometheusApiError) as info:
        parse_query_response(body)
    assert says in str(info.value)

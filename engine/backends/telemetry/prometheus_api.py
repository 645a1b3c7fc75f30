"""Reading GPU series from a Prometheus server's HTTP API (``GET /api/v1/query``).

Where Prometheus already scrapes the DCGM exporters or the usher agents, the controller asks it
once per interval instead of scraping every node itself: one instant query (``QUERY``) selects
every series telemetry reads by name, and ``parse_query_response`` turns the answer into
``Series`` (the same records a scrape gives; their labels keep ``__name__``), so
``series.to_samples`` handles both alike.

The answer is the API's JSON envelope::

    {"status": "success",
     "data": {"resultType": "vector",
              "result": [{"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "Hostname": "gpu-01"},
                          "value": [1735689600.123, "87"]}]}}

and on failure ``{"status": "error", "errorType": "bad_data", "error": "..."}`` (with HTTP 400,
422 or 503). Anything else raises ``PrometheusApiError`` with a one-line reason. An instant
query returns a series only while Prometheus holds a fresh sample of it (a target that stopped
answering is marked stale within a scrape), so a node whose exporter died drops out of the answer
and its GPUs turn stale in the store.
"""

from __future__ import annotations

import json
from typing import Any

from .exposition import Series
from .series import WANTED

QUERY_PATH = "/api/v1/query"

QUERY = '{__name__=~"' + "|".join(sorted(WANTED)) + '"}'
"""One selector for every series telemetry reads."""


class PrometheusApiError(ValueError):
    """The server refused the query or answered something that is not the API's envelope."""


def parse_query_response(body: bytes | str) -> list[Series]:
    """The samples of an instant-query answer; raises ``PrometheusApiError`` with the reason."""
    try:
        doc: Any = json.loads(body)
    except ValueError as exc:
        raise PrometheusApiError(f"the answer is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise PrometheusApiError("the answer is not a JSON object")
    status = doc.get("status")
    if status == "error":
        raise PrometheusApiError(f"{doc.get('errorType') or 'error'}: {doc.get('error') or 'no reason given'}")
    if status != "success":
        raise PrometheusApiError(f"status {status!r} (expected 'success' or 'error')")
    data = doc.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise PrometheusApiError("data.result is missing")
    if data.get("resultType") != "vector":
        raise PrometheusApiError(f"data.resultType is {data.get('resultType')!r}, not 'vector'")
    out: list[Series] = []
    append = out.append
    for i, item in enumerate(data["result"]):
        try:
            metric = item["metric"]
            timestamp, number = item["value"]
            append(Series(str(metric.get("__name__", "")), metric, float(number), float(timestamp)))
        except (TypeError, KeyError, ValueError, AttributeError):
            raise PrometheusApiError(_item_problem(item, f"data.result[{i}]")) from None
    return out


def _item_problem(item: Any, where: str) -> str:
    """What is wrong with one result item, for the error message."""
    metric = item.get("metric") if isinstance(item, dict) else None
    value = item.get("value") if isinstance(item, dict) else None
    if not isinstance(metric, dict) or not isinstance(value, list) or len(value) != 2:
        return f"{where} is not a {{metric, value: [time, \"number\"]}} pair"
    return f"{where}.value {value!r} is not [time, \"number\"]"

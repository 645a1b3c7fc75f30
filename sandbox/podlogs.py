"""``GET /api/v1/namespaces/{ns}/pods/{name}/log``: a container's log, as the real API server
serves it (by asking the node's kubelet), written from the pod's status.

The sandbox runs no processes, so a container's log is a few synthetic lines from what its
status says happened: it started (image), where it runs (node, and the GPUs usher bound it to,
annotation ``usher/gpus``), and, once it has ended, its exit code and reason. The lines are the
same for the kubelet stand-in's pods and for the pods a scenario's World runs.

The answers follow the real endpoint's (``pkg/registry/core/pod/strategy.go`` ``LogLocation``,
then the kubelet's ``validateContainerLogStatus``), status codes included:

- ``404`` ``pods "x" not found`` for an unknown pod;
- ``400`` ``a container name must be specified for pod x, choose one of: [a b]`` when the pod
  has several containers and ``container`` is not given, ``container c is not valid for pod x``
  for a container it does not have;
- ``400`` ``pod x does not have a host assigned`` for a pod not bound to a node yet;
- ``400`` ``container "c" in pod "x" is waiting to start: ContainerCreating`` (or the waiting
  reason its status gives) for a bound pod whose container has not started;
- ``400`` ``previous terminated container "c" in pod "x" not found`` for ``previous=true`` on a
  container that has not restarted;
- ``200`` ``text/plain`` otherwise, with ``timestamps`` (each line prefixed with its RFC 3339
  time, nanoseconds, as the kubelet does), ``tailLines``, ``limitBytes``, ``sinceSeconds`` and
  ``sinceTime`` applied. ``follow`` answers what there is and ends (nothing more would come).

A container whose terminated status has no ``containerID`` (the World's stand-in writes none)
still has its log: the sandbox keeps every log.
"""

from __future__ import annotations

import calendar
import time
from typing import Any

from .store import ApiError, Reason

JsonObject = dict[str, Any]

GPUS_ANNOTATION = "usher/gpus"
GPU_RESOURCE = "nvidia.com/gpu"
PREFIX = "usher-sandbox:"


def _seconds(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return float(calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def _nano(text: str) -> str:
    """``2024-05-01T10:00:00Z`` as the kubelet's timestamps print it (RFC 3339, nanoseconds)."""
    return f"{text[:19]}.000000000Z" if len(text) >= 19 else text


def int_param(value: str | None, name: str) -> int | None:
    """A whole-number query parameter (absent or empty: None), or a 400 naming it."""
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise ApiError.bad_request(f"{name}: invalid value {value!r}: must be an integer") from None


#: (option, the smallest value it takes, how the API server words it), as ``ValidatePodLogOptions``
_MINIMUM = (
    ("tailLines", 0, "must be greater than or equal to 0"),
    ("limitBytes", 1, "must be greater than 0"),
    ("sinceSeconds", 1, "must be greater than 0"),
)


def _check_options(name: str, values: dict[str, int | None], since_time: str | None) -> None:
    """``422`` ``PodLogOptions "x" is invalid`` for options out of range, as the API server."""
    problems = [
        f"{option}: Invalid value: {values[option]}: {words}"
        for option, least, words in _MINIMUM
        if values[option] is not None and values[option] < least  # type: ignore[operator]
    ]
    if values["sinceSeconds"] is not None and since_time:
        problems.append("sinceSeconds: Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified")
    if problems:
        detail = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
        raise ApiError(422, Reason.INVALID, f'PodLogOptions "{name}" is invalid: {detail}', {"name": name, "kind": "PodLogOptions"})


def _container(pod: JsonObject, requested: str | None) -> JsonObject:
    """The container the request names; the only one when it names none (``ValidateContainer``)."""
    name = pod["metadata"]["name"]
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or []
    every = containers + (spec.get("initContainers") or []) + (spec.get("ephemeralContainers") or [])
    if not requested:
        if len(containers) == 1:
            return containers[0]
        if not containers:
            raise ApiError.bad_request(f"a container name must be specified for pod {name}")
        message = f"a container name must be specified for pod {name}, choose one of: [{' '.join(c.get('name', '') for c in containers)}]"
        inits = spec.get("initContainers") or []
        if inits:
            message += f" or one of the init containers: [{' '.join(c.get('name', '') for c in inits)}]"
        raise ApiError.bad_request(message)
    found = next((c for c in every if c.get("name") == requested), None)
    if found is None:
        raise ApiError.bad_request(f"container {requested} is not valid for pod {name}")
    return found


def _status_of(pod: JsonObject, container: str) -> JsonObject | None:
    status = pod.get("status") or {}
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for cs in status.get(key) or []:
            if cs.get("name") == container:
                return cs
    return None


def _gpus(pod: JsonObject, container: JsonObject) -> str:
    resources = container.get("resources") or {}
    count = (resources.get("limits") or {}).get(GPU_RESOURCE) or (resources.get("requests") or {}).get(GPU_RESOURCE)
    indices = ((pod["metadata"].get("annotations") or {}).get(GPUS_ANNOTATION) or "").strip()
    if not count and not indices:
        return "no GPUs"
    n = str(count) if count else str(len(indices.split(",")))
    plural = "GPU" if n == "1" else "GPUs"
    return f"{n} {plural} ({indices})" if indices else f"{n} {plural}"


def _run_lines(pod: JsonObject, container: JsonObject, started: str | None, ended: JsonObject | None, restart: int) -> list[tuple[str, str]]:
    """One run of a container: (time, line) pairs."""
    name, node = container.get("name", ""), (pod.get("spec") or {}).get("nodeName", "")
    at = started or (ended or {}).get("startedAt") or ""
    again = f" (restart {restart})" if restart else ""
    lines = [
        (at, f'{PREFIX} container "{name}" started{again}, image {container.get("image") or "unknown"}'),
        (at, f"{PREFIX} running on node {node} with {_gpus(pod, container)}"),
    ]
    if ended is not None:
        code = ended.get("exitCode", 0)
        reason = ended.get("reason") or ("Completed" if code == 0 else "Error")
        lines.append((ended.get("finishedAt") or at, f"{PREFIX} exited with code {code} ({reason})"))
    return lines


def pod_log(pod: JsonObject, params: dict[str, str], now: float) -> str:
    """The log of the container ``params`` names (``container``, ``previous``, ``timestamps``,
    ``tailLines``, ``limitBytes``, ``sinceSeconds``, ``sinceTime``); ``ApiError`` as the real
    endpoint fails."""
    name = pod["metadata"]["name"]
    values = {option: int_param(params.get(option), option) for option, _, _ in _MINIMUM}
    _check_options(name, values, params.get("sinceTime"))
    container = _container(pod, params.get("container"))
    tail, limit, since_seconds = values["tailLines"], values["limitBytes"], values["sinceSeconds"]
    if not (pod.get("spec") or {}).get("nodeName"):
        raise ApiError.bad_request(f"pod {name} does not have a host assigned")
    cname = container.get("name", "")
    cs = _status_of(pod, cname) or {}
    state, last = cs.get("state") or {}, (cs.get("lastState") or {}).get("terminated")
    restarts = int(cs.get("restartCount") or 0)
    if params.get("previous", "").lower() in ("true", "1"):
        if not last:
            raise ApiError.bad_request(f'previous terminated container "{cname}" in pod "{name}" not found')
        lines = _run_lines(pod, container, last.get("startedAt"), last, max(0, restarts - 1))
    elif state.get("running"):
        lines = _run_lines(pod, container, state["running"].get("startedAt"), None, restarts)
    elif state.get("terminated"):
        lines = _run_lines(pod, container, state["terminated"].get("startedAt") or (pod.get("status") or {}).get("startTime"), state["terminated"], restarts)
    elif last:
        lines = _run_lines(pod, container, last.get("startedAt"), last, max(0, restarts - 1))
    else:
        waiting = (state.get("waiting") or {}).get("reason") or "ContainerCreating"
        raise ApiError.bad_request(f'container "{cname}" in pod "{name}" is waiting to start: {waiting}')
    since = now - since_seconds if since_seconds is not None else _seconds(params.get("sinceTime"))
    if since is not None:
        lines = [(t, line) for t, line in lines if (_seconds(t) or 0.0) >= since]
    if tail is not None:
        lines = lines[len(lines) - tail:] if tail else []
    if params.get("timestamps", "").lower() in ("true", "1"):
        text = "".join(f"{_nano(t)} {line}\n" for t, line in lines)
    else:
        text = "".join(f"{line}\n" for _, line in lines)
    if limit is not None:
        text = text.encode()[:limit].decode(errors="ignore")
    return text

"""kube-apiserver's checks shared by the Workload API's 1.36 and 1.37 shapes (``scheduling.k8s.io``
``v1alpha2`` and ``v1beta1``): a ``PodGroupSchedulingPolicy`` union, names, and fields whose
feature gate is off. One place for each rule, used by :mod:`.workload_api_alpha2` and
:mod:`.workload_api_beta`; 1.35's shape (:mod:`.workload_api`) words its union differently."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .object_validation import ErrorType, FieldError, dns_subdomain_errors, go_quote
from .workload_api import dns_label_errors


def invalid(path: str, value: Any, detail: str) -> FieldError:
    shown = go_quote(value) if isinstance(value, str) else str(value)
    return FieldError(ErrorType.INVALID, path, detail, shown)


def scheduling_policy(policy: Any, path: str) -> Iterator[FieldError]:
    """A ``PodGroupSchedulingPolicy``: exactly one of ``basic``, ``gang``; ``gang.minCount`` >= 1."""
    policy = policy if isinstance(policy, dict) else {}
    chosen = [f for f in ("basic", "gang") if policy.get(f) is not None]
    if not chosen:
        yield FieldError(ErrorType.INVALID, path, "must specify one of: `basic`, `gang`", "{}")
    elif len(chosen) > 1:
        yield invalid(path, "{`basic`, `gang`}", "must specify exactly one of: `basic`, `gang`")
    gang = policy.get("gang")
    if isinstance(gang, dict):
        count = gang.get("minCount")
        if count is None:
            yield FieldError(ErrorType.REQUIRED, f"{path}.gang.minCount", "")
        elif isinstance(count, bool) or not isinstance(count, int) or count < 1:
            yield invalid(f"{path}.gang.minCount", count, "must be greater than or equal to 1")


def label_field(value: Any, path: str) -> Iterator[FieldError]:
    """A required DNS label (``k8s-short-name``)."""
    name = str(value or "")
    if not name:
        yield FieldError(ErrorType.REQUIRED, path, "")
    for detail in dns_label_errors(name) if name else ():
        yield invalid(path, name, detail)


def subdomain_field(value: Any, path: str) -> Iterator[FieldError]:
    """A required DNS subdomain (``k8s-long-name``)."""
    name = str(value or "")
    if not name:
        yield FieldError(ErrorType.REQUIRED, path, "")
    for detail in dns_subdomain_errors(name) if name else ():
        yield invalid(path, name, detail)


def gated(spec: Mapping[str, Any], field: str, gate: str, path: str) -> Iterator[FieldError]:
    """A field set although its feature gate is off (as it is by default)."""
    if spec.get(field) not in (None, [], ""):
        yield FieldError(ErrorType.FORBIDDEN, f"{path}.{field}", f"disabled by feature-gate {gate}")

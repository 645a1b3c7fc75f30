"""The API server's validation of what an object says, for the rules a GPU cluster trips over.

kube-apiserver validates every object it stores (the registry's ``Validate`` and
``ValidateUpdate``) after decoding and defaulting and before validating admission. The sandbox
checks, with kube-apiserver's field paths and messages:

- **metadata** of every kind, and of the pod template of every built-in workload
  (``ValidateObjectMeta``): label keys are qualified names (an optional DNS-subdomain prefix of at
  most 253 characters and ``/``, then a name of at most 63 characters matching
  ``([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]``), label values at most 63 characters of the same
  alphabet or empty; annotation keys are qualified names (case aside) and all annotations
  together (keys and values) at most 256 KiB;
- **container resources** of a pod and of a workload's pod template
  (``ValidateResourceRequirements``): each name is a standard container resource (``cpu``,
  ``memory``, ``ephemeral-storage``, ``hugepages-<size>``), a ``kubernetes.io`` one or an
  extended resource (``nvidia.com/gpu``, ``rdma/ib``); no quantity is negative; extended
  resources are whole numbers and are not overcommitted (a request needs a limit, and must equal
  it); hugepages are whole pages and come with a cpu or memory request or limit.

The errors are gathered as :class:`FieldError` (``field.Error``), and :func:`invalid` words them
as ``errors.NewInvalid`` does: ``Pod "p" is invalid: [<path>: <type>: <value>: <detail>, ...]``
with one ``cause`` each. The sandbox's store (:mod:`usher.sandbox.store`) calls :func:`validate`
on create and update; this module imports nothing of the store, so the store can import it.
A quantity that does not parse is a decoding error (:class:`DecodeError`, ``400``), as it is in
the real server.

These are the sandbox's own readings of the rules (an independent oracle for usher's), with
their own quantity parser (:mod:`usher.sandbox.quantity`). Not checked: the rest of object
metadata (owner references, finalizers, managed fields), and the rest of a pod's spec.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from usher.sandbox import quantity
from usher.sandbox.kinds import Resource, ResourceType

JsonObject = dict[str, Any]

LABEL_VALUE_MAX = 63
QUALIFIED_NAME_MAX = 63
DNS_SUBDOMAIN_MAX = 253
TOTAL_ANNOTATION_SIZE = 256 * 1024
"""``TotalAnnotationSizeLimitB``: keys and values of all annotations together, in bytes."""

_QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED_NAME = re.compile(_QUALIFIED_NAME_FMT)
_QUALIFIED_NAME_MSG = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
_LABEL_VALUE_FMT = f"({_QUALIFIED_NAME_FMT})?"
_LABEL_VALUE = re.compile(_LABEL_VALUE_FMT)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_DNS_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN_FMT = _DNS_LABEL_FMT + "(\\." + _DNS_LABEL_FMT + ")*"
_DNS_SUBDOMAIN = re.compile(_DNS_SUBDOMAIN_FMT)
_DNS_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)

_STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
_QOS_RESOURCES = frozenset({"cpu", "memory"})
_HUGEPAGES = "hugepages-"
_INTEGER_RESOURCES = frozenset({"pods", "services", "replicationcontrollers", "resourcequotas", "secrets",
                                "configmaps", "persistentvolumeclaims"})

TEMPLATE_PATHS: Mapping[str, tuple[str, ...]] = {
    Resource.DEPLOYMENTS: ("spec", "template"),
    Resource.REPLICASETS: ("spec", "template"),
    Resource.STATEFULSETS: ("spec", "template"),
    Resource.DAEMONSETS: ("spec", "template"),
    Resource.JOBS: ("spec", "template"),
}
"""Where the built-in workloads keep their pod template (validated as kube-apiserver does)."""


class ErrorType(StrEnum):
    """``field.ErrorType``: the cause's ``reason``; :data:`_TYPE_TEXT` is how messages say it."""

    INVALID = "FieldValueInvalid"
    REQUIRED = "FieldValueRequired"
    FORBIDDEN = "FieldValueForbidden"
    TOO_LONG = "FieldValueTooLong"
    NOT_SUPPORTED = "FieldValueNotSupported"
    DUPLICATE = "FieldValueDuplicate"
    TOO_MANY = "FieldValueTooMany"
    NOT_FOUND = "FieldValueNotFound"


_TYPE_TEXT = {
    ErrorType.INVALID: "Invalid value",
    ErrorType.REQUIRED: "Required value",
    ErrorType.FORBIDDEN: "Forbidden",
    ErrorType.TOO_LONG: "Too long",
    ErrorType.NOT_SUPPORTED: "Unsupported value",
    ErrorType.DUPLICATE: "Duplicate value",
    ErrorType.TOO_MANY: "Too many",
    ErrorType.NOT_FOUND: "Not found",
}


class DecodeError(ValueError):
    """A value the real server would not decode (``400 BadRequest``), e.g. a malformed quantity."""


@dataclass(frozen=True, slots=True)
class FieldError:
    """One ``field.Error``: where, what kind, the bad value as Go prints it, and why."""

    type: ErrorType
    field: str
    detail: str
    value: str | None = None
    """The bad value already rendered (``"x"`` for a string, Go's ``%#v`` for a Quantity)."""

    def body(self) -> str:
        """``ErrorBody()``: the message without the field path."""
        text = _TYPE_TEXT[self.type]
        if self.type in (ErrorType.INVALID, ErrorType.NOT_SUPPORTED, ErrorType.DUPLICATE, ErrorType.TOO_MANY,
                         ErrorType.NOT_FOUND) and self.value is not None:
            text = f"{text}: {self.value}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"


def go_quote(text: str) -> str:
    """Go's ``%q`` of a string (printable characters kept, the rest escaped)."""
    return json.dumps(text, ensure_ascii=False)


def invalid(rt: ResourceType, name: str, errors: list[FieldError]) -> tuple[str, JsonObject]:
    """The message and ``details`` of ``errors.NewInvalid``: ``<Kind[.group]> "<name>" is invalid: ...``."""
    kind = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    messages = list(dict.fromkeys(str(e) for e in errors))
    text = messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"
    causes = [{"reason": str(e.type), "message": e.body(), "field": e.field} for e in errors]
    details: JsonObject = {"name": name, **({"group": rt.group} if rt.group else {}), "kind": rt.kind, "causes": causes}
    return f'{kind} "{name}" is invalid: {text}', details


# --------------------------------------------------------------------------- names and metadata


def _regex_error(message: str, fmt: str, *examples: str) -> str:
    """``validation.RegexError``, with its examples (and its doubled spaces)."""
    if not examples:
        return f"{message} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{fmt}')"


def dns_subdomain_errors(value: str) -> list[str]:
    """``IsDNS1123Subdomain``."""
    errors = []
    if len(value) > DNS_SUBDOMAIN_MAX:
        errors.append(f"must be no more than {DNS_SUBDOMAIN_MAX} characters")
    if not _DNS_SUBDOMAIN.fullmatch(value):
        errors.append(_regex_error(_DNS_SUBDOMAIN_MSG, _DNS_SUBDOMAIN_FMT, "example.com"))
    return errors


def qualified_name_errors(value: str) -> list[str]:
    """``IsQualifiedName``: ``[prefix/]name``, the prefix a DNS subdomain, the name at most 63."""
    parts = value.split("/")
    errors: list[str] = []
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors.extend("prefix part " + m for m in dns_subdomain_errors(prefix))
    else:
        return ["a qualified name " + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX:
        errors.append(f"name part must be no more than {QUALIFIED_NAME_MAX} characters")
    if not _QUALIFIED_NAME.fullmatch(name):
        errors.append("name part " + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc"))
    return errors


def label_value_errors(value: str) -> list[str]:
    """``IsValidLabelValue``."""
    errors = []
    if len(value) > LABEL_VALUE_MAX:
        errors.append(f"must be no more than {LABEL_VALUE_MAX} characters")
    if not _LABEL_VALUE.fullmatch(value):
        errors.append(_regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errors


def validate_labels(labels: Any, path: str) -> Iterator[FieldError]:
    """``ValidateLabels``: each key and each value (the errors name the map, not the key)."""
    if not isinstance(labels, dict):
        return
    for key in sorted(labels, key=str):
        value = labels[key]
        for message in qualified_name_errors(str(key)):
            yield FieldError(ErrorType.INVALID, path, message, go_quote(str(key)))
        if isinstance(value, str):
            for message in label_value_errors(value):
                yield FieldError(ErrorType.INVALID, path, message, go_quote(value))


def validate_label_selector(selector: Any, path: str) -> Iterator[FieldError]:
    """``ValidateLabelSelector``: ``matchLabels`` as labels, and each ``matchExpressions``
    requirement's operator, values (some for ``In``/``NotIn``, none for ``Exists``/``DoesNotExist``)
    and key."""
    if not isinstance(selector, dict):
        return
    yield from validate_labels(selector.get("matchLabels"), f"{path}.matchLabels")
    for i, req in enumerate(selector.get("matchExpressions") or []):
        where = f"{path}.matchExpressions[{i}]"
        req = req if isinstance(req, dict) else {}
        operator, values = req.get("operator"), req.get("values") or []
        if operator in ("In", "NotIn"):
            if not values:
                yield FieldError(ErrorType.REQUIRED, f"{where}.values", "must be specified when `operator` is 'In' or 'NotIn'")
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                yield FieldError(ErrorType.FORBIDDEN, f"{where}.values",
                                 "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
        else:
            yield FieldError(ErrorType.INVALID, f"{where}.operator", "not a valid selector operator", go_quote(str(operator or "")))
        key = str(req.get("key") or "")
        for message in qualified_name_errors(key):
            yield FieldError(ErrorType.INVALID, f"{where}.key", message, go_quote(key))
        for j, value in enumerate(values if isinstance(values, list) else []):
            for message in label_value_errors(str(value)):
                yield FieldError(ErrorType.INVALID, f"{where}.values[{j}]", message, go_quote(str(value)))


#: the kinds whose ``spec.selector`` is a label selector kube-apiserver validates on every write
SELECTOR_KINDS = (Resource.DEPLOYMENTS, Resource.REPLICASETS, Resource.STATEFULSETS, Resource.DAEMONSETS, Resource.JOBS,
                  Resource.PODDISRUPTIONBUDGETS)


def validate_annotations(annotations: Any, path: str) -> Iterator[FieldError]:
    """``ValidateAnnotations``: each key a qualified name (in lower case), and the total size."""
    if not isinstance(annotations, dict):
        return
    size = 0
    for key in sorted(annotations, key=str):
        for message in qualified_name_errors(str(key).lower()):
            yield FieldError(ErrorType.INVALID, path, message, go_quote(str(key)))
        value = annotations[key]
        size += len(str(key).encode()) + (len(value.encode()) if isinstance(value, str) else 0)
    if size > TOTAL_ANNOTATION_SIZE:
        yield FieldError(ErrorType.TOO_LONG, path, f"must have at most {TOTAL_ANNOTATION_SIZE} bytes")


def validate_metadata(meta: Any, path: str = "metadata") -> Iterator[FieldError]:
    """The labels and annotations of an object's (or a template's) metadata."""
    if not isinstance(meta, dict):
        return
    yield from validate_labels(meta.get("labels"), f"{path}.labels")
    yield from validate_annotations(meta.get("annotations"), f"{path}.annotations")


# --------------------------------------------------------------------------- resources


def is_native(name: str) -> bool:
    """``IsNativeResource``: no domain, or a ``kubernetes.io`` one."""
    return "/" not in name or "kubernetes.io/" in name


def is_extended(name: str) -> bool:
    """``IsExtendedResourceName``: a domain other than kubernetes.io, valid as a quota name."""
    if is_native(name) or name.startswith("requests."):
        return False
    return not qualified_name_errors("requests." + name)


def is_hugepages(name: str) -> bool:
    return name.startswith(_HUGEPAGES)


def overcommit_allowed(name: str) -> bool:
    """``IsOvercommitAllowed``: native resources other than hugepages."""
    return is_native(name) and not is_hugepages(name)


def _parse(raw: Any) -> quantity.Quantity:
    try:
        return quantity.parse(raw)
    except quantity.QuantityError as error:
        raise DecodeError(str(error)) from None


def _resource_name_errors(name: str, path: str) -> Iterator[FieldError]:
    """``validateContainerResourceName``."""
    for message in qualified_name_errors(name):
        yield FieldError(ErrorType.INVALID, path, message, go_quote(name))
    if "/" not in name:
        if name not in _STANDARD_CONTAINER_RESOURCES and not is_hugepages(name):
            yield FieldError(ErrorType.INVALID, path, "must be a standard resource for containers", go_quote(name))
    elif not is_native(name) and not is_extended(name):
        yield FieldError(ErrorType.INVALID, path, "doesn't follow extended resource name standard", go_quote(name))


def _quantity_errors(name: str, value: quantity.Quantity, path: str) -> Iterator[FieldError]:
    """``ValidateResourceQuantityValue``, and hugepages' whole pages."""
    if value.value < 0:
        yield FieldError(ErrorType.INVALID, path, "must be greater than or equal to 0", go_quote(str(value)))
    if (name in _INTEGER_RESOURCES or is_extended(name)) and not value.is_integer():
        yield FieldError(ErrorType.INVALID, path, "must be an integer", value.go_repr())


def _hugepage_errors(name: str, value: quantity.Quantity, path: str) -> Iterator[FieldError]:
    """``validateResourceQuantityHugePageValue``: a whole number of pages of the named size."""
    try:
        page = quantity.parse(name[len(_HUGEPAGES):])
    except quantity.QuantityError:
        page = None
    whole = page is not None and page.value > 0 and page.is_integer() and int(value.value) % int(page.value) == 0
    if not whole:
        detail = f"{value} is not positive integer multiple of {name}"
        yield FieldError(ErrorType.INVALID, path, detail, go_quote(str(value)))


def validate_resources(resources: Any, path: str) -> Iterator[FieldError]:
    """``ValidateResourceRequirements`` of one container's ``resources``."""
    if not isinstance(resources, dict):
        return
    limits = resources.get("limits") if isinstance(resources.get("limits"), dict) else {}
    requests = resources.get("requests") if isinstance(resources.get("requests"), dict) else {}
    lim_path, req_path = f"{path}.limits", f"{path}.requests"
    parsed_limits = {name: _parse(raw) for name, raw in limits.items() if raw is not None}
    qos, hugepages = False, False
    for name in sorted(parsed_limits):
        value, where = parsed_limits[name], f"{lim_path}[{name}]"
        yield from _resource_name_errors(name, where)
        yield from _quantity_errors(name, value, where)
        if is_hugepages(name):
            hugepages = True
            yield from _hugepage_errors(name, value, where)
        qos = qos or name in _QOS_RESOURCES
    for name in sorted(requests):
        if requests[name] is None:
            continue
        value, where = _parse(requests[name]), f"{req_path}[{name}]"
        yield from _resource_name_errors(name, where)
        yield from _quantity_errors(name, value, where)
        limit = parsed_limits.get(name)
        if limit is not None:
            if value.value != limit.value and not overcommit_allowed(name):
                yield FieldError(ErrorType.INVALID, req_path, f"must be equal to {name} limit of {limit}", go_quote(str(value)))
            elif value.value > limit.value:
                yield FieldError(ErrorType.INVALID, req_path, f"must be less than or equal to {name} limit of {limit}",
                                 go_quote(str(value)))
        elif not overcommit_allowed(name):
            yield FieldError(ErrorType.REQUIRED, lim_path, "Limit must be set for non overcommitable resources")
        if is_hugepages(name):
            hugepages = True
            yield from _hugepage_errors(name, value, where)
        qos = qos or name in _QOS_RESOURCES
    if hugepages and not qos:
        yield FieldError(ErrorType.FORBIDDEN, path, "HugePages require cpu or memory")


def validate_pod_spec(spec: Any, path: str) -> Iterator[FieldError]:
    """The resources of a pod spec's containers, then of its init containers."""
    if not isinstance(spec, dict):
        return
    for group in ("containers", "initContainers"):
        containers = spec.get(group)
        if not isinstance(containers, list):
            continue
        for i, container in enumerate(containers):
            if isinstance(container, dict):
                yield from validate_resources(container.get("resources"), f"{path}.{group}[{i}].resources")


def default_pod_requests(spec: Any) -> None:
    """``SetDefaults_Pod``: a container's limit without a request is its request too (pods only,
    not templates)."""
    if not isinstance(spec, dict):
        return
    for group in ("containers", "initContainers"):
        for container in spec.get(group) or []:
            resources = container.get("resources") if isinstance(container, dict) else None
            limits = resources.get("limits") if isinstance(resources, dict) else None
            if isinstance(limits, dict) and limits:
                requests = resources.setdefault("requests", {})
                if isinstance(requests, dict):
                    for name, value in limits.items():
                        requests.setdefault(name, value)


def validate(rt: ResourceType, obj: JsonObject) -> list[FieldError]:
    """What kube-apiserver's validation finds in ``obj`` (after defaulting), in its order:
    the metadata, then the pod spec or the workload's pod template. Raises :class:`DecodeError`
    for a quantity that does not parse."""
    errors = list(validate_metadata(obj.get("metadata")))
    if rt.custom:
        return errors
    if rt.resource in SELECTOR_KINDS and isinstance(obj.get("spec"), dict):
        errors.extend(validate_label_selector(obj["spec"].get("selector"), "spec.selector"))
    if rt.resource == Resource.PODS:
        errors.extend(validate_pod_spec(obj.get("spec"), "spec"))
    elif rt.resource in TEMPLATE_PATHS:
        template: Any = obj
        for key in TEMPLATE_PATHS[rt.resource]:
            template = template.get(key) if isinstance(template, dict) else None
        if isinstance(template, dict):
            where = ".".join(TEMPLATE_PATHS[rt.resource])
            errors.extend(validate_metadata(template.get("metadata"), f"{where}.metadata"))
            errors.extend(validate_pod_spec(template.get("spec"), f"{where}.spec"))
    return errors

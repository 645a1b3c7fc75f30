"""Reading a request and writing a response the way the real API server does: bodies as JSON,
YAML or protobuf, ``DeleteOptions``, field validation and patch types from the query, ``Table``
negotiation, and ``Status`` documents for errors and successes.

Kept apart from :mod:`.apiserver`, which routes requests to handlers, so that each handler reads
as what it does to the store.
"""

from __future__ import annotations

import json
from typing import Any

from usher.engine.backends.http_server import Request, Response
from usher.sandbox import validation
from usher.sandbox.podlogs import int_param
from usher.sandbox.store import ApiError, JsonObject, PatchType, Reason, Stored
from usher.sandbox.tables import IncludeObject
from usher.sandbox.routing import Verb


_JSON = "application/json"


# --------------------------------------------------------------------------- tables (see tables.py)


def include_object(request: Request) -> IncludeObject:
    value = request.param("includeObject") or IncludeObject.METADATA
    try:
        return IncludeObject(value)
    except ValueError:
        raise ApiError.bad_request(f"includeObject: unsupported value {value!r}") from None


def wants_table(request: Request) -> bool:
    accept = request.header("accept") or ""
    for alternative in accept.split(","):
        params = {p.strip() for p in alternative.split(";")[1:]}
        if "as=Table" in params and "g=meta.k8s.io" in params:
            return True
    return False


def check_acceptable(request: Request) -> None:
    accept = request.header("accept")
    if not accept:
        return
    for alternative in accept.split(","):
        media, *params = (p.strip() for p in alternative.split(";"))
        if media in (_JSON, "*/*", "application/*") and not any(
            p.startswith("as=") and p != "as=Table" for p in params
        ):
            return
    raise ApiError(406, Reason.NOT_ACCEPTABLE, f"only the following media types are accepted: {_JSON}")


# --------------------------------------------------------------------------- the server


def _json_body(request: Request) -> Any:
    content_type = (request.header("content-type") or _JSON).split(";")[0].strip()
    if content_type in ("application/vnd.kubernetes.protobuf", "application/yaml"):
        from usher.sandbox.protobuf import (
            decode_body,  # protobuf (built-in kinds) and YAML bodies
        )

        return decode_body(content_type, request.body)
    if "protobuf" in content_type:
        raise ApiError(415, Reason.UNSUPPORTED_MEDIA_TYPE, f"the sandbox does not accept {content_type} bodies")
    try:
        return json.loads(request.body or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError.bad_request(f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        # kube-apiserver's decoder stops at a depth of 10,000 with a 400 as well
        raise ApiError.bad_request("the request body is not valid JSON: exceeded max depth") from None


_FIELD_VALIDATION_OPERATIONS = {
    Verb.CREATE: validation.Operation.CREATE,
    Verb.UPDATE: validation.Operation.UPDATE,
    Verb.PATCH: validation.Operation.PATCH,
}


def field_validation(request: Request, verb: Verb) -> validation.FieldValidation:
    return validation.parse_directive(request.param("fieldValidation"), _FIELD_VALIDATION_OPERATIONS[verb])


def decoded_body(request: Request) -> tuple[Any, list[str]]:
    """The body as JSON and the fields it repeats (protobuf and YAML bodies repeat none)."""
    content_type = (request.header("content-type") or _JSON).split(";")[0].strip()
    if content_type.endswith("json"):
        try:
            return validation.decode_json(request.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ApiError.bad_request(f"the request body is not valid JSON: {exc}") from None
    return _json_body(request), []


def warned(response: Response, warnings: list[str]) -> Response:
    if header := validation.warning_header(warnings):
        response.headers["warning"] = header
    return response


def delete_options(request: Request) -> JsonObject:
    """``DeleteOptions`` from the body, or from the query (``gracePeriodSeconds``, ``propagationPolicy``)."""
    options = _json_body(request) if request.body.strip() else {}
    if not isinstance(options, dict):
        raise ApiError.bad_request("the request body must be a DeleteOptions object")
    if (grace := query_int(request, "gracePeriodSeconds")) is not None:
        options["gracePeriodSeconds"] = grace
    if policy := request.param("propagationPolicy"):
        options["propagationPolicy"] = policy
    grace = options.get("gracePeriodSeconds")
    if grace is not None and not isinstance(grace, int):
        raise ApiError.bad_request("gracePeriodSeconds: must be an integer")
    if options.get("orphanDependents") is True and "propagationPolicy" not in options:
        options["propagationPolicy"] = "Orphan"
    return options


def eviction_dry_run(query: list[str], in_body: list[str]) -> bool:
    """Whether an eviction is a dry run: ``?dryRun=All`` or ``deleteOptions.dryRun: [All]``
    (both given must agree; any other value is refused, as kube-apiserver refuses it)."""
    for values in (query, in_body):
        if any(v != "All" for v in values):
            raise ApiError.bad_request(f"Invalid dry run value: {', '.join(values)}; the only supported value is All")
    if query and in_body and query != in_body:
        raise ApiError.bad_request("the dryRun of the request and of the Eviction's deleteOptions disagree")
    return bool(query or in_body)


def body_object(request: Request) -> JsonObject:
    body = _json_body(request)
    if not isinstance(body, dict):
        raise ApiError.bad_request("the request body must be a JSON object")
    return body


def success(code: int, details: JsonObject | None = None) -> Response:
    status: JsonObject = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details:
        status["details"] = details
    if code != 200:
        status["code"] = code
    return Response.json(code, status)


def error_response(error: ApiError) -> Response:
    headers = {}
    if error.details and error.details.get("retryAfterSeconds") is not None:
        headers["retry-after"] = str(error.details["retryAfterSeconds"])
    return Response.json(error.code, error.status(), headers)


def stored_response(code: int, stored: Stored) -> Response:
    return Response(code, {"content-type": _JSON}, stored.raw)


def is_watch(request: Request) -> bool:
    return (request.param("watch") or "").lower() in ("true", "1")


def query_int(request: Request, name: str) -> int | None:
    return int_param(request.param(name), name)


def query_patch_type(request: Request) -> PatchType:
    content_type = (request.header("content-type") or "").split(";")[0].strip()
    try:
        return PatchType(content_type)
    except ValueError:
        accepted = ", ".join(PatchType)
        raise ApiError(
            415,
            Reason.UNSUPPORTED_MEDIA_TYPE,
            f"the body of the request was in an unknown format - accepted media types include: {accepted}",
        ) from None

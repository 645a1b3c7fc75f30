"""The API server's refusals: ``Status`` reasons, and :class:`ApiError`, which the store and
every handler raise and the HTTP front turns into a ``Status`` document with the right code.

Kept apart from the store so that the pieces around it (selectors, patches, validation,
admission) can refuse a request without importing the store itself.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from .kinds import ResourceType

JsonObject = dict[str, Any]


# --------------------------------------------------------------------------- errors


class Reason(StrEnum):
    """``Status.reason`` values (metav1.StatusReason) the sandbox answers with."""

    BAD_REQUEST = "BadRequest"
    UNAUTHORIZED = "Unauthorized"
    FORBIDDEN = "Forbidden"
    NOT_FOUND = "NotFound"
    METHOD_NOT_ALLOWED = "MethodNotAllowed"
    NOT_ACCEPTABLE = "NotAcceptable"
    ALREADY_EXISTS = "AlreadyExists"
    CONFLICT = "Conflict"
    GONE = "Gone"
    EXPIRED = "Expired"
    UNSUPPORTED_MEDIA_TYPE = "UnsupportedMediaType"
    INVALID = "Invalid"
    TOO_MANY_REQUESTS = "TooManyRequests"
    INTERNAL_ERROR = "InternalError"
    SERVICE_UNAVAILABLE = "ServiceUnavailable"
    TIMEOUT = "Timeout"


class ApiError(Exception):
    """A failed API call, carrying what goes into its ``Status`` body."""

    def __init__(self, code: int, reason: Reason | str, message: str, details: JsonObject | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> JsonObject:
        """The ``Status`` object a real API server would send."""
        return failure_status(self.code, self.reason, self.message, self.details)

    @classmethod
    def not_found(cls, rt: ResourceType, name: str) -> ApiError:
        return cls(404, Reason.NOT_FOUND, f'{rt.group_resource} "{name}" not found', _details(rt, name))

    @classmethod
    def already_exists(cls, rt: ResourceType, name: str) -> ApiError:
        return cls(409, Reason.ALREADY_EXISTS, f'{rt.group_resource} "{name}" already exists', _details(rt, name))

    @classmethod
    def conflict(cls, rt: ResourceType, name: str, why: str, subresource: str = "") -> ApiError:
        what = f"{rt.group_resource}/{subresource}" if subresource else rt.group_resource
        return cls(409, Reason.CONFLICT, f'Operation cannot be fulfilled on {what} "{name}": {why}', _details(rt, name))

    @classmethod
    def stale(cls, rt: ResourceType, name: str) -> ApiError:
        why = "the object has been modified; please apply your changes to the latest version and try again"
        return cls.conflict(rt, name, why)

    @classmethod
    def invalid(cls, rt: ResourceType, name: str, field_path: str, reason: str, detail: str) -> ApiError:
        message = f'{rt.kind} "{name}" is invalid: {field_path}: {detail}'
        cause = {"reason": reason, "message": detail, "field": field_path}
        return cls(422, Reason.INVALID, message, {"name": name, "group": rt.group, "kind": rt.kind, "causes": [cause]})

    @classmethod
    def forbidden(cls, resource: str, name: str, why: str, group: str = "") -> ApiError:
        """An admission plugin's refusal: ``<resource> "<name>" is forbidden: <why>``."""
        details = {"name": name, **({"group": group} if group else {}), "kind": resource}
        return cls(403, Reason.FORBIDDEN, f'{resource}{"." + group if group else ""} "{name}" is forbidden: {why}', details)

    @classmethod
    def bad_request(cls, message: str) -> ApiError:
        return cls(400, Reason.BAD_REQUEST, message)

    @classmethod
    def expired(cls, message: str) -> ApiError:
        return cls(410, Reason.EXPIRED, message)


def failure_status(code: int, reason: str, message: str, details: JsonObject | None = None) -> JsonObject:
    """A ``Status`` with ``status: Failure``."""
    status: JsonObject = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message}
    if reason:
        status["reason"] = str(reason)
    if details:
        status["details"] = details
    status["code"] = code
    return status


def _details(rt: ResourceType, name: str) -> JsonObject:
    details: JsonObject = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = str(rt.resource)
    return details


def _patch_failed(message: str) -> ApiError:
    """A patch that could not be applied: ``422`` with the reason as a cause, as the API answers."""
    cause = {"reason": "UnexpectedServerResponse", "message": message}
    return ApiError(
        422, Reason.INVALID, "the server rejected our request due to an error in our request", {"causes": [cause]}
    )

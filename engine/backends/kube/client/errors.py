"""What the Kubernetes API client raises, and how a failure ``Status`` becomes one of them.

Two families, because callers act on them differently: :class:`ClusterAccessError` means there is
no usable cluster at all (no credentials, no answer, a certificate that does not verify) and its
``str()`` is one line meant for the user; :class:`ApiError` is a request the API server answered
with a failure ``Status`` (code, reason, message, retry_after), with a subclass for each code a
caller acts on (a 409 it resolves, a 410 that means "list again", a 429 from a
PodDisruptionBudget that must not be repeated). The mapping from code and ``Status`` to the class
lives here alone (:func:`api_error`), for requests and watch streams alike.
"""

from __future__ import annotations

from http import HTTPStatus

from .values import Obj

#: ends a "there is no usable cluster" message: where to go instead
DEMO_HINT = "or run `usher demo` to try usher on a simulated cluster"


class KubeError(Exception):
    """Anything this package raises about talking to the Kubernetes API."""


class ClusterAccessError(KubeError):
    """usher cannot use a cluster at all; ``str(error)`` is one line meant for the user."""


class KubeConfigError(ClusterAccessError):
    """No usable credentials: missing kubeconfig, unknown context, bad TLS material."""


class ClusterUnreachable(ClusterAccessError):
    """The API server cannot be reached (after retries), or the connection broke."""


class ServerNotTrusted(ClusterUnreachable):
    """The API server's certificate does not verify against the CA usher was given (the
    kubeconfig's ``certificate-authority``/``-data``, else the system's) or not for its name:
    nothing was sent, and nothing is retried, since a repeat meets the same certificate."""


class NotSent(KubeError):
    """The caller's ``may_send`` said no before an attempt: the request (or its repeat) was not
    sent. An earlier attempt may still have reached the server."""


class ApiError(KubeError):
    """A request the API server answered with a failure ``Status``."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        retry_after: float | None = None,
        causes: tuple[Obj, ...] = (),
    ) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
        self.causes = causes


class Unauthorized(ApiError):
    """401: the credentials were rejected (even after reloading them)."""


class Forbidden(ApiError):
    """403: the identity may not do this."""


class NotFound(ApiError):
    """404: no such object."""


class Conflict(ApiError):
    """409: a stale resourceVersion, or a pod already bound elsewhere."""


class AlreadyExists(Conflict):
    """409 with reason AlreadyExists: a create found the name taken."""


class Gone(ApiError):
    """410: the resourceVersion (or list continue token) is too old; list again."""


class TooManyRequests(ApiError):
    """429: throttled; ``retry_after`` says when to come back."""


class DisruptionBudgetBlocked(TooManyRequests):
    """An eviction refused because it would violate a PodDisruptionBudget."""


_ERROR_BY_CODE: dict[int, type[ApiError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    429: TooManyRequests,
}


def api_error(code: int, status: Obj | None, retry_after_header: str | None = None) -> ApiError:
    """The :class:`ApiError` for an HTTP code and the ``Status`` body that came with it."""
    status = status if isinstance(status, dict) else {}
    details = status.get("details") or {}
    reason = status.get("reason") or phrase(code)
    message = status.get("message") or reason
    causes = tuple(details.get("causes") or ())
    retry_after = _seconds(retry_after_header)
    if retry_after is None:
        retry_after = _seconds(details.get("retryAfterSeconds"))
    if reason == "AlreadyExists":
        kind: type[ApiError] = AlreadyExists
    elif code == 429 and _blames_disruption_budget(message, causes):
        kind = DisruptionBudgetBlocked
    else:
        kind = _ERROR_BY_CODE.get(code, ApiError)
    return kind(code, reason, message, retry_after, causes)


def phrase(code: int) -> str:
    """The reason phrase of an HTTP code without spaces (``TooManyRequests``), as a Status reason."""
    try:
        return HTTPStatus(code).phrase.replace(" ", "")
    except ValueError:
        return "Unknown"


def _seconds(value: object) -> float | None:
    """A delay in seconds from a Retry-After header or retryAfterSeconds; None if absent or odd."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return seconds if seconds > 0 else None


def _blames_disruption_budget(message: str, causes: tuple[Obj, ...]) -> bool:
    # metav1.StatusCause serialises its Type as "reason"
    if any(cause.get("reason") == "DisruptionBudget" for cause in causes):
        return True
    return "disruption budget" in message.lower()


def one_line(error: BaseException) -> str:
    """An exception's message on one line (its type's name when it has none)."""
    return " ".join(str(error).split()) or type(error).__name__

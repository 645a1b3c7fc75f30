"""Faults a test injects into the sandbox's API server, and the log of the requests it served.

A :class:`Fault` matches requests by method, path pattern and watch-ness and answers them with
an error, a delay, no answer at all, a stalled or a dropped connection, a given number of times
or with a given probability; each request
the server answered is kept as a :class:`RequestRecord` so that a test can count what a client
did. Kept apart from the server so that the rules of matching live beside their records.
"""

from __future__ import annotations

import fnmatch
import logging
import random
from dataclasses import dataclass, field
from enum import StrEnum

from usher.engine.backends.http_server import Request
from usher.sandbox.store import ApiError, Reason

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- faults and the request log


class FaultKind(StrEnum):
    """What an injected fault does to a matching request."""

    ERROR = "error"
    """Answer with ``status`` (a Status body; ``Retry-After`` for 429; an ERROR event for a 410 watch)."""
    DELAY = "delay"
    """Wait ``delay`` seconds, then serve the request normally."""
    HANG = "hang"
    """Never answer: the request stays open until the client gives up."""
    STALL = "stall"
    """A watch's stream starts (``200``) and then nothing comes, no events, no bookmarks, not even
    its end at ``timeoutSeconds``: a peer that went away without closing the connection."""
    DROP = "drop"
    """Close the connection: a watch after ``after_events`` events, any other request at once."""


@dataclass(slots=True)
class Fault:
    """A fault rule: it matches a method and a path pattern and fires ``times`` times or forever."""

    kind: FaultKind
    method: str | None = None
    path: str = "*"
    """An ``fnmatch`` pattern over the request path, e.g. ``*/pods/*/binding``."""
    watch: bool | None = None
    """``True``: watch requests only; ``False``: never watches; ``None``: both."""
    times: int | None = None
    """How many times it fires; ``None``: every time it matches."""
    probability: float = 1.0
    """The chance that a matching request is hit, drawn from the rule's own seeded RNG, so which
    matching requests it hits does not depend on how other requests interleave with them."""
    status: int = 500
    retry_after: int | None = None
    """``ERROR``: seconds sent in ``Retry-After`` and the Status's ``retryAfterSeconds``."""
    delay: float = 0.0
    after_events: int = 0
    fired: int = 0
    """How many times it has fired so far."""
    rng: random.Random = field(default_factory=lambda: random.Random(0), repr=False)

    def matches(self, request: Request, watch: bool) -> bool:
        if self.times is not None and self.fired >= self.times:
            return False
        if self.method is not None and self.method.upper() != request.method:
            return False
        if self.watch is not None and self.watch != watch:
            return False
        return fnmatch.fnmatchcase(request.path, self.path)


@dataclass(slots=True)
class RequestRecord:
    """One request as the server saw it; ``status`` is ``None`` while (or if never) answered."""

    method: str
    path: str
    query: dict[str, str]
    watch: bool
    status: int | None = None


_REASONS = {
    400: Reason.BAD_REQUEST,
    401: Reason.UNAUTHORIZED,
    404: Reason.NOT_FOUND,
    405: Reason.METHOD_NOT_ALLOWED,
    409: Reason.CONFLICT,
    410: Reason.EXPIRED,
    422: Reason.INVALID,
    429: Reason.TOO_MANY_REQUESTS,
    500: Reason.INTERNAL_ERROR,
    503: Reason.SERVICE_UNAVAILABLE,
    504: Reason.TIMEOUT,
}


def fault_error(fault: Fault) -> ApiError:
    details = {"retryAfterSeconds": fault.retry_after} if fault.retry_after is not None else None
    reason = _REASONS.get(fault.status, "")
    return ApiError(fault.status, reason, f"injected fault: {fault.status} {reason}".strip(), details)

"""When the Kubernetes API client repeats a request, and how long it waits first.

The rules (bounded attempts, :class:`RetryPolicy`):

- 429 is retried for every verb (the server refused the request before doing anything),
  waiting ``Retry-After`` when the server gives one; except an eviction refused by a
  PodDisruptionBudget, which is raised at once as :class:`~.errors.DisruptionBudgetBlocked`.
- A connection that was never made is retried for every verb.
- 5xx, timeouts and broken connections are ambiguous (the server may have acted), so they are
  retried with capped exponential backoff and jitter only for requests that are safe to repeat:
  GET, PUT (its resourceVersion precondition turns a repeat into a 409), DELETE, merge and
  strategic-merge PATCH, and the POSTs whose repeat is recognisable: a binding (409 "already
  assigned" to the node we asked for is success), an eviction, an event, an access review.

Which failures count as "never sent" is the transport's to say (it knows its HTTP library's
exceptions); what a repeat waits and whether an answered failure is repeated is decided here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .errors import ApiError, DisruptionBudgetBlocked, TooManyRequests


@dataclass(frozen=True, slots=True)
class Backoff:
    """Capped exponential backoff with jitter: try n waits between half and all of
    ``min(cap, base * 2**(n-1))`` seconds, so that many clients do not retry in step."""

    base: float = 0.2
    cap: float = 10.0

    def delay(self, attempt: int) -> float:
        ceiling = min(self.cap, self.base * 2 ** min(attempt - 1, 32))
        return random.uniform(ceiling / 2, ceiling)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long requests are retried; ``Retry-After`` waits are capped too."""

    attempts: int = 5
    backoff: Backoff = field(default_factory=Backoff)
    max_retry_after: float = 30.0

    def delay_after(self, error: ApiError, attempt: int, retry_ambiguous: bool) -> float | None:
        """How long to wait before repeating a request the server answered with ``error`` (its
        ``attempt``-th try), or None to give up; ``retry_ambiguous``: the request is safe to repeat."""
        if attempt >= self.attempts or isinstance(error, DisruptionBudgetBlocked):
            return None
        if not (isinstance(error, TooManyRequests) or (error.code >= 500 and retry_ambiguous)):
            return None
        if error.retry_after is not None:
            return min(error.retry_after, self.max_retry_after)
        return self.backoff.delay(attempt)

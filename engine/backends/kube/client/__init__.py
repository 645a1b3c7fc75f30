"""The Kubernetes API client of usher's kube backend: its public face.

Everything usher says to a cluster goes through :class:`KubeClient`. The client is split by
concern, each module importing only those listed before it, and this package re-exports what
the rest of usher uses, so that ``from usher.engine.backends.kube.client import KubeClient``
(and every name below) is the one way in:

- :mod:`.values`: objects as decoded JSON, resource paths, watch events, Event references,
  timestamps and the API's string enums (no I/O, no aiohttp);
- :mod:`.errors`: :class:`KubeError` and its two families, :class:`ClusterAccessError` (no usable
  cluster; a one-line message for the user) and :class:`ApiError` (a failure ``Status``);
- :mod:`.retry`: when a failed request is repeated and how long it waits (:class:`RetryPolicy`);
- :mod:`.credentials`: kubeconfig or in-cluster credentials through ``kubernetes.config``, TLS
  material and the proxy (:class:`Credentials`);
- :mod:`.transport`: connections, the Authorization header on each request, retries, contact
  reports (``Transport``);
- :mod:`.watching`: one watch request read as a stream of :class:`WatchEvent`;
- :mod:`.api`: :class:`KubeClient`, the generic verbs and the scheduler's calls (bind, evict,
  cordon, pod conditions, Events, access reviews).
"""

from __future__ import annotations

from .api import KubeClient
from .credentials import Credentials
from .errors import (
    DEMO_HINT,
    AlreadyExists,
    ApiError,
    ClusterAccessError,
    ClusterUnreachable,
    Conflict,
    DisruptionBudgetBlocked,
    Forbidden,
    Gone,
    KubeConfigError,
    KubeError,
    NotFound,
    NotSent,
    ServerNotTrusted,
    TooManyRequests,
    Unauthorized,
    api_error,
)
from .retry import Backoff, RetryPolicy
from .transport import AUTH_REFRESH, KEEPALIVE, WATCH_CONNECTIONS, ContactListener, MaySend
from .values import (
    COMPONENT,
    EVENTS,
    LEASES,
    NODES,
    PODS,
    SELF_SUBJECT_ACCESS_REVIEWS,
    ConditionStatus,
    EventType,
    Obj,
    ObjectList,
    ObjectRef,
    Objs,
    PatchType,
    Resource,
    WatchEvent,
    WatchEventType,
    format_micro_time,
    format_time,
    utcnow,
)
from .watching import WATCH_READ_GRACE

__all__ = [
    "AUTH_REFRESH",
    "COMPONENT",
    "DEMO_HINT",
    "EVENTS",
    "KEEPALIVE",
    "LEASES",
    "NODES",
    "PODS",
    "SELF_SUBJECT_ACCESS_REVIEWS",
    "WATCH_CONNECTIONS",
    "WATCH_READ_GRACE",
    "AlreadyExists",
    "ApiError",
    "Backoff",
    "ClusterAccessError",
    "ClusterUnreachable",
    "ConditionStatus",
    "Conflict",
    "ContactListener",
    "Credentials",
    "DisruptionBudgetBlocked",
    "EventType",
    "Forbidden",
    "Gone",
    "KubeClient",
    "KubeConfigError",
    "KubeError",
    "MaySend",
    "NotFound",
    "NotSent",
    "Obj",
    "ObjectList",
    "ObjectRef",
    "Objs",
    "PatchType",
    "Resource",
    "RetryPolicy",
    "ServerNotTrusted",
    "TooManyRequests",
    "Unauthorized",
    "WatchEvent",
    "WatchEventType",
    "api_error",
    "format_micro_time",
    "format_time",
    "utcnow",
]

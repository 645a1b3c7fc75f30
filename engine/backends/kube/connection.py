"""How well the controller is in touch with the API server, summed up over its informers.

Each :class:`~usher.engine.backends.kube.informer.Informer` says whether its cache is being kept
current (``connected``), when it last was (``last_contact``) and, when not, since when it has
known it lost contact (``disconnected_since``), all in wall-clock seconds.
:func:`connection_of` turns those into one :class:`Connection` for the console's header and for
``/readyz``:

- ``live``: every informer is connected;
- ``reconnecting``: some informer lost contact, less than ``stale_after`` seconds ago, and is
  trying again (after an API server restart the informers resume or list again by themselves);
- ``stale``: contact was lost longer ago than that; what is shown is as of ``since``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from ...channel import Connection, ConnectionState

STALE_AFTER = 30.0
"""Seconds without contact after which reconnecting becomes stale."""


class HasContact(Protocol):
    @property
    def connected(self) -> bool: ...

    @property
    def last_contact(self) -> float: ...

    @property
    def disconnected_since(self) -> float | None: ...


def connection_of(informers: Iterable[HasContact], now: float, stale_after: float = STALE_AFTER) -> Connection:
    """The connection as the informers see it, at wall-clock time ``now``."""
    informers = list(informers)
    latest = max((inf.last_contact for inf in informers), default=now)
    lost = [inf for inf in informers if not inf.connected]
    if not lost:
        return Connection(ConnectionState.LIVE, latest, latest)
    since = min(inf.last_contact if inf.disconnected_since is None else inf.disconnected_since for inf in lost)
    state = ConnectionState.STALE if now - since > stale_after else ConnectionState.RECONNECTING
    return Connection(state, since, latest)

"""What one sandbox controller is (``Part``) and what it may ask of the manager that runs it (``Host``).

Each controller stand-in (the kubelet, the node lifecycle controller, the default scheduler, the
workload controllers, the operators) is a ``Part``: it marks itself dirty on the store changes it
cares about and reconciles when the manager asks. The manager, ``controllers.Controllers``,
imports every part to build them; the parts see it only through the ``Host`` protocol here (the
store, the clock, timers, and a guard that keeps one broken object from stopping the cluster).
So the parts depend on this small module, never on the manager, and no part imports the module
that imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Protocol

from .store import Change, Store

JsonObject = dict[str, Any]


class Host(Protocol):
    """The manager as its parts see it."""

    store: Store
    #: pods the parts leave alone (a scenario's pods, which the World runs itself)
    skip: Callable[[JsonObject], bool]

    def now(self) -> float:
        """The store's clock."""
        ...

    def at(self, when: float, key: Hashable, fn: Callable[[], None]) -> None:
        """Run ``fn`` once the clock reaches ``when`` (replacing the timer of the same ``key``)."""
        ...

    def cancel(self, key: Hashable) -> None:
        """Forget the timer of ``key``."""
        ...

    def guard(self, fn: Callable[[], None]) -> None:
        """Run ``fn``, logging and recording what it raises instead of letting it stop the loop."""
        ...


class Part:
    """One controller: marks itself dirty on the changes it cares about, reconciles when asked."""

    resources: tuple[str, ...] = ()

    def __init__(self, mgr: Host) -> None:
        self.mgr = mgr
        self.store = mgr.store
        self._dirty = False

    def on_change(self, change: Change) -> None:
        if change.rt.resource in self.resources:
            self._dirty = True

    def resync(self) -> None:
        self._dirty = True

    def dirty(self) -> bool:
        return self._dirty

    def reconcile(self) -> None:
        self._dirty = False
        self.sync()

    def sync(self) -> None:
        raise NotImplementedError

    def stored(self, resource: str) -> list[Any]:
        return self.store.list(resource).items

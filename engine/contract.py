"""What the console may rely on of a controller: one declared contract for a replay and a cluster.

The console drives two controllers, the replay's (``engine.controller.Controller``) and the
cluster's (``engine.backends.kube.controller.KubeController``). Instead of probing each for what
it happens to have, it talks to a :class:`ConsoleController`: the members both implement, plus a
set of :class:`~usher.engine.enums.Capability` flags for what only one of them can do (a replay's
speed and pause; a cluster's pods, read from the API server, and its operator's RBAC). A member
whose capability a controller lacks still exists there and answers plainly (no pods, nothing
forbidden, no connection to lose), so the console reads every member without asking first, and
asks the flags only where the two must behave differently.

It is a ``typing.Protocol`` (structural), not a base class, so the controllers need not import
this module: the contract sits above them and below the console, and adds no import circle.
:func:`require` checks a controller against it when the console starts, naming what is missing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from .enums import Action, Capability

if TYPE_CHECKING:
    from .config_errors import ConfigRefusal
    from .channel import Command, Connection, Snapshot
    from .enums import PendingReason
    from .policy.registry import Policy
    from .state import ClusterState
    from .telemetry import TelemetryStore


@runtime_checkable
class ConsoleController(Protocol):
    """A controller as the console sees it: state to show, commands to send, a loop to run."""

    #: what only some controllers can do (``Capability``): the console offers what is here
    capabilities: frozenset[Capability]
    #: simulated seconds per wall second (``Capability.PACE``; None: flat out, or a cluster)
    speed: float | None
    #: a paused controller takes no step (the console pauses only one with ``Capability.PACE``)
    paused: bool
    #: the replay is over, or the cluster controller stopped
    done: bool
    #: set once the controller's view is complete (a cluster: every informer listed; a replay: at once)
    synced: asyncio.Event
    #: live GPU telemetry for the views
    telemetry: TelemetryStore
    #: the ConfigMaps usher refused now, by name (a replay reads none: always empty)
    config_refusals: Mapping[str, ConfigRefusal]

    @property
    def state(self) -> ClusterState:
        """The engine's state now (a cluster's mirror may replace it on a rebuild)."""
        ...

    @property
    def now(self) -> float:
        """The controller's clock: simulated seconds for a replay, wall-clock on a cluster."""
        ...

    @property
    def policy(self) -> Policy:
        """The scheduling policy the engine runs (the quota messages depend on its borrowing)."""
        ...

    @property
    def connection(self) -> Connection | None:
        """How current the view is: live, reconnecting or stale (None: nothing to lose, a replay)."""
        ...

    def snapshot(self) -> Snapshot:
        """What watchers see now."""
        ...

    def subscribe(self, callback: Callable[[Snapshot], None]) -> None:
        """Call ``callback`` with a ``Snapshot`` after every step."""
        ...

    def post(self, cmd: Command) -> asyncio.Future[str]:
        """Queue an operator command for the running loop; the future gives its result."""
        ...

    async def run(self, speed: float | None = ...) -> None:
        """The controller's loop, run in the console's event loop."""
        ...

    def verdicts(self) -> dict[int, tuple[PendingReason, str]]:
        """Why each waiting job waits, as the scheduler wrote it where ``kubectl`` reads it, by job
        id; it wins over what the console works out itself (a replay writes none: empty)."""
        ...

    def pods_of_job(self, name: str) -> list[tuple[str, str, str | None]]:
        """The pods of a job: name, phase, node (a replay has no pods: empty)."""
        ...

    async def pod_yaml(self, job_name: str) -> str:
        """The job's pods as YAML from the API server (``Capability.PODS``; else ``CommandError``)."""
        ...

    async def pod_logs(self, job_name: str) -> list[tuple[str, str, str | None]]:
        """The last lines of the job's pods' logs: (title, text, refusal) each
        (``Capability.PODS``; else ``CommandError``)."""
        ...

    async def forbidden_actions(self) -> dict[Action, str]:
        """The operator actions this identity may not carry out, with the reason
        (``Capability.PERMISSIONS``; a replay forbids nothing: empty)."""
        ...


def _members(protocol: type) -> tuple[str, ...]:
    """The names a protocol declares: its annotated attributes, properties and methods."""
    names = set(protocol.__dict__.get("__annotations__", {}))
    names |= {n for n, v in protocol.__dict__.items() if not n.startswith("_") and (callable(v) or isinstance(v, property))}
    return tuple(sorted(names))


#: every member a controller must have for the console
MEMBERS: tuple[str, ...] = _members(ConsoleController)


def missing_members(controller: object) -> list[str]:
    """The contract's members ``controller`` lacks (empty: it has them all)."""
    return [name for name in MEMBERS if not hasattr(controller, name)]


def require(controller: object) -> ConsoleController:
    """``controller`` as a :class:`ConsoleController`; ``TypeError`` naming what it lacks, or a
    ``capabilities`` that is not a frozenset of ``Capability``."""
    kind = type(controller).__name__
    missing = missing_members(controller)
    if missing:
        raise TypeError(f"{kind} is not a controller the console can drive: it lacks {', '.join(missing)}")
    caps = getattr(controller, "capabilities")
    if not isinstance(caps, frozenset) or not all(isinstance(c, Capability) for c in caps):
        raise TypeError(f"{kind}.capabilities must be a frozenset of Capability, not {caps!r}")
    assert isinstance(controller, ConsoleController)
    return controller

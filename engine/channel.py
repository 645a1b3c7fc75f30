"""What a controller and the console exchange, below both controllers and the contract.

The console drives the replay's controller and the cluster's through ``engine.contract``; what
travels between them are the values here, so that neither the console nor the contract needs a
controller's own module: the operator's :class:`Command` (answered through its ``reply``, or
refused with a :class:`CommandError`), the :class:`Snapshot` a controller publishes after each step
with the :class:`OutsideJob` records of pods it answers for outside the engine's queue, and, for a
cluster, the :class:`Connection` to the API server that the header shows.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from enum import StrEnum

from .enums import Action, JobState, PendingReason
from .state import MILLI, AuditEntry, ClusterState


class CommandError(ValueError):
    """An operator command that names nothing the engine knows, or makes no sense now."""


@dataclass(slots=True)
class Command:
    """An operator command posted to a running controller (the console's channel)."""

    action: Action
    node: str | None = None
    job: str | None = None
    queue: str | None = None
    quota: dict[str, float] | None = None
    borrowing_limit: dict[str, float] | None = None
    lending_limit: dict[str, float] | None = None
    actor: str = "operator"
    #: set by ``post``: resolves to the command's result text, or raises its ``CommandError``
    reply: asyncio.Future[str] | None = field(default=None, compare=False, repr=False)


def settle_reply(cmd: Command, result: str | None = None, error: BaseException | None = None) -> None:
    """Tell whoever posted ``cmd`` how it went (nothing to do for commands nobody awaits)."""
    if cmd.reply is None or cmd.reply.done():
        return
    if error is not None:
        cmd.reply.set_exception(error)
    else:
        cmd.reply.set_result(result or "")


@dataclass(slots=True, frozen=True)
class OutsideJob:
    """A job the backend is responsible for that the engine's state does not show as it is.

    On a cluster usher answers for every pod that names it as scheduler, but keeps some out of
    its engine's queue: pods naming a queue that does not exist or that their namespace may not
    use, pods it cannot schedule as written, a gang still short of pods or backing off after a
    refused bind. Each is one of these, with usher's reason and the message that says the fix
    (what the pods' ``PodScheduled`` condition carries). ``state`` says which:

    - ``PENDING``: its pods wait outside the engine's queue (no engine job stands for them);
    - ``RUNNING``: its engine job runs, and these pods of the gang wait beside the run (an
      elastic gang's extras, a gang being bound or stopped): waiting pods, not a waiting job;
    - ``FINISHED``: every pod of it has ended, and no engine job stands for it (they ended
      before this controller started watching, or their job was compacted away).

    A replay's jobs all reach the engine: it has none.
    """

    name: str
    queue: str
    state: JobState
    #: pods waiting (PENDING, RUNNING) or ended (FINISHED)
    pods: int
    gpu_milli: int
    priority: int
    #: when its first pod was created
    since: float
    reason: PendingReason | None = None
    message: str | None = None


@dataclass(slots=True)
class Snapshot:
    """What watchers see after each step."""

    now: float
    running: int
    pending: int
    finished: int
    gpus_allocated: float
    gpus_schedulable: int
    audit_tail: list[AuditEntry] = field(default_factory=list)
    #: the jobs the backend answers for that the engine's counts above leave out (``OutsideJob``)
    outside: tuple[OutsideJob, ...] = ()


def snapshot_of(st: ClusterState, now: float, outside: tuple[OutsideJob, ...] = ()) -> Snapshot:
    """What watchers see of a state at ``now`` (the replay and the kube controller alike), and
    the jobs the backend answers for outside it (``OutsideJob``)."""
    return Snapshot(
        now=now,
        running=len(st.running),
        pending=sum(len(q.pending) for q in st.queues.values()),
        finished=sum(1 for j in st.jobs if j.state == JobState.FINISHED),
        gpus_allocated=st.schedulable_used_milli / MILLI,
        gpus_schedulable=st.schedulable_gpu_count,
        audit_tail=st.audit[-20:],
        outside=outside,
    )


class ConnectionState(StrEnum):
    LIVE = "live"
    RECONNECTING = "reconnecting"
    STALE = "stale"


@dataclass(frozen=True, slots=True)
class Connection:
    """``since``: when contact was found lost, the earliest over the informers that lost it (live:
    the latest contact); ``last_contact``: the latest moment any informer was in contact."""

    state: ConnectionState
    since: float
    last_contact: float

    @property
    def live(self) -> bool:
        return self.state is ConnectionState.LIVE

    def seconds_without_contact(self, now: float) -> float:
        """How long since contact was lost (0 while live)."""
        return 0.0 if self.live else max(0.0, now - self.since)

"""A gang (the pods of one job) as the mirror records it, and its life as one phase.

A gang's life on a cluster runs through kube-scheduler's bind steps, per gang: the engine decides
(its run holds the room: Reserve), usher waits for what must be true before its pods may start
(the pods it evicted gone: PreBind), binds every pod (Bind), and undoes a gang that did not bind
whole (Unreserve). A gang that loses a member is torn down whole, or completed where a
PodDisruptionBudget keeps its pods running. Each of those is one ``GangPhase``, and
``TRANSITIONS`` is the only place that says which phase may follow which: ``Mirror.move`` refuses
any other move, loudly. A new step between "decided" and "bound" (volumes, device claims) is a new
phase and a new row here, not another flag beside the others.

What is not a phase stays a field: why the gang is in its phase (``Gang.why``), the pods a refused
teardown binds instead (``to_bind``), retry times, and ``partial`` (a count seen at adoption:
fewer of its pods on nodes than it needs, whoever is binding them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Mapping

from ...enums import PendingReason
from ...state import Job
from .objects import PodView


class GangPhase(StrEnum):
    """Where a gang is in its life on the cluster (what usher has in flight for it)."""

    #: nothing of usher's in flight: waiting (in its queue or outside it) or running whole; the
    #: engine's job says which
    IDLE = "idle"
    #: Reserve: a bind task holds the engine's decision and, in PreBind, waits for its room (the
    #: pods usher evicted from its nodes to go); it can still be called off
    RESERVED = "reserved"
    #: called off while reserved (preempted, held by an operator, a node cordoned or gone): no
    #: bind is sent; the task winds down and the gang queues again (``Gang.why``: what called it off)
    CALLED_OFF = "called-off"
    #: Bind: the binds are sent; nothing calls them off, and the job is no victim until they end
    BINDS_SENT = "binds-sent"
    #: Unreserve: binds failed (or the pods were evicted) while its bind task is still in flight;
    #: the pods that did bind are being evicted (``Gang.why``: why)
    UNRESERVING = "unreserving"
    #: torn down: its bound pods are evicted, and its run ends when the last is gone (``Gang.why``)
    TEARDOWN = "teardown"
    #: torn down, but a PodDisruptionBudget refused every eviction: the pods it lacks are placed
    #: and bound instead (``Gang.to_bind``), so the pods kept running are not left without peers
    COMPLETING = "completing"


_ = GangPhase
#: every phase, and the phases it may move to; any other move is refused (``Mirror.move``)
TRANSITIONS: Mapping[GangPhase, frozenset[GangPhase]] = MappingProxyType({
    # admitted (a bind task reserves), grown by an elastic gang's waiting pods (sent at once),
    # a member lost, or found partly bound (completed where a budget keeps its pods)
    _.IDLE: frozenset({_.RESERVED, _.BINDS_SENT, _.TEARDOWN, _.COMPLETING}),
    # called off, the binds sent, failed before any was sent with pods bound, or the task ended
    _.RESERVED: frozenset({_.CALLED_OFF, _.BINDS_SENT, _.UNRESERVING, _.IDLE}),
    # the task winds down: nothing was sent, nothing to undo
    _.CALLED_OFF: frozenset({_.IDLE}),
    # some binds failed (or an operator evicted its pods meanwhile), or all bound and the task ended
    _.BINDS_SENT: frozenset({_.UNRESERVING, _.IDLE}),
    # the task ended (the teardown goes on), every eviction was refused (completed instead), or
    # no eviction went through at all (whole again: back to the step it was in)
    _.UNRESERVING: frozenset({_.TEARDOWN, _.COMPLETING, _.BINDS_SENT, _.RESERVED}),
    # the last pod gone (or none could be evicted, or a rebuild judges it again), or every
    # eviction refused by a budget: completed instead
    _.TEARDOWN: frozenset({_.IDLE, _.COMPLETING}),
    # completed (or its run ended, or it is taken in again, or a rebuild judges it again)
    _.COMPLETING: frozenset({_.IDLE}),
})
del _

#: the phases in which a bind task of the gang's runs (two must never bind one gang)
BINDING = frozenset({GangPhase.RESERVED, GangPhase.CALLED_OFF, GangPhase.BINDS_SENT, GangPhase.UNRESERVING})
#: the phases in which its bound pods are being evicted
TORN_DOWN = frozenset({GangPhase.UNRESERVING, GangPhase.TEARDOWN, GangPhase.COMPLETING})


class IllegalMove(RuntimeError):
    """A move ``TRANSITIONS`` does not allow: a bug in usher, never a state to go on from."""


@dataclass(slots=True)
class Gang:
    """The pods of one job, the engine job standing for them, and where the gang is in its life."""

    key: str
    seq: int
    pods: dict[str, PodView] = field(default_factory=dict)
    size: int | None = None
    #: the fewest pods that may start (an elastic workload's minimum); None: all ``size`` of them
    minimum: int | None = None
    #: the owner makes the pods beyond ``minimum`` only once those run: it starts at its minimum
    staged: bool = False
    #: how the gang is shown (``PyTorchJob research/llama-ft``); None: by its key
    title: str | None = None
    #: which incarnation of its key the gang is (its top owner's uid, a lone pod's); None: a gang of
    #: labels only, which no object stands for
    uid: str | None = None
    #: what the gang's size waits for (its owner not seen yet); None: nothing
    waiting_for: str | None = None
    job: Job | None = None
    #: pod names per engine pod group, in the order the job's groups were built
    group_pods: list[list[str]] = field(default_factory=list)
    #: where the gang is in its life; moved only by ``Mirror.move`` (``TRANSITIONS``)
    phase: GangPhase = GangPhase.IDLE
    #: why it is in its phase (called off, torn down, completing); None in the others
    why: str | None = None
    #: why the gang is not in the engine's queue (None when it is, or is running)
    reason: PendingReason | None = None
    message: str | None = None
    #: a rollback (some binds failed) or a teardown whose evictions a PodDisruptionBudget refused:
    #: the pods left unbound and the node and GPUs each is to be bound to, to complete the gang
    to_bind: dict[str, tuple[str, list[int]]] = field(default_factory=dict)
    #: when the controller may next try to complete it (monotonic seconds), and the wait before
    complete_at: tuple[float, float] = (-math.inf, 0.0)
    #: its binds failed: not admitted again before this moment (monotonic seconds), the wait
    #: that led to it (doubled at the next failure), and the first error of the last try
    bind_retry: tuple[float, float] = (-math.inf, 0.0)
    bind_error: str | None = None
    #: pods of the gang that ran to completion (a finished member is not a lost one)
    completed: set[str] = field(default_factory=set)
    #: pods that were deleted while bound, and how they were last seen
    departed: dict[str, str] = field(default_factory=dict)
    #: fewer of its pods are on nodes than it needs, as counted when it was adopted: being bound
    #: (by the leader, seen from a standby or a console) or left half-bound by a leader that died
    partial: bool = False
    #: an eviction of its pods was refused (a PodDisruptionBudget): until then it is neither a
    #: victim nor a mover (``Mirror.spare``)
    spared_until: float = -math.inf

    # -- the phase, as the questions the code asks of it --------------------------------------

    @property
    def binding(self) -> bool:
        """A bind task of ours runs for the gang (its pods are not all seen bound yet)."""
        return self.phase in BINDING

    @property
    def binds_sent(self) -> bool:
        """Its binds have been sent: nothing can call them off any more."""
        return self.phase in (GangPhase.BINDS_SENT, GangPhase.UNRESERVING)

    @property
    def called_off(self) -> str | None:
        """Why its reserved binds must not be sent (None: they go on)."""
        return self.why if self.phase == GangPhase.CALLED_OFF else None

    @property
    def teardown(self) -> str | None:
        """Why its bound pods are being evicted (None: it is not being torn down)."""
        return self.why if self.phase in TORN_DOWN else None

    @property
    def completable(self) -> bool:
        """Its teardown was refused by a budget: the pods it lacks are bound instead."""
        return self.phase == GangPhase.COMPLETING

    # -- its pods ---------------------------------------------------------------------------

    def live(self) -> list[PodView]:
        return [p for p in self.pods.values() if p.live]

    def bound(self) -> list[PodView]:
        """Pods on a node that still hold it (those in their termination grace period too)."""
        return [p for p in self.pods.values() if p.live and p.bound]

    def unbound(self) -> list[PodView]:
        """Pods waiting for a node (a pod being deleted is not waiting)."""
        return [p for p in self.pods.values() if p.live and not p.bound and not p.terminating]

    @property
    def required(self) -> int:
        return self.size if self.size is not None else max(1, len(self.live()))

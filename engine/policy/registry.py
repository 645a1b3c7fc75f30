"""Named scheduling policies: the switches a cycle runs with, so baselines are one line each.

``usher`` is the default and turns everything on: gang admission, fair share (DRF) across
queues, EASY backfill with the reservation for the most urgent blocked job (highest priority,
then oldest, so that a big gang is not starved by the fair-share order; honoured when it comes
due), preemption as the queues allow, topology- and NVLink-aware bin packing with the FGD
fragmentation score for pods no domain binds, and consolidation (preemptible jobs moved out of a
domain a waiting gang needs, where they fit elsewhere at once). The others behave like what people run
instead, so that a replay can compare them on the same workload:

- ``kube-default``: the default kube-scheduler. Pods one at a time (no gang: a job's pods are
  bound as they fit and hold their GPUs while the rest wait), ordered by priority then creation
  (PrioritySort; the pods of jobs waiting together are tried in turn, as their controllers create
  them together), first fit, required topology as pod affinity (later pods follow the first),
  a namespace ResourceQuota per queue (its nominal quota, no borrowing), no preemption.
- ``kueue``: Kueue's quota admission (cohorts, borrowing, preemption as the queues say) with
  BestEffortFIFO ordering by priority and time, the whole gang at once, no backfill, and
  placement without topology scoring (first fit: the first domain and node that fit).
- ``volcano``: gang, DRF ordering across queues, bin packing (tightest node and domain), no
  backfill, no preemption (Volcano's default actions: enqueue, allocate, backfill of best-effort
  pods only).
- ``slurm``: priority order (priority, then age) with EASY backfill, whole allocations, best fit
  with the topology tree, no preemption (``PreemptType=preempt/none``, Slurm's default).
- ``fifo``: strict FIFO per queue (each queue stops at its first blocked job), no backfill,
  no fair share, no preemption: shows what the rest buys.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Admission(StrEnum):
    """How a job's pods are bound."""

    GANG = "gang"  # all pods (or minCount) at once, or none
    POD_BY_POD = "pod-by-pod"  # each pod as it fits; a job works once all its pods are up


class Ordering(StrEnum):
    """Which pending job a cycle considers next, across queues."""

    FAIR_SHARE = "fair-share"  # the queue with the lowest dominant resource share first (DRF)
    PRIORITY = "priority"  # priority, then submit time, whatever the queue


class Queueing(StrEnum):
    """What a blocked job does to the jobs behind it in its queue."""

    BEST_EFFORT_FIFO = "BestEffortFIFO"  # they are still tried
    STRICT_FIFO = "StrictFIFO"  # the queue stops at its first blocked job


class Backfill(StrEnum):
    NONE = "none"
    EASY = "easy"  # Slurm's EASY: a reservation for the first blocked job


class ReserveFor(StrEnum):
    """Which blocked job an EASY backfill reservation is for."""

    FIRST_BLOCKED = "first-blocked"  # the first the cycle finds blocked for capacity, in its order
    MOST_URGENT = "most-urgent"  # the blocked job with the highest priority, then the oldest,
    # whatever the fair-share order says (which puts a big gang's queue last, since its share
    # after admission is high, so that it would never get a reservation: starved)


class Scoring(StrEnum):
    """How a pod's node (and a pod group's topology domain) is chosen among those that fit."""

    USHER = "usher"  # tightest domain, tightest node, NVLink island fit, tightest island
    BINPACK = "binpack"  # tightest domain and node; GPUs by index
    FIRST_FIT = "first-fit"  # the first domain and node (in cluster order) that fit; GPUs by index


@dataclass(slots=True, frozen=True)
class Policy:
    name: str
    admission: Admission = Admission.GANG
    ordering: Ordering = Ordering.FAIR_SHARE
    queueing: Queueing = Queueing.BEST_EFFORT_FIFO
    backfill: Backfill = Backfill.EASY
    reserve_for: ReserveFor = ReserveFor.FIRST_BLOCKED
    preemption: bool = True
    scoring: Scoring = Scoring.USHER
    #: False: a queue never holds more than its nominal quota (a namespace ResourceQuota)
    borrowing: bool = True
    #: move preemptible jobs out of a topology domain so that a gang waiting for one can start
    #: (``policy/consolidation.py``; only where the backend can bind moved jobs again at once)
    consolidation: bool = False
    #: choose a pod's node by how little it fragments free GPUs against the workload learnt
    #: from submitted jobs (the FGD paper's score, ``policy/fragmentation.py``) where no
    #: topology domain binds it; off: the scoring above alone
    fragmentation: bool = False

    @property
    def fair_share(self) -> bool:
        return self.ordering == Ordering.FAIR_SHARE

    @property
    def strict_fifo(self) -> bool:
        return self.queueing == Queueing.STRICT_FIFO

    @property
    def gang(self) -> bool:
        return self.admission == Admission.GANG


POLICIES: dict[str, Policy] = {
    "usher": Policy("usher", reserve_for=ReserveFor.MOST_URGENT, consolidation=True, fragmentation=True),
    "kube-default": Policy(
        "kube-default",
        admission=Admission.POD_BY_POD,
        ordering=Ordering.PRIORITY,
        backfill=Backfill.NONE,
        preemption=False,
        scoring=Scoring.FIRST_FIT,
        borrowing=False,
    ),
    "kueue": Policy("kueue", ordering=Ordering.PRIORITY, backfill=Backfill.NONE, scoring=Scoring.FIRST_FIT),
    "volcano": Policy("volcano", backfill=Backfill.NONE, preemption=False, scoring=Scoring.BINPACK),
    "slurm": Policy("slurm", ordering=Ordering.PRIORITY, preemption=False, scoring=Scoring.BINPACK),
    "fifo": Policy(
        "fifo",
        ordering=Ordering.PRIORITY,
        queueing=Queueing.STRICT_FIFO,
        backfill=Backfill.NONE,
        preemption=False,
    ),
}


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None

"""The console's view model: rows and figures computed from the engine state, no Textual here.

Screens render these plain records; tests check them without a terminal. ``ConsoleModel`` keeps
the pending-job explanations cached until the state changes, so a redraw at idle costs almost
nothing. They are lazy (``engine.explain``): the overview counts their reasons, which cost no
planning, so the first paint does not wait for the backfill planner however deep the backlog;
the ETAs are planned when a view first shows one (the jobs and queues tables, a job's details),
the sentences one job at a time when shown.

Beside the engine's jobs the model lists what the controller's snapshot says it answers for
outside them (``OutsideJob``: on a cluster, pods kept out of usher's queues, with the reason and
the fix), so the console counts every pod usher is responsible for, as ``kubectl`` does.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import StrEnum

from usher.engine.channel import OutsideJob
from usher.engine.enums import JobState, PendingReason
from usher.engine.explain import Explanation, explain_all
from usher.engine.policy import quota
from usher.engine import fmt
from usher.engine.state import HOSTNAME_LEVEL, INF, MILLI, ClusterState, Job, Node, Queue

#: times after this are wall-clock seconds since the epoch (a cluster), not scenario seconds
EPOCH_TIMES = 1e9


def moment(t: float) -> str:
    """A scenario time as a duration from its start; a cluster's time as UTC wall time."""
    if t >= EPOCH_TIMES:
        return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%H:%M:%S")
    return fmt.duration(t)


def span(seconds: float | None) -> str:
    """A duration for a table cell; blank when unknown."""
    if seconds is None or seconds == INF:
        return ""
    return fmt.duration(seconds)


def gpus(milli: float) -> str:
    """Milli-GPUs as a table cell: ``8``, ``0.25``, ``∞`` (``fmt.gpus``, the one rule)."""
    return fmt.gpus(milli)


class RunState(StrEnum):
    """What the replay or the controller loop is doing, for the header; on a cluster, whether
    what is shown is current (``live``) or the API server is out of reach."""

    RUNNING = "running"
    PAUSED = "paused"
    FINISHED = "finished"
    LIVE = "live"
    RECONNECTING = "reconnecting"
    STALE = "stale"


def link_text(state: RunState, since: float, now: float) -> str:
    """The header's word for a cluster connection: ``live``, ``reconnecting (12s)`` while contact
    was lost only recently, ``stale since 14:02:07`` (UTC, as the header's clock) after that."""
    if state is RunState.RECONNECTING:
        return f"reconnecting ({fmt.duration(max(0.0, now - since))})"
    if state is RunState.STALE:
        return f"stale since {moment(since)}"
    return str(state)


#: how the Overview counts pending jobs whose reason is not worked out yet (they arrived since)
NOT_YET_EXPLAINED = "just arrived"


@dataclass(slots=True, frozen=True)
class JobRow:
    name: str
    state: JobState
    queue: str
    priority: int
    gpus: float
    pods: int
    wait: float
    reason: str
    position: int | None
    eta: float | None
    """Planned start (absolute time) for a pending job."""

    def cells(self, now: float) -> tuple[str, ...]:
        eta = "" if self.eta is None else ("now" if self.eta <= now else f"in {span(self.eta - now)}")
        return (
            self.name,
            str(self.state),
            self.queue,
            str(self.priority),
            gpus(self.gpus),
            str(self.pods),
            span(self.wait),
            self.reason,
            "" if self.position is None else str(self.position),
            eta,
        )


JOB_COLUMNS = ("job", "state", "queue", "prio", "GPUs", "pods", "wait", "reason", "pos", "ETA")


@dataclass(slots=True, frozen=True)
class QueueRow:
    name: str
    cohort: str | None
    nominal: float
    usage: float
    borrowed: float
    lent: float
    pending: int
    running: int
    fair_share: float
    manual: bool
    #: decayed fair share: the GPUs it held lately (its average, older use weighing less), and
    #: the half-life; None without one
    lately: float | None = None
    half_life: float | None = None

    def cells(self) -> tuple[str, ...]:
        label = f"  {self.name}" if self.cohort else self.name
        return (
            label + (" (approval)" if self.manual else ""),
            gpus(self.nominal),
            gpus(self.usage),
            gpus(self.borrowed) if self.borrowed else "",
            gpus(self.lent) if self.lent else "",
            str(self.pending),
            str(self.running),
            f"{self.fair_share:.2f}",
            "" if self.lately is None or self.half_life is None else f"{gpus(self.lately)} (half-life {fmt.duration(self.half_life)})",
        )


QUEUE_COLUMNS = ("queue", "quota", "used", "borrowed", "lent", "pending", "running", "share", "used lately")


@dataclass(slots=True, frozen=True)
class NodeRow:
    name: str
    model: str
    used: float
    """Milli-GPUs allocated on the node (as every GPU figure of the view model)."""
    total: int
    cordoned: bool
    failed: bool
    jobs: int
    labels: str

    @property
    def status(self) -> str:
        if self.failed:
            return "failed"
        return "cordoned" if self.cordoned else "ready"

    def cells(self) -> tuple[str, ...]:
        return (self.name, self.model, f"{gpus(self.used)}/{self.total}", self.status, str(self.jobs), self.labels)


NODE_COLUMNS = ("node", "model", "GPUs", "status", "jobs", "labels")


@dataclass(slots=True, frozen=True)
class Overview:
    gpus_total: int
    gpus_schedulable: int
    gpus_allocated: float
    running: int
    pending: int
    finished: int
    #: waiting jobs by reason
    by_reason: tuple[tuple[str, int], ...]
    nodes_cordoned: int
    nodes_failed: int
    #: pods of running jobs, and pods waiting (those of waiting jobs, and those that wait beside
    #: a running job's run), as ``kubectl get pods`` counts them
    pods_running: int = 0
    pods_pending: int = 0
    #: waiting pods by reason (the reasons of ``by_reason``, and those only pods wait for)
    pods_by_reason: tuple[tuple[str, int], ...] = ()


def job_gpus(job: Job) -> float:
    return float(sum(g.gpu_milli * g.count for g in job.groups))


def job_wait(job: Job, now: float) -> float:
    """Time waited so far: since submission, minus the time it ran."""
    if not job.submitted and not job.runs:
        return 0.0
    ran = sum(((r.end if r.end is not None else now) - r.start) for r in job.runs)
    end = now if job.state != JobState.FINISHED else (job.runs[-1].end or now)
    return max(0.0, end - job.submit - ran)


def state_version(state: ClusterState) -> tuple[int, ...]:
    """Changes whenever anything a screen shows can have changed (time aside)."""
    return (
        state.admit_counter,
        state.stop_counter,
        len(state.audit),
        len(state.jobs),
        len(state.nodes),
        sum(len(q.pending) for q in state.queues.values()),
        state.schedulable_gpu_count,
        id(state),
    )


def lent_by_queue(state: ClusterState) -> dict[str, float]:
    """GPU quota each queue lends right now: the cohort's borrowing, split over its idle lenders."""
    out: dict[str, float] = {}
    for names in state.cohorts.values():
        members = [state.queues[n] for n in names]
        borrowed = sum(max(0.0, q.usage[0] - q.nominal[0]) for q in members if q.nominal[0] != INF)
        idle = {
            q.name: max(0.0, min(q.nominal[0] - q.usage[0], q.nominal[0] - q.guaranteed[0]))
            for q in members
            if q.nominal[0] != INF
        }
        total_idle = sum(idle.values())
        for name, spare in idle.items():
            out[name] = borrowed * spare / total_idle if total_idle else 0.0
    return out


class ConsoleModel:
    """The rows every screen needs, cached per state version."""

    def __init__(
        self, state_of, min_interval: float = 2.0, clock=time.monotonic, borrowing=lambda: True, verdicts=None,
        outside: Callable[[], Sequence[OutsideJob]] = tuple,
    ) -> None:
        #: a callable giving the current ``ClusterState`` (the kube mirror replaces its state on rebuild)
        self._state_of = state_of
        #: a callable giving the jobs the controller answers for outside that state (its snapshot's)
        self._outside = outside
        #: on a cluster: the scheduler's own verdict per waiting job id, (reason, message), as its
        #: pods' PodScheduled condition says; it wins over what the console works out itself
        self._verdicts = verdicts
        #: whether the running policy lets queues borrow (the quota messages depend on it)
        self._borrowing = borrowing
        #: wall seconds between two runs of the ETA planner while the state keeps changing
        self.min_interval = min_interval
        self._clock = clock
        self._computed_at = -INF
        self._version: tuple[int, ...] | None = None
        self._explanations: dict[int, Explanation] = {}
        self._rows: dict[int, tuple[tuple, JobRow]] = {}
        #: how many times ``explanations`` answered with reasons older than the state (their
        #: renewal waiting for ``min_interval``): a screen drawn from such an answer is behind
        #: the state, and must be drawn again once the interval has passed
        self.stale_reads = 0

    @property
    def state(self) -> ClusterState:
        return self._state_of()

    def explanations(self, now: float, fresh: bool = False) -> dict[int, Explanation]:
        """Why each waiting job waits, with positions and ETAs (each sentence and the ETAs
        worked out when first read, see the module docstring).

        Reading an ETA runs the backfill planner over the whole backlog, so while a replay races
        along the explanations are renewed at most every ``min_interval`` wall seconds
        (``fresh`` renews them, for a job's detail page); an answer older than the state counts
        in ``stale_reads``, so whoever drew from it knows to ask again.
        """
        state = self.state
        version = state_version(state)
        if version != self._version:
            rebuilt = self._version is None or version[-1] != self._version[-1]
            if rebuilt:
                self._rows.clear()  # a rebuilt state (the kube mirror) reuses job ids
            wall = self._clock()
            if fresh or rebuilt or wall - self._computed_at >= self.min_interval:
                self._explanations = explain_all(state, now, self._borrowing())
                self._version = version
                self._computed_at = wall
            else:
                self.stale_reads += 1
        if self._verdicts is not None:
            return {**self._explanations, **self._controller_verdicts()}
        return self._explanations

    def _controller_verdicts(self) -> dict[int, Explanation]:
        """The scheduler's verdicts, with the console's own position and ETA beside them."""
        out = {}
        for job_id, (reason, message) in self._verdicts().items():
            own = self._explanations.get(job_id)
            out[job_id] = own.with_verdict(reason, message) if own else Explanation(reason, message, None, None)
        return out

    def job_rows(self, now: float) -> list[JobRow]:
        """A row per submitted job. Running and finished jobs' rows do not change with time, so
        they are kept until the job's state or runs change; waiting jobs' rows are rebuilt."""
        state = self.state
        expl = self.explanations(now)
        cache = self._rows
        rows = []
        for job in state.jobs:
            if not job.submitted and not job.runs:
                continue
            if state.job_by_name.get(job.name, job.id) != job.id:
                # an earlier job of the same name: a watching mirror finishes a gang's job when
                # its pods go and makes another when they come back (a preemption seen from
                # outside); the job is listed once, as it is now, its earlier runs in its details
                continue
            waiting = job.current_run is None and job.state != JobState.FINISHED
            sig = (job.state, len(job.runs))
            if not waiting:
                hit = cache.get(job.id)
                if hit is not None and hit[0] == sig:
                    rows.append(hit[1])
                    continue
            e = expl.get(job.id)
            if waiting and (e is None or e.reason != job.pending_reason) and job.pending_reason is not None:
                e = Explanation(job.pending_reason, None, None, None)  # newer than the last plan
            row = JobRow(
                job.name,
                job.state,
                job.queue,
                job.priority,
                job_gpus(job),
                job.total_pods,
                job_wait(job, now),
                str(e.reason) if e and e.reason else "",
                e.queue_position if e else None,
                e.estimated_start if e else None,
            )
            if not waiting:
                cache[job.id] = (sig, row)
            rows.append(row)
        return self._with_outside(rows, now)

    def _with_outside(self, rows: list[JobRow], now: float) -> list[JobRow]:
        """``rows`` and a row per job waiting outside the engine's queues or ended outside its
        state; one of them stands for an engine job of its name that does not run (its
        earlier runs are in the job's details)."""
        listed = {r.name: i for i, r in enumerate(rows)}
        for o in self._outside():
            if o.state == JobState.RUNNING:
                continue  # pods waiting beside a run: the running job's row stands for them
            row = JobRow(o.name, o.state, o.queue, o.priority, float(o.gpu_milli), o.pods,
                         max(0.0, now - o.since) if o.state == JobState.PENDING else 0.0,
                         str(o.reason) if o.reason else "", None, None)
            at = listed.get(o.name)
            if at is None:
                listed[o.name] = len(rows)
                rows.append(row)
            elif rows[at].state != JobState.RUNNING:
                rows[at] = row
        return rows

    def outside_job(self, name: str) -> OutsideJob | None:
        """The job called ``name`` that waits outside the engine's queues or ended outside its
        state (what its details show instead of an engine job's); None for any other."""
        return next((o for o in self._outside() if o.name == name and o.state != JobState.RUNNING), None)

    def queue_rows(self) -> list[QueueRow]:
        """Cohorts as a tree: a cohort line, then its queues; then queues without a cohort."""
        state = self.state
        lent = lent_by_queue(state)
        rows: list[QueueRow] = []

        def row(q: Queue) -> QueueRow:
            return QueueRow(
                q.name,
                q.cohort,
                q.nominal[0],
                float(q.usage[0]),
                max(0.0, q.usage[0] - q.nominal[0]) if q.nominal[0] != INF else 0.0,
                lent.get(q.name, 0.0),
                len(q.pending),
                len(state.running_by_queue.get(q.name, ())),
                quota.dominant_share(state, q),
                str(q.approval) == "manual",
                q.past_gpu if q.half_life is not None else None,
                q.half_life,
            )

        for cohort in sorted(state.cohorts):
            members = [row(state.queues[n]) for n in sorted(state.cohorts[cohort])]
            rows.append(
                QueueRow(
                    f"cohort {cohort}",
                    None,
                    sum(m.nominal for m in members),
                    sum(m.usage for m in members),
                    sum(m.borrowed for m in members),
                    sum(m.lent for m in members),
                    sum(m.pending for m in members),
                    sum(m.running for m in members),
                    max((m.fair_share for m in members), default=0.0),
                    False,
                )
            )
            rows.extend(members)
        rows.extend(row(q) for name, q in sorted(state.queues.items()) if not q.cohort)
        return rows

    def queue_jobs(self, queue: str, now: float) -> list[JobRow]:
        """A queue's jobs in admission order: running first, then pending by position."""
        rows = [r for r in self.job_rows(now) if r.queue == queue and r.state != JobState.FINISHED]
        return sorted(rows, key=lambda r: (r.state != JobState.RUNNING, r.position or 0, r.name))

    def node_rows(self) -> list[NodeRow]:
        state = self.state
        shown = [lv for lv in state.levels if lv != HOSTNAME_LEVEL]
        return [
            NodeRow(
                n.name,
                n.gpu_model,
                node_used_milli(n),
                n.gpu_count,
                n.cordoned,
                n.failed,
                len(n.jobs),
                " ".join(f"{k.rsplit('/', 1)[-1]}={n.labels[k]}" for k in shown if k in n.labels),
            )
            for n in state.nodes
        ]

    def overview(self, now: float) -> Overview:
        state = self.state
        expl = self.explanations(now)
        pending = [entry[-1] for q in state.queues.values() for entry in q.pending]
        reasons: Counter[str] = Counter()
        pods: Counter[str] = Counter()
        for i in pending:
            # new since the reasons were last worked out: counted apart, so the counts add up
            reason = str(expl[i].reason) if i in expl and expl[i].reason else NOT_YET_EXPLAINED
            reasons[reason] += 1
            pods[reason] += state.jobs[i].total_pods
        outside = self._outside()
        waiting_outside = finished_outside = 0
        for o in outside:
            reason = str(o.reason) if o.reason else NOT_YET_EXPLAINED
            if o.state == JobState.FINISHED:
                finished_outside += 1
                continue
            if o.state == JobState.PENDING:
                waiting_outside += 1
                reasons[reason] += 1
            pods[reason] += o.pods
        return Overview(
            sum(n.gpu_count for n in state.nodes),
            state.schedulable_gpu_count,
            state.schedulable_used_milli / MILLI,
            len(state.running),
            len(pending) + waiting_outside,
            sum(1 for j in state.jobs if j.state == JobState.FINISHED and state.job_by_name.get(j.name, j.id) == j.id) + finished_outside,
            tuple(reasons.most_common()),
            sum(1 for n in state.nodes if n.cordoned and not n.failed),
            sum(1 for n in state.nodes if n.failed),
            sum(len(run.placements) for i in state.running if (run := state.jobs[i].current_run) is not None),
            sum(pods.values()),
            tuple(sorted(pods.items(), key=lambda kv: (-reasons[kv[0]], -kv[1], kv[0]))),
        )

    def awaiting_approval(self) -> list[str]:
        return [
            j.name
            for j in self.state.jobs
            if j.submitted and j.current_run is None and j.pending_reason == PendingReason.AWAITING_APPROVAL
        ]


def node_used_milli(node: Node) -> int:
    """Milli-GPUs allocated on ``node``: what the Nodes view, the topology view and the drain
    dialog all show (through ``fmt.gpus``)."""
    return node.gpu_count * MILLI - sum(node.gpu_free)

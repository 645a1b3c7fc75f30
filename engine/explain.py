"""Why a job waits: reason codes turned into one sentence with the numbers, positions and ETAs.

The cycle records a reason code on every job it could not start; this module, run when someone
asks (the report, the console, the API status writer), re-derives the numbers from the current
state: what the job asks for, what is free, what is in its way, and when the backfill planner
expects it to start.

``explain_all`` is lazy: it settles each waiting job's reason and queue position at once (cheap),
and leaves the rest to when it is read. A job's ``message`` is worked out the first time it is
read, and the first ``estimated_start`` read runs the backfill planner once for every waiting job
of that answer (``policy.backfill.estimate_starts``); so the console's overview, which counts
reasons, and the status writer, which writes messages, never plan, and a deep backlog's
sentences cost only those that are shown. Read them before the state changes: they describe the
state as it is when they are first read.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any, NamedTuple

from . import fmt
from .fmt import amount, figure
from .enums import JobState, PendingReason
from .policy import quota
from .policy.backfill import estimate_starts
from .policy.ordering import AdmissionOrder, queue_positions
from .policy.filters import hostports
from .policy.filters.extras import PODS, extra_offered
from .policy.filters.gpu_model import accepts
from .policy.filters.node_constraints import EXCLUDED
from .policy.filters.registry import diagnose
from .policy.placement import Placer, gang_counts, no_matching_nodes, request_of
from .policy.registry import Scoring
from .reservations import would_delay_quota
from .state import INF, MILLI, RESOURCE_NAMES, ClusterState, Job, PodGroup

#: a lazy field not worked out yet
_LATER: Any = object()


class Explanation:
    """Why one job waits: its reason code, the sentence, its position in its queue (from 1) and
    its planned start (absolute time), each None where there is none.

    Made by hand, it holds the four values given. Made by ``explain_all``, ``message`` and
    ``estimated_start`` are worked out when first read (see the module docstring), then kept.
    Two explanations are equal when their four values are.
    """

    __slots__ = ("_job", "_message", "_plan", "_start", "queue_position", "reason")

    def __init__(
        self,
        reason: PendingReason | None,
        message: str | None,
        queue_position: int | None,
        estimated_start: float | None,
    ) -> None:
        self.reason = reason
        self.queue_position = queue_position
        self._message: Any = message
        self._start: Any = estimated_start
        self._job: Job | None = None
        self._plan: _Plan | None = None

    @classmethod
    def _lazy(cls, plan: _Plan, job: Job, reason: PendingReason, position: int | None) -> Explanation:
        e = cls(reason, _LATER, position, _LATER)
        e._job, e._plan = job, plan
        return e

    @property
    def message(self) -> str | None:
        """The sentence: what the job asks for, what is in its way, with the figures."""
        if self._message is _LATER:
            assert self._plan is not None and self._job is not None and self.reason is not None
            self._message = self._plan.message(self._job, self.reason)
        return self._message

    @property
    def estimated_start(self) -> float | None:
        """When the backfill planner expects the job to start (absolute time), if it does."""
        if self._start is _LATER:
            assert self._plan is not None and self._job is not None
            self._start = self._plan.start(self._job, self.reason)
        return self._start

    def with_verdict(self, reason: PendingReason | None, message: str | None) -> Explanation:
        """Another reason and sentence (a scheduler's own verdict) with this one's position and
        planned start, the latter still worked out only when read."""
        e = Explanation(reason, message, self.queue_position, self._start)
        e._job, e._plan = self._job, self._plan
        return e

    def _values(self) -> tuple[PendingReason | None, str | None, int | None, float | None]:
        return (self.reason, self.message, self.queue_position, self.estimated_start)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Explanation):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        reason, message, position, start = self._values()
        return f"Explanation(reason={reason!r}, message={message!r}, queue_position={position!r}, estimated_start={start!r})"


def gpus(milli: float) -> str:
    """Milli-GPUs as a person writes GPUs: 16, 0.5 (``fmt.gpus``, the one rule)."""
    return fmt.gpus(milli, unlimited="unlimited")


def _pod_words(pod: PodGroup, n: int) -> str:
    if pod.whole_gpus:
        each = fmt.plural(pod.whole_gpus, "GPU")
    elif pod.share:
        each = f"{fmt.gpus(pod.share)} of a GPU"
    else:
        each = "no GPU"
    models = f" ({'/'.join(sorted(pod.models))})" if pod.models else ""
    return f"{fmt.plural(n, 'pod')} x {each}{models}"


def _asks(job: Job) -> str:
    parts = [_pod_words(g, g.count) for g in job.groups]
    total = job.request[0]
    text = " + ".join(parts)
    if len(job.groups) > 1 or job.groups[0].count > 1:
        text += f" = {fmt.gpu_amount(total)}"
    return text


class Capacity(NamedTuple):
    """The capacity figures the sentences quote, taken once per round of explanations."""

    #: whole GPUs free on schedulable nodes, and the most on one
    free: int
    best: int
    #: per resource beyond GPUs, CPU and memory: the most one schedulable node offers, the most
    #: one has free, and how many offer any
    extras: dict[str, tuple[int, int, int]]


def _capacity_numbers(state: ClusterState) -> Capacity:
    best = 0
    extras: dict[str, tuple[int, int, int]] = {}
    for n in state.nodes:
        if not n.schedulable:
            continue
        best = max(best, n.whole_free)
        for name, offered in n.extra.items():
            if offered > 0:
                top, top_free, count = extras.get(name, (0, 0, 0))
                extras[name] = (max(top, offered), max(top_free, n.extra_free.get(name, 0)), count + 1)
    return Capacity(state.total_whole_free, best, extras)


def _constrained(job: Job) -> PodGroup | None:
    """The pod group (most GPUs first) whose node constraints exclude nodes, if any."""
    return next((g for g in sorted(job.groups, key=lambda g: -g.gpu_milli) if g.eligible is not None), None)


def _rule_words(state: ClusterState, job: Job, counts: list[int]) -> str | None:
    """What a pod's rules against other pods say where the gang's placement stops, counting the
    gang's pods placed before it: ``with 2 of its 3 pods placed, anti-affinity with 2 pods of
    app=vllm (one per kubernetes.io/hostname) on every node with room (2 nodes)``; None when the
    gang has no rules or they are not what stops it."""
    if all(g.rules is None for g in job.groups):
        return None
    stop = Placer(state).first_refused(job, counts)
    if stop is None or stop[0].rules is None:
        return None
    pod, placed = stop
    rules = pod.rules
    plain = replace(pod, rules=None)
    roomy = [n for n in state.nodes if Placer(state, scoring=Scoring.FIRST_FIT).choose_node(plain, [n.id]) is not None]
    found = Counter(w for n in roomy if (w := rules.refusal(n, placed)) is not None)
    if not found:
        return None
    words, n = found.most_common(1)[0]
    where = "every node with room" if n == len(roomy) else f"{n} of the {len(roomy)} nodes with room"
    so_far = f"with {len(placed)} of its {sum(counts)} pods placed, " if placed else ""
    return f"{so_far}{words} on {where} ({fmt.plural(len(roomy), 'node')})"


def _constraint_words(state: ClusterState, pod: PodGroup) -> str:
    """What a pod's node constraints leave of the cluster: ``allow 4 of 10 nodes (why), with 8
    GPUs free, at most 8 on one``."""
    assert pod.eligible is not None
    nodes = [state.nodes[i] for i in sorted(pod.eligible)]
    usable = [n for n in nodes if n.schedulable and accepts(pod, n)]
    free = sum(n.whole_free for n in usable)
    best = max((n.whole_free for n in usable), default=0)
    why = f" ({pod.exclusions})" if pod.exclusions else ""
    return (
        f"its node constraints allow {len(nodes)} of {fmt.plural(len(state.nodes), 'node')}{why}, "
        f"with {fmt.plural(free, 'GPU')} free on them, at most {best} on one"
    )


def _borrow_words(state: ClusterState, q, r: int, top: float, borrowing: bool) -> str:
    """How much queue ``q`` may borrow above its nominal quota of resource ``r``, and why:
    ``its nominal quota of 64 GPUs and may borrow 0 (its borrowing limit)``."""
    res = RESOURCE_NAMES[r]
    nominal = f"its nominal quota of {amount(res, q.nominal[r])}"
    if not borrowing:
        return f"{nominal}, and no queue borrows under this policy"
    if q.cohort is None:
        return f"{nominal}, and it is in no cohort to borrow from"
    may = max(0.0, top - q.nominal[r])
    others = quota.pool_capacity(state, q.cohort, r) - min(q.lending_limit[r], q.nominal[r])
    why = "its borrowing limit" if q.borrowing_limit[r] <= others else f"what the other queues of cohort {q.cohort} lend"
    return f"{nominal} plus the {figure(res, may)} it may borrow ({why})"


def _room_words(state: ClusterState, q, r: int, ask: float, borrowing: bool) -> str:
    """Why ``ask`` of resource ``r`` does not fit queue ``q`` now, with every figure the room
    left for it is derived from (``quota.check``'s two limits: the queue's own ceiling, and what
    its cohort's pool still has to lend)."""
    res = RESOURCE_NAMES[r]
    usage, nominal = q.usage[r], q.nominal[r]
    top = quota.ceiling(state, q, r) if borrowing else nominal
    if usage + ask > top:
        # the queue's own ceiling: nominal plus what it may borrow
        may = max(0.0, top - nominal)
        left = max(0.0, top - usage)
        if not borrowing:
            borrow = "and no queue borrows under this policy"
        elif q.cohort is None:
            borrow = "and is in no cohort to borrow from"
        else:
            others = quota.pool_capacity(state, q.cohort, r) - min(q.lending_limit[r], nominal)
            why = "its borrowing limit" if q.borrowing_limit[r] <= others else f"what the other queues of cohort {q.cohort} lend"
            borrow = f"and may borrow {figure(res, may)} ({why})"
        return (
            f"queue {q.name} uses {figure(res, usage)} of its {amount(res, nominal)} of nominal quota {borrow}, "
            f"so {_left(res, left)} left for it now"
        )
    # the cohort's pool: the quota its queues lend, partly borrowed already
    cohort = q.cohort
    assert cohort is not None
    g = q.guaranteed[r]
    pool = quota.pool_capacity(state, cohort, r)
    used = quota.pool_usage(state, cohort, r)
    own_left = max(0.0, g - usage)
    pool_left = max(0.0, pool - used)
    users = []
    for name in sorted(state.cohorts[cohort]):
        other = state.queues[name]
        if other.nominal[r] != INF and other.usage[r] > other.guaranteed[r]:
            users.append(f"{name} {figure(res, other.usage[r] - other.guaranteed[r])}")
    if g > 0:
        own = (
            f"queue {q.name} uses {figure(res, usage)}; {figure(res, own_left)} of the {amount(res, g)} of its "
            f"nominal quota it keeps for itself are unused, and "
        )
    else:
        own = (
            f"queue {q.name} uses {figure(res, usage)} of its {amount(res, nominal)} of nominal quota, all of which "
            f"it shares through cohort {cohort}; "
        )
    return (
        f"{own}cohort {cohort}'s pool (the quota its queues lend) holds {amount(res, pool)}, "
        f"{figure(res, used)} of them in use ({', '.join(users) or 'by none'}), "
        f"so {_left(res, own_left + pool_left)} left for it now"
    )


def _left(res: str, value: float) -> str:
    """``32 GPUs are``, ``1 GPU is``, ``500m CPU is``, ``64Gi memory is``."""
    text = amount(res, value)
    return f"{text} {'are' if res == 'gpu' and value != MILLI else 'is'}"


def message(
    state: ClusterState,
    job: Job,
    reason: PendingReason,
    now: float,
    borrowing: bool = True,
    capacity: Capacity | None = None,
) -> str:
    """The sentence for ``job`` waiting for ``reason``. ``capacity`` is ``_capacity_numbers``
    of this state when the caller has it already (it walks every node)."""
    q = state.queues[job.queue]
    if reason == PendingReason.HELD:
        return "An operator put this job on hold; it will not be admitted until it is released."
    if reason == PendingReason.AWAITING_APPROVAL:
        return f"Queue {q.name} admits jobs only after an operator approves them, and this one is not approved yet."
    counts = gang_counts(job, job.min_count < job.total_pods)
    request = request_of(job, counts)
    if reason in (PendingReason.WAITING_FOR_QUOTA, PendingReason.EXCEEDS_QUOTA):
        v = quota.check(state, q, request, borrowing)
        if v.fits:
            v = quota.check(state, q, job.request, borrowing)
        res = v.resource or "gpu"
        r = ("gpu", "cpu", "memory").index(res)
        if reason == PendingReason.EXCEEDS_QUOTA:
            ceiling = v.ceiling if not v.fits else (quota.ceiling(state, q, r) if borrowing else q.nominal[r])
            return (
                f"Asks for {amount(res, request[r])} but queue {q.name} can never hold more than "
                f"{amount(res, ceiling)}: {_borrow_words(state, q, r, ceiling, borrowing)}; "
                "it cannot start unless the quota grows."
            )
        return f"Asks for {amount(res, request[r])} but {_room_words(state, q, r, request[r], borrowing)}."
    capacity = capacity if capacity is not None else _capacity_numbers(state)
    free, best = capacity.free, capacity.best
    if reason == PendingReason.NO_MATCHING_NODES:
        pod = no_matching_nodes(state, job) or job.groups[0]
        found = diagnose(state, pod)
        # the backend's words say which nodes are out for what (node constraints, volumes, devices)
        why = ", ".join(f"{n} excluded ({pod.exclusions})" if k == EXCLUDED and pod.exclusions else f"{n} {k}"
                        for k, n in sorted(found.items(), key=lambda kv: -kv[1]) if k != "fits")
        return f"No schedulable node can ever hold its {_pod_words(pod, 1)}: of {fmt.plural(len(state.nodes), 'node')}, {why}."
    if reason == PendingReason.TOPOLOGY_UNSATISFIABLE:
        parts = []
        for g, n in zip(job.groups, counts):
            if g.topology_level is None:
                continue
            level = state.levels[g.topology_level]
            domains = [d for d in state.domains[g.topology_level] if d.labelled]
            if g.eligible is None:
                roomiest = max((d.whole_free for d in domains), default=0)
                where = ""
            else:
                roomiest = max(
                    (
                        sum(state.nodes[i].whole_free for i in d.node_ids if i in g.eligible and state.nodes[i].schedulable)
                        for d in domains
                    ),
                    default=0,
                )
                where = f" on nodes its node constraints allow ({len(g.eligible)} of {len(state.nodes)})"
            parts.append(
                f"needs {_pod_words(g, n)} inside one {level}, but the roomiest {level} has "
                f"{fmt.plural(roomiest, 'GPU')} free{where}"
            )
        text = "; ".join(parts)
        return f"{text[:1].upper()}{text[1:]} ({free} free in the whole cluster)."
    if reason == PendingReason.RESERVED_FOR_HIGHER_PRIORITY and state.reservation is not None:
        holder = state.jobs[state.reservation[0]]
        start = state.reservation[1]
        runtime = job.estimated_runtime()
        run = "runs until the end" if runtime == INF else f"needs {fmt.duration(runtime)}"
        # what it would take from the holder: its queue's (or cohort's) quota, else its room
        what = f"the quota of queue {holder.queue}" if would_delay_quota(state, job) else "the capacity"
        return (
            f"Would fit now, but {what} is reserved for {holder.name}, planned to start "
            f"{'now' if start <= now else 'in ' + fmt.duration(start - now)}; this job {run} and would delay it."
        )
    pod = max(job.groups, key=lambda g: g.gpu_milli)
    cpu_note = ""
    if pod.cpu or pod.memory:
        cpu_note = f", {amount('cpu', pod.cpu)} and {amount('memory', pod.memory)} per pod"
    short = _extras_short(state, job, capacity.extras)
    if short is not None:
        return f"Asks for {_asks(job)}{cpu_note}; {short} ({fmt.plural(free, 'GPU')} free on schedulable nodes)."
    rules = _rule_words(state, job, counts)
    if rules is not None:
        return f"Asks for {_asks(job)}{cpu_note}; {rules} ({fmt.plural(free, 'GPU')} free on schedulable nodes)."
    constrained = _constrained(job)
    if constrained is not None:
        return (
            f"Asks for {_asks(job)}{cpu_note}; {_constraint_words(state, constrained)} "
            f"({fmt.plural(free, 'GPU')} free on all schedulable nodes)."
        )
    return (
        f"Asks for {_asks(job)}{cpu_note}; {fmt.plural(free, 'GPU')} {fmt.verb(free, 'is', 'are')} free on schedulable nodes, "
        f"at most {best} on one node."
    )


def _extras_short(state: ClusterState, job: Job, extras: dict[str, tuple[int, int, int]]) -> str | None:
    """Words for the first resource beyond GPUs, CPU and memory that a pod of ``job`` asks, that
    some schedulable node offers enough of and none has free enough of now (a host port: taken on
    every schedulable node); None when there is none."""
    for g in job.groups:
        for name, amount in g.extra:
            if hostports.is_host_port(name):
                schedulable = [n for n in state.nodes if n.schedulable]
                if schedulable and all(extra_offered(n.extra_free, name) < amount for n in schedulable):
                    return hostports.taken_everywhere(name)
                continue
            top, top_free, count = extras.get(name, (0, 0, 0))
            if top >= amount > top_free:
                what = "a place among its node's pods" if name == PODS else f"{amount} {name}"
                return f"each pod also asks for {what}, which is taken on every node that offers it ({fmt.plural(count, 'node')})"
    return None


class _Plan:
    """What the lazy parts of one ``explain_all`` answer are worked out from: the state, the
    moment and the policy's borrowing, the planner's starts (run once, on the first ETA read)
    and the capacity figures every capacity sentence quotes (taken again only when the state's
    counters moved)."""

    __slots__ = ("_capacity", "_starts", "borrowing", "now", "state")

    def __init__(self, state: ClusterState, now: float, borrowing: bool) -> None:
        self.state = state
        self.now = now
        self.borrowing = borrowing
        self._starts: dict[int, float] | None = None
        #: the capacity figures and the counters of the state they were taken on
        self._capacity: tuple[tuple[int, ...], Capacity] | None = None

    def starts(self) -> dict[int, float]:
        """Planned starts of every pending job the planner places (``estimate_starts``)."""
        if self._starts is None:
            self._starts = estimate_starts(self.state, planner_order(self.state), self.now)
        return self._starts

    def start(self, job: Job, reason: PendingReason | None) -> float | None:
        if reason in (PendingReason.HELD, PendingReason.AWAITING_APPROVAL, PendingReason.EXCEEDS_QUOTA):
            return None
        return self.starts().get(job.id)

    def message(self, job: Job, reason: PendingReason) -> str:
        state = self.state
        key = (state.admit_counter, state.stop_counter, state.total_whole_free, state.schedulable_gpu_count, len(state.nodes))
        if self._capacity is None or self._capacity[0] != key:
            self._capacity = (key, _capacity_numbers(state))
        text = message(state, job, reason, self.now, self.borrowing, self._capacity[1])
        if job.incomplete_gang:
            text = f"{holding(job)} {text}"
        return text


def planner_order(state: ClusterState) -> list[Job]:
    """The pending jobs the start-time planner places, in admission order: whole gangs only (a
    gang already holding part of its pods has no estimate), neither held nor awaiting approval."""
    return [
        j
        for j in AdmissionOrder(state)
        if not j.held
        and not j.incomplete_gang
        and j.pending_reason not in (PendingReason.AWAITING_APPROVAL, PendingReason.HELD)
    ]


def waiting_jobs(state: ClusterState) -> list[Job]:
    """Every submitted job that is neither running (whole) nor finished, in job order."""
    return [
        j
        for j in state.jobs
        if j.submitted and (j.current_run is None or j.incomplete_gang) and j.state != JobState.FINISHED
    ]


def explain_all(state: ClusterState, now: float, borrowing: bool = True) -> dict[int, Explanation]:
    """An explanation for every submitted job that is not running or finished.

    ``borrowing`` is the policy's: without it a queue's quota is its nominal quota alone. The
    reasons and positions are settled now; each message and the planned starts when first read
    (the module docstring says how), from the state as it is then.
    """
    waiting = waiting_jobs(state)
    if not waiting:
        return {}
    positions = queue_positions(state)
    plan = _Plan(state, now, borrowing)
    return {
        job.id: Explanation._lazy(plan, job, job.pending_reason or PendingReason.INSUFFICIENT_CAPACITY, positions.get(job.id))
        for job in waiting
    }


def holding(job: Job) -> str:
    """What an incomplete gang holds while it waits for the rest of its pods."""
    run = job.current_run
    assert run is not None
    held = sum(p.gpu_milli for p in run.placements)
    return (
        f"Holds {len(run.placements)} of its {fmt.plural(job.min_count, 'pod')} ({fmt.gpu_amount(held)}) without working, "
        "waiting for the rest (no gang scheduling)."
    )

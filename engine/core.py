"""The engine proper: owns the cluster state and changes it through named operations.

Backends and the controller speak to the engine only through these methods: ``submit`` a job,
``finish`` one, apply an operator or node ``command``, run a ``cycle``, ``unbind`` a bind that a
backend could not carry out, ``grow`` and ``shrink`` an elastic job on a cluster, ``regpu`` a
placement to the GPUs a backend gave instead. Every operator action and every preemption lands in the audit trail.
The engine does no I/O and reads no clock: the caller passes ``now``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from . import fmt
from .admission import Admitter, CycleResult, Decision
from .channel import CommandError
from .cycle import run_cycle
from .enums import Action, AuditAction, DecisionKind, EndReason, JobState, MoveMode, PendingReason
from .policy import quota
from .policy.fragmentation import WorkloadProfile
from .policy.placement import Placer, observe_job
from .policy.registry import Policy, get_policy
from .state import (
    INF,
    MILLI,
    AuditEntry,
    ClusterState,
    Job,
    PodGroup,
    PodPlacement,
    Run,
    Vec,
    vadd,
    vsub,
)

#: why a waiting job needs free capacity (growing an elastic job must not take it first)
_NEEDS_ROOM = frozenset({
    PendingReason.INSUFFICIENT_CAPACITY,
    PendingReason.TOPOLOGY_UNSATISFIABLE,
    PendingReason.RESERVED_FOR_HIGHER_PRIORITY,
})


class Engine(Admitter):
    def __init__(self, state: ClusterState, policy: Policy | str = "usher", moves: MoveMode = MoveMode.NEVER) -> None:
        self.state = state
        self.policy = get_policy(policy) if isinstance(policy, str) else policy
        self.cycles = 0
        self.moves = moves
        if self.policy.fragmentation and state.workload is None:
            state.enable_fragmentation(WorkloadProfile())
            for job in state.jobs:
                if job.submitted:
                    observe_job(state, job)

    # -- jobs -----------------------------------------------------------------------------

    def submit(self, job: Job, now: float) -> None:
        job.submitted = True
        job.state = JobState.PENDING
        job.remaining = job.duration
        self.state.enqueue(job)
        observe_job(self.state, job)

    def finish(self, job: Job, now: float, reason: EndReason = EndReason.FINISHED) -> None:
        """The job's run is over for good (``reason``); it leaves the cluster and its queue."""
        run = job.current_run
        if run is None:
            return
        if reason == EndReason.FINISHED:
            self.state.note_run_finished(job, now)
        self._end_run(job, run, now, reason, None)
        job.remaining = 0.0
        job.state = JobState.FINISHED
        job.pending_reason = None

    def admit(self, job: Job, placements: list[PodPlacement], request: Vec, now: float, result: CycleResult) -> None:
        state = self.state
        state.dequeue(job)
        job.state = JobState.RUNNING
        job.pending_reason = None
        job.runs.append(Run(now, list(placements), work_start=now))
        state.charge(job, request)
        state.mark_running(job)
        state.admit_counter += 1
        job.admitted_seq = state.admit_counter
        state.queues[job.queue].admitted += 1
        result.decisions.append(Decision(DecisionKind.BIND, job, list(placements)))

    def bind_pod(
        self, job: Job, placement: PodPlacement, amount: Vec, now: float, completes: bool, result: CycleResult
    ) -> None:
        """Pod-by-pod admission: one more pod of ``job`` is bound (already reserved on the state).

        The job holds its pods (and their quota) from its first pod on, but works only once
        ``completes``: its last needed pod is bound. Until then it stays in its queue.
        """
        state = self.state
        run = job.current_run
        if run is None:
            run = Run(now, [])
            job.runs.append(run)
            state.incomplete.add(job.id)
        elif now > run.start:
            placement.bound_at = now
        run.placements.append(placement)
        state.changed()
        q = state.queues[job.queue]
        for r in range(3):
            q.usage[r] += amount[r]
        job.charged = vadd(job.charged, amount)
        if completes:
            run.work_start = now
            state.incomplete.discard(job.id)
            state.dequeue(job)
            job.state = JobState.RUNNING
            job.pending_reason = None
            state.mark_running(job)
            state.admit_counter += 1
            job.admitted_seq = state.admit_counter
            q.admitted += 1
        result.decisions.append(Decision(DecisionKind.BIND, job, [placement], starts_work=completes))

    def adopt(self, job: Job, placements: list[PodPlacement], start: float) -> None:
        """Take in a job found already running (a restarted controller rebuilding from a cluster)."""
        state = self.state
        state.dequeue(job)
        state.place(job, placements)
        job.submitted = True
        job.state = JobState.RUNNING
        job.pending_reason = None
        job.runs.append(Run(start, list(placements), work_start=start))
        state.charge(job, job.request if len(placements) >= job.total_pods else _request(job, placements))
        state.mark_running(job)
        state.admit_counter += 1
        job.admitted_seq = state.admit_counter

    def withdraw(self, job: Job) -> None:
        """Take a queued job out of its queue (its pods went away before it was admitted)."""
        self.state.dequeue(job)
        job.submitted = False
        job.pending_reason = None

    def stop(
        self, job: Job, now: float, reason: EndReason, by: str | None, result: CycleResult | None, note: bool = True
    ) -> float:
        """End the job's run (preempted, drained, failed) and put it back in its queue; a
        preemption is noted in the audit trail unless ``note`` is False. Returns the work lost
        (run time since the last checkpoint)."""
        run = job.current_run
        if run is None:
            return 0.0
        self._end_run(job, run, now, reason, by)
        elapsed = now - run.work_start if run.work_start is not None else 0.0
        saved = (elapsed // job.checkpoint_every) * job.checkpoint_every if job.checkpoint_every else 0.0
        job.saved += saved
        if job.remaining is not None:
            job.remaining = max(0.0, job.remaining - saved)
        job.state = JobState.PENDING
        self.state.dequeue(job)  # an incomplete gang never left its queue
        self.state.enqueue(job)
        if reason == EndReason.PREEMPTED and note:
            self.state.audit.append(
                AuditEntry(now, "scheduler", AuditAction.PREEMPT, job.name, f"preempted for {by}; lost {fmt.duration(elapsed - saved)} of work")
            )
        if result is not None:
            result.decisions.append(Decision(DecisionKind.EVICT, job, list(run.placements), reason, by))
        return elapsed - saved

    def _end_run(self, job: Job, run: Run, now: float, reason: EndReason, by: str | None) -> None:
        state = self.state
        state.age_usage(now)
        run.end = now
        run.end_reason = reason
        run.by = by
        state.unplace(job, run.placements)
        state.mark_stopped(job, run)
        state.uncharge(job)
        state.incomplete.discard(job.id)

    def unbind(self, job: Job, now: float, why: str | None) -> None:
        """Undo a bind the backend could not carry out; the job goes back to its queue (with
        ``why`` None: silently, as when a cluster backend re-adopts a gang seen half-bound)."""
        run = job.current_run
        if run is None:
            return
        state = self.state
        state.age_usage(now)
        state.unplace(job, run.placements)
        state.mark_stopped(job, run)
        state.uncharge(job)
        job.runs.pop()
        job.state = JobState.PENDING
        state.enqueue(job)
        if why is not None:
            state.audit.append(AuditEntry(now, "scheduler", AuditAction.BIND, job.name, f"failed: {why}"))

    # -- elastic jobs (on a cluster) -------------------------------------------------------

    def grow(self, now: float, missing: Callable[[Job], list[tuple[int, str]]]) -> CycleResult:
        """Running jobs admitted below their size (``minCount`` < pods) take more of their pods
        where capacity and quota allow (unless an operator holds them), higher priority first: each becomes a BIND decision that
        does not start work (the job is working already). ``missing(job)`` names the pods it
        may still take, with their group's index. Called by the cluster backend once its cycle
        has nothing else to do; a waiting job that needs room at the same or a higher priority
        stops all growing below it.
        """
        result = CycleResult()
        state = self.state
        state.age_usage(now)
        elastic = self._elastic_running()
        if not elastic:
            return result
        starved = max((job.priority for job in self._waiting_for_room()), default=None)
        placer = Placer(state, scoring=self.policy.scoring)
        for job in sorted(elastic, key=lambda j: (-j.priority, j.admitted_seq)):
            run = job.current_run
            if run is None or not run.placements or job.held or (starved is not None and job.priority <= starved):
                continue  # (a held job runs on, but starts no more pods until it is released)
            before = len(run.placements)
            queue = state.queues[job.queue]
            for gi, name in missing(job):
                group = job.groups[gi]
                amount = (group.gpu_milli, group.cpu, group.memory)
                if not quota.check(state, queue, amount, self.policy.borrowing).fits:
                    break
                node = placer.choose_node(group, self._beside(run, group))
                if node is None:
                    continue
                with self._resizing(job, run):
                    self.bind_pod(job, placer.put(job, group, node, name), amount, now, False, result)
            if len(run.placements) > before:
                state.audit.append(AuditEntry(now, "scheduler", AuditAction.GROW, job.name, f"{before} -> {len(run.placements)} of {job.total_pods} pods"))
        return result

    def complete(self, job: Job, missing: list[tuple[int, str]], now: float) -> list[PodPlacement]:
        """Place the pods a running job found partly bound still lacks, all of them or none,
        beside the pods on nodes (in their topology domain): a leader died between the gang's
        binds, and a PodDisruptionBudget keeps the bound pods from being evicted, so the gang is
        completed rather than left waiting for its peers. Capacity alone decides: the leader that
        bound the first pods admitted the gang whole, so its quota is not asked again. The run
        holds the placements at once; the caller binds them (``missing`` names the pods, with
        their group's index, as for ``grow``) and gives back with ``shrink`` those it cannot."""
        run = job.current_run
        if run is None or not run.placements or not missing:
            return []
        state = self.state
        placer = Placer(state, scoring=self.policy.scoring)
        for gi, name in missing:
            group = job.groups[gi]
            node = placer.choose_node(group, self._beside(run, group))
            if node is None:
                placer.undo(job)
                return []
            placer.put(job, group, node, name)
        result = CycleResult()
        before = len(run.placements)
        state.age_usage(now)
        with self._resizing(job, run):
            for (gi, _), placement in zip(missing, placer.taken):  # taken in ``missing``'s order
                group = job.groups[gi]
                self.bind_pod(job, placement, (group.gpu_milli, group.cpu, group.memory), now, False, result)
        state.audit.append(AuditEntry(now, "scheduler", AuditAction.COMPLETE, job.name,
                                      f"{before} -> {len(run.placements)} of {job.total_pods} pods: found partly bound, its teardown refused"))
        return list(placer.taken)

    def _beside(self, run: Run, group: PodGroup) -> list[int] | None:
        """The nodes a pod of ``group`` joining ``run`` may go to: its topology domain's, or any."""
        if group.topology_level is None:
            return None
        state = self.state
        level = group.topology_level
        anchor = state.nodes[run.placements[0].node_id]
        return state.domains[level][anchor.domains[level]].node_ids

    def shrink_for_waiting(self, now: float) -> list[tuple[Job, set[str]]]:
        """Make room for the most urgent job that waits for capacity by taking back the pods that
        lower-priority elastic jobs grew by (beyond their minimum), lowest priority and latest
        grown first, before any whole gang is preempted. Only when those pods would free enough
        GPUs for it (counted in GPUs, not shapes); the caller evicts the pods given back.
        """
        state = self.state
        grown = [j for j in self._elastic_running()
                 if not j.shielded and not j.settling and len(j.current_run.placements) > j.min_count]
        waiting = [j for j in self._waiting_for_room() if j.preempts] if grown else []
        if not waiting:
            return []
        urgent = max(waiting, key=lambda j: (j.priority, -j.submit))
        extras: list[tuple[Job, PodPlacement]] = [
            (job, p) for job in grown if job.priority < urgent.priority for p in job.current_run.placements[job.min_count:][::-1]
        ]
        free = state.schedulable_gpu_count * MILLI - state.schedulable_used_milli
        if not extras or free + sum(p.gpu_milli for _, p in extras) < urgent.request[0]:
            return []
        taken: dict[int, set[str]] = {}
        for job, p in sorted(extras, key=lambda e: (e[0].priority, -e[0].admitted_seq)):
            if free >= urgent.request[0]:
                break
            taken.setdefault(job.id, set()).add(p.pod)
            free += p.gpu_milli
        out = []
        for job_id, pods in taken.items():
            job = state.jobs[job_id]
            self.shrink(job, pods, now)
            out.append((job, pods))
        return out

    def _elastic_running(self) -> list[Job]:
        """Running jobs that may run with fewer pods than they have (``minCount`` < pods), from
        the state's index of them (a cluster backend asks on every tick)."""
        state = self.state
        return [job for i in state.elastic_running if (job := state.jobs[i]).current_run is not None]

    def _waiting_for_room(self) -> list[Job]:
        """Queued jobs whose last verdict was that they need free capacity."""
        state = self.state
        return [job for q in state.queues.values() for entry in q.pending if (job := state.jobs[entry[-1]]).pending_reason in _NEEDS_ROOM]

    def shrink(self, job: Job, pods: set[str], now: float, note: bool = True) -> None:
        """Give back the placements of ``pods`` (pods beyond an elastic job's minimum that went
        away, or whose binds failed; on a cluster, members that ran to completion while the rest
        run on, with ``note`` False: no audit entry); the job runs on with the rest."""
        run = job.current_run
        if run is None:
            return
        state = self.state
        q = state.queues[job.queue]
        state.changed()
        state.age_usage(now)
        with self._resizing(job, run):
            gone = [p for p in run.placements if p.pod in pods]
            run.placements[:] = [p for p in run.placements if p.pod not in pods]
            for p in gone:
                state.release(state.nodes[p.node_id], p.gpus, p.share, p.cpu, p.memory, p.extra)
                if not any(o.node_id == p.node_id for o in run.placements):
                    state.nodes[p.node_id].jobs.discard(job.id)
                amount = (p.gpu_milli, p.cpu, p.memory)
                for r in range(3):
                    q.usage[r] -= amount[r]
                job.charged = vsub(job.charged, amount)
        if gone and note:
            state.audit.append(AuditEntry(now, "scheduler", AuditAction.SHRINK, job.name, f"gave back {fmt.plural(len(gone), 'pod')}; runs on {len(run.placements)}"))

    def regpu(self, job: Job, pod: str, gpus: list[int]) -> bool:
        """The backend gave ``pod`` other whole GPUs of its node than its placement names (a
        device claim's selector excluded some): the placement, and the node's free GPUs, follow
        what was given, so later placements see the node as it is. Only GPUs free here may be
        taken instead; False (nothing changed) when one is not, or nothing differs."""
        run = job.current_run
        placement = next((p for p in run.placements if p.pod == pod), None) if run is not None else None
        if placement is None or placement.share or len(gpus) != len(placement.gpus) or sorted(gpus) == sorted(placement.gpus):
            return False
        node = self.state.nodes[placement.node_id]
        new = [i for i in gpus if i not in placement.gpus]
        if len(set(gpus)) != len(gpus) or any(not 0 <= i < len(node.gpu_free) or node.gpu_free[i] != MILLI for i in new):
            return False
        self.state.changed()
        self.state.release(node, placement.gpus, 0, 0, 0)
        self.state.allocate(node, list(gpus), 0, 0, 0)
        placement.gpus = list(gpus)
        return True

    @contextmanager
    def _resizing(self, job: Job, run: Run) -> Iterator[None]:
        """Change a running job's placements with its preemptible totals kept in step."""
        if not job.shielded:
            self.state._count_preemptible(job, run, -1)
        yield
        if not job.shielded:
            self.state._count_preemptible(job, run, +1)

    # -- cycles ---------------------------------------------------------------------------

    def cycle(self, now: float) -> CycleResult:
        self.cycles += 1
        self.state.age_usage(now)
        return run_cycle(self.state, now, self.policy, self)

    # -- operator commands and node events -------------------------------------------------

    def command(
        self,
        action: Action,
        now: float,
        *,
        node: str | None = None,
        job: str | None = None,
        queue: str | None = None,
        quota: dict[str, float] | None = None,
        borrowing_limit: dict[str, float] | None = None,
        lending_limit: dict[str, float] | None = None,
        actor: str = "operator",
    ) -> tuple[str, list[Decision]]:
        """Apply one command; returns a one-line result and the evictions it caused."""
        result = CycleResult()
        state = self.state
        if action in (Action.DRAIN, Action.CORDON, Action.UNCORDON, Action.FAIL, Action.RECOVER):
            if node is None or node not in state.node_by_name:
                raise CommandError(f"{action}: unknown node {node!r}")
            target = node
            text = self._node_action(action, state.node(node), now, result)
        elif action in (Action.APPROVE, Action.PREEMPT, Action.HOLD, Action.RELEASE):
            if job is None or job not in state.job_by_name:
                raise CommandError(f"{action}: unknown job {job!r}")
            target = job
            text = self._job_action(action, state.job(job), now, result)
        elif action == Action.SET_QUOTA:
            if queue is None or queue not in state.queues:
                raise CommandError(f"setQuota: unknown queue {queue!r}")
            target = queue
            text = self._set_quota(queue, quota, borrowing_limit, lending_limit)
        else:  # pragma: no cover - StrEnum is closed
            raise CommandError(f"unknown action {action!r}")
        state.audit.append(AuditEntry(now, actor, str(action), target, text))
        return text, result.decisions

    def _node_action(self, action: Action, node, now: float, result: CycleResult) -> str:
        state = self.state
        if action == Action.CORDON:
            state.set_schedulable(node, cordoned=True)
            return "cordoned"
        if action == Action.UNCORDON:
            state.set_schedulable(node, cordoned=False)
            return "uncordoned"
        if action == Action.RECOVER:
            state.set_schedulable(node, failed=False)
            return "recovered"
        reason = EndReason.DRAINED if action == Action.DRAIN else EndReason.NODE_FAILED
        if action == Action.DRAIN:
            state.set_schedulable(node, cordoned=True)
        else:
            state.set_schedulable(node, failed=True)
        victims = sorted(node.jobs, key=lambda j: state.jobs[j].seq)
        names = []
        for jid in victims:
            job = state.jobs[jid]
            names.append(job.name)
            self.stop(job, now, reason, None, result)
        verb = "drained" if action == Action.DRAIN else "failed"
        return f"{verb}; requeued {fmt.plural(len(names), 'job')}" + (f": {', '.join(names)}" if names else "")

    def _job_action(self, action: Action, job: Job, now: float, result: CycleResult) -> str:
        if action == Action.APPROVE:
            self.state.set_operator_flags(job, approved=True)
            return "approved"
        if action == Action.HOLD:
            self.state.set_operator_flags(job, held=True)
            return "held" if job.current_run is None else "held (keeps running; will not be readmitted)"
        if action == Action.RELEASE:
            if not job.held:
                return "not held; nothing to release"
            self.state.set_operator_flags(job, held=False)
            return "released"
        if job.current_run is None:
            return "not running; nothing to preempt"
        self.stop(job, now, EndReason.OPERATOR_PREEMPTED, None, result)
        return "preempted and requeued"

    def _set_quota(
        self,
        name: str,
        quota: dict[str, float] | None,
        borrowing: dict[str, float] | None,
        lending: dict[str, float] | None,
    ) -> str:
        q = self.state.queues[name]
        for values, attr in ((quota, "nominal"), (borrowing, "borrowing_limit"), (lending, "lending_limit")):
            if not values:
                continue
            current = list(getattr(q, attr))
            for res, value in values.items():
                current[_resource_index(res)] = INF if value is None else float(value)
            setattr(q, attr, tuple(current))
        self.state.quotas_changed()
        return fmt.limits_change({fmt.LimitField.QUOTA: quota, fmt.LimitField.BORROWING_LIMIT: borrowing, fmt.LimitField.LENDING_LIMIT: lending})


def _request(job: Job, placements: list[PodPlacement]) -> Vec:
    return (
        sum(p.gpu_milli for p in placements),
        sum(p.cpu for p in placements),
        sum(p.memory for p in placements),
    )


def _resource_index(name: str) -> int:
    return {"gpu": 0, "cpu": 1, "memory": 2}[name]


"""Why a gang waits, in words, and the gangs the engine's state does not show.

``_readiness`` decides whether a gang may be submitted to the engine, and if not, the reason and
one-sentence message (an invalid pod, pods of several owners, a queue its namespace may not use,
an unknown queue or topology level, its size unknown, a bind back-off, pods still missing);
``_explain_leftovers`` says why pods wait beside a running or stopping gang. ``outside`` lists
what a console shows beside the engine's jobs.

A part of ``Mirror`` (a mixin): the reasons read the mirror's config, gangs and back-offs.
"""

from __future__ import annotations

import math

from ...channel import OutsideJob
from ...enums import JobState, PendingReason
from ...fmt import plural
from .gang import Gang
from .objects import PodView

DEFAULT_QUEUE = "default"


class WhyWaiting:
    """Why ``Mirror``'s gangs wait (see the module's docstring)."""

    def _readiness(self, gang: Gang) -> tuple[bool, PendingReason | None, str | None]:
        unbound = gang.unbound()
        if not unbound:
            return False, None, None
        bad = next((p for p in unbound if p.problem), None)
        if bad is not None:
            return False, PendingReason.INVALID_REQUEST, f"Pod {bad.name} cannot be scheduled as written: {bad.problem}."
        owners = sorted({p.owner or "bare pods" for p in gang.live()})
        if len(owners) > 1:
            return False, PendingReason.INVALID_REQUEST, (
                f"Pods of {len(owners)} owners ({', '.join(owners)}) share the gang {gang.title or gang.key}; "
                "give each workload its own usher/gang label."
            )
        queue = self.queue_of(unbound[0])
        spec = next((q for q in self.config.queues if q.name == queue), None)
        namespace = unbound[0].namespace
        if spec is not None and not spec.admits(namespace, self.namespace_labels.get(namespace)):
            asked = "its usher/queue label names" if unbound[0].queue else "it lands by default in"
            return False, PendingReason.QUEUE_NOT_ALLOWED, (
                f"The pod is in namespace {namespace!r} and {asked} queue {queue!r}, which may be used only by "
                f"{spec.who_may_use()}; use a queue your namespace is allowed, or ask an operator to add it to {queue!r} "
                f"in usher-system/usher-queues."
            )
        if queue not in self.state.queues or self.state.queues[queue].retired:
            known = ", ".join(sorted(self.state.queues)) or "none"
            where = f"usher-system/usher-queues (queues: {known})"
            if unbound[0].queue is None:
                return False, PendingReason.UNKNOWN_QUEUE, (
                    f"The pod has no usher/queue label, no queue lists its namespace {unbound[0].namespace!r} "
                    f"in namespaces:, and there is no queue named {DEFAULT_QUEUE!r} in {where}."
                )
            return False, PendingReason.UNKNOWN_QUEUE, f"Queue {queue!r} is not in {where}."
        levels = self.state.levels
        for p in unbound:
            level = p.topology_required or p.topology_preferred
            if level is not None and level not in levels:
                return False, PendingReason.INVALID_REQUEST, (
                    f"Pod {p.name} asks for topology level {level!r}, which is not one of the cluster's levels ({', '.join(levels) or 'none configured'})."
                )
        if gang.waiting_for is not None:
            return False, PendingReason.WAITING_FOR_GANG, f"Waiting to learn the gang's size: {gang.waiting_for}."
        made = next((p for p in unbound if p.claims_waiting), None)
        if made is not None:
            return False, PendingReason.WAITING_FOR_CLAIMS, f"Pod {made.name} waits: its {made.claims_waiting}."
        blocked = self._volume_blocker(unbound)
        if blocked is not None:
            return False, *blocked
        wait = gang.bind_retry[0] - self.monotonic()
        if wait > 0:
            self.backing_off[gang.key] = gang.bind_retry[0]
            return False, PendingReason.BIND_REFUSED, (
                f"Its last bind was refused ({gang.bind_error}); usher tries again in {math.ceil(wait)} s "
                "(each refusal doubles the wait, up to 5 minutes).")
        # a staged gang starts at its minimum: its owner makes the rest only once those run
        needed = min(gang.minimum, gang.required) if gang.staged and gang.minimum else gang.required
        if len(unbound) < needed:
            message = f"{len(unbound)} of the gang's {needed} pods exist; usher starts a gang only when all of them can start together."
            stranded = self.stranded_of(gang)
            if stranded:
                message += (
                    f" Its old pod {', '.join(stranded)} is stuck terminating: the node is not Ready, so no kubelet "
                    "confirms the pod is gone, and its owner may wait for that before it makes the pod anew. If the "
                    "node is dead, delete it (kubectl delete node) or taint it "
                    "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute, and the cluster removes the pod."
                )
            return False, PendingReason.WAITING_FOR_GANG, message
        return True, None, None

    def queue_of(self, pod: PodView) -> str:
        """The pod's queue: its label, else its namespace's default queue, else ``default``."""
        if pod.queue:
            return pod.queue
        for spec in self.config.queues:
            if pod.namespace in spec.namespaces:
                return spec.name
        return DEFAULT_QUEUE

    def stranded_of(self, gang: Gang) -> list[str]:
        """The gang's pods stranded on nodes that are not Ready, as ``pod on node``."""
        out = []
        for key, gang_key in sorted(self.stranded.items()):
            if gang_key == gang.key:
                holding = self.holdings.get(key)
                out.append(f"{key.rsplit('/', 1)[-1]} on {holding.node if holding is not None else '?'}")
        return out

    def _explain_leftovers(self, gang: Gang) -> None:
        if gang.partial and gang.teardown is None:
            bound = len(gang.bound())
            gang.reason = PendingReason.WAITING_FOR_GANG
            gang.message = f"The gang is being bound: {bound} of its {gang.required} pods are on nodes."
        elif gang.teardown is not None and gang.to_bind:
            gang.reason = PendingReason.WAITING_FOR_GANG
            gang.message = (
                f"The gang is being completed: a PodDisruptionBudget keeps its {plural(len(gang.bound()), 'pod')} on nodes "
                f"running, so usher binds the rest where there is room ({gang.teardown})."
            )
        elif gang.teardown is not None:
            gang.reason = PendingReason.WAITING_FOR_GANG
            gang.message = (
                f"The gang is being stopped ({gang.teardown}); usher starts it again whole once its old pods are gone."
            )
        elif gang.unbound() and gang.job is not None and gang.job.min_count < gang.job.total_pods:
            gang.reason = PendingReason.WAITING_FOR_GANG
            run = gang.job.current_run
            running = len(run.placements) if run is not None else 0
            gang.message = (
                f"The gang runs with {running} of its {gang.job.total_pods} pods (its minimum is {gang.job.min_count}); "
                "this pod joins it when capacity and its queue's quota allow."
            )
        elif gang.unbound():
            gang.reason = PendingReason.WAITING_FOR_GANG
            gang.message = "The rest of this gang is already running; usher starts a gang whole, so this pod waits for the next run."
        else:
            gang.reason = gang.message = None

    def waiting_gangs(self) -> list[Gang]:
        return [g for g in self.gangs.values() if g.unbound()]

    def outside(self) -> tuple[OutsideJob, ...]:
        """The gangs the engine's state does not show as they are (``OutsideJob``): waiting
        outside its queue with their reason, waiting beside their job's run, or ended with no
        engine job standing for them. What a console lists beside the engine's jobs."""
        out = []
        state = self.state
        for gang in self.gangs.values():  # in the order they were first seen
            job = gang.job
            name = gang.title or gang.key
            waiting = gang.unbound()
            if job is not None and job.current_run is not None:
                kind = JobState.RUNNING
                if not waiting or gang.reason is None:
                    continue  # waiting for nothing (or being bound)
            elif job is not None and job.submitted:
                continue  # in the engine's queue: the engine says why it waits
            elif waiting:
                kind = JobState.PENDING
            elif gang.pods and not gang.live() and name not in state.job_by_name:
                kind, waiting = JobState.FINISHED, list(gang.pods.values())
            else:
                continue
            out.append(OutsideJob(
                name, job.queue if job is not None else self.queue_of(waiting[0]), kind, len(waiting),
                sum(p.gpu_milli for p in waiting), max(p.priority for p in waiting), min(p.created for p in waiting),
                gang.reason if kind != JobState.FINISHED else None, gang.message if kind != JobState.FINISHED else None,
            ))
        return tuple(out)

"""Engine jobs made from gangs: a waiting gang's job, and a running gang adopted.

A gang becomes one engine ``Job`` (``_new_job``): its pods grouped by shape into pod groups,
their node constraints matched against the nodes once per shape, its queue (retired when the
config no longer has it). A gang found with pods on nodes is *adopted* (``_adopt``): the same job
when it stands for exactly these pods, its placements read from each pod's ``usher/gpus``
(``_placement_of``), and a gang with fewer pods on nodes than it needs is marked ``partial``.

A part of ``Mirror`` (a mixin): both write the engine's state and the mirror's indexes together.
"""

from __future__ import annotations

import math
from typing import Any

from ...build import group_request, queue_from_spec
from ...enums import AuditAction, JobState, TopologyMode
from ...fmt import plural
from ...policy.placement import pick_whole_gpus
from ...scenario import QueueSpec, Resources
from ...state import MILLI, AuditEntry, Job, PodGroup, PodPlacement
from .constraints import GroupConstraints, NodeConstraints, group_constraints
from .gang import Gang
from .objects import PodView, natural_key
from .podrules.pods import PodIndex, group_rules, shared_labels

#: the retired queue that holds, for each namespace, its pods found running in a queue that
#: namespace may not use (``not-allowed/<namespace>``: no queue config may name it, a queue name
#: having no ``/``)
NOT_ALLOWED_PREFIX = "not-allowed/"


class JobsOfGangs:
    """How ``Mirror`` makes and adopts engine jobs (see the module's docstring)."""

    #: every live pod as pod rules see it; a gang's groups carry ``GroupRules`` judged against it
    pod_rules: PodIndex

    def _retire(self, name: str, now: float) -> None:
        """A gang runs in a queue that is not in the config (taken out of it while the gang ran,
        or before a restart): the queue is kept, *retired*, so its running jobs hold their
        capacity and are counted; nothing new is admitted into it (``_readiness``), and it goes
        once its last job ends (``_end``)."""
        # built, not validated: a retired name comes from a pod or from usher, not from the config
        queue = queue_from_spec(QueueSpec.model_construct(name=name, quota=Resources(gpu=0, cpu=0, memory=0)))
        queue.retired = True
        self.state.queues[name] = queue
        if name in self.retired:
            return  # said once, not again at each rebuild
        self.retired.add(name)
        if name.startswith(NOT_ALLOWED_PREFIX):
            message = ("pods running in a queue their namespace may not use (placed without usher): they keep "
                       "their nodes and are charged to no team's quota")
        else:
            message = "not in the queue config any more: its running jobs keep their capacity until they end; nothing new is admitted"
        self.state.audit.append(AuditEntry(now, "scheduler", AuditAction.RETIRE_QUEUE, name, message))

    def _constraints_of(self, constraints: NodeConstraints | None) -> GroupConstraints:
        """``group_constraints`` on the engine's nodes, remembered per constraints until the next
        rebuild (node labels and taints change only through one): pods of one template share
        theirs, and every pod on a cluster has some (the two tolerations the API server adds),
        so matching them against every node once per job would cost O(nodes) per job."""
        known = self._constraints_seen.get(constraints)
        if known is None:
            known = self._constraints_seen[constraints] = group_constraints(constraints, self.state.nodes)
        return known

    def _with_devices(self, constraints: GroupConstraints, pod: PodView) -> GroupConstraints:
        """A pod group's node constraints narrowed to the nodes whose devices can give its
        ResourceClaims (``dra_pods``)."""
        if pod.claim_nodes is None:
            return constraints
        ids = frozenset(n.id for n in self.state.nodes if n.name in pod.claim_nodes)
        eligible = ids if constraints["eligible"] is None else constraints["eligible"] & ids
        preferred = tuple(t & eligible for t in constraints["preferred"] if t & eligible)
        why = ", ".join(w for w in (constraints["exclusions"], pod.claim_exclusions) if w)
        return GroupConstraints(eligible=eligible, preferred=preferred, exclusions=why or None)

    def _new_job(self, gang: Gang, pods: list[PodView], now: float) -> Job:
        state = self.state
        groups: dict[tuple[Any, ...], list[str]] = {}
        views = sorted(pods, key=lambda p: natural_key(p.name))
        fits = {p.name: self.volume_fit(p) for p in views}
        # the labels the gang's own pod rules read split its groups: a rule picking rank=0 must
        # see rank 0 apart from rank 1, though one template made both (``PodRules.label_keys``)
        read = sorted(frozenset().union(*(p.rules.label_keys for p in views if p.rules)))
        for p in views:
            own = tuple((k, p.labels.get(k)) for k in read)
            groups.setdefault((p.signature(), fits[p.name].eligible, own), []).append(p.name)
        by_name = {p.name: p for p in views}
        rules = group_rules(self.pod_rules, [
            (f"g{gi}", by_name[names[0]].namespace, shared_labels([by_name[n].labels for n in names]),
             by_name[names[0]].rules, by_name[names[0]].constraints, tuple(by_name[n].key for n in names))
            for gi, names in enumerate(groups.values())
        ], gang.title or gang.key) or {}
        pod_groups = []
        for gi, (sig, names) in enumerate(groups.items()):
            first = by_name[names[0]]
            mode = level = None
            # a level gone from the config can only be a running gang's (``_readiness`` stops a
            # waiting one): where it runs is settled, so it is taken in without the constraint
            if first.topology_required in state.levels:
                mode, level = TopologyMode.REQUIRED, state.levels.index(first.topology_required)
            elif first.topology_preferred in state.levels:
                mode, level = TopologyMode.PREFERRED, state.levels.index(first.topology_preferred)
            pod_groups.append(
                PodGroup(
                    f"g{gi}", len(names), first.gpu_milli, first.cpu, first.memory, first.models, mode, level,
                    **self._with_volumes(self._with_devices(self._constraints_of(first.constraints), first), fits[names[0]]),
                    extra=first.extra,
                    rules=rules.get(f"g{gi}"),
                )
            )
        first = views[0]
        queue = self.queue_of(first)
        spec = next((q for q in self.config.queues if q.name == queue), None)
        if spec is not None and not spec.admits(first.namespace, self.namespace_labels.get(first.namespace)):
            # found running in a queue its namespace may not use (bound by someone else, or
            # created on a node): it holds its nodes, but is never charged to that queue
            queue = f"{NOT_ALLOWED_PREFIX}{first.namespace}"
        if queue not in state.queues:
            self._retire(queue, now)
        job = Job(
            id=len(state.jobs),
            name=gang.title or gang.key,
            queue=queue,
            submit=min(p.created for p in views),
            priority=max(p.priority for p in views),
            duration=None,
            estimate=first.estimate,
            preemptible=all(p.preemptible for p in views),
            spared=gang.spared_until != -math.inf,
            preempts=all(p.preempts for p in views),
            movable=all(p.movable for p in views),
            comes_back=all(p.comes_back for p in views),
            checkpoint_every=first.checkpoint_every,
            min_count=min(gang.minimum or gang.required, gang.required, len(views)),
            groups=tuple(pod_groups),
            seq=gang.seq,
        )
        job.request = group_request(pod_groups)
        if rules:
            self.pod_rules.ruled_jobs.add(job.id)
        self.pod_rules.job_made(job.id, tuple(p.key for p in views))
        state.jobs.append(job)
        state.job_by_name[job.name] = job.id
        gang.job = job
        gang.group_pods = list(groups.values())
        self._volume_sigs[gang.key] = self._volume_sig(sorted(views, key=lambda p: p.name))
        self.gang_of_job[job.id] = gang
        return job

    def _adopt(self, gang: Gang, bound: list[PodView], now: float, remake: bool = False) -> None:
        """A gang with bound pods and no run in the engine: a job found running (on a restart,
        or bound by the leader while this replica or console watches).

        Its pods hold their nodes whatever happens next, so it is adopted, as the same engine job
        when that job stands for exactly these pods (unless ``remake``: what its waiting pods may
        grow onto changed, and the job's pod groups are made again); one found partly bound (fewer pods on nodes
        than the gang needs) is torn down from there.
        """
        job = gang.job
        if job is not None and job.submitted:
            self.engine.withdraw(job)
        needed = min(gang.minimum or gang.required, gang.required)
        gang.partial = len(bound) + len(gang.completed) < needed
        # the job is all the gang's pods, those still waiting too, when it is elastic (it may grow
        # by them) or half-bound (the rest are being bound): it stays one job as they bind
        waiting = gang.unbound()[: max(0, gang.required - len(bound))] if gang.minimum or gang.partial else []
        members = bound + waiting
        names = sorted(p.name for p in members)
        same = (not remake and job is not None and job.state != JobState.FINISHED
                and names == sorted(n for g in gang.group_pods for n in g))
        if not same:
            if job is not None:
                job.state = JobState.FINISHED
                self.gang_of_job.pop(job.id, None)
            job = self._new_job(gang, members, now)
        self._refresh_flags(gang, job)
        placements = []
        owing: list[tuple[PodView, int]] = []  # bound pods and the GPUs they hold beyond their placement
        on_nodes = {p.name for p in bound}
        claimed: dict[tuple[int, int], int] = {}  # (node, GPU) -> milli-GPUs placed by this adoption
        for gi, group_names in enumerate(gang.group_pods):
            group = job.groups[gi]
            for name in group_names:
                if name not in on_nodes:
                    continue
                view = gang.pods[name]
                found = self._placement_of(view, group, claimed)
                if found is not None:
                    placement, short = found
                    owing.append((view, short))
                    placements.append(placement)
                    for g in placement.gpus:
                        claimed[placement.node_id, g] = claimed.get((placement.node_id, g), 0) + (placement.share or MILLI)
        known = self._known_runs.pop(gang.key, None)
        # running before a rebuild, on these very pods: the same run goes on, not a new one found
        ran = known is not None and known[1] == frozenset(on_nodes)
        self.engine.adopt(job, placements, known[0] if ran and known is not None else min(p.created for p in bound))
        for view, short in owing:  # once the placements are allocated: never the same GPUs
            self._owe(view, short)
        nodes = len({p.node for p in bound})
        if not gang.partial:
            if not ran:
                what = ("started", f"on {plural(nodes, 'node')}") if same else ("adopt", f"found running on {plural(nodes, 'node')}")
                self.state.audit.append(AuditEntry(now, "scheduler", what[0], job.name, what[1]))
            if gang.teardown is None and (lost := self._lost_member(gang, placements, now)) is not None:
                self.tear_down(gang, lost)
            elif gang.teardown is None and len(placements) < job.min_count and (orphan := next(
                    (p for p in bound if p.node not in self.state.node_by_name), None)) is not None:
                # a member bound to a node that is gone (deleted without a drain; PodGC deletes
                # the pod later): the run cannot count it, and is not whole without it
                self.tear_down(gang, f"pod {orphan.name} is bound to node {orphan.node}, which is gone")
        self._explain_leftovers(gang)

    def _placement_of(
        self, pod: PodView, group: PodGroup, claimed: dict[tuple[int, int], int] | None = None
    ) -> tuple[PodPlacement, int] | None:
        """Where a bound pod holds GPUs: the GPUs its ``usher/gpus`` annotation names that are
        free here, and, for any it names that are not (gone when the node shrank, taken by
        another pod) or that it lacks, other free ones; never none while the node has room, or
        a pod running on a GPU that failed under it would leave its other GPUs to be given away.
        A named GPU out of service (``usher/gpu-health``) counts as held: nothing is placed on
        it anyway. ``claimed``: what the gang's pods placed before this one take (not allocated
        yet), so two pods never count the same GPU. Also gives how many GPUs it holds beyond
        those (none were free: the engine still gave them to another run), for ``_owe``."""
        state = self.state
        if pod.node not in state.node_by_name:
            return None
        node = state.node(pod.node)
        claimed = claimed or {}
        free = [f - claimed.get((node.id, i), 0) for i, f in enumerate(node.gpu_free)]
        share = group.share
        take = share or MILLI
        want = 1 if share else group.whole_gpus
        named = [g for g in dict.fromkeys(pod.gpus) if 0 <= g < node.gpu_count]
        held = [g for g in named if free[g] >= take][:want]
        dead = [g for g in named if g in node.out_of_service and g not in held]
        missing = want - len(held) - len(dead)
        if missing > 0:
            if share:
                fits = [i for i, f in enumerate(free) if share <= f and i not in held]
                partly = [i for i in fits if free[i] < MILLI]  # beside other shares first, least left over
                held += [min(partly, key=lambda i: free[i])] if partly else fits[:1]
            else:
                spare = [i for i, f in enumerate(free) if f == MILLI and i not in held]
                if not held and not claimed:
                    spare = pick_whole_gpus(node, min(missing, node.whole_free))  # the tightest NVLink island
                held += spare[:missing]
        placement = PodPlacement(pod.name, node.id, held, share if held else 0, group.cpu, group.memory, extra=group.extra)
        return placement, max(0, want - len(held) - len(dead))

"""The mirror's rebuild: a fresh engine state derived from the caches.

A rebuild happens at start (a restarted controller derives everything from what the API says),
on anything structural (a node added, removed or relabelled, its NVLink islands or unhealthy GPUs
changed, a new queue config) and to compact the engine's finished jobs. It changes only what
changed: a gang found running that ran before keeps its run, a gang whose binds are in flight
keeps its placements, rooms kept for moved gangs survive where their nodes do, and the history
the cluster does not hold (finished jobs, ended runs) is carried over.

A part of ``Mirror`` (a mixin) rather than an object of its own: a rebuild replaces the mirror's
engine and every index it keeps at once, so it is the mirror's own step, kept in its own module
to keep ``mirror.py`` readable.
"""

from __future__ import annotations

import copy
import dataclasses
import math

from ...build import queue_from_spec
from ...core import Engine
from ...enums import AuditAction, JobState, MoveMode
from ...state import AuditEntry, ClusterState, Job, KeptRoom, Node, PodPlacement, Run
from .gang import Gang
from .objects import natural_key

#: audit entries a rebuild keeps (the newest): a controller that runs for months must not keep all
AUDIT_KEPT = 10_000
#: finished engine jobs (ended runs, gangs gone) beyond which the controller rebuilds to drop them
FINISHED_JOBS_KEPT = 10_000


class RebuildFromCaches:
    """``Mirror.rebuild`` and the carrying over it does (see the module's docstring)."""

    def needs_compaction(self) -> bool:
        """Whether the engine holds so many jobs of gangs gone that a rebuild should drop them
        (job ids are list positions, so only a rebuild can)."""
        return len(self.state.jobs) > FINISHED_JOBS_KEPT + 2 * len(self.gangs)

    def rebuild(self, now: float) -> None:
        """A fresh engine state from the caches (start, new nodes, a new queue config)."""
        old = self.engine.state
        in_flight = {
            g.key: [(p, old.nodes[p.node_id].name) for p in g.job.current_run.placements]
            for g in self.gangs.values()
            if g.binding and g.job is not None and g.job.current_run is not None
        }
        holders = {g.key: g.job.id for g in self.gangs.values() if g.job is not None}
        self._known_runs = {
            g.key: (g.job.current_run.start, frozenset(p.pod for p in g.job.current_run.placements))
            for g in self.gangs.values()
            if g.job is not None and g.job.current_run is not None and not g.partial
        }
        ended_runs = {key: [r for r in old.jobs[jid].runs if r.end is not None] for key, jid in holders.items()}
        holders.update(self.room_of)
        self.room_of = {}  # job ids of the old state
        kept: dict[str, tuple[KeptRoom, list[str], Job]] = {}
        for key, holder in holders.items():
            room = old.kept_rooms.get(holder)
            if room is not None:
                kept[key] = (room, [old.nodes[p.node_id].name for p in room.placements], old.jobs[room.job_id])
        cfg = self.config
        levels = list(cfg.topology.levels)
        state = ClusterState(self.name, levels, dict(cfg.priority_classes))
        if self.engine.state.audit:
            state.audit = self.engine.state.audit
            if len(state.audit) > AUDIT_KEPT:
                del state.audit[: len(state.audit) - AUDIT_KEPT]  # the oldest go: a console shows the last
        for i, view in enumerate(sorted(self.nodes.values(), key=lambda v: natural_key(v.name))):
            node = Node(
                id=i,
                name=view.name,
                labels=view.labels,
                gpu_model=view.gpu_model,
                gpu_memory=view.gpu_memory,
                gpu_count=view.gpus,
                islands=view.islands,
                cpu=view.cpu,
                memory=view.memory,
                out_of_service=frozenset(view.unhealthy),
                taints=view.taints,
                extra=dict(view.extra),
            )
            state.add_node(node)
            node.cordoned, node.failed = view.unschedulable or view.name in self.doubted, not view.ready
        state.finish_building()
        self._carry_finished(old, state)
        for spec in cfg.queues:
            queue = state.queues[spec.name] = queue_from_spec(spec)
            before = self.engine.state.queues.get(spec.name)
            if before is not None and queue.half_life is not None:
                queue.past_gpu, queue.past_at = before.past_gpu, before.past_at  # its recent use survives a rebuild
            if spec.cohort is not None:
                state.cohorts.setdefault(spec.cohort, []).append(spec.name)
        self.engine = Engine(state, self.policy, moves=MoveMode.ON_RETURN)
        self.retired -= set(state.queues)  # back in the config
        spared = [g for g in self.gangs.values() if g.spared_until != -math.inf]
        for gang in spared:
            if gang.spared_until <= now:
                gang.spared_until = -math.inf
        self.spared_until = min((g.spared_until for g in spared if g.spared_until > now), default=None)
        self.gang_of_job = {}
        self._taken = {}
        self._short = set()
        self._debts = {}
        self._constraints_seen = {}
        self._volume_epoch += 1
        self.pod_rules.nodes = state.nodes
        self.pod_rules.engine_state = state
        self.pod_rules.ruled_jobs = set()
        self.pod_rules.forget_jobs()
        self.dirty = False
        for key in [k for k, g in self.gangs.items() if not g.pods and k not in in_flight]:
            del self.gangs[key]  # no pods and (after this rebuild) no job: nothing to keep
        for gang in sorted(self.gangs.values(), key=lambda g: g.seq):
            gang.job = None
            gang.group_pods = []
            if gang.key in in_flight:
                self._keep_in_flight(gang, in_flight[gang.key], now)
            else:
                # judged again from what the cluster shows: pods still on nodes hold them (a gang
                # being torn down is adopted, so its GPUs stay counted until its pods are gone; a
                # refused rollback's room is not kept, so it is not completed there any more)
                self.stop_tearing_down(gang)
                gang.to_bind = {}
                self.sync(gang, now)
        self._known_runs = {}
        for key, runs in ended_runs.items():
            gang = self.gangs.get(key)
            if runs and gang is not None and gang.job is not None:
                gang.job.runs[:0] = _runs_on(runs, old, state)  # its history before this rebuild
        for key, holding in self.holdings.items():
            self._take(key, holding)
        for key, (room, nodes, holder) in kept.items():
            self._keep_again(key, room, nodes, holder, now)

    def _carry_finished(self, old: ClusterState, state: ClusterState) -> None:
        """The newest finished jobs that ran go on in the new state, before any job made from the
        gangs (which takes the name of a job that runs again). Half of ``FINISHED_JOBS_KEPT`` at
        most, so that a compaction drops the older half and the next is due only once as many
        more have finished."""
        finished = [j for j in old.jobs if j.state == JobState.FINISHED and j.runs and j.id not in self.gang_of_job]
        for was in finished[max(0, len(finished) - FINISHED_JOBS_KEPT // 2):]:
            job = copy.copy(was)
            job.id = len(state.jobs)
            job.runs = _runs_on(was.runs, old, state)
            state.jobs.append(job)
            state.job_by_name[job.name] = job.id

    def _room_holder(self, was: Job) -> Job:
        """A finished job of the gang's that holds its kept room until its next job takes it."""
        state = self.state
        holder = Job(
            id=len(state.jobs), name=was.name, queue=was.queue, submit=was.submit, priority=was.priority, duration=None,
            estimate=None, preemptible=False, checkpoint_every=None, min_count=was.min_count, groups=was.groups,
            state=JobState.FINISHED, seq=was.seq,
        )
        state.jobs.append(holder)
        return holder

    def _keep_again(self, key: str, room: KeptRoom, nodes: list[str], holder: Job, now: float) -> None:
        """A room kept for a moved gang (``KeptRoom``) survives a rebuild where its nodes do and
        it is still free, held for the gang's job (pending, or running on its old pods while they
        go), or for a finished job of the gang's (``_room_holder``) when it has none now, until
        its next job takes it. Else it is given back, and the gang queues as any other."""
        gang = self.gangs.get(key)
        state, job, queue = self.state, gang.job if gang is not None else None, holder.queue
        placements = [
            PodPlacement(p.pod, state.node_by_name.get(node, -1), list(p.gpus), p.share, p.cpu, p.memory, extra=p.extra)
            for p, node in zip(room.placements, nodes)
        ]
        # a job running again where it was (its eviction was refused) needs no room; one whose
        # old pods are still going (torn down) does, as does a gang with no pods for now
        waiting = job is None or job.state == JobState.FINISHED or job.current_run is None or (gang is not None and gang.teardown is not None)
        if waiting and queue in state.queues and (job is None or job.queue == queue) and state.room_for(placements):
            if job is None or job.state == JobState.FINISHED:
                job = self._room_holder(holder)
                self.room_of[key] = job.id
            state.keep_room(KeptRoom(job.id, placements, room.charged, room.until, room.made_room_for), now)
            return
        where = ",".join(dict.fromkeys(nodes))
        why = "it runs where it was" if not waiting else "that room is not free any more after the cluster changed"
        state.audit.append(AuditEntry(now, "scheduler", AuditAction.KEEP_ROOM, holder.name, f"gave back the room kept on {where}: {why}"))

    def _keep_in_flight(self, gang: Gang, placements: list[tuple[PodPlacement, str]], now: float) -> None:
        """A gang whose binds are under way when the engine is rebuilt keeps its placements."""
        state = self.state
        names = [p.pod for p, _ in placements]
        job = self._new_job(gang, [gang.pods[n] for n in names if n in gang.pods], now)
        self._refresh_flags(gang, job)
        job.settling = gang.binds_sent  # its binds are still on their way: still no victim
        kept = [
            PodPlacement(p.pod, state.node_by_name[node], list(p.gpus), p.share, p.cpu, p.memory, extra=p.extra)
            for p, node in placements
            if node in state.node_by_name
        ]
        self.engine.adopt(job, kept, now)


def _runs_on(runs: list[Run], old: ClusterState, state: ClusterState) -> list[Run]:
    """Ended runs of ``old`` as runs of ``state``: their placements name the same nodes (node ids
    are positions, which a rebuild renumbers); a placement on a node gone since is left out."""
    out = []
    for run in runs:
        placements = []
        for p in run.placements:
            node_id = state.node_by_name.get(old.nodes[p.node_id].name) if 0 <= p.node_id < len(old.nodes) else None
            if node_id is not None:
                placements.append(dataclasses.replace(p, node_id=node_id, gpus=list(p.gpus)))
        out.append(dataclasses.replace(run, placements=placements))
    return out

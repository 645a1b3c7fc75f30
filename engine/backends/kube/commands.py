"""Operator commands (from the console) as API writes, each recorded as an Event.

Approve, hold and release edit the operators' ConfigMap usher-decisions; cordon and uncordon
patch the node; drain cordons it and evicts its gangs; preempt evicts a gang; set quota edits the
queues ConfigMap. ConfigMaps are replaced with a resourceVersion precondition, read again and
edited again on a conflict. The watches bring each command's effect back to the mirror; nothing
here changes the mirror itself. Which of these this identity may do is asked of the API server
with SelfSubjectAccessReviews (``forbidden_actions``), so a console can show the others disabled.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import Any

from ...channel import Command, CommandError
from ...enums import Action
from ...fmt import QueueResource, figure, limits_change, plural
from ...scenario import ScenarioError, parse_queue_config_async
from ...state import MILLI, AuditEntry
from .client import ApiError, ObjectRef
from .context import Context, pod_ref
from .decisions import DecisionsError, decide, format_decisions, parse_decisions
from .evictor import Evictor
from .gang import Gang
from .objects import LIMIT_FIELDS, edit_queue_limits
from .rbac import DECISIONS_CONFIG_KEY, DECISIONS_CONFIGMAP, QUEUES_CONFIG_KEY, QUEUES_CONFIGMAP
from .status import StatusWriter


class Commands:
    """An operator's command, carried out through the API."""

    def __init__(self, ctx: Context, status: StatusWriter, evictor: Evictor) -> None:
        self.ctx = ctx
        self.status = status
        self.evictor = evictor

    async def apply(self, cmd: Command) -> str:
        """Carry out an operator command through the API; the watch brings its effect back."""
        ctx = self.ctx
        if ctx.readonly:
            raise CommandError("read-only: no changes are made to the cluster")
        now = ctx.clock()
        action = cmd.action
        if action in (Action.FAIL, Action.RECOVER):
            raise CommandError(f"{action} is a replay event; on a cluster, nodes fail by themselves")
        if action in (Action.CORDON, Action.UNCORDON, Action.DRAIN):
            text = await self._node_command(action, cmd.node)
            target = cmd.node or "?"
            ref = self.status.node_ref(target)
        elif action in (Action.APPROVE, Action.HOLD, Action.RELEASE, Action.PREEMPT):
            gang = self.gang_named(cmd.job)
            text = await self._job_command(action, gang, cmd.actor)
            target = gang.key
            first = next(iter(gang.pods.values()))
            ref = pod_ref(first)
        else:
            text, edited = await self._set_quota(cmd)
            target = cmd.queue or "?"
            ref = ObjectRef.to(edited, "ConfigMap")
        ctx.mirror.state.audit.append(AuditEntry(now, cmd.actor, str(action), target, text))
        await self.status.event(ref, f"Usher{str(action)[0].upper()}{str(action)[1:]}", f"{cmd.actor}: {action} {target}: {text}")
        ctx.wake.set()
        return text

    async def forbidden_actions(self) -> dict[Action, str]:
        """The operator actions this identity may not carry out, each with the reason.

        Asked once per action with SelfSubjectAccessReviews (the client caches the answers), so
        the console can show a forbidden action disabled instead of trying it blindly.
        """
        namespace = self.ctx.namespace
        needs: dict[Action, list[tuple[str, str, str, str, str]]] = {
            Action.CORDON: [("patch", "nodes", "", "", "")],
            Action.UNCORDON: [("patch", "nodes", "", "", "")],
            Action.DRAIN: [("patch", "nodes", "", "", ""), ("create", "pods", "eviction", "", "")],
            Action.PREEMPT: [("create", "pods", "eviction", "", "")],
            Action.APPROVE: [("update", "configmaps", "", namespace, DECISIONS_CONFIGMAP)],
            Action.HOLD: [("update", "configmaps", "", namespace, DECISIONS_CONFIGMAP)],
            Action.RELEASE: [("update", "configmaps", "", namespace, DECISIONS_CONFIGMAP)],
            Action.SET_QUOTA: [("update", "configmaps", "", namespace, QUEUES_CONFIGMAP)],
        }
        out: dict[Action, str] = {}
        for action, checks in needs.items():
            for verb, resource, sub, where_ns, name in checks:
                try:
                    allowed = await self.ctx.client.access_review(verb, resource, namespace=where_ns, subresource=sub, name=name)
                except ApiError as exc:
                    out[action] = f"could not ask the API server whether you may {verb} {resource}: {exc}"
                    break
                if not allowed:
                    what = (f"{resource}/{sub}" if sub else resource) + (f" {name}" if name else "")
                    where = f" in {where_ns}" if where_ns else ""
                    out[action] = f"your RBAC does not allow {verb} on {what}{where}"
                    break
        return out

    def gang_named(self, name: str | None) -> Gang:
        """The gang a command names: by its key, its job's name (``PyTorchJob ns/x``), or its
        key without the namespace."""
        mirror = self.ctx.mirror
        gang = mirror.gangs.get(name or "")
        job_id = mirror.state.job_by_name.get(name or "")
        if gang is None and job_id is not None:
            gang = mirror.gang_of_job.get(job_id)
        if gang is None:
            gang = self.gang_titled(name or "")
        if gang is None:
            gang = next((g for g in mirror.gangs.values() if g.key.split("/", 1)[1] == name), None)
        if gang is None or not gang.pods:
            raise CommandError(f"unknown job {name!r}")
        return gang

    def gang_titled(self, name: str) -> Gang | None:
        """The gang whose jobs are called ``name``, with an engine job or not."""
        return next((g for g in self.ctx.mirror.gangs.values() if (g.title or g.key) == name), None)

    async def _node_command(self, action: Action, node: str | None) -> str:
        mirror = self.ctx.mirror
        if node is None or node not in mirror.nodes:
            raise CommandError(f"{action}: unknown node {node!r}")
        await self.ctx.client.set_unschedulable(node, action != Action.UNCORDON)
        if action != Action.DRAIN:
            return "cordoned" if action == Action.CORDON else "uncordoned"
        gangs = [g for g in mirror.gangs.values() if any(p.node == node for p in g.bound())]
        kept: list[str] = []
        stopped: list[Gang] = []
        for gang in gangs:
            kept += await self.evictor.evict_gang(gang, f"node {node} drained", by_operator=True)
            if gang.teardown is not None:
                stopped.append(gang)  # at least one of its pods is going: it is requeued whole
        text = f"drained; requeued {plural(len(stopped), 'job')}" + (f": {', '.join(g.title or g.key for g in stopped)}" if stopped else "")
        return text + (f"; could not evict {plural(len(kept), 'pod')}, the first: {kept[0]}" if kept else "")

    async def _job_command(self, action: Action, gang: Gang, actor: str) -> str:
        ctx = self.ctx
        if action == Action.PREEMPT:
            if not gang.bound():
                return "not running; nothing to preempt"
            kept = await self.evictor.evict_gang(gang, "preempted by an operator", by_operator=True)
            if kept and gang.teardown is None:
                raise CommandError(f"preempt: no pod of {gang.title or gang.key} could be evicted: {kept[0]}")
            return "preempted and requeued" + (f"; {plural(len(kept), 'pod')} still to evict ({kept[0]})" if kept else "")
        if action == Action.RELEASE and not ctx.mirror.held(gang):
            return "not held; nothing to release"
        where = f"{ctx.namespace}/{DECISIONS_CONFIGMAP}[{DECISIONS_CONFIG_KEY}]"
        when = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        known = set(ctx.mirror.gangs)

        async def edit(text: str) -> str:
            try:
                decisions = parse_decisions(text, where)
            except DecisionsError as exc:
                raise CommandError(f"{action}: {exc}; fix it first (kubectl edit configmap -n {ctx.namespace} {DECISIONS_CONFIGMAP})") from None
            return format_decisions(decide(decisions, gang.key, action, actor, when, known, gang.uid, gang.job))

        await self._edit_configmap(DECISIONS_CONFIGMAP, DECISIONS_CONFIG_KEY, edit, str(action))
        return {Action.APPROVE: "approved", Action.HOLD: "held", Action.RELEASE: "released"}[action]

    async def _edit_configmap(self, name: str, key: str, edit: Callable[[str], Awaitable[str]], what: str) -> dict[str, Any]:
        """Replace ``key`` of ConfigMap ``name`` (in usher's namespace) with ``edit`` of its text,
        with optimistic concurrency: a conflicting writer means read again, edit again, retry.
        Returns the ConfigMap as written."""
        namespace, client = self.ctx.namespace, self.ctx.client
        path = f"/api/v1/namespaces/{namespace}/configmaps/{name}"
        for attempt in range(4):
            try:
                obj = await client.get(path)
            except ApiError as exc:
                if exc.code == 404:
                    raise CommandError(f"{what}: ConfigMap {namespace}/{name} does not exist; an admin creates it "
                                       "once (deploy/ ships it), since operators may only update it") from None
                raise CommandError(f"{what}: cannot read {namespace}/{name}: {exc}") from None
            obj.setdefault("data", {})
            obj["data"] = obj["data"] or {}
            obj["data"][key] = await edit(obj["data"].get(key, ""))
            try:
                return await client.replace(path, obj)
            except ApiError as exc:
                if exc.code == 409 and attempt < 3:
                    await asyncio.sleep(random.uniform(0.05, 0.2))
                    continue
                raise CommandError(f"{what}: {exc}") from None
        raise CommandError(f"{what}: {namespace}/{name} kept changing under us; try again")

    async def _set_quota(self, cmd: Command) -> tuple[str, dict[str, Any]]:
        """Merge new limits into the queues ConfigMap; what was set, in words, and the ConfigMap
        as written."""
        namespace = self.ctx.namespace
        limits = {
            field_name: {res: None if v is None else _spec_amount(res, v) for res, v in values.items()}
            for field_name, values in zip(LIMIT_FIELDS, (cmd.quota, cmd.borrowing_limit, cmd.lending_limit))
            if values
        }

        async def edit(text: str) -> str:
            try:
                new_text = edit_queue_limits(text, cmd.queue or "", limits)
            except ValueError as exc:
                raise CommandError(f"setQuota: {exc}; fix {namespace}/{QUEUES_CONFIGMAP} first") from None
            if new_text is None:
                raise CommandError(f"setQuota: unknown queue {cmd.queue!r}")
            try:
                await parse_queue_config_async(new_text, "the edited queue config")
            except ScenarioError as exc:
                raise CommandError(f"setQuota: the result would be invalid: {exc}") from None
            return new_text

        edited = await self._edit_configmap(QUEUES_CONFIGMAP, QUEUES_CONFIG_KEY, edit, "setQuota")
        return limits_change(dict(zip(LIMIT_FIELDS, (cmd.quota, cmd.borrowing_limit, cmd.lending_limit)))), edited


def _spec_amount(resource: str, value: float) -> Any:
    """A state-unit amount as a person writes it in the queue config: GPUs as a number (``80``,
    ``0.5``), CPU and memory as exact Kubernetes quantities (``96``, ``500m``, ``512Gi``)."""
    if resource == QueueResource.GPU:
        return value / MILLI if value % MILLI else int(value // MILLI)
    return figure(resource, value)

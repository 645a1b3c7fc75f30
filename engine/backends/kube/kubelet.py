"""What usher does when a node's kubelet refuses a pod it bound there.

A pod the kubelet refuses at admission (``OutOfnvidia.com/gpu``, ``NodePorts``, ...: parsed by
``refusals.py``) means usher's view of that node is wrong. Its gang backs off (a wait doubled at
each refusal), nothing is placed on the node for a while (``Mirror.doubt``, doubled too), the
node and its pods are listed again and what the mirror missed is taken in (which lifts the
doubt), and it is counted (``usher_bind_refusals_total{reason}``), logged and told in a Warning
Event ``UsherBindRefused`` on the Node, usher's count beside the kubelet's. Intake calls this on
every usher pod's change; what is read again goes through intake's own ``apply``, as the
informers would have delivered it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .context import ASSIGNED_PODS, BIND_RETRY_MAX, Context, EventReason, Source, doubled_wait
from .informer import DeltaType
from .metrics import ErrorKind
from .dra_pods import node_with_devices
from .objects import SCHEDULER_NAME, Phase, PodView, holding_of, key_of
from .refusals import Refusal, kubelet_refusal, usher_count
from .status import StatusWriter

log = logging.getLogger("usher.controller")


class KubeletRefusals:
    """Refusals noticed in pod updates, the back-offs and doubts they cause, and the re-read."""

    def __init__(self, ctx: Context, status: StatusWriter, apply: Callable[[Source, DeltaType, dict[str, Any]], None]) -> None:
        self.ctx = ctx
        self.status = status
        self.apply = apply
        #: the last wait after a kubelet refused a pod of each gang (by key), and of each node:
        #: doubled at the next refusal (a bind that succeeds does not reset it; a pod that runs does)
        self._refusal_waits: dict[str, float] = {}
        self._doubt_waits: dict[str, float] = {}

    def ran(self, gang_key: str) -> None:
        """A pod of the gang runs: its next refusal waits the shortest time again."""
        self._refusal_waits.pop(gang_key, None)

    def refused(self, key: str, obj: dict[str, Any], view: PodView | None) -> tuple[Refusal, str] | None:
        """The kubelet's refusal of a pod this controller saw bound and live until now (not one
        found failed long ago, at a start), with usher's count of the refused resource on its
        node as it stood (the pod's own request taken out while its run still holds it)."""
        mirror = self.ctx.mirror
        if view is None or view.phase != Phase.FAILED or not self.ctx.schedules:
            return None
        gang = mirror.gangs.get(mirror.pod_gang.get(key, ""))
        old = gang.pods.get(view.name) if gang is not None else None
        if old is None or old.uid != view.uid or not old.live:
            return None
        refusal = kubelet_refusal(obj)
        if refusal is None:
            return None
        state = mirror.state
        node = state.nodes[state.node_by_name[refusal.node]] if refusal.node in state.node_by_name else None
        job = gang.job if gang is not None else None
        counted = job is not None and job.current_run is not None and any(p.pod == view.name for p in job.current_run.placements)
        return refusal, usher_count(refusal, node, view, counted)

    def kubelet_refused(self, view: PodView, refusal: Refusal, count: str) -> None:
        """A kubelet refused a pod usher bound: usher's view of that node is wrong. The gang backs
        off (a wait doubled at each refusal), nothing is placed on the node for a while (doubled
        too), the node's pods are read again to find what usher missed; counted, logged, and an
        Event on the Node says so."""
        ctx, mirror = self.ctx, self.ctx.mirror
        ctx.metrics.bind_refused(refusal.label)
        moment = ctx.monotonic()
        for key in [k for k in self._refusal_waits if k not in mirror.gangs]:
            del self._refusal_waits[key]  # gangs gone since: their waits are of no more use
        gang = mirror.gangs.get(view.gang)
        if gang is not None:
            wait = doubled_wait(self._refusal_waits.get(gang.key, 0.0), ctx.bind_retry, BIND_RETRY_MAX)
            self._refusal_waits[gang.key] = wait
            gang.bind_retry = (moment + wait, wait)
            gang.bind_error = f"the kubelet on {refusal.node} refused pod {view.name}: {refusal.reason}"
        doubt = doubled_wait(self._doubt_waits.get(refusal.node, 0.0), ctx.node_doubt, BIND_RETRY_MAX)
        self._doubt_waits[refusal.node] = doubt
        mirror.doubt(refusal.node, moment + doubt)
        log.warning("the kubelet on %s refused pod %s (%s: %s); %s; usher places nothing there for %d s and reads its pods again",
                    refusal.node, refusal.pod, refusal.reason, refusal.message, count, doubt)
        ctx.spawn(self._reread_node(refusal, count, doubt))
        ctx.wake.set()

    async def _reread_node(self, refusal: Refusal, count: str, doubt: float) -> None:
        """Read the node and its unfinished pods from the API server and take in what the mirror
        missed or holds otherwise (a pod, the node's labels, taints or allocatable); when
        something was, usher's view is right again (the doubt is lifted), else the disagreement
        stands until the doubt is over. The Event on the Node says what was found."""
        ctx = self.ctx
        node = refusal.node
        try:
            # a list, not a get: the controller's role lists and watches nodes, never reads one
            nodes = await ctx.client.list("/api/v1/nodes", field_selector=f"metadata.name={node}")
            listed = await ctx.client.list("/api/v1/pods", field_selector=f"spec.nodeName={node},{ASSIGNED_PODS}")
        except Exception as exc:  # noqa: BLE001 - the doubt stands; the watches go on
            ctx.metrics.controller_error(ErrorKind.WATCH)
            log.warning("could not read the pods of %s again: %s", node, exc)
            found = f"reading its pods again failed ({exc})"
        else:
            missed = self._reconcile_node(node, nodes.items[0] if nodes.items else None, listed.items)
            if missed:
                ctx.mirror.trust(node)
                self._doubt_waits.pop(node, None)
                found = f"usher's view had missed {', '.join(missed)}, and has taken {'them' if len(missed) > 1 else 'it'} in"
            else:
                found = f"usher's view of its pods matched the API server's, so it places nothing there for {doubt:.0f} s"
            log.warning("re-read the pods of %s after the kubelet refused %s: %s", node, refusal.pod, found)
        ctx.wake.set()
        if ctx.may_write():
            message = (f"The kubelet refused pod {refusal.pod}, which usher bound here ({refusal.reason}: {refusal.message}); "
                       f"{count}. {found[0].upper()}{found[1:]}.")
            await self.status.event(self.status.node_ref(node), EventReason.BIND_REFUSED_BY_KUBELET, message, warning=True)

    def _reconcile_node(self, node: str, obj: dict[str, Any] | None, pods: list[dict[str, Any]]) -> list[str]:
        """Take in the node ``obj`` (None: gone) if the mirror holds it otherwise, and the listed pods of
        ``node`` that the mirror lacks or holds otherwise (as the informers would have delivered
        them); the pods it held that the API server no longer lists there are logged (their
        watch events bring them). Returns what it missed."""
        mirror = self.ctx.mirror
        missed: list[str] = []
        old = mirror.nodes.get(node)
        if obj is None:
            if old is not None:
                missed.append("the node's deletion")
                self.apply(Source.NODES, DeltaType.DELETED, {"metadata": {"name": node}})
        else:
            new = node_with_devices(obj, mirror.dra)
            if old is None or (old.shape(), old.unschedulable, old.ready) != (new.shape(), new.unschedulable, new.ready):
                missed.append("the node's own labels, taints or allocatable")
                self.apply(Source.NODES, DeltaType.MODIFIED, obj)
        listed: set[str] = set()
        for obj in pods:
            key = key_of(obj)
            listed.add(key)
            if (obj.get("spec") or {}).get("schedulerName") == SCHEDULER_NAME:
                gang = mirror.gangs.get(mirror.pod_gang.get(key, ""))
                view = gang.pods.get(key.split("/", 1)[1]) if gang is not None else None
                if view is None or not view.live or view.node != node:
                    missed.append(key)
                    self.apply(Source.PODS, DeltaType.MODIFIED, obj)
            else:
                holding = holding_of(obj)
                if mirror.holdings.get(key) != holding:
                    missed.append(key)
                    self.apply(Source.ASSIGNED_PODS, DeltaType.MODIFIED, obj)
        stale = sorted(k for k, h in mirror.holdings.items() if h.node == node and k not in listed and k not in mirror.stranded)
        if stale:
            log.info("usher still counts %s on %s, which the API server no longer lists there", ", ".join(stale), node)
        return missed

"""What pods usher does not schedule hold, taken from the engine's nodes.

Pods usher does not schedule (DaemonSets, the default scheduler's, static pods) hold capacity
too: each is a ``Holding`` taken from its node's free GPUs, CPU and memory, so usher never
overcommits a node. A node may be overcommitted already (pods the kubelet admitted before usher
saw them, or room the engine still gave to a run that was ending): what cannot be taken is
*short*, taken as soon as room frees (``retake_short``). A bound pod of usher's adopted with more
GPUs than its run could count owes them as a *debt*, taken the same way.

A part of ``Mirror`` (a mixin): holdings are taken from the engine's state, which a rebuild
replaces, and every change of the mirror may free room for them.
"""

from __future__ import annotations

import logging

from ...policy.placement import pick_whole_gpus
from ...state import extra_offered
from .objects import Holding, PodView, Requests

log = logging.getLogger("usher.controller")

#: how a debt's key starts (``Mirror._debts``): apart from the holdings' pod keys
DEBT = "debt:"


class HeldByOthers:
    """The holdings and debts of ``Mirror`` (see the module's docstring)."""

    def holding_changed(self, key: str, holding: Holding | None) -> None:
        """A pod usher does not schedule appeared on a node, changed or went away."""
        if holding is None:
            self.holdings.pop(key, None)
        else:
            self.holdings[key] = holding
        if self.dirty:
            return  # the coming rebuild takes every holding
        self._give_back(key)
        self._short.discard(key)
        if holding is not None:
            self._take(key, holding)
        elif self._short:
            self.retake_short()

    def _take(self, key: str, holding: Holding) -> None:
        """Take what the pod holds from its node; never more than is free (the node may be
        overcommitted already: pods the kubelet admitted before usher saw them, or on room the
        engine still gave to a run that was ending). What could not be taken is taken as soon as
        room frees (``retake_short``)."""
        state = self.state
        node_id = state.node_by_name.get(holding.node)
        if node_id is None:
            return
        node = state.nodes[node_id]
        want = holding.requests
        gpus = pick_whole_gpus(node, min(want.gpus, node.whole_free)) if want.gpus else []
        cpu, memory = min(want.cpu, max(node.cpu_free, 0)), min(want.memory, max(node.mem_free, 0))
        left = node.extra_free
        extra = tuple((name, min(amount, max(extra_offered(left, name), 0))) for name, amount in want.extra)
        state.allocate(node, gpus, 0, cpu, memory, extra)
        state.changed()
        self._taken[key] = (node_id, gpus, cpu, memory, extra)
        if (len(gpus), cpu, memory, extra) != (want.gpus, want.cpu, want.memory, want.extra):
            self._short.add(key)
        else:
            self._short.discard(key)

    def retake_short(self) -> None:
        """Take again the holdings that found their node too full to take all they hold, now
        that room may have freed (a run ended, members finished, a job was stopped)."""
        if self.dirty:
            return  # the coming rebuild takes every holding
        state = self.state
        for key in sorted(self._short):
            holding = self.holdings.get(key) or self._debts.get(key)
            taken = self._taken.get(key)
            if holding is None or taken is None:
                self._short.discard(key)
                continue
            node = state.nodes[taken[0]]
            want = holding.requests
            if not ((len(taken[1]) < want.gpus and node.whole_free > 0) or (taken[2] < want.cpu and node.cpu_free > 0)
                    or (taken[3] < want.memory and node.mem_free > 0)
                    or any(got < amount and extra_offered(node.extra_free, name) > 0
                           for (name, got), (_, amount) in zip(taken[4], want.extra))):
                continue  # no room has freed there: nothing would change
            self._give_back(key)
            self._take(key, holding)

    def _give_back(self, key: str) -> None:
        taken = self._taken.pop(key, None)
        if taken is not None:
            node_id, gpus, cpu, memory, extra = taken
            self.state.release(self.state.nodes[node_id], gpus, 0, cpu, memory, extra)
            self.state.changed()

    def _owe(self, pod: PodView, missing: int) -> None:
        """A bound pod adopted with ``missing`` GPUs fewer than it holds (``_placement_of`` found
        them given to another run): those are taken as a holding is, now or as soon as room
        frees, so that no node looks free while the kubelet counts it full."""
        self._forgive(pod.key)
        if missing > 0 and pod.node is not None:
            debt = Holding(pod.node, Requests(0, 0, missing))
            self._debts[DEBT + pod.key] = debt
            self._take(DEBT + pod.key, debt)
            log.warning("pod %s is bound to %s on %d GPU(s) usher had counted as taken: counted as soon as they free",
                        pod.key, pod.node, missing)

    def _forgive(self, key: str) -> None:
        """The pod ``key`` holds nothing beyond its run any more (it is gone, or adopted anew)."""
        if self._debts.pop(DEBT + key, None) is not None:
            self._give_back(DEBT + key)
            self._short.discard(DEBT + key)
            self.retake_short()

"""A scenario job's rules against other pods, judged in a replay: the engine's ``PlacementRules``.

A scenario job may give its pods ``labels``, required ``antiAffinity`` and topology ``spread``
(``engine/scenario``); ``build`` turns them into ``PodRules`` and gives each pod group a
``ReplayRules``. The pods around are the engine state's running jobs: every placement of a
running job is a pod with its job's labels (and the implicit ``usher/job: <name>``, which a rule
without a selector picks: the job's own pods). There are no namespaces in a scenario (all pods
are in ``default``), and the pods of a stopped job are gone at once (a replay has no grace
period). The same ``Judge`` as on a cluster decides, so a replay tests the placement a cluster
gets.

``ReplayPods`` is one per state: the labels and rules of the jobs that have any, and a cache of
judges keyed by what they count (the state's admit, stop and change counters, the gang's pods
placed so far, the jobs ``gone``). Jobs without rules never reach it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .evaluate import Incoming, Judge, PlacedPod
from .model import NO_RULES, PodRules

#: the label every scenario job's pods carry: its name (a rule without a selector picks these)
JOB_LABEL = "usher/job"
NAMESPACE = "default"


def job_labels(name: str, labels: Mapping[str, str]) -> dict[str, str]:
    """The labels of a scenario job's pods: its own and ``usher/job``."""
    return {**labels, JOB_LABEL: name}


class ReplayPods:
    """The pods of a replay's running jobs as rules see them (see the module)."""

    def __init__(self, state: Any) -> None:
        self.state = state
        #: by job id: its pods' labels and rules, for the jobs that have labels or rules
        self.jobs: dict[int, tuple[dict[str, str], PodRules]] = {}
        self._judges: dict[tuple[Any, ...], Judge] = {}
        self._at: tuple[int, int, int] = (-1, -1, -1)

    def labels_of(self, job: Any) -> tuple[dict[str, str], PodRules]:
        known = self.jobs.get(job.id)
        return known if known is not None else ({JOB_LABEL: job.name}, NO_RULES)

    def placed(self, gone: frozenset[int]) -> list[PlacedPod]:
        """Every pod of a running job but those of ``gone``."""
        state = self.state
        out: list[PlacedPod] = []
        for jid in sorted(state.running - gone if gone else state.running):
            job = state.jobs[jid]
            run = job.current_run
            if run is None:
                continue
            labels, rules = self.labels_of(job)
            for p in run.placements:
                out.append(PlacedPod(NAMESPACE, labels, p.node_id, rules.anti_affinity, False, rules.affinity,
                                     rules.preferred_affinity, rules.preferred_anti_affinity))
        return out

    def judge(self, rules: ReplayRules, nodes: Sequence[Any], placed: Sequence[tuple[str, int]],
              gone: frozenset[int]) -> Judge:
        state = self.state
        at = (state.admit_counter, state.stop_counter, state.change_counter)
        if at != self._at:
            self._judges.clear()
            self._at = at
        key = (rules, id(nodes), tuple(placed), gone)
        judge = self._judges.get(key)
        if judge is None:
            pods = self.placed(gone)
            gang = dict(rules.gang_items)
            labels = rules.labels
            for group, node_id in placed:
                their = gang.get(group, rules.rules)
                pods.append(PlacedPod(NAMESPACE, labels, node_id, their.anti_affinity, False, their.affinity,
                                      their.preferred_affinity, their.preferred_anti_affinity))
            judge = self._judges[key] = Judge(Incoming(NAMESPACE, labels, rules.rules), pods, nodes, {})
            if len(self._judges) > 256:
                self._judges.clear()
        return judge


@dataclass(slots=True, frozen=True)
class ReplayRules:
    """One pod group's rules in a replay (the engine's ``PlacementRules``)."""

    labels_items: tuple[tuple[str, str], ...]
    rules: PodRules
    #: the rules of every group of its job, by group name (its pods placed so far count)
    gang_items: tuple[tuple[str, PodRules], ...]
    pods: ReplayPods = field(compare=False, hash=False, repr=False)

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.labels_items)

    def allowed(self, nodes: Sequence[Any], placed: Sequence[tuple[str, int]],
                gone: frozenset[int] = frozenset()) -> frozenset[int]:
        return self.pods.judge(self, nodes, placed, gone).allowed()

    def tiers(self, nodes: Sequence[Any], placed: Sequence[tuple[str, int]],
              allowed: frozenset[int], gone: frozenset[int] = frozenset()) -> tuple[frozenset[int], ...]:
        return self.pods.judge(self, nodes, placed, gone).preference(allowed)

    def refusal(self, node: Any, placed: Sequence[tuple[str, int]] = ()) -> str | None:
        found = self.pods.judge(self, self.pods.state.nodes, placed, frozenset()).refusal(node)
        return None if found is None else found.words

    def words(self) -> str:
        return self.rules.words()

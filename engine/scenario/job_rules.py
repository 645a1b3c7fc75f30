"""The rules a scenario job's pods follow against other pods: ``antiAffinity`` and ``spread``.

A replay has no pod specs, so a job says in a few words what a Kubernetes pod says with
``podAntiAffinity`` (required) and ``topologySpreadConstraints``: the words are the upstream
field names (``topologyKey``, ``labelSelector``, ``maxSkew``, ``whenUnsatisfiable``,
``minDomains``), and they mean what they mean there. A rule without a ``labelSelector`` is about
the job's own pods (they carry the label ``usher/job: <job name>``); one with a selector picks the
pods of every job whose ``labels`` it selects. ``build`` turns them into the engine's pod rules,
judged by the same code as on a cluster (``engine/podrules``). Problems name the field, so the
loader points at its line.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from ..podrules.model import Unsatisfiable
from .errors import FieldIssues
from .schema_base import LabelSelector, SchemaModel

__all__ = ["AntiAffinitySpec", "SpreadSpec", "Unsatisfiable"]


class AntiAffinitySpec(SchemaModel):
    """Required pod anti-affinity: no pod of the job goes into a domain of ``topologyKey`` (a
    node label: ``kubernetes.io/hostname`` is one pod per node) that holds a pod it picks."""

    topology_key: str = Field(min_length=1)
    label_selector: LabelSelector | None = None
    """The pods kept apart from; none: the job's own pods."""


class SpreadSpec(SchemaModel):
    """A topology spread constraint over the domains of ``topologyKey``."""

    topology_key: str = Field(min_length=1)
    max_skew: int = Field(ge=1)
    when_unsatisfiable: Unsatisfiable = Unsatisfiable.DO_NOT_SCHEDULE
    """``DoNotSchedule`` (a pod waits rather than break it) or ``ScheduleAnyway`` (a preference)."""
    label_selector: LabelSelector | None = None
    """The pods counted; none: the job's own pods."""
    min_domains: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _min_domains_only_when_hard(self) -> SpreadSpec:
        if self.min_domains is not None and self.when_unsatisfiable != Unsatisfiable.DO_NOT_SCHEDULE:
            raise FieldIssues([("minDomains", "only with whenUnsatisfiable: DoNotSchedule (as in Kubernetes)")])
        return self

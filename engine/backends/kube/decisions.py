"""Operator decisions on a cluster: which jobs an operator approved, and which it holds.

A tenant writes its own pods and the owners they are made from, so whatever usher reads there
is a request, never an entitlement: if a pod's ``usher/approved: "true"`` counted, every pod
could approve itself. Operator decisions therefore live where only operators write: one ConfigMap in usher's
own namespace (``usher-system/usher-decisions``, key ``decisions.yaml``; ``deploy/`` ships it
empty), which the ``usher-operator`` role may update and the controller only reads. A ConfigMap
and not a custom resource, because it needs no CRD installed before usher can start, RBAC limits
it by name, and ``kubectl edit`` shows an operator the whole record at once.

The document names jobs by their gang key (``research/PyTorchJob/llama-ft``, as the console's
Jobs view and the Events show it), with who decided and when, and for an approval the uid of the
object the job is (its top owner, a PodGroup, a lone pod) and the GPUs it asked::

    approved:
      research/PyTorchJob/llama-ft: {by: alice, at: "2026-11-27T21:40:00Z", uid: 5f0c..., gpus: "64"}
    held:
      research/Job/sweep-7: {by: bob, at: "2026-11-27T22:05:12Z"}

An approval grants, so it is of one job: a tenant who deletes an approved job and makes another
under its name (a bigger one, say) does not inherit the approval, nor does a job whose owner
grows past the GPUs approved (a Job's ``parallelism`` raised): each waits for its own
(``Mirror.approved``). One written without a uid (by hand, or for a gang of labels only, which no
object stands for) goes by the name. A hold only keeps back, so it goes by the name: a held job
made again stays held until an operator releases the name.

A console writes it with optimistic concurrency (a conflicting writer: read again, merge, retry)
and drops the entries of jobs no longer on the cluster, so the record stays the size of what
runs and waits.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import yaml

from ...enums import Action
from ...fmt import gpus
from ...records import MILLI, Job
from ...scenario.errors import Problem, format_path
from ...scenario.limits import CONFIG_LIMITS
from ...scenario.yamltree import read_yaml


class Ruling(StrEnum):
    """The kinds of decision the document holds (its top-level keys)."""

    APPROVED = "approved"
    HELD = "held"


@dataclass(frozen=True, slots=True)
class Decisions:
    """The operators' decisions, by gang key (who decided and when, as written)."""

    approved: dict[str, dict[str, str]] = field(default_factory=dict)
    held: dict[str, dict[str, str]] = field(default_factory=dict)

    def of(self, ruling: Ruling) -> dict[str, dict[str, str]]:
        return self.approved if ruling == Ruling.APPROVED else self.held


NONE = Decisions()


class DecisionsError(ValueError):
    """The decisions document cannot be read; ``problems`` names every place, with its line."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


def parse_decisions(text: str | None, where: str) -> Decisions:
    """The decisions in ``text`` (empty or absent: none). Raises :class:`DecisionsError` with
    every problem, each naming ``where``, its line and field: a typo must not drop a hold, and
    the operator who fixes one should not find the next only after the next refusal."""
    if text is None or not text.strip():
        return NONE
    doc = read_yaml(text, CONFIG_LIMITS)
    problems = [Problem(where, format_path(i.path), i.line, i.message) for i in doc.issues]

    def problem(path: tuple[str, ...], message: str) -> None:
        problems.append(Problem(where, format_path(path), doc.line_of(path), message))

    data = doc.data
    if data is None and not problems:
        return NONE
    if not problems and not isinstance(data, dict):
        problem((), f"expected a mapping with keys {', '.join(Ruling)}")
    out: dict[Ruling, dict[str, dict[str, str]]] = {r: {} for r in Ruling}
    if isinstance(data, dict):
        for key in data:
            if key not in set(Ruling):
                problem((str(key),), f"unknown key (expected {', '.join(Ruling)})")
        for ruling in Ruling:
            entries = data.get(str(ruling)) or {}
            if not isinstance(entries, dict):
                problem((str(ruling),), "expected a mapping of job keys")
                continue
            for key, note in entries.items():
                if not isinstance(key, str) or key.count("/") < 1:
                    problem((str(ruling), str(key)), "not a job key (namespace/name or namespace/Kind/name)")
                elif note is not None and not isinstance(note, dict):
                    problem((str(ruling), key), "expected a mapping such as {by: alice, at: ...}")
                else:
                    out[ruling][key] = {str(k): str(v) for k, v in (note or {}).items()}
    if problems:
        raise DecisionsError(problems)
    return Decisions(approved=out[Ruling.APPROVED], held=out[Ruling.HELD])


def format_decisions(decisions: Decisions) -> str:
    """The document for ``decisions`` (keys sorted, so a diff shows what changed)."""
    doc = {str(r): {k: decisions.of(r)[k] for k in sorted(decisions.of(r))} for r in Ruling}
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def job_gpu_milli(job: Job) -> int:
    """The milli-GPUs all of a job's pods ask together."""
    return sum(g.count * g.gpu_milli for g in job.groups)


def approved_gpus_cover(note: Mapping[str, str], job: Job) -> bool:
    """Whether an approval's ``gpus`` (when written; an unreadable one covers nothing) covers
    what ``job`` asks now."""
    given = note.get("gpus")
    if given is None:
        return True
    try:
        return job_gpu_milli(job) <= round(float(given) * MILLI)
    except ValueError:
        return False


def decide(decisions: Decisions, gang: str, action: Action, actor: str, when: str, known: Collection[str],
           uid: str | None = None, job: Job | None = None) -> Decisions:
    """``decisions`` after ``actor`` took ``action`` (approve, hold or release) on ``gang`` at
    ``when``; an approval keeps ``uid``, the incarnation decided on (its top owner's uid), and the
    GPUs ``job`` asks; entries of jobs not in ``known`` (gone from the cluster) are dropped."""
    keep = set(known) | {gang}
    approved = {k: v for k, v in decisions.approved.items() if k in keep}
    held = {k: v for k, v in decisions.held.items() if k in keep}
    note = {"by": actor, "at": when}
    if uid and action == Action.APPROVE:
        note["uid"] = uid
    if job is not None and action == Action.APPROVE:
        note["gpus"] = gpus(job_gpu_milli(job))
    if action == Action.APPROVE:
        approved[gang] = note
    elif action == Action.HOLD:
        held[gang] = note
    elif action == Action.RELEASE:
        held.pop(gang, None)
    else:
        raise ValueError(f"{action} is not an operator decision")
    return Decisions(approved=approved, held=held)


def as_dict(decisions: Decisions) -> dict[str, Any]:
    return {str(r): dict(decisions.of(r)) for r in Ruling}

"""How many pods each kind of owner makes, read from its spec as its controller makes them.

A batch Job's parallelism capped by its completions still to do, a JobSet's replicated jobs, a
Kubeflow job's replica specs (with a PyTorchJob's elastic minimum and an MPIJob whose launcher
waits), a RayCluster's worker groups as KubeRay sizes them, and whether a batch Job makes its
pods anew after an eviction (its ``podFailurePolicy`` and backoff limits). Pure functions of one
object each; a spec that does not say raises ``InvalidOwner`` naming the field path, which
``owners`` turns into the gang's ``problem``. The rules of which owner makes a gang are in
``owners``; the kinds and versions in ``owner_resources``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .owner_resources import KUBEFLOW_SPECS, MPI_JOB, PYTORCH_JOB, GroupLabel, OwnerResource


class InvalidOwner(Exception):
    """An owner's spec does not say how many pods its gang has."""


#: what the containers of an evicted pod exit with: SIGTERM, or SIGKILL after the grace period
EVICTED_EXIT_CODES = (143, 137)


#: the annotation the Job controller keeps on a pod of an Indexed Job: failures of its index so far
INDEX_FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"


def job_survives_eviction(job: dict[str, Any], pods: int, pod: dict[str, Any] | None = None) -> bool:
    """Whether a batch Job makes its pods anew after ``pods`` of them (``pod`` among them) are
    evicted, or fails.

    An evicted pod has the condition ``DisruptionTarget`` and exits 143 (or 137). The Job's
    ``podFailurePolicy`` rules are read in order, as the Job controller does, the first match
    deciding (``Ignore``: not a failure; ``FailJob``/``FailIndex``: the Job fails; ``Count``: a
    failure). A rule on exit codes that may match one of those codes is taken as matching when
    that is worse for the Job, and as not matching when it would ignore the pod. A failure counts
    against ``backoffLimit`` (default 6): the Job fails once more pods have failed than that; with
    ``backoffLimitPerIndex``, against the index's own limit (its failures so far are on the pod,
    ``INDEX_FAILURE_COUNT``): an index over it fails for good."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    counted = True
    for rule in ((spec.get("podFailurePolicy") or {}).get("rules") or []):
        if not isinstance(rule, dict):
            continue
        action = rule.get("action")
        disruption = any(
            isinstance(c, dict) and c.get("type") == "DisruptionTarget" and c.get("status", "True") == "True"
            for c in rule.get("onPodConditions") or []
        )
        codes = rule.get("onExitCodes")
        may_match = isinstance(codes, dict) and _exit_codes_may_match(codes, EVICTED_EXIT_CODES)
        if not (disruption or may_match):
            continue
        if action in ("FailJob", "FailIndex"):
            return False
        if action != "Ignore":
            break  # Count: a failure
        if disruption:
            counted = False
            break
        # Ignore on exit codes the pod may not exit with: read on, as if it did not match
    if not counted:
        return True
    try:
        per_index = spec.get("backoffLimitPerIndex")
        if per_index is not None:
            notes = ((pod or {}).get("metadata") or {}).get("annotations") or {}
            return int(notes.get(INDEX_FAILURE_COUNT) or 0) + 1 <= int(per_index)
        failed, limit = int(status.get("failed") or 0), int(spec.get("backoffLimit", 6))
    except (TypeError, ValueError):
        return False
    return failed + pods <= limit


def _exit_codes_may_match(codes: dict[str, Any], exits: Sequence[int]) -> bool:
    values = {v for v in codes.get("values") or [] if isinstance(v, int)}
    if codes.get("operator") == "NotIn":
        return any(code not in values for code in exits)
    return any(code in values for code in exits)


def job_pods(job: dict[str, Any], what: str, remaining: bool = False, path: Sequence[str | int] = ("spec",)) -> int:
    """Pods one run of a Job (or a Job template, at ``path``) has at once: its parallelism (default
    1) capped by its completions; with ``remaining``, by the completions not yet succeeded."""
    parallelism = int_at(job, (*path, "parallelism"), what, default=1)
    completions = int_at(job, (*path, "completions"), what, default=None)
    if parallelism < 1 or completions == 0:
        zero = "parallelism" if parallelism < 1 else "completions"
        raise InvalidOwner(f"{what} has {field_path((*path, zero))} 0: it runs no pods")
    if completions is None:
        return parallelism
    if remaining:
        succeeded = int_at(job, ("status", "succeeded"), what, default=0)
        completions = max(1, completions - succeeded)
    return min(parallelism, completions)


def jobset_stage(jobset: dict[str, Any], job: dict[str, Any], pod: dict[str, Any]) -> tuple[bool, str | None]:
    """Whether the JobSet starts its replicated jobs one after another, and the pod's one."""
    spec = jobset.get("spec") or {}
    rjobs = spec.get("replicatedJobs")
    if not isinstance(rjobs, list) or len(rjobs) < 2:
        return False, None
    in_order = (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"
    depends = any(isinstance(r, dict) and r.get("dependsOn") for r in rjobs)
    if not (in_order or depends):
        return False, None
    for obj in (job, pod):
        name = ((obj.get("metadata") or {}).get("labels") or {}).get(GroupLabel.JOBSET_REPLICATED_JOB)
        if name:
            return True, name
    return True, None


def jobset_pods(jobset: dict[str, Any], what: str, only: str | None = None) -> int:
    """Pods of all the JobSet's replicated jobs (or of the one named ``only``)."""
    rjobs = (jobset.get("spec") or {}).get("replicatedJobs")
    if not isinstance(rjobs, list) or not rjobs:
        raise InvalidOwner(f"{what} has no spec.replicatedJobs")
    total = 0
    found = only is None
    for i, rjob in enumerate(rjobs):
        if not isinstance(rjob, dict):
            raise InvalidOwner(f"{what} has spec.replicatedJobs[{i}] {rjob!r}, not an object")
        if only is not None and rjob.get("name") != only:
            continue
        found = True
        base: tuple[str | int, ...] = ("spec", "replicatedJobs", i)
        replicas = int_at(jobset, (*base, "replicas"), what, default=1)
        if not isinstance(rjob.get("template"), dict):
            raise InvalidOwner(f"{what} has no {field_path((*base, 'template'))}")
        total += replicas * job_pods(jobset, what, path=(*base, "template", "spec"))
    if not found:
        raise InvalidOwner(f"{what} has no replicated job {only!r} in spec.replicatedJobs")
    if total < 1:
        raise InvalidOwner(f"{what} has spec.replicatedJobs that make no pods")
    return total


def kubeflow_counts(resource: OwnerResource, obj: dict[str, Any], what: str) -> tuple[int, int | None]:
    """(pods, minimum) of a Kubeflow PyTorchJob, MPIJob or TFJob."""
    field_name = KUBEFLOW_SPECS[resource.key]
    spec = obj.get("spec") or {}
    replica_specs = spec.get(field_name)
    if not isinstance(replica_specs, dict) or not replica_specs:
        raise InvalidOwner(f"{what} has no spec.{field_name}")
    replicas: dict[str, int] = {}
    for rtype, rspec in replica_specs.items():
        if not isinstance(rspec, dict):
            raise InvalidOwner(f"{what} has spec.{field_name}.{rtype} {rspec!r}, not an object")
        replicas[rtype] = int_at(obj, ("spec", field_name, rtype, "replicas"), what, default=1)
    size = sum(replicas.values())
    if size < 1:
        raise InvalidOwner(f"{what} has spec.{field_name} that make no pods")
    minimum: int | None = None
    if resource.key == PYTORCH_JOB.key and "Worker" in replicas:
        low = int_at(obj, ("spec", "elasticPolicy", "minReplicas"), what, default=None)
        if low is not None:
            minimum = size - replicas["Worker"] + min(low, replicas["Worker"])
    if resource.key == MPI_JOB.key and spec.get("launcherCreationPolicy") == "WaitForWorkersReady":
        minimum = size - replicas.get("Launcher", 0)
    available = int_at(obj, ("spec", "runPolicy", "schedulingPolicy", "minAvailable"), what, default=None)
    if available is not None:
        minimum = available
    return size, minimum


def ray_counts(cluster: dict[str, Any], what: str) -> tuple[int, int | None]:
    """(pods, minimum) of a RayCluster, as KubeRay creates them (``GetWorkerGroupDesiredReplicas``)."""
    spec = cluster.get("spec") or {}
    groups = spec.get("workerGroupSpecs") or []
    if not isinstance(groups, list):
        raise InvalidOwner(f"{what} has spec.workerGroupSpecs {groups!r}, not a list")
    size = low = 1  # the head
    for i, group in enumerate(groups):
        if not isinstance(group, dict):
            raise InvalidOwner(f"{what} has spec.workerGroupSpecs[{i}] {group!r}, not an object")
        if group.get("suspend") is True:
            continue
        base: tuple[str | int, ...] = ("spec", "workerGroupSpecs", i)
        hosts = int_at(cluster, (*base, "numOfHosts"), what, default=1)
        least = int_at(cluster, (*base, "minReplicas"), what, default=0)
        most = int_at(cluster, (*base, "maxReplicas"), what, default=None)
        replicas = int_at(cluster, (*base, "replicas"), what, default=None)
        if most is not None and least > most:
            desired = most
        elif replicas is None or replicas < least:
            desired = least
        elif most is not None and replicas > most:
            desired = most
        else:
            desired = replicas
        size += desired * hosts
        low += least * hosts
    return size, low if spec.get("enableInTreeAutoscaling") is True else None


_NO_DEFAULT = object()


def int_at(obj: dict[str, Any], path: Sequence[str | int], what: str, default: Any = _NO_DEFAULT) -> Any:
    """The whole number at ``path`` in ``obj``; ``default`` when absent (``InvalidOwner`` without one,
    or when the value there is not a whole number >= 0)."""
    node: Any = obj
    for step in path:
        if isinstance(step, int):
            node = node[step] if isinstance(node, list) and step < len(node) else None
        else:
            node = node.get(step) if isinstance(node, dict) else None
        if node is None:
            break
    if node is None:
        if default is _NO_DEFAULT:
            raise InvalidOwner(f"{what} has no {field_path(path)}")
        return default
    if isinstance(node, bool) or not isinstance(node, int) or node < 0:
        raise InvalidOwner(f"{what} has {field_path(path)} {node!r}, not a whole number")
    return node


def field_path(path: Sequence[str | int]) -> str:
    """``spec.replicatedJobs[1].replicas`` for ``("spec", "replicatedJobs", 1, "replicas")``."""
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
    return out

"""Workload controllers: Job, ReplicaSet, Deployment and DaemonSet, as kube-controller-manager's.

Each owns its pods through ``ownerReferences`` (``controller: true``, ``blockOwnerDeletion``),
found with the store's owner index, so the garbage collector deletes them with their owner.

**Job** (batch/v1): keeps ``min(parallelism, what is left)`` pods active; NonIndexed pods are
``<job>-<random>``; Indexed pods are ``<job>-<index>-<random>`` with the annotation and label
``batch.kubernetes.io/job-completion-index``, ``hostname: <job>-<index>`` and the env variable
``JOB_COMPLETION_INDEX``; the pod labels ``batch.kubernetes.io/job-name``,
``batch.kubernetes.io/controller-uid``, ``job-name``, ``controller-uid``. A pod that ends or is
deleted is counted once: Succeeded in ``succeeded`` (``completedIndexes`` for Indexed); a failure
goes through ``podFailurePolicy`` (the first rule whose ``onExitCodes`` or ``onPodConditions``
match: ``FailJob`` fails the Job with reason ``PodFailurePolicy``, ``Ignore`` does not count it,
``Count`` counts it) and then counts in ``failed``; more than ``backoffLimit`` failures fail the
Job (``BackoffLimitExceeded``). With ``podFailurePolicy`` (or ``podReplacementPolicy: Failed``) a
terminating pod is replaced only once it is terminal. Conditions: ``SuccessCriteriaMet`` +
``Complete``, ``FailureTarget`` + ``Failed``, ``Suspended``; status ``active``, ``ready``,
``terminating``, ``succeeded``, ``failed``, ``startTime``, ``completionTime``. A failed or
suspended Job's active pods are deleted. Not modelled: the failure backoff delay,
``activeDeadlineSeconds``, ``ttlSecondsAfterFinished``, ``backoffLimitPerIndex``,
``successPolicy``, pod tracking finalizers (outcomes are remembered in memory).

**ReplicaSet**: ``replicas`` pods (``<rs>-<random>``); terminal pods do not count and are
replaced; extra pods are deleted (unbound and not-ready first). Status ``replicas``,
``fullyLabeledReplicas``, ``readyReplicas``, ``availableReplicas``, ``observedGeneration``.

**Deployment**: one ReplicaSet per template (``<deployment>-<pod-template-hash>``, the label in
its selector and template), scaled to ``replicas``; the others are scaled to 0 at once (no
rolling surge/unavailability accounting). Status ``replicas``, ``updatedReplicas``,
``readyReplicas``, ``availableReplicas``, ``unavailableReplicas``, conditions Available and
Progressing.

**DaemonSet**: one pod per node that matches the template's nodeSelector and required node
affinity and whose NoSchedule/NoExecute taints the pod tolerates, pinned with the required node
affinity ``matchFields metadata.name In [node]`` (the template's node affinity replaced, as the
real controller does) and given the tolerations DaemonSet pods get automatically (not-ready and
unreachable ``NoExecute``; disk-, memory-, pid-pressure and unschedulable ``NoSchedule``); the
default scheduler binds them. A pod on a node that no longer should run one is deleted, a
terminal one replaced. Status ``desiredNumberScheduled``, ``currentNumberScheduled``,
``numberMisscheduled``, ``numberReady``, ``numberAvailable``, ``numberUnavailable``,
``updatedNumberScheduled``, ``observedGeneration``. Not modelled: rolling updates (pods of an
older template are not replaced), ``minReadySeconds``, surge.

Longer than the house's 600 lines: the four controllers share ``OwnerPart`` (pods owned through
the store's owner index, made from a template) and the helpers at the top of the module, each
being a class of its own; a fifth controller or a grown one goes to a module of its own, as the
custom operators did (``operators``).
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from .job_podgroup import pod_group_for
from .kinds import RESOURCE_TYPES, Resource, ResourceType
from .nodefit import (
    condition,
    controller_ref,
    is_terminal,
    matches_node_selector,
    set_condition,
    untolerated,
)
from .parts import Host, Part
from .store import ApiError, Change, EventType, LabelSelector, Stored

JsonObject = dict[str, Any]

POD_RT = RESOURCE_TYPES[Resource.PODS]
JOB_RT = RESOURCE_TYPES[Resource.JOBS]
RS_RT = RESOURCE_TYPES[Resource.REPLICASETS]
DEPLOY_RT = RESOURCE_TYPES[Resource.DEPLOYMENTS]
DS_RT = RESOURCE_TYPES[Resource.DAEMONSETS]

INDEX_KEY = "batch.kubernetes.io/job-completion-index"


def owner_reference(owner: JsonObject, rt: ResourceType) -> JsonObject:
    return {
        "apiVersion": rt.api_version,
        "kind": rt.kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod_ready(pod: JsonObject) -> bool:
    c = condition(pod, "Ready")
    return c is not None and c.get("status") == "True"


class OwnerPart(Part):
    """A controller of one kind that owns pods (or ReplicaSets)."""

    owner_rt: ResourceType

    def owned(self, owner: JsonObject, rt: ResourceType = POD_RT) -> list[Stored]:
        uid = owner["metadata"]["uid"]
        return [
            s for t, s in self.store.dependents(uid)
            if t.key == rt.key and (controller_ref(s.obj) or {}).get("uid") == uid
        ]

    def create_pod(self, owner: JsonObject, template: JsonObject, generate_name: str, extra_labels: JsonObject | None = None,
                   annotations: JsonObject | None = None, mutate: Any = None) -> None:
        meta = copy.deepcopy(template.get("metadata") or {})
        pod: JsonObject = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": generate_name,
                "namespace": owner["metadata"].get("namespace"),
                "labels": {**(meta.get("labels") or {}), **(extra_labels or {})},
                "annotations": {**(meta.get("annotations") or {}), **(annotations or {})},
                "ownerReferences": [owner_reference(owner, self.owner_rt)],
            },
            "spec": copy.deepcopy(template.get("spec") or {}),
        }
        if meta.get("finalizers"):
            pod["metadata"]["finalizers"] = list(meta["finalizers"])
        if not pod["metadata"]["annotations"]:
            del pod["metadata"]["annotations"]
        if mutate is not None:
            mutate(pod)
        self.store.create_stored(POD_RT, pod, owner["metadata"].get("namespace"))

    def delete(self, rt: ResourceType, stored: Stored) -> None:
        meta = stored.obj["metadata"]
        if meta.get("deletionTimestamp"):
            return
        try:
            self.store.delete_stored(rt, meta["name"], meta.get("namespace"), {"uid": meta["uid"]})
        except ApiError:
            pass

    def write_status(self, rt: ResourceType, stored: Stored, status: JsonObject) -> None:
        current = self.store.get_stored(rt, stored.obj["metadata"]["name"], stored.obj["metadata"].get("namespace"))
        new = current.copy()
        new["status"] = status
        self.store.commit_update(rt, current, new)

    def sync(self) -> None:
        for stored in list(self.stored(self.owner_rt.resource)):
            if stored.obj["metadata"].get("deletionTimestamp"):
                continue
            self.mgr.guard(lambda s=stored: self.sync_one(s))

    def sync_one(self, stored: Stored) -> None:
        raise NotImplementedError


# ====================================================================== Job


def _indexes_text(indexes: set[int]) -> str:
    """``completedIndexes``: ``1,3-5,7``."""
    out, run = [], []
    for i in sorted(indexes):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [i]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(out)


def _parse_indexes(text: str | None) -> set[int]:
    out: set[int] = set()
    for part in (text or "").split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _pod_index(pod: JsonObject) -> int | None:
    text = (pod["metadata"].get("annotations") or {}).get(INDEX_KEY) or (pod["metadata"].get("labels") or {}).get(INDEX_KEY)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _exit_codes(pod: JsonObject) -> list[tuple[str, int]]:
    out = []
    for s in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (s.get("state") or {}).get("terminated")
        if term is not None:
            out.append((s.get("name"), int(term.get("exitCode", 0))))
    return out


def failure_action(job: JsonObject, pod: JsonObject) -> tuple[str, str | None]:
    """``(action, message)`` for a failed pod under the Job's podFailurePolicy (Count when none matches)."""
    policy = (job.get("spec") or {}).get("podFailurePolicy") or {}
    for i, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action", "Count")
        on_codes = rule.get("onExitCodes")
        if on_codes:
            container = on_codes.get("containerName")
            values = {int(v) for v in on_codes.get("values") or []}
            op = on_codes.get("operator", "In")
            for name, code in _exit_codes(pod):
                if container and name != container:
                    continue
                if (op == "In" and code in values) or (op == "NotIn" and code not in values and code != 0):
                    return action, (f"Container {name} for pod {pod['metadata'].get('namespace')}/{pod['metadata']['name']} "
                                    f"failed with exit code {code} matching {action} rule at index {i}")
        for pattern in rule.get("onPodConditions") or []:
            c = condition(pod, pattern.get("type", ""))
            if c is not None and c.get("status") == pattern.get("status", "True"):
                return action, (f"Pod {pod['metadata'].get('namespace')}/{pod['metadata']['name']} has condition "
                                f"{pattern.get('type')} matching {action} rule at index {i}")
    return "Count", None


class JobController(OwnerPart):
    resources = (Resource.JOBS, Resource.PODS)
    owner_rt = JOB_RT

    def __init__(self, mgr: Host) -> None:
        super().__init__(mgr)
        #: job uid -> pod uid -> the pod as it ended (terminal, or as it was when deleted)
        self.outcomes: dict[str, dict[str, JsonObject]] = {}
        #: job uid -> pod uids already counted in its status
        self.counted: dict[str, set[str]] = {}

    def on_change(self, change: Change) -> None:
        if change.rt.resource == Resource.JOBS:
            self._dirty = True
            if change.type is EventType.DELETED:
                uid = change.new.obj["metadata"]["uid"]
                self.outcomes.pop(uid, None)
                self.counted.pop(uid, None)
        elif change.rt.resource == Resource.PODS:
            ref = controller_ref(change.new.obj)
            if ref is None or ref.get("kind") != "Job":
                return
            self._dirty = True
            pod = change.new.obj
            if change.type is EventType.DELETED or is_terminal(pod):
                self.outcomes.setdefault(ref["uid"], {}).setdefault(pod["metadata"]["uid"], pod)

    def sync_one(self, stored: Stored) -> None:
        job = stored.obj
        uid = job["metadata"]["uid"]
        spec, old_status = job.get("spec") or {}, job.get("status") or {}
        status = copy.deepcopy(old_status)
        now = self.store.now()
        finished = any(
            (condition(job, t) or {}).get("status") == "True" for t in ("Complete", "Failed")
        )
        pods = self.owned(job)
        for s in pods:
            if is_terminal(s.obj):
                self.outcomes.setdefault(uid, {}).setdefault(s.obj["metadata"]["uid"], s.obj)
        indexed = spec.get("completionMode") == "Indexed"
        completions = spec.get("completions")
        completed = _parse_indexes(status.get("completedIndexes")) if indexed else set()
        counted = self.counted.setdefault(uid, set())
        fail_reason: tuple[str, str] | None = None
        for pod_uid, pod in sorted(self.outcomes.get(uid, {}).items(), key=lambda kv: kv[1]["metadata"]["name"]):
            if pod_uid in counted:
                continue
            counted.add(pod_uid)
            if finished:
                continue
            if (pod.get("status") or {}).get("phase") == "Succeeded":
                index = _pod_index(pod)
                if indexed:
                    if index is not None and index not in completed:
                        completed.add(index)
                        status["succeeded"] = status.get("succeeded", 0) + 1
                else:
                    status["succeeded"] = status.get("succeeded", 0) + 1
                continue
            action, message = failure_action(job, pod)
            if action == "Ignore":
                continue
            status["failed"] = status.get("failed", 0) + 1
            if action == "FailJob" and fail_reason is None:
                fail_reason = ("PodFailurePolicy", message or "")
        if indexed:
            text = _indexes_text(completed)
            if text:
                status["completedIndexes"] = text
        active = [s for s in pods if not is_terminal(s.obj) and not s.obj["metadata"].get("deletionTimestamp")]
        terminating = [s for s in pods if not is_terminal(s.obj) and s.obj["metadata"].get("deletionTimestamp")]
        suspended = bool(spec.get("suspend"))
        if not finished:
            if fail_reason is None and status.get("failed", 0) > int(spec.get("backoffLimit", 6)):
                fail_reason = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
            if fail_reason is not None:
                for type_ in ("FailureTarget", "Failed"):
                    set_condition(status, now, type_, "True", fail_reason[0], fail_reason[1], probe=True)
                    self._probe(status, type_, now)
                finished = True
                for s in active:
                    self.delete(POD_RT, s)
                active = []
            else:
                succeeded = status.get("succeeded", 0)
                if indexed:
                    done = completions is not None and len(completed) >= int(completions)
                elif completions is not None:
                    done = succeeded >= int(completions)
                else:
                    done = succeeded > 0 and not active
                if done:
                    for type_ in ("SuccessCriteriaMet", "Complete"):
                        set_condition(status, now, type_, "True", "CompletionsReached" if type_ == "SuccessCriteriaMet" else None,
                                      "Reached expected number of succeeded pods" if type_ == "SuccessCriteriaMet" else None)
                        self._probe(status, type_, now)
                    status["completionTime"] = now
                    finished = True
                    for s in active:
                        self.delete(POD_RT, s)
                    active = []
        if not finished:
            if suspended:
                for s in active:
                    self.delete(POD_RT, s)
                active = []
                set_condition(status, now, "Suspended", "True", "JobSuspended", "Job suspended")
                self._probe(status, "Suspended", now)
            else:
                if condition({"status": status}, "Suspended") is not None:
                    set_condition(status, now, "Suspended", "False", "JobResumed", "Job resumed")
                status.setdefault("startTime", now)
                active = self._manage(job, active, terminating, completed)
        status["active"] = len(active)
        status["ready"] = sum(1 for s in active if pod_ready(s.obj))
        status["terminating"] = len(terminating)
        status.setdefault("succeeded", 0)
        status.setdefault("failed", 0)
        status.setdefault("uncountedTerminatedPods", {})
        if not status.get("conditions"):
            status.pop("conditions", None)
        if status != old_status:
            self.write_status(JOB_RT, stored, status)

    @staticmethod
    def _probe(status: JsonObject, type_: str, now: str) -> None:
        for c in status.get("conditions") or []:
            if c["type"] == type_:
                c["lastProbeTime"] = c.get("lastProbeTime") or now

    def _manage(self, job: JsonObject, active: list[Stored], terminating: list[Stored], completed: set[int]) -> list[Stored]:
        spec = job.get("spec") or {}
        parallelism = int(spec.get("parallelism", 1))
        completions = spec.get("completions")
        wait_terminal = bool(spec.get("podFailurePolicy")) or spec.get("podReplacementPolicy") == "Failed"
        busy = active + (terminating if wait_terminal else [])
        succeeded = (job.get("status") or {}).get("succeeded", 0)
        name = job["metadata"]["name"]
        if spec.get("completionMode") == "Indexed":
            taken = {i for s in busy if (i := _pod_index(s.obj)) is not None}
            missing = [i for i in range(int(completions or 0)) if i not in completed and i not in taken]
            room = max(0, parallelism - len(busy))
            for index in missing[:room]:
                self._create(job, f"{name}-{index}-", index)
            extra = [s for s in active if (_pod_index(s.obj) or 0) in completed]
            for s in extra:
                self.delete(POD_RT, s)
        else:
            if completions is None:
                want = parallelism if not succeeded else 0
            else:
                want = min(parallelism, max(0, int(completions) - int(succeeded)))
            for _ in range(max(0, want - len(busy))):
                self._create(job, f"{name}-", None)
            if len(active) > want:
                for s in sorted(active, key=lambda s: (pod_ready(s.obj), s.obj["metadata"]["name"]))[: len(active) - want]:
                    self.delete(POD_RT, s)
        return [s for s in self.owned(job) if not is_terminal(s.obj) and not s.obj["metadata"].get("deletionTimestamp")]

    def _create(self, job: JsonObject, generate_name: str, index: int | None) -> None:
        uid, name = job["metadata"]["uid"], job["metadata"]["name"]
        labels = {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        }
        annotations = {}
        if index is not None:
            labels[INDEX_KEY] = str(index)
            annotations[INDEX_KEY] = str(index)

        def mutate(pod: JsonObject) -> None:
            if index is None:
                return
            spec = pod["spec"]
            spec.setdefault("hostname", f"{name}-{index}")
            for group in ("initContainers", "containers"):
                for c in spec.get(group) or []:
                    env = c.setdefault("env", [])
                    if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in env):
                        env.insert(0, {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                            "apiVersion": "v1", "fieldPath": f"metadata.annotations['{INDEX_KEY}']"}}})

        group = pod_group_for(self.store, job, JOB_RT, lambda: bool(self.owned(job)), owner_reference)

        def grouped(pod: JsonObject) -> None:
            mutate(pod)
            if group is not None:  # the Job's runtime PodGroup (WorkloadWithJob: job_podgroup)
                pod["spec"]["schedulingGroup"] = {"podGroupName": group[0]}
                pod["metadata"]["ownerReferences"].append(group[1])

        self.create_pod(job, (job.get("spec") or {}).get("template") or {}, generate_name, labels, annotations, grouped)


# ====================================================================== ReplicaSet


class ReplicaSetController(OwnerPart):
    resources = (Resource.REPLICASETS, Resource.PODS)
    owner_rt = RS_RT

    def on_change(self, change: Change) -> None:
        if change.rt.resource == Resource.REPLICASETS:
            self._dirty = True
        elif change.rt.resource == Resource.PODS:
            ref = controller_ref(change.new.obj)
            if ref is not None and ref.get("kind") == "ReplicaSet":
                self._dirty = True

    def sync_one(self, stored: Stored) -> None:
        rs = stored.obj
        spec = rs.get("spec") or {}
        want = int(spec.get("replicas", 1))
        pods = self.owned(rs)
        active = [s for s in pods if not is_terminal(s.obj) and not s.obj["metadata"].get("deletionTimestamp")]
        if len(active) < want:
            for _ in range(want - len(active)):
                self.create_pod(rs, spec.get("template") or {}, f"{rs['metadata']['name']}-")
        elif len(active) > want:
            order = sorted(active, key=lambda s: (bool((s.obj.get("spec") or {}).get("nodeName")), pod_ready(s.obj),
                                                  s.obj["metadata"].get("creationTimestamp", ""), s.obj["metadata"]["name"]))
            for s in order[: len(active) - want]:
                self.delete(POD_RT, s)
        active = [s for s in self.owned(rs) if not is_terminal(s.obj) and not s.obj["metadata"].get("deletionTimestamp")]
        selector = LabelSelector.from_spec(spec.get("selector") or {})
        template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        ready = sum(1 for s in active if pod_ready(s.obj))
        status = {
            "replicas": len(active),
            "fullyLabeledReplicas": sum(1 for s in active if selector.matches(s.obj["metadata"].get("labels") or {})
                                        and all((s.obj["metadata"].get("labels") or {}).get(k) == v for k, v in template_labels.items())),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "observedGeneration": rs["metadata"].get("generation", 1),
        }
        if status != (rs.get("status") or {}):
            self.write_status(RS_RT, stored, status)


# ====================================================================== Deployment


def template_hash(template: JsonObject) -> str:
    """A stable hash of a pod template, in the alphabet of ``pod-template-hash`` values."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).digest()
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    n = int.from_bytes(digest[:8], "big")
    out = ""
    for _ in range(10):
        n, r = divmod(n, len(alphabet))
        out += alphabet[r]
    return out


class DeploymentController(OwnerPart):
    resources = (Resource.DEPLOYMENTS, Resource.REPLICASETS)
    owner_rt = DEPLOY_RT

    def sync_one(self, stored: Stored) -> None:
        d = stored.obj
        spec = d.get("spec") or {}
        name, ns = d["metadata"]["name"], d["metadata"].get("namespace")
        template = spec.get("template") or {}
        h = template_hash(template)
        want = int(spec.get("replicas", 1))
        owned = self.owned(d, RS_RT)
        current = next((s for s in owned if (s.obj["metadata"].get("labels") or {}).get("pod-template-hash") == h), None)
        revisions = [int((s.obj["metadata"].get("annotations") or {}).get("deployment.kubernetes.io/revision", "0")) for s in owned]
        if current is None:
            rs_template = copy.deepcopy(template)
            rs_template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = h
            selector = copy.deepcopy(spec.get("selector") or {})
            selector.setdefault("matchLabels", {})["pod-template-hash"] = h
            rs = {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": f"{name}-{h}",
                    "namespace": ns,
                    "labels": {**(template.get("metadata") or {}).get("labels", {}), "pod-template-hash": h},
                    "annotations": {
                        "deployment.kubernetes.io/desired-replicas": str(want),
                        "deployment.kubernetes.io/max-replicas": str(want),
                        "deployment.kubernetes.io/revision": str(max(revisions, default=0) + 1),
                    },
                    "ownerReferences": [owner_reference(d, DEPLOY_RT)],
                },
                "spec": {"replicas": want, "selector": selector, "template": rs_template,
                         "minReadySeconds": spec.get("minReadySeconds", 0)},
            }
            try:
                self.store.create_stored(RS_RT, rs, ns)
            except ApiError:
                return
        for s in self.owned(d, RS_RT):
            is_current = (s.obj["metadata"].get("labels") or {}).get("pod-template-hash") == h
            replicas = want if is_current else 0
            if (s.obj.get("spec") or {}).get("replicas") != replicas:
                new = s.copy()
                new["spec"]["replicas"] = replicas
                new["metadata"].setdefault("annotations", {})["deployment.kubernetes.io/desired-replicas"] = str(want)
                self.store.commit_update(RS_RT, s, new)
        sets = [s.obj for s in self.owned(d, RS_RT)]
        st = [(x.get("status") or {}) for x in sets]
        updated = next((x for x in sets if (x["metadata"].get("labels") or {}).get("pod-template-hash") == h), None)
        available = sum(x.get("availableReplicas", 0) for x in st)
        total = sum(x.get("replicas", 0) for x in st)
        status = copy.deepcopy(d.get("status") or {})
        now = self.store.now()
        status.update(
            observedGeneration=d["metadata"].get("generation", 1),
            replicas=total,
            updatedReplicas=((updated or {}).get("status") or {}).get("replicas", 0),
            readyReplicas=sum(x.get("readyReplicas", 0) for x in st),
            availableReplicas=available,
            unavailableReplicas=max(0, want - available),
        )
        max_unavailable = 0 if want == 0 else want - 1
        if available >= want - max_unavailable and available > 0 or want == 0:
            set_condition(status, now, "Available", "True", "MinimumReplicasAvailable",
                          "Deployment has minimum availability.", probe=False)
        else:
            set_condition(status, now, "Available", "False", "MinimumReplicasUnavailable",
                          "Deployment does not have minimum availability.", probe=False)
        rs_name = f"{name}-{h}"
        if available >= want:
            set_condition(status, now, "Progressing", "True", "NewReplicaSetAvailable",
                          f'ReplicaSet "{rs_name}" has successfully progressed.', probe=False)
        else:
            set_condition(status, now, "Progressing", "True", "ReplicaSetUpdated",
                          f'ReplicaSet "{rs_name}" is progressing.', probe=False)
        for c in status.get("conditions") or []:
            c.setdefault("lastUpdateTime", c.get("lastTransitionTime"))
        if status != (d.get("status") or {}):
            self.write_status(DEPLOY_RT, stored, status)


# ====================================================================== DaemonSet

DAEMON_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]


def _daemon_spec(template_spec: JsonObject, node: str) -> JsonObject:
    spec = copy.deepcopy(template_spec)
    affinity = spec.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
    }
    tolerations = spec.setdefault("tolerations", [])
    for t in DAEMON_TOLERATIONS:
        if not any(x.get("key") == t["key"] and x.get("effect") == t["effect"] for x in tolerations):
            tolerations.append(dict(t))
    if spec.get("hostNetwork"):
        t = {"key": "node.kubernetes.io/network-unavailable", "operator": "Exists", "effect": "NoSchedule"}
        if t not in tolerations:
            tolerations.append(t)
    return spec


def _pinned_node(pod: JsonObject) -> str | None:
    if (pod.get("spec") or {}).get("nodeName"):
        return pod["spec"]["nodeName"]
    terms = ((((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    for term in terms:
        for f in term.get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("values"):
                return f["values"][0]
    return None


class DaemonSetController(OwnerPart):
    resources = (Resource.DAEMONSETS, Resource.NODES)
    owner_rt = DS_RT

    def on_change(self, change: Change) -> None:
        if change.rt.resource in (Resource.DAEMONSETS, Resource.NODES):
            self._dirty = True
        elif change.rt.resource == Resource.PODS:
            ref = controller_ref(change.new.obj)
            if ref is not None and ref.get("kind") == "DaemonSet":
                self._dirty = True

    def should_run(self, ds: JsonObject, node: JsonObject) -> bool:
        template_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
        if not matches_node_selector(template_spec, node):
            return False
        probe = {"spec": _daemon_spec(template_spec, node["metadata"]["name"])}
        return untolerated(probe, (node.get("spec") or {}).get("taints") or []) is None

    def sync_one(self, stored: Stored) -> None:
        ds = stored.obj
        spec = ds.get("spec") or {}
        template = spec.get("template") or {}
        generation = ds["metadata"].get("generation", 1)
        revision_hash = template_hash(template)
        nodes = sorted((s.obj for s in self.stored(Resource.NODES)), key=lambda n: n["metadata"]["name"])
        by_node: dict[str, list[Stored]] = {}
        for s in self.owned(ds):
            node = _pinned_node(s.obj)
            if node is not None:
                by_node.setdefault(node, []).append(s)
        desired = current = misscheduled = ready = updated = 0
        node_names = {n["metadata"]["name"] for n in nodes}
        for node in nodes:
            name = node["metadata"]["name"]
            pods = by_node.get(name, [])
            live = [s for s in pods if not s.obj["metadata"].get("deletionTimestamp")]
            if self.should_run(ds, node):
                desired += 1
                for s in live:
                    if is_terminal(s.obj):
                        self.delete(POD_RT, s)
                live = [s for s in live if not is_terminal(s.obj)]
                if not live:
                    self._create(ds, template, name, generation, revision_hash)
                    continue
                current += 1
                for s in live[1:]:
                    self.delete(POD_RT, s)
                if pod_ready(live[0].obj):
                    ready += 1
                if (live[0].obj["metadata"].get("labels") or {}).get("controller-revision-hash") == revision_hash:
                    updated += 1
            else:
                if live:
                    misscheduled += 1
                for s in live:
                    self.delete(POD_RT, s)
        for name, pods in by_node.items():
            if name not in node_names:
                for s in pods:
                    self.delete(POD_RT, s)
        status = {
            "currentNumberScheduled": current,
            "desiredNumberScheduled": desired,
            "numberMisscheduled": misscheduled,
            "numberReady": ready,
            "numberAvailable": ready,
            "updatedNumberScheduled": updated,
            "observedGeneration": generation,
        }
        if desired - ready:
            status["numberUnavailable"] = desired - ready
        if status != (ds.get("status") or {}):
            self.write_status(DS_RT, stored, status)

    def _create(self, ds: JsonObject, template: JsonObject, node: str, generation: int, revision_hash: str) -> None:
        labels = {"controller-revision-hash": revision_hash, "pod-template-generation": str(generation)}

        def mutate(pod: JsonObject) -> None:
            pod["spec"] = _daemon_spec(pod.get("spec") or {}, node)

        self.create_pod(ds, template, f"{ds['metadata']['name']}-", labels, None, mutate)

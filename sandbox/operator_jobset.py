"""The JobSet operator's stand-in.

**JobSet** (jobset.x-k8s.io/v1alpha2, JobSet v0.7/v0.8): the webhook's defaults (Job
``completionMode: Indexed``, pod ``restartPolicy: OnFailure``, ``network.enableDNSHostnames``
true, subdomain the JobSet's name, success policy ``All``); one batch/v1 Job per replicatedJob
replica, ``<jobset>-<replicatedJob>-<jobIndex>``, owned by the JobSet, with these labels and the
same annotations on the Job and its pod template: ``jobset.sigs.k8s.io/jobset-name``,
``jobset.sigs.k8s.io/replicatedjob-name``, ``jobset.sigs.k8s.io/replicatedjob-replicas``,
``jobset.sigs.k8s.io/global-replicas``, ``jobset.sigs.k8s.io/job-index``,
``jobset.sigs.k8s.io/job-global-index``, ``jobset.sigs.k8s.io/job-key`` (sha1 of
``<namespace>/<job>``), ``jobset.sigs.k8s.io/restart-attempt``; the pod template's
``subdomain``; a headless Service ``<subdomain>`` selecting ``jobset-name``. The sandbox's Job
controller runs the Jobs (pods ``<job>-<index>-<random>`` owned by the Job, hostname
``<job>-<index>``). A failed Job fails the JobSet (``FailedJobs``), or with ``failurePolicy``
restarts it (rules by ``onJobFailureReasons``/``targetReplicatedJobs``; ``maxRestarts``, then
``ReachedMaxRestarts``): ``status.restarts`` + 1, every Job of the older attempt deleted and
created again; Completed (``AllJobsCompleted``) by ``successPolicy``; once finished the active
Jobs are deleted; ``suspend`` suspends the Jobs. Status ``replicatedJobsStatus`` (ready,
succeeded, failed, active, suspended), ``restarts``, ``restartsCountTowardsMax``,
``terminalState``, conditions.

What the operators share, and what none models, is in :mod:`.operator_base` and :mod:`.operators`.
"""

from __future__ import annotations

import copy
from typing import Any

from .kinds import RESOURCE_TYPES, Resource, ResourceType
from .nodefit import condition, set_condition
from .operator_base import annotations_of, cond_true, CustomPart, headless_service, labels_of, sha1
from .store import ApiError, Stored

JsonObject = dict[str, Any]

JOB_RT = RESOURCE_TYPES[Resource.JOBS]
SVC_RT = RESOURCE_TYPES[Resource.SERVICES]


# ====================================================================== JobSet

JS = "jobset.sigs.k8s.io/"
JS_NAME = JS + "jobset-name"
JS_RJOB = JS + "replicatedjob-name"
JS_RJOB_REPLICAS = JS + "replicatedjob-replicas"
JS_GLOBAL_REPLICAS = JS + "global-replicas"
JS_JOB_INDEX = JS + "job-index"
JS_GLOBAL_INDEX = JS + "job-global-index"
JS_JOB_KEY = JS + "job-key"
JS_RESTARTS = JS + "restart-attempt"
JS_EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"


class JobSetController(CustomPart):
    key = "jobsets.jobset.x-k8s.io"
    kind = "JobSet"
    child_keys = (JOB_RT.key,)

    def reconcile_one(self, rt: ResourceType, stored: Stored) -> None:
        js = stored.obj
        spec = js.get("spec") or {}
        status = copy.deepcopy(js.get("status") or {})
        name, ns = js["metadata"]["name"], js["metadata"].get("namespace", "default")
        now = self.store.now()
        rjobs = [r for r in spec.get("replicatedJobs") or [] if r.get("name")]
        jobs = self.owned(js, JOB_RT)
        if cond_true(js, "Completed") or cond_true(js, "Failed"):
            for s in jobs:
                if not _job_finished(s.obj):
                    self.delete(JOB_RT, s)
            return
        restarts = int(status.get("restarts", 0))
        current = [s for s in jobs if labels_of(s.obj).get(JS_RESTARTS) == str(restarts)]
        for s in jobs:
            if s not in current:
                self.delete(JOB_RT, s)  # an older attempt: recreated
        network = spec.get("network") or {}
        dns = network.get("enableDNSHostnames", True) is not False
        subdomain = network.get("subdomain") or name
        if dns:
            self.ensure(SVC_RT, js, headless_service(subdomain, ns, self.ref(js, rt), {JS_NAME: name},
                                                    publish_not_ready=network.get("publishNotReadyAddresses", True) is not False))
        finished = self._failure(js, status, current, now) or self._success(js, status, current, rjobs, now)
        if finished:
            for s in current:
                if not _job_finished(s.obj):
                    self.delete(JOB_RT, s)
        elif not any(_job_finished(s.obj) and cond_true(s.obj, "Failed") for s in current):
            names = {s.obj["metadata"]["name"] for s in self.owned(js, JOB_RT)}
            global_replicas = sum(int(r.get("replicas", 1)) for r in rjobs)
            global_index = 0
            for rjob in rjobs:
                for index in range(int(rjob.get("replicas", 1))):
                    job_name = f"{name}-{rjob['name']}-{index}"
                    if job_name not in names:
                        self.create(JOB_RT, self._job(js, rt, rjob, index, global_index, global_replicas, restarts,
                                                      subdomain if dns else None), ns)
                    global_index += 1
            self._suspend(js, status, now)
        status["replicatedJobsStatus"] = [self._rjob_status(r["name"], [s.obj for s in current]) for r in rjobs]
        status.setdefault("restarts", restarts)
        self.save_status(rt, stored, status)

    def _job(self, js: JsonObject, rt: ResourceType, rjob: JsonObject, index: int, global_index: int,
             global_replicas: int, restarts: int, subdomain: str | None) -> JsonObject:
        name, ns = js["metadata"]["name"], js["metadata"].get("namespace", "default")
        job_name = f"{name}-{rjob['name']}-{index}"
        template = copy.deepcopy(rjob.get("template") or {})
        tmeta = template.get("metadata") or {}
        marks = {
            JS_NAME: name,
            JS_RJOB: rjob["name"],
            JS_RESTARTS: str(restarts),
            JS_RJOB_REPLICAS: str(int(rjob.get("replicas", 1))),
            JS_GLOBAL_REPLICAS: str(global_replicas),
            JS_JOB_INDEX: str(index),
            JS_JOB_KEY: sha1(f"{ns}/{job_name}"),
            JS_GLOBAL_INDEX: str(global_index),
        }
        extra = {}
        exclusive = annotations_of(js).get(JS_EXCLUSIVE) or (tmeta.get("annotations") or {}).get(JS_EXCLUSIVE)
        if exclusive:
            extra[JS_EXCLUSIVE] = exclusive
        job_spec = template.get("spec") or {}
        job_spec.setdefault("completionMode", "Indexed")  # the JobSet webhook's defaults
        pod_template = job_spec.setdefault("template", {})
        pod_meta = pod_template.setdefault("metadata", {})
        pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **marks}
        pod_meta["annotations"] = {**(pod_meta.get("annotations") or {}), **marks, **extra}
        pod_spec = pod_template.setdefault("spec", {})
        pod_spec.setdefault("restartPolicy", "OnFailure")
        if subdomain:
            pod_spec["subdomain"] = subdomain
        job_spec["suspend"] = bool((js.get("spec") or {}).get("suspend"))
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": job_name,
                "namespace": ns,
                "labels": {**(tmeta.get("labels") or {}), **marks},
                "annotations": {**(tmeta.get("annotations") or {}), **marks, **extra},
                "ownerReferences": [self.ref(js, rt)],
            },
            "spec": job_spec,
        }

    def _failure(self, js: JsonObject, status: JsonObject, jobs: list[Stored], now: str) -> bool:
        failed = sorted((s.obj for s in jobs if cond_true(s.obj, "Failed")), key=lambda j: j["metadata"]["name"])
        if not failed:
            return False
        job = failed[0]
        policy = (js.get("spec") or {}).get("failurePolicy")
        if policy is None:
            return self._fail(status, now, "FailedJobs", "jobset failed due to one or more job failures")
        reason = (condition(job, "Failed") or {}).get("reason")
        rjob = labels_of(job).get(JS_RJOB)
        action = "RestartJobSet"
        for rule in policy.get("rules") or []:
            reasons, targets = rule.get("onJobFailureReasons") or [], rule.get("targetReplicatedJobs") or []
            if (not reasons or reason in reasons) and (not targets or rjob in targets):
                action = rule.get("action", "RestartJobSet")
                break
        if action == "FailJobSet":
            return self._fail(status, now, "FailJobSetAction",
                              f"applying FailJobSet failure policy action to job {job['metadata']['name']}")
        counted = int(status.get("restartsCountTowardsMax", 0))
        if action == "RestartJobSet":
            if counted >= int(policy.get("maxRestarts", 0)):
                return self._fail(status, now, "ReachedMaxRestarts", "jobset failed due to reaching max number of restarts")
            status["restartsCountTowardsMax"] = counted + 1
        status["restarts"] = int(status.get("restarts", 0)) + 1
        return False

    @staticmethod
    def _fail(status: JsonObject, now: str, reason: str, message: str) -> bool:
        set_condition(status, now, "Failed", "True", reason, message, probe=False)
        status["terminalState"] = "Failed"
        return True

    @staticmethod
    def _success(js: JsonObject, status: JsonObject, jobs: list[Stored], rjobs: list[JsonObject], now: str) -> bool:
        policy = (js.get("spec") or {}).get("successPolicy") or {"operator": "All"}
        targets = set(policy.get("targetReplicatedJobs") or [r["name"] for r in rjobs])
        done = sum(1 for s in jobs if cond_true(s.obj, "Complete") and labels_of(s.obj).get(JS_RJOB) in targets)
        if policy.get("operator", "All") == "Any":
            needed = 1
        else:
            needed = sum(int(r.get("replicas", 1)) for r in rjobs if r["name"] in targets)
        if needed == 0 or done < needed:
            return False
        set_condition(status, now, "Completed", "True", "AllJobsCompleted", "jobset completed successfully", probe=False)
        status["terminalState"] = "Completed"
        return True

    def _suspend(self, js: JsonObject, status: JsonObject, now: str) -> None:
        suspend = bool((js.get("spec") or {}).get("suspend"))
        for s in self.owned(js, JOB_RT):
            if bool((s.obj.get("spec") or {}).get("suspend")) != suspend and not _job_finished(s.obj):
                new = s.copy()
                new["spec"]["suspend"] = suspend
                try:
                    self.store.update_stored(JOB_RT, new, s.obj["metadata"].get("namespace"))
                except ApiError:
                    pass
        if suspend:
            set_condition(status, now, "Suspended", "True", "SuspendedJobs", "jobset is suspended", probe=False)
        elif condition({"status": status}, "Suspended") is not None:
            set_condition(status, now, "Suspended", "False", "ResumeJobs", "jobset is resumed", probe=False)

    @staticmethod
    def _rjob_status(rjob: str, jobs: list[JsonObject]) -> JsonObject:
        mine = [j for j in jobs if labels_of(j).get(JS_RJOB) == rjob]
        out = {"name": rjob, "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
        for j in mine:
            spec, st = j.get("spec") or {}, j.get("status") or {}
            if cond_true(j, "Complete"):
                out["succeeded"] += 1
            elif cond_true(j, "Failed"):
                out["failed"] += 1
            else:
                parallelism = int(spec.get("parallelism", 1))
                expected = min(parallelism, int(spec["completions"])) if spec.get("completions") is not None else parallelism
                if int(st.get("ready", 0)) + int(st.get("succeeded", 0)) >= expected:
                    out["ready"] += 1
                if int(st.get("active", 0)) > 0:
                    out["active"] += 1
                if spec.get("suspend"):
                    out["suspended"] += 1
        return out


def _job_finished(job: JsonObject) -> bool:
    return cond_true(job, "Complete") or cond_true(job, "Failed")

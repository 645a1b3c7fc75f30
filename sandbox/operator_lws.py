"""The LeaderWorkerSet controller's stand-in.

**LeaderWorkerSet** (leaderworkerset.x-k8s.io/v1, LWS v0.5/v0.6): a headless Service ``<lws>``
and the leader StatefulSet ``<lws>`` (Parallel, ``replicas`` groups) owned by the LWS, template
labels ``leaderworkerset.sigs.k8s.io/name``, ``leaderworkerset.sigs.k8s.io/worker-index: "0"``,
``leaderworkerset.sigs.k8s.io/template-revision-hash``, annotation
``leaderworkerset.sigs.k8s.io/size``; leader pods ``<lws>-<groupIndex>``. The pod webhook adds
``leaderworkerset.sigs.k8s.io/group-index``, ``leaderworkerset.sigs.k8s.io/group-key`` (sha1 of
``<namespace>/<leader pod>``) to leaders, ``worker-index`` to workers, and the env
``LWS_LEADER_ADDRESS``, ``LWS_GROUP_SIZE``, ``LWS_WORKER_INDEX``. Per leader pod (at once, or
once it is Ready with ``startupPolicy: LeaderReady``) a worker StatefulSet named as the leader
pod, owned by the leader pod, ``replicas: size - 1``, ordinals from 1, labels name,
``group-index``, ``group-key``, revision; worker pods ``<lws>-<groupIndex>-<workerIndex>`` with
annotation ``leaderworkerset.sigs.k8s.io/leader-name``. Under ``RecreateGroupOnPodRestart`` (the
default) a pod of a group being deleted or a container restart deletes the leader pod, so the
whole group is created again. Status ``replicas``, ``readyReplicas``, ``updatedReplicas``,
``hpaPodSelector``, conditions Available/Progressing. ``leaderWorkerTemplate.volumeClaimTemplates``
(LWS v0.8) go to the leader and worker StatefulSets, so each pod gets claims of its own.

What the operators share, and what none models, is in :mod:`.operator_base` and :mod:`.operators`.
"""

from __future__ import annotations

import copy
from typing import Any

from .kinds import RESOURCE_TYPES, Resource, ResourceType
from .nodefit import condition, controller_ref, set_condition
from .parts import Host
from .operator_base import (
    add_env,
    annotations_of,
    CustomPart,
    deleting,
    headless_service,
    labels_of,
    live,
    restarted,
    sha1,
)
from .statefulset_controller import StatefulSetController
from .store import ApiError, Change, EventType, Stored
from .workloads import owner_reference, pod_ready, template_hash

JsonObject = dict[str, Any]

POD_RT = RESOURCE_TYPES[Resource.PODS]
SVC_RT = RESOURCE_TYPES[Resource.SERVICES]
STS_RT = RESOURCE_TYPES[Resource.STATEFULSETS]


# ====================================================================== LeaderWorkerSet

LWS = "leaderworkerset.sigs.k8s.io/"
LWS_NAME = LWS + "name"
LWS_GROUP_INDEX = LWS + "group-index"
LWS_WORKER_INDEX = LWS + "worker-index"
LWS_GROUP_KEY = LWS + "group-key"
LWS_REVISION = LWS + "template-revision-hash"
LWS_SIZE = LWS + "size"
LWS_REPLICAS = LWS + "replicas"
LWS_LEADER_NAME = LWS + "leader-name"
LWS_EXCLUSIVE = LWS + "exclusive-topology"


class LeaderWorkerSetController(CustomPart):
    key = "leaderworkersets.leaderworkerset.x-k8s.io"
    kind = "LeaderWorkerSet"

    def __init__(self, mgr: Host, statefulsets: StatefulSetController) -> None:
        super().__init__(mgr)
        statefulsets.mutators.append(self.admit_pod)
        self._recreate: set[tuple[str, str, str]] = set()
        """(namespace, leader pod, leader uid) of the groups to create again."""

    def on_change(self, change: Change) -> None:
        if change.rt.key == self.key:
            self._dirty = True
            return
        if change.rt.key not in (POD_RT.key, STS_RT.key) or LWS_NAME not in labels_of(change.new.obj):
            return
        self._dirty = True
        pod = change.new.obj
        if change.rt.key != POD_RT.key or change.type is EventType.DELETED:
            return
        if deleting(pod) or restarted(pod):
            leader = self._leader_of(pod)
            if leader is not None:
                self._recreate.add(leader)

    def _leader_of(self, pod: JsonObject) -> tuple[str, str, str] | None:
        ns = pod["metadata"].get("namespace", "default")
        if labels_of(pod).get(LWS_WORKER_INDEX) == "0":
            return ns, pod["metadata"]["name"], pod["metadata"]["uid"]
        ref = controller_ref(pod)
        if ref is None or ref.get("kind") != "StatefulSet":
            return None
        try:
            sts = self.store.get_stored(STS_RT, ref["name"], ns)
        except ApiError:
            return None
        leader = controller_ref(sts.obj)
        if sts.obj["metadata"]["uid"] != ref.get("uid") or leader is None or leader.get("kind") != "Pod":
            return None
        return ns, leader["name"], leader["uid"]

    # ---------------------------------------------------------------- the pod webhook

    def admit_pod(self, sts: JsonObject, pod: JsonObject) -> None:
        labels = pod["metadata"].setdefault("labels", {})
        if LWS_NAME not in labels:
            return
        annotations = pod["metadata"].get("annotations") or {}
        name, ns = pod["metadata"]["name"], pod["metadata"].get("namespace", "default")
        ordinal = name.rpartition("-")[2]
        if labels.get(LWS_WORKER_INDEX) == "0":
            labels.setdefault(LWS_GROUP_INDEX, ordinal)
            labels.setdefault(LWS_GROUP_KEY, sha1(f"{ns}/{name}"))
            leader = name
        else:
            labels[LWS_WORKER_INDEX] = ordinal
            leader = annotations.get(LWS_LEADER_NAME, name)
        subdomain = pod["spec"].get("subdomain") or labels[LWS_NAME]
        for group in ("initContainers", "containers"):
            for c in pod["spec"].get(group) or []:
                add_env(c, "LWS_LEADER_ADDRESS", f"{leader}.{subdomain}.{ns}")
                add_env(c, "LWS_GROUP_SIZE", annotations.get(LWS_SIZE, "1"))
                add_env(c, "LWS_WORKER_INDEX", field=f"metadata.labels['{LWS_WORKER_INDEX}']")

    # ---------------------------------------------------------------- the LWS and pod controllers

    def sync(self) -> None:
        super().sync()
        self._recreate = {k for k in self._recreate if self._pod_uid(k[0], k[1]) == k[2]}

    def _pod_uid(self, namespace: str, name: str) -> str | None:
        try:
            return self.store.get_stored(POD_RT, name, namespace).obj["metadata"]["uid"]
        except ApiError:
            return None

    def reconcile_one(self, rt: ResourceType, stored: Stored) -> None:
        lws = stored.obj
        spec = lws.get("spec") or {}
        name, ns = lws["metadata"]["name"], lws["metadata"].get("namespace", "default")
        lwt = spec.get("leaderWorkerTemplate") or {}
        size = int(lwt.get("size", 1))
        replicas = int(spec.get("replicas", 1))
        revision = template_hash(lwt)
        self.ensure(SVC_RT, lws, headless_service(name, ns, self.ref(lws, rt), {LWS_NAME: name},
                                                  labels={LWS_NAME: name}, publish_not_ready=True))
        leader_sts = next((s for s in self.owned(lws, STS_RT) if s.obj["metadata"]["name"] == name), None)
        if leader_sts is None:
            leader_sts = self.create(STS_RT, self._leader_sts(lws, rt, revision), ns)
            if leader_sts is None:
                return
        elif (leader_sts.obj.get("spec") or {}).get("replicas") != replicas:
            new = leader_sts.copy()
            new["spec"]["replicas"] = replicas
            new["metadata"].setdefault("annotations", {})[LWS_REPLICAS] = str(replicas)
            try:
                self.store.update_stored(STS_RT, new, ns)
            except ApiError:
                pass
        recreate = (lwt.get("restartPolicy") or "RecreateGroupOnPodRestart") in ("RecreateGroupOnPodRestart", "Default")
        groups = ready_groups = updated = 0
        for s in self.owned(leader_sts.obj):
            leader = s.obj
            if not live(leader):
                continue
            key = (ns, leader["metadata"]["name"], leader["metadata"]["uid"])
            if key in self._recreate:
                self._recreate.discard(key)
                if recreate:
                    self.delete(POD_RT, s)  # the group goes with its leader (the worker set is the leader's)
                    continue
            groups += 1
            if labels_of(leader).get(LWS_REVISION) == revision:
                updated += 1
            workers_ready = True
            if size > 1:
                workers = next((w for w in self.owned(leader, STS_RT) if w.obj["metadata"]["name"] == leader["metadata"]["name"]), None)
                if workers is None:
                    workers_ready = False
                    if spec.get("startupPolicy") != "LeaderReady" or pod_ready(leader):
                        self.create(STS_RT, self._worker_sts(lws, leader, size, revision), ns)
                else:
                    ready = [p for p in self.owned(workers.obj) if live(p.obj) and pod_ready(p.obj)]
                    workers_ready = len(ready) >= size - 1
            if workers_ready and pod_ready(leader):
                ready_groups += 1
        status = copy.deepcopy(lws.get("status") or {})
        now = self.store.now()
        status.update(observedGeneration=lws["metadata"].get("generation", 1), replicas=groups,
                      readyReplicas=ready_groups, updatedReplicas=updated,
                      hpaPodSelector=f"{LWS_NAME}={name},{LWS_WORKER_INDEX}=0")
        # Available and Progressing exclude each other: the one set True turns the other False
        on, off = ("Available", "Progressing") if ready_groups >= replicas else ("Progressing", "Available")
        reason, message = (("AllGroupsReady", "All replicas are ready") if on == "Available"
                           else ("GroupsProgressing", "Replicas are progressing"))
        set_condition(status, now, on, "True", reason, message, probe=False)
        other = condition({"status": status}, off)
        if other is not None:
            set_condition(status, now, off, "False", other.get("reason"), other.get("message"), probe=False)
        self.save_status(rt, stored, status)

    def _leader_sts(self, lws: JsonObject, rt: ResourceType, revision: str) -> JsonObject:
        spec = lws.get("spec") or {}
        name, ns = lws["metadata"]["name"], lws["metadata"].get("namespace", "default")
        lwt = spec.get("leaderWorkerTemplate") or {}
        template = copy.deepcopy(lwt.get("leaderTemplate") or lwt.get("workerTemplate") or {})
        meta = template.setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), LWS_NAME: name, LWS_WORKER_INDEX: "0", LWS_REVISION: revision}
        annotations = {**(meta.get("annotations") or {}), LWS_SIZE: str(int(lwt.get("size", 1)))}
        if annotations_of(lws).get(LWS_EXCLUSIVE):
            annotations[LWS_EXCLUSIVE] = annotations_of(lws)[LWS_EXCLUSIVE]
        meta["annotations"] = annotations
        replicas = int(spec.get("replicas", 1))
        return {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": ns, "labels": {LWS_NAME: name, LWS_REVISION: revision},
                         "annotations": {LWS_REPLICAS: str(replicas)}, "ownerReferences": [self.ref(lws, rt)]},
            "spec": {
                "replicas": replicas,
                "podManagementPolicy": "Parallel",
                "serviceName": name,
                "selector": {"matchLabels": {LWS_NAME: name, LWS_WORKER_INDEX: "0"}},
                "template": template,
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0, "maxUnavailable": 1}},
                **({"volumeClaimTemplates": copy.deepcopy(lwt["volumeClaimTemplates"])} if lwt.get("volumeClaimTemplates") else {}),
            },
        }

    def _worker_sts(self, lws: JsonObject, leader: JsonObject, size: int, revision: str) -> JsonObject:
        name, ns = lws["metadata"]["name"], lws["metadata"].get("namespace", "default")
        lwt = (lws.get("spec") or {}).get("leaderWorkerTemplate") or {}
        leader_labels = labels_of(leader)
        selector = {LWS_GROUP_INDEX: leader_labels.get(LWS_GROUP_INDEX, ""), LWS_NAME: name,
                    LWS_GROUP_KEY: leader_labels.get(LWS_GROUP_KEY, "")}
        labels = {**selector, LWS_REVISION: leader_labels.get(LWS_REVISION, revision)}
        template = copy.deepcopy(lwt.get("workerTemplate") or {})
        meta = template.setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), **labels}
        annotations = {**(meta.get("annotations") or {}), LWS_SIZE: str(size), LWS_LEADER_NAME: leader["metadata"]["name"]}
        if annotations_of(lws).get(LWS_EXCLUSIVE):
            annotations[LWS_EXCLUSIVE] = annotations_of(lws)[LWS_EXCLUSIVE]
        meta["annotations"] = annotations
        return {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": leader["metadata"]["name"], "namespace": ns, "labels": labels,
                         "ownerReferences": [owner_reference(leader, POD_RT)]},
            "spec": {
                "replicas": size - 1,
                "ordinals": {"start": 1},
                "podManagementPolicy": "Parallel",
                "serviceName": name,
                "selector": {"matchLabels": selector},
                "template": template,
                **({"volumeClaimTemplates": copy.deepcopy(lwt["volumeClaimTemplates"])} if lwt.get("volumeClaimTemplates") else {}),
            },
        }

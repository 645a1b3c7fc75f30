"""The binder's device step: a gang's ResourceClaims allocated and reserved, all of them, before any pod binds.

Called from the binder's PreBind once the whole gang is placed, after its volumes. ``dra.plan``
says what to write on each claim; this module writes it (a merge patch of the claim's
``status``, made against the resourceVersion it was planned from, so a claim changed meanwhile
is refused rather than overwritten). A claim it allocates first gets the
``resource.kubernetes.io/delete-protection`` finalizer, as kube-scheduler gives it: deleted
while allocated, the claim stays (terminating) until the resourceclaim controller deallocates
it, so its devices are never counted free while a pod may use them. On a refusal (a conflict,
a webhook, a fault), every claim already written for the gang is undone (its pod taken out of ``reservedFor``, and the allocation
cleared when no pod is left in it) and the gang goes back to its queue with the reason naming
the claim. When binds fail after the claims were written, the binder undoes the claims of the
pods that did not bind (``release``).

A replica that stops leading mid-way writes nothing more: the new leader (``take_over``) finds
claims reserved for usher's pods that are not bound (no pod binds without its claims, and a
bound pod's claims are its own), and undoes them; the gang is placed again as a whole.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .client import KubeClient, PatchType
from .dra import API_VERSION, DraIndex, DraKind
from .dra.plan import NO_CLAIMS, ClaimPlan, ClaimWrite, Placed, plan, undo_patch, write_patch

log = logging.getLogger("usher.controller")


#: the finalizer a scheduler puts on a claim before it allocates it, so that the claim is not
#: gone (and its devices free for others) while a pod may still use them; the resourceclaim
#: controller removes it when it deallocates the claim
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"


def claim_path(claim: str) -> str:
    namespace, name = claim.split("/", 1)
    return f"/apis/{API_VERSION}/namespaces/{namespace}/resourceclaims/{name}"


def status_path(claim: str) -> str:
    return f"{claim_path(claim)}/status"


def _finalizers(claim: object) -> list[str]:
    meta = claim.get("metadata") if isinstance(claim, dict) else None
    return [f for f in (meta or {}).get("finalizers") or [] if isinstance(f, str)]


@dataclass(slots=True)
class ClaimBinder:
    """Allocates and reserves a gang's claims; the controller gives it its client and caches."""

    client: KubeClient
    index: DraIndex
    may_write: Callable[[], bool]

    def reserve(self, pods: Sequence[Placed]) -> ClaimPlan | str:
        """Reserve: the writes for the gang's pods as placed, or why they cannot have their devices."""
        if not any(p.key in self.index.pods for p in pods):
            return NO_CLAIMS
        return plan(self.index, pods)

    async def prebind(self, the_plan: ClaimPlan) -> str | None:
        """Write every claim of the plan: None when the pods may bind, else why not (and what was
        written is undone)."""
        written: list[str] = []
        for write in the_plan.writes:
            if not self.may_write():
                await self.undo(written, {p.uid for w in the_plan.writes for p in w.pods})
                return "this replica stopped leading while the gang's claims were being allocated"
            try:
                if write.allocation is not None:
                    write = await self._protect(write)
                done = await self.client.patch(status_path(write.claim), write_patch(write), patch_type=PatchType.MERGE,
                                               may_send=self.may_write)
                self._seen(write.claim, done)
            except Exception as exc:  # noqa: BLE001 - any refusal fails the step, whole
                # (the claim refused too: it may have been protected before its write was refused)
                await self.undo([*written, write.claim], {p.uid for w in the_plan.writes for p in w.pods})
                what = "allocated" if write.allocation is not None else "reserved"
                return f"claim {write.claim} could not be {what} for pod {write.pod.key}: {exc}"
            written.append(write.claim)
        return None

    async def _protect(self, write: ClaimWrite) -> ClaimWrite:
        """Put ``DELETE_PROTECTION`` on a claim about to be allocated (as kube-scheduler's
        DynamicResources does before it writes the allocation), against the version the plan
        read; the write then goes against the version that answer carries."""
        finalizers = _finalizers(self.index.claims.get(write.claim))
        if DELETE_PROTECTION in finalizers:
            return write
        patch = {"metadata": {"resourceVersion": write.version, "finalizers": [*finalizers, DELETE_PROTECTION]}}
        done = await self.client.patch(claim_path(write.claim), patch, patch_type=PatchType.MERGE, may_send=self.may_write)
        self._seen(write.claim, done)
        version = (done.get("metadata") or {}).get("resourceVersion") if isinstance(done, dict) else None
        return replace(write, version=str(version)) if version else write

    async def _unprotect(self, key: str, claim: dict[str, Any]) -> None:
        """Take ``DELETE_PROTECTION`` off a claim no pod is to use (as the resourceclaim
        controller does once it deallocates one)."""
        left = [f for f in _finalizers(claim) if f != DELETE_PROTECTION]
        version = str((claim.get("metadata") or {}).get("resourceVersion", ""))
        self._seen(key, await self.client.patch(
            claim_path(key), {"metadata": {"resourceVersion": version, "finalizers": left or None}},
            patch_type=PatchType.MERGE, may_send=self.may_write))

    def _seen(self, key: str, claim: object) -> None:
        """The claim as the API server answered a write of ours: later plans (another gang's, the
        same tick) see it before the informer brings it."""
        if isinstance(claim, dict) and claim.get("metadata"):
            self.index.object_changed(DraKind.CLAIM, key, claim)

    async def release(self, the_plan: ClaimPlan, pods: Iterable[str]) -> None:
        """Undo the claims the plan gave the pods ``pods`` (keys): they did not bind."""
        keys = set(pods)
        claims = [w.claim for w in the_plan.writes if any(p.key in keys for p in w.pods)]
        await self.undo(claims, {p.uid for w in the_plan.writes for p in w.pods if p.key in keys})

    async def undo(self, claims: Sequence[str], uids: set[str]) -> list[str]:
        """Take ``uids`` out of each claim's reservation (and free a claim none is left in), read
        afresh so a concurrent change is not overwritten; the claims undone."""
        done = []
        for key in dict.fromkeys(claims):
            if not self.may_write():
                break
            try:
                current = await self.client.get(claim_path(key))
                patch = undo_patch(current, uids)
                if patch is None:
                    if DELETE_PROTECTION in _finalizers(current) and not (current.get("status") or {}).get("allocation"):
                        # protected by a try whose allocation was refused: nobody is to use it
                        await self._unprotect(key, current)
                        done.append(key)
                    continue
                after = await self.client.patch(status_path(key), patch, patch_type=PatchType.MERGE, may_send=self.may_write)
                self._seen(key, after)
                if patch["status"].get("allocation", True) is None and DELETE_PROTECTION in _finalizers(after):
                    await self._unprotect(key, after)  # deallocated by us: the protection goes with it
                done.append(key)
            except Exception as exc:  # noqa: BLE001 - gone meanwhile, or refused: the next leader looks again
                log.warning("could not undo the allocation of claim %s: %s", key, exc)
        return done

    async def take_over(self, unbound: dict[str, str]) -> list[str]:
        """A new leader's undo: the claims reserved for usher's pods not bound (``uid -> key``)."""
        found = []
        for key, claim in sorted(self.index.claims.items()):
            reserved = {r.get("uid") for r in (claim.get("status") or {}).get("reservedFor") or [] if isinstance(r, dict)}
            if reserved & set(unbound):
                found.append(key)
        if not found:
            return []
        return await self.undo(found, set(unbound))

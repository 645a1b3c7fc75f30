"""The binder's volume step: a gang's claims bound, all of them, before any of its pods.

Called from the binder's PreBind once the whole gang is placed. ``volumes.plan`` says what to
write; this module writes it, as kube-scheduler's volume binder does (a ``claimRef`` on each
static volume chosen for a delayed claim; ``volume.kubernetes.io/selected-node`` on each claim to
provision), then waits for the PV controller and the provisioner: it looks again whenever a
storage object changes (``storage_changed``) and at least every ``POLL`` seconds, until
``volumes.progress`` says every claim is bound (the pods may bind), or that one failed (the
provisioner withdrew the selected node, the claim went, it was bound where its pod cannot use
it) or that the wait ran past ``BIND_TIMEOUT``. While it waits, the pods' PodScheduled condition
says which claim it waits for. On a failure no pod is bound; the selected nodes not yet acted on
are withdrawn (Unreserve), and the gang goes back to its queue with the reason naming the claim.
The provisioner's own words come from its ``ProvisioningFailed`` Event on the claim.

A replica that stops leading mid-wait writes nothing more: the new leader finds the selected
nodes left on claims of pods it has not bound, withdraws those not yet acted on
(``leftovers``), and places the gang again; claims already bound pin that placement.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .client import KubeClient, PatchType
from .volumes import (NOTHING, Blocker, Known, Placed, Plan, Progress, Step, VolumeIndex, VolumeReason, leftovers, plan,
                      progress, undo)
from .volumes.model import resource_version

log = logging.getLogger("usher.controller")

#: how long a gang waits for its claims to be bound (kube-scheduler's default bind timeout)
BIND_TIMEOUT = 600.0
#: how often the wait looks again when no storage object changes
POLL = 1.0
#: the reason the provisioner gives to a failure (external-provisioner's Event)
PROVISIONING_FAILED = "ProvisioningFailed"

Show = Callable[[Blocker], Awaitable[None]]


@dataclass(slots=True)
class VolumeBinder:
    """Binds a gang's volumes; the controller gives it its client, its caches and its clock."""

    client: KubeClient
    index: VolumeIndex
    node_labels: Callable[[str], Mapping[str, str]]
    may_write: Callable[[], bool]
    monotonic: Callable[[], float]
    timeout: float = BIND_TIMEOUT
    poll: float = POLL
    #: set by the controller on every storage informer event
    storage_changed: asyncio.Event = field(default_factory=asyncio.Event)

    def reserve(self, pods: Sequence[tuple[str, str]]) -> Plan | Blocker:
        """Reserve: the plan for the gang's pods (``(pod key, node)``), or why they cannot bind there."""
        if not any(key in self.index.pods for key, _ in pods):
            return NOTHING  # no pod of the gang uses a claim (the index keeps only those that do)
        placed = [Placed(key, self.index.claims_of(key), node, self.node_labels(node)) for key, node in pods]
        return plan(placed, self.index.storage)

    async def prebind(self, the_plan: Plan, show: Show, call_off: asyncio.Event | None = None) -> Blocker | None:
        """Write the plan and wait until every claim is bound: None when the pods may bind, else
        why not (and what was not acted on is withdrawn)."""
        if the_plan.empty:
            return None
        seen: dict[str, int] = {}
        written = await self._write(the_plan, seen)
        if written is not None:
            await self.unreserve(the_plan)
            return written
        start = self.monotonic()
        shown: str | None = None
        while True:
            if not self.may_write():
                return Blocker(VolumeReason.BINDING_TIMED_OUT,
                               "this replica stopped leading while the gang's claims were being bound; the new leader "
                               "takes it over")
            if call_off is not None and call_off.is_set():
                await self.unreserve(the_plan)
                return Blocker(VolumeReason.BINDING_TIMED_OUT, "called off while its claims were being bound")
            labels = {node: self.node_labels(node) for _, node in the_plan.waits}
            waited = self.monotonic() - start
            if self._behind(seen) and waited < self.timeout:
                now = Progress(Step.WAIT)  # the cache has not seen our writes yet
            else:
                now = progress(the_plan, self.index.storage, labels, waited, self.timeout)
            if now.step == Step.DONE:
                return None
            if now.step == Step.FAIL:
                blocker = now.blocker
                assert blocker is not None
                if blocker.reason == VolumeReason.PROVISIONING_FAILED:
                    said = await self.provisioner_said(blocker.claim)
                    if said:
                        node = dict(the_plan.provisions).get(blocker.claim, "")
                        blocker = progress(the_plan, self.index.storage, labels, 0, self.timeout,
                                           {blocker.claim: said}).blocker or blocker
                        log.info("provisioning of %s on %s failed: %s", blocker.claim, node, said)
                await self.unreserve(the_plan)
                return blocker
            if now.blocker is not None and now.blocker.message != shown:
                shown = now.blocker.message
                await show(now.blocker)
            self.storage_changed.clear()
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
                # races the event, and a controller told to stop would wait out BIND_TIMEOUT here
                async with asyncio.timeout(self.poll):
                    await self.storage_changed.wait()
            except TimeoutError:
                pass

    async def _write(self, the_plan: Plan, seen: dict[str, int]) -> Blocker | None:
        storage = self.index.storage
        for key, volume in the_plan.bindings:
            if not self.may_write():
                return Blocker(VolumeReason.BINDING_TIMED_OUT, "this replica stopped leading")
            claim = storage.claims.get(key)
            if claim is None:
                return Blocker(VolumeReason.CLAIM_NOT_FOUND, f"claim {key} went before its volume was bound", key)
            ref = {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": claim.namespace,
                   "name": claim.name, "uid": claim.uid}
            try:
                await self.client.patch(f"/api/v1/persistentvolumes/{volume}", {"spec": {"claimRef": ref}},
                                        may_send=self.may_write)
            except Exception as exc:  # noqa: BLE001 - any refusal fails the step
                return Blocker(VolumeReason.NO_VOLUME, f"volume {volume} could not be bound to claim {key}: {exc}", key)
        for key, node in the_plan.provisions:
            if not self.may_write():
                return Blocker(VolumeReason.BINDING_TIMED_OUT, "this replica stopped leading")
            try:
                await self._annotate(key, node, seen)
            except Exception as exc:  # noqa: BLE001
                return Blocker(VolumeReason.PROVISIONING_FAILED,
                               f"claim {key} could not be given node {node} to provision on: {exc}", key)
        return None

    async def _annotate(self, key: str, node: str | None, seen: dict[str, int] | None = None) -> None:
        namespace, name = key.split("/", 1)
        done = await self.client.patch(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}",
                                       {"metadata": {"annotations": {Known.SELECTED_NODE: node}}},
                                       patch_type=PatchType.MERGE, may_send=self.may_write)
        if seen is not None:
            seen[key] = resource_version((done.get("metadata") or {}).get("resourceVersion"))

    def _behind(self, seen: dict[str, int]) -> bool:
        """Whether the claims cache has not yet seen every write of ours (as kube-scheduler
        compares resource versions): judging it now would take our own write for undone."""
        claims = self.index.storage.claims
        return any(key in claims and claims[key].version < at for key, at in seen.items())

    async def unreserve(self, the_plan: Plan) -> None:
        """Withdraw the selected nodes not yet acted on (claims already bound stay so)."""
        await self.withdraw(undo(the_plan, self.index.storage))

    async def withdraw(self, claims: Sequence[str]) -> None:
        for key in claims:
            if not self.may_write():
                return
            try:
                await self._annotate(key, None)
            except Exception as exc:  # noqa: BLE001 - gone meanwhile, or refused: the next leader looks again
                log.warning("could not withdraw the selected node of claim %s: %s", key, exc)

    async def take_over(self, pods: Sequence[str]) -> tuple[str, ...]:
        """A new leader's undo for waiting pods: the selected nodes a PreBind left on their claims
        and nobody acted on yet are withdrawn (those bound pin the next placement)."""
        claims = [c for p in pods for c in self.index.claim_keys(p)]
        found = leftovers(list(dict.fromkeys(claims)), self.index.storage)
        await self.withdraw(found)
        return found

    async def provisioner_said(self, claim: str) -> str | None:
        """The message of the newest ProvisioningFailed Event on ``claim`` (None: none found)."""
        namespace, name = claim.split("/", 1)
        try:
            events = await self.client.list(
                f"/api/v1/namespaces/{namespace}/events",
                field_selector=f"involvedObject.kind=PersistentVolumeClaim,involvedObject.name={name},reason={PROVISIONING_FAILED}")
        except Exception as exc:  # noqa: BLE001 - the reason still names the claim
            log.info("could not read the events of claim %s: %s", claim, exc)
            return None
        items = [e for e in events.items if e.get("reason") == PROVISIONING_FAILED]
        if not items:
            return None
        newest = max(items, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
        return str(newest.get("message") or "") or None

"""Publishing what the agent found to its Node: ``usher/nvlink``, ``usher/gpu-health`` and
``usher/gpu-xids``.

The agent patches its own Node's annotations (a JSON merge patch; see ``AGENT_PERMISSIONS`` in
the kube backend's ``rbac.py``), and only when a value changed since its last successful patch,
so a healthy node costs the API server one write when the agent starts. ``usher/nvlink`` is
written only when the layout is known. A refused patch (the Node is gone, RBAC forbids it, the
API server is away) is logged once per distinct error and tried again on the next reading.

NVML forgets XIDs, so a GPU that took a critical one (fallen off the bus, an NVLink error, a GSP
error) would come back into service when the agent restarts (a DaemonSet rollout, an eviction),
though nothing was repaired. ``usher/gpu-xids`` keeps them: the node's boot id and the critical
XIDs seen per GPU UUID. A restarted agent reads its Node first (``NodePublisher.restore``) and,
when the node has not rebooted since, keeps those GPUs out; a reboot clears them. Until that read
succeeds, the record is left as it is (never written over with what this agent has seen alone),
and the read is tried again at every reading. After a GPU reset without a reboot, the operator
removes the annotation and restarts the agent's pod.
"""

from __future__ import annotations

import logging

from pathlib import Path

from usher.engine.backends.kube.client import KubeClient, KubeError
from usher.engine.backends.kube.objects import Annotation, format_gpu_health, format_gpu_xids, format_nvlink, parse_gpu_xids
from usher.engine.backends.nvml.health import describe_xid
from usher.engine.backends.nvml.reader import NodeReading, NvmlReader

log = logging.getLogger("usher.agent")

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
"""The kernel's id of this boot (the kubelet reports the same as the Node's ``bootID``); not
namespaced, so a container reads the host's."""


def boot_id(path: Path | None = None) -> str | None:
    """This boot's id (``BOOT_ID`` unless given), or None where it cannot be read (no XIDs are
    then kept over a restart)."""
    try:
        return (path or BOOT_ID).read_text().strip() or None
    except OSError as exc:
        log.warning("cannot read the boot id (%s): critical XIDs will not be kept over an agent restart", exc)
        return None


def node_annotations(reading: NodeReading, boot: str | None = None) -> dict[str, str]:
    """The annotations a reading asks for on its Node (``usher/gpu-xids`` only with a boot id)."""
    out = {str(Annotation.GPU_HEALTH): format_gpu_health(reading.unhealthy)}
    if reading.islands is not None:
        out[str(Annotation.NVLINK)] = format_nvlink(reading.islands)
    if boot is not None:
        out[str(Annotation.GPU_XIDS)] = format_gpu_xids(boot, reading.xids_by_uuid)
    return out


async def restore_xids(client: KubeClient, node: str, boot: str, reader: NvmlReader) -> dict[int, list[int]]:
    """Take back the critical XIDs the Node's ``usher/gpu-xids`` kept from before this agent
    started, unless the node rebooted since; returns them by GPU index. A value that cannot be
    parsed is logged, and nothing is taken back; a Node that cannot be read raises ``KubeError``."""
    obj = await client.get(f"/api/v1/nodes/{node}")
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get(str(Annotation.GPU_XIDS))
    if not text:
        return {}
    try:
        kept_boot, by_uuid = parse_gpu_xids(text)
    except ValueError as exc:
        log.error("node %s: annotation %s is not usable (%s); no XID seen before this agent started is kept",
                  node, Annotation.GPU_XIDS, exc)
        return {}
    if kept_boot != boot:
        if by_uuid:
            log.info("node %s rebooted since its GPUs' XIDs were recorded: they are forgotten", node)
        return {}
    restored = reader.restore_xids(by_uuid)
    for index, xids in sorted(restored.items()):
        log.warning("GPU %d: %s, seen before this agent started (node not rebooted since): out of service", index,
                    "; ".join(describe_xid(x) for x in xids))
    return restored


class NodePublisher:
    """Keeps one Node's agent annotations equal to the latest reading."""

    def __init__(self, client: KubeClient, node: str, boot: str | None = None) -> None:
        self.client = client
        self.node = node
        self.boot = boot
        #: the XIDs kept on the Node were read (or, without a boot id, none are kept): until then
        #: ``usher/gpu-xids`` is left out of every patch, so the record stays as it was
        self.restored = boot is None
        self._restore_error: str | None = None
        self.written: dict[str, str] | None = None
        self._last_error: str | None = None

    async def restore(self, reader: NvmlReader) -> dict[int, list[int]]:
        """Take back the XIDs kept on the Node (``restore_xids``) once; a failed read is logged
        once per distinct error and tried again at the next call."""
        if self.restored or self.boot is None:
            return {}
        try:
            found = await restore_xids(self.client, self.node, self.boot, reader)
        except KubeError as exc:
            message = str(exc)
            if message != self._restore_error:
                self._restore_error = message
                log.error("cannot read node %s for the XIDs seen before this agent started (usher/gpu-xids is left as it is "
                          "and read again at the next reading): %s", self.node, message)
            return {}
        self.restored, self._restore_error = True, None
        return found

    async def publish(self, reading: NodeReading) -> bool:
        """Patch the Node if its annotations should change; True if a patch was accepted."""
        wanted = node_annotations(reading, self.boot if self.restored else None)
        if wanted == self.written:
            return False
        try:
            await self.client.patch(f"/api/v1/nodes/{self.node}", {"metadata": {"annotations": wanted}})
        except KubeError as exc:
            message = str(exc)
            if message != self._last_error:
                self._last_error = message
                log.error("cannot annotate node %s (retrying on every reading): %s", self.node, message)
            return False
        if self._last_error is not None:
            log.info("node %s annotated again", self.node)
            self._last_error = None
        changed = {k: v for k, v in wanted.items() if (self.written or {}).get(k) != v}
        log.info("node %s: %s", self.node, ", ".join(f"{k}={v}" for k, v in changed.items()))
        self.written = wanted
        return True

"""Publishing what the agent found to its Node: ``usher/nvlink`` and ``usher/gpu-health``.

The agent patches its own Node's annotations (a JSON merge patch; the only permission it needs is
``patch`` on nodes, see ``AGENT_PERMISSIONS`` in the kube backend's ``rbac.py``), and only when a
value changed since its last successful patch, so a healthy node costs the API server one write
when the agent starts. ``usher/nvlink`` is written only when the layout is known. A refused patch
(the Node is gone, RBAC forbids it, the API server is away) is logged once per distinct error and
tried again on the next reading.
"""

from __future__ import annotations

import logging

from usher.engine.backends.kube.client import KubeClient, KubeError
from usher.engine.backends.kube.objects import Annotation, format_gpu_health, format_nvlink
from usher.engine.backends.nvml.reader import NodeReading

log = logging.getLogger("usher.agent")


def node_annotations(reading: NodeReading) -> dict[str, str]:
    """The annotations a reading asks for on its Node."""
    out = {str(Annotation.GPU_HEALTH): format_gpu_health(reading.unhealthy)}
    if reading.islands is not None:
        out[str(Annotation.NVLINK)] = format_nvlink(reading.islands)
    return out


class NodePublisher:
    """Keeps one Node's agent annotations equal to the latest reading."""

    def __init__(self, client: KubeClient, node: str) -> None:
        self.client = client
        self.node = node
        self.written: dict[str, str] | None = None
        self._last_error: str | None = None

    async def publish(self, reading: NodeReading) -> bool:
        """Patch the Node if its annotations should change; True if a patch was accepted."""
        wanted = node_annotations(reading)
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

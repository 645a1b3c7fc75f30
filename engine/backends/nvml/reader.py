"""Reads a node's GPUs through NVML (nvidia-ml-py): what ``usher agent`` prints, serves and publishes.

``NvmlReader.open()`` starts NVML, finds the GPUs and derives the NVLink layout once (it does not
change while the node runs); ``read()`` takes one reading of every GPU; ``close()`` shuts NVML
down. Without a usable driver, or with no GPU, ``open()`` raises ``NoGpuError`` with one line
saying which (``usher agent`` exits 3 with it).

Every NVML call goes through one guard: a function the installed driver or nvidia-ml-py lacks, or
one a GPU does not support (no ECC on a consumer board, no power reading in some VMs), gives
``None``, shown as N/A. A GPU that NVML reports lost, or needing a reset, is read as unhealthy
with that reason instead of failing the whole reading.

The NVLink layout comes from the links themselves where NVML describes them (each active link's
remote end: another GPU, found by its PCI bus id, or an NVSwitch), else from NVML's peer-to-peer
status over NVLink for every pair of GPUs; when neither is available the layout is unknown
(``islands`` is None) and nothing is claimed about it. A single GPU is its own island without
asking (a VM with one GPU passed through answers no NVLink query).

XIDs arrive as NVML events. The reader registers for critical XID events when it opens (where
the GPU supports it) and drains them on every ``read``: an XID is seen only while the agent runs
(``--once`` shows ``xids`` as N/A), and a critical one keeps its GPU unhealthy for as long as the
reader is open. NVML keeps no record of past XIDs, so the running agent carries them over a
restart itself: ``NodeReading.xids_by_uuid`` gives what to keep, ``restore_xids`` takes it back
(``usher.agent.publish`` keeps it on the Node until the node reboots).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import ModuleType
from typing import Any

import pynvml

from .health import APPLICATION_XIDS, critical_xids, describe_xid, problems, throttle_reasons
from .layout import islands_of

log = logging.getLogger("usher.agent")

MIB = 2**20


class NoGpuReason(StrEnum):
    NO_DRIVER = "no-driver"
    NO_GPU = "no-gpu"


class NoGpuError(Exception):
    """NVML cannot be used here, or sees no GPU; ``str()`` is one line for the operator."""

    def __init__(self, reason: NoGpuReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class LayoutSource(StrEnum):
    """How the NVLink layout was found."""

    SINGLE_GPU = "single-gpu"
    """One GPU: its own island, whatever NVML says of links (a VM often hides them)."""
    NVLINK_LINKS = "nvlink-links"
    P2P_STATUS = "p2p-status"
    UNKNOWN = "unknown"


@dataclass(slots=True)
class GpuReading:
    """One GPU at one moment; ``None`` is N/A (the driver or the GPU cannot say)."""

    index: int
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    memory_total: int | None = None
    memory_used: int | None = None
    utilization: float | None = None
    temperature: float | None = None
    power: float | None = None
    power_limit: float | None = None
    uncorrected_ecc: int | None = None
    throttle: list[str] | None = None
    xids: list[int] | None = None
    """Critical and application XIDs seen since the agent started; None when not watched."""
    problems: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.problems

    def as_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "name": self.name,
            "pciBusId": self.pci_bus_id,
            "memory": {"total": self.memory_total, "used": self.memory_used},
            "utilization": self.utilization,
            "temperature": self.temperature,
            "power": self.power,
            "powerLimit": self.power_limit,
            "eccUncorrectedVolatile": self.uncorrected_ecc,
            "throttle": self.throttle,
            "xids": self.xids,
            "healthy": self.healthy,
            "problems": self.problems,
        }


@dataclass(slots=True)
class NodeReading:
    """Every GPU of the node, the driver version and the NVLink layout."""

    driver: str | None
    gpus: list[GpuReading]
    islands: list[list[int]] | None
    layout_source: LayoutSource

    @property
    def xids_by_uuid(self) -> dict[str, list[int]]:
        """GPU UUID -> the critical XIDs seen on it, for GPUs that had one (by UUID, which a
        reboot does not change, unlike the index)."""
        out: dict[str, list[int]] = {}
        for g in self.gpus:
            critical = critical_xids(g.xids or ())
            if critical and g.uuid is not None:
                out[g.uuid] = critical
        return out

    @property
    def unhealthy(self) -> dict[int, str]:
        """GPU index -> why it is unfit for work (what ``usher/gpu-health`` carries)."""
        return {g.index: "; ".join(g.problems) for g in self.gpus if g.problems}

    def as_json(self) -> dict[str, Any]:
        return {
            "driver": self.driver,
            "gpuCount": len(self.gpus),
            "nvlink": {"islands": self.islands, "from": str(self.layout_source)},
            "gpus": [g.as_json() for g in self.gpus],
        }


class _GpuFault(Exception):
    """NVML says the GPU itself is gone or broken (lost, needs a reset)."""


_FAULTS = {
    pynvml.NVML_ERROR_GPU_IS_LOST: "GPU is lost (fallen off the bus)",
    pynvml.NVML_ERROR_RESET_REQUIRED: "GPU requires a reset",
}


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def bus_key(bus_id: Any) -> tuple[int, int, int, int] | None:
    """A PCI bus id (``00000000:18:00.0`` or ``0000:18:00.0``) as numbers, so both spellings match."""
    try:
        domain, bus, rest = _text(bus_id).strip().split(":")
        device, function = rest.split(".")
        return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)
    except ValueError:
        return None


class NvmlReader:
    """See the module docstring. ``nvml`` is the pynvml module (tests pass a patched one)."""

    def __init__(self, nvml: ModuleType = pynvml, watch_xids: bool = True) -> None:
        self._nvml = nvml
        self._watch_xids = watch_xids
        self._handles: list[Any] = []
        self._events: Any = None
        self._xids: dict[int, list[int]] = {}
        self._islands: list[list[int]] | None = None
        self._layout_source = LayoutSource.UNKNOWN
        self._driver: str | None = None
        self._open = False

    # -- opening and closing --------------------------------------------------------------

    def open(self) -> None:
        """Start NVML and find the GPUs; raises ``NoGpuError``."""
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise NoGpuError(NoGpuReason.NO_DRIVER, _init_failure(nvml, exc)) from None
        self._open = True
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            self.close()
            raise NoGpuError(NoGpuReason.NO_GPU, f"the NVIDIA driver cannot count its GPUs: {exc}") from None
        if count == 0:
            self.close()
            raise NoGpuError(NoGpuReason.NO_GPU, "no NVIDIA GPU: the driver is loaded but sees no GPU")
        handles = []
        for i in range(count):
            try:
                handles.append(nvml.nvmlDeviceGetHandleByIndex(i))
            except nvml.NVMLError as exc:
                self.close()
                raise NoGpuError(NoGpuReason.NO_GPU, f"GPU {i} cannot be opened: {exc}") from None
        self._handles = handles
        driver = self._call(None, "nvmlSystemGetDriverVersion")
        self._driver = None if driver is None else _text(driver)
        self._islands, self._layout_source = self._layout()
        if self._watch_xids:
            self._register_xid_events()

    def close(self) -> None:
        if not self._open:
            return
        if self._events is not None:
            self._call(None, "nvmlEventSetFree", self._events)
            self._events = None
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:
            log.debug("nvmlShutdown: %s", exc)
        self._open = False

    def __enter__(self) -> NvmlReader:
        self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- reading --------------------------------------------------------------------------

    def read(self) -> NodeReading:
        """One reading of every GPU (XIDs seen since the last one are taken in)."""
        if self._events is not None:
            self._drain_xid_events()
        gpus = [self._read_gpu(i, h) for i, h in enumerate(self._handles)]
        return NodeReading(self._driver, gpus, self._islands, self._layout_source)

    def _read_gpu(self, index: int, handle: Any) -> GpuReading:
        nvml = self._nvml
        gpu = GpuReading(index)
        watched = self._events is not None or index in self._xids
        gpu.xids = list(self._xids.get(index, [])) if watched else None
        try:
            uuid = self._call(handle, "nvmlDeviceGetUUID", handle)
            gpu.uuid = None if uuid is None else _text(uuid)
            name = self._call(handle, "nvmlDeviceGetName", handle)
            gpu.name = None if name is None else _text(name)
            pci = self._call(handle, "nvmlDeviceGetPciInfo", handle)
            gpu.pci_bus_id = None if pci is None else _text(pci.busId)
            memory = self._memory(handle)
            if memory is not None:
                gpu.memory_total, gpu.memory_used = int(memory.total), int(memory.used)
            rates = self._call(handle, "nvmlDeviceGetUtilizationRates", handle)
            gpu.utilization = None if rates is None else float(rates.gpu)
            temperature = self._call(handle, "nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU)
            gpu.temperature = None if temperature is None else float(temperature)
            milliwatts = self._call(handle, "nvmlDeviceGetPowerUsage", handle)
            gpu.power = None if milliwatts is None else milliwatts / 1000.0
            limit = self._call(handle, "nvmlDeviceGetEnforcedPowerLimit", handle)
            gpu.power_limit = None if limit is None else limit / 1000.0
            ecc = self._call(handle, "nvmlDeviceGetTotalEccErrors", handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC)
            gpu.uncorrected_ecc = None if ecc is None else int(ecc)
            mask = self._call(handle, "nvmlDeviceGetCurrentClocksEventReasons", handle)
            if mask is None:
                mask = self._call(handle, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
            gpu.throttle = None if mask is None else [str(r) for r in throttle_reasons(int(mask))]
            pending = self._call(handle, "nvmlDeviceGetRetiredPagesPendingStatus", handle)
            remap = self._call(handle, "nvmlDeviceGetRemappedRows", handle)
        except _GpuFault as fault:
            gpu.problems = [str(fault), *problems(xids=gpu.xids or ())]
            return gpu
        gpu.problems = problems(
            xids=gpu.xids or (),
            uncorrected_ecc=gpu.uncorrected_ecc,
            retired_pages_pending=None if pending is None else pending == nvml.NVML_FEATURE_ENABLED,
            remap_pending=None if remap is None else bool(remap[2]),
            remap_failed=None if remap is None else bool(remap[3]),
        )
        return gpu

    def _memory(self, handle: Any) -> Any:
        """The GPU's memory, with ``used`` not counting what the driver and firmware reserve.

        NVML's first memory call counts the reserve as used (about 480 MiB of an idle H100), so an
        idle GPU would read busier than ``nvidia-smi`` and DCGM's ``FB_USED`` show it; the second
        (drivers from R510) gives the reserve apart. Older drivers get the first."""
        version = getattr(self._nvml, "nvmlMemory_v2", None)
        memory = None if version is None else self._call(handle, "nvmlDeviceGetMemoryInfo", handle, version)
        return memory if memory is not None else self._call(handle, "nvmlDeviceGetMemoryInfo", handle)

    def _call(self, handle: Any, function: str, *args: Any) -> Any:
        """``pynvml.<function>(*args)``, or None where the driver, the library or the GPU lacks it.

        Raises ``_GpuFault`` when NVML says the GPU (``handle``) is lost or needs a reset."""
        fn = getattr(self._nvml, function, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:
            fault = _FAULTS.get(getattr(exc, "value", None))
            if fault is not None and handle is not None:
                raise _GpuFault(fault) from None
            return None

    # -- NVLink layout --------------------------------------------------------------------

    def _layout(self) -> tuple[list[list[int]] | None, LayoutSource]:
        count = len(self._handles)
        if count == 1:
            return [[0]], LayoutSource.SINGLE_GPU
        found = self._links()
        if found is not None:
            linked, on_switch = found
            return islands_of(count, linked, on_switch), LayoutSource.NVLINK_LINKS
        pairs = self._p2p_pairs()
        if pairs is not None:
            return islands_of(count, pairs), LayoutSource.P2P_STATUS
        return None, LayoutSource.UNKNOWN

    def _links(self) -> tuple[set[tuple[int, int]], set[int]] | None:
        """Pairs linked directly and GPUs linked to an NVSwitch; None if NVML describes no link."""
        nvml = self._nvml
        by_bus: dict[tuple[int, int, int, int], int] = {}
        for i, h in enumerate(self._handles):
            pci = self._safe(h, "nvmlDeviceGetPciInfo", h)
            key = None if pci is None else bus_key(pci.busId)
            if key is not None:
                by_bus[key] = i
        linked: set[tuple[int, int]] = set()
        on_switch: set[int] = set()
        described = False
        for i, h in enumerate(self._handles):
            for link in range(nvml.NVML_NVLINK_MAX_LINKS):
                state = self._safe(h, "nvmlDeviceGetNvLinkState", h, link)
                if state is None:
                    continue
                described = True
                if state != nvml.NVML_FEATURE_ENABLED:
                    continue
                remote_type = self._safe(h, "nvmlDeviceGetNvLinkRemoteDeviceType", h, link)
                remote = self._safe(h, "nvmlDeviceGetNvLinkRemotePciInfo", h, link)
                peer = None if remote is None else by_bus.get(bus_key(remote.busId) or (-1, -1, -1, -1))
                if peer is not None and peer != i:
                    linked.add((min(i, peer), max(i, peer)))
                elif remote_type == nvml.NVML_NVLINK_DEVICE_TYPE_SWITCH or (remote_type is None and remote is not None and peer is None):
                    on_switch.add(i)
        return (linked, on_switch) if described else None

    def _p2p_pairs(self) -> set[tuple[int, int]] | None:
        """Pairs NVML says can talk peer to peer over NVLink; None if it cannot say for any pair."""
        nvml = self._nvml
        pairs: set[tuple[int, int]] = set()
        answered = False
        for i, a in enumerate(self._handles):
            for j in range(i + 1, len(self._handles)):
                status = self._safe(a, "nvmlDeviceGetP2PStatus", a, self._handles[j], nvml.NVML_P2P_CAPS_INDEX_NVLINK)
                if status is None:
                    continue
                answered = True
                if status == nvml.NVML_P2P_STATUS_OK:
                    pairs.add((i, j))
        return pairs if answered else None

    def _safe(self, handle: Any, function: str, *args: Any) -> Any:
        """As ``_call``, but a lost GPU is just N/A here (the reading reports it)."""
        try:
            return self._call(handle, function, *args)
        except _GpuFault:
            return None

    # -- XIDs -----------------------------------------------------------------------------

    def restore_xids(self, by_uuid: Mapping[str, list[int]]) -> dict[int, list[int]]:
        """Take back critical XIDs seen before the agent restarted (``NodeReading.xids_by_uuid``);
        returns them by GPU index. UUIDs of GPUs this node no longer shows are left out."""
        restored: dict[int, list[int]] = {}
        for index in range(len(self._handles)):
            uuid = self._uuid(index)
            earlier = critical_xids(by_uuid.get(uuid, ())) if uuid is not None else []
            if earlier:
                seen = self._xids.setdefault(index, [])
                seen[:0] = [x for x in earlier if x not in seen]
                restored[index] = earlier
        return restored

    def _uuid(self, index: int) -> str | None:
        uuid = self._safe(self._handles[index], "nvmlDeviceGetUUID", self._handles[index])
        return None if uuid is None else _text(uuid)

    def _register_xid_events(self) -> None:
        nvml = self._nvml
        events = self._call(None, "nvmlEventSetCreate")
        if events is None:
            return
        registered = 0
        for h in self._handles:
            try:
                nvml.nvmlDeviceRegisterEvents(h, nvml.nvmlEventTypeXidCriticalError, events)
                registered += 1
            except nvml.NVMLError as exc:
                log.info("XID events are not available for a GPU: %s", exc)
        if registered:
            self._events = events
        else:
            self._call(None, "nvmlEventSetFree", events)

    def _drain_xid_events(self) -> None:
        nvml = self._nvml
        wait = getattr(nvml, "nvmlEventSetWait_v2", None) or nvml.nvmlEventSetWait
        while True:
            try:
                data = wait(self._events, 0)
            except nvml.NVMLError:
                return  # NVML_ERROR_TIMEOUT: nothing more waiting
            if not data.eventType & nvml.nvmlEventTypeXidCriticalError:
                continue
            index = self._call(None, "nvmlDeviceGetIndex", data.device)
            if index is None:
                log.warning("XID %d on a GPU NVML cannot name", data.eventData)
                continue
            xid = int(data.eventData)
            self._xids.setdefault(int(index), []).append(xid)
            if xid in APPLICATION_XIDS:
                log.info("GPU %d: XID %d, caused by an application (the GPU stays in service)", index, xid)
            else:
                log.warning("GPU %d: %s: out of service until the agent restarts", index, describe_xid(xid))


def _init_failure(nvml: ModuleType, exc: Exception) -> str:
    value = getattr(exc, "value", None)
    if value == nvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        return "no NVIDIA driver: the NVML library (libnvidia-ml.so.1) was not found"
    if value == nvml.NVML_ERROR_DRIVER_NOT_LOADED:
        return "no NVIDIA driver: the NVIDIA kernel driver is not loaded"
    if value == nvml.NVML_ERROR_NO_PERMISSION:
        return "no NVIDIA driver usable: no permission to open the GPU devices"
    return f"no NVIDIA driver usable: NVML failed to start: {exc}"

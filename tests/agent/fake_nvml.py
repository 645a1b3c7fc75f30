"""A fake NVML: pynvml's functions monkeypatched to answer for GPUs described in Python.

``FakeNvml(gpus).install(monkeypatch)`` replaces every ``pynvml.nvml*`` function: the ones below
answer from the ``FakeGpu`` records, every other one raises NVML_ERROR_FUNCTION_NOT_FOUND (so a
test never reaches a real driver, and a function the reader did not expect is simply N/A).

The layouts are real machines' (bus ids as ``nvidia-smi`` shows them on such boards):

- ``hgx_h100()``: 8 H100 SXM, every GPU with 18 NVLinks to the board's NVSwitches;
- ``two_hgx_a100_4gpu()``: two 4-GPU A100 boards, each GPU linked 4 times to each board peer;
- ``pcie_l40s()``: 4 L40S on PCIe, no NVLink;
- ``a6000_bridged_pairs()``: 4 RTX A6000 with NVLink bridges over pairs (0-1, 2-3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import FunctionType
from typing import Any

import pynvml

GIB = 2**30


@dataclass
class Link:
    """One NVLink: what is at its far end."""

    remote_bus: str
    to_switch: bool = False
    active: bool = True


@dataclass
class FakeGpu:
    name: str
    bus_id: str
    memory_total: int = 80 * GIB
    memory_used: int = 512 * 2**20
    """Allocated by programs (NVML's second memory call; ``nvidia-smi``'s figure)."""
    memory_reserved: int = 480 * 2**20
    """Held by the driver and firmware: NVML's first memory call counts it as used."""
    utilization: int = 0
    temperature: int = 34
    power_mw: int = 71_000
    power_limit_mw: int = 700_000
    ecc_uncorrected: int = 0
    clocks_event_mask: int = 0x1  # idle
    retired_pages_pending: int = pynvml.NVML_FEATURE_DISABLED
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)
    links: list[Link] | None = None
    """None: the GPU has no NVLink (NVML: not supported)."""
    lost: bool = False

    @property
    def uuid(self) -> str:
        return f"GPU-{self.bus_id.replace(':', '').replace('.', '')[-8:]}-fake"


@dataclass
class _Handle:
    index: int


@dataclass
class _Event:
    device: _Handle
    eventType: int
    eventData: int
    gpuInstanceId: int = 0
    computeInstanceId: int = 0


def _nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


@dataclass
class FakeNvml:
    gpus: list[FakeGpu]
    driver: str = "550.54.15"
    init_error: int | None = None
    p2p_nvlink: set[tuple[int, int]] | None = None
    """Pairs whose P2P status over NVLink is OK; None: the function is not found."""
    missing: set[str] = field(default_factory=set)
    """Functions that raise NVML_ERROR_FUNCTION_NOT_FOUND (the driver lacks them)."""
    unsupported: set[str] = field(default_factory=set)
    """Functions that raise NVML_ERROR_NOT_SUPPORTED (the GPU cannot do it)."""
    no_permission: set[str] = field(default_factory=set)
    events: list[_Event] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    initialised: bool = False

    def emit_xid(self, gpu: int, xid: int) -> None:
        self.events.append(_Event(_Handle(gpu), pynvml.nvmlEventTypeXidCriticalError, xid))

    def install(self, monkeypatch) -> FakeNvml:
        for name in dir(pynvml):
            if name.startswith("nvml") and isinstance(getattr(pynvml, name), FunctionType):
                monkeypatch.setattr(pynvml, name, self._not_found(name))
        for name in dir(self):
            if name.startswith("nvml"):
                monkeypatch.setattr(pynvml, name, self._guarded(name, getattr(self, name)))
        return self

    def _not_found(self, name: str):
        def fn(*args: Any) -> Any:
            self.calls.append(name)
            raise _nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

        return fn

    def _guarded(self, name: str, method):
        def fn(*args: Any) -> Any:
            self.calls.append(name)
            if name in self.missing:
                raise _nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            if name in self.unsupported:
                raise _nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
            if name in self.no_permission:
                raise _nvml_error(pynvml.NVML_ERROR_NO_PERMISSION)
            if name not in ("nvmlInit", "nvmlInitWithFlags") and not self.initialised:
                raise _nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)
            return method(*args)

        return fn

    def _gpu(self, handle: _Handle) -> FakeGpu:
        gpu = self.gpus[handle.index]
        if gpu.lost:
            raise _nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    # -- the NVML functions the reader uses ----------------------------------------------------

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise _nvml_error(self.init_error)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        if not 0 <= index < len(self.gpus):
            raise _nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(index)

    def nvmlDeviceGetIndex(self, handle: _Handle) -> int:
        return handle.index

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return self._gpu(handle).name

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return self._gpu(handle).uuid

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> Any:
        info = pynvml.nvmlPciInfo_t()
        info.busId = self._gpu(handle).bus_id.encode()
        return info

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: int | None = None) -> Any:
        gpu = self._gpu(handle)
        free = gpu.memory_total - gpu.memory_reserved - gpu.memory_used
        if version is None:
            info = pynvml.c_nvmlMemory_t()
            info.total, info.used, info.free = gpu.memory_total, gpu.memory_reserved + gpu.memory_used, free
            return info
        if "nvmlDeviceGetMemoryInfo_v2" in self.missing:
            raise _nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        info = pynvml.c_nvmlMemory_v2_t()
        info.version, info.total, info.reserved, info.used, info.free = version, gpu.memory_total, gpu.memory_reserved, gpu.memory_used, free
        return info

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> Any:
        rates = pynvml.c_nvmlUtilization_t()
        rates.gpu, rates.memory = self._gpu(handle).utilization, 0
        return rates

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._gpu(handle).temperature

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        return self._gpu(handle).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:
        return self._gpu(handle).power_limit_mw

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, error_type: int, counter_type: int) -> int:
        assert (error_type, counter_type) == (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
        return self._gpu(handle).ecc_uncorrected

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:
        return self._gpu(handle).clocks_event_mask

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: _Handle) -> int:
        return self._gpu(handle).retired_pages_pending

    def nvmlDeviceGetRemappedRows(self, handle: _Handle) -> tuple[int, int, int, int]:
        return self._gpu(handle).remapped_rows

    def _link(self, handle: _Handle, link: int) -> Link:
        links = self._gpu(handle).links
        if links is None:
            raise _nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if link >= len(links):
            raise _nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return links[link]

    def nvmlDeviceGetNvLinkState(self, handle: _Handle, link: int) -> int:
        return pynvml.NVML_FEATURE_ENABLED if self._link(handle, link).active else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: _Handle, link: int) -> int:
        target = self._link(handle, link)
        return pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH if target.to_switch else pynvml.NVML_NVLINK_DEVICE_TYPE_GPU

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: _Handle, link: int) -> Any:
        info = pynvml.nvmlPciInfo_t()
        info.busId = self._link(handle, link).remote_bus.encode()
        return info

    def nvmlDeviceGetP2PStatus(self, a: _Handle, b: _Handle, capability: int) -> int:
        if self.p2p_nvlink is None:
            raise _nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        assert capability == pynvml.NVML_P2P_CAPS_INDEX_NVLINK
        pair = (min(a.index, b.index), max(a.index, b.index))
        return pynvml.NVML_P2P_STATUS_OK if pair in self.p2p_nvlink else pynvml.NVML_P2P_STATUS_NOT_SUPPORTED

    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlDeviceRegisterEvents(self, handle: _Handle, event_types: int, event_set: object) -> None:
        assert event_types & pynvml.nvmlEventTypeXidCriticalError

    def nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int) -> _Event:
        if not self.events:
            raise _nvml_error(pynvml.NVML_ERROR_TIMEOUT)
        return self.events.pop(0)

    def nvmlEventSetFree(self, event_set: object) -> None:
        pass


# -- real layouts -------------------------------------------------------------------------------


def hgx_h100() -> FakeNvml:
    buses = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
    switches = [f"00000000:{b}:00.0" for b in ("05", "06", "07", "08")]
    gpus = [
        FakeGpu("NVIDIA H100 80GB HBM3", f"00000000:{b}:00.0", links=[Link(switches[k % 4], to_switch=True) for k in range(18)])
        for b in buses
    ]
    return FakeNvml(gpus, p2p_nvlink={(i, j) for i in range(8) for j in range(i + 1, 8)})


def two_hgx_a100_4gpu() -> FakeNvml:
    boards = [["07", "0F", "47", "4E"], ["87", "90", "B7", "BD"]]
    gpus = []
    for board in boards:
        for b in board:
            peers = [p for p in board if p != b]
            links = [Link(f"00000000:{p}:00.0") for p in peers for _ in range(4)]
            gpus.append(FakeGpu("NVIDIA A100-SXM4-40GB", f"00000000:{b}:00.0", memory_total=40 * GIB, power_limit_mw=400_000, links=links))
    pairs = {(i, j) for i in range(8) for j in range(i + 1, 8) if i // 4 == j // 4}
    return FakeNvml(gpus, p2p_nvlink=pairs)


def pcie_l40s() -> FakeNvml:
    gpus = [FakeGpu("NVIDIA L40S", f"00000000:{b}:00.0", memory_total=48 * GIB, power_limit_mw=350_000) for b in ("1B", "3D", "9C", "BD")]
    return FakeNvml(gpus, p2p_nvlink=set())


def a6000_bridged_pairs() -> FakeNvml:
    gpus = [FakeGpu("NVIDIA RTX A6000", f"00000000:{b}:00.0", memory_total=48 * GIB, power_limit_mw=300_000) for b in ("01", "21", "41", "61")]
    fake = FakeNvml(gpus, p2p_nvlink={(0, 1), (2, 3)})
    fake.missing |= {"nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkRemotePciInfo", "nvmlDeviceGetNvLinkRemoteDeviceType"}
    return fake

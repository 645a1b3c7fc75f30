"""What the node agent reads through NVML, on a fake NVML: layouts, readings, N/A, health, no GPU."""

from __future__ import annotations

import logging

import pynvml
import pytest
from fake_nvml import FakeNvml, a6000_bridged_pairs, hgx_h100, pcie_l40s, two_hgx_a100_4gpu

from usher.agent.publish import node_annotations
from usher.engine.backends.nvml.layout import islands_of
from usher.engine.backends.nvml.reader import LayoutSource, NoGpuError, NoGpuReason, NvmlReader

GIB = 2**30


def read(fake: FakeNvml, monkeypatch, watch_xids: bool = True):
    fake.install(monkeypatch)
    with NvmlReader(watch_xids=watch_xids) as reader:
        return reader.read()


# --- the NVLink layout --------------------------------------------------------------------------


def test_an_nvswitch_board_is_one_island(monkeypatch):
    reading = read(hgx_h100(), monkeypatch)
    assert reading.islands == [[0, 1, 2, 3, 4, 5, 6, 7]]
    assert reading.layout_source is LayoutSource.NVLINK_LINKS
    assert node_annotations(reading)["usher/nvlink"] == "0,1,2,3,4,5,6,7"


def test_two_four_gpu_boards_are_two_islands(monkeypatch):
    reading = read(two_hgx_a100_4gpu(), monkeypatch)
    assert reading.islands == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert reading.layout_source is LayoutSource.NVLINK_LINKS
    assert node_annotations(reading)["usher/nvlink"] == "0,1,2,3;4,5,6,7"


def test_pcie_only_gpus_are_each_their_own_island(monkeypatch):
    reading = read(pcie_l40s(), monkeypatch)
    assert reading.islands == [[0], [1], [2], [3]]
    assert reading.layout_source is LayoutSource.P2P_STATUS
    assert node_annotations(reading)["usher/nvlink"] == "0;1;2;3"


def test_without_link_queries_peer_to_peer_status_finds_bridged_pairs(monkeypatch):
    reading = read(a6000_bridged_pairs(), monkeypatch)
    assert reading.islands == [[0, 1], [2, 3]]
    assert reading.layout_source is LayoutSource.P2P_STATUS


def test_a_switch_is_recognised_by_its_bus_id_when_nvml_cannot_name_the_remote_type(monkeypatch):
    fake = hgx_h100()
    fake.missing.add("nvmlDeviceGetNvLinkRemoteDeviceType")
    assert read(fake, monkeypatch).islands == [[0, 1, 2, 3, 4, 5, 6, 7]]


def test_inactive_links_join_nothing(monkeypatch):
    fake = two_hgx_a100_4gpu()
    for gpu in fake.gpus[4:]:
        for link in gpu.links or []:
            link.active = False
    assert read(fake, monkeypatch).islands == [[0, 1, 2, 3], [4], [5], [6], [7]]


def test_an_unknown_layout_is_not_published(monkeypatch):
    fake = pcie_l40s()
    fake.p2p_nvlink = None
    fake.missing.add("nvmlDeviceGetNvLinkState")
    reading = read(fake, monkeypatch)
    assert reading.islands is None and reading.layout_source is LayoutSource.UNKNOWN
    assert "usher/nvlink" not in node_annotations(reading), "unknown is not 'no NVLink'"


def test_a_single_gpu_is_its_own_island_though_nvml_describes_no_link(monkeypatch):
    """As on a VM with one H100 passed through: nvidia-smi topo shows no link and NVML answers none."""
    fake = pcie_l40s()
    fake.gpus = fake.gpus[:1]
    fake.p2p_nvlink = None
    fake.missing.add("nvmlDeviceGetNvLinkState")
    reading = read(fake, monkeypatch)
    assert reading.islands == [[0]] and reading.layout_source is LayoutSource.SINGLE_GPU
    assert node_annotations(reading)["usher/nvlink"] == "0"


def test_islands_are_connected_components_in_gpu_order():
    assert islands_of(6, [(4, 5), (0, 2)]) == [[0, 2], [1], [3], [4, 5]]
    assert islands_of(4, [], on_switch=[3, 1]) == [[0], [1, 3], [2]]
    assert islands_of(3, [(0, 7)]) == [[0], [1], [2]], "a pair naming a GPU the node lacks is ignored"


# --- readings -------------------------------------------------------------------------------------


def test_a_reading_is_in_base_units(monkeypatch):
    fake = hgx_h100()
    gpu = fake.gpus[2]
    gpu.utilization, gpu.memory_used, gpu.temperature, gpu.power_mw = 87, 61 * GIB, 67, 612_433
    reading = read(fake, monkeypatch)
    assert reading.driver == "550.54.15" and len(reading.gpus) == 8
    g = reading.gpus[2]
    assert (g.index, g.name, g.pci_bus_id) == (2, "NVIDIA H100 80GB HBM3", "00000000:3A:00.0")
    assert g.utilization == 87.0 and g.memory_used == 61 * GIB and g.memory_total == 80 * GIB
    assert g.temperature == 67.0 and g.power == pytest.approx(612.433) and g.power_limit == 700.0
    assert g.uncorrected_ecc == 0 and g.throttle == [] and g.healthy


def test_memory_the_driver_reserves_is_not_counted_as_used(monkeypatch):
    """As nvidia-smi shows an idle H100 (seen on one: 0 MiB used of 81559 MiB, while NVML's first
    memory call says 480 MiB used)."""
    fake = hgx_h100()
    fake.gpus[0].memory_used = 0
    assert read(fake, monkeypatch).gpus[0].memory_used == 0
    fake.missing.add("nvmlDeviceGetMemoryInfo_v2")
    older_driver = read(fake, monkeypatch).gpus[0]
    assert older_driver.memory_used == 480 * 2**20 and older_driver.memory_total == 80 * GIB


def test_functions_the_driver_or_gpu_lacks_are_not_available_not_a_crash(monkeypatch):
    fake = pcie_l40s()
    fake.missing |= {"nvmlDeviceGetPowerUsage", "nvmlDeviceGetCurrentClocksEventReasons"}
    fake.unsupported |= {"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRemappedRows"}
    fake.no_permission.add("nvmlDeviceGetTemperature")
    reading = read(fake, monkeypatch)
    g = reading.gpus[0]
    assert g.power is None and g.utilization is None and g.uncorrected_ecc is None and g.temperature is None
    assert g.throttle is None, "neither the new nor the old throttle-reason call answered"
    assert g.memory_total == 48 * GIB, "what does work is still read"
    assert g.healthy, "no signal of a fault is no fault"
    doc = reading.as_json()
    assert doc["gpus"][0]["power"] is None and doc["gpus"][0]["utilization"] is None


def test_an_older_nvidia_ml_py_without_a_function_is_not_a_crash(monkeypatch):
    fake = hgx_h100().install(monkeypatch)
    monkeypatch.delattr(pynvml, "nvmlDeviceGetRemappedRows")
    monkeypatch.delattr(pynvml, "nvmlDeviceGetNvLinkRemoteDeviceType")
    with NvmlReader() as reader:
        reading = reader.read()
    assert reading.gpus[0].healthy and reading.islands == [[0, 1, 2, 3, 4, 5, 6, 7]]
    assert "nvmlShutdown" in fake.calls


def test_throttling_is_named_but_is_no_fault(monkeypatch):
    fake = hgx_h100()
    fake.gpus[1].clocks_event_mask = 0x4 | 0x40  # software power cap, hardware thermal slowdown
    g = read(fake, monkeypatch).gpus[1]
    assert g.throttle == ["SwPowerCap", "HwThermalSlowdown"] and g.healthy


# --- health ----------------------------------------------------------------------------------------


def test_memory_faults_make_a_gpu_unhealthy_and_say_why(monkeypatch):
    fake = hgx_h100()
    fake.gpus[1].ecc_uncorrected = 2
    fake.gpus[4].remapped_rows = (0, 1, 1, 0)
    fake.gpus[5].retired_pages_pending = pynvml.NVML_FEATURE_ENABLED
    fake.gpus[6].remapped_rows = (0, 3, 0, 1)
    reading = read(fake, monkeypatch)
    assert reading.unhealthy == {
        1: "2 uncorrectable ECC errors since the driver loaded",
        4: "row remapping pending: reset the GPU",
        5: "retired memory pages pending: reset the GPU",
        6: "row remapping failed",
    }
    assert node_annotations(reading)["usher/gpu-health"] == (
        '{"1":"2 uncorrectable ECC errors since the driver loaded","4":"row remapping pending: reset the GPU",'
        '"5":"retired memory pages pending: reset the GPU","6":"row remapping failed"}'
    )


def test_a_lost_gpu_is_unhealthy_and_the_others_are_still_read(monkeypatch):
    fake = two_hgx_a100_4gpu()
    fake.gpus[3].lost = True
    reading = read(fake, monkeypatch)
    assert reading.unhealthy == {3: "GPU is lost (fallen off the bus)"}
    assert reading.gpus[3].memory_total is None
    assert reading.gpus[2].memory_total == 40 * GIB


def test_a_critical_xid_while_the_agent_runs_takes_the_gpu_out_and_an_application_xid_does_not(monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="usher.agent")
    fake = hgx_h100().install(monkeypatch)
    with NvmlReader() as reader:
        assert reader.read().unhealthy == {}
        fake.emit_xid(2, 79)
        fake.emit_xid(5, 13)  # an application's graphics engine exception
        reading = reader.read()
        assert reading.unhealthy == {2: "XID 79: GPU has fallen off the bus"}
        assert reading.gpus[5].xids == [13] and reading.gpus[5].healthy
        assert reader.read().unhealthy == {2: "XID 79: GPU has fallen off the bus"}, "it stays out until the agent restarts"
    assert [(r.levelname, r.getMessage()) for r in caplog.records if "XID" in r.getMessage()] == [
        ("WARNING", "GPU 2: XID 79: GPU has fallen off the bus: out of service until the agent restarts"),
        ("INFO", "GPU 5: XID 13, caused by an application (the GPU stays in service)"),
    ]


def test_xids_are_not_watched_for_a_single_reading(monkeypatch):
    reading = read(hgx_h100(), monkeypatch, watch_xids=False)
    assert all(g.xids is None for g in reading.gpus)


def test_a_gpu_without_xid_events_is_still_read(monkeypatch):
    fake = hgx_h100()
    fake.unsupported.add("nvmlDeviceRegisterEvents")
    reading = read(fake, monkeypatch)
    assert all(g.xids is None and g.healthy for g in reading.gpus)


# --- no driver, no GPU ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "error, says",
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "no NVIDIA driver: the NVML library (libnvidia-ml.so.1) was not found"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "no NVIDIA driver: the NVIDIA kernel driver is not loaded"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "no permission"),
    ],
)
def test_without_a_usable_driver_open_says_so_in_one_line(monkeypatch, error: int, says: str):
    FakeNvml([], init_error=error).install(monkeypatch)
    with pytest.raises(NoGpuError) as info:
        NvmlReader().open()
    assert info.value.reason is NoGpuReason.NO_DRIVER
    assert says in str(info.value) and "\n" not in str(info.value)


def test_a_driver_without_gpus_says_so_and_shuts_nvml_down(monkeypatch):
    fake = FakeNvml([]).install(monkeypatch)
    with pytest.raises(NoGpuError) as info:
        NvmlReader().open()
    assert info.value.reason is NoGpuReason.NO_GPU
    assert str(info.value) == "no NVIDIA GPU: the driver is loaded but sees no GPU"
    assert fake.calls[-1] == "nvmlShutdown"

"""`usher agent --once`: what an operator at a node's shell sees, and the exit codes."""

from __future__ import annotations

import json

import pynvml
import pytest
from fake_nvml import FakeNvml, hgx_h100, pcie_l40s

from usher.cli import EXIT_BAD_INPUT, EXIT_NO_GPU, EXIT_OK, main


def test_once_json_prints_the_gpus_the_layout_and_the_annotations(monkeypatch, capsys):
    fake = hgx_h100()
    fake.gpus[0].utilization = 93
    fake.gpus[6].ecc_uncorrected = 1
    fake.install(monkeypatch)
    monkeypatch.setenv("NODE_NAME", "dgx-h100-07")
    assert main(["agent", "--once", "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["node"] == "dgx-h100-07" and doc["driver"] == "550.54.15" and doc["gpuCount"] == 8
    assert doc["nvlink"] == {"islands": [[0, 1, 2, 3, 4, 5, 6, 7]], "from": "nvlink-links"}
    assert doc["gpus"][0]["utilization"] == 93 and doc["gpus"][0]["memory"]["total"] == 80 * 2**30
    assert doc["gpus"][6]["healthy"] is False
    assert doc["annotations"] == {
        "usher/nvlink": "0,1,2,3,4,5,6,7",
        "usher/gpu-health": '{"6":"1 uncorrectable ECC error since the driver loaded"}',
    }
    assert doc["gpus"][0]["xids"] is None, "XIDs are only seen while the agent runs"


def test_once_prints_a_table_with_na_where_nvml_cannot_say(monkeypatch, capsys):
    fake = pcie_l40s()
    fake.unsupported |= {"nvmlDeviceGetPowerUsage", "nvmlDeviceGetUtilizationRates"}
    fake.install(monkeypatch)
    assert main(["agent", "--once", "--node", "l40s-3"]) == EXIT_OK
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "node l40s-3: driver 550.54.15, 4 GPUs, NVLink islands 0;1;2;3 (from p2p-status)"
    assert out[2].split() == ["0", "NVIDIA", "L40S", "N/A", "0.5/48.0", "GiB", "34C", "N/A", "ok"]


@pytest.mark.parametrize(
    "fake, line",
    [
        (FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND),
         "usher agent: no NVIDIA driver: the NVML library (libnvidia-ml.so.1) was not found"),
        (FakeNvml([]), "usher agent: no NVIDIA GPU: the driver is loaded but sees no GPU"),
    ],
)
@pytest.mark.parametrize("flags", [["--once", "--json"], ["--once"], ["--no-publish", "--metrics-port", "0"]])
def test_no_driver_or_no_gpu_exits_3_with_one_line(monkeypatch, capsys, fake: FakeNvml, line: str, flags: list[str]):
    fake.install(monkeypatch)
    assert main(["agent", *flags]) == EXIT_NO_GPU
    captured = capsys.readouterr()
    assert captured.err == line + "\n" and captured.out == ""


def test_the_running_agent_needs_a_node_to_publish_to(monkeypatch, capsys):
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert main(["agent"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("usher: agent: no node to publish to") and err.count("\n") == 1


def test_json_without_once_is_refused(capsys):
    assert main(["agent", "--json"]) == EXIT_BAD_INPUT
    assert "--json goes with --once" in capsys.readouterr().err

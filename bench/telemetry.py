"""Telemetry benchmarks: what live GPU figures cost the console and the controller.

    nice python bench/telemetry.py

- T1: one round of the replay's synthetic source over 1,000 nodes / 8,000 GPUs, the cluster part
  full (B2's workload replayed for a few simulated hours): what the console pays at most twice a
  wall second while it watches a replay.
- T2: what a heatmap redraw reads: ``value`` for all 8,000 GPUs; and one GPU's sparkline history.
- T3: reading one node's DCGM exporter page (8 GPUs, the exporter's default counters) into
  samples, and so a scrape round over 1,000 such nodes (``dns+`` source), parsing only.
- T4: parsing a Prometheus server's answer for 8,000 GPUs (5 series each) into samples.

Prints a markdown table; the figures go to docs/telemetry.md.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads  # noqa: E402

from usher.engine.backends.telemetry.exposition import parse_exposition  # noqa: E402
from usher.engine.backends.telemetry.prometheus_api import parse_query_response  # noqa: E402
from usher.engine.backends.telemetry.series import WANTED, to_samples  # noqa: E402
from usher.engine.controller import Controller  # noqa: E402
from usher.engine.scenario import parse_scenario  # noqa: E402
from usher.engine.synthetic_telemetry import SyntheticTelemetry  # noqa: E402
from usher.engine.telemetry import Metric, TelemetryStore  # noqa: E402

NODES = 1000
ROUNDS = 30

DCGM_DEFAULT_COUNTERS = [
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
]


def dcgm_page(node: str, gpus: int = 8) -> str:
    rng = random.Random(node)
    lines = []
    for name in DCGM_DEFAULT_COUNTERS:
        lines += [f"# HELP {name} {name}.", f"# TYPE {name} gauge"]
        for g in range(gpus):
            labels = (
                f'gpu="{g}",UUID="GPU-{rng.getrandbits(64):016x}",pci_bus_id="00000000:{0x18 + g:02X}:00.0",'
                f'device="nvidia{g}",modelName="NVIDIA H100 80GB HBM3",Hostname="{node}",'
                f'DCGM_FI_DRIVER_VERSION="550.54.15",container="",namespace="",pod=""'
            )
            lines.append(f"{name}{{{labels}}} {rng.randint(0, 80000)}")
    return "\n".join(lines) + "\n"


def prometheus_answer(nodes: int, gpus: int = 8) -> str:
    series = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"]
    result = [
        {"metric": {"__name__": name, "gpu": str(g), "Hostname": f"n-{n:04d}", "instance": f"10.0.{n // 250}.{n % 250}:9400",
                    "job": "dcgm-exporter", "modelName": "NVIDIA H100 80GB HBM3"}, "value": [1735689600.0, "42"]}
        for n in range(nodes) for g in range(gpus) for name in series
    ]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


def timed(fn, repeat: int) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - started) / repeat


def main() -> None:
    rows: list[tuple[str, str]] = []
    scenario = parse_scenario(workloads.b2_busy(nodes=NODES, jobs=4000, days=1.0), file="bench.yaml")
    ctrl = Controller(scenario, until=8 * 3600)
    ctrl.run_to_end()
    st = ctrl.state
    gpus = sum(n.gpu_count for n in st.nodes)
    store = TelemetryStore()
    source = SyntheticTelemetry(store)
    t = [ctrl.now]

    def one_round() -> None:
        t[0] += source.interval
        source.sample(st, t[0])

    per_round = timed(one_round, ROUNDS)
    rows.append((f"T1 synthetic round, {NODES:,} nodes / {gpus:,} GPUs, {st.schedulable_used_milli / 1000:,.0f} GPUs allocated "
                 f"({len(st.running)} jobs)", f"{per_round * 1000:.1f} ms (at most 2 rounds per wall second: <= {2 * per_round * 100:.0f}% of a core)"))

    now = t[0]
    keys = [(n.name, g) for n in st.nodes for g in range(n.gpu_count)]
    read_all = timed(lambda: [store.value(name, g, Metric.UTILIZATION, now) for name, g in keys], 10)
    rows.append((f"T2 heatmap read: value() for {len(keys):,} GPUs", f"{read_all * 1000:.1f} ms"))
    history = timed(lambda: store.history(keys[0][0], keys[0][1], Metric.UTILIZATION), 1000)
    rows.append(("T2 sparkline read: history() of one GPU (60 samples)", f"{history * 1e6:.0f} us"))

    page = dcgm_page("n-0001")
    per_page = timed(lambda: to_samples(parse_exposition(page, WANTED), 0.0), 200)
    rows.append((f"T3 DCGM exporter page, 8 GPUs x {len(DCGM_DEFAULT_COUNTERS)} series ({len(page) / 1024:.0f} KiB) to samples",
                 f"{per_page * 1000:.2f} ms; {NODES:,} nodes: {per_page * NODES:.2f} s per scrape round"))

    answer = prometheus_answer(NODES)
    per_answer = timed(lambda: to_samples(parse_query_response(answer), 0.0), 3)
    rows.append((f"T4 Prometheus answer, {NODES * 8:,} GPUs x 5 series ({len(answer) / 2**20:.1f} MiB) to samples", f"{per_answer:.2f} s"))

    print("| benchmark | result |\n|---|---|")
    for label, value in rows:
        print(f"| {label} | {value} |")


if __name__ == "__main__":
    main()

"""Loading benchmarks: scenario YAML to a checked `Scenario`, with wall, CPU and RSS.

    python bench/loading.py                 # b3 and traces, each in a process of its own
    python bench/loading.py b3              # 5,000 nodes + 100,000 jobs (bench B3's file)
    python bench/loading.py traces          # the spec's example + the openb trace entry
    python bench/loading.py --slow b3       # the line-tracking loader only (no fast path)

`b3` times `parse_scenario` on `workloads.b3_scale()` (8.5 MB, 1.9M YAML events). `traces`
times `load_scenario` on `fixtures/examples/spec-example.yaml` with the openb trace entry
appended (1,213 nodes and 8,152 jobs from `../shared/traces/alibaba-gpu-v2023`), the load
`tests/scenario/test_scenario_traces.py` checks, timed here as a figure rather than asserted
in a test. Each benchmark runs in a fresh process, so its peak RSS (ru_maxrss)
is its own; "held" is the RSS after loading, with the YAML text and garbage gone, minus the RSS
before it: what the loaded scenario costs the process while a replay runs.

Figures go to docs/benchmarks.md, section "Loading".
"""

from __future__ import annotations

import gc
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads
from usher.engine.scenario import Scenario, load_scenario, parse_scenario
from usher.engine.scenario import loader as scenario_loader

REPO = Path(__file__).resolve().parents[1]
SPEC_EXAMPLE = REPO / "fixtures" / "examples" / "spec-example.yaml"
OPENB = REPO.parent / "shared" / "traces" / "alibaba-gpu-v2023"
TRACE_ENTRY = (
    "traces:\n"
    "  - {format: openb, nodes: openb_node_list_gpu_node.csv, pods: openb_pod_list_default.csv, queue: team-a}\n"
)


def rss_mib() -> float:
    """The process's resident memory now, in MiB (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
    except OSError:
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib() -> float:
    """The process's peak resident memory so far (ru_maxrss, KiB on Linux), in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(load: Callable[[], Scenario]) -> tuple[Scenario, float, float, float]:
    """`load()`, its wall and CPU seconds, and the RSS it holds once its garbage is gone."""
    gc.collect()
    before = rss_mib()
    wall, cpu = time.perf_counter(), time.process_time()
    scenario = load()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    gc.collect()
    return scenario, wall, cpu, rss_mib() - before


def b3() -> list[tuple[str, str]]:
    """Bench B3's scenario file: 5,000 nodes in one group and 100,000 one- or two-pod jobs."""
    text = workloads.b3_scale()
    size = len(text.encode())
    scenario, wall, cpu, held = timed(lambda: parse_scenario(text, file="b3.yaml"))
    jobs = len(scenario.all_jobs())
    return [
        (f"b3: parse_scenario, 5,000 nodes + {jobs:,} jobs ({size / 2**20:.1f} MiB of YAML)", f"{wall:.2f} s wall, {cpu:.2f} s CPU"),
        ("b3: held by the loaded scenario", f"{held:.0f} MiB"),
        ("b3: peak RSS (generating the text included)", f"{peak_rss_mib():.0f} MiB"),
    ]


def traces() -> list[tuple[str, str]]:
    """The spec's example plus the openb trace entry, as test_scenario_traces loads it."""
    if not OPENB.is_dir():
        return [("traces", f"skipped: no trace files at {OPENB}")]
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        for csv_file in OPENB.glob("*.csv"):
            (base / csv_file.name).symlink_to(csv_file)
        scenario_file = base / "two-teams.yaml"
        scenario_file.write_text(SPEC_EXAMPLE.read_text() + TRACE_ENTRY)
        load_scenario(scenario_file)  # warm: imports, first-use caches, the page cache
        scenario, wall, cpu, held = timed(lambda: load_scenario(scenario_file))
    return [
        (
            f"traces: load_scenario, spec example + openb ({len(scenario.all_nodes()):,} nodes, {len(scenario.all_jobs()):,} jobs)",
            f"{wall:.2f} s wall, {cpu:.2f} s CPU",
        ),
        ("traces: held by the loaded scenario", f"{held:.0f} MiB"),
        ("traces: peak RSS", f"{peak_rss_mib():.0f} MiB"),
    ]


BENCHES: dict[str, Callable[[], list[tuple[str, str]]]] = {"b3": b3, "traces": traces}


def run_one(name: str, slow: bool) -> None:
    """Run one benchmark in this process and print its table rows."""
    if slow:
        scenario_loader.FAST_PATH = False
    for label, value in BENCHES[name]():
        print(f"| {label}{' (--slow)' if slow else ''} | {value} |", flush=True)


def main(argv: list[str]) -> None:
    """Each named benchmark (default: all) in a child process of its own, one table."""
    slow = "--slow" in argv
    names = [a for a in argv if a not in ("--slow", "--child")] or list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        raise SystemExit(f"unknown benchmark {', '.join(unknown)}; known: {', '.join(BENCHES)}")
    if "--child" in argv:
        run_one(names[0], slow)
        return
    print("| benchmark | result |\n|---|---|", flush=True)
    for name in names:
        command = [sys.executable, __file__, "--child", name, *(["--slow"] if slow else [])]
        subprocess.run(command, check=True)


if __name__ == "__main__":
    main(sys.argv[1:])

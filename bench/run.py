"""Engine benchmarks B1-B3 (issue 2). Prints a markdown table; figures go to docs/benchmarks.md.

    python bench/run.py            # B1, B2, B3
    python bench/run.py b1 b2      # some
    python bench/run.py b2-heavy   # B2 at 150% offered load (a stress run: minutes)

Each benchmark builds its scenario as YAML text, loads it through the normal loader (timed
separately), and then times the engine alone. RSS is the process's peak (ru_maxrss), so run one
benchmark per process when comparing memory: ``python bench/run.py b3``.
"""

from __future__ import annotations

import gc
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads  # noqa: E402

from usher.engine.controller import Controller  # noqa: E402
from usher.engine.report import build_report  # noqa: E402
from usher.engine.scenario import parse_scenario  # noqa: E402


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load(text: str):
    t0 = time.perf_counter()
    scenario = parse_scenario(text, file="bench.yaml")
    return scenario, time.perf_counter() - t0


def b1() -> list[tuple[str, str]]:
    scenario, load_s = load(workloads.b1_placement())
    t0 = time.perf_counter()
    ctrl = Controller(scenario)
    build_s = time.perf_counter() - t0
    gc.collect()
    t0 = time.perf_counter()
    ctrl.step()  # the moment everything is submitted: one cycle over 10,000 pending jobs
    cycle_s = time.perf_counter() - t0
    placed = len(ctrl.state.running)
    pods = sum(j.total_pods for j in (ctrl.state.jobs[i] for i in ctrl.state.running))
    return [
        ("B1 load 5,000 nodes + 10,000 jobs (YAML+validation)", f"{load_s:.2f} s"),
        ("B1 build engine state", f"{build_s:.2f} s"),
        ("B1 first cycle", f"{cycle_s:.2f} s, {placed} jobs / {pods} pods placed, {sum(len(q.pending) for q in ctrl.state.queues.values())} left pending"),
        ("B1 placement rate", f"{pods / cycle_s:,.0f} pods/s"),
    ]


def b2(offered: float = 1.0, tag: str = "B2") -> list[tuple[str, str]]:
    scenario, load_s = load(workloads.b2_busy(load=offered))
    gc.collect()
    t0 = time.perf_counter()
    ctrl = Controller(scenario)
    ctrl.run_to_end()
    replay_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    report = build_report(ctrl)
    report_s = time.perf_counter() - t0
    s = report["summary"]
    gangs = sum(1 for j in ctrl.state.jobs if j.total_pods > 1)
    return [
        (f"{tag} load 1,000 nodes + 20,000 jobs (offered load {offered:.0%})", f"{load_s:.2f} s"),
        (f"{tag} replay (7 days of submissions, to {ctrl.now / 86400:.1f} days)", f"{replay_s:.2f} s wall, {ctrl.metrics.cycles} cycles, {ctrl.metrics.cycle_seconds:.2f} s in cycles"),
        (f"{tag} report (reasons, ETAs)", f"{report_s:.2f} s"),
        (f"{tag} outcome", f"util {s['gpuUtilization']:.3f}, finished {s['finished']}, pending {s['pending']}, preemptions {s['preemptions']}, "
                       f"avg wait {s['avgWaitSeconds']:.0f} s, {gangs} rack gangs"),
        (f"{tag} peak RSS", f"{peak_rss_mib():.0f} MiB"),
    ]


def b3() -> list[tuple[str, str]]:
    text = workloads.b3_scale()
    scenario, load_s = load(text)
    del text
    gc.collect()
    t0 = time.perf_counter()
    ctrl = Controller(scenario)
    ctrl.step()
    cycle_s = time.perf_counter() - t0
    return [
        ("B3 load 5,000 nodes + 100,000 jobs", f"{load_s:.2f} s"),
        ("B3 build + one full cycle", f"{cycle_s:.2f} s, {len(ctrl.state.running)} jobs running"),
        ("B3 peak RSS", f"{peak_rss_mib():.0f} MiB"),
    ]


def b2_heavy() -> list[tuple[str, str]]:
    return b2(1.5, "B2-heavy")


BENCHES = {"b1": b1, "b2": b2, "b2-heavy": b2_heavy, "b3": b3}


def main(argv: list[str]) -> None:
    names = argv or ["b1", "b2", "b3"]  # b2-heavy (150% offered load) is a stress run, by name only
    print("| benchmark | result |\n|---|---|")
    for name in names:
        for label, value in BENCHES[name]():
            print(f"| {label} | {value} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

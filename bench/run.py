"""Engine benchmarks B1-B3. Prints a markdown table; figures go to docs/benchmarks.md.

    python bench/run.py            # B1, B2, B3
    python bench/run.py b1 b2      # some
    python bench/run.py b2-heavy   # B2 at 150% offered load (a stress run: minutes)
    python bench/run.py b2-busy    # B2 at 130% offered load: a backlog of hundreds all week
    python bench/run.py b2-busy-quarter  # the same at 250 nodes and 5,000 jobs (for bench/compare.py)
    python bench/run.py b3-cycle   # one cycle over 100,000 pending jobs, then one completion
    python bench/run.py scaling    # nodes 250 / 1,000 / 4,000 x offered load 0.7-1.6 (long)
    python bench/run.py depth      # B3's cluster and kinds, 10,000 to 100,000 waiting: per completion
    python bench/run.py contention # B2 at 1.0x and 1.3x, depth at 10k and 100k: the busy/quiet ratios (long)

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


def busy_replay(nodes: int, offered: float, jobs_per_node: int = 20, days: float = 7.0) -> dict[str, float]:
    """Replay B2's cluster shape at ``nodes`` and ``offered`` load: load and replay time, CPU,
    cycle times, the backlog and its kinds, peak RSS."""
    scenario, load_s = load(workloads.b2_busy(nodes=nodes, jobs=nodes * jobs_per_node, days=days, load=offered))
    gc.collect()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    ctrl = Controller(scenario)
    gc.collect()
    gc.freeze()  # as `usher replay` does: the state lives to the end
    ctrl.metrics.cycle_times = []
    pending_sum = 0
    kinds_sum = 0
    events = 0
    while ctrl.step():
        events += 1
        pending_sum += sum(len(q.pending) for q in ctrl.state.queues.values())
        kinds_sum += len(ctrl.state.reason_cells)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    times = sorted(ctrl.metrics.cycle_times)
    return {
        "load_s": load_s,
        "wall": wall,
        "cpu": cpu,
        "cycles": len(times),
        "events": events,
        "mean_ms": 1000 * sum(times) / len(times),
        "p99_ms": 1000 * times[min(len(times) - 1, int(0.99 * len(times)))],
        "pending": pending_sum / max(1, events),
        "kinds": kinds_sum / max(1, events),
        "us_per_event": 1e6 * cpu / max(1, events),
        "rss": peak_rss_mib(),
    }


def _busy_rows(tag: str, nodes: int, offered: float) -> list[tuple[str, str]]:
    r = busy_replay(nodes, offered)
    return [
        (f"{tag} load ({nodes:,} nodes, {nodes * 20:,} jobs, offered {offered:.0%})", f"{r['load_s']:.2f} s"),
        (
            f"{tag} replay",
            f"{r['wall']:.1f} s wall, {r['cpu']:.1f} s CPU, {r['cycles']:,} cycles, mean {r['mean_ms']:.2f} ms, "
            f"p99 {r['p99_ms']:.1f} ms, {r['pending']:.0f} pending on average, peak RSS {r['rss']:.0f} MiB",
        ),
    ]


def b2_busy() -> list[tuple[str, str]]:
    return _busy_rows("B2-busy", 1000, 1.3)


def b2_busy_quarter() -> list[tuple[str, str]]:
    """B2-busy at a quarter of its size (250 nodes, 5,000 jobs, the same week and density): a
    minute or two, for comparing trees with ``bench/compare.py``."""
    return _busy_rows("B2-busy-quarter", 250, 1.3)


def b2_heavy() -> list[tuple[str, str]]:
    return _busy_rows("B2-heavy", 1000, 1.5)


def b3_cycle() -> list[tuple[str, str]]:
    """One full cycle over B3's 100,000 pending jobs, then the steady state: one job completes
    and the next cycle runs (a replay's every moment after the first)."""
    scenario, load_s = load(workloads.b3_scale())
    gc.collect()
    ctrl = Controller(scenario)
    gc.collect()
    gc.freeze()  # as `usher replay` does: the state lives to the end
    ctrl.metrics.cycle_times = []
    t0 = time.perf_counter()
    ctrl.step()  # everything is submitted at 0: one cycle over the whole backlog
    first_s = time.perf_counter() - t0
    pending = sum(len(q.pending) for q in ctrl.state.queues.values())
    steady: list[float] = []
    for _ in range(20):
        t0 = time.perf_counter()
        ctrl.step()  # the next completion, and the cycles it causes
        steady.append(time.perf_counter() - t0)
    steady.sort()
    cycles = sorted(ctrl.metrics.cycle_times[1:])
    return [
        ("B3-cycle load 5,000 nodes + 100,000 jobs", f"{load_s:.2f} s"),
        ("B3-cycle first moment (100,000 submissions and the cycle)", f"{first_s:.3f} s, {len(ctrl.state.running):,} running, {pending:,} left pending"),
        ("B3-cycle the first cycle alone", f"{ctrl.metrics.cycle_times[0]:.3f} s"),
        ("B3-cycle next completion + cycle (median of 20)", f"{1000 * steady[len(steady) // 2]:.1f} ms (max {1000 * steady[-1]:.1f} ms)"),
        ("B3-cycle those cycles alone (median)", f"{1000 * cycles[len(cycles) // 2]:.1f} ms"),
        ("B3-cycle peak RSS", f"{peak_rss_mib():.0f} MiB"),
    ]


#: the scaling table's submission window and jobs per node: B2's density of submissions (20 per
#: node in 7 days), over 2 days so that the 4,000-node runs take minutes, not hours
SCALING_DAYS = 2.0
SCALING_JOBS_PER_NODE = 6


def scaling() -> list[tuple[str, str]]:
    """Nodes x offered load: does the work per event stay flat as the backlog grows?"""
    rows = []
    for nodes in (250, 1000, 4000):
        for offered in (0.7, 1.0, 1.3, 1.6):
            r = busy_replay(nodes, offered, SCALING_JOBS_PER_NODE, SCALING_DAYS)
            rows.append((
                f"scaling {nodes:,} nodes, {nodes * SCALING_JOBS_PER_NODE:,} jobs in {SCALING_DAYS:g} days, offered {offered:.0%}",
                f"{r['wall']:.1f} s wall, {r['cpu']:.1f} s CPU, {r['events']:,} events, {r['pending']:.0f} pending "
                f"of {r['kinds']:.0f} kinds on average, "
                f"{r['us_per_event']:.0f} us CPU per event, cycle mean {r['mean_ms']:.2f} ms p99 {r['p99_ms']:.1f} ms, RSS {r['rss']:.0f} MiB",
            ))
            print(f"| {rows[-1][0]} | {rows[-1][1]} |", file=sys.stderr, flush=True)
    return rows


def depth_run(jobs: int, completions: int = 200) -> dict[str, float]:
    """B3's cluster and kinds with ``jobs`` submitted at once: after the first cycle, the cost of
    each of the next ``completions`` moments (a completion and the cycle it causes)."""
    scenario, _ = load(workloads.b3_scale(jobs=jobs))
    gc.collect()
    ctrl = Controller(scenario)
    gc.collect()
    gc.freeze()
    ctrl.step()  # everything is submitted at 0: the first cycle starts what fits
    pending = sum(len(q.pending) for q in ctrl.state.queues.values())
    ctrl.metrics.cycle_times = []
    steady = []
    cpu0 = time.process_time()
    for _ in range(completions):
        t0 = time.perf_counter()
        ctrl.step()
        steady.append(time.perf_counter() - t0)
    cpu = time.process_time() - cpu0
    steady.sort()
    kinds = len(ctrl.state.reason_cells)
    gc.unfreeze()
    return {
        "pending": pending,
        "kinds": kinds,
        "median_ms": 1000 * steady[len(steady) // 2],
        "p90_ms": 1000 * steady[9 * len(steady) // 10],
        "us_cpu": 1e6 * cpu / len(steady),
    }


def _depth_row(jobs: int, r: dict[str, float]) -> tuple[str, str]:
    return (
        f"depth 5,000 nodes, {jobs:,} jobs: {r['pending']:,} waiting of {r['kinds']} kinds",
        f"per completion and its cycle: median {r['median_ms']:.2f} ms, p90 {r['p90_ms']:.2f} ms, {r['us_cpu']:.0f} us CPU",
    )


def depth() -> list[tuple[str, str]]:
    """The same cluster and the same kinds of job, ever more of them waiting: does a completion
    (and the cycle it causes) cost more when the backlog is deeper?"""
    rows = []
    for jobs in (10_000, 30_000, 100_000):
        rows.append(_depth_row(jobs, depth_run(jobs)))
        print(f"| {rows[-1][0]} | {rows[-1][1]} |", file=sys.stderr, flush=True)
    return rows


def contention() -> list[tuple[str, str]]:
    """The busy/quiet and deep/shallow ratios, measured in one process so that they survive a noisy machine: B2's
    cluster and jobs at 1.0x and 1.3x offered load (a busy week against a quiet one, CPU seconds
    of the whole replay), and a completion's cost with 100,000 jobs submitted against 10,000
    (does a deeper backlog cost more per event?). Absolute figures here move with the machine;
    the ratios are what to compare."""
    rows = []
    runs = {}
    for offered in (1.0, 1.3):
        r = busy_replay(1000, offered)
        gc.unfreeze()  # busy_replay froze its state; the next run should not walk past it
        gc.collect()
        runs[offered] = r
        rows.append((
            f"contention B2 replay (1,000 nodes, 20,000 jobs, offered {offered:.0%})",
            f"{r['cpu']:.1f} s CPU, {r['wall']:.1f} s wall, {r['events']:,} events, {r['cycles']:,} cycles, "
            f"{r['pending']:.0f} pending on average, {r['us_per_event']:.0f} us CPU per event",
        ))
        print(f"| {rows[-1][0]} | {rows[-1][1]} |", file=sys.stderr, flush=True)
    quiet, busy = runs[1.0], runs[1.3]
    rows.append((
        "contention busy/quiet (B2 at 1.3x against 1.0x)",
        f"{busy['cpu'] / quiet['cpu']:.2f}x CPU, {busy['wall'] / quiet['wall']:.2f}x wall, "
        f"{busy['us_per_event'] / quiet['us_per_event']:.2f}x CPU per event (goal: at most 3x)",
    ))
    deep = {}
    for jobs in (10_000, 100_000):
        deep[jobs] = depth_run(jobs)
        rows.append(_depth_row(jobs, deep[jobs]))
        print(f"| {rows[-1][0]} | {rows[-1][1]} |", file=sys.stderr, flush=True)
    rows.append((
        "contention deep/shallow (a completion with 100,000 jobs submitted against 10,000)",
        f"{deep[100_000]['us_cpu'] / deep[10_000]['us_cpu']:.2f}x CPU, {deep[100_000]['median_ms'] / deep[10_000]['median_ms']:.2f}x median (goal: flat)",
    ))
    return rows


BENCHES = {"b1": b1, "b2": b2, "b2-heavy": b2_heavy, "b2-busy": b2_busy, "b2-busy-quarter": b2_busy_quarter, "b3": b3, "b3-cycle": b3_cycle, "scaling": scaling, "depth": depth,
           "contention": contention}


def main(argv: list[str]) -> None:
    names = argv or ["b1", "b2", "b3"]  # b2-heavy (150% offered load) is a stress run, by name only
    unknown = [name for name in names if name not in BENCHES]
    if unknown:
        raise SystemExit(f"unknown benchmark {', '.join(map(repr, unknown))} (known: {', '.join(BENCHES)})")
    print("| benchmark | result |\n|---|---|")
    for name in names:
        for label, value in BENCHES[name]():
            print(f"| {label} | {value} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

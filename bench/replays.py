"""Time-based replays: every workload under every policy, the table into docs/results.md.

    nice python bench/replays.py                      # all; rewrites the section in docs/results.md
    nice python bench/replays.py --print              # the same tables on stdout, docs untouched
    nice python bench/replays.py --workloads llm-load0.7 --seeds 1-2 --policies usher kueue

Workloads (traces from ``--traces``, else ``$USHER_TRACES``, else ``../shared/traces``):

- ``openb-load0.7``, ``openb-load0.9`` and ``openb-load1.1``: ``usher generate --from openb
  --load L --seed S --days 0.0833 --max-runtime 2h`` (``usher.generate_openb``): the Alibaba GPU
  v2023 default pod list (the FGD paper's openb) on its 1,213 GPU nodes, pods drawn from the
  trace with their own run times capped at 2 h, arriving as a Poisson stream whose GPU demand is
  L times the cluster's 6,212 GPUs, for two hours, the pods that would be running at the start
  submitted at 0; one queue without quota; one replay per seed of ``--openb-seeds``. (The trace
  at its own pace leaves the cluster 0.2% busy: every policy tied.)
- ``llm-load0.7`` and ``llm-load0.9``: ``usher generate --nodes 64 --racks 8 --queues 4 --load L
  --seed S`` (a week of submissions; gangs up to 256 GPUs with rack and block topology, Philly run
  times), one replay per seed; the table gives means over the seeds.

Per policy: the report's summary (GPU utilization, average and p95 wait, average JCT and makespan
over finished jobs, preemptions, gangs deadlocked, GPUs held by gangs waiting for their other
pods), quota violations from the independent audit (``usher.engine.quota_audit``) and the jobs
that never started. The section of docs/results.md between the ``replays`` markers is replaced.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path

from usher.engine.controller import Controller
from usher.engine.policy.registry import Backfill, Ordering, Policy, Scoring, get_policy
from usher.engine.quota_audit import audit_quotas
from usher.engine.report import build_report
from usher.engine.scenario import Scenario, load_scenario, parse_scenario

from usher.generate import GenerateParams, generate, read_runtimes, traces_dir
from usher.generate_openb import OpenbParams, OpenbTrace, generate_openb, read_openb

POLICIES = ["usher", "kueue", "volcano", "slurm", "kube-default"]
#: Not a named policy: usher with one switch turned off, to show what that switch does (not
#: part of the comparison; ``--no-what-if`` leaves it out).
WHAT_IF = {
    "what if: usher without reservations": replace(get_policy("usher"), backfill=Backfill.NONE),
    "what if: usher with first-fit placement": replace(get_policy("usher"), scoring=Scoring.FIRST_FIT),
    "what if: usher ordered by priority, not fair share": replace(get_policy("usher"), ordering=Ordering.PRIORITY),
    "what if: usher without consolidation": replace(get_policy("usher"), consolidation=False),
    "what if: usher without fragmentation-aware placement": replace(get_policy("usher"), fragmentation=False),
    "what if: usher with decayed fair share (every queue's usageHalfLife 1d)": get_policy("usher"),
}
#: the what-if rows of the openb workloads (a replay there is 29,000-46,000 pods: one row only)
OPENB_WHAT_IF = frozenset({"what if: usher without fragmentation-aware placement"})
#: what-if rows that change the scenario rather than the policy
WHAT_IF_SCENARIO = {
    "what if: usher with decayed fair share (every queue's usageHalfLife 1d)": lambda scenario: with_half_life(scenario, 86400.0),
}


def with_half_life(scenario: Scenario, seconds: float) -> Scenario:
    """``scenario`` with every queue's share counting its recent use (``usageHalfLife``)."""
    queues = [q.model_copy(update={"usage_half_life": seconds}) for q in scenario.queues]
    return scenario.model_copy(update={"queues": queues})
LOADS = {"llm-load0.7": 0.7, "llm-load0.9": 0.9}
OPENB_LOADS = {"openb-load0.7": 0.7, "openb-load0.9": 0.9, "openb-load1.1": 1.1}
WORKLOADS = [*OPENB_LOADS, *LOADS]
DEFAULT_SEEDS = "1-5"
#: one replay of an openb workload is 29,000-46,000 pods on 1,213 nodes (10-95 s on the development machine)
DEFAULT_OPENB_SEEDS = "1"
#: two hours of arrivals, run times capped at two hours (usher.generate_openb says why)
OPENB_DAYS = 2 / 24
OPENB_MAX_RUNTIME = 7200.0
RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results.md"
BEGIN, END = "<!-- replays:begin -->", "<!-- replays:end -->"


@dataclass(slots=True)
class Outcome:
    """What one replay of one scenario under one policy measured."""

    util: float
    held_idle: float
    #: GPUs of working jobs over the GPUs there are, from the first submission to the last
    util_window: float
    avg_wait: float
    #: over every submitted job, one that never started counted as waiting to the end (a floor)
    avg_wait_all: float
    #: the same over the jobs of the highest priority in the scenario (openb: latency-sensitive pods)
    top_wait: float
    p95_wait: float
    avg_jct: float
    makespan: float
    preemptions: int
    deadlocked: int
    quota_violations: int
    never_started: int
    jobs: int
    seconds: float


@dataclass(slots=True)
class Row:
    policy: str
    outcomes: list[Outcome] = field(default_factory=list)
    what_if: bool = False

    def mean(self, name: str) -> float:
        return statistics.fmean(getattr(o, name) for o in self.outcomes)

    def total(self, name: str) -> int:
        return sum(getattr(o, name) for o in self.outcomes)


def window_utilization(scenario: Scenario, report: dict) -> float:
    """Working GPU-seconds over available ones between the first and the last submission.

    A pod counts from when its job began to work (never, for a gang that never started) to its
    run's end; every node counts as available (the workloads here have no node events).
    """
    submits = [j["submitted"] for j in report["jobs"]]
    lo, hi = min(submits), max(submits)
    gpus = sum(n.gpus for n in scenario.all_nodes())
    if hi <= lo or not gpus:
        return 0.0
    used = 0.0
    for job in report["jobs"]:
        for run in job["runs"]:
            work = run.get("workStart", run["start"])
            if work is None:
                continue
            span = max(0.0, min(run["end"], hi) - max(work, lo))
            used += span * sum(p.get("gpuShare", len(p["gpus"])) for p in run["placements"])
    return used / (gpus * (hi - lo))


def replay(scenario: Scenario, policy: Policy) -> Outcome:
    started = time.perf_counter()
    ctrl = Controller(scenario, policy)
    ctrl.run_to_end()
    report = build_report(ctrl)
    s = report["summary"]
    priority = {job.name: scenario.priority_of(job) for job in scenario.all_jobs()}
    top = max(priority.values(), default=0)
    waits, top_waits = [], []
    for j in report["jobs"]:
        starts = [r.get("workStart", r["start"]) for r in j["runs"]]
        began = next((t for t in starts if t is not None), None)
        waits.append((report["endTime"] if began is None else began) - j["submitted"])
        if priority.get(j["name"]) == top:
            top_waits.append(waits[-1])
    never = sum(1 for j in report["jobs"] if not any(r.get("workStart", r["start"]) is not None for r in j["runs"]))
    return Outcome(
        util=s["gpuUtilization"],
        held_idle=s["gpuHeldIdle"],
        util_window=window_utilization(scenario, report),
        avg_wait=s["avgWaitSeconds"],
        avg_wait_all=statistics.fmean(waits) if waits else 0.0,
        top_wait=statistics.fmean(top_waits) if top_waits else 0.0,
        p95_wait=s["p95WaitSeconds"],
        avg_jct=s["avgJctSeconds"],
        makespan=s["makespanSeconds"],
        preemptions=s["preemptions"],
        deadlocked=s["gangsDeadlocked"],
        quota_violations=len(audit_quotas(scenario, report)),
        never_started=never,
        jobs=len(report["jobs"]),
        seconds=time.perf_counter() - started,
    )


def openb_scenarios(trace: OpenbTrace, load: float, seeds: list[int]) -> list[Scenario]:
    """``usher generate --from openb --load L --seed S`` for each seed, at the bench's horizon and cap."""
    out = []
    for seed in seeds:
        params = OpenbParams(load=load, seed=seed, days=OPENB_DAYS, max_runtime=OPENB_MAX_RUNTIME)
        out.append(parse_scenario(generate_openb(params, trace), file=f"openb-load{load:g}-seed{seed}.yaml"))
    return out


def llm_scenarios(traces: Path, load: float, seeds: list[int]) -> list[Scenario]:
    runtimes = read_runtimes(traces)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            path = Path(tmp) / f"llm-{load}-{seed}.yaml"
            path.write_text(generate(GenerateParams(nodes=64, racks=8, queues=4, load=load, seed=seed), runtimes))
            out.append(load_scenario(path))
    return out


def seed_range(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def seed_text(seeds: list[int]) -> str:
    return str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def table(rows: list[Row], when=hours) -> list[str]:
    """The rows as a markdown table; ``when`` writes waits and JCT (hours, or minutes for openb)."""
    lines = [
        "| policy | GPU util | of it held idle | working GPUs while submitting | avg wait | avg wait, all jobs "
        "| avg wait, top priority | p95 wait | avg JCT | makespan | preemptions | gangs deadlocked | quota violations | never started |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.policy} | {row.mean('util'):.4f} | {row.mean('held_idle'):.4f} | {row.mean('util_window'):.4f} "
            f"| {when(row.mean('avg_wait'))} "
            f"| {when(row.mean('avg_wait_all'))} | {when(row.mean('top_wait'))} | {when(row.mean('p95_wait'))} | {when(row.mean('avg_jct'))} | {row.mean('makespan') / 86400:.2f} d "
            f"| {row.mean('preemptions'):.1f} | {row.total('deadlocked')} | {row.total('quota_violations')} "
            f"| {row.total('never_started')} |"
        )
    return lines


def verdict(rows: list[Row], when=hours) -> str:
    """Does usher have the lowest average wait (all jobs) and the highest utilization of working GPUs?"""
    usher = next((r for r in rows if r.policy == "usher"), None)
    others = [r for r in rows if r.policy != "usher" and not r.what_if]
    if usher is None or not others:
        return ""
    best_wait = min(others, key=lambda r: r.mean("avg_wait_all"))
    busy = lambda r: r.mean("util") - r.mean("held_idle")  # noqa: E731 - one line, used twice
    best_util = max(others, key=busy)
    wait_ok = usher.mean("avg_wait_all") <= best_wait.mean("avg_wait_all")
    util_ok = busy(usher) >= busy(best_util)
    clean = usher.total("deadlocked") == 0 and usher.total("quota_violations") == 0
    return (
        f"usher: lowest average wait (all jobs) {'yes' if wait_ok else 'no'} ({when(usher.mean('avg_wait_all'))}; "
        f"best other {best_wait.policy} {when(best_wait.mean('avg_wait_all'))}); highest utilization of working GPUs "
        f"{'yes' if util_ok else 'no'} ({busy(usher):.4f}; best other {best_util.policy} {busy(best_util):.4f}); "
        f"deadlocks and quota violations {'none' if clean else 'SOME'}."
    )


def section(results: dict[str, list[Row]], seeds: list[int], openb_seeds: list[int], command: str, wall: float) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parent).stdout.strip() or "unknown"
    out = [
        "## Time-based replays",
        "",
        "Every workload replayed in simulated time under each policy (`engine/policy/registry.py`): `usher`;",
        "`kueue` (quota admission, BestEffortFIFO by priority, whole gangs, no backfill, first fit);",
        "`volcano` (gang, DRF, bin packing, no backfill, no preemption); `slurm` (priority order, EASY",
        "backfill, best fit, no preemption); `kube-default` (pod by pod, first fit, required topology as",
        "pod affinity, namespace quota without borrowing, no preemption).",
        "Workloads: `openb-load0.7`, `openb-load0.9` and `openb-load1.1` are `usher generate --from openb",
        (f"--load L --seed S --days 0.0833 --max-runtime 2h` for seed{'s' if len(openb_seeds) > 1 else ''} "
         f"{seed_text(openb_seeds)}: the Alibaba GPU v2023 default pod list on its 1,213 GPU"),
        "nodes (6,212 GPUs), each arrival a pod of the trace drawn at random with its CPU, memory, GPUs or",
        "GPU share and its own run time (`deletion_time - scheduled_time`) capped at 2 h, arriving as a",
        "Poisson stream for two hours whose GPU-seconds are L times the cluster's; the pods that would be",
        "running at the start are submitted at 0 with what is left of their run, so the replay starts in",
        "steady state. Each pod's priority is its QoS class in the trace: LS (57% of the pods) and Guaranteed",
        "100, Burstable 50, not preemptible; BE (42%) 0 and preemptible, so \"avg wait, top priority\" is the",
        "latency-sensitive pods'. Times are whole multiples of 10 s (one scheduling cycle per 10 s at most); one queue,",
        "no quota. At the trace's own pace (the former `openb-default`) the cluster was 0.2% busy and every",
        "policy tied. Their waits and JCT are in minutes, their \"GPU util\" includes the up to 2 h drain after",
        "the last arrival (\"working GPUs while submitting\" is the load carried), and their only what-if row is",
        "usher without fragmentation-aware placement (one replay is 29,000-46,000 pods on 1,213 nodes, 10-400 s here). Below saturation hardly a pod waits under",
        "any policy: 86% of the pods ask for one GPU or less and ~7,000 run at once, so the GPUs left free",
        "nearly always hold the next one (of the 8-GPU pods, 0.5%, a few wait for an empty node). At 1.1 the",
        "backlog grows; every policy here starts the highest priority first, and with ~7,000 pods running",
        "some end every 10 s cycle, so a latency-sensitive pod starts within a cycle or two without",
        "preempting anyone and best-effort pods take the wait; how tightly a policy packs GPU shares (0.46,",
        "0.81 of a GPU) sets the load it carries. `llm-load0.7` / `llm-load0.9` are `usher generate --nodes 64 --racks 8 --queues 4 --load L --seed S`",
        f"for seeds {seed_text(seeds)} (a week of submissions on 512 GPUs, gangs up to 256 GPUs, Philly",
        "run times), one replay per seed. Columns are means over the seeds, except gangs deadlocked, quota",
        "violations and never started, which are totals. Avg and p95 wait, JCT and makespan are the",
        "report's, over finished jobs; a job that never starts (deadlocked, or blocked behind a deadlock) is",
        "not in them, so \"avg wait, all jobs\" counts it as waiting until the replay's end (a floor). GPU util is allocated over available GPU-seconds to",
        "the last event, so with the same work it mostly says when the last job ended; \"of it held idle\"",
        "is what gangs held while waiting for their other pods; \"working GPUs while submitting\" counts only",
        "jobs at work, from the first submission to the last (steady state, no drain at the end). Quota",
        "violations come from the audit that rebuilds each queue's usage from the report. The what-if rows",
        "are usher with one switch changed (no backfill reservations; kueue's first-fit placement; priority",
        "order instead of fair share; decayed fair share; no consolidation, so no job is moved to let a",
        "gang start in one rack or block, while usher's preemptions count its moves; bin packing alone,",
        "without the FGD fragmentation score): not named policies",
        "and not in the comparison, they show what each",
        "of usher's choices costs and buys on the workload. Data: Alibaba",
        "cluster-trace-gpu-v2023; Philly run times via alibaba/clusterdata (CC BY 4.0).",
        "",
        f"Command: `{command}`. Machine: the project's development machine, 2 cores (shared), Python",
        f"{platform.python_version()}; date {date.today().isoformat()}; commit {commit}; {wall:.0f} s wall in all.",
    ]
    for name, rows in results.items():
        when = minutes if name in OPENB_LOADS else hours
        out += ["", f"### {name}", "", *table(rows, when)]
        line = verdict(rows, when)
        if line:
            out += ["", line]
    return "\n".join(out)


def write_section(text: str, path: Path = RESULTS) -> None:
    """Replace what is between the replays markers (append the section when there is none)."""
    block = f"{BEGIN}\n{text}\n{END}"
    current = path.read_text(encoding="utf-8") if path.exists() else "# Results\n"
    if BEGIN in current and END in current:
        head, _, rest = current.partition(BEGIN)
        _, _, tail = rest.partition(END)
        new = head + block + tail
    else:
        new = current.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(new, encoding="utf-8")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=WORKLOADS)
    parser.add_argument("--policies", nargs="+", default=POLICIES)
    parser.add_argument("--seeds", default=DEFAULT_SEEDS, help=f"seeds of the generated workloads (default {DEFAULT_SEEDS})")
    parser.add_argument("--openb-seeds", default=DEFAULT_OPENB_SEEDS,
                        help=f"seeds of the openb workloads (default {DEFAULT_OPENB_SEEDS})")
    parser.add_argument("--traces", type=Path, default=None)
    parser.add_argument("--print", action="store_true", help="print the section; leave docs/results.md alone")
    parser.add_argument("--no-what-if", dest="what_if", action="store_false", help="leave out the what-if rows")
    args = parser.parse_args(argv)
    for policy in args.policies:
        get_policy(policy)
    traces = traces_dir(args.traces)
    seeds = seed_range(args.seeds)
    openb_seeds = seed_range(args.openb_seeds)
    started = time.perf_counter()
    trace = read_openb(traces) if any(name in OPENB_LOADS for name in args.workloads) else None
    results: dict[str, list[Row]] = {}
    for name in args.workloads:
        if name in OPENB_LOADS:
            assert trace is not None
            scenarios = openb_scenarios(trace, OPENB_LOADS[name], openb_seeds)
        else:
            scenarios = llm_scenarios(traces, LOADS[name], seeds)
        rows = []
        runs = [(p, get_policy(p), False) for p in args.policies]
        if args.what_if:
            runs += [(label, policy, True) for label, policy in WHAT_IF.items()
                     if name not in OPENB_LOADS or label in OPENB_WHAT_IF]
        for label, policy, what_if in runs:
            row = Row(label, what_if=what_if)
            change = WHAT_IF_SCENARIO.get(label, lambda scenario: scenario)
            for scenario in scenarios:
                row.outcomes.append(replay(change(scenario), policy))
            took = sum(o.seconds for o in row.outcomes)
            print(f"{name} {label}: wait {row.mean('avg_wait'):.0f} s, util {row.mean('util'):.4f} ({took:.1f} s)",
                  file=sys.stderr, flush=True)
            rows.append(row)
        results[name] = rows
    command = "nice python bench/replays.py" + (" " + " ".join(argv) if argv else "")
    text = section(results, seeds, openb_seeds, command, time.perf_counter() - started)
    if args.print:
        print(text)
    else:
        write_section(text)
        print(f"wrote the time-based replays section of {RESULTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

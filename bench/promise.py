"""Backfill's promise, counted: how many reservation holders start after the earliest
start they were promised, on busy replays with one thing that may move a reservation at a time.

    python bench/promise.py                      # every variant, usher's policy
    python bench/promise.py quota under --policy slurm

Variants (16 nodes of 8 GPUs in racks of 4, 300 jobs over ~2.3 days, five seeds each):

- ``queues``: three fair-share queues, one priority, estimates at least the run times. Nothing
  here may move a reservation: the count must be 0 (``tests/engine/test_backfill_promise.py``
  checks it under hypothesis).
- ``quota``: the same with cohort quotas (40 GPUs each): a job that would run past a
  reservation's start must leave the holder its quota too.
- ``reclaim``: cohort quotas, and queues that take their quota back by preemption: a preemptor
  of no higher priority than the holder must leave it its nodes and quota too.
- ``priority``: two priorities: a higher-priority job blocked for capacity may take the
  reservation over, as the promise allows ("outranked" counts the late holders that saw it).
- ``under``: estimates from half the run time up: jobs that run past their estimates delay the
  holders (usher does not enforce estimates as time limits).
"""

from __future__ import annotations

import argparse
import random
import sys

from usher.engine.controller import Controller
from usher.engine.scenario import parse_scenario

VARIANTS = ("queues", "quota", "reclaim", "priority", "under")


def scenario(seed: int, variant: str, nodes: int = 16, jobs: int = 300) -> str:
    rng = random.Random(seed)
    queues = ["q0", "q1", "q2"]
    quota = ", cohort: c, quota: {gpu: 40}" if variant in ("quota", "reclaim") else ""
    if variant == "reclaim":
        quota += ", preemption: {reclaimWithinCohort: Any}"
    lines = [
        "name: promise",
        "topology: {levels: [usher/rack, kubernetes.io/hostname]}",
        "priorityClasses: {low: 10, high: 100}",
        "nodeGroups:",
        f"  - {{prefix: n, count: {nodes}, layout: {{usher/rack: 4}}, template: {{gpus: 8, gpuModel: H100}}}}",
        "queues: [" + ", ".join(f"{{name: {q}{quota}}}" for q in queues) + "]",
        "jobs:",
    ]
    for i in range(jobs):
        count, gpu = rng.choice([(1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (4, 8), (3, 4)])
        topo = ", topology: {required: usher/rack}" if count > 1 else ""
        duration = rng.randint(300, 20000)
        estimate = int(duration * rng.uniform(0.5 if variant == "under" else 1.0, 2.0))
        priority = f", priority: {rng.choice(['low', 'high'])}" if variant == "priority" else ""
        lines.append(
            f"  - {{name: j{i}, queue: {rng.choice(queues)}, submit: {rng.randint(0, 200000)}, duration: {duration}, "
            f"estimate: {estimate}{priority}, pods: [{{count: {count}, gpu: {gpu}{topo}}}]}}"
        )
    return "\n".join(lines) + "\n"


def late_holders(text: str, policy: str) -> tuple[int, list[str], int]:
    """Holders; those that started after the earliest start a reservation promised them; and how
    many of the late ones saw a job of strictly higher priority hold the reservation after the
    promise (which the promise allows)."""
    ctrl = Controller(parse_scenario(text, file="promise.yaml"), policy)
    promised: dict[int, tuple[float, float]] = {}
    holders: list[tuple[float, int]] = []  # (when, holder) at every change of holder
    while ctrl.step():
        reservation = ctrl.state.reservation
        if reservation is not None:
            holder, start = reservation
            if not holders or holders[-1][1] != holder:
                holders.append((ctrl.now, holder))
            if holder not in promised or start < promised[holder][0]:
                promised[holder] = (start, ctrl.now)
    jobs = ctrl.state.jobs
    late, outranked = [], 0
    for holder, (start, when) in promised.items():
        job = jobs[holder]
        began = job.runs[0].start if job.runs else None
        if began is None or began > start + 1e-6:
            late.append(f"{job.name} (priority {job.priority}): promised at {when:g} to start by {start:g}, started {began}")
            end = began if began is not None else float("inf")
            outranked += any(when <= t <= end and jobs[h].priority > job.priority for t, h in holders)
    return len(promised), late, outranked


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="*", help=f"some of {', '.join(VARIANTS)} (default all)")
    parser.add_argument("--policy", default="usher")
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args(argv)
    print("| variant | holders | started late | of them outranked | first late |\n|---|---|---|---|---|")
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant {unknown[0]!r}; known: {', '.join(VARIANTS)}")
    for variant in args.variants or VARIANTS:
        holders = outranked = 0
        late: list[str] = []
        for seed in range(args.seeds):
            n, found, higher = late_holders(scenario(seed, variant), args.policy)
            holders += n
            late += found
            outranked += higher
        print(f"| {variant} | {holders} | {len(late)} | {outranked} | {late[0] if late else ''} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

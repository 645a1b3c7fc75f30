"""ETA accuracy: how close the estimated starts usher shows come true.

    nice python bench/eta.py            # the table into docs/results.md (between the eta markers)
    nice python bench/eta.py --print    # the table on stdout, docs untouched

Replays ``usher generate --nodes 64 --racks 8 --queues 4 --load L --seed S --days 2`` (Philly run
times from the traces) with the recorder of ``usher.engine.eta_accuracy`` on (``usher replay
--eta-accuracy``): for each job that waited, the first estimate it was given and the one it had an
hour before it started, against its start. Median and p90 absolute error, the share within 10% of
the time from the estimate to the start, and the share that started later than estimated; over
seeds 1-3 pooled.

Each team estimates in its own way (``HABITS``; the generator's own 0-100% overshoot is replaced):
team-1 exactly, team-2 five times what it uses, team-3 twice, team-4 anywhere from once to five
times. The same jobs are replayed under usher with the planner's two run-time models
(``policy.backfill.RuntimeModel``): one scale for the cluster (the median of every finished run's
time over its estimate) and each queue's own scale, learnt from its
finished runs. The rows "usher, exact estimates" set every estimate to the job's run time: what
the ETAs could be if users knew how long their jobs run (the rest of the error comes from later
arrivals, preemptions and moves).
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import date
from pathlib import Path

import random

from usher.engine.controller import Controller
from usher.engine.eta_accuracy import Score, summarise
from usher.engine.policy import backfill
from usher.engine.policy.backfill import RuntimeModel
from usher.engine.scenario import parse_scenario

from usher.generate import GenerateParams, generate, read_runtimes, traces_dir

DOCS = Path(__file__).resolve().parents[1] / "docs" / "results.md"
BEGIN, END = "<!-- eta:begin -->", "<!-- eta:end -->"
LOADS = (0.9, 1.2)
SEEDS = (1, 2, 3)
#: the row label of usher's replays with every estimate equal to the run time
EXACT = "usher, exact estimates"
#: row label: (policy, the planner's run-time model, estimates as the teams make them)
ROWS = {
    "usher, one scale for the cluster (before)": ("usher", RuntimeModel.CLUSTER, True),
    "usher, learnt per queue": ("usher", RuntimeModel.QUEUE, True),
    "slurm, learnt per queue": ("slurm", RuntimeModel.QUEUE, True),
    EXACT: ("usher", RuntimeModel.QUEUE, False),
}
#: each team's habit: (least, most) its estimate is of the run time
HABITS = {"team-1": (1.0, 1.0), "team-2": (5.0, 5.0), "team-3": (2.0, 2.0), "team-4": (1.0, 5.0)}
JOB = re.compile(r"queue: (team-\d+)(.*?)duration: (\d+), estimate: \d+")


def with_habits(text: str, seed: int, exact: bool) -> str:
    """The generated jobs with each team's estimates (``HABITS``), or every estimate exact."""
    rng = random.Random(seed)

    def estimate(match: re.Match[str]) -> str:
        duration = int(match.group(3))
        low, high = (1.0, 1.0) if exact else HABITS[match.group(1)]
        return f"queue: {match.group(1)}{match.group(2)}duration: {duration}, estimate: {max(1, round(duration * rng.uniform(low, high)))}"

    text, changed = JOB.subn(estimate, text)
    assert changed, "the generated jobs' estimates were not found"
    return text


def scores(load: float, row: str, runtimes: list[float]) -> tuple[list[Score], list[Score]]:
    policy, model, habits = ROWS[row]
    first: list[Score] = []
    hour: list[Score] = []
    backfill.RUNTIME_MODEL = model
    try:
        for seed in SEEDS:
            text = generate(GenerateParams(nodes=64, racks=8, queues=4, load=load, seed=seed, days=2.0), runtimes)
            text = with_habits(text, seed, exact=not habits)
            ctrl = Controller(parse_scenario(text, file=f"llm-{load}-{seed}.yaml"), policy)
            recorder = ctrl.record_eta_accuracy()
            ctrl.run_to_end()
            first += recorder.first
            hour += recorder.hour_before
    finally:
        backfill.RUNTIME_MODEL = RuntimeModel.QUEUE
    return first, hour


def hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.1f} h"


def share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def table(runtimes: list[float]) -> str:
    rows = [
        "| load | replay | estimate | jobs | median error | p90 error | within 10% | started later |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for load in LOADS:
        for policy in ROWS:
            first, hour = scores(load, policy, runtimes)
            for label, group in (("first", first), ("an hour before", hour)):
                s = summarise(group)
                rows.append(
                    f"| {load:g} | {policy} | {label} | {s['jobs']} | {hours(s['medianAbsErrorSeconds'])} | "
                    f"{hours(s['p90AbsErrorSeconds'])} | {share(s['within10Percent'])} | {share(s['startedLaterThanEstimated'])} |"
                )
            print(rows[-2], rows[-1], sep="\n", file=sys.stderr, flush=True)
    return "\n".join(rows)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print", action="store_true", help="print the table, leave docs/results.md alone")
    args = parser.parse_args(argv)
    runtimes = read_runtimes(traces_dir(None))
    body = (
        f"`python bench/eta.py`, {date.today().isoformat()}: 64 nodes, 4 queues, two days of submissions "
        f"at each load, seeds {SEEDS[0]}-{SEEDS[-1]} pooled, estimates sampled every 5 simulated minutes; "
        "each team's estimates as `HABITS` says (team-1 exact, team-2 5x, team-3 2x, team-4 1-5x).\n\n"
        + table(runtimes)
        + "\n"
    )
    if args.print:
        print(body)
        return
    text = DOCS.read_text()
    if BEGIN in text:
        head, rest = text.split(BEGIN, 1)
        text = head + BEGIN + "\n" + body + END + rest.split(END, 1)[1]
    else:
        text += f"\n## ETA accuracy\n\n{BEGIN}\n{body}{END}\n"
    DOCS.write_text(text)
    print(f"wrote {DOCS}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])

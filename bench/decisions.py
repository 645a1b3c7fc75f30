"""Decision traces: do two trees schedule exactly alike? (A check before and after a change; not a test.)

    python bench/decisions.py now.txt                                  # this tree
    PYTHONPATH=/tmp/old-usher python bench/decisions.py before.txt     # another checkout's package
    diff before.txt now.txt

Replays a corpus (the fixtures, B2 at 0.7-1.8x offered load, B3 with and without binding quotas,
``usher generate`` clusters) under every policy and writes one line per replay: a hash of every
decision (bind with pods, nodes and GPUs; eviction and by whom), every waiting job's reason and
the reservation every 25 steps, the report every 200 steps and at the end. To run an older
commit: ``git worktree add /tmp/old COMMIT``, then make a folder ``/tmp/old-usher/usher`` of
symlinks to ``/tmp/old/src/usher/*`` plus ``engine``, ``console``, ``themes``, ``fixtures`` and
``sandbox`` from ``/tmp/old``, so that ``usher`` imports from there.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads  # bench/ is not a package

from usher.engine.admission import Decision
from usher.engine.controller import Controller
from usher.engine.policy.registry import POLICIES
from usher.engine.report import build_report, dumps
from usher.engine.scenario import load_scenario, parse_scenario

REPO = Path(__file__).resolve().parents[1]

#: (name, ("file", path) or ("text", YAML))
Source = tuple[str, tuple[str, str]]


def scenarios() -> list[Source]:
    """The corpus: small enough for minutes on two cores, busy enough to preempt and backfill."""
    out: list[Source] = [(p.name, ("file", str(p))) for p in (REPO / "fixtures" / "demo.yaml", REPO / "fixtures" / "examples" / "spec-example.yaml")]
    for load in (0.7, 1.0, 1.3, 1.6):
        for seed in (0, 1):
            out.append((f"b2-{load}-{seed}", ("text", workloads.b2_busy(nodes=48, jobs=1200, days=2, seed=seed, load=load))))
    out.append(("b3", ("text", workloads.b3_scale(nodes=60, jobs=1500))))
    tight = "quota: {gpu: 20000}"
    out.append(("b3-tight", ("text", workloads.b3_scale(nodes=60, jobs=1500).replace(tight, "quota: {gpu: 150}"))))
    out.append(("b3-tight2", ("text", workloads.b3_scale(nodes=40, jobs=1200, seed=2).replace(tight, "quota: {gpu: 200}"))))
    for load in (1.3, 1.8):
        out.append((f"b2big-{load}", ("text", workloads.b2_busy(nodes=96, jobs=2500, days=3, seed=5, load=load))))
    for load in (0.8, 1.2):
        for seed in (0, 3):
            command = ["usher", "generate", "--nodes", "32", "--racks", "8", "--load", str(load), "--seed", str(seed), "--days", "2"]
            out.append((f"gen-{load}-{seed}", ("text", subprocess.run(command, capture_output=True, text=True, check=True).stdout)))
    return out


def trace(job: tuple[str, tuple[str, str], str]) -> tuple[str, str, int]:
    """One replay's (name/policy, hash of its decision trace, steps)."""
    name, (kind, text), policy = job
    scenario = load_scenario(text) if kind == "file" else parse_scenario(text, file=name)
    ctrl = Controller(scenario, policy)
    digest = hashlib.sha256()
    apply = ctrl.backend.apply

    def record(decisions: list[Decision], now: float) -> None:
        for d in decisions:
            where = [(p.pod, p.node_id, tuple(p.gpus), p.share) for p in d.placements]
            digest.update(f"{now}|{d.kind}|{d.job.name}|{where}|{d.reason}|{d.by}\n".encode())
        apply(decisions, now)

    ctrl.backend.apply = record  # type: ignore[method-assign]
    steps = 0
    while ctrl.step():
        steps += 1
        if steps % 25 == 0:
            state = ctrl.state
            for q in state.queues.values():
                for entry in q.pending:
                    j = state.jobs[entry[3]]
                    digest.update(f"{j.name}:{j.pending_reason}:{j.state};".encode())
            digest.update(f"R{state.reservation}\n".encode())
            if steps % 200 == 0:
                digest.update(dumps(build_report(ctrl)).encode())
    digest.update(dumps(build_report(ctrl)).encode())
    return f"{name}/{policy}", digest.hexdigest()[:16], steps


def main(out: Path) -> None:
    jobs = [(name, source, policy) for name, source in scenarios() for policy in POLICIES]
    with Pool(2) as pool:
        lines = [f"{run} {digest} {steps}\n" for run, digest, steps in pool.map(trace, jobs)]
    out.write_text("".join(lines))
    print(f"{len(lines)} replays traced into {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))

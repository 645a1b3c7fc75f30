"""The FGD comparison on the three openb workloads; writes docs/results.md's "FGD comparison".

    nice python bench/fgd.py                 # 10 seeds (42-51) x 7 policies x 3 workloads
    nice python bench/fgd.py --seeds 42-43   # a quick look

Runs ``usher.fgd.runner.run_bench`` for openb_pod_list_default, gpushare40 and multigpu20 on
openb_node_list_gpu_node, writes one SVG plot per workload to docs/ and the tables, the command,
the machine and the date between ``<!-- fgd:begin -->`` and ``<!-- fgd:end -->`` in
docs/results.md. Figures come from this run only.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

from usher.fgd.command import parse_seeds
from usher.fgd.policies import PolicyName
from usher.fgd.report import svg_plot, table, write_section
from usher.fgd.runner import run_bench

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "traces" / "alibaba-gpu-v2023"
WORKLOADS = ("openb_pod_list_default", "openb_pod_list_gpushare40", "openb_pod_list_multigpu20")
RUN_DATE = "2026-11-21"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--traces", type=Path, default=TRACES)
    args = parser.parse_args()
    seeds = parse_seeds(args.seeds)
    policies = list(PolicyName)
    nodes = args.traces / "openb_node_list_gpu_node.csv"
    parts = [
        "## FGD comparison",
        "",
        "The FGD paper's method (ATC'23, its public simulator): pods of an openb pod list arrive one by one,",
        "shuffled with the seed and tuned to 130% of the cluster's GPUs, never leave, and a pod that fits",
        "nowhere stays unplaced; 1,213 GPU nodes, 6,212 GPUs (`openb_node_list_gpu_node.csv`). Allocation is",
        "GPUs allocated over the cluster's GPUs when the arrived demand is 100% and 130% of them; frag is the",
        "paper's fragmented GPUs at 90% arrived (against the workload's typical pods), % of all GPUs. Mean ±",
        "standard deviation over the seeds. Baselines are our implementations of the paper's definitions",
        "(`src/usher/fgd/policies.py`); `usher` is the engine's own placement with fragmentation scoring on",
        "(`engine/policy/placement.py`, `Placer._least_fragmenting`). Data: Alibaba cluster-trace-gpu-v2023.",
        "",
        f"Command: `nice python bench/fgd.py --seeds {args.seeds}` (the same runs as `usher bench fgd --pods",
        f"FILE --nodes openb_node_list_gpu_node.csv --seeds {args.seeds}` per workload). Machine: the project's",
        f"development machine, {os.cpu_count()} cores, Python {platform.python_version()}; date {RUN_DATE}.",
    ]
    started = time.perf_counter()
    for workload in WORKLOADS:
        t0 = time.perf_counter()
        summary = run_bench(nodes, args.traces / f"{workload}.csv", seeds, policies, jobs=args.jobs)
        seconds = time.perf_counter() - t0
        svg = REPO / "docs" / f"fgd-{workload.removeprefix('openb_pod_list_')}.svg"
        svg.write_text(svg_plot(summary, f"{workload}: allocation vs arrived, mean of seeds {args.seeds}"))
        parts += ["", f"### {workload}", "", table(summary, paper=workload == "openb_pod_list_default"), "",
                  f"![allocation ratio against arrived demand]({svg.name})", "",
                  f"{len(policies)} policies x {len(seeds)} seeds in {seconds:.0f} s wall."]
        print(f"{workload}: {seconds:.0f} s", file=sys.stderr, flush=True)
    parts += ["", f"All three workloads: {time.perf_counter() - started:.0f} s wall."]
    write_section(REPO / "docs" / "results.md", "\n".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())

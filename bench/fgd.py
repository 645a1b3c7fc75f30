"""The FGD comparison on the paper's workloads; writes docs/results.md's "FGD comparison".

    nice python bench/fgd.py                 # 10 seeds (42-51) x 7 policies x 17 workloads
    nice python bench/fgd.py --seeds 42-43 --workload gpushare80 --policy fgd usher --no-write

Runs ``usher.fgd.runner.run_bench`` for every workload of ``usher.fgd.variants.WORKLOADS`` (the
three public openb pod lists and the variants built from the default one) on
openb_node_list_gpu_node, writes one SVG plot per public workload to docs/, and the summary of
usher against FGD, the tables, the command, the machine and the date between
``<!-- fgd:begin -->`` and ``<!-- fgd:end -->`` in docs/results.md. Figures come from this run
only.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from usher.fgd.command import parse_seeds
from usher.fgd.policies import PolicyName
from usher.fgd.report import lead_cell, svg_plot, table, write_section
from usher.fgd.runner import BASELINE, LEADER, PolicySummary, paired_lead, run_bench
from usher.fgd.variants import NODE_FILE, TRACE_FOLDER, WORKLOADS, Family, pods_file
from usher.generate import traces_dir

REPO = Path(__file__).resolve().parents[1]
RUN_DATE = "2026-11-25"

DEFINITIONS = [
    "Workloads (`usher bench fgd --workload NAME`, `src/usher/fgd/variants.py`): `default`, `gpushare40` and",
    "`multigpu20` are the public openb pod lists as they are; the others are built from `default` as the",
    "paper describes them, calibrated on the two public variants, with their own fixed seed.",
    "`gpushareP`: shared-GPU pods make P% of the GPU requests (the GPU pods drawn again, as many);",
    "`multigpuP`: multi-GPU pods make P% of the GPU requests (copies of them appended);",
    "`cpuNNN`: non-GPU pods make NNN/10 % of the pods (dropped at random or copies appended);",
    "`gpuspecP`: pods restricted to GPU models make P% of the GPU requests (model sets drawn as in",
    "the authors' gpuspec33 list).",
]


def summary_row(name: str, summary: dict[str, PolicySummary]) -> str:
    lead = paired_lead(summary)
    if lead is None:
        return ""
    a, b = summary[LEADER], summary[BASELINE]
    verdict = "yes" if lead["alloc100"].clear and lead["alloc130"].clear else (
        "paired only" if lead["alloc100"].beyond_paired_sd and lead["alloc130"].beyond_paired_sd else "no")
    return (f"| {name} | {b.alloc100:.2f} | {b.alloc130:.2f} | {a.alloc100:.2f} | {a.alloc130:.2f} "
            f"| {lead_cell(lead['alloc100'])} | {lead_cell(lead['alloc130'])} | {lead_cell(lead['frag90'])} "
            f"| {verdict} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--traces", type=Path, default=None,
                        help="folder with alibaba-gpu-v2023/ (default $USHER_TRACES, else ../shared/traces)")
    parser.add_argument("--workload", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS), metavar="NAME")
    parser.add_argument("--policy", nargs="+", choices=[str(p) for p in PolicyName],
                        default=[str(p) for p in PolicyName], metavar="P")
    parser.add_argument("--no-write", action="store_true", help="print the summary; leave docs/ alone")
    args = parser.parse_args()
    seeds = parse_seeds(args.seeds)
    policies = [PolicyName(p) for p in args.policy]
    openb = traces_dir(args.traces) / TRACE_FOLDER
    nodes = openb / NODE_FILE
    summary_rows: list[str] = []
    sections: list[str] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="usher-fgd-") as scratch:
        for name in args.workload:
            t0 = time.perf_counter()
            pods = pods_file(name, openb, Path(scratch))
            summary = run_bench(nodes, pods, seeds, policies, jobs=args.jobs)
            seconds = time.perf_counter() - t0
            row = summary_row(name, summary)
            if row:
                summary_rows.append(row)
            print(f"{name}: {seconds:.0f} s {row}", file=sys.stderr, flush=True)
            sections += ["", f"### {name}", "", table(summary, paper=name == "default"), ""]
            if WORKLOADS[name].family == Family.PUBLIC and not args.no_write:
                svg = REPO / "docs" / f"fgd-{name}.svg"
                svg.write_text(svg_plot(summary, f"{pods.stem}: allocation vs arrived, mean of seeds {args.seeds}"))
                sections += [f"![allocation ratio against arrived demand]({svg.name})", ""]
            sections += [f"{len(policies)} policies x {len(seeds)} seeds in {seconds:.0f} s wall."]
    total = time.perf_counter() - started
    summary_table = [
        f"| workload | {BASELINE} @100% | {BASELINE} @130% | {LEADER} @100% | {LEADER} @130% "
        f"| lead @100% | lead @130% | lead frag @90% | beyond the spread |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
        *summary_rows,
    ]
    if args.no_write:
        print("\n".join(summary_table))
        return 0
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
        *DEFINITIONS,
        "",
        f"Command: `nice python bench/fgd.py --seeds {args.seeds}` (the same runs as `usher bench fgd --workload",
        f"NAME --seeds {args.seeds}` per workload). Machine: the project's development machine, {os.cpu_count()}",
        f"cores, Python {platform.python_version()}; date {RUN_DATE}.",
        "",
        f"### {LEADER} against {BASELINE}, every workload",
        "",
        "Allocation (%) at 100% and 130% arrived, means over the seeds. Every policy sees the same arrivals",
        f"for a seed, so the runs are paired: a lead is the mean ± standard deviation over seeds of {LEADER}'s",
        f"figure minus {BASELINE}'s (for frag, {BASELINE}'s minus {LEADER}'s: positive is better). *Beyond the spread*:",
        "`yes` when both allocation leads exceed the standard deviation of the paired difference and each",
        "policy's own standard deviation; `paired only` when they exceed the paired one only; else `no`.",
        "",
        *summary_table,
        *sections,
        "",
        f"All {len(args.workload)} workloads: {total:.0f} s wall.",
    ]
    write_section(REPO / "docs" / "results.md", "\n".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``usher bench fgd``: the command line of the FGD comparison.

    usher bench fgd --pods FILE --nodes FILE --seeds 42-51 --policy P... [--json] [--jobs N]
    usher bench fgd --workload NAME [--traces DIR] ...

``--workload`` names one of the paper's workloads (``variants.WORKLOADS``): a public openb pod
list read as it is, or a variant built from the default list; the files come from
``DIR/alibaba-gpu-v2023`` (``--traces``, else ``$USHER_TRACES``, else ``../shared/traces``), the
node list too unless ``--nodes`` is given. Prints a markdown table (mean ± standard deviation
over seeds, and usher's paired lead over fgd when both run) or, with ``--json``, one JSON object
``{"policies": {NAME: {"alloc100", "alloc130", "frag90", "spread", "seeds": {...}}}, "lead":
{...}}``, percentages of the cluster's GPUs. ``--svg FILE`` also writes the allocation plot.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from .policies import PolicyName
from .variants import NODE_FILE, TRACE_FOLDER, WORKLOADS, VariantError


class SeedsError(ValueError):
    """A --seeds value that is not a list or range of whole numbers."""


def parse_seeds(text: str) -> list[int]:
    """``42-51`` (both ends included), ``42,43,50`` or a mix such as ``1-3,7``."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part[1:]:
                low, high = part.split("-", 1) if not part.startswith("-") else (part, "")
                first, last = int(low), int(high)
                if last < first:
                    raise SeedsError(f"--seeds: range {part!r} ends before it starts")
                seeds.extend(range(first, last + 1))
            else:
                seeds.append(int(part))
        except ValueError as exc:
            if isinstance(exc, SeedsError):
                raise
            raise SeedsError(f"--seeds: {part!r} is not a whole number or a range like 42-51") from None
    return seeds


def add_parser(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="scheduling-quality benchmarks (fgd: the FGD paper's comparison)")
    which = bench.add_subparsers(dest="bench", required=True)
    fgd = which.add_parser("fgd", help="pods arrive one by one up to 130%% of the GPUs; allocation and fragmentation")
    source = fgd.add_mutually_exclusive_group(required=True)
    source.add_argument("--pods", type=Path, help="openb pod list CSV (e.g. openb_pod_list_default.csv)")
    source.add_argument("--workload", choices=list(WORKLOADS), metavar="NAME",
                        help=f"one of the paper's workloads, built from the traces: {', '.join(WORKLOADS)}")
    fgd.add_argument("--nodes", type=Path, default=None,
                     help=f"openb node list CSV (with --workload: {NODE_FILE} of the traces)")
    fgd.add_argument("--traces", type=Path, default=None,
                     help=f"with --workload: folder with {TRACE_FOLDER}/ (default $USHER_TRACES, else ../shared/traces)")
    fgd.add_argument("--seeds", default="42-51", help="seeds, e.g. 42-51 or 42,43 (default 42-51)")
    fgd.add_argument("--policy", nargs="+", choices=[str(p) for p in PolicyName], default=[str(p) for p in PolicyName],
                     metavar="P", help=f"policies to run (default all: {', '.join(PolicyName)})")
    fgd.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    fgd.add_argument("--svg", type=Path, default=None, help="also write the allocation plot here")
    fgd.add_argument("--jobs", type=int, default=None, help="worker processes (default: one per core)")
    fgd.add_argument("--debug", action="store_true")


class CommandError(ValueError):
    """Bad input to ``usher bench fgd`` that argparse cannot see (a missing --nodes, a trace file)."""


def run(args: argparse.Namespace) -> int:
    seeds = parse_seeds(args.seeds)
    if args.workload is None:
        if args.nodes is None:
            raise CommandError("--nodes is required with --pods")
        return _run(args, seeds, args.nodes, args.pods)
    from usher.generate import traces_dir

    from .variants import pods_file

    openb = traces_dir(args.traces) / TRACE_FOLDER
    nodes = args.nodes if args.nodes is not None else openb / NODE_FILE
    with tempfile.TemporaryDirectory(prefix="usher-fgd-") as scratch:
        try:
            pods = pods_file(args.workload, openb, Path(scratch))
        except VariantError as exc:
            raise CommandError(str(exc)) from None
        return _run(args, seeds, nodes, pods)


def _run(args: argparse.Namespace, seeds: list[int], nodes: Path, pods: Path) -> int:
    from . import report
    from .runner import as_json, run_bench

    policies = [PolicyName(p) for p in dict.fromkeys(args.policy)]
    summary = run_bench(nodes, pods, seeds, policies, jobs=args.jobs)
    if args.svg is not None:
        args.svg.write_text(report.svg_plot(summary, f"{pods.name}, seeds {args.seeds}"))
    if args.json:
        json.dump(as_json(summary), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(report.table(summary, paper=pods.name == "openb_pod_list_default.csv"))
        lead = report.lead_line(summary)
        if lead:
            print()
            print(lead)
    return 0

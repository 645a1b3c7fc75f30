"""Compare a benchmark at a base commit with the working tree, back to back in one run.

    python bench/compare.py BASE [BENCH...] [--repeats 3] [--decisions quick|full|none] [--head REV]

    python bench/compare.py HEAD~1 b2-busy --repeats 3
    python bench/compare.py 7ae5caa b1 kube:binds --decisions none

Absolute times on a shared machine move 2-3x between days, so only a ratio measured in one run
means anything. This script checks BASE out as a git worktree in a temporary folder under /tmp,
and runs each named benchmark once per side per repeat, alternating which side goes first, each
run a fresh process. Both sides run *this* tree's benchmark script and workloads (the same
scenario text), and import ``usher`` from a folder of symlinks laid out as the side's
``pyproject.toml`` maps its packages (``[tool.setuptools] package-dir``), put first on
``PYTHONPATH``: the editable install points at /work/main whatever the checkout, so without that
the base run would measure the head's code. Each run prints where its ``usher`` and
``usher.engine`` came from, and the script stops if that is not the side's tree.

Benchmarks are ``bench/run.py``'s names (``b1``, ``b2-busy``, ``contention``, ...) and
``kube:binds`` / ``kube:coldstart`` (``bench/kube.py``). For each it reports the median CPU
seconds (user + system of the run's process and the children it waited for) and wall seconds of
a whole run per side, the head/base ratio of the medians, and the same for every table row the
benchmark printed (the row's first number). Then, unless ``--decisions none``, both sides replay
``bench/decisions.py``'s corpus (``quick``: every scenario under the ``usher`` policy; ``full``:
under every policy, as ``bench/decisions.py`` does) with that script's own ``trace``, and the
hashes are printed side by side, so a speed-up that changes decisions shows.

The workloads read the Philly run times from ``../shared/traces`` next to the tree; the temporary
folder gets a ``shared`` link to this tree's, and ``USHER_TRACES`` is set to it when unset, so
the base side finds the same traces as the head side.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent

#: bench/kube.py's benchmarks, as this script names them
KUBE_BENCHES = ("kube:binds", "kube:coldstart")

#: what the child process runs: prove where usher comes from, then run the benchmark script
CHILD = """\
import runpy, sys
from pathlib import Path
import usher, usher.engine
print("# usher " + str(Path(usher.__file__).resolve().parent) + " engine " + str(Path(usher.engine.__file__).resolve().parent), flush=True)
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
"""

#: the decision traces' child: bench/decisions.py's trace over a corpus written as JSON
TRACE_CHILD = """\
import json, sys
from multiprocessing import Pool
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import usher.engine
import decisions
print("# usher.engine " + str(Path(usher.engine.__file__).resolve().parent), flush=True)
jobs = [(n, tuple(s), p) for n, s, p in json.loads(Path(sys.argv[2]).read_text())]
with Pool(2) as pool:
    for run, digest, steps in pool.map(decisions.trace, jobs):
        print(run, digest, steps, flush=True)
"""

ROW = re.compile(r"^\|\s*(?P<label>.+?)\s*\|\s*(?P<value>.+?)\s*\|\s*$")
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


class Decisions(StrEnum):
    QUICK = "quick"
    FULL = "full"
    NONE = "none"


class CompareError(Exception):
    """A user's mistake (a bad commit, an unknown benchmark) or a run that failed."""


def known_benches() -> list[str]:
    """``bench/run.py``'s benchmark names (read from its ``BENCHES``, without importing it) and
    ``bench/kube.py``'s."""
    tree = ast.parse((BENCH / "run.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "BENCHES" for t in node.targets):
            assert isinstance(node.value, ast.Dict)
            return [k.value for k in node.value.keys if isinstance(k, ast.Constant)] + list(KUBE_BENCHES)
    raise CompareError("bench/run.py has no BENCHES table")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/compare.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("base", metavar="BASE", help="the commit to compare with (anything git rev-parse takes)")
    parser.add_argument("benches", metavar="BENCH", nargs="*", default=["b1"], help="benchmarks (default: b1)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per side, alternating which goes first (default 3)")
    parser.add_argument("--decisions", type=Decisions, choices=list(Decisions), default=Decisions.QUICK,
                        help="decision traces to compare: quick (the usher policy), full (every policy), none")
    parser.add_argument("--head", metavar="REV", help="compare this commit instead of the working tree")
    parser.add_argument("--keep", action="store_true", help="keep the temporary worktrees (their folder is printed)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats: {args.repeats} is not a positive number of runs")
    known = known_benches()
    unknown = [b for b in args.benches if b not in known]
    if unknown:
        parser.error(f"BENCH: unknown benchmark {', '.join(map(repr, unknown))} (known: {', '.join(known)})")
    return args


def resolve(rev: str, what: str) -> str:
    """The full commit id of ``rev`` in this repository, or an error naming the argument."""
    done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                          capture_output=True, text=True)
    if done.returncode != 0 or not done.stdout.strip():
        raise CompareError(f"{what}: {rev!r} is not a commit of {REPO}")
    return done.stdout.strip()


def order(repeats: int) -> list[tuple[str, int]]:
    """The runs in the order they happen: base first on even repeats, head first on odd ones, so
    that neither side always runs on a machine the other has just warmed (or loaded)."""
    runs: list[tuple[str, int]] = []
    for r in range(repeats):
        runs += [(side, r) for side in (("base", "head") if r % 2 == 0 else ("head", "base"))]
    return runs


def first_number(value: str) -> tuple[float, str] | None:
    """The first number in a table cell and the words after it up to a comma or bracket
    (``"1,234.5 s wall, ..."`` -> (1234.5, "s wall")), None if it has none."""
    m = NUMBER.search(value)
    if not m:
        return None
    unit = re.split(r"[,;(]", value[m.end():], maxsplit=1)[0].strip()
    return float(m.group().replace(",", "")), unit


def table_rows(output: str) -> dict[str, float]:
    """The ``| label | value |`` rows a benchmark printed, each by its label and the unit of its
    value's first number (``"B2 replay [s wall]"``), with that number."""
    rows: dict[str, float] = {}
    for line in output.splitlines():
        m = ROW.match(line)
        if not m or set(m["value"]) <= set("-|: ") or m["label"] == "benchmark":
            continue
        found = first_number(m["value"])
        if found is not None:
            number, unit = found
            rows[f"{m['label']} [{unit}]" if unit else m["label"]] = number
    return rows


def ratio(head: float, base: float) -> float | None:
    """head/base, None where base is zero (no ratio to give)."""
    return head / base if base else None


def fmt_ratio(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.2f}"


@dataclass
class Side:
    """One side of the comparison: a tree, the package folder that makes ``usher`` import from it."""

    name: str
    tree: Path
    commit: str
    pkg: Path
    runs: list[dict[str, float]] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "USHER_BENCH_TREE")}
        env["PYTHONPATH"] = str(self.pkg)
        env["PYTHONUNBUFFERED"] = "1"
        return env


def link_package(tree: Path, pkg: Path) -> None:
    """Lay out ``pkg/usher`` as ``tree``'s pyproject maps its packages, out of symlinks."""
    config = tomllib.loads((tree / "pyproject.toml").read_text())
    dirs: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    root = pkg / "usher"
    root.mkdir(parents=True)
    for entry in (tree / dirs["usher"]).iterdir():
        if entry.name != "__pycache__":
            (root / entry.name).symlink_to(entry)
    for name, folder in sorted(dirs.items()):
        if name == "usher":
            continue
        target = root.joinpath(*name.split(".")[1:])
        if target.is_symlink():
            target.unlink()
        target.symlink_to(tree / folder)


def compile_tree(tree: Path) -> None:
    """Byte-compile a side's packages first: a fresh worktree's first run would otherwise pay for
    compiling every module, and the base side would look slower than it is."""
    config = tomllib.loads((tree / "pyproject.toml").read_text())
    folders = {str(tree / d) for d in config["tool"]["setuptools"]["package-dir"].values()}
    subprocess.run([sys.executable, "-m", "compileall", "-q", *sorted(folders)], check=False, stdout=subprocess.DEVNULL)


def make_side(name: str, rev: str | None, tmp: Path) -> Side:
    """A side at ``rev`` (a worktree under ``tmp``), or the working tree where ``rev`` is None."""
    pkg = tmp / f"pkg-{name}"
    if rev is None:
        commit = resolve("HEAD", "HEAD")
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        link_package(REPO, pkg)
        compile_tree(REPO)
        return Side(name, REPO, commit + (" + uncommitted changes" if dirty else ""), pkg)
    tree = tmp / name
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(tree), rev], check=True)
    link_package(tree, pkg)
    compile_tree(tree)
    return Side(name, tree, rev, pkg)


def command(bench: str) -> list[str]:
    if bench in KUBE_BENCHES:
        return [sys.executable, "-c", CHILD, str(BENCH / "kube.py"), bench.split(":", 1)[1]]
    return [sys.executable, "-c", CHILD, str(BENCH / "run.py"), bench]


def run_once(side: Side, argv: list[str], log: Path) -> tuple[str, float, float]:
    """Run ``argv`` in a process of its own as ``side``: its output, CPU seconds, wall seconds."""
    with log.open("w") as out:
        t0 = time.perf_counter()
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=side.env(), cwd=REPO)
        try:
            _, status, usage = os.wait4(process.pid, 0)
        except BaseException:  # interrupted: leave no benchmark running behind
            process.kill()
            process.wait()
            raise
        wall = time.perf_counter() - t0
        process.returncode = os.waitstatus_to_exitcode(status)
    output = log.read_text()
    if process.returncode != 0:
        raise CompareError(f"{side.name} run of {argv[3:]} exited {process.returncode}:\n{output[-3000:]}")
    return output, usage.ru_utime + usage.ru_stime, wall


def check_origin(side: Side, output: str) -> str:
    """The child's ``# usher ...`` line; an error if its code did not come from the side's tree."""
    line = next((l for l in output.splitlines() if l.startswith("# usher")), "")
    paths = [Path(p) for p in line.split()[2::2]]
    if not paths or not all(p.is_relative_to(side.tree.resolve()) for p in paths):
        raise CompareError(f"the {side.name} run imported usher from elsewhere than {side.tree}: {line or 'no origin line'}")
    return line


def summary(sides: list[Side]) -> list[str]:
    """The medians per side and head/base ratios, for the whole runs and each printed row."""
    base, head = sides
    out = ["| measure | base median | head median | head/base |", "|---|---|---|---|"]
    for key in ("cpu", "wall"):
        b = statistics.median(r[key] for r in base.runs)
        h = statistics.median(r[key] for r in head.runs)
        out.append(f"| whole run, {key} s | {b:.2f} | {h:.2f} | {fmt_ratio(ratio(h, b))} |")
    labels = [label for label in table_rows(base.outputs[0]) if all(label in table_rows(o) for o in base.outputs + head.outputs)]
    for label in labels:
        b = statistics.median(table_rows(o)[label] for o in base.outputs)
        h = statistics.median(table_rows(o)[label] for o in head.outputs)
        out.append(f"| {label} | {b:g} | {h:g} | {fmt_ratio(ratio(h, b))} |")
    return out


def corpus(which: Decisions, path: Path) -> int:
    """Write bench/decisions.py's corpus (built once, here, so both sides replay the same text)."""
    sys.path.insert(0, str(BENCH))
    import decisions  # noqa: PLC0415 (bench/ is not a package; this imports usher, the head's)

    from usher.engine.policy.registry import POLICIES  # noqa: PLC0415

    policies = list(POLICIES) if which == Decisions.FULL else ["usher"]
    jobs = [(name, list(source), policy) for name, source in decisions.scenarios() for policy in policies]
    path.write_text(json.dumps(jobs))
    return len(jobs)


def compare_decisions(sides: list[Side], which: Decisions, tmp: Path) -> None:
    path = tmp / "corpus.json"
    count = corpus(which, path)
    print(f"\n## decision traces: {count} replays of bench/decisions.py's corpus ({which})\n", flush=True)
    hashes: dict[str, dict[str, str]] = {}
    for side in sides:
        output, cpu, wall = run_once(side, [sys.executable, "-c", TRACE_CHILD, str(BENCH), str(path)], tmp / f"trace-{side.name}.log")
        line = next(l for l in output.splitlines() if l.startswith("# usher.engine"))
        if not Path(line.split()[-1]).is_relative_to(side.tree.resolve()):
            raise CompareError(f"the {side.name} traces imported usher from elsewhere: {line}")
        hashes[side.name] = {run: f"{digest} {steps}" for run, digest, steps in (l.split() for l in output.splitlines() if not l.startswith("#"))}
        print(f"{side.name}: {line} ({cpu:.0f} s CPU)", flush=True)
    base, head = hashes["base"], hashes["head"]
    differ = [run for run in base if base[run] != head.get(run)]
    print("\n| replay | base (hash steps) | head (hash steps) |\n|---|---|---|")
    for run in base:
        print(f"| {run} | {base[run]} | {head.get(run, '-')}{'' if run not in differ else ' DIFFERS'} |")
    print(f"\n{len(base) - len(differ)} of {len(base)} identical" + (f"; differ: {', '.join(differ)}" if differ else ""))


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    base_commit = resolve(args.base, "BASE")
    head_commit = resolve(args.head, "--head") if args.head else None
    tmp = Path(tempfile.mkdtemp(prefix="usher-compare-", dir="/tmp"))
    shared = REPO.parent / "shared"
    if shared.exists():
        (tmp / "shared").symlink_to(shared)  # the worktrees' ../shared/traces
        os.environ.setdefault("USHER_TRACES", str(shared / "traces"))
    sides: list[Side] = []
    try:
        sides.append(make_side("base", base_commit, tmp))
        sides.append(make_side("head", head_commit, tmp))
        by_name = {s.name: s for s in sides}
        for s in sides:
            print(f"{s.name}: {s.commit} ({s.tree})")
        print(f"repeats: {args.repeats}, alternating; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start", flush=True)
        for bench in args.benches:
            for s in sides:
                s.runs, s.outputs = [], []
            print(f"\n## {bench}\n", flush=True)
            for name, r in order(args.repeats):
                side = by_name[name]
                output, cpu, wall = run_once(side, command(bench), tmp / f"{bench.replace(':', '-')}-{name}-{r}.log")
                origin = check_origin(side, output)
                side.runs.append({"cpu": cpu, "wall": wall})
                side.outputs.append(output)
                print(f"run {r} {name}: {cpu:.1f} s CPU, {wall:.1f} s wall ({origin})", flush=True)
            print()
            print("\n".join(summary(sides)), flush=True)
        if args.decisions != Decisions.NONE:
            compare_decisions(sides, args.decisions, tmp)
        print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            for s in sides:
                if s.tree != REPO:
                    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(s.tree)], check=False)
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except CompareError as e:
        sys.exit(f"bench/compare.py: {e}")

"""The ``usher`` command line: console, headless controller, demo, replay, check, sandbox and agent.

Exit codes follow ``spec/scenario.md``: 0 success; 2 bad input, with every problem listed by
file, YAML path and line; 1 anything else, one line of cause (a traceback only with ``--debug``);
3 for ``usher agent`` on a machine without an NVIDIA driver or GPU.
"""

from __future__ import annotations

import argparse
import gc
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__
from .generate import GenerateSource

if TYPE_CHECKING:
    from usher.engine.backends.telemetry.poller import TelemetrySource

EXIT_OK, EXIT_ERROR, EXIT_BAD_INPUT, EXIT_NO_GPU = 0, 1, 2, 3


class UsageError(Exception):
    """Bad input from the command line itself (exit 2)."""


def _duration(text: str) -> float:
    from usher.engine.scenario.quantity import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _telemetry_source(text: str) -> TelemetrySource:
    from usher.engine.backends.telemetry.poller import parse_source

    try:
        return parse_source(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _interval(text: str) -> float:
    seconds = _duration(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: an interval must be longer than 0 seconds")
    return seconds


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--readonly", action="store_true", help="no action that changes the cluster")
    p.add_argument("--theme", default="dark", help="console theme: dark, light, colorblind, or one of yours")
    p.add_argument("--keymap", type=Path, default=None, help="console key remapping file (default ~/.config/usher/keys.yaml)")
    p.add_argument("--seed", type=int, default=0, help="the only source of randomness (default 0)")
    p.add_argument("--until", type=_duration, default=None, help="stop the replay at this simulated time (e.g. 6h)")
    p.add_argument("--policy", default="usher", help="placement / ordering policy (default usher)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="usher", description="GPU batch scheduler and operator console for Kubernetes.")
    parser.add_argument("--version", action="version", version=f"usher {__version__}")
    parser.add_argument("--no-ui", action="store_true", help="run headless (controller / replay without a terminal)")
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    parser.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    parser.add_argument("--metrics-port", type=int, default=8080, help="--no-ui: port for /metrics, /healthz, /readyz (default 8080)")
    parser.add_argument("--metrics-host", default="0.0.0.0", help="--no-ui: address to serve them on (default all)")
    parser.add_argument("--telemetry", action="append", default=[], type=_telemetry_source, metavar="URL",
                        help="a GPU telemetry source, repeatable: http://HOST:9400/metrics (a DCGM exporter or usher agent), "
                             "dns+http://NAME:PORT/metrics (every address of NAME), prometheus+http://HOST:9090 (a Prometheus server)")
    parser.add_argument("--telemetry-interval", type=_interval, default=15.0, metavar="DURATION",
                        help="time between two reads of each telemetry source (default 15s)")
    _common(parser)
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser("demo", help="the console on the bundled demo scenario")
    _common(demo)
    demo.add_argument("--speed", type=float, default=600.0, help="simulated seconds per wall second (default 600)")
    demo.add_argument("--no-ui", action="store_true")
    demo.add_argument("--report", type=Path, default=None)
    replay = sub.add_parser("replay", help="replay a scenario file")
    replay.add_argument("file", type=Path)
    _common(replay)
    replay.add_argument("--speed", type=float, default=60.0, help="simulated seconds per wall second (default 60)")
    replay.add_argument("--no-ui", action="store_true", help="replay as fast as possible, no console")
    replay.add_argument("--report", type=Path, default=None, help="write the JSON report here")
    replay.add_argument("--eta-accuracy", action="store_true",
                        help="--no-ui: sample the estimated starts every 5 simulated minutes and score them in the "
                             "report's summary.etaAccuracy (slower: one start-time plan per sample)")
    sandbox = sub.add_parser("sandbox", help="serve a scenario as a fake Kubernetes API on 127.0.0.1")
    sandbox.add_argument("file", type=Path)
    sandbox.add_argument("--port", type=int, default=6443, help="port on 127.0.0.1 (default 6443; 0 picks one)")
    sandbox.add_argument("--kubeconfig-out", type=Path, default=Path("usher-sandbox.kubeconfig"),
                         help="where to write a kubeconfig for it (default ./usher-sandbox.kubeconfig)")
    sandbox.add_argument("--speed", type=float, default=60.0, help="simulated seconds per wall second (default 60)")
    sandbox.add_argument("--rbac", action="store_true",
                         help="authenticate and authorize as a real cluster: ServiceAccount tokens, Roles and bindings "
                              "(the kubeconfig written is the admin's)")
    sandbox.add_argument("--workload-api", choices=("1.35", "1.36", "1.37"), default="1.35",
                         help="which Kubernetes release's Workload API (scheduling.k8s.io) to serve (default 1.35)")
    sandbox.add_argument("--feature-gates", default="", metavar="GATES",
                         help="alpha gates to turn on, comma-separated: WorkloadWithJob (with --workload-api 1.37)")
    sandbox.add_argument("--debug", action="store_true")
    check = sub.add_parser("check", help="validate a scenario file")
    check.add_argument("file", type=Path)
    check.add_argument("--debug", action="store_true")
    gen = sub.add_parser("generate", help="write a synthetic scenario: an LLM cluster (gangs with topology needs), "
                                          "or the openb trace's pods at a chosen load")
    gen.add_argument("--from", dest="source", choices=[s.value for s in GenerateSource], default=GenerateSource.LLM.value,
                     help="llm: synthetic gangs on H100 nodes (default); openb: the Alibaba openb pods on its 1,213 GPU nodes")
    gen.add_argument("--nodes", type=int, default=None, help="llm: nodes of 8 GPUs (default 64)")
    gen.add_argument("--racks", type=int, default=None, help="llm: racks, four to a block (default 8)")
    gen.add_argument("--queues", type=int, default=None, help="llm: queues in one cohort (default 4)")
    gen.add_argument("--load", type=float, default=None,
                     help="offered GPU work over capacity (default 0.8 for llm, 0.9 for openb)")
    gen.add_argument("--seed", type=int, default=0, help="the only source of randomness (default 0)")
    gen.add_argument("--days", type=float, default=None, help="submission window in days (default 7 for llm, 0.5 for openb)")
    gen.add_argument("--max-runtime", type=_duration, default=None, help="longest run time (default 1d for llm, 2h for openb)")
    gen.add_argument("--traces", type=Path, default=None,
                     help="folder with philly-derived/ (llm) or alibaba-gpu-v2023/ (openb) "
                          "(default $USHER_TRACES, else ../shared/traces)")
    gen.add_argument("-o", "--output", type=Path, default=None, help="write here (default stdout)")
    gen.add_argument("--debug", action="store_true")
    from usher.fgd.command import add_parser as add_bench_parser

    add_bench_parser(sub)
    agent = sub.add_parser("agent", help="the node agent: this node's GPUs through NVML, /metrics, NVLink and health on the Node")
    agent.add_argument("--once", action="store_true", help="read the GPUs once, print what they say and exit (3: no driver or GPU)")
    agent.add_argument("--json", action="store_true", help="with --once: print JSON")
    agent.add_argument("--node", default=None, help="the Node to annotate (default $NODE_NAME)")
    agent.add_argument("--interval", type=_interval, default=10.0, metavar="DURATION", help="time between readings (default 10s)")
    agent.add_argument("--metrics-port", type=int, default=9401, help="port for /metrics, /healthz, /readyz (default 9401)")
    agent.add_argument("--metrics-host", default="0.0.0.0", help="address to serve them on (default all)")
    agent.add_argument("--no-publish", action="store_true", help="serve /metrics only; do not annotate the Node")
    # SUPPRESS: given before `agent` (usher --kubeconfig K agent), the value is kept, not reset
    agent.add_argument("--kubeconfig", default=argparse.SUPPRESS, help="kubeconfig file (default: in-cluster, $KUBECONFIG, ~/.kube/config)")
    agent.add_argument("--context", default=argparse.SUPPRESS, help="kubeconfig context (default: the current one)")
    agent.add_argument("--debug", action="store_true")
    return parser


def demo_path() -> Path:
    return Path(str(resources.files("usher.fixtures").joinpath("demo.yaml")))


def _load(path: Path, *, warn: bool = True):
    """The scenario at ``path``; its warnings go to stderr unless ``warn`` is False (the bundled
    demo, whose one warning, a job asking for a GPU model the cluster lacks, is a wait the demo
    shows on purpose: its reason is on screen, and the user did not write the file)."""
    from usher.engine.scenario import load_scenario

    scenario = load_scenario(path)
    if warn:
        for warning in scenario.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    return scenario


def cmd_check(args: argparse.Namespace) -> int:
    scenario = _load(args.file)
    nodes = scenario.all_nodes()
    jobs = scenario.all_jobs()
    gpus = sum(n.gpus for n in nodes)
    from usher.engine.fmt import plural

    print(f"{args.file}: ok: {scenario.name}: {plural(len(nodes), 'node')}, {plural(gpus, 'GPU')}, "
          f"{plural(len(scenario.queues), 'queue')}, {plural(len(jobs), 'job')}, {plural(len(scenario.events), 'event')}")
    return EXIT_OK


def _controller(args: argparse.Namespace, path: Path, *, warn: bool = True):
    from usher.engine.controller import Controller
    from usher.engine.policy.registry import get_policy

    try:
        policy = get_policy(args.policy)
    except KeyError as exc:
        raise UsageError(str(exc.args[0])) from None
    scenario = _load(path, warn=warn)
    ctrl = Controller(scenario, policy, until=args.until, seed=args.seed)
    # The scenario and the engine state live as long as this process: the cyclic collector
    # need not walk them again on every collection (half of a 100,000-job cycle otherwise).
    gc.collect()
    gc.freeze()
    return ctrl


def cmd_replay(args: argparse.Namespace, path: Path, *, warn: bool = True) -> int:
    ctrl = _controller(args, path, warn=warn)
    eta_accuracy = getattr(args, "eta_accuracy", False)  # replay's option; demo has none
    if eta_accuracy and not args.no_ui:
        raise UsageError("--eta-accuracy scores a whole replay for its report: use it with --no-ui")
    if args.no_ui:
        from usher.engine.report import build_report, dumps

        if eta_accuracy:
            ctrl.record_eta_accuracy()
        ctrl.run_to_end()
        text = dumps(build_report(ctrl))
        if args.report is not None:
            args.report.write_text(text)
            from usher.engine.fmt import duration, plural

            print(f"{path}: replayed to {duration(ctrl.now)} in {plural(ctrl.metrics.cycles, 'cycle')}; report: {args.report}",
                  file=sys.stderr)
        else:
            sys.stdout.write(text)
        return EXIT_OK
    from usher.console.app import run_console

    return run_console(ctrl, speed=args.speed, readonly=args.readonly, theme=args.theme, keymap=args.keymap)


def cmd_cluster(args: argparse.Namespace) -> int:
    import asyncio

    from usher.cluster import ServeError, run_console_on_cluster, run_headless
    from usher.engine.policy.registry import get_policy

    try:
        policy = get_policy(args.policy)
    except KeyError as exc:
        raise UsageError(str(exc.args[0])) from None
    if not policy.gang:
        raise UsageError(f"--policy {policy.name} binds pods one by one and exists to be compared in replays; "
                         "on a cluster that is what the default kube-scheduler already does")
    if args.no_ui:
        try:
            return asyncio.run(run_headless(args))
        except ServeError as exc:
            if args.debug:
                raise
            print(f"usher: {exc}", file=sys.stderr)
            return EXIT_ERROR
    return run_console_on_cluster(args)


def cmd_sandbox(args: argparse.Namespace) -> int:
    import asyncio

    from usher.sandbox.serve import serve

    scenario = _load(args.file)
    from usher.sandbox.workload_api_beta import Gate, Release

    gates = [g.strip() for g in args.feature_gates.split(",") if g.strip()]
    unknown = [g for g in gates if g not in {x.value for x in Gate}]
    if unknown:
        raise UsageError(f"--feature-gates: unknown gate {unknown[0]!r}; known: {', '.join(g.value for g in Gate)}")
    if gates and args.workload_api != Release.V1_37:
        raise UsageError(f"--feature-gates {','.join(gates)}: needs --workload-api {Release.V1_37}")
    return asyncio.run(serve(scenario, args.port, args.kubeconfig_out, args.speed, rbac=args.rbac,
                             workload_api=Release(args.workload_api), gates=frozenset(Gate(g) for g in gates)))


def cmd_generate(args: argparse.Namespace) -> int:
    from usher.engine.fmt import plural
    from usher.generate import GenerateError, GenerateParams, generate, read_runtimes, traces_dir
    from usher.generate_openb import OpenbError, OpenbParams, generate_openb, read_openb

    source = GenerateSource(args.source)
    given = {flag: value for flag, value in (("--nodes", args.nodes), ("--racks", args.racks), ("--queues", args.queues))
             if value is not None}
    try:
        if source is GenerateSource.OPENB:
            if given:
                raise UsageError(f"{', '.join(given)}: for --from llm only; --from openb uses the trace's own GPU nodes")
            openb = OpenbParams(**_set(load=args.load, seed=args.seed, days=args.days, max_runtime=args.max_runtime))
            openb.check()
            trace = read_openb(traces_dir(args.traces))
            text = generate_openb(openb, trace)
            nodes, queues = len(trace.nodes), 1
        else:
            params = GenerateParams(**_set(nodes=args.nodes, racks=args.racks, queues=args.queues, load=args.load,
                                           seed=args.seed, days=args.days, max_runtime=args.max_runtime))
            params.check()
            text = generate(params, read_runtimes(traces_dir(args.traces)))
            nodes, queues = params.nodes, params.queues
    except (GenerateError, OpenbError) as exc:
        raise UsageError(str(exc)) from None
    jobs = text.count("\n  - {name: ", text.index("\njobs:"))
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
        print(f"{args.output}: {plural(nodes, 'node')}, {plural(queues, 'queue')}, {plural(jobs, 'job')}", file=sys.stderr)
    return EXIT_OK


def _set(**values: object) -> dict[str, object]:
    """The options given (not None): the parameters' own defaults stand for the rest."""
    return {name: value for name, value in values.items() if value is not None}


def cmd_agent(args: argparse.Namespace) -> int:
    import asyncio

    from usher.agent.main import AgentUsageError, run_agent, run_once
    from usher.engine.backends.nvml.reader import NoGpuError

    if args.json and not args.once:
        raise UsageError("agent: --json goes with --once (running, the agent serves /metrics)")
    try:
        return run_once(args) if args.once else asyncio.run(run_agent(args))
    except NoGpuError as exc:
        print(f"usher agent: {exc}", file=sys.stderr)
        return EXIT_NO_GPU
    except AgentUsageError as exc:
        raise UsageError(f"agent: {exc}") from None


def cmd_bench(args: argparse.Namespace) -> int:
    from usher.fgd.command import CommandError, SeedsError, run

    try:
        return run(args)
    except (SeedsError, CommandError) as exc:
        raise UsageError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = getattr(args, "debug", False)
    from usher.engine.backends.kube.client import ClusterAccessError
    from usher.engine.scenario import ScenarioError

    try:
        if args.command == "check":
            return cmd_check(args)
        if args.command == "replay":
            return cmd_replay(args, args.file)
        if args.command == "demo":
            return cmd_replay(args, demo_path(), warn=False)
        if args.command == "sandbox":
            return cmd_sandbox(args)
        if args.command == "generate":
            return cmd_generate(args)
        if args.command == "agent":
            return cmd_agent(args)
        if args.command == "bench":
            return cmd_bench(args)
        return cmd_cluster(args)
    except ScenarioError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_BAD_INPUT
    except UsageError as exc:
        print(f"usher: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ClusterAccessError as exc:
        if debug:
            raise
        print(f"usher: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - the promise is one line, no traceback
        if debug:
            raise
        print(f"usher: error: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""The controller: owns the engine, feeds it what the backend reports, runs cycles, publishes.

One ``step`` handles one moment: the backend's due items (completions, events, submissions) are
applied to the engine, then cycles run until one evicts nothing (a preemption can let the victim
restart elsewhere at once; at most ``MAX_PASSES``), and the decisions go back to the backend.
Between moments the controller integrates GPU utilization for the report.

``run`` is the asyncio loop the console and ``--no-ui`` use: it sleeps in wall time at ``speed``
simulated seconds per second (or not at all), takes operator commands from a queue between
moments, can be paused, and publishes a ``Snapshot`` to every subscriber after each step.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from .backends.replay import Kind, ReplayBackend
from .build import build_state, resources_dict
from .config_errors import ConfigRefusal
from .channel import Command, CommandError, Snapshot, settle_reply, snapshot_of
from .core import Engine
from .enums import Action, Capability, MoveMode, PendingReason
from .eta_accuracy import EtaAccuracy
from .policy.registry import Policy
from .scenario import EventSpec, Scenario
from .state import AuditEntry, ClusterState
from .synthetic_telemetry import SyntheticTelemetry
from .telemetry import TelemetryStore

MAX_PASSES = 4


@dataclass(slots=True)
class Metrics:
    """Running totals for the report's summary."""

    allocated_milli_seconds: float = 0.0
    available_gpu_seconds: float = 0.0
    #: of the allocated, what gangs held while waiting for the rest of their pods
    idle_held_milli_seconds: float = 0.0
    cycles: int = 0
    cycle_seconds: float = 0.0
    #: every cycle's wall seconds, when a benchmark asks for them (None: not kept)
    cycle_times: list[float] | None = None


def incomplete_gang_milli(st: ClusterState) -> int:
    """Milli-GPUs on schedulable nodes held by gangs that wait for the rest of their pods."""
    held = 0
    for jid in st.incomplete:
        run = st.jobs[jid].current_run
        if run is not None:
            held += sum(p.gpu_milli for p in run.placements if st.nodes[p.node_id].schedulable)
    return held



class Controller:
    #: a replay has a pace, and no pods or RBAC (``contract.ConsoleController``)
    capabilities = frozenset({Capability.PACE})

    def __init__(self, scenario: Scenario, policy: Policy | str = "usher", until: float | None = None, seed: int = 0) -> None:
        self.scenario = scenario
        self.seed = seed
        self.engine = Engine(build_state(scenario), policy, moves=MoveMode.AT_ONCE)  # a replay binds again at once
        self.backend = ReplayBackend(scenario, self.engine)
        self.until = until
        self.now = 0.0
        self.last_activity = 0.0
        self.metrics = Metrics()
        self.commands: asyncio.Queue[Command] | None = None
        self.subscribers: list[Callable[[Snapshot], None]] = []
        self.paused = False
        self.speed: float | None = None
        self.done = False
        #: live GPU telemetry for the console (filled by the synthetic source while watched)
        self.telemetry = TelemetryStore()
        self.synthetic_telemetry = SyntheticTelemetry(self.telemetry, seed)
        #: how close the estimated starts come true, when asked for (``record_eta_accuracy``)
        self.eta_accuracy: EtaAccuracy | None = None
        #: a replay has nothing to list first: its view is complete from the start
        self.synced = asyncio.Event()
        self.synced.set()
        #: a replay reads no ConfigMaps: none is ever refused
        self.config_refusals: dict[str, ConfigRefusal] = {}

    def record_eta_accuracy(self) -> EtaAccuracy:
        """Sample the estimated starts as the replay goes, for the report's ``etaAccuracy``."""
        self.eta_accuracy = EtaAccuracy()
        return self.eta_accuracy

    @property
    def state(self):
        return self.engine.state

    @property
    def policy(self) -> Policy:
        return self.engine.policy

    # -- what only a cluster has (``contract.ConsoleController``): plain answers --------------

    @property
    def connection(self) -> None:
        """None: a replay has no API server to lose touch with."""
        return None

    def verdicts(self) -> dict[int, tuple[PendingReason, str]]:
        """None written: the engine's own explanations are the replay's word."""
        return {}

    def pods_of_job(self, name: str) -> list[tuple[str, str, str | None]]:
        """None: a replay places jobs, not pods."""
        return []

    async def pod_yaml(self, job_name: str) -> str:
        raise CommandError(f"a replay has no pods to read: {job_name} is a job of a scenario")

    async def pod_logs(self, job_name: str) -> list[tuple[str, str, str | None]]:
        raise CommandError(f"a replay has no pods, so no logs: {job_name} is a job of a scenario")

    async def forbidden_actions(self) -> dict[Action, str]:
        """Nothing: a replay has no RBAC."""
        return {}

    # -- time -----------------------------------------------------------------------------

    def _advance(self, to: float) -> None:
        dt = to - self.now
        if dt > 0:
            st = self.engine.state
            self.metrics.allocated_milli_seconds += st.schedulable_used_milli * dt
            self.metrics.available_gpu_seconds += st.schedulable_gpu_count * dt
            if st.incomplete:
                self.metrics.idle_held_milli_seconds += incomplete_gang_milli(st) * dt
            self.now = to

    def next_time(self) -> float | None:
        t = self.backend.next_time()
        if t is None or (self.until is not None and t > self.until):
            return None
        return t

    def step(self) -> bool:
        """Handle the next moment; False when the replay is over."""
        t = self.next_time()
        if t is None:
            self.finish()
            return False
        self._advance(t)
        engine = self.engine
        submitted = False
        for due in self.backend.pop_due(t):
            if due.kind == Kind.FINISH:
                engine.finish(engine.state.jobs[due.job_id], t)
            elif due.kind == Kind.SUBMIT:
                engine.submit(engine.state.jobs[due.job_id], t)
                submitted = True
            else:
                ev = due.event
                assert ev is not None
                self._scenario_event(ev, t)
        self.last_activity = t
        self.schedule()
        if self.eta_accuracy is not None:
            self.eta_accuracy.observe(engine.state, t, submitted)
        self._publish()
        return True

    def _scenario_event(self, ev: EventSpec, t: float) -> None:
        """Apply one scenario event; one naming nothing known is recorded as rejected, not fatal."""
        engine = self.engine
        try:
            _, evictions = engine.command(
                ev.action,
                t,
                node=ev.node,
                job=ev.job,
                queue=ev.queue,
                quota=resources_dict(ev.quota),
                borrowing_limit=resources_dict(ev.borrowing_limit),
                lending_limit=resources_dict(ev.lending_limit),
                actor="scenario",
            )
        except CommandError as exc:
            target = ev.node or ev.job or ev.queue or "?"
            engine.state.audit.append(AuditEntry(t, "scenario", str(ev.action), target, f"rejected: {exc}"))
            return
        self.backend.apply(evictions, t)

    def schedule(self) -> None:
        """Run cycles at the current moment until one preempts nothing."""
        for _ in range(MAX_PASSES):
            started = time.perf_counter()
            result = self.engine.cycle(self.now)
            took = time.perf_counter() - started
            self.metrics.cycles += 1
            self.metrics.cycle_seconds += took
            if self.metrics.cycle_times is not None:
                self.metrics.cycle_times.append(took)
            self.backend.apply(result.decisions, self.now)
            if not result.evicted:
                break

    def finish(self) -> None:
        if self.done:
            return
        end = self.until if self.until is not None else self.last_activity
        self._advance(max(end, self.now))
        self.done = True

    def run_to_end(self) -> None:
        while self.step():
            pass

    # -- operator commands ----------------------------------------------------------------

    def apply_command(self, cmd: Command) -> str:
        """Apply an operator command now and reschedule; raises CommandError for bad targets."""
        text, evictions = self.engine.command(
            cmd.action,
            self.now,
            node=cmd.node,
            job=cmd.job,
            queue=cmd.queue,
            quota=cmd.quota,
            borrowing_limit=cmd.borrowing_limit,
            lending_limit=cmd.lending_limit,
            actor=cmd.actor,
        )
        self.backend.apply(evictions, self.now)
        self.schedule()
        self._publish()
        return text

    # -- the loop -------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        return snapshot_of(self.engine.state, self.now)

    def subscribe(self, callback: Callable[[Snapshot], None]) -> None:
        self.subscribers.append(callback)

    def post(self, cmd: Command) -> asyncio.Future[str]:
        """Queue an operator command for the running loop; the future gives its result."""
        if self.commands is None:
            raise CommandError("the replay is not running")
        cmd.reply = asyncio.get_running_loop().create_future()
        self.commands.put_nowait(cmd)
        return cmd.reply

    def _publish(self) -> None:
        if self.subscribers:
            self.synthetic_telemetry.sample(self.engine.state, self.now, self.speed)
            snap = self.snapshot()
            for cb in self.subscribers:
                cb(snap)

    async def run(self, speed: float | None = 60.0) -> None:
        """Replay in wall time (``speed`` simulated seconds per second; None = flat out)."""
        self.speed = speed
        self.commands = asyncio.Queue()
        while not self.done:
            while not self.commands.empty():
                cmd = self.commands.get_nowait()
                try:
                    settle_reply(cmd, self.apply_command(cmd))
                except CommandError as exc:
                    self.engine.state.audit.append(AuditEntry(self.now, cmd.actor, str(cmd.action), "?", f"rejected: {exc}"))
                    settle_reply(cmd, error=exc)
            if self.paused:
                await asyncio.sleep(0.05)
                continue
            t = self.next_time()
            if t is None:
                self.finish()
                self._publish()
                break
            if self.speed:
                wait = (t - self.now) / self.speed
                slept = 0.0
                while slept < wait and not self.paused and self.commands.empty():
                    chunk = min(0.1, wait - slept)
                    await asyncio.sleep(chunk)
                    slept += chunk
                    self._advance(self.now + chunk * self.speed if self.now + chunk * self.speed < t else t)
                    self._publish()
                if self.paused or not self.commands.empty():
                    continue
            self.step()
            await asyncio.sleep(0)

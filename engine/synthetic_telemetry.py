"""Synthetic GPU telemetry for replays: busy where allocated, each job with a profile of its own.

A replay has no GPUs to read, but the console's heatmap and sparklines should look like a real
cluster's: a GPU a job holds is busy, an unallocated one idles, a failed node goes silent (so its
GPUs turn stale rather than zero). ``SyntheticTelemetry.sample`` reads the engine's state at
``now`` and adds one sample per GPU to a ``TelemetryStore``:

- every job gets a ``Profile`` derived from its name and the replay's seed (so the same replay
  always draws the same pictures): a base utilization, a slow swing around it, how much GPU memory
  it fills; a run ramps up over its first two minutes (loading data and weights);
- a shared GPU adds its jobs' utilization and memory weighted by their shares;
- a job that holds some of its pods while it waits for the rest (pod-by-pod admission, the
  ``kube-default`` policy) holds its GPUs idle: allocated, a CUDA context's worth of memory
  (``HELD_MEMORY``), no utilization. That is the picture the heatmap exists for;
- temperature and power follow utilization between an idle and a full-load figure, power scaled
  by the GPU model's board power (``BOARD_POWER``).

It stays cheap because it samples only when someone watches (the controller calls it when it
publishes to a subscriber such as the console, never in a headless ``--no-ui`` replay), and at
most once per ``interval`` simulated seconds, or once per ``WALL_SECONDS_PER_ROUND`` of wall time
when the replay runs faster than that (what a round costs is measured by
``bench/telemetry.py``; the figures are in docs/telemetry.md). The store's ``stale_after`` is kept at
``STALE_ROUNDS`` rounds, so a failed node's GPUs turn stale within three rounds.
"""

from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass

from .state import MILLI, ClusterState, Job
from .telemetry import GpuSample, TelemetryStore

DEFAULT_INTERVAL = 30.0
"""Simulated seconds between two rounds of samples."""

RAMP_SECONDS = 120.0
"""A run's utilization climbs from zero to its profile over this long after it starts."""

BOARD_POWER: dict[str, float] = {
    "B200": 1000.0,
    "H200": 700.0,
    "H100": 700.0,
    "A100": 400.0,
    "L40S": 350.0,
    "L4": 72.0,
    "V100": 300.0,
    "T4": 70.0,
}
"""Full-load board power (watts) by a model name's leading word; others get ``DEFAULT_BOARD_POWER``."""

WALL_SECONDS_PER_ROUND = 0.5
"""At a replay speed of ``speed`` simulated seconds per wall second, rounds are at least
``speed * WALL_SECONDS_PER_ROUND`` simulated seconds apart (two rounds per wall second at most)."""

STALE_ROUNDS = 3
"""A GPU missing from this many rounds (its node failed) is stale."""

HELD_MEMORY = 0.02
"""Share of a GPU's memory a pod that waits for the rest of its gang holds (its CUDA context)."""

DEFAULT_BOARD_POWER = 400.0
IDLE_POWER_SHARE = 0.1
IDLE_TEMPERATURE = 32.0
FULL_LOAD_TEMPERATURE = 78.0
TWO_PI = 2.0 * math.pi


@dataclass(slots=True, frozen=True)
class Profile:
    """How one job uses its GPUs over time."""

    utilization: float
    """Mean percent busy once ramped up."""
    swing: float
    """Percent the utilization swings around the mean."""
    period: float
    """Seconds per swing."""
    phase: float
    memory: float
    """Share of each GPU's memory the job fills."""


def profile_of(job_name: str, seed: int) -> Profile:
    """The job's profile: the same name and seed always give the same one."""
    rng = random.Random(zlib.crc32(f"{seed}/{job_name}".encode()))
    return Profile(
        utilization=rng.uniform(55.0, 97.0),
        swing=rng.uniform(2.0, 15.0),
        period=rng.uniform(120.0, 1800.0),
        phase=rng.uniform(0.0, TWO_PI),
        memory=rng.uniform(0.35, 0.95),
    )


def board_power(model: str) -> float:
    """Full-load watts for a model name such as ``H100`` or ``NVIDIA A100-SXM4-80GB``."""
    words = model.upper().replace("NVIDIA", "").replace("-", " ").split()
    return BOARD_POWER.get(words[0], DEFAULT_BOARD_POWER) if words else DEFAULT_BOARD_POWER


def busy_percent(profile: Profile, since_start: float, gpu_in_job: int) -> float:
    """The profile's utilization ``since_start`` seconds into a run, on the job's ``gpu_in_job``-th GPU."""
    angle = TWO_PI * since_start / profile.period + profile.phase + 0.7 * gpu_in_job
    value = profile.utilization + profile.swing * (math.sin(angle) + 0.3 * math.sin(5.3 * angle))
    if since_start < RAMP_SECONDS:
        value *= max(since_start, 0.0) / RAMP_SECONDS
    return min(max(value, 0.0), 100.0)


class SyntheticTelemetry:
    """Fills a ``TelemetryStore`` from the engine's allocations, at most once per ``interval``."""

    def __init__(self, store: TelemetryStore, seed: int = 0, interval: float = DEFAULT_INTERVAL) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, not {interval}")
        self.store = store
        self.seed = seed
        self.interval = interval
        self.last_round: float | None = None
        self._profiles: dict[str, Profile] = {}

    def gap(self, speed: float | None) -> float:
        """Simulated seconds between rounds at a replay ``speed`` (None: flat out, or unknown)."""
        return max(self.interval, speed * WALL_SECONDS_PER_ROUND) if speed else self.interval

    def sample(self, state: ClusterState, now: float, speed: float | None = None) -> bool:
        """Add one sample per GPU of every live node if a round is due; True if one was taken."""
        gap = self.gap(speed)
        self.store.stale_after = STALE_ROUNDS * gap
        if self.last_round is not None and now - self.last_round < gap:
            return False
        self.last_round = now
        self.store.add(self._round(state, now))
        return True

    def _profile(self, job: Job) -> Profile:
        profile = self._profiles.get(job.name)
        if profile is None:
            profile = self._profiles[job.name] = profile_of(job.name, self.seed)
        return profile

    def _round(self, state: ClusterState, now: float) -> list[GpuSample]:
        # (node id, gpu) -> [percent busy, share of memory filled], summed over the jobs on it
        load: dict[tuple[int, int], list[float]] = {}
        for job_id in (*state.running, *state.incomplete):
            job = state.jobs[job_id]
            run = job.current_run
            if run is None:
                continue
            profile = self._profile(job)
            working = run.work_start is not None
            since = now - run.work_start if run.work_start is not None else 0.0
            k = 0
            for placement in run.placements:
                weight = placement.share / MILLI if placement.share else 1.0
                for g in placement.gpus:
                    entry = load.setdefault((placement.node_id, g), [0.0, 0.0])
                    if working:
                        entry[0] += weight * busy_percent(profile, since, k)
                        entry[1] += weight * profile.memory
                    else:
                        entry[1] += weight * HELD_MEMORY
                    k += 1
        out: list[GpuSample] = []
        append = out.append
        span = FULL_LOAD_TEMPERATURE - IDLE_TEMPERATURE
        for node in state.nodes:
            if node.failed or not node.gpu_count:
                continue
            full = board_power(node.gpu_model)
            idle = full * IDLE_POWER_SHARE
            total = node.gpu_memory or None
            name = node.name
            for g in range(node.gpu_count):
                entry = load.get((node.id, g))
                if entry is None:
                    append(GpuSample(name, g, now, 0.0, 0 if total else None, total, IDLE_TEMPERATURE, idle, True))
                    continue
                busy = min(entry[0], 100.0)
                used = int(total * min(entry[1], 1.0)) if total else None
                fraction = busy / 100.0
                append(GpuSample(name, g, now, busy, used, total, IDLE_TEMPERATURE + span * fraction, idle + (full - idle) * fraction, True))
        return out

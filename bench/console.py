"""Console benchmark: first paint, key-press latency and idle CPU. Not a test.

    python bench/console.py            # both parts; prints a markdown table
    python bench/console.py demo       # only the real `usher demo` in a pseudo-terminal
    python bench/console.py big        # only the 1,000-node / 10,000-job cluster, in-process
    python bench/console.py busy       # only the busy 20,000-job replay with 800+ jobs pending

``demo``: starts ``usher demo`` in a pseudo-terminal (120x40) as an operator would, and times
from the process start to the first frame that shows the overview; then pauses the replay with
``space`` and measures the process's CPU over 5 s of idling (from /proc, utime + stime).

``big``: a cluster of 1,000 nodes x 8 GPUs (racks of 8 in blocks of 64) and 10,000 jobs over
half a day at twice the cluster's capacity (bench/workloads.py B2 shape), replayed to
hour 10, then the console in Textual's headless
driver at 200x50: time to the first painted frame, then for each key the time from the press
until the app is idle again with the new screen composed (median of 5), and the CPU per wall
second over 5 s idle (paused) and 5 s with the replay running at x600. The driver's own cost of
a key press and an idle wait (Pilot.press + pause) is measured with an unbound key and shown
first; subtract it to get the app's share.

``busy``: B2's 1,000 nodes x 8 GPUs and 20,000 jobs over a week at 1.3x offered
load (``workloads.b2_busy(nodes=1000, jobs=20000, load=1.3)``), replayed to the first hour with
``BUSY_PENDING`` or more jobs pending; then, in the headless driver at 200x50, the time to the
first painted frame (the overview), then the jobs view (every pending job's reason, position and
ETA), the queues view and a pending job's detail page (its message), each timed from the press
until the app is idle again (the first press, then the median of 5 with the state unchanged).
"""

from __future__ import annotations

import asyncio
import os
import pty
import select
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads  # noqa: E402

from usher.engine.controller import Controller  # noqa: E402
from usher.engine.scenario import parse_scenario  # noqa: E402

IDLE_SECONDS = 5.0
#: ``busy`` replays until at least this many jobs are pending
BUSY_PENDING = 800


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def demo() -> list[tuple[str, str]]:
    usher = Path(sys.executable).with_name("usher")
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="120", LINES="40")
    master, slave = pty.openpty()
    import fcntl
    import struct
    import termios

    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    started = time.perf_counter()
    proc = subprocess.Popen([str(usher), "demo"], stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    seen = b""
    first_paint = None
    deadline = started + 30
    while time.perf_counter() < deadline and first_paint is None:
        ready, _, _ = select.select([master], [], [], 0.05)
        if ready:
            seen += os.read(master, 65536)
            if b"GPUs allocated" in seen:
                first_paint = time.perf_counter() - started

    def drain(seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    os.read(master, 65536)
                except OSError:
                    return

    drain(1.0)
    os.write(master, b" ")  # pause the replay
    drain(1.0)
    cpu0, t0 = _cpu_seconds(proc.pid), time.perf_counter()
    drain(IDLE_SECONDS)
    idle = (_cpu_seconds(proc.pid) - cpu0) / (time.perf_counter() - t0)
    os.write(master, b" ")  # resume: the replay running at x600
    cpu0, t0 = _cpu_seconds(proc.pid), time.perf_counter()
    drain(IDLE_SECONDS)
    busy = (_cpu_seconds(proc.pid) - cpu0) / (time.perf_counter() - t0)
    proc.terminate()
    proc.wait(5)
    os.close(master)
    return [
        ("`usher demo` first paint (process start to overview)", f"{first_paint:.2f} s" if first_paint else "not seen in 30 s"),
        ("`usher demo` CPU idle (replay paused)", f"{idle:.1%} of a core"),
        ("`usher demo` CPU while replaying at x600", f"{busy:.1%} of a core"),
    ]


def big() -> list[tuple[str, str]]:
    from usher.console.app import UsherApp

    text = workloads.b2_busy(nodes=1000, jobs=10000, days=0.5, load=2.0)
    t0 = time.perf_counter()
    ctrl = Controller(parse_scenario(text, file="bench-console.yaml"))
    while (t := ctrl.next_time()) is not None and t <= 10 * 3600:
        ctrl.step()
    replay_s = time.perf_counter() - t0
    state = ctrl.state
    pending = sum(len(q.pending) for q in state.queues.values())
    rows: list[tuple[str, str]] = [
        ("cluster", f"{len(state.nodes)} nodes, {sum(n.gpu_count for n in state.nodes)} GPUs, {len(state.jobs)} jobs"
         f" ({len(state.running)} running, {pending} pending at hour 10; replayed there in {replay_s:.1f} s)"),
    ]
    ctrl.paused = True

    async def run() -> None:
        app = UsherApp(ctrl, speed=600.0)
        started = time.perf_counter()
        async with app.run_test(size=(200, 50)) as pilot:
            await pilot.pause()
            rows.append(("first paint (1,000 nodes, 10,000 jobs)", f"{(time.perf_counter() - started) * 1000:.0f} ms"))
            keys = [
                ("x", "`x` (bound to nothing: the test driver's own floor)"),
                ("3", "`3` jobs view (10,000 rows)"),
                ("down", "`down` in the jobs list"),
                ("o", "`o` sort the jobs by the next column"),
                ("4", "`4` nodes view (1,000 rows)"),
                ("5", "`5` topology heatmap (8,000 GPUs)"),
                ("enter", "`enter` zoom into a block"),
                ("2", "`2` queues view"),
                ("1", "`1` overview"),
            ]
            for key, label in keys:
                times = []
                for _ in range(5):
                    if key in ("enter",):
                        await pilot.press("escape")
                        await pilot.pause()
                    t = time.perf_counter()
                    await pilot.press(key)
                    await pilot.pause()
                    times.append(time.perf_counter() - t)
                rows.append((f"key press: {label}", f"{statistics.median(times) * 1000:.0f} ms (median of 5)"))
            await pilot.press("3")
            await pilot.pause()
            cpu0, t0 = time.process_time(), time.perf_counter()
            await asyncio.sleep(IDLE_SECONDS)
            rows.append(("CPU idle, jobs view, replay paused", f"{(time.process_time() - cpu0) / (time.perf_counter() - t0):.1%} of a core"))
            ctrl.paused = False
            cpu0, t0 = time.process_time(), time.perf_counter()
            await asyncio.sleep(IDLE_SECONDS)
            rows.append(("CPU, jobs view, replay running at x600", f"{(time.process_time() - cpu0) / (time.perf_counter() - t0):.1%} of a core"))

    asyncio.run(run())
    return rows


def _busy_controller() -> tuple[Controller, float]:
    """The busy replay advanced to the first moment with ``BUSY_PENDING`` jobs pending, and the
    wall seconds it took. ``USHER_BENCH_CACHE=path`` keeps it pickled there between runs (the
    replay takes minutes); the cache is used only when it holds the same scenario."""
    import hashlib
    import pickle

    text = workloads.b2_busy(nodes=1000, jobs=20000, load=1.3)
    cache = os.environ.get("USHER_BENCH_CACHE")
    digest = hashlib.sha256(f"{text}{BUSY_PENDING}".encode()).hexdigest()
    if cache and Path(cache).exists():
        try:
            saved_digest, saved_s, ctrl = pickle.loads(Path(cache).read_bytes())
            if saved_digest == digest:
                return ctrl, saved_s
        except Exception as exc:  # noqa: BLE001 - a cache from other code is replayed again
            print(f"(cache {cache} not used: {exc})", file=sys.stderr)
    t0 = time.perf_counter()
    ctrl = Controller(parse_scenario(text, file="bench-console-busy.yaml"))
    while ctrl.next_time() is not None:
        ctrl.step()
        if sum(len(q.pending) for q in ctrl.state.queues.values()) >= BUSY_PENDING:
            break
    replay_s = time.perf_counter() - t0
    if cache:
        Path(cache).write_bytes(pickle.dumps((digest, replay_s, ctrl)))
    return ctrl, replay_s


def busy() -> list[tuple[str, str]]:
    from usher.console.app import UsherApp

    ctrl, replay_s = _busy_controller()
    state = ctrl.state
    pending = sum(len(q.pending) for q in state.queues.values())
    rows: list[tuple[str, str]] = [
        (
            "cluster",
            (
                f"{len(state.nodes)} nodes, {sum(n.gpu_count for n in state.nodes)} GPUs, {len(state.jobs)} jobs"
                f" ({len(state.running)} running, {pending} pending at hour {ctrl.now / 3600:.1f};"
                f" replayed there in {replay_s:.0f} s)"
            ),
        ),
    ]
    ctrl.paused = True
    waiting = next(j for j in state.jobs if j.submitted and j.current_run is None and j.pending_reason is not None)

    async def run() -> None:
        app = UsherApp(ctrl, speed=600.0)
        started = time.perf_counter()
        async with app.run_test(size=(200, 50)) as pilot:
            await pilot.pause()
            rows.append((f"first paint (busy: {pending} pending)", f"{(time.perf_counter() - started) * 1000:.0f} ms"))
            keys = [
                ("x", "`x` (bound to nothing: the test driver's own floor)"),
                ("3", "`3` jobs view (every job's reason, position, ETA)"),
                ("2", "`2` queues view"),
                ("1", "`1` overview"),
            ]
            for key, label in keys:
                times = []
                for _ in range(6):
                    t = time.perf_counter()
                    await pilot.press(key)
                    await pilot.pause()
                    times.append(time.perf_counter() - t)
                rows.append((f"key press: {label}", f"first {times[0] * 1000:.0f} ms, then {statistics.median(times[1:]) * 1000:.0f} ms (median of 5)"))
            t = time.perf_counter()
            app.job_details(waiting.name)
            rows.append((f"detail page of a pending job ({waiting.pending_reason})", f"{(time.perf_counter() - t) * 1000:.0f} ms"))

    asyncio.run(run())
    return rows


def main(argv: list[str]) -> None:
    parts = argv or ["demo", "big"]
    print("| measure | result |")
    print("|---|---|")
    for part in parts:
        for name, value in {"demo": demo, "big": big, "busy": busy}[part]():
            print(f"| {name} | {value} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Key-burst endurance run: random bursts at the console for minutes. Not a test.

    python bench/keyburst.py                 # 5 minutes against the demo replay, seed 29
    python bench/keyburst.py --minutes 10 --seed 7 --size 80x24

The demo replay runs at x60 in the console (Textual's headless driver) while seeded random
bursts are posted to it, each whole before the app handles its first key, as a terminal that
delivers a paste or a laggy link's keys in one read: single keys (every action key but the
lone ``q``), typed commands (``:queues``, ``:theme light``, ``:q`` ...), bracketed pastes and
resizes (tests/console/bursts.py). After each burst it checks that the console is alive and
consistent (running, no exception, the header names the view on screen, no dialog stacked on
another, the focus where the keys go, no quit by a key never pressed alone, no warning raised);
a quit command is recorded, not carried out, so the run goes on. It prints a markdown summary:
bursts, keys, pastes and resizes sent, quit commands, problems (the first ones in full), and the
time the console took to handle each burst (the replay running meanwhile); the exit status is 1 if any check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import random
import statistics
import sys
import time
import warnings
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "console"))

from bursts import BurstApp, check, random_burst, send, settle  # noqa: E402
from textual import events  # noqa: E402

from usher.cli import demo_path  # noqa: E402
from usher.engine.controller import Controller  # noqa: E402
from usher.engine.scenario import load_scenario  # noqa: E402


async def run(minutes: float, seed: int, size: tuple[int, int], length: int) -> int:
    rng = random.Random(seed)
    app = BurstApp(Controller(load_scenario(demo_path())), speed=60.0)
    bursts = keys = pastes = resizes = 0
    problems: list[tuple[int, list[str]]] = []
    took: list[float] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            end = time.monotonic() + minutes * 60
            while time.monotonic() < end:
                evs = random_burst(rng, app, length)
                keys += sum(isinstance(e, events.Key) for e in evs)
                pastes += sum(isinstance(e, events.Paste) for e in evs)
                resizes += sum(isinstance(e, events.Resize) for e in evs)
                start = time.monotonic()
                expected = app.keys.passed + sum(isinstance(e, (events.Key, events.Paste)) for e in evs)
                send(app, evs)
                # polled, not Pilot's pause (which waits for the whole app to idle): the time
                # the console took to handle the burst, the replay running meanwhile
                while app.is_running and (app.keys.passed < expected or app.keys.busy):
                    await asyncio.sleep(0.005)
                took.append(time.monotonic() - start)
                await settle(pilot, app, rounds=4000)
                bursts += 1
                result = check(app, caught)
                caught.clear()
                if not result:
                    problems.append((bursts, result.problems))
                    if not app.is_running:
                        break
            alive = app.is_running
    print(f"## Key bursts, {date.today()}, {platform.node()} ({platform.machine()}, Python {platform.python_version()})\n")
    print(f"`python bench/keyburst.py --minutes {minutes:g} --seed {seed} --size {size[0]}x{size[1]} --length {length}`\n")
    print("| measure | value |\n|---|---|")
    print(f"| bursts | {bursts} ({length} tokens each) |")
    print(f"| keys / pastes / resizes sent | {keys} / {pastes} / {resizes} |")
    print(f"| events through the key gate | {app.keys.passed} |")
    print(f"| quit commands (recorded, not carried out) | {len(app.quit_commands)} |")
    print(f"| quits by a key never pressed alone | {app.quit_keys} |")
    print(f"| bursts with a problem | {len(problems)} |")
    print(f"| alive at the end | {'yes' if alive else 'no'} |")
    if took:
        print(f"| seconds to handle a burst, median / max | {statistics.median(took):.2f} / {max(took):.2f} |")
    for n, found in problems[:5]:
        print(f"\nburst {n}: " + "; ".join(found))
    return 0 if alive and not problems else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=29)
    ap.add_argument("--size", default="80x24", help="terminal size, WIDTHxHEIGHT")
    ap.add_argument("--length", type=int, default=20, help="tokens per burst")
    args = ap.parse_args()
    try:
        width, height = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        ap.error(f"--size: {args.size!r} is not WIDTHxHEIGHT (e.g. 80x24)")
    return asyncio.run(run(args.minutes, args.seed, (width, height), args.length))


if __name__ == "__main__":
    sys.exit(main())

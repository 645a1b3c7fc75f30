"""The demo replay stopped at a known moment, for the console's tests and snapshots."""

from __future__ import annotations

from usher.cli import demo_path
from usher.engine.controller import Controller
from usher.engine.scenario import load_scenario

#: the moment the console tests look at: after the node failure and the drain
AT = 3 * 3600 + 600


def demo_at(t: float = AT) -> Controller:
    """The demo replayed up to ``t`` simulated seconds (the last moment at or before it)."""
    ctrl = Controller(load_scenario(demo_path()))
    while (nt := ctrl.next_time()) is not None and nt <= t:
        ctrl.step()
    return ctrl

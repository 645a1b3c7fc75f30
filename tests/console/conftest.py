"""Fixtures for the console's tests: the demo replay stopped at a known moment, and the app on it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from usher.cli import demo_path
from usher.console.app import UsherApp
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


@pytest.fixture(autouse=True)
def _no_user_config(tmp_path, monkeypatch) -> None:
    """The operator's own themes and keymap stay out of the tests."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


@pytest.fixture
def console() -> Callable[..., UsherApp]:
    """An app on the demo at ``AT``: the controller loop runs but the replay is paused, so
    commands are carried out while simulated time stands still."""

    def make(**options) -> UsherApp:
        ctrl = demo_at(options.pop("at", AT))
        ctrl.paused = True
        return UsherApp(ctrl, speed=60.0, **options)

    return make

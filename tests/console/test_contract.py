"""The console's contract with its controllers (``usher.engine.contract``): the replay's and the
cluster's controllers both meet it, each declaring what only it can do, and the console refuses,
by name, a controller that lacks part of it instead of failing later on a key press."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest
from demo_state import demo_at

from usher.console.app import UsherApp
from usher.engine.backends.kube.client import Credentials, KubeClient
from usher.engine.backends.kube.controller import KubeController
from usher.engine.contract import MEMBERS, ConsoleController, require
from usher.engine.channel import CommandError
from usher.engine.enums import Capability


async def test_the_replay_and_the_cluster_controllers_both_meet_the_contract() -> None:
    client = KubeClient(Credentials())  # never connected: the contract needs no API server
    try:
        cluster = KubeController(client, identity="contract", schedule=False)
        replay = demo_at(0)
        for ctrl in (replay, cluster):
            assert isinstance(ctrl, ConsoleController)
            assert require(ctrl) is ctrl
        # the same kind of member on both: what the console awaits is a coroutine on each
        for name in MEMBERS:
            a, b = getattr(type(replay), name, None), getattr(type(cluster), name, None)
            assert inspect.iscoroutinefunction(a) == inspect.iscoroutinefunction(b), name
            assert callable(getattr(replay, name)) == callable(getattr(cluster, name)), name
        assert replay.capabilities == {Capability.PACE}
        assert cluster.capabilities == {Capability.PODS, Capability.PERMISSIONS}
        # what only a cluster has, a replay answers plainly
        assert replay.connection is None and replay.pods_of_job("llm-pretrain") == []
        assert replay.verdicts() == {} and await replay.forbidden_actions() == {}
        assert replay.synced.is_set() and replay.config_refusals == {}
        with pytest.raises(CommandError, match="a replay has no pods"):
            await replay.pod_logs("llm-pretrain")
    finally:
        await client.aclose()


def test_a_controller_missing_a_member_is_refused_by_name() -> None:
    replay = demo_at(0)
    fake = SimpleNamespace(**{name: getattr(replay, name) for name in MEMBERS if name != "pod_logs"})
    assert not isinstance(fake, ConsoleController)
    with pytest.raises(TypeError, match=r"SimpleNamespace .* lacks pod_logs$"):
        UsherApp(fake, live=False)  # type: ignore[arg-type]


def test_capabilities_must_be_the_declared_flags() -> None:
    replay = demo_at(0)
    fake = SimpleNamespace(**{name: getattr(replay, name) for name in MEMBERS})
    fake.capabilities = {"pace"}
    with pytest.raises(TypeError, match=r"capabilities must be a frozenset of Capability, not \{'pace'\}"):
        UsherApp(fake, live=False)  # type: ignore[arg-type]

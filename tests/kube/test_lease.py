"""Leader election against the sandbox's fake API server, with short leases (1 s)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from usher.engine.backends.kube.client import Backoff, KubeClient, RetryPolicy
from usher.engine.backends.kube.lease import LeaderElector
from usher.sandbox.apiserver import FakeApiServer, FaultKind
from usher.sandbox.store import Change

SHORT = {"lease_duration": 1.0, "renew_deadline": 0.6, "retry_period": 0.2}
LEASE = "/apis/coordination.k8s.io/v1/namespaces/usher-system/leases/usher-controller"
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


class ManualClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
async def server() -> AsyncIterator[FakeApiServer]:
    fake = FakeApiServer()
    fake.store.create("namespaces", {"metadata": {"name": "usher-system"}})
    await fake.start(port=0)
    yield fake
    await fake.stop()


@pytest.fixture
async def clients(server: FakeApiServer, tmp_path: Path) -> AsyncIterator[list[KubeClient]]:
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(server.kubeconfig()))
    retry = RetryPolicy(attempts=3, backoff=Backoff(base=0.02, cap=0.1))
    made = [await KubeClient.connect(str(path), retry=retry, timeout=2.0) for _ in range(2)]
    yield made
    for kube in made:
        await kube.aclose()


def lease_history(server: FakeApiServer) -> list[dict[str, Any]]:
    """Every spec the lease is written with, in order."""
    specs: list[dict[str, Any]] = []

    def record(change: Change) -> None:
        if change.new is not None and change.new.obj.get("kind") == "Lease":
            specs.append(change.new.obj["spec"])

    server.store.add_listener(record)
    return specs


def micro_time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


async def stopped(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.wait([task])


async def test_one_leader_and_takeover_after_it_stops_renewing(
    server: FakeApiServer, clients: list[KubeClient]
) -> None:
    history = lease_history(server)
    leaders: set[str] = set()
    most = 0

    def tracker(identity: str):
        def changed(leading: bool) -> None:
            nonlocal most
            (leaders.add if leading else leaders.discard)(identity)
            most = max(most, len(leaders))

        return changed

    a = LeaderElector(clients[0], identity="a", on_change=tracker("a"), **SHORT)
    b = LeaderElector(clients[1], identity="b", on_change=tracker("b"), **SHORT)
    tasks = {"a": asyncio.create_task(a.run()), "b": asyncio.create_task(b.run())}
    async with asyncio.timeout(5):
        while not leaders:
            await asyncio.sleep(0.01)
    await asyncio.sleep(1.5)  # well past one lease duration: the leader keeps renewing
    assert most == 1 and len(leaders) == 1
    leader, standby = (a, b) if a.is_leader else (b, a)
    spec = server.store.get("leases", "usher-controller", "usher-system")["spec"]
    assert spec["holderIdentity"] == leader.identity and spec["leaseDurationSeconds"] == 1
    assert MICRO_TIME.match(spec["renewTime"]) and MICRO_TIME.match(spec["acquireTime"])
    assert len(history) >= 5  # created, then renewed every retry period

    await stopped(tasks[leader.identity])  # killed: no release
    await asyncio.wait_for(standby.wait(), 5)
    last_renewal = micro_time(next(s for s in reversed(history) if s["holderIdentity"] == leader.identity)["renewTime"])
    taken = next(s for s in history if s["holderIdentity"] == standby.identity)
    waited = micro_time(taken["acquireTime"]) - last_renewal
    assert timedelta(seconds=0.99) <= waited <= timedelta(seconds=3)  # once expired, and soon after
    assert taken["leaseTransitions"] == spec["leaseTransitions"] + 1
    await stopped(tasks[standby.identity])


async def test_release_hands_over_at_once(server: FakeApiServer, clients: list[KubeClient]) -> None:
    history = lease_history(server)
    long = {"lease_duration": 30.0, "renew_deadline": 20.0, "retry_period": 0.2}
    a = LeaderElector(clients[0], identity="a", **long)
    b = LeaderElector(clients[1], identity="b", **long)
    running = asyncio.create_task(a.run())
    await asyncio.wait_for(a.wait(), 5)
    standby = asyncio.create_task(b.run())
    await asyncio.sleep(0.5)
    assert not b.is_leader

    await a.release()
    assert not a.is_leader and running.done()
    assert any(s["holderIdentity"] == "" for s in history)
    await asyncio.wait_for(b.wait(), 2)  # far sooner than the 30 s lease would expire
    spec = server.store.get("leases", "usher-controller", "usher-system")["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)
    await b.release()
    assert standby.done()


async def test_leader_steps_down_when_it_cannot_renew(server: FakeApiServer, clients: list[KubeClient]) -> None:
    changes: list[bool] = []
    a = LeaderElector(clients[0], identity="a", on_change=changes.append, **SHORT)
    task = asyncio.create_task(a.run())
    await asyncio.wait_for(a.wait(), 5)
    server.inject(FaultKind.ERROR, method="PUT", path=LEASE, status=500)
    await asyncio.wait_for(a.wait(leader=False), 3)
    assert changes == [True, False]
    server.clear_faults()
    await asyncio.wait_for(a.wait(), 3)  # it campaigns again, and wins
    assert changes == [True, False, True]
    await stopped(task)


async def test_expiry_is_judged_by_the_standbys_own_clock(server: FakeApiServer, clients: list[KubeClient]) -> None:
    # the leader's wall clock is an hour behind: its renewTime looks long expired to anyone who
    # compares timestamps; the standby only trusts how long it has itself seen the lease unchanged
    behind = LeaderElector(clients[0], identity="a", wall_clock=lambda: datetime.now(UTC) - timedelta(hours=1), **SHORT)
    clock = ManualClock()
    standby = LeaderElector(clients[1], identity="b", clock=clock, **SHORT)
    leading = asyncio.create_task(behind.run())
    await asyncio.wait_for(behind.wait(), 5)
    await stopped(leading)  # killed: the lease stays as it last wrote it

    waiting = asyncio.create_task(standby.run())
    await asyncio.sleep(1.0)  # five tries, and the standby's clock has not moved
    assert not standby.is_leader
    clock.t = 1.1
    await asyncio.wait_for(standby.wait(), 2)
    await stopped(waiting)


def test_timings_must_leave_room_to_step_down(clients: list[KubeClient]) -> None:
    with pytest.raises(ValueError):
        LeaderElector(clients[0], lease_duration=1.0, renew_deadline=1.0, retry_period=0.2)
    assert LeaderElector(clients[0]).identity  # hostname_random by default


class _SlowAnswers:
    """A client whose lease writes land at once but whose answers come ``delay`` later (by the
    test's clock): the network's share of a renewal."""

    def __init__(self, inner: KubeClient, clock: ManualClock, delay: float) -> None:
        self.inner, self.clock, self.delay = inner, clock, delay

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        return await self.inner.get(*args, **kwargs)

    async def create(self, *args: Any, **kwargs: Any) -> Any:
        return await self.inner.create(*args, **kwargs)

    async def replace(self, *args: Any, **kwargs: Any) -> Any:
        out = await self.inner.replace(*args, **kwargs)
        self.clock.t += self.delay
        return out


async def test_a_renewal_counts_from_when_it_was_sent_not_from_its_late_answer(clients: list[KubeClient]) -> None:
    """A standby may take over ``lease_duration`` after it last saw the lease change; the leader
    must stop writing before that, so its time runs from the renewal's sending."""
    clock = ManualClock()
    a = LeaderElector(_SlowAnswers(clients[0], clock, 0.5), identity="a", clock=clock, **SHORT)  # type: ignore[arg-type]
    assert await a._try()
    a._leading.set()
    clock.t = 1.0
    assert await a._try()  # renewed at 1.0, answered at 1.5
    clock.t = 1.0 + SHORT["renew_deadline"]
    assert not a.holds()  # counted from 1.0, not from 1.5


async def test_a_lease_deleted_by_hand_is_not_taken_before_the_last_holders_would_have_run_out(
    server: FakeApiServer, clients: list[KubeClient]
) -> None:
    clock = ManualClock()
    a = LeaderElector(clients[0], identity="a", clock=clock, **SHORT)
    b = LeaderElector(clients[1], identity="b", clock=clock, **SHORT)
    assert await a._try()
    assert not await b._try()  # b sees a hold it, at 0
    server.store.delete("leases", "usher-controller", "usher-system")
    clock.t = 0.1
    assert not await b._try()  # a may still take itself for the leader: not yet
    clock.t = SHORT["lease_duration"] + 0.01
    assert await b._try()  # a's lease would have run out by now

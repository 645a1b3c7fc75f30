"""The job details say what a reservation holds for its holder, and why-pending says which
reservation a job held back would delay (issue 33)."""

from __future__ import annotations

from usher.console.app import UsherApp
from usher.engine.controller import Controller
from usher.engine.scenario import parse_scenario

#: one queue with a quota of 16 GPUs; ``big`` waits for it, ``eval`` would run past its start
THREE_JOBS = """\
name: three-jobs
nodes: [{name: n1, gpus: 8}, {name: n2, gpus: 8}, {name: n3, gpus: 8}, {name: n4, gpus: 8}]
queues: [{name: team, quota: {gpu: 16}}]
jobs:
  - {name: train, queue: team, duration: 3h, pods: [{count: 2, gpu: 6}]}
  - {name: big, queue: team, submit: 1m, duration: 1h, pods: [{count: 2, gpu: 8}]}
  - {name: eval, queue: team, submit: 2m, duration: 6h, pods: [{count: 1, gpu: 4}]}
"""


def _console_at(seconds: float) -> UsherApp:
    ctrl = Controller(parse_scenario(THREE_JOBS, file="three.yaml"), "usher")
    while ctrl.now < seconds:
        ctrl.step()
    return UsherApp(ctrl, live=False)


async def test_the_holders_details_say_what_its_reservation_holds() -> None:
    app = _console_at(120)
    async with app.run_test(size=(140, 40)):
        details = app.job_details("big").plain
        assert "Reservation" in details
        assert "holds 16 GPUs of queue team's quota and room on n1, n2 from" in details
        assert "(in 2h58m)" in details
        assert "Reservation" not in app.job_details("eval").plain


async def test_a_job_held_back_says_whose_quota_it_would_delay() -> None:
    app = _console_at(120)
    async with app.run_test(size=(140, 40)):
        details = app.job_details("eval").plain
        assert "ReservedForHigherPriority: Would fit now, but the quota of queue team is reserved for big" in details
        assert "planned to start in 2h58m; this job needs 6h and would delay it" in details

"""A ConfigMap usher refuses reaches the operator whole: ``kubectl describe configmap`` (the
kubectl the project installs) shows the Warning Event on it, ``kubectl get events`` its every
error with its line and path on one line, within an Event's 1024 bytes (saying how many more when
cut), and the console lists every error above the queues. For the queue config and for the
operators' decisions alike."""

from __future__ import annotations

import asyncio

from harness import wait_for
from kubectl import Kubectl
from sandboxes import UsherOnSandbox, node, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)
from usher.console.app import UsherApp
from usher.engine.backends.kube.client import KubeClient
from usher.engine.backends.kube.controller import KubeController

QUEUES = "/api/v1/namespaces/usher-system/configmaps/usher-queues"
DECISIONS = "/api/v1/namespaces/usher-system/configmaps/usher-decisions"

#: two mistakes, on lines 4 and 7
TYPO = """queues:
  - name: research
    namespaceSelector: {}
    qouta: {gpu: 8}
  - name: small
    namespaceSelector: {}
    quota: {gpu: -1}
"""
TYPO_ERRORS = [
    "line 4: queues[0].qouta: unknown field (did you mean quota?)",
    "line 7: queues[1].quota.gpu: must be a number of GPUs, 0 or more (got -1)",
]
DECISIONS_TYPO = "approved:\n  nb: {by: alice}\nheld:\n  research/train: yes\n"
DECISIONS_ERRORS = [
    "line 2: approved.nb: not a job key (namespace/name or namespace/Kind/name)",
    'line 4: held["research/train"]: expected a mapping such as {by: alice, at: ...}',
]


async def _edit(sb: UsherOnSandbox, path: str, key: str, text: str) -> None:
    cm = await sb.get(path)
    cm["data"] = {**(cm.get("data") or {}), key: text}
    await sb.req("PUT", path, cm)


async def _event(sb: UsherOnSandbox, reason: str) -> dict:
    async def probe():
        items = (await sb.req("GET", "/api/v1/namespaces/usher-system/events"))["items"]
        return next((e for e in items if e["reason"] == reason), None)

    return await sb.until(probe, f"a {reason} Event")


def _events_section(described: str) -> str:
    return described.split("\nEvents:", 1)[1]


async def test_kubectl_describe_shows_every_error_of_a_refused_queue_config(sb: UsherOnSandbox) -> None:
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.start_usher(sb.tmp)
    kubectl = Kubectl(sb.kubeconfig)
    await _edit(sb, QUEUES, "queues.yaml", TYPO)
    event = await _event(sb, "InvalidQueueConfig")
    cm = await sb.get(QUEUES)
    about = event["involvedObject"]
    assert (about["kind"], about["apiVersion"], about["uid"], about["resourceVersion"]) == (
        "ConfigMap", "v1", cm["metadata"]["uid"], cm["metadata"]["resourceVersion"])

    described = await asyncio.to_thread(kubectl.ok, "describe", "configmap", "usher-queues", "-n", "usher-system")
    events = _events_section(described)
    assert "InvalidQueueConfig" in events, described
    assert "invalid queue config in usher-system/usher-queues[queues.yaml]; keeping the last good queue config; 2 errors:" in events
    assert all(error in events for error in TYPO_ERRORS), events
    listed = await asyncio.to_thread(kubectl.ok, "get", "events", "-n", "usher-system")
    line = next(x for x in listed.splitlines() if "InvalidQueueConfig" in x)
    assert all(error in line for error in TYPO_ERRORS), listed
    assert "research" in sb.usher.state.queues  # the last good config stays in force


async def test_a_refusal_with_more_errors_than_an_event_holds_says_how_many_more(sb: UsherOnSandbox) -> None:
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.start_usher(sb.tmp)
    broken = "queues:\n" + "".join(f"  - {{name: q{i}, namespaceSelector: {{}}, quota: {{gpu: -1}}}}\n" for i in range(60))
    await _edit(sb, QUEUES, "queues.yaml", broken)
    message = (await _event(sb, "InvalidQueueConfig"))["message"]
    assert len(message.encode()) <= 1024 and "\n" not in message
    shown = message.count("quota.gpu: must be a number of GPUs")
    assert 0 < shown < 60 and message.endswith(f"; … and {60 - shown} more errors, in usher's log"), message
    assert f"line {shown + 1}: queues[{shown - 1}].quota.gpu" in message  # the first ones, in file order


async def test_kubectl_describe_shows_every_error_of_refused_operator_decisions(sb: UsherOnSandbox) -> None:
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.start_usher(sb.tmp)
    kubectl = Kubectl(sb.kubeconfig)
    await _edit(sb, DECISIONS, "decisions.yaml", DECISIONS_TYPO)
    await _event(sb, "InvalidOperatorDecisions")
    described = await asyncio.to_thread(kubectl.ok, "describe", "configmap", "usher-decisions", "-n", "usher-system")
    events = _events_section(described)
    assert "invalid operator decisions in usher-system/usher-decisions[decisions.yaml]; keeping the last good ones; 2 errors:" in events
    assert all(error in events for error in DECISIONS_ERRORS), described


async def test_the_console_lists_every_error_above_the_queues(sb: UsherOnSandbox) -> None:
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.start_usher(sb.tmp)
    client = await KubeClient.connect(str(sb.kubeconfig))
    console = KubeController(client, identity="console", clock=sb.clock.now, schedule=False)
    app = UsherApp(console, speed=None)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(lambda: console.synced.is_set(), pilot)
            await pilot.press("2")
            panel = app.query_one("#config-errors")
            assert not panel.display  # every ConfigMap is good
            await _edit(sb, QUEUES, "queues.yaml", TYPO)
            await _edit(sb, DECISIONS, "decisions.yaml", DECISIONS_TYPO)
            await wait_for(lambda: panel.display and "usher-decisions" in str(panel.render()), pilot)
            shown = str(panel.render())
            assert "invalid queue config in usher-system/usher-queues[queues.yaml]; keeping the last good queue config; 2 errors:" in shown
            assert all(error in shown for error in TYPO_ERRORS + DECISIONS_ERRORS), shown
            assert "kubectl edit configmap -n usher-system usher-queues" in shown
            # the last good queues stay listed below the panel
            table = app.query_one("#queue-table")
            await wait_for(lambda: [r.key for r in table.rows if not r.key.startswith("cohort ")] == ["research", "small"], pilot)
            await _edit(sb, QUEUES, "queues.yaml", "queues:\n  - {name: research, namespaceSelector: {}, quota: {gpu: 8}}\n")
            await wait_for(lambda: "usher-queues" not in str(panel.render()), pilot)
            assert panel.display and "usher-decisions" in str(panel.render())  # still refused
    finally:
        await client.aclose()

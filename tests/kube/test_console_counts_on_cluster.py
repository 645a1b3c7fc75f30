"""The console counts what kubectl counts (issue 29, finding 1).

After the README's step (``kubectl apply -n research -f deploy/examples/`` on a sandbox of the
demo), kubectl showed 27 pods waiting ``UnknownQueue`` while the console's overview said
``4 pending``, its Jobs view filtered on ``research/`` showed nothing and its Events view lacked
the Warning Events kubectl lists: the gangs usher keeps out of its queues (unknown or forbidden
queue, invalid request, a gang short of pods) were in no count. Here the demo plays on the
sandbox with usher scheduling it, the examples are applied with kubectl, and a console watching
the cluster must agree with kubectl on every pod state and every reason a pod waits.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml
from harness import Cluster, wait_for
from kubectl import Kubectl
from usher.console.app import UsherApp
from usher.console.table import RowTable
from usher.engine.backends.kube.client import KubeClient
from usher.engine.backends.kube.controller import KubeController
from usher.engine.scenario import parse_scenario

ROOT = Path(__file__).resolve().parents[2]
#: the README's moment: the demo has run a while (jobs done, running, waiting for many reasons)
PLAYED = 7200.0


#: a pod with a scheduling rule usher cannot read (node affinity ``Gt`` a value that is no
#: integer, which the API server lets through): InvalidRequest
REFUSED = """
apiVersion: v1
kind: Pod
metadata:
  name: unreadable
  namespace: default
  labels: {usher/queue: research, app: unreadable}
spec:
  schedulerName: usher
  restartPolicy: Never
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions: [{key: gpu-generation, operator: Gt, values: [three]}]
  containers:
    - name: main
      image: busybox:1.36
      resources: {limits: {nvidia.com/gpu: 1}}
"""


@pytest.fixture
async def demo(tmp_path, monkeypatch):
    """The demo on the sandbox (its cluster's controllers and operators on), usher scheduling it,
    a console's controller and kubectl beside."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    c = Cluster(parse_scenario((ROOT / "fixtures" / "demo.yaml").read_text(), file="demo.yaml"), tmp_path)
    await c.start(world_in_process=True, controllers=True)
    await c.controller()
    (tmp_path / "admin.kubeconfig").write_text(yaml.safe_dump(c.server.kubeconfig(c.server.admin_token)))
    client = await KubeClient.connect(str(c.kubeconfig))
    console = KubeController(client, identity="console", clock=c.clock.now, schedule=False)
    try:
        yield c, console, Kubectl(tmp_path / "admin.kubeconfig")
    finally:
        await asyncio.sleep(0)
        await client.aclose()
        await c.stop()


async def kubectl_json(kubectl: Kubectl, *args: str) -> list[dict]:
    return json.loads(await asyncio.to_thread(kubectl.ok, *args, "-o", "json"))["items"]


def waits_for(pod: dict) -> str:
    """Why kubectl says an unbound pod waits: usher's reason, the head of its PodScheduled message."""
    condition = next((c for c in pod["status"].get("conditions") or [] if c["type"] == "PodScheduled"), {})
    return (condition.get("message") or "no PodScheduled condition").split(":", 1)[0]


def overview_text(app: UsherApp) -> str:
    return str(app.query_one("#overview-text").render())


async def test_the_console_counts_every_pod_usher_answers_for_as_kubectl_does(demo) -> None:
    c, console, kubectl = demo
    app = UsherApp(console, speed=None)
    async with app.run_test(size=(120, 60)) as pilot:
        await wait_for(lambda: console.synced.is_set(), pilot)
        await c.play(until=PLAYED)
        await asyncio.to_thread(kubectl.ok, "create", "namespace", "research")
        await asyncio.to_thread(kubectl.ok, "apply", "-n", "research", "-f", str(ROOT / "deploy" / "examples"))
        await asyncio.to_thread(kubectl.ok, "apply", "-f", "-", stdin=REFUSED)  # a rule usher cannot read
        c.server.controllers.step()  # the operators make their pods
        await c.settle()
        await wait_for(lambda: console.idle, pilot)
        await pilot.pause(0.6)

        pods = [p for p in await kubectl_json(kubectl, "get", "pods", "-A") if p["spec"].get("schedulerName") == "usher"]
        phases = Counter(p["status"]["phase"] for p in pods)
        reasons = Counter(waits_for(p) for p in pods if not p["spec"].get("nodeName"))
        research = [p for p in pods if p["metadata"]["namespace"] == "research"]
        # the 27 pods, the 4 of the storage examples (issue 31) and the 4 of the claims one (issue 35)
        assert reasons["UnknownQueue"] >= len(research) == 35 and reasons["InvalidRequest"] == 1, reasons
        assert {"Running", "Pending", "Succeeded"} <= set(phases), phases
        gangs: dict[str, set[str]] = {}
        for p in pods:
            if p["metadata"]["namespace"] == "default":
                gang = p["metadata"]["labels"].get("usher/gang", p["metadata"]["name"])  # the demo's gangs are labelled
                gangs.setdefault(gang, set()).add(p["status"]["phase"])
        finished = sum(1 for states in gangs.values() if states == {"Succeeded"})

        # the overview: pods by state, jobs finished, and the pods waiting for each reason
        text = overview_text(app)
        assert f"pods            {phases['Running']} running, {phases['Pending']} pending\n" in text, text
        assert re.search(rf"^jobs +\d+ running, \d+ pending, {finished} finished$", text, re.M), text
        section = text.split("Pending by reason\n", 1)[1].split("\n\n", 1)[0]
        shown = {m[1]: int(m[2]) for m in re.finditer(r"^ +\d+  (\S+) +(\d+) pods?$", section, re.M)}
        assert shown == dict(reasons), section

        # the Jobs view filtered on research/: each example, waiting, with its reason and its pods
        await pilot.press("3")
        await pilot.press("slash", *"research/", "enter")
        await pilot.pause(0.6)
        rows = {r.key: r.cells for r in app.query_one("#job-table", RowTable).rows}
        assert len(rows) == 10 and {cells[1] for cells in rows.values()} == {"Pending"}, rows
        assert {cells[7] for cells in rows.values()} == {"UnknownQueue"}, rows
        assert sum(int(cells[5]) for cells in rows.values()) == 35
        # and a row's details say why it waits and what to do
        app.query_one("#job-table", RowTable).select_key("research/llm-pretrain")
        await pilot.press("enter")
        await pilot.pause()
        page = str(app.screen.query_one("#page-text").render())
        assert "UnknownQueue: Queue 'research-vision' is not in usher-system/usher-queues" in page, page
        assert "research/llm-pretrain-" in page  # its pods
        await pilot.press("escape")
        await pilot.press("p")  # nothing of it runs: nothing to preempt (and no crash)
        assert "research/llm-pretrain is not running" in str(app.status_text), app.status_text

        # the Events view: every Warning Event of usher's that kubectl lists
        warnings = [e for e in await kubectl_json(kubectl, "get", "events", "-A", "--field-selector", "type=Warning")
                    if e.get("source", {}).get("component") == "usher"]
        assert {e["reason"] for e in warnings} >= {"UnknownQueue", "WaitingForGangMembers"}
        await pilot.press("6")
        await pilot.pause(0.6)
        listed = {(r.cells[2], r.cells[3]) for r in app.query_one("#event-table", RowTable).rows}
        missing = [(e["reason"], f"{e['involvedObject']['namespace']}/{e['involvedObject']['name']}") for e in warnings]
        assert [m for m in missing if m not in listed] == []


async def test_a_repeated_warning_is_one_line_with_its_count_as_kubectl_shows_it(tmp_path, monkeypatch) -> None:
    """usher's recorder counts a repeat on the Event already there (``kubectl get events`` shows
    one line, COUNT 3); the console's Events view shows one line too, with the count."""
    from harness import running_cluster
    from usher.engine.backends.kube.client import EventType, ObjectRef
    from usher.engine.backends.kube.events import EventRecorder

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    c = await running_cluster("name: t\nnodes: [{name: gpu-1, gpus: 8, cpu: 64, memory: 512Gi}]\n"
                              "queues: [{name: research, namespaceSelector: {}, quota: {gpu: 8}}]\njobs: []\n", tmp_path)
    client = await KubeClient.connect(str(c.kubeconfig))
    console = KubeController(client, identity="console", clock=c.clock.now, schedule=False)
    task = asyncio.create_task(console.run())
    try:
        await asyncio.wait_for(console.synced.wait(), 10)
        recorder = EventRecorder(c.controllers[0].client)
        node = ObjectRef("Node", "gpu-1", uid=c.server.store.get("nodes", "gpu-1")["metadata"]["uid"])
        for _ in range(3):
            await recorder.record(node, "UsherBindRefused", "the kubelet refused pod default/p", EventType.WARNING)
        lines = []
        for _ in range(400):
            await console.wait_idle()
            lines = [e for e in console.state.audit if e.action == "UsherBindRefused"]
            if lines and lines[0].result.endswith("(x3)"):
                break
            await asyncio.sleep(0.02)
        assert [(e.target, e.result) for e in lines] == [("gpu-1", "the kubelet refused pod default/p (x3)")]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.aclose()
        await c.stop()

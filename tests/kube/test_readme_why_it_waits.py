"""The README's why-it-waits command, run as written with the kubectl the project installs, shows
usher's reason for every pod of the gang.

kubectl 1.37 prints the Events of an object described by name, but not those of objects picked
by a selector (``--show-events`` defaults to false there): the README's
``kubectl describe pod -n research -l usher/gang=llm-pretrain`` printed no Events at all, so the
command the README promises answers "why it waits" said nothing. The reason has to come out of
the command exactly as the README gives it, after applying the example exactly as it does.
"""

from __future__ import annotations

import asyncio
import re
import shlex
from pathlib import Path

import pytest

from kubectl import Kubectl
from sandboxes import UsherOnSandbox, node, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)

ROOT = Path(__file__).resolve().parents[2]
DESCRIBE = "kubectl describe pod -n research -l usher/gang=llm-pretrain"
APPLY = "kubectl apply -n research -f deploy/examples/gang-job.yaml"
#: queues without the example's research-vision, as the README's sandbox walk-through has them
QUEUES = "queues:\n  - {name: research, namespaces: [research], quota: {gpu: 32}}\n"


def readme_commands(start: str) -> list[list[str]]:
    """Every command of the README's cluster and sandbox pages (docs/operating.md and
    docs/sandbox.md, where its "On a cluster" section went) that starts with ``start``, its
    comment dropped, as argv."""
    text = "\n".join((ROOT / "docs" / page).read_text() for page in ("operating.md", "sandbox.md"))
    lines = [line.split("  #", 1)[0].strip() for line in text.splitlines()]
    return [shlex.split(line) for line in lines if line.startswith(start)]


async def test_the_readmes_describe_command_shows_why_each_pod_of_the_gang_waits(sb: UsherOnSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the README's paths are the repository's
    describes = readme_commands(DESCRIBE)
    [apply] = readme_commands(APPLY)
    assert describes, f"the README no longer says {DESCRIBE!r}"
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.start_usher(sb.tmp, QUEUES)
    await sb.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "research"}})
    kubectl = Kubectl(sb.kubeconfig)
    await asyncio.to_thread(kubectl.ok, *apply[1:])

    async def all_told() -> bool:
        """The Job's four pods exist and usher has recorded why each waits."""
        pods = await sb.pods("usher/gang=llm-pretrain", "research")
        items = (await sb.req("GET", "/api/v1/namespaces/research/events"))["items"]
        told = {e["involvedObject"]["uid"] for e in items if e["reason"] == "UnknownQueue"}
        return len(pods) == 4 and all(p["metadata"]["uid"] in told for p in pods)

    await sb.until(all_told, "usher's UnknownQueue Event on each of the gang's pods")
    for argv in describes:
        out = await asyncio.to_thread(kubectl.ok, *argv[1:])
        pods = re.split(r"^Name:", out, flags=re.MULTILINE)[1:]
        assert len(pods) == 4, out
        for described in pods:
            assert "\nEvents:" in described, f"{shlex.join(argv)} shows no Events:\n{described}"
            events = described.split("\nEvents:", 1)[1]
            assert "UnknownQueue" in events and "usher" in events, events
            assert "Queue 'research-vision' is not in usher-system/usher-queues (queues: research)." in events

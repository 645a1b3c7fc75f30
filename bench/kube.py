"""Kube backend benchmarks: binds per second and cold start, against the sandbox over loopback.

    python bench/kube.py binds      # 1,000 nodes, 5,000 pending one-GPU pods: end-to-end binds/s
    python bench/kube.py coldstart  # 1,000 nodes, 20,000 pods: controller start to first cycle
    USHER_BENCH_POOL=8 python bench/kube.py binds   # the client's request pool at 8 connections

``binds`` also prints the CPU each process used while binding, per bind: on a shared machine that
is steadier than the rate.

The fake API server runs in its own process (``usher sandbox``, as a user would run it), so the
controller under test has this process's CPU to itself; the two share the machine's cores. The
sandbox listens on a free port it picks itself (``--port 0``) and writes its URL into the
kubeconfig, which this process reads. The sandbox creates the pods at scenario time 0; the
controller starts once they all exist. The sandbox serves HTTPS with a CA it makes at start and
writes into the kubeconfig (``certificate-authority-data``); this process's own HTTP clients
trust that CA and nothing else (``trust``), as the controller's client does, so a certificate
error is an error here too.

``USHER_BENCH_TREE`` runs the benchmark against another checkout of usher (its ``src``,
``engine``, ``sandbox`` packages put first on ``sys.path``, for both processes), so one script
measures two trees back to back; the tree in use is printed first.
"""

from __future__ import annotations

import asyncio
import base64
import os
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

if os.environ.get("USHER_BENCH_TREE"):  # before usher is imported: measure that tree's code
    sys.path.insert(0, os.environ["USHER_BENCH_TREE"])

import usher  # noqa: E402
from usher.engine.backends.kube.client import KubeClient  # noqa: E402
from usher.engine.backends.kube.controller import KubeController  # noqa: E402


def trust(kubeconfig: Path) -> ssl.SSLContext | bool:
    """What this process's HTTP clients verify the sandbox with: its CA from the kubeconfig
    (``certificate-authority-data``); True (the system's CAs) when the kubeconfig carries none."""
    doc = yaml.safe_load(kubeconfig.read_text())
    data = (doc["clusters"][0]["cluster"] or {}).get("certificate-authority-data")
    if not data:
        return True
    return ssl.create_default_context(cadata=base64.b64decode(data).decode())


def scenario(nodes: int, pods: int) -> str:
    lines = [
        "name: kube-bench",
        "topology: {levels: [usher/rack, kubernetes.io/hostname]}",
        "nodeGroups:",
        f"  - {{prefix: n, count: {nodes}, layout: {{usher/rack: 16}}, template: {{gpus: 8, gpuModel: H100}}}}",
        "queues: [{name: q}]",
        "jobs:",
    ]
    lines += [f"  - {{name: j{i}, queue: q, pods: [{{gpu: 1}}]}}" for i in range(pods)]
    return "\n".join(lines) + "\n"


async def wait_for_pods(url: str, want: int, verify: ssl.SSLContext | bool) -> float:
    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=60, verify=verify) as http:
        while True:
            r = await http.get("/api/v1/namespaces/default/pods", params={"limit": "1"})
            if r.status_code == 200:
                remaining = r.json()["metadata"].get("remainingItemCount")
                have = (remaining or 0) + len(r.json()["items"])
                if have >= want:
                    return time.perf_counter() - started
            await asyncio.sleep(0.5)


async def sandbox_url(kubeconfig: Path, process: subprocess.Popen[bytes], wait: float = 60.0) -> str:
    """The server URL the sandbox wrote into ``kubeconfig`` once it listens (on a port of its choosing)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the sandbox exited with {process.returncode} before it served")
        try:
            doc = yaml.safe_load(kubeconfig.read_text())
            return str(doc["clusters"][0]["cluster"]["server"])
        except (OSError, yaml.YAMLError, KeyError, IndexError, TypeError):
            await asyncio.sleep(0.1)  # not written yet, or half written
    raise SystemExit(f"the sandbox wrote no kubeconfig in {wait:.0f}s")


async def count(url: str, path: str, params: dict[str, str], verify: ssl.SSLContext | bool) -> int:
    """How many objects a list would return (one item fetched, the rest counted by the server)."""
    async with httpx.AsyncClient(base_url=url, timeout=60, verify=verify) as http:
        r = await http.get(path, params={**params, "limit": "1"})
        r.raise_for_status()
        return (r.json()["metadata"].get("remainingItemCount") or 0) + len(r.json()["items"])


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) a process has used so far, from ``/proc`` (None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(nodes: int, pods: int, what: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        path.write_text(scenario(nodes, pods))
        kubeconfig = Path(tmp) / "kubeconfig"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if os.environ.get("USHER_BENCH_TREE"):
            env["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ["USHER_BENCH_TREE"], env.get("PYTHONPATH")) if p)
        sandbox = subprocess.Popen(
            [sys.executable, "-m", "usher", "sandbox", str(path), "--port", "0", "--kubeconfig-out", str(kubeconfig), "--speed", "1"],
            stderr=subprocess.DEVNULL,
            env=env,
        )
        try:
            url = await sandbox_url(kubeconfig, sandbox)
            verify = trust(kubeconfig)
            setup = await wait_for_pods(url, pods, verify)
            print(f"sandbox ready: {nodes} nodes, {pods} pods created in {setup:.1f}s")
            pool = int(os.environ.get("USHER_BENCH_POOL", "0")) or None  # experiments with the pool's size
            client = await KubeClient.connect(str(kubeconfig), **({"pool_size": pool} if pool else {}))
            ctrl = KubeController(client, identity="bench", elect=False, status_interval=3600.0)
            started = time.perf_counter()
            task = asyncio.create_task(ctrl.run())
            await ctrl.synced.wait()
            synced = time.perf_counter()
            while ctrl.stats.first_cycle_at is None:
                await asyncio.sleep(0.01)
            first_cycle = ctrl.stats.first_cycle_at
            print(f"cold start: list + mirror {synced - started:.2f}s, first cycle done at {first_cycle - started:.2f}s")
            if what == "binds":
                cpu, sandbox_cpu = time.process_time(), process_cpu(sandbox.pid)
                while ctrl.stats.binds + ctrl.stats.bind_errors < pods:
                    await asyncio.sleep(0.05)
                done = time.perf_counter()
                print(
                    f"binds: {ctrl.stats.binds} in {done - first_cycle:.2f}s after the first cycle = "
                    f"{ctrl.stats.binds / (done - first_cycle):.0f} binds/s ({ctrl.stats.bind_errors} errors)"
                )
                # the Scheduled Events go out behind the binds (a share of the connections): the
                # CPU below covers them too
                scheduled = {"fieldSelector": "reason=Scheduled"}
                while (events := await count(url, "/api/v1/namespaces/default/events", scheduled, verify)) < ctrl.stats.binds:
                    if time.perf_counter() - done > 120:
                        break
                    await asyncio.sleep(0.2)
                print(f"Scheduled Events: {events} recorded {time.perf_counter() - done:.1f}s after the last bind")
                cpu, sandbox_cpu_end = time.process_time() - cpu, process_cpu(sandbox.pid)
                per_bind = 1000 / max(ctrl.stats.binds, 1)
                sandbox_part = (
                    f", sandbox {sandbox_cpu_end - sandbox_cpu:.1f}s ({(sandbox_cpu_end - sandbox_cpu) * per_bind:.2f} ms per bind)"
                    if sandbox_cpu is not None and sandbox_cpu_end is not None else ""
                )
                print(f"CPU from the first cycle to the last Event: controller {cpu:.1f}s ({cpu * per_bind:.2f} ms per bind){sandbox_part}")
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.aclose()
        finally:
            sandbox.terminate()
            sandbox.wait(10)


def main(argv: list[str]) -> None:
    which = argv or ["binds", "coldstart"]
    import usher.engine
    print(f"usher from {Path(usher.__file__).parent} (engine: {Path(usher.engine.__file__).resolve().parent})")
    for name in which:
        if name == "binds":
            asyncio.run(measure(1000, 5000, "binds"))
        elif name == "coldstart":
            asyncio.run(measure(1000, 20000, "coldstart"))
        else:
            raise SystemExit(f"unknown benchmark {name!r} (binds, coldstart)")


if __name__ == "__main__":
    main(sys.argv[1:])

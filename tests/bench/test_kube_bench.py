"""bench/kube.py talks to a sandbox that serves HTTPS with a CA of its own: its HTTP clients
trust that CA, read from the kubeconfig the sandbox wrote, and nothing else."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml
from bench_scripts import load

from usher.sandbox.apiserver import FakeApiServer
from usher.sandbox.store import Store


async def test_the_benchmarks_clients_trust_the_sandboxs_ca_from_the_kubeconfig(tmp_path: Path) -> None:
    kube = load("kube")
    server = FakeApiServer(Store(), tls=True)
    await server.start(port=0)
    try:
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(server.kubeconfig(server.admin_token)))
        # what the benchmark does before it measures: count the pods
        assert await kube.count(server.url, "/api/v1/namespaces/default/pods", {}, kube.trust(path)) == 0
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await kube.count(server.url, "/api/v1/namespaces/default/pods", {}, True)  # the system's CAs only
    finally:
        await server.stop()

"""The agent tests' API server: the sandbox's, over HTTP, with a client connected as a user's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from usher.engine.backends.kube.client import KubeClient
from usher.sandbox.apiserver import FakeApiServer
from usher.sandbox.serve import kubeconfig


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[KubeClient]:
    server = FakeApiServer()
    port = await server.start(port=0)
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig(f"http://127.0.0.1:{port}"))
    client = await KubeClient.connect(str(path))
    try:
        yield client
    finally:
        await client.aclose()
        await server.stop()

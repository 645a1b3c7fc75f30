"""The agent tests' API server: the sandbox's, over HTTP, with a client connected as a user's.

Imported by the test modules that use the fixtures (not a conftest.py: the tests import the root
conftest by its module name, which a second conftest.py would shadow)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from usher.engine.backends.kube.client import KubeClient
from usher.sandbox.apiserver import FakeApiServer


@pytest.fixture
async def server() -> AsyncIterator[FakeApiServer]:
    fake = FakeApiServer()
    await fake.start(port=0)
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture
async def api(server: FakeApiServer, tmp_path: Path) -> AsyncIterator[KubeClient]:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(server.kubeconfig()))
    client = await KubeClient.connect(str(path))
    try:
        yield client
    finally:
        await client.aclose()

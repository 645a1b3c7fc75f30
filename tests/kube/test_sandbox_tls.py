"""``usher sandbox`` serves HTTPS: clients nobody here wrote verify it, and tokens tell users apart.

kubectl sends no bearer token to a plain-HTTP server, so a ServiceAccount's token only means
something to ``usher sandbox --rbac`` over TLS. These tests run the real command, as the README's
walk-through does, and talk to it with kubectl and the official ``kubernetes`` client through the
kubeconfig it writes (its CA in ``certificate-authority-data``); then usher's own client and
``usher --no-ui`` against a server whose CA they were not given: one line naming the server.
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubectl import Kubectl
from kubernetes.client import ApiClient, Configuration, CoreV1Api
from kubernetes.client.rest import ApiException
from kubernetes.config import load_kube_config
from usher.engine.backends.kube.client import KubeClient, ServerNotTrusted
from usher.sandbox.apiserver import FakeApiServer, ServerThread
from usher.sandbox.tls import CertificateAuthority

SCENARIO = """\
name: tls
nodes: [{name: gpu-1, gpus: 8, cpu: 64, memory: 512Gi}, {name: gpu-2, gpus: 8, cpu: 64, memory: 512Gi}]
queues: [{name: research, namespaceSelector: {}, quota: {gpu: 16}}]
jobs: []
"""
BOT = "system:serviceaccount:team:bot"


class UsherSandbox:
    """``usher sandbox --rbac`` in a subprocess, on a port it picks, until :meth:`stop`."""

    def __init__(self, tmp: Path) -> None:
        scenario = tmp / "tls.yaml"
        scenario.write_text(SCENARIO)
        self.kubeconfig = tmp / "usher-sandbox.kubeconfig"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "usher", "sandbox", str(scenario), "--rbac", "--port", "0", "--speed", "1",
             "--kubeconfig-out", str(self.kubeconfig)],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        assert self.process.stderr is not None
        said = []
        for line in self.process.stderr:  # it says how to use it once the cluster is set up
            said.append(line)
            if line.startswith("Ctrl-C stops the sandbox"):
                break
        else:
            raise AssertionError("usher sandbox ended before it served:\n" + "".join(said))
        self.config: dict[str, Any] = yaml.safe_load(self.kubeconfig.read_text())
        self.kubectl = Kubectl(self.kubeconfig)

    @property
    def cluster(self) -> dict[str, Any]:
        return self.config["clusters"][0]["cluster"]

    def variant(self, path: Path, token: str | None = None, **cluster: Any) -> Path:
        """The written kubeconfig with another user's ``token`` or its cluster's fields changed
        (a value of None removes one)."""
        config = copy.deepcopy(self.config)
        if token is not None:
            config["users"][0]["user"] = {"token": token}
        entry = config["clusters"][0]["cluster"]
        for key, value in cluster.items():
            key = key.replace("_", "-")
            if value is None:
                entry.pop(key, None)
            else:
                entry[key] = value
        path.write_text(yaml.safe_dump(config))
        return path

    def stop(self) -> None:
        self.process.terminate()  # SIGTERM: it stops the way Ctrl-C stops it
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        assert self.process.stderr is not None
        self.process.stderr.close()


@pytest.fixture(scope="module")
def usher_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UsherSandbox]:
    box = UsherSandbox(tmp_path_factory.mktemp("usher-sandbox"))
    try:
        yield box
    finally:
        box.stop()


def test_usher_sandbox_writes_an_https_kubeconfig_that_carries_its_ca(usher_sandbox: UsherSandbox) -> None:
    assert usher_sandbox.cluster["server"].startswith("https://127.0.0.1:")
    ca = base64.b64decode(usher_sandbox.cluster["certificate-authority-data"])
    assert ca.startswith(b"-----BEGIN CERTIFICATE-----")
    # kubectl verifies the server with it (no --insecure-skip-tls-verify anywhere), as the admin
    assert {"gpu-1", "gpu-2"} <= set(usher_sandbox.kubectl.ok("get", "nodes", "-o", "name").replace("node/", "").split())


def test_kubectl_with_a_service_account_token_is_that_service_account(usher_sandbox: UsherSandbox) -> None:
    """The README's --rbac walk-through: ``kubectl create token`` gives a token whose requests
    are held to RBAC as the ServiceAccount (over plain HTTP kubectl would drop it: anonymous)."""
    kubectl = usher_sandbox.kubectl
    kubectl.ok("create", "namespace", "team")
    kubectl.ok("create", "serviceaccount", "bot", "-n", "team")
    token = kubectl.ok("create", "token", "bot", "-n", "team").strip()
    as_bot = ("--token", token)

    denied = kubectl.run(*as_bot, "get", "pods", "-n", "team")
    assert denied.returncode != 0
    assert f'User "{BOT}" cannot list resource "pods" in API group "" in the namespace "team"' in denied.stderr
    assert "system:anonymous" not in denied.stderr

    kubectl.ok("create", "role", "reader", "--verb=get,list", "--resource=pods", "-n", "team")
    kubectl.ok("create", "rolebinding", "reader", "--role=reader", "--serviceaccount=team:bot", "-n", "team")
    kubectl.ok(*as_bot, "get", "pods", "-n", "team")
    elsewhere = kubectl.run(*as_bot, "get", "pods", "-n", "default")
    assert elsewhere.returncode != 0 and f'User "{BOT}" cannot list resource "pods"' in elsewhere.stderr


def test_kubectl_refuses_the_sandbox_without_its_ca(usher_sandbox: UsherSandbox, tmp_path: Path) -> None:
    blind = Kubectl(usher_sandbox.variant(tmp_path / "no-ca", certificate_authority_data=None))
    failed = blind.run("get", "nodes")
    assert failed.returncode != 0 and "certificate signed by unknown authority" in failed.stderr
    skipping = Kubectl(usher_sandbox.variant(tmp_path / "skip", certificate_authority_data=None,
                                             insecure_skip_tls_verify=True))
    assert "gpu-1" in skipping.ok("get", "nodes")


def test_the_official_client_verifies_the_sandbox_through_the_written_kubeconfig(
    usher_sandbox: UsherSandbox, tmp_path: Path
) -> None:
    config = Configuration()
    load_kube_config(config_file=str(usher_sandbox.kubeconfig), client_configuration=config)
    with ApiClient(config) as api:
        assert {"gpu-1", "gpu-2"} <= {n.metadata.name for n in CoreV1Api(api).list_node().items}
        CoreV1Api(api).create_namespaced_service_account("default", {"metadata": {"name": "reader"}})
        token = CoreV1Api(api).create_namespaced_service_account_token(
            "reader", "default", {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
        ).status.token
    reader = Configuration()
    load_kube_config(config_file=str(usher_sandbox.variant(tmp_path / "reader", token=token)), client_configuration=reader)
    with ApiClient(reader) as api, pytest.raises(ApiException) as denied:
        CoreV1Api(api).list_namespaced_secret("default")
    assert denied.value.status == 403
    assert 'User "system:serviceaccount:default:reader" cannot list resource "secrets"' in json.loads(denied.value.body)["message"]

    blind = Configuration()
    load_kube_config(config_file=str(usher_sandbox.variant(tmp_path / "no-ca", certificate_authority_data=None)),
                     client_configuration=blind)
    blind.retries = False
    with ApiClient(blind) as api, pytest.raises(ApiException) as refused:
        CoreV1Api(api).list_node()
    assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value)


def test_usher_no_ui_refuses_a_server_whose_ca_it_was_not_given_in_one_line(
    usher_sandbox: UsherSandbox, tmp_path: Path
) -> None:
    other = CertificateAuthority()
    for name, cluster in (("no-ca", {"certificate_authority_data": None}),
                          ("wrong-ca", {"certificate_authority_data": other.data})):
        path = usher_sandbox.variant(tmp_path / name, **cluster)
        run = subprocess.run([sys.executable, "-m", "usher", "--no-ui", "--kubeconfig", str(path)],
                             capture_output=True, text=True, timeout=60, check=False)
        assert run.returncode != 0
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1, run.stderr
        assert lines[0].startswith(f"usher: the API server at {usher_sandbox.cluster['server']} presented a certificate "
                                   "that does not verify")
        assert "certificate-authority-data" in lines[0]


async def test_usher_client_trusts_the_ca_it_is_given_and_nothing_else(tmp_path: Path) -> None:
    server = FakeApiServer(tls=True)
    await server.start(port=0)
    try:
        good = server.kubeconfig()
        ca_file = tmp_path / "ca.crt"
        assert server.ca is not None
        ca_file.write_bytes(server.ca.pem)

        def written(name: str, **cluster: Any) -> str:
            config = copy.deepcopy(good)
            entry = config["clusters"][0]["cluster"]
            for key, value in cluster.items():
                if value is None:
                    entry.pop(key, None)
                else:
                    entry[key] = value
            (tmp_path / name).write_text(yaml.safe_dump(config))
            return str(tmp_path / name)

        trusted = [
            written("data"),
            written("file", **{"certificate-authority-data": None, "certificate-authority": str(ca_file)}),
            written("skip", **{"certificate-authority-data": None, "insecure-skip-tls-verify": True}),
            written("by-name", **{"tls-server-name": "localhost"}),
        ]
        for path in trusted:
            async with await KubeClient.connect(path) as kube:
                assert (await kube.get("/api/v1/namespaces/default"))["metadata"]["name"] == "default"

        answered = server.count()
        untrusted = {
            "no CA": written("none", **{"certificate-authority-data": None}),
            "another CA": written("other", **{"certificate-authority-data": CertificateAuthority().data}),
            "another name": written("elsewhere", **{"tls-server-name": "elsewhere.example"}),
        }
        for why, path in untrusted.items():
            retries: list[float] = []

            async def sleep(delay: float) -> None:
                retries.append(delay)

            with pytest.raises(ServerNotTrusted) as refused:
                await KubeClient.connect(path, sleep=sleep)
            message = str(refused.value)
            assert "\n" not in message and server.url in message, why
            assert retries == [], f"{why}: a certificate that does not verify is not worth a repeat"
        assert "elsewhere.example" in message
        assert server.count() == answered  # nothing was sent to it
    finally:
        await server.stop()


def test_a_restarted_server_keeps_its_ca_and_the_kubeconfig_that_trusts_it(tmp_path: Path) -> None:
    ca = CertificateAuthority()
    with ServerThread(FakeApiServer(tls=ca)) as first:
        config = first.server.kubeconfig(first.server.admin_token)
        port = int(first.url.rsplit(":", 1)[1])
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    with ServerThread(FakeApiServer(tls=ca), port=port):
        assert "default" in Kubectl(path).ok("get", "namespaces", "-o", "name")

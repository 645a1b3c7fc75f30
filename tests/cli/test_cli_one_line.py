"""Failures the README promises as one line (exit 1, no traceback), and launches that print nothing
they need not: a second ``usher --no-ui`` on a taken metrics port, the bundled demo."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from usher.sandbox.apiserver import FakeApiServer, ServerThread


def usher(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "usher", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig for an API server that answers (HTTPS, the admin's token)."""
    with ServerThread(FakeApiServer(tls=True)) as thread:
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(thread.server.kubeconfig(thread.server.admin_token)))
        yield path


def test_a_taken_metrics_port_is_one_line_naming_it_with_every_session_closed(kubeconfig: Path, tmp_path: Path) -> None:
    with socket.socket() as taken:  # what a first `usher --no-ui` holds
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = usher("--no-ui", "--kubeconfig", str(kubeconfig), "--metrics-host", "127.0.0.1", "--metrics-port", str(port),
                    cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert out.stderr.splitlines() == [
        f"usher: --metrics-port {port}: cannot listen on 127.0.0.1:{port}: address already in use "
        "(another usher --no-ui? choose another with --metrics-port)"
    ]


def test_the_demo_launches_without_a_warning_about_its_own_file(tmp_path: Path) -> None:
    out = usher("demo", "--no-ui", "--until", "10m", "--report", "demo.json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    [line] = out.stderr.splitlines()  # the report's line, nothing before it
    assert re.fullmatch(r".*demo\.yaml: replayed to 10m in \d+ cycles?; report: demo\.json", line), line


def test_the_demos_only_warning_is_its_deliberate_wait_which_check_still_reports(tmp_path: Path) -> None:
    from usher.cli import demo_path

    out = usher("check", str(demo_path()), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    warnings = [line for line in out.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and warnings[0].endswith(
        "jobs[16].pods[0].gpuModel: no node has GPU model A100; the job will stay pending"), out.stderr

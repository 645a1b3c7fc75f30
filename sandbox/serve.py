"""``usher sandbox FILE``: a scenario's cluster served as a Kubernetes API on 127.0.0.1.

It starts the fake API server over HTTPS (with a CA made at start, :mod:`usher.sandbox.tls`),
creates the scenario's nodes and queue config, writes a kubeconfig that points at it and carries
the CA, and plays the scenario in wall time (``--speed`` scenario seconds per second):
pods appear at their submit times, bound pods run for their duration and succeed, the events
happen. The cluster's own controllers run beside (:mod:`usher.sandbox.controllers`): a kubelet on
every node, the taint manager, the default scheduler, the Job, ReplicaSet/Deployment, DaemonSet
and StatefulSet controllers, and stand-ins for the JobSet, Kubeflow (PyTorchJob, TFJob, MPIJob),
KubeRay and LeaderWorkerSet operators with their CRDs (:mod:`usher.sandbox.operators`), so
``kubectl apply -f deploy/`` and the examples behave as on a cluster. ``--workload-api`` picks
the release whose Workload API (``scheduling.k8s.io``) it serves, 1.35's by default
(:mod:`usher.sandbox.workload_api_beta`), and ``--feature-gates WorkloadWithJob`` turns on 1.37's
Job integration.
Then, in other terminals::

    usher --no-ui --kubeconfig usher-sandbox.kubeconfig    # schedule it
    usher --kubeconfig usher-sandbox.kubeconfig            # watch it in the console
    kubectl --kubeconfig usher-sandbox.kubeconfig get pods,nodes
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Collection
from pathlib import Path

import yaml

from usher.engine.scenario import Scenario
from usher.signals import cancel_on_signals

from .apiserver import FakeApiServer
from .workload_api_beta import Gate, Release
from .workload_api_beta import serve as serve_workload_api
from .world import WallClock, World


def kubeconfig(server: FakeApiServer) -> str:
    """A kubeconfig for the sandbox, as YAML: its URL and (over HTTPS) its CA, and the admin's
    token (which matters with ``--rbac``)."""
    return yaml.safe_dump(server.kubeconfig(token=server.admin_token), sort_keys=False)


async def serve(scenario: Scenario, port: int, kubeconfig_out: Path, speed: float, rbac: bool = False,
                workload_api: Release = Release.V1_35, gates: Collection[Gate] = ()) -> int:
    """``rbac``: authenticate and authorize as a real cluster (see :mod:`usher.sandbox.auth`); the
    kubeconfig then holds the admin's token, and ServiceAccounts get theirs with a TokenRequest.
    Always HTTPS, with a CA made now (:mod:`usher.sandbox.tls`), carried in the kubeconfig:
    kubectl sends no bearer token over plain HTTP, so ``--rbac`` needs TLS to tell users apart."""
    server = FakeApiServer(authorization=rbac, controllers=True, tls=True)
    serve_workload_api(server.store, workload_api, gates)  # the release's Workload API, before anyone asks
    await server.start(host="127.0.0.1", port=port)
    url = server.url
    kubeconfig_out.write_text(kubeconfig(server))
    world = World(scenario, url, WallClock(speed), time_scale=1.0 / speed, server=server, verify=server.verify)
    world.http.headers["Authorization"] = f"Bearer {server.admin_token}"
    await world.setup()
    nodes = scenario.all_nodes()
    print(
        f"usher sandbox: {scenario.name}: {len(nodes)} nodes, {sum(n.gpus for n in nodes)} GPUs, "
        f"{len(scenario.all_jobs())} jobs at {speed:g}x, serving {url} (TLS, the CA in the kubeconfig)\n"
        f"kubeconfig: {kubeconfig_out}\n"
        f"  usher --no-ui --kubeconfig {kubeconfig_out}     # schedule it (another terminal)\n"
        f"  usher --kubeconfig {kubeconfig_out}             # the console\n"
        f"  kubectl --kubeconfig {kubeconfig_out} get pods,nodes\n"
        "Ctrl-C stops the sandbox.",
        file=sys.stderr,
        flush=True,
    )
    cancel_on_signals()
    try:
        await world.run()
    except asyncio.CancelledError:
        pass
    finally:
        await world.aclose()
        await server.stop()
    return 0

"""Stand-ins for the operators AI teams run: JobSet, Kubeflow training jobs, KubeRay, LeaderWorkerSet.

Each is a :class:`~usher.sandbox.parts.Part` of :class:`~usher.sandbox.controllers.Controllers`
(as the workload controllers of :mod:`usher.sandbox.workloads` are), reconciling the custom
resources of the CRDs :mod:`usher.sandbox.crds` serves into the children the real operator
creates, with the real names, labels, annotations and controller ``ownerReferences``
(``controller: true``, ``blockOwnerDeletion: true``, so the garbage collector takes them with
their owner), and a status that moves as the children run. The shapes were read from each
project's source and docs at the version named; the pods keep the template's ``schedulerName``
(a scheduler such as usher binds them; without one the sandbox's default scheduler does).

One module per operator, each a small integration behind :class:`~usher.sandbox.operator_base.CustomPart`
(the shapes of each are in its module): :mod:`.statefulset_controller`, :mod:`.operator_jobset`,
:mod:`.operator_kubeflow` (PyTorchJob, TFJob, MPIJob), :mod:`.operator_kuberay` (RayCluster,
RayJob), :mod:`.operator_lws`. This module wires them into :func:`operator_parts` and re-exports
their classes.

Not modelled: gang-scheduler integration (PodGroups the operators create for Volcano or
coscheduling), webhooks' validation, rolling updates of a changed template, autoscaling
(``workersToDelete``), JobSet ``startupPolicy: InOrder``/``coordinator``/TTL,
Kubeflow ``backoffLimit``/``activeDeadlineSeconds``/TTL, MPI's launcher RBAC and kubectl
delivery, elastic PyTorch's HPA, RayJob ``clusterSelector`` and HTTP submission, LWS ``subGroupPolicy`` and
``UniquePerReplica`` subdomains, events.

Sources read (no code copied): kubernetes-sigs/jobset ``api/jobset/v1alpha2/jobset_types.go``,
``pkg/controllers/jobset_controller.go``, ``pkg/controllers/constants``, the JobSet webhook's
``Default``; kubeflow/training-operator ``pkg/controller.v1/common/{pod,job_controller}.go``,
``pytorch/{envvar,master,elastic,pytorchjob_controller}.go``, ``mpi/mpijob_controller.go``,
``tensorflow`` ``IsMasterRole``; ray-project/kuberay ``ray-operator/controllers/ray/utils/{constant,util}.go``,
``common/pod.go`` (``labelPod``), ``raycluster_controller.go`` (``buildWorkerPod``); kubernetes-sigs/lws
``pkg/webhooks/pod_webhook.go``, ``pkg/controllers/pod_controller.go`` and the "Labels, Annotations
and Environment Variables" reference page.
"""

from __future__ import annotations

from .operator_base import CustomPart, sha1
from .operator_jobset import JobSetController
from .operator_kubeflow import MPIJobController, PyTorchJobController, TFJobController
from .operator_kuberay import RayClusterController, RayJobController
from .operator_lws import LeaderWorkerSetController
from .parts import Host
from .statefulset_controller import StatefulSetController
from .workloads import OwnerPart


# ====================================================================== wiring


def operator_parts(mgr: Host) -> list[OwnerPart]:
    """The StatefulSet controller and the operator stand-ins, in the order they should run."""
    statefulsets = StatefulSetController(mgr)
    return [
        JobSetController(mgr),
        PyTorchJobController(mgr),
        TFJobController(mgr),
        MPIJobController(mgr),
        RayJobController(mgr),
        RayClusterController(mgr),
        LeaderWorkerSetController(mgr, statefulsets),
        statefulsets,
    ]


__all__ = [
    "CustomPart", "JobSetController", "LeaderWorkerSetController", "MPIJobController", "PyTorchJobController",
    "RayClusterController", "RayJobController", "StatefulSetController", "TFJobController", "operator_parts", "sha1",
]

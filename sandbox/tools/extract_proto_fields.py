"""Extract the field tables of Kubernetes ``generated.proto`` files into ``sandbox/protobuf_fields.json``.

The sandbox decodes ``application/vnd.kubernetes.protobuf`` request bodies (see ``sandbox/protobuf.py``)
with a table ``message -> field number -> [jsonName, type, repeated, mapKey, mapValue, flags]``; this
script builds that table from the public proto files of ``k8s.io/api`` and ``k8s.io/apimachinery``
(go-to-protobuf output: field names there are the JSON names).

Regenerate (the proto files are not kept in this repository)::

    git clone --depth 1 https://github.com/kubernetes/api /tmp/k8s-api
    git clone --depth 1 https://github.com/kubernetes/apimachinery /tmp/k8s-apimachinery
    python sandbox/tools/extract_proto_fields.py \\
        /tmp/k8s-api/{core,apps,batch,rbac,scheduling,policy,authentication,coordination,networking}/v1/generated.proto \\
        /tmp/k8s-apimachinery/pkg/apis/meta/v1/generated.proto \\
        /tmp/k8s-apimachinery/pkg/runtime/generated.proto \\
        /tmp/k8s-apimachinery/pkg/util/intstr/generated.proto \\
        /tmp/k8s-apimachinery/pkg/api/resource/generated.proto \\
        sandbox/tools/auth_reviews.proto > sandbox/protobuf_fields.json

(``auth_reviews.proto`` is a stripped excerpt kept here: the access and rules reviews of
``authorization.k8s.io/v1`` and the SelfSubjectReview of ``authentication.k8s.io/v1``.)

Flags per field: ``"req"`` a scalar with no ``+optional`` marker (its zero value is kept, as Go's JSON
without ``omitempty`` would), ``"ptr"`` a pointer scalar (zero value kept: it was set explicitly; from
:data:`POINTERS`, proto files do not say), ``"inline"`` a Go-embedded struct (``json:",inline"``), whose
fields go to the parent object. A file may also be a stripped excerpt in which every field is optional
unless its line ends in ``//req`` (the first line then reads ``// stripped``).
"""

from __future__ import annotations

import json
import re
import sys

PACKAGE_PREFIXES = (
    ".k8s.io.apimachinery.pkg.apis.meta.v1.",
    "k8s.io.apimachinery.pkg.apis.meta.v1.",
    ".k8s.io.apimachinery.pkg.runtime.",
    "k8s.io.apimachinery.pkg.runtime.",
    ".k8s.io.apimachinery.pkg.util.intstr.",
    "k8s.io.apimachinery.pkg.util.intstr.",
    ".k8s.io.apimachinery.pkg.api.resource.",
    "k8s.io.apimachinery.pkg.api.resource.",
    ".k8s.io.api.core.v1.",
    "k8s.io.api.core.v1.",
)

# Pointer scalars (Go ``*int32``, ``*bool``, ``*string``...): an explicit zero is data, not "unset".
POINTERS = {
    "ObjectMeta": {"deletionGracePeriodSeconds"},
    "OwnerReference": {"controller", "blockOwnerDeletion"},
    "DeleteOptions": {"gracePeriodSeconds", "orphanDependents", "propagationPolicy", "ignoreStoreReadErrorWithClusterBreakingPotential"},
    "Preconditions": {"uid", "resourceVersion"},
    "ConfigMap": {"immutable"},
    "Secret": {"immutable"},
    "ServiceAccount": {"automountServiceAccountToken"},
    "PodSpec": {
        "terminationGracePeriodSeconds", "activeDeadlineSeconds", "automountServiceAccountToken",
        "shareProcessNamespace", "priority", "enableServiceLinks", "preemptionPolicy",
        "setHostnameAsFQDN", "hostUsers", "hostnameOverride",
    },
    "Container": {"restartPolicy"},
    "EphemeralContainerCommon": {"restartPolicy"},
    "SecurityContext": {
        "privileged", "runAsUser", "runAsGroup", "runAsNonRoot", "readOnlyRootFilesystem",
        "allowPrivilegeEscalation", "procMount",
    },
    "PodSecurityContext": {"runAsUser", "runAsGroup", "runAsNonRoot", "fsGroup", "fsGroupChangePolicy", "supplementalGroupsPolicy", "seLinuxChangePolicy"},
    "WindowsSecurityContextOptions": {"gmsaCredentialSpecName", "gmsaCredentialSpec", "runAsUserName", "hostProcess"},
    "Probe": {"terminationGracePeriodSeconds"},
    "Toleration": {"tolerationSeconds"},
    "ConfigMapVolumeSource": {"defaultMode", "optional"},
    "SecretVolumeSource": {"defaultMode", "optional"},
    "ProjectedVolumeSource": {"defaultMode"},
    "DownwardAPIVolumeSource": {"defaultMode"},
    "DownwardAPIVolumeFile": {"mode"},
    "KeyToPath": {"mode"},
    "ConfigMapEnvSource": {"optional"},
    "SecretEnvSource": {"optional"},
    "ConfigMapKeySelector": {"optional"},
    "SecretKeySelector": {"optional"},
    "ConfigMapProjection": {"optional"},
    "SecretProjection": {"optional"},
    "FileKeySelector": {"optional"},
    "ServiceAccountTokenProjection": {"expirationSeconds"},
    "ClusterTrustBundleProjection": {"name", "signerName", "optional"},
    "HostPathVolumeSource": {"type"},
    "EmptyDirVolumeSource": set(),
    "CSIVolumeSource": {"readOnly", "fsType"},
    "GRPCAction": {"service"},
    "ClientIPConfig": {"timeoutSeconds"},
    "ServiceSpec": {"ipFamilyPolicy", "allocateLoadBalancerNodePorts", "loadBalancerClass", "internalTrafficPolicy", "trafficDistribution"},
    "ServicePort": {"appProtocol"},
    "TopologySpreadConstraint": {"minDomains", "nodeAffinityPolicy", "nodeTaintsPolicy"},
    "VolumeMount": {"mountPropagation", "recursiveReadOnly"},
    "PersistentVolumeClaimSpec": {"storageClassName", "volumeMode", "volumeAttributesClassName"},
    "TypedLocalObjectReference": {"apiGroup"},
    "TypedObjectReference": {"apiGroup", "namespace"},
    "AppArmorProfile": {"localhostProfile"},
    "SeccompProfile": {"localhostProfile"},
    "Lifecycle": {"stopSignal"},
    "PodResourceClaim": {"resourceClaimName", "resourceClaimTemplateName"},
    "DeploymentSpec": {"replicas", "revisionHistoryLimit", "progressDeadlineSeconds"},
    "ReplicaSetSpec": {"replicas"},
    "JobSpec": {
        "parallelism", "completions", "activeDeadlineSeconds", "backoffLimit", "backoffLimitPerIndex",
        "maxFailedIndexes", "manualSelector", "ttlSecondsAfterFinished", "completionMode", "suspend",
        "podReplacementPolicy", "managedBy",
    },
    "CronJobSpec": {"startingDeadlineSeconds", "suspend", "successfulJobsHistoryLimit", "failedJobsHistoryLimit", "timeZone"},
    "PriorityClass": {"preemptionPolicy"},
    "PodDisruptionBudgetSpec": {"unhealthyPodEvictionPolicy"},
    "TokenRequestSpec": {"expirationSeconds"},
    "LeaseSpec": {"holderIdentity", "leaseDurationSeconds", "leaseTransitions", "strategy", "preferredHolder"},
}

# Go-embedded structs (``json:",inline"``); proto files do not say (an embedded field is named after its
# type, as many ordinary fields are), so they are listed.
INLINE = {
    ("Probe", "handler"),
    ("Volume", "volumeSource"),
    ("PersistentVolumeSpec", "persistentVolumeSource"),
    ("EphemeralContainer", "ephemeralContainerCommon"),
    *((message, "localObjectReference") for message in (
        "ConfigMapEnvSource", "ConfigMapKeySelector", "ConfigMapProjection", "ConfigMapVolumeSource",
        "SecretEnvSource", "SecretKeySelector", "SecretProjection",
    )),
}

_MESSAGE = re.compile(r"^\s*message\s+(\w+)\s*\{")
_FIELD = re.compile(r"^\s*(optional|repeated|required)\s+([\w.]+)\s+(\w+)\s*=\s*(\d+)\s*;(.*)$")
_MAP = re.compile(r"^\s*map<\s*([\w.]+)\s*,\s*([\w.]+)\s*>\s+(\w+)\s*=\s*(\d+)\s*;(.*)$")
_SCALARS = {"string", "bytes", "bool", "int32", "int64", "uint32", "uint64", "double", "float", "fixed32", "fixed64", "sint32", "sint64"}


def _short(type_name: str) -> str:
    for prefix in PACKAGE_PREFIXES:
        if type_name.startswith(prefix):
            return type_name[len(prefix):]
    return type_name.rsplit(".", 1)[-1]


def parse(text: str, tables: dict[str, dict[str, list]]) -> None:
    stripped = text.lstrip().startswith("// stripped")
    message: str | None = None
    depth = 0
    comments: list[str] = []
    for line in text.splitlines():
        if (m := _MESSAGE.match(line)) and depth == 0:
            message, depth, comments = m.group(1), 1, []
            tables.setdefault(message, {})
            continue
        if message is None:
            continue
        if line.strip().startswith("//"):
            comments.append(line.strip())
            continue
        if line.strip() == "}":
            message, depth = None, 0
            continue
        if (m := _MAP.match(line)):
            key, value, name, number, rest = m.groups()
            tables[message][number] = [name, "map", False, _short(key), _short(value), []]
        elif (m := _FIELD.match(line)):
            label, type_name, name, number, rest = m.groups()
            type_name = _short(type_name)
            flags = []
            optional = "//req" not in rest if stripped else any("+optional" in c for c in comments)
            if type_name in _SCALARS and label != "repeated" and not optional:
                flags.append("req")
            if name in POINTERS.get(message, ()):
                flags.append("ptr")
            if (message, name) in INLINE:
                flags.append("inline")
            tables[message][number] = [name, type_name, label == "repeated", None, None, flags]
        comments = []


def main(paths: list[str]) -> None:
    tables: dict[str, dict[str, list]] = {}
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            parse(handle.read(), tables)
    out = {name: {num: spec for num, spec in sorted(fields.items(), key=lambda kv: int(kv[0]))} for name, fields in sorted(tables.items())}
    sys.stdout.write("{\n")
    lines = [f"{json.dumps(name)}: {json.dumps(fields, separators=(',', ':'))}" for name, fields in out.items()]
    sys.stdout.write(",\n".join(lines))
    sys.stdout.write("\n}\n")


if __name__ == "__main__":
    main(sys.argv[1:])

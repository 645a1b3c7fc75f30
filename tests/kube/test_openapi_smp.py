"""Schemas, OpenAPI v3 documents, field validation and strategic merge patch for the sandbox."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
import yaml
from kubectl import kubectl_binary
from usher.sandbox import openapi
from usher.sandbox.kinds import RESOURCE_TYPES, Resource, ResourceType, crd_types
from usher.sandbox.schemas import (
    Ext,
    Gvk,
    builtin_components,
    custom_definition_name,
    definition_name,
    schema_for,
)
from usher.sandbox.smp import (
    StrategicMergePatchError,
    apply_strategic_merge_patch,
    check_supported,
)
from usher.sandbox.store import ApiError
from usher.sandbox.validation import (
    FieldValidation,
    Operation,
    decode_json,
    inspect,
    parse_directive,
    validate_write,
    warning_header,
)

PODS = RESOURCE_TYPES[Resource.PODS]
NODES = RESOURCE_TYPES[Resource.NODES]
DEPLOYMENTS = RESOURCE_TYPES[Resource.DEPLOYMENTS]

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "size": {"type": "integer"},
                                    "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


def widget_type(crd: dict[str, Any] = CRD) -> ResourceType:
    return crd_types(crd)[0]


def pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "finalizers": ["a", "b"]},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                {"name": "sidecar", "image": "envoy:1"},
            ],
            "tolerations": [{"key": "k1", "operator": "Exists"}],
        },
        "status": {
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
            ]
        },
    }


def smp(original: dict[str, Any], patch: dict[str, Any], rt: ResourceType = PODS) -> dict[str, Any]:
    return apply_strategic_merge_patch(original, patch, schema_for(rt))


# --------------------------------------------------------------------------- strategic merge patch


def test_containers_merge_by_name() -> None:
    original = pod()
    patched = smp(original, {"spec": {"containers": [{"name": "sidecar", "image": "envoy:2"}]}})
    assert patched["spec"]["containers"] == [
        original["spec"]["containers"][0],
        {"name": "sidecar", "image": "envoy:2"},
    ]
    assert original["spec"]["containers"][1]["image"] == "envoy:1"  # the input is left alone


def test_a_new_container_comes_first_as_the_real_merge_orders_it() -> None:
    patched = smp(pod(), {"spec": {"containers": [{"name": "debug", "image": "alpine"}]}})
    assert [c["name"] for c in patched["spec"]["containers"]] == ["debug", "main", "sidecar"]


def test_one_condition_patched_by_type_keeps_the_others() -> None:
    patched = smp(pod(), {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert patched["status"]["conditions"] == [
        {"type": "PodScheduled", "status": "True"},
        {"type": "Ready", "status": "True", "reason": "ContainersNotReady"},
    ]


def test_patch_delete_removes_one_container() -> None:
    patched = smp(pod(), {"spec": {"containers": [{"name": "main", "$patch": "delete"}]}})
    assert [c["name"] for c in patched["spec"]["containers"]] == ["sidecar"]


def test_finalizers_merge_as_a_set_and_delete_from_primitive_list() -> None:
    patched = smp(pod(), {"metadata": {"finalizers": ["b", "c"]}})
    assert patched["metadata"]["finalizers"] == ["a", "b", "c"]
    patched = smp(pod(), {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}})
    assert patched["metadata"]["finalizers"] == ["b"]


def test_tolerations_and_taints_are_replaced_whole() -> None:
    patched = smp(pod(), {"spec": {"tolerations": [{"key": "k2", "operator": "Exists"}]}})
    assert patched["spec"]["tolerations"] == [{"key": "k2", "operator": "Exists"}]
    node = {"metadata": {"name": "n"}, "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}
    patched = smp(node, {"spec": {"taints": [{"key": "b", "effect": "NoSchedule"}]}}, NODES)
    assert patched["spec"]["taints"] == [{"key": "b", "effect": "NoSchedule"}]


def test_kubectl_apply_patch_with_set_element_order() -> None:
    """The shape of patch kubectl apply sends: orders, a deletion and an addition."""
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "main"}],
            "containers": [
                {
                    "name": "main",
                    "$setElementOrder/env": [{"name": "B"}, {"name": "C"}],
                    "env": [{"name": "C", "value": "3"}, {"name": "A", "$patch": "delete"}],
                    "image": "busybox:2",
                }
            ],
        }
    }
    patched = smp(pod(), patch)
    assert [c["name"] for c in patched["spec"]["containers"]] == ["sidecar", "main"]
    main = patched["spec"]["containers"][1]
    assert main["image"] == "busybox:2"
    assert main["env"] == [{"name": "B", "value": "2"}, {"name": "C", "value": "3"}]
    assert "$" not in json.dumps(patched)


def test_replace_directives_null_and_retain_keys() -> None:
    patched = smp(pod(), {"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "x"}]}})
    assert patched["spec"]["containers"] == [{"name": "only", "image": "x"}]
    patched = smp(pod(), {"status": {"$patch": "replace", "phase": "Running"}})
    assert patched["status"] == {"phase": "Running"}
    patched = smp(pod(), {"metadata": {"finalizers": None}})
    assert "finalizers" not in patched["metadata"]
    with_volume = pod()
    with_volume["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    patch = {"spec": {"volumes": [{"name": "data", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/d"}}]}}
    assert smp(with_volume, patch)["spec"]["volumes"] == [{"name": "data", "hostPath": {"path": "/d"}}]


def test_lists_without_metadata_are_atomic_and_bad_patches_fail_as_real() -> None:
    patched = apply_strategic_merge_patch(pod(), {"status": {"conditions": [{"type": "Ready"}]}}, None)
    assert patched["status"]["conditions"] == [{"type": "Ready"}]
    with pytest.raises(StrategicMergePatchError) as merge:
        smp(pod(), {"spec": {"containers": [{"name": "main", "$patch": "merge"}]}})
    assert merge.value.code == 500 and "merging lists cannot yet be specified" in merge.value.message
    with pytest.raises(StrategicMergePatchError) as keyless:
        smp(pod(), {"spec": {"containers": [{"image": "x"}]}})
    assert "does not contain declared merge key: name" in keyless.value.message
    with pytest.raises(StrategicMergePatchError) as retain:
        smp(pod(), {"spec": {"$retainKeys": ["containers"], "hostNetwork": True}})
    assert retain.value.code == 400


def test_custom_resources_refuse_strategic_merge_patch() -> None:
    check_supported(PODS)
    with pytest.raises(StrategicMergePatchError) as refused:
        check_supported(widget_type())
    assert refused.value.code == 415 and refused.value.reason == "UnsupportedMediaType"
    assert "application/merge-patch+json" in refused.value.message


# --------------------------------------------------------------------------- schemas


def test_pod_schema_has_containers_with_names_and_patch_metadata() -> None:
    schema = schema_for(PODS)
    assert schema is not None and schema.name == "io.k8s.api.core.v1.Pod"
    containers = schema.field("spec").field("containers")
    assert containers.merge_key == "name" and containers.patch_strategies == ("merge",)
    container = containers.items()
    assert container.name == "io.k8s.api.core.v1.Container"
    assert "name" in container.properties and "name" in container.resolved["required"]
    ports = container.field("ports")
    assert (ports.merge_key, ports.list_map_keys) == ("containerPort", ("containerPort", "protocol"))
    assert schema.field("metadata").field("finalizers").list_type == "set"
    assert schema.field("spec").field("volumes").patch_strategies == ("merge", "retainKeys")
    assert schema.field("spec").field("tolerations").list_type == "atomic"


def test_definition_names_follow_the_real_ones() -> None:
    assert definition_name("V1ObjectMeta") == "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    assert definition_name("V1PodTemplateSpec") == "io.k8s.api.core.v1.PodTemplateSpec"
    assert definition_name("V1DeploymentSpec") == "io.k8s.api.apps.v1.DeploymentSpec"
    assert definition_name("RbacV1Subject") == "io.k8s.api.rbac.v1.Subject"
    assert definition_name("CoreV1Event") == "io.k8s.api.core.v1.Event"
    assert definition_name("V1JSONSchemaProps").startswith("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.")
    components = builtin_components()
    assert components["io.k8s.api.apps.v1.Deployment"][Ext.GVK] == [Gvk("apps", "v1", "Deployment").extension()]
    target_port = components["io.k8s.api.core.v1.ServicePort"]["properties"]["targetPort"]
    assert target_port["allOf"] == [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.util.intstr.IntOrString"}]
    assert custom_definition_name("kubeflow.org", "v1", "PyTorchJob") == "org.kubeflow.v1.PyTorchJob"


def test_custom_resource_schema_comes_from_its_crd() -> None:
    schema = schema_for(widget_type())
    assert schema is not None
    assert schema.field("metadata").name == "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    assert schema.field("spec").field("size").type == "integer"
    assert schema.field("spec").field("extra").open
    assert not schema.field("spec").open


# --------------------------------------------------------------------------- field validation


def deployment(**extra_container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [{"name": "c", "image": "x", **extra_container}]},
            },
        },
    }


def test_unknown_nested_field_is_reported_with_its_exact_path() -> None:
    obj = deployment(imagee="typo", ports=[{"containerPort": 80, "hostPortt": 1}])
    obj["spec"]["foo"] = 1
    report = inspect(obj, schema_for(DEPLOYMENTS))
    assert report.unknown == [
        "spec.template.spec.containers[0].imagee",
        "spec.template.spec.containers[0].ports[0].hostPortt",
        "spec.foo",
    ]
    assert inspect(deployment(), schema_for(DEPLOYMENTS)).unknown == []


def test_strict_warn_and_ignore_as_the_real_server() -> None:
    with pytest.raises(ApiError) as strict:
        validate_write(DEPLOYMENTS, deployment(imagee="typo"), FieldValidation.STRICT)
    assert strict.value.code == 400
    assert strict.value.message == (
        'Deployment in version "v1" cannot be handled as a Deployment: '
        'strict decoding error: unknown field "spec.template.spec.containers[0].imagee"'
    )
    obj = deployment(imagee="typo")
    warnings = validate_write(DEPLOYMENTS, obj, FieldValidation.WARN)
    assert warnings == ['unknown field "spec.template.spec.containers[0].imagee"']
    assert warning_header(warnings) == '299 - "unknown field \\"spec.template.spec.containers[0].imagee\\""'
    assert "imagee" not in obj["spec"]["template"]["spec"]["containers"][0]  # dropped, as decoding drops it
    obj = deployment(imagee="typo")
    assert validate_write(DEPLOYMENTS, obj, FieldValidation.IGNORE) == []
    assert obj == deployment()


def test_patches_fail_strict_validation_with_422() -> None:
    patch = {"spec": {"bogus": 1}}
    patched = deployment()
    patched["spec"]["bogus"] = 1
    with pytest.raises(ApiError) as failed:
        validate_write(DEPLOYMENTS, patched, FieldValidation.STRICT, patch=patch, strategic=True)
    assert failed.value.code == 422
    assert failed.value.message == ' "" is invalid: patch: Invalid value: "map[spec:map[bogus:1]]": ' \
        'strict decoding error: unknown field "spec.bogus"'


def test_duplicate_fields_and_wrong_types() -> None:
    body, duplicates = decode_json(b'{"metadata": {"name": "a", "name": "b"}, "spec": {}}')
    assert body["metadata"]["name"] == "b" and duplicates == ["metadata.name"]
    with pytest.raises(ApiError) as duplicate:
        validate_write(DEPLOYMENTS, body, FieldValidation.STRICT, duplicates=duplicates)
    assert duplicate.value.message.endswith('strict decoding error: duplicate field "metadata.name"')
    wrong = deployment()
    wrong["spec"]["replicas"] = "two"
    with pytest.raises(ApiError) as typed:
        validate_write(DEPLOYMENTS, wrong, FieldValidation.IGNORE)
    assert typed.value.code == 400
    assert "json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int64" in (
        typed.value.message
    )
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": "big"}}
    with pytest.raises(ApiError) as custom:
        validate_write(widget_type(), widget, FieldValidation.STRICT)
    assert custom.value.code == 422
    assert custom.value.message == (
        'Widget.example.com "w" is invalid: spec.size: Invalid value: "string": '
        'spec.size in body must be of type integer: "string"'
    )


def test_custom_resources_prune_unknown_fields_but_keep_preserved_ones() -> None:
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
              "spec": {"size": 1, "bogus": 1, "extra": {"anything": {"goes": True}}}}
    assert validate_write(widget_type(), widget, FieldValidation.WARN) == ['unknown field "spec.bogus"']
    assert widget["spec"] == {"size": 1, "extra": {"anything": {"goes": True}}}


def test_field_validation_directive() -> None:
    assert parse_directive(None, Operation.CREATE) is FieldValidation.WARN
    assert parse_directive("Strict", Operation.PATCH) is FieldValidation.STRICT
    with pytest.raises(ApiError) as bad:
        parse_directive("strict", Operation.PATCH)
    assert bad.value.code == 422 and bad.value.message.startswith('PatchOptions.meta.k8s.io "" is invalid')


# --------------------------------------------------------------------------- OpenAPI v3


SERVED = [PODS, NODES, RESOURCE_TYPES[Resource.NAMESPACES], DEPLOYMENTS]


def test_index_and_documents() -> None:
    index = openapi.openapi_v3_index(SERVED)
    assert set(index["paths"]) == {"api/v1", "apis/apps/v1"}
    assert index["paths"]["api/v1"]["serverRelativeURL"].startswith("/openapi/v3/api/v1?hash=")
    document = openapi.openapi_v3_document("api/v1", SERVED)
    assert document is not None
    schemas = document["components"]["schemas"]
    assert "io.k8s.api.core.v1.Pod" in schemas and "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in schemas
    assert "io.k8s.api.apps.v1.Deployment" not in schemas
    patch = document["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "kind": "Pod", "version": "v1"}
    assert any(p["name"] == "fieldValidation" and p["in"] == "query" for p in patch["parameters"])
    assert "application/strategic-merge-patch+json" in patch["requestBody"]["content"]
    assert "/api/v1/nodes/{name}/status" in document["paths"]
    assert openapi.openapi_v3_document("apis/batch/v1", SERVED) is None


def test_custom_resource_documents_follow_their_crd() -> None:
    served = [*SERVED, widget_type()]
    url = openapi.openapi_v3_index(served)["paths"]["apis/example.com/v1"]["serverRelativeURL"]
    document = openapi.openapi_v3_document("apis/example.com/v1", served)
    assert document is not None
    patch = document["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]["patch"]
    assert "application/strategic-merge-patch+json" not in patch["requestBody"]["content"]
    assert "com.example.v1.Widget" in document["components"]["schemas"]
    changed = copy.deepcopy(CRD)
    changed["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["color"] = {
        "type": "string"}
    served = [*SERVED, widget_type(changed)]
    assert openapi.openapi_v3_index(served)["paths"]["apis/example.com/v1"]["serverRelativeURL"] != url


def test_serve_answers_hash_redirects_and_not_modified() -> None:
    url = openapi.openapi_v3_index(SERVED)["paths"]["api/v1"]["serverRelativeURL"]
    path, _, query = url.partition("?")
    current = openapi.serve(path, dict(parse_qsl(query)), {}, SERVED)
    assert current is not None and current.status == 200 and "immutable" in current.headers["cache-control"]
    assert json.loads(current.body)["openapi"].startswith("3.")
    stale = openapi.serve(path, {"hash": "0"}, {}, SERVED)
    assert stale is not None and (stale.status, stale.headers["location"]) == (301, url)
    again = openapi.serve(path, dict(parse_qsl(query)), {"if-none-match": current.headers["etag"]}, SERVED)
    assert again is not None and again.status == 304
    missing = openapi.serve("/openapi/v3/apis/nope/v1", {}, {}, SERVED)
    assert missing is not None and missing.status == 404
    assert openapi.serve("/api/v1", {}, {}, SERVED) is None


# --------------------------------------------------------------------------- kubectl explain against a stub


def _resource_list(group_version: str, types: list[ResourceType]) -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": [
            {"name": str(rt.resource), "singularName": rt.singular_name, "namespaced": rt.namespaced,
             "kind": rt.kind, "verbs": list(rt.verbs)}
            for rt in types
        ],
    }


class _Stub(BaseHTTPRequestHandler):
    """Minimal discovery plus the OpenAPI v3 documents: what kubectl explain reads."""

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = dict(parse_qsl(url.query))
        headers = {k.lower(): v for k, v in self.headers.items()}
        reply = openapi.serve(url.path, query, headers, SERVED)
        if reply is not None:
            self._send(reply.status, reply.headers, reply.body)
            return
        documents: dict[str, Any] = {
            "/api": {"kind": "APIVersions", "versions": ["v1"],
                     "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]},
            "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
                 "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}}]},
            "/api/v1": _resource_list("v1", [t for t in SERVED if not t.group]),
            "/apis/apps/v1": _resource_list("apps/v1", [DEPLOYMENTS]),
        }
        if url.path in documents:
            self._send(200, {"content-type": "application/json"}, json.dumps(documents[url.path]).encode())
        else:
            self._send(404, {"content-type": "application/json"}, b'{"kind":"Status","code":404}')

    def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def stub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_kubectl_explain_reads_the_documents(stub: str, tmp_path: Path) -> None:
    from kubectl import Kubectl

    if kubectl_binary() is None:
        pytest.skip("kubectl is not installed (it comes with the test extras)")
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "stub",
        "clusters": [{"name": "stub", "cluster": {"server": stub}}],
        "users": [{"name": "stub", "user": {}}],
        "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "stub"}}],
    }))
    kubectl = Kubectl(config)
    containers = kubectl.ok("explain", "pod.spec.containers")
    assert "FIELD: containers <[]Container>" in containers
    for line in ("image\t<string>", "name\t<string> -required-", "ports\t<[]ContainerPort>", "env\t<[]EnvVar>"):
        assert line in containers
    strategy = kubectl.ok("explain", "deployments.spec.strategy")
    assert "GROUP:      apps" in strategy and "rollingUpdate\t<RollingUpdateDeployment>" in strategy

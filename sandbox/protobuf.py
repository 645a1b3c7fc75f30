"""Decode Kubernetes protobuf request bodies (``application/vnd.kubernetes.protobuf``) into JSON objects.

client-go sends built-in kinds as protobuf and never falls back to JSON for them, so the sandbox must
read them: the envelope is the magic ``k8s\\x00`` then a ``runtime.Unknown`` {typeMeta, raw, contentEncoding,
contentType}; ``raw`` is the object's message, decoded with the field tables of ``protobuf_fields.json``
(generated from k8s.io/api and apimachinery ``generated.proto``; see ``sandbox/tools/extract_proto_fields.py``).

The result is the object the client would have sent as JSON: zero scalars that Go's ``omitempty`` would
drop are dropped (gogo-protobuf writes every non-pointer scalar), pointer scalars and scalars without
``omitempty`` keep their zero, embedded messages present on the wire stay (``spec: {}``, as in JSON),
inlined structs are flattened, ``Time`` -> RFC 3339, ``MicroTime`` -> RFC 3339 with microseconds,
``Quantity`` -> its string, ``IntOrString`` -> int or string, ``bytes`` -> base64, ``FieldsV1``/
``RawExtension`` -> the JSON they hold, ``Duration`` -> Go duration text, ``ExtraValue`` -> its list of strings. Unknown field numbers are skipped.
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"


class ProtobufError(ValueError):
    """The body is not a Kubernetes protobuf message the sandbox can read."""


class UnknownKind(ProtobufError):
    """The envelope names a kind without a message table (a custom resource, or an unlisted kind)."""


@lru_cache(maxsize=1)
def tables() -> dict[str, dict[int, tuple]]:
    raw = json.loads((Path(__file__).with_name("protobuf_fields.json")).read_text(encoding="utf-8"))
    return {name: {int(num): tuple(spec) for num, spec in fields.items()} for name, fields in raw.items()}


# Kinds whose message name differs from the kind (none in the listed groups, kept for clarity).
_KIND_MESSAGE: dict[str, str] = {}


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtobufError("varint too long")


def _fields(data: bytes):
    """Yield (field number, wire type, value) for each field of a message."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtobufError("field number 0")
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ProtobufError("truncated length-delimited field")
            value, pos = data[pos:pos + length], pos + length
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
        if pos > len(data):
            raise ProtobufError("truncated field")
        yield number, wire, value


def _signed(value: int, bits: int) -> int:
    value &= (1 << 64) - 1
    if value >= 1 << 63:
        value -= 1 << 64
    if bits == 32:
        value = ((value + (1 << 31)) % (1 << 32)) - (1 << 31)
    return value


def _scalar(kind: str, wire: int, value: Any) -> Any:
    if kind in ("int32", "int64"):
        if wire != 0:
            raise ProtobufError(f"{kind} with wire type {wire}")
        return _signed(value, 32 if kind == "int32" else 64)
    if kind == "bool":
        return bool(value)
    if kind == "string":
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise ProtobufError("string field is not UTF-8") from None
    if kind == "bytes":
        return base64.b64encode(bytes(value)).decode("ascii")
    raise ProtobufError(f"unsupported scalar type {kind}")


def _packed(kind: str, data: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(data):
        value, pos = _varint(data, pos)
        out.append(_scalar(kind, 0, value))
    return out


def _time(data: bytes, micro: bool) -> str | None:
    seconds = nanos = 0
    for number, _, value in _fields(data):
        if number == 1:
            seconds = _signed(value, 64)
        elif number == 2:
            nanos = _signed(value, 32)
    if not data:
        return None  # a zero metav1.Time marshals to an empty message; JSON says null
    stamp = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc) + _dt.timedelta(seconds=seconds)
    text = stamp.strftime("%Y-%m-%dT%H:%M:%S")
    if micro:
        text += f".{nanos // 1000:06d}"
    return text + "Z"


def _duration(nanos: int) -> str:
    """Go's ``time.Duration.String()``."""
    if nanos == 0:
        return "0s"
    sign, n = ("-", -nanos) if nanos < 0 else ("", nanos)
    if n < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if n >= size:
                return f"{sign}{_trim(n, size)}{unit}"
    hours, rest = divmod(n, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    text = f"{_trim(rest, 1_000_000_000)}s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    if hours:
        text = f"{hours}h{text}"
    return sign + text


def _trim(value: int, unit: int) -> str:
    whole, frac = divmod(value, unit)
    if not frac:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{frac:0{digits}d}".rstrip("0")


def _special(kind: str, data: bytes) -> tuple[bool, Any]:
    """Messages with a JSON form of their own: (handled, value)."""
    if kind in ("Time", "MicroTime"):
        return True, _time(data, kind == "MicroTime")
    if kind == "Quantity":
        text = ""
        for number, _, value in _fields(data):
            if number == 1:
                text = _scalar("string", 2, value)
        return True, text
    if kind == "IntOrString":
        type_, int_val, str_val = 0, 0, ""
        for number, _, value in _fields(data):
            if number == 1:
                type_ = _signed(value, 64)
            elif number == 2:
                int_val = _signed(value, 32)
            elif number == 3:
                str_val = _scalar("string", 2, value)
        return True, (str_val if type_ == 1 else int_val)
    if kind == "ExtraValue":  # a []string in Go and in JSON, a message of items on the wire
        return True, [_scalar("string", 2, value) for number, _, value in _fields(data) if number == 1]
    if kind == "Duration":
        nanos = 0
        for number, _, value in _fields(data):
            if number == 1:
                nanos = _signed(value, 64)
        return True, _duration(nanos)
    if kind in ("FieldsV1", "RawExtension"):
        raw = b""
        for number, _, value in _fields(data):
            if number == 1:
                raw = bytes(value)
        if not raw:
            return True, None
        try:
            return True, json.loads(raw)
        except ValueError:
            raise ProtobufError(f"{kind} does not hold JSON") from None
    return False, None


def _is_zero(value: Any) -> bool:
    return value is None or value == "" or value is False or (isinstance(value, int) and not isinstance(value, bool) and value == 0)


def decode_message(name: str, data: bytes) -> Any:
    """Decode one message of type ``name`` into its JSON form."""
    handled, value = _special(name, data)
    if handled:
        return value
    table = tables().get(name)
    if table is None:
        raise ProtobufError(f"no field table for message {name}")
    out: dict[str, Any] = {}
    for number, wire, value in _fields(data):
        spec = table.get(number)
        if spec is None:
            continue  # a field newer than the table: skipped, as a proto reader does
        json_name, kind, repeated, key_kind, value_kind, flags = spec
        if kind == "map":
            key, item = "", None
            for n, w, v in _fields(value):
                if n == 1:
                    key = _scalar(key_kind, w, v)
                elif n == 2:
                    item = _value(value_kind, w, v)
            if item is None and value_kind == "string":
                item = ""
            out.setdefault(json_name, {})[key] = item
            continue
        if repeated:
            items = out.setdefault(json_name, [])
            if kind in ("int32", "int64", "bool") and wire == 2:
                items.extend(_packed(kind, value))
            else:
                items.append(_value(kind, wire, value))
            continue
        decoded = _value(kind, wire, value)
        if "inline" in flags and isinstance(decoded, dict):
            out.update(decoded)
            continue
        out[json_name] = decoded
    for number, spec in table.items():
        json_name, kind, repeated, _, _, flags = spec
        if json_name in out and not repeated and kind in ("string", "int32", "int64", "bool"):
            if _is_zero(out[json_name]) and "req" not in flags and "ptr" not in flags:
                del out[json_name]
        elif json_name in out and kind in ("Time", "MicroTime", "FieldsV1", "RawExtension") and out[json_name] is None:
            del out[json_name]
    return out


def _value(kind: str, wire: int, value: Any) -> Any:
    if kind in ("string", "bytes", "bool", "int32", "int64"):
        return _scalar(kind, wire, value)
    if wire != 2:
        raise ProtobufError(f"message {kind} with wire type {wire}")
    return decode_message(kind, bytes(value))


def decode(body: bytes) -> dict[str, Any]:
    """Decode a ``k8s\\x00``-framed ``runtime.Unknown`` body into the JSON object it carries."""
    if not body.startswith(MAGIC):
        raise ProtobufError("the body does not start with the Kubernetes protobuf magic number")
    api_version = kind = content_encoding = ""
    raw = b""
    for number, _, value in _fields(body[len(MAGIC):]):
        if number == 1:
            for n, _, v in _fields(value):
                if n == 1:
                    api_version = _scalar("string", 2, v)
                elif n == 2:
                    kind = _scalar("string", 2, v)
        elif number == 2:
            raw = bytes(value)
        elif number == 3:
            content_encoding = _scalar("string", 2, value)
    if content_encoding:
        raise ProtobufError(f"unsupported content encoding {content_encoding!r}")
    message = _KIND_MESSAGE.get(kind, kind)
    if not kind or message not in tables() or not _is_builtin(api_version):
        raise UnknownKind(f"no protobuf message for {api_version}/{kind}")
    obj = decode_message(message, raw)
    return {"kind": kind, "apiVersion": api_version, **obj}


_BUILTIN_GROUPS = {
    "", "apps", "batch", "rbac.authorization.k8s.io", "scheduling.k8s.io", "policy",
    "authentication.k8s.io", "authorization.k8s.io", "coordination.k8s.io", "networking.k8s.io", "meta.k8s.io",
}


def _is_builtin(api_version: str) -> bool:
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    return group in _BUILTIN_GROUPS


MAX_YAML_BYTES = 3 * 1024 * 1024
"""The size bound on YAML request bodies (the real server's limit on a request body is 3 MiB)."""


def decode_body(content_type: str, body: bytes) -> Any:
    """The JSON value of a protobuf or YAML request body, or the ``ApiError`` a real server answers."""
    from usher.sandbox.store import ApiError, Reason

    if content_type == "application/yaml":
        import yaml

        from usher.engine.scenario.limits import API_BODY_LIMITS
        from usher.engine.scenario.yamltree import YamlLimitError, load_bounded

        if len(body) > MAX_YAML_BYTES:
            raise ApiError(413, Reason.BAD_REQUEST, "the request body is too large")
        try:  # nesting and aliases bounded too: a deep or alias-bomb body is refused, not expanded
            return load_bounded(body or b"null", API_BODY_LIMITS)
        except YamlLimitError as exc:
            where = f" (line {exc.line})" if exc.line is not None else ""
            raise ApiError.bad_request(f"the request body is refused{where}: {exc.message}") from None
        except yaml.YAMLError as exc:
            raise ApiError.bad_request(f"the request body is not valid YAML: {exc}") from None
    try:
        return decode(body)
    except UnknownKind:
        raise ApiError(
            415,
            Reason.UNSUPPORTED_MEDIA_TYPE,
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml",
        ) from None
    except ProtobufError as exc:
        raise ApiError.bad_request(f"the request body is not a valid protobuf message: {exc}") from None

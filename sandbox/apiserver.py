"""A fake Kubernetes API server over real loopback HTTP, on top of the sandbox's object store.

usher's Kubernetes backend is tested against it, and ``usher sandbox`` serves a scenario's
cluster with it so that usher and ``kubectl`` can be tried without a cluster. It speaks the wire
protocol of the real API (paths, verbs, ``Status`` errors, list and watch semantics, server-side
``Table`` printing), so a client that works against it should work against a real cluster.

Served: discovery (``/api``, ``/apis``, ``/version``), every kind of :mod:`usher.sandbox.kinds`
(core, apps, batch, RBAC, policy, coordination, scheduling, CRDs and their custom resources),
pods' ``status``, ``binding``, ``eviction`` and ``log`` subresources (:mod:`.podlogs`), OpenAPI v3 (:mod:`.openapi`, with
server-side field validation from :mod:`.validation`), request bodies as JSON, YAML or protobuf
(:mod:`.protobuf`), and optionally authentication and RBAC (:mod:`.auth`) and the cluster's
controllers (:mod:`.controllers`). The storage semantics are those of
:mod:`usher.sandbox.store`; this module adds the HTTP mapping and:

- watches: newline-delimited JSON events streamed with chunked encoding, from a resourceVersion
  (or synthetic ``ADDED`` events for the current state when none is given), with bookmarks
  (``allowWatchBookmarks``) every ``bookmark_interval`` seconds, ``timeoutSeconds``, selectors,
  ``sendInitialEvents``, and an ``ERROR`` event carrying a ``410 Expired`` Status when the
  resourceVersion is too old (an HTTP 200 stream, as the real server answers). A list or watch
  from a resourceVersion the store has not reached yet waits up to ``too_large_wait`` seconds for
  it (the watch cache's 3 s), then fails with ``504 Timeout: Too large resource version`` (cause
  ``ResourceVersionTooLarge``, ``retryAfterSeconds: 1``), a watch as an ``ERROR`` event; this is
  what a client sees from an API server restarted on a wiped etcd;
- binding (sets ``spec.nodeName``, copies the Binding's annotations, sets ``PodScheduled``;
  ``409`` when the pod is already bound) and eviction (honours PodDisruptionBudgets: ``429``
  when an eviction would violate one; ``dryRun=All`` checks without evicting). PDB status is
  kept current, as the disruption controller does, whenever pods or budgets change;
- optional bearer-token authentication (``tokens``, changeable at any time);
- ValidatingAdmissionPolicies with CEL on every write, whoever sends it (:mod:`.admission_policy`;
  the store validates objects first, :mod:`.object_validation`);
- HTTPS (``tls=True``), with a CA made at start (:mod:`.tls`) that :meth:`FakeApiServer.kubeconfig`
  hands to clients as ``certificate-authority-data``: kubectl sends a bearer token only over TLS;
- fault injection (:meth:`FakeApiServer.inject`) and a request log (:attr:`FakeApiServer.requests`)
  for tests.

As the real server, DELETE answers with the deleted object for pods and with a ``Success``
Status for everything else, and binding and eviction answer ``201`` with a ``Success`` Status.

Deliberately left out: server-side apply, dry run (but for evictions), ``deletecollection``, reads at an exact older
resourceVersion, OpenAPI v2, admission webhooks, the aggregated discovery format (kubectl falls
back to the legacy one).

The pieces it routes to live beside it: the URL scheme (:mod:`.routing`), discovery
(:mod:`.discovery`), reading requests and writing responses (:mod:`.wire`), disruption budgets
(:mod:`.disruption`) and injected faults (:mod:`.faults`); this module keeps the handlers, which
read as what each request does to the store, and the watch stream. They are one class, longer
than the house's 600 lines on purpose: every handler shares the server's store, authorizer,
faults, request log and admission, and reads as a few calls into the modules above.

``FakeApiServer`` runs on the caller's event loop (``await server.start()``); ``ServerThread``
runs one in a thread of its own for synchronous clients such as the official ``kubernetes``
client and ``kubectl``.
"""

from __future__ import annotations

import asyncio
import fnmatch
import inspect
import json
import logging
import random
import ssl
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Self

from usher.engine.backends.http_server import (
    AbortConnection,
    HttpServer,
    Request,
    Response,
)
from usher.sandbox import openapi, validation
from usher.sandbox.admission import check_scenario_write
from usher.sandbox.admission_policy import PolicyEvaluator, acting_as
from usher.sandbox.auth import Attributes, Auth, Decision, request_attributes
from usher.sandbox.authn import ANONYMOUS_USER, UserInfo, parse_service_account, self_subject_review
from usher.sandbox.controllers import Controllers
from usher.sandbox.discovery import KUBERNETES_VERSION, discovery_document
from usher.sandbox.disruption import DisruptionController, pod_healthy
from usher.sandbox.dra_admin_access import AdminAccessAdmission
from usher.sandbox.faults import Fault, FaultKind, RequestRecord, fault_error
from usher.sandbox.impersonation import ImpersonationError, acting_user
from usher.sandbox.routing import _ACCESS_REVIEWS, Route, Sub, Verb, not_found, route
from usher.sandbox.podlogs import pod_log
from usher.sandbox.tls import CertificateAuthority
from usher.sandbox.wire import (
    body_object,
    check_acceptable,
    decoded_body,
    delete_options,
    error_response,
    eviction_dry_run,
    field_validation,
    include_object,
    query_int,
    is_watch,
    query_patch_type,
    stored_response,
    success,
    wants_table,
    warned,
)
from usher.sandbox.store import (
    RESOURCE_TYPES,
    ApiError,
    EventType,
    Filter,
    JsonObject,
    PatchType,
    Reason,
    Resource,
    ResourceType,
    Store,
    Stored,
    Subresource,
    Subscription,
    WatchEvent,
    parse_resource_version,
)
from usher.sandbox.store import Attempt as AdmissionAttempt
from usher.sandbox.store import Operation as AdmissionOperation
from usher.sandbox.store import _check_preconditions as check_preconditions
from usher.sandbox.tables import IncludeObject, table

log = logging.getLogger(__name__)

_JSON = "application/json"
_TABLE_CONTENT_TYPE = "application/json;as=Table;v=v1;g=meta.k8s.io"
TOO_LARGE_WAIT = 3.0
#: at most this many queued watch events go out in one write
WATCH_BATCH = 256
"""How long kube-apiserver's watch cache waits for a resourceVersion it has not seen (blockTimeout)."""


class FakeApiServer:
    """The fake API server: HTTP routing, watches, subresources, auth and faults over a :class:`Store`."""

    def __init__(
        self,
        store: Store | None = None,
        *,
        tokens: Iterable[str] | None = None,
        bookmark_interval: float = 60.0,
        seed: int = 0,
        request_log: int = 100_000,
        authorization: bool = False,
        admin_token: str = "sandbox",
        controllers: bool = False,
        tls: bool | CertificateAuthority = False,
    ) -> None:
        """``tls``: serve HTTPS with a certificate signed by a CA made now (``True``) or by the
        one given (a restarted server that its clients' kubeconfigs still trust); ``False``:
        plain HTTP, for tests whose clients speak to it directly (``usher sandbox`` always
        serves HTTPS, as every cluster does)."""
        self.store = store if store is not None else Store()
        self.ca: CertificateAuthority | None = CertificateAuthority() if tls is True else (tls or None)
        """The CA whose certificate the server presents; ``None``: plain HTTP."""
        self.controllers: Controllers | None = Controllers(self.store) if controllers else None
        """The kubelet, default scheduler and workload controllers (:mod:`usher.sandbox.controllers`), when enabled."""
        self.tokens: set[str] | None = set(tokens) if tokens is not None else None
        """Accepted bearer tokens; ``None`` or empty: no authentication. Change it at any time."""
        self.bookmark_interval = bookmark_interval
        self.too_large_wait = TOO_LARGE_WAIT
        """How long a list or watch from a resourceVersion the store has not reached waits for it."""
        self.faults: list[Fault] = []
        self.forbidden: set[tuple[str, str, str]] = set()
        """(verb, resource, subresource) triples denied with 403; see :meth:`forbid`."""
        self.requests: deque[RequestRecord] = deque(maxlen=request_log)
        self.disruption = DisruptionController(self.store)
        self.policies = PolicyEvaluator(self.store)
        """ValidatingAdmissionPolicies, evaluated on every write (:mod:`usher.sandbox.admission_policy`)."""
        self.admin_access = AdminAccessAdmission(self.store)
        """DRA admin access only in namespaces labelled for it (:mod:`usher.sandbox.dra_admin_access`)."""
        self._seed = seed
        self._http = HttpServer(self.handle)
        self._host = "127.0.0.1"
        self.auth = Auth(self.store, enabled=authorization, admin_token=admin_token, static_tokens=self.tokens)
        """Authentication and RBAC (see :mod:`usher.sandbox.auth`); enforced with ``authorization=True``."""
        self.rbac = self.auth.rbac
        """The RBAC authorizer: :attr:`~usher.sandbox.auth.RbacAuthorizer.accesses` records what was used."""

    # ------------------------------------------------------------------ lifecycle

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen (``port`` 0: any free port) and return the bound port; :attr:`url` is the base URL."""
        self._host = host
        tls = self.ca.serving_context([host]) if self.ca is not None else None
        port = await self._http.start(host, port, tls=tls)
        if self.controllers is not None:
            await self.controllers.start()
        return port

    async def stop(self) -> None:
        """Close every connection (watches end) and stop listening."""
        if self.controllers is not None:
            await self.controllers.stop()
        await self._http.stop()

    @property
    def url(self) -> str:
        scheme = "https" if self.ca is not None else "http"
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"{scheme}://{host}:{self._http.port}"

    @property
    def verify(self) -> ssl.SSLContext | bool:
        """What a test's own HTTP client (httpx ``verify=``) needs to trust this server."""
        return self.ca.client_context() if self.ca is not None else True

    def kubeconfig(self, token: str | None = None, namespace: str = "default") -> JsonObject:
        """A kubeconfig for this server (``token``: the bearer token to present); over HTTPS
        its cluster carries the CA (``certificate-authority-data``), so clients verify the server.
        Over HTTPS kubectl asks for a user name (and fails without a terminal) when the user has no
        credentials, as against any cluster: give kubectl a token (the admin's will do)."""
        name = "usher-sandbox"
        cluster: JsonObject = {"server": self.url}
        if self.ca is not None:
            cluster["certificate-authority-data"] = self.ca.data
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": name,
            "preferences": {},
            "clusters": [{"name": name, "cluster": cluster}],
            "users": [{"name": name, "user": {"token": token} if token else {}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}],
        }

    # ------------------------------------------------------------------ tests' controls

    def inject(self, kind: FaultKind, **rule: Any) -> Fault:
        """Add a fault rule (see :class:`Fault` for its fields); rules are tried in order."""
        fault = Fault(FaultKind(kind), **rule)
        fault.rng = random.Random(f"{self._seed}/{len(self.faults)}")
        self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        self.faults.clear()

    def forbid(self, verb: str, resource: str, subresource: str = "") -> None:
        """Deny every client ``verb`` on ``resource`` (and ``subresource``) with 403, as RBAC would.

        SelfSubjectAccessReviews answer the same rules, so a client that asks first sees them.
        """
        self.forbidden.add((verb.lower(), resource, subresource))

    def _allowed(self, verb: str, resource: str, subresource: str = "") -> bool:
        return (verb.lower(), resource, subresource) not in self.forbidden

    def _forbid_layer(self, user: UserInfo, attrs: Attributes) -> Decision | None:
        """:meth:`forbid`'s rules as an authorizer ahead of RBAC (a deny, or no opinion)."""
        if not attrs.resource_request:
            return None
        sub = "" if attrs.subresource == "status" else attrs.subresource
        resource = "pods" if (attrs.resource, sub) == ("bindings", "") else attrs.resource
        sub = "binding" if attrs.resource == "bindings" else sub
        if self._allowed(attrs.verb, resource, sub):
            return None
        return Decision(False, "denied by the sandbox's rules", denied=True)

    def token_for(self, namespace: str, name: str, expiration_seconds: int | None = None) -> str:
        """A bearer token for the ServiceAccount ``namespace/name`` (which must exist)."""
        return self.auth.authn.token_for(namespace, name, expiration_seconds)

    @property
    def admin_token(self) -> str:
        """The token of ``kubernetes-admin`` (group ``system:masters``)."""
        return self.auth.authn.admin_token

    def count(self, method: str | None = None, path: str = "*", status: int | None = None) -> int:
        """How many logged requests match ``method``, the ``fnmatch`` pattern ``path`` and ``status``."""
        return sum(
            1
            for r in self.requests
            if (method is None or r.method == method.upper())
            and fnmatch.fnmatchcase(r.path, path)
            and (status is None or r.status == status)
        )

    # ------------------------------------------------------------------ requests

    async def handle(self, request: Request) -> Response:
        """Answer one HTTP request (the :class:`HttpServer` handler)."""
        watch = is_watch(request)
        record = RequestRecord(request.method, request.path, {k: v[0] for k, v in request.query.items()}, watch)
        self.requests.append(record)
        try:
            response = await self._answer(request, watch, self._pick_fault(request, watch))
        except _WatchExpired as error:
            response = Response(200, {"content-type": _JSON}, _error_event(error))
        except ApiError as error:
            response = error_response(error)
        except ImpersonationError as error:
            response = Response.text(500, error.body(request))
        except AbortConnection:
            raise
        except Exception:
            log.exception("fake API server failed on %s %s", request.method, request.path)
            response = error_response(ApiError(500, Reason.INTERNAL_ERROR, "internal error in the fake API server"))
        record.status = response.status
        return response

    def _pick_fault(self, request: Request, watch: bool) -> Fault | None:
        for fault in self.faults:
            if fault.matches(request, watch) and fault.rng.random() < fault.probability:
                fault.fired += 1
                return fault
        return None

    async def _answer(self, request: Request, watch: bool, fault: Fault | None) -> Response:
        if fault is not None and fault.kind is FaultKind.STALL and watch:
            return Response(200, {"content-type": _JSON}, stream=_silence())
        if fault is not None and fault.kind is not FaultKind.DROP:
            await self._apply_fault(fault, watch)
        elif fault is not None and not watch:
            raise AbortConnection
        if request.path in ("/healthz", "/livez", "/readyz"):
            return Response.text(200, "ok")
        user = self._authenticate(request)
        if request.path.startswith("/openapi/"):
            return self._openapi(request)
        discovery = discovery_document(request, f"{self._host}:{self._http.port}", self.store.catalogue)
        if discovery is not None:
            if request.method != "GET":
                raise ApiError(
                    405, Reason.METHOD_NOT_ALLOWED, "the server does not allow this method on the requested resource"
                )
            return Response.json(200, discovery)
        if request.param("dryRun") and not (request.method == "POST" and request.path.endswith("/eviction")):
            raise ApiError.bad_request("dryRun is not supported by the sandbox (except on evictions)")
        if request.path == _ACCESS_REVIEWS or self.auth.endpoint(request.method, request.path):
            return self._access_review(request, user)
        target = route(request, watch, self.store.catalogue)
        resource = str(target.rt.resource) if target.rt is not None else "pods"
        sub = str(target.sub) if target.sub is not None and target.sub is not Sub.STATUS else ""
        if not self._allowed(str(target.verb), resource, sub):
            what = f"{resource}/{sub}" if sub else resource
            raise ApiError(403, Reason.FORBIDDEN, f'{what} is forbidden: cannot {str(target.verb).lower()} resource "{what}"')
        drop_after = fault.after_events if fault is not None else None
        with acting_as(user) as context:
            response = await self._dispatch(request, target, drop_after)
        return warned(response, context.warnings)

    def _access_review(self, request: Request, user: UserInfo) -> Response:
        """A SelfSubjectAccessReview: is the caller allowed ``spec.resourceAttributes``? With
        ``authorization``, also SubjectAccessReview, LocalSubjectAccessReview, SelfSubjectRulesReview
        and TokenRequest, answered by :mod:`usher.sandbox.auth`; a SelfSubjectReview (who is the
        caller, after impersonation) either way."""
        if request.method != "POST":
            raise ApiError(405, Reason.METHOD_NOT_ALLOWED, "the server does not allow this method on the requested resource")
        review = body_object(request)
        kind = self.auth.endpoint(request.method, request.path)
        if kind == "token":
            return Response.json(201, self.auth.token(request.path, review))
        if kind == "ssr":
            return Response.json(201, self_subject_review(user, self.store.clock()))
        if self.auth.enabled or kind != "ssar":
            if not self.auth.enabled:
                user = UserInfo("sandbox-user", ("system:authenticated",))
            return Response.json(201, self.auth.review(str(kind), request.path, user, review, self._forbid_layer))
        attributes = (review.get("spec") or {}).get("resourceAttributes")
        if not isinstance(attributes, dict) or not attributes.get("verb") or not attributes.get("resource"):
            raise ApiError.bad_request("spec.resourceAttributes.verb and .resource are required")
        allowed = self._allowed(str(attributes["verb"]), str(attributes["resource"]), str(attributes.get("subresource") or ""))
        status: JsonObject = {"allowed": allowed}
        if not allowed:
            status["reason"] = "denied by the sandbox's rules"
        return Response.json(201, {**review, "status": status})

    async def _apply_fault(self, fault: Fault, watch: bool) -> None:
        match fault.kind:
            case FaultKind.DELAY:
                await asyncio.sleep(fault.delay)
            case FaultKind.HANG:
                await asyncio.Event().wait()
            case FaultKind.ERROR if watch and fault.status == 410:
                raise _WatchExpired(fault_error(fault))
            case FaultKind.ERROR:
                raise fault_error(fault)

    def _authenticate(self, request: Request) -> UserInfo:
        """Who the request runs as, and with ``authorization`` whether they may: the real server's
        filters (authentication, impersonation, authorization), which run before routing (so a
        forbidden request for a missing resource is 403, not 404)."""
        if not self.auth.enabled:
            self._check_token(request)
            return acting_user(self._writer(request), request, None)  # AlwaysAllow: any impersonation
        user = acting_user(self._user(request), request, self._check)
        self._check(user, request_attributes(request.method, request.path, request.query))
        return user

    def _check(self, user: UserInfo, attrs: Attributes) -> None:
        """``403`` unless the authorizers (:meth:`forbid`'s rules, then RBAC) allow ``user`` ``attrs``."""
        self.auth.check(user, attrs, self._forbid_layer(user, attrs))

    def _check_token(self, request: Request) -> None:
        """Without ``authorization``: ``401`` unless the token is one of ``tokens`` (when set) or a
        ServiceAccount token the server issued."""
        if not self.tokens:
            return
        scheme, _, token = (request.header("authorization") or "").partition(" ")
        if scheme.lower() == "bearer" and token.strip() in self.tokens:
            return
        try:
            if parse_service_account(self._user(request).name) is not None:
                return
        except ApiError:
            pass
        raise ApiError(401, Reason.UNAUTHORIZED, "Unauthorized")

    def _writer(self, request: Request) -> UserInfo:
        """Who a request is, for admission: as authenticated, or anonymous where the server
        checks no tokens (its admission still sees every request)."""
        try:
            return self._user(request)
        except ApiError:
            return ANONYMOUS_USER

    def _user(self, request: Request) -> UserInfo:
        self.auth.authn.static_tokens = self.tokens
        return self.auth.user(request.header("authorization"))

    async def _dispatch(self, request: Request, target: Route, drop_after: int | None) -> Response:
        rt = target.rt
        if target.sub is Sub.BINDING:
            return self._bind(request, target)
        if target.sub is Sub.EVICTION:
            return self._evict(request, target)
        if target.sub is Sub.LOG:
            return self._log(request, target)
        assert rt is not None
        status = Subresource.STATUS if target.sub is Sub.STATUS else None
        if target.verb in (Verb.UPDATE, Verb.PATCH) and status is None:
            self._admit_write(request, rt, target)
        if target.verb in (Verb.LIST, Verb.WATCH):
            await self._wait_for_version(request, target.verb)
        match target.verb:
            case Verb.LIST:
                return self._list(request, rt, target.namespace)
            case Verb.WATCH:
                return self._watch(request, rt, target.namespace, drop_after)
            case Verb.GET:
                return self._get(request, rt, target)
            case Verb.CREATE | Verb.UPDATE:
                body, duplicates = decoded_body(request)
                if not isinstance(body, dict):
                    raise ApiError.bad_request("the request body must be a JSON object")
                warnings = validation.validate_write(
                    rt, body, field_validation(request, target.verb), duplicates=duplicates
                )
                if target.verb is Verb.CREATE:
                    return warned(stored_response(201, self.store.create_stored(rt, body, target.namespace)), warnings)
                stored = self.store.update_stored(rt, body, target.namespace, name=target.name, subresource=status)
                return warned(stored_response(200, stored), warnings)
            case Verb.PATCH:
                patch, duplicates = decoded_body(request)
                stored, warnings = self._patch(
                    rt, str(target.name), target.namespace, patch, query_patch_type(request), status,
                    field_validation(request, Verb.PATCH), duplicates,
                )
                return warned(stored_response(200, stored), warnings)
            case Verb.DELETE:
                return self._delete(request, rt, target)
        raise not_found()

    def _patch(
        self,
        rt: ResourceType,
        name: str,
        namespace: str | None,
        patch: Any,
        patch_type: PatchType,
        subresource: Subresource | None,
        directive: validation.FieldValidation,
        duplicates: list[str],
    ) -> tuple[Stored, list[str]]:
        """A PATCH after routing and admission: validated as written, committed to the store
        (watches see it with its resourceVersion); returns the object and the warnings."""
        warnings: list[str] = []

        def check(patched: JsonObject) -> None:
            warnings.extend(
                validation.validate_write(
                    rt,
                    patched,
                    directive,
                    duplicates=duplicates,
                    patch=patch,
                    strategic=patch_type is PatchType.STRATEGIC_MERGE,
                )
            )

        stored = self.store.patch_stored(rt, name, patch, namespace, patch_type, subresource, check=check)
        return stored, warnings

    def patch_status(
        self,
        resource: Resource | str,
        name: str,
        namespace: str | None,
        patch: JsonObject,
        patch_type: PatchType = PatchType.STRATEGIC_MERGE,
    ) -> Stored:
        """PATCH an object's ``status`` subresource from a component in this server's own process
        (the scenario's kubelet stand-in, :class:`~usher.sandbox.world.World`), as an admin's
        request would: the same validation and store commit as the HTTP handler, so watches see
        the change with its resourceVersion, without a round trip over loopback. Errors raise
        :class:`ApiError` as the handler would answer them (``404``, ``409``, ``422``)."""
        rt = self.store.resource_type(resource)
        directive = validation.parse_directive(None, validation.Operation.PATCH)
        stored, _ = self._patch(rt, name, namespace, patch, patch_type, Subresource.STATUS, directive, [])
        return stored

    def _openapi(self, request: Request) -> Response:
        """OpenAPI v3 for the kinds served now (kubectl's validation, apply and explain read it)."""
        served = [rt for types in self.store.catalogue.versions().values() for rt in types]
        reply = openapi.serve(request.path, {k: v[0] for k, v in request.query.items()}, request.headers, served)
        if reply is None:
            raise not_found()
        return Response(reply.status, reply.headers, reply.body)

    def _admit_write(self, request: Request, rt: ResourceType, target: Route) -> None:
        """The sandbox's admission policy for an update or patch (see :mod:`usher.sandbox.admission`)."""
        if self.store.exists(rt, str(target.name), target.namespace):
            current = self.store.get_stored(rt, str(target.name), target.namespace).obj
            check_scenario_write(rt, current, request.param("fieldManager"), request.header("content-type"))

    def _get(self, request: Request, rt: ResourceType, target: Route) -> Response:
        stored = self.store.get_stored(rt, str(target.name), target.namespace)
        if wants_table(request):
            return self._table_response(rt, [stored], {"resourceVersion": str(stored.rv)}, request)
        check_acceptable(request)
        return stored_response(200, stored)

    def _delete(self, request: Request, rt: ResourceType, target: Route) -> Response:
        options = delete_options(request)
        current = self.store.get_stored(rt, str(target.name), target.namespace)
        self.store.admit(AdmissionAttempt(AdmissionOperation.DELETE, rt, str(target.name), target.namespace, None, current.obj))
        deleted = self.store.delete_stored(
            rt,
            str(target.name),
            target.namespace,
            options.get("preconditions"),
            grace_period=options.get("gracePeriodSeconds"),
            propagation=options.get("propagationPolicy"),
        )
        if rt.resource is Resource.PODS or self.store.exists(rt, str(target.name), target.namespace):
            return stored_response(200, deleted)
        meta = deleted.obj["metadata"]
        details: JsonObject = {
            "name": meta["name"],
            **({"group": rt.group} if rt.group else {}),
            "kind": str(rt.resource),
            "uid": meta["uid"],
        }
        return success(200, details)

    # ------------------------------------------------------------------ list and watch

    def _filter(self, request: Request, rt: ResourceType, namespace: str | None) -> Filter:
        return self.store.filter(rt, namespace, request.param("labelSelector"), request.param("fieldSelector"))

    def _list(self, request: Request, rt: ResourceType, namespace: str | None) -> Response:
        as_table = wants_table(request)
        if not as_table:
            check_acceptable(request)
        continue_token = request.param("continue")
        self._check_list_version(request, bool(continue_token))
        result = self.store.select(
            rt, self._filter(request, rt, namespace), limit=query_int(request, "limit"), continue_token=continue_token
        )
        if as_table:
            return self._table_response(rt, result.items, result.metadata(), request)
        return Response(200, {"content-type": _JSON}, result.raw())

    def _check_list_version(self, request: Request, continuing: bool) -> None:
        text = request.param("resourceVersion")
        if not text:
            return
        if continuing:
            raise ApiError.bad_request("specifying resource version is not allowed when using continue")
        wanted, current = parse_resource_version(text), self.store.resource_version
        if wanted > current:
            raise _too_large(wanted, current)
        if request.param("resourceVersionMatch") == "Exact" and wanted not in (0, current):
            raise ApiError.expired(f"too old resource version: {wanted} ({current})")

    def _table_response(
        self, rt: ResourceType, items: Iterable[Stored], meta: JsonObject, request: Request
    ) -> Response:
        include = include_object(request)
        body = table(rt, items, self.store.clock(), include, meta)
        return Response.json(200, body, {"content-type": _TABLE_CONTENT_TYPE})

    async def _wait_for_version(self, request: Request, verb: Verb) -> None:
        """Give the store up to ``too_large_wait`` seconds to reach the resourceVersion asked for,
        as the watch cache does before it answers "Too large resource version"."""
        text = request.param("resourceVersion")
        if not text or request.param("continue"):
            return
        if verb is Verb.WATCH and (request.param("sendInitialEvents") or "").lower() == "true":
            return
        wanted = parse_resource_version(text)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.too_large_wait
        while self.store.resource_version < wanted and loop.time() < deadline:
            await asyncio.sleep(min(0.02, max(0.0, deadline - loop.time())))

    def _watch(self, request: Request, rt: ResourceType, namespace: str | None, drop_after: int | None) -> Response:
        flt = self._filter(request, rt, namespace)
        initial = (request.param("sendInitialEvents") or "").lower() == "true"
        version = "" if initial else request.param("resourceVersion")
        wanted, current = parse_resource_version(version), self.store.resource_version
        if wanted > current:
            raise _WatchExpired(_too_large(wanted, current))
        try:
            subscription = self.store.subscribe(rt, flt, version)
        except ApiError as error:
            if error.code != 410:
                raise
            raise _WatchExpired(error) from None
        options = _WatchOptions(
            bookmarks=(request.param("allowWatchBookmarks") or "").lower() == "true",
            timeout=query_int(request, "timeoutSeconds"),
            initial_events=subscription.pending() if initial else None,
            table=include_object(request) if wants_table(request) else None,
            drop_after=drop_after,
        )
        return Response(200, {"content-type": _JSON}, stream=self._watch_stream(subscription, options))

    async def _watch_stream(self, subscription: Subscription, options: _WatchOptions) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + options.timeout if options.timeout else None
        next_bookmark = loop.time() + self.bookmark_interval
        sent, initial_left = 0, options.initial_events
        try:
            while deadline is None or loop.time() < deadline:
                if options.drop_after is not None and sent >= options.drop_after:
                    raise AbortConnection
                if initial_left == 0:
                    initial_left = None
                    yield self._bookmark(subscription.rt, initial_end=True)
                if options.bookmarks and loop.time() >= next_bookmark and not subscription.pending():
                    next_bookmark = loop.time() + self.bookmark_interval
                    yield self._bookmark(subscription.rt)
                waits = [
                    t - loop.time() for t in (deadline, next_bookmark if options.bookmarks else None) if t is not None
                ]
                event = await subscription.get(max(0.0, min(waits)) if waits else None)
                if event is None:
                    if subscription.closed:
                        return
                    continue
                # the events queued already go out in one write: kube-apiserver too flushes a
                # watch's response only when no more events wait (one flush per burst, not per event)
                lines: list[bytes] = []
                while event is not None:
                    sent += 1
                    if initial_left:
                        initial_left -= 1
                    lines.append(self._event_line(subscription.rt, event, options))
                    if initial_left == 0 or len(lines) >= WATCH_BATCH:
                        break  # the initial events' bookmark comes right after them
                    if options.drop_after is not None and sent >= options.drop_after:
                        break
                    event = subscription.take()
                yield b"".join(lines)
        finally:
            subscription.close()

    def _bookmark(self, rt: ResourceType, initial_end: bool = False) -> bytes:
        meta: JsonObject = {"resourceVersion": str(self.store.resource_version)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        obj = {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}
        return json.dumps({"type": EventType.BOOKMARK, "object": obj}, separators=(",", ":")).encode() + b"\n"

    def _event_line(self, rt: ResourceType, event: WatchEvent, options: _WatchOptions) -> bytes:
        if options.table is None:
            return event.line()
        obj = table(rt, [event.stored], self.store.clock(), options.table, {"resourceVersion": event.resource_version})
        return json.dumps({"type": event.type, "object": obj}, separators=(",", ":")).encode() + b"\n"

    # ------------------------------------------------------------------ binding and eviction

    def _bind(self, request: Request, target: Route) -> Response:
        binding = body_object(request)
        meta = binding.get("metadata") or {}
        name = target.name or meta.get("name")
        if target.name is not None and meta.get("name") not in (None, target.name):
            raise ApiError.bad_request("name in URL does not match name in Binding object")
        pods = RESOURCE_TYPES[Resource.PODS]
        node = (binding.get("target") or {}).get("name")
        if not name or not node:
            raise ApiError.invalid(pods, name or "", "target.name", "FieldValueRequired", "Required value")
        pod = self.store.get_stored(Resource.PODS, name, target.namespace)
        sent = {**binding, "apiVersion": "v1", "kind": "Binding"}
        self.store.admit(AdmissionAttempt(AdmissionOperation.CREATE, pods, name, target.namespace, sent, None, "binding",
                                          ("", "v1", "Binding")))
        if (uid := meta.get("uid")) and uid != pod.obj["metadata"]["uid"]:
            raise ApiError.conflict(
                pods, name, f"the UID in the binding ({uid}) does not match the pod's", subresource="binding"
            )
        if bound := pod.obj.get("spec", {}).get("nodeName"):
            raise ApiError.conflict(
                pods, name, f'pod {name} is already assigned to node "{bound}"', subresource="binding"
            )
        if pod.obj["metadata"].get("deletionTimestamp"):
            raise ApiError.conflict(
                pods, name, f"pod {name} is being deleted, cannot be assigned to a host", subresource="binding"
            )
        self.store.commit_update(pods, pod, self._bound(pod.copy(), node, meta.get("annotations") or {}))
        return success(201)

    def _bound(self, pod: JsonObject, node: str, annotations: JsonObject) -> JsonObject:
        pod["spec"]["nodeName"] = node
        if annotations:
            pod["metadata"]["annotations"] = {**(pod["metadata"].get("annotations") or {}), **annotations}
        status = pod.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append(
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": self.store.now()}
        )
        status["conditions"] = conditions
        return pod

    def _log(self, request: Request, target: Route) -> Response:
        """A container's log (``text/plain``), as the kubelet would serve it: see :mod:`.podlogs`."""
        pod = self.store.get_stored(Resource.PODS, str(target.name), target.namespace).obj
        params = {k: v[0] for k, v in request.query.items()}
        return Response.text(200, pod_log(pod, params, self.store.clock()))

    def _evict(self, request: Request, target: Route) -> Response:
        eviction = body_object(request)
        meta = eviction.get("metadata") or {}
        if meta.get("name") not in (None, target.name):
            raise ApiError.bad_request("name in URL does not match name in Eviction object")
        pod = self.store.get_stored(Resource.PODS, str(target.name), target.namespace)
        options = eviction.get("deleteOptions") or {}
        dry_run = eviction_dry_run(request.query.get("dryRun") or [], options.get("dryRun") or [])
        sent = {**eviction, "apiVersion": "policy/v1", "kind": "Eviction"}
        self.store.admit(AdmissionAttempt(AdmissionOperation.CREATE, RESOURCE_TYPES[Resource.PODS], str(target.name),
                                          target.namespace, sent, None, "eviction", ("policy", "v1", "Eviction"), dry_run))
        if pod.obj.get("status", {}).get("phase") == "Running" and not pod.obj["metadata"].get("deletionTimestamp"):
            self._check_budgets(pod.obj)  # a pod already being deleted (or not running) takes nothing from a budget
        pods = RESOURCE_TYPES[Resource.PODS]
        preconditions = options.get("preconditions")
        if dry_run:
            # checked as for real (budgets, preconditions), nothing changed (kubectl drain --dry-run=server)
            check_preconditions(pods, pod, preconditions or {})
            return success(201)
        if pod.obj.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
            check_preconditions(pods, pod, preconditions or {})
            pod = self._disruption_target(pod)
            preconditions = {"uid": pod.obj["metadata"]["uid"]}
        self.store.delete_stored(
            pods,
            str(target.name),
            target.namespace,
            preconditions,
            grace_period=options.get("gracePeriodSeconds"),
        )
        return success(201)

    def _disruption_target(self, pod: Stored) -> Stored:
        """The condition the eviction API adds before it deletes a pod (as a real API server)."""
        new = pod.copy()
        status = new.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "DisruptionTarget"]
        conditions.append({"type": "DisruptionTarget", "status": "True", "lastProbeTime": None,
                           "lastTransitionTime": self.store.now(), "reason": "EvictionByEvictionAPI",
                           "message": "Eviction API: evicting"})
        status["conditions"] = conditions
        return self.store.commit_update(RESOURCE_TYPES[Resource.PODS], pod, new)

    def _check_budgets(self, pod: JsonObject) -> None:
        budgets = self.disruption.budgets_for(pod)
        if len(budgets) > 1:
            raise ApiError(
                500,
                Reason.INTERNAL_ERROR,
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            )
        if not budgets:
            return
        pdb = budgets[0].obj
        budget = self.disruption.budget(pdb)
        policy = pdb.get("spec", {}).get("unhealthyPodEvictionPolicy", "IfHealthyBudget")
        if pod_healthy(pod):
            allowed = budget.allowed > 0
        else:
            allowed = policy == "AlwaysAllow" or budget.healthy >= budget.desired
        if not allowed:
            cause = {
                "reason": "DisruptionBudget",
                "message": f"The disruption budget {pdb['metadata']['name']} needs {budget.desired} healthy pods "
                f"and has {budget.healthy} currently",
            }
            raise ApiError(
                429,
                Reason.TOO_MANY_REQUESTS,
                "Cannot evict pod as it would violate the pod's disruption budget.",
                {"causes": [cause]},
            )


@dataclass(frozen=True, slots=True)
class _WatchOptions:
    bookmarks: bool
    timeout: int | None
    initial_events: int | None
    """With ``sendInitialEvents``: how many initial events precede the initial-events-end bookmark."""
    table: IncludeObject | None
    drop_after: int | None


class _WatchExpired(ApiError):
    """A watch that cannot start (too old or too large a resourceVersion): answered as an HTTP 200
    stream holding one ERROR event."""

    def __init__(self, error: ApiError) -> None:
        super().__init__(error.code, error.reason, error.message, error.details)


def _too_large(wanted: int, current: int) -> ApiError:
    """kube-apiserver's ``NewTooLargeResourceVersionError``: a 504 Timeout with its cause."""
    return ApiError(
        504,
        Reason.TIMEOUT,
        f"Timeout: Too large resource version: {wanted}, current: {current}",
        {
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        },
    )


async def _silence() -> AsyncIterator[bytes]:
    """A stream that never sends anything and never ends (until the connection goes)."""
    await asyncio.Event().wait()
    yield b""


def _error_event(error: ApiError) -> bytes:
    return json.dumps({"type": EventType.ERROR, "object": error.status()}, separators=(",", ":")).encode() + b"\n"


class ServerThread:
    """A :class:`FakeApiServer` on an event loop of its own, in a daemon thread; a context manager.

    For synchronous clients (the official ``kubernetes`` client, ``kubectl`` in a subprocess)::

        with ServerThread() as sandbox:
            api = CoreV1Api(ApiClient(Configuration(host=sandbox.url)))
            sandbox.call(sandbox.server.store.create, "nodes", {"metadata": {"name": "n1"}})

    The store is not thread-safe: touch it from other threads only through :meth:`call`.
    """

    def __init__(self, server: FakeApiServer | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.server = server if server is not None else FakeApiServer()
        self.url = ""
        self._address = (host, port)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        """Start the thread and the server; return the server's URL."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="usher-fake-apiserver", daemon=True)
        self._thread.start()
        self.call(self.server.start, *self._address)
        self.url = self.server.url
        return self.url

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` on the server's loop (awaiting it if it returns an awaitable) and return its result."""
        if self._loop is None:
            raise RuntimeError("the server thread is not running")

        async def run() -> Any:
            result = fn(*args)
            return await result if inspect.isawaitable(result) else result

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result()

    def stop(self) -> None:
        """Stop the server, then the loop and the thread."""
        if self._loop is None or self._thread is None:
            return
        self.call(self.server.stop)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["KUBERNETES_VERSION", "FakeApiServer", "Fault", "FaultKind", "RequestRecord", "ServerThread"]

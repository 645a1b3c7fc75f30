"""ValidatingAdmissionPolicies (``admissionregistration.k8s.io/v1``), evaluated with CEL as kube-apiserver does.

A cluster's operators write policies in CEL and bind them; the API server evaluates every bound
policy on every write it matches, for every user (``system:masters`` included: admission is not
authorization). The sandbox does the same with :class:`PolicyEvaluator`, a validating admission
hook of the store (:attr:`usher.sandbox.store.Store.admission`), so a policy shipped in
``deploy/`` is tested for real: creates, updates and patches (a patch is an ``UPDATE`` of the
whole object), ``status`` writes, deletes, and the API server's ``pods/binding`` and
``pods/eviction`` (``CREATE`` of a Binding or an Eviction on the subresource).

Per binding (in name order) and its policy, as the admission plugin's dispatcher:

1. **match**: the policy's ``matchConstraints`` and then the binding's ``matchResources`` (absent:
   everything): ``resourceRules`` (``apiGroups``, ``apiVersions``, ``operations``, ``resources``
   with ``pods/status``-style subresources and ``*``, ``resourceNames``, ``scope``) of which one
   must match and none of ``excludeResourceRules``; ``namespaceSelector`` (cluster-scoped
   requests always match it; a Namespace is matched by its own labels) and ``objectSelector``
   (the new or the old object's labels). Writes to the admissionregistration resources themselves
   are never matched, as in the real server (no policy can lock itself in).
2. **matchConditions**, in order: one ``false`` skips the policy; an error applies the failure policy.
3. **variables** are evaluated in order, each seeing the earlier ones; one that fails is an error
   only for the expressions that use it (CEL's lazy variables).
4. **validations**: a ``false`` expression is a violation whose message is the
   ``messageExpression``'s (a non-empty one-line string), else ``message``, else ``failed
   expression: <expression>``, and whose ``reason`` (default ``Invalid``) sets the status code
   (``Forbidden`` 403, ``Invalid`` 422, ...). An expression that fails to compile or evaluate is a
   violation ``expression '<e>' resulted in error: ...`` under ``failurePolicy: Fail`` (the
   default) and nothing under ``Ignore``.
5. **validationActions** of the binding: ``Deny`` refuses the request with the first violation,
   ``ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request: <message>``;
   ``Warn`` adds ``Validation failed for ValidatingAdmissionPolicy ...`` to the response's
   ``Warning`` header; ``Audit`` is accepted and does nothing (the sandbox keeps no audit log).

The CEL variables are ``object`` and ``oldObject`` (``null`` for a create or a delete),
``request`` (``operation``, ``userInfo`` with ``username``, ``uid``, ``groups`` and ``extra``,
``name``, ``namespace``, ``kind``, ``resource``, ``subResource``, ``requestKind``,
``requestResource``, ``dryRun``), ``namespaceObject`` (the request's Namespace, ``null`` for
cluster-scoped requests) and ``variables``. CEL itself is ``cel-python`` (``celpy``): the
standard language and macros, without Kubernetes' extension libraries (``quantity()``,
``isSorted()``, regex ``find`` ...), whose use fails as an evaluation error.

**Refused, not ignored**: a policy with ``paramKind`` or a binding with ``paramRef`` (parameters
are not resolved), and any expression naming ``authorizer``, are errors of the policy: under
``failurePolicy: Fail`` every request the policy matches is denied with a message saying the
sandbox cannot evaluate it; under ``Ignore`` it is skipped with a ``Warning`` saying so.

Who writes: the API server puts each request's user into :data:`CURRENT` (:func:`acting_as`);
the sandbox's in-process components (kubelet, scheduler, workload controllers, test harnesses
writing to the store) write as :data:`IN_PROCESS_USER` unless they say otherwise. Their writes
through ``commit_update`` (a kubelet's status, a scheduler's binding) skip admission.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import celpy
from celpy import celtypes

from usher.sandbox.authn import AUTHENTICATED, UserInfo
from usher.sandbox.kinds import Resource
from usher.sandbox.store import (
    ApiError,
    Attempt,
    Change,
    JsonObject,
    LabelSelector,
    Operation,
    Reason,
    Store,
)

ADMISSION_GROUP = "admissionregistration.k8s.io"
IN_PROCESS_USER = UserInfo("system:kube-controller-manager", (AUTHENTICATED,))
"""Who the sandbox's own components are when they write to the store outside any request."""


@dataclass(slots=True)
class RequestContext:
    """Who is writing in this request, and the warnings admission adds to its response."""

    user: UserInfo
    warnings: list[str] = field(default_factory=list)


CURRENT: ContextVar[RequestContext | None] = ContextVar("usher_sandbox_request", default=None)


@contextlib.contextmanager
def acting_as(user: UserInfo) -> Iterator[RequestContext]:
    """Writes in this block are ``user``'s (the API server wraps each request in one)."""
    context = RequestContext(user)
    token = CURRENT.set(context)
    try:
        yield context
    finally:
        CURRENT.reset(token)


class FailurePolicy(StrEnum):
    FAIL = "Fail"
    IGNORE = "Ignore"


class Action(StrEnum):
    """A binding's ``validationActions``."""

    DENY = "Deny"
    WARN = "Warn"
    AUDIT = "Audit"


_CODES = {
    Reason.FORBIDDEN: 403, Reason.INVALID: 422, Reason.NOT_FOUND: 404, Reason.ALREADY_EXISTS: 409,
    Reason.CONFLICT: 409, Reason.GONE: 410, Reason.TIMEOUT: 504, Reason.TOO_MANY_REQUESTS: 429,
    Reason.BAD_REQUEST: 400, Reason.METHOD_NOT_ALLOWED: 405, Reason.NOT_ACCEPTABLE: 406,
    Reason.UNSUPPORTED_MEDIA_TYPE: 415, Reason.INTERNAL_ERROR: 500, Reason.SERVICE_UNAVAILABLE: 503,
    Reason.UNAUTHORIZED: 401, "RequestEntityTooLarge": 413,
}
_AUTHORIZER = re.compile(r"\bauthorizer\b")


@dataclass(frozen=True, slots=True)
class Violation:
    """One failed validation (or a policy error under ``failurePolicy: Fail``)."""

    message: str
    reason: str = str(Reason.INVALID)


class _Unsupported(Exception):
    """A policy the sandbox cannot evaluate; the message says why."""


class _Program:
    """One compiled CEL expression (or why it cannot run)."""

    def __init__(self, env: celpy.Environment, expression: str) -> None:
        self.expression = expression
        self.error: str | None = None
        self.runner: Any = None
        if _AUTHORIZER.search(expression):
            self.error = "the sandbox does not evaluate authorizer checks in CEL"
            return
        try:
            self.runner = env.program(env.compile(expression))
        except Exception as error:  # celpy raises CELParseError and others on a bad expression
            self.error = f"compilation failed: {error}"

    def run(self, activation: Mapping[str, Any]) -> Any:
        """The value, or raises :class:`CelFailure`."""
        if self.error is not None:
            raise CelFailure(f"expression '{self.expression.strip()}' resulted in error: {self.error}")
        try:
            return self.runner.evaluate(dict(activation))
        except Exception as error:  # CELEvalError, and whatever an unsupported function raises
            raise CelFailure(f"expression '{self.expression.strip()}' resulted in error: {_describe(error)}") from None


class CelFailure(Exception):
    """An expression that could not be evaluated."""


def _describe(error: Exception) -> str:
    args = getattr(error, "args", ())
    return str(args[0]) if args else str(error)


class PolicyEvaluator:
    """The ValidatingAdmissionPolicy plugin over a store's policies and bindings."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._env = celpy.Environment()
        self._programs: dict[str, _Program] = {}
        self._policies: dict[str, JsonObject] | None = None
        self._bindings: list[JsonObject] | None = None
        store.add_listener(self._on_change)
        store.admission.append(self.admit)

    def _on_change(self, change: Change) -> None:
        if change.rt.group == ADMISSION_GROUP:
            self._policies = self._bindings = None

    def _load(self) -> tuple[dict[str, JsonObject], list[JsonObject]]:
        if self._policies is None or self._bindings is None:
            self._policies = {s.obj["metadata"]["name"]: s.obj for s in self.store.list(Resource.VALIDATINGADMISSIONPOLICIES).items}
            self._bindings = [s.obj for s in self.store.list(Resource.VALIDATINGADMISSIONPOLICYBINDINGS).items]
        return self._policies, self._bindings

    def _program(self, expression: str) -> _Program:
        program = self._programs.get(expression)
        if program is None:
            program = self._programs[expression] = _Program(self._env, expression)
        return program

    # ------------------------------------------------------------------ the hook

    def admit(self, attempt: Attempt) -> None:
        """Evaluate every bound policy that matches ``attempt``; raise the first denial."""
        if attempt.rt.group == ADMISSION_GROUP:
            return
        policies, bindings = self._load()
        if not bindings:
            return
        context = CURRENT.get()
        user = context.user if context is not None else IN_PROCESS_USER
        for binding in bindings:
            policy = policies.get(str((binding.get("spec") or {}).get("policyName") or ""))
            if policy is None:
                continue  # a binding of a policy that does not exist binds nothing
            violations = self.check(policy, binding, attempt, user)
            if violations:
                self._act(policy, binding, attempt, violations)

    def check(self, policy: JsonObject, binding: JsonObject, attempt: Attempt, user: UserInfo) -> list[Violation] | None:
        """What one policy under one binding says of a write by ``user``: ``None`` when it does
        not apply (no match, or a match condition false), else its violations (none: allowed)."""
        pspec, bspec = policy.get("spec") or {}, binding.get("spec") or {}
        namespace = self._namespace(attempt)
        if not _matches(pspec.get("matchConstraints"), attempt, namespace):
            return None
        if bspec.get("matchResources") is not None and not _matches(bspec["matchResources"], attempt, namespace):
            return None
        failure = FailurePolicy(pspec.get("failurePolicy") or FailurePolicy.FAIL)
        try:
            return self._evaluate(pspec, bspec, attempt, user, namespace, failure)
        except _Unsupported as why:
            if failure is FailurePolicy.IGNORE:
                _warn(f"ValidatingAdmissionPolicy '{policy['metadata']['name']}' with binding "
                      f"'{binding['metadata']['name']}' was not evaluated: {why}")
                return None
            return [Violation(str(why))]

    def _act(self, policy: JsonObject, binding: JsonObject, attempt: Attempt, violations: list[Violation]) -> None:
        if not violations:
            return
        names = f"ValidatingAdmissionPolicy '{policy['metadata']['name']}' with binding '{binding['metadata']['name']}'"
        actions = [Action(a) for a in (binding.get("spec") or {}).get("validationActions") or [] if a in Action._value2member_map_]
        if Action.WARN in actions:
            for v in violations:
                _warn(f"Validation failed for {names}: {v.message}")
        if Action.DENY in actions:
            first = violations[0]
            message = f"{names} denied request: {first.message}"
            group = attempt.rt.group
            resource = f"{attempt.rt.resource}.{group}" if group else str(attempt.rt.resource)
            name = attempt.name
            details: JsonObject = {"name": name, **({"group": group} if group else {}), "kind": str(attempt.rt.resource),
                                   "causes": [{"message": message}]}
            raise ApiError(_CODES.get(first.reason, 400), first.reason, f'{resource} "{name}" is forbidden: {message}', details)

    # ------------------------------------------------------------------ evaluation

    def _evaluate(
        self, pspec: JsonObject, bspec: JsonObject, attempt: Attempt, user: UserInfo,
        namespace: JsonObject | None, failure: FailurePolicy,
    ) -> list[Violation] | None:
        if pspec.get("paramKind") is not None:
            raise _Unsupported("the sandbox does not evaluate policies with parameters (spec.paramKind)")
        if bspec.get("paramRef") is not None:
            raise _Unsupported("the sandbox does not evaluate bindings with parameters (spec.paramRef)")
        activation: dict[str, Any] = {
            "object": celpy.json_to_cel(attempt.obj),
            "oldObject": celpy.json_to_cel(attempt.old),
            "request": celpy.json_to_cel(_request(attempt, user)),
            "namespaceObject": celpy.json_to_cel(namespace),
            "variables": celtypes.MapType({}),
        }
        errors: list[Violation] = []
        for condition in pspec.get("matchConditions") or []:
            try:
                if not bool(self._program(str(condition.get("expression") or "")).run(activation)):
                    return None
            except CelFailure as failed:
                errors.append(Violation(f"matchCondition '{condition.get('name')}': {failed}"))
        if errors:
            return errors if failure is FailurePolicy.FAIL else []
        variables: dict[Any, Any] = {}
        for variable in pspec.get("variables") or []:
            activation["variables"] = celtypes.MapType(variables)
            key = celtypes.StringType(str(variable.get("name") or ""))
            try:
                variables[key] = self._program(str(variable.get("expression") or "")).run(activation)
            except CelFailure as failed:
                variables[key] = celpy.CELEvalError(str(failed))
        activation["variables"] = celtypes.MapType(variables)
        violations: list[Violation] = []
        for validation in pspec.get("validations") or []:
            expression = str(validation.get("expression") or "")
            try:
                passed = self._program(expression).run(activation)
            except CelFailure as failed:
                if failure is FailurePolicy.FAIL:
                    violations.append(Violation(str(failed)))
                continue
            if not isinstance(passed, (bool, celtypes.BoolType)):
                if failure is FailurePolicy.FAIL:
                    violations.append(Violation(f"expression '{expression.strip()}' resulted in error: "
                                                f"the expression must evaluate to a bool, not {type(passed).__name__}"))
                continue
            if bool(passed):
                continue
            violations.append(Violation(self._message(validation, activation), str(validation.get("reason") or Reason.INVALID)))
        return violations

    def _message(self, validation: JsonObject, activation: Mapping[str, Any]) -> str:
        """``messageExpression`` if it gives a non-empty line, else ``message``, else the expression."""
        if validation.get("messageExpression"):
            try:
                text = self._program(str(validation["messageExpression"])).run(activation)
            except CelFailure:
                text = None
            if isinstance(text, str) and str(text).strip() and "\n" not in str(text):
                return str(text).strip()
        if validation.get("message"):
            return str(validation["message"]).strip()
        return f"failed expression: {str(validation.get('expression') or '').strip()}"

    def _namespace(self, attempt: Attempt) -> JsonObject | None:
        """The Namespace of a namespaced request (``namespaceObject``), ``None`` otherwise."""
        if not attempt.rt.namespaced or not attempt.namespace:
            return None
        if not self.store.exists(Resource.NAMESPACES, attempt.namespace):
            return None
        return self.store.get_stored(Resource.NAMESPACES, attempt.namespace).copy()


def _warn(message: str) -> None:
    context = CURRENT.get()
    if context is not None:
        context.warnings.append(message)


def _request(attempt: Attempt, user: UserInfo) -> JsonObject:
    """The ``request`` variable (an AdmissionRequest without the objects)."""
    rt = attempt.rt
    group, version, kind = attempt.kind or (rt.group, rt.version, rt.kind)
    resource = {"group": rt.group, "version": rt.version, "resource": str(rt.resource)}
    return {
        "operation": str(attempt.operation),
        "userInfo": {"username": user.name, "uid": user.uid, "groups": list(user.groups),
                     "extra": {k: list(v) for k, v in user.extra}},
        "name": attempt.name,
        "namespace": attempt.namespace or "",
        "kind": {"group": group, "version": version, "kind": kind},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "resource": resource,
        "requestResource": resource,
        "subResource": attempt.subresource,
        "requestSubResource": attempt.subresource,
        "dryRun": attempt.dry_run,
    }


# --------------------------------------------------------------------------- matching


def _matches(match: JsonObject | None, attempt: Attempt, namespace: JsonObject | None) -> bool:
    """Whether a ``MatchResources`` matches the request (absent or empty: everything)."""
    match = match or {}
    if not _namespace_selected(match.get("namespaceSelector"), attempt, namespace):
        return False
    selector = match.get("objectSelector")
    if selector:
        chosen = LabelSelector.from_spec(selector)
        if not any(chosen.matches(((o or {}).get("metadata") or {}).get("labels") or {}) for o in (attempt.obj, attempt.old)
                   if o is not None):
            return False
    if any(_rule_matches(rule, attempt) for rule in match.get("excludeResourceRules") or []):
        return False
    rules = match.get("resourceRules") or []
    return not rules or any(_rule_matches(rule, attempt) for rule in rules)


def _namespace_selected(selector: JsonObject | None, attempt: Attempt, namespace: JsonObject | None) -> bool:
    if not selector:
        return True
    if attempt.rt.resource == Resource.NAMESPACES and not attempt.rt.group:
        labels = (((attempt.obj or attempt.old) or {}).get("metadata") or {}).get("labels") or {}
    elif not attempt.namespace:
        return True  # a cluster-scoped request is never exempted by a namespace selector
    else:
        labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    return LabelSelector.from_spec(selector).matches(labels)


def _any(values: Any, wanted: str) -> bool:
    values = values or []
    return "*" in values or wanted in values


def _rule_matches(rule: JsonObject, attempt: Attempt) -> bool:
    """One ``NamedRuleWithOperations`` (``admission/plugin/webhook/predicates/rules``)."""
    rt = attempt.rt
    if not _any(rule.get("operations"), str(attempt.operation)):
        return False
    if not _any(rule.get("apiGroups"), rt.group) or not _any(rule.get("apiVersions"), rt.version):
        return False
    scope = rule.get("scope") or "*"
    is_namespace = rt.resource == Resource.NAMESPACES and not rt.group
    if scope == "Cluster" and attempt.namespace and not is_namespace:
        return False
    if scope == "Namespaced" and (not attempt.namespace or (is_namespace and not attempt.subresource)):
        return False
    names = rule.get("resourceNames") or []
    if names and attempt.name not in names:
        return False
    for text in rule.get("resources") or []:
        resource, _, sub = str(text).partition("/")
        if (resource in ("*", rt.resource)) and (sub == "*" or sub == attempt.subresource):
            return True
    return False


__all__ = ["CURRENT", "IN_PROCESS_USER", "PolicyEvaluator", "RequestContext", "acting_as", "Operation"]

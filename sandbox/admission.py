"""The sandbox's own admission policy: the scenario's queue config is not replaced by ``kubectl apply``.

``usher sandbox FILE`` writes the scenario's queues into ConfigMap ``usher-system/usher-queues``
and marks it with the annotation :data:`SCENARIO_ANNOTATION`. ``deploy/`` ships a ConfigMap of
the same name (an example config for a real cluster), so ``kubectl apply -f deploy/`` on a
sandbox would silently replace the scenario's queues with the example's. A real cluster guards
such objects with a ValidatingAdmissionPolicy; the sandbox does the same for this one object:
an *apply* (client-side, by the field manager kubectl sends, or server-side) of a ConfigMap
that carries the annotation is denied with ``403 Forbidden`` and a message that says what to do.
Edits that are not applies (``kubectl edit``, the console's quota form, usher's own merges)
go through, as do applies once the annotation is removed.
"""

from __future__ import annotations

from .store import ApiError, Reason, ResourceType

SCENARIO_ANNOTATION = "sandbox.usher/scenario"
"""On an object the sandbox created from the scenario; its value names the scenario."""

POLICY_NAME = "usher-sandbox-scenario-objects"

_APPLY_MANAGERS = ("kubectl-client-side-apply", "kubectl")
_APPLY_PATCH = "application/apply-patch+yaml"


def is_apply(field_manager: str | None, content_type: str | None) -> bool:
    """Whether a write is an apply: server-side apply, or kubectl's client-side apply."""
    if (content_type or "").split(";")[0].strip() == _APPLY_PATCH:
        return True
    return field_manager in _APPLY_MANAGERS


def check_scenario_write(
    rt: ResourceType, current: dict | None, field_manager: str | None, content_type: str | None
) -> None:
    """Deny an apply to an object the scenario owns (403, as a ValidatingAdmissionPolicy denies)."""
    if current is None or not is_apply(field_manager, content_type):
        return
    meta = current.get("metadata") or {}
    scenario = (meta.get("annotations") or {}).get(SCENARIO_ANNOTATION)
    if scenario is None:
        return
    name, namespace = meta.get("name", ""), meta.get("namespace", "")
    message = (
        f'{rt.group_resource} "{name}" is forbidden: ValidatingAdmissionPolicy \'{POLICY_NAME}\' denied request: '
        f"{namespace}/{name} holds the queues of the sandbox's scenario {scenario!r}; kubectl apply would replace "
        f"them. Edit it in place (kubectl edit, or the console's quota form), or release it first with "
        f"`kubectl annotate -n {namespace} {rt.resource} {name} {SCENARIO_ANNOTATION}-` to apply your own."
    )
    raise ApiError(403, Reason.FORBIDDEN, message, {"name": name, "kind": str(rt.resource)})
